//! Each cause of `shmrc::Error` as its Python exception: the classes are
//! `shmrc._errors`' (Python classes of module `shmrc`, so that they pickle, with builtin
//! bases where one fits).

use pyo3::prelude::*;
use shmrc::Error;

/// The exception of class `cause` (a class of `shmrc._errors`, which owns them: plain
/// Python classes of module `shmrc`, so that they pickle, with builtin bases where one
/// fits) with `message`, and `os_errno` for `OsError`.
pub(crate) fn shmrc_err(cause: &str, message: String, os_errno: Option<i32>) -> PyErr {
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
pub(crate) fn py_err(e: Error) -> PyErr {
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
pub(crate) trait IntoPy<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for shmrc::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(py_err)
    }
}
