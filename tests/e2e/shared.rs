//! Shared builds: publish a built prefix to a real registry (Debian's
//! docker-registry on 127.0.0.1) or an OCI layout directory, signed with a
//! key made by the real minisign; install it in another work dir with no
//! ROCm; and everything that must stop such an install.

use std::path::{Path, PathBuf};

use rdna1_testkit::registry::Registry;

use crate::support::*;

/// A publisher's key pair, made by minisign itself.
struct Keys {
    secret: PathBuf,
    public: String,
}

fn keys(dir: &Path, name: &str) -> Keys {
    let (p, s) = (
        dir.join(format!("{name}.pub")),
        dir.join(format!("{name}.key")),
    );
    let out = std::process::Command::new("minisign")
        .args(["-G", "-W", "-p"])
        .arg(&p)
        .arg("-s")
        .arg(&s)
        .output()
        .expect("minisign (apt-get install minisign)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public = std::fs::read_to_string(&p)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .to_owned();
    Keys { secret: s, public }
}

/// A sandbox with a finished build, a key, and a config trusting it.
struct Publisher {
    sb: Sandbox,
    keys: Keys,
}

impl Publisher {
    fn new() -> Publisher {
        let sb = Sandbox::built();
        let keys = keys(&sb.root, "maintainer");
        Publisher { sb, keys }
    }

    fn publish(&self, reference: &str) -> Run {
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
    fn published(&self, reference: &str) -> String {
        let run = self.publish(reference).ok();
        run.says("Published");
        run.stdout.trim().to_owned()
    }
}

/// A user's machine: its own work dir, state dir and prefix, no ROCm, and
/// a config that trusts `trusted`.
struct User {
    sb: Sandbox,
    config: PathBuf,
}

impl User {
    fn new(trusted: &[&str], caches: &[&str]) -> User {
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
    fn build(&self, extra: &[&str]) -> Run {
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
    fn nothing_installed(&self) {
        let p = &self.sb.prefix;
        let left: Vec<_> = walk(p);
        assert!(
            left.is_empty(),
            "the prefix should hold nothing, it has {left:?}"
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
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

fn registry_ref(reg: &Registry, repo: &str) -> String {
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
    let md5 = std::process::Command::new("md5sum")
        .args(["-c", "share/rdna1-patch/MD5SUMS"])
        .current_dir(&user.sb.prefix)
        .output()
        .unwrap();
    assert!(
        md5.status.success(),
        "{}",
        String::from_utf8_lossy(&md5.stdout)
    );

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

    // No --from: the config's cache is searched for this build's key.
    let user = User::new(&[&publisher.keys.public], &[dir.to_str().unwrap()]);
    let dry = user.build(&["--dry-run"]).ok();
    dry.prints("would pull");
    user.nothing_installed();
    user.build(&[]).ok().says("is this build");
    let profile = user.sb.profile.to_str().unwrap().to_owned();
    user.sb.run(&["verify", "--profile", &profile]).ok();
}

#[test]
fn untrusted_unsigned_or_other_builds_are_compiled_instead_and_say_why() {
    let publisher = Publisher::new();
    let dir = publisher.sb.root.join("builds");
    let printed = publisher.published(dir.to_str().unwrap());
    let tagged = printed.split('@').next().unwrap().to_owned();

    // A key the user does not trust.
    let stranger = keys(&publisher.sb.root, "stranger");
    let user = User::new(&[&stranger.public], &[]);
    user.build(&["--from", &tagged, "--dry-run"])
        .ok()
        .prints("which is not in your trusted-keys");

    // Trusted, but another build: GPU targets it has no code for.
    let user = User::new(&[&publisher.keys.public], &[]);
    user.build(&["--from", &tagged, "--dry-run", "--gpu-targets", "gfx1030"])
        .ok()
        .prints("the artifact has no code for gfx1030");
    // ... or another patch series: the run compiles, and says why first.
    let user2 = User::new(&[&publisher.keys.public], &[]);
    let extra = user2.sb.root.join("extra");
    copy_dir(&user2.sb.series, &extra);
    std::fs::write(extra.join("series"), "").unwrap();
    let run = user2.build(&[
        "--from",
        &tagged,
        "--extra-patches",
        extra.to_str().unwrap(),
        "--stop-after",
        "install",
    ]);
    let _ = run;

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
    user.build(&["--from", &tagged, "--dry-run"])
        .ok()
        .prints("is not signed");
}
