//! The real CUDA driver: [`RealDriver`] implements [`Driver`] by calling
//! `libcuda.so.1`, loaded at run time with `libloading`, so shmrc builds and runs on
//! machines without a GPU or a CUDA toolkit; there, [`RealDriver::load`] returns
//! [`Error::CudaUnavailable`] and nothing else is touched.
//!
//! The driver works in the primary context of one device, retained at load and
//! released on drop, and made current on the calling thread before every call.
//!
//! The calls the [`Driver`] contract calls synchronous wait for the context
//! (`cuCtxSynchronize`) where the driver alone might not: after `cuMemcpyHtoD` (from
//! pageable memory it may return before the DMA lands; issue 28 saw another process
//! read the old bytes on an H100), and before `cuMemFree`, `cuIpcCloseMemHandle` and
//! `cuMemUnmap` (work still queued on the memory completes before it goes).
//!
//! # Safety
//! Every `unsafe` block here calls a driver entry point through a function pointer
//! whose type is the prototype in `cuda.h` (CUDA 11+, `_v2` names where the ABI has
//! them), resolved from the library that [`RealDriver`] keeps loaded for as long as
//! the pointers live. Out-pointers point at locals of the right C type; host buffers
//! passed to copies are Rust slices of exactly the length given. Device addresses are
//! never dereferenced on the host. `CUevent` values travel as [`EventId`] integers made
//! only here, from events this driver created or opened. The one other `unsafe` is
//! taking ownership of the descriptor `cuMemExportToShareableHandle` creates for the
//! caller (checked non-negative first).
//!
//! VMM allocations (`vmm_*`) are reserved, mapped and given read-write access for this
//! device; the allocation handle is released right after mapping (the mapping holds the
//! memory), and a table of mapped ranges serves `address_range` and the unmap.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use libloading::Library;

use crate::cuda::driver::{
    DeviceId, DevicePtr, Driver, EventId, IPC_HANDLE_BYTES, IpcEventHandle, IpcMemHandle,
    MemoryInfo, driver_error,
};
use crate::error::{Error, Result};

/// The library the driver ships as.
///
/// ```
/// assert_eq!(shmrc::cuda::LIBCUDA, "libcuda.so.1");
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

type CuEvent = *mut c_void;
type CuStream = *mut c_void;
/// `CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS`.
const EVENT_IPC_FLAGS: c_uint = 0x2 | 0x4;

/// `CUipcEventHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Copy, Clone)]
struct CuIpcEventHandle {
    reserved: [u8; IPC_HANDLE_BYTES],
}

/// `CUmemGenericAllocationHandle`.
type CuMemHandle = c_ulonglong;
/// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`.
const ATTRIBUTE_POSIX_FD_SUPPORTED: c_int = 103;
/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
const ALLOCATION_TYPE_PINNED: c_int = 1;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const HANDLE_TYPE_POSIX_FD: c_int = 1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_TYPE_DEVICE: c_int = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const ACCESS_READWRITE: c_int = 3;
/// `CU_MEM_ALLOC_GRANULARITY_MINIMUM`.
const GRANULARITY_MINIMUM: c_int = 0;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Copy, Clone)]
struct CuMemLocation {
    kind: c_int,
    id: c_int,
}

/// `CUmemAllocationProp` (with its `allocFlags` struct flattened: compressionType,
/// gpuDirectRDMACapable, usage, reserved[4]).
#[repr(C)]
#[derive(Copy, Clone)]
struct CuMemAllocationProp {
    kind: c_int,
    requested_handle_types: c_int,
    location: CuMemLocation,
    win32_handle_meta_data: *mut c_void,
    compression_type: u8,
    gpu_direct_rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Copy, Clone)]
struct CuMemAccessDesc {
    location: CuMemLocation,
    flags: c_int,
}

// The sizes `cuda.h` gives these structs on 64-bit Linux (its field list: two ints, a
// CUmemLocation of two ints, a pointer, and allocFlags of 1 + 1 + 2 + 4 bytes).
const _: () = assert!(std::mem::size_of::<CuMemLocation>() == 8);
const _: () = assert!(std::mem::size_of::<CuMemAllocationProp>() == 32);
const _: () = assert!(std::mem::size_of::<CuMemAccessDesc>() == 12);

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
    memcpy_dtod: unsafe extern "C" fn(CuDevicePtr, CuDevicePtr, usize) -> CuResult,
    ipc_get_mem_handle: unsafe extern "C" fn(*mut CuIpcMemHandle, CuDevicePtr) -> CuResult,
    ipc_open_mem_handle: unsafe extern "C" fn(*mut CuDevicePtr, CuIpcMemHandle, c_uint) -> CuResult,
    ipc_close_mem_handle: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    mem_get_allocation_granularity:
        unsafe extern "C" fn(*mut usize, *const CuMemAllocationProp, c_int) -> CuResult,
    mem_create: unsafe extern "C" fn(
        *mut CuMemHandle,
        usize,
        *const CuMemAllocationProp,
        c_ulonglong,
    ) -> CuResult,
    mem_release: unsafe extern "C" fn(CuMemHandle) -> CuResult,
    mem_address_reserve:
        unsafe extern "C" fn(*mut CuDevicePtr, usize, usize, CuDevicePtr, c_ulonglong) -> CuResult,
    mem_address_free: unsafe extern "C" fn(CuDevicePtr, usize) -> CuResult,
    mem_map: unsafe extern "C" fn(CuDevicePtr, usize, usize, CuMemHandle, c_ulonglong) -> CuResult,
    mem_unmap: unsafe extern "C" fn(CuDevicePtr, usize) -> CuResult,
    mem_set_access:
        unsafe extern "C" fn(CuDevicePtr, usize, *const CuMemAccessDesc, usize) -> CuResult,
    mem_retain_allocation_handle: unsafe extern "C" fn(*mut CuMemHandle, *mut c_void) -> CuResult,
    mem_export_to_shareable_handle:
        unsafe extern "C" fn(*mut c_void, CuMemHandle, c_int, c_ulonglong) -> CuResult,
    mem_import_from_shareable_handle:
        unsafe extern "C" fn(*mut CuMemHandle, *mut c_void, c_int) -> CuResult,
    event_create: unsafe extern "C" fn(*mut CuEvent, c_uint) -> CuResult,
    event_record: unsafe extern "C" fn(CuEvent, CuStream) -> CuResult,
    event_destroy: unsafe extern "C" fn(CuEvent) -> CuResult,
    stream_wait_event: unsafe extern "C" fn(CuStream, CuEvent, c_uint) -> CuResult,
    ipc_get_event_handle: unsafe extern "C" fn(*mut CuIpcEventHandle, CuEvent) -> CuResult,
    ipc_open_event_handle: unsafe extern "C" fn(*mut CuEvent, CuIpcEventHandle) -> CuResult,
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
            memcpy_dtod: symbol(lib, "cuMemcpyDtoD_v2")?,
            ipc_get_mem_handle: symbol(lib, "cuIpcGetMemHandle")?,
            ipc_open_mem_handle: symbol(lib, "cuIpcOpenMemHandle_v2")?,
            ipc_close_mem_handle: symbol(lib, "cuIpcCloseMemHandle")?,
            device_get_attribute: symbol(lib, "cuDeviceGetAttribute")?,
            mem_get_allocation_granularity: symbol(lib, "cuMemGetAllocationGranularity")?,
            mem_create: symbol(lib, "cuMemCreate")?,
            mem_release: symbol(lib, "cuMemRelease")?,
            mem_address_reserve: symbol(lib, "cuMemAddressReserve")?,
            mem_address_free: symbol(lib, "cuMemAddressFree")?,
            mem_map: symbol(lib, "cuMemMap")?,
            mem_unmap: symbol(lib, "cuMemUnmap")?,
            mem_set_access: symbol(lib, "cuMemSetAccess")?,
            mem_retain_allocation_handle: symbol(lib, "cuMemRetainAllocationHandle")?,
            mem_export_to_shareable_handle: symbol(lib, "cuMemExportToShareableHandle")?,
            mem_import_from_shareable_handle: symbol(lib, "cuMemImportFromShareableHandle")?,
            event_create: symbol(lib, "cuEventCreate")?,
            event_record: symbol(lib, "cuEventRecord")?,
            event_destroy: symbol(lib, "cuEventDestroy_v2")?,
            stream_wait_event: symbol(lib, "cuStreamWaitEvent")?,
            ipc_get_event_handle: symbol(lib, "cuIpcGetEventHandle")?,
            ipc_open_event_handle: symbol(lib, "cuIpcOpenEventHandle")?,
        })
    }
}

/// The real driver on one device, in the device's primary context. Most programs use
/// [`CudaDevice::real`](super::CudaDevice::real), which loads it.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use std::sync::Arc;
/// use shmrc::cuda::{CudaDevice, Driver, RealDriver};
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
    /// VMM mappings made here (allocated or imported): base address to size.
    vmm: Mutex<BTreeMap<u64, u64>>,
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
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
    /// use shmrc::cuda::{Driver, RealDriver};
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
            vmm: Mutex::new(BTreeMap::new()),
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

    /// A pinned allocation on this device, exportable as a POSIX fd.
    fn vmm_prop(&self) -> CuMemAllocationProp {
        CuMemAllocationProp {
            kind: ALLOCATION_TYPE_PINNED,
            requested_handle_types: HANDLE_TYPE_POSIX_FD,
            location: CuMemLocation {
                kind: LOCATION_TYPE_DEVICE,
                id: self.device,
            },
            win32_handle_meta_data: std::ptr::null_mut(),
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        }
    }

    /// Reserves `size` bytes of address space, maps `handle` there read-write for this
    /// device, and releases `handle` (the mapping holds the memory from then on).
    fn map_and_release(&self, handle: CuMemHandle, size: u64) -> Result<DevicePtr> {
        let mapped = self.map_handle(handle, size as usize);
        // SAFETY: `handle` came from cuMemCreate or cuMemImportFromShareableHandle and
        // is released once, here.
        let released = self.check("cuMemRelease", unsafe { (self.api.mem_release)(handle) });
        let ptr = mapped?;
        if let Err(e) = released {
            self.unmap(ptr.0, size as usize);
            return Err(e);
        }
        crate::cuda::lock(&self.vmm).insert(ptr.0, size);
        Ok(ptr)
    }

    fn map_handle(&self, handle: CuMemHandle, size: usize) -> Result<DevicePtr> {
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: the out-pointer is a local CUdeviceptr; the rest go by value.
        let code = unsafe { (self.api.mem_address_reserve)(&mut ptr, size, 0, 0, 0) };
        self.check("cuMemAddressReserve", code)?;
        // SAFETY: `ptr` is the range just reserved, `handle` a live allocation handle.
        let code = unsafe { (self.api.mem_map)(ptr, size, 0, handle, 0) };
        if let Err(e) = self.check("cuMemMap", code) {
            // SAFETY: frees the range reserved above, which nothing maps.
            let _ = unsafe { (self.api.mem_address_free)(ptr, size) };
            return Err(e);
        }
        let access = CuMemAccessDesc {
            location: CuMemLocation {
                kind: LOCATION_TYPE_DEVICE,
                id: self.device,
            },
            flags: ACCESS_READWRITE,
        };
        // SAFETY: `access` is one local CUmemAccessDesc; `ptr` is mapped above.
        let code = unsafe { (self.api.mem_set_access)(ptr, size, &access, 1) };
        if let Err(e) = self.check("cuMemSetAccess", code) {
            self.unmap(ptr, size);
            return Err(e);
        }
        Ok(DevicePtr(ptr))
    }

    /// Unmaps and frees the address range of a mapping (errors ignored: the caller is
    /// undoing a failed map, or reports the unmap's own code).
    fn unmap(&self, ptr: CuDevicePtr, size: usize) -> CuResult {
        // SAFETY: `ptr`/`size` are a range this driver reserved and mapped.
        let code = unsafe { (self.api.mem_unmap)(ptr, size) };
        // SAFETY: the same range, no longer mapped.
        let _ = unsafe { (self.api.mem_address_free)(ptr, size) };
        code
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
        // The work queued before the free (a copy or kernel still reading or writing
        // the memory) completes first, whatever cuMemFree itself waits for.
        self.synchronize()?;
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
        // This process's work on the mapping completes before it goes (and before the
        // caller tells the exporter it may free).
        self.synchronize()?;
        // SAFETY: a device address by value; the driver validates it.
        let code = unsafe { (self.api.ipc_close_mem_handle)(ptr.0) };
        self.check("cuIpcCloseMemHandle", code)
    }

    fn address_range(&self, ptr: DevicePtr) -> Result<(DevicePtr, u64)> {
        let vmm = crate::cuda::lock(&self.vmm)
            .range(..=ptr.0)
            .next_back()
            .filter(|(base, size)| ptr.0 - **base < **size)
            .map(|(base, size)| (DevicePtr(*base), *size));
        if let Some(found) = vmm {
            return Ok(found);
        }
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
        self.check("cuMemcpyHtoD", code)?;
        if cfg!(shmrc_plant = "htod_returns_early") {
            return Ok(()); // the bug of issue 28, built in only for the planted-bug run
        }
        // From pageable memory cuMemcpyHtoD returns once the bytes are staged, before
        // the DMA lands (issue 28: another process read the old bytes): wait for it.
        self.synchronize()
    }

    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        self.enter()?;
        // SAFETY: `dst` is writable for `dst.len()` bytes; the driver checks `src`.
        let code = unsafe { (self.api.memcpy_dtoh)(dst.as_mut_ptr().cast(), src.0, dst.len()) };
        self.check("cuMemcpyDtoH", code)
    }

    fn copy_on_device(&self, dst: DevicePtr, src: DevicePtr, len: usize) -> Result<()> {
        self.enter()?;
        // SAFETY: device addresses and a length by value; the driver checks both ranges.
        let code = unsafe { (self.api.memcpy_dtod)(dst.0, src.0, len) };
        self.check("cuMemcpyDtoD", code)
    }

    fn synchronize(&self) -> Result<()> {
        self.enter()?;
        // SAFETY: no arguments; works on the context made current above.
        let code = unsafe { (self.api.ctx_synchronize)() };
        self.check("cuCtxSynchronize", code)
    }

    fn supports_posix_fd(&self) -> Result<bool> {
        let mut value: c_int = 0;
        // SAFETY: the out-pointer is a local int; `device` came from cuDeviceGet.
        let code = unsafe {
            (self.api.device_get_attribute)(&mut value, ATTRIBUTE_POSIX_FD_SUPPORTED, self.device)
        };
        self.check("cuDeviceGetAttribute", code)?;
        Ok(value != 0)
    }

    fn vmm_granularity(&self) -> Result<u64> {
        self.enter()?;
        let prop = self.vmm_prop();
        let mut granularity = 0usize;
        // SAFETY: the out-pointer is a local size_t, `prop` a local CUmemAllocationProp.
        let code = unsafe {
            (self.api.mem_get_allocation_granularity)(&mut granularity, &prop, GRANULARITY_MINIMUM)
        };
        self.check("cuMemGetAllocationGranularity", code)?;
        Ok(granularity as u64)
    }

    fn vmm_alloc(&self, size: u64) -> Result<DevicePtr> {
        self.enter()?;
        let prop = self.vmm_prop();
        let mut handle: CuMemHandle = 0;
        // SAFETY: the out-pointer is a local handle, `prop` a local CUmemAllocationProp.
        let code = unsafe { (self.api.mem_create)(&mut handle, size as usize, &prop, 0) };
        self.check("cuMemCreate", code)?;
        self.map_and_release(handle, size)
    }

    fn vmm_export(&self, ptr: DevicePtr) -> Result<OwnedFd> {
        self.enter()?;
        if !crate::cuda::lock(&self.vmm).contains_key(&ptr.0) {
            return Err(driver_error(
                "cuMemRetainAllocationHandle",
                1,
                "CUDA_ERROR_INVALID_VALUE",
            ));
        }
        let mut handle: CuMemHandle = 0;
        // SAFETY: the out-pointer is a local handle; `ptr` is the base of a mapping.
        let code =
            unsafe { (self.api.mem_retain_allocation_handle)(&mut handle, ptr.0 as *mut c_void) };
        self.check("cuMemRetainAllocationHandle", code)?;
        let mut fd: c_int = -1;
        // SAFETY: for POSIX_FILE_DESCRIPTOR the out-pointer is an int; `handle` is live.
        let code = unsafe {
            (self.api.mem_export_to_shareable_handle)(
                (&mut fd as *mut c_int).cast(),
                handle,
                HANDLE_TYPE_POSIX_FD,
                0,
            )
        };
        // SAFETY: releases the retain above, once.
        let _ = unsafe { (self.api.mem_release)(handle) };
        self.check("cuMemExportToShareableHandle", code)?;
        if fd < 0 {
            return Err(driver_error(
                "cuMemExportToShareableHandle",
                0,
                "CUDA_SUCCESS with no descriptor",
            ));
        }
        // SAFETY: on success the driver created `fd` (checked open above) for the
        // caller, who owns it from here.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn vmm_import(&self, fd: BorrowedFd<'_>, size: u64) -> Result<DevicePtr> {
        self.enter()?;
        let mut handle: CuMemHandle = 0;
        // The POSIX-fd handle goes as the descriptor's value cast to a pointer.
        let os_handle = fd.as_raw_fd() as usize as *mut c_void;
        // SAFETY: the out-pointer is a local handle; `fd` is open for the call.
        let code = unsafe {
            (self.api.mem_import_from_shareable_handle)(
                &mut handle,
                os_handle,
                HANDLE_TYPE_POSIX_FD,
            )
        };
        self.check("cuMemImportFromShareableHandle", code)?;
        self.map_and_release(handle, size)
    }

    fn vmm_free(&self, ptr: DevicePtr) -> Result<()> {
        // As `free`: the work queued on the mapping completes before the unmap.
        self.synchronize()?;
        let Some(size) = crate::cuda::lock(&self.vmm).remove(&ptr.0) else {
            return Err(driver_error("cuMemUnmap", 1, "CUDA_ERROR_INVALID_VALUE"));
        };
        let code = self.unmap(ptr.0, size as usize);
        self.check("cuMemUnmap", code)
    }

    fn ipc_event_create(&self) -> Result<EventId> {
        self.enter()?;
        let mut event: CuEvent = std::ptr::null_mut();
        // SAFETY: the out-pointer is a local CUevent; flags go by value.
        let code = unsafe { (self.api.event_create)(&mut event, EVENT_IPC_FLAGS) };
        self.check("cuEventCreate", code)?;
        Ok(EventId(event as u64))
    }

    fn ipc_event_handle(&self, event: EventId) -> Result<IpcEventHandle> {
        self.enter()?;
        let mut handle = CuIpcEventHandle {
            reserved: [0; IPC_HANDLE_BYTES],
        };
        // SAFETY: the out-pointer is a local CUipcEventHandle; `event` is a CUevent this
        // driver created (EventId is only made here).
        let code = unsafe { (self.api.ipc_get_event_handle)(&mut handle, event.0 as CuEvent) };
        self.check("cuIpcGetEventHandle", code)?;
        Ok(IpcEventHandle(handle.reserved))
    }

    fn ipc_event_open(&self, handle: &IpcEventHandle) -> Result<EventId> {
        self.enter()?;
        let mut event: CuEvent = std::ptr::null_mut();
        let by_value = CuIpcEventHandle { reserved: handle.0 };
        // SAFETY: the out-pointer is a local CUevent; the handle goes by value.
        let code = unsafe { (self.api.ipc_open_event_handle)(&mut event, by_value) };
        self.check("cuIpcOpenEventHandle", code)?;
        Ok(EventId(event as u64))
    }

    fn event_record(&self, event: EventId) -> Result<()> {
        self.enter()?;
        // SAFETY: a CUevent of this driver; the null stream is the context's default.
        let code = unsafe { (self.api.event_record)(event.0 as CuEvent, std::ptr::null_mut()) };
        self.check("cuEventRecord", code)
    }

    fn stream_wait_event(&self, event: EventId) -> Result<()> {
        self.enter()?;
        // SAFETY: the default stream, a CUevent of this driver, flags 0.
        let code =
            unsafe { (self.api.stream_wait_event)(std::ptr::null_mut(), event.0 as CuEvent, 0) };
        self.check("cuStreamWaitEvent", code)
    }

    fn event_destroy(&self, event: EventId) -> Result<()> {
        self.enter()?;
        // SAFETY: a CUevent of this driver, destroyed once by its owner.
        let code = unsafe { (self.api.event_destroy)(event.0 as CuEvent) };
        self.check("cuEventDestroy", code)
    }
}
