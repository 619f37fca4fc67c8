//! Device buffers shared between processes on the holder protocol (feature `cuda`).
//!
//! A device allocation is one more resource guarded by holder slots: its keep-alive is
//! an ordinary file_system segment ([`crate::ShmBuf`]) whose data part names the
//! allocation ([`Identity`]); consumers hold slots while they use it, and "unlink at
//! zero" becomes "the producer may free". A consumer killed with SIGKILL is reclaimed
//! by the same finalize as any CPU segment ([`crate::sweep()`], any later release, or
//! [`CudaDevice::collect`]). See `docs/CUDA.md`.
//!
//! - the [`Driver`] trait (the driver calls used) and its value types; the real driver,
//!   loaded at run time from `libcuda.so.1`, is [`RealDriver`]. Feature `cuda-fake`
//!   adds `FakeDriver`, a driver whose device memory is shared memory, and
//!   `CudaDevice::fake`: the whole flow, across real processes, without a GPU (for your
//!   own tests, and this crate's examples).
//! - [`DeviceAllocator`], modelled on Numba's EMM plugin interface, and the default
//!   [`DriverAllocator`].
//! - [`CudaDevice`], one process's entry point (limbo list: when a dropped buffer may
//!   be freed; per-process table of opened IPC handles).
//! - [`DeviceBuf`], [`DeviceHandle`], [`DeviceView`].
//! - one share path for host and device buffers ([`AnyHandle`] says where its buffer
//!   lives; attach dispatches on it).
//! - [`transport`]: host and device handles over a Unix socket (a `posix_fd` handle's
//!   descriptor rides with `SCM_RIGHTS`).
//!
//! ```
//! # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
//! # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
//! # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
//! # // SAFETY: a doc example runs one thread (fork's contract).
//! # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
//! use shmrc::cuda::{CudaDevice, DeviceHandle};
//! use shmrc::{CreateOptions, Namespace};
//!
//! // Keep-alive segments in a namespace of the job's own; a fake device (feature
//! // `cuda-fake`, no GPU needed: `CudaDevice::real` is the same with the driver).
//! let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-cuda")?);
//! let producer = CudaDevice::fake("shmrc-doc-cuda", 1 << 20, &keepalive)?;
//! let buf = producer.alloc(4096)?;
//! buf.write_at(0, b"device bytes")?;
//! let bytes = buf.share()?.into_bytes()?; // travels to the consumer
//!
//! // `in_child` runs the consumer in a forked child process (hidden here).
//! in_child(|| {
//!     let consumer = CudaDevice::fake("shmrc-doc-cuda", 1 << 20, &keepalive)?;
//!     let view = consumer.attach(DeviceHandle::from_bytes(&bytes)?)?;
//!     let mut out = [0u8; 12];
//!     view.read_at(0, &mut out)?;
//!     assert_eq!(&out, b"device bytes");
//!     view.write_at(0, b"DEVICE")?;
//!     Ok(())
//! }); // the consumer dropped its view: it holds nothing any more
//!
//! let mut out = [0u8; 6];
//! buf.read_at(0, &mut out)?;
//! assert_eq!(&out, b"DEVICE");
//! drop(buf); // nobody else holds it: freed at once, nothing waits in limbo
//! assert_eq!(producer.limbo_len(), 0);
//! # }
//! # Ok::<(), shmrc::Error>(())
//! ```

use std::sync::{Mutex, MutexGuard};

// The submodules are private but `transport` (a namespace, as `shmrc::transport`): what a
// user may name is re-exported here, at one path.
mod allocator;
// `pub(crate)` for the checkers' seam (`DeviceHandleExt`).
pub(crate) mod buf;
mod device;
mod driver;
#[cfg(feature = "cuda-fake")]
mod fake;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod identity;
mod limbo;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod placement;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod real;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub mod transport;

pub use allocator::{
    CleanupDeferral, DeferGuard, DeviceAllocator, DeviceExport, DriverAllocator,
    EMM_INTERFACE_VERSION, IpcExport, VmmAllocator,
};
pub use buf::{DeviceBuf, DeviceHandle, DeviceSpan, DeviceView};
pub use device::CudaDevice;
pub use driver::{
    DeviceId, DevicePtr, Driver, EventId, HandleKind, IPC_HANDLE_BYTES, IpcEventHandle,
    IpcMemHandle, MemoryInfo, driver_error,
};
#[cfg(feature = "cuda-fake")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda-fake")))]
pub use fake::{FakeDriver, MAX_FAKE_PREFIX};
pub use identity::Identity;
pub use limbo::CollectReport;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use placement::{AnyBuf, AnyHandle, Placement};
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use real::{LIBCUDA, RealDriver};

/// Locks `m`, recovering from poisoning: no code holding these locks panics half-way
/// through an update.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod production {
    use std::sync::Arc;

    #[cfg(feature = "cuda-fake")]
    use super::FakeDriver;
    use super::real::RealDriver;
    use super::{CudaDevice, DeviceHandle};
    use crate::buf::CreateOptions;
    use crate::error::Result;
    use crate::manager::DefaultOs;

    impl CudaDevice<DefaultOs> {
        /// Device `ordinal` through the real driver (`libcuda.so.1`, loaded now).
        /// Without a usable driver: [`crate::Error::CudaUnavailable`] (on a machine
        /// without a GPU, as where this example runs in CI).
        ///
        /// ```
        /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
        /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
        /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
        /// use shmrc::cuda::CudaDevice;
        /// use shmrc::{CreateOptions, Error, Namespace};
        ///
        /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-real")?);
        /// match CudaDevice::real(0, &keepalive) {
        ///     Ok(device) => {
        ///         let buf = device.alloc(1 << 20)?;
        ///         buf.write_at(0, &[1, 2, 3])?;
        ///         println!("device {:?}: {:?}", device.driver().device()?, device.memory_info()?);
        ///     }
        ///     Err(Error::CudaUnavailable { reason }) => println!("no GPU here ({reason}): host buffers only"),
        ///     Err(e) => return Err(e),
        /// }
        /// # }
        /// # Ok::<(), shmrc::Error>(())
        /// ```
        pub fn real(ordinal: u32, keepalive: &CreateOptions) -> Result<CudaDevice> {
            let driver = RealDriver::load(ordinal)?;
            Ok(CudaDevice::with_driver(
                DefaultOs::default(),
                Arc::new(driver),
                keepalive,
            ))
        }

        /// A fake device of `total` bytes whose memory is shared memory named
        /// `<prefix>-...` in `/dev/shm` (see [`FakeDriver`]): the whole flow, across
        /// real processes, without a GPU (feature `cuda-fake`: for a program's own tests
        /// on machines without one). Every process sharing buffers uses the same
        /// `prefix`.
        ///
        /// ```
        /// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
        /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
        /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
        /// use shmrc::CreateOptions;
        /// use shmrc::cuda::CudaDevice;
        ///
        /// let device = CudaDevice::fake("shmrc-doc-fake", 1 << 20, &CreateOptions::new())?;
        /// let buf = device.alloc(4096)?;
        /// buf.write_at(0, b"no GPU needed")?;
        /// assert_eq!(device.memory_info()?.free, (1 << 20) - 4096);
        /// # }
        /// # Ok::<(), shmrc::Error>(())
        /// ```
        #[cfg(feature = "cuda-fake")]
        #[cfg_attr(docsrs, doc(cfg(feature = "cuda-fake")))]
        pub fn fake(prefix: &str, total: u64, keepalive: &CreateOptions) -> Result<CudaDevice> {
            let driver = FakeDriver::new(DefaultOs::default(), prefix, total)?;
            Ok(CudaDevice::with_driver(
                DefaultOs::default(),
                Arc::new(driver),
                keepalive,
            ))
        }
    }

    impl DeviceHandle {
        /// Decodes a handle made by [`DeviceHandle::into_bytes`] in another process of
        /// this user; it owns the in-flight reference the bytes carry (attach it with
        /// [`CudaDevice::attach`], or drop it to give the reference back).
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
        /// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-dev-bytes")?);
        /// let producer = CudaDevice::fake("shmrc-doc-dev-bytes", 1 << 20, &keepalive)?;
        /// let buf = producer.alloc(64)?;
        /// let bytes = buf.share()?.into_bytes()?;
        /// in_child(|| {
        ///     let consumer = CudaDevice::fake("shmrc-doc-dev-bytes", 1 << 20, &keepalive)?;
        ///     let handle = DeviceHandle::from_bytes(&bytes)?;
        ///     assert_eq!(consumer.attach(handle)?.len(), 64);
        ///     Ok(())
        /// });
        /// # }
        /// # Ok::<(), shmrc::Error>(())
        /// ```
        pub fn from_bytes(bytes: &[u8]) -> Result<DeviceHandle> {
            DeviceHandle::from_bytes_with(&DefaultOs::default(), bytes)
        }
    }
}
