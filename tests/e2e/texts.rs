//! Hostile kernel texts in a library (issue 55, "not tried yet"): huge,
//! many, self-including, holding a NUL. Each is refused or judged in time
//! and memory linear in its size, and named; nothing hangs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::in_place::{HIP64, torch_of};
use crate::support::{Sandbox, fixtures};

/// A libMIOpen at `to` embedding `texts` (name, file holding the bytes),
/// each a NUL-terminated array with its `_SIZE`, as MIOpen embeds them;
/// the bytes are assembled in with `.incbin`, so a huge one costs nothing
/// to build.
pub(crate) fn miopen_embedding<N: AsRef<str>>(dir: &Path, to: &Path, texts: &[(N, Vec<u8>)]) {
    let mut asm = String::from(".section .rodata\n");
    for (i, (name, bytes)) in texts.iter().enumerate() {
        let name = name.as_ref();
        let file = dir.join(format!("text-{i}"));
        std::fs::write(&file, bytes).unwrap();
        asm.push_str(&format!(
            ".globl {name}\n.type {name}, @object\n{name}:\n.incbin \"{}\"\n.byte 0\n.size {name}, {}\n.globl {name}_SIZE\n.type {name}_SIZE, @object\n.balign 8\n{name}_SIZE:\n.quad {}\n.size {name}_SIZE, 8\n",
            file.display(),
            bytes.len() + 1,
            bytes.len()
        ));
    }
    let src = dir.join("texts.S");
    std::fs::write(&src, asm).unwrap();
    let _ = std::fs::remove_file(to);
    rdna1_testkit::run(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-Wl,-soname,libMIOpen.so", "-o"])
            .arg(to)
            .arg(fixtures().join("fake-runtime/miopen_stock.c"))
            .arg(&src),
    );
}

fn opencl(name: &str, body: &str) -> Vec<u8> {
    format!("__kernel void {name}(__global float* p) {{ {body} }}\n").into_bytes()
}

/// A huge text, one holding a NUL, and HIP headers that include each
/// other and themselves: the first two are not judged, named with why,
/// and nothing is compiled for them; the cycle is followed once and
/// judged; the run takes seconds, not the compile of 64 MiB.
#[test]
fn huge_nul_holding_and_self_including_texts_are_named_and_judged_in_time() {
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    std::os::unix::fs::symlink(
        crate::diagnosis::DEBIAN_HIPRTC,
        torch.lib.join("libamdhip64.so.5"),
    )
    .unwrap();
    let mut huge = opencl("BatchNormHuge", "p[0] = 1.0f;");
    huge.resize(64 << 20, b' ');
    let mut nul = opencl("BatchNormNul", "p[0] = 1.0f;");
    nul.splice(10..10, [0u8]);
    let texts = vec![
        ("MIOPEN_KERNEL_BATCHNORMHUGE".to_owned(), huge),
        ("MIOPEN_KERNEL_BATCHNORMNUL".to_owned(), nul),
        (
            "MIOPEN_KERNEL_BATCHNORMCYCLE".to_owned(),
            b"#include \"a.hpp\"\nextern \"C\" __global__ void BatchNormCycle(float* p) { p[0] = A_ONE; }\n"
                .to_vec(),
        ),
        (
            "MIOPEN_KERNEL_A_INCLUDE".to_owned(),
            b"#pragma once\n#include \"b.hpp\"\n#include \"a.hpp\"\n#define A_ONE 1\n".to_vec(),
        ),
        (
            "MIOPEN_KERNEL_B_INCLUDE".to_owned(),
            b"#pragma once\n#include \"a.hpp\"\n".to_vec(),
        ),
    ];
    miopen_embedding(&sb.root, &torch.miopen(), &texts);
    let start = Instant::now();
    let run = sb.run(&[
        "doctor",
        "--profile",
        "rocm-6.4.3",
        "--python",
        "python3",
        "--json",
    ]);
    let took = start.elapsed();
    assert!(took < Duration::from_secs(60), "{took:?}\n{}", run.stderr);
    let install = sb.install(&["--profile", "rocm-6.4.3", "--dry-run"]).ok();
    install
        .says("Kernel MIOPEN_KERNEL_BATCHNORMHUGE: not judged: it is 64.0 MiB with its headers, over the 4 MiB no batch-norm kernel comes near; nothing was compiled for it")
        .says("Kernel MIOPEN_KERNEL_BATCHNORMNUL: not judged: it holds a NUL byte (at 10), which no kernel text does: a compiler would read it cut short; nothing was compiled for it")
        .says("Kernel MIOPEN_KERNEL_BATCHNORMCYCLE: compiles");
}

/// More batch-norm texts than any MIOpen has: refused at once, saying so,
/// not compiled one by one.
#[test]
fn a_library_of_thousands_of_batch_norm_texts_is_refused_at_once() {
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let texts: Vec<(String, Vec<u8>)> = (0..2000)
        .map(|i| {
            (
                format!("MIOPEN_KERNEL_BATCHNORM{i}"),
                opencl(&format!("BatchNorm{i}"), "p[0] = 1.0f;"),
            )
        })
        .collect();
    miopen_embedding(&sb.root, &torch.miopen(), &texts);
    let start = Instant::now();
    let run = sb.install(&["--profile", "rocm-6.4.3", "--dry-run"]);
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    run.fails_with(&format!(
        "error: {} is not a library whose kernel texts can be read: it embeds more than 256 batch-norm kernel texts, where MIOpen has about a dozen
help: it is not a MIOpen the in-place fix knows; nothing was changed: reinstall torch if the file is damaged, or build the profile from source (`rdna1-patch build miopen[..]`)",
        torch.miopen().display()
    ));
}
