//! Serving the user's manager from any program that links shmrc, with no `shmrc`
//! executable anywhere: the library re-executes the program's own image
//! (`/proc/self/exe`) with [`ROLE_ENV`] in its environment, and a constructor of this
//! crate, run by the loader before `main`, sees the variable and runs the manager in
//! place of the program. The user's `main` never runs in a manager, and no fork without
//! exec happens in a threaded process.
//!
//! Two roles, a double fork made of two `exec`s:
//! - `start` ([`START`]): what a client runs and waits for. It starts a `serve` in a
//!   session of its own ([`start_detached`]), waits until a manager answers, and exits
//!   0, or 1 with the reason on its standard error. The manager is thereby not the
//!   client's child: it never lingers as the client's zombie and outlives it.
//! - `serve` ([`SERVE`]): the manager itself ([`server::run`]), its standard error
//!   appended to `manager.log` in the runtime directory.
//!
//! A manager process shows as `shmrc manager --foreground` in `ps`. The `shmrc` CLI
//! starts its detached manager the same way (`shmrc manager`).
//!
//! # Safety
//! The `ctor` crate places `serve_when_asked` in `.init_array` (its expansion is the
//! only unsafe code here). The function is sound to run before `main`: it reads one
//! environment variable and returns at once when it is absent (every ordinary start of
//! a program); a manager process then uses only what std sets up lazily (environment,
//! files, sockets, processes) and ends with `exit`, never returning into the program's
//! own start-up.
#![allow(unsafe_code)]
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::client;
use super::runtime::{RUNTIME_DIR_ENV, RuntimeDir};
use super::server::{self, Config, Ended, GRACE_ENV};
use super::sys;
use crate::error::{Error, Result};
use crate::os::Os;
use crate::os::posix::PosixOs;

/// Environment variable that makes a program linking shmrc serve as its user's manager
/// instead of running: [`START`] or [`SERVE`]. The library sets it when it starts a
/// manager; a program never sets it for itself.
///
/// ```
/// use shmrc::manager::serve::ROLE_ENV;
/// assert_eq!(ROLE_ENV, "SHMRC_MANAGER_ROLE");
/// // This process was started as a program, not as a manager:
/// assert!(std::env::var_os(ROLE_ENV).is_none());
/// ```
pub const ROLE_ENV: &str = "SHMRC_MANAGER_ROLE";
/// The role that starts a detached manager and exits once it answers.
///
/// ```
/// assert_eq!(shmrc::manager::serve::START, "start");
/// ```
pub const START: &str = "start";
/// The role that is the manager.
///
/// ```
/// assert_eq!(shmrc::manager::serve::SERVE, "serve");
/// ```
pub const SERVE: &str = "serve";
/// The program a role re-executes: this process's own image.
pub(crate) const OWN_IMAGE: &str = "/proc/self/exe";
/// How long [`start_detached`] waits for the manager it started to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the role `$SHMRC_MANAGER_ROLE` names, if any, and exits; does nothing (and
/// costs one `getenv`) in every other process.
#[ctor::ctor(unsafe)]
fn serve_when_asked() {
    let Some(role) = std::env::var_os(ROLE_ENV) else {
        return;
    };
    let outcome = match role.to_str() {
        Some(START) => start_role(),
        Some(SERVE) => serve_role(),
        _ => Err(Error::InvalidArgument(format!(
            "{ROLE_ENV}={role:?}: expected {START} or {SERVE}"
        ))),
    };
    std::process::exit(match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("shmrc manager: {e}");
            1
        }
    });
}

/// Keeps the constructor in the program: the linker takes an object file of the
/// library only for the symbols something uses, so the code that re-executes the image
/// names the constructor.
pub(crate) fn keep_constructor() {
    std::hint::black_box(serve_when_asked as fn());
}

/// The `start` role: a detached manager for `$SHMRC_RUNTIME_DIR` (set by the client).
fn start_role() -> Result<()> {
    let runtime = RuntimeDir::for_user(PosixOs.uid());
    start_detached(&runtime, server::grace_from_env()?).map(drop)
}

/// The `serve` role: the manager itself, until its grace period passes with no client.
fn serve_role() -> Result<()> {
    let runtime = RuntimeDir::for_user(PosixOs.uid());
    let socket = runtime.socket()?;
    let grace = server::grace_from_env()?;
    if server::run(&Config { runtime, grace })? == Ended::AlreadyRunning {
        eprintln!("a manager already runs at {}", socket.display());
    }
    Ok(())
}

/// A command that runs this program's image in `role` for `runtime`.
pub(crate) fn own_image(role: &str, runtime: &RuntimeDir) -> Command {
    keep_constructor();
    let mut command = Command::new(OWN_IMAGE);
    command
        .arg0("shmrc manager")
        .arg(if role == SERVE {
            "--foreground"
        } else {
            "--start"
        })
        .env(ROLE_ENV, role)
        .env(RUNTIME_DIR_ENV, runtime.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

/// Starts a manager for `runtime` detached (in a session of its own, logging to
/// `manager.log`, exiting `grace` after its last client) unless one answers already,
/// and returns the pid of the manager that answers (the one started, or one that won
/// the race to start). The manager is this program's own image in the [`SERVE`] role.
/// [`Error::ManagerStart`] (naming the log) when none answers within 10 s.
///
/// ```
/// # #[cfg(not(any(feature = "loom", feature = "shuttle")))] {
/// use shmrc::manager::{client::status_at, runtime::RuntimeDir, serve::start_detached};
/// use std::time::Duration;
///
/// // A manager of a runtime directory of its own, as a test harness would start it.
/// let dir = tempfile::tempdir().unwrap();
/// let runtime = RuntimeDir::at(dir.path().join("shmrc"));
/// let pid = start_detached(&runtime, Duration::from_secs(1))?;
/// assert_eq!(start_detached(&runtime, Duration::from_secs(1))?, pid, "one per directory");
/// assert_eq!(status_at(&runtime)?.pid, pid);
/// assert!(runtime.log().exists());
/// // With no client, it exits once its grace period is over.
/// while status_at(&runtime).is_ok() {
///     std::thread::sleep(Duration::from_millis(50));
/// }
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn start_detached(runtime: &RuntimeDir, grace: Duration) -> Result<u32> {
    runtime.ensure(PosixOs.uid())?;
    if let Ok(status) = client::status_at(runtime) {
        return Ok(status.pid);
    }
    let log = runtime.open_log()?;
    let mut command = own_image(SERVE, runtime);
    command
        .env(GRACE_ENV, grace.as_millis().to_string())
        .current_dir("/")
        .stderr(log);
    let mut child = sys::spawn_in_new_session(&mut command).map_err(|e| Error::ManagerStart {
        program: OWN_IMAGE.into(),
        why: format!("cannot spawn it: {e}"),
    })?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(status) = client::status_at(runtime) {
            return Ok(status.pid);
        }
        let exited = child.try_wait().ok().flatten();
        if exited.is_some_and(|s| !s.success()) || Instant::now() >= deadline {
            let what = exited.map_or("it did not answer in time".into(), |s| format!("it {s}"));
            return Err(Error::ManagerStart {
                program: OWN_IMAGE.into(),
                why: format!("{what}; see {}", runtime.log().display()),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
