//! What one run of the real binary printed and how it ended, and the
//! checks a test makes of it: exit codes, the one error line and its help,
//! `[..]` wildcards in expected lines.

use std::process::Output;

/// What one run printed, and how it ended.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn ok(self) -> Run {
        assert_eq!(
            self.code,
            Some(0),
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// The command could not do its job: exit 2, and the error printed the
    /// one way errors are, its help (if any) as the last line.
    #[track_caller]
    pub fn fails(self) -> Run {
        if let Some(dump) = std::env::var_os("RDNA1_DUMP_ERRORS") {
            dump_error(&dump, std::panic::Location::caller(), &self.stderr);
        }
        assert_eq!(
            self.code,
            Some(2),
            "expected exit 2\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        let lines = unwrapped_error(&self.stderr);
        let errors = lines.iter().filter(|l| l.starts_with("error: ")).count();
        assert_eq!(errors, 1, "one error line expected:\n{}", self.stderr);
        let helps = lines.iter().filter(|l| l.starts_with("help: ")).count();
        assert!(
            helps == 0 || (helps == 1 && lines.last().is_some_and(|l| l.starts_with("help: "))),
            "the help line must come last, once:\n{}",
            self.stderr
        );
        self
    }

    /// The command failed as `fails` checks, with exactly this error (as
    /// `error_is` compares it).
    #[track_caller]
    pub fn fails_with(self, expected: &str) -> Run {
        let run = self.fails();
        run.error_is(expected);
        run
    }

    /// A check found a problem: exit 1.
    #[track_caller]
    pub fn check_fails(self) -> Run {
        assert_eq!(
            self.code,
            Some(1),
            "expected exit 1\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// The error a user reads, exactly: stderr's `error:` line and every line
    /// after it equal `expected`, where `[..]` in a line matches any text
    /// (cargo-test-support's wildcard). Progress lines before the error are
    /// not compared.
    #[track_caller]
    pub fn error_is(&self, expected: &str) -> &Run {
        let lines = unwrapped_error(&self.stderr);
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let start = lines.iter().position(|l| l.starts_with("error: "));
        let got = start.map(|s| &lines[s..]).unwrap_or(&[]);
        let want: Vec<&str> = expected.trim_end().lines().collect();
        let same =
            got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| line_matches(w, g));
        assert!(
            same,
            "the error differs\nexpected:\n{}\ngot:\n{}\nwhole stderr:\n{}",
            want.join("\n"),
            got.join("\n"),
            self.stderr
        );
        self
    }

    /// stderr contains `needle`; the whole output is shown if not.
    #[track_caller]
    pub fn says(&self, needle: &str) -> &Run {
        // An error's lines as --detail prints them: at a glance they wrap.
        let whole = unwrapped_error(&self.stderr).join("\n");
        assert!(
            contains(&self.stderr, needle) || contains(&whole, needle),
            "stderr lacks {needle:?}\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// stdout contains `needle`; the whole output is shown if not.
    #[track_caller]
    pub fn prints(&self, needle: &str) -> &Run {
        assert!(
            contains(&self.stdout, needle),
            "stdout lacks {needle:?}\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// Object files the build compiled, e.g. "handlehip.cpp.o".
    pub fn compiled(&self) -> Vec<String> {
        self.stderr
            .lines()
            .filter_map(|l| l.split("Building CXX object ").nth(1))
            .map(|o| o.rsplit('/').next().unwrap().to_owned())
            .collect()
    }
}

/// Whether `text` holds `needle`, each `[..]` in it matching any text
/// within a line (a printed command's carried options, say).
pub fn contains(text: &str, needle: &str) -> bool {
    if !needle.contains("[..]") {
        return text.contains(needle);
    }
    text.lines().any(|l| {
        (0..l.len())
            .filter(|&i| l.is_char_boundary(i))
            .any(|i| line_matches(&format!("{needle}[..]"), &l[i..]))
    })
}

/// `pattern` with each `[..]` matching any text, against one whole line.
pub fn line_matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split("[..]");
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

#[test]
fn wildcard_lines() {
    assert!(line_matches("error: a [..] b", "error: a x y b"));
    assert!(line_matches("[..]", "anything"));
    assert!(line_matches("exact", "exact"));
    assert!(!line_matches("exact", "exact but longer"));
    assert!(!line_matches("a [..] c", "a b d"));
    assert!(line_matches("a [..] b [..]", "a 1 b 2"));
    assert!(!line_matches("a[..]b[..]c", "a b"));
}

/// Where a failure's error came from and what it said, one JSON line per
/// call, for writing `fails_with` expectations from a real run.
fn dump_error(file: &std::ffi::OsStr, at: &std::panic::Location, stderr: &str) {
    use std::io::Write;
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines.iter().position(|l| l.starts_with("error: "));
    let error = start.map(|s| lines[s..].join("\n")).unwrap_or_default();
    let line = serde_json::json!({
        "file": at.file(), "line": at.line(), "column": at.column(),
        "test": std::thread::current().name().unwrap_or("").to_owned(),
        "error": error,
    });
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
    {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// `stderr` with an error's lines whole: at a glance the binary wraps an
/// `error:` line's continuations under 7 spaces and a `help:` line's under
/// 6 (output.rs), which this joins back, so an expectation names each
/// line of the error as `--detail` prints it.
pub fn unwrapped_error(stderr: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut head = "";
    for line in stderr.lines() {
        let indent = match head {
            "error:" => "       ",
            "help:" => "      ",
            _ => "",
        };
        let continues = !indent.is_empty()
            && line.starts_with(indent)
            && !line[indent.len()..].starts_with(' ');
        match out.last_mut() {
            Some(last) if continues => {
                last.push(' ');
                last.push_str(&line[indent.len()..]);
            }
            _ => {
                // A line of the error's own (a list under it) is still
                // the error's: its continuations are under 7 spaces too.
                head = ["error:", "help:"]
                    .into_iter()
                    .find(|h| line.starts_with(h))
                    .unwrap_or(if head == "help:" { "" } else { head });
                out.push(line.to_owned());
            }
        }
    }
    out
}
