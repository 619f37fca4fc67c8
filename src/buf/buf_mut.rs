//! [`ShmBufMut`]: a buffer that only its creator can reach yet, written through a plain
//! `&mut [u8]` (or `&mut [T]`) with no `unsafe`, then frozen or shared.
//!
//! # Safety
//! The one `unsafe` block turns the buffer's data region into a slice. It is sound
//! because a `ShmBufMut` is the only way to the segment it created: it is not `Clone`,
//! it never hands out its inner [`ShmBuf`] by reference, and it makes no handle, so no
//! other reference exists in this process and no other process has mapped the segment
//! (a file_descriptor memfd has not left this process; a file_system segment's name is
//! known to nobody it was given to). `&self`/`&mut self` then give exactly the aliasing
//! Rust needs. Out of scope, as everywhere in shmrc: another process of the same user
//! that opens the name in `/dev/shm` on its own, and a child forked while a
//! `ShmBufMut` lives (`fork` is `unsafe`; such a child must not use the inherited value).
#![allow(unsafe_code)]

use std::fmt;
use std::ops::{Deref, DerefMut};

use bytemuck::Pod;

use super::frozen::{FreezeError, FrozenBuf};
use super::view;
use crate::buf::{CreateOptions, ShmBuf};
use crate::error::Result;
use crate::strategy::Strategy;

/// A freshly created buffer that nobody else can reach yet: write it through
/// `&mut [u8]` (`DerefMut`) or `&mut [T]` ([`ShmBufMut::cast_mut`]), zero-copy and
/// without `unsafe`, then [`freeze`](ShmBufMut::freeze) it (read-only for everyone,
/// file_descriptor) or [`share`](ShmBufMut::into_shared) it as an ordinary [`ShmBuf`].
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::ShmBufMut;
///
/// let mut buf = ShmBufMut::new(16)?;
/// buf[..5].copy_from_slice(b"hello");
/// buf.cast_mut::<u32>()?[3] = 7;
/// let shared = buf.into_shared(); // now other processes may get it: no more &mut
/// let mut out = [0u8; 4];
/// shared.read_at(12, &mut out)?;
/// assert_eq!(u32::from_ne_bytes(out), 7);
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct ShmBufMut {
    buf: ShmBuf,
}

impl ShmBufMut {
    /// Creates a zero-filled file_descriptor buffer of `len` bytes (the strategy that
    /// can be frozen). `len` of 0 is [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBufMut::new(4096)?;
    /// assert_eq!(buf.len(), 4096);
    /// assert!(buf.iter().all(|&b| b == 0));
    /// assert!(shmrc::ShmBufMut::new(0).is_err());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(len: usize) -> Result<ShmBufMut> {
        ShmBufMut::with_options(
            len,
            &CreateOptions::new().strategy(Strategy::FileDescriptor),
        )
    }

    /// Creates a zero-filled buffer as `options` say (a file_system one can be shared
    /// but not frozen).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBufMut, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-bufmut")?);
    /// let mut buf = ShmBufMut::with_options(8, &options)?;
    /// buf.copy_from_slice(b"12345678");
    /// let shared = buf.into_shared();
    /// assert!(shared.name().is_some());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn with_options(len: usize, options: &CreateOptions) -> Result<ShmBufMut> {
        Ok(ShmBufMut {
            buf: ShmBuf::with_options(len, options)?,
        })
    }

    /// The whole buffer as `&mut [T]`: fails ([`Error::BadView`](crate::Error::BadView))
    /// only when the length is not a multiple of `size_of::<T>()`.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let mut buf = shmrc::ShmBufMut::new(12)?;
    /// buf.cast_mut::<f32>()?.copy_from_slice(&[1.0, 2.0, 3.0]);
    /// assert_eq!(buf.cast::<f32>()?, [1.0, 2.0, 3.0]);
    /// assert!(buf.cast_mut::<f64>().is_err()); // 12 bytes are not whole f64s
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn cast_mut<T: Pod>(&mut self) -> Result<&mut [T]> {
        view::cast_all_mut(self)
    }

    /// The whole buffer as `&[T]` (see [`ShmBufMut::cast_mut`]).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBufMut::new(16)?;
    /// assert_eq!(buf.cast::<u64>()?, [0, 0]);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn cast<T: Pod>(&self) -> Result<&[T]> {
        view::cast_all(self)
    }

    /// Items `first..first + count` as `&mut [T]`; outside the buffer is
    /// [`Error::BadView`](crate::Error::BadView).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let mut buf = shmrc::ShmBufMut::new(40)?;
    /// buf.items_mut::<u32>(8, 2)?.copy_from_slice(&[8, 9]);
    /// assert_eq!(buf.cast::<u32>()?[8..], [8, 9]);
    /// assert!(buf.items_mut::<u32>(9, 2).is_err());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn items_mut<T: Pod>(&mut self, first: usize, count: usize) -> Result<&mut [T]> {
        view::cast_items_mut(self, first, count)
    }

    /// Seals the buffer against writes for good: see [`ShmBuf::freeze`]. A file_system
    /// buffer is refused ([`Error::CannotFreeze`](crate::Error::CannotFreeze)), handed back
    /// as a `ShmBuf` in the error.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let mut buf = shmrc::ShmBufMut::new(3)?;
    /// buf.copy_from_slice(b"abc");
    /// let frozen = buf.freeze()?;
    /// assert_eq!(&frozen[..], b"abc");
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn freeze(self) -> std::result::Result<FrozenBuf, FreezeError> {
        self.buf.freeze()
    }

    /// Gives up exclusive access: an ordinary [`ShmBuf`] to share with other processes
    /// (reads and writes then copy, or go through its `unsafe` region).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBufMut::new(8)?.into_shared();
    /// let _handle = buf.share()?;
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn into_shared(self) -> ShmBuf {
        self.buf
    }
}

impl Deref for ShmBufMut {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: see the module's `# Safety`: nobody but this value reaches the
        // segment, and `&self` excludes a `&mut` from `deref_mut` meanwhile.
        unsafe { self.buf.region().as_slice() }
    }
}

impl DerefMut for ShmBufMut {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: see the module's `# Safety`: nobody but this value reaches the
        // segment, and `&mut self` excludes every other slice of it meanwhile.
        unsafe { self.buf.region().as_mut_slice() }
    }
}

impl fmt::Debug for ShmBufMut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmBufMut").field("buf", &self.buf).finish()
    }
}
