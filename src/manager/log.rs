//! The manager's log: one line per event on its standard error, which a detached
//! manager appends to `manager.log` in its runtime directory (and `shmrc manager
//! --foreground` shows on the terminal). Each line is the time since the Unix epoch in
//! seconds, the level, and the event.
//!
//! The log is capped: once `manager.log` passes [`LOG_CAP`] bytes, its lines move to
//! `manager.log.1` (replacing the one before) and `manager.log` starts again empty, so a
//! manager that logs ten deaths a second for weeks keeps at most twice the cap on disk.
//! The file stays the same open file (it is the manager's standard error, opened for
//! appending): it is copied, then truncated, and the next line lands at its start.

use std::fmt;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The size past which `manager.log` is rotated (1 MiB: about 10,000 lines).
pub(crate) const LOG_CAP: u64 = 1 << 20;

/// Serializes writes and rotations of this process's log.
static WRITING: Mutex<()> = Mutex::new(());

/// Writes one log line; a log that cannot be written is not the manager's problem.
pub(crate) fn line(level: &str, event: fmt::Arguments<'_>) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let _writing = super::mode::lock(&WRITING);
    let stderr = std::io::stderr();
    let _ = writeln!(
        stderr.lock(),
        "{}.{:03} {level} {event}",
        now.as_secs(),
        now.subsec_millis()
    );
    if let Ok(path) = std::fs::read_link("/proc/self/fd/2") {
        let _ = rotate_if_over(stderr.as_fd(), &path, LOG_CAP);
    }
}

/// If `log` (open for appending at `path`) is a regular file of more than `cap` bytes,
/// copies it to `<path>.1` and empties it. Returns whether it rotated.
fn rotate_if_over(log: BorrowedFd<'_>, path: &Path, cap: u64) -> std::io::Result<bool> {
    use nix::sys::stat::SFlag;
    let st = nix::sys::stat::fstat(log)?;
    let regular = st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits();
    if !regular || u64::try_from(st.st_size).unwrap_or(0) <= cap {
        return Ok(false);
    }
    let lines = std::fs::read(path)?;
    let old = rotated(path);
    // Replaced whole: a reader of the old one keeps what it opened.
    let staging = old.with_extension("1.new");
    std::fs::write(&staging, &lines)?;
    std::fs::rename(&staging, &old)?;
    nix::unistd::ftruncate(log, 0)?;
    Ok(true)
}

/// Where the lines of a rotated log go: `manager.log.1`.
fn rotated(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// Logs an event of the manager's ordinary work.
macro_rules! info {
    ($($event:tt)*) => { $crate::manager::log::line("info", format_args!($($event)*)) };
}

/// Logs something the manager could not do, or refused.
macro_rules! warning {
    ($($event:tt)*) => { $crate::manager::log::line("warn", format_args!($($event)*)) };
}

pub(crate) use {info, warning};

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn a_log_past_its_cap_moves_to_dot_one_and_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manager.log");
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .unwrap();
        writeln!(log, "first line").unwrap();
        assert!(
            !rotate_if_over(log.as_fd(), &path, 100).unwrap(),
            "under the cap"
        );
        for i in 0..10 {
            writeln!(log, "line {i} of the first generation").unwrap();
        }
        assert!(rotate_if_over(log.as_fd(), &path, 100).unwrap());
        let old = std::fs::read_to_string(dir.path().join("manager.log.1")).unwrap();
        assert!(
            old.starts_with("first line\n") && old.contains("line 9 of"),
            "{old}"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        // The same open file goes on, from its start.
        writeln!(log, "after").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "after\n");
        // A second rotation replaces the first generation.
        for _ in 0..10 {
            writeln!(log, "second generation").unwrap();
        }
        assert!(rotate_if_over(log.as_fd(), &path, 100).unwrap());
        let old = std::fs::read_to_string(dir.path().join("manager.log.1")).unwrap();
        assert!(
            old.starts_with("after\n") && !old.contains("first line"),
            "{old}"
        );
    }

    #[test]
    fn a_terminal_or_pipe_is_never_rotated() {
        let (reader, writer) = std::io::pipe().unwrap();
        let path = Path::new("/nonexistent/manager.log");
        assert!(!rotate_if_over(writer.as_fd(), path, 0).unwrap());
        drop(reader);
    }
}
