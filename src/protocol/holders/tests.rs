//! The holder protocol's unit tests: plain atomics, outside any model checker's run.
//! Their stub OS and word helpers ([`Fixed`], [`token`], [`words`]) serve the other
//! protocol rooms' unit tests too (`attach.rs`).

use super::*;

/// An OS that answers from a list: `me` runs, `live` live.
pub(crate) struct Fixed {
    pub(crate) me: Token,
    pub(crate) live: Vec<Token>,
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

/// The token of process `pid` (start time 1).
pub(crate) fn token(pid: u32) -> Token {
    Token::new(pid, 1).unwrap()
}

/// Slot words holding `values`.
pub(crate) fn words(values: &[u64]) -> Vec<AtomicU64> {
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
fn step_until(f: &mut Finalize, os: &Fixed, h: &Holders<'_>, stop: impl Fn(FinalizeAt) -> bool) {
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
    let (finalizer, pending, mark) = (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(2));
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
    let (finalizer, pending, mark) = (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(1));
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
    let (finalizer, pending, mark) = (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(1));
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
    let (finalizer, pending, mark) = (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(1));
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
    let (finalizer, pending, mark) = (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(1));
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
    let (finalizer, pending, mark) = (AtomicU64::new(mine), AtomicU64::new(0), AtomicU64::new(2));
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
