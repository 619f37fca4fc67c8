//! `shmrc manager`: runs the user's manager in the foreground (logging to stderr), or
//! starts one detached in a session of its own (logging to `manager.log` in the runtime
//! directory, [`manager::serve`]), waits until it answers, prints its pid and
//! exits.

use std::time::Duration;

use shmrc::manager::RuntimeDir;
use shmrc::manager::{self, Serve};

use crate::error::Result;

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
    let runtime = RuntimeDir::of_this_user()?;
    let grace = args.grace_ms.map(Duration::from_millis);
    if !args.foreground {
        if let Some(pid) = manager::serve(Serve::Detached, runtime, grace)? {
            println!("{pid}");
        }
        return Ok(());
    }
    manager::serve(Serve::Foreground, runtime, grace)?;
    Ok(())
}
