//! Section 3: resident memory of the host binary: idle (no plugin), then with 1, 10, 50, ...
//! copies of the replicaset plugin loaded, all scoped to one empty namespace (so they share
//! their informers and the marginal cost is the plugin itself: compiled code, instance
//! template, controller, queue). The RSS with the convergence workload cached (1000 Pods +
//! 100 ReplicaSets), and kube-controller-manager's, come from section 1's runs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams};
use serde::{Deserialize, Serialize};

use crate::controllers::{HostArgs, HostProcess, HostUnderTest};
use crate::kube_util::{self, apply_plugin, ensure_namespace, wait_until};
use crate::procfs;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub host: HostUnderTest,
    /// Plugin counts to measure at, ascending.
    #[arg(long, value_delimiter = ',', default_value = "1,10,50")]
    pub counts: Vec<usize>,
    /// Fresh host processes (each measures every count).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Seconds to let the process settle before reading RSS.
    #[arg(long, default_value_t = 3)]
    pub settle_secs: u64,
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub idle_rss_bytes: u64,
    /// `RssAnon`, `RssFile`, `RssShmem` idle.
    pub idle_parts: [u64; 3],
    /// (plugins loaded, RSS bytes, [`RssAnon`, `RssFile`, `RssShmem`]), ascending.
    pub loaded: Vec<(usize, u64, [u64; 3])>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub counts: Vec<usize>,
    pub runs: Vec<Run>,
}

pub async fn run(args: Args) -> Result<Results> {
    anyhow::ensure!(!args.counts.is_empty() && args.counts.windows(2).all(|w| w[0] < w[1]), "--counts must be ascending");
    std::fs::create_dir_all(&args.host.work_dir)?;
    let client = kube_util::client(&args.host.kubeconfig).await?;
    let wasm = std::fs::read(&args.host.plugin).with_context(|| format!("reading {}", args.host.plugin.display()))?;
    let manifest = std::fs::read_to_string(&args.host.manifest).with_context(|| format!("reading {}", args.host.manifest.display()))?;
    let tag = std::process::id();
    let target_ns = format!("bench-idle-{tag}");
    ensure_namespace(&client, &target_ns).await?;
    let settle = Duration::from_secs(args.settle_secs);
    let mut runs = Vec::new();
    for r in 0..args.runs {
        let plugin_ns = format!("wasmloop-bench-mem-{tag}-{r}");
        ensure_namespace(&client, &plugin_ns).await?;
        let host_args = HostArgs {
            bin: &args.host.host_bin,
            kubeconfig: &args.host.kubeconfig,
            plugin_namespace: &plugin_ns,
            precompiled_dir: &args.host.work_dir.join("precompiled"),
            log: args.host.work_dir.join(format!("memory-{r}.log")),
            extra: &[],
        };
        let mut host = HostProcess::start(host_args, Duration::from_secs(60)).await?;
        tokio::time::sleep(settle).await;
        let idle = procfs::settled_rss(host.pid(), 10, Duration::from_millis(300))?;
        let idle_parts = procfs::rss_parts(host.pid())?;
        let mut loaded = Vec::new();
        let mut have = 0;
        for &count in &args.counts {
            for j in have + 1..=count {
                let name = format!("rs-idle-{j}");
                let m = crate::fixtures::manifest_variant(&manifest, &name, Some(&target_ns), None)?;
                apply_plugin(&client, &plugin_ns, &name, &wasm, &m).await?;
            }
            have = count;
            let cms = Api::<ConfigMap>::namespaced(client.clone(), &plugin_ns);
            wait_until(&format!("{count} plugins loaded"), Duration::from_secs(300), Duration::from_millis(250), || {
                let cms = cms.clone();
                async move {
                    let list = cms.list(&ListParams::default()).await?;
                    let mut ok = 0;
                    for cm in &list.items {
                        let status = cm.metadata.annotations.as_ref().and_then(|a| a.get(wasmloop::hotload::source::STATUS_ANNOTATION));
                        let state: Option<serde_json::Value> = status.and_then(|s| serde_json::from_str(s).ok());
                        match state.as_ref().and_then(|v| v["state"].as_str()) {
                            Some("Loaded") => ok += 1,
                            Some("Rejected") => anyhow::bail!("plugin {:?} was rejected: {}", cm.metadata.name, state.unwrap_or_default()),
                            _ => {}
                        }
                    }
                    Ok(ok == count)
                }
            })
            .await?;
            host.check_running()?;
            tokio::time::sleep(settle).await;
            let rss = procfs::settled_rss(host.pid(), 10, Duration::from_millis(300))?;
            eprintln!(
                "memory: run {r}: {count:>3} plugins loaded: RSS {:.1} MiB (idle {:.1} MiB)",
                rss as f64 / 1048576.0,
                idle as f64 / 1048576.0
            );
            loaded.push((count, rss, procfs::rss_parts(host.pid())?));
        }
        host.stop().await?;
        Api::<ConfigMap>::namespaced(client.clone(), &plugin_ns)
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        runs.push(Run { idle_rss_bytes: idle, idle_parts, loaded });
    }
    Ok(Results { counts: args.counts, runs })
}
