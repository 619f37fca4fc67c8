//! The library's side of the manager: the one connection per process over which this
//! process says Hello (and Watch for each further namespace), starting a manager when
//! none runs ([`super::launch`]); the frames go through [`super::connection`].
//!
//! The connection is checked cheaply (a zero-timeout `poll` for hang-up) at each
//! file_system create/attach, and a watcher thread (one per process, started with the
//! first connection) sleeps in `poll` on it: a manager that died is replaced by a new
//! one at once, so a process stays watched even if it never creates or attaches again.
//! A forked child does not reuse its parent's connection: it is another process and
//! says its own Hello (and gets its own watcher thread), on connection state of its own,
//! so that a lock some thread of the parent held at the fork cannot block it.
//!
//! No lock is held across a round trip (a Hello, a manager start, a Watch): the thread
//! that needs one marks it in progress and makes it unlocked; a thread whose create or
//! attach needs nothing the manager has not been told goes ahead meanwhile, and one that
//! needs the same answer waits for it and shares its outcome (a manager that does not
//! answer costs every waiting thread one wait, together, not one each:
//! [`Error::ManagerTimeout`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::connection::{connect, exchange, receive, send};
use super::launch::{ATTEMPTS, connect_or_start};
use super::mode::{ManagerMode, lock, mode};
use super::registry::MAX_SEGMENTS_PER_NAMESPACE;
use super::runtime::RuntimeDir;
use super::sys;
use super::wire::{self, Reply, Request};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::os::Os;
use crate::os::posix::PosixOs;

/// The connection state of the process that last asked for it, by pid. The outer lock
/// is held only to look the state up, never across I/O; the state's own lock is held
/// for a write at most, never for a round trip (see the module's docs). A forked child
/// gets a fresh state: its copy of the parent's may be locked by a thread that does not
/// exist in the child.
static CONNECTIONS: Mutex<Option<(u32, &'static State)>> = Mutex::new(None);

/// One process's connection state, and the condition its threads wait on while one of
/// them makes a round trip.
#[derive(Default)]
struct State {
    conn: Mutex<Option<Connection>>,
    /// Notified when a round trip ends.
    turn: Condvar,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Option<Connection>> {
        lock(&self.conn)
    }

    /// Waits (bounded) for the round trip in progress to end.
    fn wait<'a>(
        &self,
        guard: MutexGuard<'a, Option<Connection>>,
    ) -> MutexGuard<'a, Option<Connection>> {
        // Bounded: a round trip ends within its own timeouts; this only guards against
        // a notification missed by a bug, re-checking the state at least this often.
        match self.turn.wait_timeout(guard, Duration::from_secs(1)) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }
}

/// This process's connection state (see [`CONNECTIONS`]).
fn connection() -> &'static State {
    connection_for(this_pid())
}

/// This process's pid, without a system call once known (the backend keeps it in a page
/// a forked child does not inherit: `src/os/posix/fork_guard.rs`).
fn this_pid() -> u32 {
    PosixOs.current().pid()
}

fn connection_for(pid: u32) -> &'static State {
    let mut current = lock(&CONNECTIONS);
    match *current {
        Some((owner, state)) if owner == pid => state,
        _ => {
            // The parent's state stays behind, leaked: one small allocation per fork
            // that uses the manager.
            let state: &'static State = Box::leak(Box::default());
            *current = Some((pid, state));
            state
        }
    }
}

/// The connection of this process to its manager, and what it told it.
struct Connection {
    /// The process that made it (a forked child must make its own).
    pid: u32,
    /// `None` after the manager went away, until the next create/attach reconnects.
    stream: Option<UnixStream>,
    /// Every namespace this process used: a Hello to a new manager names them all, to
    /// be swept whole at this process's death (it was told nothing of them).
    used: BTreeSet<Namespace>,
    /// Namespaces the current manager sweeps whole at our death: nothing in them needs
    /// telling.
    whole: BTreeSet<Namespace>,
    /// Namespaces where the current manager was told we create.
    created: BTreeSet<Namespace>,
    /// Segments (by name) the current manager was told we attach, by namespace.
    attached: HashMap<Namespace, HashSet<String>>,
    /// Bumped each time `stream` is replaced (the watcher thread compares it).
    generation: u64,
    /// Whether this process's watcher thread runs.
    watcher: bool,
    /// Whether a thread of this process is making a round trip with the manager
    /// (joining, or a Watch) without the lock; others that need one wait for it, and
    /// nobody judges the stream's health meanwhile (its reply makes it readable).
    in_round_trip: bool,
    /// Round trips begun so far, and the number of the last one that timed out with
    /// what it waited for: a thread that waited through it shares its outcome.
    round_trips: u64,
    last_timeout: Option<(u64, Stall)>,
    /// Until when this process goes on unwatched: the manager refused it for being at
    /// its cap of connections ([`wire::OVER_CAPACITY`]); it asks again after that.
    unwatched_until: Option<Instant>,
}

/// How long a process refused by a manager at its cap goes on unwatched before it asks
/// again.
const UNWATCHED_FOR: Duration = Duration::from_secs(1);

/// What a round trip that timed out waited for (to make [`Error::ManagerTimeout`]).
#[derive(Clone, Debug)]
struct Stall {
    pid: Option<u32>,
    socket: PathBuf,
    waited: Duration,
}

impl Stall {
    fn of(error: &Error) -> Option<Stall> {
        match error {
            Error::ManagerTimeout {
                pid,
                socket,
                waited,
            } => Some(Stall {
                pid: *pid,
                socket: socket.clone(),
                waited: *waited,
            }),
            _ => None,
        }
    }

    fn error(&self) -> Error {
        Error::ManagerTimeout {
            pid: self.pid,
            socket: self.socket.clone(),
            waited: self.waited,
        }
    }
}

/// What a create or attach needs from the manager before it takes a slot.
enum Need {
    /// Nothing: the manager knows already.
    Nothing,
    /// One request written, no answer awaited.
    Write(Request),
    /// A Watch of the namespace, answered (too many segments told one by one).
    Watch,
}

impl Connection {
    fn new(pid: u32) -> Connection {
        Connection {
            pid,
            stream: None,
            used: BTreeSet::new(),
            whole: BTreeSet::new(),
            created: BTreeSet::new(),
            attached: HashMap::new(),
            generation: 0,
            watcher: false,
            in_round_trip: false,
            round_trips: 0,
            last_timeout: None,
            unwatched_until: None,
        }
    }

    /// What telling the manager that this process is about to hold `segment` (or, for
    /// `None`, create) in `ns` needs.
    fn need(&self, ns: &Namespace, segment: Option<&str>) -> Need {
        if self.whole.contains(ns) {
            return Need::Nothing;
        }
        match segment {
            None if self.created.contains(ns) => Need::Nothing,
            None => Need::Write(Request::Created {
                namespace: ns.clone(),
            }),
            Some(name) => match self.attached.get(ns) {
                Some(told) if told.contains(name) => Need::Nothing,
                Some(told) if told.len() >= MAX_SEGMENTS_PER_NAMESPACE => Need::Watch,
                _ => Need::Write(Request::Attached {
                    segment: name.to_owned(),
                }),
            },
        }
    }

    /// Records that the manager was told what [`Connection::need`] asked for.
    fn told(&mut self, ns: &Namespace, segment: Option<&str>, watched: bool) {
        if watched {
            self.whole.insert(ns.clone());
            self.attached.remove(ns);
        } else {
            match segment {
                None => {
                    self.created.insert(ns.clone());
                }
                Some(name) => {
                    self.attached
                        .entry(ns.clone())
                        .or_default()
                        .insert(name.to_owned());
                }
            }
        }
        self.used.insert(ns.clone());
    }

    /// Begins a round trip: marks it in progress and returns its number.
    fn begin_round_trip(&mut self) -> u64 {
        self.in_round_trip = true;
        self.round_trips += 1;
        self.round_trips
    }

    /// Ends round trip `number` with `outcome` (remembering a timeout for the threads
    /// that waited through it).
    fn end_round_trip<T>(&mut self, number: u64, outcome: &Result<T>) {
        self.in_round_trip = false;
        if let Err(e) = outcome {
            if let Some(stall) = Stall::of(e) {
                self.last_timeout = Some((number, stall));
            }
        }
    }

    /// Takes `stream`, a new manager's connection on which Hello named `named` (what
    /// was used when the join began): those are swept whole, and nothing else was told.
    fn joined_naming(&mut self, stream: UnixStream, named: &BTreeSet<Namespace>) {
        self.stream = Some(stream);
        self.whole = named.clone();
        self.created.clear();
        self.attached.clear();
        self.generation += 1;
    }
}

/// Tells the user's manager, as the mode says, what this process is about to hold in
/// namespace `ns`: the segment named `segment` it attaches, or (`None`) segments it
/// creates there — before it takes a slot, so that the manager never misses a holder
/// (it reads what a client told before it sweeps after its death). Told once per
/// segment (per namespace for creates) and without waiting for an answer: one `write`
/// on the first use, nothing after. The first use connects (starting a manager in
/// `Auto` mode). Called before each file_system create/attach on the real backend.
pub(super) fn watch(ns: &Namespace, segment: Option<&str>) -> Result<()> {
    let mode = mode()?;
    if mode == ManagerMode::Off {
        return Ok(());
    }
    let pid = this_pid();
    let state = connection();
    let mut guard = state.lock();
    // The round trips this call waited through: a timeout among them is its outcome.
    let mut waited_since: Option<u64> = None;
    loop {
        let conn = match &mut *guard {
            Some(c) if c.pid == pid => c,
            other => other.insert(Connection::new(pid)),
        };
        if let (Some(since), Some((number, stall))) = (waited_since, &conn.last_timeout) {
            if *number > since {
                return Err(stall.error());
            }
        }
        if conn
            .unwatched_until
            .is_some_and(|until| Instant::now() < until)
        {
            return Ok(());
        }
        let need = conn.need(ns, segment);
        if conn.in_round_trip {
            // Another thread waits for the manager's answer (a Watch: the stream is
            // there) or for a manager (a join: it is not). What needs no answer goes
            // ahead on the stream; the rest waits for that round trip's outcome.
            match (&conn.stream, &need) {
                (Some(_), Need::Nothing) => return Ok(()),
                (Some(stream), Need::Write(request)) if send(stream, request).is_ok() => {
                    conn.told(ns, segment, false);
                    return Ok(());
                }
                _ => {}
            }
            waited_since.get_or_insert(conn.round_trips - 1);
            guard = state.wait(guard);
            continue;
        }
        if let Some(stream) = conn.stream.take_if(|s| !is_healthy(s)) {
            drop(stream);
            continue;
        }
        if let Some(stream) = conn.stream.as_ref() {
            match need {
                Need::Nothing => return Ok(()),
                Need::Write(request) => {
                    // A write, under the lock (requests must not interleave), no answer.
                    match send(stream, &request) {
                        Ok(()) => {
                            conn.told(ns, segment, false);
                            return Ok(());
                        }
                        Err(_) => {
                            conn.stream = None;
                            continue;
                        }
                    }
                }
                Need::Watch => {
                    let watch = Request::Watch {
                        namespace: ns.clone(),
                    };
                    // Sent under the lock; the answer is awaited without it.
                    let sent = send(stream, &watch).and_then(|()| {
                        stream
                            .try_clone()
                            .map_err(|e| Error::os("dup manager socket", e))
                    });
                    let stream = match sent {
                        Ok(stream) => stream,
                        Err(_) => {
                            conn.stream = None;
                            continue;
                        }
                    };
                    let number = conn.begin_round_trip();
                    let generation = conn.generation;
                    drop(guard);
                    let answered = receive(&stream).and_then(expect_welcome);
                    guard = state.lock();
                    let conn = guard.as_mut().expect("the state of this process");
                    conn.end_round_trip(number, &answered);
                    state.turn.notify_all();
                    match answered {
                        Ok(()) if conn.generation == generation => {
                            conn.told(ns, segment, true);
                            return Ok(());
                        }
                        // A new manager replaced that one meanwhile: ask it.
                        Ok(()) => continue,
                        Err(e) => {
                            if conn.generation == generation {
                                conn.stream = None;
                            }
                            return Err(e);
                        }
                    }
                }
            }
        }
        // No manager yet (or it went away): join one, unlocked.
        let number = conn.begin_round_trip();
        let used = conn.used.clone();
        drop(guard);
        let joined = join(mode, &used);
        guard = state.lock();
        let conn = guard.as_mut().expect("the state of this process");
        conn.end_round_trip(number, &joined);
        state.turn.notify_all();
        let stream = match joined {
            // A manager at its cap: this process goes on unwatched for a while, its
            // segments left to the sweeps and releases (docs/MANAGER.md).
            Err(Error::ManagerRefused { reason }) if reason == wire::OVER_CAPACITY => {
                conn.unwatched_until = Some(Instant::now() + UNWATCHED_FOR);
                return Ok(());
            }
            joined => joined?,
        };
        // What was used while this join ran unlocked is told by the loop (a Created
        // or Attached on the new stream), as for any namespace the Hello did not name.
        conn.joined_naming(stream, &used);
        if !conn.watcher {
            conn.watcher = std::thread::Builder::new()
                .name("shmrc-manager-watch".into())
                .spawn(move || watch_manager(pid))
                .is_ok();
        }
    }
}

/// The watcher thread: sleeps in `poll` on the connection and, when the manager goes
/// away, connects again at once (in `Auto` mode starting a new manager) so that this
/// process stays watched even if it never creates or attaches again. Returns when it
/// cannot reconnect (the next create/attach tries again and restarts it). Like
/// [`watch`], it holds no lock across a round trip.
fn watch_manager(pid: u32) {
    let state = connection();
    loop {
        let (generation, stream) = {
            let mut guard = state.lock();
            let Some(conn) = guard.as_mut().filter(|c| c.pid == pid) else {
                return;
            };
            match conn.stream.as_ref().and_then(|s| s.try_clone().ok()) {
                Some(stream) => (conn.generation, stream),
                None => {
                    conn.watcher = false;
                    return;
                }
            }
        };
        // Wakes on a hang-up, and also on a reply to this process's own request: the
        // health check below tells them apart once that request is done.
        let _ = sys::poll_readable(&[stream.as_fd()], None);
        drop(stream);
        let mut guard = state.lock();
        loop {
            let Some(conn) = guard.as_mut().filter(|c| c.pid == pid) else {
                return;
            };
            if !conn.in_round_trip {
                break;
            }
            // A reply that a round trip awaits woke us: let it be read first.
            guard = state.wait(guard);
        }
        let Some(conn) = guard.as_mut() else { return };
        if conn.generation != generation || conn.stream.as_ref().is_some_and(is_healthy) {
            continue;
        }
        conn.stream = None;
        let Some(mode) = mode().ok().filter(|m| *m != ManagerMode::Off) else {
            conn.watcher = false;
            return;
        };
        let number = conn.begin_round_trip();
        let used = conn.used.clone();
        drop(guard);
        let joined = join(mode, &used);
        let mut guard = state.lock();
        let Some(conn) = guard.as_mut() else { return };
        conn.end_round_trip(number, &joined);
        state.turn.notify_all();
        match joined {
            Ok(stream) => conn.joined_naming(stream, &used),
            Err(_) => {
                conn.watcher = false;
                return;
            }
        }
    }
}

/// Whether the manager is still at the other end: it never sends unasked, so anything
/// readable is its end of stream.
fn is_healthy(stream: &UnixStream) -> bool {
    sys::poll_readable(&[stream.as_fd()], Some(Duration::ZERO))
        .is_ok_and(|r| !r[0].readable && !r[0].hung_up)
}

/// Connects (starting a manager in `Auto` mode) and says Hello for `namespaces`.
fn join(mode: ManagerMode, namespaces: &BTreeSet<Namespace>) -> Result<UnixStream> {
    let os = PosixOs;
    let token = os.current();
    let hello = Request::Hello {
        token,
        pid: token.pid(),
        namespaces: namespaces.iter().cloned().collect(),
    };
    let runtime = RuntimeDir::for_user(os.uid())?;
    let mut attempt = 1;
    loop {
        let stream = match mode {
            ManagerMode::Auto => connect_or_start(&runtime)?,
            _ => connect(&runtime)?,
        };
        match exchange(&stream, &hello).and_then(expect_welcome) {
            Ok(()) => return Ok(stream),
            // The manager exited under us (its grace period ended): start another.
            Err(Error::Disconnected) if mode == ManagerMode::Auto && attempt < ATTEMPTS => {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

fn expect_welcome(reply: Reply) -> Result<()> {
    match reply {
        Reply::Welcome { .. } => Ok(()),
        Reply::Refused { reason } => Err(Error::ManagerRefused { reason }),
        Reply::Status(_) => Err(Error::Malformed {
            what: "manager reply",
            why: "a status where a welcome was due".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_process_gets_connection_state_of_its_own_even_while_ours_is_locked() {
        let parent = u32::MAX - 1;
        let ours = connection_for(parent);
        let _held_across_the_fork = ours.lock();
        let child = connection_for(u32::MAX);
        assert!(!std::ptr::eq(ours, child));
        assert!(
            child.conn.try_lock().is_ok(),
            "the child's state is not locked"
        );
        assert!(
            std::ptr::eq(connection_for(u32::MAX), child),
            "and it stays"
        );
    }

    #[test]
    fn a_refusal_is_an_error_carrying_the_managers_reason() {
        let refused = Reply::Refused {
            reason: "hello names pid 3".into(),
        };
        match expect_welcome(refused) {
            Err(Error::ManagerRefused { reason }) => assert_eq!(reason, "hello names pid 3"),
            other => panic!("{other:?}"),
        }
        assert!(expect_welcome(Reply::Welcome { manager_pid: 1 }).is_ok());
    }
}
