//! `man`: the manual pages, made from the same clap definitions as
//! `--help`, printed or installed where man-db finds them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::error::hint;
use crate::ui::Ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The verb whose page to print, e.g. build
    #[arg(conflicts_with = "install")]
    verb: Option<String>,
    /// Write every page (rdna1-patch.1 and one per verb) into DIR/man1
    /// instead of printing one; with no DIR, into share/man beside the
    /// binary's bin directory (~/.cargo/share/man for ~/.cargo/bin), where
    /// man-db looks for the pages of a program on PATH
    #[arg(long, value_name = "DIR", num_args = 0..=1)]
    install: Option<Option<PathBuf>>,
}

pub fn run(cli: clap::Command, args: Args) -> Result<ExitCode> {
    match args.install {
        Some(dir) => {
            let dir = match dir {
                Some(d) => d,
                None => beside_the_binary()?,
            };
            let (man1, count) = install(cli, &dir)?;
            let term = super::term::Term::new();
            Ui::new(&term).stage(
                "Installed",
                format!(
                    "{count} pages into {}: man-db finds them for a program on PATH in ../share/man beside its bin (else name the directory in MANPATH)",
                    man1.display()
                ),
            );
        }
        None => crate::outln!("{}", page(cli, args.verb.as_deref())?.trim_end()),
    }
    Ok(ExitCode::SUCCESS)
}

/// The verbs with a page of their own: every one the main page lists,
/// clap's own `help` among them.
fn verbs(cli: &mut clap::Command) -> Vec<String> {
    cli.build();
    cli.get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect()
}

/// The page of `verb`, or the main page, as roff. clap_mangen heads the
/// text after the options "EXTRA": it is the exit statuses on the main
/// page and the examples on a verb's, and is headed so; a verb's cost,
/// ahead of its examples, gets a section of its own.
fn page(mut cli: clap::Command, verb: Option<&str>) -> Result<String> {
    let (page, extra) = match verb {
        None => (cli, "\"EXIT STATUS\""),
        Some(v) => {
            let names = verbs(&mut cli);
            let sub = cli.find_subcommand(v).ok_or_else(|| {
                hint(
                    format!("rdna1-patch has no verb `{v}`"),
                    format!("pages: rdna1-patch man {{{}}}", names.join(",")),
                )
            })?;
            // The page's name, as the main page's SUBCOMMANDS list names it.
            (sub.clone().name(format!("rdna1-patch-{v}")), "EXAMPLES")
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    let text = String::from_utf8_lossy(&out)
        .replacen(".SH EXTRA\nCost:", ".SH COST\nCost:", 1)
        .replacen(".SH EXTRA\n", &format!(".SH {extra}\n"), 1);
    // Examples are command lines: unfilled, so none is wrapped or joined.
    Ok(match text.split_once("\nExamples:\n") {
        Some((head, tail)) => {
            let (examples, rest) = tail.split_at(tail.find("\n.SH ").unwrap_or(tail.len()));
            let head = head.trim_end_matches(&format!(".SH {extra}")).trim_end();
            format!("{head}\n.SH {extra}\n.nf\n{examples}\n.fi{rest}")
        }
        None => text,
    })
}

/// `<bin>/../share/man` for the directory this binary was run from: the
/// PATH entry that holds it, as man-db sees it (not a symlink's target,
/// which /proc/self/exe gives).
fn beside_the_binary() -> Result<PathBuf> {
    let argv0 = PathBuf::from(std::env::args_os().next().unwrap_or_default());
    let exe = if argv0.components().count() > 1 {
        std::path::absolute(&argv0)?
    } else {
        std::env::var_os("PATH")
            .and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join(&argv0))
                    .find(|f| f.is_file())
            })
            .map_or_else(std::env::current_exe, Ok)?
    };
    let bin = exe.parent().context("the binary's path has no directory")?;
    Ok(bin.parent().unwrap_or(bin).join("share/man"))
}

/// Every page into `dir/man1`; the directory and how many pages.
fn install(mut cli: clap::Command, dir: &Path) -> Result<(PathBuf, usize)> {
    use crate::fsutil::{At, fd};
    let man1 = dir.join("man1");
    // Every page goes into the directory made here, held open; its name
    // must still hold it after each page (a user who swaps their `man1`
    // for a symlink under sudo gets an error, and nothing through it).
    let held = fd::create_dir_all(&man1).at("create", &man1)?;
    let id = held.id().at("read", &man1)?;
    let (parent, name) = fd::parent_of(&man1).at("open the directory of", &man1)?;
    let verbs = verbs(&mut cli);
    let mut pages = vec![("rdna1-patch.1".to_owned(), page(cli.clone(), None)?)];
    for v in &verbs {
        pages.push((format!("rdna1-patch-{v}.1"), page(cli.clone(), Some(v))?));
    }
    for (page, text) in &pages {
        held.write_atomic(std::ffi::OsStr::new(page), text.as_bytes(), 0o644)
            .at("write", &man1.join(page))
            .with_context(|| format!("writing the manual page {page}"))?;
        crate::fsutil::race_point("man-page-written");
        if !parent.holds_dir(name, id).at("read", &man1)? {
            return Err(hint(
                format!(
                    "{} is not the directory rdna1-patch made: another program replaced it (a symlink or another directory stands there) while the pages went in; nothing was written through it",
                    man1.display()
                ),
                format!(
                    "stop whatever else writes in {} (under sudo, a directory another user owns is written as that user), then run this again",
                    dir.display()
                ),
            ));
        }
    }
    Ok((man1, pages.len()))
}
