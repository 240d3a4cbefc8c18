//! The swap into torch: `torch` finds it, `relink` fits the library to it,
//! `linker` asks the loader, `txn` journals the swap, `into_torch` is the
//! operation of `install --into-torch`, `out_of_torch` that of `rollback`.

pub(crate) mod into_torch;
pub(crate) mod linker;
pub(crate) mod out_of_torch;
pub(crate) mod relink;
pub(crate) mod rocm_sdk;
pub(crate) mod torch;
pub mod txn;
