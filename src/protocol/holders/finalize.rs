//! [`finalize`]: reclaim dead holders and destroy a segment nobody live holds, as the
//! resumable [`Finalize`] (its phases, its flat position), and what it reports
//! ([`Outcome`], [`Finalized`], [`Reclaim`]).

use std::ops::ControlFlow::{self, Break, Continue};

use super::*;

/// What one phase's step leads to: the next position (`Continue`), or what [`Finalize::step`]
/// returns (`Break`: the end, or `Pending` once a new round was set).
type Next = ControlFlow<Poll<Result<Finalized>>, FinalizeAt>;

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
/// numbers are those of the module docs' four phases; "Blocked" marks the rollback a
/// held slot (or a take-over) leads to. [`Finalize::step`] runs each phase in a function
/// of its own.
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
    pub(super) round: usize,
    reclaimed: u32,
    /// This round's reclaim pass saw a tombstone of no live process.
    stray_tombs: bool,
    patience: u64,
    /// The mark last read: the tombstone and rollback passes visit the slots below it.
    bound: usize,
    /// Where this round's reclaim scan ends: the mark (a release), or the capacity (a
    /// sweep, [`Reclaim::All`]).
    scan: usize,
    pub(super) at: Flat<FinalizePhase>,
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
    /// end. `name` is the segment's name, unlinked by the last step. Each phase (the
    /// numbers of [`FinalizeAt`], and the rollback) is a function of its own; every
    /// access is SeqCst (the module docs say why), and each says what it orders.
    /// Inlined into [`finalize`]'s loop, as it was before its phases were split out
    /// (a call per step measurably slowed the sweep of 10,000 segments).
    #[inline(always)]
    pub fn step(
        &mut self,
        os: &impl StepOs,
        h: &Holders<'_>,
        name: &str,
    ) -> Poll<Result<Finalized>> {
        let me = os.current();
        let next = match self.at.get() {
            at @ (FinalizeAt::ReclaimMark
            | FinalizeAt::ReclaimLoad { .. }
            | FinalizeAt::ReclaimRaise { .. }
            | FinalizeAt::ReclaimCas { .. }) => self.reclaim(os, me, h, at),
            at @ (FinalizeAt::LoadFinalizer { .. }
            | FinalizeAt::SetPending { .. }
            | FinalizeAt::CheckFinalizer { .. }
            | FinalizeAt::TakeFinalizer { .. }
            | FinalizeAt::ClearPending) => self.finalizer_word(os, me, h, name, at),
            at @ (FinalizeAt::TombLoad { .. } | FinalizeAt::TombCas { .. }) => {
                self.tombstones(os, me, h, at)
            }
            at @ (FinalizeAt::Seal(_) | FinalizeAt::Commit { .. } | FinalizeAt::Unlink) => {
                self.commit(os, me, h, name, at)
            }
            at @ (FinalizeAt::RollbackLoad { .. }
            | FinalizeAt::RollbackCas { .. }
            | FinalizeAt::LetGo
            | FinalizeAt::CheckPending) => self.rollback(os, me, h, name, at),
        };
        match next {
            Continue(next) => {
                self.at = Flat::from(next);
                Poll::Pending
            }
            Break(end) => end,
        }
    }

    /// Phase 1, Reclaim: the mark read, then each slot below it (every slot, for a sweep)
    /// loaded, a word above the mark covered by raising it, a dead holder's slot freed by CAS.
    #[inline(always)]
    fn reclaim(&mut self, os: &impl StepOs, me: Token, h: &Holders<'_>, at: FinalizeAt) -> Next {
        Continue(match at {
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
            _ => unreachable!("reclaim called at {at:?}"),
        })
    }

    /// Phase 2, The finalizer word: read it, ask a live finalizer at work to run again (the
    /// pending handshake), take the word, clear the requests.
    #[inline(always)]
    fn finalizer_word(
        &mut self,
        os: &impl StepOs,
        me: Token,
        h: &Holders<'_>,
        name: &str,
        at: FinalizeAt,
    ) -> Next {
        let mine = held_word(me);
        Continue(match at {
            FinalizeAt::LoadFinalizer { live } => {
                // SeqCst: read after our slot reads, in the one order a rival's writes share.
                let seen = h.finalizer.load(SeqCst);
                if is_committed(seen) {
                    // Destroyed for good: only the unlink may be left to do.
                    return Break(self.unlink(os, name));
                }
                let finalizer_live = seen != FREE && word_is_live(os, me, seen);
                // A dead finalizer may have left tombstones: take over even if the
                // segment is held, to roll them back (P5: no slot stays a tombstone
                // for nothing).
                let abandoned = (seen != FREE && !finalizer_live) || self.stray_tombs;
                if live && !abandoned {
                    return Break(self.done(Outcome::InUse));
                }
                if finalizer_live && seen != mine && !live {
                    // Ask the live finalizer to run once more, then check it is still
                    // there: either it sees the flag after its rollback, or we see it
                    // gone (or, asked too often, we take over).
                    FinalizeAt::SetPending { seen }
                } else if finalizer_live && seen != mine {
                    // Held, with stray tombstones the live finalizer's pass will take.
                    return Break(self.done(Outcome::InUse));
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
                    return Break(self.next_round(h));
                }
                if !overdue {
                    return Break(self.done(Outcome::Deferred));
                }
                FinalizeAt::TakeFinalizer { seen }
            }
            FinalizeAt::TakeFinalizer { seen } => {
                // SeqCst: one finalizer at a time; ordered before our tombstone CASes.
                if h.finalizer
                    .compare_exchange(seen, mine, SeqCst, SeqCst)
                    .is_err()
                {
                    return Break(self.next_round(h));
                }
                FinalizeAt::ClearPending
            }
            FinalizeAt::ClearPending => {
                // SeqCst: cleared before we look at the slots, so later requests stay set.
                h.pending.store(0, SeqCst);
                self.after_tomb_of(None, h)
            }
            _ => unreachable!("finalizer_word called at {at:?}"),
        })
    }

    /// Phase 3, Tombstones: each slot below the mark turned to ours, or the rollback when one
    /// is held.
    #[inline(always)]
    fn tombstones(&mut self, os: &impl StepOs, me: Token, h: &Holders<'_>, at: FinalizeAt) -> Next {
        Continue(match at {
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
            _ => unreachable!("tombstones called at {at:?}"),
        })
    }

    /// Phase 4, Seal, commit, unlink: the seal handshake, the finalizer word committed, the
    /// name unlinked.
    #[inline(always)]
    fn commit(
        &mut self,
        os: &impl StepOs,
        me: Token,
        h: &Holders<'_>,
        name: &str,
        at: FinalizeAt,
    ) -> Next {
        let mine = held_word(me);
        Continue(match at {
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
            FinalizeAt::Unlink => return Break(self.unlink(os, name)),
            _ => unreachable!("commit called at {at:?}"),
        })
    }

    /// Blocked (the rollback): our tombstones turned back, the finalizer word let go, the
    /// pending requests looked at.
    #[inline(always)]
    fn rollback(
        &mut self,
        os: &impl StepOs,
        me: Token,
        h: &Holders<'_>,
        name: &str,
        at: FinalizeAt,
    ) -> Next {
        let mine = held_word(me);
        Continue(match at {
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
                            return Break(self.unlink(os, name));
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
                    return Break(self.next_round(h));
                }
                FinalizeAt::CheckPending
            }
            FinalizeAt::CheckPending => {
                // SeqCst: Dekker's load: a rival that saw us still finalizing set it before.
                if h.pending.load(SeqCst) == 0 || cfg!(shmrc_plant = "finalize_ignores_pending") {
                    return Break(self.done(Outcome::InUse));
                }
                return Break(self.next_round(h));
            }

            _ => unreachable!("rollback called at {at:?}"),
        })
    }
}

/// [`FinalizeAt`]'s variant, without its fields.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub(super) enum FinalizePhase {
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
    pub(super) fn get(self) -> FinalizeAt {
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
