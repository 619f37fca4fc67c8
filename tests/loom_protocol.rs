//! The holder protocol under loom: small models (2–3 simulated processes, each a loom
//! thread running the real create / share / attach / release / finalize / sweep code of
//! production on the simulated kernel), explored over every interleaving up to the
//! preemption bound, with one process, the *victim*, killed at its n-th crash point for
//! every n in turn until it outruns them all.
//!
//! Every execution asserts P1 (a live holder's segment is named, its slot holds its
//! word, its data reads back; a handle of a live sender always attaches), P2 (no
//! segment unlinked twice, planted foreign names survive) and P5 (slot words valid,
//! census adds up, no tombstone left without a finalizer) at rest after the threads
//! join, then sweeps as a fresh process and asserts P5 again and P3 (once everyone is
//! dead or released and swept, nothing is left), with P3's in-flight bound before it
//! (no live process has more in-flight words in the slots than the handles it sent
//! that no live receiver consumed). P3 while processes live (the releases alone unlink)
//! is not checked here: loom takes `SeqCst` for `AcqRel` (see [`conclude`]).
//!
//! Model (g) stops a finalizer, alive, at each of its steps in turn instead of killing
//! it, lets a rival take it over, and resumes it. Model (h) races claims against a
//! finalize over the mark (`concurrency::MarkRace`), nobody killed.
//!
//! Run: `cargo test --release --features loom --test loom_protocol -- --nocapture`.
//! `LOOM_MAX_PREEMPTIONS` bounds every model; unset, the 2-process models get 3 and
//! the 3-process ones 2. Each model prints how many crash positions and executions it
//! explored.
#![cfg(shmrc_loom)]

mod concurrency;

use std::sync::Arc;
use std::time::Instant;

use concurrency::{Buf, MarkRace, World, ok_or_killed};
use loom::sync::mpsc;
use loom::thread;
use shmrc::Error;
use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::holders;
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::SimOs;
use shmrc::checkers::segment;
use shmrc::checkers::sync::process::{AtomicU64, Ordering::Relaxed};

/// The preemption bound of the 2-process models when `LOOM_MAX_PREEMPTIONS` is not set.
const PREEMPTIONS_2: usize = 3;
/// The preemption bound of the 3-process models when `LOOM_MAX_PREEMPTIONS` is not set:
/// with 3 they take ~90k executions per crash position (a quarter of an hour per
/// model on 2 cores), with 2 a few thousand.
const PREEMPTIONS_3: usize = 2;

/// loom's builder: `LOOM_*` variables as loom reads them, a preemption bound of
/// `default_preemptions` unless `LOOM_MAX_PREEMPTIONS` says otherwise, and room for
/// the branches a whole create-attach-release-sweep execution takes.
fn builder(default_preemptions: usize) -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(default_preemptions);
    }
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = 100_000;
    }
    builder
}

/// Runs `model(n)` as one loom model for n = 0, 1, 2, …; `model` kills its victim at
/// the victim's n-th crash point and returns whether the victim was killed. Stops at
/// the first n at which no execution killed the victim (it outran every crash point;
/// that last model is the crash-free one), and asserts at least `min_positions` were
/// explored, so a scenario that stopped killing cannot pass in silence.
fn at_every_crash_point(
    label: &str,
    processes: usize,
    min_positions: u64,
    model: impl Fn(u64) -> bool + Copy + Send + Sync + 'static,
) {
    let builder = builder(if processes > 2 {
        PREEMPTIONS_3
    } else {
        PREEMPTIONS_2
    });
    eprintln!(
        "loom {label}: {processes} processes, preemption bound {:?}",
        builder.preemption_bound
    );
    let start = Instant::now();
    let mut total = 0;
    for n in 0.. {
        let executions = Arc::new(AtomicU64::new(0));
        let kills = Arc::new(AtomicU64::new(0));
        let (e, k) = (executions.clone(), kills.clone());
        builder.check(move || {
            e.fetch_add(1, Relaxed);
            if model(n) {
                k.fetch_add(1, Relaxed);
            }
        });
        let (executions, kills) = (executions.load(Relaxed), kills.load(Relaxed));
        total += executions;
        eprintln!(
            "loom {label}: crash point {n}: {executions} executions, victim killed in {kills}"
        );
        if kills == 0 {
            eprintln!(
                "loom {label}: {n} crash positions + the crash-free model, {total} executions, {:.1?}",
                start.elapsed()
            );
            assert!(
                n >= min_positions,
                "{label}: only {n} crash positions explored, expected at least {min_positions}"
            );
            return;
        }
    }
}

/// Spawns a loom thread for process `os`.
fn run_as<T: Send + 'static>(
    os: &SimOs,
    body: impl FnOnce(SimOs) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let os = os.clone();
    thread::spawn(move || body(os))
}

/// The end of an execution whose threads have all joined: P3's in-flight bound for
/// each of `in_flight` (a process and how many handles it sent that no live receiver
/// consumed), then the common checks ([`World::finish`]). Returns whether `victim` was
/// killed.
///
/// Unlike the shuttle models, this does not require that crash-free releases unlinked
/// the segment by themselves: that relies on `SeqCst` store→load order (each releaser
/// vacates its slot, then reads the others'; the pending flag against the finalizer
/// word), which loom models as `AcqRel` (its README, "Unsupported features"), so loom
/// finds executions, impossible on hardware, where two releases both see the other
/// still holding and leave the segment to the sweep. So loom checks P3 while processes
/// live only through the in-flight bound; `releases_alone` and `random_ops_live` in
/// `tests/shuttle_protocol.rs` and the exhaustive check state the rest.
fn conclude(w: &World, victim: &SimOs, in_flight: &[(&SimOs, usize)]) -> bool {
    let killed = w.kernel.is_killed(victim.pid());
    check_in_flight_bound(w, in_flight);
    w.finish(vec![]);
    killed
}

/// Slots of every segment of these models, read for the in-flight bound (each is
/// created with 3, the stalled finalizer's with 2).
const SLOTS: usize = 3;

/// P3's in-flight bound at rest: every live process of `bounds` has at most as many
/// in-flight words in the slots of the segments as the handles it sent that no live
/// receiver consumed (a word beyond them is a reference no handle will ever take over
/// or give back, kept as long as its sender lives).
fn check_in_flight_bound(w: &World, bounds: &[(&SimOs, usize)]) {
    for (os, sent) in bounds {
        if !w.alive(os.pid()) {
            continue;
        }
        let word = holders::in_flight_word(os.token());
        let mut words = 0;
        for name in w.segments() {
            for i in 0..SLOTS {
                let Some(bytes) = w.kernel.peek(&name, segment::HEADER_BYTES + 8 * i, 8) else {
                    break;
                };
                words += usize::from(bytes.try_into().map(u64::from_ne_bytes) == Ok(word));
            }
        }
        assert!(
            words <= *sent,
            "P3 violated (in-flight bound): live process {} has {words} in-flight references in the slots, but sent only {sent} handle(s) not consumed: {}",
            os.pid(),
            w.describe()
        );
    }
}

/// A creator C shares the segment with A (who attaches) and hands B a handle, then C
/// dies: B's in-flight reference is a dead sender's, so B's attach races A's release
/// for the slots (A's finalize reclaims C's slots and turns them to tombstones; B
/// takes over its slot, claims another, or finds every slot a tombstone).
fn claim_vs_tombstone(w: &World) -> (SimOs, Buf, SimOs, Vec<u8>, u32) {
    let (c, a, b) = (w.spawn(), w.spawn(), w.spawn());
    let buf_c = w.create(&c, 3).unwrap();
    let for_a = w.share(&buf_c).unwrap().unwrap();
    let buf_a = w.attach(&a, &for_a, c.pid()).unwrap().unwrap();
    let for_b = w.share(&buf_c).unwrap().unwrap();
    w.kernel.kill(c.pid());
    drop(buf_c);
    (a, buf_a, b, for_b, c.pid())
}

/// B attaches (a handle of `sender`), checks its holding, releases.
fn attach_check_release(w: &World, b: &SimOs, bytes: &[u8], sender: u32) {
    let attached = ok_or_killed("B's attach", w.attach(b, bytes, sender)).flatten();
    if let Some(buf) = attached {
        w.check_holder(b, &buf);
        ok_or_killed("B's release", w.release(buf));
    }
}

#[derive(Copy, Clone, Debug)]
enum Victim {
    A,
    B,
    S,
}

/// (a) A releases (its finalize turning slots to tombstones) while B attaches with a
/// dead sender's handle (taking over or claiming a slot): the claim-vs-tombstone race.
/// With a `sweeper`, model (c): a sweeper S runs at the same time.
fn release_races_attach(seed: u64, sweeper: bool, victim: Victim, n: u64) -> bool {
    let w = World::new(seed);
    let (a, buf_a, b, for_b, c) = claim_vs_tombstone(&w);
    let s = sweeper.then(|| w.spawn());
    let v = match victim {
        Victim::A => &a,
        Victim::B => &b,
        Victim::S => s.as_ref().expect("a sweeper to kill"),
    };
    w.kernel.kill_at_step(v.pid(), n);
    let wa = w.clone();
    let ta = run_as(&a, move |_| ok_or_killed("A's release", wa.release(buf_a)));
    let wb = w.clone();
    let tb = run_as(&b, move |b| attach_check_release(&wb, &b, &for_b, c));
    let ts = s.as_ref().map(|s| {
        let ws = w.clone();
        run_as(s, move |s| ok_or_killed("S's sweep", ws.sweep(&s)))
    });
    ta.join().unwrap();
    tb.join().unwrap();
    if let Some(ts) = ts {
        ts.join().unwrap();
    }
    // Only C, dead, sent a handle.
    let mut quiet = vec![(&a, 0), (&b, 0)];
    quiet.extend(s.as_ref().map(|s| (s, 0)));
    conclude(&w, v, &quiet)
}

#[test]
fn a_releaser_racing_an_attacher_killed_at_every_step_of_its_release() {
    at_every_crash_point("(a) releaser killed", 2, 10, |n| {
        release_races_attach(1, false, Victim::A, n)
    });
}

#[test]
fn an_attacher_racing_a_releaser_killed_at_every_step_of_its_attach() {
    at_every_crash_point("(a) attacher killed", 2, 3, |n| {
        release_races_attach(1, false, Victim::B, n)
    });
}

/// (b) A and B, the only holders, release at once: their finalizes meet through the
/// finalizer word and the pending flag, and exactly one unlinks.
fn two_releasers(victim: Victim, n: u64) -> bool {
    let w = World::new(2);
    let (a, b) = (w.spawn(), w.spawn());
    let buf_a = w.create(&a, 3).unwrap();
    let buf_b = w
        .attach(&b, &w.share(&buf_a).unwrap().unwrap(), a.pid())
        .unwrap()
        .unwrap();
    let v = if let Victim::A = victim { &a } else { &b };
    w.kernel.kill_at_step(v.pid(), n);
    let wa = w.clone();
    let ta = run_as(&a, move |_| ok_or_killed("A's release", wa.release(buf_a)));
    let wb = w.clone();
    let tb = run_as(&b, move |_| ok_or_killed("B's release", wb.release(buf_b)));
    ta.join().unwrap();
    tb.join().unwrap();
    conclude(&w, v, &[(&a, 0), (&b, 0)])
}

#[test]
fn two_releasers_finalizing_at_once_unlink_once_with_one_killed_at_every_step() {
    at_every_crash_point("(b) two releasers", 2, 10, |n| two_releasers(Victim::A, n));
}

// (c) As (a), with a sweeper S running at the same time: a finalizer killed half-way
// (A's release, or S's sweep) leaves its dead token in the finalizer word and maybe
// tombstones; the other finalizer takes over, and either finishes the destruction or,
// B having attached, rolls the tombstones back.

#[test]
fn a_finalizer_killed_at_every_step_is_taken_over_or_rolled_back() {
    at_every_crash_point("(c) releasing finalizer killed", 3, 10, |n| {
        release_races_attach(3, true, Victim::A, n)
    });
}

#[test]
fn a_sweeper_killed_at_every_step_is_taken_over_or_rolled_back() {
    at_every_crash_point("(c) sweeping finalizer killed", 3, 10, |n| {
        release_races_attach(3, true, Victim::S, n)
    });
}

/// (d) A shares the segment (an in-flight reference in a slot), sends the bytes to B
/// and releases its own reference; B attaches and releases; a sweeper S runs all along.
/// While A lives, its in-flight reference must keep the segment for B.
fn in_flight_vs_sweeper(victim: Victim, n: u64) -> bool {
    let w = World::new(4);
    let (a, b, s) = (w.spawn(), w.spawn(), w.spawn());
    let buf_a = w.create(&a, 3).unwrap();
    let v = match victim {
        Victim::A => &a,
        Victim::B => &b,
        Victim::S => &s,
    };
    w.kernel.kill_at_step(v.pid(), n);
    let (to_b, at_b) = mpsc::channel::<Option<Vec<u8>>>();
    let wa = w.clone();
    let ta = run_as(&a, move |_| {
        let bytes = ok_or_killed("A's share", wa.share(&buf_a)).flatten();
        to_b.send(bytes).unwrap();
        ok_or_killed("A's release", wa.release(buf_a));
    });
    let wb = w.clone();
    let a_pid = a.pid();
    let tb = run_as(&b, move |b| {
        if let Some(bytes) = at_b.recv().unwrap() {
            attach_check_release(&wb, &b, &bytes, a_pid);
        }
    });
    let ws = w.clone();
    let ts = run_as(&s, move |s| ok_or_killed("S's sweep", ws.sweep(&s)));
    ta.join().unwrap();
    tb.join().unwrap();
    ts.join().unwrap();
    // A's one handle is consumed once B, alive, is done with it.
    let a_sent = usize::from(!w.alive(b.pid()));
    conclude(&w, v, &[(&a, a_sent), (&b, 0), (&s, 0)])
}

#[test]
fn an_in_flight_reference_survives_a_sweep_with_its_sender_killed_at_every_step() {
    at_every_crash_point("(d) sender killed", 3, 10, |n| {
        in_flight_vs_sweeper(Victim::A, n)
    });
}

#[test]
fn an_in_flight_reference_survives_a_sweep_with_its_receiver_killed_at_every_step() {
    at_every_crash_point("(d) receiver killed", 3, 3, |n| {
        in_flight_vs_sweeper(Victim::B, n)
    });
}

#[test]
fn an_in_flight_reference_survives_a_sweeper_killed_at_every_step() {
    at_every_crash_point("(d) sweeper killed", 3, 5, |n| {
        in_flight_vs_sweeper(Victim::S, n)
    });
}

/// Publish ordering: a creator C writes a new segment's header (fields, checksum, its
/// slot) and publishes the magic with `Release`; an opener O lists the namespace at the
/// same time and opens and validates what it finds (`Acquire` of the magic, then the
/// fields). Whatever the interleaving and whichever stores O's loads may still see
/// under loom's memory model, O finds the segment absent, half-created or whole, never
/// a header whose magic is there and fields are not (a weakened publish, planted as
/// `relaxed_publish`, fails here with `WrongVersion` or `Corrupted`).
/// How often the publish model's opener lists and opens.
const OPEN_ATTEMPTS: usize = 3;

/// (e) Recycling: P (a pool) recycles its segment while B attaches an old handle of it
/// (Q attached and released it before): either B holds generation 0 and the recycle
/// found it held, or the recycle won and B's attach is `Stale`, never both.
fn recycle_races_old_handle(victim: Victim, n: u64) -> bool {
    let w = World::new(5);
    let (p, buf_p, bytes) = w.recycle_setup();
    let b = w.spawn();
    let v = if let Victim::A = victim { &p } else { &b };
    w.kernel.kill_at_step(v.pid(), n);
    let tp = run_as(&p, move |_| {
        let reused = ok_or_killed("P's recycle", buf_p.recycle());
        (reused, buf_p)
    });
    let wb = w.clone();
    let tb = run_as(&b, move |b| wb.attach_old(&b, &bytes));
    let (reused, buf_p) = tp.join().unwrap();
    let attached = tb.join().unwrap();
    w.check_recycle(reused, &b, attached.as_ref());
    if let Some(buf) = attached {
        ok_or_killed("B's release", w.release(buf));
    }
    ok_or_killed("P's release", w.release(buf_p));
    // The kept bytes' reference was taken over by Q before the race.
    conclude(&w, v, &[(&p, 0), (&b, 0)])
}

#[test]
fn a_recycler_racing_an_old_handle_killed_at_every_step_of_its_recycle() {
    at_every_crash_point("(e) recycler killed", 2, 5, |n| {
        recycle_races_old_handle(Victim::A, n)
    });
}

#[test]
fn an_old_handle_racing_a_recycler_killed_at_every_step_of_its_attach() {
    at_every_crash_point("(e) old handle's attacher killed", 2, 2, |n| {
        recycle_races_old_handle(Victim::B, n)
    });
}

/// (f) A memfd pool: P recycles its memfd (then writes the next use's data) while Q
/// receives the handle P sent, attaches it, reads it and releases it. Either the
/// recycle finds Q's reference (in flight, then held) and rolls back, or it comes after
/// Q let go; a live Q never reads another use (P1), and once Q is done a live P's
/// recycle reuses the memfd, a killed Q's slot reclaimed on the way (P3 for a memfd
/// pool: [`World::memfd_finish`]).
fn memfd_recycle_races_consumer(victim: Victim, n: u64) -> bool {
    let w = World::new(7);
    let (p, buf_p, q, rx) = w.memfd_pool_setup();
    let v = if let Victim::A = victim { &p } else { &q };
    w.kernel.kill_at_step(v.pid(), n);
    let wp = w.clone();
    let tp = run_as(&p, move |_| {
        wp.memfd_recycle(&buf_p);
        buf_p
    });
    let (wq, sender) = (w.clone(), p.pid());
    let tq = run_as(&q, move |q| wq.memfd_consume(&q, &rx, sender));
    let buf_p = tp.join().unwrap();
    let attached = tq.join().unwrap();
    // The race is over: the checks below must not kill the survivor.
    w.kernel.call_off_kill(v.pid());
    let killed = w.kernel.is_killed(v.pid());
    w.memfd_finish(&p, buf_p, attached);
    killed
}

#[test]
fn a_memfd_pools_recycler_racing_its_consumer_killed_at_every_step_of_its_recycle() {
    at_every_crash_point("(f) memfd recycler killed", 2, 2, |n| {
        memfd_recycle_races_consumer(Victim::A, n)
    });
}

#[test]
fn a_memfd_pools_consumer_racing_its_recycler_killed_at_every_step_of_its_attach_and_release() {
    at_every_crash_point("(f) memfd consumer killed", 2, 2, |n| {
        memfd_recycle_races_consumer(Victim::B, n)
    });
}

/// Positions of model (g) at which R's next sweep was armed to take F over.
static ARMED: AtomicU64 = AtomicU64::new(0);

/// (g) A stalled finalizer: nobody live holds the segment (its creator C died with a
/// handle in flight); a sweeper F runs its finalize up to its n-th step and stops
/// there, alive; R sweeps until F was asked to run again the bound less one times
/// (`World::stalled_setup`). Then F resumes, R sweeps once more (taking F over if F
/// holds the finalizer word) and B attaches C's handle, all at once. F's tombstones
/// and R's are each its own, so neither undoes the other's: one unlinks, or B holds a
/// segment still named (P1, P2), and nothing is left stuck (P5, P3).
fn stalled_finalizer(n: u64) -> bool {
    let w = World::new(8);
    let (f, r, bytes, c, armed) = w.stalled_setup(n);
    if armed {
        ARMED.fetch_add(1, Relaxed);
    }
    let stopped = f.stopped_part_way;
    let b = w.spawn();
    let wf = w.clone();
    let tf = run_as(&f.os.clone(), move |_| f.resume(&wf));
    let wr = w.clone();
    let tr = run_as(&r, move |r| ok_or_killed("R's sweep", wr.sweep(&r)));
    let wb = w.clone();
    let tb = run_as(&b, move |b| attach_check_release(&wb, &b, &bytes, c));
    tf.join().unwrap();
    tr.join().unwrap();
    tb.join().unwrap();
    check_in_flight_bound(&w, &[(&r, 0), (&b, 0)]);
    w.finish(vec![]);
    stopped
}

#[test]
fn a_finalizer_stopped_at_every_step_is_taken_over_and_resumes_harmlessly() {
    at_every_crash_point("(g) finalizer stopped", 3, 8, stalled_finalizer);
    let armed = ARMED.load(Relaxed);
    eprintln!("loom (g): executions in which R's sweep was armed to take F over: {armed}");
    assert!(
        armed > 0,
        "no position armed a takeover of the stopped finalizer"
    );
}

#[test]
fn an_opener_racing_a_creator_never_sees_a_torn_header() {
    let builder = builder(PREEMPTIONS_2);
    let executions = Arc::new(AtomicU64::new(0));
    let seen_whole = Arc::new(AtomicU64::new(0));
    let (e, s) = (executions.clone(), seen_whole.clone());
    builder.check(move || {
        e.fetch_add(1, Relaxed);
        let w = World::new(11);
        let (c, o) = (w.spawn(), w.spawn());
        let wc = w.clone();
        let tc = run_as(&c, move |c| wc.create(&c, 2).expect("C's create"));
        // The opener looks a few times, letting the creator run in between (listing
        // the names is no loom operation: without the yields, loom would only ever
        // run it before the creator).
        for _ in 0..OPEN_ATTEMPTS {
            thread::yield_now();
            for name in w.segments() {
                match segment::open_named(&o, &w.ns, &name, o.uid()) {
                    Ok(_) => {
                        s.fetch_add(1, Relaxed);
                    }
                    Err(Error::HalfCreated { .. } | Error::Gone { .. }) => {}
                    Err(e) => {
                        panic!("publish ordering violated: {name}, opened while created: {e}")
                    }
                }
            }
        }
        let buf = tc.join().unwrap();
        w.finish(vec![(c, buf)]);
    });
    let (executions, whole) = (executions.load(Relaxed), seen_whole.load(Relaxed));
    eprintln!(
        "loom publish: {executions} executions, the opener found the header whole in {whole}"
    );
    assert!(
        whole > 0,
        "no execution let the opener see a published header"
    );
}

/// (h) Claims against a finalize over the mark (`concurrency::MarkRace`): P releases
/// the only reference (slot 0, the mark at 1), H claims a slot and releases it, B
/// claims one and keeps it; nobody is killed. B keeps a segment never committed (P1);
/// at rest every taken slot is below the mark and no tombstone or finalizer word is
/// left unless committed (P5). The seal handshake reads by read-modify-writes on both
/// sides, so loom's `SeqCst` (taken for `AcqRel`) checks it; P3 while processes live
/// (the releases alone commit it) rests on the pending handshake, which it does not
/// (see [`conclude`]): shuttle's `mark_race` checks that.
#[test]
fn claims_racing_a_finalize_over_the_mark_never_hold_a_destroyed_segment() {
    let builder = builder(PREEMPTIONS_3);
    let executions = Arc::new(AtomicU64::new(0));
    let above = Arc::new(AtomicU64::new(0));
    let (e, a) = (executions.clone(), above.clone());
    let started = Instant::now();
    builder.check(move || {
        e.fetch_add(1, Relaxed);
        let w = World::new(13);
        let (p, h, b) = (w.spawn(), w.spawn(), w.spawn());
        let race = Arc::new(MarkRace::new(&p));
        let rp = race.clone();
        let tp = run_as(&p, move |p| rp.release_first(&p));
        let rh = race.clone();
        let th = run_as(&h, move |h| rh.claim_and_release(&h));
        let rb = race.clone();
        let tb = run_as(&b, move |b| rb.claim(&b));
        tp.join().unwrap();
        th.join().unwrap();
        let slot = tb.join().unwrap();
        if slot.is_some_and(|j| j >= 2) {
            a.fetch_add(1, Relaxed);
        }
        race.check(&b, slot, false);
    });
    let (executions, above) = (executions.load(Relaxed), above.load(Relaxed));
    eprintln!(
        "loom (h) mark race: {executions} executions, B took a slot above the first mark in {above}, {:.1?}",
        started.elapsed()
    );
    assert!(
        above > 0,
        "no execution let B take a slot above the mark the segment started with"
    );
}
