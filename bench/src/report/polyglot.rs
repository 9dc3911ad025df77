//! Section 8 of the report: the same plugin in Rust, TypeScript and Python, side by side
//! (`wasmloop-bench polyglot`).

use std::fmt::Write as _;

use anyhow::{Context, Result, ensure};

use super::status;
use crate::polyglot::{Build, Results};

/// Per-reconcile CPU of a build, as a multiple of Rust's: the targets by language.
const CPU_RATIO_TARGETS: [(&str, f64); 2] = [("typescript", 3.0), ("python", 5.0)];
/// Load from the precompiled cache, median (ms).
const CACHED_LOAD_MS: f64 = 200.0;
/// Marginal RSS per loaded idle plugin (MiB).
const RSS_PER_PLUGIN_MIB: f64 = 16.0;

/// The figures the section and the targets share.
pub struct Polyglot<'a> {
    r: &'a Results,
}

impl Polyglot<'_> {
    /// Fails on results without a Rust baseline first, or with builds measured on other scenarios.
    pub fn new(r: &Results) -> Result<Polyglot<'_>> {
        ensure!(r.builds.first().is_some_and(|b| b.language == "rust"), "polyglot: the first build must be the Rust baseline");
        let scenarios = |b: &Build| b.reconcile_cpu_us.iter().map(|(s, _, _)| s.clone()).collect::<Vec<_>>();
        let base = scenarios(&r.builds[0]);
        ensure!(r.builds.iter().all(|b| scenarios(b) == base), "polyglot: builds measured on different scenarios");
        Ok(Polyglot { r })
    }

    fn rust(&self) -> &Build {
        &self.r.builds[0]
    }

    /// A build's per-reconcile CPU over Rust's, the worst of the scenarios.
    fn cpu_ratio(&self, b: &Build) -> f64 {
        b.reconcile_cpu_us.iter().zip(&self.rust().reconcile_cpu_us).map(|((_, us, _), (_, base, _))| us / base).fold(0.0, f64::max)
    }

    fn build(&self, language: &str) -> Option<&Build> {
        self.r.builds.iter().find(|b| b.language == language)
    }

    /// Rows of the "where we stand" table.
    pub fn target_rows(&self, w: &mut String) -> Result<()> {
        for (language, target) in CPU_RATIO_TARGETS {
            let Some(b) = self.build(language) else { continue };
            let per: Vec<String> = b.reconcile_cpu_us.iter().map(|(s, us, _)| format!("{us:.0} µs {s}")).collect();
            let ratio = self.cpu_ratio(b);
            writeln!(
                w,
                "| per-reconcile CPU of {language} ≤ {target}× Rust (namespace-config, [§8](#8-plugins-in-other-languages)) | \
                 {ratio:.1}× ({}) | {} |",
                per.join(", "),
                status(ratio <= target)
            )?;
        }
        let worst_load = self.r.builds.iter().map(|b| b.cached_load_ms.median).fold(0.0, f64::max);
        writeln!(
            w,
            "| load from the precompiled cache ≤ {CACHED_LOAD_MS:.0} ms, every language | worst median {worst_load:.0} ms | {} |",
            status(worst_load <= CACHED_LOAD_MS)
        )?;
        let worst_rss = self.r.builds.iter().map(|b| b.rss_per_plugin_mib).fold(0.0, f64::max);
        writeln!(
            w,
            "| marginal RSS per loaded idle plugin ≤ {RSS_PER_PLUGIN_MIB:.0} MiB, every language | worst {worst_rss:.1} MiB | {} |",
            status(worst_rss <= RSS_PER_PLUGIN_MIB)
        )?;
        Ok(())
    }

    /// The section.
    pub fn section(&self, w: &mut String) -> Result<()> {
        writeln!(w, "## 8. Plugins in other languages\n")?;
        writeln!(
            w,
            "The example plugin `namespace-config` built three times — Rust (`wasmloop-sdk`), TypeScript (`@wasmloop/sdk`, \
             QuickJS through componentize-qjs) and Python (`wasmloop_sdk`, componentize-py) — loaded in one process as the \
             host loads them (`wasmloop-bench polyglot`). The three builds must return the same outcome on every scenario \
             before anything is timed. Per-reconcile CPU is the calling thread's CPU time over repeated reconciles on the \
             fixtures of `tests/fixtures/namespace-config`, a fresh instance per call as in the host; the phases are the \
             real call path timed piece by piece; marginal RSS is this process's growth per extra copy loaded from the \
             precompiled cache (no controller or informer: section 3 measures those in the real host).\n"
        )?;
        let rust = self.rust();
        let scenarios: Vec<&str> = rust.reconcile_cpu_us.iter().map(|(s, _, _)| s.as_str()).collect();
        write!(w, "| | raw / zstd (payload ConfigMaps) | compile | load from cache (median, min–max) |")?;
        for s in &scenarios {
            write!(w, " CPU per reconcile: {s} |")?;
        }
        writeln!(w, " instantiate / call / drop | RSS per idle plugin |")?;
        write!(w, "|---|---|---|---|")?;
        for _ in &scenarios {
            write!(w, "---|")?;
        }
        writeln!(w, "---|---|")?;
        for b in &self.r.builds {
            write!(
                w,
                "| {} | {:.2} / {:.2} MB ({}) | {:.1} s | {:.0} ms ({:.0}–{:.0}) |",
                b.language,
                b.raw_bytes as f64 / 1e6,
                b.zstd_bytes as f64 / 1e6,
                b.payload_parts,
                b.compile_ms / 1e3,
                b.cached_load_ms.median,
                b.cached_load_ms.min,
                b.cached_load_ms.max
            )?;
            for ((_, us, _), (_, base, _)) in b.reconcile_cpu_us.iter().zip(&rust.reconcile_cpu_us) {
                write!(w, " {us:.0} µs ({:.1}×) |", us / base)?;
            }
            let [i, c, d, _] = b.phases_us;
            writeln!(w, " {i:.0} / {c:.0} / {d:.0} µs | {:.1} MiB |", b.rss_per_plugin_mib)?;
        }
        let ts = self.build("typescript").context("polyglot: no typescript build")?;
        writeln!(
            w,
            "\nWhere an interpreted plugin's time goes: the interpreter's instantiation per reconcile (a fresh instance each \
             time: no state crosses reconciles) and parsing every object's JSON in the guest. TypeScript is {:.1}× Rust at \
             worst here. What would close most of it: instantiating from a pre-initialised snapshot (Wizer-style), and \
             metadata reads (`cache.*-meta`) instead of whole objects in the SDKs.\n",
            self.cpu_ratio(ts)
        )?;
        Ok(())
    }
}
