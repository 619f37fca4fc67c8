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

use super::allocator::{DeviceAllocator, DriverAllocator};
use super::buf::{DeviceBuf, DeviceHandle, DeviceView};
use super::driver::{DevicePtr, Driver, IpcMemHandle, MemoryInfo};
use super::limbo::{self, CollectReport, Drain, Entry};
use super::lock;
use crate::buf::CreateOptions;
use crate::error::Result;
use crate::os::Os;
use crate::strategy::Strategy;

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

/// One process's view of one device; see the module docs.
pub struct CudaDevice<O: Os = crate::DefaultOs> {
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
    /// A device over `driver` as process `os`, with the default allocator. Keep-alive
    /// segments are created with `keepalive` (its namespace and holder capacity; the
    /// strategy is always file_system).
    pub fn with_driver(os: O, driver: Arc<dyn Driver>, keepalive: &CreateOptions) -> CudaDevice<O> {
        let allocator: Arc<dyn DeviceAllocator> =
            Arc::new(DriverAllocator::new(Arc::clone(&driver)));
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

    /// The driver.
    pub fn driver(&self) -> &Arc<dyn Driver> {
        &self.inner.driver
    }

    /// The allocator new buffers come from.
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
    /// freed by the allocator that made them.
    pub fn set_allocator(&self, allocator: Arc<dyn DeviceAllocator>) {
        *self
            .inner
            .allocator
            .write()
            .unwrap_or_else(|e| e.into_inner()) = allocator;
    }

    /// Allocates a buffer of `size` bytes with the installed allocator, after freeing
    /// what the limbo list may free.
    pub fn alloc(&self, size: usize) -> Result<DeviceBuf<O>> {
        self.drain(Drain::Check);
        let allocator = self.allocator();
        let ptr = allocator.memalloc(size)?;
        Ok(DeviceBuf::new(self.clone(), allocator, ptr, size as u64))
    }

    /// Attaches a buffer another process shared: holds its keep-alive, then opens its
    /// IPC handle (once per process). Refused in the process that exported it.
    pub fn attach(&self, handle: DeviceHandle<O>) -> Result<DeviceView<O>> {
        DeviceView::attach(self, handle)
    }

    /// Finalizes the keep-alive of every buffer in limbo (reclaiming slots of dead
    /// holders, as [`crate::sweep()`] does) and frees those nobody holds.
    pub fn collect(&self) -> CollectReport {
        self.drain(Drain::Finalize)
    }

    /// Buffers dropped here that some process may still hold.
    pub fn limbo_len(&self) -> usize {
        lock(&self.inner.limbo).len()
    }

    /// Free and total device memory, as the installed allocator reports it.
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        self.allocator().memory_info()
    }

    pub(crate) fn release(&self, entry: Entry) {
        lock(&self.inner.limbo).push(entry);
        self.drain(Drain::Check);
    }

    fn drain(&self, how: Drain) -> CollectReport {
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

    /// Distinct IPC handles open in this process.
    pub fn open_handles(&self) -> usize {
        lock(&self.inner.opened).len()
    }
}
