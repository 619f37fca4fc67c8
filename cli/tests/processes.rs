//! Real processes on the real kernel: workers attach, write and verify; a holder is
//! SIGKILLed while others hold; a sweep reclaims its references; afterwards the test's
//! namespace in `/dev/shm` is empty.

mod common;

use common::start_workers;
use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::holders::Outcome;
use shmrc::{CreateOptions, ShmBuf, Strategy};
use shmrc_testkit::data::{fnv1a, pattern};
use shmrc_testkit::names::TestNamespace;

fn create(t: &TestNamespace, strategy: Strategy, len: usize, seed: u8) -> (ShmBuf, u64) {
    let buf = ShmBuf::with_options(
        len,
        &CreateOptions::new()
            .strategy(strategy)
            .namespace(t.ns.clone()),
    )
    .unwrap();
    let data = pattern(len, seed);
    buf.write_at(0, &data).unwrap();
    (buf, fnv1a(&data))
}

fn hold_command(sums: &[u64]) -> String {
    let sums: Vec<String> = sums.iter().map(u64::to_string).collect();
    format!("hold {}", sums.join(" "))
}

#[test]
fn killed_holder_is_reclaimed_by_sweep_while_others_keep_their_data() {
    let t = TestNamespace::new("killsweep");
    let bufs: Vec<_> = (0..3)
        .map(|i| create(&t, Strategy::FileSystem, 64 << 10, i))
        .collect();
    let sums: Vec<u64> = bufs.iter().map(|(_, s)| *s).collect();
    let mut workers = start_workers("killsweep", 3);
    for w in &workers {
        let handles = bufs.iter().map(|(b, _)| b.share().unwrap()).collect();
        assert_eq!(w.ask(&hold_command(&sums), handles), "held 3");
    }
    let census = bufs[0].0.census().unwrap();
    assert_eq!((census.live, census.dead, census.in_flight), (4, 0, 0));

    workers.remove(0).kill();
    assert_eq!(
        bufs[0].0.census().unwrap().dead,
        1,
        "the killed worker's slot is dead, not free"
    );

    let report = shmrc::sweep(&t.ns).unwrap();
    assert_eq!(report.reclaimed, 3, "one dead slot per buffer");
    assert_eq!(report.unlinked, 0, "others still hold every buffer");
    let census = bufs[0].0.census().unwrap();
    assert_eq!((census.live, census.dead), (3, 0));
    for w in &workers {
        assert_eq!(w.ask("verify", vec![]), "verified 3");
    }
    assert_eq!(t.names().len(), 3);

    for (buf, _) in bufs {
        assert_eq!(buf.release().unwrap().unwrap().outcome, Outcome::InUse);
    }
    let unlinked: u32 = workers
        .iter()
        .map(|w| {
            w.ask("release", vec![])
                .strip_prefix("released ")
                .unwrap()
                .parse::<u32>()
                .unwrap()
        })
        .sum();
    assert_eq!(unlinked, 3, "the last releaser of each buffer unlinks it");
    for w in workers {
        w.exit();
    }
    assert!(t.names().is_empty(), "left: {:?}", t.names());
}

#[test]
fn sweep_unlinks_what_only_dead_processes_held() {
    let t = TestNamespace::new("alldead");
    let (buf, sum) = create(&t, Strategy::FileSystem, 4096, 1);
    let mut workers = start_workers("alldead", 2);
    for w in &workers {
        assert_eq!(
            w.ask(&hold_command(&[sum]), vec![buf.share().unwrap()]),
            "held 1"
        );
    }
    assert_eq!(buf.release().unwrap().unwrap().outcome, Outcome::InUse);
    assert_eq!(t.names().len(), 1, "the workers keep it alive");
    while let Some(w) = workers.pop() {
        w.kill();
    }
    assert_eq!(
        t.names().len(),
        1,
        "SIGKILL alone leaks, as with torch's file_system strategy"
    );
    let report = shmrc::sweep(&t.ns).unwrap();
    assert_eq!((report.reclaimed, report.unlinked), (2, 1));
    assert!(t.names().is_empty());
}

#[test]
fn a_worker_writes_and_the_creator_reads_it() {
    for strategy in shmrc::all_sharing_strategies() {
        let t = TestNamespace::new("write");
        let (buf, sum) = create(&t, *strategy, 10_000, 3);
        let workers = start_workers("write", 1);
        assert_eq!(
            workers[0].ask(&hold_command(&[sum]), vec![buf.share().unwrap()]),
            "held 1"
        );
        assert_eq!(workers[0].ask("fill 0 171", vec![]), "filled");
        let mut data = vec![0u8; buf.len()];
        buf.read_at(0, &mut data).unwrap();
        assert!(
            data.iter().all(|b| *b == 171),
            "{strategy}: the worker's write is visible"
        );
        for w in workers {
            w.exit();
        }
        drop(buf);
        assert!(t.names().is_empty(), "{strategy}");
    }
}

#[test]
fn file_descriptor_buffers_outlive_a_killed_peer_and_leave_no_name() {
    let t = TestNamespace::new("fdkill");
    let bufs: Vec<_> = (0..300)
        .map(|i| create(&t, Strategy::FileDescriptor, 4096, i as u8))
        .collect();
    let sums: Vec<u64> = bufs.iter().map(|(_, s)| *s).collect();
    let mut workers = start_workers("fdkill", 2);
    for w in &workers {
        let handles = bufs.iter().map(|(b, _)| b.share().unwrap()).collect();
        assert_eq!(
            w.ask(&hold_command(&sums), handles),
            "held 300",
            "more fds than one SCM_RIGHTS message carries"
        );
    }
    workers.remove(0).kill();
    assert_eq!(workers[0].ask("verify", vec![]), "verified 300");
    drop(bufs);
    assert_eq!(
        workers[0].ask("verify", vec![]),
        "verified 300",
        "the creator's drop does not free a held memfd"
    );
    workers.pop().unwrap().exit();
    assert!(t.names().is_empty());
}

#[test]
fn an_in_flight_handle_keeps_the_segment_after_its_sender_releases() {
    let t = TestNamespace::new("inflight");
    let (buf, sum) = create(&t, Strategy::FileSystem, 4096, 9);
    let handle = buf.share().unwrap();
    assert_eq!(
        buf.release().unwrap().unwrap().outcome,
        Outcome::InUse,
        "the in-flight reference holds it"
    );
    assert_eq!(t.names().len(), 1);
    let workers = start_workers("inflight", 1);
    assert_eq!(
        workers[0].ask(&hold_command(&[sum]), vec![handle]),
        "held 1"
    );
    assert_eq!(
        workers[0].ask("release", vec![]),
        "released 1",
        "the receiver was the last holder"
    );
    workers.into_iter().for_each(common::Worker::exit);
    assert!(t.names().is_empty());
}

#[test]
fn an_unsent_handle_gives_its_reference_back_when_dropped() {
    let t = TestNamespace::new("unsent");
    let (buf, _) = create(&t, Strategy::FileSystem, 4096, 2);
    let handle = buf.share().unwrap();
    assert_eq!(buf.census().unwrap().in_flight, 1);
    drop(handle);
    assert_eq!(buf.census().unwrap().in_flight, 0);
    assert_eq!(buf.release().unwrap().unwrap().outcome, Outcome::Unlinked);
    assert!(t.names().is_empty());
}

#[test]
fn a_handle_as_bytes_attaches_once_per_process() {
    let t = TestNamespace::new("bytes");
    let (buf, _) = create(&t, Strategy::FileSystem, 4096, 4);
    let bytes = buf.share().unwrap().into_bytes().unwrap();
    let again = ShmBuf::attach(shmrc::ShareHandle::from_bytes(&bytes).unwrap()).unwrap();
    assert_eq!(again.key(), buf.key());
    let census = buf.census().unwrap();
    assert_eq!(
        (census.live, census.in_flight),
        (1, 0),
        "one slot per process; the in-flight one was given back"
    );
    drop(again);
    drop(buf);
    assert!(t.names().is_empty());
}
