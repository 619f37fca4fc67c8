//! Conformance of the step-level model (`shmrc_model::protocol`, what `proofs/` explores)
//! with the real protocol on the simulated kernel. Sequential scenarios of create,
//! share, attach, release, cancel, kill and sweep run on both; each operation that is not
//! a kill is, in turn, the victim, killed at its `n`-th crash point for every `n` until
//! it completes. After every operation the slot words, the finalizer word, the pending
//! flag and whether the name exists must agree, and the model must take exactly one
//! transition more than the real operation passes crash points (the transition from
//! the call to its first crash point), so the model's steps are the code's steps.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::collections::HashMap;

use shmrc::checkers::holders::Slot;
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::segment::{HEADER_BYTES, MAGIC};
use shmrc::checkers::sweep::sweep_with;
use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
use shmrc_model::protocol::{Config, Handle, Op, Pc, Phase, Pid, State, Target, Transition, Word};

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
            | Act::Sweep(p) => p,
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
}

impl Run {
    fn new(procs: usize) -> Run {
        let kernel = SimKernel::new(1);
        let procs = (0..procs).map(|_| kernel.spawn(UID)).collect();
        let model = State::initial(Config {
            procs: (&procs as &Vec<SimOs>).len(),
            slots: SLOTS,
            segments: 1,
            ops: u8::MAX,
            total_ops: u8::MAX,
            recycle: false,
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
            Act::Create(_) => Some(Op::Create(0)),
            Act::Share(p, _) => holds(p).then_some(Op::Share(0)),
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
            Act::Kill(_) => None,
        }
    }

    /// Runs `act` on the real code; the result says nothing, the kernel says all.
    fn real(&mut self, act: Act) {
        let os = self.os(act.pid()).clone();
        let ok_or_expected = |e: Error| {
            assert!(
                matches!(
                    e,
                    Error::Killed | Error::Gone { .. } | Error::HoldersFull { .. }
                ),
                "{act:?}: unexpected error {e}"
            );
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
                }
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
    }

    fn model_step(&mut self, t: Transition, act: Act) {
        self.model = self
            .model
            .apply(t)
            .unwrap_or_else(|| panic!("{act:?}: the model cannot take {t:?} in {}", self.model));
    }

    /// Runs `act` on both sides; `kill_at`: the real process is killed at that crash
    /// point of this operation (the model crashes after as many steps). Returns whether
    /// the kill happened.
    fn act(&mut self, act: Act, kill_at: Option<u64>) -> bool {
        let p = act.pid();
        let pid = self.os(p).pid();
        if !self.model.procs[usize::from(p)].alive {
            return false;
        }
        if let Act::Kill(_) = act {
            self.real(act);
            self.model_step(Transition::Crash(p), act);
            self.bufs.remove(&p);
            return false;
        }
        let Some(op) = self.model_op(act) else {
            return false;
        };
        if let Some(n) = kill_at {
            self.kernel.kill_at_step(pid, n);
        }
        let pool_before = self.model.handles;
        let before = self.kernel.steps(pid);
        self.real(act);
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
            while self.model.procs[usize::from(p)].pc != Pc::Idle {
                self.model_step(Transition::Step(p), act);
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
        killed
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

    /// The real header agrees with the model's segment.
    fn assert_agree(&self, after: Act) {
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
    }
}

/// Runs `script` once per (victim, crash point) pair and returns how many runs killed
/// a victim.
fn every_victim_every_step(procs: usize, script: &[Act]) -> u64 {
    let mut killed_runs = 0;
    for victim in 0..script.len() {
        if matches!(script[victim], Act::Kill(_)) {
            continue;
        }
        for n in 0.. {
            let mut run = Run::new(procs);
            let mut killed = false;
            for (k, act) in script.iter().enumerate() {
                let kill_at = (k == victim).then_some(n);
                killed |= run.act(*act, kill_at);
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
            if !killed {
                break;
            }
            killed_runs += 1;
            assert!(n < 1000, "victim {victim} never completes");
        }
    }
    killed_runs
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
