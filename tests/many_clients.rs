//! Thousands of client processes on one manager (issue 29, item 4). Before, a manager
//! held at most 1,024 connections: with 1,100 concurrent processes, 76 creates failed
//! ("too many connections"). Its cap now follows its descriptor limit (two descriptors
//! a client: `server::max_connections`, 9,968 with this machine's 20,000).
//!
//! The test starts a manager of its own (a private runtime directory), then forks 2,048
//! child processes (`SHMRC_MANY_CLIENTS` to change it) that each create a file_system
//! buffer — saying Hello to the manager — and hold it. Every create must succeed and the
//! manager must count every client; then every child is SIGKILLed (ours, by pid) and
//! the manager must sweep every death: the namespace ends empty.
//!
//! This file holds one test, so that no other test thread holds a lock across the
//! forks.
//!
//! # Safety
//! `unsafe` for `fork` (the children run shmrc and block, and leave only by SIGKILL or
//! `_exit`), `_exit`, and setting the environment before any child exists.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#![allow(unsafe_code)]

use std::io::Read;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork, pipe, write};
use shmrc::manager::RuntimeDir;
use shmrc::manager::start_detached;
use shmrc::manager::status_at;
use shmrc::manager::{ManagerMode, set_manager_mode};
use shmrc::{CreateOptions, ShmBuf, Strategy};
use shmrc_testkit::names::TestNamespace;

/// Kills this test's children and manager, by pid, whatever the outcome.
struct Ours(Vec<Pid>);

impl Drop for Ours {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = kill(*pid, Signal::SIGKILL);
        }
        for pid in &self.0 {
            let _ = waitpid(*pid, None);
        }
    }
}

/// The child: creates and holds a buffer, says `R` (ready) or `E` (its create failed)
/// on `ready`, then waits to be killed.
fn child(options: &CreateOptions, ready: &OwnedFd, hold: &OwnedFd) -> ! {
    let made = ShmBuf::with_options(64, options);
    let said = if made.is_ok() { b"R" } else { b"E" };
    if let Err(e) = &made {
        eprintln!("child {}: {e}", std::process::id());
    }
    let _ = write(ready, said);
    let mut byte = [0u8; 1];
    // Blocks until the test ends (its end of `hold` closes) or SIGKILLs this child.
    let _ = nix::unistd::read(hold, &mut byte);
    drop(made);
    // SAFETY: leaves the forked child at once, running none of the test harness's
    // teardown.
    unsafe { nix::libc::_exit(0) }
}

#[test]
fn thousands_of_client_processes_are_all_watched_and_all_swept() {
    let clients: usize = std::env::var("SHMRC_MANY_CLIENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2048);
    let t = TestNamespace::new("many");
    let dir = tempfile::tempdir().unwrap();
    let runtime = RuntimeDir::at(dir.path().join("shmrc"));
    let manager = start_detached(&runtime, Duration::from_secs(5)).unwrap();
    let mut ours = Ours(vec![Pid::from_raw(manager as i32)]);
    // SAFETY: no thread of this process reads the environment now (this binary runs
    // one test, and no child exists yet).
    unsafe { std::env::set_var("SHMRC_RUNTIME_DIR", runtime.path()) };
    set_manager_mode(ManagerMode::Connect);
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(t.ns.clone());
    let (ready_read, ready_write) = pipe().unwrap();
    let (hold_read, hold_write) = pipe().unwrap();
    let started = Instant::now();
    for _ in 0..clients {
        // SAFETY: this process runs one test: no other thread holds a lock the child
        // needs; the child never returns into the harness (`child` ends in `_exit`).
        match unsafe { fork() }.unwrap() {
            ForkResult::Child => child(&options, &ready_write, &hold_read),
            ForkResult::Parent { child } => ours.0.push(child),
        }
    }
    drop(ready_write);
    drop(hold_read);
    // Every child answers (R or E) within the limit; a pipe's reads are bounded by it.
    let deadline = started + Duration::from_secs(120);
    let mut said = Vec::with_capacity(clients);
    let mut file = std::fs::File::from(ready_read);
    nix::fcntl::fcntl(
        &file,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    let mut chunk = [0u8; 4096];
    while said.len() < clients {
        assert!(
            Instant::now() < deadline,
            "{} of {clients} children answered in 120 s",
            said.len()
        );
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => said.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("reading the children's answers: {e}"),
        }
    }
    let failed = said.iter().filter(|b| **b == b'E').count();
    println!(
        "{clients} client processes created and held a buffer in {:?}, {failed} failed",
        started.elapsed()
    );
    assert_eq!(failed, 0, "creates failed with {clients} clients");
    assert_eq!(said.len(), clients);
    let status = status_at(&runtime).unwrap();
    assert!(
        status.clients as usize >= clients,
        "the manager watches {} clients of {clients}",
        status.clients
    );
    assert_eq!(t.names().len(), clients);

    // Every child SIGKILLed: the manager sweeps every death.
    let killed = Instant::now();
    for pid in &ours.0[1..] {
        kill(*pid, Signal::SIGKILL).unwrap();
    }
    for pid in &ours.0[1..] {
        waitpid(*pid, None).unwrap();
    }
    ours.0.truncate(1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !t.names().is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} segments of killed clients left after 60 s",
            t.names().len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "all {clients} deaths swept {:?} after the kills",
        killed.elapsed()
    );
    drop(hold_write);
    drop(ours);
}
