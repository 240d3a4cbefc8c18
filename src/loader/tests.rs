//! The loader's search order, on small libraries built with the real cc.
//! (Against the real loader, on this machine's own programs: the e2e
//! module `linker`.)

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

/// `dir/name`, a shared library with SONAME `name`, linked with `args`
/// (`-L`, `-l:`, `-Wl,...`).
fn lib(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join(format!("{name}.c"));
    std::fs::write(
        &src,
        format!("int f_{}(void) {{ return 0; }}\n", name.len()),
    )
    .unwrap();
    let out = dir.join(name);
    let run = Command::new("cc")
        .args(["-shared", "-fPIC", "-nostdlib", "-Wl,--no-as-needed"])
        .arg(format!("-Wl,-soname,{name}"))
        .arg(&src)
        .args(args)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("this test builds libraries with cc");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

fn linking(dir: &Path, name: &str) -> Vec<String> {
    vec![format!("-L{}", dir.display()), format!("-l:{name}")]
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Nothing of this machine's own: no cache, no default directories.
fn bare() -> System {
    System {
        ld_library_path: None,
        cache: Vec::new(),
        default_dirs: Vec::new(),
    }
}

fn found(deps: &[Dep], name: &str) -> Option<PathBuf> {
    deps.iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("{name} is not in {deps:?}"))
        .path
        .clone()
}

#[test]
fn ld_library_path_comes_after_rpath_and_before_runpath() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    lib(&a, "libdep.so", &[]);
    lib(&b, "libdep.so", &[]);
    let mut link = linking(&a, "libdep.so");
    link.push(format!("-Wl,-rpath,{}", a.display()));
    let mut with_rpath = link.clone();
    with_rpath.push("-Wl,--disable-new-dtags".into());
    link.push("-Wl,--enable-new-dtags".into());
    let runpath = lib(&t.path().join("m1"), "libmain.so", &args(&link));
    let rpath = lib(&t.path().join("m2"), "libmain.so", &args(&with_rpath));
    let sys = System {
        ld_library_path: Some(b.clone().into_os_string()),
        ..bare()
    };
    let deps = resolve_in(&runpath, runpath.parent().unwrap(), &[], &sys).unwrap();
    assert_eq!(found(&deps, "libdep.so"), Some(b.join("libdep.so")));
    let deps = resolve_in(&rpath, rpath.parent().unwrap(), &[], &sys).unwrap();
    assert_eq!(found(&deps, "libdep.so"), Some(a.join("libdep.so")));
    // The preloaded directories answer before any of them.
    let pre = t.path().join("pre");
    lib(&pre, "libdep.so", &[]);
    let deps = resolve_in(
        &rpath,
        rpath.parent().unwrap(),
        std::slice::from_ref(&pre),
        &sys,
    )
    .unwrap();
    assert_eq!(found(&deps, "libdep.so"), Some(pre.join("libdep.so")));
}

/// RPATH is searched up the chain of loaders, unless the one asking has a
/// RUNPATH; RUNPATH is only ever its own object's.
#[test]
fn rpath_is_inherited_and_runpath_is_not() {
    let t = tempfile::tempdir().unwrap();
    let x = t.path().join("x");
    lib(&x, "libleaf.so", &[]);
    let mut mid = linking(&x, "libleaf.so");
    lib(&x, "libmid.so", &args(&mid));
    let main_link = |flags: &str| {
        let mut l = linking(&x, "libmid.so");
        l.push("-Wl,-rpath,$ORIGIN/../x".into());
        l.push(flags.into());
        l
    };
    let main = lib(
        &t.path().join("m"),
        "libmain.so",
        &args(&main_link("-Wl,--disable-new-dtags")),
    );
    let deps = resolve_in(&main, main.parent().unwrap(), &[], &bare()).unwrap();
    let via = t.path().join("m/../x");
    assert_eq!(found(&deps, "libmid.so"), Some(via.join("libmid.so")));
    assert_eq!(found(&deps, "libleaf.so"), Some(via.join("libleaf.so")));

    // libmid with a RUNPATH of its own that leads nowhere: main's RPATH
    // no longer serves its needs.
    mid.push("-Wl,-rpath,/nonexistent,--enable-new-dtags".into());
    lib(&x, "libmid.so", &args(&mid));
    let deps = resolve_in(&main, main.parent().unwrap(), &[], &bare()).unwrap();
    assert_eq!(found(&deps, "libleaf.so"), None);
    assert_eq!(missing(&deps), ["libleaf.so"]);

    // A RUNPATH on main serves main's own needs only.
    let main = lib(
        &t.path().join("m"),
        "libmain.so",
        &args(&main_link("-Wl,--enable-new-dtags")),
    );
    mid.pop();
    lib(&x, "libmid.so", &args(&mid));
    let deps = resolve_in(&main, main.parent().unwrap(), &[], &bare()).unwrap();
    assert!(found(&deps, "libmid.so").is_some());
    assert_eq!(found(&deps, "libleaf.so"), None);
}

#[test]
fn origin_is_the_directory_the_library_is_put_in() {
    let t = tempfile::tempdir().unwrap();
    let torch = t.path().join("torch/lib");
    lib(&torch, "libamdhip64.so", &[]);
    let mut l = linking(&torch, "libamdhip64.so");
    l.push("-Wl,-rpath,$ORIGIN".into());
    let built = lib(&t.path().join("prefix/lib"), "libMIOpen.so", &args(&l));
    let deps = resolve_in(&built, built.parent().unwrap(), &[], &bare()).unwrap();
    assert_eq!(missing(&deps), ["libamdhip64.so"]);
    let deps = resolve_in(&built, &torch, &[], &bare()).unwrap();
    assert_eq!(
        found(&deps, "libamdhip64.so"),
        Some(torch.join("libamdhip64.so"))
    );
}

#[test]
fn the_cache_then_the_default_dirs_unless_nodefaultlib() {
    let t = tempfile::tempdir().unwrap();
    let (cached, default) = (t.path().join("cached"), t.path().join("default"));
    lib(&cached, "libdep.so", &[]);
    lib(&default, "libdep.so", &[]);
    let l = linking(&cached, "libdep.so");
    let main = lib(&t.path().join("m"), "libmain.so", &args(&l));
    let sys = System {
        cache: vec![("libdep.so".into(), cached.join("libdep.so"))],
        default_dirs: vec![default.clone()],
        ..bare()
    };
    let dir = main.parent().unwrap();
    assert_eq!(
        found(&resolve_in(&main, dir, &[], &sys).unwrap(), "libdep.so"),
        Some(cached.join("libdep.so"))
    );
    let sys = System {
        cache: Vec::new(),
        ..sys
    };
    assert_eq!(
        found(&resolve_in(&main, dir, &[], &sys).unwrap(), "libdep.so"),
        Some(default.join("libdep.so"))
    );
    let mut l = l;
    l.push("-Wl,-z,nodefaultlib".into());
    let main = lib(&t.path().join("m"), "libmain.so", &args(&l));
    assert_eq!(
        missing(&resolve_in(&main, dir, &[], &sys).unwrap()),
        ["libdep.so"]
    );
}

/// What is not a loadable library, where one is looked for, is passed
/// over, and the search goes on; a FIFO does not block it.
#[test]
fn what_is_not_a_loadable_library_is_passed_over() {
    let t = tempfile::tempdir().unwrap();
    let good = t.path().join("good");
    lib(&good, "libdep.so", &[]);
    let mut l = linking(&good, "libdep.so");
    let mut search = Vec::new();
    for (i, make) in ["fifo", "dir", "text", "static"].iter().enumerate() {
        let d = t.path().join(format!("bad{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let at = d.join("libdep.so");
        match *make {
            "fifo" => crate::fsutil::mkfifo(&at),
            "dir" => std::fs::create_dir(&at).unwrap(),
            "text" => std::fs::write(&at, "INPUT(-lc)\n").unwrap(),
            _ => {
                std::fs::write(d.join("m.c"), "int main(void) { return 0; }\n").unwrap();
                let run = Command::new("cc")
                    .args(["-static", "-o"])
                    .arg(&at)
                    .arg(d.join("m.c"))
                    .output()
                    .unwrap();
                assert!(run.status.success(), "{run:?}");
            }
        }
        l.push(format!("-Wl,-rpath,{}", d.display()));
        search.push(d);
    }
    l.push(format!("-Wl,-rpath,{}", good.display()));
    let main = lib(&t.path().join("m"), "libmain.so", &args(&l));
    let deps = resolve_in(&main, main.parent().unwrap(), &search, &bare()).unwrap();
    assert_eq!(found(&deps, "libdep.so"), Some(good.join("libdep.so")));
}

#[test]
fn a_loop_of_needs_ends_and_each_library_is_named_once() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("d");
    lib(&d, "liba.so", &[]);
    let mut to_a = linking(&d, "liba.so");
    to_a.push("-Wl,-rpath,$ORIGIN".into());
    lib(&d, "libb.so", &args(&to_a));
    let mut to_b = linking(&d, "libb.so");
    to_b.push("-Wl,-rpath,$ORIGIN".into());
    lib(&d, "liba.so", &args(&to_b));
    let mut l = linking(&d, "liba.so");
    l.extend(linking(&d, "libb.so"));
    l.push(format!("-Wl,-rpath,{}", d.display()));
    l.extend(["-l:libnowhere.so".to_owned(), format!("-L{}", d.display())]);
    lib(&d, "libnowhere.so", &[]);
    let main = lib(&t.path().join("m"), "libmain.so", &args(&l));
    std::fs::remove_file(d.join("libnowhere.so")).unwrap();
    let deps = resolve_in(&main, main.parent().unwrap(), &[], &bare()).unwrap();
    let names: Vec<&str> = deps.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["liba.so", "libb.so", "libnowhere.so"]);
    assert_eq!(missing(&deps), ["libnowhere.so"]);
}

#[test]
fn what_is_not_an_elf_library_is_an_error_that_names_it() {
    let t = tempfile::tempdir().unwrap();
    let text = t.path().join("libMIOpen.so");
    std::fs::write(&text, "not a library\n").unwrap();
    let err = resolve_in(&text, t.path(), &[], &bare()).unwrap_err();
    assert_eq!(
        format!("{err:#}"),
        format!(
            "cannot tell what {0} loads: {0} is not a loadable ELF file: not an ELF file",
            text.display()
        )
    );
}

#[test]
fn origin_and_the_loaders_own_tokens_expand() {
    let o = Path::new("/t/lib");
    let e = |s: &str| expand(s.as_bytes(), o).map(|p| p.to_string_lossy().into_owned());
    assert_eq!(e("$ORIGIN").as_deref(), Some("/t/lib"));
    assert_eq!(e("${ORIGIN}/../x").as_deref(), Some("/t/lib/../x"));
    assert_eq!(e("$ORIGIN:$ORIGIN").as_deref(), Some("/t/lib:/t/lib"));
    assert_eq!(e("$ORIGINAL/x").as_deref(), Some("$ORIGINAL/x"));
    assert_eq!(e("/opt/$HOME").as_deref(), Some("/opt/$HOME"));
    assert_eq!(
        e("/usr/$LIB"),
        Some(format!("/usr/{}", lib_token().unwrap()))
    );
    assert_eq!(
        e("/usr/${PLATFORM}/x"),
        Some(format!("/usr/{}/x", platform().unwrap()))
    );
    assert_eq!(
        path_list(b"$ORIGIN::/a;/b", o),
        [
            PathBuf::from("/t/lib"),
            PathBuf::new(),
            PathBuf::from("/a"),
            PathBuf::from("/b")
        ]
    );
}

/// A library a compiler loads, replaced beside it, is another file there:
/// what the diagnosis keys its cached verdicts by (issue 59's try).
#[test]
fn what_a_library_loads_is_found_and_a_replaced_one_has_a_new_stamp() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    lib(dir, "libdep.so", &[]);
    let comp = lib(
        dir,
        "libcomp.so",
        &[
            "-L",
            &dir.display().to_string(),
            "-l:libdep.so",
            "-Wl,-rpath,$ORIGIN",
        ],
    );
    let found = loaded_by(&comp).unwrap();
    assert_eq!(found, [dir.join("libdep.so").canonicalize().unwrap()]);
    let stamp = |p: &Path| crate::cache::stamp_key(&std::fs::metadata(p).unwrap());
    let before = stamp(&found[0]);
    std::fs::remove_file(&found[0]).unwrap();
    lib(dir, "libdep.so", &[]);
    assert_ne!(stamp(&found[0]), before, "a new file, a new stamp");
}
