//! Senders that stop half-way through a message (issue 33, item 4): no receive waits
//! on one. Each stalled sender is a real `Sender` whose socket runs through a proxy
//! thread that forwards bytes and descriptors (`SCM_RIGHTS`) up to a limit and then
//! stops, as a client that wrote the first 4 KiB of a 1 MiB message and went quiet.
//!
//! The tests share this process's descriptor table and count its entries, so they take
//! turns (`SERIAL`). Every wait has a limit: a receive that blocks on a stalled message
//! fails its test (after the proxies are cut, which frees a blocked reader) instead of
//! hanging it.
#![cfg(feature = "tokio")]

use std::io::{IoSlice, IoSliceMut};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures_core::Stream;
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use serde::{Deserialize, Serialize};
use shmrc::channel::{AsyncReceiver, Receiver, Sender};
use shmrc::{CreateOptions, Error, PoolLimits, ShmBuf, ShmPool, Strategy};
use shmrc_testkit::data::pattern;
use shmrc_testkit::names::TestNamespace;

/// How long any single wait may take before the test fails.
const LIMIT: Duration = Duration::from_secs(5);
/// What a stalled client sends before it stops.
const SENT_BEFORE_STALL: usize = 4096;
/// The stalled message's payload.
const BIG: usize = 1 << 20;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Serialize, Deserialize, Debug)]
struct Note {
    client: u32,
    round: u32,
    data: Vec<u8>,
    bufs: Vec<ShmBuf>,
}

/// Asserts that `got` is `note(client, round, len)`, byte for byte.
fn assert_intact(got: &Note, client: u32, round: u32, len: usize) {
    let want = note(client, round, len);
    assert_eq!((got.client, got.round), (want.client, want.round));
    assert!(got.data == want.data, "the payload arrived changed");
}

fn note(client: u32, round: u32, len: usize) -> Note {
    Note {
        client,
        round,
        data: pattern(len, client as u8),
        bufs: Vec::new(),
    }
}

/// Where a proxy stands: how many bytes it may forward, how many it did, and whether
/// it was cut.
#[derive(Default)]
struct Gate {
    limit: usize,
    forwarded: usize,
    cut: bool,
}

/// A thread forwarding one direction of a connection, bytes and descriptors, up to a
/// limit.
struct Proxy {
    gate: Arc<(Mutex<Gate>, Condvar)>,
    ends: [UnixStream; 2],
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Forwards from `from` to `to`, the first `limit` bytes only until `resume`.
    fn new(from: UnixStream, to: UnixStream, limit: usize) -> Proxy {
        let gate = Arc::new((
            Mutex::new(Gate {
                limit,
                ..Gate::default()
            }),
            Condvar::new(),
        ));
        let ends = [from.try_clone().unwrap(), to.try_clone().unwrap()];
        let shared = Arc::clone(&gate);
        let thread = std::thread::spawn(move || forward(&from, &to, &shared));
        Proxy {
            gate,
            ends,
            thread: Some(thread),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Gate> {
        self.gate.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the proxy forwarded (and closed its copies of the descriptors of)
    /// `bytes` bytes.
    fn wait_forwarded(&self, bytes: usize) {
        let deadline = Instant::now() + LIMIT;
        let mut gate = self.lock();
        while gate.forwarded < bytes {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the proxy forwarded only {} bytes",
                gate.forwarded
            );
            gate = self.gate.1.wait_timeout(gate, left).unwrap().0;
        }
    }

    fn forwarded(&self) -> usize {
        self.lock().forwarded
    }

    /// Forwards everything from now on.
    fn resume(&self) {
        self.lock().limit = usize::MAX;
        self.gate.1.notify_all();
    }

    /// Stops forwarding and closes both ends' directions: a reader waiting on the far
    /// end sees the connection cut, the sender sees it closed.
    fn cut(&self) {
        self.lock().cut = true;
        self.gate.1.notify_all();
        for end in &self.ends {
            let _ = end.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The proxy's loop: waits for room under the limit, forwards what one `recvmsg`
/// brings (descriptors on its first byte, as they came), closes its copies.
fn forward(from: &UnixStream, to: &UnixStream, gate: &(Mutex<Gate>, Condvar)) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let room = {
            let mut g = gate.0.lock().unwrap_or_else(PoisonError::into_inner);
            while !g.cut && g.forwarded >= g.limit {
                g = gate.1.wait(g).unwrap_or_else(PoisonError::into_inner);
            }
            if g.cut {
                return;
            }
            (g.limit - g.forwarded).min(buf.len())
        };
        let mut space = nix::cmsg_space!([RawFd; 253]);
        let (n, fds) = {
            let mut iov = [IoSliceMut::new(&mut buf[..room])];
            let Ok(msg) = recvmsg::<()>(
                from.as_raw_fd(),
                &mut iov,
                Some(space.as_mut_slice()),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) else {
                return;
            };
            let mut fds = Vec::new();
            for cmsg in msg.cmsgs().expect("room for every descriptor") {
                if let ControlMessageOwned::ScmRights(received) = cmsg {
                    fds.extend(received);
                }
            }
            (msg.bytes, fds)
        };
        if n == 0 {
            let _ = to.shutdown(Shutdown::Write);
            return;
        }
        let rights = [ControlMessage::ScmRights(&fds)];
        let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
        let mut sent = match sendmsg::<()>(
            to.as_raw_fd(),
            &[IoSlice::new(&buf[..n])],
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(sent) => sent,
            Err(_) => return,
        };
        for fd in fds {
            let _ = nix::unistd::close(fd);
        }
        while sent < n {
            match nix::sys::socket::send(to.as_raw_fd(), &buf[sent..n], MsgFlags::MSG_NOSIGNAL) {
                Ok(more) => sent += more,
                Err(_) => return,
            }
        }
        gate.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .forwarded += n;
        gate.1.notify_all();
    }
}

/// A client whose `send` of `msg` runs in a thread of its own, through a proxy that
/// stops after `SENT_BEFORE_STALL` bytes; the receiving end for the server.
struct StalledClient {
    proxy: Proxy,
    sending: Option<JoinHandle<shmrc::Result<()>>>,
}

impl StalledClient {
    fn start(msg: Note) -> (StalledClient, Receiver<Note>) {
        let (client, proxy_in) = UnixStream::pair().unwrap();
        let (proxy_out, server) = UnixStream::pair().unwrap();
        let proxy = Proxy::new(proxy_in, proxy_out, SENT_BEFORE_STALL);
        let sending = std::thread::spawn(move || Sender::<Note>::from_stream(client).send(&msg));
        proxy.wait_forwarded(SENT_BEFORE_STALL);
        let stalled = StalledClient {
            proxy,
            sending: Some(sending),
        };
        (stalled, Receiver::from_stream(server))
    }

    /// Lets the rest of the message through, and the end of the stream after it (the
    /// sender's end closes once it sent); the sender's outcome.
    fn resume(mut self) -> shmrc::Result<()> {
        self.proxy.resume();
        let sent = self.sending.take().unwrap().join().unwrap();
        if let Some(thread) = self.proxy.thread.take() {
            thread.join().unwrap();
        }
        sent
    }

    /// Cuts the connection; the sender's outcome.
    fn cut(mut self) -> shmrc::Result<()> {
        self.proxy.cut();
        self.sending.take().unwrap().join().unwrap()
    }
}

/// The descriptors open in this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// The test: a tokio service on 2 workers with three clients, two of which sent
/// 4 KiB of a 1 MiB message and stopped. The third client's messages must arrive while
/// the other two are still stalled, each round's within `LIMIT`, and in 10 ms at the
/// median of 15 rounds (a liveness bound, not a measurement: a blocked worker shows as
/// a round that never arrives; the median keeps a loaded 2-core machine's odd slow
/// wake-up from failing it). Then the stalled two resume and arrive whole.
#[test]
fn two_clients_stalled_mid_message_do_not_delay_a_third_on_a_two_worker_runtime() {
    let _serial = serial();
    let _t = TestNamespace::new("stall-async");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (arrivals, arrived) = mpsc::channel::<(Instant, shmrc::Result<Note>)>();
    let serve = |receiver: Receiver<Note>| {
        let arrivals = arrivals.clone();
        runtime.spawn(async move {
            let receiver = AsyncReceiver::new(receiver).unwrap();
            loop {
                let got = receiver.recv().await;
                let done = got.is_err();
                if arrivals.send((Instant::now(), got)).is_err() || done {
                    return;
                }
            }
        })
    };
    let (stalled_a, at_a) = StalledClient::start(note(0, 0, BIG));
    let (stalled_b, at_b) = StalledClient::start(note(1, 0, BIG));
    let served = [serve(at_a), serve(at_b)];
    // Let both workers take up the stalled messages' first bytes.
    std::thread::sleep(Duration::from_millis(100));
    let (third, at_third) = shmrc::channel::channel::<Note>().unwrap();
    let served_third = serve(at_third);

    let mut delays = Vec::new();
    for round in 0..15 {
        let sent = Instant::now();
        third.send(&note(2, round, 64)).unwrap();
        let Ok((at, got)) = arrived.recv_timeout(LIMIT) else {
            // Free whatever is blocked on the stalled messages before failing.
            let _ = (stalled_a.cut(), stalled_b.cut());
            panic!(
                "round {round}: the third client's message had not arrived after {LIMIT:?}: \
                 the runtime's workers are held by the two stalled messages"
            );
        };
        let got = got.unwrap();
        assert_eq!(
            (got.client, got.round),
            (2, round),
            "only the third client's"
        );
        delays.push(at - sent);
    }
    // Still stalled: each proxy let through its 4 KiB and nothing more.
    assert_eq!(stalled_a.proxy.forwarded(), SENT_BEFORE_STALL);
    assert_eq!(stalled_b.proxy.forwarded(), SENT_BEFORE_STALL);
    let median = median(delays.clone());
    eprintln!("third client's delays with two clients stalled: {delays:?} (median {median:?})");
    assert!(
        median <= Duration::from_millis(10),
        "median delay {median:?} over 10 ms: {delays:?}"
    );

    // Stalled, then resumed: both arrive whole; with every client gone, each server
    // loop sees the end and returns.
    drop(third);
    let resumed = std::thread::spawn(move || (stalled_a.resume(), stalled_b.resume()));
    let (mut clients, mut ends) = (Vec::new(), 0);
    for _ in 0..5 {
        match arrived
            .recv_timeout(LIMIT)
            .expect("a resumed message or an end")
            .1
        {
            Ok(got) => {
                assert_intact(&got, got.client, 0, BIG);
                clients.push(got.client);
            }
            Err(Error::Disconnected) => ends += 1,
            Err(e) => panic!("{e}"),
        }
    }
    clients.sort();
    assert_eq!((clients, ends), (vec![0, 1], 3));
    let (a, b) = resumed.join().unwrap();
    a.unwrap();
    b.unwrap();
    for task in served.into_iter().chain([served_third]) {
        runtime.block_on(task).unwrap();
    }
    runtime.shutdown_timeout(LIMIT);
}

/// `recv_timeout` bounds the whole message: a sender stopped half-way is
/// `Error::Timeout` after the timeout (what arrived stays), and once it resumes the
/// next call returns the message intact.
#[test]
fn recv_timeout_gives_up_on_a_sender_stopped_half_way_and_a_later_call_continues_it() {
    let _serial = serial();
    let _t = TestNamespace::new("stall-sync");
    let (stalled, receiver) = StalledClient::start(note(0, 3, BIG));
    let (reports, report) = mpsc::channel();
    let (go, resumed) = mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let started = Instant::now();
        let first = receiver.recv_timeout(Duration::from_millis(200));
        let _ = reports.send((started.elapsed(), first.map(|_| ())));
        let second = receiver.try_recv();
        let _ = reports.send((started.elapsed(), second.map(|_| ())));
        if resumed.recv().is_err() {
            return None;
        }
        Some(receiver.recv_timeout(LIMIT))
    });
    let Ok((took, first)) = report.recv_timeout(LIMIT) else {
        let _ = stalled.cut();
        panic!(
            "recv_timeout(200 ms) had not returned after {LIMIT:?}: it waits inside the message"
        );
    };
    match first {
        Err(Error::Timeout { after }) => assert_eq!(after, Duration::from_millis(200)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        took >= Duration::from_millis(200),
        "gave up early: {took:?}"
    );
    let (_, second) = report.recv_timeout(LIMIT).unwrap();
    assert!(matches!(second, Err(Error::Timeout { .. })), "{second:?}");
    assert_eq!(
        stalled.proxy.forwarded(),
        SENT_BEFORE_STALL,
        "still stalled"
    );
    go.send(()).unwrap();
    stalled.resume().unwrap();
    let whole = reader.join().unwrap().expect("resumed").unwrap();
    assert_intact(&whole, 0, 3, BIG);
}

/// A receiver dropped while it holds part of a message, its descriptors included:
/// they are closed with it, and the references in flight come back (the sender sees
/// the connection closed); nothing stays in /dev/shm.
#[test]
fn a_receiver_dropped_mid_message_leaks_no_descriptor_or_segment() {
    let _serial = serial();
    let t = TestNamespace::new("stall-drop");
    let named = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(t.ns.clone());
    let fd = CreateOptions::new().strategy(Strategy::FileDescriptor);
    let pool = ShmPool::new(fd.clone(), PoolLimits::default()).unwrap();
    let bufs = vec![
        ShmBuf::with_options(64, &named).unwrap(),
        ShmBuf::with_options(64, &named).unwrap(),
        pool.get(64).unwrap(),
        ShmBuf::with_options(64, &fd).unwrap(),
    ];
    let before = open_fds();
    let msg = Note {
        bufs: bufs.clone(),
        ..note(0, 0, BIG)
    };
    let (stalled, receiver) = StalledClient::start(msg);
    // The client's socket pair, the proxy's two (and its copies of them) and the
    // server's end are open; the descriptors went through the proxy and it closed its
    // copies.
    let with_sockets = open_fds();
    // In a thread of its own, so that a receive that waits inside the message fails
    // the test (after the cut frees it) instead of hanging it.
    let (back, returned) = mpsc::channel();
    std::thread::spawn(move || {
        let got = receiver.recv_timeout(Duration::from_millis(50));
        let _ = back.send((receiver, got.map(|_| ())));
    });
    let Ok((receiver, got)) = returned.recv_timeout(LIMIT) else {
        let _ = stalled.cut();
        panic!("recv_timeout(50 ms) had not returned after {LIMIT:?}: it waits inside the message");
    };
    assert!(matches!(got, Err(Error::Timeout { .. })), "{got:?}");
    assert_eq!(
        open_fds(),
        with_sockets + 2,
        "the partial message holds its two memfds"
    );
    // The named buffers and the pooled memfd count a reference in flight; a plain
    // memfd's reference is the descriptor itself (counted above).
    for (i, buf) in bufs[..3].iter().enumerate() {
        assert_eq!(buf.census().unwrap().in_flight, 1, "buffer {i}");
    }
    drop(receiver);
    assert_eq!(
        open_fds(),
        with_sockets - 1,
        "the memfds and the socket closed"
    );
    // The proxy's forward fails on the closed end; cut it so the sender sees it too.
    assert!(matches!(stalled.cut(), Err(Error::Disconnected)));
    for (i, buf) in bufs.iter().enumerate() {
        assert_eq!(buf.census().unwrap().in_flight, 0, "buffer {i} given back");
    }
    assert_eq!(open_fds(), before, "nothing left open");
    drop(bufs);
    assert_eq!(pool.stats().idle, 1, "the pooled buffer is reusable");
    assert!(t.names().is_empty(), "{:?}", t.names());
}

/// The async receiver as a `Stream`: it yields a message stalled half-way (across a
/// cancelled `recv` and a given-up wait), then resumed, intact, and ends, for good,
/// when the sending end is gone.
#[test]
fn the_stream_yields_messages_across_a_stall_and_ends_on_disconnect() {
    let _serial = serial();
    let _t = TestNamespace::new("stall-stream");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (stalled, receiver) = StalledClient::start(note(5, 1, BIG));
    runtime.block_on(async move {
        let mut stream = AsyncReceiver::new(receiver).unwrap();
        // Stalled: nothing yet. A `recv` future dropped mid-message (cancelled by a
        // timeout) and a stream wait that gives up both leave what arrived in the
        // receiver: the message still arrives whole below.
        let cancelled = tokio::time::timeout(Duration::from_millis(50), stream.recv()).await;
        assert!(cancelled.is_err(), "{cancelled:?}");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), next(&mut stream))
                .await
                .is_err()
        );
        let resumed = std::thread::spawn(move || stalled.resume());
        let first = tokio::time::timeout(LIMIT, next(&mut stream))
            .await
            .expect("within the limit");
        assert_intact(&first.unwrap().unwrap(), 5, 1, BIG);
        resumed.join().unwrap().unwrap();
        // The proxy's sending end closed with the sender: the stream ends, and stays
        // ended.
        assert!(
            tokio::time::timeout(LIMIT, next(&mut stream))
                .await
                .unwrap()
                .is_none()
        );
        assert!(next(&mut stream).await.is_none());
    });
}

/// The stream's next item.
async fn next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

/// A stream that is not a socket (an `O_PATH` descriptor) cannot be made non-blocking:
/// every receive says so rather than risk blocking.
#[test]
fn a_receiver_on_a_descriptor_that_cannot_be_non_blocking_says_so() {
    use std::os::unix::fs::OpenOptionsExt;
    let path = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open("/")
        .unwrap();
    let receiver = Receiver::<u8>::from_stream(UnixStream::from(std::os::fd::OwnedFd::from(path)));
    for got in [receiver.try_recv(), receiver.recv()] {
        assert!(
            matches!(
                got,
                Err(Error::Os {
                    call: "set_nonblocking",
                    ..
                })
            ),
            "{got:?}"
        );
    }
}
