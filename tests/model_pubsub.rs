//! Model-based tests of publish/subscribe's queue: random sequences of operations
//! (join, loan-and-publish, reclaim, take, release, leave, kill a subscriber, kill the
//! publisher, forge a stale descriptor; a subscriber's join, take, release and leave
//! each possibly killed at any of its crash points) run on the real queue
//! (src/protocol/queue.rs: `join`, `publish`, `take`, `leave`, and the holder protocol's
//! `recycle` and `vacate`) over the simulated kernel and on the reference model
//! `shmrc_model::pubsub`, under each slow-subscriber policy. After every operation:
//! - the results agree (a join's entry, a publish's counts, a take's outcome, a
//!   release's and a leave's answer), and so do the words: each entry's state and
//!   queued descriptors, each sample's slot words and generation, the wake word;
//! - P1, read from the real words: each sample a live subscriber holds keeps its slot
//!   and generation; P2: every sample's own slot 0 is still the publisher's; P3: after a
//!   completed drain pass (a reclaim, or a publish that was not refused) no entry is a
//!   departed or dead subscriber's, and no free entry's column holds an in-flight
//!   reference; P4: a take that returns a sample returns it in the sample's generation
//!   (a forged stale descriptor ends `Stale`); P5: every state word decodes and every
//!   ring's words are within `head <= tail <= head + C`.
//!
//! A killed operation's effect is read back from the words and must be one the model
//! allows (`shmrc_model::pubsub`'s `*_killed`). Not here: interleavings (one operation
//! at a time; `tests/pubsub_interleavings.rs`, loom and shuttle interleave), and the
//! publisher killed inside a publish (`pubsub_interleavings` kills it at every step).
//! proptest shrinks a failure to a short operation list and prints it.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

mod pubsub_words;

use std::cell::Cell;
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use pubsub_words::{Words, loan_and_publish, loan_and_publish_trusting};
use shmrc::Error;
use shmrc::checkers::holders::{FREE, held_word, in_flight_word, vacate};
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::pubsub::queue::{
    self, Descriptor, EntryState, Policy, Published, Taken, left_word, subscriber_slot,
};
use shmrc::checkers::sync::Ordering::SeqCst;
use shmrc_model::pubsub::{
    self as model, CAP, Column, Desc, ENTRIES, PubSub, SAMPLES, SUBSCRIBERS, TakeProgress,
};

const UID: u32 = 1000;
/// Cases per policy unless `PROPTEST_CASES` says otherwise: the release build (which
/// `.ci/verify` runs) does about 4,000 a second, the debug one (`cargo test`) 150.
const DEFAULT_CASES: u32 = if cfg!(debug_assertions) {
    1_500
} else {
    20_000
};
/// The generation bits a descriptor keeps.
const GENERATION_MASK: u64 = (1 << 40) - 1;

/// One operation; indices are taken modulo what exists, and an operation that does
/// not apply (a take by a subscriber with no entry, a publish by a dead publisher) is
/// skipped by both sides.
#[derive(Clone, Debug)]
enum Op {
    Join {
        sub: usize,
        crash: Option<u64>,
    },
    Publish {
        sample: usize,
    },
    /// A publish that trusts every joined entry's subscriber alive (the publisher's
    /// liveness cache at its worst: never expiring).
    PublishTrusting {
        sample: usize,
    },
    Reclaim,
    Take {
        sub: usize,
        crash: Option<u64>,
    },
    Release {
        sub: usize,
        which: usize,
        crash: Option<u64>,
    },
    Leave {
        sub: usize,
        crash: Option<u64>,
    },
    Kill {
        sub: usize,
    },
    KillPublisher,
    ForgeStale {
        entry: usize,
    },
}

fn crash() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![4 => Just(None), 1 => (0u64..8).prop_map(Some)]
}

fn op() -> impl Strategy<Value = Op> {
    let sub = 0..SUBSCRIBERS;
    prop_oneof![
        15 => (sub.clone(), crash()).prop_map(|(sub, crash)| Op::Join { sub, crash }),
        20 => (0..SAMPLES).prop_map(|sample| Op::Publish { sample }),
        10 => (0..SAMPLES).prop_map(|sample| Op::PublishTrusting { sample }),
        5 => Just(Op::Reclaim),
        30 => (sub.clone(), crash()).prop_map(|(sub, crash)| Op::Take { sub, crash }),
        15 => (sub.clone(), 0..4usize, crash())
            .prop_map(|(sub, which, crash)| Op::Release { sub, which, crash }),
        5 => (sub.clone(), crash()).prop_map(|(sub, crash)| Op::Leave { sub, crash }),
        4 => sub.prop_map(|sub| Op::Kill { sub }),
        // Rare: after it, only the subscribers act.
        1 => Just(Op::KillPublisher),
        3 => (0..ENTRIES).prop_map(|entry| Op::ForgeStale { entry }),
    ]
}

/// The real service and the model side by side.
struct Run {
    kernel: SimKernel,
    publisher: SimOs,
    subs: Vec<SimOs>,
    words: Words,
    model: PubSub,
    policy: Policy,
    counts: Counts,
}

/// What one case did.
#[derive(Default)]
struct Counts {
    killed: u64,
    taken: u64,
    stale: u64,
    dropped: u64,
    refused: u64,
    drained: u64,
}

impl Counts {
    /// Counts what a publish (if the recycle let it run) dropped, drained and refused.
    fn tally(&mut self, publish: Option<model::Published>) {
        if let Some(p) = publish {
            self.dropped += u64::from(p.dropped);
            self.drained += u64::from(p.drained);
            self.refused += u64::from(p.full.is_some());
        }
    }
}

fn policy_of(p: model::Policy) -> Policy {
    match p {
        model::Policy::DropOldest => Policy::DropOldest,
        model::Policy::Backpressure => Policy::Backpressure,
    }
}

fn desc(d: Descriptor) -> Desc {
    Desc {
        sample: d.sample as usize,
        generation: d.generation,
    }
}

fn word_of(d: Desc) -> u64 {
    Descriptor::new(d.sample, d.generation).unwrap().word()
}

fn taken(t: Taken) -> Result<model::Taken, String> {
    Ok(match t {
        Taken::Sample(d) => model::Taken::Sample(desc(d)),
        Taken::Empty => model::Taken::Empty,
        Taken::Lost => model::Taken::Lost,
        Taken::Stale => model::Taken::Stale,
        Taken::Corrupt => return Err("P5: a take ended Corrupt with no word forged".into()),
    })
}

fn published(p: Published) -> model::Published {
    // Nobody sleeps on the wake word here, so no bump finds the waiters flag.
    assert!(
        !p.wake,
        "a publish said to wake, and nobody announced itself: {p:?}"
    );
    model::Published {
        delivered: p.delivered,
        dropped: p.dropped,
        drained: p.drained,
        given_back: p.given_back,
        skipped: p.skipped,
        full: p.full,
    }
}

macro_rules! ensure {
    ($cond:expr, $($why:tt)*) => {
        if !$cond {
            return Err(format!($($why)*));
        }
    };
}

/// `r`'s value, `None` if killed; any other error fails.
fn or_killed<T>(r: shmrc::Result<T>) -> Result<Option<T>, String> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::Killed) => Ok(None),
        Err(e) => Err(format!("unexpected error {e:?}")),
    }
}

impl Run {
    fn new(policy: model::Policy) -> Run {
        let kernel = SimKernel::new(0);
        let publisher = kernel.spawn(UID);
        let subs = (0..SUBSCRIBERS).map(|_| kernel.spawn(UID)).collect();
        let words = Words::new(publisher.token(), ENTRIES, SAMPLES, CAP);
        Run {
            kernel,
            publisher,
            subs,
            words,
            model: PubSub::new(policy),
            policy: policy_of(policy),
            counts: Counts::default(),
        }
    }

    /// Arms subscriber `sub`'s kill at its `n`-th crash point from now.
    fn arm(&self, sub: usize, crash: Option<u64>) {
        if let Some(n) = crash {
            self.kernel.kill_at_step(self.subs[sub].pid(), n);
        }
    }

    /// A doomed subscriber that finished its operation dies after it.
    fn finish(&mut self, sub: usize, crash: Option<u64>) {
        if crash.is_some() {
            self.kernel.kill(self.subs[sub].pid());
            self.model.kill(sub);
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), String> {
        let alive = |m: &PubSub, s: usize| m.subs[s].alive;
        match *op {
            Op::Join { sub, crash } => {
                if !alive(&self.model, sub) || self.model.subs[sub].entry.is_some() {
                    return Ok(());
                }
                self.arm(sub, crash);
                let os = &self.subs[sub];
                match or_killed(self.words.with(|q, _| queue::join(os, q)))? {
                    Some(e) => {
                        let expected = self.model.join(sub);
                        ensure!(e == expected, "join took {e:?}, the model {expected:?}");
                        self.finish(sub, crash);
                    }
                    None => {
                        self.counts.killed += 1;
                        let mine = held_word(os.token());
                        let joined = (0..ENTRIES).find(|&e| self.words.state(e) == mine);
                        self.model.join_killed(sub, joined)?;
                    }
                }
            }
            Op::Publish { sample } => {
                if !self.model.publisher_alive {
                    return Ok(());
                }
                let real = loan_and_publish(&self.publisher, &self.words, sample, self.policy)
                    .map_err(|e| format!("publish: {e:?}"))?;
                let expected = self
                    .model
                    .recycle(sample)
                    .map(|generation| self.model.publish(Some(Desc { sample, generation })));
                let real = real.map(published);
                self.counts.tally(real);
                ensure!(
                    real == expected,
                    "loan and publish of sample {sample}: {real:?}, the model {expected:?}"
                );
                if real.is_some_and(|p| p.full.is_none()) {
                    self.check_drained()?;
                }
            }
            Op::PublishTrusting { sample } => {
                if !self.model.publisher_alive {
                    return Ok(());
                }
                let alive: Vec<u64> = (0..ENTRIES).map(|e| self.words.state(e)).collect();
                let trusted: [bool; ENTRIES] = std::array::from_fn(|e| {
                    matches!(self.model.entries[e].state, model::EntryState::Joined(_))
                });
                let real = loan_and_publish_trusting(
                    &self.publisher,
                    &self.words,
                    sample,
                    self.policy,
                    &alive,
                )
                .map_err(|e| format!("trusting publish: {e:?}"))?;
                let expected = self.model.recycle(sample).map(|generation| {
                    self.model
                        .publish_trusting(Some(Desc { sample, generation }), trusted)
                });
                let real = real.map(published);
                self.counts.tally(real);
                ensure!(
                    real == expected,
                    "loan and trusting publish of sample {sample}: {real:?}, the model {expected:?}"
                );
            }
            Op::Reclaim => {
                if !self.model.publisher_alive {
                    return Ok(());
                }
                let real = self
                    .words
                    .with(|q, _| queue::publish(&self.publisher, q, None, self.policy))
                    .map_err(|e| format!("reclaim: {e:?}"))?;
                let expected = self.model.publish(None);
                self.counts.drained += u64::from(real.drained);
                ensure!(
                    published(real) == expected,
                    "reclaim: {real:?}, the model {expected:?}"
                );
                self.check_drained()?;
            }
            Op::Take { sub, crash } => {
                let Some(e) = self.model.subs[sub]
                    .entry
                    .filter(|_| alive(&self.model, sub))
                else {
                    return Ok(());
                };
                self.arm(sub, crash);
                let os = &self.subs[sub];
                let publisher = self.publisher.token();
                match or_killed(self.words.with(|q, _| queue::take(os, q, e, publisher)))? {
                    Some(t) => {
                        if let Taken::Sample(d) = t {
                            let now = self.words.generation(d.sample as usize) & GENERATION_MASK;
                            ensure!(
                                now == d.generation,
                                "P4: a take returned sample {} of generation {}, which is in {now}",
                                d.sample,
                                d.generation
                            );
                        }
                        let real = taken(t)?;
                        let expected = self.model.take(sub);
                        ensure!(real == expected, "take: {real:?}, the model {expected:?}");
                        match real {
                            model::Taken::Sample(_) => self.counts.taken += 1,
                            model::Taken::Stale => self.counts.stale += 1,
                            _ => {}
                        }
                        self.finish(sub, crash);
                    }
                    None => {
                        self.counts.killed += 1;
                        let before = self.model.entries[e].ring.len();
                        let after = self
                            .words
                            .queued(e)
                            .ok_or("P5: a killed take broke its ring's bounds")?
                            .len();
                        let progress = if after == before {
                            TakeProgress::NotPopped
                        } else {
                            let d = self.model.entries[e].ring[0];
                            let slot = self.words.slots(d.sample)[subscriber_slot(e)];
                            if slot == held_word(os.token()) {
                                TakeProgress::Transferred
                            } else {
                                TakeProgress::Popped
                            }
                        };
                        self.model.take_killed(sub, progress)?;
                    }
                }
            }
            Op::Release { sub, which, crash } => {
                let held = &self.model.subs[sub].held;
                if !alive(&self.model, sub) || held.is_empty() {
                    return Ok(());
                }
                let i = which % held.len();
                let (d, e) = held[i];
                self.arm(sub, crash);
                let os = &self.subs[sub];
                let slot = subscriber_slot(e);
                let r = self
                    .words
                    .with(|_, samples| vacate(os, &samples[d.sample], slot, held_word(os.token())));
                match or_killed(r)? {
                    Some(released) => {
                        let expected = self.model.release(sub, i);
                        ensure!(
                            released == expected,
                            "release: {released}, the model {expected}"
                        );
                        self.finish(sub, crash);
                    }
                    None => {
                        self.counts.killed += 1;
                        let released = self.words.slots(d.sample)[slot] == FREE;
                        self.model.release_killed(sub, i, released);
                    }
                }
            }
            Op::Leave { sub, crash } => {
                let Some(e) = self.model.subs[sub]
                    .entry
                    .filter(|_| alive(&self.model, sub))
                else {
                    return Ok(());
                };
                self.arm(sub, crash);
                let os = &self.subs[sub];
                match or_killed(self.words.with(|q, _| queue::leave(os, q, e)))? {
                    Some(left) => {
                        let expected = self.model.leave(sub);
                        ensure!(left == expected, "leave: {left}, the model {expected}");
                        self.finish(sub, crash);
                    }
                    None => {
                        self.counts.killed += 1;
                        let left = self.words.state(e) == left_word(os.token());
                        self.model.leave_killed(sub, left);
                    }
                }
            }
            Op::Kill { sub } => {
                if alive(&self.model, sub) {
                    self.kernel.kill(self.subs[sub].pid());
                    self.model.kill(sub);
                }
            }
            Op::KillPublisher => {
                self.kernel.kill(self.publisher.pid());
                self.model.kill_publisher();
            }
            Op::ForgeStale { entry } => {
                if self.model.forge_stale(entry) {
                    let w = self.words.entry_words(entry);
                    let head = w[1].load(SeqCst);
                    let forged = word_of(self.model.entries[entry].ring[0]);
                    w[3 + (head % CAP as u64) as usize].store(forged, SeqCst);
                }
            }
        }
        Ok(())
    }

    /// P3 after a completed drain pass: no entry is a departed or dead subscriber's,
    /// no free entry's column holds an in-flight reference.
    fn check_drained(&self) -> Result<(), String> {
        let in_flight = in_flight_word(self.publisher.token());
        for e in 0..ENTRIES {
            match EntryState::decode(self.words.state(e)) {
                EntryState::Free => {
                    for s in 0..SAMPLES {
                        ensure!(
                            self.words.slots(s)[subscriber_slot(e)] != in_flight,
                            "P3: sample {s} is still in flight to the drained entry {e}"
                        );
                    }
                }
                EntryState::Joined(t) if self.publisher.is_alive(t) => {}
                other => return Err(format!("P3: entry {e} not drained: {other:?}")),
            }
        }
        Ok(())
    }

    /// The words against the model, then P1, P2 and P5 on the words.
    fn check(&self) -> Result<(), String> {
        let m = &self.model;
        let token = |s: usize| self.subs[s].token();
        for (e, entry) in m.entries.iter().enumerate() {
            let state = match entry.state {
                model::EntryState::Free => FREE,
                model::EntryState::Joined(s) => held_word(token(s)),
                model::EntryState::Left(s) => left_word(token(s)),
            };
            ensure!(
                self.words.state(e) == state,
                "entry {e}: state {:x}, the model {:?}",
                self.words.state(e),
                entry.state
            );
            ensure!(
                !matches!(EntryState::decode(state), EntryState::Garbage(_)),
                "P5: entry {e}'s state word is no step's"
            );
            let queued = self
                .words
                .queued(e)
                .ok_or(format!("P5: entry {e}'s ring breaks its bounds"))?;
            let expected: Vec<u64> = entry.ring.iter().map(|&d| word_of(d)).collect();
            ensure!(
                queued == expected,
                "entry {e}: queued {queued:x?}, the model {:?}",
                entry.ring
            );
        }
        for (s, sample) in m.samples.iter().enumerate() {
            let slots = self.words.slots(s);
            ensure!(
                slots[0] == held_word(self.publisher.token()),
                "P2: sample {s}'s own slot is {:x}",
                slots[0]
            );
            for (e, column) in sample.columns.iter().enumerate() {
                let word = match *column {
                    Column::Free => FREE,
                    Column::InFlight => in_flight_word(self.publisher.token()),
                    Column::Held(h) => held_word(token(h)),
                };
                ensure!(
                    slots[subscriber_slot(e)] == word,
                    "sample {s}, column {e}: {:x}, the model {column:?}",
                    slots[subscriber_slot(e)]
                );
            }
            ensure!(
                self.words.generation(s) == sample.generation,
                "sample {s}: generation {}, the model {}",
                self.words.generation(s),
                sample.generation
            );
        }
        // A bump adds WAKE_BUMP and clears the waiters flag, which nobody sets here.
        ensure!(
            self.words.wake() == m.wakes * queue::WAKE_BUMP,
            "wake word {}, the model's {} bumps",
            self.words.wake(),
            m.wakes
        );
        for (s, sub) in m.subs.iter().enumerate().filter(|(_, s)| s.alive) {
            for &(d, e) in &sub.held {
                ensure!(
                    self.words.slots(d.sample)[subscriber_slot(e)] == held_word(token(s)),
                    "P1: subscriber {s} lost its slot of sample {}",
                    d.sample
                );
                ensure!(
                    self.words.generation(d.sample) == d.generation,
                    "P1: sample {} recycled while subscriber {s} holds it",
                    d.sample
                );
            }
        }
        Ok(())
    }
}

/// What the cases did, so that a run that explored nothing fails.
#[derive(Default, Debug)]
struct Stats {
    killed: Cell<u64>,
    taken: Cell<u64>,
    stale: Cell<u64>,
    dropped: Cell<u64>,
    refused: Cell<u64>,
    drained: Cell<u64>,
}

fn add(total: &Cell<u64>, n: u64) {
    total.set(total.get() + n);
}

fn run(policy: model::Policy, ops: &[Op], stats: &Stats) -> Result<(), TestCaseError> {
    let mut run = Run::new(policy);
    for (i, op) in ops.iter().enumerate() {
        run.apply(op)
            .and_then(|()| run.check())
            .map_err(|why| TestCaseError::fail(format!("after op {i} ({op:?}): {why}")))?;
    }
    let c = &run.counts;
    add(&stats.killed, c.killed);
    add(&stats.taken, c.taken);
    add(&stats.stale, c.stale);
    add(&stats.dropped, c.dropped);
    add(&stats.refused, c.refused);
    add(&stats.drained, c.drained);
    Ok(())
}

fn check(policy: model::Policy) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let stats = Stats::default();
    let started = Instant::now();
    let ops = proptest::collection::vec(op(), 1..60);
    if let Err(e) = TestRunner::new(config).run(&ops, |ops| run(policy, &ops, &stats)) {
        panic!("{e}");
    }
    eprintln!(
        "pubsub model {policy:?}: {cases} cases in {:.1?}: {stats:?}",
        started.elapsed()
    );
    let got = |c: &Cell<u64>| c.get() > 0;
    assert!(
        got(&stats.killed) && got(&stats.taken) && got(&stats.stale) && got(&stats.drained),
        "the cases did too little: {stats:?}"
    );
    match policy {
        model::Policy::DropOldest => assert!(got(&stats.dropped), "nothing dropped: {stats:?}"),
        model::Policy::Backpressure => assert!(got(&stats.refused), "nothing refused: {stats:?}"),
    }
}

#[test]
fn the_queue_agrees_with_its_model_under_drop_oldest() {
    check(model::Policy::DropOldest);
}

#[test]
fn the_queue_agrees_with_its_model_under_backpressure() {
    check(model::Policy::Backpressure);
}
