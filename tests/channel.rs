//! `shmrc::channel` with real processes: each child is this test binary run again with
//! `SHMRC_TEST_CHILD=<role>` (the `child` test below runs the role and exits), started
//! by `channel::spawn`. Children are killed only by pid and always reaped; every
//! receive has a time limit; each test's namespace must be empty at its end.
#![cfg(all(feature = "channel", not(any(shmrc_loom, shmrc_shuttle))))]

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::process::{Child, Command};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shmrc::channel::{self, CHANNEL_ENV, Receiver, Sender};
use shmrc::{
    CreateOptions, Error, FrozenBuf, Namespace, PoolLimits, ShmBuf, ShmBufMut, ShmPool, Strategy,
};
use shmrc_testkit::data::{fnv1a, pattern};
use shmrc_testkit::names::TestNamespace;

const ROLE: &str = "SHMRC_TEST_CHILD";
const NAMESPACE: &str = "SHMRC_TEST_NAMESPACE";
const LIMIT: Duration = Duration::from_secs(30);

/// A message of structs with buffers of both strategies and a frozen one.
#[derive(Serialize, Deserialize, Debug)]
struct Job {
    id: u32,
    label: String,
    anonymous: ShmBuf,
    named: ShmBuf,
    frozen: FrozenBuf,
    digest: u64,
}

#[derive(Serialize, Deserialize, Debug)]
struct Reply {
    id: u32,
    /// What the child read, hashed; and a buffer it made and filled.
    seen: u64,
    made: ShmBuf,
}

fn fs_options(ns: &Namespace) -> CreateOptions {
    CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns.clone())
        .capacity(8)
}

fn child_namespace() -> Namespace {
    Namespace::new(std::env::var(NAMESPACE).expect("namespace for the child")).unwrap()
}

/// A child of this test: SIGKILLed (by pid) and reaped if the test ends without
/// reaping it, so a failing test leaves no process behind.
struct Kid(Option<Child>);

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts this binary in `role` with a channel to it.
fn start<T, U>(role: &str, t: &TestNamespace) -> (Kid, Sender<T>, Receiver<U>)
where
    T: Serialize + for<'de> Deserialize<'de>,
    U: Serialize + for<'de> Deserialize<'de>,
{
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(NAMESPACE, t.ns.prefix())
        .env("SHMRC_MANAGER", "off");
    let (child, tx, rx) = channel::spawn(&mut command).unwrap();
    (Kid(Some(child)), tx, rx)
}

fn reap(mut kid: Kid) -> std::process::ExitStatus {
    let mut child = kid.0.take().expect("not reaped yet");
    for _ in 0..(LIMIT.as_millis() / 10) {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill(); // ours, by pid
    child.wait().unwrap();
    panic!("child {} did not exit within {LIMIT:?}", child.id());
}

fn kill(mut kid: Kid) {
    let mut child = kid.0.take().expect("not reaped yet");
    child.kill().unwrap(); // SIGKILL, ours, by pid
    child.wait().unwrap();
}

/// The child side: runs the role named in `SHMRC_TEST_CHILD` and exits; without it
/// (the ordinary test run) does nothing.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let code = match role.as_str() {
        "echo" => echo(),
        "stall" => stall(),
        "partial" => partial(),
        "late" => late(),
        "take" => take(),
        other => panic!("unknown role {other}"),
    };
    std::process::exit(code);
}

/// Answers each job: checks its buffers, replies with a new file_system buffer.
fn echo() -> i32 {
    let (to_parent, jobs) = channel::from_parent::<Reply, Job>().unwrap();
    let ns = child_namespace();
    loop {
        let job = match jobs.recv_timeout(LIMIT) {
            Ok(job) => job,
            Err(Error::Disconnected) => return 0,
            Err(e) => panic!("echo: {e}"),
        };
        let mut anonymous = vec![0u8; job.anonymous.len()];
        job.anonymous.read_at(0, &mut anonymous).unwrap();
        let mut named = vec![0u8; job.named.len()];
        job.named.read_at(0, &mut named).unwrap();
        let seen = fnv1a(&anonymous) ^ fnv1a(&named) ^ fnv1a(&job.frozen);
        if seen != job.digest || job.label != format!("job {}", job.id) {
            return 3;
        }
        let made = ShmBuf::with_options(256, &fs_options(&ns)).unwrap();
        made.write_at(0, &pattern(256, job.id as u8)).unwrap();
        to_parent
            .send(&Reply {
                id: job.id,
                seen,
                made,
            })
            .unwrap();
    }
}

/// Connects, tells the parent it is there, and never receives.
fn stall() -> i32 {
    let (to_parent, _jobs) = channel::from_parent::<u8, Vec<ShmBuf>>().unwrap();
    to_parent.send(&1).unwrap();
    std::thread::sleep(LIMIT * 2);
    1
}

/// Connects by hand, reads the first bytes of a message (its descriptors, if any, are
/// closed by the kernel), tells the parent, and waits to be killed mid-message.
fn partial() -> i32 {
    use std::io::Read;
    let name = std::env::var(CHANNEL_ENV).unwrap();
    let mut stream =
        UnixStream::connect_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .unwrap();
    let mut first = [0u8; 40];
    stream.read_exact(&mut first).unwrap();
    let to_parent = Sender::<u8>::from_stream(stream.try_clone().unwrap());
    to_parent.send(&1).unwrap();
    std::thread::sleep(LIMIT * 2);
    1
}

/// Receives one message of buffers, reads each one's first byte, releases them all,
/// answers with the bytes' sum, and exits (its end of the channel closes with it).
fn take() -> i32 {
    let (to_parent, bufs) = channel::from_parent::<u8, Vec<ShmBuf>>().unwrap();
    let got = bufs.recv_timeout(LIMIT).unwrap();
    let mut sum = 0u8;
    for buf in &got {
        let mut first = [0u8];
        buf.read_at(0, &mut first).unwrap();
        sum = sum.wrapping_add(first[0]);
    }
    drop(got);
    to_parent.send(&sum).unwrap();
    0
}

/// Waits half a second, then sends one message.
fn late() -> i32 {
    let (to_parent, _unused) = channel::from_parent::<u32, u8>().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    to_parent.send(&42).unwrap();
    // Wait for the parent to close the channel.
    let _ = _unused.recv_timeout(LIMIT);
    0
}

fn job(t: &TestNamespace, id: u32) -> Job {
    let anonymous = ShmBuf::with_options(
        4096,
        &CreateOptions::new().strategy(Strategy::FileDescriptor),
    )
    .unwrap();
    anonymous.write_at(0, &pattern(4096, 1 + id as u8)).unwrap();
    let named = ShmBuf::with_options(1000, &fs_options(&t.ns)).unwrap();
    named.write_at(0, &pattern(1000, 2 + id as u8)).unwrap();
    let mut frozen = ShmBufMut::new(512).unwrap();
    frozen.copy_from_slice(&pattern(512, 3 + id as u8));
    let frozen = frozen.freeze().unwrap();
    let digest =
        fnv1a(&pattern(4096, 1 + id as u8)) ^ fnv1a(&pattern(1000, 2 + id as u8)) ^ fnv1a(&frozen);
    Job {
        id,
        label: format!("job {id}"),
        anonymous,
        named,
        frozen,
        digest,
    }
}

#[test]
fn structs_carrying_buffers_of_both_strategies_make_the_round_trip() {
    let t = TestNamespace::new("chan-echo");
    let (child, jobs, replies) = start::<Job, Reply>("echo", &t);
    for id in 0..5 {
        let sent = job(&t, id);
        jobs.send(&sent).unwrap();
        let reply = replies.recv_timeout(LIMIT).unwrap();
        assert_eq!((reply.id, reply.seen), (id, sent.digest));
        let mut made = vec![0u8; 256];
        reply.made.read_at(0, &mut made).unwrap();
        assert_eq!(made, pattern(256, id as u8));
    }
    assert_eq!(jobs.in_flight(), 0, "every reference was taken over");
    drop(jobs);
    assert!(reap(child).success());
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_receiver_killed_mid_message_loses_nothing_for_the_others() {
    let t = TestNamespace::new("chan-kill");
    let (partial, to_partial, from_partial) = start::<Vec<ShmBuf>, u8>("partial", &t);
    let (echo, to_echo, from_echo) = start::<Job, Reply>("echo", &t);
    // 300 file_descriptor buffers (two frames of descriptors) and 3 file_system ones.
    let mut batch: Vec<ShmBuf> = (0..300)
        .map(|_| {
            ShmBuf::with_options(64, &CreateOptions::new().strategy(Strategy::FileDescriptor))
                .unwrap()
        })
        .collect();
    let named: Vec<ShmBuf> = (0..3)
        .map(|_| ShmBuf::with_options(64, &fs_options(&t.ns)).unwrap())
        .collect();
    batch.extend(named.iter().cloned());
    to_partial.send(&batch).unwrap();
    // The partial child has read part of the message (it says so): kill it there.
    assert_eq!(from_partial.recv_timeout(LIMIT).unwrap(), 1);
    kill(partial);
    // The other receiver is unaffected: its jobs and buffers arrive whole.
    for id in 0..3 {
        let sent = job(&t, id);
        to_echo.send(&sent).unwrap();
        let reply = from_echo.recv_timeout(LIMIT).unwrap();
        assert_eq!(reply.seen, sent.digest);
    }
    // The dead receiver's in-flight references come back at the next send...
    assert_eq!(to_partial.in_flight(), 3);
    assert!(matches!(to_partial.send(&vec![]), Err(Error::Disconnected)));
    assert_eq!(to_partial.in_flight(), 0);
    for buf in &named {
        let census = buf.census().unwrap();
        assert_eq!(
            (census.live, census.in_flight),
            (1, 0),
            "only this process holds it"
        );
    }
    drop(to_echo);
    assert!(reap(echo).success());
    drop((batch, named));
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_message_never_received_is_given_back_when_the_receiver_goes() {
    let t = TestNamespace::new("chan-never");
    let (stall, to_stall, from_stall) = start::<Vec<ShmBuf>, u8>("stall", &t);
    assert_eq!(from_stall.recv_timeout(LIMIT).unwrap(), 1);
    let buf = ShmBuf::with_options(64, &fs_options(&t.ns)).unwrap();
    to_stall.send(&vec![buf.clone()]).unwrap();
    assert_eq!(buf.census().unwrap().in_flight, 1);
    kill(stall);
    // Not sending again: dropping the sender notices the closed end and gives back.
    drop(to_stall);
    assert_eq!(buf.census().unwrap().in_flight, 0);
    drop(buf);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// One buffer on two channels (issue 31): the first channel's receiver, a child, takes
/// its reference over, releases it and exits; the sender shares the same buffer on a
/// second channel (same slot, same word), then sees the first one closed and gives
/// back what it had in flight there, and drops its own buffer. The handle in flight on
/// the second channel, from this live sender, must keep its segment.
#[test]
fn a_buffer_on_two_channels_keeps_its_segment_when_the_first_channel_closes() {
    let t = TestNamespace::new("chan-two");
    let buf = ShmBuf::with_options(64, &fs_options(&t.ns)).unwrap();
    buf.write_at(0, &[42]).unwrap();
    let (take, to_take, from_take) = start::<Vec<ShmBuf>, u8>("take", &t);
    to_take.send(&vec![buf.clone()]).unwrap();
    assert_eq!(from_take.recv_timeout(LIMIT).unwrap(), 42);
    assert!(reap(take).success());
    assert_eq!(
        buf.census().unwrap().live,
        1,
        "the child released its reference"
    );
    let (to_second, from_second) = channel::channel::<Vec<ShmBuf>>().unwrap();
    to_second.send(&vec![buf.clone()]).unwrap();
    assert_eq!(to_second.in_flight(), 1);
    // The first channel's receiving end is gone: this send gives back what it had in
    // flight, which is nothing (its reference was taken over).
    assert!(matches!(to_take.send(&vec![]), Err(Error::Disconnected)));
    drop(to_take);
    assert_eq!(
        to_second.in_flight(),
        1,
        "the second channel's reference is in flight"
    );
    drop(buf);
    let got = from_second
        .recv_timeout(LIMIT)
        .expect("P1: the handle in flight from a live sender keeps its segment");
    let mut first = [0u8];
    got[0].read_at(0, &mut first).unwrap();
    assert_eq!(first[0], 42);
    drop(got);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// A buffer sent on a channel whose receiver (a child) took it over, released it and
/// exited, then shared by hand (`ShmBuf::share`, no channel): the share reuses the
/// slot with the same word, and closing the first channel must leave it alone (the
/// record of in-flight shares says the channel's entry is superseded).
#[test]
fn a_buffer_shared_by_hand_keeps_its_segment_when_a_channel_it_went_through_closes() {
    let t = TestNamespace::new("chan-by-hand");
    let buf = ShmBuf::with_options(64, &fs_options(&t.ns)).unwrap();
    buf.write_at(0, &[9]).unwrap();
    let (take, to_take, from_take) = start::<Vec<ShmBuf>, u8>("take", &t);
    to_take.send(&vec![buf.clone()]).unwrap();
    assert_eq!(from_take.recv_timeout(LIMIT).unwrap(), 9);
    assert!(reap(take).success());
    let by_hand = buf.share().unwrap();
    assert_eq!(buf.census().unwrap().in_flight, 1);
    assert_eq!(to_take.in_flight(), 0, "superseded by the share by hand");
    assert!(matches!(to_take.send(&vec![]), Err(Error::Disconnected)));
    drop(to_take);
    assert_eq!(
        buf.census().unwrap().in_flight,
        1,
        "the reference shared by hand is still in flight"
    );
    drop(buf);
    let got = ShmBuf::attach(by_hand)
        .expect("P1: a handle shared by hand from a live process keeps its segment");
    let mut first = [0u8];
    got.read_at(0, &mut first).unwrap();
    assert_eq!(first[0], 9);
    drop(got);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// One buffer on two channels, the first channel's receiver (a child) SIGKILLed before
/// it read anything: dropping that channel's sender gives back its reference, and only
/// that one; the second channel's, from this live sender, keeps the segment.
#[test]
fn a_receiver_killed_before_attaching_takes_nothing_from_another_channel() {
    let t = TestNamespace::new("chan-two-kill");
    let buf = ShmBuf::with_options(64, &fs_options(&t.ns)).unwrap();
    buf.write_at(0, &[7]).unwrap();
    let (stall, to_stall, from_stall) = start::<Vec<ShmBuf>, u8>("stall", &t);
    assert_eq!(from_stall.recv_timeout(LIMIT).unwrap(), 1);
    to_stall.send(&vec![buf.clone()]).unwrap();
    let (to_second, from_second) = channel::channel::<Vec<ShmBuf>>().unwrap();
    to_second.send(&vec![buf.clone()]).unwrap();
    assert_eq!(buf.census().unwrap().in_flight, 2);
    kill(stall);
    drop(to_stall);
    assert_eq!(
        buf.census().unwrap().in_flight,
        1,
        "only the dead receiver's came back"
    );
    assert_eq!(to_second.in_flight(), 1);
    drop(buf);
    let got = from_second
        .recv_timeout(LIMIT)
        .expect("P1: the handle in flight from a live sender keeps its segment");
    let mut first = [0u8];
    got[0].read_at(0, &mut first).unwrap();
    assert_eq!(first[0], 7);
    drop(got);
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_pools_memfd_in_a_message_never_received_is_given_back_when_the_receiver_goes() {
    let t = TestNamespace::new("chan-never-fd");
    let (stall, to_stall, from_stall) = start::<Vec<ShmBuf>, u8>("stall", &t);
    assert_eq!(from_stall.recv_timeout(LIMIT).unwrap(), 1);
    let fd = CreateOptions::new().strategy(Strategy::FileDescriptor);
    let pool = ShmPool::new(fd, PoolLimits::default()).unwrap();
    let buf = pool.get(64).unwrap();
    to_stall.send(&vec![buf.clone()]).unwrap();
    assert_eq!(to_stall.in_flight(), 1);
    assert_eq!(buf.census().unwrap().in_flight, 1);
    kill(stall);
    drop(to_stall);
    assert_eq!(buf.census().unwrap().in_flight, 0);
    drop(buf);
    assert_eq!(pool.stats().idle, 1, "nobody holds it: reusable");
}

#[test]
fn recv_timeout_waits_for_a_message_to_begin_and_no_longer() {
    let t = TestNamespace::new("chan-timeout");
    let (late, to_late, from_late) = start::<u8, u32>("late", &t);
    match from_late.recv_timeout(Duration::from_millis(50)) {
        Err(Error::Timeout { after }) => assert_eq!(after, Duration::from_millis(50)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(matches!(from_late.try_recv(), Err(Error::Timeout { .. })));
    assert_eq!(from_late.recv_timeout(LIMIT).unwrap(), 42, "still in step");
    drop(to_late);
    assert!(reap(late).success());
}

#[test]
fn a_child_that_exits_before_connecting_is_a_bootstrap_error() {
    let _t = TestNamespace::new("chan-noconnect");
    let started = channel::spawn::<u8, u8>(&mut Command::new("true"));
    match started {
        Err(Error::Bootstrap { why }) => assert!(why.contains("exited"), "{why}"),
        other => panic!("expected a bootstrap error, got {:?}", other.map(|_| ())),
    }
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_path_carries_jobs_to_a_child_and_back_and_recv_is_cancel_safe() {
    use shmrc::channel::{AsyncReceiver, AsyncSender};
    let t = TestNamespace::new("chan-async");
    let (child, jobs, replies) = start::<Job, Reply>("echo", &t);
    let (jobs, replies) = (AsyncSender::new(jobs), AsyncReceiver::new(replies).unwrap());
    // Nothing sent yet: a wait that gives up consumes nothing.
    let gave_up = tokio::time::timeout(Duration::from_millis(50), replies.recv()).await;
    assert!(gave_up.is_err());
    for id in 0..4 {
        let sent = job(&t, id);
        let digest = sent.digest;
        jobs.send(sent).await.unwrap();
        let reply = tokio::time::timeout(LIMIT, replies.recv())
            .await
            .expect("a reply within the limit")
            .unwrap();
        assert_eq!((reply.id, reply.seen), (id, digest));
    }
    drop(jobs);
    drop(replies);
    assert!(reap(child).success());
    assert!(t.names().is_empty(), "{:?}", t.names());
}

#[test]
fn a_buffer_outside_a_message_or_an_index_without_a_buffer_is_a_codec_error() {
    let _t = TestNamespace::new("chan-codec");
    let buf = ShmBuf::new(64).unwrap();
    let outside = postcard::to_stdvec(&buf).unwrap_err();
    assert!(
        outside.to_string().contains("Serde Serialization Error"),
        "{outside}"
    );

    // A forged message: index 5 where the receiver expects a buffer, and no handles.
    let (a, b) = UnixStream::pair().unwrap();
    let honest = Sender::<ShmBuf>::from_stream(a.try_clone().unwrap());
    let forger = Sender::<u32>::from_stream(a);
    let victim = Receiver::<ShmBuf>::from_stream(b);
    forger.send(&5).unwrap();
    match victim.recv() {
        Err(Error::Codec {
            during: "decode",
            why,
        }) => assert!(why.contains("#5"), "{why}"),
        other => panic!("expected a decode error, got {other:?}"),
    }
    // The channel is still in step: the next message decodes.
    honest.send(&buf).unwrap();
    assert_eq!(victim.recv().unwrap().len(), 64);
}
