//! Namespaces, and `ls` / `sweep` as JSON (the data of `shmrc ls --json`, from
//! `shmrc::report`).

use pyo3::prelude::*;
use shmrc::Namespace;

use crate::errors::{IntoPy, shmrc_err};

/// The namespace named `prefix`, if any.
pub(crate) fn namespace(prefix: Option<&str>) -> PyResult<Option<Namespace>> {
    prefix.map(|p| Namespace::new(p).py()).transpose()
}

/// Checks a namespace prefix by the library's rule (`BadNamespaceError` says which
/// part it breaks).
#[pyfunction]
pub(crate) fn check_namespace(prefix: &str) -> PyResult<()> {
    Namespace::new(prefix).map(drop).py()
}

/// `shmrc ls --json` as a JSON text.
#[pyfunction]
#[pyo3(signature = (namespace=None))]
pub(crate) fn ls_json(py: Python<'_>, namespace: Option<&str>) -> PyResult<String> {
    let ns = self::namespace(namespace)?;
    let listing = py.detach(|| shmrc::report::listing(ns.as_ref())).py()?;
    serde_json::to_string(&listing).map_err(|e| shmrc_err("ShmrcError", e.to_string(), None))
}

/// `shmrc sweep --json [--dry-run]` as a JSON text.
#[pyfunction]
#[pyo3(signature = (namespace=None, dry_run=false))]
pub(crate) fn sweep_json(
    py: Python<'_>,
    namespace: Option<&str>,
    dry_run: bool,
) -> PyResult<String> {
    let ns = self::namespace(namespace)?;
    let swept = py
        .detach(|| shmrc::report::swept(ns.as_ref(), dry_run))
        .py()?;
    serde_json::to_string(&swept).map_err(|e| shmrc_err("ShmrcError", e.to_string(), None))
}
