//! Shared builds: publish a built prefix to a real registry (Debian's
//! docker-registry on 127.0.0.1) or an OCI layout directory, signed with a
//! key made by the real minisign; install it in another work dir with no
//! ROCm. Everything that must stop such an install is in `shared_pull`,
//! the build key in `shared_key`.

use std::path::{Path, PathBuf};

use rdna1_testkit::registry::Registry;

use crate::support::*;

/// A publisher's key pair, made by minisign itself.
pub(crate) struct Keys {
    pub secret: PathBuf,
    pub public: String,
}

pub(crate) fn keys(dir: &Path, name: &str) -> Keys {
    let (p, s) = (
        dir.join(format!("{name}.pub")),
        dir.join(format!("{name}.key")),
    );
    // A key whose text ends in '/' can name no file, and the tests that
    // plant a file under a trusted key's text need one that can (1 key in
    // 64 ends so): such a pair is made again.
    loop {
        rdna1_testkit::run(
            std::process::Command::new("minisign")
                .args(["-G", "-f", "-W", "-p"])
                .arg(&p)
                .arg("-s")
                .arg(&s),
        );
        let public = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .nth(1)
            .unwrap()
            .to_owned();
        if !public.ends_with('/') {
            return Keys { secret: s, public };
        }
    }
}

/// A sandbox with a finished build, a key, and a config trusting it.
pub(crate) struct Publisher {
    pub sb: Sandbox,
    pub keys: Keys,
}

impl Publisher {
    pub fn new() -> Publisher {
        let sb = Sandbox::built();
        let keys = keys(&sb.root, "maintainer");
        Publisher { sb, keys }
    }

    pub fn publish(&self, reference: &str) -> Run {
        self.sb.run(&[
            "publish",
            "--prefix",
            self.sb.prefix.to_str().unwrap(),
            "--sign-key",
            self.keys.secret.to_str().unwrap(),
            reference,
        ])
    }

    /// Publish, and the `REF@sha256:...` it printed.
    pub fn published(&self, reference: &str) -> String {
        let run = self.publish(reference).ok();
        run.says("Published");
        run.stdout.trim().to_owned()
    }
}

/// A user's machine: its own work dir, state dir and prefix, no ROCm, and
/// a config that trusts `trusted`.
pub(crate) struct User {
    pub sb: Sandbox,
    pub config: PathBuf,
}

impl User {
    pub fn new(trusted: &[&str], caches: &[&str]) -> User {
        let sb = Sandbox::new();
        let origin = built_origin();
        sb.write_profile(|t| t.replace(sb.origin.to_str().unwrap(), origin.to_str().unwrap()));
        let config = sb.root.join("config.toml");
        let list = |v: &[&str]| {
            v.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        std::fs::write(
            &config,
            format!(
                "trusted-keys = [{}]\ncaches = [{}]\n",
                list(trusted),
                list(caches)
            ),
        )
        .unwrap();
        User { sb, config }
    }

    /// `build` with no ROCm (`--rocm` names nothing), plus `extra`.
    pub fn build(&self, extra: &[&str]) -> Run {
        let mut args = self.sb.build_args(extra);
        let at = args.iter().position(|a| a == "--rocm").unwrap();
        args[at + 1] = self.sb.root.join("no-rocm").display().to_string();
        let out = self
            .sb
            .cmd()
            .env("RDNA1_PATCH_CONFIG", &self.config)
            .args(&args)
            .output()
            .unwrap();
        Run::from(out)
    }

    /// The prefix holds nothing of ours, and no staging dir.
    pub fn nothing_installed(&self) {
        let p = &self.sb.prefix;
        let left: Vec<_> = walk(p);
        assert!(
            left.is_empty(),
            "the prefix should hold nothing, it has {left:?}"
        );
    }
}

pub(crate) fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

pub(crate) fn registry_ref(reg: &Registry, repo: &str) -> String {
    format!("oci://{}/{repo}", reg.addr)
}

#[test]
fn publish_to_registry_then_install_with_no_rocm_verify_and_swap() {
    let reg = Registry::start(None);
    let publisher = Publisher::new();
    let reference = registry_ref(&reg, "rdna1/miopen");
    let printed = publisher.published(&reference);
    assert!(
        printed.starts_with(&format!("{reference}:mini-")),
        "{printed}"
    );

    let user = User::new(&[&publisher.keys.public], &[]);
    let run = user.build(&["--from", &reference]).ok();
    run.says("is this build")
        .says("digest, signature and checksums verified")
        .says("pulled, nothing compiled")
        .says("no ROCm toolchain at");
    assert!(
        run.compiled().is_empty(),
        "nothing may compile:\n{}",
        run.stderr
    );
    // Byte for byte what the publisher built, and md5sum agrees.
    for rel in [
        "lib/libMIOpen.so.1.0.0",
        "share/rdna1-patch/MD5SUMS",
        "share/rdna1-patch/provenance.toml",
        "share/rdna1-patch/build-key.json",
    ] {
        assert!(
            std::fs::read(user.sb.prefix.join(rel)).unwrap()
                == std::fs::read(publisher.sb.prefix.join(rel)).unwrap(),
            "{rel} differs from the publisher's"
        );
    }
    assert!(
        std::fs::symlink_metadata(user.sb.prefix.join("lib/libMIOpen.so.1"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    md5sum_c(&user.sb.prefix);

    let torch = user.sb.torch(TorchKind::Rocm, HIP);
    let original = std::fs::read(torch.miopen()).unwrap();
    let profile = user.sb.profile.to_str().unwrap().to_owned();
    user.sb
        .run(&["install", "--into-torch", "--profile", &profile])
        .ok();
    assert!(
        std::fs::read(torch.miopen()).unwrap() != original,
        "torch's libMIOpen.so was not swapped"
    );
    // verify checks the prefix against MD5SUMS, torch's library against the
    // build, and that torch loads it.
    user.sb
        .run(&["verify", "--profile", &profile])
        .ok()
        .prints("ok");
}

#[test]
fn layout_directory_round_trip_and_caches_find_the_build_by_key() {
    let publisher = Publisher::new();
    let dir = publisher.sb.root.join("usb/builds");
    let printed = publisher.published(dir.to_str().unwrap());
    assert!(dir.join("oci-layout").is_file() && dir.join("index.json").is_file());
    assert!(printed.contains(":mini-"), "{printed}");
    // Publishing again uploads nothing new.
    publisher
        .publish(dir.to_str().unwrap())
        .ok()
        .says("already there");

    // No --from: the config's caches are searched for this build's key; a
    // cache that is down is a warning, and the next one is looked in.
    let down = format!(
        "oci://127.0.0.1:{}/rdna1/miopen",
        rdna1_testkit::registry::free_port()
    );
    let user = User::new(&[&publisher.keys.public], &[&down, dir.to_str().unwrap()]);
    let dry = user.build(&["--dry-run"]).ok();
    dry.prints("would pull");
    // Issue 31, 10: the key shown is the one of the build it would pull,
    // made with the publisher's toolchain (this user has no ROCm).
    let tag = printed
        .split('@')
        .next()
        .unwrap()
        .rsplit_once(':')
        .unwrap()
        .1;
    let key_line = dry.stdout.lines().find(|l| l.starts_with("key:")).unwrap();
    assert!(
        key_line.contains(&format!(
            "(tag {tag}; the publisher's toolchain: ROCm 6.2.4, "
        )),
        "{key_line}\n(published: {printed})"
    );
    user.nothing_installed();
    user.build(&[])
        .ok()
        .says(&format!("warning: cache {down}: cannot reach the registry"))
        .says("is this build");
    let profile = user.sb.profile.to_str().unwrap().to_owned();
    user.sb.run(&["verify", "--profile", &profile]).ok();
}

/// Issue 31, 3: `--from` names the build the user asked for. A key they
/// do not trust, another build or an unsigned one is the error, with what
/// to do; nothing is compiled instead. A cache is a place to look: there
/// the same artifact is passed over and the build compiles.
#[test]
fn an_explicit_from_refuses_what_it_cannot_take_and_a_cache_passes_it_over() {
    let publisher = Publisher::new();
    let dir = publisher.sb.root.join("builds");
    let printed = publisher.published(dir.to_str().unwrap());
    let tagged = printed.split('@').next().unwrap().to_owned();

    // A key the user does not trust: the dry run and the run both refuse.
    let stranger = keys(&publisher.sb.root, "stranger");
    let user = User::new(&[&stranger.public], &[]);
    let untrusted = "error: the build would stop before fetching: not pulling the build --from names: [..] is signed by key [..], which is not in your trusted-keys
help: if you trust its publisher, trust their public key: `rdna1-patch trust KEY` (KEY: the second line of their minisign.pub), then run this again";
    user.build(&["--from", &tagged, "--dry-run"])
        .fails_with(untrusted)
        .prints("shared:    would stop: see the error below");
    user.build(&["--from", &tagged])
        .fails_with(&untrusted.replace("the build would stop before fetching: ", ""));
    user.nothing_installed();
    // The same artifact as a cache: passed over, and the build compiles
    // (here it stops at once: there is no ROCm).
    let cache = User::new(&[&stranger.public], &[dir.to_str().unwrap()]);
    cache
        .build(&["--dry-run"])
        .fails()
        .prints("would compile: ")
        .prints("which is not in your trusted-keys");

    // Trusted, but another build: GPU targets it has no code for.
    let user = User::new(&[&publisher.keys.public], &[]);
    user.build(&["--from", &tagged, "--dry-run", "--gpu-targets", "gfx1030"])
        .fails_with("error: the build would stop before fetching: not pulling the build --from names: [..] is another build: the artifact has no code for gfx1030 (it was built for gfx1010, gfx1011, gfx1012)
help: pull a build of this same profile, patch series and GPU targets (`--dry-run` shows this build's key), or leave out --from to compile it");
    // ... or another patch series: it says which patch.
    let user2 = User::new(&[&publisher.keys.public], &[]);
    user2
        .sb
        .edit_patch("0003-find-fast-mode.patch", "Subject:", "Subject: (mine)");
    user2
        .build(&["--from", &tagged])
        .fails()
        .says("patch 0003-find-fast-mode.patch differs from the artifact's");

    // Unsigned: the signature's tag is gone.
    let index = dir.join("index.json");
    let text = std::fs::read_to_string(&index).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["manifests"].as_array_mut().unwrap().retain(|m| {
        !m["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .unwrap()
            .ends_with(".sig")
    });
    std::fs::write(&index, json.to_string()).unwrap();
    let user = User::new(&[&publisher.keys.public], &[]);
    user.build(&["--from", &tagged]).fails_with(
        "error: not pulling the build --from names: [..] is not signed
help: ask its publisher to publish it again with this rdna1-patch (publish signs before it pushes); without --from, rdna1-patch compiles it",
    );
}

/// A published layout, and a user who trusts its key.
pub(crate) fn published_layout() -> (Publisher, PathBuf, String, User) {
    let publisher = Publisher::new();
    let dir = publisher.sb.root.join("builds");
    let printed = publisher.published(dir.to_str().unwrap());
    let tagged = printed.split('@').next().unwrap().to_owned();
    let user = User::new(&[&publisher.keys.public], &[]);
    (publisher, dir, tagged, user)
}

/// The manifest `tag` names in a layout, as JSON, and its digest.
pub(crate) fn layout_manifest(dir: &Path, tag: &str) -> (serde_json::Value, String) {
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("index.json")).unwrap()).unwrap();
    let digest = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = std::fs::read_to_string(blob(dir, &digest)).unwrap();
    (serde_json::from_str(&text).unwrap(), digest)
}

pub(crate) fn blob(dir: &Path, digest: &str) -> PathBuf {
    dir.join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").unwrap())
}

/// Store `bytes` as a blob of the layout; its digest.
pub(crate) fn put_blob(dir: &Path, bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let hex: String = sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(dir.join("blobs/sha256").join(&hex), bytes).unwrap();
    format!("sha256:{hex}")
}
