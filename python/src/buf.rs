//! `Buf`: one held reference to a shmrc buffer, what `shmrc.ShmBuf` wraps, with its
//! handles (bytes, or bytes and a descriptor).
//!
//! # Safety
//! One `unsafe` block: taking ownership of a descriptor number that Python hands over
//! (`Buf.attach_fd`, and the give-back of an unattached one), whose caller promises it
//! owns that descriptor.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shmrc::{CreateOptions, Namespace, ShareHandle, ShmBuf};

use crate::errors::{IntoPy, shmrc_err};
use crate::strategy::strategy;

/// One held reference to a shmrc buffer: what `shmrc.ShmBuf` wraps. Dropping it (the
/// Python object's last reference) releases the reference.
#[pyclass(module = "shmrc._shmrc", name = "Buf", frozen)]
pub(crate) struct Buf {
    pub(crate) buf: ShmBuf,
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
        let fd = take_fd(fd)?;
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
        let fd = take_fd(fd)?;
        py.detach(|| ShareHandle::from_fd_parts(bytes, fd).map(drop))
            .py()
    }
}

/// Takes over descriptor `fd`, which Python hands over (`attach_fd`, `drop_fd`): a
/// negative number is `InvalidArgumentError`.
fn take_fd(fd: RawFd) -> PyResult<OwnedFd> {
    if fd < 0 {
        return Err(shmrc_err(
            "InvalidArgumentError",
            format!("descriptor {fd} is not open"),
            None,
        ));
    }
    // SAFETY: the caller hands over a descriptor it owns and no longer uses (the Python
    // package passes one it received, e.g. from `DupFd.detach()`).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
