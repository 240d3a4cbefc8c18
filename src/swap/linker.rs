//! What the dynamic loader would load for a library, asked of the loader
//! itself through `ldd`, so RUNPATH, $ORIGIN, LD_LIBRARY_PATH and
//! ld.so.cache are honoured exactly as at run time.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    pub name: String,
    /// None: "not found".
    pub path: Option<PathBuf>,
}

/// Every library `path` would pull in, directly or not.
/// `search` goes ahead of the loader's own path: the directories
/// whose libraries a preload (rocm_sdk's, RTLD_GLOBAL by absolute path) has
/// already put in the process, which satisfy a NEEDED entry by SONAME.
pub fn resolve(path: &Path, search: &[PathBuf]) -> Result<Vec<Dep>> {
    let mut cmd = std::process::Command::new("ldd");
    cmd.arg(path);
    if !search.is_empty() {
        let mut dirs: Vec<std::ffi::OsString> =
            search.iter().map(|d| d.as_os_str().to_owned()).collect();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            dirs.push(old);
        }
        cmd.env("LD_LIBRARY_PATH", dirs.join(std::ffi::OsStr::new(":")));
    }
    let out = crate::proc::helper(cmd)
        .context("cannot run ldd (Debian/Ubuntu: it is in the libc-bin package)")?;
    if !out.status.success() {
        bail!("ldd {} failed: {}", path.display(), out.stderr.trim());
    }
    Ok(parse(&out.stdout))
}

fn parse(text: &str) -> Vec<Dep> {
    let mut deps = Vec::new();
    for line in text.lines().map(str::trim) {
        let Some((name, rest)) = line.split_once(" => ") else {
            continue;
        };
        let rest = rest.trim();
        let path = if rest.starts_with("not found") {
            None
        } else {
            Some(PathBuf::from(rest.split(" (").next().unwrap_or(rest)))
        };
        deps.push(Dep {
            name: name.to_owned(),
            path,
        });
    }
    deps
}

/// Names the loader could not find.
pub fn missing(deps: &[Dep]) -> Vec<&str> {
    deps.iter()
        .filter(|d| d.path.is_none())
        .map(|d| d.name.as_str())
        .collect()
}

/// Libraries that `lib_dir` bundles and the dependencies load from somewhere
/// else too: each (bundled file, the other copy). Compared by name stem and
/// path, since a wheel renames its copies (libamdhip64.so.6 -> libamdhip64.so).
pub fn second_copies(deps: &[Dep], lib_dirs: &[PathBuf]) -> Result<Vec<(String, PathBuf)>> {
    let mut bundled = Vec::new();
    for d in lib_dirs {
        bundled.extend(bundled_names(d)?);
    }
    let lib_dirs: Vec<PathBuf> = lib_dirs
        .iter()
        .map(|d| d.canonicalize().unwrap_or(d.to_owned()))
        .collect();
    let mut out = Vec::new();
    for dep in deps {
        let Some(path) = &dep.path else { continue };
        let dir = path
            .parent()
            .map(|d| d.canonicalize().unwrap_or(d.to_owned()));
        if dir.as_ref().is_some_and(|d| lib_dirs.contains(d)) {
            continue;
        }
        let stem = crate::elf::stem(&dep.name);
        if let Some(b) = bundled.iter().find(|b| crate::elf::stem(b) == stem) {
            out.push((b.clone(), path.clone()));
        }
    }
    Ok(out)
}

/// File names of the shared libraries in `lib_dir`.
pub fn bundled_names(lib_dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for e in
        std::fs::read_dir(lib_dir).with_context(|| format!("cannot read {}", lib_dir.display()))?
    {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.contains(".so") && !name.starts_with('.') {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ldd_output() {
        let deps = parse(
            "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibamdhip64.so.6 => /opt/rocm/lib/libamdhip64.so.6 (0x00007f)\n\tlibroctx64.so.4 => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n",
        );
        assert_eq!(
            deps,
            vec![
                Dep {
                    name: "libamdhip64.so.6".into(),
                    path: Some("/opt/rocm/lib/libamdhip64.so.6".into())
                },
                Dep {
                    name: "libroctx64.so.4".into(),
                    path: None
                },
            ]
        );
    }
}
