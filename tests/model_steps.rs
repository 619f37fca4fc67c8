//! Conformance of the step-level model (`shmrc_model::protocol`, what `proofs/` explores)
//! with the real protocol on the simulated kernel. Sequential scenarios of create,
//! share, attach, release, cancel, kill and sweep run on both; each operation that is not
//! a kill is, in turn, the victim, killed at its `n`-th crash point for every `n` until
//! it completes. After every operation the slot words, the finalizer word, the pending
//! flag and whether the name exists must agree, and the model must take exactly one
//! transition more than the real operation passes crash points (the transition from
//! the call to its first crash point), so the model's steps are the code's steps.
//!
//! # The glue explored
//! The model's own copy of `src/buf/`'s glue (the local table's attach, which attach
//! starts from which reference, the finalize after a stale attach's give-back, a
//! cancelled handle's give-back of its use only) and its use of production's `Attach`
//! (`src/protocol/attach.rs`: the early and late generation checks, the
//! transfer-or-claim, the stale attach's give-back) are held to the code on generated
//! scenarios: every sequence of up to [`GLUE_LEN`] operations over a small alphabet
//! (recycles by the creator, attaches of handles in flight, of a kept copy of a handle
//! and of a handle in the process that already holds it, shares, cancels, releases,
//! kills), each operation killed at each of its crash points as above. On top of the
//! words, after every operation: each live process holds the segment on both sides or
//! on neither, in the same generation as the model's; the header's generation word is
//! the model's; a handle of an earlier use is refused with `Error::Stale` and keeps no
//! slot; and every property the proofs check (P1–P5) holds in the model's state.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::collections::HashMap;

use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::handle::ShareHandleExt;
use shmrc::checkers::holders::Slot;
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::segment::{GENERATION_OFFSET, HEADER_BYTES, MAGIC};
use shmrc::checkers::sweep::sweep_with;
use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
use shmrc_model::protocol::{
    Config, Handle, Op, Pc, Phase, Pid, Property, State, Target, Transition, Word,
};

const UID: u32 = 1000;
const SLOTS: usize = 3;

fn ns() -> Namespace {
    Namespace::new("shmrc-steps").unwrap()
}

/// One operation of a scenario; handles are named by a small label.
#[derive(Copy, Clone, Debug)]
enum Act {
    Create(Pid),
    Share(Pid, u8),
    Attach(Pid, u8),
    Release(Pid),
    Cancel(Pid, u8),
    Kill(Pid),
    Sweep(Pid),
    /// The creator recycles the segment it holds (`ShmBuf::recycle`, a pool's step).
    Recycle(Pid),
    /// Attach of the model's kept copy of a handle attached before: its locator (the
    /// same bytes, without the in-flight reference that went with the first attach).
    AttachCopy(Pid),
}

impl Act {
    fn pid(self) -> Pid {
        match self {
            Act::Create(p)
            | Act::Share(p, _)
            | Act::Attach(p, _)
            | Act::Release(p)
            | Act::Cancel(p, _)
            | Act::Kill(p)
            | Act::Sweep(p)
            | Act::Recycle(p)
            | Act::AttachCopy(p) => p,
        }
    }
}

/// Both worlds side by side.
struct Run {
    kernel: SimKernel,
    procs: Vec<SimOs>,
    bufs: HashMap<Pid, ShmBuf<SimOs>>,
    bytes: HashMap<u8, Vec<u8>>,
    name: Option<String>,
    model: State,
    handles: HashMap<u8, Handle>,
    /// The locator of each share's buffer, made with the handle (same generation).
    locators: HashMap<u8, Vec<u8>>,
    /// The real bytes of the model's kept copy ([`State::copy`]).
    copy: Option<Vec<u8>>,
    /// Model transitions taken.
    transitions: u64,
    /// The cases this run reached.
    seen: Seen,
}

/// What the real code returned.
#[derive(Debug, Default)]
struct Real {
    /// The error it returned (an expected kind: `real` checks).
    error: Option<Error>,
    /// A recycle reused the segment (`Ok(true)`).
    recycled: bool,
}

/// What happened to one act.
#[derive(Copy, Clone, Debug, Default)]
struct Done {
    /// Both sides ran it (its input existed, its process lived).
    applied: bool,
    /// The victim was killed inside it.
    killed: bool,
}

/// What the generated scenarios went through (so that a scenario set that stopped
/// reaching a case fails instead of passing).
#[derive(Copy, Clone, Default, Debug)]
struct Seen {
    /// Handles in flight of an earlier use refused (`Error::Stale`).
    stale_handles: u64,
    /// Kept copies of an earlier use refused (`Error::Stale`).
    stale_copies: u64,
    /// Attaches in a process that already held the segment (the local table).
    local_attaches: u64,
    /// Recycles that reused the segment.
    recycled: u64,
    /// Recycles refused: the segment was held.
    recycle_refused: u64,
    /// Kept copies attached in their use.
    copies_attached: u64,
}

impl Seen {
    fn add(&mut self, o: Seen) {
        self.stale_handles += o.stale_handles;
        self.stale_copies += o.stale_copies;
        self.local_attaches += o.local_attaches;
        self.recycled += o.recycled;
        self.recycle_refused += o.recycle_refused;
        self.copies_attached += o.copies_attached;
    }

    /// Fails unless every case was reached.
    fn assert_all_reached(&self) {
        let Seen {
            stale_handles,
            stale_copies,
            local_attaches,
            recycled,
            recycle_refused,
            copies_attached,
        } = *self;
        for (what, n) in [
            ("stale handle refused", stale_handles),
            ("stale copy refused", stale_copies),
            ("local attach", local_attaches),
            ("recycle", recycled),
            ("recycle refused", recycle_refused),
            ("copy attached", copies_attached),
        ] {
            assert!(n > 0, "no {what} in the generated scenarios: {self:?}");
        }
    }
}

impl Run {
    fn new(procs: usize, recycle: bool) -> Run {
        let kernel = SimKernel::new(1);
        let procs = (0..procs).map(|_| kernel.spawn(UID)).collect();
        let model = State::initial(Config {
            procs: (&procs as &Vec<SimOs>).len(),
            slots: SLOTS,
            segments: 1,
            ops: u8::MAX,
            total_ops: u8::MAX,
            recycle,
            anonymous: false,
            takeovers: true,
        });
        Run {
            kernel,
            procs,
            bufs: HashMap::new(),
            bytes: HashMap::new(),
            name: None,
            model,
            handles: HashMap::new(),
            locators: HashMap::new(),
            copy: None,
            transitions: 0,
            seen: Seen::default(),
        }
    }

    fn os(&self, p: Pid) -> &SimOs {
        &self.procs[usize::from(p)]
    }

    /// The model operation for `act`, or `None` when its input does not exist (a
    /// handle never made, a buffer never held) and the act is skipped on both sides.
    fn model_op(&self, act: Act) -> Option<Op> {
        let holds = |p: Pid| self.bufs.contains_key(&p);
        match act {
            Act::Create(_) => {
                (self.model.segments[0].phase == Phase::Absent).then_some(Op::Create(0))
            }
            // A label names one handle: a second share under it is not run.
            Act::Share(p, l) => {
                (holds(p) && !self.handles.contains_key(&l) && !self.bytes.contains_key(&l))
                    .then_some(Op::Share(0))
            }
            Act::Release(p) => holds(p).then_some(Op::Release(0)),
            Act::Attach(_, l) => self.handles.get(&l).map(|h| Op::Attach {
                h: *h,
                doomed: false,
            }),
            Act::Cancel(_, l) => self.handles.get(&l).map(|h| Op::Cancel(*h)),
            Act::Sweep(_) => self
                .model
                .segments
                .first()
                .is_some_and(|s| s.named)
                .then_some(Op::Sweep(Target::Segment(0))),
            Act::Recycle(p) => {
                (holds(p) && self.model.recycle && self.model.segments[0].creator == p)
                    .then_some(Op::Recycle(0))
            }
            Act::AttachCopy(_) => self.model.copy.map(Op::AttachCopy),
            Act::Kill(_) => None,
        }
    }

    /// Runs `act` on the real code; the kernel says what it did, the result is the
    /// error it returned (recycle: `Some(Error::Busy)`-like refusals are `Ok(false)`,
    /// returned here as `recycled`).
    fn real(&mut self, act: Act) -> Real {
        let os = self.os(act.pid()).clone();
        let mut out = Real::default();
        let mut ok_or_expected = |e: Error| {
            assert!(
                matches!(
                    e,
                    Error::Killed
                        | Error::Gone { .. }
                        | Error::HoldersFull { .. }
                        | Error::Stale { .. }
                ),
                "{act:?}: unexpected error {e}"
            );
            out.error = Some(e);
        };
        match act {
            Act::Create(p) => {
                let before = self.kernel.names();
                let opts = CreateOptions::new()
                    .strategy(Strategy::FileSystem)
                    .namespace(ns())
                    .capacity(SLOTS);
                match ShmBuf::create_with(&os, 64, &opts) {
                    Ok(buf) => {
                        self.bufs.insert(p, buf);
                    }
                    Err(e) => ok_or_expected(e),
                }
                self.name = self
                    .kernel
                    .names()
                    .into_iter()
                    .find(|n| !before.contains(n));
            }
            Act::Share(p, l) => match self.bufs[&p].share().and_then(|h| h.into_bytes()) {
                Ok(bytes) => {
                    self.bytes.insert(l, bytes);
                    self.locators
                        .insert(l, self.bufs[&p].locator().expect("a named buffer"));
                }
                Err(e) => ok_or_expected(e),
            },
            Act::AttachCopy(p) => {
                let bytes = self.copy.take().expect("attach of a copy never kept");
                match ShareHandle::from_bytes_with(&os, &bytes).and_then(ShmBuf::attach) {
                    Ok(buf) => {
                        self.bufs.insert(p, buf);
                    }
                    Err(e) => ok_or_expected(e),
                }
            }
            Act::Recycle(p) => match self.bufs[&p].recycle() {
                Ok(recycled) => out.recycled = recycled,
                Err(e) => ok_or_expected(e),
            },
            Act::Attach(p, l) => {
                let bytes = self
                    .bytes
                    .remove(&l)
                    .expect("attach of a handle never made");
                match ShareHandle::from_bytes_with(&os, &bytes).and_then(ShmBuf::attach) {
                    Ok(buf) => {
                        self.bufs.insert(p, buf);
                    }
                    Err(e) => ok_or_expected(e),
                }
            }
            Act::Release(p) => {
                if let Err(e) = self.bufs.remove(&p).expect("held").release() {
                    ok_or_expected(e);
                }
            }
            Act::Cancel(_, l) => {
                let bytes = self
                    .bytes
                    .remove(&l)
                    .expect("cancel of a handle never made");
                drop(ShareHandle::from_bytes_with(&os, &bytes).unwrap());
            }
            Act::Kill(_) => self.kernel.kill(os.pid()),
            Act::Sweep(_) => {
                if let Err(e) = sweep_with(&os, &ns(), false) {
                    ok_or_expected(e);
                }
            }
        }
        out
    }

    fn model_step(&mut self, t: Transition, act: Act) {
        self.model = self
            .model
            .apply(t)
            .unwrap_or_else(|| panic!("{act:?}: the model cannot take {t:?} in {}", self.model));
        self.transitions += 1;
        if self.model.recycle {
            for prop in Property::ALL {
                if let Some(why) = self.model.check(prop) {
                    panic!("{act:?}, {t:?}: {prop} violated: {why}\nin {}", self.model);
                }
            }
        }
    }

    /// Runs `act` on both sides; `kill_at`: the real process is killed at that crash
    /// point of this operation (the model crashes after as many steps). Returns whether
    /// the kill happened.
    fn act(&mut self, act: Act, kill_at: Option<u64>) -> Done {
        let p = act.pid();
        let pid = self.os(p).pid();
        if !self.model.procs[usize::from(p)].alive {
            return Done::default();
        }
        if let Act::Kill(_) = act {
            self.real(act);
            self.model_step(Transition::Crash(p), act);
            self.bufs.remove(&p);
            return Done {
                applied: true,
                killed: false,
            };
        }
        let Some(op) = self.model_op(act) else {
            return Done::default();
        };
        // The model keeps a copy of the first handle attached (while it keeps none);
        // the real side keeps that handle's locator.
        if let (Op::Attach { .. }, Act::Attach(_, l), true, None) =
            (op, act, self.model.recycle, self.model.copy)
        {
            self.copy = self.locators.get(&l).cloned();
        }
        let seg = self.model.segments[0];
        let held_before = self.model.procs[usize::from(p)].holds[0].is_some();
        let generation_before = seg.generation;
        if let Some(n) = kill_at {
            self.kernel.kill_at_step(pid, n);
        }
        let pool_before = self.model.handles;
        let before = self.kernel.steps(pid);
        let outcome = self.real(act);
        let passed = self.kernel.steps(pid) - before;
        let killed = self.kernel.is_killed(pid);
        if kill_at.is_some() && !killed {
            self.kernel.kill_at_step(pid, 1 << 40);
        }
        self.model_step(Transition::Start(p, op), act);
        let mut taken = 1;
        if killed {
            for _ in 0..passed {
                self.model_step(Transition::Step(p), act);
                taken += 1;
            }
            assert!(
                self.model.procs[usize::from(p)].pc != Pc::Idle,
                "{act:?} killed at its crash point {passed}: the model's operation already ended after {taken} transitions"
            );
            self.model_step(Transition::Crash(p), act);
            self.bufs.remove(&p);
        } else {
            // Every transition an early round's (`Step`: a retry round that ends starts
            // another), but the real operation's last one: where only the last round's
            // exit ends it (`GiveUp`: a claim `Full` after its 64 rounds, a finalize
            // deferred), that one.
            while self.model.procs[usize::from(p)].pc != Pc::Idle {
                assert!(
                    taken <= passed,
                    "{act:?}: the real operation passed {passed} crash points, the model is still running after {taken} transitions: {}",
                    self.model
                );
                let ends = |t| {
                    self.model
                        .apply(t)
                        .is_some_and(|s| s.procs[usize::from(p)].pc == Pc::Idle)
                };
                let t = if taken == passed && !ends(Transition::Step(p)) {
                    Transition::GiveUp(p)
                } else {
                    Transition::Step(p)
                };
                self.model_step(t, act);
                taken += 1;
            }
            assert_eq!(
                taken,
                passed + 1,
                "{act:?}: the real operation passed {passed} crash points, the model took {taken} transitions"
            );
        }
        // A share's handle, as the model knows it.
        if let Act::Share(_, l) = act {
            if let Some(h) = self
                .model
                .handles
                .iter()
                .flatten()
                .find(|h| !pool_before.contains(&Some(**h)))
            {
                self.handles.insert(l, *h);
            }
            assert_eq!(
                self.handles.contains_key(&l),
                self.bytes.contains_key(&l),
                "{act:?}: a handle came out of one side only"
            );
        }
        if let Act::Attach(_, l) | Act::Cancel(_, l) = act {
            self.handles.remove(&l);
        }
        if !killed {
            self.check_outcome(act, op, outcome, seg.named, held_before, generation_before);
        }
        Done {
            applied: true,
            killed,
        }
    }

    /// What a completed act must have returned, given the model's state before it.
    fn check_outcome(
        &mut self,
        act: Act,
        op: Op,
        outcome: Real,
        named: bool,
        held_before: bool,
        generation_before: u8,
    ) {
        match op {
            Op::Attach { h, .. } | Op::AttachCopy(h) => {
                if held_before {
                    self.seen.local_attaches += 1;
                }
                if h.generation != generation_before && (named || held_before) {
                    // A handle of an earlier use: refused, nothing kept.
                    assert!(
                        matches!(outcome.error, Some(Error::Stale { .. })),
                        "{act:?}: a handle of generation {} attached to a segment in generation {generation_before} gave {:?}, not Stale\nmodel {}",
                        h.generation,
                        outcome.error,
                        self.model
                    );
                    if matches!(op, Op::Attach { .. }) {
                        self.seen.stale_handles += 1;
                    } else {
                        self.seen.stale_copies += 1;
                    }
                } else if matches!(op, Op::AttachCopy(_)) && outcome.error.is_none() {
                    self.seen.copies_attached += 1;
                }
            }
            Op::Recycle(_) => {
                let bumped = self.model.segments[0].generation != generation_before;
                assert_eq!(
                    outcome.recycled, bumped,
                    "{act:?}: the real recycle reused the segment? model {}",
                    self.model
                );
                if bumped {
                    self.seen.recycled += 1;
                } else {
                    self.seen.recycle_refused += 1;
                }
            }
            _ => {}
        }
    }

    fn word_of(&self, raw: u64) -> Word {
        let pid = |t: shmrc::checkers::token::Token| -> Pid {
            self.procs
                .iter()
                .position(|os| os.token() == t)
                .expect("a word of a process of this run") as Pid
        };
        match Slot::decode(raw) {
            Slot::Free => Word::Free,
            Slot::Tomb => Word::Tomb(pid(shmrc::checkers::holders::tomb_owner(raw)
                .expect("a tombstone of a process of this run"))),
            Slot::Held(t) => Word::Held(pid(t)),
            Slot::InFlight(t) => Word::InFlight(pid(t)),
            Slot::Garbage(w) => panic!("garbage word {w:#x} in a header"),
        }
    }

    /// The real header agrees with the model's segment, and each live process holds
    /// it on both sides or neither, in the model's generation.
    fn assert_agree(&self, after: Act) {
        for (p, proc) in self.model.procs.iter().enumerate().take(self.procs.len()) {
            if !proc.alive {
                continue;
            }
            let real = self.bufs.get(&(p as Pid)).map(ShmBuf::generation);
            let model = proc.holds[0].map(|_| u64::from(proc.generations[0]));
            assert_eq!(
                real,
                model,
                "after {after:?}: p{p} holds the segment in generation (real, model) {:?}\nmodel {}",
                (real, model),
                self.model
            );
        }
        let seg = &self.model.segments[0];
        let Some(name) = &self.name else {
            assert_eq!(seg.phase, Phase::Absent, "after {after:?}");
            return;
        };
        let named = self.kernel.names().contains(name);
        assert_eq!(
            named, seg.named,
            "after {after:?}: named? model {}",
            self.model
        );
        if !named {
            return;
        }
        let word = |w: usize| {
            self.kernel
                .peek(name, w * 8, 8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()))
        };
        let published = word(0) == MAGIC;
        assert_eq!(
            published,
            seg.phase == Phase::Published,
            "after {after:?}: published? model {}",
            self.model
        );
        if !published {
            return;
        }
        let slots: Vec<Word> = (0..SLOTS)
            .map(|i| self.word_of(word(HEADER_BYTES / 8 + i)))
            .collect();
        let finalizer = match word(12) {
            0 => Word::Free,
            w => self.word_of(w),
        };
        assert_eq!(
            (slots.as_slice(), finalizer, word(13) != 0),
            (&seg.slots[..SLOTS], seg.finalizer, seg.pending),
            "after {after:?}: (slots, finalizer, pending) real vs model {}",
            self.model
        );
        assert_eq!(
            word(GENERATION_OFFSET / 8),
            u64::from(seg.generation),
            "after {after:?}: generation word real vs model {}",
            self.model
        );
    }
}

/// What a set of runs went through.
#[derive(Copy, Clone, Default, Debug)]
struct Explored {
    /// Runs in which a victim was killed.
    killed_runs: u64,
    /// Model transitions taken, each held to the code.
    steps: u64,
    /// The cases reached.
    seen: Seen,
}

/// Runs `script` once per (victim, crash point) pair (and once with no victim).
fn every_victim_every_step(procs: usize, script: &[Act]) -> u64 {
    explore_script(procs, false, script).killed_runs
}

/// [`every_victim_every_step`], with or without recycling in the model.
fn explore_script(procs: usize, recycle: bool, script: &[Act]) -> Explored {
    let mut explored = Explored::default();
    for victim in 0..script.len() {
        if matches!(script[victim], Act::Kill(_)) {
            continue;
        }
        for n in 0.. {
            let mut run = Run::new(procs, recycle);
            let mut killed = false;
            for (k, act) in script.iter().enumerate() {
                let kill_at = (k == victim).then_some(n);
                killed |= run.act(*act, kill_at).killed;
                run.assert_agree(*act);
            }
            // Everyone dies, a fresh process sweeps: both sides end with nothing.
            let mut end = Run { ..run };
            let sweeper = Pid::try_from(end.procs.len() - 1).unwrap();
            for p in 0..sweeper {
                end.act(Act::Kill(p), None);
            }
            end.act(Act::Sweep(sweeper), None);
            end.assert_agree(Act::Sweep(sweeper));
            assert!(
                end.kernel.names().is_empty(),
                "{:?} left",
                end.kernel.names()
            );
            explored.steps += end.transitions;
            explored.seen.add(end.seen);
            if !killed {
                break;
            }
            explored.killed_runs += 1;
            assert!(n < 1000, "victim {victim} never completes");
        }
    }
    explored
}

/// Whether every act of `script` runs on both sides when nothing is killed (a script
/// with an act whose input is missing is a shorter script's twin, not explored twice).
fn every_act_applies(procs: usize, script: &[Act]) -> bool {
    let mut run = Run::new(procs, true);
    script.iter().all(|act| run.act(*act, None).applied)
}

/// How long the generated sequences after the prefix are.
const GLUE_LEN: usize = 3;

/// Every sequence of up to [`GLUE_LEN`] acts of `alphabet` after `prefix` in which
/// every act applies, each run with every victim at every crash point; returns how
/// many scenarios (sequences) that was, and what their runs went through.
fn explore_glue(procs: usize, prefix: &[Act], alphabet: &[Act]) -> (u64, Explored) {
    let mut scenarios = 0;
    let mut all = Explored::default();
    // Depth first; a sequence in which an act does not apply is pruned with all its
    // extensions.
    let mut stack: Vec<Vec<Act>> = vec![prefix.to_vec()];
    while let Some(script) = stack.pop() {
        if script.len() > prefix.len() {
            if !every_act_applies(procs, &script) {
                continue;
            }
            let explored = explore_script(procs, true, &script);
            scenarios += 1;
            all.killed_runs += explored.killed_runs;
            all.steps += explored.steps;
            all.seen.add(explored.seen);
        }
        if script.len() < prefix.len() + GLUE_LEN {
            for act in alphabet {
                let mut longer = script.clone();
                longer.push(*act);
                stack.push(longer);
            }
        }
    }
    (scenarios, all)
}

#[test]
fn create_share_attach_and_two_releases_take_the_models_steps() {
    use Act::*;
    let runs = every_victim_every_step(
        3,
        &[
            Create(0),
            Share(0, 0),
            Attach(1, 0),
            Release(0),
            Release(1),
            Sweep(2),
        ],
    );
    assert!(runs >= 26, "{runs} killed runs");
}

#[test]
fn a_release_while_another_holds_and_a_handle_in_flight_take_the_models_steps() {
    use Act::*;
    let runs = every_victim_every_step(
        4,
        &[
            Create(0),
            Share(0, 0),
            Attach(1, 0),
            Share(1, 1),
            Release(0),
            Attach(2, 1),
            Release(1),
            Release(2),
            Sweep(3),
        ],
    );
    assert!(runs >= 36, "{runs} killed runs");
}

#[test]
fn cancelled_and_stale_handles_take_the_models_steps() {
    use Act::*;
    let runs = every_victim_every_step(
        3,
        &[
            Create(0),
            Share(0, 0),
            Share(0, 1),
            Cancel(1, 1),
            Kill(0),
            Attach(1, 0),
            Share(1, 2),
            Cancel(1, 2),
            Release(1),
            Sweep(2),
        ],
    );
    assert!(runs >= 35, "{runs} killed runs");
}

#[test]
fn a_sweeper_killed_anywhere_is_taken_over_in_the_models_steps() {
    use Act::*;
    let runs = every_victim_every_step(
        4,
        &[
            Create(0),
            Share(0, 0),
            Share(0, 1),
            Attach(1, 0),
            Kill(0),
            Kill(1),
            Sweep(2),
            Attach(3, 1),
            Sweep(2),
            Release(3),
        ],
    );
    assert!(runs >= 28, "{runs} killed runs");
}

/// The acts the glue scenarios are made of: recycles, releases and kills, shares by
/// the creator and by a receiver, attaches of handles in flight (in p1, which holds the
/// segment after the prefix: through the local table), a cancel, attaches of the kept
/// copy of handle 0.
const GLUE_ALPHABET: [Act; 11] = [
    Act::Recycle(0),
    Act::Release(1),
    Act::Kill(1),
    Act::Share(0, 1),
    Act::Share(1, 2),
    Act::Attach(2, 1),
    Act::Attach(1, 1),
    Act::Attach(2, 2),
    Act::Cancel(2, 2),
    Act::AttachCopy(2),
    Act::AttachCopy(1),
];

/// Issue 31 item 4, the glue explored: a creator recycling its segment while handles of
/// the old use are in flight or kept as copies; a second attach in a process that
/// holds it (the local table); handles of an earlier use attached or cancelled. Every
/// sequence of up to [`GLUE_LEN`] acts of [`GLUE_ALPHABET`] after two prefixes: a
/// share and attach; and the same, then p1 shares (handle 2) and is killed, so that the
/// creator's recycle reclaims p1's slot and handle 2's in-flight reference (handle 2 is
/// then of an earlier use, in flight from a dead sender).
#[test]
fn recycles_local_attaches_and_stale_handles_take_the_models_steps() {
    use Act::*;
    let prefixes: [&[Act]; 2] = [
        &[Create(0), Share(0, 0), Attach(1, 0)],
        &[Create(0), Share(0, 0), Attach(1, 0), Share(1, 2), Kill(1)],
    ];
    let (mut scenarios, mut all) = (0, Explored::default());
    for prefix in prefixes {
        let (n, explored) = explore_glue(4, prefix, &GLUE_ALPHABET);
        println!(
            "after {prefix:?}: {n} scenarios, {} steps, {} runs killed at a crash point, {:?}",
            explored.steps, explored.killed_runs, explored.seen
        );
        scenarios += n;
        all.steps += explored.steps;
        all.killed_runs += explored.killed_runs;
        all.seen.add(explored.seen);
    }
    println!("explored {scenarios} glue scenarios, {} steps", all.steps);
    assert!(scenarios >= 300, "{scenarios} scenarios");
    all.seen.assert_all_reached();
}
