//! shmrc's publish/subscribe (`shmrc::pubsub`): the contender issue 33 item 6 is
//! about. Not on this branch's `main` yet (the API is being built on `pubsub-api`), so
//! the run reports it as missing, with no numbers, until this module drives it.

/// Why this build has no shmrc publish/subscribe contender, or `None` once it has one.
pub fn missing_because() -> Option<&'static str> {
    Some("shmrc::pubsub::{Publisher, Subscriber} are not on main yet (branch pubsub-api)")
}
