//! The namespace-wide view: list this user's segments of a namespace with their holders
//! ([`inspect`]), and sweep them ([`sweep_with`]): finalize every segment, which
//! reclaims the slots of dead holders and unlinks what nobody live holds, and remove
//! segments whose creator died before publishing the header.
//!
//! A sweep only ever touches names that parse as segments of the namespace for this
//! uid (P2), never unlinks a segment a live process holds or has in flight (P1), and
//! leaves damaged segments (bad magic, wrong version, corrupted, truncated, another
//! user's or another pid namespace's) in place, reporting why.

use crate::error::{Error, Result};
use crate::holders::{self, Census, Outcome};
use crate::namespace::{NameParts, Namespace};
use crate::os::Os;
use crate::os::remembering::Remembering;
use crate::segment::{self, Fields, Header};
use crate::token::Token;

/// One segment as a sweep or listing saw it: an entry of
/// [`SweepReport::segments`].
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
/// assert!(segment.fields.is_some()); // its header validated
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
    /// The header, when it validated.
    pub fields: Option<Fields>,
    /// The holder slots, when the header validated: as they were (dry run) or as the
    /// sweep left them.
    pub census: Option<Census>,
    /// Dead holders' slots reclaimed (dry run: that would be reclaimed).
    pub reclaimed: u32,
    /// What was done (or, in a dry run, would be).
    pub action: Action,
}

/// What a sweep did to one segment (in a dry run, [`inspect()`](crate::inspect()):
/// what it would do).
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
    /// Dead holders' slots reclaimed (dry run: that would be reclaimed).
    pub reclaimed: u32,
    /// Segments unlinked, half-created ones included (dry run: that would be).
    pub unlinked: u32,
    /// Whether this was a dry run (nothing changed).
    pub dry_run: bool,
}

/// Lists the segments of `ns` and what a sweep would do, changing nothing.
pub fn inspect<O: Os>(os: &O, ns: &Namespace) -> Result<SweepReport> {
    sweep_with(os, ns, true)
}

/// Sweeps the segments of namespace `ns` for the calling user. With `dry_run`, reports
/// what it would do and changes nothing.
///
/// The pass asks about each process's liveness once ([`Remembering`]: the slots of
/// many segments name the same few processes).
pub fn sweep_with<O: Os>(os: &O, ns: &Namespace, dry_run: bool) -> Result<SweepReport> {
    sweep_pass(os, ns, dry_run, &[])
}

/// Sweeps namespace `ns` after the processes `dead` died: as [`sweep_with`], but the
/// segments they created (their names say so) come first, so that what the dead most
/// likely held last goes without waiting for the rest of the namespace.
pub fn sweep_after_deaths<O: Os>(os: &O, ns: &Namespace, dead: &[Token]) -> Result<SweepReport> {
    sweep_pass(os, ns, false, dead)
}

fn sweep_pass<O: Os>(
    os: &O,
    ns: &Namespace,
    dry_run: bool,
    creators_first: &[Token],
) -> Result<SweepReport> {
    let os = &Remembering::new(os.clone());
    let uid = os.uid();
    let pass = Pass {
        me: os.current(),
        pid_namespace: os.pid_namespace(),
        dry_run,
    };
    let mut report = SweepReport {
        dry_run,
        ..SweepReport::default()
    };
    // Names of the namespace's shape only: anything else is not ours to touch.
    let mut ours: Vec<(String, NameParts)> = os
        .shm_list(&ns.name_start(uid))?
        .into_iter()
        .filter_map(|name| ns.parse(&name, uid).ok().map(|parts| (name, parts)))
        .collect();
    ours.sort_by_key(|(_, parts)| !creators_first.contains(&parts.creator));
    for (name, parts) in ours {
        // One segment that cannot be swept (a name planted by another user that cannot
        // be removed, an unlink the kernel refuses) is reported, and the pass goes on.
        let seg = match sweep_one(os, ns, name.clone(), parts, &pass) {
            Ok(seg) => seg,
            Err(e) => SegmentReport::skipped(name, parts, e),
        };
        report.reclaimed += seg.reclaimed;
        if matches!(seg.action, Action::Unlinked | Action::RemovedHalfCreated) {
            report.unlinked += 1;
        }
        report.segments.push(seg);
    }
    report.segments.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(report)
}

impl SegmentReport {
    /// A segment left in place, unopened, for the reason `why` (its creator's liveness
    /// cannot be judged: counted as alive).
    fn skipped(name: String, parts: NameParts, why: Error) -> SegmentReport {
        SegmentReport {
            name,
            parts,
            creator_alive: true,
            fields: None,
            census: None,
            reclaimed: 0,
            action: Action::Skipped(why),
        }
    }
}

/// What stays the same for every segment of one sweep.
struct Pass {
    me: Token,
    pid_namespace: u64,
    dry_run: bool,
}

fn sweep_one<O: Os>(
    os: &O,
    ns: &Namespace,
    name: String,
    parts: NameParts,
    pass: &Pass,
) -> Result<SegmentReport> {
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
        return Ok(SegmentReport::skipped(name, parts, why));
    }
    let creator_alive = parts.creator == me || os.is_alive(parts.creator);
    let mut seg = SegmentReport {
        name,
        parts,
        creator_alive,
        fields: None,
        census: None,
        reclaimed: 0,
        action: Action::Kept,
    };
    let opened = match segment::open_named(os, ns, &seg.name) {
        Ok(opened) => opened,
        Err(Error::Gone { .. }) => {
            seg.action = Action::Vanished;
            return Ok(seg);
        }
        Err(Error::HalfCreated { .. }) => {
            seg.action = remove_half_created(os, ns, &seg.name, parts, dry_run)?;
            return Ok(seg);
        }
        Err(e) => {
            seg.action = Action::Skipped(e);
            return Ok(seg);
        }
    };
    seg.fields = Some(opened.fields);
    let Some(header) = Header::of(&opened.map, opened.fields.layout.capacity) else {
        seg.action = Action::Skipped(Error::Corrupted {
            segment: seg.name.clone(),
            what: "holder slots lie outside the mapping".into(),
        });
        return Ok(seg);
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
        return Ok(seg);
    }
    let finalized = holders::finalize(os, &h, &seg.name, holders::Reclaim::All)?;
    seg.census = Some(holders::census(os, &h));
    seg.reclaimed = finalized.reclaimed;
    seg.action = match finalized.outcome {
        Outcome::Unlinked => Action::Unlinked,
        Outcome::AlreadyGone => Action::Vanished,
        Outcome::InUse | Outcome::Deferred => Action::Kept,
    };
    Ok(seg)
}

/// A segment whose header is unpublished: remove it only once its creator is dead, and
/// only if it is *still* unpublished after that was established (a creator that
/// published and then died leaves a valid segment, which holders may use).
fn remove_half_created<O: Os>(
    os: &O,
    ns: &Namespace,
    name: &str,
    parts: NameParts,
    dry_run: bool,
) -> Result<Action> {
    if parts.creator == os.current() || os.is_alive(parts.creator) {
        return Ok(Action::BeingCreated);
    }
    os.crash_point()?;
    match segment::open_named(os, ns, name) {
        Err(Error::HalfCreated { .. }) => {}
        Err(Error::Gone { .. }) => return Ok(Action::Vanished),
        Err(e) => return Ok(Action::Skipped(e)),
        Ok(_) => return Ok(Action::Kept),
    }
    if dry_run {
        return Ok(Action::RemovedHalfCreated);
    }
    match os.shm_unlink(name) {
        Ok(()) => Ok(Action::RemovedHalfCreated),
        Err(e) if e.is_gone() => Ok(Action::Vanished),
        Err(e) => Err(e),
    }
}
