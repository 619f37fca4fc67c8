//! What a buffer means across `fork` (see `buf.rs`): the child inherits the mapping but
//! not the reference. Dropping the inherited buffer releases nothing, sharing it is
//! `NotHolder`, and `reattach` makes the child a holder of its own.
//!
//! This file holds one test so that its process has no other test thread that could
//! hold a lock across the fork.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#![allow(unsafe_code)]

use std::time::Duration;

use nix::sys::wait::WaitStatus;
use shmrc::Outcome;
use shmrc::{CreateOptions, Error, ShmBuf, Strategy};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::fork_and_wait;

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
    // child could need; the child runs only `in_child`.
    let status = unsafe { fork_and_wait(Duration::from_secs(30), || in_child(buf.clone())) };
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
    let census = buf.census().unwrap();
    assert_eq!(
        (census.live, census.dead),
        (1, 0),
        "the child's drop left the parent's slot alone"
    );
    assert_eq!(buf.release().unwrap().unwrap().outcome, Outcome::Unlinked);
    assert!(t.names().is_empty());
}
