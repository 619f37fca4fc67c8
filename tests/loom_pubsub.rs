//! Publish/subscribe's queue under loom: the queue's real steps (`join`, `publish`,
//! `take`, `leave`, src/protocol/queue.rs) over the real atomics facade (loom's atomics
//! under `--features loom`) and the simulated kernel, a publisher and one subscriber
//! as loom threads, every interleaving up to the preemption bound, with weak memory for
//! what is not `SeqCst`. The subscriber is killed at its n-th crash point for every n
//! in turn until it outruns them all (the last model is the crash-free one).
//!
//! The models, each small enough for loom (1 entry, 2 samples, a ring of 1 or 2):
//! - **the pop race**: a full ring under drop-oldest; the publisher's pop of the
//!   oldest descriptor races the subscriber's own pop on `head`. Exactly one of them
//!   owns the popped descriptor's reference (the subscriber holds it, or the publisher
//!   gave it back), the new sample is delivered, no take of a live subscriber ends
//!   `Lost` or `Stale` (P1);
//! - **reference, descriptor, tail**: a publish into an empty ring races a take. The
//!   take either finds the ring empty or takes exactly the published sample: it never
//!   sees a descriptor without its in-flight reference (`pubsub_descriptor_first`),
//!   nor a `tail` without the descriptor stored before it (`pubsub_relaxed_push`, a
//!   weak-memory bug no sequentially consistent checker can see);
//! - **drain vs a take**: two samples queued; the subscriber takes one and leaves (or
//!   dies at any step) while the publisher runs a reclaim pass; then the publisher
//!   reclaims again and every sample the subscriber does not hold is recyclable and the
//!   entry free (P3), the one it holds keeps its slot and generation (P1);
//! - **the wake word**: a subscriber that reads the wake word, finds its ring empty,
//!   sets the waiters flag (`queue::announce_waiter`) and sleeps on the flagged value (a
//!   futex modelled with loom's mutex and condition variable: compare and sleep under
//!   the bucket lock, as the kernel does) is woken by a publish racing it, which wakes
//!   only when its bump found the flag (`Published::wake`): a lost wake-up is a loom
//!   deadlock.
//!
//! After every execution the ring's words are in bounds and every state word decodes
//! (P5). What loom hides: it models `SeqCst` as `AcqRel` (its README, "Unsupported
//! features"), so these models check the queue's message passing (descriptor before
//! tail, reference before descriptor, wake word after the push) under release/acquire
//! only, which is all the queue's steps need (every race on one word is a CAS); but an
//! order that holds only through `SeqCst`'s single total order (a store then a load of
//! another word, as a recycle's generation bump against a take's transfer and
//! generation read) is not explored as hardware allows it: those the exhaustive
//! `tests/pubsub_interleavings.rs` checks under sequential consistency. The publisher
//! is not killed here (`pubsub_interleavings` kills it at every step).
//!
//! Run: `cargo test --release --features loom --test loom_pubsub -- --nocapture`.
//! `LOOM_MAX_PREEMPTIONS` bounds every model (default 3). Each model prints its crash
//! positions, executions and time.
#![cfg(shmrc_loom)]

mod pubsub_words;

use std::sync::Arc;
use std::time::Instant;

use loom::sync::{Condvar, Mutex};
use loom::thread;
use pubsub_words::{Words, loan_and_publish};
use shmrc::Error;
use shmrc::checkers::holders::{FREE, Recycled, held_word, recycle};
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::pubsub::queue::{
    self, Descriptor, EntryState, Policy, Published, Taken, subscriber_slot,
};
use shmrc::checkers::sync::AtomicU64;
use shmrc::checkers::sync::Ordering::SeqCst;
use shmrc::checkers::sync::process::{AtomicU64 as Counter, Ordering::Relaxed};

const UID: u32 = 1000;
/// The preemption bound unless `LOOM_MAX_PREEMPTIONS` says otherwise.
const PREEMPTIONS: usize = 3;

fn builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTIONS);
    }
    builder
}

/// Runs `model(n)` as one loom model for n = 0, 1, …; `model` kills the subscriber at
/// its n-th crash point and returns whether it was killed. Stops at the first n at
/// which no execution killed it, and requires at least `min_positions` of them, so a
/// scenario that stopped killing cannot pass in silence.
fn at_every_crash_point(
    label: &str,
    min_positions: u64,
    model: impl Fn(u64) -> bool + Copy + Send + Sync + 'static,
) {
    let builder = builder();
    let start = Instant::now();
    let mut total = 0;
    for n in 0.. {
        let executions = Arc::new(Counter::new(0));
        let kills = Arc::new(Counter::new(0));
        let (e, k) = (executions.clone(), kills.clone());
        builder.check(move || {
            e.fetch_add(1, Relaxed);
            if model(n) {
                k.fetch_add(1, Relaxed);
            }
        });
        let (executions, kills) = (executions.load(Relaxed), kills.load(Relaxed));
        total += executions;
        if kills == 0 {
            eprintln!(
                "loom pubsub {label}: preemption bound {:?}, {n} crash positions + the crash-free model, {total} executions, {:.1?}",
                builder.preemption_bound,
                start.elapsed()
            );
            assert!(
                n >= min_positions,
                "{label}: only {n} crash positions explored, expected at least {min_positions}"
            );
            return;
        }
    }
}

/// A service of one entry with a ring of `cap` and two samples, a publisher, and a
/// subscriber joined to entry 0 that dies at its `n`-th crash point from now.
fn service(cap: usize, n: Option<u64>) -> (SimKernel, SimOs, SimOs, Arc<Words>) {
    let kernel = SimKernel::new(0);
    let publisher = kernel.spawn(UID);
    let subscriber = kernel.spawn(UID);
    let words = Arc::new(Words::new(publisher.token(), 1, 2, cap));
    let entry = words.with(|q, _| queue::join(&subscriber, q)).unwrap();
    assert_eq!(entry, Some(0));
    if let Some(n) = n {
        kernel.kill_at_step(subscriber.pid(), n);
    }
    (kernel, publisher, subscriber, words)
}

/// The publisher's loan and publish of sample `s`, which must have been recyclable.
fn publish(publisher: &SimOs, words: &Words, s: usize, policy: Policy) -> Published {
    loan_and_publish(publisher, words, s, policy)
        .unwrap()
        .unwrap_or_else(|| panic!("sample {s} was lent"))
}

/// The descriptor sample `s` was last published with.
fn descriptor(words: &Words, s: usize) -> Descriptor {
    Descriptor::new(s, words.generation(s)).unwrap()
}

/// A take by a subscriber that may be killed: its outcome, `None` if killed. A live
/// subscriber's take never ends `Lost`, `Stale` or `Corrupt` (P1, P4: nothing is
/// forged here).
fn take(os: &SimOs, words: &Words, publisher: &SimOs) -> Option<Taken> {
    match words.with(|q, _| queue::take(os, q, 0, publisher.token())) {
        Ok(t @ (Taken::Sample(_) | Taken::Empty)) => Some(t),
        Ok(other) => panic!("P1: a live subscriber's take ended {other:?}"),
        Err(Error::Killed) => None,
        Err(e) => panic!("unexpected error {e:?}"),
    }
}

/// P1 for a sample `os` holds by `d`: the slot holds its word, the generation is `d`'s.
fn check_held(words: &Words, os: &SimOs, d: Descriptor) {
    let s = d.sample as usize;
    assert_eq!(
        words.slots(s)[subscriber_slot(0)],
        held_word(os.token()),
        "P1: the subscriber lost its slot of sample {s}"
    );
    assert_eq!(
        words.generation(s),
        d.generation,
        "P1: sample {s} was recycled while held"
    );
}

/// P5 at rest: the ring's words in bounds, the state word decodes to a step's word.
fn check_words(words: &Words) {
    assert!(
        words.queued(0).is_some(),
        "P5: the ring's words break its bounds"
    );
    assert!(
        !matches!(EntryState::decode(words.state(0)), EntryState::Garbage(_)),
        "P5: state word {:x} is no step's",
        words.state(0)
    );
}

/// P3: after the subscriber died (or left) and the publisher's reclaim, the entry is
/// free and every sample but `held` (a living subscriber's) is recyclable.
fn check_reclaimed(publisher: &SimOs, words: &Words, held: Option<Descriptor>) {
    words
        .with(|q, _| queue::publish(publisher, q, None, Policy::DropOldest))
        .unwrap();
    assert_eq!(words.state(0), FREE, "P3: the entry was not freed");
    for s in 0..2 {
        let recycled = words
            .with(|_, samples| recycle(publisher, &samples[s], 0))
            .unwrap();
        let held_here = held.is_some_and(|d| d.sample as usize == s);
        assert_eq!(
            matches!(recycled, Recycled::Reused { .. }),
            !held_here,
            "P3/P1: sample {s} recycled {recycled:?} (held by a living subscriber: {held_here}), slots {:x?}",
            words.slots(s)
        );
    }
}

/// The pop race: ring of 1 holding sample 0; the publisher publishes sample 1 under
/// drop-oldest while the subscriber takes.
fn pop_race(n: u64) -> bool {
    let (kernel, publisher, subscriber, words) = service(1, None);
    publish(&publisher, &words, 0, Policy::DropOldest);
    let d0 = descriptor(&words, 0);
    kernel.kill_at_step(subscriber.pid(), n);
    let t = {
        let (words, publisher) = (words.clone(), publisher.clone());
        thread::spawn(move || take(&subscriber, &words, &publisher).map(|t| (t, subscriber)))
    };
    let published = publish(&publisher, &words, 1, Policy::DropOldest);
    let d1 = descriptor(&words, 1);
    let taken = t.join().unwrap();
    check_words(&words);
    assert_eq!(
        published.delivered, 1,
        "P1: the new sample was not delivered"
    );
    let sub_slot = subscriber_slot(0);
    match taken {
        Some((Taken::Sample(d), subscriber)) => {
            check_held(&words, &subscriber, d);
            if d == d0 {
                // The subscriber's pop won: the publisher dropped nothing.
                assert_eq!(published.dropped, 0, "P1: a taken sample was also dropped");
                assert_eq!(words.queued(0).unwrap(), vec![d1.word()]);
            } else {
                assert_eq!(d, d1, "took a descriptor nobody published");
                assert_eq!(published.dropped, 1, "sample 0 neither taken nor dropped");
                assert_eq!(words.slots(0)[sub_slot], FREE, "the drop kept sample 0");
            }
            false
        }
        Some((Taken::Empty, _)) => {
            // Only after the publisher's pop and before its push.
            assert_eq!(published.dropped, 1, "an empty take of a full ring");
            assert_eq!(words.slots(0)[sub_slot], FREE, "the drop kept sample 0");
            assert_eq!(words.queued(0).unwrap(), vec![d1.word()]);
            false
        }
        Some(_) => unreachable!("take() returns only Sample or Empty"),
        None => {
            // Killed: whatever it popped stays its column's, for the drain.
            check_reclaimed(&publisher, &words, None);
            true
        }
    }
}

/// Reference, descriptor, tail: an empty ring; the publisher publishes sample 0 while
/// the subscriber takes.
fn reference_then_descriptor(n: u64) -> bool {
    let (_kernel, publisher, subscriber, words) = service(2, Some(n));
    let t = {
        let (words, publisher) = (words.clone(), publisher.clone());
        thread::spawn(move || take(&subscriber, &words, &publisher).map(|t| (t, subscriber)))
    };
    let published = publish(&publisher, &words, 0, Policy::Backpressure);
    let d0 = descriptor(&words, 0);
    let taken = t.join().unwrap();
    check_words(&words);
    match taken {
        Some((Taken::Sample(d), subscriber)) => {
            assert_eq!(
                d, d0,
                "P4: the take read another descriptor than the published one"
            );
            check_held(&words, &subscriber, d);
            false
        }
        Some((_, _)) => {
            assert_eq!(published.delivered, 1, "P1: the sample was not delivered");
            assert_eq!(
                words.queued(0).unwrap(),
                vec![d0.word()],
                "P1: delivery lost"
            );
            false
        }
        None => {
            check_reclaimed(&publisher, &words, None);
            true
        }
    }
}

/// Drain vs a take: samples 0 and 1 queued; the subscriber takes one and leaves (or
/// dies) while the publisher runs a reclaim pass; then the publisher reclaims again.
fn drain_vs_take(n: u64) -> bool {
    let (kernel, publisher, subscriber, words) = service(2, None);
    publish(&publisher, &words, 0, Policy::DropOldest);
    publish(&publisher, &words, 1, Policy::DropOldest);
    kernel.kill_at_step(subscriber.pid(), n);
    let t = {
        let (words, publisher) = (words.clone(), publisher.clone());
        thread::spawn(move || {
            let taken = take(&subscriber, &words, &publisher)?;
            let left = match words.with(|q, _| queue::leave(&subscriber, q, 0)) {
                Ok(left) => left,
                Err(Error::Killed) => return None,
                Err(e) => panic!("unexpected error {e:?}"),
            };
            assert!(left, "the entry was the subscriber's");
            Some((taken, subscriber))
        })
    };
    words
        .with(|q, _| queue::publish(&publisher, q, None, Policy::DropOldest))
        .unwrap();
    let outcome = t.join().unwrap();
    check_words(&words);
    match outcome {
        Some((Taken::Sample(d), subscriber)) => {
            assert_eq!(d, descriptor(&words, 0), "P1: the take skipped the oldest");
            check_held(&words, &subscriber, d);
            check_reclaimed(&publisher, &words, Some(d));
            // It releases and dies: its sample too is back.
            subscriber.kernel().kill(subscriber.pid());
            let recycled = words
                .with(|_, samples| recycle(&publisher, &samples[0], 0))
                .unwrap();
            assert!(
                matches!(recycled, Recycled::Reused { .. }),
                "P3: a dead subscriber's taken sample is not recyclable"
            );
            false
        }
        Some((other, _)) => panic!("P1: two queued samples, and the take ended {other:?}"),
        None => {
            check_reclaimed(&publisher, &words, None);
            true
        }
    }
}

/// A futex over a wake word as the kernel keeps one: the comparison and the sleep
/// under the bucket's lock, a wake under the same lock.
struct Futex {
    bucket: Mutex<()>,
    sleepers: Condvar,
}

impl Futex {
    fn wait(&self, word: &AtomicU64, seen: u64) {
        let guard = self.bucket.lock().unwrap();
        if word.load(SeqCst) == seen {
            drop(self.sleepers.wait(guard).unwrap());
        }
    }

    fn wake(&self) {
        let _guard = self.bucket.lock().unwrap();
        self.sleepers.notify_all();
    }
}

/// The wake word: the subscriber's `take_within` loop (read the word, take, announce
/// itself and sleep on the flagged word while empty) races a publish and its wake (only
/// if the bump found the flag). Not killed: a dead subscriber waits for nothing.
fn wake_word() {
    let (_kernel, publisher, subscriber, words) = service(2, None);
    let futex = Arc::new(Futex {
        bucket: Mutex::new(()),
        sleepers: Condvar::new(),
    });
    let t = {
        let (words, publisher, futex) = (words.clone(), publisher.clone(), futex.clone());
        thread::spawn(move || {
            loop {
                // `queue::take_within`'s loop, with the futex above for `Os::wait_word`
                // (the simulated kernel's only yields).
                let seen = words.with(|q, _| q.wake_word());
                match take(&subscriber, &words, &publisher) {
                    Some(Taken::Sample(d)) => return d,
                    Some(_) => {
                        let flagged = words.with(|q, _| queue::announce_waiter(q, seen));
                        if let Some(value) = flagged {
                            futex.wait(words.wake_atomic(), value);
                        }
                    }
                    None => unreachable!("nobody kills it"),
                }
            }
        })
    };
    let published = publish(&publisher, &words, 0, Policy::DropOldest);
    // Where `queue::publish` calls `Os::wake_word`: only when the bump found the flag.
    if published.wake {
        futex.wake();
    }
    let d = t.join().unwrap();
    assert_eq!(d, descriptor(&words, 0));
}

#[test]
fn the_publishers_drop_oldest_pop_races_a_take_killed_at_every_step() {
    at_every_crash_point("pop race", 5, pop_race);
}

#[test]
fn a_take_never_sees_a_descriptor_before_its_reference_killed_at_every_step() {
    at_every_crash_point("reference, descriptor, tail", 5, reference_then_descriptor);
}

#[test]
fn a_drain_races_a_take_and_leave_killed_at_every_step() {
    at_every_crash_point("drain vs take", 6, drain_vs_take);
}

#[test]
fn a_receiver_sleeping_on_the_wake_word_is_never_left_asleep() {
    let start = Instant::now();
    let executions = Arc::new(Counter::new(0));
    let e = executions.clone();
    builder().check(move || {
        e.fetch_add(1, Relaxed);
        wake_word();
    });
    eprintln!(
        "loom pubsub wake word: {} executions, {:.1?}",
        executions.load(Relaxed),
        start.elapsed()
    );
}
