//! Stream sockets: connected pairs ([`SimKernel::stream_pair`], [`SimStream`]), their
//! queues of sends, and the socket half of `Os`: bytes and files sent, received, and
//! discarded when an end closes.

use std::collections::VecDeque;
use std::fmt;

use super::kernel::SimKernel;
use super::objects::SimFile;
use super::os_error;
use super::process::SimOs;
use crate::error::{Error, Result};
use crate::os::MAX_FDS_PER_SEND;

/// Both directions of a stream socket pair: `queues[s]` is what side `s` receives.
pub(super) struct Pair {
    queues: [VecDeque<Chunk>; 2],
    open: [bool; 2],
}

/// One `send`: its bytes and the objects of the files attached to its first byte.
struct Chunk {
    bytes: Vec<u8>,
    pos: usize,
    files: Vec<u64>,
}

impl SimKernel {
    /// A connected stream socket pair: the first end belongs to `a`, the second to `b`.
    /// Sockets do not count against the fd limit.
    ///
    /// # Panics
    /// When `a` or `b` belongs to another kernel.
    pub fn stream_pair(&self, a: &SimOs, b: &SimOs) -> (SimStream, SimStream) {
        assert!(
            self.same(&a.kernel).is_ok() && self.same(&b.kernel).is_ok(),
            "stream_pair of processes of another kernel"
        );
        let id = self.with(|st, _| {
            let id = st.fresh_id();
            st.streams.insert(
                id,
                Pair {
                    queues: [VecDeque::new(), VecDeque::new()],
                    open: [true, true],
                },
            );
            id
        });
        let end = |side, owner: &SimOs| SimStream {
            kernel: self.clone(),
            pair: id,
            side,
            owner: owner.pid,
        };
        (end(0, a), end(1, b))
    }
}

/// One end of a simulated stream socket pair ([`SimKernel::stream_pair`]); dropping it
/// closes that end: the peer's sends fail with [`Error::Disconnected`], its receives
/// end with 0 once the queue is drained, and what was queued for this end is discarded.
pub struct SimStream {
    kernel: SimKernel,
    pair: u64,
    side: usize,
    owner: u32,
}

impl fmt::Debug for SimStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimStream")
            .field("pair", &self.pair)
            .field("side", &self.side)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        self.kernel.with(|st, garbage| {
            let Some(pair) = st.streams.get_mut(&self.pair) else {
                return;
            };
            pair.open[self.side] = false;
            let purged: Vec<u64> = pair.queues[self.side]
                .drain(..)
                .flat_map(|chunk| chunk.files)
                .collect();
            if !pair.open.contains(&true) {
                st.streams.remove(&self.pair);
            }
            st.drop_in_flight(&purged, garbage);
        });
    }
}

/// [`Os::send`](crate::os::Os::send): `bytes` queued for the peer, the files in flight
/// with the first of them.
pub(super) fn send(os: &SimOs, stream: &SimStream, bytes: &[u8], files: &[&SimFile]) -> Result<()> {
    os.kernel.same(&stream.kernel)?;
    for file in files {
        os.check_file(file)?;
    }
    if files.len() > MAX_FDS_PER_SEND {
        return Err(Error::InvalidArgument(format!(
            "{} files in one send, at most {MAX_FDS_PER_SEND}",
            files.len()
        )));
    }
    if bytes.is_empty() && !files.is_empty() {
        return Err(Error::InvalidArgument(
            "files travel with the first byte: send at least one byte".into(),
        ));
    }
    os.with(|st, _| {
        st.owned(os.pid, stream.owner, "sendmsg")?;
        for file in files {
            // SCM_RIGHTS of a number that is not one of the sender's files.
            st.owned(os.pid, file.owner, "sendmsg")?;
        }
        let peer = 1 - stream.side;
        let open = st.streams.get(&stream.pair).is_some_and(|p| p.open[peer]);
        if !open {
            return Err(Error::Disconnected);
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let objects: Vec<u64> = files.iter().map(|f| f.object).collect();
        for id in &objects {
            st.object(*id, "sendmsg")?;
        }
        for id in &objects {
            st.object(*id, "sendmsg")?.in_flight += 1;
        }
        if let Some(pair) = st.streams.get_mut(&stream.pair) {
            pair.queues[peer].push_back(Chunk {
                bytes: bytes.to_vec(),
                pos: 0,
                files: objects,
            });
        }
        Ok(())
    })
}

/// [`Os::recv`](crate::os::Os::recv): what is queued, up to the next send with files.
pub(super) fn recv(
    os: &SimOs,
    stream: &SimStream,
    buf: &mut [u8],
    files: &mut Vec<SimFile>,
) -> Result<usize> {
    os.kernel.same(&stream.kernel)?;
    let (n, received) = os.with(|st, garbage| {
        let limit = st.caller(os.pid)?.fd_limit;
        if buf.is_empty() {
            // As the posix backend: 0 would read as the end of the stream.
            return Err(Error::InvalidArgument(
                "recv needs room for at least one byte".into(),
            ));
        }
        st.owned(os.pid, stream.owner, "recvmsg")?;
        let side = stream.side;
        let Some(pair) = st.streams.get_mut(&stream.pair) else {
            return Ok((0, Vec::new()));
        };
        if pair.queues[side].is_empty() {
            return if pair.open[1 - side] {
                Err(os_error("recvmsg", libc::EAGAIN))
            } else {
                Ok((0, Vec::new()))
            };
        }
        let mut n = 0;
        let mut arrived = Vec::new();
        while n < buf.len() {
            let Some(chunk) = pair.queues[side].front_mut() else {
                break;
            };
            let with_files = !chunk.files.is_empty();
            if with_files && n > 0 {
                break;
            }
            arrived.append(&mut chunk.files);
            let take = (buf.len() - n).min(chunk.bytes.len() - chunk.pos);
            buf[n..n + take].copy_from_slice(&chunk.bytes[chunk.pos..chunk.pos + take]);
            chunk.pos += take;
            n += take;
            if chunk.pos == chunk.bytes.len() {
                pair.queues[side].pop_front();
            }
            if with_files {
                break;
            }
        }
        let fds = st.procs.get(&os.pid).map_or(0, |p| p.fds);
        if fds + arrived.len() > limit {
            // MSG_CTRUNC: the bytes are consumed, the files closed, and none is
            // handed out (`files` is left as it was).
            st.drop_in_flight(&arrived, garbage);
            return Err(Error::TooManyFds {
                call: "recvmsg",
                limit: limit as u64,
                liveness_fds: 0,
            });
        }
        let mut received = Vec::with_capacity(arrived.len());
        for object in arrived {
            // In flight to open: the object keeps a reference throughout.
            if let Some(o) = st.objects.get_mut(&object) {
                debug_assert!(o.in_flight > 0, "a file arrived twice");
                o.in_flight -= 1;
            }
            received.push((st.open_file(os.pid, object), object));
        }
        Ok((n, received))
    })?;
    // Owned by the receiver (`os.file`).
    files.extend(received.into_iter().map(|(id, object)| os.file(id, object)));
    Ok(n)
}
