//! The system calls of the manager (server and client) and nothing else: `poll` (over
//! connections and process descriptors, [`PidFd`], which the posix backend opens), the
//! credentials of a Unix socket's peer (`SO_PEERCRED`), the single-instance lock
//! (`flock`) and starting a process in a session of its own (`setsid`).
//!
//! # Safety
//! One `unsafe` block, with its reason beside it: the `pre_exec` hook that calls
//! `setsid` and `close_range` between `fork` and `exec` (async-signal-safe, touches no
//! memory of the parent).
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{MsgFlags, getsockopt, send, sockopt::PeerCredentials};

use crate::error::{Error, Result};
pub(crate) use crate::os::posix::{PidFd, pidfd_open};

/// What `SO_PEERCRED` says of the process at the other end of a Unix socket (as it was
/// when it connected).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) struct Peer {
    /// The peer's pid (in this process's pid namespace; 0 when it has none here).
    pub pid: u32,
    /// The peer's effective uid.
    pub uid: u32,
}

/// The credentials of `stream`'s peer.
pub(crate) fn peer_credentials(stream: &UnixStream) -> Result<Peer> {
    let cred = getsockopt(stream, PeerCredentials).map_err(|e| Error::os("getsockopt", e))?;
    Ok(Peer {
        pid: u32::try_from(cred.pid()).unwrap_or(0),
        uid: cred.uid(),
    })
}

/// What `poll` reported for one descriptor.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub(crate) struct Readiness {
    /// Data (or a connection, or a process exit) is waiting.
    pub readable: bool,
    /// The peer hung up or the descriptor is in error.
    pub hung_up: bool,
}

/// `timeout` in poll's whole milliseconds, rounded up so that a wait never ends
/// before its deadline; zero stays zero (a check that does not wait: rounding it up
/// to 1 ms made every such check sleep, e.g. the client's health check before each
/// segment it names to the manager).
fn poll_timeout(timeout: Option<Duration>) -> PollTimeout {
    match timeout {
        None => PollTimeout::NONE,
        Some(t) => PollTimeout::try_from(t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128))
            .unwrap_or(PollTimeout::MAX),
    }
}

/// Waits until one of `fds` is readable or hung up, or `timeout` passes (`None`:
/// forever); says what each became. An interrupted wait returns with nothing ready.
pub(crate) fn poll_readable(
    fds: &[BorrowedFd<'_>],
    timeout: Option<Duration>,
) -> Result<Vec<Readiness>> {
    let mut pollfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
        .collect();
    match poll(&mut pollfds, poll_timeout(timeout)) {
        Ok(_) => {}
        Err(Errno::EINTR) => return Ok(vec![Readiness::default(); fds.len()]),
        Err(e) => return Err(Error::os("poll", e)),
    }
    Ok(pollfds
        .iter()
        .map(|p| {
            let revents = p.revents().unwrap_or(PollFlags::empty());
            Readiness {
                readable: revents.contains(PollFlags::POLLIN),
                hung_up: revents
                    .intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL),
            }
        })
        .collect())
}

/// Writes all of `bytes` to `stream` with `MSG_NOSIGNAL`: a peer that went away is an
/// `EPIPE` error, never a `SIGPIPE` that would kill a process that did not ignore it.
pub(crate) fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match send(stream.as_raw_fd(), bytes, MsgFlags::MSG_NOSIGNAL) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// An exclusive `flock` on a file, held until dropped.
#[derive(Debug)]
pub(crate) struct FileLock(#[allow(dead_code)] Flock<File>);

/// Takes an exclusive lock on `file` without waiting: `Ok(None)` when another open file
/// description holds it.
pub(crate) fn try_lock_exclusive(file: File) -> Result<Option<FileLock>> {
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(FileLock(lock))),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(Error::os("flock", e)),
    }
}

/// Spawns `command` as the leader of a new session (`setsid` in the child before
/// `exec`): it has no controlling terminal and is not in the caller's process group, so
/// signals sent to that group (a job killed with its group) do not reach it.
pub(crate) fn spawn_in_new_session(command: &mut Command) -> std::io::Result<Child> {
    // SAFETY: the hook runs in the forked child before exec and only makes two system
    // calls (setsid, close_range), which are async-signal-safe and allocate nothing.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)?;
            // A long-lived daemon must not keep the caller's other descriptors open (a
            // pipe someone waits on for end-of-file): every descriptor from 3 up closes
            // at exec. A kernel without close_range (before 5.11) leaves them as they
            // are, as before.
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
    command.spawn()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_pidfd_becomes_readable_when_its_process_exits() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pidfd = pidfd_open(child.id()).unwrap();
        let ready = poll_readable(&[pidfd.as_fd()], Some(Duration::ZERO)).unwrap();
        assert!(!ready[0].readable, "alive: not readable");
        child.kill().unwrap();
        let ready = poll_readable(&[pidfd.as_fd()], None).unwrap();
        assert!(ready[0].readable);
        child.wait().unwrap();
    }

    #[test]
    fn peer_credentials_name_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let cred = peer_credentials(&a).unwrap();
        assert_eq!(cred.pid, std::process::id());
        assert_eq!(cred.uid, nix::unistd::geteuid().as_raw());
    }

    #[test]
    fn sending_to_a_closed_peer_is_an_error_not_a_signal() {
        let (a, b) = UnixStream::pair().unwrap();
        send_all(&a, b"ok").unwrap();
        drop(b);
        let e = send_all(&a, b"gone").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_second_lock_on_the_same_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let open = || File::create(&path).unwrap();
        let held = try_lock_exclusive(open()).unwrap();
        assert!(held.is_some());
        assert!(try_lock_exclusive(open()).unwrap().is_none());
        drop(held);
        assert!(try_lock_exclusive(open()).unwrap().is_some());
    }

    #[test]
    fn a_spawned_session_leader_has_its_own_session() {
        let mut child = spawn_in_new_session(Command::new("sleep").arg("30")).unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        assert_eq!(nix::unistd::getsid(Some(pid)).unwrap(), pid);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn poll_timeouts_round_up_to_whole_milliseconds_and_zero_stays_zero() {
        let ms = |t: Option<Duration>| i32::from(poll_timeout(t));
        assert_eq!(ms(Some(Duration::ZERO)), 0);
        assert_eq!(ms(Some(Duration::from_nanos(1))), 1);
        assert_eq!(ms(Some(Duration::from_millis(1))), 1);
        assert_eq!(ms(Some(Duration::from_micros(1500))), 2);
        assert_eq!(ms(Some(Duration::from_secs(u64::MAX))), i32::MAX);
        assert_eq!(ms(None), -1);
    }

    #[test]
    fn a_spawned_session_leader_keeps_none_of_the_callers_other_descriptors() {
        // A pipe without close-on-exec: a plain spawn would hand its write end over.
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        let mut child = spawn_in_new_session(Command::new("sleep").arg("30")).unwrap();
        drop(write_end);
        // `spawn` returned after the exec: if the child kept the write end, the read end
        // would not see end-of-file. Another test of this binary may be between a fork
        // and its exec, holding a copy for a moment: wait up to 5 s, not zero.
        let mut fds = [PollFd::new(read_end.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::from(5000u16)).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(ready, 1, "the child holds the caller's pipe");
    }
}
