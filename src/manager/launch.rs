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
//! - `serve` ([`SERVE`]): the manager itself (`server::run`), its standard error
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
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::connection::{START_TIMEOUT, connect, status_at};
use super::mode::lock;
use super::runtime::{RUNTIME_DIR_ENV, RuntimeDir};
use super::server::{self, Config, Ended, GRACE_ENV};
use super::sys;
use crate::error::{Error, Result};
use crate::os::Os;
use crate::os::posix::PosixOs;
use crate::sync::process::{AtomicBool, Ordering};

/// Environment variable: a program that runs the manager as `PROGRAM manager` (the
/// `shmrc` CLI does), instead of this program's own image.
///
/// ```
/// assert_eq!(shmrc::manager::PROGRAM_ENV, "SHMRC_MANAGER_PROGRAM");
/// // e.g. `SHMRC_MANAGER_PROGRAM=/usr/local/bin/shmrc python train.py`
/// ```
pub const PROGRAM_ENV: &str = "SHMRC_MANAGER_PROGRAM";
/// How many times a client starts a manager and says Hello before giving up (a
/// manager that is exiting at the very moment closes the new connection).
pub(crate) const ATTEMPTS: u32 = 3;

/// The program and its leading arguments set by [`set_manager_command`] (or
/// [`set_manager_program`]).
static PROGRAM: Mutex<Option<(PathBuf, Vec<OsString>)>> = Mutex::new(None);

/// Sets the `shmrc` program that [`ManagerMode::Auto`](super::ManagerMode::Auto) starts (as `PROGRAM manager`),
/// overriding `$SHMRC_MANAGER_PROGRAM`. Without one, the manager is served from this
/// program's own image (this module); a program that cannot be re-executed that
/// way (a Python extension, a sandboxed binary) names the `shmrc` CLI here, or a
/// command of its own with [`set_manager_command`].
///
/// ```
/// use std::path::PathBuf;
/// use shmrc::manager::{manager_program, set_manager_program};
///
/// set_manager_program(PathBuf::from("/opt/shmrc/bin/shmrc"));
/// assert_eq!(manager_program(), Some(PathBuf::from("/opt/shmrc/bin/shmrc")));
/// ```
pub fn set_manager_program(program: PathBuf) {
    set_manager_command(program, Vec::new());
}

/// Sets the command that runs the manager: `PROGRAM ARGS... manager` must start one
/// detached (if none runs) and exit once it answers, as `shmrc manager` does, and
/// `PROGRAM ARGS... manager --foreground` must serve it in the foreground, as
/// `shmrc manager --foreground` does (both with `$SHMRC_RUNTIME_DIR` set). It overrides
/// `$SHMRC_MANAGER_PROGRAM`, and [`start_detached`] uses it too instead of
/// this program's own image. This is how a program that cannot re-execute itself
/// serves the manager with nothing else installed: the Python package sets
/// `[sys.executable, "-m", "shmrc._manager"]`, whose `manager` subcommand calls
/// [`start_detached`] and [`serve_here`].
///
/// ```
/// use std::ffi::OsString;
/// use std::path::PathBuf;
/// use shmrc::manager::{manager_command, manager_program, set_manager_command};
///
/// let args = vec![OsString::from("-m"), OsString::from("shmrc._manager")];
/// set_manager_command(PathBuf::from("/usr/bin/python3"), args.clone());
/// assert_eq!(manager_program(), Some(PathBuf::from("/usr/bin/python3")));
/// assert_eq!(manager_command(), Some((PathBuf::from("/usr/bin/python3"), args)));
/// ```
pub fn set_manager_command(program: PathBuf, args: Vec<OsString>) {
    *lock(&PROGRAM) = Some((program, args));
}

/// The command set by [`set_manager_command`] or [`set_manager_program`] in this
/// process, if any (not `$SHMRC_MANAGER_PROGRAM`).
pub(crate) fn explicit_command() -> Option<(PathBuf, Vec<OsString>)> {
    lock(&PROGRAM).clone()
}

/// A command that runs `PROGRAM ARGS... manager [extra]` for `runtime`, with no
/// standard input or output.
pub(crate) fn manager_subcommand(
    program: &PathBuf,
    args: &[OsString],
    extra: &[&str],
    runtime: &RuntimeDir,
) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .arg("manager")
        .args(extra)
        .env(RUNTIME_DIR_ENV, runtime.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

/// Environment variable that makes a program linking shmrc serve as its user's manager
/// instead of running: [`START`] or [`SERVE`]. The library sets it when it starts a
/// manager; a program never sets it for itself.
///
/// ```
/// use shmrc::manager::ROLE_ENV;
/// assert_eq!(ROLE_ENV, "SHMRC_MANAGER_ROLE");
/// // This process was started as a program, not as a manager:
/// assert!(std::env::var_os(ROLE_ENV).is_none());
/// ```
pub const ROLE_ENV: &str = "SHMRC_MANAGER_ROLE";
/// The role that starts a detached manager and exits once it answers.
///
/// ```
/// assert_eq!(shmrc::manager::START, "start");
/// ```
pub const START: &str = "start";
/// The role that is the manager.
///
/// ```
/// assert_eq!(shmrc::manager::SERVE, "serve");
/// ```
pub const SERVE: &str = "serve";
/// The program a role re-executes: this process's own image.
pub(crate) const OWN_IMAGE: &str = "/proc/self/exe";

/// Runs the role `$SHMRC_MANAGER_ROLE` names, if any, and exits; does nothing (and
/// costs one `getenv`) in every other process, and in a program the kernel runs with
/// privileges its caller lacks (setuid, setgid, file capabilities: `AT_SECURE`), whose
/// environment is its caller's to set.
#[ctor::ctor(unsafe)]
fn serve_when_asked() {
    let Some(role) = std::env::var_os(ROLE_ENV) else {
        return;
    };
    if crate::environment::runs_with_privileges() {
        return;
    }
    IN_ROLE.store(true, Ordering::Relaxed);
    // A panic must not unwind out of a constructor (the loader would abort the
    // process without a word): it is reported like any other failure.
    let outcome = std::panic::catch_unwind(|| run_role(&role)).unwrap_or_else(|panic| {
        let what = server::panic_message(panic.as_ref());
        Err(Error::InvalidArgument(format!(
            "the {role:?} role panicked: {what}"
        )))
    });
    std::process::exit(match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("shmrc manager: {e}");
            1
        }
    });
}

/// Whether this process runs a role (set by the constructor before it runs one): a
/// role that starts the manager re-executes the image itself, and must not take its own
/// role variable for a sign that the constructor did not run.
static IN_ROLE: AtomicBool = AtomicBool::new(false);

/// Runs `role`.
fn run_role(role: &std::ffi::OsStr) -> Result<()> {
    match role.to_str() {
        Some(START) => start_role(),
        Some(SERVE) => serve_role(),
        _ => Err(Error::InvalidArgument(format!(
            "{ROLE_ENV}={role:?}: expected {START} or {SERVE}"
        ))),
    }
}

/// Keeps the constructor in the program: the linker takes an object file of the
/// library only for the symbols something uses, so the code that re-executes the image
/// names the constructor.
fn keep_constructor() -> usize {
    std::hint::black_box(serve_when_asked as fn() as usize)
}

/// The `start` role: a detached manager for `$SHMRC_RUNTIME_DIR` (set by the client).
fn start_role() -> Result<()> {
    let runtime = RuntimeDir::for_user(PosixOs.uid())?;
    start_detached(&runtime, server::grace_from_env()?).map(drop)
}

/// The `serve` role: the manager itself, until its grace period passes with no client.
fn serve_role() -> Result<()> {
    serve_here(
        RuntimeDir::for_user(PosixOs.uid())?,
        server::grace_from_env()?,
    )
}

/// Where [`serve`] runs the manager.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Serve {
    /// In this process, until its grace period passes with no client
    /// (`shmrc manager --foreground`).
    Foreground,
    /// In a process of its own, in a session of its own; [`serve`] returns its pid once
    /// it answers (`shmrc manager`). One already running there is found, not doubled.
    Detached,
}

/// Runs the manager of `runtime`, with `grace` after its last client (`None`:
/// `$SHMRC_MANAGER_GRACE_MS`, else 2 s; a variable that is no number of milliseconds is
/// [`Error::InvalidArgument`]): the one public way a front end (the CLI, the Python
/// package, a service of your own) serves it. With
/// [`Serve::Detached`], the manager's pid; with [`Serve::Foreground`], `None` once it
/// ends (at once, saying so on stderr, when another manager runs there already).
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::manager::{RuntimeDir, Serve, serve, status_at};
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir().unwrap();
/// let runtime = RuntimeDir::at(dir.path().join("shmrc"));
/// let pid = serve(Serve::Detached, runtime.clone(), Some(Duration::from_secs(1)))?;
/// assert_eq!(pid, Some(status_at(&runtime)?.pid));
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn serve(how: Serve, runtime: RuntimeDir, grace: Option<Duration>) -> Result<Option<u32>> {
    let grace = match grace {
        Some(grace) => grace,
        None => server::grace_from_env()?,
    };
    match how {
        Serve::Foreground => serve_here(runtime, grace).map(|()| None),
        Serve::Detached => start_detached(&runtime, grace).map(Some),
    }
}

/// Runs the manager of `runtime` in this process until `grace` passes with no client
/// (`shmrc manager --foreground`, and the [`SERVE`] role); when another manager runs
/// there already, says so on stderr and returns.
pub fn serve_here(runtime: RuntimeDir, grace: Duration) -> Result<()> {
    let socket = runtime.socket()?;
    if server::run(&Config { runtime, grace })? == Ended::AlreadyRunning {
        eprintln!("a manager already runs at {}", socket.display());
    }
    Ok(())
}

/// Checks that this program's own image can serve the manager, before it is
/// re-executed for it: the executable must itself hold shmrc's constructor (not a
/// shared library or plugin loaded into another program, a program run through
/// `ld.so` or a tool that wraps it), must not run with privileges its caller lacks (its
/// constructor then ignores the role), and this process must not be such a copy itself
/// (a role addressed to it means the constructor did not run). Otherwise the copy would
/// run the program's own `main`.
fn check_own_image_serves() -> Result<()> {
    let cannot = |why: String| Error::ManagerStart {
        program: OWN_IMAGE.into(),
        why: format!(
            "{why}; name a program that serves it (SHMRC_MANAGER_PROGRAM=/path/to/shmrc) \
             or turn the manager off (SHMRC_MANAGER=off)"
        ),
    };
    if crate::environment::runs_with_privileges() {
        // Its environment is its caller's: no variable is read, and none is offered.
        return Err(Error::ManagerStart {
            program: OWN_IMAGE.into(),
            why: "this program runs with privileges its caller lacks (setuid, setgid or \
                  file capabilities): such a program never serves the manager, and it \
                  reads no SHMRC_* variable; the program itself may name a manager program \
                  (shmrc::manager::set_manager_program) or turn the manager off \
                  (shmrc::manager::set_manager_mode(ManagerMode::Off))"
                .into(),
        });
    }
    if std::env::var_os(ROLE_ENV).is_some() && !IN_ROLE.load(Ordering::Relaxed) {
        return Err(cannot(format!(
            "this process was started to serve the manager ({ROLE_ENV} is set), yet it \
             runs the program: shmrc's constructor did not run in this image"
        )));
    }
    let exe = std::fs::metadata(OWN_IMAGE)
        .map_err(|e| cannot(format!("cannot read {OWN_IMAGE}: {e}")))?;
    let exe_id = (
        nix::sys::stat::major(exe.dev()),
        nix::sys::stat::minor(exe.dev()),
        exe.ino(),
    );
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| cannot(format!("cannot read /proc/self/maps: {e}")))?;
    match file_mapped_at(&maps, keep_constructor() as u64) {
        Some(id) if id == exe_id => Ok(()),
        Some(_) => Err(cannot(
            "shmrc is linked into a shared object loaded by this program, not into the \
             executable, so the executable cannot serve the manager"
                .into(),
        )),
        None => Err(cannot("shmrc's code is in no mapped file".into())),
    }
}

/// The (major, minor, inode) of the file mapped at `address` in a `/proc/<pid>/maps`
/// text, if a file is.
fn file_mapped_at(maps: &str, address: u64) -> Option<(u64, u64, u64)> {
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let (start, end) = (
            u64::from_str_radix(start, 16).ok()?,
            u64::from_str_radix(end, 16).ok()?,
        );
        if !(start..end).contains(&address) {
            return None;
        }
        let (_perms, _offset) = (fields.next()?, fields.next()?);
        let (major, minor) = fields.next()?.split_once(':')?;
        let inode: u64 = fields.next()?.parse().ok()?;
        (inode != 0).then_some((
            u64::from_str_radix(major, 16).ok()?,
            u64::from_str_radix(minor, 16).ok()?,
            inode,
        ))
    })
}

/// A command that runs this program's image in `role` for `runtime`, once
/// [`check_own_image_serves`] agrees it can.
pub(crate) fn own_image(role: &str, runtime: &RuntimeDir) -> Result<Command> {
    check_own_image_serves()?;
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
    Ok(command)
}

/// Starts a manager for `runtime` detached (in a session of its own, logging to
/// `manager.log`, exiting `grace` after its last client) unless one answers already,
/// and returns the pid of the manager that answers (the one started, or one that won
/// the race to start). The manager is this program's own image in the [`SERVE`] role.
/// [`Error::ManagerStart`] (naming the log) when none answers within 10 s, or when this
/// program's image cannot serve the manager (shmrc linked into a shared object rather
/// than the executable, a privileged program). The manager is a child of the caller
/// until the caller exits: call this from a process that exits soon after (as the
/// `start` role and `shmrc manager` do), or reap it.
///
/// ```
/// # #[cfg(not(any(shmrc_loom, shmrc_shuttle)))] {
/// use shmrc::manager::{RuntimeDir, start_detached, status_at};
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
/// let deadline = std::time::Instant::now() + Duration::from_secs(30);
/// while status_at(&runtime).is_ok() {
///     assert!(std::time::Instant::now() < deadline, "the manager outlived its grace");
///     std::thread::sleep(Duration::from_millis(50));
/// }
/// # }
/// # Ok::<(), shmrc::Error>(())
/// ```
pub fn start_detached(runtime: &RuntimeDir, grace: Duration) -> Result<u32> {
    runtime.ensure(PosixOs.uid())?;
    if let Ok(status) = status_at(runtime) {
        return Ok(status.pid);
    }
    let log = runtime.open_log()?;
    // A command set for the manager serves it; else this program's own image does.
    let (program, mut command) = match explicit_command() {
        Some((program, args)) => {
            let command = manager_subcommand(&program, &args, &["--foreground"], runtime);
            (program, command)
        }
        None => (OWN_IMAGE.into(), own_image(SERVE, runtime)?),
    };
    command
        .env(GRACE_ENV, grace.as_millis().to_string())
        .current_dir("/")
        .stderr(log);
    let mut child = sys::spawn_in_new_session(&mut command).map_err(|e| Error::ManagerStart {
        program: program.clone(),
        why: format!("cannot spawn it: {e}"),
    })?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(status) = status_at(runtime) {
            return Ok(status.pid);
        }
        let exited = child.try_wait().ok().flatten();
        if exited.is_some_and(|s| !s.success()) || Instant::now() >= deadline {
            let what = exited.map_or("it did not answer in time".into(), |s| {
                format!("it exited with {s}")
            });
            return Err(Error::ManagerStart {
                program,
                why: format!("{what}; see {}", runtime.log().display()),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Connects to the manager of `runtime`, starting one if none answers. A manager that
/// answered the starter but ended its grace period before this connect is started
/// again (at most [`ATTEMPTS`] times).
pub(crate) fn connect_or_start(runtime: &RuntimeDir) -> Result<UnixStream> {
    runtime.ensure(PosixOs.uid())?;
    let mut attempt = 1;
    loop {
        match connect(runtime) {
            Err(Error::NoManager { socket, source }) => {
                if attempt > ATTEMPTS {
                    return Err(Error::ManagerStart {
                        program: manager_program().unwrap_or_else(|| OWN_IMAGE.into()),
                        why: format!(
                            "it reported a manager running {ATTEMPTS} times, but none \
                             answered at {}: {source}",
                            socket.display()
                        ),
                    });
                }
            }
            other => return other,
        }
        // One starter at a time: whoever waited for the lock finds the manager the
        // holder started, and connects.
        let _starting = lock_start(runtime)?;
        match connect(runtime) {
            Err(Error::NoManager { .. }) => start(runtime)?,
            other => return other,
        }
        attempt += 1;
    }
}

/// Takes the start lock of `runtime`, waiting for another client's start to finish
/// ([`START_TIMEOUT`] and a margin at most: a start is bounded by then).
fn lock_start(runtime: &RuntimeDir) -> Result<sys::FileLock> {
    let deadline = Instant::now() + START_TIMEOUT + Duration::from_secs(10);
    loop {
        if let Some(lock) = sys::try_lock_exclusive(runtime.open_start_lock()?)? {
            return Ok(lock);
        }
        if Instant::now() >= deadline {
            return Err(Error::ManagerStart {
                program: manager_program().unwrap_or_else(|| OWN_IMAGE.into()),
                why: "another process has been starting the manager for too long".into(),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Starts a detached manager for `runtime` (or finds one running) and returns once it
/// accepts connections: through `program manager` when [`manager_program`] names one,
/// else by running this program's own image in the `start` role (see this module).
/// The starter gets [`START_TIMEOUT`] and a little more; one that takes longer is
/// killed (by its pid) and reaped.
fn start(runtime: &RuntimeDir) -> Result<()> {
    let (program, mut command) = match manager_command() {
        Some((program, args)) => {
            let command = manager_subcommand(&program, &args, &[], runtime);
            (program, command)
        }
        None => (PathBuf::from(OWN_IMAGE), own_image(START, runtime)?),
    };
    let failed = |why: String| Error::ManagerStart {
        program: program.clone(),
        why,
    };
    let mut child = command
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot run it: {e}")))?;
    // Read while it runs (a full pipe must not stall it), and at most 64 KiB of it.
    let stderr = child.stderr.take().map(|pipe| {
        std::thread::spawn(move || {
            let mut said = Vec::new();
            let _ = pipe.take(64 << 10).read_to_end(&mut said);
            String::from_utf8_lossy(&said).trim().to_owned()
        })
    });
    let said = || {
        stderr
            .map(|reader| reader.join().unwrap_or_default())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + START_TIMEOUT + Duration::from_secs(5);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!(
                    "it had not finished after {} s and was killed: {}",
                    (START_TIMEOUT + Duration::from_secs(5)).as_secs(),
                    said()
                )));
            }
            Err(e) => return Err(failed(format!("cannot wait for it: {e}"))),
        }
    };
    if status.success() {
        return Ok(());
    }
    Err(failed(format!("it exited with {status}: {}", said())))
}

/// The program named to run the manager ([`set_manager_command`],
/// [`set_manager_program`], else `$SHMRC_MANAGER_PROGRAM`), if any. Without one, the
/// library serves the manager from this program's own image.
///
/// ```
/// match shmrc::manager::manager_program() {
///     Some(program) => println!("the manager runs as `{} manager`", program.display()),
///     None => println!("the manager is served from this program's own image"),
/// }
/// ```
pub fn manager_program() -> Option<PathBuf> {
    manager_command().map(|(program, _)| program)
}

/// The program and leading arguments that run the manager ([`set_manager_command`],
/// [`set_manager_program`], else `$SHMRC_MANAGER_PROGRAM` with no arguments), if any.
/// A program that runs with privileges its caller lacks (setuid, setgid, file
/// capabilities) reads no variable: only what it named itself through the API runs.
///
/// ```
/// if let Some((program, args)) = shmrc::manager::manager_command() {
///     println!("the manager runs as `{} {args:?} manager`", program.display());
/// }
/// ```
pub fn manager_command() -> Option<(PathBuf, Vec<OsString>)> {
    explicit_command()
        .or_else(|| crate::environment::var_os(PROGRAM_ENV).map(|p| (PathBuf::from(p), Vec::new())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_program_wins_over_the_own_image() {
        set_manager_program(PathBuf::from("/opt/shmrc/bin/shmrc"));
        assert_eq!(
            manager_program(),
            Some(PathBuf::from("/opt/shmrc/bin/shmrc"))
        );
        assert_eq!(
            manager_command(),
            Some((PathBuf::from("/opt/shmrc/bin/shmrc"), Vec::new()))
        );
        let runtime = RuntimeDir::at(PathBuf::from("/run/user/1/shmrc"));
        let args = [OsString::from("-m"), OsString::from("shmrc._manager")];
        let command = manager_subcommand(
            &PathBuf::from("python3"),
            &args,
            &["--foreground"],
            &runtime,
        );
        let argv: Vec<_> = command.get_args().collect();
        assert_eq!(argv, ["-m", "shmrc._manager", "manager", "--foreground"]);
        assert!(
            command
                .get_envs()
                .any(|(k, v)| k == RUNTIME_DIR_ENV && v == Some(runtime.path().as_os_str()))
        );
    }

    const MAPS: &str = "\
55d0c0a00000-55d0c0a20000 r--p 00000000 fd:01 1234567  /usr/bin/prog
55d0c0a20000-55d0c0b00000 r-xp 00020000 fd:01 1234567  /usr/bin/prog
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f1000000000-7f1000100000 r-xp 00000000 103:02 42  /usr/lib/libplugin.so (deleted)
";

    #[test]
    fn the_file_mapped_at_an_address_is_found_by_device_and_inode() {
        assert_eq!(
            file_mapped_at(MAPS, 0x55d0_c0a2_1000),
            Some((0xfd, 1, 1_234_567))
        );
        assert_eq!(file_mapped_at(MAPS, 0x7f10_0000_0010), Some((0x103, 2, 42)));
        assert_eq!(
            file_mapped_at(MAPS, 0x7f00_0000_0010),
            None,
            "anonymous memory"
        );
        assert_eq!(file_mapped_at(MAPS, 0x10), None, "nothing mapped there");
        assert_eq!(file_mapped_at("garbage\n-\n", 0x10), None);
    }

    #[test]
    fn this_test_program_can_serve_its_own_manager() {
        // The test binary links shmrc statically, as any Rust program does.
        check_own_image_serves().unwrap();
    }
}
