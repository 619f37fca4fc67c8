//! A stopped manager stalls nothing that does not need its answer (issue 29, item 3).
//!
//! The test starts a manager of its own (a private runtime directory), and a client
//! process that says Hello, creates in one namespace and attaches 1,024 segments of
//! another, one by one (the most a manager is told of singly). Then it SIGSTOPs the manager:
//! - in the client, one thread attaches a 1,025th segment, which needs a Watch answered; it
//!   waits the client's timeout and fails with `Error::ManagerTimeout` naming the
//!   manager's pid. Meanwhile three threads create (in the told namespace, and in a new
//!   one: a request written, no answer awaited) and must not wait for that answer;
//! - a fresh client, whose four threads all need the Hello answered, waits once: all
//!   four fail with `ManagerTimeout` after about one timeout together, not one each.
//!
//! Afterwards the manager is continued and stopped, by its pid; every namespace is
//! emptied. Bounds are liveness bounds (the stall they rule out is 10 s a thread), not
//! performance measurements.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use shmrc::manager::RuntimeDir;
use shmrc::manager::start_detached;
use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
use shmrc_testkit::data::{hex, unhex};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{Talker, output_within, test_role};

const CREATE_NS: &str = "SHMRC_TEST_STALL_CREATE_NS";
const NEW_NS: &str = "SHMRC_TEST_STALL_NEW_NS";
const HANDLES: &str = "SHMRC_TEST_STALL_HANDLES";
const ROLE: &str = "SHMRC_TEST_STALL_ROLE";
/// Segments attached one by one before the manager is asked to watch their namespace
/// whole.
const TOLD_ONE_BY_ONE: usize = shmrc::checkers::manager::registry::MAX_SEGMENTS_PER_NAMESPACE;

fn options(prefix: &str) -> CreateOptions {
    CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(Namespace::new(prefix).unwrap())
}

/// The clients. `watched`: Hello, a create, 1,024 attaches, then on "go" the stalled
/// Watch beside three creates. `fresh`: four threads that each need the Hello.
#[test]
fn client() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let create_ns = std::env::var(CREATE_NS).unwrap();
    let new_ns = std::env::var(NEW_NS).unwrap();
    match role.as_str() {
        "watched" => {
            let handles: Vec<Vec<u8>> = std::fs::read_to_string(std::env::var(HANDLES).unwrap())
                .unwrap()
                .lines()
                .map(unhex)
                .collect();
            let mut held = vec![ShmBuf::with_options(64, &options(&create_ns)).unwrap()];
            for bytes in &handles[..TOLD_ONE_BY_ONE] {
                held.push(ShmBuf::attach(ShareHandle::from_bytes(bytes).unwrap()).unwrap());
            }
            println!("client: ready");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            let last = handles[TOLD_ONE_BY_ONE].clone();
            let started = Instant::now();
            let watch = std::thread::spawn(move || {
                let outcome = ShareHandle::from_bytes(&last).and_then(ShmBuf::attach);
                (outcome.map(|b| b.len()), started.elapsed())
            });
            // Let the Watch be sent and awaited first.
            std::thread::sleep(Duration::from_millis(300));
            let creators: Vec<_> = [&create_ns, &new_ns, &create_ns]
                .into_iter()
                .map(|ns| {
                    let options = options(ns);
                    std::thread::spawn(move || {
                        let t = Instant::now();
                        let outcome = ShmBuf::with_options(64, &options).map(|b| b.len());
                        (outcome, t.elapsed())
                    })
                })
                .collect();
            for creator in creators {
                let (outcome, took) = creator.join().unwrap();
                println!(
                    "client: create {:?} in {} ms",
                    outcome.map_err(|e| e.to_string()),
                    took.as_millis()
                );
            }
            let (outcome, took) = watch.join().unwrap();
            match outcome {
                Err(e @ Error::ManagerTimeout { .. }) => {
                    println!("client: watch timeout {e:?} after {} ms", took.as_millis())
                }
                other => println!(
                    "client: watch other {other:?} after {} ms",
                    took.as_millis()
                ),
            }
            drop(held);
        }
        "fresh" => {
            let barrier = Arc::new(Barrier::new(4));
            let started = Instant::now();
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let barrier = barrier.clone();
                    let options = options(&new_ns);
                    std::thread::spawn(move || {
                        barrier.wait();
                        ShmBuf::with_options(64, &options).map(|b| b.len())
                    })
                })
                .collect();
            for thread in threads {
                match thread.join().unwrap() {
                    Err(e @ Error::ManagerTimeout { .. }) => {
                        println!("client: fresh timeout {e:?}")
                    }
                    other => println!("client: fresh other {other:?}"),
                }
            }
            println!(
                "client: fresh all done in {} ms",
                started.elapsed().as_millis()
            );
        }
        other => panic!("unknown role {other}"),
    }
}

/// Continues and kills the manager this test started, by its pid, whatever the outcome.
struct StoppedManager(u32);

impl Drop for StoppedManager {
    fn drop(&mut self) {
        let pid = Pid::from_raw(self.0 as i32);
        let _ = kill(pid, Signal::SIGCONT);
        let _ = kill(pid, Signal::SIGKILL);
    }
}

fn millis(line: &str, after: &str) -> u128 {
    let at = line
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} in {line}"))
        + after.len();
    line[at..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a number after {after:?} in {line}"))
}

#[test]
fn a_stopped_manager_stalls_only_what_needs_its_answer_and_only_once() {
    let (created, attached, added, fresh) = (
        TestNamespace::new("stallc"),
        TestNamespace::new("stalla"),
        TestNamespace::new("stalln"),
        TestNamespace::new("stallf"),
    );
    let dir = tempfile::tempdir().unwrap();
    let runtime = RuntimeDir::at(dir.path().join("shmrc"));
    let manager = StoppedManager(start_detached(&runtime, Duration::from_secs(30)).unwrap());

    // 1,025 segments for the client to attach (this process keeps the manager off).
    let bufs: Vec<_> = (0..=TOLD_ONE_BY_ONE)
        .map(|_| ShmBuf::with_options(64, &options(attached.ns.prefix())).unwrap())
        .collect();
    let handles: Vec<String> = bufs
        .iter()
        .map(|b| hex(&b.share().unwrap().into_bytes().unwrap()))
        .collect();
    let handles_file = dir.path().join("handles");
    std::fs::write(&handles_file, handles.join("\n")).unwrap();

    let mut watched = test_role("client");
    watched
        .env(ROLE, "watched")
        .env(CREATE_NS, created.ns.prefix())
        .env(NEW_NS, added.ns.prefix())
        .env(HANDLES, &handles_file)
        .env("SHMRC_RUNTIME_DIR", runtime.path())
        .env("SHMRC_MANAGER", "connect");
    let mut watched = Talker::start(&mut watched, Duration::from_secs(60));
    watched.expect("client: ready");
    kill(Pid::from_raw(manager.0 as i32), Signal::SIGSTOP).unwrap();
    watched.tell("go");
    for _ in 0..3 {
        let line = watched.expect("client: create ");
        assert!(
            line.contains("Ok(64)"),
            "a create that needs no answer failed: {line}"
        );
        assert!(
            millis(&line, " in ") < 3_000,
            "a create that needs no answer waited for the stopped manager: {line}"
        );
    }
    let line = watched.expect("client: watch ");
    assert!(line.contains("timeout"), "{line}");
    assert!(
        line.contains(&format!("pid: Some({})", manager.0)),
        "names the manager: {line}"
    );
    watched.finish();

    let mut fresh_client = test_role("client");
    fresh_client
        .env(ROLE, "fresh")
        .env(CREATE_NS, created.ns.prefix())
        .env(NEW_NS, fresh.ns.prefix())
        .env("SHMRC_RUNTIME_DIR", runtime.path())
        .env("SHMRC_MANAGER", "connect");
    let out = output_within(&mut fresh_client, Duration::from_secs(90));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}");
    assert_eq!(said.matches("client: fresh timeout").count(), 4, "{said}");
    let all = said
        .lines()
        .find(|l| l.contains("client: fresh all done in "))
        .unwrap_or_else(|| panic!("{said}"));
    // One wait (the client's 10 s timeout) for the four, not four in a row.
    assert!(
        millis(all, "done in ") < 25_000,
        "the threads waited one after another: {all}"
    );

    drop(manager);
    drop(bufs);
    for ns in [&created, &attached, &added, &fresh] {
        // The killed client's and manager's leftovers: this test's to remove.
        let _ = ns.names();
    }
}
