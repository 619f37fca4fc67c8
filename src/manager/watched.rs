//! [`Watched`]: the production OS. It is the real kernel with one policy on top:
//! before this process creates or attaches a file_system segment of a namespace, the
//! user's manager is told (as the [`ManagerMode`](super::ManagerMode) says): that it
//! creates there, or which segment it attaches, so that its death gets just those swept
//! within milliseconds. The kernel backend itself
//! knows nothing of the manager.
//!
//! Beside it, what runs on it when the user names no OS: [`DefaultOs`], and the
//! namespace-wide [`sweep()`] and [`inspect()`] (re-exported at the crate root).

use super::client;
use crate::error::Result;
use crate::namespace::Namespace;
use crate::os::posix::PosixOs;
use crate::os::{Layer, Os};
use crate::protocol::sweep::{SweepReport, sweep_with};

/// The real kernel, with the user's manager watching each file_system use. This is
/// [`crate::DefaultOs`]: what [`crate::ShmBuf`] and the rest run on when no OS is named,
/// so user code has no need to name it.
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{ShmBuf, manager::Watched};
///
/// let buf: ShmBuf<Watched> = ShmBuf::new(64)?; // the same type as `ShmBuf`
/// assert_eq!(buf.len(), 64);
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, Debug, Default)]
pub struct Watched(PosixOs);

impl Layer for Watched {
    type Inner = PosixOs;

    fn inner(&self) -> &PosixOs {
        &self.0
    }

    fn on_named_use(&self, namespace: &str, segment: Option<&str>) -> Result<()> {
        self.0.before_named_use(namespace, segment)?;
        client::watch(&Namespace::new(namespace)?, segment)
    }
}

/// The OS that [`ShmBuf`](crate::ShmBuf), [`ShareHandle`](crate::ShareHandle) and
/// [`transport`](crate::transport) run on when none is named: the real kernel, with the
/// user's manager watching each file_system use ([`Watched`]).
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{DefaultOs, ShareHandle, ShmBuf};
///
/// // `ShmBuf` is `ShmBuf<DefaultOs>`: user code never needs to name the OS.
/// let buf: ShmBuf<DefaultOs> = ShmBuf::new(64)?;
/// let handle: ShareHandle<DefaultOs> = buf.share()?;
/// assert_eq!(handle.len(), 64);
/// # Ok::<(), shmrc::Error>(())
/// ```
pub type DefaultOs = Watched;

/// Sweeps namespace `ns` for this user: reclaims the slots of dead holders and unlinks
/// every segment nobody live holds (`shmrc sweep`). The user's manager does this within
/// milliseconds of a death; call it yourself when the manager is off.
///
/// A sweep only touches names that parse as segments of `ns` for this user, never
/// unlinks a segment a live process holds or has in flight, and leaves damaged
/// segments (bad magic, wrong version, corrupted, truncated, another user's or another
/// pid namespace's) in place, reporting why ([`Action::Skipped`](crate::Action::Skipped)).
/// A segment whose creator died before publishing its header is removed.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-sweep")?;
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// // Held by this live process: a sweep keeps it.
/// let report = shmrc::sweep(&ns)?;
/// assert_eq!((report.segments.len(), report.unlinked), (1, 0));
/// drop(buf); // released: the last holder unlinks it, nothing is left to sweep
/// assert!(shmrc::sweep(&ns)?.segments.is_empty());
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn sweep(ns: &Namespace) -> Result<SweepReport> {
    sweep_with(&Watched::default(), ns, false)
}

/// What [`sweep()`] would do, changing nothing (the data behind `shmrc ls`): every
/// segment of `ns` for this user, with its holders.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{Action, CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-inspect")?;
/// let options = CreateOptions::new()
///     .strategy(Strategy::FileSystem)
///     .namespace(ns.clone());
/// let buf = ShmBuf::with_options(64, &options)?;
/// let report = shmrc::inspect(&ns)?;
/// assert!(report.dry_run);
/// assert_eq!(report.segments.len(), 1);
/// let segment = &report.segments[0];
/// assert_eq!(Some(segment.name.as_str()), buf.name());
/// assert!(segment.creator_alive);
/// assert!(matches!(segment.action, Action::Kept)); // held by this process
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn inspect(ns: &Namespace) -> Result<SweepReport> {
    sweep_with(&Watched::default(), ns, true)
}
