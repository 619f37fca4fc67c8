//! [`Remembering`]: an [`Os`] that asks about each process's liveness once and
//! remembers the answer, for one pass of a sweep over many segments whose slots name the
//! same few processes (each question costs the real backend a read of `/proc`).
//!
//! Why a remembered answer is safe for one pass:
//! - "dead" is forever: a token names one process (pid and start time), which never
//!   runs again once it ended;
//! - "alive" may go stale while the pass runs, which only keeps a slot a moment longer
//!   (never P1's premature destruction): the pass then treats that holder as if it had
//!   died just after the pass, and whoever learns of the death later (the manager, on
//!   the dead process's pidfd, or the next sweep or release) reclaims it;
//! - the same holds for a finalizer word: a finalizer remembered as alive that died
//!   makes the pass defer to it and leave its tombstones to the next finalize (which
//!   takes over from the dead one), as it would have had it died just after the check.
//!
//! Everything else is passed through unchanged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::os::{Layer, Os};
use crate::token::Token;

/// `O`, with [`Os::is_alive`] answered once per token (see the module docs). Make a new
/// one for each pass; clones share its memory.
#[derive(Clone, Debug)]
pub struct Remembering<O: Os> {
    os: O,
    answers: Arc<Mutex<HashMap<Token, bool>>>,
}

impl<O: Os> Remembering<O> {
    /// A pass over `os` that remembers nothing yet.
    pub fn new(os: O) -> Remembering<O> {
        Remembering {
            os,
            answers: Arc::default(),
        }
    }
}

impl<O: Os> Layer for Remembering<O> {
    type Inner = O;

    fn inner(&self) -> &O {
        &self.os
    }

    fn answer_is_alive(&self, token: Token) -> bool {
        let known = self
            .answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&token)
            .copied();
        // Asked outside the lock: the simulated kernel takes a lock of its own.
        known.unwrap_or_else(|| {
            let alive = self.os.is_alive(token);
            self.answers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(token, alive);
            alive
        })
    }
}

#[cfg(all(test, not(any(shmrc_loom, shmrc_shuttle))))]
mod tests {
    use super::*;
    use crate::os::sim::SimKernel;

    #[test]
    fn a_liveness_answer_is_asked_once_and_remembered_for_the_pass() {
        let kernel = SimKernel::new(1);
        let (me, other) = (kernel.spawn(1000), kernel.spawn(1000));
        let pass = Remembering::new(me.clone());
        assert!(pass.is_alive(other.current()));
        kernel.kill(other.pid());
        assert!(
            pass.is_alive(other.current()),
            "remembered as alive for this pass"
        );
        let next = Remembering::new(me);
        assert!(!next.is_alive(other.current()), "a new pass asks again");
        assert!(!next.is_alive(other.current()));
    }
}
