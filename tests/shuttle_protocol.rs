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
//! Run: `RUSTFLAGS='--cfg shmrc_shuttle' cargo test --release --test shuttle_protocol -- --nocapture`
//! (`SHMRC_SHUTTLE_ITERATIONS`, `SHMRC_SHUTTLE_PCT_ITERATIONS` raise the counts).
//!
//! # Replaying a failure
//! A failing iteration prints `failing schedule: "…"` (a hex string wrapped over
//! several lines). Replay it, deterministically (the random choices are part of the
//! schedule), with
//! `SHMRC_SHUTTLE_SCENARIO=<scenario> SHMRC_SHUTTLE_REPLAY=<schedule, or a file holding
//! it> RUSTFLAGS='--cfg shmrc_shuttle' cargo test --release --test shuttle_protocol -- --ignored
//! replay_a_failing_schedule --nocapture`; every test prints its scenario's name.
#![cfg(shmrc_shuttle)]

mod concurrency;

use std::io;
use std::time::Instant;

use concurrency::{Buf, World, ok_or_killed};
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimOs, SimStream};
use shmrc::checkers::sync::process::{AtomicU64, Ordering::Relaxed};
use shmrc::{Error, Result, transport};
use shuttle::rand::{Rng, thread_rng};
use shuttle::sync::mpsc::{Receiver, Sender, channel};

/// Processes of the random scenario.
const PROCESSES: usize = 8;
/// Random-scheduler iterations per scenario unless `SHMRC_SHUTTLE_ITERATIONS` says.
const RANDOM_ITERATIONS: usize = 20_000;
/// PCT iterations per scenario unless `SHMRC_SHUTTLE_PCT_ITERATIONS` says.
const PCT_ITERATIONS: usize = 20_000;
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
}

/// A process's operation ended without its process being killed.
type Step = Result<()>;

impl Process {
    /// Runs `ops` random operations, checking P1 after each, then releases a random
    /// part of what it holds; returns the rest (empty if the process was killed).
    fn run(mut self, ops: usize, stats: &Stats) -> Vec<(SimOs, Buf)> {
        for _ in 0..ops {
            let result = self.step(stats);
            if let Err(Error::Killed) = result {
                stats.killed.fetch_add(1, Relaxed);
                return Vec::new();
            }
            if let Err(e) = result {
                panic!("process {}: unexpected error {e:?}", self.os.pid());
            }
            for buf in &self.held {
                self.w.check_holder(&self.os, buf);
                self.w.check_slot_words(buf);
            }
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
                if let Some(bytes) = w.share(buf)? {
                    let sender = os.pid();
                    // A receiver that already stopped drops the letter: its reference
                    // stays with this process until it dies.
                    let _ = to.send(Letter { bytes, sender });
                }
            }
            6..=7 if !self.held.is_empty() => {
                let buf = &self.held[rng.gen_range(0..self.held.len())];
                match buf.share() {
                    Ok(handle) => match transport::send_with(os, &self.to_next, b"h", vec![handle])
                    {
                        Ok(()) | Err(Error::Disconnected) => {}
                        Err(e) => return Err(e),
                    },
                    Err(Error::HoldersFull { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            8..=10 => {
                if let Ok(letter) = self.mail.try_recv() {
                    if rng.gen_bool(0.2) {
                        // Given back unattached: the handle's drop returns the
                        // reference (and finalizes if it was the last).
                        drop(shmrc::ShareHandle::from_bytes_with(os, &letter.bytes)?);
                    } else if let Some(buf) = w.attach(os, &letter.bytes, letter.sender)? {
                        stats.attached.fetch_add(1, Relaxed);
                        self.held.push(buf);
                    }
                }
            }
            11..=12 => match transport::recv_with(os, &self.from_prev.0) {
                Ok(message) => {
                    for handle in message.handles {
                        if let Some(buf) = w.attach_handle(handle, self.from_prev.1)? {
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
            18 if rng.gen_bool(0.3) => {
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
}

impl Stats {
    fn print(&self, label: &str, started: Instant) {
        let l = |a: &AtomicU64| a.load(Relaxed);
        eprintln!(
            "shuttle {label}: {} iterations, {} segments created, {} attaches, {} sweeps, {} processes killed, {} stalled finalizers armed to be taken over, {:.1?}",
            l(&self.iterations),
            l(&self.created),
            l(&self.attached),
            l(&self.swept),
            l(&self.killed),
            l(&self.taken_over),
            started.elapsed()
        );
    }
}

/// Eight processes with random operations and kills (see the module docs).
fn random_ops(stats: &'static Stats) {
    stats.iterations.fetch_add(1, Relaxed);
    let w = World::new(1);
    let mut rng = thread_rng();
    let oses: Vec<SimOs> = (0..PROCESSES).map(|_| w.spawn()).collect();
    for os in &oses {
        if rng.gen_bool(0.25) {
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
    let mut threads = Vec::new();
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
        };
        let ops = rng.gen_range(24..48);
        threads.push(shuttle::thread::spawn(move || process.run(ops, stats)));
    }
    drop(posts);
    let survivors: Vec<(SimOs, Buf)> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("a process thread panicked"))
        .collect();
    w.finish(survivors);
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
/// point: a recycle that reused the segment and a live process holding it through an
/// old handle are never both (P1).
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
/// stuck (P5, P3).
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
    w.finish(vec![]);
}

/// The scenarios by name, for [`replay_a_failing_schedule`].
fn scenario(name: &str) -> fn(&'static Stats) {
    match name {
        "random_ops" => random_ops,
        "releases_alone" => releases_alone,
        "recycle_vs_old_handles" => recycle_vs_old_handles,
        "memfd_recycle_vs_consumer" => memfd_recycle_vs_consumer,
        "stalled_finalizer" => stalled_finalizer,
        other => panic!(
            "unknown scenario {other:?}: random_ops, releases_alone, recycle_vs_old_handles, memfd_recycle_vs_consumer or stalled_finalizer"
        ),
    }
}

fn check(name: &'static str, scheduler: &str) {
    eprintln!(
        "shuttle scenario {name} ({scheduler}); to replay a failure: SHMRC_SHUTTLE_SCENARIO={name} SHMRC_SHUTTLE_REPLAY=<schedule> RUSTFLAGS='--cfg shmrc_shuttle' cargo test --release --test shuttle_protocol -- --ignored replay_a_failing_schedule"
    );
    let stats: &'static Stats = Box::leak(Box::default());
    let body = scenario(name);
    let started = Instant::now();
    match scheduler {
        "random" => shuttle::check_random(
            move || body(stats),
            iterations("SHMRC_SHUTTLE_ITERATIONS", RANDOM_ITERATIONS),
        ),
        _ => shuttle::check_pct(
            move || body(stats),
            iterations("SHMRC_SHUTTLE_PCT_ITERATIONS", PCT_ITERATIONS),
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
