//! `shmrc-iceoryx2-compare run [OPTIONS]`: every contender of the crate's docs, one
//! JSON line each on stdout; `child ROLE ...` is a subscriber process (started by the
//! run, never by hand).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use shmrc_iceoryx2_compare::rounds::{Plan, Receive, RoundTrip, check_size, measure};
use shmrc_iceoryx2_compare::{Error, Result, floor, iox, report, shmrc_pool, shmrc_pubsub};

const USAGE: &str = "usage: shmrc-iceoryx2-compare run [--quick] [--rounds N] [--sizes BYTES,...] \
[--subscribers N,...] [--recovery-trials N] [--only round-trip|recovery]";

struct Options {
    plan: Plan,
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
            warmup: 200,
            rounds: 2000,
            batches: 250,
        },
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
                o.recovery_trials = 3;
                o.recovery_deadline = Duration::from_millis(200);
            }
            "--rounds" => {
                o.plan.rounds = list(flag, value()?)?[0];
                o.plan.warmup = (o.plan.rounds / 10).max(1);
                o.plan.batches = (o.plan.rounds / 8).max(1);
            }
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

fn row(
    contender: &str,
    receive: Receive,
    size: usize,
    subscribers: usize,
    plan: Plan,
    c: &mut dyn RoundTrip,
) -> Result<()> {
    let measured = measure(c, plan)?;
    report::round_trip(
        contender,
        receive.name(),
        size,
        subscribers,
        plan.rounds,
        &measured,
    );
    eprintln!(
        "{contender:>14} {:>8} {size:>9} B x{subscribers}: p50 {:>9.1} µs  p99 {:>9.1} µs  {:>9.0} samples/s",
        receive.name(),
        measured.p50_us,
        measured.p99_us,
        measured.samples_per_s
    );
    Ok(())
}

fn run(program: &Path, o: &Options) -> Result<()> {
    if o.round_trip {
        for &size in &o.sizes {
            for &n in &o.subscribers {
                let mut f = floor::Floor::start(program, n)?;
                row("floor", Receive::Blocking, size, n, o.plan, &mut f)?;
                f.stop()?;
                let mut p = shmrc_pool::PoolHandOff::start(program, size, n)?;
                row("shmrc-pool", Receive::Blocking, size, n, o.plan, &mut p)?;
                p.stop()?;
                for receive in [Receive::Blocking, Receive::Polling] {
                    let mut s = shmrc_pubsub::PubSub::start(program, receive, size, n)?;
                    row("shmrc-pubsub", receive, size, n, o.plan, &mut s)?;
                    s.stop()?;
                }
                for receive in [Receive::Blocking, Receive::Polling] {
                    let mut i = iox::IoxPublisher::start(program, receive, size, n)?;
                    row("iceoryx2", receive, size, n, o.plan, &mut i)?;
                    i.stop()?;
                }
            }
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
