//! Moving host and device handles over a connected Unix stream socket: [`send`] and
//! [`recv`], one message of [`AnyHandle`]s in the order given. A
//! [`HandleKind::PosixFd`](super::HandleKind::PosixFd) device handle carries the
//! allocation's file descriptor, which only `SCM_RIGHTS` can move. A small frame goes
//! first, carrying each handle's placement and the device descriptors; then the host
//! handles and the device handles' keep-alives as one [`crate::transport`] message
//! (which carries the host memfds):
//!
//! ```text
//!  0..4 magic "SHMD"   4..6 version (1)   6..8 zero   8..12 handle count
//! then per handle 22 bytes: kind (0 host, 1 cuda, 2 cuda with a descriptor, in order),
//! device known (0/1), device ordinal (u32), device UUID (16 bytes)
//! ```

use std::os::unix::net::UnixStream;

use super::buf::DeviceHandle;
use super::driver::DeviceId;
use super::placement::AnyHandle;
use crate::error::{Error, Result};
use crate::manager::DefaultOs;
use crate::os::{MAX_FDS_PER_SEND, Os};
use crate::transport::read_exact;

const MAGIC: [u8; 4] = *b"SHMD";
const VERSION: u16 = 1;
const HEADER: usize = 12;
/// Bytes per handle after the header.
const PER_HANDLE: usize = 22;
/// The most device handles one message may announce (a bound on what a peer makes
/// this side allocate).
const MAX_HANDLES: usize = 1 << 16;

/// What [`recv`] returns: the payload and the handles, in the order sent.
#[derive(Debug)]
pub struct DeviceMessage {
    /// The bytes passed to [`send`].
    pub payload: Vec<u8>,
    /// The handles; each owns its in-flight reference (and descriptor) until
    /// attached or dropped. [`AnyHandle::attach`] attaches each where it lives.
    pub handles: Vec<AnyHandle>,
}

/// Sends `payload` and `handles` (host or device, in any mix) over `stream` as one
/// message; on success the handles' references (and descriptors) belong to the
/// receiver. At most 253 `posix_fd` device handles per message (`SCM_MAX_FD`); host
/// file_descriptor handles are split over frames as [`crate::transport::send`] does.
///
/// ```
/// # #[cfg(feature = "cuda-fake")] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # // SAFETY: a doc example runs one thread (fork's contract).
/// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
/// use std::os::unix::net::UnixStream;
/// use std::sync::Arc;
/// use shmrc::cuda::{AnyBuf, CudaDevice, HandleKind, Placement, VmmAllocator, transport};
/// use shmrc::{CreateOptions, Namespace, ShmBuf};
///
/// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-dev-transport")?);
/// let producer = CudaDevice::fake("shmrc-doc-dev-transport", 1 << 30, &keepalive)?;
/// producer.set_allocator(Arc::new(VmmAllocator::new(Arc::clone(producer.driver()))?));
/// let weights = producer.alloc(4096)?;
/// weights.write_at(0, b"by SCM_RIGHTS")?;
/// let labels = ShmBuf::new(16)?;
/// labels.write_at(0, b"host labels")?;
/// let (to_consumer, at_consumer) = UnixStream::pair().unwrap();
/// transport::send(&to_consumer, b"step 1", vec![weights.share()?.into(), labels.share()?.into()])?;
/// in_child(|| {
///     let consumer = CudaDevice::fake("shmrc-doc-dev-transport", 1 << 30, &keepalive)?;
///     let message = transport::recv(&at_consumer)?;
///     assert_eq!(message.payload, b"step 1");
///     let placements: Vec<Placement> = message.handles.iter().map(|h| h.placement()).collect();
///     assert_eq!(placements[1], Placement::Host);
///     let mut out = [0u8; 13];
///     for handle in message.handles {
///         match handle.attach(&[consumer.clone()])? {
///             AnyBuf::Cuda(view) => {
///                 assert_eq!(view.identity().kind, HandleKind::PosixFd);
///                 view.read_at(0, &mut out)?;
///                 assert_eq!(&out, b"by SCM_RIGHTS");
///             }
///             AnyBuf::Host(buf) => {
///                 buf.read_at(0, &mut out[..11])?;
///                 assert_eq!(&out[..11], b"host labels");
///             }
///         }
///     }
///     Ok(())
/// });
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn send(stream: &UnixStream, payload: &[u8], handles: Vec<AnyHandle>) -> Result<()> {
    let os = DefaultOs::default();
    let mut frame = Vec::with_capacity(HEADER + PER_HANDLE * handles.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&VERSION.to_le_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(&(handles.len() as u32).to_le_bytes());
    let mut carried = Vec::with_capacity(handles.len());
    let mut files = Vec::new();
    for handle in handles {
        let (kind, device) = match handle {
            AnyHandle::Host(host) => {
                carried.push(host);
                (0, None)
            }
            AnyHandle::Cuda(device) => {
                let (keepalive, fd, id) = device.into_parts();
                carried.push(keepalive);
                let kind = 1 + u8::from(fd.is_some());
                files.extend(fd.map(crate::os::posix::PosixFile::from));
                (kind, id)
            }
        };
        frame.push(kind);
        frame.push(u8::from(device.is_some()));
        let id = device.unwrap_or(DeviceId {
            ordinal: 0,
            uuid: [0; 16],
        });
        frame.extend_from_slice(&id.ordinal.to_le_bytes());
        frame.extend_from_slice(&id.uuid);
    }
    if files.len() > MAX_FDS_PER_SEND {
        return Err(Error::InvalidArgument(format!(
            "{} posix_fd device handles in one message (at most {MAX_FDS_PER_SEND})",
            files.len()
        )));
    }
    os.send(stream, &frame, &files.iter().collect::<Vec<_>>())?;
    crate::transport::send(stream, payload, carried)
}

/// Receives one message sent with [`send`], blocking until it is whole.
/// [`Error::Disconnected`] if the peer closed the socket first; [`Error::Malformed`]
/// for bytes that are not a device message (the connection is then out of step).
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use std::os::unix::net::UnixStream;
/// use shmrc::cuda::transport;
/// use shmrc::Error;
///
/// let (producer, consumer) = UnixStream::pair().unwrap();
/// transport::send(&producer, b"no buffers this step", Vec::new())?;
/// drop(producer);
/// assert_eq!(transport::recv(&consumer)?.payload, b"no buffers this step");
/// assert!(matches!(transport::recv(&consumer), Err(Error::Disconnected)));
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn recv(stream: &UnixStream) -> Result<DeviceMessage> {
    let os = DefaultOs::default();
    let mut files = Vec::new();
    let mut header = [0u8; HEADER];
    if !read_exact(&os, stream, &mut header, &mut files, true)? {
        return Err(Error::Disconnected);
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    let count = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
    if header[..4] != MAGIC || version != VERSION || header[6..8] != [0, 0] {
        return Err(malformed(format!("bad device frame header {header:02x?}")));
    }
    if count > MAX_HANDLES {
        return Err(malformed(format!("{count} device handles in one message")));
    }
    let mut entries = vec![0u8; count * PER_HANDLE];
    if count > 0 && !read_exact(&os, stream, &mut entries, &mut files, false)? {
        return Err(malformed("connection closed inside a device frame".into()));
    }
    let entries: Vec<&[u8]> = entries.chunks(PER_HANDLE).collect();
    let announced = entries.iter().filter(|e| e[0] == 2).count();
    if let Some(bad) = entries.iter().find(|e| e[0] > 2 || e[1] > 1) {
        return Err(malformed(format!(
            "handle kind {} / device flag {} unknown",
            bad[0], bad[1]
        )));
    }
    if files.len() != announced {
        return Err(malformed(format!(
            "frame announced {announced} descriptors, {} arrived",
            files.len()
        )));
    }
    let message = crate::transport::recv(stream)?;
    if message.handles.len() != count {
        return Err(malformed(format!(
            "{count} handles announced, {} arrived",
            message.handles.len()
        )));
    }
    let mut files = files.into_iter().map(|f| f.into_inner());
    let handles = message
        .handles
        .into_iter()
        .zip(entries)
        .map(|(carried, entry)| {
            if entry[0] == 0 {
                return AnyHandle::Host(carried);
            }
            let fd = if entry[0] == 2 { files.next() } else { None };
            let device = (entry[1] == 1).then(|| DeviceId {
                ordinal: u32::from_le_bytes([entry[2], entry[3], entry[4], entry[5]]),
                uuid: entry[6..22].try_into().unwrap_or([0; 16]),
            });
            AnyHandle::Cuda(DeviceHandle::from_parts(carried, fd, device))
        })
        .collect();
    Ok(DeviceMessage {
        payload: message.payload,
        handles,
    })
}

fn malformed(why: String) -> Error {
    Error::Malformed {
        what: "device transport frame",
        why,
    }
}
