//! The kernel's tables and their lock: [`SimKernel`] (a handle on them), the [`State`]
//! behind one `std::sync::Mutex`, and the bookkeeping every call shares: ids, the
//! logical clock, the seeded random generator, the calling process, open files and the
//! references that keep an object alive. Also the observers tests read (names, objects
//! and bytes alive, open files).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use super::faults::UnlinkRace;
use super::map::Storage;
use super::objects::Object;
use super::process::Proc;
use super::stream::Pair;
use super::{FIRST_PID, os_error};
use crate::error::{Error, Result};
use crate::sync::{AtomicU64, Ordering};

/// The simulated kernel, shared by every simulated process; cloning is cheap.
#[derive(Clone)]
pub struct SimKernel(Arc<Inner>);

struct Inner {
    state: Mutex<State>,
    /// The model checker's view of the page tables: memory made for an object is
    /// published through it before the object points at it, and a mapping reads it
    /// before it touches the memory (see [`SimKernel::publish_memory`]).
    memory: AtomicU64,
}

/// The kernel tables.
pub(super) struct State {
    rng: u64,
    clock: u64,
    pub(super) next_pid: u32,
    next_id: u64,
    pub(super) procs: BTreeMap<u32, Proc>,
    pub(super) names: BTreeMap<String, u64>,
    pub(super) objects: BTreeMap<u64, Object>,
    pub(super) streams: BTreeMap<u64, Pair>,
    pub(super) space_limit: Option<u64>,
    pub(super) reserved: u64,
    /// What the next `shm_unlink` of a name runs into (see
    /// [`SimKernel::race_next_unlink`]).
    pub(super) unlink_races: BTreeMap<String, UnlinkRace>,
    /// What each process that died left behind, taken at its death (see
    /// [`SimKernel::effects_after_death`]).
    pub(super) at_death: BTreeMap<u32, Footprint>,
}

/// What a dead process must leave as it was: every name, and each object's length,
/// owner, mode, seal and memory. Open files, mappings and in-flight references are the
/// kernel's to drop when a process dies, so they are not part of it, and an object
/// freed with them is not compared.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct Footprint {
    names: BTreeMap<String, u64>,
    objects: BTreeMap<u64, ObjectPrint>,
}

/// One object's part of a [`Footprint`].
#[derive(Clone, PartialEq, Eq, Debug)]
struct ObjectPrint {
    len: u64,
    uid: u32,
    mode: u32,
    sealed: bool,
    named: bool,
    /// FNV-1a over its memory words.
    memory: u64,
}

/// Storages taken out of the tables under the lock, dropped after it is released.
pub(super) type Garbage = Vec<Storage>;

/// The kinds of reference that keep an object alive (besides its name).
#[derive(Copy, Clone)]
pub(super) enum Ref {
    File,
    InFlight,
    Map,
}

impl State {
    /// The footprint of the tables now.
    fn footprint(&self) -> Footprint {
        let objects = self
            .objects
            .iter()
            .map(|(id, o)| {
                let memory = o.storage.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, w| {
                    (h ^ w.load(Ordering::Relaxed)).wrapping_mul(0x0100_0000_01b3)
                });
                let print = ObjectPrint {
                    len: o.len,
                    uid: o.uid,
                    mode: o.mode,
                    sealed: o.sealed,
                    named: o.named,
                    memory,
                };
                (*id, print)
            })
            .collect();
        Footprint {
            names: self.names.clone(),
            objects,
        }
    }

    /// Records what process `pid` leaves at its death (the first death counts). The
    /// model checkers' builds skip it: reading every word would add steps to explore.
    pub(super) fn record_death(&mut self, pid: u32) {
        if cfg!(not(any(shmrc_loom, shmrc_shuttle))) && !self.at_death.contains_key(&pid) {
            let footprint = self.footprint();
            self.at_death.insert(pid, footprint);
        }
    }

    pub(super) fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(super) fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// splitmix64.
    pub(super) fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The calling process, or [`Error::Killed`] if it is dead.
    pub(super) fn caller(&mut self, pid: u32) -> Result<&mut Proc> {
        match self.procs.get_mut(&pid) {
            Some(p) if !p.killed => Ok(p),
            _ => Err(Error::Killed),
        }
    }

    /// Checks that `pid` may open one more file.
    pub(super) fn fd_available(&mut self, pid: u32, call: &'static str) -> Result<()> {
        let p = self.caller(pid)?;
        if p.fds >= p.fd_limit {
            return Err(Error::TooManyFds {
                call,
                limit: p.fd_limit as u64,
                liveness_fds: 0,
            });
        }
        Ok(())
    }

    /// The calling process, alive, using a file or stream end of process `owner`:
    /// [`Error::Killed`] if the caller is dead, `EBADF` from `call` if the descriptor is
    /// another process's (its number means nothing, or another file, in the caller's
    /// table).
    pub(super) fn owned(&mut self, pid: u32, owner: u32, call: &'static str) -> Result<&mut Proc> {
        let p = self.caller(pid)?;
        if owner != pid {
            return Err(os_error(call, libc::EBADF));
        }
        Ok(p)
    }

    /// Opens a file of `object` for `pid` (limit already checked); returns its id.
    pub(super) fn open_file(&mut self, pid: u32, object: u64) -> u64 {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.fds += 1;
        }
        if let Some(o) = self.objects.get_mut(&object) {
            o.files += 1;
        }
        self.fresh_id()
    }

    /// The object of an open file, for `call`: an open file keeps its object, so the
    /// `EBADF` this answers for a missing one is for a file that is not open.
    pub(super) fn object(&mut self, id: u64, call: &'static str) -> Result<&mut Object> {
        self.objects
            .get_mut(&id)
            .ok_or_else(|| os_error(call, libc::EBADF))
    }

    /// Frees `id` if nothing references it any more.
    pub(super) fn collect(&mut self, id: u64, garbage: &mut Garbage) {
        if self.objects.get(&id).is_some_and(|o| !o.referenced()) {
            if let Some(o) = self.objects.remove(&id) {
                self.reserved -= o.reserved;
                garbage.push(o.storage);
            }
        }
    }

    /// Takes one reference of kind `kind` off object `id`, and frees the object if
    /// nothing references it any more.
    pub(super) fn unref(&mut self, id: u64, kind: Ref, garbage: &mut Garbage) {
        if let Some(o) = self.objects.get_mut(&id) {
            let count = match kind {
                Ref::File => &mut o.files,
                Ref::InFlight => &mut o.in_flight,
                Ref::Map => &mut o.maps,
            };
            debug_assert!(*count > 0, "an object lost more references than it had");
            *count -= 1;
        }
        self.collect(id, garbage);
    }

    /// Drops files in flight (a purged queue, files refused by a receiver).
    pub(super) fn drop_in_flight(&mut self, objects: &[u64], garbage: &mut Garbage) {
        for &id in objects {
            self.unref(id, Ref::InFlight, garbage);
        }
    }
}

impl SimKernel {
    /// A kernel with no process and no object; `seed` drives
    /// [`Os::random_u128`](crate::os::Os::random_u128).
    pub fn new(seed: u64) -> SimKernel {
        SimKernel(Arc::new(Inner {
            state: Mutex::new(State {
                rng: seed,
                clock: 0,
                next_pid: FIRST_PID,
                next_id: 0,
                procs: BTreeMap::new(),
                names: BTreeMap::new(),
                objects: BTreeMap::new(),
                streams: BTreeMap::new(),
                space_limit: None,
                reserved: 0,
                unlink_races: BTreeMap::new(),
                at_death: BTreeMap::new(),
            }),
            memory: AtomicU64::new(0),
        }))
    }

    /// Called by whoever made new memory for an object, after initializing it and
    /// before installing it: under loom, this read-modify-write (and
    /// [`SimKernel::see_memory`]'s after it, in the one order of this word) is what
    /// makes the memory's creation happen before another process's access, as the real
    /// kernel's page tables do. Without it, loom rejects any model where one process
    /// maps what another created meanwhile ("causality violation").
    pub(super) fn publish_memory(&self) {
        // AcqRel: the release half publishes the new words' initialization.
        self.0.memory.swap(0, Ordering::AcqRel);
    }

    /// Called by a mapping, after it took the object's memory and before it touches
    /// it: pairs with [`SimKernel::publish_memory`].
    pub(super) fn see_memory(&self) {
        // AcqRel: the acquire half sees the initialization; an RMW always reads the
        // newest value, so it follows every publish made before the memory was found.
        self.0.memory.swap(0, Ordering::AcqRel);
    }

    /// Runs `f` on the tables under the lock; storages it frees are dropped after the
    /// lock is released (they hold model-checker atomics).
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut State, &mut Garbage) -> R) -> R {
        let mut garbage = Garbage::new();
        let result = {
            let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut state, &mut garbage)
        };
        drop(garbage);
        result
    }

    pub(super) fn same(&self, other: &SimKernel) -> Result<()> {
        if Arc::ptr_eq(&self.0, &other.0) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(
                "a file or stream of another simulated kernel".into(),
            ))
        }
    }

    /// What changed in the kernel since each recorded death (a SIGKILLed process takes
    /// no further step, so nothing may have): names made or removed, an object made, or
    /// an object's length, owner, mode, seal or memory changed. Open files, mappings
    /// and in-flight references dropped, and objects freed with them, do not count.
    /// Forgets the deaths it compared. Call it before any live process acts again.
    /// Always empty in loom and shuttle builds (no death is recorded there).
    pub fn effects_after_death(&self) -> Vec<String> {
        self.with(|st, _| {
            let now = st.footprint();
            let mut effects = Vec::new();
            for (pid, then) in std::mem::take(&mut st.at_death) {
                if then.names != now.names {
                    effects.push(format!(
                        "names were {:?} when pid {pid} died, now {:?}",
                        then.names.keys().collect::<Vec<_>>(),
                        now.names.keys().collect::<Vec<_>>()
                    ));
                }
                for (id, print) in &now.objects {
                    match then.objects.get(id) {
                        None => effects.push(format!("object {id} was made after pid {pid} died")),
                        Some(old) if old != print => effects.push(format!(
                            "object {id} changed after pid {pid} died: {old:?} -> {print:?}"
                        )),
                        Some(_) => {}
                    }
                }
            }
            effects
        })
    }

    /// The names of the named objects, sorted.
    pub fn names(&self) -> Vec<String> {
        self.with(|st, _| st.names.keys().cloned().collect())
    }

    /// How many objects still have memory: named, or referenced by an open file, a
    /// mapping or a file in flight in a stream.
    pub fn objects_alive(&self) -> usize {
        self.with(|st, _| st.objects.len())
    }

    /// Bytes reserved by `allocate` in objects still alive.
    pub fn bytes_allocated(&self) -> u64 {
        self.with(|st, _| st.reserved)
    }

    /// How many files process `pid` has open.
    pub fn open_files(&self, pid: u32) -> usize {
        self.with(|st, _| st.procs.get(&pid).map_or(0, |p| p.fds))
    }
}

impl fmt::Debug for SimKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Counted under the lock, formatted after it (the formatter's sink is arbitrary
        // code, which may well look at this kernel).
        let (processes, names, objects, streams, reserved) = self.with(|st, _| {
            (
                st.procs.len(),
                st.names.len(),
                st.objects.len(),
                st.streams.len(),
                st.reserved,
            )
        });
        f.debug_struct("SimKernel")
            .field("processes", &processes)
            .field("names", &names)
            .field("objects", &objects)
            .field("streams", &streams)
            .field("reserved", &reserved)
            .finish()
    }
}
