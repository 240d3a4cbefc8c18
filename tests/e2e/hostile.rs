//! Hostile input, round two (issue 25): an origin that commits a symlink
//! above the project, fat binaries that lie about their sizes, children
//! that print without end or hang, a rocm_sdk that names a library
//! elsewhere, a user's directory where `clean` looks, and the user's own
//! git settings that run code. One test (or more) per defect.

use std::path::Path;

use crate::support::{Sandbox, copy_dir, fixtures, git, snapshot};

/// Point the sandbox's profile at `url`, with `extra` profile lines after
/// the url (the tag line is kept).
fn profile_with(sb: &Sandbox, url: &str, extra: &str) {
    let origin = format!("url = \"{}\"", sb.origin.display());
    sb.write_profile(|t| {
        assert!(t.contains(&origin), "{t}");
        t.replace(&origin, &format!("url = \"{url}\"\n{extra}"))
    });
}

/// A repository whose `projects` is a symlink to `outside`, where a copy
/// of the fixture project sits at `outside/miopen`: with
/// `subdir = "projects/miopen"` every path resolves there.
fn origin_with_symlinked_subdir(sb: &Sandbox, outside: &Path) -> String {
    copy_dir(&fixtures().join("miopen-mini"), &outside.join("miopen"));
    let repo = sb.root.join("evil-origin");
    std::fs::create_dir_all(&repo).unwrap();
    std::os::unix::fs::symlink(outside, repo.join("projects")).unwrap();
    std::fs::write(repo.join("README.md"), "# nothing to see\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "uploadpack.allowFilter", "true"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "a symlink"]);
    git(&repo, &["tag", "-a", "rocm-6.2.4", "-m", "rocm-6.2.4"]);
    format!("file://{}", repo.display())
}

#[test]
fn a_symlink_the_origin_commits_above_the_subdir_is_never_written_through() {
    let sb = Sandbox::new();
    let outside = sb.root.join("outside");
    let url = origin_with_symlinked_subdir(&sb, &outside);
    profile_with(&sb, &url, "subdir = \"projects/miopen\"");
    let before = snapshot(&outside);
    for stop in ["patch", "configure", "install"] {
        let run = sb.build(&["--stop-after", stop]).fails();
        run.error_is(&format!(
            "error: {}/projects is a symlink (to {}), so the project directory {}/projects/miopen would be outside the work dir {}\nhelp: rdna1-patch never writes or builds through a symlink[..]",
            sb.src().display(),
            outside.display(),
            sb.src().display(),
            sb.work.display()
        ));
    }
    assert_eq!(snapshot(&outside), before, "a file outside was written");
    assert!(
        !sb.work.join("mini/miopen/build/CMakeCache.txt").exists(),
        "CMake configured the outside tree"
    );
}

#[test]
fn a_subdir_or_patch_path_into_dot_git_is_refused() {
    let sb = Sandbox::new();
    for subdir in [".git", ".git/hooks", "a/.GIT", "x/.Git/y"] {
        profile_with(
            &sb,
            sb.origin.to_str().unwrap(),
            &format!("subdir = \"{subdir}\""),
        );
        let run = sb.build(&["--dry-run"]).fails();
        run.says(&format!(
            "components.miopen.subdir `{subdir}` is not a directory inside the repository"
        ));
        run.says("outside `.git`");
    }
    assert!(!sb.work.exists(), "a refused profile wrote the work dir");

    // A patch that writes below a nested `.git` is refused before the fetch.
    let sb = Sandbox::new();
    std::fs::write(
        sb.series.join("9999-hook.patch"),
        "Subject: a hook\n\ndiff --git a/sub/.git/hooks/post-checkout b/sub/.git/hooks/post-checkout\nnew file mode 100755\n--- /dev/null\n+++ b/sub/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+touch /tmp/owned\n",
    )
    .unwrap();
    let series = sb.series.join("series");
    let mut list = std::fs::read_to_string(&series).unwrap();
    list.push_str("9999-hook.patch\n");
    std::fs::write(&series, list).unwrap();
    sb.build(&["--stop-after", "patch"])
        .fails()
        .says("patch 9999-hook.patch names `sub/.git/hooks/post-checkout`, which is outside the source tree");
}
