//! shmrc against iceoryx2 in one run (issue 33 item 6): the same round trip (a
//! publisher hands a sample of S bytes to N subscriber processes, each checks it,
//! lets go and acknowledges; the publisher waits for every acknowledgement) through
//! - the Unix-socket wake-up floor ([`floor`]): one byte each way, no memory shared;
//! - shmrc's pooled hand-off ([`shmrc_pool`]): a `ShmPool` loan made a `Sample`, its
//!   handle sent over `shmrc::transport`, attached on the other side;
//! - shmrc's publish/subscribe ([`shmrc_pubsub`]), woken by futex or polling;
//! - iceoryx2's publish/subscribe ([`iox`]), woken by its event service or spinning.
//!
//! and the recovery case: a subscriber SIGKILLed while it holds samples, and the time
//! until they are back in the publisher's pool. [`peer`] runs the subscriber
//! processes (this program re-executed), [`stats`] reduces the timings, [`report`]
//! writes one JSON object a line.
#![cfg(target_os = "linux")]

pub mod error;
pub mod floor;
pub mod iox;
pub mod peer;
pub mod report;
pub mod rounds;
pub mod shmrc_pool;
pub mod shmrc_pubsub;
pub mod stats;

pub use error::{Error, Result};
