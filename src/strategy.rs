//! Sharing strategies and the process-wide switch between them, as in
//! `torch.multiprocessing`: [`all_sharing_strategies`], [`sharing_strategy`],
//! [`set_sharing_strategy`].
//!
//! The switch only chooses how *new* buffers are created: a buffer keeps the strategy it
//! was created with, and a receiver follows the handle it gets, not its own setting. The
//! first read takes its default from the environment variable `SHMRC_SHARING_STRATEGY`
//! (`file_descriptor` or `file_system`) when set, else `file_descriptor`; any other
//! value makes every create that relies on it an error naming the variable.

use std::fmt;
use std::str::FromStr;

use crate::environment::BadVariable;
use crate::sync::process::{AtomicU8, Ordering};

/// How a buffer is shared between processes, as in `torch.multiprocessing`.
///
/// Choose per buffer ([`CreateOptions::strategy`](crate::CreateOptions::strategy)) or
/// for the whole process ([`set_sharing_strategy`], or `SHMRC_SHARING_STRATEGY` set to
/// `file_descriptor` or `file_system`; the default is `file_descriptor`). A receiver
/// follows the handle it gets, whatever its own setting.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
///
/// let ns = Namespace::new("shmrc-doc-strategy")?;
/// for strategy in Strategy::ALL {
///     let options = CreateOptions::new().strategy(strategy).namespace(ns.clone());
///     let buf = ShmBuf::with_options(64, &options)?;
///     // Only a file_system buffer has a name in /dev/shm (and a handle that travels as bytes).
///     assert_eq!(buf.name().is_some(), strategy == Strategy::FileSystem);
/// }
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Strategy {
    /// An anonymous memfd whose descriptor travels over a Unix socket (`SCM_RIGHTS`).
    /// Nothing to leak: the kernel frees the memory when the last descriptor and
    /// mapping go. Costs one open descriptor per buffer in each holding process.
    FileDescriptor,
    /// A named segment in `/dev/shm` with crash-safe holder slots; the name travels as
    /// bytes. Costs no descriptor once mapped; a dead holder's reference is reclaimed
    /// by a sweep.
    FileSystem,
}

impl Strategy {
    /// Every strategy, in the order [`all_sharing_strategies`] lists them.
    ///
    /// ```
    /// use shmrc::Strategy;
    /// assert_eq!(Strategy::ALL, [Strategy::FileDescriptor, Strategy::FileSystem]);
    /// ```
    pub const ALL: [Strategy; 2] = [Strategy::FileDescriptor, Strategy::FileSystem];

    /// The name used by `torch.multiprocessing` and by `SHMRC_SHARING_STRATEGY` (also
    /// what `Display` prints, and what `str::parse` reads).
    ///
    /// ```
    /// use shmrc::Strategy;
    /// assert_eq!(Strategy::FileSystem.name(), "file_system");
    /// assert_eq!(Strategy::FileDescriptor.to_string(), "file_descriptor");
    /// assert_eq!("file_system".parse::<Strategy>(), Ok(Strategy::FileSystem));
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Strategy::FileDescriptor => "file_descriptor",
            Strategy::FileSystem => "file_system",
        }
    }

    fn code(self) -> u8 {
        match self {
            Strategy::FileDescriptor => 1,
            Strategy::FileSystem => 2,
        }
    }

    fn from_code(code: u8) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.code() == code)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`all_sharing_strategies`] (it becomes
/// [`Error::UnknownStrategy`](crate::Error::UnknownStrategy) through `?`).
///
/// ```
/// let err = "shm".parse::<shmrc::Strategy>().unwrap_err();
/// assert!(err.to_string().contains("file_descriptor, file_system"));
/// ```
///
/// ```
/// use shmrc::{Strategy, UnknownStrategy};
/// let unknown: UnknownStrategy = "shm".parse::<Strategy>().unwrap_err();
/// assert_eq!(unknown.0, "shm");
/// let error = shmrc::Error::from(unknown); // what `?` makes of it
/// assert!(error.to_string().contains("file_descriptor, file_system"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownStrategy(pub String);

impl fmt::Display for UnknownStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown sharing strategy {:?} (known: file_descriptor, file_system)",
            self.0
        )
    }
}

impl std::error::Error for UnknownStrategy {}

impl FromStr for Strategy {
    type Err = UnknownStrategy;

    /// Parses `file_descriptor` or `file_system`.
    ///
    /// ```
    /// use shmrc::Strategy;
    /// assert_eq!("file_system".parse::<Strategy>(), Ok(Strategy::FileSystem));
    /// assert!("shm".parse::<Strategy>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Strategy, UnknownStrategy> {
        Strategy::ALL
            .into_iter()
            .find(|strategy| strategy.name() == s)
            .ok_or_else(|| UnknownStrategy(s.to_owned()))
    }
}

/// 0 until first read; then a [`Strategy`] code.
static CURRENT: AtomicU8 = AtomicU8::new(0);

/// The strategies this system supports (both, on Linux), as
/// `torch.multiprocessing.get_all_sharing_strategies()`.
///
/// ```
/// assert_eq!(shmrc::all_sharing_strategies().len(), 2);
/// ```
pub fn all_sharing_strategies() -> &'static [Strategy] {
    &Strategy::ALL
}

/// The strategy new buffers are created with: the one last set by
/// [`set_sharing_strategy`], else `$SHMRC_SHARING_STRATEGY` (`file_descriptor` or
/// `file_system`, read once), else [`Strategy::FileDescriptor`]. A value of the
/// variable that names no strategy reads as [`Strategy::FileDescriptor`] here, and
/// every create that relies on it fails with an [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming the
/// variable (as `strategy_in_force` says) until [`set_sharing_strategy`] is called.
/// A program that runs with privileges its caller lacks reads no variable.
///
/// ```
/// use shmrc::{Strategy, set_sharing_strategy, sharing_strategy};
/// set_sharing_strategy(Strategy::FileSystem);
/// assert_eq!(sharing_strategy(), Strategy::FileSystem);
/// set_sharing_strategy(Strategy::FileDescriptor);
/// ```
pub fn sharing_strategy() -> Strategy {
    strategy_in_force().unwrap_or(Strategy::FileDescriptor)
}

/// The strategy new buffers are created with, as [`sharing_strategy`] says, or the
/// error that `$SHMRC_SHARING_STRATEGY` holds no strategy's name (or no Unicode),
/// which `?` turns into an [`Error::InvalidArgument`](crate::Error::InvalidArgument).
pub fn strategy_in_force() -> Result<Strategy, BadVariable> {
    if let Some(strategy) = Strategy::from_code(CURRENT.load(Ordering::Acquire)) {
        return Ok(strategy);
    }
    let initial = match crate::environment::var(STRATEGY_ENV)? {
        None => Strategy::FileDescriptor,
        Some(name) => name.parse().map_err(|UnknownStrategy(name)| BadVariable {
            why: format!(
                "{STRATEGY_ENV}={name:?} names no sharing strategy (known: \
                     file_descriptor, file_system)"
            ),
        })?,
    };
    // Keep a value another thread set in the meantime.
    match CURRENT.compare_exchange(0, initial.code(), Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Ok(initial),
        Err(code) => Ok(Strategy::from_code(code).unwrap_or(initial)),
    }
}

/// Environment variable: the strategy of a process that did not call
/// [`set_sharing_strategy`] (`file_descriptor` or `file_system`).
pub const STRATEGY_ENV: &str = "SHMRC_SHARING_STRATEGY";

/// Switches the strategy for buffers created from now on, in this process. Buffers
/// already created keep theirs.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{ShmBuf, Strategy, set_sharing_strategy};
///
/// set_sharing_strategy(Strategy::FileDescriptor);
/// let before = ShmBuf::new(64)?;
/// set_sharing_strategy(Strategy::FileSystem);
/// let after = ShmBuf::new(64)?; // a named segment in the namespace `shmrc`
/// assert_eq!(before.strategy(), Strategy::FileDescriptor);
/// assert_eq!(after.strategy(), Strategy::FileSystem);
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn set_sharing_strategy(strategy: Strategy) {
    CURRENT.store(strategy.code(), Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for s in all_sharing_strategies() {
            assert_eq!(s.name().parse::<Strategy>().unwrap(), *s);
        }
        assert!(matches!(
            "fd".parse::<Strategy>(),
            Err(UnknownStrategy(name)) if name == "fd"
        ));
    }

    // The variable's name is documented to users (README, docs/STRATEGIES.md).
    #[test]
    fn the_variable_is_named_as_documented() {
        assert_eq!(STRATEGY_ENV, "SHMRC_SHARING_STRATEGY");
    }
}
