//! The atomics facade: the only place in shmrc that names an atomic type.
//!
//! Protocol state that other processes can see (header words, holder slots, the
//! finalizer word) uses [`AtomicU64`] from here. By default that is `std`'s; under
//! `--features loom` it is loom's and under `--features shuttle` shuttle's, so the
//! model checkers see every access the protocol makes. [`spin`] is the one back-off the
//! protocol uses, so a retry loop yields to the checker's scheduler instead of burning
//! a schedule.
//!
//! [`process`] holds plain `std` atomics for process-local settings that are not part of
//! the cross-process protocol (the sharing-strategy switch, counters): they must stay
//! real atomics even under a model checker, because they live in `static`s.
//!
//! `clippy.toml` forbids the std atomic types everywhere else.
#![allow(clippy::disallowed_types)]

#[cfg(all(feature = "loom", feature = "shuttle"))]
compile_error!("features `loom` and `shuttle` are exclusive: enable one of them");

#[cfg(feature = "loom")]
mod backend {
    pub use loom::sync::atomic::{AtomicU64, Ordering};
    /// Yields to loom's scheduler.
    pub fn spin() {
        loom::thread::yield_now();
    }
}

#[cfg(feature = "shuttle")]
mod backend {
    pub use shuttle::sync::atomic::{AtomicU64, Ordering};
    /// Yields to shuttle's scheduler.
    pub fn spin() {
        shuttle::thread::yield_now();
    }
}

#[cfg(not(any(feature = "loom", feature = "shuttle")))]
mod backend {
    pub use std::sync::atomic::{AtomicU64, Ordering};
    /// Lets another thread or process make progress before a retry.
    pub fn spin() {
        std::thread::yield_now();
    }
}

pub use backend::{AtomicU64, Ordering, spin};

/// Real `std` atomics for process-local state that is never shared with another
/// process and never explored by a model checker.
pub mod process {
    pub use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
}
