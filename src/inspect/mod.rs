//! What is true now: `verify` (the build, the torch it went into, the
//! links, the runtime), `doctor` (this machine), `status`, with `gpu` (KFD
//! topology), `advice` (the HSA_OVERRIDE_GFX_VERSION advice from torch's GPU
//! code) and `checks` (the report shape).

pub(crate) mod advice;
pub(crate) mod checks;
pub(crate) mod doctor;
pub(crate) mod gpu;
pub(crate) mod status;
pub(crate) mod verify;
