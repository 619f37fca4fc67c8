//! The harness's error paths: a subscriber process that dies (at once, or in the middle
//! of a run) and bad arguments each end the run with an error naming the cause, never a
//! hang or a number; and a quick run reports every contender and leaves nothing behind.

use std::path::Path;
use std::process::Command;

use shmrc_iceoryx2_compare::Error;
use shmrc_iceoryx2_compare::peer::{DOMAIN_ENV, NAMESPACE_ENV, Peer, READY};
use shmrc_iceoryx2_compare::rounds::{Receive, RoundTrip};
use shmrc_iceoryx2_compare::shmrc_pool::PoolHandOff;
use shmrc_iceoryx2_compare::shmrc_pubsub::PubSub;

const PROGRAM: &str = env!("CARGO_BIN_EXE_shmrc-iceoryx2-compare");

fn program() -> &'static Path {
    Path::new(PROGRAM)
}

#[test]
fn a_peer_that_exits_at_once_is_reported_with_its_exit_status() {
    let mut peer = Peer::spawn(program(), &["no-such-role".into()]).unwrap();
    match peer.expect(READY) {
        Err(Error::Peer(why)) => {
            assert!(why.contains("closed its control socket"), "{why}");
            assert!(why.contains("exit status: 1"), "{why}");
        }
        other => panic!("expected a peer error, got {other:?}"),
    }
}

/// Kills every subscriber of `contender` (by the pids it started), then expects one
/// of the next rounds to fail on them.
fn killed_subscribers_fail_a_round(contender: &mut dyn RoundTrip, pids: Vec<u32>) {
    contender.round(0, 1).unwrap();
    for pid in pids {
        assert_eq!(sigkill(pid), 0);
    }
    let mut failed = None;
    for seq in 1..4 {
        if let Err(e) = contender.round(seq, 1) {
            failed = Some(e);
            break;
        }
    }
    match failed {
        Some(Error::Peer(_) | Error::Shmrc(_)) => {}
        other => panic!("expected the round to fail on the dead subscriber, got {other:?}"),
    }
}

#[test]
fn a_pool_subscriber_killed_in_the_middle_of_a_run_fails_the_round() {
    let mut contender = PoolHandOff::start(program(), 4096, 1).unwrap();
    let pids = contender.subscriber_pids();
    killed_subscribers_fail_a_round(&mut contender, pids);
}

#[test]
fn a_pubsub_subscriber_killed_in_the_middle_of_a_run_fails_the_round() {
    let mut contender = PubSub::start(program(), Receive::Blocking, 4096, 2).unwrap();
    let pids = contender.subscriber_pids();
    killed_subscribers_fail_a_round(&mut contender, pids);
    drop(contender);
    // The dead subscribers' ack services and whatever they held: swept.
    shmrc_iceoryx2_compare::shmrc_pubsub::remove_namespace().unwrap();
    let ns = shmrc_iceoryx2_compare::shmrc_pubsub::namespace().unwrap();
    let left = shmrc::inspect(&ns).unwrap();
    assert!(left.segments.is_empty(), "left: {left:?}");
}

/// SIGKILL by pid through `kill(1)` (the package denies `unsafe`).
fn sigkill(pid: u32) -> i32 {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    status.code().unwrap_or(-1)
}

fn run_with(args: &[&str]) -> (bool, String, String) {
    run_in(args, &[])
}

/// Runs the program with `args` and the environment variables `vars` set.
fn run_in(args: &[&str], vars: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(PROGRAM)
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_arguments_are_refused_with_the_cause() {
    for (args, cause) in [
        (&["run", "--sizes", "4"][..], "at least 9 bytes"),
        (&["run", "--subscribers", "0"][..], "positive numbers"),
        (&["run", "--rounds"][..], "needs a value"),
        (&["run", "--passes", "x"][..], "positive numbers"),
        (
            &["run", "--only", "everything"][..],
            "expected round-trip or recovery",
        ),
        (&["run", "--fast"][..], "unknown option"),
        (&["child", "nope"][..], "child role"),
        (
            &["child", "iceoryx2", "sideways", "tag"][..],
            "expected blocking or polling",
        ),
        (&[][..], "usage"),
    ] {
        let (ok, stdout, stderr) = run_with(args);
        assert!(!ok, "{args:?} succeeded");
        assert!(stdout.is_empty(), "{args:?} printed rows: {stdout}");
        assert!(stderr.contains(cause), "{args:?}: {stderr}");
    }
}

/// The run gets a shmrc namespace and an iceoryx2 domain of its own, named by this
/// test, and only their names are looked for afterwards: the other tests of this file
/// run at the same time in this process's own namespace and domain (the pub/sub test
/// above holds a data service, two dead subscribers' ack services and their samples
/// until its round fails, for up to `PEER_TIMEOUT` when its publish came within the
/// liveness cache's millisecond), and a look at every `shmrc-compare-` name once took
/// them for this run's leftovers (CI, 2026-11-27: 15 names, all of the test process's
/// namespace).
#[test]
fn a_quick_run_reports_every_contender_and_leaves_nothing_behind() {
    let namespace = format!("shmrc-compare-quick-{}", std::process::id());
    let domain = format!("shmrc_compare_quick_{}_", std::process::id());
    let (ok, stdout, stderr) = run_in(
        &[
            "run",
            "--rounds",
            "50",
            "--passes",
            "2",
            "--sizes",
            "4096",
            "--subscribers",
            "2",
            "--recovery-trials",
            "1",
        ],
        &[(NAMESPACE_ENV, &namespace), (DOMAIN_ENV, &domain)],
    );
    assert!(ok, "{stderr}");
    for contender in [
        "\"contender\":\"floor\",\"receive\":\"blocking\"",
        "\"contender\":\"shmrc-pool\",\"receive\":\"blocking\"",
        "\"contender\":\"shmrc-pubsub\",\"receive\":\"blocking\"",
        "\"contender\":\"shmrc-pubsub\",\"receive\":\"polling\"",
        "\"kind\":\"recovery\",\"contender\":\"shmrc-pubsub\"",
        "\"contender\":\"iceoryx2\",\"receive\":\"blocking\"",
        "\"contender\":\"iceoryx2\",\"receive\":\"polling\"",
        "\"kind\":\"recovery\",\"contender\":\"shmrc-pool\"",
        "\"kind\":\"recovery\",\"contender\":\"iceoryx2\",\"cleanup\":\"none\"",
        "\"kind\":\"recovery\",\"contender\":\"iceoryx2\",\"cleanup\":\"try_cleanup_dead_nodes\"",
    ] {
        assert!(stdout.contains(contender), "no {contender} in\n{stdout}");
    }
    // A shmrc name is `NAMESPACE.UID.…`; an iceoryx2 one starts with its domain.
    let ours = |name: &str| name.starts_with(&format!("{namespace}.")) || name.starts_with(&domain);
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| ours(name))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
    let root = Path::new("/tmp").join(&domain);
    assert!(
        !root.exists(),
        "the iceoryx2 domain's root {root:?} is left"
    );
}
