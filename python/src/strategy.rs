//! The sharing-strategy switch, by torch's names.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shmrc::Strategy;

use crate::errors::py_err;

/// A strategy from its torch name, or the process-wide one for `None`.
pub(crate) fn strategy(name: Option<&str>) -> PyResult<Option<Strategy>> {
    name.map(|n| n.parse::<Strategy>().map_err(|e| py_err(e.into())))
        .transpose()
}

/// Switches the strategy for buffers created from now on in this process.
#[pyfunction]
pub(crate) fn set_sharing_strategy(name: &str) -> PyResult<()> {
    let chosen = strategy(Some(name))?.ok_or_else(|| PyValueError::new_err("no strategy"))?;
    shmrc::set_sharing_strategy(chosen);
    Ok(())
}

/// The strategy new buffers are created with.
#[pyfunction]
pub(crate) fn get_sharing_strategy() -> &'static str {
    shmrc::sharing_strategy().name()
}

/// Every strategy this system supports, by torch name.
#[pyfunction]
pub(crate) fn get_all_sharing_strategies() -> Vec<&'static str> {
    shmrc::all_sharing_strategies()
        .iter()
        .map(|s| s.name())
        .collect()
}
