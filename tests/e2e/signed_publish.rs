//! The publish side of issue 33's findings: a planted blob is replaced,
//! a killed publish leaves no unsigned tag, a signing key others can read
//! is warned about, and provenance names no path in the publisher's home.

use std::path::Path;

use crate::shared::*;
use crate::support::*;

/// Issue 33, 9: publish takes a blob already in a layout dir only when it
/// is what its name says, and never writes through a symlinked blobs dir.
#[test]
fn publish_replaces_a_planted_blob_and_refuses_a_symlinked_blobs_dir() {
    let (publisher, dir, tagged, user) = published_layout();
    let tag = tagged.rsplit(':').next().unwrap();
    let (manifest, _) = layout_manifest(&dir, tag);
    let layer = blob(&dir, manifest["layers"][0]["digest"].as_str().unwrap());
    std::fs::write(&layer, b"planted garbage").unwrap();
    publisher.publish(dir.to_str().unwrap()).ok();
    user.build(&["--from", &tagged])
        .ok()
        .says("pulled, nothing compiled");

    let elsewhere = publisher.sb.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let linked = publisher.sb.root.join("linked");
    std::fs::create_dir_all(linked.join("blobs")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, linked.join("blobs/sha256")).unwrap();
    publisher
        .publish(linked.to_str().unwrap())
        .fails_with(
            r#"error: [..]/linked/blobs/sha256 is a symlink, so the layout's blobs would be written elsewhere
help: use a layout dir whose blobs/sha256 is a directory of its own; nothing was written"#,
        )
        .error_is(&format!(
            "error: {} is a symlink, so the layout's blobs would be written elsewhere
help: use a layout dir whose blobs/sha256 is a directory of its own; nothing was written",
            linked.join("blobs/sha256").display()
        ));
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// A publish of the publisher's prefix to `dir`, started.
fn start_publish(publisher: &Publisher, dir: &Path, tmp: &Path, path: &str) -> std::process::Child {
    publisher
        .sb
        .cmd()
        .env("TMPDIR", tmp)
        .env("PATH", path)
        .args([
            "publish",
            "--prefix",
            publisher.sb.prefix.to_str().unwrap(),
            "--sign-key",
            publisher.keys.secret.to_str().unwrap(),
            dir.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Kill `child` once `ready` says so (polled every millisecond, for at
/// most 20 s).
fn kill_when(mut child: std::process::Child, ready: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !ready() && started.elapsed().as_secs() < 20 {
        if child.try_wait().unwrap().is_some() {
            panic!("the publish ended before the moment to kill it came");
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

fn non_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

/// Issue 33, 10: a publish killed while it packs leaves nothing in
/// $TMPDIR (what it left in its cache, the next publish removes), and one
/// killed while it signs leaves no tag whose manifest has no signature.
#[test]
fn a_killed_publish_leaves_no_unsigned_tag_and_nothing_in_tmpdir() {
    let publisher = Publisher::new();
    let dir = publisher.sb.root.join("builds");
    let tmp = publisher.sb.root.join("tmpdir");
    std::fs::create_dir_all(&tmp).unwrap();
    let cache = publisher.sb.root.join("xdg-cache/rdna1-patch/publish");
    let path = crate::support::tools().display().to_string();
    // Killed as soon as its layer is being written.
    let child = start_publish(&publisher, &dir, &tmp, &path);
    kill_when(child, || non_empty(&tmp) || non_empty(&cache));
    assert!(
        !non_empty(&tmp),
        "left in TMPDIR: {:?}",
        std::fs::read_dir(&tmp).unwrap().collect::<Vec<_>>()
    );
    // Killed while minisign signs (a minisign that waits first).
    let shims = publisher.sb.root.join("shims");
    std::fs::create_dir_all(&shims).unwrap();
    let signing = publisher.sb.root.join("signing");
    let real = which_minisign();
    std::fs::write(
        shims.join("minisign"),
        format!(
            "#!/bin/sh\ntouch '{}'\nsleep 5\nexec '{}' \"$@\"\n",
            signing.display(),
            real
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        shims.join("minisign"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let child = start_publish(
        &publisher,
        &dir,
        &tmp,
        &format!("{}:{path}", shims.display()),
    );
    kill_when(child, || signing.exists());
    if let Ok(text) = std::fs::read_to_string(dir.join("index.json")) {
        let index: serde_json::Value = serde_json::from_str(&text).unwrap();
        let name = |m: &serde_json::Value| {
            m["annotations"]["org.opencontainers.image.ref.name"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let tags: Vec<String> = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(name)
            .collect();
        for m in index["manifests"].as_array().unwrap() {
            let sig = format!("{}.sig", m["digest"].as_str().unwrap().replace(':', "-"));
            assert!(
                name(m).ends_with(".sig") || tags.contains(&sig),
                "{} is tagged without its signature",
                name(m)
            );
        }
    }
    assert!(!non_empty(&tmp), "left in TMPDIR");
    // The next publish goes through, and clears what the killed ones left.
    let printed = publisher.published(dir.to_str().unwrap());
    assert!(
        !non_empty(&cache),
        "left in the cache: {:?}",
        std::fs::read_dir(&cache).unwrap().collect::<Vec<_>>()
    );
    let user = User::new(&[&publisher.keys.public], &[]);
    user.build(&["--from", printed.split('@').next().unwrap()])
        .ok()
        .says("pulled, nothing compiled");
}

fn which_minisign() -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", "command -v minisign"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Issue 33, 14: a signing key others can read is said, with the fix.
#[test]
fn a_signing_key_others_can_read_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let publisher = Publisher::new();
    let key = &publisher.keys.secret;
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let dir = publisher.sb.root.join("builds");
    publisher.publish(dir.to_str().unwrap()).ok().says(&format!(
        "warning: the signing key {} can be read by others (mode 644); `chmod 600 {}` keeps it yours",
        key.display(),
        key.display()
    ));
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let run = publisher.publish(dir.to_str().unwrap()).ok();
    assert!(
        !run.stderr.contains("can be read by others"),
        "{}",
        run.stderr
    );
}

/// Issue 33, 14: a published build names no path inside its maintainer's
/// home (the profile, the work dir and the series all are there): the
/// config and the layer's provenance write them `~/...`, and the pull
/// still checks out, provenance and MD5SUMS agreeing.
#[test]
fn a_published_provenance_names_no_path_in_the_publishers_home() {
    let publisher = Publisher::new();
    let local = std::fs::read_to_string(
        publisher
            .sb
            .prefix
            .join("share/rdna1-patch/provenance.toml"),
    )
    .unwrap();
    // The shared build's own dir (its ROCm, origin and work dir are in it)
    // stands for the publisher's home.
    let prov: toml::Value = toml::from_str(&local).unwrap();
    let rocm = Path::new(prov["rocm"]["path"].as_str().unwrap());
    let home = rocm.parent().unwrap().to_owned();
    assert!(local.matches(home.to_str().unwrap()).count() > 1, "{local}");
    let dir = publisher.sb.root.join("builds");
    let out = publisher
        .sb
        .cmd()
        .env("HOME", &home)
        .args(["publish", "--prefix"])
        .arg(&publisher.sb.prefix)
        .arg("--sign-key")
        .arg(&publisher.keys.secret)
        .arg(&dir)
        .output()
        .unwrap();
    let run = Run::from(out).ok();
    let tagged = run.stdout.trim().split('@').next().unwrap().to_owned();
    let tag = tagged.rsplit(':').next().unwrap();
    let (manifest, _) = layout_manifest(&dir, tag);
    let config =
        std::fs::read_to_string(blob(&dir, manifest["config"]["digest"].as_str().unwrap()))
            .unwrap();
    // The build key's inputs name the profile's source URL, as every user
    // of that profile has it (here a local origin); the provenance is what
    // names the publisher's machine.
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    let shown = config["provenance"].to_string();
    assert!(!shown.contains(home.to_str().unwrap()), "{shown}");
    assert!(shown.contains("~/"), "{shown}");

    let user = User::new(&[&publisher.keys.public], &[]);
    user.build(&["--from", &tagged])
        .ok()
        .says("pulled, nothing compiled");
    let pulled =
        std::fs::read_to_string(user.sb.prefix.join("share/rdna1-patch/provenance.toml")).unwrap();
    assert!(!pulled.contains(home.to_str().unwrap()), "{pulled}");
    md5sum_c(&user.sb.prefix);
    // The publisher's own prefix is left as it was.
    assert_eq!(
        std::fs::read_to_string(
            publisher
                .sb
                .prefix
                .join("share/rdna1-patch/provenance.toml")
        )
        .unwrap(),
        local
    );
}
