//! The Tensile reader's cache (issue 69): each code file is remembered by
//! its own stamp, so a file rewritten in place, at the same size and with
//! its modification time put back, is read again; and the directory's
//! entry is one line a file, read back by the next run.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use crate::libraries::{doctor, gpu_code, row_with_fix, tensile, torch_with};

/// Longer than the reader's settling time (50 ms): a file changed less
/// than that before a run is read but not remembered, which would hide
/// what the stamp does.
const SETTLE: Duration = Duration::from_millis(200);

#[test]
fn a_tensile_file_rewritten_in_place_is_read_again() {
    let (sb, lib) = torch_with("gfx1010", "rx5600xt-gfx1010");
    let name = "TensileLibrary_Type_SS_Contraction_gfx1010.co";
    let dir = tensile(
        &lib,
        &[
            ("TensileLibrary_lazy_gfx1010.dat", "catalogue"),
            (name, "gfx1010.co"),
        ],
    );
    std::thread::sleep(SETTLE);
    let (out, code) = doctor(&sb);
    assert_eq!(
        row_with_fix(&out, "tensile"),
        format!(
            "ok    tensile   rocBLAS's Tensile directory {} has kernels for gfx1010 (the card's)\n                1 catalogue(s), 1 code-object file(s); for gfx1010: 1 code-object file(s), 1 catalogue(s) named for it\n                catalogues read for gfx1010: TensileLibrary_lazy_gfx1010.dat",
            dir.display()
        ),
        "{out}"
    );
    assert_eq!(code, 0, "{out}");
    // The run remembered the file: a line for it in the directory's entry.
    let cache = sb.root.join("xdg-cache/rdna1-patch/gpucode");
    let entry = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("tensile-v2-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .unwrap_or_else(|| panic!("no tensile entry in {}", cache.display()));
    assert_eq!(
        entry.lines().count(),
        3,
        "format, targets, one file:\n{entry}"
    );

    // gfx1030's code object, written over the file in place: same inode,
    // same size, its modification time put back.
    let file = dir.join(name);
    let before = std::fs::metadata(&file).unwrap();
    let other = std::fs::read(gpu_code().join("co/gfx1030.co")).unwrap();
    assert_eq!(
        other.len() as u64,
        before.len(),
        "the fixture's objects differ in size"
    );
    let mut f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all(&other).unwrap();
    f.set_modified(before.modified().unwrap()).unwrap();
    drop(f);
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (after.ino(), after.len(), after.mtime(), after.mtime_nsec()),
        (
            before.ino(),
            before.len(),
            before.mtime(),
            before.mtime_nsec()
        )
    );
    std::thread::sleep(SETTLE);
    let (out, code) = doctor(&sb);
    assert_eq!(
        row_with_fix(&out, "tensile"),
        format!(
            "FAIL  tensile   rocBLAS's Tensile directory {} has no kernels for gfx1010 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail\n                1 catalogue(s), 1 code-object file(s); for gfx1010: 0 code-object file(s), 1 catalogue(s) named for it; named for gfx1010 but holding other code: {name} holds gfx1030\n                catalogues read for gfx1010: TensileLibrary_lazy_gfx1010.dat\n                {}",
            dir.display(),
            crate::libraries::THEROCK_ROCBLAS
        ),
        "{out}"
    );
    assert_eq!(code, 1, "{out}");
}
