//! The cost of the pool's recycle step alone, by holder-slot count: one process gets a
//! 4 KiB buffer from a `ShmPool` and drops it, over and over, so that each `get` after
//! the first recycles the one idle segment (no other process, no system call: the
//! recycle's CASes over the slots, the generation bump and the pool's bookkeeping).
//! Prints µs per `get` + drop with 1, 8 and 64 slots (the default), three rounds each
//! (docs/PERFORMANCE.md, "Where the time goes"):
//!
//! `cargo run --release -p shmrc-bench --example recycle_cost`
use std::time::Instant;

use shmrc::{CreateOptions, Namespace, PoolLimits, ShmPool, Strategy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    const ROUNDS: u32 = 200_000;
    for round in 0..3 {
        for capacity in [1usize, 8, 64] {
            let ns = Namespace::new(format!(
                "shmrc-recycle-cost-{}-{capacity}-{round}",
                std::process::id()
            ))?;
            let options = CreateOptions::new()
                .strategy(Strategy::FileSystem)
                .namespace(ns)
                .capacity(capacity);
            let pool = ShmPool::new(options, PoolLimits::default())?;
            drop(pool.get(4096)?);
            let start = Instant::now();
            for _ in 0..ROUNDS {
                drop(std::hint::black_box(pool.get(4096)?));
            }
            let per = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS) / 1000.0;
            println!("{capacity:>2} slots: {per:.3} us per get + drop");
        }
    }
    Ok(())
}
