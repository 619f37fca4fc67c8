//! `shmrc manager`: runs the user's manager in the foreground (logging to stderr), or
//! starts one detached in a session of its own (logging to `manager.log` in the runtime
//! directory, [`serve::start_detached`]), waits until it answers, prints its pid and
//! exits.

use std::time::Duration;

use shmrc::DefaultOs;
use shmrc::manager::runtime::RuntimeDir;
use shmrc::manager::serve;
use shmrc::manager::server;
use shmrc::os::Os;

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
    let runtime = RuntimeDir::for_user(DefaultOs::default().uid())?;
    let grace = match args.grace_ms {
        Some(ms) => Duration::from_millis(ms),
        None => server::grace_from_env()?,
    };
    if !args.foreground {
        println!("{}", serve::start_detached(&runtime, grace)?);
        return Ok(());
    }
    Ok(serve::serve_here(runtime, grace)?)
}
