//! Mappings: `mmap` of a file ([`map`]), the [`PosixMap`] it gives, the copies in and
//! out of shared memory behind [`Mapping::read`] and [`Mapping::write`], and the
//! zero-copy [`DataRegion`] windows; read-only mappings of write-sealed memfds
//! ([`SealedMap`]).
//!
//! # Safety
//! The `unsafe` here is pointer arithmetic inside a live mapping, atomic views of its
//! bytes, and slices over it. It is sound because:
//! - every pointer is bounds-checked against the mapping's length first (`range`,
//!   [`PosixMap::region`], [`Mapping::words`]), and the mapping lives as long as the
//!   borrow of the [`PosixMap`] that hands the pointer out;
//! - memory another process may write at any moment is only ever accessed through
//!   atomics ([`Mapping::words`], and the relaxed byte and word loads and stores of the
//!   copies), so a concurrent writer tears a copy but is never undefined behaviour;
//! - the only plain slices over shared bytes are [`DataRegion::as_slice`] and
//!   [`DataRegion::as_mut_slice`], which are `unsafe` and put the duty of excluding
//!   writers (or all other access) on their caller, in writing;
//! - the exception is [`SealedMap`], whose file the kernel has sealed against every
//!   write (checked with `F_GET_SEALS` before mapping; seals are never removed): its
//!   bytes cannot change, so a plain `&[u8]` over them is sound.
#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;

use memmap2::{Advice, Mmap, MmapOptions, MmapRaw};

use super::{PosixFile, PosixOs};
use crate::error::{Error, Result};
use crate::os::{Mapping, Os};
use crate::sync::process::AtomicU8 as SharedByte;
use crate::sync::{AtomicU64, Ordering};

/// Refuses a mapping of zero bytes, or of more bytes than the file's `have`: pages past
/// the end of the file would SIGBUS on first touch.
fn check_map_len(len: usize, have: u64) -> Result<()> {
    if len == 0 {
        return Err(Error::InvalidArgument(
            "cannot map zero bytes of a segment".into(),
        ));
    }
    if len as u64 > have {
        return Err(Error::InvalidArgument(format!(
            "cannot map {len} bytes of a {have}-byte file"
        )));
    }
    Ok(())
}

/// [`Os::map`]: a shared mapping of the first `len` bytes of `file`, refusing zero
/// bytes and bytes past the end of the file.
pub(super) fn map(os: &PosixOs, file: &PosixFile, len: usize) -> Result<PosixMap> {
    map_stated(file, len, os.stat(file)?.len)
}

/// [`Os::map_stated`]: as [`map`], `have` being the file's length as just read.
pub(super) fn map_stated(file: &PosixFile, len: usize, have: u64) -> Result<PosixMap> {
    check_map_len(len, have)?;
    let raw = MmapOptions::new()
        .len(len)
        .map_raw(&file.0)
        .map_err(|e| Error::os("mmap", e))?;
    Ok(PosixMap { raw })
}

/// A shared, read-write mapping of the first `len` bytes of a segment; unmapped on
/// drop. Its memory may be written by other processes at any time.
pub struct PosixMap {
    raw: MmapRaw,
}

impl PosixMap {
    /// The first byte of the mapping (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.raw.as_mut_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the mapping is empty (never: [`Os::map`] refuses zero bytes).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `len` bytes at `offset`, or `None` when they are not all inside the mapping.
    pub fn region(&self, offset: usize, len: usize) -> Option<DataRegion<'_>> {
        let end = offset.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        Some(DataRegion {
            // SAFETY: `offset <= end <= self.len()`, so the pointer stays inside the
            // mapping (or one past its end when `len == 0`).
            ptr: unsafe { self.as_ptr().add(offset) },
            len,
            map: PhantomData,
        })
    }

    /// `Some(base + offset)` when `len` bytes from `offset` lie inside the mapping.
    fn range(&self, offset: usize, len: usize) -> Option<*mut u8> {
        let end = offset.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        // SAFETY: `offset <= self.len()`, so the result is inside the mapping or one
        // past its end.
        Some(unsafe { self.as_ptr().add(offset) })
    }
}

impl fmt::Debug for PosixMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PosixMap")
            .field("ptr", &self.as_ptr())
            .field("len", &self.len())
            .finish()
    }
}

impl Mapping for PosixMap {
    fn len(&self) -> usize {
        self.raw.len()
    }

    fn words(&self, n: usize) -> Option<&[AtomicU64]> {
        // SAFETY: the mapping is page-aligned and its `len()` bytes are mapped
        // read-write for as long as `self` lives (the borrow); every access to them
        // through the words is atomic, so other processes writing the words
        // concurrently is what atomics are for.
        unsafe { first_words(self.as_ptr(), self.len(), n) }
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        let Some(src) = self.range(offset, out.len()) else {
            return false;
        };
        // SAFETY: `src..src + out.len()` is inside the live mapping (checked by
        // `range`), and `out` is a distinct, exclusively borrowed local buffer.
        unsafe { copy_from_shared(src, out) };
        true
    }

    fn write(&self, offset: usize, data: &[u8]) -> bool {
        let Some(dst) = self.range(offset, data.len()) else {
            return false;
        };
        // SAFETY: `dst..dst + data.len()` is inside the live, writable mapping (checked
        // by `range`). `data` does not overlap it: a `&[u8]` into the mapping exists
        // only through `DataRegion::as_slice`, whose caller promised no writes meanwhile.
        unsafe { copy_to_shared(dst, data) };
        true
    }

    fn inherit_on_fork(&self, inherit: bool) -> bool {
        let advice = if inherit {
            Advice::DoFork
        } else {
            Advice::DontFork
        };
        self.raw.advise(advice).is_ok()
    }
}

/// A read-only, private mapping of a memfd that is sealed against writes
/// (`map_sealed`): the bytes can never change, in any process, for as long as the
/// mapping lives. That is what makes its safe `&[u8]` ([`SealedMap::bytes`]) sound.
pub struct SealedMap {
    map: Mmap,
}

/// Maps the first `len` bytes of `file` read-only, after checking that the file is
/// sealed against writes and shrinking (`F_SEAL_WRITE | F_SEAL_SHRINK`): `Ok(None)`
/// when it is not. Seals cannot be removed, so the check holds for the mapping's life.
/// The mapping is `MAP_PRIVATE` (kernels before 6.7 refuse shared mappings of a
/// write-sealed memfd); with no write ever possible it shows the file's pages.
pub(super) fn map_sealed(os: &PosixOs, file: &PosixFile, len: usize) -> Result<Option<SealedMap>> {
    if !super::shm::is_write_sealed(file)? {
        return Ok(None);
    }
    check_map_len(len, os.stat(file)?.len)?;
    // SAFETY: the file is sealed against writes and shrinking (checked above, and seals
    // are never removed): no process can modify or truncate it while this mapping
    // lives, which is the contract of `Mmap` (immutable bytes, no SIGBUS). `len` is
    // inside the file (checked above).
    let map = unsafe { MmapOptions::new().len(len).map_copy_read_only(&file.0) }
        .map_err(|e| Error::os("mmap", e))?;
    Ok(Some(SealedMap { map }))
}

impl SealedMap {
    /// The mapped bytes: immutable for as long as the mapping lives (the file is
    /// sealed against writes).
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
}

impl fmt::Debug for SealedMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedMap")
            .field("ptr", &self.map.as_ptr())
            .field("len", &self.map.len())
            .finish()
    }
}

impl Mapping for SealedMap {
    fn len(&self) -> usize {
        self.map.len()
    }

    fn words(&self, n: usize) -> Option<&[AtomicU64]> {
        // SAFETY: the mapping is page-aligned and its `len()` bytes are mapped for as
        // long as `self` lives. The memory is read-only: only loads are sound on it,
        // and the only user of a sealed mapping's words is header validation, which
        // loads (a 64-bit atomic load is a plain load on the 64-bit targets shmrc
        // builds for).
        unsafe { first_words(self.map.as_ptr(), self.len(), n) }
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        match offset.checked_add(out.len()) {
            Some(end) if end <= self.len() => {
                out.copy_from_slice(&self.map[offset..end]);
                true
            }
            _ => false,
        }
    }

    fn write(&self, _offset: usize, _data: &[u8]) -> bool {
        false // sealed: nobody writes
    }
}

/// The first `n` 8-byte words of the `len` bytes at `base`, or `None` when they do not
/// fit.
///
/// # Safety
/// `base` must be 8-aligned and its `len` bytes mapped for the lifetime the caller
/// picks, and every access through the words must be one the mapping allows.
unsafe fn first_words<'a>(base: *const u8, len: usize, n: usize) -> Option<&'a [AtomicU64]> {
    if n.checked_mul(size_of::<AtomicU64>())? > len {
        return None;
    }
    // SAFETY: `8 * n <= len` bytes at the 8-aligned `base` are mapped per the caller;
    // AtomicU64 has the layout of u64 and every bit pattern is a valid value.
    Some(unsafe { std::slice::from_raw_parts(base.cast::<AtomicU64>(), n) })
}

/// The byte at `p` as a relaxed atomic.
///
/// # Safety
/// `p` must be mapped for the lifetime the caller picks (the whole copy).
unsafe fn shared_byte<'a>(p: *const u8) -> &'a SharedByte {
    // SAFETY: `SharedByte` is a `repr(transparent)` wrapper of `AtomicU8`, which has
    // the size and alignment of `u8`; `p` is mapped per the caller. Every access to
    // shared data in this process goes through atomics (here and in `words`), so a
    // concurrent access by another thread is no data race; another process's writes
    // are outside this program and at worst tear the copy.
    unsafe { &*p.cast::<SharedByte>() }
}

/// The 8-aligned word at `p` as a relaxed atomic.
///
/// # Safety
/// `p` must be 8-aligned and mapped for the lifetime the caller picks.
unsafe fn shared_word<'a>(p: *const u8) -> &'a AtomicU64 {
    // SAFETY: `crate::sync::AtomicU64` is a `repr(transparent)` wrapper of std's, with
    // the size of `u64` and alignment 8; `p` is 8-aligned and mapped per the caller;
    // concurrency as in `shared_byte`.
    unsafe { &*p.cast::<AtomicU64>() }
}

/// Copies `out.len()` bytes from shared memory at `src` into `out` with relaxed atomic
/// loads: single bytes up to 8-byte alignment, then aligned words, then bytes. A
/// concurrent writer (a thread of this process or another process) gives a torn copy,
/// never undefined behaviour, and every bit pattern is a valid `u8`.
///
/// # Safety
/// `src..src + out.len()` must be mapped and readable for the whole call.
unsafe fn copy_from_shared(src: *const u8, out: &mut [u8]) {
    let len = out.len();
    let head = src.align_offset(8).min(len);
    let words = (len - head) / 8;
    for (i, byte) in out[..head].iter_mut().enumerate() {
        // SAFETY: `i < head <= len`: in bounds, mapped per the caller.
        *byte = unsafe { shared_byte(src.wrapping_add(i)) }.load(Ordering::Relaxed);
    }
    for w in 0..words {
        let at = head + 8 * w;
        // SAFETY: `src + head` is 8-aligned and `at + 8 <= len`: in bounds, mapped.
        let word = unsafe { shared_word(src.wrapping_add(at)) }.load(Ordering::Relaxed);
        out[at..at + 8].copy_from_slice(&word.to_ne_bytes());
    }
    for (i, byte) in out.iter_mut().enumerate().skip(head + 8 * words) {
        // SAFETY: `i < len`: in bounds, mapped per the caller.
        *byte = unsafe { shared_byte(src.wrapping_add(i)) }.load(Ordering::Relaxed);
    }
}

/// Copies `data` into shared memory at `dst` with relaxed atomic stores (see
/// [`copy_from_shared`]).
///
/// # Safety
/// `dst..dst + data.len()` must be mapped and writable for the whole call and must not
/// overlap `data`.
unsafe fn copy_to_shared(dst: *mut u8, data: &[u8]) {
    let len = data.len();
    let head = dst.align_offset(8).min(len);
    let words = (len - head) / 8;
    for (i, byte) in data[..head].iter().enumerate() {
        // SAFETY: `i < head <= len`: in bounds, mapped and writable per the caller.
        unsafe { shared_byte(dst.wrapping_add(i)) }.store(*byte, Ordering::Relaxed);
    }
    for w in 0..words {
        let at = head + 8 * w;
        let mut word = [0u8; 8];
        word.copy_from_slice(&data[at..at + 8]);
        // SAFETY: `dst + head` is 8-aligned and `at + 8 <= len`: in bounds, writable.
        unsafe { shared_word(dst.wrapping_add(at)) }
            .store(u64::from_ne_bytes(word), Ordering::Relaxed);
    }
    for (i, byte) in data.iter().enumerate().skip(head + 8 * words) {
        // SAFETY: `i < len`: in bounds, mapped and writable per the caller.
        unsafe { shared_byte(dst.wrapping_add(i)) }.store(*byte, Ordering::Relaxed);
    }
}

/// A bounds-checked window of a buffer's mapping ([`ShmBuf::region`](crate::ShmBuf::region)), for callers
/// who want the bytes of a buffer without copying them.
///
/// The window lives no longer than the mapping. The safe methods hand out only its
/// address and length; turning it into a slice is `unsafe`, because another process
/// may write the same bytes at any time.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// let buf = shmrc::ShmBuf::new(4096)?;
/// let region = buf.region();
/// // SAFETY: nobody else holds this buffer yet, so nothing else touches its bytes.
/// let bytes = unsafe { region.as_mut_slice() };
/// bytes[..5].copy_from_slice(b"hello");
/// let mut out = [0u8; 5];
/// buf.read_at(0, &mut out)?;
/// assert_eq!(&out, b"hello");
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct DataRegion<'a> {
    ptr: *mut u8,
    len: usize,
    map: PhantomData<&'a PosixMap>,
}

// SAFETY: a DataRegion is a borrowed address range of a PosixMap, which is Send and
// Sync; it gives no safe access to the bytes, and the unsafe accessors put the burden
// of synchronization on their caller.
unsafe impl Send for DataRegion<'_> {}
// SAFETY: as for Send: sharing the window shares only its address and length.
unsafe impl Sync for DataRegion<'_> {}

impl<'a> DataRegion<'a> {
    /// Length of the window in bytes.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// assert_eq!(buf.region().len(), 4096);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty (never, for a buffer's region).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// assert!(!buf.region().is_empty());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte of the window (aligned to 64 bytes for a buffer's region).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// assert_eq!(buf.region().as_ptr() as usize % 64, 0);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The window as a shared slice.
    ///
    /// # Safety
    /// While the returned slice lives, no thread of any process may write these bytes
    /// (through [`ShmBuf::write_at`](crate::ShmBuf::write_at), another slice, or another process's mapping of the
    /// same segment); the caller guarantees it, typically by a protocol of its own
    /// ("the producer finished before it sent the handle").
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// buf.write_at(0, b"tensor")?;
    /// // SAFETY: this process is the only holder and writes nothing while `bytes` lives.
    /// let bytes = unsafe { buf.region().as_slice() };
    /// assert_eq!(&bytes[..6], b"tensor");
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub unsafe fn as_slice(&self) -> &'a [u8] {
        // SAFETY: the window is inside a mapping that outlives 'a, `len` bytes long and
        // at most isize::MAX (mmap cannot map more); the caller promises no writes while
        // the slice lives, as `&[u8]` requires.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The window as a mutable slice.
    ///
    /// # Safety
    /// While the returned slice lives, nothing else may access these bytes at all: no
    /// other slice of them (shared or mutable, from this or another region), no
    /// [`ShmBuf::read_at`](crate::ShmBuf::read_at) or [`ShmBuf::write_at`](crate::ShmBuf::write_at) of them, and no other process reading or
    /// writing them through its own mapping.
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// let buf = shmrc::ShmBuf::new(4096)?;
    /// // SAFETY: not shared yet: no other slice, copy or process touches the bytes.
    /// let bytes = unsafe { buf.region().as_mut_slice() };
    /// bytes.fill(7);
    /// let mut out = [0u8; 2];
    /// buf.read_at(4094, &mut out)?;
    /// assert_eq!(out, [7, 7]);
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    #[allow(clippy::mut_from_ref)] // shared memory: exclusivity is the caller's promise
    pub unsafe fn as_mut_slice(&self) -> &'a mut [u8] {
        // SAFETY: the window is inside a writable mapping that outlives 'a, `len` bytes
        // long; the caller promises exclusive access while the slice lives, as
        // `&mut [u8]` requires.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_copies_match_plain_copies_at_every_alignment() {
        let mut backing = vec![0u64; 8];
        let base = backing.as_mut_ptr().cast::<u8>();
        let total = size_of_val(backing.as_slice());
        let pattern: Vec<u8> = (0..total as u8)
            .map(|b| b.wrapping_mul(37) ^ 0x5a)
            .collect();
        for offset in 0..17 {
            for len in 0..(total - offset).min(40) {
                // SAFETY: `base..base + total` is the live, exclusively owned `backing`.
                unsafe { std::ptr::write_bytes(base, 0, total) };
                // SAFETY: `offset + len <= total`, inside `backing`; `pattern` is
                // another allocation.
                unsafe { copy_to_shared(base.add(offset), &pattern[..len]) };
                let mut out = vec![0xeeu8; len];
                // SAFETY: as above.
                unsafe { copy_from_shared(base.add(offset), &mut out) };
                assert_eq!(out, pattern[..len], "offset {offset} len {len}");
                // SAFETY: `backing` is not otherwise borrowed while this slice lives.
                let all = unsafe { std::slice::from_raw_parts(base, total) };
                assert!(all[..offset].iter().all(|&b| b == 0), "no write before");
                assert!(
                    all[offset + len..].iter().all(|&b| b == 0),
                    "no write after"
                );
            }
        }
    }
}
