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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::rocm_env;

const SCRIPT: &str = include_str!("fidelity.sh");
const HARNESS: &str = include_str!("bn-kernels.sh");
const RELEASE_SCRIPT: &str = include_str!("fidelity-release.sh");
const EXTRACT: &str = include_str!("release_kernels.py");
const APPLY: &str = include_str!("apply_release.py");
const HIP: &str = include_str!("release_hip.py");
const UPSTREAM_SCRIPT: &str = include_str!("fidelity-upstream.sh");
const SYSTEM_SCRIPT: &str = include_str!("fidelity-system.sh");
const ARCHES: [&str; 4] = ["gfx1010", "gfx1011", "gfx1012", "gfx1030"];

pub fn fidelity(root: &Path, args: &[String]) -> Result<()> {
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
                "unknown argument {other}: cargo xtask fidelity --miopen-src DIR [--profile NAME] | --full [--resume] --profile NAME (--mirror GITDIR | --miopen-src DIR) | --release VERSION | --upstream DIR | --system"
            ),
        }
    }
    if let Some(version) = release {
        return fidelity_release(root, &version);
    }
    if let Some(dir) = upstream {
        return fidelity_upstream(root, &dir);
    }
    if system {
        return fidelity_system(root);
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
    std::fs::write(fid.join("fidelity.sh"), SCRIPT)?;
    std::fs::write(fid.join("bn-kernels.sh"), HARNESS)?;
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
        std::fs::write(fid.join(name), text)?;
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
    write_section(root, &label, &fid.join(&label).join("results"))
}

/// The system route on Debian's real libmiopen1 in the unstable chroot
/// (fidelity-system.sh): a torch of the user's loading the system library
/// through ld.so.cache gets the fixed copy; `dpkg --verify` stays clean;
/// rollback is byte for byte. Its log goes into FIDELITY.md.
fn fidelity_system(root: &Path) -> Result<()> {
    let env = rocm_env::ensure(root)?;
    let fid = env.chroot.join("fid");
    std::fs::create_dir_all(&fid)?;
    std::fs::write(fid.join("fidelity-system.sh"), SYSTEM_SCRIPT)?;
    let ran = env.run(
        root,
        None,
        "apt-get -o Acquire::Check-Valid-Until=false update -qq && bash /fid/fidelity-system.sh",
    );
    let log = std::fs::read_to_string(fid.join("system/log.txt")).unwrap_or_default();
    let mut s = String::new();
    writeln!(s, "## `cargo xtask fidelity --system`\n")?;
    writeln!(
        s,
        "Generated by the xtask on {}, in the unstable rocm-env chroot: a torch of the user's (its libtorch_hip.so built for gfx1010 by the chroot's clang, no run path) loading Debian's libMIOpen.so.1 through ld.so.cache; `install --into-torch`, `import torch`'s maps, the system file's SHA-256 and `dpkg --verify`, `verify --runtime --compile`, `status`, `rollback`. Result: {}.\n\n```\n{}```",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        match &ran {
            Ok(()) => "every step held",
            Err(_) => "**a step failed** (the log's last lines say which)",
        },
        log
    )?;
    let path = root.join("FIDELITY.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, splice(&old, "system", &s))?;
    eprintln!("xtask: wrote the system section of {}", path.display());
    ran
}

/// Upstream's newest batch-norm texts (DIR: src/kernels/ and MANIFEST.tsv,
/// read from rocm-libraries; never committed here), judged unpatched by
/// the tool's diagnosis through the experimental suite's comgr and hipRTC
/// (fidelity-upstream.sh).
fn fidelity_upstream(root: &Path, dir: &Path) -> Result<()> {
    let env = rocm_env::ensure_suite(root, rocm_env::Suite::Experimental)?;
    let fid = env.chroot.join("fid");
    let up = fid.join("upstream");
    if up.exists() {
        std::fs::remove_dir_all(&up)?;
    }
    copy_tree(&dir.join("src/kernels"), &up.join("src/kernels"))?;
    // An RX 5600 XT's KFD topology, which the script makes a gfx1011 and a
    // gfx1012 of too.
    copy_tree(
        &root.join("tests/fixtures/sysfs/rx5600xt-gfx1010"),
        &up.join("sysfs"),
    )?;
    std::fs::copy(dir.join("MANIFEST.tsv"), up.join("MANIFEST.tsv"))
        .with_context(|| format!("{} has no MANIFEST.tsv", dir.display()))?;
    for (name, text) in [
        ("fidelity-upstream.sh", UPSTREAM_SCRIPT),
        ("bn-kernels.sh", HARNESS),
    ] {
        std::fs::write(fid.join(name), text)?;
    }
    env.run(root, None, "bash /fid/fidelity-upstream.sh")?;
    let results = up.join("results");
    let read = |name: &str| std::fs::read_to_string(results.join(name)).unwrap_or_default();
    let mut s = String::new();
    writeln!(s, "## `cargo xtask fidelity --upstream DIR`\n")?;
    writeln!(
        s,
        "Generated by the xtask on {}, with `{}`, in the experimental rocm-env chroot. Source: {}.\n",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        read("tool.txt").trim(),
        read("source.txt").trim()
    )?;
    s.push_str("| file | commit | characters |\n|---|---|---|\n");
    for row in tsv(&results.join("manifest.tsv"))? {
        if row.len() >= 3 && !row[0].starts_with('#') {
            writeln!(
                s,
                "| `{}` | {} | {} |",
                row[0],
                &row[1][..row[1].len().min(12)],
                row[2]
            )?;
        }
    }
    s.push_str("\n| package | version |\n|---|---|\n");
    for row in tsv(&results.join("toolchain.tsv"))? {
        writeln!(
            s,
            "| {} | {} |",
            row[0],
            row.get(1).map_or("", String::as_str)
        )?;
    }
    let mut failures = Vec::new();
    steps_table(&mut s, "upstream", &results, &mut failures)?;
    writeln!(
        s,
        "\nThe diagnosis, as `rdna1-patch install --into-torch --in-place --dry-run` printed it for gfx1010, gfx1011 and gfx1012 in turn (every batch-norm kernel, each case it reads with the complete define set, with gfx1030 as the control, unpatched):\n\n```\n{}```",
        read("diagnosis.txt")
    )?;
    let path = root.join("FIDELITY.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, splice(&old, "upstream", &s))?;
    eprintln!("xtask: wrote the upstream section of {}", path.display());
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// Render `label`'s results into its section of FIDELITY.md; fail when they
/// do not show what the harness must show.
fn write_section(root: &Path, label: &str, results: &Path) -> Result<()> {
    let section = render(label, results)?;
    let path = root.join("FIDELITY.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, splice(&old, label, &section.text))?;
    eprintln!("xtask: wrote the {label} section of {}", path.display());
    if !section.failures.is_empty() {
        bail!("{}", section.failures.join("; "));
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

struct Section {
    text: String,
    failures: Vec<String>,
}

fn tsv(path: &Path) -> Result<Vec<Vec<String>>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "{} is missing: the chroot run stopped early",
            path.display()
        )
    })?;
    Ok(text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect())
}

/// One kernel compile: kernel, variant, precision, arch, tree, rc, first error.
struct Compile {
    kernel: String,
    variant: String,
    precision: String,
    arch: String,
    pristine: bool,
    ok: bool,
    error: String,
}

fn render(profile: &str, results: &Path) -> Result<Section> {
    let mut failures = Vec::new();
    let mut s = String::new();
    let read = |name: &str| std::fs::read_to_string(results.join(name)).unwrap_or_default();
    let full = profile.strip_prefix("full-");
    match (profile.strip_prefix("release-"), full) {
        (Some(v), _) => writeln!(s, "## `cargo xtask fidelity --release {v}`\n")?,
        (_, Some(p)) => writeln!(s, "## `cargo xtask fidelity --full --profile {p}`\n")?,
        _ => writeln!(s, "## `cargo xtask fidelity --profile {profile}`\n")?,
    }
    writeln!(
        s,
        "Generated by the xtask on {}, with `{}`, in the rocm-env chroot. Source: {}.\n",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        read("tool.txt").trim(),
        read("source.txt").trim()
    )?;
    let compat = read("compat.txt");
    if !compat.trim().is_empty() {
        s.push_str("Chosen by the build from the toolchain's headers, with no flag given:\n\n");
        for line in compat.lines() {
            writeln!(s, "- {}", line.trim_start_matches("Compat ").trim())?;
        }
        s.push('\n');
    }
    s.push_str("| package | version |\n|---|---|\n");
    for row in tsv(&results.join("toolchain.tsv"))? {
        writeln!(
            s,
            "| {} | {} |",
            row[0],
            row.get(1).map_or("", String::as_str)
        )?;
    }
    steps_table(&mut s, profile, results, &mut failures)?;
    if full.is_some() {
        full_build(&mut s, results, &mut failures)?;
        return Ok(Section { text: s, failures });
    }
    let compiles = compiles(tsv(&results.join("kernels.tsv")).unwrap_or_default());
    if compiles.is_empty() {
        failures.push(format!("{profile}: no kernel was compiled"));
        return Ok(Section { text: s, failures });
    }
    let (compiles, broken, excluded) = split_broken(compiles);
    let clang = read("clang.txt");
    kernel_table(
        &mut s,
        &compiles,
        &format!(
            "Batch-norm kernels compiled to objects with {} as MIOpen's offline \
             OpenCL path does (`-x cl -cl-std=CL2.0 -O3 ...`, hipoc_program.cpp), each \
             variant in fp32, fp16 and mixed, with the solvers' `MIO_BN_GFX*` flags for \
             the arch (pristine: the kernels as the commit or release has them; patched: \
             after the series). Cells: compiled / tried.",
            clang
                .trim()
                .split(" (")
                .next()
                .filter(|c| !c.is_empty())
                .unwrap_or("clang-21")
        ),
    )?;
    verdict(&mut s, profile, &compiles, &mut failures)?;
    hip_rows(&mut s, profile, results, &mut failures)?;
    diagnosis(&mut s, profile, results, &mut failures)?;
    left_out(
        &mut s,
        profile,
        &compiles,
        &broken,
        &excluded,
        &mut failures,
    )?;
    if let Ok(tail) = std::fs::read_to_string(results.join("tu-failures.log")) {
        writeln!(
            s,
            "\nFailed translation units, last lines:\n\n```\n{}```",
            tail
        )?;
    }
    Ok(Section { text: s, failures })
}

type Case = (String, String, String);

/// A kernel, variant and precision that the gfx1030 control cannot
/// compile pristine is broken upstream for every arch (MIOpen's solvers
/// avoid some such, e.g. fp16 backward, issue 1549), or lacks a define the
/// harness does not pass: it says nothing about gfx101x and is listed
/// apart. The compiles kept, the broken cases, the compiles left out.
fn split_broken(
    compiles: Vec<Compile>,
) -> (Vec<Compile>, std::collections::BTreeSet<Case>, Vec<Compile>) {
    let broken: std::collections::BTreeSet<Case> = compiles
        .iter()
        .filter(|c| c.arch == "gfx1030" && c.pristine && !c.ok)
        .map(Compile::case)
        .collect();
    let (kept, excluded): (Vec<Compile>, Vec<Compile>) = compiles
        .into_iter()
        .partition(|c| !broken.contains(&c.case()));
    (kept, broken, excluded)
}

fn left_out(
    s: &mut String,
    profile: &str,
    compiles: &[Compile],
    broken: &std::collections::BTreeSet<Case>,
    excluded: &[Compile],
    failures: &mut Vec<String>,
) -> Result<()> {
    if broken.is_empty() {
        return Ok(());
    }
    writeln!(
        s,
        "\nLeft out of the table: {} cases ({} compiles) that fail for the gfx1030 control too: broken for every arch, upstream or for want of a define the harness does not pass, so they say nothing about gfx101x:\n",
        broken.len(),
        excluded.len()
    )?;
    for (k, v, p) in broken {
        let e = excluded
            .iter()
            .find(|c| {
                c.arch == "gfx1030" && c.pristine && c.case() == (k.clone(), v.clone(), p.clone())
            })
            .map_or("", |c| c.error.as_str());
        writeln!(s, "- {k} variant {v} {p}: `{e}`")?;
    }
    if broken.len() * 4 > compiles.len() / 8 + broken.len() {
        failures.push(format!(
            "{profile}: {} of the cases fail for the gfx1030 control; the harness's defines are likely wrong",
            broken.len()
        ));
    }
    Ok(())
}

/// The run's steps (steps.tsv) as a table; a failed step is a failure of
/// `label`'s section.
fn steps_table(
    s: &mut String,
    label: &str,
    results: &Path,
    failures: &mut Vec<String>,
) -> Result<()> {
    s.push_str("\n| step | result | seconds | what |\n|---|---|---|---|\n");
    for row in tsv(&results.join("steps.tsv"))? {
        let ok = row[1] == "0";
        if !ok {
            failures.push(format!("{label}: step `{}` failed", row[0]));
        }
        writeln!(
            s,
            "| {} | {} | {} | `{}` |",
            row[0],
            if ok { "ok" } else { "**failed**" },
            row[2],
            row[3]
        )?;
    }
    Ok(())
}

/// 7.x's HIP batch-norm kernels, compiled through hipRTC from the texts of
/// the pristine library and of the one fixed in place (`release_hip.py`).
fn hip_rows(
    s: &mut String,
    profile: &str,
    results: &Path,
    failures: &mut Vec<String>,
) -> Result<()> {
    if let Ok(why) = std::fs::read_to_string(results.join("hip-skipped.txt")) {
        writeln!(s, "\nHIP kernels: skipped, {}.", why.trim())?;
        return Ok(());
    }
    let Ok(rows) = tsv(&results.join("hip.tsv")) else {
        return Ok(());
    };
    let (compiles, broken, excluded) = split_broken(compiles(rows));
    if compiles.is_empty() && broken.is_empty() {
        failures.push(format!("{profile}: no HIP kernel was compiled"));
        return Ok(());
    }
    kernel_table(
        s,
        &compiles,
        "The HIP batch-norm kernels (7.x), compiled through the suite's hipRTC as \
         MIOpen compiles them at run time, with every header they include, in fp32, \
         fp16 and mixed, with the OpenCL harness's sizes and `MIO_BN_GFX*` flags \
         (pristine: the texts of the library as released; patched: the texts of the \
         library after `install --into-torch --in-place`, `configuration.hpp` fixed in \
         place). Cells: compiled / tried.",
    )?;
    // This harness passes the OpenCL harness's sizes, not every define a
    // HIP solver passes: its table is for reading, and the diagnosis below
    // (the tool's own, with the complete define sets) decides. Only a
    // patched compile that fails where the control compiles fails the run.
    let label = format!("{profile} (HIP)");
    let mut found = Vec::new();
    verdict(s, &label, &compiles, &mut found)?;
    left_out(s, &label, &compiles, &broken, &excluded, &mut found)?;
    failures.extend(
        found
            .into_iter()
            .filter(|f| f.contains("patched kernel compiles failed")),
    );
    Ok(())
}

/// The tool's own diagnosis of the release's library, as `install
/// --into-torch` printed it in the chroot: each kernel's verdict for
/// gfx1010 through the suite's comgr (and hipRTC), and the proof of the
/// fix it made.
fn diagnosis(
    s: &mut String,
    profile: &str,
    results: &Path,
    failures: &mut Vec<String>,
) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(results.join("diagnosis.txt")) else {
        return Ok(());
    };
    writeln!(
        s,
        "\nThe diagnosis by compile, as `rdna1-patch install --into-torch --in-place` printed it in the chroot: every batch-norm kernel the library embeds (OpenCL through the suite's comgr, HIP through its hipRTC), each case its text reads (variant, type, layout) with the complete define set a solver passes, judged for gfx1010 with gfx1030 as the control; then the proof of the fix (every kernel compiles for gfx1010, gfx1011 and gfx1012; every changed one compiles to the same gfx1030 code object as before):\n\n```\n{}```",
        text
    )?;
    let fails = text
        .lines()
        .filter(|l| l.starts_with("Kernel ") && l.contains(": fails at the DPP"))
        .count();
    if fails == 0 {
        failures.push(format!(
            "{profile}: the diagnosis found no kernel failing at the DPP reduction"
        ));
    }
    if !text.lines().any(|l| l.starts_with("Proven ")) {
        failures.push(format!("{profile}: the fix was not proven"));
    }
    Ok(())
}

/// What a whole build left: its steps, cores, files and what the user's
/// checks said.
fn full_build(s: &mut String, results: &Path, failures: &mut Vec<String>) -> Result<()> {
    let read = |name: &str| std::fs::read_to_string(results.join(name)).unwrap_or_default();
    let md5 = read("md5.txt");
    let ok = md5.lines().filter(|l| l.ends_with(": OK")).count();
    let bad = md5.lines().filter(|l| l.contains(": FAILED")).count();
    let resumed = read("resumed.txt");
    if !resumed.is_empty() {
        writeln!(
            s,
            "\nThis run went on with a stopped one (the same command again, as the tool advises); before it: {}",
            resumed.trim()
        )?;
    }
    writeln!(
        s,
        "\nOn {} cores: {} (the tool's build stage), {} failed. The prefix: {ok} files, {bad} failing `md5sum -c`, {} on disk.",
        read("cores.txt").trim(),
        read("ninja-steps.txt").trim(),
        read("failed.txt").lines().count(),
        read("size.txt").trim()
    )?;
    let verify = read("verify.txt");
    if !verify.is_empty() {
        writeln!(
            s,
            "\n`rdna1-patch verify --prefix` in the chroot:\n\n```\n{}```",
            verify
        )?;
    }
    if ok == 0 || bad > 0 {
        failures.push(format!("md5sum -c: {ok} OK, {bad} failed"));
    }
    Ok(())
}

/// The rows of a compile log (kernels.tsv, hip.tsv).
fn compiles(rows: Vec<Vec<String>>) -> Vec<Compile> {
    rows.into_iter()
        .map(|r| Compile {
            kernel: r[0].clone(),
            variant: r[1].clone(),
            precision: r[2].clone(),
            arch: r[3].clone(),
            pristine: r[4] == "pristine",
            ok: r[5] == "0",
            error: r.get(6).cloned().unwrap_or_default(),
        })
        .collect()
}

impl Compile {
    fn case(&self) -> (String, String, String) {
        (
            self.kernel.clone(),
            self.variant.clone(),
            self.precision.clone(),
        )
    }
}

fn kernel_table(s: &mut String, compiles: &[Compile], intro: &str) -> Result<()> {
    writeln!(s, "\n{intro}\n")?;
    s.push_str("| kernel | variants |");
    for a in ARCHES {
        write!(s, " {a} pristine | {a} patched |")?;
    }
    s.push_str("\n|---|---|");
    s.push_str(&"---|".repeat(ARCHES.len() * 2));
    s.push('\n');
    let mut kernels: BTreeMap<&str, Vec<&Compile>> = BTreeMap::new();
    for c in compiles {
        kernels.entry(&c.kernel).or_default().push(c);
    }
    for (kernel, cs) in &kernels {
        let mut variants: Vec<&str> = cs.iter().map(|c| c.variant.as_str()).collect();
        variants.dedup();
        variants.sort_unstable();
        variants.dedup();
        write!(s, "| {kernel} | {} |", variants.join(" "))?;
        for a in ARCHES {
            for pristine in [true, false] {
                let tried: Vec<_> = cs
                    .iter()
                    .filter(|c| c.arch == a && c.pristine == pristine)
                    .collect();
                let ok = tried.iter().filter(|c| c.ok).count();
                let cell = format!("{ok}/{}", tried.len());
                if ok < tried.len() {
                    write!(s, " **{cell}** |")?;
                } else {
                    write!(s, " {cell} |")?;
                }
            }
        }
        s.push('\n');
    }
    Ok(())
}

fn verdict(
    s: &mut String,
    profile: &str,
    compiles: &[Compile],
    failures: &mut Vec<String>,
) -> Result<()> {
    let count = |f: &dyn Fn(&Compile) -> bool| compiles.iter().filter(|c| f(c)).count();
    let patched_bad = count(&|c| !c.pristine && !c.ok);
    let control_bad = count(&|c| c.arch == "gfx1030" && !c.ok);
    let rdna1_pristine = count(&|c| c.pristine && c.arch != "gfx1030");
    let rdna1_pristine_bad = count(&|c| c.pristine && c.arch != "gfx1030" && !c.ok);
    writeln!(
        s,
        "\n{} compiles. Pristine on gfx101x: {rdna1_pristine_bad} of {rdna1_pristine} fail. \
         Patched: {patched_bad} fail. gfx1030 control: {control_bad} fail.",
        compiles.len()
    )?;
    let mut errors: BTreeMap<&str, usize> = BTreeMap::new();
    for c in compiles.iter().filter(|c| !c.ok) {
        *errors.entry(c.error.as_str()).or_default() += 1;
    }
    if !errors.is_empty() {
        s.push_str("\nFirst error of each failing compile:\n\n");
        for (e, n) in errors {
            writeln!(s, "- {n} x `{e}`")?;
        }
    }
    if let Some(c) = compiles.iter().find(|c| c.pristine && !c.ok) {
        writeln!(
            s,
            "\nFor example, pristine {} variant {} for {}: `{}`.",
            c.kernel, c.variant, c.arch, c.error
        )?;
    }
    if patched_bad > 0 {
        failures.push(format!(
            "{profile}: {patched_bad} patched kernel compiles failed"
        ));
    }
    if control_bad > 0 {
        failures.push(format!(
            "{profile}: {control_bad} gfx1030 compiles failed; the harness's defines are wrong"
        ));
    }
    if rdna1_pristine_bad == 0 {
        failures.push(format!(
            "{profile}: every pristine gfx101x compile passed, so this run does not show the bug"
        ));
    }
    Ok(())
}

/// Replace the profile's generated section, or append it.
fn splice(old: &str, profile: &str, section: &str) -> String {
    let begin = format!("<!-- xtask fidelity {profile}: begin -->");
    let end = format!("<!-- xtask fidelity {profile}: end -->");
    let block = format!("{begin}\n{section}{end}\n");
    match (old.find(&begin), old.find(&end)) {
        (Some(b), Some(e)) if e > b => {
            let after = old[e + end.len()..].trim_start_matches('\n');
            let sep = if after.is_empty() { "" } else { "\n" };
            format!("{}{block}{sep}{after}", &old[..b])
        }
        _ => format!("{}\n{block}", old.trim_end()),
    }
}
