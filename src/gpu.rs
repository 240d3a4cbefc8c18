//! The GPUs the kernel driver reports, read from the KFD topology in sysfs.
//! These files name the real chip: HSA_OVERRIDE_GFX_VERSION changes what
//! ROCm's user-space runtime reports, never them.

use std::path::{Path, PathBuf};

/// One GPU node of /sys/class/kfd/kfd/topology/nodes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Gpu {
    pub node: u32,
    /// major*10000 + minor*100 + stepping, e.g. 100100 for gfx1010.
    pub gfx_target_version: u64,
    pub vendor_id: u64,
    pub device_id: u64,
    /// PCI bus/device/function as domain:bus:dev.fn.
    pub pci: String,
}

impl Gpu {
    /// "gfx1010", "gfx1030", "gfx906".
    pub fn gfx(&self) -> String {
        gfx_name(self.gfx_target_version)
    }

    /// gfx1010, gfx1011 and gfx1012: RX 5500/5600/5700, Navi 10/12/14.
    pub fn is_rdna1(&self) -> bool {
        self.gfx_target_version / 100 == 1001
    }

    pub fn is_amd(&self) -> bool {
        self.vendor_id == 0x1002
    }

    /// A name for the PCI device id, when it is one we know.
    pub fn model(&self) -> &'static str {
        match self.device_id {
            0x731F => "Navi 10 (RX 5600/5700 series)",
            0x7310 | 0x7312 => "Navi 10 (Radeon Pro W5700)",
            0x7340 | 0x7341 | 0x7347 => "Navi 14 (RX 5500 series)",
            0x7360 | 0x7362 => "Navi 12 (Radeon Pro 5600M/V520)",
            0x73A2..=0x73AF | 0x73BF => "Navi 21 (RX 6800/6900 series)",
            0x73DF => "Navi 22 (RX 6700 series)",
            0x73EF | 0x73FF => "Navi 23 (RX 6600 series)",
            _ => "unknown model",
        }
    }
}

pub fn gfx_name(v: u64) -> String {
    let (major, minor, step) = (v / 10000, (v / 100) % 100, v % 100);
    format!("gfx{major}{minor:x}{step:x}")
}

/// The topology directory below a sysfs root (`/sys` normally).
pub fn topology(sysfs: &Path) -> PathBuf {
    sysfs.join("class/kfd/kfd/topology/nodes")
}

/// Every GPU node, in node order. No KFD (no amdgpu driver, no GPU) gives
/// an empty list; nodes that cannot be read are left out (see [`scan_all`]).
pub fn scan(sysfs: &Path) -> Vec<Gpu> {
    scan_all(sysfs).gpus
}

/// The sysfs root the GPUs are read from (its KFD topology): `/sys`, or
/// `$RDNA1_PATCH_SYSFS` when set. A test hook (the recorded topologies the
/// tests and the demo run against), kept out of the options so that no
/// help, completion or man page offers it to users.
pub fn sysfs_root() -> PathBuf {
    std::env::var_os("RDNA1_PATCH_SYSFS")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/sys"), PathBuf::from)
}

/// The gfx names of the RDNA1 cards the topology shows, in node order and
/// each once: what a build for this machine needs in GPU_TARGETS.
pub fn rdna1_targets(sysfs: &Path) -> Vec<String> {
    scan_all(sysfs).rdna1_targets()
}

/// Whether an offload arch (`gfx1010`, `gfx1012:xnack-`) is an RDNA1 chip.
pub fn is_rdna1_arch(arch: &str) -> bool {
    matches!(
        arch.split(':').next().unwrap_or(arch),
        "gfx1010" | "gfx1011" | "gfx1012"
    )
}

impl Scan {
    /// [`rdna1_targets`] of a scan already made.
    pub fn rdna1_targets(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for g in self.gpus.iter().filter(|g| g.is_amd() && g.is_rdna1()) {
            if !out.contains(&g.gfx()) {
                out.push(g.gfx());
            }
        }
        out
    }
}

/// The RDNA1 cards' arches that a build for `targets` (GPU_TARGETS, e.g.
/// "gfx1010;gfx1011:xnack-") has no code for.
pub fn rdna1_targets_missing(targets: &str, sysfs: &Path) -> Vec<String> {
    let built: Vec<&str> = targets
        .split([';', ','])
        .map(|t| t.split(':').next().unwrap_or(t).trim())
        .collect();
    rdna1_targets(sysfs)
        .into_iter()
        .filter(|g| !built.contains(&g.as_str()))
        .collect()
}

/// What to say about a build for `targets` on this machine: None when it
/// covers every RDNA1 card here (or there is none).
pub fn targets_warning(targets: &str, sysfs: &Path) -> Option<(String, String)> {
    let missing = rdna1_targets_missing(targets, sysfs);
    if missing.is_empty() {
        return None;
    }
    let mut all: Vec<String> = targets.split(';').map(str::to_owned).collect();
    all.extend(missing.iter().cloned());
    Some((
        format!(
            "the library was built for {} (GPU_TARGETS), but this machine has {}",
            targets.replace(';', ", "),
            missing.join(", ")
        ),
        format!(
            "rebuild with `{}`",
            crate::shell::tool(["build", "miopen", "--gpu-targets", &all.join(",")])
        ),
    ))
}

/// The GPUs, and why any node was left out: a node whose properties cannot
/// be read (a container's device cgroup answers EPERM for hidden GPUs) or
/// hold values that are not numbers must not make a GPU vanish silently.
#[derive(Debug, Default)]
pub struct Scan {
    pub gpus: Vec<Gpu>,
    pub problems: Vec<String>,
}

/// sysfs files are a few hundred bytes; a FIFO or a huge file is not sysfs.
const SYSFS_LIMIT: u64 = 64 << 10;

pub fn scan_all(sysfs: &Path) -> Scan {
    as_user(sysfs, || scan_all_now(sysfs))
}

/// Run `f`, which reads under `sysfs`: a tree `RDNA1_PATCH_SYSFS` names
/// (not `/sys`) is read as sudo's user when root acts for one, so a
/// symlink of theirs there to a file only root may read shows nothing
/// (issue 69); `/sys` as is.
fn as_user<T: Default>(sysfs: &Path, f: impl FnOnce() -> T) -> T {
    match sysfs == Path::new("/sys") {
        true => f(),
        false => crate::fsutil::fd::as_invoking_user(f).unwrap_or_default(),
    }
}

fn scan_all_now(sysfs: &Path) -> Scan {
    let mut out = Scan::default();
    let Ok(rd) = std::fs::read_dir(topology(sysfs)) else {
        return out;
    };
    let mut nodes: Vec<(u32, PathBuf)> = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        match name.to_str().and_then(|n| n.parse().ok()) {
            Some(node) => nodes.push((node, e.path())),
            None => out.problems.push(format!(
                "{}: not a node number (0 to {}); left out",
                e.path().display(),
                u32::MAX
            )),
        }
    }
    nodes.sort();
    for (node, path) in nodes {
        let text = match crate::fsutil::read_small(&path.join("properties"), SYSFS_LIMIT) {
            Ok(t) => t,
            Err(e) => {
                out.problems.push(format!("node {node}: {e:#}"));
                continue;
            }
        };
        match parse_node(node, &text) {
            Ok(Some(g)) => out.gpus.push(g),
            Ok(None) => {}
            Err(e) => out.problems.push(format!("node {node}: {e}")),
        }
    }
    out
}

/// One node's properties: `Ok(None)` for a CPU node (no SIMDs).
fn parse_node(node: u32, text: &str) -> Result<Option<Gpu>, String> {
    let mut props = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(' ') else {
            continue;
        };
        if let Some(was) = props.insert(k, v.trim())
            && was != v.trim()
        {
            // The kernel writes each key once: two values mean the file is
            // not what the driver wrote, and neither can be trusted.
            return Err(format!(
                "{k} is given twice (`{}`, then `{}`)",
                was.escape_debug(),
                v.trim().escape_debug()
            ));
        }
    }
    let prop = |key: &str| -> Result<u64, String> {
        match props.get(key) {
            None => Ok(0),
            Some(v) => v.parse::<u64>().map_err(|_| {
                format!(
                    "{key} is `{}`, not a number this tool can read",
                    v.escape_debug()
                )
            }),
        }
    };
    let simds = prop("simd_count")?;
    let mut gfx = prop("gfx_target_version")?;
    let device_id = prop("device_id")?;
    if simds == 0 && gfx == 0 {
        return Ok(None); // a CPU node
    }
    if gfx == 0 {
        // Older kernels do not export gfx_target_version: know RDNA1 by its PCI id.
        gfx = rdna1_by_pci_id(device_id).unwrap_or(0);
    }
    let (minor, step) = ((gfx / 100) % 100, gfx % 100);
    if minor > 0xf || step > 0xf {
        // gfx names take one hex digit each: 100199 would read as gfx10163.
        return Err(format!(
            "gfx_target_version is {gfx}: its minor version ({minor}) or stepping ({step}) is over 15, so it names no GPU arch"
        ));
    }
    let loc = prop("location_id")?;
    Ok(Some(Gpu {
        node,
        gfx_target_version: gfx,
        vendor_id: prop("vendor_id")?,
        device_id,
        pci: format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            prop("domain")?,
            (loc >> 8) & 0xff,
            (loc >> 3) & 0x1f,
            loc & 0x7
        ),
    }))
}

/// The gfx_target_version of a Navi 10/12/14 PCI device id.
pub fn rdna1_by_pci_id(device_id: u64) -> Option<u64> {
    match device_id {
        0x7310 | 0x7312 | 0x7318..=0x731F => Some(100100),
        0x7360 | 0x7362 => Some(100101),
        0x7340 | 0x7341 | 0x7347 | 0x734F => Some(100102),
        _ => None,
    }
}

/// HSA_OVERRIDE_GFX_VERSION and the target it makes ROCm report, when it
/// names one.
pub fn seen_override() -> Option<(String, String)> {
    let v = std::env::var("HSA_OVERRIDE_GFX_VERSION").ok()?;
    let target = override_gfx(&v)?;
    Some((v, target))
}

/// HSA_OVERRIDE_GFX_VERSION ("10.3.0") as a gfx name ("gfx1030").
pub fn override_gfx(value: &str) -> Option<String> {
    let mut it = value.trim().split('.').map(|p| p.parse::<u64>().ok());
    let (major, minor, step) = (it.next()??, it.next()??, it.next()??);
    Some(gfx_name(major * 10000 + minor * 100 + step))
}

/// The amdgpu module parameters that matter on RDNA1, as found.
pub const AMDGPU_PARAMS: [&str; 3] = ["noretry", "mtype_local", "vm_fragment_size"];

pub fn amdgpu_params(sysfs: &Path) -> Vec<(&'static str, Option<String>)> {
    let dir = sysfs.join("module/amdgpu/parameters");
    as_user(sysfs, || params_in(&dir))
}

fn params_in(dir: &Path) -> Vec<(&'static str, Option<String>)> {
    AMDGPU_PARAMS
        .iter()
        .map(|p| {
            (
                *p,
                crate::fsutil::read_small(&dir.join(p), SYSFS_LIMIT)
                    .ok()
                    .map(|v| v.trim().to_owned()),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(name)
    }

    #[test]
    fn a_recorded_rx5600xt_is_gfx1010_rdna1() {
        let gpus = scan(&recorded("rx5600xt-gfx1010"));
        assert_eq!(gpus.len(), 1);
        let g = &gpus[0];
        assert_eq!(
            (g.gfx().as_str(), g.node, g.device_id),
            ("gfx1010", 1, 0x731F)
        );
        assert!(g.is_rdna1() && g.is_amd());
        assert_eq!(g.pci, "0000:03:00.0");
        assert_eq!(g.model(), "Navi 10 (RX 5600/5700 series)");
        let params = amdgpu_params(&recorded("rx5600xt-gfx1010"));
        assert_eq!(params[0], ("noretry", Some("-1".to_owned())));
    }

    #[test]
    fn a_recorded_rx6800_is_gfx1030_not_rdna1() {
        let gpus = scan(&recorded("rx6800-gfx1030"));
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].gfx(), "gfx1030");
        assert!(!gpus[0].is_rdna1());
        assert!(
            amdgpu_params(&recorded("rx6800-gfx1030"))
                .iter()
                .all(|(_, v)| v.is_none())
        );
    }

    #[test]
    fn no_gpu_and_no_kfd_scan_empty() {
        assert!(scan(&recorded("no-gpu")).is_empty());
        assert!(scan(Path::new("/nonexistent")).is_empty());
    }

    /// Copy a recorded tree so that a test can spoil it.
    fn spoiled(name: &str, node: &str, edit: impl FnOnce(&Path)) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("cp")
            .arg("-r")
            .arg(recorded(name))
            .arg(tmp.path().join("sys"))
            .status()
            .unwrap();
        assert!(status.success());
        edit(
            &topology(&tmp.path().join("sys"))
                .join(node)
                .join("properties"),
        );
        tmp
    }

    #[test]
    fn a_fifo_or_bad_values_are_named_not_hidden() {
        let fifo = spoiled("rx5600xt-gfx1010", "1", |p| {
            std::fs::remove_file(p).unwrap();
            crate::fsutil::mkfifo(p);
        });
        let s = scan_all(&fifo.path().join("sys"));
        assert!(s.gpus.is_empty());
        assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
        assert!(s.problems[0].starts_with("node 1: "), "{:?}", s.problems);
        assert!(
            s.problems[0].ends_with("is a FIFO, not a regular file"),
            "{:?}",
            s.problems
        );
        for bad in ["-1", "99999999999999999999999", "\u{1}\u{2}"] {
            let t = spoiled("rx5600xt-gfx1010", "1", |p| {
                let text = std::fs::read_to_string(p).unwrap();
                let text = text.replace(
                    "gfx_target_version 100100",
                    &format!("gfx_target_version {bad}"),
                );
                std::fs::write(p, text).unwrap();
            });
            let s = scan_all(&t.path().join("sys"));
            assert!(s.gpus.is_empty(), "{bad}");
            assert_eq!(
                s.problems,
                [format!(
                    "node 1: gfx_target_version is `{}`, not a number this tool can read",
                    bad.escape_debug()
                )]
            );
        }
    }

    #[test]
    fn impossible_versions_odd_node_names_and_doubled_keys_are_named() {
        let t = spoiled("rx5600xt-gfx1010", "1", |p| {
            let text = std::fs::read_to_string(p).unwrap();
            std::fs::write(
                p,
                text.replace("gfx_target_version 100100", "gfx_target_version 100199"),
            )
            .unwrap();
        });
        let s = scan_all(&t.path().join("sys"));
        assert!(s.gpus.is_empty());
        assert_eq!(
            s.problems,
            [
                "node 1: gfx_target_version is 100199: its minor version (1) or stepping (99) is over 15, so it names no GPU arch"
            ]
        );

        let t = spoiled("rx5600xt-gfx1010", "1", |p| {
            let text = std::fs::read_to_string(p).unwrap();
            std::fs::write(p, format!("{text}gfx_target_version 100300\n")).unwrap();
        });
        let s = scan_all(&t.path().join("sys"));
        assert!(s.gpus.is_empty());
        assert_eq!(
            s.problems,
            ["node 1: gfx_target_version is given twice (`100100`, then `100300`)"]
        );

        use std::os::unix::ffi::OsStrExt;
        let t = spoiled("rx5600xt-gfx1010", "1", |_| {});
        let nodes = topology(&t.path().join("sys"));
        copy(&nodes.join("1"), &nodes.join("4294967296"));
        copy(
            &nodes.join("1"),
            &nodes.join(std::ffi::OsStr::from_bytes(b"\xff")),
        );
        let s = scan_all(&t.path().join("sys"));
        assert_eq!(s.gpus.len(), 1, "node 1 still counts");
        let mut problems = s.problems.clone();
        problems.sort();
        assert_eq!(
            problems,
            [
                format!(
                    "{}: not a node number (0 to 4294967295); left out",
                    nodes.join("4294967296").display()
                ),
                format!(
                    "{}/\u{fffd}: not a node number (0 to 4294967295); left out",
                    nodes.display()
                ),
            ]
        );
    }

    #[test]
    fn an_unreadable_node_does_not_hide_the_next() {
        let t = spoiled("rx5600xt-gfx1010", "1", |_| {});
        let nodes = topology(&t.path().join("sys"));
        copy(&nodes.join("1"), &nodes.join("2"));
        // Node 1 unreadable the way a device cgroup makes it: no properties file to open.
        std::fs::remove_file(nodes.join("1/properties")).unwrap();
        std::fs::create_dir(nodes.join("1/properties")).unwrap();
        let s = scan_all(&t.path().join("sys"));
        assert_eq!(s.gpus.len(), 1);
        assert_eq!(s.gpus[0].node, 2);
        assert_eq!(s.problems.len(), 1);
    }

    #[test]
    fn a_gpu_without_gfx_target_version_is_known_by_pci_id() {
        let t = spoiled("rx5600xt-gfx1010", "1", |p| {
            let text = std::fs::read_to_string(p).unwrap();
            let text: String = text
                .lines()
                .filter(|l| !l.starts_with("gfx_target_version"))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(p, text).unwrap();
        });
        let gpus = scan(&t.path().join("sys"));
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].gfx(), "gfx1010");
    }

    fn copy(from: &Path, to: &Path) {
        let status = std::process::Command::new("cp")
            .arg("-r")
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn names() {
        assert_eq!(gfx_name(100102), "gfx1012");
        assert_eq!(gfx_name(90006), "gfx906");
        assert_eq!(gfx_name(90010), "gfx90a");
        assert_eq!(override_gfx("10.3.0").as_deref(), Some("gfx1030"));
        assert_eq!(override_gfx("junk"), None);
    }
}
