//! `build`: profile -> source -> patch -> cmake -> prefix, tied together by
//! `pipeline`; `git`, `launcher`, `tools` and `workdir` serve the stages, and
//! `series` holds the `patches` verbs.

pub(crate) mod cmake;
pub(crate) mod compat;
pub(crate) mod git;
pub(crate) mod launcher;
pub mod patch;
pub(crate) mod pipeline;
pub mod profile;
pub(crate) mod series;
pub(crate) mod source;
pub(crate) mod tools;
pub(crate) mod workdir;
