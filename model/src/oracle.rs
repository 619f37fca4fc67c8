//! The op-level oracle: shmrc as its users see it, one deterministic transition per
//! user operation. It owns the rules of what each operation must return and what state
//! it leaves, and is what the model-based tests (`tests/model_based.rs`) and the
//! `refcount` fuzz target check the real protocol against, step by step.
//!
//! # What it models
//! - [`PROCESSES`] process slots, each alive or dead, with its own strategy switch and
//!   the buffers (`ShmBuf` values) it owns, in order;
//! - segments, in creation order: strategy, capacity, their data bytes, and for
//!   file_system ones whether the name exists ([`Name`]), the in-flight references of
//!   live senders, and the tombstones a dead finalizer may have left;
//! - handles in flight: sender, receiver, segment, and how they travel ([`Via`]).
//!
//! The holders of a segment are never stored: they are the live processes owning a
//! buffer of it (a live process's operations always complete, so what it holds is
//! always known). A dead holder's reference is not tracked at all: whether it is still
//! in a slot changes nothing a user can see (a claim may take it, a finalize reclaims it).
//!
//! # Crashes: allowed outcomes, then observation
//! An operation may be cut short by the kill of the process doing it (`crash_at`). What
//! it had done by then is not known to the oracle, so such a step leaves *unknown*
//! facts ([`Name::Unknown`], [`Count::Unknown`] tombstones, `maybe_in_flight`
//! references) and [`Oracle::expect`] allows every outcome the real code may return
//! (a set, [`Allowed`]). [`Oracle::observe`] then takes what the harness saw in the
//! kernel (which names exist, what the holder slots say) and resolves each unknown,
//! after checking it against every fact that *is* known. Before each operation the
//! harness's oracle is therefore exact again, and the next prediction is sharp.
//! The reference copy that proptest uses to generate operations never observes: its
//! unknowns stay unknown, and it only guides generation.
//!
//! # The rules, and the property each one encodes
//! - **P1** (no premature destruction): a file_system segment with a live holder or an
//!   in-flight reference of a live sender is named, and stays so through any operation
//!   of anyone, crashed or not; an attach of a handle whose sender lives succeeds; a
//!   release by one holder while another live reference exists answers `InUse`; every
//!   live holder reads the data last written by any holder.
//! - **P2** (at most once, only ours): a segment is unlinked at most once (a release
//!   answers `Unlinked` only for the call that unlinked; `AlreadyGone` never happens
//!   in a sequential run), and nothing outside the namespace is touched (the harness
//!   plants foreign names and checks they survive).
//! - **P3** (no leak): the release of the last live reference unlinks at once; a
//!   completed sweep unlinks every named segment without a live reference, whatever
//!   crashed before; a file_descriptor segment lives exactly while a live process holds
//!   it or a handle to a live receiver carries its descriptor.
//! - **P4** (clear failure): an attach after the segment is gone is `Gone`; a share or
//!   attach with no slot left is `Full`; the only other result a crashed operation may
//!   give is `Killed`; nothing else is ever returned.
//! - **P5** (bounded counters): each live process holds at most one slot per segment
//!   and exactly while it owns a buffer of it; a completed finalize leaves no tombstone
//!   in a segment that lives; the counts of slot states add up to the capacity.

use std::collections::BTreeMap;
use std::fmt;

/// Process slots in a run (a killed slot can be refilled by [`Op::Respawn`]).
pub const PROCESSES: usize = 4;
/// Data bytes of every buffer.
pub const DATA_LEN: usize = 8;
/// Most holder slots a generated segment has (`Op::Create { capacity }` is taken modulo).
pub const MAX_CAPACITY: usize = 4;

/// How a buffer is shared (mirrors `shmrc::Strategy`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Strategy {
    /// A memfd passed over a socket.
    FileDescriptor,
    /// A named segment with holder slots.
    FileSystem,
}

/// One user operation, as generated or decoded from fuzzer bytes. Indices are taken
/// modulo what exists when the operation runs ([`Oracle::resolve`]); `crash_at: Some(n)`
/// kills the acting process at its `n`-th crash point inside the operation (or right
/// after it, if it has fewer).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Op {
    /// Process `p` creates a buffer with its current strategy and `1 + capacity %
    /// MAX_CAPACITY` holder slots, and writes its initial data.
    Create {
        /// Acting process.
        p: u8,
        /// Capacity selector.
        capacity: u8,
        /// Kill the creator inside.
        crash_at: Option<u8>,
    },
    /// Process `p` switches the strategy of the buffers it creates from now on.
    SetStrategy {
        /// Acting process.
        p: u8,
        /// The new setting.
        strategy: Strategy,
    },
    /// Process `p` shares its buffer `buf` with process `to` (itself allowed): a
    /// file_system handle travels as bytes (`as_bytes`) or over a socket, a
    /// file_descriptor one always over a socket.
    Share {
        /// Acting process.
        p: u8,
        /// Which of its buffers.
        buf: u8,
        /// Receiver.
        to: u8,
        /// Send a file_system handle as bytes rather than over a socket.
        as_bytes: bool,
        /// Kill the sender inside (the handle is then never delivered).
        crash_at: Option<u8>,
    },
    /// The receiver of handle `handle` attaches it.
    Attach {
        /// Which handle in flight.
        handle: u8,
        /// Kill the receiver inside.
        crash_at: Option<u8>,
    },
    /// The receiver of handle `handle` receives it and drops it unattached.
    DropHandle {
        /// Which handle in flight.
        handle: u8,
        /// Kill the receiver inside.
        crash_at: Option<u8>,
    },
    /// Process `p` releases (drops) its buffer `buf`.
    Release {
        /// Acting process.
        p: u8,
        /// Which of its buffers.
        buf: u8,
        /// Kill it inside.
        crash_at: Option<u8>,
    },
    /// Process `p` writes `byte` at `offset % DATA_LEN` of its buffer `buf`.
    Write {
        /// Acting process.
        p: u8,
        /// Which of its buffers.
        buf: u8,
        /// Offset selector.
        offset: u8,
        /// The byte.
        byte: u8,
    },
    /// SIGKILL to process `p`: the kernel drops everything it owned.
    Kill {
        /// Victim.
        p: u8,
    },
    /// Process `p` runs the recycle step (`ShmPool`'s reuse) on its buffer `buf`.
    Recycle {
        /// Acting process.
        p: u8,
        /// Which of its buffers.
        buf: u8,
        /// Kill it inside.
        crash_at: Option<u8>,
    },
    /// A fresh process takes the dead slot `p`.
    Respawn {
        /// Slot.
        p: u8,
    },
    /// A fresh process sweeps the namespace (the manager's or `shmrc sweep`'s role).
    Sweep {
        /// Kill the sweeper inside.
        crash_at: Option<u8>,
    },
}

/// How a handle travels.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Via {
    /// `ShareHandle::into_bytes` / `from_bytes_with` (file_system only).
    Bytes,
    /// `transport::send` / `recv` over a socket pair.
    Socket,
}

/// An operation resolved against the current state: concrete indices, nothing
/// left to chance. Both the oracle and the harness apply this.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Step {
    /// See [`Op::Create`].
    Create {
        /// Creator.
        p: usize,
        /// Holder slots (file_system).
        capacity: usize,
        /// The creator's setting, which the buffer takes.
        strategy: Strategy,
        /// Kill step.
        crash_at: Option<u8>,
    },
    /// See [`Op::SetStrategy`].
    SetStrategy {
        /// Process.
        p: usize,
        /// Setting.
        strategy: Strategy,
    },
    /// See [`Op::Share`].
    Share {
        /// Sender.
        p: usize,
        /// Index in its buffers.
        buf: usize,
        /// Receiver.
        to: usize,
        /// How the handle travels.
        via: Via,
        /// Kill step.
        crash_at: Option<u8>,
    },
    /// See [`Op::Attach`].
    Attach {
        /// Index in [`Oracle::handles`].
        handle: usize,
        /// Kill step.
        crash_at: Option<u8>,
    },
    /// See [`Op::DropHandle`].
    DropHandle {
        /// Index in [`Oracle::handles`].
        handle: usize,
        /// Kill step.
        crash_at: Option<u8>,
    },
    /// See [`Op::Release`].
    Release {
        /// Process.
        p: usize,
        /// Index in its buffers.
        buf: usize,
        /// Kill step.
        crash_at: Option<u8>,
    },
    /// See [`Op::Write`].
    Write {
        /// Process.
        p: usize,
        /// Index in its buffers.
        buf: usize,
        /// Offset in the data.
        offset: usize,
        /// Byte.
        byte: u8,
    },
    /// See [`Op::Kill`].
    Kill {
        /// Victim.
        p: usize,
    },
    /// See [`Op::Recycle`].
    Recycle {
        /// Process.
        p: usize,
        /// Index in its buffers.
        buf: usize,
        /// Kill step.
        crash_at: Option<u8>,
    },
    /// See [`Op::Respawn`].
    Respawn {
        /// Slot.
        p: usize,
    },
    /// See [`Op::Sweep`].
    Sweep {
        /// Kill step.
        crash_at: Option<u8>,
    },
}

/// What an operation returned, as users see it.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// Success (for a release: not the last reference here, or file_descriptor).
    Ok,
    /// `Error::Gone`.
    Gone,
    /// `Error::HoldersFull`.
    Full,
    /// A release that unlinked the segment.
    Unlinked,
    /// A release that left the segment to other holders.
    InUse,
    /// A release whose finalize was deferred to another finalizer.
    Deferred,
    /// A release whose finalize found the name already gone.
    AlreadyGone,
    /// `Error::Killed`: the acting process was killed inside the operation.
    Killed,
    /// A recycle that reused the segment (a new generation).
    Recycled,
    /// A recycle that found the segment held (or was not file_system).
    Held,
    /// `Error::Stale`: the handle is of an earlier generation.
    Stale,
}

const OUTCOMES: [Outcome; 11] = [
    Outcome::Ok,
    Outcome::InUse,
    Outcome::Unlinked,
    Outcome::Full,
    Outcome::Gone,
    Outcome::Deferred,
    Outcome::AlreadyGone,
    Outcome::Killed,
    Outcome::Recycled,
    Outcome::Held,
    Outcome::Stale,
];

/// A set of allowed outcomes.
#[derive(Copy, Clone, PartialEq, Eq, Default)]
pub struct Allowed(u16);

impl Allowed {
    fn bit(o: Outcome) -> u16 {
        1 << OUTCOMES.iter().position(|x| *x == o).unwrap_or(0)
    }

    /// Exactly `o`.
    pub fn only(o: Outcome) -> Allowed {
        Allowed(Allowed::bit(o))
    }

    /// This set and `o`.
    pub fn with(self, o: Outcome) -> Allowed {
        Allowed(self.0 | Allowed::bit(o))
    }

    /// Both sets.
    pub fn union(self, other: Allowed) -> Allowed {
        Allowed(self.0 | other.0)
    }

    /// Whether `o` is allowed.
    pub fn allows(self, o: Outcome) -> bool {
        self.0 & Allowed::bit(o) != 0
    }

    /// The first allowed outcome in the order Ok, InUse, Unlinked, Full, Gone, …: what
    /// the reference copy assumes when it cannot observe.
    pub fn likeliest(self) -> Outcome {
        OUTCOMES
            .into_iter()
            .find(|o| self.allows(*o))
            .unwrap_or(Outcome::Ok)
    }
}

impl fmt::Debug for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(OUTCOMES.iter().filter(|o| self.allows(**o)))
            .finish()
    }
}

/// Whether a file_system segment's name exists.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Name {
    /// It exists.
    Named,
    /// It was unlinked (or never created).
    Unlinked,
    /// A crashed operation may have unlinked it (or, for a crashed create, created it):
    /// the next observation says which.
    Unknown,
}

/// A count the oracle may not know after a crash.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Count {
    /// Exactly this many.
    Known(u32),
    /// Resolved by the next observation.
    Unknown,
}

/// A model process.
#[derive(Clone, Debug)]
pub struct Proc {
    /// Not killed.
    pub alive: bool,
    /// Its strategy switch.
    pub strategy: Strategy,
    /// The segments of the buffers it owns, in order (several buffers of one segment
    /// share one reference, as `Arc` clones do).
    pub bufs: Vec<usize>,
}

impl Proc {
    fn fresh() -> Proc {
        Proc {
            alive: true,
            strategy: Strategy::FileDescriptor,
            bufs: Vec::new(),
        }
    }
}

/// A model segment.
#[derive(Clone, Debug)]
pub struct Seg {
    /// Its strategy.
    pub strategy: Strategy,
    /// Holder slots (file_system).
    pub capacity: usize,
    /// The data every holder must read.
    pub data: Vec<u8>,
    /// Whether the name exists (file_system; `Unlinked` for file_descriptor).
    pub name: Name,
    /// In-flight references of live senders known to be in a slot: one per handle they
    /// sent that was not taken over yet, and those whose handle was lost.
    pub in_flight: BTreeMap<usize, u32>,
    /// In-flight references of live senders that a crashed attach or drop may or may
    /// not have taken out of their slot.
    pub maybe_in_flight: BTreeMap<usize, u32>,
    /// Tombstones in the slots (only a crashed finalizer leaves any).
    pub tombs: Count,
    /// Made by a create that crashed: it may be half-created, or not exist at all.
    pub phantom: bool,
    /// Its finalizer word was seen committed: destroyed for good, whatever the slots
    /// above the mark hold (a finalizer killed between its commit and its unlink).
    pub committed: bool,
    /// Its generation (a crashed recycle may or may not have bumped it).
    pub generation: Count,
    /// A dead process may hold the finalizer word: a finalize or recycle was killed
    /// inside since the last one that completed. The next finalize then takes the word
    /// over even while the segment is held, and a crash of that one may leave
    /// tombstones under it beside a live holder.
    pub abandoned: bool,
}

/// A handle in flight.
#[derive(Clone, Debug)]
pub struct Handle {
    /// Unique id (for the harness).
    pub id: u64,
    /// Segment.
    pub seg: usize,
    /// Sending process slot.
    pub sender: usize,
    /// Whether the sender is still the live process that sent it.
    pub sender_alive: bool,
    /// Receiving process slot (a handle whose receiver dies is lost).
    pub receiver: usize,
    /// How it travels.
    pub via: Via,
    /// The segment's generation when it was shared.
    pub generation: u32,
}

/// A rule broken: which property, and how.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Violation {
    /// "P1".."P5", or "model" for an outcome the oracle does not allow.
    pub property: &'static str,
    /// What was seen against what was expected.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated: {}", self.property, self.what)
    }
}

fn violation(property: &'static str, what: String) -> Violation {
    Violation { property, what }
}

/// What the harness saw of one file_system segment after a step.
#[derive(Clone, Debug, Default)]
pub struct SegObservation {
    /// Whether its name exists in the kernel.
    pub named: bool,
    /// Its holder slots (when named): live processes holding one, live senders' in-flight
    /// references, tombstones.
    pub slots: Option<SlotObservation>,
    /// Its generation word (when named and published).
    pub generation: u32,
}

/// A holder-slot table as seen, per live process slot.
#[derive(Clone, Debug, Default)]
pub struct SlotObservation {
    /// How many slots each live process holds (only nonzero entries).
    pub held: BTreeMap<usize, u32>,
    /// How many in-flight references each live process has in slots (nonzero only).
    pub in_flight: BTreeMap<usize, u32>,
    /// Tombstones.
    pub tombs: u32,
    /// Whether the finalizer word says committed: the segment is destroyed for good
    /// (its unlink may not have run yet). Since the mark, a commit tombstones only the
    /// slots below the mark, so the tombstones alone no longer tell it.
    pub committed: bool,
}

/// The oracle's state. See the module docs.
#[derive(Clone, Debug)]
pub struct Oracle {
    /// Process slots.
    pub procs: Vec<Proc>,
    /// Segments in creation order.
    pub segs: Vec<Seg>,
    /// Handles in flight, in the order they were sent.
    pub handles: Vec<Handle>,
    next_handle: u64,
}

impl Default for Oracle {
    fn default() -> Oracle {
        Oracle::new()
    }
}

/// The data a new buffer of segment `seg` starts with.
pub fn initial_data(seg: usize) -> Vec<u8> {
    (0..DATA_LEN)
        .map(|i| (seg as u8).wrapping_mul(31).wrapping_add(i as u8) ^ 0xa5)
        .collect()
}

impl Oracle {
    /// [`PROCESSES`] live processes, nothing else.
    pub fn new() -> Oracle {
        Oracle {
            procs: (0..PROCESSES).map(|_| Proc::fresh()).collect(),
            segs: Vec::new(),
            handles: Vec::new(),
            next_handle: 0,
        }
    }

    /// The live processes owning a buffer of `seg`.
    pub fn holders(&self, seg: usize) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|&p| self.procs[p].alive && self.procs[p].bufs.contains(&seg))
            .collect()
    }

    /// Whether a file_descriptor segment's memory still exists: a live process holds it
    /// or a handle on its way to a live receiver carries its descriptor (P3).
    pub fn fd_alive(&self, seg: usize) -> bool {
        !self.holders(seg).is_empty() || self.handles.iter().any(|h| h.seg == seg)
    }

    /// Live references of `seg` other than `except`'s hold: (surely, at most).
    fn live_refs(&self, seg: usize, except: Option<usize>) -> (u32, u32) {
        let s = &self.segs[seg];
        let holders = self
            .holders(seg)
            .into_iter()
            .filter(|p| Some(*p) != except)
            .count() as u32;
        let sure = holders + s.in_flight.values().sum::<u32>();
        (sure, sure + s.maybe_in_flight.values().sum::<u32>())
    }

    /// What a claim on `seg` may return (P4): `Gone` when every slot is a tombstone,
    /// `Ok` when a slot is free or a dead process's, `Full` when every other slot is a
    /// live reference.
    fn claim(&self, seg: usize) -> Allowed {
        let s = &self.segs[seg];
        let cap = s.capacity as u32;
        let (lo, hi) = self.live_refs(seg, None);
        let tombs: Vec<u32> = match s.tombs {
            Count::Known(t) => vec![t],
            Count::Unknown => (0..=cap).collect(),
        };
        let mut allowed = Allowed::default();
        if s.committed {
            return allowed.with(Outcome::Gone);
        }
        for refs in lo..=hi {
            for &t in &tombs {
                allowed = allowed.with(if t >= cap {
                    Outcome::Gone
                } else if refs + t < cap {
                    Outcome::Ok
                } else {
                    Outcome::Full
                });
            }
        }
        allowed
    }

    /// Resolves an operation against the current state, or `None` when it cannot run
    /// (acting process dead, nothing to pick).
    pub fn resolve(&self, op: &Op) -> Option<Step> {
        let live = |p: u8| Some(p as usize % PROCESSES).filter(|p| self.procs[*p].alive);
        let buf_of = |p: usize, buf: u8| {
            let n = self.procs[p].bufs.len();
            (n > 0).then(|| buf as usize % n)
        };
        let handle = |h: u8| (!self.handles.is_empty()).then(|| h as usize % self.handles.len());
        Some(match *op {
            Op::Create {
                p,
                capacity,
                crash_at,
            } => {
                let p = live(p)?;
                Step::Create {
                    p,
                    capacity: 1 + capacity as usize % MAX_CAPACITY,
                    strategy: self.procs[p].strategy,
                    crash_at,
                }
            }
            Op::SetStrategy { p, strategy } => Step::SetStrategy {
                p: live(p)?,
                strategy,
            },
            Op::Share {
                p,
                buf,
                to,
                as_bytes,
                crash_at,
            } => {
                let p = live(p)?;
                let buf = buf_of(p, buf)?;
                let to = live(to)?;
                let fs = self.segs[self.procs[p].bufs[buf]].strategy == Strategy::FileSystem;
                Step::Share {
                    p,
                    buf,
                    to,
                    via: if as_bytes && fs {
                        Via::Bytes
                    } else {
                        Via::Socket
                    },
                    crash_at,
                }
            }
            Op::Attach {
                handle: h,
                crash_at,
            } => Step::Attach {
                handle: handle(h)?,
                crash_at,
            },
            Op::DropHandle {
                handle: h,
                crash_at,
            } => Step::DropHandle {
                handle: handle(h)?,
                crash_at,
            },
            Op::Release { p, buf, crash_at } => {
                let p = live(p)?;
                Step::Release {
                    p,
                    buf: buf_of(p, buf)?,
                    crash_at,
                }
            }
            Op::Write {
                p,
                buf,
                offset,
                byte,
            } => {
                let p = live(p)?;
                Step::Write {
                    p,
                    buf: buf_of(p, buf)?,
                    offset: offset as usize % DATA_LEN,
                    byte,
                }
            }
            Op::Kill { p } => Step::Kill { p: live(p)? },
            Op::Recycle { p, buf, crash_at } => {
                let p = live(p)?;
                Step::Recycle {
                    p,
                    buf: buf_of(p, buf)?,
                    crash_at,
                }
            }
            Op::Respawn { p } => {
                let p = p as usize % PROCESSES;
                if self.procs[p].alive {
                    return None;
                }
                Step::Respawn { p }
            }
            Op::Sweep { crash_at } => Step::Sweep { crash_at },
        })
    }

    /// Whether `p`'s release of its buffer `buf` gives up its last reference to that
    /// segment (the last `Arc` in the process).
    fn last_buf(&self, p: usize, buf: usize) -> bool {
        let seg = self.procs[p].bufs[buf];
        self.procs[p].bufs.iter().filter(|s| **s == seg).count() == 1
    }

    /// The outcomes `step` may return now (P1, P4, P2: see the module docs).
    pub fn expect(&self, step: &Step) -> Allowed {
        let ok = Allowed::only(Outcome::Ok);
        let (normal, can_crash) = match *step {
            Step::Create { crash_at, .. } => (ok, crash_at.is_some()),
            Step::SetStrategy { .. }
            | Step::Write { .. }
            | Step::Kill { .. }
            | Step::Respawn { .. } => (ok, false),
            Step::Share {
                p, buf, crash_at, ..
            } => {
                let seg = self.procs[p].bufs[buf];
                match self.segs[seg].strategy {
                    // dup() has no crash point.
                    Strategy::FileDescriptor => (ok, false),
                    Strategy::FileSystem => (self.claim(seg), crash_at.is_some()),
                }
            }
            Step::Attach { handle, crash_at } => {
                let h = &self.handles[handle];
                let s = &self.segs[h.seg];
                if s.strategy == Strategy::FileDescriptor {
                    // The descriptor keeps the memory: nothing can be gone.
                    (ok, false)
                } else if self.procs[h.receiver].bufs.contains(&h.seg) {
                    // Already held here: another Arc, and the handle's reference given
                    // back; a handle of an earlier use is refused first.
                    match s.generation {
                        Count::Known(g) if g != h.generation => {
                            (Allowed::only(Outcome::Stale), false)
                        }
                        _ => (ok, crash_at.is_some()),
                    }
                } else if s.name != Name::Unlinked
                    && matches!(s.generation, Count::Known(g) if g != h.generation)
                {
                    // Recycled since it was shared: refused before taking anything (P1:
                    // never another use's data).
                    (
                        Allowed::only(Outcome::Stale).with(Outcome::Gone),
                        crash_at.is_some(),
                    )
                } else {
                    let named = match s.name {
                        Name::Named => Allowed::default(),
                        Name::Unlinked => Allowed::only(Outcome::Gone),
                        Name::Unknown => Allowed::only(Outcome::Gone).with(Outcome::Ok),
                    };
                    let exists = s.name != Name::Unlinked;
                    let held = if !exists {
                        Allowed::default()
                    } else if s.generation == Count::Unknown {
                        self.claim(h.seg).with(Outcome::Ok).with(Outcome::Stale)
                    } else if h.sender_alive {
                        // P1: a live sender's in-flight reference is still in its slot.
                        ok
                    } else {
                        self.claim(h.seg)
                    };
                    (named.union(held), exists && crash_at.is_some())
                }
            }
            Step::DropHandle { handle, crash_at } => {
                let h = &self.handles[handle];
                let s = &self.segs[h.seg];
                let fs = s.strategy == Strategy::FileSystem && s.name != Name::Unlinked;
                (ok, fs && crash_at.is_some())
            }
            Step::Release { p, buf, crash_at } => {
                let seg = self.procs[p].bufs[buf];
                let s = &self.segs[seg];
                if s.strategy == Strategy::FileDescriptor || !self.last_buf(p, buf) {
                    (ok, false)
                } else {
                    let (lo, hi) = self.live_refs(seg, Some(p));
                    let mut a = Allowed::default();
                    if hi > 0 {
                        a = a.with(Outcome::InUse);
                    }
                    if lo == 0 {
                        a = a.with(Outcome::Unlinked);
                    }
                    if s.name != Name::Named {
                        a = a.with(Outcome::AlreadyGone).with(Outcome::InUse);
                    }
                    (a, crash_at.is_some())
                }
            }
            Step::Sweep { crash_at } => {
                let any = self.segs.iter().any(|s| s.name != Name::Unlinked);
                (ok, any && crash_at.is_some())
            }
            Step::Recycle { p, buf, crash_at } => {
                let seg = self.procs[p].bufs[buf];
                if self.segs[seg].strategy == Strategy::FileDescriptor {
                    (Allowed::only(Outcome::Held), false)
                } else {
                    // Reused only when no other live process holds it and no live
                    // sender's reference is in flight (P1). A dead finalizer's word
                    // (not observed) also makes it give up.
                    let (lo, _) = self.live_refs(seg, Some(p));
                    let a = if lo > 0 {
                        Allowed::only(Outcome::Held)
                    } else {
                        Allowed::only(Outcome::Recycled).with(Outcome::Held)
                    };
                    (a, crash_at.is_some())
                }
            }
        };
        if can_crash {
            normal.with(Outcome::Killed)
        } else {
            normal
        }
    }

    /// Applies `step` with the outcome it returned (the harness passes what it saw, the
    /// reference copy [`Allowed::likeliest`]). An outcome [`Oracle::expect`] does not
    /// allow is a violation, and the state is then left as it was.
    pub fn apply(&mut self, step: &Step, outcome: Outcome) -> Result<(), Violation> {
        let allowed = self.expect(step);
        if !allowed.allows(outcome) {
            let property = match step {
                Step::Release { .. } if outcome == Outcome::Unlinked => "P1",
                Step::Release { .. } if outcome == Outcome::AlreadyGone => "P2",
                Step::Attach { .. } if outcome == Outcome::Gone => "P1",
                // An earlier use's handle that attached: another use's data.
                Step::Attach { .. } if allowed.allows(Outcome::Stale) => "P1",
                // Reused while someone still held it: its data is overwritten.
                Step::Recycle { .. } if outcome == Outcome::Recycled => "P1",
                _ => "P4",
            };
            return Err(violation(
                property,
                format!("{step:?} returned {outcome:?}; the oracle allows {allowed:?}"),
            ));
        }
        let crashed = outcome == Outcome::Killed;
        // The process a crash step kills, inside the operation or right after it (the
        // sweeper is not one of the slots).
        let victim = match *step {
            Step::Create { p, crash_at, .. }
            | Step::Share { p, crash_at, .. }
            | Step::Release { p, crash_at, .. }
            | Step::Recycle { p, crash_at, .. } => crash_at.map(|_| p),
            Step::Attach { handle, crash_at } | Step::DropHandle { handle, crash_at } => {
                crash_at.map(|_| self.handles[handle].receiver)
            }
            _ => None,
        };
        if crashed && matches!(step, Step::Create { .. }) {
            // Killed inside: it holds nothing from here on, whatever the step did. (A
            // receiver is killed once its handle is out of the list, below.)
            if let Some(v) = victim {
                self.kill(v);
            }
        }
        match *step {
            Step::Create {
                p,
                capacity,
                strategy,
                ..
            } => {
                let id = self.segs.len();
                let fs = strategy == Strategy::FileSystem;
                self.segs.push(Seg {
                    strategy,
                    capacity,
                    data: initial_data(id),
                    name: match (fs, crashed) {
                        (false, _) => Name::Unlinked,
                        (true, false) => Name::Named,
                        (true, true) => Name::Unknown,
                    },
                    in_flight: BTreeMap::new(),
                    maybe_in_flight: BTreeMap::new(),
                    tombs: Count::Known(0),
                    phantom: crashed,
                    generation: Count::Known(0),
                    abandoned: false,
                    committed: false,
                });
                if !crashed {
                    self.procs[p].bufs.push(id);
                }
            }
            Step::SetStrategy { p, strategy } => self.procs[p].strategy = strategy,
            Step::Share {
                p,
                buf,
                to,
                via,
                crash_at,
            } => {
                let seg = self.procs[p].bufs[buf];
                // A crash step's handle is never delivered: its in-flight reference, if
                // it was taken, is the dead sender's, which nobody needs to track.
                if outcome == Outcome::Ok && crash_at.is_none() {
                    if self.segs[seg].strategy == Strategy::FileSystem {
                        *self.segs[seg].in_flight.entry(p).or_default() += 1;
                    }
                    let generation = match self.segs[seg].generation {
                        Count::Known(g) => g,
                        Count::Unknown => 0,
                    };
                    self.handles.push(Handle {
                        id: self.next_handle,
                        seg,
                        sender: p,
                        sender_alive: true,
                        receiver: to,
                        via,
                        generation,
                    });
                    self.next_handle += 1;
                }
            }
            Step::Attach { handle, .. } => {
                let h = self.handles.remove(handle);
                let fs = self.segs[h.seg].strategy == Strategy::FileSystem;
                if crashed {
                    self.kill(h.receiver);
                    if fs && h.sender_alive {
                        self.take_in_flight(&h);
                        *self.segs[h.seg]
                            .maybe_in_flight
                            .entry(h.sender)
                            .or_default() += 1;
                    }
                } else if outcome == Outcome::Ok {
                    if fs && h.sender_alive {
                        self.take_in_flight(&h);
                    }
                    self.procs[h.receiver].bufs.push(h.seg);
                }
            }
            Step::DropHandle { handle, .. } => {
                let h = self.handles.remove(handle);
                let seg = h.seg;
                if crashed {
                    self.kill(h.receiver);
                }
                if self.segs[seg].strategy == Strategy::FileSystem
                    && self.segs[seg].name != Name::Unlinked
                {
                    if h.sender_alive {
                        self.take_in_flight(&h);
                        if crashed {
                            *self.segs[seg].maybe_in_flight.entry(h.sender).or_default() += 1;
                            self.finalized(seg, None, true);
                        } else {
                            self.finalized(seg, None, false);
                        }
                    } else {
                        // The dead sender's word may be in its slot still (then it is
                        // vacated and the segment finalized) or reclaimed already.
                        self.finalized(seg, None, true);
                    }
                }
            }
            Step::Release { p, buf, .. } => {
                let seg = self.procs[p].bufs[buf];
                let last = self.last_buf(p, buf);
                self.procs[p].bufs.remove(buf);
                if crashed {
                    self.kill(p);
                }
                if last && self.segs[seg].strategy == Strategy::FileSystem {
                    if crashed {
                        self.finalized(seg, None, true);
                    } else {
                        self.finalized(seg, Some(outcome), false);
                    }
                }
            }
            Step::Write {
                p,
                buf,
                offset,
                byte,
            } => {
                let seg = self.procs[p].bufs[buf];
                self.segs[seg].data[offset] = byte;
            }
            Step::Kill { p } => self.kill(p),
            Step::Recycle { p, buf, .. } => {
                let seg = self.procs[p].bufs[buf];
                let s = &mut self.segs[seg];
                match (outcome, s.generation) {
                    (Outcome::Recycled, Count::Known(g)) => {
                        s.generation = Count::Known(g + 1);
                        s.tombs = Count::Known(0);
                        s.abandoned = false;
                    }
                    // Killed inside: it may have bumped the generation, and left
                    // tombstones (observed next) and the finalizer word held.
                    (Outcome::Killed, _) => {
                        s.generation = Count::Unknown;
                        s.tombs = Count::Unknown;
                        s.abandoned = true;
                    }
                    (Outcome::Recycled, Count::Unknown) => {
                        s.generation = Count::Unknown;
                        s.tombs = Count::Unknown;
                        s.abandoned = false;
                    }
                    _ => {}
                }
            }
            Step::Respawn { p } => self.procs[p] = Proc::fresh(),
            Step::Sweep { .. } => {
                for seg in 0..self.segs.len() {
                    if self.segs[seg].strategy == Strategy::FileSystem
                        && self.segs[seg].name != Name::Unlinked
                    {
                        self.finalized(seg, None, crashed);
                    }
                }
            }
        }
        if let Some(v) = victim {
            self.kill(v);
        }
        Ok(())
    }

    /// Removes the in-flight reference handle `h` carried from its live sender's count.
    fn take_in_flight(&mut self, h: &Handle) {
        let s = &mut self.segs[h.seg];
        if let Some(n) = s.in_flight.get_mut(&h.sender) {
            *n -= 1;
            if *n == 0 {
                s.in_flight.remove(&h.sender);
            }
        }
    }

    /// What a finalize of `seg` leaves (P3, P5): unlinked when no live reference remains,
    /// else named with every tombstone rolled back. `outcome` is a release's answer
    /// (it says which happened when the oracle allowed both); `crashed`: the finalize
    /// (or the step that may have run one) was cut short, so the name (when no sure
    /// live reference remains) and the tombstones become unknown.
    fn finalized(&mut self, seg: usize, outcome: Option<Outcome>, crashed: bool) {
        let (lo, hi) = self.live_refs(seg, None);
        let s = &mut self.segs[seg];
        if crashed {
            if lo == 0 && s.name == Name::Named {
                s.name = Name::Unknown;
            }
            // A finalize beside a live holder stops before the slots (`InUse`) unless
            // a dead finalizer's word makes it take over: then it tombs slots up to
            // the live holder before rolling back, and a crash may leave some.
            if s.tombs != Count::Known(0) || lo == 0 || s.abandoned {
                s.tombs = Count::Unknown;
            }
            // It may have taken the finalizer word (and died holding it).
            s.abandoned = true;
            return;
        }
        s.abandoned = false;
        let unlinked = match outcome {
            Some(o) => o == Outcome::Unlinked,
            None if hi == 0 => true,
            None if lo > 0 => false,
            None => {
                s.name = Name::Unknown;
                s.tombs = Count::Unknown;
                return;
            }
        };
        if unlinked {
            s.name = Name::Unlinked;
            s.in_flight.clear();
            s.maybe_in_flight.clear();
        }
        s.tombs = Count::Known(0);
    }

    fn kill(&mut self, p: usize) {
        let proc = &mut self.procs[p];
        proc.alive = false;
        proc.bufs.clear();
        for s in &mut self.segs {
            s.in_flight.remove(&p);
            s.maybe_in_flight.remove(&p);
        }
        self.handles.retain(|h| h.receiver != p);
        for h in &mut self.handles {
            if h.sender == p {
                h.sender_alive = false;
            }
        }
    }

    /// Checks what the harness saw of each file_system segment (`seen[i]` for segment
    /// `i`; file_descriptor entries are ignored) against every known fact, then takes the
    /// unknown ones from it.
    pub fn observe(&mut self, seen: &[SegObservation]) -> Result<(), Violation> {
        for (seg, obs) in seen.iter().enumerate().take(self.segs.len()) {
            if self.segs[seg].strategy != Strategy::FileSystem {
                continue;
            }
            let holders = self.holders(seg);
            let (lo, _) = self.live_refs(seg, None);
            let s = &mut self.segs[seg];
            match (s.name, obs.named) {
                (Name::Named, false) if lo > 0 => {
                    return Err(violation(
                        "P1",
                        format!(
                            "segment {seg} was unlinked while live processes {holders:?} hold it and live senders {:?} have references in flight",
                            s.in_flight
                        ),
                    ));
                }
                (Name::Named, false) => {
                    return Err(violation(
                        "P3",
                        format!("segment {seg} was unlinked though no finalize ran on it"),
                    ));
                }
                (Name::Unlinked, true) => {
                    return Err(violation(
                        "P3",
                        format!("segment {seg} is still named after its last reference went"),
                    ));
                }
                (Name::Unknown, named) if named && s.phantom && lo == 0 => s.name = Name::Named,
                (Name::Unknown, named) => {
                    if !named && lo > 0 {
                        return Err(violation(
                            "P1",
                            format!(
                                "segment {seg} was unlinked by a crashed operation while live processes {holders:?} hold it"
                            ),
                        ));
                    }
                    s.name = if named { Name::Named } else { Name::Unlinked };
                }
                _ => {}
            }
            if !obs.named {
                s.in_flight.clear();
                s.maybe_in_flight.clear();
                s.tombs = Count::Known(0);
                continue;
            }
            let Some(slots) = &obs.slots else {
                // Half-created: no slots to read.
                continue;
            };
            let expected_held: BTreeMap<usize, u32> = holders.iter().map(|p| (*p, 1)).collect();
            if slots.held != expected_held {
                return Err(violation(
                    "P5",
                    format!(
                        "segment {seg}: live processes hold slots {:?}, but the processes owning buffers of it are {holders:?}",
                        slots.held
                    ),
                ));
            }
            let senders: Vec<usize> = s
                .in_flight
                .keys()
                .chain(s.maybe_in_flight.keys())
                .chain(slots.in_flight.keys())
                .copied()
                .collect();
            for p in senders {
                let sure = s.in_flight.get(&p).copied().unwrap_or(0);
                let maybe = s.maybe_in_flight.get(&p).copied().unwrap_or(0);
                let seen = slots.in_flight.get(&p).copied().unwrap_or(0);
                if seen < sure || seen > sure + maybe {
                    return Err(violation(
                        if seen < sure { "P1" } else { "P5" },
                        format!(
                            "segment {seg}: live process {p} has {seen} in-flight references in slots, the oracle expects {sure}..={}",
                            sure + maybe
                        ),
                    ));
                }
            }
            s.in_flight = slots.in_flight.clone();
            s.maybe_in_flight.clear();
            if let Count::Known(t) = s.tombs {
                if t != slots.tombs {
                    return Err(violation(
                        "P5",
                        format!(
                            "segment {seg} has {} tombstones, the oracle expects {t} (a completed finalize rolls every one back; only a crash leaves some)",
                            slots.tombs
                        ),
                    ));
                }
            }
            s.tombs = Count::Known(slots.tombs);
            if slots.committed && !s.committed {
                let sure = lo;
                if sure > 0 {
                    return Err(violation(
                        "P1",
                        format!(
                            "segment {seg} was committed to destruction while {sure} live references (holders or live senders' in flight) remain"
                        ),
                    ));
                }
            }
            s.committed = slots.committed;
            if let Count::Known(g) = s.generation {
                if g != obs.generation {
                    return Err(violation(
                        "P1",
                        format!(
                            "segment {seg} is in generation {}, the oracle expects {g} (only a recycle changes it)",
                            obs.generation
                        ),
                    ));
                }
            }
            s.generation = Count::Known(obs.generation);
        }
        Ok(())
    }
}

/// The tag bits that mark a crash step in [`Op::decode`].
const CRASH: u8 = 0x70;
/// Crash steps [`Op::decode`] reads (modulo): an operation has at most a few dozen
/// crash points, so larger steps would only mean "killed right after it".
pub const CRASH_STEPS: u8 = 64;

impl Op {
    /// Decodes one operation from the front of `bytes` (the fuzzer's input), consuming
    /// what it used; `None` when the bytes run out. Every byte string decodes to some
    /// sequence: the first byte picks the kind (low 4 bits) and whether the acting
    /// process is killed inside (bits 4 to 6 all set, then one byte for the step, modulo
    /// [`CRASH_STEPS`]: one
    /// operation in eight is a crash, so that sequences live long enough to build up
    /// references worth crashing).
    pub fn decode(bytes: &mut &[u8]) -> Option<Op> {
        let mut next = || {
            let (first, rest) = bytes.split_first()?;
            *bytes = rest;
            Some(*first)
        };
        let tag = next()?;
        let mut crash = || -> Option<Option<u8>> {
            Some(if tag & CRASH == CRASH {
                Some(next()? % CRASH_STEPS)
            } else {
                None
            })
        };
        let crash_at = crash()?;
        Some(match tag & 0x0f {
            0 | 10 => Op::Create {
                p: next()?,
                capacity: next()?,
                crash_at,
            },
            1 => Op::SetStrategy {
                p: next()?,
                strategy: if next()? & 1 == 0 {
                    Strategy::FileDescriptor
                } else {
                    Strategy::FileSystem
                },
            },
            2 | 11 | 12 => {
                let p = next()?;
                let buf = next()?;
                let to = next()?;
                Op::Share {
                    p,
                    buf,
                    to: to & 0x7f,
                    as_bytes: to & 0x80 != 0,
                    crash_at,
                }
            }
            3 | 13 => Op::Attach {
                handle: next()?,
                crash_at,
            },
            4 => Op::DropHandle {
                handle: next()?,
                crash_at,
            },
            5 | 14 => Op::Release {
                p: next()?,
                buf: next()?,
                crash_at,
            },
            6 => {
                let p = next()?;
                let buf = next()?;
                let offset = next()?;
                Op::Write {
                    p,
                    buf,
                    offset,
                    byte: next()?,
                }
            }
            7 => Op::Kill { p: next()? },
            15 => Op::Recycle {
                p: next()?,
                buf: next()?,
                crash_at,
            },
            8 => Op::Respawn { p: next()? },
            _ => Op::Sweep { crash_at },
        })
    }

    /// Decodes a whole input, at most `max` operations.
    pub fn decode_all(mut bytes: &[u8], max: usize) -> Vec<Op> {
        let mut ops = Vec::new();
        while ops.len() < max {
            match Op::decode(&mut bytes) {
                Some(op) => ops.push(op),
                None => break,
            }
        }
        ops
    }

    /// The bytes [`Op::decode`] reads back as this operation (for seed inputs).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let tag = |kind: u8, crash_at: Option<u8>, out: &mut Vec<u8>| {
            out.push(kind | if crash_at.is_some() { CRASH } else { 0 });
            out.extend(crash_at);
        };
        match *self {
            Op::Create {
                p,
                capacity,
                crash_at,
            } => {
                tag(0, crash_at, out);
                out.extend([p, capacity]);
            }
            Op::SetStrategy { p, strategy } => {
                tag(1, None, out);
                out.extend([p, u8::from(strategy == Strategy::FileSystem)]);
            }
            Op::Share {
                p,
                buf,
                to,
                as_bytes,
                crash_at,
            } => {
                tag(2, crash_at, out);
                out.extend([p, buf, (to & 0x7f) | if as_bytes { 0x80 } else { 0 }]);
            }
            Op::Attach { handle, crash_at } => {
                tag(3, crash_at, out);
                out.push(handle);
            }
            Op::DropHandle { handle, crash_at } => {
                tag(4, crash_at, out);
                out.push(handle);
            }
            Op::Release { p, buf, crash_at } => {
                tag(5, crash_at, out);
                out.extend([p, buf]);
            }
            Op::Write {
                p,
                buf,
                offset,
                byte,
            } => {
                tag(6, None, out);
                out.extend([p, buf, offset, byte]);
            }
            Op::Kill { p } => {
                tag(7, None, out);
                out.push(p);
            }
            Op::Respawn { p } => {
                tag(8, None, out);
                out.push(p);
            }
            Op::Sweep { crash_at } => tag(9, crash_at, out),
            Op::Recycle { p, buf, crash_at } => {
                tag(15, crash_at, out);
                out.extend([p, buf]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_ops_decode_back() {
        let ops = vec![
            Op::Create {
                p: 1,
                capacity: 2,
                crash_at: Some(3),
            },
            Op::SetStrategy {
                p: 0,
                strategy: Strategy::FileSystem,
            },
            Op::Share {
                p: 0,
                buf: 0,
                to: 2,
                as_bytes: true,
                crash_at: None,
            },
            Op::Attach {
                handle: 0,
                crash_at: Some(0),
            },
            Op::DropHandle {
                handle: 1,
                crash_at: None,
            },
            Op::Release {
                p: 3,
                buf: 1,
                crash_at: Some(9),
            },
            Op::Kill { p: 2 },
            Op::Respawn { p: 2 },
            Op::Sweep { crash_at: None },
        ];
        let mut bytes = Vec::new();
        for op in &ops {
            op.encode(&mut bytes);
        }
        assert_eq!(Op::decode_all(&bytes, 100), ops);
    }

    #[test]
    fn a_release_while_a_live_sender_has_a_handle_in_flight_must_keep_the_segment() {
        let mut o = Oracle::new();
        let fs = Step::SetStrategy {
            p: 0,
            strategy: Strategy::FileSystem,
        };
        o.apply(&fs, Outcome::Ok).unwrap();
        let create = o
            .resolve(&Op::Create {
                p: 0,
                capacity: 1,
                crash_at: None,
            })
            .unwrap();
        o.apply(&create, Outcome::Ok).unwrap();
        let share = o
            .resolve(&Op::Share {
                p: 0,
                buf: 0,
                to: 1,
                as_bytes: true,
                crash_at: None,
            })
            .unwrap();
        o.apply(&share, Outcome::Ok).unwrap();
        let release = Step::Release {
            p: 0,
            buf: 0,
            crash_at: None,
        };
        assert_eq!(o.expect(&release), Allowed::only(Outcome::InUse));
        assert_eq!(
            o.apply(&release, Outcome::Unlinked).unwrap_err().property,
            "P1"
        );
        o.apply(&release, Outcome::InUse).unwrap();
        let attach = Step::Attach {
            handle: 0,
            crash_at: None,
        };
        assert_eq!(o.expect(&attach), Allowed::only(Outcome::Ok));
    }

    #[test]
    fn a_full_segment_refuses_a_share_and_a_crashed_release_leaves_the_name_unknown() {
        let mut o = Oracle::new();
        o.apply(
            &Step::SetStrategy {
                p: 0,
                strategy: Strategy::FileSystem,
            },
            Outcome::Ok,
        )
        .unwrap();
        let create = Step::Create {
            p: 0,
            capacity: 1,
            strategy: Strategy::FileSystem,
            crash_at: None,
        };
        o.apply(&create, Outcome::Ok).unwrap();
        let share = Step::Share {
            p: 0,
            buf: 0,
            to: 1,
            via: Via::Bytes,
            crash_at: None,
        };
        assert_eq!(o.expect(&share), Allowed::only(Outcome::Full));
        let release = Step::Release {
            p: 0,
            buf: 0,
            crash_at: Some(2),
        };
        o.apply(&release, Outcome::Killed).unwrap();
        assert_eq!(o.segs[0].name, Name::Unknown);
        assert!(!o.procs[0].alive);
        o.observe(&[SegObservation {
            named: false,
            slots: None,
            generation: 0,
        }])
        .unwrap();
        assert_eq!(o.segs[0].name, Name::Unlinked);
    }
}
