//! What the checkers' seam adds to [`ShmBuf`] (feature `checkers`, not API): the
//! constructors generic over the OS and the segment's inside (identity, header, memfd,
//! the pool's recycle step), as [`ShmBufExt`], reachable only as
//! `shmrc::checkers::buf::ShmBufExt`. Each method is the crate's own `pub(crate)` one of
//! the same name; a user build has neither the trait nor a public way to them.

use super::{CreateOptions, ShmBuf};
use crate::error::Result;
use crate::local::SegmentKey;
use crate::os::Os;
use crate::protocol::segment::Fields;

/// [`ShmBuf`]'s methods for the checkers (the simulated OS, the model, the fuzz attacks,
/// the benchmarks): import it to call them.
pub trait ShmBufExt<O: Os>: Sized {
    /// Creates a buffer of `len` bytes (zero-filled) as process `os`.
    fn create_with(os: &O, len: usize, options: &CreateOptions) -> Result<Self>;
    /// [`ShmBufExt::create_with`] for a pool: a file_descriptor buffer gets the
    /// options' holder slots too, so that the pool can tell when no other process
    /// holds it and recycle it ([`ShmBufExt::recycle`]).
    fn create_recyclable(os: &O, len: usize, options: &CreateOptions) -> Result<Self>;
    /// The segment's identity.
    fn key(&self) -> SegmentKey;
    /// The header fields (creator, layout, creation time, share key).
    fn fields(&self) -> &Fields;
    /// Reuses the segment for a new use if no other process (nor a handle in flight)
    /// holds it: bumps its generation and returns `true`; `false` if it is still held
    /// (or is a plain file_descriptor buffer, without slots).
    fn recycle(&self) -> Result<bool>;
    /// The memfd of a file_descriptor buffer (`None` for file_system ones).
    fn anonymous_file(&self) -> Option<&O::File>;
}

impl<O: Os> ShmBufExt<O> for ShmBuf<O> {
    fn create_with(os: &O, len: usize, options: &CreateOptions) -> Result<ShmBuf<O>> {
        ShmBuf::create_with(os, len, options)
    }

    fn create_recyclable(os: &O, len: usize, options: &CreateOptions) -> Result<ShmBuf<O>> {
        ShmBuf::create_recyclable(os, len, options)
    }

    fn key(&self) -> SegmentKey {
        ShmBuf::key(self)
    }

    fn fields(&self) -> &Fields {
        ShmBuf::fields(self)
    }

    fn recycle(&self) -> Result<bool> {
        ShmBuf::recycle(self)
    }

    fn anonymous_file(&self) -> Option<&O::File> {
        ShmBuf::anonymous_file(self)
    }
}
