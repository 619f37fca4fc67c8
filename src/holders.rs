//! The crash-safe holder protocol: who holds a segment (a file_system one, or a pool's
//! memfd), and who may destroy it. Everything here is generic over [`Os`], touches
//! shared state only through the atomics of [`crate::sync`], and calls
//! [`Os::crash_point`] before every shared step, so the simulated kernel can kill a
//! process between any two of them.
//!
//! # Slots
//! A segment has `capacity` slots, each one word:
//! - `FREE` (0): nobody;
//! - a token: a process holds a reference (at most one slot per process; more
//!   references inside the process are an `Arc`);
//! - `IN_FLIGHT | token`: a reference travelling in a handle that `token` sent and no
//!   receiver has taken over yet; it is alive exactly while its sender is;
//! - `TOMB_BY | token` ([`tomb_word`]): turned by the finalizer (or recycler) `token`
//!   committing to destroy (or reuse) the segment. Only `token` turns it back or passes
//!   over it while it lives; a dead one's is any finalizer's to take over. ([`TOMB`],
//!   all ones, a tombstone of nobody, is written by no step: a hostile writer's, taken
//!   like a dead one's.)
//!
//! Any other word (only a hostile writer makes one) counts as a dead holder and is
//! reclaimed, so no slot state is unrecoverable (P5).
//!
//! # The mark
//! A header word ([`Holders::with_mark`]): every slot at or above it is `FREE`. A claim
//! raises it before it takes a slot at or above it, nothing lowers it, and finalizes
//! and recycles touch only the slots below it, so their cost follows the slots in use,
//! not the capacity. A finalize *seals* the finalizer word ([`SEALING`]) once the slots
//! below the mark are its tombstones and re-reads the mark; a claim reads the
//! finalizer word after its last read or raise of the mark and takes nothing under a
//! seal. So a claim at or above the mark the finalize read is seen by the re-read (the
//! finalize goes on up to the new mark), or sees the seal (`docs/PROTOCOL.md` §5). A
//! recycle makes the same handshake before its bump: both step one sub-machine,
//! [`SealAt`].
//!
//! # Operations
//! - [`claim`]: CAS a `FREE` slot (or a dead holder's) to my word, the mark raised
//!   above it first and the finalizer word found not sealed after. All slots `TOMB`:
//!   the segment is gone (or, not yet committed, may be revived by a rollback: a claim
//!   of a dead sender's handle may then say `Gone` of a segment that lives on).
//! - [`release`]: CAS my slot from my word to `FREE`, then [`finalize`].
//! - [`give_back_in_flight`]: an unattached handle's in-flight reference vacated, if
//!   the segment is still in the handle's use (a memfd's stops there; a named
//!   segment's caller then finalizes).
//! - [`finalize`] (anyone: releaser, sweeper, manager): reclaim dead holders, and if
//!   nobody live holds a slot, take the finalizer word and turn every slot below the
//!   mark `FREE → TOMB` in order. A slot that is held makes it roll back (`TOMB → FREE`)
//!   and stop: the segment lives. All its `TOMB`: seal, re-read the mark (grown: unseal
//!   and go on up to it), commit (CAS the finalizer word to
//!   [`COMMITTED`]; taken over meanwhile, it rolls back instead), unlink. A finalizer killed half-way
//!   leaves its (dead) token in the finalizer word; the next one takes over, continues
//!   from the slots already turned, or rolls them back. A *live* finalizer found at
//!   work is asked to run again (the pending word counts the requests since it last
//!   started a round); the request that reaches [`Finalize::PATIENCE`] takes it over,
//!   if nobody live holds a slot: it is stopped, traced, frozen or a forged word (P5).
//!   Its tombstones stay its own, so when it resumes neither undoes the other's work.
//!
//! - [`recycle`] (the segment's creator, e.g. a [`ShmPool`](crate::ShmPool), holding its
//!   own slot): take the finalizer word, turn every *other* slot to a tombstone (a dead
//!   holder's too), bump the generation word, turn them back to `FREE`, let go. A live
//!   holder (or in-flight reference) makes it roll back: the segment is not reusable
//!   yet. An attach checks the generation after taking its slot ([`generation_is`]):
//!   a handle of an earlier use gives the slot back and fails.
//!
//! Why this is safe (P1) and leak-free (P3) is argued in `docs/PROTOCOL.md`.
//!
//! # Resumable steps
//! `claim` and `finalize` are written as resumable operations ([`Claim`], [`Finalize`]:
//! where they stand, with their locals), and `transfer` as one step
//! ([`transfer_step`]). Each `step` call runs the code between two crash points; the
//! functions above run the steps to the end, passing a crash point before each. The
//! exhaustive check (`shmrc-model`'s `protocol`, explored by `proofs/`) steps these same
//! values one by one, interleaving processes and crashes, so what it proves is about
//! this code, not a copy.
//!
//! # Memory orderings
//! Every access to a slot, the finalizer word and the pending flag is `SeqCst`: the
//! argument of `docs/PROTOCOL.md` assumes one total order over all of them (the
//! pending handshake is a store then a load of two different words, Dekker's pattern,
//! which release/acquire does not order). Each access says why it needs its ordering.
//!
//! # Planted bugs
//! Built with `SHMRC_PLANT=NAME (shmrc's build.rs sets cfg(shmrc_plant = "NAME"))`, this module carries one known bug,
//! so that each checker can show it catches it (`docs/VERIFICATION.md`,
//! `.ci/planted-bugs`). `shmrc-model` plants the same bug under the same flag. Without
//! the flag (always, outside that script) the code below is the protocol as documented.
//! - `no_rollback`: a blocked finalize lets go of the finalizer word without turning its
//!   tombstones back into free slots.
//! - `release_without_cas`: [`transfer`] (and so [`vacate`] and [`release`]) stores into
//!   the slot without checking it still holds the reference being moved.
//! - `reclaim_live`: finalize reclaims in-flight references without asking whether
//!   their sender lives.
//! - `recycle_skips_generation`: [`generation_is`] answers yes whatever the generation,
//!   so an attach with a stale handle ends holding another use of a recycled segment.
//! - `recycle_over_live`: [`Recycle`] turns a live holder's slot to a tombstone as if
//!   its holder were dead, so a segment someone still holds is reused.
//! - `tomb_owner_ignored`: a finalizer takes a live finalizer's tombstones for a dead
//!   one's (turns them back, or over to its own), so a finalizer taken over and
//!   resuming undoes the tombstones its successor turned, or the reverse.
//! - `finalize_ignores_pending`: a finalize that rolled back and let go of the finalizer
//!   word ends without looking at the pending flag, so a release that deferred to it
//!   meanwhile is lost: among live processes, the last release leaves the name behind.
//! - `claim_above_mark`: a claim takes a slot at or above the mark without raising it,
//!   so a finalize passes over it and unlinks a held segment.
//! - `finalize_no_mark_reread`: a finalize seals and commits without re-reading the
//!   mark, so a claim that raised it before the seal, above the slots turned, holds a
//!   segment that is unlinked.

use std::task::Poll;

use crate::error::Result;
use crate::os::Os;
use crate::sync::{AtomicU64, Ordering::SeqCst, spin};
use crate::token::Token;

/// A slot nobody holds.
pub const FREE: u64 = 0;
/// A tombstone of no known finalizer. No step of this version writes it (each writes
/// its own, [`tomb_word`]); one found (a hostile writer's) is any finalizer's to take.
pub const TOMB: u64 = u64::MAX;
/// Flag of an in-flight reference (a handle sent, not yet taken over).
pub const IN_FLIGHT: u64 = 1 << 63;
/// Flag of a tombstone: `TOMB_BY | token` is a slot turned by the finalizer `token`.
pub const TOMB_BY: u64 = 1 << 62;
/// Flag of a committed finalizer word: `COMMITTED | token` says that finalizer `token`
/// turned every slot to its tombstone while it held the word, so the segment is
/// destroyed for good: no tombstone of it is reopened any more, and any finalize only
/// unlinks the name (again). Set by CAS from the plain token, so a finalizer taken over
/// meanwhile cannot commit: its CAS fails and it backs off.
pub const COMMITTED: u64 = 1 << 63;

/// Flag of a sealing finalizer word: `SEALING | token` says that finalizer (or
/// recycler) `token` turned every slot below the mark it read and now re-reads the
/// mark. A claim that finds it (or [`COMMITTED`]) after its own read or raise of the
/// mark takes no slot this round: either the finalizer's re-read sees that claim's
/// mark, or the claim sees the seal (one total order, `docs/PROTOCOL.md` §5). Set by
/// CAS from the plain token; then [`COMMITTED`] (the mark has not grown), or back to
/// the plain token to turn the slots up to the new mark.
pub const SEALING: u64 = 1 << 62;

/// Whether finalizer word `word` is committed (see [`COMMITTED`]).
pub fn is_committed(word: u64) -> bool {
    word & COMMITTED != 0 && Slot::decode(word).owner().is_some()
}

/// Whether finalizer word `word` is sealing (see [`SEALING`]).
pub fn is_sealing(word: u64) -> bool {
    word & (COMMITTED | SEALING) == SEALING && Token::from_word(word & !SEALING).is_some()
}

/// The process whose finalizer word `word` is: a plain token, sealing or committed.
pub fn finalizer_owner(word: u64) -> Option<Token> {
    Token::from_word(word & !(COMMITTED | SEALING))
}

/// The tombstone finalizer (or recycler) `token` turns a slot to. Only `token` itself
/// turns it back or passes over it while it lives; once it is dead, any finalizer takes
/// it over (so a finalizer taken over while it lives, and resuming, can never reopen a
/// slot its successor turned, nor its successor one of its own: `docs/PROTOCOL.md` §5).
pub fn tomb_word(token: Token) -> u64 {
    token.word() | TOMB_BY
}

/// Whether `word` is a tombstone (of a known finalizer, or [`TOMB`]).
pub fn is_tomb(word: u64) -> bool {
    Slot::decode(word) == Slot::Tomb
}

/// The finalizer that turned tombstone `word` (None: not a tombstone, or [`TOMB`]).
pub fn tomb_owner(word: u64) -> Option<Token> {
    if word == TOMB || word & IN_FLIGHT != 0 || word & TOMB_BY == 0 {
        return None;
    }
    Token::from_word(word & !TOMB_BY)
}

/// What a slot word means.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Slot {
    /// Nobody.
    Free,
    /// Destroyed, or being destroyed: turned by a finalizer ([`tomb_owner`] says which).
    Tomb,
    /// Held by a process.
    Held(Token),
    /// An in-flight reference sent by this process.
    InFlight(Token),
    /// A word no protocol step writes: treated as a dead holder.
    Garbage(u64),
}

impl Slot {
    /// Decodes a slot word.
    pub fn decode(word: u64) -> Slot {
        match word {
            FREE => Slot::Free,
            TOMB => Slot::Tomb,
            w if w & IN_FLIGHT != 0 => {
                Token::from_word(w & !IN_FLIGHT).map_or(Slot::Garbage(w), Slot::InFlight)
            }
            w if w & TOMB_BY != 0 => {
                Token::from_word(w & !TOMB_BY).map_or(Slot::Garbage(w), |_| Slot::Tomb)
            }
            w => Token::from_word(w).map_or(Slot::Garbage(w), Slot::Held),
        }
    }

    /// The process whose liveness keeps this slot, if any.
    pub fn owner(self) -> Option<Token> {
        match self {
            Slot::Held(t) | Slot::InFlight(t) => Some(t),
            _ => None,
        }
    }
}

/// The word of a reference held by `token`.
pub fn held_word(token: Token) -> u64 {
    token.word()
}

/// The word of an in-flight reference sent by `token`.
pub fn in_flight_word(token: Token) -> u64 {
    token.word() | IN_FLIGHT
}

/// The protocol words of one segment header.
#[derive(Copy, Clone)]
pub struct Holders<'a> {
    slots: &'a [AtomicU64],
    finalizer: &'a AtomicU64,
    pending: &'a AtomicU64,
    generation: Option<&'a AtomicU64>,
    mark: Option<&'a AtomicU64>,
}

/// Why [`claim`] found no slot.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ClaimError {
    /// Every slot is a tombstone: the segment is being (or has been) destroyed.
    Gone,
    /// Every slot is held by a live process.
    Full,
}

/// How a finalize ended (the last holder's release, or a sweep's).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, Outcome, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-outcome")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns);
/// let buf = ShmBuf::with_options(64, &options)?;
/// let in_flight = buf.share()?; // a reference on its way to another process
/// let outcome = buf.release()?.expect("the last in-process reference").outcome;
/// assert_eq!(outcome, Outcome::InUse); // the handle still holds the segment
/// drop(in_flight); // given back: now it is unlinked
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// A live process holds a slot (or an in-flight reference): the segment lives.
    InUse,
    /// Another live finalizer is at work and was asked to run once more.
    Deferred,
    /// This call turned every slot to a tombstone and unlinked the name.
    Unlinked,
    /// Every slot was already a tombstone and the name was already gone.
    AlreadyGone,
}

/// What a finalize did.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, Outcome, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-finalized")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns);
/// let finalized = ShmBuf::with_options(64, &options)?.release()?.expect("the last reference");
/// assert_eq!(finalized.outcome, Outcome::Unlinked); // nobody else held it
/// assert_eq!(finalized.reclaimed, 0); // no dead holder's slot to take back
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Finalized {
    /// How it ended.
    pub outcome: Outcome,
    /// Slots of dead holders (or garbage) it turned back to `FREE`.
    pub reclaimed: u32,
}

/// How much of the slot table [`finalize`] reclaims before deciding.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Reclaim {
    /// Every dead holder's slot (sweeps): one liveness check per held slot; every slot
    /// of the capacity is scanned, and a word above the mark (only a hostile writer's)
    /// has the mark raised over it, to be judged as any other (the repair path, P5).
    All,
    /// Dead holders' slots up to the first live holder (releases): a release while
    /// others hold costs one liveness check; the passes stop at the mark.
    UntilLive,
}

/// A read-only count of slot states (for `ls` and dry-run sweeps).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-census")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let segment = shmrc::inspect(&ns)?.segments.remove(0);
/// let census = segment.census.expect("a valid segment has a census");
/// assert_eq!((census.live, census.in_flight, census.dead), (1, 0, 0)); // this process
/// assert!(!census.unheld());
/// drop(buf);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct Census {
    /// Free slots.
    pub free: u32,
    /// Tombstones.
    pub tomb: u32,
    /// Held by live processes.
    pub live: u32,
    /// In-flight references of live senders.
    pub in_flight: u32,
    /// Held or in flight for dead processes, or garbage: what a finalize reclaims.
    pub dead: u32,
    /// Whether a live process holds the finalizer word.
    pub finalizing: bool,
    /// The live process that holds the finalizer word, if one does.
    pub finalizer: Option<Token>,
    /// How many times finalizes found that finalizer at work and asked it to run again
    /// since it last started a round (the pending word); at `Finalize::PATIENCE` (4) the
    /// next one takes it over.
    pub deferrals: u64,
}

impl Census {
    /// Whether a finalize would destroy the segment now.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    /// let ns = Namespace::new("shmrc-doc-unheld")?;
    /// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let census = shmrc::inspect(&ns)?.segments[0].census.unwrap();
    /// assert!(!census.unheld()); // this process holds it
    /// drop(buf);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn unheld(&self) -> bool {
        self.live == 0 && self.in_flight == 0 && !self.finalizing
    }
}

impl<'a> Holders<'a> {
    /// The protocol view over `slots` and the two control words.
    pub fn new(slots: &'a [AtomicU64], finalizer: &'a AtomicU64, pending: &'a AtomicU64) -> Self {
        Holders {
            slots,
            finalizer,
            pending,
            generation: None,
            mark: None,
        }
    }

    /// The same view with the segment's high-water mark (see [`mark`](Holders::mark)):
    /// claims raise it before they take a slot, so that finalizes and recycles touch
    /// only the slots below it. Without it (pub/sub's
    /// placeholder words, unit tests), the mark is the capacity and nothing raises it.
    pub fn with_mark(self, mark: &'a AtomicU64) -> Holders<'a> {
        Holders {
            mark: Some(mark),
            ..self
        }
    }

    /// The mark as the seal handshake reads it: by a read-modify-write (adding 0), which
    /// reads the latest value even where `SeqCst` loads are not ordered with the stores
    /// before them (loom's model takes `SeqCst` for `AcqRel`): a finalizer's re-read
    /// after its seal, which a claim's raise and read of the finalizer word mirror.
    fn mark_latest(&self) -> usize {
        // SeqCst: the seal handshake (docs/PROTOCOL.md §5, "The mark").
        self.mark.map_or(self.slots.len(), |m| {
            usize::try_from(m.fetch_add(0, SeqCst))
                .map_or(self.slots.len(), |m| m.min(self.slots.len()))
        })
    }

    /// The high-water mark: every slot at or above it is `FREE`, since a claim raises
    /// it before its CAS and nothing lowers it. A word above the capacity (only a hostile writer makes one)
    /// counts as the capacity (P4); the capacity without a mark word.
    pub fn mark(&self) -> usize {
        // SeqCst: the mark's raise (by a claim) and its reads (by a finalize or
        // recycle, before and after their tombstones) share the one total order with
        // the slot words and the finalizer word: the seal's argument (docs/PROTOCOL.md
        // §5, "The mark") rests on it.
        self.mark.map_or(self.slots.len(), |m| {
            usize::try_from(m.load(SeqCst)).map_or(self.slots.len(), |m| m.min(self.slots.len()))
        })
    }

    /// Raises the mark to the capacity, for a segment whose slots are written by index
    /// rather than taken by [`claim`] (publish/subscribe's samples: the publisher moves
    /// a reference into subscriber `e`'s own slot `e + 1`, [`transfer_step`]), so that
    /// every finalize and recycle of it touches all its slots, as before the mark. The
    /// caller holds a slot of the segment, so no finalize can commit meanwhile; the mark
    /// only grows, so once is enough.
    pub fn cover_every_slot(&self) {
        let Some(mark) = self.mark else {
            return;
        };
        let capacity = self.slots.len() as u64;
        // SeqCst: as a claim's raise, before any slot at or above the old mark is written.
        let mut seen = mark.load(SeqCst);
        while seen < capacity {
            match mark.compare_exchange(seen, capacity, SeqCst, SeqCst) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    /// The same view with the segment's generation word (which [`recycle`] bumps and
    /// [`generation_is`] checks); without it, a recycle never reuses the segment.
    pub fn with_generation(self, generation: &'a AtomicU64) -> Holders<'a> {
        Holders {
            generation: Some(generation),
            ..self
        }
    }

    /// The current generation (0 without a generation word).
    pub fn generation(&self) -> u64 {
        // SeqCst: ordered like the protocol's other reads (see [`generation_is`]).
        self.generation.map_or(0, |g| g.load(SeqCst))
    }

    /// The word in slot `index` (None if out of range).
    pub fn slot_word(&self, index: usize) -> Option<u64> {
        // SeqCst: a diagnostic read, ordered like the protocol's own.
        self.slots.get(index).map(|s| s.load(SeqCst))
    }
}

/// What one protocol step asks of the OS: which process runs it, whether another one
/// lives, and the unlink that ends a finalize. Every [`Os`] provides it; the exhaustive
/// check (`shmrc-model`) provides it over its own state, so that it explores these very
/// steps.
pub trait StepOs {
    /// The token of the process running the step.
    fn current(&self) -> Token;
    /// Whether `token`'s process lives (see [`Os::is_alive`]).
    fn is_alive(&self, token: Token) -> bool;
    /// Removes the segment's name (see [`Os::shm_unlink`]).
    fn shm_unlink(&self, name: &str) -> Result<()>;
}

impl<O: Os> StepOs for O {
    fn current(&self) -> Token {
        Os::current(self)
    }

    fn is_alive(&self, token: Token) -> bool {
        Os::is_alive(self, token)
    }

    fn shm_unlink(&self, name: &str) -> Result<()> {
        Os::shm_unlink(self, name)
    }
}

/// The OS of one operation run to its end by production: the process's token read
/// once (a `getpid` and a load) instead of at every step: a finalize of 64 slots made
/// some 200 `getpid` calls.
struct Operation<'a, O: Os> {
    os: &'a O,
    me: Token,
}

impl<'a, O: Os> Operation<'a, O> {
    fn new(os: &'a O) -> Operation<'a, O> {
        Operation {
            os,
            me: Os::current(os),
        }
    }
}

impl<O: Os> StepOs for Operation<'_, O> {
    fn current(&self) -> Token {
        self.me
    }

    fn is_alive(&self, token: Token) -> bool {
        Os::is_alive(self.os, token)
    }

    fn shm_unlink(&self, name: &str) -> Result<()> {
        Os::shm_unlink(self.os, name)
    }
}

/// Whether `token`'s process is alive, without a syscall for this process.
fn alive(os: &impl StepOs, me: Token, token: Token) -> bool {
    token == me || os.is_alive(token)
}

/// Whether finalizer word `word` (a plain token, or sealing) names a live process.
fn word_is_live(os: &impl StepOs, me: Token, word: u64) -> bool {
    finalizer_owner(word).is_some_and(|t| alive(os, me, t))
}

/// Whether a finalize must leave slot state `s` alone: its owner lives.
fn keeps_its_slot(os: &impl StepOs, me: Token, s: Slot) -> bool {
    if cfg!(shmrc_plant = "reclaim_live") && matches!(s, Slot::InFlight(_)) {
        return false;
    }
    s.owner().is_some_and(|t| alive(os, me, t))
}

/// Whose a tombstone is, to the finalizer (or recycler) `me` that finds it.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum TombOf {
    /// `me`'s own.
    Me,
    /// No live process's (a dead finalizer's, or [`TOMB`]): `me` may take it over.
    Nobody,
    /// Another live process's: only that process reopens or passes over it.
    Other,
}

/// Whose tombstone `word` is (None: it is not one).
fn tomb_of(os: &impl StepOs, me: Token, word: u64) -> Option<TombOf> {
    if !is_tomb(word) {
        return None;
    }
    Some(match tomb_owner(word) {
        Some(t) if t == me => TombOf::Me,
        Some(_) if cfg!(shmrc_plant = "tomb_owner_ignored") => TombOf::Nobody,
        Some(t) if os.is_alive(t) => TombOf::Other,
        _ => TombOf::Nobody,
    })
}

/// Runs a resumable protocol operation to its end, passing a crash point before each
/// of its steps (the simulated kernel may kill the process there).
pub(crate) fn run_steps<O: Os, T>(os: &O, mut step: impl FnMut() -> Poll<T>) -> Result<T> {
    loop {
        os.crash_point()?;
        if let Poll::Ready(done) = step() {
            return Ok(done);
        }
    }
}

/// Takes a slot for `word` (a [`held_word`] or an [`in_flight_word`] of this process):
/// a free one, or one of a dead holder. Returns the slot index.
pub fn claim<O: Os>(os: &O, h: &Holders<'_>, word: u64) -> Result<Result<usize, ClaimError>> {
    if h.slots.is_empty() {
        return Ok(Err(ClaimError::Gone));
    }
    let mut claim = Claim::new(word);
    let op = Operation::new(os);
    run_steps(os, || claim.step(&op, h))
}

/// Where a [`Claim`] stands: at the crash point before one of its shared steps.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ClaimAt {
    /// Read the mark (a round's first step).
    ReadMark,
    /// Read the finalizer word after the mark (`index`: the slot to take next, after a
    /// raise, with the word `seen` read from it; `None`: the round's scan is next). A
    /// seal (or commit) there ends the round: no slot is taken under it.
    CheckSeal {
        /// The slot whose CAS follows, if any.
        index: Option<usize>,
        /// The word read from it.
        seen: u64,
    },
    /// Load slot `.0` and decide whether it can be taken.
    Load(usize),
    /// Raise the mark to `index + 1` before the slot's CAS: CAS it from `mark` (the
    /// last value read, below `index + 1`).
    Raise {
        /// The slot.
        index: usize,
        /// The word read from it.
        seen: u64,
        /// The mark as last read.
        mark: u64,
    },
    /// CAS slot `index` from the word `seen` (free, or a dead holder's) to ours.
    Cas {
        /// The slot.
        index: usize,
        /// The word read from it.
        seen: u64,
    },
}

/// [`claim`] as a resumable operation: each [`Claim::step`] runs the code between two
/// crash points. Production runs it to its end; the exhaustive check (`shmrc-model`)
/// steps it, interleaved with other processes' steps, from every state it reaches.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Claim {
    word: u64,
    round: usize,
    all_tomb: bool,
    /// The mark this round read (the capacity before it is read, or without a mark).
    mark: usize,
    at: ClaimAt,
}

impl Claim {
    /// Rounds a claim makes before it gives up with [`ClaimError::Full`].
    pub const ROUNDS: usize = 64;

    /// A claim of a slot for `word`, at its first crash point.
    pub fn new(word: u64) -> Claim {
        Claim {
            word,
            round: 0,
            all_tomb: true,
            mark: usize::MAX,
            at: ClaimAt::ReadMark,
        }
    }

    /// Puts it in retry round `round` (the exhaustive check keeps no round counter: it
    /// explores a round's end both as another round and as the last one).
    #[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
    pub fn set_round(&mut self, round: usize) {
        self.round = round;
    }

    /// Runs from the crash point it stands at to the next one (`Pending`), or to its
    /// end: the slot taken, or why none was.
    pub fn step(&mut self, os: &impl StepOs, h: &Holders<'_>) -> Poll<Result<usize, ClaimError>> {
        let me = os.current();
        match self.at {
            ClaimAt::ReadMark => {
                // SeqCst (in `mark`): before the seal check below (§5's handshake).
                self.mark = h.mark();
                self.at = if h.mark.is_some() {
                    ClaimAt::CheckSeal {
                        index: None,
                        seen: FREE,
                    }
                } else {
                    ClaimAt::Load(0)
                };
                Poll::Pending
            }
            ClaimAt::CheckSeal { index, seen } => {
                // SeqCst: read after our read (or raise) of the mark, in the one order a
                // sealing finalizer's seal and re-read of the mark share: it sees the
                // mark that covers our slot, or we see its seal (docs/PROTOCOL.md §5).
                // A read-modify-write (adding 0), as the finalizer's re-read: two
                // read-modify-writes of the finalizer word are ordered by the word
                // itself, so the handshake holds without relying on store-load order.
                let finalizer = h.finalizer.fetch_add(0, SeqCst);
                if is_committed(finalizer) {
                    // Destroyed for good: every slot below the mark is a tombstone.
                    return Poll::Ready(Err(ClaimError::Gone));
                }
                // A dead finalizer's seal is no commit to come: whoever takes it over
                // seals and re-reads the mark itself.
                if is_sealing(finalizer) && word_is_live(os, me, finalizer) {
                    self.all_tomb = false;
                    return self.round_end();
                }
                self.at = match index {
                    Some(index) => ClaimAt::Cas { index, seen },
                    None => ClaimAt::Load(0),
                };
                Poll::Pending
            }
            ClaimAt::Load(index) => {
                // Relaxed would do for the read: the CAS below decides. SeqCst keeps one
                // total order over every slot word (the argument of docs/PROTOCOL.md).
                let current = h.slots[index].load(SeqCst);
                let decoded = Slot::decode(current);
                let takeable = match decoded {
                    Slot::Free | Slot::Garbage(_) => true,
                    Slot::Tomb => false,
                    Slot::Held(t) | Slot::InFlight(t) => !alive(os, me, t),
                };
                if takeable {
                    self.at = if index < self.mark || cfg!(shmrc_plant = "claim_above_mark") {
                        ClaimAt::Cas {
                            index,
                            seen: current,
                        }
                    } else {
                        ClaimAt::Raise {
                            index,
                            seen: current,
                            mark: self.mark as u64,
                        }
                    };
                    return Poll::Pending;
                }
                self.all_tomb &= decoded == Slot::Tomb;
                self.next_slot(index, h)
            }
            ClaimAt::Raise { index, seen, mark } => {
                let wanted = index as u64 + 1;
                // SeqCst: the raise comes before our seal check, as the mark's read does.
                self.at = match h
                    .mark
                    .map(|m| m.compare_exchange(mark, wanted, SeqCst, SeqCst))
                {
                    Some(Err(now)) if now < wanted => ClaimAt::Raise {
                        index,
                        seen,
                        mark: now,
                    },
                    _ => ClaimAt::CheckSeal {
                        index: Some(index),
                        seen,
                    },
                };
                Poll::Pending
            }
            ClaimAt::Cas { index, seen } => {
                // SeqCst: taking the slot must be ordered before any later read of the
                // slots by a finalizer, which otherwise could turn it to a tombstone.
                if h.slots[index]
                    .compare_exchange(seen, self.word, SeqCst, SeqCst)
                    .is_ok()
                {
                    return Poll::Ready(Ok(index));
                }
                self.all_tomb = false;
                self.next_slot(index, h)
            }
        }
    }

    fn next_slot(&mut self, index: usize, h: &Holders<'_>) -> Poll<Result<usize, ClaimError>> {
        if index + 1 < h.slots.len() {
            self.at = ClaimAt::Load(index + 1);
            return Poll::Pending;
        }
        self.round_end()
    }

    /// The scan of this round is over: `Gone` if it met only tombstones, else another
    /// round (or, after [`Claim::ROUNDS`], `Full`).
    fn round_end(&mut self) -> Poll<Result<usize, ClaimError>> {
        if self.all_tomb {
            return Poll::Ready(Err(ClaimError::Gone));
        }
        self.round += 1;
        if self.round >= Claim::ROUNDS {
            return Poll::Ready(Err(ClaimError::Full));
        }
        spin();
        self.all_tomb = true;
        self.at = ClaimAt::ReadMark;
        Poll::Pending
    }
}

/// Moves the reference in slot `index` from `from` (an in-flight word) to `to`.
/// `false` if the slot no longer holds `from` (its sender died and it was reclaimed,
/// or the handle was already taken over).
pub fn transfer<O: Os>(os: &O, h: &Holders<'_>, index: usize, from: u64, to: u64) -> Result<bool> {
    run_steps(os, || Poll::Ready(transfer_step(h, index, from, to)))
}

/// The one shared step of [`transfer`] (after its crash point).
pub fn transfer_step(h: &Holders<'_>, index: usize, from: u64, to: u64) -> bool {
    let Some(slot) = h.slots.get(index) else {
        return false;
    };
    if cfg!(shmrc_plant = "release_without_cas") {
        // SeqCst: as the CAS below.
        slot.store(to, SeqCst);
        return true;
    }
    // SeqCst: a release (to FREE) must come before the releaser's finalize reads the
    // other slots; a take-over (to a held word) before the receiver uses the data.
    slot.compare_exchange(from, to, SeqCst, SeqCst).is_ok()
}

/// Empties slot `index` if it still holds `word`; `false` if it did not. The caller
/// runs [`finalize`] afterwards when it held its last reference.
pub fn vacate<O: Os>(os: &O, h: &Holders<'_>, index: usize, word: u64) -> Result<bool> {
    transfer(os, h, index, word, FREE)
}

/// Gives back the in-flight reference `word` of a handle of use `generation` (an
/// unattached handle dropped, or one a channel's sender gives back): vacates slot
/// `index` if the segment is still in that use and the slot still holds `word`. A
/// handle of an earlier use gives nothing back: its reference went with that use, and
/// the word in its slot, if any, is a later handle's (the same sender shares into the
/// same slot with the same word). The caller finalizes a named segment on `true`.
pub fn give_back_in_flight<O: Os>(
    os: &O,
    h: &Holders<'_>,
    index: usize,
    word: u64,
    generation: u64,
) -> Result<bool> {
    if h.generation() != generation {
        return Ok(false);
    }
    vacate(os, h, index, word)
}

/// Releases the reference `word` in slot `index`, then finalizes: unlinks `name` if
/// nobody else holds the segment. `finalized` is `None` if the slot did not hold `word`
/// (nothing was released).
pub fn release<O: Os>(
    os: &O,
    h: &Holders<'_>,
    index: usize,
    word: u64,
    name: &str,
) -> Result<Option<Finalized>> {
    if !vacate(os, h, index, word)? {
        return Ok(None);
    }
    finalize(os, h, name, Reclaim::UntilLive).map(Some)
}

/// Whether the segment is still in generation `expected` (the use a handle describes).
/// Called by an attach *after* it took its slot: a recycle either saw that slot taken
/// (and rolled back, the generation unchanged) or bumped the generation before the
/// slot could be taken (every other slot was a tombstone until then), so a `true` here
/// means the data is that use's for as long as the slot is held.
pub fn generation_is(h: &Holders<'_>, expected: u64) -> bool {
    if cfg!(shmrc_plant = "recycle_skips_generation") {
        return true;
    }
    // SeqCst: read after our slot CAS, in the one order the recycler's tombstone CASes
    // and its generation store share (the slot-then-generation handshake above).
    h.generation() == expected
}

/// How [`recycle`] ended.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Recycled {
    /// Nobody else held the segment: it is now in generation `generation`, held by the
    /// caller alone; `reclaimed` dead holders' slots were freed on the way.
    Reused {
        /// The new generation.
        generation: u64,
        /// Slots of dead holders it freed.
        reclaimed: u32,
    },
    /// Another live process holds it (or a reference in flight, or a finalizer is at
    /// work): nothing changed but tombstones rolled back; try later.
    Held,
}

/// Reuses the segment whose words `h` holds for a new use, if nobody but the caller
/// (which holds slot `own`) holds it: see the module docs. The caller must hold slot
/// `own` throughout.
pub fn recycle<O: Os>(os: &O, h: &Holders<'_>, own: usize) -> Result<Recycled> {
    let _one_finalizer_per_process = os.local().finalize_lock();
    let mut recycle = Recycle::new(own);
    let op = Operation::new(os);
    run_steps(os, || recycle.step(&op, h))
}

/// Whether any slot but `own` is taken (held, in flight, a dead holder's, or turned by
/// a finalizer at work): a hint, read from the slot words without a syscall, that a
/// [`recycle`] from slot `own` would find the segment [`Recycled::Held`] now (or would
/// have dead holders' slots to reclaim). It decides nothing: the recycle does.
pub fn others_hold(h: &Holders<'_>, own: usize) -> bool {
    // No slot at or above the mark is taken.
    (0..h.mark()).any(|index| index != own && h.slot_word(index) != Some(FREE))
}

/// Where the seal handshake stands: the sub-machine that ends a finalize's commit pass
/// ([`FinalizeAt::Seal`]) and a recycle's tombstone pass ([`RecycleAt::Seal`]) once
/// the slots below the mark they read are their tombstones (`docs/PROTOCOL.md` §5, "The
/// mark"). Seal the finalizer word, re-read the mark after the seal, and if a claim
/// raised it meanwhile, unseal and turn the slots up to it. Each step is one access to
/// the finalizer word or the mark ([`SealAt::step`]); what follows each outcome is the
/// embedding machine's ([`Sealing`]).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum SealAt {
    /// CAS the finalizer word from ours to ours, [`SEALING`].
    Seal,
    /// Sealed: re-read the mark. Not grown past the slots turned: the seal stands;
    /// grown: unseal.
    CheckMark,
    /// The mark grew: CAS the finalizer word from ours, sealing, back to ours, then
    /// turn slots from `from` on.
    Unseal {
        /// The first slot not yet turned.
        from: usize,
    },
}

/// Where a [`SealAt`] step leads the machine that embeds it.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Sealing {
    /// The handshake's next step.
    Next(SealAt),
    /// Sealed, and the mark has not grown past the slots turned: go on (a finalize
    /// commits, a recycle bumps the generation).
    Stands,
    /// Unsealed after the mark grew (the bound is raised to it): turn the slots from
    /// `from` on.
    Unsealed {
        /// The first slot not yet turned.
        from: usize,
    },
    /// The finalizer word is not ours (taken over while we stood still): give up the
    /// tombstones (a finalize rolls them back, a recycle reopens them).
    Lost,
}

impl SealAt {
    /// Runs this step on the finalizer word `mine` (ours, not sealing) with `bound`, the
    /// mark last read (every slot below it turned), which the re-read raises if the mark
    /// grew.
    fn step(self, h: &Holders<'_>, mine: u64, bound: &mut usize) -> Sealing {
        match self {
            SealAt::Seal => {
                // SeqCst: after our last tombstone, before our re-read of the mark: a
                // claimer reads the finalizer word after its read (or raise) of the
                // mark, so it sees the seal or we see its mark (docs/PROTOCOL.md §5).
                if h.finalizer
                    .compare_exchange(mine, mine | SEALING, SeqCst, SeqCst)
                    .is_err()
                {
                    Sealing::Lost
                } else {
                    Sealing::Next(SealAt::CheckMark)
                }
            }
            SealAt::CheckMark => {
                // SeqCst, a read-modify-write (in `mark_latest`): after the seal.
                let mark = h.mark_latest();
                if mark <= *bound {
                    Sealing::Stands
                } else {
                    let from = *bound;
                    *bound = mark;
                    Sealing::Next(SealAt::Unseal { from })
                }
            }
            SealAt::Unseal { from } => {
                // SeqCst: the seal goes before we turn the slots up to the new mark.
                if h.finalizer
                    .compare_exchange(mine | SEALING, mine, SeqCst, SeqCst)
                    .is_err()
                {
                    Sealing::Lost
                } else {
                    Sealing::Unsealed { from }
                }
            }
        }
    }
}

/// Where a [`Recycle`] stands: at the crash point before one of its shared steps.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum RecycleAt {
    /// CAS the finalizer word from `FREE` to ours (taken: `Held`).
    TakeFinalizer,
    /// Read the mark: the passes visit the slots below it.
    ReadMark,
    /// Load slot `.0` (never our own) and decide: tomb it, or roll back.
    Load(usize),
    /// CAS slot `index` from `seen` (free, or a dead holder's) to `TOMB`.
    Tomb {
        /// The slot.
        index: usize,
        /// The word read from it.
        seen: u64,
    },
    /// Every other slot below the mark is a tombstone: the seal handshake ([`SealAt`],
    /// as a finalize's).
    Seal(SealAt),
    /// Every other slot is a tombstone (and the seal stands): bump the generation word.
    Bump,
    /// CAS slot `index` from `TOMB` back to `FREE` (after the bump, or rolling back).
    Reopen {
        /// The slot.
        index: usize,
        /// Whether the generation was bumped (the segment is reused).
        reused: bool,
    },
    /// CAS the finalizer word from ours (sealing, once reused) back to `FREE`.
    LetGo {
        /// Whether the generation was bumped.
        reused: bool,
    },
}

/// [`recycle`] as a resumable operation: each [`Recycle::step`] runs the code between
/// two crash points; production runs it to its end, the exhaustive check steps it.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Recycle {
    own: usize,
    reclaimed: u32,
    generation: u64,
    /// The mark last read: the passes visit the slots below it.
    bound: usize,
    at: Flat<RecyclePhase>,
}

impl Recycle {
    /// A recycle by the holder of slot `own`, at its first crash point.
    pub fn new(own: usize) -> Recycle {
        Recycle {
            own,
            reclaimed: 0,
            generation: 0,
            bound: usize::MAX,
            at: Flat::from(RecycleAt::TakeFinalizer),
        }
    }

    /// The first slot from `from` on that is not our own (`len`: past the end).
    fn other_from(&self, from: usize) -> usize {
        if from == self.own { from + 1 } else { from }
    }

    /// Whether slot `next` is within the passes bounded by the mark last read.
    fn within(&self, next: usize, h: &Holders<'_>) -> bool {
        next < self.bound.min(h.slots.len())
    }

    /// The step after slot `index` is a tombstone of ours (`None`: before the first):
    /// the next other slot below the mark, then the seal (without a mark, the bump).
    fn after_tomb_of(&self, index: Option<usize>, h: &Holders<'_>) -> RecycleAt {
        let next = self.other_from(index.map_or(0, |i| i + 1));
        if self.within(next, h) {
            RecycleAt::Load(next)
        } else if h.mark.is_some() {
            RecycleAt::Seal(SealAt::Seal)
        } else {
            RecycleAt::Bump
        }
    }

    fn after_reopen_of(&self, index: Option<usize>, reused: bool, h: &Holders<'_>) -> RecycleAt {
        let next = self.other_from(index.map_or(0, |i| i + 1));
        if self.within(next, h) {
            RecycleAt::Reopen {
                index: next,
                reused,
            }
        } else {
            RecycleAt::LetGo { reused }
        }
    }

    /// Runs from the crash point it stands at to the next one (`Pending`), or to its end.
    pub fn step(&mut self, os: &impl StepOs, h: &Holders<'_>) -> Poll<Recycled> {
        let me = os.current();
        let mine = held_word(me);
        let next = match self.at.get() {
            RecycleAt::TakeFinalizer => {
                if h.generation.is_none() {
                    return Poll::Ready(Recycled::Held);
                }
                // SeqCst: one finalizer at a time; ordered before our tombstone CASes.
                if h.finalizer
                    .compare_exchange(FREE, mine, SeqCst, SeqCst)
                    .is_err()
                {
                    return Poll::Ready(Recycled::Held);
                }
                RecycleAt::ReadMark
            }
            RecycleAt::ReadMark => {
                // SeqCst (in `mark`): no slot at or above it is taken; one taken later
                // is caught by the re-read after our seal.
                self.bound = h.mark();
                self.after_tomb_of(None, h)
            }
            RecycleAt::Load(index) => {
                // SeqCst: must see a claim that came before (else we would tomb over it).
                let seen = h.slots[index].load(SeqCst);
                let s = Slot::decode(seen);
                let live = keeps_its_slot(os, me, s) && !cfg!(shmrc_plant = "recycle_over_live");
                match tomb_of(os, me, seen) {
                    Some(TombOf::Me) => self.after_tomb_of(Some(index), h),
                    // A dead finalizer's tombstone: ours from now on, reopened with ours.
                    Some(TombOf::Nobody) => RecycleAt::Tomb { index, seen },
                    // A live finalizer's (taken over, not yet back): it is at work.
                    Some(TombOf::Other) => self.after_reopen_of(None, false, h),
                    None if live => self.after_reopen_of(None, false, h),
                    None => RecycleAt::Tomb { index, seen },
                }
            }
            RecycleAt::Tomb { index, seen } => {
                // SeqCst: a claimer's later load must see the tombstone, and its later
                // generation check the bump that follows.
                if h.slots[index]
                    .compare_exchange(seen, tomb_word(me), SeqCst, SeqCst)
                    .is_ok()
                {
                    self.reclaimed += u32::from(seen != FREE && !is_tomb(seen));
                    self.after_tomb_of(Some(index), h)
                } else {
                    // Taken meanwhile: someone holds it now.
                    self.after_reopen_of(None, false, h)
                }
            }
            // Each step's orderings: `SealAt::step`.
            RecycleAt::Seal(at) => match at.step(h, mine, &mut self.bound) {
                Sealing::Next(at) => RecycleAt::Seal(at),
                Sealing::Stands => RecycleAt::Bump,
                Sealing::Unsealed { from } => self.after_tomb_of(from.checked_sub(1), h),
                Sealing::Lost => self.after_reopen_of(None, false, h),
            },
            RecycleAt::Bump => {
                // Only the finalizer word's owner writes the generation: load + store.
                let generation = h.generation.map_or(0, |g| {
                    // SeqCst: after every tombstone, before any slot is free again.
                    let next = g.load(SeqCst).wrapping_add(1);
                    g.store(next, SeqCst);
                    next
                });
                self.generation = generation;
                self.after_reopen_of(None, true, h)
            }
            RecycleAt::Reopen { index, reused } => {
                // SeqCst: free again only after the bump (a claimer then sees it).
                let _ = h.slots[index].compare_exchange(tomb_word(me), FREE, SeqCst, SeqCst);
                self.after_reopen_of(Some(index), reused, h)
            }
            RecycleAt::LetGo { reused } => {
                // Reused: the word is sealing (a mark's segment); rolled back: plain.
                let ours = if reused && h.mark.is_some() {
                    mine | SEALING
                } else {
                    mine
                };
                // SeqCst: our slots are free again before the finalizer word is.
                let _ = h.finalizer.compare_exchange(ours, FREE, SeqCst, SeqCst);
                return Poll::Ready(if reused {
                    Recycled::Reused {
                        generation: self.generation,
                        reclaimed: self.reclaimed,
                    }
                } else {
                    Recycled::Held
                });
            }
        };
        self.at = Flat::from(next);
        Poll::Pending
    }
}

/// Reads every slot without changing anything.
pub fn census(os: &impl StepOs, h: &Holders<'_>) -> Census {
    let me = os.current();
    // SeqCst: read-only counts, ordered like the protocol's reads (no decision rests on them).
    let finalizer = finalizer_owner(h.finalizer.load(SeqCst)).filter(|&t| alive(os, me, t));
    let mut census = Census {
        finalizing: finalizer.is_some(),
        finalizer,
        // SeqCst: as above.
        deferrals: h.pending.load(SeqCst),
        ..Census::default()
    };
    for slot in h.slots {
        // SeqCst: as the finalizer word's read above.
        match Slot::decode(slot.load(SeqCst)) {
            Slot::Free => census.free += 1,
            Slot::Tomb => census.tomb += 1,
            Slot::Held(t) if alive(os, me, t) => census.live += 1,
            Slot::InFlight(t) if alive(os, me, t) => census.in_flight += 1,
            _ => census.dead += 1,
        }
    }
    census
}

/// Destroys the segment named `name` if nobody live holds it: reclaims dead holders'
/// slots, then (holding the finalizer word) turns every slot to a tombstone and unlinks
/// the name. Safe to call by anyone at any time; see the module docs. `reclaim` says
/// whether to reclaim every dead holder or stop at the first live one.
pub fn finalize<O: Os>(os: &O, h: &Holders<'_>, name: &str, reclaim: Reclaim) -> Result<Finalized> {
    let _one_finalizer_per_process = os.local().finalize_lock();
    let mut finalize = Finalize::new(reclaim, h);
    let op = Operation::new(os);
    run_steps(os, || finalize.step(&op, h, name))?
}

/// Where a [`Finalize`] stands: at the crash point before one of its shared steps. The
/// numbers are those of the module docs' four phases.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum FinalizeAt {
    /// 1. Read the mark (a round's first step): the reclaim scans the slots below it.
    ReclaimMark,
    /// 1. Load slot `index`; `live`: a live holder was seen this round.
    ReclaimLoad {
        /// The slot.
        index: usize,
        /// Whether a live holder was seen this round.
        live: bool,
    },
    /// 1. A sweep found a word in slot `index`, at or above the mark it read: raise the
    ///    mark over it (CAS from `mark`, the value last read), then load it again.
    ReclaimRaise {
        /// The slot.
        index: usize,
        /// The mark as last read.
        mark: u64,
        /// Whether a live holder was seen this round.
        live: bool,
    },
    /// 1. CAS the dead holder's word `seen` in slot `index` back to `FREE`.
    ReclaimCas {
        /// The slot.
        index: usize,
        /// The dead holder's word.
        seen: u64,
        /// Whether a live holder was seen this round.
        live: bool,
    },
    /// Load the finalizer word and decide: in use, ask the live finalizer, or take it.
    LoadFinalizer {
        /// Whether a live holder was seen this round.
        live: bool,
    },
    /// 2. The live finalizer `seen` works: set the pending flag.
    SetPending {
        /// The finalizer word read.
        seen: u64,
    },
    /// 2. Is `seen` still the finalizer? Then `Deferred`, or if `overdue`, take it over;
    ///    else another round.
    CheckFinalizer {
        /// The finalizer word read.
        seen: u64,
        /// Whether it was asked to run again [`Finalize::PATIENCE`] times or more since
        /// it last started a round: it makes no progress, and is taken over.
        overdue: bool,
    },
    /// 2. CAS the finalizer word from `seen` (free, a dead finalizer's, or an overdue
    ///    live one's) to ours.
    TakeFinalizer {
        /// The finalizer word read.
        seen: u64,
    },
    /// 2. Clear the pending flag.
    ClearPending,
    /// 3. Load slot `index`.
    TombLoad {
        /// The slot.
        index: usize,
    },
    /// 3. CAS slot `index` from `seen` (`FREE`, or a tombstone of no live process) to
    ///    our tombstone.
    TombCas {
        /// The slot.
        index: usize,
        /// The word read.
        seen: u64,
    },
    /// 4. Every slot below the mark is our tombstone: the seal handshake ([`SealAt`]):
    ///    seal, re-read the mark; not grown past the slots turned: commit; grown (a
    ///    claim raised it before our seal): unseal and turn the slots up to it (taken
    ///    over meanwhile: back off, roll back).
    Seal(SealAt),
    /// 4. CAS the finalizer word from ours (`sealed`: sealing) to ours, [`COMMITTED`]
    ///    (taken over meanwhile: back off, roll back).
    Commit {
        /// Whether the word is sealing (a segment with a mark) or plain (without).
        sealed: bool,
    },
    /// 4. Committed: `shm_unlink`.
    Unlink,
    /// Blocked: load slot `index` to roll it back.
    RollbackLoad {
        /// The slot.
        index: usize,
    },
    /// Blocked: CAS slot `index` from `seen` (our tombstone, or one of no live
    /// process) back to `FREE`.
    RollbackCas {
        /// The slot.
        index: usize,
        /// The tombstone read.
        seen: u64,
    },
    /// Blocked: CAS the finalizer word from ours back to `FREE`.
    LetGo,
    /// Blocked: was the pending flag set meanwhile? Then another round.
    CheckPending,
}

/// [`finalize`] as a resumable operation: each [`Finalize::step`] runs the code between
/// two crash points. Production runs it to its end (holding the process's finalize
/// lock); the exhaustive check (`shmrc-model`) steps it, interleaved with other
/// processes' steps, from every state it reaches.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Finalize {
    reclaim: Reclaim,
    round: usize,
    reclaimed: u32,
    /// This round's reclaim pass saw a tombstone of no live process.
    stray_tombs: bool,
    patience: u64,
    /// The mark last read: the tombstone and rollback passes visit the slots below it.
    bound: usize,
    /// Where this round's reclaim scan ends: the mark (a release), or the capacity (a
    /// sweep, [`Reclaim::All`]).
    scan: usize,
    at: Flat<FinalizePhase>,
}

impl Finalize {
    /// Rounds a finalize makes (when other finalizers keep asking it to run again)
    /// before it ends with [`Outcome::Deferred`].
    pub const ROUNDS: usize = 64;

    /// How many times a live finalizer may be asked to run again (by finalizes that
    /// found it at work, every slot free of live holders) without starting a round
    /// before the next one asking takes it over. A finalizer that makes progress starts
    /// a round (clearing the count) within microseconds; one that does not is stopped,
    /// traced, frozen, or a word a same-user writer forged (P5). Taking over a live
    /// finalizer is safe whenever it happens: its tombstones stay its own
    /// ([`tomb_word`]), so the two never undo each other's (`docs/PROTOCOL.md` §5).
    pub const PATIENCE: u64 = 4;

    /// A finalize of the segment whose words `h` holds, at its first crash point.
    pub fn new(reclaim: Reclaim, h: &Holders<'_>) -> Finalize {
        Finalize {
            reclaim,
            round: 0,
            reclaimed: 0,
            stray_tombs: false,
            patience: Finalize::PATIENCE,
            bound: h.slots.len(),
            scan: h.slots.len(),
            at: Flat::from(Finalize::round_start(h)),
        }
    }

    /// Puts it in retry round `round` (see [`Claim::set_round`]).
    #[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
    pub fn set_round(&mut self, round: usize) {
        self.round = round;
    }

    /// Sets how many requests to run again make a live finalizer overdue
    /// ([`Finalize::PATIENCE`] unless set; the exhaustive check keeps no count: it
    /// explores each request both as one below the bound and as the one reaching it).
    #[cfg(feature = "checkers")]
    pub fn set_patience(&mut self, patience: u64) {
        self.patience = patience;
    }

    fn round_start(h: &Holders<'_>) -> FinalizeAt {
        if h.slots.is_empty() {
            FinalizeAt::LoadFinalizer { live: false }
        } else {
            FinalizeAt::ReclaimMark
        }
    }

    /// Whether slot `next` is within the passes bounded by the mark last read.
    fn within(&self, next: usize, h: &Holders<'_>) -> bool {
        next < self.bound.min(h.slots.len())
    }

    /// The step after reclaiming slot `index` (`None`: before the first slot).
    fn after_reclaim_of(&self, index: Option<usize>, live: bool, h: &Holders<'_>) -> FinalizeAt {
        let next = index.map_or(0, |i| i + 1);
        if next < self.scan.min(h.slots.len()) {
            FinalizeAt::ReclaimLoad { index: next, live }
        } else {
            FinalizeAt::LoadFinalizer { live }
        }
    }

    /// The step after slot `index` was found a tombstone (`None`: before the first):
    /// the next slot below the mark, then the seal (or, without a mark, the commit).
    fn after_tomb_of(&self, index: Option<usize>, h: &Holders<'_>) -> FinalizeAt {
        let next = index.map_or(0, |i| i + 1);
        if self.within(next, h) {
            FinalizeAt::TombLoad { index: next }
        } else if h.mark.is_some() {
            FinalizeAt::Seal(SealAt::Seal)
        } else {
            FinalizeAt::Commit { sealed: false }
        }
    }

    /// The step after rolling back slot `index` (`None`: before the first).
    fn after_rollback_of(&self, index: Option<usize>, h: &Holders<'_>) -> FinalizeAt {
        let next = index.map_or(0, |i| i + 1);
        if self.within(next, h) && !cfg!(shmrc_plant = "no_rollback") {
            FinalizeAt::RollbackLoad { index: next }
        } else {
            FinalizeAt::LetGo
        }
    }

    /// The unlink of a committed segment (ours, or one whose committer may not have
    /// got to it): `Unlinked`, or `AlreadyGone` if it is gone already.
    fn unlink(&self, os: &impl StepOs, name: &str) -> Poll<Result<Finalized>> {
        match os.shm_unlink(name) {
            Ok(()) => self.done(Outcome::Unlinked),
            Err(e) if e.is_gone() => self.done(Outcome::AlreadyGone),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn done(&self, outcome: Outcome) -> Poll<Result<Finalized>> {
        Poll::Ready(Ok(Finalized {
            outcome,
            reclaimed: self.reclaimed,
        }))
    }

    /// Another round, or after [`Finalize::ROUNDS`] of them, `Deferred`.
    fn next_round(&mut self, h: &Holders<'_>) -> Poll<Result<Finalized>> {
        self.round += 1;
        if self.round >= Finalize::ROUNDS {
            return self.done(Outcome::Deferred);
        }
        spin();
        self.stray_tombs = false;
        self.at = Flat::from(Finalize::round_start(h));
        Poll::Pending
    }

    /// Runs from the crash point it stands at to the next one (`Pending`), or to its
    /// end. `name` is the segment's name, unlinked by the last step.
    pub fn step(
        &mut self,
        os: &impl StepOs,
        h: &Holders<'_>,
        name: &str,
    ) -> Poll<Result<Finalized>> {
        let me = os.current();
        let mine = held_word(me);
        // Every access is SeqCst (the module docs say why); each says what it orders.
        let next = match self.at.get() {
            FinalizeAt::ReclaimMark => {
                // SeqCst (in `mark`): before the slot loads; no holder is above the mark.
                // A sweep's reclaim scans every slot: a word found at or above the mark
                // read (a hostile writer's, or the mark grew since) has the mark raised
                // over it first, then is judged as any below it, so no slot state is
                // unrecoverable (P5); the other passes stop at the mark.
                self.bound = h.mark();
                self.scan = match self.reclaim {
                    Reclaim::All => h.slots.len(),
                    Reclaim::UntilLive => self.bound,
                };
                self.after_reclaim_of(None, false, h)
            }
            FinalizeAt::ReclaimLoad { index, live } => {
                // SeqCst: must see a release (vacate) that came before our own vacate.
                let word = h.slots[index].load(SeqCst);
                match Slot::decode(word) {
                    Slot::Free => self.after_reclaim_of(Some(index), live, h),
                    _ if index >= self.bound => FinalizeAt::ReclaimRaise {
                        index,
                        mark: self.bound as u64,
                        live,
                    },
                    Slot::Tomb => {
                        // A tombstone no live finalizer will roll back: take the word
                        // even if the segment is held, to do it (P5).
                        self.stray_tombs |= tomb_of(os, me, word) == Some(TombOf::Nobody);
                        self.after_reclaim_of(Some(index), live, h)
                    }
                    s if keeps_its_slot(os, me, s) => {
                        if self.reclaim == Reclaim::UntilLive {
                            FinalizeAt::LoadFinalizer { live: true }
                        } else {
                            self.after_reclaim_of(Some(index), true, h)
                        }
                    }
                    _ => FinalizeAt::ReclaimCas {
                        index,
                        seen: word,
                        live,
                    },
                }
            }
            FinalizeAt::ReclaimRaise { index, mark, live } => {
                let wanted = index as u64 + 1;
                // SeqCst: as a claim's raise: the slot is covered before it is judged.
                match h
                    .mark
                    .map(|m| m.compare_exchange(mark, wanted, SeqCst, SeqCst))
                {
                    Some(Err(now)) if now < wanted => FinalizeAt::ReclaimRaise {
                        index,
                        mark: now,
                        live,
                    },
                    _ => {
                        self.bound = self.bound.max(index + 1);
                        FinalizeAt::ReclaimLoad { index, live }
                    }
                }
            }
            FinalizeAt::ReclaimCas { index, seen, live } => {
                // SeqCst: the dead holder's word goes only if nobody took the slot since.
                if h.slots[index]
                    .compare_exchange(seen, FREE, SeqCst, SeqCst)
                    .is_ok()
                {
                    self.reclaimed += 1;
                }
                self.after_reclaim_of(Some(index), live, h)
            }
            FinalizeAt::LoadFinalizer { live } => {
                // SeqCst: read after our slot reads, in the one order a rival's writes share.
                let seen = h.finalizer.load(SeqCst);
                if is_committed(seen) {
                    // Destroyed for good: only the unlink may be left to do.
                    return self.unlink(os, name);
                }
                let finalizer_live = seen != FREE && word_is_live(os, me, seen);
                // A dead finalizer may have left tombstones: take over even if the
                // segment is held, to roll them back (P5: no slot stays a tombstone
                // for nothing).
                let abandoned = (seen != FREE && !finalizer_live) || self.stray_tombs;
                if live && !abandoned {
                    return self.done(Outcome::InUse);
                }
                if finalizer_live && seen != mine && !live {
                    // Ask the live finalizer to run once more, then check it is still
                    // there: either it sees the flag after its rollback, or we see it
                    // gone (or, asked too often, we take over).
                    FinalizeAt::SetPending { seen }
                } else if finalizer_live && seen != mine {
                    // Held, with stray tombstones the live finalizer's pass will take.
                    return self.done(Outcome::InUse);
                } else {
                    FinalizeAt::TakeFinalizer { seen }
                }
            }
            FinalizeAt::SetPending { seen } => {
                // SeqCst: Dekker's store, ordered before our reload of the finalizer word.
                // The flag counts the requests since the finalizer last started a round.
                let asked = h.pending.fetch_add(1, SeqCst).wrapping_add(1);
                FinalizeAt::CheckFinalizer {
                    seen,
                    overdue: asked >= self.patience,
                }
            }
            FinalizeAt::CheckFinalizer { seen, overdue } => {
                // SeqCst: Dekker's load; the finalizer's LetGo then CheckPending mirror it.
                if h.finalizer.load(SeqCst) != seen {
                    return self.next_round(h);
                }
                if !overdue {
                    return self.done(Outcome::Deferred);
                }
                FinalizeAt::TakeFinalizer { seen }
            }
            FinalizeAt::TakeFinalizer { seen } => {
                // SeqCst: one finalizer at a time; ordered before our tombstone CASes.
                if h.finalizer
                    .compare_exchange(seen, mine, SeqCst, SeqCst)
                    .is_err()
                {
                    return self.next_round(h);
                }
                FinalizeAt::ClearPending
            }
            FinalizeAt::ClearPending => {
                // SeqCst: cleared before we look at the slots, so later requests stay set.
                h.pending.store(0, SeqCst);
                self.after_tomb_of(None, h)
            }
            FinalizeAt::TombLoad { index } => {
                // SeqCst: must see a claim that came before (else we would tomb over it).
                let seen = h.slots[index].load(SeqCst);
                match tomb_of(os, me, seen) {
                    Some(TombOf::Me) => self.after_tomb_of(Some(index), h),
                    // A dead finalizer's: continue from it (ours from now on).
                    Some(TombOf::Nobody) => FinalizeAt::TombCas { index, seen },
                    None if seen == FREE => FinalizeAt::TombCas { index, seen },
                    // Someone holds the slot, or a live finalizer turned it (one we took
                    // over, still at work): roll back every tombstone of ours (and any
                    // of a dead finalizer), then let go of the finalizer word.
                    _ => self.after_rollback_of(None, h),
                }
            }
            FinalizeAt::TombCas { index, seen } => {
                if h.slots[index]
                    // SeqCst: a claimer's later load must see the tombstone (claim-vs-tomb race).
                    .compare_exchange(seen, tomb_word(me), SeqCst, SeqCst)
                    .is_ok()
                {
                    self.after_tomb_of(Some(index), h)
                } else {
                    // Taken meanwhile (a claim, or a rival finalizer's tombstone).
                    self.after_rollback_of(None, h)
                }
            }
            // Each step's orderings: `SealAt::step`.
            FinalizeAt::Seal(at) => match at.step(h, mine, &mut self.bound) {
                Sealing::Next(SealAt::CheckMark)
                    if cfg!(shmrc_plant = "finalize_no_mark_reread") =>
                {
                    FinalizeAt::Commit { sealed: true }
                }
                Sealing::Next(at) => FinalizeAt::Seal(at),
                Sealing::Stands => FinalizeAt::Commit { sealed: true },
                Sealing::Unsealed { from } => self.after_tomb_of(from.checked_sub(1), h),
                // Taken over while we stood still: our tombstones go back.
                Sealing::Lost => self.after_rollback_of(None, h),
            },
            FinalizeAt::Commit { sealed } => {
                // SeqCst: after our last tombstone (and seal); a rival's takeover CAS is
                // ordered against it, so exactly one of the two succeeds.
                let ours = if sealed { mine | SEALING } else { mine };
                if h.finalizer
                    .compare_exchange(ours, mine | COMMITTED, SeqCst, SeqCst)
                    .is_err()
                {
                    // Taken over while we stood still: our tombstones go back.
                    self.after_rollback_of(None, h)
                } else {
                    FinalizeAt::Unlink
                }
            }
            FinalizeAt::Unlink => return self.unlink(os, name),
            FinalizeAt::RollbackLoad { index } => {
                // SeqCst: ordered after our tombstones, so we see each one we turned.
                let seen = h.slots[index].load(SeqCst);
                match tomb_of(os, me, seen) {
                    // Ours, or a dead finalizer's; never a live one's (it may be one that
                    // took us over, and has passed that slot) nor any once the segment
                    // is committed (then every tombstone stays: a stale finalizer may
                    // have turned one over to its own after the commit). Until then our
                    // (or the dead one's) tombstone in this slot keeps anyone else from
                    // committing, so the check holds until the CAS.
                    Some(TombOf::Me | TombOf::Nobody) => {
                        // SeqCst: read after the slot, as above.
                        if is_committed(h.finalizer.load(SeqCst)) {
                            return self.unlink(os, name);
                        }
                        FinalizeAt::RollbackCas { index, seen }
                    }
                    _ => self.after_rollback_of(Some(index), h),
                }
            }
            FinalizeAt::RollbackCas { index, seen } => {
                // SeqCst: the slot is free again before we let go of the finalizer word.
                let _ = h.slots[index].compare_exchange(seen, FREE, SeqCst, SeqCst);
                self.after_rollback_of(Some(index), h)
            }
            FinalizeAt::LetGo => {
                // SeqCst: Dekker's store on our side, before the pending load below.
                if h.finalizer
                    .compare_exchange(mine, FREE, SeqCst, SeqCst)
                    .is_err()
                {
                    // Taken over while we stood still: look again from the start.
                    return self.next_round(h);
                }
                FinalizeAt::CheckPending
            }
            FinalizeAt::CheckPending => {
                // SeqCst: Dekker's load: a rival that saw us still finalizing set it before.
                if h.pending.load(SeqCst) == 0 || cfg!(shmrc_plant = "finalize_ignores_pending") {
                    return self.done(Outcome::InUse);
                }
                return self.next_round(h);
            }
        };
        self.at = Flat::from(next);
        Poll::Pending
    }
}

/// A resumable operation's position ([`FinalizeAt`], [`RecycleAt`]) kept as plain
/// fields: the phase, and the slot, word and flag its variant carries (zero where it
/// carries none, so that equal positions are equal values for the exhaustive check's
/// hashing). Each step matches on the typed position ([`Flat::get`]) and stores the
/// next one field by field ([`Flat::from`]): kept as an enum, the next position was
/// built in a temporary with narrow stores and copied with wide loads, a
/// store-forwarding stall that took 40–57% of a 4,096-slot finalize
/// (`docs/PERFORMANCE.md`).
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
struct Flat<P> {
    phase: P,
    index: usize,
    seen: u64,
    flag: bool,
}

impl<P> Flat<P> {
    fn new(phase: P, index: usize, seen: u64, flag: bool) -> Flat<P> {
        Flat {
            phase,
            index,
            seen,
            flag,
        }
    }
}

/// [`FinalizeAt`]'s variant, without its fields.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
enum FinalizePhase {
    ReclaimMark,
    ReclaimLoad,
    ReclaimRaise,
    ReclaimCas,
    LoadFinalizer,
    SetPending,
    CheckFinalizer,
    TakeFinalizer,
    ClearPending,
    TombLoad,
    TombCas,
    Seal,
    CheckMark,
    Unseal,
    Commit,
    Unlink,
    RollbackLoad,
    RollbackCas,
    LetGo,
    CheckPending,
}

impl From<FinalizeAt> for Flat<FinalizePhase> {
    #[inline(always)]
    fn from(at: FinalizeAt) -> Flat<FinalizePhase> {
        use FinalizePhase as P;
        match at {
            FinalizeAt::ReclaimMark => Flat::new(P::ReclaimMark, 0, 0, false),
            FinalizeAt::ReclaimLoad { index, live } => Flat::new(P::ReclaimLoad, index, 0, live),
            FinalizeAt::ReclaimRaise { index, mark, live } => {
                Flat::new(P::ReclaimRaise, index, mark, live)
            }
            FinalizeAt::ReclaimCas { index, seen, live } => {
                Flat::new(P::ReclaimCas, index, seen, live)
            }
            FinalizeAt::LoadFinalizer { live } => Flat::new(P::LoadFinalizer, 0, 0, live),
            FinalizeAt::SetPending { seen } => Flat::new(P::SetPending, 0, seen, false),
            FinalizeAt::CheckFinalizer { seen, overdue } => {
                Flat::new(P::CheckFinalizer, 0, seen, overdue)
            }
            FinalizeAt::TakeFinalizer { seen } => Flat::new(P::TakeFinalizer, 0, seen, false),
            FinalizeAt::ClearPending => Flat::new(P::ClearPending, 0, 0, false),
            FinalizeAt::TombLoad { index } => Flat::new(P::TombLoad, index, 0, false),
            FinalizeAt::TombCas { index, seen } => Flat::new(P::TombCas, index, seen, false),
            FinalizeAt::Seal(SealAt::Seal) => Flat::new(P::Seal, 0, 0, false),
            FinalizeAt::Seal(SealAt::CheckMark) => Flat::new(P::CheckMark, 0, 0, false),
            FinalizeAt::Seal(SealAt::Unseal { from }) => Flat::new(P::Unseal, from, 0, false),
            FinalizeAt::Commit { sealed } => Flat::new(P::Commit, 0, 0, sealed),
            FinalizeAt::Unlink => Flat::new(P::Unlink, 0, 0, false),
            FinalizeAt::RollbackLoad { index } => Flat::new(P::RollbackLoad, index, 0, false),
            FinalizeAt::RollbackCas { index, seen } => {
                Flat::new(P::RollbackCas, index, seen, false)
            }
            FinalizeAt::LetGo => Flat::new(P::LetGo, 0, 0, false),
            FinalizeAt::CheckPending => Flat::new(P::CheckPending, 0, 0, false),
        }
    }
}

impl Flat<FinalizePhase> {
    /// The typed position.
    #[inline(always)]
    fn get(self) -> FinalizeAt {
        use FinalizePhase as P;
        let Flat {
            phase,
            index,
            seen,
            flag: live,
        } = self;
        match phase {
            P::ReclaimMark => FinalizeAt::ReclaimMark,
            P::ReclaimLoad => FinalizeAt::ReclaimLoad { index, live },
            P::ReclaimRaise => FinalizeAt::ReclaimRaise {
                index,
                mark: seen,
                live,
            },
            P::ReclaimCas => FinalizeAt::ReclaimCas { index, seen, live },
            P::LoadFinalizer => FinalizeAt::LoadFinalizer { live },
            P::SetPending => FinalizeAt::SetPending { seen },
            P::CheckFinalizer => FinalizeAt::CheckFinalizer {
                seen,
                overdue: live,
            },
            P::TakeFinalizer => FinalizeAt::TakeFinalizer { seen },
            P::ClearPending => FinalizeAt::ClearPending,
            P::TombLoad => FinalizeAt::TombLoad { index },
            P::TombCas => FinalizeAt::TombCas { index, seen },
            P::Seal => FinalizeAt::Seal(SealAt::Seal),
            P::CheckMark => FinalizeAt::Seal(SealAt::CheckMark),
            P::Unseal => FinalizeAt::Seal(SealAt::Unseal { from: index }),
            P::Commit => FinalizeAt::Commit { sealed: live },
            P::Unlink => FinalizeAt::Unlink,
            P::RollbackLoad => FinalizeAt::RollbackLoad { index },
            P::RollbackCas => FinalizeAt::RollbackCas { index, seen },
            P::LetGo => FinalizeAt::LetGo,
            P::CheckPending => FinalizeAt::CheckPending,
        }
    }
}

impl std::fmt::Debug for Flat<FinalizePhase> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// [`RecycleAt`]'s variant, without its fields.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
enum RecyclePhase {
    TakeFinalizer,
    ReadMark,
    Load,
    Tomb,
    Seal,
    CheckMark,
    Unseal,
    Bump,
    Reopen,
    LetGo,
}

impl From<RecycleAt> for Flat<RecyclePhase> {
    #[inline(always)]
    fn from(at: RecycleAt) -> Flat<RecyclePhase> {
        use RecyclePhase as P;
        match at {
            RecycleAt::TakeFinalizer => Flat::new(P::TakeFinalizer, 0, 0, false),
            RecycleAt::ReadMark => Flat::new(P::ReadMark, 0, 0, false),
            RecycleAt::Seal(SealAt::Seal) => Flat::new(P::Seal, 0, 0, false),
            RecycleAt::Seal(SealAt::CheckMark) => Flat::new(P::CheckMark, 0, 0, false),
            RecycleAt::Seal(SealAt::Unseal { from }) => Flat::new(P::Unseal, from, 0, false),
            RecycleAt::Load(index) => Flat::new(P::Load, index, 0, false),
            RecycleAt::Tomb { index, seen } => Flat::new(P::Tomb, index, seen, false),
            RecycleAt::Bump => Flat::new(P::Bump, 0, 0, false),
            RecycleAt::Reopen { index, reused } => Flat::new(P::Reopen, index, 0, reused),
            RecycleAt::LetGo { reused } => Flat::new(P::LetGo, 0, 0, reused),
        }
    }
}

impl Flat<RecyclePhase> {
    /// The typed position.
    #[inline(always)]
    fn get(self) -> RecycleAt {
        use RecyclePhase as P;
        let Flat {
            phase,
            index,
            seen,
            flag: reused,
        } = self;
        match phase {
            P::TakeFinalizer => RecycleAt::TakeFinalizer,
            P::ReadMark => RecycleAt::ReadMark,
            P::Seal => RecycleAt::Seal(SealAt::Seal),
            P::CheckMark => RecycleAt::Seal(SealAt::CheckMark),
            P::Unseal => RecycleAt::Seal(SealAt::Unseal { from: index }),
            P::Load => RecycleAt::Load(index),
            P::Tomb => RecycleAt::Tomb { index, seen },
            P::Bump => RecycleAt::Bump,
            P::Reopen => RecycleAt::Reopen { index, reused },
            P::LetGo => RecycleAt::LetGo { reused },
        }
    }
}

impl std::fmt::Debug for Flat<RecyclePhase> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

// Plain atomics, outside any model checker's run.
#[cfg(all(test, not(any(shmrc_loom, shmrc_shuttle))))]
mod tests {
    use super::*;

    /// An OS that answers from a list: `me` runs, `live` live.
    struct Fixed {
        me: Token,
        live: Vec<Token>,
    }

    impl StepOs for Fixed {
        fn current(&self) -> Token {
            self.me
        }

        fn is_alive(&self, token: Token) -> bool {
            self.live.contains(&token)
        }

        fn shm_unlink(&self, _name: &str) -> Result<()> {
            Ok(())
        }
    }

    fn token(pid: u32) -> Token {
        Token::new(pid, 1).unwrap()
    }

    fn words(values: &[u64]) -> Vec<AtomicU64> {
        values.iter().map(|&v| AtomicU64::new(v)).collect()
    }

    #[test]
    fn a_claim_of_a_full_segment_gives_up_after_its_rounds_and_takes_a_slot_freed_between_them() {
        let (me, other) = (token(10), token(11));
        let os = Fixed {
            me,
            live: vec![other],
        };
        let slots = words(&[held_word(other), held_word(other)]);
        let (finalizer, pending) = (AtomicU64::new(FREE), AtomicU64::new(0));
        let h = Holders::new(&slots, &finalizer, &pending);
        // Every slot held by a live process: a read of the mark and a load per slot per
        // round, then Full.
        let mut claim = Claim::new(held_word(me));
        let mut steps = 0;
        let outcome = loop {
            steps += 1;
            if let Poll::Ready(outcome) = claim.step(&os, &h) {
                break outcome;
            }
        };
        assert_eq!(outcome, Err(ClaimError::Full));
        assert_eq!(
            steps,
            3 * Claim::ROUNDS,
            "the mark and a load per slot per round"
        );
        // A slot freed after the first round is taken in the second.
        let mut claim = Claim::new(held_word(me));
        assert_eq!(claim.step(&os, &h), Poll::Pending, "the mark read");
        assert_eq!(claim.step(&os, &h), Poll::Pending);
        assert_eq!(
            claim.step(&os, &h),
            Poll::Pending,
            "the first round ends: another"
        );
        slots[1].store(FREE, SeqCst);
        let outcome = loop {
            if let Poll::Ready(outcome) = claim.step(&os, &h) {
                break outcome;
            }
        };
        assert_eq!(outcome, Ok(1));
        assert_eq!(slots[1].load(SeqCst), held_word(me));
    }

    #[test]
    fn a_census_counts_each_slot_state_and_a_live_finalizer() {
        let (me, live, dead) = (token(10), token(11), token(12));
        let os = Fixed {
            me,
            live: vec![live],
        };
        let slots = words(&[
            FREE,
            TOMB,
            held_word(live),
            in_flight_word(live),
            held_word(dead),
            in_flight_word(dead),
            held_word(me),
        ]);
        let pending = AtomicU64::new(0);
        for (finalizer, finalizing) in [
            (FREE, false),
            (held_word(live), true),
            (held_word(dead), false),
        ] {
            let finalizer = AtomicU64::new(finalizer);
            let census = census(&os, &Holders::new(&slots, &finalizer, &pending));
            assert_eq!(
                census,
                Census {
                    free: 1,
                    tomb: 1,
                    live: 2,
                    in_flight: 1,
                    dead: 2,
                    finalizing,
                    finalizer: finalizing.then_some(live),
                    deferrals: 0,
                }
            );
        }
    }

    #[test]
    fn a_census_is_unheld_only_without_live_holders_in_flight_references_or_finalizer() {
        let nobody = Census {
            free: 1,
            tomb: 1,
            dead: 2,
            ..Census::default()
        };
        assert!(
            nobody.unheld(),
            "dead holders, free slots and tombstones hold nothing"
        );
        for held in [
            Census { live: 1, ..nobody },
            Census {
                in_flight: 1,
                ..nobody
            },
            Census {
                finalizing: true,
                ..nobody
            },
        ] {
            assert!(!held.unheld(), "{held:?} is held");
        }
    }

    #[test]
    fn others_hold_sees_any_slot_taken_but_the_callers_own() {
        let (me, other, dead) = (token(10), token(11), token(12));
        let (finalizer, pending) = (AtomicU64::new(FREE), AtomicU64::new(0));
        for (values, taken) in [
            (vec![held_word(me), FREE, FREE], false),
            (vec![FREE, FREE, held_word(me)], false),
            (vec![held_word(me), held_word(other), FREE], true),
            (vec![held_word(me), FREE, in_flight_word(me)], true),
            (vec![held_word(me), held_word(dead), FREE], true),
            (vec![held_word(me), FREE, TOMB], true),
        ] {
            let own = values.iter().position(|&w| w == held_word(me)).unwrap();
            let slots = words(&values);
            let h = Holders::new(&slots, &finalizer, &pending);
            assert_eq!(others_hold(&h, own), taken, "slots {values:x?}, own {own}");
        }
    }

    #[test]
    fn slot_words_decode_to_what_encoded_them() {
        let token = Token::new(4242, 7).unwrap();
        assert_eq!(Slot::decode(held_word(token)), Slot::Held(token));
        assert_eq!(Slot::decode(in_flight_word(token)), Slot::InFlight(token));
        assert_eq!(Slot::decode(FREE), Slot::Free);
        assert_eq!(Slot::decode(TOMB), Slot::Tomb);
        assert_eq!(Slot::decode(IN_FLIGHT), Slot::Garbage(IN_FLIGHT));
        assert_eq!(Slot::InFlight(token).owner(), Some(token));
        assert_eq!(Slot::Tomb.owner(), None);
    }

    /// Each position comes back from its flat form, prints as itself, and no two
    /// positions share a flat form.
    fn assert_round_trips<A, F>(positions: &[A], flat: impl Fn(A) -> F, get: impl Fn(F) -> A)
    where
        A: Copy + PartialEq + std::fmt::Debug,
        F: Copy + Eq + std::hash::Hash + std::fmt::Debug,
    {
        for &at in positions {
            let f = flat(at);
            assert_eq!(get(f), at);
            assert_eq!(format!("{f:?}"), format!("{at:?}"));
        }
        let distinct: std::collections::HashSet<F> = positions.iter().map(|&at| flat(at)).collect();
        assert_eq!(distinct.len(), positions.len());
    }

    #[test]
    fn a_flat_position_gives_back_every_finalize_position_it_was_made_from() {
        let positions = [
            FinalizeAt::ReclaimMark,
            FinalizeAt::ReclaimRaise {
                index: 2,
                mark: 1,
                live: true,
            },
            FinalizeAt::ReclaimLoad {
                index: 3,
                live: true,
            },
            FinalizeAt::ReclaimCas {
                index: 4,
                seen: 7,
                live: true,
            },
            FinalizeAt::ReclaimCas {
                index: 4,
                seen: 7,
                live: false,
            },
            FinalizeAt::LoadFinalizer { live: true },
            FinalizeAt::LoadFinalizer { live: false },
            FinalizeAt::SetPending { seen: 9 },
            FinalizeAt::CheckFinalizer {
                seen: 10,
                overdue: false,
            },
            FinalizeAt::CheckFinalizer {
                seen: 10,
                overdue: true,
            },
            FinalizeAt::TakeFinalizer { seen: 11 },
            FinalizeAt::ClearPending,
            FinalizeAt::TombLoad { index: 5 },
            FinalizeAt::TombCas { index: 6, seen: 12 },
            FinalizeAt::Seal(SealAt::Seal),
            FinalizeAt::Seal(SealAt::CheckMark),
            FinalizeAt::Seal(SealAt::Unseal { from: 6 }),
            FinalizeAt::Commit { sealed: true },
            FinalizeAt::Commit { sealed: false },
            FinalizeAt::Unlink,
            FinalizeAt::RollbackLoad { index: 7 },
            FinalizeAt::RollbackCas { index: 8, seen: 13 },
            FinalizeAt::LetGo,
            FinalizeAt::CheckPending,
        ];
        assert_round_trips(&positions, Flat::from, |f: Flat<_>| f.get());
    }

    #[test]
    fn a_flat_position_gives_back_every_recycle_position_it_was_made_from() {
        let positions = [
            RecycleAt::TakeFinalizer,
            RecycleAt::ReadMark,
            RecycleAt::Seal(SealAt::Seal),
            RecycleAt::Seal(SealAt::CheckMark),
            RecycleAt::Seal(SealAt::Unseal { from: 2 }),
            RecycleAt::Load(3),
            RecycleAt::Tomb { index: 4, seen: 9 },
            RecycleAt::Bump,
            RecycleAt::Reopen {
                index: 5,
                reused: true,
            },
            RecycleAt::Reopen {
                index: 5,
                reused: false,
            },
            RecycleAt::LetGo { reused: true },
            RecycleAt::LetGo { reused: false },
        ];
        assert_round_trips(&positions, Flat::from, |f: Flat<_>| f.get());
    }

    /// Runs `step` until it is ready, at most 100,000 times (`what`, which never ends,
    /// fails the test instead of hanging it).
    fn to_end<T>(what: &str, mut step: impl FnMut() -> Poll<T>) -> T {
        for _ in 0..100_000 {
            if let Poll::Ready(done) = step() {
                return done;
            }
        }
        panic!("{what} that does not end");
    }

    /// Steps `f` to its end, calling `before` with its position before each step.
    fn finalize_with(
        f: &mut Finalize,
        os: &Fixed,
        h: &Holders<'_>,
        mut before: impl FnMut(FinalizeAt),
    ) -> Finalized {
        to_end("a finalize", || {
            before(f.at.get());
            f.step(os, h, "segment")
        })
        .unwrap()
    }

    /// Steps `recycle` to its end, calling `before` with its position before each step.
    fn recycle_with(
        recycle: &mut Recycle,
        os: &Fixed,
        h: &Holders<'_>,
        mut before: impl FnMut(RecycleAt),
    ) -> Recycled {
        to_end("a recycle", || {
            before(recycle.at.get());
            recycle.step(os, h)
        })
    }

    #[test]
    fn a_finalize_asked_to_run_again_goes_round_until_its_last_round_then_defers() {
        let (me, other) = (token(10), token(11));
        let os = Fixed {
            me,
            live: vec![other],
        };
        let slots = words(&[FREE, FREE]);
        let (finalizer, pending) = (AtomicU64::new(FREE), AtomicU64::new(0));
        let h = Holders::new(&slots, &finalizer, &pending);
        let mut rounds = 0;
        let done = finalize_with(
            &mut Finalize::new(Reclaim::All, &h),
            &os,
            &h,
            |at| match at {
                // A claim lands behind the tombstone pass: blocked, it rolls back.
                FinalizeAt::TombLoad { index: 1 } => slots[1].store(held_word(other), SeqCst),
                // A rival asked for one more round meanwhile, and the claimer let go.
                FinalizeAt::CheckPending => {
                    rounds += 1;
                    pending.store(1, SeqCst);
                    slots[1].store(FREE, SeqCst);
                }
                _ => {}
            },
        );
        assert_eq!(
            (done.outcome, rounds),
            (Outcome::Deferred, Finalize::ROUNDS)
        );
        // Not asked again: a blocked finalize ends InUse after its one round.
        let mut rounds = 0;
        let done = finalize_with(
            &mut Finalize::new(Reclaim::All, &h),
            &os,
            &h,
            |at| match at {
                FinalizeAt::TombLoad { index: 1 } => slots[1].store(held_word(other), SeqCst),
                FinalizeAt::CheckPending => rounds += 1,
                _ => {}
            },
        );
        assert_eq!((done.outcome, rounds), (Outcome::InUse, 1));
        assert_eq!(slots[0].load(SeqCst), FREE, "its tombstone rolled back");
        assert_eq!(finalizer.load(SeqCst), FREE);
    }

    #[test]
    fn a_finalize_that_finds_a_live_finalizer_at_work_asks_it_to_run_again_and_defers() {
        let (me, other) = (token(10), token(11));
        let os = Fixed {
            me,
            live: vec![other],
        };
        let slots = words(&[FREE, FREE]);
        let (finalizer, pending) = (AtomicU64::new(held_word(other)), AtomicU64::new(0));
        let h = Holders::new(&slots, &finalizer, &pending);
        let mut f = Finalize::new(Reclaim::All, &h);
        let done = finalize_with(&mut f, &os, &h, |_| {});
        assert_eq!((done.outcome, f.round), (Outcome::Deferred, 0));
        assert_eq!(pending.load(SeqCst), 1, "asked to run again");
        // The other finalizer lets go before the check: another round, which destroys.
        let done = finalize_with(&mut Finalize::new(Reclaim::All, &h), &os, &h, |at| {
            if let FinalizeAt::CheckFinalizer { .. } = at {
                finalizer.store(FREE, SeqCst);
            }
        });
        assert_eq!(done.outcome, Outcome::Unlinked);
        assert!(slots.iter().all(|s| s.load(SeqCst) == tomb_word(me)));
    }

    #[test]
    fn a_live_finalizer_asked_to_run_again_patience_times_is_taken_over_unless_a_slot_is_held() {
        let (me, stuck, holder) = (token(10), token(11), token(12));
        let os = Fixed {
            me,
            live: vec![stuck, holder],
        };
        // A live holder: however often we finalize, the segment is in use, and the
        // finalizer is not asked anything.
        let slots = words(&[held_word(holder), FREE]);
        let (finalizer, pending) = (AtomicU64::new(held_word(stuck)), AtomicU64::new(0));
        let h = Holders::new(&slots, &finalizer, &pending);
        for _ in 0..2 * Finalize::PATIENCE {
            let done = finalize_with(&mut Finalize::new(Reclaim::All, &h), &os, &h, |_| {});
            assert_eq!(done.outcome, Outcome::InUse);
        }
        assert_eq!(pending.load(SeqCst), 0);
        // Nobody holds a slot: each finalize asks once more, the one reaching the bound
        // takes the word over and destroys.
        slots[0].store(FREE, SeqCst);
        for asked in 1..Finalize::PATIENCE {
            let done = finalize_with(&mut Finalize::new(Reclaim::All, &h), &os, &h, |_| {});
            assert_eq!(done.outcome, Outcome::Deferred);
            assert_eq!(pending.load(SeqCst), asked);
        }
        let done = finalize_with(&mut Finalize::new(Reclaim::All, &h), &os, &h, |_| {});
        assert_eq!(done.outcome, Outcome::Unlinked);
        assert_eq!(finalizer.load(SeqCst), held_word(me) | COMMITTED);
        assert!(slots.iter().all(|s| s.load(SeqCst) == tomb_word(me)));
    }

    /// Steps `f` as `os` until it stands at a position `stop` accepts.
    fn step_until(
        f: &mut Finalize,
        os: &Fixed,
        h: &Holders<'_>,
        stop: impl Fn(FinalizeAt) -> bool,
    ) {
        while !stop(f.at.get()) {
            assert!(
                f.step(os, h, "segment").is_pending(),
                "ended before the stop"
            );
        }
    }

    #[test]
    fn a_finalizer_taken_over_while_it_lives_and_its_successor_never_undo_each_others_tombstones() {
        let (me, stuck) = (token(10), token(11));
        let mine = Fixed {
            me,
            live: vec![stuck],
        };
        let its = Fixed {
            me: stuck,
            live: vec![me],
        };
        let take_over = |h: &Holders<'_>| {
            let mut done = None;
            for _ in 0..Finalize::PATIENCE {
                done = Some(finalize_with(
                    &mut Finalize::new(Reclaim::All, h),
                    &mine,
                    h,
                    |_| {},
                ));
            }
            done.unwrap()
        };

        // Stopped with a tombstone out: we take the word, block on its tombstone and roll
        // back only our own; it resumes and finishes the destruction itself.
        let slots = words(&[FREE, FREE]);
        let (finalizer, pending) = (AtomicU64::new(FREE), AtomicU64::new(0));
        let h = Holders::new(&slots, &finalizer, &pending);
        let mut stalled = Finalize::new(Reclaim::All, &h);
        step_until(&mut stalled, &its, &h, |at| {
            at == FinalizeAt::TombLoad { index: 1 }
        });
        assert_eq!(take_over(&h).outcome, Outcome::InUse);
        assert_eq!(
            slots[0].load(SeqCst),
            tomb_word(stuck),
            "its tombstone stays"
        );
        assert_eq!(finalizer.load(SeqCst), FREE);
        assert_eq!(
            finalize_with(&mut stalled, &its, &h, |_| {}).outcome,
            Outcome::Unlinked
        );
        assert!(slots.iter().all(|s| s.load(SeqCst) == tomb_word(stuck)));

        // Stopped just before turning its first slot: we take over and destroy; its CAS
        // then fails, its rollback leaves our tombstones, and its next round finds the
        // segment committed and only unlinks (this OS's unlink always succeeds; the
        // kernel's would say the name is gone).
        let slots = words(&[FREE, FREE]);
        let (finalizer, pending) = (AtomicU64::new(FREE), AtomicU64::new(0));
        let h = Holders::new(&slots, &finalizer, &pending);
        let mut stalled = Finalize::new(Reclaim::All, &h);
        step_until(&mut stalled, &its, &h, |at| {
            matches!(at, FinalizeAt::TombCas { index: 0, .. })
        });
        assert_eq!(take_over(&h).outcome, Outcome::Unlinked);
        let resumed = finalize_with(&mut stalled, &its, &h, |_| {});
        assert_eq!(resumed.outcome, Outcome::Unlinked);
        assert_eq!(finalizer.load(SeqCst), held_word(me) | COMMITTED);
        assert!(
            slots.iter().all(|s| s.load(SeqCst) == tomb_word(me)),
            "our tombstones stay: {:x?}",
            slots.iter().map(|s| s.load(SeqCst)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_recycle_counts_the_dead_holders_it_reclaims_and_bumps_the_generation() {
        let (me, dead, also_dead) = (token(10), token(12), token(13));
        let os = Fixed { me, live: vec![] };
        // A tombstone a dead finalizer left is not a holder; free slots are not either.
        let slots = words(&[
            held_word(me),
            TOMB,
            held_word(dead),
            FREE,
            in_flight_word(also_dead),
        ]);
        let (finalizer, pending, generation) =
            (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(5));
        let h = Holders::new(&slots, &finalizer, &pending).with_generation(&generation);
        let done = recycle_with(&mut Recycle::new(0), &os, &h, |_| {});
        assert_eq!(
            done,
            Recycled::Reused {
                generation: 6,
                reclaimed: 2
            }
        );
        let left: Vec<u64> = slots.iter().map(|s| s.load(SeqCst)).collect();
        assert_eq!(left, [held_word(me), FREE, FREE, FREE, FREE]);
        assert_eq!(finalizer.load(SeqCst), FREE);
    }

    /// The slots' words.
    fn words_of(slots: &[AtomicU64]) -> Vec<u64> {
        slots.iter().map(|s| s.load(SeqCst)).collect()
    }

    /// Steps `claim` to its end.
    fn claim_to_end(claim: &mut Claim, os: &Fixed, h: &Holders<'_>) -> Result<usize, ClaimError> {
        to_end("a claim", || claim.step(os, h))
    }

    #[test]
    fn a_finalize_touches_only_the_slots_below_the_mark() {
        let me = token(10);
        let os = Fixed { me, live: vec![] };
        let slots = words(&[FREE; 8]);
        let (finalizer, pending, mark) =
            (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(2));
        let h = Holders::new(&slots, &finalizer, &pending).with_mark(&mark);
        let mut f = Finalize::new(Reclaim::UntilLive, &h);
        let mut highest = 0;
        let mut sealed_before_commit = false;
        let done = finalize_with(&mut f, &os, &h, |at| {
            if let FinalizeAt::ReclaimLoad { index, .. }
            | FinalizeAt::TombLoad { index }
            | FinalizeAt::TombCas { index, .. } = at
            {
                highest = highest.max(index);
            }
            if at == (FinalizeAt::Commit { sealed: true }) {
                sealed_before_commit = is_sealing(finalizer.load(SeqCst));
            }
        });
        assert_eq!(done.outcome, Outcome::Unlinked);
        assert_eq!(highest, 1, "slots 0 and 1, below the mark 2");
        assert!(
            sealed_before_commit,
            "the word sealing while the mark is re-read"
        );
        let t = tomb_word(me);
        assert_eq!(words_of(&slots), [t, t, FREE, FREE, FREE, FREE, FREE, FREE]);
        assert!(is_committed(finalizer.load(SeqCst)));
    }

    #[test]
    fn a_finalize_whose_re_read_finds_the_mark_raised_unseals_and_goes_on_to_it() {
        let me = token(10);
        let os = Fixed { me, live: vec![] };
        let slots = words(&[FREE; 6]);
        let (finalizer, pending, mark) =
            (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(1));
        let h = Holders::new(&slots, &finalizer, &pending).with_mark(&mark);
        let mut f = Finalize::new(Reclaim::UntilLive, &h);
        // A claimer raised the mark to 4 before the seal (its CAS of slot 3 then loses
        // to our tombstone, or its slot blocks us).
        let mut unsealed = false;
        let done = finalize_with(&mut f, &os, &h, |at| {
            if at == FinalizeAt::Seal(SealAt::Seal) && mark.load(SeqCst) == 1 {
                mark.store(4, SeqCst);
            }
            unsealed |= at == FinalizeAt::Seal(SealAt::Unseal { from: 1 });
        });
        assert!(unsealed);
        assert_eq!(done.outcome, Outcome::Unlinked);
        let t = tomb_word(me);
        assert_eq!(words_of(&slots), [t, t, t, t, FREE, FREE]);
    }

    #[test]
    fn a_mark_above_the_capacity_counts_as_the_capacity() {
        let me = token(10);
        let os = Fixed { me, live: vec![] };
        let slots = words(&[FREE; 3]);
        let (finalizer, pending, mark) = (
            AtomicU64::new(FREE),
            AtomicU64::new(0),
            AtomicU64::new(u64::MAX),
        );
        let h = Holders::new(&slots, &finalizer, &pending).with_mark(&mark);
        assert_eq!(h.mark(), 3);
        let done = finalize(&os, &h);
        assert_eq!(done.outcome, Outcome::Unlinked);
        assert_eq!(words_of(&slots), [tomb_word(me); 3]);
        // A claim of a slot covered by such a mark raises nothing.
        let (finalizer, pending) = (AtomicU64::new(FREE), AtomicU64::new(0));
        let slots = words(&[FREE; 3]);
        let h = Holders::new(&slots, &finalizer, &pending).with_mark(&mark);
        let mut claim = Claim::new(held_word(me));
        assert_eq!(claim_to_end(&mut claim, &os, &h), Ok(0));
        assert_eq!(mark.load(SeqCst), u64::MAX);
    }

    #[test]
    fn covering_every_slot_makes_a_finalize_see_a_slot_written_by_index() {
        let me = token(10);
        let subscriber = token(11);
        let os = Fixed {
            me,
            live: vec![subscriber],
        };
        let slots = words(&[held_word(me), FREE, FREE]);
        let (finalizer, pending, mark) =
            (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(1));
        let h = Holders::new(&slots, &finalizer, &pending).with_mark(&mark);
        h.cover_every_slot();
        assert_eq!(h.mark(), 3);
        // A publish's move into slot 2, by index; then the publisher lets go of slot 0.
        assert!(transfer_step(&h, 2, FREE, held_word(subscriber)));
        assert!(transfer_step(&h, 0, held_word(me), FREE));
        // A release's finalize (not a sweep's, which scans the whole capacity).
        let mut release = Finalize::new(Reclaim::UntilLive, &h);
        let done = finalize_with(&mut release, &os, &h, |_| {});
        assert_eq!(done.outcome, Outcome::InUse);
        assert_eq!(slots[2].load(SeqCst), held_word(subscriber));
        // The mark only grows: covering again, or over a higher (hostile) word, lowers nothing.
        mark.store(u64::MAX, SeqCst);
        h.cover_every_slot();
        assert_eq!(mark.load(SeqCst), u64::MAX);
    }

    /// Runs a finalize (`Reclaim::All`) of `h` as `os` to its end.
    fn finalize(os: &Fixed, h: &Holders<'_>) -> Finalized {
        let mut f = Finalize::new(Reclaim::All, h);
        finalize_with(&mut f, os, h, |_| {})
    }

    #[test]
    fn a_claim_raises_the_mark_before_it_takes_a_slot_at_or_above_it() {
        let (me, other) = (token(10), token(11));
        let os = Fixed {
            me,
            live: vec![other],
        };
        let slots = words(&[held_word(other), FREE, FREE]);
        let (finalizer, pending, mark) =
            (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(1));
        let h = Holders::new(&slots, &finalizer, &pending).with_mark(&mark);
        let mut claim = Claim::new(held_word(me));
        let mut raised_before_cas = false;
        let taken = loop {
            if let ClaimAt::Cas { index: 1, .. } = claim.at {
                raised_before_cas = mark.load(SeqCst) == 2 && slots[1].load(SeqCst) == FREE;
            }
            if let Poll::Ready(done) = claim.step(&os, &h) {
                break done;
            }
        };
        assert_eq!(taken, Ok(1));
        assert!(raised_before_cas, "the mark covers slot 1 before its CAS");
        assert_eq!(mark.load(SeqCst), 2);
    }

    #[test]
    fn a_claim_that_finds_the_finalizer_word_sealing_takes_no_slot_that_round() {
        // The race the seal closes: a finalize read the mark 1, turned slot 0, sealed
        // and re-read the mark before this claim raised it for slot 1: the claim reads
        // the finalizer word after its raise, sees the seal and takes nothing, so the
        // commit cannot pass over a slot it took.
        let (me, finalizer_token) = (token(10), token(12));
        let os = Fixed {
            me,
            live: vec![finalizer_token],
        };
        let tomb = tomb_word(finalizer_token);
        let slots = words(&[tomb, FREE, FREE]);
        let (finalizer, pending, mark) =
            (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(1));
        let h = Holders::new(&slots, &finalizer, &pending).with_mark(&mark);
        let mut claim = Claim::new(held_word(me));
        while !matches!(claim.at, ClaimAt::Raise { index: 1, .. }) {
            assert_eq!(claim.step(&os, &h), Poll::Pending);
        }
        finalizer.store(held_word(finalizer_token) | SEALING, SeqCst);
        assert_eq!(claim.step(&os, &h), Poll::Pending, "the raise");
        assert_eq!(mark.load(SeqCst), 2);
        assert_eq!(
            claim.step(&os, &h),
            Poll::Pending,
            "the seal seen: the round ends"
        );
        assert!(matches!(claim.at, ClaimAt::ReadMark));
        // Committed meanwhile: gone, and no slot was taken.
        finalizer.store(held_word(finalizer_token) | COMMITTED, SeqCst);
        assert_eq!(claim_to_end(&mut claim, &os, &h), Err(ClaimError::Gone));
        assert_eq!(words_of(&slots), [tomb, FREE, FREE]);
        // Unsealed (the finalizer went on, then rolled back): the claim takes a slot.
        finalizer.store(FREE, SeqCst);
        slots[0].store(FREE, SeqCst);
        let mut claim = Claim::new(held_word(me));
        assert_eq!(claim_to_end(&mut claim, &os, &h), Ok(0));
    }

    /// The words of a segment a pool recycles: its slots, a free finalizer word, no
    /// requests to run again, a generation and a mark.
    struct Recyclable {
        slots: Vec<AtomicU64>,
        finalizer: AtomicU64,
        pending: AtomicU64,
        generation: AtomicU64,
        mark: AtomicU64,
    }

    impl Recyclable {
        fn new(slots: &[u64], generation: u64, mark: u64) -> Recyclable {
            Recyclable {
                slots: words(slots),
                finalizer: AtomicU64::new(FREE),
                pending: AtomicU64::new(0),
                generation: AtomicU64::new(generation),
                mark: AtomicU64::new(mark),
            }
        }

        fn holders(&self) -> Holders<'_> {
            Holders::new(&self.slots, &self.finalizer, &self.pending)
                .with_generation(&self.generation)
                .with_mark(&self.mark)
        }
    }

    #[test]
    fn a_recycle_touches_only_the_slots_below_the_mark() {
        let (me, dead) = (token(10), token(12));
        let os = Fixed { me, live: vec![] };
        let segment = Recyclable::new(&[held_word(me), held_word(dead), FREE, FREE, FREE], 0, 2);
        let h = segment.holders();
        assert!(others_hold(&h, 0));
        let mut highest = 0;
        let done = recycle_with(&mut Recycle::new(0), &os, &h, |at| {
            if let RecycleAt::Load(index) | RecycleAt::Tomb { index, .. } = at {
                highest = highest.max(index);
            }
        });
        assert_eq!(
            done,
            Recycled::Reused {
                generation: 1,
                reclaimed: 1
            }
        );
        assert_eq!(highest, 1, "slot 1, below the mark 2");
        assert_eq!(
            words_of(&segment.slots),
            [held_word(me), FREE, FREE, FREE, FREE]
        );
        assert!(!others_hold(&h, 0));
        assert_eq!(segment.mark.load(SeqCst), 2, "the mark is never lowered");
    }

    #[test]
    fn the_seal_handshake_stands_unseals_past_a_raised_mark_and_is_lost_to_a_rival() {
        let (me, rival) = (token(10), token(11));
        let mine = held_word(me);
        let slots = words(&[FREE; 6]);
        let (finalizer, pending, mark) =
            (AtomicU64::new(mine), AtomicU64::new(0), AtomicU64::new(2));
        let h = Holders::new(&slots, &finalizer, &pending).with_mark(&mark);
        // The mark has not grown past the slots turned: sealed, it stands.
        let mut bound = 2;
        assert_eq!(
            SealAt::Seal.step(&h, mine, &mut bound),
            Sealing::Next(SealAt::CheckMark)
        );
        assert_eq!(finalizer.load(SeqCst), mine | SEALING);
        assert_eq!(
            SealAt::CheckMark.step(&h, mine, &mut bound),
            Sealing::Stands
        );
        assert_eq!(bound, 2);
        // A claim raised it to 5 before the seal: the bound goes up to it, and the
        // unseal gives the slots from the old bound on to the embedding machine.
        mark.store(5, SeqCst);
        assert_eq!(
            SealAt::CheckMark.step(&h, mine, &mut bound),
            Sealing::Next(SealAt::Unseal { from: 2 })
        );
        assert_eq!(bound, 5);
        assert_eq!(
            SealAt::Unseal { from: 2 }.step(&h, mine, &mut bound),
            Sealing::Unsealed { from: 2 }
        );
        assert_eq!(finalizer.load(SeqCst), mine);
        // Taken over while we stood still, before the seal or before the unseal: lost,
        // and the rival's word is left as it is.
        for rivals in [held_word(rival), held_word(rival) | SEALING] {
            finalizer.store(rivals, SeqCst);
            assert_eq!(SealAt::Seal.step(&h, mine, &mut bound), Sealing::Lost);
            assert_eq!(
                SealAt::Unseal { from: 5 }.step(&h, mine, &mut bound),
                Sealing::Lost
            );
            assert_eq!(finalizer.load(SeqCst), rivals);
        }
        assert_eq!(words_of(&slots), [FREE; 6], "the handshake turns no slot");
    }

    #[test]
    fn a_recycle_whose_re_read_finds_a_claim_above_the_mark_turns_up_to_it_and_gives_up() {
        let (me, claimer) = (token(10), token(11));
        let os = Fixed {
            me,
            live: vec![claimer],
        };
        let segment = Recyclable::new(&[held_word(me), FREE, FREE, FREE, FREE], 7, 2);
        let h = segment.holders();
        let (mut unsealed, mut met) = (false, false);
        let done = recycle_with(&mut Recycle::new(0), &os, &h, |at| {
            // The claimer raised the mark over slot 3 before our seal and took it.
            if at == RecycleAt::Seal(SealAt::Seal) && segment.mark.load(SeqCst) == 2 {
                segment.mark.store(4, SeqCst);
                segment.slots[3].store(held_word(claimer), SeqCst);
            }
            unsealed |= at == RecycleAt::Seal(SealAt::Unseal { from: 2 });
            met |= at == RecycleAt::Load(3);
        });
        assert!(unsealed, "the re-read after the seal saw the mark raised");
        assert!(met, "the pass went on to the claimer's slot");
        assert_eq!(done, Recycled::Held);
        assert_eq!(
            segment.generation.load(SeqCst),
            7,
            "no bump under a live holder"
        );
        assert_eq!(
            words_of(&segment.slots),
            [held_word(me), FREE, FREE, held_word(claimer), FREE]
        );
        assert_eq!(segment.finalizer.load(SeqCst), FREE);
    }
}
