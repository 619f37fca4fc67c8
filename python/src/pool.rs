//! `Pool`: a pool of recycled buffers, either strategy, what `shmrc.ShmPool` wraps.

use std::time::Duration;

use pyo3::prelude::*;
use shmrc::{CreateOptions, Namespace, PoolLimits, ShmPool};

use crate::buf::Buf;
use crate::errors::{IntoPy, shmrc_err};
use crate::strategy::strategy;

/// A pool of recycled buffers, either strategy (`shmrc::ShmPool`): what
/// `shmrc.ShmPool` wraps.
#[pyclass(module = "shmrc._shmrc", name = "Pool", frozen)]
pub(crate) struct Pool {
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
