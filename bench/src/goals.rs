//! The performance goals `shmrc bench` checks in every run: each a ratio of one row to
//! a baseline row of the same run, at most a limit (issue 34's rows, and issue 11's
//! still standing). The harness measures; this module says, for each goal, whether
//! the run met it, missed it (with the measured costs and what the cost above the
//! baseline is made of) or did not measure it (`--only` another workload).

use serde::Serialize;

/// One goal: `contender`'s cost over `baseline`'s, both rows of `workload` at `size`,
/// at most `limit`.
pub struct Goal {
    /// Which issue set it.
    pub issue: u32,
    /// The workload both rows belong to.
    pub workload: &'static str,
    /// The rows' buffer size (`None` for the workloads without one).
    pub size: Option<usize>,
    /// The measured row.
    pub contender: String,
    /// The row it is compared with.
    pub baseline: String,
    /// The largest ratio that meets the goal.
    pub limit: f64,
    /// What the cost above the baseline is made of, as profiled: said when the goal
    /// is missed.
    pub cause: &'static str,
}

/// What one run made of a goal.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// The ratio is within the limit.
    Met { ratio: f64 },
    /// The ratio is over the limit; `reason` gives both costs and the cause.
    Missed { ratio: f64, reason: String },
    /// A row was not measured in this run; `reason` names it.
    #[serde(rename = "not measured")]
    NotMeasured { reason: String },
}

impl Verdict {
    /// The verdict's word: met, missed or not measured.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Met { .. } => "met",
            Verdict::Missed { .. } => "missed",
            Verdict::NotMeasured { .. } => "not measured",
        }
    }

    /// The ratio, when both rows were measured.
    pub fn ratio(&self) -> Option<f64> {
        match self {
            Verdict::Met { ratio } | Verdict::Missed { ratio, .. } => Some(*ratio),
            Verdict::NotMeasured { .. } => None,
        }
    }

    /// Why it was missed or not measured (empty when met).
    pub fn reason(&self) -> &str {
        match self {
            Verdict::Met { .. } => "",
            Verdict::Missed { reason, .. } | Verdict::NotMeasured { reason } => reason,
        }
    }
}

impl Goal {
    /// What the goal asks, in words: "fill 4 KiB: shmrc file_system ÷ floor … ≤ 1.2×".
    pub fn describe(&self) -> String {
        let size = self
            .size
            .map(|s| format!(" {}", humansize::format_size(s, humansize::BINARY)))
            .unwrap_or_default();
        format!(
            "{}{size}: {} / {} <= {}x",
            self.workload, self.contender, self.baseline, self.limit
        )
    }

    /// The verdict, given the run's rows: `measured(workload, size, contender,
    /// baseline)` is the contender's nanoseconds per operation and its baseline's, from
    /// the contender's row and its ratio to that baseline (`None` if either row is not
    /// in the run: a baseline name such as the finalize floor's recurs, each row paired
    /// with its own).
    pub fn judge(
        &self,
        measured: impl Fn(&str, Option<usize>, &str, &str) -> Option<(f64, f64)>,
    ) -> Verdict {
        let Some((cost, base)) =
            measured(self.workload, self.size, &self.contender, &self.baseline)
                .filter(|(_, base)| *base > 0.0)
        else {
            return Verdict::NotMeasured {
                reason: format!(
                    "no row {:?} against {:?} in {} this run",
                    self.contender, self.baseline, self.workload
                ),
            };
        };
        let ratio = cost / base;
        if ratio <= self.limit {
            Verdict::Met { ratio }
        } else {
            Verdict::Missed {
                ratio,
                reason: format!(
                    "{ratio:.2}x > {}x ({} against {}): {}",
                    self.limit,
                    show_nanos(cost),
                    show_nanos(base),
                    self.cause
                ),
            }
        }
    }
}

/// Nanoseconds as the shortest readable unit.
fn show_nanos(nanos: f64) -> String {
    if nanos >= 1e6 {
        format!("{:.2} ms", nanos / 1e6)
    } else if nanos >= 1e3 {
        format!("{:.1} us", nanos / 1e3)
    } else {
        format!("{nanos:.1} ns")
    }
}

const KIB4: usize = 4 << 10;
const SIZES: [usize; 3] = [4 << 10, 1 << 20, 64 << 20];

const FRESH_FIXED: &str = "a fresh 4 KiB buffer is 4,288 bytes with its header \
    (file_descriptor; 4,800 with file_system's 64 holder slots): two pages where the floor \
    has one (the second page's allocation, zeroing, fault and \
    teardown were ~60% of the gap in a profile of create + fill + drop, 2026-11-27), the \
    rest the header, the holder slot and a few system calls (getrandom twice, the size \
    seal, geteuid); see docs/PERFORMANCE.md, 'Goals'";
const POOL_FIXED: &str = "the pool's recycle step, the handle and the consumer's header \
    check and slot claim, on every buffer; the consumer's mapping cache spares it the \
    open + mmap + munmap the bare floor pays, except on a miss (a segment's first use, or \
    the cache's bounds: 64 mappings, 1 GiB; docs/GUIDE.md)";
const ATTACH: &str = "the header validation, holder-slot claim and release (with the \
    liveness check of the other holders) over the floor's mmap + munmap";
const CHANNEL: &str = "the channel's receiver reads a non-blocking socket: a dry \
    recvmsg and a poll before each message's two reads, where the raw transport blocks in \
    one recvmsg; plus the postcard encoding and the in-flight ledger";
const SWEEP: &str = "the sweep opens, maps and checks each segment's holder slots before \
    unlinking it, where the floor only lists and unlinks (issue 34 item 2)";
const FINALIZE: &str = "the last release touches the slots below the mark (those ever \
    taken: 1 here, of 4,096) and seals, re-reads and commits the header's words; the rest \
    is the floor's munmap + close + unlink (docs/PROTOCOL.md §5, \"The mark\")";
const GROW: &str = "the reservation of fresh pages (posix_fallocate) dominates both rows; \
    what is left is shmrc's fixed cost per buffer";

/// The goals, by strategy where the workload has one: issue 34's rows, then issue 11's.
pub fn all() -> Vec<Goal> {
    let mut goals = Vec::new();
    let goal = |issue, workload, size, contender: &str, baseline: &str, limit, cause| Goal {
        issue,
        workload,
        size,
        contender: contender.to_owned(),
        baseline: baseline.to_owned(),
        limit,
        cause,
    };
    // (fresh shmrc, its floor with the same reservation, pool, bare floor, channel)
    let strategies = [
        (
            "shmrc file_descriptor",
            "floor memfd+fallocate",
            "shmrc pool file_descriptor",
            "floor memfd reused",
            "shmrc channel file_descriptor",
            "floor memfd",
        ),
        (
            "shmrc file_system",
            "floor shm_open+fallocate",
            "shmrc pool file_system",
            "floor shm_open reused",
            "shmrc channel file_system",
            "floor shm_open",
        ),
    ];
    for (fresh, floor, pool, bare, channel, _) in strategies {
        let k4 = Some(KIB4);
        goals.push(goal(34, "ping-pong", k4, pool, bare, 1.1, POOL_FIXED));
        goals.push(goal(34, "stream", k4, pool, bare, 1.1, POOL_FIXED));
        goals.push(goal(34, "fill", k4, fresh, floor, 1.2, FRESH_FIXED));
        goals.push(goal(
            34,
            "channel ping-pong",
            k4,
            channel,
            fresh,
            1.1,
            CHANNEL,
        ));
    }
    goals.push(goal(
        34,
        "sweep",
        None,
        "shmrc sweep, 10000 segments",
        "floor list+unlink, 10000 names",
        2.0,
        SWEEP,
    ));
    goals.push(goal(
        34,
        "finalize",
        None,
        "shmrc release, 4096 slots",
        "floor munmap+close+unlink",
        2.0,
        FINALIZE,
    ));
    for (fresh, floor, pool, bare, _, unreserved) in strategies {
        let k4 = Some(KIB4);
        goals.push(goal(
            11,
            "ping-pong",
            k4,
            fresh,
            unreserved,
            1.3,
            FRESH_FIXED,
        ));
        goals.push(goal(11, "ping-pong", k4, fresh, floor, 1.3, FRESH_FIXED));
        for size in SIZES.map(Some) {
            goals.push(goal(
                11,
                "attach/release",
                size,
                fresh,
                unreserved,
                1.5,
                ATTACH,
            ));
            goals.push(goal(11, "stream", size, pool, bare, 1.3, POOL_FIXED));
            goals.push(goal(11, "fill", size, pool, bare, 1.2, POOL_FIXED));
        }
        for size in [1 << 20, 64 << 20].map(Some) {
            goals.push(goal(11, "fill", size, fresh, floor, 1.2, GROW));
        }
    }
    goals
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(limit: f64) -> Goal {
        Goal {
            issue: 34,
            workload: "fill",
            size: Some(KIB4),
            contender: "a".into(),
            baseline: "b".into(),
            limit,
            cause: "the cause",
        }
    }

    #[test]
    fn a_goal_is_met_missed_with_its_reason_or_not_measured() {
        let rows = |_: &str, size: Option<usize>, name: &str, base: &str| match (size, name, base) {
            (Some(KIB4), "a", "b") => Some((1300.0, 1000.0)),
            _ => None,
        };
        assert_eq!(one(1.3).judge(rows).word(), "met");
        let missed = one(1.2).judge(rows);
        assert_eq!(missed.word(), "missed");
        assert!((missed.ratio().unwrap() - 1.3).abs() < 1e-9);
        assert_eq!(
            missed.reason(),
            "1.30x > 1.2x (1.3 us against 1.0 us): the cause"
        );
        let mut absent = one(1.2);
        absent.baseline = "c".into();
        let verdict = absent.judge(rows);
        assert_eq!(verdict.word(), "not measured");
        assert!(verdict.reason().contains("\"c\""), "{}", verdict.reason());
        assert_eq!(verdict.ratio(), None);
    }

    #[test]
    fn every_goal_names_rows_the_harness_makes() {
        // The names the harness gives its rows (harness.rs, workloads.rs): a goal naming
        // anything else could never be judged.
        let known = [
            "shmrc file_descriptor",
            "shmrc file_system",
            "floor memfd",
            "floor memfd+fallocate",
            "floor shm_open",
            "floor shm_open+fallocate",
            "shmrc pool file_descriptor",
            "shmrc pool file_system",
            "floor memfd reused",
            "floor shm_open reused",
            "shmrc channel file_descriptor",
            "shmrc channel file_system",
            "shmrc sweep, 10000 segments",
            "floor list+unlink, 10000 names",
            "shmrc release, 4096 slots",
            "floor munmap+close+unlink",
        ];
        for g in all() {
            assert!(known.contains(&g.contender.as_str()), "{}", g.describe());
            assert!(known.contains(&g.baseline.as_str()), "{}", g.describe());
            assert!(crate::harness::WORKLOADS.contains(&g.workload));
        }
    }
}
