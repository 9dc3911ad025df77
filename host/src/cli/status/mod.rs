//! `wasmloop status` (also `kubectl wasmloop status`, through a `kubectl-wasmloop` link to this
//! binary): every plugin ConfigMap with the state, digests and reason the host reported in its
//! annotations, the shard Leases' holders, and from the hosts' own metrics each plugin's
//! reconcile rate, errors and queue. A table, `-o json`, and `--watch`.

mod scrape;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use serde::Serialize;
use wasmloop::hotload::{PluginStatus, State};
use wasmloop::shard::coordinator::{MEMBER_LEASE_PREFIX, SHARD_LEASE_PREFIX};

use scrape::{PluginFigures, Scrape, Source};

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Kubeconfig to use (default: KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<String>,
    /// The host's namespace: its plugin ConfigMaps, Pods and Leases.
    #[arg(short = 'n', long, env = "WASMLOOP_PLUGIN_NAMESPACE", default_value = "wasmloop")]
    namespace: String,
    /// Plugin ConfigMaps from every namespace (a host run with --all-namespaces).
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Namespace of the host's Leases (default: --namespace).
    #[arg(long)]
    lease_namespace: Option<String>,
    /// The leader's Lease (a host run with --leader-elect).
    #[arg(long, default_value = "wasmloop")]
    lease_name: String,
    /// The host Pods, whose metrics are read through the API server's proxy (needs `get` on
    /// `pods/proxy` in the host's namespace).
    #[arg(long, default_value = "app.kubernetes.io/name=wasmloop")]
    selector: String,
    /// The host Pods' metrics port (number or name).
    #[arg(long, default_value = "8080")]
    metrics_port: String,
    /// Read the hosts' metrics from these URLs instead of through the API server (e.g. a
    /// `kubectl port-forward`); repeatable.
    #[arg(long = "metrics-url", value_name = "URL")]
    metrics_urls: Vec<String>,
    /// Do not read the hosts' metrics (the ConfigMaps and Leases only).
    #[arg(long, conflicts_with = "metrics_urls")]
    no_metrics: bool,
    /// The interval rates are measured over (two scrapes that far apart), and of --watch.
    #[arg(long, default_value = "2s", value_parser = super::parse_duration)]
    interval: Duration,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
    /// Print again every --interval until interrupted (with -o json: one document per line).
    #[arg(short = 'w', long)]
    watch: bool,
}

/// How `status` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Table,
    Json,
}

/// Exit code 0; 1 when a plugin is Rejected or a host's metrics could not be read.
pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let connection = wasmloop::client::Connection::new(args.kubeconfig.as_deref()).await?;
        let client = connection.client().clone();
        let mut before: Option<Vec<Scrape>> = None;
        loop {
            // Rates need two scrapes: the first time, one more an interval earlier.
            let sources = metric_sources(&client, &args).await?;
            if let (Some(sources), None) = (&sources, &before) {
                before = Some(scrape_all(&client, sources).await);
                tokio::time::sleep(args.interval).await;
            }
            let now = match &sources {
                Some(sources) => Some(scrape_all(&client, sources).await),
                None => None,
            };
            let report = gather(&client, &args, now.as_deref(), before.as_deref()).await?;
            match args.output {
                Output::Table => print!("{}", render(&report)),
                Output::Json if args.watch => println!("{}", serde_json::to_string(&report)?),
                Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
            if !args.watch {
                let failed = report.plugins.iter().any(|p| p.state == "Rejected") || report.hosts.iter().any(|h| h.error.is_some());
                return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
            }
            if args.output == Output::Table {
                println!();
            }
            before = now;
            tokio::time::sleep(args.interval).await;
        }
    })
}

/// Where the hosts' metrics are read (`None`: --no-metrics).
async fn metric_sources(client: &kube::Client, args: &StatusArgs) -> anyhow::Result<Option<Vec<Source>>> {
    if args.no_metrics {
        return Ok(None);
    }
    if !args.metrics_urls.is_empty() {
        return Ok(Some(args.metrics_urls.iter().cloned().map(Source::Url).collect()));
    }
    Ok(Some(scrape::pods(client, &args.namespace, &args.selector, &args.metrics_port).await?))
}

async fn scrape_all(client: &kube::Client, sources: &[Source]) -> Vec<Scrape> {
    futures::future::join_all(sources.iter().map(|s| scrape::scrape(client, s))).await
}

/// Everything `status` shows.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    plugins: Vec<PluginRow>,
    shards: Vec<ShardRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    leader: Option<ShardRow>,
    /// Live replicas (member Leases, --shard-mode plugin).
    members: Vec<String>,
    /// The hosts whose metrics were read (none with --no-metrics).
    hosts: Vec<HostRow>,
}

/// One plugin ConfigMap.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PluginRow {
    namespace: String,
    configmap: String,
    plugin: String,
    version: String,
    state: String,
    reason: String,
    message: String,
    /// The digest that serves (the Loaded one, or an older version still serving).
    #[serde(skip_serializing_if = "Option::is_none")]
    serving_digest: Option<String>,
    /// The digest waiting or refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_digest: Option<String>,
    /// Its shards' Leases: (held, all).
    shards_held: usize,
    shards: usize,
    /// From the hosts' metrics (absent with --no-metrics).
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics: Option<PluginFigures>,
}

/// One shard Lease (or the leader's).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ShardRow {
    lease: String,
    plugin: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    holder: Option<String>,
    /// Renewed within its duration.
    live: bool,
    /// Objects of the reconciled kind in the shard, as its owner published them.
    #[serde(skip_serializing_if = "Option::is_none")]
    objects: Option<u64>,
}

/// One host whose metrics were read.
#[derive(Debug, Serialize)]
struct HostRow {
    source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

async fn gather(client: &kube::Client, args: &StatusArgs, now: Option<&[Scrape]>, before: Option<&[Scrape]>) -> anyhow::Result<Report> {
    let configmaps: Api<ConfigMap> =
        if args.all_namespaces { Api::all(client.clone()) } else { Api::namespaced(client.clone(), &args.namespace) };
    let selector = format!("{}=true", wasmloop::hotload::source::PLUGIN_LABEL);
    let listed = configmaps.list(&ListParams::default().labels(&selector)).await.context("listing the plugin ConfigMaps")?;
    let lease_ns = args.lease_namespace.as_deref().unwrap_or(&args.namespace);
    let leases = Api::<Lease>::namespaced(client.clone(), lease_ns).list(&ListParams::default()).await.context("listing the Leases")?;
    let (shards, members, leader) = read_leases(&leases.items, &args.lease_name);
    let plugins = listed
        .items
        .iter()
        .map(|cm| {
            let status = PluginStatus::from_annotations(&cm.metadata.annotations.clone().unwrap_or_default());
            let configmap = cm.metadata.name.clone().unwrap_or_default();
            let plugin = status.plugin.clone().unwrap_or_else(|| configmap.clone());
            let own: Vec<&ShardRow> = shards.iter().filter(|s| s.plugin == plugin).collect();
            PluginRow {
                namespace: cm.metadata.namespace.clone().unwrap_or_default(),
                serving_digest: status.serving_digest().map(str::to_string),
                pending_digest: status.pending_digest().map(str::to_string),
                version: status.version.clone().unwrap_or_default(),
                shards_held: own.iter().filter(|s| s.live).count(),
                shards: own.len(),
                metrics: now.map(|now| scrape::figures(&plugin, now, before)),
                state: State::name(status.state).to_string(),
                reason: status.reason,
                message: status.message,
                configmap,
                plugin,
            }
        })
        .collect();
    let hosts = now
        .unwrap_or_default()
        .iter()
        .map(|s| HostRow { source: s.source.to_string(), error: s.samples.as_ref().err().map(ToString::to_string) })
        .collect();
    Ok(Report { plugins, shards, leader, members, hosts })
}

/// The shard Leases, the live members, and the leader's Lease named `leader`.
fn read_leases(leases: &[Lease], leader: &str) -> (Vec<ShardRow>, Vec<String>, Option<ShardRow>) {
    let now = Timestamp::now();
    let row = |lease: &Lease, plugin: String| {
        let spec = lease.spec.clone().unwrap_or_default();
        let live = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(renewed), Some(seconds)) => now.duration_since(renewed.0).as_secs_f64() <= f64::from(seconds),
            _ => false,
        };
        let objects =
            lease.metadata.annotations.as_ref().and_then(|a| a.get(wasmloop::shard::OBJECTS_ANNOTATION)).and_then(|v| v.parse().ok());
        ShardRow {
            lease: lease.metadata.name.clone().unwrap_or_default(),
            plugin,
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            live,
            objects,
        }
    };
    let mut shards = Vec::new();
    let mut members = Vec::new();
    let mut leading = None;
    for lease in leases {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        if let Some(shard) = name.strip_prefix(SHARD_LEASE_PREFIX) {
            shards.push(row(lease, plugin_of_shard(shard).to_string()));
        } else if name.starts_with(MEMBER_LEASE_PREFIX) {
            let r = row(lease, String::new());
            if let (true, Some(holder)) = (r.live, r.holder) {
                members.push(holder);
            }
        } else if name == leader {
            leading = Some(row(lease, String::new()));
        }
    }
    shards.sort_by(|a, b| a.lease.cmp(&b.lease));
    members.sort();
    (shards, members, leading)
}

/// The plugin of a shard Lease's name (after the prefix): `podset` or `podset-3-of-10`.
fn plugin_of_shard(shard: &str) -> &str {
    let parts: Vec<&str> = shard.rsplitn(4, '-').collect();
    match parts.as_slice() {
        [count, "of", index, plugin] if count.parse::<u32>().is_ok() && index.parse::<u32>().is_ok() => plugin,
        _ => shard,
    }
}

/// The report as `kubectl get`-style tables.
fn render(report: &Report) -> String {
    let dash = |s: Option<&str>| s.filter(|s| !s.is_empty()).map_or_else(|| "-".to_string(), str::to_string);
    let short = |d: &Option<String>| d.as_deref().map(|d| d.strip_prefix("sha256:").unwrap_or(d).chars().take(12).collect::<String>());
    let rate = |r: Option<f64>| r.map_or_else(|| "-".to_string(), |r| format!("{r:.2}"));
    let mut rows = vec![
        vec![
            "NAMESPACE",
            "CONFIGMAP",
            "PLUGIN",
            "VERSION",
            "STATE",
            "REASON",
            "SERVING",
            "PENDING",
            "RECONCILES/S",
            "ERRORS/S",
            "ERRORS",
            "QUEUE",
            "SHARDS",
            "MESSAGE",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>(),
    ];
    for p in &report.plugins {
        let m = p.metrics.as_ref();
        rows.push(vec![
            p.namespace.clone(),
            p.configmap.clone(),
            p.plugin.clone(),
            dash(Some(p.version.as_str())),
            p.state.clone(),
            dash(Some(p.reason.as_str())),
            dash(short(&p.serving_digest).as_deref()),
            dash(short(&p.pending_digest).as_deref()),
            rate(m.and_then(|m| m.reconciles_per_second)),
            rate(m.and_then(|m| m.errors_per_second)),
            m.map_or_else(|| "-".to_string(), |m| format!("{}", m.errors)),
            m.map_or_else(|| "-".to_string(), |m| format!("{}", m.queue_depth)),
            if p.shards == 0 { "-".to_string() } else { format!("{}/{}", p.shards_held, p.shards) },
            dash(Some(p.message.replace('\n', " ").chars().take(80).collect::<String>().as_str())),
        ]);
    }
    let mut out = table(&rows);
    if !report.shards.is_empty() {
        let mut rows = vec![["SHARD LEASE", "PLUGIN", "HOLDER", "LIVE", "OBJECTS"].map(String::from).to_vec()];
        for s in &report.shards {
            let objects = s.objects.map_or_else(|| "-".to_string(), |o| o.to_string());
            rows.push(vec![s.lease.clone(), s.plugin.clone(), dash(s.holder.as_deref()), s.live.to_string(), objects]);
        }
        out += "\n";
        out += &table(&rows);
    }
    if let Some(l) = &report.leader {
        out += &format!("\nleader ({}): {}{}\n", l.lease, dash(l.holder.as_deref()), if l.live { "" } else { " (expired)" });
    }
    if !report.members.is_empty() {
        out += &format!("\nlive replicas: {}\n", report.members.join(", "));
    }
    for h in report.hosts.iter().filter(|h| h.error.is_some()) {
        out += &format!("\nmetrics of {}: {}\n", h.source, h.error.as_deref().unwrap_or_default());
    }
    if !report.hosts.is_empty() {
        let ok = report.hosts.iter().filter(|h| h.error.is_none()).count();
        out += &format!("\nmetrics from {ok} of {} host(s)\n", report.hosts.len());
    }
    out
}

/// Rows as columns padded to their widest cell, three spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|i| rows.iter().map(|r| r.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out += line.join("   ").trim_end();
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_leases_name_their_plugin() {
        assert_eq!(plugin_of_shard("podset"), "podset");
        assert_eq!(plugin_of_shard("podset-3-of-10"), "podset");
        assert_eq!(plugin_of_shard("my-plugin-0-of-2"), "my-plugin");
        assert_eq!(plugin_of_shard("my-plugin-of-x"), "my-plugin-of-x");
    }

    #[test]
    fn leases_are_read_for_holders_liveness_and_counts() {
        let lease = |name: &str, holder: &str, age_s: i64, objects: Option<&str>| -> Lease {
            let renewed = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(age_s);
            let mut l: Lease = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed.to_string()}
            }))
            .unwrap();
            if let Some(o) = objects {
                l.metadata.annotations = Some([(wasmloop::shard::OBJECTS_ANNOTATION.to_string(), o.to_string())].into());
            }
            l
        };
        let leases = [
            lease("wasmloop-shard-podset-1-of-2", "b", 1, Some("40")),
            lease("wasmloop-shard-podset-0-of-2", "a", 60, None),
            lease("wasmloop-member-a", "a", 60, None),
            lease("wasmloop-member-b", "b", 2, None),
            lease("wasmloop", "b", 3, None),
            lease("other", "x", 1, None),
        ];
        let (shards, members, leader) = read_leases(&leases, "wasmloop");
        assert_eq!(
            shards.iter().map(|s| (s.lease.as_str(), s.live, s.objects)).collect::<Vec<_>>(),
            [("wasmloop-shard-podset-0-of-2", false, None), ("wasmloop-shard-podset-1-of-2", true, Some(40))]
        );
        assert!(shards.iter().all(|s| s.plugin == "podset"));
        assert_eq!(members, ["b"]);
        assert_eq!(leader.and_then(|l| l.holder), Some("b".to_string()));
    }

    #[test]
    fn tables_pad_their_columns() {
        let rows = vec![vec!["A".to_string(), "BB".to_string()], vec!["ccc".to_string(), "d".to_string()]];
        assert_eq!(table(&rows), "A     BB\nccc   d\n");
    }
}
