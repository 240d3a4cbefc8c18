//! The RDNA1 detection of the built-in MIOpen series: the `rdna1.hpp` that
//! patch 0001 adds, compiled with g++ into tests/fixtures/rdna1-harness
//! (stand-ins for HIP and MIOpen's logger) and run against KFD topologies
//! made from the recorded sysfs trees.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rdna1_patch::builder::patch::{Series, Workspace};
use rdna1_patch::builder::profile::Profile;

use crate::support::fixtures;

const HEADER: &str = "src/include/miopen/rdna1.hpp";

/// The harness, built once per run from each built-in profile's header
/// (they must agree, so the rocm-6.2.4 one stands for both).
fn harness() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let profile = Profile::load("rocm-6.2.4").unwrap();
        let c = profile.component("miopen").unwrap();
        let series = Series::load(&profile.series_dir(c).unwrap()).unwrap();
        let none = |_: &str| Ok(None);
        let mut ws = Workspace::new(&none);
        let (_, p0001) = series.get("0001-rdna1-detection.patch").unwrap();
        ws.apply(p0001).unwrap();
        let header = ws.get(HEADER).unwrap().expect("0001 creates rdna1.hpp");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rdna1-harness");
        let include = dir.join("include/miopen");
        std::fs::create_dir_all(&include).unwrap();
        std::fs::write(include.join("rdna1.hpp"), header).unwrap();
        let src = fixtures().join("rdna1-harness");
        let bin = dir.join("harness");
        let out = Command::new("g++")
            .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(src.join("stubs"))
            .arg("-I")
            .arg(dir.join("include"))
            .arg(src.join("main.cpp"))
            .arg("-o")
            .arg(&bin)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the harness does not compile:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
}

/// What the harness printed for a HIP device at `pci` named `arch`.
fn decide(topology: &Path, pci: &str, arch: &str) -> String {
    let out = rdna1_testkit::run(
        Command::new(harness())
            .arg(topology)
            .arg("0")
            .env("STUB_PCI", pci)
            .env("STUB_ARCH", arch)
            .env_remove("STUB_FAIL_FIRST")
            .env_remove("MIOPEN_FORCE_RDNA1"),
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A recorded node's properties.
fn recorded(tree: &str, node: u32) -> String {
    std::fs::read_to_string(
        fixtures()
            .join("sysfs")
            .join(tree)
            .join(format!("class/kfd/kfd/topology/nodes/{node}/properties")),
    )
    .unwrap()
}

enum Node {
    Props(String),
    /// `properties` cannot be read (here: it is a directory).
    Unreadable,
}

fn topology(root: &Path, nodes: Vec<Node>) -> PathBuf {
    let topo = root.join("topology");
    for (i, n) in nodes.into_iter().enumerate() {
        let dir = topo.join(format!("nodes/{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        match n {
            Node::Props(text) => std::fs::write(dir.join("properties"), text).unwrap(),
            Node::Unreadable => std::fs::create_dir(dir.join("properties")).unwrap(),
        }
    }
    topo
}

const RX5600: &str = "rx5600xt-gfx1010";

#[test]
fn an_overridden_rdna1_card_is_found_by_its_kfd_node() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = topology(
        tmp.path(),
        vec![
            Node::Props(recorded(RX5600, 0)),
            Node::Props(recorded(RX5600, 1)),
        ],
    );
    // HSA_OVERRIDE_GFX_VERSION=10.3.0: HIP says gfx1030.
    assert_eq!(
        decide(&topo, "0:3:0", "gfx1030"),
        "rdna1=1 definitive=1 why=KFD node 1: gfx_target_version 100100, PCI device 0x731f"
    );
    // A real gfx1030 (RX 6800) under its own name is not RDNA1.
    let rx6800 = fixtures().join("sysfs/rx6800-gfx1030/class/kfd/kfd/topology");
    assert_eq!(
        decide(&rx6800, "0:c:0", "gfx1030"),
        "rdna1=0 definitive=1 why=KFD node 1: gfx_target_version 100300, PCI device 0x73bf"
    );
}

#[test]
fn an_unreadable_node_does_not_hide_the_rdna1_node_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let topo = topology(
        tmp.path(),
        vec![
            Node::Props(recorded(RX5600, 0)),
            Node::Unreadable,
            Node::Props(recorded(RX5600, 1)),
        ],
    );
    assert_eq!(
        decide(&topo, "0:3:0", "gfx1030"),
        "rdna1=1 definitive=1 why=KFD node 2: gfx_target_version 100100, PCI device 0x731f"
    );
}

#[test]
fn a_gpu_node_without_gfx_target_version_is_known_by_pci_id() {
    let tmp = tempfile::tempdir().unwrap();
    let old_kernel: String = recorded(RX5600, 1)
        .lines()
        .filter(|l| !l.starts_with("gfx_target_version"))
        .map(|l| format!("{l}\n"))
        .collect();
    let topo = topology(
        tmp.path(),
        vec![Node::Props(recorded(RX5600, 0)), Node::Props(old_kernel)],
    );
    assert_eq!(
        decide(&topo, "0:3:0", "gfx1030"),
        "rdna1=1 definitive=1 why=KFD node 1: gfx_target_version 0, PCI device 0x731f"
    );
}

#[test]
fn an_apu_and_an_rx5700_are_told_apart() {
    let tmp = tempfile::tempdir().unwrap();
    // A Renoir APU (gfx90c) is one node with CPU cores and SIMDs, at 0a:00.0.
    let apu = recorded(RX5600, 0)
        .replace("simd_count 0", "simd_count 8")
        .replace("gfx_target_version 0", "gfx_target_version 90012")
        .replace("device_id 0", "device_id 5686")
        .replace("location_id 0", "location_id 2560");
    let topo = topology(
        tmp.path(),
        vec![Node::Props(apu), Node::Props(recorded(RX5600, 1))],
    );
    assert_eq!(
        decide(&topo, "0:a:0", "gfx90c"),
        "rdna1=0 definitive=1 why=KFD node 0: gfx_target_version 90012, PCI device 0x1636"
    );
    assert_eq!(
        decide(&topo, "0:3:0", "gfx1030"),
        "rdna1=1 definitive=1 why=KFD node 1: gfx_target_version 100100, PCI device 0x731f"
    );
}

#[test]
fn without_a_topology_the_gfx_name_decides_and_a_failure_is_not_cached() {
    let missing = Path::new("/nonexistent/topology");
    assert_eq!(
        decide(missing, "0:3:0", "gfx1010"),
        "rdna1=1 definitive=1 why=no KFD node matched the PCI location; HIP reports gfx1010"
    );
    assert_eq!(
        decide(missing, "0:3:0", "gfx1030"),
        "rdna1=0 definitive=1 why=no KFD node matched the PCI location; HIP reports gfx1030"
    );
    // hipGetDeviceProperties fails once: that answer is not kept.
    let out = Command::new(harness())
        .args(["--cached", "0"])
        .env("STUB_FAIL_FIRST", "1")
        .env("STUB_PCI", "0:0:0")
        .env("STUB_ARCH", "gfx1010")
        .env_remove("MIOPEN_FORCE_RDNA1")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "cached: first=0 second=1"
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("log warning: [RDNA1 PATCH] is_gpu_rdna1: device 0 is not RDNA1 (hipGetDeviceProperties failed (101))"),
        "{log}"
    );
}

/// Issue 61: the sysfs fixtures' README describes each tree once, as a
/// list entry of its own or by its parts (two entries for one tree said
/// different things).
#[test]
fn each_sysfs_tree_is_described_once() {
    let dir = fixtures().join("sysfs");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let mut trees: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    trees.sort();
    // A tree's own entry is "- `NAME`:"; the recorded ones are described
    // by their parts ("- `rx5600xt-gfx1010/class/...`").
    let entries = |t: &str| readme.matches(&format!("- `{t}`:")).count();
    let parts = |t: &str| readme.matches(&format!("`{t}/")).count();
    let described: Vec<(&str, bool)> = trees
        .iter()
        .map(|t| {
            (
                t.as_str(),
                entries(t) == 1 || (entries(t) == 0 && parts(t) > 0),
            )
        })
        .collect();
    let all: Vec<(&str, bool)> = trees.iter().map(|t| (t.as_str(), true)).collect();
    assert_eq!(described, all);
}
