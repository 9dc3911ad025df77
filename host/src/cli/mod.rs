//! Command-line interface. `anyhow` lives here, at the binary's edge, and nowhere else.

mod new;
mod offline;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(name = "wasmloop", version, about = "A Kubernetes controller host that runs reconcile logic as sandboxed Wasm plugins")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the host: load plugins from ConfigMaps and reconcile.
    Run(run::RunArgs),
    /// Run a plugin once against objects from files, without a cluster; print its actions as YAML.
    Reconcile(offline::ReconcileArgs),
    /// Describe a plugin: name, version, contract version, size, exports, metadata.
    Inspect {
        /// The plugin component (.wasm).
        plugin: PathBuf,
    },
    /// Create a plugin crate: a reconciler, a native test, fixtures and the admin's manifest.
    New(new::NewArgs),
    /// Print a plugin as ConfigMaps for `kubectl apply -f -`: an immutable payload (zstd-compressed
    /// wasm) and the plugin ConfigMap (manifest + reference by digest); `--inline`: one ConfigMap.
    Pack(PackArgs),
}

#[derive(clap::Args, Debug)]
struct PackArgs {
    /// The plugin component (.wasm).
    plugin: PathBuf,
    /// The admin's manifest (name, grants, limits, queue, resync); validated before packing.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// ConfigMap and plugin name (default: the manifest's name, else the file name).
    #[arg(long)]
    name: Option<String>,
    /// ConfigMap namespace (default: none, i.e. kubectl's current namespace).
    #[arg(long)]
    namespace: Option<String>,
    /// Write to this file instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The older single-ConfigMap form (wasm inline in the plugin ConfigMap's binaryData) instead of
    /// an immutable payload ConfigMap `<name>-wasm-<digest>` referenced from the plugin ConfigMap.
    #[arg(long)]
    inline: bool,
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
            rt.block_on(run::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Reconcile(args) => offline::run(args),
        Command::Inspect { plugin } => {
            init_tracing(LogFormat::Text);
            let bytes = std::fs::read(&plugin).with_context(|| format!("reading {}", plugin.display()))?;
            let engine = wasmloop::plugin::PluginEngine::new()?;
            let inspection = wasmloop::plugin::inspect(&engine, &bytes).with_context(|| format!("inspecting {}", plugin.display()))?;
            print!("{inspection}");
            Ok(if inspection.compatible { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Pack(args) => pack(args),
        Command::New(args) => new::run(args).map(|()| ExitCode::SUCCESS),
    }
}

fn pack(args: PackArgs) -> anyhow::Result<ExitCode> {
    use wasmloop::hotload::{PluginManifest, pack};
    let wasm = std::fs::read(&args.plugin).with_context(|| format!("reading {}", args.plugin.display()))?;
    let file_name = args.plugin.file_stem().and_then(|s| s.to_str()).unwrap_or("plugin").replace('_', "-");
    let mut manifest = match &args.manifest {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        None => String::new(),
    };
    // The name: --name, else the manifest's, else the file name. Written into the manifest.
    let parsed = PluginManifest::parse(&manifest, &file_name)
        .with_context(|| format!("in {}", args.manifest.as_ref().map(|p| p.display().to_string()).unwrap_or_default()))?;
    let name = args.name.clone().unwrap_or(parsed.name);
    if args.name.is_some() || !manifest.lines().any(|l| l.starts_with("name:")) {
        manifest = format!("name: {name}\n{}", manifest.lines().filter(|l| !l.starts_with("name:")).collect::<Vec<_>>().join("\n"));
        PluginManifest::parse(&manifest, &name).context("after setting the name")?;
    }
    let path = args.plugin.display().to_string();
    let input = pack::PackInput { wasm: &wasm, path: &path, manifest, name, namespace: args.namespace };
    let (yaml, raw, compressed, how) = if args.inline {
        let packed = pack::pack(input)?;
        (pack::to_yaml(&packed.config_map)?, packed.raw_bytes, packed.compressed_bytes, "inline".to_string())
    } else {
        let packed = pack::pack_referenced(input)?;
        let how = format!("payload ConfigMap {} ({})", packed.payload.metadata.name.as_deref().unwrap_or_default(), packed.digest);
        (pack::to_yaml_stream(&[&packed.payload, &packed.plugin])?, packed.raw_bytes, packed.compressed_bytes, how)
    };
    eprintln!(
        "wasmloop pack: {} → {} bytes raw, {} bytes zstd ({:.0}%), {how}",
        path,
        raw,
        compressed,
        100.0 * compressed as f64 / raw as f64
    );
    match args.output {
        Some(out) => std::fs::write(&out, yaml).with_context(|| format!("writing {}", out.display()))?,
        None => print!("{yaml}"),
    }
    Ok(ExitCode::SUCCESS)
}
