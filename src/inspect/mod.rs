//! What is true now: `verify` (the build, the torch it went into, the
//! links, the runtime), `doctor` (this machine), `status`, with `checks`
//! (the report shape). It reads every wing below it and is read by none.

pub(crate) mod checks;
pub(crate) mod doctor;
pub(crate) mod glance;
pub(crate) mod kernels;
pub(crate) mod libraries;
pub(crate) mod status;
pub(crate) mod verify;
