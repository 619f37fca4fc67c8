//! Shared harness of the model-checked tests (`tests/loom_protocol.rs`,
//! `tests/shuttle_protocol.rs`): a simulated [`World`] (kernel, namespace, names planted
//! outside shmrc's reach), the protocol operations as the models' processes run them
//! through the public API (each one recording what it unlinked), and the property
//! checks both checkers assert:
//!
//! - **P1** ([`World::check_holder`], [`World::attach`]): a live holder's segment is
//!   named, exactly one of its slots holds its word, its data reads back; an attach of a
//!   handle whose sender is alive never finds the segment gone.
//! - **P2** ([`World::record_unlink`], [`World::check_foreign`]): no segment is
//!   reported unlinked twice; the planted foreign names survive everything.
//! - **P5** ([`World::check_quiescent`], [`World::check_swept`]): every slot word
//!   decodes to a state the protocol writes, owned by a process of this world; the
//!   census adds up to the capacity; no tombstone is left without a finalizer
//!   responsible for it; after a sweep, a surviving segment has neither tombstones nor a
//!   finalizer nor dead holders, and a live holder or in-flight reference keeps it.
//! - **P3** ([`World::finish`]): once every process is dead or released and a sweep ran,
//!   no name of the namespace is left and no object keeps memory.
//!
//! Nothing here names a loom or shuttle type: processes are driven by the caller's
//! threads, and the harness's own bookkeeping sits behind `std` mutexes that are never
//! held across an access to the simulated memory.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::handle::ShareHandleExt;
use shmrc::checkers::holders::{self, FREE, Slot};
use shmrc::checkers::namespace::NamespaceExt;
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimKernel, SimOs, SimStream};
use shmrc::checkers::segment::{self, HEADER_BYTES, Header};
use shmrc::checkers::sweep::{Action, sweep_with};
use shmrc::checkers::sync::Ordering;
use shmrc::checkers::transport;
use shmrc::{CreateOptions, Error, Namespace, Result, ShareHandle, ShmBuf, Strategy};

/// The user every simulated process runs as.
pub const UID: u32 = 1000;
/// Data bytes of every segment: one word, the segment's nonce (see [`payload`]).
pub const DATA_LEN: usize = 8;
/// Byte offset of the finalizer word in a header (word 12, see `segment.rs`).
const FINALIZER_OFFSET: usize = 12 * 8;

/// A buffer of a simulated process.
pub type Buf = ShmBuf<SimOs>;

/// What every segment's data holds: the low bytes of its nonce, so a holder that reads
/// anything else is looking at the wrong memory or at memory that was destroyed.
pub fn payload(buf: &Buf) -> [u8; DATA_LEN] {
    (buf.fields().nonce as u64).to_le_bytes()
}

/// `r`'s value, or `None` if the process was killed; any other error is a failure.
pub fn ok_or_killed<T>(what: &str, r: Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(Error::Killed) => None,
        Err(e) => panic!("{what}: unexpected error {e:?}"),
    }
}

/// One simulated machine and the bookkeeping of the properties checked on it.
#[derive(Clone)]
pub struct World {
    /// The simulated kernel.
    pub kernel: SimKernel,
    /// The namespace every segment of the models lives in.
    pub ns: Namespace,
    /// Names planted outside what shmrc may touch (P2).
    foreign: Vec<String>,
    /// Processes spawned through [`World::spawn`], by pid.
    procs: Arc<Mutex<Vec<u32>>>,
    /// How often each segment was reported unlinked (P2: at most once).
    unlinked: Arc<Mutex<BTreeMap<String, u32>>>,
    /// A process that only looks (P5 checks); it never holds anything.
    checker: SimOs,
    /// Segments an attach was told are gone: at rest each must be unlinked, or be
    /// destroyed with its unlink left to a sweep by a finalizer that died: its
    /// finalizer word committed (every slot below the mark a tombstone; those above it,
    /// never taken, stay free) or every slot a tombstone, and no slot held or in flight.
    gone: Arc<Mutex<Vec<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl World {
    /// A kernel seeded with `seed`, with three names planted that no shmrc operation of
    /// namespace `shmrc-conc` may touch: a torch segment, a name that starts like ours
    /// but is no segment name, and a valid segment name of another namespace.
    pub fn new(seed: u64) -> World {
        let kernel = SimKernel::new(seed);
        let ns = Namespace::new("shmrc-conc").expect("valid namespace");
        let planter = kernel.spawn(UID);
        let other = Namespace::new("shmrc-conc-other").expect("valid namespace");
        let foreign = vec![
            "torch_1000_1_1".to_owned(),
            format!("{}not-a-segment", ns.name_start(UID)),
            other.segment_name(UID, 1, planter.token(), 7),
        ];
        for name in &foreign {
            let file = planter.shm_create(name).expect("plant a foreign name");
            planter.allocate(&file, 64).expect("size a foreign name");
        }
        let checker = kernel.spawn(UID);
        World {
            kernel,
            ns,
            foreign,
            procs: Arc::new(Mutex::new(Vec::new())),
            unlinked: Arc::new(Mutex::new(BTreeMap::new())),
            checker,
            gone: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A new simulated process of [`UID`].
    pub fn spawn(&self) -> SimOs {
        let os = self.kernel.spawn(UID);
        lock(&self.procs).push(os.pid());
        os
    }

    /// Whether process `pid` is alive (not killed).
    pub fn alive(&self, pid: u32) -> bool {
        !self.kernel.is_killed(pid)
    }

    /// Options of every model segment: file_system, `capacity` slots, our namespace.
    pub fn options(&self, capacity: usize) -> CreateOptions {
        CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(self.ns.clone())
            .capacity(capacity)
    }

    /// Creates a segment as `os` and writes its [`payload`].
    pub fn create(&self, os: &SimOs, capacity: usize) -> Result<Buf> {
        let buf = ShmBuf::create_with(os, DATA_LEN, &self.options(capacity))?;
        buf.write_at(0, &payload(&buf))?;
        Ok(buf)
    }

    /// Shares `buf` as handle bytes (an in-flight reference travels with them).
    /// `Ok(None)` when every slot is taken ([`Error::HoldersFull`]).
    pub fn share(&self, buf: &Buf) -> Result<Option<Vec<u8>>> {
        match buf.share().and_then(ShareHandle::into_bytes) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(Error::HoldersFull { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Attaches handle bytes as `os`; see [`World::attach_handle`].
    pub fn attach(&self, os: &SimOs, bytes: &[u8], sender: u32) -> Result<Option<Buf>> {
        self.attach_handle(ShareHandle::from_bytes_with(os, bytes)?, sender)
    }

    /// Attaches a handle that process `sender` shared. The segment may be gone (or full)
    /// only if the sender died: a handle in flight from a live sender keeps its segment
    /// (P1). `Ok(None)` for such a legitimately lost handle.
    pub fn attach_handle(&self, handle: ShareHandle<SimOs>, sender: u32) -> Result<Option<Buf>> {
        match ShmBuf::attach(handle) {
            Ok(buf) => Ok(Some(buf)),
            Err(e @ (Error::Gone { .. } | Error::HoldersFull { .. })) => {
                // Liveness is monotone: alive now means alive all along.
                assert!(
                    !self.alive(sender),
                    "P1 violated: attaching a handle of live sender {sender} failed: {e:?}"
                );
                if let Error::Gone { segment } = e {
                    lock(&self.gone).push(segment);
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Releases `buf`, recording an unlink (P2).
    pub fn release(&self, buf: Buf) -> Result<()> {
        let name = buf.name().map(str::to_owned);
        if let (Some(fin), Some(name)) = (buf.release()?, name) {
            if fin.outcome == holders::Outcome::Unlinked {
                self.record_unlink(&name);
            }
        }
        Ok(())
    }

    /// Sweeps the namespace as `os`, recording what it unlinked (P2). A sweep may skip
    /// nothing (no segment of these models is damaged) unless its process was killed
    /// part-way: the pass then goes on, every call failing without effect, and the
    /// sweep counts as killed ([`Error::Killed`]) once what it did unlink is recorded.
    pub fn sweep(&self, os: &SimOs) -> Result<()> {
        let report = sweep_with(os, &self.ns, false)?;
        let killed = self.kernel.is_killed(os.pid());
        for seg in report.segments {
            match seg.action {
                Action::Unlinked | Action::RemovedHalfCreated => self.record_unlink(&seg.name),
                Action::Skipped(Error::Killed) if killed => {}
                Action::Skipped(e) => panic!("the sweep skipped {}: {e:?}", seg.name),
                Action::Kept | Action::BeingCreated | Action::Vanished => {}
            }
        }
        if killed {
            return Err(Error::Killed);
        }
        Ok(())
    }

    /// P2: `name` is a segment of our namespace and was not unlinked before.
    pub fn record_unlink(&self, name: &str) {
        assert!(
            self.ns.parse(name, UID).is_ok(),
            "P2 violated: unlinked {name}, which is not a segment of {:?}",
            self.ns.prefix()
        );
        let mut unlinked = lock(&self.unlinked);
        let count = unlinked.entry(name.to_owned()).or_insert(0);
        *count += 1;
        assert_eq!(*count, 1, "P2 violated: {name} was unlinked twice");
    }

    /// How many segments were reported unlinked.
    pub fn unlinks(&self) -> usize {
        lock(&self.unlinked).len()
    }

    /// P2: every planted foreign name is still there.
    pub fn check_foreign(&self) {
        let names = self.kernel.names();
        for name in &self.foreign {
            assert!(
                names.contains(name),
                "P2 violated: foreign name {name} was removed"
            );
        }
    }

    /// The names of our namespace's segments.
    pub fn segments(&self) -> Vec<String> {
        let start = self.ns.name_start(UID);
        self.kernel
            .names()
            .into_iter()
            .filter(|n| n.starts_with(&start) && self.ns.parse(n, UID).is_ok())
            .collect()
    }

    /// The word at byte `offset` of segment `name` (`None` once the name is gone).
    fn peek_word(&self, name: &str, offset: usize) -> Option<u64> {
        let bytes = self.kernel.peek(name, offset, 8)?;
        Some(u64::from_ne_bytes(bytes.try_into().ok()?))
    }

    /// What is wrong with `buf` as a holding of `os`, if anything.
    fn holder_violation(&self, os: &SimOs, buf: &Buf) -> Option<String> {
        let name = buf.name()?;
        if !self.kernel.names().iter().any(|n| n == name) {
            return Some(format!("its segment {name} was unlinked"));
        }
        let word = holders::held_word(os.token());
        let mut mine = 0;
        for i in 0..buf.fields().layout.capacity {
            match self.peek_word(name, HEADER_BYTES + 8 * i) {
                Some(w) if w == word => mine += 1,
                Some(_) => {}
                None => return Some(format!("its segment {name} was unlinked")),
            }
        }
        if mine != 1 {
            return Some(format!("{mine} slots of {name} hold its word"));
        }
        let mut out = [0; DATA_LEN];
        buf.read_at(0, &mut out).expect("read a held buffer");
        (out != payload(buf)).then(|| format!("its data in {name} changed: {out:?}"))
    }

    /// P1: if `os` is alive, its holding `buf` is intact. A violation seen while the
    /// process is still alive afterwards happened while it was alive.
    pub fn check_holder(&self, os: &SimOs, buf: &Buf) {
        if let Some(why) = self.holder_violation(os, buf) {
            assert!(
                !self.alive(os.pid()),
                "P1 violated for live process {}: {why}",
                os.pid()
            );
        }
    }

    /// P5 at any moment: every slot word of `buf`'s segment (while it is named) is one
    /// the protocol writes (one word is read atomically; no other state is compared).
    pub fn check_slot_words(&self, buf: &Buf) {
        let Some(name) = buf.name() else {
            return;
        };
        for i in 0..buf.fields().layout.capacity {
            if let Some(word) = self.peek_word(name, HEADER_BYTES + 8 * i) {
                assert!(
                    !matches!(Slot::decode(word), Slot::Garbage(_)),
                    "P5 violated: slot {i} of {name} holds garbage {word:x}"
                );
            }
        }
    }

    /// The slot words, finalizer word and census of segment `name`, read by the checker;
    /// `None` if it is half-created (its creator must then be dead) or gone.
    fn read_segment(&self, name: &str) -> Option<(Vec<u64>, u64, holders::Census)> {
        let opened = match segment::open_named(&self.checker, &self.ns, name, self.checker.uid()) {
            Ok(opened) => opened,
            Err(Error::HalfCreated { .. }) => {
                let creator = self.ns.parse(name, UID).expect("our name").creator;
                assert!(
                    !self.checker.is_alive(creator),
                    "{name} is half-created at rest, yet its creator lives"
                );
                return None;
            }
            Err(Error::Gone { .. }) => return None,
            Err(e) => panic!("P5 violated: {name} cannot be opened: {e:?}"),
        };
        let cap = opened.fields.layout.capacity;
        let h = Header::of(&opened.map, cap)
            .expect("slots inside the mapping")
            .holders();
        let words: Vec<u64> = (0..cap).map(|i| h.slot_word(i).unwrap_or(0)).collect();
        let finalizer = self.peek_word(name, FINALIZER_OFFSET).unwrap_or(FREE);
        let census = holders::census(&self.checker, &h);
        Some((words, finalizer, census))
    }

    /// P5 at rest (no process is inside an operation): for every segment, every slot
    /// word is one the protocol writes, for a process of this world; a live process
    /// holds at most one slot; the census adds up; the finalizer word is free or a dead
    /// process's (a live finalizer never stops with it held), and tombstones exist only
    /// where a (dead) finalizer left them or where every slot is one (P2's unlink
    /// pending); with the finalizer word free, only a dead finalizer's (one taken over
    /// while it lived, killed before it rolled them back). Also P2's foreign names.
    pub fn check_quiescent(&self) {
        self.check_foreign();
        for name in lock(&self.gone).iter() {
            if let Some((words, finalizer, _)) = self.read_segment(name) {
                let all_tombs = words.iter().all(|&w| holders::is_tomb(w));
                let unheld = words.iter().all(|&w| w == FREE || holders::is_tomb(w));
                assert!(
                    (holders::is_committed(finalizer) || all_tombs) && unheld,
                    "P1 violated: an attach of {name} was told it is gone, but it lives: \
                     slots {words:x?}, finalizer {finalizer:x}"
                );
            }
        }
        let procs = lock(&self.procs).clone();
        for name in self.segments() {
            let Some((words, finalizer, census)) = self.read_segment(&name) else {
                continue;
            };
            let what = format!("{name}: slots {words:x?}, finalizer {finalizer:x}");
            let mut live_held = BTreeMap::new();
            for &w in &words {
                match Slot::decode(w) {
                    Slot::Free | Slot::Tomb => {}
                    Slot::Held(t) | Slot::InFlight(t) => {
                        assert!(
                            procs.contains(&t.pid()),
                            "P5 violated: a slot names unknown process {}: {what}",
                            t.pid()
                        );
                        if matches!(Slot::decode(w), Slot::Held(_)) && self.alive(t.pid()) {
                            *live_held.entry(t.pid()).or_insert(0) += 1;
                        }
                    }
                    Slot::Garbage(g) => panic!("P5 violated: garbage word {g:x}: {what}"),
                }
            }
            assert!(
                live_held.values().all(|&n| n == 1),
                "P5 violated: a live process holds two slots: {what}"
            );
            let total = census.free + census.tomb + census.live + census.in_flight + census.dead;
            assert_eq!(
                total as usize,
                words.len(),
                "P5 violated: census {census:?} does not add up: {what}"
            );
            assert!(
                !census.finalizing,
                "P5 violated: a live finalizer at rest: {what}"
            );
            let tombs = words.iter().filter(|&&w| holders::is_tomb(w)).count();
            // With no finalizer word taken, a tombstone may stay only if its finalizer
            // died (taken over while it lived, then killed before it rolled it back):
            // the next finalize that sees it takes the word to roll it back.
            let abandoned = words.iter().all(|&w| {
                !holders::is_tomb(w) || holders::tomb_owner(w).is_none_or(|t| !self.alive(t.pid()))
            });
            assert!(
                tombs == 0 || tombs == words.len() || finalizer != FREE || abandoned,
                "P5 violated: tombstones left with no finalizer to roll them back: {what}"
            );
        }
    }

    /// P5 after a sweep at rest: a segment that survives it has no tombstone, no
    /// finalizer, no dead holder, and someone live holds it or has it in flight (else
    /// the sweep leaked it: P3).
    pub fn check_swept(&self) {
        self.check_quiescent();
        for name in self.segments() {
            let Some((words, finalizer, census)) = self.read_segment(&name) else {
                panic!("P3 violated: a sweep left {name} half-created");
            };
            let what = format!("{name}: slots {words:x?}, finalizer {finalizer:x}, {census:?}");
            assert!(
                census.tomb == 0 && finalizer == FREE && census.dead == 0,
                "P5 violated: a sweep left tombstones, a finalizer or dead holders: {what}"
            );
            assert!(
                census.live + census.in_flight > 0,
                "P3 violated: a sweep kept a segment nobody live holds: {what}"
            );
        }
    }

    /// Every segment's slot words, finalizer word and census, for failure messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for name in self.segments() {
            let state = self.read_segment(&name);
            out += &format!("{name}: {state:x?}; ");
        }
        out
    }

    /// The stage of the recycling models: P creates a segment and shares it to Q, who
    /// attaches and releases; the handle's bytes are kept (a stale copy in waiting once
    /// P recycles). Returns P, P's buffer and the kept bytes.
    pub fn recycle_setup(&self) -> (SimOs, Buf, Vec<u8>) {
        let (p, q) = (self.spawn(), self.spawn());
        let buf = self.create(&p, 3).unwrap();
        let bytes = self.share(&buf).unwrap().unwrap();
        let at_q = self.attach(&q, &bytes, p.pid()).unwrap().unwrap();
        self.release(at_q).unwrap();
        (p, buf, bytes)
    }

    /// Attaches kept (old) handle bytes as `os`: `Some` holding the segment, `None` when
    /// refused (`Stale`; `Gone` or `HoldersFull` only once P is dead, or while a
    /// recycle's tombstones stood) or killed.
    pub fn attach_old(&self, os: &SimOs, bytes: &[u8]) -> Option<Buf> {
        let handle = ok_or_killed(
            "the old handle's decode",
            ShareHandle::from_bytes_with(os, bytes),
        )?;
        match ShmBuf::attach(handle) {
            Ok(buf) => Some(buf),
            Err(Error::Stale { .. } | Error::Gone { .. } | Error::HoldersFull { .. }) => None,
            r => ok_or_killed("the old handle's attach", r.map(|_| ())).and(None),
        }
    }

    /// P1 for recycling: a recycle that reused the segment and an attach of the old
    /// handle that ended holding it (its process alive, so its slot held all along) are
    /// never both; what the attach holds is generation 0, data intact; a reuse shows in
    /// the header.
    pub fn check_recycle(&self, reused: Option<bool>, b: &SimOs, attached: Option<&Buf>) {
        if let Some(buf) = attached {
            assert_eq!(buf.generation(), 0, "the old handle attached another use");
            self.check_holder(b, buf);
            assert!(
                !(reused == Some(true) && self.alive(b.pid())),
                "P1 violated: the segment was recycled while live process {} held it through an old handle: {}",
                b.pid(),
                self.describe()
            );
        }
    }

    /// The stage of the memfd-pool models: P creates a memfd with holder slots (as a
    /// file_descriptor `ShmPool` does, `ShmBuf::create_recyclable`), writes its
    /// [`payload`] and sends a handle of it to Q over a simulated Unix stream. Returns
    /// P, P's buffer, Q and Q's end of the stream, where the handle waits (in flight:
    /// its slot holds P's in-flight word).
    pub fn memfd_pool_setup(&self) -> (SimOs, Buf, SimOs, SimStream) {
        let (p, q) = (self.spawn(), self.spawn());
        let options = CreateOptions::new()
            .strategy(Strategy::FileDescriptor)
            .capacity(3);
        let buf = ShmBuf::create_recyclable(&p, DATA_LEN, &options).unwrap();
        buf.write_at(0, &payload(&buf)).unwrap();
        let (tx, rx) = self.kernel.stream_pair(&p, &q);
        transport::send_with(&p, &tx, b"", vec![buf.share().unwrap()]).unwrap();
        (p, buf, q, rx)
    }

    /// Q's side of the memfd-pool models: receives the handle P sent and attaches it
    /// (a live sender's handle always attaches: P1), reads the payload (P1: while Q
    /// holds the memfd nobody reuses it), and releases it. Returns whether Q's attach
    /// returned (`false`: Q was killed before, and the handle may be lost with it).
    pub fn memfd_consume(&self, q: &SimOs, rx: &SimStream, sender: u32) -> bool {
        let Some(mut message) = ok_or_killed("Q's recv", transport::recv_with(q, rx)) else {
            return false;
        };
        let handle = message.handles.pop().expect("one handle");
        let buf = match self.attach_handle(handle, sender) {
            Err(e @ Error::Stale { .. }) => panic!(
                "P1 violated: Q's attach of the handle P just sent (P {}) was refused as {e:?}: the memfd was reused while its handle was in flight",
                if self.alive(sender) { "alive" } else { "dead" }
            ),
            r => r.transpose(),
        };
        let Some(buf) = buf else {
            return false;
        };
        let Some(buf) = ok_or_killed("Q's attach", buf) else {
            return false;
        };
        assert_eq!(buf.generation(), 0, "Q attached another use");
        let mut out = [0; DATA_LEN];
        if ok_or_killed("Q's read", buf.read_at(0, &mut out)).is_some() {
            assert!(
                out == payload(&buf) || !self.alive(q.pid()),
                "P1 violated: live Q holds the memfd, yet its data is another use's: {out:?}"
            );
        }
        ok_or_killed("Q's release", buf.release());
        true
    }

    /// P's side: one recycle; if it reused the memfd, writes the next use's data (the
    /// payload's complement, which Q would read if the reuse came while Q held it).
    /// `None` if P was killed.
    pub fn memfd_recycle(&self, buf: &Buf) -> Option<bool> {
        let reused = ok_or_killed("P's recycle", buf.recycle())?;
        if reused {
            let next = payload(buf).map(|b| !b);
            ok_or_killed("P's write", buf.write_at(0, &next))?;
        }
        Some(reused)
    }

    /// The end of a memfd-pool model: P3 for a memfd pool. Once Q has released or
    /// died, a live P's recycle reuses the memfd: no slot is left that blocks it (a
    /// dead holder's is reclaimed on the way). One exception: Q killed before its
    /// attach returned (`attached` false) may have lost the handle unreceived or
    /// untaken, whose in-flight reference then lives as long as P does (no process
    /// can give it back; a pool gives such a buffer back at its idle timeout): the
    /// recycle may then find exactly that, P's slot and one in-flight word. Then,
    /// with every value dropped, the common end ([`World::finish`]: no name was ever
    /// made, no object keeps memory).
    pub fn memfd_finish(&self, p: &SimOs, buf_p: Buf, attached: bool) {
        if self.alive(p.pid()) {
            let reused = ok_or_killed("P's last recycle", buf_p.recycle());
            let census = buf_p.census().expect("a pooled memfd has slots");
            let lost_in_flight = !attached
                && census.live == 1
                && census.in_flight == 1
                && census.dead == 0
                && census.tomb == 0;
            assert!(
                reused == Some(true) || !self.alive(p.pid()) || lost_in_flight,
                "P3 violated: Q is done, yet live P cannot reuse its memfd: {census:?}"
            );
        }
        drop(buf_p);
        self.finish(vec![]);
    }

    /// The stalled-finalizer scenario's start: C creates a segment of 2 slots, shares a
    /// handle (returned, with C's pid) and is killed, so the segment is held by no live
    /// process; then a sweeper F opens it and runs `steps` steps of its finalize
    /// ([`Stalled`]) and stops there, alive; then R sweeps [`Finalize::PATIENCE`] − 1
    /// times, each finding F at work (if F holds the finalizer word by then) and asking
    /// it to run again, so that R's next finalize takes F over. Returns F, R, the handle
    /// and its sender, and whether the takeover is armed (F holds the word and was asked
    /// the bound less one times).
    ///
    /// [`Finalize::PATIENCE`]: holders::Finalize::PATIENCE
    pub fn stalled_setup(&self, steps: u64) -> (Stalled, SimOs, Vec<u8>, u32, bool) {
        let c = self.spawn();
        let buf_c = self.create(&c, 2).unwrap();
        let bytes = self.share(&buf_c).unwrap().unwrap();
        self.kernel.kill(c.pid());
        drop(buf_c);
        let name = self.segments().pop().expect("the segment C created");
        let f = Stalled::start(self, self.spawn(), &name, steps);
        let r = self.spawn();
        for _ in 1..holders::Finalize::PATIENCE {
            self.sweep(&r).expect("R is not killed");
        }
        let armed = self
            .read_segment(&name)
            .is_some_and(|(_, finalizer, census)| {
                finalizer == holders::held_word(f.os.token())
                    && census.deferrals == holders::Finalize::PATIENCE - 1
            });
        (f, r, bytes, c.pid(), armed)
    }

    /// Kills every process of this world.
    pub fn kill_all(&self) {
        for pid in lock(&self.procs).clone() {
            self.kernel.kill(pid);
        }
    }

    /// The end of every model, after its processes stopped: P5 at rest, a sweep by a
    /// fresh process, P5 after it, P1 for every `survivor` (a live process and what it
    /// still holds), the survivors' releases, then P3: once everybody is dead and a last
    /// sweep ran, only the foreign names are left, and once the processes' values are
    /// gone and the foreign names removed, no object keeps memory.
    pub fn finish(&self, survivors: Vec<(SimOs, Buf)>) {
        self.check_quiescent();
        self.sweep(&self.spawn())
            .expect("a fresh sweeper is not killed");
        self.check_swept();
        for (os, buf) in &survivors {
            self.check_holder(os, buf);
        }
        for (_, buf) in survivors {
            // A survivor doomed at a later crash point may die in its release.
            ok_or_killed("a survivor's release", self.release(buf));
        }
        self.check_quiescent();
        self.kill_all();
        self.sweep(&self.kernel.spawn(UID)).expect("the last sweep");
        assert_eq!(
            self.segments(),
            Vec::<String>::new(),
            "P3 violated: everybody is dead and swept, yet names are left"
        );
        self.check_foreign();
        let remover = self.kernel.spawn(UID);
        for name in &self.foreign {
            remover.shm_unlink(name).expect("remove a planted name");
        }
        assert_eq!(
            self.kernel.objects_alive(),
            0,
            "P3 violated: objects keep memory after every name is gone"
        );
    }
}

/// A finalizer that stops part-way while it lives (SIGSTOP, a tracer, a frozen cgroup),
/// for as long as a scenario likes, then goes on: a sweeper's finalize of one segment,
/// production's own [`holders::Finalize`] stepped by hand, so that it stands still
/// between two of its shared steps while other processes run.
pub struct Stalled {
    /// The finalizer's process.
    pub os: SimOs,
    name: String,
    opened: segment::Opened<SimOs>,
    fin: holders::Finalize,
    /// Whether it had not ended when it stopped.
    pub stopped_part_way: bool,
}

impl Stalled {
    /// Opens segment `name` as `os` and runs `steps` steps of a sweep's finalize.
    pub fn start(w: &World, os: SimOs, name: &str, steps: u64) -> Stalled {
        let opened = segment::open_named(&os, &w.ns, name, UID).expect("open the segment");
        let h = Header::of(&opened.map, opened.fields.layout.capacity)
            .expect("slots inside the mapping")
            .holders();
        let fin = holders::Finalize::new(holders::Reclaim::All, &h);
        let mut stalled = Stalled {
            os,
            name: name.to_owned(),
            opened,
            fin,
            stopped_part_way: true,
        };
        for _ in 0..steps {
            if stalled.step(w) {
                stalled.stopped_part_way = false;
                break;
            }
        }
        stalled
    }

    /// One step; `true` once the finalize ended (an unlink recorded for P2).
    fn step(&mut self, w: &World) -> bool {
        let h = Header::of(&self.opened.map, self.opened.fields.layout.capacity)
            .expect("slots inside the mapping")
            .holders();
        match self.fin.step(&self.os, &h, &self.name) {
            std::task::Poll::Pending => false,
            std::task::Poll::Ready(done) => {
                let done = done.expect("a finalize of a live process does not fail");
                if done.outcome == holders::Outcome::Unlinked {
                    w.record_unlink(&self.name);
                }
                true
            }
        }
    }

    /// Runs one more step; `true` once the finalize ended.
    pub fn step_once(&mut self, w: &World) -> bool {
        self.step(w)
    }

    /// Where it stands: production's finalize as `Debug` writes it, its position among
    /// the fields (`at: TombCas { index: 1, .. }`, `at: RollbackLoad { index: 0 }`, …).
    pub fn position(&self) -> String {
        format!("{:?}", self.fin)
    }

    /// Goes on from where it stopped to the end of its finalize.
    pub fn resume(mut self, w: &World) {
        for _ in 0..100_000 {
            if self.step(w) {
                return;
            }
        }
        panic!("P5 violated: a resumed finalize never ends");
    }
}

/// Claims racing a finalize over the holder words alone (issue 34 item 2: the mark),
/// with production's `holders::{claim, release, finalize}` on one segment's words of
/// [`MarkRace::SLOTS`] slots: the first process P holds slot 0 (the mark 1, as a
/// creator leaves it) and releases it; H claims a slot and releases it; B claims a slot
/// and keeps it. A claim above the slots P's finalize turns must raise the mark first,
/// and the finalize re-read it after sealing the finalizer word: the plants
/// `claim_above_mark` and `finalize_no_mark_reread` each let P commit while B holds a
/// slot above the ones it turned (P's reads of the mark before H's raise, H's claim and
/// release in between, B's claim past H's slot).
pub struct MarkRace {
    slots: Vec<shmrc::checkers::sync::AtomicU64>,
    finalizer: shmrc::checkers::sync::AtomicU64,
    pending: shmrc::checkers::sync::AtomicU64,
    mark: shmrc::checkers::sync::AtomicU64,
}

impl MarkRace {
    /// Slots of the segment: three above the slot a finalize starting alone turns.
    pub const SLOTS: usize = 4;
    /// The name the finalizes unlink (none exists: a commit then ends `AlreadyGone`).
    const NAME: &'static str = "shmrc-conc-mark-race";

    /// The words with `first`'s reference in slot 0 and the mark at 1.
    pub fn new(first: &SimOs) -> MarkRace {
        use shmrc::checkers::sync::AtomicU64;
        let slots: Vec<AtomicU64> = (0..Self::SLOTS).map(|_| AtomicU64::new(FREE)).collect();
        slots[0].store(holders::held_word(first.token()), Ordering::SeqCst);
        MarkRace {
            slots,
            finalizer: AtomicU64::new(FREE),
            pending: AtomicU64::new(0),
            mark: AtomicU64::new(1),
        }
    }

    fn holders(&self) -> holders::Holders<'_> {
        holders::Holders::new(&self.slots, &self.finalizer, &self.pending).with_mark(&self.mark)
    }

    /// P: releases its slot 0 (vacate, then finalize).
    pub fn release_first(&self, os: &SimOs) {
        let word = holders::held_word(os.token());
        holders::release(os, &self.holders(), 0, word, Self::NAME).expect("P's release");
    }

    /// A claim of a slot for `os`'s held word: the slot, or `None` (gone, or full).
    pub fn claim(&self, os: &SimOs) -> Option<usize> {
        let word = holders::held_word(os.token());
        holders::claim(os, &self.holders(), word)
            .expect("a claim with nobody killed")
            .ok()
    }

    /// H: claims a slot and, if it got one, releases it.
    pub fn claim_and_release(&self, os: &SimOs) {
        if let Some(index) = self.claim(os) {
            let word = holders::held_word(os.token());
            holders::release(os, &self.holders(), index, word, Self::NAME).expect("H's release");
        }
    }

    /// At rest (every thread joined, nobody killed): B, if its claim got a slot, holds
    /// a segment never committed to destruction, its word in that slot (P1); every
    /// taken slot is below the mark; a segment not committed has no tombstone and no
    /// finalizer word (P5). With `releases_alone`, also: a segment B does not hold is
    /// committed (P3 while processes live; it rests on the pending handshake, a store
    /// then a load of two words on each side, which loom's `SeqCst`, taken for
    /// `AcqRel`, does not order: not under loom).
    pub fn check(&self, b: &SimOs, b_slot: Option<usize>, releases_alone: bool) {
        let load = |w: &shmrc::checkers::sync::AtomicU64| w.load(Ordering::SeqCst);
        let words: Vec<u64> = self.slots.iter().map(load).collect();
        let finalizer = load(&self.finalizer);
        let committed = holders::is_committed(finalizer);
        let mark = load(&self.mark);
        for (i, &w) in words.iter().enumerate() {
            assert!(
                w == FREE || (i as u64) < mark,
                "the mark does not cover a taken slot: slot {i} at or above the mark \
                 {mark}, slots {words:x?}"
            );
        }
        if let Some(j) = b_slot {
            assert!(
                !committed,
                "P1 violated: B holds slot {j} of a segment committed to destruction: \
                 slots {words:x?}, mark {mark}"
            );
            assert_eq!(
                words[j],
                holders::held_word(b.token()),
                "P1 violated: B's slot {j} lost its word: slots {words:x?}"
            );
        }
        if !committed {
            assert_eq!(
                finalizer, FREE,
                "P5: a finalizer word left at rest: {finalizer:x}"
            );
            for &w in &words {
                assert!(
                    !holders::is_tomb(w),
                    "P5: a tombstone left at rest: slots {words:x?}"
                );
            }
            assert!(
                !releases_alone || b_slot.is_some(),
                "P3 violated: nobody holds the segment and nobody died, yet it is not \
                 committed: slots {words:x?}, mark {mark}"
            );
        }
    }
}
