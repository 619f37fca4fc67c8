//! Typed pooled loans: [`ShmPool::loan`] hands out a [`Loan<T>`], written as a plain
//! `&mut [T]` while only its creator can reach it, and [`Loan::into_sample`] turns it
//! into a read-only [`Sample<T>`] that travels like any buffer handle and is read as
//! `&[T]` in every process, with no `unsafe` in user code. When every holder of the
//! sample has let go (or died), its segment is back in the pool for the next loan, in a
//! new generation. A loan is a thin wrapper over [`ShmPool::get`]: the pool's protocol
//! (holder slots, recycle, generation) is unchanged.
//!
//! # Safety
//! The three `unsafe` blocks turn a pooled buffer's data region into a slice.
//!
//! `&mut [T]` in a [`Loan`] is sound because, while the loan lives, nothing else
//! reaches the segment's data: the pool handed the segment out only after its recycle
//! step found no other holder in any process and no handle in flight, and no other
//! `ShmBuf` of it in this process but the pool's own (which the pool uses for the
//! header only); the loan makes no handle and hands out no `ShmBuf`, so no reference
//! can appear; a handle of an earlier use is refused as [`Error::Stale`] (in another
//! process after a look at the header, never at the data). `&self`/`&mut self` give
//! the aliasing Rust needs.
//!
//! `&[T]` in a [`Sample`] is sound as long as nobody writes the segment while the
//! sample lives. shmrc guarantees that much for every process that uses it as the
//! API intends: the loan was consumed by [`Loan::into_sample`] (no `&mut` is left), the
//! pool hands the segment out again only once every holder let go (the producer's
//! samples included), and a sample offers no way to write. It cannot be a kernel
//! guarantee like a [`FrozenBuf`](crate::FrozenBuf)'s: a memfd seal is permanent, so a
//! sealed segment could never be written again and a pool could not reuse it. The
//! limits, stated in the docs of [`Sample`]: a process of the same user can still map
//! the segment writable on its own (`/dev/shm/NAME`, `/proc/PID/fd/N`), and a process
//! that attaches a sample's handle as a plain [`ShmBuf`] can write it with
//! [`ShmBuf::write_at`]. Out of scope too, as for `ShmBufMut`: a child forked while a
//! loan lives (`fork` is `unsafe`; such a child must not use the inherited value).
#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use bytemuck::Pod;

use super::ShmPool;
use crate::buf::{ShmBuf, view};
use crate::error::{Error, Result};
use crate::handle::ShareHandle;

/// The most alignment a typed view can have: a buffer's data starts 64-byte aligned.
const DATA_ALIGN: usize = 64;

/// Whether `T` can view a buffer's data at all: not zero-sized (a `[T]` of them would
/// say nothing of the bytes), and aligned at most as the data is.
fn check_item_type<T: Pod>() -> Result<()> {
    let why = if size_of::<T>() == 0 {
        "the type is zero-sized"
    } else if align_of::<T>() > DATA_ALIGN {
        "the type needs more than the 64-byte alignment a buffer's data has"
    } else {
        return Ok(());
    };
    Err(Error::BadView {
        type_name: std::any::type_name::<T>(),
        offset: 0,
        len: 0,
        size: 0,
        why,
    })
}

/// The whole data of `buf` as `&[T]`, or the [`Error::BadView`] naming why not (its
/// length is not a multiple of `size_of::<T>()`, or `T` cannot view a buffer at all).
fn check_whole<T: Pod>(buf: &ShmBuf) -> Result<()> {
    check_item_type::<T>()?;
    let size = buf.len();
    if size % size_of::<T>() != 0 {
        return Err(Error::BadView {
            type_name: std::any::type_name::<T>(),
            offset: 0,
            len: size,
            size,
            why: "its length is not a multiple of the type's size",
        });
    }
    Ok(())
}

/// A pooled buffer lent to this process alone, written as `&mut [T]` (`DerefMut`)
/// without `unsafe`. Its contents are those of the segment's previous use (a pool does
/// not zero what it recycles): overwrite what you send. Then
/// [`into_sample`](Loan::into_sample) it to share it read-only, or drop it to give the
/// segment straight back to the pool.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, PoolLimits, ShmPool, Strategy};
///
/// let pool = ShmPool::new(
///     CreateOptions::new().strategy(Strategy::FileDescriptor),
///     PoolLimits::default(),
/// )?;
/// let mut loan = pool.loan::<f32>(1024)?; // 4 KiB, exclusive
/// for (i, x) in loan.iter_mut().enumerate() {
///     *x = i as f32;
/// }
/// let sample = loan.into_sample(); // read-only from now on, in every process
/// assert_eq!((sample.len(), sample[3]), (1024, 3.0));
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct Loan<T: Pod> {
    buf: ShmBuf,
    item: PhantomData<T>,
}

impl<T: Pod> Loan<T> {
    /// Gives up write access: a [`Sample`] to share, read as `&[T]` here and in every
    /// process it reaches.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # use shmrc::{CreateOptions, PoolLimits, ShmPool, Strategy};
    /// # let pool = ShmPool::new(CreateOptions::new().strategy(Strategy::FileDescriptor), PoolLimits::default())?;
    /// let mut loan = pool.loan::<u64>(2)?;
    /// loan.copy_from_slice(&[7, 8]);
    /// let sample = loan.into_sample();
    /// assert_eq!(*sample, [7, 8]);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn into_sample(self) -> Sample<T> {
        Sample {
            buf: self.buf,
            item: PhantomData,
        }
    }

    /// Which use of its segment this is (0 for a new segment, one more at each reuse).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # use shmrc::{CreateOptions, PoolLimits, ShmPool, Strategy};
    /// # let pool = ShmPool::new(CreateOptions::new().strategy(Strategy::FileDescriptor), PoolLimits::default())?;
    /// assert_eq!(pool.loan::<u8>(64)?.generation(), 0);
    /// assert_eq!(pool.loan::<u8>(64)?.generation(), 1); // the first one came back
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.buf.generation()
    }

    /// The pooled buffer (publish/subscribe reads its key and slots, never its data).
    pub(crate) fn buf(&self) -> &ShmBuf {
        &self.buf
    }

    /// The pooled buffer, the loan given up (to give its segment back to the pool).
    pub(crate) fn into_buf(self) -> ShmBuf {
        self.buf
    }
}

impl<T: Pod> Deref for Loan<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: see the module's `# Safety`: nothing but this loan reaches the data,
        // and `&self` excludes a `&mut` from `deref_mut` meanwhile.
        let bytes = unsafe { self.buf.region().as_slice() };
        view::cast_all(bytes).expect("the loan's length and type were checked when it was made")
    }
}

impl<T: Pod> DerefMut for Loan<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: see the module's `# Safety`: nothing but this loan reaches the data,
        // and `&mut self` excludes every other slice of it meanwhile.
        let bytes = unsafe { self.buf.region().as_mut_slice() };
        view::cast_all_mut(bytes).expect("the loan's length and type were checked when it was made")
    }
}

impl<T: Pod> fmt::Debug for Loan<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loan")
            .field("type", &std::any::type_name::<T>())
            .field("len", &self.len())
            .field("buf", &self.buf)
            .finish()
    }
}

/// A pooled buffer shared read-only, seen as `&[T]` (`Deref`) without `unsafe`. Clone
/// it freely (an `Arc`); send it with [`Sample::share`] and
/// [`transport::send`](crate::transport::send) (or in a `shmrc::channel` message);
/// the receiver calls [`Sample::attach`]. Its segment goes back to the producer's pool
/// when every holder in every process has let go, a SIGKILLed one included: the next
/// [`ShmPool::loan`] (or [`ShmPool::get`]) of its length reuses it in a new
/// generation, and a handle of this use then fails with [`Error::Stale`].
///
/// # What "read-only" means here (compare [`FrozenBuf`](crate::FrozenBuf))
/// A sample's bytes do not change while it lives as long as every process that gets a
/// handle of it attaches it as a `Sample`, and no process of the same user writes the
/// segment behind shmrc's back. shmrc's own API has no way to write a sample, and the
/// pool lends the segment out again only once every holder let go. Nothing in the
/// kernel enforces it, though (a frozen buffer's seal would forbid the pool to ever
/// write the segment again): a process of the same user can open `/dev/shm/NAME` or
/// `/proc/PID/fd/N` and map it writable (or truncate a file_system segment, and a
/// reader dies of SIGBUS, as for any `ShmBuf`: `docs/SECURITY.md`), and a process that
/// attaches a handle as a plain [`ShmBuf`] can [`write_at`](ShmBuf::write_at) it. Such a write while a
/// `&[T]` of the sample lives is a data race: undefined behaviour in Rust's terms. With
/// a `Pod` `T` every bit pattern is a valid `T`, so what it does in practice is
/// change values under the reader, torn at any byte, and a value read twice may differ
/// even where the compiler assumed it could not (a bound checked on one read and used
/// from another). So:
/// - from a peer you trust to follow the protocol (your own programs), read the
///   `&[T]`;
/// - from a peer you do not trust, copy first with [`Sample::read_items`] (a torn copy
///   at worst, never undefined behaviour) and validate the copy; or have it send a
///   [`FrozenBuf`](crate::FrozenBuf), whose bytes the kernel keeps unchanged, at the
///   cost of a new memfd per buffer.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use std::os::unix::net::UnixStream;
/// use shmrc::{CreateOptions, PoolLimits, Sample, ShmPool, Strategy, transport};
///
/// let pool = ShmPool::new(
///     CreateOptions::new().strategy(Strategy::FileDescriptor),
///     PoolLimits::default(),
/// )?;
/// let mut loan = pool.loan::<u32>(1024)?;
/// loan.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32);
/// let sample = loan.into_sample();
/// let (producer, consumer) = UnixStream::pair().unwrap();
/// transport::send(&producer, b"frame 0", vec![sample.share()?])?;
/// drop(sample);
/// // In the receiving process:
/// let mut message = transport::recv(&consumer)?;
/// let received = Sample::<u32>::attach(message.handles.remove(0))?;
/// assert_eq!(received[1000], 1000);
/// drop(received); // every holder let go: back in the pool
/// assert_eq!(pool.loan::<u32>(1024)?.generation(), 1);
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct Sample<T: Pod> {
    buf: ShmBuf,
    item: PhantomData<T>,
}

impl<T: Pod> Sample<T> {
    /// Attaches a handle made by [`Sample::share`] in another process (or this one),
    /// seeing its data as `[T]`. Refused, with the handle's reference given back:
    /// a handle of an earlier use of a recycled segment ([`Error::Stale`]), data whose
    /// length is not a multiple of `size_of::<T>()` or a `T` that cannot view a buffer
    /// (zero-sized, or aligned to more than 64 bytes) ([`Error::BadView`], naming
    /// which), and whatever [`ShmBuf::attach`] refuses.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # use shmrc::{CreateOptions, PoolLimits, ShmPool, Strategy};
    /// use shmrc::{Error, Sample};
    /// # let pool = ShmPool::new(CreateOptions::new().strategy(Strategy::FileDescriptor), PoolLimits::default())?;
    /// let sample = pool.loan::<u16>(3)?.into_sample(); // 6 bytes
    /// assert_eq!(Sample::<u16>::attach(sample.share()?)?.len(), 3);
    /// let wrong = Sample::<u32>::attach(sample.share()?); // 6 bytes are not whole u32s
    /// assert!(matches!(wrong, Err(Error::BadView { .. })));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn attach(handle: ShareHandle) -> Result<Sample<T>> {
        check_item_type::<T>()?;
        let buf = ShmBuf::attach(handle)?;
        check_whole::<T>(&buf)?;
        Ok(Sample {
            buf,
            item: PhantomData,
        })
    }

    /// A handle that lets one other process attach this sample (it holds an in-flight
    /// reference, so the segment stays out of the pool while the handle travels): send
    /// it with [`transport::send`](crate::transport::send); the receiver calls
    /// [`Sample::attach`].
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # use shmrc::{CreateOptions, PoolLimits, ShmPool, Strategy};
    /// # let pool = ShmPool::new(CreateOptions::new().strategy(Strategy::FileDescriptor), PoolLimits::default())?;
    /// let sample = pool.loan::<u8>(64)?.into_sample();
    /// let handle = sample.share()?;
    /// drop(sample);
    /// assert_eq!(pool.stats().lent, 1); // the handle still holds it
    /// drop(handle);
    /// assert_eq!(pool.stats().idle, 1);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn share(&self) -> Result<ShareHandle> {
        self.buf.share()
    }

    /// Copies items `first..first + out.len()` into `out`, safe even while another
    /// process writes the segment against the protocol (a torn copy, never undefined
    /// behaviour): the way to read a sample from a peer you do not trust (see the
    /// type's docs). A range past the end is [`Error::BadView`] and copies nothing.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # use shmrc::{CreateOptions, PoolLimits, ShmPool, Strategy};
    /// # let pool = ShmPool::new(CreateOptions::new().strategy(Strategy::FileDescriptor), PoolLimits::default())?;
    /// let mut loan = pool.loan::<i16>(4)?;
    /// loan.copy_from_slice(&[1, -2, 3, -4]);
    /// let sample = loan.into_sample();
    /// let mut copy = [0i16; 2];
    /// sample.read_items(2, &mut copy)?;
    /// assert_eq!(copy, [3, -4]);
    /// assert!(sample.read_items(3, &mut copy).is_err());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn read_items(&self, first: usize, out: &mut [T]) -> Result<()> {
        self.buf.read_items(first, out)
    }

    /// Which use of its segment this is (a handle of another use is [`Error::Stale`]).
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// # use shmrc::{CreateOptions, PoolLimits, ShmPool, Strategy};
    /// # let pool = ShmPool::new(CreateOptions::new().strategy(Strategy::FileDescriptor), PoolLimits::default())?;
    /// assert_eq!(pool.loan::<u8>(8)?.into_sample().generation(), 0);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn generation(&self) -> u64 {
        self.buf.generation()
    }
}

impl<T: Pod> Clone for Sample<T> {
    fn clone(&self) -> Sample<T> {
        Sample {
            buf: self.buf.clone(),
            item: PhantomData,
        }
    }
}

impl<T: Pod> Deref for Sample<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: see the module's `# Safety` and the type's docs: no process that
        // follows shmrc's protocol writes the segment while a sample of it lives.
        let bytes = unsafe { self.buf.region().as_slice() };
        view::cast_all(bytes).expect("the sample's length and type were checked when it was made")
    }
}

impl<T: Pod> AsRef<[T]> for Sample<T> {
    fn as_ref(&self) -> &[T] {
        self
    }
}

impl<T: Pod> fmt::Debug for Sample<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sample")
            .field("type", &std::any::type_name::<T>())
            .field("len", &self.len())
            .field("buf", &self.buf)
            .finish()
    }
}

impl ShmPool {
    /// A buffer of `len` items of `T`, lent to this process alone as `&mut [T]`
    /// (see [`Loan`]): a recycled segment of `len * size_of::<T>()` bytes as
    /// [`ShmPool::get`] picks it, or a new one. Refused: a `len` of 0 or one whose
    /// byte length overflows `usize` ([`Error::InvalidArgument`], naming which), a `T`
    /// that is zero-sized or aligned to more than 64 bytes ([`Error::BadView`]), and
    /// whatever `get` refuses.
    ///
    /// ```
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Error, PoolLimits, ShmPool, Strategy};
    /// let pool = ShmPool::new(
    ///     CreateOptions::new().strategy(Strategy::FileDescriptor),
    ///     PoolLimits::default(),
    /// )?;
    /// let mut loan = pool.loan::<[f32; 3]>(100)?; // 1200 bytes
    /// loan[99] = [1.0, 2.0, 3.0];
    /// assert!(matches!(pool.loan::<u64>(usize::MAX / 4), Err(Error::InvalidArgument(_))));
    /// assert!(matches!(pool.loan::<u64>(0), Err(Error::InvalidArgument(_))));
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn loan<T: Pod>(&self, len: usize) -> Result<Loan<T>> {
        check_item_type::<T>()?;
        let type_name = std::any::type_name::<T>();
        if len == 0 {
            return Err(Error::InvalidArgument(format!(
                "a loan of 0 items of {type_name}: a buffer has at least one byte"
            )));
        }
        let bytes = len.checked_mul(size_of::<T>()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "a loan of {len} items of {type_name} ({} bytes each) overflows usize",
                size_of::<T>()
            ))
        })?;
        let buf = self.get(bytes)?;
        check_whole::<T>(&buf)?;
        Ok(Loan {
            buf,
            item: PhantomData,
        })
    }
}
