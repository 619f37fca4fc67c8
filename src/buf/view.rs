//! Typed views: a byte range of a buffer seen as `[T]` for any
//! [`bytemuck::Pod`] `T` (`f32`, `u64`, `[u8; 3]`, your `#[repr(C)]` structs that
//! derive `Pod`). The range is checked here: inside the buffer, its start aligned for
//! `T`, its length a multiple of `size_of::<T>()`; a range that does not fit is
//! [`Error::BadView`], never a panic.
//!
//! Alignment comes from the layout: a buffer's data starts 64-byte aligned (the segment
//! header is padded to a cache line and mappings are page-aligned), so any range that
//! starts at a multiple of `align_of::<T>()` is aligned for `T` when
//! `align_of::<T>() <= 64`.
//!
//! The views themselves are methods of the buffers that can hand them out safely:
//! [`FrozenBuf::cast`](crate::FrozenBuf::cast) (read-only, sealed) and
//! [`ShmBufMut::cast_mut`](crate::ShmBufMut::cast_mut) (exclusive, before sharing).
//! A shared, writable [`ShmBuf`](crate::ShmBuf) gives typed *copies*
//! ([`ShmBuf::read_items`](crate::ShmBuf::read_items),
//! [`ShmBuf::write_items`](crate::ShmBuf::write_items)).

// The casts serve the buffers of the real kernel (frozen, exclusive); a loom or
// shuttle build has only the range check.
#![cfg_attr(any(shmrc_loom, shmrc_shuttle), allow(dead_code))]

use std::ops::Range;

use bytemuck::Pod;

use crate::error::{Error, Result};

/// The byte range of `count` items of `T` starting at item `first`, checked against a
/// buffer of `size` bytes.
pub(crate) fn item_range<T: Pod>(first: usize, count: usize, size: usize) -> Result<Range<usize>> {
    let item = size_of::<T>();
    let bad = |why| Error::BadView {
        type_name: std::any::type_name::<T>(),
        offset: first.saturating_mul(item),
        len: count.saturating_mul(item),
        size,
        why,
    };
    let start = first
        .checked_mul(item)
        .ok_or_else(|| bad("the offset overflows"))?;
    let len = count
        .checked_mul(item)
        .ok_or_else(|| bad("the length overflows"))?;
    match start.checked_add(len) {
        Some(end) if end <= size => Ok(start..end),
        _ => Err(bad("the range is outside the buffer")),
    }
}

/// `bytes` as `&[T]`: its address aligned for `T`, its length a multiple of `T`'s size.
/// `offset` and `size` only describe `bytes` in the error.
pub(crate) fn cast<T: Pod>(bytes: &[u8], offset: usize, size: usize) -> Result<&[T]> {
    bytemuck::try_cast_slice(bytes).map_err(|e| bad_cast::<T>(e, offset, bytes.len(), size))
}

/// `bytes` as `&mut [T]` (see [`cast`]).
pub(crate) fn cast_mut<T: Pod>(bytes: &mut [u8], offset: usize, size: usize) -> Result<&mut [T]> {
    let len = bytes.len();
    bytemuck::try_cast_slice_mut(bytes).map_err(|e| bad_cast::<T>(e, offset, len, size))
}

fn bad_cast<T>(e: bytemuck::PodCastError, offset: usize, len: usize, size: usize) -> Error {
    use bytemuck::PodCastError::*;
    let why = match e {
        TargetAlignmentGreaterAndInputNotAligned => "its start is not aligned for the type",
        OutputSliceWouldHaveSlop => "its length is not a multiple of the type's size",
        SizeMismatch => "the sizes do not match",
        AlignmentMismatch => "the alignments do not match",
    };
    Error::BadView {
        type_name: std::any::type_name::<T>(),
        offset,
        len,
        size,
        why,
    }
}

/// The whole of `bytes` as `&[T]`, or the error naming why not.
pub(crate) fn cast_all<T: Pod>(bytes: &[u8]) -> Result<&[T]> {
    cast(bytes, 0, bytes.len())
}

/// Items `first..first + count` of `bytes` seen as `[T]`.
pub(crate) fn cast_items<T: Pod>(bytes: &[u8], first: usize, count: usize) -> Result<&[T]> {
    let range = item_range::<T>(first, count, bytes.len())?;
    cast(&bytes[range.clone()], range.start, bytes.len())
}

/// Items `first..first + count` of `bytes` seen as `[T]`, mutably.
pub(crate) fn cast_items_mut<T: Pod>(
    bytes: &mut [u8],
    first: usize,
    count: usize,
) -> Result<&mut [T]> {
    let size = bytes.len();
    let range = item_range::<T>(first, count, size)?;
    let start = range.start;
    cast_mut(&mut bytes[range], start, size)
}

/// The whole of `bytes` as `&mut [T]`.
pub(crate) fn cast_all_mut<T: Pod>(bytes: &mut [u8]) -> Result<&mut [T]> {
    let size = bytes.len();
    cast_mut(bytes, 0, size)
}
