//! The soak's schedule, drawn from one seed: which operation comes next, and when the
//! manager is SIGKILLed or SIGSTOPped. The same seed draws the same choices; what they
//! meet (which buffers a worker still holds) depends on the run's timing.

use std::time::Duration;

/// How a buffer is made.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A plain file_system buffer.
    Fs,
    /// A plain file_descriptor buffer (a memfd).
    Fd,
    /// A file_system buffer from the worker's pool.
    PoolFs,
    /// A file_descriptor buffer from the worker's pool.
    PoolFd,
}

impl Kind {
    /// Its word in the worker's `create` command.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Fs => "fs",
            Kind::Fd => "fd",
            Kind::PoolFs => "pool-fs",
            Kind::PoolFd => "pool-fd",
        }
    }

    /// Whether it has a name in `/dev/shm`.
    pub fn is_named(self) -> bool {
        matches!(self, Kind::Fs | Kind::PoolFs)
    }
}

/// One operation on the workers; `w`, `from` and `to` are worker slots, `pick` chooses
/// among what a worker holds (modulo their number).
#[derive(Copy, Clone, Debug)]
pub enum Op {
    /// Worker `w` creates a buffer and fills it from `seed`.
    Create {
        w: usize,
        kind: Kind,
        len: usize,
        seed: u64,
    },
    /// `from` shares a buffer with `to` (as bytes, where it is named and `as_bytes`).
    Share {
        from: usize,
        to: usize,
        pick: u64,
        as_bytes: bool,
    },
    /// `from` shares a buffer, is SIGKILLed, and `to` attaches the handle after.
    ShareThenKillSender { from: usize, to: usize, pick: u64 },
    /// Worker `w` releases a buffer.
    Release { w: usize, pick: u64 },
    /// Worker `w` re-checks every buffer it holds.
    Verify { w: usize },
    /// Every name a live worker holds must be in `/dev/shm`.
    CheckNames,
    /// Worker `w` is SIGKILLed between two commands.
    Kill { w: usize },
    /// Worker `w` is told to create, and SIGKILLed `after_us` later.
    KillDuringCreate { w: usize, kind: Kind, after_us: u64 },
}

/// What happens to the manager, and when.
#[derive(Copy, Clone, Debug)]
pub enum ManagerEvent {
    /// SIGKILL (the soak starts another).
    Kill,
    /// SIGSTOP, then SIGCONT this much later.
    Stop(Duration),
}

/// The seeded schedule of one run.
pub struct Plan {
    rng: fastrand::Rng,
    workers: usize,
    /// Manager events by time into the run, latest first.
    manager: Vec<(Duration, ManagerEvent)>,
}

/// The buffers' lengths (a page, 64 KiB, 1 MiB).
const LENGTHS: [usize; 3] = [4096, 64 << 10, 1 << 20];

impl Plan {
    /// The schedule of a run of `run` with `workers` worker slots: one manager SIGKILL
    /// per 30 s (at least two), one SIGSTOP of 1.5–3 s.
    pub fn new(seed: u64, run: Duration, workers: usize) -> Plan {
        let mut rng = fastrand::Rng::with_seed(seed);
        let at = |rng: &mut fastrand::Rng, from: f64, to: f64| {
            run.mul_f64(from + (to - from) * rng.f64())
        };
        let kills = (run.as_secs() / 30).max(2);
        let mut manager: Vec<_> = (0..kills)
            .map(|_| (at(&mut rng, 0.1, 0.8), ManagerEvent::Kill))
            .collect();
        let stop = Duration::from_millis(rng.u64(1500..=3000));
        manager.push((at(&mut rng, 0.2, 0.7), ManagerEvent::Stop(stop)));
        manager.sort_by_key(|event| std::cmp::Reverse(event.0));
        Plan {
            rng,
            workers,
            manager,
        }
    }

    /// The manager event due `elapsed` into the run, if any.
    pub fn due(&mut self, elapsed: Duration) -> Option<ManagerEvent> {
        if self.manager.last().is_some_and(|(at, _)| *at <= elapsed) {
            return self.manager.pop().map(|(_, event)| event);
        }
        None
    }

    /// The manager events still to come.
    pub fn manager_events_left(&self) -> usize {
        self.manager.len()
    }

    /// The next operation.
    pub fn next(&mut self) -> Op {
        let rng = &mut self.rng;
        let n = self.workers;
        let w = rng.usize(0..n);
        let other = (w + rng.usize(1..n)) % n;
        let kind = [Kind::Fs, Kind::Fd, Kind::PoolFs, Kind::PoolFd][rng.usize(0..4)];
        match rng.u32(0..1000) {
            0..300 => Op::Create {
                w,
                kind,
                len: LENGTHS[[0, 0, 0, 1, 1, 2][rng.usize(0..6)]],
                seed: rng.u64(..),
            },
            300..600 => Op::Share {
                from: w,
                to: other,
                pick: rng.u64(..),
                as_bytes: rng.bool(),
            },
            600..605 => Op::ShareThenKillSender {
                from: w,
                to: other,
                pick: rng.u64(..),
            },
            605..880 => Op::Release {
                w,
                pick: rng.u64(..),
            },
            880..960 => Op::Verify { w },
            960..990 => Op::CheckNames,
            990..996 => Op::Kill { w },
            _ => Op::KillDuringCreate {
                w,
                kind,
                after_us: rng.u64(0..2000),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_draws_one_schedule() {
        let draw = |seed| {
            let mut plan = Plan::new(seed, Duration::from_secs(60), 4);
            let ops: Vec<String> = (0..200).map(|_| format!("{:?}", plan.next())).collect();
            (ops, plan.manager_events_left())
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7).0, draw(8).0);
        assert_eq!(draw(7).1, 3, "two SIGKILLs and a SIGSTOP of the manager");
    }

    #[test]
    fn manager_events_come_in_time_order_within_the_run() {
        let run = Duration::from_secs(90);
        let mut plan = Plan::new(1, run, 3);
        let mut seen = 0;
        let mut at = Duration::ZERO;
        while at <= run {
            while plan.due(at).is_some() {
                seen += 1;
            }
            at += Duration::from_millis(100);
        }
        assert_eq!(seen, 4, "three SIGKILLs and one SIGSTOP in 90 s");
        assert_eq!(plan.manager_events_left(), 0);
    }
}
