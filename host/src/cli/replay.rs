//! `wasmloop replay`: run a recorded reconcile again, offline, with exactly its inputs (cache
//! reads answered from the recording, clocks and random values served in order), and say how
//! the outcome differs from the recorded one.
//!
//! Exit code: 0 when every replay's outcome is the recorded one, 1 when one differs (or
//! `--count` replays do not all agree), 2 when the recording or the plugin cannot be read.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::{Value, json};
use wasmloop::controller::Reconciler;
use wasmloop::plugin::Recording;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The recording (`.json.zst` from `wasmloop run --record-dir` or `wasmloop reconcile
    /// --record`; plain JSON is read too).
    recording: PathBuf,
    /// The plugin component to replay it with: the one recorded, or another version of it.
    #[arg(long)]
    plugin: PathBuf,
    /// Run under this manifest's limits (as `wasmloop reconcile --manifest`).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Replay N times and report how many distinct outcomes there were (1: deterministic).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    count: u32,
    #[command(flatten)]
    load: super::LoadArgs,
}

pub fn run(args: ReplayArgs) -> ExitCode {
    super::init_tracing(super::LogFormat::Text);
    match replay(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wasmloop replay: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn replay(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(&args.recording).with_context(|| format!("reading {}", args.recording.display()))?;
    let recording = Recording::decode(&bytes).with_context(|| format!("reading {}", args.recording.display()))?;
    let plugin = super::offline::load_plugin(&args.plugin, args.manifest.as_deref(), &args.load)?;
    let mut first = None;
    let mut distinct: Vec<Value> = Vec::new();
    for _ in 0..args.count {
        let replayed = plugin.replay(&recording).with_context(|| format!("replaying {}", args.recording.display()))?;
        let outcome = serde_json::to_value(&replayed.outcome)?;
        if !distinct.contains(&outcome) {
            distinct.push(outcome);
        }
        first.get_or_insert(replayed);
    }
    let Some(replayed) = first else { anyhow::bail!("--count must be at least 1") };
    let same = replayed.diff.is_same() && distinct.len() == 1;
    let mut out = json!({
        "recording": args.recording.display().to_string(),
        "key": recording.request.key,
        "recorded": {"plugin": recording.plugin, "version": recording.version, "digest": recording.digest},
        "replayed": {"plugin": plugin.spec().name, "version": plugin.spec().version, "digest": plugin.digest()},
        "outcome": outcome_yaml(&replayed.outcome),
    });
    out["difference"] = if replayed.diff.is_same() { json!("none") } else { serde_json::to_value(&replayed.diff)? };
    if !replayed.report.complete() {
        out["notFromTheRecording"] = serde_json::to_value(&replayed.report)?;
    }
    if recording.truncated {
        out["warning"] = json!("the recording was truncated at its byte cap: reads past it are not recorded");
    }
    if args.count > 1 {
        out["replays"] = json!(args.count);
        out["distinctOutcomes"] = json!(distinct.len());
    }
    out["result"] = json!(if same { "same" } else { "different" });
    print!("{}", serde_saphyr::to_string(&out)?);
    Ok(if same { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// An outcome as `wasmloop reconcile` shows one.
fn outcome_yaml(outcome: &wasmloop::plugin::recording::RecordedOutcome) -> Value {
    let mut out = json!({"actions": outcome.actions});
    if let Some(d) = outcome.requeue_after() {
        out["requeueAfter"] = json!(wasmloop::duration::format(d));
    }
    if let Some(e) = &outcome.error {
        out["error"] = json!(e.message);
        out["retry"] = json!(if e.transient { "with backoff" } else { "when the object changes" });
    }
    out
}
