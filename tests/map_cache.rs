//! The mapping cache of pooled segments (`src/buf/map_cache.rs`): a consumer that let
//! go of a pooled segment attaches its next use through the cached mapping (no
//! `mmap`); a handle of an earlier use is still `Stale` through it and drops the entry;
//! a segment given back (or unlinked and replaced) is not reused; the bounds evict; the
//! environment knob turns it off and a bad value is named; a forked child never uses
//! its parent's entries, nor inherits their mappings (and forgetting them unmaps none of
//! its own); a dead file_descriptor pool's mappings are dropped. Most run on the simulated kernel (one cache per simulated
//! process); the knob and the fork run for real, in a copy of this test binary that
//! runs that one test alone (no other thread that could hold a lock across the fork),
//! under a time limit.
//!
//! The same paths are explored by the model-based harness ([`stale_cached_mapping`]:
//! the oracle's sequence of a recycle, then an attach through a stale cached entry),
//! and the plant `map_cache_skips_generation` (`.ci/planted-bugs`) fails this file.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::buf::map_cache::{self, MapCacheLimits, MapCacheStats};
use shmrc::checkers::handle::ShareHandleExt;
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::pool::ShmPoolExt;
use shmrc::manager::DefaultOs;
use shmrc::{
    CreateOptions, Error, Namespace, PoolLimits, ShareHandle, ShmBuf, ShmPool, Strategy, transport,
};
use shmrc_model::oracle::{Op, PROCESSES, Strategy as Sharing};
use shmrc_testkit::model_harness::Harness;
use shmrc_testkit::process::{fork_and_wait, output_within};

const UID: u32 = 1000;
const LEN: usize = 4096;
const STRATEGIES: [Strategy; 2] = [Strategy::FileSystem, Strategy::FileDescriptor];

fn options(strategy: Strategy) -> CreateOptions {
    CreateOptions::new()
        .strategy(strategy)
        .namespace(Namespace::new("shmrc-mapcache").unwrap())
}

/// A pool whose first `warm` buffers have been used once, so that its next `get`s
/// recycle them (generation 1): a named segment is known to be a pool's, and cached,
/// only from its first recycle on.
fn pool(os: &SimOs, strategy: Strategy, limits: PoolLimits) -> ShmPool<SimOs> {
    warm_pool(os, strategy, limits, 1)
}

fn warm_pool(os: &SimOs, strategy: Strategy, limits: PoolLimits, warm: usize) -> ShmPool<SimOs> {
    let pool = ShmPool::with_os(os.clone(), options(strategy), limits).unwrap();
    let first: Vec<_> = (0..warm).map(|_| pool.get(LEN).unwrap()).collect();
    drop(first);
    pool
}

/// `handle`, sent by `from` to `to` over a simulated Unix stream.
fn pass(
    kernel: &SimKernel,
    from: &SimOs,
    to: &SimOs,
    handle: ShareHandle<SimOs>,
) -> ShareHandle<SimOs> {
    let (tx, rx) = kernel.stream_pair(from, to);
    shmrc::checkers::transport::send_with(from, &tx, b"", vec![handle]).unwrap();
    shmrc::checkers::transport::recv_with(to, &rx)
        .unwrap()
        .handles
        .pop()
        .unwrap()
}

fn read(buf: &ShmBuf<SimOs>) -> [u8; 8] {
    let mut out = [0; 8];
    buf.read_at(0, &mut out).unwrap();
    out
}

fn stats(os: &SimOs) -> MapCacheStats {
    map_cache::stats(os)
}

#[test]
fn a_released_pooled_mapping_is_taken_back_by_the_next_attach() {
    for strategy in STRATEGIES {
        let kernel = SimKernel::new(1);
        let (producer, consumer) = (kernel.spawn(UID), kernel.spawn(UID));
        let pool = pool(&producer, strategy, PoolLimits::default());
        let first = pool.get(LEN).unwrap();
        first.write_at(0, b"use 0..\n").unwrap();
        let attached =
            ShmBuf::attach(pass(&kernel, &producer, &consumer, first.share().unwrap())).unwrap();
        assert_eq!(read(&attached), *b"use 0..\n");
        assert_eq!((stats(&consumer).hits, stats(&consumer).misses), (0, 1));
        let key = attached.key();
        drop(attached);
        let kept = stats(&consumer);
        assert_eq!(
            (kept.entries, kept.bytes >= LEN),
            (1, true),
            "{strategy}: kept"
        );
        drop(first);
        let second = pool.get(LEN).unwrap();
        assert_eq!((second.key(), second.generation()), (key, 2), "{strategy}");
        second.write_at(0, b"use 1..\n").unwrap();
        let again =
            ShmBuf::attach(pass(&kernel, &producer, &consumer, second.share().unwrap())).unwrap();
        let taken = stats(&consumer);
        assert_eq!(
            (taken.hits, taken.misses, taken.entries),
            (1, 1, 0),
            "{strategy}"
        );
        assert_eq!(again.generation(), 2, "{strategy}");
        assert_eq!(
            read(&again),
            *b"use 1..\n",
            "{strategy}: the new use's data"
        );
        assert!(
            again.is_held(),
            "{strategy}: the consumer holds a slot of its own"
        );
    }
}

/// Process 0 is the pool; process 3 attaches a handle of an earlier use that process 2 sent
/// before it died, after process 3 let go of the same segment (its mapping cached)
/// and the pool recycled it: `Stale`, through the cache as without it.
fn stale_through_the_cache(strategy: Strategy) {
    let kernel = SimKernel::new(1);
    let producer = kernel.spawn(UID);
    let (relay, consumer) = (kernel.spawn(UID), kernel.spawn(UID));
    let pool = pool(&producer, strategy, PoolLimits::default());
    let buf = pool.get(LEN).unwrap();
    buf.write_at(0, b"use 0..\n").unwrap();
    let at_relay = ShmBuf::attach(pass(&kernel, &producer, &relay, buf.share().unwrap())).unwrap();
    let stale = pass(&kernel, &relay, &consumer, at_relay.share().unwrap());
    let fresh = ShmBuf::attach(pass(&kernel, &producer, &consumer, buf.share().unwrap())).unwrap();
    drop(fresh);
    assert_eq!(stats(&consumer).entries, 1, "{strategy}: kept");
    // The relay dies holding its slot and its handle's in-flight reference; the pool's
    // next get reclaims both and recycles.
    kernel.kill(relay.pid());
    drop(at_relay); // releases nothing: its process is dead
    drop(buf);
    let next = pool.get(LEN).unwrap();
    assert_eq!(next.generation(), 2, "{strategy}: recycled");
    next.write_at(0, b"use 2..\n").unwrap();
    let attached = ShmBuf::attach(stale);
    assert!(
        matches!(
            attached,
            Err(Error::Stale {
                handle: 1,
                segment_generation: 2,
                ..
            })
        ),
        "{strategy}: a handle of use 1 through a cached mapping: {attached:?}"
    );
    let after = stats(&consumer);
    assert_eq!(
        (after.hits, after.entries),
        (1, 0),
        "{strategy}: taken, then dropped"
    );
    let census = next.census().unwrap();
    assert_eq!(
        (census.live, census.in_flight),
        (1, 0),
        "{strategy}: the pool's slot alone"
    );
    // The next use attaches afresh, and is right.
    let current =
        ShmBuf::attach(pass(&kernel, &producer, &consumer, next.share().unwrap())).unwrap();
    assert_eq!(read(&current), *b"use 2..\n", "{strategy}");
    assert_eq!(
        stats(&consumer).misses,
        2,
        "{strategy}: the entry went with the stale attach"
    );
}

#[test]
fn a_handle_of_an_earlier_use_is_stale_through_a_cached_mapping() {
    for strategy in STRATEGIES {
        stale_through_the_cache(strategy);
    }
}

#[test]
fn a_copy_of_an_old_handles_bytes_is_stale_through_a_cached_mapping() {
    let kernel = SimKernel::new(1);
    let (producer, consumer) = (kernel.spawn(UID), kernel.spawn(UID));
    let pool = pool(&producer, Strategy::FileSystem, PoolLimits::default());
    let buf = pool.get(LEN).unwrap();
    let bytes = buf.share().unwrap().into_bytes().unwrap();
    drop(ShmBuf::attach(ShareHandle::from_bytes_with(&consumer, &bytes).unwrap()).unwrap());
    drop(buf);
    let next = pool.get(LEN).unwrap();
    assert_eq!(next.generation(), 2);
    let old = ShareHandle::from_bytes_with(&consumer, &bytes).unwrap();
    assert!(matches!(ShmBuf::attach(old), Err(Error::Stale { .. })));
    assert_eq!((stats(&consumer).hits, stats(&consumer).entries), (1, 0));
}

#[test]
fn a_plain_segment_and_a_pools_first_named_use_are_not_cached() {
    let kernel = SimKernel::new(1);
    let (producer, consumer) = (kernel.spawn(UID), kernel.spawn(UID));
    let plain = ShmBuf::create_with(&producer, LEN, &options(Strategy::FileSystem)).unwrap();
    drop(ShmBuf::attach(pass(&kernel, &producer, &consumer, plain.share().unwrap())).unwrap());
    let fresh = ShmPool::with_os(
        producer.clone(),
        options(Strategy::FileSystem),
        PoolLimits::default(),
    )
    .unwrap();
    let first = fresh.get(LEN).unwrap();
    drop(ShmBuf::attach(pass(&kernel, &producer, &consumer, first.share().unwrap())).unwrap());
    assert_eq!(
        stats(&consumer).entries,
        0,
        "generation 0: not known to be a pool's"
    );
    drop((plain, first, fresh));
    assert_eq!(
        kernel.objects_alive(),
        0,
        "released by all: its memory is gone at once"
    );
}

#[test]
fn a_segment_given_back_or_replaced_is_not_reused() {
    for strategy in STRATEGIES {
        let kernel = SimKernel::new(1);
        let (producer, consumer) = (kernel.spawn(UID), kernel.spawn(UID));
        let pool = pool(&producer, strategy, PoolLimits::default());
        let buf = pool.get(LEN).unwrap();
        let name = buf.name().map(str::to_owned);
        drop(ShmBuf::attach(pass(&kernel, &producer, &consumer, buf.share().unwrap())).unwrap());
        assert_eq!(stats(&consumer).entries, 1, "{strategy}");
        drop(buf);
        // Given back: unlinked (file_system) or its slot vacated (file_descriptor).
        drop(pool);
        // A new segment (for file_system the old name is gone, so a new one under any
        // name is another file): attached afresh, and the given-back entry dropped on
        // the way, not kept mapped.
        let pool = self::pool(&producer, strategy, PoolLimits::default());
        let other = pool.get(LEN).unwrap();
        if let (Some(old), Some(new)) = (&name, other.name()) {
            assert_ne!(old, new, "a new segment has a new name (a new nonce)");
        }
        let attached =
            ShmBuf::attach(pass(&kernel, &producer, &consumer, other.share().unwrap())).unwrap();
        let after = stats(&consumer);
        assert_eq!((after.hits, after.misses), (0, 2), "{strategy}: {after:?}");
        assert_eq!(
            (after.entries, after.evicted),
            (0, 1),
            "{strategy}: {after:?}"
        );
        drop(attached);
    }
}

#[test]
fn a_name_unlinked_and_created_again_is_another_segment() {
    // The file behind a cached name replaced by another with the same header (same
    // key and share key: a copy of the file): a handle of the segment the consumer let
    // go of hits the cached mapping of the *old* file, which its holders still share.
    // One of the new file goes to that file, not to the cached mapping.
    let kernel = SimKernel::new(1);
    let (producer, consumer) = (kernel.spawn(UID), kernel.spawn(UID));
    let pool = pool(&producer, Strategy::FileSystem, PoolLimits::default());
    let buf = pool.get(LEN).unwrap();
    buf.write_at(0, b"old file").unwrap();
    let name = buf.name().unwrap().to_owned();
    drop(ShmBuf::attach(pass(&kernel, &producer, &consumer, buf.share().unwrap())).unwrap());
    let bytes = buf.share().unwrap().into_bytes().unwrap();
    // Replace the name with a copy of the file (the attack a listing of /dev/shm
    // allows), holding no slot: a fresh open would find its header whole.
    let opened = producer.shm_open(&name).unwrap();
    let file_len = producer.stat(&opened).unwrap().len as usize;
    drop(opened);
    let contents = kernel.peek(&name, 0, file_len).unwrap();
    producer.shm_unlink(&name).unwrap();
    let copy = producer.shm_create(&name).unwrap();
    producer.allocate(&copy, file_len as u64).unwrap();
    assert!(kernel.poke(&name, 0, &contents));
    let attached = ShmBuf::attach(ShareHandle::from_bytes_with(&consumer, &bytes).unwrap());
    let attached = attached.unwrap();
    assert_eq!(
        stats(&consumer).hits,
        1,
        "the cached mapping: the segment the handle is of"
    );
    buf.write_at(0, b"old+new!").unwrap();
    assert_eq!(
        read(&attached),
        *b"old+new!",
        "the producer's file, not the copy"
    );
    drop(attached);
    drop(buf);
    drop(pool);
    // The old segment's finalize unlinked the name (the copy's, by then: what a
    // finalize of a replaced name does, with or without the cache).
    assert!(kernel.names().is_empty(), "{:?}", kernel.names());
    drop(copy);
    // The consumer's cached mapping of the destroyed segment is its last user: the
    // next look at the cache drops it.
    assert_eq!(kernel.objects_alive(), 1);
    assert_eq!(map_cache::trim(&consumer), 1);
    assert_eq!(kernel.objects_alive(), 0, "nothing left");
}

#[test]
fn the_bounds_evict_the_entry_let_go_of_longest_ago() {
    for strategy in STRATEGIES {
        let kernel = SimKernel::new(1);
        let (producer, consumer) = (kernel.spawn(UID), kernel.spawn(UID));
        let limits = MapCacheLimits {
            max_entries: 2,
            max_bytes: usize::MAX,
        };
        map_cache::configure(&consumer, limits);
        let pool = warm_pool(&producer, strategy, PoolLimits::default(), 3);
        let bufs: Vec<_> = (0..3).map(|_| pool.get(LEN).unwrap()).collect();
        for buf in &bufs {
            drop(
                ShmBuf::attach(pass(&kernel, &producer, &consumer, buf.share().unwrap())).unwrap(),
            );
        }
        let s = stats(&consumer);
        assert_eq!((s.entries, s.evicted), (2, 1), "{strategy}: {s:?}");
        // The first one let go of was evicted: its next attach maps afresh; the third's
        // is a hit.
        let first = ShmBuf::attach(pass(
            &kernel,
            &producer,
            &consumer,
            bufs[0].share().unwrap(),
        ));
        let third = ShmBuf::attach(pass(
            &kernel,
            &producer,
            &consumer,
            bufs[2].share().unwrap(),
        ));
        let s = stats(&consumer);
        assert_eq!((s.hits, s.misses), (1, 4), "{strategy}: {s:?}");
        drop((first.unwrap(), third.unwrap()));
        // A byte bound below two segments keeps one.
        let one = map_cache::stats(&consumer).bytes / 2;
        map_cache::configure(
            &consumer,
            MapCacheLimits {
                max_entries: 64,
                max_bytes: one + one / 2,
            },
        );
        for buf in &bufs {
            drop(
                ShmBuf::attach(pass(&kernel, &producer, &consumer, buf.share().unwrap())).unwrap(),
            );
        }
        let s = stats(&consumer);
        assert_eq!(s.entries, 1, "{strategy}: {s:?}");
        assert!(s.bytes <= one + one / 2, "{strategy}: {s:?}");
        // Off: nothing kept.
        map_cache::configure(
            &consumer,
            MapCacheLimits {
                max_entries: 0,
                max_bytes: usize::MAX,
            },
        );
        drop(
            ShmBuf::attach(pass(
                &kernel,
                &producer,
                &consumer,
                bufs[1].share().unwrap(),
            ))
            .unwrap(),
        );
        assert_eq!(stats(&consumer).entries, 0, "{strategy}");
    }
}

/// The model-based harness (the oracle of `shmrc-model` beside the real protocol on
/// the simulated kernel): process 3 lets go of the segment (its mapping cached),
/// process 2 sends it a handle and dies, the pool recycles the segment, then process 3
/// attaches that handle of the earlier use. The oracle says `Stale`; the cache must
/// agree. (file_system only: the model's file_descriptor segments are plain memfds,
/// without holder slots, which a recycle never reuses; the pool's memfds go through
/// the same path in [`a_handle_of_an_earlier_use_is_stale_through_a_cached_mapping`].)
#[test]
fn stale_cached_mapping() {
    {
        let strategy = Sharing::FileSystem;
        let ops = vec![
            Op::Create {
                p: 0,
                capacity: 2, // 3 slots: the pool, process 2, one more
                crash_at: None,
            },
            // Recycled once: from now on known to be a pool's, so cached.
            Op::Recycle {
                p: 0,
                buf: 0,
                crash_at: None,
            },
            share(0, 2),
            attach(0),
            share(0, 3),
            attach(0),
            Op::Release {
                p: 3,
                buf: 0,
                crash_at: None,
            },
            share(2, 3),
            Op::Kill { p: 2 },
            Op::Recycle {
                p: 0,
                buf: 0,
                crash_at: None,
            },
            attach(0),
        ];
        let mut harness = Harness::with_strategies(0, &[strategy; PROCESSES]);
        for op in &ops {
            if let Err(failure) = harness.run(op) {
                panic!("{strategy:?}: {failure}");
            }
        }
        assert_eq!(harness.applied(), ops.len(), "{strategy:?}: every op ran");
        for reached in ["Recycle Recycled", "Attach Stale"] {
            assert!(
                harness.tally().contains_key(reached),
                "{strategy:?} no longer reaches {reached}: {:?}",
                harness.tally()
            );
        }
        if let Err(failure) = harness.finish() {
            panic!("{strategy:?}: {failure}");
        }
    }
}

fn share(p: u8, to: u8) -> Op {
    Op::Share {
        p,
        buf: 0,
        to,
        as_bytes: false,
        crash_at: None,
    }
}

fn attach(handle: u8) -> Op {
    Op::Attach {
        handle,
        crash_at: None,
    }
}

// ---- The real kernel, in a copy of this binary running one test alone. ----

/// Set in the copy: which role [`in_a_copy`] runs.
const ROLE: &str = "SHMRC_MAP_CACHE_TEST_ROLE";
const COPY_LIMIT: Duration = Duration::from_secs(60);

/// Runs test `name` of this binary alone in a copy with `env` set, and asserts it
/// passed.
fn in_a_copy(name: &str, env: &[(&str, &str)]) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", name, "--test-threads=1", "--nocapture"]);
    command.env(ROLE, name);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = output_within(&mut command, COPY_LIMIT);
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{name} in a copy failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "{name} did not run in the copy:\n{text}"
    );
}

fn in_the_copy(name: &str) -> bool {
    std::env::var(ROLE).is_ok_and(|role| role == name)
}

/// A producer process (forked): a file_descriptor pool that, at each byte it reads,
/// sends the next use of its one buffer, its generation in its first byte.
fn start_producer() -> (UnixStream, nix::unistd::Pid) {
    let (here, there) = UnixStream::pair().unwrap();
    // SAFETY: this copy runs one test, on one thread: no lock is held across the fork;
    // the child only runs the loop below and `_exit`s.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        nix::unistd::ForkResult::Child => {
            drop(here);
            let code = produce(&there);
            // SAFETY: ends the child at once, running none of the harness's cleanup.
            unsafe { nix::libc::_exit(code) }
        }
        nix::unistd::ForkResult::Parent { child } => (here, child),
    }
}

fn produce(stream: &UnixStream) -> i32 {
    let options = CreateOptions::new().strategy(Strategy::FileDescriptor);
    let Ok(pool) = ShmPool::new(options, PoolLimits::default()) else {
        return 3;
    };
    let mut request = [0u8; 1];
    while (&*stream).read_exact(&mut request).is_ok() && request[0] == b'n' {
        let Ok(buf) = pool.get(LEN) else { return 4 };
        let generation = buf.generation() as u8;
        if buf.write_at(0, &[generation]).is_err() {
            return 5;
        }
        let Ok(handle) = buf.share() else { return 6 };
        if transport::send(stream, b"", vec![handle]).is_err() {
            return 7;
        }
    }
    0
}

/// Asks the producer for its next buffer, attaches it and checks its generation byte.
fn next_buffer(stream: &UnixStream) -> ShmBuf {
    (&*stream).write_all(b"n").unwrap();
    let handle = transport::recv(stream).unwrap().handles.pop().unwrap();
    let buf = ShmBuf::attach(handle).unwrap();
    let mut first = [0u8; 1];
    buf.read_at(0, &mut first).unwrap();
    assert_eq!(u64::from(first[0]), buf.generation(), "the use's own data");
    buf
}

fn stop_producer(stream: UnixStream, producer: nix::unistd::Pid) {
    (&stream).write_all(b"q").unwrap();
    drop(stream);
    let status = nix::sys::wait::waitpid(producer, None).unwrap();
    assert_eq!(status, nix::sys::wait::WaitStatus::Exited(producer, 0));
}

#[test]
fn a_forked_child_never_uses_its_parents_cached_mappings() {
    const NAME: &str = "a_forked_child_never_uses_its_parents_cached_mappings";
    if !in_the_copy(NAME) {
        return in_a_copy(NAME, &[]);
    }
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let os = DefaultOs::default();
    let (stream, producer) = start_producer();
    drop(next_buffer(&stream));
    let parent = map_cache::stats(&os);
    assert_eq!((parent.entries, parent.hits, parent.misses), (1, 0, 1));
    // SAFETY: one test on one thread (above); the child runs the closure and `_exit`s.
    let status = unsafe {
        fork_and_wait(COPY_LIMIT, || {
            let inherited = map_cache::stats(&os);
            let buf = next_buffer(&stream);
            let child = map_cache::stats(&os);
            let ok = inherited.entries == 1
                && buf.generation() == 1
                && child.hits == inherited.hits
                && child.misses == inherited.misses + 1
                && child.entries == 0;
            drop(buf);
            let kept = map_cache::stats(&os).entries == 1;
            if ok && kept { 0 } else { 1 }
        })
    };
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Exited(status.pid().unwrap(), 0)
    );
    // The parent's entry is still its own: its next attach is a hit.
    let buf = next_buffer(&stream);
    assert_eq!(buf.generation(), 2);
    let after = map_cache::stats(&os);
    assert_eq!((after.hits, after.entries), (1, 0), "{after:?}");
    drop(buf);
    stop_producer(stream, producer);
}

#[test]
fn the_environment_turns_the_cache_off_and_a_bad_value_is_named() {
    const NAME: &str = "the_environment_turns_the_cache_off_and_a_bad_value_is_named";
    match std::env::var(ROLE) {
        Ok(role) if role == NAME => {}
        _ => {
            in_a_copy(NAME, &[("SHMRC_MAP_CACHE", "off")]);
            in_a_copy(NAME, &[("SHMRC_MAP_CACHE", "lots")]);
            return in_a_copy(NAME, &[("SHMRC_MAP_CACHE", "1")]);
        }
    }
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let os = DefaultOs::default();
    let value = std::env::var("SHMRC_MAP_CACHE").unwrap();
    let (stream, producer) = start_producer();
    if value == "lots" {
        (&stream).write_all(b"n").unwrap();
        let handle = transport::recv(&stream).unwrap().handles.pop().unwrap();
        let refused = ShmBuf::attach(handle);
        assert!(
            matches!(&refused, Err(Error::InvalidArgument(why)) if why.contains("SHMRC_MAP_CACHE=\"lots\"")),
            "{refused:?}"
        );
    } else {
        drop(next_buffer(&stream));
        drop(next_buffer(&stream));
        let s = map_cache::stats(&os);
        match value.as_str() {
            "off" => assert_eq!((s.entries, s.hits), (0, 0), "{s:?}"),
            _ => assert_eq!((s.entries, s.hits), (1, 1), "{s:?}"),
        }
    }
    stop_producer(stream, producer);
}

/// The `/proc/self/maps` lines of memfd mappings (a pool's memfds; the consumer maps
/// no other).
fn memfd_mappings() -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|line| line.contains("/memfd:"))
        .map(str::to_owned)
        .collect()
}

/// A file_descriptor pool's process SIGKILLed: slot 0 of its memfds keeps its dead
/// token for ever (nothing finalizes a memfd), and the consumer's next look at the
/// cache drops the mapping, so the memfd's pages are freed as they were without it.
#[test]
fn a_dead_pools_cached_mappings_are_dropped() {
    const NAME: &str = "a_dead_pools_cached_mappings_are_dropped";
    if !in_the_copy(NAME) {
        return in_a_copy(NAME, &[]);
    }
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let os = DefaultOs::default();
    let (stream, producer) = start_producer();
    drop(next_buffer(&stream));
    assert_eq!(map_cache::stats(&os).entries, 1);
    assert_eq!(memfd_mappings().len(), 1, "{:?}", memfd_mappings());
    assert_eq!(map_cache::trim(&os), 0, "the pool lives: kept");
    nix::sys::signal::kill(producer, nix::sys::signal::Signal::SIGKILL).unwrap();
    let status = nix::sys::wait::waitpid(producer, None).unwrap();
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Signaled(producer, nix::sys::signal::Signal::SIGKILL, false)
    );
    drop(stream);
    assert_eq!(map_cache::trim(&os), 1, "the dead pool's mapping dropped");
    let s = map_cache::stats(&os);
    assert_eq!((s.entries, s.bytes, s.evicted), (0, 0, 1), "{s:?}");
    assert_eq!(memfd_mappings(), Vec::<String>::new(), "unmapped");
}

/// A child forked while the cache holds a mapping does not inherit it (no
/// copy-on-write copy pinned for the child's life, whether or not it ever attaches),
/// and forgetting the parent's entry unmaps nothing of the child's own (a page it mapped
/// at the same address); a mapping taken back out of the cache is inherited again, as
/// every attached one is.
#[test]
fn a_forked_child_maps_none_of_its_parents_cached_mappings() {
    const NAME: &str = "a_forked_child_maps_none_of_its_parents_cached_mappings";
    if !in_the_copy(NAME) {
        return in_a_copy(NAME, &[]);
    }
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let os = DefaultOs::default();
    let (stream, producer) = start_producer();
    drop(next_buffer(&stream));
    assert_eq!(map_cache::stats(&os).entries, 1);
    let cached = memfd_mappings();
    assert_eq!(cached.len(), 1, "{cached:?}");
    let start = cached[0].split('-').next().unwrap().to_owned();
    // SAFETY: one test on one thread (above); the child runs the closure and `_exit`s.
    let status = unsafe { fork_and_wait(COPY_LIMIT, || child_of_a_cached_mapping(&os, &start)) };
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Exited(status.pid().unwrap(), 0)
    );
    let buf = next_buffer(&stream);
    assert_eq!(map_cache::stats(&os).hits, 1, "taken from the cache");
    // SAFETY: as above.
    let status = unsafe {
        fork_and_wait(COPY_LIMIT, || {
            let mut first = [0u8; 1];
            let read = buf.read_at(0, &mut first).is_ok();
            i32::from(!(read && u64::from(first[0]) == buf.generation()))
        })
    };
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Exited(status.pid().unwrap(), 0),
        "a child reads its parent's attached (once cached) buffer"
    );
    drop(buf);
    stop_producer(stream, producer);
}

/// The forked child of [`a_forked_child_maps_none_of_its_parents_cached_mappings`],
/// whose parent's cached mapping began at `start` (hex): its exit code.
fn child_of_a_cached_mapping(os: &DefaultOs, start: &str) -> i32 {
    let inherited = memfd_mappings();
    if !inherited.is_empty() {
        eprintln!("the child maps its parent's cached mappings: {inherited:?}");
        return 1;
    }
    // A mapping of the child's own where the parent's cached one is: dropping
    // the parent's entry must not unmap it.
    let at = std::num::NonZeroUsize::new(usize::from_str_radix(start, 16).unwrap());
    let page = std::num::NonZeroUsize::new(4096).unwrap();
    use nix::sys::mman::{MapFlags, ProtFlags};
    // SAFETY: a fresh private anonymous page, at an address this child maps
    // nothing at (`MAP_FIXED_NOREPLACE` refuses it otherwise); left to `_exit`.
    let placed = unsafe {
        nix::sys::mman::mmap_anonymous(
            at,
            page,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED_NOREPLACE,
        )
    };
    if placed.is_err() {
        eprintln!("could not map at {start}: {placed:?}");
        return 2;
    }
    let forgotten = map_cache::trim(os);
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    if forgotten != 1
        || !maps
            .lines()
            .any(|line| line.starts_with(&format!("{start}-")))
    {
        eprintln!("trim: {forgotten}; the child's page at {start} unmapped:\n{maps}");
        return 3;
    }
    0
}
