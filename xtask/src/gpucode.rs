//! `cargo xtask gpucode DIR...`: doctor's reading of GPU code (`gpucode`)
//! over real ROCm libraries unpacked from their packages (`dpkg-deb -x`),
//! for docs/hardware.md: per library with GPU code, the targets its code
//! objects declare and whether gfx1010, gfx1011 and gfx1012 are among
//! them; per Tensile directory, the code-object files that declare each
//! of the three (and those only named for one). Reads headers only, as
//! doctor does; the time per directory is printed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};
use rdna1_patch::gpucode::{self, Tensile};

const RDNA1: [&str; 3] = ["gfx1010", "gfx1011", "gfx1012"];

pub fn gpucode(args: &[String]) -> Result<()> {
    if args.is_empty() {
        bail!("usage: cargo xtask gpucode DIR... (unpacked packages: dpkg-deb -x PKG.deb DIR)");
    }
    for dir in args {
        let t = Instant::now();
        let (libs, tensile) = walk(Path::new(dir));
        println!("## {dir}");
        for lib in libs {
            match gpucode::read_library(&lib) {
                Ok(Some(code)) => println!(
                    "library {} ({} code objects{}{}): {} | {}",
                    lib.display(),
                    code.code_objects,
                    if code.compressed > 0 {
                        format!(
                            ", {} compressed bundles naming {}",
                            code.compressed,
                            code.compressed_targets.join(" ")
                        )
                    } else {
                        String::new()
                    },
                    if code.mislabelled.is_empty() {
                        String::new()
                    } else {
                        format!(", mislabelled: {}", code.mislabelled.join(", "))
                    },
                    code.targets.join(" "),
                    RDNA1
                        .map(|c| format!("{c} {}", if code.covers(c) { "yes" } else { "no" }))
                        .join(", ")
                ),
                Ok(None) => println!("library {} (no GPU code)", lib.display()),
                Err(e) => println!("library {}: {e:#}", lib.display()),
            }
        }
        for dir in tensile {
            let t = Tensile::read(&dir);
            let per: Vec<String> = RDNA1
                .map(|c| {
                    let declared = t.files_for(c).count();
                    let named = t
                        .files
                        .iter()
                        .filter(|f| f.named.as_deref() == Some(c))
                        .count();
                    let catalogues = t
                        .catalogues
                        .iter()
                        .filter(|n| gpucode::named_target(n).as_deref() == Some(c))
                        .count();
                    format!(
                        "{c}: {declared} code-object files declare it ({named} named for it), {catalogues} catalogues named for it"
                    )
                })
                .to_vec();
            let mut targets: Vec<&String> = t.files.iter().flat_map(|f| &f.declared).collect();
            targets.sort();
            targets.dedup();
            let targets: Vec<&str> = targets.into_iter().map(String::as_str).collect();
            println!(
                "tensile {} ({} catalogues, {} code-object files declaring {}): {}",
                dir.display(),
                t.catalogues.len(),
                t.files.len(),
                targets.join(" "),
                per.join("; ")
            );
        }
        println!("({:.2} s)", t.elapsed().as_secs_f64());
    }
    Ok(())
}

/// The shared libraries (regular files named `lib*.so*`) and Tensile
/// directories (`rocblas/.../library`, `hipblaslt/.../library`) below `dir`.
fn walk(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut libs, mut tensile) = (Vec::new(), Vec::new());
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            let name = e.file_name().to_string_lossy().into_owned();
            if ft.is_dir() {
                let s = p.to_string_lossy();
                if name == "library" && (s.contains("/rocblas/") || s.contains("/hipblaslt/")) {
                    tensile.push(p.clone());
                }
                stack.push(p);
            } else if ft.is_file() && name.starts_with("lib") && name.contains(".so") {
                libs.push(p);
            }
        }
    }
    libs.sort();
    tensile.sort();
    (libs, tensile)
}
