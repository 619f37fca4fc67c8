//! Argument parsing and the `ls` and `sweep` commands.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use shmrc::os::Os;
use shmrc::sweep::{Action, SweepReport};
use shmrc::{Namespace, PosixOs};

use crate::table::{Table, age, bytes};

#[derive(Parser)]
#[command(
    name = "shmrc",
    version,
    about = "Shared memory between processes, without leaks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the demo: workers share buffers with both strategies, one is SIGKILLed,
    /// a sweep reclaims its references, and a ledger shows nothing leaked.
    Demo(crate::demo::DemoArgs),
    /// List this user's shmrc segments with their holders.
    Ls {
        /// Only this namespace prefix (default: every shmrc namespace of this user).
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Reclaim dead holders' slots and unlink what nobody holds.
    Sweep {
        /// Only this namespace prefix (default: every shmrc namespace of this user).
        #[arg(long)]
        namespace: Option<String>,
        /// Say what would be done, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Run the user's manager (the daemon that sweeps when a process dies), or start
    /// one detached.
    Manager(crate::manager::ManagerArgs),
    /// Show the manager's pid, counters and clients.
    Status {
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Measure shmrc against the raw-syscall floor and print the ratios.
    Bench(crate::bench::BenchArgs),
    /// A benchmark peer process (started by `bench`; configured by its environment).
    #[command(hide = true)]
    BenchPeer,
    /// A process `bench` SIGKILLs to time the manager's unlink (commands on stdin).
    #[command(hide = true)]
    BenchVictim,
    /// A worker process (started by `demo` and the tests).
    #[command(hide = true)]
    Worker {
        /// The socket to connect to.
        #[arg(long)]
        socket: PathBuf,
        /// The worker's number.
        #[arg(long)]
        id: u32,
    },
}

/// Runs the command line.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => crate::demo::run(&args),
        Command::Ls { namespace } => ls(namespace.as_deref()),
        Command::Sweep { namespace, dry_run } => sweep(namespace.as_deref(), dry_run),
        Command::Manager(args) => crate::manager::run(&args),
        Command::Status { json } => crate::status::run(json),
        Command::Worker { socket, id } => crate::worker::run(&socket, id),
        Command::Bench(args) => crate::bench::run(&args),
        Command::BenchVictim => crate::kill_latency::serve_victim(),
        Command::BenchPeer => crate::workloads::serve_builtin().unwrap_or_else(|| {
            Err(shmrc::Error::InvalidArgument(
                "bench-peer: unknown contender in the environment".into(),
            ))
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shmrc: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The namespaces to look at: the one given, or every shmrc namespace of this user
/// found in `/dev/shm`.
fn namespaces(given: Option<&str>) -> shmrc::Result<Vec<Namespace>> {
    if let Some(prefix) = given {
        return Ok(vec![Namespace::new(prefix)?]);
    }
    shmrc::manager::server::namespaces_found(&PosixOs)
}

fn ls(namespace: Option<&str>) -> shmrc::Result<()> {
    let mut table = Table::new([
        "NAME",
        "SIZE",
        "HOLDERS live/in-flight/dead/cap",
        "CREATOR",
        "AGE",
        "STATE",
    ]);
    let now = PosixOs.now_unix_nanos();
    for ns in namespaces(namespace)? {
        for seg in shmrc::inspect(&ns)?.segments {
            let holders = match (&seg.census, &seg.fields) {
                (Some(c), Some(f)) => format!(
                    "{}/{}/{}/{}",
                    c.live, c.in_flight, c.dead, f.layout.capacity
                ),
                _ => "-".into(),
            };
            let creator = format!(
                "{} ({})",
                seg.parts.creator.pid(),
                if seg.creator_alive { "alive" } else { "dead" }
            );
            table.row([
                seg.name.clone(),
                seg.fields
                    .map_or("-".into(), |f| bytes(f.layout.data_len as u64)),
                holders,
                creator,
                seg.fields
                    .map_or("-".into(), |f| age(now.saturating_sub(f.created_at_nanos))),
                state(&seg.action, false),
            ]);
        }
    }
    println!("{}", crate::status::manager_line());
    if table.is_empty() {
        println!(
            "no shmrc segments of this user in /dev/shm (file_descriptor buffers never appear here)"
        );
    } else {
        table.print();
    }
    Ok(())
}

fn sweep(namespace: Option<&str>, dry_run: bool) -> shmrc::Result<()> {
    let mut total = SweepReport::default();
    let mut table = Table::new(["NAME", "RECLAIMED", "ACTION"]);
    for ns in namespaces(namespace)? {
        let report = if dry_run {
            shmrc::inspect(&ns)?
        } else {
            shmrc::sweep(&ns)?
        };
        for seg in &report.segments {
            table.row([
                seg.name.clone(),
                seg.reclaimed.to_string(),
                state(&seg.action, !dry_run),
            ]);
        }
        total.reclaimed += report.reclaimed;
        total.unlinked += report.unlinked;
    }
    println!("{}", crate::status::manager_line());
    if !table.is_empty() {
        table.print();
    }
    let verb = if dry_run {
        "would reclaim"
    } else {
        "reclaimed"
    };
    let unlinked = if dry_run { "would unlink" } else { "unlinked" };
    println!(
        "{verb} {} dead holder slot(s), {unlinked} {} segment(s)",
        total.reclaimed, total.unlinked
    );
    Ok(())
}

/// How an action reads in a table; `done` = the sweep really ran.
fn state(action: &Action, done: bool) -> String {
    match (action, done) {
        (Action::Kept, _) => "held".into(),
        (Action::Unlinked, true) => "unlinked".into(),
        (Action::Unlinked, false) => "unheld (a sweep unlinks it)".into(),
        (Action::RemovedHalfCreated, true) => "half-created, removed".into(),
        (Action::RemovedHalfCreated, false) => {
            "half-created by a dead creator (a sweep removes it)".into()
        }
        (Action::BeingCreated, _) => "being created".into(),
        (Action::Vanished, _) => "gone".into(),
        (Action::Skipped(e), _) => format!("left alone: {e}"),
    }
}
