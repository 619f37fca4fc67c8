//! What `shmrc ls --json` and `shmrc sweep --json` print, and what the Python
//! package's `shmrc.ls()` and `shmrc.sweep()` return (feature `serde`): views of the
//! library's [`SweepReport`]s made for serde (the reports themselves hold the library's
//! parsed header and name, and an [`crate::Error`] for a segment left alone, none of
//! which is meant to be a schema), and how an [`Action`] reads in a table.
//! [`listing`] and [`swept`] make them for one namespace or every one found.

use serde::Serialize;

use crate::error::Result;
use crate::manager::DefaultOs;
use crate::namespace::Namespace;
use crate::os::Os;
use crate::protocol::sweep::{Action, SegmentReport, ServiceDetails, ServiceReport, SweepReport};

/// `shmrc ls --json`: made by [`listing`].
#[derive(Serialize)]
pub struct Listing {
    /// The user's manager, `null` when none answers.
    pub manager: Option<ManagerLine>,
    /// Each namespace looked at, with its segments.
    pub namespaces: Vec<NamespaceView>,
}

/// `shmrc sweep --json [--dry-run]`: made by [`swept`].
#[derive(Serialize)]
pub struct Swept {
    /// The user's manager, `null` when none answers.
    pub manager: Option<ManagerLine>,
    /// Whether nothing was changed (the counts are what a sweep would do).
    pub dry_run: bool,
    /// Each namespace swept, with its segments.
    pub namespaces: Vec<NamespaceView>,
    /// Dead holders' slots reclaimed, all namespaces together.
    pub reclaimed: u32,
    /// Segments unlinked, all namespaces together.
    pub unlinked: u32,
}

/// The manager's pid and live clients (the line `ls` and `sweep` print first).
#[derive(Serialize)]
pub struct ManagerLine {
    /// Its pid.
    pub pid: u32,
    /// Its live clients.
    pub clients: u32,
}

/// One namespace's report.
#[derive(Serialize)]
pub struct NamespaceView {
    /// The namespace prefix.
    pub namespace: String,
    /// Dead holders' slots reclaimed in it (dry run, `ls`: that a sweep would reclaim).
    pub reclaimed: u32,
    /// Segments unlinked in it (dry run, `ls`: that a sweep would unlink).
    pub unlinked: u32,
    /// Its segments, in name order.
    pub segments: Vec<SegmentView>,
    /// Its publish/subscribe services (and temporary files of services being
    /// created), in name order.
    pub services: Vec<ServiceView>,
}

/// One publish/subscribe service (or a temporary file of one being created).
#[derive(Serialize)]
pub struct ServiceView {
    /// Its name in `/dev/shm`.
    pub name: String,
    /// The service's name (what `Publisher::create` and `Subscriber::join` take);
    /// `null` for a temporary file.
    pub service: Option<String>,
    /// Its publisher; `null` when not read (a temporary file, a service its publisher
    /// left, one left alone for an error).
    pub publisher: Option<Creator>,
    /// Subscribers joined and alive; `null` when not read.
    pub subscribers: Option<usize>,
    /// The most subscribers it takes; `null` when not read.
    pub subscriber_entries: Option<usize>,
    /// Sample segments its publisher made; `null` when not read.
    pub samples: Option<usize>,
    /// The most sample segments it may have; `null` when not read.
    pub sample_rows: Option<usize>,
    /// Bytes of the service file (the samples are listed as segments); `null` when
    /// not read.
    pub size: Option<u64>,
    /// As a segment's: `kept`, `unlinked`, `removed_half_created` (a temporary file
    /// of a dead creator), `being_created`, `vanished` or `skipped`; in `ls` and a dry
    /// run, `would_unlink` and `would_remove_half_created` in place of the changes.
    pub action: &'static str,
    /// The same as the table's STATE or ACTION column says it.
    pub state: String,
    /// Why a `skipped` service was left alone; `null` otherwise.
    pub error: Option<String>,
}

/// One segment.
#[derive(Serialize)]
pub struct SegmentView {
    /// Its name in `/dev/shm`.
    pub name: String,
    /// Its data length in bytes; `null` when the header did not validate.
    pub size: Option<usize>,
    /// Its holder slots; `null` when the header did not validate.
    pub holders: Option<Holders>,
    /// The process that created it (from its name).
    pub creator: Creator,
    /// When it was created (Unix time, nanoseconds); `null` without a valid header.
    pub created_at_unix_nanos: Option<u64>,
    /// Milliseconds since it was created; `null` without a valid header.
    pub age_ms: Option<u64>,
    /// Dead holders' slots reclaimed (dry run, `ls`: that a sweep would reclaim).
    pub reclaimed: u32,
    /// What the sweep did: `kept`, `unlinked`, `removed_half_created`, `being_created`,
    /// `vanished` or `skipped`; in `ls` and a dry run, what a sweep would do:
    /// `would_unlink` and `would_remove_half_created` in place of the two changes.
    pub action: &'static str,
    /// The same as the table's STATE or ACTION column says it.
    pub state: String,
    /// Why a `skipped` segment was left alone; `null` otherwise.
    pub error: Option<String>,
}

/// A segment's holder slots.
#[derive(Serialize)]
pub struct Holders {
    /// Held by live processes.
    pub live: u32,
    /// In flight from live senders.
    pub in_flight: u32,
    /// Held or in flight for dead processes: what a sweep reclaims.
    pub dead: u32,
    /// Slots in all.
    pub capacity: usize,
    /// The live process that holds the finalizer word (`null`: none): a finalizer at
    /// work, or one stopped (or a word forged) that the finalize asking it to run again
    /// for the 4th time since its last round takes over (`holders::Finalize::PATIENCE`).
    pub finalizer_pid: Option<u32>,
    /// How many times finalizes asked that finalizer to run again since it last started
    /// a round.
    pub finalizer_deferrals: u64,
}

/// A segment's creator.
#[derive(Serialize)]
pub struct Creator {
    /// Its pid.
    pub pid: u32,
    /// Whether it is alive (`true` when that cannot be judged).
    pub alive: bool,
}

/// The namespaces to look at: the one given, or every shmrc namespace of this user
/// found in `/dev/shm`.
fn namespaces(given: Option<&Namespace>) -> Result<Vec<Namespace>> {
    match given {
        Some(ns) => Ok(vec![ns.clone()]),
        None => crate::manager::registry::namespaces_found(&DefaultOs::default()),
    }
}

/// The manager's pid and live clients, if one answers (never starts one).
pub fn manager_line() -> Option<ManagerLine> {
    crate::manager::status().ok().map(|s| ManagerLine {
        pid: s.pid,
        clients: s.clients,
    })
}

/// What `shmrc ls --json` prints: the segments of `namespace`, or of every shmrc
/// namespace of this user, changing nothing ([`crate::inspect`]), and the manager.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-listing")?;
/// let options = CreateOptions::new().strategy(Strategy::FileSystem).namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let listing = shmrc::report::listing(Some(&ns))?;
/// let segment = &listing.namespaces[0].segments[0];
/// assert_eq!(Some(segment.name.as_str()), buf.name());
/// assert_eq!((segment.size, segment.action), (Some(64), "kept"));
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn listing(namespace: Option<&Namespace>) -> Result<Listing> {
    let now = DefaultOs::default().now_unix_nanos();
    let mut namespaces = Vec::new();
    for ns in self::namespaces(namespace)? {
        let report = crate::manager::inspect(&ns)?;
        namespaces.push(NamespaceView::new(&ns, &report, false, now));
    }
    Ok(Listing {
        manager: manager_line(),
        namespaces,
    })
}

/// What `shmrc sweep --json [--dry-run]` prints: sweeps `namespace`, or every shmrc
/// namespace of this user ([`crate::sweep()`]; with `dry_run`, [`crate::inspect`]).
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::Namespace;
///
/// let ns = Namespace::new("shmrc-doc-swept")?;
/// let swept = shmrc::report::swept(Some(&ns), false)?;
/// assert_eq!((swept.reclaimed, swept.unlinked, swept.dry_run), (0, 0, false));
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn swept(namespace: Option<&Namespace>, dry_run: bool) -> Result<Swept> {
    let now = DefaultOs::default().now_unix_nanos();
    let mut swept = Swept {
        manager: None,
        dry_run,
        namespaces: Vec::new(),
        reclaimed: 0,
        unlinked: 0,
    };
    for ns in self::namespaces(namespace)? {
        let report: SweepReport = if dry_run {
            crate::manager::inspect(&ns)?
        } else {
            crate::manager::sweep(&ns)?
        };
        swept.reclaimed += report.reclaimed;
        swept.unlinked += report.unlinked;
        swept
            .namespaces
            .push(NamespaceView::new(&ns, &report, !dry_run, now));
    }
    swept.manager = manager_line();
    Ok(swept)
}

impl NamespaceView {
    /// The view of `report`, a report on `ns`; `done`: the sweep really ran.
    pub fn new(ns: &Namespace, report: &SweepReport, done: bool, now_nanos: u64) -> NamespaceView {
        NamespaceView {
            namespace: ns.prefix().to_owned(),
            reclaimed: report.reclaimed,
            unlinked: report.unlinked,
            segments: report
                .segments
                .iter()
                .map(|seg| SegmentView::new(seg, done, now_nanos))
                .collect(),
            services: report
                .services
                .iter()
                .map(|service| ServiceView::new(ns, service, done))
                .collect(),
        }
    }
}

impl ServiceView {
    /// The view of `service`, a service of `ns`; `done`: the sweep really ran.
    pub fn new(ns: &Namespace, service: &ServiceReport, done: bool) -> ServiceView {
        let details = service.details;
        let read = |f: fn(&ServiceDetails) -> usize| details.as_ref().map(f);
        let start = format!("{}service.", ns.name_start(DefaultOs::default().uid()));
        ServiceView {
            name: service.name.clone(),
            service: service.name.strip_prefix(&start).map(str::to_owned),
            publisher: details.map(|d| Creator {
                pid: d.publisher.pid(),
                alive: d.publisher_alive,
            }),
            subscribers: read(|d| d.subscribers),
            subscriber_entries: read(|d| d.subscriber_entries),
            samples: read(|d| d.samples),
            sample_rows: read(|d| d.sample_rows),
            size: details.map(|d| d.size),
            action: action_name(&service.action, done),
            state: service_state(service, done),
            error: match &service.action {
                Action::Skipped(e) => Some(e.to_string()),
                _ => None,
            },
        }
    }
}

/// How a service's action reads in a table; `done` = the sweep really ran.
fn service_state(service: &ServiceReport, done: bool) -> String {
    match (&service.action, done, service.details) {
        (Action::Kept, _, Some(d)) if d.publisher_alive => "published".into(),
        (Action::Kept, _, Some(_)) => "publisher dead, subscribers live".into(),
        (Action::Kept, _, None) => "its publisher is leaving".into(),
        (Action::Unlinked, true, _) => "unlinked".into(),
        (Action::Unlinked, false, _) => {
            "publisher and subscribers dead (a sweep unlinks it)".into()
        }
        (Action::RemovedHalfCreated, true, _) => "creator died before linking it, removed".into(),
        (Action::RemovedHalfCreated, false, _) => {
            "creator died before linking it (a sweep removes it)".into()
        }
        (Action::BeingCreated, _, _) => "being created".into(),
        (Action::Vanished, _, _) => "gone".into(),
        (Action::Skipped(e), _, _) => format!("left alone: {e}"),
    }
}

impl SegmentView {
    /// The view of `seg`; `done`: the sweep really ran.
    pub fn new(seg: &SegmentReport, done: bool, now_nanos: u64) -> SegmentView {
        let created = seg.header.map(|h| h.created_at_nanos);
        SegmentView {
            name: seg.name.clone(),
            size: seg.header.map(|h| h.data_len),
            holders: match (&seg.census, &seg.header) {
                (Some(c), Some(h)) => Some(Holders {
                    live: c.live,
                    in_flight: c.in_flight,
                    dead: c.dead,
                    capacity: h.capacity,
                    finalizer_pid: c.finalizer.map(|t| t.pid()),
                    finalizer_deferrals: c.deferrals,
                }),
                _ => None,
            },
            creator: Creator {
                pid: seg.parts.creator.pid(),
                alive: seg.creator_alive,
            },
            created_at_unix_nanos: created,
            age_ms: created.map(|at| now_nanos.saturating_sub(at) / 1_000_000),
            reclaimed: seg.reclaimed,
            action: action_name(&seg.action, done),
            state: state(seg, done),
            error: match &seg.action {
                Action::Skipped(e) => Some(e.to_string()),
                _ => None,
            },
        }
    }
}

/// An action's name in JSON: what was done, or (`done` false: `ls`, a dry run) what a
/// sweep would do.
fn action_name(action: &Action, done: bool) -> &'static str {
    match action {
        Action::Kept => "kept",
        Action::Unlinked if done => "unlinked",
        Action::Unlinked => "would_unlink",
        Action::RemovedHalfCreated if done => "removed_half_created",
        Action::RemovedHalfCreated => "would_remove_half_created",
        Action::BeingCreated => "being_created",
        Action::Vanished => "vanished",
        Action::Skipped(_) => "skipped",
    }
}

/// How a segment's action reads in a table; `done` = the sweep really ran.
fn state(seg: &SegmentReport, done: bool) -> String {
    match (&seg.action, done) {
        (Action::Kept, _) => match seg.census {
            // Kept for its finalizer alone: say who, and how near the takeover is.
            Some(c) if c.live == 0 && c.in_flight == 0 => c.finalizer.map_or_else(
                || "held".into(),
                |t| {
                    format!(
                        "finalizer held by pid {} (asked to run again {} times; taken over at {})",
                        t.pid(),
                        c.deferrals,
                        crate::protocol::holders::Finalize::PATIENCE
                    )
                },
            ),
            _ => "held".into(),
        },
        (Action::Unlinked, true) => "unlinked".into(),
        (Action::Unlinked, false) => "unheld (a sweep unlinks it)".into(),
        (Action::RemovedHalfCreated, true) => "half-created, removed".into(),
        (Action::RemovedHalfCreated, false) => {
            "half-created by a dead creator (a sweep removes it)".into()
        }
        (Action::BeingCreated, _) => "being created".into(),
        (Action::Vanished, _) => "gone".into(),
        (Action::Skipped(e), _) => format!("left alone: {e}"),
    }
}
