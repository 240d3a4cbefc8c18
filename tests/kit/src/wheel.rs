//! A stand-in torch wheel: a fake torch tree (see `FakeTorch`) as pip
//! installs it, with METADATA declaring TheRock's device extras and a
//! RECORD of every file, zipped by python's own zipfile. The help lines
//! that get a torch are run against a directory of these, with no network.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Packs `site/torch` into `<out>/torch-<version>-py3-none-any.whl`, with
/// `extras` (e.g. "device-gfx1010") declared; returns the wheel's path.
/// Symlinks are stored as the files they lead to.
pub fn torch_wheel(site: &Path, version: &str, extras: &[&str], out: &Path) -> PathBuf {
    wheel("torch", site, version, extras, out)
}

/// A torchvision wheel of one empty module with `extras` declared, beside
/// the torch a help line installs with it (TheRock's line names both).
pub fn vision_wheel(version: &str, extras: &[&str], out: &Path) -> PathBuf {
    let site = out.with_extension("torchvision-src");
    std::fs::create_dir_all(site.join("torchvision")).unwrap();
    std::fs::write(site.join("torchvision/__init__.py"), "").unwrap();
    wheel("torchvision", &site, version, extras, out)
}

/// Packs `site/NAME` into `<out>/NAME-<version>-py3-none-any.whl`.
fn wheel(name: &str, site: &Path, version: &str, extras: &[&str], out: &Path) -> PathBuf {
    std::fs::create_dir_all(out).unwrap();
    let wheel = out.join(format!("{name}-{version}-py3-none-any.whl"));
    let extras: String = extras
        .iter()
        .map(|e| format!("Provides-Extra: {e}\n"))
        .collect();
    let metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{extras}");
    crate::run(
        Command::new("python3")
            .args(["-c", PACK, &site.to_string_lossy()])
            .arg(&wheel)
            .args([name, version, &metadata]),
    );
    wheel
}

const PACK: &str = r#"
import base64, hashlib, os, sys, zipfile
site, wheel, name, version, metadata = sys.argv[1:6]
info = f"{name}-{version}.dist-info"
files = {}
for root, _, names in os.walk(os.path.join(site, name)):
    for n in sorted(names):
        p = os.path.join(root, n)
        if os.path.exists(p):
            files[os.path.relpath(p, site)] = open(p, "rb").read()
files[f"{info}/METADATA"] = metadata.encode()
files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: rdna1-patch-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
digest = lambda b: "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
record = "".join(f"{name},{digest(data)},{len(data)}\n" for name, data in files.items())
files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
    for name, data in files.items():
        z.writestr(name, data)
"#;
