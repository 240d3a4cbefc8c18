//! `trust` edits the config as a careful editor would: under a lock, through
//! a symlink to its target, never over a file the user made read-only.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use base64::Engine;

use crate::support::{Run, Sandbox};

/// A minisign public key string of our own making: "Ed", an 8-byte key id
/// and a 32-byte key, all `n`.
pub(crate) fn key(n: u8) -> String {
    let mut bytes = b"Ed".to_vec();
    bytes.extend([n; 40]);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn trust(sb: &Sandbox, config: &Path, key: &str) -> std::process::Child {
    sb.cmd()
        .env("RDNA1_PATCH_CONFIG", config)
        .args(["trust", key])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn trusted(config: &Path) -> Vec<String> {
    let doc: toml::Value = toml::from_str(&std::fs::read_to_string(config).unwrap()).unwrap();
    doc["trusted-keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn runs_at_once_each_keep_their_key() {
    let sb = Sandbox::new();
    let config = sb.root.join("config.toml");
    let children: Vec<_> = (1..=6).map(|n| trust(&sb, &config, &key(n))).collect();
    for c in children {
        Run::from(c.wait_with_output().unwrap())
            .ok()
            .says("Trusted key");
    }
    let mut got = trusted(&config);
    got.sort();
    let mut want: Vec<String> = (1..=6).map(key).collect();
    want.sort();
    assert_eq!(got, want, "every run's key is kept");
}

#[test]
fn a_symlinked_config_gets_the_key_at_its_target_and_stays_a_link() {
    let sb = Sandbox::new();
    let dotfiles = sb.root.join("dotfiles/rdna1-patch.toml");
    std::fs::create_dir_all(dotfiles.parent().unwrap()).unwrap();
    std::fs::write(&dotfiles, "# mine\n").unwrap();
    std::fs::set_permissions(&dotfiles, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = sb.root.join("config.toml");
    std::os::unix::fs::symlink(&dotfiles, &config).unwrap();
    Run::from(trust(&sb, &config, &key(1)).wait_with_output().unwrap())
        .ok()
        .says(&format!("in {}", config.display()));
    assert!(config.symlink_metadata().unwrap().file_type().is_symlink());
    let text = std::fs::read_to_string(&dotfiles).unwrap();
    assert!(text.contains("# mine\n"), "{text}");
    assert_eq!(trusted(&dotfiles), vec![key(1)]);
    let mode = std::fs::metadata(&dotfiles).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "its mode is kept");
}

#[test]
fn a_read_only_config_is_left_alone() {
    let sb = Sandbox::new();
    let config = sb.root.join("config.toml");
    std::fs::write(&config, "# locked\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o444)).unwrap();
    Run::from(trust(&sb, &config, &key(1)).wait_with_output().unwrap()).fails_with(&format!(
        "error: {0} is read-only (mode 444); rdna1-patch does not change a file you made read-only, so the key was not added
help: make it writable (`chmod u+w {0}`) and run this again, or add the key to its trusted-keys by hand",
        config.display()
    ));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "# locked\n");
}

fn run(sb: &Sandbox, config: &Path, args: &[&str]) -> Run {
    Run::from(
        sb.cmd()
            .env("RDNA1_PATCH_CONFIG", config)
            .args(args)
            .output()
            .unwrap(),
    )
}

/// Issue 46: keys can be listed and removed, as `trust` adds them (under
/// the lock, the rest of the file kept); it was clap's "to pass '--list'
/// as a value, use '-- --list'".
#[test]
fn trusted_keys_are_listed_and_removed() {
    let sb = Sandbox::new();
    let config = sb.root.join("config.toml");
    std::fs::write(&config, "# the team's\ncaches = [\"oci://h/r\"]\n").unwrap();
    for n in [1, 2] {
        run(&sb, &config, &["trust", &key(n)]).ok();
    }
    let listed = run(&sb, &config, &["trust", "--list"]).ok().stdout;
    assert_eq!(
        listed,
        format!(
            "0101010101010101  {}\n0202020202020202  {}\n",
            key(1),
            key(2)
        )
    );
    run(&sb, &config, &["trust", "--remove", "0101010101010101"])
        .ok()
        .says(&format!(
            "Untrusted key 0101010101010101 in {}: builds it signed are no longer taken",
            config.display()
        ));
    assert_eq!(trusted(&config), vec![key(2)]);
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.starts_with("# the team's\ncaches = [\"oci://h/r\"]\n"),
        "{text}"
    );
    // By its key string too; an unknown one changes nothing.
    run(&sb, &config, &["trust", "--remove", &key(2)]).ok();
    assert_eq!(trusted(&config), Vec::<String>::new());
    run(&sb, &config, &["trust", "--remove", "0303030303030303"]).fails_with(&format!(
        "error: no trusted key in {} is 0303030303030303; nothing was changed
help: `rdna1-patch trust --list` shows the trusted keys and their ids",
        config.display()
    ));
}
