//! What a buffer means across `fork` (see `buf.rs`): the child inherits the mapping but
//! not the reference. Dropping the inherited buffer releases nothing, sharing it is
//! `NotHolder`, and `reattach` makes the child a holder of its own.
//!
//! This file holds one test so that its process has no other test thread that could
//! hold a lock across the fork.
#![cfg(not(any(feature = "loom", feature = "shuttle")))]
#![allow(unsafe_code)]

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork};
use shmrc::checkers::holders::Outcome;
use shmrc::{CreateOptions, Error, ShmBuf, Strategy};
use shmrc_testkit::names::TestNamespace;

/// The child's checks; its exit code says which failed (0: none).
fn in_child(buf: ShmBuf) -> i32 {
    if buf.is_held() {
        return 10;
    }
    if !matches!(buf.share(), Err(Error::NotHolder { .. })) {
        return 11;
    }
    let mine = match buf.reattach() {
        Ok(mine) => mine,
        Err(_) => return 12,
    };
    if !mine.is_held() || mine.census().map(|c| c.live) != Some(2) {
        return 13;
    }
    if mine.release().ok().flatten().map(|f| f.outcome) != Some(Outcome::InUse) {
        return 14;
    }
    drop(buf);
    0
}

#[test]
fn a_forked_child_never_releases_its_parents_reference() {
    let t = TestNamespace::new("fork");
    let buf = ShmBuf::with_options(
        4096,
        &CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(t.ns.clone()),
    )
    .unwrap();
    // SAFETY: this test binary runs this one test, so no other thread holds a lock the
    // child could need; the child runs only `in_child` and leaves with `_exit`, never
    // returning into the test harness.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            let code = in_child(buf.clone());
            // SAFETY: `_exit` ends the child at once without running the parent's
            // atexit handlers or destructors twice.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            // Bounded: a child still running after 30 s is killed (ours, by pid).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let status = loop {
                match waitpid(child, Some(WaitPidFlag::WNOHANG)).unwrap() {
                    WaitStatus::StillAlive if std::time::Instant::now() < deadline => {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    WaitStatus::StillAlive => {
                        let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
                        let _ = waitpid(child, None);
                        panic!("the forked child ran past 30 s; killed");
                    }
                    status => break status,
                }
            };
            assert_eq!(status, WaitStatus::Exited(child, 0));
        }
    }
    let census = buf.census().unwrap();
    assert_eq!(
        (census.live, census.dead),
        (1, 0),
        "the child's drop left the parent's slot alone"
    );
    assert_eq!(buf.release().unwrap().unwrap().outcome, Outcome::Unlinked);
    assert!(t.names().is_empty());
}
