//! The third way to make a prefix, beside building and pulling: from the
//! library the user already has. Torch's own libMIOpen is copied, its
//! batch-norm kernel texts are fixed where they lie (same length, see
//! `embedded`), and the result is written as any prefix is: MD5SUMS, and a
//! provenance naming the source library's SHA-256 and every text changed.
//! From there the journaled swap, verify, status and rollback are the ones
//! a build goes through. No SDK, no compiler, seconds instead of an hour.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::builder::profile::Profile;
use crate::checksum;
use crate::embedded::{self, FoundBy, Text};
use crate::error::hint;
use crate::fsutil::At;
use crate::fsutil::Stamp;
use crate::kernel_text;
use crate::prefix::{self, ProvInPlace, ProvText, Provenance};
use crate::ui::Ui;

/// What to fix and where the prefix goes.
pub struct Request<'a> {
    /// The library torch loads (its real file).
    pub library: PathBuf,
    pub prefix: PathBuf,
    pub profile: &'a Profile,
    /// The ROCm version of torch's own stack (what the library is built for).
    pub rocm: String,
    pub jobs: usize,
}

/// What was made. The library's MD5 and ELF are those of the bytes just
/// written and hashed, so the install need not read the prefix again.
pub struct Derived {
    pub changed: Vec<(String, usize)>,
    pub texts: usize,
    pub found_by: FoundBy,
    pub files: usize,
    pub library: PathBuf,
    pub md5: String,
    pub elf: crate::elf::Library,
    /// What the one read of the source established (its MD5, whether it
    /// carries our markers, its stamp), so the swap need not read it again.
    pub source: checksum::Known,
    /// The library's stamp as this run wrote it, `md5` taken of the bytes
    /// written: the swap links it in unread while the stamp holds.
    pub written: Stamp,
}

impl Derived {
    /// What was done, in a line: "4 of 5 kernel texts fixed (found by
    /// dynamic symbols), 12 files with MD5SUMS".
    pub fn summary(&self) -> String {
        format!(
            "{} of {} kernel texts fixed (found by {}), {} files with MD5SUMS",
            self.changed.len(),
            self.texts,
            self.found_by.name(),
            self.files
        )
    }
}

/// The library as read, and as it would be fixed.
pub struct Planned {
    pub original: Vec<u8>,
    pub fixed: Vec<u8>,
    pub edit: embedded::Edit,
    /// The library's stamp before it was read, and its permission bits.
    pub stamp: Stamp,
    pub mode: u32,
    /// How the fix was proven (or that it was not).
    pub proof: String,
}

/// The library's bytes with every batch-norm text fixed, and what was done;
/// nothing is written. An error says what is wrong with the library for
/// this fix and what to do instead.
/// What proves an edit: given the library's bytes and the edited ones, a
/// line saying how it was proven, or the error why it is not (nothing is
/// then written).
pub type Prover<'a> = &'a dyn Fn(&[u8], &[u8]) -> Result<String>;

/// `read`: the library's bytes as the diagnosis read them, with its stamp
/// before that read, so that a 400 MB library is read once; used only
/// while the file still has that stamp. `skip`: the texts not to edit
/// (kernels the diagnosis could not judge).
pub fn plan(
    library: &Path,
    prover: Option<Prover>,
    read: Option<(Stamp, Vec<u8>)>,
    skip: &[String],
) -> Result<Planned> {
    let meta = std::fs::metadata(library).at("read", library)?;
    let original = match read {
        Some((stamp, bytes)) if stamp == Stamp::of(&meta) => bytes,
        _ => crate::elf::read_file(library)?,
    };
    let fix = embedded::fix_except(&original, skip).with_context(|| {
        format!(
            "{} is not a library whose kernel texts can be read",
            library.display()
        )
    })?;
    let (fixed, edit) = match fix {
        embedded::Fix::Fixed { bytes, edit } => (bytes, edit),
        embedded::Fix::Refused(refused) => {
            return Err(hint(
                format!("cannot fix {} in place: {refused}", library.display()),
                "this MIOpen's kernels are not of a shape rdna1-patch knows, so nothing was changed: build the profile from source instead (`rdna1-patch build miopen`), and report the kernel named above",
            ));
        }
    };
    if edit.changed.is_empty() {
        return Err(hint(
            format!(
                "{} fails in batch norm, but none of its kernel texts decides on the DPP reduction in a way the fix knows ({} texts found by {}); nothing was changed",
                library.display(),
                edit.texts,
                edit.found_by.name()
            ),
            "it is not a MIOpen whose batch norm this fix knows: build the profile from source instead (`rdna1-patch build miopen`), and report the library",
        ));
    }
    let proof = match prover {
        Some(prove) => prove(&original, &fixed)?,
        None => "unproven: installed without a compiler to prove it (--unproven)".to_owned(),
    };
    Ok(Planned {
        original,
        fixed,
        edit,
        stamp: Stamp::of(&meta),
        mode: std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777,
        proof,
    })
}

/// Make the prefix from `req.library`, fixed as `planned` (its proven
/// edit).
pub fn derive(req: &Request, planned: Planned, ui: &Ui) -> Result<Derived> {
    let Planned {
        original,
        fixed,
        edit,
        stamp,
        mode,
        proof,
    } = planned;
    let elf = crate::elf::parse(&fixed)?;
    let soname = elf.soname.clone().ok_or_else(|| {
        hint(
            format!("{} has no SONAME", req.library.display()),
            "it is not the libMIOpen torch loads; nothing was changed",
        )
    })?;
    let found_by = edit.found_by;
    for (t, n) in &edit.changed {
        let decisions = crate::output::count(*n, "batch-norm decision", "batch-norm decisions");
        ui.stage("Fixed", format!("{} ({decisions})", t.name));
    }
    let texts = edit
        .changed
        .iter()
        .map(|(t, n)| record(t, *n, &original, &fixed))
        .collect();
    let staging = prefix::begin(&req.prefix)?;
    let rel = format!("lib/{soname}");
    let staged_root = staging.join(req.prefix.strip_prefix("/").unwrap_or(&req.prefix));
    let result = (|| -> Result<_> {
        let staged_lib = staged_root.join(&rel);
        crate::fsutil::create_dir_all(staged_lib.parent().expect("lib/"))?;
        let (sha256, source, md5) = hash_and_write(&original, &fixed, stamp, &staged_lib, mode)?;
        let written = Stamp::read_held(&staged_lib)?;
        let mut prov = provenance(req, sha256, found_by, texts);
        if let Some(p) = prov.in_place.as_mut() {
            p.proof = Some(proof.clone());
        }
        prov.library.soname = soname.clone();
        let known = [checksum::Entry {
            md5,
            path: rel.clone(),
        }];
        let installed = prefix::commit(
            &req.prefix,
            &staging,
            &[staged_lib],
            prov,
            None,
            &known,
            req.jobs,
        )?;
        Ok((installed, source, written))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    let (installed, source, written) =
        result.map_err(|e| prefix::as_installed(e, &staged_root, &req.prefix))?;
    let md5 = installed
        .entries
        .iter()
        .find(|e| e.path == rel)
        .map(|e| e.md5.clone())
        .context("the prefix's MD5SUMS does not list its library")?;
    elf.check_shared_object(&req.library, &soname)?;
    Ok(Derived {
        changed: edit
            .changed
            .iter()
            .map(|(t, n)| (t.name.clone(), *n))
            .collect(),
        texts: edit.texts,
        found_by,
        files: installed.entries.len(),
        library: req.prefix.join(rel),
        md5,
        elf,
        source,
        written,
    })
}

/// The source's SHA-256 and what is known of it, and the fixed library
/// written to `to` with its MD5. Hashing is what this route spends its
/// time on. The copy keeps the source's mode, so the swap can link it in
/// (`txn::write_temp`).
fn hash_and_write(
    original: &[u8],
    fixed: &[u8],
    stamp: Stamp,
    to: &Path,
    mode: u32,
) -> Result<(String, checksum::Known, String)> {
    // Three passes of about the same cost on however many cores there
    // are: the source's MD5; its SHA-256, then the fixed library's write;
    // the fixed library's MD5.
    let needle = kernel_text::MARKER_PREFIX.as_bytes();
    let (known, sha256, md5) = std::thread::scope(|s| {
        let known = s.spawn(|| checksum::Known::of_bytes(original, needle, stamp));
        let sha256 = s.spawn(|| -> Result<String> {
            let sha256 = prefix::sha256_hex(original);
            crate::fsutil::write_atomic(to, fixed, Some(mode & 0o755))?;
            Ok(sha256)
        });
        let md5 = checksum::md5_bytes(fixed);
        let panicked = "a hashing thread panicked";
        (
            known.join().expect(panicked),
            sha256.join().expect(panicked),
            md5,
        )
    });
    Ok((sha256?, known?, md5?))
}

fn record(t: &Text, decisions: usize, original: &[u8], fixed: &[u8]) -> ProvText {
    ProvText {
        name: t.name.clone(),
        decisions,
        sha256_before: prefix::sha256_hex(&original[t.range.clone()]),
        sha256_after: prefix::sha256_hex(&fixed[t.range.clone()]),
    }
}

/// The fix's identity: what it inserts, so a change to it is a change here.
fn fix_sha256() -> String {
    prefix::sha256_hex(format!("{}\n{}", kernel_text::MARKER, kernel_text::clause()).as_bytes())
}

fn provenance(
    req: &Request,
    source_sha256: String,
    found_by: FoundBy,
    texts: Vec<ProvText>,
) -> Provenance {
    let p = req.profile;
    Provenance {
        tool: format!("rdna1-patch {}", crate::version::VERSION),
        date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        profile: p.name.clone(),
        component: "miopen".to_owned(),
        rocm: prefix::ProvRocm {
            path: String::new(),
            version: p.rocm.version.clone(),
            found: Some(req.rocm.clone()),
            torch_hip: p.rocm.torch_hip.clone(),
        },
        source: prefix::ProvSource {
            url: format!("file://{}", req.library.display()),
            tag: "fixed in place".to_owned(),
            commit: format!("sha256:{source_sha256}"),
            subdir: None,
            sha256: None,
        },
        with: Default::default(),
        patches: vec![prefix::ProvPatch {
            name: "bn-gfx101x (kernel text, in place)".to_owned(),
            series: "in-place".to_owned(),
            sha256: fix_sha256(),
            marker: Some(kernel_text::MARKER.to_owned()),
        }],
        cmake: prefix::ProvCmake {
            generator: "none (fixed in place)".to_owned(),
            defines: Default::default(),
        },
        library: prefix::ProvLibrary {
            soname: String::new(),
            path: String::new(),
        },
        files: Vec::new(),
        local_edits: Vec::new(),
        in_place: Some(ProvInPlace {
            source: req.library.display().to_string(),
            source_sha256,
            found_by: found_by.name().to_owned(),
            texts,
            proof: None,
        }),
    }
}
