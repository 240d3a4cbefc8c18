//! End-to-end tests: the real binary against real git, CMake, a compiler and
//! md5sum, on the miopen-mini fixture. One test binary, so the fixtures and
//! the binary are built once.

mod build;
mod comgr;
mod compat;
mod compile_child;
mod contained;
mod conventions;
mod detection;
mod diagnosis;
mod examples;
mod fast;
mod first_contact;
mod hostile;
mod house;
mod in_place;
mod launcher;
mod linker;
mod miopen;
mod monorepo;
mod newcomer;
mod other_user;
mod patches;
mod prefix_guard;
mod privilege;
mod reliability;
mod rocm_sdk;
mod rollback;
mod root_cache;
mod routes;
mod routes_said;
mod select;
mod shared;
mod signed;
mod smoke;
mod support;
mod system_route;
mod targets;
mod texts;
mod torch;
mod torch_links;
mod trust;
mod uninstall;
mod verify;
