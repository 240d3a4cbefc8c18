//! Issue 43's new-user items: what status and install say of an in-place
//! route is what is true of torch's files.

use crate::in_place::{HIP64, torch_of};
use crate::support::Sandbox;

/// Torch's own library fixed in place is for torch's own ROCm: no warning
/// that "the build is for ROCm 6.4.43484..., torch ...rocm6.4.3 usually
/// works"; and status compares what torch holds with what the journal
/// installed.
#[test]
fn status_sees_a_replaced_library_and_install_warns_of_no_rocm_of_its_own() {
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4.3", HIP64, &["gfx1010"]);
    let original = std::fs::read(torch.miopen()).unwrap();
    let run = sb.install(&["--profile", "rocm-6.4.3"]).ok();
    assert!(!run.stderr.contains("usually works"), "{}", run.stderr);
    let status = sb.status().stdout;
    assert!(
        status
            .contains("fixed in place, 2 batch-norm kernels compile for gfx1010, gfx1011, gfx1012"),
        "{status}"
    );
    assert!(!status.contains("not there now"), "{status}");
    // pip reinstalls torch: its own library is back.
    std::fs::remove_file(torch.miopen()).unwrap();
    std::fs::write(torch.miopen(), &original).unwrap();
    let status = sb.status().stdout;
    assert!(
        status.contains(&format!(
            "but it is not there now (MD5 {}): something replaced it (a pip install?); `rdna1-patch install --into-torch` installs again, `rdna1-patch rollback --abandon 1` closes the transaction",
            rdna1_patch::checksum::md5_file(&torch.miopen()).unwrap()
        )),
        "{status}"
    );
}
