//! Publish/subscribe's queue between real processes, with no user API yet: the
//! service's words in a real shared mapping, the publisher this test's process, the
//! subscriber a child that joins, sleeps on the wake word (`take_within`: the futex)
//! until samples come, takes two and holds them, while a third stays queued; then it is
//! SIGKILLed. The publisher's next reclaim pass and loans get all three back with no
//! call by anyone else: the two the dead child held (its dead token, reclaimed by the
//! recycle) and the queued one (the publisher's in-flight word, given back by the
//! drain). The time that takes is printed (timings belong to the benchmarks); the test
//! bounds it at 10 s so that a leak fails it. The shared object is unlinked in every
//! outcome.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

mod pubsub_words;

use std::time::{Duration, Instant};

use pubsub_words::{Layout, loan_and_publish_in};
use shmrc::checkers::holders::{self, Recycled, held_word};
use shmrc::checkers::os::posix::PosixOs;
use shmrc::checkers::os::{Mapping, Os};
use shmrc::checkers::pubsub::queue::{self, Policy, Taken, subscriber_slot};
use shmrc::checkers::token::{Token, TokenExt};
use shmrc_testkit::process::{Talker, test_role};

const NAME: &str = "SHMRC_TEST_PUBSUB_NAME";
const PUBLISHER: &str = "SHMRC_TEST_PUBSUB_PUBLISHER";
const LAYOUT: Layout = Layout {
    entries: 2,
    samples: 3,
    cap: 4,
};
const LIMIT: Duration = Duration::from_secs(10);

/// Unlinks the test's object however the test ends.
struct Unlink(String);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = PosixOs.shm_unlink(&self.0);
    }
}

fn map_words(os: &PosixOs, file: &<PosixOs as Os>::File) -> <PosixOs as Os>::Map {
    os.map(file, LAYOUT.len() * 8)
        .expect("map the service's words")
}

/// The subscriber's side (runs only when `SHMRC_TEST_PUBSUB_NAME` names the object).
#[test]
fn pubsub_subscriber() {
    let Ok(name) = std::env::var(NAME) else {
        return;
    };
    let publisher = Token::from_word(std::env::var(PUBLISHER).unwrap().parse().unwrap()).unwrap();
    let os = PosixOs;
    let file = os.shm_open(&name).expect("open the service");
    let map = map_words(&os, &file);
    let words = map.words(LAYOUT.len()).expect("the service's words");
    LAYOUT.with(words, |q, _| {
        let e = queue::join(&os, q).unwrap().expect("a free entry");
        println!("joined {e}");
        let mut held = Vec::new();
        while held.len() < 2 {
            match queue::take_within(&os, q, e, publisher, LIMIT).unwrap() {
                Taken::Sample(d) => held.push(d.sample),
                other => panic!("the subscriber's take ended {other:?}"),
            }
        }
        println!("holding {held:?}");
        // Held until killed.
        std::thread::sleep(LIMIT * 3);
    });
}

#[test]
fn a_subscriber_killed_holding_samples_gives_them_all_back_with_no_call() {
    let os = PosixOs;
    let name = format!("shmrc-test-pubsub.{}", std::process::id());
    let _unlink = Unlink(name.clone());
    let file = os.shm_create(&name).expect("create the service's words");
    os.allocate(&file, (LAYOUT.len() * 8) as u64)
        .expect("size them");
    let map = map_words(&os, &file);
    let words = map.words(LAYOUT.len()).expect("the service's words");
    let me = os.current();
    LAYOUT.initialize(words, me);
    let child = Talker::start(
        test_role("pubsub_subscriber")
            .env(NAME, &name)
            .env(PUBLISHER, me.word().to_string()),
        LIMIT * 2,
    );
    let e: usize = child.expect("joined")["joined ".len()..].parse().unwrap();
    // The child sleeps on the wake word until these come (the futex wakes it).
    std::thread::sleep(Duration::from_millis(50));
    LAYOUT.with(words, |q, samples| {
        for s in 0..3 {
            let published = loan_and_publish_in(&os, q, samples, s, Policy::Backpressure)
                .unwrap()
                .expect("a free sample");
            assert_eq!(published.delivered, 1);
        }
    });
    assert_eq!(child.expect("holding"), "holding [0, 1]");
    let child_token = LAYOUT.slots_of(words, 0)[subscriber_slot(e)];
    assert_ne!(child_token, held_word(me));
    assert_eq!(
        LAYOUT.slots_of(words, 2)[subscriber_slot(e)],
        holders::in_flight_word(me)
    );
    let killed = Instant::now();
    child.kill();
    // The publisher's next steps: a reclaim pass (a publish finds the dead entry), then
    // its loans recycle each sample.
    let back = LAYOUT.with(words, |q, samples| {
        loop {
            let reclaimed = queue::publish(&os, q, None, Policy::Backpressure).unwrap();
            let reused = samples
                .iter()
                .filter(|h| {
                    matches!(
                        holders::recycle(&os, h, 0).unwrap(),
                        Recycled::Reused { .. }
                    )
                })
                .count();
            if reused == 3 {
                assert_eq!(reclaimed.drained, 1);
                break killed.elapsed();
            }
            assert!(
                killed.elapsed() < LIMIT,
                "samples not back: {:x?}",
                (0..3)
                    .map(|s| LAYOUT.slots_of(words, s))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    assert_eq!(
        LAYOUT.state(words, e),
        0,
        "the dead subscriber's entry is free again"
    );
    println!(
        "all three samples back in the pool {back:?} after the SIGKILL (kill and reap included)"
    );
}

/// `take_within` with `Duration::MAX` (too long to add to now) waits with no deadline
/// instead of panicking: here a sample is already queued, so it returns it at once.
#[test]
fn take_within_duration_max_is_no_deadline() {
    let os = PosixOs;
    let words = pubsub_words::Words::new(os.current(), 1, 1, 2);
    let e = words
        .with(|q, _| queue::join(&os, q))
        .unwrap()
        .expect("a free entry");
    pubsub_words::loan_and_publish(&os, &words, 0, Policy::DropOldest)
        .unwrap()
        .expect("the sample is free");
    let taken = words
        .with(|q, _| queue::take_within(&os, q, e, os.current(), Duration::MAX))
        .unwrap();
    assert!(
        matches!(taken, Taken::Sample(d) if d.sample == 0),
        "{taken:?}"
    );
}
