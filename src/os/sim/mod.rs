//! The simulated kernel: a deterministic, in-memory implementation of [`Os`] on which the
//! protocol code of production ([`crate::segment`], [`crate::holders`]) runs unchanged
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

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io;
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::local::ProcessLocal;
use crate::os::{FileInfo, MAX_FDS_PER_SEND, Mapping, Os};
use crate::sync::{AtomicU64, Ordering};
use crate::token::Token;

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
const NAME_MAX: usize = 255;

/// An object's memory.
type Storage = Arc<Vec<AtomicU64>>;

/// The simulated kernel, shared by every simulated process; cloning is cheap.
#[derive(Clone)]
pub struct SimKernel(Arc<Inner>);

struct Inner {
    state: Mutex<State>,
}

struct State {
    rng: u64,
    clock: u64,
    next_pid: u32,
    next_id: u64,
    procs: BTreeMap<u32, Proc>,
    names: BTreeMap<String, u64>,
    objects: BTreeMap<u64, Object>,
    streams: BTreeMap<u64, Pair>,
    space_limit: Option<u64>,
    reserved: u64,
}

struct Proc {
    token: Token,
    pid_ns: u64,
    killed: bool,
    kill_at: Option<u64>,
    steps: u64,
    fds: usize,
    fd_limit: usize,
}

struct Object {
    /// Length in bytes (what `fstat` says); never more than `storage` covers.
    len: u64,
    storage: Storage,
    uid: u32,
    mode: u32,
    anonymous: bool,
    sealed: bool,
    named: bool,
    /// Bytes reserved by `allocate`, counted against the space limit.
    reserved: u64,
    files: usize,
    in_flight: usize,
    maps: usize,
    /// Shrinks of this mapped object whose zeroing (done outside the lock) has not
    /// finished yet; growing it back in place is refused meanwhile (see
    /// [`SimKernel::set_object_len`]).
    zeroing: usize,
}

impl Object {
    fn new(uid: u32, mode: u32, anonymous: bool) -> Object {
        Object {
            len: 0,
            storage: Arc::new(Vec::new()),
            uid,
            mode,
            anonymous,
            sealed: false,
            named: !anonymous,
            reserved: 0,
            files: 0,
            in_flight: 0,
            maps: 0,
            zeroing: 0,
        }
    }

    fn referenced(&self) -> bool {
        self.named || self.files > 0 || self.in_flight > 0 || self.maps > 0
    }
}

/// Both directions of a stream socket pair: `queues[s]` is what side `s` receives.
struct Pair {
    queues: [VecDeque<Chunk>; 2],
    open: [bool; 2],
}

/// One `send`: its bytes and the objects of the files attached to its first byte.
struct Chunk {
    bytes: Vec<u8>,
    pos: usize,
    files: Vec<u64>,
}

/// Storages taken out of the tables under the lock, dropped after it is released.
type Garbage = Vec<Storage>;

/// The kinds of reference that keep an object alive (besides its name).
#[derive(Copy, Clone)]
enum Ref {
    File,
    InFlight,
    Map,
}

/// Who sets an object's length.
#[derive(Copy, Clone)]
enum Sizing {
    /// A hostile `ftruncate` by the test ([`SimKernel::set_len`]): no caller, no
    /// reservation.
    Truncate,
    /// [`Os::allocate`] by process `pid` of a file of process `owner`: the length and
    /// its reservation.
    Allocate { pid: u32, owner: u32 },
}

/// What a resize does, decided under the lock; the memory work is done outside it.
enum Plan {
    /// Nothing left to do.
    Done,
    /// A mapped object shrank to `from` bytes (published): zero `from..to` of
    /// `storage`, then end the object's pending zeroing.
    Zero {
        storage: Storage,
        from: u64,
        to: u64,
    },
    /// A mapped object grows within its memory: zero its bytes past `old_len`, then
    /// publish the length if nothing changed meanwhile.
    Grow { storage: Storage, old_len: u64 },
    /// An unmapped object: copy what is kept of `old` (the first `old_len` bytes at
    /// most) into new memory of the new length, then swap it in if nothing changed.
    Replace { old: Storage, old_len: u64 },
}

fn os_error(call: &'static str, errno: i32) -> Error {
    Error::os(call, io::Error::from_raw_os_error(errno))
}

fn no_space(len: u64) -> Error {
    Error::NoSpace {
        len,
        source: io::Error::from_raw_os_error(libc::ENOSPC),
    }
}

/// What the sim answers where Linux would grow a mapped object in place: the memory
/// of a simulated object cannot grow under a live mapping.
fn cannot_grow_mapped(call: &'static str) -> Error {
    sim_limit(
        call,
        "the simulated kernel cannot grow the memory of a mapped object",
    )
}

/// What the sim answers where Linux would do something it cannot.
fn sim_limit(call: &'static str, why: &'static str) -> Error {
    Error::os(call, io::Error::new(io::ErrorKind::Unsupported, why))
}

fn words_for(len: u64) -> Option<usize> {
    usize::try_from(len.div_ceil(8)).ok()
}

impl State {
    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// splitmix64.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The calling process, or [`Error::Killed`] if it is dead.
    fn caller(&mut self, pid: u32) -> Result<&mut Proc> {
        match self.procs.get_mut(&pid) {
            Some(p) if !p.killed => Ok(p),
            _ => Err(Error::Killed),
        }
    }

    /// Checks that `pid` may open one more file.
    fn fd_available(&mut self, pid: u32, call: &'static str) -> Result<()> {
        let p = self.caller(pid)?;
        if p.fds >= p.fd_limit {
            return Err(Error::TooManyFds {
                call,
                limit: p.fd_limit as u64,
            });
        }
        Ok(())
    }

    /// The calling process, alive, using a file or stream end of process `owner`:
    /// [`Error::Killed`] if the caller is dead, `EBADF` from `call` if the descriptor is
    /// another process's (its number means nothing, or another file, in the caller's
    /// table).
    fn owned(&mut self, pid: u32, owner: u32, call: &'static str) -> Result<&mut Proc> {
        let p = self.caller(pid)?;
        if owner != pid {
            return Err(os_error(call, libc::EBADF));
        }
        Ok(p)
    }

    /// Opens a file of `object` for `pid` (limit already checked); returns its id.
    fn open_file(&mut self, pid: u32, object: u64) -> u64 {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.fds += 1;
        }
        if let Some(o) = self.objects.get_mut(&object) {
            o.files += 1;
        }
        self.fresh_id()
    }

    /// The object of an open file, for `call`: an open file keeps its object, so the
    /// `EBADF` this answers for a missing one is for a file that is not open.
    fn object(&mut self, id: u64, call: &'static str) -> Result<&mut Object> {
        self.objects
            .get_mut(&id)
            .ok_or_else(|| os_error(call, libc::EBADF))
    }

    /// Frees `id` if nothing references it any more.
    fn collect(&mut self, id: u64, garbage: &mut Garbage) {
        if self.objects.get(&id).is_some_and(|o| !o.referenced()) {
            if let Some(o) = self.objects.remove(&id) {
                self.reserved -= o.reserved;
                garbage.push(o.storage);
            }
        }
    }

    /// Takes one reference of kind `kind` off object `id`, and frees the object if
    /// nothing references it any more.
    fn unref(&mut self, id: u64, kind: Ref, garbage: &mut Garbage) {
        if let Some(o) = self.objects.get_mut(&id) {
            let count = match kind {
                Ref::File => &mut o.files,
                Ref::InFlight => &mut o.in_flight,
                Ref::Map => &mut o.maps,
            };
            debug_assert!(*count > 0, "an object lost more references than it had");
            *count -= 1;
        }
        self.collect(id, garbage);
    }

    /// Drops files in flight (a purged queue, files refused by a receiver).
    fn drop_in_flight(&mut self, objects: &[u64], garbage: &mut Garbage) {
        for &id in objects {
            self.unref(id, Ref::InFlight, garbage);
        }
    }

    /// Checks that `sizing` may set object `id` to `len` bytes (the caller alive and
    /// owning the file, the seal, the space limit) and returns the object.
    fn sizable(&mut self, id: u64, len: u64, sizing: Sizing) -> Result<&mut Object> {
        if let Sizing::Allocate { pid, owner } = sizing {
            self.owned(pid, owner, "ftruncate")?;
        }
        let o = self.object(id, "ftruncate")?;
        if o.sealed && len < o.len {
            return Err(os_error("ftruncate", libc::EPERM));
        }
        if let Sizing::Allocate { .. } = sizing {
            let old_reserved = o.reserved;
            if !self.space_for(old_reserved, len) {
                return Err(no_space(len));
            }
        }
        self.object(id, "ftruncate")
    }

    /// Sets the length of object `id` (its memory already covering it) and, for an
    /// allocate, its reservation.
    fn publish_len(&mut self, id: u64, len: u64, sizing: Sizing) {
        let Some(o) = self.objects.get_mut(&id) else {
            return;
        };
        o.len = len;
        if let Sizing::Allocate { .. } = sizing {
            let old_reserved = std::mem::replace(&mut o.reserved, len);
            self.reserved = self.reserved - old_reserved + len;
        }
    }

    /// Decides how object `id` becomes `len` bytes (`words` words of memory); a shrink
    /// of a mapped object is published here.
    fn plan_resize(&mut self, id: u64, len: u64, words: usize, sizing: Sizing) -> Result<Plan> {
        let grow_call = match sizing {
            Sizing::Truncate => "ftruncate",
            Sizing::Allocate { .. } => "posix_fallocate",
        };
        let o = self.sizable(id, len, sizing)?;
        let old_len = o.len;
        if o.maps == 0 {
            if len == old_len && words == o.storage.len() {
                self.publish_len(id, len, sizing);
                return Ok(Plan::Done);
            }
            return Ok(Plan::Replace {
                old: o.storage.clone(),
                old_len,
            });
        }
        if words > o.storage.len() {
            return Err(cannot_grow_mapped(grow_call));
        }
        if len > old_len {
            if o.zeroing > 0 {
                return Err(sim_limit(
                    grow_call,
                    "the simulated kernel cannot grow a mapped object back while \
                     another thread still zeroes what its shrink cut off",
                ));
            }
            return Ok(Plan::Grow {
                storage: o.storage.clone(),
                old_len,
            });
        }
        let plan = if len < old_len {
            o.zeroing += 1;
            Plan::Zero {
                storage: o.storage.clone(),
                from: len,
                to: old_len,
            }
        } else {
            Plan::Done
        };
        self.publish_len(id, len, sizing);
        Ok(plan)
    }

    fn space_for(&self, old_reserved: u64, len: u64) -> bool {
        let limit = self.space_limit.unwrap_or(MACHINE_BYTES).min(MACHINE_BYTES);
        (self.reserved - old_reserved)
            .checked_add(len)
            .is_some_and(|total| total <= limit)
    }
}

impl SimKernel {
    /// A kernel with no process and no object; `seed` drives [`Os::random_u128`].
    pub fn new(seed: u64) -> SimKernel {
        SimKernel(Arc::new(Inner {
            state: Mutex::new(State {
                rng: seed,
                clock: 0,
                next_pid: FIRST_PID,
                next_id: 0,
                procs: BTreeMap::new(),
                names: BTreeMap::new(),
                objects: BTreeMap::new(),
                streams: BTreeMap::new(),
                space_limit: None,
                reserved: 0,
            }),
        }))
    }

    /// Runs `f` on the tables under the lock; storages it frees are dropped after the
    /// lock is released (they hold model-checker atomics).
    fn with<R>(&self, f: impl FnOnce(&mut State, &mut Garbage) -> R) -> R {
        let mut garbage = Garbage::new();
        let result = {
            let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut state, &mut garbage)
        };
        drop(garbage);
        result
    }

    fn same(&self, other: &SimKernel) -> Result<()> {
        if Arc::ptr_eq(&self.0, &other.0) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(
                "a file or stream of another simulated kernel".into(),
            ))
        }
    }

    /// A new process of user `uid` in pid namespace [`DEFAULT_PID_NAMESPACE`].
    pub fn spawn(&self, uid: u32) -> SimOs {
        self.spawn_in_namespace(uid, DEFAULT_PID_NAMESPACE)
    }

    /// A new process of user `uid` in pid namespace `pid_ns`: the next pid (from
    /// [`FIRST_PID`] on, never reused) and a start time from the logical clock.
    ///
    /// # Panics
    /// When the 4 million pids a token can name are used up.
    pub fn spawn_in_namespace(&self, uid: u32, pid_ns: u64) -> SimOs {
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
            local: Arc::new(ProcessLocal::new()),
        }
    }

    /// Kills process `pid` now (SIGKILL): its token is dead and each of its calls
    /// returns [`Error::Killed`]. Its files and mappings stay until their values are
    /// dropped. Unknown pids are ignored.
    ///
    /// Only for a process that is not running protocol code at this moment: the caller
    /// itself, or one whose thread is parked or joined. A process that is running may
    /// have passed a crash point and not yet taken the shared step that follows it; it
    /// would take that step after others saw it dead, which SIGKILL never allows (to
    /// `is_alive`, a real process is dead only once it runs no more). Kill a running
    /// process with [`SimKernel::kill_at_step`]`(pid, 0)`: it dies at its next crash
    /// point, and is alive until then.
    pub fn kill(&self, pid: u32) {
        self.with(|st, _| {
            if let Some(p) = st.procs.get_mut(&pid) {
                p.killed = true;
            }
        });
    }

    /// Kills process `pid` at its `n`-th [`Os::crash_point`] from now (0: the next one),
    /// which returns [`Error::Killed`] instead of passing.
    pub fn kill_at_step(&self, pid: u32, n: u64) {
        self.with(|st, _| {
            if let Some(p) = st.procs.get_mut(&pid) {
                p.kill_at = Some(p.steps + n);
            }
        });
    }

    /// How many crash points process `pid` has passed (0 for an unknown pid).
    pub fn steps(&self, pid: u32) -> u64 {
        self.with(|st, _| st.procs.get(&pid).map_or(0, |p| p.steps))
    }

    /// Whether process `pid` was killed.
    pub fn is_killed(&self, pid: u32) -> bool {
        self.with(|st, _| st.procs.get(&pid).is_some_and(|p| p.killed))
    }

    /// The names of the named objects, sorted.
    pub fn names(&self) -> Vec<String> {
        self.with(|st, _| st.names.keys().cloned().collect())
    }

    /// How many objects still have memory: named, or referenced by an open file, a
    /// mapping or a file in flight in a stream.
    pub fn objects_alive(&self) -> usize {
        self.with(|st, _| st.objects.len())
    }

    /// Bytes reserved by `allocate` in objects still alive.
    pub fn bytes_allocated(&self) -> u64 {
        self.with(|st, _| st.reserved)
    }

    /// How many files process `pid` has open.
    pub fn open_files(&self, pid: u32) -> usize {
        self.with(|st, _| st.procs.get(&pid).map_or(0, |p| p.fds))
    }

    /// Total bytes `allocate` may reserve before failing with [`Error::NoSpace`]
    /// (`None`: the machine's [`MACHINE_BYTES`]).
    pub fn set_space_limit(&self, bytes: Option<u64>) {
        self.with(|st, _| st.space_limit = bytes);
    }

    /// Open files process `pid` may have before creating, opening, duplicating or
    /// receiving one fails with [`Error::TooManyFds`].
    pub fn set_fd_limit(&self, pid: u32, limit: usize) {
        self.with(|st, _| {
            if let Some(p) = st.procs.get_mut(&pid) {
                p.fd_limit = limit;
            }
        });
    }

    /// A connected stream socket pair: the first end belongs to `a`, the second to `b`.
    /// Sockets do not count against the fd limit.
    ///
    /// # Panics
    /// When `a` or `b` belongs to another kernel.
    pub fn stream_pair(&self, a: &SimOs, b: &SimOs) -> (SimStream, SimStream) {
        assert!(
            self.same(&a.kernel).is_ok() && self.same(&b.kernel).is_ok(),
            "stream_pair of processes of another kernel"
        );
        let id = self.with(|st, _| {
            let id = st.fresh_id();
            st.streams.insert(
                id,
                Pair {
                    queues: [VecDeque::new(), VecDeque::new()],
                    open: [true, true],
                },
            );
            id
        });
        let end = |side, owner: &SimOs| SimStream {
            kernel: self.clone(),
            pair: id,
            side,
            owner: owner.pid,
        };
        (end(0, a), end(1, b))
    }

    fn named(&self, name: &str) -> Option<(Storage, u64)> {
        self.with(|st, _| {
            let id = st.names.get(name)?;
            let o = st.objects.get(id)?;
            Some((o.storage.clone(), o.len))
        })
    }

    /// Writes `bytes` at `offset` into the memory of the named object `name`, through
    /// the same atomic words its mappings see (a hostile peer scribbling). `false` if
    /// there is no such object or the range is beyond its length.
    pub fn poke(&self, name: &str, offset: usize, bytes: &[u8]) -> bool {
        self.named(name)
            .is_some_and(|(storage, len)| write_words(&storage, len, offset, bytes))
    }

    /// Reads `len` bytes at `offset` of the named object `name`; `None` if there is no
    /// such object or the range is beyond its length.
    pub fn peek(&self, name: &str, offset: usize, len: usize) -> Option<Vec<u8>> {
        let (storage, object_len) = self.named(name)?;
        let mut out = vec![0; len];
        read_words(&storage, object_len, offset, &mut out).then_some(out)
    }

    /// Sets the length of the named object `name` as a hostile `ftruncate` would:
    /// later `stat` and `map` see `len`; existing mappings stay, but the bytes cut off
    /// read as 0 from then on (Linux frees them: touching them would be SIGBUS there),
    /// also after the object grows back. `false` if there is no such object, or it
    /// cannot be done (see [`SimKernel::set_file_len`]).
    pub fn set_len(&self, name: &str, len: u64) -> bool {
        let Some(id) = self.with(|st, _| st.names.get(name).copied()) else {
            return false;
        };
        self.resize(id, len).is_ok()
    }

    /// [`SimKernel::set_len`] for the object of an open file (a memfd passed to a
    /// hostile peer). Refused (`false`) when shrinking a size-sealed object, and (limits
    /// of the sim) when growing a mapped object beyond the memory it already has, or
    /// while another thread still zeroes what a shrink of it cut off.
    pub fn set_file_len(&self, file: &SimFile, len: u64) -> bool {
        self.same(&file.kernel).is_ok() && self.resize(file.object, len).is_ok()
    }

    /// Changes the owner of the named object `name` (`fchown`); `false` if missing.
    pub fn set_owner(&self, name: &str, uid: u32) -> bool {
        self.with(|st, _| {
            let Some(id) = st.names.get(name).copied() else {
                return false;
            };
            st.objects.get_mut(&id).map(|o| o.uid = uid).is_some()
        })
    }

    /// `ftruncate` of object `id` to `len` (no reservation change).
    fn resize(&self, id: u64, len: u64) -> Result<()> {
        let words = words_for(len)
            .filter(|_| len <= MACHINE_BYTES)
            .ok_or_else(|| os_error("ftruncate", libc::EFBIG))?;
        self.set_object_len(id, len, words, Sizing::Truncate)
    }

    /// Sets the length of object `id` to `len` bytes (`words` words of memory), as
    /// `ftruncate` does on Linux: bytes cut off are gone, and read as 0 if the object
    /// grows back. An unmapped object gets new memory of its new length (the kept bytes
    /// copied, zeros after them); a mapped one keeps its memory (the sim cannot move
    /// it under a mapping, nor grow it beyond what it has): a shrink zeroes the bytes
    /// cut off (where Linux frees their pages, and a mapping touching them would get
    /// SIGBUS), a growth within that memory zeroes its new bytes first (which writes
    /// through a mapping beyond the shrunk length, SIGBUS on Linux, may have left).
    /// All atomics are touched outside the lock.
    fn set_object_len(&self, id: u64, len: u64, words: usize, sizing: Sizing) -> Result<()> {
        loop {
            match self.with(|st, _| st.plan_resize(id, len, words, sizing))? {
                Plan::Done => return Ok(()),
                Plan::Zero { storage, from, to } => {
                    zero_bytes(&storage, from, to);
                    self.with(|st, _| {
                        if let Some(o) = st.objects.get_mut(&id) {
                            debug_assert!(o.zeroing > 0, "a zeroing ended twice");
                            o.zeroing -= 1;
                        }
                    });
                    return Ok(());
                }
                Plan::Grow { storage, old_len } => {
                    zero_bytes(&storage, old_len, len);
                    let done = self.with(|st, _| {
                        let o = st.sizable(id, len, sizing)?;
                        if !Arc::ptr_eq(&o.storage, &storage) || o.len != old_len || o.zeroing > 0 {
                            return Ok(false);
                        }
                        st.publish_len(id, len, sizing);
                        Ok::<_, Error>(true)
                    })?;
                    if done {
                        return Ok(());
                    }
                }
                Plan::Replace { old, old_len } => {
                    let new = grown(&old, old_len.min(len), words);
                    let done = self.with(|st, garbage| {
                        let o = st.sizable(id, len, sizing)?;
                        if !Arc::ptr_eq(&o.storage, &old) || o.len != old_len || o.maps > 0 {
                            return Ok(false);
                        }
                        garbage.push(std::mem::replace(&mut o.storage, new.clone()));
                        st.publish_len(id, len, sizing);
                        Ok::<_, Error>(true)
                    });
                    drop(new);
                    drop(old);
                    if done? {
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// New storage of `words` words holding the first `old_len` bytes of `old` (zeros
/// after them, as `ftruncate` makes).
fn grown(old: &[AtomicU64], old_len: u64, words: usize) -> Storage {
    let keep = usize::try_from(old_len).unwrap_or(usize::MAX);
    Arc::new(
        (0..words)
            .map(|i| {
                let value = match old.get(i) {
                    Some(word) if i * 8 < keep => {
                        let value = word.load(Ordering::Relaxed);
                        let valid = keep - i * 8;
                        if valid >= 8 {
                            value
                        } else {
                            let mut bytes = value.to_ne_bytes();
                            bytes[valid..].fill(0);
                            u64::from_ne_bytes(bytes)
                        }
                    }
                    _ => 0,
                };
                AtomicU64::new(value)
            })
            .collect(),
    )
}

/// The range `offset..offset + len` if it lies within `limit` bytes of `storage`.
fn range(storage: &[AtomicU64], limit: u64, offset: usize, len: usize) -> Option<usize> {
    let end = offset.checked_add(len)?;
    (end as u64 <= limit && end <= storage.len().saturating_mul(8)).then_some(end)
}

fn read_words(storage: &[AtomicU64], limit: u64, offset: usize, out: &mut [u8]) -> bool {
    if range(storage, limit, offset, out.len()).is_none() {
        return false;
    }
    let mut done = 0;
    while done < out.len() {
        let at = offset + done;
        let (word, skip) = (at / 8, at % 8);
        let n = (8 - skip).min(out.len() - done);
        let bytes = storage[word].load(Ordering::Relaxed).to_ne_bytes();
        out[done..done + n].copy_from_slice(&bytes[skip..skip + n]);
        done += n;
    }
    true
}

fn write_words(storage: &[AtomicU64], limit: u64, offset: usize, data: &[u8]) -> bool {
    if range(storage, limit, offset, data.len()).is_none() {
        return false;
    }
    let mut done = 0;
    while done < data.len() {
        let at = offset + done;
        let (word, skip) = (at / 8, at % 8);
        let n = (8 - skip).min(data.len() - done);
        store_bytes(&storage[word], skip, &data[done..done + n]);
        done += n;
    }
    true
}

/// Stores `data` (at most 8 bytes from `skip` on) into the word `cell`, leaving its
/// other bytes as they are.
fn store_bytes(cell: &AtomicU64, skip: usize, data: &[u8]) {
    if let Ok(whole) = <[u8; 8]>::try_from(data) {
        cell.store(u64::from_ne_bytes(whole), Ordering::Relaxed);
        return;
    }
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let mut bytes = current.to_ne_bytes();
        bytes[skip..skip + data.len()].copy_from_slice(data);
        let new = u64::from_ne_bytes(bytes);
        match cell.compare_exchange(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(seen) => current = seen,
        }
    }
}

/// Zeroes bytes `from..to` of `storage`, and the rest of the word byte `to` falls in
/// (bytes past an object's end read as 0), through the same atomic words its mappings
/// see. Call it outside the kernel lock.
fn zero_bytes(storage: &[AtomicU64], from: u64, to: u64) {
    let end = words_for(to).map_or(storage.len(), |w| w.min(storage.len()));
    let Ok(from) = usize::try_from(from) else {
        return;
    };
    let (mut word, skip) = (from / 8, from % 8);
    if skip != 0 && word < end {
        store_bytes(&storage[word], skip, &[0; 8][skip..]);
        word += 1;
    }
    for cell in storage.get(word..end).unwrap_or_default() {
        cell.store(0, Ordering::Relaxed);
    }
}

impl fmt::Debug for SimKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Counted under the lock, formatted after it (the formatter's sink is arbitrary
        // code, which may well look at this kernel).
        let (processes, names, objects, streams, reserved) = self.with(|st, _| {
            (
                st.procs.len(),
                st.names.len(),
                st.objects.len(),
                st.streams.len(),
                st.reserved,
            )
        });
        f.debug_struct("SimKernel")
            .field("processes", &processes)
            .field("names", &names)
            .field("objects", &objects)
            .field("streams", &streams)
            .field("reserved", &reserved)
            .finish()
    }
}

/// One simulated process: the [`Os`] the protocol runs on. Clones are the same process
/// (same token, same [`ProcessLocal`]).
#[derive(Clone)]
pub struct SimOs {
    kernel: SimKernel,
    pid: u32,
    token: Token,
    uid: u32,
    pid_ns: u64,
    local: Arc<ProcessLocal>,
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

    fn with<R>(&self, f: impl FnOnce(&mut State, &mut Garbage) -> R) -> R {
        self.kernel.with(f)
    }

    fn file(&self, id: u64, object: u64) -> SimFile {
        SimFile {
            kernel: self.kernel.clone(),
            id,
            object,
            owner: self.pid,
        }
    }

    /// Opens a new file for this process on an object made by `make`, named `name`
    /// if any.
    fn create_object(
        &self,
        call: &'static str,
        name: Option<&str>,
        make: impl FnOnce() -> Object,
    ) -> Result<SimFile> {
        let (id, object) = self.with(|st, _| {
            st.fd_available(self.pid, call)?;
            if let Some(name) = name {
                if st.names.contains_key(name) {
                    return Err(os_error(call, libc::EEXIST));
                }
            }
            let object = st.fresh_id();
            st.objects.insert(object, make());
            if let Some(name) = name {
                st.names.insert(name.to_owned(), object);
            }
            Ok((st.open_file(self.pid, object), object))
        })?;
        Ok(self.file(id, object))
    }

    /// Checks that `file` is of this process's kernel; whether this process owns it is
    /// checked under the lock ([`State::owned`]), after whether it is alive.
    fn check_file(&self, file: &SimFile) -> Result<()> {
        self.kernel.same(&file.kernel)
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

/// Refuses what the posix backend refuses before asking the kernel (a name that is
/// not one plain path component), and what the kernel then refuses for `call` (a
/// component longer than `NAME_MAX`).
fn check_name(name: &str, call: &'static str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(Error::InvalidArgument(format!(
            "{name:?} is not a valid shared-memory object name"
        )));
    }
    if name.len() > NAME_MAX {
        return Err(os_error(call, libc::ENAMETOOLONG));
    }
    Ok(())
}

impl Os for SimOs {
    type File = SimFile;
    type Map = SimMap;
    type Stream = SimStream;

    fn shm_create(&self, name: &str) -> Result<SimFile> {
        check_name(name, "shm_open")?;
        let uid = self.uid;
        self.create_object("shm_open", Some(name), || Object::new(uid, 0o600, false))
    }

    fn shm_open(&self, name: &str) -> Result<SimFile> {
        check_name(name, "shm_open")?;
        let (id, object) = self.with(|st, _| {
            st.fd_available(self.pid, "shm_open")?;
            let gone = || Error::Gone {
                segment: name.to_owned(),
            };
            let object = *st.names.get(name).ok_or_else(gone)?;
            let owner = st.objects.get(&object).ok_or_else(gone)?.uid;
            if owner != self.uid {
                return Err(Error::OtherUser {
                    segment: name.to_owned(),
                    owner,
                    me: self.uid,
                });
            }
            Ok((st.open_file(self.pid, object), object))
        })?;
        Ok(self.file(id, object))
    }

    fn shm_unlink(&self, name: &str) -> Result<()> {
        check_name(name, "shm_unlink")?;
        self.with(|st, garbage| {
            st.caller(self.pid)?;
            let object = st.names.remove(name).ok_or_else(|| Error::Gone {
                segment: name.to_owned(),
            })?;
            if let Some(o) = st.objects.get_mut(&object) {
                o.named = false;
            }
            st.collect(object, garbage);
            Ok(())
        })
    }

    fn shm_list(&self, start: &str) -> Result<Vec<String>> {
        self.with(|st, _| {
            st.caller(self.pid)?;
            Ok(st
                .names
                .range::<str, _>((Bound::Included(start), Bound::Unbounded))
                .map(|(name, _)| name)
                .take_while(|name| name.starts_with(start))
                .cloned()
                .collect())
        })
    }

    fn memfd_create(&self, _debug_name: &str) -> Result<SimFile> {
        let uid = self.uid;
        // Linux reports a memfd with mode 0777.
        self.create_object("memfd_create", None, || Object::new(uid, 0o777, true))
    }

    fn seal_size(&self, file: &SimFile) -> Result<()> {
        const CALL: &str = "fcntl(F_ADD_SEALS)";
        self.check_file(file)?;
        self.with(|st, _| {
            st.owned(self.pid, file.owner, CALL)?;
            let o = st.object(file.object, CALL)?;
            if !o.anonymous {
                // F_ADD_SEALS on a file that does not allow sealing.
                return Err(os_error(CALL, libc::EINVAL));
            }
            o.sealed = true;
            Ok(())
        })
    }

    fn dup(&self, file: &SimFile) -> Result<SimFile> {
        // What the posix backend's `try_clone_to_owned` calls.
        const CALL: &str = "fcntl(F_DUPFD_CLOEXEC)";
        self.check_file(file)?;
        let id = self.with(|st, _| {
            st.owned(self.pid, file.owner, CALL)?;
            st.object(file.object, CALL)?;
            st.fd_available(self.pid, CALL)?;
            Ok::<_, Error>(st.open_file(self.pid, file.object))
        })?;
        Ok(self.file(id, file.object))
    }

    fn allocate(&self, file: &SimFile, len: u64) -> Result<()> {
        self.check_file(file)?;
        let words = words_for(len).ok_or_else(|| no_space(len))?;
        let sizing = Sizing::Allocate {
            pid: self.pid,
            owner: file.owner,
        };
        self.kernel.set_object_len(file.object, len, words, sizing)
    }

    fn stat(&self, file: &SimFile) -> Result<FileInfo> {
        self.check_file(file)?;
        self.with(|st, _| {
            st.owned(self.pid, file.owner, "fstat")?;
            let o = st.object(file.object, "fstat")?;
            Ok(FileInfo {
                len: o.len,
                uid: o.uid,
                mode: o.mode,
            })
        })
    }

    fn map(&self, file: &SimFile, len: usize) -> Result<SimMap> {
        self.check_file(file)?;
        let storage = self.with(|st, _| {
            st.owned(self.pid, file.owner, "mmap")?;
            let o = st.object(file.object, "mmap")?;
            if len == 0 || len as u64 > o.len {
                return Err(Error::InvalidArgument(format!(
                    "cannot map {len} bytes of a {}-byte object",
                    o.len
                )));
            }
            o.maps += 1;
            Ok(o.storage.clone())
        })?;
        Ok(SimMap {
            kernel: self.kernel.clone(),
            object: file.object,
            storage,
            len,
        })
    }

    fn send(&self, stream: &SimStream, bytes: &[u8], files: &[&SimFile]) -> Result<()> {
        self.kernel.same(&stream.kernel)?;
        for file in files {
            self.check_file(file)?;
        }
        if files.len() > MAX_FDS_PER_SEND {
            return Err(Error::InvalidArgument(format!(
                "{} files in one send, at most {MAX_FDS_PER_SEND}",
                files.len()
            )));
        }
        if bytes.is_empty() && !files.is_empty() {
            return Err(Error::InvalidArgument(
                "files travel with the first byte: send at least one byte".into(),
            ));
        }
        self.with(|st, _| {
            st.owned(self.pid, stream.owner, "sendmsg")?;
            for file in files {
                // SCM_RIGHTS of a number that is not one of the sender's files.
                st.owned(self.pid, file.owner, "sendmsg")?;
            }
            let peer = 1 - stream.side;
            let open = st.streams.get(&stream.pair).is_some_and(|p| p.open[peer]);
            if !open {
                return Err(Error::Disconnected);
            }
            if bytes.is_empty() {
                return Ok(());
            }
            let objects: Vec<u64> = files.iter().map(|f| f.object).collect();
            for id in &objects {
                st.object(*id, "sendmsg")?;
            }
            for id in &objects {
                st.object(*id, "sendmsg")?.in_flight += 1;
            }
            if let Some(pair) = st.streams.get_mut(&stream.pair) {
                pair.queues[peer].push_back(Chunk {
                    bytes: bytes.to_vec(),
                    pos: 0,
                    files: objects,
                });
            }
            Ok(())
        })
    }

    fn recv(&self, stream: &SimStream, buf: &mut [u8], files: &mut Vec<SimFile>) -> Result<usize> {
        self.kernel.same(&stream.kernel)?;
        let (n, received) = self.with(|st, garbage| {
            let limit = st.caller(self.pid)?.fd_limit;
            if buf.is_empty() {
                // As the posix backend: 0 would read as the end of the stream.
                return Err(Error::InvalidArgument(
                    "recv needs room for at least one byte".into(),
                ));
            }
            st.owned(self.pid, stream.owner, "recvmsg")?;
            let side = stream.side;
            let Some(pair) = st.streams.get_mut(&stream.pair) else {
                return Ok((0, Vec::new()));
            };
            if pair.queues[side].is_empty() {
                return if pair.open[1 - side] {
                    Err(os_error("recvmsg", libc::EAGAIN))
                } else {
                    Ok((0, Vec::new()))
                };
            }
            let mut n = 0;
            let mut arrived = Vec::new();
            while n < buf.len() {
                let Some(chunk) = pair.queues[side].front_mut() else {
                    break;
                };
                let with_files = !chunk.files.is_empty();
                if with_files && n > 0 {
                    break;
                }
                arrived.append(&mut chunk.files);
                let take = (buf.len() - n).min(chunk.bytes.len() - chunk.pos);
                buf[n..n + take].copy_from_slice(&chunk.bytes[chunk.pos..chunk.pos + take]);
                chunk.pos += take;
                n += take;
                if chunk.pos == chunk.bytes.len() {
                    pair.queues[side].pop_front();
                }
                if with_files {
                    break;
                }
            }
            let fds = st.procs.get(&self.pid).map_or(0, |p| p.fds);
            if fds + arrived.len() > limit {
                // MSG_CTRUNC: the bytes are consumed, the files closed, and none is
                // handed out (`files` is left as it was).
                st.drop_in_flight(&arrived, garbage);
                return Err(Error::TooManyFds {
                    call: "recvmsg",
                    limit: limit as u64,
                });
            }
            let mut received = Vec::with_capacity(arrived.len());
            for object in arrived {
                // In flight to open: the object keeps a reference throughout.
                if let Some(o) = st.objects.get_mut(&object) {
                    debug_assert!(o.in_flight > 0, "a file arrived twice");
                    o.in_flight -= 1;
                }
                received.push((st.open_file(self.pid, object), object));
            }
            Ok((n, received))
        })?;
        // Owned by the receiver (`self.file`).
        files.extend(
            received
                .into_iter()
                .map(|(id, object)| self.file(id, object)),
        );
        Ok(n)
    }

    fn current(&self) -> Token {
        self.token
    }

    /// Whether a process with this pid and start time exists in this process's pid
    /// namespace and has not been killed.
    fn is_alive(&self, token: Token) -> bool {
        self.with(|st, _| {
            st.procs
                .get(&token.pid())
                .is_some_and(|p| p.token == token && !p.killed && p.pid_ns == self.pid_ns)
        })
    }

    fn uid(&self) -> u32 {
        self.uid
    }

    fn pid_namespace(&self) -> u64 {
        self.pid_ns
    }

    fn now_unix_nanos(&self) -> u64 {
        self.with(|st, _| EPOCH_NANOS + st.tick() * NANOS_PER_TICK)
    }

    fn random_u128(&self) -> Result<u128> {
        self.with(|st, _| {
            st.caller(self.pid)?;
            let low = st.next_random();
            let high = st.next_random();
            Ok(u128::from(low) | (u128::from(high) << 64))
        })
    }

    fn local(&self) -> &ProcessLocal {
        &self.local
    }

    fn crash_point(&self) -> Result<()> {
        self.with(|st, _| {
            let p = st.caller(self.pid)?;
            if p.kill_at == Some(p.steps) {
                p.killed = true;
                return Err(Error::Killed);
            }
            p.steps += 1;
            Ok(())
        })
    }
}

/// An open file of a simulated process; dropping it closes it.
pub struct SimFile {
    kernel: SimKernel,
    id: u64,
    object: u64,
    owner: u32,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("id", &self.id)
            .field("object", &self.object)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        self.kernel.with(|st, garbage| {
            if let Some(p) = st.procs.get_mut(&self.owner) {
                debug_assert!(p.fds > 0, "a process closed more files than it had");
                p.fds -= 1;
            }
            st.unref(self.object, Ref::File, garbage);
        });
    }
}

/// A mapping of a simulated object: its memory (shared with every other mapping of the
/// object) and the length mapped; dropping it unmaps it.
pub struct SimMap {
    kernel: SimKernel,
    object: u64,
    storage: Storage,
    len: usize,
}

impl fmt::Debug for SimMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimMap")
            .field("object", &self.object)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for SimMap {
    fn drop(&mut self) {
        // `self.storage` is dropped after this body, outside the lock.
        self.kernel
            .with(|st, garbage| st.unref(self.object, Ref::Map, garbage));
    }
}

impl Mapping for SimMap {
    fn len(&self) -> usize {
        self.len
    }

    fn words(&self, n: usize) -> Option<&[AtomicU64]> {
        if n.checked_mul(8)? > self.len {
            return None;
        }
        self.storage.get(..n)
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        read_words(&self.storage, self.len as u64, offset, out)
    }

    fn write(&self, offset: usize, data: &[u8]) -> bool {
        write_words(&self.storage, self.len as u64, offset, data)
    }
}

/// One end of a simulated stream socket pair ([`SimKernel::stream_pair`]); dropping it
/// closes that end: the peer's sends fail with [`Error::Disconnected`], its receives
/// end with 0 once the queue is drained, and what was queued for this end is discarded.
pub struct SimStream {
    kernel: SimKernel,
    pair: u64,
    side: usize,
    owner: u32,
}

impl fmt::Debug for SimStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimStream")
            .field("pair", &self.pair)
            .field("side", &self.side)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        self.kernel.with(|st, garbage| {
            let Some(pair) = st.streams.get_mut(&self.pair) else {
                return;
            };
            pair.open[self.side] = false;
            let purged: Vec<u64> = pair.queues[self.side]
                .drain(..)
                .flat_map(|chunk| chunk.files)
                .collect();
            if !pair.open.contains(&true) {
                st.streams.remove(&self.pair);
            }
            st.drop_in_flight(&purged, garbage);
        });
    }
}

#[cfg(test)]
mod tests {
    /// Ordinary tests: they create atomics outside any model, so they run without the
    /// model-checker features only.
    #[cfg(not(any(feature = "loom", feature = "shuttle")))]
    mod plain {
        use super::super::*;
        use crate::holders::{self, ClaimError, Outcome};
        use crate::namespace::Namespace;
        use crate::segment::{self, Backing, Header};
        use crate::strategy::Strategy;

        const UID: u32 = 1000;

        fn kind(e: &Error) -> Option<io::ErrorKind> {
            match e {
                Error::Os { source, .. } => Some(source.kind()),
                _ => None,
            }
        }

        fn ns() -> Namespace {
            Namespace::new("shmrc-simtest").unwrap()
        }

        /// A named object of `len` bytes created by `os`, its file closed.
        fn named(os: &SimOs, name: &str, len: u64) {
            let file = os.shm_create(name).unwrap();
            os.allocate(&file, len).unwrap();
        }

        #[test]
        fn processes_get_fresh_pids_distinct_tokens_and_their_own_local_state() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let b = k.spawn_in_namespace(UID + 1, 7);
            assert_eq!((a.pid(), b.pid()), (FIRST_PID, FIRST_PID + 1));
            assert_ne!(a.token(), b.token());
            assert_eq!(a.current(), a.token());
            assert_eq!((a.uid(), b.uid()), (UID, UID + 1));
            assert_eq!((a.pid_namespace(), b.pid_namespace()), (1, 7));
            assert!(std::ptr::eq(a.local(), a.clone().local()));
            assert!(!std::ptr::eq(a.local(), b.local()));
            assert!(a.is_alive(a.token()));
            assert!(
                !a.is_alive(b.token()),
                "another pid namespace is not visible"
            );
            let forged = Token::new(a.pid(), a.token().start_ticks() + 1).unwrap();
            assert!(
                !b.kernel().spawn(UID).is_alive(forged),
                "same pid, other start"
            );
            let t1 = a.now_unix_nanos();
            assert!(a.now_unix_nanos() > t1, "the logical clock advances");
        }

        #[test]
        fn the_random_generator_is_deterministic_per_seed() {
            let draw = |seed| {
                let os = SimKernel::new(seed).spawn(UID);
                [os.random_u128().unwrap(), os.random_u128().unwrap()]
            };
            assert_eq!(draw(5), draw(5));
            assert_ne!(draw(5), draw(6));
            assert_ne!(draw(5)[0], draw(5)[1]);
        }

        #[test]
        fn created_objects_are_exclusive_and_missing_ones_are_gone() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let b = k.spawn(UID);
            let _f = a.shm_create("shmrc-x").unwrap();
            let err = b.shm_create("shmrc-x").unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Os {
                        call: "shm_open",
                        ..
                    }
                ),
                "{err:?}"
            );
            assert_eq!(kind(&err), Some(io::ErrorKind::AlreadyExists));
            assert!(b.shm_open("shmrc-missing").unwrap_err().is_gone());
            assert!(b.shm_unlink("shmrc-missing").unwrap_err().is_gone());
            // The names the posix backend refuses before asking the kernel.
            for bad in ["a/b", "/a", "", ".", "..", "a\0b"] {
                for err in [
                    b.shm_create(bad).unwrap_err(),
                    b.shm_open(bad).unwrap_err(),
                    b.shm_unlink(bad).unwrap_err(),
                ] {
                    assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err:?}");
                }
            }
            // What the kernel refuses: a component longer than NAME_MAX.
            let long = "x".repeat(NAME_MAX + 1);
            let err = b.shm_create(&long).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Os {
                        call: "shm_open",
                        ..
                    }
                ),
                "{err:?}"
            );
            let err = b.shm_unlink(&long).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Os {
                        call: "shm_unlink",
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(b.shm_create(&"x".repeat(NAME_MAX)).is_ok());
            assert_eq!(k.names().len(), 2);
            assert!(format!("{k:?}").contains("names: 2"), "{k:?}");
        }

        #[test]
        fn objects_are_private_to_their_owner() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let file = a.shm_create("shmrc-x").unwrap();
            assert_eq!(
                a.stat(&file).unwrap(),
                FileInfo {
                    len: 0,
                    uid: UID,
                    mode: 0o600
                }
            );
            let other = k.spawn(UID + 1);
            assert!(matches!(
                other.shm_open("shmrc-x"),
                Err(Error::OtherUser { owner: UID, me, .. }) if me == UID + 1
            ));
            assert!(k.set_owner("shmrc-x", UID + 1));
            assert!(other.shm_open("shmrc-x").is_ok());
            assert!(matches!(
                a.shm_open("shmrc-x"),
                Err(Error::OtherUser { .. })
            ));
        }

        #[test]
        fn list_returns_matching_names_sorted() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            for name in ["shmrc.b", "other", "shmrc.a", "shmrc-z", "shmrc.c"] {
                drop(a.shm_create(name).unwrap());
            }
            assert_eq!(
                a.shm_list("shmrc.").unwrap(),
                ["shmrc.a", "shmrc.b", "shmrc.c"]
            );
            assert_eq!(
                k.names(),
                ["other", "shmrc-z", "shmrc.a", "shmrc.b", "shmrc.c"]
            );
            assert_eq!(a.shm_list("").unwrap().len(), 5);
        }

        #[test]
        fn two_mappings_see_the_same_words_and_bytes() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let b = k.spawn(UID);
            named(&a, "shmrc-x", 20);
            let fa = a.shm_open("shmrc-x").unwrap();
            let fb = b.shm_open("shmrc-x").unwrap();
            let ma = a.map(&fa, 20).unwrap();
            let mb = b.map(&fb, 16).unwrap();
            assert_eq!((ma.len(), mb.len()), (20, 16));
            assert!(ma.words(3).is_none(), "24 bytes exceed a 20-byte mapping");
            assert_eq!(ma.words(2).unwrap().len(), 2);
            ma.words(2).unwrap()[1].store(42, Ordering::SeqCst);
            assert_eq!(mb.words(2).unwrap()[1].load(Ordering::SeqCst), 42);
            // Bytes across word boundaries, and a partial last word.
            assert!(ma.write(5, b"hello, world!!!"));
            let mut out = [0; 11];
            assert!(mb.read(5, &mut out));
            assert_eq!(&out, b"hello, worl");
            let mut tail = [0; 4];
            assert!(ma.read(16, &mut tail));
            assert_eq!(&tail, b"d!!!");
            assert_eq!(k.peek("shmrc-x", 5, 5).unwrap(), b"hello");
            assert!(k.poke("shmrc-x", 0, &7u64.to_ne_bytes()));
            assert_eq!(mb.words(1).unwrap()[0].load(Ordering::SeqCst), 7);
            // Out of range: nothing copied.
            assert!(!mb.write(10, b"1234567"));
            assert!(!mb.read(usize::MAX, &mut [0]));
            assert!(mb.write(16, b""));
            assert!(!k.poke("shmrc-x", 18, b"abc"));
            assert!(matches!(a.map(&fa, 21), Err(Error::InvalidArgument(_))));
            assert!(matches!(a.map(&fa, 0), Err(Error::InvalidArgument(_))));
        }

        #[test]
        fn unlink_keeps_mappings_valid_and_frees_memory_after_the_last_mapping_and_file() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let file = a.shm_create("shmrc-x").unwrap();
            a.allocate(&file, 64).unwrap();
            let map = a.map(&file, 64).unwrap();
            let other = a.dup(&file).unwrap();
            drop(file);
            a.shm_unlink("shmrc-x").unwrap();
            assert!(k.names().is_empty());
            assert!(a.shm_open("shmrc-x").unwrap_err().is_gone());
            assert!(a.shm_unlink("shmrc-x").unwrap_err().is_gone());
            assert_eq!(k.objects_alive(), 1);
            assert!(map.write(60, b"live"));
            let mut out = [0; 4];
            assert!(map.read(60, &mut out));
            assert_eq!(&out, b"live");
            drop(map);
            assert_eq!(k.objects_alive(), 1, "a file still references it");
            assert_eq!(a.stat(&other).unwrap().len, 64);
            drop(other);
            assert_eq!(k.objects_alive(), 0);
            assert_eq!(k.bytes_allocated(), 0);
            assert_eq!(k.open_files(a.pid()), 0);
        }

        #[test]
        fn memfds_are_anonymous_and_freed_with_their_last_file() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let f = a.memfd_create("shmrc").unwrap();
            a.allocate(&f, 100).unwrap();
            assert!(k.names().is_empty());
            assert_eq!(a.stat(&f).unwrap().len, 100);
            assert_eq!(k.objects_alive(), 1);
            drop(f);
            assert_eq!(k.objects_alive(), 0);
        }

        #[test]
        fn allocate_keeps_contents_and_a_seal_forbids_shrinking() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let f = a.memfd_create("shmrc").unwrap();
            a.allocate(&f, 12).unwrap();
            let m = a.map(&f, 12).unwrap();
            assert!(m.write(0, b"0123456789ab"));
            drop(m);
            a.allocate(&f, 8).unwrap();
            a.allocate(&f, 24).unwrap();
            let m = a.map(&f, 24).unwrap();
            let mut out = [0xff; 24];
            assert!(m.read(0, &mut out));
            assert_eq!(&out[..8], b"01234567");
            assert!(
                out[8..].iter().all(|&b| b == 0),
                "shrunk bytes come back as 0"
            );
            a.seal_size(&f).unwrap();
            let err = a.allocate(&f, 16).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Os {
                        call: "ftruncate",
                        ..
                    }
                ),
                "{err:?}"
            );
            assert_eq!(kind(&err), Some(io::ErrorKind::PermissionDenied));
            assert!(!k.set_file_len(&f, 16));
            assert!(k.set_file_len(&f, 24));
            assert_eq!(a.stat(&f).unwrap().len, 24);
            assert!(
                a.seal_size(&a.shm_create("shmrc-x").unwrap()).is_err(),
                "only memfds can be sealed"
            );
        }

        #[test]
        fn a_hostile_truncate_zeroes_what_it_cuts_off_and_is_seen_by_new_mappings() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            named(&a, "shmrc-x", 64);
            let f = a.shm_open("shmrc-x").unwrap();
            let m = a.map(&f, 64).unwrap();
            assert!(m.write(0, b"0123456789abcdef"));
            assert!(m.write(56, b"the tail"));
            assert!(k.set_len("shmrc-x", 10));
            assert_eq!(a.stat(&f).unwrap().len, 10);
            // Linux frees the pages cut off (touching them through `m` would be
            // SIGBUS); the sim keeps `m` mapped but its bytes from 10 on are zero.
            let mut out = [0xff; 64];
            assert!(m.read(0, &mut out));
            assert_eq!(&out[..10], b"0123456789");
            assert!(out[10..].iter().all(|&b| b == 0), "{out:?}");
            // A write there (SIGBUS on Linux) lands, but does not survive a growth.
            assert!(m.write(56, b"too late"));
            assert!(a.map(&f, 64).is_err());
            assert_eq!(a.map(&f, 10).unwrap().len(), 10);
            assert!(k.set_len("shmrc-x", 64), "growing back within its memory");
            assert_eq!(k.peek("shmrc-x", 56, 8).unwrap(), [0; 8], "grown back as 0");
            assert_eq!(k.peek("shmrc-x", 0, 16).unwrap(), b"0123456789\0\0\0\0\0\0");
            assert!(
                !k.set_len("shmrc-x", 128),
                "cannot grow memory under a mapping"
            );
            drop(m);
            assert!(k.set_len("shmrc-x", 128));
            assert_eq!(k.peek("shmrc-x", 0, 10).unwrap(), b"0123456789");
            assert_eq!(k.peek("shmrc-x", 10, 118).unwrap(), [0; 118]);
            // Unmapped, a shrink and a growth make new memory: the same zeros.
            assert!(k.poke("shmrc-x", 100, b"gone"));
            assert!(k.set_len("shmrc-x", 3));
            assert!(k.set_len("shmrc-x", 104));
            assert_eq!(k.peek("shmrc-x", 0, 104).unwrap()[3..], [0; 101]);
            assert!(!k.set_len("shmrc-missing", 1));
        }

        #[test]
        fn allocate_smaller_while_mapped_zeroes_the_bytes_cut_off() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let f = a.memfd_create("shmrc").unwrap();
            a.allocate(&f, 40).unwrap();
            let m = a.map(&f, 40).unwrap();
            let words = m.words(5).unwrap();
            for (i, w) in words.iter().enumerate() {
                w.store(u64::MAX - i as u64, Ordering::SeqCst);
            }
            a.allocate(&f, 13).unwrap();
            assert_eq!(k.bytes_allocated(), 13);
            assert_eq!(words[0].load(Ordering::SeqCst), u64::MAX);
            let mut second = (u64::MAX - 1).to_ne_bytes();
            second[5..].fill(0);
            assert_eq!(
                words[1].load(Ordering::SeqCst),
                u64::from_ne_bytes(second),
                "bytes 13.. of the word that holds the new end are zeroed"
            );
            assert!(words[2..].iter().all(|w| w.load(Ordering::SeqCst) == 0));
            // Grown back in place (the memory is still there): zeros, not the old words.
            a.allocate(&f, 40).unwrap();
            assert!(words[2..].iter().all(|w| w.load(Ordering::SeqCst) == 0));
            assert_eq!(k.bytes_allocated(), 40);
        }

        #[test]
        fn a_killed_process_is_dead_and_its_calls_return_killed() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let b = k.spawn(UID);
            let f = a.shm_create("shmrc-x").unwrap();
            a.allocate(&f, 8).unwrap();
            let m = a.map(&f, 8).unwrap();
            let (sa, _sb) = k.stream_pair(&a, &b);
            assert!(b.is_alive(a.token()));
            k.kill(a.pid());
            assert!(k.is_killed(a.pid()));
            assert!(!b.is_alive(a.token()));
            assert!(!a.is_alive(a.token()));
            assert!(matches!(a.crash_point(), Err(Error::Killed)));
            assert!(matches!(a.shm_create("shmrc-y"), Err(Error::Killed)));
            assert!(matches!(a.shm_open("shmrc-x"), Err(Error::Killed)));
            assert!(matches!(a.shm_unlink("shmrc-x"), Err(Error::Killed)));
            assert!(matches!(a.shm_list(""), Err(Error::Killed)));
            assert!(matches!(a.memfd_create("x"), Err(Error::Killed)));
            assert!(matches!(a.dup(&f), Err(Error::Killed)));
            assert!(matches!(a.allocate(&f, 16), Err(Error::Killed)));
            assert!(matches!(a.stat(&f), Err(Error::Killed)));
            assert!(matches!(a.map(&f, 8), Err(Error::Killed)));
            assert!(matches!(a.random_u128(), Err(Error::Killed)));
            assert!(matches!(a.send(&sa, b"x", &[]), Err(Error::Killed)));
            assert!(matches!(
                a.recv(&sa, &mut [0; 4], &mut Vec::new()),
                Err(Error::Killed)
            ));
            // Its files and mappings stay until the kernel reaps it.
            assert_eq!(k.names(), ["shmrc-x"]);
            assert_eq!(k.open_files(a.pid()), 1);
            assert!(m.write(0, b"x"));
            drop((f, m));
            assert_eq!(k.open_files(a.pid()), 0);
        }

        #[test]
        fn kill_at_step_kills_at_exactly_the_nth_crash_point() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            a.crash_point().unwrap();
            assert_eq!(k.steps(a.pid()), 1);
            k.kill_at_step(a.pid(), 2);
            a.crash_point().unwrap();
            a.crash_point().unwrap();
            assert!(a.is_alive(a.token()));
            assert!(matches!(a.crash_point(), Err(Error::Killed)));
            assert!(!a.is_alive(a.token()));
            assert_eq!(k.steps(a.pid()), 3, "the fatal point is not passed");
            assert!(matches!(a.crash_point(), Err(Error::Killed)));
            let b = k.spawn(UID);
            k.kill_at_step(b.pid(), 0);
            assert!(matches!(b.crash_point(), Err(Error::Killed)));
            assert_eq!(k.steps(b.pid()), 0);
        }

        /// `Error::Os { call, EBADF }`.
        fn ebadf(result: Result<impl fmt::Debug>, want: &str) {
            let err = result.unwrap_err();
            assert!(
                matches!(&err, Error::Os { call, source }
                    if *call == want && source.raw_os_error() == Some(libc::EBADF)),
                "{want}: {err:?}"
            );
        }

        #[test]
        fn files_and_stream_ends_of_another_process_are_ebadf() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let b = k.spawn(UID);
            let (sa, sb) = k.stream_pair(&a, &b);
            let named_file = a.shm_create("shmrc-x").unwrap();
            let f = a.memfd_create("a's").unwrap();
            a.allocate(&f, 64).unwrap();
            let m = a.map(&f, 64).unwrap();
            assert!(m.write(0, b"a's bytes"));

            ebadf(b.seal_size(&f), "fcntl(F_ADD_SEALS)");
            ebadf(b.dup(&f), "fcntl(F_DUPFD_CLOEXEC)");
            ebadf(b.allocate(&f, 8), "ftruncate");
            ebadf(b.allocate(&named_file, 64), "ftruncate");
            ebadf(b.stat(&f), "fstat");
            ebadf(b.map(&f, 64), "mmap");
            ebadf(b.send(&sb, b"x", &[&f]), "sendmsg");
            ebadf(b.send(&sa, b"x", &[]), "sendmsg");
            ebadf(b.recv(&sa, &mut [0; 4], &mut Vec::new()), "recvmsg");
            ebadf(a.recv(&sb, &mut [0; 4], &mut Vec::new()), "recvmsg");
            // Nothing was done: no file opened, no length, seal or message changed.
            assert_eq!(k.open_files(b.pid()), 0);
            assert_eq!(a.stat(&f).unwrap().len, 64);
            assert_eq!(a.stat(&named_file).unwrap().len, 0);
            let err = b.recv(&sb, &mut [0; 4], &mut Vec::new()).unwrap_err();
            assert_eq!(kind(&err), Some(io::ErrorKind::WouldBlock), "nothing sent");
            assert!(matches!(
                b.recv(&sb, &mut [], &mut Vec::new()),
                Err(Error::InvalidArgument(_))
            ));

            // A file received is the receiver's, and no longer only the sender's.
            a.send(&sa, b"f", &[&f]).unwrap();
            let mut files = Vec::new();
            assert_eq!(b.recv(&sb, &mut [0; 4], &mut files).unwrap(), 1);
            let theirs = files.pop().unwrap();
            assert_eq!(b.stat(&theirs).unwrap().len, 64);
            let mut out = [0; 9];
            assert!(b.map(&theirs, 64).unwrap().read(0, &mut out));
            assert_eq!(&out, b"a's bytes");
            let dup = b.dup(&theirs).unwrap();
            b.seal_size(&dup).unwrap();
            ebadf(a.stat(&theirs), "fstat");
            ebadf(a.map(&dup, 8), "mmap");
            a.stat(&f).unwrap();
            // A dead process is `Killed`, whoever owns the file.
            k.kill(b.pid());
            assert!(matches!(b.stat(&f), Err(Error::Killed)));
        }

        #[test]
        fn the_fd_limit_produces_too_many_fds() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            k.set_fd_limit(a.pid(), 2);
            let f1 = a.memfd_create("1").unwrap();
            let f2 = a.shm_create("shmrc-x").unwrap();
            for err in [
                a.memfd_create("3").unwrap_err(),
                a.shm_create("shmrc-y").unwrap_err(),
                a.shm_open("shmrc-x").unwrap_err(),
                a.dup(&f1).unwrap_err(),
            ] {
                assert!(matches!(err, Error::TooManyFds { limit: 2, .. }), "{err:?}");
            }
            assert!(k.names() == ["shmrc-x"], "a refused create leaves no name");
            drop(f2);
            let f3 = a.dup(&f1).unwrap();
            assert_eq!(k.open_files(a.pid()), 2);
            drop((f1, f3));
            assert_eq!(k.open_files(a.pid()), 0);
        }

        #[test]
        fn the_space_limit_produces_no_space() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            k.set_space_limit(Some(100));
            let f1 = a.memfd_create("1").unwrap();
            a.allocate(&f1, 64).unwrap();
            let f2 = a.memfd_create("2").unwrap();
            let err = a.allocate(&f2, 64).unwrap_err();
            assert!(
                matches!(&err, Error::NoSpace { len: 64, source }
                    if source.kind() == io::ErrorKind::StorageFull),
                "{err:?}"
            );
            assert_eq!(
                a.stat(&f2).unwrap().len,
                0,
                "a failed allocate sizes nothing"
            );
            a.allocate(&f1, 36).unwrap();
            a.allocate(&f2, 64).unwrap();
            assert_eq!(k.bytes_allocated(), 100);
            drop(f1);
            assert_eq!(k.bytes_allocated(), 64);
            k.set_space_limit(None);
            assert!(matches!(
                a.allocate(&f2, MACHINE_BYTES + 1),
                Err(Error::NoSpace { .. })
            ));
            // A segment that does not fit leaves no name behind.
            k.set_space_limit(Some(80));
            let err = segment::create(&a, Strategy::FileSystem, &ns(), 4096, 4).unwrap_err();
            assert!(matches!(err, Error::NoSpace { .. }), "{err:?}");
            assert!(k.names().is_empty());
            assert_eq!(k.objects_alive(), 1);
        }

        #[test]
        fn a_stream_carries_bytes_and_files_in_order_with_partial_reads() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let b = k.spawn(UID);
            let (sa, sb) = k.stream_pair(&a, &b);
            let f1 = a.memfd_create("1").unwrap();
            a.allocate(&f1, 8).unwrap();
            a.map(&f1, 8).unwrap().words(1).unwrap()[0].store(11, Ordering::SeqCst);
            let f2 = a.memfd_create("2").unwrap();
            a.send(&sa, b"abc", &[&f1]).unwrap();
            a.send(&sa, b"de", &[]).unwrap();
            a.send(&sa, b"fgh", &[&f2, &f1]).unwrap();
            a.send(&sa, b"ij", &[]).unwrap();
            drop((f1, f2));
            assert_eq!(k.objects_alive(), 2, "files in flight stay alive");

            let mut files = Vec::new();
            let mut buf = [0; 2];
            assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 2);
            assert_eq!(&buf, b"ab");
            assert_eq!(
                files.len(),
                1,
                "files come with the first byte of their send"
            );
            assert_eq!(k.open_files(b.pid()), 1);
            let map = b.map(&files[0], 8).unwrap();
            assert_eq!(map.words(1).unwrap()[0].load(Ordering::SeqCst), 11);

            let mut buf = [0; 16];
            assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 3);
            assert_eq!(&buf[..3], b"cde", "file-less sends are glued on");
            assert_eq!(files.len(), 1);
            assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 3);
            assert_eq!(&buf[..3], b"fgh", "a send with files starts a new read");
            assert_eq!(files.len(), 3);
            assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 2);
            assert_eq!(&buf[..2], b"ij");
            let err = b.recv(&sb, &mut buf, &mut files).unwrap_err();
            assert_eq!(kind(&err), Some(io::ErrorKind::WouldBlock));

            // Back the other way, then hang up.
            b.send(&sb, b"ok", &[]).unwrap();
            let mut back = [0; 2];
            assert_eq!(a.recv(&sa, &mut back, &mut Vec::new()).unwrap(), 2);
            assert_eq!(&back, b"ok");
            drop(sa);
            assert_eq!(b.recv(&sb, &mut buf, &mut files).unwrap(), 0);
            assert!(matches!(b.send(&sb, b"x", &[]), Err(Error::Disconnected)));
            drop((files, map));
            assert_eq!(k.objects_alive(), 0);
        }

        #[test]
        fn a_closed_end_discards_its_queue_and_too_many_files_are_refused() {
            let k = SimKernel::new(1);
            let a = k.spawn(UID);
            let b = k.spawn(UID);
            let (sa, sb) = k.stream_pair(&a, &b);
            let f = a.memfd_create("1").unwrap();
            let many: Vec<&SimFile> = vec![&f; MAX_FDS_PER_SEND + 1];
            assert!(matches!(
                a.send(&sa, b"x", &many),
                Err(Error::InvalidArgument(_))
            ));
            assert!(matches!(
                a.send(&sa, b"", &[&f]),
                Err(Error::InvalidArgument(_))
            ));

            k.set_fd_limit(b.pid(), 1);
            a.send(&sa, b"xy", &[&f, &f]).unwrap();
            a.send(&sa, b"z", &[]).unwrap();
            let mut files = Vec::new();
            let mut buf = [0; 8];
            let err = b.recv(&sb, &mut buf, &mut files).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::TooManyFds {
                        call: "recvmsg",
                        limit: 1
                    }
                ),
                "{err:?}"
            );
            assert!(files.is_empty());
            assert_eq!(k.open_files(b.pid()), 0);
            assert_eq!(
                b.recv(&sb, &mut buf, &mut files).unwrap(),
                1,
                "bytes were consumed"
            );
            assert_eq!(buf[0], b'z');

            a.send(&sa, b"q", &[&f]).unwrap();
            drop(f);
            assert_eq!(k.objects_alive(), 1);
            drop(sb);
            assert_eq!(k.objects_alive(), 0, "the queue of a closed end is purged");
            assert!(matches!(a.send(&sa, b"x", &[]), Err(Error::Disconnected)));
        }

        #[test]
        fn the_protocol_runs_and_frees_everything_once_the_last_holder_releases() {
            let k = SimKernel::new(42);
            let a = k.spawn(UID);
            let b = k.spawn(UID);
            let created = segment::create(&a, Strategy::FileSystem, &ns(), 100, 4).unwrap();
            let Backing::Named { name, slot: 0 } = &created.backing else {
                panic!("{:?}", created.backing);
            };
            let name = name.clone();
            assert_eq!(k.names(), std::slice::from_ref(&name));
            let layout = created.fields.layout;
            assert!(created.map.write(layout.data_offset, b"payload"));

            let opened = segment::open_named(&b, &ns(), &name).unwrap();
            assert_eq!(opened.fields, created.fields);
            let mut out = [0; 7];
            assert!(opened.map.read(layout.data_offset, &mut out));
            assert_eq!(&out, b"payload");
            let header = Header::of(&opened.map, layout.capacity).unwrap();
            let h = header.holders();
            let word = holders::held_word(b.current());
            let slot = holders::claim(&b, &h, word).unwrap().unwrap();
            assert_eq!(slot, 1);
            assert_eq!(h.slot_word(0), Some(holders::held_word(a.token())));

            k.kill(a.pid());
            assert!(!b.is_alive(a.token()));
            drop(created); // the kernel reaps A
            assert_eq!(k.objects_alive(), 1);

            let released = holders::release(&b, &h, slot, word, &name)
                .unwrap()
                .unwrap();
            assert_eq!(released.outcome, Outcome::Unlinked);
            assert_eq!(released.reclaimed, 1, "A's slot");
            assert!(k.names().is_empty());
            let again = holders::finalize(&b, &h, &name, holders::Reclaim::All).unwrap();
            assert_eq!(again.outcome, Outcome::AlreadyGone);
            assert_eq!(holders::claim(&b, &h, word).unwrap(), Err(ClaimError::Gone));
            assert!(segment::open_named(&b, &ns(), &name).unwrap_err().is_gone());

            assert_eq!(k.objects_alive(), 1, "B still maps it");
            drop(opened);
            assert_eq!(k.objects_alive(), 0);
            assert_eq!(k.open_files(b.pid()), 0);
        }

        #[test]
        fn a_release_killed_at_any_step_is_finished_by_a_later_finalize() {
            // One uninterrupted run counts the steps of B's release ...
            let run = |kill_at: Option<u64>| {
                let k = SimKernel::new(3);
                let a = k.spawn(UID);
                let b = k.spawn(UID);
                let created = segment::create(&a, Strategy::FileSystem, &ns(), 8, 3).unwrap();
                let Backing::Named { name, .. } = &created.backing else {
                    unreachable!()
                };
                let name = name.clone();
                let opened = segment::open_named(&b, &ns(), &name).unwrap();
                let cap = opened.fields.layout.capacity;
                let h = Header::of(&opened.map, cap).unwrap().holders();
                let word = holders::held_word(b.current());
                let slot = holders::claim(&b, &h, word).unwrap().unwrap();
                k.kill(a.pid());
                drop(created);
                let start = k.steps(b.pid());
                if let Some(n) = kill_at {
                    k.kill_at_step(b.pid(), n);
                }
                let result = holders::release(&b, &h, slot, word, &name);
                let steps = k.steps(b.pid()) - start;
                // ... and a sweeper C finishes whatever B left.
                let c = k.spawn(UID);
                if kill_at.is_some() {
                    assert!(matches!(result, Err(Error::Killed)), "{result:?}");
                    let opened = segment::open_named(&c, &ns(), &name).unwrap();
                    let h = Header::of(&opened.map, cap).unwrap().holders();
                    let fin = holders::finalize(&c, &h, &name, holders::Reclaim::All).unwrap();
                    assert_eq!(fin.outcome, Outcome::Unlinked, "killed at {kill_at:?}");
                } else {
                    assert_eq!(result.unwrap().unwrap().outcome, Outcome::Unlinked);
                }
                assert!(k.names().is_empty());
                drop(opened);
                assert_eq!(k.objects_alive(), 0);
                steps
            };
            let steps = run(None);
            assert!(steps > 5);
            for n in 0..steps {
                run(Some(n));
            }
        }

        #[test]
        fn damaged_segments_fail_with_the_error_that_names_the_cause() {
            let k = SimKernel::new(9);
            let a = k.spawn(UID);
            let b = k.spawn(UID);
            let created = segment::create(&a, Strategy::FileSystem, &ns(), 8, 2).unwrap();
            let Backing::Named { name, .. } = &created.backing else {
                unreachable!()
            };
            assert!(k.set_len(name, 64));
            assert!(matches!(
                segment::open_named(&b, &ns(), name),
                Err(Error::Truncated { .. })
            ));
            // Grown back, the segment has its length but not its contents: as on Linux,
            // everything past byte 64 was freed by the truncation and reads as zero:
            // header words 8..=10 (creation time and nonce, covered by the checksum),
            // 12..=15 and the holder slots. The checksum no longer matches.
            assert!(k.set_len(name, created.map.len() as u64));
            let err = segment::open_named(&b, &ns(), name).unwrap_err();
            assert!(
                matches!(&err, Error::Corrupted { what, .. } if what.contains("checksum")),
                "{err:?}"
            );
            assert_eq!(k.peek(name, 64, 64).unwrap(), [0; 64]);
            // A fresh segment for the other damages.
            let created = segment::create(&a, Strategy::FileSystem, &ns(), 8, 2).unwrap();
            let Backing::Named { name, .. } = &created.backing else {
                unreachable!()
            };
            assert!(segment::open_named(&b, &ns(), name).is_ok());
            assert!(k.poke(name, 0, b"NOTSHMRC"));
            assert!(matches!(
                segment::open_named(&b, &ns(), name),
                Err(Error::BadMagic { .. })
            ));
            let stranger = k.spawn_in_namespace(UID, 2);
            assert!(k.poke(name, 0, &crate::segment::MAGIC.to_ne_bytes()));
            assert!(matches!(
                segment::open_named(&stranger, &ns(), name),
                Err(Error::OtherPidNamespace { .. })
            ));
        }
    }

    /// The sim under loom: two simulated processes, each driven by a loom thread, claim
    /// slots of one segment concurrently; loom explores every interleaving.
    #[cfg(feature = "loom")]
    #[test]
    fn sim_processes_claim_distinct_slots_under_loom() {
        use super::SimKernel;
        use crate::holders;
        use crate::namespace::Namespace;
        use crate::os::Os;
        use crate::segment::{self, Backing, Header};
        use crate::strategy::Strategy;

        loom::model(|| {
            let k = SimKernel::new(1);
            let ns = Namespace::new("shmrc-simtest").unwrap();
            let creator = k.spawn(1000);
            let created = segment::create(&creator, Strategy::FileSystem, &ns, 8, 3).unwrap();
            let Backing::Named { name, .. } = &created.backing else {
                unreachable!()
            };
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let os = k.spawn(1000);
                    let (ns, name) = (ns.clone(), name.clone());
                    loom::thread::spawn(move || {
                        let opened = segment::open_named(&os, &ns, &name).unwrap();
                        let cap = opened.fields.layout.capacity;
                        let h = Header::of(&opened.map, cap).unwrap().holders();
                        let word = holders::held_word(os.current());
                        let slot = holders::claim(&os, &h, word).unwrap().unwrap();
                        assert_eq!(h.slot_word(slot), Some(word));
                        slot
                    })
                })
                .collect();
            let mut slots: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            slots.sort_unstable();
            assert_eq!(slots, [1, 2]);
            drop(created);
            assert_eq!(k.objects_alive(), 1, "the name keeps it");
        });
    }

    /// The sim under shuttle: a holder releases while another process claims, under
    /// PCT schedules; whoever ends up holding keeps the segment alive. Both outcomes
    /// (the claimer wins, the claimer is too late) must occur, or the schedules did
    /// not explore the race.
    #[cfg(feature = "shuttle")]
    #[test]
    fn sim_release_and_claim_race_under_shuttle() {
        use super::SimKernel;
        use crate::holders::{self, Outcome};
        use crate::namespace::Namespace;
        use crate::os::Os;
        use crate::segment::{self, Backing, Header};
        use crate::strategy::Strategy;
        use crate::sync::process::{AtomicU64, Ordering::Relaxed};

        static CLAIMER_WON: AtomicU64 = AtomicU64::new(0);
        static CLAIMER_LATE: AtomicU64 = AtomicU64::new(0);
        shuttle::check_pct(
            || {
                let k = SimKernel::new(1);
                let ns = Namespace::new("shmrc-simtest").unwrap();
                let a = k.spawn(1000);
                let created = segment::create(&a, Strategy::FileSystem, &ns, 8, 2).unwrap();
                let Backing::Named { name, slot } = created.backing else {
                    unreachable!()
                };
                let b = k.spawn(1000);
                let (ns_b, name_b) = (ns.clone(), name.clone());
                let claimer = shuttle::thread::spawn(move || {
                    let opened = segment::open_named(&b, &ns_b, &name_b)?;
                    let cap = opened.fields.layout.capacity;
                    let h = Header::of(&opened.map, cap).unwrap().holders();
                    let claimed = holders::claim(&b, &h, holders::held_word(b.current()))?;
                    Ok::<_, crate::Error>((claimed, opened))
                });
                let cap = created.fields.layout.capacity;
                let h = Header::of(&created.map, cap).unwrap().holders();
                let word = holders::held_word(a.current());
                let released = holders::release(&a, &h, slot, word, &name).unwrap();
                let outcome = released.unwrap().outcome;
                match claimer.join().unwrap() {
                    Ok((Ok(_slot), _opened)) => {
                        assert_eq!(outcome, Outcome::InUse);
                        assert_eq!(k.names(), [name]);
                        CLAIMER_WON.fetch_add(1, Relaxed);
                    }
                    // Too late: the name was gone before the open, or every slot was
                    // a tombstone by the claim. Nothing else may happen.
                    Ok((Err(holders::ClaimError::Gone), _)) => {
                        assert_eq!(outcome, Outcome::Unlinked);
                        assert!(k.names().is_empty());
                        CLAIMER_LATE.fetch_add(1, Relaxed);
                    }
                    Err(e) if e.is_gone() => {
                        assert_eq!(outcome, Outcome::Unlinked);
                        assert!(k.names().is_empty());
                        CLAIMER_LATE.fetch_add(1, Relaxed);
                    }
                    other => panic!("the claimer saw {other:?}"),
                }
            },
            1000,
            3,
        );
        let (won, late) = (CLAIMER_WON.load(Relaxed), CLAIMER_LATE.load(Relaxed));
        assert!(
            won > 0 && late > 0,
            "the race was not explored: won {won}, late {late}"
        );
    }
}
