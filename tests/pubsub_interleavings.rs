//! Publish/subscribe's sample queue (src/protocol/queue.rs), explored exhaustively: a
//! publisher that loans (the holder protocol's own `Recycle`) and publishes samples, and
//! two subscribers A and B that join, take, release and leave, every interleaving of
//! their steps, with A killed at every step of every interleaving. The steps run are
//! production's (`Join`, `Publish`, `Take`, `leave_step`, `Recycle`, `transfer_step`)
//! on words rebuilt from each explored state. Checked in every state reached:
//! - P1: a live subscriber's taken sample keeps its slot and its generation (it is
//!   never recycled under it), and a live subscriber never gets `Lost`, `Stale` or
//!   `Corrupt`; every descriptor popped from B's ring was taken by B or dropped by the
//!   publisher (drop-oldest): B's head equals its takes plus the publisher's drops;
//! - bounds: `head <= tail <= head + C` in every ring;
//!
//! and in every final state (every process done or dead), once the publisher ran one
//! more step (a reclaim pass), P3: every sample is recyclable (no reference left of a
//! dead or departed subscriber) and every entry is free.
//!
//! The wake word (the waiters flag and the publisher's wake) is explored on its own
//! (`no_wake_up_is_lost_every_interleaving_of_two_sleepers_and_a_publisher`): two
//! receivers that read the word, take, announce themselves (`announce_waiter`) and
//! sleep (a futex: the compare and the sleep one step), and a publisher that publishes
//! two samples, bumps the word and wakes (`FUTEX_WAKE`, a step of its own) only when the
//! bump found the flag; no final state may leave a receiver asleep.
//!
//! Hostile words (P4, P5) are checked by the sequential tests at the end.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::cell::Cell;
use std::collections::HashSet;
use std::task::Poll;
use std::time::{Duration, Instant};

use shmrc::checkers::holders::{
    FREE, Finalize, Holders, Outcome, Reclaim, Recycle, Recycled, StepOs, held_word,
    in_flight_word, transfer_step,
};
use shmrc::checkers::pubsub::queue::{
    Descriptor, Entry, Join, Policy, Publish, Queue, Take, TakeAt, Taken, WAITERS, WAKE_BUMP,
    announce_waiter, leave_step, subscriber_slot,
};
use shmrc::checkers::sync::{AtomicU64, Ordering::SeqCst};
use shmrc::checkers::token::{Token, TokenExt};

const ENTRIES: usize = 2;
const SLOTS: usize = 1 + ENTRIES;
const SAMPLES: usize = 2;
const PUBLISHER: usize = 0;
const A: usize = 1;
const B: usize = 2;
const SWEEPER: usize = 3;
const PROCS: usize = 4;

/// The shape of one exploration.
#[derive(Copy, Clone, Debug)]
struct Config {
    /// Ring capacity.
    cap: usize,
    /// Samples the publisher loans and publishes.
    rounds: u8,
    policy: Policy,
    /// Who is killed at every step: subscriber A, or the publisher (then a sweeper
    /// finalizes every sample concurrently with the subscribers, as the manager's
    /// sweep after its death does).
    victim: usize,
    /// Whether the publishes trust every joined entry's subscriber alive without asking
    /// (`Queue::trusting` with the entry's state word: the publisher's liveness cache
    /// at its worst, never expiring; a full ring still asks). The final reclaim asks.
    trusting: bool,
}

impl Config {
    fn entry_words(&self) -> usize {
        3 + self.cap
    }
    fn entry_base(&self, e: usize) -> usize {
        e * self.entry_words()
    }
    fn sample_base(&self, s: usize) -> usize {
        ENTRIES * self.entry_words() + s * (SLOTS + 3)
    }
    fn wake(&self) -> usize {
        self.sample_base(SAMPLES)
    }
    fn len(&self) -> usize {
        self.wake() + 1
    }
    fn head(&self, words: &[u64], e: usize) -> u64 {
        words[self.entry_base(e) + 1]
    }
    fn tail(&self, words: &[u64], e: usize) -> u64 {
        words[self.entry_base(e) + 2]
    }
    fn state(&self, words: &[u64], e: usize) -> u64 {
        words[self.entry_base(e)]
    }
    fn slot(&self, words: &[u64], s: usize, slot: usize) -> u64 {
        words[self.sample_base(s) + slot]
    }
    fn generation(&self, words: &[u64], s: usize) -> u64 {
        words[self.sample_base(s) + SLOTS + 2]
    }
}

fn token(p: usize) -> Token {
    Token::new(u32::try_from(p + 1).unwrap(), 7).unwrap()
}

/// What a step sees of the OS: its token and the others' liveness.
struct Kernel {
    me: usize,
    alive: [bool; PROCS],
}

impl StepOs for Kernel {
    fn current(&self) -> Token {
        token(self.me)
    }
    fn is_alive(&self, t: Token) -> bool {
        (0..PROCS).any(|p| token(p) == t && self.alive[p])
    }
    fn shm_unlink(&self, _name: &str) -> shmrc::Result<()> {
        Ok(())
    }
}

/// Runs `f` over the queue and sample views of `words`, then writes the words back.
fn with_views<R>(
    cfg: &Config,
    words: &mut [u64],
    f: impl FnOnce(&Queue<'_>, &[Holders<'_>]) -> R,
) -> R {
    let arena: Vec<AtomicU64> = words.iter().map(|&w| AtomicU64::new(w)).collect();
    let entries: Vec<Entry<'_>> = (0..ENTRIES)
        .map(|e| {
            let b = cfg.entry_base(e);
            Entry::new(
                &arena[b],
                &arena[b + 1],
                &arena[b + 2],
                &arena[b + 3..b + 3 + cfg.cap],
            )
        })
        .collect();
    let samples: Vec<Holders<'_>> = (0..SAMPLES)
        .map(|s| {
            let b = cfg.sample_base(s);
            Holders::new(
                &arena[b..b + SLOTS],
                &arena[b + SLOTS],
                &arena[b + SLOTS + 1],
            )
            .with_generation(&arena[b + SLOTS + 2])
        })
        .collect();
    let q = Queue::new(&entries, &samples, &arena[cfg.wake()]);
    let r = f(&q, &samples);
    for (w, a) in words.iter_mut().zip(&arena) {
        *w = a.load(SeqCst);
    }
    r
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
enum Pub {
    /// Loaning for round `round`: recycling `sample` (`tried` samples tried so far).
    Loan {
        round: u8,
        sample: usize,
        tried: usize,
        op: Recycle,
    },
    Publish {
        round: u8,
        op: Publish,
    },
    Reclaim(Publish),
    Done,
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
enum Sub {
    Join(Join),
    Idle(usize),
    Taking(usize, Take),
    Holding(usize, Descriptor),
    Leaving(usize),
    Done,
    Dead,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct World {
    words: Vec<u64>,
    publisher: Pub,
    subs: [Sub; 2],
    /// The sweeper's finalize of sample `.0` (None: not begun), once the publisher died.
    sweeper: Option<(usize, Option<Finalize>)>,
    alive: [bool; PROCS],
    /// B's successful takes, and the publisher's pops from B's ring.
    taken_b: u64,
    dropped_b: u64,
    /// B's entry, once joined, and its head then (a drained entry's head is its tail).
    entry_b: Option<usize>,
    head_at_join_b: u64,
}

fn initial(cfg: &Config) -> World {
    let mut words = vec![0; cfg.len()];
    for s in 0..SAMPLES {
        words[cfg.sample_base(s)] = held_word(token(PUBLISHER));
    }
    World {
        words,
        publisher: Pub::Loan {
            round: 0,
            sample: 0,
            tried: 0,
            op: Recycle::new(0),
        },
        subs: [Sub::Join(Join::new()), Sub::Join(Join::new())],
        sweeper: Some((0, None)),
        alive: [true; PROCS],
        taken_b: 0,
        dropped_b: 0,
        entry_b: None,
        head_at_join_b: 0,
    }
}

fn loan(round: u8, sample: usize, tried: usize) -> Pub {
    Pub::Loan {
        round,
        sample,
        tried,
        op: Recycle::new(0),
    }
}

/// One step of the publisher.
fn step_publisher(cfg: &Config, w: &mut World) {
    let os = Kernel {
        me: PUBLISHER,
        alive: w.alive,
    };
    let head_before = w.entry_b.map(|e| cfg.head(&w.words, e));
    let mut p = w.publisher;
    // The cache at its worst: whatever word an entry holds is trusted (only a joined
    // one is ever trusted by the step).
    let trusted: Vec<u64> = (0..ENTRIES)
        .map(|e| {
            if cfg.trusting {
                cfg.state(&w.words, e)
            } else {
                FREE
            }
        })
        .collect();
    let next = with_views(cfg, &mut w.words, |q, samples| match &mut p {
        Pub::Loan {
            round,
            sample,
            tried,
            op,
        } => match op.step(&os, &samples[*sample]) {
            Poll::Pending => p,
            Poll::Ready(Recycled::Reused { generation, .. }) => Pub::Publish {
                round: *round,
                op: Publish::new(Descriptor::new(*sample, generation).unwrap(), cfg.policy),
            },
            Poll::Ready(Recycled::Held) if *tried + 1 < SAMPLES => {
                loan(*round, (*sample + 1) % SAMPLES, *tried + 1)
            }
            // Every sample lent: the round is skipped (a pool would create one).
            Poll::Ready(Recycled::Held) => after_round(cfg, *round, *sample),
        },
        Pub::Publish { round, op } => match op.step(&os, &q.trusting(&trusted)) {
            Poll::Pending => p,
            Poll::Ready(published) => {
                assert_eq!(published.skipped, 0, "no hostile word here: {published:?}");
                if published.full.is_some() {
                    REFUSED.set(REFUSED.get() + 1);
                }
                after_round(cfg, *round, round_sample(*round))
            }
        },
        Pub::Reclaim(op) => match op.step(&os, q) {
            Poll::Pending => p,
            Poll::Ready(_) => Pub::Done,
        },
        Pub::Done => Pub::Done,
    });
    w.publisher = next;
    if let (Some(e), Some(before)) = (w.entry_b, head_before)
        && w.alive[B]
        && !matches!(w.subs[B - 1], Sub::Done)
    {
        w.dropped_b += cfg.head(&w.words, e) - before;
    }
}

thread_local! {
    /// Publishes that backpressure refused, in this thread's exploration.
    static REFUSED: Cell<usize> = const { Cell::new(0) };
    /// Takes that ended `Lost` (a dead publisher's reference the sweeper reclaimed).
    static LOST: Cell<usize> = const { Cell::new(0) };
}

fn round_sample(round: u8) -> usize {
    usize::from(round) % SAMPLES
}

fn after_round(cfg: &Config, round: u8, _sample: usize) -> Pub {
    if round + 1 < cfg.rounds {
        loan(round + 1, round_sample(round + 1), 0)
    } else {
        Pub::Reclaim(Publish::reclaim())
    }
}

/// One step of subscriber `p` (A or B).
fn step_subscriber(cfg: &Config, w: &mut World, p: usize) -> Result<(), String> {
    let os = Kernel {
        me: p,
        alive: w.alive,
    };
    let me = token(p);
    let publisher_done = w.publisher == Pub::Done || !w.alive[PUBLISHER];
    let publisher_dead = !w.alive[PUBLISHER];
    let mut s = w.subs[p - 1];
    let mut joined = None;
    let mut took = false;
    let next = with_views(cfg, &mut w.words, |q, samples| -> Result<Sub, String> {
        Ok(match &mut s {
            Sub::Join(op) => match op.step(&os, q) {
                Poll::Pending => s,
                Poll::Ready(Some(e)) => {
                    joined = Some(e);
                    Sub::Idle(e)
                }
                Poll::Ready(None) => return Err("a join found no free entry".into()),
            },
            Sub::Idle(e) => Sub::Taking(*e, Take::new(*e, token(PUBLISHER))),
            Sub::Taking(e, op) => match op.step(&os, q) {
                Poll::Pending => s,
                Poll::Ready(Taken::Sample(d)) => {
                    took = true;
                    Sub::Holding(*e, d)
                }
                Poll::Ready(Taken::Empty) if publisher_done => Sub::Leaving(*e),
                Poll::Ready(Taken::Empty) => Sub::Idle(*e),
                // A dead publisher's in-flight reference, reclaimed by the sweeper.
                Poll::Ready(Taken::Lost) if publisher_dead => {
                    LOST.set(LOST.get() + 1);
                    took = true;
                    Sub::Idle(*e)
                }
                Poll::Ready(other) => {
                    return Err(format!("P1: a live subscriber's take ended {other:?}"));
                }
            },
            Sub::Holding(e, d) => {
                let h = &samples[d.sample as usize];
                if !transfer_step(h, subscriber_slot(*e), held_word(me), FREE) {
                    return Err("P1: a held sample's slot was taken from its holder".into());
                }
                Sub::Idle(*e)
            }
            Sub::Leaving(e) => {
                if !leave_step(&os, q, *e) {
                    return Err("a subscriber's leave found its entry not its own".into());
                }
                Sub::Done
            }
            Sub::Done | Sub::Dead => s,
        })
    })?;
    w.subs[p - 1] = next;
    if p == B {
        if let Some(e) = joined {
            w.entry_b = joined;
            w.head_at_join_b = cfg.head(&w.words, e);
        }
        if took {
            w.taken_b += 1;
        }
    }
    Ok(())
}

/// One step of the sweeper (the publisher is dead): finalize each sample in turn.
fn step_sweeper(cfg: &Config, w: &mut World) {
    let os = Kernel {
        me: SWEEPER,
        alive: w.alive,
    };
    let Some((s, op)) = w.sweeper else {
        return;
    };
    w.sweeper = with_views(cfg, &mut w.words, |_, samples| {
        let h = &samples[s];
        let mut op = op.unwrap_or_else(|| Finalize::new(Reclaim::All, h));
        match op.step(&os, h, "sample") {
            Poll::Pending => Some((s, Some(op))),
            Poll::Ready(r) => {
                r.expect("the explorer's unlink succeeds");
                (s + 1 < SAMPLES).then_some((s + 1, None))
            }
        }
    });
}

/// The invariants of every state (see the module docs).
fn check_state(cfg: &Config, w: &World) -> Result<(), String> {
    for e in 0..ENTRIES {
        let (head, tail) = (cfg.head(&w.words, e), cfg.tail(&w.words, e));
        if head > tail || tail - head > cfg.cap as u64 {
            return Err(format!("bounds: entry {e} head {head} tail {tail}"));
        }
    }
    for p in [A, B] {
        if let Sub::Holding(e, d) = w.subs[p - 1] {
            let s = d.sample as usize;
            if cfg.slot(&w.words, s, subscriber_slot(e)) != held_word(token(p)) {
                return Err(format!(
                    "P1: subscriber {p}'s held sample {s} lost its slot"
                ));
            }
            if cfg.generation(&w.words, s) & ((1 << 40) - 1) != d.generation {
                return Err(format!("P1: subscriber {p}'s held sample {s} was recycled"));
            }
        }
    }
    if let Some(e) = w.entry_b
        && !matches!(w.subs[B - 1], Sub::Done)
    {
        let taking = match w.subs[B - 1] {
            Sub::Taking(_, op) => u64::from(matches!(op.at(), TakeAt::Transfer { .. })),
            _ => 0,
        };
        let head = cfg.head(&w.words, e);
        if head != w.head_at_join_b + w.taken_b + taking + w.dropped_b {
            return Err(format!(
                "P1: B's head {head} is not {} + its takes {} + {taking} plus the drops {}",
                w.head_at_join_b, w.taken_b, w.dropped_b
            ));
        }
    }
    Ok(())
}

/// P3 in a final state: after one more reclaim pass of the publisher, every sample is
/// recyclable and every entry free.
fn check_final(cfg: &Config, w: &World) -> Result<(), String> {
    if !w.alive[PUBLISHER] {
        return check_final_without_publisher(cfg, w);
    }
    let mut words = w.words.clone();
    let os = Kernel {
        me: PUBLISHER,
        alive: w.alive,
    };
    with_views(cfg, &mut words, |q, samples| {
        let mut reclaim = Publish::reclaim();
        while reclaim.step(&os, q).is_pending() {}
        for (s, h) in samples.iter().enumerate() {
            let mut recycle = Recycle::new(0);
            let done = loop {
                if let Poll::Ready(r) = recycle.step(&os, h) {
                    break r;
                }
            };
            if done == Recycled::Held {
                let column: Vec<u64> = (0..SLOTS).map(|i| h.slot_word(i).unwrap()).collect();
                return Err(format!(
                    "P3: sample {s} is not recyclable after the reclaim: {column:x?}"
                ));
            }
        }
        Ok(())
    })?;
    for e in 0..ENTRIES {
        if cfg.state(&words, e) != FREE {
            return Err(format!("P3: entry {e} not freed after the reclaim"));
        }
    }
    Ok(())
}

/// What an exploration reached (so that it cannot pass by exploring too little).
#[derive(Debug, Default)]
struct Reached {
    states: usize,
    finals: usize,
    /// States with the victim dead: A with a reference of its entry left in a sample
    /// (queued: the publisher's in-flight word in its column; or taken: A's held word),
    /// or the publisher.
    dead_with_references: usize,
    /// States where the publisher had dropped one of B's samples.
    drops: usize,
    /// Publishes refused by backpressure.
    refused: usize,
    /// Takes that ended `Lost` (only with the publisher dead).
    lost: usize,
}

fn a_left_references(cfg: &Config, w: &World) -> bool {
    let held = held_word(token(A));
    let queued = in_flight_word(token(PUBLISHER));
    (0..ENTRIES).any(|e| {
        let state = cfg.state(&w.words, e);
        (0..SAMPLES).any(|s| {
            let word = cfg.slot(&w.words, s, subscriber_slot(e));
            word == held || (state == held && word == queued)
        })
    })
}

/// P3 with the publisher dead: once every subscriber is done, one more finalize of
/// each sample (a sweep) destroys it: nothing live is left in its slots.
fn check_final_without_publisher(cfg: &Config, w: &World) -> Result<(), String> {
    let mut words = w.words.clone();
    let os = Kernel {
        me: SWEEPER,
        alive: w.alive,
    };
    with_views(cfg, &mut words, |_, samples| {
        for (s, h) in samples.iter().enumerate() {
            let mut op = Finalize::new(Reclaim::All, h);
            let done = loop {
                if let Poll::Ready(r) = op.step(&os, h, "sample") {
                    break r.expect("the explorer's unlink succeeds");
                }
            };
            if !matches!(done.outcome, Outcome::Unlinked | Outcome::AlreadyGone) {
                let column: Vec<u64> = (0..SLOTS).map(|i| h.slot_word(i).unwrap()).collect();
                return Err(format!(
                    "P3: sample {s} outlives its dead publisher: {:?}, {column:x?}",
                    done.outcome
                ));
            }
        }
        Ok(())
    })
}

/// Every interleaving from the initial state; panics at the first violation.
fn explore(cfg: &Config, limit: Duration) -> Reached {
    let started = Instant::now();
    let mut seen = HashSet::new();
    let mut stack = vec![initial(cfg)];
    let mut reached = Reached::default();
    REFUSED.set(0);
    LOST.set(0);
    while let Some(w) = stack.pop() {
        if !seen.insert(w.clone()) {
            continue;
        }
        if (!w.alive[A] && a_left_references(cfg, &w)) || !w.alive[PUBLISHER] {
            reached.dead_with_references += 1;
        }
        if w.dropped_b > 0 {
            reached.drops += 1;
        }
        assert!(
            started.elapsed() < limit,
            "exploration over its time limit after {} states",
            seen.len()
        );
        if let Err(why) = check_state(cfg, &w) {
            panic!("VIOLATION {why}\nstate: {w:?}");
        }
        let mut moves = 0;
        if cfg.victim == PUBLISHER && w.alive[PUBLISHER] {
            let mut killed = w.clone();
            killed.alive[PUBLISHER] = false;
            stack.push(killed);
        }
        if !w.alive[PUBLISHER] && w.sweeper.is_some() {
            let mut next = w.clone();
            step_sweeper(cfg, &mut next);
            stack.push(next);
            moves += 1;
        }
        if w.publisher != Pub::Done && w.alive[PUBLISHER] {
            let mut next = w.clone();
            step_publisher(cfg, &mut next);
            stack.push(next);
            moves += 1;
        }
        for p in [A, B] {
            if matches!(w.subs[p - 1], Sub::Done | Sub::Dead) {
                continue;
            }
            let mut next = w.clone();
            if let Err(why) = step_subscriber(cfg, &mut next, p) {
                panic!("VIOLATION {why}\nfrom: {w:?}");
            }
            stack.push(next);
            moves += 1;
            if p == A && cfg.victim == A {
                let mut killed = w.clone();
                killed.alive[A] = false;
                killed.subs[A - 1] = Sub::Dead;
                stack.push(killed);
            }
        }
        if moves == 0 {
            reached.finals += 1;
            if let Err(why) = check_final(cfg, &w) {
                panic!("VIOLATION {why}\nfinal state: {w:?}");
            }
        }
    }
    reached.states = seen.len();
    reached.refused = REFUSED.get();
    reached.lost = LOST.get();
    reached
}

fn run(cfg: Config) {
    let started = Instant::now();
    let reached = explore(&cfg, Duration::from_secs(240));
    println!("{cfg:?}: {reached:?}, in {:.1?}", started.elapsed());
    assert!(
        reached.finals > 0 && reached.states > 1000 && reached.dead_with_references > 0,
        "the scenario explored too little: {reached:?}"
    );
    if cfg.victim == PUBLISHER {
        assert!(
            reached.lost > 0,
            "no take met a reclaimed reference: {reached:?}"
        );
    }
    match cfg.policy {
        Policy::DropOldest if cfg.cap < SAMPLES && usize::from(cfg.rounds) > cfg.cap => {
            assert!(reached.drops > 0, "{reached:?}");
        }
        // A ring that holds every sample of the pool never fills: a queued sample is
        // lent, and the publisher cannot loan a lent one. (Nor does one publish fill it.)
        Policy::DropOldest => assert_eq!(reached.drops, 0, "{reached:?}"),
        Policy::Backpressure => assert!(reached.refused > 0 && reached.drops == 0, "{reached:?}"),
    }
}

#[test]
fn drop_oldest_with_a_ring_of_one_every_interleaving_and_kill() {
    run(Config {
        cap: 1,
        rounds: 3,
        policy: Policy::DropOldest,
        victim: A,
        trusting: false,
    });
}

#[test]
fn backpressure_with_a_ring_of_one_every_interleaving_and_kill() {
    run(Config {
        cap: 1,
        rounds: 3,
        policy: Policy::Backpressure,
        victim: A,
        trusting: false,
    });
}

#[test]
fn drop_oldest_with_a_ring_of_two_every_interleaving_and_kill() {
    run(Config {
        cap: 2,
        rounds: 3,
        policy: Policy::DropOldest,
        victim: A,
        trusting: false,
    });
}

#[test]
fn a_publisher_killed_at_every_step_with_a_sweeper_racing_the_subscribers() {
    // Two rounds are 2.9 million states: 13 s in a release build, 77 s in a debug one
    // (`cargo test --workspace`), which explores one round; `.ci/planted-bugs` and
    // `cargo test --release` explore two.
    run(Config {
        cap: 1,
        rounds: if cfg!(debug_assertions) { 1 } else { 2 },
        policy: Policy::DropOldest,
        victim: PUBLISHER,
        trusting: false,
    });
}

#[test]
fn drop_oldest_trusting_every_joined_subscriber_every_interleaving_and_kill() {
    run(Config {
        cap: 1,
        rounds: 3,
        policy: Policy::DropOldest,
        victim: A,
        trusting: true,
    });
}

#[test]
fn backpressure_trusting_every_joined_subscriber_every_interleaving_and_kill() {
    run(Config {
        cap: 1,
        rounds: 3,
        policy: Policy::Backpressure,
        victim: A,
        trusting: true,
    });
}

/// A publish that trusts a subscriber (the publisher's liveness cache) delivers to it
/// without asking, even dead; a full ring asks, and a dead one's is drained there; a
/// reclaim asks every joined subscriber and drains the dead one's queued sample.
#[test]
fn a_trusted_dead_subscriber_is_drained_at_its_full_ring_or_the_next_reclaim() {
    let cfg = Config {
        cap: 2,
        rounds: 0,
        policy: Policy::DropOldest,
        victim: A,
        trusting: true,
    };
    let a_dead = Kernel {
        me: PUBLISHER,
        alive: [true, false, true, true],
    };
    let publish_trusting = |words: &mut [u64], s: usize, trusted: &[u64]| {
        with_views(&cfg, words, |q, _| {
            let mut op = Publish::new(Descriptor::new(s, 0).unwrap(), Policy::DropOldest);
            until_ready(|| op.step(&a_dead, &q.trusting(trusted)))
        })
    };
    // A joins and is killed; the publisher still trusts its entry's word.
    let mut words = initial(&cfg).words;
    let e = join_now(&cfg, &mut words, A);
    let trusted = [cfg.state(&words, e), FREE];
    let first = publish_trusting(&mut words, 0, &trusted);
    assert_eq!(
        (first.delivered, first.drained),
        (1, 0),
        "trusted: delivered"
    );
    // A word other than the one trusted (here: none trusted) is asked: drained.
    let mut asked = words.clone();
    let other = publish_trusting(&mut asked, 1, &[FREE, FREE]);
    assert_eq!((other.delivered, other.drained), (0, 1), "{other:?}");
    // The ring fills; the publish that finds it full asks, and drains it.
    let second = publish_trusting(&mut words, 1, &trusted);
    assert_eq!((second.delivered, second.drained), (1, 0), "{second:?}");
    let full = publish_trusting(&mut words, 0, &trusted);
    assert_eq!(
        (full.delivered, full.drained, full.given_back, full.dropped),
        (0, 1, 2, 0),
        "a dead subscriber's full ring must be drained, not dropped into: {full:?}"
    );
    assert_eq!(cfg.state(&words, e), FREE);
    // The reclaim (which trusts nobody) drains what a trusted publish queued.
    let mut words = initial(&cfg).words;
    let e = join_now(&cfg, &mut words, A);
    let trusted = [cfg.state(&words, e), FREE];
    publish_trusting(&mut words, 0, &trusted);
    let reclaimed = with_views(&cfg, &mut words, |q, _| {
        let mut op = Publish::reclaim();
        until_ready(|| op.step(&a_dead, &q.trusting(&trusted)))
    });
    assert_eq!(
        (reclaimed.drained, reclaimed.given_back),
        (1, 1),
        "{reclaimed:?}"
    );
    assert!(recyclable(&cfg, &mut words, 0));
}

// Hostile words (P4, P5), one process at a time.

const ALL_ALIVE: [bool; PROCS] = [true; PROCS];

fn kernel(me: usize) -> Kernel {
    Kernel {
        me,
        alive: ALL_ALIVE,
    }
}

fn until_ready<T>(mut step: impl FnMut() -> Poll<T>) -> T {
    for _ in 0..10_000 {
        if let Poll::Ready(done) = step() {
            return done;
        }
    }
    panic!("an operation did not end in 10,000 steps");
}

fn join_now(cfg: &Config, words: &mut [u64], p: usize) -> usize {
    with_views(cfg, words, |q, _| {
        let mut op = Join::new();
        until_ready(|| op.step(&kernel(p), q))
    })
    .expect("a free entry")
}

/// Loans sample `s` (a recycle by the publisher) and publishes it.
fn publish_now(
    cfg: &Config,
    words: &mut [u64],
    s: usize,
) -> shmrc::checkers::pubsub::queue::Published {
    with_views(cfg, words, |q, samples| {
        let mut recycle = Recycle::new(0);
        let Recycled::Reused { generation, .. } =
            until_ready(|| recycle.step(&kernel(PUBLISHER), &samples[s]))
        else {
            panic!("sample {s} is lent");
        };
        let mut op = Publish::new(Descriptor::new(s, generation).unwrap(), cfg.policy);
        until_ready(|| op.step(&kernel(PUBLISHER), q))
    })
}

fn reclaim_now(cfg: &Config, words: &mut [u64]) -> shmrc::checkers::pubsub::queue::Published {
    with_views(cfg, words, |q, _| {
        let mut op = Publish::reclaim();
        until_ready(|| op.step(&kernel(PUBLISHER), q))
    })
}

fn take_now(cfg: &Config, words: &mut [u64], p: usize, entry: usize) -> Taken {
    with_views(cfg, words, |q, _| {
        let mut op = Take::new(entry, token(PUBLISHER));
        until_ready(|| op.step(&kernel(p), q))
    })
}

fn leave_now(cfg: &Config, words: &mut [u64], p: usize, entry: usize) {
    assert!(with_views(cfg, words, |q, _| leave_step(
        &kernel(p),
        q,
        entry
    )));
}

fn recyclable(cfg: &Config, words: &mut [u64], s: usize) -> bool {
    with_views(cfg, words, |_, samples| {
        let mut recycle = Recycle::new(0);
        until_ready(|| recycle.step(&kernel(PUBLISHER), &samples[s])) != Recycled::Held
    })
}

const HOSTILE: Config = Config {
    cap: 2,
    rounds: 0,
    policy: Policy::DropOldest,
    victim: A,
    trusting: false,
};

fn ring_word(cfg: &Config, e: usize, position: u64) -> usize {
    cfg.entry_base(e) + 3 + usize::try_from(position).unwrap() % cfg.cap
}

#[test]
fn a_descriptor_of_another_generation_is_stale_and_leaves_the_reference_queued() {
    let cfg = HOSTILE;
    let mut words = initial(&cfg).words;
    let e = join_now(&cfg, &mut words, B);
    assert_eq!(publish_now(&cfg, &mut words, 0).delivered, 1);
    let generation = cfg.generation(&words, 0);
    let forged = Descriptor::new(0, generation + 1).unwrap();
    words[ring_word(&cfg, e, 0)] = forged.word();
    assert_eq!(take_now(&cfg, &mut words, B, e), Taken::Stale);
    assert_eq!(
        cfg.slot(&words, 0, subscriber_slot(e)),
        in_flight_word(token(PUBLISHER)),
        "a stale take holds nothing and gives the in-flight reference back as it was"
    );
    // Its descriptor gone, the reference comes back when B leaves.
    leave_now(&cfg, &mut words, B, e);
    assert_eq!(reclaim_now(&cfg, &mut words).given_back, 1);
    assert!(recyclable(&cfg, &mut words, 0));
}

#[test]
fn a_descriptor_of_no_sample_is_lost_and_changes_nothing() {
    let cfg = HOSTILE;
    let mut words = initial(&cfg).words;
    let e = join_now(&cfg, &mut words, B);
    publish_now(&cfg, &mut words, 0);
    words[ring_word(&cfg, e, 0)] = Descriptor::new(SAMPLES + 3, 1).unwrap().word();
    let before: Vec<u64> = (0..SAMPLES)
        .flat_map(|s| (0..SLOTS).map(move |i| (s, i)))
        .map(|(s, i)| cfg.slot(&words, s, i))
        .collect();
    assert_eq!(take_now(&cfg, &mut words, B, e), Taken::Lost);
    let after: Vec<u64> = (0..SAMPLES)
        .flat_map(|s| (0..SLOTS).map(move |i| (s, i)))
        .map(|(s, i)| cfg.slot(&words, s, i))
        .collect();
    assert_eq!(before, after);
}

#[test]
fn a_garbage_entry_state_is_drained_and_freed() {
    let cfg = HOSTILE;
    let mut words = initial(&cfg).words;
    let e = join_now(&cfg, &mut words, B);
    publish_now(&cfg, &mut words, 0);
    // A word no step writes (no pid): treated as a dead subscriber's.
    words[cfg.entry_base(e)] = 1 << 40;
    let published = reclaim_now(&cfg, &mut words);
    assert_eq!((published.drained, published.given_back), (1, 1));
    assert_eq!(cfg.state(&words, e), FREE);
    assert_eq!(cfg.head(&words, e), cfg.tail(&words, e));
    assert!(recyclable(&cfg, &mut words, 0));
}

#[test]
fn ring_words_out_of_bounds_are_corrupt_to_the_taker_skipped_by_the_publisher_and_reset_by_the_drain()
 {
    let cfg = HOSTILE;
    let mut words = initial(&cfg).words;
    let e = join_now(&cfg, &mut words, B);
    // The tail more than a ring ahead of a head that stays put.
    words[cfg.entry_base(e) + 2] = 5;
    assert_eq!(take_now(&cfg, &mut words, B, e), Taken::Corrupt);
    assert_eq!(publish_now(&cfg, &mut words, 0).skipped, 1);
    assert_eq!(
        cfg.slot(&words, 0, subscriber_slot(e)),
        FREE,
        "no reference for a skipped entry"
    );
    // The head past the tail.
    words[cfg.entry_base(e) + 1] = 7;
    assert_eq!(take_now(&cfg, &mut words, B, e), Taken::Corrupt);
    leave_now(&cfg, &mut words, B, e);
    assert_eq!(reclaim_now(&cfg, &mut words).drained, 1);
    // Freed and reset: the next subscriber of the entry gets what is published.
    assert_eq!(join_now(&cfg, &mut words, A), e);
    assert_eq!(publish_now(&cfg, &mut words, 1).delivered, 1);
    assert!(matches!(take_now(&cfg, &mut words, A, e), Taken::Sample(d) if d.sample == 1));
}

#[test]
fn a_tail_at_the_words_end_is_corrupt_to_the_publisher_not_an_overflow() {
    // head = tail = u64::MAX: an empty ring by its distance, but a push would carry
    // the tail past the word's end.
    let cfg = HOSTILE;
    let mut words = initial(&cfg).words;
    let e = join_now(&cfg, &mut words, B);
    words[cfg.entry_base(e) + 1] = u64::MAX;
    words[cfg.entry_base(e) + 2] = u64::MAX;
    let published = publish_now(&cfg, &mut words, 0);
    assert_eq!((published.skipped, published.delivered), (1, 0));
    assert_eq!(
        cfg.slot(&words, 0, subscriber_slot(e)),
        FREE,
        "no reference for a skipped entry"
    );
    assert_eq!(cfg.tail(&words, e), u64::MAX);
    // Left and drained, the entry is reset for the next subscriber.
    leave_now(&cfg, &mut words, B, e);
    assert_eq!(reclaim_now(&cfg, &mut words).drained, 1);
    assert_eq!((cfg.head(&words, e), cfg.tail(&words, e)), (0, 0));
    assert_eq!(join_now(&cfg, &mut words, A), e);
    assert_eq!(publish_now(&cfg, &mut words, 1).delivered, 1);
    assert!(matches!(take_now(&cfg, &mut words, A, e), Taken::Sample(d) if d.sample == 1));
}

#[test]
fn a_descriptor_aimed_at_another_subscribers_column_takes_nothing() {
    // A forged descriptor in B's ring names a sample that was delivered to A only: B's
    // column of it holds no in-flight reference, so the take is Lost.
    let cfg = HOSTILE;
    let mut words = initial(&cfg).words;
    let ea = join_now(&cfg, &mut words, A);
    publish_now(&cfg, &mut words, 0);
    let eb = join_now(&cfg, &mut words, B);
    let generation = cfg.generation(&words, 0);
    words[ring_word(&cfg, eb, 0)] = Descriptor::new(0, generation).unwrap().word();
    words[cfg.entry_base(eb) + 2] = 1;
    assert_eq!(take_now(&cfg, &mut words, B, eb), Taken::Lost);
    assert!(matches!(take_now(&cfg, &mut words, A, ea), Taken::Sample(d) if d.sample == 0));
}

#[test]
fn the_wake_word_moves_when_a_publish_delivered_and_only_then() {
    let cfg = HOSTILE;
    let mut words = initial(&cfg).words;
    let wake = |words: &mut [u64]| with_views(&cfg, words, |q, _| q.wake_word());
    assert_eq!(publish_now(&cfg, &mut words, 0).delivered, 0);
    assert_eq!(wake(&mut words), 0, "a publish to nobody wakes nobody");
    let e = join_now(&cfg, &mut words, B);
    let published = publish_now(&cfg, &mut words, 1);
    assert_eq!(
        (published.delivered, published.wake),
        (1, false),
        "nobody announced"
    );
    assert_eq!(wake(&mut words), WAKE_BUMP);
    // A receiver announces itself: the next bump clears the flag and says to wake.
    let flagged = with_views(&cfg, &mut words, |q, _| announce_waiter(q, WAKE_BUMP));
    assert_eq!(flagged, Some(WAKE_BUMP | WAITERS));
    assert_eq!(wake(&mut words), WAKE_BUMP | WAITERS);
    let moved = with_views(&cfg, &mut words, |q, _| announce_waiter(q, 0));
    assert_eq!(moved, None, "an announce from a value the word moved past");
    assert!(matches!(take_now(&cfg, &mut words, B, e), Taken::Sample(_)));
    let published = publish_now(&cfg, &mut words, 0);
    assert_eq!((published.delivered, published.wake), (1, true));
    assert_eq!(wake(&mut words), 2 * WAKE_BUMP, "the bump clears the flag");
    leave_now(&cfg, &mut words, B, e);
    assert_eq!(reclaim_now(&cfg, &mut words).drained, 1);
    assert_eq!(
        wake(&mut words),
        2 * WAKE_BUMP,
        "a reclaim pass delivers nothing"
    );
}

// The wake word: two sleeping receivers and a publisher, every interleaving.

/// Samples the wake exploration publishes (each to both receivers).
const WAKE_ROUNDS: u8 = 2;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
enum Publisher {
    Publishing(u8, Publish),
    /// The bump found the waiters flag: `FUTEX_WAKE` next, then round `.0 + 1`.
    Waking(u8),
    Done,
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
enum Sleeper {
    /// Read the wake word (before the take).
    Read,
    Taking {
        seen: u64,
        op: Take,
    },
    /// The take found the ring empty: set the waiters flag from `seen`.
    Announce {
        seen: u64,
    },
    /// The futex wait: sleeps if the word's low 32 bits still hold `.0`'s, else reads again.
    Wait(u64),
    Asleep,
    Done,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct WakeWorld {
    words: Vec<u64>,
    publisher: Publisher,
    sleepers: [Sleeper; 2],
    received: [u8; 2],
    entries: [usize; 2],
}

fn step_wake_publisher(cfg: &Config, w: &mut WakeWorld) {
    let os = kernel(PUBLISHER);
    let next_round = |round: u8| {
        if round + 1 < WAKE_ROUNDS {
            let d = Descriptor::new(usize::from(round + 1), 0).unwrap();
            Publisher::Publishing(round + 1, Publish::new(d, cfg.policy))
        } else {
            Publisher::Done
        }
    };
    w.publisher = match w.publisher {
        Publisher::Publishing(round, mut op) => {
            let next = with_views(cfg, &mut w.words, |q, _| op.step(&os, q));
            match next {
                Poll::Pending => Publisher::Publishing(round, op),
                Poll::Ready(published) => {
                    assert_eq!(
                        published.delivered, 2,
                        "both receivers joined: {published:?}"
                    );
                    if published.wake {
                        Publisher::Waking(round)
                    } else {
                        next_round(round)
                    }
                }
            }
        }
        Publisher::Waking(round) => {
            for s in &mut w.sleepers {
                if *s == Sleeper::Asleep {
                    *s = Sleeper::Read;
                }
            }
            next_round(round)
        }
        Publisher::Done => Publisher::Done,
    };
}

fn step_sleeper(cfg: &Config, w: &mut WakeWorld, i: usize) {
    let p = [A, B][i];
    let entry = w.entries[i];
    let wake_at = cfg.wake();
    w.sleepers[i] = match w.sleepers[i] {
        Sleeper::Read => Sleeper::Taking {
            seen: w.words[wake_at],
            op: Take::new(entry, token(PUBLISHER)),
        },
        Sleeper::Taking { seen, mut op } => {
            let next = with_views(cfg, &mut w.words, |q, _| op.step(&kernel(p), q));
            match next {
                Poll::Pending => Sleeper::Taking { seen, op },
                Poll::Ready(Taken::Sample(_)) => {
                    w.received[i] += 1;
                    if w.received[i] == WAKE_ROUNDS {
                        Sleeper::Done
                    } else {
                        Sleeper::Read
                    }
                }
                Poll::Ready(Taken::Empty) => Sleeper::Announce { seen },
                Poll::Ready(other) => panic!("VIOLATION a take ended {other:?}\nstate: {w:?}"),
            }
        }
        Sleeper::Announce { seen } => {
            match with_views(cfg, &mut w.words, |q, _| announce_waiter(q, seen)) {
                Some(value) => Sleeper::Wait(value),
                None => Sleeper::Read,
            }
        }
        // The futex compares the low 32 bits.
        Sleeper::Wait(value) if w.words[wake_at] as u32 == value as u32 => Sleeper::Asleep,
        Sleeper::Wait(_) => Sleeper::Read,
        Sleeper::Asleep => Sleeper::Asleep,
        Sleeper::Done => Sleeper::Done,
    };
}

#[test]
fn no_wake_up_is_lost_every_interleaving_of_two_sleepers_and_a_publisher() {
    let started = Instant::now();
    let cfg = Config {
        cap: 2,
        rounds: WAKE_ROUNDS,
        policy: Policy::DropOldest,
        victim: A,
        trusting: false,
    };
    let mut words = initial(&cfg).words;
    let entries = [join_now(&cfg, &mut words, A), join_now(&cfg, &mut words, B)];
    let first = Descriptor::new(0, 0).unwrap();
    let mut stack = vec![WakeWorld {
        words,
        publisher: Publisher::Publishing(0, Publish::new(first, cfg.policy)),
        sleepers: [Sleeper::Read; 2],
        received: [0; 2],
        entries,
    }];
    let mut seen = HashSet::new();
    let (mut finals, mut woken) = (0, 0);
    while let Some(w) = stack.pop() {
        if !seen.insert(w.clone()) {
            continue;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "over its time limit"
        );
        let mut moves = 0;
        if w.publisher != Publisher::Done {
            let mut next = w.clone();
            step_wake_publisher(&cfg, &mut next);
            if matches!(w.publisher, Publisher::Waking(_)) && w.sleepers.contains(&Sleeper::Asleep)
            {
                woken += 1;
            }
            stack.push(next);
            moves += 1;
        }
        for i in 0..2 {
            if !matches!(w.sleepers[i], Sleeper::Asleep | Sleeper::Done) {
                let mut next = w.clone();
                step_sleeper(&cfg, &mut next, i);
                stack.push(next);
                moves += 1;
            }
        }
        if moves == 0 {
            finals += 1;
            assert_eq!(
                w.sleepers,
                [Sleeper::Done; 2],
                "VIOLATION a receiver sleeps with samples queued (a lost wake-up)\nfinal state: {w:?}"
            );
        }
    }
    println!(
        "wake word: {} states, {finals} final, {woken} wakes of a sleeper, in {:.1?}",
        seen.len(),
        started.elapsed()
    );
    assert!(
        woken > 0,
        "no interleaving put a receiver to sleep before a publish"
    );
}
