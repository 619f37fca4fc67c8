//! The production conveniences: the user API bound to the real kernel
//! ([`DefaultOs`]), so that user code never names an `Os` at all.

use crate::DefaultOs;
use crate::buf::{CreateOptions, ShmBuf};
use crate::error::Result;
use crate::handle::ShareHandle;
use crate::namespace::Namespace;
use crate::os::Os;
use crate::os::posix::{DataRegion, PosixMap};
use crate::sweep::{SweepReport, sweep_with};

impl ShmBuf {
    /// Creates a zero-filled buffer of `len` bytes with the process-wide strategy.
    ///
    /// ```
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// assert_eq!(buf.len(), 4096);
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(len: usize) -> Result<ShmBuf> {
        ShmBuf::create_with(&DefaultOs::default(), len, &CreateOptions::default())
    }

    /// Creates a zero-filled buffer of `len` bytes as `options` say.
    pub fn with_options(len: usize, options: &CreateOptions) -> Result<ShmBuf> {
        ShmBuf::create_with(&DefaultOs::default(), len, options)
    }
}

impl<O: Os<Map = PosixMap>> ShmBuf<O> {
    /// The data as a raw region, for zero-copy access (`unsafe` slices with a stated
    /// contract, or a raw pointer).
    pub fn region(&self) -> DataRegion<'_> {
        let layout = self.fields().layout;
        self.mapping()
            .region(layout.data_offset, layout.data_len)
            .expect("validated layout lies inside the mapping")
    }
}

impl ShareHandle {
    /// Decodes a handle made by [`ShareHandle::into_bytes`] in another process.
    pub fn from_bytes(bytes: &[u8]) -> Result<ShareHandle> {
        ShareHandle::from_bytes_with(&DefaultOs::default(), bytes)
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
    sweep_with(&DefaultOs::default(), ns, false)
}

/// What [`sweep`] would do, changing nothing (the data behind `shmrc ls`).
pub fn inspect(ns: &Namespace) -> Result<SweepReport> {
    sweep_with(&DefaultOs::default(), ns, true)
}
