use std::process::ExitCode;

use anyhow::Result;

use crate::share::trust;
use crate::ui::Ui;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The publisher's minisign public key: the second line of their
    /// minisign.pub (RW...), or the path of that file
    #[arg(value_name = "KEY")]
    key: String,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let t = trust::trust(&args.key)?;
    let term = super::term::Term::new();
    let ui = Ui::new(&term);
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
