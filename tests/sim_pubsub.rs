//! Publish/subscribe's queue through its run-to-end functions (`join`, `publish`,
//! `take`, `leave`, src/protocol/queue.rs) on the simulated kernel, with a process killed
//! at *every* crash point they pass: a subscriber killed anywhere in its life leaves the
//! other subscriber every sample and, after the publisher's next reclaim, every sample
//! recyclable (P1, P3); a publisher killed anywhere in a publish leaves the subscriber a
//! sample it can take, or none, never a held reference it cannot release, and only dead
//! words behind it. (Every interleaving of the same steps: tests/pubsub_interleavings.rs.)
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

mod pubsub_words;

use pubsub_words::Words;
use shmrc::checkers::holders::{self, FREE, Slot, held_word};
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::pubsub::queue::{self, Policy, Published, Taken, subscriber_slot};
use shmrc::{Error, Result};

const UID: u32 = 1000;
const ENTRIES: usize = 2;
const SAMPLES: usize = 2;
const CAP: usize = 2;

fn new_words(publisher: &SimOs) -> Words {
    Words::new(publisher.token(), ENTRIES, SAMPLES, CAP)
}

/// The publisher's loan of sample `s` and publish of it (drop-oldest).
fn loan_and_publish(os: &SimOs, words: &Words, s: usize) -> Result<Published> {
    Ok(
        pubsub_words::loan_and_publish(os, words, s, Policy::DropOldest)?
            .unwrap_or_else(|| panic!("sample {s} is lent")),
    )
}

/// The rest of a subscriber's life in entry `e`: take and release every sample there
/// is, leave.
fn subscriber_life(os: &SimOs, words: &Words, e: usize, publisher: &SimOs) -> Result<Vec<usize>> {
    words.with(|q, samples| {
        let mut got = Vec::new();
        loop {
            match queue::take(os, q, e, publisher.token())? {
                Taken::Sample(d) => {
                    let s = d.sample as usize;
                    got.push(s);
                    let mine = held_word(os.token());
                    assert!(holders::vacate(os, &samples[s], subscriber_slot(e), mine)?);
                }
                Taken::Empty => break,
                other => panic!("a live subscriber's take ended {other:?}"),
            }
        }
        assert!(queue::leave(os, q, e)?);
        Ok(got)
    })
}

fn ok_or_killed<T>(r: Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(Error::Killed) => None,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// Runs `scenario(kernel, n)` for n = 0, 1, … until the victim lives through it;
/// returns how many kill positions were explored.
fn at_every_step(mut scenario: impl FnMut(&SimKernel, u64) -> bool) -> u64 {
    for n in 0..10_000 {
        if !scenario(&SimKernel::new(n), n) {
            assert!(n > 3, "the victim was killed at too few steps: {n}");
            return n;
        }
    }
    panic!("the victim never finished: a step loop does not end");
}

#[test]
fn a_subscriber_killed_at_any_step_harms_no_other_and_its_samples_come_back() {
    let explored = at_every_step(|kernel, n| {
        let (p, a, b) = (kernel.spawn(UID), kernel.spawn(UID), kernel.spawn(UID));
        let words = new_words(&p);
        words.with(|q, _| {
            queue::join(&a, q).unwrap();
            queue::join(&b, q).unwrap();
        });
        loan_and_publish(&p, &words, 0).unwrap();
        loan_and_publish(&p, &words, 1).unwrap();
        // A re-joins nothing: it takes and releases from the entry it holds, then
        // leaves; killed at its n-th crash point.
        kernel.kill_at_step(a.pid(), n);
        let a_life = words.with(|q, samples| -> Result<()> {
            let e = 0;
            while let Taken::Sample(d) = queue::take(&a, q, e, p.token())? {
                let s = d.sample as usize;
                holders::vacate(&a, &samples[s], subscriber_slot(e), held_word(a.token()))?;
            }
            queue::leave(&a, q, e).map(drop)
        });
        ok_or_killed(a_life);
        let killed = kernel.is_killed(a.pid());
        kernel.kill(a.pid());
        // B, alive throughout, gets both samples, in order.
        let got = words.with(|q, samples| {
            let mut got = Vec::new();
            while let Taken::Sample(d) = queue::take(&b, q, 1, p.token()).unwrap() {
                got.push(d.sample);
                let mine = held_word(b.token());
                holders::vacate(&b, &samples[d.sample as usize], subscriber_slot(1), mine).unwrap();
            }
            got
        });
        assert_eq!(got, [0, 1], "the live subscriber lost a sample");
        // The publisher's next step gives back what A left; its loans then reuse both.
        let reclaimed = words.with(|q, _| queue::publish(&p, q, None, Policy::DropOldest));
        assert_eq!(reclaimed.unwrap().drained, 1, "A's entry is drained");
        assert_eq!(words.state(0), FREE, "A's entry is free again");
        for s in 0..SAMPLES {
            loan_and_publish(&p, &words, s).unwrap();
        }
        killed
    });
    println!("a subscriber killed at each of {explored} steps");
}

#[test]
fn a_publisher_killed_at_any_step_of_a_publish_leaves_only_dead_words() {
    let explored = at_every_step(|kernel, n| {
        let (p, b) = (kernel.spawn(UID), kernel.spawn(UID));
        let words = new_words(&p);
        let e = words.with(|q, _| queue::join(&b, q).unwrap().unwrap());
        kernel.kill_at_step(p.pid(), n);
        let published = ok_or_killed(loan_and_publish(&p, &words, 0));
        let killed = kernel.is_killed(p.pid());
        kernel.kill(p.pid());
        let got = subscriber_life(&b, &words, e, &p).unwrap();
        if published.is_some() {
            assert_eq!(
                got,
                [0],
                "a publish that ended delivered: {published:?}, n {n}"
            );
        }
        // Every slot is free, or a dead process's word or tombstone (which a finalize
        // reclaims or takes over).
        for s in 0..SAMPLES {
            for word in words.slots(s) {
                let owner = Slot::decode(word)
                    .owner()
                    .or_else(|| holders::tomb_owner(word));
                let dead = owner.is_some_and(|t| !b.is_alive(t));
                assert!(word == FREE || dead, "a live word left: {word:#x}");
            }
        }
        killed
    });
    println!("a publisher killed at each of {explored} steps");
}
