//! A channel sender's ledger of in-flight references, generic over the [`Os`] so that
//! the simulated kernel, loom and shuttle run the same code as production
//! ([`crate::channel`] keeps one ledger for the whole process behind a mutex).
//!
//! A file_system buffer shared in a message puts a reference *in flight*: its slot holds
//! `IN_FLIGHT | sender token` until a receiver takes it over. The ledger remembers each
//! such slot, by channel, so that a sender whose receiving end is gone gives back what
//! nobody can take over any more. Its one danger is a stale entry: a slot taken over
//! and released by its receiver, then filled again by the same sender sharing the same
//! buffer (same slot, same word) on *another* channel. The stale entry then looks in
//! flight, and giving it back when its channel closes would take the other channel's
//! reference: a live sender's handle would lose its segment (P1). Two things rule it
//! out, both inside [`Ledger::encode_and_record`], which runs with the ledger locked:
//! entries already taken over are pruned *before* the message is encoded, and a fresh
//! share that claims a slot supersedes every entry of the same mapping and slot (the
//! slot was free when it was claimed, so whatever an older entry recorded there is
//! gone), which also covers a receiver that releases between the prune and the encode.

use std::sync::Arc;

use crate::buf::ShmBuf;
use crate::error::Result;
use crate::handle::{ShareHandle, Target};
use crate::os::Os;
use crate::protocol::holders;
use crate::protocol::segment::Header;

/// An in-flight reference sent in a message (a file_system buffer's, or a pool's
/// memfd's): what the sender needs to give it back if the message can never be
/// received.
pub struct InFlightEntry<O: Os> {
    os: O,
    /// The buffer's mapping (not a reference: the sender's reference goes when its
    /// user drops it), to see whether the slot was taken over.
    map: Arc<O::Map>,
    capacity: usize,
    slot: usize,
    word: u64,
    give_back: GiveBack,
}

/// How an [`InFlightEntry`] is given back.
enum GiveBack {
    /// A named segment's: the handle's encoding, decoded and dropped, vacates the slot
    /// and finalizes (it may be the segment's last reference).
    Named { encoded: Vec<u8> },
    /// A pool's memfd's: the slot is vacated through the mapping, if the memfd is still
    /// in the use the handle was of (nothing is finalized: the kernel frees a memfd).
    Memfd { generation: u64 },
}

impl<O: Os> InFlightEntry<O> {
    /// The record of the in-flight reference `handle` (just shared from `buf`) carries,
    /// if it carries one.
    pub fn of(buf: &ShmBuf<O>, handle: &ShareHandle<O>) -> Option<InFlightEntry<O>> {
        let (f, give_back) = match &handle.target {
            Target::Named {
                in_flight: Some(f), ..
            } => (
                f,
                GiveBack::Named {
                    encoded: handle.encoded(),
                },
            ),
            Target::Anonymous {
                in_flight: Some(f), ..
            } => (
                f,
                GiveBack::Memfd {
                    generation: buf.generation(),
                },
            ),
            _ => return None,
        };
        let (map, capacity) = buf.slot_watch();
        Some(InFlightEntry {
            os: handle.os.clone(),
            map,
            capacity,
            slot: f.slot,
            word: f.word,
            give_back,
        })
    }

    /// Whether the slot still holds the in-flight reference (nobody took it over).
    fn still_in_flight(&self) -> bool {
        Header::of(&*self.map, self.capacity).and_then(|h| h.holders().slot_word(self.slot))
            == Some(self.word)
    }

    /// Whether `newer`, a reference shared after this one, was put in this one's slot:
    /// then this one's reference is gone (the slot was free when `newer` claimed it).
    fn superseded_by(&self, newer: &InFlightEntry<O>) -> bool {
        Arc::ptr_eq(&self.map, &newer.map) && self.slot == newer.slot
    }

    /// Gives the reference back if its slot still holds it (best effort: the sending
    /// process's exit releases it otherwise).
    fn give_back(self) {
        match self.give_back {
            // Decoding gives a handle that owns the in-flight reference; dropping it
            // vacates the slot if (and only if) it still holds that reference.
            GiveBack::Named { encoded } => drop(ShareHandle::from_bytes_with(&self.os, &encoded)),
            GiveBack::Memfd { generation } => {
                if let Some(header) = Header::of(&*self.map, self.capacity) {
                    let h = header.holders();
                    let _ = holders::give_back_in_flight(
                        &self.os, &h, self.slot, self.word, generation,
                    );
                }
            }
        }
    }
}

/// Every in-flight reference a process's channels have in flight, by channel.
pub struct Ledger<O: Os> {
    next_channel: u64,
    entries: Vec<(u64, InFlightEntry<O>)>,
}

impl<O: Os> Default for Ledger<O> {
    fn default() -> Self {
        Ledger::new()
    }
}

impl<O: Os> Ledger<O> {
    /// An empty ledger.
    pub const fn new() -> Ledger<O> {
        Ledger {
            next_channel: 0,
            entries: Vec::new(),
        }
    }

    /// A fresh channel id.
    pub fn new_channel(&mut self) -> u64 {
        self.next_channel += 1;
        self.next_channel
    }

    /// Drops every entry a receiver has taken over.
    fn prune(&mut self) {
        self.entries.retain(|(_, e)| e.still_in_flight());
    }

    /// The ledger's side of sending one message on `channel`: prunes, runs `encode`
    /// (which shares the message's buffers and returns the message with the records of
    /// the references it put in flight), and records them, superseding older entries of
    /// the same slots. The caller holds the ledger (its lock) throughout, so no give-back
    /// runs between the share and the record. An encoding error records nothing (its
    /// handles are dropped, giving their references back).
    pub fn encode_and_record<M>(
        &mut self,
        channel: u64,
        encode: impl FnOnce() -> Result<(M, Vec<InFlightEntry<O>>)>,
    ) -> Result<M> {
        if cfg!(shmrc_plant = "prune_after_encode") {
            // Planted: the prune after the encoding, when the re-shared slot makes a
            // stale entry look in flight again (and nothing supersedes it).
            let (message, entries) = encode()?;
            self.prune();
            self.entries
                .extend(entries.into_iter().map(|e| (channel, e)));
            return Ok(message);
        }
        self.prune();
        let (message, entries) = encode()?;
        for entry in entries {
            if !cfg!(shmrc_plant = "record_keeps_superseded") {
                self.entries.retain(|(_, old)| !old.superseded_by(&entry));
            }
            self.entries.push((channel, entry));
        }
        Ok(message)
    }

    /// How many references of `channel` are in flight, not yet taken over.
    pub fn pending(&mut self, channel: u64) -> usize {
        self.prune();
        self.entries.iter().filter(|(c, _)| *c == channel).count()
    }

    /// Takes every reference of `channel` still in flight out of the ledger (its
    /// receiving end is gone); one already taken over is dropped. Give them back with
    /// [`give_back`] once the ledger's lock is released.
    #[must_use = "the taken entries are given back by give_back"]
    pub fn take_channel(&mut self, channel: u64) -> Vec<InFlightEntry<O>> {
        self.prune();
        let (mine, others): (Vec<_>, Vec<_>) =
            self.entries.drain(..).partition(|(c, _)| *c == channel);
        self.entries = others;
        mine.into_iter().map(|(_, e)| e).collect()
    }
}

/// Gives back `entries` (taken out by [`Ledger::take_channel`]): each reference whose
/// slot still holds it is released.
pub fn give_back<O: Os>(entries: Vec<InFlightEntry<O>>) {
    for entry in entries {
        entry.give_back();
    }
}
