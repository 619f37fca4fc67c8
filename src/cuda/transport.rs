//! Moving device handles over a connected Unix stream socket: [`send`] and [`recv`].
//! A [`HandleKind::PosixFd`](super::HandleKind::PosixFd) handle carries the
//! allocation's file descriptor, which only `SCM_RIGHTS` can move; legacy handles
//! carry none. The keep-alive handles themselves go as one [`crate::transport`]
//! message, after a small frame that carries the descriptors:
//!
//! ```text
//!  0..4 magic "SHMD"   4..6 version (1)   6..8 zero   8..12 handle count
//! then one byte per handle: 1 if a descriptor rides with it (in order), else 0
//! ```

use std::os::unix::net::UnixStream;

use super::buf::DeviceHandle;
use crate::DefaultOs;
use crate::error::{Error, Result};
use crate::os::{MAX_FDS_PER_SEND, Os};
use crate::transport::read_exact;

const MAGIC: [u8; 4] = *b"SHMD";
const VERSION: u16 = 1;
const HEADER: usize = 12;
/// The most device handles one message may announce (a bound on what a peer makes
/// this side allocate).
const MAX_HANDLES: usize = 1 << 16;

/// What [`recv`] returns: the payload and the device handles, in the order sent.
#[derive(Debug)]
pub struct DeviceMessage {
    /// The bytes passed to [`send`].
    pub payload: Vec<u8>,
    /// The handles; each owns its in-flight reference (and descriptor) until
    /// attached or dropped.
    pub handles: Vec<DeviceHandle>,
}

/// Sends `payload` and device `handles` over `stream` as one message; on success the
/// handles' references (and descriptors) belong to the receiver. At most
/// 253 `posix_fd` handles per message (`SCM_MAX_FD`).
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # fn in_child(consumer: impl FnOnce() -> shmrc::Result<()>) {
/// #     use nix::sys::wait::{WaitStatus, waitpid};
/// #     use nix::unistd::{ForkResult, fork};
/// #     // SAFETY: this program runs no other thread that could hold a lock at the fork.
/// #     match unsafe { fork() }.expect("fork") {
/// #         ForkResult::Child => std::process::exit(match consumer() {
/// #             Ok(()) => 0,
/// #             Err(e) => { eprintln!("consumer: {e}"); 1 }
/// #         }),
/// #         ForkResult::Parent { child } => {
/// #             assert_eq!(waitpid(child, None).expect("waitpid"), WaitStatus::Exited(child, 0));
/// #         }
/// #     }
/// # }
/// use std::os::unix::net::UnixStream;
/// use std::sync::Arc;
/// use shmrc::cuda::{CudaDevice, HandleKind, VmmAllocator, transport};
/// use shmrc::{CreateOptions, Namespace};
///
/// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-dev-transport")?);
/// let producer = CudaDevice::fake("shmrc-doc-dev-transport", 1 << 30, &keepalive)?;
/// producer.set_allocator(Arc::new(VmmAllocator::new(Arc::clone(producer.driver()))?));
/// let buf = producer.alloc(4096)?;
/// buf.write_at(0, b"by SCM_RIGHTS")?;
/// let (to_consumer, at_consumer) = UnixStream::pair().unwrap();
/// transport::send(&to_consumer, b"step 1", vec![buf.share()?])?;
/// in_child(|| {
///     let consumer = CudaDevice::fake("shmrc-doc-dev-transport", 1 << 30, &keepalive)?;
///     let mut message = transport::recv(&at_consumer)?;
///     assert_eq!(message.payload, b"step 1");
///     let view = consumer.attach(message.handles.remove(0))?;
///     assert_eq!(view.identity().kind, HandleKind::PosixFd);
///     let mut out = [0u8; 13];
///     view.read_at(0, &mut out)?;
///     assert_eq!(&out, b"by SCM_RIGHTS");
///     Ok(())
/// });
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn send(stream: &UnixStream, payload: &[u8], handles: Vec<DeviceHandle>) -> Result<()> {
    let os = DefaultOs::default();
    let mut frame = Vec::with_capacity(HEADER + handles.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&VERSION.to_le_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(&(handles.len() as u32).to_le_bytes());
    let mut keepalives = Vec::with_capacity(handles.len());
    let mut files = Vec::new();
    for handle in handles {
        let (keepalive, fd) = handle.into_parts();
        frame.push(u8::from(fd.is_some()));
        keepalives.push(keepalive);
        files.extend(fd.map(crate::os::posix::PosixFile::from));
    }
    if files.len() > MAX_FDS_PER_SEND {
        return Err(Error::InvalidArgument(format!(
            "{} posix_fd device handles in one message (at most {MAX_FDS_PER_SEND})",
            files.len()
        )));
    }
    os.send(stream, &frame, &files.iter().collect::<Vec<_>>())?;
    crate::transport::send(stream, payload, keepalives)
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
    let mut has_fd = vec![0u8; count];
    if count > 0 && !read_exact(&os, stream, &mut has_fd, &mut files, false)? {
        return Err(malformed("connection closed inside a device frame".into()));
    }
    let announced = has_fd.iter().filter(|b| **b == 1).count();
    if has_fd.iter().any(|b| *b > 1) || files.len() != announced {
        return Err(malformed(format!(
            "frame announced {announced} descriptors, {} arrived",
            files.len()
        )));
    }
    let message = crate::transport::recv(stream)?;
    if message.handles.len() != count {
        return Err(malformed(format!(
            "{count} device handles announced, {} keep-alives arrived",
            message.handles.len()
        )));
    }
    let mut files = files.into_iter().map(|f| f.into_inner());
    let handles = message
        .handles
        .into_iter()
        .zip(has_fd)
        .map(|(keepalive, fd)| {
            DeviceHandle::from_parts(keepalive, (fd == 1).then(|| files.next()).flatten())
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
