//! Argument parsing and the `ls` and `sweep` commands.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use shmrc::Namespace;

use crate::error::Result;
use crate::output::print_json;
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
    /// List this user's shmrc segments with their holders, and its publish/subscribe
    /// services with their publisher, subscribers and samples.
    Ls {
        /// Only this namespace prefix (default: every shmrc namespace of this user).
        #[arg(long)]
        namespace: Option<String>,
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Reclaim dead holders' slots and unlink what nobody holds.
    Sweep {
        /// Only this namespace prefix (default: every shmrc namespace of this user).
        #[arg(long)]
        namespace: Option<String>,
        /// Say what would be done, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run the user's manager (the daemon that sweeps when a process dies), or start
    /// one detached.
    Manager(crate::manager::ManagerArgs),
    /// Soak the system: worker processes share buffers (both strategies and the pool)
    /// while random workers and the manager are SIGKILLed and the manager SIGSTOPped;
    /// fails on any lost or changed buffer, or anything left behind.
    Soak(crate::soak::SoakArgs),
    /// Show the manager's pid, counters and clients.
    Status {
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Measure shmrc against the raw-syscall floor and print the ratios: runs the
    /// `shmrc-bench` program (beside `shmrc`, or on PATH) with these arguments
    /// (`shmrc bench --help` shows its own: --quick, --json, --only WORKLOAD).
    #[command(disable_help_flag = true)]
    Bench {
        /// The arguments of `shmrc-bench`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
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
    /// A worker process of `soak`.
    #[command(hide = true)]
    SoakWorker {
        /// The socket to connect to.
        #[arg(long)]
        socket: PathBuf,
        /// The worker's number.
        #[arg(long)]
        id: u32,
        /// The namespace of its buffers.
        #[arg(long)]
        namespace: String,
    },
}

impl Command {
    /// Whether the command was asked for JSON (then its error is JSON too).
    fn json(&self) -> bool {
        match self {
            Command::Ls { json, .. } | Command::Sweep { json, .. } | Command::Status { json } => {
                *json
            }
            Command::Bench { args } => args.iter().any(|a| a == "--json"),
            _ => false,
        }
    }
}

/// A failure under `--json`: `{"error": "…"}` on stdout, where the document was due.
#[derive(serde::Serialize)]
struct ErrorDoc {
    error: String,
}

/// Runs the command line: exit 0 on success; on failure exit 1 with the cause on stderr
/// (`shmrc: …`), or, under `--json`, as `{"error": "…"}` on stdout.
pub fn main() -> std::process::ExitCode {
    let command = Cli::parse().command;
    let json = command.json();
    match run(command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let printed = json
                && print_json(
                    &ErrorDoc {
                        error: e.to_string(),
                    },
                    false,
                )
                .is_ok();
            if !printed {
                eprintln!("shmrc: {e}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<()> {
    // The `shmrc` program holds many file_descriptor buffers (demo, soak, bench and
    // their workers), so it raises its open-file limit, as the library leaves to
    // programs. Best effort: at the limit, a command fails naming it.
    if let Err(e) = shmrc::raise_fd_limit() {
        eprintln!("shmrc: cannot raise the open-file limit: {e}");
    }
    match command {
        Command::Demo(args) => crate::demo::run(&args)?,
        Command::Ls { namespace, json } => ls(namespace.as_deref(), json)?,
        Command::Sweep {
            namespace,
            dry_run,
            json,
        } => sweep(namespace.as_deref(), dry_run, json)?,
        Command::Manager(args) => crate::manager::run(&args)?,
        Command::Status { json } => crate::status::run(json)?,
        Command::Worker { socket, id } => crate::worker::run(&socket, id)?,
        Command::Soak(args) => crate::soak::run(&args)?,
        Command::SoakWorker {
            socket,
            id,
            namespace,
        } => crate::soak::worker::run(&socket, id, &namespace)?,
        Command::Bench { args } => crate::bench::run(&args)?,
    }
    Ok(())
}

/// The namespace given, if any.
fn parse_namespace(given: Option<&str>) -> Result<Option<Namespace>> {
    Ok(given.map(Namespace::new).transpose()?)
}

fn ls(namespace: Option<&str>, json: bool) -> Result<()> {
    let now = unix_nanos_now();
    let listing = shmrc::report::listing(parse_namespace(namespace)?.as_ref())?;
    if json {
        return print_json(&listing, true);
    }
    let mut table = Table::new([
        "NAME",
        "SIZE",
        "HOLDERS live/in-flight/dead/cap",
        "CREATOR",
        "AGE",
        "STATE",
    ]);
    for seg in listing.namespaces.iter().flat_map(|ns| &ns.segments) {
        table.row([
            seg.name.clone(),
            seg.size.map_or("-".into(), |len| bytes(len as u64)),
            seg.holders.as_ref().map_or("-".into(), |h| {
                format!("{}/{}/{}/{}", h.live, h.in_flight, h.dead, h.capacity)
            }),
            format!(
                "{} ({})",
                seg.creator.pid,
                if seg.creator.alive { "alive" } else { "dead" }
            ),
            seg.created_at_unix_nanos
                .map_or("-".into(), |at| age(now.saturating_sub(at))),
            seg.state.clone(),
        ]);
    }
    let mut services = Table::new([
        "SERVICE",
        "PUBLISHER",
        "SUBSCRIBERS live/max",
        "SAMPLES made/max",
        "SIZE",
        "STATE",
    ]);
    for service in listing.namespaces.iter().flat_map(|ns| &ns.services) {
        let pair = |a: Option<usize>, b: Option<usize>| match (a, b) {
            (Some(a), Some(b)) => format!("{a}/{b}"),
            _ => "-".into(),
        };
        services.row([
            service.name.clone(),
            service.publisher.as_ref().map_or("-".into(), |p| {
                format!("{} ({})", p.pid, if p.alive { "alive" } else { "dead" })
            }),
            pair(service.subscribers, service.subscriber_entries),
            pair(service.samples, service.sample_rows),
            service.size.map_or("-".into(), bytes),
            service.state.clone(),
        ]);
    }
    // A notice, not the listing: on stderr.
    eprintln!("{}", crate::status::manager_line());
    if table.is_empty() && services.is_empty() {
        println!(
            "no shmrc segments of this user in /dev/shm (file_descriptor buffers never appear here)"
        );
    }
    if !table.is_empty() {
        table.print();
    }
    if !services.is_empty() {
        if !table.is_empty() {
            println!();
        }
        services.print();
    }
    Ok(())
}

fn sweep(namespace: Option<&str>, dry_run: bool, json: bool) -> Result<()> {
    let swept = shmrc::report::swept(parse_namespace(namespace)?.as_ref(), dry_run)?;
    if json {
        return print_json(&swept, true);
    }
    let mut table = Table::new(["NAME", "RECLAIMED", "ACTION"]);
    for seg in swept.namespaces.iter().flat_map(|ns| &ns.segments) {
        table.row([
            seg.name.clone(),
            seg.reclaimed.to_string(),
            seg.state.clone(),
        ]);
    }
    for service in swept.namespaces.iter().flat_map(|ns| &ns.services) {
        table.row([service.name.clone(), "-".into(), service.state.clone()]);
    }
    eprintln!("{}", crate::status::manager_line());
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
        swept.reclaimed, swept.unlinked
    );
    Ok(())
}

/// Now, in nanoseconds since the Unix epoch (the clock the segments' creation times use).
fn unix_nanos_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
