//! Model-based tests of the manager's decisions (`shmrc::checkers::manager::registry`) on the
//! simulated kernel: random sequences of client operations (create, share, release in
//! two namespaces), client kills and respawns, and the manager's own life — two
//! managers at once, each with its own registry and its own clients, polled for the
//! deaths of their clients (the sim's liveness stands for the pidfds), killed, killed
//! part-way through a sweep, restarted, exiting after their grace period. The registry
//! and the library's sweeps run as the daemon runs them (`server.rs` is the same thin
//! shell over real sockets); after every step:
//! - **P1**: every live client's buffers still have their name, a holder slot of that
//!   client, and the data it wrote;
//! - **P3**: a dead client whose death its manager has handled (a poll of the manager
//!   that watched it completed), or that a completed sweep of everything came after
//!   (a manager's start, or its exit after the grace period), is in no holder slot of
//!   any segment; and every name of a namespace no killed sweep left half-done has a
//!   holder;
//! - a manager never decides its grace period is over while it watches a live client.
//!
//! At the end every client is killed, the managers handle the deaths, a restarted
//! manager sweeps, and no name of ours may remain.
//!
//! Built with `SHMRC_PLANT=manager_forgets_death` the registry
//! forgets to sweep after a death, and these tests fail (see `docs/VERIFICATION.md`).
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::collections::BTreeSet;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest::test_runner::Config;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::handle::ShareHandleExt;
use shmrc::checkers::holders::Slot;
use shmrc::checkers::manager::registry::{
    MAX_NAMESPACES, Registry, Scope, Sweep, Tick, Use, sweep_everything,
};
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::segment::HEADER_BYTES;
use shmrc::{CreateOptions, Namespace, Result as ShmResult, ShareHandle, ShmBuf, SweepReport};

const CLIENTS: usize = 3;
const MANAGERS: usize = 2;
const NAMESPACES: [&str; 2] = ["shmrc-registry-a", "shmrc-registry-b"];
const UID: u32 = 1000;
const CAPACITY: usize = 6;
const DATA_LEN: usize = 16;
const GRACE: Duration = Duration::from_millis(100);
/// Cases per run unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 1000;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

fn namespace(n: usize) -> Namespace {
    Namespace::new(NAMESPACES[n % NAMESPACES.len()]).expect("a valid prefix")
}

fn all_namespaces() -> BTreeSet<Namespace> {
    (0..NAMESPACES.len()).map(namespace).collect()
}

/// One step of the test. `crash_at: Some(n)` kills the acting manager at its `n`-th
/// crash point inside the step (part-way through its sweep).
#[derive(Clone, Debug)]
enum Op {
    /// Manager `m` starts (a new process, a new registry) and sweeps everything.
    StartManager { m: u8, crash_at: Option<u8> },
    /// Manager `m` is killed: its clients' connections hang up.
    KillManager { m: u8 },
    /// Client `c`, unwatched (never connected, or its manager died), says Hello to
    /// manager `m` with every namespace it used (as the client library's watcher does).
    Connect { c: u8, m: u8 },
    /// Client `c` tells its manager it creates in namespace `n`, then creates a segment
    /// there.
    Create { c: u8, n: u8 },
    /// Client `c` shares its buffer `buf` with client `to`, which tells its manager the
    /// segment it attaches (not the whole namespace: its death sweeps just that segment,
    /// and what it created), then attaches.
    Share { c: u8, buf: u8, to: u8 },
    /// Client `c` releases its buffer `buf`.
    Release { c: u8, buf: u8 },
    /// Client `c`, watched, says Hello again (another connection of the same process)
    /// naming more namespaces than a client may: refused, and it must stay watched for
    /// what it used before (issue 29, item 5).
    HelloTooMany { c: u8 },
    /// Client `c` is SIGKILLed.
    KillClient { c: u8 },
    /// A new process takes dead client `c`'s place.
    Respawn { c: u8 },
    /// Manager `m`'s poll: the pidfds of its dead clients are readable; it tells the
    /// registry and carries out the sweep it decides.
    Poll { m: u8, crash_at: Option<u8> },
    /// Manager `m`'s timer fires a grace period later; if the registry says the grace
    /// period is over, it sweeps everything and exits.
    Timer { m: u8, crash_at: Option<u8> },
}

struct Client {
    os: SimOs,
    /// Each buffer with its namespace and the marker its creator wrote.
    bufs: Vec<(ShmBuf<SimOs>, Namespace, u64)>,
    /// The namespaces it used (the client library's set, sent whole with each Hello).
    uses: BTreeSet<Namespace>,
    /// The manager (index, epoch) whose registry watches it.
    watcher: Option<(usize, u64)>,
}

/// A dead client, remembered until the end.
struct Dead {
    token: shmrc::Token,
    watcher: Option<(usize, u64)>,
    /// Whether its death must have been swept by now.
    due: bool,
    label: String,
}

struct Manager {
    os: SimOs,
    registry: Registry,
    epoch: u64,
    /// Time since it started, advanced by [`Op::Timer`].
    now: Duration,
}

/// The simulated machine: clients, managers, and what the test expects of them.
struct World {
    kernel: SimKernel,
    clients: Vec<Option<Client>>,
    dead: Vec<Dead>,
    managers: Vec<Option<Manager>>,
    epochs: u64,
    /// Namespaces a killed sweep may have left half-done, until a sweep completes.
    dirty: BTreeSet<Namespace>,
    ops: Vec<Op>,
}

type Checked = std::result::Result<(), String>;

impl World {
    /// Every client alive and unconnected, manager 0 running.
    fn new(seed: u64) -> World {
        let kernel = SimKernel::new(seed);
        let clients = (0..CLIENTS).map(|_| Some(Self::client(&kernel))).collect();
        let mut world = World {
            kernel,
            clients,
            dead: Vec::new(),
            managers: (0..MANAGERS).map(|_| None).collect(),
            epochs: 0,
            dirty: BTreeSet::new(),
            ops: Vec::new(),
        };
        world
            .run(&Op::StartManager {
                m: 0,
                crash_at: None,
            })
            .expect("the first manager starts");
        world
    }

    fn client(kernel: &SimKernel) -> Client {
        Client {
            os: kernel.spawn(UID),
            bufs: Vec::new(),
            uses: BTreeSet::new(),
            watcher: None,
        }
    }

    /// Runs `op` (skipped when it does not resolve here) and checks everything.
    fn run(&mut self, op: &Op) -> Checked {
        self.ops.push(op.clone());
        self.step(op)
            .and_then(|()| self.check())
            .map_err(|why| format!("{why}\n  after ops: {:?}", self.ops))
    }

    /// The running manager `m` of the current epoch `epoch`, if it runs.
    fn manager_of(&mut self, watcher: Option<(usize, u64)>) -> Option<&mut Manager> {
        let (m, epoch) = watcher?;
        self.managers[m].as_mut().filter(|mg| mg.epoch == epoch)
    }

    fn step(&mut self, op: &Op) -> Checked {
        match *op {
            Op::StartManager { m, crash_at } => {
                let m = usize::from(m) % MANAGERS;
                if self.managers[m].is_some() {
                    return Ok(());
                }
                self.epochs += 1;
                let os = self.kernel.spawn(UID);
                self.managers[m] = Some(Manager {
                    os: os.clone(),
                    registry: Registry::new(GRACE),
                    epoch: self.epochs,
                    now: Duration::ZERO,
                });
                self.sweep_everything(m, crash_at)
            }
            Op::KillManager { m } => {
                let m = usize::from(m) % MANAGERS;
                self.kill_manager(m);
                Ok(())
            }
            Op::Connect { c, m } => {
                let (c, m) = (usize::from(c) % CLIENTS, usize::from(m) % MANAGERS);
                let Some(client) = self.clients[c].as_ref() else {
                    return Ok(());
                };
                let (watcher, token, uses) =
                    (client.watcher, client.os.token(), client.uses.clone());
                if self.manager_of(watcher).is_some() {
                    return Ok(()); // still connected
                }
                let Some(manager) = self.managers[m].as_mut() else {
                    return Ok(());
                };
                manager
                    .registry
                    .hello(token, uses)
                    .map_err(|why| format!("Hello refused: {why}"))?;
                let epoch = manager.epoch;
                if let Some(client) = self.clients[c].as_mut() {
                    client.watcher = Some((m, epoch));
                }
                Ok(())
            }
            Op::Create { c, n } => {
                let c = usize::from(c) % CLIENTS;
                if self.clients[c].is_none() {
                    return Ok(());
                }
                let ns = namespace(usize::from(n));
                self.tell_uses(c, Use::Created(ns.clone()))?;
                let Some(client) = self.clients[c].as_mut() else {
                    return Ok(());
                };
                let options = CreateOptions::new()
                    .strategy(shmrc::Strategy::FileSystem)
                    .namespace(ns.clone())
                    .capacity(CAPACITY);
                let buf = ShmBuf::create_with(&client.os, DATA_LEN, &options)
                    .map_err(|e| format!("create failed: {e}"))?;
                let marker = client.os.random_u128().map_err(|e| e.to_string())? as u64;
                buf.write_at(0, &marker.to_ne_bytes())
                    .map_err(|e| format!("write failed: {e}"))?;
                client.bufs.push((buf, ns, marker));
                Ok(())
            }
            Op::Share { c, buf, to } => {
                let (c, to) = (usize::from(c) % CLIENTS, usize::from(to) % CLIENTS);
                if c == to || self.clients[to].is_none() {
                    return Ok(());
                }
                let Some(from) = self.clients[c].as_ref().filter(|cl| !cl.bufs.is_empty()) else {
                    return Ok(());
                };
                let (source, ns, marker) = &from.bufs[usize::from(buf) % from.bufs.len()];
                let (ns, marker) = (ns.clone(), *marker);
                let handle = match source.share() {
                    Ok(handle) => handle,
                    Err(shmrc::Error::HoldersFull { .. }) => return Ok(()),
                    Err(e) => return Err(format!("share failed: {e}")),
                };
                let name = source.name().expect("a file_system buffer").to_owned();
                let bytes = handle
                    .into_bytes()
                    .map_err(|e| format!("into_bytes failed: {e}"))?;
                self.tell_uses(to, Use::Segment(ns.clone(), name))?;
                let Some(receiver) = self.clients[to].as_mut() else {
                    return Ok(());
                };
                let handle = ShareHandle::from_bytes_with(&receiver.os, &bytes)
                    .map_err(|e| format!("from_bytes failed: {e}"))?;
                let attached = ShmBuf::attach(handle).map_err(|e| format!("attach failed: {e}"))?;
                receiver.bufs.push((attached, ns, marker));
                Ok(())
            }
            Op::Release { c, buf } => {
                let c = usize::from(c) % CLIENTS;
                let Some(client) = self.clients[c].as_mut().filter(|cl| !cl.bufs.is_empty()) else {
                    return Ok(());
                };
                let i = usize::from(buf) % client.bufs.len();
                let (buf, _, _) = client.bufs.remove(i);
                buf.release()
                    .map(|_| ())
                    .map_err(|e| format!("release failed: {e}"))
            }
            Op::HelloTooMany { c } => {
                let c = usize::from(c) % CLIENTS;
                let Some(client) = self.clients[c].as_ref() else {
                    return Ok(());
                };
                let (watcher, token) = (client.watcher, client.os.token());
                let Some(manager) = self.manager_of(watcher) else {
                    return Ok(());
                };
                let too_many = (0..=MAX_NAMESPACES)
                    .map(|i| Namespace::new(format!("shmrc-registry-many-{i}")).unwrap());
                match manager.registry.hello(token, too_many) {
                    Err(_) => Ok(()),
                    Ok(()) => Err(format!(
                        "a Hello naming {} namespaces was accepted",
                        MAX_NAMESPACES + 1
                    )),
                }
            }
            Op::KillClient { c } => {
                let c = usize::from(c) % CLIENTS;
                let Some(client) = self.clients[c].take() else {
                    return Ok(());
                };
                self.kernel.kill(client.os.pid());
                let label = format!("client {c} (pid {})", client.os.pid());
                self.dead.push(Dead {
                    token: client.os.token(),
                    watcher: client.watcher,
                    due: false,
                    label,
                });
                // The kernel reaps it: what it held is dropped, changing nothing.
                drop(client);
                Ok(())
            }
            Op::Respawn { c } => {
                let c = usize::from(c) % CLIENTS;
                if self.clients[c].is_none() {
                    self.clients[c] = Some(Self::client(&self.kernel));
                }
                Ok(())
            }
            Op::Poll { m, crash_at } => {
                let m = usize::from(m) % MANAGERS;
                let Some(manager) = self.managers[m].as_mut() else {
                    return Ok(());
                };
                let dead: Vec<shmrc::Token> = manager
                    .registry
                    .clients()
                    .map(|(token, _)| token)
                    .filter(|&token| !manager.os.is_alive(token))
                    .collect();
                let sweep = manager.registry.died(&dead);
                let epoch = manager.epoch;
                if let Some(sweep) = sweep {
                    self.carry_out(m, &sweep, crash_at)?;
                }
                if self.managers[m].is_some() {
                    // Its poll completed: every death of a client it watched is handled.
                    for d in &mut self.dead {
                        if d.watcher == Some((m, epoch)) {
                            d.due = true;
                        }
                    }
                }
                Ok(())
            }
            Op::Timer { m, crash_at } => {
                let m = usize::from(m) % MANAGERS;
                let Some(manager) = self.managers[m].as_mut() else {
                    return Ok(());
                };
                manager.now += GRACE;
                let (tick, epoch) = (manager.registry.tick(manager.now), manager.epoch);
                if tick != Tick::GraceOver {
                    return Ok(());
                }
                let watched: Vec<usize> = (0..CLIENTS)
                    .filter(|&c| {
                        self.clients[c]
                            .as_ref()
                            .is_some_and(|cl| cl.watcher == Some((m, epoch)))
                    })
                    .collect();
                if !watched.is_empty() {
                    return Err(format!(
                        "manager {m} ended its grace period while watching live clients {watched:?}"
                    ));
                }
                self.sweep_everything(m, crash_at)?;
                // Nobody is connecting: it exits.
                self.kill_manager(m);
                Ok(())
            }
        }
    }

    /// Client `c` is about to hold `what`: its namespace is remembered (a later Hello
    /// names it, to be swept whole), and `what` is told to its manager if it has one
    /// (as the client library tells it, before taking a slot).
    fn tell_uses(&mut self, c: usize, what: Use) -> Checked {
        let Some(client) = self.clients[c].as_mut() else {
            return Ok(());
        };
        client.uses.insert(what.namespace().clone());
        let (watcher, token) = (client.watcher, client.os.token());
        if let Some(manager) = self.manager_of(watcher) {
            manager
                .registry
                .uses(token, what)
                .map_err(|why| format!("use refused: {why}"))?;
        }
        Ok(())
    }

    fn kill_manager(&mut self, m: usize) {
        if let Some(manager) = self.managers[m].take() {
            self.kernel.kill(manager.os.pid());
        }
    }

    /// Manager `m` carries out `sweep`, killed at its `crash_at`-th crash point.
    fn carry_out(&mut self, m: usize, sweep: &Sweep, crash_at: Option<u8>) -> Checked {
        let Some(manager) = self.managers[m].as_mut() else {
            return Ok(());
        };
        if let Some(n) = crash_at {
            self.kernel.kill_at_step(manager.os.pid(), u64::from(n));
        }
        let results = sweep.carry_out(&manager.os);
        let was_dirty = self.dirty.clone();
        self.after_sweep(m, results)?;
        // A sweep of the dead's own segments leaves the rest of a half-done namespace
        // as it was: only a whole sweep cleans it.
        for (ns, scope) in &sweep.namespaces {
            if *scope != Scope::Whole && was_dirty.contains(ns) {
                self.dirty.insert(ns.clone());
            }
        }
        Ok(())
    }

    /// Manager `m` sweeps everything (its start, or its grace period over).
    fn sweep_everything(&mut self, m: usize, crash_at: Option<u8>) -> Checked {
        let Some(manager) = self.managers[m].as_mut() else {
            return Ok(());
        };
        if let Some(n) = crash_at {
            self.kernel.kill_at_step(manager.os.pid(), u64::from(n));
        }
        let results = match sweep_everything(&manager.os) {
            Ok(results) => results,
            Err(_) if self.kernel.is_killed(manager.os.pid()) => Vec::new(),
            Err(e) => return Err(format!("listing for the sweep failed: {e}")),
        };
        let everything = all_namespaces();
        let killed = self.kernel.is_killed(manager.os.pid());
        self.after_sweep(m, results)?;
        if !killed {
            // Everything was swept after every death so far.
            for d in &mut self.dead {
                d.due = true;
            }
            self.dirty.retain(|ns| !everything.contains(ns));
        }
        Ok(())
    }

    /// Counts each result in manager `m`'s registry; a manager killed part-way dies
    /// and leaves what it swept dirty, one that was not must have swept without error.
    fn after_sweep(
        &mut self,
        m: usize,
        results: Vec<(Namespace, ShmResult<SweepReport>)>,
    ) -> Checked {
        let Some(manager) = self.managers[m].as_mut() else {
            return Ok(());
        };
        for (_, report) in &results {
            manager.registry.swept(report);
        }
        if self.kernel.is_killed(manager.os.pid()) {
            self.dirty.extend(all_namespaces());
            self.kill_manager(m);
            return Ok(());
        }
        for (ns, report) in results {
            if let Err(e) = report {
                return Err(format!("manager {m}'s sweep of {ns} failed: {e}"));
            }
            self.dirty.remove(&ns);
        }
        Ok(())
    }

    /// Every name of our namespaces with its holder slots (`None`: unreadable).
    fn segments(&self) -> Vec<(String, Namespace, Option<Vec<Slot>>)> {
        let mut out = Vec::new();
        for name in self.kernel.names() {
            let Some(ns) = all_namespaces()
                .into_iter()
                .find(|ns| name.starts_with(&ns.name_start(UID)))
            else {
                continue;
            };
            let slots = self
                .kernel
                .peek(&name, HEADER_BYTES, 8 * CAPACITY)
                .map(|bytes| {
                    bytes
                        .chunks_exact(8)
                        .map(|w| Slot::decode(u64::from_ne_bytes(w.try_into().unwrap_or([0; 8]))))
                        .collect()
                });
            out.push((name, ns, slots));
        }
        out
    }

    /// P1 and P3 as the module docs say.
    fn check(&self) -> Checked {
        let effects = self.kernel.effects_after_death();
        if !effects.is_empty() {
            return Err(format!("a dead process changed the kernel: {effects:?}"));
        }
        let segments = self.segments();
        let holds = |name: &str, token: shmrc::Token| {
            segments.iter().any(|(n, _, slots)| {
                n == name
                    && slots
                        .as_ref()
                        .is_some_and(|s| s.iter().any(|slot| slot.owner() == Some(token)))
            })
        };
        for (c, client) in self.clients.iter().enumerate() {
            let Some(client) = client else { continue };
            for (buf, _, marker) in &client.bufs {
                let name = buf.name().unwrap_or_default();
                if !holds(name, client.os.token()) {
                    return Err(format!(
                        "P1: live client {c}'s segment {name} lost its name or the client's slot"
                    ));
                }
                let mut data = [0u8; 8];
                buf.read_at(0, &mut data)
                    .map_err(|e| format!("P1: client {c} cannot read {name}: {e}"))?;
                if u64::from_ne_bytes(data) != *marker {
                    return Err(format!("P1: client {c}'s data in {name} changed"));
                }
            }
        }
        let due: Vec<&Dead> = self.dead.iter().filter(|d| d.due).collect();
        for (name, ns, slots) in &segments {
            let Some(slots) = slots else {
                return Err(format!("cannot read the slots of {name}"));
            };
            for d in &due {
                if slots.iter().any(|slot| slot.owner() == Some(d.token)) {
                    return Err(format!(
                        "P3: {} died and its death was handled, but it still holds {name}",
                        d.label
                    ));
                }
            }
            if !self.dirty.contains(ns) && slots.iter().all(|slot| slot.owner().is_none()) {
                return Err(format!("P3: {name} has no holder and was not unlinked"));
            }
        }
        Ok(())
    }

    /// P3 at the end: every client killed, the managers handle the deaths, a
    /// restarted manager sweeps; nothing of ours remains.
    fn finish(mut self) -> Checked {
        for c in 0..CLIENTS {
            self.run(&Op::KillClient { c: c as u8 })?;
        }
        for m in 0..MANAGERS {
            self.run(&Op::Poll {
                m: m as u8,
                crash_at: None,
            })?;
        }
        self.run(&Op::KillManager { m: 0 })?;
        self.run(&Op::StartManager {
            m: 0,
            crash_at: None,
        })?;
        let left = self.segments();
        if left.is_empty() {
            Ok(())
        } else {
            let names: Vec<&String> = left.iter().map(|(n, _, _)| n).collect();
            Err(format!(
                "P3: left after every death was swept: {names:?}\n  after ops: {:?}",
                self.ops
            ))
        }
    }
}

/// What proptest generates from: who lives and who holds what, assuming a manager
/// told to crash part-way does crash (the world itself is exact and skips what does
/// not resolve).
#[derive(Clone, Debug)]
struct Shape {
    clients: Vec<Option<usize>>,
    managers: Vec<bool>,
}

struct Reference;

fn crash() -> impl Strategy<Value = Option<u8>> {
    prop_oneof![6 => Just(None), 2 => (0u8..16).prop_map(Some), 1 => (0u8..64).prop_map(Some)]
}

impl ReferenceStateMachine for Reference {
    type State = Shape;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Shape> {
        let mut managers = vec![false; MANAGERS];
        managers[0] = true;
        Just(Shape {
            clients: vec![Some(0); CLIENTS],
            managers,
        })
        .boxed()
    }

    fn transitions(state: &Shape) -> BoxedStrategy<Op> {
        let live: Vec<u8> = (0..CLIENTS)
            .filter(|&c| state.clients[c].is_some())
            .map(|c| c as u8)
            .collect();
        let dead: Vec<u8> = (0..CLIENTS)
            .filter(|&c| state.clients[c].is_none())
            .map(|c| c as u8)
            .collect();
        let running: Vec<u8> = (0..MANAGERS)
            .filter(|&m| state.managers[m])
            .map(|m| m as u8)
            .collect();
        let stopped: Vec<u8> = (0..MANAGERS)
            .filter(|&m| !state.managers[m])
            .map(|m| m as u8)
            .collect();
        let holders: Vec<u8> = (0..CLIENTS)
            .filter(|&c| state.clients[c].is_some_and(|n| n > 0))
            .map(|c| c as u8)
            .collect();
        let mut arms: Vec<(u32, BoxedStrategy<Op>)> = Vec::new();
        if !stopped.is_empty() {
            arms.push((
                2,
                (select(stopped), crash())
                    .prop_map(|(m, crash_at)| Op::StartManager { m, crash_at })
                    .boxed(),
            ));
        }
        if !running.is_empty() {
            let m = || select(running.clone());
            arms.push((1, m().prop_map(|m| Op::KillManager { m }).boxed()));
            arms.push((
                5,
                (m(), crash())
                    .prop_map(|(m, crash_at)| Op::Poll { m, crash_at })
                    .boxed(),
            ));
            arms.push((
                1,
                (m(), crash())
                    .prop_map(|(m, crash_at)| Op::Timer { m, crash_at })
                    .boxed(),
            ));
            if !live.is_empty() {
                arms.push((
                    4,
                    (select(live.clone()), m())
                        .prop_map(|(c, m)| Op::Connect { c, m })
                        .boxed(),
                ));
            }
        }
        if !live.is_empty() {
            let c = || select(live.clone());
            arms.push((
                5,
                (c(), 0..NAMESPACES.len() as u8)
                    .prop_map(|(c, n)| Op::Create { c, n })
                    .boxed(),
            ));
            arms.push((3, c().prop_map(|c| Op::KillClient { c }).boxed()));
            arms.push((1, c().prop_map(|c| Op::HelloTooMany { c }).boxed()));
        }
        if !holders.is_empty() {
            let h = || select(holders.clone());
            arms.push((
                4,
                (h(), any::<u8>(), select(live.clone()))
                    .prop_map(|(c, buf, to)| Op::Share { c, buf, to })
                    .boxed(),
            ));
            arms.push((
                2,
                (h(), any::<u8>())
                    .prop_map(|(c, buf)| Op::Release { c, buf })
                    .boxed(),
            ));
        }
        if !dead.is_empty() {
            arms.push((3, select(dead).prop_map(|c| Op::Respawn { c }).boxed()));
        }
        Union::new_weighted(arms).boxed()
    }

    fn apply(mut state: Shape, op: &Op) -> Shape {
        match *op {
            Op::StartManager { m, crash_at } => state.managers[m as usize] = crash_at.is_none(),
            Op::KillManager { m } => state.managers[m as usize] = false,
            Op::Poll { m, crash_at } | Op::Timer { m, crash_at } => {
                if crash_at.is_some() {
                    state.managers[m as usize] = false;
                }
            }
            Op::Create { c, .. } => {
                if let Some(n) = &mut state.clients[c as usize] {
                    *n += 1;
                }
            }
            Op::Share { c, to, .. } if c != to => {
                if let Some(n) = &mut state.clients[to as usize] {
                    *n += 1;
                }
            }
            Op::Release { c, .. } => {
                if let Some(n) = &mut state.clients[c as usize] {
                    *n = n.saturating_sub(1);
                }
            }
            Op::KillClient { c } => state.clients[c as usize] = None,
            Op::Respawn { c } => state.clients[c as usize] = Some(0),
            Op::Connect { .. } | Op::Share { .. } | Op::HelloTooMany { .. } => {}
        }
        state
    }
}

struct RealRegistry;

impl StateMachineTest for RealRegistry {
    type SystemUnderTest = World;
    type Reference = Reference;

    fn init_test(_reference: &Shape) -> World {
        World::new(0)
    }

    fn apply(mut world: World, _reference: &Shape, op: Op) -> World {
        if let Err(why) = world.run(&op) {
            panic!("VIOLATION {why}");
        }
        world
    }

    fn teardown(world: World, _reference: Shape) {
        if let Err(why) = world.finish() {
            panic!("VIOLATION {why}");
        }
    }
}

prop_state_machine! {
    #![proptest_config(Config {
        cases: cases(),
        failure_persistence: None,
        .. Config::default()
    })]

    /// Random client operations, client deaths, two managers, managers killed (also
    /// part-way through a sweep) and restarted, grace periods: P1 and P3 hold after
    /// every step, and nothing is left after the last deaths are swept.
    #[test]
    fn the_registry_sweeps_every_death_and_nothing_live_under_random_ops(sequential 1..48 => RealRegistry);
}

/// Runs `ops` from a fresh world, then finishes it.
fn scenario(ops: &[Op]) -> Checked {
    let mut world = World::new(7);
    for op in ops {
        world.run(op)?;
    }
    world.finish()
}

fn create(c: u8, n: u8) -> Op {
    Op::Create { c, n }
}

fn poll(m: u8) -> Op {
    Op::Poll { m, crash_at: None }
}

fn share(c: u8, buf: u8, to: u8) -> Op {
    Op::Share { c, buf, to }
}

fn start(m: u8) -> Op {
    Op::StartManager { m, crash_at: None }
}

#[test]
fn a_dead_clients_segments_are_reclaimed_when_its_manager_polls() {
    let ops = [
        Op::Connect { c: 0, m: 0 },
        Op::Connect { c: 1, m: 0 },
        create(0, 0),
        create(0, 1),
        share(0, 0, 1),
        Op::KillClient { c: 0 },
        poll(0),
    ];
    scenario(&ops).unwrap();
}

#[test]
fn two_managers_each_sweep_for_their_own_clients() {
    let ops = [
        start(1),
        Op::Connect { c: 0, m: 0 },
        Op::Connect { c: 1, m: 1 },
        create(0, 0),
        create(1, 0),
        share(0, 0, 1),
        Op::KillClient { c: 0 },
        Op::KillClient { c: 1 },
        poll(1),
        poll(0),
    ];
    scenario(&ops).unwrap();
}

#[test]
fn a_manager_killed_mid_sweep_is_made_good_by_its_restart() {
    let (mut killed, mut completed) = (0, 0);
    for crash_at in 0..64 {
        let mut world = World::new(7);
        let ops = [
            Op::Connect { c: 0, m: 0 },
            Op::Connect { c: 1, m: 0 },
            create(0, 0),
            create(0, 1),
            share(0, 1, 1),
            create(1, 0),
            Op::KillClient { c: 0 },
            Op::Poll {
                m: 0,
                crash_at: Some(crash_at),
            },
        ];
        for op in &ops {
            world
                .run(op)
                .unwrap_or_else(|why| panic!("VIOLATION crash_at {crash_at}: {why}"));
        }
        if world.managers[0].is_none() {
            killed += 1;
        } else {
            completed += 1;
        }
        let restart = start(0);
        world
            .run(&restart)
            .and_then(|()| world.finish())
            .unwrap_or_else(|why| panic!("VIOLATION crash_at {crash_at}: {why}"));
    }
    // Killed at every crash point of the sweep, and past its end.
    assert!(
        killed >= 10 && completed > 0,
        "{killed} killed, {completed} completed"
    );
}

#[test]
fn a_refused_second_hello_keeps_the_client_watched() {
    let ops = [
        Op::Connect { c: 0, m: 0 },
        create(0, 0),
        Op::HelloTooMany { c: 0 },
        Op::KillClient { c: 0 },
        poll(0),
    ];
    scenario(&ops).unwrap();
}

#[test]
fn a_reconnected_client_is_swept_by_the_new_manager() {
    let ops = [
        Op::Connect { c: 0, m: 0 },
        create(0, 1),
        Op::KillManager { m: 0 },
        start(1),
        Op::Connect { c: 0, m: 1 },
        Op::KillClient { c: 0 },
        poll(1),
    ];
    scenario(&ops).unwrap();
}

#[test]
fn a_manager_with_no_client_exits_after_its_grace_period_having_swept() {
    let timer = Op::Timer {
        m: 0,
        crash_at: None,
    };
    let ops = [
        create(0, 0), // unwatched: only a sweep of everything reclaims it
        Op::KillClient { c: 0 },
        timer.clone(),
        timer,
    ];
    let mut world = World::new(3);
    for op in &ops {
        world.run(op).unwrap();
    }
    assert!(world.managers[0].is_none(), "the manager exited");
    assert!(world.segments().is_empty());
}

/// The clients, and the crash points of a manager's sweep, the exhaustive test uses.
const EXHAUSTIVE_CLIENTS: u8 = 2;
const EXHAUSTIVE_CRASHES: [Option<u8>; 3] = [None, Some(0), Some(2)];

/// Every operation enabled in `shape` over the exhaustive test's alphabet: two clients,
/// the first namespace, a client's first buffer, both managers, and a manager's sweep
/// killed at its first or third crash point or not at all.
fn enabled(shape: &Shape) -> Vec<Op> {
    let mut ops = Vec::new();
    let live = |c: u8| shape.clients[usize::from(c)].is_some();
    for m in 0..MANAGERS as u8 {
        if shape.managers[usize::from(m)] {
            ops.push(Op::KillManager { m });
            for crash_at in EXHAUSTIVE_CRASHES {
                ops.push(Op::Poll { m, crash_at });
            }
            ops.push(Op::Timer { m, crash_at: None });
            for c in (0..EXHAUSTIVE_CLIENTS).filter(|&c| live(c)) {
                ops.push(Op::Connect { c, m });
            }
        } else {
            for crash_at in EXHAUSTIVE_CRASHES {
                ops.push(Op::StartManager { m, crash_at });
            }
        }
    }
    for c in 0..EXHAUSTIVE_CLIENTS {
        match shape.clients[usize::from(c)] {
            None => ops.push(Op::Respawn { c }),
            Some(held) => {
                ops.push(Op::Create { c, n: 0 });
                ops.push(Op::KillClient { c });
                if held > 0 {
                    ops.push(Op::Release { c, buf: 0 });
                    for to in (0..EXHAUSTIVE_CLIENTS).filter(|&to| to != c && live(to)) {
                        ops.push(Op::Share { c, buf: 0, to });
                    }
                }
            }
        }
    }
    ops
}

/// Bounded exhaustive check of the registry: every sequence of up to
/// `SHMRC_REGISTRY_DEPTH` operations (default 4; `.ci/verify` runs 5) over the alphabet of
/// [`enabled`], each run from a fresh world with P1 and P3 checked after every step and
/// then finished (every client killed, the managers poll, a restart sweeps: nothing may
/// be left).
#[test]
fn every_sequence_of_registry_operations_up_to_the_bound_keeps_p1_and_p3() {
    let depth: usize = std::env::var("SHMRC_REGISTRY_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(4);
    let mut managers = vec![false; MANAGERS];
    managers[0] = true;
    let initial = Shape {
        clients: vec![Some(0); CLIENTS],
        managers,
    };
    let mut stack = vec![(initial, Vec::new())];
    let mut sequences = 0u64;
    while let Some((shape, prefix)) = stack.pop() {
        if prefix.len() == depth {
            continue;
        }
        for op in enabled(&shape) {
            let mut ops: Vec<Op> = prefix.clone();
            ops.push(op);
            if let Err(why) = scenario(&ops) {
                panic!("VIOLATION {why}\n  sequence: {ops:?}");
            }
            sequences += 1;
            stack.push((Reference::apply(shape.clone(), &ops[ops.len() - 1]), ops));
        }
    }
    eprintln!(
        "registry: every sequence of up to {depth} operations: {sequences} sequences, each finished"
    );
}
