//! The abstract OS, and the syscall layer under it: every effect shmrc's protocol has on
//! the world goes through [`Os`], so the same protocol code runs on the real kernel
//! ([`posix`]) and on a simulated one ([`sim`]) that loom, shuttle, proptest and
//! cargo-fuzz drive. This layer points only down (to `error`, `token`, `local`, `sync`):
//! a policy such as "the manager watches this process" wraps an `Os` from above
//! (`crate::manager::Watched`), as the sweep's liveness memo does ([`remembering`]).
//!
//! The trait is deliberately small: named shared-memory objects, memfds, sizing,
//! mapping, fd passing over a stream socket, and process identity. A mapping hands the
//! protocol *typed* words ([`Mapping::words`]), never raw bytes to cast, because loom's
//! and shuttle's atomics do not have the layout of real ones.
//!
//! Contract every backend keeps (checked by the conformance suite in
//! `tests/os_conformance.rs`, written once and run on both backends):
//! - `shm_create` is exclusive (`O_CREAT|O_EXCL`, mode 0600) and fails with
//!   [`Error::Os`](crate::Error::Os) carrying `AlreadyExists` when the name exists;
//! - `shm_open`/`shm_unlink` of a missing name fail with [`Error::Gone`](crate::Error::Gone);
//! - `shm_link` gives an existing object a second name exclusively: `AlreadyExists`
//!   when the new name exists, [`Error::Gone`](crate::Error::Gone) when the old one
//!   does not; the object stays until its last name is unlinked (and nothing else
//!   holds it);
//! - `allocate` reserves the bytes (`posix_fallocate`): a full file system is
//!   [`Error::NoSpace`](crate::Error::NoSpace) there, never a fault on first touch;
//! - `map` maps exactly the length given; a length of 0 or beyond the file's length is
//!   [`Error::InvalidArgument`](crate::Error::InvalidArgument) (never a mapping that faults on first touch);
//! - `allocate` on an object that is mapped may only be asked to keep or shrink its
//!   length (the protocol sizes an object once, before mapping it); shrinking a sealed
//!   memfd fails;
//! - files dropped are closed, mappings dropped are unmapped;
//! - `is_alive(t)` is true while the process named by `t` runs, and never false for a
//!   running process of this pid namespace (a zombie counts as dead: it will take no
//!   further step, unless it is a thread-group leader whose other threads still run;
//!   a process hidden from `/proc` counts as alive);
//! - `crash_point` is where the simulated kernel may kill the caller; it is a no-op on
//!   the real kernel.

use std::fmt;

use crate::error::Result;
use crate::local::ProcessLocal;
use crate::sync::AtomicU64;
use crate::token::Token;

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub mod posix;
pub mod remembering;
// The simulated kernel: the checkers' (and loom's and shuttle's OS); no user build carries it.
#[cfg(any(feature = "checkers", shmrc_loom, shmrc_shuttle, test))]
// The library's unit tests use a part of it; the checkers' knobs are theirs.
#[cfg_attr(not(feature = "checkers"), allow(dead_code, unused_imports))]
pub mod sim;

/// What `fstat` says of an open segment.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct FileInfo {
    /// Length in bytes.
    pub len: u64,
    /// Owner uid.
    pub uid: u32,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Its type (`st_mode & S_IFMT`).
    pub kind: FileKind,
    /// Which file it is: `(st_dev, st_ino)`, unique among the files that exist (a
    /// cached mapping keeps its file in existence, so a received descriptor with the
    /// same identity is the same file).
    pub identity: (u64, u64),
}

/// What type of file a descriptor is (a descriptor received as a memfd may be
/// anything).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum FileKind {
    /// A regular file: a memfd, a segment in `/dev/shm`, or a file elsewhere
    /// ([`Os::is_in_memory`] tells).
    Regular,
    /// A directory.
    Directory,
    /// A pipe or FIFO.
    Pipe,
    /// A socket.
    Socket,
    /// A character device (`/dev/null`, a terminal).
    CharacterDevice,
    /// A block device.
    BlockDevice,
    /// Anything else (a symbolic link opened with `O_PATH`, say).
    Other,
}

impl FileKind {
    /// What it is, in words ("a pipe").
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Pipe => "a pipe",
            FileKind::Socket => "a socket",
            FileKind::CharacterDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Other => "not a regular file",
        }
    }
}

/// A named object as [`Os::shm_list_owned`] found it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Listed {
    /// Its name (no leading `/`).
    pub name: String,
    /// Its owner's uid, as the object's inode says (never from its name).
    pub owner: u32,
}

/// A mapped segment: header words the protocol can operate on atomically, and a data
/// region it can copy bytes in and out of.
#[allow(
    clippy::len_without_is_empty,
    reason = "a mapping is never empty: a segment is at least its header"
)]
pub trait Mapping: Send + Sync + 'static {
    /// Length of the mapping in bytes.
    fn len(&self) -> usize;

    /// The first `n` 8-byte words of the mapping, or `None` when it is shorter than
    /// `8 * n` bytes.
    fn words(&self, n: usize) -> Option<&[AtomicU64]>;

    /// Copies `out.len()` bytes at `offset` into `out`. Returns `false` (copying
    /// nothing) when the range is outside the mapping. Another process may write the
    /// same bytes concurrently: the copy is then torn, never undefined behaviour.
    fn read(&self, offset: usize, out: &mut [u8]) -> bool;

    /// Copies `data` to `offset`. Returns `false` (writing nothing) when the range is
    /// outside the mapping. Same concurrency rule as [`Mapping::read`].
    fn write(&self, offset: usize, data: &[u8]) -> bool;

    /// Sets whether a child forked from now on inherits this mapping (`MADV_DOFORK` /
    /// `MADV_DONTFORK`; the mapping cache keeps the mappings it holds out of children).
    /// Returns whether it was set: `false` where mappings have no such switch (the
    /// simulated kernel's, which forks nothing).
    fn inherit_on_fork(&self, _inherit: bool) -> bool {
        false
    }
}

/// The operating system as the protocol sees it, from inside one process.
///
/// A value of an `Os` type stands for "this process": [`Os::current`] is its token and
/// [`Os::local`] its process-local state. Cloning is cheap.
pub trait Os: Clone + Send + Sync + fmt::Debug + 'static {
    /// An open shared-memory object (an owned file descriptor); dropping closes it.
    type File: Send + Sync + fmt::Debug + 'static;
    /// A mapping of a shared-memory object; dropping unmaps it.
    type Map: Mapping;
    /// A connected stream socket that can carry files.
    type Stream: Send + Sync + 'static;

    /// Creates the named object `name` exclusively with mode 0600, read-write.
    fn shm_create(&self, name: &str) -> Result<Self::File>;
    /// Opens the existing named object `name` read-write.
    fn shm_open(&self, name: &str) -> Result<Self::File>;
    /// Removes `name`; existing files and mappings stay valid.
    fn shm_unlink(&self, name: &str) -> Result<()>;
    /// Gives the named object `name` the second name `new_name` (`link`: as
    /// exclusive as [`Os::shm_create`], [`Error::Os`](crate::Error::Os) carrying
    /// `AlreadyExists` when `new_name` exists; [`Error::Gone`](crate::Error::Gone) when
    /// `name` does not). So a file is made whole under a name nobody else uses, then
    /// appears under its public name in one step.
    fn shm_link(&self, name: &str, new_name: &str) -> Result<()>;
    /// The names of all named objects that start with `start` (no leading `/`).
    fn shm_list(&self, start: &str) -> Result<Vec<String>>;
    /// The named objects whose names start with `start` and that `wanted` accepts, in
    /// name order, each with its owner's uid: one listing, `wanted` asked of each name
    /// first, and only the names it accepts looked up (`fstatat` in the listed
    /// directory: the object is never opened). A name removed between the listing and
    /// the look-up is left out.
    fn shm_list_owned(
        &self,
        start: &str,
        wanted: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Vec<Listed>>;
    /// The owner's uid of the named object `name` (`fstatat`, not following a symbolic
    /// link: the object is never opened); [`Error::Gone`](crate::Error::Gone) when there
    /// is no such name.
    fn shm_owner(&self, name: &str) -> Result<u32>;

    /// Creates an anonymous object (memfd, close-on-exec, sealing allowed).
    fn memfd_create(&self, debug_name: &str) -> Result<Self::File>;
    /// Seals an anonymous object so that nobody can shrink it (no SIGBUS for holders).
    fn seal_size(&self, file: &Self::File) -> Result<()>;
    /// Duplicates a file descriptor (close-on-exec).
    fn dup(&self, file: &Self::File) -> Result<Self::File>;

    /// Sets the length to `len` and reserves its storage (`ftruncate` then
    /// `posix_fallocate`): [`crate::Error::NoSpace`] if it does not fit.
    fn allocate(&self, file: &Self::File, len: u64) -> Result<()>;
    /// `fstat`: length, owner, mode, type.
    fn stat(&self, file: &Self::File) -> Result<FileInfo>;
    /// Whether the regular file `file` is kept in memory (`fstatfs`: tmpfs or
    /// hugetlbfs), as a memfd and a segment in `/dev/shm` are, and a file on a disk is
    /// not. Asked of received descriptors only.
    fn is_in_memory(&self, file: &Self::File) -> Result<bool>;
    /// Maps the first `len` bytes of `file` shared, read-write; `len` must be > 0 and at
    /// most the file's length.
    fn map(&self, file: &Self::File, len: usize) -> Result<Self::Map>;
    /// [`Os::map`] of a file whose length `file_len` the caller has just read with
    /// [`Os::stat`] (or set with [`Os::allocate`]): the same checks, without a second
    /// `fstat` where the backend would make one.
    fn map_stated(&self, file: &Self::File, len: usize, file_len: u64) -> Result<Self::Map> {
        let _ = file_len;
        self.map(file, len)
    }

    /// Sends all of `bytes` with `files` attached to the first byte (`SCM_RIGHTS`).
    /// At most [`MAX_FDS_PER_SEND`] files.
    fn send(&self, stream: &Self::Stream, bytes: &[u8], files: &[&Self::File]) -> Result<()>;
    /// Receives up to `buf.len()` bytes (at least 1, or 0 at end of stream), appending
    /// the files that arrived with them to `files`. Files the kernel had to drop (the
    /// fd limit) are [`crate::Error::TooManyFds`]; on any error nothing is appended (the
    /// files that did arrive are closed) and the bytes of that call are lost, so the
    /// stream is out of step.
    fn recv(
        &self,
        stream: &Self::Stream,
        buf: &mut [u8],
        files: &mut Vec<Self::File>,
    ) -> Result<usize>;

    /// This process's token.
    ///
    /// # Panics
    /// The real backend panics when `/proc/self/stat` cannot be read (no `/proc`
    /// mounted): without it no process's liveness can be judged, and a made-up token
    /// could get a live holder's segment unlinked.
    fn current(&self) -> Token;
    /// Whether the process named by `token` is running (see the contract above).
    fn is_alive(&self, token: Token) -> bool;
    /// This process's effective uid.
    fn uid(&self) -> u32;
    /// This process's pid namespace id (the inode of `/proc/self/ns/pid`).
    fn pid_namespace(&self) -> u64;
    /// `Ok` when every process can judge this process's token and this process can
    /// judge theirs: its time namespace shifts the start times it reads by a known
    /// number of clock ticks (see `posix/timens.rs`). [`crate::Error::TimeNamespace`]
    /// naming the cause otherwise; asked before this process takes a holder slot.
    /// Backends without time namespaces always say `Ok`.
    fn check_time_namespace(&self) -> Result<()> {
        Ok(())
    }
    /// Wall-clock time, nanoseconds since the Unix epoch.
    fn now_unix_nanos(&self) -> u64;
    /// 128 unpredictable bits (segment nonces).
    fn random_u128(&self) -> Result<u128>;
    /// 128 and 64 unpredictable bits, independent of each other: a new segment's nonce
    /// (which its name shows) and share key (which nothing shows). The default draws
    /// them as two [`Os::random_u128`]; the real backend asks the kernel once for all
    /// 192 bits (one `getrandom` per segment created, not two).
    fn random_u128_and_u64(&self) -> Result<(u128, u64)> {
        // 64 of 128 fresh random bits: the other 64 would be as secret, and are unused.
        Ok((self.random_u128()?, self.random_u128()? as u64))
    }
    /// The process-local state shared by every clone of this `Os` value.
    fn local(&self) -> &ProcessLocal;
    /// A point where a simulated process may be killed: `Err(Error::Killed)` from then
    /// on. The real kernel never fails here.
    fn crash_point(&self) -> Result<()>;

    /// Sleeps while `word` holds `seen`, until [`Os::wake_word`] on the same word (in
    /// any process that maps it) or until `timeout` ran out: a futex on the real kernel,
    /// compared on the word's low 32 bits. `false` only when the timeout ran out. It may
    /// return early (the word had changed already, a signal, a spurious wake-up), so
    /// callers load the word again and decide. The default (the simulated kernel) yields
    /// once and returns `true`.
    fn wait_word(&self, word: &AtomicU64, seen: u64, timeout: std::time::Duration) -> bool {
        let _ = (word, seen, timeout);
        crate::sync::spin();
        true
    }
    /// Wakes every waiter of `word` ([`Os::wait_word`]). The default does nothing.
    fn wake_word(&self, word: &AtomicU64) {
        let _ = word;
    }

    /// Called before this process creates (`segment: None`) or attaches (the segment's
    /// name) a file_system segment of the namespace whose prefix is `namespace`, before
    /// it takes any slot there. A hook for wrappers (the production OS,
    /// `crate::DefaultOs`, tells the user's manager, so that this process's death gets
    /// that segment swept); the POSIX backend refuses a process whose time namespace it
    /// cannot serve ([`Os::check_time_namespace`]), the simulated one does nothing.
    fn before_named_use(&self, namespace: &str, segment: Option<&str>) -> Result<()> {
        let _ = (namespace, segment);
        Ok(())
    }
}

/// A policy wrapped around an [`Os`]: every call goes to [`Layer::inner`] except the
/// two hooks a layer may answer itself ([`Layer::answer_is_alive`],
/// [`Layer::on_named_use`]).
/// Each layer is an `Os` (the blanket impl below), so the protocol runs over it
/// unchanged: the sweep's liveness memo ([`remembering::Remembering`]) and the
/// production OS that makes the manager watch this process (`crate::DefaultOs`) are
/// layers.
pub trait Layer: Clone + Send + Sync + fmt::Debug + 'static {
    /// The OS underneath.
    type Inner: Os;

    /// The OS underneath.
    fn inner(&self) -> &Self::Inner;

    /// [`Os::is_alive`], by default the inner OS's answer.
    fn answer_is_alive(&self, token: Token) -> bool {
        self.inner().is_alive(token)
    }

    /// [`Os::before_named_use`], by default the inner OS's.
    fn on_named_use(&self, namespace: &str, segment: Option<&str>) -> Result<()> {
        self.inner().before_named_use(namespace, segment)
    }
}

type Inner<L> = <L as Layer>::Inner;

impl<L: Layer> Os for L {
    type File = <Inner<L> as Os>::File;
    type Map = <Inner<L> as Os>::Map;
    type Stream = <Inner<L> as Os>::Stream;

    fn shm_create(&self, name: &str) -> Result<Self::File> {
        self.inner().shm_create(name)
    }
    fn shm_open(&self, name: &str) -> Result<Self::File> {
        self.inner().shm_open(name)
    }
    fn shm_unlink(&self, name: &str) -> Result<()> {
        self.inner().shm_unlink(name)
    }
    fn shm_link(&self, name: &str, new_name: &str) -> Result<()> {
        self.inner().shm_link(name, new_name)
    }
    fn shm_list(&self, start: &str) -> Result<Vec<String>> {
        self.inner().shm_list(start)
    }
    fn shm_list_owned(
        &self,
        start: &str,
        wanted: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Vec<Listed>> {
        self.inner().shm_list_owned(start, wanted)
    }
    fn shm_owner(&self, name: &str) -> Result<u32> {
        self.inner().shm_owner(name)
    }
    fn memfd_create(&self, debug_name: &str) -> Result<Self::File> {
        self.inner().memfd_create(debug_name)
    }
    fn seal_size(&self, file: &Self::File) -> Result<()> {
        self.inner().seal_size(file)
    }
    fn dup(&self, file: &Self::File) -> Result<Self::File> {
        self.inner().dup(file)
    }
    fn allocate(&self, file: &Self::File, len: u64) -> Result<()> {
        self.inner().allocate(file, len)
    }
    fn stat(&self, file: &Self::File) -> Result<FileInfo> {
        self.inner().stat(file)
    }
    fn is_in_memory(&self, file: &Self::File) -> Result<bool> {
        self.inner().is_in_memory(file)
    }
    fn map(&self, file: &Self::File, len: usize) -> Result<Self::Map> {
        self.inner().map(file, len)
    }
    fn map_stated(&self, file: &Self::File, len: usize, file_len: u64) -> Result<Self::Map> {
        self.inner().map_stated(file, len, file_len)
    }
    fn send(&self, stream: &Self::Stream, bytes: &[u8], files: &[&Self::File]) -> Result<()> {
        self.inner().send(stream, bytes, files)
    }
    fn recv(
        &self,
        stream: &Self::Stream,
        buf: &mut [u8],
        files: &mut Vec<Self::File>,
    ) -> Result<usize> {
        self.inner().recv(stream, buf, files)
    }
    fn current(&self) -> Token {
        self.inner().current()
    }
    fn is_alive(&self, token: Token) -> bool {
        self.answer_is_alive(token)
    }
    fn uid(&self) -> u32 {
        self.inner().uid()
    }
    fn pid_namespace(&self) -> u64 {
        self.inner().pid_namespace()
    }
    fn check_time_namespace(&self) -> Result<()> {
        self.inner().check_time_namespace()
    }
    fn now_unix_nanos(&self) -> u64 {
        self.inner().now_unix_nanos()
    }
    fn random_u128(&self) -> Result<u128> {
        self.inner().random_u128()
    }
    fn random_u128_and_u64(&self) -> Result<(u128, u64)> {
        self.inner().random_u128_and_u64()
    }
    fn local(&self) -> &ProcessLocal {
        self.inner().local()
    }
    fn crash_point(&self) -> Result<()> {
        self.inner().crash_point()
    }
    fn wait_word(&self, word: &AtomicU64, seen: u64, timeout: std::time::Duration) -> bool {
        self.inner().wait_word(word, seen, timeout)
    }
    fn wake_word(&self, word: &AtomicU64) {
        self.inner().wake_word(word)
    }
    fn before_named_use(&self, namespace: &str, segment: Option<&str>) -> Result<()> {
        self.on_named_use(namespace, segment)
    }
}

/// The most files one [`Os::send`] carries (Linux's `SCM_MAX_FD`).
pub const MAX_FDS_PER_SEND: usize = 253;
