//! doctor's `library`, `tensile` and `miopen-db` rows (issue 52): every GPU
//! library torch loads read for the card, from real fat binaries and code
//! objects built by clang (HIP mode for the bundles, the amdgcn target for
//! plain code objects, as Tensile's `.co` files are).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::support::{HIP, Sandbox, TorchKind, check_row, gpus};
use rdna1_testkit::fat_library_linking;

/// The GPU code every test here uses, built once per run: rocBLAS-shaped
/// libraries with and without gfx1010, plain code objects for three
/// targets, a HIP bundle for gfx1010, and a libtorch_hip.so that loads
/// `librocblas.so` from its own directory.
fn gpu_code() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gpucode");
        let _ = std::fs::remove_dir_all(&dir);
        for (sub, archs) in [
            ("gfx1030", &["gfx1030"][..]),
            ("gfx1010", &["gfx1010", "gfx1030"][..]),
        ] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).unwrap();
            let built = rdna1_testkit::fat_library(&d, archs);
            std::fs::rename(built, d.join("librocblas.so")).unwrap();
        }
        let co = dir.join("co");
        std::fs::create_dir_all(&co).unwrap();
        std::fs::write(
            co.join("k.cl"),
            "kernel void k(global int* p) { *p = 1; }\n",
        )
        .unwrap();
        for arch in ["gfx1010", "gfx1012", "gfx1030"] {
            rdna1_testkit::run(
                Command::new("clang")
                    .args(["-target", "amdgcn-amd-amdhsa", "-nogpulib", "-x", "cl"])
                    .arg(format!("-mcpu={arch}"))
                    .arg(co.join("k.cl"))
                    .arg("-o")
                    .arg(co.join(format!("{arch}.co"))),
            );
        }
        std::fs::write(
            co.join("k.hip"),
            "__attribute__((global)) void k(int* p) { *p = 1; }\n",
        )
        .unwrap();
        rdna1_testkit::run(
            Command::new("clang++")
                .env("TMPDIR", &co)
                .args(["-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only"])
                .args(["--offload-arch=gfx1010", "-c"])
                .arg(co.join("k.hip"))
                .arg("-o")
                .arg(co.join("gfx1010.hsaco")),
        );
        let hip = dir.join("hip");
        std::fs::create_dir_all(&hip).unwrap();
        let rocblas = dir.join("gfx1030").display().to_string();
        let torch_lib = crate::support::runtime().join("torch/lib");
        let built = fat_library_linking(
            &hip,
            &["gfx1010"],
            &[
                "-L",
                &rocblas,
                "-L",
                &torch_lib.display().to_string(),
                "-lrocblas",
                "-lMIOpen",
                "-lamdhip64",
                "-Wl,-rpath,$ORIGIN",
            ],
        );
        std::fs::rename(built, hip.join("libtorch_hip.so")).unwrap();
        dir
    })
}

/// A sandbox with a ROCm torch whose libtorch_hip.so (gfx1010) loads
/// torch/lib/librocblas.so built for `rocblas` ("gfx1030": gfx1030 only;
/// "gfx1010": gfx1010 and gfx1030), and the card of sysfs tree `tree`.
fn torch_with(rocblas: &str, tree: &str) -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    sb.set_gpus(gpus(tree));
    std::fs::copy(
        gpu_code().join("hip/libtorch_hip.so"),
        torch.lib.join("libtorch_hip.so"),
    )
    .unwrap();
    std::fs::copy(
        gpu_code().join(rocblas).join("librocblas.so"),
        torch.lib.join("librocblas.so"),
    )
    .unwrap();
    (sb, torch.lib.clone())
}

/// doctor with a ROCm that blocks no build (hipcc, and a hipconfig that
/// names a clang++), so that its exit status is the libraries' to give.
fn doctor(sb: &Sandbox) -> (String, i32) {
    let bin = sb.rocm.join("bin");
    if !bin.join("hipconfig").exists() {
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("hipcc"), "#!/bin/sh\n").unwrap();
        let llvm = sb.root.join("llvm-bin");
        std::fs::create_dir_all(&llvm).unwrap();
        std::os::unix::fs::symlink(which::which("c++").unwrap(), llvm.join("clang++")).unwrap();
        std::fs::write(
            bin.join("hipconfig"),
            format!("#!/bin/sh\necho {}\n", llvm.display()),
        )
        .unwrap();
        for f in ["hipcc", "hipconfig"] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(bin.join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let rocm = sb.rocm.display().to_string();
    let out = sb
        .cmd()
        .args([
            "doctor",
            "--need-space",
            "0",
            "--python",
            "python3",
            "--rocm",
            &rocm,
        ])
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .output()
        .unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        out.status.code().unwrap(),
    )
}

/// The row `name` with its indented lines (fix, cause) after it.
fn row_with_fix(out: &str, name: &str) -> String {
    let row = check_row(out, name);
    let mut lines = out.lines().skip_while(|l| *l != row);
    let mut text = vec![lines.next().unwrap().to_owned()];
    text.extend(
        lines
            .take_while(|l| l.starts_with("                "))
            .map(str::to_owned),
    );
    text.join("\n")
}

#[test]
fn a_library_without_the_cards_code_fails_and_names_the_ops() {
    let (sb, lib) = torch_with("gfx1030", "rx5600xt-gfx1010");
    let (out, code) = doctor(&sb);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        row_with_fix(&out, "library"),
        format!(
            "FAIL  library   librocblas.so at {} has code for gfx1030, none for gfx1010 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail\n                fix: TheRock's torch for the card builds rocBLAS for gfx1010, gfx1011 and gfx1012 (TheRock's cmake/therock_amdgpu_targets.cmake at 89553ce): `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\"` (device-gfx1010 for this card)",
            lib.display()
        ),
        "{out}"
    );
    // The same library with gfx1010's code: ok, and doctor passes.
    std::fs::copy(
        gpu_code().join("gfx1010/librocblas.so"),
        lib.join("librocblas.so"),
    )
    .unwrap();
    let (out, code) = doctor(&sb);
    assert_eq!(
        check_row(&out, "library"),
        format!(
            "ok    library   librocblas.so at {} has code for gfx1010, gfx1030: gfx1010 (the card's) among them",
            lib.display()
        ),
        "{out}"
    );
    assert_eq!(code, 0, "{out}");
}
