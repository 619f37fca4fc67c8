//! Process descriptors (`pidfd_open`): a descriptor on one process that turns readable
//! once that process has exited, whatever becomes of its pid afterwards; and
//! [`Watched`], the bounded table of them this process keeps so that asking again
//! whether a holder lives is one `poll` instead of a read of `/proc/<pid>/stat`. The
//! manager watches its clients with the same descriptors.
//!
//! # Safety
//! Two `unsafe` blocks, in [`pidfd_open`]: the raw system call (no safe wrapper in std
//! or nix) and taking ownership of the descriptor it returns.
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
pub struct PidFd(OwnedFd);

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl PidFd {
    /// Whether the process has exited, from one `poll` that does not wait; `None` when
    /// the poll fails (interrupted, or the descriptor is in error).
    pub fn has_exited(&self) -> Option<bool> {
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
pub fn pidfd_open(pid: u32) -> Result<PidFd> {
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

/// Process descriptors on processes found alive, by token, at most `capacity` of them.
/// Each was opened on the token's pid *before* `/proc` showed that pid with the token's
/// start time, so it is on that very process: it answers for the token until it
/// turns readable, and a reused pid cannot fool it.
#[derive(Debug)]
pub struct Watched {
    pidfds: HashMap<Token, PidFd>,
    capacity: usize,
}

impl Watched {
    /// An empty table that keeps at most `capacity` descriptors.
    pub fn new(capacity: usize) -> Watched {
        Watched {
            pidfds: HashMap::new(),
            capacity,
        }
    }

    /// Whether `token`'s process lives, if it is watched (`None`: not watched, or its
    /// descriptor could not tell). A process found exited, or a descriptor that cannot
    /// tell, is forgotten (and its descriptor closed).
    pub fn ask(&mut self, token: Token) -> Option<bool> {
        match self.pidfds.get(&token)?.has_exited() {
            Some(false) => Some(true),
            Some(true) => {
                self.pidfds.remove(&token);
                Some(false)
            }
            None => {
                self.pidfds.remove(&token);
                None
            }
        }
    }

    /// Watches `token`'s process with `pidfd`, opened on its pid before the token was
    /// found alive. When the table is full, a process watched before is forgotten first.
    pub fn keep(&mut self, token: Token, pidfd: PidFd) {
        if self.pidfds.len() >= self.capacity && !self.pidfds.contains_key(&token) {
            let Some(forgotten) = self.pidfds.keys().next().copied() else {
                return; // a capacity of 0 keeps nothing
            };
            self.pidfds.remove(&forgotten);
        }
        self.pidfds.insert(token, pidfd);
    }

    /// How many processes are watched.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.pidfds.len()
    }

    /// Whether `token`'s process is watched.
    #[cfg(test)]
    pub fn watches(&self, token: Token) -> bool {
        self.pidfds.contains_key(&token)
    }
}

#[cfg(test)]
mod tests {
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

    /// `ask` for `token` until it says dead, for at most 10 s (a SIGKILL is delivered
    /// asynchronously); what it said last.
    fn ask_until_dead(watched: &mut Watched, token: Token) -> Option<bool> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let said = watched.ask(token);
            if said != Some(true) || Instant::now() > deadline {
                return said;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_watched_process_lives_until_it_exits_and_is_then_forgotten() {
        let mut child = sleeper();
        let token = Token::new(child.id(), 1).unwrap();
        let mut watched = Watched::new(4);
        assert_eq!(watched.ask(token), None, "not watched yet");
        watched.keep(token, pidfd_open(child.id()).unwrap());
        assert_eq!(watched.ask(token), Some(true));
        assert_eq!(watched.ask(token), Some(true), "asked again: still watched");
        child.kill().unwrap();
        // Killed, not reaped: a zombie has exited.
        assert_eq!(ask_until_dead(&mut watched, token), Some(false));
        assert!(!watched.watches(token), "an exited process is forgotten");
        assert_eq!(watched.ask(token), None);
        child.wait().unwrap();
    }

    #[test]
    fn the_table_keeps_at_most_its_capacity() {
        let me = std::process::id();
        let token = |start| Token::new(me, start).unwrap();
        let mut watched = Watched::new(2);
        for start in 1..=3 {
            watched.keep(token(start), pidfd_open(me).unwrap());
        }
        assert_eq!(watched.len(), 2);
        assert!(watched.watches(token(3)), "the newest is kept");
        // Kept again, a watched token replaces its own entry, no other.
        watched.keep(token(3), pidfd_open(me).unwrap());
        assert_eq!(watched.len(), 2);
        let mut none = Watched::new(0);
        none.keep(token(1), pidfd_open(me).unwrap());
        assert_eq!(none.len(), 0);
    }

    #[test]
    fn a_pid_that_runs_nothing_cannot_be_watched() {
        // pid_max is at most 2^22: this pid never runs.
        assert!(matches!(
            pidfd_open((1 << 22) - 1),
            Err(Error::Os {
                call: "pidfd_open",
                ..
            })
        ));
    }
}
