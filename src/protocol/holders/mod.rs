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
//!   a handle of an earlier use gives the slot back and fails
//!   ([`Attach`](crate::protocol::attach::Attach)).
//!
//! Why this is safe (P1) and leak-free (P3) is argued in `docs/PROTOCOL.md`.
//!
//! # Resumable steps
//! `claim`, `recycle` and `finalize` are written as resumable operations ([`Claim`],
//! [`Recycle`], [`Finalize`]: where they stand, with their locals), and `transfer` as one
//! step ([`transfer_step`]); an attach, which steps a [`Claim`] when it cannot take a
//! handle's reference over, is [`Attach`](crate::protocol::attach::Attach), beside this
//! folder. Each `step` call runs the code between two crash points; the
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

mod claim;
mod finalize;
mod recycle;
mod seal;
#[cfg(all(test, not(any(shmrc_loom, shmrc_shuttle))))]
pub(crate) mod tests;

pub use claim::*;
pub use finalize::*;
pub use recycle::*;
pub use seal::*;

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

    /// How many slots there are (0: a segment without slots, which no claim can hold).
    pub fn capacity(&self) -> usize {
        self.slots.len()
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
/// some 200 `getpid` calls. (Also [`attach`](crate::protocol::attach::attach)'s.)
pub(crate) struct Operation<'a, O: Os> {
    os: &'a O,
    me: Token,
}

impl<'a, O: Os> Operation<'a, O> {
    pub(crate) fn new(os: &'a O) -> Operation<'a, O> {
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
