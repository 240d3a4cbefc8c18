//! One glance: a row of doctor, verify or status in at most [`GLANCE`]
//! characters, without losing what it says (docs/rows.md, "One glance"):
//! paths shortened or their middle elided, a row cut at a word, never
//! inside a command (a whole command is excepted from the glance: the
//! prose after it goes); a fix or verdict wrapped, its command whole.

/// The longest line a row takes in the report a person reads: one glance.
/// `--detail` (and the JSON) give the whole row.
pub const GLANCE: usize = crate::output::GLANCE;

/// `text` with `path` written `short` wherever it stands as whole path
/// components (`/home/u` in `/home/u/x`, not in `/home/user`); a `path`
/// ending in `/` only where more follows it (`/site/torch/` in
/// `/site/torch/lib`, not in `at /site/torch;`). Inside a `command`,
/// which is copied and run, only a `~` that starts a word, where the
/// shell reads it as the home: `torch/lib` names nothing there, and a
/// `~` in quotes is not the home.
pub fn shorten(text: &str, path: &str, short: &str) -> String {
    if path.trim_end_matches('/').is_empty() {
        return text.to_owned();
    }
    let path_char = |c: char| c.is_alphanumeric() || "._-~".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(path) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + path.len()..].chars().next();
        let whole = !before.is_some_and(path_char)
            && (path.ends_with('/') || !after.is_some_and(path_char));
        out.push_str(&rest[..at]);
        let in_command = out.matches('`').count() % 2 == 1;
        let word_start = before.is_none_or(|c| c == ' ' || c == '`');
        let whole = whole && (!in_command || (short == "~" && word_start));
        out.push_str(if whole { short } else { path });
        rest = &rest[at + path.len()..];
    }
    out.push_str(rest);
    out
}

/// `line` in [`GLANCE`] characters: its longest paths first written with
/// their middle elided (`~/miniconda3/envs/NAME/…/torch`), then, if it
/// is still longer, cut at a word, ending ` …` where it was cut. The rest
/// is in `--detail` and the JSON.
pub fn glance(line: &str) -> String {
    if line.chars().count() <= GLANCE {
        return line.to_owned();
    }
    let line = elide_paths(line);
    if line.chars().count() <= GLANCE {
        return line;
    }
    let keep: String = line.chars().take(GLANCE - 2).collect();
    let mut cut = keep
        .rfind(' ')
        .filter(|at| *at > GLANCE / 2)
        .unwrap_or(keep.len());
    // Never half a command: one the cut would split is kept whole, past
    // the glance (a whole command is excepted from it), and the prose
    // after it is what goes.
    // The commands a step runs one after another (`a`, then `b`) go
    // together.
    if keep[..cut].matches('`').count() % 2 == 1 {
        let mut open = keep[..cut].rfind('`').unwrap_or(cut);
        loop {
            let Some(close) = line[open + 1..].find('`') else {
                return line;
            };
            cut = open + 1 + close + 1;
            match line[cut..].starts_with(", then `") {
                true => open = cut + ", then ".len(),
                false => break,
            }
        }
    }
    format!("{} …", line[..cut].trim_end())
}

/// `line` with the middle of its deep paths written `…`, the longest
/// first, until it fits a glance: a path keeps its first two components
/// and its last two (`/home/u/…/site-packages/torch`, `~/miniconda3/…/bin/python`),
/// what says where and what it is. A path inside a `command` stays whole:
/// it is copied and run.
pub fn elide_paths(line: &str) -> String {
    let mut line = line.to_owned();
    // Each path keeps its environment's name; where the row still does
    // not fit, one the cut would reach gives it up rather than be cut
    // away (its file's name stays).
    for shorter in [elided_in as fn(&str, &str) -> Option<String>, plain] {
        while line.chars().count() > GLANCE {
            let Some((at, path, short)) = longest_path(&line, shorter) else {
                break;
            };
            let end = at + path.len();
            line.replace_range(at..end, &short);
        }
    }
    line
}

/// An elided path that kept its environment's name and ends past where
/// the row is cut (`before` it in the row), with only its first
/// components and its file's name.
fn plain(before: &str, path: &str) -> Option<String> {
    if before.chars().count() + path.chars().count() <= GLANCE - 2 {
        return None;
    }
    let parts: Vec<&str> = path.split('/').collect();
    let head = if path.starts_with('/') { 3 } else { 2 };
    let short = [
        &parts[..head.min(parts.len())],
        &["…"],
        &parts[parts.len() - 1..],
    ]
    .concat()
    .join("/");
    (path.contains('…') && short.len() < path.len()).then_some(short)
}

/// `path` with its middle elided, where at least two components are in
/// it; `None` for a shallow path, or one already elided. What identifies
/// it is never the part dropped: the first components, the last two (the
/// file's name), and the environment's name between them (conda's
/// `envs/NAME`, a venv's directory).
fn elided(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('/').collect();
    // "/a/b" splits as "", "a", "b": the root stays with the first two.
    let head = if path.starts_with('/') { 3 } else { 2 };
    if path.contains('…') || parts.len() < head + 2 + 2 {
        return None;
    }
    // The file's name always; its directory too where no environment is
    // named.
    let env = environment(&parts).filter(|&(a, b)| a >= head && b < parts.len());
    let tail = parts.len() - if env.is_some() { 1 } else { 2 };
    let mut out = parts[..head].to_vec();
    match env {
        Some((a, b)) => {
            if a > head {
                out.push("…");
            }
            out.extend(&parts[a..b]);
            if b < tail {
                out.push("…");
            }
        }
        None => out.push("…"),
    }
    out.extend(&parts[tail..]);
    let short = out.join("/");
    short.contains('…').then_some(short)
}

/// [`elided`], for a path that `before` precedes in its line: where
/// `before` names the path's environment already, the path keeps only its
/// first components and its file's name (`~/miniconda3/…/python`).
fn elided_in(before: &str, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('/').collect();
    let head = if path.starts_with('/') { 3 } else { 2 };
    match environment(&parts) {
        Some((a, b))
            if !path.contains('…')
                && parts.len() > head + 1
                && before.contains(&format!("/{}/", parts[a..b].join("/"))) =>
        {
            Some(
                [&parts[..head], &["…"], &parts[parts.len() - 1..]]
                    .concat()
                    .join("/"),
            )
        }
        _ => elided(path),
    }
}

/// Where a path names its environment, as a range of its components:
/// conda's `envs/NAME`, else a venv's directory (the one holding
/// `lib/pythonX.Y` or `bin`).
fn environment(parts: &[&str]) -> Option<(usize, usize)> {
    if let Some(i) = parts.iter().position(|p| *p == "envs")
        && i + 2 <= parts.len()
    {
        return Some((i, i + 2));
    }
    let at = parts
        .windows(2)
        .position(|w| w[0] == "lib" && w[1].starts_with("python"))
        .or_else(|| parts.iter().position(|p| *p == "bin"))?;
    (at >= 1).then(|| (at - 1, at))
}

/// The longest path in `line` outside backticks that [`elided`] shortens
/// (an absolute one, or one from `~/`): where it starts, it, and its
/// short form.
fn longest_path(
    line: &str,
    shorter: fn(&str, &str) -> Option<String>,
) -> Option<(usize, &str, String)> {
    let mut best: Option<(usize, &str, String)> = None;
    let mut quoted = false;
    let mut start = None;
    let ends = |c: char| c.is_whitespace() || "`'\"(),;".contains(c);
    let chars: Vec<(usize, char)> = line.char_indices().chain([(line.len(), ' ')]).collect();
    for (i, &(at, c)) in chars.iter().enumerate() {
        if let Some(from) = start
            && ends(c)
        {
            start = None;
            // A sentence's stop or a colon after the path is not in it.
            let path = line[from..at].trim_end_matches(['.', ':']);
            if let Some(short) = shorter(&line[..from], path)
                && best.as_ref().is_none_or(|(_, b, _)| path.len() > b.len())
            {
                best = Some((from, path, short));
            }
        }
        if c == '`' {
            quoted = !quoted;
            continue;
        }
        let begins = i == 0 || ends(chars[i - 1].1);
        let rooted = c == '/' || (c == '~' && line[at..].starts_with("~/"));
        if start.is_none() && !quoted && begins && rooted {
            start = Some(at);
        }
    }
    best
}

/// `line` wrapped at [`GLANCE`] characters, its continuations under
/// `indent`: a fix or a verdict is never cut (its command is whole).
pub fn glance_wrapped(line: &str, indent: &str) -> String {
    wrap(line, GLANCE, |_| indent)
}

pub(crate) use crate::output::wrap;

/// The characters of `line` outside its `commands`: what a glance reads
/// besides the commands, which are copied whole.
pub fn besides_commands(line: &str) -> usize {
    line.split('`').step_by(2).map(|p| p.chars().count()).sum()
}

/// A progress or answer line of install, rollback or build at a glance:
/// if it is longer than [`GLANCE`] besides its commands, home written `~`
/// (`home`), then wrapped with its continuations under `indent`, each
/// command whole; a line that would still take more than two lines loses
/// the middle of its deep paths first. `--detail` and `-v` print it as it
/// is.
pub fn fit(line: &str, indent: &str, home: Option<&str>) -> String {
    if besides_commands(line) <= GLANCE {
        return line.to_owned();
    }
    let line = match home {
        Some(home) => shorten(line, home, "~"),
        None => line.to_owned(),
    };
    if besides_commands(&line) <= GLANCE {
        return line;
    }
    let wrapped = wrap(&line, GLANCE, |_| indent);
    if wrapped.lines().count() <= 2 {
        return wrapped;
    }
    wrap(&elide_paths(&line), GLANCE, |_| indent)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command is never broken across lines, even one wider than the
    /// width; the words around it wrap as before.
    #[test]
    fn a_command_in_backticks_is_never_broken() {
        let cmd = "`/home/u/venv/bin/python -m pip install --index-url https://example.org/whl/ \"torch[device-gfx1012]\"`";
        let line = format!(
            "fix: install the torch built for gfx1012 (the card in this machine): {cmd}, then run this again"
        );
        let out = wrap(&line, 60, |_| "  ");
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines
                .iter()
                .any(|l| l.trim_start().starts_with(&format!("{cmd},"))),
            "{out}"
        );
        assert!(lines.len() >= 3, "{out}");
        assert_eq!(out.replace("\n  ", " "), line);
    }

    /// A row over a glance loses the middle of its deepest paths, longest
    /// first, before any of its words: what it says after them stays.
    #[test]
    fn a_deep_path_loses_its_middle_before_the_row_loses_its_end() {
        let deep =
            "~/miniconda3/envs/a-rather-long-environment-name/lib/python3.12/site-packages/torch";
        let python = "/home/user/miniconda3/envs/a-rather-long-environment-name/bin/python";
        let line = format!(
            "ok    torch     2.6.0+rocm6.4 (HIP 6.4.43484-123eb5128) at {deep}, found by {python} (--python); torch/lib: torch loads torch/lib/libMIOpen.so"
        );
        assert!(line.chars().count() > GLANCE);
        // The longest path goes first, then the next, each keeping its
        // environment's name (issue 70: `~/miniconda3/…/site-packages/torch`
        // named no environment); the words after them are cut last.
        assert_eq!(
            glance(&line),
            "ok    torch     2.6.0+rocm6.4 (HIP 6.4.43484-123eb5128) at ~/miniconda3/envs/a-rather-long-environment-name/…/torch, found by /home/user/…/python (--python); …"
        );
        // One path elided can be enough: the other stays whole.
        let one = line.replace(python, "/usr/bin/python3");
        let one = one.replace(" (HIP 6.4.43484-123eb5128)", "");
        assert_eq!(
            glance(&one),
            "ok    torch     2.6.0+rocm6.4 at ~/miniconda3/envs/a-rather-long-environment-name/…/torch, found by /usr/bin/python3 (--python); torch/lib: torch loads …"
        );
        // A row is never cut inside a command: the command stays whole,
        // past the glance, and the prose after it goes.
        let pip = "`pip install --index-url https://example.org/whl/ \"torch[device-gfx1010]\"`";
        let run = format!("{}{pip} (a download)", "word ".repeat(25));
        assert_eq!(glance(&run), format!("{}{pip} …", "word ".repeat(25)));
        // A command is copied and run: its path stays whole.
        let cmd = format!(
            "fix: run `{python} -m pip install torch` at {}: {}",
            deep.replace("a-rather-long-environment-name", "rt"),
            "x ".repeat(30)
        );
        let short = glance(&cmd);
        assert!(short.contains(&format!("`{python} -m pip")), "{short}");
        assert!(
            short.contains("at ~/miniconda3/envs/rt/…/torch: x"),
            "{short}"
        );
        // A fitting line is untouched; a path is elided only where at
        // least two components go.
        assert_eq!(elide_paths(deep), deep);
        assert_eq!(elided("/a/b/c/d/e"), None);
        assert_eq!(elided("/a/b/c/d/e/f").as_deref(), Some("/a/b/…/e/f"));
        assert_eq!(elided("~/a/b/c/d"), None);
        assert_eq!(elided("~/a/b/c/d/e").as_deref(), Some("~/a/…/d/e"));
        assert_eq!(elided("~/a/…/c/d"), None);
        // The environment's name stays: conda's envs/NAME, a venv's dir.
        assert_eq!(
            elided("~/miniconda3/envs/rocm-torch/lib/python3.11/site-packages/torch").as_deref(),
            Some("~/miniconda3/envs/rocm-torch/…/torch")
        );
        assert_eq!(
            elided("/home/u/work/venv/lib/python3.11/site-packages/torch").as_deref(),
            Some("/home/u/…/venv/…/torch")
        );
        assert_eq!(
            elided("/home/u/work/proj/venv/bin/python").as_deref(),
            Some("/home/u/…/venv/…/python")
        );
        assert_eq!(
            elided("~/miniconda3/envs/rocm-torch/bin/python").as_deref(),
            Some("~/miniconda3/envs/rocm-torch/…/python")
        );
    }
}
