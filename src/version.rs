//! The version facts every wing may print: the tool's own version string,
//! the schema of its JSON documents, and a ROCm release line.

/// `--version`: the package version and the commit it was built from; also
/// written into every build's provenance.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("RDNA1_PATCH_COMMIT"),
    ")"
);

/// The version of every JSON document the CLI prints (README, "JSON").
/// Raised when a field changes meaning or goes away; new fields do not.
pub const SCHEMA_VERSION: u32 = 1;

/// "6.2.4" -> "6.2"
pub fn major_minor(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}
