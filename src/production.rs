//! The production conveniences: the user API bound to the real kernel ([`PosixOs`]),
//! so that most code never names an `Os` at all.

use crate::buf::{CreateOptions, ShmBuf};
use crate::error::Result;
use crate::handle::ShareHandle;
use crate::namespace::Namespace;
use crate::os::posix::{DataRegion, PosixOs};
use crate::sweep::{SweepReport, sweep_with};

impl ShmBuf<PosixOs> {
    /// Creates a zero-filled buffer of `len` bytes with the process-wide strategy.
    ///
    /// ```
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// assert_eq!(buf.len(), 4096);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(len: usize) -> Result<ShmBuf<PosixOs>> {
        ShmBuf::create_with(&PosixOs, len, &CreateOptions::default())
    }

    /// Creates a zero-filled buffer of `len` bytes as `options` say.
    pub fn with_options(len: usize, options: &CreateOptions) -> Result<ShmBuf<PosixOs>> {
        ShmBuf::create_with(&PosixOs, len, options)
    }

    /// The data as a raw region, for zero-copy access (`unsafe` slices with a stated
    /// contract, or a raw pointer).
    pub fn region(&self) -> DataRegion<'_> {
        let layout = self.fields().layout;
        self.mapping()
            .region(layout.data_offset, layout.data_len)
            .expect("validated layout lies inside the mapping")
    }
}

impl ShareHandle<PosixOs> {
    /// Decodes a handle made by [`ShareHandle::into_bytes`] in another process.
    pub fn from_bytes(bytes: &[u8]) -> Result<ShareHandle<PosixOs>> {
        ShareHandle::from_bytes_with(&PosixOs, bytes)
    }
}

/// Sweeps namespace `ns` for this user: reclaims the slots of dead holders and unlinks
/// every segment nobody live holds. See [`mod@crate::sweep`].
///
/// ```
/// let report = shmrc::sweep(&shmrc::Namespace::new("shmrc-doc-sweep")?)?;
/// assert_eq!(report.unlinked, 0);
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn sweep(ns: &Namespace) -> Result<SweepReport> {
    sweep_with(&PosixOs, ns, false)
}

/// What [`sweep`] would do, changing nothing (the data behind `shmrc ls`).
pub fn inspect(ns: &Namespace) -> Result<SweepReport> {
    sweep_with(&PosixOs, ns, true)
}
