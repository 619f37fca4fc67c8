//! [`DeviceAllocator`]: who owns device memory, modelled on Numba's External Memory
//! Management (EMM) plugin interface (`memalloc`, `get_ipc_handle`, `get_memory_info`,
//! `reset`, `defer_cleanup`, `interface_version`), and [`DriverAllocator`], the default
//! one: a plain `cuMemAlloc`/`cuMemFree` per buffer. Install another with
//! [`super::CudaDevice::set_allocator`] (a pool that hands out pieces of larger blocks
//! reports each piece as base handle + offset).

use std::fmt;
use std::sync::{Arc, Mutex};

use super::driver::{DevicePtr, Driver, IpcMemHandle, MemoryInfo};
use super::lock;
use crate::error::{Error, Result};

/// The EMM interface version this trait follows (Numba's `interface_version`).
pub const EMM_INTERFACE_VERSION: u32 = 1;

/// How another process finds a buffer: the IPC handle of the allocation that contains
/// it, and where in that allocation the buffer starts.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct IpcExport {
    /// The handle of the containing allocation's base.
    pub handle: IpcMemHandle,
    /// Offset of the buffer from that base.
    pub offset: u64,
}

/// A device-memory owner for [`super::CudaDevice`]; see the module docs.
pub trait DeviceAllocator: Send + Sync + fmt::Debug {
    /// The EMM interface version implemented.
    fn interface_version(&self) -> u32 {
        EMM_INTERFACE_VERSION
    }
    /// Allocates `size` bytes of device memory.
    fn memalloc(&self, size: usize) -> Result<DevicePtr>;
    /// Gives back what [`DeviceAllocator::memalloc`] returned. shmrc calls it only once
    /// no process holds the buffer any more, and never while cleanup is deferred.
    fn memfree(&self, ptr: DevicePtr) -> Result<()>;
    /// The IPC handle (base + offset) of the buffer at `ptr`.
    fn get_ipc_handle(&self, ptr: DevicePtr) -> Result<IpcExport>;
    /// Free and total device memory; [`Error::CudaUnsupported`] when the allocator
    /// cannot tell (EMM allows this).
    fn memory_info(&self) -> Result<MemoryInfo> {
        Err(Error::CudaUnsupported { op: "memory_info" })
    }
    /// Drops whatever the allocator caches. It never frees memory a buffer still owns.
    fn reset(&self) -> Result<()>;
    /// The allocator's deferral counter (see [`DeviceAllocator::defer_cleanup`]).
    fn deferral(&self) -> &CleanupDeferral;
    /// While the guard lives, no memory of this allocator is freed: buffers released
    /// meanwhile wait in the limbo list (EMM's `defer_cleanup` context).
    fn defer_cleanup(&self) -> DeferGuard {
        self.deferral().defer()
    }
}

/// A count of live [`DeferGuard`]s.
#[derive(Clone, Debug, Default)]
pub struct CleanupDeferral(Arc<Mutex<usize>>);

impl CleanupDeferral {
    /// A guard that defers cleanup until it drops.
    pub fn defer(&self) -> DeferGuard {
        *lock(&self.0) += 1;
        DeferGuard(Arc::clone(&self.0))
    }

    /// Whether a guard lives.
    pub fn is_deferred(&self) -> bool {
        *lock(&self.0) > 0
    }
}

/// Defers frees while it lives; see [`DeviceAllocator::defer_cleanup`].
#[derive(Debug)]
pub struct DeferGuard(Arc<Mutex<usize>>);

impl Drop for DeferGuard {
    fn drop(&mut self) {
        *lock(&self.0) -= 1;
    }
}

/// The default allocator: one driver allocation per buffer; it caches nothing, so
/// [`DeviceAllocator::reset`] only waits for the device's queued work.
#[derive(Debug)]
pub struct DriverAllocator {
    driver: Arc<dyn Driver>,
    deferral: CleanupDeferral,
}

impl DriverAllocator {
    /// The default allocator over `driver`.
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
