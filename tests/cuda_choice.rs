//! How a `CudaDevice` picks its handle kind: by capability (does the device export
//! POSIX fds?) and by the process-wide sharing strategy. One test, alone in its binary:
//! it switches the process-wide strategy, which parallel tests must not see.
#![cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))]

use std::sync::Arc;

use shmrc::cuda::{CudaDevice, DeviceAllocator, Driver, FakeDriver, HandleKind, VmmAllocator};
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, DefaultOs, Error, Namespace, Strategy, set_sharing_strategy};

const NAMESPACE: &str = "shmrc-t-cudachoice";

fn device(driver: FakeDriver<DefaultOs>) -> CudaDevice {
    let keepalive = CreateOptions::new().namespace(Namespace::new(NAMESPACE).unwrap());
    CudaDevice::with_driver(DefaultOs::default(), Arc::new(driver), &keepalive)
}

fn fake() -> FakeDriver<DefaultOs> {
    FakeDriver::new(DefaultOs::default(), "shmrc-t-cudachoice-dev", 1 << 30).unwrap()
}

#[test]
fn the_handle_kind_follows_the_device_and_the_process_wide_strategy() {
    set_manager_mode(ManagerMode::Off);
    set_sharing_strategy(Strategy::FileDescriptor);
    assert_eq!(
        device(fake()).allocator().handle_kind(),
        HandleKind::PosixFd
    );
    let legacy_only = device(fake().without_posix_fd());
    assert_eq!(
        legacy_only.allocator().handle_kind(),
        HandleKind::LegacyIpc,
        "a device without POSIX-fd export falls back to legacy IPC handles"
    );
    let buf = legacy_only.alloc(4096).unwrap();
    assert_eq!(buf.share().unwrap().handle_kind(), HandleKind::LegacyIpc);
    drop(buf);
    assert_eq!(
        legacy_only.limbo_len(),
        0,
        "the handle gave back: freed at once"
    );

    set_sharing_strategy(Strategy::FileSystem);
    assert_eq!(
        device(fake()).allocator().handle_kind(),
        HandleKind::LegacyIpc
    );
    set_sharing_strategy(Strategy::FileDescriptor);

    // Asking for the fd path on a device without it says why.
    let driver: Arc<dyn Driver> = Arc::new(fake().without_posix_fd());
    let err = VmmAllocator::new(driver).unwrap_err();
    assert!(matches!(err, Error::CudaUnsupported { .. }), "{err}");
    // A size no granularity multiple can hold is refused before the driver sees it.
    let vmm = VmmAllocator::new(Arc::new(fake())).unwrap();
    let err = vmm.memalloc(usize::MAX).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(matches!(
        vmm.get_ipc_handle(shmrc::cuda::DevicePtr(0)),
        Err(Error::CudaUnsupported { .. })
    ));
    let left = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(NAMESPACE))
        .count();
    assert_eq!(left, 0, "nothing left in /dev/shm");
}
