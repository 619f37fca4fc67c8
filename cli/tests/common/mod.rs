//! Shared harness of the CLI's real-process tests: worker processes (the hidden
//! `shmrc worker` command) that are killed only by pid and always reaped, and the
//! test's own namespace with the manager off. The generic helpers (namespaces that
//! leave `/dev/shm` clean, test data, JSON fields) are `shmrc-testkit`'s.
#![allow(dead_code)]

use shmrc_testkit::process::{output_within, wait_within};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use shmrc::{CreateOptions, Outcome, ShareHandle, ShmBuf, Strategy, transport};
use shmrc_testkit::data::{fnv1a, pattern};
use shmrc_testkit::names::TestNamespace;

/// A new file_system buffer of `len` bytes and 8 holder slots in `t`'s namespace.
pub fn file_system_buf(t: &TestNamespace, len: usize) -> ShmBuf {
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(t.ns.clone())
        .capacity(8);
    ShmBuf::with_options(len, &options).unwrap()
}

/// A file_system buffer of `len` bytes in `t`'s namespace, filled with a pattern and
/// held only by `worker`: this process hands it over, then releases its own reference
/// (the segment stays, in use by the worker). Returns its name.
pub fn held_only_by(t: &TestNamespace, worker: &Worker, len: usize) -> String {
    let buf = file_system_buf(t, len);
    let data = pattern(len, 3);
    buf.write_at(0, &data).unwrap();
    let name = buf.name().unwrap().to_owned();
    let reply = worker.ask(
        &format!("hold {}", fnv1a(&data)),
        vec![buf.share().unwrap()],
    );
    assert!(reply.starts_with("held "), "{reply}");
    let released = buf
        .release()
        .unwrap()
        .expect("the last reference of this process");
    assert_eq!(released.outcome, Outcome::InUse, "the worker holds {name}");
    name
}

/// How long one `shmrc` command or one worker's reply may take before the test fails.
pub const LIMIT: Duration = Duration::from_secs(60);

/// Runs `shmrc` with `args` and `env` and returns its output; if it runs past
/// [`LIMIT`], SIGKILLs it (our child, by pid) and fails the test.
pub fn shmrc_within(args: &[&str], env: &[(&str, String)]) -> Output {
    output_within(
        Command::new(env!("CARGO_BIN_EXE_shmrc"))
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v))),
        LIMIT,
    )
}

/// Runs `shmrc args`, which must succeed; its stdout.
pub fn shmrc_ok(args: &[&str]) -> String {
    let out = shmrc_within(args, &[]);
    assert!(
        out.status.success(),
        "shmrc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// One worker process started by this test.
pub struct Worker {
    pub child: Child,
    pub stream: UnixStream,
    pub id: u32,
}

impl Worker {
    /// Sends a command with handles and returns the reply (panics on `error`).
    pub fn ask(&self, command: &str, handles: Vec<ShareHandle>) -> String {
        let reply = self.try_ask(command, handles);
        assert!(!reply.starts_with("error"), "worker {}: {reply}", self.id);
        reply
    }

    /// Sends a command with handles and returns the reply, error or not.
    pub fn try_ask(&self, command: &str, handles: Vec<ShareHandle>) -> String {
        transport::send(&self.stream, command.as_bytes(), handles).expect("send to worker");
        let reply = transport::recv(&self.stream).expect("reply from worker");
        String::from_utf8(reply.payload).expect("utf-8 reply")
    }

    /// SIGKILLs this worker (by its pid) and reaps it.
    pub fn kill(mut self) {
        self.child.kill().expect("kill worker");
        self.child.wait().expect("reap worker");
    }

    /// Asks the worker to exit and reaps it (killed, failing the test, if it does not
    /// exit within [`LIMIT`]).
    pub fn exit(mut self) {
        assert_eq!(self.try_ask("exit", vec![]), "bye");
        assert!(wait_within(&mut self.child, LIMIT).success());
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Only our own child, by pid; a no-op once it was reaped.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `count` workers connected to a fresh socket, with the manager off.
pub fn start_workers(test: &str, count: u32) -> Vec<Worker> {
    start_workers_with(test, count, &[])
}

/// Starts `count` workers with these environment variables (the manager is off unless
/// `env` sets `SHMRC_MANAGER`).
pub fn start_workers_with(test: &str, count: u32, env: &[(&str, String)]) -> Vec<Worker> {
    let dir = std::env::temp_dir().join(format!("shmrc-t-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("socket dir");
    let socket: PathBuf = dir.join("s");
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let mut children = Unclaimed(
        (0..count)
            .map(|id| {
                Some(
                    Command::new(env!("CARGO_BIN_EXE_shmrc"))
                        .args(["worker", "--socket"])
                        .arg(&socket)
                        .args(["--id", &id.to_string()])
                        .env("SHMRC_MANAGER", "off")
                        .envs(env.iter().map(|(k, v)| (k, v)))
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("spawn worker"),
                )
            })
            .collect(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut workers = Vec::new();
    while workers.len() < count as usize {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).expect("blocking");
                // A worker that stops answering fails the test instead of hanging it.
                stream.set_read_timeout(Some(LIMIT)).expect("read timeout");
                let hello = transport::recv(&stream).expect("hello");
                let text = String::from_utf8(hello.payload).expect("utf-8");
                let id: u32 = text
                    .split_whitespace()
                    .nth(1)
                    .and_then(|n| n.parse().ok())
                    .expect("hello <id>");
                let child = children.0[id as usize]
                    .take()
                    .expect("one hello per worker");
                workers.push(Worker { child, stream, id });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "workers did not connect in time");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    workers.sort_by_key(|w| w.id);
    workers
}

/// Worker processes not yet connected: killed (by pid) and reaped if the test fails
/// before they are, so that none outlives it.
struct Unclaimed(Vec<Option<Child>>);

impl Drop for Unclaimed {
    fn drop(&mut self) {
        for mut child in self.0.iter_mut().filter_map(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The entry named `name` of the array `key` of a `--json` document's object `parent`
/// (a namespace's `segments` or `services`).
pub fn listed<'a>(parent: &'a serde_json::Value, key: &str, name: &str) -> &'a serde_json::Value {
    parent[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} array: {parent:#}"))
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {parent:#}"))
}
