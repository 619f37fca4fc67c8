//! What a workload's producer writes into each buffer and its consumer reads back: one
//! byte ([`Payload::TouchOne`], the cost of sharing alone) or every byte
//! ([`Payload::Fill`], what a real producer and consumer do with a buffer).
//!
//! A filled buffer holds a pattern of little-endian 64-bit words: word `k` is
//! `seed + k` (wrapping), so word 0 is the seed itself. The producer picks a fresh seed
//! per buffer ([`next_seed`]); the consumer reads the seed from word 0, checks every
//! other byte against it ([`check`]; the first wrong byte is an error naming it) and
//! acks with the seed, which the producer compares with the one it wrote. So a byte
//! written wrong, not written, or left over from an earlier use of a recycled segment
//! fails the workload; and the check's result decides the ack, so the compiler cannot
//! skip the reads.
//!
//! The pattern is written and checked through plain slices over the mapping (what a
//! user of shmrc's `region()` or of a raw `mmap` does), by the same functions for every
//! contender: shmrc and the floor differ only in how the buffer is made, shared and
//! mapped.
//!
//! # Safety
//! This file owns the `unsafe` of the fill workload: it takes a plain slice over a
//! buffer's data ([`Bytes::bytes`], [`Bytes::bytes_mut`]). The workloads keep the rule
//! those slices need: the producer writes a buffer only before it sends the first
//! handle to it (a buffer just created, recycled by a pool once no other process holds
//! it, or a bare-floor slot whose previous use was acked), and a consumer reads it only
//! between receiving the handle and acking, while the producer writes nothing to it.
//! No other process writes the segment meanwhile (nothing else knows its name or has
//! its descriptor), so no slice ever overlaps a write.
#![allow(unsafe_code)]

use shmrc::checkers::sync::process::{AtomicU64, Ordering};
use shmrc::{Error, Result, ShmBuf};

use crate::floor::FloorMap;

/// What the producer writes and the consumer reads.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Payload {
    /// Byte 0 only (written at creation, read back by the consumer).
    TouchOne,
    /// Every byte: the seeded pattern, checked whole by the consumer.
    Fill,
}

/// A shared buffer's data, as the payloads see it.
pub trait Bytes {
    /// Reads byte 0 the way the touch-one workloads always have (a one-byte copy).
    fn first_byte(&self) -> Result<u8>;

    /// The data as a slice.
    ///
    /// # Safety
    /// No thread of any process may write these bytes while the slice lives.
    unsafe fn bytes(&self) -> &[u8];

    /// The data as a mutable slice.
    ///
    /// # Safety
    /// Nothing else may read or write these bytes, in any process, while the slice
    /// lives.
    #[allow(clippy::mut_from_ref)] // shared memory: exclusivity is the caller's promise
    unsafe fn bytes_mut(&self) -> &mut [u8];
}

impl Bytes for ShmBuf {
    fn first_byte(&self) -> Result<u8> {
        let mut byte = [0u8];
        self.read_at(0, &mut byte)?;
        Ok(byte[0])
    }

    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: the caller excludes writers while the slice lives (this trait's
        // contract, which `DataRegion::as_slice` asks for too).
        unsafe { self.region().as_slice() }
    }

    unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: the caller excludes every other access while the slice lives (this
        // trait's contract, which `DataRegion::as_mut_slice` asks for too).
        unsafe { self.region().as_mut_slice() }
    }
}

impl Bytes for FloorMap {
    fn first_byte(&self) -> Result<u8> {
        self.read_byte(0)
    }

    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: the caller excludes writers while the slice lives.
        unsafe { self.as_slice() }
    }

    unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: the caller excludes every other access while the slice lives.
        unsafe { self.as_mut_slice() }
    }
}

impl Payload {
    /// The name used in the workloads' rows and peers' modes.
    pub fn name(self) -> &'static str {
        match self {
            Payload::TouchOne => "touch-one",
            Payload::Fill => "fill",
        }
    }

    /// The producer's side, on a buffer nobody else maps yet (see the module's Safety
    /// header): nothing for [`Payload::TouchOne`] (creation wrote byte 0), the whole
    /// pattern of `seed` for [`Payload::Fill`].
    pub fn write(self, to: &impl Bytes, seed: u64) -> Result<()> {
        match self {
            Payload::TouchOne => Ok(()),
            // SAFETY: the workloads write only buffers that no other process maps and
            // no other reference of this process reads (module Safety header).
            Payload::Fill => fill(unsafe { to.bytes_mut() }, seed),
        }
    }

    /// The consumer's side, between receiving a buffer and acking it: byte 0 for
    /// [`Payload::TouchOne`]; for [`Payload::Fill`], the seed in word 0 after
    /// [`check`]ing every byte against it (an error at the first wrong one).
    pub fn read(self, from: &impl Bytes) -> Result<u64> {
        match self {
            Payload::TouchOne => from.first_byte().map(u64::from),
            Payload::Fill => {
                // SAFETY: the producer writes nothing to a buffer in flight, and nobody
                // else knows it (module Safety header).
                let bytes = unsafe { from.bytes() };
                let seed = seed_of(bytes)?;
                check(bytes, seed)?;
                Ok(seed)
            }
        }
    }
}

/// A fresh seed for the next filled buffer of this process: consecutive seeds are far
/// apart, so one buffer's pattern is never a shifted copy of the previous one's.
pub fn next_seed() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id())
}

fn words(len: usize) -> Result<usize> {
    if len < 8 {
        return Err(Error::InvalidArgument(format!(
            "a filled buffer holds at least its 8-byte seed; this one has {len} bytes"
        )));
    }
    Ok(len / 8)
}

fn aligned(bytes: &[u8]) -> Result<()> {
    if bytes.as_ptr().align_offset(8) != 0 {
        return Err(Error::InvalidArgument(format!(
            "the fill pattern needs 8-byte aligned data; these bytes start at {:p}",
            bytes.as_ptr()
        )));
    }
    Ok(())
}

/// Word `k` of the pattern of `seed`.
fn word(seed: u64, k: usize) -> u64 {
    seed.wrapping_add(k as u64)
}

/// Writes the pattern of `seed` over all of `bytes` (8-byte aligned, at least 8 long).
pub fn fill(bytes: &mut [u8], seed: u64) -> Result<()> {
    aligned(bytes)?;
    let n = words(bytes.len())?;
    let (whole, tail) = bytes.split_at_mut(n * 8);
    let whole: &mut [u64] = bytemuck::cast_slice_mut(whole);
    for (k, w) in whole.iter_mut().enumerate() {
        *w = word(seed, k).to_le();
    }
    let last = word(seed, n).to_le_bytes();
    tail.copy_from_slice(&last[..tail.len()]);
    Ok(())
}

/// The seed a filled buffer carries in word 0.
pub fn seed_of(bytes: &[u8]) -> Result<u64> {
    words(bytes.len())?;
    Ok(u64::from_le_bytes(
        bytes[..8].try_into().expect("8 bytes checked"),
    ))
}

/// Checks every byte of `bytes` against the pattern of `seed`; the first byte that
/// differs is an error naming its offset, what it holds and what was written there.
pub fn check(bytes: &[u8], seed: u64) -> Result<()> {
    aligned(bytes)?;
    let n = words(bytes.len())?;
    let (whole, tail) = bytes.split_at(n * 8);
    let whole: &[u64] = bytemuck::cast_slice(whole);
    // One pass that the compiler vectorizes and cannot skip: its result decides.
    let diff = whole
        .iter()
        .enumerate()
        .fold(0u64, |acc, (k, w)| acc | (u64::from_le(*w) ^ word(seed, k)));
    let last = word(seed, n).to_le_bytes();
    if diff == 0 && *tail == last[..tail.len()] {
        return Ok(());
    }
    let expected = |i: usize| word(seed, i / 8).to_le_bytes()[i % 8];
    let (offset, found) = bytes
        .iter()
        .enumerate()
        .find(|&(i, b)| *b != expected(i))
        .map(|(i, b)| (i, *b))
        .expect("a difference was seen");
    Err(Error::InvalidArgument(format!(
        "filled buffer of {} bytes (seed {seed:#x}): byte {offset} is {found:#04x}, not {:#04x} as written",
        bytes.len(),
        expected(offset)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 8-byte aligned scratch bytes.
    fn scratch(len: usize) -> Vec<u64> {
        vec![0u64; len.div_ceil(8) + 1]
    }

    #[test]
    fn a_filled_pattern_checks_and_carries_its_seed() {
        for len in [8, 13, 4096, 4099] {
            let mut backing = scratch(len);
            let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut backing)[..len];
            fill(bytes, 0xfeed).unwrap();
            assert_eq!(seed_of(bytes).unwrap(), 0xfeed);
            check(bytes, 0xfeed).unwrap();
        }
    }

    #[test]
    fn a_wrong_byte_anywhere_fails_the_check_and_is_named() {
        let len = 4099;
        for offset in [0, 7, 8, 2048, 4095, 4096, 4098] {
            let mut backing = scratch(len);
            let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut backing)[..len];
            fill(bytes, 7).unwrap();
            bytes[offset] ^= 0x40;
            let err = check(bytes, 7).unwrap_err().to_string();
            assert!(err.contains(&format!("byte {offset} is")), "{err}");
        }
    }

    #[test]
    fn another_seed_or_an_unfilled_buffer_fails_the_check() {
        let mut backing = scratch(64);
        let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut backing)[..64];
        assert!(check(bytes, 1).is_err(), "zeroes are not a pattern");
        fill(bytes, 1).unwrap();
        assert!(check(bytes, 2).is_err(), "an earlier use's pattern");
    }

    #[test]
    fn short_or_misaligned_bytes_are_refused() {
        let mut backing = scratch(64);
        let bytes = bytemuck::cast_slice_mut::<u64, u8>(&mut backing);
        let err = fill(&mut bytes[..7], 1).unwrap_err().to_string();
        assert!(err.contains("at least its 8-byte seed"), "{err}");
        assert!(seed_of(&bytes[..7]).is_err());
        let err = fill(&mut bytes[1..33], 1).unwrap_err().to_string();
        assert!(err.contains("8-byte aligned"), "{err}");
        assert!(check(&bytes[1..33], 1).is_err());
    }

    #[test]
    fn consecutive_seeds_differ() {
        assert_ne!(next_seed(), next_seed());
    }
}
