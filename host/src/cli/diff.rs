//! `wasmloop diff`: how candidate versions compared with the serving ones, read from a running
//! host's `/shadow` (e.g. through `kubectl port-forward deploy/wasmloop 8080`).

use std::process::ExitCode;

use anyhow::Context;
use wasmloop::controller::shadow::{Difference, PluginReport};

#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// The host's HTTP address (its `--listen`), e.g. `http://127.0.0.1:8080`.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Only this plugin.
    #[arg(long)]
    plugin: Option<String>,
    /// Print the reports as JSON instead.
    #[arg(long)]
    json: bool,
}

/// Exit code 0: no candidate differs; 1: some candidate differed from its serving version.
pub fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let reports = rt.block_on(fetch(&args))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", render(&reports));
    }
    Ok(if reports.iter().any(|r| r.different > 0) { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

async fn fetch(args: &DiffArgs) -> anyhow::Result<Vec<PluginReport>> {
    let mut url = format!("{}/shadow", args.url.trim_end_matches('/'));
    if let Some(p) = &args.plugin {
        url = format!("{url}?plugin={p}");
    }
    let body = super::http_get_text(&url).await.with_context(|| format!("--url {}", args.url))?;
    serde_json::from_str(&body).with_context(|| format!("{url} did not answer with shadow reports (is it a wasmloop host?)"))
}

/// The reports as text: a line per plugin, then each difference with the two outcomes side by side.
fn render(reports: &[PluginReport]) -> String {
    if reports.is_empty() {
        return "no candidate version has shadowed a reconcile on this host\n".into();
    }
    let mut out = String::new();
    for r in reports {
        out += &format!("plugin {}: {} same, {} different, {} skipped", r.plugin, r.same, r.different, r.skipped);
        if r.rollbacks > 0 {
            out += &format!("; canary rolled back {} time(s)", r.rollbacks);
        }
        out += "\n";
        for d in &r.differences {
            out += &render_difference(d);
        }
    }
    out
}

fn render_difference(d: &Difference) -> String {
    let mut out = format!("\n  {} (at {}): serving {} | candidate {}\n", d.key, d.at, short(&d.serving_digest), short(&d.candidate_digest));
    let width = 60;
    let side = |s: &wasmloop::controller::shadow::Summary| {
        let mut lines: Vec<String> = s.actions.iter().map(|a| describe(a)).collect();
        if let Some(ms) = s.requeue_after_ms {
            lines.push(format!("requeue after {ms} ms"));
        }
        if let Some(e) = &s.error {
            lines.push(format!("error: {e}"));
        }
        if lines.is_empty() {
            lines.push("(no actions)".into());
        }
        lines
    };
    let (serving, candidate) = (side(&d.serving), side(&d.candidate));
    let only_serving: Vec<String> = d.only_serving().into_iter().map(describe).collect();
    let only_candidate: Vec<String> = d.only_candidate().into_iter().map(describe).collect();
    out += &format!("    {:<width$} | {}\n", "serving", "candidate");
    for i in 0..serving.len().max(candidate.len()) {
        let mark = |line: Option<&String>, only: &[String]| match line {
            Some(l) if only.contains(l) => format!("+ {}", clip(l, width - 2)),
            Some(l) => format!("  {}", clip(l, width - 2)),
            None => String::new(),
        };
        out += &format!("    {:<width$} | {}\n", mark(serving.get(i), &only_serving), mark(candidate.get(i), &only_candidate));
    }
    out
}

/// An action (its JSON) in one line: the verb and the target (`--json` has the whole action).
fn describe(action: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(action) else { return action.to_owned() };
    let verb = v["action"].as_str().unwrap_or("?");
    let key = |k: &serde_json::Value| {
        let kind = format!("{}/{}", k["kind"]["apiVersion"].as_str().unwrap_or("?"), k["kind"]["kind"].as_str().unwrap_or("?"));
        let name = k["name"].as_str().unwrap_or("?");
        match k["namespace"].as_str() {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        }
    };
    let target = if v.get("object").is_some() {
        let o = &v["object"];
        let name = match (o["metadata"]["name"].as_str(), o["metadata"]["generateName"].as_str()) {
            (Some(n), _) => n.to_owned(),
            (None, Some(g)) => format!("{g}*"),
            (None, None) => "?".to_owned(),
        };
        let ns = o["metadata"]["namespace"].as_str().map(|ns| format!("{ns}/")).unwrap_or_default();
        format!("{}/{} {ns}{name}", o["apiVersion"].as_str().unwrap_or("?"), o["kind"].as_str().unwrap_or("?"))
    } else if v.get("regarding").is_some() {
        format!("{} {}", key(&v["regarding"]), v["reason"].as_str().unwrap_or_default())
    } else {
        key(&v["key"])
    };
    format!("{verb} {target}")
}

fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max { s.to_owned() } else { format!("{}…", s.chars().take(max - 1).collect::<String>()) }
}

#[cfg(test)]
mod tests {
    use wasmloop::controller::shadow::Summary;

    use super::*;

    #[test]
    fn differences_show_both_sides_and_mark_what_only_one_returned() {
        let d = Difference {
            plugin: "podset".into(),
            key: "wasmloop.dev/v1alpha1/PodSet/shop/web".into(),
            at: 1,
            serving_digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaa".into(),
            candidate_digest: "sha256:bbbbbbbbbbbbbbbbbbbbbbbb".into(),
            serving: Summary::default(),
            candidate: Summary {
                actions: vec![
                    r#"{"action":"delete","key":{"kind":{"apiVersion":"v1","kind":"Pod"},"namespace":"shop","name":"web-1"}}"#.into(),
                ],
                ..Default::default()
            },
        };
        let report = PluginReport { plugin: "podset".into(), same: 3, different: 1, skipped: 0, rollbacks: 1, differences: vec![d] };
        let text = render(&[report]);
        assert!(text.contains("plugin podset: 3 same, 1 different, 0 skipped; canary rolled back 1 time(s)"), "{text}");
        assert!(text.contains("(no actions)"), "{text}");
        assert!(text.contains("+ delete v1/Pod shop/web-1"), "{text}");
        assert!(text.contains("serving sha256:aaaaaaaaaaaa | candidate sha256:bbbbbbbbbbbb"), "{text}");
        assert!(render(&[]).contains("no candidate version"));
        let create =
            r#"{"action":"create","object":{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"shop","generateName":"web-"}}}"#;
        assert_eq!(describe(create), "create v1/Pod shop/web-*");
    }
}
