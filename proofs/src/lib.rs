//! Exhaustive exploration of `shmrc_model::protocol`: a breadth-first search over every
//! state reachable from the initial one (every interleaving of the processes' atomic
//! steps, a crash allowed at each), with a visited set, checking P1-P5 in every state.
//! Breadth-first, so the first violation found has a shortest trace, rebuilt from the
//! parent links and printed step by step.
//!
//! The visited set stores a 128-bit fingerprint of each state (two SipHash-1-3 digests
//! under different keys), not the state (504 bytes): millions of states fit in a few
//! hundred MB. Two distinct states share a fingerprint with probability about
//! `n^2 / 2^129` (below 10^-24 for n = 10^7), the only way a state could be skipped.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use shmrc_model::protocol::{Config, Property, State, Transition, Word};

/// Hashes a fingerprint (already uniformly random) by taking its low bits.
#[derive(Default)]
pub struct Low64(u64);

impl Hasher for Low64 {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u128(&mut self, x: u128) {
        self.0 = x as u64;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The 128-bit fingerprint of a state.
pub fn fingerprint(state: &State) -> u128 {
    let digest = |key: u64| {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        state.hash(&mut h);
        h.finish()
    };
    u128::from(digest(0x9e37_79b9_7f4a_7c15)) << 64 | u128::from(digest(0xc2b2_ae3d_27d4_eb4f))
}

/// A property violated in a reachable state, with the shortest way there.
#[derive(Debug)]
pub struct Violation {
    /// The property.
    pub property: Property,
    /// What is wrong in the last state.
    pub why: String,
    /// The initial state.
    pub initial: State,
    /// The transitions from the initial state, each with its description and the state
    /// it leads to.
    pub trace: Vec<(String, State)>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "VIOLATION of {}: {}", self.property, self.why)?;
        writeln!(f, "  ({})", self.property.statement())?;
        writeln!(f, "shortest trace ({} steps):", self.trace.len())?;
        writeln!(f, "   0. initial: {}", self.initial)?;
        for (i, (what, state)) in self.trace.iter().enumerate() {
            writeln!(f, "  {:2}. {what}", i + 1)?;
            writeln!(f, "      -> {state}")?;
        }
        Ok(())
    }
}

/// What an exploration did.
#[derive(Debug)]
pub struct Report {
    /// The bounds.
    pub config: Config,
    /// Distinct states reached.
    pub states: u64,
    /// Transitions taken (edges, including those into known states).
    pub transitions: u64,
    /// Length of the longest shortest path (BFS depth).
    pub depth: u32,
    /// Transitions in which a process took the finalizer word of a segment over from
    /// another, live, process (one asked to run again too often: the stalled-finalizer
    /// scenario; that process may resume at any of its steps afterwards).
    pub live_takeovers: u64,
    /// How long it took.
    pub elapsed: Duration,
    /// The first violation found (BFS order: a shortest one), if any.
    pub violation: Option<Violation>,
}

/// Explores every state reachable under `config`, checking every property in each.
/// Stops at the first violation.
pub fn explore(config: Config) -> Report {
    let started = Instant::now();
    let initial = State::initial(config);
    let mut seen: HashMap<u128, u32, BuildHasherDefault<Low64>> = HashMap::default();
    // parent[i]: the state id it was first reached from, and by which transition.
    let mut parent: Vec<(u32, Option<Transition>)> = vec![(0, None)];
    seen.insert(fingerprint(&initial), 0);
    let mut frontier = vec![(0u32, initial.clone())];
    let mut transitions = 0u64;
    let mut live_takeovers = 0u64;
    let mut depth = 0;
    let mut violation = check_all(&initial).map(|(property, why)| Violation {
        property,
        why,
        initial: initial.clone(),
        trace: Vec::new(),
    });
    while violation.is_none() && !frontier.is_empty() {
        let mut next = Vec::new();
        'level: for (id, state) in frontier {
            for (t, succ) in state.successors() {
                transitions += 1;
                live_takeovers += u64::from(takes_over_a_live_finalizer(&state, t, &succ));
                let new_id = u32::try_from(parent.len()).expect("more than 2^32 states");
                if seen.try_insert_or_known(fingerprint(&succ), new_id) {
                    continue;
                }
                parent.push((id, Some(t)));
                if let Some((property, why)) = check_all(&succ) {
                    violation = Some(Violation {
                        property,
                        why,
                        initial: initial.clone(),
                        trace: rebuild(&initial, &parent, new_id),
                    });
                    break 'level;
                }
                next.push((new_id, succ));
            }
        }
        if violation.is_none() && !next.is_empty() {
            depth += 1;
        }
        frontier = next;
    }
    Report {
        config,
        states: seen.len() as u64,
        transitions,
        depth,
        live_takeovers,
        elapsed: started.elapsed(),
        violation,
    }
}

/// Whether `t` (from `before` to `after`) gives some segment's finalizer word, held by
/// another live process, to the process that steps.
fn takes_over_a_live_finalizer(before: &State, t: Transition, after: &State) -> bool {
    let (Transition::Step(p) | Transition::GiveUp(p)) = t else {
        return false;
    };
    before
        .segments
        .iter()
        .zip(&after.segments)
        .any(|(b, a)| match b.finalizer {
            Word::Held(q) => {
                q != p && before.procs[usize::from(q)].alive && a.finalizer == Word::Held(p)
            }
            _ => false,
        })
}

/// Insertion into the visited set.
trait Visited {
    /// Inserts `key` with `id` unless present; `true` if it was already there.
    fn try_insert_or_known(&mut self, key: u128, id: u32) -> bool;
}

impl Visited for HashMap<u128, u32, BuildHasherDefault<Low64>> {
    fn try_insert_or_known(&mut self, key: u128, id: u32) -> bool {
        match self.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => true,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(id);
                false
            }
        }
    }
}

fn check_all(state: &State) -> Option<(Property, String)> {
    Property::ALL
        .iter()
        .find_map(|p| state.check(*p).map(|why| (*p, why)))
}

/// The transitions from the initial state to state `id`, replayed to describe each.
fn rebuild(initial: &State, parent: &[(u32, Option<Transition>)], id: u32) -> Vec<(String, State)> {
    let mut path = Vec::new();
    let mut at = id;
    while let (from, Some(t)) = parent[at as usize] {
        path.push(t);
        at = from;
    }
    path.reverse();
    let mut state = initial.clone();
    let mut trace = Vec::new();
    for t in path {
        let what = state.describe(t);
        state = state
            .apply(t)
            .expect("a recorded transition is enabled on replay");
        trace.push((what, state.clone()));
    }
    trace
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Explores `config` and fails the test with the violation found, if any; the
    /// report, to check how much was explored.
    fn explored(config: Config) -> Report {
        let report = explore(config);
        if let Some(v) = &report.violation {
            panic!("{v}");
        }
        report
    }

    fn bounded(procs: usize, slots: usize, segments: usize, ops: u8) -> Report {
        explored(Config {
            procs,
            slots,
            segments,
            ops,
            total_ops: ops * procs as u8,
            recycle: false,
            anonymous: false,
            takeovers: true,
        })
    }

    #[test]
    fn two_processes_two_slots_one_segment_satisfy_p1_to_p5() {
        let report = bounded(2, 2, 1, 3);
        assert!(
            report.states > 10_000,
            "too few states explored ({}): the model does nothing",
            report.states
        );
    }

    /// A finalizer asked to run again too often is taken over while it lives, then may
    /// resume at any of its steps: it must neither reopen its successor's tombstones nor
    /// unlink with a holder, nor its successor its own (P1, P2), and nothing stays
    /// stuck (P3, P5). Needs a finalizer (a release), a rival (a release or sweep) and
    /// a claimer (an attach) at once.
    #[test]
    fn a_live_finalizer_taken_over_that_resumes_satisfies_p1_to_p5() {
        let report = bounded(3, 2, 1, 2);
        assert!(
            report.live_takeovers > 1_000,
            "only {} takeovers of a live finalizer explored",
            report.live_takeovers
        );
    }

    #[test]
    fn three_processes_three_slots_one_segment_with_two_ops_satisfy_p1_to_p5() {
        let report = bounded(3, 3, 1, 2);
        assert!(report.states > 50_000, "{} states", report.states);
    }

    #[test]
    fn recycling_with_a_stale_copy_satisfies_p1_to_p5() {
        let report = explored(Config {
            procs: 2,
            slots: 2,
            segments: 1,
            ops: 3,
            total_ops: 6,
            recycle: true,
            anonymous: false,
            takeovers: true,
        });
        assert!(report.states > 10_000, "{} states", report.states);
    }

    /// A pool's memfds (no name, no sweep, no finalize; P3: the creator's recycle
    /// reuses it). Three slots: a handle whose sender died can go stale in flight (the
    /// recycle reclaims its word) and be attached after the recycle.
    #[test]
    fn a_memfd_pool_recycling_with_stale_handles_satisfies_p1_to_p5() {
        let report = explored(Config {
            procs: 3,
            slots: 3,
            segments: 1,
            ops: 3,
            total_ops: 6,
            recycle: true,
            anonymous: true,
            takeovers: true,
        });
        assert!(report.states > 100_000, "{} states", report.states);
    }

    /// Two memfds, of one creator or two (each may hold the other's): P3 recycles each
    /// with only its own creator left (the other creator, alive and holding it, would
    /// be a real hold, not a leak).
    #[test]
    fn a_memfd_pool_of_two_segments_satisfies_p1_to_p5() {
        let report = explored(Config {
            procs: 2,
            slots: 2,
            segments: 2,
            ops: 4,
            total_ops: 7,
            recycle: true,
            anonymous: true,
            takeovers: true,
        });
        assert!(report.states > 100_000, "{} states", report.states);
    }
}
