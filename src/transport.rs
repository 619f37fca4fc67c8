//! Moving share handles (and a payload of your own) over a connected Unix stream
//! socket: [`send`] and [`recv`]. file_descriptor handles carry their memfd with
//! `SCM_RIGHTS`, up to 253 per frame (the kernel's `SCM_MAX_FD`); a message with more
//! is split into several frames and reassembled by [`recv`].
//!
//! Frame (little-endian):
//! ```text
//!  0..4  magic "SHMT"        4..6  version (1)     6..8 flags: bit 0 = more frames follow
//!  8..12 payload length     12..16 handle count   16..20 fd count   20..24 handle bytes
//! payload, then per handle: u16 length + handle encoding (as ShareHandle::into_bytes)
//! ```
//! The descriptors ride on the frame's first byte. A receiver that hits its fd limit
//! gets [`crate::Error::TooManyFds`] (never "received 0 items of ancdata" in silence);
//! the connection is then out of step and should be closed.
//!
//! Reading is a state machine (`MessageReader`) that keeps a partly received message
//! (bytes, descriptors, earlier frames' handles) across reads, so that a non-blocking
//! reader (the channel's receivers) resumes it when more arrives instead of waiting
//! inside it; [`recv`] drives it to the end on a blocking stream.

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
use std::os::unix::net::UnixStream;

use crate::error::{Error, Result};
use crate::handle::{self, ShareHandle, Target};
use crate::manager::DefaultOs;
use crate::os::{MAX_FDS_PER_SEND, Os};
use crate::strategy::Strategy;

const MAGIC: [u8; 4] = *b"SHMT";
const VERSION: u16 = 1;
const FRAME_HEADER: usize = 24;
const FLAG_MORE: u16 = 1;
/// The largest payload one message may carry; [`send`] refuses a larger one with
/// [`Error::InvalidArgument`] before anything is written.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::transport::{self, MAX_PAYLOAD};
/// use std::os::unix::net::UnixStream;
///
/// let (a, _b) = UnixStream::pair().unwrap();
/// let too_big = vec![0u8; MAX_PAYLOAD + 1];
/// assert!(matches!(transport::send(&a, &too_big, vec![]), Err(shmrc::Error::InvalidArgument(_))));
/// # }
/// ```
pub const MAX_PAYLOAD: usize = 64 << 20;
/// The most handles one frame may carry.
const MAX_HANDLES_PER_FRAME: usize = 4096;

/// What [`recv`] returns: your payload and the handles that came with it.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::{ShmBuf, transport};
/// use std::os::unix::net::UnixStream;
///
/// let (a, b) = UnixStream::pair().unwrap();
/// let (x, y) = (ShmBuf::new(16)?, ShmBuf::new(32)?);
/// transport::send(&a, b"two buffers", vec![x.share()?, y.share()?])?;
///
/// let message: transport::Message = transport::recv(&b)?;
/// assert_eq!(message.payload, b"two buffers");
/// let lens: Vec<usize> = message.handles.iter().map(|h| h.len()).collect();
/// assert_eq!(lens, [16, 32]); // in the order they were sent
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub struct Message<O: Os = DefaultOs> {
    /// The bytes passed to [`send`].
    pub payload: Vec<u8>,
    /// The handles, in the order they were sent; each owns its reference until
    /// attached or dropped.
    pub handles: Vec<ShareHandle<O>>,
}

/// Sends `payload` and `handles` over `stream` as one message: on success the handles'
/// in-flight references belong to the receiver; on failure they are given back when
/// the handles you passed are dropped. file_descriptor handles carry their memfd with
/// `SCM_RIGHTS`; any number of them may go in one message (it is split into frames of
/// at most 253 descriptors and reassembled by [`recv`]).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::{CreateOptions, ShmBuf, Strategy, transport};
/// use std::os::unix::net::UnixStream;
///
/// let (to_worker, at_worker) = UnixStream::pair().unwrap();
/// let options = CreateOptions::new().strategy(Strategy::FileDescriptor);
/// let batch: Vec<ShmBuf> = (0..300)
///     .map(|_| ShmBuf::with_options(64, &options))
///     .collect::<Result<_, _>>()?;
/// let handles = batch.iter().map(ShmBuf::share).collect::<Result<Vec<_>, _>>()?;
/// transport::send(&to_worker, b"batch 1", handles)?;
///
/// let message = transport::recv(&at_worker)?;
/// assert_eq!(message.handles.len(), 300);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub fn send(stream: &UnixStream, payload: &[u8], handles: Vec<ShareHandle>) -> Result<()> {
    send_with(&DefaultOs::default(), stream, payload, handles)
}

/// Receives one message sent with [`send`] from `stream`, blocking until it is whole.
/// [`Error::Disconnected`] if the peer closed the socket before a message began;
/// [`Error::Malformed`] for bytes that are not a message (or a connection cut inside
/// one); [`Error::TooManyFds`] when this process's open-file limit dropped arriving
/// descriptors. After an error other than `Disconnected` the connection is out of step:
/// close it. On a non-blocking stream that runs dry it is [`Error::Os`] with
/// `WouldBlock`, and what was read of the message is lost: use a blocking stream here
/// (a channel's `Receiver` keeps partial messages instead).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::{Error, ShmBuf, transport};
/// use std::os::unix::net::UnixStream;
///
/// let (producer, consumer) = UnixStream::pair().unwrap();
/// let buf = ShmBuf::new(8)?;
/// buf.write_at(0, b"features")?;
/// transport::send(&producer, b"step 7", vec![buf.share()?])?;
/// drop(producer);
///
/// let mut message = transport::recv(&consumer)?;
/// assert_eq!(message.payload, b"step 7");
/// let received = ShmBuf::attach(message.handles.remove(0))?;
/// let mut out = [0u8; 8];
/// received.read_at(0, &mut out)?;
/// assert_eq!(&out, b"features");
/// // The producer closed its end: no more messages.
/// assert!(matches!(transport::recv(&consumer), Err(Error::Disconnected)));
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub fn recv(stream: &UnixStream) -> Result<Message> {
    recv_with(&DefaultOs::default(), stream)
}

/// [`send`] as process `os` (any backend). On success the handles' in-flight
/// references belong to the receiver; on failure they are given back when the handles
/// you passed are dropped.
pub(crate) fn send_with<O: Os>(
    os: &O,
    stream: &O::Stream,
    payload: &[u8],
    mut handles: Vec<ShareHandle<O>>,
) -> Result<()> {
    if payload.len() > MAX_PAYLOAD {
        return Err(Error::InvalidArgument(format!(
            "payload of {} bytes exceeds {MAX_PAYLOAD}",
            payload.len()
        )));
    }
    let frames = split_into_frames(
        handles
            .iter()
            .map(|h| h.strategy() == Strategy::FileDescriptor),
    );
    let last = frames.len() - 1;
    for (index, range) in frames.iter().enumerate() {
        let batch = &handles[range.clone()];
        let frame_payload = if index == last { payload } else { &[] };
        let mut encoded = Vec::new();
        let mut files = Vec::new();
        for h in batch {
            let bytes = h.encoded();
            encoded.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
            encoded.extend_from_slice(&bytes);
            if let Target::Anonymous { file, .. } = &h.target {
                files.push(file);
            }
        }
        let flags = if index == last { 0 } else { FLAG_MORE };
        let mut frame = Vec::with_capacity(FRAME_HEADER + frame_payload.len() + encoded.len());
        frame.extend_from_slice(&MAGIC);
        frame.extend_from_slice(&VERSION.to_le_bytes());
        frame.extend_from_slice(&flags.to_le_bytes());
        frame.extend_from_slice(&(frame_payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&(batch.len() as u32).to_le_bytes());
        frame.extend_from_slice(&(files.len() as u32).to_le_bytes());
        frame.extend_from_slice(&(encoded.len() as u32).to_le_bytes());
        frame.extend_from_slice(frame_payload);
        frame.extend_from_slice(&encoded);
        os.send(stream, &frame, &files)?;
    }
    for h in &mut handles {
        h.disarm();
    }
    Ok(())
}

/// Groups handles (given as whether each carries a descriptor) so that no frame
/// carries more than [`MAX_FDS_PER_SEND`] descriptors or [`MAX_HANDLES_PER_FRAME`]
/// handles; always at least one (possibly empty) frame.
fn split_into_frames(carries_fd: impl IntoIterator<Item = bool>) -> Vec<std::ops::Range<usize>> {
    let mut frames = Vec::new();
    let (mut start, mut fds, mut count) = (0, 0, 0);
    for (i, is_fd) in carries_fd.into_iter().enumerate() {
        if (is_fd && fds == MAX_FDS_PER_SEND) || i - start == MAX_HANDLES_PER_FRAME {
            frames.push(start..i);
            (start, fds) = (i, 0);
        }
        fds += usize::from(is_fd);
        count = i + 1;
    }
    frames.push(start..count);
    frames
}

/// [`recv`] as process `os` (any backend). [`Error::Disconnected`] if the peer closed
/// the socket before a message began.
pub(crate) fn recv_with<O: Os>(os: &O, stream: &O::Stream) -> Result<Message<O>> {
    match MessageReader::new().read_on(os, stream)? {
        Some(message) => Ok(message),
        // Only a non-blocking stream runs dry; this call has no way to wait on it.
        None => Err(Error::os("recvmsg", std::io::ErrorKind::WouldBlock)),
    }
}

/// A message being received, kept across reads: the frame being read (its header or
/// its body, and how much of it has arrived), the descriptors that came with it, and
/// the handles of the message's earlier frames. [`MessageReader::read_on`] reads what
/// the stream has and stops when it runs dry (a non-blocking stream's `EAGAIN`), so a
/// caller can wait for readiness (poll, an async reactor) and call again: a sender
/// that stops half-way never holds the reading thread.
///
/// Dropping it mid-message closes the descriptors that arrived and gives back the
/// references of the handles decoded so far, as a failed receive does.
#[derive(Debug)]
pub(crate) struct MessageReader<O: Os = DefaultOs> {
    stage: Stage,
    /// Descriptors that arrived with the frame being read (they ride on its first byte).
    files: Vec<O::File>,
    /// The handles of the whole frames read so far of this message.
    handles: Vec<ShareHandle<O>>,
    /// This process's uid, asked once per message and only when a file_system handle
    /// arrives (a file_descriptor handle's decoder does not ask).
    uid: Option<u32>,
}

/// Which part of a frame is being read, and how much of it has arrived.
#[derive(Debug)]
enum Stage {
    Header {
        bytes: [u8; FRAME_HEADER],
        filled: usize,
    },
    Body {
        frame: FrameHeader,
        bytes: Vec<u8>,
        filled: usize,
    },
}

/// A frame header's fields, checked against the bounds.
#[derive(Debug, Clone, Copy)]
struct FrameHeader {
    more: bool,
    payload_len: usize,
    count: usize,
    fd_count: usize,
}

impl<O: Os> MessageReader<O> {
    /// Nothing received yet.
    pub(crate) fn new() -> MessageReader<O> {
        MessageReader {
            stage: Stage::Header {
                bytes: [0; FRAME_HEADER],
                filled: 0,
            },
            files: Vec::new(),
            handles: Vec::new(),
            uid: None,
        }
    }

    /// Reads on from `stream` until the message is whole (`Some`) or the stream has no
    /// more bytes for now (`None`: a non-blocking stream said `EAGAIN`; what arrived
    /// stays here for the next call). A blocking stream waits for the whole message.
    /// [`Error::Disconnected`] if the stream ended before a message began; any error
    /// drops the partial message (descriptors closed, handles given back) and leaves
    /// the connection out of step, except `Disconnected`.
    pub(crate) fn read_on(&mut self, os: &O, stream: &O::Stream) -> Result<Option<Message<O>>> {
        let outcome = self.step(os, stream);
        if outcome.is_err() {
            *self = MessageReader::new();
        }
        outcome
    }

    fn step(&mut self, os: &O, stream: &O::Stream) -> Result<Option<Message<O>>> {
        loop {
            let (buf, filled, in_header) = match &mut self.stage {
                Stage::Header { bytes, filled } => (&mut bytes[..], filled, true),
                Stage::Body { bytes, filled, .. } => (&mut bytes[..], filled, false),
            };
            if *filled < buf.len() {
                let begun = *filled > 0;
                match os.recv(stream, &mut buf[*filled..], &mut self.files) {
                    Ok(0) => {
                        let at_start =
                            !begun && self.handles.is_empty() && self.files.is_empty() && in_header;
                        return Err(if at_start {
                            Error::Disconnected
                        } else {
                            malformed(format!(
                                "connection closed after {} of {} bytes",
                                *filled,
                                buf.len()
                            ))
                        });
                    }
                    Ok(n) => *filled += n,
                    Err(e) if would_block(&e) => return Ok(None),
                    Err(e) => return Err(e),
                }
                continue;
            }
            let fresh = Stage::Header {
                bytes: [0; FRAME_HEADER],
                filled: 0,
            };
            match std::mem::replace(&mut self.stage, fresh) {
                Stage::Header { bytes, .. } => {
                    let frame = parse_header(&bytes)?;
                    self.stage = Stage::Body {
                        frame,
                        bytes: vec![0; frame.payload_len + field(&bytes, 20)],
                        filled: 0,
                    };
                }
                Stage::Body { frame, bytes, .. } => {
                    let files = std::mem::take(&mut self.files);
                    let payload = self.take_frame(os, frame, &bytes, files)?;
                    if !frame.more {
                        let handles = std::mem::take(&mut self.handles);
                        self.uid = None;
                        return Ok(Some(Message { payload, handles }));
                    }
                }
            }
        }
    }

    /// Decodes a whole frame's handles (pairing each file_descriptor one with the next
    /// of `files`) onto this message's, and returns the frame's payload.
    fn take_frame(
        &mut self,
        os: &O,
        frame: FrameHeader,
        body: &[u8],
        files: Vec<O::File>,
    ) -> Result<Vec<u8>> {
        if files.len() != frame.fd_count {
            return Err(malformed(format!(
                "frame announced {} descriptors, {} arrived",
                frame.fd_count,
                files.len()
            )));
        }
        let (payload, mut rest) = body.split_at(frame.payload_len);
        let mut files = files.into_iter();
        for _ in 0..frame.count {
            let Some((len, tail)) = rest.split_first_chunk::<2>() else {
                return Err(malformed("handle length cut short".into()));
            };
            let len = usize::from(u16::from_le_bytes(*len));
            if tail.len() < len {
                return Err(malformed("handle cut short".into()));
            }
            let (bytes, tail) = tail.split_at(len);
            rest = tail;
            let uid = &mut self.uid;
            let decoded = handle::decode_asking(bytes, || *uid.get_or_insert_with(|| os.uid()))?;
            let target = match decoded.name {
                Some(name) => Target::Named {
                    name,
                    in_flight: decoded.in_flight,
                },
                None => Target::Anonymous {
                    file: files.next().ok_or_else(|| {
                        malformed("fewer descriptors than file_descriptor handles".into())
                    })?,
                    in_flight: decoded.in_flight,
                },
            };
            self.handles.push(ShareHandle {
                os: os.clone(),
                meta: decoded.meta,
                target,
            });
        }
        if !rest.is_empty() || files.next().is_some() {
            return Err(malformed(
                "trailing bytes or descriptors after the handles".into(),
            ));
        }
        Ok(payload.to_vec())
    }
}

/// The little-endian `u32` at `at` of a frame header.
fn field(header: &[u8; FRAME_HEADER], at: usize) -> usize {
    u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]) as usize
}

/// A frame header's fields, refused with their cause when out of range.
fn parse_header(header: &[u8; FRAME_HEADER]) -> Result<FrameHeader> {
    if header[0..4] != MAGIC {
        return Err(malformed("bad magic".into()));
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != VERSION {
        return Err(Error::WrongVersion {
            segment: "transport frame".into(),
            found: u64::from(version),
            supported: u64::from(VERSION),
        });
    }
    let flags = u16::from_le_bytes([header[6], header[7]]);
    let (payload_len, count, fd_count, handle_bytes) = (
        field(header, 8),
        field(header, 12),
        field(header, 16),
        field(header, 20),
    );
    if flags & !FLAG_MORE != 0
        || payload_len > MAX_PAYLOAD
        || count > MAX_HANDLES_PER_FRAME
        || fd_count > count.min(MAX_FDS_PER_SEND)
        || handle_bytes > count * (2 + handle::MAX_ENCODED_LEN)
    {
        return Err(malformed(format!(
            "frame header out of range (flags {flags:#x}, payload {payload_len}, handles {count}, fds {fd_count}, handle bytes {handle_bytes})"
        )));
    }
    Ok(FrameHeader {
        more: flags & FLAG_MORE != 0,
        payload_len,
        count,
        fd_count,
    })
}

/// Whether `e` is a non-blocking stream's "nothing to read now" (`EAGAIN`).
fn would_block(e: &Error) -> bool {
    matches!(e, Error::Os { source, .. } if source.kind() == std::io::ErrorKind::WouldBlock)
}

/// Fills `buf`, collecting arriving files, blocking until it is full (the device
/// transport's reads). `Ok(false)` if the stream ended before the first byte and
/// `eof_ok` (a clean end between messages).
#[cfg(feature = "cuda")]
pub(crate) fn read_exact<O: Os>(
    os: &O,
    stream: &O::Stream,
    buf: &mut [u8],
    files: &mut Vec<O::File>,
    eof_ok: bool,
) -> Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = os.recv(stream, &mut buf[filled..], files)?;
        if n == 0 {
            return if filled == 0 && eof_ok {
                Ok(false)
            } else {
                Err(malformed(format!(
                    "connection closed after {filled} of {} bytes",
                    buf.len()
                )))
            };
        }
        filled += n;
    }
    Ok(true)
}

fn malformed(why: String) -> Error {
    Error::Malformed {
        what: "transport frame",
        why,
    }
}

/// [`send`] and [`recv`] for any OS, for the checkers' seam (feature `checkers`, not
/// API): `shmrc::checkers::transport`. Each is the crate's own `pub(crate)` function of
/// the same name, which a seam cannot re-export itself.
#[cfg(feature = "checkers")]
pub(crate) mod generic {
    use super::{Message, Os, Result, ShareHandle};

    /// [`send`](super::send) as process `os` (any backend). On success the handles'
    /// in-flight references belong to the receiver; on failure they are given back when
    /// the handles you passed are dropped.
    pub fn send_with<O: Os>(
        os: &O,
        stream: &O::Stream,
        payload: &[u8],
        handles: Vec<ShareHandle<O>>,
    ) -> Result<()> {
        super::send_with(os, stream, payload, handles)
    }

    /// [`recv`](super::recv) as process `os` (any backend).
    /// [`Error::Disconnected`](crate::error::Error::Disconnected) if the peer closed the
    /// socket before a message began.
    pub fn recv_with<O: Os>(os: &O, stream: &O::Stream) -> Result<Message<O>> {
        super::recv_with(os, stream)
    }
}

#[cfg(all(test, not(any(shmrc_loom, shmrc_shuttle))))]
mod tests {
    use super::*;
    use crate::buf::{CreateOptions, ShmBuf};
    use crate::os::sim::{SimKernel, SimOs, SimStream};

    fn pair() -> (SimKernel, SimOs, SimOs, SimStream, SimStream) {
        let kernel = SimKernel::new(11);
        let (a, b) = (kernel.spawn(1000), kernel.spawn(1000));
        let (to_b, at_b) = kernel.stream_pair(&a, &b);
        (kernel, a, b, to_b, at_b)
    }

    /// A frame header with the given fields.
    fn header(flags: u16, payload: u32, count: u32, fds: u32, handle_bytes: u32) -> Vec<u8> {
        let mut h = MAGIC.to_vec();
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        for v in [payload, count, fds, handle_bytes] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        h
    }

    #[test]
    fn more_descriptors_than_one_message_carries_arrive_in_order() {
        let (k, a, b, to_b, at_b) = pair();
        // As a program that raised RLIMIT_NOFILE (`raise_fd_limit`) would have.
        k.set_fd_limit(a.pid(), 4096);
        k.set_fd_limit(b.pid(), 4096);
        let opts = CreateOptions::new().strategy(Strategy::FileDescriptor);
        let bufs: Vec<_> = (0..600u32)
            .map(|i| {
                let buf = ShmBuf::create_with(&a, 8, &opts).unwrap();
                buf.write_at(0, &i.to_le_bytes()).unwrap();
                buf
            })
            .collect();
        let handles: Vec<_> = bufs.iter().map(|b| b.share().unwrap()).collect();
        let carries_fd = handles
            .iter()
            .map(|h| h.strategy() == Strategy::FileDescriptor);
        assert_eq!(split_into_frames(carries_fd).len(), 3, "253 + 253 + 94");
        send_with(&a, &to_b, b"six hundred", handles).unwrap();
        let msg = recv_with(&b, &at_b).unwrap();
        assert_eq!(msg.payload, b"six hundred");
        for (i, handle) in msg.handles.into_iter().enumerate() {
            let buf = ShmBuf::attach(handle).unwrap();
            let mut out = [0u8; 4];
            buf.read_at(0, &mut out).unwrap();
            assert_eq!(u32::from_le_bytes(out), i as u32);
        }
    }

    #[test]
    fn a_closed_peer_is_disconnected_between_messages_and_malformed_inside_one() {
        let (k, a, b, to_b, at_b) = pair();
        send_with(&a, &to_b, b"one", vec![]).unwrap();
        a.send(&to_b, &header(0, 10, 0, 0, 0), &[]).unwrap();
        drop(to_b);
        assert_eq!(recv_with(&b, &at_b).unwrap().payload, b"one");
        assert!(
            matches!(recv_with(&b, &at_b), Err(Error::Malformed { .. })),
            "cut inside a frame"
        );
        let (to_b, at_b) = k.stream_pair(&a, &b);
        drop(to_b);
        assert!(matches!(recv_with(&b, &at_b), Err(Error::Disconnected)));
    }

    #[test]
    fn forged_frames_are_refused_with_their_cause() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                b"XXXX\x01\x00\x00\x00"
                    .iter()
                    .copied()
                    .chain([0; 16])
                    .collect(),
                "magic",
            ),
            (header(0x8, 0, 0, 0, 0), "flags"),
            (header(0, (MAX_PAYLOAD + 1) as u32, 0, 0, 0), "payload"),
            (header(0, 0, 1, 2, 0), "fd count"),
            (header(0, 0, 1, 0, 5000), "handle bytes"),
            (
                [header(0, 0, 1, 0, 3), vec![9, 0, 1]].concat(),
                "handle cut short",
            ),
            (
                [header(0, 0, 1, 0, 4), vec![2, 0, 1, 2]].concat(),
                "handle bytes",
            ),
            (
                [header(0, 0, 0, 0, 0), vec![]].concat(),
                "ok: an empty message",
            ),
        ];
        for (frame, what) in cases {
            let (_k, a, b, to_b, at_b) = pair();
            a.send(&to_b, &frame, &[]).unwrap();
            let got = recv_with(&b, &at_b);
            if what.starts_with("ok") {
                assert!(got.unwrap().handles.is_empty());
            } else {
                assert!(
                    matches!(got, Err(Error::Malformed { .. })),
                    "{what}: {got:?}"
                );
            }
        }
        let (_k, a, b, to_b, at_b) = pair();
        let mut old = header(0, 0, 0, 0, 0);
        old[4] = 9;
        a.send(&to_b, &old, &[]).unwrap();
        assert!(matches!(
            recv_with(&b, &at_b),
            Err(Error::WrongVersion { found: 9, .. })
        ));
    }

    #[test]
    fn a_message_reader_keeps_a_partial_message_across_a_dry_stream_and_finishes_it() {
        let (k, a, b, to_b, at_b) = pair();
        let opts = CreateOptions::new().strategy(Strategy::FileDescriptor);
        let buf = ShmBuf::create_with(&a, 8, &opts).unwrap();
        buf.write_at(0, b"resumed!").unwrap();
        // A whole frame as `send_with` writes it, captured on a second pair.
        let (tap_in, tap_out) = k.stream_pair(&a, &a);
        send_with(&a, &tap_in, b"payload", vec![buf.share().unwrap()]).unwrap();
        let mut frame = vec![0u8; 4096];
        let mut files = Vec::new();
        let n = a.recv(&tap_out, &mut frame, &mut files).unwrap();
        frame.truncate(n);
        assert_eq!(files.len(), 1);

        let mut reader = MessageReader::new();
        assert!(reader.read_on(&b, &at_b).unwrap().is_none(), "nothing yet");
        // The first 10 bytes with the descriptor, then a dry stream: kept, not an error.
        a.send(&to_b, &frame[..10], &[&files[0]]).unwrap();
        assert!(reader.read_on(&b, &at_b).unwrap().is_none());
        a.send(&to_b, &frame[10..30], &[]).unwrap();
        assert!(reader.read_on(&b, &at_b).unwrap().is_none());
        a.send(&to_b, &frame[30..], &[]).unwrap();
        let mut message = reader.read_on(&b, &at_b).unwrap().expect("whole");
        assert_eq!(message.payload, b"payload");
        let received = ShmBuf::attach(message.handles.remove(0)).unwrap();
        let mut out = [0u8; 8];
        received.read_at(0, &mut out).unwrap();
        assert_eq!(&out, b"resumed!");
        // And the reader starts afresh: the next message is read from its beginning.
        send_with(&a, &to_b, b"next", vec![]).unwrap();
        assert_eq!(reader.read_on(&b, &at_b).unwrap().unwrap().payload, b"next");
        // A blocking-style `recv_with` on the dry stream says it would block.
        let err = recv_with(&b, &at_b).unwrap_err();
        assert!(would_block(&err), "{err}");
    }

    #[test]
    fn a_file_descriptor_handle_cannot_be_decoded_from_bytes_alone() {
        let (_k, a, _b, _to_b, _at_b) = pair();
        let buf = ShmBuf::create_with(
            &a,
            8,
            &CreateOptions::new().strategy(Strategy::FileDescriptor),
        )
        .unwrap();
        let bytes = buf.share().unwrap().encoded();
        assert!(matches!(
            ShareHandle::from_bytes_with(&a, &bytes),
            Err(Error::WrongStrategy {
                strategy: Strategy::FileDescriptor,
                ..
            })
        ));
    }

    // Each bound of the framing at its edge: frames as `send` cuts them, and frame
    // headers written by hand (a well-behaved sender never writes the ones past a bound).

    #[test]
    fn frames_are_cut_at_the_handle_limit_and_at_the_descriptor_limit() {
        assert_eq!(
            split_into_frames([]),
            vec![std::ops::Range { start: 0, end: 0 }]
        );
        let handles = MAX_HANDLES_PER_FRAME;
        assert_eq!(
            split_into_frames(vec![false; 2 * handles + 1]),
            [
                0..handles,
                handles..2 * handles,
                2 * handles..2 * handles + 1
            ]
        );
        let fds = MAX_FDS_PER_SEND;
        assert_eq!(
            split_into_frames(vec![true; fds + 1]),
            [0..fds, fds..fds + 1]
        );
        // After a frame cut for its descriptors, the next one counts its handles afresh.
        let mixed = std::iter::repeat_n(true, fds + 1).chain(std::iter::repeat_n(false, handles));
        assert_eq!(
            split_into_frames(mixed),
            [0..fds, fds..fds + handles, fds + handles..fds + handles + 1]
        );
    }

    #[test]
    fn a_message_sent_on_a_real_socket_arrives() {
        let (a, b) = UnixStream::pair().unwrap();
        // A message that never comes fails the test instead of hanging it.
        b.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        send(&a, b"over the kernel", vec![]).unwrap();
        let message = recv(&b).unwrap();
        assert_eq!(message.payload, b"over the kernel");
        assert!(message.handles.is_empty());
    }

    #[test]
    fn the_largest_payload_travels_and_one_byte_more_is_refused_unsent() {
        let (_k, a, b, to_b, at_b) = pair();
        let largest = vec![7u8; MAX_PAYLOAD];
        send_with(&a, &to_b, &largest, vec![]).unwrap();
        assert_eq!(recv_with(&b, &at_b).unwrap().payload, largest);
        let err = send_with(&a, &to_b, &vec![7u8; MAX_PAYLOAD + 1], vec![]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        drop(to_b);
        assert!(matches!(recv_with(&b, &at_b), Err(Error::Disconnected)));
    }

    /// A frame header with these fields (payload length, handle count, descriptor
    /// count, handle bytes), then `body`, sent raw by a process that then closes its
    /// end; what the receiver gets of it.
    fn receive_crafted(fields: [u32; 4], body: &[u8]) -> Result<Message<SimOs>> {
        let (_k, a, b, to_b, at_b) = pair();
        let [payload, count, fds, handle_bytes] = fields;
        let frame = [header(0, payload, count, fds, handle_bytes), body.to_vec()].concat();
        a.send(&to_b, &frame, &[]).unwrap();
        drop(to_b);
        recv_with(&b, &at_b)
    }

    /// The reason of a `Malformed` error.
    fn why(result: Result<Message<SimOs>>) -> String {
        match result {
            Err(Error::Malformed { why, .. }) => why,
            other => panic!("expected a malformed frame, got {other:?}"),
        }
    }

    const OUT_OF_RANGE: &str = "frame header out of range";

    #[test]
    fn a_frame_header_one_past_each_bound_is_refused() {
        let u = |n: usize| u32::try_from(n).unwrap();
        // [payload length, handle count, descriptor count, handle bytes]
        for fields in [
            [u(MAX_PAYLOAD) + 1, 0, 0, 0],
            [0, u(MAX_HANDLES_PER_FRAME) + 1, 0, 0],
            [0, 0, 1, 0],
            [0, 1, 0, u(2 + handle::MAX_ENCODED_LEN) + 1],
        ] {
            let why = why(receive_crafted(fields, &[]));
            assert!(why.starts_with(OUT_OF_RANGE), "{fields:?}: {why}");
        }
    }

    #[test]
    fn a_frame_header_at_each_bound_is_read_on() {
        let u = |n: usize| u32::try_from(n).unwrap();
        // The most handles a frame may carry: past the header, the first is missing.
        let why_most = why(receive_crafted([0, u(MAX_HANDLES_PER_FRAME), 0, 0], &[]));
        assert_eq!(why_most, "handle length cut short");
        // The most handle bytes for one handle: a handle of zeros, refused by its decoder.
        let most = 2 + handle::MAX_ENCODED_LEN;
        let mut body = u16::try_from(handle::MAX_ENCODED_LEN)
            .unwrap()
            .to_le_bytes()
            .to_vec();
        body.resize(most, 0);
        match receive_crafted([0, 1, 0, u(most)], &body) {
            Err(Error::Malformed { what, .. }) => assert_ne!(what, "transport frame"),
            other => panic!("expected the handle's decoder to refuse it, got {other:?}"),
        }
    }

    #[test]
    fn bytes_after_the_handles_are_refused() {
        let (_k, a, b, to_b, at_b) = pair();
        let buf = ShmBuf::create_with(&a, 8, &CreateOptions::new().strategy(Strategy::FileSystem))
            .unwrap();
        let handle = buf.share().unwrap().encoded();
        let len = u16::try_from(handle.len()).unwrap();
        let body = [&len.to_le_bytes()[..], &handle, b"!"].concat();
        let frame = [header(0, 0, 1, 0, u32::from(len) + 3), body].concat();
        a.send(&to_b, &frame, &[]).unwrap();
        let why = why(recv_with(&b, &at_b));
        assert!(why.starts_with("trailing bytes"), "{why}");
    }

    #[test]
    fn a_connection_cut_inside_a_frame_header_is_malformed_not_a_clean_end() {
        let (_k, a, b, to_b, at_b) = pair();
        a.send(&to_b, &MAGIC, &[]).unwrap();
        drop(to_b);
        let why = why(recv_with(&b, &at_b));
        assert_eq!(
            why,
            format!("connection closed after 4 of {FRAME_HEADER} bytes")
        );
    }
}
