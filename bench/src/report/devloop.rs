//! Section 7 of the report: the plugin author's inner loop, `wasmloop dev`, save → new version
//! reconciling, phase by phase.

use std::fmt::Write as _;

use anyhow::{Context, Result, ensure};

use super::{mmm, status, summary_of};
use crate::devloop::{Edit, Results};

/// Save → the new version's ConfigMap seen, every edit (seconds).
const SAVE_TO_RECONCILING_S: f64 = 5.0;

/// The figures the section and the targets share.
pub struct DevLoop<'a> {
    /// The section's raw results.
    pub r: &'a Results,
}

impl DevLoop<'_> {
    /// Fails on results without an edit, or with an edit whose version did not reconcile.
    pub fn new(r: &Results) -> Result<DevLoop<'_>> {
        ensure!(!r.edits.is_empty(), "dev-loop: no edit was measured");
        ensure!(r.edits.iter().all(|e| e.dev.first_reconcile_s.is_some()), "dev-loop: an edit's version did not reconcile");
        Ok(DevLoop { r })
    }

    fn met(&self) -> bool {
        self.r.summary.observed_s.max <= SAVE_TO_RECONCILING_S
    }

    /// Rows of the "where we stand" table.
    pub fn target_rows(&self, w: &mut String) -> Result<()> {
        let s = &self.r.summary.observed_s;
        writeln!(
            w,
            "| save → new version reconciling ≤ 5 s (the guide's plugin, release profile; \
             [§7](#7-the-plugin-authors-inner-loop-wasmloop-dev)) | median {:.2} s, max {:.2} s over {} edits (save → its ConfigMap \
             seen by a watch) | {} |",
            s.median,
            s.max,
            s.n,
            status(self.met())
        )?;
        Ok(())
    }

    /// The section.
    pub fn section(&self, w: &mut String) -> Result<()> {
        let r = self.r;
        writeln!(w, "## 7. The plugin author's inner loop: `wasmloop dev`\n")?;
        self.method(w)?;
        let s = &r.summary;
        let n = r.edits.len();
        writeln!(w, "| phase (`wasmloop dev`'s figures; the last row: the watch's) | median (min–max) over {n} edits |")?;
        writeln!(w, "|---|---|")?;
        for (what, v) in [
            ("build: `cargo build --target wasm32-wasip2 --release` of the edited crate", &s.build_s),
            ("pack + apply: save → both ConfigMaps applied, minus the build (includes the file watcher's 50 ms settle)", &s.pack_apply_s),
            ("load: applied → the host reports the version loaded (watch event, decode, compile, validate, swap)", &s.load_s),
            ("first reconcile: loaded → the version's first reconcile finished", &s.first_reconcile_s),
            ("**save → reconciling**, as `wasmloop dev` prints it", &s.dev_total_s),
            ("**save → the version's ConfigMap seen by a watch** (the target's figure)", &s.observed_s),
        ] {
            writeln!(w, "| {what} | {} |", mmm(v, 2, "s"))?;
        }
        // Whole ms (`wasmloop dev` prints hundredths of a second); `+ 0.0` turns -0 into 0.
        let after = summary_of(r.edits.iter().map(|e| ((e.observed_s - e.dev.total_s) * 1e3).round() + 0.0))?;
        writeln!(
            w,
            "\nThe watch's figure minus `wasmloop dev`'s, per edit: {} (`wasmloop dev` prints hundredths of a second). \
             `wasmloop dev` counts to the end of the first reconcile, whose actions (the ConfigMap's create, then an Event) are \
             executed by then; the watch counts to the create's watch event, which may come before the reconcile ends (a \
             negative difference). Every version was loaded as {}.\n",
            mmm(&after, 0, "ms"),
            origins(&r.edits)
        )?;
        self.edits_table(w)?;
        if !self.met() {
            self.missed(w)?;
        }
        Ok(())
    }

    fn method(&self, w: &mut String) -> Result<()> {
        let r = self.r;
        writeln!(
            w,
            "`wasmloop new {p}` creates the guide's plugin crate (Namespaces labelled `{p}=true` get a ConfigMap `{p}`), built with \
             its own `{profile}` profile: opt-level z, fat LTO, codegen-units 1, stripped, panic = abort. `wasmloop dev` ({host} \
             build) runs on it as a child process against this run's control plane: on every save it builds the crate, packs it, \
             applies the plugin ConfigMaps and loads them into the host in its own process (no precompiled cache: every version \
             compiles). Once version 1 runs, a fresh Namespace labelled `{p}=true` gets its ConfigMap; then {n} edits, one at a \
             time, each writing `src/lib.rs` at once (one `write`) so the plugin names its ConfigMap `{p}-e<i>` and says \
             \"Welcome to <ns>, edit <i>!\"; the next edit is saved 1 s after the previous version reconciled. Timed from just \
             before the write: until a watch on the Namespace's ConfigMaps (started before the first edit) sees `{p}-e<i>`, and \
             the phases `wasmloop dev` prints for that version. The session's first build ({fresh}) took {cold:.2} s; the \
             component is {bytes} bytes.\n",
            p = r.package,
            profile = r.crate_profile,
            host = r.host_profile,
            n = r.edits.len(),
            fresh =
                if r.target_dir_fresh { "a fresh target directory: the dependencies compiled too" } else { "dependencies already built" },
            cold = r.first.build_s,
            bytes = r.plugin_bytes
        )?;
        Ok(())
    }

    fn edits_table(&self, w: &mut String) -> Result<()> {
        writeln!(w, "<details><summary>Every edit</summary>\n")?;
        writeln!(
            w,
            "| edit | build (s) | pack + apply (s) | load (s) | first reconcile (s) | `wasmloop dev`: save → reconciling (s) | save → ConfigMap seen (s) |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|")?;
        for e in &self.r.edits {
            writeln!(
                w,
                "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                e.edit,
                e.dev.build_s,
                e.dev.pack_apply_s,
                e.dev.load_s,
                e.first_reconcile_s(),
                e.dev.total_s,
                e.observed_s
            )?;
        }
        writeln!(w, "\n</details>\n")?;
        Ok(())
    }

    /// Where the slowest edit's time went, and what would cut the largest part.
    fn missed(&self, w: &mut String) -> Result<()> {
        let (e, s) =
            (self.r.edits.iter().max_by(|a, b| a.observed_s.total_cmp(&b.observed_s)).context("dev-loop: no edit")?, &self.r.summary);
        // (phase, the slowest edit's figure, the median over the edits, the design change that cuts it)
        let phases = [
            (
                "the build",
                e.dev.build_s,
                s.build_s.median,
                "build the development versions with a cheaper profile than the guide's release one (no fat LTO, codegen-units > 1, \
                 incremental), keeping release for what is packed for production",
            ),
            (
                "pack + apply",
                e.dev.pack_apply_s,
                s.pack_apply_s.median,
                "apply the payload and the plugin ConfigMap in one round trip (the payload first only when it is new)",
            ),
            ("the load", e.dev.load_s, s.load_s.median, "compile development versions with Cranelift's cheaper optimisation level"),
            (
                "the first reconcile",
                e.first_reconcile_s(),
                s.first_reconcile_s.median,
                "queue the cached keys of a swapped-in version at normal priority in `wasmloop dev`'s host",
            ),
        ];
        let (largest, secs, median, change) = phases.into_iter().max_by(|a, b| a.1.total_cmp(&b.1)).context("no phase")?;
        writeln!(
            w,
            "**Target missed (save → reconciling ≤ 5 s) — where the time goes.** The slowest edit (edit {}, {:.2} s to its ConfigMap): \
             build {:.2} s, pack + apply {:.2} s, load {:.2} s, first reconcile {:.2} s. The largest part is {largest} ({secs:.2} s; \
             median over the edits {median:.2} s). Design change: {change}.\n",
            e.edit,
            e.observed_s,
            e.dev.build_s,
            e.dev.pack_apply_s,
            e.dev.load_s,
            e.first_reconcile_s()
        )?;
        Ok(())
    }
}

/// The load origins of the edits' versions, e.g. "`Compiled`" or "`Compiled` (4), `Reused` (1)".
fn origins(edits: &[Edit]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for e in edits {
        match counts.iter_mut().find(|(o, _)| *o == e.dev.origin) {
            Some((_, n)) => *n += 1,
            None => counts.push((&e.dev.origin, 1)),
        }
    }
    match counts.as_slice() {
        [(one, _)] => format!("`{one}`"),
        _ => counts.iter().map(|(o, n)| format!("`{o}` ({n})")).collect::<Vec<_>>().join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devloop::{DevFigures, Summaries};

    fn results(builds: &[f64]) -> Results {
        let edits: Vec<Edit> = builds
            .iter()
            .enumerate()
            .map(|(i, &build_s)| Edit {
                edit: i + 1,
                configmap: format!("welcome-e{}", i + 1),
                observed_s: build_s + 0.42,
                dev: DevFigures {
                    version: i as u32 + 2,
                    after: "the save".into(),
                    total_s: build_s + 0.4,
                    build_s,
                    pack_apply_s: 0.1,
                    load_s: 0.25,
                    origin: "Compiled".into(),
                    first_reconcile_s: Some(0.05),
                },
            })
            .collect();
        let first = DevFigures { version: 1, after: "the start".into(), first_reconcile_s: None, ..edits[0].dev.clone() };
        Results {
            package: "welcome".into(),
            host_profile: "release".into(),
            crate_profile: "release".into(),
            target_dir_fresh: true,
            first,
            plugin_bytes: 150_000,
            summary: Summaries::of(&edits).unwrap(),
            edits,
        }
    }

    #[test]
    fn the_section_has_every_phase_and_the_target_is_the_slowest_edit() {
        let r = results(&[0.5, 0.6, 0.7]);
        let d = DevLoop::new(&r).unwrap();
        let (mut rows, mut section) = (String::new(), String::new());
        d.target_rows(&mut rows).unwrap();
        d.section(&mut section).unwrap();
        assert!(rows.contains("median 1.02 s, max 1.12 s over 3 edits") && rows.contains("**met**"), "{rows}");
        assert!(section.starts_with("## 7. The plugin author's inner loop: `wasmloop dev`\n"), "{section}");
        assert!(
            section.contains("| build: `cargo build --target wasm32-wasip2 --release` of the edited crate | 0.60 s (0.50–0.70) |"),
            "{section}"
        );
        assert!(section.contains("ConfigMap seen by a watch** (the target's figure) | 1.02 s (0.92–1.12) |"), "{section}");
        assert!(section.contains("per edit: 20 ms (20–20)") && section.contains("loaded as `Compiled`"), "{section}");
        assert!(!section.contains("Target missed"), "{section}");
    }

    #[test]
    fn a_missed_target_names_the_largest_phase_of_the_slowest_edit() {
        let r = results(&[0.5, 6.0]);
        let d = DevLoop::new(&r).unwrap();
        let (mut rows, mut section) = (String::new(), String::new());
        d.target_rows(&mut rows).unwrap();
        d.section(&mut section).unwrap();
        assert!(rows.contains("**missed**"), "{rows}");
        assert!(section.contains("The slowest edit (edit 2, 6.42 s to its ConfigMap)"), "{section}");
        assert!(section.contains("The largest part is the build (6.00 s"), "{section}");
    }
}
