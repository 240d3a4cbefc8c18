//! GPU_TARGETS: the RDNA1 cards of the machine (recorded KFD topologies),
//! `--gpu-targets`, `-D`, and the warning when a card's arch was left out.

use crate::support::{HIP, Sandbox, TorchKind, gpus};

/// The sandbox's build with the topology `tree` instead of none.
fn build_on(sb: &Sandbox, tree: &str, extra: &[&str]) -> crate::support::Run {
    sb.set_gpus(gpus(tree));
    sb.build(extra)
}

#[test]
fn gpu_targets_are_the_rdna1_cards_the_machine_has() {
    let sb = Sandbox::new();
    for (tree, targets, why) in [
        (
            "rx5600xt-gfx1010",
            "gfx1010",
            "the RDNA1 card(s) in the KFD topology",
        ),
        (
            "two-cards-gfx1010-gfx1012",
            "gfx1010;gfx1012",
            "the RDNA1 card(s) in the KFD topology",
        ),
        // The APU's gfx90c is not RDNA1, and needs nothing from this build.
        (
            "apu-gfx90c-rx5600xt",
            "gfx1010",
            "the RDNA1 card(s) in the KFD topology",
        ),
        (
            "rx6800-gfx1030",
            "gfx1010;gfx1011;gfx1012",
            "the profile's: no RDNA1 card in the KFD topology",
        ),
        (
            "no-gpu",
            "gfx1010;gfx1011;gfx1012",
            "the profile's: no RDNA1 card in the KFD topology",
        ),
    ] {
        let run = build_on(&sb, tree, &["--dry-run"]).ok();
        run.prints(&format!(
            "targets:   {targets} ({why}; --gpu-targets to choose)"
        ));
        run.prints(&format!("'-DGPU_TARGETS={targets}'"));
    }
    let run = build_on(
        &sb,
        "rx5600xt-gfx1010",
        &["--dry-run", "--gpu-targets", "gfx1012,gfx1011"],
    )
    .ok();
    run.prints("targets:   gfx1012;gfx1011 (--gpu-targets)");
    let run = build_on(
        &sb,
        "rx5600xt-gfx1010",
        &["--dry-run", "-D", "GPU_TARGETS=gfx1011"],
    )
    .ok();
    run.prints("targets:   gfx1011 (-D GPU_TARGETS)");
    let run = build_on(
        &sb,
        "rx5600xt-gfx1010",
        &["--dry-run", "--gpu-targets", "navi10"],
    )
    .fails_with(
        r#"error: invalid value 'navi10' for '--gpu-targets <LIST>': `navi10` is not a GPU arch like gfx1010 (RX 5600/5700), gfx1011 or gfx1012 (RX 5500)
help: `rdna1-patch build --help` lists its arguments"#,
    );
    run.says("`navi10` is not a GPU arch like gfx1010");
}

#[test]
fn a_card_left_out_of_the_build_is_named_by_verify_and_install() {
    let sb = Sandbox::new();
    let run = build_on(&sb, "rx5600xt-gfx1010", &[]).ok();
    run.says("Targets gfx1010 (the RDNA1 card(s) in the KFD topology");
    let prov =
        std::fs::read_to_string(sb.prefix.join("share/rdna1-patch/provenance.toml")).unwrap();
    assert!(prov.contains("GPU_TARGETS = \"gfx1010\""), "{prov}");
    let cache = std::fs::read_to_string(sb.work.join("mini/miopen/build/CMakeCache.txt")).unwrap();
    assert!(cache.contains("GPU_TARGETS:STRING=gfx1010\n"), "{cache}");

    sb.set_gpus(gpus("rx5600xt-gfx1010"));
    let ok = sb.verify(&[]).ok();
    ok.prints("ok    targets   built for gfx1010");
    sb.set_gpus(gpus("two-cards-gfx1010-gfx1012"));
    let two = sb.verify(&[]);
    two.prints(
        "warn  targets   the library was built for gfx1010 (GPU_TARGETS), but this machine has gfx1012",
    );
    two.prints("rdna1-patch build miopen --gpu-targets gfx1010,gfx1012");

    sb.torch(TorchKind::Rocm, HIP);
    let install = sb.install(&[]).ok();
    install.says("warning: the library was built for gfx1010 (GPU_TARGETS), but this machine has gfx1012; rebuild with `rdna1-patch build miopen --gpu-targets gfx1010,gfx1012[..]`");
}
