// The profiles and patch series are compiled in with include_dir!, which
// cannot tell cargo about them: without this an edited patch would not reach
// the binary until some .rs file changed.
//
// The commit goes into `--version` and into each build's provenance, so a
// report names the exact tool that made a library. A tree that is not a git
// checkout (a crate tarball) says so instead of guessing.
fn main() {
    println!("cargo:rerun-if-changed=patches");
    println!("cargo:rerun-if-changed=profiles");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    // Watch the files git keeps them in, asked of git: in a worktree .git
    // is a file, and a watched path that does not exist makes cargo run
    // this script, and recompile the crate, on every build.
    let dirs = git(&["rev-parse", "--absolute-git-dir"])
        .into_iter()
        .chain(git(&[
            "rev-parse",
            "--path-format=absolute",
            "--git-common-dir",
        ]));
    for dir in dirs.collect::<Vec<_>>() {
        for file in ["HEAD", "refs/heads", "packed-refs"] {
            let path = std::path::Path::new(&dir).join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(c) => {
            let date = git(&["log", "-1", "--format=%cs"]).unwrap_or_default();
            format!("{c} {date}")
        }
        None => "no git commit".to_owned(),
    };
    println!("cargo:rustc-env=RDNA1_PATCH_COMMIT={commit}");
}
