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
pub(crate) fn gpu_code() -> &'static Path {
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
        rdna1_testkit::code_objects(&co, &["gfx1010", "gfx1012", "gfx1030"]);
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
        rdna1_testkit::torch_hip_with_rocblas(
            &dir.join("hip"),
            &["gfx1010"],
            &dir.join("gfx1030"),
            &crate::support::runtime().join("torch/lib"),
        );
        dir
    })
}

/// A sandbox with a ROCm torch whose libtorch_hip.so (gfx1010) loads
/// torch/lib/librocblas.so built for `rocblas` ("gfx1030": gfx1030 only;
/// "gfx1010": gfx1010 and gfx1030), and the card of sysfs tree `tree`.
pub(crate) fn torch_with(rocblas: &str, tree: &str) -> (Sandbox, PathBuf) {
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
pub(crate) fn doctor(sb: &Sandbox) -> (String, i32) {
    doctor_with(sb, None)
}

/// [`doctor`] with HSA_OVERRIDE_GFX_VERSION set to `gfx_override`.
fn doctor_with(sb: &Sandbox, gfx_override: Option<&str>) -> (String, i32) {
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
    let mut c = sb.cmd();
    c.args([
        "doctor",
        "--detail",
        "--need-space",
        "0",
        "--python",
        "python3",
        "--rocm",
        &rocm,
    ]);
    match gfx_override {
        Some(v) => c.env("HSA_OVERRIDE_GFX_VERSION", v),
        None => c.env_remove("HSA_OVERRIDE_GFX_VERSION"),
    };
    let out = c.output().unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        out.status.code().unwrap(),
    )
}

/// The row `name` with its indented lines (fix, cause) after it.
pub(crate) fn row_with_fix(out: &str, name: &str) -> String {
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
            "FAIL  library   librocblas.so at {} has code for gfx1030, none for gfx1010 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail\n                {THEROCK_ROCBLAS}",
            lib.display()
        ),
        "{out}"
    );
    // No Tensile directory beside it: rocBLAS aborts at its first GEMM.
    assert_eq!(
        row_with_fix(&out, "tensile"),
        format!(
            "FAIL  tensile   rocBLAS's Tensile directory {0}/rocblas/library has no kernels for gfx1010 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail\n                not there (no rocblas/library nor rocblas/VERSION/library beside {0}/librocblas.so)\n                {THEROCK_ROCBLAS}",
            lib.display()
        ),
        "{out}"
    );
    // The same library with gfx1010's code and its Tensile files: ok, and
    // doctor passes.
    std::fs::copy(
        gpu_code().join("gfx1010/librocblas.so"),
        lib.join("librocblas.so"),
    )
    .unwrap();
    tensile(
        &lib,
        &[
            ("TensileLibrary_lazy_gfx1010.dat", "catalogue"),
            ("Kernels.so-000-gfx1010.hsaco", "gfx1010.hsaco"),
        ],
    );
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

/// torch/lib/rocblas/library laid out as rocBLAS does, each file a copy of
/// one of the fixture's code objects: (file name, code object).
pub(crate) fn tensile(lib: &Path, files: &[(&str, &str)]) -> PathBuf {
    let dir = lib.join("rocblas/library");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, from) in files {
        match *from {
            "catalogue" => std::fs::write(dir.join(name), b"\x82\xa4msgpack").unwrap(),
            co => {
                std::fs::copy(gpu_code().join("co").join(co), dir.join(name)).unwrap();
            }
        }
    }
    dir
}

#[test]
fn a_tensile_directory_is_judged_by_the_code_its_files_declare() {
    let (sb, lib) = torch_with("gfx1010", "rx5600xt-gfx1010");
    // With the card's catalogue, a plain code object and a HIP bundle.
    let dir = tensile(
        &lib,
        &[
            ("TensileLibrary_lazy_gfx1010.dat", "catalogue"),
            ("TensileLibrary_lazy_gfx1030.dat", "catalogue"),
            (
                "TensileLibrary_Type_SS_Contraction_gfx1010.co",
                "gfx1010.co",
            ),
            ("Kernels.so-000-gfx1010.hsaco", "gfx1010.hsaco"),
            (
                "TensileLibrary_Type_SS_Contraction_gfx1030.co",
                "gfx1030.co",
            ),
        ],
    );
    let (out, code) = doctor(&sb);
    assert_eq!(
        row_with_fix(&out, "tensile"),
        format!(
            "ok    tensile   rocBLAS's Tensile directory {} has kernels for gfx1010 (the card's)\n                2 catalogue(s), 3 code-object file(s); for gfx1010: 2 code-object file(s), 1 catalogue(s) named for it\n                catalogues read for gfx1010: TensileLibrary_lazy_gfx1010.dat",
            dir.display()
        ),
        "{out}"
    );
    assert_eq!(code, 0, "{out}");

    // None for the card: rocBLAS has nothing to run a matmul with.
    let dir = tensile(
        &lib,
        &[
            ("TensileLibrary_lazy_gfx1030.dat", "catalogue"),
            (
                "TensileLibrary_Type_SS_Contraction_gfx1030.co",
                "gfx1030.co",
            ),
        ],
    );
    let (out, code) = doctor(&sb);
    assert_eq!(
        row_with_fix(&out, "tensile"),
        format!(
            "FAIL  tensile   rocBLAS's Tensile directory {} has no kernels for gfx1010 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail\n                1 catalogue(s), 1 code-object file(s); for gfx1010: 0 code-object file(s), no catalogue\n                {THEROCK_ROCBLAS}",
            dir.display()
        ),
        "{out}"
    );
    assert_eq!(code, 1, "{out}");

    // Files named for the card that hold gfx1030's code: named, and FAIL.
    let dir = tensile(
        &lib,
        &[
            ("TensileLibrary_lazy_gfx1010.dat", "catalogue"),
            (
                "TensileLibrary_Type_SS_Contraction_gfx1010.co",
                "gfx1030.co",
            ),
            ("Kernels.so-000-gfx1010.hsaco", "gfx1012.co"),
        ],
    );
    let (out, code) = doctor(&sb);
    assert_eq!(
        row_with_fix(&out, "tensile"),
        format!(
            "FAIL  tensile   rocBLAS's Tensile directory {} has no kernels for gfx1010 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail\n                1 catalogue(s), 2 code-object file(s); for gfx1010: 0 code-object file(s), 1 catalogue(s) named for it; named for gfx1010 but holding other code: Kernels.so-000-gfx1010.hsaco holds gfx1012; TensileLibrary_Type_SS_Contraction_gfx1010.co holds gfx1030\n                catalogues read for gfx1010: TensileLibrary_lazy_gfx1010.dat\n                {THEROCK_ROCBLAS}",
            dir.display()
        ),
        "{out}"
    );
    assert_eq!(code, 1, "{out}");
}

pub(crate) const THEROCK_ROCBLAS: &str = "TheRock builds rocBLAS for gfx1010, gfx1011 and gfx1012 (TheRock's cmake/therock_amdgpu_targets.cmake at 89553ce)\n                fix: TheRock's torch has rocBLAS for gfx1010: `pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \"torch[device-gfx1010]\" \"torchvision[device-gfx1010]\"`";

/// An RX 5500 XT (gfx1012) with a rocBLAS and Tensile files built for
/// gfx1010 (and gfx1030): what an RX 5700 runs has nothing for it.
#[test]
fn an_rx_5500_xt_gets_nothing_from_a_rocblas_built_for_gfx1010() {
    let (sb, lib) = torch_with("gfx1010", "rx5500xt-gfx1012");
    let dir = tensile(
        &lib,
        &[
            ("TensileLibrary_lazy_gfx1010.dat", "catalogue"),
            ("Kernels.so-000-gfx1010.hsaco", "gfx1010.hsaco"),
        ],
    );
    let (out, code) = doctor(&sb);
    let fix = THEROCK_ROCBLAS
        .replace("device-gfx1010", "device-gfx1012")
        .replace("rocBLAS for gfx1010:", "rocBLAS for gfx1012:");
    assert_eq!(
        row_with_fix(&out, "library"),
        format!(
            "FAIL  library   librocblas.so at {} has code for gfx1010, gfx1030, none for gfx1012 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail\n                {fix}",
            lib.display()
        ),
        "{out}"
    );
    assert_eq!(
        row_with_fix(&out, "tensile"),
        format!(
            "FAIL  tensile   rocBLAS's Tensile directory {} has no kernels for gfx1012 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail\n                1 catalogue(s), 1 code-object file(s); for gfx1012: 0 code-object file(s), no catalogue\n                {fix}",
            dir.display()
        ),
        "{out}"
    );
    assert_eq!(code, 1, "{out}");
    // The JSON has the same findings, as plain data.
    let json = sb
        .cmd()
        .args([
            "doctor",
            "--need-space",
            "0",
            "--python",
            "python3",
            "--json",
        ])
        .args(["--rocm", &sb.rocm.display().to_string()])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        doc["libraries"][0],
        serde_json::json!({
            "kind": "library",
            "name": "librocblas.so",
            "path": lib.join("librocblas.so"),
            "targets": ["gfx1010", "gfx1030"],
            "card": "gfx1012",
            "card_covered": false,
            "notes": [],
        }),
        "{doc:#}"
    );
    assert_eq!(doc["schema_version"], 1);
}

/// A torch on the system route: libtorch_hip.so loads the system's
/// rocBLAS through its RUNPATH, and that is the file read. Such a torch
/// is its user's build: the fix is a build of rocBLAS for the card.
#[test]
fn a_library_found_through_the_system_route_is_read() {
    let sb = Sandbox::new();
    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let st = crate::system_route::SystemTorch::new(&sb, false);
    std::fs::copy(
        gpu_code().join("gfx1030/librocblas.so"),
        st.sys.join("librocblas.so"),
    )
    .unwrap();
    let s = st.sys.display().to_string();
    let built = fat_library_linking(
        &sb.root,
        &["gfx1010"],
        &[
            "-L",
            &s,
            "-lMIOpen",
            "-lamdhip64",
            "-lrocblas",
            &format!("-Wl,-rpath,{s}"),
        ],
    );
    std::fs::copy(built, st.hip()).unwrap();
    let (out, code) = doctor(&sb);
    // BUILD_ROUTE's install command ends in [..]: the run's options.
    let row = row_with_fix(&out, "library");
    let want = format!(
        "FAIL  library   librocblas.so at {s} has code for gfx1030, none for gfx1010 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail\n                {}",
        crate::rocblas_system::BUILD_ROUTE
            .trim_start()
            .replace("gfx1012", "gfx1010")
            .replace(
                "fix: ",
                &format!(
                    "{}\n                fix: ",
                    THEROCK_ROCBLAS.lines().next().unwrap()
                )
            )
    );
    assert!(
        row.lines().count() == want.lines().count()
            && want
                .lines()
                .zip(row.lines())
                .all(|(w, g)| crate::support_run::line_matches(w, g)),
        "expected\n{want}\ngot\n{row}\n{out}"
    );
    assert_eq!(code, 1, "{out}");
}

/// hipBLASLt without the card's code is a warning (torch falls back to
/// hipBLAS), TheRock's own build the same; MIOpen's databases for the card
/// are information.
#[test]
fn hipblaslt_without_the_card_warns_and_miopens_databases_inform() {
    let (sb, lib) = torch_with("gfx1010", "rx5600xt-gfx1010");
    let blaslt = sb.root.join("blaslt");
    std::fs::create_dir_all(&blaslt).unwrap();
    let built = rdna1_testkit::fat_library(&blaslt, &["gfx1030"]);
    std::fs::rename(built, lib.join("libhipblaslt.so")).unwrap();
    let l = lib.display().to_string();
    let hip = fat_library_linking(
        &blaslt,
        &["gfx1010"],
        &[
            "-L",
            &l,
            "-lrocblas",
            "-lhipblaslt",
            "-lMIOpen",
            "-lamdhip64",
            "-Wl,-rpath,$ORIGIN",
        ],
    );
    std::fs::copy(hip, lib.join("libtorch_hip.so")).unwrap();
    tensile(
        &lib,
        &[
            ("TensileLibrary_lazy_gfx1010.dat", "catalogue"),
            ("Kernels.so-000-gfx1010.hsaco", "gfx1010.hsaco"),
        ],
    );
    let db = lib.parent().unwrap().join("share/miopen/db");
    std::fs::create_dir_all(&db).unwrap();
    for f in ["gfx1010_40.kdb", "gfx1010_40.db", "gfx1030_36.kdb"] {
        std::fs::write(db.join(f), "").unwrap();
    }
    let (out, code) = doctor(&sb);
    assert_eq!(
        row_with_fix(&out, "library").lines().next().unwrap(),
        format!(
            "ok    library   librocblas.so at {l} has code for gfx1010, gfx1030: gfx1010 (the card's) among them"
        ),
        "{out}"
    );
    let blaslt_row = out
        .lines()
        .find(|r| r.contains("libhipblaslt.so at"))
        .unwrap_or_else(|| panic!("no hipBLASLt row in:\n{out}"));
    assert_eq!(
        blaslt_row,
        format!(
            "warn  library   libhipblaslt.so at {l} has code for gfx1030, none for gfx1010 (the card's): torch falls back to hipBLAS for its GEMMs (\"Attempting to use hipBLASLt on an unsupported architecture! Overriding blas backend to hipblas\")"
        ),
        "{out}"
    );
    assert!(
        out.contains("fix: TheRock builds no hipBLASLt for gfx101x either (TheRock's cmake/therock_amdgpu_targets.cmake at 89553ce): its torch goes the same way; nothing to install"),
        "{out}"
    );
    let no_dir = out
        .lines()
        .find(|r| r.contains("hipBLASLt's Tensile directory"))
        .unwrap_or_else(|| panic!("no hipBLASLt tensile row in:\n{out}"));
    assert_eq!(
        no_dir,
        format!(
            "warn  tensile   hipBLASLt's Tensile directory {l}/hipblaslt/library has no kernels for gfx1010 (the card's): torch falls back to hipBLAS for its GEMMs (\"Attempting to use hipBLASLt on an unsupported architecture! Overriding blas backend to hipblas\")"
        ),
        "{out}"
    );
    assert_eq!(
        check_row(&out, "miopen-db"),
        format!(
            "ok    miopen-db {}: 2 of its 3 database file(s) for gfx1010: gfx1010_40.db, gfx1010_40.kdb",
            db.display()
        ),
        "{out}"
    );
    // Information, by the answer's rule: torch falls back and works.
    assert!(
        out.starts_with("verdict: torch 2.5.1+rocm6.2 on gfx1010: no problem found; 2 warnings\n"),
        "{out}"
    );
    assert_eq!(code, 0, "a warning and information only:\n{out}");
}

/// With HSA_OVERRIDE_GFX_VERSION=10.3.0 ROCm reports gfx1030 and loads
/// gfx1030's code: a rocBLAS built for gfx1030 only is then judged for
/// gfx1030. With no card seen, gfx1010 is judged.
#[test]
fn the_target_judged_is_the_one_rocm_reports() {
    let (sb, lib) = torch_with("gfx1030", "rx5600xt-gfx1010");
    tensile(
        &lib,
        &[
            ("TensileLibrary_lazy_gfx1030.dat", "catalogue"),
            (
                "TensileLibrary_Type_SS_Contraction_gfx1030.co",
                "gfx1030.co",
            ),
        ],
    );
    let (out, _) = doctor_with(&sb, Some("10.3.0"));
    assert_eq!(
        check_row(&out, "library"),
        format!(
            "ok    library   librocblas.so at {} has code for gfx1030: gfx1030 (what HSA_OVERRIDE_GFX_VERSION makes ROCm report) among them",
            lib.display()
        ),
        "{out}"
    );
    assert!(
        check_row(&out, "tensile").starts_with("ok    tensile"),
        "{out}"
    );
    sb.set_gpus(gpus("no-gpu"));
    let (out, _) = doctor(&sb);
    assert!(
        check_row(&out, "library").ends_with(
            "has code for gfx1030, none for gfx1010 (no card seen: the RX 5700's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail"
        ),
        "{out}"
    );
}

/// verify reads the same libraries as doctor, for the torch it checks: a
/// rocBLAS without the card's code fails verify too, and its JSON has the
/// reading.
#[test]
fn verify_reads_torchs_gpu_libraries_as_doctor_does() {
    let (sb, lib) = torch_with("gfx1030", "rx5600xt-gfx1010");
    let dir = lib.parent().unwrap().display().to_string();
    let run = sb.run_with_state(&["verify", "--torch-dir", &dir], &[]);
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        check_row(&run.stdout, "library"),
        format!(
            "FAIL  library   librocblas.so at {} has code for gfx1030, none for gfx1010 (the card's): every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail",
            lib.display()
        ),
        "{}",
        run.stdout
    );
    let json = sb.run_with_state(&["verify", "--torch-dir", &dir, "--json"], &[]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let rocblas = v["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "library" && f["name"] == "librocblas.so")
        .unwrap_or_else(|| panic!("{}", json.stdout));
    assert_eq!(rocblas["targets"], serde_json::json!(["gfx1030"]));
    assert_eq!(rocblas["card"], "gfx1010");
    assert_eq!(rocblas["card_covered"], false);
}
