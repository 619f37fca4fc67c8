//! Child processes a test runs, with a time limit: [`output_within`] runs one to its
//! end (draining its output while it runs, so a full pipe cannot stall it) and
//! SIGKILLs it, by its pid, if it runs past the limit; [`wait_within`] reaps one that
//! should end by itself; [`wait_gone`] waits for a process that is not our child (a
//! detached manager) to exit; [`Talker`] is a child told things line by line on its
//! stdin, answering on its stdout; [`accept_within`] takes a child's connection to a
//! listening socket; [`fork_and_wait`] runs a closure in a forked child and reaps it,
//! and [`in_child`] is the same for a doc example's consumer. None of them can wait
//! forever.
//!
//! # Safety
//! [`fork_and_wait`] and [`in_child`] fork: they are `unsafe fn`s whose callers promise
//! what `fork` needs (no other thread holds a lock the child's closure takes).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork};

/// How long a child's output may stay open after the child ended (a process it started
/// and left behind may hold the pipes).
const PIPES_GRACE: Duration = Duration::from_secs(5);

/// Runs `command` (stdin from `/dev/null`) to its end and returns its output; if it
/// runs past `limit`, kills it (our child, by pid), reaps it and fails the test. Also
/// fails if its output pipes stay open for long after it ended (something it started
/// still holds them).
pub fn output_within(command: &mut Command, limit: Duration) -> Output {
    let mut child = spawn(
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
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

/// Starts `command`, failing the test if it cannot. A program this test just copied (a
/// probe for another user, [`copy_of_this_test`]) can be refused for a moment with
/// `ETXTBSY`: a child that another thread of this process forked between the copy's
/// open and close holds the copy open for writing until it `exec`s. That is retried,
/// for up to 5 s.
pub fn spawn(command: &mut Command) -> Child {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match command.spawn() {
            Ok(child) => return child,
            Err(e)
                if e.raw_os_error() == Some(nix::errno::Errno::ETXTBSY as i32)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("cannot run {command:?}: {e}"),
        }
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

/// A copy of the running test binary that runs only the test `role` (`--exact`,
/// output not captured, one thread): how a test starts a helper process that plays a
/// role (the role's test returns at once unless its environment says otherwise).
pub fn test_role(role: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command.args(["--exact", role, "--nocapture", "--test-threads=1"]);
    command
}

/// The path of a test socket, removed when the test is done with it (or panics).
pub struct SocketPath(pub PathBuf);

impl Drop for SocketPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A helper process playing the test `role` ([`test_role`]), spoken to line by line
/// ([`Talker`]) and connected to this test over a Unix socket of its own: the socket's
/// path (under the temporary directory, named `name` and this pid) is in the role's
/// environment as `socket_env`; the role connects and says `connected`.
pub struct SocketPeer {
    /// Its commands and answers.
    pub talker: Talker,
    /// This test's end of its socket.
    pub socket: UnixStream,
    /// The socket's path, removed on drop.
    pub path: SocketPath,
}

impl SocketPeer {
    /// Starts it; every wait is bounded by `limit`.
    pub fn start(role: &str, socket_env: &str, name: &str, limit: Duration) -> SocketPeer {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("bind the test socket");
        let path = SocketPath(path);
        let mut talker = Talker::start(test_role(role).env(socket_env, &path.0), limit);
        let socket = talker.accept(&listener);
        talker.expect("connected");
        SocketPeer {
            talker,
            socket,
            path,
        }
    }
}

/// A child spoken to line by line: commands on its stdin, answers on its stdout (read
/// by a thread of its own, so a waiting test never blocks on a pipe), every wait
/// bounded by `limit`. Dropped before it was [finished](Talker::finish), it is killed
/// by its pid and reaped.
pub struct Talker {
    child: Child,
    stdin: Option<ChildStdin>,
    said: mpsc::Receiver<String>,
    limit: Duration,
}

impl Talker {
    /// Starts `command` with piped stdin and stdout (stderr inherited).
    pub fn start(command: &mut Command, limit: Duration) -> Talker {
        let mut child = spawn(
            command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        );
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, said) = mpsc::channel();
        // Ends when the child does (its stdout closes).
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Talker {
            child,
            stdin,
            said,
            limit,
        }
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line of its output containing `what`, and returns that line from
    /// `what` on (a test harness may have begun the line); fails the test past the
    /// limit or if the child ends first.
    pub fn expect(&self, what: &str) -> String {
        loop {
            match self.said.recv_timeout(self.limit) {
                Ok(line) => {
                    if let Some(at) = line.find(what) {
                        return line[at..].to_owned();
                    }
                }
                Err(e) => panic!("the child did not say {what:?} ({e})"),
            }
        }
    }

    /// Writes `line` to its stdin.
    pub fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("its stdin is still open");
        writeln!(stdin, "{line}").expect("tell the child");
    }

    /// Tells it `command` and returns its answer: the first line containing `command`.
    pub fn ask(&mut self, command: &str) -> String {
        self.tell(command);
        self.expect(command)
    }

    /// Its connection to `listener` ([`accept_within`], within the limit).
    pub fn accept(&mut self, listener: &UnixListener) -> UnixStream {
        accept_within(listener, &mut self.child, self.limit)
    }

    /// SIGKILLs it (our child, by its pid) and reaps it.
    pub fn kill(mut self) {
        self.child.kill().expect("kill the child");
        self.child.wait().expect("reap the child");
    }

    /// Closes its stdin and reaps it: it must exit, successfully, within the limit.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = wait_within(&mut self.child, self.limit);
        assert!(status.success(), "the child failed: {status}");
    }
}

impl Drop for Talker {
    fn drop(&mut self) {
        // Ours, by its pid; after `finish` or `kill` it has been reaped already.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The connection `child` makes to `listener`, taken within `limit`; fails the test if
/// the child exits first or never connects (the accept does not block meanwhile).
pub fn accept_within(listener: &UnixListener, child: &mut Child, limit: Duration) -> UnixStream {
    listener
        .set_nonblocking(true)
        .expect("a nonblocking listener");
    let deadline = Instant::now() + limit;
    let socket = loop {
        match listener.accept() {
            Ok((socket, _)) => break socket,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "the child never connected");
                assert!(
                    child.try_wait().expect("poll the child").is_none(),
                    "the child exited before it connected"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    socket.set_nonblocking(false).expect("a blocking socket");
    socket
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

/// What a child said: its standard output, then its standard error, as text.
pub fn text_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The running test binary, copied into `dir` as `probe` (mode `0755`), where a process
/// of another user can run it: the original may sit under a directory only its owner
/// can enter. `dir` itself must let that user in.
pub fn copy_of_this_test(dir: &Path) -> PathBuf {
    let copy = dir.join("probe");
    std::fs::copy(std::env::current_exe().expect("the test binary"), &copy)
        .expect("copy the test binary");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))
        .expect("chmod the copy");
    copy
}

/// Forks: the child runs `body` and leaves with `_exit` and the code `body` returns,
/// never returning into the caller (a test harness); the parent waits for it at most
/// `limit`, and past that kills it (its own child, by pid), reaps it and fails the
/// test. Returns how the child ended.
///
/// # Safety
/// `fork`'s contract: no other thread of this process may hold a lock (the allocator's
/// included) that `body` takes; a test binary that runs one test, or a doc example,
/// keeps it.
pub unsafe fn fork_and_wait(limit: Duration, body: impl FnOnce() -> i32) -> WaitStatus {
    // SAFETY: the caller keeps fork's contract (above); the child only runs `body` and
    // `_exit`s.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = body();
            // SAFETY: `_exit` ends the child at once, running none of the parent's atexit
            // handlers or destructors a second time.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            let deadline = Instant::now() + limit;
            loop {
                match waitpid(child, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
                    WaitStatus::StillAlive if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    WaitStatus::StillAlive => {
                        let _ = kill(child, Signal::SIGKILL);
                        let _ = waitpid(child, None);
                        panic!("the forked child ran past {limit:?}; killed");
                    }
                    status => return status,
                }
            }
        }
    }
}

/// Runs a doc example's `consumer` in a forked child (another process of the same
/// user, as a real consumer would be) and asserts that it succeeded within 60 s; the
/// child prints the error it returned.
///
/// # Safety
/// As [`fork_and_wait`]: a doc example runs one thread.
pub unsafe fn in_child(consumer: impl FnOnce() -> shmrc::Result<()>) {
    let run = || match consumer() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("consumer: {e}");
            1
        }
    };
    // SAFETY: the caller keeps fork's contract (above).
    let status = unsafe { fork_and_wait(Duration::from_secs(60), run) };
    assert!(
        matches!(status, WaitStatus::Exited(_, 0)),
        "the consumer failed: {status:?}"
    );
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
