//! `shmrc-iceoryx2-compare run [OPTIONS]`: every contender of the crate's docs, one
//! JSON line each on stdout; `child ROLE ...` is a subscriber process (started by the
//! run, never by hand).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use shmrc_iceoryx2_compare::rounds::{Plan, Receive, Timings, check_size, measure};
use shmrc_iceoryx2_compare::{Error, Result, floor, iox, report, shmrc_pool, shmrc_pubsub};

const USAGE: &str = "usage: shmrc-iceoryx2-compare run [--quick] [--rounds N] [--passes N] [--sizes BYTES,...] \
[--subscribers N,...] [--recovery-trials N] [--only round-trip|recovery]";

struct Options {
    /// One pass's rounds.
    plan: Plan,
    passes: usize,
    sizes: Vec<usize>,
    subscribers: Vec<usize>,
    recovery_trials: usize,
    recovery_deadline: Duration,
    round_trip: bool,
    recovery: bool,
}

fn list(flag: &str, value: &str) -> Result<Vec<usize>> {
    value
        .split(',')
        .map(|v| {
            v.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                Error::BadArgument(format!(
                    "{flag} {value:?}: expected positive numbers separated by commas"
                ))
            })
        })
        .collect()
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        plan: Plan {
            warmup: 50,
            rounds: 400,
            batches: 50,
        },
        passes: 5,
        sizes: vec![4 << 10, 1 << 20, 64 << 20],
        subscribers: vec![1, 4],
        recovery_trials: 20,
        recovery_deadline: Duration::from_secs(1),
        round_trip: true,
        recovery: true,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| Error::BadArgument(format!("{flag} needs a value\n{USAGE}")))
        };
        match flag.as_str() {
            "--quick" => {
                o.plan = Plan {
                    warmup: 20,
                    rounds: 300,
                    batches: 25,
                };
                o.passes = 1;
                o.recovery_trials = 3;
                o.recovery_deadline = Duration::from_millis(200);
            }
            "--rounds" => {
                o.plan.rounds = list(flag, value()?)?[0];
                o.plan.warmup = (o.plan.rounds / 10).max(1);
                o.plan.batches = (o.plan.rounds / 8).max(1);
            }
            "--passes" => o.passes = list(flag, value()?)?[0],
            "--sizes" => o.sizes = list(flag, value()?)?,
            "--subscribers" => o.subscribers = list(flag, value()?)?,
            "--recovery-trials" => o.recovery_trials = list(flag, value()?)?[0],
            "--only" => match value()?.as_str() {
                "round-trip" => o.recovery = false,
                "recovery" => o.round_trip = false,
                other => {
                    return Err(Error::BadArgument(format!(
                        "--only {other:?}: expected round-trip or recovery"
                    )));
                }
            },
            other => {
                return Err(Error::BadArgument(format!(
                    "unknown option {other:?}\n{USAGE}"
                )));
            }
        }
    }
    for &size in &o.sizes {
        check_size(size)?;
    }
    Ok(o)
}

/// One contender's timings of one configuration, and where they go in the report.
type Key = (&'static str, Receive, usize, usize);

/// Starts the contender of `key`, times one pass of `plan` on it, stops it.
fn pass(program: &Path, key: Key, plan: Plan, into: &mut Timings) -> Result<()> {
    let (contender, receive, size, n) = key;
    match contender {
        "floor" => {
            let mut c = floor::Floor::start(program, n)?;
            measure(&mut c, plan, into)?;
            c.stop()
        }
        "shmrc-pool" => {
            let mut c = shmrc_pool::PoolHandOff::start(program, size, n)?;
            measure(&mut c, plan, into)?;
            c.stop()
        }
        "shmrc-pubsub" => {
            let mut c = shmrc_pubsub::PubSub::start(program, receive, size, n)?;
            measure(&mut c, plan, into)?;
            c.stop()
        }
        _ => {
            let mut c = iox::IoxPublisher::start(program, receive, size, n)?;
            measure(&mut c, plan, into)?;
            c.stop()
        }
    }
}

fn run(program: &Path, o: &Options) -> Result<()> {
    if o.round_trip {
        let mut keys: Vec<Key> = Vec::new();
        for &size in &o.sizes {
            for &n in &o.subscribers {
                keys.push(("floor", Receive::Blocking, size, n));
                keys.push(("shmrc-pool", Receive::Blocking, size, n));
                for receive in [Receive::Blocking, Receive::Polling] {
                    keys.push(("shmrc-pubsub", receive, size, n));
                    keys.push(("iceoryx2", receive, size, n));
                }
            }
        }
        let mut timings = vec![Timings::default(); keys.len()];
        // Every configuration once a pass: a load that drifts during the run falls on
        // every contender alike.
        for done in 0..o.passes {
            eprintln!("pass {} of {}", done + 1, o.passes);
            for (&key, into) in keys.iter().zip(&mut timings) {
                pass(program, key, o.plan, into)?;
            }
        }
        for ((contender, receive, size, n), t) in keys.into_iter().zip(&timings) {
            let m = t.summary()?;
            report::round_trip(
                contender,
                receive.name(),
                size,
                n,
                t.latencies.len(),
                o.passes,
                &m,
            );
            eprintln!(
                "{contender:>14} {:>8} {size:>9} B x{n}: p50 {:>9.1} µs  p99 {:>9.1} µs  {:>9.0} samples/s",
                receive.name(),
                m.p50_us,
                m.p99_us,
                m.samples_per_s
            );
        }
    }
    if o.recovery {
        let (size, held) = (4 << 10, 4);
        let trials = o.recovery_trials;
        let pool: Vec<_> = (0..trials)
            .map(|_| shmrc_pool::recovery_trial(program, size, held, o.recovery_deadline))
            .collect::<Result<_>>()?;
        report::recovery("shmrc-pool", "none", size, held, o.recovery_deadline, &pool);
        let pubsub: Vec<_> = (0..trials)
            .map(|_| shmrc_pubsub::recovery_trial(program, size, held, o.recovery_deadline))
            .collect::<Result<_>>()?;
        report::recovery(
            "shmrc-pubsub",
            "none",
            size,
            held,
            o.recovery_deadline,
            &pubsub,
        );
        // Each trial without a cleanup call waits out the whole deadline if it never
        // recovers: three of them say as much as more would.
        let without: Vec<_> = (0..trials.min(3))
            .map(|_| iox::recovery_trial(program, size, held, false, o.recovery_deadline))
            .collect::<Result<_>>()?;
        report::recovery(
            "iceoryx2",
            "none",
            size,
            held,
            o.recovery_deadline,
            &without,
        );
        let with: Vec<_> = (0..trials)
            .map(|_| iox::recovery_trial(program, size, held, true, o.recovery_deadline))
            .collect::<Result<_>>()?;
        report::recovery(
            "iceoryx2",
            "try_cleanup_dead_nodes",
            size,
            held,
            o.recovery_deadline,
            &with,
        );
    }
    Ok(())
}

fn child(args: &[String]) -> Result<()> {
    let arg = |i: usize| {
        args.get(i).map(String::as_str).ok_or_else(|| {
            Error::BadArgument(format!("child {}: missing argument {i}", args.join(" ")))
        })
    };
    let count = |i: usize| -> Result<usize> {
        arg(i)?
            .parse()
            .map_err(|_| Error::BadArgument(format!("child: {:?} is not a count", args[i])))
    };
    match arg(0)? {
        "floor" => floor::serve(),
        "shmrc-pool" => shmrc_pool::serve(),
        "shmrc-pool-hold" => shmrc_pool::serve_holding(count(1)?),
        "shmrc-pubsub" => shmrc_pubsub::serve(Receive::parse(arg(1)?)?, arg(2)?, arg(3)?),
        "shmrc-pubsub-hold" => shmrc_pubsub::serve_holding(arg(1)?, count(2)?),
        "iceoryx2" => iox::serve(Receive::parse(arg(1)?)?, arg(2)?),
        "iceoryx2-hold" => iox::serve_holding(arg(1)?, count(2)?),
        other => Err(Error::BadArgument(format!("child role {other:?}"))),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => std::env::current_exe()
            .map_err(Error::from)
            .and_then(|program| parse(&args[1..]).and_then(|o| run(&program, &o)))
            .and_then(|()| iox::remove_domain())
            .and_then(|()| shmrc_pubsub::remove_namespace()),
        Some("child") => child(&args[1..]),
        _ => Err(Error::BadArgument(USAGE.into())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shmrc-iceoryx2-compare: {e}");
            ExitCode::FAILURE
        }
    }
}
