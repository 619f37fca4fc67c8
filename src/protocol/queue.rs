//! The sample queue of publish/subscribe as resumable steps: [`Join`], [`Publish`]
//! (with its drain and drop-oldest give-back), [`Take`], [`leave_step`]. The protocol and
//! its properties are stated in the [`pubsub` docs](crate::pubsub); this module owns the code.
//!
//! Like [`Claim`](crate::protocol::holders::Claim), each operation is a value that says where it
//! stands; each `step` runs from one crash point to the next and makes at most one
//! access to a word another process writes. A read no other process can change at
//! that moment joins the step it serves: the publisher's `tail` (only it writes it), a
//! drained entry's `head` (its subscriber left or died), a sample's generation (only
//! the publisher's recycle bumps it; read by the publisher, or by a subscriber right
//! after its transfer took a slot, at which a recycle rolls back). The functions
//! [`join`], [`publish`], [`take`] and [`take_within`] run them to the end over an
//! [`Os`], with a crash point before each step; `tests/pubsub_interleavings.rs` steps
//! them one by one, interleaving processes and kills.
//!
//! # Memory orderings
//! Every access is `SeqCst`, as in the holder protocol: a take's transfer and a drain's
//! give-back race on one slot word, and a pop's CAS on `head` must be ordered after the
//! load of the `tail` that made the descriptor visible (the publisher stores the
//! descriptor before `tail`).
//!
//! # Planted bugs
//! Built with `SHMRC_PLANT=NAME`:
//! - `pubsub_drain_forgets`: the drain gives back the references of every sample but
//!   the last, so a dead subscriber's queued sample never returns to the pool.
//! - `pubsub_take_skips_generation`: a take keeps the slot it took over whatever the
//!   sample's generation, so a stale or forged descriptor reads another use's data.
//! - `pubsub_descriptor_first`: a publish pushes the descriptor before it puts the
//!   reference in the slot, so a subscriber can pop a descriptor whose reference is
//!   not there yet (its take ends `Lost`: a sample lost by a live subscriber).
//! - `pubsub_relaxed_push`: a publish stores the descriptor and the new `tail`
//!   `Relaxed` ("the tail is ours"), so a subscriber that loads the new tail need not
//!   see the descriptor stored before it: it pops the ring word's old value (a
//!   weak-memory bug: only `tests/loom_pubsub.rs` explores weak memory over the queue).
//! - `pubsub_wake_skips_waiter`: a publish never wakes the wake word's sleepers, even
//!   when a receiver announced itself ([`announce_waiter`]): a lost wake-up.

use std::task::Poll;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::os::Os;
use crate::protocol::holders::{self, FREE, Holders, StepOs, held_word, in_flight_word, run_steps};
use crate::sync::{
    AtomicU64, Ordering,
    Ordering::{Relaxed, SeqCst},
};
use crate::token::Token;

/// Flag of a departed subscriber's entry: `LEFT | token`.
pub const LEFT: u64 = 1 << 62;

/// The wake word's waiters flag (its low bit): a receiver about to sleep sets it
/// ([`announce_waiter`]); a publish's bump clears it and wakes the sleepers only if it
/// was set. The count of publishes is in the bits above it (a bump adds [`WAKE_BUMP`]).
pub const WAITERS: u64 = 1;
/// What a publish adds to the wake word (the flag's bit is below it).
pub const WAKE_BUMP: u64 = 2;

/// Bits of a descriptor that hold the generation (the sample index is above them).
const GENERATION_BITS: u32 = 40;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
/// The most samples a service can have (the index has 24 bits).
pub const MAX_SAMPLES: usize = 1 << (64 - GENERATION_BITS);

/// The ordering of a push's stores (the descriptor, then the tail): `SeqCst`, but for
/// the planted `pubsub_relaxed_push`.
fn push_order() -> Ordering {
    if cfg!(shmrc_plant = "pubsub_relaxed_push") {
        Relaxed
    } else {
        SeqCst
    }
}

/// The holder slot of entry `entry` in every sample (slot 0 is the publisher's own).
pub fn subscriber_slot(entry: usize) -> usize {
    entry + 1
}

/// What a ring holds: a sample (its index in the service's sample table) and the
/// generation it was published in (the low 40 bits of the sample's generation word).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Descriptor {
    /// Index in the sample table.
    pub sample: u32,
    /// Generation, modulo 2^40.
    pub generation: u64,
}

impl Descriptor {
    /// The descriptor of sample `sample` in generation `generation`; `None` if the index
    /// does not fit its 24 bits.
    pub fn new(sample: usize, generation: u64) -> Option<Descriptor> {
        if sample >= MAX_SAMPLES {
            return None;
        }
        Some(Descriptor {
            sample: u32::try_from(sample).ok()?,
            generation: generation & GENERATION_MASK,
        })
    }

    /// The ring word.
    pub fn word(self) -> u64 {
        (u64::from(self.sample) << GENERATION_BITS) | self.generation
    }

    /// Decodes a ring word (every word decodes; a forged one names a sample that may
    /// not exist, or another generation: [`Take`] checks both).
    pub fn decode(word: u64) -> Descriptor {
        Descriptor {
            // The shift leaves 24 bits: the cast cannot truncate.
            sample: (word >> GENERATION_BITS) as u32,
            generation: word & GENERATION_MASK,
        }
    }

    /// Whether `h` (the sample it names) is in this descriptor's generation.
    fn matches(self, h: &Holders<'_>) -> bool {
        h.generation() & GENERATION_MASK == self.generation
    }
}

/// What an entry's state word says.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum EntryState {
    /// Nobody.
    Free,
    /// Joined by this subscriber.
    Joined(Token),
    /// Left by this subscriber.
    Left(Token),
    /// A word no step writes (a hostile writer's): treated as a dead subscriber's.
    Garbage(u64),
}

impl EntryState {
    /// Decodes a state word.
    pub fn decode(word: u64) -> EntryState {
        if word == FREE {
            return EntryState::Free;
        }
        if word & LEFT != 0 {
            return Token::from_word(word & !LEFT)
                .map_or(EntryState::Garbage(word), EntryState::Left);
        }
        Token::from_word(word).map_or(EntryState::Garbage(word), EntryState::Joined)
    }
}

/// The state word of a departed subscriber.
pub fn left_word(token: Token) -> u64 {
    token.word() | LEFT
}

/// The shared words of one subscriber entry.
#[derive(Copy, Clone)]
pub struct Entry<'a> {
    state: &'a AtomicU64,
    head: &'a AtomicU64,
    tail: &'a AtomicU64,
    ring: &'a [AtomicU64],
}

impl<'a> Entry<'a> {
    /// The view over an entry's words; `ring` holds the capacity `C` (at least 1).
    pub fn new(
        state: &'a AtomicU64,
        head: &'a AtomicU64,
        tail: &'a AtomicU64,
        ring: &'a [AtomicU64],
    ) -> Entry<'a> {
        Entry {
            state,
            head,
            tail,
            ring,
        }
    }

    fn capacity(&self) -> u64 {
        self.ring.len() as u64
    }

    fn ring_word(&self, position: u64) -> &'a AtomicU64 {
        // The remainder is below the ring's length: the cast cannot truncate.
        &self.ring[(position % self.capacity()) as usize]
    }

    /// Whether `head` and `tail` are within the ring's bounds, with room for a push
    /// (a tail at `u64::MAX`, which no step reaches, would overflow it).
    fn in_bounds(&self, head: u64, tail: u64) -> bool {
        head <= tail && tail < u64::MAX && tail - head <= self.capacity()
    }
}

/// Makes a sample's holder view when a step names the sample ([`Queue::with_lookup`]).
pub trait SampleViews {
    /// How many samples the table holds.
    fn count(&self) -> usize;
    /// Sample `s`'s view; `None` if it has none (the steps treat it as no such sample).
    fn view(&self, s: usize) -> Option<Holders<'_>>;
}

/// The samples' holder views: a slice of them all, or a lookup that makes one when a
/// step names its sample (production's: a publish touches one sample, a take one, and
/// a view per row and its `Vec` for every operation were a tenth of a publish→take
/// loop).
#[derive(Copy, Clone)]
enum Samples<'a> {
    All(&'a [Holders<'a>]),
    Lookup(&'a dyn SampleViews),
}

impl<'a> Samples<'a> {
    fn len(&self) -> usize {
        match self {
            Samples::All(all) => all.len(),
            Samples::Lookup(views) => views.count(),
        }
    }

    /// Sample `s`'s view, `None` past the table (or a row the lookup cannot view).
    fn get(&self, s: usize) -> Option<Holders<'a>> {
        match *self {
            Samples::All(all) => all.get(s).copied(),
            Samples::Lookup(views) => (s < views.count()).then(|| views.view(s)).flatten(),
        }
    }
}

/// The queue of one service: its entries, its samples' holder words, its wake word,
/// and the publisher's recent sightings of its subscribers alive ([`Queue::trusting`]).
#[derive(Copy, Clone)]
pub struct Queue<'a> {
    entries: &'a [Entry<'a>],
    samples: Samples<'a>,
    wake: &'a AtomicU64,
    alive: &'a [u64],
}

impl<'a> Queue<'a> {
    /// The view; every sample's holders must have `1 + entries.len()` slots and a
    /// generation word, and every ring at least one word.
    pub fn new(entries: &'a [Entry<'a>], samples: &'a [Holders<'a>], wake: &'a AtomicU64) -> Self {
        Queue {
            entries,
            samples: Samples::All(samples),
            wake,
            alive: &[],
        }
    }

    /// The view with each sample's holders made by `samples` when a step names it; the
    /// same requirements as [`Queue::new`].
    pub fn with_lookup(
        entries: &'a [Entry<'a>],
        samples: &'a dyn SampleViews,
        wake: &'a AtomicU64,
    ) -> Self {
        Queue {
            entries,
            samples: Samples::Lookup(samples),
            wake,
            alive: &[],
        }
    }

    /// The same view, with `alive[e]` the state word of entry `e` whose subscriber the
    /// publisher saw alive recently ([`FREE`]: none): a [`Publish`] that loads exactly
    /// that word delivers without asking the subscriber's liveness (a system call),
    /// unless the ring is full. A subscriber that died since is drained by the first
    /// publish that asks again (the publisher's cache ages out within a millisecond:
    /// `Publisher`), by a reclaim, or when its ring fills.
    pub fn trusting(self, alive: &'a [u64]) -> Self {
        Queue { alive, ..self }
    }

    /// Whether entry `e`'s state word `seen` is one the publisher saw alive recently.
    fn trusted(&self, e: usize, seen: u64) -> bool {
        seen != FREE && self.alive.get(e) == Some(&seen)
    }

    /// The wake word's value (what a blocking receiver waits to see change).
    pub fn wake_word(&self) -> u64 {
        // SeqCst: read before the receiver's take, ordered after any delivery it missed.
        self.wake.load(SeqCst)
    }
}

/// What a subscriber does with a full ring: the service's policy, chosen at creation.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Policy {
    /// The publisher drops the oldest queued sample (gives its reference back).
    DropOldest,
    /// A publish that finds a live subscriber's ring full delivers to nobody.
    Backpressure,
}

/// Where a [`Join`] stands.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum JoinAt {
    /// Load entry `.0`'s state.
    Load(usize),
    /// CAS entry `.0`'s state `FREE → my token`.
    Cas(usize),
}

/// A subscriber's join: takes the first free entry. Ends with its index, or `None`
/// when every entry was taken (the caller may retry: the publisher frees the entries
/// of departed and dead subscribers at its next publish).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Join {
    at: JoinAt,
}

impl Default for Join {
    fn default() -> Self {
        Join::new()
    }
}

impl Join {
    /// A join at its first crash point.
    pub fn new() -> Join {
        Join {
            at: JoinAt::Load(0),
        }
    }

    /// Runs to the next crash point (`Pending`) or to its end.
    pub fn step(&mut self, os: &impl StepOs, q: &Queue<'_>) -> Poll<Option<usize>> {
        match self.at {
            JoinAt::Load(e) => {
                let Some(entry) = q.entries.get(e) else {
                    return Poll::Ready(None);
                };
                // SeqCst: one order over state words (the CAS decides; the load skips).
                if entry.state.load(SeqCst) == FREE {
                    self.at = JoinAt::Cas(e);
                } else {
                    self.at = JoinAt::Load(e + 1);
                }
                Poll::Pending
            }
            JoinAt::Cas(e) => {
                let word = held_word(os.current());
                // SeqCst: the entry is ours before any publish that reads it delivers.
                if q.entries[e]
                    .state
                    .compare_exchange(FREE, word, SeqCst, SeqCst)
                    .is_ok()
                {
                    return Poll::Ready(Some(e));
                }
                self.at = JoinAt::Load(e + 1);
                Poll::Pending
            }
        }
    }
}

/// The one shared step of a subscriber's leave (after its crash point): its entry's
/// state from its token to `LEFT | token`. `false` if the entry was not its own.
pub fn leave_step(os: &impl StepOs, q: &Queue<'_>, entry: usize) -> bool {
    let me = os.current();
    q.entries.get(entry).is_some_and(|e| {
        // SeqCst: after it, the publisher's next read of the state drains the entry.
        e.state
            .compare_exchange(held_word(me), left_word(me), SeqCst, SeqCst)
            .is_ok()
    })
}

/// Where a [`Publish`] stands.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum PublishAt {
    /// Backpressure's check pass: load entry `.0`'s state.
    CheckState(usize),
    /// Backpressure's check pass: load entry `.0`'s head; a full ring refuses if its
    /// subscriber (`.1`) lives (asked only then: a liveness check is a system call).
    CheckRoom(usize, Token),
    /// Load entry `.0`'s state and decide: deliver, drain or pass.
    State(usize),
    /// Load entry `.0`'s head: room, or a full ring. `.1`: the subscriber's token when
    /// its liveness was not asked (trusted, [`Queue::trusting`]): a full ring asks it.
    Room(usize, Option<Token>),
    /// Drop-oldest: load the descriptor at `head`.
    PopRead {
        /// The entry.
        entry: usize,
        /// The head seen.
        head: u64,
    },
    /// Drop-oldest: CAS `head` one on.
    PopCas {
        /// The entry.
        entry: usize,
        /// The head seen.
        head: u64,
        /// The descriptor read at it.
        word: u64,
    },
    /// Drop-oldest: give the popped descriptor's reference back.
    GiveBack {
        /// The entry.
        entry: usize,
        /// The descriptor popped.
        word: u64,
    },
    /// CAS the sample's slot of the entry `FREE → IN_FLIGHT | me`.
    Reference(usize),
    /// Store the descriptor at `ring[tail % C]`.
    Write(usize),
    /// Store `tail + 1`.
    Push(usize),
    /// Drain: give back the in-flight reference in sample `sample`'s slot of the entry.
    Drain {
        /// The entry.
        entry: usize,
        /// The sample.
        sample: usize,
        /// The state word that made it drain.
        seen: u64,
    },
    /// Drain: store `head = tail` (both 0 if the tail is at `u64::MAX`, where no step
    /// leaves it: a hostile writer's).
    ResetRing {
        /// The entry.
        entry: usize,
        /// The state word that made it drain.
        seen: u64,
    },
    /// Drain: CAS the state word `seen → FREE`.
    FreeEntry {
        /// The entry.
        entry: usize,
        /// The state word that made it drain.
        seen: u64,
    },
    /// Load the wake word (a publish that delivered bumps it).
    Wake,
    /// CAS the wake word from `.0` (its value seen) to the next count, the waiters
    /// flag cleared.
    WakeCas(u64),
}

/// How a [`Publish`] ended.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Published {
    /// Entries the sample was delivered to.
    pub delivered: u32,
    /// Older samples dropped from full rings (drop-oldest).
    pub dropped: u32,
    /// Entries of departed or dead subscribers drained and freed.
    pub drained: u32,
    /// In-flight references the drains gave back.
    pub given_back: u32,
    /// Live entries skipped because their words are out of bounds or their slot was
    /// not free (only a hostile writer makes either).
    pub skipped: u32,
    /// Backpressure: the entry whose full ring refused the publish (nothing delivered).
    pub full: Option<usize>,
    /// The wake word's bump found the waiters flag set: a receiver may sleep on it, so
    /// the caller wakes the word (`Os::wake_word`; [`publish`] does).
    pub wake: bool,
}

/// The publisher's publish of one sample (or, [`Publish::reclaim`], of none: a drain
/// pass): see the module docs of [`super`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Publish {
    sample: Option<Descriptor>,
    policy: Policy,
    done: Published,
    at: PublishAt,
}

impl Publish {
    /// A publish of `sample` (which the publisher holds, recycled: every slot but its own
    /// free) under `policy`, at its first crash point.
    pub fn new(sample: Descriptor, policy: Policy) -> Publish {
        let at = match policy {
            Policy::Backpressure => PublishAt::CheckState(0),
            Policy::DropOldest => PublishAt::State(0),
        };
        Publish {
            sample: Some(sample),
            policy,
            done: Published::default(),
            at,
        }
    }

    /// A pass that only drains departed and dead subscribers' entries.
    pub fn reclaim() -> Publish {
        Publish {
            sample: None,
            policy: Policy::DropOldest,
            done: Published::default(),
            at: PublishAt::State(0),
        }
    }

    fn next_entry(&self, entry: usize, q: &Queue<'_>) -> PublishAt {
        if entry + 1 < q.entries.len() {
            PublishAt::State(entry + 1)
        } else {
            PublishAt::Wake
        }
    }

    fn drain_next(entry: usize, sample: usize, seen: u64, q: &Queue<'_>) -> PublishAt {
        let last = if cfg!(shmrc_plant = "pubsub_drain_forgets") {
            q.samples.len().saturating_sub(1)
        } else {
            q.samples.len()
        };
        if sample < last {
            PublishAt::Drain {
                entry,
                sample,
                seen,
            }
        } else {
            PublishAt::ResetRing { entry, seen }
        }
    }

    /// Runs to the next crash point (`Pending`) or to its end.
    pub fn step(&mut self, os: &impl StepOs, q: &Queue<'_>) -> Poll<Published> {
        let me = os.current();
        let mine = in_flight_word(me);
        self.at = match self.at {
            PublishAt::CheckState(e) => match q.entries.get(e) {
                None => PublishAt::State(0),
                // SeqCst: one order over state words.
                Some(entry) => match EntryState::decode(entry.state.load(SeqCst)) {
                    EntryState::Joined(t) => PublishAt::CheckRoom(e, t),
                    _ => PublishAt::CheckState(e + 1),
                },
            },
            PublishAt::CheckRoom(e, subscriber) => {
                let entry = &q.entries[e];
                // SeqCst: the tail is ours; the head is the subscriber's pop.
                let (head, tail) = (entry.head.load(SeqCst), entry.tail.load(SeqCst));
                let full = entry.in_bounds(head, tail) && tail - head >= entry.capacity();
                if full && os.is_alive(subscriber) {
                    self.done.full = Some(e);
                    return Poll::Ready(self.done);
                }
                PublishAt::CheckState(e + 1)
            }
            PublishAt::State(e) => match q.entries.get(e) {
                None => PublishAt::Wake,
                Some(entry) => {
                    // SeqCst: a leave or a join before this load is seen by it.
                    let seen = entry.state.load(SeqCst);
                    match EntryState::decode(seen) {
                        EntryState::Free => self.next_entry(e, q),
                        // A reclaim trusts nobody: it asks every joined subscriber.
                        EntryState::Joined(t) if self.sample.is_some() && q.trusted(e, seen) => {
                            PublishAt::Room(e, Some(t))
                        }
                        EntryState::Joined(t) if os.is_alive(t) => match self.sample {
                            Some(_) => PublishAt::Room(e, None),
                            None => self.next_entry(e, q),
                        },
                        _ => Self::drain_next(e, 0, seen, q),
                    }
                }
            },
            PublishAt::Room(e, trusted) => {
                let entry = &q.entries[e];
                // SeqCst: the subscriber's pops; the tail is ours.
                let (head, tail) = (entry.head.load(SeqCst), entry.tail.load(SeqCst));
                let full = entry.in_bounds(head, tail) && tail - head >= entry.capacity();
                let ask = full && !cfg!(shmrc_plant = "pubsub_trust_full_ring");
                // Trusted, but dead: a full ring is never left to a dead subscriber.
                let dead = trusted.filter(|&t| ask && !os.is_alive(t));
                if let Some(t) = dead {
                    Self::drain_next(e, 0, held_word(t), q)
                } else if !entry.in_bounds(head, tail) {
                    self.done.skipped += 1;
                    self.next_entry(e, q)
                } else if tail - head < entry.capacity() {
                    if cfg!(shmrc_plant = "pubsub_descriptor_first") {
                        PublishAt::Write(e)
                    } else {
                        PublishAt::Reference(e)
                    }
                } else if self.policy == Policy::DropOldest {
                    PublishAt::PopRead { entry: e, head }
                } else {
                    // Backpressure's check found room, and room only grows: a hostile
                    // writer's doing. Nothing is delivered to this entry.
                    self.done.skipped += 1;
                    self.next_entry(e, q)
                }
            }
            PublishAt::PopRead { entry, head } => {
                // SeqCst: read before the pop's CAS, which a later push cannot pass.
                let word = q.entries[entry].ring_word(head).load(SeqCst);
                PublishAt::PopCas { entry, head, word }
            }
            PublishAt::PopCas { entry, head, word } => {
                // SeqCst: the pop races the subscriber's; the winner owns the reference.
                if q.entries[entry]
                    .head
                    .compare_exchange(head, head + 1, SeqCst, SeqCst)
                    .is_ok()
                {
                    PublishAt::GiveBack { entry, word }
                } else {
                    PublishAt::Room(entry, None)
                }
            }
            PublishAt::GiveBack { entry, word } => {
                let d = Descriptor::decode(word);
                let given_back = q.samples.get(d.sample as usize).is_some_and(|h| {
                    d.matches(&h) && holders::transfer_step(&h, subscriber_slot(entry), mine, FREE)
                });
                if given_back {
                    self.done.dropped += 1;
                }
                PublishAt::Room(entry, None)
            }
            PublishAt::Reference(e) => {
                let sample = self.sample.map_or(0, |d| d.sample as usize);
                // SeqCst (in the CAS): the reference exists before the descriptor does.
                let slots_ok = q
                    .samples
                    .get(sample)
                    .is_some_and(|h| holders::transfer_step(&h, subscriber_slot(e), FREE, mine));
                if slots_ok && cfg!(shmrc_plant = "pubsub_descriptor_first") {
                    self.next_entry(e, q)
                } else if slots_ok {
                    PublishAt::Write(e)
                } else {
                    self.done.skipped += 1;
                    self.next_entry(e, q)
                }
            }
            PublishAt::Write(e) => {
                let entry = &q.entries[e];
                let word = self.sample.map_or(0, Descriptor::word);
                // SeqCst: the tail is ours; the store comes before the tail's.
                entry
                    .ring_word(entry.tail.load(SeqCst))
                    .store(word, push_order());
                PublishAt::Push(e)
            }
            PublishAt::Push(e) => {
                let entry = &q.entries[e];
                // SeqCst: publishes the descriptor to the subscriber's load of the tail.
                entry.tail.store(entry.tail.load(SeqCst) + 1, push_order());
                self.done.delivered += 1;
                if cfg!(shmrc_plant = "pubsub_descriptor_first") {
                    PublishAt::Reference(e)
                } else {
                    self.next_entry(e, q)
                }
            }
            PublishAt::Drain {
                entry,
                sample,
                seen,
            } => {
                let given_back = q.samples.get(sample).is_some_and(|h| {
                    holders::transfer_step(&h, subscriber_slot(entry), mine, FREE)
                });
                if given_back {
                    self.done.given_back += 1;
                }
                Self::drain_next(entry, sample + 1, seen, q)
            }
            PublishAt::ResetRing { entry, seen } => {
                let e = &q.entries[entry];
                // SeqCst: nobody else writes the ring words of a drained entry.
                let tail = e.tail.load(SeqCst);
                if tail == u64::MAX {
                    // A hostile writer's tail with no room for a push: start over.
                    e.tail.store(0, SeqCst);
                    e.head.store(0, SeqCst);
                } else {
                    e.head.store(tail, SeqCst);
                }
                PublishAt::FreeEntry { entry, seen }
            }
            PublishAt::FreeEntry { entry, seen } => {
                // SeqCst: the entry is free (and empty) before a joiner can take it.
                if q.entries[entry]
                    .state
                    .compare_exchange(seen, FREE, SeqCst, SeqCst)
                    .is_ok()
                {
                    self.done.drained += 1;
                }
                self.next_entry(entry, q)
            }
            PublishAt::Wake => {
                if self.done.delivered == 0 {
                    return Poll::Ready(self.done);
                }
                // SeqCst: after every push, so a receiver that read the old value and
                // then found its ring empty sees the bump (its announce's CAS fails,
                // or its futex wait compares a changed word).
                PublishAt::WakeCas(q.wake.load(SeqCst))
            }
            PublishAt::WakeCas(seen) => {
                let bumped = (seen & !WAITERS).wrapping_add(WAKE_BUMP);
                // SeqCst: the flag read here is the one a sleeper set before its wait.
                match q.wake.compare_exchange(seen, bumped, SeqCst, SeqCst) {
                    Ok(_) => {
                        self.done.wake =
                            seen & WAITERS != 0 && !cfg!(shmrc_plant = "pubsub_wake_skips_waiter");
                        return Poll::Ready(self.done);
                    }
                    // A receiver set the flag meanwhile: bump from what it wrote.
                    Err(now) => PublishAt::WakeCas(now),
                }
            }
        };
        Poll::Pending
    }
}

/// Where a [`Take`] stands.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum TakeAt {
    /// Load the head (first, so that the tail loaded next is at least it). `stuck`: the
    /// head of a first look that found the tail more than a ring ahead (the head had
    /// moved on since, or the words are corrupt: the same head again says which).
    Head {
        /// The head of the first look, if this is a second one.
        stuck: Option<u64>,
    },
    /// Load the tail.
    Tail {
        /// The head seen.
        head: u64,
    },
    /// Load the descriptor at the head.
    Read {
        /// The head seen.
        head: u64,
    },
    /// CAS the head one on.
    Pop {
        /// The head seen.
        head: u64,
        /// The descriptor read.
        word: u64,
    },
    /// Take the popped descriptor's reference over.
    Transfer {
        /// The descriptor popped.
        word: u64,
    },
    /// Turn a slot taken over for another generation back into the in-flight word.
    Untake {
        /// The descriptor popped.
        word: u64,
    },
}

/// How a [`Take`] ended.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Taken {
    /// A sample, now held by the subscriber in its entry's slot; its data may be read.
    Sample(Descriptor),
    /// Nothing queued.
    Empty,
    /// The popped descriptor's reference was gone (the publisher died and a sweep
    /// reclaimed it) or it named no sample: nothing held.
    Lost,
    /// The popped descriptor named another generation of its sample: nothing held.
    Stale,
    /// The ring's words break its bounds (only a hostile writer makes that).
    Corrupt,
}

/// A subscriber's take of the oldest queued sample from its entry.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Take {
    entry: usize,
    publisher: Token,
    at: TakeAt,
}

impl Take {
    /// A take from entry `entry` (the caller's, joined) of a service published by
    /// `publisher`, at its first crash point.
    pub fn new(entry: usize, publisher: Token) -> Take {
        Take {
            entry,
            publisher,
            at: TakeAt::Head { stuck: None },
        }
    }

    /// Where it stands (the checkers' bookkeeping: past its pop, a descriptor is its own).
    pub fn at(&self) -> TakeAt {
        self.at
    }

    /// Runs to the next crash point (`Pending`) or to its end.
    pub fn step(&mut self, os: &impl StepOs, q: &Queue<'_>) -> Poll<Taken> {
        let Some(entry) = q.entries.get(self.entry) else {
            return Poll::Ready(Taken::Corrupt);
        };
        let slot = subscriber_slot(self.entry);
        self.at = match self.at {
            TakeAt::Head { stuck } => {
                // SeqCst: the publisher's drop-oldest pops.
                let head = entry.head.load(SeqCst);
                if stuck == Some(head) {
                    return Poll::Ready(Taken::Corrupt);
                }
                TakeAt::Tail { head }
            }
            TakeAt::Tail { head } => {
                // SeqCst: the publisher stores the descriptor before the tail.
                let tail = entry.tail.load(SeqCst);
                if head == tail {
                    return Poll::Ready(Taken::Empty);
                }
                // The head was at most the tail when it was loaded, and the tail only
                // grows: a tail behind it is corrupt. A tail more than a ring ahead
                // means the publisher's drop-oldest moved the head on meanwhile (or
                // corrupt words): look again.
                if tail < head {
                    return Poll::Ready(Taken::Corrupt);
                }
                if !entry.in_bounds(head, tail) {
                    TakeAt::Head { stuck: Some(head) }
                } else {
                    TakeAt::Read { head }
                }
            }
            TakeAt::Read { head } => TakeAt::Pop {
                head,
                // SeqCst: read before the pop, which a later push cannot pass.
                word: entry.ring_word(head).load(SeqCst),
            },
            TakeAt::Pop { head, word } => {
                // SeqCst: the pop races the publisher's; the winner owns the reference.
                if entry
                    .head
                    .compare_exchange(head, head + 1, SeqCst, SeqCst)
                    .is_ok()
                {
                    TakeAt::Transfer { word }
                } else {
                    TakeAt::Head { stuck: None }
                }
            }
            TakeAt::Transfer { word } => {
                let d = Descriptor::decode(word);
                let Some(h) = q.samples.get(d.sample as usize) else {
                    return Poll::Ready(Taken::Lost);
                };
                let mine = held_word(os.current());
                if !holders::transfer_step(&h, slot, in_flight_word(self.publisher), mine) {
                    return Poll::Ready(Taken::Lost);
                }
                // The generation word is the publisher's recycle's, which rolls back
                // at the slot we now hold: read after the transfer, as an attach does.
                if cfg!(shmrc_plant = "pubsub_take_skips_generation") || d.matches(&h) {
                    return Poll::Ready(Taken::Sample(d));
                }
                TakeAt::Untake { word }
            }
            TakeAt::Untake { word } => {
                // Back to the publisher's in-flight word, not to FREE: the reference is
                // the one a true descriptor of this column names (a forged one aimed
                // at it must not make that one `Lost`). Killed before this step, the
                // slot is a dead holder's, which the sample's next recycle reclaims.
                let d = Descriptor::decode(word);
                if let Some(h) = q.samples.get(d.sample as usize) {
                    let back = in_flight_word(self.publisher);
                    holders::transfer_step(&h, slot, held_word(os.current()), back);
                }
                return Poll::Ready(Taken::Stale);
            }
        };
        Poll::Pending
    }
}

/// Joins the service: the entry taken, or `None` if all were.
pub fn join<O: Os>(os: &O, q: &Queue<'_>) -> Result<Option<usize>> {
    let mut join = Join::new();
    run_steps(os, || join.step(os, q))
}

/// Leaves the service's entry `entry`; `false` if it was not the caller's.
pub fn leave<O: Os>(os: &O, q: &Queue<'_>, entry: usize) -> Result<bool> {
    run_steps(os, || Poll::Ready(leave_step(os, q, entry)))
}

/// Publishes `sample` (or, with `None`, only drains departed and dead subscribers).
pub fn publish<O: Os>(
    os: &O,
    q: &Queue<'_>,
    sample: Option<Descriptor>,
    policy: Policy,
) -> Result<Published> {
    let mut publish = sample.map_or_else(Publish::reclaim, |d| Publish::new(d, policy));
    let published = run_steps(os, || publish.step(os, q))?;
    if published.wake {
        // After the wake word's bump (the publish's last step), and only when it found
        // a receiver's flag: a receiver that read the word before the bump and found
        // its ring empty either sees it changed, or announced itself first and is
        // woken here.
        os.wake_word(q.wake);
    }
    Ok(published)
}

/// The one shared step of a receiver about to sleep on the wake word, after a take
/// found its ring empty: `seen` is the word it read *before* that take. Sets the
/// waiters flag ([`WAITERS`]) by a CAS from `seen`, and says what value to sleep on
/// (`Os::wait_word`): `seen` with the flag. `None` when the word moved past `seen` (a
/// publish bumped it since: take again, without sleeping). A publish's bump clears the
/// flag and wakes the word only if it was set; so a bump after this CAS wakes the
/// sleeper, and a bump before it makes the CAS fail: no wake-up is lost.
pub fn announce_waiter(q: &Queue<'_>, seen: u64) -> Option<u64> {
    let flagged = seen | WAITERS;
    if seen == flagged {
        return Some(flagged);
    }
    // SeqCst: the bump that clears the flag reads it after this CAS, or moved the word
    // before it (then the CAS fails).
    match q.wake.compare_exchange(seen, flagged, SeqCst, SeqCst) {
        Ok(_) => Some(flagged),
        // Another receiver of the word set the flag: sleep on the flagged value too.
        Err(now) if now == flagged => Some(flagged),
        Err(_) => None,
    }
}

/// Takes the oldest queued sample of entry `entry`.
pub fn take<O: Os>(os: &O, q: &Queue<'_>, entry: usize, publisher: Token) -> Result<Taken> {
    let mut take = Take::new(entry, publisher);
    run_steps(os, || take.step(os, q))
}

/// Takes the oldest queued sample of entry `entry`, sleeping on the wake word
/// ([`Os::wait_word`]) while the ring is empty, for `timeout` at most (then `Empty`).
/// No wake-up is lost: the word is read *before* each take, the waiters flag is set
/// from that value ([`announce_waiter`]) before the sleep, and a publish bumps it after
/// its push and wakes if the flag was set; so a push the take missed has changed the
/// word by the time the announce or the wait compares it.
pub fn take_within<O: Os>(
    os: &O,
    q: &Queue<'_>,
    entry: usize,
    publisher: Token,
    timeout: Duration,
) -> Result<Taken> {
    // A timeout too long to add to now (`Duration::MAX`) is no deadline.
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let seen = q.wake_word();
        let taken = take(os, q, entry, publisher)?;
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        if taken != Taken::Empty || left.is_zero() {
            return Ok(taken);
        }
        if let Some(flagged) = announce_waiter(q, seen) {
            os.wait_word(q.wake, flagged, left);
        }
    }
}
