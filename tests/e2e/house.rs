//! The shape of the source: every `crate::` import runs down the flow, no
//! modules import each other and no folder imports one that imports it,
//! read from the files themselves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module's layer: a module may import its own layer and
/// those below, never above. The foundation (0) is what several wings read.
fn layer(module: &str) -> usize {
    let top = module.split("::").next().unwrap();
    match top {
        // The object every flow shares: written by builds, pulls and the
        // in-place fix, read by publish, the swap and verify.
        "prefix" => 1,
        // Shared builds: publish and pull a prefix; a build may pull.
        "share" => 2,
        "builder" | "inplace" => 3,
        // What fails in the user's stack: read by install, verify, doctor.
        // The plan reads the stack and the diagnosis; the swap's and
        // inspect's advice read the plan.
        "swap" | "diagnosis" | "stack" | "plan" => 4,
        "inspect" | "select" | "clean" => 5,
        "commands" => 6,
        "cli" | "main" | "lib" => 7,
        _ => 0,
    }
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; each with its text, tests
/// left out.
fn modules() -> BTreeMap<String, String> {
    modules_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// [`modules`] of the crate whose sources are `src`.
fn modules_in(src: &Path) -> BTreeMap<String, String> {
    let src = src.to_owned();
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(&src).unwrap().with_extension("");
                let mut name = rel.to_str().unwrap().replace('/', "::");
                if let Some(parent) = name.strip_suffix("::mod") {
                    name = parent.to_owned();
                }
                let text = std::fs::read_to_string(&p).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap().to_owned();
                out.insert(name, code);
            }
        }
    }
    out
}

/// What each module imports: `crate::x::y` and `super::x`, resolved to the
/// longest module path that exists.
fn imports(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
        (1..=parts.len())
            .rev()
            .map(|n| parts[..n].join("::"))
            .find(|c| mods.contains_key(c))
    };
    let mut graph = BTreeMap::new();
    for (name, code) in mods {
        let mut to = BTreeSet::new();
        let parent = name.rsplit_once("::").map_or("", |(p, _)| p);
        for (prefix, base) in [("crate::", String::new()), ("super::", parent.to_owned())] {
            for (i, _) in code.match_indices(prefix) {
                let rest: String = code[i + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let full = if base.is_empty() {
                    rest
                } else {
                    format!("{base}::{rest}")
                };
                if let Some(m) = resolve(&full)
                    && m != *name
                    && !name.starts_with(&format!("{m}::"))
                {
                    to.insert(m);
                }
            }
        }
        graph.insert(name.clone(), to);
    }
    graph
}

#[test]
fn every_import_runs_down_and_no_modules_or_folders_import_each_other() {
    let mods = modules();
    for wing in [
        "prefix",
        "share",
        "share::oci",
        "builder::pipeline",
        "swap::txn::journal",
    ] {
        assert!(mods.contains_key(wing), "no module {wing}");
    }
    let graph = imports(&mods);
    let mut upward = Vec::new();
    for (from, tos) in &graph {
        for to in tos {
            if layer(to) > layer(from) {
                upward.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports that run up: {upward:#?}");
    let loops = loops(&graph);
    assert!(loops.is_empty(), "modules on an import loop: {loops:?}");
    let folders = folder_loops(&graph);
    assert!(
        folders.is_empty(),
        "folders that import a folder importing them: {folders:#?}"
    );
}

/// The imports between folders that lie on a loop. A folder is a module
/// with all the modules under it (`swap` is src/swap.rs or
/// src/swap/mod.rs and everything in src/swap/). An import from `a` to
/// `b` that are not one inside the other runs between the two folders
/// just below where their paths part (`swap::txn::journal -> torch` runs
/// from `swap` to `torch`; `swap::txn::x -> swap::relink` from
/// `swap::txn` to `swap::relink`). No folder imports one that imports
/// it, directly or through others beside them: that is the layering
/// inside a layer, where the layers allow either way.
fn folder_loops(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    // (folder, folder) -> the first module import that makes that edge.
    let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
    for (from, tos) in graph {
        let a: Vec<&str> = from.split("::").collect();
        for to in tos {
            let b: Vec<&str> = to.split("::").collect();
            let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            if common >= a.len() || common >= b.len() {
                continue;
            }
            let key = (a[..=common].join("::"), b[..=common].join("::"));
            edges
                .entry(key)
                .or_insert_with(|| format!("{from} -> {to}"));
        }
    }
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (x, y) in edges.keys() {
        next.entry(x).or_default().push(y);
    }
    let reaches = |from: &str, goal: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(f) = todo.pop() {
            if f == goal {
                return true;
            }
            if seen.insert(f) {
                todo.extend(next.get(f).into_iter().flatten());
            }
        }
        false
    };
    edges
        .iter()
        .filter(|((x, y), _)| reaches(y, x))
        .map(|((x, y), why)| format!("{x} -> {y} ({why})"))
        .collect()
}

/// The tasks and the test kit are code too: no module or folder of theirs
/// reaches itself through its imports.
#[test]
fn no_import_loop_in_xtask_or_the_test_kit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in ["xtask/src", "tests/kit/src"] {
        let mods = modules_in(&root.join(src));
        assert!(mods.len() > 1 || src == "tests/kit/src", "{src}: {mods:?}");
        let graph = imports(&mods);
        let loops = loops(&graph);
        assert!(
            loops.is_empty(),
            "{src}: modules on an import loop: {loops:?}"
        );
        let folders = folder_loops(&graph);
        assert!(
            folders.is_empty(),
            "{src}: folders that import a folder importing them: {folders:#?}"
        );
    }
}

/// The modules that reach themselves through their imports.
fn loops(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut loops = Vec::new();
    for start in graph.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = graph[start].iter().collect();
        while let Some(m) = stack.pop() {
            if m == start {
                loops.push(start.clone());
                break;
            }
            if seen.insert(m.clone()) {
                stack.extend(graph.get(m).into_iter().flatten());
            }
        }
    }
    loops
}

/// Every python the tool starts goes through `proc::python`, which keeps
/// the current directory off its `sys.path` (SECURITY.md).
#[test]
fn every_python_is_started_isolated() {
    let mut found = Vec::new();
    for (name, code) in modules() {
        for line in code.lines() {
            let l = line.to_lowercase();
            if l.contains("command::new(") && l.contains("python") && name != "proc" {
                found.push(format!("{name}: {}", line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "pythons started without proc::python: {found:#?}"
    );
}

/// Nothing is resolved by running it: no program in src/ is `ldd`, by name
/// or by path, nor the loader's trace mode that `ldd` starts (the loader,
/// run on a file, loads the library its DT_AUDIT names and runs it).
/// `swap::linker` reads the files instead. Tests in src/ count too: `ldd`
/// runs only in tests/, on this machine's own programs.
#[test]
fn no_program_is_run_to_learn_what_a_library_loads() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    let mut dirs = vec![src.clone()];
    let mut read = 0;
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            read += 1;
            for (n, line) in text.lines().enumerate() {
                if line.contains("ldd\"") || line.contains("LD_TRACE_LOADED_OBJECTS") {
                    let at = p.strip_prefix(&src).unwrap().display().to_string();
                    offenders.push(format!("src/{at}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(read > 50, "read {read} files of {}", src.display());
    assert!(offenders.is_empty(), "{offenders:#?}");
}

/// What changes a file by its name (a chmod, a chown, a create, an open
/// for writing): each such call in `src/` outside `fsutil::fd`, which
/// makes every change through a directory held open and, as root in
/// another user's directory, as that user (issue 59: root's chmod of a
/// temp file by name changed whatever a symlink put there pointed to).
const BY_PATH: &[&str] = &[
    "fs::set_permissions(",
    "fs::chown(",
    "lchown(",
    "utimensat(",
    "set_file_times(",
    "File::create(",
    "fs::write(",
    "fs::copy(",
    ".create(true)",
    ".create_new(true)",
    ".append(true)",
    ".write(true)",
    "tempfile_in(",
    "tempdir_in(",
    ".tempfile()",
    "hard_link(",
    "fs::symlink(",
    "fs::create_dir(",
    "fs::create_dir_all(",
    "DirBuilder::new(",
    // A directory opened by path follows every symlink on the way (issue
    // 69): `fd::Dir::open` walks one component at a time instead.
    "O_DIRECTORY",
    "fs::rename(",
    "renameat2(libc::AT_FDCWD",
    "linkat(libc::AT_FDCWD",
    "remove_dir_all(",
    "fs::remove_dir(",
];

/// The calls by name that stay, each with why it cannot let a user steer
/// root: `file: what the line holds` and the reason.
const BY_PATH_ALLOWED: &[(&str, &str, &str)] = &[
    (
        "comgr::child",
        ".tempdir_in(&base)",
        "the compile's own new directory, made by tempfile (mkdir of a fresh random name) in the temp dir or sticky /tmp, where no one else can move an entry of ours",
    ),
    (
        "comgr::child",
        "std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))",
        "that directory, just made in sticky /tmp (no one else can rename it), handed to sudo's user before the child drops to them",
    ),
    (
        "fsutil",
        "tempfile::tempfile_in(dir)",
        "a probe of whether a directory is writable: an unnamed file (O_TMPFILE), gone at once, with no name to swap",
    ),
    (
        "share::oci",
        ".tempfile_in(super::scratch()?)?",
        "publish's scratch file, made O_EXCL in share::scratch, which as root is a cache dir only root can write, and written only through its handle",
    ),
    (
        "share::publish",
        ".tempfile_in(scratch()?)?",
        "the packed layer, made O_EXCL in share::scratch (as root, only root can write there) and written through its handle",
    ),
    (
        "share::sign",
        ".tempdir_in(scratch()?)?",
        "a 0700 directory of this run's in share::scratch (as root, only root can write there), for minisign's input and output",
    ),
    (
        "share::sign",
        "std::fs::write(&file, data)?",
        "inside that 0700 directory of this run's, which no one else can enter",
    ),
    (
        "fsutil",
        ".custom_flags(libc::O_DIRECTORY)",
        "try_lock_dir and lock_dir: a directory opened only to flock it, which changes nothing on disk",
    ),
    (
        "fsutil",
        "std::fs::rename(dir, &aside)",
        "race_point, only in a test build (feature failpoints): the tests' stand-in for a user swapping their own directory",
    ),
    (
        "fsutil",
        "std::os::unix::fs::symlink(to, dir)",
        "race_point, only in a test build (feature failpoints): the tests' stand-in for a user swapping their own directory",
    ),
    (
        "share",
        "let _ = std::fs::remove_dir_all(e.path());",
        "a pull's staging dir of a process that is gone, in the tool's own cache (as root, a cache dir only root can write)",
    ),
    (
        "share::pull",
        "let _ = std::fs::remove_dir_all(&staging);",
        "the pull's own staging dir in the tool's cache (as root, a cache dir only root can write)",
    ),
    (
        "inplace",
        "let _ = std::fs::remove_dir_all(&staging);",
        "the in-place fix's staging dir, made by this run in the tool's cache (as root, only root can write there)",
    ),
    (
        "builder::source::tarball",
        "std::fs::rename(&unpacked, req.src)",
        "the build's own work dir, which a build under sudo does not share with another user (SECURITY.md: build)",
    ),
    (
        "builder::pipeline::install",
        "let _ = std::fs::remove_dir(&self.prefix);",
        "an empty prefix this build made and failed to fill: rmdir removes only an empty directory, never a symlink's target",
    ),
    (
        "interrupt",
        "let _ = std::fs::remove_dir_all(dir);",
        "the idle compile children's own temp directories, removed as their TempDir's drop would when a signal ends the run at once: std's remove_dir_all removes a symlink, never follows one",
    ),
    (
        "tally",
        "std::fs::write(path, lines())",
        "only in a test build (feature failpoints), to the file a test names in RDNA1_PATCH_TALLY",
    ),
];

#[test]
fn files_are_changed_by_name_only_through_a_directory_held_open() {
    let mut found = Vec::new();
    for (name, code) in modules() {
        // The fd and walk modules themselves, and modules of tests (`x::tests`).
        if name == "fsutil::fd"
            || name == "fsutil::walk"
            || name
                .rsplit("::")
                .next()
                .is_some_and(|l| l.ends_with("tests"))
        {
            continue;
        }
        for line in code.lines() {
            let t = line.trim();
            if t.starts_with("//") || t.starts_with("use ") {
                continue;
            }
            for pat in BY_PATH {
                let allowed = BY_PATH_ALLOWED
                    .iter()
                    .any(|(m, holds, _)| *m == name && t.contains(holds));
                if t.contains(pat) && !allowed {
                    found.push(format!("{name}: {t}"));
                    break;
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "calls that change a file by its name outside fsutil::fd (move them there, or allow one with its reason): {found:#?}"
    );
    // Each allowance still stands for a line that is there.
    let mods = modules();
    for (m, holds, why) in BY_PATH_ALLOWED {
        assert!(!why.is_empty(), "{m}: an allowance needs its reason");
        assert!(
            mods.get(*m).is_some_and(|c| c.contains(holds)),
            "{m} no longer holds `{holds}`: drop the allowance"
        );
    }
}

/// A command printed with a value in it (a path, a profile, an id) is
/// rendered by src/shell.rs, which quotes each word and says the tool as
/// this run was started: no backticked `rm {}`, `mv {0} {0}.damaged` or
/// `rdna1-patch build {component}` made by `format!` anywhere else.
#[test]
fn every_printed_command_with_a_value_goes_through_the_renderer() {
    const PROGRAMS: [&str; 9] = [
        "rm",
        "mv",
        "cp",
        "chmod",
        "chown",
        "sudo",
        "ls",
        "getfacl",
        "rdna1-patch",
    ];
    let mut found = Vec::new();
    for (name, code) in modules() {
        if name == "shell" {
            continue;
        }
        for line in code.lines() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for span in line.split('`').skip(1).step_by(2) {
                let program = span.split_whitespace().next().unwrap_or_default();
                if PROGRAMS.contains(&program) && span.contains('{') {
                    found.push(format!("{name}: `{span}`"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "commands made by hand, not by crate::shell: {found:#?}"
    );
}

/// No module but the plan decides what the user should do next (issue 71):
/// the line that gets TheRock's torch (its words in src/torch/get.rs) and
/// a step's command (`plan::Cmd`) are built in src/plan* alone; every
/// other module asks the plan (`plan::torch_line`, `plan::miopen_breaks`, its
/// steps). torch.rs, below the plan, names the line in the help for a
/// torch a package owns.
#[test]
fn only_the_plan_builds_a_next_steps_command() {
    const BUILDERS: [&str; 7] = [
        "requirements(",
        "index_args(",
        "commands(&",
        "native_torch(",
        "Cmd::new(",
        "Cmd::tool(",
        "Cmd {",
    ];
    let allowed = |module: &str, builder: &str| {
        module == "plan"
            || module.starts_with("plan::")
            || module == "torch::get"
            || (module == "torch" && builder == "native_torch(")
    };
    let mut found = Vec::new();
    for (name, code) in modules() {
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            // A builder's name as a word: `besides_commands(&` is not `commands(&`.
            let called = |b: &str| {
                line.match_indices(b).any(|(i, _)| {
                    !line[..i]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
            };
            for b in BUILDERS.iter().filter(|b| called(b)) {
                if !allowed(&name, b) {
                    found.push(format!("{name}: {}", line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a next step's command built outside the plan: {found:#?}"
    );
    // The allowance is still used.
    assert!(modules()["torch"].contains("native_torch("));
}

/// The plan's advice is worded in src/plan* alone (issue 71): the
/// in-place fix for failing batch-norm kernels, the torch where every fix
/// is inert, the override to unset where it alone makes the fix inert and
/// torch-gpu's next step are asked of `plan::helps`, never said by a row.
#[test]
fn only_the_plan_words_its_advice() {
    const WORDS: [&str; 5] = [
        "install --into-torch` fixes {",
        "{INSTALL}",
        "for the fix to act",
        "needs no override: `unset",
        "everything: torch has no code for",
    ];
    let mut found = Vec::new();
    for (name, code) in modules() {
        if name == "plan" || name.starts_with("plan::") {
            continue;
        }
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            if WORDS.iter().any(|w| line.contains(w)) {
                found.push(format!("{name}: {}", line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the plan's advice worded outside the plan: {found:#?}"
    );
    // The plan words them.
    assert!(modules()["plan::helps"].contains("for the fix to act"));
}
