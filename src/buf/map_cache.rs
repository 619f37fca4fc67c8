//! The mapping cache: the mappings of recycled (pooled) segments this process let go
//! of, kept so that the next attach of the same segment is a slot claim with no
//! `shm_open`, `mmap` or `munmap`.
//!
//! A consumer of an [`crate::ShmPool`] attaches the same few segments over and over
//! (each a new use, a new generation). When it releases one that another process still
//! holds (the pool does, between uses), the mapping goes here instead of being
//! unmapped, if the segment is known to be a pool's: a memfd with holder slots (only a
//! pool makes those), or a named segment in a recycled use (generation 1 or more: the
//! header says no more, so a pool's first use of a named segment is not cached, and a
//! plain segment never is); an attach of a handle of that segment takes it back out and runs the
//! holder protocol on it exactly as on a fresh mapping (`hold` in `buf/mod.rs`): the
//! handle's identity checked against the header, the generation checked early, the
//! in-flight reference taken over (or a slot claimed), and the generation checked again
//! *after* the slot is ours. So a cached mapping of an earlier use is never handed out
//! as a newer one's data: a mismatch is [`crate::Error::Stale`] and the mapping is
//! dropped with it, as is any entry an attach takes out and cannot use.
//!
//! # What is the same segment
//! An entry is the mapping of one segment, for one holder (a process's token), keyed by
//! the segment's [`SegmentKey`] (its creator and random nonce, which every handle
//! carries):
//! - a file_system segment also by its name. A name unlinked and created again is
//!   another segment with another nonce: its handles miss. A handle of the old one hits
//!   the old mapping (still that file), whose claim then fails as the protocol says
//!   (`Gone` once it was finalized);
//! - a memfd also by the `(st_dev, st_ino)` and length of the descriptor that arrives
//!   with each handle (one `fstat`, against an `mmap` and `munmap` saved): the cached
//!   mapping keeps its memfd in existence, so no other file can have that identity.
//!
//! # Bounds
//! At most [`MapCacheLimits::max_entries`] mappings (64; never more than 1/64 of
//! `vm.max_map_count`, read once, so that the cache can never be what runs a process out
//! of mappings) and [`MapCacheLimits::max_bytes`] bytes (1 GiB, a pool's own default
//! bound on the idle bytes it keeps: while the pool keeps a segment, its cached mapping
//! costs no memory of its own); the entry let go of longest ago goes first. A mapping keeps its pages allocated even after its segment
//! is unlinked or its pool gives the memfd back, so each insertion and each attach that
//! looks here first drops the entries whose creator's slot (slot 0, which a pool holds
//! for as long as it keeps the segment) is no longer held by a live process: given
//! back, destroyed, or its pool's process dead (nothing finalizes a memfd, so a
//! SIGKILLed pool's token stays in slot 0; each token is asked about once a look). The
//! memory a process keeps mapped beyond its attached segments is thus bounded by the
//! byte limit, and lasts until the process's next attach or release at most.
//! `SHMRC_MAP_CACHE=off` (or `0`) turns the cache off; a number sets the most entries
//! (within the `vm.max_map_count` bound); anything else is
//! [`crate::Error::InvalidArgument`] at the next attach.
//!
//! # Processes
//! The cache hangs off the process's [`crate::local::ProcessLocal`] (one per simulated
//! process in the sim, so the checkers explore it per process). Entries carry the token
//! of the process that let go of them: a child forked with the cache filled never uses
//! its parent's entries (its token differs). Nor does it inherit their mappings: a
//! mapping is marked `MADV_DONTFORK` while it sits here ([`Mapping::inherit_on_fork`];
//! inheritable again when an attach takes it back out), so a child pins no
//! copy-on-write copy of it, whether or not it ever attaches; at its first look it
//! forgets those entries without unmapping (their ranges are not its mappings). The
//! one exception is a mapping that something besides the releasing reference still
//! holds when it is let go of (a channel's ledger watching its slots), which a child
//! may read: it stays inheritable, and a child drops its copy at its first look. The
//! cache's lock is only ever tried, never waited for: a contended lock, or one a fork
//! left locked in the child, is a miss, not a wait.

use std::collections::VecDeque;
use std::sync::{Arc, MutexGuard, OnceLock, TryLockError};

use crate::error::Result;
use crate::local::SegmentKey;
use crate::os::{Mapping, Os};
use crate::protocol::holders;
use crate::protocol::segment::{Fields, Header, Opened};
use crate::token::Token;

/// How much the mapping cache of a process keeps (see the module docs).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct MapCacheLimits {
    /// Most mappings kept (0: the cache is off).
    pub max_entries: usize,
    /// Most bytes of mappings kept.
    pub max_bytes: usize,
}

/// The default number of entries (before the `vm.max_map_count` bound).
pub const DEFAULT_MAX_ENTRIES: usize = 64;
/// The default number of bytes.
pub const DEFAULT_MAX_BYTES: usize = 1 << 30;
/// The share of `vm.max_map_count` the cache may use at most (1 in this many).
pub const MAP_COUNT_SHARE: usize = 64;
/// The kernel's default `vm.max_map_count`, assumed where it cannot be read.
const DEFAULT_MAX_MAP_COUNT: usize = 65_530;

/// What a process's mapping cache holds and did (for the checkers and the tests).
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct MapCacheStats {
    /// Mappings kept now.
    pub entries: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Attaches that took a cached mapping.
    pub hits: u64,
    /// Attaches that looked here and found none to take.
    pub misses: u64,
    /// Entries dropped for a bound, or because their segment was given back (or its
    /// pool's process died).
    pub evicted: u64,
}

/// Which file a cached mapping is of, besides its [`SegmentKey`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Identity<'a> {
    /// A named segment's name.
    Named(&'a str),
    /// A memfd's `(st_dev, st_ino)` and length.
    Memfd((u64, u64), u64),
}

impl Identity<'_> {
    fn owned(&self) -> OwnedIdentity {
        match self {
            Identity::Named(name) => OwnedIdentity::Named((*name).to_owned()),
            Identity::Memfd(id, len) => OwnedIdentity::Memfd(*id, *len),
        }
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
enum OwnedIdentity {
    Named(String),
    Memfd((u64, u64), u64),
}

impl OwnedIdentity {
    fn is(&self, other: &Identity<'_>) -> bool {
        match (self, other) {
            (OwnedIdentity::Named(a), Identity::Named(b)) => a == b,
            (OwnedIdentity::Memfd(a, la), Identity::Memfd(b, lb)) => a == b && la == lb,
            _ => false,
        }
    }
}

struct Entry<O: Os> {
    holder: Token,
    key: SegmentKey,
    identity: OwnedIdentity,
    map: Arc<O::Map>,
    fields: Fields,
    /// Kept out of children forked while it is cached ([`Mapping::inherit_on_fork`]).
    unforked: bool,
}

impl<O: Os> Entry<O> {
    /// Whether the segment's creator slot is no longer held by a live process (a pool
    /// gave it back, it was destroyed, or the pool's process died: nothing finalizes a
    /// memfd): the mapping would only keep its pages allocated. `alive` says whether a
    /// token's process lives.
    fn given_back(&self, alive: &mut impl FnMut(Token) -> bool) -> bool {
        let capacity = self.fields.layout.capacity;
        let word = Header::of(&*self.map, capacity).and_then(|h| h.holders().slot_word(0));
        match word.map(holders::Slot::decode) {
            Some(slot) => slot.owner().is_none_or(|owner| !alive(owner)),
            None => true,
        }
    }
}

/// Asks `os` whether a token's process lives, once per token (one look at the cache).
fn liveness<O: Os>(os: &O) -> impl FnMut(Token) -> bool + '_ {
    let mut known: Vec<(Token, bool)> = Vec::new();
    move |token| match known.iter().find(|(t, _)| *t == token) {
        Some(&(_, alive)) => alive,
        None => {
            let alive = os.is_alive(token);
            known.push((token, alive));
            alive
        }
    }
}

struct Cache<O: Os> {
    /// The one let go of longest ago first.
    entries: VecDeque<Entry<O>>,
    bytes: usize,
    /// Set by [`configure`]; else the process-wide [`limits`].
    limits: Option<MapCacheLimits>,
    stats: MapCacheStats,
}

impl<O: Os> Cache<O> {
    fn new() -> Cache<O> {
        Cache {
            entries: VecDeque::new(),
            bytes: 0,
            limits: None,
            stats: MapCacheStats::default(),
        }
    }

    /// Moves into `out` the entries of another process (a parent's, across `fork`) and
    /// those whose segment was given back or whose pool's process died.
    fn prune(&mut self, os: &O, me: Token, out: &mut Vec<Entry<O>>) {
        let mut alive = liveness(os);
        let mut index = 0;
        while index < self.entries.len() {
            let entry = &self.entries[index];
            if entry.holder != me || entry.given_back(&mut alive) {
                let entry = self.entries.remove(index).expect("in range");
                self.bytes -= entry.map.len();
                self.stats.evicted += 1;
                if entry.holder != me && entry.unforked {
                    // A parent's, not mapped in this child: unmapping its range would
                    // unmap whatever this process mapped there since.
                    std::mem::forget(entry);
                } else {
                    out.push(entry);
                }
            } else {
                index += 1;
            }
        }
    }

    fn remove(&mut self, index: usize) -> Entry<O> {
        let entry = self.entries.remove(index).expect("in range");
        self.bytes -= entry.map.len();
        entry
    }
}

/// The process-wide limits: `SHMRC_MAP_CACHE` and `vm.max_map_count`, read once.
pub fn limits() -> Result<MapCacheLimits> {
    static LIMITS: OnceLock<std::result::Result<MapCacheLimits, String>> = OnceLock::new();
    LIMITS
        .get_or_init(|| {
            let entries = match crate::environment::var("SHMRC_MAP_CACHE") {
                Err(bad) => return Err(bad.why),
                Ok(None) => DEFAULT_MAX_ENTRIES,
                Ok(Some(v)) if v == "off" => 0,
                Ok(Some(v)) => v.parse::<usize>().map_err(|_| {
                    format!(
                        "SHMRC_MAP_CACHE={v:?}: not `off` nor a number of cached mappings \
                         (the mapping cache of pooled segments)"
                    )
                })?,
            };
            Ok(MapCacheLimits {
                max_entries: entries.min(max_map_count() / MAP_COUNT_SHARE),
                max_bytes: DEFAULT_MAX_BYTES,
            })
        })
        .clone()
        .map_err(crate::error::Error::InvalidArgument)
}

/// `vm.max_map_count`, or the kernel's default where it cannot be read.
fn max_map_count() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_MAP_COUNT)
}

/// Runs `f` on the cache of `os`'s process, if its lock is free (see the module docs)
/// and it holds mappings of this `Os` type (or none yet).
fn with_cache<O: Os, R>(os: &O, f: impl FnOnce(&mut Cache<O>) -> R) -> Option<R> {
    let slot = os.local().map_cache();
    let mut guard: MutexGuard<'_, _> = match slot.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    let cache = guard.get_or_insert_with(|| Box::new(Cache::<O>::new()));
    cache.downcast_mut::<Cache<O>>().map(f)
}

/// The cached mapping of the segment `key` (the one a handle describes), for process
/// `me`, if there is one of that file (`identity`): taken out of the cache, for the
/// caller to hold as it would a fresh one (see the module docs). `Ok(None)`: open it
/// afresh.
pub fn take<O: Os>(
    os: &O,
    me: Token,
    key: SegmentKey,
    identity: Identity<'_>,
) -> Result<Option<Opened<O>>> {
    if limits()?.max_entries == 0 {
        return Ok(None);
    }
    let mut dropped = Vec::new();
    let taken = with_cache(os, |cache: &mut Cache<O>| {
        cache.prune(os, me, &mut dropped);
        let found = cache
            .entries
            .iter()
            .position(|e| e.holder == me && e.key == key);
        let Some(index) = found else {
            cache.stats.misses += 1;
            return None;
        };
        let entry = cache.remove(index);
        // Another file under the same key (a forged descriptor), or the mapping still
        // shared (a release of it not finished): dropped, and opened afresh.
        let usable = entry.identity.is(&identity);
        match usable.then(|| Arc::try_unwrap(entry.map)) {
            // Inherited by children again, as every attached mapping is.
            Some(Ok(map)) if !entry.unforked || map.inherit_on_fork(true) => {
                cache.stats.hits += 1;
                Some(Opened {
                    map,
                    fields: entry.fields,
                })
            }
            _ => {
                cache.stats.misses += 1;
                None
            }
        }
    })
    .flatten();
    drop(dropped);
    Ok(taken)
}

/// Keeps `map` (of the segment `fields` describes, the file `identity`; a clone of the
/// releasing reference's, which goes right after), which process `holder` just let go
/// of while the segment lives on, for its next attach (see the
/// module docs). Evicts to stay within the limits; keeps nothing when the cache is off
/// or the segment's creator slot is no longer held.
pub fn keep<O: Os>(
    os: &O,
    holder: Token,
    identity: Identity<'_>,
    map: Arc<O::Map>,
    fields: Fields,
) {
    // Out of children forked while it is cached, if no one but the releasing reference
    // (the caller's, gone right after this) has it: nothing can clone it once it is
    // here, and a holder besides (a channel's ledger watching the slots) may read it in
    // a child.
    let unforked = Arc::strong_count(&map) <= 2 && map.inherit_on_fork(false);
    let entry = Entry::<O> {
        holder,
        key: fields.key(),
        identity: identity.owned(),
        map,
        fields,
        unforked,
    };
    if entry.given_back(&mut liveness(os)) {
        return;
    }
    let mut dropped = Vec::new();
    with_cache(os, |cache: &mut Cache<O>| {
        let Ok(limits) = cache.limits.map_or_else(limits, Ok) else {
            return;
        };
        cache.prune(os, holder, &mut dropped);
        if let Some(index) = cache.entries.iter().position(|e| e.key == entry.key) {
            dropped.push(cache.remove(index));
        }
        let len = entry.map.len();
        let fits = limits.max_entries > 0 && len <= limits.max_bytes;
        let (count, bytes) = if fits { (1, len) } else { (0, 0) };
        // Also when the limits shrank (`configure`): down to them, the oldest first.
        while !cache.entries.is_empty()
            && (cache.entries.len() + count > limits.max_entries
                || cache.bytes + bytes > limits.max_bytes)
        {
            dropped.push(cache.remove(0));
            cache.stats.evicted += 1;
        }
        if fits {
            cache.bytes += len;
            cache.entries.push_back(entry);
        } else {
            dropped.push(entry);
        }
    });
    // The evicted mappings are unmapped here, outside the lock.
    drop(dropped);
}

#[cfg(feature = "checkers")]
/// Sets the limits of the cache of `os`'s process (the checkers' knob: the tests bound
/// it small), dropping what exceeds them at the next insertion.
pub fn configure<O: Os>(os: &O, limits: MapCacheLimits) {
    with_cache(os, |cache: &mut Cache<O>| cache.limits = Some(limits));
}

#[cfg(feature = "checkers")]
/// Drops now the entries of `os`'s process whose segment was given back or whose pool's
/// process died (what the next attach or release would drop); returns how many.
pub fn trim<O: Os>(os: &O) -> usize {
    let mut dropped = Vec::new();
    with_cache(os, |cache: &mut Cache<O>| {
        let before = cache.entries.len();
        cache.prune(os, os.current(), &mut dropped);
        before - cache.entries.len()
    })
    .unwrap_or(0)
}

#[cfg(any(test, feature = "checkers"))]
/// What the cache of `os`'s process holds and did.
pub fn stats<O: Os>(os: &O) -> MapCacheStats {
    with_cache(os, |cache: &mut Cache<O>| MapCacheStats {
        entries: cache.entries.len(),
        bytes: cache.bytes,
        ..cache.stats
    })
    .unwrap_or_default()
}
