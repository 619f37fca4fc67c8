//! The seal handshake ([`SealAt`]) a finalize's commit pass and a recycle's tombstone
//! pass both end with: seal the finalizer word, re-read the mark, unseal if it grew.

use super::*;

/// Where the seal handshake stands: the sub-machine that ends a finalize's commit pass
/// ([`FinalizeAt::Seal`]) and a recycle's tombstone pass ([`RecycleAt::Seal`]) once
/// the slots below the mark they read are their tombstones (`docs/PROTOCOL.md` §5, "The
/// mark"). Seal the finalizer word, re-read the mark after the seal, and if a claim
/// raised it meanwhile, unseal and turn the slots up to it. Each step is one access to
/// the finalizer word or the mark ([`SealAt::step`]); what follows each outcome is the
/// embedding machine's ([`Sealing`]).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum SealAt {
    /// CAS the finalizer word from ours to ours, [`SEALING`].
    Seal,
    /// Sealed: re-read the mark. Not grown past the slots turned: the seal stands;
    /// grown: unseal.
    CheckMark,
    /// The mark grew: CAS the finalizer word from ours, sealing, back to ours, then
    /// turn slots from `from` on.
    Unseal {
        /// The first slot not yet turned.
        from: usize,
    },
}

/// Where a [`SealAt`] step leads the machine that embeds it.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Sealing {
    /// The handshake's next step.
    Next(SealAt),
    /// Sealed, and the mark has not grown past the slots turned: go on (a finalize
    /// commits, a recycle bumps the generation).
    Stands,
    /// Unsealed after the mark grew (the bound is raised to it): turn the slots from
    /// `from` on.
    Unsealed {
        /// The first slot not yet turned.
        from: usize,
    },
    /// The finalizer word is not ours (taken over while we stood still): give up the
    /// tombstones (a finalize rolls them back, a recycle reopens them).
    Lost,
}

impl SealAt {
    /// Runs this step on the finalizer word `mine` (ours, not sealing) with `bound`, the
    /// mark last read (every slot below it turned), which the re-read raises if the mark
    /// grew.
    pub(super) fn step(self, h: &Holders<'_>, mine: u64, bound: &mut usize) -> Sealing {
        match self {
            SealAt::Seal => {
                // SeqCst: after our last tombstone, before our re-read of the mark: a
                // claimer reads the finalizer word after its read (or raise) of the
                // mark, so it sees the seal or we see its mark (docs/PROTOCOL.md §5).
                if h.finalizer
                    .compare_exchange(mine, mine | SEALING, SeqCst, SeqCst)
                    .is_err()
                {
                    Sealing::Lost
                } else {
                    Sealing::Next(SealAt::CheckMark)
                }
            }
            SealAt::CheckMark => {
                // SeqCst, a read-modify-write (in `mark_latest`): after the seal.
                let mark = h.mark_latest();
                if mark <= *bound {
                    Sealing::Stands
                } else {
                    let from = *bound;
                    *bound = mark;
                    Sealing::Next(SealAt::Unseal { from })
                }
            }
            SealAt::Unseal { from } => {
                // SeqCst: the seal goes before we turn the slots up to the new mark.
                if h.finalizer
                    .compare_exchange(mine | SEALING, mine, SeqCst, SeqCst)
                    .is_err()
                {
                    Sealing::Lost
                } else {
                    Sealing::Unsealed { from }
                }
            }
        }
    }
}
