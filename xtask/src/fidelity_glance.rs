//! The one-glance check of `cargo xtask fidelity` (issue 64 part 4):
//! every line doctor, verify and status print over Debian's real
//! libraries (libMIOpen, and the librocblas with its Tensile directory it
//! loads) is at most 160 characters without `--detail`, as the e2e test
//! `glance` holds them to over fixtures of the same shape.

use std::path::Path;

/// The longest line a person reads (`GLANCE` in src/inspect/glance.rs).
pub const GLANCE: usize = 160;

/// Each line of `text` over [`GLANCE`] characters (not bytes: `…` is
/// one) besides its commands, said with its number, its whole length
/// and its start.
pub fn long_lines(text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let n = l.chars().count();
            (rdna1_testkit::besides_commands(l) > GLANCE).then(|| {
                let start: String = l.chars().take(48).collect();
                format!("line {}: {n} characters: `{start}...`", i + 1)
            })
        })
        .collect()
}

/// The failures of the reports `names` in `dir` (each the stdout and
/// stderr of one run): a line over [`GLANCE`], or a report `needed`
/// names that was not written.
pub fn check(dir: &Path, names: &[&str], needed: &[&str]) -> Vec<String> {
    let mut failures = Vec::new();
    for name in names {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(text) => failures.extend(
                long_lines(&text)
                    .into_iter()
                    .map(|l| format!("{name} {l} (over {GLANCE})")),
            ),
            Err(_) if needed.contains(name) => {
                failures.push(format!("{name} was not written: the run before it stopped"))
            }
            Err(_) => {}
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report as doctor prints it over Debian's librocblas: its rows
    /// cut to 160 characters pass; the 4.4 KB tensile row of 05ebd98
    /// (every catalogue by name) fails, named by its line.
    #[test]
    fn a_row_over_160_characters_is_named_and_160_pass() {
        let at_160 = format!("FAIL  tensile   {} …", "x".repeat(GLANCE - 18));
        assert_eq!(at_160.chars().count(), GLANCE);
        let catalogues: Vec<String> = (0..54)
            .map(|i| {
                format!("TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_{i}_fallback.dat")
            })
            .collect();
        let old = format!(
            "FAIL  tensile   rocBLAS's Tensile directory /usr/lib/x86_64-linux-gnu/rocblas/6.4.3/library: 54 catalogue(s), 10 code-object file(s); for gfx1012: 0 code-object file(s), catalogue(s) {}: no kernels for gfx1012",
            catalogues.join(", ")
        );
        let report = format!(
            "verdict: torch 2.7.0+rocm6.4.3 on gfx1012: 1 problem to fix\n{at_160}\n{old}\n"
        );
        let long = long_lines(&report);
        assert_eq!(long.len(), 1, "{long:?}");
        assert!(
            long[0].starts_with(&format!(
                "line 3: {} characters: `FAIL  tensile   rocBLAS's Tensile directory /usr",
                old.chars().count()
            )),
            "{long:?}"
        );
        assert!(long_lines(&format!("{at_160}\n")).is_empty());
        // A command is copied whole: a row long only by its command fits.
        let command = format!(
            "ok    route     {} `rdna1-patch install --into-torch --torch-dir /fid/rocblas/torch/site/torch --state-dir /fid/rocblas/torch/state` …",
            "y".repeat(100)
        );
        assert!(command.chars().count() > GLANCE);
        assert!(long_lines(&command).is_empty(), "{command}");
        assert_eq!(
            long_lines(&format!("{command} {}", "z".repeat(50))).len(),
            1
        );
    }

    /// Reports read from a results dir: a long line fails, a missing
    /// report fails only where it was needed.
    #[test]
    fn the_check_reads_the_reports_and_names_the_missing_ones() {
        let dir = std::env::temp_dir().join(format!("glance-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("doctor.txt"), "ok    torch     fine\n").unwrap();
        std::fs::write(
            dir.join("status.txt"),
            format!("{}\n", "y".repeat(GLANCE + 1)),
        )
        .unwrap();
        let failures = check(
            &dir,
            &[
                "doctor.txt",
                "status.txt",
                "compile-gfx1010.log",
                "doctor-fixed.txt",
            ],
            &["doctor.txt", "doctor-fixed.txt"],
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            failures,
            [
                format!(
                    "status.txt line 1: 161 characters: `{}...` (over 160)",
                    "y".repeat(48)
                ),
                "doctor-fixed.txt was not written: the run before it stopped".to_owned(),
            ]
        );
    }
}
