//! [`ShmPool`]: recycled file_system buffers, the way data loaders reuse shared memory.
//! A buffer handed out by the pool goes back to it when the last `ShmBuf` of this
//! process is dropped; the next [`ShmPool::get`] of the same length reuses its segment
//! (no `shm_open`, no page reservation) once no other process holds it, through the
//! recycle step of the holder protocol ([`crate::holders::recycle`]), which bumps the
//! segment's generation so that a handle of the earlier use fails with
//! [`Error::Stale`]. The pool owns the policy (which segment, how many kept, when to
//! give memory back); the protocol owns the safety.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::buf::{CreateOptions, ShmBuf};
use crate::error::{Error, Result};
use crate::os::Os;
use crate::strategy::Strategy;

/// How much an [`ShmPool`] keeps while nobody uses it.
///
/// ```
/// use std::time::Duration;
/// let limits = shmrc::PoolLimits::default();
/// assert_eq!(limits.max_idle_buffers, 16);
/// assert_eq!(limits.max_idle_bytes, 1 << 30);
/// assert_eq!(limits.idle_timeout, Duration::from_secs(10));
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct PoolLimits {
    /// Most idle buffers kept (the oldest idle ones go first).
    pub max_idle_buffers: usize,
    /// Most bytes of idle buffers kept.
    pub max_idle_bytes: usize,
    /// An idle buffer not reused for this long is given back (at the next call of
    /// [`ShmPool::get`] or [`ShmPool::trim`]).
    pub idle_timeout: Duration,
}

impl Default for PoolLimits {
    fn default() -> PoolLimits {
        PoolLimits {
            max_idle_buffers: 16,
            max_idle_bytes: 1 << 30,
            idle_timeout: Duration::from_secs(10),
        }
    }
}

/// What [`ShmPool::stats`] counts.
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmPool, Strategy};
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(Namespace::new("shmrc-doc-poolstats")?);
/// let pool = ShmPool::new(options, shmrc::PoolLimits::default())?;
/// drop(pool.get(4096)?);
/// drop(pool.get(4096)?); // the same segment, recycled
/// let stats = pool.stats();
/// assert_eq!((stats.created, stats.recycled, stats.idle), (1, 1, 1));
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct PoolStats {
    /// Segments created.
    pub created: u64,
    /// Buffers handed out from a recycled segment.
    pub recycled: u64,
    /// Segments given back (limits or idle timeout).
    pub given_back: u64,
    /// Segments kept now that this process does not use.
    pub idle: usize,
    /// Their bytes.
    pub idle_bytes: usize,
    /// Segments kept now that this process uses.
    pub in_use: usize,
}

struct Entry<O: Os> {
    buf: ShmBuf<O>,
    /// When it was last handed out (idle time is counted from there).
    handed_out: Instant,
}

impl<O: Os> Entry<O> {
    /// Nobody in this process uses it but the pool (other processes may still).
    fn unused_here(&self) -> bool {
        self.buf.local_references() == 1
    }
}

struct State<O: Os> {
    entries: Vec<Entry<O>>,
    stats: PoolStats,
}

/// A pool of recycled file_system buffers (see the module docs of `shmrc::pool`).
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Error, Namespace, ShmBuf, ShmPool, Strategy};
///
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(Namespace::new("shmrc-doc-pool")?);
/// let pool = ShmPool::new(options, shmrc::PoolLimits::default())?;
/// let batch = pool.get(1 << 20)?;
/// batch.write_at(0, b"batch 1")?;
/// let bytes = batch.share()?.into_bytes()?; // sent to a consumer...
/// let consumer = ShmBuf::attach(shmrc::ShareHandle::from_bytes(&bytes)?)?;
/// drop(consumer); // ...which used it and let go
/// drop(batch); // back to the pool: nobody holds the segment any more
/// let next = pool.get(1 << 20)?; // the same segment, a new use
/// assert_eq!(next.generation(), 1);
/// // A copy of the old handle's bytes reads nothing of the new use.
/// let old = shmrc::ShareHandle::from_bytes(&bytes)?;
/// assert!(matches!(ShmBuf::attach(old), Err(Error::Stale { .. })));
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct ShmPool<O: Os = crate::DefaultOs> {
    os: O,
    options: CreateOptions,
    limits: PoolLimits,
    state: Mutex<State<O>>,
}

impl<O: Os> ShmPool<O> {
    /// A pool of buffers created as process `os` with `options` (which must ask for the
    /// file_system strategy, explicitly or as the process-wide one).
    #[doc(hidden)]
    pub fn with_os(os: O, options: CreateOptions, limits: PoolLimits) -> Result<ShmPool<O>> {
        if options.resolved_strategy() != Strategy::FileSystem {
            return Err(Error::InvalidArgument(
                "ShmPool recycles file_system buffers only: a memfd has no holder slots, so \
                 the pool could not tell when no other process maps it any more"
                    .into(),
            ));
        }
        Ok(ShmPool {
            os,
            options,
            limits,
            state: Mutex::new(State {
                entries: Vec::new(),
                stats: PoolStats::default(),
            }),
        })
    }

    /// A buffer of `len` bytes: a recycled segment of that length that nobody holds any
    /// more, else a new one. Its contents are those of its previous use (not zeroed:
    /// the producer overwrites them). Gives back idle buffers past the limits first.
    /// A zero or too large `len` is [`Error::InvalidArgument`].
    ///
    /// ```
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use shmrc::{CreateOptions, Namespace, ShmPool, Strategy};
    /// let options = CreateOptions::new()
    ///     .strategy(Strategy::FileSystem)
    ///     .namespace(Namespace::new("shmrc-doc-poolget")?);
    /// let pool = ShmPool::new(options, shmrc::PoolLimits::default())?;
    /// let a = pool.get(64)?;
    /// let b = pool.get(64)?; // `a` is in use: another segment
    /// assert_ne!(a.name(), b.name());
    /// let name = a.name().map(str::to_owned);
    /// drop(a);
    /// assert_eq!(pool.get(64)?.name().map(str::to_owned), name); // reused
    /// assert!(pool.get(0).is_err());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn get(&self, len: usize) -> Result<ShmBuf<O>> {
        let mut state = self.lock();
        let now = Instant::now();
        self.trim_locked(&mut state, now)?;
        for entry in state.entries.iter_mut() {
            if entry.buf.len() == len && entry.unused_here() && entry.buf.recycle()? {
                entry.handed_out = now;
                let buf = entry.buf.clone();
                state.stats.recycled += 1;
                return Ok(buf);
            }
        }
        let buf = ShmBuf::create_with(&self.os, len, &self.options)?;
        state.entries.push(Entry {
            buf: buf.clone(),
            handed_out: now,
        });
        state.stats.created += 1;
        Ok(buf)
    }

    /// Gives back idle buffers past the limits or the idle timeout now; returns how
    /// many. (A pool also trims at each [`ShmPool::get`].)
    ///
    /// ```
    /// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use std::time::Duration;
    /// use shmrc::{CreateOptions, Namespace, PoolLimits, ShmPool, Strategy};
    /// let ns = Namespace::new("shmrc-doc-pooltrim")?;
    /// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
    /// let limits = PoolLimits { idle_timeout: Duration::ZERO, ..PoolLimits::default() };
    /// let pool = ShmPool::new(options, limits)?;
    /// drop(pool.get(64)?);
    /// assert_eq!(pool.trim()?, 1); // idle past its (zero) timeout: unlinked
    /// assert!(shmrc::inspect(&ns)?.segments.is_empty());
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn trim(&self) -> Result<usize> {
        let mut state = self.lock();
        self.trim_locked(&mut state, Instant::now())
    }

    /// What the pool did and keeps.
    pub fn stats(&self) -> PoolStats {
        let state = self.lock();
        let mut stats = state.stats;
        for entry in &state.entries {
            if entry.unused_here() {
                stats.idle += 1;
                stats.idle_bytes += entry.buf.len();
            } else {
                stats.in_use += 1;
            }
        }
        stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<O>> {
        // A panic while holding the lock leaves the entries consistent (a Vec edit).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops idle entries past the idle timeout, then the oldest idle ones past the
    /// count and byte limits. Dropping the pool's reference releases it: the segment is
    /// unlinked, or by its last holder if another process still holds it.
    fn trim_locked(&self, state: &mut State<O>, now: Instant) -> Result<usize> {
        let limits = self.limits;
        let mut idle: Vec<(Instant, usize)> = state
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.unused_here())
            .map(|(i, e)| (e.handed_out, i))
            .collect();
        idle.sort();
        let (mut count, mut bytes) = (idle.len(), 0usize);
        for &(_, i) in &idle {
            bytes += state.entries[i].buf.len();
        }
        let mut drop_now = Vec::new();
        for &(handed_out, i) in &idle {
            let expired = now.saturating_duration_since(handed_out) >= limits.idle_timeout;
            if expired || count > limits.max_idle_buffers || bytes > limits.max_idle_bytes {
                count -= 1;
                bytes -= state.entries[i].buf.len();
                drop_now.push(i);
            }
        }
        drop_now.sort_unstable_by(|a, b| b.cmp(a));
        let given_back = drop_now.len();
        for i in drop_now {
            let entry = state.entries.swap_remove(i);
            entry.buf.release()?;
        }
        state.stats.given_back += given_back as u64;
        Ok(given_back)
    }
}

impl<O: Os> std::fmt::Debug for ShmPool<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmPool")
            .field("limits", &self.limits)
            .field("stats", &self.stats())
            .finish()
    }
}
