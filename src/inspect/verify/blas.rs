//! What verify checks of rocBLAS (issue 63): for each installed rocBLAS
//! transaction of the torch, its library and Tensile directory in torch
//! as the transaction left them, and the prefix it came from against its
//! MD5SUMS, the Tensile files torch holds among them.

use crate::inspect::checks::{CheckReport, Status};
use crate::swap::txn::{Journal, State, StateDir};
use crate::torch::Torch;

/// The installed rocBLAS transactions, newest first.
pub(super) fn installed(state: &StateDir) -> Vec<Journal> {
    let mut out: Vec<Journal> = state
        .read()
        .map(|a| a.list)
        .unwrap_or_default()
        .into_iter()
        .filter(|j| j.state == State::Installed && j.set.is_some())
        .collect();
    out.reverse();
    out
}

/// One `rocblas` row per installed rocBLAS transaction (of `torch`, when
/// one was found).
pub(super) fn rows(journals: &[Journal], torch: Option<&Torch>, jobs: usize, r: &mut CheckReport) {
    for j in journals
        .iter()
        .filter(|j| torch.is_none_or(|t| t.dir == j.torch.dir))
    {
        let set = j.set.as_ref().expect("a rocBLAS journal");
        let s = crate::swap::blas::standing(j, jobs);
        let what = format!(
            "{} (MD5 {}) and {} ({} files)",
            j.torch.target.display(),
            j.new.md5,
            set.dir.display(),
            set.new.files
        );
        let from = format!("from {}", j.build.prefix.display());
        match (s.torch, s.prefix) {
            (Err(now), _) => r.push_fix(
                "rocblas",
                Status::Fail,
                format!(
                    "transaction {} installed {what}, but {now}: something replaced them (a pip install?)",
                    j.id
                ),
                format!(
                    "`rdna1-patch install rocblas --into-torch` installs it again; `{}` closes the transaction",
                    crate::shell::tool(["rollback", "--abandon", &j.id.to_string()])
                ),
            ),
            (Ok(()), Ok(prefix)) => r.push(
                "rocblas",
                Status::Ok,
                format!(
                    "{what} are what transaction {} of {} installed, {from}: {prefix}",
                    j.id, j.created
                ),
            ),
            (Ok(()), Err(bad)) => r.push_fix(
                "rocblas",
                Status::Warn,
                format!(
                    "{what} are what transaction {} of {} installed, {from}, but {bad}",
                    j.id, j.created
                ),
                "torch is as installed; `rdna1-patch build rocblas` makes the prefix whole again",
            ),
        }
    }
}

/// `verify --prefix DIR` of a rocBLAS build: the torch it went into (its
/// libraries read for the card) and its installed transactions.
pub(super) fn named(req: &super::VerifyRequest, rocblas: &[Journal], r: &mut CheckReport) {
    let journals = req.state.read().map(|a| a.list).unwrap_or_default();
    let torch = super::find_torch(req, &journals, r);
    if let Some(t) = &torch {
        super::libraries(req, t, r);
    }
    let mine: Vec<Journal> = rocblas
        .iter()
        .filter(|j| j.build.prefix == req.prefix)
        .cloned()
        .collect();
    if mine.is_empty() {
        r.push_fix(
            "rocblas",
            Status::Fail,
            format!(
                "no installed transaction put the rocBLAS build in {} into torch",
                req.prefix.display()
            ),
            "`rdna1-patch install rocblas --into-torch --prefix DIR` installs it",
        );
    }
    rows(&mine, torch.as_ref(), req.jobs, r);
}
