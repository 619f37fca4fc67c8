//! The `Driver` conformance suite: one set of checks, written once against the trait,
//! run on the fake driver here in CI and on the real driver (`libcuda.so.1`) on a
//! machine with an NVIDIA GPU. The fake driver is what every other device test runs
//! on, so each behaviour shmrc relies on is stated here and checked on both.
//!
//! The real-driver instances are `#[ignore]`d with the reason printed by the harness;
//! `bash .ci/cuda --gpu` runs them and FAILS when no GPU is found (a skipped GPU run
//! is never mistaken for a passed one).
//!
//! The checks of what another process sees run a peer: this binary again, in the
//! `peer_role` test, with a driver of the same kind, told what to do line by line.
//! They are what catches a synchronous call that returns early (issue 28: on an H100
//! a consumer's `cuMemcpyHtoD` had not landed when the producer read; the fake driver
//! stages such copies, so they fail here without a GPU too).
#![cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))]

use std::io::{BufRead, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use shmrc::cuda::RealDriver;
use shmrc::cuda::{DevicePtr, Driver, FakeDriver, IpcEventHandle, IpcMemHandle};
use shmrc::{DefaultOs, Error};
use shmrc_testkit::data::{hex, unhex};
use shmrc_testkit::process::{Talker, test_role};

/// The peer's environment: its driver (`fake:<prefix>` or `real`) and its socket.
const PEER: &str = "SHMRC_T_DRV_PEER";
const PEER_SOCKET: &str = "SHMRC_T_DRV_PEER_SOCKET";
/// Bytes the cross-process checks copy (a hex line each way).
const PEER_BYTES: usize = 64 << 10;

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

fn a_free_waits_for_the_copies_queued_before_it(driver: &dyn Driver) {
    let len = 1 << 20;
    let (a, b) = (driver.alloc(len).unwrap(), driver.alloc(len).unwrap());
    let data = other_pattern(len, 3);
    driver.copy_to_device(a, &data).unwrap();
    driver.copy_on_device(b, a, len).unwrap(); // asynchronous: may still read `a`
    driver.free(a).unwrap();
    driver.synchronize().unwrap();
    assert!(
        read(driver, b, len) == data,
        "the copy out of the freed memory was lost"
    );
    driver.free(b).unwrap();
}

fn an_unmap_waits_for_the_copies_queued_before_it(driver: &dyn Driver) {
    let size = driver.vmm_granularity().unwrap();
    let (a, b) = (
        driver.vmm_alloc(size).unwrap(),
        driver.vmm_alloc(size).unwrap(),
    );
    let data = other_pattern(size as usize, 9);
    driver.copy_to_device(a, &data).unwrap();
    driver.copy_on_device(b, a, size as usize).unwrap();
    driver.vmm_free(a).unwrap();
    driver.synchronize().unwrap();
    assert!(
        read(driver, b, size as usize) == data,
        "the copy out of the unmapped memory was lost"
    );
    driver.vmm_free(b).unwrap();
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

// ---- a second process ----------------------------------------------------------

/// Sends `fd` over `socket` (`SCM_RIGHTS`, one byte of data).
fn send_fd(socket: &UnixStream, fd: &OwnedFd) {
    let fds = [fd.as_raw_fd()];
    let sent = sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(b"f")],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    );
    assert_eq!(sent.expect("sendmsg"), 1);
}

/// The descriptor [`send_fd`] sent.
fn recv_fd(socket: &UnixStream) -> OwnedFd {
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut byte)];
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .expect("recvmsg");
    for cmsg in msg.cmsgs().expect("control messages") {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            // SAFETY: SCM_RIGHTS just installed this descriptor in this process, and
            // nothing else owns it.
            return unsafe { OwnedFd::from_raw_fd(fds[0]) };
        }
    }
    panic!("no descriptor arrived");
}

/// The peer process: one mapping at a time of memory this test's process shares,
/// driven by lines on stdin (`open HEX`, `import SIZE` with the fd on the socket,
/// `write HEX`, `read LEN`, `wait HEX`, `close`); each answered `LINE -> ANSWER`.
/// Returns at once unless started as a peer.
#[test]
fn peer_role() {
    let Ok(backend) = std::env::var(PEER) else {
        return;
    };
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let driver: Box<dyn Driver> = match backend.strip_prefix("fake:") {
        Some(prefix) => Box::new(FakeDriver::new(DefaultOs::default(), prefix, 1 << 30).unwrap()),
        None => Box::new(real()),
    };
    let socket = UnixStream::connect(std::env::var(PEER_SOCKET).unwrap()).unwrap();
    let mut mapped: Option<(DevicePtr, bool)> = None;
    let at = |mapped: Option<(DevicePtr, bool)>| mapped.expect("a mapping").0;
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["open", handle] => {
                let handle = IpcMemHandle(unhex(handle).try_into().unwrap());
                mapped = Some((driver.ipc_open_mem_handle(&handle).unwrap(), false));
                "ok".to_owned()
            }
            ["import", size] => {
                let fd = recv_fd(&socket);
                let ptr = driver
                    .vmm_import(fd.as_fd(), size.parse().unwrap())
                    .unwrap();
                mapped = Some((ptr, true));
                "ok".to_owned()
            }
            ["write", data] => {
                driver.copy_to_device(at(mapped), &unhex(data)).unwrap();
                "ok".to_owned()
            }
            ["read", len] => hex(&read(driver.as_ref(), at(mapped), len.parse().unwrap())),
            ["wait", handle] => {
                let event = driver
                    .ipc_event_open(&IpcEventHandle(unhex(handle).try_into().unwrap()))
                    .unwrap();
                driver.stream_wait_event(event).unwrap();
                driver.event_destroy(event).unwrap();
                "ok".to_owned()
            }
            ["close"] => {
                match mapped.take().expect("a mapping") {
                    (ptr, false) => driver.ipc_close_mem_handle(ptr).unwrap(),
                    (ptr, true) => driver.vmm_free(ptr).unwrap(),
                }
                "ok".to_owned()
            }
            _ => break,
        };
        println!("{line} -> {answer}");
    }
}

/// A peer process with a driver of `backend`'s kind, and its socket.
struct Peer {
    talker: Talker,
    socket: UnixStream,
    _dir: tempfile::TempDir,
}

impl Peer {
    fn start(backend: &str) -> Peer {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peer.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let mut command = test_role("peer_role");
        command
            .env(PEER, backend)
            .env(PEER_SOCKET, &path)
            .env("SHMRC_MANAGER", "off");
        let mut talker = Talker::start(&mut command, Duration::from_secs(60));
        let socket = talker.accept(&listener);
        Peer {
            talker,
            socket,
            _dir: dir,
        }
    }

    /// Its answer to `command`.
    fn ask(&mut self, command: &str) -> String {
        let line = self.talker.ask(command);
        let (_, answer) = line.split_once(" -> ").expect("an answer");
        answer.to_owned()
    }

    fn ok(&mut self, command: &str) {
        let answer = self.ask(command);
        assert_eq!(answer, "ok", "{}", &command[..command.len().min(40)]);
    }

    fn read(&mut self, len: usize) -> Vec<u8> {
        unhex(&self.ask(&format!("read {len}")))
    }

    fn finish(self) {
        self.talker.finish();
    }
}

/// Bytes `(i * 7 + seed) % 253`, unlike [`pattern`] and unlike zeros.
fn other_pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + usize::from(seed)) % 253) as u8)
        .collect()
}

/// Both ways across a mapping the peer holds of `ptr`: what one process copied in with
/// `copy_to_device` is what the other reads once the call returned.
fn copies_reach_the_other_process(driver: &dyn Driver, ptr: DevicePtr, peer: &mut Peer) {
    let mine = pattern(PEER_BYTES);
    driver.copy_to_device(ptr, &mine).unwrap();
    assert!(
        peer.read(PEER_BYTES) == mine,
        "the peer read something else than the bytes copy_to_device had copied in here"
    );
    let theirs = other_pattern(PEER_BYTES, 5);
    peer.ok(&format!("write {}", hex(&theirs)));
    assert!(
        read(driver, ptr, PEER_BYTES) == theirs,
        "this process read something else than the bytes the peer's copy_to_device had copied in"
    );
}

fn a_copy_to_device_is_in_memory_for_another_process_when_it_returns(
    driver: &dyn Driver,
    backend: &str,
) {
    let ptr = driver.alloc(PEER_BYTES).unwrap();
    let handle = driver.ipc_get_mem_handle(ptr).unwrap();
    let mut peer = Peer::start(backend);
    peer.ok(&format!("open {}", hex(&handle.0)));
    copies_reach_the_other_process(driver, ptr, &mut peer);
    peer.ok("close");
    peer.finish();
    driver.free(ptr).unwrap();
}

fn a_copy_to_vmm_memory_is_in_memory_for_another_process_when_it_returns(
    driver: &dyn Driver,
    backend: &str,
) {
    let size = driver.vmm_granularity().unwrap();
    let ptr = driver.vmm_alloc(size).unwrap();
    let fd = driver.vmm_export(ptr).unwrap();
    let mut peer = Peer::start(backend);
    send_fd(&peer.socket, &fd);
    drop(fd);
    peer.ok(&format!("import {size}"));
    copies_reach_the_other_process(driver, ptr, &mut peer);
    peer.ok("close");
    peer.finish();
    driver.vmm_free(ptr).unwrap();
}

fn an_ipc_event_orders_a_device_copy_for_another_process(driver: &dyn Driver, backend: &str) {
    let (src, dst) = (
        driver.alloc(PEER_BYTES).unwrap(),
        driver.alloc(PEER_BYTES).unwrap(),
    );
    let handle = driver.ipc_get_mem_handle(dst).unwrap();
    let event = driver.ipc_event_create().unwrap();
    let mut peer = Peer::start(backend);
    peer.ok(&format!("open {}", hex(&handle.0)));
    let data = other_pattern(PEER_BYTES, 11);
    driver.copy_to_device(src, &data).unwrap();
    driver.copy_on_device(dst, src, PEER_BYTES).unwrap(); // asynchronous
    driver.event_record(event).unwrap(); // after the copy
    let event_handle = driver.ipc_event_handle(event).unwrap();
    peer.ok(&format!("wait {}", hex(&event_handle.0)));
    assert!(
        peer.read(PEER_BYTES) == data,
        "the peer's read after waiting on the event did not see the copy queued before its record"
    );
    peer.ok("close");
    peer.finish();
    driver.event_destroy(event).unwrap();
    driver.free(src).unwrap();
    driver.free(dst).unwrap();
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

/// The objects in /dev/shm that this process's fake driver of check `check` made and
/// did not free (their names carry its prefix and this pid; VMM allocations are memfds
/// and go with their last fd).
fn left_by_this_process(check: &str) -> Vec<String> {
    let start = format!("shmrc-t-drv-{check}-{}-", std::process::id());
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&start))
        .collect()
}

/// The check named `check` freed every fake allocation it made.
fn assert_nothing_left(check: &str) {
    assert_eq!(left_by_this_process(check), Vec::<String>::new());
}

/// Unlinks, when dropped, what check `check` of this process left in /dev/shm: a check
/// that fails (a planted bug's build fails some on purpose) leaves nothing for a later
/// run to find.
struct CleanUp(&'static str);

impl Drop for CleanUp {
    fn drop(&mut self) {
        for name in left_by_this_process(self.0) {
            let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
        }
    }
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
                    let _clean_up = super::CleanUp(name);
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

macro_rules! conformance_with_peer {
    ($($check:ident),* $(,)?) => {
        mod with_peer_on_fake {
            $(
                #[test]
                fn $check() {
                    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
                    let name = &stringify!($check)[..12];
                    let _clean_up = super::CleanUp(name);
                    let backend = format!("fake:shmrc-t-drv-{name}");
                    super::$check(&super::fake(name), &backend);
                    super::assert_nothing_left(name);
                }
            )*
        }
        mod with_peer_on_real_gpu {
            $(
                #[test]
                #[ignore = "needs an NVIDIA GPU: run `bash .ci/cuda --gpu`"]
                fn $check() {
                    super::$check(&super::real(), "real");
                }
            )*
        }
    };
}

conformance_with_peer!(
    a_copy_to_device_is_in_memory_for_another_process_when_it_returns,
    a_copy_to_vmm_memory_is_in_memory_for_another_process_when_it_returns,
    an_ipc_event_orders_a_device_copy_for_another_process,
);

conformance!(
    a_free_waits_for_the_copies_queued_before_it,
    an_unmap_waits_for_the_copies_queued_before_it,
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
