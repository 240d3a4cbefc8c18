//! `cargo xtask smoke-cpu`: `verify --smoke`'s battery, the real script
//! and the real binary, on PyPI's real torch with the device switched to
//! the CPU (RDNA1_PATCH_SMOKE_DEVICE=cpu): the comparisons and tolerances
//! proved on real torch, where no GPU is. Not part of `ci`: PyPI serves no
//! CPU-only torch for Linux x86_64, and its torch does not import without
//! the NVIDIA libraries it names, so the venv is a 2.8 GB download.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The torch the proof ran with (docs/hardware.md records its numbers).
const TORCH: &str = "2.15.0";

/// The battery's cases (src/inspect/verify/cases.rs), battery 2: a report
/// with fewer ran less than the whole battery.
const CASES: usize = 47;

pub fn smoke_cpu(root: &Path, args: &[String]) -> Result<()> {
    let torch = match args {
        [] => TORCH.to_owned(),
        [flag, v] if flag == "--torch" => v.clone(),
        _ => bail!("cargo xtask smoke-cpu takes [--torch VERSION] (default {TORCH})"),
    };
    let dir = root.join("target/smoke-cpu");
    let python = venv(&dir, &torch)?;
    eprintln!("smoke-cpu: building rdna1-patch (cargo shows its progress)");
    crate::run(crate::cargo().args(["build", "--bin", "rdna1-patch"]))?;
    let scratch = tempfile::tempdir()?;
    // No prefix and no install: the battery runs on the torch --python
    // names; the prefix's FAIL is expected and not this task's business.
    let out = Command::new(root.join("target/debug/rdna1-patch"))
        .args([
            "verify",
            "--smoke",
            "--json",
            "--timeout",
            "300",
            "--python",
        ])
        .arg(&python)
        .arg("--prefix")
        .arg(scratch.path().join("no-prefix"))
        .arg("--state-dir")
        .arg(scratch.path().join("state"))
        .env("RDNA1_PATCH_SMOKE_DEVICE", "cpu")
        .env(rdna1_testkit::SYSFS_ENV, rdna1_testkit::gpus("no-gpu"))
        .output()
        .context("cannot run rdna1-patch")?;
    let text = String::from_utf8_lossy(&out.stdout);
    std::fs::write(dir.join("report.json"), &*text)?;
    let doc: serde_json::Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "verify --json printed no JSON:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        root.join("src/inspect/verify/verify.schema.json"),
    )?)?;
    let validator =
        jsonschema::validator_for(&schema).context("src/inspect/verify/verify.schema.json")?;
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    if !errors.is_empty() {
        bail!(
            "the report does not validate against src/inspect/verify/verify.schema.json: {errors:#?}"
        );
    }
    summary(&doc, &dir)
}

/// target/smoke-cpu/venv with torch VERSION from PyPI; its python.
fn venv(dir: &Path, torch: &str) -> Result<std::path::PathBuf> {
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        std::fs::create_dir_all(dir)?;
        crate::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    let has = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('torch'))",
        ])
        .output()?;
    if String::from_utf8_lossy(&has.stdout).trim() != torch {
        eprintln!(
            "smoke-cpu: installing torch {torch} from PyPI (with its NVIDIA libraries: about 2.8 GB, 5.3 GB installed)"
        );
        crate::run(
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--progress-bar",
                    "off",
                    "--disable-pip-version-check",
                ])
                .arg(format!("torch=={torch}")),
        )?;
    }
    Ok(python)
}

/// One line per case: its error, its tolerance, the margin between them,
/// its times; then the worst of each dtype. Fails unless every case is ok.
fn summary(doc: &serde_json::Value, dir: &Path) -> Result<()> {
    let smoke = &doc["smoke"];
    let place = &smoke["where"];
    println!(
        "torch {} on device {:?} (the battery's device: {}), battery {}",
        place["torch"].as_str().unwrap_or("?"),
        place["device"].as_str().unwrap_or("?"),
        smoke["device"].as_str().unwrap_or("?"),
        smoke["battery"]
    );
    let cases = smoke["cases"]
        .as_array()
        .context("no cases in the report")?;
    if smoke["status"] != "complete" {
        bail!("the battery's status is {}, not complete", smoke["status"]);
    }
    if cases.len() != CASES {
        bail!(
            "the report has {} cases, the battery {CASES}: update CASES in xtask/src/smoke_cpu.rs with the battery",
            cases.len()
        );
    }
    let mut worst: Vec<(String, f64, String)> = Vec::new();
    let mut bad = Vec::new();
    for c in cases {
        let name = c["name"].as_str().unwrap_or("?");
        let rel = c["max_rel"].as_f64();
        let tol = c["tolerance"].as_f64().unwrap_or(0.0);
        let secs = c["seconds"].as_array().map(|s| {
            format!(
                "{:.3} s, {:.3} s",
                s[0].as_f64().unwrap_or(0.0),
                s[1].as_f64().unwrap_or(0.0)
            )
        });
        let margin = match rel {
            Some(r) if r > 0.0 && tol > 0.0 => format!("{:.0}x under", tol / r),
            Some(_) if tol == 0.0 => "exact".to_owned(),
            Some(_) => "0 error".to_owned(),
            None => "-".to_owned(),
        };
        println!(
            "{:<4}  {name:<24}  rel {:<9} tol {:<6} {margin:<12} ({})  {}",
            c["status"].as_str().unwrap_or("?"),
            rel.map_or("-".to_owned(), |r| format!("{r:.2e}")),
            format!("{tol:e}"),
            c["outputs"]
                .as_array()
                .and_then(|o| {
                    // The first of the worst, as verify names it.
                    o.iter().reduce(|w, x| {
                        if x["max_rel"].as_f64() > w["max_rel"].as_f64() {
                            x
                        } else {
                            w
                        }
                    })
                })
                .and_then(|o| o["name"].as_str())
                .unwrap_or("-"),
            secs.unwrap_or_default()
        );
        if c["outcome"] != "ok" {
            bad.push(format!("{name}: {}", c["detail"].as_str().unwrap_or("?")));
        }
        let dtype = c["dtype"].as_str().unwrap_or("?").to_owned();
        if let Some(r) = rel {
            match worst.iter_mut().find(|w| w.0 == dtype) {
                Some(w) if w.1 >= r => {}
                Some(w) => *w = (dtype, r, name.to_owned()),
                None => worst.push((dtype, r, name.to_owned())),
            }
        }
    }
    for (dtype, rel, name) in &worst {
        println!("largest {dtype} error: rel {rel:.2e} ({name})");
    }
    println!(
        "{} of {} cases ok; the report: {}",
        cases.len() - bad.len(),
        cases.len(),
        dir.join("report.json").display()
    );
    if !bad.is_empty() {
        bail!(
            "{} case(s) not ok on the CPU:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }
    Ok(())
}
