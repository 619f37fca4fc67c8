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
//! # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
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
//! | cost per held buffer | one open fd | no fd once mapped |
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
//! with a timeout, and (feature `tokio`) asynchronously. Without it:
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
//! - [`ShmBufMut`], [`FrozenBuf`], [`FreezeError`]: zero-copy access without `unsafe`;
//!   `FrozenArray` (feature `ndarray`).
//! - `channel` (feature `channel`): typed messages carrying buffers between processes.
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
//! - `cuda` (feature `cuda`): device buffers shared on the same protocol.
//!
//! User code never names an OS: [`ShmBuf`], [`ShareHandle`] and [`transport::Message`]
//! have a type parameter that defaults to [`DefaultOs`], the real kernel. The protocol
//! is generic over an abstract OS so that the checkers in `tests/`, `fuzz/` and
//! `proofs/` run the very code production runs on a simulated kernel; that machinery
//! (the `os`, `segment`, `holders`, `token`, `local` and `sync` modules, the `*_with`
//! functions) is public for them and left out of these docs.
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

#[cfg(all(feature = "ndarray", not(any(feature = "loom", feature = "shuttle"))))]
mod array;
#[doc(hidden)]
pub mod buf;
#[cfg(all(feature = "channel", not(any(feature = "loom", feature = "shuttle"))))]
pub mod channel;
#[cfg(feature = "cuda")]
pub mod cuda;
mod environment;
#[doc(hidden)]
pub mod error;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
mod exclusive;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
mod frozen;
#[doc(hidden)]
pub mod handle;
#[doc(hidden)]
pub mod holders;
#[doc(hidden)]
#[path = "channel/ledger.rs"]
pub mod ledger;
#[doc(hidden)]
pub mod local;
pub mod manager;
#[doc(hidden)]
pub mod namespace;
#[doc(hidden)]
pub mod os;
#[doc(hidden)]
pub mod pool;
#[doc(hidden)]
pub mod segment;
#[doc(hidden)]
pub mod strategy;
#[doc(hidden)]
pub mod sweep;
#[doc(hidden)]
pub mod sync;
#[doc(hidden)]
pub mod token;
pub mod transport;
mod view;

pub use buf::{CreateOptions, ShmBuf};
pub use error::{Error, Result};
pub use handle::ShareHandle;
pub use holders::{Census, Finalized, Outcome};
pub use namespace::NameParts;
pub use namespace::Namespace;
pub use pool::{PoolLimits, PoolStats, ShmPool};
pub use segment::{Fields, Layout};
pub use strategy::UnknownStrategy;
pub use strategy::{Strategy, all_sharing_strategies, set_sharing_strategy, sharing_strategy};
pub use sweep::{Action, SegmentReport, SweepReport};
pub use token::Token;

/// The OS that [`ShmBuf`], [`ShareHandle`] and [`transport`] run on when none is named:
/// the real kernel, with the user's manager watching each file_system use
/// ([`manager::Watched`]).
///
/// ```
/// # shmrc::manager::set_manager_mode(shmrc::manager::ManagerMode::Off);
/// use shmrc::{DefaultOs, ShareHandle, ShmBuf};
///
/// // `ShmBuf` is `ShmBuf<DefaultOs>`: user code never needs to name the OS.
/// let buf: ShmBuf<DefaultOs> = ShmBuf::new(64)?;
/// let handle: ShareHandle<DefaultOs> = buf.share()?;
/// assert_eq!(handle.len(), 64);
/// # Ok::<(), shmrc::Error>(())
/// ```
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub type DefaultOs = manager::Watched;
/// The OS the user API runs on when none is named: in a loom or shuttle build there is
/// no real kernel, only the simulated one.
#[cfg(any(feature = "loom", feature = "shuttle"))]
pub type DefaultOs = os::sim::SimOs;

#[cfg(not(any(feature = "loom", feature = "shuttle")))]
mod production;
#[cfg(all(feature = "ndarray", not(any(feature = "loom", feature = "shuttle"))))]
pub use array::FrozenArray;
#[cfg(all(feature = "serde", not(any(feature = "loom", feature = "shuttle"))))]
pub mod report;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub use os::posix::DataRegion;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub use production::{inspect, sweep};
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub use {
    exclusive::ShmBufMut,
    frozen::{FreezeError, FrozenBuf},
};
