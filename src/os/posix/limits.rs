//! The descriptor limit: raising this process's `RLIMIT_NOFILE` soft limit once, and
//! turning `EMFILE`/`ENFILE` into [`Error::TooManyFds`] with the limit in force.

use std::fs;
use std::sync::Once;

use nix::errno::Errno;
use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::error::{Error, Result};

/// Raises this process's `RLIMIT_NOFILE` soft limit to its hard limit (or to
/// `/proc/sys/fs/nr_open` when the hard limit is unlimited) and returns the new soft
/// limit. The file_descriptor strategy holds one descriptor per buffer, so the default
/// soft limit (often 1024) is reached quickly; [`PosixOs`](super::PosixOs) calls this
/// once by itself before its first `memfd_create` or `recv`.
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

/// Raises the fd limit once per process, before the first call that creates many fds.
pub(super) fn ensure_fd_limit_raised() {
    static RAISED: Once = Once::new();
    RAISED.call_once(|| {
        // Best effort: a process that cannot raise it gets TooManyFds later, with the
        // limit in the message.
        let _ = raise_fd_limit();
    });
}

/// The soft `RLIMIT_NOFILE` in force now (for error messages).
pub(super) fn fd_limit() -> u64 {
    getrlimit(Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(soft, _)| soft)
}

/// The error for `errno` from `call`, with the fd-limit case made explicit.
pub(super) fn fd_error(call: &'static str, errno: Errno) -> Error {
    match errno {
        Errno::EMFILE | Errno::ENFILE => Error::TooManyFds {
            call,
            limit: fd_limit(),
            liveness_fds: super::process::release_watched(),
        },
        e => Error::os(call, e),
    }
}
