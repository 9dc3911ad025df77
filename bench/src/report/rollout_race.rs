//! Section 10 of BENCHMARKS.md: the rollout race (`wasmloop-bench rollout-race`) and the
//! Deployment reconcile, native vs Wasm (the criterion bench `benches/deployment.rs`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Result, ensure};

use super::{Crit, criterion_in, mib, mmm, status, summary_of};
use crate::rollout_race::{Results, Run};
use crate::stats::Summary;

/// The targets: rollouts done in ≤ 0.8× KCM's time, with ≤ 0.5× its memory.
const TIME_RATIO: f64 = 0.8;
const RSS_RATIO: f64 = 0.5;
/// The reconcile shapes of the criterion bench.
const SHAPES: [&str; 3] = ["converged", "rollout-step", "create"];

struct Side {
    rollout: Summary,
    create: Summary,
    cpu: Summary,
    rss: Summary,
    apiserver: Summary,
}

impl Side {
    fn of(runs: &[&Run]) -> Result<Self> {
        let s = |f: fn(&Run) -> f64| summary_of(runs.iter().map(|r| f(r)));
        Ok(Self {
            rollout: s(|r| r.rollout_s)?,
            create: s(|r| r.create_s)?,
            cpu: s(|r| r.cpu_s)?,
            rss: s(|r| r.rss_bytes as f64)?,
            apiserver: s(|r| r.apiserver_cpu_s)?,
        })
    }
}

/// The race's figures and the per-reconcile costs.
pub struct RolloutRace<'a> {
    results: &'a Results,
    kcm: Side,
    ours: Side,
    /// (shape, native, wasm).
    costs: Vec<(&'static str, Crit, Crit)>,
    reconciles: Summary,
}

impl RolloutRace<'_> {
    /// Fails on runs missing for either side, or a criterion result missing.
    pub fn new<'a>(results: &'a Results, dir: &Path) -> Result<RolloutRace<'a>> {
        let (kcm, ours) = (results.runs_of("kcm"), results.runs_of("wasmloop"));
        ensure!(!kcm.is_empty() && kcm.len() == ours.len(), "rollout race: {} kcm and {} wasmloop runs", kcm.len(), ours.len());
        let mut costs = Vec::new();
        for shape in SHAPES {
            costs.push((
                shape,
                criterion_in(dir, "deployment", &format!("native-{shape}/2"))?,
                criterion_in(dir, "deployment", &format!("wasm-{shape}/2"))?,
            ));
        }
        let reconciles = summary_of(ours.iter().map(|r| r.host.as_ref().map_or(f64::NAN, |h| h.reconciles)))?;
        Ok(RolloutRace { results, kcm: Side::of(&kcm)?, ours: Side::of(&ours)?, costs, reconciles })
    }

    fn time_ratio(&self) -> f64 {
        self.ours.rollout.median / self.kcm.rollout.median
    }

    fn rss_ratio(&self) -> f64 {
        self.ours.rss.median / self.kcm.rss.median
    }

    fn size(&self) -> String {
        format!("{} × {}", self.results.deployments, self.results.replicas)
    }

    /// Rows of the "where we stand" table.
    pub fn target_rows(&self, w: &mut String) -> Result<()> {
        writeln!(
            w,
            "| rollout race at {} ([§10](#10-rollout-race-deployments-side-by-side-with-kube-controller-manager)): every rollout done in ≤ 0.8× KCM's time | {:.2}× ({:.2} s vs {:.2} s) | {} |",
            self.size(),
            self.time_ratio(),
            self.ours.rollout.median,
            self.kcm.rollout.median,
            status(self.time_ratio() <= TIME_RATIO)
        )?;
        writeln!(
            w,
            "| rollout race at {}: host RSS ≤ 0.5× KCM's | {:.2}× ({} vs {}) | {} |",
            self.size(),
            self.rss_ratio(),
            mib(self.ours.rss.median),
            mib(self.kcm.rss.median),
            status(self.rss_ratio() <= RSS_RATIO)
        )?;
        Ok(())
    }

    /// The section.
    pub fn section(&self, w: &mut String) -> Result<()> {
        let r = self.results;
        let runs = r.runs_of("kcm").len();
        writeln!(w, "## 10. Rollout race: Deployments, side by side with kube-controller-manager\n")?;
        writeln!(
            w,
            "{} Deployments of {} replicas (RollingUpdate, 25% / 25%) in a fresh namespace are created, and once every one is available \
             all their images are changed (16 writes in flight); the race is from the first image change until every rollout is \
             complete as `kubectl rollout status` sees it (the new generation observed, every replica updated and available, no old \
             Pod counted). kube-controller-manager runs `{}`; the wasmloop host (`{}` build) runs the `deployment` and `replicaset` \
             plugins from their committed manifests (8 workers each, the same client budget). No kubelet runs in this control plane: \
             the simulated kubelet of `tests/src/kubelet.rs` binds the Pods, reports them Running and Ready ({} ms after starting \
             them) and removes deleted ones, the same for both. {runs} runs each, alternating, a fresh namespace per run; CPU over \
             the rollout, RSS 2 s after it.\n",
            r.deployments,
            r.replicas,
            r.kcm_flags.join(" "),
            r.host_profile,
            r.ready_after_ms
        )?;
        writeln!(w, "| | kube-controller-manager | wasmloop (deployment + replicaset plugins) | wasmloop / KCM |")?;
        writeln!(w, "|---|---|---|---|")?;
        for (what, k, o, unit, digits) in [
            ("image change → every rollout complete", &self.kcm.rollout, &self.ours.rollout, "s", 2),
            ("create → every Deployment available", &self.kcm.create, &self.ours.create, "s", 2),
            ("controller CPU over the rollout", &self.kcm.cpu, &self.ours.cpu, "s", 2),
            ("kube-apiserver CPU over the rollout", &self.kcm.apiserver, &self.ours.apiserver, "s", 2),
        ] {
            writeln!(w, "| {what} | {} | {} | {:.2}× |", mmm(k, digits, unit), mmm(o, digits, unit), o.median / k.median)?;
        }
        writeln!(
            w,
            "| resident memory after the rollout | {} | {} | {:.2}× |\n",
            mib(self.kcm.rss.median),
            mib(self.ours.rss.median),
            self.rss_ratio()
        )?;
        writeln!(
            w,
            "The host reconciled {:.0} keys over a rollout (median; both plugins: every Deployment and ReplicaSet event, its own \
             writes' included).\n",
            self.reconciles.median
        )?;
        writeln!(w, "### The Deployment reconcile, Wasm vs native\n")?;
        writeln!(
            w,
            "The `deployment` plugin's crate run natively by the host (`wasmloop::native::SdkReconciler`) and as its component \
             (`plugin` profile, opt-level 3), through `Reconciler::reconcile` on the same host cache, equal outcomes checked first \
             (timestamps aside); criterion, one thread. Shapes: a converged Deployment with two ReplicaSets (no action), a rollout \
             step (the old ReplicaSet scaled down: a patch and an Event), a new Deployment (its ReplicaSet created with KCM's \
             pod-template-hash, the status written, an Event).\n"
        )?;
        writeln!(w, "| reconcile | native | Wasm | Wasm / native |")?;
        writeln!(w, "|---|---|---|---|")?;
        for (shape, native, wasm) in &self.costs {
            writeln!(
                w,
                "| {shape} | {:.1} µs ({:.1}–{:.1}) | {:.1} µs ({:.1}–{:.1}) | {:.1}× |",
                native.median,
                native.lo,
                native.hi,
                wasm.median,
                wasm.lo,
                wasm.hi,
                wasm.median / native.median
            )?;
        }
        writeln!(w)?;
        Ok(())
    }
}
