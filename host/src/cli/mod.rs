//! Command-line interface. `anyhow` lives here, at the binary's edge, and nowhere else.

mod dev;
mod diff;
mod new;
mod oci;
mod offline;
mod optimize;
mod pack;
mod replay;
mod run;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use wasmloop::plugin::{ByteSize, Compiled, EngineLimits, LoadLimits, PluginEngine, PrecompiledCache, limits};

#[derive(Parser, Debug)]
#[command(name = "wasmloop", version, about = "A Kubernetes controller host that runs reconcile logic as sandboxed Wasm plugins")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the host: load plugins from ConfigMaps and reconcile.
    Run(Box<run::RunArgs>),
    /// Run a plugin once against objects from files, without a cluster; print its actions as YAML.
    Reconcile(offline::ReconcileArgs),
    /// Run a recorded reconcile again with exactly its inputs; print the outcome and how it
    /// differs from the recorded one (exit 0: the same, 1: different, 2: cannot replay).
    Replay(replay::ReplayArgs),
    /// Describe a plugin: name, version, contract version, size, exports, metadata.
    Inspect {
        /// The plugin component (.wasm), or an OCI artifact `oci://REGISTRY/REPO@sha256:…|:TAG`
        /// (digest, sizes, media types, signatures found).
        plugin: PathBuf,
        #[command(flatten)]
        load: LoadArgs,
        #[command(flatten)]
        registry: oci::RegistryArgs,
    },
    /// Push a plugin component as a Wasm OCI artifact (config application/vnd.wasm.config.v0+json,
    /// one application/wasm layer); prints `oci://…@sha256:…` for the manifest's `oci.ref`.
    Push(oci::PushArgs),
    /// Sign an OCI artifact as cosign does (key-based: a simple-signing payload at tag
    /// `sha256-<hex>.sig`), with a PEM PKCS#8 ECDSA P-256 key.
    Sign(oci::SignArgs),
    /// Create a plugin crate: a reconciler, a native test, fixtures and the admin's manifest.
    New(new::NewArgs),
    /// Develop a plugin against a cluster: on every save, build, pack, apply, load into a host
    /// in this process, and show its reconciles, actions and log lines.
    Dev(dev::DevArgs),
    /// Print a plugin as ConfigMaps for `kubectl apply -f -`: an immutable payload (zstd-compressed
    /// wasm) and the plugin ConfigMap (manifest + reference by digest); `--inline`: one ConfigMap.
    Pack(pack::PackArgs),
    /// Make a plugin component smaller: Binaryen's `wasm-opt` on its core modules, checked to be
    /// the same plugin to the host (imports, exports, metadata) before it is written.
    Optimize(optimize::OptimizeArgs),
    /// Show how candidate versions (`shadowOf:`) compared with the serving ones, from a running
    /// host's `/shadow`: counts per plugin, and per key the two outcomes side by side.
    Diff(diff::DiffArgs),
    /// Show every plugin ConfigMap: its state, serving and pending digest and reason, its shards'
    /// owners, and from the hosts' metrics its reconcile rate, errors and queue (also `kubectl
    /// wasmloop status`, with a `kubectl-wasmloop` link to this binary on PATH).
    Status(status::StatusArgs),
}

/// What the host accepts of a plugin at load ([`wasmloop::plugin::LoadLimits`] and the engine's
/// core instances per component): the same flags on `run`, `inspect`, `reconcile` and `dev`, so
/// a plugin that loads offline loads in the host configured the same way.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// Largest plugin component (decompressed) the host compiles (at most 64Mi).
    #[arg(long, env = "WASMLOOP_MAX_COMPONENT_SIZE", default_value_t = limits::DEFAULT_MAX_COMPONENT_SIZE, value_parser = parse_size)]
    pub max_component_size: ByteSize,
    /// Core Wasm instances one component may have (a componentize-py plugin has ~30).
    #[arg(long, env = "WASMLOOP_MAX_CORE_INSTANCES_PER_COMPONENT", default_value_t = limits::DEFAULT_MAX_CORE_INSTANCES_PER_COMPONENT)]
    pub max_core_instances_per_component: u32,
    /// How long compiling and validating one plugin may take before it is refused (default 2m).
    #[arg(long, env = "WASMLOOP_COMPILE_BUDGET", value_parser = parse_duration)]
    pub compile_budget: Option<Duration>,
    /// Directory of precompiled plugins, shared by `run`, `inspect`, `reconcile` and `pack`: the
    /// same bytes are compiled once (default: ~/.cache/wasmloop/precompiled).
    #[arg(long, env = "WASMLOOP_PRECOMPILED_DIR")]
    pub precompiled_dir: Option<PathBuf>,
    /// Do not read or keep precompiled plugins on disk.
    #[arg(long, env = "WASMLOOP_NO_PRECOMPILED_CACHE")]
    pub no_precompiled_cache: bool,
}

impl LoadArgs {
    /// The load limits these flags set (checked).
    pub fn load_limits(&self) -> anyhow::Result<LoadLimits> {
        let l = LoadLimits {
            max_component_size: self.max_component_size,
            compile_budget: self.compile_budget.unwrap_or(limits::DEFAULT_COMPILE_BUDGET),
        };
        l.validate()?;
        Ok(l)
    }

    /// The engine limits these flags set, the rest default.
    pub fn engine_limits(&self) -> EngineLimits {
        EngineLimits { max_core_instances_per_component: self.max_core_instances_per_component, ..EngineLimits::default() }
    }

    /// The plugin component at `path`, read only if it is within `--max-component-size` (a
    /// larger file is refused by its size, naming the flag, before it is read).
    pub fn read_plugin(&self, path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
        let limits = self.load_limits()?;
        match wasmloop::bounded::read_file(path, limits.max_component_size.bytes()) {
            Ok(bytes) => Ok(bytes),
            Err(wasmloop::bounded::Error::FileTooLarge { size, .. }) => {
                let size = size.unwrap_or(limits.max_component_size.bytes().saturating_add(1));
                Err(anyhow::anyhow!("{}: {}", path.display(), limits::Error::ComponentTooLarge { size, limit: limits.max_component_size }))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// An engine for one call at a time ([`EngineLimits::offline`]), for a plugin whose
    /// `limits.memory` is `max_memory`, with these flags. **Blocking** (creates the engine).
    pub fn engine(&self, max_memory: ByteSize) -> anyhow::Result<PluginEngine> {
        Ok(PluginEngine::with_limits(EngineLimits::offline(max_memory, self.max_core_instances_per_component))?)
    }

    /// Where precompiled plugins are kept (`None`: nowhere).
    pub fn precompiled_dir(&self) -> Option<PathBuf> {
        (!self.no_precompiled_cache).then(|| self.precompiled_dir.clone().unwrap_or_else(default_precompiled_dir))
    }

    /// `bytes` compiled, or deserialised from the precompiled cache (where it is then stored),
    /// as the host does: a plugin inspected or run offline is not compiled again by the next
    /// command, nor by a host sharing the directory. **Blocking**.
    pub fn compile(&self, engine: &PluginEngine, bytes: &[u8]) -> anyhow::Result<Compiled> {
        compile_cached(engine, bytes, self.precompiled_dir())
    }
}

/// `bytes` deserialised from the precompiled cache in `dir`, or compiled and stored there
/// (`None`, or a directory that cannot be used: compiled). **Blocking**.
pub(crate) fn compile_cached(engine: &PluginEngine, bytes: &[u8], dir: Option<PathBuf>) -> anyhow::Result<Compiled> {
    let cache = dir.and_then(|d| PrecompiledCache::new(d).ok());
    if let Some(compiled) = cache.as_ref().and_then(|c| c.cached(engine, bytes).ok().flatten()) {
        return Ok(compiled);
    }
    let compiled = engine.compile_timed(bytes)?;
    if let Some(cache) = &cache {
        cache.store(engine, bytes, &compiled.component);
    }
    Ok(compiled)
}

/// `$XDG_CACHE_HOME/wasmloop/precompiled`, else `~/.cache/wasmloop/precompiled`.
pub(crate) fn default_precompiled_dir() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME").or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").into_os_string()))
    {
        Some(base) => PathBuf::from(base).join("wasmloop/precompiled"),
        None => std::env::temp_dir().join("wasmloop-precompiled"),
    }
}

/// The body of `GET url` (plain HTTP: a host's `--listen`, a port-forward); an error naming the
/// URL unless the answer is a success.
pub(crate) async fn http_get_text(url: &str) -> anyhow::Result<String> {
    use http_body_util::{BodyExt, Empty};
    let uri: hyper::Uri = url.parse().with_context(|| format!("{url}: not a URL"))?;
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Empty<hyper::body::Bytes>>();
    let response = client.get(uri).await.with_context(|| format!("GET {url}"))?;
    let status = response.status();
    let body = response.into_body().collect().await.with_context(|| format!("reading {url}"))?.to_bytes();
    let text = String::from_utf8_lossy(&body).into_owned();
    anyhow::ensure!(status.is_success(), "GET {url}: {status}: {text}");
    Ok(text)
}

pub(crate) fn parse_size(s: &str) -> Result<ByteSize, wasmloop::plugin::limits::Error> {
    ByteSize::parse(s)
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, wasmloop::duration::Error> {
    wasmloop::duration::parse(s)
}

/// Log output format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube_client=warn,kube_runtime=warn,wasmtime=warn,cranelift=warn".into());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
}

pub fn main(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            rt.block_on(run::run(*args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Reconcile(args) => offline::run(args),
        Command::Replay(args) => Ok(replay::run(args)),
        Command::Inspect { plugin, registry, .. } if plugin.to_str().is_some_and(|p| p.starts_with(wasmloop::oci::SCHEME)) => {
            oci::inspect(plugin.to_str().unwrap_or_default(), &registry)
        }
        Command::Inspect { plugin, load, .. } => {
            init_tracing(LogFormat::Text);
            let bytes = load.read_plugin(&plugin)?;
            let load_limits = load.load_limits()?;
            let engine = load.engine(wasmloop::plugin::Limits::default().memory)?;
            let compiled = load.compile(&engine, &bytes).with_context(|| format!("inspecting {}", plugin.display()))?;
            let inspection =
                wasmloop::plugin::inspect_compiled(&engine, compiled).with_context(|| format!("inspecting {}", plugin.display()))?;
            print!("{inspection}");
            if let Err(e) = load_limits.check_compile_time(inspection.compile_time) {
                eprintln!("wasmloop inspect: WARNING: the host would refuse it: {e}");
                return Ok(ExitCode::FAILURE);
            }
            Ok(if inspection.compatible { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Pack(args) => pack::run(args),
        Command::Push(args) => oci::push(args),
        Command::Sign(args) => oci::sign(args),
        Command::Diff(args) => diff::run(args),
        Command::Status(args) => status::run(args),
        Command::Optimize(args) => optimize::run(args),
        Command::New(args) => new::run(args).map(|()| ExitCode::SUCCESS),
        Command::Dev(args) => dev::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    struct Probe {
        #[command(flatten)]
        load: LoadArgs,
    }

    #[test]
    fn load_flags_default_to_the_limits_defaults() {
        let p = Probe::try_parse_from(["probe"]).unwrap();
        assert_eq!(p.load.load_limits().unwrap(), LoadLimits::default());
        assert_eq!(p.load.engine_limits(), EngineLimits::default());
        let p = Probe::try_parse_from([
            "probe",
            "--max-component-size",
            "20Mi",
            "--compile-budget",
            "5s",
            "--max-core-instances-per-component",
            "40",
        ])
        .unwrap();
        let l = p.load.load_limits().unwrap();
        assert_eq!((l.max_component_size, l.compile_budget), (ByteSize::mib(20), Duration::from_secs(5)));
        assert_eq!(p.load.engine_limits().max_core_instances_per_component, 40);
        let p = Probe::try_parse_from(["probe", "--max-component-size", "100Mi"]).unwrap();
        assert!(p.load.load_limits().is_err(), "over the hard cap");
    }
}
