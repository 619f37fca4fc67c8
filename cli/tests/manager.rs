//! The manager daemon with real processes: it starts (by hand or lazily, from a
//! worker's first file_system attach), answers `status`, sweeps when a client is
//! SIGKILLed, refuses lies and garbage without changing anything, is replaced when it
//! dies, and exits after its grace period. Every test isolates its manager in a
//! runtime directory of its own (`SHMRC_RUNTIME_DIR`) and waits for it to exit.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{LIMIT, Worker, file_system_buf, held_only_by, shmrc_within, start_workers_with};
use shmrc::checkers::manager::wire::{self, Reply, Request};
use shmrc::checkers::os::Os;
use shmrc::checkers::token::Token;
use shmrc::checkers::token::TokenExt;
use shmrc::{DefaultOs, Namespace, ShmBuf};
use shmrc_testkit::data::{field, fnv1a};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{output_within, wait_gone};

/// Grace period of the managers these tests start.
const GRACE_MS: &str = "300";

/// A private runtime directory (created by the first manager or client, mode 0700,
/// inside a temporary directory); on drop, waits until its manager (if any) has exited.
struct Runtime {
    parent: tempfile::TempDir,
}

impl Runtime {
    fn new() -> Runtime {
        Runtime {
            parent: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn dir(&self) -> std::path::PathBuf {
        self.parent.path().join("rt")
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("SHMRC_RUNTIME_DIR", self.dir().display().to_string()),
            ("SHMRC_MANAGER_GRACE_MS", GRACE_MS.to_owned()),
            (
                "SHMRC_MANAGER_PROGRAM",
                env!("CARGO_BIN_EXE_shmrc").to_owned(),
            ),
        ]
    }

    fn shmrc(&self, args: &[&str]) -> Output {
        shmrc_within(args, &self.env())
    }

    /// `shmrc status --json`, which must succeed.
    fn status(&self) -> String {
        let out = self.shmrc(&["status", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir().join(shmrc::manager::SOCKET_FILE)
    }

    /// Workers whose file_system attaches use this runtime's manager (mode `auto`
    /// unless `extra` says otherwise).
    fn workers(&self, test: &str, count: u32, extra: &[(&'static str, String)]) -> Vec<Worker> {
        let mut env = self.env();
        env.push(("SHMRC_MANAGER", "auto".to_owned()));
        env.extend(extra.iter().cloned());
        start_workers_with(test, count, &env)
    }
}

impl Drop for Runtime {
    /// A passing test waits for its manager to exit by itself (a manager must not
    /// linger); a failing one kills it, by its pid, at once (it may watch this very
    /// process), rather than panic again while unwinding.
    fn drop(&mut self) {
        let out = self.shmrc(&["status", "--json"]);
        let json = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !running(&json) {
            return;
        }
        let pid = field(&json, "pid") as u32;
        if std::thread::panicking() {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        } else {
            wait_gone(pid, Duration::from_secs(60));
        }
    }
}

/// Waits (bounded, generously) until `cond` holds.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_started_manager_answers_status_and_exits_after_its_grace_period() {
    let rt = Runtime::new();
    let out = rt.shmrc(&["manager"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let status = rt.status();
    assert_eq!(field(&status, "pid"), pid);
    assert_eq!(field(&status, "clients"), 0);
    assert!(status.contains(&rt.dir().display().to_string()));
    // Asking again finds the same one.
    let again = rt.shmrc(&["manager"]);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        pid.to_string()
    );

    wait_gone(pid as u32, Duration::from_secs(60));
    assert!(!rt.socket().exists(), "the socket went with it");
    let out = rt.shmrc(&["status"]);
    assert!(
        out.status.success(),
        "no manager is an answer, not a failure"
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("no manager running"), "{said}");
    assert!(!running(&rt.status()));
}

#[test]
fn a_second_foreground_manager_finds_the_first_and_leaves() {
    let rt = Runtime::new();
    assert!(rt.shmrc(&["manager"]).status.success());
    let out = rt.shmrc(&["manager", "--foreground"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already runs"));
}

#[test]
fn a_workers_attach_starts_the_manager_which_unlinks_its_segment_when_it_is_killed() {
    let t = TestNamespace::new("mgr-death");
    let rt = Runtime::new();
    let mut workers = rt.workers("mgr-death", 1, &[]);
    let name = held_only_by(&t, &workers[0], 4096);
    let status = rt.status();
    assert_eq!(field(&status, "clients"), 1);
    assert!(status.contains(t.ns.prefix()), "{status}");

    workers.remove(0).kill();
    eventually("the manager unlinks the dead worker's segment", || {
        !t.names().contains(&name)
    });
    let status = rt.status();
    assert_eq!(field(&status, "clients"), 0);
    // The counts are not asserted: a manager of a test running beside this one may be
    // sweeping every namespace (its start or grace sweep) and get there first.
    println!("{status}");
}

/// With no program named, a worker's first file_system use starts the manager from the
/// worker's own image (the library's constructor serves it), not through `shmrc
/// manager`; the manager shows as `shmrc manager --foreground` and sweeps as usual.
#[test]
fn without_a_named_program_the_manager_is_served_from_the_clients_own_image() {
    let t = TestNamespace::new("mgr-own");
    let rt = Runtime::new();
    // An empty SHMRC_MANAGER_PROGRAM counts as unset.
    let mut workers = rt.workers("mgr-own", 1, &[("SHMRC_MANAGER_PROGRAM", String::new())]);
    let name = held_only_by(&t, &workers[0], 4096);
    let pid = field(&rt.status(), "pid");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("the manager runs");
    let worker_exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_shmrc")).unwrap();
    assert_eq!(exe, worker_exe);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert_eq!(cmdline, b"shmrc manager\0--foreground\0");

    workers.remove(0).kill();
    eventually("the manager unlinks the dead worker's segment", || {
        !t.names().contains(&name)
    });
}

/// Clients that find no manager at the same moment start one between them: the start
/// lock lets one start it while the others wait, so the log shows one manager coming up
/// and none finding another already there.
#[test]
fn clients_finding_no_manager_at_once_start_exactly_one() {
    let t = TestNamespace::new("mgr-herd");
    let rt = Runtime::new();
    let workers = rt.workers("mgr-herd", 4, &[("SHMRC_MANAGER_PROGRAM", String::new())]);
    let bufs: Vec<ShmBuf> = (0..4).map(|_| file_system_buf(&t, 4096)).collect();
    std::thread::scope(|scope| {
        for (worker, buf) in workers.iter().zip(&bufs) {
            let handle = buf.share().unwrap();
            let hold = format!("hold {}", fnv1a(&vec![0; buf.len()]));
            scope.spawn(move || worker.ask(&hold, vec![handle]));
        }
    });
    assert_eq!(field(&rt.status(), "clients"), 4);
    let log = std::fs::read_to_string(rt.dir().join("manager.log")).unwrap();
    assert_eq!(log.matches(" listening at ").count(), 1, "{log}");
    assert!(!log.contains("another manager runs"), "{log}");
    drop(workers);
}

/// A named program that fails is an error naming the program and what it said.
#[test]
fn a_named_program_that_fails_is_a_clear_error() {
    let t = TestNamespace::new("mgr-false");
    let rt = Runtime::new();
    let false_program = [("SHMRC_MANAGER_PROGRAM", "/bin/false".to_owned())];
    let workers = rt.workers("mgr-false", 1, &false_program);
    let buf = file_system_buf(&t, 4096);
    let reply = workers[0].try_ask("hold 0", vec![buf.share().unwrap()]);
    assert!(
        reply.contains("starting the shmrc manager with /bin/false failed: it exited with"),
        "{reply}"
    );
    assert!(!rt.socket().exists(), "no manager was started");
}

#[test]
fn a_client_whose_manager_died_reconnects_to_a_new_one() {
    let t = TestNamespace::new("mgr-again");
    let rt = Runtime::new();
    let workers = rt.workers("mgr-again", 1, &[]);
    held_only_by(&t, &workers[0], 4096);
    let first = kill_manager(&rt);

    let second_name = held_only_by(&t, &workers[0], 4096);
    let status = rt.status();
    assert_ne!(field(&status, "pid") as u32, first);
    assert_eq!(field(&status, "clients"), 1);
    workers.into_iter().for_each(Worker::kill);
    eventually("the new manager sweeps on the worker's death", || {
        !t.names().contains(&second_name)
    });
}

/// SIGKILLs the manager that answers in `rt` (started for our worker) and waits until it
/// is gone; returns its pid.
fn kill_manager(rt: &Runtime) -> u32 {
    let pid = field(&rt.status(), "pid") as u32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_gone(pid, Duration::from_secs(60));
    pid
}

#[test]
fn an_idle_client_is_watched_again_by_a_new_manager_when_the_first_is_killed() {
    let t = TestNamespace::new("mgr-idle");
    let rt = Runtime::new();
    let mut workers = rt.workers("mgr-idle", 1, &[]);
    let name = held_only_by(&t, &workers[0], 4096);
    let first = kill_manager(&rt);
    // The worker does nothing more; its watcher thread starts a new manager.
    eventually("a new manager watches the idle worker", || {
        let out = rt.shmrc(&["status", "--json"]);
        let json = String::from_utf8_lossy(&out.stdout);
        out.status.success()
            && running(&json)
            && field(&json, "pid") as u32 != first
            && field(&json, "clients") == 1
    });
    workers.remove(0).kill();
    eventually("the new manager sweeps on the worker's death", || {
        !t.names().contains(&name)
    });
}

#[test]
fn connect_mode_without_a_manager_and_an_unsafe_runtime_dir_are_clear_errors() {
    let t = TestNamespace::new("mgr-errors");
    let rt = Runtime::new();
    let workers = rt.workers("mgr-errors", 1, &[("SHMRC_MANAGER", "connect".into())]);
    let buf = file_system_buf(&t, 4096);
    let reply = workers[0].try_ask("hold 0", vec![buf.share().unwrap()]);
    assert!(reply.contains("no shmrc manager is running"), "{reply}");

    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let open_env = [("SHMRC_RUNTIME_DIR", open.path().display().to_string())];
    let workers = rt.workers("mgr-errors", 1, &open_env);
    let reply = workers[0].try_ask("hold 0", vec![buf.share().unwrap()]);
    assert!(reply.contains("755"), "{reply}");

    let cli = shmrc_within(&["manager"], &open_env);
    assert!(!cli.status.success());
    assert!(String::from_utf8_lossy(&cli.stderr).contains("755"));

    let missing = [("SHMRC_MANAGER_PROGRAM", "/nonexistent/shmrc".to_owned())];
    let workers = rt.workers("mgr-errors", 1, &missing);
    let reply = workers[0].try_ask("hold 0", vec![buf.share().unwrap()]);
    assert!(reply.contains("/nonexistent/shmrc"), "{reply}");
    assert!(!rt.socket().exists(), "no manager was started");
}

/// How long the manager may take to answer one request.
const REPLY_LIMIT: Duration = Duration::from_secs(10);

/// Sends raw bytes on a fresh connection and returns the manager's reply.
fn send_raw(rt: &Runtime, bytes: &[u8]) -> Reply {
    let mut stream = UnixStream::connect(rt.socket()).unwrap();
    stream.write_all(bytes).unwrap();
    read_reply(&mut stream)
}

/// The manager's next reply on `stream`: one whole frame, read as soon as it is there
/// (a connection the manager keeps open, having welcomed a lie, does not make the
/// test wait), failing the test if none comes within [`REPLY_LIMIT`].
fn read_reply(stream: &mut UnixStream) -> Reply {
    stream.set_read_timeout(Some(REPLY_LIMIT)).unwrap();
    let mut reply = Vec::new();
    loop {
        match wire::frame_len(&reply, wire::MAX_REPLY_PAYLOAD) {
            Ok(Some(len)) => return wire::decode_reply(&reply[..len]).unwrap(),
            Ok(None) => {}
            Err(e) => panic!("the manager sent a bad frame: {e}"),
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) => panic!("the manager closed the connection without a whole reply"),
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("no reply from the manager within {REPLY_LIMIT:?}: {e}"),
        }
    }
}

#[test]
fn lies_garbage_and_oversized_frames_are_refused_and_change_nothing() {
    let rt = Runtime::new();
    assert!(rt.shmrc(&["manager"]).status.success());
    let me = DefaultOs::default().current();
    let ns = Namespace::new("shmrc-t-mgr-lies").unwrap();
    let hello = |token: Token, pid: u32| {
        wire::encode_request(&Request::Hello {
            token,
            pid,
            namespaces: vec![ns.clone()],
        })
    };
    let other_pid = Token::new(me.pid() + 1, me.start_ticks()).unwrap();
    let stale = Token::new(me.pid(), me.start_ticks() + 1).unwrap();
    let mut outside = wire::encode_request(&Request::Watch {
        namespace: Namespace::new("shmrc").unwrap(),
    });
    outside[wire::HEADER_LEN + 1..].copy_from_slice(b"torch");
    let mut oversized = wire::encode_request(&Request::Status);
    oversized[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
    let lies: Vec<(&str, Vec<u8>)> = vec![
        ("another pid", hello(other_pid, other_pid.pid())),
        ("a pid that is not the peer's", hello(me, me.pid() + 1)),
        ("a dead start time", hello(stale, me.pid())),
        ("a name outside shmrc", outside),
        ("an oversized frame", oversized),
        ("garbage", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
        ("a flood of garbage", vec![b'x'; 20_000]),
        (
            "watch before hello",
            wire::encode_request(&Request::Watch {
                namespace: ns.clone(),
            }),
        ),
        (
            "created before hello",
            wire::encode_request(&Request::Created {
                namespace: ns.clone(),
            }),
        ),
        (
            "attached before hello",
            wire::encode_request(&Request::Attached {
                segment: format!("{}1.1.1.0", ns.name_start(me.pid())),
            }),
        ),
    ];
    for (what, bytes) in &lies {
        match send_raw(&rt, bytes) {
            Reply::Refused { reason } => println!("{what}: refused: {reason}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    let status = rt.status();
    assert_eq!(field(&status, "refused"), lies.len() as u64, "{status}");
    assert_eq!(field(&status, "clients"), 0);
    assert_eq!(field(&status, "clients_ever"), 0);
}

#[test]
fn connections_beyond_the_cap_are_refused_and_the_manager_keeps_serving() {
    // The manager raises its limit to the hard one, as this does: its cap follows.
    let fd_limit = shmrc::checkers::os::posix::raise_fd_limit().unwrap();
    let rt = Runtime::new();
    assert!(rt.shmrc(&["manager"]).status.success());
    let cap = shmrc::checkers::manager::server::max_connections(fd_limit);
    // A watched client keeps the manager running (connections that never say Hello do
    // not), and takes one place.
    let t = TestNamespace::new("mgrcap");
    let mut workers = rt.workers("mgrcap", 2, &[]);
    let (watched, refused) = (workers.remove(0), workers.remove(0));
    let create = format!("create 4096 7 {}", t.ns.prefix());
    assert!(watched.ask(&create, vec![]).starts_with("created "));
    let held: Vec<UnixStream> = (1..cap)
        .map(|_| UnixStream::connect(rt.socket()).unwrap())
        .collect();
    // One more is refused as soon as it is accepted, before it says anything.
    let mut extra = UnixStream::connect(rt.socket()).unwrap();
    match read_reply(&mut extra) {
        Reply::Refused { reason } => assert!(reason.contains("too many"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // A client process refused for that goes on unwatched: its create succeeds, its
    // segment left to the sweeps and releases.
    let reply = refused.ask(&create, vec![]);
    assert!(reply.starts_with("created "), "{reply}");
    drop(held);
    eventually("the manager serves again once connections close", || {
        let out = rt.shmrc(&["status", "--json"]);
        out.status.success() && running(&String::from_utf8_lossy(&out.stdout))
    });
    assert_eq!(
        field(&rt.status(), "refused"),
        2,
        "the raw connection and the worker"
    );
    refused.exit();
    watched.exit();
    assert!(
        t.names().is_empty(),
        "the workers released their buffers on exit"
    );
}

/// The variable that makes `raw_client_role`'s child process connect to this socket.
const RAW_CLIENT_SOCKET: &str = "SHMRC_T_RAW_CLIENT_SOCKET";
/// The variable that makes `raw_client_role` tell an attach of a name that is no
/// segment, instead of asking for one namespace too many.
const RAW_CLIENT_BAD_ATTACHED: &str = "SHMRC_T_RAW_CLIENT_BAD_ATTACHED";

/// A client (this test binary, started again) that says Hello, then asks the manager to
/// watch one namespace too many (or tells it an attach of a name that is no segment);
/// it prints the replies it gets, the refusal last.
#[test]
#[ignore = "the child process of a_client_registering_too_many_namespaces_is_refused"]
fn raw_client_role() {
    let socket = std::env::var(RAW_CLIENT_SOCKET).expect("started by the test, with a socket");
    let me = DefaultOs::default().current();
    let namespace = |i: usize| Namespace::new(format!("shmrc-t-mgr-many{i}")).unwrap();
    let mut bytes = wire::encode_request(&Request::Hello {
        token: me,
        pid: me.pid(),
        namespaces: vec![namespace(0)],
    });
    if std::env::var_os(RAW_CLIENT_BAD_ATTACHED).is_some() {
        bytes.extend(wire::encode_request(&Request::Attached {
            segment: "shmrc-t-mgr-many0.not-a-segment".into(),
        }));
    } else {
        for i in 1..=shmrc::checkers::manager::registry::MAX_NAMESPACES {
            bytes.extend(wire::encode_request(&Request::Watch {
                namespace: namespace(i),
            }));
        }
    }
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.write_all(&bytes).unwrap();
    // The manager answers each request and closes the connection at the refusal.
    stream.set_read_timeout(Some(REPLY_LIMIT)).unwrap();
    let mut replies = Vec::new();
    stream
        .read_to_end(&mut replies)
        .expect("the manager refuses and closes within the limit");
    println!("raw client: {}", String::from_utf8_lossy(&replies));
}

/// Runs `raw_client_role` against `rt`'s manager (with `bad_attached`, its told attach
/// of a name that is no segment); what it printed.
fn raw_client(rt: &Runtime, bad_attached: bool) -> String {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "raw_client_role", "--ignored", "--nocapture"])
        .env(RAW_CLIENT_SOCKET, rt.socket());
    if bad_attached {
        command.env(RAW_CLIENT_BAD_ATTACHED, "1");
    }
    let out = output_within(&mut command, LIMIT);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}");
    said
}

#[test]
fn a_told_attach_of_a_name_that_is_no_segment_is_refused() {
    let rt = Runtime::new();
    assert!(rt.shmrc(&["manager"]).status.success());
    let said = raw_client(&rt, true);
    assert!(said.contains("attached: "), "{said}");
    assert_eq!(field(&rt.status(), "refused"), 1);
}

#[test]
fn a_client_registering_too_many_namespaces_is_refused() {
    let rt = Runtime::new();
    assert!(rt.shmrc(&["manager"]).status.success());
    let said = raw_client(&rt, false);
    let limit = shmrc::checkers::manager::registry::MAX_NAMESPACES;
    assert!(
        said.contains(&format!("more than {limit} namespaces for one client")),
        "{said}"
    );
    let status = rt.status();
    assert_eq!(field(&status, "refused"), 1, "{status}");
}

/// Whether `shmrc status --json` said a manager runs.
fn running(json: &str) -> bool {
    let doc: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {json}"));
    doc["running"]
        .as_bool()
        .unwrap_or_else(|| panic!("no running in {json}"))
}
