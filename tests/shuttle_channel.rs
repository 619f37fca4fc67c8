//! A channel sender's in-flight ledger under shuttle (scenarios in
//! `tests/channel_ledger/mod.rs`): random and PCT schedules of the first channel's
//! receiver (attaching and releasing, or dying before attaching) against the sender
//! sharing the same buffer on a second channel, or by hand (no ledger); then the first
//! channel closes and the second handle must keep its segment (P1), with the world's
//! P5/P3 checks. `SHMRC_SHUTTLE_ITERATIONS` sets the schedules per test (default 20,000).
//!
//! Run: `cargo test --release --features shuttle --test shuttle_channel -- --nocapture`.
#![cfg(shmrc_shuttle)]

mod channel_ledger;
mod concurrency;

use std::time::Instant;

use channel_ledger::{First, Second, one_buffer_two_channels};
use shuttle::thread;

fn iterations() -> usize {
    std::env::var("SHMRC_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn scenario(first: First, second: Second) -> impl Fn() + Send + Sync + 'static {
    move || {
        one_buffer_two_channels(
            first,
            second,
            |f| thread::spawn(f),
            |h| h.join().expect("receiver 1"),
        );
    }
}

fn random(label: &str, first: First, second: Second) {
    let start = Instant::now();
    shuttle::check_random(scenario(first, second), iterations());
    eprintln!(
        "shuttle {label} random: {} schedules in {:.1?}",
        iterations(),
        start.elapsed()
    );
}

fn pct(label: &str, first: First, second: Second) {
    let start = Instant::now();
    shuttle::check_pct(scenario(first, second), iterations(), 3);
    eprintln!(
        "shuttle {label} pct: {} schedules in {:.1?}",
        iterations(),
        start.elapsed()
    );
}

#[test]
fn a_receiver_releasing_while_its_sender_re_shares_under_random_schedules() {
    random(
        "release vs re-share",
        First::AttachAndRelease,
        Second::Channel,
    );
}

#[test]
fn a_receiver_releasing_while_its_sender_re_shares_under_pct_schedules() {
    pct(
        "release vs re-share",
        First::AttachAndRelease,
        Second::Channel,
    );
}

#[test]
fn a_receiver_dying_before_attaching_under_random_schedules() {
    random("death vs share", First::KilledBeforeAttach, Second::Channel);
}

#[test]
fn a_receiver_releasing_while_its_sender_shares_by_hand_under_pct_schedules() {
    pct(
        "release vs share by hand",
        First::AttachAndRelease,
        Second::Direct,
    );
}
