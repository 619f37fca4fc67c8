//! The manager: one daemon per user that watches every process using file_system
//! buffers and sweeps a namespace within milliseconds of the death of a process that
//! used it, so a SIGKILLed worker's segments do not wait for the end of the job.
//!
//! - [`runtime`]: where it lives (a private directory with its socket, lock and log).
//! - [`wire`]: the frames clients and the manager exchange.
//! - [`server`]: the daemon's event loop (`shmrc manager` runs it).
//! - [`client`]: the library's side: lazy start ([`ManagerMode`]), Hello/Watch,
//!   [`status`].
//!
//! The first file_system create or attach in a process connects to the manager of
//! [`runtime::RuntimeDir::for_user`], starting it in [`ManagerMode::Auto`]; see
//! `docs/MANAGER.md` for the whole design and the environment variables.
//!
//! ```
//! use shmrc::manager::{ManagerMode, set_manager_mode};
//! // A program that sweeps by itself (or a test) can opt out:
//! set_manager_mode(ManagerMode::Off);
//! ```

pub mod client;
pub mod runtime;
pub mod server;
pub mod wire;

pub use client::{
    ManagerMode, find_program, manager_mode, set_manager_mode, set_manager_program, status,
};
pub use wire::{ClientRow, ManagerStatus};
