//! What root runs is root's to choose (issue 69): a root shell that kept
//! a user's VIRTUAL_ENV or CONDA_PREFIX (`su` without `-`, doas keepenv)
//! runs no python of theirs as root. On main (84ed257) doctor ran
//! `$VIRTUAL_ENV/bin/python` as uid 0.

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
