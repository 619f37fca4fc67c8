//! Publish/subscribe under the user's manager: a subscriber is watched like any other
//! user of a named segment. The test starts a manager of its own (a private runtime
//! directory), a publisher process and a subscriber process, both its clients. The
//! subscriber receives a sample and holds it; the publisher is SIGKILLed, then the
//! subscriber. Nobody is left to give the sample back, so only the manager, told of
//! the subscriber when it joined and opened the sample, can reclaim it: the sample's
//! name must leave `/dev/shm` within 10 s of the subscriber's death, with no sweep
//! called by anyone. The manager and both children are killed by their pids in every
//! outcome; the namespace is emptied.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::io::BufRead;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use shmrc::Namespace;
use shmrc::manager::launch::start_detached;
use shmrc::manager::runtime::RuntimeDir;
use shmrc::pubsub::{Publisher, PublisherOptions, Subscriber};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{Talker, test_role};

const ROLE: &str = "SHMRC_TEST_PSMGR_ROLE";
const PREFIX: &str = "SHMRC_TEST_PSMGR_PREFIX";
const SERVICE: &str = "watched";
const LIMIT: Duration = Duration::from_secs(20);

/// The children (clients of the test's manager). `publisher`: creates the service,
/// and on each line of stdin publishes a sample. `subscriber`: joins, receives one
/// sample, says its segment's name and holds it until killed.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let ns = Namespace::new(std::env::var(PREFIX).unwrap()).unwrap();
    match role.as_str() {
        "publisher" => {
            let publisher =
                Publisher::create(SERVICE, PublisherOptions::new().namespace(ns)).unwrap();
            println!("publisher: ready");
            for _ in std::io::stdin().lock().lines() {
                let mut loan = publisher.loan::<u64>(64).unwrap();
                loan.fill(7);
                let delivered = publisher.publish(loan).unwrap().sent().unwrap().delivered;
                println!("publisher: published to {delivered}");
            }
        }
        "subscriber" => {
            let subscriber = Subscriber::join_in(&ns, SERVICE).unwrap();
            println!("subscriber: joined");
            let held = subscriber.recv_timeout::<u64>(LIMIT).unwrap();
            assert_eq!(held[0], 7);
            println!("subscriber: holding {}", held.segment_name());
            std::thread::sleep(LIMIT * 3);
        }
        other => panic!("unknown role {other}"),
    }
}

/// Kills the manager this test started, by its pid, whatever the outcome.
struct Manager(u32);

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0 as i32), Signal::SIGKILL);
    }
}

#[test]
fn a_killed_subscribers_sample_is_reclaimed_by_the_manager() {
    let t = TestNamespace::new("psmgr");
    let dir = tempfile::tempdir().unwrap();
    let runtime = RuntimeDir::at(dir.path().join("shmrc"));
    let _manager = Manager(start_detached(&runtime, Duration::from_secs(30)).unwrap());
    let start = |role: &str| {
        Talker::start(
            test_role("child")
                .env(ROLE, role)
                .env(PREFIX, t.ns.prefix())
                .env("SHMRC_RUNTIME_DIR", runtime.path())
                .env("SHMRC_MANAGER", "connect"),
            LIMIT,
        )
    };
    let mut publisher = start("publisher");
    publisher.expect("publisher: ready");
    let subscriber = start("subscriber");
    subscriber.expect("subscriber: joined");
    publisher.tell("publish");
    publisher.expect("publisher: published");
    let line = subscriber.expect("subscriber: holding ");
    let sample = line["subscriber: holding ".len()..].trim().to_owned();
    assert!(t.names().contains(&sample), "{sample} in {:?}", t.names());

    publisher.kill();
    // The live subscriber holds the sample: the publisher's death leaves it.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        t.names().contains(&sample),
        "a held sample was reclaimed: {:?}",
        t.names()
    );
    subscriber.kill();
    let killed = Instant::now();
    while t.names().contains(&sample) {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "the dead subscriber's sample {sample} is still in /dev/shm 10 s after its \
             death: the manager did not watch the subscriber ({:?})",
            t.names()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
