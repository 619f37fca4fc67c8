//! shmrc's sharing protocol as state machines: no I/O, no clock.
//!
//! Two levels, one per question:
//! - [`oracle`]: what users see. Processes (alive or dead), segments (named or
//!   unlinked), who holds what, handles in flight, the strategy switch; each operation
//!   (create, attach, share, release, kill, sweep, set_strategy) is one transition. The
//!   model-based tests in `tests/` and the `refcount` fuzz target run the real protocol
//!   on the simulated OS beside it and require the two to agree after every step.
//! - [`protocol`]: how it is done. The holder words of `src/protocol/holders/` (slots, the
//!   finalizer word, the pending flag) and each process's position inside claim,
//!   transfer, release and finalize, one transition per atomic step, with a crash
//!   possible between any two. Its holder steps are production's own
//!   (`shmrc::checkers::holders::{Claim, Finalize}::step`, `transfer_step`), stepped on the
//!   state's words. `proofs/` explores it exhaustively.
//! - [`pubsub`]: publish/subscribe's sample queue (`src/pubsub/`) as users see it:
//!   entries, rings of descriptors, each sample's columns; `tests/model_pubsub.rs`
//!   runs the real queue beside it.
//!
//! Built with `SHMRC_PLANT=…` (see `docs/VERIFICATION.md`), [`protocol`] runs
//! the bugged production steps; [`oracle`] never changes: it is the specification the
//! bugged code must then disagree with.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The planted bug the library under the model was built with (`SHMRC_PLANT`), if any.
pub use shmrc::checkers::PLANTED;

pub mod oracle;
pub mod protocol;
pub mod pubsub;
