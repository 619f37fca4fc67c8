//! The holder protocol under shuttle: larger cases than loom's. Eight simulated
//! processes (shuttle threads running production's create / share / attach / release /
//! sweep on the simulated kernel) each run dozens of operations drawn from shuttle's
//! random generator: create, share to another process (handle bytes over a channel, or
//! a handle over a simulated Unix stream with `transport`), attach, drop a handle
//! unattached, release, sweep, and kill another process at its next crash point or a
//! later one; some processes are also doomed from the start to die at a random crash
//! point. So finalizers (releases, sweeps, dropped handles) run concurrently, die
//! half-way and are taken over. Random and PCT schedules, many iterations.
//!
//! Checked: P1 after every operation of a process (its holdings intact; a live
//! sender's handle always attaches), P2 at every unlink and for the planted foreign
//! names, slot words valid during the run, P5 at rest and after a sweep, P3 once every
//! process is dead and a last sweep ran. A second scenario has no kill: concurrent
//! releases alone must unlink (shuttle's atomics are sequentially consistent, unlike
//! loom's). Another stops a finalizer, alive, at a random step, has a rival take it
//! over, and resumes it.
//!
//! Run: `cargo test --release --features shuttle --test shuttle_protocol -- --nocapture`
//! (`SHMRC_SHUTTLE_ITERATIONS`, `SHMRC_SHUTTLE_PCT_ITERATIONS` raise the counts).
//!
//! # Replaying a failure
//! A failing iteration prints `failing schedule: "…"` (a hex string wrapped over
//! several lines). Replay it, deterministically (the random choices are part of the
//! schedule), with
//! `SHMRC_SHUTTLE_SCENARIO=<scenario> SHMRC_SHUTTLE_REPLAY=<schedule, or a file holding
//! it> cargo test --release --features shuttle --test shuttle_protocol -- --ignored
//! replay_a_failing_schedule --nocapture`; every test prints its scenario's name.
#![cfg(shmrc_shuttle)]

mod concurrency;

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use concurrency::{Buf, MarkRace, Stalled, World, ok_or_killed};
use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::handle::ShareHandleExt;
use shmrc::checkers::holders;
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimOs, SimStream};
use shmrc::checkers::segment::HEADER_BYTES;
use shmrc::checkers::sync::process::{AtomicU64, Ordering::Relaxed};
use shmrc::checkers::transport;
use shmrc::{Error, Result};
use shuttle::rand::{Rng, thread_rng};
use shuttle::sync::mpsc::{Receiver, Sender, channel};

/// Processes of the random scenario.
const PROCESSES: usize = 8;
/// Random-scheduler iterations per scenario unless `SHMRC_SHUTTLE_ITERATIONS` says.
const RANDOM_ITERATIONS: usize = 20_000;
/// PCT iterations per scenario unless `SHMRC_SHUTTLE_PCT_ITERATIONS` says.
const PCT_ITERATIONS: usize = 20_000;
/// The live scenario runs this fraction of the iterations: each of its iterations
/// runs every process to its end, about twice a `random_ops` iteration's work.
const LIVE_SHARE: usize = 40;
/// PCT's bug depth (preemptions it places).
const PCT_DEPTH: usize = 3;

fn iterations(var: &str, default: usize) -> usize {
    std::env::var(var).map_or(default, |v| v.parse().expect("a number of iterations"))
}

/// Handle bytes and who sent them.
struct Letter {
    bytes: Vec<u8>,
    sender: u32,
}

/// What one process of the random scenario works with.
struct Process {
    w: World,
    os: SimOs,
    mail: Receiver<Letter>,
    post: Vec<(u32, Sender<Letter>)>,
    to_next: SimStream,
    from_prev: (SimStream, u32),
    held: Vec<Buf>,
    /// Whether this process kills others (the random scenario) or nobody dies (the
    /// live one).
    kills: bool,
    /// Handles this process sent (counted before the share).
    sent: u64,
    /// The segments it shared, with their slot counts: the only ones where its
    /// in-flight words can be.
    shared: Vec<(String, usize)>,
    /// The in-flight bound's bookkeeping, shared by the iteration's processes.
    in_flight: Arc<InFlight>,
}

/// What the in-flight bound is checked against, shared by one iteration's processes:
/// how many handles of each sender were consumed (attached, or dropped and so given
/// back; counted by the receiver after it is done).
#[derive(Default)]
struct InFlight {
    consumed: Mutex<HashMap<u32, u64>>,
}

impl InFlight {
    fn consumed(&self, sender: u32) -> u64 {
        lock(&self.consumed).get(&sender).copied().unwrap_or(0)
    }

    /// A handle of `sender` was taken over or given back.
    fn consume(&self, sender: u32) {
        *lock(&self.consumed).entry(sender).or_insert(0) += 1;
    }
}

/// Adds `buf`'s segment to `shared` (see [`Process::shared`]) unless it is there.
fn note_shared(shared: &mut Vec<(String, usize)>, buf: &Buf) {
    let name = buf.name().expect("a file_system segment");
    if !shared.iter().any(|(n, _)| n == name) {
        shared.push((name.to_owned(), buf.fields().layout.capacity));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A process's operation ended without its process being killed.
type Step = Result<()>;

impl Process {
    /// Runs `ops` random operations, checking P1 and the in-flight bound after each;
    /// `false` if the process was killed.
    fn operate(&mut self, ops: usize, stats: &Stats) -> bool {
        for _ in 0..ops {
            let result = self.step(stats);
            if let Err(Error::Killed) = result {
                stats.killed.fetch_add(1, Relaxed);
                return false;
            }
            if let Err(e) = result {
                panic!("process {}: unexpected error {e:?}", self.os.pid());
            }
            for buf in &self.held {
                self.w.check_holder(&self.os, buf);
                self.w.check_slot_words(buf);
            }
            self.check_in_flight_bound();
        }
        true
    }

    /// P3's in-flight bound, after each of this process's operations: the slots of the
    /// segments it shared hold no more of its in-flight words than the handles it sent
    /// that were not consumed yet. Read in this order (consumed, the slots, sent: only this
    /// process sends its handles), a handle consumed while the slots are read is still
    /// counted as in flight, so the bound is never too tight.
    fn check_in_flight_bound(&self) {
        let pid = self.os.pid();
        let consumed = self.in_flight.consumed(pid);
        let word = holders::in_flight_word(self.os.token());
        let mut words = 0;
        for (name, capacity) in &self.shared {
            for i in 0..*capacity {
                let Some(bytes) = self.w.kernel.peek(name, HEADER_BYTES + 8 * i, 8) else {
                    break;
                };
                words += u64::from(bytes.try_into().map(u64::from_ne_bytes) == Ok(word));
            }
        }
        let outstanding = self.sent.saturating_sub(consumed);
        assert!(
            words <= outstanding || !self.w.alive(pid),
            "P3 violated (in-flight bound): live process {pid} has {words} in-flight references in the slots, but only {outstanding} of the handles it sent are still in flight: {}",
            self.w.describe()
        );
    }

    /// Runs `ops` random operations (see [`Process::operate`]), then releases a random
    /// part of what it holds; returns the rest (empty if the process was killed).
    fn run(mut self, ops: usize, stats: &Stats) -> Vec<(SimOs, Buf)> {
        if !self.operate(ops, stats) {
            return Vec::new();
        }
        let mut kept = Vec::new();
        for buf in std::mem::take(&mut self.held) {
            if thread_rng().gen_bool(0.5) {
                kept.push(buf);
            } else if ok_or_killed("a last release", self.w.release(buf)).is_none() {
                return Vec::new();
            }
        }
        kept.into_iter().map(|b| (self.os.clone(), b)).collect()
    }

    /// Nobody dies: runs `ops` random operations, then releases everything it holds;
    /// returns itself, for its mailbox and stream to be emptied once every process is
    /// done.
    fn run_live(mut self, ops: usize, stats: &Stats) -> Process {
        assert!(
            self.operate(ops, stats),
            "a process of the live scenario was killed"
        );
        for buf in std::mem::take(&mut self.held) {
            self.w.release(buf).expect("nobody is killed");
        }
        self
    }

    /// Gives back every handle still addressed to this process (letters and stream
    /// messages), unattached: each drop vacates its in-flight reference and finalizes.
    fn drop_mail(&self) {
        while let Ok(letter) = self.mail.try_recv() {
            drop(
                shmrc::ShareHandle::from_bytes_with(&self.os, &letter.bytes).expect("handle bytes"),
            );
            self.in_flight.consume(letter.sender);
        }
        loop {
            match transport::recv_with(&self.os, &self.from_prev.0) {
                Ok(message) => {
                    let handles = message.handles.len();
                    drop(message);
                    for _ in 0..handles {
                        self.in_flight.consume(self.from_prev.1);
                    }
                }
                Err(Error::Os { source, .. }) if source.kind() == io::ErrorKind::WouldBlock => {
                    return;
                }
                Err(Error::Disconnected) => return,
                Err(e) => panic!("draining the stream: {e:?}"),
            }
        }
    }

    fn step(&mut self, stats: &Stats) -> Step {
        let mut rng = thread_rng();
        let (w, os) = (&self.w, &self.os);
        match rng.gen_range(0..20) {
            0..=2 if self.held.len() < 3 => {
                self.held.push(w.create(os, rng.gen_range(2..=4))?);
                stats.created.fetch_add(1, Relaxed);
            }
            3..=5 if !self.held.is_empty() => {
                let buf = &self.held[rng.gen_range(0..self.held.len())];
                let (_, to) = &self.post[rng.gen_range(0..self.post.len())];
                note_shared(&mut self.shared, buf);
                self.sent += 1;
                let shared = w.share(buf)?;
                if shared.is_none() {
                    // Every slot taken: no in-flight reference was made.
                    self.sent -= 1;
                }
                if let Some(bytes) = shared {
                    let sender = os.pid();
                    // A receiver that already stopped drops the letter: its reference
                    // stays with this process until it dies.
                    let _ = to.send(Letter { bytes, sender });
                }
            }
            6..=7 if !self.held.is_empty() => {
                let buf = &self.held[rng.gen_range(0..self.held.len())];
                note_shared(&mut self.shared, buf);
                self.sent += 1;
                match buf.share() {
                    Ok(handle) => match transport::send_with(os, &self.to_next, b"h", vec![handle])
                    {
                        // A handle that could not be sent is dropped, and so given back,
                        // or is left in flight: counted as in flight either way.
                        Ok(()) | Err(Error::Disconnected) => {}
                        Err(e) => return Err(e),
                    },
                    Err(Error::HoldersFull { .. }) => self.sent -= 1,
                    Err(e) => return Err(e),
                }
            }
            8..=10 => {
                if let Ok(letter) = self.mail.try_recv() {
                    if rng.gen_bool(0.2) {
                        // Given back unattached: the handle's drop returns the
                        // reference (and finalizes if it was the last).
                        drop(shmrc::ShareHandle::from_bytes_with(os, &letter.bytes)?);
                        // Killed inside the drop, the reference may be left in flight.
                        if w.alive(os.pid()) {
                            self.in_flight.consume(letter.sender);
                        }
                    } else {
                        let attached = w.attach(os, &letter.bytes, letter.sender)?;
                        self.in_flight.consume(letter.sender);
                        if let Some(buf) = attached {
                            stats.attached.fetch_add(1, Relaxed);
                            self.held.push(buf);
                        }
                    }
                }
            }
            11..=12 => match transport::recv_with(os, &self.from_prev.0) {
                Ok(message) => {
                    for handle in message.handles {
                        let attached = w.attach_handle(handle, self.from_prev.1)?;
                        self.in_flight.consume(self.from_prev.1);
                        if let Some(buf) = attached {
                            stats.attached.fetch_add(1, Relaxed);
                            self.held.push(buf);
                        }
                    }
                }
                Err(Error::Os { source, .. }) if source.kind() == io::ErrorKind::WouldBlock => {}
                Err(Error::Disconnected) => {}
                Err(e) => return Err(e),
            },
            13..=15 if !self.held.is_empty() => {
                let buf = self.held.swap_remove(rng.gen_range(0..self.held.len()));
                w.release(buf)?;
            }
            16..=17 => {
                w.sweep(os)?;
                stats.swept.fetch_add(1, Relaxed);
            }
            18 if self.kills && rng.gen_bool(0.3) => {
                // The victim is running: it dies at a crash point of its own (the next
                // one, or a later one), never between a crash point and the step after
                // it (see `SimKernel::kill`).
                let (pid, _) = &self.post[rng.gen_range(0..self.post.len())];
                let steps_left = if rng.gen_bool(0.5) {
                    0
                } else {
                    rng.gen_range(0..40)
                };
                w.kernel.kill_at_step(*pid, steps_left);
            }
            _ => os.crash_point()?,
        }
        Ok(())
    }
}

/// Counts over all iterations of one check, printed at its end.
#[derive(Default)]
struct Stats {
    iterations: AtomicU64,
    created: AtomicU64,
    attached: AtomicU64,
    swept: AtomicU64,
    killed: AtomicU64,
    taken_over: AtomicU64,
    /// Iterations in which a finalizer killed in its commit pass was followed by one
    /// killed in its rollback.
    deeper: AtomicU64,
    /// `mark_race` iterations in which B's claim took a slot above the mark the
    /// segment started with.
    above_mark: AtomicU64,
}

impl Stats {
    fn print(&self, label: &str, started: Instant) {
        let l = |a: &AtomicU64| a.load(Relaxed);
        eprintln!(
            "shuttle {label}: {} iterations, {} segments created, {} attaches, {} sweeps, {} processes killed, {} stalled finalizers armed to be taken over, {} finalizers killed in their rollback after another in its commit, {} claims above the first mark, {:.1?}",
            l(&self.iterations),
            l(&self.created),
            l(&self.attached),
            l(&self.swept),
            l(&self.killed),
            l(&self.taken_over),
            l(&self.deeper),
            l(&self.above_mark),
            started.elapsed()
        );
    }
}

/// The eight processes of the random scenarios, each with its mailbox, the others'
/// addresses and its two stream ends of the ring; with `kills`, some doomed from the
/// start at a random crash point.
fn processes(w: &World, kills: bool) -> Vec<Process> {
    let mut rng = thread_rng();
    let oses: Vec<SimOs> = (0..PROCESSES).map(|_| w.spawn()).collect();
    for os in &oses {
        if kills && rng.gen_bool(0.25) {
            w.kernel.kill_at_step(os.pid(), rng.gen_range(0..150));
        }
    }
    let (posts, mails): (Vec<_>, Vec<_>) = oses.iter().map(|_| channel::<Letter>()).unzip();
    let mut rings: Vec<(SimStream, SimStream)> = (0..PROCESSES)
        .map(|i| w.kernel.stream_pair(&oses[i], &oses[(i + 1) % PROCESSES]))
        .collect();
    // Process i sends on ring i's first end and receives on ring i-1's second end.
    let mut ends: Vec<(Option<SimStream>, Option<SimStream>)> =
        (0..PROCESSES).map(|_| (None, None)).collect();
    for (i, (to_next, at_next)) in rings.drain(..).enumerate() {
        ends[i].0 = Some(to_next);
        ends[(i + 1) % PROCESSES].1 = Some(at_next);
    }
    let in_flight = Arc::new(InFlight::default());
    let mut processes = Vec::new();
    for (i, (mail, (to_next, from_prev))) in mails.into_iter().zip(ends).enumerate() {
        let post = oses
            .iter()
            .zip(&posts)
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (os, tx))| (os.pid(), tx.clone()))
            .collect();
        let process = Process {
            w: w.clone(),
            os: oses[i].clone(),
            mail,
            post,
            to_next: to_next.expect("every ring has a sender"),
            from_prev: (
                from_prev.expect("every ring has a receiver"),
                oses[(i + PROCESSES - 1) % PROCESSES].pid(),
            ),
            held: Vec::new(),
            kills,
            sent: 0,
            shared: Vec::new(),
            in_flight: in_flight.clone(),
        };
        processes.push(process);
    }
    processes
}

/// Eight processes with random operations and kills (see the module docs).
fn random_ops(stats: &'static Stats) {
    stats.iterations.fetch_add(1, Relaxed);
    let w = World::new(1);
    let threads: Vec<_> = processes(&w, true)
        .into_iter()
        .map(|process| {
            let ops = thread_rng().gen_range(24..48);
            shuttle::thread::spawn(move || process.run(ops, stats))
        })
        .collect();
    let survivors: Vec<(SimOs, Buf)> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("a process thread panicked"))
        .collect();
    w.finish(survivors);
}

/// P3 while processes live: the random scenario with nobody killed. Each process runs
/// its random operations (sweeps among them), then releases everything it holds; once
/// all are done, every handle still addressed to one is dropped unattached. With no
/// sweep after that, every segment created must be unlinked: by the releases and the
/// handles given back alone. The in-flight bound is checked after every operation, as
/// in the random scenario.
fn random_ops_live(stats: &'static Stats) {
    stats.iterations.fetch_add(1, Relaxed);
    let w = World::new(10);
    let threads: Vec<_> = processes(&w, false)
        .into_iter()
        .map(|process| {
            let ops = thread_rng().gen_range(24..48);
            shuttle::thread::spawn(move || process.run_live(ops, stats))
        })
        .collect();
    let done: Vec<Process> = threads
        .into_iter()
        .map(|t| t.join().expect("a process thread panicked"))
        .collect();
    for process in &done {
        process.drop_mail();
    }
    assert_eq!(
        w.segments(),
        Vec::<String>::new(),
        "P3 violated while processes live: nobody died, every process released what it held and every handle in flight was given back, yet names are left with no sweep: {}",
        w.describe()
    );
    drop(done);
    w.finish(vec![]);
}

/// No kill: one segment held by every process (created by the first, attached by the
/// others before the race), then all release at once, some sharing to a neighbour that
/// attaches and releases first. With nobody dead, the releases alone must unlink it,
/// exactly once, with no sweep: the pending handshake hands the last word to whichever
/// finalizer runs last.
fn releases_alone(stats: &'static Stats) {
    stats.iterations.fetch_add(1, Relaxed);
    let w = World::new(2);
    let oses: Vec<SimOs> = (0..PROCESSES).map(|_| w.spawn()).collect();
    let first = w.create(&oses[0], 2 * PROCESSES).unwrap();
    stats.created.fetch_add(1, Relaxed);
    let mut bufs = vec![];
    for os in &oses[1..] {
        let bytes = w.share(&first).unwrap().unwrap();
        bufs.push(w.attach(os, &bytes, oses[0].pid()).unwrap().unwrap());
        stats.attached.fetch_add(1, Relaxed);
    }
    bufs.insert(0, first);
    let threads: Vec<_> = oses
        .iter()
        .cloned()
        .zip(bufs)
        .map(|(os, buf)| {
            let w = w.clone();
            let helper = w.spawn();
            shuttle::thread::spawn(move || {
                if thread_rng().gen_bool(0.5) {
                    // A handle to a process that attaches and releases before us.
                    let bytes = w.share(&buf).unwrap().unwrap();
                    let other = w.attach(&helper, &bytes, os.pid()).unwrap().unwrap();
                    stats.attached.fetch_add(1, Relaxed);
                    w.check_holder(&helper, &other);
                    w.release(other).unwrap();
                }
                w.check_holder(&os, &buf);
                w.release(buf).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        w.segments(),
        Vec::<String>::new(),
        "P3 violated: nobody died, yet the releases left the segment: {}",
        w.describe()
    );
    assert_eq!(w.unlinks(), 1);
    w.finish(vec![]);
}

/// Recycling: a pool P recycles its segment (then writes the new use's data) while
/// three processes attach old handle bytes of it, one of them doomed at a random crash
/// point; P starts after a random number of scheduling points. A recycle that reused
/// the segment and a live process holding it through an old handle are never both
/// (P1).
fn recycle_vs_old_handles(stats: &'static Stats) {
    stats.iterations.fetch_add(1, Relaxed);
    let w = World::new(6);
    let (p, buf_p, bytes) = w.recycle_setup();
    stats.created.fetch_add(1, Relaxed);
    let attachers: Vec<SimOs> = (0..3).map(|_| w.spawn()).collect();
    let doomed = attachers[thread_rng().gen_range(0..3)].pid();
    w.kernel.kill_at_step(doomed, thread_rng().gen_range(0..8));
    let threads: Vec<_> = attachers
        .iter()
        .cloned()
        .map(|b| {
            let (w, bytes) = (w.clone(), bytes.clone());
            shuttle::thread::spawn(move || (w.attach_old(&b, &bytes), b))
        })
        .collect();
    // P lets a random number of scheduling points pass first: under the random
    // scheduler, whose every choice is fair, an attach (many more steps than the
    // recycle's first ones) otherwise rarely ends before the recycle reaches its slot,
    // and a recycle over a live holder (planted `recycle_over_live`) went unseen in
    // 20,000 iterations; PCT's preemptions found it.
    for _ in 0..thread_rng().gen_range(0..48) {
        shuttle::thread::yield_now();
    }
    let reused = ok_or_killed("P's recycle", buf_p.recycle());
    let mut held = vec![];
    for t in threads {
        let (attached, b) = t.join().unwrap();
        if w.kernel.is_killed(b.pid()) {
            stats.killed.fetch_add(1, Relaxed);
        }
        w.check_recycle(reused, &b, attached.as_ref());
        held.extend(attached.map(|buf| (b, buf)));
    }
    stats.attached.fetch_add(held.len() as u64, Relaxed);
    held.push((p, buf_p));
    w.finish(held);
}

/// A memfd pool: P recycles its memfd (then writes the next use's data) while Q
/// receives P's handle, attaches, reads and releases it, one of them doomed at a random
/// crash point: a live Q never reads another use (P1), and once Q is done a live P
/// reuses the memfd (P3 for a memfd pool).
fn memfd_recycle_vs_consumer(stats: &'static Stats) {
    stats.iterations.fetch_add(1, Relaxed);
    let w = World::new(7);
    let (p, buf_p, q, rx) = w.memfd_pool_setup();
    stats.created.fetch_add(1, Relaxed);
    let doomed = if thread_rng().gen_bool(0.5) {
        p.pid()
    } else {
        q.pid()
    };
    w.kernel.kill_at_step(doomed, thread_rng().gen_range(0..8));
    let (wq, sender) = (w.clone(), p.pid());
    let consumer = shuttle::thread::spawn(move || wq.memfd_consume(&q, &rx, sender));
    // A scheduling choice with both running, whatever follows: a P doomed at its first
    // crash point makes no shared step before it waits for Q, and a PCT run whose first
    // execution (the one that sizes its schedules) offers no choice is refused by
    // shuttle ("test closure did not exercise any concurrency", 1 run in about 20).
    shuttle::thread::yield_now();
    w.memfd_recycle(&buf_p);
    let attached = consumer.join().unwrap();
    // The race is over: the checks below must not kill the survivor.
    w.kernel.call_off_kill(doomed);
    if attached {
        stats.attached.fetch_add(1, Relaxed);
    }
    if w.kernel.is_killed(doomed) {
        stats.killed.fetch_add(1, Relaxed);
    }
    w.memfd_finish(&p, buf_p, attached);
}

/// A stalled finalizer: a sweeper F of a segment nobody live holds stops, alive, at a
/// random step of its finalize while R sweeps until F was asked to run again the bound
/// less one times (`World::stalled_setup`); then F resumes, R sweeps once more (taking
/// F over if F holds the finalizer word) and B attaches the dead creator's handle, at
/// once. Neither finalizer undoes the other's tombstones (P1, P2), nothing is left
/// stuck (P5, P3), and once the three are done the segment is unlinked with no sweep
/// after (P3 while processes live).
fn stalled_finalizer(stats: &'static Stats) {
    stats.iterations.fetch_add(1, Relaxed);
    let w = World::new(8);
    let (f, r, bytes, c, armed) = w.stalled_setup(thread_rng().gen_range(0..16));
    stats.created.fetch_add(1, Relaxed);
    if armed {
        stats.taken_over.fetch_add(1, Relaxed);
    }
    // B first: the random scheduler then lets its attach start before F's last steps.
    let b = w.spawn();
    let wb = w.clone();
    let tb = shuttle::thread::spawn(move || match wb.attach(&b, &bytes, c) {
        Ok(Some(buf)) => {
            stats.attached.fetch_add(1, Relaxed);
            wb.check_holder(&b, &buf);
            wb.release(buf).expect("B is not killed");
        }
        Ok(None) => {}
        Err(e) => panic!("B's attach: {e:?}"),
    });
    let wf = w.clone();
    let tf = shuttle::thread::spawn(move || f.resume(&wf));
    let wr = w.clone();
    let tr = shuttle::thread::spawn(move || {
        wr.sweep(&r).expect("R is not killed");
    });
    tf.join().unwrap();
    tr.join().unwrap();
    tb.join().unwrap();
    // P3 while processes live: F, R and B live (C died before the race, its words
    // reclaimed by the sweeps' finalizes) and are done, and none holds the segment: one
    // of their finalizes unlinked it, with no sweep after. A finalizer taken over, or
    // rolled back, that ignores a request to run again leaves it named.
    assert_eq!(
        w.segments(),
        Vec::<String>::new(),
        "P3 violated while processes live: F, R and B are done and none holds the segment, yet it is named with no sweep to come: {}",
        w.describe()
    );
    w.finish(vec![]);
}

/// Whether a stepped finalize stands in its commit pass (turning slots to its
/// tombstones, the seal handshake: sealing, re-reading the mark, unsealing; or
/// committing) or in its rollback (turning them back).
fn committing(f: &Stalled) -> bool {
    let at = f.position();
    ["at: TombLoad", "at: TombCas", "at: Seal(", "at: Commit"]
        .iter()
        .any(|phase| at.contains(phase))
}

fn rolling_back(f: &Stalled) -> bool {
    f.position().contains("at: Rollback")
}

/// Two finalizers killed in turn, deeper than the random scenario reaches on purpose:
/// C creates a segment of 3 slots, sends B a handle and dies. A sweeper F1 finalizes
/// it (production's finalize stepped by hand) and is killed in its commit pass after a
/// random number of its steps there (0 to 2 tombstones turned, or all and the commit
/// not yet done). Then, at once: B attaches C's handle (a dead sender's: its claim
/// races the tombstones), and a second sweeper F2 takes the dead F1 over; if B's claim
/// took a slot, F2 meets it and rolls back, and is killed at a random step of its
/// rollback. Checked: B, alive, keeps what it attached (P1); F2's (or F1's) unlink
/// happens only with every slot a tombstone, once (P2); at rest and after a fresh
/// sweep no tombstone is left without a finalizer, B's slot intact (P5); then P3.
fn commit_then_rollback_killed(stats: &'static Stats) {
    stats.iterations.fetch_add(1, Relaxed);
    let w = World::new(11);
    let mut rng = thread_rng();
    let (c, b) = (w.spawn(), w.spawn());
    let buf_c = w.create(&c, 3).unwrap();
    let bytes = w.share(&buf_c).unwrap().unwrap();
    w.kernel.kill(c.pid());
    drop(buf_c);
    let name = w.segments().pop().expect("the segment C created");
    stats.created.fetch_add(1, Relaxed);
    // F1: into its commit pass, then `extra` steps more (its 7 steps there: the 2 slots
    // below the mark, C's and its handle's, each loaded and turned, the seal, the
    // mark's re-read, the commit CAS), killed before it can unlink.
    let f1_os = w.spawn();
    let mut f1 = Stalled::start(&w, f1_os.clone(), &name, 0);
    while !committing(&f1) {
        assert!(!f1.step_once(&w), "F1 ended before its commit pass");
    }
    for _ in 0..rng.gen_range(0..7) {
        f1.step_once(&w);
    }
    assert!(
        committing(&f1),
        "F1 left its commit pass: {}",
        f1.position()
    );
    w.kernel.kill(f1_os.pid());
    drop(f1);
    stats.killed.fetch_add(1, Relaxed);
    let kill_at = rng.gen_range(0..4);
    let wb = w.clone();
    let tb = shuttle::thread::spawn(move || {
        let attached = wb.attach(&b, &bytes, c.pid()).expect("B is not killed");
        (b, attached)
    });
    let wf = w.clone();
    let f2_os = w.spawn();
    let tf = shuttle::thread::spawn(move || {
        let mut f2 = Stalled::start(&wf, f2_os.clone(), &name, 0);
        let mut rollback_steps = 0;
        loop {
            if rolling_back(&f2) {
                if rollback_steps == kill_at {
                    wf.kernel.kill(f2_os.pid());
                    return true;
                }
                rollback_steps += 1;
            }
            if f2.step_once(&wf) {
                return false;
            }
        }
    });
    let killed_in_rollback = tf.join().unwrap();
    let (b, attached) = tb.join().unwrap();
    if killed_in_rollback {
        stats.killed.fetch_add(1, Relaxed);
        stats.deeper.fetch_add(1, Relaxed);
    }
    let survivors = match attached {
        Some(buf) => {
            stats.attached.fetch_add(1, Relaxed);
            w.check_holder(&b, &buf);
            vec![(b, buf)]
        }
        None => vec![],
    };
    w.finish(survivors);
}

/// Claims against a finalize, over the mark (`concurrency::MarkRace`): P releases the
/// segment's only reference while H claims a slot and releases it and B claims one and
/// keeps it, all three alive. B keeps a segment never committed (P1); at rest, no
/// tombstone or finalizer is left, no slot is taken at or above the mark (P5); if B got
/// no slot, the releases alone committed it (P3 while processes live).
fn mark_race(stats: &'static Stats) {
    stats.iterations.fetch_add(1, Relaxed);
    let w = World::new(12);
    let (p, h, b) = (w.spawn(), w.spawn(), w.spawn());
    let race = Arc::new(MarkRace::new(&p));
    stats.created.fetch_add(1, Relaxed);
    let rp = race.clone();
    let tp = shuttle::thread::spawn(move || rp.release_first(&p));
    let rh = race.clone();
    let th = shuttle::thread::spawn(move || rh.claim_and_release(&h));
    let rb = race.clone();
    let tb = shuttle::thread::spawn(move || {
        let slot = rb.claim(&b);
        (b, slot)
    });
    tp.join().unwrap();
    th.join().unwrap();
    let (b, slot) = tb.join().unwrap();
    if let Some(j) = slot {
        stats.attached.fetch_add(1, Relaxed);
        if j >= 2 {
            stats.above_mark.fetch_add(1, Relaxed);
        }
    }
    race.check(&b, slot, true);
}

/// The scenarios by name, for [`replay_a_failing_schedule`].
fn scenario(name: &str) -> fn(&'static Stats) {
    match name {
        "random_ops" => random_ops,
        "releases_alone" => releases_alone,
        "recycle_vs_old_handles" => recycle_vs_old_handles,
        "memfd_recycle_vs_consumer" => memfd_recycle_vs_consumer,
        "stalled_finalizer" => stalled_finalizer,
        "random_ops_live" => random_ops_live,
        "commit_then_rollback_killed" => commit_then_rollback_killed,
        "mark_race" => mark_race,
        other => panic!(
            "unknown scenario {other:?}: random_ops, random_ops_live, releases_alone, recycle_vs_old_handles, memfd_recycle_vs_consumer, stalled_finalizer, commit_then_rollback_killed or mark_race"
        ),
    }
}

fn check(name: &'static str, scheduler: &str) {
    eprintln!(
        "shuttle scenario {name} ({scheduler}); to replay a failure: SHMRC_SHUTTLE_SCENARIO={name} SHMRC_SHUTTLE_REPLAY=<schedule> cargo test --release --features shuttle --test shuttle_protocol -- --ignored replay_a_failing_schedule"
    );
    let stats: &'static Stats = Box::leak(Box::default());
    let body = scenario(name);
    let share = if name == "random_ops_live" {
        LIVE_SHARE
    } else {
        1
    };
    let started = Instant::now();
    match scheduler {
        "random" => shuttle::check_random(
            move || body(stats),
            iterations("SHMRC_SHUTTLE_ITERATIONS", RANDOM_ITERATIONS) / share,
        ),
        _ => shuttle::check_pct(
            move || body(stats),
            iterations("SHMRC_SHUTTLE_PCT_ITERATIONS", PCT_ITERATIONS) / share,
            PCT_DEPTH,
        ),
    }
    stats.print(&format!("{name} ({scheduler})"), started);
    assert!(
        stats.killed.load(Relaxed) > 0 || name != "random_ops",
        "no process was ever killed"
    );
    assert!(
        stats.taken_over.load(Relaxed) > 0 || name != "stalled_finalizer",
        "no iteration armed a takeover of the stalled finalizer"
    );
    assert!(
        stats.deeper.load(Relaxed) > 0 || name != "commit_then_rollback_killed",
        "no finalizer was killed in its rollback after one killed in its commit pass"
    );
    assert!(
        stats.above_mark.load(Relaxed) > 0 || name != "mark_race",
        "B's claim never took a slot above the mark the segment started with"
    );
}

#[test]
fn eight_processes_with_random_ops_and_kills_under_random_schedules() {
    check("random_ops", "random");
}

#[test]
fn eight_processes_with_random_ops_and_kills_under_pct_schedules() {
    check("random_ops", "pct");
}

#[test]
fn a_recycler_racing_old_handles_under_random_schedules() {
    check("recycle_vs_old_handles", "random");
}

#[test]
fn a_recycler_racing_old_handles_under_pct_schedules() {
    check("recycle_vs_old_handles", "pct");
}

#[test]
fn a_memfd_pools_recycler_racing_its_consumer_under_random_schedules() {
    check("memfd_recycle_vs_consumer", "random");
}

#[test]
fn a_memfd_pools_recycler_racing_its_consumer_under_pct_schedules() {
    check("memfd_recycle_vs_consumer", "pct");
}

#[test]
fn a_stalled_finalizer_taken_over_and_resumed_under_random_schedules() {
    check("stalled_finalizer", "random");
}

#[test]
fn a_stalled_finalizer_taken_over_and_resumed_under_pct_schedules() {
    check("stalled_finalizer", "pct");
}

#[test]
fn eight_live_processes_with_random_ops_unlink_with_no_sweep_under_random_schedules() {
    check("random_ops_live", "random");
}

#[test]
fn eight_live_processes_with_random_ops_unlink_with_no_sweep_under_pct_schedules() {
    check("random_ops_live", "pct");
}

#[test]
fn a_finalizer_killed_in_its_rollback_after_one_killed_in_its_commit_under_random_schedules() {
    check("commit_then_rollback_killed", "random");
}

#[test]
fn a_finalizer_killed_in_its_rollback_after_one_killed_in_its_commit_under_pct_schedules() {
    check("commit_then_rollback_killed", "pct");
}

#[test]
fn claims_racing_a_finalize_over_the_mark_under_random_schedules() {
    check("mark_race", "random");
}

#[test]
fn claims_racing_a_finalize_over_the_mark_under_pct_schedules() {
    check("mark_race", "pct");
}

#[test]
fn concurrent_releases_alone_unlink_once_under_random_schedules() {
    check("releases_alone", "random");
}

#[test]
fn concurrent_releases_alone_unlink_once_under_pct_schedules() {
    check("releases_alone", "pct");
}

/// Replays the schedule in `SHMRC_SHUTTLE_REPLAY` (the string a failure printed, or a
/// file holding it) for the scenario `SHMRC_SHUTTLE_SCENARIO` (default `random_ops`).
#[test]
#[ignore = "a tool: replays SHMRC_SHUTTLE_REPLAY (see the module docs)"]
fn replay_a_failing_schedule() {
    let schedule = std::env::var("SHMRC_SHUTTLE_REPLAY").expect(
        "set SHMRC_SHUTTLE_REPLAY to the schedule a failure printed (or a file holding it)",
    );
    let schedule = std::fs::read_to_string(&schedule).unwrap_or(schedule);
    let name = std::env::var("SHMRC_SHUTTLE_SCENARIO").unwrap_or_else(|_| "random_ops".into());
    let stats: &'static Stats = Box::leak(Box::default());
    let body = scenario(&name);
    // As printed: quoted and wrapped over several lines.
    let schedule: String = schedule.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    shuttle::replay(move || body(stats), &schedule);
    stats.print(&format!("{name} (replay)"), Instant::now());
}
