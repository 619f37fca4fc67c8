//! shmrc's own descriptors under a small descriptor budget (issue 29, item 6): the
//! liveness table (process descriptors kept on peers found alive) takes at most 1/16 of
//! `RLIMIT_NOFILE` (4 of 64), and when the process hits its limit those are closed and
//! counted in `Error::TooManyFds`, so the next call has room.
//!
//! It runs in a child process (a copy of this test binary in a role), since the limit is
//! process-wide: the child lowers its limits to 64, judges the liveness of 10 live
//! processes it started, counts its open descriptors, then makes memfds until the
//! limit stops it.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::resource::{Resource, setrlimit};
use shmrc::Error;
use shmrc::checkers::os::Os;
use shmrc::checkers::os::posix::PosixOs;
use shmrc::checkers::token::TokenExt;
use shmrc_testkit::process::{output_within, test_role, text_of};

const ROLE: &str = "SHMRC_TEST_FD_BUDGET";

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count() - 1 // the listing's own
}

/// The child. Returns at once in a normal test run.
#[test]
fn budget_child() {
    if std::env::var(ROLE).is_err() {
        return;
    }
    // The hard limit too: shmrc raises the soft limit to the hard one before its first
    // memfd.
    setrlimit(Resource::RLIMIT_NOFILE, 64, 64).unwrap();
    let mut peers: Vec<Child> = (0..10)
        .map(|_| {
            Command::new("sleep")
                .arg("30")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let before = open_descriptors();
    for peer in &peers {
        let token = shmrc::Token::new(peer.id(), start_time(peer.id())).unwrap();
        assert!(PosixOs.is_alive(token), "a live peer");
    }
    let kept = open_descriptors() - before;
    println!("child: liveness descriptors kept for 10 peers: {kept}");
    let mut files = Vec::new();
    let error = loop {
        match PosixOs.memfd_create("shmrc-fd-budget") {
            Ok(file) => files.push(file),
            Err(e) => break e,
        }
        assert!(files.len() < 64, "the limit never stopped it");
    };
    println!("child: {error}");
    match error {
        Error::TooManyFds { liveness_fds, .. } => println!("child: liveness_fds {liveness_fds}"),
        other => println!("child: other {other:?}"),
    }
    let again = PosixOs.memfd_create("shmrc-fd-budget-after");
    println!(
        "child: next memfd {}",
        if again.is_ok() { "made" } else { "refused" }
    );
    for peer in &mut peers {
        let _ = peer.kill();
        let _ = peer.wait();
    }
}

/// The start time of `pid` as `/proc/<pid>/stat` shows it (field 22), read as a token
/// needs it (this test runs in no time namespace of its own).
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    after_name.split(' ').nth(19).unwrap().parse().unwrap()
}

#[test]
fn the_liveness_table_takes_a_sixteenth_of_the_budget_and_gives_it_back_at_the_limit() {
    let mut child = test_role("budget_child");
    child.env(ROLE, "1");
    let out = output_within(&mut child, Duration::from_secs(60));
    let said = text_of(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("child: liveness descriptors kept for 10 peers: 4"),
        "at most 64/16 kept: {said}"
    );
    assert!(
        said.contains("child: liveness_fds 4"),
        "counted at the limit: {said}"
    );
    assert!(
        said.contains("4 were shmrc's liveness descriptors"),
        "said: {said}"
    );
    assert!(
        said.contains("child: next memfd made"),
        "room again: {said}"
    );
}
