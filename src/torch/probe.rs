//! Whether a `--python` is a python at all, asked before it is asked about
//! torch: `/bin/ls` or `pip` given a python script answers with noise, and
//! a hung one would hold the command for the query's whole limit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use crate::error::hint;

/// How long a python may take to print one line. A python answers in
/// tens of milliseconds; one on slow network storage may take seconds, and
/// python3 at nice 19 on a 2-core machine busy compiling took over 5 s.
pub const LIMIT: Duration = Duration::from_secs(10);

const PROBE: &str = "import sys; print('rdna1-patch python', sys.version_info[0])";

pub const NAME_IT: &str = "pass the python your torch is installed in with --python (e.g. --python ~/venv/bin/python), or the package with --torch-dir";

/// Ok when `python` runs a line of python within [`LIMIT`].
pub fn is_python(python: &Path) -> Result<()> {
    let mut cmd = crate::proc::python(python)?;
    cmd.args(["-c", PROBE]);
    let out = crate::proc::run(cmd, LIMIT).map_err(unless_interrupted)?;
    let shown = python.display();
    match out.status {
        Some(s) if s.success() && out.stdout.starts_with("rdna1-patch python ") => Ok(()),
        Some(s) => Err(hint(
            format!("{shown} is not a python: it did not run a line of python given with -c ({s})"),
            NAME_IT,
        )),
        None => Err(hint(
            format!(
                "{shown} did not answer in {} s when asked to run a line of python, and was stopped",
                LIMIT.as_secs()
            ),
            format!(
                "check that `{shown} -c 'print(1)'` answers (a python on slow storage may answer once its files are cached), then run this again; or pass the package with --torch-dir"
            ),
        )),
    }
}

/// An error of running the python, with help naming `--python`; Ctrl-C's
/// is passed on as it is (exit 130, and its own help).
pub fn unless_interrupted(e: anyhow::Error) -> anyhow::Error {
    if crate::error::exit_code(&e) != crate::error::FAILED {
        return e;
    }
    match crate::owner::acting_for() {
        Some(who) => hint(
            format!("{}; python runs as {who}", crate::error::chain(&e)),
            format!("{UNDER_SUDO}; or {NAME_IT}"),
        ),
        None => hint(crate::error::chain(&e), NAME_IT),
    }
}

/// Under sudo python is the user's, run as them: what only root can read
/// is not theirs to import.
pub const UNDER_SUDO: &str = "run rdna1-patch without sudo, as the user whose python and torch these are (a venv is its owner's), or make them readable by that user";

/// `--torch-dir`, if it is a torch package: there, with a version.py.
pub(super) fn package_dir(d: &Path) -> Result<PathBuf> {
    const WHICH: &str =
        "pass the directory that `python -c 'import torch; print(torch.__path__[0])'` prints";
    if std::fs::symlink_metadata(d).is_err() {
        return Err(hint(
            format!("--torch-dir {} does not exist", d.display()),
            WHICH,
        ));
    }
    if !d.join("version.py").is_file() {
        return Err(hint(
            format!(
                "{} is not a torch package: it has no version.py",
                d.display()
            ),
            WHICH,
        ));
    }
    Ok(std::path::absolute(d)?)
}
