//! A sender's in-flight ledger on the simulated kernel (scenarios in
//! `tests/channel_ledger/mod.rs`; one ledger per channel's sender): one buffer on two
//! channels (or on one, then shared by hand), the first channel's
//! receiver attaching and releasing before the second send, killed before attaching,
//! or killed at every crash point of its attach and release in turn; the first
//! channel then closes, and the handle in flight on the second must keep its segment.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

mod channel_ledger;
mod concurrency;

use channel_ledger::{First, Second, close, one_buffer_two_channels, send};
use concurrency::World;
use shmrc::checkers::in_flight::{InFlightEntry, Ledger};
use shmrc::checkers::os::Os;

/// Runs the scenario with the first receiver done before the second send.
fn sequential(first: First) -> bool {
    one_buffer_two_channels(first, Second::Channel, |f| f(), |()| ())
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
    let mut channels: Vec<Ledger<_>> = (0..3).map(|_| Ledger::new()).collect();
    let mut last: Option<(usize, Vec<u8>)> = None;
    for ch in 0..channels.len() {
        let bytes = send(&mut channels[ch], &buf).expect("send");
        assert_eq!(channels[ch].pending(), 1);
        if let Some((prev, prev_bytes)) = last.replace((ch, bytes)) {
            // The previous channel's receiver takes its message over and releases it,
            // then its channel closes while this one carries the buffer.
            let r = world.spawn();
            let got = world
                .attach(&r, &prev_bytes, sender.pid())
                .unwrap()
                .unwrap();
            world.release(got).unwrap();
            close(&mut channels[prev]);
        }
    }
    let (ch, bytes) = last.unwrap();
    world.release(buf).unwrap();
    let r = world.spawn();
    let got = world
        .attach(&r, &bytes, sender.pid())
        .unwrap()
        .expect("P1: the last channel's handle keeps its segment");
    assert_eq!(channels[ch].pending(), 0);
    world.finish(vec![(r, got)]);
}

#[test]
fn an_encoding_error_records_nothing() {
    let world = World::new(5);
    let sender = world.spawn();
    let buf = world.create(&sender, 2).expect("create");
    let mut ledger = Ledger::<shmrc::checkers::os::sim::SimOs>::new();
    let err = ledger
        .encode_and_record(|| -> shmrc::Result<((), Vec<_>)> {
            Err(shmrc::Error::Timeout {
                after: std::time::Duration::ZERO,
            })
        })
        .unwrap_err();
    assert!(matches!(err, shmrc::Error::Timeout { .. }));
    assert_eq!(ledger.pending(), 0);
    world.finish(vec![(sender, buf)]);
}

#[test]
fn a_closed_channel_whose_receiver_never_attached_gives_its_reference_back() {
    let world = World::new(9);
    let sender = world.spawn();
    let buf = world.create(&sender, 2).expect("create");
    let name = buf.name().unwrap().to_owned();
    let mut ledger = Ledger::new();
    let _bytes = send(&mut ledger, &buf).expect("send");
    world.release(buf).unwrap();
    assert!(
        world.segments().contains(&name),
        "the in-flight reference keeps it"
    );
    close(&mut ledger);
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
    let (mut ch1, mut ch2) = (Ledger::new(), Ledger::new());
    let _x1 = send(&mut ch1, &x).expect("x on channel 1");
    let x2 = send(&mut ch2, &x).expect("x on channel 2");
    let y2 = send(&mut ch2, &y).expect("y on channel 2");
    assert_eq!((ch1.pending(), ch2.pending()), (1, 2));
    assert_eq!(x.census().unwrap().in_flight, 2);
    close(&mut ch1);
    assert_eq!(
        ch2.pending(),
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
    assert_eq!(ch2.pending(), 0);
    world.finish(vec![(r, gx), (r2, gy)]);
}

/// The race loom found, made to happen in order: channel 1's receiver takes its
/// reference over and releases it after the sender's prune and before its share (inside
/// the encoding), so the share reuses the slot with the same word. The share supersedes
/// channel 1's record: closing channel 1 then leaves channel 2's reference alone.
#[test]
fn a_receiver_releasing_between_the_prune_and_the_share_leaves_no_stale_entry() {
    let world = World::new(13);
    let sender = world.spawn();
    let buf = world.create(&sender, 4).expect("create");
    let (mut ch1, mut ch2) = (Ledger::new(), Ledger::new());
    let on_ch1 = send(&mut ch1, &buf).expect("send on channel 1");
    let r1 = world.spawn();
    let on_ch2 = ch2
        .encode_and_record(|| {
            let got = world.attach(&r1, &on_ch1, sender.pid())?.expect("attach");
            world.release(got)?;
            let handle = buf.share()?;
            let entries: Vec<_> = InFlightEntry::of(&buf, &handle).into_iter().collect();
            Ok((handle.into_bytes()?, entries))
        })
        .expect("send on channel 2");
    close(&mut ch1);
    world.release(buf).unwrap();
    let r2 = world.spawn();
    let got = world
        .attach(&r2, &on_ch2, sender.pid())
        .unwrap()
        .expect("P1: channel 2's handle keeps its segment");
    // Taken over: the ledger lets go of the entry (and of its mapping).
    assert_eq!(ch2.pending(), 0);
    world.finish(vec![(r2, got)]);
}

/// A buffer sent on a channel, then shared directly (`ShmBuf::share`, a handle passed by
/// other means: a transport socket, a pub/sub row) once the channel's receiver released
/// its reference: the direct share reuses the slot with the same word, and nothing
/// records it in the ledger. Closing the channel must leave the direct handle's
/// reference alone.
#[test]
fn a_direct_share_reusing_a_released_channel_slot_keeps_its_reference() {
    let world = World::new(15);
    let sender = world.spawn();
    let buf = world.create(&sender, 4).expect("create");
    let mut ledger = Ledger::new();
    let on_ch = send(&mut ledger, &buf).expect("send on the channel");
    let r1 = world.spawn();
    let got = world
        .attach(&r1, &on_ch, sender.pid())
        .unwrap()
        .expect("attach");
    world.release(got).unwrap();
    let direct = buf.share().expect("share").into_bytes().expect("bytes");
    assert_eq!(
        ledger.pending(),
        0,
        "the slot holds the same word, but a newer share's reference"
    );
    close(&mut ledger);
    world.release(buf).unwrap();
    let r2 = world.spawn();
    let got = world
        .attach(&r2, &direct, sender.pid())
        .unwrap()
        .expect("P1: the directly shared handle keeps its segment");
    world.finish(vec![(r2, got)]);
}

/// A sender's ledger keeps no record once its entries are gone (taken over, given
/// back): the process's record of in-flight shares holds only the ledgers' live
/// entries.
#[test]
fn the_record_of_in_flight_shares_holds_only_live_entries() {
    let world = World::new(19);
    let sender = world.spawn();
    let buf = world.create(&sender, 4).expect("create");
    let (mut ch1, mut ch2) = (Ledger::new(), Ledger::new());
    let on_ch1 = send(&mut ch1, &buf).expect("send on channel 1");
    let _on_ch2 = send(&mut ch2, &buf).expect("send on channel 2");
    let records = || sender.local().in_flight_shares().records();
    assert_eq!(records(), 2);
    let r1 = world.spawn();
    let got = world
        .attach(&r1, &on_ch1, sender.pid())
        .unwrap()
        .expect("attach");
    assert_eq!(ch1.pending(), 0, "taken over");
    assert_eq!(records(), 1);
    close(&mut ch2);
    assert_eq!(records(), 0, "given back");
    world.release(buf).unwrap();
    world.finish(vec![(r1, got)]);
}
