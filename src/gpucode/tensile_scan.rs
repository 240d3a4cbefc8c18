//! One pass over a Tensile directory: every catalogue's name, and for
//! every code file the targets its code objects declare. A code file is
//! remembered in the cache `gpucode` by a key of its own (its name and its
//! stamp: device, inode, size, modification and change times), so a file
//! rewritten in place, even at the same size, is read again, and a warm
//! pass over a directory of a million files costs a `stat` of each and
//! no read. A file changed in the last `SETTLING` before the pass is
//! read but not remembered: the clock stamping files ticks every few
//! milliseconds, and a second change in the same tick would keep the
//! stamp (git's "racily clean" files). The entry is one line per file (a 128-bit key and the index of
//! its set of targets, about 36 bytes), read back whole; a directory whose
//! entry would pass `LIMIT` is not remembered at all.

use std::collections::HashMap;
use std::fmt::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::Code;
use crate::cache::Cache;

/// The most an entry holds: about 1.8 million files' lines.
pub(super) const LIMIT: usize = 64 << 20;

/// How long after its last change a file's stamp is believed: more than
/// the file system clock's tick (1 to 10 ms).
const SETTLING: Duration = Duration::from_millis(50);

/// How an entry starts; a change of format is a change of this line.
const FORMAT: &str = "tensile-v2";

/// What a pass found besides the code files it handed on.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// The catalogues' file names, sorted.
    pub catalogues: Vec<String>,
    /// Why the directory could not be read, if it could not.
    pub error: Option<String>,
    /// How many code files were read, not taken from the cache, and
    /// whether the cache was written: what the tests of the entry see.
    #[cfg_attr(not(test), allow(dead_code))]
    pub read: usize,
    #[cfg_attr(not(test), allow(dead_code))]
    pub remembered: bool,
}

pub(super) fn is_code_file(name: &str) -> bool {
    name.ends_with(".co") || name.ends_with(".hsaco")
}

pub(super) fn is_catalogue(name: &str) -> bool {
    name.starts_with("TensileLibrary")
        && [".dat", ".yaml", ".yml"].iter().any(|x| name.ends_with(x))
}

/// Read `dir`, handing each regular code file's name and declared targets
/// to `each` (in the directory's order); a symlink is never followed.
pub(super) fn scan(dir: &Path, each: impl FnMut(&str, &[String])) -> Scan {
    scan_in(dir, Cache::open("gpucode"), (LIMIT, SETTLING), each)
}

/// [`scan`] with `cache`, its entry at most `limit` bytes, a file changed
/// less than `settling` ago not remembered.
fn scan_in(
    dir: &Path,
    cache: Option<Cache>,
    (limit, settling): (usize, Duration),
    mut each: impl FnMut(&str, &[String]),
) -> Scan {
    let mut out = Scan::default();
    let settled = SystemTime::now()
        .checked_sub(settling)
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            out.error = Some(format!("cannot read {}: {e}", dir.display()));
            return out;
        }
    };
    let key = format!(
        "{FORMAT}-{}",
        crate::checksum::hex(&Sha256::digest(dir.as_os_str().as_encoded_bytes()))
    );
    let known = cache
        .as_ref()
        .and_then(|c| c.get(&key, limit as u64))
        .and_then(|t| Known::parse(&t))
        .unwrap_or_default();
    let mut now = Entry::default();
    let mut hits = 0usize;
    for e in entries.flatten() {
        // The directory's own file type: no stat for what is skipped.
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let name = e.file_name();
        let name = name.to_string_lossy();
        if is_catalogue(&name) {
            out.catalogues.push(name.into_owned());
            continue;
        }
        if !is_code_file(&name) {
            continue;
        }
        // fstatat on the directory's descriptor, not following a symlink.
        let Ok(meta) = e.metadata() else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let file_key = file_key(&name, &meta);
        let set = match known.files.get(&file_key) {
            Some(&i) => {
                hits += 1;
                now.intern(&known.sets[i as usize])
            }
            None => {
                out.read += 1;
                now.intern(
                    &super::read_code_file(&e.path())
                        .ok()
                        .flatten()
                        .map(|c: Code| c.targets)
                        .unwrap_or_default(),
                )
            }
        };
        if changed_at(&meta) < settled {
            now.line(file_key, set, limit);
        } else {
            now.count += 1;
        }
        each(&name, &now.sets[set as usize]);
    }
    drop(known.files);
    out.catalogues.sort();
    let changed = now.count != hits || hits != known.count;
    if let Some(c) = cache.filter(|_| changed) {
        // The lines' length first: a directory past the limit is not
        // formatted at all.
        let text = (now.len <= limit).then(|| now.text());
        if let Some(text) = text.filter(|t| t.len() <= limit) {
            c.put(&key, &text);
            out.remembered = true;
        } else {
            c.forget(&key);
        }
        // Round six's entry (one JSON object, never read back past 64 MiB).
        c.forget(&key.replace(FORMAT, "tensile-v1"));
    }
    out
}

/// When `m`'s file last changed, in nanoseconds since the epoch.
fn changed_at(m: &std::fs::Metadata) -> u128 {
    u128::try_from(m.ctime()).unwrap_or(0) * 1_000_000_000
        + u128::try_from(m.ctime_nsec()).unwrap_or(0)
}

/// A code file's key: its name and its stamp, hashed.
fn file_key(name: &str, m: &std::fs::Metadata) -> u128 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0]);
    for v in [
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime_nsec() as u64,
        m.ctime_nsec() as u64,
    ] {
        h.update(v.to_le_bytes());
    }
    for v in [m.mtime(), m.ctime()] {
        h.update(v.to_le_bytes());
    }
    let d = h.finalize();
    let mut k = [0u8; 16];
    k.copy_from_slice(&d[..16]);
    u128::from_le_bytes(k)
}

/// An entry as read back.
#[derive(Default)]
struct Known {
    sets: Vec<Vec<String>>,
    files: HashMap<u128, u32, std::hash::BuildHasherDefault<KeyBits>>,
    count: usize,
}

impl Known {
    /// The entry `text`, or None when any line of it is not as written.
    fn parse(text: &str) -> Option<Known> {
        let mut lines = text.lines();
        (lines.next()? == FORMAT).then_some(())?;
        let sets: Vec<Vec<String>> = serde_json::from_str(lines.next()?).ok()?;
        let mut files = HashMap::with_capacity_and_hasher(text.len() / 36, Default::default());
        let mut count = 0;
        for l in lines {
            let (k, i) = l.split_once(' ')?;
            let i: u32 = i.parse().ok()?;
            ((i as usize) < sets.len() && k.len() == 32).then_some(())?;
            files.insert(u128::from_str_radix(k, 16).ok()?, i);
            count += 1;
        }
        Some(Known { sets, files, count })
    }
}

/// The entry being made: each set of targets once, a line per file
/// (formatted only when the entry is written).
#[derive(Default)]
struct Entry {
    sets: Vec<Vec<String>>,
    index: HashMap<Vec<String>, u32>,
    lines: Vec<(u128, u32)>,
    /// The lines' length as text.
    len: usize,
    count: usize,
}

impl Entry {
    fn intern(&mut self, set: &[String]) -> u32 {
        if let Some(&i) = self.index.get(set) {
            return i;
        }
        let i = u32::try_from(self.sets.len()).unwrap_or(u32::MAX);
        self.sets.push(set.to_vec());
        self.index.insert(set.to_vec(), i);
        i
    }

    fn line(&mut self, key: u128, set: u32, limit: usize) {
        self.count += 1;
        // Past the limit nothing more is kept: the entry is not written.
        if self.len <= limit {
            self.len += 32 + 1 + set.checked_ilog10().unwrap_or(0) as usize + 1 + 1;
            self.lines.push((key, set));
        }
    }

    fn text(&self) -> String {
        let sets = serde_json::to_string(&self.sets).unwrap_or_default();
        let mut text = String::with_capacity(FORMAT.len() + sets.len() + 2 + self.len);
        let _ = writeln!(text, "{FORMAT}\n{sets}");
        for (key, set) in &self.lines {
            let _ = writeln!(text, "{key:032x} {set}");
        }
        text
    }
}

/// The hasher of keys that are already SHA-256 bits: their low 64 bits.
#[derive(Default, Clone, Copy)]
struct KeyBits(u64);

impl std::hash::Hasher for KeyBits {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u128(&mut self, k: u128) {
        self.0 = k as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of `n` code files (ELF headers for gfx1010, whose
    /// reader needs no more) and a catalogue.
    fn dir(n: usize) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[18] = 224; // EM_AMDGPU
        elf[48] = 0x33; // gfx1010
        for i in 0..n {
            std::fs::write(d.path().join(format!("K_gfx1010_{i}.co")), &elf).unwrap();
        }
        std::fs::write(d.path().join("TensileLibrary.dat"), b"x").unwrap();
        d
    }

    fn names(d: &Path, cache: &Cache, limit: usize) -> (Scan, Vec<String>) {
        names_settled(d, cache, (limit, Duration::ZERO))
    }

    fn names_settled(d: &Path, cache: &Cache, at: (usize, Duration)) -> (Scan, Vec<String>) {
        let mut seen = Vec::new();
        let scan = scan_in(d, Some(cache.clone()), at, |n, t| {
            seen.push(format!("{n}: {}", t.join(",")));
        });
        seen.sort();
        (scan, seen)
    }

    #[test]
    fn a_warm_pass_reads_no_file_and_a_changed_one_is_read_again() {
        let d = dir(3);
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path().join("c"));
        let (cold, seen) = names(d.path(), &cache, LIMIT);
        assert_eq!((cold.read, cold.remembered, seen.len()), (3, true, 3));
        assert_eq!(cold.catalogues, ["TensileLibrary.dat"]);
        assert_eq!(seen[0], "K_gfx1010_0.co: gfx1010");
        let (warm, again) = names(d.path(), &cache, LIMIT);
        assert_eq!((warm.read, warm.remembered), (0, false), "nothing new");
        assert_eq!(again, seen);
        // Rewritten in place at the same size, a tick of the file
        // system's clock later: its own stamp changed.
        std::thread::sleep(Duration::from_millis(20));
        let f = d.path().join("K_gfx1010_1.co");
        std::fs::write(&f, [1u8; 64]).unwrap();
        let (third, now) = names(d.path(), &cache, LIMIT);
        assert_eq!((third.read, third.remembered), (1, true));
        assert_eq!(now[1], "K_gfx1010_1.co: ", "it holds no code object now");
    }

    #[test]
    fn a_file_changed_within_the_settling_time_is_read_each_time() {
        let d = dir(2);
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path().join("c"));
        let hour = (LIMIT, Duration::from_secs(3600));
        let (cold, _) = names_settled(d.path(), &cache, hour);
        assert_eq!(cold.read, 2);
        let (warm, seen) = names_settled(d.path(), &cache, hour);
        assert_eq!((warm.read, seen.len()), (2, 2), "not believed yet");
        let (settled, _) = names(d.path(), &cache, LIMIT);
        let (warm, _) = names(d.path(), &cache, LIMIT);
        assert_eq!((settled.read, warm.read), (2, 0));
    }

    #[test]
    fn an_entry_past_the_limit_is_not_written_and_the_old_one_goes() {
        let d = dir(40);
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path().join("c"));
        let (cold, _) = names(d.path(), &cache, 4096);
        assert!(cold.remembered);
        let entries = || std::fs::read_dir(tmp.path().join("c")).unwrap().count();
        assert_eq!(entries(), 1);
        for i in 40..200 {
            std::fs::write(d.path().join(format!("K_gfx1010_{i}.co")), b"").unwrap();
        }
        let (big, seen) = names(d.path(), &cache, 4096);
        assert_eq!((big.read, big.remembered, seen.len()), (160, false, 200));
        assert_eq!(entries(), 0, "the stale entry is dropped");
        let (again, _) = names(d.path(), &cache, 4096);
        assert_eq!(again.read, 200, "nothing was remembered");
    }

    #[test]
    fn an_entry_not_as_written_is_ignored() {
        for bad in [
            "",
            "tensile-v1\n[]\n",
            "tensile-v2\n[[]]\nzz 0\n",
            "tensile-v2\n[[]]\n00000000000000000000000000000000 1\n",
            "tensile-v2\nnot json\n",
        ] {
            assert!(Known::parse(bad).is_none(), "{bad:?}");
        }
        let good =
            Known::parse("tensile-v2\n[[\"gfx1010\"]]\n0000000000000000000000000000000a 0\n");
        assert_eq!(
            good.map(|k| (k.count, k.files.get(&10).copied())),
            Some((1, Some(0)))
        );
    }
}
