//! [`recycle`]: the creator reuses its segment for a new generation, as the resumable
//! [`Recycle`] (and its flat position, [`RecyclePhase`]).

use super::*;

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
    pub(super) at: Flat<RecyclePhase>,
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

/// [`RecycleAt`]'s variant, without its fields.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub(super) enum RecyclePhase {
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
    pub(super) fn get(self) -> RecycleAt {
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
