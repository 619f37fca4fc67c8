//! Scenarios of a sender's in-flight ledger (`src/in_flight.rs`, the code each
//! `shmrc::channel::Sender` runs over its own ledger) on the simulated kernel, shared by the sim test
//! (`tests/sim_channel.rs`, sequential and with a receiver killed at every crash point),
//! loom (`tests/loom_channel.rs`) and shuttle (`tests/shuttle_channel.rs`).
//!
//! One sender process shares one file_system buffer on two channels, or on one
//! channel and then by hand (`ShmBuf::share`, outside any ledger). A channel is its
//! sender's ledger and the handle bytes in flight on it; a receiver attaches them
//! (takes the reference over) and releases; "the receiving end closed" is the
//! ledger's `give_back_all`, as `Sender::send` does on `Disconnected` and
//! `Sender::drop` does on a closed peer. The property (P1 for channels): **a handle in
//! flight from a live sender never loses its segment**: however the first channel's
//! receiver and close interleave with the send on the second, the second channel's
//! receiver attaches and reads the data, after the sender dropped its own buffer. Then
//! the world's P5/P3 checks: at rest, after a sweep, nothing left once all are gone.
#![allow(dead_code)]

use shmrc::Result;
use shmrc::checkers::in_flight::{InFlightEntry, Ledger};
use shmrc::checkers::os::sim::SimOs;

use super::concurrency::{Buf, World, ok_or_killed};

/// `buf` sent on `channel`: the ledger pruned, the buffer shared and the in-flight
/// reference recorded, exactly as `Sender::send` does; the handle's bytes are what the
/// socket carries.
pub fn send(ledger: &mut Ledger<SimOs>, buf: &Buf) -> Result<Vec<u8>> {
    ledger.encode_and_record(|| {
        let handle = buf.share()?;
        let entries: Vec<_> = InFlightEntry::of(buf, &handle).into_iter().collect();
        Ok((handle.into_bytes()?, entries))
    })
}

/// The receiving end of the channel whose sender owns `ledger` is gone: the sender
/// gives back what it has in flight there.
pub fn close(ledger: &mut Ledger<SimOs>) {
    ledger.give_back_all();
}

/// How the sender shares the buffer the second time.
#[derive(Clone, Copy, Debug)]
pub enum Second {
    /// On channel 2 (its own ledger).
    Channel,
    /// By hand: `ShmBuf::share`, no ledger (a handle passed by other means).
    Direct,
}

/// What a first receiver does with the handle of channel 1.
#[derive(Clone, Copy, Debug)]
pub enum First {
    /// Attaches it, then releases (a receiver that read its message and moved on).
    AttachAndRelease,
    /// Dies before attaching (killed at once).
    KilledBeforeAttach,
    /// Attaches, killed at its `n`-th crash point (sim only: kills are scheduled).
    KilledAt(u64),
}

/// One buffer on two channels (or on channel 1, then by hand: `second`); the first
/// channel's receiver does `first`, concurrently with the sender's second share when
/// `spawn` spawns a thread (loom, shuttle) or before it when it runs the closure at
/// once; then channel 1 closes, the sender drops its buffer, and the second handle's
/// receiver must attach. Each channel's sender owns its ledger. Returns whether the
/// first receiver was killed.
pub fn one_buffer_two_channels<J>(
    first: First,
    second: Second,
    spawn: impl FnOnce(Box<dyn FnOnce() + Send>) -> J,
    join: impl FnOnce(J),
) -> bool {
    let world = World::new(7);
    let sender = world.spawn();
    let (r1, r2) = (world.spawn(), world.spawn());
    let buf = world.create(&sender, 4).expect("create");
    let (mut ch1, mut ch2) = (Ledger::new(), Ledger::new());

    let on_ch1 = send(&mut ch1, &buf).expect("send on channel 1");
    let w = world.clone();
    let pid = sender.pid();
    let r1_pid = r1.pid();
    let receiver = spawn(Box::new(move || match first {
        First::KilledBeforeAttach => w.kernel.kill(r1.pid()),
        First::AttachAndRelease | First::KilledAt(_) => {
            if let First::KilledAt(n) = first {
                w.kernel.kill_at_step(r1.pid(), n);
            }
            let got = ok_or_killed("receiver 1's attach", w.attach(&r1, &on_ch1, pid));
            if let Some(Some(got)) = got {
                ok_or_killed("receiver 1's release", w.release(got));
            }
        }
    }));
    let second_handle = match second {
        Second::Channel => send(&mut ch2, &buf).expect("send on channel 2"),
        Second::Direct => buf
            .share()
            .and_then(|h| h.into_bytes())
            .expect("share by hand"),
    };
    join(receiver);
    let killed = world.kernel.is_killed(r1_pid);

    // Channel 1's receiver is gone (it released, or died): the sender gives back what
    // is in flight there, which must not be the second share's reference.
    close(&mut ch1);
    world.release(buf).expect("the sender drops its own buffer");
    let got = world
        .attach(&r2, &second_handle, pid)
        .expect("receiver 2's attach")
        .unwrap_or_else(|| panic!("P1 violated: the handle shared ({second:?}) from live sender {pid} lost its segment: {}", world.describe()));
    world.check_holder(&r2, &got);
    assert_eq!(ch2.pending(), 0, "receiver 2 took its reference over");
    close(&mut ch2);
    world.finish(vec![(r2, got)]);
    killed
}
