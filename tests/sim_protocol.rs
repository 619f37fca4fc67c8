//! The real protocol and user API on the simulated kernel, with a process killed at
//! *every* step (every `crash_point`) of create, share, attach, release and sweep in
//! turn. After each run: no live holder lost its data (P1), nothing outside the
//! namespace was touched and nothing unlinked twice (P2), a sweep leaves the namespace
//! empty and every object freed (P3), only the expected errors appeared (P4), and
//! hostile words in a header are recovered (P5).
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::handle::ShareHandleExt;
use shmrc::checkers::holders::Outcome;
use shmrc::checkers::namespace::NamespaceExt;
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimKernel, SimOs, UnlinkRace};
use shmrc::checkers::segment::HEADER_BYTES;
use shmrc::checkers::sweep::{Action, SweepReport, inspect, sweep_after_deaths, sweep_with};
use shmrc::checkers::token::TokenExt;
use shmrc::checkers::transport;
use shmrc::{CreateOptions, Error, Namespace, Result, ShareHandle, ShmBuf, Strategy};

const UID: u32 = 1000;
const PAYLOAD: &[u8] = b"the data a live holder must keep seeing";

fn ns() -> Namespace {
    Namespace::new("shmrc-sim").unwrap()
}

fn options(capacity: usize) -> CreateOptions {
    CreateOptions::new()
        .strategy(Strategy::FileSystem)
        .namespace(ns())
        .capacity(capacity)
}

fn create(os: &SimOs, capacity: usize) -> Result<ShmBuf<SimOs>> {
    let buf = ShmBuf::create_with(os, 64, &options(capacity))?;
    buf.write_at(0, PAYLOAD)?;
    Ok(buf)
}

fn share_bytes(buf: &ShmBuf<SimOs>) -> Result<Vec<u8>> {
    buf.share()?.into_bytes()
}

fn attach(os: &SimOs, bytes: &[u8]) -> Result<ShmBuf<SimOs>> {
    ShmBuf::attach(ShareHandle::from_bytes_with(os, bytes)?)
}

fn assert_reads_payload(buf: &ShmBuf<SimOs>) {
    let mut out = vec![0u8; PAYLOAD.len()];
    buf.read_at(0, &mut out).unwrap();
    assert_eq!(out, PAYLOAD, "a live holder's data changed or vanished");
}

/// Sweeps as a fresh process (the manager's or `shmrc sweep`'s role) and checks the
/// kernel is left with nothing: no name, no object with memory.
fn sweep_and_assert_clean(kernel: &SimKernel, mut leftovers: Vec<ShmBuf<SimOs>>) {
    let sweeper = kernel.spawn(UID);
    sweep_with(&sweeper, &ns(), false).unwrap();
    assert!(
        kernel.names().is_empty(),
        "leaked names: {:?}",
        kernel.names()
    );
    leftovers.clear();
    assert_eq!(kernel.objects_alive(), 0, "memory not freed");
}

/// Runs `scenario(kernel, n)` for n = 0, 1, 2, … until the victim's operation runs to
/// its end without reaching its n-th crash point (every crash position explored). The
/// scenario returns whether the victim was killed *during* the operation. Returns how
/// many positions were explored.
fn at_every_step(mut scenario: impl FnMut(&SimKernel, u64) -> bool) -> u64 {
    for n in 0..10_000 {
        let kernel = SimKernel::new(n);
        if !scenario(&kernel, n) {
            assert!(n > 0, "the victim was never killed: the scenario is wrong");
            return n;
        }
    }
    panic!("the victim never finished: a step loop does not end");
}

/// The only error a killed process may see is `Killed`.
fn ok_or_killed<T>(r: Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(Error::Killed) => None,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[test]
fn a_creator_killed_at_any_step_leaves_nothing_after_a_sweep() {
    let explored = at_every_step(|kernel, n| {
        let a = kernel.spawn(UID);
        kernel.kill_at_step(a.pid(), n);
        let buf = ok_or_killed(create(&a, 4));
        let killed = kernel.is_killed(a.pid());
        kernel.kill(a.pid());
        sweep_and_assert_clean(kernel, buf.into_iter().collect());
        killed
    });
    assert!(
        explored >= 4,
        "create has a crash point between each of its steps: {explored}"
    );
}

#[test]
fn a_receiver_killed_at_any_step_of_attach_never_harms_the_others() {
    at_every_step(|kernel, n| {
        let (a, b, c) = (kernel.spawn(UID), kernel.spawn(UID), kernel.spawn(UID));
        let buf_a = create(&a, 4).unwrap();
        let for_b = share_bytes(&buf_a).unwrap();
        let for_c = share_bytes(&buf_a).unwrap();
        kernel.kill_at_step(b.pid(), n);
        let buf_b = ok_or_killed(attach(&b, &for_b));
        let killed = kernel.is_killed(b.pid());
        let buf_c = attach(&c, &for_c).unwrap();
        assert_reads_payload(&buf_c);
        drop(buf_a);
        // Whatever B left (a held slot), a sweep reclaims once B is dead, and C keeps
        // its data. If B died before taking over its in-flight reference, that
        // reference stays with its sender A while A lives (P1: a handle in flight from
        // a live sender keeps the segment).
        if killed {
            sweep_with(&kernel.spawn(UID), &ns(), false).unwrap();
            assert_eq!(kernel.names().len(), 1, "C still holds it");
            assert_reads_payload(&buf_c);
        }
        let outcome = buf_c.release().unwrap().unwrap().outcome;
        let b_took_over = buf_b.is_some();
        if b_took_over && !killed {
            assert_eq!(outcome, Outcome::InUse, "B holds it");
        }
        kernel.kill(a.pid());
        kernel.kill(b.pid());
        sweep_and_assert_clean(kernel, buf_b.into_iter().collect());
        killed
    });
}

#[test]
fn a_sender_killed_at_any_step_of_share_never_harms_the_holders() {
    at_every_step(|kernel, n| {
        let (a, b, c) = (kernel.spawn(UID), kernel.spawn(UID), kernel.spawn(UID));
        let buf_a = create(&a, 4).unwrap();
        let buf_b = attach(&b, &share_bytes(&buf_a).unwrap()).unwrap();
        kernel.kill_at_step(a.pid(), n);
        // The handle may or may not come out; if it does, C attaches it.
        let buf_c = ok_or_killed(share_bytes(&buf_a)).map(|bytes| match attach(&c, &bytes) {
            Ok(buf) => Some(buf),
            Err(e) => panic!("B holds the segment, so C's attach must work: {e}"),
        });
        let killed = kernel.is_killed(a.pid());
        kernel.kill(a.pid());
        sweep_with(&kernel.spawn(UID), &ns(), false).unwrap();
        assert_reads_payload(&buf_b);
        if let Some(Some(buf_c)) = &buf_c {
            assert_reads_payload(buf_c);
        }
        drop(buf_c);
        assert_eq!(buf_b.release().unwrap().unwrap().outcome, Outcome::Unlinked);
        sweep_and_assert_clean(kernel, vec![buf_a]);
        killed
    });
}

#[test]
fn the_last_holder_killed_at_any_step_of_release_leaves_nothing_after_a_sweep() {
    at_every_step(|kernel, n| {
        let (a, b) = (kernel.spawn(UID), kernel.spawn(UID));
        let buf_a = create(&a, 3).unwrap();
        let buf_b = attach(&b, &share_bytes(&buf_a).unwrap()).unwrap();
        drop(buf_a);
        kernel.kill_at_step(b.pid(), n);
        let released = ok_or_killed(buf_b.release());
        if let Some(finalized) = released {
            assert_eq!(finalized.unwrap().outcome, Outcome::Unlinked);
        }
        let killed = kernel.is_killed(b.pid());
        sweep_and_assert_clean(kernel, vec![]);
        killed
    });
}

#[test]
fn a_holder_killed_at_any_step_of_release_leaves_the_other_holder_its_data() {
    at_every_step(|kernel, n| {
        let (a, b, c) = (kernel.spawn(UID), kernel.spawn(UID), kernel.spawn(UID));
        let buf_a = create(&a, 3).unwrap();
        let buf_b = attach(&b, &share_bytes(&buf_a).unwrap()).unwrap();
        let buf_c = attach(&c, &share_bytes(&buf_a).unwrap()).unwrap();
        drop(buf_a);
        kernel.kill_at_step(b.pid(), n);
        let _ = ok_or_killed(buf_b.release());
        let killed = kernel.is_killed(b.pid());
        sweep_with(&kernel.spawn(UID), &ns(), false).unwrap();
        assert_eq!(kernel.names().len(), 1, "C holds it");
        assert_reads_payload(&buf_c);
        // C can still share it (every other slot is usable again: no tombstone left
        // for nothing, P5), and a dropped handle gives its reference back.
        let handles: Vec<_> = (0..2).map(|_| buf_c.share().unwrap()).collect();
        drop(handles);
        assert_eq!(buf_c.release().unwrap().unwrap().outcome, Outcome::Unlinked);
        sweep_and_assert_clean(kernel, vec![]);
        killed
    });
}

#[test]
fn a_sweeper_killed_at_any_step_is_taken_over_and_a_late_attacher_is_safe() {
    at_every_step(|kernel, n| {
        let (a, b, s1, e) = (
            kernel.spawn(UID),
            kernel.spawn(UID),
            kernel.spawn(UID),
            kernel.spawn(UID),
        );
        let buf_a = create(&a, 3).unwrap();
        let stale = share_bytes(&buf_a).unwrap();
        let buf_b = attach(&b, &share_bytes(&buf_a).unwrap()).unwrap();
        kernel.kill(a.pid());
        kernel.kill(b.pid());
        kernel.kill_at_step(s1.pid(), n);
        let _ = ok_or_killed(sweep_with(&s1, &ns(), false));
        let killed = kernel.is_killed(s1.pid());
        // A handle whose sender is dead: attaching either revives the segment (it was
        // not yet committed to destruction) or says it is gone, never anything else.
        let late = match attach(&e, &stale) {
            Ok(buf) => {
                assert_reads_payload(&buf);
                sweep_with(&kernel.spawn(UID), &ns(), false).unwrap();
                assert_eq!(kernel.names().len(), 1, "E holds it: a sweep must keep it");
                assert_reads_payload(&buf);
                assert_eq!(buf.release().unwrap().unwrap().outcome, Outcome::Unlinked);
                None
            }
            Err(Error::Gone { .. }) => None,
            Err(other) => panic!("a late attach saw {other}"),
        };
        sweep_and_assert_clean(kernel, vec![buf_a, buf_b].into_iter().chain(late).collect());
        killed
    });
}

/// Byte offset of header word `index` (see the layout table in `segment.rs`).
fn word(index: usize) -> usize {
    index * 8
}

#[test]
fn hostile_slot_and_finalizer_words_are_recovered() {
    let kernel = SimKernel::new(7);
    let (a, b, dead) = (kernel.spawn(UID), kernel.spawn(UID), kernel.spawn(UID));
    kernel.kill(dead.pid());
    let buf_a = create(&a, 4).unwrap();
    let buf_b = attach(&b, &share_bytes(&buf_a).unwrap()).unwrap();
    let name = buf_a.name().unwrap().to_owned();
    let slot = |i: usize| HEADER_BYTES + 8 * i;
    // Slot 2: a word no protocol step writes (both flags: in flight and a tombstone's;
    // bit 62 alone now names a tombstone's finalizer); slot 3: a tombstone of nobody;
    // the finalizer word: a dead process, as if a finalizer had died half-way.
    assert!(kernel.poke(&name, slot(2), &(0xC000_0000_0000_0001u64).to_ne_bytes()));
    assert!(kernel.poke(&name, slot(3), &u64::MAX.to_ne_bytes()));
    assert!(kernel.poke(&name, word(12), &dead.token().word().to_ne_bytes()));
    // B's release takes the abandoned finalizer over, meets A and rolls back; it passes
    // only the slots below the mark (2: A's and B's), so the words above stay.
    assert_eq!(buf_b.release().unwrap().unwrap().outcome, Outcome::InUse);
    let census = buf_a.census().unwrap();
    assert_eq!(
        (census.tomb, census.live, census.dead),
        (1, 1, 1),
        "a release leaves the words above the mark"
    );
    // A sweep scans every slot: it raises the mark over the words above it, reclaims
    // the garbage word, takes the stray tombstone over, meets A and rolls it back.
    let report = sweep_with(&kernel.spawn(UID), &ns(), false).unwrap();
    assert_eq!(report.reclaimed, 1, "the garbage word");
    assert_eq!(
        buf_a.census().unwrap().tomb,
        0,
        "the stray tombstone was rolled back"
    );
    let census = buf_a.census().unwrap();
    assert_eq!((census.free, census.live, census.dead), (3, 1, 0));
    assert_reads_payload(&buf_a);
    assert_eq!(buf_a.release().unwrap().unwrap().outcome, Outcome::Unlinked);
    sweep_and_assert_clean(&kernel, vec![]);
}

#[test]
fn a_pools_memfd_from_another_pid_namespace_is_refused_and_a_plain_one_is_not() {
    let kernel = SimKernel::new(1);
    let a = kernel.spawn(UID);
    let stranger = kernel.spawn_in_namespace(UID, 99);
    let (to_stranger, at_stranger) = kernel.stream_pair(&a, &stranger);
    let fd = CreateOptions::new().strategy(Strategy::FileDescriptor);
    let pooled = ShmBuf::create_recyclable(&a, 64, &fd.clone().capacity(4)).unwrap();
    let plain = ShmBuf::create_with(&a, 64, &fd).unwrap();
    let handles = vec![pooled.share().unwrap(), plain.share().unwrap()];
    transport::send_with(&a, &to_stranger, b"", handles).unwrap();
    let mut received = transport::recv_with(&stranger, &at_stranger)
        .unwrap()
        .handles;
    let plain_there = ShmBuf::attach(received.pop().unwrap());
    assert!(
        plain_there.is_ok(),
        "a memfd without slots: {plain_there:?}"
    );
    let err = ShmBuf::attach(received.pop().unwrap()).unwrap_err();
    assert!(matches!(err, Error::OtherPidNamespace { .. }), "{err}");
    // The refused handle could not give its in-flight reference back from there: it
    // stays with its sender, A, whose pool would give the buffer back at its idle
    // timeout.
    assert_eq!(pooled.census().unwrap().in_flight, 1);
    drop((plain_there, plain, pooled));
    assert_eq!(
        kernel.objects_alive(),
        0,
        "the memfds went with their descriptors"
    );
}

#[test]
fn a_segment_from_another_pid_namespace_is_refused() {
    let kernel = SimKernel::new(1);
    let a = kernel.spawn(UID);
    let stranger = kernel.spawn_in_namespace(UID, 99);
    let buf = create(&a, 4).unwrap();
    let err = attach(&stranger, &share_bytes(&buf).unwrap()).unwrap_err();
    assert!(matches!(err, Error::OtherPidNamespace { .. }), "{err}");
    let report = sweep_with(&stranger, &ns(), false).unwrap();
    assert_eq!(
        report.unlinked, 0,
        "a sweeper of another namespace cannot judge liveness: it skips"
    );
    assert!(matches!(
        report.segments[0].action,
        shmrc::checkers::sweep::Action::Skipped(Error::OtherPidNamespace { .. })
    ));
    // The refused handle could not give its in-flight reference back from the other
    // namespace: it stays with its sender, A, until A exits.
    assert_eq!(buf.release().unwrap().unwrap().outcome, Outcome::InUse);
    kernel.kill(a.pid());
    sweep_and_assert_clean(&kernel, vec![]);
}

#[test]
fn a_receiver_at_its_fd_limit_gets_too_many_fds() {
    let kernel = SimKernel::new(2);
    let (a, b) = (kernel.spawn(UID), kernel.spawn(UID));
    let (to_b, at_b) = kernel.stream_pair(&a, &b);
    let opts = CreateOptions::new().strategy(Strategy::FileDescriptor);
    let bufs: Vec<_> = (0..3)
        .map(|_| ShmBuf::create_with(&a, 64, &opts).unwrap())
        .collect();
    let handles = bufs.iter().map(|b| b.share().unwrap()).collect();
    transport::send_with(&a, &to_b, b"three", handles).unwrap();
    kernel.set_fd_limit(b.pid(), kernel.open_files(b.pid()) + 2);
    let err = transport::recv_with(&b, &at_b).unwrap_err();
    assert!(matches!(err, Error::TooManyFds { .. }), "{err}");
    drop(bufs);
    assert_eq!(
        kernel.open_files(b.pid()),
        0,
        "nothing of the refused message stays open"
    );
}

#[test]
fn creation_beyond_the_space_limit_is_no_space_and_leaves_nothing() {
    let kernel = SimKernel::new(3);
    let a = kernel.spawn(UID);
    kernel.set_space_limit(Some(4096));
    for strategy in shmrc::all_sharing_strategies() {
        let opts = options(4).strategy(*strategy);
        let err = ShmBuf::create_with(&a, 1 << 20, &opts).unwrap_err();
        assert!(matches!(err, Error::NoSpace { .. }), "{strategy}: {err}");
    }
    assert!(kernel.names().is_empty());
    assert_eq!(kernel.objects_alive(), 0);
}

#[test]
fn handles_and_fds_travel_over_the_sim_transport() {
    let kernel = SimKernel::new(4);
    let (a, b) = (kernel.spawn(UID), kernel.spawn(UID));
    let (to_b, at_b) = kernel.stream_pair(&a, &b);
    let named = create(&a, 4).unwrap();
    let anon = ShmBuf::create_with(
        &a,
        64,
        &CreateOptions::new().strategy(Strategy::FileDescriptor),
    )
    .unwrap();
    anon.write_at(0, PAYLOAD).unwrap();
    transport::send_with(
        &a,
        &to_b,
        b"two",
        vec![named.share().unwrap(), anon.share().unwrap()],
    )
    .unwrap();
    let msg = transport::recv_with(&b, &at_b).unwrap();
    assert_eq!(msg.payload, b"two");
    let got: Vec<_> = msg
        .handles
        .into_iter()
        .map(|h| ShmBuf::attach(h).unwrap())
        .collect();
    for buf in &got {
        assert_reads_payload(buf);
    }
    assert_eq!(named.census().unwrap().live, 2);
    drop((named, anon, got));
    sweep_and_assert_clean(&kernel, vec![]);
}

#[test]
fn a_half_created_segment_of_another_pid_namespace_is_left_to_its_own_sweepers() {
    let kernel = SimKernel::new(5);
    let creator = kernel.spawn_in_namespace(UID, 99);
    let here = kernel.spawn(UID);
    // Created, not yet sized or published: only the name says who made it.
    let name = ns().segment_name(UID, 99, creator.token(), 1);
    let file = shmrc::checkers::os::Os::shm_create(&creator, &name).unwrap();
    // From here the creator's pid means nothing: it must not be judged dead.
    let report = sweep_with(&here, &ns(), false).unwrap();
    assert!(matches!(
        report.segments[0].action,
        shmrc::checkers::sweep::Action::Skipped(Error::OtherPidNamespace { .. })
    ));
    assert_eq!(kernel.names(), vec![name.clone()]);
    // In its own namespace it is being created, and removed once its creator is dead.
    let neighbour = kernel.spawn_in_namespace(UID, 99);
    let report = sweep_with(&neighbour, &ns(), false).unwrap();
    assert!(matches!(
        report.segments[0].action,
        shmrc::checkers::sweep::Action::BeingCreated
    ));
    kernel.kill(creator.pid());
    assert_eq!(sweep_with(&neighbour, &ns(), false).unwrap().unlinked, 1);
    drop(file);
    sweep_and_assert_clean(&kernel, vec![]);
}

/// The manager's sweep after deaths takes the dead creators' segments first: a sweeper
/// killed right after its first segment has unlinked the dead creator's segment, though
/// its name sorts last (and a plain sweep, killed at the same step, has not).
#[test]
fn a_sweep_after_deaths_takes_the_dead_creators_segments_first() {
    // The crash points a sweep passes for a namespace of one such segment.
    let steps_for_one = {
        let kernel = SimKernel::new(11);
        let creator = kernel.spawn(UID);
        let _held = create(&creator, 2).unwrap();
        kernel.kill(creator.pid());
        let sweeper = kernel.spawn(UID);
        sweep_after_deaths(&sweeper, &ns(), &[creator.token()], None).unwrap();
        assert!(kernel.names().is_empty());
        kernel.steps(sweeper.pid())
    };
    for creators_first in [true, false] {
        let kernel = SimKernel::new(11);
        let (first, last) = (kernel.spawn(UID), kernel.spawn(UID));
        let held = (create(&first, 2).unwrap(), create(&last, 2).unwrap());
        let (first_name, last_name) = (
            held.0.name().unwrap().to_owned(),
            held.1.name().unwrap().to_owned(),
        );
        assert!(first_name < last_name, "pids sort the names");
        kernel.kill(first.pid());
        kernel.kill(last.pid());
        let sweeper = kernel.spawn(UID);
        kernel.kill_at_step(sweeper.pid(), steps_for_one);
        let swept = if creators_first {
            sweep_after_deaths(&sweeper, &ns(), &[last.token()], None)
        } else {
            sweep_with(&sweeper, &ns(), false)
        };
        // Killed part-way: the pass goes on, but every call it makes fails without
        // effect (as a SIGKILLed process makes none).
        assert!(kernel.is_killed(sweeper.pid()), "{swept:?}");
        let expected_left = if creators_first {
            first_name
        } else {
            last_name
        };
        assert_eq!(kernel.names(), vec![expected_left], "{creators_first}");
    }
}

/// A handle tells its buffer's length and name before it is attached (a receiver may
/// size or route by them), and its `Debug` names the segment.
#[test]
fn a_share_handle_says_its_length_and_name_before_it_is_attached() {
    let kernel = SimKernel::new(14);
    let owner = kernel.spawn(UID);
    let named = create(&owner, 2).unwrap();
    let handle = named.share().unwrap();
    assert_eq!((handle.len(), handle.is_empty()), (64, false));
    assert_eq!(handle.name(), named.name());
    assert!(handle.name().is_some_and(|n| n.starts_with("shmrc-sim.")));
    let shown = format!("{handle:?}");
    assert!(shown.contains(named.name().unwrap()), "{shown}");
    drop(handle);
    let fd_options = CreateOptions::new().strategy(Strategy::FileDescriptor);
    let anonymous = ShmBuf::create_with(&owner, 3, &fd_options).unwrap();
    let handle = anonymous.share().unwrap();
    assert_eq!(
        (handle.len(), handle.is_empty(), handle.name()),
        (3, false, None)
    );
    drop((handle, anonymous, named));
    sweep_and_assert_clean(&kernel, Vec::new());
}

/// A dry-run sweep says it was one, and changes nothing; a real one says it was not.
#[test]
fn a_sweep_report_says_whether_it_was_a_dry_run() {
    let kernel = SimKernel::new(13);
    let creator = kernel.spawn(UID);
    let _held = create(&creator, 2).unwrap();
    kernel.kill(creator.pid());
    let sweeper = kernel.spawn(UID);
    let dry = sweep_with(&sweeper, &ns(), true).unwrap();
    assert!(dry.dry_run);
    assert_eq!(kernel.names().len(), 1, "a dry run unlinks nothing");
    let real = sweep_with(&sweeper, &ns(), false).unwrap();
    assert!(!real.dry_run);
    assert!(kernel.names().is_empty());
}

/// A sweep scoped to the dead's own segments (the manager's, after a death) opens what
/// they created and what they attached, and leaves the rest of the namespace untouched
/// even where a dead holder's slot waits there (another death's sweep, or a whole
/// sweep, reclaims it).
#[test]
fn a_sweep_of_the_deads_own_segments_touches_nothing_else() {
    let kernel = SimKernel::new(12);
    let (creator, attacher, bystander, other) = (
        kernel.spawn(UID),
        kernel.spawn(UID),
        kernel.spawn(UID),
        kernel.spawn(UID),
    );
    let created = create(&creator, 3).unwrap();
    let shared = create(&bystander, 3).unwrap();
    let unrelated = create(&other, 3).unwrap();
    let attached = attach(&attacher, &share_bytes(&shared).unwrap()).unwrap();
    let on_unrelated = attach(&attacher, &share_bytes(&unrelated).unwrap()).unwrap();
    let names: Vec<String> = [&created, &shared, &unrelated]
        .iter()
        .map(|b| b.name().unwrap().to_owned())
        .collect();
    kernel.kill(creator.pid());
    kernel.kill(attacher.pid());
    drop((created, attached, on_unrelated));
    // The dead attacher told only `shared`: `unrelated` keeps its dead slot.
    let told: std::collections::BTreeSet<String> = [names[1].clone()].into();
    let sweeper = kernel.spawn(UID);
    let report = sweep_after_deaths(
        &sweeper,
        &ns(),
        &[creator.token(), attacher.token()],
        Some(&told),
    )
    .unwrap();
    let opened: Vec<&str> = report.segments.iter().map(|s| s.name.as_str()).collect();
    let mut expected = vec![names[0].as_str(), names[1].as_str()];
    expected.sort();
    assert_eq!(opened, expected, "only the dead's own segments are opened");
    // Reclaimed: the dead creator's slot in its segment, the dead attacher's in `shared`.
    assert_eq!((report.unlinked, report.reclaimed), (1, 2), "{report:?}");
    let mut left = kernel.names();
    left.sort();
    let mut want = vec![names[1].clone(), names[2].clone()];
    want.sort();
    assert_eq!(left, want);
    // A whole sweep then reclaims the dead attacher's slot in `unrelated`.
    let whole = sweep_with(&sweeper, &ns(), false).unwrap();
    assert_eq!(whole.reclaimed, 1, "{whole:?}");
    drop((shared, unrelated));
    sweep_and_assert_clean(&kernel, Vec::new());
}

/// Another user plants an empty file under one of our segment names, with a dead
/// "creator", where a sweep would take it for our half-created segment: the sweep
/// reports it as another user's, leaves it, and still sweeps the rest (P3 is not
/// another user's to stop).
#[test]
fn a_name_planted_by_another_user_stops_no_sweep() {
    let kernel = SimKernel::new(13);
    let (dead, intruder) = (kernel.spawn(UID), kernel.spawn(UID + 1));
    let held = create(&dead, 2).unwrap();
    let ours = held.name().unwrap().to_owned();
    let planted = ns().segment_name(UID, dead.pid_namespace(), dead.token(), 0);
    assert!(planted < ours, "the planted name comes first");
    drop(intruder.shm_create(&planted).unwrap());
    kernel.kill(dead.pid());
    let sweeper = kernel.spawn(UID);
    let report = sweep_with(&sweeper, &ns(), false).unwrap();
    assert_eq!(report.unlinked, 1, "{report:?}");
    let planted_report = report.segments.iter().find(|s| s.name == planted).unwrap();
    assert!(
        matches!(
            planted_report.action,
            shmrc::checkers::sweep::Action::Skipped(Error::OtherUser { owner, .. }) if owner == UID + 1
        ),
        "{planted_report:?}"
    );
    assert_eq!(kernel.names(), vec![planted]);
    drop(held);
}

/// An inspection (`shmrc ls`) reports every segment with its creator's liveness and
/// what a sweep would do, and changes nothing.
#[test]
fn an_inspection_reports_each_segment_and_its_creators_liveness_and_changes_nothing() {
    let kernel = SimKernel::new(15);
    let (live, dead, dead_attacher) = (kernel.spawn(UID), kernel.spawn(UID), kernel.spawn(UID));
    let kept = create(&live, 2).unwrap();
    let orphan = create(&dead, 2).unwrap();
    let attached = attach(&dead_attacher, &share_bytes(&orphan).unwrap()).unwrap();
    kernel.kill(dead.pid());
    kernel.kill(dead_attacher.pid());
    let mut names = kernel.names();
    names.sort();
    let looker = kernel.spawn(UID);
    let report = inspect(&looker, &ns()).unwrap();
    assert!(report.dry_run);
    assert_eq!((report.reclaimed, report.unlinked), (2, 1), "{report:?}");
    let seen: Vec<&str> = report.segments.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(seen, names.iter().map(String::as_str).collect::<Vec<_>>());
    let of = |buf: &ShmBuf<SimOs>| {
        report
            .segments
            .iter()
            .find(|s| Some(s.name.as_str()) == buf.name())
            .unwrap()
    };
    let (k, o) = (of(&kept), of(&orphan));
    assert!(k.creator_alive && !o.creator_alive);
    assert_eq!((k.reclaimed, o.reclaimed), (0, 2));
    assert!(matches!(k.action, Action::Kept), "{:?}", k.action);
    assert!(matches!(o.action, Action::Unlinked), "{:?}", o.action);
    assert_eq!(o.census.unwrap().dead, 2);
    assert_eq!(k.census.unwrap().live, 1);
    assert_eq!(k.parts.creator, live.token());
    // Nothing changed: the same names, and a real sweep still finds the dead slots.
    let mut after = kernel.names();
    after.sort();
    assert_eq!(after, names);
    let real = sweep_with(&looker, &ns(), false).unwrap();
    assert_eq!((real.reclaimed, real.unlinked), (2, 1), "{real:?}");
    drop((orphan, attached));
    assert_reads_payload(&kept);
    drop(kept);
    sweep_and_assert_clean(&kernel, vec![]);
}

/// A dry run reports a dead creator's half-created segment as one it would remove,
/// and leaves it; the real sweep removes it.
#[test]
fn a_dry_run_leaves_a_dead_creators_half_created_segment() {
    let kernel = SimKernel::new(16);
    let creator = kernel.spawn(UID);
    // Created, not yet sized or published: only the name says who made it.
    let name = ns().segment_name(UID, creator.pid_namespace(), creator.token(), 1);
    let file = creator.shm_create(&name).unwrap();
    kernel.kill(creator.pid());
    let sweeper = kernel.spawn(UID);
    let dry = sweep_with(&sweeper, &ns(), true).unwrap();
    assert_eq!(dry.unlinked, 1, "{dry:?}");
    assert!(matches!(dry.segments[0].action, Action::RemovedHalfCreated));
    assert_eq!(
        kernel.names(),
        vec![name.clone()],
        "a dry run removes nothing"
    );
    let real = sweep_with(&sweeper, &ns(), false).unwrap();
    assert_eq!(real.unlinked, 1, "{real:?}");
    assert!(matches!(
        real.segments[0].action,
        Action::RemovedHalfCreated
    ));
    drop(file);
    sweep_and_assert_clean(&kernel, vec![]);
}

/// What a sweep whose unlink of `name` (its creator dead) ran into `race` must report: for
/// `UnlinkedFirst`, `Vanished` (another sweeper removed the name first), nothing
/// counted; for `Refused`, the kernel's error as `Skipped`, the name left, and the same
/// sweeper's next sweep unlinks it.
fn assert_unlink_race_reported(
    kernel: &SimKernel,
    sweeper: &SimOs,
    name: &str,
    race: UnlinkRace,
    report: &SweepReport,
) {
    assert_eq!(report.unlinked, 0, "{race:?}: {report:?}");
    // The dead creator is reported dead, also when the unlink failed.
    assert!(!report.segments[0].creator_alive, "{race:?}: {report:?}");
    let action = &report.segments[0].action;
    match race {
        UnlinkRace::UnlinkedFirst => {
            assert!(matches!(action, Action::Vanished), "{action:?}");
            assert!(kernel.names().is_empty());
        }
        UnlinkRace::Refused => {
            assert!(
                matches!(
                    action,
                    Action::Skipped(Error::Os {
                        call: "shm_unlink",
                        ..
                    })
                ),
                "{action:?}"
            );
            assert_eq!(kernel.names(), vec![name.to_owned()]);
            let again = sweep_with(sweeper, &ns(), false).unwrap();
            assert_eq!(again.unlinked, 1, "{again:?}");
        }
    }
}

/// A dead creator's half-created segment whose unlink races or is refused.
#[test]
fn a_half_created_segments_unlink_that_races_or_is_refused_is_reported_as_such() {
    for race in [UnlinkRace::UnlinkedFirst, UnlinkRace::Refused] {
        let kernel = SimKernel::new(17);
        let creator = kernel.spawn(UID);
        let name = ns().segment_name(UID, creator.pid_namespace(), creator.token(), 1);
        drop(creator.shm_create(&name).unwrap());
        kernel.kill(creator.pid());
        kernel.race_next_unlink(&name, race);
        let sweeper = kernel.spawn(UID);
        let report = sweep_with(&sweeper, &ns(), false).unwrap();
        assert_unlink_race_reported(&kernel, &sweeper, &name, race, &report);
        sweep_and_assert_clean(&kernel, vec![]);
    }
}

/// The last step of a finalize (a dead creator's segment, its slot reclaimed) finds
/// the name already unlinked (a finalizer that died right after its unlink, taken
/// over), or is refused by the kernel.
#[test]
fn a_finalize_whose_unlink_races_or_is_refused_is_reported_as_such() {
    for race in [UnlinkRace::UnlinkedFirst, UnlinkRace::Refused] {
        let kernel = SimKernel::new(18);
        let creator = kernel.spawn(UID);
        let held = create(&creator, 2).unwrap();
        let name = held.name().unwrap().to_owned();
        kernel.kill(creator.pid());
        kernel.race_next_unlink(&name, race);
        let sweeper = kernel.spawn(UID);
        let report = sweep_with(&sweeper, &ns(), false).unwrap();
        // The header and slots read before the unlink are reported whatever became of it.
        let seg = &report.segments[0];
        assert!(
            seg.header.is_some() && seg.census.is_some(),
            "{race:?}: {seg:?}"
        );
        if race == UnlinkRace::UnlinkedFirst {
            assert_eq!(report.reclaimed, 1, "{report:?}");
        }
        assert_unlink_race_reported(&kernel, &sweeper, &name, race, &report);
        drop(held);
        sweep_and_assert_clean(&kernel, vec![]);
    }
}

/// Bytes forged from what a listing shows (everything but the share key), given to a
/// holder of the segment (the local path) and to a process that does not hold it: each
/// refuses them before anything is taken over or given back (before any crash point:
/// no step of it can be interrupted), a forged handle dropped unattached gives nothing
/// back, and the real receiver still takes over its in-flight reference (P1 for the
/// handle in flight).
#[test]
fn bytes_forged_without_the_share_key_take_over_and_give_back_nothing() {
    let kernel = SimKernel::new(0);
    let owner = kernel.spawn(UID);
    let service = kernel.spawn(UID);
    let receiver = kernel.spawn(UID);
    let buf = create(&owner, 4).unwrap();
    let real = share_bytes(&buf).unwrap();
    let mut decoded = shmrc::checkers::handle::decode(&real, UID).unwrap();
    decoded.meta.share_key ^= 1; // a guess: wrong, as 2^64 - 1 of them are
    let forged = shmrc::checkers::handle::encode(&decoded);
    let in_flight = || {
        let report = inspect(&kernel.spawn(UID), &ns()).unwrap();
        report.segments[0].census.unwrap().in_flight
    };
    assert_eq!(in_flight(), 1);
    // The owner holds the segment (the local path); the service does not.
    for (who, process) in [("the owner", &owner), ("a service", &service)] {
        kernel.kill_at_step(process.pid(), 0);
        let refused = attach(process, &forged);
        assert!(
            matches!(&refused, Err(Error::Malformed { why, .. }) if why.contains("share key")),
            "{who}: {refused:?}"
        );
        drop(ShareHandle::from_bytes_with(process, &forged));
        assert!(!kernel.is_killed(process.pid()), "{who}: a step was taken");
        assert_eq!(
            in_flight(),
            1,
            "{who}: the real reference is still in flight"
        );
    }
    let received = attach(&receiver, &real).unwrap();
    assert_reads_payload(&received);
    assert_eq!(in_flight(), 0, "taken over by its receiver");
    for p in [&owner, &service, &receiver] {
        kernel.kill(p.pid());
    }
    sweep_and_assert_clean(&kernel, vec![received, buf]);
}
