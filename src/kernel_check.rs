//! Proof on the user's own machine, with no GPU: the batch-norm kernel
//! texts of a library compiled for a target through comgr, as MIOpen
//! compiles them at run time. Each kernel in each of its variants, fp32,
//! with the sizes and the `MIO_BN_GFX*` flags a solver passes (the flag is
//! 1 when the target's name starts with its family, as the solvers decide).

use crate::comgr::Comgr;
use crate::embedded::{self, Text};
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

/// The batch-norm kernels of `library` (a whole file's bytes) compiled for
/// `arch`: the texts that make a batch-norm decision and define a kernel.
pub fn check(comgr: &Comgr, library: &[u8], arch: &str) -> anyhow::Result<Vec<Row>> {
    let (texts, _) = embedded::locate(library)?;
    Ok(texts
        .into_iter()
        .filter(|t| is_batch_norm_kernel(&library[t.range.clone()]))
        .map(|t| compile(comgr, &t, &library[t.range.clone()], arch))
        .collect())
}

fn is_batch_norm_kernel(text: &[u8]) -> bool {
    memchr::memmem::find(text, b"__kernel").is_some()
        && matches!(
            kernel_text::fix(text, false),
            Ok(Outcome::Fixed { .. } | Outcome::AlreadyFixed)
        )
}

/// One kernel text compiled for `arch` in each of its variants.
pub fn compile_text(comgr: &Comgr, name: &str, text: &[u8], arch: &str) -> Row {
    compile(
        comgr,
        &Text {
            name: name.to_owned(),
            range: 0..text.len(),
        },
        text,
        arch,
    )
}

fn compile(comgr: &Comgr, t: &Text, text: &[u8], arch: &str) -> Row {
    let mut variants: Vec<u32> = String::from_utf8_lossy(text)
        .match_indices("MIO_BN_VARIANT")
        .filter_map(|(i, _)| {
            let rest = text.get(i + 14..)?;
            let rest = std::str::from_utf8(rest)
                .ok()?
                .trim_start()
                .strip_prefix("==")?;
            rest.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect();
    variants.sort_unstable();
    variants.dedup();
    let runs: Vec<Option<u32>> = if variants.is_empty() {
        vec![None]
    } else {
        variants.iter().copied().map(Some).collect()
    };
    let mut error = None;
    for v in runs {
        if let Err(e) = comgr.compile_ocl(
            &format!("{}.cl", t.name),
            text,
            arch,
            &defines(text, arch, v),
        ) {
            error = Some(match v {
                Some(v) => format!("variant {v}: {e}"),
                None => e,
            });
            break;
        }
    }
    Row {
        name: t.name.clone(),
        variants,
        error,
    }
}

/// What a batch-norm solver passes: fp32, sizes that select `variant`
/// (N=32, C=64, a 1024 group; HW <= 512 for 0, > 1024 for 1 and 2,
/// between for 3), and each `MIO_BN_GFX<n>X` the text names, 1 when
/// `arch` is of that family.
fn defines(text: &[u8], arch: &str, variant: Option<u32>) -> Vec<String> {
    let hw: u64 = match variant {
        Some(0) => 256,
        Some(1 | 2) => 4096,
        _ => 1024,
    };
    let grp = if variant.is_some() { 1024 } else { 256 };
    let nhw = 32 * hw;
    let mut d: Vec<String> = [
        "MIO_SAVE_MEAN_VARIANCE=1",
        "MIO_RUNNING_RESULT=1",
        "MIO_BN_N=32",
        "MIO_BN_C=64",
        "MIO_BN_GRP1=1",
        "MIO_BN_GRP2=1",
        "MIO_BN_NGRPS=4",
        "MIO_BN_USESAVED=1",
        "MIO_WAVESIZE=64",
        "MIO_LAYOUT_NHWC=0",
        "MIO_BN_CBA_WRITE_INTERMEDIATE=0",
        "MIOPEN_YES_ACTIV=1",
        "MIOPEN_NRN_OP_ID=3",
        "MIOPEN_READ_UNIT=4",
        "MIOPEN_READ_TYPE=_FLOAT4",
        "MIOPEN_USE_FP16=0",
        "MIOPEN_USE_FP32=1",
        "MIOPEN_USE_FPMIX=0",
    ]
    .iter()
    .map(|s| format!("-D{s}"))
    .collect();
    d.extend([
        format!("-DMIO_BN_HW={hw}"),
        format!("-DMIO_BN_NHW={nhw}"),
        format!("-DMIO_BN_CHW={}", 64 * hw),
        format!("-DMIO_BN_NCHW={}", 32 * 64 * hw),
        format!("-DMIO_BN_NHW_FLOAT={}", (nhw as f32).to_bits()),
        format!("-DMIO_BN_GRP0={grp}"),
        format!("-DMIO_BN_LDS_SIZE={grp}"),
        format!("-DMIO_BN_LDSGCN_SIZE={}", grp / 64),
    ]);
    if let Some(v) = variant {
        d.push(format!("-DMIO_BN_VARIANT={v}"));
    }
    let mut families: Vec<String> = String::from_utf8_lossy(text)
        .match_indices("MIO_BN_GFX")
        .filter_map(|(i, _)| {
            let digits: String = text[i + 10..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .map(|b| *b as char)
                .collect();
            (text.get(i + 10 + digits.len()) == Some(&b'X') && !digits.is_empty()).then_some(digits)
        })
        .collect();
    families.sort();
    families.dedup();
    for f in families {
        let on = arch.strip_prefix("gfx").is_some_and(|a| a.starts_with(&f));
        d.push(format!("-DMIO_BN_GFX{f}X={}", u8::from(on)));
    }
    d
}
