//! `shmrc soak` on the real kernel: a short run passes, says what it did and leaves
//! nothing behind; a run whose names an outsider unlinks under it fails and says why.
//! CI runs 90 s of it (`.ci/run`); these keep the program itself honest.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shmrc_testkit::names::current_uid;
use shmrc_testkit::process::{output_within, wait_within};

/// A run's time limit: its seconds, its end's checks, and a slow machine's margin.
const LIMIT: Duration = Duration::from_secs(120);

/// The names of the soak with pid `pid` in `/dev/shm`.
fn soak_names(pid: u32) -> Vec<String> {
    let start = format!("shmrc-soak-{pid}.{}.", current_uid());
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(&start))
        .collect()
}

#[test]
fn a_short_soak_passes_says_what_it_did_and_leaves_nothing() {
    let output = output_within(
        Command::new(env!("CARGO_BIN_EXE_shmrc")).args([
            "soak",
            "--seconds",
            "8",
            "--workers",
            "3",
            "--seed",
            "29",
        ]),
        LIMIT,
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    println!("{text}{errors}");
    assert!(output.status.success(), "the soak failed:\n{text}{errors}");
    for said in [
        "soak: seed 29,",
        "soak: operations ",
        "share over the socket",
        "share as bytes",
        "manager SIGKILLs 2, manager SIGSTOPs 1",
        "soak: death-to-sweep: ",
        " p50 ",
        " p99 ",
        "soak: passed",
    ] {
        assert!(text.contains(said), "no {said:?} in:\n{text}");
    }
    let kills = text
        .lines()
        .find_map(|l| l.strip_prefix("soak: kills: workers "))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u32>().ok())
        .expect("a count of worker kills");
    assert!(kills > 0, "no worker was killed:\n{text}");
}

#[test]
fn a_soak_whose_names_are_unlinked_under_it_fails_and_says_why() {
    let log = tempfile::tempdir().unwrap();
    let out = std::fs::File::create(log.path().join("out")).unwrap();
    let err = std::fs::File::create(log.path().join("err")).unwrap();
    let mut soak = Command::new(env!("CARGO_BIN_EXE_shmrc"))
        .args(["soak", "--seconds", "6", "--workers", "3", "--seed", "7"])
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap();
    // An outsider of the same user unlinks the soak's names while its workers hold them.
    let pid = soak.id();
    let mut unlinked = 0;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        if Instant::now() + Duration::from_secs(2) < until {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        for name in soak_names(pid) {
            unlinked += usize::from(std::fs::remove_file(format!("/dev/shm/{name}")).is_ok());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = wait_within(&mut soak, LIMIT);
    let text = std::fs::read_to_string(log.path().join("out")).unwrap();
    let errors = std::fs::read_to_string(log.path().join("err")).unwrap();
    println!("unlinked {unlinked} names\n{text}{errors}");
    assert!(unlinked > 0, "the soak had no names to unlink");
    assert!(!status.success(), "the soak passed with its names unlinked");
    assert!(text.contains("soak: FAILED"), "{text}");
    assert!(
        errors.contains("missing from /dev/shm") || errors.contains("-> gone "),
        "no failure names a missing or gone buffer:\n{errors}"
    );
    assert!(soak_names(pid).is_empty(), "the soak left names behind");
}
