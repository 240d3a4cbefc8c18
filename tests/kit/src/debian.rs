//! rocBLAS laid out as Debian's 6.4 packages it, for a torch that bundles
//! it (the e2e tests' glance and rocBLAS swaps, and `cargo xtask bench`):
//! a librocblas.so with code for ten targets and none for gfx1012, and a
//! Tensile directory of generic catalogues and a code object per target.

use std::path::{Path, PathBuf};

/// What Debian's librocblas 6.4 is built for, as far as this clang goes:
/// ten targets, gfx1010 among them, gfx1012 not.
pub const DEBIAN_ROCBLAS_TARGETS: [&str; 10] = [
    "gfx803", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx1010", "gfx1030", "gfx1031", "gfx1032",
    "gfx1034",
];

/// The GPU code, built into `dir` (emptied first): `rocblas/librocblas.so`
/// for the ten targets, `co/<arch>.co` a plain code object per target, and
/// `hip/libtorch_hip.so` with gfx1010 and gfx1012 code that loads
/// librocblas and MIOpen from its own directory (`torch_lib`'s MIOpen at
/// link time).
pub fn debian_code(dir: &Path, torch_lib: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    let blas = dir.join("rocblas");
    std::fs::create_dir_all(&blas).unwrap();
    let built = crate::fat_library(&blas, &DEBIAN_ROCBLAS_TARGETS);
    std::fs::rename(built, blas.join("librocblas.so")).unwrap();
    crate::code_objects(&dir.join("co"), &DEBIAN_ROCBLAS_TARGETS);
    crate::torch_hip_with_rocblas(&dir.join("hip"), &["gfx1010", "gfx1012"], &blas, torch_lib);
    dir.to_owned()
}

/// `torch_lib` bundling [`debian_code`]'s `code`: its libtorch_hip.so and
/// librocblas.so, and `rocblas/library` as [`debian_tensile`] makes it.
pub fn bundle_debian_rocblas(torch_lib: &Path, code: &Path) {
    std::fs::copy(
        code.join("hip/libtorch_hip.so"),
        torch_lib.join("libtorch_hip.so"),
    )
    .unwrap();
    std::fs::copy(
        code.join("rocblas/librocblas.so"),
        torch_lib.join("librocblas.so"),
    )
    .unwrap();
    debian_tensile(&torch_lib.join("rocblas/library"), code);
}

/// A Tensile directory `tensile` as Debian's rocBLAS 6.4 has it: 54
/// generic `*_fallback.dat` catalogues and a code object for each of the
/// ten targets, none gfx1012 (from [`debian_code`]'s `code`).
pub fn debian_tensile(tensile: &Path, code: &Path) {
    std::fs::create_dir_all(tensile).unwrap();
    for ty in [
        "4xi8I", "BB", "BS", "CC", "DD", "HH", "HS", "I8I", "SS", "ZZ",
    ] {
        for (i, layout) in [
            "Ailk_Bljk",
            "Ailk_Bjlk",
            "Alik_Bljk",
            "Alik_Bjlk",
            "Ailk_Bljk_HPA",
        ]
        .iter()
        .enumerate()
        {
            let name = format!(
                "TensileLibrary_Type_{ty}_Contraction_l_{layout}_Cijk_Dijk_{i}_fallback.dat"
            );
            std::fs::write(tensile.join(name), b"\x82\xa4msgpack").unwrap();
        }
    }
    for extra in ["4xi8I_HPA", "BB_HPA", "HH_HPA", "I8I_HPA"] {
        let name =
            format!("TensileLibrary_Type_{extra}_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat");
        std::fs::write(tensile.join(name), b"\x82\xa4msgpack").unwrap();
    }
    for arch in DEBIAN_ROCBLAS_TARGETS {
        std::fs::copy(
            code.join("co").join(format!("{arch}.co")),
            tensile.join(format!(
                "TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_{arch}.co"
            )),
        )
        .unwrap();
    }
}
