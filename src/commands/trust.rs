use std::process::ExitCode;

use anyhow::Result;

use crate::share::trust;
use crate::ui::Ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The publisher's minisign public key: the second line of their
    /// minisign.pub (RW...), or the path of that file
    #[arg(value_name = "KEY", required_unless_present_any = ["list", "remove"])]
    key: Option<String>,
    /// List the trusted keys, with the ids signatures name them by
    #[arg(long, conflicts_with_all = ["key", "remove"])]
    list: bool,
    /// Stop trusting a key: its id (as --list shows it), its key string or
    /// its .pub file
    #[arg(long, value_name = "KEY", conflicts_with = "key")]
    remove: Option<String>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let term = super::term::Term::new();
    let ui = Ui::new(&term);
    if args.list {
        let listed = trust::list()?;
        if listed.keys.is_empty() {
            ui.note(format!("no trusted keys in {}", listed.config));
        }
        for (id, entry) in &listed.keys {
            crate::outln!("{id}  {entry}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(key) = &args.remove {
        let (ids, config) = trust::remove(key)?;
        for id in ids {
            ui.stage(
                "Untrusted",
                format!(
                    "key {id} in {}: builds it signed are no longer taken",
                    config.display()
                ),
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let t = trust::trust(args.key.as_deref().expect("clap requires KEY"))?;
    match t.added {
        true => ui.stage(
            "Trusted",
            format!(
                "key {} in {}: `build --from` and the caches take builds it signed",
                t.key_id,
                t.config.display()
            ),
        ),
        false => ui.stage(
            "Trusted",
            format!(
                "key {} was already trusted, in {}",
                t.key_id,
                t.config.display()
            ),
        ),
    }
    Ok(ExitCode::SUCCESS)
}
