//! Frozen buffers: a file_descriptor buffer sealed against writes for good
//! ([`ShmBuf::freeze`], [`ShmBufMut::freeze`]), read by every holder as a plain
//! `&[u8]` or `&[T]` with no `unsafe` ([`FrozenBuf`]).
//!
//! Why it is sound: freezing unmaps the creator's writable mapping and adds
//! `F_SEAL_WRITE` (with `F_SEAL_SHRINK`, `F_SEAL_GROW` and `F_SEAL_SEAL`) to the memfd.
//! The kernel refuses that seal while any process has a writable mapping of the file,
//! and once it is set no process can map it writable, `write(2)` it, punch holes in it
//! or shrink it. A receiver checks the seals itself (`F_GET_SEALS`) before it maps the
//! file read-only ([`FrozenBuf::attach`]), so a sender cannot pass off a writable file
//! as frozen. The bytes can then never change while a `FrozenBuf` lives, which is what
//! `&[u8]` needs.
//!
//! Frozen buffers exist on the real kernel only (the simulated kernel models no write
//! seals), for the file_descriptor strategy only (named segments in `/dev/shm` cannot
//! be sealed). Their lifetime is the kernel's: the memfd goes when the last descriptor
//! and mapping of it close, SIGKILL included; no holder slots, nothing to sweep.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use bytemuck::Pod;

use super::{ShmBuf, view};
use crate::error::{Error, Result};
use crate::handle::{HandleMeta, ShareHandle, Target};
use crate::manager::DefaultOs;
use crate::os::Os;
use crate::os::posix::{PosixFile, PosixOs, SealedMap};
use crate::protocol::attach::Expect;
use crate::protocol::segment::{self, Fields};
use crate::strategy::Strategy;

/// A buffer sealed against writes: every holder reads it as `&[u8]`
/// (`Deref<Target = [u8]>`) or as `&[T]` ([`FrozenBuf::cast`]) without `unsafe`,
/// because no process can change its bytes any more (see [`ShmBuf::freeze`]).
///
/// Cloning is cheap (an `Arc`). It travels like a file_descriptor buffer:
/// [`FrozenBuf::share`] makes a handle to send with
/// [`transport::send`](crate::transport::send) (or inside a
/// `shmrc::channel` message), and the receiver calls [`FrozenBuf::attach`]. The memfd
/// goes when its last holder closes it, killed or not.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{FrozenBuf, ShmBufMut, transport};
/// use std::os::unix::net::UnixStream;
///
/// let mut batch = ShmBufMut::new(4 * 1024)?; // exclusive: nobody else has it yet
/// batch.cast_mut::<f32>()?.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32);
/// let frozen: FrozenBuf = batch.freeze()?; // sealed: read-only for everyone, for good
///
/// let (a, b) = UnixStream::pair().unwrap();
/// transport::send(&a, b"batch 0", vec![frozen.share()?])?;
/// // in the receiving process:
/// let mut message = transport::recv(&b)?;
/// let received = FrozenBuf::attach(message.handles.remove(0))?;
/// let floats: &[f32] = received.cast()?; // no unsafe: the kernel forbids writes
/// assert_eq!((floats.len(), floats[3]), (1024, 3.0));
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Clone)]
pub struct FrozenBuf {
    inner: Arc<Frozen>,
}

struct Frozen {
    file: PosixFile,
    map: SealedMap,
    fields: Fields,
}

/// A failed freeze: why ([`FreezeError::error`], an [`Error::CannotFreeze`] or a system
/// error), and the buffer, unchanged, when it could be kept ([`FreezeError::into_buf`]).
/// `?` turns it into its [`Error`] (dropping the buffer).
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{Error, ShmBuf};
///
/// let buf = ShmBuf::new(64)?;
/// let clone = buf.clone(); // a second reference in this process: cannot seal
/// let failed = buf.freeze().unwrap_err();
/// assert!(matches!(failed.error(), Error::CannotFreeze { .. }));
/// let buf = failed.into_buf().expect("handed back");
/// drop(clone);
/// let frozen = buf.freeze()?; // now it is the only one
/// assert_eq!(frozen.len(), 64);
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct FreezeError {
    error: Error,
    buf: Option<ShmBuf>,
}

impl FreezeError {
    /// Why the freeze failed.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Error, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-freeze-error")?);
    /// let named = ShmBuf::with_options(64, &options)?;
    /// let failed = named.freeze().unwrap_err();
    /// assert!(failed.error().to_string().contains("named segments cannot be sealed"));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The buffer, unchanged (still writable, still held), unless re-holding it after
    /// a refused seal failed too (then [`FreezeError::error`] says why).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBuf::new(16)?;
    /// let _other = buf.clone();
    /// let back = buf.freeze().unwrap_err().into_buf().unwrap();
    /// back.write_at(0, b"still writable")?;
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn into_buf(self) -> Option<ShmBuf> {
        self.buf
    }
}

impl fmt::Debug for FreezeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreezeError")
            .field("error", &self.error)
            .field("buf", &self.buf)
            .finish()
    }
}

impl fmt::Display for FreezeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for FreezeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<FreezeError> for Error {
    fn from(e: FreezeError) -> Error {
        e.error
    }
}

fn cannot(buf: ShmBuf, why: &str) -> FreezeError {
    FreezeError {
        error: Error::CannotFreeze {
            segment: describe(&buf),
            why: why.to_owned(),
        },
        buf: Some(buf),
    }
}

fn describe(buf: &ShmBuf) -> String {
    buf.name().map_or_else(|| "memfd".to_owned(), str::to_owned)
}

impl ShmBuf {
    /// Seals this file_descriptor buffer against writes for good and returns it as a
    /// [`FrozenBuf`] that every holder reads without `unsafe`. Write the data first
    /// (with [`ShmBuf::write_at`], or through a [`ShmBufMut`](crate::ShmBufMut)); freeze
    /// before sharing.
    ///
    /// Refused with [`Error::CannotFreeze`], the buffer handed back in the
    /// [`FreezeError`], when it is a file_system buffer, another clone of it lives in
    /// this process, this process does not hold it (a forked child), or another
    /// process still maps it writable (it was shared and attached as a `ShmBuf`).
    /// Handles made before the freeze stay valid: attached as a [`FrozenBuf`] they
    /// see the frozen bytes.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBuf::new(8)?;
    /// buf.write_at(0, b"constant")?;
    /// let frozen = buf.freeze()?;
    /// assert_eq!(&frozen[..], b"constant");
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn freeze(self) -> std::result::Result<FrozenBuf, FreezeError> {
        if self.strategy() != Strategy::FileDescriptor {
            return Err(cannot(
                self,
                "it is a file_system buffer: named segments cannot be sealed (create it with Strategy::FileDescriptor)",
            ));
        }
        if self.fields().layout.capacity > 0 {
            return Err(cannot(
                self,
                "it is a pool's buffer: the pool recycles its memfd, so it cannot be sealed",
            ));
        }
        if !self.is_held() {
            return Err(cannot(
                self,
                "this process does not hold it (inherited across fork)",
            ));
        }
        if !self.is_only_clone() {
            return Err(cannot(
                self,
                "another clone of it lives in this process: drop the clones first",
            ));
        }
        let os = *self.os();
        let Some(file) = self.anonymous_file() else {
            return Err(cannot(self, "it has no memfd"));
        };
        let file = match os.dup(file) {
            Ok(file) => file,
            Err(error) => {
                return Err(FreezeError {
                    error,
                    buf: Some(self),
                });
            }
        };
        let total = self.fields().layout.total_len();
        // Our own writable mapping must go before the kernel accepts the seal.
        drop(self);
        let sealed = PosixOs::new()
            .seal_writes(&file, "memfd")
            .and_then(|()| map_frozen(&os, &file, total));
        match sealed {
            Ok((map, fields)) => Ok(FrozenBuf {
                inner: Arc::new(Frozen { file, map, fields }),
            }),
            Err(error) => {
                // Nothing was sealed (or the sealed file could not be mapped): hold
                // the buffer again, writable as before.
                match ShmBuf::adopt_anonymous(&os, file, "memfd") {
                    Ok(buf) => Err(FreezeError {
                        error,
                        buf: Some(buf),
                    }),
                    Err(_) => Err(FreezeError { error, buf: None }),
                }
            }
        }
    }
}

/// Maps a write-sealed memfd read-only and validates its header.
fn map_frozen(os: &DefaultOs, file: &PosixFile, total: usize) -> Result<(SealedMap, Fields)> {
    let segment = "frozen memfd";
    let info = os.stat(file)?;
    let me = os.uid();
    if info.uid != me {
        return Err(Error::OtherUser {
            segment: segment.into(),
            owner: info.uid,
            me,
        });
    }
    let len = usize::try_from(info.len).unwrap_or(usize::MAX).min(total);
    if len == 0 {
        return Err(Error::HalfCreated {
            segment: segment.into(),
        });
    }
    let map = PosixOs::new()
        .map_sealed(file, len)?
        .ok_or(Error::NotFrozen {
            segment: segment.into(),
            why: "the memfd is not sealed against writes",
        })?;
    let fields = segment::validate(os, &map, &info, segment, me)?;
    if fields.layout.capacity != 0 || fields.layout.total_len() > map.bytes().len() {
        return Err(Error::Corrupted {
            segment: segment.into(),
            what: "a frozen memfd's header must describe a file_descriptor segment inside it"
                .into(),
        });
    }
    Ok((map, fields))
}

impl FrozenBuf {
    /// Attaches a handle to a frozen buffer (made by [`FrozenBuf::share`] in another
    /// process, or by [`ShmBuf::share`] before that buffer was frozen). The seals are
    /// checked here: a handle whose memfd is not sealed against writes, or a
    /// file_system handle, is [`Error::NotFrozen`] (attach it as a
    /// [`ShmBuf`] instead); a damaged header is the usual [`Error`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{Error, FrozenBuf, ShmBuf};
    ///
    /// let writable = ShmBuf::new(64)?;
    /// let not_frozen = FrozenBuf::attach(writable.share()?);
    /// assert!(matches!(not_frozen, Err(Error::NotFrozen { .. })));
    ///
    /// let frozen = writable.freeze()?;
    /// let again = FrozenBuf::attach(frozen.share()?)?;
    /// assert_eq!(again.len(), 64);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn attach(mut handle: ShareHandle) -> Result<FrozenBuf> {
        let meta = handle.meta;
        let os = handle.os;
        match handle.take_target() {
            Target::Anonymous {
                file,
                in_flight: in_flight @ Some(_),
            } => {
                // Give the in-flight reference back when the handle drops.
                handle.target = Target::Anonymous { file, in_flight };
                Err(Error::NotFrozen {
                    segment: "pooled memfd".into(),
                    why: "a pool's buffers are recycled, never frozen",
                })
            }
            Target::Anonymous {
                file,
                in_flight: None,
            } => {
                let (map, fields) = map_frozen(&os, &file, usize::MAX)?;
                Expect::Handle(meta.expected()).check(&fields, "frozen memfd")?;
                Ok(FrozenBuf {
                    inner: Arc::new(Frozen { file, map, fields }),
                })
            }
            Target::Named { name, in_flight } => {
                // Give the in-flight reference back when the handle drops.
                handle.target = Target::Named { name, in_flight };
                Err(Error::NotFrozen {
                    segment: handle.name().unwrap_or("file_system segment").to_owned(),
                    why: "file_system buffers cannot be frozen",
                })
            }
            Target::Taken => Err(Error::InvalidArgument(
                "this handle was already attached".into(),
            )),
        }
    }

    /// A handle to this buffer for another process (its memfd, duplicated): send it
    /// with [`transport::send`](crate::transport::send); the receiver calls
    /// [`FrozenBuf::attach`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let frozen = shmrc::ShmBuf::new(32)?.freeze()?;
    /// let handle = frozen.share()?;
    /// assert_eq!((handle.len(), handle.strategy()), (32, shmrc::Strategy::FileDescriptor));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn share(&self) -> Result<ShareHandle> {
        let os = DefaultOs::default();
        let fields = &self.inner.fields;
        Ok(ShareHandle {
            meta: HandleMeta {
                strategy: Strategy::FileDescriptor,
                key: fields.key(),
                data_len: fields.layout.data_len,
                capacity: 0,
                // A sealed memfd is never recycled: always its first use.
                generation: 0,
                share_key: fields.share_key,
            },
            target: Target::Anonymous {
                file: os.dup(&self.inner.file)?,
                in_flight: None,
            },
            os,
        })
    }

    /// Length of the data in bytes.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// assert_eq!(shmrc::ShmBuf::new(100)?.freeze()?.len(), 100);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.inner.fields.layout.data_len
    }

    /// Whether the buffer is empty (never: buffers have at least one byte).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// assert!(!shmrc::ShmBuf::new(1)?.freeze()?.is_empty());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data as bytes (also what `Deref` gives).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBuf::new(4)?;
    /// buf.write_at(0, b"abcd")?;
    /// assert_eq!(buf.freeze()?.as_bytes(), b"abcd");
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn as_bytes(&self) -> &[u8] {
        let layout = self.inner.fields.layout;
        &self.inner.map.bytes()[layout.data_offset..layout.total_len()]
    }

    /// The whole buffer as `&[T]`. The data starts 64-byte aligned, so this fails
    /// ([`Error::BadView`]) only when the length is not a multiple of `size_of::<T>()`
    /// (or `T` needs more than 64-byte alignment).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBuf::new(8)?;
    /// buf.write_items(0, &[1.5f32, -2.0])?;
    /// let frozen = buf.freeze()?;
    /// assert_eq!(frozen.cast::<f32>()?, [1.5, -2.0]);
    /// assert!(matches!(frozen.cast::<[u8; 3]>(), Err(shmrc::Error::BadView { .. })));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn cast<T: Pod>(&self) -> Result<&[T]> {
        view::cast_all(self.as_bytes())
    }

    /// As many whole `T`s as fit, from the start (the tail shorter than a `T` left out).
    #[cfg_attr(not(feature = "ndarray"), allow(dead_code))]
    pub(crate) fn cast_prefix<T: Pod>(&self) -> Result<&[T]> {
        let whole = self.len() / size_of::<T>().max(1);
        self.items(0, whole)
    }

    /// Items `first..first + count` as `&[T]` (a sub-range counted in `T`s); outside
    /// the buffer is [`Error::BadView`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBuf::new(64)?;
    /// buf.write_items(0, &(0..16u32).collect::<Vec<_>>())?;
    /// let frozen = buf.freeze()?;
    /// assert_eq!(frozen.items::<u32>(4, 3)?, [4, 5, 6]);
    /// assert!(frozen.items::<u32>(15, 2).is_err());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn items<T: Pod>(&self, first: usize, count: usize) -> Result<&[T]> {
        view::cast_items(self.as_bytes(), first, count)
    }
}

impl Deref for FrozenBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for FrozenBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for FrozenBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenBuf")
            .field("file", &self.inner.file)
            .field("len", &self.len())
            .finish()
    }
}
