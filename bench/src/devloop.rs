//! Section 7: the plugin author's inner loop, `wasmloop dev`. `wasmloop new --lang rust|ts|python`
//! creates the guide's plugin (Namespaces labelled `<name>=true` get a ConfigMap `<name>`): a
//! crate, an npm package (`npm install`ed) or a Python project; `wasmloop dev` runs on it as a
//! child process against the real API server. Once its version 1 runs, a fresh labelled Namespace
//! gets its ConfigMap; then each edit rewrites the plugin's source (`src/lib.rs`, `src/plugin.ts`,
//! `src/plugin.py`) at once so the plugin names the ConfigMap `<name>-e<i>` (and says so in its
//! message), and the time runs from just before the write until a watch on the Namespace's
//! ConfigMaps, started before the first edit, sees `<name>-e<i>`. Next to it, what `wasmloop dev`
//! printed for that version: its "version N reconciling X s after the save (build, pack + apply,
//! load, first reconcile)" line.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::controllers::tail;
use crate::fixtures::workspace_root;
use crate::kube_util::{self, delete_namespace, sigterm};
use crate::stats::Summary;

/// How long an edit may take, save → both its `wasmloop dev` line and its ConfigMap.
const EDIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Between the end of one edit and the next save (`wasmloop dev` folds writes within 50 ms).
const BETWEEN_EDITS: Duration = Duration::from_secs(1);
/// The cargo profile `wasmloop dev` builds with by default (the guide's release profile).
pub const CRATE_PROFILE: &str = "release";

/// The languages of `wasmloop new --lang` the section measures.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    #[default]
    Rust,
    /// TypeScript: tsc, then the SDK's `wasmloop-js build` (QuickJS).
    Ts,
    /// Python: `python -m wasmloop_sdk.build` (componentize-py).
    Python,
}

impl Lang {
    /// `wasmloop new --lang`'s value.
    pub fn flag(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Ts => "ts",
            Lang::Python => "python",
        }
    }

    /// The language's name in the report.
    pub fn title(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Ts => "TypeScript",
            Lang::Python => "Python",
        }
    }

    /// The SDK `wasmloop new --sdk` gets by default: this workspace's.
    fn sdk_dir(self) -> &'static str {
        match self {
            Lang::Rust => "guest-sdk",
            Lang::Ts => "sdk/js",
            Lang::Python => "sdk/python",
        }
    }

    /// The template's source file an edit rewrites.
    pub fn source(self) -> &'static str {
        match self {
            Lang::Rust => "src/lib.rs",
            Lang::Ts => "src/plugin.ts",
            Lang::Python => "src/plugin.py",
        }
    }

    /// The three rewrites of edit `i` of plugin `p` (ConfigMap `cm`): (from, to), each `from`
    /// once in the template's source — the ConfigMap looked up in the cache, the one created,
    /// and its message.
    fn rewrites(self, p: &str, cm: &str, i: usize) -> [(String, String); 3] {
        match self {
            Lang::Rust => [
                (format!("\"{p}\")?"), format!("\"{cm}\")?")),
                (format!("{{\"name\": \"{p}\", \"namespace\""), format!("{{\"name\": \"{cm}\", \"namespace\"")),
                ("Welcome to {name}!".to_string(), format!("Welcome to {{name}}, edit {i}!")),
            ],
            Lang::Ts => [
                (format!("name, \"{p}\"))"), format!("name, \"{cm}\"))")),
                (format!("{{ name: \"{p}\", namespace"), format!("{{ name: \"{cm}\", namespace")),
                ("`Welcome to ${name}!`".to_string(), format!("`Welcome to ${{name}}, edit {i}!`")),
            ],
            Lang::Python => [
                (format!("name, \"{p}\") is not None"), format!("name, \"{cm}\") is not None")),
                (format!("{{\"name\": \"{p}\", \"namespace\""), format!("{{\"name\": \"{cm}\", \"namespace\"")),
                ("f\"Welcome to {name}!\"".to_string(), format!("f\"Welcome to {{name}}, edit {i}!\"")),
            ],
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The plugin's language (`wasmloop new --lang`).
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// The wasmloop binary (`wasmloop new`, `wasmloop dev`).
    #[arg(long)]
    pub host_bin: PathBuf,
    /// How the wasmloop binary was built (reported: its in-process host compiles every version).
    #[arg(long, default_value = "release")]
    pub host_profile: String,
    /// The plugin's name for `wasmloop new` (its package, ConfigMap and label).
    #[arg(long, default_value = "welcome")]
    pub name: String,
    /// The wasmloop SDK for `wasmloop new --sdk` (default: this workspace's `guest-sdk`,
    /// `sdk/js` — with its node_modules, `polyglot_setup` of scripts/polyglot-env.sh — or
    /// `sdk/python`).
    #[arg(long)]
    pub sdk: Option<PathBuf>,
    /// Python: the interpreter with componentize-py that builds the plugin (`$WASMLOOP_PY` of
    /// scripts/polyglot-env.sh by default); the SDK is put on its PYTHONPATH.
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// The crate is created here (`<work-dir>/<name>`, which must not exist), with `dev.log`.
    #[arg(long)]
    pub work_dir: PathBuf,
    /// Rust: CARGO_TARGET_DIR of the crate's builds (default `<work-dir>/target`: a cold first
    /// build).
    #[arg(long)]
    pub target_dir: Option<PathBuf>,
    /// Edits measured.
    #[arg(long, default_value_t = 5)]
    pub edits: usize,
    /// Give up on version 1 (the first, cold build) after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    #[arg(long)]
    pub out: PathBuf,
}

/// What `wasmloop dev` printed for one version: "version N reconciling X s after the save
/// (build B s, pack + apply P s, load L s (Origin), first reconcile R s)", or "version N loaded
/// X s after … (…); no reconcile in 10 s" (then `first_reconcile_s` is `None`). Seconds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DevFigures {
    pub version: u32,
    /// What the time counts from: "the save" or "the start".
    pub after: String,
    /// Save → first reconcile of the version finished (or → loaded, without a reconcile).
    pub total_s: f64,
    pub build_s: f64,
    /// Save → the ConfigMaps applied, minus the build.
    pub pack_apply_s: f64,
    /// Applied → the host reports the version loaded.
    pub load_s: f64,
    /// How the host got the component (`Compiled`, `Precompiled`, `Reused`).
    pub origin: String,
    /// Loaded → the version's first reconcile finished.
    pub first_reconcile_s: Option<f64>,
    /// Functions this version's compile compiled, and found already compiled
    /// (`wasmloop dev`'s "compiled N functions, reused M" line; absent in older results).
    #[serde(default)]
    pub functions: Option<CompiledFunctions>,
}

/// "compiled N functions, reused M compiled before".
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CompiledFunctions {
    pub compiled: u64,
    pub reused: u64,
}

/// A line of `wasmloop dev`'s stderr the benchmark acts on.
#[derive(Clone, Debug, PartialEq)]
pub enum DevLine {
    /// A version is loaded (and maybe reconciling).
    Version(DevFigures),
    /// A version's compile: what it compiled and reused (logged before the version's line).
    Compiled(CompiledFunctions),
    /// A build failed, the host refused a version, or a step failed (the message's first line).
    Failed(String),
}

/// Parse one line of `wasmloop dev`'s log (tracing's format without ANSI colours); `None` for
/// the lines the benchmark does not act on.
pub fn parse_line(line: &str) -> Option<DevLine> {
    let (_, message) = line.split_once(" wasmloop::dev: ")?;
    if message.contains("the last good version keeps running") {
        return Some(DevLine::Failed(message.to_string()));
    }
    if let Some(functions) = parse_compiled(message) {
        return Some(DevLine::Compiled(functions));
    }
    parse_version(message).map(DevLine::Version)
}

/// "compiled N functions, reused M compiled before (…)".
fn parse_compiled(message: &str) -> Option<CompiledFunctions> {
    let (compiled, rest) = message.strip_prefix("compiled ")?.split_once(" functions, reused ")?;
    let (reused, _) = rest.split_once(' ')?;
    Some(CompiledFunctions { compiled: compiled.parse().ok()?, reused: reused.parse().ok()? })
}

/// "version N reconciling|loaded X s after WHAT (build B s, pack + apply P s, load L s (ORIGIN)…".
fn parse_version(message: &str) -> Option<DevFigures> {
    let (version, rest) = message.strip_prefix("version ")?.split_once(' ')?;
    let (reconciling, rest) = match rest.strip_prefix("reconciling ") {
        Some(rest) => (true, rest),
        None => (false, rest.strip_prefix("loaded ")?),
    };
    let (total, rest) = rest.split_once(" s after ")?;
    let (after, rest) = rest.split_once(" (build ")?;
    let (build, rest) = rest.split_once(" s, pack + apply ")?;
    let (pack_apply, rest) = rest.split_once(" s, load ")?;
    let (load, rest) = rest.split_once(" s (")?;
    let (origin, rest) = rest.split_once(')')?;
    let first_reconcile_s = if reconciling {
        Some(rest.strip_prefix(", first reconcile ")?.strip_suffix(" s)")?.parse().ok()?)
    } else {
        rest.starts_with("); no reconcile").then_some(())?;
        None
    };
    Some(DevFigures {
        version: version.parse().ok()?,
        after: after.to_string(),
        total_s: total.parse().ok()?,
        build_s: build.parse().ok()?,
        pack_apply_s: pack_apply.parse().ok()?,
        load_s: load.parse().ok()?,
        origin: origin.to_string(),
        first_reconcile_s,
        functions: None,
    })
}

/// One edit of `src/lib.rs`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Edit {
    /// 1-based.
    pub edit: usize,
    /// The ConfigMap this version creates.
    pub configmap: String,
    /// Save (just before the write) → the ConfigMap seen by the watch, seconds.
    pub observed_s: f64,
    /// What `wasmloop dev` printed for the version (with a first reconcile).
    pub dev: DevFigures,
}

impl Edit {
    /// Loaded → first reconcile, seconds (always present for an edit).
    pub fn first_reconcile_s(&self) -> f64 {
        self.dev.first_reconcile_s.unwrap_or(f64::NAN)
    }
}

/// Median, min and max of each figure over the edits, seconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summaries {
    pub build_s: Summary,
    pub pack_apply_s: Summary,
    pub load_s: Summary,
    pub first_reconcile_s: Summary,
    /// Save → reconciling, as `wasmloop dev` reports it.
    pub dev_total_s: Summary,
    /// Save → the ConfigMap seen by the watch.
    pub observed_s: Summary,
}

impl Summaries {
    /// The summaries of `edits` (fails on none).
    pub fn of(edits: &[Edit]) -> Result<Self> {
        let s = |f: fn(&Edit) -> f64| Summary::of(&edits.iter().map(f).collect::<Vec<_>>());
        Ok(Self {
            build_s: s(|e| e.dev.build_s)?,
            pack_apply_s: s(|e| e.dev.pack_apply_s)?,
            load_s: s(|e| e.dev.load_s)?,
            first_reconcile_s: s(Edit::first_reconcile_s)?,
            dev_total_s: s(|e| e.dev.total_s)?,
            observed_s: s(|e| e.observed_s)?,
        })
    }
}

/// The raw results of the section.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// The plugin's language (results before `--lang`: Rust).
    #[serde(default)]
    pub lang: Lang,
    /// The plugin's package name (`wasmloop new NAME`).
    pub package: String,
    /// How the wasmloop binary was built.
    pub host_profile: String,
    /// The cargo profile of the plugin's builds (Rust; "-" for the others).
    pub crate_profile: String,
    /// Rust: the target directory did not exist before the first build (dependencies compiled
    /// too); the others: always (the project's `build/` is new).
    pub target_dir_fresh: bool,
    /// TypeScript: `npm install` in the new package before `wasmloop dev`, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_s: Option<f64>,
    /// What `wasmloop dev` printed for version 1 (the session's first build).
    pub first: DevFigures,
    /// The component of version 1, bytes.
    pub plugin_bytes: u64,
    /// Every edit, in order.
    pub edits: Vec<Edit>,
    /// Over the edits.
    pub summary: Summaries,
}

/// The plugin `wasmloop new` made, and the three places of its source an edit changes.
struct PluginCrate {
    lang: Lang,
    dir: PathBuf,
    package: String,
    /// The SDK it was made with (absolute).
    sdk: PathBuf,
    original: String,
}

impl PluginCrate {
    /// `wasmloop new <name> --lang <lang> --dir <work-dir>/<name> --sdk <sdk>`.
    fn create(args: &Args, work_dir: &Path) -> Result<Self> {
        let dir = work_dir.join(&args.name);
        ensure!(!dir.exists(), "{} exists already: give dev-loop a fresh --work-dir", dir.display());
        let sdk = std::path::absolute(args.sdk.clone().unwrap_or_else(|| workspace_root().join(args.lang.sdk_dir())))?;
        let out = std::process::Command::new(&args.host_bin)
            .args(["new", &args.name, "--lang", args.lang.flag(), "--dir"])
            .arg(&dir)
            .arg("--sdk")
            .arg(&sdk)
            .output()
            .with_context(|| format!("running {} new", args.host_bin.display()))?;
        ensure!(out.status.success(), "wasmloop new {} failed: {}", args.name, String::from_utf8_lossy(&out.stderr).trim());
        let source = args.lang.source();
        let original = std::fs::read_to_string(dir.join(source)).with_context(|| format!("reading the new plugin's {source}"))?;
        let krate = Self { lang: args.lang, dir, package: args.name.clone(), sdk, original };
        krate.edited(0).with_context(|| format!("the template's {source} is not the one dev-loop knows how to edit"))?;
        ensure!(
            krate.original.contains(&format!(".selector(\"{}=true\")", krate.label())),
            "the template's plugin does not select Namespaces labelled {}=true",
            krate.label()
        );
        Ok(krate)
    }

    /// The label key the plugin selects Namespaces by (value `true`).
    fn label(&self) -> &str {
        &self.package
    }

    /// The ConfigMap edit `i` makes (0: the template's own).
    fn configmap(&self, i: usize) -> String {
        if i == 0 { self.package.clone() } else { format!("{}-e{i}", self.package) }
    }

    /// The template's source with edit `i`: the ConfigMap looked up and created is
    /// `configmap(i)`, and its message names the edit.
    fn edited(&self, i: usize) -> Result<String> {
        let mut source = self.original.clone();
        for (from, to) in self.lang.rewrites(&self.package, &self.configmap(i), i) {
            let n = source.matches(&from).count();
            ensure!(n == 1, "{} has {n} occurrences of {from:?}, expected 1", self.lang.source());
            source = source.replace(&from, &to);
        }
        Ok(source)
    }

    /// What the plugin needs before `wasmloop dev` builds it: TypeScript `npm install` (its SDK
    /// `file:` linked, tsc), timed; nothing for the others.
    fn install(&self) -> Result<Option<f64>> {
        if self.lang != Lang::Ts {
            return Ok(None);
        }
        ensure!(
            self.sdk.join("node_modules/componentize-qjs").exists(),
            "{} has no node_modules/componentize-qjs: run `source scripts/polyglot-env.sh && polyglot_setup` first",
            self.sdk.display()
        );
        let mut npm = std::process::Command::new("npm");
        npm.args(["install", "--no-audit", "--no-fund", "--prefer-offline"]).current_dir(&self.dir);
        if let Some(cache) = std::env::var_os("WASMLOOP_CACHE") {
            npm.arg("--cache").arg(Path::new(&cache).join("npm"));
        }
        let started = Instant::now();
        let out = npm.output().context("running npm install")?;
        ensure!(out.status.success(), "npm install in {} failed: {}", self.dir.display(), String::from_utf8_lossy(&out.stderr).trim());
        Ok(Some(started.elapsed().as_secs_f64()))
    }

    /// Where `wasmloop dev` builds the component (`target_dir`: cargo's, Rust only).
    fn wasm_path(&self, target_dir: &Path) -> PathBuf {
        match self.lang {
            Lang::Rust => target_dir.join("wasm32-wasip2").join(CRATE_PROFILE).join(format!("{}.wasm", self.package.replace('-', "_"))),
            Lang::Ts | Lang::Python => self.dir.join("build/plugin.wasm"),
        }
    }

    /// Write edit `i` at once; returns the instant just before the write (the save).
    fn save(&self, i: usize) -> Result<Instant> {
        let source = self.edited(i)?;
        let path = self.dir.join(self.lang.source());
        let saved = Instant::now();
        std::fs::write(&path, source).with_context(|| format!("writing {}", path.display()))?;
        Ok(saved)
    }
}

/// `wasmloop dev` running on the crate; killed when dropped.
struct DevSession {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<DevLine>,
    log: PathBuf,
}

impl DevSession {
    /// Start `wasmloop dev` in `krate.dir`; its stderr goes to `log`, parsed line by line.
    fn start(args: &Args, krate: &PluginCrate, target_dir: &Path, log: PathBuf) -> Result<Self> {
        let mut command = tokio::process::Command::new(&args.host_bin);
        if krate.lang == Lang::Python {
            // The SDK's pinned componentize-py; the SDK itself from the path (the template's
            // `.venv` would have it installed).
            let python = match &args.python {
                Some(p) => p.clone(),
                None => std::env::var_os("WASMLOOP_PY")
                    .map(PathBuf::from)
                    .context("no --python and no $WASMLOOP_PY: `source scripts/polyglot-env.sh && polyglot_setup` first")?,
            };
            command.env("WASMLOOP_PYTHON", std::path::absolute(python)?).env("PYTHONPATH", &krate.sdk);
        }
        let mut child = command
            .arg("dev")
            .current_dir(&krate.dir)
            .env("KUBECONFIG", &args.kubeconfig)
            .env("CARGO_TARGET_DIR", target_dir)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} dev", args.host_bin.display()))?;
        let stderr = child.stderr.take().context("wasmloop dev without stderr")?;
        let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(forward_lines(stderr, file, tx));
        Ok(Self { child, lines, log })
    }

    /// `wasmloop dev`'s line for version `version`, or an error if a build, load or step fails,
    /// `wasmloop dev` exits, or `timeout` passes.
    async fn version(&mut self, version: u32, timeout: Duration) -> Result<DevFigures> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut functions = None;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(DevLine::Compiled(f))) => functions = Some(f),
                Ok(Some(DevLine::Version(v))) if v.version == version => return Ok(DevFigures { functions, ..v }),
                Ok(Some(DevLine::Version(v))) => bail!("expected version {version}, wasmloop dev reported {v:?}"),
                Ok(Some(DevLine::Failed(message))) => bail!("wasmloop dev: {message}\n{}", tail(&self.log, 30)),
                Ok(None) => bail!("wasmloop dev exited\n{}", tail(&self.log, 30)),
                Err(_) => bail!("no line for version {version} from wasmloop dev in {timeout:?}\n{}", tail(&self.log, 30)),
            }
        }
    }

    /// SIGTERM, then wait for the exit (killed after 20 s).
    async fn stop(mut self) -> Result<()> {
        if let Some(pid) = self.child.id() {
            sigterm(pid)?;
        }
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(status) => {
                status?;
                Ok(())
            }
            Err(_) => {
                self.child.kill().await?;
                bail!("wasmloop dev ignored SIGTERM for 20 s and was killed")
            }
        }
    }
}

/// Copy `wasmloop dev`'s stderr to its log file and send the lines the benchmark acts on.
async fn forward_lines(stderr: tokio::process::ChildStderr, mut file: std::fs::File, tx: mpsc::UnboundedSender<DevLine>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let _ = writeln!(file, "{line}");
        if let Some(parsed) = parse_line(&line) {
            let _ = tx.send(parsed);
        }
    }
}

/// ConfigMaps of one namespace as a watch sees them: name and when the watch delivered it.
struct ConfigMapsSeen {
    rx: mpsc::UnboundedReceiver<(String, Instant)>,
    task: tokio::task::JoinHandle<()>,
}

impl ConfigMapsSeen {
    /// Start watching the ConfigMaps of `ns` (it may not exist yet).
    fn watch(client: &Client, ns: &str) -> Self {
        let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut stream = watcher::watcher(api, watcher::Config::default()).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                let at = Instant::now();
                match event {
                    Ok(Event::Apply(cm) | Event::InitApply(cm)) => {
                        let _ = tx.send((cm.metadata.name.unwrap_or_default(), at));
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("dev-loop: the ConfigMap watch failed (retried): {e}"),
                }
            }
        });
        Self { rx, task }
    }

    /// When the watch first delivered ConfigMap `name` (from now on, or buffered before).
    async fn first(&mut self, name: &str, timeout: Duration) -> Result<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some((seen, at))) if seen == name => return Ok(at),
                Ok(Some(_)) => {}
                Ok(None) => bail!("the ConfigMap watch ended"),
                Err(_) => bail!("ConfigMap {name} not seen in {timeout:?}"),
            }
        }
    }
}

impl Drop for ConfigMapsSeen {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A fresh Namespace `name` with label `label=true`.
async fn create_labelled_namespace(client: &Client, name: &str, label: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "labels": {label: "true"}}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Take the label off Namespace `name`, then delete it: without a namespace controller it stays
/// Terminating, and labelled it would stay in the plugin's cache (reconciled by every version of
/// a later session, before that session's own Namespace).
async fn remove_labelled_namespace(client: &Client, name: &str, label: &str) -> Result<()> {
    let unlabel = json!({"metadata": {"labels": {label: null}}});
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .with_context(|| format!("taking label {label} off namespace {name}"))?;
    delete_namespace(client, name).await
}

/// A Namespace name no earlier run used.
fn fresh_namespace_name() -> String {
    let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() % 100_000_000);
    format!("bench-dev-loop-{}-{millis}", std::process::id())
}

/// Edit `i`: save, then `wasmloop dev`'s line for version `i + 1` and the watch seeing the
/// edit's ConfigMap.
async fn measure_edit(krate: &PluginCrate, dev: &mut DevSession, seen: &mut ConfigMapsSeen, i: usize) -> Result<Edit> {
    let configmap = krate.configmap(i);
    let saved = krate.save(i)?;
    let version = u32::try_from(i + 1)?;
    let figures = dev.version(version, EDIT_TIMEOUT).await?;
    ensure!(figures.first_reconcile_s.is_some(), "version {version} was loaded but did not reconcile: {figures:?}");
    let at = seen.first(&configmap, EDIT_TIMEOUT).await.with_context(|| format!("edit {i}"))?;
    let edit = Edit { edit: i, configmap, observed_s: (at - saved).as_secs_f64(), dev: figures };
    eprintln!(
        "dev-loop: edit {i}: save → ConfigMap seen {:.2} s (wasmloop dev: {:.2} s = build {:.2}, pack + apply {:.2}, load {:.2} ({}), first reconcile {:.2})",
        edit.observed_s,
        edit.dev.total_s,
        edit.dev.build_s,
        edit.dev.pack_apply_s,
        edit.dev.load_s,
        edit.dev.origin,
        edit.first_reconcile_s()
    );
    Ok(edit)
}

/// Create the crate, start `wasmloop dev` on it, wait for version 1 and its ConfigMap in a fresh
/// Namespace, then measure `args.edits` edits one after another.
pub async fn run(mut args: Args) -> Result<Results> {
    // `wasmloop dev` runs in the crate's directory.
    args.host_bin = std::path::absolute(&args.host_bin)?;
    args.kubeconfig = std::path::absolute(&args.kubeconfig)?;
    std::fs::create_dir_all(&args.work_dir).with_context(|| format!("creating {}", args.work_dir.display()))?;
    let work_dir = args.work_dir.canonicalize()?;
    let target_dir = match &args.target_dir {
        Some(dir) => std::path::absolute(dir)?,
        None => work_dir.join("target"),
    };
    let target_dir_fresh = args.lang != Lang::Rust || !target_dir.exists();
    let client = kube_util::client(&args.kubeconfig).await?;
    let krate = PluginCrate::create(&args, &work_dir)?;
    let install_s = krate.install()?;
    if let Some(s) = install_s {
        eprintln!("dev-loop: npm install {s:.2} s");
    }
    let mut dev = DevSession::start(&args, &krate, &target_dir, work_dir.join("dev.log"))?;
    let first = dev.version(1, Duration::from_secs(args.timeout_secs)).await.context("version 1 (the first build)")?;
    let wasm = krate.wasm_path(&target_dir);
    let plugin_bytes = std::fs::metadata(&wasm).with_context(|| format!("reading {}", wasm.display()))?.len();
    eprintln!("dev-loop: version 1 {:.2} s after the start (first build {:.2} s, {plugin_bytes} bytes)", first.total_s, first.build_s);

    let ns = fresh_namespace_name();
    let mut seen = ConfigMapsSeen::watch(&client, &ns);
    create_labelled_namespace(&client, &ns, krate.label()).await?;
    seen.first(&krate.configmap(0), EDIT_TIMEOUT).await.context("version 1's ConfigMap in the fresh namespace")?;
    let mut edits = Vec::new();
    for i in 1..=args.edits {
        tokio::time::sleep(BETWEEN_EDITS).await;
        edits.push(measure_edit(&krate, &mut dev, &mut seen, i).await?);
    }
    dev.stop().await?;
    remove_labelled_namespace(&client, &ns, krate.label()).await?;
    let summary = Summaries::of(&edits)?;
    eprintln!(
        "dev-loop ({}): save → ConfigMap seen p50 {:.2} s (max {:.2} s), wasmloop dev's save → reconciling p50 {:.2} s, build p50 {:.2} s, {} edits",
        args.lang.flag(),
        summary.observed_s.median,
        summary.observed_s.max,
        summary.dev_total_s.median,
        summary.build_s.median,
        edits.len()
    );
    Ok(Results {
        lang: args.lang,
        package: krate.package,
        host_profile: args.host_profile,
        crate_profile: if args.lang == Lang::Rust { CRATE_PROFILE } else { "-" }.to_string(),
        target_dir_fresh,
        install_s,
        first,
        plugin_bytes,
        edits,
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_lines_of_wasmloop_dev() {
        let reconciling = "2026-12-01T20:59:18.672056Z  INFO wasmloop::dev: version 2 reconciling 0.76 s after the save (build 0.40 s, \
                           pack + apply 0.10 s, load 0.20 s (Compiled), first reconcile 0.06 s)";
        assert_eq!(
            parse_line(reconciling),
            Some(DevLine::Version(DevFigures {
                version: 2,
                after: "the save".into(),
                total_s: 0.76,
                build_s: 0.40,
                pack_apply_s: 0.10,
                load_s: 0.20,
                origin: "Compiled".into(),
                first_reconcile_s: Some(0.06),
                functions: None,
            }))
        );
        let compiled = "2026-12-04T23:40:28.050893Z  INFO wasmloop::dev: compiled 191 functions, reused 687 compiled before \
                        (0.8 MiB kept)";
        assert_eq!(parse_line(compiled), Some(DevLine::Compiled(CompiledFunctions { compiled: 191, reused: 687 })));
        let idle = "2026-12-01T21:27:53.087304Z  INFO wasmloop::dev: version 1 loaded 1.42 s after the start (build 0.98 s, \
                    pack + apply 0.18 s, load 0.25 s (Compiled)); no reconcile in 10 s (nothing to reconcile yet?)";
        let Some(DevLine::Version(v)) = parse_line(idle) else { panic!("not parsed: {idle}") };
        assert_eq!((v.version, v.after.as_str(), v.total_s, v.first_reconcile_s), (1, "the start", 1.42, None));
        let failed = "2026-12-01T21:00:00.000000Z  WARN wasmloop::dev: build failed; the last good version keeps running";
        assert!(matches!(parse_line(failed), Some(DevLine::Failed(m)) if m.starts_with("build failed")));
        let refused = "2026-12-01T21:00:00.000000Z  WARN wasmloop::dev: the host refused this version; the last good version keeps \
                       running: bad grants";
        assert!(matches!(parse_line(refused), Some(DevLine::Failed(m)) if m.starts_with("the host refused")));
        for ignored in [
            "2026-12-01T21:00:42.244930Z  INFO wasmloop::dev: building (release profile)",
            "2026-12-01T20:59:18.361495Z  INFO wasmloop::dev: built /x/welcome.wasm in 0.4 s (147 KB)",
            "2026-12-01T20:59:18.671805Z DEBUG wasmloop::reconcile: v1/Namespace/team-a: no actions result=\"success\"",
            "   Compiling welcome v0.1.0 (/x/welcome)",
            "2026-12-01T21:00:00.000000Z  INFO wasmloop::dev: version 3 reconciling soon",
        ] {
            assert_eq!(parse_line(ignored), None, "{ignored}");
        }
    }

    #[test]
    fn an_edit_renames_the_configmap_and_changes_the_message() {
        let original = r#"if cache::get::<Value>(&kinds::CONFIG_MAP, Some(name), "welcome-bench")?.is_some() {
            "metadata": {"name": "welcome-bench", "namespace": name},
            "data": {"message": format!("Welcome to {name}!")},
            .event(&ns, EventType::Normal, "Created", "created ConfigMap welcome-bench")"#;
        let krate = PluginCrate {
            lang: Lang::Rust,
            dir: PathBuf::new(),
            package: "welcome-bench".into(),
            sdk: PathBuf::new(),
            original: original.into(),
        };
        let edited = krate.edited(3).unwrap();
        assert!(edited.contains(r#"Some(name), "welcome-bench-e3")?"#), "{edited}");
        assert!(edited.contains(r#"{"name": "welcome-bench-e3", "namespace": name}"#), "{edited}");
        assert!(edited.contains(r#"format!("Welcome to {name}, edit 3!")"#), "{edited}");
        assert_eq!(krate.configmap(0), "welcome-bench");
        let krate = PluginCrate { original: "no such strings".into(), ..krate };
        assert!(krate.edited(1).is_err());
    }

    /// `wasmloop new`'s template of `lang` (host/src/cli/template), filled in as it fills it.
    fn template(lang: Lang, name: &str, type_name: &str) -> String {
        let text = match lang {
            Lang::Rust => include_str!("../../host/src/cli/template/src/lib.rs.tmpl"),
            Lang::Ts => include_str!("../../host/src/cli/template/ts/src/plugin.ts.tmpl"),
            Lang::Python => include_str!("../../host/src/cli/template/python/src/plugin.py.tmpl"),
        };
        text.replace("{{name}}", name).replace("{{type}}", type_name).replace("{{sdk}}", "/sdk")
    }

    /// Edit 3 of each language's real template: the ConfigMap looked up and created is renamed,
    /// the message names the edit, nothing else changes (the Event's text keeps the old name).
    #[test]
    fn an_edit_of_each_template_renames_the_configmap_and_changes_the_message() {
        for (lang, lookup, create, message) in [
            (
                Lang::Rust,
                r#"Some(name), "welcome-bench-e3")?"#,
                r#""metadata": {"name": "welcome-bench-e3", "namespace": name},"#,
                r#"format!("Welcome to {name}, edit 3!")"#,
            ),
            (
                Lang::Ts,
                r#"cache.get(kinds.CONFIG_MAP, name, "welcome-bench-e3"))"#,
                r#"metadata: { name: "welcome-bench-e3", namespace: name },"#,
                "message: `Welcome to ${name}, edit 3!`",
            ),
            (
                Lang::Python,
                r#"cache.get(kinds.CONFIG_MAP, name, "welcome-bench-e3") is not None"#,
                r#""metadata": {"name": "welcome-bench-e3", "namespace": name},"#,
                r#""message": f"Welcome to {name}, edit 3!""#,
            ),
        ] {
            let original = template(lang, "welcome-bench", "WelcomeBench");
            assert!(original.contains(r#".selector("welcome-bench=true")"#), "{lang:?}: {original}");
            let krate =
                PluginCrate { lang, dir: PathBuf::new(), package: "welcome-bench".into(), sdk: PathBuf::new(), original: original.clone() };
            let edited = krate.edited(3).unwrap();
            for want in [lookup, create, message] {
                assert!(edited.contains(want), "{lang:?}: no {want:?} in\n{edited}");
            }
            assert_eq!(edited.matches("welcome-bench-e3").count(), 2, "{lang:?}: {edited}");
            assert_eq!(edited.lines().count(), original.lines().count(), "{lang:?}");
            let changed = edited.lines().zip(original.lines()).filter(|(a, b)| a != b).count();
            assert_eq!(changed, 3, "{lang:?}: {edited}");
        }
    }
}
