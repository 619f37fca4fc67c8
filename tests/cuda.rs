//! Device buffers across real processes: a producer (this test process) shares a
//! device buffer with consumer processes (this test binary re-executed in the
//! `child_consumer_role` role), both sides write, one consumer is SIGKILLed, and the
//! producer frees the device memory only once the live consumer released and the
//! killed one was reclaimed. Both handle kinds: legacy IPC handles (sent as bytes on
//! the consumer's stdin) and POSIX fds (sent with `SCM_RIGHTS` over a Unix socket the
//! consumer connects to). On the fake driver everywhere; on the real driver only with
//! `--ignored` (`bash .ci/cuda --gpu`) on a machine with an NVIDIA GPU.
//!
//! The other way round too: a producer process (the same role, told to `produce`)
//! SIGKILLed while this process and a consumer process hold its memory; both keep
//! reading and writing it, and it is released when the last of them lets go.
#![cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;

use shmrc::cuda::RealDriver;
use shmrc::cuda::{
    AnyBuf, AnyHandle, CudaDevice, DeviceAllocator, DeviceBuf, DeviceHandle, DeviceView,
    DriverAllocator, HandleKind, Placement, VmmAllocator, transport,
};
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, Error, Namespace};
use shmrc_testkit::data::{fnv1a, hex, unhex};

const ROLE: &str = "SHMRC_T_CUDA_ROLE";
const NAMESPACE: &str = "SHMRC_T_CUDA_NS";
const SOCKET: &str = "SHMRC_T_CUDA_SOCKET";
const REPLY: &str = "cuda-child: ";
const FAKE_DEVICE_BYTES: u64 = 1 << 30;

/// Which driver both sides use: the fake one (with its object-name prefix) or the real.
#[derive(Clone)]
enum Backend {
    Fake(String),
    Real,
}

impl Backend {
    fn env(&self) -> String {
        match self {
            Backend::Fake(prefix) => format!("fake:{prefix}"),
            Backend::Real => "real".into(),
        }
    }

    fn device(&self, ns: &Namespace) -> shmrc::Result<CudaDevice> {
        let keepalive = CreateOptions::new().namespace(ns.clone());
        match self {
            Backend::Fake(prefix) => CudaDevice::fake(prefix, FAKE_DEVICE_BYTES, &keepalive),
            Backend::Real => CudaDevice::real(0, &keepalive),
        }
    }

    /// A device whose buffers are shared as `kind` (chosen explicitly: the tests of
    /// this binary run in parallel, so none changes the process-wide strategy).
    fn device_sharing(&self, ns: &Namespace, kind: HandleKind) -> shmrc::Result<CudaDevice> {
        let device = self.device(ns)?;
        let driver = Arc::clone(device.driver());
        let allocator: Arc<dyn DeviceAllocator> = match kind {
            HandleKind::LegacyIpc => Arc::new(DriverAllocator::new(driver)),
            HandleKind::PosixFd => Arc::new(VmmAllocator::new(driver)?),
        };
        device.set_allocator(allocator);
        Ok(device)
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

/// The consumer process: reads commands on stdin, answers `cuda-child: ...` lines. Run
/// only as a child of the tests below (`--ignored`, with its role in the environment).
#[test]
#[ignore = "the consumer process of the tests below, started by them"]
fn child_consumer_role() {
    let role = std::env::var(ROLE).expect("started by a test, with a role");
    let ns = std::env::var(NAMESPACE).expect("started by a test, with a namespace");
    set_manager_mode(ManagerMode::Off);
    let backend = match role.strip_prefix("fake:") {
        Some(prefix) => Backend::Fake(prefix.to_owned()),
        None => Backend::Real,
    };
    let ns = Namespace::new(ns).unwrap();
    let device = backend.device(&ns).unwrap();
    let socket = UnixStream::connect(std::env::var(SOCKET).unwrap()).unwrap();
    let mut views: Vec<DeviceView> = Vec::new();
    let mut produced: Vec<DeviceBuf> = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let mut words = line.split_whitespace();
        let reply = match words.next() {
            Some("attach") => {
                let bytes = unhex(words.next().unwrap());
                let handle = DeviceHandle::from_bytes(&bytes).unwrap();
                let view = device.attach(handle).unwrap();
                let mut data = vec![0u8; view.len()];
                view.read_at(0, &mut data).unwrap();
                views.push(view);
                format!("attached {}", fnv1a(&data))
            }
            Some("recv") => {
                let mut message = transport::recv(&socket).unwrap();
                let handle = message.handles.remove(0);
                assert_eq!(
                    handle.placement(),
                    Placement::Cuda(Some(device.driver().device().unwrap()))
                );
                let AnyBuf::Cuda(view) = handle.attach(std::slice::from_ref(&device)).unwrap()
                else {
                    panic!("a device buffer attached as a host one");
                };
                let mut data = vec![0u8; view.len()];
                view.read_at(0, &mut data).unwrap();
                views.push(*view);
                format!("attached {}", fnv1a(&data))
            }
            Some("write") => {
                let text = words.next().unwrap();
                views[0].write_at(0, text.as_bytes()).unwrap();
                "wrote".into()
            }
            Some("produce") => {
                // produce KIND LEN: a buffer of the pattern, shared twice (as bytes
                // on stdout, or both in one message over the socket).
                let kind = match words.next().unwrap() {
                    "legacy_ipc" => HandleKind::LegacyIpc,
                    _ => HandleKind::PosixFd,
                };
                let len = words.next().unwrap().parse().unwrap();
                let producer = backend.device_sharing(&ns, kind).unwrap();
                let buf = producer.alloc(len).unwrap();
                buf.write_at(0, &pattern(len)).unwrap();
                let handles = [buf.share().unwrap(), buf.share().unwrap()];
                produced.push(buf);
                match kind {
                    HandleKind::LegacyIpc => {
                        let [a, b] = handles.map(|h| hex(&h.into_bytes().unwrap()));
                        format!("shared {a} {b}")
                    }
                    HandleKind::PosixFd => {
                        transport::send(&socket, b"", handles.map(AnyHandle::from).into()).unwrap();
                        "shared".into()
                    }
                }
            }
            Some("check") => {
                let mut data = vec![0u8; views[0].len()];
                views[0].read_at(0, &mut data).unwrap();
                format!("read {}", fnv1a(&data))
            }
            Some("release") => {
                views.clear();
                format!("released, {} handles open", device.open_handles())
            }
            _ => break,
        };
        println!("{REPLY}{reply}");
    }
}

/// A consumer process this test started (killed by pid on drop if still running).
struct Consumer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    socket: UnixStream,
}

impl Consumer {
    fn start(backend: &Backend, ns: &Namespace) -> Consumer {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("consumer.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_consumer_role",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SHMRC_MANAGER", "off")
            .env(ROLE, backend.env())
            .env(NAMESPACE, ns.prefix())
            .env(SOCKET, &path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn consumer");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        // The child connects first thing; a child that dies before doing so makes
        // accept wait, so accept in steps and give up after 30 s.
        listener.set_nonblocking(true).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let socket = loop {
            match listener.accept() {
                Ok((socket, _)) => break socket,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "consumer never connected"
                    );
                    assert!(
                        child.try_wait().unwrap().is_none(),
                        "consumer died at start"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        socket.set_nonblocking(false).unwrap();
        Consumer {
            child,
            stdin,
            stdout,
            socket,
        }
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "consumer died"
            );
            // The harness may have printed `test child_consumer_role ... ` first.
            if let Some(at) = line.find(REPLY) {
                return line[at + REPLY.len()..].trim_end().to_owned();
            }
        }
    }

    /// Sends `handle` as its kind travels (bytes on stdin, or over the socket with its
    /// descriptor) and returns the consumer's answer to attaching it.
    fn attach(&mut self, handle: DeviceHandle) -> String {
        match handle.handle_kind() {
            HandleKind::LegacyIpc => {
                self.ask(&format!("attach {}", hex(&handle.into_bytes().unwrap())))
            }
            HandleKind::PosixFd => {
                transport::send(&self.socket, b"", vec![handle.into()]).unwrap();
                self.ask("recv")
            }
        }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn exit(mut self) {
        writeln!(self.stdin, "exit").unwrap();
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Names in /dev/shm starting with any of `starts`.
fn shm_names(starts: &[&str]) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| starts.iter().any(|s| n.starts_with(s)))
        .collect()
}

/// The fake driver's backend and a namespace for `test`; this process stays off the
/// manager (these tests sweep by themselves and must leave no manager behind).
fn fake(test: &str) -> (Backend, Namespace) {
    set_manager_mode(ManagerMode::Off);
    let backend = Backend::Fake(format!("shmrc-t-cuda{test}-dev"));
    (
        backend,
        Namespace::new(format!("shmrc-t-cuda{test}")).unwrap(),
    )
}

/// Producer, two consumers; both sides write; one consumer SIGKILLed; the producer
/// frees once the other released and the dead one was reclaimed.
fn share_both_ways_then_free_after_a_kill(backend: &Backend, ns: &Namespace, kind: HandleKind) {
    let device = backend.device_sharing(ns, kind).unwrap();
    let len = 1 << 20;
    let data = pattern(len);
    let buf = device.alloc(len).unwrap();
    buf.write_at(0, &data).unwrap();
    assert_eq!(buf.handle_kind(), None);
    let mut live = Consumer::start(backend, ns);
    let mut doomed = Consumer::start(backend, ns);
    let expect = format!("attached {}", fnv1a(&data));
    assert_eq!(live.attach(buf.share().unwrap()), expect);
    assert_eq!(doomed.attach(buf.share().unwrap()), expect);
    assert_eq!(buf.handle_kind(), Some(kind));
    assert_eq!(live.ask("write from-the-consumer"), "wrote");
    let mut back = [0u8; 17];
    buf.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"from-the-consumer");
    let census = buf.census().unwrap();
    assert_eq!((census.live, census.in_flight), (3, 0));

    doomed.kill();
    assert_eq!(
        buf.census().unwrap().dead,
        1,
        "the killed consumer's slot is dead"
    );
    drop(buf);
    assert_eq!(device.limbo_len(), 1, "a live consumer holds it");
    assert_eq!(device.collect().freed, 0);

    assert_eq!(live.ask("release"), "released, 0 handles open");
    let report = device.collect();
    assert_eq!((report.freed, report.waiting), (1, 0), "{report:?}");
    live.exit();
}

#[test]
fn two_consumer_processes_share_both_ways_and_the_producer_frees_after_a_kill() {
    let (backend, ns) = fake("both");
    share_both_ways_then_free_after_a_kill(&backend, &ns, HandleKind::LegacyIpc);
    let Backend::Fake(prefix) = &backend else {
        unreachable!()
    };
    assert_eq!(shm_names(&[prefix, ns.prefix()]), Vec::<String>::new());
}

#[test]
fn posix_fd_buffers_go_to_two_consumers_by_scm_rights_and_are_freed_after_a_kill() {
    let (backend, ns) = fake("fdtwo");
    let Backend::Fake(prefix) = &backend else {
        unreachable!()
    };
    share_both_ways_then_free_after_a_kill(&backend, &ns, HandleKind::PosixFd);
    assert_eq!(shm_names(&[prefix, ns.prefix()]), Vec::<String>::new());
}

#[test]
fn a_posix_fd_handle_refuses_to_travel_as_bytes_and_gives_its_reference_back() {
    let (backend, ns) = fake("fdbytes");
    let device = backend.device_sharing(&ns, HandleKind::PosixFd).unwrap();
    let buf = device.alloc(4096).unwrap();
    let err = buf.share().unwrap().into_bytes().unwrap_err();
    assert!(matches!(err, Error::WrongStrategy { .. }), "{err}");
    let err = buf.share().unwrap().into_share_handle().unwrap_err();
    assert!(matches!(err, Error::WrongStrategy { .. }), "{err}");
    let census = buf.census().unwrap();
    assert_eq!(
        (census.live, census.in_flight),
        (1, 0),
        "both handles gave back"
    );
    drop(buf);
    assert_eq!(device.limbo_len(), 0, "nobody else held it: freed at once");
    assert_eq!(shm_names(&[ns.prefix()]), Vec::<String>::new());
}

/// One consumer holds the only other reference and is SIGKILLed; `shmrc::sweep`
/// reclaims its slot and the producer's next alloc frees the memory (and its event).
fn killed_last_consumer_is_swept(test: &str, kind: HandleKind) {
    let (backend, ns) = fake(test);
    let Backend::Fake(prefix) = &backend else {
        unreachable!()
    };
    let device = backend.device_sharing(&ns, kind).unwrap();
    let buf = device.alloc(4096).unwrap();
    let mut doomed = Consumer::start(&backend, &ns);
    assert!(doomed.attach(buf.share().unwrap()).starts_with("attached"));
    drop(buf);
    assert_eq!(device.limbo_len(), 1);
    // Named objects of the fake device: its IPC event, and for legacy handles the
    // memory too (posix_fd memory is a memfd, which has no name).
    let named = match kind {
        HandleKind::LegacyIpc => 2,
        HandleKind::PosixFd => 1,
    };
    let objects = shm_names(&[prefix]);
    assert_eq!(
        objects.len(),
        named,
        "the memory and its event live: {objects:?}"
    );

    doomed.kill();
    let report = shmrc::sweep(&ns).unwrap();
    assert_eq!((report.reclaimed, report.unlinked), (1, 1));
    let next = device.alloc(64).unwrap();
    assert_eq!(
        device.limbo_len(),
        0,
        "the alloc freed what the sweep released"
    );
    drop(next);
    assert_eq!(shm_names(&[prefix, ns.prefix()]), Vec::<String>::new());
}

#[test]
fn a_killed_last_consumer_is_reclaimed_by_sweep_and_the_next_alloc_frees() {
    killed_last_consumer_is_swept("sweep", HandleKind::LegacyIpc);
}

#[test]
fn a_killed_last_posix_fd_consumer_is_reclaimed_by_sweep_and_the_next_alloc_frees() {
    killed_last_consumer_is_swept("fdsweep", HandleKind::PosixFd);
}

#[test]
fn without_a_driver_every_real_call_is_cuda_unavailable() {
    set_manager_mode(ManagerMode::Off);
    match RealDriver::load(0) {
        Ok(_) => println!("skipped: a CUDA driver is present (see the --ignored tests)"),
        Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. }), "{e}"),
    }
    let ns = Namespace::new("shmrc-t-cudanone").unwrap();
    if let Err(e) = Backend::Real.device(&ns) {
        assert!(matches!(e, Error::CudaUnavailable { .. }), "{e}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU and driver"]
fn real_gpu_two_consumer_processes_share_both_ways_and_the_producer_frees_after_a_kill() {
    set_manager_mode(ManagerMode::Off);
    let ns = Namespace::new("shmrc-t-cudareal").unwrap();
    share_both_ways_then_free_after_a_kill(&Backend::Real, &ns, HandleKind::LegacyIpc);
    assert_eq!(shm_names(&[ns.prefix()]), Vec::<String>::new());
}

#[test]
#[ignore = "needs an NVIDIA GPU and driver"]
fn real_gpu_posix_fd_buffers_go_to_two_consumers_and_are_freed_after_a_kill() {
    set_manager_mode(ManagerMode::Off);
    let ns = Namespace::new("shmrc-t-cudafdreal").unwrap();
    share_both_ways_then_free_after_a_kill(&Backend::Real, &ns, HandleKind::PosixFd);
    assert_eq!(shm_names(&[ns.prefix()]), Vec::<String>::new());
}

/// The consumers' side of a producer's death: a producer process shares a buffer with
/// this process and a consumer process and is SIGKILLed. Both consumers still read
/// its bytes and see each other's writes; the buffer is released when the last of
/// them lets go (on the real driver: the device's free memory comes back only then);
/// the dead producer's keep-alive slot is reclaimed by that release or by
/// `shmrc::sweep`.
fn a_producer_killed_while_consumers_hold_its_memory(
    backend: &Backend,
    ns: &Namespace,
    kind: HandleKind,
    len: usize,
) {
    let device = backend.device_sharing(ns, kind).unwrap();
    let mut producer = Consumer::start(backend, ns);
    let mut consumer = Consumer::start(backend, ns);
    let expect = format!("attached {}", fnv1a(&pattern(len)));
    let free_before = device.memory_info().unwrap().free;
    let answer = producer.ask(&format!("produce {kind} {len}"));
    let (mine, theirs) = match kind {
        HandleKind::LegacyIpc => {
            let words: Vec<&str> = answer.split_whitespace().collect();
            let [_, a, b] = words[..] else {
                panic!("the producer answered {answer:?}");
            };
            let handle = DeviceHandle::from_bytes(&unhex(a)).unwrap();
            (
                device.attach(handle).unwrap(),
                consumer.ask(&format!("attach {b}")),
            )
        }
        HandleKind::PosixFd => {
            assert_eq!(answer, "shared");
            let mut handles = transport::recv(&producer.socket).unwrap().handles;
            let forwarded = handles.pop().unwrap();
            transport::send(&consumer.socket, b"", vec![forwarded]).unwrap();
            let AnyBuf::Cuda(view) = handles
                .pop()
                .unwrap()
                .attach(std::slice::from_ref(&device))
                .unwrap()
            else {
                panic!("a device buffer attached as a host one");
            };
            (*view, consumer.ask("recv"))
        }
    };
    assert_eq!(theirs, expect);
    let read_mine = |what: &str| {
        let mut data = vec![0u8; len];
        mine.read_at(0, &mut data)
            .unwrap_or_else(|e| panic!("{what}: this consumer's read failed: {e}"));
        data
    };
    assert!(read_mine("before the kill") == pattern(len));

    producer.kill();
    // A legacy IPC allocation belongs to the producer's context, which dies with it;
    // whether the driver keeps it for the processes that mapped it is what a GPU run
    // shows (the fake keeps it, as the kernel keeps an unlinked object's pages). On the
    // real driver this test reports what it saw and checks only that nothing leaks.
    let observe_only = matches!(backend, Backend::Real) && kind == HandleKind::LegacyIpc;
    let mut after_kill = vec![0u8; len];
    let seen = match mine.read_at(0, &mut after_kill) {
        Ok(()) if after_kill == pattern(len) => "the producer's bytes, intact".to_owned(),
        Ok(()) => "OTHER bytes than the producer's".to_owned(),
        Err(e) => format!("an error: {e}"),
    };
    println!("{kind}: after the producer's SIGKILL this consumer read {seen}");
    let intact = seen.starts_with("the producer's bytes");
    assert!(
        intact || observe_only,
        "{kind}: after the producer's SIGKILL this consumer read {seen}"
    );
    let free_held = if intact {
        // Each consumer still has the producer's bytes, and they still share the memory.
        assert_eq!(
            consumer.ask("check"),
            format!("read {}", fnv1a(&pattern(len))),
            "the consumer process after the producer's SIGKILL"
        );
        assert_eq!(consumer.ask("write after-the-producer"), "wrote");
        assert_eq!(
            &read_mine("after the other consumer wrote")[..18],
            b"after-the-producer"
        );
        // One consumer lets go; the memory stays for the other.
        assert_eq!(consumer.ask("release"), "released, 0 handles open");
        assert_eq!(
            &read_mine("after the other consumer let go")[..18],
            b"after-the-producer"
        );
        device.memory_info().unwrap().free
    } else {
        assert_eq!(consumer.ask("release"), "released, 0 handles open");
        device.memory_info().unwrap().free
    };
    drop(mine);
    let free_after = device.memory_info().unwrap().free;
    if let Backend::Real = backend {
        // The device's free memory: the buffer comes back when the last consumer lets
        // go, not before (other processes' contexts come and go meanwhile: a slack).
        let slack = 64 << 20;
        println!(
            "{kind}: device free memory {free_before} before the producer's alloc, \
             {free_held} while the last consumer held it, {free_after} after it let go"
        );
        if intact {
            assert!(
                free_after >= free_held + len as u64 - slack,
                "{kind}: the last consumer's release freed {} bytes of a {len}-byte buffer",
                free_after.saturating_sub(free_held)
            );
        }
        assert!(
            free_after + slack >= free_before,
            "{kind}: the memory did not come back"
        );
    }
    // The dead producer's slot: the last release or a sweep reclaims it (the callers
    // check that the keep-alive is gone).
    let report = shmrc::sweep(ns).unwrap();
    assert!(report.reclaimed <= 1, "{report:?}");
    consumer.exit();
}

#[test]
fn a_killed_producers_legacy_ipc_memory_lives_until_the_last_consumer_lets_go() {
    let (backend, ns) = fake("pdeath");
    a_producer_killed_while_consumers_hold_its_memory(
        &backend,
        &ns,
        HandleKind::LegacyIpc,
        1 << 20,
    );
    let Backend::Fake(prefix) = &backend else {
        unreachable!()
    };
    assert_eq!(shm_names(&[prefix, ns.prefix()]), Vec::<String>::new());
}

#[test]
fn a_killed_producers_posix_fd_memory_lives_until_the_last_consumer_lets_go() {
    let (backend, ns) = fake("pfddeath");
    a_producer_killed_while_consumers_hold_its_memory(&backend, &ns, HandleKind::PosixFd, 1 << 20);
    let Backend::Fake(prefix) = &backend else {
        unreachable!()
    };
    assert_eq!(shm_names(&[prefix, ns.prefix()]), Vec::<String>::new());
}

#[test]
#[ignore = "needs an NVIDIA GPU and driver"]
fn real_gpu_a_killed_producers_memory_lives_until_the_last_consumer_lets_go() {
    set_manager_mode(ManagerMode::Off);
    for kind in [HandleKind::LegacyIpc, HandleKind::PosixFd] {
        let ns = Namespace::new(format!("shmrc-t-cudapdreal{}", kind as u8)).unwrap();
        a_producer_killed_while_consumers_hold_its_memory(&Backend::Real, &ns, kind, 256 << 20);
        assert_eq!(shm_names(&[ns.prefix()]), Vec::<String>::new());
    }
}

/// What `cuda::transport::recv` makes of `bytes` written raw to its socket.
fn recv_raw(bytes: &[u8]) -> Error {
    let (mut to, from) = UnixStream::pair().unwrap();
    to.write_all(bytes).unwrap();
    drop(to);
    transport::recv(&from).unwrap_err()
}

#[test]
fn device_frames_that_are_no_message_are_malformed_and_say_why() {
    set_manager_mode(ManagerMode::Off);
    let header = |magic: &[u8; 4], count: u32| {
        let mut h = magic.to_vec();
        h.extend_from_slice(&1u16.to_le_bytes());
        h.extend_from_slice(&[0, 0]);
        h.extend_from_slice(&count.to_le_bytes());
        h
    };
    let why = |e: Error| match e {
        Error::Malformed { why, .. } => why,
        other => panic!("expected Malformed, got {other}"),
    };
    assert!(why(recv_raw(&header(b"SHMX", 0))).contains("header"));
    assert!(why(recv_raw(&header(b"SHMD", 1 << 20))).contains("device handles in one message"));
    let entry = |kind: u8| {
        let mut e = vec![kind, 0];
        e.extend_from_slice(&[0; 20]);
        e
    };
    let mut announced_fd = header(b"SHMD", 1);
    announced_fd.extend(entry(2)); // a descriptor announced, none attached
    assert!(why(recv_raw(&announced_fd)).contains("1 descriptors, 0 arrived"));
    let mut unknown = header(b"SHMD", 1);
    unknown.extend(entry(9));
    assert!(why(recv_raw(&unknown)).contains("handle kind 9"));
    let mut cut = header(b"SHMD", 2);
    cut.extend(entry(0)); // one of the two entries, then the end
    let err = recv_raw(&cut);
    assert!(matches!(err, Error::Malformed { .. }), "{err}");
}

#[test]
fn more_posix_fd_handles_than_one_message_carries_are_refused_and_given_back() {
    let (backend, ns) = fake("fdmany");
    let device = backend.device_sharing(&ns, HandleKind::PosixFd).unwrap();
    let bufs: Vec<_> = (0..254).map(|_| device.alloc(64).unwrap()).collect();
    let handles = bufs.iter().map(|b| b.share().unwrap().into()).collect();
    let (to, _from) = UnixStream::pair().unwrap();
    let err = transport::send(&to, b"", handles).unwrap_err();
    assert!(err.to_string().contains("at most 253"), "{err}");
    assert_eq!(
        bufs[0].census().unwrap().in_flight,
        0,
        "the refused handles gave back"
    );
    drop(bufs);
    assert_eq!(device.limbo_len(), 0);
    assert_eq!(shm_names(&[ns.prefix()]), Vec::<String>::new());
}

#[test]
fn host_and_device_handles_go_in_one_message_and_attach_where_they_live() {
    let (backend, ns) = fake("mixed");
    let producer = backend.device_sharing(&ns, HandleKind::PosixFd).unwrap();
    let gpu = producer.alloc(64).unwrap();
    let host = shmrc::ShmBuf::new(64).unwrap();
    host.write_at(0, b"host").unwrap();
    let (to, from) = UnixStream::pair().unwrap();
    let handles: Vec<AnyHandle> = vec![gpu.share().unwrap().into(), host.share().unwrap().into()];
    transport::send(&to, b"mixed", handles).unwrap();
    let message = transport::recv(&from).unwrap();
    let placements: Vec<String> = message
        .handles
        .iter()
        .map(|h| h.placement().to_string())
        .collect();
    assert_eq!(placements, ["cuda:0", "host"]);
    let mut handles = message.handles.into_iter();
    // This process exported the device buffer: its attach is refused as CUDA would.
    let err = handles
        .next()
        .unwrap()
        .attach(std::slice::from_ref(&producer))
        .unwrap_err();
    assert!(matches!(err, Error::CudaOwnExport { .. }), "{err}");
    let AnyBuf::Host(received) = handles.next().unwrap().attach(&[]).unwrap() else {
        panic!("a host buffer attached as a device one");
    };
    let mut out = [0u8; 4];
    received.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"host");
    assert_eq!(
        gpu.census().unwrap().in_flight,
        0,
        "the refused handle gave back"
    );
}
