//! Publish/subscribe's sample queue (`src/pubsub/`) as a reference model: what each
//! operation of a publisher and its subscribers must do, with no words, no steps and
//! no orderings. `tests/model_pubsub.rs` runs the real queue on the simulated kernel
//! beside it and requires the two to agree after every operation.
//!
//! # What it models
//! - [`SUBSCRIBERS`] subscriber processes, alive or dead, each joined to at most one
//!   entry and holding the samples it took (with the entry whose column holds them);
//! - [`ENTRIES`] entries: free, joined or left by a subscriber, and the descriptors
//!   queued in their ring (at most [`CAP`]), oldest first;
//! - [`SAMPLES`] samples: their generation, and each entry's column (slot `1 + e`):
//!   free, the publisher's in-flight reference, or a subscriber's held one;
//! - the publisher (alive or dead), the service's [`Policy`] and the wake count.
//!
//! # The rules, and the property each one encodes
//! - **P1**: a take by a live subscriber of a descriptor the publisher pushed gets that
//!   sample in that generation; a sample a live subscriber holds cannot be recycled; a
//!   descriptor queued for a live subscriber stays queued until it takes it or the
//!   publisher drops it under drop-oldest (giving its reference back).
//! - **P2**: every operation changes only its own entry's column of the samples it
//!   names (a recycle, the pool's, frees dead holders' slots of its sample).
//! - **P3**: a publish (or a reclaim) drains every entry whose subscriber left or
//!   died: its in-flight references are given back, its ring emptied, the entry freed.
//!   A recycle reclaims a dead subscriber's held slots.
//! - **P4**: a take of a descriptor naming another generation (a forged one,
//!   [`PubSub::forge_stale`]) gets `Stale` and holds nothing.
//! - **P5**: the ring holds at most [`CAP`] descriptors; a full ring refuses a publish
//!   under backpressure, and under drop-oldest loses its oldest.
//!
//! # Crashes: allowed outcomes, then observation
//! A subscriber killed inside an operation has done a prefix of its steps; which one is
//! not the model's to know. [`PubSub::take_killed`] and the other `*_killed` methods
//! take what the harness observed in the real words ([`TakeProgress`] and the like),
//! refuse it unless it is an outcome the operation allows, and apply it. The publisher
//! is killed only between its operations ([`PubSub::kill_publisher`]).

use std::collections::VecDeque;

/// Subscriber processes in a run.
pub const SUBSCRIBERS: usize = 3;
/// Entries of the service.
pub const ENTRIES: usize = 2;
/// Samples of the publisher's pool.
pub const SAMPLES: usize = 3;
/// Descriptors a ring holds.
pub const CAP: usize = 2;

/// What a publish does with a live subscriber's full ring.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Policy {
    /// Drops the oldest queued descriptor.
    DropOldest,
    /// Refuses the whole publish.
    Backpressure,
}

/// A descriptor: a sample and the generation it was published in.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Desc {
    /// The sample.
    pub sample: usize,
    /// Its generation.
    pub generation: u64,
}

/// Who an entry is.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum EntryState {
    /// Nobody.
    Free,
    /// Joined by a subscriber.
    Joined(usize),
    /// Left by a subscriber.
    Left(usize),
}

/// What entry `e`'s column (slot `1 + e`) of a sample holds.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Column {
    /// Nothing.
    Free,
    /// The publisher's in-flight reference.
    InFlight,
    /// A subscriber's held reference.
    Held(usize),
}

/// One entry.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Entry {
    /// Who it is.
    pub state: EntryState,
    /// Its queued descriptors, oldest first.
    pub ring: VecDeque<Desc>,
}

/// One sample of the pool.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Sample {
    /// Its generation (bumped by each recycle that reused it).
    pub generation: u64,
    /// Each entry's column.
    pub columns: [Column; ENTRIES],
}

/// One subscriber process.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Subscriber {
    /// Alive.
    pub alive: bool,
    /// The entry it joined and has not left.
    pub entry: Option<usize>,
    /// The samples it took and has not released: the descriptor, and the entry whose
    /// column holds it.
    pub held: Vec<(Desc, usize)>,
}

/// What a publish did (production's `Published`, counted the same way).
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct Published {
    /// Entries delivered to.
    pub delivered: u32,
    /// Descriptors dropped from full rings, their references given back.
    pub dropped: u32,
    /// Entries drained and freed.
    pub drained: u32,
    /// In-flight references the drains gave back.
    pub given_back: u32,
    /// Live entries skipped.
    pub skipped: u32,
    /// Backpressure: the entry whose full ring refused the publish.
    pub full: Option<usize>,
}

/// How a take ended.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Taken {
    /// A sample, now held.
    Sample(Desc),
    /// Nothing queued.
    Empty,
    /// The popped descriptor's reference was not there.
    Lost,
    /// The popped descriptor named another generation.
    Stale,
}

/// How far a killed take got, as observed.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum TakeProgress {
    /// Its ring is as it was.
    NotPopped,
    /// It popped the oldest descriptor; the column is unchanged.
    Popped,
    /// It popped it and took its reference over (then died: a dead holder's slot).
    Transferred,
}

/// The reference model of one service.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PubSub {
    /// The slow-subscriber policy.
    pub policy: Policy,
    /// Whether the publisher lives.
    pub publisher_alive: bool,
    /// The entries.
    pub entries: Vec<Entry>,
    /// The samples.
    pub samples: Vec<Sample>,
    /// The subscribers.
    pub subs: Vec<Subscriber>,
    /// Publishes that delivered: the wake word's count (production's word holds it
    /// times `WAKE_BUMP`, its low bit the waiters flag, which only a sleeping receiver
    /// sets; the model has none).
    pub wakes: u64,
}

impl PubSub {
    /// A fresh service: every entry free, every sample in generation 0 and free.
    pub fn new(policy: Policy) -> PubSub {
        PubSub {
            policy,
            publisher_alive: true,
            entries: vec![
                Entry {
                    state: EntryState::Free,
                    ring: VecDeque::new(),
                };
                ENTRIES
            ],
            samples: vec![
                Sample {
                    generation: 0,
                    columns: [Column::Free; ENTRIES],
                };
                SAMPLES
            ],
            subs: vec![
                Subscriber {
                    alive: true,
                    ..Subscriber::default()
                };
                SUBSCRIBERS
            ],
            wakes: 0,
        }
    }

    /// Subscriber `sub` joins: the first free entry, or `None`.
    pub fn join(&mut self, sub: usize) -> Option<usize> {
        let e = self
            .entries
            .iter()
            .position(|e| e.state == EntryState::Free)?;
        self.entries[e].state = EntryState::Joined(sub);
        self.subs[sub].entry = Some(e);
        Some(e)
    }

    /// A join killed: `joined` is whether the real one took an entry (the first free
    /// one, or it is refused). The subscriber is dead afterwards.
    pub fn join_killed(&mut self, sub: usize, joined: Option<usize>) -> Result<(), String> {
        if let Some(e) = joined {
            let first = self
                .entries
                .iter()
                .position(|e| e.state == EntryState::Free);
            if first != Some(e) {
                return Err(format!(
                    "a killed join took entry {e}, the first free is {first:?}"
                ));
            }
            self.join(sub);
        }
        self.kill(sub);
        Ok(())
    }

    /// Subscriber `sub` leaves its entry; `false` if it had none.
    pub fn leave(&mut self, sub: usize) -> bool {
        let Some(e) = self.subs[sub].entry.take() else {
            return false;
        };
        self.entries[e].state = EntryState::Left(sub);
        true
    }

    /// A leave killed: `left` is whether the real one got to its CAS.
    pub fn leave_killed(&mut self, sub: usize, left: bool) {
        if left {
            self.leave(sub);
        }
        self.kill(sub);
    }

    /// Subscriber `sub` dies (SIGKILL): its entry and held slots stay as they are,
    /// a dead subscriber's.
    pub fn kill(&mut self, sub: usize) {
        self.subs[sub].alive = false;
    }

    /// The publisher dies between its operations.
    pub fn kill_publisher(&mut self) {
        self.publisher_alive = false;
    }

    /// Whether entry `e` is a live subscriber's (it gets deliveries).
    fn live(&self, e: usize) -> bool {
        matches!(self.entries[e].state, EntryState::Joined(s) if self.subs[s].alive)
    }

    /// The pool's recycle of sample `s` by the publisher (its loan): `Some(generation)`
    /// if no live reference is left, else `None`. It looks at the columns in order and
    /// frees each dead holder's slot it passes (its tombstone reopened as free when it
    /// rolls back at a live one), so a refused recycle frees those before the first
    /// live reference.
    pub fn recycle(&mut self, s: usize) -> Option<u64> {
        for e in 0..ENTRIES {
            match self.samples[s].columns[e] {
                Column::Free => {}
                Column::InFlight if self.publisher_alive => return None,
                Column::Held(h) if self.subs[h].alive => return None,
                Column::InFlight | Column::Held(_) => {
                    self.samples[s].columns[e] = Column::Free;
                }
            }
        }
        let sample = &mut self.samples[s];
        sample.generation += 1;
        Some(sample.generation)
    }

    /// A publish of `sample` (its loan recycled it), or with `None` a reclaim pass.
    pub fn publish(&mut self, sample: Option<Desc>) -> Published {
        self.publish_trusting(sample, [false; ENTRIES])
    }

    /// A publish that trusts the subscriber of every entry `e` with `trusted[e]` (joined
    /// when the publish begins) alive without asking, as the publisher's liveness cache
    /// does: it is delivered to even if it died, unless its ring is full (then it is
    /// asked, and drained if dead). A reclaim (`None`) trusts nobody.
    pub fn publish_trusting(
        &mut self,
        sample: Option<Desc>,
        trusted: [bool; ENTRIES],
    ) -> Published {
        let trusted = trusted.map(|t| t && sample.is_some());
        let mut done = Published::default();
        if sample.is_some() && self.policy == Policy::Backpressure {
            if let Some(e) =
                (0..ENTRIES).find(|&e| self.live(e) && self.entries[e].ring.len() >= CAP)
            {
                done.full = Some(e);
                return done;
            }
        }
        for (e, trusted) in trusted.into_iter().enumerate() {
            let full = self.entries[e].ring.len() >= CAP;
            match self.entries[e].state {
                EntryState::Free => {}
                EntryState::Joined(_) if trusted && !full => {
                    if let Some(d) = sample {
                        self.deliver(e, d, &mut done);
                    }
                }
                _ if self.live(e) => {
                    if let Some(d) = sample {
                        self.deliver(e, d, &mut done);
                    }
                }
                _ => self.drain(e, &mut done),
            }
        }
        if done.delivered > 0 {
            self.wakes += 1;
        }
        done
    }

    fn deliver(&mut self, e: usize, d: Desc, done: &mut Published) {
        if self.entries[e].ring.len() >= CAP {
            if self.policy == Policy::Backpressure {
                done.skipped += 1;
                return;
            }
            let old = self.entries[e].ring.pop_front().expect("a full ring");
            let of = &mut self.samples[old.sample];
            // Given back only if the descriptor is of the sample's generation (a forged
            // one's reference stays until the entry is drained).
            if of.generation == old.generation && of.columns[e] == Column::InFlight {
                of.columns[e] = Column::Free;
                done.dropped += 1;
            }
        }
        let column = &mut self.samples[d.sample].columns[e];
        if *column != Column::Free {
            done.skipped += 1;
            return;
        }
        *column = Column::InFlight;
        self.entries[e].ring.push_back(d);
        done.delivered += 1;
    }

    fn drain(&mut self, e: usize, done: &mut Published) {
        for s in &mut self.samples {
            if s.columns[e] == Column::InFlight {
                s.columns[e] = Column::Free;
                done.given_back += 1;
            }
        }
        self.entries[e].ring.clear();
        self.entries[e].state = EntryState::Free;
        done.drained += 1;
    }

    /// Subscriber `sub`'s take from its entry (it must have one).
    pub fn take(&mut self, sub: usize) -> Taken {
        let e = self.subs[sub].entry.expect("a joined subscriber");
        let Some(d) = self.entries[e].ring.pop_front() else {
            return Taken::Empty;
        };
        let sample = &mut self.samples[d.sample];
        if sample.columns[e] != Column::InFlight {
            return Taken::Lost;
        }
        if sample.generation != d.generation {
            return Taken::Stale;
        }
        sample.columns[e] = Column::Held(sub);
        self.subs[sub].held.push((d, e));
        Taken::Sample(d)
    }

    /// A take killed at `progress` (observed). The subscriber is dead afterwards.
    pub fn take_killed(&mut self, sub: usize, progress: TakeProgress) -> Result<(), String> {
        let e = self.subs[sub].entry.expect("a joined subscriber");
        let front = self.entries[e].ring.front().copied();
        match (progress, front) {
            (TakeProgress::NotPopped, _) => {}
            (_, None) => return Err(format!("a killed take popped the empty ring {e}")),
            (TakeProgress::Popped, Some(_)) => {
                self.entries[e].ring.pop_front();
            }
            (TakeProgress::Transferred, Some(d)) => {
                let column = &mut self.samples[d.sample].columns[e];
                if *column != Column::InFlight {
                    return Err(format!(
                        "a killed take took over sample {}'s column {e}, which was {column:?}",
                        d.sample
                    ));
                }
                self.entries[e].ring.pop_front();
                // A stale descriptor's take dies before its untake: a dead holder's
                // slot either way, which the sample's recycle reclaims.
                *column = Column::Held(sub);
            }
        }
        self.kill(sub);
        Ok(())
    }

    /// Subscriber `sub` releases the `i`-th sample it holds: `true` (its slot was its).
    pub fn release(&mut self, sub: usize, i: usize) -> bool {
        let (d, e) = self.subs[sub].held.remove(i);
        let column = &mut self.samples[d.sample].columns[e];
        if *column != Column::Held(sub) {
            return false;
        }
        *column = Column::Free;
        true
    }

    /// A release killed: `released` is whether the real one freed the slot.
    pub fn release_killed(&mut self, sub: usize, i: usize, released: bool) {
        if released {
            self.release(sub, i);
        } else {
            self.subs[sub].held.remove(i);
        }
        self.kill(sub);
    }

    /// A hostile writer replaces entry `e`'s oldest queued descriptor by one of the
    /// same sample in the generation before: `false` if the ring is empty.
    pub fn forge_stale(&mut self, e: usize) -> bool {
        match self.entries[e].ring.front_mut() {
            Some(d) if d.generation > 0 => {
                d.generation -= 1;
                true
            }
            _ => false,
        }
    }
}
