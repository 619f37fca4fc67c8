//! The manager's log: one line per event on its standard error, which a detached
//! manager appends to `manager.log` in its runtime directory (and `shmrc manager
//! --foreground` shows on the terminal). Each line is the time since the Unix epoch in
//! seconds, the level, and the event.

use std::fmt;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// Writes one log line; a log that cannot be written is not the manager's problem.
pub(crate) fn line(level: &str, event: fmt::Arguments<'_>) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let _ = writeln!(
        std::io::stderr().lock(),
        "{}.{:03} {level} {event}",
        now.as_secs(),
        now.subsec_millis()
    );
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
