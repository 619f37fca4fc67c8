//! A publish→take loop in one process, for a profiler: a publisher with `SUBS`
//! subscribers joined in this process loans, stamps and publishes a sample, and each
//! subscriber `try_recv`s it and drops it, `ROUNDS` times; prints the mean cost of one
//! loop (one publish and `SUBS` takes). No wake-up is on the path unless a receiver
//! sleeps (none here): it shows what a publish and a take cost by themselves.
//!
//!     cargo run --release --manifest-path bench/iceoryx2/Cargo.toml \
//!         --example pubsub_loop -- [ROUNDS [SUBS]]
//!     perf record -g target/release/examples/pubsub_loop 2000000 1

use std::time::Instant;

use shmrc::Namespace;
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::pubsub::{Publisher, PublisherOptions, SlowSubscriber, Subscriber};

fn main() -> shmrc::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let subs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    set_manager_mode(ManagerMode::Off);
    let ns = Namespace::new(format!("shmrc-pubsub-loop-{}", std::process::id()))?;
    let options = PublisherOptions::new()
        .namespace(ns.clone())
        .subscribers(subs)
        .queue(8)
        .samples(8)
        .slow(SlowSubscriber::Backpressure);
    let publisher = Publisher::create("loop", options)?;
    let subscribers = (0..subs)
        .map(|_| Subscriber::join_in(&ns, "loop"))
        .collect::<shmrc::Result<Vec<_>>>()?;
    let mut check = 0u64;
    let start = Instant::now();
    for seq in 0..rounds {
        let mut loan = publisher.loan::<u64>(8)?;
        loan[0] = seq;
        let sent = publisher.publish(loan)?.sent();
        assert_eq!(sent.map(|s| s.delivered as usize), Some(subs));
        for s in &subscribers {
            let sample = s.try_recv::<u64>()?.expect("a sample queued");
            check = check.wrapping_add(sample[0]);
        }
    }
    let elapsed = start.elapsed();
    println!(
        "{rounds} loops, {subs} subscriber(s): {:.0} ns a loop (check {check})",
        elapsed.as_nanos() as f64 / rounds as f64
    );
    drop(subscribers);
    drop(publisher);
    shmrc::sweep(&ns)?;
    Ok(())
}
