//! A file_descriptor `ShmPool` on the real kernel, with a consumer in another process
//! that receives the memfds over a Unix socket: a memfd the consumer let go of is
//! reused in a new generation (no new memfd, no page reservation); one it still holds
//! is lent and not reused; a kept handle of an earlier use is `Error::Stale`, reads
//! nothing and keeps no slot; a consumer SIGKILLed while it holds one leaves a slot
//! that the pool's next `get` reclaims (no sweep or manager sees a memfd). The
//! consumer is a copy of this test binary ([`consumer_role`]), spawned (not forked:
//! other tests run on threads beside it), driven line by line over its stdin and
//! stdout under a time limit, and killed by its pid.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use shmrc::checkers::buf::ShmBufExt;
use shmrc::{CreateOptions, Error, PoolLimits, ShareHandle, ShmBuf, ShmPool, Strategy, transport};
use shmrc_testkit::data::hex;
use shmrc_testkit::process::SocketPeer;

/// How long a consumer may take to answer, and to exit once told to.
const CONSUMER_LIMIT: Duration = Duration::from_secs(30);

/// The environment variable that makes [`consumer_role`] a consumer: the path of the
/// socket it connects to.
const CONSUMER_SOCKET: &str = "SHMRC_POOL_FD_TEST_SOCKET";

fn fd_pool() -> ShmPool {
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let options = CreateOptions::new().strategy(Strategy::FileDescriptor);
    ShmPool::new(options, PoolLimits::default()).unwrap()
}

/// A consumer process and the producer's end of its socket.
struct Consumer(SocketPeer);

impl Consumer {
    /// Starts one, connected to a socket of its own (`test` names it).
    fn start(test: &str) -> Consumer {
        let name = format!("shmrc-pool-fd-{test}");
        Consumer(SocketPeer::start(
            "consumer_role",
            CONSUMER_SOCKET,
            &name,
            CONSUMER_LIMIT,
        ))
    }

    /// Tells it `command` and returns its answer.
    fn ask(&mut self, command: &str) -> String {
        self.0.talker.ask(command)
    }

    /// Sends `buf`'s handle and waits until the consumer holds it; returns what it read.
    fn hold(&mut self, buf: &ShmBuf) -> String {
        transport::send(&self.0.socket, b"", vec![buf.share().unwrap()]).unwrap();
        self.ask("recv")
    }

    /// SIGKILLs it (by its pid) and reaps it.
    fn kill(self) {
        self.0.talker.kill();
    }

    /// Lets it exit (it drops everything it holds) and reaps it within the limit.
    fn finish(self) {
        self.0.talker.finish();
    }
}

/// The role a copy of this binary plays for [`Consumer`]. Not a test of its own:
/// without [`CONSUMER_SOCKET`] it returns at once. Commands, one per line on stdin:
/// `recv` (receive one handle, keep its bytes and a duplicate of its memfd, attach it,
/// say the first 16 bytes as hex), `release` (drop the attached buffer), `again`
/// (attach the kept bytes and memfd once more: `again ok <hex>`, `again stale`, or
/// `again error <why>`).
#[test]
fn consumer_role() {
    let Ok(path) = std::env::var(CONSUMER_SOCKET) else {
        return;
    };
    shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    let socket = UnixStream::connect(path).expect("connect to the producer");
    println!("connected");
    let mut kept: Option<(Vec<u8>, OwnedFd)> = None;
    let mut held: Option<ShmBuf> = None;
    let first_bytes = |buf: &ShmBuf| {
        let mut out = [0u8; 16];
        buf.read_at(0, &mut out).unwrap();
        hex(&out)
    };
    let attach_kept = |kept: &Option<(Vec<u8>, OwnedFd)>| {
        let (bytes, fd) = kept.as_ref().expect("a handle received");
        ShmBuf::attach(ShareHandle::from_fd_parts(bytes, fd.try_clone().unwrap()).unwrap())
    };
    let mut line = String::new();
    while {
        line.clear();
        std::io::stdin().read_line(&mut line).unwrap_or(0) > 0
    } {
        match line.trim() {
            "recv" => {
                let mut message = transport::recv(&socket).unwrap();
                let handle = message.handles.pop().expect("one handle");
                kept = Some(handle.into_fd_parts().unwrap());
                let buf = attach_kept(&kept).unwrap();
                println!("recv {}", first_bytes(&buf));
                held = Some(buf);
            }
            "release" => {
                drop(held.take());
                println!("release");
            }
            "again" => match attach_kept(&kept) {
                Ok(buf) => println!("again ok {}", first_bytes(&buf)),
                Err(Error::Stale { .. }) => println!("again stale"),
                Err(e) => println!("again error {e}"),
            },
            other => panic!("unknown command {other:?}"),
        }
    }
}

fn sixteen(text: &[u8]) -> String {
    let mut bytes = [0u8; 16];
    bytes[..text.len()].copy_from_slice(text);
    hex(&bytes)
}

#[test]
fn a_memfd_the_consumer_let_go_of_is_reused_and_its_old_handle_is_stale() {
    let pool = fd_pool();
    let mut consumer = Consumer::start("reuse");
    let first = pool.get(4096).unwrap();
    assert_eq!(first.strategy(), Strategy::FileDescriptor);
    first.write_at(0, b"first use").unwrap();
    let key = first.key();
    assert_eq!(
        consumer.hold(&first),
        format!("recv {}", sixteen(b"first use"))
    );
    drop(first);
    let stats = pool.stats();
    assert_eq!(
        (stats.lent, stats.idle),
        (1, 0),
        "the consumer holds it: {stats:?}"
    );

    // Lent: the next get makes a new memfd.
    let other = pool.get(4096).unwrap();
    assert_ne!(other.key(), key);
    drop(other);

    consumer.ask("release");
    let second = pool.get(4096).unwrap();
    assert_eq!(
        second.key(),
        key,
        "the memfd the consumer let go of, reused"
    );
    assert_eq!(second.generation(), 1);
    second.write_at(0, b"second use").unwrap();
    let stats = pool.stats();
    assert_eq!((stats.created, stats.recycled), (2, 1), "{stats:?}");

    // The consumer's kept handle (bytes and memfd) is of the first use.
    assert_eq!(consumer.ask("again"), "again stale");
    let census = second.census().unwrap();
    assert_eq!(
        (census.live, census.in_flight),
        (1, 0),
        "the stale attach kept no slot: {census:?}"
    );
    consumer.finish();
}

#[test]
fn a_consumer_killed_while_holding_a_memfd_leaves_a_slot_the_next_get_reclaims() {
    let pool = fd_pool();
    let mut consumer = Consumer::start("killed");
    let buf = pool.get(4096).unwrap();
    buf.write_at(0, b"held, then killed").unwrap();
    let key = buf.key();
    consumer.hold(&buf);
    drop(buf);
    consumer.kill();
    // The dead consumer's word is still in its slot: lent, as far as a look can tell.
    let stats = pool.stats();
    assert_eq!((stats.lent, stats.idle), (1, 0), "{stats:?}");
    // No idle memfd: `get` tries the lent one, finds its holder dead, reclaims its slot.
    let again = pool.get(4096).unwrap();
    assert_eq!(again.key(), key, "the dead consumer's memfd, reused");
    assert_eq!(again.generation(), 1);
    assert_eq!((pool.stats().created, pool.stats().recycled), (1, 1));
    let census = again.census().unwrap();
    assert_eq!((census.live, census.dead), (1, 0), "{census:?}");
}

#[test]
fn a_memfd_a_live_consumer_holds_is_not_reused_even_when_no_other_is_idle() {
    let pool = fd_pool();
    let mut consumer = Consumer::start("live");
    let buf = pool.get(4096).unwrap();
    buf.write_at(0, b"still held").unwrap();
    let key = buf.key();
    consumer.hold(&buf);
    drop(buf);
    // The one recycle attempt finds the consumer alive and rolls back.
    let fresh = pool.get(4096).unwrap();
    assert_ne!(fresh.key(), key);
    let stats = pool.stats();
    assert_eq!(
        (stats.lent, stats.in_use, stats.recycled),
        (1, 1, 0),
        "{stats:?}"
    );
    // The consumer still holds its own use.
    assert_eq!(
        consumer.ask("again"),
        format!("again ok {}", sixteen(b"still held"))
    );
    assert_eq!(pool.stats().recycled, 0);
    consumer.finish();
}

#[test]
fn a_pool_without_holder_slots_is_refused() {
    for strategy in [Strategy::FileDescriptor, Strategy::FileSystem] {
        let options = CreateOptions::new().strategy(strategy).capacity(0);
        match ShmPool::new(options, PoolLimits::default()) {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("holder slot"), "{why}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn a_pools_memfd_cannot_be_frozen() {
    let pool = fd_pool();
    let buf = pool.get(64).unwrap();
    drop(pool); // the pool's clone goes: `buf` is the only one left
    match buf.freeze() {
        Err(e) => assert!(e.to_string().contains("pool"), "{e}"),
        Ok(_) => panic!("a pool's memfd was sealed"),
    }
}
