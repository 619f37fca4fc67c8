//! The CUDA driver as shmrc uses it: the few entry points a shared device allocation
//! needs, as the [`Driver`] trait, with the value types that cross it. Two
//! implementations: the real driver loaded at run time (`shmrc::cuda::real`) and the
//! fake one ([`super::fake::FakeDriver`]) whose device memory is shared memory, so the
//! whole flow runs across real processes without a GPU.

use std::fmt;

use crate::error::{Error, Result};

/// A device address (`CUdeviceptr`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DevicePtr({:#x})", self.0)
    }
}

impl DevicePtr {
    /// The address `offset` bytes further, or `None` on overflow.
    pub fn offset(self, offset: u64) -> Option<DevicePtr> {
        self.0.checked_add(offset).map(DevicePtr)
    }
}

/// Bytes in a legacy CUDA IPC memory handle (`CU_IPC_HANDLE_SIZE`).
pub const IPC_HANDLE_BYTES: usize = 64;

/// A legacy IPC memory handle (`CUipcMemHandle`): opaque bytes naming a whole device
/// allocation (its base) to other processes.
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

/// Which device: its ordinal in this process and its UUID (the same in every process).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct DeviceId {
    /// `CUdevice` ordinal as this process numbers devices.
    pub ordinal: u32,
    /// `cuDeviceGetUuid`.
    pub uuid: [u8; 16],
}

/// Free and total device memory in bytes (`cuMemGetInfo`).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct MemoryInfo {
    /// Free bytes.
    pub free: u64,
    /// Total bytes.
    pub total: u64,
}

/// The driver calls shmrc makes, on one device and in the calling process's context.
///
/// Every method of an unusable driver returns [`Error::CudaUnavailable`]; a driver call
/// that fails returns [`Error::Cuda`] with the driver's code.
pub trait Driver: Send + Sync + fmt::Debug {
    /// The device this driver works on (`cuDeviceGet`, `cuDeviceGetUuid`).
    fn device(&self) -> Result<DeviceId>;
    /// Allocates `size` bytes of device memory (`cuMemAlloc`).
    fn alloc(&self, size: usize) -> Result<DevicePtr>;
    /// Frees an allocation made by [`Driver::alloc`] (`cuMemFree`).
    fn free(&self, ptr: DevicePtr) -> Result<()>;
    /// The IPC handle of the allocation whose base is `ptr` (`cuIpcGetMemHandle`).
    fn ipc_get_mem_handle(&self, ptr: DevicePtr) -> Result<IpcMemHandle>;
    /// Maps another process's allocation here (`cuIpcOpenMemHandle`); returns its base.
    fn ipc_open_mem_handle(&self, handle: &IpcMemHandle) -> Result<DevicePtr>;
    /// Unmaps what [`Driver::ipc_open_mem_handle`] mapped (`cuIpcCloseMemHandle`).
    fn ipc_close_mem_handle(&self, ptr: DevicePtr) -> Result<()>;
    /// Base and length of the allocation containing `ptr` (`cuMemGetAddressRange`).
    fn address_range(&self, ptr: DevicePtr) -> Result<(DevicePtr, u64)>;
    /// Free and total memory of the device (`cuMemGetInfo`).
    fn memory_info(&self) -> Result<MemoryInfo>;
    /// Copies `src` to device address `dst` (`cuMemcpyHtoD`, synchronous).
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Copies from device address `src` into `dst` (`cuMemcpyDtoH`, synchronous).
    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()>;
    /// Waits for all work of this context (`cuCtxSynchronize`): what a producer does
    /// before it shares a buffer its kernels wrote.
    fn synchronize(&self) -> Result<()>;
}

/// The [`Error::Cuda`] for `call` failing with `code`, named `name`.
pub fn driver_error(call: &'static str, code: i32, name: &str) -> Error {
    Error::Cuda {
        call,
        code,
        name: name.to_owned(),
    }
}
