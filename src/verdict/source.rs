//! The batch-norm kernel texts of a library as the compiler is handed
//! them: an OpenCL text whole (MIOpen's build inlines its headers), a HIP
//! text with every header it includes, by include name, as MIOpen hands
//! them to hipRTC.

use serde::{Deserialize, Serialize};

use super::{Case, Job, cases, defines};
use crate::embedded::{self, Text};

/// The language of a kernel text: MIOpen compiles OpenCL through comgr,
/// HIP through hipRTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    #[default]
    OpenCl,
    Hip,
}

/// A batch-norm kernel text of a library: where its bytes are, and for a
/// HIP text where each header it includes is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub name: String,
    pub range: std::ops::Range<usize>,
    pub lang: Lang,
    pub headers: Vec<(String, std::ops::Range<usize>)>,
}

impl Source {
    /// Its headers' bytes in `library`, by include name.
    pub fn headers_in(&self, library: &[u8]) -> Vec<(String, Vec<u8>)> {
        self.headers
            .iter()
            .map(|(n, r)| (n.clone(), library[r.clone()].to_vec()))
            .collect()
    }

    /// Whether `a` and `b` (a library before and after an edit) differ in
    /// this text or a header it includes.
    pub(super) fn differs(&self, a: &[u8], b: &[u8]) -> bool {
        std::iter::once(&self.range)
            .chain(self.headers.iter().map(|(_, r)| r))
            .any(|r| a.get(r.clone()) != b.get(r.clone()))
    }
}

/// The batch-norm kernel texts of `library` (a whole file's bytes): the
/// OpenCL texts that define a kernel whose name says batch norm, and the
/// HIP ones, each with the headers it includes.
pub fn kernels(library: &[u8]) -> anyhow::Result<Vec<Source>> {
    let (texts, _) = embedded::locate(library)?;
    let mut out = Vec::new();
    for t in &texts {
        let text = &library[t.range.clone()];
        if !is_batch_norm(&t.name, text) {
            continue;
        }
        let lang = match memchr::memmem::find(text, b"__global__").is_some() {
            true => Lang::Hip,
            false => Lang::OpenCl,
        };
        let headers = match lang {
            Lang::Hip => includes(&texts, library, t)?,
            Lang::OpenCl => Vec::new(),
        };
        out.push(Source {
            name: t.name.clone(),
            range: t.range.clone(),
            lang,
            headers,
        });
    }
    Ok(out)
}

fn is_batch_norm(name: &str, text: &[u8]) -> bool {
    let find = |n: &[u8]| memchr::memmem::find(text, n).is_some();
    (find(b"__kernel") || find(b"__global__"))
        && !name.ends_with("_INCLUDE")
        && (name.to_ascii_uppercase().contains("BATCHNORM") || find(b"BatchNorm"))
}

/// The headers a HIP text includes (`#include "name"`), and theirs, as
/// MIOpen hands them to hipRTC: by include name, each the embedded
/// `MIOPEN_KERNEL_<STEM>_INCLUDE`. One it includes and the library lacks is
/// left to hipRTC, which says so, as it would at run time.
fn includes(
    texts: &[Text],
    library: &[u8],
    kernel: &Text,
) -> anyhow::Result<Vec<(String, std::ops::Range<usize>)>> {
    let mut out: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    let mut todo = vec![kernel.range.clone()];
    while let Some(range) = todo.pop() {
        let text = String::from_utf8_lossy(&library[range]);
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix('#') else {
                continue;
            };
            let Some(rest) = rest.trim_start().strip_prefix("include") else {
                continue;
            };
            let Some(name) = rest
                .trim()
                .strip_prefix('"')
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            if out.iter().any(|(n, _)| n == name) {
                continue;
            }
            let stem = std::path::Path::new(name)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(name);
            let symbol: String = stem
                .chars()
                .map(|c| match c.is_ascii_alphanumeric() {
                    true => c.to_ascii_uppercase(),
                    false => '_',
                })
                .collect();
            let symbol = format!("MIOPEN_KERNEL_{symbol}_INCLUDE");
            if let Some(h) = texts.iter().find(|t| t.name == symbol) {
                out.push((name.to_owned(), h.range.clone()));
                todo.push(h.range.clone());
            }
        }
    }
    Ok(out)
}

/// One kernel text with its headers, as compiled: owned, so that a copy
/// can be changed (the DPP instructions blanked) and compiled again.
pub struct Unit {
    pub name: String,
    pub lang: Lang,
    pub text: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Unit {
    pub fn of(s: &Source, library: &[u8]) -> Unit {
        Unit {
            name: s.name.clone(),
            lang: s.lang,
            text: library[s.range.clone()].to_vec(),
            headers: s.headers_in(library),
        }
    }

    /// All it reads: the text and its headers, one after the other, for
    /// the cases and defines a solver passes.
    fn read(&self) -> Vec<u8> {
        let mut all = self.text.clone();
        for (_, h) in &self.headers {
            all.push(b'\n');
            all.extend_from_slice(h);
        }
        all
    }

    pub fn cases(&self) -> Vec<Case> {
        cases(&self.read())
    }

    /// The solver's defines for `case`; a HIP text's vector types are
    /// HIP's names (`FP_TYPE4`), as the solvers spell them for HIP.
    pub fn defines(&self, arch: &str, case: &Case) -> Vec<String> {
        let mut d = defines(&self.read(), arch, case);
        if self.lang == Lang::Hip {
            for v in &mut d {
                if v.starts_with("-DMIOPEN_READ_TYPE=") {
                    *v = "-DMIOPEN_READ_TYPE=FP_TYPE4".into();
                } else if v.starts_with("-DMIOPEN_PREC_READ_TYPE=") {
                    *v = "-DMIOPEN_PREC_READ_TYPE=FP_TYPE_PREC4".into();
                }
            }
        }
        d
    }

    /// A copy with every instruction with a `row_bcast` operand blanked,
    /// in the text and its headers (same length); None when there is none.
    /// Debian 12's comgr reports a rejected operand as "cannot compile
    /// inline asm", no more: whether that copy compiles says why.
    pub(super) fn without_row_bcast(&self) -> Option<Unit> {
        let mut b = Unit {
            name: self.name.clone(),
            lang: self.lang,
            text: self.text.clone(),
            headers: self.headers.clone(),
        };
        let mut any = super::blank_row_bcast(&mut b.text);
        for (_, h) in &mut b.headers {
            any |= super::blank_row_bcast(h);
        }
        any.then_some(b)
    }

    pub(super) fn job<'a>(&'a self, arch: &'a str, defines: &'a [String]) -> Job<'a> {
        Job {
            name: &self.name,
            text: &self.text,
            lang: self.lang,
            headers: &self.headers,
            arch,
            defines,
        }
    }
}
