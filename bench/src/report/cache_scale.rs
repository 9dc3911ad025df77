//! Section 3's "1 000 → 100 000 Pods" table (`wasmloop-bench cache-scale`): both controllers'
//! RSS, bytes per Pod and start → synced at every size.

use std::fmt::Write as _;

use anyhow::{Result, ensure};

use super::{mib, status, summary_of};
use crate::cache_scale::Results;
use crate::stats::Summary;

/// Host RSS over kube-controller-manager's, at most (the section-1 rows' goal).
const RSS_RATIO_TARGET: f64 = 0.5;

/// One size's figures, medians over the runs.
struct Size {
    pods: usize,
    host: Figures,
    kcm: Figures,
}

struct Figures {
    rss: Summary,
    sync_secs: Summary,
    sync_cpu_secs: Summary,
}

/// The figures the section and the targets share.
pub struct CacheScale<'a> {
    r: &'a Results,
    sizes: Vec<Size>,
}

impl CacheScale<'_> {
    /// Fails unless both controllers were measured at 0 Pods and at least one larger size.
    pub fn new(r: &Results) -> Result<CacheScale<'_>> {
        ensure!(r.counts.len() >= 2 && r.counts[0] == 0, "cache-scale: need the 0-Pod baseline and one size");
        let figures = |controller: &str, pods: usize| -> Result<Figures> {
            let of = |f: fn(&crate::cache_scale::Start) -> f64| summary_of(r.of(controller, pods).map(f));
            Ok(Figures { rss: of(|s| s.rss_bytes as f64)?, sync_secs: of(|s| s.sync_secs)?, sync_cpu_secs: of(|s| s.sync_cpu_secs)? })
        };
        let sizes = r
            .counts
            .iter()
            .map(|&pods| Ok(Size { pods, host: figures("wasmloop", pods)?, kcm: figures("kcm", pods)? }))
            .collect::<Result<Vec<_>>>()?;
        Ok(CacheScale { r, sizes })
    }

    fn largest(&self) -> &Size {
        &self.sizes[self.sizes.len() - 1]
    }

    /// Rows of the "where we stand" table.
    pub fn target_rows(&self, w: &mut String) -> Result<()> {
        let s = self.largest();
        let ratio = s.host.rss.median / s.kcm.rss.median;
        writeln!(
            w,
            "| host RSS ≤ {RSS_RATIO_TARGET}× KCM, {} Pods cached, no work ([§3](#3-memory)) | {ratio:.2}× ({} vs {}) | {} |",
            s.pods,
            mib(s.host.rss.median),
            mib(s.kcm.rss.median),
            status(ratio <= RSS_RATIO_TARGET)
        )?;
        Ok(())
    }

    /// The sub-section.
    pub fn section(&self, w: &mut String) -> Result<()> {
        writeln!(w, "### The cache from {} to {} Pods\n", self.sizes[1].pods, self.largest().pods)?;
        writeln!(
            w,
            "The API server holds N realistic Pods (the Pod of the table above, 10 per owning ReplicaSet, which does not \
             exist: neither controller has work, what is measured is holding the Pods). At each size each controller starts \
             fresh {} time(s), alternating which goes first: `wasmloop run` with the replicaset plugin (it watches every Pod \
             and ReplicaSet) until `/readyz` (its informers listed and synced; the plugin loads from the precompiled cache), \
             and kube-controller-manager (`--controllers=replicaset`, the same two informers) until \"Caches are synced for \
             ReplicaSet\". RSS is the median of 10 readings 300 ms apart after {} s of settling; per Pod is the RSS above \
             the same controller's 0-Pod RSS, divided by N; CPU is what the process used from its start until synced \
             (`wasmloop-bench cache-scale`).\n",
            self.r.runs, self.r.settle_secs
        )?;
        writeln!(
            w,
            "| Pods | host RSS | host per Pod | host start → synced (CPU) | KCM RSS | KCM per Pod | KCM start → synced (CPU) | host / KCM RSS |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|---|")?;
        let base = &self.sizes[0];
        let per_pod = |f: &Figures, b: &Figures, pods: usize| -> String {
            if pods == 0 { "—".into() } else { format!("{:.0} B", (f.rss.median - b.rss.median) / pods as f64) }
        };
        for s in &self.sizes {
            writeln!(
                w,
                "| {} | {} | {} | {:.2} s ({:.2} s) | {} | {} | {:.2} s ({:.2} s) | {:.2}× |",
                s.pods,
                mib(s.host.rss.median),
                per_pod(&s.host, &base.host, s.pods),
                s.host.sync_secs.median,
                s.host.sync_cpu_secs.median,
                mib(s.kcm.rss.median),
                per_pod(&s.kcm, &base.kcm, s.pods),
                s.kcm.sync_secs.median,
                s.kcm.sync_cpu_secs.median,
                s.host.rss.median / s.kcm.rss.median
            )?;
        }
        let fills: Vec<String> = self
            .r
            .fills
            .iter()
            .scan(0, |have, &(pods, secs)| {
                let rate = (pods - *have) as f64 / secs;
                *have = pods;
                Some(format!("{pods} at {rate:.0}/s"))
            })
            .collect();
        writeln!(
            w,
            "\nFilling the API server (64 creates in flight): {}; deleting the {} Pods afterwards took {:.0} s.\n",
            fills.join(", "),
            self.largest().pods,
            self.r.drain_secs
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_scale::Start;

    fn start(controller: &str, pods: usize, rss_mib: f64) -> Start {
        Start { controller: controller.into(), pods, sync_secs: 1.0, sync_cpu_secs: 0.5, rss_bytes: (rss_mib * 1048576.0) as u64 }
    }

    #[test]
    fn renders_per_pod_bytes_over_the_baseline_and_the_largest_size_ratio() {
        let r = Results {
            counts: vec![0, 1000],
            runs: 1,
            settle_secs: 3,
            starts: vec![start("wasmloop", 0, 20.0), start("kcm", 0, 70.0), start("wasmloop", 1000, 21.0), start("kcm", 1000, 80.0)],
            fills: vec![(1000, 2.0)],
            drain_secs: 1.0,
        };
        let s = CacheScale::new(&r).unwrap();
        let (mut rows, mut section) = (String::new(), String::new());
        s.target_rows(&mut rows).unwrap();
        s.section(&mut section).unwrap();
        assert!(rows.contains("0.26× (21.0 MiB vs 80.0 MiB) | **met**"), "{rows}");
        // (21 − 20) MiB over 1000 Pods; (80 − 70) MiB over 1000 Pods.
        assert!(section.contains("| 1000 | 21.0 MiB | 1049 B |"), "{section}");
        assert!(section.contains("| 80.0 MiB | 10486 B |"), "{section}");
        assert!(section.contains("1000 at 500/s"), "{section}");
    }

    #[test]
    fn refuses_results_without_a_baseline() {
        let r = Results { counts: vec![1000], runs: 1, settle_secs: 3, starts: vec![], fills: vec![], drain_secs: 0.0 };
        assert!(CacheScale::new(&r).is_err());
    }
}
