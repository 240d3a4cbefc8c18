//! A pull installs only what a trusted key signed, and trust comes from the
//! user's config alone (issue 33's findings on the pull path).

use std::io::Write as _;
use std::path::Path;

use rdna1_testkit::registry::Registry;

use crate::shared::*;
use crate::support::*;

/// The published prefix with another library in it under the genuine
/// records (provenance, build key) and an MD5SUMS that matches: packed
/// as publish packs, then the tar's end and 64 MiB of zeros, so that the
/// unpacker stops reading long before the stream (and its digest) ends.
/// No key signed these bytes.
fn swapped_layer(prefix: &Path) -> Vec<u8> {
    let md5sums = std::fs::read_to_string(prefix.join("share/rdna1-patch/MD5SUMS")).unwrap();
    let mut lines = Vec::new();
    let mut tar = tar::Builder::new(Vec::new());
    let other = b"\x7fELF not the library anyone signed\n".repeat(100);
    for line in md5sums.lines() {
        let (md5, rel) = line.split_once("  ").unwrap();
        let path = prefix.join(rel);
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_mtime(0);
        if meta.file_type().is_symlink() {
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            tar.append_link(&mut h, rel, std::fs::read_link(&path).unwrap())
                .unwrap();
            lines.push(line.to_owned());
            continue;
        }
        let bytes = if rel.ends_with("libMIOpen.so.1.0.0") {
            other.clone()
        } else {
            std::fs::read(&path).unwrap()
        };
        let md5 = if bytes == std::fs::read(&path).unwrap() {
            md5.to_owned()
        } else {
            md5_of(&bytes)
        };
        lines.push(format!("{md5}  {rel}"));
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(bytes.len() as u64);
        tar.append_data(&mut h, rel, bytes.as_slice()).unwrap();
    }
    // The symlinks lead to the library: their lines take its new MD5.
    let lib_md5 = md5_of(&other);
    let lines: Vec<String> = lines
        .into_iter()
        .map(|l| {
            let (_, rel) = l.split_once("  ").unwrap();
            if rel.contains("libMIOpen.so") {
                format!("{lib_md5}  {rel}")
            } else {
                l
            }
        })
        .collect();
    let sums = format!("{}\n", lines.join("\n"));
    let mut h = tar::Header::new_gnu();
    h.set_mtime(0);
    h.set_mode(0o644);
    h.set_size(sums.len() as u64);
    tar.append_data(&mut h, "share/rdna1-patch/MD5SUMS", sums.as_bytes())
        .unwrap();
    let mut raw = tar.into_inner().unwrap();
    raw.extend(std::iter::repeat_n(0u8, 64 << 20));
    let mut enc = zstd::Encoder::new(Vec::new(), 19).unwrap();
    enc.write_all(&raw).unwrap();
    enc.finish().unwrap()
}

fn md5_of(bytes: &[u8]) -> String {
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), bytes).unwrap();
    let out = std::process::Command::new("md5sum")
        .arg(tmp.path())
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..32].to_owned()
}

/// The layer blob a manifest at `manifest_path` names.
fn layer_of(manifest_path: &Path) -> String {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(manifest_path).unwrap()).unwrap();
    m["layers"][0]["digest"].as_str().unwrap().to_owned()
}

/// Replace the blob at `path` with the swapped layer; the genuine bytes.
fn swap_blob(path: &Path, prefix: &Path) -> Vec<u8> {
    let genuine = std::fs::read(path).unwrap();
    let evil = swapped_layer(prefix);
    assert!(
        evil.len() < genuine.len(),
        "the attack fits under the declared size ({} >= {})",
        evil.len(),
        genuine.len()
    );
    std::fs::write(path, &evil).unwrap();
    genuine
}

fn refused(run: Run, user: &User, reference: &str) {
    run.fails().error_is(&format!(
        "error: {reference} cannot be trusted: its layer is not what the signed manifest says ([..] bytes with digest sha256:[..], expected [..] bytes with sha256:[..])
help: it may have been tampered with or damaged on the way; ask its publisher, or build without it (leave out --from); nothing was installed"
    ));
    user.nothing_installed();
}

#[test]
fn a_swapped_layer_in_a_layout_dir_or_cache_is_refused_with_nothing_installed() {
    let (publisher, dir, tagged, user) = published_layout();
    let tag = tagged.rsplit(':').next().unwrap();
    let (_, digest) = layout_manifest(&dir, tag);
    let layer = blob(&dir, &layer_of(&blob(&dir, &digest)));
    let genuine = swap_blob(&layer, &publisher.sb.prefix);
    refused(user.build(&["--from", &tagged]), &user, &tagged);

    // The same blob found through the config's caches.
    let cached = User::new(&[&publisher.keys.public], &[dir.to_str().unwrap()]);
    let run = cached.build(&[]);
    refused(run, &cached, &tagged);

    std::fs::write(&layer, genuine).unwrap();
    user.build(&["--from", &tagged])
        .ok()
        .says("pulled, nothing compiled");
}

#[test]
fn a_swapped_layer_in_a_registry_is_refused_with_nothing_installed() {
    let reg = Registry::start(None);
    let publisher = Publisher::new();
    let reference = registry_ref(&reg, "rdna1/miopen");
    let printed = publisher.published(&reference);
    let digest = printed.split('@').nth(1).unwrap();
    let tagged = printed.split('@').next().unwrap();
    let layer = reg.blob_path(&layer_of(&reg.blob_path(digest)));
    swap_blob(&layer, &publisher.sb.prefix);
    let user = User::new(&[&publisher.keys.public], &[]);
    refused(user.build(&["--from", tagged]), &user, tagged);
}

/// A maintainer whose key the user trusts, and an attacker whose build is
/// published beside it; the attacker's `REF:tag`.
fn maintainer_and_attacker() -> (Publisher, Publisher, String) {
    let maintainer = Publisher::new();
    let attacker = Publisher::new();
    let dir = attacker.sb.root.join("builds");
    let printed = attacker.published(dir.to_str().unwrap());
    let tagged = printed.split('@').next().unwrap().to_owned();
    (maintainer, attacker, tagged)
}

/// What `--from` says of a build signed by a key the user does not trust.
const UNTRUSTED: &str = "not pulling the build --from names: [..] is signed by key [..], which is not in your trusted-keys
help: if you trust its publisher, trust their public key: `rdna1-patch trust KEY` (KEY: the second line of their minisign.pub), then run this again";

fn public_file(p: &Publisher) -> std::path::PathBuf {
    p.keys.secret.with_extension("pub")
}

#[test]
fn a_file_in_the_current_directory_named_like_a_trusted_key_is_not_a_key() {
    let (maintainer, attacker, tagged) = maintainer_and_attacker();
    let user = User::new(&[&maintainer.keys.public], &[]);
    // The key string as a path in the user's current directory (nested
    // where the key has a '/'), holding the attacker's public key.
    let planted = user.sb.root.join(&maintainer.keys.public);
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    std::fs::copy(public_file(&attacker), &planted).unwrap();
    user.build(&["--from", &tagged, "--dry-run"])
        .fails_with(&format!(
            "error: the build would stop before fetching: {UNTRUSTED}"
        ));
    user.build(&["--from", &tagged])
        .fails_with(&format!("error: {UNTRUSTED}"));
    user.nothing_installed();
}

#[test]
fn a_relative_key_file_is_read_beside_the_config_not_in_the_current_directory() {
    let (maintainer, attacker, attackers) = maintainer_and_attacker();
    let dir = maintainer.sb.root.join("builds");
    let printed = maintainer.published(dir.to_str().unwrap());
    let maintainers = printed.split('@').next().unwrap().to_owned();
    let mut user = User::new(&[], &[]);
    let conf = user.sb.root.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::copy(public_file(&maintainer), conf.join("maintainer.pub")).unwrap();
    user.config = conf.join("config.toml");
    std::fs::write(&user.config, "trusted-keys = [\"maintainer.pub\"]\n").unwrap();
    // The attacker's key under the same name where the user runs the tool.
    std::fs::copy(public_file(&attacker), user.sb.root.join("maintainer.pub")).unwrap();
    user.build(&["--from", &attackers, "--dry-run"])
        .fails_with(&format!(
            "error: the build would stop before fetching: {UNTRUSTED}"
        ));
    user.build(&["--from", &maintainers])
        .ok()
        .says("is this build");
}

/// Issue 33, 6: credential files that are not files. A registry that
/// wants a login makes the pull read them; it ends, with the login hint.
#[test]
fn an_auth_file_that_is_a_device_or_a_fifo_does_not_hang_a_pull() {
    let reg = Registry::start(Some(("maintainer", "s3cret")));
    let reference = format!("{}:some-tag", registry_ref(&reg, "rdna1/miopen"));
    let user = User::new(&[], &[]);
    let fifo = user.sb.root.join("auth.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for auth in [Path::new("/dev/zero"), fifo.as_path()] {
        let mut args = user.sb.build_args(&["--from", &reference]);
        let at = args.iter().position(|a| a == "--rocm").unwrap();
        args[at + 1] = user.sb.root.join("no-rocm").display().to_string();
        // The old code read /dev/zero until memory ran out and blocked on
        // the FIFO for ever: it is stopped after a minute.
        let mut child = user
            .sb
            .cmd()
            .args(&args)
            .env("RDNA1_PATCH_CONFIG", &user.config)
            .env("REGISTRY_AUTH_FILE", auth)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed().as_secs() > 60 {
                child.kill().unwrap();
                panic!("the pull hung with REGISTRY_AUTH_FILE={}", auth.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let out = child.wait_with_output().unwrap();
        Run::from(out).fails().says("HTTP 401").says("log in to");
        user.nothing_installed();
    }
}

/// Issue 33, 5: a registry that drips its answer a byte at a time never
/// trips the per-read timeout; the whole answer has a deadline.
#[test]
fn a_registry_that_drips_its_answer_is_given_up_on() {
    use std::io::{Read, Write};
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut c in server.incoming().flatten().take(8) {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let n = c.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                if head.starts_with("GET /v2/ ") {
                    let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
                    return;
                }
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: 100000\r\n\r\n");
                for _ in 0..120 {
                    if c.write_all(b" ").is_err() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
            });
        }
    });
    let user = User::new(&[], &[]);
    let started = std::time::Instant::now();
    let run = user.build(&[
        "--from",
        &format!("oci://{addr}/rdna1/miopen:x"),
        "--net-timeout",
        "1",
    ]);
    let took = started.elapsed();
    run.fails_with(
        r#"error: the registry 127.0.0.1:[..] did not finish answering in time (a whole answer is bounded, not only each wait: 4 s for a small one, and at least 64 KiB/s for a blob)
help: check that the registry is up and is an OCI registry (curl http://127.0.0.1:[..]/v2/), or give --net-timeout more seconds; nothing was changed"#,
    ).says("did not finish answering in time");
    assert!(took.as_secs() < 20, "took {took:?}");
    user.nothing_installed();
}

/// Issue 33, 5: a cache listing thousands of tags is not read manifest by
/// manifest: at most 50 are examined, and the rest are said.
#[test]
fn a_cache_with_many_tags_is_examined_fifty_at_most() {
    let (_publisher, dir, tagged, _user) = published_layout();
    let tag = tagged.rsplit(':').next().unwrap();
    let (_, digest) = layout_manifest(&dir, tag);
    let index_path = dir.join("index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    // 200 more tags of the profile, unsigned (no .sig tag names them).
    let size = std::fs::metadata(blob(&dir, &digest)).unwrap().len();
    for i in 0..200 {
        index["manifests"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": size,
                "annotations": { "org.opencontainers.image.ref.name": format!("mini-{i:04}") },
            }));
    }
    std::fs::write(&index_path, index.to_string()).unwrap();
    // The user's key is another: nothing there is this user's build.
    let stranger = keys(&dir, "stranger");
    let user = User::new(&[&stranger.public], &[dir.to_str().unwrap()]);
    let run = user.build(&["--dry-run"]);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        all.contains("none of the 50 builds of mini")
            && all.contains("151 more tags of mini there were not looked at (at most 50 are)"),
        "{all}"
    );
}

/// Issue 33, 4: a signed bomb. The trusted key signs a config that
/// declares less than the layer unpacks to (a compromised publisher, or
/// a mistake): the pull writes no more than declared, and refuses.
#[test]
fn a_layer_that_unpacks_to_more_than_its_signed_config_declares_is_refused() {
    let (publisher, dir, tagged, user) = published_layout();
    let tag = tagged.rsplit(':').next().unwrap();
    let (mut manifest, _) = layout_manifest(&dir, tag);
    let config_digest = manifest["config"]["digest"].as_str().unwrap().to_owned();
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob(&dir, &config_digest)).unwrap()).unwrap();
    config["unpacked_size"] = 100.into();
    let config_bytes = serde_json::to_vec_pretty(&config).unwrap();
    manifest["config"]["digest"] = put_blob(&dir, &config_bytes).into();
    manifest["config"]["size"] = config_bytes.len().into();
    let manifest_bytes = serde_json::to_vec(&manifest).unwrap();
    let digest = put_blob(&dir, &manifest_bytes);
    // Signed by the trusted key, as publish signs.
    let file = publisher.sb.root.join("bomb.json");
    std::fs::write(&file, &manifest_bytes).unwrap();
    rdna1_testkit::run(
        std::process::Command::new("minisign")
            .args(["-S", "-s"])
            .arg(&publisher.keys.secret)
            .arg("-m")
            .arg(&file)
            .args(["-t", &format!("rdna1-patch build manifest {digest}")]),
    );
    let signature = std::fs::read(publisher.sb.root.join("bomb.json.minisig")).unwrap();
    let old_sig_tag = format!("{}.sig", layout_manifest(&dir, tag).1.replace(':', "-"));
    let (mut sig_manifest, _) = layout_manifest(&dir, &old_sig_tag);
    sig_manifest["layers"][0]["digest"] = put_blob(&dir, &signature).into();
    sig_manifest["layers"][0]["size"] = signature.len().into();
    sig_manifest["subject"]["digest"] = digest.clone().into();
    sig_manifest["subject"]["size"] = manifest_bytes.len().into();
    let sig_bytes = serde_json::to_vec(&sig_manifest).unwrap();
    let sig_digest = put_blob(&dir, &sig_bytes);
    let index_path = dir.join("index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    let list = index["manifests"].as_array_mut().unwrap();
    for m in list.iter_mut() {
        if m["annotations"]["org.opencontainers.image.ref.name"] == tag {
            m["digest"] = digest.clone().into();
            m["size"] = manifest_bytes.len().into();
        }
    }
    list.push(serde_json::json!({
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": sig_digest,
        "size": sig_bytes.len(),
        "annotations": { "org.opencontainers.image.ref.name": format!("{}.sig", digest.replace(':', "-")) },
    }));
    std::fs::write(&index_path, index.to_string()).unwrap();
    user.build(&["--from", &tagged])
        .fails_with(
            r#"error: [..] cannot be trusted: its layer unpacks to more than the [..] bytes its signed config declares (include/miopen/miopen.h alone is 999)
help: it may have been tampered with or damaged on the way; ask its publisher, or build without it (leave out --from); nothing was installed"#,
        )
        .says("its layer unpacks to more than the 100 bytes its signed config declares");
    user.nothing_installed();
}
