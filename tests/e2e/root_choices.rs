//! What root runs is root's to choose (issue 69): a root shell that kept
//! a user's VIRTUAL_ENV or CONDA_PREFIX (`su` without `-`, doas keepenv)
//! runs no python of theirs as root (on main, 84ed257, doctor ran
//! `$VIRTUAL_ENV/bin/python` as uid 0), `sudo build` runs nothing; and
//! what a user's files name reaches root's terminal escaped.

use std::os::unix::fs::PermissionsExt;

use crate::other_user::{NOBODY, chown, root_for};
use crate::support::{Run, Sandbox};

#[test]
fn a_root_shell_runs_no_python_of_a_users_active_environment() {
    if !root_for("a root shell with a user's VIRTUAL_ENV") {
        return;
    }
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        let sb = Sandbox::new();
        let env = sb.root.join("their-env");
        let bin = env.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let marker = sb.root.join("ran-as-root");
        let python = bin.join("python");
        std::fs::write(
            &python,
            format!("#!/bin/sh\nid -u > {}\nexit 1\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        for p in [&env, &bin, &python] {
            chown(p, NOBODY);
        }
        let mut c = sb.cmd();
        c.args(["doctor", "--state-dir", &sb.state()])
            .env(var, &env);
        let run = Run::from(c.output().unwrap());
        assert!(
            !marker.exists(),
            "{var}: their python ran as root:\n{}{}",
            run.stdout,
            run.stderr
        );
        let why = match var {
            "VIRTUAL_ENV" => "the active venv, $VIRTUAL_ENV",
            _ => "the active conda environment, $CONDA_PREFIX",
        };
        run.fails().error_is(&format!(
            "error: the python chosen, {} ({why}), can be changed by uid 65534 (through {}); run as root, rdna1-patch runs no python another user controls; nothing was run
help: name a python only root can change with `--python` (e.g. `--python /usr/bin/python3`), or run rdna1-patch as the user whose environment that is",
            python.display(),
            bin.display(),
        ));
    }
}

/// `sudo rdna1-patch build` runs no compiler, cmake or python as root: it
/// is refused before anything is fetched or run, its help the way to
/// build as the user and copy the prefix into place. On main the whole
/// build ran as uid 0.
#[test]
fn a_build_under_sudo_runs_nothing_as_root() {
    if !root_for("a build under sudo") {
        return;
    }
    let sb = Sandbox::new();
    let mut c = sb.cmd();
    c.args(sb.build_args(&[]));
    let run = Run::from(
        crate::other_user::as_sudo_for(&mut c, NOBODY)
            .output()
            .unwrap(),
    );
    run.fails_with(
        "error: run as root under sudo, rdna1-patch builds nothing: a build runs the compilers, cmake and python that nobody's profile, PATH and --rocm name, as root, for up to an hour; nothing was run
help: build as nobody, without sudo, into a prefix nobody owns (the default, or `--prefix ~/rdna1-patch-build`), then copy it into place as root (`sudo cp -a PREFIX /opt/NAME`; `cd /opt/NAME && md5sum -c share/rdna1-patch/MD5SUMS` checks the copy)",
    );
    assert!(
        !sb.prefix.join("lib").exists(),
        "nothing was built into {}",
        sb.prefix.display()
    );
    // Its plan, which runs nothing, is still there to read.
    let mut c = sb.cmd();
    c.args(sb.build_args(&["--dry-run"]));
    Run::from(
        crate::other_user::as_sudo_for(&mut c, NOBODY)
            .output()
            .unwrap(),
    )
    .ok();
}

/// A Tensile catalogue named with an escape sequence reaches the terminal
/// escaped (issue 69: on main doctor wrote it raw, and the terminal ran
/// it).
#[test]
fn a_catalogue_named_with_an_escape_sequence_is_shown_escaped() {
    let (sb, torch, _) = crate::rocblas_swap::sandbox("2.6.0+rocm6.4");
    let odd = "TensileLibrary_Type_\u{1b}]0;pwned\u{7}_fallback.dat";
    std::fs::copy(
        torch
            .lib
            .join("rocblas/library/TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_0_fallback.dat"),
        torch.lib.join("rocblas/library").join(odd),
    )
    .unwrap();
    let run = sb.run_with_state(&["doctor", "--detail"], &[]);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        all.contains("TensileLibrary_Type_\\u{1b}]0;pwned\\u{7}_fallback.dat"),
        "the name is shown, escaped:\n{all}"
    );
    assert!(
        !all.contains('\u{1b}'),
        "a raw escape reached the terminal:\n{all}"
    );
}
