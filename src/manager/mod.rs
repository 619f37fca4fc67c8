//! The manager: one daemon per user that watches every process using file_system
//! buffers and sweeps a namespace within milliseconds of the death of a process that
//! used it, so a SIGKILLed worker's segments do not wait for the end of the job.
//!
//! It needs nothing installed: the first file_system create or attach of a process
//! connects to the manager of [`runtime::RuntimeDir::for_user`], and in
//! [`ManagerMode::Auto`] (the default) starts one if none runs, by re-executing the
//! program's own image, which the library catches before `main` and turns into the
//! manager ([`serve`]). `docs/MANAGER.md` has the whole design and the environment
//! variables.
//!
//! - [`mode`]: [`ManagerMode`] and its process-wide switch.
//! - [`watched`]: [`Watched`], the production OS (the manager watches each use).
//! - [`client`]: starting a manager, Hello/Watch, [`status`].
//! - [`serve`]: a program serving as the manager ([`serve::start_detached`]).
//! - [`server`]: the daemon's event loop; [`runtime`]: where it lives; [`wire`]: the
//!   frames clients and the manager exchange; `sys`: its system calls; `log`: its log.
//!
//! ```
//! use shmrc::manager::{ManagerMode, set_manager_mode};
//! // A program that sweeps by itself (or a test) can opt out:
//! set_manager_mode(ManagerMode::Off);
//! ```

pub mod mode;
pub use mode::{ManagerMode, manager_mode, set_manager_mode};

#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub mod client;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
mod log;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub mod runtime;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub mod serve;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub mod server;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
mod sys;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub mod watched;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub mod wire;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub use client::{manager_program, set_manager_program, status};
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub use watched::Watched;
#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub use wire::{ClientRow, ManagerStatus};
