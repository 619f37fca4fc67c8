//! The atomics facade: the only place in shmrc that names an atomic type.
//!
//! Protocol state that other processes can see (header words, holder slots, the
//! finalizer word) uses [`AtomicU64`] from here. By default that is a transparent
//! wrapper of `std`'s (same layout, so a mapping's words can be viewed as it); under
//! `--features loom` it is loom's and under `--features shuttle` shuttle's, so the
//! model checkers see every access the protocol makes. [`spin`] is the one back-off the
//! protocol uses, so a retry loop yields to the checker's scheduler instead of burning
//! a schedule.
//!
//! [`process`] holds wrappers of `std` atomics for process-local state that is not part
//! of the cross-process protocol (the sharing-strategy switch, caches): they must stay
//! real atomics even under a model checker, because they live in `static`s.
//!
//! `clippy.toml` forbids `std`'s atomic types everywhere; this module alone wraps them.
#![allow(clippy::disallowed_types)]

#[cfg(all(shmrc_loom, shmrc_shuttle))]
compile_error!("features `loom` and `shuttle` are exclusive: enable one of them");

pub use std::sync::atomic::Ordering;

/// Defines a `#[repr(transparent)]` wrapper of a std atomic with the operations shmrc
/// uses, so that the wrapper (not std's type) is what the rest of the crate names.
macro_rules! std_atomic {
    ($(#[$doc:meta])* $name:ident, $std:ty, $value:ty) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Default)]
        pub struct $name($std);

        // The facade's whole surface: some operations only the checkers' builds use.
        #[cfg_attr(not(feature = "checkers"), allow(dead_code))]
        impl $name {
            /// A new atomic holding `value`.
            pub const fn new(value: $value) -> Self {
                Self(<$std>::new(value))
            }
            /// Loads the value.
            #[inline]
            pub fn load(&self, order: std::sync::atomic::Ordering) -> $value {
                self.0.load(order)
            }
            /// Stores `value`.
            #[inline]
            pub fn store(&self, value: $value, order: std::sync::atomic::Ordering) {
                self.0.store(value, order)
            }
            /// Stores `value`, returning the previous value.
            #[inline]
            pub fn swap(&self, value: $value, order: std::sync::atomic::Ordering) -> $value {
                self.0.swap(value, order)
            }
            /// Stores `new` if the value is `current`; returns the previous value.
            #[inline]
            pub fn compare_exchange(
                &self,
                current: $value,
                new: $value,
                success: std::sync::atomic::Ordering,
                failure: std::sync::atomic::Ordering,
            ) -> Result<$value, $value> {
                self.0.compare_exchange(current, new, success, failure)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

/// Adds the integer-only operations to a wrapper made by `std_atomic!`.
macro_rules! std_atomic_integer {
    ($name:ident, $value:ty) => {
        #[cfg_attr(not(feature = "checkers"), allow(dead_code))]
        impl $name {
            /// Adds `value` (wrapping), returning the previous value.
            #[inline]
            pub fn fetch_add(&self, value: $value, order: std::sync::atomic::Ordering) -> $value {
                self.0.fetch_add(value, order)
            }
            /// The address of the value (for a futex on it: `os/posix/futex.rs`).
            #[inline]
            pub fn as_ptr(&self) -> *mut $value {
                self.0.as_ptr()
            }
        }
    };
}

#[cfg(shmrc_loom)]
mod backend {
    pub use loom::sync::atomic::AtomicU64;
    /// Yields to loom's scheduler.
    pub fn spin() {
        loom::thread::yield_now();
    }
}

#[cfg(shmrc_shuttle)]
mod backend {
    pub use shuttle::sync::atomic::AtomicU64;
    /// Yields to shuttle's scheduler.
    pub fn spin() {
        shuttle::thread::yield_now();
    }
}

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod backend {
    std_atomic!(
        /// A 64-bit atomic with the layout of `u64` (a mapping's words are viewed as it).
        AtomicU64,
        std::sync::atomic::AtomicU64,
        u64
    );
    std_atomic_integer!(AtomicU64, u64);
    /// Lets another thread or process make progress before a retry.
    pub fn spin() {
        std::thread::yield_now();
    }
}

pub use backend::{AtomicU64, spin};

/// Real atomics for process-local state that is never shared with another process and
/// never explored by a model checker.
pub mod process {
    pub use std::sync::atomic::Ordering;

    std_atomic!(
        /// A process-local `bool`.
        AtomicBool,
        std::sync::atomic::AtomicBool,
        bool
    );
    std_atomic!(
        /// A process-local `u8`.
        AtomicU8,
        std::sync::atomic::AtomicU8,
        u8
    );
    std_atomic!(
        /// A process-local `u64`.
        AtomicU64,
        std::sync::atomic::AtomicU64,
        u64
    );
    std_atomic_integer!(AtomicU64, u64);
}
