//! The namespace-wide view: list this user's segments of a namespace with their holders
//! ([`inspect`]), and sweep them ([`sweep_with`]): finalize every segment, which
//! reclaims the slots of dead holders and unlinks what nobody live holds, and remove
//! segments whose creator died before publishing the header.
//!
//! A sweep only ever touches names that parse as segments of the namespace for this
//! uid (P2) and that this uid owns: it lists `/dev/shm` once, with the owner of each
//! name of the namespace's shape (`fstatat`), and never opens another user's, however
//! many are planted there. It never unlinks a segment a live process holds or has in
//! flight (P1), and leaves damaged segments (bad magic, wrong version, corrupted,
//! truncated, another user's or another pid namespace's) in place, reporting why.

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::namespace::{NameParts, Namespace};
use crate::os::remembering::Remembering;
use crate::os::{Listed, Os};
use crate::protocol::holders::{self, Census, Outcome};
use crate::protocol::segment::{self, Fields, Header};
pub use crate::protocol::service_segment::ServiceDetails;
use crate::protocol::service_segment::{self, Swept, SweptTemporary};
use crate::token::Token;

/// One segment as a sweep or listing saw it: an entry of
/// [`SweepReport::segments`].
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{Action, CreateOptions, Namespace, SegmentReport, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-segment-report")?;
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let report = shmrc::inspect(&ns)?;
/// let segment: &SegmentReport = &report.segments[0];
/// assert_eq!(Some(segment.name.as_str()), buf.name());
/// assert!(segment.creator_alive);
/// assert!(segment.header.is_some()); // its header validated
/// assert_eq!(segment.reclaimed, 0);
/// assert!(matches!(segment.action, Action::Kept));
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub struct SegmentReport {
    /// Its name in `/dev/shm`.
    pub name: String,
    /// What the name says (creator, nonce).
    pub parts: NameParts,
    /// Whether the creator (from the name) is alive; `true` when it cannot be judged
    /// (a segment of another pid namespace).
    pub creator_alive: bool,
    /// What its header says, when it validated.
    pub header: Option<SegmentHeader>,
    /// The holder slots, when the header validated: as they were (dry run) or as the
    /// sweep left them.
    pub census: Option<Census>,
    /// Dead holders' slots reclaimed (dry run: that would be reclaimed). 0 when the
    /// finalize failed ([`Action::Skipped`]): slots it reclaimed before failing are not
    /// counted.
    pub reclaimed: u32,
    /// What was done (or, in a dry run, would be).
    pub action: Action,
}

/// What a segment's header says, as a sweep or listing read it: the entry
/// [`SegmentReport::header`] (what `shmrc ls` prints as the size, the slots and the
/// age). The creator is in the name ([`SegmentReport::parts`]).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, SegmentHeader, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-segment-header")?;
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(ns.clone())
///     .capacity(16);
/// let buf = ShmBuf::with_options(100, &options)?;
/// let segment = shmrc::inspect(&ns)?.segments.remove(0);
/// let header: SegmentHeader = segment.header.expect("a valid header");
/// assert_eq!((header.data_len, header.capacity), (100, 16));
/// assert!(header.created_at_nanos > 0);
/// drop(buf);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct SegmentHeader {
    /// Bytes of the buffer (its data region).
    pub data_len: usize,
    /// Holder slots: how many processes may hold it (or have it in flight) at once.
    pub capacity: usize,
    /// When its creator made it, in nanoseconds since the Unix epoch (its clock).
    pub created_at_nanos: u64,
}

impl SegmentHeader {
    /// The public part of `fields` (no nonce, pid namespace, share key or offsets).
    fn of(fields: &Fields) -> SegmentHeader {
        SegmentHeader {
            data_len: fields.layout.data_len,
            capacity: fields.layout.capacity,
            created_at_nanos: fields.created_at_nanos,
        }
    }
}

/// What a sweep did to one segment (in a dry run, [`inspect()`](crate::inspect()):
/// what it would do).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{Action, CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-action")?;
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(ns.clone());
/// let _buf = ShmBuf::with_options(64, &options)?;
/// let mut in_use = 0;
/// for segment in shmrc::sweep(&ns)?.segments {
///     match segment.action {
///         Action::Kept | Action::BeingCreated => in_use += 1,
///         Action::Unlinked | Action::RemovedHalfCreated => println!("{} removed", segment.name),
///         Action::Vanished => {}
///         Action::Skipped(why) => eprintln!("{} left in place: {why}", segment.name),
///     }
/// }
/// assert_eq!(in_use, 1); // `_buf`, held by this process
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug)]
pub enum Action {
    /// Still held by a live process (or in flight, or being finalized): kept.
    Kept,
    /// Nobody held it: unlinked (`dry_run`: would be).
    Unlinked,
    /// Its creator died before publishing the header: removed (`dry_run`: would be).
    RemovedHalfCreated,
    /// Its creator is still creating it: left alone.
    BeingCreated,
    /// It disappeared while we looked (another finalizer got there first).
    Vanished,
    /// Left in place because it cannot be trusted; the error says why.
    Skipped(Error),
}

/// The result of [`sweep()`](crate::sweep()) or [`inspect()`](crate::inspect()).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy, SweepReport};
///
/// let ns = Namespace::new("shmrc-doc-sweep-report")?;
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let report: SweepReport = shmrc::sweep(&ns)?;
/// assert!(!report.dry_run);
/// assert_eq!((report.segments.len(), report.reclaimed, report.unlinked), (1, 0, 0));
/// drop(buf); // the last holder released it: unlinked there and then
/// assert!(shmrc::inspect(&ns)?.segments.is_empty());
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct SweepReport {
    /// Every segment seen, in name order.
    pub segments: Vec<SegmentReport>,
    /// Dead holders' slots reclaimed (dry run: that would be reclaimed). 0 when the
    /// finalize failed ([`Action::Skipped`]): slots it reclaimed before failing are not
    /// counted.
    pub reclaimed: u32,
    /// Segments unlinked, half-created ones included (dry run: that would be).
    pub unlinked: u32,
    /// Whether this was a dry run (nothing changed).
    pub dry_run: bool,
    /// The publish/subscribe service segments seen, in name order: unlinked once their
    /// publisher died and no subscriber lives; and the temporary files of services
    /// being created ([`Action::BeingCreated`] while their creator lives,
    /// [`Action::RemovedHalfCreated`] once it died before linking the service to its
    /// name).
    pub services: Vec<ServiceReport>,
}

/// One publish/subscribe service segment as a sweep saw it (`service_segment.rs`
/// judges it): [`Action::Kept`], [`Action::Unlinked`], [`Action::Vanished`] or
/// [`Action::Skipped`]; or a temporary service file: [`Action::BeingCreated`],
/// [`Action::RemovedHalfCreated`], [`Action::Vanished`] or [`Action::Skipped`].
#[derive(Debug)]
pub struct ServiceReport {
    /// Its name in `/dev/shm`.
    pub name: String,
    /// What was done (or, in a dry run, would be).
    pub action: Action,
    /// A published service's publisher, subscribers, samples and size, as the sweep
    /// found them before it acted; `None` for a temporary file, a tombstoned service
    /// (its publisher left) or one left alone for an error.
    pub details: Option<ServiceDetails>,
}

/// Lists the segments of `ns` and what a sweep would do, changing nothing.
#[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
pub fn inspect<O: Os>(os: &O, ns: &Namespace) -> Result<SweepReport> {
    sweep_with(os, ns, true)
}

/// Sweeps the segments of namespace `ns` for the calling user. With `dry_run`, reports
/// what it would do and changes nothing. A name of the namespace's shape that another
/// user owns is reported [`Action::Skipped`] with [`Error::OtherUser`], unopened.
///
/// The pass asks about each process's liveness once ([`Remembering`]: the slots of
/// many segments name the same few processes).
pub fn sweep_with<O: Os>(os: &O, ns: &Namespace, dry_run: bool) -> Result<SweepReport> {
    sweep_pass(os, ns, dry_run, &[], None, Strangers::Report)
}

/// Sweeps namespace `ns` after the processes `dead` died: as [`sweep_with`], but the
/// segments they created (their names say so) come first, so that what the dead most
/// likely held last goes without waiting for the rest of the namespace. With `only`,
/// just the dead's own segments are opened: those they created, and those named in
/// `only` (the ones they attached); the rest of the namespace is not touched. Names
/// other users own are left out of the report (the manager's sweeps: another user
/// may plant any number of them).
pub fn sweep_after_deaths<O: Os>(
    os: &O,
    ns: &Namespace,
    dead: &[Token],
    only: Option<&BTreeSet<String>>,
) -> Result<SweepReport> {
    sweep_pass(os, ns, false, dead, only, Strangers::LeaveOut)
}

/// Sweeps the segments `ours` of namespace `ns`, already listed (with the rest of
/// `/dev/shm`, in one listing) and found to be this user's: the manager's sweep of
/// everything. Its service segments and temporary service files are swept too
/// ([`SweepReport::services`]); other names of `ours` that are not segments of `ns`
/// are ignored.
pub fn sweep_listed<O: Os>(os: &O, ns: &Namespace, ours: Vec<String>) -> SweepReport {
    let os = &Remembering::new(os.clone());
    let uid = os.uid();
    let mut report = SweepReport::default();
    let mut segments = Vec::new();
    for name in ours {
        match ns.parse(&name, uid) {
            Ok(parts) => segments.push((name, parts)),
            Err(_) => report
                .services
                .extend(sweep_service(os, ns, uid, name, false)),
        }
    }
    sweep_names(os, ns, segments, false, &[], report)
}

/// Sweeps, after the processes `dead` died, just the segments of namespace `ns` named
/// in `names` (what they created, as the manager saw it happen, and what they
/// attached), with no listing of `/dev/shm`: each name's owner is looked up
/// ([`Os::shm_owner`]), another user's are left out unopened, names of another
/// namespace ignored, and a name gone meanwhile reported [`Action::Vanished`]. The
/// namespace's service segments and temporary service files among `names` are swept
/// too ([`SweepReport::services`]).
pub fn sweep_named<O: Os>(
    os: &O,
    ns: &Namespace,
    dead: &[Token],
    names: &BTreeSet<String>,
) -> SweepReport {
    let os = &Remembering::new(os.clone());
    let uid = os.uid();
    let mut report = SweepReport::default();
    let mut ours = Vec::new();
    for name in names {
        let parsed = ns.parse(name, uid);
        let is_service = parsed.is_err()
            && (service_segment::is_service_name(ns, uid, name)
                || service_segment::parse_temporary(ns, uid, name).is_some());
        if parsed.is_err() && !is_service {
            continue;
        }
        match (os.shm_owner(name), parsed) {
            (Ok(owner), _) if owner != uid => {}
            (Ok(_), Ok(parts)) => ours.push((name.clone(), parts)),
            (Ok(_), Err(_)) => {
                report
                    .services
                    .extend(sweep_service(os, ns, uid, name.clone(), false))
            }
            (Err(e), Ok(parts)) => {
                let mut seg = SegmentReport::skipped(name.clone(), parts, e);
                if matches!(seg.action, Action::Skipped(Error::Gone { .. })) {
                    seg.action = Action::Vanished;
                }
                report.segments.push(seg);
            }
            (Err(e), Err(_)) => report.services.push(ServiceReport {
                name: name.clone(),
                details: None,
                action: if e.is_gone() {
                    Action::Vanished
                } else {
                    Action::Skipped(e)
                },
            }),
        }
    }
    sweep_names(os, ns, ours, false, dead, report)
}

/// What a pass does with a name of the namespace's shape that another user owns: it
/// is never opened; a user's own sweep or inspection reports it, the manager's leave
/// it out.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Strangers {
    Report,
    LeaveOut,
}

fn sweep_pass<O: Os>(
    os: &O,
    ns: &Namespace,
    dry_run: bool,
    creators_first: &[Token],
    only: Option<&BTreeSet<String>>,
    strangers: Strangers,
) -> Result<SweepReport> {
    let os = &Remembering::new(os.clone());
    let uid = os.uid();
    let mut report = SweepReport {
        dry_run,
        ..SweepReport::default()
    };
    // Names of the namespace's shape only (anything else is not ours to touch), and,
    // with `only`, just the dead's: decided from the name, before it is looked up.
    // With `only`, a name is first matched as text against the dead's tokens: another
    // user may plant any number of names in the namespace, and each death's sweep
    // passes over all of them.
    let start = ns.name_start(uid);
    let created_by_dead = CreatedBy::new(creators_first);
    let is_service = |name: &str| service_segment::is_service_name(ns, uid, name);
    let temporary = |name: &str| service_segment::parse_temporary(ns, uid, name);
    let listed = os.shm_list_owned(&start, &mut |name| match only {
        None => ns.parse(name, uid).is_ok() || is_service(name) || temporary(name).is_some(),
        Some(attached) => {
            let tail = name.strip_prefix(start.as_str()).unwrap_or_default();
            // The namespace's services: one of the dead may have published or
            // subscribed there (a service's name does not say who).
            is_service(name)
                || temporary(name).is_some_and(|parts| creators_first.contains(&parts.creator))
                || (attached.contains(name) || created_by_dead.may_have_made(tail))
                    && ns.parse(name, uid).is_ok_and(|parts| {
                        creators_first.contains(&parts.creator) || attached.contains(name)
                    })
        }
    })?;
    let mut ours = Vec::new();
    for Listed { name, owner } in listed {
        let Ok(parts) = ns.parse(&name, uid) else {
            if owner == uid {
                if let Some(service) = sweep_service(os, ns, uid, name, dry_run) {
                    report.services.push(service);
                }
            }
            continue;
        };
        if owner == uid {
            ours.push((name, parts));
        } else if strangers == Strangers::Report {
            let why = Error::OtherUser {
                segment: name.clone(),
                owner,
                me: uid,
            };
            report
                .segments
                .push(SegmentReport::skipped(name, parts, why));
        }
    }
    Ok(sweep_names(os, ns, ours, dry_run, creators_first, report))
}

/// Sweeps `name`, a name of namespace `ns` that user `uid` owns and that is no
/// segment's: a service segment ([`service_segment::sweep`]) or a temporary service
/// file ([`service_segment::sweep_temporary`]); `None` for any other name.
fn sweep_service<O: Os>(
    os: &O,
    ns: &Namespace,
    uid: u32,
    name: String,
    dry_run: bool,
) -> Option<ServiceReport> {
    let mut details = None;
    let action = if service_segment::is_service_name(ns, uid, &name) {
        match service_segment::sweep(os, &name, dry_run) {
            Ok(Swept::Kept(seen)) => {
                details = seen;
                Action::Kept
            }
            Ok(Swept::Unlinked(seen)) => {
                details = seen;
                Action::Unlinked
            }
            Ok(Swept::Vanished) => Action::Vanished,
            Err(e) => Action::Skipped(e),
        }
    } else {
        let parts = service_segment::parse_temporary(ns, uid, &name)?;
        match service_segment::sweep_temporary(os, &name, parts, dry_run) {
            Ok(SweptTemporary::Kept) => Action::BeingCreated,
            Ok(SweptTemporary::Unlinked) => Action::RemovedHalfCreated,
            Ok(SweptTemporary::Vanished) => Action::Vanished,
            Err(e) => Action::Skipped(e),
        }
    };
    Some(ServiceReport {
        name,
        action,
        details,
    })
}

/// Sweeps `ours`, names of `ns` that this user owns, the creations of `creators_first`
/// first, adding to `report`.
fn sweep_names<O: Os>(
    os: &O,
    ns: &Namespace,
    mut ours: Vec<(String, NameParts)>,
    dry_run: bool,
    creators_first: &[Token],
    mut report: SweepReport,
) -> SweepReport {
    let pass = Pass {
        me: os.current(),
        uid: os.uid(),
        pid_namespace: os.pid_namespace(),
        dry_run,
    };
    report.dry_run = dry_run;
    ours.sort_by_key(|(_, parts)| !creators_first.contains(&parts.creator));
    for (name, parts) in ours {
        // One segment that cannot be swept (an unlink the kernel refuses, a name whose
        // owner changed since the listing) is reported `Skipped` by `sweep_one`, and
        // the pass goes on.
        let seg = sweep_one(os, ns, name, parts, &pass);
        report.reclaimed += seg.reclaimed;
        if matches!(seg.action, Action::Unlinked | Action::RemovedHalfCreated) {
            report.unlinked += 1;
        }
        report.segments.push(seg);
    }
    report.segments.sort_by(|a, b| a.name.cmp(&b.name));
    report.services.sort_by(|a, b| a.name.cmp(&b.name));
    report
}

/// The creators of a sweep after deaths, as the text of the names they made: a cheap
/// first test, before a name is parsed.
struct CreatedBy(Vec<String>);

impl CreatedBy {
    fn new(creators: &[Token]) -> CreatedBy {
        CreatedBy(
            creators
                .iter()
                .map(|t| format!("{}.{}.", t.pid(), t.start_ticks()))
                .collect(),
        )
    }

    /// Whether `tail`, a name past its namespace's start (`<pidns>.<pid>.<start>.
    /// <nonce>`), may name a segment one of them created; `false` only when it cannot.
    fn may_have_made(&self, tail: &str) -> bool {
        let after_pid_namespace = tail.split_once('.').map_or("", |(_, rest)| rest);
        self.0
            .iter()
            .any(|c| after_pid_namespace.starts_with(c.as_str()))
    }
}

impl SegmentReport {
    /// A segment left in place, unopened, for the reason `why` (its creator's liveness
    /// cannot be judged: counted as alive).
    fn skipped(name: String, parts: NameParts, why: Error) -> SegmentReport {
        SegmentReport {
            name,
            parts,
            creator_alive: true,
            header: None,
            census: None,
            reclaimed: 0,
            action: Action::Skipped(why),
        }
    }
}

/// What stays the same for every segment of one sweep.
struct Pass {
    me: Token,
    /// The user whose segments are swept: asked once per pass, not per segment.
    uid: u32,
    pid_namespace: u64,
    dry_run: bool,
}

/// What opening a listed name found, as far as the sweep's decisions go.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Found {
    /// No such name any more ([`Error::Gone`]).
    Vanished,
    /// The name exists, its header is not published ([`Error::HalfCreated`]).
    HalfCreated,
    /// A valid, published segment.
    Published,
    /// Any other error (another user's file, a corrupted header): not ours to judge.
    Unusable,
}

impl Found {
    /// What an [`open_named`](segment::open_named) result says.
    pub fn of<T>(opened: &Result<T>) -> Found {
        match opened {
            Ok(_) => Found::Published,
            Err(Error::Gone { .. }) => Found::Vanished,
            Err(Error::HalfCreated { .. }) => Found::HalfCreated,
            Err(_) => Found::Unusable,
        }
    }
}

/// What a sweep does next with a name. The sweep's decisions are [`decide`] and
/// [`decide_again`], free of I/O, so that the exhaustive check (`shmrc-model`) runs
/// them as they are.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Decision {
    /// It vanished meanwhile: report [`Action::Vanished`].
    Vanished,
    /// Half-created by a live creator: leave it ([`Action::BeingCreated`]).
    BeingCreated,
    /// Not ours to judge: leave it, reporting why ([`Action::Skipped`]).
    Skip,
    /// A valid segment after all: leave it ([`Action::Kept`]).
    Keep,
    /// Half-created with a dead creator: open it once more (its creator may have
    /// published just before dying) and decide with [`decide_again`].
    OpenAgain,
    /// Published: finalize it, reclaiming every dead holder.
    Finalize,
    /// Still half-created after its creator was found dead: unlink it.
    Unlink,
}

impl Decision {
    /// The action reported for a decision that leaves the name alone.
    fn report(self) -> Action {
        match self {
            Decision::Vanished => Action::Vanished,
            Decision::BeingCreated => Action::BeingCreated,
            _ => Action::Kept,
        }
    }
}

/// The first decision on a listed name of ours, from what opening it found;
/// `creator_alive` is asked only for a half-created segment, after the open.
pub fn decide(found: Found, creator_alive: impl FnOnce() -> bool) -> Decision {
    match found {
        Found::Vanished => Decision::Vanished,
        Found::Published => Decision::Finalize,
        Found::HalfCreated if creator_alive() => Decision::BeingCreated,
        Found::HalfCreated => Decision::OpenAgain,
        Found::Unusable => Decision::Skip,
    }
}

/// The decision on a half-created segment whose creator was found dead, from what
/// opening it again found: only a segment *still* unpublished is removed (a creator
/// that published and then died leaves a valid segment, which holders may use).
pub fn decide_again(found: Found) -> Decision {
    match found {
        Found::HalfCreated => Decision::Unlink,
        Found::Vanished => Decision::Vanished,
        Found::Published => Decision::Keep,
        Found::Unusable => Decision::Skip,
    }
}

/// Sweeps (or, in a dry run, inspects) one listed segment of this pid namespace. A
/// failure is the segment's [`Action::Skipped`], reported with what was read before it
/// (the creator's liveness, the header, the slots).
fn sweep_one<O: Os>(
    os: &O,
    ns: &Namespace,
    name: String,
    parts: NameParts,
    pass: &Pass,
) -> SegmentReport {
    let (me, ours, dry_run) = (pass.me, pass.pid_namespace, pass.dry_run);
    if parts.pid_namespace != ours {
        // Its creator's (and holders') pids mean other processes here: nothing about
        // their liveness can be judged from this namespace, not even for a segment
        // whose header is unpublished.
        let why = Error::OtherPidNamespace {
            segment: name.clone(),
            theirs: parts.pid_namespace,
            ours,
        };
        return SegmentReport::skipped(name, parts, why);
    }
    let creator_alive = parts.creator == me || os.is_alive(parts.creator);
    let mut seg = SegmentReport {
        name,
        parts,
        creator_alive,
        header: None,
        census: None,
        reclaimed: 0,
        action: Action::Kept,
    };
    let opened = segment::open_named(os, ns, &seg.name, pass.uid);
    let decision = decide(Found::of(&opened), || {
        parts.creator == me || os.is_alive(parts.creator)
    });
    let opened = match (decision, opened) {
        (Decision::Finalize, Ok(opened)) => opened,
        (Decision::OpenAgain, _) => {
            seg.action =
                remove_half_created(os, ns, &seg.name, pass).unwrap_or_else(Action::Skipped);
            return seg;
        }
        (Decision::Skip, Err(e)) => {
            seg.action = Action::Skipped(e);
            return seg;
        }
        (decision, _) => {
            seg.action = decision.report();
            return seg;
        }
    };
    seg.header = Some(SegmentHeader::of(&opened.fields));
    let Some(header) = Header::of(&opened.map, opened.fields.layout.capacity) else {
        seg.action = Action::Skipped(Error::Corrupted {
            segment: seg.name.clone(),
            what: "holder slots lie outside the mapping".into(),
        });
        return seg;
    };
    let h = header.holders();
    if dry_run {
        let before = holders::census(os, &h);
        seg.census = Some(before);
        seg.reclaimed = before.dead;
        seg.action = if before.unheld() {
            Action::Unlinked
        } else {
            Action::Kept
        };
        return seg;
    }
    let finalized = holders::finalize(os, &h, &seg.name, holders::Reclaim::All);
    seg.census = Some(holders::census(os, &h));
    // A finalize that fails (an unlink the kernel refuses) is reported with what was
    // read before it: the header, the creator's liveness, the slots as they are now.
    let finalized = match finalized {
        Ok(finalized) => finalized,
        Err(e) => {
            seg.action = Action::Skipped(e);
            return seg;
        }
    };
    seg.reclaimed = finalized.reclaimed;
    seg.action = match finalized.outcome {
        Outcome::Unlinked => Action::Unlinked,
        Outcome::AlreadyGone => Action::Vanished,
        Outcome::InUse | Outcome::Deferred => Action::Kept,
    };
    seg
}

/// A segment whose header was unpublished and whose creator was found dead: opened
/// again, and removed only if [`decide_again`] says so.
fn remove_half_created<O: Os>(os: &O, ns: &Namespace, name: &str, pass: &Pass) -> Result<Action> {
    os.crash_point()?;
    let reopened = segment::open_named(os, ns, name, pass.uid);
    match (decide_again(Found::of(&reopened)), reopened) {
        (Decision::Unlink, _) if pass.dry_run => Ok(Action::RemovedHalfCreated),
        (Decision::Unlink, _) => match os.shm_unlink(name) {
            Ok(()) => Ok(Action::RemovedHalfCreated),
            Err(e) if e.is_gone() => Ok(Action::Vanished),
            Err(e) => Err(e),
        },
        (Decision::Skip, Err(e)) => Ok(Action::Skipped(e)),
        (decision, _) => Ok(decision.report()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_that_leaves_the_name_alone_reports_why() {
        assert!(matches!(Decision::Vanished.report(), Action::Vanished));
        assert!(matches!(
            Decision::BeingCreated.report(),
            Action::BeingCreated
        ));
        assert!(matches!(Decision::Keep.report(), Action::Kept));
    }

    #[test]
    fn the_sweeps_decisions_follow_what_opening_found() {
        let never = || -> bool { panic!("liveness asked of a segment that is not half-created") };
        assert_eq!(decide(Found::Vanished, never), Decision::Vanished);
        assert_eq!(decide(Found::Published, never), Decision::Finalize);
        assert_eq!(decide(Found::Unusable, never), Decision::Skip);
        assert_eq!(decide(Found::HalfCreated, || true), Decision::BeingCreated);
        assert_eq!(decide(Found::HalfCreated, || false), Decision::OpenAgain);
        assert_eq!(decide_again(Found::HalfCreated), Decision::Unlink);
        assert_eq!(decide_again(Found::Vanished), Decision::Vanished);
        assert_eq!(decide_again(Found::Published), Decision::Keep);
        assert_eq!(decide_again(Found::Unusable), Decision::Skip);
    }
}
