//! Process-local state of the protocol: the table of segments this process has
//! attached (so it holds at most one slot per segment, and further references are an
//! `Arc`), and the lock that keeps two threads of one process from finalizing at once
//! (they share one token, so the finalizer word cannot tell them apart).
//!
//! It also keeps, without knowing its type, the cache of mappings this process let go
//! of (`buf/map_cache.rs` owns it; this room may not name the buffers room), and the
//! record of which in-flight reference a sender's ledger may still give back
//! ([`InFlightShares`]; `in_flight.rs` owns the ledgers).
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

/// The attached segments, by holder and segment. Entries whose value died are normally
/// removed by [`ProcessLocal::unregister`]; a sweep for any left over runs only when
/// the table has doubled since the last one, so that a register costs O(1) amortized
/// however many segments the process holds (or inherited across `fork`).
#[derive(Default)]
struct Table {
    entries: HashMap<(Token, SegmentKey), Entry>,
    /// The length at which the next sweep of dead entries runs.
    sweep_at: usize,
}

/// The smallest table that is swept of dead entries.
const MIN_SWEEP_AT: usize = 64;

/// Per-process protocol state; see the module docs.
#[derive(Default)]
pub struct ProcessLocal {
    attached: Mutex<Table>,
    finalize: Mutex<()>,
    /// The mapping cache of `buf/map_cache.rs`, created by its first use (type-erased:
    /// its entries hold the mappings of one `Os` type).
    map_cache: Mutex<Option<Box<dyn Any + Send>>>,
    in_flight: Mutex<InFlightShares>,
}

/// Which in-flight reference each slot holds, for the senders' ledgers
/// (`in_flight.rs`): an in-flight word is the sender's token alone, so a slot taken
/// over, released and claimed again by another share of this process holds the same
/// word as before, and only this record tells the two references apart. A ledger
/// records its entry here (an epoch, [`InFlightShares::record`]); every share that
/// claims an in-flight slot, in a ledger or not, erases what was recorded for that slot
/// ([`InFlightShares::claimed`]: the slot was free when it was claimed, so the reference
/// recorded there is gone); a ledger gives back only the latest record of a slot
/// ([`InFlightShares::is_latest`]). Both sides hold [`ProcessLocal::in_flight_shares`]
/// across their claim or give-back, so neither runs between the other's two steps.
/// Only the ledgers' live entries are kept: each forgets its own when it drops it.
#[derive(Default, Debug)]
pub struct InFlightShares {
    next: u64,
    latest: HashMap<(Token, SegmentKey, usize), u64>,
}

impl InFlightShares {
    /// Process `me` just claimed slot `slot` of segment `key` for a reference in
    /// flight: whatever a ledger recorded for that slot is superseded.
    pub fn claimed(&mut self, me: Token, key: SegmentKey, slot: usize) {
        if !cfg!(shmrc_plant = "share_supersedes_nothing") {
            self.latest.remove(&(me, key, slot));
        }
    }

    /// A ledger records the reference process `me` put in flight in slot `slot` of
    /// segment `key`: its epoch, latest until another share claims the slot.
    pub fn record(&mut self, me: Token, key: SegmentKey, slot: usize) -> u64 {
        self.next += 1;
        self.latest.insert((me, key, slot), self.next);
        self.next
    }

    /// Whether the record of epoch `epoch` is still the latest of its slot.
    pub fn is_latest(&self, me: Token, key: SegmentKey, slot: usize, epoch: u64) -> bool {
        cfg!(shmrc_plant = "give_back_ignores_epoch")
            || self.latest.get(&(me, key, slot)) == Some(&epoch)
    }

    /// A ledger drops its entry of epoch `epoch`: the record goes if it is the latest.
    pub fn forget(&mut self, me: Token, key: SegmentKey, slot: usize, epoch: u64) {
        if self.latest.get(&(me, key, slot)) == Some(&epoch) {
            self.latest.remove(&(me, key, slot));
        }
    }

    /// How many records are kept (the ledgers' live entries).
    pub fn records(&self) -> usize {
        self.latest.len()
    }
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
        let entry = table.entries.get(&(me, key))?.upgrade()?;
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
        if let Some(existing) = table.entries.get(&(me, key)).and_then(Weak::upgrade) {
            if let Ok(existing) = existing.downcast::<T>() {
                return Err(existing);
            }
        }
        if table.entries.len() >= table.sweep_at {
            table.entries.retain(|_, entry| entry.strong_count() > 0);
            table.sweep_at = (2 * table.entries.len()).max(MIN_SWEEP_AT);
        }
        let value: Arc<dyn Any + Send + Sync> = value.clone();
        table.entries.insert((me, key), Arc::downgrade(&value));
        Ok(())
    }

    /// Forgets `key` for `me` (when its last in-process reference is dropped).
    pub fn unregister(&self, me: Token, key: SegmentKey) {
        let mut table = lock(&self.attached);
        if table
            .entries
            .get(&(me, key))
            .is_some_and(|entry| entry.strong_count() == 0)
        {
            table.entries.remove(&(me, key));
        }
    }

    /// Number of segments this process has attached and still holds.
    pub fn attached_count(&self) -> usize {
        lock(&self.attached)
            .entries
            .values()
            .filter(|entry| entry.strong_count() > 0)
            .count()
    }

    /// The slot where `buf/map_cache.rs` keeps its cache (see the module docs).
    pub fn map_cache(&self) -> &Mutex<Option<Box<dyn Any + Send>>> {
        &self.map_cache
    }

    /// Serializes finalizers within this process (see [`spin_lock`]).
    pub fn finalize_lock(&self) -> MutexGuard<'_, ()> {
        spin_lock(&self.finalize)
    }

    /// The record of in-flight references ([`InFlightShares`]), locked (see
    /// [`spin_lock`]). Held across a share's claim and a ledger's give-back.
    pub fn in_flight_shares(&self) -> MutexGuard<'_, InFlightShares> {
        spin_lock(&self.in_flight)
    }
}

/// Locks `m`, waiting by [`crate::sync::spin`] rather than blocking, so that under loom
/// or shuttle two threads of one simulated process yield to the checker instead of
/// deadlocking it; a poisoned lock is taken as it is (as [`lock`]).
fn spin_lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    loop {
        match m.try_lock() {
            Ok(guard) => return guard,
            Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => crate::sync::spin(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u128) -> SegmentKey {
        SegmentKey {
            creator: Token::new(7, 1).unwrap(),
            nonce: n,
        }
    }

    #[test]
    fn a_register_finds_the_live_value_and_replaces_a_dead_one() {
        let local = ProcessLocal::new();
        let me = Token::new(42, 1).unwrap();
        let first = Arc::new(1u32);
        assert!(local.register(me, key(1), &first).is_ok());
        assert_eq!(
            local.register(me, key(1), &Arc::new(2u32)),
            Err(first.clone())
        );
        assert_eq!(local.lookup::<u32>(me, key(1)), Some(first.clone()));
        // Another holder token (a parent's, inherited across fork) never matches.
        assert_eq!(
            local.lookup::<u32>(Token::new(43, 1).unwrap(), key(1)),
            None
        );
        drop(first);
        assert_eq!(local.lookup::<u32>(me, key(1)), None);
        assert!(local.register(me, key(1), &Arc::new(3u32)).is_ok());
    }

    #[test]
    fn dead_entries_left_behind_are_swept_once_the_table_doubles() {
        let local = ProcessLocal::new();
        let me = Token::new(42, 1).unwrap();
        // Values dropped without unregister (as a drop racing a register could leave).
        for n in 0..1000 {
            local.register(me, key(n), &Arc::new(n)).unwrap();
        }
        assert_eq!(local.attached_count(), 0);
        let table_len = || lock(&local.attached).entries.len();
        assert!(
            table_len() <= 2 * MIN_SWEEP_AT,
            "swept as it grew: {}",
            table_len()
        );
        // Live ones are kept, and sweeps grow apart with them (amortized O(1)).
        let live: Vec<Arc<u128>> = (0..1000).map(Arc::new).collect();
        for (n, value) in live.iter().enumerate() {
            local.register(me, key(10_000 + n as u128), value).unwrap();
        }
        assert_eq!(local.attached_count(), 1000);
        let sweep_at = lock(&local.attached).sweep_at;
        assert!(
            (1000..=2 * 1000 + 2 * MIN_SWEEP_AT).contains(&sweep_at),
            "{sweep_at}"
        );
    }
}
