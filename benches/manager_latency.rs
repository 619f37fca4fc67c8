//! The manager's reaction time: from the SIGKILL of a segment's last holder to the
//! segment's unlink by the manager's per-death sweep (issue target: p99 ≤ 50 ms).
//!
//! Each round starts a worker (the `shmrc worker` command) whose first file_system
//! create joins this bench's own manager (`SHMRC_RUNTIME_DIR` in a temporary directory),
//! makes it create one segment, watches `/dev/shm` with inotify, SIGKILLs the worker and
//! times the `IN_DELETE` of the segment's name. The same round times the baseline the
//! kernel sets: SIGKILL to the parent's `waitpid` returning. Two kinds of victim: the
//! segment's creator, and a worker that attached it after its creator (the keeper)
//! released it — the manager sweeps the dead's own segments first, the others after.
//! With `--others N` (default: 0, 1000 and 10,000), N more segments held by the live
//! keeper sit in the namespace, so each sweep has N live segments to look at.
//!
//! Run: `cargo bench --bench manager_latency` (`-- --rounds R --others N`).

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{TestNamespace, Worker, start_workers_with};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use shmrc::{PosixOs, transport};

/// How long one unlink may take before the round counts as a failure.
const GIVE_UP: Duration = Duration::from_secs(5);

struct Args {
    rounds: usize,
    others: Vec<usize>,
}

fn args() -> Args {
    let mut args = Args {
        rounds: 200,
        others: vec![0, 1000, 10_000],
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().and_then(|v| v.parse().ok());
        match flag.as_str() {
            "--rounds" => args.rounds = value().expect("--rounds N"),
            "--others" => args.others = vec![value().expect("--others N")],
            // cargo bench passes --bench; anything else is criterion's, not ours.
            _ => {}
        }
    }
    args
}

fn manager_env(runtime: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("SHMRC_RUNTIME_DIR", runtime.display().to_string()),
        ("SHMRC_MANAGER", "auto".into()),
        ("SHMRC_MANAGER_PROGRAM", env!("CARGO_BIN_EXE_shmrc").into()),
        ("SHMRC_MANAGER_GRACE_MS", "2000".into()),
    ]
}

fn spawn(label: &str, runtime: &Path) -> Worker {
    start_workers_with(label, 1, &manager_env(runtime)).remove(0)
}

fn create(worker: &Worker, ns: &str, len: usize) -> String {
    let reply = worker.ask(&format!("create {len} 1 {ns}"), vec![]);
    reply
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("unexpected reply {reply}"))
        .to_owned()
}

/// Waits for `name`'s `IN_DELETE` in `/dev/shm`.
fn wait_unlinked(watch: &Inotify, name: &str) -> Option<Instant> {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        for event in watch.read_events().unwrap_or_default() {
            if event.name.as_deref() == Some(OsStr::new(name)) {
                return Some(Instant::now());
            }
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(watch.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::from(ms)).expect("poll inotify");
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Who the victim, the segment's last holder, is to the segment.
#[derive(Copy, Clone, Debug)]
enum Victim {
    /// It created the segment (its name says so: swept first).
    Creator,
    /// It attached a segment the keeper created and then released.
    Attacher,
}

/// Times of one row: SIGKILL to unlink, SIGKILL to `waitpid`, rounds that timed out.
#[derive(Default)]
struct Row {
    latencies: Vec<Duration>,
    baseline: Vec<Duration>,
    failed: usize,
}

/// The live holder of the namespace's other segments, and how many it holds.
struct Keeper {
    worker: Worker,
    held: usize,
}

/// One round: a fresh victim becomes the last holder of a fresh segment, is killed, and
/// the unlink is timed.
fn round(row: &mut Row, kind: Victim, keeper: &Keeper, watch: &Inotify, ns: &str, runtime: &Path) {
    let mut victim = spawn("bench-victim", runtime);
    let name = match kind {
        Victim::Creator => create(&victim, ns, 4096),
        Victim::Attacher => {
            let name = create(&keeper.worker, ns, 4096);
            let index = keeper.held;
            let stream = &keeper.worker.stream;
            let share = format!("share {index}");
            transport::send(&PosixOs, stream, share.as_bytes(), vec![]).expect("send");
            let reply = transport::recv(&PosixOs, stream).expect("the keeper's handle");
            let text = String::from_utf8_lossy(&reply.payload).into_owned();
            let sum = text.strip_prefix("shared ").expect("shared <sum>");
            victim.ask(&format!("hold {sum}"), reply.handles);
            keeper.worker.ask(&format!("drop {index}"), vec![]);
            name
        }
    };
    let _ = watch.read_events();
    let killed = Instant::now();
    victim.child.kill().expect("SIGKILL the victim");
    victim.child.wait().expect("reap the victim");
    row.baseline.push(killed.elapsed());
    match wait_unlinked(watch, &name) {
        Some(at) => row.latencies.push(at - killed),
        None => row.failed += 1,
    }
}

fn print_row(others: usize, victim: Victim, row: &mut Row) {
    row.latencies.sort();
    row.baseline.sort();
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let Some(max) = row.latencies.last() else {
        println!("{others:>8}  {victim:?}  every round failed");
        return;
    };
    println!(
        "{:>8}  {:<9} {:>9} {:>9} {:>9} {:>9}   {:>9} p50 {:>9} p99  {:>6}",
        others,
        format!("{victim:?}"),
        ms(percentile(&row.latencies, 50.0)),
        ms(percentile(&row.latencies, 90.0)),
        ms(percentile(&row.latencies, 99.0)),
        ms(*max),
        ms(percentile(&row.baseline, 50.0)),
        ms(percentile(&row.baseline, 99.0)),
        row.failed
    );
}

fn main() {
    let args = args();
    println!(
        "SIGKILL of the last holder -> unlink by the manager, {} rounds per row",
        args.rounds
    );
    println!(
        "{:>8}  {:<9} {:>9} {:>9} {:>9} {:>9}   {:>22}  {:>6}",
        "others", "victim", "p50", "p90", "p99", "max", "baseline kill->waitpid", "failed"
    );
    for &others in &args.others {
        let t = TestNamespace::new(&format!("bench-kill-{others}"));
        let ns = t.ns.prefix().to_owned();
        let scratch = tempfile::tempdir().expect("a temporary directory");
        let runtime = scratch.path().join("runtime");
        // A live holder of `others` segments: the sweep after each death looks at them.
        let mut keeper = Keeper {
            worker: spawn("bench-keeper", &runtime),
            held: 0,
        };
        for _ in 0..others {
            create(&keeper.worker, &ns, 4096);
            keeper.held += 1;
        }
        let watch = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).expect("inotify");
        watch
            .add_watch("/dev/shm", AddWatchFlags::IN_DELETE)
            .expect("watch /dev/shm");
        for victim in [Victim::Creator, Victim::Attacher] {
            let mut row = Row::default();
            for _ in 0..args.rounds {
                round(&mut row, victim, &keeper, &watch, &ns, &runtime);
            }
            print_row(others, victim, &mut row);
        }
        keeper.worker.exit();
    }
}
