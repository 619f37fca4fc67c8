//! `ShmPool` on the real kernel: a released buffer's segment is reused with a new
//! generation, a handle of an earlier use fails with `Error::Stale` and reads nothing,
//! a segment still held (by a handle in flight, or by a consumer process: lent) is not
//! reused, and lent buffers do not count against the idle limits, the one handed out
//! longest ago is reused first, and the limits and the idle timeout give memory back
//! (file_descriptor pools: `tests/pool_fd.rs`). The consumer is a copy of this test binary
//! ([`consumer_role`]), spawned (not forked: other tests run on threads beside it),
//! run under a time limit and killed by its pid past it.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::time::Duration;

use shmrc::{CreateOptions, Error, PoolLimits, ShareHandle, ShmBuf, ShmPool, Strategy};
use shmrc_testkit::data::{hex, unhex};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{Talker, test_role};

/// How long a consumer may take to answer, and to exit once told to.
const CONSUMER_LIMIT: Duration = Duration::from_secs(30);

/// The environment variable that makes [`consumer_role`] a consumer: the handles it
/// attaches, as hex, separated by commas.
const CONSUMER_HANDLES: &str = "SHMRC_POOL_TEST_CONSUMER_HANDLES";

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

/// A consumer process further down a pipeline: it attaches buffers shared with it, then
/// lets go of them one at a time when told to (each line on its stdin), and of the rest
/// when its stdin closes. Killed by its pid if the test ends first.
struct Consumer(Talker);

impl Consumer {
    /// Starts one that attaches `handles` (in their order) and waits until it has.
    fn start(handles: Vec<ShareHandle>) -> Consumer {
        let handles: Vec<String> = handles
            .into_iter()
            .map(|h| hex(&h.into_bytes().unwrap()))
            .collect();
        let talker = Talker::start(
            test_role("consumer_role").env(CONSUMER_HANDLES, handles.join(",")),
            CONSUMER_LIMIT,
        );
        talker.expect("attached");
        Consumer(talker)
    }

    /// Lets go of the first buffer it still holds, and waits until it has.
    fn let_go_of_one(&mut self) {
        self.0.ask("let go");
    }

    /// Lets go of every buffer it still holds and exits (reaped, within the limit).
    fn let_go_of_all(self) {
        self.0.finish();
    }

    /// SIGKILLs it (by its pid) while it holds what it holds.
    fn kill(self) {
        self.0.kill();
    }
}

/// The role a copy of this binary plays for [`Consumer`]. Not a test of its own:
/// without [`CONSUMER_HANDLES`] it returns at once.
#[test]
fn consumer_role() {
    let Ok(handles) = std::env::var(CONSUMER_HANDLES) else {
        return;
    };
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let mut held: Vec<ShmBuf> = handles
        .split(',')
        .map(|h| ShmBuf::attach(ShareHandle::from_bytes(&unhex(h)).unwrap()).unwrap())
        .collect();
    println!("attached");
    let mut line = String::new();
    while !held.is_empty() && std::io::stdin().read_line(&mut line).unwrap_or(0) > 0 {
        drop(held.remove(0));
        println!("let go");
    }
}

#[test]
fn a_buffer_another_process_holds_is_lent_not_counted_as_idle_nor_reused_until_it_lets_go() {
    let t = TestNamespace::new("pool-lent");
    let limits = PoolLimits {
        max_idle_buffers: 1,
        max_idle_bytes: 1 << 30,
        idle_timeout: Duration::from_secs(3600),
    };
    let pool = pool(&t, limits);
    let (a, b) = (pool.get(4096).unwrap(), pool.get(4096).unwrap());
    let (name_a, name_b) = (a.name().unwrap().to_owned(), b.name().unwrap().to_owned());
    let mut consumer = Consumer::start(vec![a.share().unwrap(), b.share().unwrap()]);
    let census = a.census().unwrap();
    assert_eq!(
        (census.live, census.in_flight),
        (2, 0),
        "the consumer holds it"
    );
    drop((a, b));
    let stats = pool.stats();
    assert_eq!(
        (stats.lent, stats.idle, stats.in_use),
        (2, 0, 0),
        "{stats:?}"
    );
    assert_eq!(
        pool.trim().unwrap(),
        0,
        "two lent, a limit of one idle: the limits bound idle buffers only"
    );
    let c = pool.get(4096).unwrap();
    assert!(
        c.name() != Some(name_a.as_str()) && c.name() != Some(name_b.as_str()),
        "both are lent: a new segment"
    );
    assert_eq!((pool.stats().created, pool.stats().recycled), (3, 0));

    // The consumer lets go of `a`: idle, and reused by the next get.
    consumer.let_go_of_one();
    let stats = pool.stats();
    assert_eq!(
        (stats.lent, stats.idle, stats.in_use),
        (1, 1, 1),
        "{stats:?}"
    );
    let again = pool.get(4096).unwrap();
    assert_eq!(again.name(), Some(name_a.as_str()));
    assert_eq!(again.generation(), 1);

    // And of `b`: three idle, one kept (the one handed out last: `a`, reused).
    consumer.let_go_of_all();
    drop((c, again));
    let stats = pool.stats();
    assert_eq!((stats.lent, stats.idle, stats.idle_bytes), (0, 3, 3 * 4096));
    assert_eq!(pool.trim().unwrap(), 2);
    assert_eq!(t.names(), vec![name_a]);
    drop(pool);
    assert!(t.names().is_empty(), "the pool's drop unlinks what it kept");
}

#[test]
fn a_lent_buffer_past_the_idle_timeout_is_given_back_and_its_holder_keeps_it() {
    let t = TestNamespace::new("pool-lent-timeout");
    let limits = PoolLimits {
        idle_timeout: Duration::ZERO,
        ..PoolLimits::default()
    };
    let pool = pool(&t, limits);
    let buf = pool.get(64).unwrap();
    buf.write_at(0, b"kept").unwrap();
    let name = buf.name().unwrap().to_owned();
    let in_flight = buf.share().unwrap();
    drop(buf);
    assert_eq!(pool.stats().lent, 1);
    assert_eq!(pool.trim().unwrap(), 1, "lent past the timeout: given back");
    assert_eq!(t.names(), vec![name], "the handle still holds the segment");
    let attached = ShmBuf::attach(in_flight).unwrap();
    let mut out = [0u8; 4];
    attached.read_at(0, &mut out).unwrap();
    assert_eq!(&out, b"kept");
    drop(attached);
    assert!(t.names().is_empty(), "its last holder unlinked it");
}

#[test]
fn the_buffer_handed_out_longest_ago_is_reused_first() {
    let t = TestNamespace::new("pool-order");
    let pool = pool(&t, PoolLimits::default());
    let (a, b) = (pool.get(64).unwrap(), pool.get(64).unwrap());
    let (name_a, name_b) = (a.name().unwrap().to_owned(), b.name().unwrap().to_owned());
    drop(b);
    drop(a); // let go of last, handed out first
    let first = pool.get(64).unwrap();
    assert_eq!(first.name(), Some(name_a.as_str()), "handed out first");
    drop(first);
    let second = pool.get(64).unwrap();
    assert_eq!(
        second.name(),
        Some(name_b.as_str()),
        "`a` was handed out again since: `b` has waited longest"
    );
    drop(second);
    assert_eq!(pool.get(64).unwrap().name(), Some(name_a.as_str()));
}

#[test]
fn a_consumer_killed_while_holding_a_buffer_leaves_a_slot_the_next_get_reclaims() {
    let t = TestNamespace::new("pool-killed");
    let pool = pool(&t, PoolLimits::default());
    let buf = pool.get(4096).unwrap();
    let name = buf.name().unwrap().to_owned();
    let consumer = Consumer::start(vec![buf.share().unwrap()]);
    drop(buf);
    consumer.kill();
    // No manager and no sweep: the dead consumer's word is still in its slot.
    let stats = pool.stats();
    assert_eq!((stats.lent, stats.idle), (1, 0), "{stats:?}");
    // No idle buffer: `get` tries the lent one, finds its holder dead, reclaims its slot.
    let again = pool.get(4096).unwrap();
    assert_eq!(
        again.name(),
        Some(name.as_str()),
        "the dead consumer's segment, reused"
    );
    assert_eq!(again.generation(), 1);
    let census = again.census().unwrap();
    assert_eq!((census.live, census.dead), (1, 0), "{census:?}");
    drop((again, pool));
    assert!(t.names().is_empty(), "the pool's drop unlinks what it kept");
}
