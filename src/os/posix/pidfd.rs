//! Process descriptors (`pidfd_open`): a descriptor on one process that turns readable
//! once that process has exited, whatever becomes of its pid afterwards; and
//! [`Watched`], the bounded table of them this process keeps so that asking again
//! whether a holder lives is one `poll` instead of a read of `/proc/<pid>/stat`. The
//! manager watches its clients with the same descriptors.
//!
//! # Safety
//! Two `unsafe` blocks, in [`pidfd_open`]: the raw system call (no safe wrapper in std
//! or nix) and taking ownership of the descriptor it returns; and one in the unit tests,
//! closing a descriptor a test left open on purpose.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::error::{Error, Result};
use crate::token::Token;

/// A process descriptor (close-on-exec): readable (`POLLIN`) once the process has
/// exited. A zombie has exited; so has a thread-group leader only once every thread of
/// its group has.
#[derive(Debug)]
pub(crate) struct PidFd(OwnedFd);

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl PidFd {
    /// Whether the process has exited, from one `poll` that does not wait; `None` when
    /// the poll fails (interrupted, or the descriptor is in error).
    pub(crate) fn has_exited(&self) -> Option<bool> {
        let mut fds = [PollFd::new(self.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => {
                let revents = fds[0].revents()?;
                if revents.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
                    return None;
                }
                Some(revents.contains(PollFlags::POLLIN))
            }
            Err(_) => None,
        }
    }
}

/// Opens a process descriptor for `pid`. It refers to whichever process has that pid
/// *now*: check the process's identity (its token's start time) after opening.
pub(crate) fn pidfd_open(pid: u32) -> Result<PidFd> {
    let raw_pid = libc::pid_t::try_from(pid)
        .map_err(|_| Error::InvalidArgument(format!("pid {pid} is out of range")))?;
    // SAFETY: pidfd_open takes a pid and a flags word (0) and returns a new descriptor
    // or -1; it reads and writes no memory of this process.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, raw_pid, 0 as libc::c_uint) };
    if ret < 0 {
        return Err(Error::os("pidfd_open", Errno::last()));
    }
    let fd = libc::c_int::try_from(ret).map_err(|_| {
        Error::os(
            "pidfd_open",
            std::io::Error::other("descriptor out of range"),
        )
    })?;
    // SAFETY: the kernel just installed `fd` in this process's table and nothing else
    // owns it.
    Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Process descriptors on processes found alive, by token, at most `capacity` of them,
/// for the process `owner` that opened them. Each was opened on the token's pid
/// *before* `/proc` showed that pid with the token's start time, so it is on that very
/// process, and a reused pid cannot fool it.
///
/// The table only ever answers "runs": a descriptor that turned readable (or cannot
/// tell) sends the question back to `/proc`, which alone says "dead". A descriptor
/// number is trusted only while it is this table's: code that closes descriptors it
/// does not own (a daemon's `close_range` after `fork`) can have the number reused by
/// another file. A readable one is therefore closed only when `fstat` still finds the
/// file it was at [`Watched::keep`] (otherwise it is someone else's now, and is left
/// open), and a table inherited across `fork` is dropped without closing anything
/// ([`Watched::for_process`]).
#[derive(Debug)]
pub(super) struct Watched {
    pidfds: HashMap<Token, Kept>,
    capacity: usize,
    owner: u32,
}

/// A kept descriptor and the file it was when kept (`st_dev`, `st_ino`).
#[derive(Debug)]
struct Kept {
    pidfd: PidFd,
    file: (u64, u64),
}

impl Kept {
    /// Closes the descriptor if it is still the file it was when kept; leaves it open
    /// if not (its number belongs to another file now).
    fn let_go(self) {
        if file_of(self.pidfd.as_fd()) != Some(self.file) {
            std::mem::forget(self.pidfd);
        }
    }
}

/// `(st_dev, st_ino)` of `fd`, or `None` when `fstat` fails.
fn file_of(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    let stat = nix::sys::stat::fstat(fd).ok()?;
    Some((stat.st_dev, stat.st_ino))
}

impl Watched {
    /// An empty table for process `owner` (its pid) that keeps at most `capacity`
    /// descriptors.
    pub(super) fn new(capacity: usize, owner: u32) -> Watched {
        Watched {
            pidfds: HashMap::new(),
            capacity,
            owner,
        }
    }

    /// This table when process `pid` owns it; after a `fork`, a new empty one for the
    /// child, the parent's descriptors left open (the child may have closed and reused
    /// their numbers: closing them could close its files).
    pub(super) fn for_process(&mut self, pid: u32) -> &mut Watched {
        if self.owner != pid {
            self.start_afresh(pid);
        }
        self
    }

    /// Empties the table for process `pid`, leaving every descriptor it held open (they
    /// are a parent's, inherited across `fork`).
    pub(super) fn start_afresh(&mut self, pid: u32) {
        let inherited = std::mem::replace(self, Watched::new(self.capacity, pid));
        for (_, kept) in inherited.pidfds {
            std::mem::forget(kept.pidfd);
        }
    }

    /// Whether `token`'s process is watched and its descriptor says it runs. A
    /// descriptor that says it exited, or cannot tell, is dropped from the table (closed
    /// if it is still the file it was when kept, left open if not): `false` then means
    /// "ask `/proc`", never "dead".
    pub(super) fn runs(&mut self, token: Token) -> bool {
        let Some(kept) = self.pidfds.get(&token) else {
            return false;
        };
        if kept.pidfd.has_exited() == Some(false) {
            return true;
        }
        if let Some(kept) = self.pidfds.remove(&token) {
            kept.let_go();
        }
        false
    }

    /// Watches `token`'s process with `pidfd`, opened on its pid before the token was
    /// found alive. When the table is full, a process watched before is forgotten first.
    /// A descriptor `fstat` cannot describe is not kept.
    pub(super) fn keep(&mut self, token: Token, pidfd: PidFd) {
        let Some(file) = file_of(pidfd.as_fd()) else {
            return;
        };
        if self.pidfds.len() >= self.capacity && !self.pidfds.contains_key(&token) {
            let Some(forgotten) = self.pidfds.keys().next().copied() else {
                return; // a capacity of 0 keeps nothing
            };
            if let Some(kept) = self.pidfds.remove(&forgotten) {
                kept.let_go();
            }
        }
        if let Some(kept) = self.pidfds.insert(token, Kept { pidfd, file }) {
            kept.let_go();
        }
    }

    /// Closes every descriptor of the table (each only if it is still the file it was
    /// when kept) and returns how many processes it watched.
    pub(super) fn release_all(&mut self) -> usize {
        let released = self.pidfds.len();
        for (_, kept) in self.pidfds.drain() {
            kept.let_go();
        }
        released
    }

    /// How many processes are watched.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.pidfds.len()
    }

    /// Whether `token`'s process is watched.
    #[cfg(test)]
    pub(super) fn watches(&self, token: Token) -> bool {
        self.pidfds.contains_key(&token)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, RawFd};
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    use super::*;

    /// A child that sleeps until killed (by the test that started it, by pid).
    fn sleeper() -> Child {
        Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep")
    }

    fn end(mut child: Child) {
        let _ = child.kill();
        child.wait().expect("reap the child");
    }

    /// What descriptor `fd` of this process is open on, if it is open.
    fn open_on(fd: RawFd) -> Option<std::path::PathBuf> {
        std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
    }

    /// Closes `fd`, which a test left open on purpose and nothing else owns.
    fn close_left_open(fd: RawFd) {
        // SAFETY: the caller's test made `fd` and checked that no owner is left (the
        // table forgot it); it is closed once, here.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }

    #[test]
    fn a_watched_process_runs_until_it_exits_and_is_then_dropped() {
        let mut child = sleeper();
        let token = Token::new(child.id(), 1).unwrap();
        let mut watched = Watched::new(4, std::process::id());
        assert!(!watched.runs(token), "not watched: ask /proc");
        watched.keep(token, pidfd_open(child.id()).unwrap());
        assert!(watched.runs(token));
        assert!(watched.runs(token), "asked again: still watched");
        child.kill().unwrap();
        // Killed, not reaped: a zombie has exited (the kill lands asynchronously).
        let deadline = Instant::now() + Duration::from_secs(10);
        while watched.runs(token) {
            assert!(Instant::now() < deadline, "the kill seen within 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!watched.watches(token), "an exited process is dropped");
        assert!(!watched.runs(token));
        child.wait().unwrap();
    }

    #[test]
    fn the_table_keeps_at_most_its_capacity() {
        let me = std::process::id();
        let token = |start| Token::new(me, start).unwrap();
        let mut watched = Watched::new(2, me);
        for start in 1..=3 {
            watched.keep(token(start), pidfd_open(me).unwrap());
        }
        assert_eq!(watched.len(), 2);
        assert!(watched.watches(token(3)), "the newest is kept");
        // Kept again, a watched token replaces its own entry and no other (one of the
        // two is not the first the table would evict).
        let kept: Vec<Token> = (1..=3).map(token).filter(|t| watched.watches(*t)).collect();
        for again in kept {
            watched.keep(again, pidfd_open(me).unwrap());
            assert_eq!(watched.len(), 2, "{again:?} kept again");
        }
        let mut none = Watched::new(0, me);
        none.keep(token(1), pidfd_open(me).unwrap());
        assert_eq!(none.len(), 0);
    }

    /// Code that closes descriptors it does not own can have a kept number reused by
    /// another file, here `/dev/null` (always readable): the table does not take its
    /// readiness for an exit it would answer (it answers "ask `/proc`"), and leaves the
    /// other file open.
    #[test]
    fn a_kept_number_reused_by_another_file_is_neither_believed_nor_closed() {
        let child = sleeper();
        let token = Token::new(child.id(), 1).unwrap();
        let mut watched = Watched::new(4, std::process::id());
        watched.keep(token, pidfd_open(child.id()).unwrap());
        let kept = watched.pidfds.get_mut(&token).unwrap();
        let number = kept.pidfd.0.as_raw_fd();
        let null = std::fs::File::open("/dev/null").unwrap();
        nix::unistd::dup2(&null, &mut kept.pidfd.0).unwrap();
        assert!(!watched.runs(token), "readable: ask /proc");
        assert!(!watched.watches(token));
        assert_eq!(
            open_on(number).as_deref(),
            Some(std::path::Path::new("/dev/null")),
            "the other file's descriptor is left open"
        );
        close_left_open(number);
        end(child);
    }

    #[test]
    fn a_table_inherited_across_fork_is_replaced_without_closing_anything() {
        let child = sleeper();
        let token = Token::new(child.id(), 1).unwrap();
        let parent = std::process::id();
        let mut watched = Watched::new(4, parent);
        watched.keep(token, pidfd_open(child.id()).unwrap());
        let number = watched.pidfds[&token].pidfd.0.as_raw_fd();
        assert!(
            watched.for_process(parent).watches(token),
            "its owner keeps it"
        );
        let forked = watched.for_process(parent + 1);
        assert_eq!(forked.len(), 0, "another process starts afresh");
        assert!(
            open_on(number).is_some(),
            "the inherited descriptor is left open"
        );
        close_left_open(number);
        end(child);
    }

    #[test]
    fn a_pid_nobody_has_is_an_error() {
        assert!(matches!(
            pidfd_open(u32::MAX),
            Err(Error::InvalidArgument(_))
        ));
        // Pids are below 2^22 (the kernel's PID_MAX_LIMIT).
        assert!(matches!(
            pidfd_open(1 << 22),
            Err(Error::Os {
                call: "pidfd_open",
                ..
            })
        ));
    }
}
