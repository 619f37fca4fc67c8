//! Real kill storms against the manager: worker processes (the `shmrc worker` command,
//! on the real kernel) create, share, attach and release file_system buffers while the
//! test SIGKILLs random workers, between their commands or in the middle of one, and
//! sometimes the manager itself. Proptest chooses the schedule.
//!
//! Checked, in every case:
//! - P1: no live worker ever sees a buffer it holds vanish or change (each verifies the
//!   checksum of everything it holds, during the storm and before it exits), and a handle
//!   from a live sender always attaches;
//! - P3 while the job runs: after a worker is SIGKILLed, and while the manager has not
//!   been killed in this case, the namespace in `/dev/shm` shrinks to what live workers
//!   hold within [`RECLAIM_BOUND`], by the manager's per-death sweep alone;
//! - P3 at the end: once the last worker is gone the namespace is empty within
//!   [`RECLAIM_BOUND`] (a manager started afterwards sweeps what a killed one left), and
//!   no manager outlives its grace period by more than [`EXIT_BOUND`].
//!
//! Each case has its own namespace and its own manager (`SHMRC_RUNTIME_DIR` in a fresh
//! temporary directory). The bounds are generous failure thresholds, not measurements:
//! the latency is measured by the benchmarks (`docs/PERFORMANCE.md`).
//!
//! Run: `cargo test -p shmrc-cli --test manager_storm -- --nocapture`
//! (`SHMRC_STORM_CASES`, default 16, runs more cases).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Worker, start_workers_with};
use proptest::prelude::*;
use shmrc::transport;
use shmrc_testkit::data::field;
use shmrc_testkit::names::TestNamespace;

/// How long the namespace may take to shrink to what live workers hold.
const RECLAIM_BOUND: Duration = Duration::from_secs(10);
/// How long past its grace period a manager may take to exit.
const EXIT_BOUND: Duration = Duration::from_secs(10);
/// The managers' grace period in these tests.
const GRACE_MS: u64 = 300;

/// One step of a storm.
#[derive(Clone, Debug)]
enum Act {
    /// Worker `w` creates a buffer of `len` bytes filled from `seed`.
    Create { w: usize, len: usize, seed: u8 },
    /// Worker `from` shares its buffer number `pick` (modulo what it holds) with `to`.
    Share { from: usize, pick: usize, to: usize },
    /// Worker `w` releases its buffer number `pick` (modulo what it holds).
    Release { w: usize, pick: usize },
    /// Worker `w` checks every buffer it holds.
    Verify { w: usize },
    /// Worker `w` is SIGKILLed between two commands.
    Kill { w: usize },
    /// Worker `w` is sent a create (or, with `release`, a release) and SIGKILLed
    /// `after_us` microseconds later, whether it finished or not.
    KillDuring {
        w: usize,
        release: bool,
        after_us: u64,
    },
    /// The manager (if one runs) is SIGKILLed.
    KillManager,
    /// Nothing happens for a few milliseconds.
    Pause { ms: u64 },
}

fn act(workers: usize) -> impl Strategy<Value = Act> {
    let w = 0..workers;
    prop_oneof![
        4 => (w.clone(), prop_oneof![Just(4096usize), Just(64 << 10), Just(1 << 20)], any::<u8>())
            .prop_map(|(w, len, seed)| Act::Create { w, len, seed }),
        4 => (w.clone(), any::<usize>(), w.clone())
            .prop_map(|(from, pick, to)| Act::Share { from, pick, to }),
        2 => (w.clone(), any::<usize>()).prop_map(|(w, pick)| Act::Release { w, pick }),
        1 => w.clone().prop_map(|w| Act::Verify { w }),
        1 => w.clone().prop_map(|w| Act::Kill { w }),
        1 => (w, any::<bool>(), 0u64..3000)
            .prop_map(|(w, release, after_us)| Act::KillDuring { w, release, after_us }),
        1 => Just(Act::KillManager),
        1 => (0u64..20).prop_map(|ms| Act::Pause { ms }),
    ]
}

/// A worker the storm has not killed, and the buffers it holds (name, checksum), in the
/// worker's own numbering.
struct Live {
    worker: Worker,
    held: Vec<(String, u64)>,
}

/// One storm: its namespace, its manager's runtime directory (which the manager creates,
/// inside a temporary directory), its workers.
struct Storm {
    t: TestNamespace,
    _scratch: tempfile::TempDir,
    runtime: PathBuf,
    workers: Vec<Option<Live>>,
    tally: Tally,
}

/// What one storm did, printed at its end (so a passing run shows it stormed).
#[derive(Default, Debug)]
struct Tally {
    created: usize,
    shared: usize,
    released: usize,
    killed_idle: usize,
    killed_mid_command: usize,
    managers_killed: usize,
    reclaims_seen_while_running: usize,
}

impl Storm {
    fn new(label: &str, count: usize) -> Storm {
        let t = TestNamespace::new(label);
        let scratch = tempfile::tempdir().expect("a temporary directory");
        let runtime = scratch.path().join("runtime");
        let workers = start_workers_with(label, count as u32, &manager_env(&runtime))
            .into_iter()
            .map(|worker| {
                Some(Live {
                    worker,
                    held: Vec::new(),
                })
            })
            .collect();
        Storm {
            t,
            _scratch: scratch,
            runtime,
            workers,
            tally: Tally::default(),
        }
    }

    fn run(&mut self, act: &Act) {
        match *act {
            Act::Create { w, len, seed } => {
                let ns = self.t.ns.prefix().to_owned();
                let Some(live) = self.live(w) else { return };
                let reply = live
                    .worker
                    .ask(&format!("create {len} {seed} {ns}"), vec![]);
                let (index, sum, name) = parse_created(&reply);
                assert_eq!(index, live.held.len(), "worker numbering: {reply}");
                live.held.push((name, sum));
                self.tally.created += 1;
            }
            Act::Share { from, pick, to } => {
                if from == to || self.live(to).is_none() {
                    return;
                }
                let Some(sender) = self.live(from) else {
                    return;
                };
                if sender.held.is_empty() {
                    return;
                }
                let index = pick % sender.held.len();
                let held = sender.held[index].clone();
                transport::send(
                    &sender.worker.stream,
                    format!("share {index}").as_bytes(),
                    vec![],
                )
                .expect("send to worker");
                let reply = transport::recv(&sender.worker.stream).expect("reply");
                let text = String::from_utf8_lossy(&reply.payload).into_owned();
                assert_eq!(text, format!("shared {}", held.1), "worker {from}");
                // The sender lives: its handle must attach (P1 for handles in flight).
                let receiver = self.live(to).expect("checked above");
                let reply = receiver
                    .worker
                    .ask(&format!("hold {}", held.1), reply.handles);
                assert_eq!(reply, format!("held {}", receiver.held.len() + 1));
                receiver.held.push(held);
                self.tally.shared += 1;
            }
            Act::Release { w, pick } => {
                let Some(live) = self.live(w) else { return };
                if live.held.is_empty() {
                    return;
                }
                let index = pick % live.held.len();
                let reply = live.worker.ask(&format!("drop {index}"), vec![]);
                assert!(reply.starts_with("dropped "), "worker {w}: {reply}");
                live.held.remove(index);
                self.tally.released += 1;
            }
            Act::Verify { w } => {
                let Some(live) = self.live(w) else { return };
                let expected = format!("verified {}", live.held.len());
                assert_eq!(live.worker.ask("verify", vec![]), expected, "worker {w}");
            }
            Act::Kill { w } => {
                if let Some(live) = self.workers[w].take() {
                    live.worker.kill();
                    self.tally.killed_idle += 1;
                    self.check_reclaimed_while_running();
                }
            }
            Act::KillDuring {
                w,
                release,
                after_us,
            } => {
                let ns = self.t.ns.prefix().to_owned();
                let Some(live) = self.workers[w].take() else {
                    return;
                };
                let command = if release && !live.held.is_empty() {
                    "drop 0".to_owned()
                } else {
                    format!("create {} 7 {ns}", 1 << 20)
                };
                transport::send(&live.worker.stream, command.as_bytes(), vec![])
                    .expect("send to worker");
                std::thread::sleep(Duration::from_micros(after_us));
                live.worker.kill();
                self.tally.killed_mid_command += 1;
                self.check_reclaimed_while_running();
            }
            Act::KillManager => {
                if let Some(pid) = manager_pid(&self.runtime) {
                    kill_by_pid(pid);
                    self.tally.managers_killed += 1;
                }
            }
            Act::Pause { ms } => std::thread::sleep(Duration::from_millis(ms)),
        }
    }

    fn live(&mut self, w: usize) -> Option<&mut Live> {
        self.workers[w].as_mut()
    }

    /// The names live workers hold.
    fn held_names(&self) -> BTreeSet<String> {
        self.workers
            .iter()
            .flatten()
            .flat_map(|live| live.held.iter().map(|(name, _)| name.clone()))
            .collect()
    }

    /// After a death, while the manager that watches every worker lives: the namespace
    /// shrinks to what live workers hold, while the storm goes on.
    fn check_reclaimed_while_running(&mut self) {
        if self.tally.managers_killed > 0 || manager_pid(&self.runtime).is_none() {
            return;
        }
        self.tally.reclaims_seen_while_running += 1;
        let held = self.held_names();
        wait_until(
            RECLAIM_BOUND,
            "the dead worker's segments to be unlinked",
            || self.t.names().into_iter().all(|name| held.contains(&name)),
        );
    }

    /// Every surviving worker verifies what it holds and exits; then the namespace must
    /// empty and the manager go.
    fn finish(mut self) {
        println!("storm: {} workers, {:?}", self.workers.len(), self.tally);
        for (w, live) in self.workers.iter_mut().enumerate() {
            if let Some(live) = live.take() {
                let expected = format!("verified {}", live.held.len());
                assert_eq!(live.worker.ask("verify", vec![]), expected, "worker {w}");
                live.worker.exit();
            }
        }
        // A manager killed mid-storm may have left dead workers' segments: a manager
        // started now sweeps them at start (P3: a later manager sweeps what an earlier
        // one left). Ours, in the foreground, so that we reap it.
        let mut sweeper: Option<Child> = None;
        if manager_pid(&self.runtime).is_none() {
            sweeper = Some(
                Command::new(env!("CARGO_BIN_EXE_shmrc"))
                    .args(["manager", "--foreground"])
                    .envs(manager_env(&self.runtime))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start a manager"),
            );
        }
        wait_until(RECLAIM_BOUND, "the namespace to be empty", || {
            self.t.names().is_empty()
        });
        wait_until(
            Duration::from_millis(GRACE_MS) + EXIT_BOUND,
            "the manager to exit after its grace period",
            || manager_pid(&self.runtime).is_none(),
        );
        if let Some(mut child) = sweeper {
            // It has exited (it no longer answers): reaping is immediate.
            let status = shmrc_testkit::process::wait_within(&mut child, EXIT_BOUND);
            assert!(status.success(), "the manager exited with {status}");
        }
    }
}

/// The environment that points workers (and their managers) at this storm's manager.
fn manager_env(runtime: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("SHMRC_RUNTIME_DIR", runtime.display().to_string()),
        ("SHMRC_MANAGER", "auto".into()),
        ("SHMRC_MANAGER_PROGRAM", env!("CARGO_BIN_EXE_shmrc").into()),
        ("SHMRC_MANAGER_GRACE_MS", GRACE_MS.to_string()),
    ]
}

/// `created <index> <sum> <name>`.
fn parse_created(reply: &str) -> (usize, u64, String) {
    let words: Vec<&str> = reply.split_whitespace().collect();
    match words.as_slice() {
        ["created", index, sum, name] => (
            index.parse().expect("index"),
            sum.parse().expect("sum"),
            (*name).to_owned(),
        ),
        _ => panic!("unexpected reply to create: {reply}"),
    }
}

/// The pid of the manager of `runtime`, if one runs (`shmrc status --json`).
fn manager_pid(runtime: &Path) -> Option<u32> {
    let out = shmrc_testkit::process::output_within(
        Command::new(env!("CARGO_BIN_EXE_shmrc"))
            .args(["status", "--json"])
            .env("SHMRC_RUNTIME_DIR", runtime),
        Duration::from_secs(60),
    );
    if !out.status.success() {
        return None;
    }
    let json = String::from_utf8(out.stdout).expect("utf-8 status");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("JSON status");
    if doc["running"] != true {
        return None;
    }
    Some(u32::try_from(field(&json, "pid")).expect("a pid"))
}

/// SIGKILLs the manager of this test's own runtime directory, by pid.
fn kill_by_pid(pid: u32) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    // It may have exited on its own meanwhile: ESRCH is fine.
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
}

fn wait_until(bound: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !done() {
        assert!(Instant::now() < deadline, "waited {bound:?} for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn cases() -> u32 {
    std::env::var("SHMRC_STORM_CASES").map_or(16, |v| v.parse().expect("a number of cases"))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn kill_storms_never_take_a_live_workers_buffer_and_leave_nothing(
        (count, acts) in (3usize..=5).prop_flat_map(|n| (Just(n), prop::collection::vec(act(n), 10..40)))
    ) {
        let mut storm = Storm::new("storm", count);
        for act in &acts {
            storm.run(act);
        }
        storm.finish();
    }
}

/// A fixed storm that must exercise the per-death sweep: a worker that alone holds one
/// of its segments and shares another is killed while the manager watches everyone; its
/// own segment goes, the shared one stays with the receiver.
#[test]
fn a_dead_workers_own_segments_go_while_the_others_keep_theirs() {
    let mut storm = Storm::new("storm-fixed", 3);
    let script = [
        Act::Create {
            w: 0,
            len: 4096,
            seed: 1,
        },
        Act::Create {
            w: 0,
            len: 4096,
            seed: 2,
        },
        Act::Share {
            from: 0,
            pick: 0,
            to: 1,
        },
        Act::Kill { w: 0 },
    ];
    for act in &script {
        storm.run(act);
    }
    assert_eq!(
        storm.tally.reclaims_seen_while_running, 1,
        "the manager watched the death"
    );
    assert_eq!(storm.t.names().len(), 1, "only the shared segment is left");
    storm.finish();
}
