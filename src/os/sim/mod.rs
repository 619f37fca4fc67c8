//! The simulated kernel: a deterministic, in-memory implementation of [`Os`] on which the
//! protocol code of production ([`crate::protocol::segment`], [`crate::protocol::holders`]) runs unchanged
//! under loom, shuttle, proptest and cargo-fuzz, with many simulated processes.
//!
//! This module owns:
//! - [`SimKernel`]: the shared kernel (process table, named and anonymous objects and
//!   their memory, open-file counts, stream sockets, a logical clock and a seeded random
//!   generator), plus the test controls: [`SimKernel::kill`],
//!   [`SimKernel::kill_at_step`], the fd and space limits, and the helpers that damage an
//!   object as a hostile peer would ([`SimKernel::poke`], [`SimKernel::set_len`],
//!   [`SimKernel::set_owner`]);
//! - [`SimOs`]: one simulated process's view of the kernel, the `Os` the protocol runs on;
//! - [`SimFile`], [`SimMap`], [`SimStream`]: its open files, mappings and sockets.
//!
//! # Processes and crashes
//! Each simulated process is driven by one thread (a loom or shuttle thread under a model
//! checker). A killed process is dead at once, as with SIGKILL: its token is no longer
//! alive and every fallible call it makes returns [`Error::Killed`], but its open files
//! and mappings stay where they are until the test drops its Rust values (the kernel
//! reaping it). [`Os::crash_point`] counts steps, so a test can run a scenario once,
//! read [`SimKernel::steps`], and replay it killing the process at each position.
//!
//! # Memory
//! An object's memory is a `Vec` of [`crate::sync::AtomicU64`] covering its length
//! rounded up to 8 bytes, so loom and shuttle see every access a mapping makes. Bytes
//! are stored in native byte order, as in a real mapping of this machine.
//!
//! # Locking
//! The kernel tables live behind one `std::sync::Mutex` (not the model checker's: they
//! are not part of the protocol under test). No atomic of [`crate::sync`] is ever
//! created, loaded, stored or dropped while that lock is held, because a context switch
//! of loom or shuttle inside a std-locked section would deadlock the checker. No
//! `std::thread` and no real time is used: everything is deterministic given the seed
//! and the schedule.
//!
//! # Files
//! This file holds the simulated machine's constants and the [`Os`] implementation of
//! [`SimOs`], each method handing over to the file of its area:
//! - `kernel`: [`SimKernel`], the tables behind its lock, and the bookkeeping every call
//!   shares (ids, clock, random generator, the caller, references to objects);
//! - `process`: [`SimOs`], the process table, spawning, liveness;
//! - `objects`: objects and [`SimFile`]s: named objects, memfds, seals, `dup`, `fstat`;
//! - `sizing`: `ftruncate`/`posix_fallocate` of an object, the seal and space limit;
//! - `map`: an object's memory, the copies in and out of it, [`SimMap`];
//! - `stream`: [`SimStream`] pairs, sends and receives of bytes and files;
//! - `faults`: kills and crash points, the fd and space limits, hostile damage.
//!
//! Its unit tests are the crate's (`src/tests/sim.rs`).

use std::io;

use crate::error::{Error, Result};
use crate::local::ProcessLocal;
use crate::os::{FileInfo, Listed, Os};
use crate::token::Token;

mod faults;
mod kernel;
mod map;
mod objects;
mod process;
mod sizing;
mod stream;

pub use faults::UnlinkRace;
pub use kernel::SimKernel;
pub use map::SimMap;
pub use objects::SimFile;
pub use process::SimOs;
pub use stream::SimStream;

/// The pid of the first process spawned.
pub const FIRST_PID: u32 = 100;
/// The pid namespace of [`SimKernel::spawn`].
pub const DEFAULT_PID_NAMESPACE: u64 = 1;
/// Open files per process until [`SimKernel::set_fd_limit`] says otherwise (the usual
/// `RLIMIT_NOFILE` soft limit).
pub const DEFAULT_FD_LIMIT: usize = 1024;
/// The simulated machine's memory: no more bytes are ever allocated in total, whatever
/// [`SimKernel::set_space_limit`] says (keeps a hostile or fuzzed length from exhausting
/// the real machine; 64 MiB keeps the copy a growing object makes, atomics included,
/// well under libFuzzer's default 2 GiB rss limit).
pub const MACHINE_BYTES: u64 = 64 << 20;
/// What [`Os::now_unix_nanos`] returns at logical time 0 (November 2023).
const EPOCH_NANOS: u64 = 1_700_000_000_000_000_000;
/// Nanoseconds per tick of the logical clock.
const NANOS_PER_TICK: u64 = 1_000;
/// The longest name `shm_open` accepts (`NAME_MAX`).
pub(crate) const NAME_MAX: usize = 255;

fn os_error(call: &'static str, errno: i32) -> Error {
    Error::os(call, io::Error::from_raw_os_error(errno))
}

impl Os for SimOs {
    type File = SimFile;
    type Map = SimMap;
    type Stream = SimStream;

    fn shm_create(&self, name: &str) -> Result<SimFile> {
        objects::shm_create(self, name)
    }

    fn shm_open(&self, name: &str) -> Result<SimFile> {
        objects::shm_open(self, name)
    }

    fn shm_unlink(&self, name: &str) -> Result<()> {
        objects::shm_unlink(self, name)
    }

    fn shm_link(&self, name: &str, new_name: &str) -> Result<()> {
        objects::shm_link(self, name, new_name)
    }

    fn shm_list(&self, start: &str) -> Result<Vec<String>> {
        objects::shm_list(self, start)
    }

    fn shm_list_owned(
        &self,
        start: &str,
        wanted: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Vec<Listed>> {
        objects::shm_list_owned(self, start, wanted)
    }

    fn shm_owner(&self, name: &str) -> Result<u32> {
        objects::shm_owner(self, name)
    }

    fn memfd_create(&self, _debug_name: &str) -> Result<SimFile> {
        objects::memfd_create(self)
    }

    fn seal_size(&self, file: &SimFile) -> Result<()> {
        objects::seal_size(self, file)
    }

    fn dup(&self, file: &SimFile) -> Result<SimFile> {
        objects::dup(self, file)
    }

    fn allocate(&self, file: &SimFile, len: u64) -> Result<()> {
        sizing::allocate(self, file, len)
    }

    fn stat(&self, file: &SimFile) -> Result<FileInfo> {
        objects::stat(self, file)
    }

    /// Every simulated object is memory.
    fn is_in_memory(&self, file: &SimFile) -> Result<bool> {
        self.check_file(file)?;
        Ok(true)
    }

    fn map(&self, file: &SimFile, len: usize) -> Result<SimMap> {
        map::map(self, file, len)
    }

    fn send(&self, stream: &SimStream, bytes: &[u8], files: &[&SimFile]) -> Result<()> {
        stream::send(self, stream, bytes, files)
    }

    fn recv(&self, stream: &SimStream, buf: &mut [u8], files: &mut Vec<SimFile>) -> Result<usize> {
        stream::recv(self, stream, buf, files)
    }

    fn current(&self) -> Token {
        self.token
    }

    /// Whether a process with this pid and start time exists in this process's pid
    /// namespace and has not been killed.
    fn is_alive(&self, token: Token) -> bool {
        process::is_alive(self, token)
    }

    fn uid(&self) -> u32 {
        self.uid
    }

    fn pid_namespace(&self) -> u64 {
        self.pid_ns
    }

    fn now_unix_nanos(&self) -> u64 {
        process::now_unix_nanos(self)
    }

    fn random_u128(&self) -> Result<u128> {
        process::random_u128(self)
    }

    fn local(&self) -> &ProcessLocal {
        &self.local
    }

    fn crash_point(&self) -> Result<()> {
        faults::crash_point(self)
    }
}
