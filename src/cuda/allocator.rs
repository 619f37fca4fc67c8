//! [`DeviceAllocator`]: who owns device memory, modelled on Numba's External Memory
//! Management (EMM) plugin interface (`memalloc`, `get_ipc_handle`, `get_memory_info`,
//! `reset`, `defer_cleanup`, `interface_version`), and [`DriverAllocator`], the default
//! one: a plain `cuMemAlloc`/`cuMemFree` per buffer. Install another with
//! [`super::CudaDevice::set_allocator`] (a pool that hands out pieces of larger blocks
//! reports each piece as base handle + offset).

use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use super::driver::{DevicePtr, Driver, HandleKind, IpcMemHandle, MemoryInfo};
use super::lock;
use crate::error::{Error, Result};

/// The EMM interface version this trait follows (Numba's `interface_version`), which
/// [`DeviceAllocator::interface_version`] reports unless an allocator says otherwise.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::CreateOptions;
/// use shmrc::cuda::{CudaDevice, EMM_INTERFACE_VERSION};
///
/// let device = CudaDevice::fake("shmrc-doc-emm", 1 << 20, &CreateOptions::new())?;
/// assert_eq!(device.allocator().interface_version(), EMM_INTERFACE_VERSION);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub const EMM_INTERFACE_VERSION: u32 = 1;

/// How another process finds a buffer: the IPC handle of the allocation that contains
/// it, and where in that allocation the buffer starts.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::CreateOptions;
/// use shmrc::cuda::{CudaDevice, IpcExport};
///
/// let device = CudaDevice::fake("shmrc-doc-export", 1 << 20, &CreateOptions::new())?;
/// let buf = device.alloc(4096)?;
/// let export: IpcExport = device.allocator().get_ipc_handle(buf.ptr())?;
/// assert_eq!(export.offset, 0); // the default allocator: one allocation per buffer
/// assert_eq!(export.handle, device.driver().ipc_get_mem_handle(buf.ptr())?);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct IpcExport {
    /// The handle of the containing allocation's base.
    pub handle: IpcMemHandle,
    /// Offset of the buffer from that base.
    pub offset: u64,
}

/// How another process finds a buffer, whichever [`HandleKind`] its allocator shares
/// by: what [`DeviceAllocator::export`] returns.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use std::sync::Arc;
/// use shmrc::cuda::{DeviceAllocator, DeviceExport, FakeDriver, VmmAllocator};
///
/// let driver = Arc::new(FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-dev-export", 1 << 30)?);
/// let allocator = VmmAllocator::new(driver)?;
/// let ptr = allocator.memalloc(4096)?; // rounded up to the 2 MiB granularity
/// match allocator.export(ptr)? {
///     DeviceExport::PosixFd { allocation, offset, .. } => assert_eq!((allocation, offset), (2 << 20, 0)),
///     DeviceExport::Legacy(_) => unreachable!("a VMM allocator shares by fd"),
/// }
/// allocator.memfree(ptr)?;
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub enum DeviceExport {
    /// A legacy IPC handle and the buffer's offset in its allocation.
    Legacy(IpcExport),
    /// A POSIX fd of the containing `cuMemCreate` allocation.
    PosixFd {
        /// The descriptor (`cuMemExportToShareableHandle`), owned: it goes with the
        /// handle over `SCM_RIGHTS`.
        fd: OwnedFd,
        /// Bytes of the whole allocation (what the importer maps).
        allocation: u64,
        /// Offset of the buffer in it.
        offset: u64,
    },
}

/// A device-memory owner for [`super::CudaDevice`], modelled on Numba's External
/// Memory Management (EMM) plugin interface. [`DriverAllocator`] is the default;
/// install another (a pool, a counting wrapper) with
/// [`CudaDevice::set_allocator`](super::CudaDevice::set_allocator). A pool that hands
/// out pieces of larger blocks reports each piece as base handle + offset
/// ([`IpcExport`]). shmrc frees a buffer only once no process holds it any more.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use shmrc::cuda::{
///     CleanupDeferral, CudaDevice, DeviceAllocator, DevicePtr, DriverAllocator, IpcExport,
/// };
/// use shmrc::{CreateOptions, Error};
///
/// /// Counts the bytes it hands out; the default allocator does the work.
/// #[derive(Debug)]
/// struct Counting {
///     inner: DriverAllocator,
///     bytes: AtomicUsize,
/// }
///
/// impl DeviceAllocator for Counting {
///     fn memalloc(&self, size: usize) -> shmrc::Result<DevicePtr> {
///         self.bytes.fetch_add(size, Ordering::Relaxed);
///         self.inner.memalloc(size)
///     }
///     fn memfree(&self, ptr: DevicePtr) -> shmrc::Result<()> {
///         self.inner.memfree(ptr)
///     }
///     fn get_ipc_handle(&self, ptr: DevicePtr) -> shmrc::Result<IpcExport> {
///         self.inner.get_ipc_handle(ptr)
///     }
///     fn reset(&self) -> shmrc::Result<()> {
///         self.inner.reset()
///     }
///     fn deferral(&self) -> &CleanupDeferral {
///         self.inner.deferral()
///     }
/// }
///
/// let device = CudaDevice::fake("shmrc-doc-allocator", 1 << 20, &CreateOptions::new())?;
/// let counting = Arc::new(Counting {
///     inner: DriverAllocator::new(Arc::clone(device.driver())),
///     bytes: AtomicUsize::new(0),
/// });
/// device.set_allocator(counting.clone());
/// let buf = device.alloc(4096)?;
/// assert_eq!(counting.bytes.load(Ordering::Relaxed), 4096);
/// // Optional EMM parts keep their defaults:
/// assert_eq!(counting.interface_version(), shmrc::cuda::EMM_INTERFACE_VERSION);
/// assert!(matches!(counting.memory_info(), Err(Error::CudaUnsupported { .. })));
/// {
///     let _deferred = counting.defer_cleanup();
///     drop(buf); // freed by `Counting`, but not while cleanup is deferred
///     assert_eq!(device.limbo_len(), 1);
/// }
/// assert_eq!(device.collect().freed, 1);
/// counting.reset()?;
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub trait DeviceAllocator: Send + Sync + fmt::Debug {
    /// The EMM interface version implemented.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::cuda::{DeviceAllocator, DriverAllocator, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-emm", 1 << 20)?;
    /// let allocator = DriverAllocator::new(Arc::new(driver));
    /// assert_eq!(allocator.interface_version(), shmrc::cuda::EMM_INTERFACE_VERSION);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn interface_version(&self) -> u32 {
        EMM_INTERFACE_VERSION
    }
    /// Allocates `size` bytes of device memory.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::cuda::{DeviceAllocator, DriverAllocator, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-emm", 1 << 20)?;
    /// let allocator = DriverAllocator::new(Arc::new(driver));
    /// let ptr = allocator.memalloc(4096)?;
    /// assert_eq!(allocator.get_ipc_handle(ptr)?.offset, 0);
    /// allocator.memfree(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn memalloc(&self, size: usize) -> Result<DevicePtr>;
    /// Gives back what [`DeviceAllocator::memalloc`] returned. shmrc calls it only once
    /// no process holds the buffer any more, and never while cleanup is deferred.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::cuda::{DeviceAllocator, DriverAllocator, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-emm", 1 << 20)?;
    /// let allocator = DriverAllocator::new(Arc::new(driver));
    /// let ptr = allocator.memalloc(4096)?;
    /// allocator.memfree(ptr)?;
    /// assert_eq!(allocator.memory_info()?.free, 1 << 20);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn memfree(&self, ptr: DevicePtr) -> Result<()>;
    /// The IPC handle (base + offset) of the buffer at `ptr`.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::cuda::{DeviceAllocator, DriverAllocator, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-emm", 1 << 20)?;
    /// let allocator = DriverAllocator::new(Arc::new(driver));
    /// let ptr = allocator.memalloc(4096)?;
    /// let export = allocator.get_ipc_handle(ptr)?;
    /// assert_eq!(export.offset, 0); // one allocation per buffer: the buffer is the base
    /// allocator.memfree(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn get_ipc_handle(&self, ptr: DevicePtr) -> Result<IpcExport>;
    /// Free and total device memory; [`Error::CudaUnsupported`] when the allocator
    /// cannot tell (EMM allows this).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::cuda::{DeviceAllocator, DriverAllocator, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-emm", 1 << 20)?;
    /// let allocator = DriverAllocator::new(Arc::new(driver));
    /// let info = allocator.memory_info()?;
    /// assert_eq!(info.total, 1 << 20);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn memory_info(&self) -> Result<MemoryInfo> {
        Err(Error::CudaUnsupported { op: "memory_info" })
    }
    /// Drops whatever the allocator caches. It never frees memory a buffer still owns.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::cuda::{DeviceAllocator, DriverAllocator, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-emm", 1 << 20)?;
    /// let allocator = DriverAllocator::new(Arc::new(driver));
    /// let ptr = allocator.memalloc(4096)?;
    /// allocator.reset()?; // the default caches nothing: it waits for queued work
    /// assert_eq!(allocator.memory_info()?.free, (1 << 20) - 4096, "the buffer's memory stays");
    /// allocator.memfree(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn reset(&self) -> Result<()>;
    /// The allocator's deferral counter (see [`DeviceAllocator::defer_cleanup`]).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::cuda::{DeviceAllocator, DriverAllocator, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-emm", 1 << 20)?;
    /// let allocator = DriverAllocator::new(Arc::new(driver));
    /// let guard = allocator.defer_cleanup();
    /// assert!(allocator.deferral().is_deferred());
    /// drop(guard);
    /// assert!(!allocator.deferral().is_deferred());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn deferral(&self) -> &CleanupDeferral;
    /// How this allocator's buffers are shared: [`HandleKind::LegacyIpc`] (the
    /// default, through [`DeviceAllocator::get_ipc_handle`]) or [`HandleKind::PosixFd`].
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// use std::sync::Arc;
    /// use shmrc::cuda::{DeviceAllocator, DriverAllocator, FakeDriver, HandleKind, VmmAllocator};
    /// let driver = Arc::new(FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-kind", 1 << 30)?);
    /// assert_eq!(DriverAllocator::new(driver.clone()).handle_kind(), HandleKind::LegacyIpc);
    /// assert_eq!(VmmAllocator::new(driver)?.handle_kind(), HandleKind::PosixFd);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn handle_kind(&self) -> HandleKind {
        HandleKind::LegacyIpc
    }
    /// How another process finds the buffer at `ptr`; by default its legacy IPC
    /// handle ([`DeviceAllocator::get_ipc_handle`]). Called at every share: a POSIX-fd
    /// export is a new descriptor each time.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// use std::sync::Arc;
    /// use shmrc::cuda::{DeviceAllocator, DeviceExport, DriverAllocator, FakeDriver};
    /// let driver = Arc::new(FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-export-default", 1 << 20)?);
    /// let allocator = DriverAllocator::new(driver);
    /// let ptr = allocator.memalloc(64)?;
    /// assert!(matches!(allocator.export(ptr)?, DeviceExport::Legacy(e) if e.offset == 0));
    /// allocator.memfree(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn export(&self, ptr: DevicePtr) -> Result<DeviceExport> {
        self.get_ipc_handle(ptr).map(DeviceExport::Legacy)
    }
    /// While the guard lives, no memory of this allocator is freed: buffers released
    /// meanwhile wait in the limbo list (EMM's `defer_cleanup` context).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::CreateOptions;
    /// use shmrc::cuda::CudaDevice;
    ///
    /// let device = CudaDevice::fake("shmrc-doc-defer-cleanup", 1 << 20, &CreateOptions::new())?;
    /// let guard = device.allocator().defer_cleanup();
    /// drop(device.alloc(4096)?);
    /// assert_eq!(device.limbo_len(), 1, "not freed while deferred");
    /// drop(guard);
    /// assert_eq!(device.collect().freed, 1);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn defer_cleanup(&self) -> DeferGuard {
        self.deferral().defer()
    }
}

/// A count of live [`DeferGuard`]s: what an allocator returns from
/// [`DeviceAllocator::deferral`] (keep one per allocator).
///
/// ```
/// use shmrc::cuda::CleanupDeferral;
///
/// let deferral = CleanupDeferral::default();
/// let guard = deferral.defer();
/// assert!(deferral.is_deferred());
/// drop(guard);
/// assert!(!deferral.is_deferred());
/// ```
#[derive(Clone, Debug, Default)]
pub struct CleanupDeferral(Arc<Mutex<usize>>);

impl CleanupDeferral {
    /// A guard that defers cleanup until it drops (guards nest: cleanup waits for the
    /// last one).
    ///
    /// ```
    /// use shmrc::cuda::CleanupDeferral;
    ///
    /// let deferral = CleanupDeferral::default();
    /// let (outer, inner) = (deferral.defer(), deferral.defer());
    /// drop(outer);
    /// assert!(deferral.is_deferred(), "`inner` still defers");
    /// drop(inner);
    /// assert!(!deferral.is_deferred());
    /// ```
    pub fn defer(&self) -> DeferGuard {
        *lock(&self.0) += 1;
        DeferGuard(Arc::clone(&self.0))
    }

    /// Whether a guard lives.
    ///
    /// ```
    /// let deferral = shmrc::cuda::CleanupDeferral::default();
    /// assert!(!deferral.is_deferred());
    /// let _guard = deferral.defer();
    /// assert!(deferral.is_deferred());
    /// ```
    pub fn is_deferred(&self) -> bool {
        *lock(&self.0) > 0
    }
}

/// Defers frees while it lives; see [`DeviceAllocator::defer_cleanup`] (EMM's
/// `defer_cleanup` context): buffers dropped meanwhile wait in the limbo list.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::CreateOptions;
/// use shmrc::cuda::CudaDevice;
///
/// let device = CudaDevice::fake("shmrc-doc-defer", 1 << 20, &CreateOptions::new())?;
/// let buf = device.alloc(4096)?;
/// let guard = device.allocator().defer_cleanup();
/// drop(buf); // e.g. while kernels may still use the memory
/// assert_eq!(device.limbo_len(), 1);
/// drop(guard);
/// assert_eq!(device.collect().freed, 1);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub struct DeferGuard(Arc<Mutex<usize>>);

impl Drop for DeferGuard {
    fn drop(&mut self) {
        *lock(&self.0) -= 1;
    }
}

/// The default allocator: one driver allocation per buffer; it caches nothing, so
/// [`DeviceAllocator::reset`] only waits for the device's queued work. A device
/// starts with one; an allocator of your own may delegate to it.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use std::sync::Arc;
/// use shmrc::CreateOptions;
/// use shmrc::cuda::{CudaDevice, DeviceAllocator, DriverAllocator};
///
/// let device = CudaDevice::fake("shmrc-doc-driver-alloc", 1 << 20, &CreateOptions::new())?;
/// let allocator = DriverAllocator::new(Arc::clone(device.driver()));
/// let ptr = allocator.memalloc(4096)?;
/// assert_eq!(allocator.memory_info()?.total - allocator.memory_info()?.free, 4096);
/// allocator.memfree(ptr)?;
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub struct DriverAllocator {
    driver: Arc<dyn Driver>,
    deferral: CleanupDeferral,
}

impl DriverAllocator {
    /// The default allocator over `driver`.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::CreateOptions;
    /// use shmrc::cuda::{CudaDevice, DriverAllocator};
    ///
    /// let device = CudaDevice::fake("shmrc-doc-alloc-new", 1 << 20, &CreateOptions::new())?;
    /// // Back to the default after another allocator was installed:
    /// device.set_allocator(Arc::new(DriverAllocator::new(Arc::clone(device.driver()))));
    /// let buf = device.alloc(16)?;
    /// assert_eq!(buf.len(), 16);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(driver: Arc<dyn Driver>) -> DriverAllocator {
        DriverAllocator {
            driver,
            deferral: CleanupDeferral::default(),
        }
    }
}

impl DeviceAllocator for DriverAllocator {
    fn memalloc(&self, size: usize) -> Result<DevicePtr> {
        self.driver.alloc(size)
    }

    fn memfree(&self, ptr: DevicePtr) -> Result<()> {
        self.driver.free(ptr)
    }

    fn get_ipc_handle(&self, ptr: DevicePtr) -> Result<IpcExport> {
        let (base, _) = self.driver.address_range(ptr)?;
        Ok(IpcExport {
            handle: self.driver.ipc_get_mem_handle(base)?,
            offset: ptr.0 - base.0,
        })
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        self.driver.memory_info()
    }

    fn reset(&self) -> Result<()> {
        self.driver.synchronize()
    }

    fn deferral(&self) -> &CleanupDeferral {
        &self.deferral
    }
}

/// The allocator of the POSIX-fd path: one `cuMemCreate` allocation per buffer, its
/// size rounded up to the device's granularity, shared as a file descriptor
/// ([`HandleKind::PosixFd`]). [`super::CudaDevice`] installs it by itself when the
/// device supports it and the process-wide strategy is file_descriptor.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use std::sync::Arc;
/// use shmrc::cuda::{CudaDevice, HandleKind, VmmAllocator};
/// use shmrc::CreateOptions;
///
/// let device = CudaDevice::fake("shmrc-doc-vmm-alloc", 1 << 30, &CreateOptions::new())?;
/// device.set_allocator(Arc::new(VmmAllocator::new(Arc::clone(device.driver()))?));
/// let buf = device.alloc(4096)?;
/// assert_eq!(buf.len(), 4096);
/// assert_eq!(device.allocator().handle_kind(), HandleKind::PosixFd);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub struct VmmAllocator {
    /// Memory information, reset and deferral are the default allocator's.
    base: DriverAllocator,
    granularity: u64,
}

impl VmmAllocator {
    /// The POSIX-fd allocator over `driver`; [`Error::CudaUnsupported`] when the
    /// device cannot export POSIX fds.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// use std::sync::Arc;
    /// use shmrc::cuda::{FakeDriver, VmmAllocator};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-vmm-new", 1 << 30)?;
    /// let _allocator = VmmAllocator::new(Arc::new(driver))?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(driver: Arc<dyn Driver>) -> Result<VmmAllocator> {
        if !driver.supports_posix_fd()? {
            return Err(Error::CudaUnsupported {
                op: "POSIX-fd sharing (the device cannot export its memory as an fd)",
            });
        }
        let granularity = driver.vmm_granularity()?.max(1);
        Ok(VmmAllocator {
            base: DriverAllocator::new(driver),
            granularity,
        })
    }

    fn rounded(&self, size: usize) -> Result<u64> {
        (size as u64)
            .max(1)
            .checked_next_multiple_of(self.granularity)
            .ok_or_else(|| Error::InvalidArgument(format!("{size} bytes of device memory")))
    }
}

impl DeviceAllocator for VmmAllocator {
    fn memalloc(&self, size: usize) -> Result<DevicePtr> {
        self.base.driver.vmm_alloc(self.rounded(size)?)
    }

    fn memfree(&self, ptr: DevicePtr) -> Result<()> {
        self.base.driver.vmm_free(ptr)
    }

    fn get_ipc_handle(&self, _ptr: DevicePtr) -> Result<IpcExport> {
        Err(Error::CudaUnsupported {
            op: "legacy IPC handles (VMM memory is shared as a POSIX fd)",
        })
    }

    fn export(&self, ptr: DevicePtr) -> Result<DeviceExport> {
        let driver = &self.base.driver;
        let (base, allocation) = driver.address_range(ptr)?;
        Ok(DeviceExport::PosixFd {
            fd: driver.vmm_export(base)?,
            allocation,
            offset: ptr.0 - base.0,
        })
    }

    fn handle_kind(&self) -> HandleKind {
        HandleKind::PosixFd
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        self.base.memory_info()
    }

    fn reset(&self) -> Result<()> {
        self.base.reset()
    }

    fn deferral(&self) -> &CleanupDeferral {
        self.base.deferral()
    }
}
