//! The route for every stack, said the same way by doctor, `build
//! --dry-run` and `install --dry-run`, each with the profile chosen for the
//! torch; and no inert build is ever proposed.

use crate::in_place::torch_of;
use crate::support::{Run, Sandbox};

/// What each of the three says for the torch in `sb`.
struct Said {
    doctor: Run,
    build: Run,
    install: Run,
}

fn ask(sb: &Sandbox) -> Said {
    let doctor = sb.run(&["doctor", "--python", "python3"]);
    let build = sb.run(&[
        "build",
        "miopen",
        "--dry-run",
        "--python",
        "python3",
        "--rocm",
        sb.root.join("no-rocm").to_str().unwrap(),
    ]);
    let prefix = sb.root.join("empty-prefix");
    let install = sb.run_with_state(
        &[
            "install",
            "--into-torch",
            "--dry-run",
            "--python",
            "python3",
            "--prefix",
            prefix.to_str().unwrap(),
        ],
        &[],
    );
    Said {
        doctor,
        build,
        install,
    }
}

impl Said {
    /// All three take the in-place route, for the reason `want`.
    #[track_caller]
    fn fixed_in_place(self, want: &str) {
        assert!(
            route_row(&self.doctor).contains(want),
            "{}",
            self.doctor.stdout
        );
        self.build.prints(&format!("route:     {want}"));
        self.install.ok().prints("would fix");
    }
}

/// doctor's route row.
fn route_row(doctor: &Run) -> String {
    doctor
        .stdout
        .lines()
        .skip_while(|l| !l.contains(" route "))
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

const INERT: &str = "so a build would change nothing";

#[test]
fn a_rocm62_wheel_is_built_for_its_detection_and_fast_find_patches() {
    let sb = Sandbox::new();
    torch_of(
        &sb,
        "2.5.1+rocm6.2",
        "6.2.41133-dd7f95766",
        &["gfx1030", "gfx90a"],
    );
    let said = ask(&sb);
    let want = "under HSA_OVERRIDE_GFX_VERSION=10.3.0 the batch-norm patch of profile rocm-6.2.4 is inert, its detection and fast-Find patches act";
    assert!(
        route_row(&said.doctor).contains(want),
        "{}",
        said.doctor.stdout
    );
    said.build.prints(&format!(
        "route:     libtorch_hip.so has code for gfx1030, gfx90a and none for gfx101x: {want}"
    ));
    said.install
        .fails_with(
            r#"error: no usable build: [..]/empty-prefix does not exist
help: run `rdna1-patch build miopen[..]` first, or point --prefix at the prefix it installed to"#,
        )
        .says("no usable build");
}

#[test]
fn rocm64_and_rocm72_wheels_without_gfx101x_code_are_offered_nothing() {
    for (version, hip, profile) in [
        ("2.6.0+rocm6.4", "6.4.43484-123eb5128", "rocm-6.4.3"),
        ("2.10.0+rocm7.2", "7.2.53211-e1e6a5a2f", "rocm-7.2"),
    ] {
        let sb = Sandbox::new();
        torch_of(&sb, version, hip, &["gfx1030"]);
        let said = ask(&sb);
        let row = route_row(&said.doctor);
        assert!(row.contains(INERT) && row.contains(profile), "{row}");
        said.build
            .fails()
            .says(&format!("error: nothing to build for torch {version}: libtorch_hip.so has code for gfx1030 and none for gfx101x"))
            .says(INERT);
        said.install
            .fails()
            .says("neither a build nor the in-place fix would change anything");
    }
}

#[test]
fn a_native_rocm64_torch_is_fixed_in_place_by_all_three() {
    let sb = Sandbox::new();
    torch_of(&sb, "2.6.0+rocm6.4", "6.4.43484-123eb5128", &["gfx1010"]);
    let said = ask(&sb);
    let want = "in place, no build: `rdna1-patch install --into-torch` (MIOpen sees the real chip: libtorch_hip.so has code for gfx1010; every fix of rocm-6.4.3 is kernel text)";
    said.fixed_in_place(want);
}

#[test]
fn therocks_multi_arch_torch_is_fixed_in_place_by_all_three() {
    // therock-7.14's one patch is configuration.hpp's HIP switch, a text
    // the in-place edit knows.
    let sb = Sandbox::new();
    crate::rocm_sdk::multi(&sb, &["gfx1010"]);
    let said = ask(&sb);
    let want = "in place, no build: `rdna1-patch install --into-torch` (MIOpen sees the real chip: rocm-sdk multi-arch, device gfx1010; every fix of therock-7.14 is kernel text)";
    said.fixed_in_place(want);
}
