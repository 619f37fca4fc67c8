//! The CLI's error: a failure of the library, or a cause of the command line's own.
//! `main` prints it after `shmrc: ` and exits 1.

use std::ffi::OsString;

use shmrc_bench::workloads::PEER_CONTENDER;

/// Everything a `shmrc` command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The library failed (the message says which call and why).
    #[error(transparent)]
    Shmrc(#[from] shmrc::Error),
    /// `shmrc bench-peer` was started without a contender it knows in its
    /// environment: it is started by `shmrc bench`, not by hand.
    #[error(
        "bench-peer: unknown contender {0:?} in ${PEER_CONTENDER} (this command is started by `shmrc bench`)"
    )]
    UnknownBenchPeer(OsString),
    /// `shmrc soak` found failures (it printed each).
    #[error("the soak found {0} failure(s) (printed above)")]
    SoakFailed(usize),
    /// `--json` output could not be written (stdout closed, say).
    #[error("cannot write the JSON output: {0}")]
    Json(#[from] serde_json::Error),
}

/// The result of a command.
pub type Result<T> = std::result::Result<T, CliError>;
