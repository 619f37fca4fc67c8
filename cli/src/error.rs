//! The CLI's error: a failure of the library, or a cause of the command line's own.
//! `main` prints it after `shmrc: ` and exits 1.

use std::ffi::OsString;

/// Everything a `shmrc` command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The library failed (the message says which call and why).
    #[error(transparent)]
    Shmrc(#[from] shmrc::Error),
    /// `shmrc bench` found no `shmrc-bench` program beside `shmrc` or on `PATH`.
    #[error(
        "`shmrc bench` runs the shmrc-bench program, found neither beside {beside:?} nor on PATH: \
         install it from a clone (`cargo install --locked --path bench`; `cargo install \
         shmrc-bench` after the first release) or build it in this workspace \
         (`cargo build --release -p shmrc-bench`)"
    )]
    NoBenchProgram {
        /// The folder `shmrc` runs from.
        beside: OsString,
    },
    /// `shmrc-bench` was found but could not be started.
    #[error("cannot start {program:?}: {source}")]
    BenchProgram {
        /// The program tried.
        program: OsString,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// `shmrc soak` found failures (it printed each).
    #[error("the soak found {0} failure(s) (printed above)")]
    SoakFailed(usize),
    /// `--json` output could not be written (stdout closed, say).
    #[error("cannot write the JSON output: {0}")]
    Json(#[from] serde_json::Error),
}

/// The result of a command.
pub type Result<T> = std::result::Result<T, CliError>;
