//! The harness that runs one user operation on the real protocol (`ShmBuf`,
//! `ShareHandle`, `transport`, `sweep_with`, all on the simulated kernel) and on the
//! oracle of `shmrc-model`, then checks after every step that the two agree on what a
//! user can observe and that P1–P5 hold:
//! - the outcome (Ok, Gone, Full, Unlinked, InUse, Killed) is one the oracle allows (P4,
//!   and P1 for a premature `Unlinked` or `Gone`);
//! - the kernel's names are exactly the oracle's named segments plus the foreign names
//!   planted at the start, which must survive every sweep (P1, P2, P3);
//! - `objects_alive()` counts exactly those names and the file_descriptor segments the
//!   oracle says are alive (P1, P3), once each process's mapping cache has dropped the
//!   mappings of segments destroyed since its last look (what its next attach or
//!   release does);
//! - each live process's buffers read the data last written by any holder and keep the
//!   strategy they were created with (P1, the strategy rule);
//! - their `census` agrees with the oracle (live holders, in-flight references, no
//!   tombstone unless a crash left one, counts adding up to the capacity: P5), and the
//!   holder slots read from the kernel say exactly which live process holds what (P5);
//! - no name is reported unlinked twice (P2).
//!
//! [`Harness::finish`] kills every process and sweeps: nothing of ours may remain (P3).
//!
//! Shared by `tests/model_based.rs` (proptest) and `fuzz/fuzz_targets/refcount.rs`
//! (through this package), so it depends on neither: operations come in as plain
//! [`Op`] values. A process killed (by an op or inside one) has every value it owned
//! dropped at once (its buffers, received handles, socket ends), as the kernel would.
//! The process-wide strategy switch is shared by all simulated processes of this test
//! process, so the harness sets it to the creating process's own setting right before
//! each create, under a lock.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Mutex;

use shmrc::checkers::buf::{ShmBufExt, map_cache};
use shmrc::checkers::handle::ShareHandleExt;
use shmrc::checkers::holders::{self, Slot};
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimKernel, SimOs, SimStream};
use shmrc::checkers::segment::{FINALIZER_OFFSET, GENERATION_OFFSET, HEADER_BYTES};
use shmrc::checkers::sweep::{Action, sweep_with};
use shmrc::checkers::transport;
use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf};
use shmrc_model::oracle::{
    self, Count, DATA_LEN, Name, Op, Oracle, Outcome, PROCESSES, SegObservation, SlotObservation,
    Step, Strategy, Via, Violation,
};

/// The uid of every process of the run.
pub const UID: u32 = 1000;
/// The namespace the run creates and sweeps.
pub const NAMESPACE: &str = "shmrc-model";
/// Most operations a fuzz input is decoded into.
pub const MAX_OPS: usize = 64;

/// Serializes set-switch-then-create across the threads of this test process.
static STRATEGY_SWITCH: Mutex<()> = Mutex::new(());

/// A disagreement between the real protocol and the oracle, or a property broken, with
/// the operations that led to it.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong.
    pub violation: Violation,
    /// Every operation applied, the failing one last.
    pub ops: Vec<Op>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.violation)?;
        writeln!(f, "after these {} operations:", self.ops.len())?;
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "  #{i:<3} {op:?}")?;
        }
        Ok(())
    }
}

fn broken(property: &'static str, what: String) -> Violation {
    Violation { property, what }
}

fn real(strategy: Strategy) -> shmrc::Strategy {
    match strategy {
        Strategy::FileDescriptor => shmrc::Strategy::FileDescriptor,
        Strategy::FileSystem => shmrc::Strategy::FileSystem,
    }
}

/// The outcome of a call, or a P4 violation for an error no user should see here.
fn outcome<T>(step: &Step, r: shmrc::Result<T>) -> Result<(Option<T>, Outcome), Violation> {
    match r {
        Ok(v) => Ok((Some(v), Outcome::Ok)),
        Err(Error::Gone { .. }) => Ok((None, Outcome::Gone)),
        Err(Error::HoldersFull { .. }) => Ok((None, Outcome::Full)),
        Err(Error::Killed) => Ok((None, Outcome::Killed)),
        Err(Error::Stale { .. }) => Ok((None, Outcome::Stale)),
        Err(e) => Err(broken("P4", format!("{step:?} failed with {e:?}"))),
    }
}

/// How a handle travels.
enum Carried {
    /// The bytes of a file_system handle.
    Bytes(Vec<u8>),
    /// The receiver's end of a socket pair holding the message.
    Socket(SimStream),
}

struct RealHandle {
    id: u64,
    carried: Carried,
}

struct Process {
    os: SimOs,
    /// Same order as the oracle's `Proc::bufs`.
    bufs: Vec<ShmBuf<SimOs>>,
}

/// Decodes a fuzz input: the first byte gives each process's initial strategy setting
/// (bit `p` set: file_system), the rest is operations ([`Op::decode`]), at most
/// [`MAX_OPS`].
pub fn decode_input(data: &[u8]) -> (Vec<Strategy>, Vec<Op>) {
    let (settings, ops) = data.split_first().map_or((0, data), |(s, rest)| (*s, rest));
    let strategies = (0..PROCESSES)
        .map(|p| {
            if settings & (1 << p) != 0 {
                Strategy::FileSystem
            } else {
                Strategy::FileDescriptor
            }
        })
        .collect();
    (strategies, Op::decode_all(ops, MAX_OPS))
}

/// The input [`decode_input`] reads back as these settings and operations.
pub fn encode_input(strategies: &[Strategy], ops: &[Op]) -> Vec<u8> {
    let settings = strategies
        .iter()
        .enumerate()
        .filter(|(_, s)| **s == Strategy::FileSystem)
        .fold(0u8, |bits, (p, _)| bits | 1 << p);
    let mut bytes = vec![settings];
    for op in ops {
        op.encode(&mut bytes);
    }
    bytes
}

/// The real protocol on a simulated kernel beside the oracle. See the module docs.
pub struct Harness {
    kernel: SimKernel,
    ns: Namespace,
    procs: Vec<Option<Process>>,
    /// The name of each oracle segment (file_system), once known.
    names: Vec<Option<String>>,
    /// Same order as the oracle's handles.
    handles: Vec<RealHandle>,
    oracle: Oracle,
    /// Names outside the namespace (or of another user or namespace) that must survive.
    foreign: Vec<String>,
    /// How many times an operation reported unlinking each name.
    unlinks: BTreeMap<String, u32>,
    ops: Vec<Op>,
    /// Operations that resolved to something (not skipped).
    applied: usize,
    /// How often each kind of step ended with each outcome.
    tally: BTreeMap<String, u32>,
}

impl Harness {
    /// A kernel seeded with `seed`, [`PROCESSES`] processes, and three foreign names: a
    /// torch segment, a dead holder's segment of another shmrc namespace, and one of
    /// another user in this namespace's prefix.
    pub fn new(seed: u64) -> Harness {
        let kernel = SimKernel::new(seed);
        let procs = (0..PROCESSES)
            .map(|_| {
                Some(Process {
                    os: kernel.spawn(UID),
                    bufs: Vec::new(),
                })
            })
            .collect();
        let mut foreign = Vec::new();
        let torch = kernel.spawn(UID);
        let file = torch
            .shm_create("torch_4242_1_0")
            .expect("plant a torch segment");
        torch.allocate(&file, 4096).expect("size the torch segment");
        drop(file);
        foreign.push("torch_4242_1_0".to_owned());
        for (uid, prefix) in [(UID, "shmrc-modelx"), (UID + 1, NAMESPACE)] {
            let other = kernel.spawn(uid);
            let options = CreateOptions::new()
                .strategy(shmrc::Strategy::FileSystem)
                .namespace(Namespace::new(prefix).expect("a valid prefix"))
                .capacity(2);
            let buf = ShmBuf::create_with(&other, 8, &options).expect("plant a foreign segment");
            foreign.push(buf.name().expect("a named segment").to_owned());
            // Its holder dies: a sweep of *that* namespace would reclaim it, ours must not.
            kernel.kill(other.pid());
            drop(buf);
            // Dropping the dead planter's buffer changed nothing.
            let effects = kernel.effects_after_death();
            assert!(effects.is_empty(), "planting: {effects:?}");
        }
        Harness {
            ns: Namespace::new(NAMESPACE).expect("a valid prefix"),
            kernel,
            procs,
            names: Vec::new(),
            handles: Vec::new(),
            oracle: Oracle::new(),
            foreign,
            unlinks: BTreeMap::new(),
            ops: Vec::new(),
            applied: 0,
            tally: BTreeMap::new(),
        }
    }

    /// [`Harness::new`] with process `p` starting with strategy setting
    /// `strategies[p]` (the real switch is set from it before each create).
    pub fn with_strategies(seed: u64, strategies: &[Strategy]) -> Harness {
        let mut harness = Harness::new(seed);
        for (proc, strategy) in harness.oracle.procs.iter_mut().zip(strategies) {
            proc.strategy = *strategy;
        }
        harness
    }

    /// The oracle as it stands (exact after every step).
    pub fn oracle(&self) -> &Oracle {
        &self.oracle
    }

    /// Operations that ran (were not skipped for want of a live process or a target).
    pub fn applied(&self) -> usize {
        self.applied
    }

    /// How often each kind of step ended with each outcome (`"Attach Gone"` → 3).
    pub fn tally(&self) -> &BTreeMap<String, u32> {
        &self.tally
    }

    /// Runs `op` on both sides and checks everything; see the module docs.
    pub fn run(&mut self, op: &Op) -> Result<(), Failure> {
        self.ops.push(op.clone());
        let result = self.step(op).and_then(|()| self.check());
        result.map_err(|violation| Failure {
            violation,
            ops: self.ops.clone(),
        })
    }

    /// Runs every op, then [`Harness::finish`].
    pub fn run_all(mut self, ops: &[Op]) -> Result<(), Failure> {
        for op in ops {
            self.run(op)?;
        }
        self.finish()
    }

    /// P3: kills every process, sweeps, and requires that only the foreign names and
    /// objects are left.
    pub fn finish(mut self) -> Result<(), Failure> {
        for p in 0..PROCESSES {
            self.run(&Op::Kill { p: p as u8 })?;
        }
        self.run(&Op::Sweep { crash_at: None })?;
        let names = self.kernel.names();
        let alive = self.kernel.objects_alive();
        if names != self.foreign_sorted() || alive != self.foreign.len() {
            return Err(Failure {
                violation: broken(
                    "P3",
                    format!(
                        "everyone dead and swept, yet names {names:?} and {alive} objects remain"
                    ),
                ),
                ops: self.ops,
            });
        }
        Ok(())
    }

    fn foreign_sorted(&self) -> Vec<String> {
        let mut f = self.foreign.clone();
        f.sort();
        f
    }

    fn os(&self, p: usize) -> SimOs {
        self.procs[p]
            .as_ref()
            .expect("the oracle resolved a step to a live process")
            .os
            .clone()
    }

    fn bufs(&mut self, p: usize) -> &mut Vec<ShmBuf<SimOs>> {
        &mut self
            .procs
            .get_mut(p)
            .and_then(Option::as_mut)
            .expect("the oracle resolved a step to a live process")
            .bufs
    }

    /// SIGKILL: the process is dead, then the kernel drops what it owned.
    fn kill(&mut self, p: usize) {
        if let Some(proc) = self.procs[p].take() {
            self.kernel.kill(proc.os.pid());
            drop(proc);
        }
    }

    fn step(&mut self, op: &Op) -> Result<(), Violation> {
        let Some(step) = self.oracle.resolve(op) else {
            return Ok(());
        };
        self.applied += 1;
        let before: BTreeSet<String> = self.kernel.names().into_iter().collect();
        let mut delivered = None;
        let mut sweep_report = None;
        let observed = match step {
            Step::Create {
                p,
                capacity,
                strategy,
                crash_at,
            } => {
                let os = self.os(p);
                if let Some(n) = crash_at {
                    self.kernel.kill_at_step(os.pid(), u64::from(n));
                }
                let options = CreateOptions::new()
                    .namespace(self.ns.clone())
                    .capacity(capacity);
                let created = {
                    let _switch = STRATEGY_SWITCH.lock().unwrap_or_else(|e| e.into_inner());
                    shmrc::set_sharing_strategy(real(strategy));
                    ShmBuf::create_with(&os, DATA_LEN, &options)
                };
                let (buf, o) = outcome(&step, created)?;
                let seg = self.oracle.segs.len();
                let name = match &buf {
                    Some(buf) => {
                        buf.write_at(0, &oracle::initial_data(seg))
                            .map_err(|e| broken("P4", format!("initial write: {e:?}")))?;
                        buf.name().map(str::to_owned)
                    }
                    // A crashed create may have left a name: the one that appeared.
                    None => self
                        .kernel
                        .names()
                        .into_iter()
                        .find(|n| !before.contains(n)),
                };
                self.names.push(name);
                if let Some(buf) = buf {
                    self.bufs(p).push(buf);
                }
                if crash_at.is_some() {
                    self.kill(p);
                }
                o
            }
            Step::SetStrategy { .. } | Step::Respawn { .. } | Step::Kill { .. } => Outcome::Ok,
            Step::Share {
                p,
                buf,
                to,
                via,
                crash_at,
            } => {
                let os = self.os(p);
                if let Some(n) = crash_at {
                    self.kernel.kill_at_step(os.pid(), u64::from(n));
                }
                let shared = self.bufs(p)[buf].share();
                let (handle, o) = outcome(&step, shared)?;
                if crash_at.is_some() {
                    // Killed inside or right after share: the handle is never sent.
                    self.kill(p);
                    drop(handle);
                } else if let Some(handle) = handle {
                    delivered = Some(self.send(&step, &os, to, via, handle)?);
                }
                o
            }
            Step::Attach { handle, crash_at } | Step::DropHandle { handle, crash_at } => {
                let receiver = self.oracle.handles[handle].receiver;
                let real = self.handles.remove(handle);
                let os = self.os(receiver);
                if let Some(n) = crash_at {
                    self.kernel.kill_at_step(os.pid(), u64::from(n));
                }
                let received = self.receive(&step, &os, real)?;
                let o = if matches!(step, Step::Attach { .. }) {
                    let (buf, o) = outcome(&step, ShmBuf::attach(received))?;
                    if let Some(buf) = buf {
                        self.bufs(receiver).push(buf);
                    }
                    o
                } else {
                    // Dropping gives the reference back; errors are swallowed, a kill is
                    // seen on the process.
                    drop(received);
                    if self.kernel.is_killed(os.pid()) {
                        Outcome::Killed
                    } else {
                        Outcome::Ok
                    }
                };
                if crash_at.is_some() {
                    self.kill(receiver);
                }
                o
            }
            Step::Release { p, buf, crash_at } => {
                let os = self.os(p);
                if let Some(n) = crash_at {
                    self.kernel.kill_at_step(os.pid(), u64::from(n));
                }
                let released = self.bufs(p).remove(buf).release();
                let (finalized, o) = outcome(&step, released)?;
                if crash_at.is_some() {
                    self.kill(p);
                }
                match finalized.flatten() {
                    None => o,
                    Some(f) => match f.outcome {
                        holders::Outcome::InUse => Outcome::InUse,
                        holders::Outcome::Unlinked => {
                            let seg = self.oracle.procs[p].bufs[buf];
                            self.unlinked(seg)?;
                            Outcome::Unlinked
                        }
                        holders::Outcome::Deferred => Outcome::Deferred,
                        holders::Outcome::AlreadyGone => Outcome::AlreadyGone,
                    },
                }
            }
            Step::Recycle { p, buf, crash_at } => {
                let os = self.os(p);
                if let Some(n) = crash_at {
                    self.kernel.kill_at_step(os.pid(), u64::from(n));
                }
                let recycled = self.bufs(p)[buf].recycle();
                let (reused, o) = outcome(&step, recycled)?;
                if crash_at.is_some() {
                    self.kill(p);
                }
                match reused {
                    Some(true) => Outcome::Recycled,
                    Some(false) => Outcome::Held,
                    None => o,
                }
            }
            Step::Write {
                p,
                buf,
                offset,
                byte,
            } => {
                self.bufs(p)[buf]
                    .write_at(offset, &[byte])
                    .map_err(|e| broken("P4", format!("{step:?}: {e:?}")))?;
                Outcome::Ok
            }
            Step::Sweep { crash_at } => {
                let sweeper = self.kernel.spawn(UID);
                if let Some(n) = crash_at {
                    self.kernel.kill_at_step(sweeper.pid(), u64::from(n));
                }
                // A sweeper killed part-way is not told: every call it makes from then
                // on fails without effect, and the pass ends as it would for a live
                // sweeper whose segments all failed. Its report is nobody's.
                let swept = match sweep_with(&sweeper, &self.ns, false) {
                    Ok(_) if self.kernel.is_killed(sweeper.pid()) => Err(Error::Killed),
                    other => other,
                };
                let (report, o) = outcome(&step, swept)?;
                // The sweeper exits.
                self.kernel.kill(sweeper.pid());
                sweep_report = report;
                o
            }
        };
        let kind = format!("{step:?}");
        let kind = kind.split([' ', '{']).next().unwrap_or_default();
        let crash = if observed == Outcome::Killed {
            ""
        } else if kind != "Sweep" && format!("{step:?}").contains("crash_at: Some") {
            " (then killed)"
        } else {
            ""
        };
        *self
            .tally
            .entry(format!("{kind} {observed:?}{crash}"))
            .or_default() += 1;
        self.oracle.apply(&step, observed)?;
        match step {
            Step::Kill { p } => self.kill(p),
            Step::Respawn { p } => {
                self.procs[p] = Some(Process {
                    os: self.kernel.spawn(UID),
                    bufs: Vec::new(),
                });
            }
            _ => {}
        }
        if let Some(carried) = delivered {
            let id = self.oracle.handles.last().map_or(0, |h| h.id);
            self.handles.push(RealHandle { id, carried });
        }
        // Handles whose receiver died are lost with it.
        let live: BTreeSet<u64> = self.oracle.handles.iter().map(|h| h.id).collect();
        self.handles.retain(|h| live.contains(&h.id));
        // A killed process takes no further step: whatever it was doing, and dropping
        // what it owned, must have left the kernel as it was at its death.
        let effects = self.kernel.effects_after_death();
        if !effects.is_empty() {
            return Err(broken(
                "P5",
                format!(
                    "{step:?}: a dead process changed the kernel: {}",
                    effects.join("; ")
                ),
            ));
        }
        if let Some(report) = sweep_report {
            self.check_sweep(&report)?;
        }
        Ok(())
    }

    /// Sends `handle` from `os` to process `to`, as bytes or over a fresh socket pair
    /// (the sender closes its end at once).
    fn send(
        &mut self,
        step: &Step,
        os: &SimOs,
        to: usize,
        via: Via,
        handle: ShareHandle<SimOs>,
    ) -> Result<Carried, Violation> {
        let fail = |e: Error| broken("P4", format!("{step:?}: sending the handle: {e:?}"));
        match via {
            Via::Bytes => handle.into_bytes().map(Carried::Bytes).map_err(fail),
            Via::Socket => {
                let (tx, rx) = self.kernel.stream_pair(os, &self.os(to));
                transport::send_with(os, &tx, b"", vec![handle]).map_err(fail)?;
                Ok(Carried::Socket(rx))
            }
        }
    }

    /// The receiver's handle, out of bytes or off its socket.
    fn receive(
        &mut self,
        step: &Step,
        os: &SimOs,
        real: RealHandle,
    ) -> Result<ShareHandle<SimOs>, Violation> {
        let fail = |e: Error| broken("P4", format!("{step:?}: receiving the handle: {e:?}"));
        match real.carried {
            Carried::Bytes(bytes) => ShareHandle::from_bytes_with(os, &bytes).map_err(fail),
            Carried::Socket(rx) => {
                let mut message = transport::recv_with(os, &rx).map_err(fail)?;
                match (message.handles.pop(), message.handles.is_empty()) {
                    (Some(h), true) => Ok(h),
                    _ => Err(broken("P4", format!("{step:?}: not one handle arrived"))),
                }
            }
        }
    }

    /// P2: a name is reported unlinked at most once.
    fn unlinked(&mut self, seg: usize) -> Result<(), Violation> {
        let Some(name) = self.names.get(seg).cloned().flatten() else {
            return Ok(());
        };
        let n = self.unlinks.entry(name.clone()).or_default();
        *n += 1;
        if *n > 1 {
            return Err(broken("P2", format!("{name} was unlinked {n} times")));
        }
        Ok(())
    }

    /// A completed sweep did to each segment what the oracle now says: kept what is
    /// named, unlinked the rest (P1, P3), touched nothing else (P2), and saw nothing
    /// damaged (P4).
    fn check_sweep(
        &mut self,
        report: &shmrc::checkers::sweep::SweepReport,
    ) -> Result<(), Violation> {
        for seg in &report.segments {
            let Some(id) = self
                .names
                .iter()
                .position(|n| n.as_deref() == Some(seg.name.as_str()))
            else {
                return Err(broken(
                    "P2",
                    format!("the sweep reported {} which no operation created", seg.name),
                ));
            };
            let name = self.oracle.segs[id].name;
            match (&seg.action, name) {
                (Action::Kept, Name::Named) => {}
                (Action::Unlinked | Action::RemovedHalfCreated, Name::Unlinked) => {
                    self.unlinked(id)?;
                }
                (action, name) => {
                    return Err(broken(
                        if matches!(action, Action::Unlinked) {
                            "P1"
                        } else {
                            "P4"
                        },
                        format!(
                            "the sweep did {action:?} to segment {id}; the oracle says it is now {name:?}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The live process slot whose token is `token`, if any.
    fn slot_of(&self, token: shmrc::checkers::token::Token) -> Option<usize> {
        self.procs
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.os.token() == token))
    }

    /// What the kernel shows of each oracle segment: its name, and its holder slots.
    fn observation(&self, names: &BTreeSet<String>) -> Vec<SegObservation> {
        let mut seen = Vec::new();
        for (seg, s) in self.oracle.segs.iter().enumerate() {
            let Some(name) = self.names[seg].as_ref().filter(|n| names.contains(*n)) else {
                seen.push(SegObservation::default());
                continue;
            };
            let slots = self
                .kernel
                .peek(name, HEADER_BYTES, 8 * s.capacity)
                .map(|bytes| {
                    let mut obs = SlotObservation::default();
                    for word in bytes.chunks_exact(8) {
                        let word = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
                        match Slot::decode(word) {
                            Slot::Tomb => obs.tombs += 1,
                            Slot::Held(t) => {
                                if let Some(p) = self.slot_of(t) {
                                    *obs.held.entry(p).or_default() += 1;
                                }
                            }
                            Slot::InFlight(t) => {
                                if let Some(p) = self.slot_of(t) {
                                    *obs.in_flight.entry(p).or_default() += 1;
                                }
                            }
                            Slot::Free | Slot::Garbage(_) => {}
                        }
                    }
                    obs.committed = self
                        .kernel
                        .peek(name, FINALIZER_OFFSET, 8)
                        .is_some_and(|b| {
                            holders::is_committed(u64::from_ne_bytes(
                                b.try_into().unwrap_or([0; 8]),
                            ))
                        });
                    obs
                });
            let generation = self
                .kernel
                .peek(name, GENERATION_OFFSET, 8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])));
            seen.push(SegObservation {
                named: true,
                slots,
                generation: generation as u32,
            });
        }
        seen
    }

    /// Everything a user can observe after a step, against the oracle; see the module
    /// docs for which property each check stands for.
    fn check(&mut self) -> Result<(), Violation> {
        let names: BTreeSet<String> = self.kernel.names().into_iter().collect();
        let seen = self.observation(&names);
        self.oracle.observe(&seen)?;
        for f in &self.foreign {
            if !names.contains(f) {
                return Err(broken("P2", format!("foreign name {f} was unlinked")));
            }
        }
        let mut expected: BTreeSet<String> = self.foreign.iter().cloned().collect();
        for (seg, s) in self.oracle.segs.iter().enumerate() {
            if let (Name::Named, Some(name)) = (s.name, &self.names[seg]) {
                expected.insert(name.clone());
            }
        }
        if names != expected {
            let extra: Vec<_> = names.difference(&expected).collect();
            return Err(broken(
                "P3",
                format!("names nobody accounts for: {extra:?}"),
            ));
        }
        let fd_alive = (0..self.oracle.segs.len())
            .filter(|&s| {
                self.oracle.segs[s].strategy == Strategy::FileDescriptor && self.oracle.fd_alive(s)
            })
            .count();
        // A process's mapping cache (`src/buf/map_cache.rs`) may still map a segment
        // destroyed since it last looked there: that memory goes at its next attach or
        // release, which `trim` stands for (it drops those entries, and only those).
        for proc in self.procs.iter().flatten() {
            map_cache::trim(&proc.os);
        }
        let alive = self.kernel.objects_alive();
        if alive != names.len() + fd_alive {
            return Err(broken(
                if alive > names.len() + fd_alive {
                    "P3"
                } else {
                    "P1"
                },
                format!(
                    "{alive} objects alive; the oracle expects {} names and {fd_alive} file_descriptor segments",
                    names.len()
                ),
            ));
        }
        for (p, proc) in self.procs.iter().enumerate() {
            let Some(proc) = proc else { continue };
            for (i, buf) in proc.bufs.iter().enumerate() {
                let seg = self.oracle.procs[p].bufs[i];
                self.check_buf(p, seg, buf)?;
            }
        }
        Ok(())
    }

    /// P1 (data), the strategy rule, and P5 (census) for buffer `buf` of process `p`.
    fn check_buf(&self, p: usize, seg: usize, buf: &ShmBuf<SimOs>) -> Result<(), Violation> {
        let s = &self.oracle.segs[seg];
        let mut data = vec![0; DATA_LEN];
        buf.read_at(0, &mut data).map_err(|e| {
            broken(
                "P1",
                format!("process {p} cannot read segment {seg}: {e:?}"),
            )
        })?;
        if data != s.data {
            return Err(broken(
                "P1",
                format!(
                    "process {p} reads {data:?} in segment {seg}, the last writes made it {:?}",
                    s.data
                ),
            ));
        }
        if buf.strategy() != real(s.strategy) {
            return Err(broken(
                "P4",
                format!(
                    "segment {seg} is {:?}, it was created {:?}",
                    buf.strategy(),
                    s.strategy
                ),
            ));
        }
        let Some(c) = buf.census() else {
            return Ok(());
        };
        if s.strategy == Strategy::FileDescriptor {
            return Ok(());
        }
        let in_flight: u32 = s.in_flight.values().sum();
        let live = self.oracle.holders(seg).len() as u32;
        let tombs = match s.tombs {
            Count::Known(t) => t,
            Count::Unknown => c.tomb,
        };
        let sum = c.free + c.tomb + c.live + c.in_flight + c.dead;
        if c.live != live
            || c.in_flight != in_flight
            || c.tomb != tombs
            || sum != s.capacity as u32
            || c.finalizing
        {
            return Err(broken(
                "P5",
                format!(
                    "segment {seg} census {c:?} (capacity {}); the oracle expects {live} live holders, {in_flight} in flight, {tombs} tombstones, no finalizer",
                    s.capacity
                ),
            ));
        }
        Ok(())
    }
}
