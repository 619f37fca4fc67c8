//! Publish/subscribe through its user API (`shmrc::pubsub`), between real processes:
//! one publisher and three subscribers share the same segments zero-copy; a subscriber
//! SIGKILLed holding two samples with one queued gives all three back with no call by
//! anyone but the publisher's own reclaim and loans; drop-oldest leaves a gap and
//! backpressure refuses; a second publisher of a live service is refused and a dead
//! one's service is taken over, and so is one whose remover died between its tombstone
//! and its unlink; a sweep keeps a live service and removes a dead one; a
//! service file that is malformed or another user's is an error naming the cause, and
//! another user cannot join. Each test has its own namespace, bounds every wait, kills
//! only the children it started (by pid), and leaves nothing in `/dev/shm`.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::io::{BufRead, ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use shmrc::checkers::token::TokenExt;
use shmrc::pubsub::{Delivery, Publisher, PublisherOptions, SlowSubscriber, Subscriber};
use shmrc::{Action, Error, Namespace};
use shmrc_testkit::names::{TestNamespace, current_uid};
use shmrc_testkit::process::{Talker, copy_of_this_test, output_within, test_role, text_of};
use shmrc_testkit::users::{ThrowawayUser, cannot_attack};

const LIMIT: Duration = Duration::from_secs(10);
const ROLE: &str = "SHMRC_TEST_PUBSUB_ROLE";
const PREFIX: &str = "SHMRC_TEST_PUBSUB_PREFIX";
const SERVICE: &str = "SHMRC_TEST_PUBSUB_SERVICE";
const COUNT: &str = "SHMRC_TEST_PUBSUB_COUNT";
/// Items of a test sample.
const ITEMS: usize = 512;

fn options(t: &TestNamespace) -> PublisherOptions {
    PublisherOptions::new().namespace(t.ns.clone())
}

/// Sample `i`: items `i * 1000 + k`.
fn fill(loan: &mut [u64], i: u64) {
    for (k, x) in loan.iter_mut().enumerate() {
        *x = i * 1000 + k as u64;
    }
}

fn start(role: &str, t: &TestNamespace, service: &str, count: usize) -> Talker {
    Talker::start(
        test_role("child")
            .env(ROLE, role)
            .env(PREFIX, t.ns.prefix())
            .env(SERVICE, service)
            .env(COUNT, count.to_string())
            .env("SHMRC_MANAGER", "off"),
        LIMIT,
    )
}

/// The children's side (runs only when `SHMRC_TEST_PUBSUB_ROLE` says which role).
/// - `subscriber`: joins, receives `COUNT` samples and says what each holds, then
///   waits for a line on stdin, drops them and leaves;
/// - `holder`: joins, receives `COUNT` samples and holds them until it is killed;
/// - `publisher`: creates the service and waits to be killed;
/// - `publisher-on-cue`: creates the service, publishes `COUNT` samples once told to,
///   and waits to be killed;
/// - `intruder` (another user): must not reach the owner's service;
/// - `fork-publisher`: forks a child that must be refused the publisher's calls.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let ns = Namespace::new(std::env::var(PREFIX).unwrap()).unwrap();
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let service = std::env::var(SERVICE).unwrap();
    let count: usize = std::env::var(COUNT).unwrap().parse().unwrap();
    match role.as_str() {
        "subscriber" | "holder" => {
            let subscriber = Subscriber::join_in(&ns, &service).expect("join");
            println!("joined {}", subscriber.entry());
            let mut held = Vec::new();
            for _ in 0..count {
                let sample = subscriber.recv_timeout::<u64>(LIMIT).expect("a sample");
                let sum: u64 = sample.iter().sum();
                println!("got {} {} {sum}", sample.segment_name(), sample[0]);
                held.push(sample);
            }
            println!("holding {}", held.len());
            if role == "holder" {
                std::thread::sleep(LIMIT * 3);
            }
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).unwrap();
            drop(held);
            drop(subscriber);
            println!("released");
        }
        "publisher" => {
            let publisher =
                Publisher::create(&service, PublisherOptions::new().namespace(ns)).expect("create");
            let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
            fill(&mut loan, 7);
            let _ = publisher.publish(loan).unwrap();
            println!("created");
            std::thread::sleep(LIMIT * 3);
        }
        "publisher-on-cue" => {
            let publisher =
                Publisher::create(&service, PublisherOptions::new().namespace(ns)).expect("create");
            println!("created");
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).unwrap();
            for i in 0..count {
                let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
                fill(&mut loan, i as u64);
                assert_eq!(
                    publisher.publish(loan).unwrap().sent().unwrap().delivered,
                    1
                );
            }
            println!("published");
            std::thread::sleep(LIMIT * 3);
        }
        "forker" => {
            // A child forked while the publisher lives drops its inherited copy: the
            // parent's service must stay (the copy's drop is not the publisher's).
            let mut publisher = Some(
                Publisher::create(&service, PublisherOptions::new().namespace(ns.clone()))
                    .expect("create"),
            );
            // SAFETY: this process runs this one test on one thread (`test_role`).
            let status = unsafe {
                shmrc_testkit::process::fork_and_wait(LIMIT, || {
                    drop(publisher.take());
                    0
                })
            };
            assert!(
                matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
                "{status:?}"
            );
            let subscriber =
                Subscriber::join_in(&ns, &service).expect("the service is still there");
            assert!(subscriber.publisher_alive());
            drop(subscriber);
            drop(publisher);
            println!("forked: ok");
        }
        "fork-publisher" => {
            // A child forked while the publisher lives cannot loan, publish or reclaim
            // as its parent: its words would name the child, not the publisher.
            let publisher =
                Publisher::create(&service, PublisherOptions::new().namespace(ns.clone()))
                    .expect("create");
            let subscriber = Subscriber::join_in(&ns, &service).expect("join");
            let mut inherited = Some(publisher.loan::<u64>(ITEMS).unwrap());
            fill(inherited.as_mut().unwrap(), 3);
            let refused = |r: Result<(), Error>| matches!(r, Err(Error::NotHolder { segment }) if segment == publisher.service_name());
            // SAFETY: this process runs this one test on one thread (`test_role`).
            let status = unsafe {
                shmrc_testkit::process::fork_and_wait(LIMIT, || {
                    let loan = inherited.take().unwrap();
                    let verdicts = [
                        refused(publisher.reclaim().map(drop)),
                        refused(publisher.loan::<u64>(ITEMS).map(drop)),
                        refused(publisher.publish(loan).map(drop)),
                    ];
                    verdicts
                        .iter()
                        .position(|refused| !refused)
                        .map_or(0, |call| call as i32 + 1)
                })
            };
            assert!(
                matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
                "a forked child's call (1 reclaim, 2 loan, 3 publish) was not refused: {status:?}"
            );
            assert!(subscriber.try_recv::<u64>().unwrap().is_none());
            // The parent's own publish of the same loan is received, not Lost.
            let _ = publisher.publish(inherited.take().unwrap()).unwrap();
            let sample = subscriber
                .recv_timeout::<u64>(LIMIT)
                .expect("the parent's sample");
            assert_eq!(sample[0], 3000);
            drop(sample);
            drop(subscriber);
            drop(publisher);
            println!("fork-publisher: ok");
        }
        "intruder" => {
            let owner: u32 = std::env::var("SHMRC_TEST_OWNER").unwrap().parse().unwrap();
            let path = format!("/dev/shm/{}.{owner}.service.{service}", ns.prefix());
            for write in [false, true] {
                match std::fs::OpenOptions::new()
                    .read(true)
                    .write(write)
                    .open(&path)
                {
                    Err(e) if e.kind() == ErrorKind::PermissionDenied => {}
                    other => panic!("intruder opened {path} (write {write}): {other:?}"),
                }
            }
            // Its own namespace has no such service: nothing to join.
            match Subscriber::join_in(&ns, &service) {
                Err(Error::Gone { .. }) => {}
                other => panic!("intruder joined: {other:?}"),
            }
            // Plant a file under a name of the owner's namespace: it must be refused
            // as another user's, never trusted.
            let planted = format!("/dev/shm/{}.{owner}.service.planted", ns.prefix());
            let mut file = std::fs::File::create(&planted).unwrap();
            file.write_all(b"SHMRCSVC not really").unwrap();
            std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
            println!("intruder: refused");
        }
        "fd-limit" => fd_limit_role(&ns, &service),
        other => panic!("unknown role {other}"),
    }
}

/// The `fd-limit` role: a sample published to this process's own subscriber cannot be
/// opened under an open-file limit of 0; the receive says why and pops nothing, and
/// once the limit is back, the same sample is received.
fn fd_limit_role(ns: &Namespace, service: &str) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let publisher =
        Publisher::create(service, PublisherOptions::new().namespace(ns.clone())).expect("create");
    let subscriber = Subscriber::join_in(ns, service).expect("join");
    let mut loan = publisher.loan::<u64>(ITEMS).expect("a loan");
    fill(&mut loan, 3);
    let sent = publisher
        .publish(loan)
        .expect("publish")
        .sent()
        .expect("sent");
    assert_eq!(sent.delivered, 1);
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, 0, hard).unwrap();
    let refused = subscriber.try_recv::<u64>();
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    match refused {
        Err(e) => println!("refused: {e}"),
        other => panic!("a sample that cannot be opened was not refused: {other:?}"),
    }
    let sample = subscriber
        .try_recv::<u64>()
        .expect("receive once the limit is back")
        .expect("the refused sample is still queued");
    assert_eq!(sample[0], 3000, "the same sample");
    assert!(subscriber.try_recv::<u64>().unwrap().is_none());
    drop(sample);
    drop(subscriber);
    drop(publisher);
    println!("role done");
}

#[test]
fn one_publisher_and_three_subscribers_share_the_same_samples() {
    let t = TestNamespace::new("ps-three");
    let publisher = Publisher::create("three", options(&t)).unwrap();
    let mut children: Vec<Talker> = (0..3)
        .map(|_| start("subscriber", &t, "three", 3))
        .collect();
    for c in &children {
        c.expect("joined");
    }
    let mut segments = Vec::new();
    for i in 0..3 {
        let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
        fill(&mut loan, i);
        let sent = publisher.publish(loan).unwrap().sent().unwrap();
        assert_eq!((sent.delivered, sent.dropped), (3, 0));
    }
    let expected: Vec<u64> = (0..3u64)
        .map(|i| (0..ITEMS as u64).map(|k| i * 1000 + k).sum())
        .collect();
    for c in &children {
        let mut seen = Vec::new();
        for i in 0..3 {
            let line = c.expect("got ");
            let parts: Vec<&str> = line.split(' ').collect();
            assert_eq!(parts[2], (i * 1000).to_string(), "{line}");
            assert_eq!(parts[3], expected[i as usize].to_string(), "{line}");
            seen.push(parts[1].to_owned());
        }
        c.expect("holding 3");
        segments.push(seen);
    }
    // Zero-copy: every subscriber read the very same three segments.
    assert!(segments.iter().all(|s| *s == segments[0]), "{segments:?}");
    let stats = publisher.pool_stats();
    assert_eq!((stats.created, stats.lent), (3, 3));
    for c in &mut children {
        c.tell("release");
    }
    for c in children {
        c.expect("released");
        c.finish();
    }
    let stats = publisher.pool_stats();
    assert_eq!((stats.idle, stats.lent), (3, 0), "every subscriber let go");
    // Their entries are freed by the next publish (or reclaim).
    assert_eq!(publisher.reclaim().unwrap().freed, 3);
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_subscriber_killed_holding_samples_gives_them_all_back_with_no_call() {
    let t = TestNamespace::new("ps-kill");
    let publisher = Publisher::create("kill", options(&t).samples(3)).unwrap();
    let holder = start("holder", &t, "kill", 2);
    holder.expect("joined");
    for i in 0..3 {
        let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
        fill(&mut loan, i);
        assert_eq!(
            publisher.publish(loan).unwrap().sent().unwrap().delivered,
            1
        );
    }
    holder.expect("holding 2");
    assert_eq!(publisher.pool_stats().lent, 3, "2 held, 1 queued");
    let killed = Instant::now();
    holder.kill();
    // The publisher's own next steps, nobody else's: a reclaim pass (as any publish
    // makes) frees the dead entry and its queued sample; its loans recycle the two the
    // dead subscriber held (the pool has no room for a fourth segment: `samples(3)`).
    let freed = publisher.reclaim().unwrap().freed;
    let loans: Vec<_> = (0..3)
        .map(|_| publisher.loan::<u64>(ITEMS).unwrap())
        .collect();
    let back = killed.elapsed();
    println!("a SIGKILLed subscriber's 2 held + 1 queued samples were back in {back:?}");
    assert_eq!(freed, 1);
    assert!(loans.iter().all(|l| l.generation() == 1));
    assert_eq!(publisher.pool_stats().created, 3);
    assert!(back < LIMIT);
    drop(loans);
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// The publisher trusts a subscriber it saw alive for at most `LIVENESS_PERIOD` (1 ms):
/// a SIGKILLed subscriber's queued samples come back at the first publish after that,
/// with no reclaim, no loan failure and its ring far from full.
#[test]
fn a_subscriber_killed_with_samples_queued_has_them_back_at_a_publish_within_milliseconds() {
    let t = TestNamespace::new("ps-trust");
    let publisher = Publisher::create("trust", options(&t).queue(64).samples(64)).unwrap();
    let holder = start("holder", &t, "trust", 0);
    holder.expect("holding 0");
    let publish = |i: u64| {
        let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
        fill(&mut loan, i);
        publisher.publish(loan).unwrap().sent().unwrap()
    };
    assert_eq!(publish(0).delivered, 1, "queued for the holder");
    let killed = Instant::now();
    holder.kill();
    // 40 publishes 2 ms apart: the ring (64) never fills, the pool (64) never runs out.
    let freed_at = (1..=40).find(|&i| {
        std::thread::sleep(Duration::from_millis(2));
        publish(i).freed == 1
    });
    let back = killed.elapsed();
    let freed_at = freed_at.unwrap_or_else(|| {
        panic!("the dead subscriber's entry was not freed by 40 publishes over {back:?}")
    });
    println!(
        "a SIGKILLed subscriber's queued samples were back at publish {freed_at}, {back:?} after the kill"
    );
    // Every sample is back: the next loans recycle, none is created.
    let created = publisher.pool_stats().created;
    let loans: Vec<_> = (0..created)
        .map(|_| publisher.loan::<u64>(ITEMS).unwrap())
        .collect();
    assert_eq!(publisher.pool_stats().created, created);
    drop(loans);
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// A loan that finds no free sample asks every subscriber's liveness at once (a
/// reclaim), whatever the publisher's cache says: a SIGKILLed subscriber's queued
/// samples are loaned again with no publish and no reclaim call.
#[test]
fn a_loan_that_finds_no_free_sample_drains_a_killed_subscribers_queue() {
    let t = TestNamespace::new("ps-loan");
    let publisher = Publisher::create("loan", options(&t).queue(8).samples(3)).unwrap();
    let holder = start("holder", &t, "loan", 0);
    holder.expect("holding 0");
    for i in 0..3 {
        let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
        fill(&mut loan, i);
        assert_eq!(
            publisher.publish(loan).unwrap().sent().unwrap().delivered,
            1
        );
    }
    holder.kill();
    let loans: Vec<_> = (0..3)
        .map(|_| {
            publisher
                .loan::<u64>(ITEMS)
                .expect("a queued sample of the dead, loaned again")
        })
        .collect();
    assert!(loans.iter().all(|l| l.generation() == 1));
    // The first of them found none free and made a fourth segment, which the full
    // table refused (given back) before it asked.
    let stats = publisher.pool_stats();
    assert_eq!((stats.created, stats.given_back), (4, 1));
    drop(loans);
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// A publisher SIGKILLed: its samples are finalized by the subscriber, with no sweep:
/// the one it held at its release or at its drop (a release within 1 ms of its last
/// look at a live publisher trusts it), and the two it had released while the
/// publisher lived (idle in the dead publisher's pool) once it finds the publisher
/// dead. Only the service segment is left, for the sweep.
#[test]
fn a_killed_publishers_samples_are_finalized_by_their_subscriber() {
    let t = TestNamespace::new("ps-pubkill");
    let mut publisher = start("publisher-on-cue", &t, "pubkill", 3);
    publisher.expect("created");
    let subscriber = Subscriber::join_in(&t.ns, "pubkill").unwrap();
    publisher.tell("go");
    publisher.expect("published");
    let mut received: Vec<_> = (0..3)
        .map(|_| subscriber.recv_timeout::<u64>(LIMIT).unwrap())
        .collect();
    let held = received.pop().unwrap();
    drop(received); // back to the live publisher's pool, idle
    assert!(subscriber.publisher_alive());
    publisher.kill();
    assert_eq!(held[0], 2000, "a held sample stays readable");
    drop(held);
    drop(subscriber);
    only_the_service_is_left_then_swept(&t, "pubkill", "only the service should be left");
}

/// Asserts that of `t`'s names only service `service`'s file is left (`why` says what
/// else should have gone), then that a sweep removes it.
fn only_the_service_is_left_then_swept(t: &TestNamespace, service: &str, why: &str) {
    let names = t.names();
    assert!(
        names.len() == 1 && names[0].ends_with(&format!(".service.{service}")),
        "{why}: {names:?}"
    );
    shmrc::sweep(&t.ns).unwrap();
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// A sample that outlives its subscriber asks at its release whether the publisher
/// lives, however recently the subscriber saw it alive (nobody would look later): a
/// publisher SIGKILLed after the subscriber's drop, the sample dropped at once, is
/// unlinked by that release.
#[test]
fn a_sample_that_outlives_its_subscriber_asks_at_its_release() {
    let t = TestNamespace::new("ps-orphan");
    let mut publisher = start("publisher-on-cue", &t, "orphan", 1);
    publisher.expect("created");
    let subscriber = Subscriber::join_in(&t.ns, "orphan").unwrap();
    publisher.tell("go");
    publisher.expect("published");
    let held = subscriber.recv_timeout::<u64>(LIMIT).unwrap();
    assert!(subscriber.publisher_alive(), "seen alive just now");
    drop(subscriber);
    publisher.kill();
    drop(held);
    only_the_service_is_left_then_swept(&t, "orphan", "the sample should be gone with its release");
}

#[test]
fn drop_oldest_leaves_a_gap_and_backpressure_refuses() {
    let t = TestNamespace::new("ps-slow");
    let publisher = Publisher::create("oldest", options(&t).queue(2)).unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "oldest").unwrap();
    let mut dropped = 0;
    for i in 0..4 {
        let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
        fill(&mut loan, i);
        let sent = publisher.publish(loan).unwrap().sent().unwrap();
        assert_eq!(sent.delivered, 1);
        dropped += sent.dropped;
    }
    assert_eq!(dropped, 2);
    let firsts: Vec<u64> = std::iter::from_fn(|| subscriber.try_recv::<u64>().unwrap())
        .map(|s| s[0])
        .collect();
    assert_eq!(firsts, [2000, 3000], "the two oldest were dropped: a gap");
    drop(subscriber);
    drop(publisher);

    let publisher = Publisher::create(
        "pressure",
        options(&t).queue(2).slow(SlowSubscriber::Backpressure),
    )
    .unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "pressure").unwrap();
    for i in 0..2 {
        let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
        fill(&mut loan, i);
        assert!(publisher.publish(loan).unwrap().sent().is_some());
    }
    let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
    fill(&mut loan, 2);
    let loan = match publisher.publish(loan).unwrap() {
        Delivery::Full { loan, entry } => {
            assert_eq!(entry, subscriber.entry());
            loan
        }
        Delivery::Sent(sent) => panic!("a full queue accepted a sample: {sent:?}"),
    };
    assert_eq!(subscriber.try_recv::<u64>().unwrap().unwrap()[0], 0);
    assert_eq!(
        publisher.publish(loan).unwrap().sent().unwrap().delivered,
        1
    );
    let rest: Vec<u64> = std::iter::from_fn(|| subscriber.try_recv::<u64>().unwrap())
        .map(|s| s[0])
        .collect();
    assert_eq!(rest, [1000, 2000], "nothing lost under backpressure");
    drop(subscriber);
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_second_publisher_of_a_live_service_is_refused() {
    let t = TestNamespace::new("ps-second");
    let publisher = Publisher::create("one", options(&t)).unwrap();
    match Publisher::create("one", options(&t)) {
        Err(Error::InvalidArgument(why)) => {
            assert!(why.contains("already has a live publisher"), "{why}");
            assert!(why.contains(&std::process::id().to_string()), "{why}");
        }
        other => panic!("a second publisher: {other:?}"),
    }
    drop(publisher);
    // Dropped, the service is free for the next publisher.
    drop(Publisher::create("one", options(&t)).unwrap());
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn of_two_publishers_started_at_once_one_wins_and_the_other_is_told_why() {
    let t = TestNamespace::new("ps-race");
    for _ in 0..20 {
        let barrier = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let create = || {
                barrier.wait();
                Publisher::create("race", options(&t))
            };
            let a = s.spawn(create);
            let b = s.spawn(create);
            (a.join().unwrap(), b.join().unwrap())
        });
        let (won, lost) = match (a, b) {
            (Ok(p), Err(e)) | (Err(e), Ok(p)) => (p, e),
            other => panic!("not one winner: {other:?}"),
        };
        assert!(
            matches!(&lost, Error::InvalidArgument(why) if why.contains("already has a live publisher")),
            "{lost:?}"
        );
        drop(won);
    }
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_dead_publishers_service_is_taken_over_and_swept() {
    let t = TestNamespace::new("ps-dead");
    let dead = start("publisher", &t, "dead", 0);
    dead.expect("created");
    dead.kill();
    let live = Publisher::create("live", options(&t)).unwrap();
    match Subscriber::join_in(&t.ns, "dead") {
        Err(Error::Gone { segment }) => assert!(segment.ends_with("service.dead"), "{segment}"),
        other => panic!("joined a dead publisher's service: {other:?}"),
    }
    let report = shmrc::sweep(&t.ns).unwrap();
    let mut actions: Vec<(String, String)> = report
        .services
        .iter()
        .map(|s| {
            (
                s.name.rsplit('.').next().unwrap().to_owned(),
                format!("{:?}", s.action),
            )
        })
        .collect();
    actions.sort();
    assert_eq!(
        actions,
        [
            ("dead".into(), "Unlinked".into()),
            ("live".into(), "Kept".into())
        ]
    );
    // The dead publisher's sample (held by nobody live) went too; only `live`'s
    // service is left.
    assert_eq!(t.names().len(), 1, "{:?}", t.names());

    // Taken over without a sweep: a dead publisher's service is replaced by a new one.
    let dead = start("publisher", &t, "again", 0);
    dead.expect("created");
    dead.kill();
    let taken = Publisher::create("again", options(&t)).unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "again").unwrap();
    let mut loan = taken.loan::<u64>(ITEMS).unwrap();
    fill(&mut loan, 9);
    assert_eq!(taken.publish(loan).unwrap().sent().unwrap().delivered, 1);
    assert_eq!(subscriber.try_recv::<u64>().unwrap().unwrap()[0], 9000);
    drop((subscriber, taken, live));
    shmrc::sweep(&t.ns).unwrap(); // the killed publisher's own sample
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn every_refusal_names_its_cause() {
    let t = TestNamespace::new("ps-refuse");
    for bad in ["", "a.b", "x/y", &"n".repeat(65)] {
        assert!(
            matches!(Publisher::create(bad, options(&t)), Err(Error::InvalidArgument(why)) if why.contains("service name")),
            "{bad:?}"
        );
    }
    for o in [
        options(&t).subscribers(0),
        options(&t).queue(0),
        options(&t).samples(0),
        options(&t).subscribers(5000),
    ] {
        assert!(matches!(
            Publisher::create("shape", o),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        Subscriber::join_in(&t.ns, "nobody"),
        Err(Error::Gone { .. })
    ));

    let publisher = Publisher::create("full", options(&t).subscribers(1).samples(1)).unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "full").unwrap();
    assert!(matches!(
        Subscriber::join_in(&t.ns, "full"),
        Err(Error::HoldersFull { capacity: 1, .. })
    ));
    assert!(matches!(
        subscriber.recv_timeout::<u64>(Duration::from_millis(20)),
        Err(Error::Timeout { .. })
    ));
    let loan = publisher.loan::<u8>(24).unwrap();
    // The table's one row is taken by a loaned segment: a second length has no row.
    match publisher.loan::<u8>(48) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("all 1 samples"), "{why}"),
        other => panic!("{other:?}"),
    }
    let stats = publisher.pool_stats();
    assert_eq!(
        (stats.created, stats.given_back),
        (2, 1),
        "the refused segment was given back"
    );
    assert_eq!(
        publisher.publish(loan).unwrap().sent().unwrap().delivered,
        1
    );
    // 24 bytes are not whole u64s... they are; 24 bytes are not whole [u8; 5]s.
    assert!(matches!(
        subscriber.try_recv::<[u8; 5]>(),
        Err(Error::BadView { .. })
    ));
    assert_eq!(
        publisher.pool_stats().idle,
        1,
        "the refused sample was released"
    );
    // A loan of another publisher's pool.
    let other = Publisher::create("other", options(&t)).unwrap();
    let foreign = other.loan::<u8>(8).unwrap();
    assert!(matches!(
        publisher.publish(foreign),
        Err(Error::InvalidArgument(_))
    ));
    drop(other);
    drop(publisher);
    // The publisher is gone: a blocking receive says so instead of waiting forever.
    assert!(matches!(subscriber.recv::<u64>(), Err(Error::Gone { .. })));
    drop(subscriber);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_dropped_publishers_samples_go_with_their_last_holder() {
    let t = TestNamespace::new("ps-drop");
    let publisher = Publisher::create("gone", options(&t)).unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "gone").unwrap();
    for i in 0..2 {
        let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
        fill(&mut loan, i);
        assert_eq!(
            publisher.publish(loan).unwrap().sent().unwrap().delivered,
            1
        );
    }
    let held = subscriber.try_recv::<u64>().unwrap().unwrap();
    drop(publisher);
    // The queued one was given back when the publisher left: nothing more to take.
    assert!(subscriber.try_recv::<u64>().unwrap().is_none());
    assert!(!subscriber.publisher_alive());
    assert_eq!(held[0], 0, "a held sample stays readable");
    assert_eq!(
        t.names().len(),
        1,
        "only the held sample is left: {:?}",
        t.names()
    );
    drop(held);
    drop(subscriber);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn the_api_types_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Publisher>();
    send_sync::<Subscriber>();
    send_sync::<shmrc::pubsub::Received<u64>>();
}

#[test]
fn a_received_sample_reads_copies_and_a_broken_ring_is_refused() {
    let t = TestNamespace::new("ps-ring");
    let publisher =
        Publisher::create("ring", options(&t).subscribers(1).queue(1).samples(1)).unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "ring").unwrap();
    let mut loan = publisher.loan::<u64>(4).unwrap();
    loan.copy_from_slice(&[5, 6, 7, 8]);
    let _ = publisher.publish(loan).unwrap();
    let sample = subscriber.try_recv::<u64>().unwrap().unwrap();
    let mut copy = [0u64; 2];
    sample.read_items(2, &mut copy).unwrap();
    assert_eq!(copy, [7, 8]);
    assert!(matches!(
        sample.read_items(3, &mut copy),
        Err(Error::BadView { .. })
    ));
    assert!(matches!(
        sample.read_items(usize::MAX, &mut copy),
        Err(Error::BadView { .. })
    ));
    drop(sample);
    // A writer of this user breaks entry 0's ring: its tail more than a ring ahead of
    // its head (words 24..27 for one row, one entry of a one-sample ring).
    let path = format!("/dev/shm/{}", publisher.service_name());
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &0u64.to_le_bytes(), 25 * 8).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &5u64.to_le_bytes(), 26 * 8).unwrap();
    match subscriber.try_recv::<u64>() {
        Err(Error::Corrupted { segment, what }) => {
            assert!(
                segment.ends_with("service.ring") && what.contains("entry 0"),
                "{what}"
            );
        }
        other => panic!("a broken ring was read: {other:?}"),
    }
    drop(subscriber);
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_forked_child_dropping_its_copy_leaves_the_publishers_service_alone() {
    let t = TestNamespace::new("ps-fork");
    let forker = start("forker", &t, "forked", 0);
    forker.expect("forked: ok");
    forker.finish();
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_forked_child_cannot_loan_publish_or_reclaim_as_the_publisher() {
    let t = TestNamespace::new("ps-forkpub");
    let forker = start("fork-publisher", &t, "forkpub", 0);
    forker.expect("fork-publisher: ok");
    forker.finish();
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// Writes `bytes` as service `service` of `t` with `mode`, returns its path.
fn plant(t: &TestNamespace, service: &str, bytes: &[u8], mode: u32) -> String {
    let path = format!(
        "/dev/shm/{}{}",
        t.ns.name_start(current_uid()),
        format_args!("service.{service}")
    );
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A header of `words` words: the real layout's first words, then zeros.
fn header(words: &[u64], total: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes.resize(total, 0);
    bytes
}

#[test]
fn a_malformed_service_segment_is_an_error_naming_the_cause() {
    let t = TestNamespace::new("ps-bad");
    let magic = u64::from_be_bytes(*b"SHMRCSVC");
    let uid = u64::from(current_uid());
    let pidns = std::fs::metadata("/proc/self/ns/pid")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    // A real publisher's shape, to copy: its words say what a valid file holds.
    let publisher =
        Publisher::create("real", options(&t).subscribers(1).queue(1).samples(1)).unwrap();
    let real = std::fs::read(format!("/dev/shm/{}", publisher.service_name())).unwrap();
    let total = real.len();
    let word = |i: usize| u64::from_le_bytes(real[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!((word(0), word(7), word(8)), (magic, uid, pidns));
    let valid: Vec<u64> = (0..12).map(word).collect();
    let with = |i: usize, v: u64| {
        let mut w = valid.clone();
        w[i] = v;
        header(&w, total)
    };
    let cases: Vec<(&str, Vec<u8>, u32, &str)> = vec![
        ("empty", Vec::new(), 0o600, "HalfCreated"),
        ("short", vec![1; 40], 0o600, "Truncated"),
        ("magic", with(0, 0x1234), 0o600, "BadMagic"),
        ("unpublished", with(0, 0), 0o600, "HalfCreated"),
        ("version", with(1, 99), 0o600, "WrongVersion"),
        ("entries", with(2, 0), 0o600, "Corrupted"),
        ("policy", with(5, 7), 0o600, "Corrupted"),
        ("length", with(9, 1 << 20), 0o600, "Truncated"),
        ("longer", header(&valid, total + 8), 0o600, "Truncated"),
        ("uid", with(7, uid + 1), 0o600, "OtherUser"),
        ("pidns", with(8, pidns + 1), 0o600, "OtherPidNamespace"),
        ("tomb", with(6, word(6) | (1 << 62)), 0o600, "Gone"),
        ("mode", header(&valid, total), 0o644, "Corrupted"),
    ];
    for (service, bytes, mode, expected) in cases {
        let path = plant(&t, service, &bytes, mode);
        let joined = Subscriber::join_in(&t.ns, service);
        let said = format!("{joined:?}");
        assert!(said.contains(expected), "{service}: {said}");
        assert!(
            said.contains(&format!("service.{service}")),
            "{service}: the error names the service: {said}"
        );
        // The sweep judges it the same way and leaves it in place.
        std::fs::remove_file(&path).unwrap();
    }
    // A creator that died before publishing its header blocks the name: a publisher
    // waits for it a moment, then says so.
    let path = plant(&t, "abandoned", &[], 0o600);
    let waited = Instant::now();
    match Publisher::create("abandoned", options(&t)) {
        Err(Error::HalfCreated { segment }) => assert!(segment.ends_with("service.abandoned")),
        other => panic!("an unpublished service: {other:?}"),
    }
    assert!(waited.elapsed() >= Duration::from_millis(100));
    std::fs::remove_file(&path).unwrap();
    // Unchanged, the copy is valid (the checks above are not refusing everything),
    // save that its publisher is this process and it is not the real one's file.
    plant(&t, "copy", &header(&valid, total), 0o600);
    let copy = Subscriber::join_in(&t.ns, "copy").unwrap();
    drop(copy);
    std::fs::remove_file(format!(
        "/dev/shm/{}service.copy",
        t.ns.name_start(current_uid())
    ))
    .unwrap();
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_tombstone_whose_holder_died_before_unlinking_is_taken_over() {
    let t = TestNamespace::new("ps-tomb");
    // A real service's words, to copy; its publisher word is this (live) process's.
    let publisher =
        Publisher::create("real", options(&t).subscribers(1).queue(1).samples(1)).unwrap();
    let real = std::fs::read(format!("/dev/shm/{}", publisher.service_name())).unwrap();
    drop(publisher);
    let mine = u64::from_le_bytes(real[48..56].try_into().unwrap());
    let mut child = Command::new("true").spawn().unwrap();
    let dead = shmrc::Token::new(child.id(), 0).unwrap().word();
    child.wait().unwrap();
    // A process killed between its tombstone's CAS and its unlink left this file.
    let tombstoned = |word: u64| {
        let mut bytes = real.clone();
        bytes[48..56].copy_from_slice(&word.to_le_bytes());
        bytes
    };
    const TOMB_BY: u64 = 1 << 62;
    let live = plant(&t, "live", &tombstoned(mine | TOMB_BY), 0o600);
    plant(&t, "dead", &tombstoned(dead | TOMB_BY), 0o600);
    plant(&t, "nobodys", &tombstoned(u64::MAX), 0o600);
    let swept = |report: &shmrc::SweepReport, service: &str| {
        report
            .services
            .iter()
            .find(|s| s.name.ends_with(&format!("service.{service}")))
            .map(|s| format!("{:?}", s.action))
    };
    let report = shmrc::sweep(&t.ns).unwrap();
    // A live holder's is left alone: it unlinks the name itself.
    assert_eq!(
        swept(&report, "live").as_deref(),
        Some("Kept"),
        "{report:?}"
    );
    for gone in ["dead", "nobodys"] {
        assert_eq!(
            swept(&report, gone).as_deref(),
            Some("Unlinked"),
            "{report:?}"
        );
    }
    assert_eq!(t.names().len(), 1, "{:?}", t.names());
    match Publisher::create("live", options(&t)) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("tombstone"), "{why}"),
        other => panic!("a live holder's tombstoned service was taken: {other:?}"),
    }
    assert!(Path::new(&live).exists());
    std::fs::remove_file(&live).unwrap();
    // A publisher takes over the name a dead holder's tombstone blocked.
    plant(&t, "dead", &tombstoned(dead | TOMB_BY), 0o600);
    let publisher = Publisher::create("dead", options(&t)).unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "dead").unwrap();
    drop(subscriber);
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn another_user_cannot_join_or_plant_a_service() {
    const TEST: &str = "another_user_cannot_join_or_plant_a_service";
    let required = std::env::var("SHMRC_REQUIRE_OTHER_USER").is_ok_and(|v| v == "1");
    let t = TestNamespace::new("ps-other");
    let user = match ThrowawayUser::create("pso") {
        Ok(user) => user,
        Err(why) => {
            assert!(!required, "{TEST}: SHMRC_REQUIRE_OTHER_USER=1 but {why}");
            return cannot_attack(TEST, &why);
        }
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = copy_of_this_test(dir.path());
    let publisher = Publisher::create("owned", options(&t)).unwrap();
    let mut command = Command::new(&probe);
    command
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ROLE, "intruder")
        .env(PREFIX, t.ns.prefix())
        .env(SERVICE, "owned")
        .env(COUNT, "0")
        .env("SHMRC_TEST_OWNER", current_uid().to_string())
        .env("SHMRC_MANAGER", "off")
        .current_dir("/")
        .uid(user.uid)
        .gid(user.gid);
    let out = output_within(&mut command, LIMIT);
    let said = text_of(&out);
    assert!(
        out.status.success() && said.contains("intruder: refused"),
        "{said}"
    );
    // What it planted under the owner's name is refused as another user's, by a
    // publisher and a subscriber alike, and the sweep leaves it alone.
    let planted = format!("/dev/shm/{}service.planted", t.ns.name_start(current_uid()));
    assert!(Path::new(&planted).exists());
    for refused in [
        Publisher::create("planted", options(&t)).map(drop),
        Subscriber::join_in(&t.ns, "planted").map(drop),
    ] {
        match refused {
            Err(Error::OtherUser { owner, .. }) => assert_eq!(owner, user.uid),
            other => panic!("another user's service was trusted: {other:?}"),
        }
    }
    let report = shmrc::sweep(&t.ns).unwrap();
    assert!(
        report
            .services
            .iter()
            .all(|s| matches!(s.action, Action::Kept)),
        "{report:?}"
    );
    std::fs::remove_file(&planted).unwrap();
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// `recv_timeout(Duration::MAX)` (too long to add to now) waits with no deadline
/// instead of panicking: a sample published 50 ms later by another thread arrives.
#[test]
fn recv_timeout_duration_max_waits_with_no_deadline() {
    let t = TestNamespace::new("ps-forever");
    let publisher = Publisher::create("forever", options(&t)).unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "forever").unwrap();
    let received = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            let mut loan = publisher.loan::<u64>(ITEMS).unwrap();
            fill(&mut loan, 7);
            let _ = publisher.publish(loan).unwrap();
        });
        subscriber.recv_timeout::<u64>(Duration::MAX).unwrap()
    });
    assert_eq!(received[0], 7000);
    drop(received);
    drop(subscriber);
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// A subscriber that cannot open a sample's segment (its open-file limit reached) gets
/// an error naming the cause, loses nothing and pins nothing: once the limit is back,
/// the same sample is received. In a child process (the limit is the process's).
#[test]
fn a_sample_that_cannot_be_opened_is_refused_and_stays_queued() {
    let t = TestNamespace::new("ps-nofile");
    let out = output_within(
        test_role("child")
            .env(ROLE, "fd-limit")
            .env(PREFIX, t.ns.prefix())
            .env(SERVICE, "nofile")
            .env(COUNT, "1")
            .env("SHMRC_MANAGER", "off"),
        LIMIT,
    );
    let said = text_of(&out);
    assert!(out.status.success() && said.contains("role done"), "{said}");
    let refused = said
        .lines()
        .find(|l| l.contains("refused: "))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        refused.contains("too many open files") && refused.contains("RLIMIT_NOFILE"),
        "the error names the cause: {refused}"
    );
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// A table row that names another segment than its sample's (a writer of this user
/// changed its share key) fails the receive with `Corrupted` naming it, pops nothing,
/// and once the row is right again the sample is received.
#[test]
fn a_forged_table_row_is_refused_and_pops_nothing() {
    let t = TestNamespace::new("ps-row");
    let publisher =
        Publisher::create("row", options(&t).subscribers(1).queue(1).samples(1)).unwrap();
    let subscriber = Subscriber::join_in(&t.ns, "row").unwrap();
    let mut loan = publisher.loan::<u64>(4).unwrap();
    loan.copy_from_slice(&[5, 6, 7, 8]);
    let _ = publisher.publish(loan).unwrap();
    // Row 0's share key: word 16 + 2 of the service.
    let path = format!("/dev/shm/{}", publisher.service_name());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut key = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut key, 18 * 8).unwrap();
    let forged = (u64::from_le_bytes(key) ^ 1).to_le_bytes();
    std::os::unix::fs::FileExt::write_all_at(&file, &forged, 18 * 8).unwrap();
    match subscriber.try_recv::<u64>() {
        Err(Error::Corrupted { what, .. }) => assert!(what.contains("share key"), "{what}"),
        other => panic!("a forged row was not refused: {other:?}"),
    }
    std::os::unix::fs::FileExt::write_all_at(&file, &key, 18 * 8).unwrap();
    let sample = subscriber
        .try_recv::<u64>()
        .unwrap()
        .expect("the sample is still queued");
    assert_eq!(&sample[..], &[5, 6, 7, 8]);
    drop(sample);
    drop(subscriber);
    drop(publisher);
    assert!(t.names().is_empty(), "{:?}", t.names());
}
