//! Device buffers shared between processes on the holder protocol (feature `cuda`).
//!
//! A device allocation is one more resource guarded by holder slots: its keep-alive is
//! an ordinary file_system segment ([`crate::ShmBuf`]) whose data part names the
//! allocation ([`identity`]); consumers hold slots while they use it, and "unlink at
//! zero" becomes "the producer may free". A consumer killed with SIGKILL is reclaimed
//! by the same finalize as any CPU segment ([`crate::sweep()`], any later release, or
//! [`CudaDevice::collect`]). See `docs/CUDA.md`.
//!
//! - [`driver`]: the [`Driver`] trait (the driver calls used) and its value types;
//!   [`fake`]: a driver whose device memory is shared memory; the real driver, loaded
//!   at run time from `libcuda.so.1`, is [`real::RealDriver`].
//! - [`allocator`]: [`DeviceAllocator`], modelled on Numba's EMM plugin interface, and
//!   the default [`DriverAllocator`].
//! - [`device`]: [`CudaDevice`], one process's entry point (limbo list, per-process
//!   table of opened IPC handles).
//! - [`buf`]: [`DeviceBuf`], [`DeviceHandle`], [`DeviceView`].
//! - [`limbo`]: when a dropped buffer may be freed.
//!
//! ```
//! # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
//! use std::sync::Arc;
//! use shmrc::cuda::{CudaDevice, DeviceHandle, FakeDriver};
//! use shmrc::os::sim::SimKernel;
//! use shmrc::{CreateOptions, Namespace};
//!
//! // Two processes (simulated here; real ones work the same) with a fake device.
//! let kernel = SimKernel::new(1);
//! let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-cuda")?);
//! let device = |os: &shmrc::os::sim::SimOs| {
//!     let driver = FakeDriver::new(os.clone(), "shmrc-doc-dev", 1 << 20)?;
//!     Ok::<_, shmrc::Error>(CudaDevice::with_driver(os.clone(), Arc::new(driver), &keepalive))
//! };
//! let (producer_os, consumer_os) = (kernel.spawn(1000), kernel.spawn(1000));
//! let (producer, consumer) = (device(&producer_os)?, device(&consumer_os)?);
//!
//! let buf = producer.alloc(4096)?;
//! buf.write_at(0, b"device bytes")?;
//! let bytes = buf.share()?.into_bytes()?; // travels to the consumer
//! let view = consumer.attach(DeviceHandle::from_bytes_with(&consumer_os, &bytes)?)?;
//!
//! drop(buf); // the consumer still holds it: the memory waits in limbo
//! assert_eq!(producer.limbo_len(), 1);
//! let mut out = [0u8; 12];
//! view.read_at(0, &mut out)?;
//! assert_eq!(&out, b"device bytes");
//!
//! drop(view); // the last holder released: the keep-alive is gone
//! assert_eq!(producer.collect().freed, 1);
//! assert!(kernel.names().is_empty());
//! # }
//! # Ok::<(), shmrc::Error>(())
//! ```

use std::sync::{Mutex, MutexGuard};

pub mod allocator;
pub mod buf;
pub mod device;
pub mod driver;
pub mod fake;
pub mod identity;
pub mod limbo;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub mod real;

pub use allocator::{
    CleanupDeferral, DeferGuard, DeviceAllocator, DriverAllocator, EMM_INTERFACE_VERSION, IpcExport,
};
pub use buf::{DeviceBuf, DeviceHandle, DeviceSpan, DeviceView};
pub use device::CudaDevice;
pub use driver::{DeviceId, DevicePtr, Driver, IpcMemHandle, MemoryInfo};
pub use fake::FakeDriver;
pub use limbo::CollectReport;

/// Locks `m`, recovering from poisoning: no code holding these locks panics half-way
/// through an update.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(not(any(feature = "loom", feature = "shuttle")))]
mod production {
    use std::sync::Arc;

    use super::real::RealDriver;
    use super::{CudaDevice, FakeDriver};
    use crate::DefaultOs;
    use crate::buf::CreateOptions;
    use crate::error::Result;

    impl CudaDevice<DefaultOs> {
        /// Device `ordinal` through the real driver (`libcuda.so.1`, loaded now).
        /// Without a usable driver: [`crate::Error::CudaUnavailable`].
        pub fn real(ordinal: u32, keepalive: &CreateOptions) -> Result<CudaDevice> {
            let driver = RealDriver::load(ordinal)?;
            Ok(CudaDevice::with_driver(
                DefaultOs::default(),
                Arc::new(driver),
                keepalive,
            ))
        }

        /// A fake device of `total` bytes whose memory is shared memory named
        /// `<prefix>-...` in `/dev/shm` (see [`FakeDriver`]).
        pub fn fake(prefix: &str, total: u64, keepalive: &CreateOptions) -> Result<CudaDevice> {
            let driver = FakeDriver::new(DefaultOs::default(), prefix, total)?;
            Ok(CudaDevice::with_driver(
                DefaultOs::default(),
                Arc::new(driver),
                keepalive,
            ))
        }
    }
}
