//! Links that lead out of torch (issue 55, "not tried yet"): a
//! libtorch_hip.so hard-linked to a file outside torch, and a torch/lib
//! that is a symlink into another directory. Expected: handled without
//! writing a byte outside torch, or refused before anything is written.

use std::os::unix::fs::MetadataExt;

use crate::in_place::{HIP64, torch_of};
use crate::support::{Sandbox, snapshot};
use crate::system_route::SystemTorch;

/// The system route edits libtorch_hip.so (its RUNPATH gains $ORIGIN):
/// when that file is a hard link to one outside torch, the edit goes to a
/// new file in torch/lib, and the outside file keeps its bytes, through
/// install and rollback.
#[test]
fn a_hard_linked_libtorch_hip_is_edited_as_a_new_file_never_through_the_link() {
    let sb = Sandbox::new();
    let st = SystemTorch::new(&sb, false);
    let outside = sb.root.join("elsewhere");
    std::fs::create_dir(&outside).unwrap();
    let other = outside.join("libtorch_hip.so");
    std::fs::rename(st.hip(), &other).unwrap();
    std::fs::hard_link(&other, st.hip()).unwrap();
    let before = snapshot(&outside);
    let hip_before = std::fs::read(st.hip()).unwrap();
    st.install(&sb, &[]).ok().says("Installed");
    assert_eq!(snapshot(&outside), before, "the file outside torch");
    assert_ne!(
        std::fs::metadata(st.hip()).unwrap().ino(),
        std::fs::metadata(&other).unwrap().ino(),
        "torch's libtorch_hip.so is a file of its own now"
    );
    st.run(&sb, &["rollback", "--state-dir", &sb.state()]).ok();
    assert_eq!(std::fs::read(st.hip()).unwrap(), hip_before);
    assert_eq!(snapshot(&outside), before, "the file outside torch");
}

/// torch/lib a symlink into another directory (a system lib dir): the
/// in-place fix would write there. Refused before anything is written,
/// saying where the link leads.
#[test]
fn a_torch_lib_symlinked_out_of_torch_is_refused_before_anything_is_written() {
    let sb = Sandbox::new();
    let torch = torch_of(&sb, "2.6.0+rocm6.4", HIP64, &["gfx1010"]);
    let sys = sb.root.join("usr-lib-torch");
    std::fs::rename(&torch.lib, &sys).unwrap();
    std::os::unix::fs::symlink(&sys, &torch.lib).unwrap();
    let before = snapshot(&sys);
    let run = sb.install(&["--profile", "rocm-6.4.3"]);
    assert_eq!(snapshot(&sys), before, "{}", run.stderr);
    run.fails_with(&format!(
        "error: torch's lib directory {} is a symlink to {}, outside torch: rdna1-patch writes only inside torch; nothing was changed
help: [..]",
        torch.lib.display(),
        sys.display()
    ));
    assert!(!sb.prefix.exists());
}
