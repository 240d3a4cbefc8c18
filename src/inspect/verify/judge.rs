//! A case's class (docs/rows.md): its answer against the tolerances, or
//! how its child ended: no code for the chip, a crash, a hang.

use std::time::Duration;

use serde::Deserialize;

use super::battery::{CaseResult, Outcome, OutputError, RaisedBy};
use super::cases::{Case, tolerance};

/// What smoke.py printed for a case that ran to the end.
#[derive(Deserialize)]
pub struct Answer {
    pub outputs: Vec<Measured>,
    pub seconds: [f64; 2],
}

#[derive(Deserialize)]
pub struct Measured {
    pub name: String,
    pub abs: Option<f64>,
    pub scale: f64,
    #[serde(default)]
    pub exact: bool,
    pub note: Option<String>,
}

/// The line smoke.py writes on stderr before it dies of an exception: the
/// GPU libraries the process had mapped, as JSON.
pub const MAPS_LINE: &str = "rdna1-patch smoke maps: ";

/// What the runtime and torch say when a library has no code object for
/// the chip (HIP's hipErrorInvalidDeviceFunction and
/// hipErrorNoBinaryForGpu, in torch's and the runtime's words), and
/// rocBLAS when its Tensile library has no file for the chip (`rocBLAS
/// error: Cannot read …/TensileLibrary.dat: No such file or directory`,
/// ROCm/rocBLAS#1339, before it aborts).
const NO_CODE: [&str; 5] = [
    "invalid device function",
    "no kernel image is available",
    "hipErrorNoBinaryForGpu",
    "Unable to find code object",
    "/TensileLibrary",
];

/// The libraries an error may name, and the file each maps as.
const LIBRARIES: [(&str, &str); 11] = [
    ("MIOpen", "libMIOpen"),
    ("hipBLASLt", "libhipblaslt"),
    ("rocBLAS", "librocblas"),
    ("hipBLAS", "libhipblas"),
    ("rocSOLVER", "librocsolver"),
    ("hipSOLVER", "libhipsolver"),
    ("rocSPARSE", "librocsparse"),
    ("hipSPARSE", "libhipsparse"),
    ("rocRAND", "librocrand"),
    ("rocFFT", "librocfft"),
    ("aotriton", "libaotriton"),
];

/// The file a case's own library maps as: torch's own kernels (hipcub's
/// sorts and scans are compiled into them) live in libtorch_hip.so.
fn file_of(library: &str) -> &'static str {
    LIBRARIES
        .iter()
        .find(|(name, _)| *name == library)
        .map_or("libtorch_hip", |(_, file)| file)
}

pub fn blank(case: &Case, outcome: Outcome, detail: String) -> CaseResult {
    CaseResult {
        name: case.name.clone(),
        library: case.library,
        op: case.op,
        dtype: case.dtype,
        layout: case.layout,
        shape: case.shape.clone(),
        status: outcome.status(),
        outcome,
        detail,
        tolerance: tolerance(case.dtype),
        raised_by: None,
        max_abs: None,
        max_rel: None,
        outputs: Vec::new(),
        seconds: None,
        elapsed: 0.0,
        solvers: Vec::new(),
        commands: Vec::new(),
    }
}

/// The case's outputs against its tolerance (an exact output against 0):
/// the worst output over its tolerance decides, else the worst.
pub fn judged(case: &Case, a: Answer) -> CaseResult {
    let tol = tolerance(case.dtype);
    let outputs: Vec<OutputError> = a
        .outputs
        .into_iter()
        .map(|m| OutputError {
            max_rel: m.abs.map(|e| if m.scale > 0.0 { e / m.scale } else { e }),
            max_abs: m.abs,
            scale: m.scale,
            exact: m.exact,
            note: m.note,
            name: m.name,
        })
        .collect();
    let allowed = |o: &OutputError| if o.exact { 0.0 } else { tol };
    let broken = outputs.iter().find(|o| o.max_abs.is_none());
    // The worst of those over their tolerance (the first of equals).
    let over = outputs
        .iter()
        .filter(|o| o.max_rel.is_some_and(|r| r > allowed(o)))
        .fold(None::<&OutputError>, |w, o| match w {
            Some(w) if w.max_rel >= o.max_rel => Some(w),
            _ => Some(o),
        });
    // The first of the worst: the outputs come in the order the case made them.
    let worst = over.or_else(|| {
        outputs
            .iter()
            .fold(None::<&OutputError>, |w, o| match (w, o.max_rel) {
                (Some(w), Some(r)) if w.max_rel.is_some_and(|m| m >= r) => Some(w),
                (w, None) => w,
                (_, Some(_)) => Some(o),
            })
    });
    let measured = |w: &OutputError| {
        format!(
            "max rel {:.1e}, abs {:.1e} ({})",
            w.max_rel.unwrap_or(0.0),
            w.max_abs.unwrap_or(0.0),
            w.name
        )
    };
    let (outcome, detail) = match (broken, over, worst) {
        (Some(b), _, _) => (
            Outcome::Wrong,
            format!(
                "wrong: {} in {}",
                b.note.as_deref().unwrap_or("no value"),
                b.name
            ),
        ),
        (None, Some(o), _) => (
            Outcome::Wrong,
            match allowed(o) {
                0.0 => format!("wrong: {}, where it must be exact", measured(o)),
                t => format!("wrong: {}, over the tolerance {t:e}", measured(o)),
            },
        ),
        (None, None, Some(w)) => (
            Outcome::Ok,
            match tol {
                0.0 => format!("{}, exact", measured(w)),
                t if outputs.iter().any(|o| o.exact) => {
                    format!("{}, within {t:e}; integers and text exact", measured(w))
                }
                t => format!("{}, within {t:e}", measured(w)),
            },
        ),
        (None, None, None) => (Outcome::Wrong, "wrong: the case made no output".to_owned()),
    };
    let mut c = blank(case, outcome, detail);
    c.max_abs = worst.and_then(|w| w.max_abs);
    c.max_rel = worst.and_then(|w| w.max_rel);
    c.seconds = Some(a.seconds);
    c.outputs = outputs;
    c
}

/// A child that ended without an answer: `no-code` when its error says
/// the chip has no code (with the library, from the error's text or the
/// maps smoke.py wrote), else `crash`.
pub fn died(case: &Case, status: &std::process::ExitStatus, stderr: &str) -> CaseResult {
    let said = stderr
        .lines()
        .map(str::trim)
        .find(|l| NO_CODE.iter().any(|p| l.contains(p)));
    let Some(said) = said else {
        return blank(
            case,
            Outcome::Crash,
            format!("crash ({}): {}", how_it_ended(status), last_words(stderr)),
        );
    };
    let said = said.strip_prefix("RuntimeError: ").unwrap_or(said);
    let raised = raised_by(case, stderr);
    let by = match &raised {
        Some(RaisedBy {
            library,
            from: "error",
            ..
        }) => format!(" (raised by {library}, as the error says)"),
        Some(RaisedBy {
            library,
            path: Some(p),
            ..
        }) => format!(" (in {library}, mapped from {p}: the case's library)"),
        _ => String::new(),
    };
    let mut c = blank(
        case,
        Outcome::NoCode,
        format!("no code for the chip: {said}{by}"),
    );
    c.raised_by = raised;
    c
}

/// The library named by the error's text, or else the case's own
/// library as the process mapped it.
fn raised_by(case: &Case, stderr: &str) -> Option<RaisedBy> {
    let text: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("MIOpen(") && !l.starts_with(MAPS_LINE))
        .collect();
    let text = text.join("\n");
    if let Some((name, _)) = LIBRARIES.iter().find(|(name, _)| {
        text.contains(&format!("{name} error")) || text.contains(&format!("{name}:"))
    }) {
        return Some(RaisedBy {
            library: (*name).to_owned(),
            path: None,
            from: "error",
        });
    }
    let maps: Vec<String> = stderr
        .lines()
        .find_map(|l| l.strip_prefix(MAPS_LINE))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default();
    let file = file_of(case.library);
    maps.into_iter()
        .find(|p| {
            std::path::Path::new(p)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(file))
        })
        .map(|p| RaisedBy {
            library: if file == "libtorch_hip" {
                "torch's own kernels".to_owned()
            } else {
                case.library.to_owned()
            },
            path: Some(p),
            from: "maps",
        })
}

pub fn hang(case: &Case, elapsed: Duration, limit: Duration) -> CaseResult {
    blank(
        case,
        Outcome::Hang,
        format!(
            "hang: stopped after {:.1} s (limit {} s)",
            elapsed.as_secs_f64(),
            seconds(limit)
        ),
    )
}

/// "5", or "0.4" for a limit the battery's deadline cut short.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

fn how_it_ended(s: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.signal(), s.code()) {
        (Some(sig), _) => {
            let name = match sig {
                libc::SIGABRT => " SIGABRT",
                libc::SIGSEGV => " SIGSEGV",
                libc::SIGBUS => " SIGBUS",
                libc::SIGILL => " SIGILL",
                libc::SIGFPE => " SIGFPE",
                libc::SIGKILL => " SIGKILL",
                _ => "",
            };
            format!("signal {sig}{name}")
        }
        (None, Some(code)) => format!("exit status {code}"),
        (None, None) => "ended".to_owned(),
    }
}

/// The last line the child said on stderr that is not MIOpen's logging
/// (which we turned on) nor smoke.py's maps: the runtime's fault, or
/// python's exception.
pub fn last_words(stderr: &str) -> &str {
    stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("MIOpen(") && !l.starts_with(MAPS_LINE))
        .unwrap_or("(nothing on stderr)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn case(library: &'static str) -> Case {
        super::super::cases::cases()
            .into_iter()
            .find(|c| c.library == library)
            .unwrap()
    }

    /// HIP's words for a missing code object, as torch and the runtime
    /// print them: no-code, the library from the error when it names one,
    /// else the case's own from the maps, else none.
    #[test]
    fn no_code_names_the_library_from_the_error_or_the_maps() {
        let exit1 = std::process::ExitStatus::from_raw(1 << 8);
        let rocblas = "rocBLAS error: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\n";
        let c = died(&case("rocBLAS"), &exit1, rocblas);
        assert_eq!(c.outcome, Outcome::NoCode);
        assert_eq!(
            c.detail,
            "no code for the chip: rocBLAS error: hipErrorNoBinaryForGpu: Unable to find code object for all current devices! (raised by rocBLAS, as the error says)"
        );
        let maps = format!(
            "Traceback (most recent call last):\nRuntimeError: HIP error: no kernel image is available for execution on the device\n{MAPS_LINE}[\"/t/lib/libamdhip64.so\", \"/t/lib/librocblas.so.4\"]\n"
        );
        let c = died(&case("rocBLAS"), &exit1, &maps);
        assert_eq!(
            c.raised_by,
            Some(RaisedBy {
                library: "rocBLAS".to_owned(),
                path: Some("/t/lib/librocblas.so.4".to_owned()),
                from: "maps",
            })
        );
        // The case's library is not mapped: no-code, the library unnamed.
        let c = died(&case("MIOpen"), &exit1, &maps);
        assert_eq!(
            (c.outcome, c.raised_by, c.detail.as_str()),
            (
                Outcome::NoCode,
                None,
                "no code for the chip: HIP error: no kernel image is available for execution on the device"
            )
        );
        // rocBLAS without a Tensile library for the chip aborts: no code.
        let tensile = "rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: No such file or directory\n";
        let c = died(
            &case("rocBLAS"),
            &std::process::ExitStatus::from_raw(libc::SIGABRT),
            tensile,
        );
        assert_eq!(
            (c.outcome, c.raised_by.map(|r| r.library)),
            (Outcome::NoCode, Some("rocBLAS".to_owned()))
        );
        // Any other death is a crash, with its last words (not the maps).
        let c = died(
            &case("MIOpen"),
            &exit1,
            &format!("RuntimeError: miopenStatusUnknownError\n{MAPS_LINE}[]\n"),
        );
        assert_eq!(
            (c.outcome, c.detail.as_str()),
            (
                Outcome::Crash,
                "crash (exit status 1): RuntimeError: miopenStatusUnknownError"
            )
        );
    }
}
