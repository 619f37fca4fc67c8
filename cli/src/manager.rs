//! `shmrc manager`: runs the user's manager in the foreground (logging to stderr), or
//! starts one detached in a session of its own (logging to `manager.log` in the runtime
//! directory), waits until it answers, prints its pid and exits.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shmrc::manager::runtime::{RUNTIME_DIR_ENV, RuntimeDir};
use shmrc::manager::server::{self, Config, Ended};
use shmrc::os::{Os, daemon};
use shmrc::{Error, PosixOs, Result};

/// How long `shmrc manager` waits for the manager it started to answer.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Options of `shmrc manager`.
#[derive(clap::Args)]
pub struct ManagerArgs {
    /// Run in this process, logging to stderr, until the grace period passes with no
    /// client (without it: start one detached if none runs, print its pid, exit).
    #[arg(long)]
    foreground: bool,
    /// Milliseconds to stay with no live client (default: $SHMRC_MANAGER_GRACE_MS, else
    /// 2000).
    #[arg(long)]
    grace_ms: Option<u64>,
}

/// Runs `shmrc manager`.
pub fn run(args: &ManagerArgs) -> Result<()> {
    let runtime = RuntimeDir::for_user(PosixOs.uid());
    let grace = match args.grace_ms {
        Some(ms) => Duration::from_millis(ms),
        None => server::grace_from_env()?,
    };
    if !args.foreground {
        return start_detached(&runtime, grace);
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let socket = runtime.socket()?;
    if server::run(&Config { runtime, grace })? == Ended::AlreadyRunning {
        eprintln!("a manager already runs at {}", socket.display());
    }
    Ok(())
}

/// Starts `shmrc manager --foreground` in a new session with its stderr appended to the
/// log, and waits until a manager answers (it, or one that won the race to start).
fn start_detached(runtime: &RuntimeDir, grace: Duration) -> Result<()> {
    runtime.ensure(PosixOs.uid())?;
    if let Ok(status) = shmrc::manager::status() {
        println!("{}", status.pid);
        return Ok(());
    }
    let log = runtime.open_log()?;
    let program = std::env::current_exe().map_err(|e| Error::os("current_exe", e))?;
    let mut command = Command::new(&program);
    command
        .args(["manager", "--foreground", "--grace-ms"])
        .arg(grace.as_millis().to_string())
        .env(RUNTIME_DIR_ENV, runtime.path())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    let mut child =
        daemon::spawn_in_new_session(&mut command).map_err(|e| Error::ManagerStart {
            program: program.clone(),
            why: format!("cannot spawn it: {e}"),
        })?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(status) = shmrc::manager::status() {
            println!("{}", status.pid);
            return Ok(());
        }
        let exited = child.try_wait().ok().flatten();
        if exited.is_some_and(|s| !s.success()) || Instant::now() >= deadline {
            let what = exited.map_or("it did not answer in time".into(), |s| format!("it {s}"));
            return Err(Error::ManagerStart {
                program,
                why: format!("{what}; see {}", runtime.log().display()),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
