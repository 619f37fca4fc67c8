//! Connecting two processes: a [`OneShotServer`] listens on a fresh abstract Unix
//! socket (no file to clean up, gone with its process) whose random name the other
//! process gets by any means and passes to [`connect`]; [`spawn`] does both for a
//! child `Command`, passing the name in [`CHANNEL_ENV`], and the child calls
//! [`from_parent`]. The server accepts only a peer of this user (`SO_PEERCRED`), and
//! for [`spawn`] only the child it started.
//!
//! Each side gets a [`Sender`] and a [`Receiver`] over the one connection (the types
//! swap sides: the parent's `Sender<Job>` talks to the child's `Receiver<Job>`).
//!
//! The naming and the peer check are [`Endpoint`]'s, shared with
//! [`Listener`](super::Listener): a fresh abstract name, or a service's socket file in
//! the user's private runtime directory ([`service_name`]); either way only a peer of
//! this user is accepted.

use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Receiver, Sender};
use crate::error::{Error, Result};
use crate::manager::RuntimeDir;
use crate::manager::sys::{FileLock, Peer, peer_credentials, poll_readable, try_lock_exclusive};

/// The environment variable through which [`spawn`] tells the child where to connect
/// ([`from_parent`] reads it).
pub const CHANNEL_ENV: &str = "SHMRC_CHANNEL";

/// How long [`spawn`] waits for its child to connect.
const SPAWN_CONNECT_LIMIT: Duration = Duration::from_secs(30);

/// The longest service name [`service_name`] takes.
const SERVICE_NAME_MAX: usize = 64;
/// Bytes of `sun_path`, the terminating NUL included.
const SUN_PATH_LEN: usize = 108;

/// A listening socket for this user's channels and the name a client passes to
/// [`connect`]: a fresh abstract one (gone with its process), or a service's socket
/// file in the runtime directory (removed when the endpoint is dropped).
pub(super) struct Endpoint {
    listener: UnixListener,
    name: String,
    /// A service endpoint's socket file, removed on drop.
    file: Option<ServiceFile>,
}

/// The socket file of a service and the lock that makes it this endpoint's; both files
/// are removed on drop, the lock file while it is still held ([`lock_service`] tells a
/// lock taken on a file removed meanwhile from the one at the path).
struct ServiceFile {
    path: PathBuf,
    /// Device and inode: the file is removed on drop only while it is still this one.
    identity: (u64, u64),
    lock_path: PathBuf,
    _lock: FileLock,
}

/// Takes the `flock` of the lock file at `path` (created `0600`) without waiting:
/// `Ok(None)` when another listener holds it. A lock taken on a file that its holder
/// removed before letting go (the file at `path` is then another, or none) is no
/// lock: it tries again on the file now there.
fn lock_service(path: &Path) -> Result<Option<FileLock>> {
    loop {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::os("open the service lock", e))?;
        let opened = file.metadata().map_err(|e| Error::os("fstat", e))?;
        let Some(lock) = try_lock_exclusive(file)? else {
            return Ok(None);
        };
        let still_there = std::fs::symlink_metadata(path)
            .is_ok_and(|now| (now.dev(), now.ino()) == (opened.dev(), opened.ino()));
        if still_there {
            return Ok(Some(lock));
        }
    }
}

impl Endpoint {
    /// Listens on a fresh abstract socket named `shmrc-channel.<uid>.<128 random bits>`.
    pub(super) fn fresh() -> Result<Endpoint> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)
            .map_err(|e| Error::os("getrandom", std::io::Error::other(e.to_string())))?;
        let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let name = format!("shmrc-channel.{}.{hex}", nix::unistd::geteuid().as_raw());
        let address =
            SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| Error::os("bind", e))?;
        let listener = UnixListener::bind_addr(&address).map_err(|e| Error::os("bind", e))?;
        Ok(Endpoint {
            listener,
            name,
            file: None,
        })
    }

    /// Listens as `service` ([`service_name`]): its socket file, mode `0600`, in the
    /// user's runtime directory (`0700`, checked), owned while this endpoint holds the
    /// `flock` of `channel.<service>.lock` beside it. A service another listener holds
    /// is [`Error::Bootstrap`] (and that listener sees nothing: no probe connects to
    /// it); a socket file left by a listener that died is replaced.
    pub(super) fn service(service: &str) -> Result<Endpoint> {
        let name = service_name(service)?;
        let path = PathBuf::from(&name);
        let lock_path = path.with_file_name(format!("channel.{service}.lock"));
        let lock = lock_service(&lock_path)?.ok_or_else(|| Error::Bootstrap {
            why: format!("service {service:?} is already served at {name}"),
        })?;
        // The service is ours: a socket file there was left by a listener that died.
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::os("unlink", e)),
        }
        let listener = UnixListener::bind(&path).map_err(|e| Error::os("bind", e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::os("chmod", e))?;
        let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::os("stat", e))?;
        Ok(Endpoint {
            listener,
            name,
            file: Some(ServiceFile {
                path,
                identity: (meta.dev(), meta.ino()),
                lock_path,
                _lock: lock,
            }),
        })
    }

    /// The name to pass to [`connect`].
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The listening socket (readable when a client waits to be accepted).
    pub(super) fn as_fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }

    /// Accepts one connection of this user (and of process `pid`, when given) within
    /// `timeout` (`None`: no limit); `Ok(None)` when none came in time. Connections of
    /// other users are dropped and waited past. `still_waiting`, when given, is asked
    /// every 50 ms and may end the wait early with its error.
    pub(super) fn accept_peer(
        &self,
        timeout: Option<Duration>,
        pid: Option<u32>,
        mut still_waiting: Option<&mut dyn FnMut() -> Result<()>>,
    ) -> Result<Option<(UnixStream, Peer)>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let me = nix::unistd::geteuid().as_raw();
        loop {
            if let Some(look) = still_waiting.as_mut() {
                look()?;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            // Wake up now and then to let `still_waiting` look (a child that exited).
            let slice = match (left, still_waiting.is_some()) {
                (Some(left), true) => Some(left.min(Duration::from_millis(50))),
                (None, true) => Some(Duration::from_millis(50)),
                (left, false) => left,
            };
            let ready = poll_readable(&[self.listener.as_fd()], slice)?;
            if ready.first().is_some_and(|r| r.readable) {
                let (stream, _) = self.listener.accept().map_err(|e| Error::os("accept", e))?;
                let peer = peer_credentials(&stream)?;
                if peer.uid == me && pid.is_none_or(|pid| pid == peer.pid) {
                    return Ok(Some((stream, peer)));
                }
                // Someone else: drop the connection and keep waiting.
            }
            if left.is_some_and(|left| left.is_zero()) {
                return Ok(None);
            }
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(file) = &self.file {
            let ours = std::fs::symlink_metadata(&file.path)
                .is_ok_and(|meta| (meta.dev(), meta.ino()) == file.identity);
            if ours {
                let _ = std::fs::remove_file(&file.path);
            }
            // Still held (the lock goes with the fields, after this).
            let _ = std::fs::remove_file(&file.lock_path);
        }
    }
}

/// The name [`connect`] takes for `service`, a listener bound with
/// [`Listener::bind`](super::Listener::bind): its socket file in this user's runtime
/// directory (`$SHMRC_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/shmrc`, else
/// `/tmp/shmrc-<uid>`; created `0700` if missing, and refused as
/// [`Error::UnsafeRuntimeDir`] if another user could enter it). A service name is 1 to
/// 64 letters, digits, `.`, `_` or `-`, not starting with `.`: anything else is an
/// [`Error::InvalidArgument`] that says so.
///
/// ```
/// let name = shmrc::channel::service_name("jobs")?;
/// assert!(name.ends_with("/channel.jobs.sock"));
/// assert!(matches!(shmrc::channel::service_name("../etc"), Err(shmrc::Error::InvalidArgument(_))));
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn service_name(service: &str) -> Result<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if service.is_empty()
        || service.len() > SERVICE_NAME_MAX
        || service.starts_with('.')
        || !service.chars().all(allowed)
    {
        return Err(Error::InvalidArgument(format!(
            "channel service name {service:?}: use 1 to {SERVICE_NAME_MAX} letters, digits, \
             '.', '_' or '-', not starting with '.'"
        )));
    }
    let runtime = RuntimeDir::of_this_user()?;
    let path = runtime.path().join(format!("channel.{service}.sock"));
    let name = path
        .to_str()
        .ok_or_else(|| Error::InvalidArgument(format!("runtime directory {path:?} is not UTF-8")))?
        .to_owned();
    if name.len() >= SUN_PATH_LEN {
        return Err(Error::SocketPathTooLong {
            len: name.len(),
            path,
            max: SUN_PATH_LEN - 1,
        });
    }
    Ok(name)
}

/// A listener for exactly one connection, like ipc-channel's `IpcOneShotServer`: hand
/// [`OneShotServer::name`] to the other process, which calls [`connect`].
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::channel::{OneShotServer, connect};
/// use std::time::Duration;
///
/// let server = OneShotServer::<String, u32>::new()?;
/// let name = server.name().to_owned();
/// // in the other process (here a thread):
/// let other = std::thread::spawn(move || -> shmrc::Result<()> {
///     let (to_server, from_server) = connect::<u32, String>(&name)?;
///     to_server.send(&(from_server.recv()?.len() as u32))?; // echo the length
///     Ok(())
/// });
/// let (tx, rx) = server.accept(Duration::from_secs(10))?;
/// tx.send(&"four".to_owned())?;
/// assert_eq!(rx.recv()?, 4);
/// other.join().unwrap()?;
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct OneShotServer<T, U> {
    endpoint: Endpoint,
    types: PhantomData<fn(T) -> U>,
}

impl<T: Serialize + DeserializeOwned, U: Serialize + DeserializeOwned> OneShotServer<T, U> {
    /// Listens on a fresh abstract socket named `shmrc-channel.<uid>.<128 random bits>`.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let server = shmrc::channel::OneShotServer::<u8, u8>::new()?;
    /// assert!(server.name().starts_with("shmrc-channel."));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new() -> Result<OneShotServer<T, U>> {
        Ok(OneShotServer {
            endpoint: Endpoint::fresh()?,
            types: PhantomData,
        })
    }

    /// The name to pass to [`connect`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let a = shmrc::channel::OneShotServer::<u8, u8>::new()?;
    /// let b = shmrc::channel::OneShotServer::<u8, u8>::new()?;
    /// assert_ne!(a.name(), b.name());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.endpoint.name()
    }

    /// Waits up to `timeout` for the other process to connect; [`Error::Bootstrap`] if
    /// none did. Connections from other users are refused and waited past.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use std::time::Duration;
    ///
    /// let server = shmrc::channel::OneShotServer::<u8, u8>::new()?;
    /// let nobody = server.accept(Duration::from_millis(20));
    /// assert!(matches!(nobody, Err(shmrc::Error::Bootstrap { .. })));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn accept(self, timeout: Duration) -> Result<(Sender<T>, Receiver<U>)> {
        self.accept_from(timeout, None, &mut || Ok(()))
    }

    /// Accepts one connection of this user (and of process `pid`, when given) within
    /// `timeout`; `still_waiting` may end the wait early with its error.
    fn accept_from(
        self,
        timeout: Duration,
        pid: Option<u32>,
        still_waiting: &mut dyn FnMut() -> Result<()>,
    ) -> Result<(Sender<T>, Receiver<U>)> {
        match self
            .endpoint
            .accept_peer(Some(timeout), pid, Some(still_waiting))?
        {
            Some((stream, _)) => pair(stream),
            None => Err(Error::Bootstrap {
                why: format!(
                    "nobody connected to {} within {timeout:?}",
                    self.endpoint.name()
                ),
            }),
        }
    }
}

/// Both ends over one connected stream.
pub(super) fn pair<T: Serialize, U: DeserializeOwned>(
    stream: UnixStream,
) -> Result<(Sender<T>, Receiver<U>)> {
    let other = stream.try_clone().map_err(|e| Error::os("dup", e))?;
    Ok((Sender::from_stream(stream), Receiver::from_stream(other)))
}

/// Connects to the [`OneShotServer`] or [`Listener`](super::Listener) named `name` (in
/// another process of this user): what its `name()` gave, or [`service_name`] of a
/// service. A name nobody listens on, or that another user's process serves, is
/// [`Error::Bootstrap`].
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// let nobody = shmrc::channel::connect::<u8, u8>("shmrc-channel.0.none");
/// assert!(matches!(nobody, Err(shmrc::Error::Bootstrap { .. })));
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn connect<T: Serialize + DeserializeOwned, U: Serialize + DeserializeOwned>(
    name: &str,
) -> Result<(Sender<T>, Receiver<U>)> {
    let refused = |e: std::io::Error| Error::Bootstrap {
        why: format!("cannot connect to {name}: {e}"),
    };
    let stream = if Path::new(name).is_absolute() {
        // A service's socket file ([`service_name`]).
        UnixStream::connect(name).map_err(refused)?
    } else {
        let address =
            SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| Error::os("connect", e))?;
        UnixStream::connect_addr(&address).map_err(refused)?
    };
    // As the server refuses clients of another user, so the client refuses a server of
    // another user (an abstract name is anyone's to bind).
    let me = nix::unistd::geteuid().as_raw();
    let server = peer_credentials(&stream)?;
    if server.uid != me {
        return Err(Error::Bootstrap {
            why: format!(
                "{name} is served by uid {}, not this user (uid {me})",
                server.uid
            ),
        });
    }
    pair(stream)
}

/// Starts `command` as a child with a channel to it: `T`s go to the child, `U`s come
/// back. The child finds the server in [`CHANNEL_ENV`] and calls [`from_parent`]
/// (the command must run that program itself, not a shell around it: only the child's
/// own pid may connect). [`Error::Bootstrap`] if the child exits, or does not connect
/// within 30 s (it is then killed and reaped).
///
/// ```no_run
/// use std::process::Command;
///
/// // A worker program that answers each number with its square:
/// //     let (to_parent, from_parent) = shmrc::channel::from_parent::<u64, u64>()?;
/// //     while let Ok(n) = from_parent.recv() { to_parent.send(&(n * n))?; }
/// let (mut child, jobs, results) =
///     shmrc::channel::spawn::<u64, u64>(&mut Command::new("./square-worker"))?;
/// jobs.send(&12)?;
/// assert_eq!(results.recv()?, 144);
/// drop(jobs); // the worker sees Disconnected and exits
/// child.wait().unwrap();
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn spawn<T: Serialize + DeserializeOwned, U: Serialize + DeserializeOwned>(
    command: &mut Command,
) -> Result<(Child, Sender<T>, Receiver<U>)> {
    let server = OneShotServer::<T, U>::new()?;
    let mut child = command
        .env(CHANNEL_ENV, server.name())
        .spawn()
        .map_err(|e| Error::os("spawn", e))?;
    let pid = child.id();
    let connected = server.accept_from(SPAWN_CONNECT_LIMIT, Some(pid), &mut || match child
        .try_wait()
    {
        Ok(Some(status)) => Err(Error::Bootstrap {
            why: format!("the child exited ({status}) before it connected"),
        }),
        Ok(None) => Ok(()),
        Err(e) => Err(Error::os("waitpid", e)),
    });
    match connected {
        Ok((tx, rx)) => Ok((child, tx, rx)),
        Err(e) => {
            // Ours, by pid: kill and reap it so that nothing is left behind.
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// In a child started by [`spawn`]: the channel to the parent (`T`s go to it, `U`s come
/// from it). [`Error::Bootstrap`] when [`CHANNEL_ENV`] is not set (the process was not
/// started by `spawn`) or the parent is gone.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// let not_a_child = shmrc::channel::from_parent::<u8, u8>();
/// assert!(matches!(not_a_child, Err(shmrc::Error::Bootstrap { .. })));
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn from_parent<T: Serialize + DeserializeOwned, U: Serialize + DeserializeOwned>()
-> Result<(Sender<T>, Receiver<U>)> {
    let name = crate::environment::var(CHANNEL_ENV)?.ok_or_else(|| Error::Bootstrap {
        why: format!(
            "{CHANNEL_ENV} is not set: this process was not started by shmrc::channel::spawn"
        ),
    })?;
    connect(&name)
}
