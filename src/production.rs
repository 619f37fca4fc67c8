//! The production conveniences: the user API bound to the real kernel
//! ([`DefaultOs`]), so that user code never names an `Os` at all.

use std::os::fd::OwnedFd;

use crate::DefaultOs;
use crate::buf::{CreateOptions, ShmBuf};
use crate::error::{Error, Result};
use crate::handle::{ShareHandle, Target, decode};
use crate::namespace::Namespace;
use crate::os::Os;
use crate::os::posix::PosixFile;
use crate::pool::{PoolLimits, ShmPool};
use crate::strategy::Strategy;

use crate::os::posix::DataRegion;
use crate::sweep::{SweepReport, sweep_with};

impl ShmPool {
    /// A pool of recycled buffers created with `options` (either strategy, fixed now:
    /// see the module docs of `shmrc::pool` for file_descriptor pools), kept within
    /// `limits`. Options with 0 holder slots are [`Error::InvalidArgument`].
    ///
    /// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
    ///
    /// ```
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use std::os::unix::net::UnixStream;
    /// use shmrc::{CreateOptions, Error, PoolLimits, ShmBuf, ShmPool, Strategy, transport};
    ///
    /// let fd = CreateOptions::new().strategy(Strategy::FileDescriptor);
    /// let pool = ShmPool::new(fd.clone(), PoolLimits::default())?;
    /// let (producer, consumer) = UnixStream::pair().unwrap();
    /// let batch = pool.get(4096)?;
    /// transport::send(&producer, b"", vec![batch.share()?])?; // the memfd, and a slot for it
    /// drop(batch);
    /// assert_eq!(pool.stats().lent, 1); // the handle is still in flight
    /// drop(transport::recv(&consumer)?); // received, then dropped: its slot is given back
    /// assert_eq!(pool.stats().idle, 1);
    /// let next = pool.get(4096)?; // the same memfd, a new use
    /// assert_eq!((next.generation(), pool.stats().recycled), (1, 1));
    ///
    /// let no_slots = fd.capacity(0);
    /// assert!(matches!(ShmPool::new(no_slots, PoolLimits::default()), Err(Error::InvalidArgument(_))));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(options: CreateOptions, limits: PoolLimits) -> Result<ShmPool> {
        ShmPool::with_os(DefaultOs::default(), options, limits)
    }
}

impl ShmBuf {
    /// Creates a zero-filled buffer of `len` bytes with the process-wide strategy
    /// ([`sharing_strategy`](crate::sharing_strategy)), in the namespace `shmrc`. A
    /// `len` of 0 or beyond the largest segment is [`Error::InvalidArgument`]; a full
    /// `/dev/shm` is [`Error::NoSpace`], before any byte is handed out.
    ///
    /// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
    /// [`Error::NoSpace`]: crate::Error::NoSpace
    ///
    /// ```
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// assert_eq!(buf.len(), 4096);
    /// assert_eq!(buf.strategy(), shmrc::sharing_strategy());
    /// let mut out = [1u8; 16];
    /// buf.read_at(0, &mut out)?;
    /// assert_eq!(out, [0; 16]); // zero-filled
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(len: usize) -> Result<ShmBuf> {
        ShmBuf::create_with(&DefaultOs::default(), len, &CreateOptions::default())
    }

    /// Creates a zero-filled buffer of `len` bytes as `options` say (strategy, holder
    /// slots, namespace).
    ///
    /// ```
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
    ///
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-with-options")?);
    /// let buf = ShmBuf::with_options(1 << 20, &options)?;
    /// assert_eq!((buf.len(), buf.strategy()), (1 << 20, Strategy::FileSystem));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn with_options(len: usize, options: &CreateOptions) -> Result<ShmBuf> {
        ShmBuf::create_with(&DefaultOs::default(), len, options)
    }
}

impl ShmBuf {
    /// The data as a raw region, for zero-copy access (`unsafe` slices with a stated
    /// contract, or a raw pointer).
    ///
    /// ```
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
    /// let buf = shmrc::ShmBuf::new(8)?;
    /// buf.write_at(0, b"zerocopy")?;
    /// let region = buf.region();
    /// assert_eq!(region.len(), 8);
    /// // SAFETY: no process writes the buffer while the slice lives.
    /// let bytes = unsafe { region.as_slice() };
    /// assert_eq!(bytes, b"zerocopy");
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn region(&self) -> DataRegion<'_> {
        let layout = self.fields().layout;
        self.mapping()
            .region(layout.data_offset, layout.data_len)
            .expect("validated layout lies inside the mapping")
    }
}

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
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
        let decoded = decode(bytes, os.uid())?;
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

/// Sweeps namespace `ns` for this user: reclaims the slots of dead holders and unlinks
/// every segment nobody live holds (`shmrc sweep`). The user's manager does this within
/// milliseconds of a death; call it yourself when the manager is off.
///
/// A sweep only touches names that parse as segments of `ns` for this user, never
/// unlinks a segment a live process holds or has in flight, and leaves damaged
/// segments (bad magic, wrong version, corrupted, truncated, another user's or another
/// pid namespace's) in place, reporting why ([`Action::Skipped`](crate::Action::Skipped)).
/// A segment whose creator died before publishing its header is removed.
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-sweep")?;
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// // Held by this live process: a sweep keeps it.
/// let report = shmrc::sweep(&ns)?;
/// assert_eq!((report.segments.len(), report.unlinked), (1, 0));
/// drop(buf); // released: the last holder unlinks it, nothing is left to sweep
/// assert!(shmrc::sweep(&ns)?.segments.is_empty());
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn sweep(ns: &Namespace) -> Result<SweepReport> {
    sweep_with(&DefaultOs::default(), ns, false)
}

/// What [`sweep()`] would do, changing nothing (the data behind `shmrc ls`): every
/// segment of `ns` for this user, with its holders.
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{Action, CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-inspect")?;
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let report = shmrc::inspect(&ns)?;
/// assert!(report.dry_run);
/// assert_eq!(report.segments.len(), 1);
/// let segment = &report.segments[0];
/// assert_eq!(Some(segment.name.as_str()), buf.name());
/// assert!(segment.creator_alive);
/// assert!(matches!(segment.action, Action::Kept)); // held by this process
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn inspect(ns: &Namespace) -> Result<SweepReport> {
    sweep_with(&DefaultOs::default(), ns, true)
}
