//! [`ShmPool`]: recycled buffers, the way data loaders reuse shared memory, for both
//! strategies.
//! A buffer handed out by the pool goes back to it when the last `ShmBuf` of this
//! process is dropped. Each segment the pool keeps is then, for this process:
//! - **in use**: a `ShmBuf` of this process (besides the pool's own) still uses it;
//! - **lent**: nothing in this process uses it, but another process still holds it (a
//!   consumer further down a pipeline, or a handle in flight to one): a holder slot
//!   other than the pool's own is taken. It cannot be reused until that holder lets go;
//! - **idle**: nobody uses or holds it. The next [`ShmPool::get`] of its length reuses
//!   its segment (no `shm_open`, no page reservation) through the recycle step of the
//!   holder protocol ([`crate::protocol::holders::recycle`]), which bumps the segment's
//!   generation so that a handle of the earlier use fails with
//!   [`Error::Stale`](crate::Error::Stale).
//!
//! # file_descriptor pools
//! A plain memfd has no holder slots (the kernel counts its descriptors, and tells
//! nobody when the last consumer lets go). A pool's memfds get the same holder slots
//! as a file_system segment ([`ShmBuf::create_recyclable`]): a handle carries an
//! in-flight reference, an attach takes it over (or claims a slot) and checks the
//! generation, a release vacates its slot. No one ever finalizes or unlinks a memfd:
//! the kernel frees it with its last descriptor and mapping. A consumer killed while
//! it holds one leaves its slot to the pool's next recycle, which reclaims a dead
//! holder's slot (so no sweep or manager is involved). The handles still travel only
//! over a Unix socket ([`crate::transport`]).
//!
//! Lent is told from idle by a look at the holder slots
//! ([`crate::protocol::holders::others_hold`]), without a syscall. A holder that died without
//! letting go keeps its buffer lent until a sweep (or the manager) reclaims its slot,
//! until the idle timeout gives the buffer back, or until a `get` that finds no idle
//! buffer of its length makes its one recycle attempt on a lent one (the lent ones of
//! that length take turns): the recycle reclaims dead holders' slots, and rolls back
//! at the first live one.
//!
//! # Limits
//! [`PoolLimits::max_idle_buffers`] and [`PoolLimits::max_idle_bytes`] bound idle
//! buffers only: a deep pipeline lends many buffers at once, and giving those back
//! would only make the pool create new ones. [`PoolLimits::idle_timeout`] bounds idle
//! and lent buffers alike; giving back a lent buffer drops only this process's
//! reference (the other holder keeps its memory, and the last one to let go unlinks
//! it).
//!
//! # Order
//! The pool keeps its buffers in the order it last handed them out: a reused one moves
//! to the back. `get` tries the one handed out longest ago first (its consumers have had
//! the longest to let go), and the limits give back the idle ones handed out longest
//! ago first.
//!
//! # Typed loans
//! `pool/loan.rs`: [`ShmPool::loan`] wraps `get` in a [`Loan<T>`] (the creator's
//! `&mut [T]`) that becomes a read-only [`Sample<T>`] (`&[T]` in every process), with no
//! `unsafe` in user code; what that read-only promise rests on, and where it ends, is in
//! the docs of [`Sample`].
//!
//! The pool owns the policy (which segment, how many kept, when to give memory back);
//! the protocol owns the safety.

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod loan;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::buf::{CreateOptions, ShmBuf};
use crate::error::Result;
use crate::manager::DefaultOs;
use crate::os::Os;

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use loan::{Loan, Sample};

/// How much an [`ShmPool`] keeps of what this process does not use (see the module
/// docs of `shmrc::pool` for idle and lent buffers).
///
/// ```
/// use std::time::Duration;
/// let limits = shmrc::PoolLimits::default();
/// assert_eq!(limits.max_idle_buffers, 64);
/// assert_eq!(limits.max_idle_bytes, 1 << 30);
/// assert_eq!(limits.idle_timeout, Duration::from_secs(10));
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct PoolLimits {
    /// Most idle buffers kept (the ones handed out longest ago go first). Lent buffers
    /// do not count.
    pub max_idle_buffers: usize,
    /// Most bytes of idle buffers kept. Lent buffers do not count.
    pub max_idle_bytes: usize,
    /// A buffer this process has not used since it handed it out this long ago, idle
    /// or lent, is given back (at the next call of [`ShmPool::get`] or
    /// [`ShmPool::trim`]).
    pub idle_timeout: Duration,
}

impl Default for PoolLimits {
    fn default() -> PoolLimits {
        PoolLimits {
            // 16 (the earlier default) made a pipeline 64 deep churn: give back,
            // then create again.
            max_idle_buffers: 64,
            max_idle_bytes: 1 << 30,
            idle_timeout: Duration::from_secs(10),
        }
    }
}

/// What [`ShmPool::stats`] counts.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
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
/// let buf = pool.get(4096)?;
/// let handle = buf.share()?; // on its way to a consumer, which holds the segment
/// drop(buf);
/// let stats = pool.stats();
/// assert_eq!((stats.in_use, stats.lent, stats.idle), (0, 1, 0)); // not reusable yet
/// drop(handle); // never attached: its reference is given back
/// assert_eq!((pool.stats().lent, pool.stats().idle), (0, 1));
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
    /// Segments kept now that nobody uses or holds: the next `get` of their length
    /// reuses one.
    pub idle: usize,
    /// The bytes of the idle segments.
    pub idle_bytes: usize,
    /// Segments kept now that this process does not use but another process still
    /// holds (or a handle in flight to one): reusable once it lets go.
    pub lent: usize,
    /// Segments kept now that this process uses.
    pub in_use: usize,
}

/// What a kept buffer is to this process now (see the module docs).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Standing {
    InUse,
    Lent,
    Idle,
}

struct Entry<O: Os> {
    buf: ShmBuf<O>,
    /// When it was last handed out (the idle timeout counts from there).
    handed_out: Instant,
}

impl<O: Os> Entry<O> {
    /// Nobody in this process uses it but the pool: it is lent or idle.
    fn unused_here(&self) -> bool {
        self.buf.local_references() == 1
    }

    /// In use, lent or idle (the holder slots are read only when it is unused here).
    fn standing(&self) -> Standing {
        if !self.unused_here() {
            Standing::InUse
        } else if self.buf.others_hold() {
            Standing::Lent
        } else {
            Standing::Idle
        }
    }

    /// Reuses its segment for a new use if nobody holds it any more, in this process
    /// or another: [`ShmBuf::recycle`], then a second look at this process's
    /// references. A thread of this process may attach a handle of this buffer (and
    /// so clone it) after [`Entry::standing`] looked; its clone is made before it
    /// gives the handle's in-flight reference back, which the recycle must have seen
    /// given back to succeed, so the second look sees the clone. The buffer then stays
    /// that thread's, in the use it attached (the generation word moved on, which only
    /// a later attach of an earlier handle reads), and is not handed out.
    fn recycle_if_unused(&self) -> Result<bool> {
        Ok(self.unused_here() && self.buf.recycle()? && self.unused_here())
    }

    /// Unused here, and handed out `timeout` or longer before `now`.
    fn expired(&self, now: Instant, timeout: Duration) -> bool {
        self.unused_here() && now.saturating_duration_since(self.handed_out) >= timeout
    }
}

struct State<O: Os> {
    /// Every buffer kept, the one handed out longest ago first.
    entries: Vec<Entry<O>>,
    stats: PoolStats,
    /// Which of the lent buffers of a length the next `get` that finds no idle one
    /// tries (counted modulo their number), moved on after each failed try.
    lent_probe: usize,
}

/// A pool of recycled buffers of either strategy (see the module docs of
/// `shmrc::pool`).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
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
pub struct ShmPool<O: Os = DefaultOs> {
    os: O,
    options: CreateOptions,
    limits: PoolLimits,
    state: Mutex<State<O>>,
}

impl<O: Os> ShmPool<O> {
    /// A pool of buffers created as process `os` with `options`. The strategy is fixed
    /// now (the options' or the process-wide one), so a later
    /// [`crate::set_sharing_strategy`] does not mix strategies in one pool; a capacity
    /// of 0 slots is [`Error::InvalidArgument`](crate::Error::InvalidArgument) (a
    /// recycled buffer needs one).
    pub(crate) fn with_os(os: O, options: CreateOptions, limits: PoolLimits) -> Result<ShmPool<O>> {
        let strategy = options.resolved_strategy()?;
        options.check_recyclable(strategy)?;
        Ok(ShmPool {
            os,
            options: options.strategy(strategy),
            limits,
            state: Mutex::new(State {
                entries: Vec::new(),
                stats: PoolStats::default(),
                lent_probe: 0,
            }),
        })
    }

    /// A buffer of `len` bytes: a recycled segment of that length that nobody holds any
    /// more (an idle one: the one handed out longest ago first; if none, one lent one,
    /// in turn, if every other holder of it died), else a new one. Its contents are
    /// those of its previous use (not zeroed: the producer overwrites them). Gives back
    /// first what the limits and the idle timeout say must go (see [`ShmPool::trim`]).
    /// A zero or too large `len` is [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
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
        let mut lent = Vec::new();
        for index in 0..state.entries.len() {
            let entry = &state.entries[index];
            if entry.buf.len() != len {
                continue;
            }
            match entry.standing() {
                Standing::Idle if entry.recycle_if_unused()? => {
                    return Ok(Self::hand_out_again(&mut state, index, now));
                }
                Standing::Lent => lent.push(index),
                _ => {}
            }
        }
        // No idle one: one recycle attempt on a lent one, which succeeds if its other
        // holders all died without letting go (their slots are reclaimed on the way).
        // A memfd's dead holders are reclaimed only so: sweeps and the manager never
        // see a memfd. The lent ones take turns (`lent_probe`), so that one a live
        // holder keeps does not hide the dead holders of the others.
        if !lent.is_empty() {
            let index = lent[state.lent_probe % lent.len()];
            if state.entries[index].recycle_if_unused()? {
                return Ok(Self::hand_out_again(&mut state, index, now));
            }
            state.lent_probe = state.lent_probe.wrapping_add(1);
        }
        let buf = ShmBuf::create_recyclable(&self.os, len, &self.options)?;
        state.entries.push(Entry {
            buf: buf.clone(),
            handed_out: now,
        });
        state.stats.created += 1;
        Ok(buf)
    }

    /// The recycled buffer at `index`, handed out now: moved to the back, behind every
    /// one handed out before.
    fn hand_out_again(state: &mut State<O>, index: usize, now: Instant) -> ShmBuf<O> {
        let mut entry = state.entries.remove(index);
        entry.handed_out = now;
        let buf = entry.buf.clone();
        state.entries.push(entry);
        state.stats.recycled += 1;
        buf
    }

    /// Gives back now the buffers that this process has not used for the idle timeout
    /// (idle or lent), then the idle ones handed out longest ago while the idle ones
    /// exceed a limit; returns how many. Giving back drops the pool's reference: the
    /// segment is unlinked, or kept by its other holder until it lets go. If one fails,
    /// the others still go and the first error is returned. (A pool also trims at each
    /// [`ShmPool::get`].)
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
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

    /// Gives back the segment of `buf` (this process's last use of it besides the
    /// pool's own) now, whatever the limits say: for a user of the pool that must keep
    /// its segments within a count of its own (publish/subscribe's sample table).
    #[cfg_attr(any(shmrc_loom, shmrc_shuttle), allow(dead_code))]
    pub(crate) fn give_back_segment(&self, buf: ShmBuf<O>) -> Result<()> {
        let key = buf.key();
        drop(buf);
        let mut state = self.lock();
        match state.entries.iter().position(|e| e.buf.key() == key) {
            Some(index) => Self::give_back(&mut state, vec![index]).map(|_| ()),
            None => Ok(()),
        }
    }

    /// What the pool did and keeps.
    pub fn stats(&self) -> PoolStats {
        let state = self.lock();
        let mut stats = state.stats;
        for entry in &state.entries {
            match entry.standing() {
                Standing::InUse => stats.in_use += 1,
                Standing::Lent => stats.lent += 1,
                Standing::Idle => {
                    stats.idle += 1;
                    stats.idle_bytes += entry.buf.len();
                }
            }
        }
        stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<O>> {
        // A panic while holding the lock leaves the entries consistent (a Vec edit).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Picks what [`ShmPool::trim`] gives back and gives it back. The holder slots are
    /// read only when the buffers unused here exceed a limit: below the limits, idle
    /// and lent ones alike stay.
    fn trim_locked(&self, state: &mut State<O>, now: Instant) -> Result<usize> {
        let limits = self.limits;
        let mut going = Vec::new();
        let (mut unused, mut unused_bytes) = (0, 0);
        for (index, entry) in state.entries.iter().enumerate() {
            if entry.expired(now, limits.idle_timeout) {
                going.push(index);
            } else if entry.unused_here() {
                unused += 1;
                unused_bytes += entry.buf.len();
            }
        }
        if unused > limits.max_idle_buffers || unused_bytes > limits.max_idle_bytes {
            // Each buffer's slots read once, here: a consumer letting go meanwhile
            // cannot make the counts below disagree with the list.
            let idle: Vec<usize> = state
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| !e.expired(now, limits.idle_timeout))
                .filter(|(_, e)| e.standing() == Standing::Idle)
                .map(|(index, _)| index)
                .collect();
            let mut count = idle.len();
            let mut bytes: usize = idle.iter().map(|&i| state.entries[i].buf.len()).sum();
            for index in idle {
                if count <= limits.max_idle_buffers && bytes <= limits.max_idle_bytes {
                    break;
                }
                count -= 1;
                bytes -= state.entries[index].buf.len();
                going.push(index);
            }
        }
        Self::give_back(state, going)
    }

    /// Gives back the entries at `indices` and keeps the others in their order. Every
    /// one goes even if giving back one fails (the pool drops its reference either
    /// way); returns how many, or the first failure.
    fn give_back(state: &mut State<O>, mut indices: Vec<usize>) -> Result<usize> {
        if indices.is_empty() {
            return Ok(0);
        }
        indices.sort_unstable();
        let mut first_error = None;
        let entries = std::mem::take(&mut state.entries);
        for (index, entry) in entries.into_iter().enumerate() {
            if indices.binary_search(&index).is_err() {
                state.entries.push(entry);
            } else if let Err(e) = entry.buf.release() {
                first_error.get_or_insert(e);
            }
        }
        state.stats.given_back += indices.len() as u64;
        first_error.map_or(Ok(indices.len()), Err)
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

/// [`ShmPool`]'s constructor for any OS, for the checkers' seam (feature `checkers`,
/// not API): `shmrc::checkers::pool::ShmPoolExt`. It is the crate's own `pub(crate)`
/// `ShmPool::with_os`.
#[cfg(feature = "checkers")]
pub trait ShmPoolExt<O: Os>: Sized {
    /// A pool of buffers created as process `os` with `options` ([`ShmPool::new`] for
    /// any OS).
    fn with_os(os: O, options: CreateOptions, limits: PoolLimits) -> Result<Self>;
}

#[cfg(feature = "checkers")]
impl<O: Os> ShmPoolExt<O> for ShmPool<O> {
    fn with_os(os: O, options: CreateOptions, limits: PoolLimits) -> Result<ShmPool<O>> {
        ShmPool::with_os(os, options, limits)
    }
}

#[cfg(all(test, not(any(shmrc_loom, shmrc_shuttle))))]
mod tests {
    //! The pool's own decisions on the simulated kernel: a buffer that a thread of this
    //! process attached is never handed out again; an idle one is handed out again. Lent
    //! buffers taking turns needs the transport: `src/tests/pool.rs`.

    use super::*;
    use crate::os::sim::{SimKernel, SimOs};
    use crate::strategy::Strategy;

    fn pool(os: &SimOs, strategy: Strategy) -> ShmPool<SimOs> {
        let options = CreateOptions::new()
            .strategy(strategy)
            .namespace(crate::namespace::Namespace::new("shmrc-pool-unit").unwrap());
        ShmPool::with_os(os.clone(), options, PoolLimits::default()).unwrap()
    }

    #[test]
    fn a_buffer_a_thread_of_this_process_attached_is_not_recycled() {
        for strategy in [Strategy::FileSystem, Strategy::FileDescriptor] {
            let kernel = SimKernel::new(1);
            let os = kernel.spawn(1000);
            let pool = pool(&os, strategy);
            let buf = pool.get(64).unwrap();
            let handle = buf.share().unwrap();
            drop(buf);
            // Another thread of this process attaches the handle: it gets the pool's
            // buffer (one reference per process) and gives the in-flight slot back.
            let attached = ShmBuf::attach(handle).unwrap();
            let state = pool.lock();
            let entry = &state.entries[0];
            assert!(!entry.buf.others_hold(), "no other slot is taken");
            assert!(!entry.recycle_if_unused().unwrap(), "{strategy}");
            assert_eq!(attached.generation(), 0, "{strategy}: still the first use");
            drop(state);
            let again = pool.get(64).unwrap();
            assert_ne!(again.key(), attached.key(), "{strategy}: a new one");
        }
    }

    #[test]
    fn an_idle_buffer_is_handed_out_again_in_a_new_generation() {
        for strategy in [Strategy::FileSystem, Strategy::FileDescriptor] {
            let kernel = SimKernel::new(1);
            let os = kernel.spawn(1000);
            let pool = pool(&os, strategy);
            let key = pool.get(64).unwrap().key();
            let again = pool.get(64).unwrap();
            assert_eq!((again.key(), again.generation()), (key, 1), "{strategy}");
            let stats = pool.stats();
            assert_eq!((stats.created, stats.recycled), (1, 1), "{strategy}");
            drop(again);
            let third = pool.get(64).unwrap();
            assert_eq!((third.key(), third.generation()), (key, 2), "{strategy}");
            assert_eq!(pool.stats().recycled, 2, "{strategy}");
        }
    }

    #[test]
    fn a_pool_without_holder_slots_is_refused_at_once() {
        let kernel = SimKernel::new(1);
        let os = kernel.spawn(1000);
        for strategy in [Strategy::FileSystem, Strategy::FileDescriptor] {
            let options = CreateOptions::new().strategy(strategy).capacity(0);
            let refused = ShmPool::with_os(os.clone(), options, PoolLimits::default());
            assert!(
                matches!(&refused, Err(crate::error::Error::InvalidArgument(why)) if why.contains("holder slot")),
                "{strategy}: {refused:?}"
            );
        }
    }
}

// The default OS's constructor, beside the generic type.
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
impl ShmPool {
    /// A pool of recycled buffers created with `options` (either strategy, fixed now:
    /// see the module docs of `shmrc::pool` for file_descriptor pools), kept within
    /// `limits`. Options with 0 holder slots are [`Error::InvalidArgument`].
    ///
    /// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
    ///
    /// ```
    /// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
    /// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
    /// use std::os::unix::net::UnixStream;
    /// use shmrc::{CreateOptions, Error, PoolLimits, ShmBuf, ShmPool, Strategy, transport};
    ///
    /// let fd = CreateOptions::new().strategy(Strategy::FileDescriptor);
    /// let pool = ShmPool::new(fd.clone(), PoolLimits::default())?;
    /// let (producer, consumer) = UnixStream::pair().unwrap();
    /// let batch = pool.get(4096)?;
    /// transport::send(&producer, b"", vec![batch.share()?])?; // the memfd, and a slot for it
    /// drop(batch);
    /// assert_eq!(pool.stats().lent, 1); // the handle is still in flight
    /// drop(transport::recv(&consumer)?); // received, then dropped: its slot is given back
    /// assert_eq!(pool.stats().idle, 1);
    /// let next = pool.get(4096)?; // the same memfd, a new use
    /// assert_eq!((next.generation(), pool.stats().recycled), (1, 1));
    ///
    /// let no_slots = fd.capacity(0);
    /// assert!(matches!(ShmPool::new(no_slots, PoolLimits::default()), Err(Error::InvalidArgument(_))));
    /// # }
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn new(options: CreateOptions, limits: PoolLimits) -> Result<ShmPool> {
        ShmPool::with_os(DefaultOs::default(), options, limits)
    }
}
