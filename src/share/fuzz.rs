//! The pull's readers of what a registry or layout dir sends, for the fuzz
//! target (built with --cfg=fuzzing).

use super::examine::{Candidate, descriptor};
use super::oci::Reference;
use super::pull::{check_staged, unpack_tar};
use super::{CONFIG_TYPE, ConfigBlob, LAYER_TYPE};
use crate::prefix::Provenance;
use crate::prefix::key::KeyInputs;

/// The first byte picks the reader (fuzz/fuzz_targets/pull.rs).
pub fn fuzz_pull(data: &[u8]) {
    let Some((which, rest)) = data.split_first() else {
        return;
    };
    match which % 3 {
        // A manifest: its descriptors, as examine reads them.
        0 => {
            if let Ok(m) = serde_json::from_slice::<serde_json::Value>(rest) {
                let _ = descriptor(&m["config"], CONFIG_TYPE);
                if let Some([l]) = m["layers"].as_array().map(Vec::as_slice) {
                    let _ = descriptor(l, LAYER_TYPE);
                }
            }
        }
        // A config blob.
        1 => {
            if let Ok(c) = serde_json::from_slice::<ConfigBlob>(rest) {
                let _ = c.inputs.key();
            }
        }
        // A layer, verified already: zstd, then tar into a staging dir,
        // bounded by a declared size, then checked against MD5SUMS.
        _ => {
            let Ok(dir) = tempfile::tempdir() else {
                return;
            };
            let reference = Reference::parse(&dir.path().display().to_string()).expect("a dir");
            let c = Candidate {
                reference,
                digest: String::new(),
                config: ConfigBlob {
                    key: String::new(),
                    inputs: fuzz_inputs(),
                    provenance: fuzz_provenance(),
                    unpacked_size: Some(8 << 20),
                },
                key_id: String::new(),
                layer: (String::new(), rest.len() as u64),
                unpacked_size: 8 << 20,
            };
            let Ok(dec) = zstd::Decoder::new(rest) else {
                return;
            };
            let progress = crate::ui::Ui::silent().progress(0);
            if let Ok(written) = unpack_tar(dec, dir.path(), &c, &*progress) {
                let _ = check_staged(&c, dir.path(), &written);
            }
        }
    }
}

fn fuzz_inputs() -> KeyInputs {
    serde_json::from_str(
        r#"{"schema":1,"profile":"fuzz","component":"miopen","url":"file:///fuzz","pin":"fuzz",
            "commit":null,"patches":[],"defines":{},"gpu_targets":[],
            "toolchain":{"rocm_version":null,"compiler":null,"compat":[],"defines":{}}}"#,
    )
    .expect("key inputs")
}

fn fuzz_provenance() -> Provenance {
    toml::from_str(FUZZ_PROVENANCE).expect("a provenance")
}

const FUZZ_PROVENANCE: &str = r#"
tool = "rdna1-patch"
date = "2026-01-01T00:00:00Z"
profile = "fuzz"
component = "miopen"
patches = []
[rocm]
path = ""
version = "6.4.3"
torch_hip = "6.4"
[source]
url = "file:///fuzz"
tag = "fuzz"
commit = "0"
[cmake]
generator = "none"
defines = {}
[library]
soname = "libMIOpen.so.1"
path = "lib/libMIOpen.so.1"
"#;
