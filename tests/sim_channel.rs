//! A channel sender's in-flight ledger on the simulated kernel (scenarios in
//! `tests/channel_ledger/mod.rs`): one buffer on two channels, the first channel's
//! receiver attaching and releasing before the second send, killed before attaching,
//! or killed at every crash point of its attach and release in turn; the first
//! channel then closes, and the handle in flight on the second must keep its segment.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

mod channel_ledger;
mod concurrency;

use channel_ledger::{First, close, one_buffer_two_channels, send};
use concurrency::World;
use shmrc::checkers::ledger::{InFlightEntry, Ledger};

/// Runs the scenario with the first receiver done before the second send.
fn sequential(first: First) -> bool {
    one_buffer_two_channels(first, |f| f(), |()| ())
}

#[test]
fn a_channel_closed_after_its_receiver_released_keeps_the_other_channels_reference() {
    assert!(!sequential(First::AttachAndRelease));
}

#[test]
fn a_receiver_killed_before_attaching_loses_nothing_for_the_other_channel() {
    assert!(sequential(First::KilledBeforeAttach));
}

#[test]
fn a_receiver_killed_at_every_crash_point_loses_nothing_for_the_other_channel() {
    let mut positions = 0;
    for n in 0.. {
        if !sequential(First::KilledAt(n)) {
            break;
        }
        positions += 1;
    }
    assert!(
        positions >= 5,
        "only {positions} crash points: the receiver stopped being killed"
    );
}

#[test]
fn three_channels_each_re_sharing_the_buffer_after_the_last_receiver_released() {
    let world = World::new(3);
    let sender = world.spawn();
    let buf = world.create(&sender, 4).expect("create");
    let mut ledger = Ledger::new();
    let channels: Vec<u64> = (0..3).map(|_| ledger.new_channel()).collect();
    let mut last = None;
    for &ch in &channels {
        let bytes = send(&mut ledger, ch, &buf).expect("send");
        assert_eq!(ledger.pending(ch), 1);
        if let Some((prev, prev_bytes)) = last.replace((ch, bytes)) {
            // The previous channel's receiver takes its message over and releases it,
            // then its channel closes while this one carries the buffer.
            let r = world.spawn();
            let got = world
                .attach(&r, &prev_bytes, sender.pid())
                .unwrap()
                .unwrap();
            world.release(got).unwrap();
            close(&mut ledger, prev);
        }
    }
    let (ch, bytes) = last.unwrap();
    world.release(buf).unwrap();
    let r = world.spawn();
    let got = world
        .attach(&r, &bytes, sender.pid())
        .unwrap()
        .expect("P1: the last channel's handle keeps its segment");
    assert_eq!(ledger.pending(ch), 0);
    world.finish(vec![(r, got)]);
}

#[test]
fn an_encoding_error_records_nothing() {
    let world = World::new(5);
    let sender = world.spawn();
    let buf = world.create(&sender, 2).expect("create");
    let mut ledger = Ledger::<shmrc::checkers::os::sim::SimOs>::new();
    let ch = ledger.new_channel();
    let err = ledger
        .encode_and_record(ch, || -> shmrc::Result<((), Vec<_>)> {
            Err(shmrc::Error::Timeout {
                after: std::time::Duration::ZERO,
            })
        })
        .unwrap_err();
    assert!(matches!(err, shmrc::Error::Timeout { .. }));
    assert_eq!(ledger.pending(ch), 0);
    world.finish(vec![(sender, buf)]);
}

#[test]
fn a_closed_channel_whose_receiver_never_attached_gives_its_reference_back() {
    let world = World::new(9);
    let sender = world.spawn();
    let buf = world.create(&sender, 2).expect("create");
    let name = buf.name().unwrap().to_owned();
    let mut ledger = Ledger::new();
    let ch = ledger.new_channel();
    let _bytes = send(&mut ledger, ch, &buf).expect("send");
    world.release(buf).unwrap();
    assert!(
        world.segments().contains(&name),
        "the in-flight reference keeps it"
    );
    close(&mut ledger, ch);
    assert!(
        !world.segments().contains(&name),
        "the given-back reference was the last: the segment goes"
    );
    world.finish(vec![]);
}

/// Two buffers on two channels, one buffer on both, nothing attached: closing the first
/// channel gives back exactly its own references (a buffer's own in-flight reference on
/// the other channel, and the other buffer's, stay in flight).
#[test]
fn closing_a_channel_gives_back_its_own_references_and_no_other() {
    let world = World::new(11);
    let sender = world.spawn();
    let x = world.create(&sender, 4).expect("create x");
    let y = world.create(&sender, 4).expect("create y");
    let mut ledger = Ledger::new();
    let (ch1, ch2) = (ledger.new_channel(), ledger.new_channel());
    let _x1 = send(&mut ledger, ch1, &x).expect("x on channel 1");
    let x2 = send(&mut ledger, ch2, &x).expect("x on channel 2");
    let y2 = send(&mut ledger, ch2, &y).expect("y on channel 2");
    assert_eq!((ledger.pending(ch1), ledger.pending(ch2)), (1, 2));
    assert_eq!(x.census().unwrap().in_flight, 2);
    close(&mut ledger, ch1);
    assert_eq!(
        ledger.pending(ch2),
        2,
        "channel 2's references are still in flight"
    );
    assert_eq!(
        x.census().unwrap().in_flight,
        1,
        "only channel 1's was given back"
    );
    assert_eq!(y.census().unwrap().in_flight, 1);
    world.release(x).unwrap();
    world.release(y).unwrap();
    let r = world.spawn();
    let gx = world
        .attach(&r, &x2, sender.pid())
        .unwrap()
        .expect("x on channel 2");
    let r2 = world.spawn();
    let gy = world
        .attach(&r2, &y2, sender.pid())
        .unwrap()
        .expect("y on channel 2");
    assert_eq!(ledger.pending(ch2), 0);
    world.finish(vec![(r, gx), (r2, gy)]);
}

/// The race loom found, made to happen in order: channel 1's receiver takes its
/// reference over and releases it after the sender's prune and before its share (inside
/// the encoding), so the share reuses the slot with the same word. The new entry must
/// supersede the stale one: closing channel 1 then leaves channel 2's reference alone.
#[test]
fn a_receiver_releasing_between_the_prune_and_the_share_leaves_no_stale_entry() {
    let world = World::new(13);
    let sender = world.spawn();
    let buf = world.create(&sender, 4).expect("create");
    let mut ledger = Ledger::new();
    let (ch1, ch2) = (ledger.new_channel(), ledger.new_channel());
    let on_ch1 = send(&mut ledger, ch1, &buf).expect("send on channel 1");
    let r1 = world.spawn();
    let on_ch2 = ledger
        .encode_and_record(ch2, || {
            let got = world.attach(&r1, &on_ch1, sender.pid())?.expect("attach");
            world.release(got)?;
            let handle = buf.share()?;
            let entries: Vec<_> = InFlightEntry::of(&buf, &handle).into_iter().collect();
            Ok((handle.into_bytes()?, entries))
        })
        .expect("send on channel 2");
    close(&mut ledger, ch1);
    world.release(buf).unwrap();
    let r2 = world.spawn();
    let got = world
        .attach(&r2, &on_ch2, sender.pid())
        .unwrap()
        .expect("P1: channel 2's handle keeps its segment");
    // Taken over: the ledger lets go of the entry (and of its mapping).
    assert_eq!(ledger.pending(ch2), 0);
    world.finish(vec![(r2, got)]);
}
