//! The protocol rooms: everything that decides who holds a segment and who may destroy
//! it, written once over the [`Os`](crate::os::Os) trait, with no I/O of its own beyond
//! what that trait gives, so the simulated kernel, loom, shuttle, the model and the
//! exhaustive check step the very code production runs (`docs/PROTOCOL.md`).
//!
//! - [`holders`]: the slot words and the resumable operations on them (claim, transfer,
//!   release, finalize, recycle, the seal handshake);
//! - [`attach`]: a segment opened, taken hold of (the handle's reference taken over or
//!   a slot claimed, the generation checked, a stale use's slot given back), and what
//!   an attach expects of the segment;
//! - [`segment`]: a segment's header (where the holder words live) and its file;
//! - [`service_segment`]: a pub/sub service's named header and its take-over;
//! - [`sweep`]: what sweeps and the manager reclaim from a namespace;
//! - [`queue`]: the pub/sub sample queue's resumable steps.
//!
//! Nothing here imports a user room (`buf`, `pool`, `channel`, `pubsub`, `manager`,
//! `cuda`): `tests/layering.rs` guards it.

#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod attach;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod holders;
// The subscriber drives `Take` step by step (it opens a sample segment the first time
// a descriptor names one); `take` and `take_within`, which run a take over a fixed
// sample table, serve the checkers only.
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub, dead_code))]
pub(crate) mod queue;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod segment;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod service_segment;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod sweep;
