//! A project inside a monorepo (`subdir`), as MIOpen is in
//! ROCm/rocm-libraries: a blobless, sparse fetch of its directory, cached,
//! pinned, and built with that directory as CMake's source dir.

use std::path::PathBuf;

use crate::support::{Sandbox, git, snapshot};

const OTHER_FILES: usize = 300;

struct Mono {
    sb: Sandbox,
    repo: PathBuf,
    url: String,
    commit: String,
}

/// `pin`: the profile's extra pin lines (`tag`/`commit`), replacing its tag.
fn mono(pin: impl FnOnce(&str) -> String) -> Mono {
    let sb = Sandbox::new();
    let url = sb.make_monorepo(OTHER_FILES);
    let repo = sb.root.join("monorepo");
    let commit = git(&repo, &["rev-parse", "rocm-6.2.4^{commit}"]);
    let origin = format!("url = \"{}\"\ntag = \"rocm-6.2.4\"", sb.origin.display());
    let lines = format!(
        "url = \"{url}\"\n{}\nsubdir = \"projects/miopen\"\nsparse = [\"shared/ctest\"]",
        pin(&commit)
    );
    sb.write_profile(|t| {
        assert!(t.contains(&origin), "{t}");
        t.replace(&origin, &lines)
    });
    Mono {
        sb,
        repo,
        url,
        commit,
    }
}

fn tag_and_commit(commit: &str) -> String {
    format!("tag = \"rocm-6.2.4\"\ncommit = \"{commit}\"")
}

/// Objects of HEAD's tree that are not in the checkout's object store.
fn missing_objects(src: &std::path::Path) -> Vec<String> {
    git(src, &["rev-list", "--objects", "--missing=print", "HEAD"])
        .lines()
        .filter_map(|l| l.strip_prefix('?').map(str::to_owned))
        .collect()
}

#[test]
fn only_the_project_and_what_its_cmake_reads_are_fetched_and_built() {
    let m = mono(tag_and_commit);
    let sb = &m.sb;
    let run = sb.build(&[]).ok();
    run.says(&format!("Fetching {} rocm-6.2.4 (blobless)", m.url));
    run.says("Installed 6 files");
    assert_eq!(run.compiled().len(), 4, "{}", run.stderr);

    let src = sb.src();
    assert!(src.join("projects/miopen/CMakeLists.txt").is_file());
    assert!(src.join("shared/ctest/TestCategories.cmake").is_file());
    assert!(
        src.join("README.md").is_file(),
        "top-level files come with the cone"
    );
    assert!(
        !src.join("projects/rocblas").exists(),
        "another project was checked out"
    );
    // The other project's files were never downloaded, not merely hidden;
    // every file of the checked-out directories was.
    let missing = missing_objects(&src);
    assert_eq!(missing.len(), OTHER_FILES, "{missing:?}");
    let rocblas_blob = git(
        &m.repo,
        &["rev-parse", "HEAD:projects/rocblas/library/kernel7.cpp"],
    );
    assert!(missing.contains(&rocblas_blob));
    // The series applied below the project's directory.
    let handlehip =
        std::fs::read_to_string(src.join("projects/miopen/src/hip/handlehip.cpp")).unwrap();
    assert!(handlehip.contains("RDNA1"), "{handlehip}");
    let prov =
        std::fs::read_to_string(sb.prefix.join("share/rdna1-patch/provenance.toml")).unwrap();
    assert!(prov.contains("subdir = \"projects/miopen\""), "{prov}");
    assert!(
        prov.contains(&format!("commit = \"{}\"", m.commit)),
        "{prov}"
    );

    // The second run asks the remote for nothing: the monorepo is gone, and
    // no object arrives.
    let objects = snapshot(&src.join(".git/objects"));
    std::fs::rename(&m.repo, sb.root.join("monorepo-gone")).unwrap();
    let again = sb.build(&[]).ok();
    again.says("(cached, no network)");
    again.says("Build up to date");
    assert!(!again.stderr.contains("Fetching"), "{}", again.stderr);
    assert_eq!(snapshot(&src.join(".git/objects")), objects);
}

#[test]
fn a_moved_tag_is_refused_against_the_pinned_commit() {
    let m = mono(tag_and_commit);
    let sb = &m.sb;
    sb.build(&["--stop-after", "fetch"]).ok();
    std::fs::write(m.repo.join("projects/miopen/NEWS"), "moved\n").unwrap();
    git(&m.repo, &["add", "-A"]);
    git(&m.repo, &["commit", "-q", "-m", "moved"]);
    git(&m.repo, &["tag", "-f", "-a", "rocm-6.2.4", "-m", "moved"]);
    let moved = git(&m.repo, &["rev-parse", "rocm-6.2.4^{commit}"]);

    let run = sb.build(&["--update", "--stop-after", "fetch"]).fails_with(
        r#"error: file://[..]/monorepo tag rocm-6.2.4 resolved to [..], but the profile pins commit [..]
help: the tag was moved or the profile is wrong; check upstream before changing the pin"#,
    );
    run.error_is(&format!(
        "error: {} tag rocm-6.2.4 resolved to {moved}, but the profile pins commit {}
help: the tag was moved or the profile is wrong; check upstream before changing the pin",
        m.url, m.commit
    ));
    assert_eq!(git(&sb.src(), &["rev-parse", "HEAD"]), m.commit);
    assert!(!sb.src().join("projects/miopen/NEWS").exists());
}

#[test]
fn a_commit_alone_pins_the_source() {
    let m = mono(|commit| format!("commit = \"{commit}\""));
    let sb = &m.sb;
    sb.build(&["--dry-run"]).ok().prints(&format!(
        "source:    {} (commit pin) commit {}, projects/miopen only (blobless, sparse)",
        m.url, m.commit
    ));
    let run = sb.build(&["--stop-after", "patch"]).ok();
    run.says(&format!(
        "Fetching {} commit {} (blobless)",
        m.url,
        &m.commit[..12]
    ));
    run.says(&format!("Source miopen commit {0} at {0}", &m.commit[..12]));
    assert!(
        sb.src()
            .join("projects/miopen/src/hip/handlehip.cpp")
            .is_file()
    );
    // Not in the lock file: a commit cannot move.
    assert!(!sb.work.join("mini/sources.lock").exists());

    // A short id cannot be fetched by id: the profile is refused first.
    let text = std::fs::read_to_string(&sb.profile).unwrap();
    std::fs::write(&sb.profile, text.replace(&m.commit, &m.commit[..12])).unwrap();
    let run = sb.build(&["--dry-run"]).fails_with(
        r#"error: invalid profile [..]/mini.toml: components.miopen.commit `[..]` is not a full 40-digit commit id
help: without a tag the commit is fetched by its id, which git needs in full"#,
    );
    run.says(&format!(
        "components.miopen.commit `{}` is not a full 40-digit commit id",
        &m.commit[..12]
    ));
    run.says("help: without a tag the commit is fetched by its id, which git needs in full");
}

#[test]
fn local_edits_in_a_sparse_checkout_are_found_relative_to_the_project() {
    let m = mono(tag_and_commit);
    let sb = &m.sb;
    sb.build(&["--stop-after", "patch"]).ok();
    let tensor = sb.src().join("projects/miopen/src/tensor.cpp");
    let mut text = std::fs::read_to_string(&tensor).unwrap();
    text.push_str("// mine\n");
    std::fs::write(&tensor, &text).unwrap();
    std::fs::write(sb.src().join("projects/miopen/src/extra.cpp"), "// new\n").unwrap();
    let run = sb.build(&["--stop-after", "patch"]).fails_with(
        r#"error: the checkout [..]/work/mini/miopen/src/projects/miopen has local edits that are not part of miopen rocm-6.2.4 and its patch series: src/extra.cpp, src/tensor.cpp
help: nothing was changed. To build with them, pass --keep-local (they are recorded in the prefix's provenance); to make them part of a patch, `rdna1-patch patches refresh[..]`; to drop them, `git -C [..]/work/mini/miopen/src/projects/miopen checkout -- .` and `git -C [..]/work/mini/miopen/src/projects/miopen clean -fd`"#,
    );
    run.says(&format!(
        "the checkout {} has local edits that are not part of miopen rocm-6.2.4 and its patch series: src/extra.cpp, src/tensor.cpp",
        sb.src().join("projects/miopen").display()
    ));
    assert_eq!(std::fs::read_to_string(&tensor).unwrap(), text);
}

#[test]
fn a_tag_the_remote_lacks_is_named() {
    let m = mono(|_| "tag = \"rocm-9.9.9\"".to_owned());
    let run = m.sb.build(&["--stop-after", "fetch"]).fails_with(
        r#"error: file://[..]/monorepo has no tag rocm-9.9.9
help: check the profile's `tag` against the repository's tags"#,
    );
    run.error_is(&format!(
        "error: {} has no tag rocm-9.9.9
help: check the profile's `tag` against the repository's tags",
        m.url
    ));
}
