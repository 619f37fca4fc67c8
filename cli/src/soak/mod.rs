//! `shmrc soak`: a bounded soak of the whole system on the real kernel. Worker
//! processes create buffers (both strategies, plain and from a pool), fill them from a
//! seeded generator, share them with random peers (handles over Unix sockets, or as
//! bytes), attach, verify the checksums and release, while the soak SIGKILLs random
//! workers, SIGKILLs its manager (another takes over) and SIGSTOPs it once. It fails on
//! any checksum mismatch, any failure of a live sender's handle or of a live worker, a
//! held name missing from `/dev/shm`, a killed worker's names not swept, or anything
//! of its namespace left at the end; it prints operations, kills and death-to-sweep
//! p50/p99.
//!
//! Everything runs in a private runtime directory and a namespace of the run's own, and
//! is cleaned up in every outcome. The schedule comes from `--seed` (printed).

mod fleet;
mod plan;
mod shm_watch;
mod storm;
mod tally;
pub mod worker;

use std::time::{Duration, Instant};

use shmrc::Namespace;
use shmrc::manager::{ManagerMode, set_manager_mode};

use crate::error::{CliError, Result};
use fleet::Setting;
use plan::Plan;
use storm::Storm;

/// Options of `shmrc soak`.
#[derive(clap::Args)]
pub struct SoakArgs {
    /// How long to run the operations (seconds; the end's checks come after).
    #[arg(long, default_value_t = 90)]
    seconds: u64,
    /// How many worker processes run at once.
    #[arg(long, default_value_t = 6)]
    workers: usize,
    /// The schedule's seed (default: drawn, and printed).
    #[arg(long)]
    seed: Option<u64>,
}

/// How long the namespace may take to empty once the last worker exited.
const EMPTY_LIMIT: Duration = Duration::from_secs(20);
/// The managers' grace period.
const GRACE: Duration = Duration::from_millis(500);

/// Runs `shmrc soak`.
pub fn run(args: &SoakArgs) -> Result<()> {
    if args.workers < 2 {
        return Err(shmrc::Error::InvalidArgument("--workers: at least 2".into()).into());
    }
    // The soak itself holds nothing: only its workers talk to a manager.
    set_manager_mode(ManagerMode::Off);
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let run = Duration::from_secs(args.seconds);
    println!(
        "soak: seed {seed}, {} s, {} workers (rerun with --seed {seed})",
        args.seconds, args.workers
    );
    let scratch = tempfile::Builder::new()
        .prefix("shmrc-soak-")
        .tempdir()
        .map_err(|e| shmrc::Error::os("make the soak's directory", e))?;
    let setting = Setting {
        program: std::env::current_exe().map_err(|e| shmrc::Error::os("current_exe", e))?,
        runtime: scratch.path().join("runtime"),
        namespace: format!("shmrc-soak-{}", std::process::id()),
        grace: GRACE,
    };
    let namespace = Namespace::new(&setting.namespace)?;
    let name_start = namespace.name_start(nix::unistd::geteuid().as_raw());
    let began = Instant::now();
    let outcome = soak(&setting, &scratch, &name_start, args.workers, seed, run);
    // In every outcome: nothing of the namespace stays (after the checks above).
    for name in shm_watch::names(&name_start) {
        let _ = std::fs::remove_file(std::path::Path::new(shm_watch::SHM_DIR).join(name));
    }
    let mut tally = outcome?;
    tally.print(seed, began.elapsed());
    match tally.failures.len() {
        0 => Ok(()),
        n => Err(CliError::SoakFailed(n)),
    }
}

fn soak(
    setting: &Setting,
    scratch: &tempfile::TempDir,
    name_start: &str,
    workers: usize,
    seed: u64,
    run: Duration,
) -> Result<tally::Tally> {
    let socket = scratch.path().join("soak.sock");
    let mut storm = Storm::start(setting, socket, name_start.to_owned(), workers)?;
    let mut plan = Plan::new(seed, run, workers);
    storm.run(&mut plan, run);
    if plan.manager_events_left() > 0 {
        storm.tally.fail(format!(
            "{} of the manager's SIGKILLs and SIGSTOPs did not happen",
            plan.manager_events_left()
        ));
    }
    storm.finish(EMPTY_LIMIT);
    let limit = GRACE + Duration::from_secs(15);
    if let Err(left) = storm.managers.wait_gone(limit) {
        storm.tally.fail(format!(
            "a manager still ran {limit:?} after the last worker: {left}"
        ));
    }
    Ok(std::mem::take(&mut storm.tally))
}
