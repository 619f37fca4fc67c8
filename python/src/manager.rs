//! The user's manager from Python: its runtime directory, its status, which command
//! starts it (`sys.executable -m shmrc._manager`), and serving it
//! (`shmrc.manager.serve`, as `shmrc manager [--foreground]` does).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use pyo3::prelude::*;
use shmrc::manager::RuntimeDir;
use shmrc::manager::{self, Serve};

use crate::errors::{IntoPy, shmrc_err};

/// This user's runtime directory (`$SHMRC_RUNTIME_DIR`, `$XDG_RUNTIME_DIR/shmrc` or
/// `/tmp/shmrc-<uid>`), made `0700` if missing and checked (a real directory of this
/// user's, no access for others: else `UnsafeRuntimeDirError`).
#[pyfunction]
pub(crate) fn runtime_dir() -> PyResult<PathBuf> {
    Ok(RuntimeDir::of_this_user().py()?.path().to_path_buf())
}

/// `shmrc status --json`: the running manager's counters and clients, as a JSON text.
#[pyfunction]
pub(crate) fn manager_status_json(py: Python<'_>) -> PyResult<String> {
    let status = py.detach(shmrc::manager::status).py()?;
    serde_json::to_string(&status).map_err(|e| shmrc_err("ShmrcError", e.to_string(), None))
}

/// Makes the manager start as `program args... manager` (the package passes
/// `sys.executable -m shmrc._manager`).
#[pyfunction]
pub(crate) fn set_manager_command(program: PathBuf, args: Vec<OsString>) {
    shmrc::manager::set_manager_command(program, args);
}

/// `shmrc manager [--foreground]`: serves the user's manager in this process until its
/// grace period passes with no client, or starts one detached and returns its pid.
#[pyfunction]
#[pyo3(signature = (foreground, grace_ms=None))]
pub(crate) fn run_manager(
    py: Python<'_>,
    foreground: bool,
    grace_ms: Option<u64>,
) -> PyResult<Option<u32>> {
    let runtime = RuntimeDir::of_this_user().py()?;
    let grace = grace_ms.map(Duration::from_millis);
    let how = if foreground {
        Serve::Foreground
    } else {
        Serve::Detached
    };
    py.detach(|| manager::serve(how, runtime, grace)).py()
}
