//! The manager: one daemon per user that watches every process using file_system
//! buffers and sweeps a namespace within milliseconds of the death of a process that
//! used it, so a SIGKILLed worker's segments do not wait for the end of the job.
//!
//! It needs nothing installed: the first file_system create or attach of a process
//! connects to the manager of [`RuntimeDir::for_user`], and in
//! [`ManagerMode::Auto`] (the default) starts one if none runs, by re-executing the
//! program's own image, which the library catches before `main` and turns into the
//! manager. A manager exits a grace period (2 s by default) after its last client.
//! `docs/MANAGER.md` has the whole design and the environment variables.
//!
//! What a user names is here, at one path (the rooms below are private):
//! - [`ManagerMode`] and its process-wide switch ([`set_manager_mode`],
//!   `$SHMRC_MANAGER`, [`MODE_ENV`]);
//! - [`Watched`], the production OS (the manager watches each use);
//! - running a manager: [`serve`] ([`Serve::Foreground`] or [`Serve::Detached`]), which
//!   program runs it ([`set_manager_program`], [`set_manager_command`]), and starting
//!   one for a client when none runs ([`start_detached`]);
//! - one round trip to a running manager, [`status`] ([`ManagerStatus`],
//!   [`ClientRow`]), which never starts one;
//! - where the manager lives: [`RuntimeDir`] (socket, lock, log).
//!
//! The rooms: `mode`, `watched`, `client` (this process's one connection to its
//! manager: the Hello and the Watch of each namespace it uses), `launch`, `connection`,
//! `runtime`; `registry`: the manager's decisions (whom it watches, what to sweep
//! when), pure and generic over the OS; `server`: the poll loop that feeds it and
//! carries them out; `creations`: what each client created in `/dev/shm`, from inotify,
//! so that its death's sweep needs no listing.
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

// The submodules are private: what a user may name is re-exported here, at one path.
mod mode;
pub use mode::{MODE_ENV, ManagerMode, manager_mode, set_manager_mode};

#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod client;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod connection;
// What the clients create in /dev/shm (inotify), for their deaths' sweeps.
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod creations;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod launch;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod log;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod registry;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod runtime;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod server;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub(crate) mod sys;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
mod watched;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
#[cfg_attr(not(feature = "checkers"), allow(unreachable_pub))]
pub(crate) mod wire;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use connection::{status, status_at};
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use launch::{
    PROGRAM_ENV, ROLE_ENV, SERVE, START, Serve, manager_command, manager_program, serve,
    serve_here, set_manager_command, set_manager_program, start_detached,
};
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use runtime::{LOCK_FILE, LOG_FILE, RUNTIME_DIR_ENV, RuntimeDir, SOCKET_FILE, START_LOCK_FILE};
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use watched::{DefaultOs, Watched, inspect, sweep};
/// The OS the user API runs on when none is named: in a loom or shuttle build there is
/// no real kernel, only the simulated one.
#[cfg(any(shmrc_loom, shmrc_shuttle))]
pub type DefaultOs = crate::os::sim::SimOs;
#[cfg(not(any(shmrc_loom, shmrc_shuttle)))]
pub use wire::{ClientRow, ManagerStatus};
