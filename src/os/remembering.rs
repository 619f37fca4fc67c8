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

use crate::error::Result;
use crate::local::ProcessLocal;
use crate::namespace::Namespace;
use crate::os::{FileInfo, Os};
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

impl<O: Os> Os for Remembering<O> {
    type File = O::File;
    type Map = O::Map;
    type Stream = O::Stream;

    fn shm_create(&self, name: &str) -> Result<Self::File> {
        self.os.shm_create(name)
    }
    fn shm_open(&self, name: &str) -> Result<Self::File> {
        self.os.shm_open(name)
    }
    fn shm_unlink(&self, name: &str) -> Result<()> {
        self.os.shm_unlink(name)
    }
    fn shm_list(&self, start: &str) -> Result<Vec<String>> {
        self.os.shm_list(start)
    }
    fn memfd_create(&self, debug_name: &str) -> Result<Self::File> {
        self.os.memfd_create(debug_name)
    }
    fn seal_size(&self, file: &Self::File) -> Result<()> {
        self.os.seal_size(file)
    }
    fn dup(&self, file: &Self::File) -> Result<Self::File> {
        self.os.dup(file)
    }
    fn allocate(&self, file: &Self::File, len: u64) -> Result<()> {
        self.os.allocate(file, len)
    }
    fn stat(&self, file: &Self::File) -> Result<FileInfo> {
        self.os.stat(file)
    }
    fn map(&self, file: &Self::File, len: usize) -> Result<Self::Map> {
        self.os.map(file, len)
    }
    fn send(&self, stream: &Self::Stream, bytes: &[u8], files: &[&Self::File]) -> Result<()> {
        self.os.send(stream, bytes, files)
    }
    fn recv(
        &self,
        stream: &Self::Stream,
        buf: &mut [u8],
        files: &mut Vec<Self::File>,
    ) -> Result<usize> {
        self.os.recv(stream, buf, files)
    }
    fn current(&self) -> Token {
        self.os.current()
    }
    fn is_alive(&self, token: Token) -> bool {
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
    fn uid(&self) -> u32 {
        self.os.uid()
    }
    fn pid_namespace(&self) -> u64 {
        self.os.pid_namespace()
    }
    fn now_unix_nanos(&self) -> u64 {
        self.os.now_unix_nanos()
    }
    fn random_u128(&self) -> Result<u128> {
        self.os.random_u128()
    }
    fn local(&self) -> &ProcessLocal {
        self.os.local()
    }
    fn crash_point(&self) -> Result<()> {
        self.os.crash_point()
    }
    fn before_named_use(&self, ns: &Namespace) -> Result<()> {
        self.os.before_named_use(ns)
    }
}

#[cfg(all(test, not(any(feature = "loom", feature = "shuttle"))))]
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
