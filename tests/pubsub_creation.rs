//! A publish/subscribe service's creation, killed at its window: a publisher makes
//! the service file whole under a temporary name (its token and a nonce in it), then
//! links it to the service's name (`service_segment.rs`). A child SIGKILLed between
//! the two steps (`Unlinked::prepare` done, `Unlinked::link` not) must leave no
//! half-created service: the service's name is free (a subscriber is told `Gone` at
//! once, a publisher creates it), and the sweep keeps the temporary file while its
//! creator lives and removes it once the creator is dead. Built with
//! `SHMRC_PLANT=service_named_before_published` (the name before the header, as
//! earlier builds made it), this test fails. On the simulated kernel, the same kill
//! (at `create`'s crash point) and the sweeps' removal of the temporary file, with its
//! unlink raced or refused. Each test has its own namespace, bounds
//! every wait, kills only the child it started (by pid), and leaves nothing in
//! `/dev/shm`.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::time::{Duration, Instant};

use shmrc::checkers::os::posix::PosixOs;
use shmrc::checkers::service_segment::{self, Config, Unlinked};
use shmrc::pubsub::{Publisher, PublisherOptions, Subscriber};
use shmrc::{Error, Namespace};
use shmrc_testkit::names::{TestNamespace, current_uid};
use shmrc_testkit::process::{Talker, test_role};

const LIMIT: Duration = Duration::from_secs(10);
const ROLE: &str = "SHMRC_TEST_PSCREATE_ROLE";
const PREFIX: &str = "SHMRC_TEST_PSCREATE_PREFIX";
const SERVICE: &str = "window";

/// The child (runs only when `SHMRC_TEST_PSCREATE_ROLE` is set): prepares the service
/// (whole, under its temporary name), says so with that name, and waits to be killed
/// before it links it.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "preparer");
    let ns = Namespace::new(std::env::var(PREFIX).unwrap()).unwrap();
    let name = service_segment::service_name(&ns, current_uid(), SERVICE).unwrap();
    let config = Config {
        entries: 2,
        capacity: 4,
        rows: 4,
        backpressure: false,
    };
    let unlinked = Unlinked::prepare(&PosixOs, &name, config).expect("prepare");
    println!("prepared {}", unlinked.temporary_name());
    std::thread::sleep(LIMIT * 3);
    // Never reached in the test: it is killed first.
    drop(unlinked.link(&PosixOs));
}

fn actions(report: &shmrc::SweepReport) -> Vec<(String, String)> {
    report
        .services
        .iter()
        .map(|s| (s.name.clone(), format!("{:?}", s.action)))
        .collect()
}

#[test]
fn a_publisher_killed_between_making_and_linking_its_service_leaves_none_half_created() {
    let t = TestNamespace::new("ps-window");
    let preparer = Talker::start(
        test_role("child")
            .env(ROLE, "preparer")
            .env(PREFIX, t.ns.prefix())
            .env("SHMRC_MANAGER", "off"),
        LIMIT,
    );
    let line = preparer.expect("prepared ");
    let temporary = line["prepared ".len()..].trim().to_owned();
    let name = service_segment::service_name(&t.ns, current_uid(), SERVICE).unwrap();
    assert_eq!(
        t.names(),
        std::slice::from_ref(&temporary),
        "only the temporary name exists"
    );
    assert!(
        temporary.contains(&format!(".{}.", preparer.id())),
        "{temporary} carries its creator's pid"
    );
    // Its creator lives: the sweep leaves it, as a segment being created.
    let looked = shmrc::inspect(&t.ns).unwrap();
    assert_eq!(
        actions(&looked),
        [(temporary.clone(), "BeingCreated".to_owned())]
    );

    preparer.kill();
    // The service's name is free: a subscriber is told so at once, with no wait for
    // a creator that will never publish.
    let asked = Instant::now();
    match Subscriber::join_in(&t.ns, SERVICE) {
        Err(Error::Gone { segment }) => assert_eq!(segment, name),
        other => panic!("joined a service whose creator was killed: {other:?}"),
    }
    assert!(
        asked.elapsed() < Duration::from_millis(100),
        "the join waited {:?} for a half-created service",
        asked.elapsed()
    );
    // A publisher creates it, and a subscriber joins it.
    let publisher = Publisher::create(SERVICE, PublisherOptions::new().namespace(t.ns.clone()))
        .expect("a killed creator's service name is free");
    let subscriber = Subscriber::join_in(&t.ns, SERVICE).unwrap();
    // The dead creator's temporary file goes with the next sweep; the service stays.
    let mut swept = actions(&shmrc::sweep(&t.ns).unwrap());
    swept.sort();
    let mut expected = [
        (name.clone(), "Kept".to_owned()),
        (temporary.clone(), "RemovedHalfCreated".to_owned()),
    ];
    expected.sort();
    assert_eq!(swept, expected);
    assert_eq!(t.names(), std::slice::from_ref(&name));
    drop((subscriber, publisher));
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_temporary_service_file_is_named_and_recognised_as_its_creators() {
    let t = TestNamespace::new("ps-tmpname");
    let os = PosixOs;
    let uid = current_uid();
    use shmrc::checkers::os::Os;
    let me = os.current();
    let name = service_segment::temporary_name(&t.ns, uid, os.pid_namespace(), me, 7);
    let parts = service_segment::parse_temporary(&t.ns, uid, &name).unwrap();
    assert_eq!(
        (parts.creator, parts.pid_namespace),
        (me, os.pid_namespace())
    );
    assert!(!service_segment::is_service_name(&t.ns, uid, &name));
    assert!(!t.ns.contains(&name, uid), "no segment's name");
    let other = Namespace::new(format!("{}x", t.ns.prefix())).unwrap();
    assert!(service_segment::parse_temporary(&other, uid, &name).is_none());
    assert!(service_segment::parse_temporary(&t.ns, uid + 1, &name).is_none());
    let service = service_segment::service_name(&t.ns, uid, "s").unwrap();
    assert!(service_segment::parse_temporary(&t.ns, uid, &service).is_none());
    // A creator of another pid namespace cannot be judged: the sweep says so.
    let foreign = service_segment::temporary_name(&t.ns, uid, os.pid_namespace() + 1, me, 8);
    let foreign_parts = service_segment::parse_temporary(&t.ns, uid, &foreign).unwrap();
    match service_segment::sweep_temporary(&os, &foreign, foreign_parts, false) {
        Err(Error::OtherPidNamespace { segment, .. }) => assert_eq!(segment, foreign),
        other => panic!("another pid namespace's creator was judged: {other:?}"),
    }
    // A name that is no service's cannot be prepared.
    let config = Config {
        entries: 1,
        capacity: 1,
        rows: 1,
        backpressure: false,
    };
    match Unlinked::prepare(&os, &format!("{}seg", t.ns.name_start(uid)), config) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("no service's name"), "{why}"),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("prepared a service under no service's name"),
    }
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// On the simulated kernel: a creator killed at `create`'s crash point (its file whole
/// under the temporary name, not linked) leaves the service's name free; another
/// process's sweep removes the temporary file, and reports an unlink that races
/// (`Vanished`) or that the kernel refuses (`Skipped`, the name left); the manager's
/// sweep of named leftovers (`sweep_named`) removes it too, and reports a service
/// name gone meanwhile as `Vanished`.
#[test]
fn sim_a_creator_killed_before_linking_leaves_a_temporary_file_the_sweeps_remove() {
    use shmrc::checkers::os::Os;
    use shmrc::checkers::os::sim::{SimKernel, UnlinkRace};
    use shmrc::checkers::sweep::{Action, sweep_named, sweep_with};
    const UID: u32 = 1000;
    let ns = Namespace::new("shmrc-sim-pscreate").unwrap();
    let name = service_segment::service_name(&ns, UID, "s").unwrap();
    let config = Config {
        entries: 1,
        capacity: 1,
        rows: 1,
        backpressure: false,
    };
    for race in [
        None,
        Some(UnlinkRace::UnlinkedFirst),
        Some(UnlinkRace::Refused),
    ] {
        let kernel = SimKernel::new(33);
        let creator = kernel.spawn(UID);
        kernel.kill_at_step(creator.pid(), 0);
        assert!(matches!(
            service_segment::create(&creator, &name, config),
            Err(Error::Killed)
        ));
        let sweeper = kernel.spawn(UID);
        let left = sweeper.shm_list(&ns.name_start(UID)).unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        let temporary = left[0].clone();
        assert!(service_segment::parse_temporary(&ns, UID, &temporary).is_some());
        match service_segment::open(&sweeper, &name) {
            Err(Error::Gone { .. }) => {}
            other => panic!(
                "the service's name after a killed creation: {:?}",
                other.err()
            ),
        }
        if let Some(race) = race {
            kernel.race_next_unlink(&temporary, race);
        }
        let report = sweep_with(&sweeper, &ns, false).unwrap();
        let action = &report.services[0].action;
        match race {
            None => assert!(matches!(action, Action::RemovedHalfCreated), "{action:?}"),
            Some(UnlinkRace::UnlinkedFirst) => {
                assert!(matches!(action, Action::Vanished), "{action:?}")
            }
            Some(UnlinkRace::Refused) => {
                assert!(
                    matches!(action, Action::Skipped(Error::Os { .. })),
                    "{action:?}"
                );
                // Left in place; the manager's sweep of the dead's names removes it.
                let names = [temporary.clone(), name.clone()].into();
                let named = sweep_named(&sweeper, &ns, &[creator.current()], &names);
                let mut actions: Vec<String> = named
                    .services
                    .iter()
                    .map(|s| format!("{} {:?}", s.name, s.action))
                    .collect();
                actions.sort();
                let mut expected = vec![
                    format!("{temporary} RemovedHalfCreated"),
                    format!("{name} Vanished"),
                ];
                expected.sort();
                assert_eq!(actions, expected);
            }
        }
        assert!(sweeper.shm_list(&ns.name_start(UID)).unwrap().is_empty());
        // The name is free for the next publisher.
        assert!(matches!(
            service_segment::create(&sweeper, &name, config),
            Ok(service_segment::Created::New(_))
        ));
    }
}
