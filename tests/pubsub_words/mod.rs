//! A publish/subscribe service's shared words for the queue's tests (`sim_pubsub`,
//! `shuttle_pubsub`, `pubsub_processes`): entries (state, head, tail, ring), samples
//! (holder slots, finalizer, pending, generation) and the wake word, one after the
//! other in a slice of words (plain memory, or a real shared mapping: the queue's steps
//! take words, not a segment), and the publisher's loan-and-publish.
#![allow(dead_code)] // each test uses its part

use shmrc::Result;
use shmrc::checkers::holders::{self, Holders, Recycled, held_word};
use shmrc::checkers::os::Os;
use shmrc::checkers::pubsub::queue::{self, Descriptor, Entry, Policy, Published, Queue};
use shmrc::checkers::sync::{AtomicU64, Ordering::SeqCst};
use shmrc::checkers::token::Token;

/// Where each word of a service is.
#[derive(Copy, Clone, Debug)]
pub struct Layout {
    pub entries: usize,
    pub samples: usize,
    pub cap: usize,
}

impl Layout {
    fn entry(&self, e: usize) -> usize {
        e * (3 + self.cap)
    }
    fn slots(&self) -> usize {
        1 + self.entries
    }
    fn sample(&self, s: usize) -> usize {
        self.entry(self.entries) + s * (self.slots() + 3)
    }
    fn wake(&self) -> usize {
        self.sample(self.samples)
    }
    /// Words in all.
    pub fn len(&self) -> usize {
        self.wake() + 1
    }

    /// Every sample held by `publisher` (its pool's own slot 0), every entry free.
    pub fn initialize(&self, words: &[AtomicU64], publisher: Token) {
        for w in words {
            w.store(0, SeqCst);
        }
        for s in 0..self.samples {
            words[self.sample(s)].store(held_word(publisher), SeqCst);
        }
    }

    /// Runs `f` over the queue view and the samples' holder views of `words`.
    pub fn with<R>(
        &self,
        words: &[AtomicU64],
        f: impl FnOnce(&Queue<'_>, &[Holders<'_>]) -> R,
    ) -> R {
        let slots = self.slots();
        let entries: Vec<Entry<'_>> = (0..self.entries)
            .map(|e| {
                let b = self.entry(e);
                Entry::new(
                    &words[b],
                    &words[b + 1],
                    &words[b + 2],
                    &words[b + 3..b + 3 + self.cap],
                )
            })
            .collect();
        let samples: Vec<Holders<'_>> = (0..self.samples)
            .map(|s| {
                let b = self.sample(s);
                Holders::new(
                    &words[b..b + slots],
                    &words[b + slots],
                    &words[b + slots + 1],
                )
                .with_generation(&words[b + slots + 2])
            })
            .collect();
        f(
            &Queue::new(&entries, &samples, &words[self.wake()]),
            &samples,
        )
    }

    /// The slot words of sample `s`.
    pub fn slots_of(&self, words: &[AtomicU64], s: usize) -> Vec<u64> {
        let b = self.sample(s);
        words[b..b + self.slots()]
            .iter()
            .map(|w| w.load(SeqCst))
            .collect()
    }

    /// The state word of entry `e`.
    pub fn state(&self, words: &[AtomicU64], e: usize) -> u64 {
        words[self.entry(e)].load(SeqCst)
    }

    /// The words of entry `e`: state, head, tail, then the ring.
    pub fn entry_words<'w>(&self, words: &'w [AtomicU64], e: usize) -> &'w [AtomicU64] {
        &words[self.entry(e)..self.entry(e) + 3 + self.cap]
    }

    /// The generation word of sample `s`.
    pub fn generation_of(&self, words: &[AtomicU64], s: usize) -> u64 {
        words[self.sample(s) + self.slots() + 2].load(SeqCst)
    }
}

/// The words of one service in this process's memory.
pub struct Words {
    layout: Layout,
    words: Vec<AtomicU64>,
}

impl Words {
    /// `entries` entries with rings of `cap`, `samples` samples each held by
    /// `publisher`, every entry free.
    pub fn new(publisher: Token, entries: usize, samples: usize, cap: usize) -> Words {
        let layout = Layout {
            entries,
            samples,
            cap,
        };
        let words: Vec<AtomicU64> = (0..layout.len()).map(|_| AtomicU64::new(0)).collect();
        layout.initialize(&words, publisher);
        Words { layout, words }
    }

    /// Runs `f` over the queue view and the samples' holder views.
    pub fn with<R>(&self, f: impl FnOnce(&Queue<'_>, &[Holders<'_>]) -> R) -> R {
        self.layout.with(&self.words, f)
    }

    /// The slot words of sample `s`.
    pub fn slots(&self, s: usize) -> Vec<u64> {
        self.layout.slots_of(&self.words, s)
    }

    /// The state word of entry `e`.
    pub fn state(&self, e: usize) -> u64 {
        self.layout.state(&self.words, e)
    }

    /// The words of entry `e`: state, head, tail, then the ring (a hostile writer's
    /// way in, and the checkers' view of the ring).
    pub fn entry_words(&self, e: usize) -> &[AtomicU64] {
        self.layout.entry_words(&self.words, e)
    }

    /// Entry `e`'s queued descriptors, oldest first (the ring from `head` to `tail`),
    /// or `None` if its words break `head <= tail <= head + C`.
    pub fn queued(&self, e: usize) -> Option<Vec<u64>> {
        let w = self.entry_words(e);
        let (head, tail) = (w[1].load(SeqCst), w[2].load(SeqCst));
        let cap = self.layout.cap as u64;
        if head > tail || tail - head > cap {
            return None;
        }
        Some(
            (head..tail)
                .map(|i| w[3 + (i % cap) as usize].load(SeqCst))
                .collect(),
        )
    }

    /// The generation word of sample `s`.
    pub fn generation(&self, s: usize) -> u64 {
        self.layout.generation_of(&self.words, s)
    }

    /// The wake word.
    pub fn wake(&self) -> u64 {
        self.wake_atomic().load(SeqCst)
    }

    /// The wake word itself (what a futex sleeps on).
    pub fn wake_atomic(&self) -> &AtomicU64 {
        &self.words[self.layout.wake()]
    }
}

/// The publisher's loan of sample `s` (its pool's recycle) and publish of it, over
/// views `q` and `samples`; `None` if the sample is lent (the recycle found a holder).
pub fn loan_and_publish_in<O: Os>(
    os: &O,
    q: &Queue<'_>,
    samples: &[Holders<'_>],
    s: usize,
    policy: Policy,
) -> Result<Option<Published>> {
    let Recycled::Reused { generation, .. } = holders::recycle(os, &samples[s], 0)? else {
        return Ok(None);
    };
    let d = Descriptor::new(s, generation).expect("a small sample index");
    queue::publish(os, q, Some(d), policy).map(Some)
}

/// [`loan_and_publish_in`] over `words`, the publish trusting the subscribers whose
/// entries hold the words of `alive` (`Queue::trusting`: the publisher's liveness cache).
#[allow(dead_code)] // Only the model-based test trusts.
pub fn loan_and_publish_trusting<O: Os>(
    os: &O,
    words: &Words,
    s: usize,
    policy: Policy,
    alive: &[u64],
) -> Result<Option<Published>> {
    words.with(|q, samples| loan_and_publish_in(os, &q.trusting(alive), samples, s, policy))
}

/// [`loan_and_publish_in`] over `words`.
pub fn loan_and_publish<O: Os>(
    os: &O,
    words: &Words,
    s: usize,
    policy: Policy,
) -> Result<Option<Published>> {
    words.with(|q, samples| loan_and_publish_in(os, q, samples, s, policy))
}
