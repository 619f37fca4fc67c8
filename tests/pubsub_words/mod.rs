//! A publish/subscribe service's shared words for the queue's tests on the simulated
//! kernel (`sim_pubsub`, `shuttle_pubsub`): entries (state, head, tail, ring), samples
//! (holder slots, finalizer, pending, generation) and the wake word, in plain memory
//! (the queue's steps take words, not a segment), and the publisher's loan-and-publish.

use shmrc::Result;
use shmrc::checkers::holders::{self, Holders, Recycled, held_word};
use shmrc::checkers::os::sim::SimOs;
use shmrc::checkers::pubsub::queue::{self, Descriptor, Entry, Policy, Published, Queue};
use shmrc::checkers::sync::{AtomicU64, Ordering::SeqCst};

/// The words of one service.
pub struct Words {
    entries: Vec<Vec<AtomicU64>>,
    samples: Vec<Vec<AtomicU64>>,
    wake: AtomicU64,
}

fn words(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

impl Words {
    /// `entries` entries with rings of `cap`, `samples` samples each held by
    /// `publisher` (its pool's own slot 0), every entry free.
    pub fn new(publisher: &SimOs, entries: usize, samples: usize, cap: usize) -> Words {
        let w = Words {
            entries: (0..entries).map(|_| words(3 + cap)).collect(),
            samples: (0..samples).map(|_| words(1 + entries + 3)).collect(),
            wake: AtomicU64::new(0),
        };
        for s in &w.samples {
            s[0].store(held_word(publisher.token()), SeqCst);
        }
        w
    }

    /// Runs `f` over the queue view and the samples' holder views.
    pub fn with<R>(&self, f: impl FnOnce(&Queue<'_>, &[Holders<'_>]) -> R) -> R {
        let slots = 1 + self.entries.len();
        let entries: Vec<Entry<'_>> = self
            .entries
            .iter()
            .map(|w| Entry::new(&w[0], &w[1], &w[2], &w[3..]))
            .collect();
        let samples: Vec<Holders<'_>> = self
            .samples
            .iter()
            .map(|w| {
                Holders::new(&w[..slots], &w[slots], &w[slots + 1]).with_generation(&w[slots + 2])
            })
            .collect();
        f(&Queue::new(&entries, &samples, &self.wake), &samples)
    }

    /// The slot words of sample `s`.
    pub fn slots(&self, s: usize) -> Vec<u64> {
        let slots = 1 + self.entries.len();
        self.samples[s][..slots]
            .iter()
            .map(|w| w.load(SeqCst))
            .collect()
    }

    /// The state word of entry `e`.
    pub fn state(&self, e: usize) -> u64 {
        self.entries[e][0].load(SeqCst)
    }
}

/// The publisher's loan of sample `s` (its pool's recycle) and publish of it; `None`
/// if the sample is lent (the recycle found a holder).
pub fn loan_and_publish(
    os: &SimOs,
    words: &Words,
    s: usize,
    policy: Policy,
) -> Result<Option<Published>> {
    words.with(|q, samples| {
        let Recycled::Reused { generation, .. } = holders::recycle(os, &samples[s], 0)? else {
            return Ok(None);
        };
        let d = Descriptor::new(s, generation).expect("a small sample index");
        queue::publish(os, q, Some(d), policy).map(Some)
    })
}
