//! `install --into-torch`, `rollback` and `status` against fake torch
//! packages with real ELF libraries, found through a real python3.

use std::path::Path;
use std::process::Command;

use crate::support::{Run, Sandbox, TorchKind};

const HIP: &str = "6.2.41133-dd7f95766";

fn md5(path: &Path) -> String {
    rdna1_patch::checksum::md5_file(path).unwrap()
}

impl Sandbox {
    fn state(&self) -> String {
        self.root.join("state").display().to_string()
    }

    fn install(&self, extra: &[&str]) -> Run {
        let state = self.state();
        let mut args = vec![
            "install",
            "--into-torch",
            "--python",
            "python3",
            "--prefix",
            self.prefix.to_str().unwrap(),
            "--state-dir",
            &state,
        ];
        args.extend(extra);
        self.run(&args)
    }

    fn rollback(&self, extra: &[&str]) -> Run {
        let state = self.state();
        let mut args = vec!["rollback", "--state-dir", &state];
        args.extend(extra);
        self.run(&args)
    }
}

fn ldd(path: &Path) -> String {
    let out = Command::new("ldd").arg(path).output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn install_then_rollback_restores_the_original_bytes() {
    let sb = Sandbox::built();
    let torch = sb.torch(TorchKind::Rocm, HIP);
    let lib = torch.miopen();
    let original = std::fs::read(&lib).unwrap();
    // As built, the library loads ROCm's runtime, not torch's.
    let built = ldd(&sb.prefix.join("lib/libMIOpen.so.1"));
    assert!(built.contains("/rocm/lib/libamdhip64.so.6"), "{built}");

    let run = sb.install(&[]).ok();
    assert!(run.stderr.contains("Installed"), "{}", run.stderr);
    let installed = std::fs::read(&lib).unwrap();
    assert_ne!(installed, original);
    assert!(crate::support::contains_bytes(&installed, "[RDNA1 PATCH]"));
    let elf = rdna1_patch::elf::read(&lib).unwrap();
    assert_eq!(elf.runpath, ["$ORIGIN"]);
    assert_eq!(elf.soname.as_deref(), Some("libMIOpen.so"));
    assert!(
        elf.needed.contains(&"libamdhip64.so".to_owned()),
        "{:?}",
        elf.needed
    );
    let deps = ldd(&lib);
    assert!(
        deps.contains(&format!(
            "libamdhip64.so => {}/libamdhip64.so",
            torch.lib.display()
        )),
        "{deps}"
    );
    assert!(!deps.contains("/rocm/lib"), "{deps}");
    // torch still imports, and maps the patched library.
    let out = Command::new("python3")
        .args(["-c", "import torch; print(open('/proc/self/maps').read())"])
        .env("PYTHONPATH", sb.root.join("site"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let maps = String::from_utf8(out.stdout).unwrap();
    assert!(maps.contains(&lib.display().to_string()), "{maps}");

    let status = sb
        .run(&[
            "status",
            "--state-dir",
            &sb.state(),
            "--prefix",
            sb.prefix.to_str().unwrap(),
        ])
        .ok();
    assert!(
        status
            .stdout
            .contains(&format!("installed:  {}", lib.display())),
        "{}",
        status.stdout
    );

    let run = sb.rollback(&[]).ok();
    assert!(
        run.stderr.contains("copied back from the backup"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read(&lib).unwrap(), original);
    let run = sb.rollback(&[]).ok();
    assert!(
        run.stderr.contains("nothing to roll back"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read(&lib).unwrap(), original);
    assert_eq!(md5(&lib), rdna1_patch::checksum::md5_bytes(&original));
}
