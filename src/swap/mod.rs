//! The swap into torch (found by `crate::torch`): `relink` fits the library to it,
//! `linker` (`crate::loader`) works out what the loader would load (reading
//! ELF headers and `ld_cache`, running nothing), `txn` journals the swap, `into_torch` is the
//! operation of `install --into-torch` (`checked_build` the build it installs),
//! `out_of_torch` that of `rollback`. What HSA_OVERRIDE_GFX_VERSION torch's
//! GPU code needs is the plan's (`crate::plan::advice`).

pub(crate) mod blas;
pub(crate) mod checked_build;
pub(crate) mod dry_run;
pub(crate) mod into_system;
pub(crate) mod into_torch;
pub(crate) mod kernel_cache;
/// What the loader would load (`crate::loader`, which the compile child
/// reads too), by the name the swap's modules know it.
pub use crate::loader as linker;
pub(crate) mod links;
pub(crate) mod out_of_torch;
pub(crate) mod relink;
pub(crate) mod route;
pub(crate) mod source;
pub mod txn;
