//! Device buffers and their sharing: [`DeviceBuf`] (the producer's allocation),
//! [`DeviceHandle`] (what travels), [`DeviceView`] (a consumer's mapping).
//!
//! A buffer's first [`DeviceBuf::share`] creates its keep-alive: a file_system shmrc
//! segment whose data part is the allocation's [`Identity`] and whose holder slots are
//! the references to the device memory. The producer holds one slot; a handle in
//! flight holds one; each consumer process holds one while any of its views lives.
//! Dropping the `DeviceBuf` releases the producer's slot and moves the allocation to
//! the limbo list, from which it is freed once the keep-alive is gone.

use std::fmt;
use std::ops::Deref;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use super::allocator::{DeviceAllocator, DeviceExport};
use super::device::CudaDevice;
use super::driver::{
    DeviceId, DevicePtr, Driver, EventId, HandleKind, IPC_HANDLE_BYTES, IpcMemHandle,
};
use super::identity::{IDENTITY_BYTES, Identity};
use super::limbo::{Drain, Entry};
use super::lock;
use crate::buf::ShmBuf;
use crate::error::{Error, Result};
use crate::handle::ShareHandle;
use crate::manager::DefaultOs;
use crate::os::Os;
use crate::protocol::holders::{Census, Finalized, Outcome};
use crate::strategy::Strategy;

/// A range of device memory, bounds-checked; what [`DeviceBuf`] and [`DeviceView`]
/// dereference to. Not `Clone`: a copy could outlive the buffer or view it came from
/// and reach memory already unmapped or freed.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::CreateOptions;
/// use shmrc::cuda::{CudaDevice, DeviceSpan};
///
/// let device = CudaDevice::fake("shmrc-doc-span", 1 << 20, &CreateOptions::new())?;
/// let buf = device.alloc(256)?;
/// let span: &DeviceSpan = &buf;
/// span.write_at(0, &[9; 256])?;
/// let mut out = [0u8; 256];
/// span.read_at(0, &mut out)?;
/// assert_eq!(out, [9; 256]);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct DeviceSpan {
    driver: Arc<dyn Driver>,
    ptr: DevicePtr,
    size: u64,
}

impl DeviceSpan {
    /// The device address (in this process), to pass to kernels or libraries.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::CreateOptions;
    /// use shmrc::cuda::CudaDevice;
    ///
    /// let device = CudaDevice::fake("shmrc-doc-ptr", 1 << 20, &CreateOptions::new())?;
    /// let buf = device.alloc(4096)?;
    /// let (base, len) = device.driver().address_range(buf.ptr())?;
    /// assert_eq!((base, len), (buf.ptr(), 4096));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Length in bytes.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// let device = shmrc::cuda::CudaDevice::fake("shmrc-doc-len", 1 << 20, &shmrc::CreateOptions::new())?;
    /// assert_eq!(device.alloc(4096)?.len(), 4096);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.size as usize
    }

    /// Whether the span is empty (never: buffers have at least one byte).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// let device = shmrc::cuda::CudaDevice::fake("shmrc-doc-empty", 1 << 20, &shmrc::CreateOptions::new())?;
    /// assert!(!device.alloc(1)?.is_empty());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Copies `data` to the span at `offset`, synchronously: when it returns the bytes
    /// are in device memory, and every process mapping it (the producer, the other
    /// consumers) reads them from then on. A range past the end is
    /// [`Error::OutOfBounds`] and copies nothing.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::{CreateOptions, Error};
    /// use shmrc::cuda::CudaDevice;
    ///
    /// let device = CudaDevice::fake("shmrc-doc-write", 1 << 20, &CreateOptions::new())?;
    /// let buf = device.alloc(8)?;
    /// buf.write_at(0, &1.5f64.to_le_bytes())?;
    /// assert!(matches!(buf.write_at(4, &[0; 8]), Err(Error::OutOfBounds { .. })));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.driver
            .copy_to_device(self.at(offset, data.len())?, data)
    }

    /// Copies from the span at `offset` into `out`, synchronously and after the work
    /// this process queued before it; it sees every other process's completed writes
    /// ([`DeviceSpan::write_at`] returned, or kernels waited for). A range past the
    /// end is [`Error::OutOfBounds`].
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// let device = shmrc::cuda::CudaDevice::fake("shmrc-doc-read", 1 << 20, &shmrc::CreateOptions::new())?;
    /// let buf = device.alloc(8)?;
    /// buf.write_at(0, &1.5f64.to_le_bytes())?;
    /// let mut out = [0u8; 8];
    /// buf.read_at(0, &mut out)?;
    /// assert_eq!(f64::from_le_bytes(out), 1.5);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.driver
            .copy_from_device(self.at(offset, out.len())?, out)
    }

    /// The device address of `len` bytes at `offset`, bounds-checked.
    fn at(&self, offset: usize, len: usize) -> Result<DevicePtr> {
        let out = || Error::OutOfBounds {
            offset,
            len,
            size: self.size as usize,
        };
        let end = offset.checked_add(len).ok_or_else(out)?;
        if end as u64 > self.size {
            return Err(out());
        }
        self.ptr.offset(offset as u64).ok_or_else(out)
    }
}

impl fmt::Debug for DeviceSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceSpan")
            .field("ptr", &self.ptr)
            .field("len", &self.size)
            .finish()
    }
}

/// A device allocation made in this process (by [`CudaDevice::alloc`]); it derefs
/// to its [`DeviceSpan`].
///
/// Its first [`DeviceBuf::share`] creates its *keep-alive*: a file_system shmrc
/// segment that names the allocation and whose holder slots are the references to the
/// device memory (this buffer holds one, a handle in flight one, each consumer process
/// one). Dropping the `DeviceBuf` frees the memory at once if nobody else holds it, and
/// otherwise moves it to the device's limbo list, from which it is freed once the
/// last holder released it (or was killed and reclaimed).
///
/// # Who sees what, when
/// Device memory is shared, not copied: every process mapping the buffer reads and
/// writes the same bytes. What a process sees of another's writes:
/// - [`DeviceSpan::write_at`] is synchronous: once it returns (in the producer or in
///   a consumer), every process reads the new bytes. A consumer that wrote and then
///   tells the producer so (any message after the call) is read correctly.
/// - Work a process queues itself (kernels, `copy_on_device`) is asynchronous. The
///   producer's work queued before a [`DeviceBuf::share`] is ordered by the buffer's
///   IPC event: the share records it, the consumer's stream waits on it at attach, so
///   everything the consumer queues after the attach (and its reads) sees that work.
///   Work queued after the share is not covered: synchronize
///   ([`Driver::synchronize`]), or share again, before telling a consumer to look.
/// - There is no event from a consumer back: its kernels' writes are in memory once it
///   synchronizes, and at the latest when it drops its [`DeviceView`], which waits for
///   this process's work before it unmaps and releases its reference (so the producer
///   never frees memory a consumer's work is still writing).
/// - Dropping the `DeviceBuf` frees the memory only when no consumer holds it, and the
///   free waits for this process's work on it.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::cuda::{CudaDevice, DeviceBuf};
/// use shmrc::{CreateOptions, Namespace};
///
/// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-device-buf")?);
/// let device = CudaDevice::fake("shmrc-doc-device-buf", 1 << 20, &keepalive)?;
/// let buf: DeviceBuf = device.alloc(4096)?;
/// buf.write_at(0, b"weights")?;
/// let handle = buf.share()?; // in flight: it holds the memory too
/// drop(buf);
/// assert_eq!(device.limbo_len(), 1); // freed once the handle is attached and released
/// drop(handle);
/// assert_eq!(device.collect().freed, 1);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct DeviceBuf<O: Os = DefaultOs> {
    device: CudaDevice<O>,
    allocator: Arc<dyn DeviceAllocator>,
    span: DeviceSpan,
    /// The keep-alive, from the first share on.
    keepalive: Mutex<Option<Shared<O>>>,
}

/// What a buffer's first share set up.
struct Shared<O: Os> {
    keepalive: ShmBuf<O>,
    kind: HandleKind,
    /// Recorded at every share; consumers' streams wait on it.
    event: EventId,
    /// The device the memory is on (every handle says so).
    device: DeviceId,
}

impl<O: Os> DeviceBuf<O> {
    pub(crate) fn new(
        device: CudaDevice<O>,
        allocator: Arc<dyn DeviceAllocator>,
        ptr: DevicePtr,
        size: u64,
    ) -> DeviceBuf<O> {
        let driver = Arc::clone(&device.inner.driver);
        DeviceBuf {
            device,
            allocator,
            span: DeviceSpan { driver, ptr, size },
            keepalive: Mutex::new(None),
        }
    }

    /// A handle that lets one other process attach this buffer; it holds an in-flight
    /// reference, so the memory stays allocated while it travels. Records the buffer's
    /// IPC event on this process's default stream first (`cuEventRecord`; the host does
    /// not wait), and the consumer's stream waits on it at attach, so the consumer sees
    /// what this process's kernels queued before the share. A legacy-IPC handle goes as
    /// bytes ([`DeviceHandle::into_bytes`]) or over a Unix socket; a posix_fd one only
    /// over a socket ([`super::transport::send`]).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// # // SAFETY: a doc example runs one thread (fork's contract).
    /// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
    /// use shmrc::cuda::{CudaDevice, DeviceHandle};
    /// use shmrc::{CreateOptions, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-device-share")?);
    /// let producer = CudaDevice::fake("shmrc-doc-device-share", 1 << 20, &keepalive)?;
    /// let buf = producer.alloc(4096)?;
    /// buf.write_at(0, b"activations")?;
    /// let bytes = buf.share()?.into_bytes()?;
    /// in_child(|| {
    ///     let consumer = CudaDevice::fake("shmrc-doc-device-share", 1 << 20, &keepalive)?;
    ///     let view = consumer.attach(DeviceHandle::from_bytes(&bytes)?)?;
    ///     let mut out = [0u8; 11];
    ///     view.read_at(0, &mut out)?;
    ///     assert_eq!(&out, b"activations");
    ///     Ok(())
    /// });
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn share(&self) -> Result<DeviceHandle<O>> {
        let driver = &self.span.driver;
        let mut shared = lock(&self.keepalive);
        let mut first_export = None;
        if shared.is_none() {
            let export = self.allocator.export(self.span.ptr)?;
            let event = driver.ipc_event_create()?;
            match self.create_keepalive(&export, event) {
                Ok(made) => *shared = Some(made),
                Err(e) => {
                    let _ = driver.event_destroy(event);
                    return Err(e);
                }
            }
            first_export = Some(export);
        }
        let Some(Shared {
            keepalive,
            kind,
            event,
            device,
        }) = shared.as_ref()
        else {
            return Err(Error::NotHolder {
                segment: "device keep-alive".into(),
            });
        };
        // The consumer's stream waits for this: the work queued before the share.
        driver.event_record(*event)?;
        // A POSIX-fd handle carries a descriptor of its own (the one the keep-alive
        // was made with, else a new export).
        let export = match (kind, first_export) {
            (HandleKind::LegacyIpc, _) => None,
            (HandleKind::PosixFd, Some(export)) => Some(export),
            (HandleKind::PosixFd, None) => Some(self.allocator.export(self.span.ptr)?),
        };
        let fd = match export {
            Some(DeviceExport::PosixFd { fd, .. }) => Some(fd),
            Some(DeviceExport::Legacy(_)) => {
                return Err(Error::CudaUnsupported {
                    op: "a legacy export of a buffer first shared as a POSIX fd",
                });
            }
            None => None,
        };
        Ok(DeviceHandle {
            keepalive: keepalive.share()?,
            fd,
            device: Some(*device),
        })
    }

    fn create_keepalive(&self, export: &DeviceExport, event: EventId) -> Result<Shared<O>> {
        let inner = &self.device.inner;
        let (kind, ipc, allocation, offset) = match export {
            DeviceExport::Legacy(e) => (HandleKind::LegacyIpc, e.handle, 0, e.offset),
            DeviceExport::PosixFd {
                allocation, offset, ..
            } => (
                HandleKind::PosixFd,
                IpcMemHandle([0; IPC_HANDLE_BYTES]),
                *allocation,
                *offset,
            ),
        };
        let device = inner.driver.device()?;
        let identity = Identity {
            kind,
            ipc,
            allocation,
            offset,
            size: self.span.size,
            device,
            producer: inner.os.current(),
            event: Some(inner.driver.ipc_event_handle(event)?),
        };
        let keepalive = ShmBuf::create_with(&inner.os, IDENTITY_BYTES, &inner.keepalive_options)?;
        keepalive.write_at(0, &identity.encode())?;
        Ok(Shared {
            keepalive,
            kind,
            event,
            device,
        })
    }

    /// How this buffer is shared, once it was ([`HandleKind::LegacyIpc`] or
    /// [`HandleKind::PosixFd`], as its allocator exports it); `None` before.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{CudaDevice, HandleKind};
    /// use shmrc::{CreateOptions, Strategy};
    ///
    /// shmrc::set_sharing_strategy(Strategy::FileSystem); // legacy IPC handles, as bytes
    /// let device = CudaDevice::fake("shmrc-doc-handle-kind", 1 << 20, &CreateOptions::new())?;
    /// let buf = device.alloc(64)?;
    /// assert_eq!(buf.handle_kind(), None);
    /// let _handle = buf.share()?;
    /// assert_eq!(buf.handle_kind(), Some(HandleKind::LegacyIpc));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn handle_kind(&self) -> Option<HandleKind> {
        lock(&self.keepalive).as_ref().map(|shared| shared.kind)
    }

    /// The keep-alive segment's name, once the buffer was shared (`None` before: a
    /// buffer never shared has no keep-alive). It is what [`crate::inspect()`] lists.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::CudaDevice;
    /// use shmrc::{CreateOptions, Namespace};
    ///
    /// let ns = Namespace::new("shmrc-doc-keepalive")?;
    /// let device = CudaDevice::fake("shmrc-doc-keepalive", 1 << 20, &CreateOptions::new().namespace(ns.clone()))?;
    /// let buf = device.alloc(4096)?;
    /// assert_eq!(buf.keepalive_name(), None);
    /// let _handle = buf.share()?;
    /// let name = buf.keepalive_name().unwrap();
    /// assert_eq!(shmrc::inspect(&ns)?.segments[0].name, name);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn keepalive_name(&self) -> Option<String> {
        lock(&self.keepalive)
            .as_ref()
            .and_then(|shared| shared.keepalive.name().map(str::to_owned))
    }

    /// The holder slots of the keep-alive segment ([`Census`](crate::Census)), once
    /// the buffer was shared (`None` before: a buffer never shared has no keep-alive):
    /// this producer's own slot, the consumers that hold the buffer, the references in
    /// flight, and the consumers that died without letting go. A snapshot read without
    /// a lock, as [`ShmBuf::census`](crate::ShmBuf::census).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::CudaDevice;
    /// use shmrc::{CreateOptions, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-dev-census")?);
    /// let device = CudaDevice::fake("shmrc-doc-dev-census", 1 << 20, &keepalive)?;
    /// let buf = device.alloc(4096)?;
    /// assert!(buf.census().is_none()); // never shared
    /// let handle = buf.share()?;
    /// let census = buf.census().unwrap();
    /// assert_eq!((census.live, census.in_flight), (1, 1)); // the producer; the handle
    /// drop(handle); // never attached: the reference is given back
    /// assert_eq!(buf.census().unwrap().in_flight, 0);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn census(&self) -> Option<Census> {
        lock(&self.keepalive)
            .as_ref()
            .and_then(|shared| shared.keepalive.census())
    }
}

impl<O: Os> Drop for DeviceBuf<O> {
    fn drop(&mut self) {
        let shared = lock(&self.keepalive).take();
        let event = shared
            .as_ref()
            .map(|shared| (Arc::clone(&self.span.driver), shared.event));
        let still_named = shared.and_then(|Shared { keepalive, .. }| {
            let name = keepalive.name().map(str::to_owned);
            match keepalive.release() {
                Ok(Some(Finalized {
                    outcome: Outcome::Unlinked | Outcome::AlreadyGone,
                    ..
                })) => None,
                // Held elsewhere, or the release failed: the limbo list finds out.
                _ => name,
            }
        });
        self.device.release(Entry {
            ptr: self.span.ptr,
            allocator: Arc::clone(&self.allocator),
            keepalive: still_named,
            event,
        });
    }
}

impl<O: Os> Deref for DeviceBuf<O> {
    type Target = DeviceSpan;
    fn deref(&self) -> &DeviceSpan {
        &self.span
    }
}

impl<O: Os> fmt::Debug for DeviceBuf<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuf")
            .field("span", &self.span)
            .field("keepalive", &self.keepalive_name())
            .finish()
    }
}

/// What travels to a consumer: the keep-alive's share handle (with its in-flight
/// reference). Over a Unix socket use [`DeviceHandle::into_share_handle`] with
/// [`crate::transport::send`]; as bytes, [`DeviceHandle::into_bytes`]. Dropping a
/// handle that was never attached gives its reference back.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::cuda::{CudaDevice, DeviceHandle};
/// use shmrc::{CreateOptions, Namespace};
///
/// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-device-handle")?);
/// let device = CudaDevice::fake("shmrc-doc-device-handle", 1 << 20, &keepalive)?;
/// let buf = device.alloc(4096)?;
/// let handle: DeviceHandle = buf.share()?;
/// let bytes = handle.into_bytes()?; // e.g. into a queue message
/// let handle = DeviceHandle::from_bytes(&bytes)?; // a consumer would attach it
/// drop(handle); // nobody attached it: the reference is given back
/// drop(buf);
/// assert_eq!(device.limbo_len(), 0); // nothing held the memory any more
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub struct DeviceHandle<O: Os = DefaultOs> {
    keepalive: ShareHandle<O>,
    /// The allocation's descriptor, for a [`HandleKind::PosixFd`] buffer.
    fd: Option<OwnedFd>,
    /// The device the memory is on; unknown for a handle rebuilt from bytes or from a
    /// keep-alive handle (its keep-alive says, once attached).
    device: Option<DeviceId>,
}

impl<O: Os> DeviceHandle<O> {
    /// The keep-alive handle, to send with [`crate::transport::send`] (alongside host
    /// buffers, in one message).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// # // SAFETY: a doc example runs one thread (fork's contract).
    /// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
    /// use std::os::unix::net::UnixStream;
    /// use shmrc::cuda::{CudaDevice, DeviceHandle};
    /// use shmrc::{CreateOptions, Namespace, transport};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-into-share")?);
    /// let producer = CudaDevice::fake("shmrc-doc-into-share", 1 << 20, &keepalive)?;
    /// let (to_consumer, at_consumer) = UnixStream::pair().unwrap();
    /// let buf = producer.alloc(64)?;
    /// buf.write_at(0, b"batch 3")?;
    /// transport::send(&to_consumer, b"device batch", vec![buf.share()?.into_share_handle()?])?;
    /// in_child(|| {
    ///     let consumer = CudaDevice::fake("shmrc-doc-into-share", 1 << 20, &keepalive)?;
    ///     let mut message = transport::recv(&at_consumer)?;
    ///     let view = consumer.attach(DeviceHandle::from_share_handle(message.handles.remove(0)))?;
    ///     let mut out = [0u8; 7];
    ///     view.read_at(0, &mut out)?;
    ///     assert_eq!(&out, b"batch 3");
    ///     Ok(())
    /// });
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn into_share_handle(self) -> Result<ShareHandle<O>> {
        self.without_fd("sending a device handle as a host handle")
    }

    /// How the buffer is shared: a [`HandleKind::PosixFd`] handle carries a file
    /// descriptor and travels only with [`super::transport::send`].
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::cuda::{CudaDevice, HandleKind, VmmAllocator};
    /// use shmrc::{CreateOptions, Error};
    ///
    /// let device = CudaDevice::fake("shmrc-doc-dev-kind", 1 << 30, &CreateOptions::new())?;
    /// device.set_allocator(Arc::new(VmmAllocator::new(Arc::clone(device.driver()))?));
    /// let handle = device.alloc(64)?.share()?;
    /// assert_eq!(handle.handle_kind(), HandleKind::PosixFd);
    /// assert!(matches!(handle.into_bytes(), Err(Error::WrongStrategy { .. })));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn handle_kind(&self) -> HandleKind {
        match self.fd {
            Some(_) => HandleKind::PosixFd,
            None => HandleKind::LegacyIpc,
        }
    }

    /// The keep-alive handle, for a handle that carries no descriptor.
    fn without_fd(self, op: &'static str) -> Result<ShareHandle<O>> {
        match self.fd {
            None => Ok(self.keepalive),
            Some(_) => Err(Error::WrongStrategy {
                op,
                strategy: Strategy::FileDescriptor,
            }),
        }
    }

    /// The device the buffer's memory is on, when the handle says (one made by a
    /// share or received with [`super::transport`]; not one rebuilt from bytes).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::CudaDevice;
    /// use shmrc::CreateOptions;
    ///
    /// let device = CudaDevice::fake("shmrc-doc-handle-device", 1 << 30, &CreateOptions::new())?;
    /// let handle = device.alloc(64)?.share()?;
    /// assert_eq!(handle.device(), Some(device.driver().device()?));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn device(&self) -> Option<DeviceId> {
        self.device
    }

    /// The keep-alive handle, the descriptor and the device (what
    /// [`super::transport`] sends).
    pub(crate) fn into_parts(self) -> (ShareHandle<O>, Option<OwnedFd>, Option<DeviceId>) {
        (self.keepalive, self.fd, self.device)
    }

    /// A handle from its parts (what [`super::transport`] received).
    pub(crate) fn from_parts(
        keepalive: ShareHandle<O>,
        fd: Option<OwnedFd>,
        device: Option<DeviceId>,
    ) -> DeviceHandle<O> {
        DeviceHandle {
            keepalive,
            fd,
            device,
        }
    }

    /// A device handle from a keep-alive handle received over a socket (see
    /// [`DeviceHandle::into_share_handle`] for the whole exchange). A handle of a
    /// buffer that is no keep-alive is refused at attach
    /// ([`Error::CudaBadIdentity`]).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{CudaDevice, DeviceHandle};
    /// use shmrc::{CreateOptions, Error, Namespace, ShmBuf, Strategy};
    ///
    /// let device = CudaDevice::fake("shmrc-doc-from-share", 1 << 20, &CreateOptions::new())?;
    /// let host = ShmBuf::with_options(
    ///     64,
    ///     &CreateOptions::new().strategy(Strategy::FileSystem).namespace(Namespace::new("shmrc-doc-from-share")?),
    /// )?;
    /// let not_a_device_buffer = DeviceHandle::from_share_handle(host.share()?);
    /// assert!(matches!(device.attach(not_a_device_buffer), Err(Error::CudaBadIdentity { .. })));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn from_share_handle(keepalive: ShareHandle<O>) -> DeviceHandle<O> {
        DeviceHandle {
            keepalive,
            fd: None,
            device: None,
        }
    }

    /// The handle as bytes (it names a file_system segment), to send by any means; the
    /// in-flight reference travels with them (if they are lost, it is released when
    /// this process exits).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::CudaDevice;
    /// use shmrc::{CreateOptions, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-dev-into-bytes")?);
    /// let device = CudaDevice::fake("shmrc-doc-dev-into-bytes", 1 << 20, &keepalive)?;
    /// let buf = device.alloc(64)?;
    /// let bytes: Vec<u8> = buf.share()?.into_bytes()?;
    /// assert!(!bytes.is_empty());
    /// # drop(shmrc::cuda::DeviceHandle::from_bytes(&bytes)?); // gives the reference back
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn into_bytes(self) -> Result<Vec<u8>> {
        self.without_fd("encoding a device handle as bytes")?
            .into_bytes()
    }

    /// A handle from [`DeviceHandle::into_bytes`], as process `os`.
    pub(crate) fn from_bytes_with(os: &O, bytes: &[u8]) -> Result<DeviceHandle<O>> {
        ShareHandle::from_bytes_with(os, bytes).map(DeviceHandle::from_share_handle)
    }
}

/// [`DeviceHandle`]'s decoding for any OS, for the checkers' seam (feature `checkers`,
/// not API): `shmrc::checkers::cuda::DeviceHandleExt`. It is the crate's own
/// `pub(crate)` method of the same name.
#[cfg(feature = "checkers")]
pub trait DeviceHandleExt<O: Os>: Sized {
    /// A handle from [`DeviceHandle::into_bytes`], as process `os`.
    fn from_bytes_with(os: &O, bytes: &[u8]) -> Result<Self>;
}

#[cfg(feature = "checkers")]
impl<O: Os> DeviceHandleExt<O> for DeviceHandle<O> {
    fn from_bytes_with(os: &O, bytes: &[u8]) -> Result<DeviceHandle<O>> {
        DeviceHandle::from_bytes_with(os, bytes)
    }
}

/// Makes this process's default stream wait for the producer's event (recorded at
/// the share), so work queued here after the attach sees what the producer wrote.
fn wait_for_producer(driver: &dyn Driver, handle: &super::driver::IpcEventHandle) -> Result<()> {
    let event = driver.ipc_event_open(handle)?;
    let waited = driver.stream_wait_event(event);
    let destroyed = driver.event_destroy(event);
    waited.and(destroyed)
}

/// A consumer's mapping of the device memory, undone on drop.
enum Lease<O: Os> {
    /// One use of a legacy IPC mapping (shared by the process's views of it).
    Legacy { _use: IpcLease<O> },
    /// A POSIX-fd import of this view's own.
    Vmm(VmmLease),
}

/// A VMM mapping imported from an fd; dropping it unmaps it here (the memory goes
/// once no process maps it and no exported fd is open).
struct VmmLease {
    driver: Arc<dyn Driver>,
    base: DevicePtr,
    /// The descriptor it came with, kept to pass the buffer on ([`DeviceView::share`]).
    fd: OwnedFd,
}

impl Drop for VmmLease {
    fn drop(&mut self) {
        // A failed unmap leaves the mapping until the process exits; nothing to undo.
        let _ = self.driver.vmm_free(self.base);
    }
}

/// One use of an IPC mapping opened in this process; the last one closes it.
struct IpcLease<O: Os> {
    device: CudaDevice<O>,
    handle: IpcMemHandle,
}

impl<O: Os> Drop for IpcLease<O> {
    fn drop(&mut self) {
        // A failed close leaves a mapping until the process exits; nothing to undo.
        let _ = self.device.close_ipc(&self.handle);
    }
}

/// A consumer's view of a buffer another process shared (from
/// [`CudaDevice::attach`]); it derefs to its [`DeviceSpan`]. Dropping it closes the
/// IPC mapping (when it was this process's last view of that allocation) and then
/// releases the keep-alive slot: in that order, so the producer never frees memory
/// still mapped here. It first waits for this process's work on the device
/// (`synchronize`), so what its kernels wrote is in memory before the producer may
/// free it.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// # // SAFETY: a doc example runs one thread (fork's contract).
/// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
/// use shmrc::cuda::{CudaDevice, DeviceHandle, DeviceView};
/// use shmrc::{CreateOptions, Namespace};
///
/// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-device-view")?);
/// let producer = CudaDevice::fake("shmrc-doc-device-view", 1 << 20, &keepalive)?;
/// let buf = producer.alloc(4096)?;
/// let bytes = buf.share()?.into_bytes()?;
/// in_child(|| {
///     let consumer = CudaDevice::fake("shmrc-doc-device-view", 1 << 20, &keepalive)?;
///     let view: DeviceView = consumer.attach(DeviceHandle::from_bytes(&bytes)?)?;
///     view.write_at(0, b"result")?;
///     assert_eq!(consumer.open_handles(), 1);
///     drop(view); // unmapped here, then its slot released
///     assert_eq!(consumer.open_handles(), 0);
///     Ok(())
/// });
/// let mut out = [0u8; 6];
/// buf.read_at(0, &mut out)?;
/// assert_eq!(&out, b"result");
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct DeviceView<O: Os = DefaultOs> {
    // Field order is drop order: unmap first, then release the reference.
    lease: Lease<O>,
    keepalive: ShmBuf<O>,
    span: DeviceSpan,
    identity: Identity,
}

impl<O: Os> DeviceView<O> {
    pub(crate) fn attach(device: &CudaDevice<O>, handle: DeviceHandle<O>) -> Result<DeviceView<O>> {
        let (keepalive, fd, _) = handle.into_parts();
        let keepalive = ShmBuf::attach(keepalive)?;
        let segment = keepalive
            .name()
            .unwrap_or("a file_descriptor buffer")
            .to_owned();
        let bad = |what: String| Error::CudaBadIdentity {
            segment: segment.clone(),
            what,
        };
        if keepalive.strategy() != Strategy::FileSystem || keepalive.len() < IDENTITY_BYTES {
            return Err(bad(format!(
                "a {} buffer of {} bytes is no keep-alive",
                keepalive.strategy(),
                keepalive.len()
            )));
        }
        let mut raw = [0u8; IDENTITY_BYTES];
        keepalive.read_at(0, &mut raw)?;
        let identity = Identity::decode(&raw, &segment)?;
        if identity.producer == device.inner.os.current() {
            return Err(Error::CudaOwnExport { segment });
        }
        let driver = Arc::clone(&device.inner.driver);
        if let Some(handle) = &identity.event {
            wait_for_producer(driver.as_ref(), handle)?;
        }
        let (base, lease) = match (identity.kind, fd) {
            (HandleKind::LegacyIpc, _) => {
                let base = device.open_ipc(&identity.ipc)?;
                let lease = IpcLease {
                    device: device.clone(),
                    handle: identity.ipc,
                };
                (base, Lease::Legacy { _use: lease })
            }
            (HandleKind::PosixFd, Some(fd)) => {
                let base = driver.vmm_import(fd.as_fd(), identity.allocation)?;
                let lease = VmmLease {
                    driver: Arc::clone(&driver),
                    base,
                    fd,
                };
                (base, Lease::Vmm(lease))
            }
            (HandleKind::PosixFd, None) => {
                return Err(bad(
                    "a posix_fd buffer's handle came without its descriptor (send it with shmrc::cuda::transport)"
                        .into(),
                ));
            }
        };
        let (_, mapped) = driver.address_range(base)?;
        let ptr = base
            .offset(identity.offset)
            .filter(|_| identity.offset + identity.size <= mapped)
            .ok_or_else(|| {
                bad(format!(
                    "offset {} + size {} lie beyond the {mapped}-byte allocation",
                    identity.offset, identity.size
                ))
            })?;
        Ok(DeviceView {
            lease,
            keepalive,
            span: DeviceSpan {
                driver,
                ptr,
                size: identity.size,
            },
            identity,
        })
    }

    /// What the keep-alive says of the allocation: its device, size, and where the
    /// buffer starts in it.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// # // SAFETY: a doc example runs one thread (fork's contract).
    /// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
    /// use shmrc::cuda::{CudaDevice, DeviceHandle};
    /// use shmrc::{CreateOptions, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-identity")?);
    /// let producer = CudaDevice::fake("shmrc-doc-identity", 1 << 20, &keepalive)?;
    /// let buf = producer.alloc(4096)?;
    /// let bytes = buf.share()?.into_bytes()?;
    /// in_child(|| {
    ///     let consumer = CudaDevice::fake("shmrc-doc-identity", 1 << 20, &keepalive)?;
    ///     let view = consumer.attach(DeviceHandle::from_bytes(&bytes)?)?;
    ///     let identity = view.identity();
    ///     assert_eq!((identity.size, identity.offset), (4096, 0));
    ///     assert_eq!(identity.device.uuid, consumer.driver().device()?.uuid);
    ///     Ok(())
    /// });
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// A handle for yet another process (an in-flight reference of this one): a
    /// consumer may pass a buffer on, and the producer frees it only once that process
    /// released it too.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// # // SAFETY: a doc example runs one thread (fork's contract).
    /// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
    /// use shmrc::cuda::{CudaDevice, DeviceHandle};
    /// use shmrc::{CreateOptions, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-view-share")?);
    /// let producer = CudaDevice::fake("shmrc-doc-view-share", 1 << 20, &keepalive)?;
    /// let buf = producer.alloc(4096)?;
    /// let bytes = buf.share()?.into_bytes()?;
    /// in_child(|| {
    ///     let consumer = CudaDevice::fake("shmrc-doc-view-share", 1 << 20, &keepalive)?;
    ///     let view = consumer.attach(DeviceHandle::from_bytes(&bytes)?)?;
    ///     let onward = view.share()?; // for the next stage of a pipeline
    ///     assert_eq!(onward.into_share_handle()?.name(), view.keepalive_name());
    ///     Ok(())
    /// });
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn share(&self) -> Result<DeviceHandle<O>> {
        let fd = match &self.lease {
            Lease::Legacy { .. } => None,
            Lease::Vmm(lease) => Some(lease.fd.try_clone().map_err(|e| Error::os("dup", e))?),
        };
        Ok(DeviceHandle {
            keepalive: self.keepalive.share()?,
            fd,
            device: Some(self.identity.device),
        })
    }

    /// The keep-alive segment's name (the same in every process that holds the
    /// buffer).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// # // SAFETY: a doc example runs one thread (fork's contract).
    /// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
    /// use shmrc::cuda::{CudaDevice, DeviceHandle};
    /// use shmrc::{CreateOptions, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-view-name")?);
    /// let producer = CudaDevice::fake("shmrc-doc-view-name", 1 << 20, &keepalive)?;
    /// let buf = producer.alloc(4096)?;
    /// let bytes = buf.share()?.into_bytes()?;
    /// let name = buf.keepalive_name().unwrap();
    /// in_child(|| {
    ///     let consumer = CudaDevice::fake("shmrc-doc-view-name", 1 << 20, &keepalive)?;
    ///     let view = consumer.attach(DeviceHandle::from_bytes(&bytes)?)?;
    ///     assert_eq!(view.keepalive_name(), Some(name.as_str()));
    ///     Ok(())
    /// });
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn keepalive_name(&self) -> Option<&str> {
        self.keepalive.name()
    }
}

impl<O: Os> Drop for DeviceView<O> {
    fn drop(&mut self) {
        // This process's work on the view (its kernels' writes) lands before the unmap
        // and the release tell the producer it may free (the fields drop after this).
        // A failing synchronize is a broken context: the unmap reports nothing either.
        let _ = self.span.driver.synchronize();
    }
}

impl<O: Os> Deref for DeviceView<O> {
    type Target = DeviceSpan;
    fn deref(&self) -> &DeviceSpan {
        &self.span
    }
}

impl<O: Os> fmt::Debug for DeviceView<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceView")
            .field("span", &self.span)
            .field("keepalive", &self.keepalive.name())
            .field("kind", &self.identity.kind)
            .finish()
    }
}

// The device's constructors of buffers and views, beside the types they make (the
// device's own file never names a buffer).
impl<O: Os> CudaDevice<O> {
    /// Allocates a buffer of `size` bytes with the installed allocator, after freeing
    /// what the limbo list may free. A full device is [`Error::Cuda`] with
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    ///
    /// [`Error::Cuda`]: crate::Error::Cuda
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::{CreateOptions, Error};
    /// use shmrc::cuda::CudaDevice;
    ///
    /// let device = CudaDevice::fake("shmrc-doc-alloc", 1 << 20, &CreateOptions::new())?;
    /// let buf = device.alloc(1 << 19)?;
    /// assert_eq!(buf.len(), 1 << 19);
    /// let too_much = device.alloc(1 << 20);
    /// assert!(matches!(too_much, Err(Error::Cuda { ref name, .. }) if name == "CUDA_ERROR_OUT_OF_MEMORY"));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn alloc(&self, size: usize) -> Result<DeviceBuf<O>> {
        self.drain(Drain::Check);
        let allocator = self.allocator();
        let ptr = allocator.memalloc(size)?;
        Ok(DeviceBuf::new(self.clone(), allocator, ptr, size as u64))
    }

    /// Attaches a buffer another process shared: holds its keep-alive, then opens its
    /// IPC handle (once per process). Refused in the process that exported it
    /// ([`Error::CudaOwnExport`]); a released buffer is [`Error::Gone`]; a handle that
    /// is no device buffer's is [`Error::CudaBadIdentity`].
    ///
    /// [`Error::CudaOwnExport`]: crate::Error::CudaOwnExport
    /// [`Error::Gone`]: crate::Error::Gone
    /// [`Error::CudaBadIdentity`]: crate::Error::CudaBadIdentity
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// # // SAFETY: a doc example runs one thread (fork's contract).
    /// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
    /// use shmrc::cuda::{CudaDevice, DeviceHandle};
    /// use shmrc::{CreateOptions, Error, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-attach")?);
    /// let producer = CudaDevice::fake("shmrc-doc-attach", 1 << 20, &keepalive)?;
    /// let buf = producer.alloc(4096)?;
    /// buf.write_at(0, b"gradients")?;
    /// let bytes = buf.share()?.into_bytes()?;
    /// in_child(|| {
    ///     let consumer = CudaDevice::fake("shmrc-doc-attach", 1 << 20, &keepalive)?;
    ///     let view = consumer.attach(DeviceHandle::from_bytes(&bytes)?)?;
    ///     let mut out = [0u8; 9];
    ///     view.read_at(0, &mut out)?;
    ///     assert_eq!(&out, b"gradients");
    ///     Ok(())
    /// });
    /// // The producer itself cannot attach its own export (CUDA would refuse too).
    /// let own = producer.attach(buf.share()?);
    /// assert!(matches!(own, Err(Error::CudaOwnExport { .. })));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn attach(&self, handle: DeviceHandle<O>) -> Result<DeviceView<O>> {
        DeviceView::attach(self, handle)
    }
}
