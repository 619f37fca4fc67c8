//! The benchmark workloads and their contenders, shared by `shmrc bench` and the
//! criterion benches (so both time the very same code).
//!
//! A [`Contender`] is one way of sharing memory: shmrc with a strategy, or the
//! raw-syscall floor ([`crate::floor`]) with the matching mechanism. Its producer side
//! runs in the measuring process; its consumer side ([`serve`]) in a peer process that
//! the measuring process starts (re-executing itself) and talks to over a Unix socket.
//!
//! - ping-pong ([`ping_pong`]): create a fresh buffer, write byte 0, send it; the peer
//!   attaches, reads byte 0, releases and acks with that byte; the producer drops its
//!   buffer on the ack.
//! - stream ([`stream`]): the same with up to a window of buffers in flight.
//! - attach/release ([`attach_release`]): one buffer, many handles to it in one message;
//!   the peer times attaching, reading byte 0 of and releasing each.
//! - hold ([`Mode::Hold`]): the peer creates file_system buffers and holds them until it
//!   is killed (the sweep workload).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::floor::{self, FloorMap};
use shmrc::{CreateOptions, Error, Namespace, Result, ShmBuf, Strategy, transport};

/// Environment variable naming the contender a peer process serves.
pub const PEER_CONTENDER: &str = "SHMRC_BENCH_CONTENDER";
/// Environment variable naming the peer's [`Mode`].
pub const PEER_MODE: &str = "SHMRC_BENCH_MODE";
/// Environment variable with the socket path the peer connects to.
pub const PEER_SOCKET: &str = "SHMRC_BENCH_SOCKET";
/// Environment variable with the namespace prefix a `hold` peer creates buffers in.
pub const PEER_NAMESPACE: &str = "SHMRC_BENCH_NAMESPACE";
/// Environment variable with how many buffers a `hold` peer creates.
pub const PEER_COUNT: &str = "SHMRC_BENCH_COUNT";

/// The most handles one attach/release message carries: each in-flight file_system
/// handle takes a holder slot, and a buffer has 64 by default.
pub const ATTACH_BATCH: usize = 32;

/// What a peer process does.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Consume single buffers (ping-pong and stream): ack each with byte 0.
    Ping,
    /// Consume batches of handles to one buffer: ack each batch with the nanoseconds
    /// its attaches and releases took.
    Attach,
    /// Create file_system buffers and hold them until killed.
    Hold,
}

impl Mode {
    /// The name used in [`PEER_MODE`].
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ping => "ping",
            Mode::Attach => "attach",
            Mode::Hold => "hold",
        }
    }

    fn parse(name: &str) -> Result<Mode> {
        [Mode::Ping, Mode::Attach, Mode::Hold]
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| invalid(format!("unknown peer mode {name:?}")))
    }
}

/// One way of sharing a buffer with another process.
pub trait Contender {
    /// What the producer keeps while the peer works on a buffer.
    type Buf;
    /// The name printed in tables and passed to the peer.
    fn name(&self) -> String;
    /// Creates a buffer of `len` bytes and writes byte 0.
    fn create(&mut self, len: usize) -> Result<Self::Buf>;
    /// Sends `count` handles of `buf` in one message.
    fn send(&mut self, stream: &UnixStream, buf: &Self::Buf, count: usize) -> Result<()>;
    /// Receives one message, and attaches, reads byte 0 of and releases each handle in
    /// it; returns the last byte read and the nanoseconds the attaches and releases took
    /// (receiving aside). `None` when the producer has closed the stream.
    fn consume(&mut self, stream: &UnixStream) -> Result<Option<(u8, u64)>>;
}

/// shmrc with one strategy.
pub struct Shmrc {
    strategy: Strategy,
    options: CreateOptions,
}

impl Shmrc {
    /// shmrc buffers of `strategy`, file_system ones in namespace `ns`.
    pub fn new(strategy: Strategy, ns: Namespace) -> Shmrc {
        Shmrc {
            strategy,
            options: CreateOptions::new().strategy(strategy).namespace(ns),
        }
    }
}

impl Contender for Shmrc {
    type Buf = ShmBuf;

    fn name(&self) -> String {
        format!("shmrc {}", self.strategy)
    }

    fn create(&mut self, len: usize) -> Result<ShmBuf> {
        let buf = ShmBuf::with_options(len, &self.options)?;
        buf.write_at(0, &[1])?;
        Ok(buf)
    }

    fn send(&mut self, stream: &UnixStream, buf: &ShmBuf, count: usize) -> Result<()> {
        let handles = (0..count)
            .map(|_| buf.share())
            .collect::<Result<Vec<_>>>()?;
        transport::send(stream, b"", handles)
    }

    fn consume(&mut self, stream: &UnixStream) -> Result<Option<(u8, u64)>> {
        let message = match transport::recv(stream) {
            Ok(m) => m,
            Err(Error::Disconnected) => return Ok(None),
            Err(e) => return Err(e),
        };
        let start = Instant::now();
        let mut byte = [0u8];
        for handle in message.handles {
            let buf = ShmBuf::attach(handle)?;
            buf.read_at(0, &mut byte)?;
            buf.release()?;
        }
        Ok(Some((byte[0], nanos(start.elapsed()))))
    }
}

/// shmrc's typed channel (`shmrc::channel`) carrying one buffer per message: the same
/// buffers as [`Shmrc`], sent as a `ShmBuf` inside a serde message instead of a bare
/// handle, to measure what the channel adds over the [`transport`] it is built on. Its
/// ends are made once, on the stream the workload uses, and kept for every message.
pub struct ShmrcChannel {
    inner: Shmrc,
    sender: Option<shmrc::channel::Sender<ShmBuf>>,
    receiver: Option<shmrc::channel::Receiver<ShmBuf>>,
}

impl ShmrcChannel {
    /// A channel carrying buffers of `strategy`, file_system ones in namespace `ns`.
    pub fn new(strategy: Strategy, ns: Namespace) -> ShmrcChannel {
        ShmrcChannel {
            inner: Shmrc::new(strategy, ns),
            sender: None,
            receiver: None,
        }
    }
}

fn clone_stream(stream: &UnixStream) -> Result<UnixStream> {
    stream.try_clone().map_err(|e| Error::os("dup", e))
}

impl Contender for ShmrcChannel {
    type Buf = ShmBuf;

    fn name(&self) -> String {
        format!("shmrc channel {}", self.inner.strategy)
    }

    fn create(&mut self, len: usize) -> Result<ShmBuf> {
        self.inner.create(len)
    }

    fn send(&mut self, stream: &UnixStream, buf: &ShmBuf, count: usize) -> Result<()> {
        if self.sender.is_none() {
            self.sender = Some(shmrc::channel::Sender::from_stream(clone_stream(stream)?));
        }
        let sender = self.sender.as_ref().expect("set above");
        for _ in 0..count {
            sender.send(buf)?;
        }
        Ok(())
    }

    fn consume(&mut self, stream: &UnixStream) -> Result<Option<(u8, u64)>> {
        if self.receiver.is_none() {
            self.receiver = Some(shmrc::channel::Receiver::from_stream(clone_stream(stream)?));
        }
        let receiver = self.receiver.as_ref().expect("set above");
        let buf = match receiver.recv() {
            Ok(buf) => buf,
            Err(Error::Disconnected) => return Ok(None),
            Err(e) => return Err(e),
        };
        let start = Instant::now();
        let mut byte = [0u8];
        buf.read_at(0, &mut byte)?;
        buf.release()?;
        Ok(Some((byte[0], nanos(start.elapsed()))))
    }
}

/// The floor for file_descriptor: a memfd passed with `SCM_RIGHTS`, no protocol.
pub struct FloorFd {
    /// Whether to reserve the storage with `posix_fallocate` as shmrc does.
    pub reserve: bool,
}

impl Contender for FloorFd {
    type Buf = (OwnedFd, FloorMap);

    fn name(&self) -> String {
        floor_name("memfd", self.reserve)
    }

    fn create(&mut self, len: usize) -> Result<(OwnedFd, FloorMap)> {
        let fd = floor::memfd(len, self.reserve)?;
        let map = FloorMap::new(fd.as_fd(), len)?;
        map.write_byte(0, 1)?;
        Ok((fd, map))
    }

    fn send(&mut self, stream: &UnixStream, buf: &(OwnedFd, FloorMap), count: usize) -> Result<()> {
        let fds = vec![buf.0.as_fd(); count];
        floor::send(stream, &(buf.1.len() as u64).to_le_bytes(), &fds)
    }

    fn consume(&mut self, stream: &UnixStream) -> Result<Option<(u8, u64)>> {
        let mut fds = Vec::new();
        let Some(len) = recv_len(stream, &mut fds)? else {
            return Ok(None);
        };
        let start = Instant::now();
        let mut byte = 0;
        for fd in fds {
            byte = FloorMap::new(fd.as_fd(), len)?.read_byte(0)?;
        }
        Ok(Some((byte, nanos(start.elapsed()))))
    }
}

/// The floor for file_system: a name in `/dev/shm` sent as bytes, no protocol. The
/// producer unlinks it when it drops the buffer (after the peer's ack).
pub struct FloorNamed {
    /// Whether to reserve the storage with `posix_fallocate` as shmrc does.
    pub reserve: bool,
    /// Names are `<prefix>-<n>`.
    pub prefix: String,
    next: u64,
}

impl FloorNamed {
    /// Floor objects named `<prefix>-<n>`.
    pub fn new(prefix: String, reserve: bool) -> FloorNamed {
        FloorNamed {
            reserve,
            prefix,
            next: 0,
        }
    }
}

/// A named floor object; dropping it unmaps, closes and unlinks it.
pub struct NamedBuf {
    name: String,
    map: FloorMap,
    _fd: OwnedFd,
}

impl Drop for NamedBuf {
    fn drop(&mut self) {
        let _ = floor::unlink_named(&self.name);
    }
}

impl Contender for FloorNamed {
    type Buf = NamedBuf;

    fn name(&self) -> String {
        floor_name("shm_open", self.reserve)
    }

    fn create(&mut self, len: usize) -> Result<NamedBuf> {
        self.next += 1;
        let name = format!("{}-{}", self.prefix, self.next);
        let fd = floor::create_named(&name, len, self.reserve)?;
        let map = FloorMap::new(fd.as_fd(), len)?;
        map.write_byte(0, 1)?;
        Ok(NamedBuf { name, map, _fd: fd })
    }

    fn send(&mut self, stream: &UnixStream, buf: &NamedBuf, count: usize) -> Result<()> {
        send_named(stream, buf.map.len(), count, &buf.name)
    }

    fn consume(&mut self, stream: &UnixStream) -> Result<Option<(u8, u64)>> {
        let Some((len, count, name)) = recv_named(stream)? else {
            return Ok(None);
        };
        let start = Instant::now();
        let mut byte = 0;
        for _ in 0..count {
            let fd = floor::open_named(&name)?;
            byte = FloorMap::new(fd.as_fd(), len)?.read_byte(0)?;
        }
        Ok(Some((byte, nanos(start.elapsed()))))
    }
}

fn floor_name(mechanism: &str, reserve: bool) -> String {
    if reserve {
        format!("floor {mechanism}+fallocate")
    } else {
        format!("floor {mechanism}")
    }
}

/// Sends a message naming `count` opens of the named object `name` of `len` bytes.
pub fn send_named(stream: &UnixStream, len: usize, count: usize, name: &str) -> Result<()> {
    let mut bytes = (len as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&(count as u64).to_le_bytes());
    bytes.extend_from_slice(&(name.len() as u64).to_le_bytes());
    bytes.extend_from_slice(name.as_bytes());
    floor::send(stream, &bytes, &[])
}

/// Receives what [`send_named`] sent: length, count and name; `None` at end of stream.
pub fn recv_named(stream: &UnixStream) -> Result<Option<(usize, u64, String)>> {
    let Some(len) = recv_len(stream, &mut Vec::new())? else {
        return Ok(None);
    };
    let mut words = [0u8; 16];
    read_exact(stream, &mut words)?;
    let count = u64::from_le_bytes(words[..8].try_into().expect("8 bytes"));
    let name_len = u64::from_le_bytes(words[8..].try_into().expect("8 bytes"));
    if name_len > 255 {
        return Err(invalid(format!("floor name of {name_len} bytes")));
    }
    let mut name = vec![0u8; name_len as usize];
    read_exact(stream, &mut name)?;
    let name = String::from_utf8(name).map_err(|e| invalid(e.to_string()))?;
    Ok(Some((len, count, name)))
}

/// Reads the 8-byte length that starts every floor message, with the descriptors that
/// ride on it; `None` at end of stream.
pub fn recv_len(stream: &UnixStream, fds: &mut Vec<OwnedFd>) -> Result<Option<usize>> {
    let mut len = [0u8; 8];
    let mut got = 0;
    while got < len.len() {
        match floor::recv(stream, &mut len[got..], fds)? {
            0 if got == 0 => return Ok(None),
            0 => return Err(Error::Disconnected),
            n => got += n,
        }
    }
    usize::try_from(u64::from_le_bytes(len))
        .map(Some)
        .map_err(|_| invalid("floor length does not fit usize".into()))
}

fn read_exact(mut stream: &UnixStream, buf: &mut [u8]) -> Result<()> {
    stream.read_exact(buf).map_err(|e| Error::os("read", e))
}

fn write_all(mut stream: &UnixStream, buf: &[u8]) -> Result<()> {
    stream.write_all(buf).map_err(|e| Error::os("write", e))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn invalid(why: String) -> Error {
    Error::InvalidArgument(why)
}

/// Reads one ping ack; byte 0 of the buffer must have arrived as written.
fn await_ack(stream: &UnixStream) -> Result<()> {
    let mut ack = [0u8];
    read_exact(stream, &mut ack)?;
    if ack[0] != 1 {
        return Err(invalid(format!("peer read byte 0 as {}, not 1", ack[0])));
    }
    Ok(())
}

/// `iters` ping-pongs of `len`-byte buffers; the time they took.
pub fn ping_pong<C: Contender>(
    c: &mut C,
    stream: &UnixStream,
    len: usize,
    iters: u64,
) -> Result<Duration> {
    let start = Instant::now();
    for _ in 0..iters {
        let buf = c.create(len)?;
        c.send(stream, &buf, 1)?;
        await_ack(stream)?;
        drop(buf);
    }
    Ok(start.elapsed())
}

/// `count` buffers of `len` bytes with up to `window` in flight; the time they took.
pub fn stream<C: Contender>(
    c: &mut C,
    stream: &UnixStream,
    len: usize,
    count: u64,
    window: usize,
) -> Result<Duration> {
    let start = Instant::now();
    let mut in_flight = VecDeque::with_capacity(window);
    for _ in 0..count {
        if in_flight.len() == window.max(1) {
            await_ack(stream)?;
            in_flight.pop_front();
        }
        let buf = c.create(len)?;
        c.send(stream, &buf, 1)?;
        in_flight.push_back(buf);
    }
    while !in_flight.is_empty() {
        await_ack(stream)?;
        in_flight.pop_front();
    }
    Ok(start.elapsed())
}

/// The in-flight window for `len`-byte buffers: 64, or fewer so that at most 512 MiB
/// are in flight (a shared machine's `/dev/shm` and memory are not ours alone).
pub fn window_for(len: usize) -> usize {
    ((512usize << 20) / len.max(1)).clamp(1, 64)
}

/// Has the peer attach and release `count` handles to one buffer of `len` bytes; the
/// peer-side time of those attaches and releases.
pub fn attach_release<C: Contender>(
    c: &mut C,
    stream: &UnixStream,
    len: usize,
    count: u64,
) -> Result<Duration> {
    let buf = c.create(len)?;
    let mut total = 0u64;
    let mut left = count;
    while left > 0 {
        let batch = left.min(ATTACH_BATCH as u64);
        c.send(stream, &buf, batch as usize)?;
        let mut reply = [0u8; 9];
        read_exact(stream, &mut reply)?;
        if reply[0] != 1 {
            return Err(invalid(format!("peer read byte 0 as {}, not 1", reply[0])));
        }
        total += u64::from_le_bytes(reply[1..].try_into().expect("8 bytes"));
        left -= batch;
    }
    Ok(Duration::from_nanos(total))
}

/// A peer process and the connection to it; killed (by pid) and reaped when dropped.
pub struct Peer {
    /// The peer process.
    pub child: Child,
    /// The connection to it.
    pub stream: UnixStream,
    dir: PathBuf,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Peer {
    /// Starts `command` (a re-execution of the measuring binary that ends up in
    /// [`serve`]) as the peer serving `contender` in `mode`, and waits for it to connect.
    pub fn start(mut command: Command, contender: &str, mode: Mode) -> Result<Peer> {
        use shmrc::sync::process::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("shmrc-bench-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| Error::os("mkdir", e))?;
        let socket = dir.join("peer.sock");
        let listener = UnixListener::bind(&socket).map_err(|e| Error::os("bind", e))?;
        // The floor has no manager: neither side of a measurement talks to one.
        let mut child = command
            .env("SHMRC_MANAGER", "off")
            .env(PEER_CONTENDER, contender)
            .env(PEER_MODE, mode.name())
            .env(PEER_SOCKET, &socket)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| Error::os("spawn", e))?;
        match accept_from(&listener, &mut child) {
            Ok(stream) => Ok(Peer { child, stream, dir }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }
}

/// Accepts the connection of `child`; an error (instead of waiting forever) if the child
/// exits first or takes more than 20 seconds.
fn accept_from(listener: &UnixListener, child: &mut Child) -> Result<UnixStream> {
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::os("fcntl", e))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|e| Error::os("fcntl", e))?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some(status) = child.try_wait().map_err(|e| Error::os("waitpid", e))? {
                    return Err(invalid(format!(
                        "the peer process exited ({status}) before connecting"
                    )));
                }
                if Instant::now() > deadline {
                    return Err(invalid("the peer process did not connect in 20 s".into()));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(Error::os("accept", e)),
        }
    }
}

/// The peer side: connects to the socket named in the environment and serves `c` in
/// the mode named there until the producer closes the stream.
pub fn serve<C: Contender>(mut c: C) -> Result<()> {
    let socket = std::env::var_os(PEER_SOCKET)
        .ok_or_else(|| invalid(format!("{PEER_SOCKET} is not set")))?;
    let mode = Mode::parse(&std::env::var(PEER_MODE).unwrap_or_default())?;
    let stream = UnixStream::connect(socket).map_err(|e| Error::os("connect", e))?;
    if mode == Mode::Hold {
        return hold(&stream);
    }
    while let Some((byte, took)) = c.consume(&stream)? {
        match mode {
            Mode::Attach => {
                let mut reply = vec![byte];
                reply.extend_from_slice(&took.to_le_bytes());
                write_all(&stream, &reply)?;
            }
            _ => write_all(&stream, &[byte])?,
        }
    }
    Ok(())
}

/// Creates the file_system buffers the environment asks for, acks, and holds them until
/// killed (or until the producer closes the stream).
fn hold(stream: &UnixStream) -> Result<()> {
    let ns = Namespace::new(std::env::var(PEER_NAMESPACE).unwrap_or_default())?;
    let count: usize = std::env::var(PEER_COUNT)
        .ok()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| invalid(format!("{PEER_COUNT} is not a count")))?;
    let options = CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns);
    let held = (0..count)
        .map(|_| ShmBuf::with_options(4096, &options))
        .collect::<Result<Vec<_>>>()?;
    write_all(stream, &[1])?;
    let mut end = [0u8];
    let _ = (&*stream).read(&mut end);
    drop(held);
    Ok(())
}

/// Serves the contender named in the environment if it is one of this module's (shmrc
/// or the floor); `None` if the name is not known here.
pub fn serve_builtin() -> Option<Result<()>> {
    let name = std::env::var(PEER_CONTENDER).unwrap_or_default();
    let ns = Namespace::default();
    Some(match name.as_str() {
        n if n == Shmrc::new(Strategy::FileDescriptor, ns.clone()).name() => {
            serve(Shmrc::new(Strategy::FileDescriptor, ns))
        }
        n if n == Shmrc::new(Strategy::FileSystem, ns.clone()).name() => {
            serve(Shmrc::new(Strategy::FileSystem, ns))
        }
        n if n == ShmrcChannel::new(Strategy::FileDescriptor, ns.clone()).name() => {
            serve(ShmrcChannel::new(Strategy::FileDescriptor, ns))
        }
        n if n == ShmrcChannel::new(Strategy::FileSystem, ns.clone()).name() => {
            serve(ShmrcChannel::new(Strategy::FileSystem, ns))
        }
        n if n.starts_with("floor memfd") => serve(FloorFd { reserve: false }),
        n if n.starts_with("floor shm_open") => serve(FloorNamed::new(String::new(), false)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_peer_that_exits_before_connecting_is_an_error_not_a_hang() {
        let command = std::process::Command::new("true");
        let Err(err) = super::Peer::start(command, "floor memfd", super::Mode::Ping) else {
            panic!("a peer that never connects was accepted");
        };
        assert!(err.to_string().contains("exited"), "{err}");
    }

    #[test]
    fn a_floor_message_with_an_overlong_name_is_refused() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        super::send_named(&a, 4096, 1, &"x".repeat(300)).unwrap();
        let err = super::recv_named(&b).unwrap_err();
        assert!(err.to_string().contains("floor name of 300 bytes"), "{err}");
    }

    #[test]
    fn an_ack_with_the_wrong_byte_is_an_error_and_a_closed_peer_ends_serving() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        super::write_all(&a, &[7]).unwrap();
        let err = super::await_ack(&b).unwrap_err();
        assert!(err.to_string().contains("byte 0 as 7"), "{err}");
        drop(a);
        let mut consumer = super::FloorFd { reserve: false };
        assert!(
            super::Contender::consume(&mut consumer, &b)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_floor_buffer_makes_the_round_trip_with_its_byte() {
        use super::Contender;
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut producer = super::FloorFd { reserve: true };
        let buf = producer.create(8192).unwrap();
        producer.send(&a, &buf, 3).unwrap();
        let (byte, _) = super::FloorFd { reserve: true }
            .consume(&b)
            .unwrap()
            .unwrap();
        assert_eq!(byte, 1);
    }
}
