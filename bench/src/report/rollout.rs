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
             {:.2}× ({}, {}: {:.0} µs vs {:.0} µs) | {} |",
            worst.p99_ratio,
            worst.scenario,
            worst.arrival,
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
            "The replicaset plugin serves one 10-Pod ReplicaSet, one reconcile at a time on the guest pool's serving lane, as \
             a worker does; shadowed, each reconcile also does what the worker does for a candidate (the same plugin loaded a \
             second time): take its one slot before the serving call if free (else the reconcile is not shadowed), let the \
             serving call keep its cache answers (the cache's own objects, by query), then start the candidate on the pool's \
             lowest-priority lane (nice 19), where it waits until the serving lane has been quiet for 300 µs and replays \
             those answers (it gives up after 2 s, counted as skipped; a serving call that starts while it runs pauses \
             it until the lane is quiet again), reduce the serving result for the \
             comparison, and leave the comparison to a task that waits for the candidate. Timed from the start of the \
             serving call to the serving side being ready (`wasmloop-bench shadow`, in-process, no cluster). Two arrival \
             patterns: back to back (a saturated worker: the next reconcile starts as soon as the previous one is handed \
             over) and paced (at most one reconcile per 2 ms: a worker with idle moments). Runs without and with the \
             shadow alternate, a shadowed run ending with its last candidate; each cell is the median over runs of that \
             run's percentile (min–max over runs).\n"
        )?;
        writeln!(
            w,
            "| scenario | arrival | serving p50 plain → shadowed | serving p99 plain | serving p99 shadowed | p99 ratio | compared / skipped |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|")?;
        for s in self.r {
            writeln!(
                w,
                "| {} | {} | {:.0} → {:.0} µs | {:.0} µs ({:.0}–{:.0}) | {:.0} µs ({:.0}–{:.0}) | {:.2}× | {} / {} |",
                s.scenario,
                s.arrival,
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
            "\nThe candidate never runs beside a serving call: it starts only when none is in flight, and it is paused \
             whenever one starts, so what is left of the cost is keeping the serving call's answers (a reference count \
             each), the moment it takes a running candidate to notice the pause (its next epoch check), and what the \
             candidate leaves in the shared caches. A saturated worker leaves few \
             idle moments: there the shadow compares fewer reconciles (the skipped column) instead of slowing the serving \
             ones. Recording a reconcile and replaying it are measured in `tests/tests/replay.rs` (a 10-Pod ReplicaSet \
             reconcile records to about 1.5 KB; 100 replays give one outcome).\n"
        )?;
        self.missed(w)
    }

    /// Where the target is missed: how far the plain runs themselves spread, and the next step.
    fn missed(&self, w: &mut String) -> Result<()> {
        let missed: Vec<&ScenarioResult> = self.r.iter().filter(|s| s.p99_ratio > P99_RATIO_TARGET).collect();
        if missed.is_empty() {
            return Ok(());
        }
        let rows: Vec<String> = missed
            .iter()
            .map(|s| {
                format!(
                    "{}, {}: {:.2}×, while the plain runs' own p99 spread {:.0}–{:.0} µs ({:.1}× from best to worst)",
                    s.scenario,
                    s.arrival,
                    s.p99_ratio,
                    s.p99_plain_us.min,
                    s.p99_plain_us.max,
                    s.p99_plain_us.max / s.p99_plain_us.min
                )
            })
            .collect();
        let within_noise = missed.iter().all(|s| s.p99_ratio <= s.p99_plain_us.max / s.p99_plain_us.min);
        let reading = if within_noise {
            "Each difference is within what the runs without a shadow moved by themselves in this run, so this run cannot \
             tell the shadow's cost from the machine's noise"
        } else {
            "A difference larger than the plain runs' own spread is the shadow's cost, not the machine's noise"
        };
        writeln!(
            w,
            "**Target missed in {} of {} rows** — {}. {reading}. Next step: alternate plain and shadowed in short blocks \
             within each run (a noisy minute then falls on both), and count how often a serving call starts while a \
             candidate runs (the pauses), to attribute what is left.\n",
            missed.len(),
            self.r.len(),
            rows.join("; ")
        )?;
        Ok(())
    }
}
