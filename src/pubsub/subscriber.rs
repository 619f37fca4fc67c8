//! A subscriber of a service: [`Subscriber::join`] takes a free entry of the service
//! segment, [`Subscriber::try_recv`] pops the oldest queued sample and takes its
//! reference over in the entry's holder slot ([`super::queue::Take`], driven here so
//! that a sample segment is opened the first time a descriptor names it), and a
//! [`Received`] sample, read as `&[T]`, gives the slot back when dropped.
//!
//! # Safety
//! One `unsafe` block turns a received sample's data region into `&[T]`: sound for as
//! long as nobody writes the segment while the sample lives, which the protocol
//! guarantees for every process that follows it. The subscriber holds slot `1 + e` of
//! the segment (a successful take), so the publisher's pool cannot recycle it (a
//! recycle rolls back at a live holder), and the generation read after the take says
//! the data is the publish's. The limits are [`Sample`](crate::Sample)'s: a process of
//! the same user can still map the segment writable behind shmrc's back; read from a
//! peer you do not trust with [`Received::read_items`].
#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytemuck::Pod;

use crate::buf::view;
use crate::error::{Error, Result};
use crate::manager::DefaultOs;
use crate::namespace::Namespace;
use crate::os::{Mapping, Os};
use crate::protocol::attach::Expect;
use crate::protocol::holders::{self, FREE, Holders, held_word};
use crate::protocol::queue::{
    self, Descriptor, Queue, SampleViews, Take, TakeAt, Taken, subscriber_slot,
};
use crate::protocol::segment::{self, Fields, Header};
use crate::protocol::service_segment::{self as service, Service};
use crate::sync::{
    AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use crate::token::Token;

use super::publisher::LIVENESS_PERIOD;

type Map = <DefaultOs as Os>::Map;

/// How long a blocking receive whose ring is empty keeps taking before it announces
/// itself and sleeps ([`Subscriber::recv_timeout`]): a sample that comes within it costs
/// neither a sleep nor the publisher's wake-up, and a receive that nothing comes for
/// spends at most this much CPU before its sleep. `bench/iceoryx2`, blocking, on 2
/// busy vCPUs: 5, 10, 20, 50 and 100 µs all lift 4 subscribers from 46k to 200k samples
/// a second and more (docs/PERFORMANCE.md, "shmrc against iceoryx2"); 20 µs leaves room
/// for a busier machine's longer yields.
const SPIN: Duration = Duration::from_micros(20);

/// When a subscriber (and its received samples) last saw the publisher alive: a
/// release within [`LIVENESS_PERIOD`] of that trusts it and makes no system call. A
/// release that trusted a publisher killed meanwhile leaves its sample to the
/// subscriber's next look that finds the publisher dead (a release after the period,
/// [`Subscriber::publisher_alive`], `recv`'s check every 100 ms, the subscriber's
/// drop), which finalizes every sample segment the subscriber opened and no longer
/// holds, or, if the process never looks again, to a sweep.
struct PublisherSeen {
    epoch: Instant,
    /// Nanoseconds after `epoch`, plus one, when the publisher was last found alive
    /// (0: never; [`FORGOTTEN`]: the subscriber is gone, ask every time from now on).
    alive_at: AtomicU64,
}

/// `PublisherSeen::alive_at` once the subscriber is dropped.
const FORGOTTEN: u64 = u64::MAX;

impl PublisherSeen {
    fn new() -> PublisherSeen {
        PublisherSeen {
            epoch: Instant::now(),
            alive_at: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        // 2^64 ns is 584 years: the cast cannot truncate in a process's life.
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// Whether `service`'s publisher is gone (dropped: its tombstone, a load; or dead:
    /// asked unless it was found alive within the period).
    fn gone(&self, os: &DefaultOs, service: &Service<DefaultOs>) -> bool {
        if service.publisher_word() != service.publisher.word() {
            return true;
        }
        // Relaxed: a hint of this process's own; the answer it caches is a syscall's.
        let seen = self.alive_at.load(Relaxed);
        let now = self.now();
        let period = LIVENESS_PERIOD.as_nanos() as u64;
        if seen != 0 && seen != FORGOTTEN && now.saturating_sub(seen) < period {
            return false;
        }
        self.ask(os, service, now)
    }

    /// Asks whether the publisher is dead, and remembers a live answer (unless the
    /// subscriber is gone: then nothing is remembered).
    fn ask(&self, os: &DefaultOs, service: &Service<DefaultOs>, now: u64) -> bool {
        if os.is_alive(service.publisher) {
            let seen = self.alive_at.load(Relaxed);
            if seen != FORGOTTEN {
                // Lost to another thread's answer, or to `forget`: either stands.
                let _ = self.alive_at.compare_exchange(seen, now, Relaxed, Relaxed);
            }
            false
        } else {
            true
        }
    }

    /// From now on every release asks (the subscriber that would look later is gone).
    fn forget(&self) {
        self.alive_at.store(FORGOTTEN, Relaxed);
    }
}

/// A sample segment of the service, opened and checked against its table row.
struct SampleSegment {
    name: String,
    map: Map,
    fields: Fields,
}

impl SampleSegment {
    fn holders(&self) -> Holders<'_> {
        Header::of(&self.map, self.fields.layout.capacity)
            .expect("the layout was validated against the mapping")
            .holders()
    }
}

/// What the subscriber knows of the sample table: each row's segment once opened
/// (`None`: not opened yet, or its segment gone). A descriptor naming a row with no
/// segment (gone, or a forged row past the table) ends `Lost` or `Stale`; a row that
/// could not be opened for another reason is not remembered: the take that named it
/// fails before its pop, and the next take tries again.
#[derive(Default)]
struct Segments {
    rows: Vec<Option<Arc<SampleSegment>>>,
}

/// The opened rows as the queue's samples: a row's holder view is made when the take
/// names its sample; a row not opened has `nobody`'s slots (always free: a take of it
/// fails).
struct OpenedViews<'s> {
    rows: &'s [Option<Arc<SampleSegment>>],
    nobody: Holders<'s>,
}

impl SampleViews for OpenedViews<'_> {
    fn count(&self) -> usize {
        self.rows.len()
    }

    fn view(&self, row: usize) -> Option<Holders<'_>> {
        let opened = self.rows.get(row)?;
        Some(opened.as_ref().map_or(self.nobody, |s| s.holders()))
    }
}

/// A joined subscriber of a service (see the module docs of `shmrc::pubsub`). It
/// leaves the service when dropped; the samples it received stay readable until they
/// are dropped.
pub struct Subscriber {
    os: DefaultOs,
    namespace: Namespace,
    uid: u32,
    service: Arc<Service<DefaultOs>>,
    seen: Arc<PublisherSeen>,
    entry: usize,
    segments: Mutex<Segments>,
    /// Slot words for a row that could not be opened: always free, so a take fails.
    nobody: Vec<AtomicU64>,
    unused: [AtomicU64; 3],
}

impl Subscriber {
    /// Joins service `service` of the default namespace.
    pub fn join(service: &str) -> Result<Subscriber> {
        Subscriber::join_in(&Namespace::default(), service)
    }

    /// Joins service `service` of namespace `namespace`: opens and validates its
    /// segment (another user's, a malformed one: an [`Error`] naming the cause), then
    /// takes a free subscriber entry (a service being created is waited for, 100 ms at
    /// most). Refused: no such service ([`Error::Gone`]), its
    /// publisher dead ([`Error::Gone`]), every entry taken ([`Error::HoldersFull`];
    /// the publisher frees departed subscribers' entries at its next publish), a
    /// process in a time namespace whose shift is unknown ([`Error::TimeNamespace`]).
    /// The user's manager (if on) watches the process from then on, as a holder's.
    pub fn join_in(namespace: &Namespace, service: &str) -> Result<Subscriber> {
        let os = DefaultOs::default();
        let uid = os.uid();
        let name = service::service_name(namespace, uid, service)?;
        let service = Arc::new(service::open_published(&os, &name)?);
        if !os.is_alive(service.publisher) {
            return Err(Error::Gone { segment: name });
        }
        // Before the entry takes this process's token: refused in a time namespace
        // whose frame is unknown (its token would read as dead), and the user's manager
        // told to watch this process (its death reclaims what it held).
        os.before_named_use(namespace.prefix(), None)?;
        let entries = super::entries(&service);
        let q = Queue::new(&entries, &[], service.wake());
        let Some(entry) = queue::join(&os, &q)? else {
            return Err(Error::HoldersFull {
                segment: name,
                capacity: u32::try_from(service.config.entries).unwrap_or(u32::MAX),
            });
        };
        drop(entries);
        let nobody = (0..subscriber_slot(service.config.entries))
            .map(|_| AtomicU64::new(FREE))
            .collect();
        Ok(Subscriber {
            os,
            namespace: namespace.clone(),
            uid,
            service,
            seen: Arc::new(PublisherSeen::new()),
            entry,
            segments: Mutex::new(Segments::default()),
            nobody,
            unused: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
        })
    }

    /// The oldest queued sample, seen as `[T]`, or `None` if none is queued. An empty
    /// queue costs two loads of shared words and no system call. A sample whose
    /// length is not a whole number of `T` is [`Error::BadView`] (and released); a
    /// queue whose words a hostile writer broke is [`Error::Corrupted`].
    pub fn try_recv<T: Pod>(&self) -> Result<Option<Received<T>>> {
        let (head, tail) = self.service.head_tail(self.entry);
        // SeqCst: as the take's own loads (an empty look is a take that ends at once).
        if head.load(SeqCst) == tail.load(SeqCst) {
            return Ok(None);
        }
        loop {
            match self.take()? {
                (Taken::Sample(d), Some(segment)) => return self.received(d, segment).map(Some),
                (Taken::Empty, _) => return Ok(None),
                (Taken::Corrupt, _) => {
                    return Err(Error::Corrupted {
                        segment: self.service.name.clone(),
                        what: format!(
                            "the words of subscriber entry {} break its ring's bounds",
                            self.entry
                        ),
                    });
                }
                // Lost (the publisher died and a sweep reclaimed the reference) or
                // stale (a forged descriptor): nothing held; the next one.
                _ => {}
            }
        }
    }

    /// The oldest queued sample, waiting for one for `timeout` at most
    /// ([`Error::Timeout`] then): an empty ring is looked at again for 20 µs at most
    /// (within the timeout), the CPU yielded before each look, then the receive sleeps
    /// (a futex wait on the service's wake word) until a publish wakes it.
    pub fn recv_timeout<T: Pod>(&self, timeout: Duration) -> Result<Received<T>> {
        // A timeout too long to add to now (`Duration::MAX`) is no deadline.
        let deadline = Instant::now().checked_add(timeout);
        let left = || {
            deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            })
        };
        let wake = self.service.wake();
        // The spin's budget for the whole receive, not for each wake-up.
        let mut spin = SPIN;
        loop {
            // Read before the take: a publish the take missed has changed it by the
            // time the wait compares it (`queue::take_within`'s order; the spin's takes
            // come after the same read).
            let seen = wake.load(SeqCst);
            if let Some(sample) = self.try_recv()? {
                return Ok(sample);
            }
            // Before the sleep, the same non-blocking take again for a short while
            // (within the deadline): a sample that comes meanwhile costs no sleep and
            // no wake-up.
            if let Some(sample) = self.spin_recv(left().min(spin))? {
                return Ok(sample);
            }
            spin = Duration::ZERO;
            let left = left();
            if left.is_zero() {
                return Err(Error::Timeout { after: timeout });
            }
            // The waiters flag first (from `seen`: a publish since makes it fail, and
            // the take runs again), so that the publisher's bump wakes this sleep.
            let q = Queue::new(&[], &[], wake);
            if let Some(flagged) = queue::announce_waiter(&q, seen) {
                self.os.wait_word(wake, flagged, left);
            }
        }
    }

    /// Repeats [`Subscriber::try_recv`] for `bound` at most, yielding the CPU before
    /// each look: the publisher this waits for may need it (a spin that only hints
    /// `spin_loop` left 4 subscribers on 2 vCPUs at 44k samples a second, the sleep's
    /// figure; yielding, 200k). Nothing of the wake protocol changes: these are
    /// non-blocking takes, made before the caller announces itself.
    fn spin_recv<T: Pod>(&self, bound: Duration) -> Result<Option<Received<T>>> {
        let start = Instant::now();
        while start.elapsed() < bound {
            std::thread::yield_now();
            if let Some(sample) = self.try_recv()? {
                return Ok(Some(sample));
            }
        }
        Ok(None)
    }

    /// The oldest queued sample, waiting as long as the publisher lives: its death
    /// with nothing queued is [`Error::Gone`] naming the service (checked every
    /// 100 ms of waiting).
    pub fn recv<T: Pod>(&self) -> Result<Received<T>> {
        loop {
            match self.recv_timeout(Duration::from_millis(100)) {
                Err(Error::Timeout { .. }) if self.publisher_alive() => {}
                Err(Error::Timeout { .. }) => {
                    return Err(Error::Gone {
                        segment: self.service.name.clone(),
                    });
                }
                other => return other,
            }
        }
    }

    /// Whether the service's publisher is alive (a dropped publisher counts as dead):
    /// always asked. Found gone, the sample segments this subscriber opened and no
    /// longer holds are finalized (unlinked once nobody holds them): the samples its
    /// releases left while they trusted a publisher killed meanwhile, and the killed
    /// publisher's idle ones.
    pub fn publisher_alive(&self) -> bool {
        let gone = self.service.publisher_word() != self.service.publisher.word()
            || self.seen.ask(&self.os, &self.service, self.seen.now());
        if gone {
            self.finalize_opened();
        }
        !gone
    }

    /// Finalizes every sample segment this subscriber opened (the publisher is gone:
    /// nobody recycles them): each is unlinked once no live process holds it, and a
    /// sample a live holder (this subscriber's own received samples included) still
    /// holds is left to that holder's release.
    fn finalize_opened(&self) {
        let opened: Vec<Arc<SampleSegment>> = self.lock().rows.iter().flatten().cloned().collect();
        for segment in opened {
            // A failure (only the simulated kernel's kill) leaves it to a sweep.
            let _ = holders::finalize(
                &self.os,
                &segment.holders(),
                &segment.name,
                holders::Reclaim::UntilLive,
            );
        }
    }

    /// The subscriber entry this subscriber holds.
    pub fn entry(&self) -> usize {
        self.entry
    }

    fn lock(&self) -> MutexGuard<'_, Segments> {
        // A panic while holding the lock leaves the rows consistent (each set once).
        self.segments.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One take, run step by step; once it read a descriptor, before its pop, the row
    /// it names is opened if it was not, so that the transfer sees the sample's slots.
    /// A row that cannot be opened (the open-file limit, say) fails the take there:
    /// nothing is popped, and the sample stays queued for the next take.
    fn take(&self) -> Result<(Taken, Option<Arc<SampleSegment>>)> {
        let mut segments = self.lock();
        let entries = super::entries(&self.service);
        let mut take = Take::new(self.entry, self.service.publisher);
        let mut named = None;
        loop {
            if let TakeAt::Pop { word, .. } = take.at() {
                let row = Descriptor::decode(word).sample as usize;
                if named != Some(row) {
                    named = Some(row);
                    self.open_named_row(&mut segments, row)?;
                }
            }
            let opened = OpenedViews {
                rows: &segments.rows,
                nobody: Holders::new(&self.nobody, &self.unused[0], &self.unused[1])
                    .with_generation(&self.unused[2]),
            };
            let q = Queue::with_lookup(&entries, &opened, self.service.wake());
            self.os.crash_point()?;
            if let Poll::Ready(taken) = take.step(&self.os, &q) {
                let segment = named.and_then(|row| segments.rows.get(row).cloned().flatten());
                return Ok((taken, segment));
            }
        }
    }

    /// Opens row `row` of the table if it was not: a row past the table's used rows (a
    /// forged descriptor) or whose segment is gone (the publisher died and a sweep
    /// reclaimed it) is left without one; any other failure is the caller's error.
    fn open_named_row(&self, segments: &mut Segments, row: usize) -> Result<()> {
        if row >= self.service.rows_used() {
            return Ok(());
        }
        if segments.rows.len() <= row {
            segments.rows.resize(row + 1, None);
        }
        if segments.rows[row].is_none() {
            match self.open_row(row) {
                Ok(segment) => segments.rows[row] = Some(Arc::new(segment)),
                Err(Error::Gone { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Opens row `row`'s segment: a segment of the namespace, made by the publisher,
    /// with the row's share key and `1 + E` slots (what a handle's attach checks).
    fn open_row(&self, row: usize) -> Result<SampleSegment> {
        let (nonce, share_key) = self.service.row(row);
        let publisher = self.service.publisher;
        let name = self
            .namespace
            .segment_name(self.uid, self.os.pid_namespace(), publisher, nonce);
        // The manager watches this process for this sample too (as a handle's attach).
        self.os
            .before_named_use(self.namespace.prefix(), Some(&name))?;
        let opened = segment::open_named(&self.os, &self.namespace, &name, self.uid)?;
        let fields = opened.fields;
        let expect = Expect::Row {
            creator: publisher,
            share_key,
            capacity: subscriber_slot(self.service.config.entries),
        };
        expect.check(&fields, &name)?;
        Ok(SampleSegment {
            name,
            map: opened.map,
            fields,
        })
    }

    fn received<T: Pod>(&self, d: Descriptor, segment: Arc<SampleSegment>) -> Result<Received<T>> {
        let received = Received {
            os: self.os,
            service: Arc::clone(&self.service),
            seen: Arc::clone(&self.seen),
            segment,
            slot: subscriber_slot(self.entry),
            holder: self.os.current(),
            generation: d.generation,
            item: PhantomData,
        };
        let bytes = received.segment.fields.layout.data_len;
        if size_of::<T>() == 0
            || bytes % size_of::<T>() != 0
            || align_of::<T>() > segment::DATA_ALIGN
        {
            // Dropping `received` gives the sample back.
            return Err(Error::BadView {
                type_name: std::any::type_name::<T>(),
                offset: 0,
                len: bytes,
                size: bytes,
                why: "the sample's length is not a whole number of the type's items (or the type cannot view a buffer)",
            });
        }
        Ok(received)
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let entries = super::entries(&self.service);
        let q = Queue::new(&entries, &[], self.service.wake());
        // A failure (only the simulated kernel's kill) leaves an entry the publisher
        // drains once this process is dead.
        let _ = queue::leave(&self.os, &q, self.entry);
        drop(entries);
        // Nobody looks for the publisher's death after this: the samples still received
        // ask at their release, and what earlier releases left is finalized now.
        self.seen.forget();
        let _ = self.publisher_alive();
    }
}

impl fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscriber")
            .field("service", &self.service.name)
            .field("entry", &self.entry)
            .finish()
    }
}

/// A sample received by a [`Subscriber`], read as `&[T]` (`Deref`) with no `unsafe`:
/// the same segment the publisher wrote and every other subscriber reads. Dropping
/// it gives the subscriber's reference back (and, if the publisher is gone, unlinks the
/// segment once nobody holds it; a publisher the subscriber saw alive less than 1 ms
/// ago is not asked, and the subscriber unlinks the segment when it next finds the
/// publisher gone); a subscriber killed while holding it leaves a dead reference that
/// the publisher's next loan reclaims.
pub struct Received<T: Pod> {
    os: DefaultOs,
    /// The service, to tell whether its publisher is gone.
    service: Arc<Service<DefaultOs>>,
    /// When the subscriber last saw the publisher alive.
    seen: Arc<PublisherSeen>,
    segment: Arc<SampleSegment>,
    slot: usize,
    holder: Token,
    generation: u64,
    item: PhantomData<T>,
}

impl<T: Pod> Received<T> {
    /// Which use of its segment this sample is (modulo 2^40).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The sample segment's name (the same in every subscriber: zero-copy).
    pub fn segment_name(&self) -> &str {
        &self.segment.name
    }

    /// Copies items `first..first + out.len()` into `out`, safe even while a process
    /// writes the segment against the protocol (see the module's `# Safety`). A range
    /// past the end is [`Error::BadView`] and copies nothing.
    pub fn read_items(&self, first: usize, out: &mut [T]) -> Result<()> {
        let layout = self.segment.fields.layout;
        let size = size_of::<T>();
        let offset = first.checked_mul(size);
        let len = std::mem::size_of_val(out);
        match offset {
            Some(offset)
                if offset
                    .checked_add(len)
                    .is_some_and(|end| end <= layout.data_len) =>
            {
                if self
                    .segment
                    .map
                    .read(layout.data_offset + offset, bytemuck::cast_slice_mut(out))
                {
                    Ok(())
                } else {
                    Err(Error::BadView {
                        type_name: std::any::type_name::<T>(),
                        offset,
                        len,
                        size: layout.data_len,
                        why: "the range lies outside the mapping",
                    })
                }
            }
            _ => Err(Error::BadView {
                type_name: std::any::type_name::<T>(),
                offset: offset.unwrap_or(usize::MAX),
                len,
                size: layout.data_len,
                why: "the range runs past the sample's end",
            }),
        }
    }
}

impl<T: Pod> Deref for Received<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        let layout = self.segment.fields.layout;
        let region = self
            .segment
            .map
            .region(layout.data_offset, layout.data_len)
            .expect("the validated layout lies inside the mapping");
        // SAFETY: see the module's `# Safety`: this subscriber holds the segment's slot
        // `1 + e` in the generation it took, so no process that follows the protocol
        // writes the data while this sample (and the slice, borrowed from it) lives.
        let bytes = unsafe { region.as_slice() };
        view::cast_all(bytes)
            .expect("the sample's length and type were checked when it was received")
    }
}

impl<T: Pod> AsRef<[T]> for Received<T> {
    fn as_ref(&self) -> &[T] {
        self
    }
}

impl<T: Pod> Drop for Received<T> {
    fn drop(&mut self) {
        if self.os.current() != self.holder {
            // A forked child's copy: the parent holds the reference.
            return;
        }
        let h = self.segment.holders();
        // A failure (only the simulated kernel's kill) leaves a dead holder's slot that
        // the pool's next recycle reclaims.
        if let Ok(true) = holders::vacate(&self.os, &h, self.slot, held_word(self.holder)) {
            if self.seen.gone(&self.os, &self.service) {
                // Nobody recycles the sample any more: the last holder unlinks it.
                let _ = holders::finalize(
                    &self.os,
                    &h,
                    &self.segment.name,
                    holders::Reclaim::UntilLive,
                );
            }
        }
    }
}

impl<T: Pod> fmt::Debug for Received<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("type", &std::any::type_name::<T>())
            .field("segment", &self.segment.name)
            .field("generation", &self.generation)
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::{ManagerMode, set_manager_mode};
    use crate::pubsub::{Publisher, PublisherOptions};

    /// What this thread has used so far: its CPU time (the scheduler's count) and the
    /// times it was switched out while runnable (a yield that let another run counts).
    fn thread_use() -> (Duration, u64) {
        let read = |file: &str| {
            std::fs::read_to_string(format!("/proc/thread-self/{file}"))
                .unwrap_or_else(|e| panic!("read /proc/thread-self/{file}: {e}"))
        };
        let cpu = read("schedstat")
            .split_whitespace()
            .next()
            .and_then(|field| field.parse().ok())
            .expect("schedstat starts with the CPU time in ns");
        let switched = read("status")
            .lines()
            .find_map(|line| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("status has nonvoluntary_ctxt_switches");
        (Duration::from_nanos(cpu), switched)
    }

    /// A namespace of this test and process, its names unlinked when the test ends.
    struct Scratch(Namespace);

    impl Scratch {
        fn new(test: &str) -> Scratch {
            set_manager_mode(ManagerMode::Off);
            let prefix = format!("shmrc-t-{test}-{}", std::process::id());
            Scratch(Namespace::new(prefix).expect("a valid prefix"))
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let start = self.0.name_start(DefaultOs::default().uid());
            for entry in std::fs::read_dir("/dev/shm")
                .into_iter()
                .flatten()
                .flatten()
            {
                if entry.file_name().to_string_lossy().starts_with(&start) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }

    /// A blocking receive that nothing arrives for spins a bounded while, then sleeps:
    /// 300 ms of waiting cost this thread a few milliseconds of CPU at most (a spin to
    /// the deadline fails it on an idle machine) and a few switches while runnable (it
    /// fails it on a busy one, where each yield lets another process run and costs
    /// this thread next to no CPU).
    #[test]
    fn a_long_blocking_receive_sleeps_after_its_spin() {
        let scratch = Scratch::new("spin-sleeps");
        let options = PublisherOptions::new().namespace(scratch.0.clone());
        let publisher = Publisher::create("quiet", options).expect("create the service");
        let subscriber = Subscriber::join_in(&scratch.0, "quiet").expect("join");
        let wait = Duration::from_millis(300);
        let ((cpu, switched), started) = (thread_use(), Instant::now());
        match subscriber.recv_timeout::<u8>(wait) {
            Err(Error::Timeout { after }) => assert_eq!(after, wait),
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(started.elapsed() >= wait, "returned before its deadline");
        let (cpu_after, switched_after) = thread_use();
        let (spent, switches) = (cpu_after - cpu, switched_after - switched);
        assert!(
            spent < Duration::from_millis(30) && switches < 30,
            "a 300 ms receive with nothing published used {spent:?} of CPU and was \
             switched out {switches} times while runnable"
        );
        drop((subscriber, publisher));
    }
}
