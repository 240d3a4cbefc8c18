//! The swap into torch: `torch` finds it, `relink` fits the library to it,
//! `linker` asks the loader, `txn` journals the swap, and `into_torch` is
//! the operation (`install --into-torch`).

pub mod into_torch;
pub mod linker;
pub mod relink;
pub mod torch;
pub mod txn;
