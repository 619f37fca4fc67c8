//! The futex under publish/subscribe's wake word (`Os::wait_word` / `Os::wake_word`,
//! src/os/posix/futex.rs) between two real processes: a child maps a shared word and
//! sleeps on it with a long timeout; the parent changes the word and wakes it; the
//! child must report a wake-up, not a timeout (a lost wake would make it sleep out its
//! 10 s and say so). The shared object is unlinked in every outcome.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::time::Duration;

use shmrc::checkers::os::posix::PosixOs;
use shmrc::checkers::os::{Mapping, Os};
use shmrc::checkers::sync::Ordering::SeqCst;
use shmrc_testkit::process::{Talker, test_role};

const NAME: &str = "SHMRC_TEST_FUTEX_NAME";
/// How long the child sleeps at most: far beyond a wake-up, so a lost wake shows as a
/// `false` (timed out), not as a slow test.
const SLEEP: Duration = Duration::from_secs(10);

/// Unlinks the test's object however the test ends.
struct Unlink(String);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = PosixOs.shm_unlink(&self.0);
    }
}

/// The child's side (runs only when `SHMRC_TEST_FUTEX_NAME` names the object).
#[test]
fn futex_child() {
    let Ok(name) = std::env::var(NAME) else {
        return;
    };
    let os = PosixOs;
    let file = os.shm_open(&name).expect("open the shared word");
    let map = os.map(&file, 8).expect("map it");
    let word = &map.words(1).expect("one word")[0];
    let seen = word.load(SeqCst);
    println!("waiting {seen}");
    let mut woken = true;
    while word.load(SeqCst) == seen && woken {
        woken = os.wait_word(word, seen, SLEEP);
    }
    println!("woke {} {woken}", word.load(SeqCst));
}

#[test]
fn a_wake_in_one_process_ends_a_wait_in_another() {
    let os = PosixOs;
    let name = format!("shmrc-test-futex.{}", std::process::id());
    let _unlink = Unlink(name.clone());
    let file = os.shm_create(&name).expect("create the shared word");
    os.allocate(&file, 8).expect("size it");
    let map = os.map(&file, 8).expect("map it");
    let word = &map.words(1).expect("one word")[0];
    word.store(41, SeqCst);
    let child = Talker::start(test_role("futex_child").env(NAME, &name), SLEEP * 3);
    assert_eq!(child.expect("waiting"), "waiting 41");
    // Give the child time to be asleep in the kernel (if it is not yet, its wait sees
    // the changed word and returns at once: the test passes either way, as it should).
    std::thread::sleep(Duration::from_millis(100));
    word.fetch_add(1, SeqCst);
    os.wake_word(word);
    assert_eq!(child.expect("woke"), "woke 42 true", "the wake was lost");
    child.finish();
}
