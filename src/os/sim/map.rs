//! Memory and mappings: an object's memory ([`Storage`], atomic words), the byte copies
//! in and out of it, `mmap` ([`map`]) and the [`SimMap`] it gives.

use std::fmt;
use std::sync::Arc;

use super::kernel::{Ref, SimKernel};
use super::objects::SimFile;
use super::process::SimOs;
use crate::error::{Error, Result};
use crate::os::Mapping;
use crate::sync::{AtomicU64, Ordering};

/// An object's memory.
pub(super) type Storage = Arc<Vec<AtomicU64>>;

/// A mapping of a simulated object: its memory (shared with every other mapping of the
/// object) and the length mapped; dropping it unmaps it.
pub struct SimMap {
    kernel: SimKernel,
    object: u64,
    storage: Storage,
    len: usize,
}

impl fmt::Debug for SimMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimMap")
            .field("object", &self.object)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for SimMap {
    fn drop(&mut self) {
        // `self.storage` is dropped after this body, outside the lock.
        self.kernel
            .with(|st, garbage| st.unref(self.object, Ref::Map, garbage));
    }
}

impl Mapping for SimMap {
    fn len(&self) -> usize {
        self.len
    }

    fn words(&self, n: usize) -> Option<&[AtomicU64]> {
        if n.checked_mul(8)? > self.len {
            return None;
        }
        self.storage.get(..n)
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        read_words(&self.storage, self.len as u64, offset, out)
    }

    fn write(&self, offset: usize, data: &[u8]) -> bool {
        write_words(&self.storage, self.len as u64, offset, data)
    }
}

/// [`Os::map`](crate::os::Os::map): the first `len` bytes of `file`'s object, at most
/// its length.
pub(super) fn map(os: &SimOs, file: &SimFile, len: usize) -> Result<SimMap> {
    os.check_file(file)?;
    let storage = os.with(|st, _| {
        st.owned(os.pid, file.owner, "mmap")?;
        let o = st.object(file.object, "mmap")?;
        if len == 0 || len as u64 > o.len {
            return Err(Error::InvalidArgument(format!(
                "cannot map {len} bytes of a {}-byte object",
                o.len
            )));
        }
        o.maps += 1;
        Ok(o.storage.clone())
    })?;
    os.kernel.see_memory();
    Ok(SimMap {
        kernel: os.kernel.clone(),
        object: file.object,
        storage,
        len,
    })
}

/// The range `offset..offset + len` if it lies within `limit` bytes of `storage`.
fn range(storage: &[AtomicU64], limit: u64, offset: usize, len: usize) -> Option<usize> {
    let end = offset.checked_add(len)?;
    (end as u64 <= limit && end <= storage.len().saturating_mul(8)).then_some(end)
}

/// Copies `out.len()` bytes at `offset` of `storage` into `out`; `false` (copying
/// nothing) when the range is not within `limit` bytes.
pub(super) fn read_words(storage: &[AtomicU64], limit: u64, offset: usize, out: &mut [u8]) -> bool {
    if range(storage, limit, offset, out.len()).is_none() {
        return false;
    }
    let mut done = 0;
    while done < out.len() {
        let at = offset + done;
        let (word, skip) = (at / 8, at % 8);
        let n = (8 - skip).min(out.len() - done);
        let bytes = storage[word].load(Ordering::Relaxed).to_ne_bytes();
        out[done..done + n].copy_from_slice(&bytes[skip..skip + n]);
        done += n;
    }
    true
}

/// Copies `data` to `offset` of `storage`; `false` (writing nothing) when the range
/// is not within `limit` bytes.
pub(super) fn write_words(storage: &[AtomicU64], limit: u64, offset: usize, data: &[u8]) -> bool {
    if range(storage, limit, offset, data.len()).is_none() {
        return false;
    }
    let mut done = 0;
    while done < data.len() {
        let at = offset + done;
        let (word, skip) = (at / 8, at % 8);
        let n = (8 - skip).min(data.len() - done);
        store_bytes(&storage[word], skip, &data[done..done + n]);
        done += n;
    }
    true
}

/// Stores `data` (at most 8 bytes from `skip` on) into the word `cell`, leaving its
/// other bytes as they are.
pub(super) fn store_bytes(cell: &AtomicU64, skip: usize, data: &[u8]) {
    if let Ok(whole) = <[u8; 8]>::try_from(data) {
        cell.store(u64::from_ne_bytes(whole), Ordering::Relaxed);
        return;
    }
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let mut bytes = current.to_ne_bytes();
        bytes[skip..skip + data.len()].copy_from_slice(data);
        let new = u64::from_ne_bytes(bytes);
        match cell.compare_exchange(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(seen) => current = seen,
        }
    }
}
