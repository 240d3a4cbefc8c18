//! What is true now: `verify` (the build, the torch it went into, the
//! links, the runtime), `doctor` (this machine), `status`, with `gpu` (KFD
//! topology), `fatbin` (GPU code objects) and `checks` (the report shape).

pub(crate) mod checks;
pub(crate) mod doctor;
pub(crate) mod fatbin;
pub(crate) mod gpu;
pub(crate) mod status;
pub(crate) mod verify;
