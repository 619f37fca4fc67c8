//! `shmrc._shmrc`: the Rust side of the Python package `shmrc` (PyO3, abi3 for
//! CPython >= 3.9). It is a thin skin over the library's public API, a room per class:
//! [`buf`] (a buffer and its handles), [`pool`], [`strategy`] (the sharing-strategy
//! switch), [`listing`] (namespaces, `ls` and `sweep`), [`manager`] (its runtime
//! directory, status, start-up and serving) and [`errors`] (each cause of
//! `shmrc::Error` as its Python exception). The Python modules in `shmrc/` build the
//! public API on it (the buffer protocol, pickling, the torch reducers); no protocol
//! logic lives in Python but the name index of `shmrc.shared_memory` (files holding the
//! library's locators, `Buf.locator`).

use pyo3::prelude::*;

mod buf;
mod errors;
mod listing;
mod manager;
mod pool;
mod strategy;

use buf::Buf;
use listing::{check_namespace, ls_json, sweep_json};
use manager::{manager_status_json, run_manager, runtime_dir, set_manager_command};
use pool::Pool;
use strategy::{get_all_sharing_strategies, get_sharing_strategy, set_sharing_strategy};

/// The extension module.
#[pymodule]
fn _shmrc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Buf>()?;
    m.add_class::<Pool>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(check_namespace, m)?)?;
    m.add_function(wrap_pyfunction!(set_sharing_strategy, m)?)?;
    m.add_function(wrap_pyfunction!(get_sharing_strategy, m)?)?;
    m.add_function(wrap_pyfunction!(get_all_sharing_strategies, m)?)?;
    m.add_function(wrap_pyfunction!(ls_json, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_json, m)?)?;
    m.add_function(wrap_pyfunction!(manager_status_json, m)?)?;
    m.add_function(wrap_pyfunction!(runtime_dir, m)?)?;
    m.add_function(wrap_pyfunction!(set_manager_command, m)?)?;
    m.add_function(wrap_pyfunction!(run_manager, m)?)?;
    Ok(())
}
