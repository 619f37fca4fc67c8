//! Processes: [`SimOs`] (one simulated process, the `Os` the protocol runs on), the
//! process table entry ([`Proc`]), spawning, and the process half of `Os`: liveness in
//! a pid namespace, the logical clock, random numbers.

use std::fmt;
use std::sync::{Arc, Weak};

use super::kernel::{Garbage, SimKernel, State};
use super::{DEFAULT_FD_LIMIT, DEFAULT_PID_NAMESPACE, EPOCH_NANOS, NANOS_PER_TICK};
use crate::error::Result;
use crate::local::ProcessLocal;
use crate::token::Token;

/// A simulated process, in the process table.
pub(super) struct Proc {
    pub(super) token: Token,
    pub(super) pid_ns: u64,
    pub(super) killed: bool,
    pub(super) kill_at: Option<u64>,
    pub(super) steps: u64,
    pub(super) fds: usize,
    pub(super) fd_limit: usize,
    /// Its process-local state, whose mapping cache its death empties.
    pub(super) local: Weak<ProcessLocal>,
}

impl SimKernel {
    /// A new process of user `uid` in pid namespace [`DEFAULT_PID_NAMESPACE`].
    pub fn spawn(&self, uid: u32) -> SimOs {
        self.spawn_in_namespace(uid, DEFAULT_PID_NAMESPACE)
    }

    /// A new process of user `uid` in pid namespace `pid_ns`: the next pid (from
    /// [`FIRST_PID`](super::FIRST_PID) on, never reused) and a start time from the
    /// logical clock.
    ///
    /// # Panics
    /// When the 4 million pids a token can name are used up.
    pub fn spawn_in_namespace(&self, uid: u32, pid_ns: u64) -> SimOs {
        let local = Arc::new(ProcessLocal::new());
        let (pid, token) = self.with(|st, _| {
            let pid = st.next_pid;
            let start = st.tick();
            let token = Token::new(pid, start).expect("simulated pids exhausted");
            st.next_pid += 1;
            st.procs.insert(
                pid,
                Proc {
                    token,
                    pid_ns,
                    killed: false,
                    kill_at: None,
                    steps: 0,
                    fds: 0,
                    fd_limit: DEFAULT_FD_LIMIT,
                    local: Arc::downgrade(&local),
                },
            );
            (pid, token)
        });
        SimOs {
            kernel: self.clone(),
            pid,
            token,
            uid,
            pid_ns,
            local,
        }
    }
}

/// One simulated process: the [`Os`](crate::os::Os) the protocol runs on. Clones are
/// the same process (same token, same [`ProcessLocal`]).
#[derive(Clone)]
pub struct SimOs {
    pub(super) kernel: SimKernel,
    pub(super) pid: u32,
    pub(super) token: Token,
    pub(super) uid: u32,
    pub(super) pid_ns: u64,
    pub(super) local: Arc<ProcessLocal>,
}

impl SimOs {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process token (pid and start time).
    pub fn token(&self) -> Token {
        self.token
    }

    /// The kernel this process runs on.
    pub fn kernel(&self) -> &SimKernel {
        &self.kernel
    }

    pub(super) fn with<R>(&self, f: impl FnOnce(&mut State, &mut Garbage) -> R) -> R {
        self.kernel.with(f)
    }
}

impl fmt::Debug for SimOs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimOs")
            .field("pid", &self.pid)
            .field("token", &self.token)
            .field("uid", &self.uid)
            .field("pid_ns", &self.pid_ns)
            .finish()
    }
}

/// [`Os::is_alive`](crate::os::Os::is_alive): in the table, with this start time,
/// not killed, and in `os`'s pid namespace.
pub(super) fn is_alive(os: &SimOs, token: Token) -> bool {
    os.with(|st, _| {
        st.procs
            .get(&token.pid())
            .is_some_and(|p| p.token == token && !p.killed && p.pid_ns == os.pid_ns)
    })
}

/// [`Os::now_unix_nanos`](crate::os::Os::now_unix_nanos): the logical clock, one tick
/// further.
pub(super) fn now_unix_nanos(os: &SimOs) -> u64 {
    os.with(|st, _| EPOCH_NANOS + st.tick() * NANOS_PER_TICK)
}

/// [`Os::random_u128`](crate::os::Os::random_u128): two draws of the seeded generator.
pub(super) fn random_u128(os: &SimOs) -> Result<u128> {
    os.with(|st, _| {
        st.caller(os.pid)?;
        let low = st.next_random();
        let high = st.next_random();
        Ok(u128::from(low) | (u128::from(high) << 64))
    })
}
