//! `shmrc._shmrc`: the Rust side of the Python package `shmrc` (PyO3, abi3 for
//! CPython >= 3.9). It is a thin skin over the library: a buffer ([`Buf`]) and its
//! handles, the sharing-strategy switch, `ls` and `sweep` (the data of
//! `shmrc ls --json`, from `shmrc::report`), the manager's start-up and serving, and
//! the mapping of each cause of `shmrc::Error` to its Python exception (the classes
//! are `shmrc._errors`', Python classes of module `shmrc`, so that they pickle). The Python modules in `shmrc/`
//! build the public API on it (the buffer protocol, pickling, the torch reducers);
//! no protocol logic lives in Python but the name index of `shmrc.shared_memory`
//! (files holding the library's locators, `Buf.locator`).
//!
//! # Safety
//! One `unsafe` block: taking ownership of a descriptor number that Python hands over
//! (`Buf.attach_fd`), whose caller promises it owns that descriptor.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmrc::checkers::os::Os;
use shmrc::manager::runtime::RuntimeDir;
use shmrc::manager::{self, Serve};
use shmrc::{
    CreateOptions, DefaultOs, Error, Namespace, PoolLimits, ShareHandle, ShmBuf, ShmPool, Strategy,
};

/// The exception of class `cause` (a class of `shmrc._errors`, which owns them: plain
/// Python classes of module `shmrc`, so that they pickle, with builtin bases where one
/// fits) with `message`, and `os_errno` for `OsError`.
fn shmrc_err(cause: &str, message: String, os_errno: Option<i32>) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("shmrc._errors")
            .and_then(|errors| errors.getattr("make"))
            .and_then(|make| make.call1((cause, message, os_errno)));
        match made {
            Ok(exception) => PyErr::from_value(exception),
            Err(e) => e,
        }
    })
}

/// The Python exception for `e`, by cause, with the library's message.
fn py_err(e: Error) -> PyErr {
    let msg = e.to_string();
    let mut os_errno = None;
    let cause = match &e {
        Error::Gone { .. } => "GoneError",
        Error::Stale { .. } => "StaleError",
        Error::HalfCreated { .. } => "HalfCreatedError",
        Error::Truncated { .. } => "TruncatedError",
        Error::BadMagic { .. } => "BadMagicError",
        Error::WrongVersion { .. } => "WrongVersionError",
        Error::OtherUser { .. } => "OtherUserError",
        Error::OtherPidNamespace { .. } => "OtherPidNamespaceError",
        Error::Corrupted { .. } => "CorruptedError",
        Error::NoSpace { .. } => "NoSpaceError",
        Error::TooManyFds { .. } => "TooManyFdsError",
        Error::HoldersFull { .. } => "HoldersFullError",
        Error::OutsideNamespace { .. } => "OutsideNamespaceError",
        Error::BadNamespace { .. } => "BadNamespaceError",
        Error::Malformed { .. } => "MalformedError",
        Error::OutOfBounds { .. } => "OutOfBoundsError",
        Error::InvalidArgument(_) => "InvalidArgumentError",
        Error::UnknownStrategy(_) => "UnknownStrategyError",
        Error::WrongStrategy { .. } => "WrongStrategyError",
        Error::NotHolder { .. } => "NotHolderError",
        Error::Disconnected => "DisconnectedError",
        Error::Timeout { .. } => "TimedOutError",
        Error::Os { source, .. } => {
            os_errno = source.raw_os_error();
            "OsError"
        }
        Error::UnsafeRuntimeDir { .. } => "UnsafeRuntimeDirError",
        Error::SocketPathTooLong { .. } => "SocketPathTooLongError",
        Error::NoManager { .. } => "NoManagerError",
        Error::ManagerStart { .. } => "ManagerStartError",
        Error::ManagerRefused { .. } => "ManagerRefusedError",
        Error::ManagerTimeout { .. } => "ManagerTimeoutError",
        Error::TimeNamespace { .. } => "TimeNamespaceError",
        Error::NotSharedMemory { .. } => "NotSharedMemoryError",
        _ => "ShmrcError",
    };
    shmrc_err(cause, msg, os_errno)
}

/// `Result` with the error turned into its Python exception.
trait IntoPy<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for shmrc::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(py_err)
    }
}

/// A strategy from its torch name, or the process-wide one for `None`.
fn strategy(name: Option<&str>) -> PyResult<Option<Strategy>> {
    name.map(|n| n.parse::<Strategy>().map_err(|e| py_err(e.into())))
        .transpose()
}

/// One held reference to a shmrc buffer: what `shmrc.ShmBuf` wraps. Dropping it (the
/// Python object's last reference) releases the reference.
#[pyclass(module = "shmrc._shmrc", name = "Buf", frozen)]
struct Buf {
    buf: ShmBuf,
}

#[pymethods]
impl Buf {
    /// A zero-filled buffer of `nbytes` bytes with `strategy` (a torch name; `None`: the
    /// process-wide one) in `namespace` (`None`: `shmrc`).
    #[new]
    #[pyo3(signature = (nbytes, strategy=None, namespace=None))]
    fn new(
        py: Python<'_>,
        nbytes: usize,
        strategy: Option<&str>,
        namespace: Option<&str>,
    ) -> PyResult<Buf> {
        let mut options = CreateOptions::new();
        if let Some(s) = self::strategy(strategy)? {
            options = options.strategy(s);
        }
        if let Some(prefix) = namespace {
            options = options.namespace(Namespace::new(prefix).py()?);
        }
        let buf = py.detach(|| ShmBuf::with_options(nbytes, &options)).py()?;
        Ok(Buf { buf })
    }

    /// The address of the first data byte in this process.
    #[getter]
    fn address(&self) -> usize {
        self.buf.region().as_ptr() as usize
    }

    fn __len__(&self) -> usize {
        self.buf.len()
    }

    /// `file_descriptor` or `file_system`.
    #[getter]
    fn strategy(&self) -> &'static str {
        self.buf.strategy().name()
    }

    /// The segment's name in `/dev/shm` (file_system), else `None`.
    #[getter]
    fn name(&self) -> Option<String> {
        self.buf.name().map(str::to_owned)
    }

    /// Which use of a pool's recycled segment this is (0: its first, or never
    /// recycled).
    #[getter]
    fn generation(&self) -> u64 {
        self.buf.generation()
    }

    /// A file_system handle as bytes; they carry an in-flight reference for whoever
    /// attaches them.
    fn share_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.buf.share().and_then(ShareHandle::into_bytes).py()?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// A file_system handle's bytes without an in-flight reference (a locator): they
    /// keep nothing alive, and attach while the buffer lives.
    fn locator<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.buf.locator().py()?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// A file_descriptor handle as (bytes, descriptor): the caller owns the descriptor.
    fn share_fd<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyBytes>, RawFd)> {
        let (bytes, fd) = self.buf.share().and_then(ShareHandle::into_fd_parts).py()?;
        Ok((PyBytes::new(py, &bytes), fd.into_raw_fd()))
    }

    /// Attaches a file_system handle's bytes.
    #[staticmethod]
    fn attach_bytes(py: Python<'_>, bytes: &[u8]) -> PyResult<Buf> {
        let buf = py
            .detach(|| ShareHandle::from_bytes(bytes).and_then(ShmBuf::attach))
            .py()?;
        Ok(Buf { buf })
    }

    /// Attaches a file_descriptor handle: its bytes and its descriptor, which this call
    /// takes over (it is closed when the buffer goes, or at once on failure).
    #[staticmethod]
    fn attach_fd(py: Python<'_>, bytes: &[u8], fd: RawFd) -> PyResult<Buf> {
        if fd < 0 {
            return Err(shmrc_err(
                "InvalidArgumentError",
                format!("descriptor {fd} is not open"),
                None,
            ));
        }
        // SAFETY: the caller hands over a descriptor it owns and no longer uses (the
        // Python package passes one it received, e.g. from `DupFd.detach()`).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let buf = py
            .detach(|| ShareHandle::from_fd_parts(bytes, fd).and_then(ShmBuf::attach))
            .py()?;
        Ok(Buf { buf })
    }

    /// Drops a file_descriptor handle that was never sent: its bytes and its
    /// descriptor, which this call takes over and closes. A pool's memfd handle gives
    /// its in-flight reference back on the way; a plain one only closes.
    #[staticmethod]
    fn drop_fd(py: Python<'_>, bytes: &[u8], fd: RawFd) -> PyResult<()> {
        if fd < 0 {
            return Err(shmrc_err(
                "InvalidArgumentError",
                format!("descriptor {fd} is not open"),
                None,
            ));
        }
        // SAFETY: as in `attach_fd`: the caller hands over a descriptor it owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        py.detach(|| ShareHandle::from_fd_parts(bytes, fd).map(drop))
            .py()
    }
}

/// A pool of recycled buffers, either strategy (`shmrc::ShmPool`): what
/// `shmrc.ShmPool` wraps.
#[pyclass(module = "shmrc._shmrc", name = "Pool", frozen)]
struct Pool {
    pool: ShmPool,
}

#[pymethods]
impl Pool {
    /// A pool of `strategy` buffers (`None`: the process-wide strategy now), file_system
    /// ones in `namespace` (`None`: `shmrc`), keeping at most `max_idle_buffers` idle
    /// buffers and `max_idle_bytes` idle bytes (lent ones, that another process still
    /// holds, do not count), idle or lent for at most `idle_timeout` seconds.
    #[new]
    #[pyo3(signature = (strategy=None, namespace=None, max_idle_buffers=64, max_idle_bytes=1 << 30, idle_timeout=10.0))]
    fn new(
        strategy: Option<&str>,
        namespace: Option<&str>,
        max_idle_buffers: usize,
        max_idle_bytes: usize,
        idle_timeout: f64,
    ) -> PyResult<Pool> {
        let idle_timeout = Duration::try_from_secs_f64(idle_timeout).map_err(|_| {
            shmrc_err(
                "InvalidArgumentError",
                format!("idle_timeout must be a finite number of seconds >= 0, not {idle_timeout}"),
                None,
            )
        })?;
        let mut options = CreateOptions::new();
        if let Some(s) = self::strategy(strategy)? {
            options = options.strategy(s);
        }
        if let Some(prefix) = namespace {
            options = options.namespace(Namespace::new(prefix).py()?);
        }
        let limits = PoolLimits {
            max_idle_buffers,
            max_idle_bytes,
            idle_timeout,
        };
        Ok(Pool {
            pool: ShmPool::new(options, limits).py()?,
        })
    }

    /// A buffer of `nbytes` bytes: a recycled segment nobody else holds any more (its
    /// bytes those of its last use), else a new one.
    fn get(&self, py: Python<'_>, nbytes: usize) -> PyResult<Buf> {
        let buf = py.detach(|| self.pool.get(nbytes)).py()?;
        Ok(Buf { buf })
    }

    /// Gives back idle buffers past the limits now; how many.
    fn trim(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.pool.trim()).py()
    }

    /// (created, recycled, given_back, idle, idle_bytes, lent, in_use): the fields of
    /// `shmrc::PoolStats`, in their order.
    fn stats(&self) -> (u64, u64, u64, usize, usize, usize, usize) {
        let s = self.pool.stats();
        (
            s.created,
            s.recycled,
            s.given_back,
            s.idle,
            s.idle_bytes,
            s.lent,
            s.in_use,
        )
    }
}

/// Switches the strategy for buffers created from now on in this process.
#[pyfunction]
fn set_sharing_strategy(name: &str) -> PyResult<()> {
    let chosen = strategy(Some(name))?.ok_or_else(|| PyValueError::new_err("no strategy"))?;
    shmrc::set_sharing_strategy(chosen);
    Ok(())
}

/// The strategy new buffers are created with.
#[pyfunction]
fn get_sharing_strategy() -> &'static str {
    shmrc::sharing_strategy().name()
}

/// Every strategy this system supports, by torch name.
#[pyfunction]
fn get_all_sharing_strategies() -> Vec<&'static str> {
    shmrc::all_sharing_strategies()
        .iter()
        .map(|s| s.name())
        .collect()
}

/// The namespace named `prefix`, if any.
fn namespace(prefix: Option<&str>) -> PyResult<Option<Namespace>> {
    prefix.map(|p| Namespace::new(p).py()).transpose()
}

/// Checks a namespace prefix by the library's rule (`BadNamespaceError` says which
/// part it breaks).
#[pyfunction]
fn check_namespace(prefix: &str) -> PyResult<()> {
    Namespace::new(prefix).map(drop).py()
}

/// `shmrc ls --json` as a JSON text.
#[pyfunction]
#[pyo3(signature = (namespace=None))]
fn ls_json(py: Python<'_>, namespace: Option<&str>) -> PyResult<String> {
    let ns = self::namespace(namespace)?;
    let listing = py.detach(|| shmrc::report::listing(ns.as_ref())).py()?;
    serde_json::to_string(&listing).map_err(|e| shmrc_err("ShmrcError", e.to_string(), None))
}

/// `shmrc sweep --json [--dry-run]` as a JSON text.
#[pyfunction]
#[pyo3(signature = (namespace=None, dry_run=false))]
fn sweep_json(py: Python<'_>, namespace: Option<&str>, dry_run: bool) -> PyResult<String> {
    let ns = self::namespace(namespace)?;
    let swept = py
        .detach(|| shmrc::report::swept(ns.as_ref(), dry_run))
        .py()?;
    serde_json::to_string(&swept).map_err(|e| shmrc_err("ShmrcError", e.to_string(), None))
}

/// This user's runtime directory (`$SHMRC_RUNTIME_DIR`, `$XDG_RUNTIME_DIR/shmrc` or
/// `/tmp/shmrc-<uid>`), made `0700` if missing and checked (a real directory of this
/// user's, no access for others: else `UnsafeRuntimeDirError`).
#[pyfunction]
fn runtime_dir() -> PyResult<PathBuf> {
    let uid = DefaultOs::default().uid();
    let runtime = RuntimeDir::for_user(uid).py()?;
    runtime.ensure(uid).py()?;
    Ok(runtime.path().to_path_buf())
}

/// `shmrc status --json`: the running manager's counters and clients, as a JSON text.
#[pyfunction]
fn manager_status_json(py: Python<'_>) -> PyResult<String> {
    let status = py.detach(shmrc::manager::status).py()?;
    serde_json::to_string(&status).map_err(|e| shmrc_err("ShmrcError", e.to_string(), None))
}

/// Makes the manager start as `program args... manager` (the package passes
/// `sys.executable -m shmrc._manager`).
#[pyfunction]
fn set_manager_command(program: PathBuf, args: Vec<OsString>) {
    shmrc::manager::set_manager_command(program, args);
}

/// `shmrc manager [--foreground]`: serves the user's manager in this process until its
/// grace period passes with no client, or starts one detached and returns its pid.
#[pyfunction]
#[pyo3(signature = (foreground, grace_ms=None))]
fn run_manager(py: Python<'_>, foreground: bool, grace_ms: Option<u64>) -> PyResult<Option<u32>> {
    let runtime = RuntimeDir::for_user(DefaultOs::default().uid()).py()?;
    let grace = grace_ms.map(Duration::from_millis);
    let how = if foreground {
        Serve::Foreground
    } else {
        Serve::Detached
    };
    py.detach(|| manager::serve(how, runtime, grace)).py()
}

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
