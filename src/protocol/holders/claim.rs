//! [`claim`]: a slot taken for a holder or an in-flight reference, as the resumable
//! [`Claim`] (the mark raised first, the finalizer word read after).

use super::*;
use crate::error::Error;

/// Why [`claim`] found no slot.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ClaimError {
    /// Every slot is a tombstone: the segment is being (or has been) destroyed.
    Gone,
    /// Every slot is held by a live process.
    Full,
}

impl ClaimError {
    /// The error a caller returns for it: [`Error::Gone`] or [`Error::HoldersFull`] of
    /// `segment`, whose holder slots are `capacity`.
    pub fn into_error(self, segment: String, capacity: usize) -> Error {
        match self {
            ClaimError::Gone => Error::Gone { segment },
            ClaimError::Full => Error::HoldersFull {
                segment,
                capacity: capacity as u32,
            },
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
    pub(super) round: usize,
    all_tomb: bool,
    /// The mark this round read (the capacity before it is read, or without a mark).
    mark: usize,
    pub(super) at: ClaimAt,
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
