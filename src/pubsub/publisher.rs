//! The publisher of a service: [`Publisher::create`] makes the service segment and
//! a [`ShmPool`] of sample segments with `1 + E` holder slots; [`Publisher::loan`]
//! lends a sample to write, [`Publisher::publish`] delivers it to every joined
//! subscriber through the queue's steps ([`super::queue::publish`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytemuck::Pod;

use crate::buf::CreateOptions;
use crate::error::{Error, Result};
use crate::local::SegmentKey;
use crate::manager::DefaultOs;
use crate::namespace::Namespace;
use crate::os::Os;
use crate::pool::{Loan, PoolLimits, PoolStats, ShmPool};
use crate::protocol::holders::{self, FREE, Holders, in_flight_word};
use crate::protocol::queue::{
    self, Descriptor, EntryState, Policy, Published, Queue, SampleViews, subscriber_slot,
};
use crate::protocol::segment::Header;
use crate::protocol::service_segment::{self as service, Config, Created, Service};
use crate::strategy::Strategy;
use crate::sync::Ordering::SeqCst;

/// How a service is made: its subscriber entries, ring capacity, sample count, slow
/// subscriber policy and namespace (chosen by the publisher that creates it).
///
/// ```
/// use shmrc::pubsub::{PublisherOptions, SlowSubscriber};
/// let options = PublisherOptions::new().subscribers(4).queue(8).slow(SlowSubscriber::Backpressure);
/// assert_eq!((options.subscribers, options.queue, options.samples), (4, 8, 64));
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PublisherOptions {
    /// The most subscribers joined at once (`E`; default 8, at most 1024).
    pub subscribers: usize,
    /// Samples queued per subscriber (`C`; default 16).
    pub queue: usize,
    /// The most sample segments the publisher's pool keeps (`N`, the sample table's
    /// rows; default 64): loaned, queued, held or idle, of every length.
    pub samples: usize,
    /// What a full queue does (default [`Policy::DropOldest`]).
    pub slow: Policy,
    /// The namespace of the service and its samples (default `shmrc`).
    pub namespace: Namespace,
}

impl Default for PublisherOptions {
    fn default() -> PublisherOptions {
        PublisherOptions {
            subscribers: 8,
            queue: 16,
            samples: 64,
            slow: Policy::DropOldest,
            namespace: Namespace::default(),
        }
    }
}

impl PublisherOptions {
    /// The defaults.
    pub fn new() -> PublisherOptions {
        PublisherOptions::default()
    }

    /// Sets [`PublisherOptions::subscribers`].
    pub fn subscribers(mut self, subscribers: usize) -> PublisherOptions {
        self.subscribers = subscribers;
        self
    }

    /// Sets [`PublisherOptions::queue`].
    pub fn queue(mut self, queue: usize) -> PublisherOptions {
        self.queue = queue;
        self
    }

    /// Sets [`PublisherOptions::samples`].
    pub fn samples(mut self, samples: usize) -> PublisherOptions {
        self.samples = samples;
        self
    }

    /// Sets [`PublisherOptions::slow`].
    pub fn slow(mut self, slow: Policy) -> PublisherOptions {
        self.slow = slow;
        self
    }

    /// Sets [`PublisherOptions::namespace`].
    pub fn namespace(mut self, namespace: Namespace) -> PublisherOptions {
        self.namespace = namespace;
        self
    }
}

/// What a publish did.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct Sent {
    /// Subscribers the sample was queued for.
    pub delivered: u32,
    /// Older samples dropped from full queues (drop-oldest).
    pub dropped: u32,
    /// Entries of departed or dead subscribers freed on the way.
    pub freed: u32,
}

impl Sent {
    fn of(p: Published) -> Sent {
        Sent {
            delivered: p.delivered,
            dropped: p.dropped,
            freed: p.drained,
        }
    }
}

/// How [`Publisher::publish`] ended.
#[derive(Debug)]
#[must_use]
pub enum Delivery<T: Pod> {
    /// Queued for every joined subscriber (under drop-oldest, after dropping older
    /// samples from full queues).
    Sent(Sent),
    /// Backpressure: subscriber entry `entry`'s queue is full, nothing was delivered;
    /// the loan comes back to be published again later.
    Full {
        /// The sample, unpublished.
        loan: Loan<T>,
        /// The entry whose queue was full.
        entry: usize,
    },
}

impl<T: Pod> Delivery<T> {
    /// What was sent, `None` if the publish was refused.
    pub fn sent(&self) -> Option<Sent> {
        match self {
            Delivery::Sent(sent) => Some(*sent),
            Delivery::Full { .. } => None,
        }
    }
}

type Map = <DefaultOs as Os>::Map;

/// How long a publish trusts a subscriber it saw alive before it asks again (a
/// liveness check is a system call: the `poll` of a kept pidfd). A subscriber killed
/// with samples queued has them back at the first publish after this period (or at a
/// reclaim, at a publish that finds its ring full, at a loan that finds no free sample).
pub(crate) const LIVENESS_PERIOD: Duration = Duration::from_millis(1);

/// The publisher's own record of its sample table (row by segment) and of its
/// subscribers' liveness.
struct Table {
    row_of: HashMap<SegmentKey, usize>,
    /// Each row's mapping and holder-slot count, to view its slots in a publish.
    rows: Vec<(Arc<Map>, usize)>,
    /// Per entry, the state word of a subscriber seen alive at `asked` (`FREE`: none).
    alive: Vec<u64>,
    /// When the liveness of every joined subscriber was last asked.
    asked: Option<Instant>,
}

/// The table's rows as the queue's samples: a row's holder view is made when a step
/// names its sample (each row's slots were checked against its mapping when the row
/// was added).
struct RowViews<'t>(&'t [(Arc<Map>, usize)]);

impl SampleViews for RowViews<'_> {
    fn count(&self) -> usize {
        self.0.len()
    }

    fn view(&self, row: usize) -> Option<Holders<'_>> {
        let (map, slots) = self.0.get(row)?;
        Header::of(&**map, *slots).map(|header| header.holders())
    }
}

/// The one publisher of a service (see the module docs of `shmrc::pubsub`).
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::Namespace;
/// use shmrc::pubsub::{Publisher, PublisherOptions, Subscriber};
///
/// let ns = Namespace::new("shmrc-doc-pubsub")?;
/// let publisher = Publisher::create("frames", PublisherOptions::new().namespace(ns.clone()))?;
/// let subscriber = Subscriber::join_in(&ns, "frames")?;
/// let mut loan = publisher.loan::<u32>(1024)?;
/// loan.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32);
/// let sent = publisher.publish(loan)?.sent().expect("drop-oldest never refuses");
/// assert_eq!(sent.delivered, 1);
/// let sample = subscriber.try_recv::<u32>()?.expect("queued");
/// assert_eq!(sample[1000], 1000);
/// # Ok::<(), shmrc::Error>(())
/// ```
pub struct Publisher {
    os: DefaultOs,
    service: Service<DefaultOs>,
    pool: ShmPool,
    table: Mutex<Table>,
}

impl Publisher {
    /// Creates service `service` in the options' namespace, with this process as its
    /// publisher. A service whose publisher lives is refused
    /// ([`Error::InvalidArgument`] naming it and its pid); a dead publisher's is
    /// taken over (its subscribers must join again). Refused too: a service name of
    /// other than 1 to 64 ASCII letters, digits, `-`, `_`, and sizes out of bounds.
    pub fn create(service: &str, options: PublisherOptions) -> Result<Publisher> {
        let os = DefaultOs::default();
        // Before `initialize` writes this process's token (see `Subscriber::join_in`).
        os.before_named_use(options.namespace.prefix(), None)?;
        let name = service::service_name(&options.namespace, os.uid(), service)?;
        let config = Config {
            entries: options.subscribers,
            capacity: options.queue,
            rows: options.samples,
            backpressure: options.slow == Policy::Backpressure,
        };
        config.check()?;
        let buf_options = CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(options.namespace.clone())
            .capacity(subscriber_slot(config.entries));
        // The table names each segment the pool ever makes: it must keep them all.
        let limits = PoolLimits {
            max_idle_buffers: usize::MAX,
            max_idle_bytes: usize::MAX,
            idle_timeout: Duration::MAX,
        };
        let pool = ShmPool::new(buf_options, limits)?;
        let service = match service::create(&os, &name, config)? {
            Created::New(service) => service,
            Created::Live { publisher } => {
                return Err(Error::InvalidArgument(format!(
                    "service {service:?} of namespace {} already has a live publisher (pid {})",
                    options.namespace,
                    publisher.pid()
                )));
            }
        };
        Ok(Publisher {
            os,
            service,
            pool,
            table: Mutex::new(Table {
                row_of: HashMap::new(),
                rows: Vec::new(),
                alive: vec![FREE; config.entries],
                asked: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock leaves the table consistent (pushes only).
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A sample of `len` items of `T` to write (see [`ShmPool::loan`]): a segment of
    /// the pool that nobody holds any more, or a new one. A loan that finds none free
    /// and no row left asks every joined subscriber's liveness ([`Publisher::reclaim`]:
    /// a dead one's queued samples come back) and, if that freed any, tries once more.
    /// Refused when the sample table is full ([`PublisherOptions::samples`] segments, all loaned, queued,
    /// held or of another length): [`Error::InvalidArgument`] naming the count.
    ///
    /// In a child forked from the publisher's process: [`Error::NotHolder`] (the
    /// service is the parent's; so for [`Publisher::publish`] and
    /// [`Publisher::reclaim`]).
    pub fn loan<T: Pod>(&self, len: usize) -> Result<Loan<T>> {
        self.check_holder()?;
        if let Some(loan) = self.loan_in_table(len)? {
            return Ok(loan);
        }
        // No free sample: a dead subscriber's queued samples may be what is missing
        // (the publishes trusted it for up to `LIVENESS_PERIOD`). Ask every joined
        // subscriber, drain the dead, and look once more if that freed any.
        let loan = match self.reclaim()?.freed {
            0 => None,
            _ => self.loan_in_table(len)?,
        };
        loan.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "service {}: all {} samples are loaned, queued, held by subscribers or of \
                 another length (raise PublisherOptions::samples)",
                self.service.name, self.service.config.rows
            ))
        })
    }

    /// A loan of a sample that has (or now gets) a row of the table; `None` if the
    /// pool had none free and the table has no row left for a new one.
    fn loan_in_table<T: Pod>(&self, len: usize) -> Result<Option<Loan<T>>> {
        let loan = self.pool.loan::<T>(len)?;
        let mut table = self.lock();
        let key = loan.buf().key();
        if table.row_of.contains_key(&key) {
            return Ok(Some(loan));
        }
        let row = table.rows.len();
        if row >= self.service.config.rows {
            drop(table);
            self.pool.give_back_segment(loan.into_buf())?;
            return Ok(None);
        }
        let (map, slots) = loan.buf().slot_watch();
        let header = Header::of(&*map, slots)
            .filter(|_| slots == subscriber_slot(self.service.config.entries))
            .ok_or_else(|| Error::Corrupted {
                segment: self.service.name.clone(),
                what: "a sample segment's slots lie outside its mapping".into(),
            })?;
        // The publish moves references into the subscribers' own slots by index (no
        // claim raises the mark over them): the mark covers them all from the start.
        if !cfg!(shmrc_plant = "pubsub_sample_uncovered") {
            header.holders().cover_every_slot();
        }
        self.service
            .add_row(row, key.nonce, loan.buf().fields().share_key);
        table.rows.push((map, slots));
        table.row_of.insert(key, row);
        Ok(Some(loan))
    }

    /// Publishes `loan` to every joined subscriber (zero-copy: each gets a reference
    /// to the same segment), under the service's slow-subscriber policy, then wakes
    /// the blocked receivers. Departed and dead subscribers' entries are freed on the
    /// way (their queued samples given back). A subscriber's liveness is asked at most
    /// once a millisecond (a system call; see the module docs): one killed since is
    /// still delivered to until then, unless its queue is full. A loan of another
    /// publisher's pool is [`Error::InvalidArgument`].
    pub fn publish<T: Pod>(&self, loan: Loan<T>) -> Result<Delivery<T>> {
        self.check_holder()?;
        let mut table = self.lock();
        let Some(&row) = table.row_of.get(&loan.buf().key()) else {
            return Err(Error::InvalidArgument(format!(
                "a loan that is not of service {}'s publisher",
                self.service.name
            )));
        };
        let descriptor = Descriptor::new(row, loan.generation()).ok_or_else(|| {
            Error::InvalidArgument(format!("sample row {row} beyond the descriptor's range"))
        })?;
        self.refresh_liveness(&mut table);
        let published = self.run(&table, Some(descriptor), &table.alive)?;
        drop(table);
        match published.full {
            Some(entry) => Ok(Delivery::Full { loan, entry }),
            // The loan (this process's use) goes; the references queued keep the
            // segment out of the pool until every subscriber let go.
            None => Ok(Delivery::Sent(Sent::of(published))),
        }
    }

    /// Frees the entries of departed and dead subscribers and gives their queued
    /// samples back to the pool, with no sample published (a publish does the same on
    /// its way): for a publisher that publishes rarely.
    pub fn reclaim(&self) -> Result<Sent> {
        self.check_holder()?;
        let table = self.lock();
        // Trusts nobody: every joined subscriber's liveness is asked.
        self.run(&table, None, &[]).map(Sent::of)
    }

    /// Asks every joined subscriber's liveness again if `LIVENESS_PERIOD` has passed
    /// since the last time: what a publish may trust until then.
    fn refresh_liveness(&self, table: &mut Table) {
        let now = Instant::now();
        let fresh = table
            .asked
            .is_some_and(|asked| now.saturating_duration_since(asked) < LIVENESS_PERIOD);
        if fresh || (cfg!(shmrc_plant = "pubsub_trust_forever") && table.asked.is_some()) {
            return;
        }
        for (e, alive) in table.alive.iter_mut().enumerate() {
            // SeqCst: as the publish's own load of the state word.
            let word = self.service.entry_words(e)[0].load(SeqCst);
            *alive = match EntryState::decode(word) {
                EntryState::Joined(t) if self.os.is_alive(t) => word,
                _ => FREE,
            };
        }
        table.asked = Some(now);
    }

    /// [`Error::NotHolder`] naming the service in a child forked from the publisher's
    /// process: its words would name the child (in-flight references the subscribers'
    /// takes do not expect: every take `Lost`, the samples pinned while it lives).
    fn check_holder(&self) -> Result<()> {
        if self.os.current() == self.service.publisher {
            Ok(())
        } else {
            Err(Error::NotHolder {
                segment: self.service.name.clone(),
            })
        }
    }

    fn run(&self, table: &Table, sample: Option<Descriptor>, alive: &[u64]) -> Result<Published> {
        let entries = super::entries(&self.service);
        let rows = RowViews(&table.rows);
        let q = Queue::with_lookup(&entries, &rows, self.service.wake()).trusting(alive);
        queue::publish(&self.os, &q, sample, self.policy())
    }

    /// What the sample pool did and keeps (see [`ShmPool::stats`]).
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// The service's `/dev/shm` name.
    pub fn service_name(&self) -> &str {
        &self.service.name
    }

    /// The service's slow-subscriber policy.
    pub fn policy(&self) -> Policy {
        if self.service.config.backpressure {
            Policy::Backpressure
        } else {
            Policy::DropOldest
        }
    }
}

impl Drop for Publisher {
    /// The publisher leaves: its service's name goes (a tombstone in the publisher
    /// word first, so subscribers see it gone), then every reference it still has in
    /// flight to any subscriber is given back (a subscriber's take of one is `Lost`
    /// from then on: each is a CAS on the slot against the take's, one wins), then
    /// the pool gives its own references back. A sample a subscriber holds is then
    /// unlinked by its last holder's release (a [`Received`](super::Received) drop
    /// finalizes once the publisher is gone), or by a sweep if that holder dies.
    fn drop(&mut self) {
        let me = self.os.current();
        if me != self.service.publisher {
            // A forked child's copy: the service and its references are its parent's.
            return;
        }
        let _ = service::take_over(&self.os, &self.service);
        let table = self.lock();
        let mine = in_flight_word(me);
        for (map, slots) in &table.rows {
            if let Some(header) = Header::of(&**map, *slots) {
                let h = header.holders();
                for e in 0..self.service.config.entries {
                    holders::transfer_step(&h, subscriber_slot(e), mine, FREE);
                }
            }
        }
    }
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("service", &self.service.name)
            .field("config", &self.service.config)
            .finish()
    }
}
