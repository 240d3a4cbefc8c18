//! doctor's rocBLAS beyond its files: once this tool's build is
//! installed, the rows say by which transaction. What fixes a rocBLAS
//! without the card's code (this tool's build, TheRock's torch, or both
//! to choose from) is the plan's step (plan_rows).

use crate::inspect::libraries::Routes;
use crate::swap::txn::State;
use crate::torch::Torch;

use super::DoctorRequest;

pub(super) fn routes(req: &DoctorRequest, t: &Torch) -> Routes {
    Routes {
        rocblas_fixed_by: fixed_by(req, t),
    }
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
