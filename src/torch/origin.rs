//! Who built a torch, as far as its files say: TheRock (its rocm-sdk
//! packages beside torch; pytorch.org's wheels from ROCm 7.14 too),
//! pytorch.org (a wheel that bundles its ROCm libraries in torch/lib and
//! says `+rocmX.Y` in its version), or its user (for gfx101x, against a
//! ROCm of theirs: the in-place and system routes' people, whose rocBLAS
//! this tool builds).

use super::{Layout, Torch};

/// Whether `t` is one its user built: neither TheRock's nor pytorch.org's.
/// One that loads the system's rocBLAS was built against that system.
pub fn self_built(t: &Torch) -> bool {
    if let Layout::RocmSdk(_) = t.layout {
        return false;
    }
    let bundled = super::system::loads(&t.dir, "librocblas.so")
        .ok()
        .flatten()
        .is_some_and(|l| l.loaded.starts_with(&t.dir));
    !(bundled && pytorch_org_version(&t.version))
}

/// "2.6.0+rocm6.4", "2.5.1+rocm6.2.4": a pytorch.org ROCm wheel's
/// version, its local label the ROCm line alone ("2.6.0a0+git1eba9b3", a
/// build's from a checkout, is not).
fn pytorch_org_version(version: &str) -> bool {
    version.split_once("+rocm").is_some_and(|(public, rocm)| {
        !public.contains(|c: char| c.is_ascii_alphabetic())
            && !rocm.is_empty()
            && rocm
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorch_orgs_versions_are_told_from_a_builds() {
        assert!(pytorch_org_version("2.6.0+rocm6.4"));
        assert!(pytorch_org_version("2.5.1+rocm6.2.4"));
        assert!(!pytorch_org_version("2.6.0a0+git1eba9b3"));
        assert!(!pytorch_org_version("2.6.0"));
        assert!(!pytorch_org_version("2.7.1+rocm7.10.0a20251120"));
        assert!(!pytorch_org_version("2.6.0a0+rocm6.4"));
    }
}
