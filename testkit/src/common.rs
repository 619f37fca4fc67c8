//! Shared harness of the real-process tests: a namespace of the test's own, worker
//! processes (the `shmrc worker` command) that are killed only by pid and always
//! reaped, and a guard that leaves `/dev/shm` clean whatever the outcome.
#![allow(dead_code)]

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shmrc::os::Os;
use shmrc::{Namespace, PosixOs, ShareHandle, transport};

/// A namespace unique to this test and process; on drop, everything left in it is
/// unlinked (after the test has had its chance to assert that nothing was).
pub struct TestNamespace {
    pub ns: Namespace,
}

impl TestNamespace {
    /// Also turns the manager off in this process and its workers: these tests sweep
    /// by themselves and must leave no manager behind (`tests/manager.rs` tests it).
    pub fn new(test: &str) -> TestNamespace {
        shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
        let prefix = format!("shmrc-t-{test}-{}", std::process::id());
        TestNamespace {
            ns: Namespace::new(prefix).expect("valid test prefix"),
        }
    }

    /// Names of this namespace in `/dev/shm`.
    pub fn names(&self) -> Vec<String> {
        PosixOs
            .shm_list(&self.ns.name_start(PosixOs.uid()))
            .expect("list /dev/shm")
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        for name in self.names() {
            let _ = PosixOs.shm_unlink(&name);
        }
    }
}

/// One worker process started by this test.
pub struct Worker {
    pub child: Child,
    pub stream: UnixStream,
    pub id: u32,
}

impl Worker {
    /// Sends a command with handles and returns the reply (panics on `error`).
    pub fn ask(&self, command: &str, handles: Vec<ShareHandle<PosixOs>>) -> String {
        let reply = self.try_ask(command, handles);
        assert!(!reply.starts_with("error"), "worker {}: {reply}", self.id);
        reply
    }

    /// Sends a command with handles and returns the reply, error or not.
    pub fn try_ask(&self, command: &str, handles: Vec<ShareHandle<PosixOs>>) -> String {
        transport::send(&PosixOs, &self.stream, command.as_bytes(), handles)
            .expect("send to worker");
        let reply = transport::recv(&PosixOs, &self.stream).expect("reply from worker");
        String::from_utf8(reply.payload).expect("utf-8 reply")
    }

    /// SIGKILLs this worker (by its pid) and reaps it.
    pub fn kill(mut self) {
        self.child.kill().expect("kill worker");
        self.child.wait().expect("reap worker");
    }

    /// Asks the worker to exit and reaps it.
    pub fn exit(mut self) {
        assert_eq!(self.try_ask("exit", vec![]), "bye");
        assert!(self.child.wait().expect("reap worker").success());
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
    let mut children: Vec<Option<Child>> = (0..count)
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
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut workers = Vec::new();
    while workers.len() < count as usize {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).expect("blocking");
                let hello = transport::recv(&PosixOs, &stream).expect("hello");
                let text = String::from_utf8(hello.payload).expect("utf-8");
                let id: u32 = text
                    .split_whitespace()
                    .nth(1)
                    .and_then(|n| n.parse().ok())
                    .expect("hello <id>");
                let child = children[id as usize].take().expect("one hello per worker");
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

/// FNV-1a 64, as the worker computes it.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A recognisable pattern for buffer `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// Lowercase hex of `bytes` (handles travel as text to child processes).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of `text` made by [`hex`].
pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The number after `"name":` in a flat JSON object.
pub fn field(json: &str, name: &str) -> u64 {
    let key = format!("\"{name}\":");
    let at = json
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {json}"))
        + key.len();
    json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number in {json}"))
}
