//! [`attach`]: a process takes hold of a segment it opened, as the resumable [`Attach`]
//! (the handle's in-flight reference taken over, or a slot claimed; then the generation
//! checked; a slot of a stale use given back), and what it expects of the segment
//! first ([`Expect`], [`Expect::check`]).
//!
//! The user rooms keep only the glue: `src/buf/mod.rs` opens the segment (or takes a
//! cached mapping), checks it against what the handle says, runs [`attach`] and maps
//! its outcome to an [`Error`](crate::error::Error), finalizing a named segment whose
//! slot a stale attach gave back; the subscriber (`src/pubsub/subscriber.rs`) checks a
//! sample's row with [`Expect::Row`]. The exhaustive check (`shmrc-model`) steps this
//! same [`Attach`], so what it proves of an attach is about this code.
//!
//! # The steps
//! [`Attach::begin`] compares the segment's generation with the handle's, before
//! anything is taken and with no crash point of its own (it writes nothing): an old
//! handle fails there, cheaply. Then, each step after a crash point
//! ([`run_steps`](crate::protocol::holders::run_steps)):
//! 1. take the handle's in-flight reference over ([`holders::transfer_step`] from its
//!    in-flight word to our held word); if its slot no longer holds it (the sender
//!    died and a finalize reclaimed it, or it was attached already), the same step
//!    starts a claim;
//! 2. or claim a slot ([`Claim`], stepped to its end: its own crash points);
//! 3. the check that counts: the generation read *after* our slot is taken
//!    ([`holders::generation_is`]): a recycle either saw the slot taken (and rolled
//!    back) or bumped the generation before it could be taken, so a match means the
//!    data is the handle's use for as long as the slot is held;
//! 4. a stale use: give the slot back ([`holders::transfer_step`] to `FREE`). The caller
//!    finalizes a named segment after that (a memfd's kernel frees it).
//!
//! # Why pub/sub's take keeps its own generation step
//! A subscriber's [`Take`](crate::protocol::queue::Take) also transfers a reference and
//! then compares a generation, but it is not this sequence:
//! - a stale take gives the slot back to the publisher's *in-flight* word, not to `FREE`
//!   (the reference is the one a true descriptor of that column names: a forged one
//!   aimed at it must not lose it);
//! - no crash point separates its transfer from its check (they are one step of the
//!   take, whose state the subscriber keeps between its steps);
//! - its generation is the descriptor's 40 bits, compared under a mask.
//!
//! # Planted bugs
//! Built with `SHMRC_PLANT=NAME` (shmrc's build.rs sets `cfg(shmrc_plant = "NAME")`;
//! `docs/VERIFICATION.md`, `.ci/planted-bugs`):
//! - `attach_skips_late_check`: the generation check after the slot is taken (step 3)
//!   passes whatever the generation, so an old handle that passed the early check
//!   before a recycle bumped the generation ends holding the segment's next use. (The
//!   early check still works: unlike `recycle_skips_generation`, which makes
//!   [`holders::generation_is`] say yes to both.)
//! - `share_key_unchecked` ([`Expect::check`]): a handle's share key is not compared.
//! - `memfd_release_keeps_slot` (also in `src/buf/mod.rs`'s release): a memfd's stale
//!   attach gives nothing back, so its slot stays taken.

use std::task::Poll;

use crate::error::{Error, Result};
use crate::local::SegmentKey;
use crate::os::Os;
use crate::protocol::holders::{
    self, Claim, ClaimError, FREE, Holders, Operation, StepOs, held_word, run_steps,
};
use crate::protocol::segment::Fields;
use crate::token::Token;

/// What a handle says of its segment, as an attach compares it with the header: built
/// from the handle's own description (`HandleMeta::expected`, in `src/handle.rs`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Expected {
    /// The segment's share key: the secret that shows the handle was made from the
    /// segment itself, not forged from its name.
    pub share_key: u64,
    /// The segment's identity (creator, creation time, nonce).
    pub key: SegmentKey,
    /// Data length in bytes.
    pub data_len: usize,
    /// Holder slots (0 for a plain file_descriptor buffer).
    pub capacity: usize,
    /// The use (generation) the handle describes.
    pub generation: u64,
}

/// What an attach expects of the segment it opens.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Expect {
    /// The one a handle describes (identity, size and generation).
    Handle(Expected),
    /// The use (generation) an inherited buffer is of (a reattach after `fork`).
    Generation(u64),
    /// A row of a publish/subscribe service's sample table: the segment the publisher
    /// made for it, with the row's share key and a slot per subscriber entry.
    Row {
        /// The publisher.
        creator: Token,
        /// The row's share key.
        share_key: u64,
        /// The slots: the publisher's and one per entry.
        capacity: usize,
    },
}

impl Expect {
    /// Checks the segment's header `fields` (`segment` names it in errors) against what
    /// is expected of it, before anything is taken. A handle whose share key differs is
    /// [`Error::Malformed`] (bytes forged from a listing of `/dev/shm`, or damaged); one
    /// that describes another segment, or a row whose segment is not the publisher's,
    /// is [`Error::Corrupted`]. An inherited buffer's generation is checked by the
    /// attach itself ([`Attach::begin`], [`Attach::step`]), not here.
    pub fn check(&self, fields: &Fields, segment: &str) -> Result<()> {
        match *self {
            Expect::Handle(expected) => check_handle(&expected, fields, segment),
            Expect::Generation(_) => Ok(()),
            Expect::Row {
                creator,
                share_key,
                capacity,
            } => {
                if fields.creator != creator
                    || fields.share_key != share_key
                    || fields.layout.capacity != capacity
                {
                    return Err(Error::Corrupted {
                        segment: segment.to_owned(),
                        what: "not the sample the service's table names (creator, share key or slots differ)"
                            .into(),
                    });
                }
                Ok(())
            }
        }
    }

    /// The use (generation) the attach must find the segment in, if one is expected.
    pub fn generation(&self) -> Option<u64> {
        match *self {
            Expect::Handle(expected) => Some(expected.generation),
            Expect::Generation(g) => Some(g),
            Expect::Row { .. } => None,
        }
    }
}

fn check_handle(expected: &Expected, fields: &Fields, segment: &str) -> Result<()> {
    // First, and whatever else agrees: bytes forged from a listing of /dev/shm carry
    // everything right but this. (Planted bug `share_key_unchecked`: not compared.)
    if expected.share_key != fields.share_key && !cfg!(shmrc_plant = "share_key_unchecked") {
        return Err(Error::Malformed {
            what: "share handle",
            why: format!(
                "its share key is not {segment}'s: the bytes were not made from this \
                 segment by ShareHandle::into_bytes (forged from its name, or damaged); \
                 nothing was taken"
            ),
        });
    }
    if expected.key != fields.key()
        || expected.data_len != fields.layout.data_len
        || expected.capacity != fields.layout.capacity
    {
        return Err(Error::Corrupted {
            segment: segment.to_owned(),
            what: "the handle does not describe this segment (creator, nonce, length or capacity differ)".into(),
        });
    }
    Ok(())
}

/// Why an [`Attach`] holds nothing.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum AttachError {
    /// The segment is in another use (generation) than the one expected: recycled since
    /// the handle was made. Nothing is held. `gave_back`: a slot was taken and given
    /// back (the caller then finalizes a named segment, as a release does).
    Stale {
        /// Whether a slot was taken and then given back.
        gave_back: bool,
    },
    /// No slot could be taken (see [`ClaimError`]).
    Claim(ClaimError),
}

/// Where an [`Attach`] stands: at the crash point before one of its shared steps.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum AttachAt {
    /// Take the handle's in-flight reference over: CAS slot `slot` from `from` (the
    /// in-flight word) to our held word; if it no longer holds `from`, claim instead.
    Transfer {
        /// The slot of the in-flight reference.
        slot: usize,
        /// Its in-flight word.
        from: u64,
    },
    /// Inside the claim of a slot for our held word.
    Claim(Claim),
    /// Slot `slot` is ours: check the generation ([`holders::generation_is`]).
    CheckGeneration {
        /// The slot taken.
        slot: usize,
    },
    /// The segment is in another use: give slot `slot` back (to `FREE`).
    GiveBack {
        /// The slot taken.
        slot: usize,
    },
}

/// [`attach`] as a resumable operation: each [`Attach::step`] runs the code between two
/// crash points. Production runs it to its end; the exhaustive check (`shmrc-model`)
/// steps it, interleaved with other processes' steps, from every state it reaches. It
/// keeps the stage it stands at and the generation it expects (and whether the segment
/// is a memfd, for a planted bug), nothing read from memory: the generation for an
/// error is read by the caller at the end.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct Attach {
    /// The generation the segment must be in (`None`: any, nothing checked).
    expected: Option<u64>,
    /// Whether the segment is a memfd (planted bug `memfd_release_keeps_slot` only).
    memfd: bool,
    at: AttachAt,
}

impl Attach {
    /// Starts an attach to the holder words `h` by the process `os` runs: the early
    /// generation check (with `expected`), which takes nothing and has no crash point
    /// of its own; then the first step stands at a transfer of the handle's in-flight
    /// reference `in_flight` (its slot and word), or, without one, at a claim. `memfd`:
    /// the segment is a memfd (it changes nothing but under a planted bug).
    ///
    /// `Err(Stale { gave_back: false })`: an old handle, refused before anything was
    /// taken; `Err(Claim(Gone))`: a segment without slots and no reference to take.
    pub fn begin(
        os: &impl StepOs,
        h: &Holders<'_>,
        expected: Option<u64>,
        in_flight: Option<(usize, u64)>,
        memfd: bool,
    ) -> std::result::Result<Attach, AttachError> {
        if let Some(expected) = expected {
            // Early and cheap: an old handle fails before it takes anything.
            if !holders::generation_is(h, expected) {
                return Err(AttachError::Stale { gave_back: false });
            }
        }
        let at = match in_flight {
            Some((slot, from)) => AttachAt::Transfer { slot, from },
            None => claim_at(os, h)?,
        };
        Ok(Attach {
            expected,
            memfd,
            at,
        })
    }

    /// Where it stands (the checkers' bookkeeping: before its slot is taken, the
    /// handle's reference is still the handle's).
    #[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
    pub fn at(&self) -> AttachAt {
        self.at
    }

    /// Puts its claim, if it stands inside one, in retry round `round` (see
    /// [`Claim::set_round`]); elsewhere it changes nothing.
    #[cfg_attr(not(feature = "checkers"), allow(dead_code))] // used by the checkers
    pub fn set_round(&mut self, round: usize) {
        if let AttachAt::Claim(claim) = &mut self.at {
            claim.set_round(round);
        }
    }

    /// Runs from the crash point it stands at to the next one (`Pending`), or to its
    /// end: the slot now held, or why none is.
    pub fn step(
        &mut self,
        os: &impl StepOs,
        h: &Holders<'_>,
    ) -> Poll<std::result::Result<usize, AttachError>> {
        match &mut self.at {
            AttachAt::Transfer { slot, from } => {
                let slot = *slot;
                if holders::transfer_step(h, slot, *from, held_word(os.current())) {
                    return self.taken(slot);
                }
                // The sender died and its reference was reclaimed, or the handle was
                // attached already: a slot of our own, in this same step.
                match claim_at(os, h) {
                    Ok(at) => self.at = at,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            AttachAt::Claim(claim) => match claim.step(os, h) {
                Poll::Pending => {}
                Poll::Ready(Ok(slot)) => return self.taken(slot),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(AttachError::Claim(e))),
            },
            AttachAt::CheckGeneration { slot } => {
                let slot = *slot;
                let Some(expected) = self.expected else {
                    return Poll::Ready(Ok(slot));
                };
                // The check that counts: after our slot is taken, no recycle can pass
                // it. (Planted bug `attach_skips_late_check`: it passes whatever the
                // generation.)
                if cfg!(shmrc_plant = "attach_skips_late_check")
                    || holders::generation_is(h, expected)
                {
                    return Poll::Ready(Ok(slot));
                }
                self.at = AttachAt::GiveBack { slot };
            }
            AttachAt::GiveBack { slot } => {
                // Planted bug `memfd_release_keeps_slot`: a memfd's slot stays taken.
                let gave_back = if self.memfd && cfg!(shmrc_plant = "memfd_release_keeps_slot") {
                    false
                } else {
                    holders::transfer_step(h, *slot, held_word(os.current()), FREE)
                };
                return Poll::Ready(Err(AttachError::Stale { gave_back }));
            }
        }
        Poll::Pending
    }

    /// Slot `slot` is ours: the generation check is next, if one is expected.
    fn taken(&mut self, slot: usize) -> Poll<std::result::Result<usize, AttachError>> {
        if self.expected.is_none() {
            return Poll::Ready(Ok(slot));
        }
        self.at = AttachAt::CheckGeneration { slot };
        Poll::Pending
    }
}

/// The first position of a claim of a slot of `h` for our held word; a segment without
/// slots is [`ClaimError::Gone`] at once, as [`holders::claim`] says.
fn claim_at(os: &impl StepOs, h: &Holders<'_>) -> std::result::Result<AttachAt, AttachError> {
    if h.capacity() == 0 {
        return Err(AttachError::Claim(ClaimError::Gone));
    }
    Ok(AttachAt::Claim(Claim::new(held_word(os.current()))))
}

/// Holds a segment for the process `os` runs, given its holder words `h`: takes over
/// the in-flight reference `in_flight` (slot, word) if its slot still has it, else
/// claims a slot; with `expected`, the segment must be in that use (generation), before
/// and after the slot is taken, or the slot is given back (see the module docs). A
/// crash point before each step. Returns the slot now held, or why none is (a named
/// segment whose slot was given back is the caller's to finalize).
pub fn attach<O: Os>(
    os: &O,
    h: &Holders<'_>,
    expected: Option<u64>,
    in_flight: Option<(usize, u64)>,
    memfd: bool,
) -> Result<std::result::Result<usize, AttachError>> {
    let op = Operation::new(os);
    let mut attach = match Attach::begin(&op, h, expected, in_flight, memfd) {
        Ok(attach) => attach,
        Err(e) => return Ok(Err(e)),
    };
    run_steps(os, || attach.step(&op, h))
}

#[cfg(all(test, not(any(shmrc_loom, shmrc_shuttle))))]
mod tests {
    use super::*;
    use crate::protocol::holders::in_flight_word;
    use crate::protocol::holders::tests::{Fixed, token, words};
    use crate::protocol::segment::Layout;
    use crate::sync::{AtomicU64, Ordering::SeqCst};

    /// `me` runs and `others` live.
    fn os(me: Token, others: &[Token]) -> Fixed {
        Fixed {
            me,
            live: others.to_vec(),
        }
    }

    fn run(
        attach: &mut Attach,
        os: &Fixed,
        h: &Holders<'_>,
    ) -> (usize, Result<usize, AttachError>) {
        let mut steps = 0;
        loop {
            steps += 1;
            if let Poll::Ready(done) = attach.step(os, h) {
                return (steps, done);
            }
        }
    }

    #[test]
    fn an_attach_takes_the_handles_reference_over_then_checks_the_generation() {
        let (me, sender) = (token(10), token(11));
        let slots = words(&[held_word(sender), in_flight_word(sender), FREE]);
        let (finalizer, pending, generation) =
            (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(2));
        let h = Holders::new(&slots, &finalizer, &pending).with_generation(&generation);
        let in_flight = Some((1, in_flight_word(sender)));
        let mut attach = Attach::begin(&os(me, &[sender]), &h, Some(2), in_flight, false).unwrap();
        assert!(matches!(attach.at(), AttachAt::Transfer { slot: 1, .. }));
        // The transfer, then the generation check: two steps, a crash point before each.
        assert_eq!(run(&mut attach, &os(me, &[sender]), &h), (2, Ok(1)));
        assert_eq!(slots[1].load(SeqCst), held_word(me));
    }

    #[test]
    fn an_old_handle_is_refused_before_it_takes_anything() {
        let (me, sender) = (token(10), token(11));
        let slots = words(&[held_word(sender), in_flight_word(sender)]);
        let (finalizer, pending, generation) =
            (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(1));
        let h = Holders::new(&slots, &finalizer, &pending).with_generation(&generation);
        let in_flight = Some((1, in_flight_word(sender)));
        let begun = Attach::begin(&os(me, &[sender]), &h, Some(0), in_flight, false);
        assert_eq!(begun, Err(AttachError::Stale { gave_back: false }));
        assert_eq!(
            slots[1].load(SeqCst),
            in_flight_word(sender),
            "nothing taken"
        );
    }

    #[test]
    fn a_recycle_between_the_two_checks_makes_the_attach_give_its_slot_back() {
        // A kept copy of a handle (no in-flight reference): its early check passes, then
        // the creator's recycle completes (the generation bumped, every other slot free
        // again) before the claim takes a slot; the check after the claim must see it.
        let (me, creator) = (token(10), token(11));
        let slots = words(&[held_word(creator), FREE]);
        let (finalizer, pending, generation) =
            (AtomicU64::new(FREE), AtomicU64::new(0), AtomicU64::new(0));
        let h = Holders::new(&slots, &finalizer, &pending).with_generation(&generation);
        let mut attach = Attach::begin(&os(me, &[creator]), &h, Some(0), None, false).unwrap();
        assert!(matches!(attach.at(), AttachAt::Claim(_)));
        generation.store(1, SeqCst);
        let (_, done) = run(&mut attach, &os(me, &[creator]), &h);
        assert_eq!(
            done,
            Err(AttachError::Stale { gave_back: true }),
            "the late generation check let a handle of use 0 hold use 1"
        );
        assert_eq!(slots[1].load(SeqCst), FREE, "the slot given back");
    }

    #[test]
    fn a_segment_without_slots_is_gone_to_an_attach_without_a_reference() {
        let (slots, finalizer, pending) = (words(&[]), AtomicU64::new(FREE), AtomicU64::new(0));
        let h = Holders::new(&slots, &finalizer, &pending);
        let begun = Attach::begin(&os(token(10), &[]), &h, None, None, false);
        assert_eq!(begun, Err(AttachError::Claim(ClaimError::Gone)));
    }

    fn fields(creator: Token, share_key: u64, capacity: usize) -> Fields {
        Fields {
            layout: Layout::new(64, capacity).unwrap(),
            creator,
            uid: 1000,
            pid_namespace: 1,
            created_at_nanos: 1,
            nonce: 7,
            share_key,
        }
    }

    #[test]
    fn a_handle_must_carry_its_segments_share_key_and_describe_it() {
        let f = fields(token(11), 42, 3);
        let expected = Expected {
            share_key: 42,
            key: f.key(),
            data_len: 64,
            capacity: 3,
            generation: 0,
        };
        assert!(Expect::Handle(expected).check(&f, "s").is_ok());
        let forged = Expected {
            share_key: 41,
            ..expected
        };
        let refused = Expect::Handle(forged).check(&f, "s");
        assert!(
            matches!(refused, Err(Error::Malformed { .. }))
                || cfg!(shmrc_plant = "share_key_unchecked"),
            "{refused:?}"
        );
        let other = Expected {
            data_len: 65,
            ..expected
        };
        let refused = Expect::Handle(other).check(&f, "s");
        assert!(
            matches!(refused, Err(Error::Corrupted { .. })),
            "{refused:?}"
        );
        assert!(Expect::Generation(5).check(&f, "s").is_ok());
    }

    #[test]
    fn a_row_must_be_the_publishers_with_its_share_key_and_slots() {
        let (publisher, other) = (token(11), token(12));
        let f = fields(publisher, 42, 3);
        let row = |creator, share_key, capacity| Expect::Row {
            creator,
            share_key,
            capacity,
        };
        assert!(row(publisher, 42, 3).check(&f, "s").is_ok());
        for wrong in [
            row(other, 42, 3),
            row(publisher, 41, 3),
            row(publisher, 42, 4),
        ] {
            let refused = wrong.check(&f, "s");
            assert!(
                matches!(refused, Err(Error::Corrupted { .. })),
                "{refused:?}"
            );
        }
    }
}
