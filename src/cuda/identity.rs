//! What a device buffer's keep-alive segment carries in its data part: the identity of
//! the device allocation it keeps alive (how it is shared: a legacy IPC handle, or a
//! POSIX fd that travels beside the handle, with the allocation's size; offset and
//! size of the buffer in that allocation; device; exporting process).
//!
//! Layout (version 2, little-endian): magic 0..8, version 8..12, ordinal 12..16, UUID
//! 16..32, legacy IPC handle 32..96 (zero for posix_fd), offset 96..104, size
//! 104..112, producer 112..120, kind 120 (1 legacy_ipc, 2 posix_fd), allocation size
//! 128..136 (posix_fd), event flag 136 (1: an IPC event follows), IPC event handle
//! 144..208, the rest zero. Encoded at share time by the producer,
//! decoded and validated by every consumer before it opens anything.

use super::driver::{DeviceId, HandleKind, IPC_HANDLE_BYTES, IpcEventHandle, IpcMemHandle};
use crate::error::{Error, Result};
use crate::token::Token;

/// Bytes of the data part of a keep-alive segment.
pub const IDENTITY_BYTES: usize = 256;
/// Layout version of the identity record.
pub const IDENTITY_VERSION: u32 = 2;
const MAGIC: &[u8; 8] = b"SHMRCDEV";

const AT_VERSION: usize = 8;
const AT_ORDINAL: usize = 12;
const AT_UUID: usize = 16;
const AT_IPC: usize = 32;
const AT_OFFSET: usize = AT_IPC + IPC_HANDLE_BYTES;
const AT_SIZE: usize = AT_OFFSET + 8;
const AT_PRODUCER: usize = AT_SIZE + 8;
const AT_KIND: usize = AT_PRODUCER + 8;
const AT_ALLOCATION: usize = AT_KIND + 8;
const AT_EVENT_FLAG: usize = AT_ALLOCATION + 8;
const AT_EVENT: usize = AT_EVENT_FLAG + 8;
const END: usize = AT_EVENT + IPC_HANDLE_BYTES;
const _: () = assert!(END <= IDENTITY_BYTES);

/// The device allocation a keep-alive segment stands for, as a consumer's
/// [`DeviceView::identity`](super::DeviceView::identity) reads it.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// # // SAFETY: a doc example runs one thread (fork's contract).
/// # fn in_child(c: impl FnOnce() -> shmrc::Result<()>) { use nix::{sys::wait::{WaitStatus, waitpid}, unistd::{ForkResult, alarm, fork}}; match unsafe { fork() }.unwrap() { ForkResult::Child => { alarm::set(60); let code = i32::from(c().is_err()); unsafe { nix::libc::_exit(code) } } ForkResult::Parent { child } => assert!(matches!(waitpid(child, None).unwrap(), WaitStatus::Exited(_, 0))) } }
/// use shmrc::cuda::{CudaDevice, DeviceHandle, Identity};
/// use shmrc::{CreateOptions, Namespace};
///
/// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-identity-type")?);
/// let producer = CudaDevice::fake("shmrc-doc-identity-type", 1 << 20, &keepalive)?;
/// let buf = producer.alloc(4096)?;
/// let bytes = buf.share()?.into_bytes()?;
/// let ipc = producer.driver().ipc_get_mem_handle(buf.ptr())?;
/// in_child(|| {
///     let consumer = CudaDevice::fake("shmrc-doc-identity-type", 1 << 20, &keepalive)?;
///     let view = consumer.attach(DeviceHandle::from_bytes(&bytes)?)?;
///     let identity: &Identity = view.identity();
///     assert_eq!(identity.ipc, ipc);
///     assert_eq!(identity.size, 4096);
///     Ok(())
/// });
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Identity {
    /// How the allocation is shared.
    pub kind: HandleKind,
    /// The IPC handle of the whole allocation (its base); all zero for
    /// [`HandleKind::PosixFd`], whose fd travels beside the handle.
    pub ipc: IpcMemHandle,
    /// Bytes of the whole allocation, which a [`HandleKind::PosixFd`] importer maps
    /// (0 for legacy handles: the driver knows).
    pub allocation: u64,
    /// Where the shared buffer starts in that allocation (pool allocators).
    pub offset: u64,
    /// Bytes of the shared buffer.
    pub size: u64,
    /// The device it lives on.
    pub device: DeviceId,
    /// The process that exported it (and alone may free it).
    pub producer: Token,
    /// The producer's IPC event, recorded at each share after the work queued on the
    /// buffer; a consumer's stream waits on it before using the buffer.
    pub event: Option<IpcEventHandle>,
}

impl Identity {
    /// The record's bytes.
    pub(crate) fn encode(&self) -> [u8; IDENTITY_BYTES] {
        let mut b = [0u8; IDENTITY_BYTES];
        b[..AT_VERSION].copy_from_slice(MAGIC);
        b[AT_VERSION..AT_ORDINAL].copy_from_slice(&IDENTITY_VERSION.to_le_bytes());
        b[AT_ORDINAL..AT_UUID].copy_from_slice(&self.device.ordinal.to_le_bytes());
        b[AT_UUID..AT_IPC].copy_from_slice(&self.device.uuid);
        b[AT_IPC..AT_OFFSET].copy_from_slice(&self.ipc.0);
        b[AT_OFFSET..AT_SIZE].copy_from_slice(&self.offset.to_le_bytes());
        b[AT_SIZE..AT_PRODUCER].copy_from_slice(&self.size.to_le_bytes());
        b[AT_PRODUCER..AT_KIND].copy_from_slice(&self.producer.word().to_le_bytes());
        b[AT_KIND] = match self.kind {
            HandleKind::LegacyIpc => 1,
            HandleKind::PosixFd => 2,
        };
        b[AT_ALLOCATION..AT_EVENT_FLAG].copy_from_slice(&self.allocation.to_le_bytes());
        if let Some(event) = &self.event {
            b[AT_EVENT_FLAG] = 1;
            b[AT_EVENT..END].copy_from_slice(&event.0);
        }
        b
    }

    /// Decodes and validates the record read from segment `segment`.
    pub(crate) fn decode(b: &[u8; IDENTITY_BYTES], segment: &str) -> Result<Identity> {
        let bad = |what: String| Error::CudaBadIdentity {
            segment: segment.to_owned(),
            what,
        };
        let u64_at = |at: usize| u64::from_le_bytes(bytes_at(b, at));
        let u32_at = |at: usize| u32::from_le_bytes(bytes_at(b, at));
        if &b[..AT_VERSION] != MAGIC {
            return Err(bad("no device identity magic".into()));
        }
        let version = u32_at(AT_VERSION);
        if version != IDENTITY_VERSION {
            return Err(bad(format!(
                "identity version {version}; this build reads {IDENTITY_VERSION}"
            )));
        }
        let (offset, size) = (u64_at(AT_OFFSET), u64_at(AT_SIZE));
        if size == 0 || offset.checked_add(size).is_none() {
            return Err(bad(format!(
                "offset {offset} and size {size} are no buffer"
            )));
        }
        let producer = Token::from_word(u64_at(AT_PRODUCER))
            .ok_or_else(|| bad("the producer token is not a process".into()))?;
        let allocation = u64_at(AT_ALLOCATION);
        let kind = match b[AT_KIND] {
            1 => HandleKind::LegacyIpc,
            2 if offset + size <= allocation => HandleKind::PosixFd,
            2 => {
                return Err(bad(format!(
                    "offset {offset} + size {size} lie beyond the {allocation}-byte allocation"
                )));
            }
            other => return Err(bad(format!("handle kind {other} is none of this build's"))),
        };
        let event = match b[AT_EVENT_FLAG] {
            0 => None,
            1 => Some(IpcEventHandle(bytes_at(b, AT_EVENT))),
            other => return Err(bad(format!("event flag {other} is neither 0 nor 1"))),
        };
        Ok(Identity {
            event,
            kind,
            ipc: IpcMemHandle(bytes_at(b, AT_IPC)),
            allocation,
            offset,
            size,
            device: DeviceId {
                ordinal: u32_at(AT_ORDINAL),
                uuid: bytes_at(b, AT_UUID),
            },
            producer,
        })
    }
}

/// [`Identity`]'s wire form, for the checkers' seam (feature `checkers`, not API):
/// `shmrc::checkers::cuda::IdentityExt`, for the forged-record tests. Each is the
/// crate's own `pub(crate)` method of the same name.
#[cfg(feature = "checkers")]
pub trait IdentityExt: Sized {
    /// The record's bytes.
    fn encode(&self) -> [u8; IDENTITY_BYTES];
    /// Decodes and validates the record read from segment `segment`.
    fn decode(b: &[u8; IDENTITY_BYTES], segment: &str) -> Result<Self>;
}

#[cfg(feature = "checkers")]
impl IdentityExt for Identity {
    fn encode(&self) -> [u8; IDENTITY_BYTES] {
        Identity::encode(self)
    }

    fn decode(b: &[u8; IDENTITY_BYTES], segment: &str) -> Result<Identity> {
        Identity::decode(b, segment)
    }
}

/// The `N` bytes of the record at `at` (every caller's range lies inside the record).
fn bytes_at<const N: usize>(b: &[u8; IDENTITY_BYTES], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}
