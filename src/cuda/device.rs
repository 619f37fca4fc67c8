//! [`CudaDevice`]: one process's entry point to one device. It owns the driver, the
//! installed [`DeviceAllocator`], the limbo list of dropped buffers other processes
//! may still hold, and the per-process table of IPC handles opened here (a handle is
//! opened once per process, however many buffers or attaches refer to it).
//!
//! Create one per process and clone it; two `CudaDevice` values over the same driver
//! keep separate tables and limbo lists.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

use super::allocator::{DeviceAllocator, DriverAllocator, VmmAllocator};
use super::driver::{DevicePtr, Driver, IpcMemHandle, MemoryInfo};
use super::limbo::{self, CollectReport, Drain, Entry};
use super::lock;
use crate::buf::CreateOptions;
use crate::error::Result;
use crate::manager::DefaultOs;
use crate::os::Os;
use crate::strategy::{Strategy, sharing_strategy};

pub(crate) struct DeviceInner<O: Os> {
    pub(crate) os: O,
    pub(crate) driver: Arc<dyn Driver>,
    allocator: RwLock<Arc<dyn DeviceAllocator>>,
    pub(crate) keepalive_options: CreateOptions,
    limbo: Mutex<Vec<Entry>>,
    opened: Mutex<HashMap<IpcMemHandle, (DevicePtr, usize)>>,
}

impl<O: Os> Drop for DeviceInner<O> {
    fn drop(&mut self) {
        // Last chance to free what nobody holds any more; what is still held stays
        // allocated until this process exits (the driver frees it then).
        let limbo = self.limbo.get_mut().unwrap_or_else(|e| e.into_inner());
        limbo::drain(&self.os, limbo, Drain::Finalize);
        if !limbo.is_empty() {
            // Dropping the last reference to the driver would release its context, and
            // the device memory consumers still hold with it: keep the driver (and so
            // the memory) until the process exits, as promised.
            std::mem::forget(Arc::clone(&self.driver));
        }
    }
}

/// One process's entry point to one device: its driver, the installed
/// [`DeviceAllocator`], the limbo list of dropped buffers other processes may still
/// hold, and the table of IPC handles opened here (each opened once per process).
/// Create one per process ([`CudaDevice::real`], `CudaDevice::fake` (feature
/// `cuda-fake`) or [`CudaDevice::with_driver`]) and clone it; clones share everything.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::cuda::CudaDevice;
/// use shmrc::{CreateOptions, Error, Namespace};
///
/// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-cuda-device")?);
/// // The GPU when there is one, else the fake device (shared memory).
/// let device = match CudaDevice::real(0, &keepalive) {
///     Err(Error::CudaUnavailable { .. }) => CudaDevice::fake("shmrc-doc-cuda-device", 1 << 20, &keepalive)?,
///     other => other?,
/// };
/// let buf = device.alloc(1024)?;
/// buf.write_at(0, &[1; 1024])?;
/// let _handle = buf.share()?; // for a consumer process
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct CudaDevice<O: Os = DefaultOs> {
    pub(crate) inner: Arc<DeviceInner<O>>,
}

impl<O: Os> Clone for CudaDevice<O> {
    fn clone(&self) -> CudaDevice<O> {
        CudaDevice {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<O: Os> fmt::Debug for CudaDevice<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaDevice")
            .field("driver", &self.inner.driver)
            .field("limbo", &self.limbo_len())
            .finish()
    }
}

impl<O: Os> CudaDevice<O> {
    /// A device over `driver` as process `os`, with the default allocator: a
    /// [`VmmAllocator`] (buffers shared as POSIX fds, which travel with
    /// [`super::transport`]) when the process-wide strategy
    /// ([`crate::sharing_strategy`]) is file_descriptor and the device can export
    /// fds, else a [`DriverAllocator`] (legacy IPC handles, which travel as bytes too).
    /// Keep-alive
    /// segments are created with `keepalive` (its namespace and holder capacity; the
    /// strategy is always file_system). For a [`Driver`] of your own; the real and fake
    /// drivers have [`CudaDevice::real`] and `CudaDevice::fake` (feature `cuda-fake`).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::cuda::{CudaDevice, FakeDriver};
    /// use shmrc::{CreateOptions, DefaultOs};
    ///
    /// let driver = FakeDriver::new(DefaultOs::default(), "shmrc-doc-with-driver", 1 << 20)?;
    /// let device = CudaDevice::with_driver(DefaultOs::default(), Arc::new(driver), &CreateOptions::new());
    /// assert_eq!(device.alloc(64)?.len(), 64);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn with_driver(os: O, driver: Arc<dyn Driver>, keepalive: &CreateOptions) -> CudaDevice<O> {
        let allocator = default_allocator(&driver);
        CudaDevice {
            inner: Arc::new(DeviceInner {
                os,
                driver,
                allocator: RwLock::new(allocator),
                keepalive_options: keepalive.clone().strategy(Strategy::FileSystem),
                limbo: Mutex::new(Vec::new()),
                opened: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The driver, for the calls shmrc does not wrap (device identity, memory
    /// information, address ranges).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// let device = shmrc::cuda::CudaDevice::fake("shmrc-doc-driver", 1 << 20, &shmrc::CreateOptions::new())?;
    /// let id = device.driver().device()?;
    /// assert_eq!(id.ordinal, 0);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn driver(&self) -> &Arc<dyn Driver> {
        &self.inner.driver
    }

    /// The allocator new buffers come from.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// let device = shmrc::cuda::CudaDevice::fake("shmrc-doc-allocator-get", 1 << 20, &shmrc::CreateOptions::new())?;
    /// let allocator = device.allocator();
    /// assert!(format!("{allocator:?}").starts_with("DriverAllocator"));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn allocator(&self) -> Arc<dyn DeviceAllocator> {
        Arc::clone(
            &self
                .inner
                .allocator
                .read()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// Installs `allocator` for buffers allocated from now on; existing buffers are
    /// freed by the allocator that made them. See [`DeviceAllocator`] for an allocator
    /// of your own.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use std::sync::Arc;
    /// use shmrc::CreateOptions;
    /// use shmrc::cuda::{CudaDevice, DeviceAllocator, DriverAllocator};
    ///
    /// let device = CudaDevice::fake("shmrc-doc-set-allocator", 1 << 20, &CreateOptions::new())?;
    /// let mine: Arc<dyn DeviceAllocator> = Arc::new(DriverAllocator::new(Arc::clone(device.driver())));
    /// device.set_allocator(Arc::clone(&mine));
    /// assert!(Arc::ptr_eq(&device.allocator(), &mine));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn set_allocator(&self, allocator: Arc<dyn DeviceAllocator>) {
        *self
            .inner
            .allocator
            .write()
            .unwrap_or_else(|e| e.into_inner()) = allocator;
    }

    /// Finalizes the keep-alive of every buffer in limbo (reclaiming slots of dead
    /// holders, as [`crate::sweep()`] does) and frees those nobody holds. Call it now
    /// and then (a training step) when consumers may be killed; a clean release frees
    /// without it.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::CudaDevice;
    /// use shmrc::{CreateOptions, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-collect")?);
    /// let device = CudaDevice::fake("shmrc-doc-collect", 1 << 20, &keepalive)?;
    /// let buf = device.alloc(4096)?;
    /// let in_flight = buf.share()?;
    /// drop(buf);
    /// let report = device.collect();
    /// assert_eq!((report.freed, report.waiting), (0, 1)); // the handle still holds it
    /// drop(in_flight);
    /// assert_eq!(device.collect().freed, 1);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn collect(&self) -> CollectReport {
        self.drain(Drain::Finalize)
    }

    /// Buffers dropped here that some process may still hold.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::CudaDevice;
    /// use shmrc::{CreateOptions, Namespace};
    ///
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-limbo")?);
    /// let device = CudaDevice::fake("shmrc-doc-limbo", 1 << 20, &keepalive)?;
    /// let buf = device.alloc(4096)?;
    /// let handle = buf.share()?;
    /// drop(buf);
    /// assert_eq!(device.limbo_len(), 1);
    /// drop(handle);
    /// device.collect();
    /// assert_eq!(device.limbo_len(), 0);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn limbo_len(&self) -> usize {
        lock(&self.inner.limbo).len()
    }

    /// Free and total device memory, as the installed allocator reports it
    /// ([`Error::CudaUnsupported`] from an allocator that cannot tell).
    ///
    /// [`Error::CudaUnsupported`]: crate::Error::CudaUnsupported
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// let device = shmrc::cuda::CudaDevice::fake("shmrc-doc-meminfo", 1 << 20, &shmrc::CreateOptions::new())?;
    /// let _buf = device.alloc(1024)?;
    /// let info = device.memory_info()?;
    /// assert_eq!((info.total, info.free), (1 << 20, (1 << 20) - 1024));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        self.allocator().memory_info()
    }

    pub(crate) fn release(&self, entry: Entry) {
        lock(&self.inner.limbo).push(entry);
        self.drain(Drain::Check);
    }

    pub(crate) fn drain(&self, how: Drain) -> CollectReport {
        let mut limbo = lock(&self.inner.limbo);
        limbo::drain(&self.inner.os, &mut limbo, how)
    }

    /// Opens `handle` here, or counts one more user of the mapping already open.
    pub(crate) fn open_ipc(&self, handle: &IpcMemHandle) -> Result<DevicePtr> {
        let mut opened = lock(&self.inner.opened);
        if let Some((base, users)) = opened.get_mut(handle) {
            *users += 1;
            return Ok(*base);
        }
        let base = self.inner.driver.ipc_open_mem_handle(handle)?;
        opened.insert(*handle, (base, 1));
        Ok(base)
    }

    /// One user of `handle`'s mapping is done; the last closes it.
    pub(crate) fn close_ipc(&self, handle: &IpcMemHandle) -> Result<()> {
        let mut opened = lock(&self.inner.opened);
        let Some((base, users)) = opened.get_mut(handle) else {
            return Ok(());
        };
        *users -= 1;
        if *users > 0 {
            return Ok(());
        }
        let base = *base;
        opened.remove(handle);
        self.inner.driver.ipc_close_mem_handle(base)
    }

    /// Distinct IPC handles open in this process (a handle is opened once however many
    /// views of it live).
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
    /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-open-handles")?);
    /// let producer = CudaDevice::fake("shmrc-doc-open-handles", 1 << 20, &keepalive)?;
    /// let buf = producer.alloc(4096)?;
    /// let (first, second) = (buf.share()?.into_bytes()?, buf.share()?.into_bytes()?);
    /// in_child(|| {
    ///     let consumer = CudaDevice::fake("shmrc-doc-open-handles", 1 << 20, &keepalive)?;
    ///     let a = consumer.attach(DeviceHandle::from_bytes(&first)?)?;
    ///     let b = consumer.attach(DeviceHandle::from_bytes(&second)?)?;
    ///     assert_eq!(consumer.open_handles(), 1); // one mapping for both views
    ///     drop((a, b));
    ///     assert_eq!(consumer.open_handles(), 0);
    ///     Ok(())
    /// });
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn open_handles(&self) -> usize {
        lock(&self.inner.opened).len()
    }
}

/// The allocator a new device starts with: POSIX-fd sharing where the device has it
/// and the process shares by file descriptor, legacy IPC handles otherwise.
fn default_allocator(driver: &Arc<dyn Driver>) -> Arc<dyn DeviceAllocator> {
    if sharing_strategy() == Strategy::FileDescriptor {
        if let Ok(vmm) = VmmAllocator::new(Arc::clone(driver)) {
            return Arc::new(vmm);
        }
    }
    Arc::new(DriverAllocator::new(Arc::clone(driver)))
}
