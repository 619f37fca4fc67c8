//! The real kernel's liveness (`src/os/posix/process.rs`), in the cases the simulated
//! kernel cannot reach, each made to happen for real:
//! - **pid reuse**: in a pid namespace of its own (`unshare --pid --fork --mount-proc`),
//!   a probe runs a process to its end, sets `ns_last_pid` so that the next process
//!   gets the very same pid, and checks that the first process's token counts as dead
//!   while the new one's counts as alive (the start time tells them apart);
//! - **a process hidden from `/proc`** (in a mount namespace of its own, a probe
//!   bind-mounts a directory over the target's `/proc/<pid>`): one whose `stat` is a
//!   directory (the read fails), one whose `stat` is empty (nothing to parse), one
//!   whose `stat` names another pid, an empty one (no entry: the kernel is asked with `kill(pid, 0)`) — each counts as alive
//!   while the process runs; the last counts as dead once the process has gone;
//! - **a `/proc` of another pid namespace** (a new pid namespace with the old `/proc`):
//!   asking for this process's token stops the program with a message saying why,
//!   rather than making up a token.
//!
//! Zombies (dead), a zombie leader whose other thread runs (alive), and a zombie reaped
//! while its liveness is being asked (dead, whatever step the asking is at) are checked
//! by `tests/os_conformance.rs` (`posix_only`).
//!
//! The namespaces need root and util-linux's `unshare` and `mount`. Where they are
//! missing the tests say so and pass, unless `SHMRC_REQUIRE_ROOT=1` (set by `.ci/run`
//! when it runs as root), which makes that a failure. Every child runs under a time
//! limit and is killed by its pid past it; a pid namespace dies with its first process.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use shmrc::Token;
use shmrc::checkers::os::Os;
use shmrc::checkers::os::posix::PosixOs;
use shmrc::checkers::token::TokenExt;
use shmrc_testkit::process::output_within;
use shmrc_testkit::users::namespaces_unavailable;

/// The variable that tells a copy of this binary which role to play.
const ROLE: &str = "SHMRC_LIVENESS_ROLE";
/// How long a probe (with everything it starts) may take.
const PROBE_LIMIT: Duration = Duration::from_secs(30);
/// How long a target sleeps at most, should nobody kill it.
const TARGET_LIFE: Duration = Duration::from_secs(20);
/// How long a target may take to say its token, or a state to be reached.
const STEP_LIMIT: Duration = Duration::from_secs(10);

/// Whether a namespace test can run; panics when it cannot and `SHMRC_REQUIRE_ROOT=1`.
fn can_use_namespaces(test: &str) -> bool {
    let Some(why) = namespaces_unavailable() else {
        return true;
    };
    let required = std::env::var("SHMRC_REQUIRE_ROOT").is_ok_and(|v| v == "1");
    assert!(!required, "SHMRC_REQUIRE_ROOT=1 but {why}");
    eprintln!("{test}: skipped: {why}");
    false
}

/// This test binary, to run as `role` (the `liveness_probe` test, which does nothing
/// unless [`ROLE`] is set).
fn this_binary(role: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args([
            "--exact",
            "liveness_probe",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role);
    command
}

/// Runs `role` under `unshare ARGS` with the time limit; returns what it printed, and
/// fails the test (with its output) unless it succeeded.
fn probe(unshare: &[&str], role: &str) -> String {
    let inner = this_binary(role);
    let mut command = Command::new("unshare");
    command.args(unshare).arg(inner.get_program());
    command.args(inner.get_args());
    command.env(ROLE, role);
    let out = output_within(&mut command, PROBE_LIMIT);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the probe {role} failed: {said}");
    said
}

/// A target: a copy of this binary that prints its token and sleeps (or exits at once,
/// or keeps a thread alive after its main thread exits).
fn start_target(role: &str) -> (Child, Token) {
    let mut child = this_binary(role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a target");
    let token = read_token(&mut child);
    (child, token)
}

/// The token line a target prints first. It prints at once; if it died first, the line
/// never comes and the read ends at end of file. The rest of its output is drained by
/// a thread (which ends when the target does), so that it never writes to a closed pipe.
fn read_token(child: &mut Child) -> Token {
    let mut lines = BufReader::new(child.stdout.take().expect("stdout"));
    loop {
        let mut line = String::new();
        let n = lines
            .read_line(&mut line)
            .expect("read the target's output");
        assert!(n > 0, "the target ended without saying its token");
        // The harness may have begun the line ("test liveness_probe ... token N").
        if let Some((_, word)) = line.split_once("token ") {
            let word = word.trim().parse().expect("a token word");
            std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
            return Token::from_word(word).expect("a valid token");
        }
    }
}

/// The pid `/proc/<pid>/stat` names (its first field), if it can be read.
fn stat_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.split(' ').next()?.parse().ok()
}

/// Kills our child `child` by its pid and reaps it.
fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `mount ARGS`, failing the test if it fails.
fn mount(args: &[&str]) {
    let out = output_within(Command::new("mount").args(args), STEP_LIMIT);
    assert!(
        out.status.success(),
        "mount {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The roles a copy of this binary plays. Not a test of its own: without [`ROLE`] it
/// returns at once.
#[test]
fn liveness_probe() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    match role.as_str() {
        "target-exit" => println!("token {}", PosixOs::new().current().word()),
        "target-sleep" => {
            println!("token {}", PosixOs::new().current().word());
            std::thread::sleep(TARGET_LIFE);
        }
        "pid-reuse" => pid_reuse(),
        "hidden-proc" => hidden_proc(),
        "own-token" => {
            let token = PosixOs::new().current();
            println!("own token {token} (pid {})", std::process::id());
        }
        other => panic!("unknown role {other}"),
    }
}

/// Inside a pid namespace of its own: a process's pid is given to the next one.
fn pid_reuse() {
    assert_eq!(
        std::process::id(),
        1,
        "the probe is the namespace's first process"
    );
    let os = PosixOs::new();
    let (mut first, old) = start_target("target-exit");
    let status = first.wait().expect("reap the first target");
    assert!(status.success());
    assert!(
        !os.is_alive(old),
        "an exited, reaped process counts as alive"
    );
    // A start time in clock ticks tells two processes of one pid apart only if they
    // started in different ticks (10 ms at 100 Hz): wait a few.
    std::thread::sleep(Duration::from_millis(50));
    std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", old.pid() - 1))
        .expect("write ns_last_pid");
    let (mut second, new) = start_target("target-sleep");
    assert_eq!(new.pid(), old.pid(), "the pid was not reused");
    assert_ne!(new.start_ticks(), old.start_ticks());
    let old_alive = os.is_alive(old);
    let new_alive = os.is_alive(new);
    kill(&mut second);
    println!(
        "pid {} reused: old token alive {old_alive}, new token alive {new_alive}",
        old.pid()
    );
    assert!(
        !old_alive,
        "the old token {old} counts as alive: its pid now names another process"
    );
    assert!(
        new_alive,
        "the new token {new} counts as dead while it runs"
    );
    assert!(
        !os.is_alive(new),
        "the new token counts as alive after it was killed and reaped"
    );
}

/// Inside a mount namespace of its own: each way of hiding a live process's `/proc`
/// entry, and the same process once gone.
fn hidden_proc() {
    let os = PosixOs::new();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    // Each is bind-mounted over `/proc/PID` (a directory can only cover a directory).
    let unreadable = scratch.path().join("unreadable");
    std::fs::create_dir_all(unreadable.join("stat")).expect("a directory named stat");
    let unparseable = scratch.path().join("unparseable");
    std::fs::create_dir(&unparseable).expect("a directory");
    std::fs::write(unparseable.join("stat"), b"").expect("an empty stat");
    let empty = scratch.path().join("empty");
    std::fs::create_dir(&empty).expect("an empty directory");
    // A `stat` that names another process (this probe): the pid asked is not the one
    // read, so it tells nothing about the token's process.
    let another = scratch.path().join("another");
    std::fs::create_dir(&another).expect("a directory");
    std::fs::write(
        another.join("stat"),
        std::fs::read("/proc/self/stat").expect("this probe's stat"),
    )
    .expect("a stat of another pid");
    let ways = [
        (
            "/proc/PID/stat unreadable (a directory)",
            &unreadable,
            false,
        ),
        ("/proc/PID/stat unparseable (empty)", &unparseable, false),
        ("/proc/PID/stat naming another pid", &another, false),
        ("/proc/PID hidden (no stat entry)", &empty, true),
    ];
    for (what, cover, asks_the_kernel) in ways {
        let (mut target, token) = start_target("target-sleep");
        let pid = token.pid();
        let at = format!("/proc/{pid}");
        mount(&["--bind", cover.to_str().expect("a UTF-8 path"), &at]);
        assert_ne!(
            stat_pid(pid),
            Some(pid),
            "{what}: /proc/{pid}/stat still names {pid}"
        );
        let alive = os.is_alive(token);
        kill(&mut target);
        // Gone: a hidden entry must not make a dead process count as alive when the
        // kernel can be asked (no entry: `kill(pid, 0)`).
        let dead_alive = os.is_alive(token);
        println!("{what}: alive while running {alive}, after it was reaped {dead_alive}");
        assert!(alive, "{what}: a running process counts as dead");
        if asks_the_kernel {
            assert!(!dead_alive, "{what}: a reaped process counts as alive");
        }
    }
}

#[test]
fn a_token_whose_pid_was_reused_counts_as_dead() {
    if !can_use_namespaces("a_token_whose_pid_was_reused_counts_as_dead") {
        return;
    }
    let said = probe(
        &["--pid", "--fork", "--mount-proc", "--kill-child"],
        "pid-reuse",
    );
    assert!(
        said.contains("old token alive false, new token alive true"),
        "{said}"
    );
}

#[test]
fn a_running_process_hidden_from_proc_counts_as_alive() {
    if !can_use_namespaces("a_running_process_hidden_from_proc_counts_as_alive") {
        return;
    }
    let said = probe(&["--mount", "--propagation", "private"], "hidden-proc");
    assert_eq!(
        said.matches("alive while running true").count(),
        4,
        "{said}"
    );
}

#[test]
fn a_proc_of_another_pid_namespace_stops_the_program_with_the_reason() {
    if !can_use_namespaces("a_proc_of_another_pid_namespace_stops_the_program_with_the_reason") {
        return;
    }
    let inner = this_binary("own-token");
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--kill-child"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .env(ROLE, "own-token");
    let out = output_within(&mut command, PROBE_LIMIT);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a token was made up: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        said.contains("/proc belongs to another pid namespace"),
        "{said}"
    );
}
