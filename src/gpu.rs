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
/// an empty list.
pub fn scan(sysfs: &Path) -> Vec<Gpu> {
    let mut gpus = Vec::new();
    let Ok(rd) = std::fs::read_dir(topology(sysfs)) else {
        return gpus;
    };
    for e in rd.flatten() {
        let Some(node) = e.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(e.path().join("properties")) else {
            continue;
        };
        let prop = |key: &str| {
            text.lines()
                .filter_map(|l| l.split_once(' '))
                .find(|(k, _)| *k == key)
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let gfx = prop("gfx_target_version");
        if gfx == 0 {
            continue; // a CPU node
        }
        let loc = prop("location_id");
        gpus.push(Gpu {
            node,
            gfx_target_version: gfx,
            vendor_id: prop("vendor_id"),
            device_id: prop("device_id"),
            pci: format!(
                "{:04x}:{:02x}:{:02x}.{:x}",
                prop("domain"),
                (loc >> 8) & 0xff,
                (loc >> 3) & 0x1f,
                loc & 0x7
            ),
        });
    }
    gpus.sort_by_key(|g| g.node);
    gpus
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
    AMDGPU_PARAMS
        .iter()
        .map(|p| {
            (
                *p,
                std::fs::read_to_string(dir.join(p))
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

    #[test]
    fn names() {
        assert_eq!(gfx_name(100102), "gfx1012");
        assert_eq!(gfx_name(90006), "gfx906");
        assert_eq!(gfx_name(90010), "gfx90a");
        assert_eq!(override_gfx("10.3.0").as_deref(), Some("gfx1030"));
        assert_eq!(override_gfx("junk"), None);
    }
}
