//! Model-based tests: random sequences of user operations (create, share as bytes or
//! over a socket, attach, drop a handle, release, write, kill, respawn, sweep, switch
//! strategy; any of them with the acting process killed inside) run on the real
//! protocol over the simulated kernel and on the oracle of `shmrc-model`, which must
//! agree after every step while P1–P5 hold (`tests/model_harness`). proptest shrinks a
//! failure to a short operation list and prints it.
//!
//! Also here: the named scenarios that seed the `refcount` fuzz target
//! (`fuzz/seeds/refcount/`), each run through the same harness. They are written by
//! `SHMRC_WRITE_SEEDS=1 cargo test --test model_based seeds`; without the variable the
//! test requires the committed files to be exactly these encodings.
//!
//! proptest-state-machine runs on std atomics, so under loom or shuttle this file is
//! compiled out (the sim itself runs there; its loom and shuttle tests are elsewhere).
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest::test_runner::Config;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use shmrc_model::oracle::{Name, Op, Oracle, PROCESSES, Strategy as Sharing};
use shmrc_testkit::model_harness::{self, Harness};

/// Cases per run unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 3000;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// The oracle as proptest's reference: it generates operations and, never observing,
/// assumes the likeliest outcome where a crash leaves several possible (the harness's
/// own copy of the oracle observes and is exact).
struct Reference;

fn crash() -> impl Strategy<Value = Option<u8>> {
    prop_oneof![
        12 => Just(None),
        3 => (0u8..24).prop_map(Some),
        1 => (0u8..64).prop_map(Some),
    ]
}

impl ReferenceStateMachine for Reference {
    type State = Oracle;
    type Transition = Op;

    /// Every process starts with a random strategy setting (file_system likelier: it
    /// is the one with a refcount to break).
    fn init_state() -> BoxedStrategy<Oracle> {
        let setting =
            prop_oneof![3 => Just(Sharing::FileSystem), 1 => Just(Sharing::FileDescriptor)];
        proptest::collection::vec(setting, PROCESSES)
            .prop_map(|settings| {
                let mut oracle = Oracle::new();
                for (proc, s) in oracle.procs.iter_mut().zip(settings) {
                    proc.strategy = s;
                }
                oracle
            })
            .boxed()
    }

    /// Operations that resolve in `state`: live actors, existing buffers and handles.
    fn transitions(state: &Oracle) -> BoxedStrategy<Op> {
        let alive = |p: &usize| state.procs[*p].alive;
        let live: Vec<u8> = (0..PROCESSES).filter(alive).map(|p| p as u8).collect();
        let dead: Vec<u8> = (0..PROCESSES)
            .filter(|p| !alive(p))
            .map(|p| p as u8)
            .collect();
        let bufs: Vec<(u8, u8)> = live
            .iter()
            .flat_map(|&p| (0..state.procs[p as usize].bufs.len()).map(move |i| (p, i as u8)))
            .collect();
        let handles = state.handles.len() as u8;
        let mut arms: Vec<(u32, BoxedStrategy<Op>)> = vec![(
            2,
            crash().prop_map(|crash_at| Op::Sweep { crash_at }).boxed(),
        )];
        if !live.is_empty() {
            let p = || select(live.clone());
            arms.push((
                3,
                (p(), prop_oneof![1 => Just(0u8), 6 => 1u8..4], crash())
                    .prop_map(|(p, capacity, crash_at)| Op::Create {
                        p,
                        capacity,
                        crash_at,
                    })
                    .boxed(),
            ));
            let strategy =
                prop_oneof![2 => Just(Sharing::FileSystem), 1 => Just(Sharing::FileDescriptor)];
            arms.push((
                1,
                (p(), strategy)
                    .prop_map(|(p, strategy)| Op::SetStrategy { p, strategy })
                    .boxed(),
            ));
            arms.push((2, p().prop_map(|p| Op::Kill { p }).boxed()));
            if !bufs.is_empty() {
                let held = || select(bufs.clone());
                arms.push((
                    8,
                    (held(), p(), any::<bool>(), crash())
                        .prop_map(|((p, buf), to, as_bytes, crash_at)| Op::Share {
                            p,
                            buf,
                            to,
                            as_bytes,
                            crash_at,
                        })
                        .boxed(),
                ));
                arms.push((
                    3,
                    (held(), crash())
                        .prop_map(|((p, buf), crash_at)| Op::Release { p, buf, crash_at })
                        .boxed(),
                ));
                arms.push((
                    2,
                    (held(), crash())
                        .prop_map(|((p, buf), crash_at)| Op::Recycle { p, buf, crash_at })
                        .boxed(),
                ));
                arms.push((
                    1,
                    (held(), any::<u8>(), any::<u8>())
                        .prop_map(|((p, buf), offset, byte)| Op::Write {
                            p,
                            buf,
                            offset,
                            byte,
                        })
                        .boxed(),
                ));
            }
        }
        if handles > 0 {
            arms.push((
                6,
                (0..handles, crash())
                    .prop_map(|(handle, crash_at)| Op::Attach { handle, crash_at })
                    .boxed(),
            ));
            arms.push((
                1,
                (0..handles, crash())
                    .prop_map(|(handle, crash_at)| Op::DropHandle { handle, crash_at })
                    .boxed(),
            ));
        }
        // A sender killed while its handle travels is where the refcount is hardest
        // (its in-flight reference becomes reclaimable): make it likelier.
        let senders: Vec<u8> = state
            .handles
            .iter()
            .filter(|h| h.sender_alive)
            .map(|h| h.sender as u8)
            .collect();
        if !senders.is_empty() {
            arms.push((2, select(senders).prop_map(|p| Op::Kill { p }).boxed()));
        }
        if !dead.is_empty() {
            arms.push((
                2 * dead.len() as u32,
                select(dead).prop_map(|p| Op::Respawn { p }).boxed(),
            ));
        }
        Union::new_weighted(arms).boxed()
    }

    fn preconditions(state: &Oracle, op: &Op) -> bool {
        state.resolve(op).is_some()
    }

    fn apply(mut state: Oracle, op: &Op) -> Oracle {
        if let Some(step) = state.resolve(op) {
            let outcome = state.expect(&step).likeliest();
            // The likeliest outcome is allowed by construction.
            let _ = state.apply(&step, outcome);
        }
        state
    }
}

/// The oracle as reference with nobody ever killed: [`Reference`]'s operations, each
/// kill turned into a sweep (by a live process) and every `crash_at` dropped.
struct Peaceful;

/// `op` with no process killed, inside or by it.
fn peaceful(op: Op) -> Op {
    match op {
        Op::Create { p, capacity, .. } => Op::Create {
            p,
            capacity,
            crash_at: None,
        },
        Op::Share {
            p,
            buf,
            to,
            as_bytes,
            ..
        } => Op::Share {
            p,
            buf,
            to,
            as_bytes,
            crash_at: None,
        },
        Op::Attach { handle, .. } => Op::Attach {
            handle,
            crash_at: None,
        },
        Op::DropHandle { handle, .. } => Op::DropHandle {
            handle,
            crash_at: None,
        },
        Op::Release { p, buf, .. } => Op::Release {
            p,
            buf,
            crash_at: None,
        },
        Op::Recycle { p, buf, .. } => Op::Recycle {
            p,
            buf,
            crash_at: None,
        },
        Op::Sweep { .. } | Op::Kill { .. } => Op::Sweep { crash_at: None },
        op @ (Op::Write { .. } | Op::SetStrategy { .. } | Op::Respawn { .. }) => op,
    }
}

impl ReferenceStateMachine for Peaceful {
    type State = Oracle;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Oracle> {
        Reference::init_state()
    }

    fn transitions(state: &Oracle) -> BoxedStrategy<Op> {
        Reference::transitions(state).prop_map(peaceful).boxed()
    }

    fn preconditions(state: &Oracle, op: &Op) -> bool {
        Reference::preconditions(state, op)
    }

    fn apply(state: Oracle, op: &Op) -> Oracle {
        Reference::apply(state, op)
    }
}

/// One run of the real protocol through the harness, and whether any process died in it.
struct Run {
    harness: Harness,
    anyone_died: bool,
}

impl Run {
    fn new(reference: &Oracle) -> Run {
        let settings: Vec<Sharing> = reference.procs.iter().map(|p| p.strategy).collect();
        Run {
            harness: Harness::with_strategies(0, &settings),
            anyone_died: false,
        }
    }

    fn apply(mut self, op: Op) -> Run {
        if let Err(failure) = self.harness.run(&op) {
            panic!("{failure}");
        }
        self.anyone_died |= self.harness.oracle().procs.iter().any(|p| !p.alive);
        self
    }

    /// P3 while processes live, at the end of a run in which nobody died: every live
    /// process releases every buffer and every handle in flight is dropped unattached,
    /// with no sweep; the harness checks after each of these steps that the kernel's
    /// names and objects are exactly the oracle's, and here every segment must be gone
    /// (no name left, no file_descriptor memory alive). Then the usual kill-all, sweep
    /// and P3 ([`Harness::finish`]).
    fn teardown(mut self) {
        if std::env::var_os("SHMRC_MODEL_TALLY").is_some() {
            eprintln!("tally {:?}", self.harness.tally());
        }
        if !self.anyone_died {
            self.release_everything();
        }
        if let Err(failure) = self.harness.finish() {
            panic!("{failure}");
        }
    }

    fn release_everything(&mut self) {
        let run = |harness: &mut Harness, op: Op| {
            if let Err(failure) = harness.run(&op) {
                panic!("P3 while processes live: {failure}");
            }
        };
        for p in 0..PROCESSES {
            while !self.harness.oracle().procs[p].bufs.is_empty() {
                let release = Op::Release {
                    p: p as u8,
                    buf: 0,
                    crash_at: None,
                };
                run(&mut self.harness, release);
            }
        }
        while !self.harness.oracle().handles.is_empty() {
            let drop = Op::DropHandle {
                handle: 0,
                crash_at: None,
            };
            run(&mut self.harness, drop);
        }
        let oracle = self.harness.oracle();
        for (seg, s) in oracle.segs.iter().enumerate() {
            assert!(
                s.name != Name::Named && !oracle.fd_alive(seg),
                "P3 while processes live violated: nobody died, every buffer was released and every handle dropped, yet segment {seg} is {:?} (file_descriptor memory alive: {}) after {} operations",
                s.name,
                oracle.fd_alive(seg),
                self.harness.applied()
            );
        }
    }
}

/// The real protocol on the simulated kernel, through the harness.
struct RealProtocol;

impl StateMachineTest for RealProtocol {
    type SystemUnderTest = Run;
    type Reference = Reference;

    fn init_test(reference: &Oracle) -> Run {
        Run::new(reference)
    }

    fn apply(run: Run, _reference: &Oracle, op: Op) -> Run {
        run.apply(op)
    }

    fn teardown(run: Run, _reference: Oracle) {
        run.teardown();
    }
}

/// As [`RealProtocol`], with nobody killed: every run ends with P3 while processes live.
struct PeacefulProtocol;

impl StateMachineTest for PeacefulProtocol {
    type SystemUnderTest = Run;
    type Reference = Peaceful;

    fn init_test(reference: &Oracle) -> Run {
        Run::new(reference)
    }

    fn apply(run: Run, _reference: &Oracle, op: Op) -> Run {
        let run = run.apply(op);
        assert!(!run.anyone_died, "a peaceful run killed a process");
        run
    }

    fn teardown(run: Run, _reference: Oracle) {
        run.teardown();
    }
}

prop_state_machine! {
    #![proptest_config(Config {
        cases: cases(),
        failure_persistence: None,
        .. Config::default()
    })]

    /// Random op sequences with kills between and inside operations, 4 processes, both
    /// strategies switched at run time: the real protocol agrees with the oracle and
    /// P1–P5 hold after every step, and a final kill-all plus sweep leaves nothing.
    #[test]
    fn the_real_protocol_agrees_with_the_oracle_under_random_ops_and_kills(sequential 1..64 => RealProtocol);

    /// The same with nobody killed (kills become sweeps by live processes): at the end,
    /// every buffer released and every handle dropped, every segment is gone with no
    /// sweep (P3 while processes live), before the usual kill-all and sweep.
    #[test]
    fn with_nobody_killed_the_releases_alone_leave_nothing(sequential 1..64 => PeacefulProtocol);
}

/// Named scenarios, each reaching one of the hard cases directly (also the fuzzer's
/// seeds).
fn scenarios() -> Vec<(&'static str, Vec<Op>)> {
    let fs = |p| Op::SetStrategy {
        p,
        strategy: Sharing::FileSystem,
    };
    let create = |p, capacity| Op::Create {
        p,
        capacity,
        crash_at: None,
    };
    let share = |p, buf, to, as_bytes| Op::Share {
        p,
        buf,
        to,
        as_bytes,
        crash_at: None,
    };
    let attach = |handle| Op::Attach {
        handle,
        crash_at: None,
    };
    let release = |p, buf| Op::Release {
        p,
        buf,
        crash_at: None,
    };
    let sweep = Op::Sweep { crash_at: None };
    let recycle = |p, buf| Op::Recycle {
        p,
        buf,
        crash_at: None,
    };
    let mut out = Vec::new();
    // The last holder killed at several points of its release, then a sweep.
    for step in [2u8, 5, 9] {
        let name = match step {
            2 => "kill_mid_release_2",
            5 => "kill_mid_release_5",
            _ => "kill_mid_release_9",
        };
        out.push((
            name,
            vec![
                fs(0),
                create(0, 1),
                share(0, 0, 1, true),
                attach(0),
                release(0, 0),
                Op::Release {
                    p: 1,
                    buf: 0,
                    crash_at: Some(step),
                },
                sweep.clone(),
            ],
        ));
    }
    // A handle whose sender dies before it is attached.
    out.push((
        "share_then_sender_killed",
        vec![
            fs(0),
            create(0, 2),
            share(0, 0, 1, false),
            Op::Kill { p: 0 },
            attach(0),
            sweep.clone(),
            release(1, 0),
        ],
    ));
    // The sender releases while its handle travels: the in-flight reference keeps it.
    out.push((
        "release_while_in_flight",
        vec![
            fs(0),
            create(0, 1),
            share(0, 0, 1, true),
            release(0, 0),
            sweep.clone(),
            attach(0),
        ],
    ));
    // A sweeper killed while it turns slots to tombstones, then the dead sender's
    // handle attached through a free slot, then a sweep that must roll them back.
    for step in [10u8, 12] {
        out.push((
            if step == 10 {
                "tombstones_left_then_attach_10"
            } else {
                "tombstones_left_then_attach_12"
            },
            vec![
                fs(0),
                create(0, 2),
                share(0, 0, 1, true),
                Op::Kill { p: 0 },
                Op::Sweep {
                    crash_at: Some(step),
                },
                attach(0),
                sweep.clone(),
                release(1, 0),
            ],
        ));
    }
    // A dead sender's in-flight slot claimed by another share before its handle is
    // attached: the attach must find the segment full, not overwrite the slot.
    out.push((
        "dead_senders_slot_reused",
        vec![
            fs(0),
            create(0, 2),
            share(0, 0, 1, true),
            share(0, 0, 2, true),
            attach(1),
            Op::Kill { p: 0 },
            share(2, 0, 3, true),
            share(2, 0, 1, true),
            attach(0),
        ],
    ));
    // Recycling: refused while a handle is in flight or another process holds it;
    // reused once nobody does; a handle of the earlier use (its sender dead, so its
    // in-flight reference reclaimable) is then Stale.
    out.push((
        "recycle_then_stale_handle",
        vec![
            fs(0),
            fs(1),
            create(0, 3),
            share(0, 0, 1, true),
            recycle(0, 0),
            attach(0),
            recycle(0, 0),
            share(0, 0, 2, true),
            attach(1),
            share(2, 0, 3, true),
            Op::Kill { p: 2 },
            release(1, 0),
            recycle(0, 0),
            attach(0),
        ],
    ));
    // A pool killed inside its recycle (tombstones and a dead finalizer word left),
    // then a sweep.
    for step in [2u8, 4, 6] {
        out.push((
            match step {
                2 => "kill_mid_recycle_2",
                4 => "kill_mid_recycle_4",
                _ => "kill_mid_recycle_6",
            },
            vec![
                fs(0),
                create(0, 3),
                share(0, 0, 1, true),
                Op::Kill { p: 1 },
                Op::Recycle {
                    p: 0,
                    buf: 0,
                    crash_at: Some(step),
                },
                Op::Sweep { crash_at: None },
            ],
        ));
    }
    // A recycle killed right after taking the finalizer word (no tombstone yet), a
    // handle of the segment attached, then a sweep killed inside its takeover: it tombs
    // the free slot before the live holder's and dies there, a tombstone under a dead
    // finalizer beside a live holder (found by the `refcount` fuzzer; the oracle had
    // taken a crashed finalize of a held segment to leave none).
    out.push((
        "sweep_killed_taking_over_a_dead_recycle",
        vec![
            fs(0),
            create(0, 2),
            share(0, 0, 3, true),
            Op::Recycle {
                p: 0,
                buf: 0,
                crash_at: Some(1),
            },
            attach(0),
            Op::Sweep { crash_at: Some(10) },
        ],
    ));
    // Both strategies, a socket and a switch at run time, a receiver killed mid-attach.
    out.push((
        "mixed_strategies",
        vec![
            create(0, 0),
            fs(1),
            create(1, 3),
            share(0, 0, 3, false),
            share(1, 0, 2, false),
            Op::Attach {
                handle: 1,
                crash_at: Some(1),
            },
            attach(0),
            Op::Write {
                p: 3,
                buf: 0,
                offset: 3,
                byte: 0,
            },
            Op::Respawn { p: 2 },
            sweep,
        ],
    ));
    // A commit below the mark (found by the random ops on merging the mark): a holder
    // that shared a handle is killed at the tenth crash point of its release, a sweep
    // at its fifteenth, after its commit and before its unlink; slot 2, above the mark,
    // is still FREE. The attach of the dead sender's handle is Gone (committed), which
    // the oracle allowed only once it learnt the finalizer word's commit.
    out.push((
        "commit_below_the_mark_then_attach",
        vec![
            Op::SetStrategy {
                p: 3,
                strategy: Sharing::FileSystem,
            },
            Op::Kill { p: 2 },
            create(3, 2),
            release(3, 0),
            Op::Respawn { p: 2 },
            Op::Create {
                p: 1,
                capacity: 1,
                crash_at: Some(4),
            },
            Op::Sweep { crash_at: None },
            create(3, 2),
            share(3, 0, 0, true),
            Op::Release {
                p: 3,
                buf: 0,
                crash_at: Some(10),
            },
            Op::Kill { p: 2 },
            Op::Sweep { crash_at: Some(15) },
            attach(0),
        ],
    ));
    out
}

#[test]
fn seed_scenarios_agree_with_the_oracle_and_match_the_committed_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/refcount");
    let write = std::env::var_os("SHMRC_WRITE_SEEDS").is_some();
    for (name, ops) in scenarios() {
        // Every process starts with file_descriptor, the real default; the scenarios
        // switch where they need to.
        let strategies = [Sharing::FileDescriptor; PROCESSES];
        let bytes = model_harness::encode_input(&strategies, &ops);
        assert_eq!(
            model_harness::decode_input(&bytes),
            (strategies.to_vec(), ops.clone()),
            "{name} round-trips"
        );
        let mut harness = Harness::with_strategies(0, &strategies);
        for op in &ops {
            if let Err(failure) = harness.run(op) {
                panic!("scenario {name}: {failure}");
            }
        }
        assert_eq!(harness.applied(), ops.len(), "{name}: every op ran");
        if name == "recycle_then_stale_handle" {
            for reached in ["Recycle Held", "Recycle Recycled", "Attach Stale"] {
                assert!(
                    harness.tally().contains_key(reached),
                    "{name} no longer reaches {reached}: {:?}",
                    harness.tally()
                );
            }
        }
        if let Err(failure) = harness.finish() {
            panic!("scenario {name}: {failure}");
        }
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        } else {
            assert_eq!(
                std::fs::read(&path).ok(),
                Some(bytes),
                "{} is not the encoding of scenario {name}: rerun with SHMRC_WRITE_SEEDS=1",
                path.display()
            );
        }
    }
}
