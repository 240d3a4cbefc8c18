//! What is true now: `verify` (the build, the torch it went into, the
//! links, the runtime), `doctor` (this machine), `status`, with `gpu` (KFD
//! topology), `fatbin` (GPU code objects) and `checks` (the report shape).

pub mod checks;
pub mod doctor;
pub mod fatbin;
pub mod gpu;
pub mod status;
pub mod verify;
