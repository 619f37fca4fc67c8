//! The service segment of publish/subscribe: its name, layout, creation (one per
//! service name: made whole under a temporary name, then linked to its name, which
//! fails if the name exists, as `O_EXCL` does; a dead publisher's taken over), the
//! sweep of a dead creator's temporary file, validation on join (P4) and its sweep. The queue's words live here; `protocol/queue.rs` owns their steps. A
//! protocol room of its own (below the sweep, which judges service segments), so that
//! it imports nothing of the user API that `pubsub/` builds on it.
//!
//! ```text
//! word  0  magic "SHMRCSVC"           published last, with Release
//! word  1  layout version
//! word  2  entries E
//! word  3  ring capacity C
//! word  4  sample table rows N
//! word  5  policy (0 drop-oldest, 1 backpressure)
//! word  6  publisher token (a take-over or sweep CASes it to a tombstone first)
//! word  7  publisher uid
//! word  8  publisher pid namespace
//! word  9  total length in bytes (checked against fstat)
//! word 10  wake word
//! word 11  sample table rows in use (written by the publisher only, Release)
//! words 12..16 reserved (0)
//! words 16..16+3N  the sample table: per row the segment's nonce (2 words), share key
//! then E entries, each 8-word aligned: state, head, tail, ring of C descriptors
//! ```
//!
//! A sample segment's name is the pool's ordinary segment name, made of the
//! namespace, the publisher's uid, pid namespace and token (all in the header) and the
//! row's nonce; the share key is what an attach checks (`handle.rs`), so a subscriber
//! holds exactly what a handle's receiver would: a row names only a segment of the
//! namespace (P2), and one whose header does not carry the row's key, the publisher as
//! creator and `1 + E` holder slots is refused.
//!
//! The file is created mode 0600 by the publisher; a joiner refuses one whose owner,
//! header uid or mode differ (another user's plant), and a header whose sizes do not
//! add up to `fstat`'s length (so no word it reads lies outside the mapping: no
//! SIGBUS).

use crate::error::{Error, Result};
use crate::namespace::{NameParts, Namespace, is_name_byte};
use crate::os::{Mapping, Os};
use crate::protocol::holders::{Slot, TOMB, TOMB_BY, is_tomb, tomb_owner, tomb_word};
use crate::sync::{AtomicU64, Ordering};
use crate::token::Token;

/// `b"SHMRCSVC"` read as a big-endian word.
pub const SERVICE_MAGIC: u64 = u64::from_be_bytes(*b"SHMRCSVC");
/// The layout version this build writes and reads.
pub const SERVICE_VERSION: u64 = 1;
/// Words before the sample table.
pub const SERVICE_HEADER_WORDS: usize = 16;
/// Words per sample table row.
pub const ROW_WORDS: usize = 3;
/// The most subscriber entries a service may have (a sample segment has `1 + E`
/// holder slots, at most [`crate::protocol::segment::MAX_CAPACITY`]).
pub const MAX_ENTRIES: usize = 1024;
/// The most descriptors a ring may hold.
pub const MAX_RING: usize = 1 << 16;
/// The most rows a sample table may have (far below a descriptor's 24 bits of sample
/// index).
pub const MAX_TABLE: usize = 1 << 16;
/// The longest service name.
pub const MAX_SERVICE_NAME: usize = 64;
/// The word in the name between the namespace's start and the service's name.
const SERVICE_INFIX: &str = "service.";

const W_MAGIC: usize = 0;
const W_VERSION: usize = 1;
const W_ENTRIES: usize = 2;
const W_CAPACITY: usize = 3;
const W_ROWS: usize = 4;
const W_POLICY: usize = 5;
const W_PUBLISHER: usize = 6;
const W_UID: usize = 7;
const W_PIDNS: usize = 8;
const W_TOTAL: usize = 9;
const W_WAKE: usize = 10;
const W_ROWS_USED: usize = 11;

/// A service's shape, chosen by its publisher at creation.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Config {
    /// Subscriber entries `E`.
    pub entries: usize,
    /// Ring capacity `C`.
    pub capacity: usize,
    /// Sample table rows `N`.
    pub rows: usize,
    /// What a full ring does: backpressure (`true`) or drop-oldest.
    pub backpressure: bool,
}

impl Config {
    /// Words of one entry: state, head, tail and the ring, rounded up to a cache line.
    fn entry_words(&self) -> usize {
        (3 + self.capacity).div_ceil(8) * 8
    }

    fn entries_start(&self) -> usize {
        (SERVICE_HEADER_WORDS + ROW_WORDS * self.rows).div_ceil(8) * 8
    }

    /// Words of the whole segment.
    pub fn total_words(&self) -> usize {
        self.entries_start() + self.entries * self.entry_words()
    }

    /// Refuses a shape out of bounds, naming which bound.
    pub fn check(&self) -> Result<()> {
        let why = if self.entries == 0 || self.entries > MAX_ENTRIES {
            format!("{} subscriber entries (1 to {MAX_ENTRIES})", self.entries)
        } else if self.capacity == 0 || self.capacity > MAX_RING {
            format!("a ring of {} samples (1 to {MAX_RING})", self.capacity)
        } else if self.rows == 0 || self.rows > MAX_TABLE {
            format!("{} samples (1 to {MAX_TABLE})", self.rows)
        } else {
            return Ok(());
        };
        Err(Error::InvalidArgument(format!(
            "a publish/subscribe service of {why}"
        )))
    }
}

/// The `/dev/shm` name of service `service` of namespace `ns` for user `uid`; a service
/// name of other than 1 to 64 ASCII letters, digits, `-` and `_` is
/// [`Error::InvalidArgument`] naming the rule.
pub fn service_name(ns: &Namespace, uid: u32, service: &str) -> Result<String> {
    let why = if service.is_empty() || service.len() > MAX_SERVICE_NAME {
        Some("it must be 1 to 64 bytes long")
    } else if !service.bytes().all(is_name_byte) {
        Some("only ASCII letters, digits, '-' and '_' are allowed")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::InvalidArgument(format!(
            "invalid service name {service:?}: {why}"
        ))),
        None => Ok(format!("{}{SERVICE_INFIX}{service}", ns.name_start(uid))),
    }
}

/// Whether `name` (as `/dev/shm` lists it) is a service segment's name of `ns` for
/// user `uid` (what a sweep recognises instead of judging it a damaged segment).
pub fn is_service_name(ns: &Namespace, uid: u32, name: &str) -> bool {
    name.strip_prefix(&ns.name_start(uid))
        .and_then(|rest| rest.strip_prefix(SERVICE_INFIX))
        .is_some_and(|service| service_name(ns, uid, service).is_ok())
}

/// A mapped, validated (or just created) service segment.
pub struct Service<O: Os> {
    /// Its name.
    pub name: String,
    /// The mapping of the whole file.
    pub map: O::Map,
    /// Its shape.
    pub config: Config,
    /// The publisher that created it.
    pub publisher: Token,
}

impl<O: Os> Service<O> {
    fn words(&self) -> &[AtomicU64] {
        self.map
            .words(self.config.total_words())
            .expect("the mapping was checked to hold every word")
    }

    /// The wake word.
    pub fn wake(&self) -> &AtomicU64 {
        &self.words()[W_WAKE]
    }

    /// Entry `entry`'s words: state, head, tail, then the ring's `C`.
    pub fn entry_words(&self, entry: usize) -> &[AtomicU64] {
        let at = self.config.entries_start() + entry * self.config.entry_words();
        &self.words()[at..at + 3 + self.config.capacity]
    }

    /// Entry `entry`'s head and tail words (a receiver's look for an empty ring, with
    /// no step taken).
    pub fn head_tail(&self, entry: usize) -> (&AtomicU64, &AtomicU64) {
        let words = self.words();
        let at = self.config.entries_start() + entry * self.config.entry_words();
        (&words[at + 1], &words[at + 2])
    }

    /// Entry `entry`'s state word.
    pub fn state(&self, entry: usize) -> &AtomicU64 {
        let at = self.config.entries_start() + entry * self.config.entry_words();
        &self.words()[at]
    }

    /// Rows of the sample table in use.
    pub fn rows_used(&self) -> usize {
        // Acquire: pairs with `add_row`'s Release, so the rows below it are written.
        let used = self.words()[W_ROWS_USED].load(Ordering::Acquire);
        usize::try_from(used).map_or(self.config.rows, |u| u.min(self.config.rows))
    }

    /// Row `row`: the sample segment's nonce and share key.
    pub fn row(&self, row: usize) -> (u128, u64) {
        let at = SERVICE_HEADER_WORDS + row * ROW_WORDS;
        let words = self.words();
        // Relaxed: ordered after `rows_used`'s Acquire.
        let load = |w: usize| words[at + w].load(Ordering::Relaxed);
        (u128::from(load(0)) | (u128::from(load(1)) << 64), load(2))
    }

    /// Writes row `row` (the next unused one) and publishes it (the publisher only).
    pub fn add_row(&self, row: usize, nonce: u128, share_key: u64) {
        let at = SERVICE_HEADER_WORDS + row * ROW_WORDS;
        let words = self.words();
        // Relaxed: published by the Release store of the count below.
        words[at].store(nonce as u64, Ordering::Relaxed);
        words[at + 1].store((nonce >> 64) as u64, Ordering::Relaxed);
        words[at + 2].store(share_key, Ordering::Relaxed);
        // Release: the row's words before the count that makes them visible.
        words[W_ROWS_USED].store(row as u64 + 1, Ordering::Release);
    }

    /// The publisher word as it is now (its token, or a tombstone once taken over).
    pub fn publisher_word(&self) -> u64 {
        // SeqCst: one order with the take-over's CAS.
        self.words()[W_PUBLISHER].load(Ordering::SeqCst)
    }
}

/// What [`create`] found under the service's name.
pub enum Created<O: Os> {
    /// The service, new, published by this process.
    New(Service<O>),
    /// A live publisher's service: refused.
    Live {
        /// Its publisher.
        publisher: Token,
    },
}

/// Creates the service segment `name` with `config` for this process, taking over a
/// dead publisher's (its tombstone CASed in, then unlinked) on the way, and a
/// tombstoned one whose tombstone's holder died before unlinking it
/// ([`Tombstoned::take_over`]).
///
/// The file is made whole under a temporary name first ([`temporary_name`]: this
/// process's token and a nonce, so no other creator uses it and a sweep can tell a
/// dead creator's), then linked to `name` (`link` fails if `name` exists, as
/// `O_EXCL` does), then the temporary name is unlinked. So `name` never names a
/// half-written service: a creator killed at any point leaves at most its temporary
/// name, which [`sweep_temporary`] removes once the creator is dead.
pub fn create<O: Os>(os: &O, name: &str, config: Config) -> Result<Created<O>> {
    Unlinked::prepare(os, name, config)?.link(os)
}

/// A service made whole under its temporary name, not linked to its name yet: the
/// first step of [`create`] (a test may kill its process here).
pub struct Unlinked<O: Os> {
    temporary: Temporary<O>,
    service: Service<O>,
    /// Linked to its name before its header was published (the plant below).
    named_early: bool,
}

impl<O: Os> Unlinked<O> {
    /// Makes service `name` with `config` whole under a temporary name.
    ///
    /// Built with `SHMRC_PLANT=service_named_before_published`, it links the name
    /// first and publishes the header only in [`Unlinked::link`], as builds before the
    /// temporary name created the name and then wrote the header: a creator killed
    /// between the two steps leaves a half-created service (what
    /// `tests/pubsub_creation.rs` must catch).
    pub fn prepare(os: &O, name: &str, config: Config) -> Result<Unlinked<O>> {
        config.check()?;
        let temporary = Temporary::create(os, name)?;
        let named_early = cfg!(shmrc_plant = "service_named_before_published");
        if named_early {
            os.shm_link(&temporary.name, name)?;
        }
        let service = initialize(os, name, &temporary.file, config, !named_early)?;
        Ok(Unlinked {
            temporary,
            service,
            named_early,
        })
    }

    /// The temporary name.
    #[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
    pub fn temporary_name(&self) -> &str {
        &self.temporary.name
    }

    /// Links it to its name, taking over a dead publisher's service there (see
    /// [`create`]); the temporary name is unlinked in every outcome.
    pub fn link(self, os: &O) -> Result<Created<O>> {
        if self.named_early {
            publish_header(&self.service);
            return Ok(Created::New(self.service));
        }
        let name = self.service.name.clone();
        // A name freed by a take-over may be taken by another creator first: a few
        // rounds.
        for _ in 0..8 {
            os.crash_point()?;
            match os.shm_link(&self.temporary.name, &name) {
                Ok(()) => return Ok(Created::New(self.service)),
                Err(e) if already_exists(&e) => {}
                Err(e) => return Err(e),
            }
            let there = match open_published_any(os, &name) {
                Ok(Opened::Published(there)) => there,
                Ok(Opened::Tombstoned(tombstoned)) => {
                    // A dead holder's is taken over; a live one unlinks it any moment.
                    if !tombstoned.take_over(os)? {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    continue;
                }
                Err(Error::Gone { .. }) => continue,
                Err(e) => return Err(e),
            };
            if os.is_alive(there.publisher) {
                return Ok(Created::Live {
                    publisher: there.publisher,
                });
            }
            take_over(os, &there)?;
        }
        Err(Error::InvalidArgument(format!(
            "service {name}: 8 times in a row its name was taken over and created again \
             by others, or a leaving publisher's tombstone was still on it"
        )))
    }
}

/// The word between a namespace's start and the rest of a temporary service file's
/// name: `<prefix>.<uid>.service-new.<pidns>.<pid>.<start>.<nonce>`, the tail a
/// segment's name has (`namespace.rs`), so it parses as one once the word is taken out.
const TEMPORARY_INFIX: &str = "service-new.";

/// The temporary name under which process `creator` (of pid namespace
/// `pid_namespace`) makes a service of `ns` for user `uid` whole, before linking it
/// to its name.
pub fn temporary_name(
    ns: &Namespace,
    uid: u32,
    pid_namespace: u64,
    creator: Token,
    nonce: u128,
) -> String {
    let start = ns.name_start(uid);
    let segment = ns.segment_name(uid, pid_namespace, creator, nonce);
    format!("{start}{TEMPORARY_INFIX}{}", &segment[start.len()..])
}

/// What a temporary service file's name `name` of `ns` for user `uid` says of its
/// creation (its creator and pid namespace); `None` if it is no such name.
pub fn parse_temporary(ns: &Namespace, uid: u32, name: &str) -> Option<NameParts> {
    let start = ns.name_start(uid);
    let tail = name.strip_prefix(&start)?.strip_prefix(TEMPORARY_INFIX)?;
    ns.parse(&format!("{start}{tail}"), uid).ok()
}

/// The namespace of `name` if it is a service segment's or a temporary service file's
/// name of user `uid` (of any namespace), with what a temporary one's name says of its
/// creation.
pub fn namespace_of(name: &str, uid: u32) -> Option<(Namespace, Option<NameParts>)> {
    let (prefix, _) = name.split_once('.')?;
    let ns = Namespace::new(prefix).ok()?;
    if is_service_name(&ns, uid, name) {
        return Some((ns, None));
    }
    let parts = parse_temporary(&ns, uid, name)?;
    Some((ns, Some(parts)))
}

/// A temporary service file this process made, unlinked when dropped (it was linked
/// to the service's name, or the creation failed).
struct Temporary<O: Os> {
    os: O,
    name: String,
    file: O::File,
}

impl<O: Os> Temporary<O> {
    /// A new temporary file for the service `name` (`<prefix>.<uid>.service.<service>`,
    /// as [`service_name`] makes it).
    fn create(os: &O, name: &str) -> Result<Temporary<O>> {
        let ns = match namespace_of(name, os.uid()) {
            Some((ns, None)) => ns,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "{name:?} is no service's name"
                )));
            }
        };
        let temporary = temporary_name(
            &ns,
            os.uid(),
            os.pid_namespace(),
            os.current(),
            os.random_u128()?,
        );
        let file = os.shm_create(&temporary)?;
        Ok(Temporary {
            os: os.clone(),
            name: temporary,
            file,
        })
    }
}

impl<O: Os> Drop for Temporary<O> {
    fn drop(&mut self) {
        // Best effort: a name of this process's own, which only a sweep after its death
        // unlinks otherwise.
        let _ = self.os.shm_unlink(&self.name);
    }
}

/// What [`sweep_temporary`] did with a temporary service file.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum SweptTemporary {
    /// Its creator lives (it is creating the service): left alone.
    Kept,
    /// Its creator is dead: unlinked (dry run: would be).
    Unlinked,
    /// Gone meanwhile.
    Vanished,
}

/// The sweep of temporary service file `name` whose name says `parts`: unlinked once
/// its creator is dead (killed while creating the service: the file is nobody's, or,
/// linked already, the service's name keeps it), kept while the creator lives; a
/// creator of another pid namespace cannot be judged ([`Error::OtherPidNamespace`]).
/// Only the name is looked at: the file is never opened. `dry_run` changes nothing.
pub fn sweep_temporary<O: Os>(
    os: &O,
    name: &str,
    parts: NameParts,
    dry_run: bool,
) -> Result<SweptTemporary> {
    if parts.pid_namespace != os.pid_namespace() {
        return Err(Error::OtherPidNamespace {
            segment: name.to_owned(),
            theirs: parts.pid_namespace,
            ours: os.pid_namespace(),
        });
    }
    if parts.creator == os.current() || os.is_alive(parts.creator) {
        return Ok(SweptTemporary::Kept);
    }
    if dry_run {
        return Ok(SweptTemporary::Unlinked);
    }
    match os.shm_unlink(name) {
        Ok(()) => Ok(SweptTemporary::Unlinked),
        Err(e) if e.is_gone() => Ok(SweptTemporary::Vanished),
        Err(e) => Err(e),
    }
}

/// How long [`create`] waits for a service another creator has made but not published
/// yet (a creator publishes within microseconds of making the name).
const PUBLISH_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// [`open`], waiting up to [`PUBLISH_WAIT`] for a half-created service to be published.
/// This build never names an unpublished service ([`create`] links a whole file), but
/// a build before the temporary name created the name first and wrote the header
/// after: one at work is waited for; still unpublished after that, its creator died
/// before publishing it (or is stopped), or a hostile writer made it:
/// [`Error::HalfCreated`] naming it. Its creator cannot be judged (the header that
/// would name it is not written), so it is left for the user to remove.
pub fn open_published<O: Os>(os: &O, name: &str) -> Result<Service<O>> {
    wait_published(|| open(os, name))
}

/// [`open_published`], save that a tombstoned service is [`Opened::Tombstoned`].
fn open_published_any<O: Os>(os: &O, name: &str) -> Result<Opened<O>> {
    wait_published(|| open_any(os, name))
}

fn wait_published<T>(mut open: impl FnMut() -> Result<T>) -> Result<T> {
    let deadline = std::time::Instant::now() + PUBLISH_WAIT;
    loop {
        match open() {
            Err(Error::HalfCreated { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            other => return other,
        }
    }
}

fn already_exists(e: &Error) -> bool {
    matches!(e, Error::Os { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists)
}

/// Unlinks the service `service` of a dead publisher if this process is the one that
/// turns its publisher word into a tombstone (so that a name another creator made
/// meanwhile is never unlinked); `false` if another one did.
pub fn take_over<O: Os>(os: &O, service: &Service<O>) -> Result<bool> {
    let word = &service.words()[W_PUBLISHER];
    // SeqCst: one winner per file; only the winner unlinks its name.
    let won = word
        .compare_exchange(
            service.publisher.word(),
            tomb_word(os.current()),
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_ok();
    if won {
        unlink_gone_ok(os, &service.name)?;
    }
    Ok(won)
}

/// Sizes, maps and writes a new service file for this process as publisher; with
/// `publish`, publishes its header too ([`publish_header`]).
fn initialize<O: Os>(
    os: &O,
    name: &str,
    file: &O::File,
    config: Config,
    publish: bool,
) -> Result<Service<O>> {
    let total = config.total_words() * 8;
    let mapped = os
        .allocate(file, total as u64)
        .and_then(|()| os.map_stated(file, total, total as u64));
    // On failure the temporary file's name goes with it (`Temporary`'s drop).
    let map = mapped?;
    let me = os.current();
    let words = map
        .words(config.total_words())
        .ok_or_else(|| corrupted(name, "the new mapping is shorter than its layout"))?;
    let values = [
        (W_VERSION, SERVICE_VERSION),
        (W_ENTRIES, config.entries as u64),
        (W_CAPACITY, config.capacity as u64),
        (W_ROWS, config.rows as u64),
        (W_POLICY, u64::from(config.backpressure)),
        (W_PUBLISHER, me.word()),
        (W_UID, u64::from(os.uid())),
        (W_PIDNS, os.pid_namespace()),
        (W_TOTAL, total as u64),
    ];
    for (w, value) in values {
        // Relaxed: published by the magic's Release below.
        words[w].store(value, Ordering::Relaxed);
    }
    let service = Service {
        name: name.to_owned(),
        map,
        config,
        publisher: me,
    };
    if publish {
        publish_header(&service);
    }
    Ok(service)
}

/// Stores the magic: every word written before it is a joiner's to read.
fn publish_header<O: Os>(service: &Service<O>) {
    // Release: every word written before the magic a joiner reads with Acquire.
    service.words()[W_MAGIC].store(SERVICE_MAGIC, Ordering::Release);
}

fn corrupted(segment: &str, what: impl Into<String>) -> Error {
    Error::Corrupted {
        segment: segment.to_owned(),
        what: what.into(),
    }
}

/// Opens and validates the service segment `name` (P4): owner, mode 0600, length
/// against its layout, magic, version, bounds, header uid and pid namespace. A
/// malformed or foreign one is an [`Error`] naming the cause; one whose publisher
/// left (a tombstone in its publisher word) is [`Error::Gone`].
pub fn open<O: Os>(os: &O, name: &str) -> Result<Service<O>> {
    match open_any(os, name)? {
        Opened::Published(service) => Ok(service),
        Opened::Tombstoned(_) => Err(Error::Gone {
            segment: name.to_owned(),
        }),
    }
}

/// What [`open_any`] found: a published service, or one whose publisher word is a
/// tombstone (its publisher left, or it was taken over or swept) and whose name is
/// about to be unlinked by the tombstone's holder.
pub enum Opened<O: Os> {
    /// Its publisher word is a publisher's token.
    Published(Service<O>),
    /// Its publisher word is a tombstone.
    Tombstoned(Tombstoned<O>),
}

/// A validated service segment whose publisher word is a tombstone.
pub struct Tombstoned<O: Os> {
    /// Its name.
    pub name: String,
    /// The mapping of the whole file.
    pub map: O::Map,
    /// Whose tombstone it is: the process that unlinks the name (None: nobody's, a
    /// hostile writer's [`crate::protocol::holders::TOMB`]).
    pub by: Option<Token>,
}

impl<O: Os> Tombstoned<O> {
    /// If its holder is dead (it was killed between its tombstone and its unlink),
    /// takes the tombstone over (a CAS to this process's own, one winner per file, as
    /// a finalizer takes over a dead one's in `holders.rs`) and unlinks the name, once
    /// it has checked that the name is still this file (its publisher word is this
    /// process's tombstone: the dead holder may have unlinked it already, and another
    /// creator made the name again). `false`: its holder lives (it is about to unlink
    /// the name), another process took it over first, or the name was already
    /// another file's.
    pub fn take_over(&self, os: &O) -> Result<bool> {
        let seen = self.by.map_or(TOMB, tomb_word);
        if self.by.is_some_and(|t| os.is_alive(t)) {
            return Ok(false);
        }
        let Some(header) = self.map.words(SERVICE_HEADER_WORDS) else {
            return Ok(false);
        };
        let mine = tomb_word(os.current());
        // SeqCst: one winner per file; only the tombstone's holder unlinks its name.
        let won = header[W_PUBLISHER]
            .compare_exchange(seen, mine, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if !won {
            return Ok(false);
        }
        match open_any(os, &self.name) {
            Ok(Opened::Tombstoned(there)) if there.by == Some(os.current()) => {
                unlink_gone_ok(os, &self.name)?;
                Ok(true)
            }
            // The name is another file now, or none: ours was unlinked already.
            _ => Ok(false),
        }
    }
}

fn unlink_gone_ok<O: Os>(os: &O, name: &str) -> Result<()> {
    match os.shm_unlink(name) {
        Ok(()) => Ok(()),
        Err(e) if e.is_gone() => Ok(()),
        Err(e) => Err(e),
    }
}

/// [`open`], save that a tombstoned service is [`Opened::Tombstoned`] (whose, for a
/// take-over of a dead holder's) rather than [`Error::Gone`].
pub fn open_any<O: Os>(os: &O, name: &str) -> Result<Opened<O>> {
    let file = os.shm_open(name)?;
    let info = os.stat(&file)?;
    let me = os.uid();
    if info.uid != me {
        return Err(Error::OtherUser {
            segment: name.to_owned(),
            owner: info.uid,
            me,
        });
    }
    if info.mode != 0o600 {
        return Err(corrupted(
            name,
            format!(
                "mode {:o}, not 0600: not made by a publisher (shared with others?)",
                info.mode
            ),
        ));
    }
    if info.len < (SERVICE_HEADER_WORDS * 8) as u64 {
        return if info.len == 0 {
            Err(Error::HalfCreated {
                segment: name.to_owned(),
            })
        } else {
            Err(Error::Truncated {
                segment: name.to_owned(),
                need: (SERVICE_HEADER_WORDS * 8) as u64,
                have: info.len,
            })
        };
    }
    let len = usize::try_from(info.len)
        .ok()
        .filter(|&len| len <= (1 << 40))
        .ok_or_else(|| corrupted(name, format!("file length {} beyond any layout", info.len)))?;
    let map = os.map_stated(&file, len, info.len)?;
    let header = map
        .words(SERVICE_HEADER_WORDS)
        .ok_or_else(|| corrupted(name, "the mapping is shorter than the header"))?;
    // Acquire: pairs with initialize's Release.
    match header[W_MAGIC].load(Ordering::Acquire) {
        SERVICE_MAGIC => {}
        0 => {
            return Err(Error::HalfCreated {
                segment: name.to_owned(),
            });
        }
        found => {
            return Err(Error::BadMagic {
                segment: name.to_owned(),
                found,
            });
        }
    }
    // Relaxed: after the magic's Acquire.
    let load = |w: usize| header[w].load(Ordering::Relaxed);
    let version = load(W_VERSION);
    if version != SERVICE_VERSION {
        return Err(Error::WrongVersion {
            segment: name.to_owned(),
            found: version,
            supported: SERVICE_VERSION,
        });
    }
    let size = |w: usize| usize::try_from(load(w)).unwrap_or(usize::MAX);
    let backpressure = match load(W_POLICY) {
        0 => false,
        1 => true,
        other => return Err(corrupted(name, format!("policy word {other}"))),
    };
    let config = Config {
        entries: size(W_ENTRIES),
        capacity: size(W_CAPACITY),
        rows: size(W_ROWS),
        backpressure,
    };
    config
        .check()
        .map_err(|e| corrupted(name, format!("its shape is out of bounds: {e}")))?;
    let total = config.total_words() * 8;
    if load(W_TOTAL) != total as u64 || info.len != total as u64 || map.len() < total {
        return Err(Error::Truncated {
            segment: name.to_owned(),
            need: total as u64,
            have: info.len,
        });
    }
    let uid = load(W_UID);
    if uid != u64::from(me) {
        return Err(Error::OtherUser {
            segment: name.to_owned(),
            owner: u32::try_from(uid).unwrap_or(u32::MAX),
            me,
        });
    }
    if load(W_PIDNS) != os.pid_namespace() {
        return Err(Error::OtherPidNamespace {
            segment: name.to_owned(),
            theirs: load(W_PIDNS),
            ours: os.pid_namespace(),
        });
    }
    let word = header[W_PUBLISHER].load(Ordering::SeqCst);
    let publisher = match Token::from_word(word) {
        Some(token) if word & TOMB_BY == 0 => Ok(token),
        _ if is_tomb(word) => Err(tomb_owner(word)),
        _ => {
            return Err(Error::Gone {
                segment: name.to_owned(),
            });
        }
    };
    Ok(match publisher {
        Ok(publisher) => Opened::Published(Service {
            name: name.to_owned(),
            map,
            config,
            publisher,
        }),
        Err(by) => Opened::Tombstoned(Tombstoned {
            name: name.to_owned(),
            map,
            by,
        }),
    })
}

/// What [`sweep`] did with a service segment.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Swept {
    /// Its publisher lives, or a subscriber does (or it is tombstoned by a live
    /// process, which unlinks it): left alone. The details of a published one.
    Kept(Option<ServiceDetails>),
    /// Its publisher died and no subscriber lives, or its tombstone's holder died:
    /// unlinked (dry run: would be). The details of a published one.
    Unlinked(Option<ServiceDetails>),
    /// Gone meanwhile (a take-over or another sweep got there first).
    Vanished,
}

/// A published service as a sweep (or `shmrc ls`) saw it, before it acted.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::Namespace;
/// use shmrc::pubsub::{Publisher, PublisherOptions, Subscriber};
///
/// let ns = Namespace::new("shmrc-doc-service-details")?;
/// let options = PublisherOptions::new().namespace(ns.clone()).subscribers(4).samples(8);
/// let publisher = Publisher::create("odometry", options)?;
/// let subscriber = Subscriber::join_in(&ns, "odometry")?;
/// let report = shmrc::inspect(&ns)?;
/// let details = report.services[0].details.unwrap();
/// assert_eq!(details.publisher.pid(), std::process::id());
/// assert!(details.publisher_alive);
/// assert_eq!((details.subscribers, details.subscriber_entries), (1, 4));
/// assert_eq!((details.samples, details.sample_rows), (0, 8)); // none loaned yet
/// # drop((subscriber, publisher));
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct ServiceDetails {
    /// The process that created it and publishes.
    pub publisher: Token,
    /// Whether the publisher is alive.
    pub publisher_alive: bool,
    /// Subscribers joined and alive.
    pub subscribers: usize,
    /// The most subscribers it takes (its entries).
    pub subscriber_entries: usize,
    /// Sample segments its publisher has made (rows of its sample table in use).
    pub samples: usize,
    /// The most sample segments it may have (its sample table's rows).
    pub sample_rows: usize,
    /// Samples a subscriber's queue holds.
    pub queue: usize,
    /// Bytes of the service file (its header, sample table and queues; the samples'
    /// own segments are listed as segments).
    pub size: u64,
}

/// The sweep of service segment `name`: unlinked once its publisher is dead and every
/// entry is free, left, or a dead subscriber's (a joined entry's state word is its
/// subscriber's held word: `protocol/queue.rs`'s join); kept while either lives. A
/// tombstoned one is kept while its tombstone's holder lives (it unlinks the name),
/// taken over and unlinked once that holder is dead ([`Tombstoned::take_over`]); an
/// error (it cannot be trusted: the error says why) leaves it alone. `dry_run`
/// changes nothing. A published one's [`ServiceDetails`] come with what was done.
pub fn sweep<O: Os>(os: &O, name: &str, dry_run: bool) -> Result<Swept> {
    let service = match open_any::<O>(os, name) {
        Ok(Opened::Published(service)) => service,
        // A tombstone's live holder unlinks the name any moment; a dead one's (killed
        // between its tombstone and its unlink) is taken over.
        Ok(Opened::Tombstoned(t)) if t.by.is_some_and(|t| os.is_alive(t)) => {
            return Ok(Swept::Kept(None));
        }
        Ok(Opened::Tombstoned(_)) if dry_run => return Ok(Swept::Unlinked(None)),
        Ok(Opened::Tombstoned(t)) => {
            return Ok(if t.take_over(os)? {
                Swept::Unlinked(None)
            } else {
                Swept::Vanished
            });
        }
        Err(Error::Gone { .. }) => return Ok(Swept::Vanished),
        Err(e) => return Err(e),
    };
    let subscribers = (0..service.config.entries)
        .filter(|&e| {
            // SeqCst: one order over state words.
            let word = service.state(e).load(Ordering::SeqCst);
            matches!(Slot::decode(word), Slot::Held(t) if os.is_alive(t))
        })
        .count();
    let details = ServiceDetails {
        publisher: service.publisher,
        publisher_alive: os.is_alive(service.publisher),
        subscribers,
        subscriber_entries: service.config.entries,
        samples: service.rows_used(),
        sample_rows: service.config.rows,
        queue: service.config.capacity,
        size: (service.config.total_words() * 8) as u64,
    };
    if details.publisher_alive || subscribers > 0 {
        return Ok(Swept::Kept(Some(details)));
    }
    if dry_run {
        return Ok(Swept::Unlinked(Some(details)));
    }
    Ok(if take_over(os, &service)? {
        Swept::Unlinked(Some(details))
    } else {
        Swept::Vanished
    })
}

#[cfg(all(test, not(any(shmrc_loom, shmrc_shuttle))))]
mod tests {
    //! The sample table's rows as a subscriber reads them back.

    use super::*;
    use crate::os::sim::SimKernel;

    /// Each row reads back the nonce (both halves) and share key its publisher wrote,
    /// and writing a row leaves the rows before it and the header as they were. Without
    /// it, a nonce whose high half is lost or a share key written two words too early
    /// (into the header, or the previous row) survived mutation testing: the tests
    /// that run there open no sample by its row.
    #[test]
    fn each_row_reads_back_what_its_publisher_wrote_and_no_other_word_moves() {
        let kernel = SimKernel::new(33);
        let os = kernel.spawn(1000);
        let config = Config {
            entries: 2,
            capacity: 4,
            rows: 3,
            backpressure: false,
        };
        let ns = Namespace::new("shmrc-test-rows").unwrap();
        let name = service_name(&ns, os.uid(), "rows").unwrap();
        let Created::New(service) = create(&os, &name, config).unwrap() else {
            panic!("a live publisher's service under a fresh name");
        };
        let header: Vec<u64> = service.words()[..SERVICE_HEADER_WORDS]
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect();
        let rows = [
            (
                0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128,
                0x1111_2222_3333_4444,
            ),
            (
                0xaaaa_bbbb_cccc_dddd_0000_0000_0000_0001_u128,
                0x5555_6666_7777_8888,
            ),
        ];
        for (row, &(nonce, share_key)) in rows.iter().enumerate() {
            service.add_row(row, nonce, share_key);
            assert_eq!(service.rows_used(), row + 1);
            for (earlier, &written) in rows[..=row].iter().enumerate() {
                assert_eq!(
                    service.row(earlier),
                    written,
                    "row {earlier} after row {row}"
                );
            }
        }
        for (w, &before) in header.iter().enumerate().filter(|&(w, _)| w != W_ROWS_USED) {
            let now = service.words()[w].load(Ordering::Relaxed);
            assert_eq!(now, before, "header word {w}");
        }
        assert!(take_over(&os, &service).unwrap());
        assert!(kernel.names().is_empty());
    }
}
