//! The real CUDA driver: [`RealDriver`] implements [`Driver`] by calling
//! `libcuda.so.1`, loaded at run time with `libloading`, so shmrc builds and runs on
//! machines without a GPU or a CUDA toolkit; there, [`RealDriver::load`] returns
//! [`Error::CudaUnavailable`] and nothing else is touched.
//!
//! The driver works in the primary context of one device, retained at load and
//! released on drop, and made current on the calling thread before every call.
//!
//! # Safety
//! Every `unsafe` block here calls a driver entry point through a function pointer
//! whose type is the prototype in `cuda.h` (CUDA 11+, `_v2` names where the ABI has
//! them), resolved from the library that [`RealDriver`] keeps loaded for as long as
//! the pointers live. Out-pointers point at locals of the right C type; host buffers
//! passed to copies are Rust slices of exactly the length given. Device addresses are
//! never dereferenced on the host.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::fmt;

use libloading::Library;

use crate::cuda::driver::{
    DeviceId, DevicePtr, Driver, IPC_HANDLE_BYTES, IpcMemHandle, MemoryInfo, driver_error,
};
use crate::error::{Error, Result};

/// The library the driver ships as.
///
/// ```
/// assert_eq!(shmrc::cuda::real::LIBCUDA, "libcuda.so.1");
/// ```
pub const LIBCUDA: &str = "libcuda.so.1";

type CuResult = c_int;
type CuDevice = c_int;
type CuDevicePtr = u64;
type CuContext = *mut c_void;

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Copy, Clone)]
struct CuIpcMemHandle {
    reserved: [u8; IPC_HANDLE_BYTES],
}

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
const LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

/// The driver entry points shmrc calls.
struct Api {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_get_uuid: unsafe extern "C" fn(*mut [u8; 16], CuDevice) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    primary_ctx_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(CuContext) -> CuResult,
    ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult,
    mem_get_address_range:
        unsafe extern "C" fn(*mut CuDevicePtr, *mut usize, CuDevicePtr) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    ipc_get_mem_handle: unsafe extern "C" fn(*mut CuIpcMemHandle, CuDevicePtr) -> CuResult,
    ipc_open_mem_handle: unsafe extern "C" fn(*mut CuDevicePtr, CuIpcMemHandle, c_uint) -> CuResult,
    ipc_close_mem_handle: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
}

/// Resolves `name` in `lib` as a function pointer of type `T`.
fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T> {
    let unavailable = |e: libloading::Error| Error::CudaUnavailable {
        reason: format!("{LIBCUDA} lacks {name}: {e}"),
    };
    let mut cname = name.as_bytes().to_vec();
    cname.push(0);
    // SAFETY: every caller names `T` as the `cuda.h` prototype of `name` (see Api).
    let sym = unsafe { lib.get::<T>(&cname) }.map_err(unavailable)?;
    Ok(*sym)
}

impl Api {
    fn resolve(lib: &Library) -> Result<Api> {
        Ok(Api {
            init: symbol(lib, "cuInit")?,
            get_error_name: symbol(lib, "cuGetErrorName")?,
            device_get: symbol(lib, "cuDeviceGet")?,
            device_get_uuid: symbol(lib, "cuDeviceGetUuid")?,
            primary_ctx_retain: symbol(lib, "cuDevicePrimaryCtxRetain")?,
            primary_ctx_release: symbol(lib, "cuDevicePrimaryCtxRelease_v2")?,
            ctx_set_current: symbol(lib, "cuCtxSetCurrent")?,
            ctx_synchronize: symbol(lib, "cuCtxSynchronize")?,
            mem_alloc: symbol(lib, "cuMemAlloc_v2")?,
            mem_free: symbol(lib, "cuMemFree_v2")?,
            mem_get_info: symbol(lib, "cuMemGetInfo_v2")?,
            mem_get_address_range: symbol(lib, "cuMemGetAddressRange_v2")?,
            memcpy_htod: symbol(lib, "cuMemcpyHtoD_v2")?,
            memcpy_dtoh: symbol(lib, "cuMemcpyDtoH_v2")?,
            ipc_get_mem_handle: symbol(lib, "cuIpcGetMemHandle")?,
            ipc_open_mem_handle: symbol(lib, "cuIpcOpenMemHandle_v2")?,
            ipc_close_mem_handle: symbol(lib, "cuIpcCloseMemHandle")?,
        })
    }
}

/// The real driver on one device, in the device's primary context. Most programs use
/// [`CudaDevice::real`](super::CudaDevice::real), which loads it.
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use std::sync::Arc;
/// use shmrc::cuda::{CudaDevice, Driver, real::RealDriver};
/// use shmrc::{CreateOptions, DefaultOs, Error};
///
/// match RealDriver::load(0) {
///     Ok(driver) => {
///         println!("GPU {:?}", driver.device()?);
///         let device = CudaDevice::with_driver(DefaultOs::default(), Arc::new(driver), &CreateOptions::new());
///         assert_eq!(device.alloc(4096)?.len(), 4096);
///     }
///     Err(Error::CudaUnavailable { reason }) => println!("no GPU here: {reason}"),
///     Err(e) => return Err(e),
/// }
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct RealDriver {
    api: Api,
    device: CuDevice,
    ordinal: u32,
    context: CuContext,
    /// Keeps the entry points of `api` valid; dropped last.
    _lib: Library,
}

// SAFETY: the driver API is thread-safe and a context may be made current on any
// thread; `context` is only ever passed to the driver, never dereferenced.
unsafe impl Send for RealDriver {}
// SAFETY: as for Send: every method only passes `context` to thread-safe driver calls.
unsafe impl Sync for RealDriver {}

impl fmt::Debug for RealDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RealDriver")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

impl RealDriver {
    /// Loads `libcuda.so.1`, initializes the driver and retains the primary context of
    /// device `ordinal`. [`Error::CudaUnavailable`] when any of that fails (no driver,
    /// no such device): nothing else is touched, and the program can fall back.
    ///
    /// ```
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::cuda::{Driver, real::RealDriver};
    /// use shmrc::Error;
    ///
    /// match RealDriver::load(0) {
    ///     Ok(driver) => assert!(driver.memory_info()?.total > 0),
    ///     Err(Error::CudaUnavailable { reason }) => assert!(!reason.is_empty()),
    ///     Err(e) => return Err(e),
    /// }
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn load(ordinal: u32) -> Result<RealDriver> {
        // SAFETY: loading the NVIDIA driver library runs its initializers, which have
        // no preconditions on the loading process.
        let lib = unsafe { Library::new(LIBCUDA) }.map_err(|e| Error::CudaUnavailable {
            reason: format!("cannot load {LIBCUDA}: {e}"),
        })?;
        let api = Api::resolve(&lib)?;
        let unavailable = |e: Error| Error::CudaUnavailable {
            reason: e.to_string(),
        };
        // SAFETY: cuInit takes flags by value; 0 is the only defined value.
        let code = unsafe { (api.init)(0) };
        check_with(&api, "cuInit", code).map_err(unavailable)?;
        let mut device: CuDevice = 0;
        let index = c_int::try_from(ordinal).map_err(|_| Error::CudaUnavailable {
            reason: format!("device ordinal {ordinal} is out of range"),
        })?;
        // SAFETY: the out-pointer is a local CUdevice.
        let code = unsafe { (api.device_get)(&mut device, index) };
        check_with(&api, "cuDeviceGet", code).map_err(unavailable)?;
        let mut context: CuContext = std::ptr::null_mut();
        // SAFETY: the out-pointer is a local CUcontext; `device` came from cuDeviceGet.
        let code = unsafe { (api.primary_ctx_retain)(&mut context, device) };
        check_with(&api, "cuDevicePrimaryCtxRetain", code).map_err(unavailable)?;
        Ok(RealDriver {
            api,
            device,
            ordinal,
            context,
            _lib: lib,
        })
    }

    /// Makes the primary context current on this thread.
    fn enter(&self) -> Result<()> {
        // SAFETY: `context` is the primary context retained in `load`, alive until drop.
        let code = unsafe { (self.api.ctx_set_current)(self.context) };
        self.check("cuCtxSetCurrent", code)
    }

    fn check(&self, call: &'static str, code: CuResult) -> Result<()> {
        check_with(&self.api, call, code)
    }
}

/// `Ok` for `CUDA_SUCCESS`, else [`Error::Cuda`] with the driver's name for `code`.
fn check_with(api: &Api, call: &'static str, code: CuResult) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: the out-pointer is a local `const char*`.
    let found = unsafe { (api.get_error_name)(code, &mut name) } == 0 && !name.is_null();
    let name = if found {
        // SAFETY: on success the driver points `name` at a static NUL-terminated string.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    } else {
        "unknown".to_owned()
    };
    Err(driver_error(call, code, &name))
}

impl Drop for RealDriver {
    fn drop(&mut self) {
        // SAFETY: releases the retain made in `load`, once; `device` is still valid.
        let _ = unsafe { (self.api.primary_ctx_release)(self.device) };
    }
}

impl Driver for RealDriver {
    fn device(&self) -> Result<DeviceId> {
        let mut uuid = [0u8; 16];
        // SAFETY: the out-pointer is a local 16-byte CUuuid.
        let code = unsafe { (self.api.device_get_uuid)(&mut uuid, self.device) };
        self.check("cuDeviceGetUuid", code)?;
        Ok(DeviceId {
            ordinal: self.ordinal,
            uuid,
        })
    }

    fn alloc(&self, size: usize) -> Result<DevicePtr> {
        self.enter()?;
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: the out-pointer is a local CUdeviceptr.
        let code = unsafe { (self.api.mem_alloc)(&mut ptr, size) };
        self.check("cuMemAlloc", code)?;
        Ok(DevicePtr(ptr))
    }

    fn free(&self, ptr: DevicePtr) -> Result<()> {
        self.enter()?;
        // SAFETY: a device address by value; the driver validates it.
        let code = unsafe { (self.api.mem_free)(ptr.0) };
        self.check("cuMemFree", code)
    }

    fn ipc_get_mem_handle(&self, ptr: DevicePtr) -> Result<IpcMemHandle> {
        self.enter()?;
        let mut handle = CuIpcMemHandle {
            reserved: [0; IPC_HANDLE_BYTES],
        };
        // SAFETY: the out-pointer is a local CUipcMemHandle.
        let code = unsafe { (self.api.ipc_get_mem_handle)(&mut handle, ptr.0) };
        self.check("cuIpcGetMemHandle", code)?;
        Ok(IpcMemHandle(handle.reserved))
    }

    fn ipc_open_mem_handle(&self, handle: &IpcMemHandle) -> Result<DevicePtr> {
        self.enter()?;
        let mut ptr: CuDevicePtr = 0;
        let by_value = CuIpcMemHandle { reserved: handle.0 };
        // SAFETY: the out-pointer is a local CUdeviceptr; the handle goes by value.
        let code =
            unsafe { (self.api.ipc_open_mem_handle)(&mut ptr, by_value, LAZY_ENABLE_PEER_ACCESS) };
        self.check("cuIpcOpenMemHandle", code)?;
        Ok(DevicePtr(ptr))
    }

    fn ipc_close_mem_handle(&self, ptr: DevicePtr) -> Result<()> {
        self.enter()?;
        // SAFETY: a device address by value; the driver validates it.
        let code = unsafe { (self.api.ipc_close_mem_handle)(ptr.0) };
        self.check("cuIpcCloseMemHandle", code)
    }

    fn address_range(&self, ptr: DevicePtr) -> Result<(DevicePtr, u64)> {
        self.enter()?;
        let (mut base, mut size): (CuDevicePtr, usize) = (0, 0);
        // SAFETY: both out-pointers are locals of the prototype's types.
        let code = unsafe { (self.api.mem_get_address_range)(&mut base, &mut size, ptr.0) };
        self.check("cuMemGetAddressRange", code)?;
        Ok((DevicePtr(base), size as u64))
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        self.enter()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both out-pointers are local size_t values.
        let code = unsafe { (self.api.mem_get_info)(&mut free, &mut total) };
        self.check("cuMemGetInfo", code)?;
        Ok(MemoryInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        self.enter()?;
        // SAFETY: `src` is readable for `src.len()` bytes; the driver checks `dst`.
        let code = unsafe { (self.api.memcpy_htod)(dst.0, src.as_ptr().cast(), src.len()) };
        self.check("cuMemcpyHtoD", code)
    }

    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        self.enter()?;
        // SAFETY: `dst` is writable for `dst.len()` bytes; the driver checks `src`.
        let code = unsafe { (self.api.memcpy_dtoh)(dst.as_mut_ptr().cast(), src.0, dst.len()) };
        self.check("cuMemcpyDtoH", code)
    }

    fn synchronize(&self) -> Result<()> {
        self.enter()?;
        // SAFETY: no arguments; works on the context made current above.
        let code = unsafe { (self.api.ctx_synchronize)() };
        self.check("cuCtxSynchronize", code)
    }
}
