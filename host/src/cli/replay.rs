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
use wasmloop::plugin::{ByteSize, Recording, recording};

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
    /// The largest recording read, as a file and decompressed (a recording is input from
    /// anywhere: a decompression bomb is refused at this size instead of filling memory).
    #[arg(long, env = "WASMLOOP_MAX_RECORDING_SIZE", default_value_t = ByteSize(recording::DEFAULT_MAX_DECODED), value_parser = super::parse_size)]
    max_recording_size: ByteSize,
    #[command(flatten)]
    load: super::LoadArgs,
}

pub fn run(args: ReplayArgs) -> ExitCode {
    // N replays would log the plugin's lines N times: with --count, below warnings only (unless
    // RUST_LOG says otherwise).
    if args.count > 1 && std::env::var_os("RUST_LOG").is_none() {
        let _ = tracing_subscriber::fmt().with_env_filter("warn").with_writer(std::io::stderr).try_init();
    }
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
    let recording = read_recording(&args.recording, args.max_recording_size)?;
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
    let report = Report {
        recording: args.recording.display().to_string(),
        key: recording.request.key.clone(),
        recorded: Who { plugin: recording.plugin.clone(), version: recording.version.clone(), digest: recording.digest.clone() },
        replayed: Who { plugin: plugin.spec().name.clone(), version: plugin.spec().version.clone(), digest: plugin.digest().to_owned() },
        warnings: warnings(&recording, &plugin)?,
        outcome: outcome_yaml(&replayed.outcome),
        difference: if replayed.diff.is_same() { json!("none") } else { serde_json::to_value(&replayed.diff)? },
        not_from_the_recording: (!replayed.report.complete()).then_some(replayed.report),
        replays: (args.count > 1).then_some(args.count),
        distinct_outcomes: (args.count > 1).then_some(distinct.len()),
        result: if same { "same" } else { "different" },
    };
    print!("{}", serde_saphyr::to_string(&report)?);
    Ok(if same { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The recording at `path`, within `max` bytes as a file and as JSON; a larger one is refused
/// naming the file, the limit and the flag that raises it.
fn read_recording(path: &std::path::Path, max: ByteSize) -> anyhow::Result<Recording> {
    let over = |e: &dyn std::fmt::Display| {
        anyhow::anyhow!("{}: {e} (the limit is --max-recording-size {max}; raise it to replay a larger recording)", path.display())
    };
    let bytes = match wasmloop::bounded::read_file(path, max.bytes()) {
        Err(wasmloop::bounded::Error::FileTooLarge { size, .. }) => {
            let size = size.map_or_else(|| "a stream".to_string(), |s| format!("{s} bytes"));
            return Err(over(&format!("the file is {size}, more than {} bytes", max.bytes())));
        }
        read => read?,
    };
    match Recording::decode_within(&bytes, max.bytes()) {
        Err(e @ (recording::Error::Decompressed(_) | recording::Error::JsonTooLarge { .. })) => Err(over(&e)),
        decoded => decoded.with_context(|| format!("reading {}", path.display())),
    }
}

/// What `wasmloop replay` prints, in this order.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    recording: String,
    key: String,
    recorded: Who,
    replayed: Who,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
    outcome: Value,
    difference: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    not_from_the_recording: Option<wasmloop::plugin::ReplayReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replays: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    distinct_outcomes: Option<usize>,
    result: &'static str,
}

/// What makes a replay say less than it seems to.
fn warnings(recording: &Recording, plugin: &wasmloop::plugin::WasmPlugin) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let key = recording.request.request()?.key;
    if key.kind != plugin.spec().reconciles {
        let spec = plugin.spec();
        out.push(format!("the recorded key {key} is not of the kind plugin {} reconciles ({})", spec.name, spec.reconciles));
    }
    if recording.truncated {
        out.push("the recording was truncated at its byte cap: the reads past it were not recorded".to_string());
    }
    Ok(out)
}

/// Which plugin build.
#[derive(serde::Serialize)]
struct Who {
    plugin: String,
    version: String,
    digest: String,
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
