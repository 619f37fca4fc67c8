//! A channel sender's in-flight ledger on the simulated kernel (scenarios in
//! `tests/channel_ledger/mod.rs`): one buffer on two channels, the first channel's
//! receiver attaching and releasing before the second send, killed before attaching,
//! or killed at every crash point of its attach and release in turn; the first
//! channel then closes, and the handle in flight on the second must keep its segment.
#![cfg(not(any(feature = "loom", feature = "shuttle")))]

mod channel_ledger;
mod concurrency;

use channel_ledger::{First, close, one_buffer_two_channels, send};
use concurrency::World;
use shmrc::ledger::Ledger;

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
    let mut ledger = Ledger::<shmrc::os::sim::SimOs>::new();
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
