//! One connection to the user's manager and one request on it: connecting to the
//! socket of a runtime directory (never starting a manager), the frames of a round trip
//! with their timeout, and [`status`]. The Hello and Watch of a client
//! ([`super::client`]) and the start of a manager ([`super::launch`]) both go through
//! here; this room imports neither.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::runtime::RuntimeDir;
use super::sys;
use super::wire::{self, ManagerStatus, Reply, Request};
use crate::error::{Error, Result};
use crate::os::Os;
use crate::os::posix::PosixOs;

/// How long a client waits for a manager to start, or to answer.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to the running manager of `runtime`.
pub(crate) fn connect(runtime: &RuntimeDir) -> Result<UnixStream> {
    let socket = runtime.socket()?;
    if let Err(source) = std::fs::symlink_metadata(runtime.path()) {
        if source.kind() == std::io::ErrorKind::NotFound {
            return Err(Error::NoManager { socket, source });
        }
    }
    runtime.check(PosixOs.uid())?;
    let stream =
        UnixStream::connect(&socket).map_err(|source| Error::NoManager { socket, source })?;
    stream
        .set_read_timeout(Some(START_TIMEOUT))
        .map_err(|e| Error::os("set_read_timeout", e))?;
    // A manager too busy to read for this long is given up on (the caller reconnects).
    stream
        .set_write_timeout(Some(START_TIMEOUT))
        .map_err(|e| Error::os("set_write_timeout", e))?;
    Ok(stream)
}

/// Asks the user's running manager for its counters and clients (what `shmrc status`
/// shows); never starts one. With no manager running: [`Error::NoManager`], naming the
/// socket it tried.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::manager::{self, ManagerMode};
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// manager::set_manager_mode(ManagerMode::Auto); // the default
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(Namespace::new("shmrc-doc-status")?);
/// let buf = ShmBuf::with_options(64, &options)?; // starts the manager if none runs
/// let status = manager::status()?;
/// assert!(status.clients >= 1); // this process, at least
/// println!("manager pid {}, {} sweeps so far", status.pid, status.sweeps);
/// # drop(buf);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn status() -> Result<ManagerStatus> {
    status_at(&RuntimeDir::for_user(PosixOs.uid())?)
}

/// [`status`] of the manager of `runtime` (for a manager of another runtime
/// directory than this user's, as a test starts). [`Error::NoManager`] when none
/// answers there.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::Error;
/// use shmrc::manager::{RuntimeDir, start_detached, status_at};
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir().unwrap();
/// let runtime = RuntimeDir::at(dir.path().join("shmrc"));
/// assert!(matches!(status_at(&runtime), Err(Error::NoManager { .. })));
///
/// let pid = start_detached(&runtime, Duration::from_secs(1))?;
/// let status = status_at(&runtime)?;
/// assert_eq!(status.pid, pid);
/// assert_eq!(status.runtime_dir, runtime.path().display().to_string());
/// // With no client, it exits once its grace period is over.
/// let deadline = std::time::Instant::now() + Duration::from_secs(30);
/// while status_at(&runtime).is_ok() {
///     assert!(std::time::Instant::now() < deadline, "the manager outlived its grace");
///     std::thread::sleep(Duration::from_millis(50));
/// }
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn status_at(runtime: &RuntimeDir) -> Result<ManagerStatus> {
    let stream = connect(runtime)?;
    match exchange(&stream, &Request::Status)? {
        Reply::Status(status) => Ok(status),
        Reply::Refused { reason } => Err(Error::ManagerRefused { reason }),
        Reply::Welcome { .. } => Err(Error::Malformed {
            what: "manager reply",
            why: "a welcome where a status was due".into(),
        }),
    }
}

/// Sends `request` and reads one reply frame.
pub(crate) fn exchange(stream: &UnixStream, request: &Request) -> Result<Reply> {
    send(stream, request)?;
    receive(stream)
}

/// Reads one reply frame, waiting [`START_TIMEOUT`] at most: a manager that sends none
/// by then is [`Error::ManagerTimeout`] (naming its pid and socket), one that closed the
/// connection [`Error::Disconnected`].
pub(crate) fn receive(mut stream: &UnixStream) -> Result<Reply> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let started = Instant::now();
    let timed_out = || Error::ManagerTimeout {
        pid: sys::peer_credentials(stream).ok().map(|peer| peer.pid),
        socket: stream
            .peer_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(PathBuf::from))
            .unwrap_or_default(),
        waited: started.elapsed(),
    };
    loop {
        if let Some(len) = wire::frame_len(&buf, wire::MAX_REPLY_PAYLOAD)? {
            return wire::decode_reply(&buf[..len]);
        }
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            // The socket's read timeout (START_TIMEOUT) ran out.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timed_out());
            }
            Err(e) => return Err(disconnected_or("read from manager")(e)),
        };
        if n == 0 {
            return Err(Error::Disconnected);
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(timed_out());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Writes `request` whole: what a told request costs (the manager does not answer).
pub(crate) fn send(stream: &UnixStream, request: &Request) -> Result<()> {
    sys::send_all(stream, &wire::encode_request(request))
        .map_err(disconnected_or("write to manager"))
}

fn disconnected_or(call: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| match e.kind() {
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => Error::Disconnected,
        _ => Error::os(call, e),
    }
}
