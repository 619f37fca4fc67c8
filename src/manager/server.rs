//! The manager daemon's event loop, a thin shell around its decisions
//! ([`super::registry`]): one instance per runtime directory (by `flock`), a `poll` over
//! the listening socket, the client connections and the clients' pidfds (no busy loop,
//! no sleeps). It turns what it reads into the registry's events (Hello, Watch, deaths,
//! the time) and carries out what the registry decides (a sweep of the namespaces the
//! dead registered; at start and before exiting a sweep of every shmrc namespace of
//! this user) and answers.
//!
//! A death's sweep of what the dead created and attached opens those names alone: the
//! names each client created are known from an inotify watch on `/dev/shm`
//! (`creations.rs`), so no listing of `/dev/shm` (which any user can fill) is
//! needed unless events were lost.
//!
//! A sweep of everything (at start, when the grace period is over) runs on a thread of
//! its own (`Background`) while the loop goes on answering: its length depends on
//! what is in `/dev/shm`, which other users can fill, and no Hello waits for it. Its
//! end wakes the `poll` (the thread's end of a socket pair closes).
//!
//! A Hello is believed only when the kernel agrees: the socket's peer (`SO_PEERCRED`)
//! has this uid and the pid the Hello names, the token's pid is that pid, and the
//! process with that pid has the token's start time after its pidfd was opened (so the
//! pidfd watches that very process). Anything else is refused, logged, and changes
//! nothing.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::creations::Creations;
use super::log::{info, warning};
use super::registry::{Registry, Sweep, Tick, Use};
use super::runtime::RuntimeDir;
use super::sys::{self, Peer, PidFd};
use super::wire::{self, ClientRow, ManagerStatus, Reply, Request};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::os::Os;
use crate::os::posix::PosixOs;
use crate::protocol::sweep::SweepReport;
use crate::token::Token;

/// Environment variable: the grace period in milliseconds (default [`DEFAULT_GRACE`]).
pub const GRACE_ENV: &str = "SHMRC_MANAGER_GRACE_MS";
/// How long a manager with no live client waits before it exits.
pub const DEFAULT_GRACE: Duration = Duration::from_millis(2000);
/// How long a starting manager waits for an exiting one to release the lock.
const LOCK_WAIT: Duration = Duration::from_secs(5);
/// The most connections open at once on any machine; more are refused as they arrive
/// (each costs a descriptor, and the listener must not stay readable with nothing
/// accepted). A manager's own cap is [`max_connections`]: this, or what its descriptor
/// limit allows.
pub const MAX_CONNECTIONS: usize = 16_384;
/// Descriptors a manager keeps for itself (listener, lock, log, inotify, a sweep's
/// files) out of its limit when it sizes its cap.
const RESERVED_FDS: u64 = 64;

/// How many connections a manager with the `RLIMIT_NOFILE` soft limit `fd_limit` may
/// hold: each client costs two descriptors (its connection, and the pidfd that tells
/// its death), so `(fd_limit - 64) / 2`, at most [`MAX_CONNECTIONS`] (9,968 with a
/// limit of 20,000; 480 with 1,024).
pub fn max_connections(fd_limit: u64) -> usize {
    let room = fd_limit.saturating_sub(RESERVED_FDS) / 2;
    usize::try_from(room).map_or(MAX_CONNECTIONS, |room| room.min(MAX_CONNECTIONS))
}
/// How long the manager stops accepting after `accept` failed for want of resources
/// (descriptors, buffers): the listener stays readable, and retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long a reply may take to write before the connection is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// How a manager runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where its socket, lock and log are.
    pub runtime: RuntimeDir,
    /// How long it stays with no live client.
    pub grace: Duration,
}

/// How [`run`] ended.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Ended {
    /// It ran, its grace period passed with no client, and it exited cleanly.
    GraceExpired,
    /// Another manager already runs for this runtime directory.
    AlreadyRunning,
}

/// The grace period from `$SHMRC_MANAGER_GRACE_MS`, or [`DEFAULT_GRACE`].
pub fn grace_from_env() -> Result<Duration> {
    parse_grace(crate::environment::var(GRACE_ENV)?)
}

fn parse_grace(value: Option<String>) -> Result<Duration> {
    match value {
        None => Ok(DEFAULT_GRACE),
        Some(v) => v.trim().parse().map(Duration::from_millis).map_err(|_| {
            Error::InvalidArgument(format!("{GRACE_ENV}={v:?} is not a number of milliseconds"))
        }),
    }
}

/// Runs the manager of `config.runtime` until its grace period passes with no live
/// client, or returns at once when another one runs there.
pub fn run(config: &Config) -> Result<Ended> {
    let uid = PosixOs.uid();
    config.runtime.ensure(uid)?;
    let socket = config.runtime.socket()?;
    let Some(lock) = take_lock(&config.runtime, &socket)? else {
        info!("another manager runs at {}", socket.display());
        return Ok(Ended::AlreadyRunning);
    };
    // Only the lock holder may remove a socket file: it is then stale.
    match std::fs::remove_file(&socket) {
        Ok(()) => info!("removed a stale socket {}", socket.display()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::os("unlink manager socket", e)),
    }
    let listener = UnixListener::bind(&socket).map_err(|e| Error::os("bind", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::os("set_nonblocking", e))?;
    info!(
        "manager pid {} listening at {} (grace {} ms)",
        std::process::id(),
        socket.display(),
        config.grace.as_millis()
    );
    let fd_limit = crate::os::posix::raise_fd_limit().unwrap_or_else(|e| {
        warning!("cannot raise the open-file limit: {e}");
        1024
    });
    let mut manager = Manager::new(uid, config, max_connections(fd_limit));
    info!(
        "at most {} clients at once (open-file limit {fd_limit})",
        manager.max_connections
    );
    manager.start_sweep(Everything::Start);
    manager.serve(&listener)?;
    // Unlink the socket before the lock goes, so a new manager never finds ours.
    let _ = std::fs::remove_file(&socket);
    drop(listener);
    drop(lock);
    info!("no client for {} ms: exiting", config.grace.as_millis());
    Ok(Ended::GraceExpired)
}

/// Takes the single-instance lock; `None` when a live manager answers at `socket`. A
/// manager that is exiting holds the lock for a moment after removing its socket: wait
/// for it (bounded).
fn take_lock(runtime: &RuntimeDir, socket: &std::path::Path) -> Result<Option<sys::FileLock>> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        let file = runtime.open_lock()?;
        if let Some(lock) = sys::try_lock_exclusive(file)? {
            return Ok(Some(lock));
        }
        if UnixStream::connect(socket).is_ok() || Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An accepted connection.
struct Connection {
    stream: UnixStream,
    peer: Peer,
    /// When it was accepted (time since the manager started).
    accepted: Duration,
    /// Bytes received and not yet decoded.
    pending: Vec<u8>,
    /// The client this connection said Hello for.
    client: Option<Token>,
}

/// What one `poll` found ready.
struct Ready {
    /// The listener has connections waiting.
    listener: bool,
    /// Connections (by index) readable or hung up.
    connections: Vec<usize>,
    /// Clients whose pidfd turned readable: they died.
    dead: Vec<Token>,
    /// Events of `/dev/shm` wait.
    created: bool,
    /// The sweep of everything in progress has ended.
    swept: bool,
}

/// Which sweep of everything.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Everything {
    /// At start: what an earlier manager or a crash left.
    Start,
    /// When no client has lived for the grace period, before exiting.
    GraceOver,
}

impl Everything {
    fn why(self) -> &'static str {
        match self {
            Everything::Start => "start",
            Everything::GraceOver => "grace period over",
        }
    }
}

/// What a sweep of everything returns: one report per namespace, or the listing's
/// error.
type Swept = Result<Vec<(Namespace, Result<SweepReport>)>>;

/// A sweep of everything running on a thread of its own.
struct Background {
    which: Everything,
    /// When it began (time since the manager started).
    began: Duration,
    thread: JoinHandle<Swept>,
    /// Hung up when the thread ends (it holds the other end): polled with the rest.
    ended: UnixStream,
}

/// What one poll round asks of the loop after reading a connection.
enum AfterRead {
    Keep,
    Close,
}

struct Manager<'a> {
    uid: u32,
    config: &'a Config,
    started: Instant,
    /// What the manager knows and decides.
    registry: Registry,
    /// A pidfd on each client the registry watches.
    pidfds: HashMap<Token, PidFd>,
    connections: Vec<Connection>,
    /// What each client created, for its death's sweep.
    creations: Creations,
    /// The sweep of everything in progress, if any.
    sweeping: Option<Background>,
    /// When the last grace-over sweep began, once it has ended with no client since:
    /// the loop exits then, unless someone connected meanwhile.
    grace_swept: Option<Duration>,
    /// The most connections held at once ([`max_connections`]).
    max_connections: usize,
}

impl<'a> Manager<'a> {
    fn new(uid: u32, config: &'a Config, max_connections: usize) -> Manager<'a> {
        Manager {
            max_connections,
            uid,
            config,
            started: Instant::now(),
            registry: Registry::new(config.grace),
            pidfds: HashMap::new(),
            connections: Vec::new(),
            creations: Creations::new(uid, PosixOs.pid_namespace()),
            sweeping: None,
            grace_swept: None,
        }
    }

    /// The poll loop; returns when the grace period has passed with no live client,
    /// the sweep of everything that followed has ended, and nobody connected since it
    /// began.
    fn serve(&mut self, listener: &UnixListener) -> Result<()> {
        loop {
            let timeout = match self.registry.tick(self.started.elapsed()) {
                Tick::Wait(timeout) => {
                    self.grace_swept = None;
                    timeout
                }
                // A sweep runs: wait for it (its end wakes the poll), serving meanwhile.
                Tick::GraceOver if self.sweeping.is_some() => None,
                Tick::GraceOver => match self.grace_swept.take() {
                    None => {
                        self.start_sweep(Everything::GraceOver);
                        continue;
                    }
                    Some(began) if !self.someone_came(listener, began)? => return Ok(()),
                    Some(_) => {
                        // Someone is connecting: stay, and give it a fresh grace period.
                        self.registry.stay(self.started.elapsed());
                        continue;
                    }
                },
            };
            let ready = self.wait(listener, timeout)?;
            // Connections that hung up are closed before new ones are counted against
            // the cap (a newcomer is not refused for room that is free).
            self.read_connections(&ready.connections);
            if ready.listener {
                self.accept_all(listener);
            }
            if ready.created {
                self.creations.drain();
            }
            self.bury(&ready.dead);
            if ready.swept {
                self.finish_sweep();
            }
        }
    }

    /// Whether someone came since `began` (time since start), when the grace-over
    /// sweep began: a connection waits on the listener, or one accepted since then has
    /// not said Hello yet (it is about to).
    fn someone_came(&self, listener: &UnixListener, began: Duration) -> Result<bool> {
        let accepted_since = self
            .connections
            .iter()
            .any(|c| c.client.is_none() && c.accepted >= began);
        let waiting = sys::poll_readable(&[listener.as_fd()], Some(Duration::ZERO))?;
        Ok(accepted_since || waiting[0].readable)
    }

    /// One `poll` over the listener, the connections, the clients' pidfds and the end
    /// of the sweep of everything in progress.
    fn wait(&self, listener: &UnixListener, timeout: Option<Duration>) -> Result<Ready> {
        let tokens: Vec<Token> = self.pidfds.keys().copied().collect();
        let mut fds: Vec<BorrowedFd<'_>> = vec![listener.as_fd()];
        fds.extend(self.connections.iter().map(|c| c.stream.as_fd()));
        fds.extend(tokens.iter().map(|t| self.pidfds[t].as_fd()));
        let creations = fds.len();
        fds.extend(self.creations.fd());
        let sweep_end = fds.len();
        fds.extend(self.sweeping.iter().map(|b| b.ended.as_fd()));
        let ready = sys::poll_readable(&fds, timeout)?;
        let conns = &ready[1..1 + self.connections.len()];
        let pidfds = &ready[1 + self.connections.len()..][..tokens.len()];
        let at = |i: usize| ready.get(i).is_some_and(|r| r.readable || r.hung_up);
        let created = self.creations.fd().is_some() && at(creations);
        let swept = self.sweeping.is_some() && at(sweep_end);
        Ok(Ready {
            listener: ready[0].readable,
            connections: (0..conns.len())
                .filter(|&i| conns[i].readable || conns[i].hung_up)
                .collect(),
            dead: tokens
                .iter()
                .zip(pidfds)
                .filter(|(_, r)| r.readable || r.hung_up)
                .map(|(t, _)| *t)
                .collect(),
            created,
            swept,
        })
    }

    fn accept_all(&mut self, listener: &UnixListener) {
        loop {
            match listener.accept() {
                Ok((stream, _)) => match self.admit(stream) {
                    Ok(conn) => {
                        self.connections.push(conn);
                        if self.connections.len() > self.max_connections {
                            let last = self.connections.len() - 1;
                            self.refuse(last, wire::OVER_CAPACITY);
                            self.connections.pop();
                        }
                    }
                    Err(e) => warning!("dropped a connection: {e}"),
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    warning!("accept failed: {e}; not accepting for {ACCEPT_BACKOFF:?}");
                    std::thread::sleep(ACCEPT_BACKOFF);
                    return;
                }
            }
        }
    }

    fn admit(&self, stream: UnixStream) -> Result<Connection> {
        stream
            .set_nonblocking(false)
            .map_err(|e| Error::os("set_nonblocking", e))?;
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(|e| Error::os("set_write_timeout", e))?;
        let peer = sys::peer_credentials(&stream)?;
        Ok(Connection {
            stream,
            peer,
            accepted: self.started.elapsed(),
            pending: Vec::new(),
            client: None,
        })
    }

    /// Reads each ready connection once (poll said it will not block) and obeys every
    /// complete request; closes those that ended or misbehaved.
    fn read_connections(&mut self, ready: &[usize]) {
        let mut closing = Vec::new();
        for &i in ready {
            if let AfterRead::Close = self.read_one(i) {
                closing.push(i);
            }
        }
        for &i in closing.iter().rev() {
            let conn = self.connections.swap_remove(i);
            if let Some(token) = conn.client {
                info!("client {token} closed its connection; watched until it dies");
            }
        }
    }

    fn read_one(&mut self, i: usize) -> AfterRead {
        let room = wire::HEADER_LEN + wire::MAX_REQUEST_PAYLOAD - self.connections[i].pending.len();
        let mut chunk = vec![0u8; room];
        let n = match self.connections[i].stream.read(&mut chunk) {
            Ok(0) => return AfterRead::Close,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return AfterRead::Keep,
            Err(_) => return AfterRead::Close,
        };
        self.connections[i].pending.extend_from_slice(&chunk[..n]);
        loop {
            let pending = &self.connections[i].pending;
            let len = match wire::frame_len(pending, wire::MAX_REQUEST_PAYLOAD) {
                Ok(Some(len)) => len,
                Ok(None) => return AfterRead::Keep,
                Err(e) => return self.refuse(i, &e.to_string()),
            };
            let frame: Vec<u8> = self.connections[i].pending.drain(..len).collect();
            let reply = match wire::decode_request(&frame) {
                Ok(request) => self.obey(i, request),
                Err(e) => Err(e.to_string()),
            };
            match reply {
                Ok(Some(reply)) => {
                    if self.send(i, &reply).is_err() {
                        return AfterRead::Close;
                    }
                }
                Ok(None) => {}
                Err(reason) => return self.refuse(i, &reason),
            }
        }
    }

    /// Carries out one request: its reply (`None` for what is told, not asked), or
    /// `Err`, the reason to refuse it.
    fn obey(&mut self, i: usize, request: Request) -> Result<Option<Reply>, String> {
        same_user(self.connections[i].peer, self.uid)?;
        let wants_reply = request.wants_reply();
        self.obey_request(i, request)
            .map(|reply| wants_reply.then_some(reply))
    }

    fn obey_request(&mut self, i: usize, request: Request) -> Result<Reply, String> {
        match request {
            Request::Hello {
                token,
                pid,
                namespaces,
            } => {
                if let Some(known) = self.connections[i].client {
                    return Err(format!("this connection already said hello as {known}"));
                }
                let pidfd = vet_hello(self.connections[i].peer, token, pid)?;
                if let Err(why) = self.registry.hello(token, namespaces) {
                    // A known client stays watched (its first Hello's pidfd stays).
                    if !self.registry.watches(token) {
                        self.pidfds.remove(&token);
                    }
                    return Err(why);
                }
                // A second Hello of the same process keeps the first pidfd.
                self.pidfds.entry(token).or_insert(pidfd);
                self.creations.watch(token);
                self.connections[i].client = Some(token);
                info!("client {token} watched for {:?}", self.namespaces_of(token));
                Ok(self.welcome())
            }
            Request::Watch { namespace } => {
                let token = self.connections[i]
                    .client
                    .ok_or("watch before hello: say who you are first")?;
                info!("client {token} also uses {namespace}");
                self.registry.uses(token, Use::Namespace(namespace))?;
                Ok(self.welcome())
            }
            Request::Created { namespace } => {
                let token = self.told_by(i)?;
                self.registry.uses(token, Use::Created(namespace))?;
                Ok(self.welcome())
            }
            Request::Attached { segment } => {
                let token = self.told_by(i)?;
                let (namespace, _) = Namespace::of_segment(&segment, self.uid)
                    .map_err(|e| format!("attached: {e}"))?;
                self.registry
                    .uses(token, Use::Segment(namespace, segment))?;
                Ok(self.welcome())
            }
            Request::Status => Ok(Reply::Status(self.status())),
        }
    }

    /// The client of connection `i`, which tells a use: it must have said Hello.
    fn told_by(&self, i: usize) -> Result<Token, String> {
        Ok(self.connections[i]
            .client
            .ok_or("a use told before hello: say who you are first")?)
    }

    fn namespaces_of(&self, token: Token) -> Vec<&str> {
        self.registry
            .clients()
            .filter(|(t, _)| *t == token)
            .flat_map(|(_, namespaces)| namespaces.into_iter().map(Namespace::prefix))
            .collect()
    }

    fn welcome(&self) -> Reply {
        Reply::Welcome {
            manager_pid: std::process::id(),
        }
    }

    fn send(&mut self, i: usize, reply: &Reply) -> io::Result<()> {
        sys::send_all(&self.connections[i].stream, &wire::encode_reply(reply))
    }

    /// Refuses the request on connection `i`: counted, logged, answered, closed.
    fn refuse(&mut self, i: usize, reason: &str) -> AfterRead {
        self.registry.refused();
        let peer = self.connections[i].peer;
        warning!("refused peer pid {} uid {}: {reason}", peer.pid, peer.uid);
        let _ = self.send(
            i,
            &Reply::Refused {
                reason: reason.to_owned(),
            },
        );
        discard_input(&mut self.connections[i].stream);
        AfterRead::Close
    }

    /// Tells the registry which clients died, closes their connections, and carries
    /// out the sweep it decides (the namespaces they used, each once, the segments
    /// they created first).
    fn bury(&mut self, dead: &[Token]) {
        if dead.is_empty() {
            return;
        }
        for token in dead {
            if self.pidfds.remove(token).is_some() {
                info!("client {token} died");
            }
        }
        // What the dead told before they died is in their connections still: every
        // use is told before its slot is taken, so it must count before the sweep.
        let theirs: Vec<usize> = (0..self.connections.len())
            .filter(|&i| {
                self.connections[i]
                    .client
                    .is_some_and(|t| dead.contains(&t))
            })
            .collect();
        for &i in &theirs {
            self.drain(i);
        }
        self.connections
            .retain(|c| c.client.is_none_or(|t| !dead.contains(&t)));
        // Every name the dead created was reported before they died: read it all.
        self.creations.drain();
        let created = self.creations.forget(dead);
        if let Some(sweep) = self.registry.died(dead) {
            self.carry_out(&sweep, created.as_ref());
        }
    }

    /// Reads and obeys what is left on connection `i` of a dead client, without
    /// blocking (a child that inherited its socket may keep it open).
    fn drain(&mut self, i: usize) {
        if let Err(e) = self.connections[i].stream.set_nonblocking(true) {
            warning!("cannot read what a dead client left: {e}");
            return;
        }
        while let AfterRead::Keep = self.read_one(i) {
            let more =
                sys::poll_readable(&[self.connections[i].stream.as_fd()], Some(Duration::ZERO));
            if !more.is_ok_and(|r| r[0].readable) {
                break;
            }
        }
    }

    /// Carries out a death's sweep, knowing what the dead created (`None`: unknown).
    fn carry_out(&mut self, sweep: &Sweep, created: Option<&BTreeSet<String>>) {
        for (ns, report) in sweep.carry_out_knowing(&PosixOs, created) {
            self.log_sweep("client death", &ns, &report);
            self.registry.swept(&report);
        }
    }

    /// Starts the sweep of everything `which` on a thread of its own; if no thread can
    /// be started, sweeps here and now (the loop then waits for it, as it always did).
    fn start_sweep(&mut self, which: Everything) {
        let began = self.started.elapsed();
        let started = UnixStream::pair()
            .map_err(|e| e.to_string())
            .and_then(|(ended, end)| {
                let thread = std::thread::Builder::new()
                    .name("shmrc-sweep".into())
                    .spawn(move || {
                        // Dropped when the thread ends, unwinding included: the loop's
                        // end of the pair hangs up.
                        let _end = end;
                        super::registry::sweep_everything(&PosixOs)
                    })
                    .map_err(|e| e.to_string())?;
                Ok(Background {
                    which,
                    began,
                    thread,
                    ended,
                })
            });
        match started {
            Ok(background) => self.sweeping = Some(background),
            Err(e) => {
                warning!(
                    "cannot start the {} sweep's thread: {e}; sweeping here",
                    which.why()
                );
                let swept = super::registry::sweep_everything(&PosixOs);
                self.swept_everything(which, began, swept);
            }
        }
    }

    /// Collects the sweep of everything that has ended.
    fn finish_sweep(&mut self) {
        let Some(background) = self.sweeping.take() else {
            return;
        };
        let swept = background.thread.join().unwrap_or_else(|panic| {
            let what = panic_message(panic.as_ref());
            Err(Error::InvalidArgument(format!(
                "its thread panicked: {what}"
            )))
        });
        self.swept_everything(background.which, background.began, swept);
    }

    /// Logs and counts a sweep of everything `which` that began at `began`.
    fn swept_everything(&mut self, which: Everything, began: Duration, swept: Swept) {
        let why = which.why();
        match swept {
            Ok(swept) => {
                for (ns, report) in &swept {
                    self.log_sweep(why, ns, report);
                    self.registry.swept(report);
                }
                let took = self.started.elapsed().saturating_sub(began);
                info!(
                    "{why} sweep: {} namespace(s) of this user in {} ms",
                    swept.len(),
                    took.as_millis()
                );
            }
            Err(e) => warning!("the {why} sweep failed: {e}"),
        }
        if which == Everything::GraceOver {
            self.grace_swept = Some(began);
        }
    }

    fn log_sweep(&self, why: &str, ns: &Namespace, report: &Result<SweepReport>) {
        match report {
            Ok(report) => info!(
                "{why}: swept {ns}: reclaimed {} slot(s), unlinked {} segment(s)",
                report.reclaimed, report.unlinked
            ),
            Err(e) => warning!("{why}: sweeping {ns} failed: {e}"),
        }
    }

    fn status(&self) -> ManagerStatus {
        let mut rows: Vec<ClientRow> = self
            .registry
            .clients()
            .map(|(token, namespaces)| ClientRow {
                pid: token.pid(),
                connected: self.connections.iter().any(|c| c.client == Some(token)),
                namespaces: namespaces
                    .into_iter()
                    .map(|ns| ns.prefix().to_owned())
                    .collect(),
            })
            .collect();
        let counters = self.registry.counters();
        rows.sort_by_key(|r| r.pid);
        ManagerStatus {
            pid: std::process::id(),
            uptime_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            clients: u32::try_from(self.registry.len()).unwrap_or(u32::MAX),
            clients_ever: counters.clients_ever,
            sweeps: counters.sweeps,
            reclaimed: counters.reclaimed,
            unlinked: counters.unlinked,
            refused: counters.refused,
            runtime_dir: self.config.runtime.path().display().to_string(),
            rows,
        }
    }
}

/// What a panic's payload says (`panic!` with a message carries a `&str` or a
/// `String`).
pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Reads and drops what the peer has already sent (at most 64 KiB), so that closing the
/// connection does not reset it before the peer has read the refusal.
fn discard_input(stream: &mut UnixStream) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match stream.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

/// Checks a Hello's claims against the kernel's word and returns a pidfd on the very
/// process it names, or the reason to refuse it.
fn vet_hello(peer: Peer, token: Token, pid: u32) -> Result<PidFd, String> {
    check_claims(peer, token, pid)?;
    let pidfd = sys::pidfd_open(pid).map_err(|e| format!("cannot watch pid {pid}: {e}"))?;
    // Opened first, checked second: if the pid was reused in between, the start time
    // differs and the token is dead.
    if !PosixOs.is_alive(token) {
        return Err(format!("token {token} does not name a live process"));
    }
    Ok(pidfd)
}

/// Every request, Hello or not, must come from this user.
fn same_user(peer: Peer, uid: u32) -> Result<(), String> {
    if peer.uid != uid {
        return Err(format!(
            "peer uid {} is not this manager's uid {uid}",
            peer.uid
        ));
    }
    Ok(())
}

/// The claims of a Hello that need no system call (its peer is this user already,
/// [`same_user`]): the Hello's pid is the peer's and the token's.
fn check_claims(peer: Peer, token: Token, pid: u32) -> Result<(), String> {
    if peer.pid != pid {
        return Err(format!(
            "hello names pid {pid} but the connecting process is pid {}",
            peer.pid
        ));
    }
    if token.pid() != pid {
        return Err(format!("token {token} is not pid {pid}'s"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> (Peer, u32, Token) {
        let uid = PosixOs.uid();
        let peer = Peer {
            pid: std::process::id(),
            uid,
        };
        (peer, uid, PosixOs.current())
    }

    #[test]
    fn the_connection_cap_follows_the_descriptor_limit() {
        assert_eq!(max_connections(20_000), 9_968);
        assert_eq!(max_connections(1_024), 480);
        assert_eq!(max_connections(1 << 20), MAX_CONNECTIONS);
    }

    #[test]
    fn a_truthful_hello_is_accepted() {
        let (peer, uid, token) = me();
        assert!(same_user(peer, uid).is_ok());
        assert!(vet_hello(peer, token, peer.pid).is_ok());
    }

    #[test]
    fn a_hello_for_another_pid_uid_or_start_is_refused() {
        let (peer, uid, token) = me();
        let other_pid = Token::new(peer.pid + 1, token.start_ticks()).unwrap();
        assert!(
            check_claims(peer, other_pid, peer.pid + 1)
                .unwrap_err()
                .contains("connecting process")
        );
        assert!(
            check_claims(peer, other_pid, peer.pid)
                .unwrap_err()
                .contains("is not pid")
        );
        assert!(same_user(peer, uid + 1).unwrap_err().contains("uid"));
        let stale = Token::new(peer.pid, token.start_ticks() + 1).unwrap();
        assert!(
            vet_hello(peer, stale, peer.pid)
                .unwrap_err()
                .contains("live process")
        );
    }

    #[test]
    fn the_grace_period_is_milliseconds_or_a_named_error() {
        assert_eq!(parse_grace(None).unwrap(), DEFAULT_GRACE);
        assert_eq!(
            parse_grace(Some(" 250".into())).unwrap(),
            Duration::from_millis(250)
        );
        let why = parse_grace(Some("2s".into())).unwrap_err().to_string();
        assert!(why.contains("SHMRC_MANAGER_GRACE_MS=\"2s\""), "{why}");
    }
}
