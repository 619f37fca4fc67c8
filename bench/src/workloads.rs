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
//! - fill ([`stream`] with [`Payload::Fill`], peer mode [`Mode::Fill`]): the stream,
//!   the producer writing every byte of each buffer and the peer checking every byte
//!   ([`crate::payload`]) and acking with the buffer's seed; its floors also run with
//!   objects as long as shmrc's segment ([`AtSegmentLength`]), the fill goals' bound.
//! - pooled rows: the same workloads with buffers from a [`ShmPool`] ([`Shmrc::pooled`]),
//!   against the bare floor ([`FloorReused`]: segments created, reserved and faulted
//!   once, outside the timing, and reused), the peer attaching each one as usual.
//! - attach/release ([`attach_release`]): one buffer, many handles to it in one message;
//!   the peer times attaching, reading byte 0 of and releasing each.
//! - hold ([`Mode::Hold`]): the peer creates file_system buffers and holds them until it
//!   is killed (the sweep workload).

use std::cell::Cell;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::floor::{self, FloorMap};
use crate::payload::{Payload, next_seed};
use shmrc::checkers::os::Os;
use shmrc::checkers::segment::{DEFAULT_CAPACITY, HEADER_BYTES, Layout};
use shmrc::{
    CreateOptions, DefaultOs, Error, Namespace, PoolLimits, Result, ShmBuf, ShmPool, Strategy,
    transport,
};

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
    /// Consume single filled buffers (the fill workload): check every byte and ack
    /// each with the seed it carries.
    Fill,
}

impl Mode {
    /// The name used in [`PEER_MODE`].
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ping => "ping",
            Mode::Attach => "attach",
            Mode::Hold => "hold",
            Mode::Fill => "fill",
        }
    }

    /// What the peer reads of each buffer in this mode.
    pub fn payload(self) -> Payload {
        match self {
            Mode::Fill => Payload::Fill,
            _ => Payload::TouchOne,
        }
    }

    fn parse(name: &str) -> Result<Mode> {
        [Mode::Ping, Mode::Attach, Mode::Hold, Mode::Fill]
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
    /// Writes `payload` of `seed` into `buf`, which was just created and not sent yet
    /// ([`Payload::write`]).
    fn write(&mut self, buf: &Self::Buf, payload: Payload, seed: u64) -> Result<()>;
    /// Sends `count` handles of `buf` in one message.
    fn send(&mut self, stream: &UnixStream, buf: &Self::Buf, count: usize) -> Result<()>;
    /// Receives one message, and attaches, reads `payload` of ([`Payload::read`]) and
    /// releases each handle in it; returns the last value read (byte 0, or a filled
    /// buffer's seed) and the nanoseconds the attaches, reads and releases took
    /// (receiving aside). `None` when the producer has closed the stream.
    fn consume(&mut self, stream: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>>;
}

/// shmrc with one strategy: a fresh buffer per operation, or buffers from a
/// [`ShmPool`] ([`Shmrc::pooled`]), each a segment (or memfd) recycled once its
/// previous use is released everywhere (no `shm_open` or `memfd_create`, no
/// reservation), or a new one while none is free. The consumer is the same for both:
/// it receives a handle and attaches.
pub struct Shmrc {
    strategy: Strategy,
    source: Source,
}

/// Where [`Shmrc`]'s producer gets its buffers.
enum Source {
    Fresh(CreateOptions),
    Pool(ShmPool),
}

impl Shmrc {
    /// The name of the pooled file_system rows (their peer consumes as any file_system
    /// [`Shmrc`]).
    pub const POOLED: &'static str = "shmrc pool file_system";
    /// The name of the pooled file_descriptor rows (their peer consumes as any
    /// file_descriptor [`Shmrc`]).
    pub const POOLED_FD: &'static str = "shmrc pool file_descriptor";

    /// The name of the pooled rows of `strategy`.
    pub fn pooled_name(strategy: Strategy) -> &'static str {
        match strategy {
            Strategy::FileSystem => Shmrc::POOLED,
            Strategy::FileDescriptor => Shmrc::POOLED_FD,
        }
    }

    /// shmrc buffers of `strategy`, file_system ones in namespace `ns`.
    pub fn new(strategy: Strategy, ns: Namespace) -> Shmrc {
        Shmrc {
            strategy,
            source: Source::Fresh(CreateOptions::new().strategy(strategy).namespace(ns)),
        }
    }

    /// Fresh buffers of `strategy` made with `options` (its namespace and capacity).
    pub fn with_options(strategy: Strategy, options: CreateOptions) -> Shmrc {
        Shmrc {
            strategy,
            source: Source::Fresh(options.strategy(strategy)),
        }
    }

    /// Buffers from a pool of `strategy` buffers (file_system ones in namespace `ns`)
    /// that keeps up to `window` idle buffers (the default limits otherwise): as many
    /// as the workload has in flight, as a user sizes a pool for a pipeline. With
    /// fewer, a stream whose window drains at the end of each batch gives most segments
    /// back and creates them again in the next batch (the default keeps 64).
    pub fn pooled(strategy: Strategy, ns: Namespace, window: usize) -> Result<Shmrc> {
        let options = CreateOptions::new().strategy(strategy).namespace(ns);
        let limits = PoolLimits {
            max_idle_buffers: window.max(PoolLimits::default().max_idle_buffers),
            ..PoolLimits::default()
        };
        Ok(Shmrc {
            strategy,
            source: Source::Pool(ShmPool::new(options, limits)?),
        })
    }

    /// The pool buffers come from, if [`Shmrc::pooled`].
    pub fn pool(&self) -> Option<&ShmPool> {
        match &self.source {
            Source::Pool(pool) => Some(pool),
            Source::Fresh(_) => None,
        }
    }
}

impl Contender for Shmrc {
    type Buf = ShmBuf;

    fn name(&self) -> String {
        match self.source {
            Source::Fresh(_) => format!("shmrc {}", self.strategy),
            Source::Pool(_) => Shmrc::pooled_name(self.strategy).into(),
        }
    }

    fn create(&mut self, len: usize) -> Result<ShmBuf> {
        let buf = match &self.source {
            Source::Fresh(options) => ShmBuf::with_options(len, options)?,
            Source::Pool(pool) => pool.get(len)?,
        };
        buf.write_at(0, &[1])?;
        Ok(buf)
    }

    fn write(&mut self, buf: &ShmBuf, payload: Payload, seed: u64) -> Result<()> {
        payload.write(buf, seed)
    }

    fn send(&mut self, stream: &UnixStream, buf: &ShmBuf, count: usize) -> Result<()> {
        let handles = (0..count)
            .map(|_| buf.share())
            .collect::<Result<Vec<_>>>()?;
        transport::send(stream, b"", handles)
    }

    fn consume(&mut self, stream: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
        let message = match transport::recv(stream) {
            Ok(m) => m,
            Err(Error::Disconnected) => return Ok(None),
            Err(e) => return Err(e),
        };
        let start = Instant::now();
        let mut read = 0;
        for handle in message.handles {
            let buf = ShmBuf::attach(handle)?;
            read = payload.read(&buf)?;
            buf.release()?;
        }
        Ok(Some((read, nanos(start.elapsed()))))
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

    fn write(&mut self, buf: &ShmBuf, payload: Payload, seed: u64) -> Result<()> {
        payload.write(buf, seed)
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

    fn consume(&mut self, stream: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
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
        let read = payload.read(&buf)?;
        buf.release()?;
        Ok(Some((read, nanos(start.elapsed()))))
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

    fn write(&mut self, buf: &(OwnedFd, FloorMap), payload: Payload, seed: u64) -> Result<()> {
        payload.write(&buf.1, seed)
    }

    fn send(&mut self, stream: &UnixStream, buf: &(OwnedFd, FloorMap), count: usize) -> Result<()> {
        let fds = vec![buf.0.as_fd(); count];
        floor::send(stream, &(buf.1.len() as u64).to_le_bytes(), &fds)
    }

    fn consume(&mut self, stream: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
        let mut fds = Vec::new();
        let Some(len) = recv_len(stream, &mut fds)? else {
            return Ok(None);
        };
        let start = Instant::now();
        let mut read = 0;
        for fd in fds {
            read = payload.read(&FloorMap::new(fd.as_fd(), len)?)?;
        }
        Ok(Some((read, nanos(start.elapsed()))))
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
    fd: OwnedFd,
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
        Ok(NamedBuf { name, map, fd })
    }

    fn write(&mut self, buf: &NamedBuf, payload: Payload, seed: u64) -> Result<()> {
        payload.write(&buf.map, seed)
    }

    fn send(&mut self, stream: &UnixStream, buf: &NamedBuf, count: usize) -> Result<()> {
        send_named(stream, buf.map.len(), count, &buf.name)
    }

    fn consume(&mut self, stream: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
        consume_named(stream, payload)
    }
}

/// The consumer of a named floor object: `shm_open`, `mmap`, read, `munmap`, `close`.
fn consume_named(stream: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
    let Some((len, count, name)) = recv_named(stream)? else {
        return Ok(None);
    };
    let start = Instant::now();
    let mut read = 0;
    for _ in 0..count {
        let fd = floor::open_named(&name)?;
        read = payload.read(&FloorMap::new(fd.as_fd(), len)?)?;
    }
    Ok(Some((read, nanos(start.elapsed()))))
}

/// The suffix of an [`AtSegmentLength`] floor's name.
pub const SEGMENT_LENGTH: &str = ", segment length";

/// The layout of the segment shmrc makes for a fresh buffer of `len` bytes with
/// `strategy`: a file_descriptor buffer's memfd has no holder slots (the kernel counts
/// its references), a file_system one has the default capacity's.
pub fn fresh_segment_layout(strategy: Strategy, len: usize) -> Result<Layout> {
    let capacity = match strategy {
        Strategy::FileDescriptor => 0,
        Strategy::FileSystem => DEFAULT_CAPACITY,
    };
    Layout::new(len, capacity)
}

/// A floor contender whose objects are as long as shmrc's segment for the same payload
/// ([`fresh_segment_layout`]: the payload plus the header and holder slots), mapped,
/// written and read whole: everything else as `inner` does. It is the least that any
/// implementation keeping shmrc's segment design pays for the raw calls: the bound that
/// the fill goals' reasons compare shmrc with ([`crate::goals`]).
pub struct AtSegmentLength<C> {
    inner: C,
    strategy: Strategy,
}

impl<C: Contender> AtSegmentLength<C> {
    /// `inner`'s objects made as long as `strategy`'s fresh segments.
    pub fn new(inner: C, strategy: Strategy) -> AtSegmentLength<C> {
        AtSegmentLength { inner, strategy }
    }
}

impl<C: Contender> Contender for AtSegmentLength<C> {
    type Buf = C::Buf;

    fn name(&self) -> String {
        format!("{}{SEGMENT_LENGTH}", self.inner.name())
    }

    fn create(&mut self, len: usize) -> Result<C::Buf> {
        let segment_len = fresh_segment_layout(self.strategy, len)?.total_len();
        self.inner.create(segment_len)
    }

    fn write(&mut self, buf: &C::Buf, payload: Payload, seed: u64) -> Result<()> {
        self.inner.write(buf, payload, seed)
    }

    fn send(&mut self, stream: &UnixStream, buf: &C::Buf, count: usize) -> Result<()> {
        self.inner.send(stream, buf, count)
    }

    fn consume(&mut self, stream: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
        self.inner.consume(stream, payload)
    }
}

/// The suffix of a [`FloorChecked`] floor's name.
pub const WITH_CHECKS: &str = ", with checks";

/// The word of a checked floor object that its consumer claims and releases as shmrc's
/// consumer does its holder slot: the first after the header.
const SLOT_WORD: usize = HEADER_BYTES;

/// The reserved named floor at shmrc's segment length ([`AtSegmentLength`]) that also
/// makes the system calls and the slot claim by which shmrc keeps its promises for a
/// fresh file_system buffer: the producer draws the 24 random bytes of the name's nonce
/// and the share key (unguessable names), asks its effective uid (the user's namespace)
/// and sets the object's mode to 0600 whatever the umask; the consumer asks the uid
/// twice (the handle's name, then the file's owner), checks owner and length on the
/// opened descriptor (`fstat`), claims and releases a slot word by CAS, and at the
/// release polls the producer's process descriptor (does the other holder live?). Not
/// made: the producer's own slot and finalize words (a few CASes on a page it has
/// written) and the transport's frame. The least an implementation keeping shmrc's
/// segment and its checks pays: the file_system fill goals' bound.
pub struct FloorChecked {
    inner: AtSegmentLength<FloorNamed>,
    /// The consumer's process descriptor on its producer (the peer's parent), opened
    /// at the first message.
    producer: Option<OwnedFd>,
}

impl FloorChecked {
    /// Checked floor objects named `<prefix>-<n>`.
    pub fn new(prefix: String) -> FloorChecked {
        FloorChecked {
            inner: AtSegmentLength::new(FloorNamed::new(prefix, true), Strategy::FileSystem),
            producer: None,
        }
    }
}

impl Contender for FloorChecked {
    type Buf = NamedBuf;

    fn name(&self) -> String {
        format!("{}{WITH_CHECKS}", self.inner.name())
    }

    fn create(&mut self, len: usize) -> Result<NamedBuf> {
        let os = DefaultOs::default();
        os.random_u128_and_u64()?;
        os.uid();
        let buf = self.inner.create(len)?;
        floor::set_owner_only(&buf.fd)?;
        Ok(buf)
    }

    fn write(&mut self, buf: &NamedBuf, payload: Payload, seed: u64) -> Result<()> {
        self.inner.write(buf, payload, seed)
    }

    fn send(&mut self, stream: &UnixStream, buf: &NamedBuf, count: usize) -> Result<()> {
        self.inner.send(stream, buf, count)
    }

    fn consume(&mut self, stream: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
        let producer = match &self.producer {
            Some(fd) => fd,
            None => self.producer.insert(floor::pidfd_of(
                nix::unistd::getppid().as_raw().unsigned_abs(),
            )?),
        };
        let Some((len, count, name)) = recv_named(stream)? else {
            return Ok(None);
        };
        let os = DefaultOs::default();
        let start = Instant::now();
        let mut read = 0;
        for _ in 0..count {
            os.uid();
            let fd = floor::open_checked(&name, len, os.uid())?;
            let map = FloorMap::new(fd.as_fd(), len)?;
            drop(fd);
            // The claim and, after the read, the release: each a CAS of the slot word
            // (from 0 to 0: the payload's bytes stay as written).
            map.compare_exchange_word(SLOT_WORD, 0, 0)?;
            read = payload.read(&map)?;
            map.compare_exchange_word(SLOT_WORD, 0, 0)?;
            floor::has_exited(producer.as_fd())?;
        }
        Ok(Some((read, nanos(start.elapsed()))))
    }
}

/// The bare floor that [`Shmrc::pooled`] is measured against: `slots` objects of one
/// length (named ones for file_system, memfds for file_descriptor), created, reserved
/// and faulted in (every page written) once, outside the timing, and handed out in
/// turn. What is left per buffer is the mechanism alone: the name sent as bytes and
/// the peer's `shm_open` + `mmap` + read + `munmap` + `close`, or the memfd sent over
/// `SCM_RIGHTS` and the peer's `mmap` + read + `munmap` + `close`; then the ack. No
/// protocol tells it when a slot is free: it relies on the workloads' order (a slot
/// comes round again only after `slots` newer buffers, by when its ack has arrived)
/// and refuses, with an error, a slot whose buffer is still held.
pub struct FloorReused {
    strategy: Strategy,
    len: usize,
    /// Each slot's name (`None` for a memfd), mapping and descriptor.
    slots: Vec<(Option<String>, FloorMap, OwnedFd)>,
    busy: Rc<Vec<Cell<bool>>>,
    next: usize,
}

/// A slot of [`FloorReused`] in use; dropping it frees the slot (it is not unlinked).
pub struct ReusedSlot {
    index: usize,
    busy: Rc<Vec<Cell<bool>>>,
}

impl Drop for ReusedSlot {
    fn drop(&mut self) {
        self.busy[self.index].set(false);
    }
}

impl FloorReused {
    /// The name of its file_system rows (its peer consumes as [`FloorNamed`]).
    pub const NAME: &'static str = "floor shm_open reused";
    /// The name of its file_descriptor rows (its peer consumes as [`FloorFd`]).
    pub const NAME_FD: &'static str = "floor memfd reused";

    /// The name of its rows of `strategy`.
    pub fn name_of(strategy: Strategy) -> &'static str {
        match strategy {
            Strategy::FileSystem => FloorReused::NAME,
            Strategy::FileDescriptor => FloorReused::NAME_FD,
        }
    }

    /// `slots` objects of `len` bytes named `<prefix>-<n>`, reserved and faulted in.
    pub fn new(prefix: &str, len: usize, slots: usize) -> Result<FloorReused> {
        FloorReused::with_strategy(Strategy::FileSystem, prefix, len, slots)
    }

    /// `slots` objects of `len` bytes, reserved and faulted in: named `<prefix>-<n>`
    /// (file_system), or memfds (file_descriptor; `prefix` unused).
    pub fn with_strategy(
        strategy: Strategy,
        prefix: &str,
        len: usize,
        slots: usize,
    ) -> Result<FloorReused> {
        let mut made = FloorReused {
            strategy,
            len,
            slots: Vec::with_capacity(slots),
            busy: Rc::new(vec![Cell::new(false); slots.max(1)]),
            next: 0,
        };
        for n in 0..slots.max(1) {
            let (name, fd) = match strategy {
                Strategy::FileSystem => {
                    let name = format!("{prefix}-{n}");
                    let fd = floor::create_named(&name, len, true)?;
                    (Some(name), fd)
                }
                Strategy::FileDescriptor => (None, floor::memfd(len, true)?),
            };
            let map = match FloorMap::new(fd.as_fd(), len) {
                Ok(map) => map,
                Err(e) => {
                    if let Some(name) = &name {
                        let _ = floor::unlink_named(name);
                    }
                    return Err(e);
                }
            };
            made.slots.push((name, map, fd));
            // Fault every page in now (a filled pattern writes each one).
            Payload::Fill.write(&made.slots[n].1, 0)?;
        }
        Ok(made)
    }
}

impl Drop for FloorReused {
    fn drop(&mut self) {
        for (name, _, _) in &self.slots {
            if let Some(name) = name {
                let _ = floor::unlink_named(name);
            }
        }
    }
}

impl Contender for FloorReused {
    type Buf = ReusedSlot;

    fn name(&self) -> String {
        FloorReused::name_of(self.strategy).into()
    }

    fn create(&mut self, len: usize) -> Result<ReusedSlot> {
        if len != self.len {
            return Err(invalid(format!(
                "the bare floor's slots hold {} bytes, not {len}",
                self.len
            )));
        }
        let index = self.next;
        if self.busy[index].replace(true) {
            return Err(invalid(format!(
                "the bare floor's slot {index} of {} is still in use",
                self.slots.len()
            )));
        }
        self.next = (index + 1) % self.slots.len();
        self.slots[index].1.write_byte(0, 1)?;
        Ok(ReusedSlot {
            index,
            busy: self.busy.clone(),
        })
    }

    fn write(&mut self, buf: &ReusedSlot, payload: Payload, seed: u64) -> Result<()> {
        payload.write(&self.slots[buf.index].1, seed)
    }

    fn send(&mut self, stream: &UnixStream, buf: &ReusedSlot, count: usize) -> Result<()> {
        match &self.slots[buf.index] {
            (Some(name), _, _) => send_named(stream, self.len, count, name),
            (None, _, fd) => {
                let fds = vec![fd.as_fd(); count];
                floor::send(stream, &(self.len as u64).to_le_bytes(), &fds)
            }
        }
    }

    fn consume(&mut self, stream: &UnixStream, payload: Payload) -> Result<Option<(u64, u64)>> {
        match self.strategy {
            Strategy::FileSystem => consume_named(stream, payload),
            Strategy::FileDescriptor => FloorFd { reserve: false }.consume(stream, payload),
        }
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

/// Reads one ack of a buffer carrying `payload` (of `seed`, when filled): byte 0 of
/// the buffer (a one-byte ack) must have arrived as written, a filled buffer's seed (an
/// 8-byte ack, sent after the peer checked every byte) must be `seed`.
fn await_ack(stream: &UnixStream, payload: Payload, seed: u64) -> Result<()> {
    match payload {
        Payload::TouchOne => {
            let mut ack = [0u8];
            read_exact(stream, &mut ack)?;
            if ack[0] != 1 {
                return Err(invalid(format!("peer read byte 0 as {}, not 1", ack[0])));
            }
        }
        Payload::Fill => {
            let mut ack = [0u8; 8];
            read_exact(stream, &mut ack)?;
            let got = u64::from_le_bytes(ack);
            if got != seed {
                return Err(invalid(format!(
                    "peer found the seed of a filled buffer to be {got:#x}, not {seed:#x} as written"
                )));
            }
        }
    }
    Ok(())
}

/// Creates a buffer and writes `payload` into it; the buffer and its seed.
fn produce<C: Contender>(c: &mut C, len: usize, payload: Payload) -> Result<(C::Buf, u64)> {
    let buf = c.create(len)?;
    let seed = next_seed();
    c.write(&buf, payload, seed)?;
    Ok((buf, seed))
}

/// `iters` ping-pongs of `len`-byte buffers carrying `payload`; the time they took.
pub fn ping_pong<C: Contender>(
    c: &mut C,
    stream: &UnixStream,
    len: usize,
    iters: u64,
    payload: Payload,
) -> Result<Duration> {
    let start = Instant::now();
    for _ in 0..iters {
        let (buf, seed) = produce(c, len, payload)?;
        c.send(stream, &buf, 1)?;
        await_ack(stream, payload, seed)?;
        drop(buf);
    }
    Ok(start.elapsed())
}

/// `count` buffers of `len` bytes carrying `payload`, with up to `window` in flight;
/// the time they took.
pub fn stream<C: Contender>(
    c: &mut C,
    stream: &UnixStream,
    len: usize,
    count: u64,
    window: usize,
    payload: Payload,
) -> Result<Duration> {
    let start = Instant::now();
    let mut in_flight = VecDeque::with_capacity(window);
    for _ in 0..count {
        if in_flight.len() == window.max(1) {
            let (_buf, seed) = in_flight.pop_front().expect("a full window");
            await_ack(stream, payload, seed)?;
        }
        let (buf, seed) = produce(c, len, payload)?;
        c.send(stream, &buf, 1)?;
        in_flight.push_back((buf, seed));
    }
    while let Some((_buf, seed)) = in_flight.pop_front() {
        await_ack(stream, payload, seed)?;
    }
    Ok(start.elapsed())
}

/// The in-flight window for `len`-byte buffers: 64, or fewer so that at most 512 MiB
/// are in flight (a shared machine's `/dev/shm` and memory are not ours alone).
pub fn window_for(len: usize) -> usize {
    ((512usize << 20) / len.max(1)).clamp(1, 64)
}

/// Has the peer attach and release `count` handles to one buffer of `len` bytes, up
/// to [`ATTACH_BATCH`] in one message; the peer-side time of those attaches and
/// releases.
pub fn attach_release<C: Contender>(
    c: &mut C,
    stream: &UnixStream,
    len: usize,
    count: u64,
) -> Result<Duration> {
    attach_release_batched(c, stream, len, count, ATTACH_BATCH)
}

/// [`attach_release`] with up to `batch` handles in one message: while the peer
/// attaches and releases one, the others are in flight, each a holder of the buffer
/// (a holder slot, for file_system buffers), so `batch` is the holder count the
/// attaches and releases meet (the growth sweep's holders axis).
pub fn attach_release_batched<C: Contender>(
    c: &mut C,
    stream: &UnixStream,
    len: usize,
    count: u64,
    batch: usize,
) -> Result<Duration> {
    if batch == 0 {
        return Err(invalid(
            "attach/release needs at least one handle per message".into(),
        ));
    }
    let buf = c.create(len)?;
    let mut total = 0u64;
    let mut left = count;
    while left > 0 {
        let batch = left.min(batch as u64);
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
        use shmrc::checkers::sync::process::{AtomicU64, Ordering};
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
    while let Some((read, took)) = c.consume(&stream, mode.payload())? {
        match mode {
            Mode::Attach => {
                let mut reply = vec![read as u8];
                reply.extend_from_slice(&took.to_le_bytes());
                write_all(&stream, &reply)?;
            }
            Mode::Fill => write_all(&stream, &read.to_le_bytes())?,
            _ => write_all(&stream, &[read as u8])?,
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
        // A pooled buffer is consumed as any buffer of its strategy: received and
        // attached.
        Shmrc::POOLED => serve(Shmrc::new(Strategy::FileSystem, ns)),
        Shmrc::POOLED_FD => serve(Shmrc::new(Strategy::FileDescriptor, ns)),
        // The bare floor's peer is the named floor's (open, map, read, unmap).
        n if n.starts_with("floor memfd") => serve(FloorFd { reserve: false }),
        n if n.starts_with("floor shm_open") && n.ends_with(WITH_CHECKS) => {
            serve(FloorChecked::new(String::new()))
        }
        n if n.starts_with("floor shm_open") => serve(FloorNamed::new(String::new(), false)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn attach_release_with_no_handle_per_message_is_refused_before_creating() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut floor = super::FloorFd { reserve: false };
        let err = super::attach_release_batched(&mut floor, &a, 4096, 1, 0).unwrap_err();
        assert!(err.to_string().contains("at least one handle"), "{err}");
    }

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
        let err = super::await_ack(&b, super::Payload::TouchOne, 0).unwrap_err();
        assert!(err.to_string().contains("byte 0 as 7"), "{err}");
        drop(a);
        let mut consumer = super::FloorFd { reserve: false };
        assert!(
            super::Contender::consume(&mut consumer, &b, super::Payload::TouchOne)
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
            .consume(&b, super::Payload::TouchOne)
            .unwrap()
            .unwrap();
        assert_eq!(byte, 1);
    }

    // The fill workload: each contender's consumer checks every byte, in-process over a
    // socket pair whose reads time out (the tests' time limit), in a namespace of its
    // own; nothing is left in /dev/shm.

    use super::{
        Contender, FloorFd, FloorMap, FloorNamed, FloorReused, Payload, Shmrc, nanos, stream,
    };
    use shmrc::Strategy;
    use shmrc::checkers::buf::ShmBufExt;
    use shmrc_testkit::names::TestNamespace;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    const LIMIT: Duration = Duration::from_secs(20);

    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Some(LIMIT)).unwrap();
            s.set_write_timeout(Some(LIMIT)).unwrap();
        }
        (a, b)
    }

    /// Everything of `t` and of the floor objects named after it in /dev/shm.
    fn left_in_dev_shm(t: &TestNamespace) -> Vec<String> {
        let mut left = t.names();
        left.extend(
            std::fs::read_dir("/dev/shm")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(t.ns.prefix())),
        );
        left
    }

    /// Produces one filled buffer of `len` bytes, lets `spoil` change it, sends it and
    /// has `consumer` check it; what the consumer read (the seed) or its error.
    fn one_filled<C: Contender, D: Contender>(
        producer: &mut C,
        consumer: &mut D,
        len: usize,
        spoil: impl FnOnce(&mut C, &C::Buf),
    ) -> (u64, shmrc::Result<u64>) {
        let (a, b) = pair();
        let buf = producer.create(len).unwrap();
        let seed = crate::payload::next_seed();
        producer.write(&buf, Payload::Fill, seed).unwrap();
        spoil(producer, &buf);
        producer.send(&a, &buf, 1).unwrap();
        let read = consumer
            .consume(&b, Payload::Fill)
            .map(|got| got.expect("a message").0);
        drop(buf);
        (seed, read)
    }

    /// Spoils the byte at `offset` with its complement: a fixed value (0) would leave
    /// the buffer right whenever the pattern has that value there (1 time in 256: seeds
    /// differ by pid, so some runs spoiled nothing and saw the check pass).
    fn flip(buf: &shmrc::ShmBuf, offset: usize) {
        let mut byte = [0u8];
        buf.read_at(offset, &mut byte).unwrap();
        buf.write_at(offset, &[!byte[0]]).unwrap();
    }

    /// [`flip`] for a floor mapping.
    fn flip_floor(map: &FloorMap, offset: usize) {
        let byte = map.read_byte(offset).unwrap();
        map.write_byte(offset, !byte).unwrap();
    }

    fn assert_caught(read: shmrc::Result<u64>, offset: usize) {
        let err = read.expect_err("a wrong byte passed the check").to_string();
        assert!(err.contains(&format!("byte {offset} is")), "{err}");
    }

    #[test]
    fn every_consumer_checks_every_byte_of_a_filled_buffer() {
        let t = TestNamespace::new("bench-fill-check");
        let len = 64 << 10;
        let last = len - 1;
        for strategy in Strategy::ALL {
            let mut c = Shmrc::new(strategy, t.ns.clone());
            let mut d = Shmrc::new(strategy, t.ns.clone());
            let (seed, read) = one_filled(&mut c, &mut d, len, |_, _| {});
            assert_eq!(read.unwrap(), seed, "{strategy}: a right buffer passes");
            let (_, read) = one_filled(&mut c, &mut d, len, |_, buf| {
                flip(buf, last);
            });
            assert_caught(read, last);
        }
        let mut floor = FloorFd { reserve: true };
        let (seed, read) = one_filled(&mut floor, &mut FloorFd { reserve: true }, len, |_, _| {});
        assert_eq!(read.unwrap(), seed);
        let (_, read) = one_filled(&mut floor, &mut FloorFd { reserve: true }, len, |_, buf| {
            flip_floor(&buf.1, 4096);
        });
        assert_caught(read, 4096);
        let prefix = format!("{}-floor", t.ns.prefix());
        let mut named = FloorNamed::new(prefix.clone(), false);
        let mut reader = FloorNamed::new(prefix.clone(), false);
        let (seed, read) = one_filled(&mut named, &mut reader, len, |_, _| {});
        assert_eq!(read.unwrap(), seed);
        let (_, read) = one_filled(&mut named, &mut reader, len, |_, buf| {
            flip_floor(&buf.map, 9);
        });
        assert_caught(read, 9);
        let mut bare = FloorReused::new(&format!("{prefix}-bare"), len, 2).unwrap();
        let (seed, read) = one_filled(&mut bare, &mut reader, len, |_, _| {});
        assert_eq!(read.unwrap(), seed);
        let (_, read) = one_filled(&mut bare, &mut reader, len, |c, buf| {
            flip_floor(&c.slots[buf.index].1, 100);
        });
        assert_caught(read, 100);
        drop(bare);
        let mut pool = Shmrc::pooled(Strategy::FileSystem, t.ns.clone(), 4).unwrap();
        let mut d = Shmrc::new(Strategy::FileSystem, t.ns.clone());
        let (seed, read) = one_filled(&mut pool, &mut d, len, |_, _| {});
        assert_eq!(read.unwrap(), seed);
        let (_, read) = one_filled(&mut pool, &mut d, len, |_, buf| {
            flip(buf, 12345);
        });
        assert_caught(read, 12345);
        assert_eq!(
            pool.pool().unwrap().stats().created,
            1,
            "the second buffer was recycled"
        );
        drop(pool);
        assert!(left_in_dev_shm(&t).is_empty(), "{:?}", left_in_dev_shm(&t));
    }

    #[test]
    fn a_segment_length_floor_is_as_long_as_a_real_segment_and_checked_whole() {
        use super::{AtSegmentLength, fresh_segment_layout};
        use std::os::fd::AsFd;
        let t = TestNamespace::new("bench-fill-seglen");
        let prefix = format!("{}-floor", t.ns.prefix());
        for len in [4096, 1 << 20] {
            for strategy in Strategy::ALL {
                let segment_len = fresh_segment_layout(strategy, len).unwrap().total_len();
                // The real segment of a fresh buffer, as the kernel sizes it.
                let buf = Shmrc::new(strategy, t.ns.clone()).create(len).unwrap();
                let stat = match buf.name() {
                    Some(name) => nix::sys::stat::fstat(super::floor::open_named(name).unwrap()),
                    None => nix::sys::stat::fstat(buf.anonymous_file().unwrap().as_fd()),
                }
                .unwrap();
                assert_eq!(stat.st_size as usize, segment_len, "{strategy} {len}");
                assert!(segment_len > len, "{strategy} {len}: the header is counted");
                drop(buf);
            }
            // The floor at that length maps, writes and checks all of it: a byte past
            // the payload's length is checked too.
            let fd_len = fresh_segment_layout(Strategy::FileDescriptor, len)
                .unwrap()
                .total_len();
            let mut fd = AtSegmentLength::new(FloorFd { reserve: true }, Strategy::FileDescriptor);
            assert_eq!(fd.name(), "floor memfd+fallocate, segment length");
            let mut fd_reader = FloorFd { reserve: false };
            let (seed, read) = one_filled(&mut fd, &mut fd_reader, len, |_, buf| {
                assert_eq!(buf.1.len(), fd_len);
            });
            assert_eq!(read.unwrap(), seed);
            let (_, read) = one_filled(&mut fd, &mut fd_reader, len, |_, buf| {
                flip_floor(&buf.1, fd_len - 1);
            });
            assert_caught(read, fd_len - 1);
            let fs_len = fresh_segment_layout(Strategy::FileSystem, len)
                .unwrap()
                .total_len();
            let mut fs =
                AtSegmentLength::new(FloorNamed::new(prefix.clone(), true), Strategy::FileSystem);
            assert_eq!(fs.name(), "floor shm_open+fallocate, segment length");
            let mut fs_reader = FloorNamed::new(prefix.clone(), false);
            let (seed, read) = one_filled(&mut fs, &mut fs_reader, len, |_, buf| {
                assert_eq!(buf.map.len(), fs_len);
            });
            assert_eq!(read.unwrap(), seed);
            let (_, read) = one_filled(&mut fs, &mut fs_reader, len, |_, buf| {
                flip_floor(&buf.map, fs_len - 1);
            });
            assert_caught(read, fs_len - 1);
        }
        assert!(left_in_dev_shm(&t).is_empty(), "{:?}", left_in_dev_shm(&t));
    }

    /// A pooled producer that writes its first buffer right, and then, into the
    /// recycled segment, nothing (`skip`: the first use's pattern stays, byte 0 aside)
    /// or the first buffer's pattern again (a complete pattern of the wrong seed).
    struct FillsOnce {
        inner: Shmrc,
        first_seed: Option<u64>,
        skip: bool,
    }

    impl Contender for FillsOnce {
        type Buf = shmrc::ShmBuf;
        fn name(&self) -> String {
            "fills once".into()
        }
        fn create(&mut self, len: usize) -> shmrc::Result<shmrc::ShmBuf> {
            self.inner.create(len)
        }
        fn write(&mut self, buf: &shmrc::ShmBuf, payload: Payload, seed: u64) -> shmrc::Result<()> {
            match self.first_seed {
                None => {
                    self.first_seed = Some(seed);
                    self.inner.write(buf, payload, seed)
                }
                Some(_) if self.skip => Ok(()),
                Some(first) => self.inner.write(buf, payload, first),
            }
        }
        fn send(&mut self, s: &UnixStream, buf: &shmrc::ShmBuf, count: usize) -> shmrc::Result<()> {
            self.inner.send(s, buf, count)
        }
        fn consume(&mut self, s: &UnixStream, p: Payload) -> shmrc::Result<Option<(u64, u64)>> {
            self.inner.consume(s, p)
        }
    }

    /// Runs `stream` of `count` filled buffers from `producer` to a consumer thread
    /// that checks and acks each; the producer's result and how many the consumer
    /// checked.
    fn filled_stream<C: Contender>(
        producer: &mut C,
        ns: &shmrc::Namespace,
        count: u64,
    ) -> (shmrc::Result<Duration>, u64) {
        filled_stream_to(
            producer,
            Shmrc::new(Strategy::FileSystem, ns.clone()),
            count,
        )
    }

    /// [`filled_stream`] with `consumer` on the other end.
    fn filled_stream_to<C: Contender, D: Contender + Send + 'static>(
        producer: &mut C,
        mut d: D,
        count: u64,
    ) -> (shmrc::Result<Duration>, u64) {
        let (a, b) = pair();
        let consumer = std::thread::spawn(move || {
            let mut checked = 0u64;
            while let Ok(Some((seed, took))) = d.consume(&b, Payload::Fill) {
                assert!(took <= nanos(LIMIT));
                checked += 1;
                if super::write_all(&b, &seed.to_le_bytes()).is_err() {
                    break;
                }
            }
            checked
        });
        let result = stream(producer, &a, 1 << 20, count, 4, Payload::Fill);
        drop(a);
        (result, consumer.join().unwrap())
    }

    #[test]
    fn a_pooled_fill_stream_recycles_and_a_stale_recycled_buffer_fails_it() {
        let t = TestNamespace::new("bench-fill-pool");
        let mut pool = Shmrc::pooled(Strategy::FileSystem, t.ns.clone(), 4).unwrap();
        let (result, checked) = filled_stream(&mut pool, &t.ns, 40);
        result.unwrap();
        assert_eq!(checked, 40);
        let stats = pool.pool().unwrap().stats();
        assert!(stats.recycled >= 30, "{stats:?}");
        drop(pool);

        for skip in [true, false] {
            let mut lazy = FillsOnce {
                inner: Shmrc::pooled(Strategy::FileSystem, t.ns.clone(), 4).unwrap(),
                first_seed: None,
                skip,
            };
            // One buffer at a time: the second is the first's segment, recycled.
            let (a, b) = pair();
            let ns = t.ns.clone();
            let consumer = std::thread::spawn(move || {
                let mut d = Shmrc::new(Strategy::FileSystem, ns);
                loop {
                    match d.consume(&b, Payload::Fill) {
                        Ok(Some((seed, _))) => super::write_all(&b, &seed.to_le_bytes())?,
                        Ok(None) => return Ok(()),
                        Err(e) => return Err(e),
                    }
                }
            });
            let produced = super::ping_pong(&mut lazy, &a, 4096, 2, Payload::Fill);
            assert_eq!(lazy.inner.pool().unwrap().stats().recycled, 1);
            drop(a);
            let consumed = consumer.join().unwrap();
            if skip {
                // Byte 0 (written at creation) no longer fits the stale pattern: the
                // consumer finds the first wrong byte and stops.
                let err = consumed.unwrap_err().to_string();
                assert!(err.contains("byte 8 is"), "{err}");
                assert!(produced.is_err(), "the producer got no ack");
            } else {
                // A complete pattern, of the first buffer's seed: the consumer acks it,
                // the producer sees it is not the seed it meant to write.
                consumed.unwrap();
                let err = produced.unwrap_err().to_string();
                assert!(err.contains("as written"), "{err}");
            }
            drop(lazy);
        }
        assert!(left_in_dev_shm(&t).is_empty(), "{:?}", left_in_dev_shm(&t));
    }

    #[test]
    fn a_pooled_file_descriptor_stream_recycles_its_memfds_and_its_bare_floor_streams() {
        let t = TestNamespace::new("bench-fill-pool-fd");
        let mut pool = Shmrc::pooled(Strategy::FileDescriptor, t.ns.clone(), 4).unwrap();
        assert_eq!(pool.name(), Shmrc::POOLED_FD);
        let fd_consumer = Shmrc::new(Strategy::FileDescriptor, t.ns.clone());
        let (result, checked) = filled_stream_to(&mut pool, fd_consumer, 40);
        result.unwrap();
        assert_eq!(checked, 40);
        let stats = pool.pool().unwrap().stats();
        assert!(stats.recycled >= 30, "{stats:?}");
        drop(pool);
        let mut bare =
            FloorReused::with_strategy(Strategy::FileDescriptor, "", 1 << 20, 4).unwrap();
        assert_eq!(bare.name(), FloorReused::NAME_FD);
        let (result, checked) = filled_stream_to(&mut bare, FloorFd { reserve: false }, 40);
        result.unwrap();
        assert_eq!(checked, 40);
        drop(bare);
        assert!(left_in_dev_shm(&t).is_empty(), "{:?}", left_in_dev_shm(&t));
    }

    #[test]
    fn a_bare_floor_refuses_a_wrong_length_and_a_slot_still_in_use() {
        let t = TestNamespace::new("bench-fill-bare");
        let mut bare = FloorReused::new(&format!("{}-bare", t.ns.prefix()), 4096, 2).unwrap();
        let err = bare.create(8192).err().unwrap().to_string();
        assert!(err.contains("hold 4096 bytes, not 8192"), "{err}");
        let first = bare.create(4096).unwrap();
        let _second = bare.create(4096).unwrap();
        let err = bare.create(4096).err().unwrap().to_string();
        assert!(err.contains("slot 0 of 2 is still in use"), "{err}");
        drop(first);
        bare.create(4096).unwrap();
        drop(_second);
        drop(bare);
        assert!(left_in_dev_shm(&t).is_empty(), "{:?}", left_in_dev_shm(&t));
    }
}
