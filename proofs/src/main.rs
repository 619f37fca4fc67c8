//! `cargo run -p shmrc-proofs --release [-- --procs N --slots N --segments N --ops N
//! --total-ops N --recycle --anonymous --no-takeovers]`: explores the step-level model
//! of the holder protocol exhaustively for the bounds given (default: file_system
//! segments, 3 processes, 3 slots, 2 segments, 3 operations per process, 6 in all, a
//! crash allowed at every step, takeovers of a live finalizer explored), prints what it
//! explored and, per property, OK; on a violation prints the shortest trace and exits
//! with status 1.
//!
//! Without arguments, the default set (what CI runs, docs/VERIFICATION.md), in which
//! the two largest runs leave takeovers of a live finalizer out (every request to run
//! again below the bound: a live finalizer is deferred to) and two smaller runs explore
//! them:
//! - 3 processes x 3 slots x 2 segments, as above, without takeovers;
//! - recycling (`--recycle`: creators recycle the segments they hold and an attached
//!   handle leaves a copy that may be attached again; 3 processes, 2 slots, 1 segment,
//!   3 operations each, 7 in all), without takeovers;
//! - the memfd pool (`--anonymous`: every segment is a pool's anonymous memfd, with no
//!   name, no sweep and no finalize, and P3 is the creator's recycle reusing it), with
//!   recycling, the same bounds but 3 slots (no finalize: nothing to take over);
//! - takeovers: 3 processes x 2 slots x 1 segment, 2 operations each, 6 in all;
//! - takeovers with recycling: 3 processes x 2 slots x 1 segment, 3 operations each,
//!   6 in all (the smallest bounds tried that catch the commit step reverted: with 5
//!   in all it passes).
//!
//! `--part K` (0 or 1): one part of the default set, as CI runs it (`.ci/verify`, a
//! part a day by the UTC date, CI's time budget): part 0 is the first four runs, part 1
//! the recycling, memfd pool and takeovers-with-recycling runs (the mark made the last
//! the largest run of the set).
//!
//! `--full` (or `SHMRC_PROOFS_FULL=1`): the first three runs with takeovers explored
//! (about half an hour on a 2-core machine; docs/VERIFICATION.md).
//!
//! With other arguments, one run: the first default bounds changed by each argument.

use std::process::ExitCode;

use shmrc_model::protocol::{Config, Property, production_steps};
use shmrc_proofs::explore;

fn main() -> ExitCode {
    let mut config = Config {
        procs: 3,
        slots: 3,
        segments: 2,
        ops: 3,
        total_ops: 6,
        recycle: false,
        anonymous: false,
        takeovers: true,
    };
    let recycling = Config {
        procs: 3,
        slots: 2,
        segments: 1,
        ops: 3,
        total_ops: 7,
        recycle: true,
        anonymous: false,
        takeovers: true,
    };
    // Three slots: a stale handle still in flight needs a sender other than the
    // creator (one slot each for it, the creator and the handle), and only then does a
    // skipped generation check show (it did not, with two).
    let memfd_pool = Config {
        anonymous: true,
        slots: 3,
        ..recycling
    };
    // A takeover needs a finalizer (a release or sweep), a rival that asks it to run
    // again (another) and a claimer (an attach) at once: three processes, and the
    // smallest bounds that still let each do its part.
    let takeovers = Config {
        procs: 3,
        slots: 2,
        segments: 1,
        ops: 2,
        total_ops: 6,
        recycle: false,
        anonymous: false,
        takeovers: true,
    };
    let takeovers_recycling = Config {
        ops: 3,
        total_ops: 6,
        recycle: true,
        ..takeovers
    };
    let full_env = std::env::var_os("SHMRC_PROOFS_FULL").is_some_and(|v| v == "1");
    let mut full = false;
    let mut part = None;
    let mut given = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--full" {
            full = true;
            continue;
        }
        if flag == "--part" {
            part = match args.next().as_deref() {
                Some("0") => Some(0),
                Some("1") => Some(1),
                _ => usage("--part needs 0 or 1"),
            };
            continue;
        }
        given = true;
        let mut value = || -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage(&format!("{flag} needs a number")))
        };
        match flag.as_str() {
            "--procs" => config.procs = value(),
            "--slots" => config.slots = value(),
            "--segments" => config.segments = value(),
            "--ops" => {
                config.ops = u8::try_from(value()).unwrap_or_else(|_| usage("--ops too large"))
            }
            "--total-ops" => {
                config.total_ops =
                    u8::try_from(value()).unwrap_or_else(|_| usage("--total-ops too large"))
            }
            "--recycle" => config.recycle = true,
            "--anonymous" => config.anonymous = true,
            "--no-takeovers" => config.takeovers = false,
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if given && full {
        usage("--full takes no other argument");
    }
    if part.is_some() && (given || full || full_env) {
        usage("--part takes no other argument (and no SHMRC_PROOFS_FULL)");
    }
    let runs = if given {
        vec![config]
    } else if full || full_env {
        vec![config, recycling, memfd_pool]
    } else {
        let bounded = |c: Config| Config {
            takeovers: false,
            ..c
        };
        match part {
            None => vec![
                bounded(config),
                bounded(recycling),
                memfd_pool,
                takeovers,
                takeovers_recycling,
            ],
            Some(0) => vec![bounded(config), bounded(recycling), memfd_pool, takeovers],
            Some(_) => vec![bounded(recycling), memfd_pool, takeovers_recycling],
        }
    };
    for config in runs {
        if !prove(config) {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Explores `config`, prints the report; `false` on a violation.
fn prove(config: Config) -> bool {
    println!(
        "shmrc-proofs: holder protocol model ({}), {}, {} processes x {} slots x {} segments, \
         at most {} operations started per process and {} in all ({}{}), \
         a crash allowed at every atomic step, {}",
        match shmrc_model::PLANTED {
            Some(plant) => format!("PLANTED BUG {plant}"),
            None => "as in src/protocol/ (holders/, attach.rs)".to_owned(),
        },
        if config.anonymous {
            "memfd pool (anonymous segments: no name, no sweep, no finalize)"
        } else {
            "file_system segments"
        },
        config.procs,
        config.slots,
        config.segments,
        config.ops,
        config.total_ops,
        if config.anonymous {
            "create/share/attach/release/cancel"
        } else {
            "create/share/attach/release/cancel/sweep"
        },
        if config.recycle {
            "/recycle/attach of a kept copy"
        } else {
            ""
        },
        if config.anonymous {
            "no finalizer to take over"
        } else if config.takeovers {
            "takeovers of a live finalizer explored"
        } else {
            "WITHOUT takeovers of a live finalizer (every request to run again below the bound)"
        }
    );
    let report = explore(config);
    println!(
        "explored {} states, {} transitions, BFS depth {}, in {:.1?}",
        report.states, report.transitions, report.depth, report.elapsed
    );
    println!("production code run by the transitions (the model adds only the operations' glue):");
    for (function, runs) in production_steps() {
        println!("  {function}: {runs} steps");
    }
    println!(
        "a live finalizer taken over once asked too often (the stalled finalizer, free to \
         resume at any step after): {} transitions",
        report.live_takeovers
    );
    match report.violation {
        None => {
            for p in Property::ALL {
                println!("  {p} OK: {}", p.statement());
            }
            true
        }
        Some(v) => {
            println!("{v}");
            false
        }
    }
}

fn usage(why: &str) -> ! {
    if !why.is_empty() {
        eprintln!("shmrc-proofs: {why}");
    }
    eprintln!(
        "usage: shmrc-proofs [--procs N] [--slots N] [--segments N] [--ops N] [--total-ops N] [--recycle] [--anonymous] [--no-takeovers] | --part 0|1 | --full"
    );
    std::process::exit(2)
}
