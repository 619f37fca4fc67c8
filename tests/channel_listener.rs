//! `shmrc::channel`'s many-client side with real processes: a [`Listener`] with several
//! clients at once, a [`Select`] over their receivers (a client SIGKILLed is reported
//! closed and what was in flight to it comes back), and `request`'s client and server.
//! Each child is this test binary run again with `SHMRC_TEST_CHILD=<role>` (the `child`
//! test below runs the role and exits). Children are killed only by pid and always
//! reaped; every wait has a time limit; each test's namespace must be empty at its end.
#![cfg(all(feature = "channel", not(any(shmrc_loom, shmrc_shuttle))))]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shmrc::channel::request::{Client, Server};
use shmrc::channel::{self, Connection, Listener, Select, Selection, service_name};
use shmrc::{CreateOptions, Error, FrozenBuf, Namespace, ShmBuf, ShmBufMut, Strategy};
use shmrc_testkit::data::{fnv1a, pattern};
use shmrc_testkit::names::TestNamespace;
use shmrc_testkit::process::{
    Talker, copy_of_this_test, output_within, test_role, text_of, wait_within,
};
use shmrc_testkit::users::{ThrowawayUser, cannot_attack};

const ROLE: &str = "SHMRC_TEST_CHILD";
const NAMESPACE: &str = "SHMRC_TEST_NAMESPACE";
const SERVER: &str = "SHMRC_TEST_SERVER";
const LIMIT: Duration = Duration::from_secs(30);

/// What the server sends a client: buffers of both strategies and a frozen one.
#[derive(Serialize, Deserialize, Debug)]
enum ToClient {
    Job {
        anonymous: ShmBuf,
        named: ShmBuf,
        frozen: FrozenBuf,
        digest: u64,
    },
    /// Send your index back now.
    Speak,
}

/// What a client sends back: which client it is, what it read (hashed), a buffer it
/// made.
#[derive(Serialize, Deserialize, Debug)]
struct FromClient {
    index: u32,
    seen: u64,
    made: Option<ShmBuf>,
}

fn fs_options(ns: &Namespace) -> CreateOptions {
    CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns.clone())
        .capacity(8)
}

/// A child of this test, SIGKILLed (by pid) and reaped if the test ends without
/// reaping it.
struct Kid(Option<Child>);

impl Kid {
    fn pid(&self) -> u32 {
        self.0.as_ref().expect("not reaped").id()
    }

    fn reap(mut self) -> std::process::ExitStatus {
        wait_within(self.0.as_mut().expect("not reaped"), LIMIT)
    }

    fn kill(mut self) {
        let mut child = self.0.take().expect("not reaped yet");
        child.kill().unwrap(); // SIGKILL, ours, by pid
        child.wait().unwrap();
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts this binary in `role`, told where the server is and which client it is.
fn start(role: &str, server: &str, index: u32, t: &TestNamespace) -> Kid {
    let mut command: Command = test_role("child");
    command
        .env(ROLE, role)
        .env(SERVER, server)
        .env("SHMRC_TEST_INDEX", index.to_string())
        .env(NAMESPACE, t.ns.prefix())
        .env("SHMRC_MANAGER", "off");
    Kid(Some(command.spawn().expect("start a child")))
}

/// The child side: runs the role named in `SHMRC_TEST_CHILD` and exits; without it
/// (the ordinary test run) does nothing.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let server = std::env::var(SERVER).unwrap();
    let index: u32 = std::env::var("SHMRC_TEST_INDEX").unwrap().parse().unwrap();
    let code = match role.as_str() {
        "echo" => echo(&server, index),
        "stall" => stall(&server, index),
        "caller" => caller(&server, index),
        "answerer" => answerer(&server),
        "intruder" => intruder(&server),
        "runtime-dir" => runtime_dir(),
        "foreign-server" => foreign_server(),
        other => panic!("unknown role {other}"),
    };
    std::process::exit(code);
}

/// Connects and answers each message: a job with what it read and a new buffer, a
/// `Speak` with its index. Exits 0 when the server closes the channel.
fn echo(server: &str, index: u32) -> i32 {
    let (to_server, from_server) = channel::connect::<FromClient, ToClient>(server).unwrap();
    let ns = Namespace::new(std::env::var(NAMESPACE).unwrap()).unwrap();
    loop {
        let reply = match from_server.recv_timeout(LIMIT) {
            Ok(ToClient::Job {
                anonymous,
                named,
                frozen,
                digest,
            }) => {
                let mut a = vec![0u8; anonymous.len()];
                anonymous.read_at(0, &mut a).unwrap();
                let mut n = vec![0u8; named.len()];
                named.read_at(0, &mut n).unwrap();
                let seen = fnv1a(&a) ^ fnv1a(&n) ^ fnv1a(&frozen);
                if seen != digest {
                    return 3;
                }
                let made = ShmBuf::with_options(128, &fs_options(&ns)).unwrap();
                made.write_at(0, &pattern(128, index as u8)).unwrap();
                FromClient {
                    index,
                    seen,
                    made: Some(made),
                }
            }
            Ok(ToClient::Speak) => FromClient {
                index,
                seen: 0,
                made: None,
            },
            Err(Error::Disconnected) => return 0,
            Err(e) => panic!("echo {index}: {e}"),
        };
        to_server.send(&reply).unwrap();
    }
}

/// Connects, says it is there, and never reads again (waits to be killed).
fn stall(server: &str, index: u32) -> i32 {
    let (to_server, _from_server) = channel::connect::<FromClient, ToClient>(server).unwrap();
    to_server
        .send(&FromClient {
            index,
            seen: 0,
            made: None,
        })
        .unwrap();
    std::thread::sleep(LIMIT * 2);
    1
}

/// Calls the server three times with a buffer and checks each answer (the sum of the
/// buffer's bytes).
fn caller(server: &str, index: u32) -> i32 {
    let mut client = Client::<ShmBuf, u64>::connect(server).unwrap();
    for round in 0..3u8 {
        let buf = ShmBuf::new(64).unwrap();
        let data = pattern(64, index as u8 ^ round);
        buf.write_at(0, &data).unwrap();
        let want: u64 = data.iter().map(|&b| u64::from(b)).sum();
        if client.call_timeout(buf, LIMIT).unwrap() != want {
            return 3;
        }
    }
    0
}

/// Serves `request` calls (doubling each number), telling the parent its name first.
fn answerer(parent: &str) -> i32 {
    let mut server = Server::<u64, u64>::new().unwrap();
    let (to_parent, _) = channel::connect::<String, u8>(parent).unwrap();
    to_parent.send(&server.name().to_owned()).unwrap();
    server.serve(|n| n * 2).unwrap();
    1
}

/// Run as another user: connects to `server` by hand (an attacker skips the library's
/// own check of the server) and, if it may, sends a message; says which ("connected"
/// or "refused").
fn intruder(server: &str) -> i32 {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    let stream = if server.starts_with('/') {
        UnixStream::connect(server)
    } else {
        UnixStream::connect_addr(&SocketAddr::from_abstract_name(server.as_bytes()).unwrap())
    };
    match stream {
        Ok(stream) => {
            let _ = channel::Sender::<FromClient>::from_stream(stream).send(&FromClient {
                index: 666,
                seen: 0,
                made: None,
            });
            println!("intruder: connected");
        }
        Err(e) => println!("intruder: refused: {e}"),
    }
    0
}

/// Run with `SHMRC_RUNTIME_DIR` set by the parent: what `service_name` and
/// `Listener::bind` say about that directory, one line each.
fn runtime_dir() -> i32 {
    let said = |r: shmrc::Result<String>| match r {
        Ok(name) => format!("ok {name}"),
        Err(Error::SocketPathTooLong { .. }) => "too long".to_owned(),
        Err(Error::UnsafeRuntimeDir { .. }) => "unsafe".to_owned(),
        Err(e) => format!("other {e}"),
    };
    println!("service_name: {}", said(service_name("jobs")));
    let bound = Listener::<u8, u8>::bind("jobs").map(|l| l.name().to_owned());
    println!("bind: {}", said(bound));
    0
}

/// Run as another user: listens, says its name, and waits for its stdin to close.
fn foreign_server() -> i32 {
    let listener = Listener::<u8, u8>::new().unwrap();
    println!("name {}", listener.name());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    0
}

fn job(t: &TestNamespace, seed: u8) -> ToClient {
    let anonymous = ShmBuf::with_options(
        4096,
        &CreateOptions::new().strategy(Strategy::FileDescriptor),
    )
    .unwrap();
    anonymous.write_at(0, &pattern(4096, seed)).unwrap();
    let named = ShmBuf::with_options(256, &fs_options(&t.ns)).unwrap();
    named.write_at(0, &pattern(256, seed ^ 0x5a)).unwrap();
    let mut frozen = ShmBufMut::new(512).unwrap();
    frozen.copy_from_slice(&pattern(512, seed ^ 0xa5));
    let frozen = frozen.freeze().unwrap();
    let digest = fnv1a(&pattern(4096, seed)) ^ fnv1a(&pattern(256, seed ^ 0x5a)) ^ fnv1a(&frozen);
    ToClient::Job {
        anonymous,
        named,
        frozen,
        digest,
    }
}

/// Accepts `n` clients, checking that each is one of `kids`; returns them in the
/// order of `kids`.
fn accept_all(
    listener: &Listener<ToClient, FromClient>,
    kids: &[Kid],
) -> Vec<Connection<ToClient, FromClient>> {
    let mut accepted: Vec<Connection<ToClient, FromClient>> = (0..kids.len())
        .map(|_| listener.accept_timeout(LIMIT).unwrap())
        .collect();
    let me = nix::unistd::geteuid().as_raw();
    assert!(accepted.iter().all(|c| c.uid == me));
    let order: Vec<u32> = kids.iter().map(Kid::pid).collect();
    accepted.sort_by_key(|c| {
        order
            .iter()
            .position(|&pid| pid == c.pid)
            .expect("a kid's pid")
    });
    accepted
}

#[test]
fn several_clients_at_once_exchange_buffers_through_one_listener() {
    let t = TestNamespace::new("lis-many");
    let listener = Listener::<ToClient, FromClient>::new().unwrap();
    let kids: Vec<Kid> = (0..4)
        .map(|i| start("echo", listener.name(), i, &t))
        .collect();
    let clients = accept_all(&listener, &kids);
    let mut set = Select::new();
    let mut senders = std::collections::HashMap::new();
    for (index, client) in clients.into_iter().enumerate() {
        let id = set.add(client.receiver);
        senders.insert(id, (index as u32, client.sender));
    }
    // Every client gets a job at once; the answers come back in any order.
    let mut digests = std::collections::HashMap::new();
    for (index, sender) in senders.values() {
        let sent = job(&t, *index as u8);
        let ToClient::Job { digest, .. } = &sent else {
            unreachable!()
        };
        digests.insert(*index, *digest);
        sender.send(&sent).unwrap();
    }
    let mut answered = 0;
    while answered < 4 {
        for selection in set.select_timeout(LIMIT).unwrap() {
            let Selection::Message(id, reply) = selection else {
                panic!("not a message: {selection:?}");
            };
            assert_eq!(
                reply.index, senders[&id].0,
                "the answer came on its client's channel"
            );
            assert_eq!(reply.seen, digests[&reply.index]);
            let made = reply.made.expect("a buffer");
            let mut got = vec![0u8; 128];
            made.read_at(0, &mut got).unwrap();
            assert_eq!(got, pattern(128, reply.index as u8));
            answered += 1;
        }
    }
    // Closing each channel ends its client; the set then reports each one closed.
    senders.clear();
    let mut closed = 0;
    while closed < 4 {
        for selection in set.select_timeout(LIMIT).unwrap() {
            assert!(matches!(selection, Selection::Closed(_)), "{selection:?}");
            closed += 1;
        }
    }
    assert!(set.is_empty());
    for kid in kids {
        assert!(kid.reap().success());
    }
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_client_killed_is_reported_closed_and_what_was_in_flight_to_it_comes_back() {
    let t = TestNamespace::new("lis-kill");
    let listener = Listener::<ToClient, FromClient>::new().unwrap();
    let kids = vec![
        start("echo", listener.name(), 0, &t),
        start("stall", listener.name(), 1, &t),
        start("echo", listener.name(), 2, &t),
    ];
    let (mut senders, receivers): (Vec<_>, Vec<_>) = accept_all(&listener, &kids)
        .into_iter()
        .map(|c| (c.sender, c.receiver))
        .unzip();
    let mut set = Select::new();
    let ids: Vec<u64> = receivers.into_iter().map(|rx| set.add(rx)).collect();
    // The staller says it is there, and then never reads: a job sent to it stays in
    // flight, its file_system reference counted.
    let hello = set.select_timeout(LIMIT).unwrap();
    assert!(matches!(&hello[..], [Selection::Message(id, m)] if *id == ids[1] && m.index == 1));
    let stuck = job(&t, 9);
    let ToClient::Job { named, .. } = &stuck else {
        unreachable!()
    };
    let named = named.clone();
    senders[1].send(&stuck).unwrap();
    drop(stuck);
    assert_eq!(named.census().unwrap().in_flight, 1);
    let mut kids = kids.into_iter();
    let (first, staller, last) = (
        kids.next().unwrap(),
        kids.next().unwrap(),
        kids.next().unwrap(),
    );
    staller.kill();
    // The set reports it closed, and only it.
    let gone = set.select_timeout(LIMIT).unwrap();
    assert!(
        matches!(&gone[..], [Selection::Closed(id)] if *id == ids[1]),
        "{gone:?}"
    );
    assert_eq!(set.len(), 2);
    // Dropping its sender gives back the reference no one can take over any more.
    drop(senders.remove(1));
    let census = named.census().unwrap();
    assert_eq!(
        (census.live, census.in_flight),
        (1, 0),
        "only this process holds it"
    );
    // The others are unaffected.
    for sender in &senders {
        sender.send(&job(&t, 1)).unwrap();
    }
    let mut answered = 0;
    while answered < 2 {
        for selection in set.select_timeout(LIMIT).unwrap() {
            assert!(matches!(selection, Selection::Message(..)), "{selection:?}");
            answered += 1;
        }
    }
    drop(senders);
    assert!(first.reap().success());
    assert!(last.reap().success());
    drop(named);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn select_over_eight_receivers_wakes_for_exactly_the_one_that_got_a_message() {
    let t = TestNamespace::new("lis-eight");
    let listener = Listener::<ToClient, FromClient>::new().unwrap();
    let kids: Vec<Kid> = (0..8)
        .map(|i| start("echo", listener.name(), i, &t))
        .collect();
    let clients = accept_all(&listener, &kids);
    let mut set = Select::new();
    let mut senders = Vec::new();
    let mut ids = Vec::new();
    for client in clients {
        ids.push(set.add(client.receiver));
        senders.push(client.sender);
    }
    // Nobody has said anything: the set waits, and says so when the time is up.
    assert!(matches!(
        set.select_timeout(Duration::from_millis(20)),
        Err(Error::Timeout { .. })
    ));
    for k in [5, 0, 7, 3, 1, 6, 2, 4] {
        senders[k].send(&ToClient::Speak).unwrap();
        let woke = set.select_timeout(LIMIT).unwrap();
        assert!(
            matches!(&woke[..], [Selection::Message(id, m)] if *id == ids[k] && m.index == k as u32),
            "asked {k}, got {woke:?}"
        );
    }
    drop(senders);
    for kid in kids {
        assert!(kid.reap().success());
    }
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn request_and_response_between_processes() {
    let t = TestNamespace::new("lis-request");
    let mut server = Server::<ShmBuf, u64>::new().unwrap();
    let mut kids: Vec<Kid> = (0..3)
        .map(|i| start("caller", server.name(), i, &t))
        .collect();
    let mut answered = 0;
    let deadline = std::time::Instant::now() + LIMIT;
    while !kids.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "callers did not finish"
        );
        answered += server
            .serve_timeout(Duration::from_millis(50), |buf| {
                let mut data = vec![0u8; buf.len()];
                buf.read_at(0, &mut data).unwrap();
                data.iter().map(|&b| u64::from(b)).sum()
            })
            .unwrap();
        let mut still = Vec::new();
        for mut kid in kids {
            match kid.0.as_mut().unwrap().try_wait().unwrap() {
                Some(status) => {
                    assert!(status.success(), "a caller failed: {status}");
                    kid.0 = None;
                }
                None => still.push(kid),
            }
        }
        kids = still;
    }
    assert_eq!(answered, 9);
    // The callers are gone: the next round drops them.
    while server.clients() > 0 {
        server
            .serve_timeout(Duration::from_millis(50), |_| 0)
            .unwrap();
    }
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_call_after_the_server_died_is_disconnected() {
    let t = TestNamespace::new("lis-dead");
    let parent = Listener::<u8, String>::new().unwrap();
    let kid = start("answerer", parent.name(), 0, &t);
    let from_kid = parent.accept_timeout(LIMIT).unwrap();
    let name = from_kid.receiver.recv_timeout(LIMIT).unwrap();
    let mut client = Client::<u64, u64>::connect(&name).unwrap();
    assert_eq!(client.call_timeout(21, LIMIT).unwrap(), 42);
    kid.kill();
    assert!(matches!(
        client.call_timeout(1, LIMIT),
        Err(Error::Disconnected)
    ));
    assert!(matches!(client.call(1), Err(Error::Disconnected)));
    assert!(matches!(
        Client::<u64, u64>::connect(&name),
        Err(Error::Bootstrap { .. })
    ));
}

#[test]
fn an_answer_that_comes_after_its_call_timed_out_is_not_taken_for_the_next() {
    let _t = TestNamespace::new("lis-late");
    let mut server = Server::<u64, u64>::new().unwrap();
    let name = server.name().to_owned();
    let caller = std::thread::spawn(move || {
        let mut client = Client::<u64, u64>::connect(&name).unwrap();
        let first = client.call_timeout(1, Duration::from_millis(10));
        let second = client.call_timeout(2, LIMIT);
        (first, second)
    });
    // Answer the first call only after the caller gave up on it.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        server
            .serve_timeout(LIMIT, |n| {
                if n == 1 {
                    std::thread::sleep(Duration::from_millis(100));
                }
                seen.push(n);
                n * 100
            })
            .unwrap();
    }
    let (first, second) = caller.join().unwrap();
    assert!(matches!(first, Err(Error::Timeout { .. })), "{first:?}");
    assert_eq!(second.unwrap(), 200);
}

#[test]
fn a_named_service_is_found_by_its_name_and_bad_names_are_refused() {
    let _t = TestNamespace::new("lis-names");
    let service = format!("t-lis-{}", std::process::id());
    let listener = Listener::<u8, u8>::bind(&service).unwrap();
    let name = service_name(&service).unwrap();
    assert_eq!(listener.name(), name);
    let (tx, rx) = channel::connect::<u8, u8>(&name).unwrap();
    // (`incoming` is `accept` without end: the client is already waiting.)
    let client = listener.incoming().next().unwrap().unwrap();
    tx.send(&7).unwrap();
    assert_eq!(client.receiver.recv_timeout(LIMIT).unwrap(), 7);
    client.sender.send(&8).unwrap();
    assert_eq!(rx.recv_timeout(LIMIT).unwrap(), 8);
    // The socket file is the user's alone.
    let mode = std::fs::metadata(&name).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    // A live service is not taken over, and its listener sees no one knock.
    assert!(matches!(
        Listener::<u8, u8>::bind(&service),
        Err(Error::Bootstrap { .. })
    ));
    assert!(matches!(
        listener.accept_timeout(Duration::from_millis(50)),
        Err(Error::Timeout { .. })
    ));
    drop(listener);
    assert!(
        !std::path::Path::new(&name).exists(),
        "the socket file is removed"
    );
    let lock = name.replace(".sock", ".lock");
    assert!(!std::path::Path::new(&lock).exists(), "{lock} is removed");
    assert!(matches!(
        channel::connect::<u8, u8>(&name),
        Err(Error::Bootstrap { .. })
    ));
    // A file left by a listener that died is replaced.
    let left = std::os::unix::net::UnixListener::bind(&name).unwrap();
    drop(left);
    let again = Listener::<u8, u8>::bind(&service).unwrap();
    drop(again);
    assert!(!std::path::Path::new(&name).exists());
    assert!(!std::path::Path::new(&lock).exists());
    for bad in ["", "a/b", "../x", ".hidden", "sp ace", &"x".repeat(65)] {
        assert!(
            matches!(
                Listener::<u8, u8>::bind(bad),
                Err(Error::InvalidArgument(_))
            ),
            "{bad:?}"
        );
        assert!(matches!(service_name(bad), Err(Error::InvalidArgument(_))));
    }
}

#[test]
fn accept_and_select_say_when_nothing_came_and_an_empty_set_is_refused() {
    let _t = TestNamespace::new("lis-errors");
    let listener = Listener::<u8, u8>::new().unwrap();
    assert!(matches!(
        listener.accept_timeout(Duration::from_millis(20)),
        Err(Error::Timeout { .. })
    ));
    let mut set = Select::<u8>::new();
    assert!(matches!(set.select(), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        set.select_timeout(Duration::from_millis(1)),
        Err(Error::InvalidArgument(_))
    ));
    // A receiver removed leaves the set; a message that is not a `T` is a failure that
    // keeps its receiver, in step.
    let (tx, rx) = channel::channel::<u8>().unwrap();
    let id = set.add(rx);
    assert!(set.remove(id).is_some());
    assert!(set.remove(id).is_none());
    assert!(set.is_empty());
    let (raw_tx, raw_rx) = std::os::unix::net::UnixStream::pair().unwrap();
    let wrong = channel::Sender::<u8>::from_stream(raw_tx);
    let mut bools = Select::<bool>::new();
    let id = bools.add(channel::Receiver::from_stream(raw_rx));
    wrong.send(&200).unwrap();
    let failed = bools.select_timeout(LIMIT).unwrap();
    assert!(
        matches!(&failed[..], [Selection::Failed(x, Error::Codec { .. })] if *x == id),
        "{failed:?}"
    );
    assert_eq!(bools.len(), 1);
    drop((tx, wrong));
    let closed = bools.select_timeout(LIMIT).unwrap();
    assert!(
        matches!(&closed[..], [Selection::Closed(x)] if *x == id),
        "{closed:?}"
    );
}

/// Another user's process is never accepted: on a fresh abstract name it can connect
/// (abstract sockets have no permissions) but the listener drops it by its
/// `SO_PEERCRED` and goes on waiting; a service's socket file, in the private runtime
/// directory, it cannot even reach. A client of this user is accepted after it.
#[test]
fn another_users_client_is_refused() {
    const TEST: &str = "another_users_client_is_refused";
    let t = TestNamespace::new("lis-other");
    let user = match ThrowawayUser::create("lis") {
        Ok(user) => user,
        Err(why) => return cannot_attack(TEST, &why),
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let probe = copy_of_this_test(dir.path());
    let intrude = |server: &str| {
        let mut command = Command::new(&probe);
        command
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(ROLE, "intruder")
            .env(SERVER, server)
            .env("SHMRC_TEST_INDEX", "0")
            .env("SHMRC_MANAGER", "off")
            .current_dir("/")
            .uid(user.uid)
            .gid(user.gid);
        let out = output_within(&mut command, LIMIT);
        assert!(out.status.success(), "{}", text_of(&out));
        text_of(&out)
    };

    let listener = Listener::<ToClient, FromClient>::new().unwrap();
    let said = intrude(listener.name());
    assert!(said.contains("intruder: connected"), "{said}");
    // Its connection waits in the backlog: accepting finds it, refuses it, times out.
    assert!(matches!(
        listener.accept_timeout(Duration::from_millis(200)),
        Err(Error::Timeout { .. })
    ));
    let kid = start("echo", listener.name(), 0, &t);
    let client = listener.accept_timeout(LIMIT).unwrap();
    assert_eq!(client.pid, kid.pid());
    drop(client);
    assert!(kid.reap().success());

    // The other way round: a server of another user is refused by the client.
    let mut command = Command::new(&probe);
    command
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ROLE, "foreign-server")
        .env(SERVER, "-")
        .env("SHMRC_TEST_INDEX", "0")
        .env("SHMRC_MANAGER", "off")
        .current_dir("/")
        .uid(user.uid)
        .gid(user.gid);
    let foreign = Talker::start(&mut command, LIMIT);
    let said = foreign.expect("name ");
    let foreign_name = said["name ".len()..].trim();
    match channel::connect::<u8, u8>(foreign_name) {
        Err(Error::Bootstrap { why }) => assert!(why.contains("not this user"), "{why}"),
        other => panic!("connected to another user's server: {other:?}"),
    }
    foreign.finish();

    let service = format!("t-lis-other-{}", std::process::id());
    let listener = Listener::<ToClient, FromClient>::bind(&service).unwrap();
    let said = intrude(listener.name());
    assert!(said.contains("intruder: refused"), "{said}");
    assert!(matches!(
        listener.accept_timeout(Duration::from_millis(50)),
        Err(Error::Timeout { .. })
    ));
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// Issue 33 item 4's case for `Select`: two senders that wrote 4 KiB of a 1 MiB message
/// and stopped (alive) must not keep a third channel's whole message from being
/// selected. `Select` reads a woken receiver with `try_recv`, which takes what has
/// arrived of a begun message and keeps it in the receiver (the resumable receive), so
/// the stopped ones hold up nothing; before it, a begun message was read to its end and
/// this waited until the stopped senders went. The wait is bounded: the select runs on a
/// thread and the stopped senders are closed after 5 s.
#[test]
fn a_message_begun_and_stopped_does_not_hold_up_the_others() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let _t = TestNamespace::new("lis-partial");
    // The first 4 KiB of a real 1 MiB message, taken off a channel's socket.
    let (a, mut b) = UnixStream::pair().unwrap();
    let big = channel::Sender::<Vec<u8>>::from_stream(a);
    let writer = std::thread::spawn(move || big.send(&vec![7u8; 1 << 20]));
    let mut begun = vec![0u8; 4096];
    b.read_exact(&mut begun).unwrap();
    let mut set = Select::<Vec<u8>>::new();
    let mut stopped = Vec::new();
    for _ in 0..2 {
        let (mut raw, theirs) = UnixStream::pair().unwrap();
        raw.write_all(&begun).unwrap();
        set.add(channel::Receiver::from_stream(theirs));
        stopped.push(raw);
    }
    let (tx, rx) = channel::channel::<Vec<u8>>().unwrap();
    let whole = set.add(rx);
    tx.send(&b"whole".to_vec()).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let selecting = std::thread::spawn(move || {
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + LIMIT;
        while got.is_empty() && std::time::Instant::now() < deadline {
            got = set
                .select_timeout(Duration::from_millis(100))
                .unwrap_or_default()
                .into_iter()
                .filter(|s| matches!(s, Selection::Message(..)))
                .collect();
        }
        let _ = done_tx.send(got.iter().map(Selection::id).collect::<Vec<_>>());
    });
    let woke = done_rx.recv_timeout(Duration::from_secs(5));
    drop(stopped); // ends the wait if the select is stuck on them
    drop(b);
    let _ = writer.join();
    selecting.join().unwrap();
    assert_eq!(
        woke.expect("the whole message was not selected while two others were stopped half-way"),
        vec![whole]
    );
}

/// A runtime directory whose socket path would not fit `sun_path`, or that others could
/// enter, is refused by name (each case in a child with its own `SHMRC_RUNTIME_DIR`).
#[test]
fn a_runtime_directory_that_cannot_hold_a_service_is_refused() {
    let _t = TestNamespace::new("lis-rundir");
    let scratch = tempfile::tempdir().unwrap();
    let ask = |dir: &std::path::Path| {
        let mut command = test_role("child");
        command
            .env(ROLE, "runtime-dir")
            .env(SERVER, "-")
            .env("SHMRC_TEST_INDEX", "0")
            .env("SHMRC_RUNTIME_DIR", dir)
            .env("SHMRC_MANAGER", "off");
        let out = output_within(&mut command, LIMIT);
        assert!(out.status.success(), "{}", text_of(&out));
        text_of(&out)
    };
    let long = scratch.path().join("d".repeat(100));
    let said = ask(&long);
    assert!(said.contains("service_name: too long"), "{said}");
    assert!(said.contains("bind: too long"), "{said}");
    let open = scratch.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let said = ask(&open);
    assert!(said.contains("service_name: unsafe"), "{said}");
    assert!(said.contains("bind: unsafe"), "{said}");
    let private = scratch.path().join("private");
    let said = ask(&private);
    assert!(said.contains("bind: ok "), "{said}");
    let mode = std::fs::metadata(&private).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "made private: {mode:o}");
}

/// A client whose request is not a `Req` is dropped by the server (it then sees
/// `Disconnected`); the other clients are served on.
#[test]
fn a_client_out_of_step_is_dropped_and_the_others_served() {
    let _t = TestNamespace::new("lis-bad-request");
    let mut server = Server::<u64, u64>::new().unwrap();
    let name = server.name().to_owned();
    let good = std::thread::spawn({
        let name = name.clone();
        move || {
            let mut client = Client::<u64, u64>::connect(&name).unwrap();
            client.call_timeout(5, LIMIT)
        }
    });
    // Not a numbered request: one byte that ends a varint half-way.
    let (bad_tx, bad_rx) = channel::connect::<u8, u8>(&name).unwrap();
    bad_tx.send(&200).unwrap();
    let deadline = std::time::Instant::now() + LIMIT;
    let serve = |server: &mut Server<u64, u64>| {
        assert!(std::time::Instant::now() < deadline, "not served in time");
        server
            .serve_timeout(Duration::from_millis(20), |n| n + 1)
            .unwrap();
    };
    while !good.is_finished() {
        serve(&mut server);
    }
    assert_eq!(good.join().unwrap().unwrap(), 6);
    // The bad client is dropped: its channel ends.
    loop {
        match bad_rx.recv_timeout(Duration::from_millis(1)) {
            Err(Error::Disconnected) => break,
            Err(Error::Timeout { .. }) => serve(&mut server),
            other => panic!("the bad client got {other:?}"),
        }
    }
}

/// Two threads bind and drop the same service as fast as they can: at no moment do two
/// listeners hold it (each drop removes the lock file while holding it; a lock taken on
/// the removed file must not count).
#[test]
fn a_service_has_one_listener_at_a_time_while_binders_race() {
    use std::sync::Mutex;
    let _t = TestNamespace::new("lis-race");
    let service = format!("t-lis-race-{}", std::process::id());
    let holders = Mutex::new(0usize);
    let bound = Mutex::new(0usize);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..2000 {
                    match Listener::<u8, u8>::bind(&service) {
                        Ok(listener) => {
                            {
                                let mut held = holders.lock().unwrap();
                                assert_eq!(*held, 0, "two listeners");
                                *held += 1;
                            }
                            *bound.lock().unwrap() += 1;
                            std::thread::yield_now();
                            *holders.lock().unwrap() -= 1;
                            drop(listener);
                        }
                        Err(Error::Bootstrap { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    assert!(*bound.lock().unwrap() > 0);
    let name = service_name(&service).unwrap();
    assert!(!std::path::Path::new(&name).exists());
    assert!(!std::path::Path::new(&name.replace(".sock", ".lock")).exists());
}
