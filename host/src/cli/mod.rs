//! Command-line interface. `anyhow` lives here, at the binary's edge, and nowhere else.

mod dev;
mod new;
mod offline;
mod pack;
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
    /// Develop a plugin against a cluster: on every save, build, pack, apply, load into a host
    /// in this process, and show its reconciles, actions and log lines.
    Dev(dev::DevArgs),
    /// Print a plugin as ConfigMaps for `kubectl apply -f -`: an immutable payload (zstd-compressed
    /// wasm) and the plugin ConfigMap (manifest + reference by digest); `--inline`: one ConfigMap.
    Pack(pack::PackArgs),
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
        Command::Pack(args) => pack::run(args),
        Command::New(args) => new::run(args).map(|()| ExitCode::SUCCESS),
        Command::Dev(args) => dev::run(args),
    }
}
