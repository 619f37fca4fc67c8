//! What a test does to the kernel: kill a process now or at its `n`-th crash point
//! (and the crash points themselves), lower the fd and space limits, make an unlink
//! race another process or be refused, and damage an object as a hostile peer would
//! (write or read its bytes, truncate it, change its owner).

use super::kernel::SimKernel;
use super::map::{Storage, read_words, write_words};
use super::objects::SimFile;
use super::process::SimOs;
use crate::error::{Error, Result};

impl SimKernel {
    /// Kills process `pid` now (SIGKILL): its token is dead and each of its calls
    /// returns [`Error::Killed`]. Its files and mappings stay until their values are
    /// dropped, but for the mappings its mapping cache kept (`buf/map_cache.rs`:
    /// library state that no test holds), which go at once, as a dead process's
    /// mappings do. Unknown pids are ignored.
    ///
    /// Only for a process that is not running protocol code at this moment: the caller
    /// itself, or one whose thread is parked or joined. A process that is running may
    /// have passed a crash point and not yet taken the shared step that follows it; it
    /// would take that step after others saw it dead, which SIGKILL never allows (to
    /// `is_alive`, a real process is dead only once it runs no more). Kill a running
    /// process with [`SimKernel::kill_at_step`]`(pid, 0)`: it dies at its next crash
    /// point, and is alive until then.
    pub fn kill(&self, pid: u32) {
        let local = self.with(|st, _| {
            let p = st.procs.get_mut(&pid)?;
            p.killed = true;
            let local = p.local.clone();
            st.record_death(pid);
            Some(local)
        });
        if let Some(local) = local.and_then(|l| l.upgrade()) {
            unmap_cached(&local);
        }
    }

    /// Kills process `pid` at its `n`-th [`Os::crash_point`](crate::os::Os::crash_point)
    /// from now (0: the next one), which returns [`Error::Killed`] instead of passing.
    pub fn kill_at_step(&self, pid: u32, n: u64) {
        self.with(|st, _| {
            if let Some(p) = st.procs.get_mut(&pid) {
                p.kill_at = Some(p.steps + n);
            }
        });
    }

    /// Calls off a pending [`SimKernel::kill_at_step`] of process `pid` (one already
    /// killed stays dead): a model's checks after the race its kill was armed for then
    /// run with the survivor alive.
    pub fn call_off_kill(&self, pid: u32) {
        self.with(|st, _| {
            if let Some(p) = st.procs.get_mut(&pid) {
                p.kill_at = None;
            }
        });
    }

    /// How many crash points process `pid` has passed (0 for an unknown pid).
    pub fn steps(&self, pid: u32) -> u64 {
        self.with(|st, _| st.procs.get(&pid).map_or(0, |p| p.steps))
    }

    /// Whether process `pid` was killed.
    pub fn is_killed(&self, pid: u32) -> bool {
        self.with(|st, _| st.procs.get(&pid).is_some_and(|p| p.killed))
    }

    /// Total bytes `allocate` may reserve before failing with [`Error::NoSpace`]
    /// (`None`: the machine's [`MACHINE_BYTES`](super::MACHINE_BYTES)).
    pub fn set_space_limit(&self, bytes: Option<u64>) {
        self.with(|st, _| st.space_limit = bytes);
    }

    /// Open files process `pid` may have before creating, opening, duplicating or
    /// receiving one fails with [`Error::TooManyFds`].
    pub fn set_fd_limit(&self, pid: u32, limit: usize) {
        self.with(|st, _| {
            if let Some(p) = st.procs.get_mut(&pid) {
                p.fd_limit = limit;
            }
        });
    }

    fn named(&self, name: &str) -> Option<(Storage, u64)> {
        self.with(|st, _| {
            let id = st.names.get(name)?;
            let o = st.objects.get(id)?;
            Some((o.storage.clone(), o.len))
        })
    }

    /// Writes `bytes` at `offset` into the memory of the named object `name`, through
    /// the same atomic words its mappings see (a hostile peer scribbling). `false` if
    /// there is no such object or the range is beyond its length.
    pub fn poke(&self, name: &str, offset: usize, bytes: &[u8]) -> bool {
        self.named(name)
            .is_some_and(|(storage, len)| write_words(&storage, len, offset, bytes))
    }

    /// Reads `len` bytes at `offset` of the named object `name`; `None` if there is no
    /// such object or the range is beyond its length.
    pub fn peek(&self, name: &str, offset: usize, len: usize) -> Option<Vec<u8>> {
        let (storage, object_len) = self.named(name)?;
        let mut out = vec![0; len];
        read_words(&storage, object_len, offset, &mut out).then_some(out)
    }

    /// Sets the length of the named object `name` as a hostile `ftruncate` would:
    /// later `stat` and `map` see `len`; existing mappings stay, but the bytes cut off
    /// read as 0 from then on (Linux frees them: touching them would be SIGBUS there),
    /// also after the object grows back. `false` if there is no such object, or it
    /// cannot be done (see [`SimKernel::set_file_len`]).
    pub fn set_len(&self, name: &str, len: u64) -> bool {
        let Some(id) = self.with(|st, _| st.names.get(name).copied()) else {
            return false;
        };
        self.resize(id, len).is_ok()
    }

    /// [`SimKernel::set_len`] for the object of an open file (a memfd passed to a
    /// hostile peer). Refused (`false`) when shrinking a size-sealed object, and (limits
    /// of the sim) when growing a mapped object beyond the memory it already has, or
    /// while another thread still zeroes what a shrink of it cut off.
    pub fn set_file_len(&self, file: &SimFile, len: u64) -> bool {
        self.same(&file.kernel).is_ok() && self.resize(file.object, len).is_ok()
    }

    /// Makes the next [`Os::shm_unlink`](crate::os::Os::shm_unlink) of `name`, by any
    /// process, run into `race` (the window between a sweep's last look at a name and
    /// its unlink holds only kernel calls, which no interleaving of the checkers
    /// splits).
    pub fn race_next_unlink(&self, name: &str, race: UnlinkRace) {
        self.with(|st, _| st.unlink_races.insert(name.to_owned(), race));
    }

    /// Changes the owner of the named object `name` (`fchown`); `false` if missing.
    pub fn set_owner(&self, name: &str, uid: u32) -> bool {
        self.with(|st, _| {
            let Some(id) = st.names.get(name).copied() else {
                return false;
            };
            st.objects.get_mut(&id).map(|o| o.uid = uid).is_some()
        })
    }
}

/// What an unlink runs into ([`SimKernel::race_next_unlink`]).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum UnlinkRace {
    /// Another process unlinked the name just before: the call finds it gone
    /// ([`Error::Gone`]), and the name is gone (its object freed once unused).
    UnlinkedFirst,
    /// The kernel refuses it (`EPERM`, as `/dev/shm`'s sticky bit refuses a name
    /// another user made there): [`Error::Os`], and the name stays.
    Refused,
}

/// [`Os::crash_point`](crate::os::Os::crash_point): one step further, or killed here.
pub(super) fn crash_point(os: &SimOs) -> Result<()> {
    let passed = os.with(|st, _| {
        let p = st.caller(os.pid)?;
        if p.kill_at == Some(p.steps) {
            p.killed = true;
            st.record_death(os.pid);
            return Err(Error::Killed);
        }
        p.steps += 1;
        Ok(())
    });
    if matches!(passed, Err(Error::Killed)) {
        unmap_cached(&os.local);
    }
    passed
}

/// Drops the mappings a dead process's mapping cache kept (see [`SimKernel::kill`]).
/// Only tried: a cache some thread of it holds locked is left to its values' drop.
fn unmap_cached(local: &crate::local::ProcessLocal) {
    let cached = match local.map_cache().try_lock() {
        Ok(mut slot) => slot.take(),
        Err(_) => None,
    };
    drop(cached);
}
