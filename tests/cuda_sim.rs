//! The device-buffer flow on the simulated kernel with the fake driver: producer and
//! consumers are simulated processes, a consumer is killed (at every step of attach,
//! or while it holds), and the producer frees the device memory exactly when the
//! holder protocol says nobody holds it: after the last live consumer releases, after
//! a sweep or `collect` reclaims the dead one, never while cleanup is deferred.
#![cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))]

use std::sync::{Arc, Mutex};

use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::cuda::{DeviceHandleExt, IDENTITY_BYTES, Identity, IdentityExt};
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::sweep::{inspect, sweep_with};
use shmrc::cuda::{
    CleanupDeferral, CudaDevice, DeviceAllocator, DeviceBuf, DeviceHandle, DevicePtr, DeviceView,
    Driver, DriverAllocator, FakeDriver, HandleKind, IpcExport,
};
use shmrc::{CreateOptions, Error, Namespace, Result, ShmBuf, Strategy};

const UID: u32 = 1000;
const DEVICE_PREFIX: &str = "shmrc-t-cudasim-dev";
const PAYLOAD: &[u8] = b"device bytes a live consumer must keep seeing";

fn ns() -> Namespace {
    Namespace::new("shmrc-t-cudasim").unwrap()
}

/// A fake device on `os` that shares by legacy IPC handle (handles travel as bytes on
/// the simulated kernel; the POSIX-fd path runs across real processes in tests/cuda.rs).
fn device(os: &SimOs) -> CudaDevice<SimOs> {
    let driver: Arc<dyn Driver> =
        Arc::new(FakeDriver::new(os.clone(), DEVICE_PREFIX, 1 << 20).unwrap());
    let dev = CudaDevice::with_driver(
        os.clone(),
        Arc::clone(&driver),
        &CreateOptions::new().namespace(ns()).capacity(4),
    );
    dev.set_allocator(Arc::new(DriverAllocator::new(driver)));
    dev
}

/// The fake device's allocations on `kernel` (objects `<prefix>-<pid>-<n>-<random>`).
fn device_objects(kernel: &SimKernel) -> Vec<String> {
    fake_objects(kernel, false)
}

/// The fake device's IPC events on `kernel` (objects `<prefix>-<pid>-e<n>-<random>`).
fn device_events(kernel: &SimKernel) -> Vec<String> {
    fake_objects(kernel, true)
}

fn fake_objects(kernel: &SimKernel, events: bool) -> Vec<String> {
    let names = kernel.names();
    names
        .into_iter()
        .filter(|n| {
            n.strip_prefix(DEVICE_PREFIX)
                .and_then(|rest| rest.split('-').nth(2))
                .is_some_and(|counter| counter.starts_with('e') == events)
        })
        .collect()
}

fn share_bytes(buf: &DeviceBuf<SimOs>) -> Vec<u8> {
    buf.share().unwrap().into_bytes().unwrap()
}

fn attach(dev: &CudaDevice<SimOs>, os: &SimOs, bytes: &[u8]) -> Result<DeviceView<SimOs>> {
    dev.attach(DeviceHandle::from_bytes_with(os, bytes)?)
}

fn assert_reads_payload(view: &DeviceView<SimOs>) {
    let mut out = vec![0u8; PAYLOAD.len()];
    view.read_at(0, &mut out).unwrap();
    assert_eq!(out, PAYLOAD);
}

/// A simulated process with its device.
struct Proc {
    os: SimOs,
    dev: CudaDevice<SimOs>,
}

/// A producer and consumer processes on one simulated kernel; the producer has
/// allocated a 4096-byte buffer holding `PAYLOAD`.
struct Scene {
    kernel: SimKernel,
    producer: Proc,
    consumers: Vec<Proc>,
    buf: DeviceBuf<SimOs>,
}

impl Scene {
    fn new(kernel: &SimKernel, consumers: usize) -> Scene {
        let spawn = || {
            let os = kernel.spawn(UID);
            let dev = device(&os);
            Proc { os, dev }
        };
        let producer = spawn();
        let buf = producer.dev.alloc(4096).unwrap();
        buf.write_at(0, PAYLOAD).unwrap();
        Scene {
            kernel: kernel.clone(),
            producer,
            consumers: (0..consumers).map(|_| spawn()).collect(),
            buf,
        }
    }

    /// A handle of the buffer, as bytes.
    fn share(&self) -> Vec<u8> {
        share_bytes(&self.buf)
    }

    /// Consumer `i` attaches `handle`.
    fn attach(&self, i: usize, handle: &[u8]) -> Result<DeviceView<SimOs>> {
        let c = &self.consumers[i];
        attach(&c.dev, &c.os, handle)
    }

    /// Consumer `i` attaches a fresh handle.
    fn attached(&self, i: usize) -> DeviceView<SimOs> {
        self.attach(i, &self.share()).unwrap()
    }

    fn pid(&self, i: usize) -> u32 {
        self.consumers[i].os.pid()
    }

    /// The producer drops its buffer; returns its device.
    fn drop_buffer(self) -> (SimKernel, CudaDevice<SimOs>) {
        (self.kernel, self.producer.dev)
    }
}

#[test]
fn the_producer_frees_only_after_the_last_live_consumer_releases() {
    let scene = Scene::new(&SimKernel::new(1), 2);
    let view_a = scene.attached(0);
    let view_b = scene.attached(1);
    assert_reads_payload(&view_b);
    scene.kernel.kill(scene.pid(1));

    let (kernel, dev) = scene.drop_buffer();
    assert_eq!(dev.limbo_len(), 1, "A holds it: the memory waits in limbo");
    assert_eq!(dev.collect().freed, 0);
    assert_eq!(device_objects(&kernel).len(), 1);
    assert_eq!(
        device_events(&kernel).len(),
        1,
        "the IPC event lives as long as the memory"
    );
    assert_reads_payload(&view_a);

    drop(view_a);
    let report = dev.collect();
    assert_eq!((report.freed, report.waiting), (1, 0), "{report:?}");
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
    drop(view_b);
}

#[test]
fn a_sweep_reclaims_a_killed_consumer_and_the_next_alloc_frees() {
    let scene = Scene::new(&SimKernel::new(2), 1);
    let view_b = scene.attached(0);
    let pid = scene.pid(0);
    let (kernel, dev) = scene.drop_buffer();
    assert_eq!(dev.limbo_len(), 1, "B is alive and holds it");

    kernel.kill(pid);
    let report = sweep_with(&kernel.spawn(UID), &ns(), false).unwrap();
    assert_eq!((report.reclaimed, report.unlinked), (1, 1));
    let next = dev.alloc(64).unwrap();
    assert_eq!(dev.limbo_len(), 0, "the alloc drained the limbo list");
    assert_eq!(device_objects(&kernel).len(), 1, "only the new allocation");
    drop(next);
    drop(view_b);
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}

#[test]
fn collect_reclaims_a_killed_consumer_without_a_sweep() {
    let scene = Scene::new(&SimKernel::new(3), 1);
    let view_b = scene.attached(0);
    let pid = scene.pid(0);
    let (kernel, dev) = scene.drop_buffer();
    kernel.kill(pid);
    assert_eq!(dev.limbo_len(), 1, "a cheap drain does not finalize");
    let report = dev.collect();
    assert_eq!(report.freed, 1, "{report:?}");
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
    drop(view_b);
}

/// Runs `scenario(kernel, n)` for n = 0, 1, 2, … until the victim's operation ends
/// before its n-th crash point; returns how many positions were explored.
fn at_every_step(mut scenario: impl FnMut(&SimKernel, u64) -> bool) -> u64 {
    for n in 0..10_000 {
        if !scenario(&SimKernel::new(n), n) {
            assert!(n > 0, "the victim was never killed: the scenario is wrong");
            return n;
        }
    }
    panic!("the victim never finished");
}

#[test]
fn a_consumer_killed_at_any_step_of_attach_never_harms_the_other_and_is_reclaimed() {
    at_every_step(|kernel, n| {
        let scene = Scene::new(kernel, 2);
        let (for_a, for_b) = (scene.share(), scene.share());
        kernel.kill_at_step(scene.pid(1), n);
        let view_b = match scene.attach(1, &for_b) {
            Ok(view) => Some(view),
            Err(Error::Killed) => None,
            Err(e) => panic!("unexpected error: {e}"),
        };
        let killed = kernel.is_killed(scene.pid(1));
        let view_a = scene.attach(0, &for_a).unwrap();
        kernel.kill(scene.pid(1));
        let (_, dev) = scene.drop_buffer();
        sweep_with(&kernel.spawn(UID), &ns(), false).unwrap();
        assert_reads_payload(&view_a);
        assert_eq!(device_objects(kernel).len(), 1, "A still holds it");
        drop(view_a);
        dev.collect();
        if dev.limbo_len() == 1 {
            // B died before taking over its handle's reference: that reference is the
            // live producer's in-flight one, which keeps the memory while the producer
            // lives (P1; a handle in flight cannot be told from a lost one).
            assert!(view_b.is_none(), "step {n}: B attached, yet memory is held");
            let seen = inspect(&kernel.spawn(UID), &ns()).unwrap();
            let census = seen.segments[0].census.unwrap();
            assert_eq!((census.live, census.in_flight), (0, 1), "step {n}");
        } else {
            assert!(
                kernel.names().is_empty(),
                "step {n} left {:?}",
                kernel.names()
            );
        }
        drop(view_b);
        killed
    });
}

#[test]
fn a_consumer_killed_at_any_step_of_release_is_reclaimed_and_the_memory_freed() {
    let explored = at_every_step(|kernel, n| {
        let scene = Scene::new(kernel, 2);
        let view_a = scene.attached(0);
        let view_b = scene.attached(1);
        let pid = scene.pid(1);
        let (_, dev) = scene.drop_buffer();
        kernel.kill_at_step(pid, n);
        drop(view_b);
        let killed = kernel.is_killed(pid);
        kernel.kill(pid);
        assert_reads_payload(&view_a);
        drop(view_a);
        dev.collect();
        assert_eq!(dev.limbo_len(), 0, "step {n}");
        assert!(
            kernel.names().is_empty(),
            "step {n} left {:?}",
            kernel.names()
        );
        killed
    });
    assert!(explored >= 2, "release has crash points: {explored}");
}

#[test]
fn deferred_cleanup_keeps_released_memory_until_the_guard_drops() {
    let kernel = SimKernel::new(4);
    let p = kernel.spawn(UID);
    let dev = device(&p);
    let guard = dev.allocator().defer_cleanup();
    let buf = dev.alloc(128).unwrap();
    buf.share().unwrap();
    drop(buf);
    assert_eq!(dev.collect().waiting, 1, "deferred");
    assert_eq!(device_objects(&kernel).len(), 1);
    drop(guard);
    assert_eq!(dev.collect().freed, 1);
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}

/// A bump allocator over one driver allocation: pieces are reported as base handle +
/// offset, as a pool allocator's are.
#[derive(Debug)]
struct BumpPool {
    driver: Arc<dyn Driver>,
    block: DevicePtr,
    used: Mutex<(u64, usize)>,
    deferral: CleanupDeferral,
}

impl BumpPool {
    fn new(driver: Arc<dyn Driver>, size: usize) -> BumpPool {
        let block = driver.alloc(size).unwrap();
        BumpPool {
            driver,
            block,
            used: Mutex::new((0, 0)),
            deferral: CleanupDeferral::default(),
        }
    }
}

impl DeviceAllocator for BumpPool {
    fn memalloc(&self, size: usize) -> Result<DevicePtr> {
        let mut used = self.used.lock().unwrap();
        let ptr = DevicePtr(self.block.0 + used.0);
        used.0 += size as u64;
        used.1 += 1;
        Ok(ptr)
    }
    fn memfree(&self, _ptr: DevicePtr) -> Result<()> {
        self.used.lock().unwrap().1 -= 1;
        Ok(())
    }
    fn get_ipc_handle(&self, ptr: DevicePtr) -> Result<IpcExport> {
        DriverAllocator::new(Arc::clone(&self.driver)).get_ipc_handle(ptr)
    }
    fn reset(&self) -> Result<()> {
        Ok(())
    }
    fn deferral(&self) -> &CleanupDeferral {
        &self.deferral
    }
}

#[test]
fn pool_pieces_share_one_ipc_mapping_per_process_at_their_offsets() {
    let kernel = SimKernel::new(5);
    let (p, a) = (kernel.spawn(UID), kernel.spawn(UID));
    let (dev_p, dev_a) = (device(&p), device(&a));
    let pool = Arc::new(BumpPool::new(Arc::clone(dev_p.driver()), 8192));
    dev_p.set_allocator(pool.clone());
    let first = dev_p.alloc(100).unwrap();
    let second = dev_p.alloc(100).unwrap();
    first.write_at(0, b"first").unwrap();
    second.write_at(0, b"second").unwrap();

    let view_1 = attach(&dev_a, &a, &share_bytes(&first)).unwrap();
    let view_2 = attach(&dev_a, &a, &share_bytes(&second)).unwrap();
    assert_eq!(dev_a.open_handles(), 1, "one allocation, opened once");
    assert_eq!(view_2.identity().offset, 100);
    let mut out = [0u8; 6];
    view_2.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"second");
    view_1.write_at(0, b"FIRST").unwrap();
    let mut back = [0u8; 5];
    first.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"FIRST", "the consumer's write reaches the producer");

    assert!(matches!(
        dev_p.memory_info(),
        Err(Error::CudaUnsupported { op: "memory_info" })
    ));
    drop(view_1);
    assert_eq!(dev_a.open_handles(), 1, "view_2 still maps it");
    drop(view_2);
    assert_eq!(dev_a.open_handles(), 0);
    drop((first, second));
    assert_eq!(
        pool.used.lock().unwrap().1,
        0,
        "both pieces returned to the pool"
    );
    dev_p.driver().free(pool.block).unwrap();
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}

#[test]
fn dropping_a_view_lands_the_consumers_queued_work_before_it_lets_go() {
    let kernel = SimKernel::new(11);
    let (p, a) = (kernel.spawn(UID), kernel.spawn(UID));
    let (dev_p, dev_a) = (device(&p), device(&a));
    let pool = Arc::new(BumpPool::new(Arc::clone(dev_p.driver()), 8192));
    dev_p.set_allocator(pool.clone());
    let first = dev_p.alloc(100).unwrap();
    let second = dev_p.alloc(100).unwrap();
    first.write_at(0, b"from the producer").unwrap();
    let view_1 = attach(&dev_a, &a, &share_bytes(&first)).unwrap();
    let view_2 = attach(&dev_a, &a, &share_bytes(&second)).unwrap();
    // A "kernel" of the consumer's: a device copy into the view, queued, not done.
    let scratch = dev_a.alloc(17).unwrap();
    scratch.write_at(0, b"from the consumer").unwrap();
    dev_a
        .driver()
        .copy_on_device(view_1.ptr(), scratch.ptr(), 17)
        .unwrap();
    drop(view_1); // the mapping stays (view_2): only the view's own wait lands the copy
    assert_eq!(
        first.census().unwrap().live,
        1,
        "the consumer let go of `first`"
    );
    let mut back = [0u8; 17];
    first.read_at(0, &mut back).unwrap();
    assert_eq!(
        &back, b"from the consumer",
        "the consumer's queued work had not landed when its view let go"
    );
    drop((view_2, scratch));
    drop((first, second));
    dev_p.driver().free(pool.block).unwrap();
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}

#[test]
fn a_dead_exporters_handles_no_longer_open_its_objects_go_and_mapped_memory_lives() {
    let kernel = SimKernel::new(12);
    let (p, q, a, b) = (
        kernel.spawn(UID),
        kernel.spawn(UID),
        kernel.spawn(UID),
        kernel.spawn(UID),
    );
    let fake = |os: &SimOs| FakeDriver::new(os.clone(), DEVICE_PREFIX, 1 << 20).unwrap();
    let (with_memory, with_event, da, db) = (fake(&p), fake(&q), fake(&a), fake(&b));
    let ptr = with_memory.alloc(64).unwrap();
    with_memory
        .copy_to_device(ptr, b"kept by the mapping")
        .unwrap();
    let handle = with_memory.ipc_get_mem_handle(ptr).unwrap();
    let mapped = da.ipc_open_mem_handle(&handle).unwrap();
    let event = with_event.ipc_event_create().unwrap();
    let event_handle = with_event.ipc_event_handle(event).unwrap();
    kernel.kill(p.pid());
    kernel.kill(q.pid());

    // A dead exporter's handles do not open, and the process that noticed reaps what
    // both dead exporters left (their memory and event objects).
    let err = db.ipc_event_open(&event_handle).unwrap_err();
    assert!(matches!(err, Error::Cuda { code: 1, .. }), "{err}");
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
    let err = db.ipc_open_mem_handle(&handle).unwrap_err();
    assert!(matches!(err, Error::Cuda { code: 1, .. }), "{err}");
    // The mapping opened before the death still has the memory.
    let mut out = [0u8; 19];
    da.copy_from_device(mapped, &mut out).unwrap();
    assert_eq!(&out, b"kept by the mapping");
    da.ipc_close_mem_handle(mapped).unwrap();
}

#[test]
fn a_dead_exporters_memory_handle_does_not_open_and_its_objects_go() {
    let kernel = SimKernel::new(13);
    let (p, b) = (kernel.spawn(UID), kernel.spawn(UID));
    let exporter = FakeDriver::new(p.clone(), DEVICE_PREFIX, 1 << 20).unwrap();
    let opener = FakeDriver::new(b.clone(), DEVICE_PREFIX, 1 << 20).unwrap();
    let ptr = exporter.alloc(64).unwrap();
    let handle = exporter.ipc_get_mem_handle(ptr).unwrap();
    let _event = exporter.ipc_event_create().unwrap();
    assert_eq!(kernel.names().len(), 2, "its memory and its event");
    kernel.kill(p.pid());
    let err = opener.ipc_open_mem_handle(&handle).unwrap_err();
    assert!(matches!(err, Error::Cuda { code: 1, .. }), "{err}");
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}

#[test]
fn attaching_in_the_exporting_process_is_refused_and_changes_nothing() {
    let kernel = SimKernel::new(6);
    let p = kernel.spawn(UID);
    let dev = device(&p);
    let buf = dev.alloc(64).unwrap();
    let err = attach(&dev, &p, &share_bytes(&buf)).unwrap_err();
    assert!(matches!(err, Error::CudaOwnExport { .. }), "{err}");
    assert_eq!(buf.census().unwrap().live, 1, "only the producer holds it");
    assert_eq!(
        buf.census().unwrap().in_flight,
        0,
        "the handle's reference went back"
    );
    drop(buf);
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}

#[test]
fn a_segment_that_is_no_keepalive_is_refused_with_its_reason() {
    let kernel = SimKernel::new(7);
    let (p, a) = (kernel.spawn(UID), kernel.spawn(UID));
    let plain = ShmBuf::create_with(
        &p,
        256,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(ns()),
    )
    .unwrap();
    let bytes = plain.share().unwrap().into_bytes().unwrap();
    let err = attach(&device(&a), &a, &bytes).unwrap_err();
    assert!(
        matches!(&err, Error::CudaBadIdentity { what, .. } if what.contains("magic")),
        "{err}"
    );
    drop(plain);

    let short = ShmBuf::create_with(
        &p,
        64,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(ns()),
    )
    .unwrap();
    let bytes = short.share().unwrap().into_bytes().unwrap();
    let err = attach(&device(&a), &a, &bytes).unwrap_err();
    assert!(
        matches!(&err, Error::CudaBadIdentity { what, .. } if what.contains("64 bytes")),
        "{err}"
    );
    drop(short);
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}

fn cuda_code(err: &Error) -> Option<&str> {
    match err {
        Error::Cuda { name, .. } => Some(name),
        _ => None,
    }
}

#[test]
fn the_fake_driver_fails_as_the_real_one_does() {
    let kernel = SimKernel::new(8);
    let (p, a) = (kernel.spawn(UID), kernel.spawn(UID));
    assert!(matches!(
        FakeDriver::new(p.clone(), "no/slash", 1),
        Err(Error::InvalidArgument(_))
    ));
    let driver_p = FakeDriver::new(p.clone(), DEVICE_PREFIX, 4096).unwrap();
    let driver_a = FakeDriver::new(a.clone(), DEVICE_PREFIX, 4096).unwrap();
    let code = |r: Result<DevicePtr>| cuda_code(&r.unwrap_err()).map(str::to_owned);
    assert_eq!(
        code(driver_p.alloc(0)).as_deref(),
        Some("CUDA_ERROR_INVALID_VALUE")
    );
    assert_eq!(
        code(driver_p.alloc(8192)).as_deref(),
        Some("CUDA_ERROR_OUT_OF_MEMORY")
    );

    let ptr = driver_p.alloc(1024).unwrap();
    let err = driver_p.free(DevicePtr(ptr.0 + 1)).unwrap_err();
    assert_eq!(cuda_code(&err), Some("CUDA_ERROR_INVALID_VALUE"));
    let err = driver_p
        .copy_to_device(DevicePtr(ptr.0 + 1000), &[0; 100])
        .unwrap_err();
    assert_eq!(cuda_code(&err), Some("CUDA_ERROR_INVALID_VALUE"));

    let handle = driver_p.ipc_get_mem_handle(ptr).unwrap();
    let err = driver_p.ipc_open_mem_handle(&handle).unwrap_err();
    assert_eq!(cuda_code(&err), Some("CUDA_ERROR_INVALID_CONTEXT"));
    let opened = driver_a.ipc_open_mem_handle(&handle).unwrap();
    let err = driver_a.ipc_open_mem_handle(&handle).unwrap_err();
    assert_eq!(cuda_code(&err), Some("CUDA_ERROR_ALREADY_MAPPED"));
    driver_a.ipc_close_mem_handle(opened).unwrap();

    let mut foreign = handle;
    foreign.0[9] = b'X';
    let err = driver_a.ipc_open_mem_handle(&foreign).unwrap_err();
    assert_eq!(
        cuda_code(&err),
        Some("CUDA_ERROR_INVALID_VALUE"),
        "another prefix"
    );

    driver_p.free(ptr).unwrap();
    let err = driver_a.ipc_open_mem_handle(&handle).unwrap_err();
    assert_eq!(
        cuda_code(&err),
        Some("CUDA_ERROR_INVALID_VALUE"),
        "a freed allocation"
    );
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}

#[test]
fn copies_outside_a_buffer_are_out_of_bounds() {
    let kernel = SimKernel::new(9);
    let p = kernel.spawn(UID);
    let buf = device(&p).alloc(16).unwrap();
    assert!(matches!(
        buf.write_at(10, &[0; 7]),
        Err(Error::OutOfBounds { .. })
    ));
    let mut out = [0u8; 1];
    assert!(matches!(
        buf.read_at(usize::MAX, &mut out),
        Err(Error::OutOfBounds { .. })
    ));
}

/// A keep-alive written by hand (as a damaged or hostile one would be).
fn forged_keepalive(os: &SimOs, identity: &Identity) -> Vec<u8> {
    let buf = ShmBuf::create_with(
        os,
        IDENTITY_BYTES,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(ns()),
    )
    .unwrap();
    buf.write_at(0, &identity.encode()).unwrap();
    buf.share().unwrap().into_bytes().unwrap()
}

#[test]
fn identities_that_describe_no_buffer_are_refused_with_their_reason() {
    let kernel = SimKernel::new(10);
    let (p, a) = (kernel.spawn(UID), kernel.spawn(UID));
    let (dev_p, dev_a) = (device(&p), device(&a));
    let real = dev_p.alloc(64).unwrap();
    let good = Identity {
        kind: HandleKind::LegacyIpc,
        allocation: 0,
        ipc: dev_p.driver().ipc_get_mem_handle(real.ptr()).unwrap(),
        offset: 0,
        size: 64,
        device: dev_p.driver().device().unwrap(),
        producer: p.token(),
        event: None,
    };
    let too_long = Identity { size: 65, ..good };
    let err = attach(&dev_a, &a, &forged_keepalive(&p, &too_long)).unwrap_err();
    assert!(
        matches!(&err, Error::CudaBadIdentity { what, .. } if what.contains("beyond")),
        "{err}"
    );
    assert_eq!(
        dev_a.open_handles(),
        0,
        "the failed attach closed what it opened"
    );

    let name = "a segment";
    let mut bytes = good.encode();
    bytes[8] = 9;
    let err = Identity::decode(&bytes, name).unwrap_err();
    assert!(err.to_string().contains("version 9"), "{err}");
    let empty = Identity { size: 0, ..good }.encode();
    assert!(matches!(
        Identity::decode(&empty, name),
        Err(Error::CudaBadIdentity { .. })
    ));
    let wraps = Identity {
        offset: u64::MAX,
        ..good
    }
    .encode();
    assert!(matches!(
        Identity::decode(&wraps, name),
        Err(Error::CudaBadIdentity { .. })
    ));
    let mut no_process = good.encode();
    no_process[112..120].fill(0);
    assert!(matches!(
        Identity::decode(&no_process, name),
        Err(Error::CudaBadIdentity { .. })
    ));
    let mut unknown_kind = good.encode();
    unknown_kind[120] = 7;
    let err = Identity::decode(&unknown_kind, name).unwrap_err();
    assert!(err.to_string().contains("handle kind 7"), "{err}");
    let fd_beyond = Identity {
        kind: HandleKind::PosixFd,
        allocation: 32,
        ..good
    };
    let err = Identity::decode(&fd_beyond.encode(), name).unwrap_err();
    assert!(err.to_string().contains("32-byte allocation"), "{err}");
    let fd_fits = Identity {
        allocation: 2 << 20,
        ..fd_beyond
    };
    assert_eq!(Identity::decode(&fd_fits.encode(), name).unwrap(), fd_fits);
    // A posix_fd identity arriving as bytes has no descriptor to import.
    let err = attach(&dev_a, &a, &forged_keepalive(&p, &fd_fits)).unwrap_err();
    assert!(
        matches!(&err, Error::CudaBadIdentity { what, .. } if what.contains("without its descriptor")),
        "{err}"
    );
    assert_eq!(Identity::decode(&good.encode(), name).unwrap(), good);
}

#[test]
fn a_damaged_keepalive_keeps_its_memory_in_limbo_and_collect_says_why() {
    let kernel = SimKernel::new(11);
    let (p, a) = (kernel.spawn(UID), kernel.spawn(UID));
    let (dev_p, dev_a) = (device(&p), device(&a));
    let buf = dev_p.alloc(64).unwrap();
    let view = attach(&dev_a, &a, &share_bytes(&buf)).unwrap();
    let name = buf.keepalive_name().unwrap();
    drop(buf);
    assert!(kernel.poke(&name, 0, &[0xff; 8]), "overwrite the magic");
    let report = dev_p.collect();
    assert_eq!(report.freed, 0);
    assert!(
        matches!(report.errors.as_slice(), [Error::BadMagic { .. }]),
        "{report:?}"
    );
    assert_eq!(
        dev_p.limbo_len(),
        1,
        "never freed on a keep-alive it cannot read"
    );
    drop(view);
}

#[test]
fn the_default_allocator_reports_memory_and_follows_emm_version_1() {
    let kernel = SimKernel::new(12);
    let p = kernel.spawn(UID);
    let dev = device(&p);
    let allocator = dev.allocator();
    assert_eq!(
        allocator.interface_version(),
        shmrc::cuda::EMM_INTERFACE_VERSION
    );
    let before = dev.memory_info().unwrap();
    assert_eq!((before.free, before.total), (1 << 20, 1 << 20));
    let buf = dev.alloc(4096).unwrap();
    assert_eq!(dev.memory_info().unwrap().free, (1 << 20) - 4096);
    allocator.reset().unwrap();
    assert_eq!(buf.len(), 4096, "reset frees nothing a buffer owns");
    drop(buf);
    assert_eq!(dev.memory_info().unwrap().free, 1 << 20);
}

#[test]
fn a_device_handle_travels_over_the_transport_with_its_reference() {
    let scene = Scene::new(&SimKernel::new(13), 1);
    let consumer = &scene.consumers[0];
    let (to_consumer, at_consumer) = scene.kernel.stream_pair(&scene.producer.os, &consumer.os);
    let handle = scene.buf.share().unwrap().into_share_handle().unwrap();
    shmrc::checkers::transport::send_with(
        &scene.producer.os,
        &to_consumer,
        b"tensor 7",
        vec![handle],
    )
    .unwrap();
    assert_eq!(
        scene.buf.census().unwrap().in_flight,
        1,
        "in flight while it travels"
    );

    let message = shmrc::checkers::transport::recv_with(&consumer.os, &at_consumer).unwrap();
    assert_eq!(message.payload, b"tensor 7");
    let handle = message.handles.into_iter().next().unwrap();
    let view = consumer
        .dev
        .attach(DeviceHandle::from_share_handle(handle))
        .unwrap();
    assert_reads_payload(&view);
    let census = scene.buf.census().unwrap();
    assert_eq!(
        (census.live, census.in_flight),
        (2, 0),
        "taken over by the consumer"
    );
    let (kernel, dev) = scene.drop_buffer();
    drop(view);
    assert_eq!(dev.collect().freed, 1);
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}

#[test]
fn a_free_the_driver_refuses_stays_in_limbo_and_collect_reports_it() {
    let kernel = SimKernel::new(14);
    let p = kernel.spawn(UID);
    let dev = device(&p);
    let buf = dev.alloc(64).unwrap();
    // Someone freed it behind the allocator's back: the allocator's free must fail.
    dev.driver().free(buf.ptr()).unwrap();
    drop(buf);
    assert_eq!(dev.limbo_len(), 1);
    let report = dev.collect();
    assert_eq!(report.freed, 0);
    assert!(
        matches!(
            report.errors.as_slice(),
            [Error::Cuda {
                call: "cuMemFree",
                ..
            }]
        ),
        "{report:?}"
    );
}

#[test]
fn each_attach_waits_on_the_producers_event_instead_of_a_device_synchronize() {
    let kernel = SimKernel::new(12);
    let (p, a) = (kernel.spawn(UID), kernel.spawn(UID));
    let dev_p = device(&p);
    let driver_a = Arc::new(FakeDriver::new(a.clone(), DEVICE_PREFIX, 1 << 20).unwrap());
    let dev_a = CudaDevice::with_driver(
        a.clone(),
        driver_a.clone(),
        &CreateOptions::new().namespace(ns()).capacity(4),
    );
    let buf = dev_p.alloc(64).unwrap();
    buf.write_at(0, b"ordered").unwrap();
    let (first, second) = (share_bytes(&buf), share_bytes(&buf));
    assert_eq!(device_events(&kernel).len(), 1, "one event per buffer");
    let view = attach(&dev_a, &a, &first).unwrap();
    assert!(view.identity().event.is_some());
    assert_eq!(
        driver_a.event_counts(),
        (0, 1),
        "waited once, opened event destroyed"
    );
    let again = attach(&dev_a, &a, &second).unwrap();
    assert_eq!(driver_a.event_counts(), (0, 2));
    drop((view, again));
    drop(buf);
    assert_eq!(dev_p.limbo_len(), 0);
    assert!(kernel.names().is_empty(), "left: {:?}", kernel.names());
}
