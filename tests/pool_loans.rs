//! Typed pooled loans on the real kernel, both strategies: a `Loan<T>` written as
//! `&mut [T]` becomes a `Sample<T>` that a receiver in another process reads as the
//! same `&[T]`; the segment goes back to the pool only when every holder let go, a
//! receiver SIGKILLed while holding it included, and the next loan reuses it in a new
//! generation; each refused loan or attach names its cause. No `unsafe` here. The
//! receiver is a copy of this test binary ([`receiver_role`]), spawned (not forked:
//! other tests run on threads beside it), run under a time limit and killed by its pid.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::net::UnixStream;
use std::time::Duration;

use bytemuck::{Pod, Zeroable};
use shmrc::{CreateOptions, Error, PoolLimits, Sample, ShareHandle, ShmPool, Strategy, transport};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::SocketPeer;

/// How long a receiver may take to answer, and to exit once told to.
const RECEIVER_LIMIT: Duration = Duration::from_secs(30);

/// The environment variable that makes [`receiver_role`] a receiver: the path of the
/// socket it connects to.
const RECEIVER_SOCKET: &str = "SHMRC_POOL_LOANS_TEST_SOCKET";

/// What the tests lend: a user's own `#[repr(C)]` struct, `Pod` by derive.
#[derive(Copy, Clone, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
struct Reading {
    id: u64,
    value: f64,
}

/// A type aligned to more than a buffer's data is.
#[derive(Copy, Clone, Pod, Zeroable)]
#[repr(C, align(128))]
struct Wide([u8; 128]);

/// What a reader says of `readings`: how many, and a digest of every byte of them.
fn digest(readings: &[Reading]) -> String {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for byte in bytemuck::cast_slice::<Reading, u8>(readings) {
        hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{} {hash:016x}", readings.len())
}

/// A pool of `strategy` (file_system ones in `t`'s namespace).
fn pool(strategy: Strategy, t: &TestNamespace) -> ShmPool {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let options = CreateOptions::new()
        .strategy(strategy)
        .namespace(t.ns.clone());
    ShmPool::new(options, PoolLimits::default()).unwrap()
}

/// A receiver process and the producer's end of its socket.
struct Receiver(SocketPeer);

impl Receiver {
    /// Starts one, connected to a socket of its own (`test` names it).
    fn start(test: &str) -> Receiver {
        let name = format!("shmrc-pool-loans-{test}");
        Receiver(SocketPeer::start(
            "receiver_role",
            RECEIVER_SOCKET,
            &name,
            RECEIVER_LIMIT,
        ))
    }

    /// Sends `sample`'s handle; returns what the receiver read once it holds it.
    fn hold(&mut self, sample: &Sample<Reading>) -> String {
        transport::send(&self.0.socket, b"", vec![sample.share().unwrap()]).unwrap();
        self.0.talker.ask("recv")
    }
}

/// The role a copy of this binary plays for [`Receiver`]. Not a test of its own:
/// without [`RECEIVER_SOCKET`] it returns at once. Commands, one per line on stdin:
/// `recv` (receive one handle, attach it as `Sample<Reading>`, say
/// `recv <generation> <digest>`), `release` (drop it).
#[test]
fn receiver_role() {
    let Ok(path) = std::env::var(RECEIVER_SOCKET) else {
        return;
    };
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let socket = UnixStream::connect(path).expect("connect to the producer");
    println!("connected");
    let mut held: Option<Sample<Reading>> = None;
    let mut line = String::new();
    while {
        line.clear();
        std::io::stdin().read_line(&mut line).unwrap_or(0) > 0
    } {
        match line.trim() {
            "recv" => {
                let mut message = transport::recv(&socket).unwrap();
                let sample = Sample::<Reading>::attach(message.handles.remove(0)).unwrap();
                let readings: &[Reading] = &sample; // no unsafe
                println!("recv {} {}", sample.generation(), digest(readings));
                held = Some(sample);
            }
            "release" => {
                drop(held.take());
                println!("release");
            }
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// Lends `len` readings, fills them (numbered from `first`), and shares them.
fn filled(pool: &ShmPool, len: usize, first: u64) -> Sample<Reading> {
    let mut loan = pool.loan::<Reading>(len).unwrap();
    assert_eq!(loan.len(), len);
    for (i, reading) in loan.iter_mut().enumerate() {
        let id = first + i as u64;
        *reading = Reading {
            id,
            value: id as f64 * 0.5,
        };
    }
    loan.into_sample()
}

#[test]
fn a_loan_is_read_as_the_same_slice_in_another_process_and_comes_back_when_all_let_go() {
    for strategy in [Strategy::FileSystem, Strategy::FileDescriptor] {
        let t = TestNamespace::new("loans-read");
        let pool = pool(strategy, &t);
        let mut receiver = Receiver::start(&format!("read-{strategy}"));
        let sample = filled(&pool, 10_000, 1);
        let expected = format!("recv 0 {}", digest(&sample));
        assert_eq!(receiver.hold(&sample), expected, "{strategy}");
        // Two holders in this process (the sample and a clone), one in the receiver.
        let clone = sample.clone();
        drop(sample);
        assert_eq!(
            pool.stats().in_use,
            1,
            "{strategy}: the clone still uses it"
        );
        drop(clone);
        let stats = pool.stats();
        assert_eq!((stats.lent, stats.idle), (1, 0), "{strategy}: {stats:?}");
        // Not reused while the receiver holds it: the next loan is a new segment.
        let other = pool.loan::<Reading>(10_000).unwrap();
        assert_eq!(other.generation(), 0, "{strategy}");
        drop(other);
        receiver.0.talker.ask("release");
        let stats = pool.stats();
        assert_eq!((stats.lent, stats.idle), (0, 2), "{strategy}: {stats:?}");
        // Both back: the one handed out longest ago (the receiver's) is reused first.
        let again = filled(&pool, 10_000, 50_000);
        assert_eq!(again.generation(), 1, "{strategy}");
        let stats = pool.stats();
        assert_eq!((stats.created, stats.recycled), (2, 1), "{strategy}");
        // The receiver reads the new use, not the old one.
        let expected = format!("recv 1 {}", digest(&again));
        assert_eq!(receiver.hold(&again), expected, "{strategy}");
        receiver.0.talker.finish();
        drop((again, pool));
        assert!(t.names().is_empty(), "{strategy}: left {:?}", t.names());
    }
}

#[test]
fn a_sample_a_killed_receiver_held_goes_back_to_the_pool_in_a_new_generation() {
    for strategy in [Strategy::FileSystem, Strategy::FileDescriptor] {
        let t = TestNamespace::new("loans-kill");
        let pool = pool(strategy, &t);
        let mut receiver = Receiver::start(&format!("kill-{strategy}"));
        let sample = filled(&pool, 512, 7);
        let expected = format!("recv 0 {}", digest(&sample));
        assert_eq!(receiver.hold(&sample), expected, "{strategy}");
        drop(sample);
        receiver.0.talker.kill(); // SIGKILL by its pid, reaped: its slot is a dead one's
        assert_eq!(
            pool.stats().lent,
            1,
            "{strategy}: the dead slot still looks taken"
        );
        // No idle segment: the loan tries the lent one, reclaims the dead slot, reuses it.
        let again = pool.loan::<Reading>(512).unwrap();
        assert_eq!(again.generation(), 1, "{strategy}");
        let stats = pool.stats();
        assert_eq!(
            (stats.created, stats.recycled),
            (1, 1),
            "{strategy}: {stats:?}"
        );
        drop((again, pool));
        assert!(t.names().is_empty(), "{strategy}: left {:?}", t.names());
    }
}

#[test]
fn a_loan_whose_byte_length_overflows_or_is_zero_is_refused_by_name() {
    let t = TestNamespace::new("loans-len");
    let pool = pool(Strategy::FileDescriptor, &t);
    match pool.loan::<Reading>(usize::MAX / 8) {
        Err(Error::InvalidArgument(why)) => {
            assert!(why.contains("overflows usize"), "{why}");
            assert!(why.contains("Reading"), "{why}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    match pool.loan::<u32>(0) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("0 items"), "{why}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(
        pool.stats().created,
        0,
        "nothing was created for a refused loan"
    );
}

#[test]
fn a_type_that_cannot_view_a_buffer_is_refused_by_name() {
    let t = TestNamespace::new("loans-type");
    let pool = pool(Strategy::FileDescriptor, &t);
    match pool.loan::<()>(4) {
        Err(Error::BadView { why, .. }) => assert!(why.contains("zero-sized"), "{why}"),
        other => panic!("expected BadView, got {other:?}"),
    }
    match pool.loan::<Wide>(4) {
        Err(Error::BadView { why, .. }) => assert!(why.contains("64-byte alignment"), "{why}"),
        other => panic!("expected BadView, got {other:?}"),
    }
    let sample = pool.loan::<u8>(128).unwrap().into_sample();
    match Sample::<Wide>::attach(sample.share().unwrap()) {
        Err(Error::BadView { why, .. }) => assert!(why.contains("64-byte alignment"), "{why}"),
        other => panic!("expected BadView, got {other:?}"),
    }
    match Sample::<()>::attach(sample.share().unwrap()) {
        Err(Error::BadView { why, .. }) => assert!(why.contains("zero-sized"), "{why}"),
        other => panic!("expected BadView, got {other:?}"),
    }
    drop(sample);
    assert_eq!(
        pool.stats().idle,
        1,
        "the refused handles gave their references back"
    );
}

#[test]
fn a_sample_attached_as_the_wrong_type_is_refused_and_gives_its_reference_back() {
    for strategy in [Strategy::FileSystem, Strategy::FileDescriptor] {
        let t = TestNamespace::new("loans-wrong");
        let pool = pool(strategy, &t);
        let mut loan = pool.loan::<u16>(3).unwrap(); // 6 bytes
        loan.copy_from_slice(&[1, 2, 3]);
        let sample = loan.into_sample();
        match Sample::<u32>::attach(sample.share().unwrap()) {
            Err(Error::BadView {
                why,
                len: 6,
                size: 6,
                ..
            }) => assert!(why.contains("not a multiple"), "{strategy}: {why}"),
            other => panic!("{strategy}: expected BadView, got {other:?}"),
        }
        let right = Sample::<u16>::attach(sample.share().unwrap()).unwrap();
        assert_eq!(*right, [1, 2, 3], "{strategy}");
        drop((sample, right));
        assert_eq!(
            pool.stats().idle,
            1,
            "{strategy}: nothing holds it any more"
        );
    }
}

#[test]
fn a_handle_of_an_earlier_use_of_a_sample_is_stale() {
    let t = TestNamespace::new("loans-stale");
    let pool = pool(Strategy::FileSystem, &t);
    let sample = pool.loan::<u64>(8).unwrap().into_sample();
    let bytes = sample.share().unwrap().into_bytes().unwrap();
    drop(Sample::<u64>::attach(ShareHandle::from_bytes(&bytes).unwrap()).unwrap());
    drop(sample);
    let mut next = pool.loan::<u64>(8).unwrap();
    assert_eq!(next.generation(), 1);
    next.fill(9);
    // A duplicate of the first use's handle reads nothing of the second.
    match Sample::<u64>::attach(ShareHandle::from_bytes(&bytes).unwrap()) {
        Err(Error::Stale {
            handle: 0,
            segment_generation: 1,
            ..
        }) => {}
        other => panic!("expected Stale, got {other:?}"),
    }
    let mut copy = [0u64; 8];
    next.into_sample().read_items(0, &mut copy).unwrap();
    assert_eq!(copy, [9; 8]);
}
