//! The production backend: [`PosixOs`] implements [`Os`] with Linux system calls
//! (`shm_open`, `memfd_create`, `posix_fallocate`, `mmap`, `SCM_RIGHTS`, `/proc`) and
//! nothing else. It owns every `unsafe` line and every syscall shmrc makes; the protocol
//! modules only ever see it through the [`Os`] and [`Mapping`] traits.
//!
//! Memory of a mapping may be written at any moment by another process, so this module
//! never hands out `&[u8]` over it on its own: [`Mapping::read`] and [`Mapping::write`]
//! copy with volatile accesses, header words are [`AtomicU64`]s, and the zero-copy
//! [`DataRegion`] slices are `unsafe` with the caller's duty spelled out.
//!
//! This file holds the two types every call takes ([`PosixOs`], [`PosixFile`]) and the
//! [`Os`] implementation, each method handing over to the file of its area:
//! - `limits`: the `RLIMIT_NOFILE` soft limit ([`raise_fd_limit`]) that
//!   [`Error::TooManyFds`](crate::Error::TooManyFds) reports;
//! - `shm`: named objects, memfds, seals, `dup`, sizing and `fstat`, and the
//!   [`Error::TooManyFds`](crate::Error::TooManyFds) of a call out of descriptors;
//! - `capacity`: whether memory (the file system, the machine, the memory cgroup) can
//!   back a reservation, asked before it is made;
//! - `map`: `mmap`, [`PosixMap`], the copies in and out of shared memory and
//!   [`DataRegion`] (`unsafe`);
//! - `socket`: bytes and descriptors over a stream socket (`SCM_RIGHTS`, `unsafe`);
//! - `process`: this process's token, liveness through `/proc`, uid, pid namespace,
//!   clock and random numbers;
//! - `proc_stat`: the fields of `/proc/<pid>/stat` that `process` and `timens` read;
//! - `timens`: how this process's time namespace shifts the start times it reads, and
//!   taking that shift off, so that tokens compare across time namespaces;
//! - `pidfd`: process descriptors (`unsafe`), and the table of those kept on processes
//!   found alive, so that liveness asked again is one `poll`;
//! - `futex`: sleeping on a shared word until another process changes it and wakes
//!   it (`unsafe`);
//! - `fork_guard`: this process's pid without a `getpid` per question, from a page the
//!   kernel wipes in a forked child (`unsafe`).
//!
//! [`AtomicU64`]: crate::sync::AtomicU64
//! [`Mapping`]: crate::os::Mapping
//! [`Mapping::read`]: crate::os::Mapping::read
//! [`Mapping::write`]: crate::os::Mapping::write

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::error::Result;
use crate::local::ProcessLocal;
use crate::os::{FileInfo, Listed, Os};
use crate::sync::AtomicU64;
use crate::token::Token;

mod capacity;
mod fork_guard;
mod futex;
mod limits;
mod map;
mod pidfd;
mod proc_stat;
mod process;
mod shm;
mod socket;
mod timens;

pub use limits::raise_fd_limit;
pub use map::{DataRegion, PosixMap, SealedMap};
pub(crate) use pidfd::{PidFd, pidfd_open};

/// The real kernel, seen from this process. Every value stands for the calling
/// process; it holds no state of its own (the process-wide state is in statics).
#[derive(Clone, Copy, Debug, Default)]
pub struct PosixOs;

impl PosixOs {
    /// The real kernel, for this process.
    pub const fn new() -> PosixOs {
        PosixOs
    }

    /// Seals a memfd against every write for good (frozen buffers); refused with
    /// [`Error::CannotFreeze`](crate::Error::CannotFreeze) while a writable mapping of it
    /// exists anywhere. `segment` names it in errors. Not part of [`Os`]: the simulated
    /// kernel has no write seals, and frozen buffers exist on the real kernel only.
    pub fn seal_writes(&self, file: &PosixFile, segment: &str) -> Result<()> {
        shm::seal_writes(file, segment)
    }

    /// Maps `len` bytes of a write-sealed memfd read-only; `Ok(None)` when the file is
    /// not sealed against writes (see [`SealedMap`]).
    pub fn map_sealed(&self, file: &PosixFile, len: usize) -> Result<Option<SealedMap>> {
        map::map_sealed(self, file, len)
    }
}

/// An open shared-memory object or memfd: an owned file descriptor, closed on drop.
#[derive(Debug)]
pub struct PosixFile(OwnedFd);

impl PosixFile {
    /// The owned descriptor.
    pub fn into_inner(self) -> OwnedFd {
        self.0
    }
}

impl From<OwnedFd> for PosixFile {
    fn from(fd: OwnedFd) -> PosixFile {
        PosixFile(fd)
    }
}

impl AsFd for PosixFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for PosixFile {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl Os for PosixOs {
    type File = PosixFile;
    type Map = PosixMap;
    type Stream = UnixStream;

    fn shm_create(&self, name: &str) -> Result<PosixFile> {
        shm::create(name)
    }

    fn shm_open(&self, name: &str) -> Result<PosixFile> {
        shm::open(self, name)
    }

    fn shm_unlink(&self, name: &str) -> Result<()> {
        shm::unlink(name)
    }

    fn shm_link(&self, name: &str, new_name: &str) -> Result<()> {
        shm::link(name, new_name)
    }

    fn shm_list(&self, start: &str) -> Result<Vec<String>> {
        shm::list(start)
    }

    fn shm_list_owned(
        &self,
        start: &str,
        wanted: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Vec<Listed>> {
        shm::list_owned(start, wanted)
    }

    fn shm_owner(&self, name: &str) -> Result<u32> {
        shm::owner(name)
    }

    fn memfd_create(&self, debug_name: &str) -> Result<PosixFile> {
        shm::memfd_create(debug_name)
    }

    fn seal_size(&self, file: &PosixFile) -> Result<()> {
        shm::seal_size(file)
    }

    fn dup(&self, file: &PosixFile) -> Result<PosixFile> {
        shm::dup(file)
    }

    fn allocate(&self, file: &PosixFile, len: u64) -> Result<()> {
        shm::allocate(file, len)
    }

    fn stat(&self, file: &PosixFile) -> Result<FileInfo> {
        shm::stat(file)
    }

    fn is_in_memory(&self, file: &PosixFile) -> Result<bool> {
        shm::is_in_memory(file)
    }

    fn map(&self, file: &PosixFile, len: usize) -> Result<PosixMap> {
        map::map(self, file, len)
    }

    fn map_stated(&self, file: &PosixFile, len: usize, file_len: u64) -> Result<PosixMap> {
        map::map_stated(file, len, file_len)
    }

    fn send(&self, stream: &UnixStream, bytes: &[u8], files: &[&PosixFile]) -> Result<()> {
        socket::send(stream, bytes, files)
    }

    fn recv(
        &self,
        stream: &UnixStream,
        buf: &mut [u8],
        files: &mut Vec<PosixFile>,
    ) -> Result<usize> {
        socket::recv(stream, buf, files)
    }

    fn current(&self) -> Token {
        process::current()
    }

    fn is_alive(&self, token: Token) -> bool {
        process::is_alive(token)
    }

    fn uid(&self) -> u32 {
        process::uid()
    }

    fn pid_namespace(&self) -> u64 {
        process::pid_namespace()
    }

    fn check_time_namespace(&self) -> Result<()> {
        timens::check()
    }

    fn now_unix_nanos(&self) -> u64 {
        process::now_unix_nanos()
    }

    fn random_u128(&self) -> Result<u128> {
        process::random_u128()
    }

    fn random_u128_and_u64(&self) -> Result<(u128, u64)> {
        process::random_u128_and_u64()
    }

    fn local(&self) -> &ProcessLocal {
        process::local()
    }

    #[inline]
    fn crash_point(&self) -> Result<()> {
        Ok(())
    }

    fn wait_word(&self, word: &AtomicU64, seen: u64, timeout: std::time::Duration) -> bool {
        futex::wait(word, seen, timeout)
    }

    fn wake_word(&self, word: &AtomicU64) {
        futex::wake_all(word)
    }

    /// Refuses a process whose token others could not judge ([`Os::check_time_namespace`])
    /// before it tells a manager about it or takes a slot.
    fn before_named_use(&self, _namespace: &str, _segment: Option<&str>) -> Result<()> {
        timens::check()
    }
}
