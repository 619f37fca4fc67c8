//! The holder protocol at the granularity of its atomic steps: what `proofs/` explores
//! exhaustively and `tests/model_steps.rs` holds against the real code.
//!
//! # Production code, stepped
//! The protocol's shared steps are not copied here: a process inside a share's
//! `claim`, an `attach`, a `recycle` or a `finalize` holds production's own resumable
//! operation ([`holders::Claim`], [`Attach`], [`holders::Recycle`],
//! [`holders::Finalize`]), and a transition runs its `step` (or
//! [`holders::transfer_step`], a release's or a cancel's vacate) on the segment's words
//! (encoded as production's slot words, tokens and all), with a [`StepOs`] that answers
//! from the state (who runs, who lives, the unlink). An attach is
//! `src/protocol/attach.rs`'s [`Attach`] from its [`Attach::begin`] (the early
//! generation check) to its end: the transfer of the handle's reference or a claim,
//! the generation check after the slot is taken, a stale use's give-back. A bug planted
//! in `src/protocol/` alone is therefore in what the proofs explore. What remains the
//! model's own is the glue around those steps, taken from `src/protocol/segment.rs`,
//! `src/buf/mod.rs` and `src/protocol/sweep.rs`: create's publish (the creator's word in
//! slot 0, the magic), attach's open and validation, which reference an operation
//! starts from, the local table's generation check (production's
//! [`holders::generation_is`]), a dropped handle's give-back of its own use only, the
//! finalize after a stale attach's give-back, and the sweep's per-name decision;
//! `tests/model_steps.rs` holds that glue to the code, recycles, local attaches and
//! stale handles included.
//!
//! # What a state is
//! Per segment: whether it exists and is published (the creator's header write of
//! `src/protocol/segment.rs`), whether its name is in the namespace, its slot words
//! ([`Word`]: free, tombstone, held by a process, in flight from a process), the
//! finalizer word and the pending flag. Per process: alive or dead, the segments it
//! holds (slot index), how many operations it may still start, and its position
//! ([`Pc`]) inside the operation it runs: the operation with its locals ([`Op`]) and the
//! crash point it stands at ([`Step`]). Handles in flight (as bytes anyone may attach or
//! drop) are a pool of `(segment, slot, sender)`. A name outside the namespace
//! (`foreign_named`) stands for everything a sweep must never touch.
//!
//! # One transition per atomic step
//! The real code calls `os.crash_point()` before every shared step. A [`Step`] value is
//! "standing at a crash point"; [`Transition::Step`] runs from there up to the next
//! crash point (or the end of the operation), exactly like the code between two
//! `crash_point()`s (for the holder protocol, it *is* that code: one `step` call);
//! [`Transition::Start`] runs an operation from its call up to its first crash point
//! (e.g. create's `shm_create`, attach's `shm_open` + validation). So a process killed
//! by the simulated kernel at its `n`-th crash point of an operation has done the
//! operation's first `n + 1` transitions; [`Transition::Crash`] (allowed in every state,
//! for every live process) kills it there for good.
//!
//! Inside one step the real code may read several words (a slot, then the process
//! table in `is_alive`) non-atomically; a transition does them at once. This loses no
//! behaviour that matters: every step writes at most one word, last; liveness only
//! goes from alive to dead and a token is never reused, so a death between the read
//! and the liveness check can be moved before the read (same word read), and a write
//! by another process in between makes the step's closing CAS fail, which is the
//! outcome of the step reading the new word (a CAS that fails and a skip of a slot both
//! leave every word unchanged).
//!
//! # Retry rounds
//! `claim` and `finalize` retry up to 64 rounds. States keep no round counter (each
//! stepped operation is stored in round 0): every step is run twice, as in an early
//! round and as in the last one ([`holders::Claim::set_round`]); where they differ (the
//! step ends a round) the early one starts another round ([`Transition::Step`]) and the
//! last one ends as the 64th round ends ([`Transition::GiveUp`]: `Full` for a claim,
//! `Deferred` for a finalize). That includes every execution of the real code and keeps
//! the state free of a counter; ending early writes nothing, so it cannot hide a
//! violation.
//!
//! # Stalled finalizers
//! The pending word counts the requests a live finalizer got to run again; the one
//! that reaches [`Finalize::PATIENCE`] takes the finalizer over. States keep it as a flag
//! (set or not), and a request is explored both ways ([`holders::Finalize::set_patience`]):
//! as [`Transition::Step`] below the bound (`Deferred`), and as [`Transition::GiveUp`],
//! the one that reaches it (the takeover). Since any process may stand still while the
//! others run, a finalizer taken over this way resumes later at whatever step it stood:
//! the stalled-finalizer scenario is in every exploration with [`Config::takeovers`],
//! and the proofs count its takeovers (`shmrc_proofs::Report::live_takeovers`). Without
//! it, every request is explored below the bound only (a live finalizer is deferred
//! to): a subset of the executions, which the proofs' default runs use at their
//! largest bounds to keep CI's cost (docs/VERIFICATION.md). [`Word::Tomb`] names the
//! finalizer that turned it, as production's tombstones do.
//!
//! # Anonymous segments (a pool's memfds)
//! With [`Config::anonymous`], every segment is a memfd recycled by a `ShmPool`: the
//! same slots, claims, transfers and recycles, with no name. Create is `memfd_create`
//! then the same allocate / map / initialize crash points; nothing ever lists it (no
//! sweep targets it) or unlinks it, so no finalize ever follows a release, a cancel, a
//! stale attach's give-back or a failed claim's vacate (the kernel frees the memory
//! when the last descriptor and mapping close), and an attach never finds it gone (a
//! handle carries an open descriptor). [`Segment::named`] then means "exists": set by
//! create, never cleared. P3 changes with it (see [`State::check_p3`]): the leak to
//! rule out is not a name left behind but a slot that keeps the creator's recycle from
//! ever reusing the segment.
//!
//! # What is not modelled
//! Hostile writers (garbage words, a forged finalizer word: P5's other half, covered by
//! `tests/sim_protocol.rs`, `tests/stalled_finalizer.rs` and the fuzzers), `NoSpace` and other OS errors, threads inside one process (one
//! operation at a time per process; the real code serializes finalizers per process
//! and keeps one slot per process with its process-local table), plain
//! file_descriptor buffers outside a pool (no holder protocol: the kernel's descriptor
//! count is their refcount; a pool's memfds are the anonymous segments above).
//!
//! # Planted bugs
//! The model plants nothing itself: built with `SHMRC_PLANT=NAME`, the steps it
//! runs are `src/protocol/holders/`'s and `src/protocol/attach.rs`'s with that bug
//! (`no_rollback`, `release_without_cas`, `reclaim_live`, `tomb_owner_ignored`,
//! `attach_skips_late_check`, …), so the proofs catch a bug put into the code alone.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::task::Poll;

use shmrc::Error;
use shmrc::checkers::attach::{Attach, AttachAt, AttachError};
use shmrc::checkers::holders::{
    self, Claim, Finalize, Holders, Reclaim, Recycle, Recycled, StepOs,
};
use shmrc::checkers::os::Mapping;
use shmrc::checkers::segment::{self, Fields, Layout};
use shmrc::checkers::sweep::{self, Decision, Found};
use shmrc::checkers::sync::process::AtomicU64 as Counter;
use shmrc::checkers::sync::{AtomicU64, Ordering::SeqCst};
use shmrc::checkers::token::{Token, TokenExt};

mod properties;

pub use properties::Property;

/// Most processes in a state: users plus the fresh sweeper of [`State::check_p3`].
pub const MAX_PROCS: usize = 5;
/// Most slots per segment.
pub const MAX_SLOTS: usize = 4;
/// Most segments.
pub const MAX_SEGMENTS: usize = 3;
/// Most handles in flight at once.
pub const MAX_HANDLES: usize = 8;

/// A process of the model (index into [`State::procs`]).
pub type Pid = u8;

/// A slot word (or the finalizer word, which is `Free` or `Held`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Word {
    /// `FREE`: nobody.
    Free,
    /// `TOMB_BY | token`: turned by this process's finalize (or recycle).
    Tomb(Pid),
    /// A process's token: it holds a reference (or, in the finalizer word, finalizes).
    Held(Pid),
    /// `IN_FLIGHT | token`: a handle sent by this process, not yet taken over.
    InFlight(Pid),
}

impl Word {
    /// The process whose liveness keeps this word.
    pub fn owner(self) -> Option<Pid> {
        match self {
            Word::Held(p) | Word::InFlight(p) => Some(p),
            Word::Free | Word::Tomb(_) => None,
        }
    }
}

impl fmt::Display for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Word::Free => write!(f, "."),
            Word::Tomb(p) => write!(f, "T{p}"),
            Word::Held(p) => write!(f, "H{p}"),
            Word::InFlight(p) => write!(f, "I{p}"),
        }
    }
}

/// How far a segment's creation got.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Phase {
    /// Not created yet.
    Absent,
    /// The name exists, the header is not published (a sweep sees it half-created).
    Unpublished,
    /// The header is published: the holder protocol runs on it.
    Published,
}

/// One segment.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Segment {
    /// Creation progress.
    pub phase: Phase,
    /// Whether its name is in the namespace; for an anonymous segment (a memfd, which
    /// has no name), whether it exists: set by create, never cleared (nothing unlinks
    /// it; a handle or a holder keeps it reachable).
    pub named: bool,
    /// Who created it.
    pub creator: Pid,
    /// How often `shm_unlink` removed its name.
    pub unlinks: u8,
    /// The finalizer word (`InFlight(p)` there: `COMMITTED | token`, p committed the
    /// segment's destruction; `Tomb(p)`: `SEALING | token`, p turned the slots below
    /// the mark and re-reads it).
    pub finalizer: Word,
    /// The pending-finalize flag.
    pub pending: bool,
    /// The holder slots (only the first [`State::slots`] are used).
    pub slots: [Word; MAX_SLOTS],
    /// The generation word (bumped by each recycle).
    pub generation: u8,
    /// The mark: slots at or above it are free (raised by each claim before its slot
    /// CAS, read by finalizes and recycles).
    pub mark: u8,
}

/// A handle in flight: the in-flight reference `InFlight(sender)` in `slot` of `seg`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Handle {
    /// The segment.
    pub seg: u8,
    /// The slot of its in-flight reference.
    pub slot: u8,
    /// The process that shared it.
    pub sender: Pid,
    /// The segment's generation it was shared in (the use it describes).
    pub generation: u8,
}

impl fmt::Display for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "h(s{} slot {} from p{} gen {})",
            self.seg, self.slot, self.sender, self.generation
        )
    }
}

/// What a sweep is looking at.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Target {
    /// A segment of the namespace.
    Segment(u8),
    /// A name outside the namespace (it must be skipped).
    Foreign,
}

/// An operation and its operation-wide locals.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Op {
    /// `segment::create` (file_system) of segment `.0`.
    Create(u8),
    /// `ShmBuf::share`: claim an in-flight slot.
    Share(u8),
    /// `ShmBuf::attach` of a handle. `doomed`: when it opened the segment, every slot
    /// was a tombstone (P4: it must end in `Gone`).
    Attach {
        /// The handle.
        h: Handle,
        /// Whether the segment was all tombstones when opened.
        doomed: bool,
    },
    /// `ShmBuf::release` of the reference held in segment `.0`.
    Release(u8),
    /// `ShmBuf::attach` of a copy of a handle already attached once (its bytes kept):
    /// it claims a slot (its in-flight reference went with the first attach) and must
    /// fail unless the segment is still in the handle's generation.
    AttachCopy(Handle),
    /// `holders::recycle` by the creator (a pool) holding segment `.0`.
    Recycle(u8),
    /// Dropping an unattached handle (`ShareHandle::cancel_in_flight`).
    Cancel(Handle),
    /// `sweep_with`'s work on one listed name (`sweep_one`).
    Sweep(Target),
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create(s) => write!(f, "create(s{s})"),
            Op::Share(s) => write!(f, "share(s{s})"),
            Op::Attach { h, .. } => write!(f, "attach({h})"),
            Op::Release(s) => write!(f, "release(s{s})"),
            Op::AttachCopy(h) => write!(f, "attach copy of {h}"),
            Op::Recycle(s) => write!(f, "recycle(s{s})"),
            Op::Cancel(h) => write!(f, "cancel({h})"),
            Op::Sweep(Target::Segment(s)) => write!(f, "sweep(s{s})"),
            Op::Sweep(Target::Foreign) => write!(f, "sweep(foreign name)"),
        }
    }
}

/// A crash point inside an operation, with the locals live there.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Step {
    /// create: `allocate` (ftruncate + fallocate).
    Allocate,
    /// create: `map`.
    Map,
    /// create: `initialize` (header, slot 0 for the creator, magic published).
    Initialize,
    /// create: the crash point after publishing; then it returns.
    Return,
    /// `vacate` (a `transfer` to `FREE`) of the operation's reference; `finalize`:
    /// run `finalize(UntilLive)` if it succeeded.
    Vacate {
        /// Whether a successful vacate is followed by a finalize.
        finalize: bool,
    },
    /// Inside `holders::claim` of a share: the production code's own resumable claim,
    /// stepped by [`holders::Claim::step`].
    Claim(Claim),
    /// Inside an attach (of a handle, or of a kept copy of one): production's own
    /// resumable [`Attach`] (the handle's transfer or a claim, the generation check
    /// after the slot is taken, a stale use's give-back), stepped by [`Attach::step`].
    Attach(Attach),
    /// sweep: a half-created segment whose creator is dead: reopen, unlink if still
    /// unpublished.
    HalfCreated,
    /// Inside `holders::finalize`: the production code's own resumable finalize,
    /// stepped by [`holders::Finalize::step`].
    Fin(Finalize),
    /// Inside `holders::recycle`: production's own resumable recycle.
    Recycle(Recycle),
}

/// Where a process is.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Pc {
    /// Between operations (or dead).
    Idle,
    /// Running `Op`, standing at crash point `Step`.
    At(Op, Step),
}

/// One process.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Proc {
    /// Alive or killed.
    pub alive: bool,
    /// Operations it may still start.
    pub ops_left: u8,
    /// The slot it holds in each segment.
    pub holds: [Option<u8>; MAX_SEGMENTS],
    /// The generation (use) of each segment it holds.
    pub generations: [u8; MAX_SEGMENTS],
    /// Its position.
    pub pc: Pc,
}

/// A flaw a transition records (so that invariants, which look at states, see it).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Flaw {
    /// P2: `shm_unlink` of a published segment whose slots were not all tombstones.
    UnlinkUncommitted(u8),
    /// P2: a half-created segment removed while its creator lived.
    UnlinkBeingCreated(u8),
    /// P4: an attach that opened an all-tombstone segment ended holding it.
    DoomedAttachHeld(Pid, u8),
}

/// The bounds of a model.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Config {
    /// Processes (at most `MAX_PROCS - 1`).
    pub procs: usize,
    /// Slots per segment.
    pub slots: usize,
    /// Segments.
    pub segments: usize,
    /// Operations each process may start.
    pub ops: u8,
    /// Operations all processes together may start.
    pub total_ops: u8,
    /// Whether creators may recycle their segments (and attached handles leave a copy
    /// of their bytes that may be attached again).
    pub recycle: bool,
    /// Whether every segment is an anonymous pooled memfd instead of a file_system
    /// segment: no name, no sweep, no finalize (see the module docs).
    pub anonymous: bool,
    /// Whether a request to run again is also explored as the one that reaches
    /// [`Finalize::PATIENCE`] (the takeover of a live finalizer; see the module docs).
    /// Without, every request is below the bound: a live finalizer is deferred to, as
    /// before issue 29 item 2 (a subset of the executions, and a smaller state space).
    pub takeovers: bool,
}

/// A transition.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Transition {
    /// Process `.0` starts operation `.1` (runs to its first crash point).
    Start(Pid, Op),
    /// Process `.0` passes its crash point and runs to the next one.
    Step(Pid),
    /// Like `Step`, but where the real code would spin into another round it takes its
    /// last round's exit instead (see the module docs).
    GiveUp(Pid),
    /// Process `.0` is killed where it stands.
    Crash(Pid),
}

/// The whole system.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct State {
    procs_n: u8,
    slots_n: u8,
    segments_n: u8,
    /// Operations all processes together may still start.
    pub ops_left: u8,
    /// The segments.
    pub segments: [Segment; MAX_SEGMENTS],
    /// The processes.
    pub procs: [Proc; MAX_PROCS],
    /// Handles in flight, sorted, `None`s last.
    pub handles: [Option<Handle>; MAX_HANDLES],
    /// Whether the name outside the namespace still exists.
    pub foreign_named: bool,
    /// Whether recycling is explored ([`Config::recycle`]).
    pub recycle: bool,
    /// Whether the segments are anonymous pooled memfds ([`Config::anonymous`]).
    pub anonymous: bool,
    /// Whether takeovers of a live finalizer are explored ([`Config::takeovers`]).
    pub takeovers: bool,
    /// The kept bytes of one handle attached once (with [`Config::recycle`]).
    pub copy: Option<Handle>,
    /// A flaw recorded by a transition.
    pub flaw: Option<Flaw>,
    /// Whether a finalize ended `Deferred` at its last retry round ([`Transition::GiveUp`])
    /// while every process lived: production's bound on rounds, after which the segment
    /// is left to a sweep, so P3 while processes live ([`State::check_p3_live`]) no
    /// longer applies. Cleared at the first crash (it applies only with nobody dead), so
    /// states that differ by it alone after a crash are one.
    pub finalize_gave_up: bool,
}

const NO_SEGMENT: Segment = Segment {
    phase: Phase::Absent,
    named: false,
    creator: 0,
    unlinks: 0,
    finalizer: Word::Free,
    pending: false,
    slots: [Word::Free; MAX_SLOTS],
    generation: 0,
    mark: 0,
};

const FRESH: Proc = Proc {
    alive: true,
    ops_left: 0,
    holds: [None; MAX_SEGMENTS],
    generations: [0; MAX_SEGMENTS],
    pc: Pc::Idle,
};

impl State {
    /// The state before anything happened: `config.procs` live idle processes, no
    /// segment, the foreign name present.
    ///
    /// # Panics
    /// When a bound exceeds the model's array sizes.
    pub fn initial(config: Config) -> State {
        assert!(
            config.procs >= 1 && config.procs < MAX_PROCS,
            "procs out of range"
        );
        assert!(
            config.slots >= 1 && config.slots <= MAX_SLOTS,
            "slots out of range"
        );
        assert!(
            config.segments >= 1 && config.segments <= MAX_SEGMENTS,
            "segments out of range"
        );
        let mut procs = [Proc {
            alive: false,
            ..FRESH
        }; MAX_PROCS];
        for p in procs.iter_mut().take(config.procs) {
            *p = Proc {
                ops_left: config.ops,
                ..FRESH
            };
        }
        State {
            procs_n: config.procs as u8,
            slots_n: config.slots as u8,
            segments_n: config.segments as u8,
            ops_left: config.total_ops,
            segments: [NO_SEGMENT; MAX_SEGMENTS],
            procs,
            handles: [None; MAX_HANDLES],
            foreign_named: true,
            recycle: config.recycle,
            anonymous: config.anonymous,
            takeovers: config.takeovers,
            copy: None,
            flaw: None,
            finalize_gave_up: false,
        }
    }

    /// Number of user processes.
    pub fn procs(&self) -> usize {
        usize::from(self.procs_n)
    }

    /// Slots per segment.
    pub fn slots(&self) -> usize {
        usize::from(self.slots_n)
    }

    /// Number of segments.
    pub fn segments(&self) -> usize {
        usize::from(self.segments_n)
    }

    /// Every transition enabled here, with the state it leads to.
    pub fn successors(&self) -> Vec<(Transition, State)> {
        let mut out = Vec::new();
        for p in 0..self.procs_n {
            let proc = &self.procs[usize::from(p)];
            if !proc.alive {
                continue;
            }
            let mut crashed = self.clone();
            crashed.crash(p);
            out.push((Transition::Crash(p), crashed));
            match proc.pc {
                Pc::Idle => {
                    for op in self.startable(p) {
                        let mut next = self.clone();
                        next.start(p, op);
                        out.push((Transition::Start(p, op), next));
                    }
                }
                Pc::At(..) => {
                    // The same step run as in an early round and as in the last one:
                    // they differ only where a retry round ends.
                    let mut next = self.clone();
                    next.exec(p, false);
                    let mut gave_up = self.clone();
                    gave_up.exec(p, true);
                    if gave_up != next {
                        // A finalize that ends here only as its last round ends: it
                        // gave up (a takeover at the bound goes on to take the word).
                        let finalizing = matches!(proc.pc, Pc::At(_, Step::Fin(_)));
                        if finalizing && gave_up.procs[usize::from(p)].pc == Pc::Idle {
                            gave_up.finalize_gave_up = !gave_up.anyone_dead();
                        }
                        out.push((Transition::GiveUp(p), gave_up));
                    }
                    out.push((Transition::Step(p), next));
                }
            }
        }
        out
    }

    /// The state after `t`, if `t` is enabled here.
    pub fn apply(&self, t: Transition) -> Option<State> {
        self.successors()
            .into_iter()
            .find_map(|(u, s)| (u == t).then_some(s))
    }

    /// The operations process `p` (idle, alive) may start.
    fn startable(&self, p: Pid) -> Vec<Op> {
        let proc = &self.procs[usize::from(p)];
        let mut ops = Vec::new();
        if proc.ops_left == 0 || self.ops_left == 0 {
            return ops;
        }
        // Segments are interchangeable: only the first absent one is ever created.
        if let Some(s) = (0..self.segments_n).find(|&s| self.seg(s).phase == Phase::Absent) {
            ops.push(Op::Create(s));
        }
        for s in 0..self.segments_n {
            if proc.holds[usize::from(s)].is_some() {
                ops.push(Op::Share(s));
                ops.push(Op::Release(s));
                if self.recycle && self.seg(s).creator == p {
                    ops.push(Op::Recycle(s));
                }
            }
            // A sweep lists /dev/shm: a memfd is never in it.
            if self.seg(s).named && !self.anonymous {
                ops.push(Op::Sweep(Target::Segment(s)));
            }
        }
        if self.foreign_named {
            ops.push(Op::Sweep(Target::Foreign));
        }
        if let Some(copy) = self.copy {
            ops.push(Op::AttachCopy(copy));
        }
        let mut last = None;
        for h in self.handles.iter().flatten() {
            if last != Some(*h) {
                ops.push(Op::Attach {
                    h: *h,
                    doomed: false,
                });
                ops.push(Op::Cancel(*h));
            }
            last = Some(*h);
        }
        ops
    }

    fn seg(&self, s: u8) -> &Segment {
        &self.segments[usize::from(s)]
    }

    fn seg_mut(&mut self, s: u8) -> &mut Segment {
        &mut self.segments[usize::from(s)]
    }

    fn proc_mut(&mut self, p: Pid) -> &mut Proc {
        &mut self.procs[usize::from(p)]
    }

    fn set_pc(&mut self, p: Pid, pc: Pc) {
        self.proc_mut(p).pc = pc;
    }

    fn end(&mut self, p: Pid) {
        self.set_pc(p, Pc::Idle);
    }

    /// Whether a vacate (of a release, a cancel, a stale attach's give-back, a failed
    /// claim's handle) is followed by a finalize: only for a file_system segment; an
    /// anonymous one is freed by the kernel with its last descriptor and mapping.
    fn finalizes(&self) -> bool {
        !self.anonymous
    }

    /// `alive(os, me, t)`: `t == me || os.is_alive(t)`.
    fn alive(&self, me: Pid, t: Pid) -> bool {
        t == me || self.procs.get(usize::from(t)).is_some_and(|q| q.alive)
    }

    fn push_handle(&mut self, h: Handle) {
        let free = self
            .handles
            .iter()
            .position(Option::is_none)
            .expect("more handles in flight than MAX_HANDLES: lower the bounds");
        self.handles[free] = Some(h);
        self.handles.sort_by_key(|h| (h.is_none(), *h));
    }

    fn take_handle(&mut self, h: Handle) {
        if let Some(i) = self.handles.iter().position(|x| *x == Some(h)) {
            self.handles[i] = None;
            self.handles.sort_by_key(|h| (h.is_none(), *h));
        }
    }

    /// The handle an operation carries and has not consumed yet (its in-flight word is,
    /// or was, in its slot; nobody else can use it meanwhile).
    pub fn carried(op: Op, step: Step) -> Option<Handle> {
        match (op, step) {
            (Op::Attach { h, .. }, Step::Vacate { .. }) | (Op::Cancel(h), Step::Vacate { .. }) => {
                Some(h)
            }
            // Before its slot is taken: the transfer of the handle's reference, or the
            // claim that follows a failed one.
            (Op::Attach { h, .. }, Step::Attach(a))
                if matches!(a.at(), AttachAt::Transfer { .. } | AttachAt::Claim(_)) =>
            {
                Some(h)
            }
            _ => None,
        }
    }

    fn crash(&mut self, p: Pid) {
        if let Pc::At(op, step) = self.procs[usize::from(p)].pc {
            // A handle not yet consumed goes back to the pool: its receiver has written
            // nothing for it, so this is the same as a receiver that never took it.
            if let Some(h) = State::carried(op, step) {
                self.push_handle(h);
            }
        }
        *self.proc_mut(p) = Proc {
            alive: false,
            ..FRESH
        };
        self.finalize_gave_up = false;
    }

    /// Whether a user process died.
    fn anyone_dead(&self) -> bool {
        self.procs[..self.procs()].iter().any(|q| !q.alive)
    }

    fn start(&mut self, p: Pid, op: Op) {
        self.proc_mut(p).ops_left -= 1;
        self.ops_left = self.ops_left.saturating_sub(1);
        match op {
            Op::Create(s) => {
                // shm_create (O_EXCL): the name exists, empty; anonymous: memfd_create,
                // no name (`named`: it exists), then the allocate with no crash point
                // between (`segment::create`), so it stands before the map.
                let first = if self.anonymous {
                    Step::Map
                } else {
                    Step::Allocate
                };
                let seg = self.seg_mut(s);
                seg.phase = Phase::Unpublished;
                seg.named = true;
                seg.creator = p;
                self.set_pc(p, Pc::At(op, first));
            }
            Op::Share(_) => {
                // A claim of a slot for an in-flight word of ours.
                let claim = Claim::new(Word::InFlight(p).encode());
                self.set_pc(p, Pc::At(op, Step::Claim(claim)));
            }
            Op::Release(_) => {
                let finalize = self.finalizes();
                self.set_pc(p, Pc::At(op, Step::Vacate { finalize }));
            }
            Op::Attach { h, .. } => {
                self.take_handle(h);
                if self.recycle && self.copy.is_none() {
                    self.copy = Some(h);
                }
                if self.procs[usize::from(p)].holds[usize::from(h.seg)].is_some() {
                    if self.held_in_use_of(p, h) {
                        // Already held here: give the handle's reference back, no
                        // finalize.
                        self.set_pc(p, Pc::At(op, Step::Vacate { finalize: false }));
                    } else {
                        // The local table's check: `Stale`, nothing taken; the dropped
                        // handle gives nothing back (its reference went with its use).
                        self.end(p);
                    }
                } else if !self.seg(h.seg).named {
                    // open_named: Gone. The handle is dropped; its cancel's own open
                    // finds nothing either. (Never for an anonymous segment: the
                    // handle's descriptor keeps the memfd.)
                    self.end(p);
                } else {
                    let in_flight = (usize::from(h.slot), Word::InFlight(h.sender).encode());
                    match self.attach_begin(p, h, Some(in_flight)) {
                        // `Attach::begin`'s early check: `Stale` before anything is
                        // taken; the dropped handle gives nothing back
                        // (`give_back_in_flight`).
                        Err(_) => self.end(p),
                        Ok(attach) => {
                            // Gone for good: every slot a tombstone under a committed
                            // finalizer word (before the commit, a finalizer taken over
                            // rolls back).
                            let doomed = self.all_tomb(h.seg)
                                && matches!(self.seg(h.seg).finalizer, Word::InFlight(_));
                            let op = Op::Attach { h, doomed };
                            self.set_pc(p, Pc::At(op, Step::Attach(attach)));
                        }
                    }
                }
            }
            Op::Cancel(h) => {
                self.take_handle(h);
                // `give_back_in_flight`: a handle of an earlier use gives nothing back.
                if self.seg(h.seg).named && self.same_use(h) {
                    let finalize = self.finalizes();
                    self.set_pc(p, Pc::At(op, Step::Vacate { finalize }));
                } else {
                    self.end(p);
                }
            }
            Op::AttachCopy(h) => {
                self.copy = None;
                let held = self.procs[usize::from(p)].holds[usize::from(h.seg)].is_some();
                if held || !self.seg(h.seg).named {
                    // Already held here (production compares the generations in
                    // process: a clone, or `Stale`), or open_named: Gone.
                    self.end(p);
                } else {
                    // No in-flight reference (it went with the first attach): a claim.
                    match self.attach_begin(p, h, None) {
                        // `Attach::begin`'s early check: `Stale` before anything is taken.
                        Err(_) => self.end(p),
                        Ok(attach) => self.set_pc(p, Pc::At(op, Step::Attach(attach))),
                    }
                }
            }
            Op::Recycle(s) => {
                let own = self.procs[usize::from(p)].holds[usize::from(s)]
                    .expect("recycling a segment it does not hold");
                self.set_pc(p, Pc::At(op, Step::Recycle(Recycle::new(usize::from(own)))));
            }
            Op::Sweep(Target::Foreign) => self.end(p), // not a name of the namespace
            Op::Sweep(Target::Segment(s)) => {
                let creator = self.seg(s).creator;
                SWEEP_DECISIONS.fetch_add(1, Relaxed);
                match sweep::decide(self.found(s), || self.alive(p, creator)) {
                    Decision::OpenAgain => self.set_pc(p, Pc::At(op, Step::HalfCreated)),
                    Decision::Finalize => {
                        let fin = self.fin_start(op);
                        self.set_pc(p, fin);
                    }
                    // Vanished, BeingCreated (or, never here, Skip and Keep).
                    _ => self.end(p),
                }
            }
        }
    }

    /// What `segment::open_named` of segment `s` finds now, as the sweep sees it.
    fn found(&self, s: u8) -> Found {
        let seg = self.seg(s);
        match (seg.named, seg.phase) {
            (false, _) | (_, Phase::Absent) => Found::Vanished,
            (true, Phase::Unpublished) => Found::HalfCreated,
            (true, Phase::Published) => Found::Published,
        }
    }

    /// Whether segment `s`'s slots are as a commit leaves them: each a tombstone (the
    /// slots below the mark the finalize read) or free (above it: no claim takes one
    /// once the finalizer word is sealed, `holders::SEALING`), and at least one a
    /// tombstone (the creator's slot 0 is below every mark).
    fn all_tomb(&self, s: u8) -> bool {
        let slots = &self.seg(s).slots[..self.slots()];
        slots
            .iter()
            .all(|w| matches!(w, Word::Tomb(_) | Word::Free))
            && slots.iter().any(|w| matches!(w, Word::Tomb(_)))
    }

    /// Runs process `p` from its crash point to the next. With `last_round`, a retry
    /// round that ends here is the last one (the claim ends `Full`, the finalize
    /// `Deferred`); otherwise another round starts. Round counters are kept at 0 in
    /// states, so that rounds do not multiply them.
    fn exec(&mut self, p: Pid, last_round: bool) {
        let Pc::At(op, step) = self.procs[usize::from(p)].pc else {
            return;
        };
        match step {
            Step::Allocate => self.set_pc(p, Pc::At(op, Step::Map)),
            Step::Map => self.set_pc(p, Pc::At(op, Step::Initialize)),
            Step::Initialize => {
                let Op::Create(s) = op else { unreachable!() };
                // Production's header write, on a scratch mapping of the segment: the
                // slots and the publication are what it wrote.
                PUBLISHES.fetch_add(1, Relaxed);
                let header = Scratch::initialized(p, s, self.slots());
                let n = self.slots();
                let seg = self.seg_mut(s);
                for (i, word) in seg.slots[..n].iter_mut().enumerate() {
                    *word = Word::decode(header.slot(i));
                }
                seg.mark = header.mark();
                if header.published() {
                    seg.phase = Phase::Published;
                }
                // `segment::create` hands its caller slot 0 (`Backing::Named`).
                self.proc_mut(p).holds[usize::from(s)] = Some(0);
                self.set_pc(p, Pc::At(op, Step::Return));
            }
            Step::Return => self.end(p),
            Step::Vacate { finalize } => {
                let (s, slot, word) = match op {
                    Op::Release(s) => {
                        let slot = self.procs[usize::from(p)].holds[usize::from(s)]
                            .expect("releasing a segment it does not hold");
                        self.proc_mut(p).holds[usize::from(s)] = None;
                        self.proc_mut(p).generations[usize::from(s)] = 0;
                        (s, slot, Word::Held(p))
                    }
                    Op::Attach { h, .. } | Op::Cancel(h) => {
                        (h.seg, h.slot, Word::InFlight(h.sender))
                    }
                    _ => unreachable!("vacate in {op:?}"),
                };
                let moved = self.transfer(s, slot, word, Word::Free);
                if moved && finalize {
                    let fin = self.fin_start(op);
                    self.set_pc(p, fin);
                } else {
                    self.end(p);
                }
            }
            Step::Claim(mut claim) => {
                let Op::Share(s) = op else {
                    unreachable!("claim in {op:?}")
                };
                claim.set_round(if last_round { Claim::ROUNDS - 1 } else { 0 });
                let os = self.kernel(p, s);
                CLAIM_STEPS.fetch_add(1, Relaxed);
                match self.with_holders(s, |h| claim.step(&os, h)) {
                    Poll::Pending => {
                        claim.set_round(0);
                        self.set_pc(p, Pc::At(op, Step::Claim(claim)));
                    }
                    Poll::Ready(Ok(slot)) => {
                        self.push_handle(Handle {
                            seg: s,
                            slot: slot as u8,
                            sender: p,
                            generation: self.procs[usize::from(p)].generations[usize::from(s)],
                        });
                        self.end(p);
                    }
                    // Gone or Full: the share returns the error.
                    Poll::Ready(Err(_)) => self.end(p),
                }
            }
            Step::Attach(mut attach) => {
                let h = handle_of(op);
                attach.set_round(if last_round { Claim::ROUNDS - 1 } else { 0 });
                let os = self.kernel(p, h.seg);
                ATTACH_STEPS.fetch_add(1, Relaxed);
                match self.with_holders(h.seg, |w| attach.step(&os, w)) {
                    Poll::Pending => {
                        attach.set_round(0);
                        self.set_pc(p, Pc::At(op, Step::Attach(attach)));
                    }
                    Poll::Ready(Ok(slot)) => {
                        // In the handle's use (the generation checked after the slot
                        // was taken).
                        self.proc_mut(p).generations[usize::from(h.seg)] = h.generation;
                        self.hold(p, op, h.seg, slot as u8);
                    }
                    // Gone or Full.
                    Poll::Ready(Err(AttachError::Claim(_))) => self.claim_failed(p, op),
                    // Stale: the slot given back (`false`: it no longer held our word);
                    // a named segment is then finalized, as a release does.
                    Poll::Ready(Err(AttachError::Stale { gave_back })) => {
                        if gave_back && self.finalizes() {
                            let fin = self.fin_start(op);
                            self.set_pc(p, fin);
                        } else {
                            self.end(p);
                        }
                    }
                }
            }
            Step::HalfCreated => {
                let Op::Sweep(Target::Segment(s)) = op else {
                    unreachable!()
                };
                SWEEP_DECISIONS.fetch_add(1, Relaxed);
                if sweep::decide_again(self.found(s)) == Decision::Unlink {
                    if self.alive(p, self.seg(s).creator) {
                        self.flaw = Some(Flaw::UnlinkBeingCreated(s));
                    }
                    self.unlink(s);
                }
                self.end(p);
            }
            Step::Recycle(mut recycle) => {
                let Op::Recycle(s) = op else { unreachable!() };
                let os = self.kernel(p, s);
                RECYCLE_STEPS.fetch_add(1, Relaxed);
                match self.with_holders(s, |h| recycle.step(&os, h)) {
                    Poll::Pending => self.set_pc(p, Pc::At(op, Step::Recycle(recycle))),
                    Poll::Ready(Recycled::Reused { generation, .. }) => {
                        self.proc_mut(p).generations[usize::from(s)] = generation as u8;
                        self.end(p);
                    }
                    Poll::Ready(Recycled::Held) => self.end(p),
                }
            }
            Step::Fin(mut fin) => {
                let s = fin_seg(op);
                fin.set_round(if last_round { Finalize::ROUNDS - 1 } else { 0 });
                // The pending word is a flag here, not a count: a request is explored both
                // as one below the bound and as the one that reaches it.
                let takeover = last_round && self.takeovers;
                fin.set_patience(if takeover { 1 } else { u64::MAX });
                let os = self.kernel(p, s);
                FINALIZE_STEPS.fetch_add(1, Relaxed);
                let done = self.with_holders(s, |h| fin.step(&os, h, "the segment"));
                if os.unlinked.get() {
                    if !self.all_tomb(s) {
                        self.flaw = Some(Flaw::UnlinkUncommitted(s));
                    }
                    self.unlink(s); // Unlinked, or AlreadyGone
                }
                match done {
                    Poll::Pending => {
                        fin.set_round(0);
                        fin.set_patience(Finalize::PATIENCE);
                        self.set_pc(p, Pc::At(op, Step::Fin(fin)));
                    }
                    // InUse, Deferred, Unlinked, AlreadyGone.
                    Poll::Ready(_) => self.end(p),
                }
            }
        }
    }

    /// What process `p` sees of the OS in a step on segment `s`.
    fn kernel(&self, p: Pid, s: u8) -> Kernel {
        Kernel {
            me: p,
            alive: self.procs.map(|q| q.alive),
            named: self.seg(s).named,
            unlinked: Cell::new(false),
        }
    }

    /// Runs `f` on segment `s`'s words as the production code sees them (slots,
    /// finalizer word, pending flag), then stores back what it wrote.
    fn with_holders<R>(&mut self, s: u8, f: impl FnOnce(&Holders<'_>) -> R) -> R {
        let n = self.slots();
        let seg = self.seg_mut(s);
        let slots = seg.slots.map(|w| AtomicU64::new(w.encode()));
        let finalizer = AtomicU64::new(seg.finalizer.encode());
        let pending = AtomicU64::new(u64::from(seg.pending));
        let generation = AtomicU64::new(u64::from(seg.generation));
        let mark = AtomicU64::new(u64::from(seg.mark));
        let holders = Holders::new(&slots[..n], &finalizer, &pending)
            .with_generation(&generation)
            .with_mark(&mark);
        let result = f(&holders);
        for (word, slot) in seg.slots.iter_mut().zip(&slots) {
            *word = Word::decode(slot.load(SeqCst));
        }
        seg.finalizer = Word::decode(finalizer.load(SeqCst));
        seg.pending = pending.load(SeqCst) != 0;
        seg.generation = generation.load(SeqCst) as u8;
        seg.mark = mark.load(SeqCst) as u8;
        result
    }

    /// `holders::transfer`'s step: CAS slot `slot` of `s` from `from` to `to`.
    fn transfer(&mut self, s: u8, slot: u8, from: Word, to: Word) -> bool {
        TRANSFER_STEPS.fetch_add(1, Relaxed);
        self.with_holders(s, |h| {
            holders::transfer_step(h, usize::from(slot), from.encode(), to.encode())
        })
    }

    fn unlink(&mut self, s: u8) {
        let seg = self.seg_mut(s);
        if seg.named {
            seg.named = false;
            seg.unlinks = seg.unlinks.saturating_add(1);
        }
    }

    /// Production's [`Attach::begin`] for process `p`'s attach of `h` (with its
    /// in-flight reference `in_flight`, or none: a kept copy's claim): the early
    /// generation check, before anything is taken; then where its first step stands.
    fn attach_begin(
        &mut self,
        p: Pid,
        h: Handle,
        in_flight: Option<(usize, u64)>,
    ) -> Result<Attach, AttachError> {
        let os = self.kernel(p, h.seg);
        let memfd = self.anonymous;
        ATTACH_STEPS.fetch_add(1, Relaxed);
        self.with_holders(h.seg, |w| {
            Attach::begin(&os, w, Some(h.generation.into()), in_flight, memfd)
        })
    }

    /// `holders::give_back_in_flight`'s test: the segment is still in the use `h` was
    /// shared in (a plain comparison there, not `generation_is`).
    fn same_use(&self, h: Handle) -> bool {
        self.seg(h.seg).generation == h.generation
    }

    /// `ShmBuf::attach`'s check in the local table: process `p`'s reference and the
    /// segment are both in `h`'s use.
    fn held_in_use_of(&mut self, p: Pid, h: Handle) -> bool {
        let mine = self.procs[usize::from(p)].generations[usize::from(h.seg)];
        GENERATION_CHECKS.fetch_add(1, Relaxed);
        mine == h.generation
            && self.with_holders(h.seg, |w| holders::generation_is(w, h.generation.into()))
    }

    /// An attach (or reattach) now holds slot `slot` of `s`.
    fn hold(&mut self, p: Pid, op: Op, s: u8, slot: u8) {
        if let Op::Attach { doomed: true, .. } = op {
            self.flaw = Some(Flaw::DoomedAttachHeld(p, s));
        }
        self.proc_mut(p).holds[usize::from(s)] = Some(slot);
        self.end(p);
    }

    /// An attach's claim ended in `Gone` or `Full`: the attach returns it and drops the
    /// handle, whose `cancel_in_flight` opens the segment and vacates (an anonymous one:
    /// vacates its in-flight word, no finalize); an attach of a kept copy has nothing
    /// to give back.
    fn claim_failed(&mut self, p: Pid, op: Op) {
        match op {
            // The handle's cancel gives back only a reference of the segment's use.
            Op::Attach { h, .. } if self.seg(h.seg).named && self.same_use(h) => {
                let finalize = self.finalizes();
                self.set_pc(p, Pc::At(op, Step::Vacate { finalize }));
            }
            _ => self.end(p),
        }
    }

    /// The first crash point of `finalize` for `op` (`Reclaim::All` for a sweep).
    fn fin_start(&mut self, op: Op) -> Pc {
        let reclaim = match op {
            Op::Sweep(_) => Reclaim::All,
            _ => Reclaim::UntilLive,
        };
        let fin = self.with_holders(fin_seg(op), |h| Finalize::new(reclaim, h));
        Pc::At(op, Step::Fin(fin))
    }
}

/// A segment's mapping as create's publish step writes it: the header words and the
/// slots, initialized by production's [`segment::initialize`].
struct Scratch(Vec<AtomicU64>);

impl Scratch {
    /// Segment `s`'s header, `slots` slots, as process `p` creating it writes them.
    fn initialized(p: Pid, s: u8, slots: usize) -> Scratch {
        let layout = Layout::new(8, slots).expect("a small layout is valid");
        let fields = Fields {
            layout,
            creator: token(p),
            uid: 1000,
            pid_namespace: 1,
            created_at_nanos: 1,
            nonce: u128::from(s),
            share_key: u64::from(s),
        };
        let words = layout.total_len().div_ceil(8);
        let header = Scratch((0..words).map(|_| AtomicU64::new(0)).collect());
        segment::initialize(&header, &fields, Some(token(p))).expect("the mapping is long enough");
        header
    }

    /// Slot `i`'s word.
    fn slot(&self, i: usize) -> u64 {
        self.0[segment::HEADER_WORDS + i].load(SeqCst)
    }

    /// The mark word.
    fn mark(&self) -> u8 {
        self.0[segment::MARK_OFFSET / 8].load(SeqCst) as u8
    }

    /// Whether the magic (word 0) is published.
    fn published(&self) -> bool {
        self.0[0].load(SeqCst) == segment::MAGIC
    }
}

impl Mapping for Scratch {
    fn len(&self) -> usize {
        self.0.len() * 8
    }

    fn words(&self, n: usize) -> Option<&[AtomicU64]> {
        self.0.get(..n)
    }

    fn read(&self, _offset: usize, _out: &mut [u8]) -> bool {
        false
    }

    fn write(&self, _offset: usize, _data: &[u8]) -> bool {
        false
    }
}

/// What a process sees of the OS inside a protocol step ([`StepOs`]): its token, the
/// liveness of the others, and the unlink of the segment the step works on.
struct Kernel {
    me: Pid,
    alive: [bool; MAX_PROCS],
    named: bool,
    unlinked: Cell<bool>,
}

impl StepOs for Kernel {
    fn current(&self) -> Token {
        token(self.me)
    }

    fn is_alive(&self, t: Token) -> bool {
        pid_of(t).is_some_and(|q| self.alive[usize::from(q)])
    }

    fn shm_unlink(&self, name: &str) -> shmrc::Result<()> {
        self.unlinked.set(true);
        if self.named {
            Ok(())
        } else {
            Err(Error::Gone {
                segment: name.to_owned(),
            })
        }
    }
}

/// How often each production function ran in this process's explorations.
static CLAIM_STEPS: Counter = Counter::new(0);
static FINALIZE_STEPS: Counter = Counter::new(0);
static TRANSFER_STEPS: Counter = Counter::new(0);
static PUBLISHES: Counter = Counter::new(0);
static SWEEP_DECISIONS: Counter = Counter::new(0);
static RECYCLE_STEPS: Counter = Counter::new(0);
static GENERATION_CHECKS: Counter = Counter::new(0);
static ATTACH_STEPS: Counter = Counter::new(0);

/// The production functions the model's transitions run, with how often each ran so
/// far in this process (what `shmrc-proofs` reports).
pub fn production_steps() -> [(&'static str, u64); 8] {
    [
        (
            "shmrc::checkers::holders::Claim::step",
            CLAIM_STEPS.load(Relaxed),
        ),
        (
            "shmrc::checkers::holders::Finalize::step",
            FINALIZE_STEPS.load(Relaxed),
        ),
        (
            "shmrc::checkers::holders::transfer_step",
            TRANSFER_STEPS.load(Relaxed),
        ),
        (
            "shmrc::checkers::segment::initialize",
            PUBLISHES.load(Relaxed),
        ),
        (
            "shmrc::checkers::sweep::decide and decide_again",
            SWEEP_DECISIONS.load(Relaxed),
        ),
        (
            "shmrc::checkers::holders::Recycle::step",
            RECYCLE_STEPS.load(Relaxed),
        ),
        (
            "shmrc::checkers::attach::Attach::begin and step",
            ATTACH_STEPS.load(Relaxed),
        ),
        (
            "shmrc::checkers::holders::generation_is (the local table's check)",
            GENERATION_CHECKS.load(Relaxed),
        ),
    ]
}

/// The first pid of the model's processes in production tokens.
const FIRST_PID: u32 = 100;

/// Process `p`'s token in production's words.
fn token(p: Pid) -> Token {
    Token::new(FIRST_PID + u32::from(p), 1).expect("a small pid makes a token")
}

/// The model process whose token `t` is (None: not one of ours).
fn pid_of(t: Token) -> Option<Pid> {
    let p = t.pid().checked_sub(FIRST_PID)?;
    Pid::try_from(p)
        .ok()
        .filter(|p| usize::from(*p) < MAX_PROCS)
}

impl Word {
    /// The slot word production stores for this.
    pub fn encode(self) -> u64 {
        match self {
            Word::Free => holders::FREE,
            Word::Tomb(p) => holders::tomb_word(token(p)),
            Word::Held(p) => holders::held_word(token(p)),
            Word::InFlight(p) => holders::in_flight_word(token(p)),
        }
    }

    /// The model's view of a slot word production wrote.
    ///
    /// # Panics
    /// On a word no protocol step of the model's processes writes.
    pub fn decode(word: u64) -> Word {
        match holders::Slot::decode(word) {
            holders::Slot::Free => Word::Free,
            holders::Slot::Tomb => Word::Tomb(
                holders::tomb_owner(word)
                    .and_then(pid_of)
                    .expect("a model process's tombstone"),
            ),
            holders::Slot::Held(t) => Word::Held(pid_of(t).expect("a model process")),
            holders::Slot::InFlight(t) => Word::InFlight(pid_of(t).expect("a model process")),
            holders::Slot::Garbage(w) => panic!("the protocol wrote garbage {w:#x}"),
        }
    }
}

/// The handle an attach (or an attach of a copy) works with.
fn handle_of(op: Op) -> Handle {
    match op {
        Op::Attach { h, .. } | Op::AttachCopy(h) => h,
        _ => unreachable!("no handle in {op:?}"),
    }
}

fn fin_seg(op: Op) -> u8 {
    match op {
        Op::Release(s) | Op::Sweep(Target::Segment(s)) => s,
        Op::Attach { h, .. } | Op::AttachCopy(h) | Op::Cancel(h) => h.seg,
        _ => unreachable!("finalize in {op:?}"),
    }
}

impl State {
    /// Where process `p` stands, in words.
    fn at(&self, p: Pid) -> String {
        match self.procs[usize::from(p)].pc {
            Pc::At(op, step) => format!("{op} at {step:?}"),
            Pc::Idle => "idle".into(),
        }
    }

    /// What transition `t` does from here, in words.
    pub fn describe(&self, t: Transition) -> String {
        let at = |p: Pid| self.at(p);
        match t {
            Transition::Start(p, op) => format!("p{p} starts {op}"),
            Transition::Step(p) => format!("p{p} {}", at(p)),
            Transition::GiveUp(p) => format!("p{p} {} (last round: gives up)", at(p)),
            Transition::Crash(p) => format!("p{p} is killed ({})", at(p)),
        }
    }
}

impl State {
    /// Whether `seg` is named or unlinked (a memfd: whether it exists).
    fn presence(&self, seg: &Segment) -> &'static str {
        match (self.anonymous, seg.named) {
            (false, true) => "named",
            (false, false) => "unlinked",
            (true, true) => "an existing memfd",
            (true, false) => "no memfd",
        }
    }

    /// One segment in words.
    fn seg_line(&self, seg: &Segment) -> String {
        let phase = match seg.phase {
            Phase::Absent => "absent",
            Phase::Unpublished => "half-created",
            Phase::Published => "published",
        };
        let slots: Vec<String> = seg.slots[..self.slots()]
            .iter()
            .map(Word::to_string)
            .collect();
        let presence = if self.anonymous {
            "memfd"
        } else {
            self.presence(seg)
        };
        let generation = if self.recycle || self.anonymous {
            format!(" gen={}", seg.generation)
        } else {
            String::new()
        };
        format!(
            "{phase} {presence}{generation} fin={} pend={} mark={} [{}]",
            seg.finalizer,
            u8::from(seg.pending),
            seg.mark,
            slots.join(" ")
        )
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (s, seg) in self.segments.iter().enumerate().take(self.segments()) {
            if seg.phase != Phase::Absent {
                write!(f, "s{s}: {} | ", self.seg_line(seg))?;
            }
        }
        for (p, proc) in self.procs.iter().enumerate().take(self.procs()) {
            if !proc.alive {
                write!(f, "p{p} dead; ")?;
                continue;
            }
            write!(f, "p{p}")?;
            for (s, slot) in proc.holds.iter().enumerate() {
                if let Some(slot) = slot {
                    write!(f, " holds s{s}[{slot}]")?;
                }
            }
            match proc.pc {
                Pc::Idle => write!(f, " idle; ")?,
                Pc::At(op, step) => write!(f, " in {op} at {step:?}; ")?,
            }
        }
        let handles: Vec<String> = self
            .handles
            .iter()
            .flatten()
            .map(Handle::to_string)
            .collect();
        write!(f, "handles [{}]", handles.join(", "))
    }
}
