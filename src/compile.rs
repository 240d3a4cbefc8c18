//! The words a compile of a kernel is asked and answered in, below both
//! the compile child (`comgr`, which serves it) and the diagnosis
//! (`verdict`, which asks it), so that neither imports the other: a
//! kernel's language, the names that may be handed to a compiler, the job,
//! its answer, who answers it, and what a hipRTC log says of the standard
//! headers.

use serde::{Deserialize, Serialize};

/// The language of a kernel text: MIOpen compiles OpenCL through comgr,
/// HIP through hipRTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    #[default]
    OpenCl,
    Hip,
}

/// One compile asked of the compiler.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub name: &'a str,
    pub text: &'a [u8],
    pub lang: Lang,
    /// The headers a HIP text includes, by their include names (an
    /// OpenCL text has them inlined).
    pub headers: &'a [(String, Vec<u8>)],
    pub arch: &'a str,
    pub defines: &'a [String],
    /// The front end alone: the answer is the digest of an OpenCL text's
    /// LLVM IR before any pass (`comgr::Comgr::front_end_ocl`), or of a
    /// HIP text as hipRTC preprocesses it (`comgr::hiprtc::Hiprtc::
    /// front_end_hip`), which, with the same options and target, decides
    /// the code.
    pub front_end: bool,
    /// The digest this job's front end answered (hex), when it was asked
    /// first: the code is a function of it and of the options that are
    /// not a `-D`, so jobs of one front end are one compile, whatever
    /// their texts and defines (`compiler::job_key`).
    pub code_of: Option<[u8; 64]>,
}

/// What a compile gave: the code object, or the compiler's errors.
#[derive(Clone)]
pub enum Compiled {
    Object(Vec<u8>),
    Failed(String),
}

/// The compiler MIOpen loads (comgr for OpenCL), or a stand-in that
/// answers as it would.
pub trait Compiler {
    /// What it is, for a report: "comgr 2.4 (/path/libamd_comgr.so.2)".
    fn describe(&self) -> String;
    /// The compile's answer; an error when the compiler gave none (it
    /// hung past its limit, crashed, could not be started). That is no
    /// verdict on the kernel: the diagnosis stops, and nothing is kept.
    fn compile(&self, job: &Job) -> anyhow::Result<Compiled>;
    /// Several compiles, answered in order: a compiler in a child process
    /// answers them all from one start.
    fn compile_all(&self, jobs: &[Job]) -> anyhow::Result<Vec<Compiled>> {
        jobs.iter().map(|j| self.compile(j)).collect()
    }
    /// `jobs`, and after each answer the jobs `then` asks for it (given
    /// the answer's number and the answer), answered in turn: every
    /// answer, by number. The jobs are numbered from 0, and the jobs
    /// `then` returns after them, in the order it returns them. A
    /// compiler that runs jobs at once starts each one `then` asks for as
    /// soon as the answer it follows is in; this one answers round after
    /// round.
    fn compile_then<'a>(
        &self,
        jobs: &[Job<'a>],
        then: &mut dyn FnMut(usize, &Compiled) -> Vec<Job<'a>>,
    ) -> anyhow::Result<Vec<Compiled>> {
        let mut answers = self.compile_all(jobs)?;
        let mut from = 0;
        while from < answers.len() {
            let round: Vec<Job<'a>> = (from..answers.len())
                .flat_map(|i| then(i, &answers[i]))
                .collect();
            from = answers.len();
            answers.extend(self.compile_all(&round)?);
        }
        Ok(answers)
    }
}

/// Why `name` (from a library) is not a plain relative name, the only kind
/// handed to a compiler: comgr writes each header it is handed under
/// `<tmp>/comgr-XXXX/include/<name>`, and clang opens an included name
/// from its directory, so `..`, a leading `/`, a NUL or a backslash would
/// lead it elsewhere. None: the name is plain.
pub fn unplain(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("an empty name")
    } else if name.contains('\0') {
        Some("a name with a NUL in it")
    } else if name.contains('\\') {
        Some("a name with a backslash in it")
    } else if name.starts_with('/') {
        Some("an absolute name")
    } else if name.split('/').any(|c| c == "..") {
        Some("a name with a \"..\" component")
    } else {
        None
    }
}

/// Whether hipRTC failed because the C++ standard headers are missing,
/// which MIOpen's users meet (`'type_traits' file not found`): hipRTC
/// compiles with the host's libstdc++ headers.
pub fn missing_std_header(log: &str) -> Option<&str> {
    let i = log.find("' file not found")?;
    let name = &log[..i];
    let name = &name[name.rfind('\'')? + 1..];
    (!name.contains('.') && !name.contains('/')).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_relative_name_is_handed_to_a_compiler() {
        for plain in ["configuration.hpp", "miopen/bn.hpp", "a..b.hpp", "./x.h"] {
            assert_eq!(unplain(plain), None, "{plain}");
        }
        assert_eq!(unplain(""), Some("an empty name"));
        assert_eq!(unplain("../../x"), Some("a name with a \"..\" component"));
        assert_eq!(unplain("a/../b"), Some("a name with a \"..\" component"));
        assert_eq!(unplain("/abs/x"), Some("an absolute name"));
        assert_eq!(unplain("x\0.hpp"), Some("a name with a NUL in it"));
        assert_eq!(unplain("..\\x"), Some("a name with a backslash in it"));
    }

    #[test]
    fn a_missing_standard_header_is_named() {
        let log = "/tmp/comgr-1/input/k.cpp:3:10: fatal error: 'type_traits' file not found";
        assert_eq!(missing_std_header(log), Some("type_traits"));
        assert_eq!(
            missing_std_header("fatal error: 'configuration.hpp' file not found"),
            None
        );
        assert_eq!(missing_std_header("error: not a valid operand."), None);
    }
}
