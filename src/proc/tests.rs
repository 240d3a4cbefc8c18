use super::stream::LINE_CAP;
use super::*;

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

#[test]
fn a_missing_program_is_named_with_its_package() {
    let err = helper(Command::new("patchelf-not-here")).err().unwrap();
    assert_eq!(
        crate::error::render(&err),
        "error: patchelf-not-here is not installed (not found)\nhelp: install patchelf-not-here, or check the path, and run this again"
    );
    let mut c = Command::new("/nonexistent/dir/ninja");
    c.arg("--version");
    let err = stream(c, |_| {}).err().unwrap();
    assert!(
        crate::error::render(&err).ends_with(
            "help: install it (Debian/Ubuntu: sudo apt install ninja-build) and run this again"
        ),
        "{}",
        crate::error::render(&err)
    );
}

#[test]
fn output_past_the_cap_stops_the_child_and_names_the_cap() {
    let c = sh("yes; echo never");
    let err = run(c, Duration::from_secs(60)).err().unwrap();
    assert_eq!(
        format!("{err:#}"),
        "`sh -c yes; echo never` printed more than 64 MiB on stdout, and was stopped"
    );
    let c = sh("yes >&2");
    let err = run(c, Duration::from_secs(60)).err().unwrap();
    assert!(format!("{err:#}").ends_with("printed more than 64 MiB on stderr, and was stopped"));
    // Just under the cap is fine, and whole.
    let c = sh("head -c 67108864 /dev/zero");
    assert_eq!(
        run(c, Duration::from_secs(60)).unwrap().stdout.len(),
        OUTPUT_CAP
    );
}

#[test]
fn a_streamed_line_without_end_comes_in_pieces() {
    let c = sh("head -c 2621440 /dev/zero | tr '\\0' a; echo; echo b");
    let mut lens = Vec::new();
    stream(c, |l| lens.push(l.len())).unwrap();
    assert_eq!(lens, [LINE_CAP, LINE_CAP, LINE_CAP / 2, 1]);
}

#[test]
fn a_streamed_child_gives_stdout_and_stderr_line_by_line() {
    let c = sh("echo one; echo two >&2; exit 3");
    let mut lines = Vec::new();
    let s = stream(c, |l| lines.push(l.to_owned())).unwrap();
    assert_eq!(lines, ["one", "two"]);
    assert_eq!(s.status.and_then(|s| s.code()), Some(3));
}

#[test]
fn carriage_returns_end_lines_and_a_silent_child_is_killed() {
    let c = sh("printf 'a 1%%\\ra 2%%\\r\\nb\\n\\nc'");
    let mut lines = Vec::new();
    stream(c, |l| lines.push(l.to_owned())).unwrap();
    assert_eq!(lines, ["a 1%", "a 2%", "b", "", "c"]);

    let c = sh("echo started; sleep 30");
    let start = Instant::now();
    let mut lines = Vec::new();
    let s = stream_watched(c, Some(Duration::from_millis(300)), |l| {
        lines.push(l.to_owned())
    })
    .unwrap();
    assert!(s.status.is_none());
    assert_eq!(lines, ["started"]);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}
