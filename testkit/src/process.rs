//! Child processes a test runs, with a time limit: [`output_within`] runs one to its
//! end (draining its output while it runs, so a full pipe cannot stall it) and
//! SIGKILLs it, by its pid, if it runs past the limit; [`wait_within`] reaps one that
//! should end by itself; [`wait_gone`] waits for a process that is not our child (a
//! detached manager) to exit. None of them can wait forever.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a child's output may stay open after the child ended (a process it started
/// and left behind may hold the pipes).
const PIPES_GRACE: Duration = Duration::from_secs(5);

/// Runs `command` (stdin from `/dev/null`) to its end and returns its output; if it
/// runs past `limit`, kills it (our child, by pid), reaps it and fails the test. Also
/// fails if its output pipes stay open for long after it ended (something it started
/// still holds them).
pub fn output_within(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send(bytes);
        });
        rx
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let status = wait_or_kill(&mut child, limit)
        .unwrap_or_else(|| panic!("{command:?} ran past {limit:?} and was killed"));
    let collect = |rx: mpsc::Receiver<Vec<u8>>, which: &str| {
        rx.recv_timeout(PIPES_GRACE).unwrap_or_else(|_| {
            panic!("{command:?} exited ({status}) but its {which} stayed open {PIPES_GRACE:?}")
        })
    };
    Output {
        status,
        stdout: collect(stdout, "stdout"),
        stderr: collect(stderr, "stderr"),
    }
}

/// Reaps our child `child`, which must end by itself within `limit`; past it, kills it
/// (by pid), reaps it and fails the test.
pub fn wait_within(child: &mut Child, limit: Duration) -> ExitStatus {
    let pid = child.id();
    wait_or_kill(child, limit)
        .unwrap_or_else(|| panic!("child pid {pid} did not exit within {limit:?}; killed"))
}

/// The child's exit status, or `None` if it ran past `limit` (it is then killed and
/// reaped).
fn wait_or_kill(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until process `pid` has exited, failing the test if it still runs after
/// `limit` (a manager must not linger).
pub fn wait_gone(pid: u32, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            Instant::now() < deadline,
            "pid {pid} still runs after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_ends_gives_its_output() {
        let out = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_child_past_its_limit_is_killed_and_fails_the_test() {
        let started = Instant::now();
        let failed = std::panic::catch_unwind(|| {
            output_within(Command::new("sleep").arg("30"), Duration::from_millis(200))
        });
        assert!(failed.is_err());
        assert!(started.elapsed() < Duration::from_secs(10));
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_within(&mut child, Duration::from_millis(200))
        }));
        assert!(failed.is_err());
        assert!(child.try_wait().unwrap().is_some(), "killed and reaped");
    }

    #[test]
    fn output_held_open_by_a_leftover_process_fails_instead_of_hanging() {
        let started = Instant::now();
        let failed = std::panic::catch_unwind(|| {
            // The shell exits at once; the sleep it leaves behind holds stdout.
            output_within(
                Command::new("sh").args(["-c", "sleep 7 & exit 0"]),
                Duration::from_secs(30),
            )
        });
        assert!(failed.is_err());
        assert!(started.elapsed() < Duration::from_secs(7));
    }
}
