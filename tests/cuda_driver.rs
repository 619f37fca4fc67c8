//! The `Driver` conformance suite: one set of checks, written once against the trait,
//! run on the fake driver here in CI and on the real driver (`libcuda.so.1`) on a
//! machine with an NVIDIA GPU. The fake driver is what every other device test runs
//! on, so each behaviour shmrc relies on is stated here and checked on both.
//!
//! The real-driver instances are `#[ignore]`d with the reason printed by the harness;
//! `bash .ci/cuda --gpu` runs them and FAILS when no GPU is found (a skipped GPU run
//! is never mistaken for a passed one).
#![cfg(all(feature = "cuda", not(any(feature = "loom", feature = "shuttle"))))]

use std::os::fd::AsFd;

use shmrc::cuda::real::RealDriver;
use shmrc::cuda::{DevicePtr, Driver, FakeDriver, IpcEventHandle};
use shmrc::{DefaultOs, Error};

/// Bytes `i * 31 % 251`: a pattern a stale or shifted copy cannot reproduce.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn read(driver: &dyn Driver, ptr: DevicePtr, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    driver.copy_from_device(ptr, &mut out).unwrap();
    out
}

fn assert_driver_error<T: std::fmt::Debug>(result: shmrc::Result<T>, what: &str) {
    match result {
        Err(Error::Cuda { call, name, .. }) => println!("{what}: {call} -> {name}"),
        other => panic!("{what}: expected a driver error, got {other:?}"),
    }
}

// ---- the suite ------------------------------------------------------------------

fn device_reports_identity_and_memory(driver: &dyn Driver) {
    let id = driver.device().unwrap();
    assert_ne!(id.uuid, [0; 16], "a device has a UUID");
    let info = driver.memory_info().unwrap();
    assert!(info.total > 0 && info.free <= info.total, "{info:?}");
    driver.synchronize().unwrap();
}

fn legacy_alloc_round_trips_bytes_and_knows_its_range(driver: &dyn Driver) {
    let len = 1 << 20;
    let ptr = driver.alloc(len).unwrap();
    let data = pattern(len);
    driver.copy_to_device(ptr, &data).unwrap();
    assert_eq!(read(driver, ptr, len), data);
    let inside = ptr.offset(12345).unwrap();
    let (base, size) = driver.address_range(inside).unwrap();
    assert_eq!(base, ptr);
    assert!(size >= len as u64, "{size}");
    driver.copy_to_device(inside, b"inside").unwrap();
    assert_eq!(read(driver, inside, 6), b"inside");
    driver.free(ptr).unwrap();
    assert_driver_error(driver.free(ptr), "a second free");
}

fn device_to_device_copies_land_after_a_synchronize(driver: &dyn Driver) {
    let len = 1 << 20;
    let (a, b) = (driver.alloc(len).unwrap(), driver.alloc(len).unwrap());
    let data = pattern(len);
    driver.copy_to_device(a, &data).unwrap();
    driver.copy_on_device(b, a, len).unwrap();
    driver.synchronize().unwrap();
    assert_eq!(read(driver, b, len), data);
    driver.free(a).unwrap();
    driver.free(b).unwrap();
}

fn legacy_ipc_handle_is_stable_and_not_openable_by_its_exporter(driver: &dyn Driver) {
    let ptr = driver.alloc(4096).unwrap();
    let handle = driver.ipc_get_mem_handle(ptr).unwrap();
    assert_eq!(handle, driver.ipc_get_mem_handle(ptr).unwrap());
    assert_driver_error(
        driver.ipc_open_mem_handle(&handle),
        "opening a handle in its exporting process",
    );
    driver.free(ptr).unwrap();
}

fn vmm_granularity_is_a_power_of_two(driver: &dyn Driver) {
    assert!(
        driver.supports_posix_fd().unwrap(),
        "the device exports POSIX fds"
    );
    let granularity = driver.vmm_granularity().unwrap();
    assert!(granularity.is_power_of_two(), "{granularity}");
    println!("VMM granularity: {granularity} bytes");
    assert_driver_error(
        driver.vmm_alloc(granularity + 1),
        "a size that is no multiple of the granularity",
    );
}

fn vmm_alloc_round_trips_bytes_and_knows_its_range(driver: &dyn Driver) {
    let size = 2 * driver.vmm_granularity().unwrap();
    let ptr = driver.vmm_alloc(size).unwrap();
    let data = pattern(size as usize);
    driver.copy_to_device(ptr, &data).unwrap();
    assert_eq!(read(driver, ptr, size as usize), data);
    let inside = ptr.offset(size / 2 + 7).unwrap();
    assert_eq!(driver.address_range(inside).unwrap(), (ptr, size));
    driver.vmm_free(ptr).unwrap();
    assert_driver_error(driver.vmm_free(ptr), "a second unmap");
}

fn vmm_memory_is_not_legacy_memory(driver: &dyn Driver) {
    let size = driver.vmm_granularity().unwrap();
    let ptr = driver.vmm_alloc(size).unwrap();
    assert_driver_error(driver.free(ptr), "cuMemFree of a VMM allocation");
    assert_driver_error(
        driver.ipc_get_mem_handle(ptr),
        "a legacy IPC handle of a VMM allocation",
    );
    driver.vmm_free(ptr).unwrap();
    let legacy = driver.alloc(4096).unwrap();
    assert_driver_error(
        driver.vmm_export(legacy),
        "exporting legacy memory as an fd",
    );
    driver.free(legacy).unwrap();
}

fn an_exported_fd_outlives_the_exporters_unmap(driver: &dyn Driver) {
    let size = driver.vmm_granularity().unwrap();
    let ptr = driver.vmm_alloc(size).unwrap();
    driver.copy_to_device(ptr, b"held by the fd").unwrap();
    let fd = driver.vmm_export(ptr).unwrap();
    driver.vmm_free(ptr).unwrap();
    let mapped = driver.vmm_import(fd.as_fd(), size).unwrap();
    drop(fd); // the mapping holds the memory now
    assert_eq!(read(driver, mapped, 14), b"held by the fd");
    driver.vmm_free(mapped).unwrap();
}

fn an_fd_does_not_map_at_a_size_larger_than_its_allocation(driver: &dyn Driver) {
    let size = driver.vmm_granularity().unwrap();
    let ptr = driver.vmm_alloc(size).unwrap();
    let fd = driver.vmm_export(ptr).unwrap();
    assert_driver_error(
        driver.vmm_import(fd.as_fd(), 2 * size),
        "importing at twice the allocation's size",
    );
    driver.vmm_free(ptr).unwrap();
}

fn ipc_events_record_wait_and_refuse_a_forged_handle(driver: &dyn Driver) {
    let event = driver.ipc_event_create().unwrap();
    let handle = driver.ipc_event_handle(event).unwrap();
    assert_eq!(handle, driver.ipc_event_handle(event).unwrap());
    assert_ne!(handle.0, [0; 64]);
    driver.event_record(event).unwrap();
    driver.stream_wait_event(event).unwrap();
    driver.synchronize().unwrap();
    driver.event_destroy(event).unwrap();
    assert_driver_error(
        driver.ipc_event_open(&IpcEventHandle([0; 64])),
        "opening an all-zero event handle",
    );
}

// ---- the instances --------------------------------------------------------------

/// The fake driver, one object-name prefix per check.
fn fake(check: &str) -> FakeDriver<DefaultOs> {
    FakeDriver::new(
        DefaultOs::default(),
        &format!("shmrc-t-drv-{check}"),
        1 << 30,
    )
    .unwrap()
}

/// The check named `check` freed every fake allocation it made (their objects carry
/// its prefix in /dev/shm; VMM allocations are memfds and go with their last fd).
fn assert_nothing_left(check: &str) {
    let prefix = format!("shmrc-t-drv-{check}");
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

/// The real driver on device 0; a missing GPU FAILS the check (these instances run
/// only when asked for, on a machine that should have one).
fn real() -> RealDriver {
    match RealDriver::load(0) {
        Ok(driver) => driver,
        Err(e) => panic!("no usable NVIDIA GPU, so the real-driver suite did not run: {e}"),
    }
}

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod on_fake {
            $(
                #[test]
                fn $check() {
                    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
                    let name = &stringify!($check)[..12];
                    super::$check(&super::fake(name));
                    super::assert_nothing_left(name);
                }
            )*
        }
        mod on_real_gpu {
            $(
                #[test]
                #[ignore = "needs an NVIDIA GPU: run `bash .ci/cuda --gpu`"]
                fn $check() {
                    super::$check(&super::real());
                }
            )*
        }
    };
}

conformance!(
    device_reports_identity_and_memory,
    legacy_alloc_round_trips_bytes_and_knows_its_range,
    legacy_ipc_handle_is_stable_and_not_openable_by_its_exporter,
    device_to_device_copies_land_after_a_synchronize,
    vmm_granularity_is_a_power_of_two,
    vmm_alloc_round_trips_bytes_and_knows_its_range,
    vmm_memory_is_not_legacy_memory,
    an_exported_fd_outlives_the_exporters_unmap,
    an_fd_does_not_map_at_a_size_larger_than_its_allocation,
    ipc_events_record_wait_and_refuse_a_forged_handle,
);
