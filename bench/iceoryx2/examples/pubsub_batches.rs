//! shmrc pub/sub's throughput rounds by themselves, for a profiler: the comparison's
//! own contender (`shmrc_pubsub::PubSub`: a subscriber process that receives, checks,
//! drops and acknowledges), `PUBSUB_BATCHES_TRIPS` round trips of one sample (350),
//! then `ROUNDS` rounds of 8 samples in flight of `SIZE` bytes, as the comparison runs
//! them; prints samples a second over the median of the first 37 rounds (a quick
//! run's count) and of all; `PUBSUB_BATCHES_TRACE=1` prints the first 80 rounds' times
//! (what showed the lock step of a pool growing in the middle of the rounds:
//! docs/PERFORMANCE.md). The subscriber is the comparison binary's child role, so
//! build it first.
//!
//!     cargo build --release --manifest-path bench/iceoryx2/Cargo.toml --bins --examples
//!     target/release/examples/pubsub_batches SIZE [ROUNDS [blocking|polling [SUBSCRIBERS]]]

use std::path::PathBuf;
use std::time::Instant;

use shmrc_iceoryx2_compare::rounds::{Receive, RoundTrip, THROUGHPUT_BATCH};
use shmrc_iceoryx2_compare::shmrc_pubsub::{self, PubSub};
use shmrc_iceoryx2_compare::{Error, Result};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1 << 20);
    let rounds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let receive = Receive::parse(&args.next().unwrap_or_else(|| "blocking".into()))?;
    let subscribers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    // The comparison binary beside this example's directory.
    let program: PathBuf = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|release| release.join("shmrc-iceoryx2-compare"))
        .ok_or_else(|| Error::BadArgument("no directory above the example".into()))?;
    let mut contender = PubSub::start(&program, receive, size, subscribers)?;
    // As the comparison runs a configuration: single round trips first, 4 untimed
    // batches, then the timed ones.
    let batch = THROUGHPUT_BATCH as u64;
    let mut seq = 0;
    let trips: u64 = std::env::var("PUBSUB_BATCHES_TRIPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(350);
    for _ in 0..trips {
        contender.round(seq, 1)?;
        seq += 1;
    }
    let mut times = Vec::new();
    for r in 0..4 + rounds {
        let start = Instant::now();
        contender.round(seq, THROUGHPUT_BATCH)?;
        if r >= 4 {
            times.push(start.elapsed());
        }
        seq += batch;
    }
    if std::env::var_os("PUBSUB_BATCHES_TRACE").is_some() {
        let us: Vec<u128> = times.iter().take(80).map(|t| t.as_micros()).collect();
        eprintln!("first batches, µs: {us:?}");
    }
    let rate = |t: &mut [std::time::Duration]| {
        t.sort();
        batch as f64 / t[t.len() / 2].as_secs_f64()
    };
    let first = (times.len()).min(37);
    println!(
        "{size} B, {receive:?}, {subscribers} subscriber(s): {:.0} samples a second over the median of the first {first} batches, {:.0} over all {rounds}",
        rate(&mut times[..first].to_vec()),
        rate(&mut times)
    );
    contender.stop()?;
    shmrc_pubsub::remove_namespace()?;
    Ok(())
}
