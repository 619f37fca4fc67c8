//! The descriptor limit: raising this process's `RLIMIT_NOFILE` soft limit when the
//! program asks ([`raise_fd_limit`]; the library never does it by itself), and the soft
//! limit in force ([`fd_limit`]) that [`Error::TooManyFds`] reports.

use std::fs;

use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::error::{Error, Result};

/// Raises this process's `RLIMIT_NOFILE` soft limit to its hard limit (or to
/// `/proc/sys/fs/nr_open` when the hard limit is unlimited) and returns the new soft
/// limit.
///
/// The file_descriptor strategy holds one descriptor per buffer, so the usual soft limit
/// of 1024 is reached after about a thousand live buffers, and then creating, receiving
/// or attaching fails with [`Error::TooManyFds`]. The limit is the whole process's (every
/// library in it, and the children it starts, inherit it), so shmrc leaves it alone
/// unless the program calls this; a program that holds many buffers calls it once at
/// start. The manager, a process of its own, raises its own limit.
///
/// # Errors
/// [`Error::Os`] when `getrlimit` or `setrlimit` fails (a hard limit that is unlimited
/// and `/proc/sys/fs/nr_open` unreadable).
///
/// ```
/// let soft = shmrc::raise_fd_limit()?;
/// assert!(soft >= 64);
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn raise_fd_limit() -> Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| Error::os("getrlimit", e))?;
    if soft >= hard {
        return Ok(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Ok(hard),
        Err(e) if hard == libc::RLIM_INFINITY => {
            // Linux caps RLIMIT_NOFILE at fs.nr_open, whatever the hard limit says.
            let nr_open = fs::read_to_string("/proc/sys/fs/nr_open")
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| Error::os("setrlimit", e))?;
            if nr_open <= soft {
                return Ok(soft);
            }
            setrlimit(Resource::RLIMIT_NOFILE, nr_open, hard)
                .map_err(|e| Error::os("setrlimit", e))?;
            Ok(nr_open)
        }
        Err(e) => Err(Error::os("setrlimit", e)),
    }
}

/// The soft `RLIMIT_NOFILE` in force now (for error messages).
pub(super) fn fd_limit() -> u64 {
    getrlimit(Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(soft, _)| soft)
}
