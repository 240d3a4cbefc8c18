//! The parent's side of one compile child, kept warm: started and loaded
//! once, then asked job after job, each within the limit, the texts sent
//! once each. A child that hangs, dies or answers what is no answer is
//! stopped, and the error says so; it asks nothing more.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};

use super::{Answer, CHILD_ENV, CHILD_PATH, Compilers, Hello, Job, Request, Source, Work};
use crate::error::hint;
use crate::proc::{Heard, Served};

/// One running compile child.
pub struct Warm {
    served: Served,
    /// Its cwd, HOME and TMPDIR, removed after it (declared after
    /// `served`: dropped once the child has ended), or by a Ctrl-C that
    /// ends the run while the child is idle.
    _home: (tempfile::TempDir, crate::interrupt::RemovedAtExit),
    comgr: PathBuf,
    pub version: (usize, usize),
    pub hiprtc: Option<(usize, usize)>,
    /// Whether it loaded a hipRTC (a HIP text needs one).
    pub with_hiprtc: bool,
    /// The ids of the texts it holds.
    sent: HashSet<usize>,
    limit: Duration,
    /// Stopped or ended: it is asked nothing more.
    gone: bool,
}

impl Warm {
    /// Start a child of `exe` (this binary) loading `compilers`, within
    /// `limit`.
    pub fn start(exe: &Path, compilers: &Compilers, limit: Duration) -> Result<Warm> {
        let comgr = compilers.comgr.clone();
        let run_as = crate::owner::sudo_identity()?;
        let header = serde_json::to_vec(&Request {
            compilers: compilers.clone(),
            trusted: crate::owner::invoking_user(),
            run_as,
        })?;
        let home = super::own_dir(run_as)?;
        let mut cmd = std::process::Command::new(exe);
        cmd.env_clear()
            .env(CHILD_ENV, "1")
            .env("HOME", home.path())
            .env("TMPDIR", home.path())
            .env("PATH", CHILD_PATH)
            .current_dir(home.path());
        // The tests' failpoints (cargo feature `failpoints`) reach it too.
        #[cfg(feature = "failpoints")]
        if let Some(f) = std::env::var_os("FAILPOINTS") {
            cmd.env("FAILPOINTS", f);
        }
        let mut served = Served::start(&cmd, exe)?;
        let guard = crate::interrupt::ChildGroup::new(served.pid());
        // The tests' Ctrl-C at the instant a compile child runs (issue 72).
        #[cfg(feature = "failpoints")]
        fail::eval("interrupt-while-compiling", |_| {
            // SAFETY: raise(3) only sends a signal to this process.
            unsafe { libc::raise(libc::SIGINT) };
            std::thread::sleep(Duration::from_millis(300));
        });
        served.send(&header);
        let heard = served.hear(limit);
        drop(guard);
        let hello = match &heard {
            Heard::Line(l) => serde_json::from_str::<Hello>(l).ok(),
            Heard::Ended | Heard::Silent => None,
        };
        let (version, hiprtc) = match hello {
            Some(Hello::Loaded { comgr, hiprtc }) => (comgr, hiprtc),
            Some(Hello::Refused { error, help }) => {
                return Err(match help {
                    Some(help) => hint(error, help),
                    None => anyhow!(error),
                });
            }
            None => {
                let silent = matches!(heard, Heard::Silent);
                // A line that is no hello comes from a child still alive.
                let end = match heard {
                    Heard::Ended => served.finish(),
                    Heard::Line(_) | Heard::Silent => served.stop(),
                };
                stopped_by_signal()?;
                if silent {
                    bail!(
                        "comgr {} did not load within {} s, and was stopped",
                        comgr.display(),
                        limit.as_secs()
                    );
                }
                bail!(
                    "comgr {} could not be loaded{}",
                    comgr.display(),
                    super::ended(&end)
                );
            }
        };
        Ok(Warm {
            served,
            _home: {
                let at_exit = crate::interrupt::RemovedAtExit::new(home.path());
                (home, at_exit)
            },
            comgr,
            version,
            hiprtc,
            with_hiprtc: compilers.hiprtc.is_some(),
            sent: HashSet::new(),
            limit,
            gone: false,
        })
    }

    /// Hand it the text `id` stands for, unless it holds it.
    pub fn send_source(&mut self, id: usize, source: &Source) -> Result<()> {
        if self.sent.contains(&id) {
            return Ok(());
        }
        let line = serde_json::to_vec(&Work::Source {
            id,
            source: source.clone(),
        })?;
        // A child that reads no more says how it ended at the next ask.
        self.served.send(&line);
        self.sent.insert(id);
        Ok(())
    }

    /// Its answer to `job` (whose text was sent), which `at` names for an
    /// error ("NAME for TARGET").
    pub fn ask(&mut self, job: &Job, at: &str) -> Result<Answer> {
        if self.gone {
            bail!("comgr {} was stopped before {at}", self.comgr.display());
        }
        let line = serde_json::to_vec(&Work::Job(job.clone()))?;
        let guard = crate::interrupt::ChildGroup::new(self.served.pid());
        // A Ctrl-C just before the group was registered reached no child.
        if let Some(sig) = crate::interrupt::interrupted() {
            drop(guard);
            self.gone = true;
            self.served.stop();
            return Err(crate::interrupt::stopped("rdna1-patch", sig));
        }
        self.served.send(&line);
        let heard = self.served.hear(self.limit);
        drop(guard);
        // Silent, or a line that is no answer: the child is alive, and
        // stopped; ended: how it ended.
        let silent = matches!(heard, Heard::Silent);
        let stop = match heard {
            Heard::Line(l) => match serde_json::from_str::<Answer>(&l) {
                Ok(a) => return Ok(a),
                Err(_) => true,
            },
            Heard::Ended => false,
            Heard::Silent => true,
        };
        self.gone = true;
        let end = match stop {
            true => self.served.stop(),
            false => self.served.finish(),
        };
        stopped_by_signal()?;
        if silent {
            return Err(hint(
                format!(
                    "comgr {} did not finish compiling {at} within {} s, and was stopped",
                    self.comgr.display(),
                    self.limit.as_secs()
                ),
                "a compile takes seconds: this comgr hangs on MIOpen's kernels (--timeout SECS gives each compile longer)",
            ));
        }
        bail!(
            "comgr {} failed compiling {at}{}",
            self.comgr.display(),
            super::ended(&end)
        )
    }
}

/// A Ctrl-C (or SIGTERM, SIGHUP) passed on to the child is what ended
/// it: the run is stopped, said as such.
fn stopped_by_signal() -> Result<()> {
    match crate::interrupt::interrupted() {
        Some(sig) => Err(crate::interrupt::stopped("rdna1-patch", sig)),
        None => Ok(()),
    }
}
