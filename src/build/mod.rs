//! `build`: profile -> source -> patch -> cmake -> prefix, tied together by
//! `pipeline`; `launcher`, `tools` and `workdir` serve the stages.

pub mod cmake;
pub mod launcher;
pub mod patch;
pub mod pipeline;
pub mod prefix;
pub mod profile;
pub mod source;
pub mod tools;
pub mod workdir;
