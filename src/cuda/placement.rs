//! One share path for host and device buffers: an [`AnyHandle`] says where its buffer
//! lives ([`Placement`]: the host, or a CUDA device), and [`AnyHandle::attach`]
//! dispatches on it, as torch dispatches a storage by its device. Host handles attach as
//! [`ShmBuf`]s; device handles with the process's [`CudaDevice`] for that device (by
//! UUID: ordinals differ between processes under `CUDA_VISIBLE_DEVICES`).
//! [`super::transport`] moves a mix of both in one message.

use std::fmt;

use super::buf::{DeviceHandle, DeviceView};
use super::device::CudaDevice;
use super::driver::DeviceId;
use crate::buf::ShmBuf;
use crate::error::{Error, Result};
use crate::handle::ShareHandle;

/// Where a buffer's bytes live.
///
/// ```
/// use shmrc::cuda::{DeviceId, Placement};
/// assert_eq!(Placement::Host.to_string(), "host");
/// let gpu = DeviceId { ordinal: 1, uuid: [7; 16] };
/// assert_eq!(Placement::Cuda(Some(gpu)).to_string(), "cuda:1");
/// assert_eq!(Placement::Cuda(None).to_string(), "cuda");
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Placement {
    /// Host memory: a [`ShmBuf`].
    Host,
    /// Memory of a CUDA device; `None` for a device handle rebuilt from bytes, which
    /// does not say which (its keep-alive does, once attached).
    Cuda(Option<DeviceId>),
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Host => f.write_str("host"),
            Placement::Cuda(Some(id)) => write!(f, "cuda:{}", id.ordinal),
            Placement::Cuda(None) => f.write_str("cuda"),
        }
    }
}

/// A handle of a host or a device buffer, on its way to another process.
///
/// ```
/// # #[cfg(feature = "cuda-fake")] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::cuda::{AnyHandle, CudaDevice, Placement};
/// use shmrc::{CreateOptions, ShmBuf};
///
/// let device = CudaDevice::fake("shmrc-doc-any-handle", 1 << 30, &CreateOptions::new())?;
/// let host: AnyHandle = ShmBuf::new(64)?.share()?.into();
/// let gpu: AnyHandle = device.alloc(64)?.share()?.into();
/// assert_eq!(host.placement(), Placement::Host);
/// assert_eq!(gpu.placement().to_string(), "cuda:0");
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub enum AnyHandle {
    /// A host buffer's handle.
    Host(ShareHandle),
    /// A device buffer's handle.
    Cuda(DeviceHandle),
}

impl From<ShareHandle> for AnyHandle {
    fn from(handle: ShareHandle) -> AnyHandle {
        AnyHandle::Host(handle)
    }
}

impl From<DeviceHandle> for AnyHandle {
    fn from(handle: DeviceHandle) -> AnyHandle {
        AnyHandle::Cuda(handle)
    }
}

/// A buffer attached from an [`AnyHandle`].
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::cuda::{AnyBuf, AnyHandle};
/// use shmrc::ShmBuf;
///
/// let buf = ShmBuf::new(8)?;
/// buf.write_at(0, b"host ok!")?;
/// let attached = AnyHandle::from(buf.share()?).attach(&[])?; // no device needed
/// let AnyBuf::Host(host) = attached else { unreachable!() };
/// let mut out = [0u8; 8];
/// host.read_at(0, &mut out)?;
/// assert_eq!(&out, b"host ok!");
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub enum AnyBuf {
    /// A host buffer.
    Host(ShmBuf),
    /// A view of another process's device buffer (boxed: it is much larger than a
    /// host buffer's handle).
    Cuda(Box<DeviceView>),
}

impl AnyHandle {
    /// Where the buffer lives.
    ///
    /// ```
    /// use shmrc::cuda::{AnyHandle, Placement};
    /// let handle: AnyHandle = shmrc::ShmBuf::new(8)?.share()?.into();
    /// assert_eq!(handle.placement(), Placement::Host);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn placement(&self) -> Placement {
        match self {
            AnyHandle::Host(_) => Placement::Host,
            AnyHandle::Cuda(handle) => Placement::Cuda(handle.device()),
        }
    }

    /// Attaches the buffer where it lives: a host buffer as a [`ShmBuf`], a device
    /// buffer with the one of `devices` on its device (matched by UUID; a handle that
    /// does not say which device takes the first). A device buffer and no device for
    /// it is [`Error::InvalidArgument`] naming the device; the handle's reference is
    /// given back.
    ///
    /// ```
    /// # #[cfg(feature = "cuda-fake")] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{AnyHandle, CudaDevice};
    /// use shmrc::{CreateOptions, Error};
    ///
    /// let device = CudaDevice::fake("shmrc-doc-any-attach", 1 << 30, &CreateOptions::new())?;
    /// let gpu: AnyHandle = device.alloc(64)?.share()?.into();
    /// let err = gpu.attach(&[]).unwrap_err();
    /// assert!(matches!(err, Error::InvalidArgument(ref why) if why.contains("cuda:0")));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn attach(self, devices: &[CudaDevice]) -> Result<AnyBuf> {
        let handle = match self {
            AnyHandle::Host(handle) => return ShmBuf::attach(handle).map(AnyBuf::Host),
            AnyHandle::Cuda(handle) => handle,
        };
        let wanted = handle.device();
        let mut found = None;
        for device in devices {
            let here = device.driver().device()?;
            if wanted.is_none_or(|id| id.uuid == here.uuid) {
                found = Some(device);
                break;
            }
        }
        match found {
            Some(device) => device
                .attach(handle)
                .map(|view| AnyBuf::Cuda(Box::new(view))),
            None => Err(Error::InvalidArgument(format!(
                "a buffer on {} and no CudaDevice for it among the {} given",
                Placement::Cuda(wanted),
                devices.len()
            ))),
        }
    }
}
