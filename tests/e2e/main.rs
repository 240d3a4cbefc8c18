//! End-to-end tests: the real binary against real git, CMake, a compiler and
//! md5sum, on the miopen-mini fixture. One test binary, so the fixtures and
//! the binary are built once.

mod build;
mod comgr;
mod compat;
mod conventions;
mod detection;
mod examples;
mod first_contact;
mod hostile;
mod house;
mod in_place;
mod launcher;
mod linker;
mod miopen;
mod monorepo;
mod newcomer;
mod patches;
mod reliability;
mod rocm_sdk;
mod routes;
mod select;
mod shared;
mod signed;
mod support;
mod targets;
mod torch;
mod verify;
