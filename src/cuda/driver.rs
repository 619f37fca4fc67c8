//! The CUDA driver as shmrc uses it: the few entry points a shared device allocation
//! needs, as the [`Driver`] trait, with the value types that cross it. Two
//! implementations: the real driver loaded at run time (`shmrc::cuda::real`) and the
//! fake one (`fake.rs`, feature `cuda-fake`) whose device memory is shared memory, so
//! the whole flow runs across real processes without a GPU.

use std::fmt;
use std::os::fd::{BorrowedFd, OwnedFd};

use crate::error::{Error, Result};

/// A device address (`CUdeviceptr`), valid in the process that has it (a consumer
/// maps the same memory at another address).
///
/// ```
/// use shmrc::cuda::DevicePtr;
/// let base = DevicePtr(0x7000_0000_0000);
/// assert_eq!(format!("{base:?}"), "DevicePtr(0x700000000000)");
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DevicePtr({:#x})", self.0)
    }
}

impl DevicePtr {
    /// The address `offset` bytes further, or `None` on overflow.
    ///
    /// ```
    /// use shmrc::cuda::DevicePtr;
    /// assert_eq!(DevicePtr(0x1000).offset(0x20), Some(DevicePtr(0x1020)));
    /// assert_eq!(DevicePtr(u64::MAX).offset(1), None);
    /// ```
    pub fn offset(self, offset: u64) -> Option<DevicePtr> {
        self.0.checked_add(offset).map(DevicePtr)
    }
}

/// Bytes in a legacy CUDA IPC memory handle (`CU_IPC_HANDLE_SIZE`).
///
/// ```
/// use shmrc::cuda::{IPC_HANDLE_BYTES, IpcMemHandle};
/// let handle = IpcMemHandle([0; IPC_HANDLE_BYTES]);
/// assert_eq!(handle.0.len(), 64);
/// ```
pub const IPC_HANDLE_BYTES: usize = 64;

/// A legacy IPC memory handle (`CUipcMemHandle`): opaque bytes naming a whole device
/// allocation (its base) to other processes. shmrc carries it in the keep-alive; you
/// meet it only through a [`Driver`] or a [`DeviceAllocator`](super::DeviceAllocator).
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::CreateOptions;
/// use shmrc::cuda::{CudaDevice, IpcMemHandle};
///
/// let device = CudaDevice::fake("shmrc-doc-ipc-handle", 1 << 20, &CreateOptions::new())?;
/// let buf = device.alloc(4096)?;
/// let handle: IpcMemHandle = device.driver().ipc_get_mem_handle(buf.ptr())?;
/// assert_eq!(handle, device.allocator().get_ipc_handle(buf.ptr())?.handle);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct IpcMemHandle(pub [u8; IPC_HANDLE_BYTES]);

impl fmt::Debug for IpcMemHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcMemHandle(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

/// Which device: its ordinal in this process and its UUID (the same in every process,
/// whatever `CUDA_VISIBLE_DEVICES` makes of the ordinal).
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::CreateOptions;
/// use shmrc::cuda::{CudaDevice, DeviceId};
///
/// let device = CudaDevice::fake("shmrc-doc-device-id", 1 << 20, &CreateOptions::new())?;
/// let id: DeviceId = device.driver().device()?;
/// assert_eq!(id.ordinal, 0);
/// assert_eq!(&id.uuid, b"shmrc-fake-gpu-0");
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct DeviceId {
    /// `CUdevice` ordinal as this process numbers devices.
    pub ordinal: u32,
    /// `cuDeviceGetUuid`.
    pub uuid: [u8; 16],
}

/// Free and total device memory in bytes (`cuMemGetInfo`).
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::CreateOptions;
/// use shmrc::cuda::{CudaDevice, MemoryInfo};
///
/// let device = CudaDevice::fake("shmrc-doc-memory-info", 1 << 20, &CreateOptions::new())?;
/// let MemoryInfo { free, total } = device.memory_info()?;
/// assert_eq!((free, total), (1 << 20, 1 << 20));
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct MemoryInfo {
    /// Free bytes.
    pub free: u64,
    /// Total bytes.
    pub total: u64,
}

/// The driver calls shmrc makes, on one device and in the calling process's context.
/// Implemented by [`RealDriver`](super::real::RealDriver) and
/// `FakeDriver` (feature `cuda-fake`); implement it to run shmrc over another runtime,
/// and install it with [`CudaDevice::with_driver`](super::CudaDevice::with_driver).
///
/// Every method of an unusable driver returns [`Error::CudaUnavailable`]; a driver call
/// that fails returns [`Error::Cuda`] with the driver's code ([`driver_error`]).
///
/// # Synchronous and asynchronous calls
/// A GPU does its work after the call that queues it. The methods below are
/// **synchronous** where their docs say so: when one returns, its effect is in device
/// memory, visible to every process that maps it. [`Driver::copy_to_device`] waits for
/// its bytes to land (the raw `cuMemcpyHtoD` from pageable memory need not);
/// [`Driver::copy_from_device`] waits for the work queued before it;
/// [`Driver::free`], [`Driver::vmm_free`] and [`Driver::ipc_close_mem_handle`] wait for
/// the work queued before them, so no queued copy or kernel touches memory that is
/// gone, and a consumer's writes are in memory before it lets the producer free.
/// [`Driver::copy_on_device`] and kernels are **asynchronous**: [`Driver::synchronize`]
/// waits for them. shmrc issues no memset; a driver of your own that adds one makes it
/// synchronous the same way. An [`Driver::event_record`] completes once the work queued
/// before it has; [`Driver::stream_wait_event`] orders this process's later work after
/// it, on the device. `FakeDriver` (feature `cuda-fake`) models this: its copies land
/// only at those points, so code that forgets a wait fails on a CPU too.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::CreateOptions;
/// use shmrc::cuda::{CudaDevice, Driver};
///
/// let device = CudaDevice::fake("shmrc-doc-driver-trait", 1 << 20, &CreateOptions::new())?;
/// let driver: &dyn Driver = device.driver().as_ref();
/// let ptr = driver.alloc(256)?;
/// driver.copy_to_device(ptr, b"raw driver call")?;
/// driver.synchronize()?;
/// let mut out = [0u8; 15];
/// driver.copy_from_device(ptr, &mut out)?;
/// assert_eq!(&out, b"raw driver call");
/// assert_eq!(driver.address_range(ptr.offset(10).unwrap())?, (ptr, 256));
/// assert_eq!(driver.memory_info()?.free, (1 << 20) - 256);
/// let _handle = driver.ipc_get_mem_handle(ptr)?; // what another process would open
/// driver.free(ptr)?;
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub trait Driver: Send + Sync + fmt::Debug {
    /// The device this driver works on (`cuDeviceGet`, `cuDeviceGetUuid`).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let id = driver.device()?;
    /// assert_eq!((id.ordinal, &id.uuid), (0, b"shmrc-fake-gpu-0"));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn device(&self) -> Result<DeviceId>;
    /// Allocates `size` bytes of device memory (`cuMemAlloc`).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let ptr = driver.alloc(4096)?;
    /// assert_eq!(driver.address_range(ptr)?, (ptr, 4096));
    /// driver.free(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn alloc(&self, size: usize) -> Result<DevicePtr>;
    /// Frees an allocation made by [`Driver::alloc`] (`cuMemFree`), after the work
    /// queued before it.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let ptr = driver.alloc(4096)?;
    /// driver.free(ptr)?;
    /// assert!(driver.free(ptr).is_err(), "freed already");
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn free(&self, ptr: DevicePtr) -> Result<()>;
    /// The IPC handle of the allocation whose base is `ptr` (`cuIpcGetMemHandle`).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let ptr = driver.alloc(4096)?;
    /// let handle = driver.ipc_get_mem_handle(ptr)?;
    /// assert_eq!(handle, driver.ipc_get_mem_handle(ptr)?, "the same for the allocation's life");
    /// driver.free(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn ipc_get_mem_handle(&self, ptr: DevicePtr) -> Result<IpcMemHandle>;
    /// Maps another process's allocation here (`cuIpcOpenMemHandle`); returns its base.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// # // SAFETY: a doc example runs one thread (fork's contract).
    /// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// use shmrc::DefaultOs;
    ///
    /// let producer = FakeDriver::new(DefaultOs::default(), "shmrc-doc-drv-ipc", 1 << 20)?;
    /// let ptr = producer.alloc(4096)?;
    /// producer.copy_to_device(ptr, b"exported")?;
    /// let handle = producer.ipc_get_mem_handle(ptr)?;
    /// in_child(|| {
    ///     let consumer = FakeDriver::new(DefaultOs::default(), "shmrc-doc-drv-ipc", 1 << 20)?;
    ///     let mapped = consumer.ipc_open_mem_handle(&handle)?;
    ///     let mut out = [0u8; 8];
    ///     consumer.copy_from_device(mapped, &mut out)?;
    ///     assert_eq!(&out, b"exported");
    ///     consumer.ipc_close_mem_handle(mapped)?;
    ///     Ok(())
    /// });
    /// producer.free(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn ipc_open_mem_handle(&self, handle: &IpcMemHandle) -> Result<DevicePtr>;
    /// Unmaps what [`Driver::ipc_open_mem_handle`] mapped (`cuIpcCloseMemHandle`),
    /// after the work queued before it: this process's writes are in memory when it
    /// returns.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// # // SAFETY: a doc example runs one thread (fork's contract).
    /// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// use shmrc::DefaultOs;
    ///
    /// let producer = FakeDriver::new(DefaultOs::default(), "shmrc-doc-drv-ipc", 1 << 20)?;
    /// let ptr = producer.alloc(4096)?;
    /// producer.copy_to_device(ptr, b"exported")?;
    /// let handle = producer.ipc_get_mem_handle(ptr)?;
    /// in_child(|| {
    ///     let consumer = FakeDriver::new(DefaultOs::default(), "shmrc-doc-drv-ipc", 1 << 20)?;
    ///     let mapped = consumer.ipc_open_mem_handle(&handle)?;
    ///     let mut out = [0u8; 8];
    ///     consumer.copy_from_device(mapped, &mut out)?;
    ///     assert_eq!(&out, b"exported");
    ///     consumer.ipc_close_mem_handle(mapped)?;
    ///     Ok(())
    /// });
    /// producer.free(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn ipc_close_mem_handle(&self, ptr: DevicePtr) -> Result<()>;
    /// Base and length of the allocation containing `ptr` (`cuMemGetAddressRange`).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let base = driver.alloc(4096)?;
    /// let inside = base.offset(100).unwrap();
    /// assert_eq!(driver.address_range(inside)?, (base, 4096));
    /// driver.free(base)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn address_range(&self, ptr: DevicePtr) -> Result<(DevicePtr, u64)>;
    /// Free and total memory of the device (`cuMemGetInfo`).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let before = driver.memory_info()?;
    /// let ptr = driver.alloc(4096)?;
    /// assert_eq!(driver.memory_info()?.free, before.free - 4096);
    /// driver.free(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn memory_info(&self) -> Result<MemoryInfo>;
    /// Copies `src` to device address `dst` (`cuMemcpyHtoD`), synchronously: when it
    /// returns the bytes are in device memory, visible to every process mapping it.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let ptr = driver.alloc(16)?;
    /// driver.copy_to_device(ptr.offset(8).unwrap(), &7u64.to_le_bytes())?;
    /// assert!(driver.copy_to_device(ptr, &[0; 17]).is_err(), "past the allocation");
    /// driver.free(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Copies from device address `src` into `dst` (`cuMemcpyDtoH`), synchronously and
    /// after the work this process queued before it.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let ptr = driver.alloc(16)?;
    /// driver.copy_to_device(ptr, &7u64.to_le_bytes())?;
    /// let mut out = [0u8; 8];
    /// driver.copy_from_device(ptr, &mut out)?;
    /// assert_eq!(u64::from_le_bytes(out), 7);
    /// driver.free(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()>;
    /// Copies `len` bytes from device address `src` to device address `dst`
    /// (`cuMemcpyDtoD`; asynchronous on the device: [`Driver::synchronize`] to wait).
    /// Either side may be an IPC or fd mapping of another process's memory.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let (a, b) = (driver.alloc(16)?, driver.alloc(16)?);
    /// driver.copy_to_device(a, b"device to device")?;
    /// driver.copy_on_device(b, a, 16)?;
    /// driver.synchronize()?;
    /// let mut out = [0u8; 16];
    /// driver.copy_from_device(b, &mut out)?;
    /// assert_eq!(&out, b"device to device");
    /// driver.free(a)?;
    /// driver.free(b)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn copy_on_device(&self, dst: DevicePtr, src: DevicePtr, len: usize) -> Result<()>;
    /// Waits for all work of this context (`cuCtxSynchronize`): what a consumer does
    /// before it releases a buffer its kernels wrote (sharing orders the producer's
    /// work with an IPC event instead).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 20)?;
    /// let ptr = driver.alloc(16)?;
    /// // ... launch kernels that write `ptr` ...
    /// driver.synchronize()?; // their results are in memory now
    /// driver.free(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn synchronize(&self) -> Result<()>;

    /// Whether the device can share memory as a POSIX file descriptor
    /// (`CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`): the
    /// [`HandleKind::PosixFd`] path of the `vmm_*` calls below.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 30)?;
    /// assert!(driver.supports_posix_fd()?);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn supports_posix_fd(&self) -> Result<bool>;
    /// The size every `vmm_alloc` must be a multiple of (`cuMemGetAllocationGranularity`,
    /// minimum granularity of a pinned device allocation exportable as a POSIX fd).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 30)?;
    /// assert_eq!(driver.vmm_granularity()?, 2 << 20); // as on current NVIDIA GPUs
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn vmm_granularity(&self) -> Result<u64>;
    /// Allocates `size` bytes (a multiple of [`Driver::vmm_granularity`], else
    /// `CUDA_ERROR_INVALID_VALUE`) exportable as a POSIX fd, mapped read-write for this
    /// device: `cuMemCreate`, `cuMemAddressReserve`, `cuMemMap`, `cuMemSetAccess`.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 30)?;
    /// let size = driver.vmm_granularity()?;
    /// let ptr = driver.vmm_alloc(size)?;
    /// assert_eq!(driver.address_range(ptr)?, (ptr, size));
    /// assert!(driver.vmm_alloc(size + 1).is_err(), "not a multiple of the granularity");
    /// driver.vmm_free(ptr)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn vmm_alloc(&self, size: u64) -> Result<DevicePtr>;
    /// A POSIX file descriptor for the allocation whose base is `ptr`
    /// (`cuMemRetainAllocationHandle`, `cuMemExportToShareableHandle`). It holds a
    /// reference to the memory of its own: send it to another process with
    /// `SCM_RIGHTS` ([`super::transport`]), close it when done.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 30)?;
    /// let ptr = driver.vmm_alloc(driver.vmm_granularity()?)?;
    /// let fd: std::os::fd::OwnedFd = driver.vmm_export(ptr)?;
    /// driver.vmm_free(ptr)?;
    /// drop(fd);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn vmm_export(&self, ptr: DevicePtr) -> Result<OwnedFd>;
    /// Maps the `size`-byte allocation that `fd` shares (`cuMemImportFromShareableHandle`,
    /// then reserve, map and set access as [`Driver::vmm_alloc`]); returns its base.
    /// The mapping holds the memory until [`Driver::vmm_free`], whatever the exporter
    /// does; `fd` may be closed at once.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// use std::os::fd::AsFd;
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 30)?;
    /// let size = driver.vmm_granularity()?;
    /// let ptr = driver.vmm_alloc(size)?;
    /// driver.copy_to_device(ptr, b"by fd")?;
    /// let fd = driver.vmm_export(ptr)?;
    /// driver.vmm_free(ptr)?; // the exported fd still holds the memory
    /// let mapped = driver.vmm_import(fd.as_fd(), size)?;
    /// let mut out = [0u8; 5];
    /// driver.copy_from_device(mapped, &mut out)?;
    /// assert_eq!(&out, b"by fd");
    /// driver.vmm_free(mapped)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn vmm_import(&self, fd: BorrowedFd<'_>, size: u64) -> Result<DevicePtr>;
    /// Unmaps an allocation made by [`Driver::vmm_alloc`] or [`Driver::vmm_import`]
    /// and drops this process's reference (`cuMemUnmap`, `cuMemAddressFree`), after the
    /// work queued before it; the memory is freed once no mapping and no exported fd
    /// refers to it.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-drv", 1 << 30)?;
    /// let ptr = driver.vmm_alloc(driver.vmm_granularity()?)?;
    /// driver.vmm_free(ptr)?;
    /// assert!(driver.vmm_free(ptr).is_err(), "unmapped already");
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn vmm_free(&self, ptr: DevicePtr) -> Result<()>;

    /// Creates an event other processes can wait on (`cuEventCreate` with
    /// `CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING`).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-ev", 1 << 20)?;
    /// let event = driver.ipc_event_create()?;
    /// driver.event_record(event)?; // after the work a consumer must see
    /// let _handle = driver.ipc_event_handle(event)?; // for the consumer
    /// driver.event_destroy(event)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn ipc_event_create(&self) -> Result<EventId>;
    /// The IPC handle of an event made by [`Driver::ipc_event_create`]
    /// (`cuIpcGetEventHandle`).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-ev", 1 << 20)?;
    /// let event = driver.ipc_event_create()?;
    /// assert_eq!(driver.ipc_event_handle(event)?, driver.ipc_event_handle(event)?);
    /// driver.event_destroy(event)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn ipc_event_handle(&self, event: EventId) -> Result<IpcEventHandle>;
    /// Opens another process's event here (`cuIpcOpenEventHandle`); destroy it with
    /// [`Driver::event_destroy`] when done.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{Driver, FakeDriver, IpcEventHandle};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-ev", 1 << 20)?;
    /// assert!(driver.ipc_event_open(&IpcEventHandle([0; 64])).is_err(), "no event's handle");
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn ipc_event_open(&self, handle: &IpcEventHandle) -> Result<EventId>;
    /// Records `event` on this context's default stream (`cuEventRecord`): it
    /// completes when the work queued there before it has.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-ev", 1 << 20)?;
    /// let event = driver.ipc_event_create()?;
    /// driver.event_record(event)?;
    /// driver.event_destroy(event)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn event_record(&self, event: EventId) -> Result<()>;
    /// Makes this context's default stream wait, on the device, until `event`
    /// completes (`cuStreamWaitEvent`); the host does not block.
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-ev", 1 << 20)?;
    /// let event = driver.ipc_event_create()?;
    /// driver.event_record(event)?;
    /// driver.stream_wait_event(event)?; // later work on the stream runs after it
    /// driver.event_destroy(event)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn stream_wait_event(&self, event: EventId) -> Result<()>;
    /// Destroys an event created or opened here (`cuEventDestroy`).
    ///
    /// ```
    /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{Driver, FakeDriver};
    /// let driver = FakeDriver::new(shmrc::DefaultOs::default(), "shmrc-doc-ev", 1 << 20)?;
    /// let event = driver.ipc_event_create()?;
    /// driver.event_destroy(event)?;
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    fn event_destroy(&self, event: EventId) -> Result<()>;
}

/// An event created or opened in this process (`CUevent`), as the [`Driver`] that
/// made it names it; meaningless elsewhere.
///
/// ```
/// use shmrc::cuda::EventId;
/// assert_eq!(format!("{:?}", EventId(7)), "EventId(7)");
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct EventId(pub u64);

/// An IPC event handle (`CUipcEventHandle`, 64 opaque bytes): what another process
/// opens to wait on a producer's event. shmrc carries it in the keep-alive.
///
/// ```
/// use shmrc::cuda::IpcEventHandle;
/// let handle = IpcEventHandle([0; 64]);
/// assert_eq!(handle.0.len(), 64);
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct IpcEventHandle(pub [u8; IPC_HANDLE_BYTES]);

/// How a device allocation is shared with another process.
///
/// ```
/// use shmrc::cuda::HandleKind;
/// assert_eq!(HandleKind::PosixFd.to_string(), "posix_fd");
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug, Hash)]
pub enum HandleKind {
    /// A legacy IPC handle (`cuIpcGetMemHandle`, 64 bytes): travels as bytes; the
    /// memory lives only while the exporting process does.
    LegacyIpc,
    /// A POSIX file descriptor of a `cuMemCreate` allocation
    /// (`cuMemExportToShareableHandle`): travels only over a Unix socket
    /// (`SCM_RIGHTS`); each importer's mapping holds the memory.
    PosixFd,
}

impl fmt::Display for HandleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HandleKind::LegacyIpc => "legacy_ipc",
            HandleKind::PosixFd => "posix_fd",
        })
    }
}

/// The [`Error::Cuda`] for `call` failing with `code`, named `name`: what a [`Driver`]
/// of your own returns for a failed call.
///
/// ```
/// use shmrc::cuda::driver_error;
/// let err = driver_error("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY");
/// assert!(matches!(err, shmrc::Error::Cuda { code: 2, .. }));
/// assert_eq!(err.to_string(), "cuMemAlloc failed with CUDA error 2 (CUDA_ERROR_OUT_OF_MEMORY)");
/// ```
pub fn driver_error(call: &'static str, code: i32, name: &str) -> Error {
    Error::Cuda {
        call,
        code,
        name: name.to_owned(),
    }
}
