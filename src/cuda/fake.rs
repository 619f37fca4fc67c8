//! [`FakeDriver`]: a [`Driver`] without a GPU. Its "device memory" is one named
//! shared-memory object per allocation, created through the abstract OS, so a handle
//! opened in another process (real or simulated) sees the same bytes, and a free is
//! visible to everyone: the name is unlinked and later opens fail, as a freed CUDA
//! allocation's handle does.
//!
//! It behaves as the real driver does where shmrc depends on it: opening a handle in
//! the process that exported it fails (`CUDA_ERROR_INVALID_CONTEXT`), opening one
//! handle twice in one process fails (`CUDA_ERROR_ALREADY_MAPPED`, so the per-process
//! cache is needed), freeing or copying outside an allocation fails
//! (`CUDA_ERROR_INVALID_VALUE`), and allocating past the device's size fails
//! (`CUDA_ERROR_OUT_OF_MEMORY`).
//!
//! Its VMM allocations (`vmm_*`, the POSIX-fd path) are memfds: the exported "shareable
//! handle" is a duplicate of the memfd, an import maps (here: keeps) a duplicate of its
//! own, so the memory lives while any mapping or exported fd refers to it and goes
//! when the last closes, which is the kernel's refcount on the file, as the driver's
//! is on a `cuMemCreate` allocation. Sizes must be multiples of a 2 MiB granularity
//! (`CUDA_ERROR_INVALID_VALUE` otherwise), and an fd of the wrong size does not map.
//!
//! # An exporter's death
//! A process that dies takes its context along: its legacy allocations and events go,
//! but memory another process has mapped lives until that mapping closes, and handles
//! of the dead process no longer open. The fake does what a driver does at the
//! context's teardown lazily, in a process that notices the death (each named object
//! ends with its exporter's process token): opening a dead exporter's memory or event
//! handle fails with `CUDA_ERROR_INVALID_VALUE`, and that open, closing a mapping of
//! such memory, or unmapping an imported VMM allocation unlinks every object a dead
//! exporter left; the mappings still open keep their pages (the kernel's refcount),
//! so the memory is released when the last one closes. VMM memory itself needs none of
//! this: each importer's memfd holds it.
//!
//! # Asynchrony
//! Like a GPU, the fake device does its copies later than the call that asks for them.
//! Each driver (one per process, as a context is) has a queue, its default stream: a
//! host-to-device copy stages the bytes there (the caller may reuse its buffer at
//! once, as `cuMemcpyHtoD` from pageable memory allows) and a device-to-device copy is
//! queued; neither touches the memory. The queue lands, in order, only where the real
//! driver waits for it too: at a synchronize, before a device-to-host copy (which is
//! ordered after the work before it), and where this fake chooses to, at an event
//! record (so what an IPC event orders is in memory when another process waits on it).
//! Another process sees nothing of a copy still queued, and a copy still queued when
//! its process dies is lost. The trait methods that the [`Driver`] contract calls
//! synchronous (`copy_to_device`, the frees and unmaps) land the queue themselves, as
//! [`RealDriver`](super::real::RealDriver) waits for the context; built with `SHMRC_PLANT=htod_returns_early`,
//! `copy_to_device` returns with its bytes still staged, the bug of issue 28 that the
//! conformance suite and the multi-process tests must catch.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use super::driver::{
    DeviceId, DevicePtr, Driver, EventId, IPC_HANDLE_BYTES, IpcEventHandle, IpcMemHandle,
    MemoryInfo, driver_error,
};
use super::lock;
use crate::error::{Error, Result};
use crate::namespace::is_name_byte;
use crate::os::{Mapping, Os};
use crate::token::Token;

/// The first bytes of a fake IPC handle.
const HANDLE_MAGIC: &[u8; 8] = b"SHMRCFK1";
/// Where the name starts in a fake IPC handle (after the magic and a length byte).
const NAME_AT: usize = HANDLE_MAGIC.len() + 1;
/// The longest object name a fake IPC handle carries.
const MAX_NAME: usize = IPC_HANDLE_BYTES - NAME_AT;
/// The longest name prefix (room for `-<pid>-<tag><n, 8 hex>-<8 hex>`).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::DefaultOs;
/// use shmrc::cuda::{FakeDriver, MAX_FAKE_PREFIX};
///
/// let too_long = "x".repeat(MAX_FAKE_PREFIX + 1);
/// assert!(FakeDriver::new(DefaultOs::default(), &too_long, 1 << 20).is_err());
/// assert!(FakeDriver::new(DefaultOs::default(), &"x".repeat(MAX_FAKE_PREFIX), 1 << 20).is_ok());
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub const MAX_FAKE_PREFIX: usize = 24;
const _: () = assert!(MAX_FAKE_PREFIX + 1 + 10 + 1 + 1 + 8 + 1 + 8 <= MAX_NAME);
/// Fake device addresses start here; each allocation gets its own 4 GiB window.
const ADDRESS_BASE: u64 = 0x7000_0000_0000;
const WINDOW: u64 = 1 << 32;
/// The fake device's VMM allocation granularity (2 MiB, as on current NVIDIA GPUs).
const GRANULARITY: u64 = 2 << 20;
/// The UUID the fake device reports.
const FAKE_UUID: [u8; 16] = *b"shmrc-fake-gpu-0";

const INVALID_VALUE: (i32, &str) = (1, "CUDA_ERROR_INVALID_VALUE");
const OUT_OF_MEMORY: (i32, &str) = (2, "CUDA_ERROR_OUT_OF_MEMORY");
const INVALID_CONTEXT: (i32, &str) = (201, "CUDA_ERROR_INVALID_CONTEXT");
const ALREADY_MAPPED: (i32, &str) = (208, "CUDA_ERROR_ALREADY_MAPPED");
const INVALID_HANDLE: (i32, &str) = (400, "CUDA_ERROR_INVALID_HANDLE");
const NOT_SUPPORTED: (i32, &str) = (801, "CUDA_ERROR_NOT_SUPPORTED");
/// Bytes of a fake event: its record count.
const EVENT_BYTES: u64 = 8;
/// Every named object of the fake device (allocation or event) ends with one more
/// word: its exporter's process token, so that another process can tell when the
/// exporter died.
const OWNER_BYTES: u64 = 8;

fn fail(call: &'static str, (code, name): (i32, &str)) -> Error {
    driver_error(call, code, name)
}

/// One allocation: exported (made here) or opened from another process's handle.
struct Region<O: Os> {
    name: String,
    size: u64,
    map: O::Map,
}

struct State<O: Os> {
    next_window: u64,
    allocated: u64,
    /// Allocations made here, by base address.
    own: BTreeMap<u64, Region<O>>,
    /// Other processes' allocations opened here, by base address.
    opened: BTreeMap<u64, Region<O>>,
    /// VMM mappings (allocated here or imported from an fd), by base address.
    vmm: BTreeMap<u64, VmmRegion>,
    /// Events created (`own`) or opened here, by id.
    events: BTreeMap<u64, FakeEvent<O>>,
    next_event: u64,
    /// Successful `stream_wait_event` calls.
    waits: u64,
    /// The default stream: work queued and not yet done (see the module docs).
    queue: Vec<Queued>,
}

/// Work on the fake device's default stream, done when the queue lands.
enum Queued {
    /// A host-to-device copy: the bytes staged at the call, written at landing.
    Write { dst: DevicePtr, bytes: Vec<u8> },
    /// A device-to-device copy: reads `src` when it runs.
    Copy {
        dst: DevicePtr,
        src: DevicePtr,
        len: usize,
    },
}

/// Where a range of fake device memory lies: in a named region's mapping or in a VMM
/// memfd, with the range's offset there.
enum Place<'a, O: Os> {
    Named(&'a Region<O>, usize),
    Vmm(&'a VmmRegion, u64),
}

impl<O: Os> Place<'_, O> {
    fn write(&self, bytes: &[u8]) -> bool {
        match self {
            Place::Named(region, offset) => region.map.write(*offset, bytes),
            Place::Vmm(region, offset) => region.file.write_all_at(bytes, *offset).is_ok(),
        }
    }

    fn read(&self, out: &mut [u8]) -> bool {
        match self {
            Place::Named(region, offset) => region.map.read(*offset, out),
            Place::Vmm(region, offset) => region.file.read_exact_at(out, *offset).is_ok(),
        }
    }
}

/// A fake IPC event: a named 8-byte object holding how often it was recorded (a
/// record lands the queue first, so it is complete at once and a wait only checks
/// the event is valid).
struct FakeEvent<O: Os> {
    name: String,
    map: O::Map,
    own: bool,
}

/// One VMM mapping: its memfd (this mapping's reference to the memory).
struct VmmRegion {
    file: File,
    size: u64,
    /// Allocated here (counts against the device's size), not imported.
    own: bool,
}

/// A fake CUDA driver: device memory that is shared memory, one named object per
/// allocation, so the whole device flow runs across real processes without a GPU. It
/// fails where the real driver does (opening a handle in the exporting process, or
/// twice in one process; freeing or copying outside an allocation; allocating past the
/// device's size). `O` is [`DefaultOs`](crate::DefaultOs) outside the checkers.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use std::sync::Arc;
/// use shmrc::cuda::{CudaDevice, FakeDriver};
/// use shmrc::{CreateOptions, DefaultOs};
///
/// let driver = Arc::new(FakeDriver::new(DefaultOs::default(), "shmrc-doc-fake-driver", 1 << 20)?);
/// let device = CudaDevice::with_driver(DefaultOs::default(), driver.clone(), &CreateOptions::new());
/// let buf = device.alloc(4096)?;
/// assert_eq!(driver.live_allocations(), 1);
/// drop(buf);
/// assert_eq!(driver.live_allocations(), 0);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct FakeDriver<O: Os> {
    os: O,
    prefix: String,
    total: u64,
    /// Whether the device exports POSIX fds (`without_posix_fd` models one that
    /// does not).
    posix_fd: bool,
    state: Mutex<State<O>>,
}

impl<O: Os> fmt::Debug for FakeDriver<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("FakeDriver")
            .field("prefix", &self.prefix)
            .field("own", &state.own.len())
            .field("opened", &state.opened.len())
            .finish()
    }
}

impl<O: Os> FakeDriver<O> {
    /// A fake device of `total` bytes whose allocations are objects named
    /// `<prefix>-<pid>-<n>-<random>`. Every process sharing buffers uses the same
    /// prefix (at most [`MAX_FAKE_PREFIX`] bytes of `[A-Za-z0-9_-]`, else
    /// [`Error::InvalidArgument`]).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// use shmrc::{DefaultOs, Error};
    ///
    /// let driver = FakeDriver::new(DefaultOs::default(), "shmrc-doc-fake-new", 1 << 20)?;
    /// assert_eq!(driver.memory_info()?.total, 1 << 20);
    /// assert!(matches!(FakeDriver::new(DefaultOs::default(), "no/slash", 1), Err(Error::InvalidArgument(_))));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(os: O, prefix: &str, total: u64) -> Result<FakeDriver<O>> {
        if prefix.is_empty() || prefix.len() > MAX_FAKE_PREFIX || !prefix.bytes().all(is_name_byte)
        {
            return Err(Error::InvalidArgument(format!(
                "fake driver prefix {prefix:?}: 1 to {MAX_FAKE_PREFIX} bytes of [A-Za-z0-9_-]"
            )));
        }
        Ok(FakeDriver {
            os,
            prefix: prefix.to_owned(),
            total,
            posix_fd: true,
            state: Mutex::new(State {
                next_window: 0,
                allocated: 0,
                own: BTreeMap::new(),
                opened: BTreeMap::new(),
                vmm: BTreeMap::new(),
                events: BTreeMap::new(),
                next_event: 1,
                waits: 0,
                queue: Vec::new(),
            }),
        })
    }

    /// The same fake device, but one that cannot export its memory as POSIX fds (as
    /// a GPU without `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`):
    /// `supports_posix_fd` is false and the fd calls fail with
    /// `CUDA_ERROR_NOT_SUPPORTED`, so devices over it share legacy IPC handles.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-no-fd", 1 << 30)?.without_posix_fd();
    /// assert!(!driver.supports_posix_fd()?);
    /// assert!(driver.vmm_alloc(2 << 20).is_err());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn without_posix_fd(mut self) -> FakeDriver<O> {
        self.posix_fd = false;
        self
    }

    /// Number of allocations made here and not yet freed.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// use shmrc::DefaultOs;
    ///
    /// let driver = FakeDriver::new(DefaultOs::default(), "shmrc-doc-fake-live", 1 << 20)?;
    /// let ptr = driver.alloc(4096)?;
    /// assert_eq!(driver.live_allocations(), 1);
    /// driver.free(ptr)?;
    /// assert_eq!(driver.live_allocations(), 0);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        let state = lock(&self.state);
        state.own.len() + state.vmm.values().filter(|r| r.own).count()
    }

    /// Number of other processes' allocations opened here and not yet closed.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// # // SAFETY: a doc example runs one thread (fork's contract).
    /// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
    /// use std::sync::Arc;
    /// use shmrc::cuda::{CudaDevice, DeviceHandle, FakeDriver};
    /// use shmrc::{CreateOptions, DefaultOs, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-fake-open")?);
    /// let producer = CudaDevice::fake("shmrc-doc-fake-open", 1 << 20, &keepalive)?;
    /// let buf = producer.alloc(4096)?;
    /// let bytes = buf.share()?.into_bytes()?;
    /// in_child(|| {
    ///     let driver = Arc::new(FakeDriver::new(DefaultOs::default(), "shmrc-doc-fake-open", 1 << 20)?);
    ///     let consumer = CudaDevice::with_driver(DefaultOs::default(), driver.clone(), &keepalive);
    ///     let view = consumer.attach(DeviceHandle::from_bytes(&bytes)?)?;
    ///     assert_eq!(driver.open_handles(), 1);
    ///     drop(view);
    ///     assert_eq!(driver.open_handles(), 0);
    ///     Ok(())
    /// });
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn open_handles(&self) -> usize {
        let state = lock(&self.state);
        state.opened.len() + state.vmm.values().filter(|r| !r.own).count()
    }

    /// Events this process created or opened and has not destroyed, and how often its
    /// default stream waited on one (what a test checks the ordering with).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-fake-ev", 1 << 20)?;
    /// let event = driver.ipc_event_create()?;
    /// driver.stream_wait_event(event)?;
    /// assert_eq!(driver.event_counts(), (1, 1));
    /// driver.event_destroy(event)?;
    /// assert_eq!(driver.event_counts(), (0, 1));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn event_counts(&self) -> (usize, u64) {
        let state = lock(&self.state);
        (state.events.len(), state.waits)
    }

    /// The VMM mapping containing `ptr`, with its base address.
    fn vmm_at(state: &State<O>, ptr: DevicePtr) -> Option<(u64, &VmmRegion)> {
        state
            .vmm
            .range(..=ptr.0)
            .next_back()
            .filter(|(base, region)| ptr.0 - **base < region.size)
            .map(|(base, region)| (*base, region))
    }

    /// Where `[ptr, ptr + len)` lies, if wholly inside one mapping of this process.
    fn place(state: &State<O>, ptr: DevicePtr, len: usize) -> Option<Place<'_, O>> {
        let fits = |offset: u64, size: u64| offset.saturating_add(len as u64) <= size;
        if let Some((base, region)) = Self::region_at(state, ptr) {
            let offset = ptr.0 - base;
            return fits(offset, region.size).then_some(Place::Named(region, offset as usize));
        }
        let (base, region) = Self::vmm_at(state, ptr)?;
        let offset = ptr.0 - base;
        fits(offset, region.size).then_some(Place::Vmm(region, offset))
    }

    /// Does the queued work, in order. A copy whose memory is no longer mapped here is
    /// dropped, as the device's write into freed memory would be (the frees and unmaps
    /// land the queue first, so only a broken driver of this file would get there).
    fn land(state: &mut State<O>) {
        for work in std::mem::take(&mut state.queue) {
            match work {
                Queued::Write { dst, bytes } => {
                    if let Some(place) = Self::place(state, dst, bytes.len()) {
                        place.write(&bytes);
                    }
                }
                Queued::Copy { dst, src, len } => {
                    let mut bytes = vec![0u8; len];
                    let read = Self::place(state, src, len).is_some_and(|p| p.read(&mut bytes));
                    if let (true, Some(place)) = (read, Self::place(state, dst, len)) {
                        place.write(&bytes);
                    }
                }
            }
        }
    }

    /// Work queued and not yet landed (what a test of the model looks at).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-fake-q", 1 << 20)?;
    /// let (a, b) = (driver.alloc(64)?, driver.alloc(64)?);
    /// driver.copy_on_device(b, a, 64)?; // asynchronous: queued
    /// assert_eq!(driver.queued(), 1);
    /// driver.synchronize()?;
    /// assert_eq!(driver.queued(), 0);
    /// driver.free(a)?;
    /// driver.free(b)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn queued(&self) -> usize {
        lock(&self.state).queue.len()
    }

    fn encode_handle(name: &str) -> IpcMemHandle {
        let mut bytes = [0u8; IPC_HANDLE_BYTES];
        bytes[..HANDLE_MAGIC.len()].copy_from_slice(HANDLE_MAGIC);
        bytes[HANDLE_MAGIC.len()] = name.len() as u8;
        bytes[NAME_AT..NAME_AT + name.len()].copy_from_slice(name.as_bytes());
        IpcMemHandle(bytes)
    }

    /// The object name in `handle`, if it is a fake handle of this driver's prefix.
    fn decode_handle(&self, handle: &IpcMemHandle) -> Option<String> {
        let bytes = &handle.0;
        if &bytes[..HANDLE_MAGIC.len()] != HANDLE_MAGIC {
            return None;
        }
        let len = usize::from(bytes[HANDLE_MAGIC.len()]);
        if len > MAX_NAME {
            return None;
        }
        let name = std::str::from_utf8(bytes.get(NAME_AT..NAME_AT + len)?).ok()?;
        let ours = name
            .strip_prefix(&self.prefix)
            .is_some_and(|rest| rest.starts_with('-'));
        ours.then(|| name.to_owned())
    }

    /// A fresh object name `<prefix>-<pid>-<tag><n>-<random>` (at most 54 bytes: it
    /// fits a handle); `tag` is "" for allocations and "e" for events.
    fn fresh_name(&self, tag: &str, n: u64) -> Result<String> {
        Ok(format!(
            "{}-{}-{tag}{:x}-{:08x}",
            self.prefix,
            self.os.current().pid(),
            n as u32,
            self.os.random_u128()? as u32
        ))
    }

    /// Runs `f` on the event `event` of this process.
    fn with_event<T>(
        &self,
        call: &'static str,
        event: EventId,
        f: impl FnOnce(&FakeEvent<O>) -> Option<T>,
    ) -> Result<T> {
        let state = lock(&self.state);
        state
            .events
            .get(&event.0)
            .and_then(f)
            .ok_or_else(|| fail(call, INVALID_HANDLE))
    }

    /// Creates the named object `name` of `size` bytes and this process's token after
    /// them, mapped whole; unlinked again if that fails.
    fn create_owned(&self, name: &str, size: u64) -> Result<O::Map> {
        let file = self.os.shm_create(name)?;
        let len = size + OWNER_BYTES;
        let made = self
            .os
            .allocate(&file, len)
            .and_then(|()| self.os.map(&file, len as usize))
            .and_then(|map| {
                let owner = self.os.current().word().to_le_bytes();
                if map.write(size as usize, &owner) {
                    Ok(map)
                } else {
                    Err(fail("cuMemAlloc", OUT_OF_MEMORY))
                }
            });
        if made.is_err() {
            let _ = self.os.shm_unlink(name);
        }
        made
    }

    /// The exporter's token stored after the `size` bytes of `map`, if that process is
    /// dead (an unreadable token counts as alive: nothing is reaped on a guess).
    fn dead_owner(&self, map: &O::Map, size: u64) -> Option<Token> {
        let mut word = [0u8; OWNER_BYTES as usize];
        if !map.read(size as usize, &mut word) {
            return None;
        }
        let owner = Token::from_word(u64::from_le_bytes(word))?;
        (!self.os.is_alive(owner)).then_some(owner)
    }

    /// What the driver does at a dead process's context teardown, done here for
    /// every exporter of this device found dead: unlinks the objects it left
    /// (mappings still open keep their pages). Best effort: an object another process
    /// reaps first is simply gone.
    fn reap_dead(&self) {
        let start = format!("{}-", self.prefix);
        for name in self.os.shm_list(&start).unwrap_or_default() {
            let Ok(file) = self.os.shm_open(&name) else {
                continue;
            };
            let Ok(len) = self.os.stat(&file).map(|info| info.len) else {
                continue;
            };
            let dead = len > OWNER_BYTES
                && len < WINDOW
                && self
                    .os
                    .map(&file, len as usize)
                    .ok()
                    .and_then(|map| self.dead_owner(&map, len - OWNER_BYTES))
                    .is_some();
            if dead {
                let _ = self.os.shm_unlink(&name);
            }
        }
    }

    /// The base address of a fresh 4 GiB window; `None` once the address space is used
    /// up (after about four billion allocations).
    fn take_window(state: &mut State<O>) -> Option<u64> {
        let base = state
            .next_window
            .checked_mul(WINDOW)
            .and_then(|offset| offset.checked_add(ADDRESS_BASE))?;
        state.next_window += 1;
        Some(base)
    }

    /// The region (own or opened) containing `ptr`, with its base address.
    fn region_at(state: &State<O>, ptr: DevicePtr) -> Option<(u64, &Region<O>)> {
        [&state.own, &state.opened]
            .into_iter()
            .find_map(|table| {
                table
                    .range(..=ptr.0)
                    .next_back()
                    .filter(|(base, region)| ptr.0 - **base < region.size)
            })
            .map(|(base, region)| (*base, region))
    }
}

impl<O: Os> Driver for FakeDriver<O> {
    fn device(&self) -> Result<DeviceId> {
        Ok(DeviceId {
            ordinal: 0,
            uuid: FAKE_UUID,
        })
    }

    fn alloc(&self, size: usize) -> Result<DevicePtr> {
        const CALL: &str = "cuMemAlloc";
        let size = size as u64;
        let mut state = lock(&self.state);
        if size == 0 || size >= WINDOW {
            return Err(fail(CALL, INVALID_VALUE));
        }
        if state.allocated.saturating_add(size) > self.total {
            return Err(fail(CALL, OUT_OF_MEMORY));
        }
        let base = Self::take_window(&mut state).ok_or_else(|| fail(CALL, OUT_OF_MEMORY))?;
        let name = self.fresh_name("", state.next_window)?;
        let map = self.create_owned(&name, size)?;
        state.allocated += size;
        state.own.insert(base, Region { name, size, map });
        Ok(DevicePtr(base))
    }

    fn free(&self, ptr: DevicePtr) -> Result<()> {
        let mut state = lock(&self.state);
        // As the contract says: a free waits for the work queued before it.
        Self::land(&mut state);
        let region = state
            .own
            .remove(&ptr.0)
            .ok_or_else(|| fail("cuMemFree", INVALID_VALUE))?;
        state.allocated -= region.size;
        self.os.shm_unlink(&region.name)
    }

    fn ipc_get_mem_handle(&self, ptr: DevicePtr) -> Result<IpcMemHandle> {
        let state = lock(&self.state);
        let region = state
            .own
            .get(&ptr.0)
            .ok_or_else(|| fail("cuIpcGetMemHandle", INVALID_VALUE))?;
        Ok(Self::encode_handle(&region.name))
    }

    fn ipc_open_mem_handle(&self, handle: &IpcMemHandle) -> Result<DevicePtr> {
        const CALL: &str = "cuIpcOpenMemHandle";
        let name = self
            .decode_handle(handle)
            .ok_or_else(|| fail(CALL, INVALID_VALUE))?;
        let mut state = lock(&self.state);
        if state.own.values().any(|r| r.name == name) {
            return Err(fail(CALL, INVALID_CONTEXT));
        }
        if state.opened.values().any(|r| r.name == name) {
            return Err(fail(CALL, ALREADY_MAPPED));
        }
        let file = self.os.shm_open(&name).map_err(|e| match e {
            // A freed allocation's handle: the driver says the value is invalid.
            Error::Gone { .. } => fail(CALL, INVALID_VALUE),
            e => e,
        })?;
        let len = self.os.stat(&file)?.len;
        if len <= OWNER_BYTES || len >= WINDOW {
            return Err(fail(CALL, INVALID_VALUE));
        }
        let map = self.os.map(&file, len as usize)?;
        let size = len - OWNER_BYTES;
        if self.dead_owner(&map, size).is_some() {
            self.reap_dead();
            return Err(fail(CALL, INVALID_VALUE));
        }
        let base = Self::take_window(&mut state).ok_or_else(|| fail(CALL, OUT_OF_MEMORY))?;
        state.opened.insert(base, Region { name, size, map });
        Ok(DevicePtr(base))
    }

    fn ipc_close_mem_handle(&self, ptr: DevicePtr) -> Result<()> {
        let mut state = lock(&self.state);
        Self::land(&mut state);
        let region = state
            .opened
            .remove(&ptr.0)
            .ok_or_else(|| fail("cuIpcCloseMemHandle", INVALID_VALUE))?;
        drop(state);
        if self.dead_owner(&region.map, region.size).is_some() {
            self.reap_dead();
        }
        Ok(())
    }

    fn address_range(&self, ptr: DevicePtr) -> Result<(DevicePtr, u64)> {
        let state = lock(&self.state);
        Self::region_at(&state, ptr)
            .map(|(base, region)| (DevicePtr(base), region.size))
            .or_else(|| Self::vmm_at(&state, ptr).map(|(base, r)| (DevicePtr(base), r.size)))
            .ok_or_else(|| fail("cuMemGetAddressRange", INVALID_VALUE))
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        let state = lock(&self.state);
        Ok(MemoryInfo {
            free: self.total - state.allocated,
            total: self.total,
        })
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        {
            let mut state = lock(&self.state);
            if Self::place(&state, dst, src.len()).is_none() {
                return Err(fail("cuMemcpyHtoD", INVALID_VALUE));
            }
            let bytes = src.to_vec();
            state.queue.push(Queued::Write { dst, bytes });
        }
        if cfg!(shmrc_plant = "htod_returns_early") {
            return Ok(()); // staged, not landed: what issue 28 found on an H100
        }
        self.synchronize()
    }

    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        let mut state = lock(&self.state);
        // cuMemcpyDtoH is ordered after the work queued before it.
        Self::land(&mut state);
        match Self::place(&state, src, dst.len()) {
            Some(place) if place.read(dst) => Ok(()),
            _ => Err(fail("cuMemcpyDtoH", INVALID_VALUE)),
        }
    }

    fn copy_on_device(&self, dst: DevicePtr, src: DevicePtr, len: usize) -> Result<()> {
        let mut state = lock(&self.state);
        let both =
            Self::place(&state, src, len).is_some() && Self::place(&state, dst, len).is_some();
        if !both {
            return Err(fail("cuMemcpyDtoD", INVALID_VALUE));
        }
        state.queue.push(Queued::Copy { dst, src, len });
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Self::land(&mut lock(&self.state));
        Ok(())
    }

    fn supports_posix_fd(&self) -> Result<bool> {
        Ok(self.posix_fd)
    }

    fn vmm_granularity(&self) -> Result<u64> {
        Ok(GRANULARITY)
    }

    fn vmm_alloc(&self, size: u64) -> Result<DevicePtr> {
        const CALL: &str = "cuMemCreate";
        if !self.posix_fd {
            return Err(fail(CALL, NOT_SUPPORTED));
        }
        if size == 0 || size % GRANULARITY != 0 || size >= WINDOW {
            return Err(fail(CALL, INVALID_VALUE));
        }
        let mut state = lock(&self.state);
        if state.allocated.saturating_add(size) > self.total {
            return Err(fail(CALL, OUT_OF_MEMORY));
        }
        let fd = nix::sys::memfd::memfd_create(
            c"shmrc-fake-vmm",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )
        .map_err(|e| Error::os("memfd_create", e))?;
        let file = File::from(fd);
        file.set_len(size).map_err(|e| Error::os("ftruncate", e))?;
        let base = Self::take_window(&mut state).ok_or_else(|| fail(CALL, OUT_OF_MEMORY))?;
        state.allocated += size;
        let own = true;
        state.vmm.insert(base, VmmRegion { file, size, own });
        Ok(DevicePtr(base))
    }

    fn vmm_export(&self, ptr: DevicePtr) -> Result<OwnedFd> {
        const CALL: &str = "cuMemExportToShareableHandle";
        let state = lock(&self.state);
        let region = state
            .vmm
            .get(&ptr.0)
            .ok_or_else(|| fail(CALL, INVALID_VALUE))?;
        region
            .file
            .try_clone()
            .map(OwnedFd::from)
            .map_err(|e| Error::os("dup", e))
    }

    fn vmm_import(&self, fd: BorrowedFd<'_>, size: u64) -> Result<DevicePtr> {
        const CALL: &str = "cuMemImportFromShareableHandle";
        if !self.posix_fd {
            return Err(fail(CALL, NOT_SUPPORTED));
        }
        let file = File::from(fd.try_clone_to_owned().map_err(|e| Error::os("dup", e))?);
        // A file that is no allocation of this size does not map (cuMemMap refuses).
        let actual = file.metadata().map(|m| m.len()).unwrap_or(0);
        if size == 0 || size % GRANULARITY != 0 || actual != size {
            return Err(fail(CALL, INVALID_VALUE));
        }
        let mut state = lock(&self.state);
        let base = Self::take_window(&mut state).ok_or_else(|| fail(CALL, OUT_OF_MEMORY))?;
        let own = false;
        state.vmm.insert(base, VmmRegion { file, size, own });
        Ok(DevicePtr(base))
    }

    fn vmm_free(&self, ptr: DevicePtr) -> Result<()> {
        let mut state = lock(&self.state);
        Self::land(&mut state);
        let region = state
            .vmm
            .remove(&ptr.0)
            .ok_or_else(|| fail("cuMemUnmap", INVALID_VALUE))?;
        if region.own {
            state.allocated -= region.size;
        } else {
            // An import does not know its exporter: look for dead ones.
            drop(state);
            self.reap_dead();
        }
        Ok(())
    }

    fn ipc_event_create(&self) -> Result<EventId> {
        let mut state = lock(&self.state);
        let id = state.next_event;
        let name = self.fresh_name("e", id)?;
        let map = self.create_owned(&name, EVENT_BYTES)?;
        state.next_event += 1;
        let own = true;
        state.events.insert(id, FakeEvent { name, map, own });
        Ok(EventId(id))
    }

    fn ipc_event_handle(&self, event: EventId) -> Result<IpcEventHandle> {
        self.with_event("cuIpcGetEventHandle", event, |e| {
            e.own
                .then(|| IpcEventHandle(Self::encode_handle(&e.name).0))
        })
    }

    fn ipc_event_open(&self, handle: &IpcEventHandle) -> Result<EventId> {
        const CALL: &str = "cuIpcOpenEventHandle";
        let name = self
            .decode_handle(&IpcMemHandle(handle.0))
            .ok_or_else(|| fail(CALL, INVALID_VALUE))?;
        let file = self.os.shm_open(&name).map_err(|e| match e {
            Error::Gone { .. } => fail(CALL, INVALID_VALUE),
            e => e,
        })?;
        if self.os.stat(&file)?.len != EVENT_BYTES + OWNER_BYTES {
            return Err(fail(CALL, INVALID_VALUE));
        }
        let map = self.os.map(&file, (EVENT_BYTES + OWNER_BYTES) as usize)?;
        if self.dead_owner(&map, EVENT_BYTES).is_some() {
            self.reap_dead();
            return Err(fail(CALL, INVALID_VALUE));
        }
        let mut state = lock(&self.state);
        let id = state.next_event;
        state.next_event += 1;
        let own = false;
        state.events.insert(id, FakeEvent { name, map, own });
        Ok(EventId(id))
    }

    fn event_record(&self, event: EventId) -> Result<()> {
        // The fake's choice of landing point: the work before a record is done by it,
        // so the event completes at once.
        self.synchronize()?;
        self.with_event("cuEventRecord", event, |e| {
            let mut count = [0u8; 8];
            (e.map.read(0, &mut count)
                && e.map
                    .write(0, &(u64::from_le_bytes(count) + 1).to_le_bytes()))
            .then_some(())
        })
    }

    fn stream_wait_event(&self, event: EventId) -> Result<()> {
        self.with_event("cuStreamWaitEvent", event, |e| {
            let mut count = [0u8; 8];
            e.map.read(0, &mut count).then_some(())
        })?;
        lock(&self.state).waits += 1;
        Ok(())
    }

    fn event_destroy(&self, event: EventId) -> Result<()> {
        let removed = lock(&self.state).events.remove(&event.0);
        let event = removed.ok_or_else(|| fail("cuEventDestroy", INVALID_HANDLE))?;
        if event.own {
            self.os.shm_unlink(&event.name)?;
        }
        Ok(())
    }
}
