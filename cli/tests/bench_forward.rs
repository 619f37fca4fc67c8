//! `shmrc bench` runs the `shmrc-bench` program (its own package): found beside `shmrc`
//! first, then on `PATH`, with every argument passed on and its exit status kept; with
//! neither, an error that says how to get it (as JSON under `--json`). The real program
//! runs in `.ci/bench` (`shmrc bench --quick`) and in bench/tests/program.rs; here a
//! stand-in script records what it was given, since this package cannot build the
//! bench's binary.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// `shmrc` copied alone into `dir`, run there with `args` and this `PATH`.
fn lone_shmrc(dir: &Path, path: &str, args: &[&str]) -> Output {
    let shmrc = dir.join("shmrc");
    if !shmrc.exists() {
        std::fs::copy(env!("CARGO_BIN_EXE_shmrc"), &shmrc).expect("copy shmrc");
    }
    shmrc_testkit::process::output_within(
        Command::new(&shmrc).args(args).env("PATH", path),
        Duration::from_secs(60),
    )
}

/// A `shmrc-bench` stand-in in `dir` that prints its arguments and exits 3.
fn stand_in(dir: &Path) {
    let script = dir.join("shmrc-bench");
    std::fs::write(&script, "#!/bin/sh\necho \"ran with: $*\"\nexit 3\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn without_the_program_the_error_says_how_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = lone_shmrc(dir.path(), "/usr/bin:/bin", &["bench", "--quick"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("shmrc-bench") && stderr.contains("cargo install --locked --path bench"),
        "{stderr}"
    );

    let out = lone_shmrc(dir.path(), "/usr/bin:/bin", &["bench", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON error");
    assert!(
        doc["error"].as_str().unwrap().contains("shmrc-bench"),
        "{doc}"
    );
}

#[test]
fn the_program_beside_shmrc_gets_every_argument_and_gives_its_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    stand_in(dir.path());
    let out = lone_shmrc(
        dir.path(),
        "/usr/bin:/bin",
        &["bench", "--quick", "--only", "ping-pong", "--help"],
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ran with: --quick --only ping-pong --help\n"
    );
}

#[test]
fn the_program_on_path_is_found_when_none_is_beside_shmrc() {
    let (here, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    stand_in(elsewhere.path());
    let path = format!("{}:/usr/bin:/bin", elsewhere.path().display());
    let out = lone_shmrc(here.path(), &path, &["bench", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran with: --json\n");
}
