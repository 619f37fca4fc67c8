//! `ShmPool` on the real kernel: a released buffer's segment is reused with a new
//! generation, a handle of an earlier use fails with `Error::Stale` and reads nothing,
//! a segment still held (here by a handle in flight) is not reused, the limits and the
//! idle timeout give memory back, and a file_descriptor pool is refused.
#![cfg(not(any(feature = "loom", feature = "shuttle")))]

use std::time::Duration;

use shmrc::{CreateOptions, Error, PoolLimits, ShareHandle, ShmBuf, ShmPool, Strategy};
use shmrc_testkit::names::TestNamespace;

fn pool(t: &TestNamespace, limits: PoolLimits) -> ShmPool {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(t.ns.clone());
    ShmPool::new(options, limits).unwrap()
}

#[test]
fn a_released_buffer_is_reused_in_a_new_generation() {
    let t = TestNamespace::new("pool-reuse");
    let pool = pool(&t, PoolLimits::default());
    let first = pool.get(4096).unwrap();
    let name = first.name().unwrap().to_owned();
    assert_eq!(first.generation(), 0);
    drop(first);
    let second = pool.get(4096).unwrap();
    assert_eq!(second.name(), Some(name.as_str()));
    assert_eq!(second.generation(), 1);
    assert_eq!(t.names(), vec![name]);
    let stats = pool.stats();
    assert_eq!((stats.created, stats.recycled, stats.in_use), (1, 1, 1));
    drop(second);
    drop(pool);
    assert!(t.names().is_empty(), "the pool's drop unlinks what it kept");
}

#[test]
fn a_handle_of_an_earlier_use_is_stale_and_reads_nothing() {
    let t = TestNamespace::new("pool-stale");
    let pool = pool(&t, PoolLimits::default());
    let first = pool.get(64).unwrap();
    first.write_at(0, b"first use").unwrap();
    let bytes = first.share().unwrap().into_bytes().unwrap();
    // A consumer takes the reference over and drops it: the segment is free again.
    drop(ShmBuf::attach(ShareHandle::from_bytes(&bytes).unwrap()).unwrap());
    drop(first);
    let second = pool.get(64).unwrap();
    second.write_at(0, b"second use").unwrap();
    // The same bytes again (a duplicate kept by a consumer): another use's data.
    match ShmBuf::attach(ShareHandle::from_bytes(&bytes).unwrap()) {
        Err(Error::Stale {
            handle: 0,
            segment_generation: 1,
            ..
        }) => {}
        other => panic!("expected Stale, got {other:?}"),
    }
    assert_eq!(
        second.census().unwrap().live,
        1,
        "the stale attach kept no slot"
    );
    let fresh = ShmBuf::attach(second.share().unwrap()).unwrap();
    let mut out = [0u8; 10];
    fresh.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"second use");
}

#[test]
fn a_segment_with_a_handle_in_flight_is_not_reused() {
    let t = TestNamespace::new("pool-held");
    let pool = pool(&t, PoolLimits::default());
    let first = pool.get(64).unwrap();
    let in_flight = first.share().unwrap();
    drop(first);
    let second = pool.get(64).unwrap();
    assert_eq!(second.generation(), 0, "a fresh segment");
    assert_eq!(pool.stats().created, 2, "held by the handle: a new segment");
    // The handle still attaches the first use.
    let attached = ShmBuf::attach(in_flight).unwrap();
    assert_eq!(attached.generation(), 0);
}

#[test]
fn idle_buffers_past_the_limits_are_given_back() {
    let t = TestNamespace::new("pool-limits");
    let limits = PoolLimits {
        max_idle_buffers: 1,
        max_idle_bytes: 1 << 20,
        idle_timeout: Duration::from_secs(3600),
    };
    let pool = pool(&t, limits);
    let a = pool.get(4096).unwrap();
    let b = pool.get(4096).unwrap();
    let c = pool.get(8192).unwrap();
    drop((a, b, c));
    assert_eq!(pool.trim().unwrap(), 2, "three idle, one kept");
    assert_eq!(t.names().len(), 1);
    let stats = pool.stats();
    assert_eq!((stats.idle, stats.given_back), (1, 2));
    let big = pool.get(2 << 20).unwrap();
    drop(big);
    // Two idle (one too many), and 2 MiB alone exceeds max_idle_bytes: both go.
    assert_eq!(pool.trim().unwrap(), 2);
    assert_eq!(pool.stats().idle_bytes, 0);
    assert!(t.names().is_empty());
}

#[test]
fn an_idle_timeout_gives_everything_back() {
    let t = TestNamespace::new("pool-idle");
    let limits = PoolLimits {
        idle_timeout: Duration::ZERO,
        ..PoolLimits::default()
    };
    let pool = pool(&t, limits);
    drop(pool.get(64).unwrap());
    assert_eq!(pool.trim().unwrap(), 1);
    assert!(t.names().is_empty());
}

#[test]
fn a_file_descriptor_pool_is_refused() {
    let options = CreateOptions::new().strategy(Strategy::FileDescriptor);
    match ShmPool::new(options, PoolLimits::default()) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("file_system")),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
