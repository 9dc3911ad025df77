//! docs/plugin-guide.md is a test, and so is README.md's "Write a plugin" snippet.
//!
//! The guide's code fences say what they are (the comment at its top): ```` ```<lang> file=PATH ````
//! is a file of the crate, ```` ```sh ```` commands run in order, ```` ```sh eventually ````
//! commands retried until the host has caught up, ```` ```yaml output ```` part of what the sh
//! block before prints, ```` ```rust check ```` an illustration that must compile. This proves:
//!
//! - `wasmloop new welcome` generates exactly the guide's crate: the same files, byte for byte
//!   (the absolute `--sdk` path read as the guide's `../wasmloop/guest-sdk`); the commands it
//!   prints and those of README's "Grant and load it" are commands of the guide.
//! - The guide works as written: in a temporary directory outside the workspace, beside a
//!   `wasmloop` link to this repository, its files and commands, in document order, make one
//!   bash script (`bash -euo pipefail`, the built `wasmloop` and the control plane's `kubectl` first
//!   on PATH, no `CARGO_TARGET_DIR`/`RUSTFLAGS`) that creates, tests, builds, runs and loads the
//!   plugin; a host running as the deploy's ServiceAccount, with only the host's own role
//!   (deploy/rbac/host.yaml) and the RBAC the guide's `wasmloop pack --rbac` prints, then gives the
//!   labelled Namespace its ConfigMap (owned by it, written as the plugin's own ServiceAccount),
//!   records the Event, and reports the plugin `Loaded` — so the guide's RBAC is enough. The `rust check` fences compile as examples of the crate, and the crate,
//!   examples included, is rustfmt-clean.
//! - README's snippet works as written: its files in a crate with the guide's `Cargo.toml`
//!   renamed `hello`, and its commands (tests, component, `inspect`, `reconcile`).
//!
//! The guide hard-codes the plugin namespace `wasmloop`, which other test binaries use on the
//! shared control plane, so this binary starts a control plane of its own. Slow: cold cargo builds
//! of the guide's crate (native tests, then a size-optimised wasm32-wasip2 release with LTO); it
//! prints how long each phase and each of the guide's command blocks took. Needs
//! `target/debug/wasmloop` built and `scripts/control-plane.sh build` done.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;
use wasmloop_tests::cluster::{DEPLOY_NS, DEPLOY_SA, HostProcess, host_binary, kubectl_path};
use wasmloop_tests::{eventually, init_tracing, sa_kubeconfig_of, workspace_root};

const GUIDE: &str = "docs/plugin-guide.md";
const README: &str = "README.md";
/// What the guide's `Cargo.toml` says the SDK is, and where `wasmloop new` is told it is.
const GUIDE_SDK: &str = "../wasmloop/guest-sdk";
const WAIT: Duration = Duration::from_secs(90);
const STATUS_ANNOTATION: &str = "wasmloop.dev/status";

// ---------------------------------------------------------------------------------------------
// Code fences
// ---------------------------------------------------------------------------------------------

/// What a code fence is, from the words after its language.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// ```` ```<lang> file=PATH ````: a file of the crate, PATH relative to it.
    File(String),
    /// ```` ```<lang> file=PATH crate=NAME ````: a file of another crate of the guide (its
    /// CRD example), written in that crate's directory (the script must be there).
    CrateFile { krate: String, path: String },
    /// ```` ```sh ````: commands, run in order.
    Run,
    /// ```` ```sh eventually ````: commands that succeed once the host has caught up.
    Eventually,
    /// ```` ```<lang> output ````: part of what the sh block before it prints.
    Output,
    /// ```` ```rust check ````: an illustration that must compile.
    Check,
    /// No annotation (only ```` ```text ```` in the guide).
    Other,
}

#[derive(Debug, Clone)]
struct Fence {
    doc: &'static str,
    /// 1-based line of the opening fence.
    line: usize,
    lang: String,
    kind: Kind,
    text: String,
}

impl Fence {
    fn at(&self) -> String {
        format!("{}:{}", self.doc, self.line)
    }

    /// The first line, to name a block in timings and errors.
    fn first_line(&self) -> &str {
        self.text.lines().next().unwrap_or("")
    }
}

/// The fenced code blocks of a Markdown file: fences are lines starting with ```` ``` ```` at
/// column 0 (the guide's own explanation of them, indented in an HTML comment, is not one).
fn fences(doc: &'static str, markdown: &str) -> Result<Vec<Fence>> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        match &mut open {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    open = Some((i + 1, info.trim().to_string(), String::new()));
                }
            }
            Some((start, info, text)) => {
                if line.trim_end() == "```" {
                    out.push(fence(doc, *start, info, std::mem::take(text))?);
                    open = None;
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
    }
    if let Some((start, ..)) = open {
        bail!("{doc}:{start}: a code fence that is never closed");
    }
    Ok(out)
}

fn fence(doc: &'static str, line: usize, info: &str, text: String) -> Result<Fence> {
    let mut words = info.split_whitespace();
    let lang = words.next().unwrap_or("").to_string();
    let rest: Vec<&str> = words.collect();
    let kind = match (lang.as_str(), rest.as_slice()) {
        (_, [file]) if file.starts_with("file=") => Kind::File(file["file=".len()..].to_string()),
        (_, [file, krate]) if file.starts_with("file=") && krate.starts_with("crate=") => {
            Kind::CrateFile { krate: krate["crate=".len()..].to_string(), path: file["file=".len()..].to_string() }
        }
        ("sh", []) => Kind::Run,
        ("sh", ["eventually"]) => Kind::Eventually,
        ("rust", ["check"]) => Kind::Check,
        (_, ["output"]) => Kind::Output,
        (_, []) => Kind::Other,
        _ => bail!("{doc}:{line}: unknown code fence annotation {info:?} (the comment at the top of {GUIDE} lists them)"),
    };
    Ok(Fence { doc, line, lang, kind, text })
}

/// The guide's fences; each must say what it is (an unannotated one could rot unnoticed).
fn guide_fences() -> Result<Vec<Fence>> {
    let text = std::fs::read_to_string(workspace_root().join(GUIDE))?;
    let fences = fences(GUIDE, &text)?;
    for f in &fences {
        ensure!(
            f.kind != Kind::Other || f.lang == "text",
            "{}: a ```{} fence that does not say what it is: add file=PATH, output or check (the comment at the top of {GUIDE} says how), or make it ```text",
            f.at(),
            f.lang
        );
    }
    Ok(fences)
}

/// The fences of README.md's paragraph that starts with `marker` (up to the next paragraph that
/// starts with `**`).
fn readme_fences(marker: &str) -> Result<Vec<Fence>> {
    let text = std::fs::read_to_string(workspace_root().join(README))?;
    let lines: Vec<&str> = text.lines().collect();
    let start =
        lines.iter().position(|l| l.starts_with(marker)).with_context(|| format!("{README} has no paragraph starting with {marker}"))?;
    let end = lines[start + 1..].iter().position(|l| l.starts_with("**")).map_or(lines.len(), |n| start + 1 + n);
    Ok(fences(README, &text)?.into_iter().filter(|f| f.line > start && f.line <= end).collect())
}

/// The `file=` fences by path.
fn files(fences: &[Fence]) -> Result<BTreeMap<String, &Fence>> {
    let mut out = BTreeMap::new();
    for f in fences {
        if let Kind::File(path) = &f.kind
            && let Some(other) = out.insert(path.clone(), f)
        {
            bail!("{} and {} are both file={path}", other.at(), f.at());
        }
    }
    Ok(out)
}

/// The commands of sh blocks, one string each: `\`-continued lines joined, comments dropped,
/// blanks collapsed.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.find(" #").map_or(line, |i| &line[..i]);
        let line = if line.trim_start().starts_with('#') { "" } else { line.trim() };
        let (line, continued) = match line.strip_suffix('\\') {
            Some(l) => (l, true),
            None => (line, false),
        };
        current.push(' ');
        current.push_str(line);
        if !continued {
            let command = current.split_whitespace().collect::<Vec<_>>().join(" ");
            if !command.is_empty() {
                out.push(command);
            }
            current.clear();
        }
    }
    out
}

/// The commands of every sh block of `fences`.
fn sh_commands(fences: &[Fence]) -> Vec<String> {
    fences.iter().filter(|f| matches!(f.kind, Kind::Run | Kind::Eventually)).flat_map(|f| commands(&f.text)).collect()
}

// ---------------------------------------------------------------------------------------------
// A line diff, for files that differ
// ---------------------------------------------------------------------------------------------

/// `-` lines of `want` missing from `have`, `+` lines of `have` not in `want`, two lines of
/// context around each change.
fn diff(want: &str, have: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (want.lines().collect(), have.lines().collect());
    // Longest common subsequence lengths of the suffixes.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let near_change = |k: usize| ops[k.saturating_sub(2)..(k + 3).min(ops.len())].iter().any(|(op, _)| *op != ' ');
    let mut out = String::new();
    let mut skipped = false;
    for (k, (op, line)) in ops.iter().enumerate() {
        if near_change(k) {
            out.push_str(&format!("{op} {line}\n"));
            skipped = false;
        } else if !skipped {
            out.push_str("  ...\n");
            skipped = true;
        }
    }
    if want.ends_with('\n') != have.ends_with('\n') {
        out.push_str("(one ends with a newline, the other does not)\n");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The guide as a bash script
// ---------------------------------------------------------------------------------------------

/// A bash script made of fences in document order, with the document line each script line came
/// from (0 for the script's own lines).
struct Script {
    text: String,
    origin: Vec<usize>,
    /// Where `sh eventually` blocks are written, to be retried.
    blocks: PathBuf,
}

/// Markers the script prints: `@@fence <index> <time>` before each block, `@@end <time>`, and
/// `@@failed <script line>: <command>` from its ERR trap.
/// (Markers start with a newline: the output before may not end with one.)
const PREAMBLE: &str = r#"trap 'printf "\n@@failed %s: %s\n" "$LINENO" "$BASH_COMMAND" >&2' ERR
# `sh eventually` blocks: run until they succeed, at most 60 s.
guide_eventually() {
  local deadline=$((SECONDS + 60))
  until bash -euo pipefail "$1" >"$1.out" 2>&1; do
    if ((SECONDS >= deadline)); then cat "$1.out"; echo "still failing after 60 s" >&2; return 1; fi
    sleep 0.2
  done
  cat "$1.out"
}
"#;

impl Script {
    fn new(blocks: PathBuf) -> Self {
        let mut s = Self { text: String::new(), origin: Vec::new(), blocks };
        PREAMBLE.lines().for_each(|l| s.line(l, 0));
        s
    }

    fn marker(&mut self, index: usize, origin: usize) {
        self.line(&format!("printf '\\n@@fence {index} %s\\n' \"$EPOCHREALTIME\""), origin);
    }

    fn line(&mut self, line: &str, origin: usize) {
        self.text.push_str(line);
        self.text.push('\n');
        self.origin.push(origin);
    }

    /// A heredoc writing `text` to `path` (quoted delimiter: no expansion).
    fn heredoc(&mut self, path: &str, fence: &Fence) -> Result<()> {
        const EOF: &str = "GUIDE_EOF";
        ensure!(!fence.text.lines().any(|l| l == EOF), "{}: a line {EOF} would end the heredoc", fence.at());
        self.line(&format!("cat > '{path}' <<'{EOF}'"), fence.line);
        for (n, l) in fence.text.lines().enumerate() {
            self.line(l, fence.line + 1 + n);
        }
        self.line(EOF, fence.line);
        Ok(())
    }

    /// Fence number `index` of the script's fences.
    fn push(&mut self, index: usize, fence: &Fence) -> Result<()> {
        match &fence.kind {
            Kind::Run => {
                self.marker(index, fence.line);
                for (n, l) in fence.text.lines().enumerate() {
                    self.line(l, fence.line + 1 + n);
                }
            }
            Kind::Eventually => {
                let file = self.blocks.join(format!("{index}.sh"));
                let file = file.to_str().context("temporary path is not UTF-8")?.to_string();
                self.marker(index, fence.line);
                self.heredoc(&file, fence)?;
                self.line(&format!("guide_eventually '{file}'"), fence.line);
            }
            Kind::File(path) => {
                ensure!(
                    !path.starts_with('/') && !path.split('/').any(|p| p == "..") && !path.contains('\''),
                    "{}: file={path} must be a plain relative path",
                    fence.at()
                );
                self.marker(index, fence.line);
                self.line(&format!("mkdir -p \"$(dirname '{path}')\""), fence.line);
                self.heredoc(path, fence)?;
            }
            Kind::CrateFile { krate, path } => {
                ensure!(
                    !path.starts_with('/') && !path.split('/').any(|p| p == "..") && !path.contains('\'') && !krate.contains('\''),
                    "{}: file={path} crate={krate} must be a plain relative path and a crate name",
                    fence.at()
                );
                self.marker(index, fence.line);
                self.line(
                    &format!("[ \"$(basename \"$PWD\")\" = '{krate}' ] || {{ echo \"file={path} crate={krate}: the commands before are not in {krate}/\" >&2; false; }}"),
                    fence.line,
                );
                self.line(&format!("mkdir -p \"$(dirname '{path}')\""), fence.line);
                self.heredoc(path, fence)?;
            }
            Kind::Output | Kind::Check | Kind::Other => {}
        }
        Ok(())
    }

    fn finish(mut self) -> Self {
        self.line("printf '\\n@@end %s\\n' \"$EPOCHREALTIME\"", 0);
        self
    }
}

/// A script's run: its combined output and what its markers say.
struct Ran {
    output: String,
    /// (fence index, seconds since the epoch, byte offset of the marker in `output`).
    marks: Vec<(usize, f64, usize)>,
    end: Option<f64>,
    /// Script line and command of the failure, from the ERR trap.
    failed: Option<(usize, String)>,
}

impl Ran {
    fn parse(output: String) -> Self {
        let (mut marks, mut end, mut failed, mut offset) = (Vec::new(), None, None, 0);
        for line in output.split_inclusive('\n') {
            let time = |s: &str| s.trim().replace(',', ".").parse::<f64>().ok();
            if let Some(rest) = line.strip_prefix("@@fence ")
                && let Some((index, t)) = rest.split_once(' ')
                && let (Ok(index), Some(t)) = (index.parse(), time(t))
            {
                marks.push((index, t, offset));
            } else if let Some(t) = line.strip_prefix("@@end ") {
                end = time(t);
            } else if let Some(rest) = line.strip_prefix("@@failed ")
                && let Some((n, command)) = rest.split_once(": ")
            {
                failed = Some((n.parse().unwrap_or(0), command.trim_end().to_string()));
            }
            offset += line.len();
        }
        Self { output, marks, end, failed }
    }

    /// What fence `index` printed (up to the next marker).
    fn output_of(&self, index: usize) -> Option<&str> {
        let k = self.marks.iter().position(|m| m.0 == index)?;
        let to = self.marks.get(k + 1).map_or(self.output.len(), |m| m.2);
        Some(&self.output[self.marks[k].2..to])
    }

    /// How long each fence took (to the next marker, or the end).
    fn durations(&self) -> Vec<(usize, f64)> {
        let end = self.end.unwrap_or_else(|| self.marks.last().map_or(0.0, |m| m.1));
        self.marks.iter().enumerate().map(|(k, m)| (m.0, self.marks.get(k + 1).map_or(end, |n| n.1) - m.1)).collect()
    }
}

/// The environment the guide's commands run in: the built `wasmloop` and the control plane's
/// `kubectl` first on PATH, `KUBECONFIG` the admin's, nothing of cargo's test run (its target
/// dir, flags, package variables) nor of wasmloop's own settings.
struct Env {
    bin: PathBuf,
    kubeconfig: Option<PathBuf>,
}

impl Env {
    fn new(tmp: &Path) -> Result<Self> {
        let bin = tmp.join("bin");
        std::fs::create_dir_all(&bin)?;
        std::os::unix::fs::symlink(host_binary()?, bin.join("wasmloop"))?;
        std::os::unix::fs::symlink(kubectl_path()?, bin.join("kubectl"))?;
        Ok(Self { bin, kubeconfig: None })
    }

    fn command(&self, program: &str) -> Result<Command> {
        let mut cmd = Command::new(program);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if (k.starts_with("CARGO_") && k != "CARGO_HOME")
                || k.starts_with("WASMLOOP_")
                || ["CARGO", "RUSTFLAGS", "RUSTDOCFLAGS", "KUBECONFIG"].contains(&k.as_ref())
            {
                cmd.env_remove(k.as_ref());
            }
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        cmd.env("PATH", std::env::join_paths(std::iter::once(self.bin.clone()).chain(std::env::split_paths(&path)))?);
        if let Some(kc) = &self.kubeconfig {
            cmd.env("KUBECONFIG", kc);
        }
        Ok(cmd)
    }
}

/// Write `fences` as a script to `work/<name>.sh`, run it in `cwd` with `bash -euo pipefail`,
/// print each sh block's time; on failure, an error naming the document line of the failing
/// command, with the output of its block.
fn run_script(name: &str, fences: &[Fence], cwd: &Path, env: &Env, work: &Path) -> Result<Ran> {
    let blocks = work.join(format!("{name}-blocks"));
    std::fs::create_dir_all(&blocks)?;
    let mut script = Script::new(blocks);
    for (i, f) in fences.iter().enumerate() {
        script.push(i, f)?;
    }
    let script = script.finish();
    let path = work.join(format!("{name}.sh"));
    std::fs::write(&path, &script.text)?;
    let log = work.join(format!("{name}.out"));
    let file = std::fs::File::create(&log)?;
    let status = env
        .command("bash")?
        .arg("-euo")
        .arg("pipefail")
        .arg(&path)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .context("running bash")?;
    let ran = Ran::parse(String::from_utf8_lossy(&std::fs::read(&log)?).into_owned());
    for (index, secs) in ran.durations() {
        let f = &fences[index];
        if matches!(f.kind, Kind::Run | Kind::Eventually) {
            eprintln!("guide: {:>7.1} s  {}  {}", secs, f.at(), f.first_line());
        }
    }
    if !status.success() {
        let (line, command) = ran.failed.clone().unwrap_or((0, "(no command reported)".into()));
        let doc_line = script.origin.get(line.wrapping_sub(1)).copied().unwrap_or(0);
        let block = ran.marks.last().map(|m| &fences[m.0]);
        let output = ran.marks.last().map_or(ran.output.as_str(), |m| &ran.output[m.2..]);
        let tail: Vec<&str> = output.lines().collect();
        bail!(
            "{name}: `{command}` failed ({status}) at {}:{doc_line}, in the block at {}\n---- its output (last 80 lines) ----\n{}\n----",
            fences.first().map_or("?", |f| f.doc),
            block.map_or("?".into(), Fence::at),
            tail[tail.len().saturating_sub(80)..].join("\n")
        );
    }
    check_outputs(fences, &ran)?;
    Ok(ran)
}

/// Every `output` fence is part of what the sh block before it printed.
fn check_outputs(fences: &[Fence], ran: &Ran) -> Result<()> {
    for (i, f) in fences.iter().enumerate().filter(|(_, f)| f.kind == Kind::Output) {
        let block = (0..i).rev().find(|&j| matches!(fences[j].kind, Kind::Run | Kind::Eventually));
        let block = block.with_context(|| format!("{}: an output fence with no sh block before it", f.at()))?;
        let printed = ran.output_of(block).unwrap_or("");
        ensure!(
            printed.contains(&f.text),
            "{}: the sh block at {} no longer prints this; it printed:\n{printed}\n---- diff (- the guide, + printed) ----\n{}",
            f.at(),
            fences[block].at(),
            diff(&f.text, printed)
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A temporary directory outside the workspace, with `wasmloop` linked to this repository (the
/// guide's crate reaches the SDK at `../wasmloop/guest-sdk`).
fn work_dir() -> Result<tempfile::TempDir> {
    let tmp = tempfile::tempdir()?;
    let root = workspace_root().canonicalize()?;
    ensure!(!tmp.path().canonicalize()?.starts_with(&root), "the temporary directory {} is inside the workspace", tmp.path().display());
    std::os::unix::fs::symlink(&root, tmp.path().join("wasmloop"))?;
    Ok(tmp)
}

/// `wasmloop new welcome --dir <tmp>/new --sdk <repo>/guest-sdk`: its files (the SDK path read
/// as the guide's) and what it printed.
fn wasmloop_new(tmp: &Path) -> Result<(BTreeMap<String, String>, String)> {
    let dir = tmp.join("new");
    let sdk = workspace_root().join("guest-sdk");
    let printed = run(Command::new(host_binary()?).args(["new", "welcome", "--dir"]).arg(&dir).arg("--sdk").arg(&sdk), "wasmloop new")?;
    let absolute = sdk.canonicalize()?.to_str().context("SDK path is not UTF-8")?.to_string();
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.clone()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let rel = path.strip_prefix(&dir)?.to_str().context("non-UTF-8 file name")?.to_string();
                files.insert(rel, std::fs::read_to_string(&path)?.replace(&absolute, GUIDE_SDK));
            }
        }
    }
    Ok((files, printed))
}

/// A control plane of this test's own (`scripts/control-plane.sh start`, stopped on drop).
struct OwnControlPlane {
    dir: PathBuf,
}

impl OwnControlPlane {
    fn start() -> Result<Self> {
        let out =
            Command::new(workspace_root().join("scripts/control-plane.sh")).arg("start").output().context("control-plane.sh start")?;
        ensure!(
            out.status.success(),
            "control-plane.sh start (built? scripts/control-plane.sh build): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(Self { dir: PathBuf::from(String::from_utf8(out.stdout)?.trim()) })
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(workspace_root().join("scripts/control-plane.sh")).arg("stop").arg(&self.dir).output();
    }
}

/// The host as deployed, before the guide: namespace `wasmloop`, the deploy's ServiceAccount
/// with only the host's own role (deploy/rbac/host.yaml, nothing of deploy/rbac/plugins.yaml),
/// and `wasmloop run --plugin-namespace wasmloop` with that ServiceAccount's token.
async fn deployed_host(kubeconfig: &Path, admin: &Client, dir: &Path) -> Result<HostProcess> {
    run(
        Command::new(kubectl_path()?).arg("--kubeconfig").arg(kubeconfig).current_dir(workspace_root()).args([
            "apply",
            "-f",
            "deploy/namespace.yaml",
            "-f",
            "deploy/serviceaccount.yaml",
            "-f",
            "deploy/rbac/host.yaml",
        ]),
        "kubectl apply of the host's namespace, ServiceAccount and role",
    )?;
    let sa = sa_kubeconfig_of(kubeconfig, admin, DEPLOY_NS, DEPLOY_SA, dir).await?;
    let host = HostProcess::start("guide", &sa, dir, &["--plugin-namespace", DEPLOY_NS]).await?;
    eventually("the host to be ready", WAIT, || async { Ok((host.get("/readyz").await?.0 == 200).then_some(())) }).await?;
    Ok(host)
}

// ---------------------------------------------------------------------------------------------
// What the guide says happens in the cluster
// ---------------------------------------------------------------------------------------------

/// ConfigMap team-a/welcome with the welcome message, controlled by the Namespace.
async fn welcome_config_map(admin: &Client) -> Result<()> {
    let uid = Api::<Namespace>::all(admin.clone()).get("team-a").await?.metadata.uid.context("Namespace without a uid")?;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "team-a");
    eventually("ConfigMap team-a/welcome, owned by the Namespace", WAIT, || async {
        let Some(cm) = cms.get_opt("welcome").await? else { return Ok(None) };
        let message = cm.data.as_ref().and_then(|d| d.get("message")).cloned();
        ensure!(message.as_deref() == Some("Welcome to team-a!"), "data.message is {message:?}");
        let owners = cm.metadata.owner_references.unwrap_or_default();
        let owned = owners.iter().any(|o| o.kind == "Namespace" && o.name == "team-a" && o.uid == uid && o.controller == Some(true));
        ensure!(owned, "not controlled by Namespace team-a ({uid}): {owners:?}");
        Ok(Some(()))
    })
    .await
}

/// The plugin ConfigMap's status annotation says `Loaded`.
async fn plugin_loaded(admin: &Client) -> Result<()> {
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), DEPLOY_NS);
    eventually("the welcome plugin ConfigMap's status to say Loaded", WAIT, || async {
        let cm = cms.get("welcome").await?;
        let status = cm.metadata.annotations.unwrap_or_default().get(STATUS_ANNOTATION).cloned().unwrap_or_default();
        let state = serde_json::from_str::<Value>(&status).ok().and_then(|s| s["state"].as_str().map(str::to_string));
        ensure!(state.as_deref() != Some("Rejected"), "the plugin was rejected: {status}");
        Ok((state.as_deref() == Some("Loaded")).then_some(()))
    })
    .await
}

/// The plugin's Event on the Namespace, in `default` (`kube-system` on API servers before 1.21).
async fn welcome_event(admin: &Client) -> Result<()> {
    let events = Api::<Event>::all(admin.clone());
    eventually("the Event Created on Namespace team-a, in default or kube-system", WAIT, || async {
        let mut seen = Vec::new();
        for e in events.list(&ListParams::default()).await?.items {
            let (ns, reason, regarding) =
                (e.metadata.namespace.unwrap_or_default(), e.reason.unwrap_or_default(), e.regarding.unwrap_or_default());
            let (kind, name) = (regarding.kind.unwrap_or_default(), regarding.name.unwrap_or_default());
            if ["default", "kube-system"].contains(&ns.as_str()) && reason == "Created" && kind == "Namespace" && name == "team-a" {
                return Ok(Some(()));
            }
            seen.push(format!("{ns}: {reason} on {kind} {name}"));
        }
        bail!("Events so far: {seen:?}")
    })
    .await
}

/// The host never hit an RBAC denial before `until` (seconds since the epoch: when the guide's
/// uninstall deletes greeter's RBAC, a watch of it may be denied before the plugin is stopped):
/// the RBAC `wasmloop pack --rbac` printed for the guide's plugins was enough.
fn no_denials(host: &HostProcess, until: Option<f64>) -> Result<()> {
    let before = |l: &&str| {
        let at = serde_json::from_str::<Value>(l)
            .ok()
            .and_then(|v| v["timestamp"].as_str().and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok()));
        match (until, at) {
            (Some(until), Some(at)) => (at.as_millisecond() as f64) / 1000.0 < until,
            _ => true,
        }
    };
    let denied: Vec<String> =
        host.log_text().lines().filter(before).filter(|l| l.to_ascii_lowercase().contains("forbidden")).map(str::to_string).collect();
    ensure!(denied.is_empty(), "the host was denied by RBAC ({} lines), e.g.:\n{}", denied.len(), denied[..denied.len().min(5)].join("\n"));
    Ok(())
}

/// When the guide's uninstall of `greeter` began (the sh block with `kubectl delete -k .`), in
/// seconds since the epoch.
fn uninstall_began(fences: &[Fence], ran: &Ran) -> Option<f64> {
    let index = fences.iter().position(|f| f.kind == Kind::Run && commands(&f.text).iter().any(|c| c == "kubectl delete -k ."))?;
    ran.marks.iter().find(|m| m.0 == index).map(|m| m.1)
}

/// Section 9's uninstall: the host removed greeter, its plugin and payload ConfigMaps are gone
/// (none re-created to report on), it was never refused, and the host logged no ERROR.
async fn greeter_uninstalled(admin: &Client, host: &HostProcess) -> Result<()> {
    eventually("the host to log greeter's removal", WAIT, || async {
        Ok(host.log_lines().iter().any(|l| l["message"] == "plugin removed" && l["plugin"] == "greeter").then_some(()))
    })
    .await?;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), DEPLOY_NS);
    ensure!(cms.get_opt("greeter").await?.is_none(), "the greeter plugin ConfigMap is back after the uninstall");
    let payloads = cms.list(&ListParams::default().labels("wasmloop.dev/plugin-name=greeter")).await?.items;
    ensure!(payloads.is_empty(), "greeter payloads left: {:?}", payloads.iter().map(|c| c.metadata.name.clone()).collect::<Vec<_>>());
    let events = Api::<Event>::namespaced(admin.clone(), DEPLOY_NS).list(&ListParams::default()).await?.items;
    let refused: Vec<_> = events.iter().filter(|e| e.reason.as_deref() == Some("PluginRejected")).map(|e| e.note.clone()).collect();
    ensure!(refused.is_empty(), "PluginRejected Events: {refused:?}");
    let errors: Vec<String> = host.log_lines().into_iter().filter(|l| l["level"] == "ERROR").map(|l| l.to_string()).collect();
    ensure!(errors.is_empty(), "the host logged errors:\n{}", errors.join("\n"));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Crates
// ---------------------------------------------------------------------------------------------

/// The `rust check` fences as examples of the crate in `krate`: they build, and the crate,
/// examples included, is rustfmt-clean.
fn checks_compile_and_are_formatted(krate: &Path, fences: &[Fence], env: &Env) -> Result<()> {
    let examples = krate.join("examples");
    std::fs::create_dir_all(&examples)?;
    for f in fences.iter().filter(|f| f.kind == Kind::Check) {
        std::fs::write(
            examples.join(format!("guide_check_{}.rs", f.line)),
            format!("#![allow(dead_code)]\n\n{}\nfn main() {{}}\n", f.text),
        )?;
    }
    run(
        env.command("cargo")?.current_dir(krate).args(["build", "--examples"]),
        "cargo build --examples (examples/guide_check_<line>.rs: the guide's `rust check` fence at that line)",
    )?;
    run(
        env.command("cargo")?.current_dir(krate).args(["fmt", "--", "--check"]),
        "cargo fmt --check in the guide's crate (examples/guide_check_<line>.rs: the `rust check` fence at that line)",
    )?;
    Ok(())
}

/// README's "Write a plugin" snippet, as written, in `<tmp>/hello`: the guide's `Cargo.toml`
/// named `hello`, the snippet's files, its commands. Its `target` links to the guide crate's,
/// so the dependencies are not built twice.
fn readme_snippet_works(tmp: &Path, guide: &[Fence], env: &Env) -> Result<()> {
    let fences = readme_fences("**Write a plugin**")?;
    ensure!(files(&fences)?.contains_key("src/lib.rs"), "{README}'s snippet has no file=src/lib.rs fence");
    ensure!(fences.iter().any(|f| f.kind == Kind::Run), "{README}'s snippet has no sh fence");
    let cargo_toml = files(guide)?.get("Cargo.toml").context("the guide shows no Cargo.toml")?.text.clone();
    let renamed = cargo_toml.replacen("name = \"welcome\"\n", "name = \"hello\"\n", 1);
    ensure!(renamed != cargo_toml, "the guide's Cargo.toml has no `name = \"welcome\"` line");
    let krate = tmp.join("hello");
    std::fs::create_dir_all(&krate)?;
    std::fs::write(krate.join("Cargo.toml"), renamed)?;
    std::os::unix::fs::symlink(tmp.join("welcome/target"), krate.join("target"))?;
    run_script("readme", &fences, &krate, env, tmp)?;
    run(env.command("cargo")?.current_dir(&krate).args(["fmt", "--", "--check"]), "cargo fmt --check of README's snippet")?;
    Ok(())
}

/// Phases and how long each took.
struct Clock(Instant, Vec<(String, Duration)>);

impl Clock {
    fn new() -> Self {
        Self(Instant::now(), Vec::new())
    }

    fn lap(&mut self, what: &str) {
        let took = self.0.elapsed();
        eprintln!("guide: {:>7.1} s  phase: {what}", took.as_secs_f64());
        self.1.push((what.to_string(), took));
        self.0 = Instant::now();
    }

    fn report(&self) {
        let total: Duration = self.1.iter().map(|p| p.1).sum();
        eprintln!("guide: phases");
        for (what, took) in &self.1 {
            eprintln!("  {:>7.1} s  {what}", took.as_secs_f64());
        }
        eprintln!("  {:>7.1} s  total", total.as_secs_f64());
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// `wasmloop new welcome` generates exactly the files the guide shows, and prints commands the
/// guide runs; README's "Grant and load it" commands are the guide's too.
#[test]
fn wasmloop_new_generates_the_guides_crate() -> Result<()> {
    let guide = guide_fences()?;
    let shown = files(&guide)?;
    let tmp = work_dir()?;
    let (generated, printed) = wasmloop_new(tmp.path())?;
    let mut problems = Vec::new();
    for (path, fence) in &shown {
        match generated.get(path) {
            None => problems.push(format!("{}: file={path} is not generated by `wasmloop new`", fence.at())),
            Some(text) if *text != fence.text => problems.push(format!(
                "{path} differs: --- {} (file={path}), +++ `wasmloop new welcome`:\n{}",
                fence.at(),
                diff(&fence.text, text)
            )),
            Some(_) => {}
        }
    }
    for path in generated.keys().filter(|p| !shown.contains_key(*p)) {
        problems.push(format!("`wasmloop new` generates {path}, which {GUIDE} does not show"));
    }
    ensure!(problems.is_empty(), "the guide's crate and `wasmloop new`'s differ:\n\n{}", problems.join("\n\n"));

    let guide_commands = sh_commands(&guide);
    let printed: Vec<String> = printed.lines().skip_while(|l| !l.is_empty()).flat_map(commands).filter(|c| !c.starts_with("cd ")).collect();
    let readme = sh_commands(&readme_fences("**Grant and load it**")?);
    ensure!(
        !printed.is_empty() && !readme.is_empty(),
        "no commands printed by `wasmloop new`, or none in {README}'s \"Grant and load it\""
    );
    for c in printed.iter().chain(&readme) {
        ensure!(guide_commands.contains(c), "`{c}` (printed by `wasmloop new`, or in {README}) is not a command of {GUIDE}");
    }
    eprintln!(
        "guide: `wasmloop new welcome` = the guide's {} files: {}",
        shown.len(),
        shown.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

/// The guide, as written, from `cargo new` to the ConfigMap in the labelled Namespace; then its
/// `rust check` fences and README's snippet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guide_and_the_readme_snippet_work_as_written() -> Result<()> {
    init_tracing();
    let mut clock = Clock::new();
    let guide = guide_fences()?;
    let tmp = work_dir()?;
    let mut env = Env::new(tmp.path())?;
    let cp = OwnControlPlane::start()?;
    let kubeconfig = cp.kubeconfig();
    let (admin, _) = wasmloop::client::build(Some(kubeconfig.to_str().context("kubeconfig path is not UTF-8")?)).await?;
    let host = deployed_host(&kubeconfig, &admin, tmp.path()).await?;
    env.kubeconfig = Some(kubeconfig);
    clock.lap("control plane, the host as the deploy's ServiceAccount");

    // The guide's commands take minutes; nothing of this process runs meanwhile.
    let ran = tokio::task::block_in_place(|| run_script("guide", &guide, tmp.path(), &env, tmp.path()))?;
    clock.lap(&format!(
        "{GUIDE}'s commands (cargo new → cargo test → component → reconcile → pack → kubectl; greeter installed, used, uninstalled)"
    ));

    let checked = async {
        welcome_config_map(&admin).await?;
        plugin_loaded(&admin).await?;
        welcome_event(&admin).await?;
        greeter_uninstalled(&admin, &host).await?;
        no_denials(&host, uninstall_began(&guide, &ran))
    };
    checked.await.map_err(|e| anyhow::anyhow!("{e:#}\n---- the host's log (last 40 lines) ----\n{}", host.log_tail(40)))?;
    drop(host);
    clock.lap("the ConfigMap, the Event and the plugin's status checked");

    tokio::task::block_in_place(|| checks_compile_and_are_formatted(&tmp.path().join("welcome"), &guide, &env))?;
    clock.lap("`rust check` fences compiled, the crate rustfmt-clean");

    tokio::task::block_in_place(|| readme_snippet_works(tmp.path(), &guide, &env))?;
    clock.lap(&format!("{README}'s snippet (cargo test, component, inspect, reconcile)"));
    clock.report();
    Ok(())
}

/// The guide's sections on other languages (10 and 11): the plugins and the SDKs they use.
const OTHER_LANGUAGES: [(&str, &str, &str); 2] = [("welcome-ts", "ts", "sdk/js"), ("welcome-py", "python", "sdk/python")];

/// The fences from the heading `## 10.` on: the TypeScript and Python sections.
fn other_language_fences(guide: &[Fence]) -> Result<Vec<Fence>> {
    let text = std::fs::read_to_string(workspace_root().join(GUIDE))?;
    let start = text.lines().position(|l| l.starts_with("## 10.")).context("the guide has no section 10")? + 1;
    Ok(guide.iter().filter(|f| f.line > start).cloned().collect())
}

/// `wasmloop new welcome-ts --lang ts` and `wasmloop new welcome-py --lang python` generate
/// exactly the files sections 10 and 11 show (the SDK's absolute path read as the guide's
/// `../wasmloop/sdk/...`; the fixtures and the manifest, the same as `welcome`'s, are not shown).
#[test]
fn wasmloop_new_generates_the_guides_other_languages() -> Result<()> {
    let guide = guide_fences()?;
    let tmp = work_dir()?;
    let mut problems = Vec::new();
    for (krate, lang, sdk) in OTHER_LANGUAGES {
        let dir = tmp.path().join(krate);
        let sdk_path = workspace_root().join(sdk).canonicalize()?;
        run(
            Command::new(host_binary()?).args(["new", krate, "--lang", lang, "--dir"]).arg(&dir).arg("--sdk").arg(&sdk_path),
            "wasmloop new",
        )?;
        let absolute = sdk_path.to_str().context("SDK path is not UTF-8")?;
        let shown: BTreeMap<&str, &Fence> = guide
            .iter()
            .filter_map(|f| match &f.kind {
                Kind::CrateFile { krate: k, path } if k == krate => Some((path.as_str(), f)),
                _ => None,
            })
            .collect();
        ensure!(!shown.is_empty(), "the guide shows no file of {krate}");
        for (path, fence) in &shown {
            match std::fs::read_to_string(dir.join(path)) {
                Err(_) => {
                    problems.push(format!("{}: file={path} crate={krate} is not generated by `wasmloop new --lang {lang}`", fence.at()));
                }
                Ok(text) => {
                    let text = text.replace(absolute, &format!("../wasmloop/{sdk}"));
                    if text != fence.text {
                        problems.push(format!(
                            "{krate}/{path} differs: --- {}, +++ `wasmloop new`:\n{}",
                            fence.at(),
                            diff(&fence.text, &text)
                        ));
                    }
                }
            }
        }
        let mut pending = vec![dir.clone()];
        while let Some(d) = pending.pop() {
            for entry in std::fs::read_dir(&d)? {
                let path = entry?.path();
                let rel = path.strip_prefix(&dir)?.to_str().context("non-UTF-8 file name")?.to_string();
                if path.is_dir() {
                    pending.push(path);
                } else if !shown.contains_key(rel.as_str()) && rel != "fixtures/namespaces.yaml" && rel != format!("{krate}.plugin.yaml") {
                    problems.push(format!("`wasmloop new --lang {lang}` generates {krate}/{rel}, which {GUIDE} does not show"));
                }
            }
        }
    }
    ensure!(problems.is_empty(), "the guide's plugins and `wasmloop new --lang`'s differ:\n\n{}", problems.join("\n\n"));
    Ok(())
}

/// Sections 10 and 11 as written, offline (no cluster): create, test and build the TypeScript and
/// Python plugins with their SDKs, run them in `wasmloop reconcile`, pack the Python one (split
/// over several payload ConfigMaps). Needs node/npm and python3 (scripts/setup.sh) and the
/// registries' packages (npm's and pip's caches make it quick after the first run).
#[test]
fn the_other_languages_work_as_written() -> Result<()> {
    let guide = guide_fences()?;
    let fences = other_language_fences(&guide)?;
    let tmp = work_dir()?;
    let env = Env::new(tmp.path())?;
    // The sections start with `cd ..` from section 9's crate.
    let start = tmp.path().join("greeter");
    std::fs::create_dir_all(&start)?;
    let started = Instant::now();
    run_script("other-languages", &fences, &start, &env, tmp.path())?;
    for (krate, ..) in OTHER_LANGUAGES {
        ensure!(tmp.path().join(krate).join("build/plugin.wasm").exists(), "{krate}: no component built");
    }
    eprintln!("guide: sections 10 and 11 ran in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

#[test]
fn fences_commands_and_diffs_are_read_as_documented() -> Result<()> {
    let md = "text\n```sh\na \\\n  --b # comment\n# only a comment\nc\n```\n  ```rust check\n```rust check\nfn f() {}\n```\n```yaml file=x/y.yaml\nk: v\n```\n";
    let fs = fences(GUIDE, md)?;
    let kinds: Vec<&Kind> = fs.iter().map(|f| &f.kind).collect();
    assert_eq!(kinds, [&Kind::Run, &Kind::Check, &Kind::File("x/y.yaml".into())]);
    assert_eq!((fs[1].line, fs[1].text.as_str()), (9, "fn f() {}\n"));
    assert_eq!(commands(&fs[0].text), ["a --b", "c"]);
    assert!(fences(GUIDE, "```sh\nx\n").unwrap_err().to_string().contains(":1: a code fence that is never closed"));
    assert!(fences(GUIDE, "```sh later\nx\n```\n").is_err());
    assert_eq!(diff("a\nb\nc\n", "a\nB\nc\n"), "  a\n- b\n+ B\n  c\n");
    Ok(())
}
