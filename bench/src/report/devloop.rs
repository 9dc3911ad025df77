//! Section 7 of the report: the plugin author's inner loop, `wasmloop dev`, save → new version
//! reconciling, phase by phase.

use std::fmt::Write as _;

use anyhow::{Context, Result, ensure};

use super::{mmm, status, summary_of};
use crate::devloop::{CompiledFunctions, Edit, Lang, Results};

/// Save → the new version's ConfigMap seen, every edit (seconds).
const SAVE_TO_RECONCILING_S: f64 = 5.0;

/// The figures the section and the targets share: one run per language, Rust first.
pub struct DevLoop<'a> {
    /// The section's raw results, one per language measured.
    pub runs: Vec<&'a Results>,
}

impl DevLoop<'_> {
    /// Fails on no results, on results without an edit, or with an edit whose version did not
    /// reconcile. The runs are shown in the order Rust, TypeScript, Python.
    pub fn new<'a>(runs: impl IntoIterator<Item = &'a Results>) -> Result<DevLoop<'a>> {
        let mut runs: Vec<&Results> = runs.into_iter().collect();
        ensure!(!runs.is_empty(), "dev-loop: no results");
        for r in &runs {
            let lang = r.lang.title();
            ensure!(!r.edits.is_empty(), "dev-loop ({lang}): no edit was measured");
            ensure!(r.edits.iter().all(|e| e.dev.first_reconcile_s.is_some()), "dev-loop ({lang}): an edit's version did not reconcile");
        }
        runs.sort_by_key(|r| r.lang as u8);
        Ok(DevLoop { runs })
    }

    fn met(r: &Results) -> bool {
        r.summary.observed_s.max <= SAVE_TO_RECONCILING_S
    }

    /// Rows of the "where we stand" table: one per language.
    pub fn target_rows(&self, w: &mut String) -> Result<()> {
        for r in &self.runs {
            let s = &r.summary.observed_s;
            let what = match r.lang {
                Lang::Rust => "the guide's plugin, release profile",
                Lang::Ts => "the guide's plugin in TypeScript, QuickJS",
                Lang::Python => "the guide's plugin in Python, componentize-py",
            };
            writeln!(
                w,
                "| save → new version reconciling ≤ 5 s, {lang} ({what}; [§7](#7-the-plugin-authors-inner-loop-wasmloop-dev)) | median \
                 {:.2} s, max {:.2} s over {} edits (save → its ConfigMap seen by a watch) | {} |",
                s.median,
                s.max,
                s.n,
                status(Self::met(r)),
                lang = r.lang.title(),
            )?;
        }
        Ok(())
    }

    /// The section.
    pub fn section(&self, w: &mut String) -> Result<()> {
        writeln!(w, "## 7. The plugin author's inner loop: `wasmloop dev`\n")?;
        self.method(w)?;
        writeln!(
            w,
            "| language | build | pack + apply | load | first reconcile | `wasmloop dev`: save → reconciling | **save → the version's \
             ConfigMap seen by a watch** (the target's figure) |"
        )?;
        writeln!(w, "|---|---|---|---|---|---|---|")?;
        for r in &self.runs {
            let s = &r.summary;
            write!(w, "| {} ({} edits) |", r.lang.title(), r.edits.len())?;
            for v in [&s.build_s, &s.pack_apply_s, &s.load_s, &s.first_reconcile_s, &s.dev_total_s, &s.observed_s] {
                write!(w, " {} |", mmm(v, 2, "s"))?;
            }
            writeln!(w)?;
        }
        let builds: Vec<&str> = self
            .runs
            .iter()
            .map(|r| match r.lang {
                Lang::Rust => "Rust `cargo build --target wasm32-wasip2 --release` of the edited crate",
                Lang::Ts => "TypeScript `tsc -p .`, then the SDK's `wasmloop-js build` (QuickJS)",
                Lang::Python => "Python `python -m wasmloop_sdk.build` (componentize-py)",
            })
            .collect();
        writeln!(
            w,
            "\nMedian (min–max) over the edits. The phases are `wasmloop dev`'s own figures, the last column the watch's. Build: \
             {}. Pack + apply: save → both ConfigMaps applied, minus the build (includes the file watcher's 50 ms settle). Load: \
             applied → the host reports the version loaded (watch event, decode, compile, validate, swap). First reconcile: loaded \
             → the version's first reconcile finished.\n",
            builds.join("; ")
        )?;
        let mut after = Vec::new();
        for r in &self.runs {
            // Whole ms (`wasmloop dev` prints hundredths of a second); `+ 0.0` turns -0 into 0.
            let diff = summary_of(r.edits.iter().map(|e| ((e.observed_s - e.dev.total_s) * 1e3).round() + 0.0))?;
            after.push(format!("{} {}", r.lang.title(), mmm(&diff, 0, "ms")));
        }
        let origins: Vec<String> = self.runs.iter().map(|r| format!("{} {}", r.lang.title(), origins(&r.edits))).collect();
        writeln!(
            w,
            "The watch's figure minus `wasmloop dev`'s, per edit: {} (`wasmloop dev` prints hundredths of a second). \
             `wasmloop dev` counts to the end of the first reconcile, whose actions (the ConfigMap's create, then an Event) are \
             executed by then; the watch counts to the create's watch event, which may come before the reconcile ends (a \
             negative difference). The versions were loaded as: {}.\n",
            after.join("; "),
            origins.join("; ")
        )?;
        let reuse: Vec<String> = self.runs.iter().filter_map(|r| Some(format!("{} {}", r.lang.title(), reuse(&r.edits)?))).collect();
        if !reuse.is_empty() {
            writeln!(
                w,
                "Functions each edit's version compiled, of all its functions (the rest were reused from the functions the session \
                 compiled for earlier versions: Cranelift's incremental cache, in memory): {}.\n",
                reuse.join("; ")
            )?;
        }
        for r in &self.runs {
            edits_table(r, w)?;
        }
        for r in &self.runs {
            if !Self::met(r) {
                missed(r, w)?;
            }
        }
        Ok(())
    }

    fn method(&self, w: &mut String) -> Result<()> {
        for r in &self.runs {
            match r.lang {
                Lang::Rust => writeln!(
                    w,
                    "`wasmloop new {p}` creates the guide's plugin crate (Namespaces labelled `{p}=true` get a ConfigMap `{p}`), built \
                     with its own `{profile}` profile: opt-level z, fat LTO, codegen-units 1, stripped, panic = abort. `wasmloop dev` \
                     ({host} build) runs on it as a child process against this run's control plane: on every save it builds the \
                     crate, packs it, applies the plugin ConfigMaps and loads them into the host in its own process (no precompiled \
                     cache: every version compiles, reusing the functions the session compiled before). Once version 1 runs, a fresh Namespace labelled `{p}=true` gets its ConfigMap; \
                     then {n} edits, one at a time, each writing `src/lib.rs` at once (one `write`) so the plugin names its ConfigMap \
                     `{p}-e<i>` and says \"Welcome to <ns>, edit <i>!\"; the next edit is saved 1 s after the previous version \
                     reconciled. Timed from just before the write: until a watch on the Namespace's ConfigMaps (started before the \
                     first edit) sees `{p}-e<i>`, and the phases `wasmloop dev` prints for that version. The session's first build \
                     ({fresh}) took {cold:.2} s; the component is {bytes} bytes.\n",
                    p = r.package,
                    profile = r.crate_profile,
                    host = r.host_profile,
                    n = r.edits.len(),
                    fresh = if r.target_dir_fresh {
                        "a fresh target directory: the dependencies compiled too"
                    } else {
                        "dependencies already built"
                    },
                    cold = r.first.build_s,
                    bytes = r.plugin_bytes
                )?,
                Lang::Ts => writeln!(
                    w,
                    "TypeScript, the same way: `wasmloop new {p} --lang ts` (an npm package on `sdk/js`; `npm install` before the \
                     session took {install}), `wasmloop dev` ({host} build) building it with `tsc`, then the SDK's `wasmloop-js \
                     build` (QuickJS: the interpreter with the plugin's code in one component), {n} edits of `src/plugin.ts`. The \
                     session's first build took {cold:.2} s; the component is {bytes} bytes.\n",
                    p = r.package,
                    install = r.install_s.map_or("an unmeasured time".to_string(), |s| format!("{s:.2} s")),
                    host = r.host_profile,
                    n = r.edits.len(),
                    cold = r.first.build_s,
                    bytes = r.plugin_bytes
                )?,
                Lang::Python => writeln!(
                    w,
                    "Python, the same way: `wasmloop new {p} --lang python` (a project on `sdk/python`), `wasmloop dev` ({host} \
                     build) building it with `python -m wasmloop_sdk.build` (componentize-py, from the SDK's pinned virtualenv of \
                     scripts/polyglot-env.sh), {n} edits of `src/plugin.py`. The session's first build took {cold:.2} s; the \
                     component is {bytes} bytes.\n",
                    p = r.package,
                    host = r.host_profile,
                    n = r.edits.len(),
                    cold = r.first.build_s,
                    bytes = r.plugin_bytes
                )?,
            }
        }
        Ok(())
    }
}

/// Every edit of one language's run, folded.
fn edits_table(r: &Results, w: &mut String) -> Result<()> {
    writeln!(w, "<details><summary>Every edit ({})</summary>\n", r.lang.title())?;
    writeln!(
        w,
        "| edit | build (s) | pack + apply (s) | load (s) | first reconcile (s) | `wasmloop dev`: save → reconciling (s) | save → ConfigMap seen (s) |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|---|")?;
    for e in &r.edits {
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

/// Where one language's slowest edit's time went, and what would cut the largest part.
fn missed(r: &Results, w: &mut String) -> Result<()> {
    let (e, s) = (r.edits.iter().max_by(|a, b| a.observed_s.total_cmp(&b.observed_s)).context("dev-loop: no edit")?, &r.summary);
    let build_change = match r.lang {
        Lang::Rust => {
            "build the development versions with a cheaper profile than the guide's release one (no fat LTO, codegen-units > 1, \
             incremental), keeping release for what is packed for production"
        }
        Lang::Ts => {
            "keep the QuickJS runtime component built once per session and rebuild only the plugin's bytecode (no fresh \
             componentize/initialisation per save), and transpile without tsc's type check in development"
        }
        Lang::Python => {
            "componentize-py compiles the whole linked interpreter with Cranelift on every build, to run it once for the \
             pre-initialisation snapshot (about two thirds of its CPU under `perf record` of componentize-py 0.25.1 on this \
             machine; its wasmtime engine has no compilation cache). What it compiles is CPython linked with the contract's \
             bindings, the same on every save (the plugin's source is mounted as files while it initialises): give that \
             engine a compilation cache (upstream, or by running the pre-initialisation through wasmloop's own engine and \
             its function cache), or keep the runtime instantiated once per session and re-snapshot only the plugin's module"
        }
    };
    // (phase, the slowest edit's figure, the median over the edits, the design change that cuts it)
    let phases = [
        ("the build", e.dev.build_s, s.build_s.median, build_change),
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
        "**Target missed for {} (save → reconciling ≤ 5 s) — where the time goes.** The slowest edit (edit {}, {:.2} s to its \
         ConfigMap): build {:.2} s, pack + apply {:.2} s, load {:.2} s, first reconcile {:.2} s. The largest part is {largest} \
         ({secs:.2} s; median over the edits {median:.2} s). Design change: {change}.\n",
        r.lang.title(),
        e.edit,
        e.observed_s,
        e.dev.build_s,
        e.dev.pack_apply_s,
        e.dev.load_s,
        e.first_reconcile_s()
    )?;
    Ok(())
}

/// The load origins of the edits' versions, e.g. "`Compiled`" or "`Compiled` (4), `Reused` (1)".
/// "median N of M (min–max)" of the functions each edit compiled; `None` for results without
/// the figure.
fn reuse(edits: &[Edit]) -> Option<String> {
    let functions: Vec<CompiledFunctions> = edits.iter().map(|e| e.dev.functions).collect::<Option<_>>()?;
    let compiled = summary_of(functions.iter().map(|f| f.compiled as f64)).ok()?;
    let total = functions.iter().map(|f| f.compiled + f.reused).max()?;
    Some(format!("{:.0} of {total} ({:.0}–{:.0})", compiled.median, compiled.min, compiled.max))
}

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
                    functions: Some(CompiledFunctions { compiled: 30, reused: 850 }),
                },
            })
            .collect();
        let first = DevFigures { version: 1, after: "the start".into(), first_reconcile_s: None, ..edits[0].dev.clone() };
        Results {
            lang: Lang::Rust,
            package: "welcome".into(),
            host_profile: "release".into(),
            crate_profile: "release".into(),
            target_dir_fresh: true,
            install_s: None,
            first,
            plugin_bytes: 150_000,
            summary: Summaries::of(&edits).unwrap(),
            edits,
        }
    }

    #[test]
    fn the_section_has_every_phase_and_the_target_is_the_slowest_edit() {
        let r = results(&[0.5, 0.6, 0.7]);
        let d = DevLoop::new([&r]).unwrap();
        let (mut rows, mut section) = (String::new(), String::new());
        d.target_rows(&mut rows).unwrap();
        d.section(&mut section).unwrap();
        assert!(rows.contains("median 1.02 s, max 1.12 s over 3 edits") && rows.contains("**met**"), "{rows}");
        assert!(section.starts_with("## 7. The plugin author's inner loop: `wasmloop dev`\n"), "{section}");
        assert!(section.contains("| Rust (3 edits) | 0.60 s (0.50–0.70) | 0.10 s (0.10–0.10) |"), "{section}");
        assert!(section.contains(" | 1.02 s (0.92–1.12) |\n"), "{section}");
        assert!(section.contains("per edit: Rust 20 ms (20–20)") && section.contains("loaded as: Rust `Compiled`"), "{section}");
        assert!(
            section.contains("compiled for earlier versions: Cranelift's incremental cache, in memory): Rust 30 of 880 (30–30)."),
            "{section}"
        );
        assert!(!section.contains("Target missed"), "{section}");
        assert!(!section.contains("TypeScript") && !section.contains("Python"), "only Rust measured: {section}");
    }

    #[test]
    fn a_missed_target_names_the_largest_phase_of_the_slowest_edit() {
        let r = results(&[0.5, 6.0]);
        let d = DevLoop::new([&r]).unwrap();
        let (mut rows, mut section) = (String::new(), String::new());
        d.target_rows(&mut rows).unwrap();
        d.section(&mut section).unwrap();
        assert!(rows.contains("**missed**"), "{rows}");
        assert!(section.contains("Target missed for Rust"), "{section}");
        assert!(section.contains("The slowest edit (edit 2, 6.42 s to its ConfigMap)"), "{section}");
        assert!(section.contains("The largest part is the build (6.00 s"), "{section}");
    }

    #[test]
    fn a_row_and_a_line_per_language_rust_first() {
        let rust = results(&[0.5, 0.6]);
        let ts = Results { lang: Lang::Ts, install_s: Some(3.0), crate_profile: "-".into(), ..results(&[7.0, 8.0]) };
        let python = Results { lang: Lang::Python, crate_profile: "-".into(), ..results(&[1.0, 2.0]) };
        let d = DevLoop::new([&python, &rust, &ts]).unwrap();
        let (mut rows, mut section) = (String::new(), String::new());
        d.target_rows(&mut rows).unwrap();
        d.section(&mut section).unwrap();
        let langs: Vec<&str> = rows.lines().map(|l| l.split(", ").nth(1).unwrap().split(' ').next().unwrap()).collect();
        assert_eq!(langs, ["Rust", "TypeScript", "Python"], "{rows}");
        assert!(rows.lines().nth(1).unwrap().ends_with("**missed** |") && rows.lines().nth(2).unwrap().ends_with("**met** |"), "{rows}");
        let lines: Vec<&str> = section.lines().filter(|l| l.starts_with("| ") && l.contains(" edits) |")).collect();
        assert_eq!(lines.len(), 3, "{section}");
        assert!(lines[1].starts_with("| TypeScript (2 edits) | 7.50 s (7.00–8.00) |"), "{section}");
        assert!(section.contains("`npm install` before the session took 3.00 s"), "{section}");
        assert!(section.contains("<summary>Every edit (Python)</summary>"), "{section}");
        assert!(section.contains("Build: Rust `cargo build") && section.contains("; Python `python -m wasmloop_sdk.build`"), "{section}");
        assert!(section.contains("Target missed for TypeScript") && !section.contains("Target missed for Python"), "{section}");
    }

    #[test]
    fn results_from_before_the_languages_are_rust() {
        let mut json = serde_json::to_value(results(&[0.5])).unwrap();
        let map = json.as_object_mut().unwrap();
        map.remove("lang");
        map.remove("install_s");
        let r: Results = serde_json::from_value(json).unwrap();
        assert_eq!((r.lang, r.install_s), (Lang::Rust, None));
    }
}
