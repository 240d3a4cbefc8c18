//! The command line: parse, dispatch, print the error once.

use std::process::ExitCode;

use clap::{ColorChoice, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::commands;

pub use crate::version::VERSION;

/// The heading of the flags every verb takes, apart from its own.
const GLOBAL: &str = "Global options";

#[derive(Parser)]
#[command(
    name = "rdna1-patch",
    version = VERSION,
    about = "Tell what in your PyTorch fails on an AMD RDNA1 GPU (gfx1010/1011/1012), and fix MIOpen's batch norm in it, reversibly: in place in seconds, or with a patched build",
    after_help = crate::error::EXIT_STATUS_HELP,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Print only warnings and errors
    #[arg(short, long, global = true, conflicts_with = "verbose", help_heading = GLOBAL)]
    quiet: bool,
    /// Also print the build's own output, and each step as a line
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    verbose: bool,
    /// Print every line whole: full paths, every list and detail line
    /// (lines are otherwise one glance, at most 160 characters besides a
    /// command; the JSON is always whole)
    #[arg(long, global = true, overrides_with = "detail", help_heading = GLOBAL)]
    detail: bool,
    /// Colour: auto (a terminal, unless NO_COLOR is set or CLICOLOR_FORCE
    /// forces it), always, never
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN", help_heading = GLOBAL)]
    color: ColorChoice,
}

// Every example fits an 80-column terminal unwrapped (help wraps longer
// lines, and a wrapped command cannot be pasted), and the test
// examples::every_readme_and_help_example_runs runs each of them.
const BUILD_EXAMPLES: &str =
    "Cost: compiling MIOpen takes 40-75 minutes the first time (a rebuild with
nothing changed, seconds), about 20 GiB in the work dir, about 0.4 GiB in the
prefix for one GPU target, and the ROCm SDK of your torch's line. A published
build (--from, or a cache your config names) takes seconds and its download
instead, with no SDK; --dry-run says which, with the download's size.

Examples:
  rdna1-patch build --dry-run       # what would run, changing nothing
  rdna1-patch build                 # ~/.local/share/rdna1-patch/rocm-6.2.4
  rdna1-patch build --profile rocm-6.3.1 -D GPU_TARGETS=gfx1010
  rdna1-patch build --prefix ~/opt/rocm-miopen-rdna1   # nothing needs root
  rdna1-patch build                 # after a failed install: installs only";
const INSTALL_EXAMPLES: &str =
    "Cost: seconds, and no download. On disk, a backup of torch's libMIOpen.so in
the state dir (a second name for the same file where the state dir shares
torch's filesystem); the in-place fix adds a copy of that library in the
prefix. --dry-run says which route it would take.

Examples:
  rdna1-patch install --into-torch --dry-run  # the diagnosis and the route
  rdna1-patch install --into-torch  # the torch of python3 on PATH
  rdna1-patch install --into-torch --python ~/venv/bin/python
  rdna1-patch install --into-torch --profile rocm-6.3.1 --force";
const ROLLBACK_EXAMPLES: &str = "Examples:
  rdna1-patch rollback              # undo the newest install
  rdna1-patch rollback --list       # every transaction and its state
  rdna1-patch rollback --to 1       # undo everything down to transaction 1";
const STATUS_EXAMPLES: &str = "Examples:
  rdna1-patch status
  rdna1-patch status --json | jq .installed  # what torch holds now";
const VERIFY_EXAMPLES: &str = "Examples:
  rdna1-patch verify                # prefix, markers, torch's library, links
  rdna1-patch verify --runtime --python ~/venv/bin/python
  rdna1-patch verify --json";
const DOCTOR_EXAMPLES: &str = "Examples:
  rdna1-patch doctor                # torch, its kernels judged for your card, its route
  rdna1-patch doctor --all          # the build's rows too, whatever the route
  rdna1-patch doctor --rocm /usr --python ~/venv/bin/python";
const PATCHES_EXAMPLES: &str = "Examples:
  rdna1-patch patches list
  rdna1-patch patches check --source ~/src/MIOpen --profile rocm-6.3.1
  rdna1-patch profiles export rocm-6.2.4 my
  rdna1-patch patches refresh 0004-batchnorm-gfx101x.patch \\
      --source ~/src/MIOpen --profile my/rocm-6.2.4.toml";
const PROFILES_EXAMPLES: &str = "Examples:
  rdna1-patch profiles list
  rdna1-patch profiles export rocm-6.2.4 ~/my-profiles  # to edit";
const PUBLISH_EXAMPLES: &str =
    "Cost: the prefix, compressed with zstd, is uploaded once; a pull by anyone
else takes seconds and that download.

Examples:
  mkdir -p ~/.minisign              # minisign -G fails without it
  minisign -G                       # ~/.minisign/minisign.key, once
  rdna1-patch publish oci://ghcr.io/you/miopen-rdna1  # tag <profile>-<key>
  rdna1-patch publish --profile rocm-6.3.1 /mnt/usb/miopen-builds
  rdna1-patch build --from oci://ghcr.io/you/miopen-rdna1  # a user, after
                                    # `rdna1-patch trust` of your key";
const TRUST_EXAMPLES: &str = "Examples:
  rdna1-patch trust RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3
  rdna1-patch trust ~/Downloads/maintainer.pub  # their minisign.pub
  rdna1-patch build --from oci://ghcr.io/you/miopen-rdna1  # then pull";
const CLEAN_EXAMPLES: &str = "Examples:
  rdna1-patch clean --dry-run       # what would go, and how much
  rdna1-patch clean";
const COMPLETIONS_EXAMPLES: &str = "Examples:
  mkdir -p ~/.local/share/bash-completion/completions
  rdna1-patch completions bash \\
      > ~/.local/share/bash-completion/completions/rdna1-patch
  mkdir -p ~/.zfunc && rdna1-patch completions zsh > ~/.zfunc/_rdna1-patch
  mkdir -p ~/.config/fish/completions
  rdna1-patch completions fish > ~/.config/fish/completions/rdna1-patch.fish";

#[derive(Subcommand)]
enum Command {
    /// Fetch, patch, configure, build and install a component: miopen, or
    /// rocblas (rocBLAS with its Tensile kernels, where the profile pins it)
    #[command(after_help = BUILD_EXAMPLES)]
    Build(Box<commands::build::Args>),
    /// Fix torch's MIOpen: its own library in place (diagnosed and proven by
    /// compiling), or a build swapped in; or put a rocBLAS build under torch
    /// (`install rocblas`); journaled, `rollback` undoes it
    #[command(after_help = INSTALL_EXAMPLES)]
    Install(commands::install::Args),
    /// Put torch's original library back
    #[command(after_help = ROLLBACK_EXAMPLES)]
    Rollback(commands::rollback::Args),
    /// What is built, what is installed where, and open transactions
    #[command(after_help = STATUS_EXAMPLES)]
    Status(commands::status::Args),
    /// Prove what is installed, loaded and linked (exit 1 if any check fails)
    #[command(after_help = VERIFY_EXAMPLES)]
    Verify(commands::verify::Args),
    /// What your torch is, whether its batch-norm kernels compile for your
    /// card (diagnosed by compiling them), its route, and what that needs
    #[command(after_help = DOCTOR_EXAMPLES)]
    Doctor(commands::doctor::Args),
    /// Work on patch series: list, check against a tree, refresh from a tree
    #[command(subcommand, after_help = PATCHES_EXAMPLES)]
    Patches(commands::patches::PatchesCommand),
    /// Show the built-in profiles, or export one to edit
    #[command(subcommand, after_help = PROFILES_EXAMPLES)]
    Profiles(commands::profiles::ProfilesCommand),
    /// Share a finished build: push the prefix, signed, to an OCI registry
    /// or layout directory
    #[command(after_help = PUBLISH_EXAMPLES)]
    Publish(commands::publish::Args),
    /// Accept builds a publisher signed: add their minisign public key to
    /// trusted-keys in your config
    #[command(after_help = TRUST_EXAMPLES)]
    Trust(commands::trust::Args),
    /// Free space: old logs, backups no rollback can need, old work dirs
    #[command(after_help = CLEAN_EXAMPLES)]
    Clean(commands::clean::Args),
    /// Print a shell completion script
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `rdna1-patch man | man -l -`; with a
    /// verb, the page of its own that the main page lists for it
    Man(commands::man::Args),
}

/// The compile check's child (comgr::child): no command line, no
/// signal handling of ours; its parent holds it to a time limit. A
/// reaper (reaper.rs) around a child that must not outlive its limit:
/// first, as the child it starts may be the compile child. Each only
/// when this binary started it (`spawned`): set by hand, under `sudo -E`
/// say, neither runs anything. `None` for a run of a verb.
fn hidden_entry_point() -> Option<ExitCode> {
    for (var, serve) in [
        (
            crate::reaper::REAPER_ENV,
            crate::reaper::serve as fn() -> ExitCode,
        ),
        (crate::comgr::child::CHILD_ENV, crate::comgr::child::serve),
    ] {
        if std::env::var_os(var).is_some() {
            if !crate::spawned::by_this_binary() {
                crate::output::error(&crate::error::hint(
                    format!(
                        "{var} is set, but rdna1-patch did not start this process; nothing was run"
                    ),
                    "that variable is for the processes rdna1-patch starts itself; unset it (`rdna1-patch --help` lists the commands)",
                ));
                return Some(ExitCode::from(2));
            }
            return Some(serve());
        }
    }
    None
}

pub fn main() -> ExitCode {
    if let Some(code) = hidden_entry_point() {
        return code;
    }
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    crate::interrupt::install();
    // clap colours its own errors and help before `--color` is parsed:
    // read the flag first, so `--color never` holds for them too.
    let matches = Cli::command()
        .color(color_flag(std::env::args_os()))
        .try_get_matches()
        .unwrap_or_else(|e| usage_error(e));
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| usage_error(e));
    // Every command printed from here on is this run's (shell.rs).
    crate::shell::set(crate::shell::Invocation::of(
        &Cli::command(),
        &matches,
        || crate::which_python::choose(None).ok().map(|c| c.python),
    ));
    crate::output::configure(crate::output::Settings {
        quiet: cli.quiet,
        verbose: cli.verbose,
        detail: cli.detail,
        color: colour_on(cli.color),
    });
    let json = cli.command.json();
    let result = match cli.command {
        Command::Build(args) => commands::build::run(*args),
        Command::Install(args) => commands::install::run(args),
        Command::Rollback(args) => commands::rollback::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::Patches(cmd) => commands::patches::run(cmd),
        Command::Profiles(cmd) => commands::profiles::run(cmd),
        Command::Clean(args) => commands::clean::run(args),
        Command::Publish(args) => commands::publish::run(args),
        Command::Trust(args) => commands::trust::run(args),
        Command::Completions { shell } => completions(shell),
        Command::Man(args) => commands::man::run(Cli::command(), args),
    };
    // A command that reports errors as data (doctor, verify) still ends
    // with the signal's status when a signal stopped one of its programs.
    // One that has said so in its own report (verify's interrupted battery)
    // returns the signal's status: the error goes to stderr only, so that
    // stdout holds one JSON document.
    let result = match (result, crate::interrupt::interrupted()) {
        (Ok(code), Some(sig)) if code == ExitCode::from(crate::error::signal_status(sig)) => {
            crate::output::error(&crate::error::hint(
                format!(
                    "{} stopped rdna1-patch; the report says how far it got",
                    crate::error::signal_name(sig)
                ),
                "run the same command again to finish",
            ));
            Ok(code)
        }
        (Ok(_), Some(sig)) => Err(crate::interrupt::stopped("rdna1-patch", sig)),
        // A failure that follows from the signal (a child it stopped, read
        // as a failed step) is the interruption: exit 130, and the help.
        (Err(e), Some(sig)) if crate::error::exit_code(&e) == crate::error::FAILED => {
            Err(crate::interrupt::stopped("rdna1-patch", sig))
        }
        (result, _) => result,
    };
    crate::tally::write();
    match result {
        Ok(code) => code,
        Err(err) => {
            let code = crate::error::exit_code(&err);
            if json {
                crate::outln!("{}", crate::error::json(&err, code));
            }
            crate::output::error(&err);
            ExitCode::from(code)
        }
    }
}

impl Command {
    /// Whether the verb was asked for JSON: then a failure is a JSON
    /// document on stdout too, not only the message on stderr.
    fn json(&self) -> bool {
        match self {
            Command::Status(a) => a.json,
            Command::Rollback(a) => a.json,
            Command::Verify(a) => a.report.json,
            Command::Doctor(a) => a.report.json,
            Command::Install(a) => a.json,
            Command::Patches(c) => c.json(),
            Command::Profiles(c) => c.json(),
            _ => false,
        }
    }
}

/// A command line clap refuses, said as every other error is: clap's
/// `error:` line (its continuation lines joined to it), then one `help:`
/// line with clap's suggestion and where the arguments are listed; no
/// usage line (it made optional flags look required) and no tip block.
/// With `--json` anywhere on it, stdout gets the error object every
/// `--json` failure gives (README, "JSON"). `--help` and `--version` are
/// not errors, and print as clap prints them.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit()
    }
    let err = one_error(&e);
    crate::output::configure(crate::output::Settings {
        color: colour_on(color_flag(std::env::args_os())),
        ..Default::default()
    });
    if std::env::args_os().any(|a| a == "--json") {
        crate::outln!("{}", crate::error::json(&err, crate::error::FAILED));
    }
    crate::output::error(&err);
    std::process::exit(crate::error::FAILED.into())
}

/// clap's error as one message and one help line.
fn one_error(e: &clap::Error) -> anyhow::Error {
    use clap::error::{ContextKind, ContextValue};
    let text = e.render().to_string();
    let mut lines = text.lines();
    let mut message = lines
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned();
    for l in lines.take_while(|l| !l.trim().is_empty()) {
        message.push(' ');
        message.push_str(l.trim());
    }
    let value = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => vec![s.clone()],
        Some(ContextValue::Strings(v)) => v.clone(),
        Some(ContextValue::StyledStr(s)) => vec![s.to_string()],
        Some(ContextValue::StyledStrs(v)) => v.iter().map(ToString::to_string).collect(),
        _ => Vec::new(),
    };
    let mut help = String::new();
    // clap lists its suggestions lowest confidence first: the one said is
    // the closest by edit distance, among every verb for a mistyped one.
    let typed = value(ContextKind::InvalidSubcommand)
        .into_iter()
        .chain(value(ContextKind::InvalidArg))
        .next()
        .unwrap_or_default();
    let mut verbs = value(ContextKind::SuggestedSubcommand);
    if e.kind() == clap::error::ErrorKind::InvalidSubcommand {
        verbs.extend(verb_names());
    }
    for offered in [value(ContextKind::SuggestedArg), verbs] {
        if let Some(s) = closest(&typed, &offered) {
            help.push_str(&format!("did you mean `{s}`? "));
        }
    }
    for tip in value(ContextKind::Suggested) {
        help.push_str(&format!("{}; ", tip.trim_end_matches('.')));
    }
    help.push_str(&format!("`{}` lists its arguments", verb_help()));
    crate::error::hint(message, help)
}

/// Of `offered`, the closest to `typed` by edit distance (ties: the later,
/// which clap is surer of), if within a third of its length (at least 2).
fn closest<'a>(typed: &str, offered: &'a [String]) -> Option<&'a String> {
    let typed = typed.split('=').next().unwrap_or(typed);
    let limit = (typed.chars().count() / 3).max(2);
    offered
        .iter()
        .enumerate()
        .map(|(i, s)| (edits(typed, s), std::cmp::Reverse(i), s))
        .filter(|(d, ..)| *d <= limit)
        .min()
        .map(|(.., s)| s)
}

/// Edits from `a` to `b`, a swap of two neighbours one edit (optimal
/// string alignment, as strsim counts it: clap's own suggester).
fn edits(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

/// The verbs at the level of this command line's mistyped one.
fn verb_names() -> Vec<String> {
    let mut cmd = Cli::command();
    for arg in std::env::args().skip(1) {
        match cmd.find_subcommand(&arg) {
            Some(sub) => cmd = sub.clone(),
            None => break,
        }
    }
    cmd.get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_owned())
        .collect()
}

/// `rdna1-patch VERB [SUB] --help` for the verbs on this command line.
fn verb_help() -> String {
    let mut cmd = Cli::command();
    let mut words = vec!["rdna1-patch".to_owned()];
    // Flags and their values are passed over: the verbs are among them.
    for arg in std::env::args().skip(1) {
        if let Some(sub) = cmd.find_subcommand(&arg) {
            words.push(arg.clone());
            cmd = sub.clone();
        }
    }
    words.push("--help".to_owned());
    words.join(" ")
}

/// The `--color` a command line gives (the last one wins, as in clap),
/// for clap's own output.
/// Whether `--color WHEN` turns colour on here.
fn colour_on(when: ColorChoice) -> bool {
    crate::output::use_color(match when {
        ColorChoice::Always => Some(true),
        ColorChoice::Never => Some(false),
        ColorChoice::Auto => None,
    })
}

fn color_flag(args: impl Iterator<Item = std::ffi::OsString>) -> ColorChoice {
    let args: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    let mut choice = ColorChoice::Auto;
    for (i, a) in args.iter().enumerate() {
        let value = match a.strip_prefix("--color") {
            Some("") => args.get(i + 1).map(String::as_str),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        };
        match value {
            Some("never") => choice = ColorChoice::Never,
            Some("always") => choice = ColorChoice::Always,
            Some("auto") => choice = ColorChoice::Auto,
            _ => {}
        }
    }
    choice
}

fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "rdna1-patch", &mut out);
    let script = completion_script(shell, &String::from_utf8_lossy(&out));
    crate::outln!("{}", script.trim_end());
    Ok(ExitCode::SUCCESS)
}

/// clap_complete's script, mended where it fails this binary: its bash
/// script names the subcommand states `rdna1__patch__subcmd__build` in one
/// place and `rdna1__subcmd__patch__subcmd__build` (the hyphen of the
/// binary's name read as a subcommand separator) in the case labels, so
/// nothing after the first word completed.
fn completion_script(shell: clap_complete::Shell, script: &str) -> String {
    match shell {
        clap_complete::Shell::Bash => script.replace("rdna1__subcmd__patch", "rdna1__patch"),
        _ => script.to_owned(),
    }
}
