//! Whether this process's file_system buffers make the user's manager watch it: the
//! process-wide [`ManagerMode`], set by [`set_manager_mode`] or `$SHMRC_MANAGER`.
#![cfg_attr(any(shmrc_loom, shmrc_shuttle), allow(dead_code))]

use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Environment variable: `auto`, `connect` or `off` (see [`ManagerMode`]); read when
/// [`set_manager_mode`] was not called.
///
/// ```
/// assert_eq!(shmrc::manager::MODE_ENV, "SHMRC_MANAGER");
/// // e.g. `SHMRC_MANAGER=off python train.py` runs a job without a manager.
/// ```
pub const MODE_ENV: &str = "SHMRC_MANAGER";
/// Whether file_system buffers make the user's manager watch this process.
///
/// The manager only matters for file_system buffers (a file_descriptor buffer is
/// freed by the kernel). With [`ManagerMode::Off`], a dead holder's slot waits for the
/// next [`sweep()`](crate::sweep()) or release of its segment.
///
/// ```
/// use shmrc::manager::{ManagerMode, manager_mode, set_manager_mode};
///
/// // A program that runs its own sweeps, in a sandbox where no daemon may run:
/// set_manager_mode(ManagerMode::Off);
/// assert_eq!(manager_mode(), ManagerMode::Off);
/// ```
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum ManagerMode {
    /// Connect to the user's manager, starting it if none runs (the default).
    Auto,
    /// Connect to a running manager; an [`Error::NoManager`] if none runs.
    Connect,
    /// Never talk to a manager: a dead holder's slots wait for the next sweep or
    /// release.
    Off,
}

impl ManagerMode {
    /// Parses `auto`, `connect` or `off` (the values of `$SHMRC_MANAGER`); anything else
    /// is [`Error::InvalidArgument`].
    ///
    /// ```
    /// use shmrc::manager::ManagerMode;
    /// assert_eq!(ManagerMode::parse("connect")?, ManagerMode::Connect);
    /// assert!(ManagerMode::parse("yes").is_err());
    /// # Ok::<(), shmrc::Error>(())
    /// ```
    pub fn parse(s: &str) -> Result<ManagerMode> {
        match s {
            "auto" => Ok(ManagerMode::Auto),
            "connect" => Ok(ManagerMode::Connect),
            "off" => Ok(ManagerMode::Off),
            other => Err(Error::InvalidArgument(format!(
                "{MODE_ENV}={other:?}: expected auto, connect or off"
            ))),
        }
    }
}

/// The mode set by [`set_manager_mode`] (`None`: read `$SHMRC_MANAGER`).
static MODE: Mutex<Option<ManagerMode>> = Mutex::new(None);
/// Sets the mode for this process, overriding `$SHMRC_MANAGER`. It applies from the
/// next file_system create or attach; a process already watched stays watched.
///
/// ```
/// use shmrc::manager::{ManagerMode, manager_mode, set_manager_mode};
/// set_manager_mode(ManagerMode::Off);
/// assert_eq!(manager_mode(), ManagerMode::Off);
/// ```
pub fn set_manager_mode(mode: ManagerMode) {
    *lock(&MODE) = Some(mode);
}

/// The mode in force: the one set by [`set_manager_mode`], else `$SHMRC_MANAGER`, else
/// [`ManagerMode::Auto`] (an unreadable `$SHMRC_MANAGER` also reads as `Auto`; the
/// first file_system create/attach then reports it).
///
/// ```
/// use shmrc::manager::{ManagerMode, manager_mode, set_manager_mode};
///
/// set_manager_mode(ManagerMode::Connect); // use a running manager, never start one
/// assert_eq!(manager_mode(), ManagerMode::Connect);
/// ```
pub fn manager_mode() -> ManagerMode {
    mode().unwrap_or(ManagerMode::Auto)
}

/// The mode in force, or the error that `$SHMRC_MANAGER` cannot be read.
pub(crate) fn mode() -> Result<ManagerMode> {
    if let Some(mode) = *lock(&MODE) {
        return Ok(mode);
    }
    match crate::environment::var(MODE_ENV)? {
        Some(v) => ManagerMode::parse(&v),
        // This crate's own unit tests never start a manager unless told to.
        None if cfg!(test) => Ok(ManagerMode::Off),
        None => Ok(ManagerMode::Auto),
    }
}

/// Locks `m`, ignoring poisoning (each value is replaced whole).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_a_bad_one_is_named() {
        assert_eq!(ManagerMode::parse("auto").unwrap(), ManagerMode::Auto);
        assert_eq!(ManagerMode::parse("connect").unwrap(), ManagerMode::Connect);
        assert_eq!(ManagerMode::parse("off").unwrap(), ManagerMode::Off);
        let why = ManagerMode::parse("yes").unwrap_err().to_string();
        assert!(why.contains("SHMRC_MANAGER=\"yes\""), "{why}");
    }
}
