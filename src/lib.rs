//! shmrc: share memory between processes without leaks, with a reference count that
//! survives SIGKILL.
//!
//! A [`ShmBuf`] is a shared buffer. [`ShmBuf::share`] makes a [`ShareHandle`] that
//! another process turns into its own `ShmBuf` with [`ShmBuf::attach`]; the handle
//! travels over a Unix socket ([`transport`]) or, for file_system buffers, as bytes.
//! Two strategies, switchable at run time like `torch.multiprocessing`'s
//! ([`set_sharing_strategy`]):
//!
//! - [`Strategy::FileDescriptor`] (default): an anonymous memfd passed with
//!   `SCM_RIGHTS`; the kernel frees it when the last holder goes, killed or not.
//! - [`Strategy::FileSystem`]: a named segment in `/dev/shm` with holder slots in its
//!   header. A holder killed with SIGKILL leaves a slot whose owner is dead; the
//!   user's manager ([`manager`]), [`sweep()`] or any later release reclaims it and
//!   unlinks the segment once nobody live holds it, while the job is still running.
//!
//! ```
//! # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
//! use shmrc::{CreateOptions, ShmBuf, Strategy, transport};
//! use std::os::unix::net::UnixStream;
//!
//! let (a, b) = UnixStream::pair().unwrap();
//! let buf = ShmBuf::with_options(1 << 20, &CreateOptions::new().strategy(Strategy::FileDescriptor))?;
//! buf.write_at(0, b"tensor bytes")?;
//! transport::send(&a, b"meta", vec![buf.share()?])?;
//! // ... in the receiving process:
//! let msg = transport::recv(&b)?;
//! let received = ShmBuf::attach(msg.handles.into_iter().next().unwrap())?;
//! let mut out = [0u8; 12];
//! received.read_at(0, &mut out)?;
//! assert_eq!(&out, b"tensor bytes");
//! # }
//! # Ok::<(), shmrc::Error>(())
//! ```
//!
//! # Guide: what to use, in the order you need it
//!
//! **1. Make a buffer.** [`ShmBuf::new`] (zero-filled, the process-wide strategy) or
//! [`ShmBuf::with_options`] ([`CreateOptions`]: strategy, holder slots, namespace).
//! Pick the strategy by how the buffer travels and what a crash must leave:
//!
//! | | [`Strategy::FileDescriptor`] (default) | [`Strategy::FileSystem`] |
//! |---|---|---|
//! | travels as | an fd over a Unix socket | bytes (a name), or over a socket |
//! | a holder SIGKILLed | the kernel frees its reference | its slot is reclaimed by the manager, [`sweep()`] or the next release |
//! | can be frozen | yes ([`FrozenBuf`]) | no (named segments cannot be sealed) |
//! | cost per held buffer | one open fd ([`raise_fd_limit`] for more than about a thousand) | no fd once mapped |
//!
//! Making and letting go of many buffers (a batch per step)? A [`ShmPool`] hands out
//! recycled ones of either strategy: a segment or memfd nobody holds any more is
//! reused, without a new reservation ([`PoolLimits`] bound what it keeps idle,
//! [`PoolStats`] count what it did). Typed and without `unsafe`: [`ShmPool::loan`] gives
//! a [`Loan`] (`&mut [T]`, only this process has it), [`Loan::into_sample`] a read-only
//! [`Sample`] (`&[T]` in every process that attaches it); how a pooled sample compares
//! with a sealed [`FrozenBuf`], and what a same-user writer can still do to it, is in
//! `docs/GUIDE.md`.
//!
//! **2. Fill it.** Before anyone else has it, a [`ShmBufMut`] is a plain `&mut [u8]`
//! (or `&mut [T]` for any `bytemuck::Pod` `T`, `cast_mut`): zero-copy, no `unsafe`.
//!
//! **3. Decide who may write afterwards.**
//! - Nobody: [`ShmBufMut::freeze`] / [`ShmBuf::freeze`] seal a file_descriptor buffer
//!   against writes for good (the kernel enforces it), and every holder reads the
//!   [`FrozenBuf`] as `&[u8]` / `&[T]` without `unsafe`. Feature `ndarray` adds
//!   `FrozenArray`: shape and strides over it.
//! - Everyone: keep a [`ShmBuf`]. [`ShmBuf::read_at`]/[`ShmBuf::write_at`] and the typed
//!   [`ShmBuf::read_items`]/[`ShmBuf::write_items`] copy and are safe under concurrent
//!   writers (torn, never UB); [`ShmBuf::region`] gives zero-copy `unsafe` slices whose
//!   contract ([`DataRegion`]) your own protocol must keep.
//!
//! **4. Hand it to another process.** Feature `channel`: `shmrc::channel` sends any
//! serde struct whose `ShmBuf`/`FrozenBuf` fields travel out of band, starts a child
//! `Command` with a channel to it (`channel::spawn` / `channel::from_parent`), waits
//! with a timeout, and (feature `tokio`) asynchronously; a `channel::Listener` serves
//! any number of clients by a service name, `channel::Select` waits on many receivers
//! at once, and `channel::request` makes calls with answers. One writer, any number of
//! readers that come and go: [`pubsub`] (a [`pubsub::Publisher`] loans and publishes
//! samples of its pool, each [`pubsub::Subscriber`] receives them zero-copy, with no
//! socket per sample; a sample is back in the pool once every subscriber let go or
//! died). Without a channel:
//! [`ShmBuf::share`] → [`ShareHandle`] → [`transport::send`]/[`transport::recv`] (a
//! payload and handles over a Unix stream) or, for file_system, `into_bytes`; the
//! receiver calls [`ShmBuf::attach`] (or [`FrozenBuf::attach`]).
//!
//! **5. Let go.** Drop it. The segment goes once no process holds it, released or
//! killed: the kernel sees to file_descriptor buffers; for file_system ones the user's
//! [`manager`] (started on first need) reclaims a dead holder's slot within
//! milliseconds, and [`sweep()`] / [`inspect()`] do it by hand ([`SweepReport`]).
//!
//! **What each guarantees** (over any interleaving, any process SIGKILLed at any step;
//! `docs/PROTOCOL.md`): a segment stays valid while a live process holds it or a handle
//! is in flight from a live sender; it is unlinked at most once, only inside its
//! [`Namespace`]; once every holder released or died a sweep unlinks it; attaching to
//! anything gone, half-made, foreign or corrupted is an [`Error`] naming the cause,
//! never a panic, UB or SIGBUS. Channels add: a message arrives whole with its buffers
//! attached or not at all, and references never received are given back once the
//! receiving end is gone (`docs/VIEWS-AND-CHANNELS.md`).
//!
//! # Index
//! - [`ShmBuf`], [`CreateOptions`], [`ShareHandle`]: create, share, attach, read and
//!   write; [`DataRegion`]: zero-copy `unsafe` access.
//! - [`ShmPool`], [`PoolLimits`], [`PoolStats`]: recycled buffers of either strategy;
//!   [`Loan`], [`Sample`]: typed pooled buffers without `unsafe`.
//! - [`ShmBufMut`], [`FrozenBuf`], [`FreezeError`]: zero-copy access without `unsafe`;
//!   `FrozenArray` (feature `ndarray`).
//! - `channel` (feature `channel`): typed messages carrying buffers between processes.
//! - [`pubsub`]: publish/subscribe over a pool, for any number of subscriber processes.
//! - [`transport::send`], [`transport::recv`]: a payload and handles over a Unix stream.
//! - [`Strategy`], [`all_sharing_strategies`], [`sharing_strategy`],
//!   [`set_sharing_strategy`]: the process-wide switch.
//! - [`sweep()`], [`inspect()`]: reclaim dead holders and unlink what nobody holds
//!   ([`SweepReport`]).
//! - [`Namespace`]: which names shmrc owns.
//! - [`manager`]: the per-user daemon that sweeps within milliseconds of a holder's
//!   death. It needs no program installed: the library starts it on first need from
//!   the program's own image ([`manager::ManagerMode`], [`manager::status`]).
//! - `report` (feature `serde`): what `shmrc ls --json` and `shmrc sweep --json` print.
//! - [`Error`]: every failure, by cause.
//! - [`raise_fd_limit`]: raise this process's open-file limit, for a program that holds
//!   more than about a thousand file_descriptor buffers (shmrc never changes
//!   process-wide limits by itself).
//! - `cuda` (feature `cuda`): device buffers shared on the same protocol.
//!
//! User code never names an OS: [`ShmBuf`], [`ShareHandle`] and [`transport::Message`]
//! have a type parameter that defaults to [`DefaultOs`], the real kernel. The protocol
//! is generic over an abstract OS so that the checkers in `tests/`, `fuzz/` and
//! `proofs/` run the very code production runs on a simulated kernel. That machinery
//! (the `os`, `segment`, `holders`, `token`, `local` and `sync` rooms) is private: the
//! checkers reach it through one declared seam, `shmrc::checkers`, behind the feature
//! `checkers`, which is not API (no semver promise; see docs/ARCHITECTURE.md). So are
//! the constructors and functions generic over the OS (`create_with`, `send_with`, ...):
//! the seam's extension traits (`checkers::buf::ShmBufExt`, ...) carry them, and a user
//! build has none of them.
//!
//! # What shmrc does not do
//! - It does not synchronize your reads and writes of a writable shared buffer: that
//!   is your protocol (as with any shared memory). [`ShmBuf::read_at`]/[`ShmBuf::write_at`]
//!   are safe under concurrent writers (torn, never UB); zero-copy slices of a shared,
//!   writable buffer are `unsafe` with a stated contract ([`DataRegion`]); freeze it to
//!   read without one.
//! - It cannot stop a hostile process *of the same user* from unlinking or scribbling
//!   over a segment: the kernel lets it. It does make sure such damage is reported as
//!   an [`Error`] on attach and never makes shmrc itself misbehave.
//! - Holders in different pid namespaces cannot share a file_system segment (liveness
//!   cannot be checked across them): attaching says [`Error::OtherPidNamespace`].
//!
//! Against whom each promise holds (another user, a setuid program, namespaces) and the
//! limits that stay: `docs/SECURITY.md` in the repository.
//!   Time namespaces are served: start times are compared as the initial time
//!   namespace reads them, except in a process whose namespace's boottime offset is
//!   not a whole number of clock ticks (or cannot be read), which is refused a slot
//!   with [`Error::TimeNamespace`].
#![deny(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]
// docs.rs (and `RUSTDOCFLAGS="--cfg docsrs" cargo +nightly doc`) marks each item with the
// features it needs; the checkers' seam is not API and gets no badge.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(docsrs, doc(auto_cfg(hide(feature = "checkers"))))]
// With the checkers' seam on, the protocol rooms' own docs (links between private
// rooms) become reachable; they are the maintainers' docs, not the user's.
#![cfg_attr(feature = "checkers", allow(rustdoc::private_intra_doc_links))]

// Linux only: the protocol stands on memfd_create and file seals, pidfd_open (a holder's
// death, race-free), SCM_RIGHTS, and /proc/<pid>/stat start times (a holder's identity).
// Stop here, with the reason, rather than at the first missing libc item.
#[cfg(not(target_os = "linux"))]
compile_error!(
    "shmrc supports Linux only (kernel 5.3 or later): it needs memfd_create with file seals, \
     pidfd_open, SCM_RIGHTS and /proc/<pid>/stat. docs/PLATFORMS.md sketches what a macOS \
     backend would use."
);

// The protocol rooms are `pub` inside for the checkers' seam (`checkers`, below); with
// the seam off their items are reachable from nowhere outside, by design.
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod buf;
#[cfg(all(feature = "channel", not(any(shmrc_loom, shmrc_shuttle))))]
#[cfg_attr(docsrs, doc(cfg(feature = "channel")))]
pub mod channel;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda;
mod environment;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod error;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod handle;
// A sender's in-flight ledger, generic over the OS: outside the `channel` feature so
// that the sim, loom and shuttle run it (the channel uses it; the checkers reach it).
#[cfg(any(feature = "channel", feature = "checkers"))]
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod in_flight;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod local;
pub mod manager;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod namespace;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod os;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod pool;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod protocol;
pub mod pubsub;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod strategy;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod sync;
#[cfg(test)]
mod tests;
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
mod token;
pub mod transport;

/// The checkers' seam (feature `checkers`, for shmrc's own tests, model, proofs, fuzz
/// targets, benchmarks and front ends; not part of the API, no semver promise): the
/// protocol rooms under the user API, as the simulated OS, loom, shuttle, proptest and
/// cargo-fuzz drive them. quinn-proto keeps its test seam the same way, in one place
/// behind a private switch. A user program needs none of it: every item of the API is
/// re-exported at the crate root (or lives in `manager`, `transport`, `pubsub`, `channel`,
/// `cuda`).
#[cfg(feature = "checkers")]
#[doc(hidden)]
pub mod checkers {
    /// The planted bug this build carries (`SHMRC_PLANT=NAME` at build time, `build.rs`),
    /// for the checkers to say so; `None` in every normal build.
    pub const PLANTED: Option<&str> = option_env!("SHMRC_PLANTED");
    /// The `attach` room (see its own docs).
    pub mod attach {
        pub use crate::protocol::attach::*;
    }
    /// The `buf` room (see its own docs).
    pub mod buf {
        /// `ShmBuf`'s methods for the checkers (generic constructors, the segment's inside).
        pub use crate::buf::ext::ShmBufExt;
        pub use crate::buf::*;
    }
    /// The `error` room (see its own docs).
    pub mod error {
        pub use crate::error::*;
    }
    /// The `handle` room (see its own docs).
    pub mod handle {
        pub use crate::handle::*;
    }
    /// The `holders` room (see its own docs).
    pub mod holders {
        pub use crate::protocol::holders::*;
    }
    /// A sender's in-flight ledger (the `in_flight` room, see its own docs).
    pub mod in_flight {
        pub use crate::in_flight::*;
    }
    /// The `local` room (see its own docs).
    pub mod local {
        pub use crate::local::*;
    }
    /// The `namespace` room (see its own docs).
    pub mod namespace {
        pub use crate::namespace::*;
    }
    /// The `os` room (see its own docs).
    pub mod os {
        pub use crate::os::*;
    }
    /// The `pool` room (see its own docs).
    pub mod pool {
        pub use crate::pool::*;
    }
    /// The `pubsub` room (see its own docs).
    pub mod pubsub {
        pub use crate::pubsub::*;
        /// The sample queue's steps (the `protocol/queue` room, see its own docs).
        pub mod queue {
            pub use crate::protocol::queue::*;
        }
    }
    /// The `segment` room (see its own docs).
    pub mod segment {
        pub use crate::protocol::segment::*;
    }
    /// The `service_segment` room (see its own docs).
    pub mod service_segment {
        pub use crate::protocol::service_segment::*;
    }
    /// The `strategy` room (see its own docs).
    pub mod strategy {
        pub use crate::strategy::*;
    }
    /// The `sweep` room (see its own docs).
    pub mod sweep {
        pub use crate::protocol::sweep::*;
    }
    /// The `sync` room (see its own docs).
    pub mod sync {
        pub use crate::sync::*;
    }
    /// The `token` room (see its own docs).
    pub mod token {
        pub use crate::token::*;
    }
    /// `transport::send` and `transport::recv` for any OS.
    pub mod transport {
        pub use crate::transport::generic::*;
    }
    /// The manager's inner rooms (the registry's decisions, the server loop, the wire).
    #[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
    pub mod manager {
        /// The manager's decisions, with no I/O.
        pub mod registry {
            pub use crate::manager::registry::*;
        }
        /// The manager's event loop.
        pub mod server {
            pub use crate::manager::server::*;
        }
        /// The frames clients and the manager exchange.
        pub mod wire {
            pub use crate::manager::wire::*;
        }
    }
    /// The CUDA variant's keepalive identity (its wire form, for the forged-input tests)
    /// and `DeviceHandle`'s decoding for any OS.
    #[cfg(feature = "cuda")]
    pub mod cuda {
        pub use crate::cuda::buf::DeviceHandleExt;
        pub use crate::cuda::identity::*;
    }
}

#[cfg(all(feature = "ndarray", not(any(shmrc_loom, shmrc_shuttle))))]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
pub use buf::FrozenArray;
pub use buf::{CreateOptions, ShmBuf};
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use buf::{FreezeError, FrozenBuf, ShmBufMut};
pub use error::{Error, Result};
pub use handle::ShareHandle;
pub use manager::DefaultOs;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use manager::{inspect, sweep};
pub use namespace::NameParts;
pub use namespace::Namespace;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use pool::{Loan, Sample};
pub use pool::{PoolLimits, PoolStats, ShmPool};
pub use protocol::holders::{Census, Finalized, Outcome};
pub use protocol::sweep::{
    Action, SegmentHeader, SegmentReport, ServiceDetails, ServiceReport, SweepReport,
};
pub use strategy::UnknownStrategy;
pub use strategy::{Strategy, all_sharing_strategies, set_sharing_strategy, sharing_strategy};
pub use token::Token;

#[cfg(all(feature = "serde", not(any(shmrc_loom, shmrc_shuttle))))]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod report;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use os::posix::DataRegion;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use os::posix::raise_fd_limit;

/// docs/GUIDE.md's examples, compiled (and, but for the ones marked `no_run`, run) as
/// doctests, so that the guide's code builds as written; only `cargo test --doc` sees
/// this item. The published package carries docs/GUIDE.md for it (`include` in
/// Cargo.toml).
#[cfg(all(doctest, not(any(shmrc_loom, shmrc_shuttle))))]
#[doc = include_str!("../docs/GUIDE.md")]
pub struct GuideExamples;
