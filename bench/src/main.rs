//! `shmrc-bench`: every workload of [`shmrc_bench::workloads`] against the raw-syscall
//! floor, printed as ratios (docs/PERFORMANCE.md). `shmrc bench ARGS` runs this program
//! (found beside `shmrc`, or on `PATH`). Its hidden `bench-peer` and `bench-victim`
//! commands are the processes the harness starts (this binary again).

use clap::{Parser, Subcommand};
use shmrc::Error;
use shmrc_bench::harness::{self, BenchOptions};
use shmrc_bench::kill_latency;
use shmrc_bench::workloads::{self, PEER_CONTENDER};

#[derive(Parser)]
#[command(
    name = "shmrc-bench",
    version,
    about = "Measure shmrc against the raw-syscall floor and print the ratios"
)]
struct Cli {
    #[command(subcommand)]
    peer: Option<Peer>,
    /// Fewer rounds and shorter batches (well under a minute): for CI.
    #[arg(long)]
    quick: bool,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Run only this workload (ping-pong, "channel ping-pong", stream, fill,
    /// attach/release, clone/drop, finalize, sweep, creation, sigkill-to-unlink,
    /// planted-names).
    #[arg(long)]
    only: Option<String>,
    /// Instead of the workloads: how each cost grows with size (4 KiB to 64 MiB), with
    /// the holders of a buffer (1 to 64) and with the segments in a namespace (100 to
    /// 100,000; 10,000 with --quick), each with its floor (bench/growth.py plots the
    /// --json document).
    #[arg(long)]
    growth: bool,
}

/// The processes the harness starts; not meant to be run by hand.
#[derive(Subcommand)]
enum Peer {
    /// A benchmark peer process (configured by its environment).
    #[command(hide = true)]
    BenchPeer,
    /// A process the harness SIGKILLs to time the manager's unlink (commands on stdin).
    #[command(hide = true)]
    BenchVictim,
}

/// A failure under `--json`: `{"error": "…"}` on stdout, where the document was due.
#[derive(serde::Serialize)]
struct ErrorDoc {
    error: String,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let ran = match cli.peer {
        None => harness::run(&BenchOptions {
            quick: cli.quick,
            json: cli.json,
            only: cli.only,
            growth: cli.growth,
        }),
        Some(Peer::BenchVictim) => kill_latency::serve_victim(),
        Some(Peer::BenchPeer) => workloads::serve_builtin().unwrap_or_else(|| {
            let name = std::env::var_os(PEER_CONTENDER).unwrap_or_default();
            Err(Error::InvalidArgument(format!(
                "bench-peer: unknown contender {name:?} in ${PEER_CONTENDER} (this command \
                 is started by `shmrc-bench`, not by hand)"
            )))
        }),
    };
    match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let doc = ErrorDoc {
                error: e.to_string(),
            };
            match serde_json::to_string(&doc) {
                Ok(line) if json => println!("{line}"),
                _ => eprintln!("shmrc-bench: {e}"),
            }
            std::process::ExitCode::FAILURE
        }
    }
}
