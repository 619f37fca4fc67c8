//! Child processes a test runs, with a time limit: [`output_within`] runs one to its
//! end (draining its output while it runs, so a full pipe cannot stall it) and
//! SIGKILLs it, by its pid, if it runs past the limit; [`wait_gone`] waits for a
//! process that is not our child (a detached manager) to exit.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `command` (stdin from `/dev/null`) to its end and returns its output; if it
/// runs past `limit`, kills it (our child, by pid), reaps it and fails the test.
pub fn output_within(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
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
