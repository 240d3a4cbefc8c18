//! doctor's route for rocBLAS (issue 63): where torch's rocBLAS has no
//! code for the card and torch is one its user built (not TheRock's, not
//! pytorch.org's), the fix is this tool's build of rocBLAS for the card,
//! put under torch, with its time; a torch that has no code for the card
//! itself, and anyone without a ROCm torch, is still sent to the torch for
//! the card first. Once installed, the rows say by which transaction.

use crate::builder::profile::{self, Profile};
use crate::inspect::libraries::Routes;
use crate::swap::txn::State;
use crate::torch::Torch;
use crate::version::major_minor;

use super::DoctorRequest;

pub(super) fn routes(req: &DoctorRequest, t: &Torch) -> Routes {
    Routes {
        rocblas: build(req, t),
        rocblas_fixed_by: fixed_by(req, t),
    }
}

/// The build route's fix, when it is this torch's.
fn build(req: &DoctorRequest, t: &Torch) -> Option<String> {
    if !crate::torch::origin::self_built(t)
        || matches!(
            crate::swap::route::chip(t),
            crate::swap::route::Chip::NoCodeFor { .. }
        )
    {
        return None;
    }
    let line = major_minor(t.rocm());
    let fits = |p: &Profile| {
        major_minor(&p.rocm.torch_hip) == line && p.components.contains_key("rocblas")
    };
    let profile = std::iter::once(req.profile.clone())
        .chain(
            profile::builtin_names()
                .iter()
                .filter_map(|n| Profile::load(n).ok()),
        )
        .find(fits)?;
    let time = profile.components["rocblas"]
        .cost
        .as_ref()
        .map_or("its time not yet measured".to_owned(), |c| c.time.clone());
    let cards = crate::gpu::rdna1_targets(&req.stack.sysfs);
    let card = match cards.is_empty() {
        true => "the card".to_owned(),
        false => cards.join(" and "),
    };
    Some(format!(
        "build rocBLAS for {card} with its Tensile kernels, {time}, and put it under this torch as one reversible transaction: `{}`, then `rdna1-patch install rocblas --into-torch`",
        crate::shell::tool(["build", "rocblas", "--profile", &profile.name])
    ))
}

/// The installed rocBLAS transaction whose set torch holds now.
fn fixed_by(req: &DoctorRequest, t: &Torch) -> Option<String> {
    let journals = req.state.as_ref()?.read().ok()?;
    journals
        .list
        .iter()
        .rev()
        .filter(|j| j.state == State::Installed && j.set.is_some() && j.torch.dir == t.dir)
        .find(|j| crate::swap::blas::in_torch(j, crate::checksum::default_jobs()).is_ok())
        .map(|j| format!("transaction {} of {}", j.id, j.created))
}
