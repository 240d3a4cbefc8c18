//! `cargo xtask fidelity --miopen-src DIR [--profile NAME]`: real MIOpen and
//! a real ROCm toolchain. In the rocm-env chroot it configures MIOpen through
//! `rdna1-patch build --stop-after configure`, compiles every C++ file the
//! series touches, and compiles the batch-norm kernels for gfx1010/1011/1012
//! and a gfx1030 control, pristine and patched (fidelity.sh does the work).
//! The results replace this profile's section of FIDELITY.md. It fails when
//! the patched kernels do not all compile or the gfx1030 control does not,
//! since then either the series or the harness is wrong.
//!
//! `cargo xtask fidelity --release VERSION` does the kernel part for a
//! release whose sources cannot be had here: the batch-norm kernel texts
//! Debian's libmiopen1 VERSION embeds (6.4.3 in unstable, 7.2.4 in
//! experimental), pristine and with the bn-gfx101x series' change made to
//! them (fidelity-release.sh, release_kernels.py, apply_release.py).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::fidelity_harness::{HARNESS, copy_tree, put_script};
use crate::fidelity_render::{put_section, render};
use crate::rocm_env;

const SCRIPT: &str = include_str!("fidelity.sh");
const RELEASE_SCRIPT: &str = include_str!("fidelity-release.sh");
const EXTRACT: &str = include_str!("release_kernels.py");
const APPLY: &str = include_str!("apply_release.py");
const HIP: &str = include_str!("release_hip.py");

pub fn fidelity(root: &Path, args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--rocblas") {
        return crate::fidelity_rocblas::rocblas(root, args);
    }
    if args.iter().any(|a| a == "--ccob") {
        return crate::fidelity_ccob::ccob(root);
    }
    if args.iter().any(|a| a == "--hip-front-end") {
        return crate::fidelity_hip::hip_front_end(root);
    }
    let mut src = None;
    let mut profile = "rocm-6.2.4".to_owned();
    let mut release = None;
    let mut full = false;
    let mut resume = false;
    let mut render_only = false;
    let mut mirror = None;
    let mut upstream = None;
    let mut system = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--full" => full = true,
            // Go on with a stopped --full build, as the tool's own advice
            // says (the same command again); the record says so.
            "--resume" => resume = true,
            // Render FIDELITY.md's section from the results a run left.
            "--render-only" => render_only = true,
            "--mirror" => mirror = Some(PathBuf::from(it.next().context("--mirror GITDIR")?)),
            "--miopen-src" => src = Some(PathBuf::from(it.next().context("--miopen-src DIR")?)),
            "--profile" => profile = it.next().context("--profile NAME")?.clone(),
            "--release" => release = Some(it.next().context("--release VERSION")?.clone()),
            "--upstream" => upstream = Some(PathBuf::from(it.next().context("--upstream DIR")?)),
            "--system" => system = true,
            other => bail!(
                "unknown argument {other}: cargo xtask fidelity --miopen-src DIR [--profile NAME] | --full [--resume] --profile NAME (--mirror GITDIR | --miopen-src DIR) | --release VERSION | --upstream DIR | --system | --rocblas --tensile-mirror GITDIR [--resume | --render-only] | --ccob | --hip-front-end"
            ),
        }
    }
    if let Some(version) = release {
        return fidelity_release(root, &version);
    }
    if let Some(dir) = upstream {
        return crate::fidelity_more::upstream(root, &dir);
    }
    if system {
        return crate::fidelity_more::system(root);
    }
    if render_only {
        let results = root
            .join("target/rocm-env/chroot/fid")
            .join(&profile)
            .join("results");
        let label = if full {
            format!("full-{profile}")
        } else {
            profile.clone()
        };
        return write_section(root, &label, &results);
    }
    if let Some(mirror) = &mirror {
        src = Some(tree_from_mirror(root, mirror, &profile)?);
    }
    let src = src.context(
        "--miopen-src DIR is required: a MIOpen checkout or tree at the profile's tag \
         (the `fetch` tool gives github:ROCm/MIOpen and github:simeonschaub/MIOpen)",
    )?;
    if !src.join("src/kernels/batchnorm_functions.h").is_file() {
        bail!(
            "{} is not a MIOpen source tree (no src/kernels/batchnorm_functions.h)",
            src.display()
        );
    }
    let env = rocm_env::ensure(root)?;
    let fid = env.chroot.join("fid");
    std::fs::create_dir_all(&fid)?;
    put_script(&fid.join("fidelity.sh"), SCRIPT)?;
    put_script(&fid.join("bn-kernels.sh"), HARNESS)?;
    copy_tree(&root.join("patches/compat"), &fid.join("compat"))?;
    let mode = match (full, resume) {
        (true, true) => " full resume",
        (true, false) => " full",
        (false, true) => bail!("--resume goes with --full"),
        (false, false) => "",
    };
    env.run(
        root,
        Some(&src),
        &format!("bash /fid/fidelity.sh {profile}{mode}"),
    )?;
    let results = fid.join(&profile).join("results");
    if full {
        return write_section(root, &format!("full-{profile}"), &results);
    }
    write_section(root, &profile, &results)
}

/// The profile's pinned commit as a plain tree, written blob by blob from
/// a git directory (a `fetch` mirror) under target/fidelity-trees: blobs
/// the mirror lacks are named in ABSENT.txt beside the tree, not fatal.
fn tree_from_mirror(root: &Path, mirror: &Path, profile: &str) -> Result<PathBuf> {
    let toml = std::fs::read_to_string(root.join("profiles").join(format!("{profile}.toml")))
        .with_context(|| format!("no built-in profile {profile}"))?;
    let commit = toml
        .lines()
        .find_map(|l| l.strip_prefix("commit = \"")?.strip_suffix('"'))
        .with_context(|| format!("profile {profile} pins no commit"))?;
    let out = root.join("target/fidelity-trees").join(commit);
    let stamp = out.with_extension("done");
    if stamp.is_file() {
        return Ok(out.join("tree"));
    }
    let _ = std::fs::remove_dir_all(&out);
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("--git-dir")
            .arg(mirror)
            .args(args)
            .output()
    };
    let listing = git(&["ls-tree", "-r", "-z", commit])?;
    if !listing.status.success() {
        bail!("{} has no commit {commit}", mirror.display());
    }
    let mut absent = Vec::new();
    let mut files = 0;
    for entry in listing.stdout.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        let (meta, path) = entry.split_once('\t').context("ls-tree line")?;
        let mut meta = meta.split(' ');
        let (mode, kind, id) = (meta.next(), meta.next(), meta.next().unwrap_or(""));
        if kind != Some("blob") {
            continue;
        }
        let to = out.join("tree").join(path);
        std::fs::create_dir_all(to.parent().expect("a parent"))?;
        let blob = git(&["cat-file", "blob", id])?;
        if !blob.status.success() {
            absent.push(format!("{path} {id}"));
            continue;
        }
        if mode == Some("120000") {
            std::os::unix::fs::symlink(String::from_utf8_lossy(&blob.stdout).as_ref(), &to)?;
        } else {
            std::fs::write(&to, &blob.stdout)?;
            if mode == Some("100755") {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))?;
            }
        }
        files += 1;
    }
    std::fs::write(out.join("ABSENT.txt"), absent.join("\n") + "\n")?;
    eprintln!(
        "xtask: {} files of {commit} written to {}; {} blobs absent from the mirror: {}",
        files,
        out.join("tree").display(),
        absent.len(),
        absent.join(", ")
    );
    std::fs::write(&stamp, "")?;
    Ok(out.join("tree"))
}

/// The kernels Debian's libmiopen1 `version` embeds, pristine and patched.
fn fidelity_release(root: &Path, version: &str) -> Result<()> {
    // A 7.x library loads against 7.x's runtime and compiles its HIP
    // kernels with 7.x's hipRTC: the experimental chroot has both.
    let seven = version.starts_with("7.");
    let env = if seven {
        rocm_env::ensure_suite(root, rocm_env::Suite::Experimental)?
    } else {
        rocm_env::ensure(root)?
    };
    // Debian experimental carries the 7.x packages; at its default pin it
    // never replaces what unstable installed. Its own chroot lists it.
    if !seven {
        std::fs::write(
            env.chroot.join("etc/apt/sources.list.d/experimental.list"),
            "deb http://deb.debian.org/debian experimental main\n",
        )?;
    }
    let fid = env.chroot.join("fid");
    std::fs::create_dir_all(&fid)?;
    for (name, text) in [
        ("fidelity-release.sh", RELEASE_SCRIPT),
        ("bn-kernels.sh", HARNESS),
        ("release_kernels.py", EXTRACT),
        ("apply_release.py", APPLY),
        ("release_hip.py", HIP),
    ] {
        put_script(&fid.join(name), text)?;
    }
    copy_tree(
        &root.join("patches/miopen/bn-gfx101x"),
        &fid.join("bn-gfx101x"),
    )?;
    env.run(
        root,
        None,
        &format!(
            "apt-get -o Acquire::Check-Valid-Until=false update -qq && bash /fid/fidelity-release.sh {version}"
        ),
    )?;
    let label = format!("release-{version}");
    let results = fid.join(&label).join("results");
    // Every row doctor, verify and status print over this library fits a
    // glance (the in-place part writes them; a release it skips, none).
    let mut reports = vec!["doctor.txt", "doctor-fixed.txt", "status.txt"];
    reports.extend(COMPILE_LOGS);
    let needed: &[&str] = match results.join("inplace.log").exists() {
        true => &["doctor.txt"],
        false => &[],
    };
    let long = crate::fidelity_glance::check(&results, &reports, needed);
    write_section(root, &label, &results)?;
    if !long.is_empty() {
        bail!("rows over a glance: {}", long.join("; "));
    }
    Ok(())
}

/// verify --compile's reports of the release's fixed library, one a target.
const COMPILE_LOGS: [&str; 4] = [
    "compile-gfx1010.log",
    "compile-gfx1011.log",
    "compile-gfx1012.log",
    "compile-gfx1030.log",
];

/// Render `label`'s results into its section of FIDELITY.md; fail when they
/// do not show what the harness must show.
fn write_section(root: &Path, label: &str, results: &Path) -> Result<()> {
    let section = render(label, results)?;
    put_section(root, label, &section.text)?;
    if !section.failures.is_empty() {
        bail!("{}", section.failures.join("; "));
    }
    Ok(())
}
