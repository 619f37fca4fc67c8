//! A channel sender's in-flight ledger under loom (scenarios in
//! `tests/channel_ledger/mod.rs`): the first channel's receiver (a loom thread, its own
//! simulated process) attaches and releases, or dies before attaching, while the sender
//! shares the same buffer on a second channel; every interleaving up to the preemption
//! bound (3 unless `LOOM_MAX_PREEMPTIONS` says otherwise); and a receiver releasing
//! while the sender shares the buffer by hand (no ledger). Then the first channel
//! closes and the second handle must keep its segment (P1), with the world's P5/P3
//! checks. A receiver that releases between the sender's prune and its share is the
//! interleaving a sequential test never shows.
//!
//! Run: `cargo test --release --features loom --test loom_channel -- --nocapture`.
#![cfg(shmrc_loom)]

mod channel_ledger;
mod concurrency;

use shmrc::checkers::sync::process::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use channel_ledger::{First, Second, one_buffer_two_channels};
use loom::thread;

fn explore(label: &str, first: First, second: Second) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = 100_000;
    }
    let executions = Arc::new(AtomicU64::new(0));
    let e = executions.clone();
    let start = Instant::now();
    builder.check(move || {
        e.fetch_add(1, Relaxed);
        one_buffer_two_channels(
            first,
            second,
            |f| thread::spawn(f),
            |h| h.join().expect("receiver 1"),
        );
    });
    eprintln!(
        "loom {label}: {} executions in {:.1?}",
        executions.load(Relaxed),
        start.elapsed()
    );
}

#[test]
fn a_receiver_releasing_while_its_sender_re_shares_on_another_channel() {
    explore(
        "release vs re-share",
        First::AttachAndRelease,
        Second::Channel,
    );
}

#[test]
fn a_receiver_dying_before_attaching_while_its_sender_shares_on_another_channel() {
    explore("death vs share", First::KilledBeforeAttach, Second::Channel);
}

#[test]
fn a_receiver_releasing_while_its_sender_shares_by_hand() {
    explore(
        "release vs share by hand",
        First::AttachAndRelease,
        Second::Direct,
    );
}
