//! `doctor`: what torch is here, which route it takes, what the GPU side
//! sees, and what that route needs: the build's rows only where the route
//! is a build (or `--all`). Only what blocks the route is a FAIL; the rest
//! is information or a warning.

use std::path::{Path, PathBuf};

use crate::builder::profile::Profile;
use crate::builder::tools;
use crate::gpu;
use crate::gpucode;
use crate::inspect::checks::{CheckReport, Status};
use crate::inspect::libraries;
use crate::plan::advice;
use crate::torch;

mod blas;
mod plan_rows;
mod toolchain;
mod torch_side;

use toolchain::{build_tools, compiler, launchers, rocm};
use torch_side::{Route, gfx_override, gpus, needs_no_sdk, torch_checks};

pub struct DoctorRequest {
    pub profile: Profile,
    pub rocm: Option<PathBuf>,
    pub work_dir: PathBuf,
    /// The user's stack: the command's one look for torch, and the
    /// diagnosis made once.
    pub stack: crate::stack::Stack,
    /// The python asked for torch and why (none with --torch-dir): the
    /// torch row says it.
    pub python: Option<crate::which_python::Chosen>,
    /// Every row, the build's too, whatever the route.
    pub all: bool,
    /// HSA_OVERRIDE_GFX_VERSION, if set.
    pub gfx_override: Option<String>,
    /// Free space a build needs, in GiB.
    pub need_gib: u64,
    /// Where install keeps its transactions: a fixed library is told
    /// from the one it replaced by them.
    pub state: Option<crate::swap::txn::StateDir>,
}

pub fn run(req: &DoctorRequest) -> CheckReport {
    let mut r = CheckReport::default();
    let side = torch_checks(req, &mut r);
    let cards = gpus(req, &mut r);
    // The answer is about this torch on these cards.
    if let Ok(t) = &req.stack.torch {
        // Read short, the rows name torch's files from its directory; the
        // torch row says where that is.
        r.short
            .push((format!("{}/", t.dir.display()), "torch/".to_owned()));
        let asked = &req.stack.asked;
        r.subject = Some(match cards.len() {
            _ if !asked.is_empty() => {
                format!("torch {} for {} (--target)", t.version, asked.join(" + "))
            }
            0 => format!("torch {}, no GPU visible", t.version),
            _ => format!("torch {} on {}", t.version, cards.join(" + ")),
        });
    }
    gfx_override(req, &cards, side.gfx101x, &mut r);
    // Every GPU library torch loads, read for the card.
    if let Ok(t) = &req.stack.torch {
        let routes = blas::routes(req, t);
        libraries::check_with(
            t,
            req.gfx_override.as_deref(),
            &req.stack.sysfs,
            &routes,
            &mut r,
        );
    }
    if side.route == Route::Build || req.all {
        build_tools(&mut r);
        compiler(req, &mut r);
        launchers(&mut r);
        rocm(req, &mut r);
        disk(req, &mut r);
        shared(&mut r);
        // No ROCm: no compiler in it, no hipcc; one cause, one fix.
        r.follows_from("rocm", &["compiler", "hipcc", "compat"]);
        if side.route == Route::InPlace {
            needs_no_sdk(&mut r);
        }
    }
    plan_rows::apply(req, &mut r);
    r
}

/// The shared route: a build compiles for 40-75 minutes; a build someone
/// published, signed by a key the user trusts, installs in seconds.
fn shared(r: &mut CheckReport) {
    let config = match crate::share::config::Config::load() {
        Ok(c) => c,
        Err(e) => return r.push_error("shared", Status::Warn, &e),
    };
    let (keys, caches) = (config.trusted_keys.len(), config.caches.len());
    if keys == 0 {
        return r.push_fix(
            "shared",
            Status::Ok,
            format!(
                "no trusted keys in {}: every build compiles here (40-75 minutes, a ROCm SDK)",
                config.describe()
            ),
            "to install a build a maintainer published instead, in seconds: `rdna1-patch trust KEY`, then `rdna1-patch build --from oci://HOST/REPO`",
        );
    }
    r.push(
        "shared",
        Status::Ok,
        format!(
            "{keys} trusted key(s), {caches} cache(s) in {}: `build` pulls a signed build of its profile from a cache or --from when one is there",
            config.describe()
        ),
    );
}

fn disk(req: &DoctorRequest, r: &mut CheckReport) {
    let mut dir: &Path = &req.work_dir;
    while !dir.exists() {
        dir = dir.parent().unwrap_or(Path::new("/"));
    }
    match crate::fsutil::free_bytes(dir) {
        None => r.push(
            "disk",
            Status::Warn,
            format!("cannot read the free space of {}", dir.display()),
        ),
        Some(free) => {
            let gib = free as f64 / (1u64 << 30) as f64;
            let detail = format!(
                "{gib:.1} GiB free at {} (a MIOpen build needs about {} GiB)",
                dir.display(),
                req.need_gib
            );
            if u128::from(free) >= u128::from(req.need_gib) << 30 {
                r.push("disk", Status::Ok, detail);
            } else {
                r.push_fix(
                    "disk",
                    Status::Fail,
                    detail,
                    "free space there, or pass --work-dir on a disk with room",
                );
            }
        }
    }
}
