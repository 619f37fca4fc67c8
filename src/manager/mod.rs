//! The manager: one daemon per user that watches every process using file_system
//! buffers and sweeps a namespace within milliseconds of the death of a process that
//! used it, so a SIGKILLed worker's segments do not wait for the end of the job.
//!
//! It needs nothing installed: the first file_system create or attach of a process
//! connects to the manager of [`runtime::RuntimeDir::for_user`], and in
//! [`ManagerMode::Auto`] (the default) starts one if none runs, by re-executing the
//! program's own image, which the library catches before `main` and turns into the
//! manager ([`launch`]). A manager exits a grace period (2 s by default) after its last
//! client. `docs/MANAGER.md` has the whole design and the environment variables.
//!
//! - [`mode`]: [`ManagerMode`] and its process-wide switch ([`set_manager_mode`],
//!   `$SHMRC_MANAGER`).
//! - [`watched`]: [`Watched`], the production OS (the manager watches each use).
//! - [`client`]: this process's one connection to its manager: the Hello and the Watch
//!   of each namespace it uses.
//! - [`launch`]: running a manager: [`serve`] ([`Serve::Foreground`] or
//!   [`Serve::Detached`]), which program runs it ([`set_manager_program`],
//!   [`set_manager_command`]), and starting one for a client when none runs.
//! - [`connection`]: one round trip to a running manager, and [`status`]
//!   ([`ManagerStatus`], [`ClientRow`]); never starts one.
//! - [`runtime`]: where the manager lives (socket, lock, log).
//! - `registry`: the manager's decisions (whom it watches, what to sweep when), pure
//!   and generic over the OS; `server`: the poll loop that feeds it and carries them out;
//!   `creations`: what each client created in `/dev/shm`, from inotify, so that its
//!   death's sweep needs no listing.
//!
//! ```
//! # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
//! use shmrc::manager::{self, ManagerMode};
//! use shmrc::{CreateOptions, Namespace, ShmBuf, Strategy};
//!
//! manager::set_manager_mode(ManagerMode::Auto); // the default
//! let options = CreateOptions::new()
//!     .strategy(Strategy::FileSystem)
//!     .namespace(Namespace::new("shmrc-doc-manager")?);
//! // The first file_system create starts the user's manager if none runs ...
//! let buf = ShmBuf::with_options(64, &options)?;
//! // ... and from now on it watches this process: were it killed, the manager would
//! // sweep `shmrc-doc-manager` at once.
//! let status = manager::status()?;
//! assert!(status.rows.iter().any(|row| row.pid == std::process::id()));
//! # drop(buf);
//! # }
//! # Ok::<(), shmrc::Error>(())
//! ```
//!
//! A program that sweeps by itself (or a test) can opt out:
//! ```
//! use shmrc::manager::{ManagerMode, set_manager_mode};
//! set_manager_mode(ManagerMode::Off);
//! ```

pub mod mode;
pub use mode::{ManagerMode, manager_mode, set_manager_mode};

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub mod client;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub mod connection;
// What the clients create in /dev/shm (inotify), for their deaths' sweeps.
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod creations;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub mod launch;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod log;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod registry;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub mod runtime;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod server;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub(crate) mod sys;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub mod watched;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod wire;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use connection::{status, status_at};
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use launch::{
    Serve, manager_command, manager_program, serve, set_manager_command, set_manager_program,
};
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use watched::{DefaultOs, Watched, inspect, sweep};
/// The OS the user API runs on when none is named: in a loom or shuttle build there is
/// no real kernel, only the simulated one.
#[cfg(any(shmrc_loom, shmrc_shuttle))]
pub type DefaultOs = crate::os::sim::SimOs;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use wire::{ClientRow, ManagerStatus};
