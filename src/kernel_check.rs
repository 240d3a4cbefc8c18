//! Proof on the user's own machine, with no GPU: the batch-norm kernel
//! texts of a library compiled for a target through comgr, as MIOpen
//! compiles them at run time. Each kernel in each of its variants, fp32,
//! with the sizes and the `MIO_BN_GFX*` flags a solver passes (the flag is
//! 1 when the target's name starts with its family, as the solvers decide).

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use crate::comgr::child::{self, Answer, Answers, Batch, Job};
use crate::embedded;
use crate::kernel_text::{self, Outcome};

/// One kernel text compiled for one target.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    /// Variants compiled, e.g. [0, 1, 3]; empty for a kernel without any.
    pub variants: Vec<u32>,
    /// The first failing variant's errors, if any failed.
    pub error: Option<String>,
}

impl Row {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// Where a batch is compiled.
pub trait Compiler {
    fn compile(&self, batch: &Batch) -> anyhow::Result<Answers>;
}

/// The comgr at `comgr`, loaded in a child process of `exe` (this
/// binary), each compile within `limit`.
pub struct Child {
    pub exe: PathBuf,
    pub comgr: PathBuf,
    pub limit: Duration,
    /// The comgr's version, once a child has loaded it.
    pub version: std::cell::Cell<Option<(usize, usize)>>,
}

impl Child {
    /// A child of this very program.
    pub fn new(comgr: PathBuf, limit: Duration) -> anyhow::Result<Child> {
        use anyhow::Context;
        Ok(Child {
            exe: std::env::current_exe().context("cannot find this program to run the compile")?,
            comgr,
            limit,
            version: std::cell::Cell::new(None),
        })
    }
}

impl Compiler for Child {
    fn compile(&self, batch: &Batch) -> anyhow::Result<Answers> {
        child::compile(&self.exe, &self.comgr, batch, self.limit)
    }
}

/// One compile at a time through the child, for the diagnosis, which
/// decides each next compile from the last answer. A child that cannot be
/// run, hangs past the limit or dies is an error, never a verdict.
impl crate::verdict::Compiler for Child {
    fn describe(&self) -> String {
        match self.version.get() {
            Some((a, b)) => format!("comgr {a}.{b} ({})", self.comgr.display()),
            None => format!("comgr ({})", self.comgr.display()),
        }
    }

    fn compile(&self, job: &crate::verdict::Job) -> anyhow::Result<crate::verdict::Compiled> {
        use crate::verdict::Compiled;
        let mut batch = Batch::default();
        let source = batch.add_source(job.name.to_owned(), job.text.to_vec());
        batch.add_job(Job {
            source,
            target: job.arch.to_owned(),
            options: crate::comgr::MIOPEN_OPTIONS
                .iter()
                .map(|o| (*o).to_owned())
                .chain(job.defines.iter().cloned())
                .collect(),
            after: None,
        });
        let a = Compiler::compile(self, &batch)?;
        self.version.set(Some(a.version));
        match a.answers.into_iter().next() {
            Some(Answer::Compiled(digest)) => Ok(Compiled::Object(digest.into_bytes())),
            Some(Answer::Failed(e)) => Ok(Compiled::Failed(e)),
            Some(Answer::Skipped) | None => anyhow::bail!(
                "comgr {} gave no answer for {} ({})",
                self.comgr.display(),
                job.name,
                job.arch
            ),
        }
    }
}

/// The batch-norm kernel texts of one library, added to a batch once
/// however many targets they are compiled for.
#[derive(Debug, Clone, Default)]
pub struct Texts {
    /// Each text's source in the batch, and its variants.
    texts: Vec<(usize, Vec<u32>)>,
}

/// The texts of `library` (a whole file's bytes) that make a batch-norm
/// decision and define a kernel, added to `batch`.
pub fn texts(batch: &mut Batch, library: &[u8]) -> anyhow::Result<Texts> {
    let (found, _) = embedded::locate(library)?;
    let mut out = Texts::default();
    for t in found {
        let text = &library[t.range.clone()];
        if is_batch_norm_kernel(text) {
            out.texts.push(add_text(batch, &t.name, text));
        }
    }
    Ok(out)
}

fn add_text(batch: &mut Batch, name: &str, text: &[u8]) -> (usize, Vec<u32>) {
    let variants = crate::verdict::variants(text);
    (
        batch.add_source(format!("{name}.cl"), text.to_vec()),
        variants,
    )
}

fn is_batch_norm_kernel(text: &[u8]) -> bool {
    memchr::memmem::find(text, b"__kernel").is_some()
        && matches!(
            kernel_text::fix(text, false),
            Ok(Outcome::Fixed { .. } | Outcome::AlreadyFixed)
        )
}

/// The jobs of some texts for one target, and how to read their answers.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Each kernel's name, variants, and its jobs in the batch.
    kernels: Vec<(String, Vec<u32>, Range<usize>)>,
}

/// Jobs compiling each of `texts` for `arch` in each of its variants, the
/// variants after a failing one skipped.
pub fn plan(batch: &mut Batch, texts: &Texts, arch: &str) -> Plan {
    let mut kernels = Vec::new();
    for (source, variants) in &texts.texts {
        let text = batch.sources[*source].text.clone();
        let runs: Vec<Option<u32>> = if variants.is_empty() {
            vec![None]
        } else {
            variants.iter().copied().map(Some).collect()
        };
        let first = batch.jobs.len();
        for v in runs {
            let mut options: Vec<String> = crate::comgr::MIOPEN_OPTIONS
                .iter()
                .map(|o| (*o).to_owned())
                .collect();
            options.extend(defines(&text, arch, v));
            let after = (batch.jobs.len() > first).then(|| batch.jobs.len() - 1);
            batch.add_job(Job {
                source: *source,
                target: arch.to_owned(),
                options,
                after,
            });
        }
        let name = batch.sources[*source]
            .name
            .trim_end_matches(".cl")
            .to_owned();
        kernels.push((name, variants.clone(), first..batch.jobs.len()));
    }
    Plan { kernels }
}

impl Plan {
    /// A row per kernel from the batch's `answers`: its first failing
    /// variant's errors, if any.
    pub fn rows(&self, answers: &[Answer]) -> Vec<Row> {
        self.kernels
            .iter()
            .map(|(name, variants, jobs)| {
                let error = jobs.clone().find_map(|j| {
                    let Some(Answer::Failed(e)) = answers.get(j) else {
                        return None;
                    };
                    let at = j - jobs.start;
                    Some(match variants.get(at) {
                        Some(v) => format!("variant {v}: {e}"),
                        None => e.clone(),
                    })
                });
                Row {
                    name: name.clone(),
                    variants: variants.clone(),
                    error,
                }
            })
            .collect()
    }
}

/// The batch-norm kernels of `library` (a whole file's bytes) compiled for
/// `arch`.
pub fn check(c: &impl Compiler, library: &[u8], arch: &str) -> anyhow::Result<Vec<Row>> {
    let mut batch = Batch::default();
    let found = texts(&mut batch, library)?;
    let plan = plan(&mut batch, &found, arch);
    Ok(plan.rows(&c.compile(&batch)?.answers))
}

/// One kernel text compiled for `arch` in each of its variants.
pub fn compile_text(c: &impl Compiler, name: &str, text: &[u8], arch: &str) -> anyhow::Result<Row> {
    let mut batch = Batch::default();
    let found = Texts {
        texts: vec![add_text(&mut batch, name, text)],
    };
    let plan = plan(&mut batch, &found, arch);
    let answers = c.compile(&batch)?.answers;
    Ok(plan.rows(&answers).remove(0))
}

/// What a batch-norm solver passes for `variant` in fp32: the one define
/// set the diagnosis compiles with too (`verdict::defines`).
fn defines(text: &[u8], arch: &str, variant: Option<u32>) -> Vec<String> {
    crate::verdict::defines(
        text,
        arch,
        &crate::verdict::Case {
            variant,
            ty: crate::verdict::Type::Fp32,
            nhwc: false,
        },
    )
}
