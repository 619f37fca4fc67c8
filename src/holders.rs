//! The crash-safe holder protocol: who holds a file_system segment, and who may
//! destroy it. Everything here is generic over [`Os`], touches shared state only through
//! the atomics of [`crate::sync`], and calls [`Os::crash_point`] before every shared
//! step, so the simulated kernel can kill a process between any two of them.
//!
//! # Slots
//! A segment has `capacity` slots, each one word:
//! - `FREE` (0): nobody;
//! - a token: a process holds a reference (at most one slot per process; more
//!   references inside the process are an `Arc`);
//! - `IN_FLIGHT | token`: a reference travelling in a handle that `token` sent and no
//!   receiver has taken over yet; it is alive exactly while its sender is;
//! - `TOMB` (all ones): turned by a finalizer committing to destroy the segment.
//!
//! Any other word (only a hostile writer makes one) counts as a dead holder and is
//! reclaimed, so no slot state is unrecoverable (P5).
//!
//! # Operations
//! - [`claim`]: CAS a `FREE` slot (or a dead holder's) to my word. All slots `TOMB`:
//!   the segment is gone.
//! - [`release`]: CAS my slot from my word to `FREE`, then [`finalize`].
//! - [`finalize`] (anyone: releaser, sweeper, manager): reclaim dead holders, and if
//!   nobody live holds a slot, take the finalizer word and turn every slot
//!   `FREE → TOMB` in order. A slot that is held makes it roll back (`TOMB → FREE`) and
//!   stop: the segment lives. All slots `TOMB`: unlink. A finalizer killed half-way
//!   leaves its (dead) token in the finalizer word; the next one takes over, continues
//!   from the slots already turned, or rolls them back.
//!
//! Why this is safe (P1) and leak-free (P3) is argued in `docs/PROTOCOL.md`.
//!
//! # Planted bugs
//! Built with `RUSTFLAGS='--cfg shmrc_plant="NAME"'`, this module carries one known bug,
//! so that each checker can show it catches it (`docs/VERIFICATION.md`,
//! `.ci/planted-bugs`). `shmrc-model` plants the same bug under the same flag. Without
//! the flag (always, outside that script) the code below is the protocol as documented.
//! - `no_rollback`: a blocked finalize lets go of the finalizer word without turning its
//!   tombstones back into free slots.
//! - `release_without_cas`: [`transfer`] (and so [`vacate`] and [`release`]) stores into
//!   the slot without checking it still holds the reference being moved.
//! - `reclaim_live`: finalize reclaims in-flight references without asking whether
//!   their sender lives.

use crate::error::Result;
use crate::os::Os;
use crate::sync::{AtomicU64, Ordering::SeqCst, spin};
use crate::token::Token;

/// A slot nobody holds.
pub const FREE: u64 = 0;
/// A slot turned by a finalizer that is destroying the segment.
pub const TOMB: u64 = u64::MAX;
/// Flag of an in-flight reference (a handle sent, not yet taken over).
pub const IN_FLIGHT: u64 = 1 << 63;

/// How often [`claim`] rescans a segment whose slots are all held before it gives up.
const CLAIM_ROUNDS: usize = 64;
/// How often [`finalize`] retries when another finalizer asks it to run again.
const FINALIZE_ROUNDS: usize = 64;

/// What a slot word means.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Slot {
    /// Nobody.
    Free,
    /// Destroyed.
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
}

/// Why [`claim`] found no slot.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ClaimError {
    /// Every slot is a tombstone: the segment is being (or has been) destroyed.
    Gone,
    /// Every slot is held by a live process.
    Full,
}

/// How [`finalize`] ended.
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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

/// What [`finalize`] did.
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Reclaim {
    /// Every dead holder's slot (sweeps): one liveness check per held slot.
    All,
    /// Dead holders' slots up to the first live holder (releases): a release while
    /// others hold costs one liveness check.
    UntilLive,
}

/// A read-only count of slot states (for `ls` and dry-run sweeps).
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
}

impl Census {
    /// Whether a finalize would destroy the segment now.
    ///
    /// ```
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The word in slot `index` (None if out of range).
    pub fn slot_word(&self, index: usize) -> Option<u64> {
        self.slots.get(index).map(|s| s.load(SeqCst))
    }
}

/// Whether `token`'s process is alive, without a syscall for this process.
fn alive<O: Os>(os: &O, me: Token, token: Token) -> bool {
    token == me || os.is_alive(token)
}

/// Whether the word in a finalizer word or slot names a live process.
fn word_is_live<O: Os>(os: &O, me: Token, word: u64) -> bool {
    Slot::decode(word).owner().is_some_and(|t| alive(os, me, t))
}

/// Whether a finalize must leave slot state `s` alone: its owner lives.
fn keeps_its_slot<O: Os>(os: &O, me: Token, s: Slot) -> bool {
    if cfg!(shmrc_plant = "reclaim_live") && matches!(s, Slot::InFlight(_)) {
        return false;
    }
    s.owner().is_some_and(|t| alive(os, me, t))
}

/// Takes a slot for `word` (a [`held_word`] or an [`in_flight_word`] of this process):
/// a free one, or one of a dead holder. Returns the slot index.
pub fn claim<O: Os>(os: &O, h: &Holders<'_>, word: u64) -> Result<Result<usize, ClaimError>> {
    let me = os.current();
    for _ in 0..CLAIM_ROUNDS {
        let mut tombs = 0;
        for (index, slot) in h.slots.iter().enumerate() {
            os.crash_point()?;
            let current = slot.load(SeqCst);
            let takeable = match Slot::decode(current) {
                Slot::Free | Slot::Garbage(_) => true,
                Slot::Tomb => {
                    tombs += 1;
                    false
                }
                Slot::Held(t) | Slot::InFlight(t) => !alive(os, me, t),
            };
            if takeable {
                os.crash_point()?;
                if slot.compare_exchange(current, word, SeqCst, SeqCst).is_ok() {
                    return Ok(Ok(index));
                }
            }
        }
        if tombs == h.slots.len() {
            return Ok(Err(ClaimError::Gone));
        }
        spin();
    }
    Ok(Err(ClaimError::Full))
}

/// Moves the reference in slot `index` from `from` (an in-flight word) to `to`.
/// `false` if the slot no longer holds `from` (its sender died and it was reclaimed,
/// or the handle was already taken over).
pub fn transfer<O: Os>(os: &O, h: &Holders<'_>, index: usize, from: u64, to: u64) -> Result<bool> {
    let Some(slot) = h.slots.get(index) else {
        return Ok(false);
    };
    os.crash_point()?;
    if cfg!(shmrc_plant = "release_without_cas") {
        slot.store(to, SeqCst);
        return Ok(true);
    }
    Ok(slot.compare_exchange(from, to, SeqCst, SeqCst).is_ok())
}

/// Empties slot `index` if it still holds `word`; `false` if it did not. The caller
/// runs [`finalize`] afterwards when it held its last reference.
pub fn vacate<O: Os>(os: &O, h: &Holders<'_>, index: usize, word: u64) -> Result<bool> {
    transfer(os, h, index, word, FREE)
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

/// Reads every slot without changing anything.
pub fn census<O: Os>(os: &O, h: &Holders<'_>) -> Census {
    let me = os.current();
    let mut census = Census {
        finalizing: word_is_live(os, me, h.finalizer.load(SeqCst)),
        ..Census::default()
    };
    for slot in h.slots {
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
    let me = os.current();
    let mine = held_word(me);
    let mut reclaimed = 0;
    let done = |outcome, reclaimed| Ok(Finalized { outcome, reclaimed });
    for _ in 0..FINALIZE_ROUNDS {
        // 1. Reclaim the slots of dead holders (all, or up to the first live one).
        let mut live = false;
        for slot in h.slots {
            os.crash_point()?;
            let word = slot.load(SeqCst);
            match Slot::decode(word) {
                Slot::Free | Slot::Tomb => {}
                s if keeps_its_slot(os, me, s) => {
                    live = true;
                    if reclaim == Reclaim::UntilLive {
                        break;
                    }
                }
                _ => {
                    os.crash_point()?;
                    if slot.compare_exchange(word, FREE, SeqCst, SeqCst).is_ok() {
                        reclaimed += 1;
                    }
                }
            }
        }
        os.crash_point()?;
        let finalizer = h.finalizer.load(SeqCst);
        let finalizer_live = finalizer != FREE && word_is_live(os, me, finalizer);
        // A dead finalizer may have left tombstones: take over even if the segment is
        // held, to roll them back (P5: no slot stays a tombstone for nothing).
        let abandoned = finalizer != FREE && !finalizer_live;
        if live && !abandoned {
            return done(Outcome::InUse, reclaimed);
        }
        // 2. Take the finalizer word.
        if finalizer_live && finalizer != mine {
            // Ask the live finalizer to run once more, then check it is still there:
            // either it sees the flag after its rollback, or we see it gone.
            os.crash_point()?;
            h.pending.store(1, SeqCst);
            os.crash_point()?;
            if h.finalizer.load(SeqCst) == finalizer {
                return done(Outcome::Deferred, reclaimed);
            }
            spin();
            continue;
        }
        os.crash_point()?;
        if h.finalizer
            .compare_exchange(finalizer, mine, SeqCst, SeqCst)
            .is_err()
        {
            spin();
            continue;
        }
        os.crash_point()?;
        h.pending.store(0, SeqCst);
        // 3. Turn every slot into a tombstone, in order.
        let mut blocked = false;
        for slot in h.slots {
            os.crash_point()?;
            let word = slot.load(SeqCst);
            if word == TOMB {
                continue;
            }
            os.crash_point()?;
            if word != FREE || slot.compare_exchange(FREE, TOMB, SeqCst, SeqCst).is_err() {
                blocked = true;
                break;
            }
        }
        if !blocked {
            // 4. Every slot is a tombstone: nobody can claim again. Unlink, once.
            os.crash_point()?;
            return match os.shm_unlink(name) {
                Ok(()) => done(Outcome::Unlinked, reclaimed),
                Err(e) if e.is_gone() => done(Outcome::AlreadyGone, reclaimed),
                Err(e) => Err(e),
            };
        }
        // Someone holds a slot: roll back every tombstone (ours and any a dead
        // finalizer left), then let go of the finalizer word.
        for slot in h
            .slots
            .iter()
            .filter(|_| !cfg!(shmrc_plant = "no_rollback"))
        {
            os.crash_point()?;
            if slot.load(SeqCst) == TOMB {
                os.crash_point()?;
                let _ = slot.compare_exchange(TOMB, FREE, SeqCst, SeqCst);
            }
        }
        os.crash_point()?;
        let _ = h.finalizer.compare_exchange(mine, FREE, SeqCst, SeqCst);
        os.crash_point()?;
        if h.pending.load(SeqCst) == 0 {
            return done(Outcome::InUse, reclaimed);
        }
        spin();
    }
    done(Outcome::Deferred, reclaimed)
}
