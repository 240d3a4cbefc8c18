//! `cargo xtask bench --only libraries`: doctor reading the GPU libraries
//! torch loads, with a 1 GB librocblas.so-shaped file: a real library built
//! by clang's HIP mode whose `.hip_fatbin` section is moved to the end of
//! the file and made 1 GB of 660 offload bundles (Debian's librocblas.so.4.4
//! has 660 code objects in 1.05 GB), written sparse: each bundle's header
//! and code-object ELF header, holes between. Warm (the cache has the
//! file's stamp) against the same doctor with the small library; the cold
//! read (an empty cache) is in the note.

use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use super::measure::{Row, quiet, time, time_after};

const SIZE: u64 = 1 << 30;
const BUNDLES: u64 = 660;

/// A ROCm torch whose libtorch_hip.so (gfx1010) loads its librocblas.so,
/// an RX 5600 XT's sysfs, and a home whose cache doctor uses.
pub(super) struct Torch {
    pub(super) torch: rdna1_testkit::FakeTorch,
    /// A librocblas.so for gfx1010 and gfx1030, not yet in torch/lib.
    pub(super) small_rocblas: std::path::PathBuf,
    pub(super) home: std::path::PathBuf,
    sysfs: std::path::PathBuf,
}

impl Torch {
    pub(super) fn new(cx: &super::Bench, dir: &Path) -> Result<Torch> {
        std::fs::create_dir_all(dir)?;
        let torch = rdna1_testkit::FakeTorch::create(
            &dir.join("site"),
            cx.runtime,
            rdna1_testkit::TorchKind::Rocm,
            "2.6.0+rocm6.4",
            "6.4.43484-123eb5128",
        );
        let small = rdna1_testkit::fat_library(dir, &["gfx1010", "gfx1030"]);
        let small_rocblas = dir.join("librocblas.so");
        std::fs::rename(&small, &small_rocblas)?;
        let lib = torch.lib.display().to_string();
        let hip = rdna1_testkit::fat_library_linking(
            dir,
            &["gfx1010"],
            &[
                "-L",
                &dir.display().to_string(),
                "-L",
                &lib,
                "-lrocblas",
                "-lMIOpen",
                "-lamdhip64",
                "-Wl,-rpath,$ORIGIN",
            ],
        );
        std::fs::copy(hip, torch.lib.join("libtorch_hip.so"))?;
        Ok(Torch {
            torch,
            small_rocblas,
            home: dir.join("home"),
            sysfs: rdna1_testkit::gpus("rx5600xt-gfx1010"),
        })
    }

    /// doctor on this torch, with this home's cache: what it printed.
    pub(super) fn doctor(&self, bin: &Path) -> Command {
        let mut c = Command::new(bin);
        c.args(["doctor", "--need-space", "0", "--torch-dir"])
            .arg(&self.torch.dir)
            .env("HOME", &self.home)
            .env_remove("XDG_CACHE_HOME")
            .env("RDNA1_PATCH_SYSFS", &self.sysfs);
        c
    }
}

pub(super) fn rows(cx: &super::Bench) -> Result<Vec<Row>> {
    eprintln!("bench: doctor with a 1 GB librocblas.so");
    let fx = Torch::new(cx, &cx.dir.join("libraries"))?;
    let (torch, small_rocblas) = (&fx.torch, &fx.small_rocblas);
    let cache = fx.home.join(".cache/rdna1-patch/gpucode");
    let doctor = || -> Result<()> {
        let out = fx.doctor(cx.bin).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !text.contains("librocblas.so at") {
            anyhow::bail!("doctor read no librocblas.so: {text}");
        }
        Ok(())
    };
    std::fs::copy(small_rocblas, torch.lib.join("librocblas.so"))?;
    let reference = time(cx.runs, doctor)?;
    let big = torch.lib.join("librocblas.so");
    grow(&big).context("cannot make the 1 GB library")?;
    let check = quiet(Command::new("du").arg("-k").arg(&big))?;
    eprintln!(
        "bench: {} is {} bytes, {} KiB on disk",
        big.display(),
        std::fs::metadata(&big)?.len(),
        check.split_whitespace().next().unwrap_or("?")
    );
    let cold = time_after(
        cx.runs,
        || {
            let _ = std::fs::remove_dir_all(&cache);
            Ok(())
        },
        doctor,
    )?;
    let ours = time(cx.runs, doctor)?;
    // The warm runs read the cache: it must hold the library's entry.
    let kept = std::fs::read_dir(&cache)
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("lib-"))
        })
        .unwrap_or(false);
    if !kept {
        anyhow::bail!("doctor kept nothing in {}", cache.display());
    }
    Ok(vec![Row {
        name: "warm `doctor` with a 1 GB librocblas.so",
        why: "".into(),
        met: ours.median < 0.3,
        note: format!(
            "{:.0} ms warm, {:.0} ms with an empty cache (660 bundles' headers read); {:.0} ms with the same library at {} KB",
            ours.median * 1e3,
            cold.median * 1e3,
            reference.median * 1e3,
            std::fs::metadata(small_rocblas)?.len() / 1000
        ),
        ours,
        reference,
        reference_name: "the same `doctor` with a small librocblas.so".into(),
        target: "< 0.3 s".into(),
    }])
}

/// Make `path` (a clang-built fat library) 1 GiB: its `.hip_fatbin`
/// section header pointed at a new section from the old end of the file
/// to 1 GiB, holding `BUNDLES` offload bundles (each one entry for gfx1010,
/// its code object a copy of the library's own first one's ELF header),
/// the rest holes.
fn grow(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path)?;
    let elf = goblin::elf::Elf::parse(&bytes)?;
    let (index, old) = elf
        .section_headers
        .iter()
        .enumerate()
        .find(|(_, s)| elf.shdr_strtab.get_at(s.sh_name) == Some(".hip_fatbin"))
        .context("no .hip_fatbin")?;
    let old = &bytes[old.sh_offset as usize..(old.sh_offset + old.sh_size) as usize];
    let code = rdna1_patch::fatbin::entries(old)
        .into_iter()
        .find(|(name, _)| name.contains("amdgcn"))
        .map(|(_, b)| b[..64].to_vec())
        .context("no code object")?;
    let start = (bytes.len() as u64).next_multiple_of(4096);
    let size = SIZE - start;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.set_len(SIZE)?;
    let shdr = elf.header.e_shoff + index as u64 * u64::from(elf.header.e_shentsize);
    // sh_offset and sh_size of an Elf64_Shdr: bytes 24 and 32.
    f.write_all_at(&start.to_le_bytes(), shdr + 24)?;
    f.write_all_at(&size.to_le_bytes(), shdr + 32)?;
    let step = (size / BUNDLES) / 4096 * 4096;
    let name = b"hipv4-amdgcn-amd-amdhsa--gfx1010";
    for i in 0..BUNDLES {
        let at = start + i * step;
        let mut b = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
        b.extend(1u64.to_le_bytes());
        b.extend(4096u64.to_le_bytes());
        b.extend((step - 4096).to_le_bytes());
        b.extend((name.len() as u64).to_le_bytes());
        b.extend(name);
        f.seek(SeekFrom::Start(at))?;
        f.write_all(&b)?;
        f.write_all_at(&code, at + 4096)?;
    }
    f.sync_all()?;
    Ok(())
}
