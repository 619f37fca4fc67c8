//! What shmrc reads from its environment, and what a caller cannot make it do with it.
//!
//! - A setuid-root copy of this test binary, run by a throwaway unprivileged user with
//!   `SHMRC_MANAGER_PROGRAM`, `SHMRC_RUNTIME_DIR`, `XDG_RUNTIME_DIR` and the other
//!   `SHMRC_*` variables set to the attacker's choices, makes a file_system buffer: the
//!   attacker's script never runs, no directory appears where the attacker asked, and
//!   the create either works or fails with an error that recommends no variable
//!   (issue 26, item 1).
//! - A relative `SHMRC_RUNTIME_DIR` or `XDG_RUNTIME_DIR`, or a strategy variable that
//!   names no strategy, is an error naming the variable at once; nothing is created
//!   anywhere (item 5).
//!
//! Each case runs in a child process (a copy of this test binary in a role), since the
//! environment is process-wide and read once. The setuid test needs root: without it
//! the test says so, and fails where `SHMRC_REQUIRE_ROOT=1` (as `.ci/run` sets it).
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{copy_of_this_test, output_within, test_role, text_of};
use shmrc_testkit::users::{ThrowawayUser, cannot_attack};

/// The variable that gives a probe its action.
const PROBE_ACTION: &str = "SHMRC_TEST_PROBE_ACTION";
/// The namespace the probe creates in.
const PROBE_NAMESPACE: &str = "SHMRC_TEST_PROBE_NAMESPACE";

/// The probe: does what `SHMRC_TEST_PROBE_ACTION` says and prints one line per
/// outcome (`euid=N ruid=N`, then `created NAME` or `error: WHY`). Returns at once in a
/// normal test run.
#[test]
fn probe() {
    let Ok(action) = std::env::var(PROBE_ACTION) else {
        return;
    };
    println!(
        "probe: euid={} ruid={}",
        nix::unistd::geteuid(),
        nix::unistd::getuid()
    );
    let namespace = std::env::var(PROBE_NAMESPACE)
        .ok()
        .map(|prefix| Namespace::new(prefix).expect("a valid namespace"));
    let outcome = match action.as_str() {
        // A file_system create, in the namespace given, through the default path
        // (the manager in its mode from the environment).
        "create_file_system" => ShmBuf::with_options(
            4096,
            &CreateOptions::new()
                .strategy(Strategy::FileSystem)
                .namespace(namespace.expect("a namespace")),
        )
        .map(|buf| buf.name().unwrap_or("?").to_owned()),
        // A create with the process-wide strategy (from the environment).
        "create_default" => {
            let mut options = CreateOptions::new();
            if let Some(ns) = namespace {
                options = options.namespace(ns);
            }
            ShmBuf::with_options(4096, &options).map(|buf| format!("{:?}", buf.strategy()))
        }
        // The manager's status: reads the runtime directory from the environment.
        "status" => shmrc::manager::status().map(|s| format!("manager pid {}", s.pid)),
        other => panic!("unknown probe action {other:?}"),
    };
    match outcome {
        Ok(what) => println!("probe: created {what}"),
        Err(e) => println!("probe: error: {e}"),
    }
}

/// Runs the probe with `action` and the environment `vars` (and nothing else of this
/// process's shmrc environment), in `cwd`; returns what it printed.
fn run_probe(action: &str, vars: &[(&str, &str)], cwd: &Path) -> String {
    let mut command = test_role("probe");
    strip_shmrc_environment(&mut command);
    command
        .env(PROBE_ACTION, action)
        .envs(vars.iter().copied())
        .current_dir(cwd);
    let out = output_within(&mut command, Duration::from_secs(60));
    let said = text_of(&out);
    assert!(out.status.success(), "the probe failed: {said}");
    said
}

/// Removes every variable shmrc reads from `command`'s environment.
fn strip_shmrc_environment(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("SHMRC_") || name == "XDG_RUNTIME_DIR" {
            command.env_remove(&*name);
        }
    }
}

/// The probe's one outcome line.
fn outcome(said: &str) -> &str {
    said.lines()
        .find(|l| l.starts_with("probe: created ") || l.starts_with("probe: error: "))
        .unwrap_or_else(|| panic!("the probe said no outcome: {said}"))
}

#[test]
fn a_relative_runtime_dir_is_refused_at_once_and_nothing_is_created() {
    let t = TestNamespace::new("envrel");
    let cwd = tempfile::tempdir().unwrap();
    let relative = format!("shmrc-relative-{}", std::process::id());
    let at_root = Path::new("/").join(&relative);
    let guard = RemoveOnDrop(vec![at_root.clone()]);
    for variable in ["SHMRC_RUNTIME_DIR", "XDG_RUNTIME_DIR"] {
        let said = run_probe(
            "create_file_system",
            &[
                (variable, relative.as_str()),
                ("SHMRC_MANAGER", "auto"),
                (PROBE_NAMESPACE, t.ns.prefix()),
            ],
            cwd.path(),
        );
        let line = outcome(&said);
        assert!(line.starts_with("probe: error: "), "{said}");
        assert!(
            line.contains(&format!("{variable}=")),
            "names the variable: {line}"
        );
        assert!(line.contains("relative"), "says why: {line}");
        // Neither the client (against its cwd) nor a manager (against /) made it.
        assert!(!cwd.path().join(&relative).exists(), "created in the cwd");
        assert!(!at_root.exists(), "created at {}", at_root.display());
        // The manager's status reads the same directory, and refuses the same way.
        let said = run_probe("status", &[(variable, relative.as_str())], cwd.path());
        assert!(outcome(&said).contains(&format!("{variable}=")), "{said}");
    }
    assert!(t.names().is_empty(), "left {:?}", t.names());
    drop(guard);
}

#[test]
fn a_strategy_variable_that_names_no_strategy_is_an_error_naming_it() {
    let t = TestNamespace::new("envstrategy");
    let cwd = tempfile::tempdir().unwrap();
    let said = run_probe(
        "create_default",
        &[
            ("SHMRC_SHARING_STRATEGY", "bogus"),
            ("SHMRC_MANAGER", "off"),
            (PROBE_NAMESPACE, t.ns.prefix()),
        ],
        cwd.path(),
    );
    let line = outcome(&said);
    assert!(line.starts_with("probe: error: "), "{said}");
    assert!(line.contains("SHMRC_SHARING_STRATEGY=\"bogus\""), "{line}");
    // A good value is used.
    let said = run_probe(
        "create_default",
        &[
            ("SHMRC_SHARING_STRATEGY", "file_system"),
            ("SHMRC_MANAGER", "off"),
            (PROBE_NAMESPACE, t.ns.prefix()),
        ],
        cwd.path(),
    );
    assert_eq!(outcome(&said), "probe: created FileSystem", "{said}");
    assert!(t.names().is_empty(), "left {:?}", t.names());
}

#[test]
fn a_bad_manager_mode_or_grace_is_an_error_naming_the_variable() {
    let t = TestNamespace::new("envmode");
    let cwd = tempfile::tempdir().unwrap();
    let said = run_probe(
        "create_file_system",
        &[("SHMRC_MANAGER", "bogus"), (PROBE_NAMESPACE, t.ns.prefix())],
        cwd.path(),
    );
    assert!(outcome(&said).contains("SHMRC_MANAGER=\"bogus\""), "{said}");
    assert!(t.names().is_empty(), "left {:?}", t.names());
}

/// The attack of issue 26, item 1: a setuid-root program linking shmrc, run by an
/// unprivileged user who chose its environment.
#[test]
fn a_setuid_program_reads_no_shmrc_variable_and_starts_no_program_of_its_callers() {
    const TEST: &str = "a_setuid_program_reads_no_shmrc_variable";
    let user = match ThrowawayUser::create("suid") {
        Ok(user) => user,
        Err(why) => return cannot_attack(TEST, &why),
    };
    let t = TestNamespace::new("envsuid");
    // A root-owned directory that the user can enter but not write in: whatever appears
    // in it was made by root, on the user's word.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let marker = dir.path().join("evil-ran");
    let evil = dir.path().join("evil.sh");
    std::fs::write(
        &evil,
        format!("#!/bin/sh\nid > {}\nexit 1\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    let chosen_runtime = dir.path().join("chosen-runtime");
    let chosen_xdg = dir.path().join("chosen-xdg");
    let probe = copy_of_this_test(dir.path());
    // Owned by root (the copy is), setuid.
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o4755)).unwrap();

    let mut command = Command::new(&probe);
    strip_shmrc_environment(&mut command);
    command
        .args(["--exact", "probe", "--nocapture", "--test-threads=1"])
        .env(PROBE_ACTION, "create_file_system")
        .env(PROBE_NAMESPACE, t.ns.prefix())
        .env("SHMRC_MANAGER_PROGRAM", &evil)
        .env("SHMRC_MANAGER", "auto")
        .env("SHMRC_RUNTIME_DIR", &chosen_runtime)
        .env("XDG_RUNTIME_DIR", &chosen_xdg)
        .env("SHMRC_MANAGER_GRACE_MS", "100")
        .env("SHMRC_SHARING_STRATEGY", "file_descriptor")
        .current_dir(dir.path())
        .uid(user.uid)
        .gid(user.gid);
    let out = output_within(&mut command, Duration::from_secs(60));
    let said = text_of(&out);
    println!("{said}");
    assert!(out.status.success(), "the probe failed: {said}");
    // The attack was set up: the probe ran as the user, with euid 0.
    let ids = format!("probe: euid=0 ruid={}", user.uid);
    if !said.contains(&ids) {
        return cannot_attack(
            TEST,
            &format!("the setuid copy did not run with euid 0 (no '{ids}'): {said}"),
        );
    }
    let evil_ran = std::fs::read_to_string(&marker).ok();
    assert_eq!(evil_ran, None, "the caller's program ran: {said}");
    assert!(!chosen_runtime.exists(), "root created SHMRC_RUNTIME_DIR");
    assert!(!chosen_xdg.exists(), "root created in XDG_RUNTIME_DIR");
    let line = outcome(&said);
    if let Some(why) = line.strip_prefix("probe: error: ") {
        // Failing is allowed, clearly, and without advice to set a variable.
        assert!(why.contains("privileges"), "says why: {why}");
        assert!(!why.contains("SHMRC_MANAGER_PROGRAM="), "{why}");
        assert!(!why.contains("SHMRC_MANAGER=off"), "{why}");
    }
    drop(t);
    drop(user);
}

/// Removes its paths (files or directories) when dropped, whatever the outcome.
struct RemoveOnDrop(Vec<std::path::PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_dir_all(path).or_else(|_| std::fs::remove_file(path));
        }
    }
}
