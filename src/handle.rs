//! [`ShareHandle`]: what travels between processes to share a buffer, and its wire
//! encoding.
//!
//! A file_system handle carries the segment's name and, usually, an *in-flight
//! reference*: a holder slot the sender claimed for the receiver, alive while the sender
//! is (property P1 for handles in flight). The handle owns that reference as a Rust
//! value: attaching takes it over, dropping an unattached handle gives it back, and
//! [`ShareHandle::into_bytes`] hands it to whoever gets the bytes. A file_descriptor
//! handle carries an open memfd, so it can only travel over a Unix socket
//! ([`crate::transport`]); a pool's memfd has holder slots, and its handle carries an
//! in-flight reference too.
//!
//! Encoding (little-endian), at most [`MAX_ENCODED_LEN`] bytes:
//! ```text
//!  0..4   magic "SHRH"          4..6   version (2)
//!  6      kind: 1 file_system, 2 file_descriptor
//!  7      flags: bit 0 = in-flight reference present
//!  8..16  data length           16..20 slot capacity
//! 20..24  in-flight slot        24..32 in-flight word
//! 32..40  creator token         40..56 nonce
//! 56..64  generation (the use of a recycled segment, see holders::recycle)
//! 64..72  share key (the segment header's secret word, see segment.rs)
//! 72..74  name length           74..   name (file_system only)
//! ```
//! [`decode`] checks every field, and that the name lies in a shmrc namespace of this
//! user and agrees with the creator and nonce, before anything is opened.
//!
//! Everything in a file_system handle but the share key can be read off a listing of
//! `/dev/shm` and `/proc` by any local user: the name, the length, and the word of an
//! in-flight reference (the sender's pid and start time). The share key is 64 random
//! bits in the segment's header, which only the owner's processes can read (the file
//! is `0600`): attaching a handle, taking over its in-flight reference, or giving one
//! back from a dropped handle all need it to match, so bytes forged from what is
//! public are refused and touch nothing (docs/SECURITY.md).

use std::fmt;

use crate::error::{Error, Result};
use crate::local::SegmentKey;
use crate::manager::DefaultOs;
use crate::namespace::Namespace;
use crate::os::Os;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
use crate::os::posix::PosixFile;
use crate::protocol::attach::Expected;
use crate::protocol::holders::{self, Slot};
use crate::protocol::segment::{self, Header, MAX_CAPACITY, MAX_DATA_LEN};
use crate::strategy::Strategy;
use crate::token::Token;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
use std::os::fd::OwnedFd;

const MAGIC: [u8; 4] = *b"SHRH";
/// The handle encoding version this build writes and reads.
pub const HANDLE_VERSION: u16 = 3;
const FIXED_LEN: usize = 74;
const MAX_NAME_LEN: usize = 255;
/// The longest encoded handle.
pub const MAX_ENCODED_LEN: usize = FIXED_LEN + MAX_NAME_LEN;
const KIND_FILE_SYSTEM: u8 = 1;
const KIND_FILE_DESCRIPTOR: u8 = 2;
const FLAG_IN_FLIGHT: u8 = 1;

/// What a handle says about its segment.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct HandleMeta {
    /// The buffer's strategy.
    pub strategy: Strategy,
    /// The segment's identity.
    pub key: SegmentKey,
    /// Data length in bytes.
    pub data_len: usize,
    /// Holder slots (0 for a plain file_descriptor buffer).
    pub capacity: usize,
    /// The segment's generation when shared: which use of a recycled segment the handle
    /// describes (0 for a segment never recycled).
    pub generation: u64,
    /// The segment's share key: the secret that shows the handle was made from the
    /// segment itself, not forged from its name (see the module's docs).
    pub share_key: u64,
}

impl HandleMeta {
    /// What an attach expects of the segment this handle describes
    /// ([`Expect::Handle`](crate::protocol::attach::Expect::Handle)).
    pub fn expected(&self) -> Expected {
        Expected {
            share_key: self.share_key,
            key: self.key,
            data_len: self.data_len,
            capacity: self.capacity,
            generation: self.generation,
        }
    }
}

/// An in-flight reference: slot `slot` holds `word` for the receiver.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct InFlight {
    /// The slot.
    pub slot: usize,
    /// Its word (`IN_FLIGHT | sender token`).
    pub word: u64,
}

/// A decoded handle, before any OS object is attached to it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Decoded {
    /// Segment description.
    pub meta: HandleMeta,
    /// The name (file_system) or `None` (file_descriptor).
    pub name: Option<String>,
    /// The in-flight reference, if any.
    pub in_flight: Option<InFlight>,
}

/// Encodes a handle. `name` must be `Some` exactly for file_system handles.
pub fn encode(decoded: &Decoded) -> Vec<u8> {
    let meta = &decoded.meta;
    let name = decoded.name.as_deref().unwrap_or_default().as_bytes();
    let mut out = Vec::with_capacity(FIXED_LEN + name.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&HANDLE_VERSION.to_le_bytes());
    out.push(match meta.strategy {
        Strategy::FileSystem => KIND_FILE_SYSTEM,
        Strategy::FileDescriptor => KIND_FILE_DESCRIPTOR,
    });
    out.push(if decoded.in_flight.is_some() {
        FLAG_IN_FLIGHT
    } else {
        0
    });
    out.extend_from_slice(&(meta.data_len as u64).to_le_bytes());
    out.extend_from_slice(&(meta.capacity as u32).to_le_bytes());
    let (slot, word) = decoded
        .in_flight
        .map_or((0, 0), |f| (f.slot as u32, f.word));
    out.extend_from_slice(&slot.to_le_bytes());
    out.extend_from_slice(&word.to_le_bytes());
    out.extend_from_slice(&meta.key.creator.word().to_le_bytes());
    out.extend_from_slice(&meta.key.nonce.to_le_bytes());
    out.extend_from_slice(&meta.generation.to_le_bytes());
    out.extend_from_slice(&meta.share_key.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name);
    out
}

/// Decodes and validates a handle for a process of user `uid` (the checkers' form:
/// the library decodes with [`decode_asking`]).
#[cfg(any(test, feature = "checkers"))]
pub fn decode(bytes: &[u8], uid: u32) -> Result<Decoded> {
    decode_asking(bytes, || uid)
}

/// [`decode`], asking `uid` for this process's effective uid only when the handle
/// names a segment (a file_system handle's name must be of this user's namespace): a
/// file_descriptor handle is checked against its owner when its memfd is opened, so
/// decoding one costs no `geteuid`.
pub(crate) fn decode_asking(bytes: &[u8], uid: impl FnOnce() -> u32) -> Result<Decoded> {
    let malformed = |why: String| Error::Malformed {
        what: "share handle",
        why,
    };
    if bytes.len() < FIXED_LEN {
        return Err(malformed(format!(
            "{} bytes, a handle has at least {FIXED_LEN}",
            bytes.len()
        )));
    }
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
    if bytes[0..4] != MAGIC {
        return Err(malformed("not a shmrc share handle (bad magic)".into()));
    }
    let version = u16_at(4);
    if version != HANDLE_VERSION {
        return Err(Error::WrongVersion {
            segment: "share handle".into(),
            found: u64::from(version),
            supported: u64::from(HANDLE_VERSION),
        });
    }
    let strategy = match bytes[6] {
        KIND_FILE_SYSTEM => Strategy::FileSystem,
        KIND_FILE_DESCRIPTOR => Strategy::FileDescriptor,
        kind => return Err(malformed(format!("unknown kind {kind}"))),
    };
    let flags = bytes[7];
    if flags & !FLAG_IN_FLIGHT != 0 {
        return Err(malformed(format!("unknown flags {flags:#04x}")));
    }
    let data_len = u64_at(8);
    if data_len == 0 || data_len > MAX_DATA_LEN {
        return Err(malformed(format!("data length {data_len} out of range")));
    }
    let capacity = u32_at(16) as usize;
    let creator = Token::from_word(u64_at(32))
        .ok_or_else(|| malformed("creator is not a valid token".into()))?;
    let nonce = u128::from_le_bytes(bytes[40..56].try_into().unwrap_or([0; 16]));
    let generation = u64_at(56);
    let share_key = u64_at(64);
    let name_len = usize::from(u16_at(72));
    if bytes.len() != FIXED_LEN + name_len || name_len > MAX_NAME_LEN {
        return Err(malformed(format!(
            "name length {name_len} does not match the {} bytes received",
            bytes.len()
        )));
    }
    let in_flight = (flags & FLAG_IN_FLIGHT != 0).then(|| InFlight {
        slot: u32_at(20) as usize,
        word: u64_at(24),
    });
    let key = SegmentKey { creator, nonce };
    // A file_system segment has slots; a memfd has none unless a pool recycles it.
    let least = match strategy {
        Strategy::FileSystem => 1,
        Strategy::FileDescriptor => 0,
    };
    if capacity < least || capacity > MAX_CAPACITY {
        return Err(malformed(format!("slot capacity {capacity} out of range")));
    }
    if let Some(f) = in_flight {
        if f.slot >= capacity || !matches!(Slot::decode(f.word), Slot::InFlight(_)) {
            return Err(malformed(
                "in-flight reference is not a valid slot word".into(),
            ));
        }
    }
    let name = match strategy {
        Strategy::FileDescriptor => {
            if name_len != 0 {
                return Err(malformed("a file_descriptor handle has no name".into()));
            }
            None
        }
        Strategy::FileSystem => {
            let name = std::str::from_utf8(&bytes[FIXED_LEN..])
                .map_err(|_| malformed("name is not UTF-8".into()))?;
            let (_, parts) = Namespace::of_segment(name, uid())?;
            if parts.creator != creator || parts.nonce != nonce {
                return Err(malformed(
                    "name does not agree with the handle's creator and nonce".into(),
                ));
            }
            Some(name.to_owned())
        }
    };
    Ok(Decoded {
        meta: HandleMeta {
            strategy,
            key,
            data_len: data_len as usize,
            capacity,
            generation,
            share_key,
        },
        name,
        in_flight,
    })
}

/// What a handle points at.
pub(crate) enum Target<O: Os> {
    /// A named segment, with the in-flight reference this handle owns, if any.
    Named {
        name: String,
        in_flight: Option<InFlight>,
    },
    /// An open memfd, with the in-flight reference this handle owns if the memfd has
    /// holder slots (a pool's).
    Anonymous {
        file: O::File,
        in_flight: Option<InFlight>,
    },
    /// Consumed by an attach.
    Taken,
}

/// A buffer on its way to another process.
///
/// Obtain one with [`ShmBuf::share`](crate::ShmBuf::share); turn it into a buffer in
/// the receiving process with [`ShmBuf::attach`](crate::ShmBuf::attach); move it with
/// [`crate::transport`] or, for file_system handles, as bytes
/// ([`ShareHandle::into_bytes`], [`ShareHandle::from_bytes`]).
///
/// A file_system handle names the segment and carries an *in-flight reference*: a
/// holder slot the sender claimed for the receiver, so the buffer stays alive while
/// the handle travels even if the sender drops its own reference. The handle owns that
/// reference: attaching takes it over, dropping an unattached handle gives it back, and
/// [`ShareHandle::into_bytes`] hands it to whoever gets the bytes (if they are lost,
/// it is released when the sending process exits). A file_descriptor handle carries an
/// open memfd, so it can only travel over a Unix socket ([`crate::transport`]); the
/// handle of a pool's memfd (which has holder slots) carries an in-flight reference
/// too, owned the same way.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShareHandle, ShmBuf, Strategy};
///
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(Namespace::new("shmrc-doc-handle")?);
/// let buf = ShmBuf::with_options(256, &options)?;
/// let handle: ShareHandle = buf.share()?;
/// assert_eq!((handle.strategy(), handle.len()), (Strategy::FileSystem, 256));
/// let bytes = handle.into_bytes()?; // e.g. in a queue message or a pipe
///
/// // In the receiving process:
/// let received = ShmBuf::attach(ShareHandle::from_bytes(&bytes)?)?;
/// assert_eq!(received.name(), buf.name());
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct ShareHandle<O: Os = DefaultOs> {
    pub(crate) os: O,
    pub(crate) meta: HandleMeta,
    pub(crate) target: Target<O>,
}

impl<O: Os> ShareHandle<O> {
    /// The buffer's strategy: whether the handle can travel as bytes
    /// (file_system) or only over a Unix socket (file_descriptor).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// use shmrc::{CreateOptions, ShmBuf, Strategy};
    ///
    /// let buf = ShmBuf::with_options(64, &CreateOptions::new().strategy(Strategy::FileDescriptor))?;
    /// assert_eq!(buf.share()?.strategy(), Strategy::FileDescriptor);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn strategy(&self) -> Strategy {
        self.meta.strategy
    }

    /// The buffer's length in bytes, before it is attached.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// assert_eq!(buf.share()?.len(), 4096);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.meta.data_len
    }

    /// Whether the buffer is empty (never: buffers have at least one byte).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// assert!(!shmrc::ShmBuf::new(1)?.share()?.is_empty());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.meta.data_len == 0
    }

    /// The segment's name (file_system handles; `None` for file_descriptor ones).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-handle-name")?);
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// assert_eq!(buf.share()?.name(), buf.name());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn name(&self) -> Option<&str> {
        match &self.target {
            Target::Named { name, .. } => Some(name),
            Target::Anonymous { .. } | Target::Taken => None,
        }
    }

    /// Takes the target out (an attach consumes it); the handle then owns nothing.
    pub(crate) fn take_target(&mut self) -> Target<O> {
        std::mem::replace(&mut self.target, Target::Taken)
    }

    /// The encoding of this handle, without giving up its in-flight reference.
    pub(crate) fn encoded(&self) -> Vec<u8> {
        let (name, in_flight) = match &self.target {
            Target::Named { name, in_flight } => (Some(name.clone()), *in_flight),
            Target::Anonymous { in_flight, .. } => (None, *in_flight),
            Target::Taken => (None, None),
        };
        encode(&Decoded {
            meta: self.meta,
            name,
            in_flight,
        })
    }

    /// Hands the in-flight reference to whoever receives the bytes: from now on it is
    /// released by the receiver's handle, or when this (sending) process exits.
    pub(crate) fn disarm(&mut self) {
        if let Some(in_flight) = self.target.in_flight_mut() {
            *in_flight = None;
        }
    }

    /// The bytes of a file_system handle, to send by any means; the in-flight reference
    /// travels with them (if the bytes are lost, it is released when this process
    /// exits). A file_descriptor handle is [`Error::WrongStrategy`]: its descriptor must
    /// travel over a Unix socket ([`crate::transport::send`]).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
    ///
    /// let named = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-into-bytes")?);
    /// let buf = ShmBuf::with_options(64, &named)?;
    /// let bytes = buf.share()?.into_bytes()?;
    /// let again = ShmBuf::attach(ShareHandle::from_bytes(&bytes)?)?;
    /// assert_eq!(again.len(), 64);
    ///
    /// let anonymous = ShmBuf::with_options(64, &CreateOptions::new().strategy(Strategy::FileDescriptor))?;
    /// assert!(matches!(anonymous.share()?.into_bytes(), Err(Error::WrongStrategy { .. })));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn into_bytes(mut self) -> Result<Vec<u8>> {
        if self.meta.strategy != Strategy::FileSystem {
            return Err(Error::WrongStrategy {
                op: "encoding a handle as bytes",
                strategy: self.meta.strategy,
            });
        }
        let bytes = self.encoded();
        self.disarm();
        Ok(bytes)
    }

    /// A handle decoded from bytes made by [`ShareHandle::into_bytes`] in another
    /// process of this user; it owns the in-flight reference they carry.
    pub(crate) fn from_bytes_with(os: &O, bytes: &[u8]) -> Result<ShareHandle<O>> {
        let decoded = decode_asking(bytes, || os.uid())?;
        match decoded.name {
            Some(name) => Ok(ShareHandle {
                os: os.clone(),
                meta: decoded.meta,
                target: Target::Named {
                    name,
                    in_flight: decoded.in_flight,
                },
            }),
            None => Err(Error::WrongStrategy {
                op: "decoding a handle from bytes alone",
                strategy: decoded.meta.strategy,
            }),
        }
    }

    /// Gives the in-flight reference back (best effort; the sender's exit releases it
    /// otherwise): a named segment is finalized if that was its last reference; a
    /// memfd's slot is only vacated (the kernel frees the memfd with its last
    /// descriptor).
    fn cancel_in_flight(&mut self) -> Result<()> {
        // Asked only when there is a reference to give back (`geteuid` is a system call,
        // and every attach drops its spent handle).
        let (opened, name, f) = match &mut self.target {
            Target::Named { name, in_flight } => {
                let Some(f) = in_flight.take() else {
                    return Ok(());
                };
                let me = self.os.uid();
                let (ns, _) = Namespace::of_segment(name, me)?;
                let opened = segment::open_named(&self.os, &ns, name, me)?;
                (opened, Some(name.as_str()), f)
            }
            Target::Anonymous { file, in_flight } => {
                let Some(f) = in_flight.take() else {
                    return Ok(());
                };
                let me = self.os.uid();
                (segment::open_file(&self.os, file, "memfd", me)?, None, f)
            }
            Target::Taken => return Ok(()),
        };
        // Bytes that do not describe this segment, share key included (forged from a
        // listing, or damaged), give back nothing: the reference is someone else's.
        // (Planted bug `share_key_unchecked`: the key is not compared.)
        let key_differs = opened.fields.share_key != self.meta.share_key
            && !cfg!(shmrc_plant = "share_key_unchecked");
        if opened.fields.key() != self.meta.key || key_differs {
            return Ok(());
        }
        if let Some(header) = Header::of(&opened.map, opened.fields.layout.capacity) {
            let h = header.holders();
            let generation = self.meta.generation;
            let vacated = holders::give_back_in_flight(&self.os, &h, f.slot, f.word, generation)?;
            if let (true, Some(name)) = (vacated, name) {
                holders::finalize(&self.os, &h, name, holders::Reclaim::UntilLive)?;
            }
        }
        Ok(())
    }
}

impl<O: Os> Target<O> {
    /// The in-flight reference this target owns (`None` inside: none, or given up).
    pub(crate) fn in_flight_mut(&mut self) -> Option<&mut Option<InFlight>> {
        match self {
            Target::Named { in_flight, .. } | Target::Anonymous { in_flight, .. } => {
                Some(in_flight)
            }
            Target::Taken => None,
        }
    }
}

impl<O: Os> Drop for ShareHandle<O> {
    fn drop(&mut self) {
        // Nothing to report to: a segment already gone has nothing to give back.
        let _ = self.cancel_in_flight();
    }
}

impl<O: Os> fmt::Debug for ShareHandle<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ShareHandle");
        d.field("strategy", &self.meta.strategy)
            .field("len", &self.meta.data_len);
        match &self.target {
            Target::Named { name, in_flight } => {
                d.field("name", name).field("in_flight", in_flight)
            }
            Target::Anonymous { file, in_flight } => {
                d.field("file", file).field("in_flight", in_flight)
            }
            Target::Taken => d.field("taken", &true),
        };
        d.finish()
    }
}

// The default OS's constructors, beside the generic type.
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
impl ShareHandle {
    /// Decodes a handle made by [`ShareHandle::into_bytes`] in another process of this
    /// user; it owns the in-flight reference the bytes carry (attach it, or drop it to
    /// give the reference back). Bytes that are no handle are [`Error::Malformed`]; a
    /// name outside this user's shmrc namespaces is [`Error::OutsideNamespace`]; nothing
    /// is opened before those checks.
    ///
    /// [`Error::Malformed`]: crate::Error::Malformed
    /// [`Error::OutsideNamespace`]: crate::Error::OutsideNamespace
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-from-bytes")?);
    /// let buf = ShmBuf::with_options(64, &options)?;
    /// let bytes = buf.share()?.into_bytes()?;
    ///
    /// let handle = ShareHandle::from_bytes(&bytes)?;
    /// assert_eq!(handle.name(), buf.name());
    /// let attached = ShmBuf::attach(handle)?;
    /// assert_eq!(attached.len(), 64);
    /// assert!(matches!(ShareHandle::from_bytes(b"not a handle"), Err(Error::Malformed { .. })));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<ShareHandle> {
        ShareHandle::from_bytes_with(&DefaultOs::default(), bytes)
    }
}

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
impl ShareHandle {
    /// Splits a file_descriptor handle into its description (bytes) and its memfd, for
    /// a channel of your own that passes descriptors (Python's `multiprocessing`
    /// reduction does, for the Python package); [`ShareHandle::from_fd_parts`] puts them
    /// together again in the receiving process. A file_system handle is
    /// [`Error::WrongStrategy`]: it travels as bytes alone ([`ShareHandle::into_bytes`]).
    /// The handle of a pool's memfd hands its in-flight reference to the bytes, as
    /// [`ShareHandle::into_bytes`] does: if they are lost unattached, the reference
    /// stays until this process exits (the pool gives the buffer back at its idle
    /// timeout).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// use shmrc::{CreateOptions, ShareHandle, ShmBuf, Strategy};
    ///
    /// let buf = ShmBuf::with_options(64, &CreateOptions::new().strategy(Strategy::FileDescriptor))?;
    /// buf.write_at(0, b"fd parts")?;
    /// let (bytes, fd) = buf.share()?.into_fd_parts()?;
    /// // ... bytes and fd travel to another process, e.g. with SCM_RIGHTS ...
    /// let received = ShmBuf::attach(ShareHandle::from_fd_parts(&bytes, fd)?)?;
    /// let mut out = [0u8; 8];
    /// received.read_at(0, &mut out)?;
    /// assert_eq!(&out, b"fd parts");
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn into_fd_parts(mut self) -> Result<(Vec<u8>, OwnedFd)> {
        let bytes = self.encoded();
        match self.take_target() {
            // The in-flight reference (a pool's memfd) travels with the bytes.
            Target::Anonymous { file, .. } => Ok((bytes, file.into_inner())),
            target => {
                self.target = target;
                Err(Error::WrongStrategy {
                    op: "splitting a handle into bytes and a descriptor",
                    strategy: self.strategy(),
                })
            }
        }
    }

    /// A file_descriptor handle from the parts [`ShareHandle::into_fd_parts`] made in
    /// another process of this user. Bytes that are no handle are
    /// [`Error::Malformed`]; a file_system handle's bytes are [`Error::WrongStrategy`]
    /// (use [`ShareHandle::from_bytes`]). Whether `fd` is the memfd the bytes describe
    /// is checked when the handle is attached.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};
    ///
    /// let fd = std::fs::File::open("/dev/null").unwrap().into();
    /// assert!(matches!(ShareHandle::from_fd_parts(b"junk", fd), Err(Error::Malformed { .. })));
    ///
    /// let named = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-fd-parts")?);
    /// let bytes = ShmBuf::with_options(64, &named)?.share()?.into_bytes()?;
    /// let fd = std::fs::File::open("/dev/null").unwrap().into();
    /// assert!(matches!(ShareHandle::from_fd_parts(&bytes, fd), Err(Error::WrongStrategy { .. })));
    /// # ShareHandle::from_bytes(&bytes)?; // gives the in-flight reference back
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn from_fd_parts(bytes: &[u8], fd: OwnedFd) -> Result<ShareHandle> {
        let os = DefaultOs::default();
        let decoded = decode_asking(bytes, || os.uid())?;
        if decoded.meta.strategy != Strategy::FileDescriptor || decoded.name.is_some() {
            // A file_system handle's bytes still carry their in-flight reference: the
            // caller can pass them to `from_bytes`.
            return Err(Error::WrongStrategy {
                op: "joining bytes and a descriptor into a handle",
                strategy: decoded.meta.strategy,
            });
        }
        Ok(ShareHandle {
            os,
            meta: decoded.meta,
            target: Target::Anonymous {
                file: PosixFile::from(fd),
                in_flight: decoded.in_flight,
            },
        })
    }
}

/// [`ShareHandle`]'s methods for the checkers' seam (feature `checkers`, not API):
/// `shmrc::checkers::handle::ShareHandleExt`.
#[cfg(feature = "checkers")]
pub trait ShareHandleExt<O: Os>: Sized {
    /// The segment's identity.
    fn key(&self) -> SegmentKey;
    /// A handle decoded from bytes made by [`ShareHandle::into_bytes`] in another
    /// process of this user, as process `os`; it owns the in-flight reference they carry.
    fn from_bytes_with(os: &O, bytes: &[u8]) -> Result<Self>;
}

#[cfg(feature = "checkers")]
impl<O: Os> ShareHandleExt<O> for ShareHandle<O> {
    fn key(&self) -> SegmentKey {
        self.meta.key
    }

    fn from_bytes_with(os: &O, bytes: &[u8]) -> Result<ShareHandle<O>> {
        ShareHandle::from_bytes_with(os, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Decoded {
        let creator = Token::new(321, 654).unwrap();
        let ns = Namespace::new("shmrc-h").unwrap();
        Decoded {
            meta: HandleMeta {
                strategy: Strategy::FileSystem,
                key: SegmentKey { creator, nonce: 77 },
                data_len: 4096,
                capacity: 8,
                generation: 5,
                share_key: 0x5eed,
            },
            name: Some(ns.segment_name(1000, 1, creator, 77)),
            in_flight: Some(InFlight {
                slot: 3,
                word: holders::in_flight_word(Token::new(999, 1).unwrap()),
            }),
        }
    }

    #[test]
    fn a_handle_round_trips() {
        let d = sample();
        assert_eq!(decode(&encode(&d), 1000).unwrap(), d);
    }

    #[test]
    fn the_uid_is_asked_only_for_a_named_handle_and_then_once() {
        let asked = std::cell::Cell::new(0);
        let ask = |uid: u32| {
            let asked = &asked;
            move || {
                asked.set(asked.get() + 1);
                uid
            }
        };
        let mut fd = sample();
        fd.meta.strategy = Strategy::FileDescriptor;
        fd.name = None;
        assert_eq!(decode_asking(&encode(&fd), ask(1000)).unwrap(), fd);
        assert_eq!(
            asked.get(),
            0,
            "a file_descriptor handle has no name to check"
        );
        assert_eq!(
            decode_asking(&encode(&sample()), ask(1000)).unwrap(),
            sample()
        );
        assert_eq!(asked.get(), 1);
        // The answer is used: the name is of user 1000's namespace, not 1001's.
        assert!(decode_asking(&encode(&sample()), ask(1001)).is_err());
        assert_eq!(asked.get(), 2);
    }

    #[test]
    fn every_truncation_of_a_handle_is_refused() {
        let bytes = encode(&sample());
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len], 1000).is_err(), "{len}");
        }
    }

    fn refused_as(bytes: &[u8], why: &str) -> bool {
        matches!(decode(bytes, 1000), Err(Error::Malformed { why: w, .. }) if w.contains(why))
    }

    /// Each bound of the decoder at its edge, alone: the value just inside is accepted
    /// (or refused for another reason), the one just outside is refused for this one.
    #[test]
    fn every_bound_is_checked_at_its_edge_and_alone() {
        let with_meta = |f: &dyn Fn(&mut Decoded)| {
            let mut d = sample();
            f(&mut d);
            encode(&d)
        };
        // Data length: 0 and MAX + 1 out, MAX in.
        assert!(refused_as(
            &with_meta(&|d| d.meta.data_len = 0),
            "data length"
        ));
        let max = MAX_DATA_LEN as usize;
        assert!(decode(&with_meta(&|d| d.meta.data_len = max), 1000).is_ok());
        assert!(refused_as(
            &with_meta(&|d| d.meta.data_len = max + 1),
            "data length"
        ));
        // Slot capacity of a file_system handle: 0 and MAX + 1 out, MAX in.
        assert!(refused_as(
            &with_meta(&|d| d.meta.capacity = 0),
            "slot capacity"
        ));
        let cap = MAX_CAPACITY;
        assert!(decode(&with_meta(&|d| d.meta.capacity = cap), 1000).is_ok());
        assert!(refused_as(
            &with_meta(&|d| d.meta.capacity = cap + 1),
            "slot capacity"
        ));
        // A file_descriptor handle: no name; slots (a pool's memfd) 0 to MAX; an
        // in-flight reference only in a slot it has.
        let fd = |capacity: usize, name: Option<String>, in_flight: Option<InFlight>| {
            let mut d = sample();
            d.meta.strategy = Strategy::FileDescriptor;
            (d.meta.capacity, d.name, d.in_flight) = (capacity, name, in_flight);
            encode(&d)
        };
        let in_slot = |slot: usize| sample().in_flight.map(|f| InFlight { slot, ..f });
        assert!(decode(&fd(0, None, None), 1000).is_ok());
        assert!(decode(&fd(1, None, in_slot(0)), 1000).is_ok());
        assert!(decode(&fd(cap, None, in_slot(cap - 1)), 1000).is_ok());
        assert!(refused_as(&fd(cap + 1, None, None), "slot capacity"));
        assert!(refused_as(&fd(1, None, in_slot(1)), "in-flight reference"));
        assert!(refused_as(&fd(0, None, in_slot(0)), "in-flight reference"));
        assert!(refused_as(
            &fd(0, sample().name, None),
            "file_descriptor handle has no name"
        ));
        // The name's length: longer than MAX_NAME_LEN, though the bytes agree, is
        // refused for its length; MAX_NAME_LEN itself gets as far as the name's parse.
        let named = |len: usize| {
            let mut b = encode(&sample());
            b.truncate(FIXED_LEN);
            b[72..74].copy_from_slice(&(len as u16).to_le_bytes());
            b.extend(std::iter::repeat_n(b'a', len));
            b
        };
        assert!(refused_as(&named(MAX_NAME_LEN + 1), "name length"));
        assert!(matches!(
            decode(&named(MAX_NAME_LEN), 1000),
            Err(Error::OutsideNamespace { .. })
        ));
        // A name length that disagrees with the bytes received, alone.
        let mut short = named(10);
        short.pop();
        assert!(refused_as(&short, "name length"));
    }

    #[test]
    fn forged_fields_are_refused_with_their_cause() {
        let bytes = encode(&sample());
        let with = |at: usize, v: u8| {
            let mut b = bytes.clone();
            b[at] = v;
            decode(&b, 1000)
        };
        assert!(matches!(with(0, b'X'), Err(Error::Malformed { .. })));
        assert!(matches!(
            with(4, 9),
            Err(Error::WrongVersion { found: 9, .. })
        ));
        assert!(matches!(with(6, 7), Err(Error::Malformed { .. })));
        assert!(matches!(with(7, 0x80), Err(Error::Malformed { .. })));
        assert!(
            matches!(with(20, 8), Err(Error::Malformed { .. })),
            "slot >= capacity"
        );
        assert!(
            matches!(with(45, 1), Err(Error::Malformed { .. })),
            "nonce differs from name"
        );
        assert!(matches!(
            decode(&bytes, 1001),
            Err(Error::OutsideNamespace { .. })
        ));
        let mut other_ns = sample();
        other_ns.name = Some(other_ns.name.unwrap().replace("shmrc-h", "torch-h"));
        assert!(matches!(
            decode(&encode(&other_ns), 1000),
            Err(Error::OutsideNamespace { .. })
        ));
    }
}
