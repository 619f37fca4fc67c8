//! Connecting two processes: a [`OneShotServer`] listens on a fresh abstract Unix
//! socket (no file to clean up, gone with its process) whose random name the other
//! process gets by any means and passes to [`connect`]; [`spawn`] does both for a
//! child `Command`, passing the name in [`CHANNEL_ENV`], and the child calls
//! [`from_parent`]. The server accepts only a peer of this user (`SO_PEERCRED`), and
//! for [`spawn`] only the child it started.
//!
//! Each side gets a [`Sender`] and a [`Receiver`] over the one connection (the types
//! swap sides: the parent's `Sender<Job>` talks to the child's `Receiver<Job>`).

use std::marker::PhantomData;
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Receiver, Sender};
use crate::error::{Error, Result};
use crate::manager::sys::{peer_credentials, poll_readable};

/// The environment variable through which [`spawn`] tells the child where to connect
/// ([`from_parent`] reads it).
pub const CHANNEL_ENV: &str = "SHMRC_CHANNEL";

/// How long [`spawn`] waits for its child to connect.
const SPAWN_CONNECT_LIMIT: Duration = Duration::from_secs(30);

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
    listener: UnixListener,
    name: String,
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
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)
            .map_err(|e| Error::os("getrandom", std::io::Error::other(e.to_string())))?;
        let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let name = format!("shmrc-channel.{}.{hex}", nix::unistd::geteuid().as_raw());
        let address =
            SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| Error::os("bind", e))?;
        let listener = UnixListener::bind_addr(&address).map_err(|e| Error::os("bind", e))?;
        Ok(OneShotServer {
            listener,
            name,
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
        &self.name
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
        self.accept_from(timeout, None, || Ok(()))
    }

    /// Accepts one connection of this user (and of process `pid`, when given) within
    /// `timeout`; `still_waiting` may end the wait early with its error.
    fn accept_from(
        self,
        timeout: Duration,
        pid: Option<u32>,
        mut still_waiting: impl FnMut() -> Result<()>,
    ) -> Result<(Sender<T>, Receiver<U>)> {
        let deadline = Instant::now() + timeout;
        let me = nix::unistd::geteuid().as_raw();
        loop {
            still_waiting()?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Bootstrap {
                    why: format!("nobody connected to {} within {timeout:?}", self.name),
                });
            }
            // Wake up now and then to let `still_waiting` look (a child that exited).
            let slice = left.min(Duration::from_millis(50));
            let ready = poll_readable(&[self.listener.as_fd()], Some(slice))?;
            if !ready.first().is_some_and(|r| r.readable) {
                continue;
            }
            let (stream, _) = self.listener.accept().map_err(|e| Error::os("accept", e))?;
            let peer = peer_credentials(&stream)?;
            if peer.uid == me && pid.is_none_or(|pid| pid == peer.pid) {
                return pair(stream);
            }
            // Someone else: drop the connection and keep waiting.
        }
    }
}

/// Both ends over one connected stream.
fn pair<T: Serialize, U: DeserializeOwned>(stream: UnixStream) -> Result<(Sender<T>, Receiver<U>)> {
    let other = stream.try_clone().map_err(|e| Error::os("dup", e))?;
    Ok((Sender::from_stream(stream), Receiver::from_stream(other)))
}

/// Connects to the [`OneShotServer`] named `name` (in another process of this user).
/// A name nobody listens on is [`Error::Bootstrap`].
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
    let address =
        SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| Error::os("connect", e))?;
    let stream = UnixStream::connect_addr(&address).map_err(|e| Error::Bootstrap {
        why: format!("cannot connect to {name}: {e}"),
    })?;
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
    let connected = server.accept_from(SPAWN_CONNECT_LIMIT, Some(pid), || match child.try_wait() {
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
