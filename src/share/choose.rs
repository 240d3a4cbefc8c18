//! Finding a shared build to pull instead of compiling one: `build --from
//! REF`, else each of the config's `caches`. An artifact is taken only when
//! a trusted key signed it and its build key's inputs are this build's
//! (`KeyInputs::accepts`); otherwise the build goes on and says why.
//!
//! `--from` names one artifact, so what is wrong with it (a registry that
//! is down, a layer that is not what its signed manifest says, a key that
//! is not trusted, another build) stops the run with what to do: the user
//! asked for that build, and an hour of compiling is not what they asked
//! for. A cache is a place to look: such a fault there is a warning, and
//! the next cache, or the build, follows.

use anyhow::Result;

use super::examine::{Candidate, Declined, Fix, Found, examine};
use super::oci::{self, Reference, Store};
use crate::error::hint;
use crate::prefix::key::KeyInputs;
use crate::ui::Ui;

/// How many of a repository's tags for a profile are examined (each is a
/// manifest and a signature fetched).
const MAX_EXAMINED: usize = 50;

#[derive(Clone, Default)]
pub struct Sources {
    pub from: Option<Reference>,
    pub caches: Vec<Reference>,
    pub trusted: Vec<minisign::PublicKey>,
    /// The config file the caches and keys came from, for messages.
    pub config: String,
    pub net_timeout: std::time::Duration,
}

/// What to do: pull this, or build, and why.
pub enum Choice {
    Pull(Store, Box<Candidate>),
    /// Compile: why no cache had the build, and each cache that failed
    /// with its error (already warned of, once).
    Build {
        why: String,
        failed: Vec<(String, String)>,
    },
}

impl Choice {
    /// The whole reason to compile, failures included (for the dry run's
    /// plan, which shows no warnings).
    pub fn build_reason(why: &str, failed: &[(String, String)]) -> String {
        let mut all: Vec<String> = failed
            .iter()
            .map(|(r, e)| format!("cache {r} failed: {e}"))
            .collect();
        if !why.is_empty() {
            all.insert(0, why.to_owned());
        }
        all.join("; ")
    }
}

/// What this machine can say of its toolchain: with none, the publisher's
/// is taken when its ROCm release is the profile's.
pub struct Want<'a> {
    pub inputs: &'a KeyInputs,
    pub toolchain: bool,
    pub rocm_release: String,
}

impl Sources {
    pub fn any(&self) -> bool {
        self.from.is_some() || !self.caches.is_empty()
    }

    fn net(&self) -> oci::Net {
        oci::Net {
            timeout: self.net_timeout,
        }
    }

    pub fn choose(&self, want: &Want, ui: &Ui) -> Result<Choice> {
        if let Some(r) = &self.from {
            let store = Store::open(r, self.net())?;
            return match self.look(&store, r, want)? {
                Found::Candidate(c) => Ok(Choice::Pull(store, c)),
                Found::Declined(d) => Err(hint(
                    format!("not pulling the build --from names: {}", d.why),
                    d.help(),
                )),
            };
        }
        let mut why = Vec::new();
        let mut failed = Vec::new();
        for r in &self.caches {
            let found = Store::open(r, self.net())
                .and_then(|store| Ok((self.look(&store, r, want)?, store)));
            match found {
                Ok((Found::Candidate(c), store)) => return Ok(Choice::Pull(store, c)),
                Ok((Found::Declined(d), _)) => why.push(d.why),
                // Warned of here (the dry run's silent Ui shows none: its
                // plan says the failures through `build_reason`).
                Err(e) => {
                    let e = crate::error::chain(&e);
                    ui.warn(format!("cache {r}: {e}"));
                    failed.push((r.to_string(), e));
                }
            }
        }
        let why = if why.is_empty() && failed.is_empty() {
            format!("no caches in {}", self.config)
        } else {
            why.join("; ")
        };
        Ok(Choice::Build { why, failed })
    }

    /// The artifact `r` names, or with no tag, the one of this build in
    /// that repository: its own tag first, then every tag of the profile.
    fn look(&self, store: &Store, r: &Reference, want: &Want) -> Result<Found> {
        if r.tag.is_some() || r.digest.is_some() {
            return Ok(match examine(store, r, &self.trusted)? {
                Found::Candidate(c) => self.judge(c, want),
                d @ Found::Declined(_) => d,
            });
        }
        let own = want.inputs.tag();
        let prefix = format!("{}-", want.inputs.profile);
        let mut tags: Vec<String> = store
            .tags()?
            .into_iter()
            .filter(|t| t.starts_with(&prefix) && !t.ends_with(".sig"))
            .collect();
        // This build's own tag first, then the newest-looking others; a
        // repository of thousands of tags is not read manifest by manifest.
        tags.sort_by(|a, b| (*a != own).cmp(&(*b != own)).then(b.cmp(a)));
        let skipped = tags.len().saturating_sub(MAX_EXAMINED);
        tags.truncate(MAX_EXAMINED);
        let mut declined: Vec<Declined> = Vec::new();
        for t in &tags {
            let found = match examine(store, &r.with_tag(t), &self.trusted)? {
                Found::Candidate(c) => self.judge(c, want),
                d @ Found::Declined(_) => d,
            };
            match found {
                c @ Found::Candidate(_) => return Ok(c),
                Found::Declined(d) => declined.push(d),
            }
        }
        let (fix, mut said) = match declined.len() {
            0 => (
                Fix::NameAnother,
                format!("{r} has no build of {}", want.inputs.profile),
            ),
            1 => {
                let d = declined.remove(0);
                (d.fix, d.why)
            }
            n => (
                Fix::Differs,
                format!(
                    "none of the {n} builds of {} in {r} is this one (the first: {})",
                    want.inputs.profile, declined[0].why
                ),
            ),
        };
        if skipped > 0 {
            said.push_str(&format!(
                "; {skipped} more tags of {} there were not looked at (at most {MAX_EXAMINED} are): name one with {r}:TAG",
                want.inputs.profile
            ));
        }
        Ok(Declined::found(fix, said))
    }

    fn judge(&self, c: Box<Candidate>, want: &Want) -> Found {
        match want
            .inputs
            .accepts(&c.config.inputs, want.toolchain, &want.rocm_release)
        {
            Ok(()) => Found::Candidate(c),
            Err(why) => Declined::found(
                Fix::Differs,
                format!("{} is another build: {why}", c.reference),
            ),
        }
    }
}
