//! Process-local state of the protocol: the table of segments this process has
//! attached (so it holds at most one slot per segment, and further references are an
//! `Arc`), and the lock that keeps two threads of one process from finalizing at once
//! (they share one token, so the finalizer word cannot tell them apart).
//!
//! Each [`crate::os::Os`] value reaches one `ProcessLocal`: a static for the real
//! process, one per simulated process for the sim.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};

use crate::token::Token;

/// Identifies a segment for the life of the machine: its creator and its random nonce.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct SegmentKey {
    /// The creating process.
    pub creator: Token,
    /// The creator's random nonce.
    pub nonce: u128,
}

type Entry = Weak<dyn Any + Send + Sync>;

/// Per-process protocol state; see the module docs.
#[derive(Default)]
pub struct ProcessLocal {
    attached: Mutex<HashMap<(Token, SegmentKey), Entry>>,
    finalize: Mutex<()>,
}

impl ProcessLocal {
    /// An empty table.
    pub fn new() -> ProcessLocal {
        ProcessLocal::default()
    }

    /// The live in-process value registered for `key` by process `me`, if any.
    /// Entries of another token (a parent's, inherited across `fork`) never match.
    pub fn lookup<T: Any + Send + Sync>(&self, me: Token, key: SegmentKey) -> Option<Arc<T>> {
        let table = lock(&self.attached);
        let entry = table.get(&(me, key))?.upgrade()?;
        entry.downcast::<T>().ok()
    }

    /// Registers `value` for `key` unless a live value is already there, which is then
    /// returned instead (`Err`), so that concurrent attaches of one segment in one
    /// process end with one holder slot.
    pub fn register<T: Any + Send + Sync>(
        &self,
        me: Token,
        key: SegmentKey,
        value: &Arc<T>,
    ) -> Result<(), Arc<T>> {
        let mut table = lock(&self.attached);
        if let Some(existing) = table.get(&(me, key)).and_then(Weak::upgrade) {
            if let Ok(existing) = existing.downcast::<T>() {
                return Err(existing);
            }
        }
        table.retain(|_, entry| entry.strong_count() > 0);
        let value: Arc<dyn Any + Send + Sync> = value.clone();
        table.insert((me, key), Arc::downgrade(&value));
        Ok(())
    }

    /// Forgets `key` for `me` (when its last in-process reference is dropped).
    pub fn unregister(&self, me: Token, key: SegmentKey) {
        let mut table = lock(&self.attached);
        if table
            .get(&(me, key))
            .is_some_and(|entry| entry.strong_count() == 0)
        {
            table.remove(&(me, key));
        }
    }

    /// Number of segments this process has attached and still holds.
    pub fn attached_count(&self) -> usize {
        lock(&self.attached)
            .values()
            .filter(|entry| entry.strong_count() > 0)
            .count()
    }

    /// Serializes finalizers within this process. Waits by [`crate::sync::spin`]
    /// rather than blocking, so that under loom or shuttle two threads of one simulated
    /// process yield to the checker instead of deadlocking it.
    pub fn finalize_lock(&self) -> MutexGuard<'_, ()> {
        loop {
            match self.finalize.try_lock() {
                Ok(guard) => return guard,
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => crate::sync::spin(),
            }
        }
    }
}

impl std::fmt::Debug for ProcessLocal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessLocal")
            .field("attached", &self.attached_count())
            .finish()
    }
}

/// Locks `m`, recovering from poisoning: the tables stay consistent because no code
/// holding these locks can panic half-way through an update.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
