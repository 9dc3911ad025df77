//! Section 9 of the report: what a shadow version costs the serving one (`wasmloop-bench shadow`).

use std::fmt::Write as _;

use anyhow::{Result, ensure};

use super::status;
use crate::shadow::ScenarioResult;

/// Serving reconcile p99 with a shadow over without, at most.
const P99_RATIO_TARGET: f64 = 1.2;

/// The figures the section and the targets share.
pub struct Rollout<'a> {
    r: &'a [ScenarioResult],
}

impl Rollout<'_> {
    /// Fails on an empty result, or one where the candidate (the same plugin) differed.
    pub fn new(r: &[ScenarioResult]) -> Result<Rollout<'_>> {
        ensure!(!r.is_empty(), "shadow: no scenario measured");
        ensure!(r.iter().all(|s| s.different == 0), "shadow: the same plugin as its own candidate compared different");
        Ok(Rollout { r })
    }

    fn worst(&self) -> &ScenarioResult {
        self.r.iter().max_by(|a, b| a.p99_ratio.total_cmp(&b.p99_ratio)).unwrap_or(&self.r[0])
    }

    /// Rows of the "where we stand" table.
    pub fn target_rows(&self, w: &mut String) -> Result<()> {
        let worst = self.worst();
        writeln!(
            w,
            "| a shadow version adds ≤ {P99_RATIO_TARGET}× to the serving reconcile p99 ([§9](#9-safe-rollout-what-a-shadow-version-costs)) | \
             {:.2}× ({}: {:.0} µs vs {:.0} µs) | {} |",
            worst.p99_ratio,
            worst.scenario,
            worst.p99_shadowed_us.median,
            worst.p99_plain_us.median,
            status(worst.p99_ratio <= P99_RATIO_TARGET)
        )?;
        Ok(())
    }

    /// The section.
    pub fn section(&self, w: &mut String) -> Result<()> {
        writeln!(w, "## 9. Safe rollout: what a shadow version costs\n")?;
        writeln!(
            w,
            "The replicaset plugin serves one 10-Pod ReplicaSet, one reconcile at a time on a blocking thread, as a worker \
             does; shadowed, each reconcile also does what the worker does for a candidate (the same plugin loaded a second \
             time): once the serving call has returned (the candidate never runs beside it), take its one slot if free \
             (else the reconcile is not shadowed), start it on the guest pool's lowest-priority lane (nice 19), reduce the \
             serving result for the comparison, and leave the comparison to a task that waits for the candidate. Timed from \
             the start of the serving call to the serving side being ready (`wasmloop-bench shadow`, in-process, no \
             cluster). Runs without and with the shadow alternate; each cell is the median over runs of that run's \
             percentile (min–max over runs).\n"
        )?;
        writeln!(
            w,
            "| scenario | serving p50 plain → shadowed | serving p99 plain | serving p99 shadowed | p99 ratio | compared / skipped |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|")?;
        for s in self.r {
            writeln!(
                w,
                "| {} | {:.0} → {:.0} µs | {:.0} µs ({:.0}–{:.0}) | {:.0} µs ({:.0}–{:.0}) | {:.2}× | {} / {} |",
                s.scenario,
                s.p50_plain_us.median,
                s.p50_shadowed_us.median,
                s.p99_plain_us.median,
                s.p99_plain_us.min,
                s.p99_plain_us.max,
                s.p99_shadowed_us.median,
                s.p99_shadowed_us.min,
                s.p99_shadowed_us.max,
                s.p99_ratio,
                s.compared,
                s.skipped
            )?;
        }
        writeln!(
            w,
            "\nThe candidate of one reconcile may still run while the next serving call starts (on this 2-core machine they \
             then share the cores, the candidate at the lowest priority); a busy candidate skips reconciles rather than \
             queueing them, so the serving version never waits for it. Recording a reconcile and \
             replaying it are measured in `tests/tests/replay.rs` (a 10-Pod ReplicaSet reconcile records to about 1.5 KB; \
             100 replays give one outcome).\n"
        )?;
        Ok(())
    }
}
