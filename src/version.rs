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

/// A path in a JSON document: a string when it is UTF-8; else, without
/// loss, `{"bytes": "<hex of its bytes>", "lossy": "<for people>"}` (docs/commands.md,
/// "JSON"). serde's own refuses such a path, which made `status --json`
/// panic under a state dir so named (issue 59).
pub struct JsonPath<'a>(pub &'a std::path::Path);

impl serde::Serialize for JsonPath<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        use std::os::unix::ffi::OsStrExt;
        match self.0.to_str() {
            Some(text) => s.serialize_str(text),
            None => {
                let bytes = self.0.as_os_str().as_bytes();
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("bytes", &hex)?;
                m.serialize_entry("lossy", &self.0.to_string_lossy())?;
                m.end()
            }
        }
    }
}

/// "6.2.4" -> "6.2"
pub fn major_minor(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}
