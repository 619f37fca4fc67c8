//! What one soak did and found: operations by kind, kills, death-to-sweep times, and
//! every failure; printed at the end of the run.

use std::collections::BTreeMap;
use std::time::Duration;

/// The counts and findings of one run.
#[derive(Default)]
pub struct Tally {
    /// Operations done, by kind.
    pub ops: BTreeMap<&'static str, u64>,
    /// Workers SIGKILLed between commands.
    pub killed_idle: u64,
    /// Workers SIGKILLed in the middle of a create.
    pub killed_mid_create: u64,
    /// Senders SIGKILLed with a handle of theirs on its way.
    pub killed_after_share: u64,
    /// Handles of a killed sender that attached anyway.
    pub attached_after_sender_died: u64,
    /// Handles of a killed sender that were `Gone` or `Stale` (allowed).
    pub gone_after_sender_died: u64,
    /// Managers SIGKILLed.
    pub managers_killed: u64,
    /// Managers SIGSTOPped (and SIGCONTed).
    pub managers_stopped: u64,
    /// SIGKILL to the last of a worker's own names gone, while the manager ran.
    pub death_to_sweep: Vec<Duration>,
    /// The same, for deaths the manager was killed or stopped during.
    pub death_to_sweep_disturbed: Vec<Duration>,
    /// What went wrong.
    pub failures: Vec<String>,
}

impl Tally {
    /// Counts one operation of kind `op`.
    pub fn count(&mut self, op: &'static str) {
        *self.ops.entry(op).or_default() += 1;
    }

    /// Records a failure (printed at once, and again at the end).
    pub fn fail(&mut self, why: String) {
        eprintln!("soak: FAILURE: {why}");
        self.failures.push(why);
    }

    /// Prints the report.
    pub fn print(&mut self, seed: u64, ran: Duration) {
        let total: u64 = self.ops.values().sum();
        println!("soak: seed {seed}, ran {:.1} s", ran.as_secs_f64());
        let by_kind: Vec<String> = self.ops.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!("soak: operations {total} ({})", by_kind.join(", "));
        println!(
            "soak: kills: workers {} (idle {}, mid-create {}, sender of a handle in flight {}), \
             manager SIGKILLs {}, manager SIGSTOPs {}",
            self.killed_idle + self.killed_mid_create + self.killed_after_share,
            self.killed_idle,
            self.killed_mid_create,
            self.killed_after_share,
            self.managers_killed,
            self.managers_stopped,
        );
        println!(
            "soak: handles of killed senders: {} attached, {} gone or stale",
            self.attached_after_sender_died, self.gone_after_sender_died
        );
        for (what, samples) in [
            ("death-to-sweep", &mut self.death_to_sweep),
            (
                "death-to-sweep with the manager killed or stopped meanwhile",
                &mut self.death_to_sweep_disturbed,
            ),
        ] {
            samples.sort();
            println!(
                "soak: {what}: {} deaths, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                samples.len(),
                ms(percentile(samples, 50.0)),
                ms(percentile(samples, 99.0)),
                ms(samples.last().copied().unwrap_or_default()),
            );
        }
        if self.failures.is_empty() {
            println!("soak: passed");
        } else {
            println!("soak: FAILED ({} failures):", self.failures.len());
            for failure in self.failures.iter().take(20) {
                println!("  {failure}");
            }
            if self.failures.len() > 20 {
                println!(
                    "  … and {} more (each printed when found)",
                    self.failures.len() - 20
                );
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `p`-th percentile of sorted `samples`, nearest rank (zero for none).
fn percentile(samples: &[Duration], p: f64) -> Duration {
    let rank = (p / 100.0 * samples.len() as f64).ceil() as usize;
    samples.get(rank.max(1) - 1).copied().unwrap_or_default()
}
