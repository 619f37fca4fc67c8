//! Sizing: `ftruncate` and `posix_fallocate` of an object ([`Os::allocate`], and the
//! hostile truncation of [`SimKernel::set_len`]): the seal, the space limit, and how the
//! memory of an object changes length, mapped (in place, zeroing what is cut off) or
//! not (new memory). The decision is taken under the kernel lock ([`Plan`]), the memory
//! work outside it.
//!
//! [`Os::allocate`]: crate::os::Os::allocate

use std::io;
use std::sync::Arc;

use super::kernel::{SimKernel, State};
use super::map::{Storage, store_bytes};
use super::objects::{Object, SimFile};
use super::process::SimOs;
use super::{MACHINE_BYTES, os_error};
use crate::error::{Error, Result};
use crate::sync::{AtomicU64, Ordering};

/// Who sets an object's length.
#[derive(Copy, Clone)]
enum Sizing {
    /// A hostile `ftruncate` by the test ([`SimKernel::set_len`]): no caller, no
    /// reservation.
    Truncate,
    /// [`Os::allocate`](crate::os::Os::allocate) by process `pid` of a file of process
    /// `owner`: the length and its reservation.
    Allocate { pid: u32, owner: u32 },
}

/// What a resize does, decided under the lock; the memory work is done outside it.
enum Plan {
    /// Nothing left to do.
    Done,
    /// A mapped object shrank to `from` bytes (published): zero `from..to` of
    /// `storage`, then end the object's pending zeroing.
    Zero {
        storage: Storage,
        from: u64,
        to: u64,
    },
    /// A mapped object grows within its memory: zero its bytes past `old_len`, then
    /// publish the length if nothing changed meanwhile.
    Grow { storage: Storage, old_len: u64 },
    /// An unmapped object: copy what is kept of `old` (the first `old_len` bytes at
    /// most) into new memory of the new length, then swap it in if nothing changed.
    Replace { old: Storage, old_len: u64 },
}

fn no_space(len: u64) -> Error {
    Error::NoSpace {
        len,
        source: io::Error::from_raw_os_error(libc::ENOSPC),
    }
}

/// What the sim answers where Linux would grow a mapped object in place: the memory
/// of a simulated object cannot grow under a live mapping.
fn cannot_grow_mapped(call: &'static str) -> Error {
    sim_limit(
        call,
        "the simulated kernel cannot grow the memory of a mapped object",
    )
}

/// What the sim answers where Linux would do something it cannot.
fn sim_limit(call: &'static str, why: &'static str) -> Error {
    Error::os(call, io::Error::new(io::ErrorKind::Unsupported, why))
}

fn words_for(len: u64) -> Option<usize> {
    usize::try_from(len.div_ceil(8)).ok()
}

impl State {
    /// Checks that `sizing` may set object `id` to `len` bytes (the caller alive and
    /// owning the file, the seal, the space limit) and returns the object.
    fn sizable(&mut self, id: u64, len: u64, sizing: Sizing) -> Result<&mut Object> {
        if let Sizing::Allocate { pid, owner } = sizing {
            self.owned(pid, owner, "ftruncate")?;
        }
        let o = self.object(id, "ftruncate")?;
        if o.sealed && len < o.len {
            return Err(os_error("ftruncate", libc::EPERM));
        }
        if let Sizing::Allocate { .. } = sizing {
            let old_reserved = o.reserved;
            if !self.space_for(old_reserved, len) {
                return Err(no_space(len));
            }
        }
        self.object(id, "ftruncate")
    }

    /// Sets the length of object `id` (its memory already covering it) and, for an
    /// allocate, its reservation.
    fn publish_len(&mut self, id: u64, len: u64, sizing: Sizing) {
        let Some(o) = self.objects.get_mut(&id) else {
            return;
        };
        o.len = len;
        if let Sizing::Allocate { .. } = sizing {
            let old_reserved = std::mem::replace(&mut o.reserved, len);
            self.reserved = self.reserved - old_reserved + len;
        }
    }

    /// Decides how object `id` becomes `len` bytes (`words` words of memory); a shrink
    /// of a mapped object is published here.
    fn plan_resize(&mut self, id: u64, len: u64, words: usize, sizing: Sizing) -> Result<Plan> {
        let grow_call = match sizing {
            Sizing::Truncate => "ftruncate",
            Sizing::Allocate { .. } => "posix_fallocate",
        };
        let o = self.sizable(id, len, sizing)?;
        let old_len = o.len;
        if o.maps == 0 {
            if len == old_len && words == o.storage.len() {
                self.publish_len(id, len, sizing);
                return Ok(Plan::Done);
            }
            return Ok(Plan::Replace {
                old: o.storage.clone(),
                old_len,
            });
        }
        if words > o.storage.len() {
            return Err(cannot_grow_mapped(grow_call));
        }
        if len > old_len {
            if o.zeroing > 0 {
                return Err(sim_limit(
                    grow_call,
                    "the simulated kernel cannot grow a mapped object back while \
                     another thread still zeroes what its shrink cut off",
                ));
            }
            return Ok(Plan::Grow {
                storage: o.storage.clone(),
                old_len,
            });
        }
        let plan = if len < old_len {
            o.zeroing += 1;
            Plan::Zero {
                storage: o.storage.clone(),
                from: len,
                to: old_len,
            }
        } else {
            Plan::Done
        };
        self.publish_len(id, len, sizing);
        Ok(plan)
    }

    fn space_for(&self, old_reserved: u64, len: u64) -> bool {
        let limit = self.space_limit.unwrap_or(MACHINE_BYTES).min(MACHINE_BYTES);
        (self.reserved - old_reserved)
            .checked_add(len)
            .is_some_and(|total| total <= limit)
    }
}

impl SimKernel {
    /// `ftruncate` of object `id` to `len` (no reservation change).
    pub(super) fn resize(&self, id: u64, len: u64) -> Result<()> {
        let words = words_for(len)
            .filter(|_| len <= MACHINE_BYTES)
            .ok_or_else(|| os_error("ftruncate", libc::EFBIG))?;
        self.set_object_len(id, len, words, Sizing::Truncate)
    }

    /// Sets the length of object `id` to `len` bytes (`words` words of memory), as
    /// `ftruncate` does on Linux: bytes cut off are gone, and read as 0 if the object
    /// grows back. An unmapped object gets new memory of its new length (the kept bytes
    /// copied, zeros after them); a mapped one keeps its memory (the sim cannot move
    /// it under a mapping, nor grow it beyond what it has): a shrink zeroes the bytes
    /// cut off (where Linux frees their pages, and a mapping touching them would get
    /// SIGBUS), a growth within that memory zeroes its new bytes first (which writes
    /// through a mapping beyond the shrunk length, SIGBUS on Linux, may have left).
    /// All atomics are touched outside the lock.
    fn set_object_len(&self, id: u64, len: u64, words: usize, sizing: Sizing) -> Result<()> {
        loop {
            match self.with(|st, _| st.plan_resize(id, len, words, sizing))? {
                Plan::Done => return Ok(()),
                Plan::Zero { storage, from, to } => {
                    zero_bytes(&storage, from, to);
                    self.with(|st, _| {
                        if let Some(o) = st.objects.get_mut(&id) {
                            debug_assert!(o.zeroing > 0, "a zeroing ended twice");
                            o.zeroing -= 1;
                        }
                    });
                    return Ok(());
                }
                Plan::Grow { storage, old_len } => {
                    zero_bytes(&storage, old_len, len);
                    let done = self.with(|st, _| {
                        let o = st.sizable(id, len, sizing)?;
                        if !Arc::ptr_eq(&o.storage, &storage) || o.len != old_len || o.zeroing > 0 {
                            return Ok(false);
                        }
                        st.publish_len(id, len, sizing);
                        Ok::<_, Error>(true)
                    })?;
                    if done {
                        return Ok(());
                    }
                }
                Plan::Replace { old, old_len } => {
                    let new = grown(&old, old_len.min(len), words);
                    self.publish_memory();
                    let done = self.with(|st, garbage| {
                        let o = st.sizable(id, len, sizing)?;
                        if !Arc::ptr_eq(&o.storage, &old) || o.len != old_len || o.maps > 0 {
                            return Ok(false);
                        }
                        garbage.push(std::mem::replace(&mut o.storage, new.clone()));
                        st.publish_len(id, len, sizing);
                        Ok::<_, Error>(true)
                    });
                    drop(new);
                    drop(old);
                    if done? {
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// [`Os::allocate`](crate::os::Os::allocate): the length and its reservation.
pub(super) fn allocate(os: &SimOs, file: &SimFile, len: u64) -> Result<()> {
    os.check_file(file)?;
    let words = words_for(len).ok_or_else(|| no_space(len))?;
    let sizing = Sizing::Allocate {
        pid: os.pid,
        owner: file.owner,
    };
    os.kernel.set_object_len(file.object, len, words, sizing)
}

/// New storage of `words` words holding the first `old_len` bytes of `old` (zeros
/// after them, as `ftruncate` makes).
fn grown(old: &[AtomicU64], old_len: u64, words: usize) -> Storage {
    let keep = usize::try_from(old_len).unwrap_or(usize::MAX);
    Arc::new(
        (0..words)
            .map(|i| {
                let value = match old.get(i) {
                    Some(word) if i * 8 < keep => {
                        let value = word.load(Ordering::Relaxed);
                        let valid = keep - i * 8;
                        if valid >= 8 {
                            value
                        } else {
                            let mut bytes = value.to_ne_bytes();
                            bytes[valid..].fill(0);
                            u64::from_ne_bytes(bytes)
                        }
                    }
                    _ => 0,
                };
                AtomicU64::new(value)
            })
            .collect(),
    )
}

/// Zeroes bytes `from..to` of `storage`, and the rest of the word byte `to` falls in
/// (bytes past an object's end read as 0), through the same atomic words its mappings
/// see. Call it outside the kernel lock.
fn zero_bytes(storage: &[AtomicU64], from: u64, to: u64) {
    let end = words_for(to).map_or(storage.len(), |w| w.min(storage.len()));
    let Ok(from) = usize::try_from(from) else {
        return;
    };
    let (mut word, skip) = (from / 8, from % 8);
    if skip != 0 && word < end {
        store_bytes(&storage[word], skip, &[0; 8][skip..]);
        word += 1;
    }
    for cell in storage.get(word..end).unwrap_or_default() {
        cell.store(0, Ordering::Relaxed);
    }
}
