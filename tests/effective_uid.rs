//! `Os::uid` is the process's effective uid: a copy of this test binary run as `nobody`
//! (65534) says 65534. As root, which CI is, a `uid()` that answered 0 would pass every
//! other test unnoticed (cargo-mutants found it so). Not root: said so, and a failure
//! under `SHMRC_REQUIRE_ROOT=1`. (An integration test, not a unit test: it uses the test
//! kit, which the published tarball does not carry.)
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::process::CommandExt;
use std::time::Duration;

use shmrc::checkers::os::Os;
use shmrc::checkers::os::posix::PosixOs;
use shmrc_testkit::process::{copy_of_this_test, output_within, text_of};

/// The probe: prints `uid()` when run with `SHMRC_TEST_UID_PROBE` set; does nothing
/// otherwise.
#[test]
fn uid_probe() {
    if std::env::var_os("SHMRC_TEST_UID_PROBE").is_some() {
        println!("uid probe: {}", PosixOs::new().uid());
    }
}

#[test]
fn uid_is_the_effective_uid_of_an_unprivileged_process() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("SHMRC_REQUIRE_ROOT").as_deref() != Ok("1"),
            "SHMRC_REQUIRE_ROOT=1 but this test does not run as root"
        );
        eprintln!("uid_is_the_effective_uid: SKIPPED, not root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    let probe = copy_of_this_test(dir.path());
    let out = output_within(
        std::process::Command::new(probe)
            .args(["--exact", "uid_probe", "--nocapture"])
            .env("SHMRC_TEST_UID_PROBE", "1")
            .current_dir("/")
            .uid(65534)
            .gid(65534),
        Duration::from_secs(30),
    );
    let said = text_of(&out);
    assert!(said.contains("uid probe: 65534\n"), "{said}");
}
