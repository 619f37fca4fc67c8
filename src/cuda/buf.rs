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
use std::sync::{Arc, Mutex};

use super::allocator::DeviceAllocator;
use super::device::CudaDevice;
use super::driver::{DevicePtr, Driver, IpcMemHandle};
use super::identity::{IDENTITY_BYTES, Identity};
use super::limbo::Entry;
use super::lock;
use crate::buf::ShmBuf;
use crate::error::{Error, Result};
use crate::handle::ShareHandle;
use crate::holders::{Census, Finalized, Outcome};
use crate::os::Os;
use crate::strategy::Strategy;

/// A range of device memory, bounds-checked; what [`DeviceBuf`] and [`DeviceView`]
/// dereference to. Not `Clone`: a copy could outlive the buffer or view it came from
/// and reach memory already unmapped or freed.
pub struct DeviceSpan {
    driver: Arc<dyn Driver>,
    ptr: DevicePtr,
    size: u64,
}

impl DeviceSpan {
    /// The device address (in this process).
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.size as usize
    }

    /// Whether the span is empty (never: buffers have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Copies `data` to the span at `offset` (synchronous).
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.driver
            .copy_to_device(self.at(offset, data.len())?, data)
    }

    /// Copies from the span at `offset` into `out` (synchronous).
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

/// A device allocation made in this process; see the module docs.
pub struct DeviceBuf<O: Os = crate::DefaultOs> {
    device: CudaDevice<O>,
    allocator: Arc<dyn DeviceAllocator>,
    span: DeviceSpan,
    keepalive: Mutex<Option<ShmBuf<O>>>,
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
    /// reference, so the memory stays allocated while it travels. Waits for the
    /// device's queued work first (`cuCtxSynchronize`), so the consumer sees what this
    /// process's kernels wrote.
    pub fn share(&self) -> Result<DeviceHandle<O>> {
        self.span.driver.synchronize()?;
        let mut keepalive = lock(&self.keepalive);
        if keepalive.is_none() {
            *keepalive = Some(self.create_keepalive()?);
        }
        let held = keepalive.as_ref().ok_or_else(|| Error::NotHolder {
            segment: "device keep-alive".into(),
        })?;
        Ok(DeviceHandle {
            keepalive: held.share()?,
        })
    }

    fn create_keepalive(&self) -> Result<ShmBuf<O>> {
        let inner = &self.device.inner;
        let export = self.allocator.get_ipc_handle(self.span.ptr)?;
        let identity = Identity {
            ipc: export.handle,
            offset: export.offset,
            size: self.span.size,
            device: inner.driver.device()?,
            producer: inner.os.current(),
        };
        let buf = ShmBuf::create_with(&inner.os, IDENTITY_BYTES, &inner.keepalive_options)?;
        buf.write_at(0, &identity.encode())?;
        Ok(buf)
    }

    /// The keep-alive segment's name, once the buffer was shared.
    pub fn keepalive_name(&self) -> Option<String> {
        lock(&self.keepalive)
            .as_ref()
            .and_then(|k| k.name().map(str::to_owned))
    }

    /// The keep-alive's holder slots, once the buffer was shared.
    pub fn census(&self) -> Option<Census> {
        lock(&self.keepalive).as_ref().and_then(ShmBuf::census)
    }
}

impl<O: Os> Drop for DeviceBuf<O> {
    fn drop(&mut self) {
        let keepalive = lock(&self.keepalive).take();
        let still_named = keepalive.and_then(|k| {
            let name = k.name().map(str::to_owned);
            match k.release() {
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
/// [`crate::transport::send`]; as bytes, [`DeviceHandle::into_bytes`].
#[derive(Debug)]
pub struct DeviceHandle<O: Os = crate::DefaultOs> {
    keepalive: ShareHandle<O>,
}

impl<O: Os> DeviceHandle<O> {
    /// The keep-alive handle, to send with [`crate::transport::send`].
    pub fn into_share_handle(self) -> ShareHandle<O> {
        self.keepalive
    }

    /// A device handle from a keep-alive handle received over a socket.
    pub fn from_share_handle(keepalive: ShareHandle<O>) -> DeviceHandle<O> {
        DeviceHandle { keepalive }
    }

    /// The handle as bytes (it names a file_system segment).
    pub fn into_bytes(self) -> Result<Vec<u8>> {
        self.keepalive.into_bytes()
    }

    /// A handle from [`DeviceHandle::into_bytes`], as process `os`.
    pub fn from_bytes_with(os: &O, bytes: &[u8]) -> Result<DeviceHandle<O>> {
        ShareHandle::from_bytes_with(os, bytes).map(DeviceHandle::from_share_handle)
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

/// A consumer's view of a buffer another process shared. Dropping it closes the IPC
/// mapping (when it was this process's last view of that allocation) and then
/// releases the keep-alive slot: in that order, so the producer never frees memory
/// still mapped here.
pub struct DeviceView<O: Os = crate::DefaultOs> {
    // Field order is drop order: unmap first, then release the reference.
    lease: IpcLease<O>,
    keepalive: ShmBuf<O>,
    span: DeviceSpan,
    identity: Identity,
}

impl<O: Os> DeviceView<O> {
    pub(crate) fn attach(device: &CudaDevice<O>, handle: DeviceHandle<O>) -> Result<DeviceView<O>> {
        let keepalive = ShmBuf::attach(handle.keepalive)?;
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
        let base = device.open_ipc(&identity.ipc)?;
        let lease = IpcLease {
            device: device.clone(),
            handle: identity.ipc,
        };
        let driver = Arc::clone(&device.inner.driver);
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

    /// What the keep-alive says of the allocation.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// A handle for yet another process (an in-flight reference of this one).
    pub fn share(&self) -> Result<DeviceHandle<O>> {
        Ok(DeviceHandle {
            keepalive: self.keepalive.share()?,
        })
    }

    /// The keep-alive segment's name.
    pub fn keepalive_name(&self) -> Option<&str> {
        self.keepalive.name()
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
            .field("ipc", &self.lease.handle)
            .finish()
    }
}
