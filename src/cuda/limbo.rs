//! The producer's limbo list: device buffers its owner has dropped but that another
//! process may still hold. An entry is freed once its keep-alive segment is gone,
//! which the holder protocol allows only when no live process holds or has in flight a
//! reference (P1); a consumer killed with SIGKILL stops counting once a finalize
//! reclaims its slot (any later release, [`crate::sweep()`], or
//! [`CudaDevice::collect`](super::CudaDevice::collect)).

use std::sync::Arc;

use super::allocator::DeviceAllocator;
use super::driver::{DevicePtr, Driver, EventId};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::os::Os;
use crate::protocol::holders::{self, Outcome, Reclaim};
use crate::protocol::segment::{self, Header};

/// A dropped buffer waiting to be freed.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The allocation, as its allocator returned it.
    pub(crate) ptr: DevicePtr,
    /// Who frees it.
    pub(crate) allocator: Arc<dyn DeviceAllocator>,
    /// Its keep-alive segment, while that may still exist (`None`: never shared, or
    /// known gone).
    pub(crate) keepalive: Option<String>,
    /// Its IPC event, destroyed with the memory (a handle still in flight names it).
    pub(crate) event: Option<(Arc<dyn Driver>, EventId)>,
}

/// How hard [`drain`] looks at a keep-alive that still exists.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum Drain {
    /// Only whether its name is gone (one `shm_open`): on alloc and on free.
    Check,
    /// Finalize it as a sweep would (reclaiming dead holders' slots, unlinking it if
    /// nobody live holds it): [`super::CudaDevice::collect`].
    Finalize,
}

/// What one pass over the limbo list did: what
/// [`CudaDevice::collect`](super::CudaDevice::collect) returns.
///
/// ```
/// # #[cfg(all(feature = "cuda-fake", not(any(shmrc_loom, shmrc_shuttle))))] {
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// # shmrc::set_sharing_strategy(shmrc::Strategy::FileSystem); // legacy IPC handles
/// use shmrc::cuda::{CollectReport, CudaDevice};
/// use shmrc::{CreateOptions, Namespace};
///
/// let keepalive = CreateOptions::new().namespace(Namespace::new("shmrc-doc-collect-report")?);
/// let device = CudaDevice::fake("shmrc-doc-collect-report", 1 << 20, &keepalive)?;
/// let buf = device.alloc(4096)?;
/// let handle = buf.share()?;
/// drop(buf);
/// drop(handle);
/// let report: CollectReport = device.collect();
/// assert_eq!((report.freed, report.waiting), (1, 0));
/// assert!(report.errors.is_empty());
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct CollectReport {
    /// Allocations freed.
    pub freed: usize,
    /// Allocations still held by some process (or deferred), left in limbo.
    pub waiting: usize,
    /// What went wrong; the entries concerned stay in limbo and are retried.
    pub errors: Vec<Error>,
}

/// Frees every entry of `limbo` nobody holds any more; keeps the others.
pub(crate) fn drain<O: Os>(os: &O, limbo: &mut Vec<Entry>, how: Drain) -> CollectReport {
    let mut report = CollectReport::default();
    limbo.retain_mut(|entry| {
        if entry.allocator.deferral().is_deferred() {
            report.waiting += 1;
            return true;
        }
        if let Some(name) = &entry.keepalive {
            match still_held(os, name, how) {
                Ok(false) => entry.keepalive = None,
                Ok(true) => {
                    report.waiting += 1;
                    return true;
                }
                Err(e) => {
                    report.errors.push(e);
                    return true;
                }
            }
        }
        match entry.allocator.memfree(entry.ptr) {
            Ok(()) => {
                report.freed += 1;
                if let Some((driver, event)) = entry.event.take() {
                    // The memory is gone; a failed destroy leaks one event until exit.
                    let _ = driver.event_destroy(event);
                }
                false
            }
            Err(e) => {
                report.errors.push(e);
                true
            }
        }
    });
    report
}

/// Whether the keep-alive segment `name` may still be held by some process.
fn still_held<O: Os>(os: &O, name: &str, how: Drain) -> Result<bool> {
    let me = os.uid();
    let (ns, _) = Namespace::of_segment(name, me)?;
    let opened = match segment::open_named(os, &ns, name, me) {
        Ok(opened) => opened,
        Err(Error::Gone { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    if how == Drain::Check {
        return Ok(true);
    }
    let header =
        Header::of(&opened.map, opened.fields.layout.capacity).ok_or_else(|| Error::Corrupted {
            segment: name.to_owned(),
            what: "holder slots lie outside the mapping".into(),
        })?;
    let finalized = holders::finalize(os, &header.holders(), name, Reclaim::All)?;
    Ok(matches!(
        finalized.outcome,
        Outcome::InUse | Outcome::Deferred
    ))
}
