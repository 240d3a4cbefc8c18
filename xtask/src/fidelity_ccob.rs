//! `cargo xtask fidelity --ccob`: the compressed offload bundles the tests
//! put in a fake torch (rdna1_testkit::ccob, versions 1, 2 and 3), handed
//! to the real clang-offload-bundler of the ROCm chroot (clang 21), which
//! must list the same entries as it lists for the plain bundle they
//! compress. Writes FIDELITY.md's ccob section.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::rocm_env;

/// What the section's table reads: one bundle's file and clang's list.
struct Listed {
    file: &'static str,
    entries: Vec<String>,
}

pub fn ccob(root: &Path) -> Result<()> {
    let env = rocm_env::ensure(root)?;
    let dir = root.join("target/ccob");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    // The library the e2e tests build for a torch with gfx1010 and gfx1030
    // code (clang 14's HIP driver, as in CI).
    let lib = rdna1_testkit::fat_library(&dir, &["gfx1010", "gfx1030"]);
    let elf = std::fs::read(&lib)?;
    let (offset, size) = rdna1_testkit::ccob::hip_fatbin(&elf);
    let bundle = &elf[offset..offset + size];
    let files: [(&str, Option<u16>); 4] = [
        ("plain.bundle", None),
        ("v1.ccob", Some(1)),
        ("v2.ccob", Some(2)),
        ("v3.ccob", Some(3)),
    ];
    for (file, version) in files {
        let bytes = match version {
            None => bundle.to_vec(),
            Some(v) => rdna1_testkit::ccob::ccob(bundle, v),
        };
        std::fs::write(dir.join(file), bytes)?;
    }
    // Each list in a file of its own beside the bundle: the chroot's
    // command streams, it does not hand its output back.
    let script = files
        .iter()
        .map(|(f, _)| format!("\"$b\" -list -type=o -input=/src/{f} > /src/{f}.list"))
        .collect::<Vec<_>>()
        .join(" && ");
    env.run(
        root,
        Some(&dir),
        // Debian puts it under its LLVM's own bin/ (clang-tools-21), not
        // on PATH: the newest there.
        &format!(
            "b=$(ls /usr/lib/llvm-*/bin/clang-offload-bundler | sort -V | tail -1) && \"$b\" --version | head -2 > /src/version && {script}"
        ),
    )?;
    let version = std::fs::read_to_string(dir.join("version"))?;
    let listed: Vec<Listed> = files
        .iter()
        .map(|&(file, _)| {
            let text = std::fs::read_to_string(dir.join(format!("{file}.list")))
                .with_context(|| format!("no list of {file}"))?;
            Ok(Listed {
                file,
                entries: text.lines().map(str::to_owned).collect(),
            })
        })
        .collect::<Result<_>>()?;
    let plain = &listed[0].entries;
    for arch in ["gfx1010", "gfx1030"] {
        if !plain.iter().any(|e| e.ends_with(arch)) {
            bail!("clang lists no {arch} entry in the plain bundle: {plain:?}");
        }
    }
    let differ: Vec<&str> = listed[1..]
        .iter()
        .filter(|l| &l.entries != plain)
        .map(|l| l.file)
        .collect();
    let mut section = format!(
        "## `cargo xtask fidelity --ccob`\n\nThe compressed offload bundles the tests write into a fake torch's libtorch_hip.so (`rdna1_testkit::ccob`: CCOB versions 1, 2 and 3, zstd), made from the plain bundle clang 14 builds for gfx1010 and gfx1030 ({size} bytes), listed by the chroot's `clang-offload-bundler -list -type=o` ({}):\n\n| File | Entries clang lists |\n|---|---|\n",
        version
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("?")
            .trim()
    );
    for l in &listed {
        section.push_str(&format!("| {} | {} |\n", l.file, l.entries.join(", ")));
    }
    section.push_str(&match differ.is_empty() {
        true => "\nEvery compressed version lists the plain bundle's entries: clang reads the tests' bundles as it reads its own.\n".to_owned(),
        false => format!("\n**{} list other entries than the plain bundle.**\n", differ.join(", ")),
    });
    crate::fidelity_render::put_section(root, "ccob", &section)?;
    print!("{section}");
    if !differ.is_empty() {
        bail!("clang lists other entries for {}", differ.join(", "));
    }
    Ok(())
}
