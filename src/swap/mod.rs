//! The swap into torch: `torch` finds it, `relink` fits the library to it,
//! `linker` asks the loader, `txn` journals the swap, and `into_torch` is
//! the operation (`install --into-torch`).

pub(crate) mod into_torch;
pub(crate) mod linker;
pub(crate) mod relink;
pub(crate) mod torch;
pub mod txn;
