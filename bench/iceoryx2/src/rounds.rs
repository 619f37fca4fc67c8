//! What every contender does, and how it is timed: a round hands `batch` samples of
//! `size` bytes to every subscriber and waits for all their acknowledgements. The
//! latency rows time rounds of one sample each (p50, p99); the throughput row times
//! rounds of [`THROUGHPUT_BATCH`] samples in flight (samples a second reaching every
//! subscriber, over the median round: on a shared machine one preempted round would
//! otherwise decide a short total).
//! A sample carries its sequence number in its first 8 bytes and a check byte in its
//! last, which the subscriber verifies (so both ends of the buffer are touched, and a
//! stale or torn sample is an error), not a copy of the whole payload.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::stats::percentile_us;

/// Samples in flight per round in the throughput row.
pub const THROUGHPUT_BATCH: usize = 8;

/// The sequence number that tells a subscriber to exit.
pub const STOP: u64 = u64::MAX;

/// How a subscriber waits for a sample (and the publisher for the acknowledgements).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Receive {
    /// Sleeps until woken (a futex, a socket, an event).
    Blocking,
    /// Spins on a non-blocking receive.
    Polling,
}

impl Receive {
    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Receive::Blocking => "blocking",
            Receive::Polling => "polling",
        }
    }

    /// Parses [`Receive::name`].
    pub fn parse(s: &str) -> Result<Receive> {
        match s {
            "blocking" => Ok(Receive::Blocking),
            "polling" => Ok(Receive::Polling),
            _ => Err(Error::BadArgument(format!(
                "receive mode {s:?}: expected blocking or polling"
            ))),
        }
    }
}

/// How many rounds to time.
#[derive(Copy, Clone, Debug)]
pub struct Plan {
    /// Untimed rounds first.
    pub warmup: usize,
    /// Timed one-sample rounds (latency).
    pub rounds: usize,
    /// Timed rounds of [`THROUGHPUT_BATCH`] samples (throughput).
    pub batches: usize,
}

/// One contender's publisher side, its subscribers running.
pub trait RoundTrip {
    /// Hands samples `first..first + batch` to every subscriber and waits for every
    /// acknowledgement.
    fn round(&mut self, first: u64, batch: usize) -> Result<()>;
}

/// What a contender measured, summed over the passes of a run.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Each timed one-sample round.
    pub latencies: Vec<Duration>,
    /// Each timed round of [`THROUGHPUT_BATCH`] samples.
    pub batches: Vec<Duration>,
}

/// A row of the report.
#[derive(Copy, Clone, Debug)]
pub struct Measured {
    /// Round-trip latency, median, µs.
    pub p50_us: f64,
    /// Round-trip latency, 99th percentile, µs.
    pub p99_us: f64,
    /// Samples a second that reached every subscriber: [`THROUGHPUT_BATCH`] over the
    /// median time of a round of that many.
    pub samples_per_s: f64,
}

impl Timings {
    /// The percentiles and the throughput; an error if nothing was timed.
    pub fn summary(&self) -> Result<Measured> {
        let no_rounds = || Error::BadArgument("no timed rounds".into());
        Ok(Measured {
            p50_us: percentile_us(&self.latencies, 50.0).ok_or_else(no_rounds)?,
            p99_us: percentile_us(&self.latencies, 99.0).ok_or_else(no_rounds)?,
            samples_per_s: THROUGHPUT_BATCH as f64
                / percentile_us(&self.batches, 50.0)
                    .ok_or_else(no_rounds)?
                    .max(1e-3)
                * 1e6,
        })
    }
}

/// Untimed throughput rounds before the timed ones: a pool that grows on demand (shmrc's)
/// reaches a batch's worth of samples, as iceoryx2's is preallocated.
const THROUGHPUT_WARMUP: usize = 4;

/// Runs `plan` on `contender`, adding to `into`.
pub fn measure(contender: &mut dyn RoundTrip, plan: Plan, into: &mut Timings) -> Result<()> {
    let mut seq = 0u64;
    for _ in 0..plan.warmup {
        contender.round(seq, 1)?;
        seq += 1;
    }
    for _ in 0..plan.rounds {
        let start = Instant::now();
        contender.round(seq, 1)?;
        into.latencies.push(start.elapsed());
        seq += 1;
    }
    for _ in 0..THROUGHPUT_WARMUP {
        contender.round(seq, THROUGHPUT_BATCH)?;
        seq += THROUGHPUT_BATCH as u64;
    }
    for _ in 0..plan.batches {
        let start = Instant::now();
        contender.round(seq, THROUGHPUT_BATCH)?;
        into.batches.push(start.elapsed());
        seq += THROUGHPUT_BATCH as u64;
    }
    Ok(())
}

/// The smallest sample: its sequence number and the check byte.
pub const MIN_SIZE: usize = 9;

/// Refuses a sample size that cannot carry the stamp.
pub fn check_size(size: usize) -> Result<()> {
    if size < MIN_SIZE {
        return Err(Error::BadArgument(format!(
            "sample size {size}: at least {MIN_SIZE} bytes (a sequence number and a check byte)"
        )));
    }
    Ok(())
}

/// The last byte of sample `seq`.
pub fn check_byte(seq: u64) -> u8 {
    (seq as u8) ^ 0x5a
}

/// Writes `seq` into a sample (at least [`MIN_SIZE`] bytes).
pub fn stamp(sample: &mut [u8], seq: u64) {
    sample[..8].copy_from_slice(&seq.to_le_bytes());
    let last = sample.len() - 1;
    sample[last] = check_byte(seq);
}

/// The sequence number a received sample carries, checked against its check byte.
pub fn read_stamp(sample: &[u8]) -> Result<u64> {
    if sample.len() < MIN_SIZE {
        return Err(Error::Peer(format!("a sample of {} bytes", sample.len())));
    }
    let seq = u64::from_le_bytes(sample[..8].try_into().expect("8 bytes"));
    if sample[sample.len() - 1] != check_byte(seq) {
        return Err(Error::Peer(format!(
            "sample {seq}: its last byte does not match"
        )));
    }
    Ok(seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_reads_back_and_a_torn_one_does_not() {
        let mut sample = vec![0u8; 4096];
        stamp(&mut sample, 77);
        assert_eq!(read_stamp(&sample).unwrap(), 77);
        sample[4095] ^= 1;
        assert!(matches!(read_stamp(&sample), Err(Error::Peer(_))));
        assert!(matches!(read_stamp(&sample[..8]), Err(Error::Peer(_))));
        assert!(matches!(check_size(8), Err(Error::BadArgument(_))));
    }
}
