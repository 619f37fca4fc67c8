//! `shmrc bench`: runs the `shmrc-bench` program (its own package, so that the CLI
//! stands on the library's public API alone), found beside `shmrc` first, then on
//! `PATH`, with the arguments given; its exit status is `shmrc bench`'s.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use crate::error::{CliError, Result};

/// The program's name.
const PROGRAM: &str = "shmrc-bench";

/// Replaces this process with `shmrc-bench ARGS`; returns only if it could not start.
pub fn run(args: &[OsString]) -> Result<()> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from));
    let candidates = beside
        .iter()
        .map(|dir| dir.join(PROGRAM))
        .filter(|path| path.is_file())
        .chain(std::iter::once(PathBuf::from(PROGRAM)));
    for program in candidates {
        // `exec` returns only on failure; on PATH, not found means not installed.
        let error = Command::new(&program).args(args).exec();
        if error.kind() != std::io::ErrorKind::NotFound {
            return Err(CliError::BenchProgram {
                program: program.into_os_string(),
                source: error,
            });
        }
    }
    Err(CliError::NoBenchProgram {
        beside: beside.unwrap_or_default().into_os_string(),
    })
}
