//! A sender's ledger of the references it put in flight, generic over the [`Os`] so
//! that the simulated kernel, loom and shuttle run the same code as production (each
//! [`crate::channel::Sender`] owns one).
//!
//! A file_system buffer (or a pool's memfd) shared in a message puts a reference *in
//! flight*: its slot holds `IN_FLIGHT | sender token` until a receiver takes it over.
//! The ledger remembers each such slot, so that a sender whose receiving end is gone
//! gives back what nobody can take over any more. Its one danger is a stale entry: a
//! slot taken over and released by its receiver, then claimed again by the same process
//! sharing the same segment (on another channel, by hand, through a mapping attached
//! again): the slot holds the same word, so the stale entry looks in flight, and giving
//! it back would take the newer reference: a live sender's handle would lose its
//! segment (P1). The slot word cannot tell the two apart; the process's record of
//! in-flight shares does ([`InFlightShares`]): a ledger records each entry's epoch
//! there, every share that claims an in-flight slot erases the record of that slot
//! (under the same lock, held across its claim), and a ledger gives back only an entry
//! whose record is still the latest, holding that lock across the check and the
//! give-back. So the ledger of one sender needs to know nothing of another's, and a
//! share made outside any ledger is seen as well.
//!
//! Planted bugs (`SHMRC_PLANT=NAME`, in [`InFlightShares`]): `share_supersedes_nothing`
//! (a claim leaves the older record in place) and `give_back_ignores_epoch` (a
//! give-back trusts the slot word alone).

use std::sync::Arc;

use crate::buf::ShmBuf;
use crate::error::Result;
use crate::handle::{ShareHandle, Target};
use crate::local::{InFlightShares, SegmentKey};
use crate::os::Os;
use crate::protocol::holders;
use crate::protocol::segment::Header;
use crate::token::Token;

/// An in-flight reference sent in a message (a file_system buffer's, or a pool's
/// memfd's): what the sender needs to give it back if the message can never be
/// received.
pub struct InFlightEntry<O: Os> {
    os: O,
    /// The buffer's mapping (not a reference: the sender's reference goes when its
    /// user drops it), to see whether the slot was taken over.
    map: Arc<O::Map>,
    capacity: usize,
    /// The sending process and the segment, with the slot: the entry's record in
    /// [`InFlightShares`].
    sender: Token,
    key: SegmentKey,
    slot: usize,
    word: u64,
    /// The record's epoch (0 until the ledger records it).
    epoch: u64,
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
            sender: match holders::Slot::decode(f.word) {
                holders::Slot::InFlight(sender) => sender,
                _ => return None,
            },
            key: handle.meta.key,
            slot: f.slot,
            word: f.word,
            epoch: 0,
            give_back,
        })
    }

    /// Whether the slot still holds the in-flight word (nobody took it over; but a
    /// newer reference of the same process has the same word: see the module docs).
    fn slot_holds_word(&self) -> bool {
        Header::of(&*self.map, self.capacity).and_then(|h| h.holders().slot_word(self.slot))
            == Some(self.word)
    }

    /// Whether this entry's reference is still in flight, read under `shares`' lock:
    /// its record is the slot's latest and the slot holds its word.
    fn still_in_flight(&self, shares: &InFlightShares) -> bool {
        shares.is_latest(self.sender, self.key, self.slot, self.epoch) && self.slot_holds_word()
    }

    /// The entry's record goes (the entry is dropped: taken over, or given back).
    fn forget(&self, shares: &mut InFlightShares) {
        shares.forget(self.sender, self.key, self.slot, self.epoch);
    }

    /// Gives the reference back (its slot still holds it: checked under the same lock
    /// by the caller; best effort: the sending process's exit releases it otherwise).
    fn give_back(self) {
        match self.give_back {
            // Decoding gives a handle that owns the in-flight reference; dropping it
            // vacates the slot if (and only if) it still holds that word.
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

/// The references one sender has in flight (a channel's [`Sender`](crate::channel)
/// owns one): recorded when a message is encoded, dropped once taken over, given back
/// when the receiving end is gone.
pub struct Ledger<O: Os> {
    entries: Vec<InFlightEntry<O>>,
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
            entries: Vec::new(),
        }
    }

    /// Drops every entry a receiver has taken over (or a newer share superseded).
    fn prune(&mut self) {
        self.entries.retain(|e| {
            let mut shares = e.os.local().in_flight_shares();
            let keep = e.still_in_flight(&shares);
            if !keep {
                e.forget(&mut shares);
            }
            keep
        });
    }

    /// The ledger's side of sending one message: prunes, runs `encode` (which shares
    /// the message's buffers and returns the message with the entries of the
    /// references it put in flight), and records them. No receiver can take a new
    /// reference over before it is recorded (its message is sent after). An encoding
    /// error records nothing (its handles are dropped, giving their references back).
    pub fn encode_and_record<M>(
        &mut self,
        encode: impl FnOnce() -> Result<(M, Vec<InFlightEntry<O>>)>,
    ) -> Result<M> {
        self.prune();
        let (message, entries) = encode()?;
        for mut entry in entries {
            entry.epoch =
                entry
                    .os
                    .local()
                    .in_flight_shares()
                    .record(entry.sender, entry.key, entry.slot);
            self.entries.push(entry);
        }
        Ok(message)
    }

    /// How many references are in flight, not yet taken over.
    pub fn pending(&mut self) -> usize {
        self.prune();
        self.entries.len()
    }

    /// Gives back every reference still in flight (the receiving end is gone); one
    /// already taken over, or superseded, is dropped. Each is checked and given back
    /// with the process's record of in-flight shares locked, so no share of the same
    /// slot runs between the two.
    pub fn give_back_all(&mut self) {
        for entry in self.entries.drain(..) {
            let os = entry.os.clone();
            let mut shares = os.local().in_flight_shares();
            let live = entry.still_in_flight(&shares);
            entry.forget(&mut shares);
            if live {
                entry.give_back();
            }
            drop(shares);
        }
    }
}
