//! Publish/subscribe under the user's manager: a subscriber is watched like any other
//! user of a named segment, and a death's sweep judges the services of the dead's
//! namespaces. Each test starts a manager of its own (a private runtime directory) and
//! children that are its clients:
//! - a publisher and a subscriber: the subscriber receives a sample and holds it; the
//!   publisher is SIGKILLed, then the subscriber. Nobody is left to give the sample
//!   back or to remove the service, so only the manager, told of the subscriber when it
//!   joined and opened the sample, can: the sample's and the service's names must leave
//!   `/dev/shm` within 10 s of the subscriber's death, with no sweep called by anyone;
//! - a publisher with no subscriber, and a creator killed before it linked its service
//!   to its name: at their deaths the manager removes the service and the temporary
//!   file.
//!
//! The manager and the children are killed by their pids in every outcome; the
//! namespace is emptied. The manager's sweeps at its start and when its grace runs out
//! cover every namespace of the user in `/dev/shm` (there is no manager of one
//! namespace), and would race with names other tests plant on purpose; so each test
//! runs again (a copy of this binary) in a mount namespace of its own whose `/dev/shm`
//! is a private, empty tmpfs, with its manager and children: its manager sees only its
//! names, and the tmpfs goes with the namespace. That needs root and util-linux's
//! `unshare` and `mount`; without them the test says so and runs in the real
//! `/dev/shm` (its own namespace there), and with `SHMRC_REQUIRE_ROOT=1` (as
//! `.ci/run` sets it) it fails instead.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::io::BufRead;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use shmrc::checkers::os::Os;
use shmrc::checkers::service_segment::{self, Config, Unlinked};
use shmrc::manager::RuntimeDir;
use shmrc::manager::start_detached;
use shmrc::pubsub::{Publisher, PublisherOptions, Subscriber};
use shmrc::{DefaultOs, Namespace};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{Talker, output_within, test_role};
use shmrc_testkit::users::namespaces_unavailable;

const ROLE: &str = "SHMRC_TEST_PSMGR_ROLE";
const PREFIX: &str = "SHMRC_TEST_PSMGR_PREFIX";
const SERVICE: &str = "watched";
const LIMIT: Duration = Duration::from_secs(20);
/// Set in the copy of a test that runs in a private `/dev/shm`.
const PRIVATE_SHM: &str = "SHMRC_TEST_PSMGR_PRIVATE_SHM";

/// Runs test `test` again, in a mount namespace of its own with an empty tmpfs on
/// `/dev/shm`, and fails if that copy fails; `true` when it did (the caller returns).
/// `false` in the copy itself, and where the namespace cannot be made (said on stderr;
/// a failure with `SHMRC_REQUIRE_ROOT=1`): the caller runs the test here.
fn ran_in_private_shm(test: &str) -> bool {
    if std::env::var_os(PRIVATE_SHM).is_some() {
        return false;
    }
    if let Some(why) = namespaces_unavailable() {
        let required = std::env::var("SHMRC_REQUIRE_ROOT").is_ok_and(|v| v == "1");
        assert!(!required, "SHMRC_REQUIRE_ROOT=1 but {why}");
        eprintln!("{test}: NOT ISOLATED, runs in the real /dev/shm: {why}");
        return false;
    }
    let inner = test_role(test);
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs -o mode=1777,size=256m shmrc-test /dev/shm && exec \"$0\" \"$@\"")
        .arg(inner.get_program())
        .args(inner.get_args())
        .env(PRIVATE_SHM, "1");
    let out = output_within(&mut command, LIMIT * 3);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{test} in a private /dev/shm failed: {said}"
    );
    assert!(
        said.contains("1 passed"),
        "{test} did not run there: {said}"
    );
    true
}

/// The children (clients of the test's manager). `publisher`: creates the service,
/// and on each line of stdin publishes a sample. `subscriber`: joins, receives one
/// sample, says its segment's name and holds it until killed. `preparer`: makes the
/// service whole under its temporary name (`service_segment::Unlinked::prepare`, the
/// manager told first, as `Publisher::create` tells it), says that name and waits to
/// be killed before linking it.
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
        "preparer" => {
            let os = DefaultOs::default();
            os.before_named_use(ns.prefix(), None).unwrap();
            let name = service_segment::service_name(&ns, os.uid(), SERVICE).unwrap();
            let config = Config {
                entries: 1,
                capacity: 1,
                rows: 1,
                backpressure: false,
            };
            let unlinked = Unlinked::prepare(&os, &name, config).unwrap();
            println!("preparer: prepared {}", unlinked.temporary_name());
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

/// Waits until no name of `t` satisfies `left`, failing after 10 s with `why`.
fn wait_gone(t: &TestNamespace, left: impl Fn(&str) -> bool, why: &str) {
    let since = Instant::now();
    while t.names().iter().any(|n| left(n)) {
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "{why}: still in /dev/shm 10 s after the death ({:?})",
            t.names()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A manager of the test's own (a private runtime directory), and a way to start
/// its clients.
struct Scene {
    t: TestNamespace,
    runtime: RuntimeDir,
    _dir: tempfile::TempDir,
    _manager: Manager,
}

impl Scene {
    fn new(test: &str) -> Scene {
        if std::env::var_os(PRIVATE_SHM).is_some() {
            let names: Vec<_> = std::fs::read_dir("/dev/shm").unwrap().collect();
            assert!(names.is_empty(), "the private /dev/shm holds {names:?}");
        }
        let t = TestNamespace::new(test);
        let dir = tempfile::tempdir().unwrap();
        let runtime = RuntimeDir::at(dir.path().join("shmrc"));
        let manager = Manager(start_detached(&runtime, Duration::from_secs(30)).unwrap());
        Scene {
            t,
            runtime,
            _dir: dir,
            _manager: manager,
        }
    }

    fn start(&self, role: &str) -> Talker {
        Talker::start(
            test_role("child")
                .env(ROLE, role)
                .env(PREFIX, self.t.ns.prefix())
                .env("SHMRC_RUNTIME_DIR", self.runtime.path())
                .env("SHMRC_MANAGER", "connect"),
            LIMIT,
        )
    }
}

#[test]
fn a_killed_subscribers_sample_is_reclaimed_by_the_manager() {
    if ran_in_private_shm("a_killed_subscribers_sample_is_reclaimed_by_the_manager") {
        return;
    }
    let scene = Scene::new("psmgr");
    let t = &scene.t;
    let start = |role: &str| scene.start(role);
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
    let service =
        service_segment::service_name(&t.ns, shmrc_testkit::names::current_uid(), SERVICE).unwrap();
    assert!(
        t.names().contains(&service),
        "a live subscriber's service was removed: {:?}",
        t.names()
    );
    subscriber.kill();
    wait_gone(
        t,
        |n| n == sample,
        "the dead subscriber's sample: the manager did not watch the subscriber",
    );
    // Its publisher dead, its last subscriber dead: the subscriber's death's sweep
    // removes the service too.
    wait_gone(
        t,
        |n| n == service,
        "a service with no live publisher or subscriber",
    );
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_killed_publishers_service_and_a_killed_creators_temporary_file_are_removed() {
    if ran_in_private_shm(
        "a_killed_publishers_service_and_a_killed_creators_temporary_file_are_removed",
    ) {
        return;
    }
    let scene = Scene::new("psmgr-pub");
    let t = &scene.t;
    let service =
        service_segment::service_name(&t.ns, shmrc_testkit::names::current_uid(), SERVICE).unwrap();
    let publisher = scene.start("publisher");
    publisher.expect("publisher: ready");
    assert!(t.names().contains(&service), "{:?}", t.names());
    publisher.kill();
    wait_gone(
        t,
        |n| n == service,
        "the service of a dead publisher with no subscriber",
    );
    assert!(t.names().is_empty(), "{:?}", t.names());

    let preparer = scene.start("preparer");
    let line = preparer.expect("preparer: prepared ");
    let temporary = line["preparer: prepared ".len()..].trim().to_owned();
    assert_eq!(t.names(), std::slice::from_ref(&temporary));
    preparer.kill();
    wait_gone(
        t,
        |n| n == temporary,
        "the temporary file of a creator killed before it linked its service",
    );
}
