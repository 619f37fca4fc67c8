//! Publish/subscribe's queue under shuttle: a publisher and three subscribers as
//! shuttle threads running the queue's run-to-end functions (`join`, `publish`, `take`,
//! `leave`, src/protocol/queue.rs) on the simulated kernel, subscribers joining while the
//! publisher publishes, each doomed or not (at random) to die at a random crash point.
//! The publisher loans from a pool of three samples with the holder protocol's own
//! recycle, so samples are reused while subscribers still race for older ones. Random
//! and PCT schedules, under each slow-subscriber policy.
//!
//! Checked: a live subscriber's take never ends `Lost`, `Stale` or `Corrupt`, and a
//! sample it holds keeps its slot and generation until it releases it (P1); once every
//! subscriber has left or died and the publisher ran a reclaim pass, every sample is
//! recyclable and every entry free (P3). (Every interleaving of a smaller case:
//! tests/pubsub_interleavings.rs.)
//!
//! Run: `cargo test --release --features shuttle --test shuttle_pubsub -- --nocapture`
//! (`SHMRC_SHUTTLE_ITERATIONS`, `SHMRC_SHUTTLE_PCT_ITERATIONS` raise the counts).
#![cfg(shmrc_shuttle)]

mod pubsub_words;

use std::sync::Arc;
use std::time::Instant;

use pubsub_words::{Words, loan_and_publish};
use shmrc::checkers::holders::{FREE, Recycled, held_word, recycle, vacate};
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::pubsub::queue::{self, Descriptor, Policy, Taken, subscriber_slot};
use shmrc::checkers::sync::process::{AtomicU64 as Counter, Ordering::Relaxed};
use shmrc::checkers::sync::{AtomicU64, Ordering::SeqCst};
use shmrc::{Error, Result};
use shuttle::rand::{Rng, thread_rng};

const UID: u32 = 1000;
const SUBSCRIBERS: usize = 3;
const SAMPLES: usize = 3;
const CAP: usize = 2;
const PUBLISHES: usize = 6;
/// Takes a subscriber tries before it gives up waiting (a bound for PCT's schedules).
const TRIES: usize = 40;
const RANDOM_ITERATIONS: usize = 2_000;
const PCT_ITERATIONS: usize = 2_000;
const PCT_DEPTH: usize = 3;

fn iterations(var: &str, default: usize) -> usize {
    std::env::var(var).map_or(default, |v| v.parse().expect("a number of iterations"))
}

/// What the iterations did, so that a run that explored nothing fails.
#[derive(Default)]
struct Stats {
    killed: Counter,
    taken: Counter,
    delivered: Counter,
    refused: Counter,
}

/// A sample a subscriber holds: its descriptor and the slot it holds it in.
struct Held {
    d: Descriptor,
    slot: usize,
}

/// P1 for a sample `os` holds: its slot still holds `os`'s word and the sample is still
/// in the generation it was taken in.
fn check_held(words: &Words, os: &SimOs, h: &Held) {
    let s = h.d.sample as usize;
    let slots = words.slots(s);
    assert_eq!(
        slots[h.slot],
        held_word(os.token()),
        "P1: process {} lost its slot of sample {s}",
        os.pid()
    );
    let generation = words.with(|_, samples| samples[s].generation());
    assert_eq!(
        generation & ((1 << 40) - 1),
        h.d.generation,
        "P1: sample {s} was recycled while process {} held it",
        os.pid()
    );
}

/// A subscriber's life: join, take (holding up to two samples at a time) until the
/// publisher is done and the ring empty, release, leave.
fn subscriber(
    os: &SimOs,
    words: &Words,
    publisher: &SimOs,
    done: &AtomicU64,
    stats: &Stats,
) -> Result<()> {
    let Some(e) = words.with(|q, _| queue::join(os, q))? else {
        panic!("three entries for three subscribers");
    };
    let mut held: Vec<Held> = Vec::new();
    for _ in 0..TRIES {
        let finished = done.load(SeqCst) == 1;
        match words.with(|q, _| queue::take(os, q, e, publisher.token()))? {
            Taken::Sample(d) => {
                stats.taken.fetch_add(1, Relaxed);
                held.push(Held {
                    d,
                    slot: subscriber_slot(e),
                });
            }
            Taken::Empty if finished => break,
            Taken::Empty => shuttle::thread::yield_now(),
            other => panic!("P1: a live subscriber's take ended {other:?}"),
        }
        for h in &held {
            check_held(words, os, h);
        }
        if held.len() > 1 || (!held.is_empty() && thread_rng().gen_bool(0.5)) {
            let h = held.remove(0);
            release(os, words, &h)?;
        }
    }
    for h in held {
        check_held(words, os, &h);
        release(os, words, &h)?;
    }
    assert!(
        words.with(|q, _| queue::leave(os, q, e))?,
        "its entry was its own"
    );
    Ok(())
}

fn release(os: &SimOs, words: &Words, h: &Held) -> Result<()> {
    let released = words.with(|_, samples| {
        vacate(
            os,
            &samples[h.d.sample as usize],
            h.slot,
            held_word(os.token()),
        )
    })?;
    assert!(released, "P1: a held sample's slot was not its holder's");
    Ok(())
}

fn scenario(policy: Policy, stats: &'static Stats) {
    let kernel = SimKernel::new(0);
    let publisher = kernel.spawn(UID);
    let words = Arc::new(Words::new(publisher.token(), SUBSCRIBERS, SAMPLES, CAP));
    let done = Arc::new(AtomicU64::new(0));
    let mut rng = thread_rng();
    let threads: Vec<_> = (0..SUBSCRIBERS)
        .map(|_| {
            let os = kernel.spawn(UID);
            if rng.gen_bool(0.5) {
                kernel.kill_at_step(os.pid(), rng.gen_range(0..60));
            }
            let (words, done, publisher) = (words.clone(), done.clone(), publisher.clone());
            shuttle::thread::spawn(move || {
                match subscriber(&os, &words, &publisher, &done, stats) {
                    Ok(()) => {}
                    Err(Error::Killed) => {
                        stats.killed.fetch_add(1, Relaxed);
                    }
                    Err(e) => panic!("a subscriber's unexpected error: {e}"),
                }
                // Dead from here on (a doomed one that finished dies too).
                os.kernel().kill(os.pid());
            })
        })
        .collect();
    for i in 0..PUBLISHES {
        // A lent sample is skipped (a pool would create one): the next is tried.
        for s in (0..SAMPLES).map(|k| (i + k) % SAMPLES) {
            if let Some(p) = loan_and_publish(&publisher, &words, s, policy).unwrap() {
                stats.delivered.fetch_add(u64::from(p.delivered), Relaxed);
                if p.full.is_some() {
                    stats.refused.fetch_add(1, Relaxed);
                }
                break;
            }
        }
    }
    done.store(1, SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    // P3: the publisher's next step gives back what the dead and departed left.
    words
        .with(|q, _| queue::publish(&publisher, q, None, policy))
        .unwrap();
    for s in 0..SAMPLES {
        let recycled = words
            .with(|_, samples| recycle(&publisher, &samples[s], 0))
            .unwrap();
        assert!(
            matches!(recycled, Recycled::Reused { .. }),
            "P3: sample {s} not recyclable after the reclaim: {:x?}",
            words.slots(s)
        );
    }
    for e in 0..SUBSCRIBERS {
        assert_eq!(words.state(e), FREE, "P3: entry {e} not freed");
    }
}

fn check(policy: Policy, scheduler: &str) {
    let stats: &'static Stats = Box::leak(Box::default());
    let started = Instant::now();
    let body = move || scenario(policy, stats);
    match scheduler {
        "random" => shuttle::check_random(
            body,
            iterations("SHMRC_SHUTTLE_ITERATIONS", RANDOM_ITERATIONS),
        ),
        _ => shuttle::check_pct(
            body,
            iterations("SHMRC_SHUTTLE_PCT_ITERATIONS", PCT_ITERATIONS),
            PCT_DEPTH,
        ),
    }
    let (killed, taken, delivered, refused) = (
        stats.killed.load(Relaxed),
        stats.taken.load(Relaxed),
        stats.delivered.load(Relaxed),
        stats.refused.load(Relaxed),
    );
    eprintln!(
        "pubsub {policy:?} ({scheduler}): {killed} subscribers killed, {delivered} deliveries, {taken} takes, {refused} publishes refused, in {:.1?}",
        started.elapsed()
    );
    assert!(killed > 0 && taken > 0, "the scenario did too little");
    // The random scheduler lets the subscribers keep up (none refused in 2,000
    // iterations); PCT's starved threads fill their rings.
    if policy == Policy::Backpressure && scheduler == "pct" {
        assert!(refused > 0, "backpressure never refused a publish");
    }
}

#[test]
fn subscribers_killed_at_random_steps_drop_oldest_random_schedules() {
    check(Policy::DropOldest, "random");
}

#[test]
fn subscribers_killed_at_random_steps_drop_oldest_pct_schedules() {
    check(Policy::DropOldest, "pct");
}

#[test]
fn subscribers_killed_at_random_steps_backpressure_random_schedules() {
    check(Policy::Backpressure, "random");
}

#[test]
fn subscribers_killed_at_random_steps_backpressure_pct_schedules() {
    check(Policy::Backpressure, "pct");
}
