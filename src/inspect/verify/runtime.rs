//! What verify checks by running torch: what its process maps; and how
//! every python of verify's is started.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

use super::VerifyRequest;
use crate::checksum;
use crate::elf;
use crate::inspect::checks::{CheckReport, Status};
use crate::proc;
use crate::swap::txn::Journal;
use crate::torch::Torch;

/// Read by `python -c`: which shared objects torch's process maps.
const MAPS: &str = include_str!("maps.py");

#[derive(Deserialize)]
struct Maps {
    maps: Vec<PathBuf>,
}

/// A python that imports exactly the torch in `torch_dir`: started as
/// every python the tool starts (`proc::python`: in `/`, a relative path
/// made absolute), and isolated too (`-I`: no user site, no PYTHON*
/// variables), with torch's parent dir put first on sys.path from its
/// first argument; the script's own arguments follow.
pub(super) fn python(
    req: &VerifyRequest,
    torch_dir: &Path,
    script: &str,
) -> anyhow::Result<Command> {
    let mut c = proc::python(&req.python)?;
    c.arg("-I")
        .arg("-c")
        .arg(format!(
            "import sys; sys.path.insert(0, sys.argv.pop(1))\n{script}"
        ))
        .arg(torch_dir.parent().unwrap_or(Path::new("/")));
    Ok(c)
}

pub(super) fn failed_run(out: &proc::Output, what: &str, limit: Duration) -> String {
    match out.status {
        None => format!(
            "{what} did not finish: killed after {:.1} s (limit {} s)",
            out.elapsed.as_secs_f64(),
            limit.as_secs()
        ),
        Some(s) => format!(
            "{what} failed ({s}): {}",
            out.stderr.lines().last().unwrap_or("").trim()
        ),
    }
}

/// `import torch` in a contained child, when root may run torch's code
/// (`owner::ensure_root_may_trust_torch`); None, with the runtime row
/// failed and why, when it may not or the import failed.
fn import_torch(req: &VerifyRequest, torch: &Torch, r: &mut CheckReport) -> Option<proc::Output> {
    if let Err(e) = crate::owner::ensure_root_may_trust_torch(&torch.dir) {
        let help = crate::error::help(&e).unwrap_or_default().to_owned();
        r.push_fix("runtime", Status::Fail, crate::error::chain(&e), help);
        return None;
    }
    let run = python(req, &torch.dir, MAPS).and_then(|c| proc::run_contained(c, req.timeout));
    let detail = match run {
        Ok(o) if o.status.is_some_and(|s| s.success()) => return Some(o),
        Ok(o) => failed_run(&o, "import torch", req.timeout),
        Err(e) => format!("{e:#}"),
    };
    r.push("runtime", Status::Fail, detail);
    None
}

pub(super) fn check_runtime(
    req: &VerifyRequest,
    torch: &Torch,
    install: Option<&Journal>,
    r: &mut CheckReport,
) {
    let Some(out) = import_torch(req, torch, r) else {
        return;
    };
    let maps: Maps = match serde_json::from_str(out.stdout.trim()) {
        Ok(m) => m,
        Err(e) => return r.push("runtime", Status::Fail, format!("unreadable answer: {e}")),
    };
    let mapped = |stem: &str| -> Vec<&PathBuf> {
        maps.maps
            .iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| elf::stem(n) == stem)
            })
            .collect()
    };
    let miopen = mapped("libMIOpen");
    let hip = mapped("libamdhip64");
    let mut problems = Vec::new();
    match miopen.as_slice() {
        [one] => {
            let real = one.canonicalize().unwrap_or(one.to_path_buf());
            if real != torch.target {
                problems.push(format!(
                    "the mapped libMIOpen is {}, not torch's {}",
                    one.display(),
                    torch.target.display()
                ));
            } else if let Some(j) = install {
                let md5 = checksum::md5_file(&real).unwrap_or_default();
                if md5 != j.new.md5 {
                    problems.push(format!(
                        "the mapped {} is not the patched library (MD5 {md5})",
                        one.display()
                    ));
                }
            } else {
                problems.push(format!(
                    "{} is mapped but is torch's own library",
                    one.display()
                ));
            }
        }
        [] => problems.push("no libMIOpen is mapped after import torch".to_owned()),
        many => problems.push(format!(
            "{} copies of libMIOpen are mapped: {many:?}",
            many.len()
        )),
    }
    if hip.len() != 1 {
        problems.push(format!("{} HIP runtimes are mapped: {hip:?}", hip.len()));
    }
    if problems.is_empty() {
        r.push(
            "runtime",
            Status::Ok,
            format!(
                "import torch maps the patched {} and one HIP runtime, {}",
                miopen[0].display(),
                hip[0].display()
            ),
        );
    } else {
        r.push_fix(
            "runtime",
            Status::Fail,
            problems.join("; "),
            "run `rdna1-patch install --into-torch` (it relinks to torch's runtime), then verify again",
        );
    }
}
