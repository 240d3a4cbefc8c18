//! What a library hands the compile child (issue 55's findings, each here
//! failing on the code before the fix): a header name from a library is
//! data, never a path. Run as root, as CI does.

use std::path::Path;
use std::process::Command;

use crate::in_place::{HIP64, torch_of};
use crate::support::{Sandbox, fixtures};

fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A libMIOpen at `to` embedding `texts` (symbol, bytes) as MIOpen's build
/// does: each `MIOPEN_KERNEL_<NAME>` with its `_SIZE`.
fn miopen_with(sb: &Sandbox, to: &Path, texts: &[(&str, Vec<u8>)]) {
    let mut c = String::from("#include <stddef.h>\n");
    for (name, bytes) in texts {
        let hex: String = bytes.iter().map(|b| format!("0x{b:02x},")).collect();
        c.push_str(&format!(
            "extern const size_t {name}_SIZE;\nextern const char {name}[];\nconst size_t {name}_SIZE = {};\nconst char {name}[] = {{{hex}0x00}};\n",
            bytes.len()
        ));
    }
    let src = sb.root.join("kernels.c");
    std::fs::write(&src, c).unwrap();
    let _ = std::fs::remove_file(to);
    rdna1_testkit::run(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-Wl,-soname,libMIOpen.so", "-o"])
            .arg(to)
            .arg(fixtures().join("fake-runtime/miopen_stock.c"))
            .arg(&src),
    );
}

/// A HIP batch-norm kernel that includes `header`.
fn hip_kernel(name: &str, header: &str) -> Vec<u8> {
    let mut text = format!("#include \"{header}\"\n").into_bytes();
    text.extend_from_slice(
        format!("extern \"C\" __global__ void {name}(float* p) {{ p[0] = RDNA1_ONE; }}\n")
            .as_bytes(),
    );
    text
}

/// Issue 55, 1: a HIP text whose header names lead out of the compiler's
/// directory (`../..`), are absolute, or hold a NUL is not judged, said
/// with the name, and nothing is compiled for it; the root-owned file the
/// first name leads to is never written. A plain name is compiled.
#[test]
fn a_header_name_from_the_library_never_leads_a_compiler_out_of_its_directory() {
    if !as_root() {
        return;
    }
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    std::os::unix::fs::symlink(
        crate::diagnosis::DEBIAN_HIPRTC,
        torch.lib.join("libamdhip64.so.5"),
    )
    .expect("apt-get install libamdhip64-5");
    let victim = sb.root.join("victim.hpp");
    std::fs::write(&victim, "precious\n").unwrap();
    let up = format!(
        "{}{}",
        "../".repeat(24),
        victim.display().to_string().trim_start_matches('/')
    );
    let abs = sb.root.join("abs/x.hpp").display().to_string();
    let nul = "x\0.hpp";
    let header = b"#define RDNA1_ONE 1\n".to_vec();
    miopen_with(
        &sb,
        &torch.miopen(),
        &[
            ("MIOPEN_KERNEL_BATCHNORMUP", hip_kernel("BatchNormUp", &up)),
            (
                "MIOPEN_KERNEL_BATCHNORMABS",
                hip_kernel("BatchNormAbs", &abs),
            ),
            (
                "MIOPEN_KERNEL_BATCHNORMNUL",
                hip_kernel("BatchNormNul", nul),
            ),
            (
                "MIOPEN_KERNEL_BATCHNORMPLAIN",
                hip_kernel("BatchNormPlain", "sub/good.hpp"),
            ),
            ("MIOPEN_KERNEL_VICTIM_INCLUDE", header.clone()),
            ("MIOPEN_KERNEL_X_INCLUDE", header.clone()),
            ("MIOPEN_KERNEL_X__INCLUDE", header.clone()),
            ("MIOPEN_KERNEL_GOOD_INCLUDE", header),
        ],
    );
    let refused = |kernel: &str, name: &str, why: &str| {
        format!(
            "Kernel {kernel}: not judged: it includes {name:?}, {why}, and a compiler is handed only plain relative names; nothing was compiled for it"
        )
    };
    for dry in [true, false] {
        let mut args = vec!["--profile", "rocm-6.4.3"];
        if dry {
            args.push("--dry-run");
        }
        let run = sb.install(&args);
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious\n",
            "a header was written outside the compiler's directory:\n{}",
            run.stderr
        );
        assert!(!sb.root.join("abs").exists());
        run.ok()
            .says(&refused(
                "MIOPEN_KERNEL_BATCHNORMUP",
                &up,
                "a name with a \"..\" component",
            ))
            .says(&refused("MIOPEN_KERNEL_BATCHNORMABS", &abs, "an absolute name"))
            .says(&refused(
                "MIOPEN_KERNEL_BATCHNORMNUL",
                nul,
                "a name with a NUL in it",
            ))
            .says("Kernel MIOPEN_KERNEL_BATCHNORMPLAIN: compiles")
            .says(&format!(
                "Nothing to fix: no batch-norm kernel of {} fails for gfx1010; 3 kernels were not judged, each needing a name no compiler is handed (MIOPEN_KERNEL_BATCHNORMABS, MIOPEN_KERNEL_BATCHNORMNUL, MIOPEN_KERNEL_BATCHNORMUP); torch was left as it is",
                torch.miopen().display()
            ));
    }
}
