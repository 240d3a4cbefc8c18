//! `build`: profile -> source -> patch -> cmake -> prefix, tied together by
//! `pipeline`; `git`, `launcher`, `tools` and `workdir` serve the stages, and
//! `patch::verbs` holds the `patches` command's work. The prefix it writes
//! is `crate::prefix`; a shared build it may pull instead is `crate::share`.

pub(crate) mod cmake;
pub(crate) mod compat;
pub(crate) mod git;
pub(crate) mod launcher;
pub mod patch;
pub(crate) mod pipeline;
pub mod profile;
pub(crate) mod source;
pub(crate) mod tools;
pub(crate) mod workdir;
