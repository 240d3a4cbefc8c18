//! A compressed bundle (clang --offload-compress) read no further than
//! its entry table: the header's three versions, and the zstd stream
//! inflated only as far as the table, within a cap; its code objects are
//! never decompressed.

use anyhow::Result;

use super::{ReadAt, Walked, table_of};
use crate::fatbin::COMPRESSED_MAGIC;

/// The most a compressed bundle's stream is decompressed for its entry
/// table, and no more than this many times the bytes the bundle itself
/// holds: a few bytes never cost 64 KiB of output.
const INFLATE_MAX: u64 = 64 << 10;
const INFLATE_RATIO: u64 = 64;

/// A compressed bundle at `at` (its first 32 bytes `head`): the targets
/// its entry IDs name, into `out`; where the walk goes on.
pub(super) fn read(
    head: &[u8; 32],
    at: u64,
    end: u64,
    read_at: ReadAt,
    decoder: &mut Option<zstd::stream::raw::Decoder<'static>>,
    out: &mut Walked,
) -> Result<u64> {
    let version = u16::from_le_bytes([head[4], head[5]]);
    // After magic, version, method: 1: uncompressed size (u32), hash (no
    // total); 2: total, uncompressed (u32), hash; 3: the same as u64s.
    let (total, data) = match version {
        1 => (None, 20),
        2 => (
            Some(u64::from(u32::from_le_bytes(head[8..12].try_into()?))),
            24,
        ),
        3 => (Some(u64::from_le_bytes(head[8..16].try_into()?)), 32),
        _ => (Some(0), 20),
    };
    let from = at.saturating_add(data);
    Ok(match total {
        // A bundle that states its size: its stream, then on past it.
        Some(total) if total > data => {
            let stop = at.saturating_add(total).min(end);
            if from < stop {
                out.compressed_named
                    .extend(compressed_ids(decoder, read_at, from, stop));
            }
            at.saturating_add(total)
        }
        // Version 1 states none: its stream is read as far as its entry
        // table; the walk goes on from it, by the next magic.
        None if from < end => {
            out.compressed_named
                .extend(compressed_ids(decoder, read_at, from, end));
            from
        }
        // One that states no usable size is skipped by its magic.
        _ => at.saturating_add(COMPRESSED_MAGIC.len() as u64),
    })
}

/// The targets a compressed bundle's entry IDs name: its zstd stream in
/// `from..end` decompressed only as far as its entry table (at most 64
/// KiB, and at most 64 times the stream's bytes), by the one decoder of
/// the walk (made on the first compressed bundle, reset for each after).
/// Nothing when the stream is not zstd or does not decompress.
fn compressed_ids(
    decoder: &mut Option<zstd::stream::raw::Decoder<'static>>,
    read_at: ReadAt,
    from: u64,
    end: u64,
) -> Vec<String> {
    use zstd::stream::raw::{DParameter, Decoder, InBuffer, Operation, OutBuffer};
    if decoder.is_none() {
        count_decoder();
        // A frame may ask for a window of up to 2^31 bytes: one over 16
        // MiB is refused rather than allocated (clang's use 2^21 to 2^23).
        let Ok(mut d) = Decoder::new() else {
            return Vec::new();
        };
        if d.set_parameter(DParameter::WindowLogMax(24)).is_err() {
            return Vec::new();
        }
        *decoder = Some(d);
    }
    let Some(dec) = decoder.as_mut() else {
        return Vec::new();
    };
    if dec.reinit().is_err() {
        return Vec::new();
    }
    let cap = INFLATE_MAX.min((end - from).saturating_mul(INFLATE_RATIO)) as usize;
    let mut head = vec![0u8; cap];
    let mut made = 0;
    let mut input = [0u8; 4096];
    let mut pos = from;
    'feed: while made < cap && pos < end {
        let n = (end - pos).min(input.len() as u64) as usize;
        if read_at(&mut input[..n], pos).is_err() {
            break;
        }
        pos += n as u64;
        let mut inb = InBuffer::around(&input[..n]);
        while inb.pos() < n && made < cap {
            let mut outb = OutBuffer::around(&mut head[made..]);
            let before = inb.pos();
            let done = match dec.run(&mut inb, &mut outb) {
                Ok(left) => left == 0,
                Err(_) => break 'feed,
            };
            made += outb.pos();
            if done || (inb.pos() == before && outb.pos() == 0) {
                break 'feed;
            }
        }
    }
    let (table, _, _) = table_of(&head[..made]);
    table
        .into_iter()
        .filter(|(name, _, _)| name.contains("amdgcn"))
        .filter_map(|(name, _, _)| name.rsplit("--").next())
        .map(|t| t.split(':').next().unwrap_or(t).to_owned())
        .collect()
}

#[cfg(test)]
thread_local! {
    /// Decoders started by walks on this thread, for the test of hostile files.
    pub(super) static DECODERS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn count_decoder() {
    #[cfg(test)]
    DECODERS.with(|d| d.set(d.get() + 1));
}
