//! Operating the host: the alert and recording rules, the dashboard and `wasmloop status`, against
//! a real kube-apiserver, a real host (`wasmloop run --shard-mode plugin`, the deploy's RBAC) and a
//! real Prometheus (Debian's `prometheus`, on loopback, configured here).
//!
//! - `rules_and_dashboard_queries_return_data_from_a_host_under_load`: Prometheus scrapes the host
//!   every second and evaluates deploy/monitoring/rules.yaml (its group interval shortened to 2 s,
//!   nothing else changed) while PodSets are created and scaled; then every recording rule and
//!   every dashboard panel's query returns data, every rule evaluates without error, and every
//!   metric name the rules and panels use is one Prometheus has.
//! - `status_shows_states_digests_shards_and_rates`: `wasmloop status` (table, `-o json`, `--watch`,
//!   and `kubectl wasmloop status` through a `kubectl-wasmloop` link on PATH) shows a Loaded and a
//!   Rejected plugin, their digests and reasons, the shard Lease's holder, and the reconcile rate
//!   and queue read from the host's `/metrics`.
//! - `the_prometheus_rule_is_the_rule_file`: deploy/monitoring/prometheusrule.yaml holds exactly
//!   the groups of rules.yaml (scripts/monitoring-rules.sh writes it).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use wasmloop_tests::cluster::{
    DEPLOY_NS, DEPLOY_SA, HostProcess, bind_host_role, create_podset, deployed_and_served, host_binary, http_get, install_podset_plugin,
    kubectl_path, podsets,
};
use wasmloop_tests::{TestNamespace, apply_plugin, client, eventually, init_tracing, plugin_path, sa_kubeconfig, workspace_root};

const WAIT: Duration = Duration::from_secs(120);

fn monitoring(file: &str) -> PathBuf {
    workspace_root().join("deploy/monitoring").join(file)
}

/// A Prometheus server on a free loopback port, killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    /// Scrape `target` (job wasmloop-metrics, with `namespace` as a target label) every second and
    /// evaluate `rules` (a rule file).
    fn start(dir: &Path, target: SocketAddr, namespace: &str, rules: &Path) -> Result<Self> {
        let bin = which("prometheus").context("prometheus is not installed: run scripts/setup.sh (Debian's `prometheus`)")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: [{rules:?}]\n\
                 scrape_configs:\n\
                 \x20 - job_name: wasmloop-metrics\n\
                 \x20   static_configs: [{{targets: ['{target}'], labels: {{namespace: '{namespace}'}}}}]\n",
                rules = rules.display().to_string()
            ),
        )?;
        let log = dir.join("prometheus.log");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting prometheus")?;
        Ok(Self { child, addr, log })
    }

    /// `GET /api/v1/<path>`: the `data` of a success.
    async fn api(&self, path: &str) -> Result<Value> {
        let (code, body) = http_get(self.addr, &format!("/api/v1/{path}")).await?;
        let v: Value = serde_json::from_str(&body).with_context(|| format!("{path}: {code} {body}"))?;
        ensure!(v["status"] == "success", "{path}: {body}");
        Ok(v["data"].clone())
    }

    /// The series an instant query returns.
    async fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let data = self.api(&format!("query?query={}", encode(expr))).await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- prometheus log ----\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(program)).find(|p| p.is_file()))
}

/// Percent-encoding of a query parameter (everything but unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The groups of a rule file.
fn rule_groups(path: &Path) -> Result<Value> {
    let v: Value = serde_saphyr::from_str(&std::fs::read_to_string(path)?)?;
    Ok(v["groups"].clone())
}

/// Every expression of the rules (record name or alert name, expr).
fn rule_exprs(groups: &Value) -> Vec<(String, String)> {
    let rules = groups.as_array().into_iter().flatten().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default());
    rules
        .map(|r| {
            let name = r["record"].as_str().or(r["alert"].as_str()).unwrap_or_default().to_string();
            (name, r["expr"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// Every query of the dashboard's panels, with `$namespace` matching everything: (panel title, expr).
fn panel_exprs() -> Result<Vec<(String, String)>> {
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(monitoring("dashboard.json"))?)?;
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().context("no panels")? {
        let targets = panel["targets"].as_array().context("a panel without targets")?;
        ensure!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for t in targets {
            out.push((
                panel["title"].as_str().unwrap_or_default().to_string(),
                t["expr"].as_str().context("no expr")?.replace("$namespace", ".*"),
            ));
        }
    }
    Ok(out)
}

/// The metric names an expression selects: identifiers outside strings, label matchers, grouping
/// clauses and ranges that are neither functions, aggregations nor keywords.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 25] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    ];
    let mut cleaned = String::new();
    let mut depth_brace = 0;
    let mut in_string = false;
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => in_string = !in_string,
            _ if in_string => {}
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            _ if depth_brace > 0 => {}
            '[' => {
                for c in chars.by_ref() {
                    if c == ']' {
                        break;
                    }
                }
            }
            c => cleaned.push(c),
        }
    }
    let mut names = BTreeSet::new();
    let mut rest = cleaned.as_str();
    let mut previous_keyword = false;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphabetic() || c == '_' || c == ':') {
        let after = &rest[start..];
        let len = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).unwrap_or(after.len());
        let ident = &after[..len];
        let next = after[len..].trim_start();
        let is_call = next.starts_with('(');
        let grouping = ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&ident);
        // `by (a, b)`: label names, not metrics.
        if previous_keyword {
            previous_keyword = false;
            if let Some(close) = next.find(')') {
                rest = &next[close + 1..];
                continue;
            }
        }
        if grouping && next.starts_with('(') {
            previous_keyword = true;
        } else if !(is_call
            || KEYWORDS.contains(&ident.to_ascii_lowercase().as_str())
            || rest[..start].ends_with(|c: char| c.is_ascii_digit()))
        {
            names.insert(ident.to_string());
        }
        rest = &after[len..];
    }
    names
}

#[test]
fn metric_names_are_found_in_expressions() {
    let names = metric_names(
        r#"sum by (namespace, plugin) (rate(a_total{job="x",code=~"4.."}[5m]) + rate(b:c{x="y"}[1m])) / on (namespace) group_left max(c) > 0.5 unless d"#,
    );
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["a_total", "b:c", "c", "d"]);
    assert!(metric_names("histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))").contains("x_bucket"));
}

#[test]
fn the_prometheus_rule_is_the_rule_file() -> Result<()> {
    let rule: Value = serde_saphyr::from_str(&std::fs::read_to_string(monitoring("prometheusrule.yaml"))?)?;
    ensure!(rule["kind"] == "PrometheusRule" && rule["apiVersion"] == "monitoring.coreos.com/v1");
    ensure!(
        rule["spec"]["groups"] == rule_groups(&monitoring("rules.yaml"))?,
        "prometheusrule.yaml is not rules.yaml's groups: run scripts/monitoring-rules.sh"
    );
    Ok(())
}

/// What each test runs against: a namespace for PodSets, and a host with the podset plugin
/// (sharded: --shard-mode plugin) in a plugin namespace of its own, under the deploy's RBAC.
struct Setup {
    admin: kube::Client,
    ns: TestNamespace,
    dir: tempfile::TempDir,
    host: HostProcess,
    plugins: String,
}

async fn setup(prefix: &str) -> Result<Setup> {
    init_tracing();
    let (admin, _) = client().await?;
    deployed_and_served(&admin).await?;
    let ns = TestNamespace::create(&admin, prefix).await?;
    let dir = tempfile::tempdir()?;
    let plugins = install_podset_plugin(&admin, &ns.name).await?;
    bind_host_role(&admin, &plugins, DEPLOY_NS, DEPLOY_SA).await?;
    let kc = sa_kubeconfig(&admin, DEPLOY_NS, DEPLOY_SA, dir.path()).await?;
    let args = ["--plugin-namespace", plugins.as_str(), "--shard-mode", "plugin", "--lease-duration", "6", "--lease-grace", "2"];
    let host = HostProcess::start(&format!("mon-{}", ns.name), &kc, dir.path(), &args).await?;
    Ok(Setup { admin, ns, dir, host, plugins })
}

/// PodSets `<prefix>-<i>` created and scaled in `ns` for `rounds` (load for the host to reconcile).
async fn load(admin: &kube::Client, ns: &str, prefix: &str, rounds: usize) -> Result<()> {
    for i in 0..rounds {
        create_podset(admin, ns, &format!("{prefix}-{i}"), 2).await?;
        if i > 0 {
            let name = format!("{prefix}-{}", i - 1);
            podsets(admin, ns).patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await?;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_and_dashboard_queries_return_data_from_a_host_under_load() -> Result<()> {
    let Setup { admin, ns, dir, host, plugins } = setup("monitoring").await?;
    // The rules as shipped, evaluated every 2 s instead of 30 s (so the test need not wait minutes).
    let rules = dir.path().join("rules.yaml");
    let text = std::fs::read_to_string(monitoring("rules.yaml"))?;
    ensure!(text.contains("interval: 30s"));
    std::fs::write(&rules, text.replace("interval: 30s", "interval: 2s"))?;
    let prometheus = Prometheus::start(dir.path(), host.addr(), &plugins, &rules)?;
    load(&admin, &ns.name, "load", 20).await?;

    let groups = rule_groups(&rules)?;
    let recorded: Vec<(String, String)> = rule_exprs(&groups).into_iter().filter(|(name, _)| name.contains(':')).collect();
    let mut queries: Vec<(String, String)> = recorded.iter().map(|(name, _)| (format!("recording rule {name}"), name.clone())).collect();
    queries.extend(panel_exprs()?.into_iter().map(|(title, expr)| (format!("panel {title:?}"), expr)));
    let empty = eventually("every recording rule and panel query to return data", WAIT, || {
        let (prometheus, queries) = (&prometheus, &queries);
        async move {
            let mut empty = Vec::new();
            for (what, expr) in queries {
                if prometheus.query(expr).await?.is_empty() {
                    empty.push(format!("{what}: {expr}"));
                }
            }
            Ok(empty.is_empty().then_some(()))
        }
    })
    .await;
    if let Err(e) = empty {
        let mut missing = Vec::new();
        for (what, expr) in &queries {
            if prometheus.query(expr).await?.is_empty() {
                missing.push(format!("{what}: {expr}"));
            }
        }
        bail!("{e}: no data for\n  {}", missing.join("\n  "));
    }
    println!("{} recording rules and {} panel queries returned data", recorded.len(), queries.len() - recorded.len());

    // Every rule evaluates without error (a PromQL matching error shows only at run time).
    let data = prometheus.api("rules").await?;
    let mut evaluated = 0;
    for group in data["groups"].as_array().context("no rule groups")? {
        for rule in group["rules"].as_array().into_iter().flatten() {
            ensure!(rule["health"] == "ok", "rule {} is unhealthy: {}", rule["name"], rule["lastError"]);
            evaluated += 1;
        }
    }
    ensure!(evaluated == rule_exprs(&groups).len(), "{evaluated} rules loaded");

    // Every metric the rules and panels name is one Prometheus has: scraped from the host, or recorded.
    let known: BTreeSet<String> = prometheus
        .api("label/__name__/values")
        .await?
        .as_array()
        .context("names")?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let mut used = BTreeMap::new();
    for (what, expr) in rule_exprs(&groups).into_iter().chain(panel_exprs()?) {
        for name in metric_names(&expr) {
            used.entry(name).or_insert(what.clone());
        }
    }
    let unknown: Vec<String> = used.iter().filter(|(n, _)| !known.contains(*n)).map(|(n, w)| format!("{n} (in {w})")).collect();
    ensure!(unknown.is_empty(), "metric names no series has: {unknown:?}");
    println!("{} metric names used by the rules and panels, all present", used.len());
    // The figures the dashboard's memory panel shows are real: the plugin has run.
    let peak = prometheus.query("max(wasmloop_plugin_memory_peak_bytes)").await?;
    let peak: f64 = peak[0]["value"][1].as_str().context("value")?.parse()?;
    ensure!(peak >= 65536.0, "memory peak {peak}");
    drop(host);
    ns.cleanup().await
}

/// `wasmloop status <args>`: (exit code, stdout; stderr appended when stdout is empty).
fn status(kubeconfig: &Path, args: &[&str]) -> Result<(i32, String)> {
    let out =
        Command::new(host_binary()?).arg("status").arg("--kubeconfig").arg(kubeconfig).args(args).env_remove("KUBECONFIG").output()?;
    ensure!(out.status.code().is_some(), "killed: {out:?}");
    let mut text = String::from_utf8(out.stdout)?;
    if text.is_empty() {
        text = String::from_utf8_lossy(&out.stderr).into_owned();
    }
    Ok((out.status.code().unwrap_or(-1), text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_states_digests_shards_and_rates() -> Result<()> {
    let Setup { admin, ns, dir, host, plugins } = setup("status").await?;
    // A second plugin ConfigMap the host refuses (a memory limit that does not parse).
    let wasm = std::fs::read(plugin_path("podset")?)?;
    apply_plugin(&admin, &plugins, "broken", &wasm, "name: broken\nlimits: {memory: 64Ti}\n").await?;
    let metrics_url = format!("http://{}/metrics", host.addr());
    let kubeconfig = wasmloop_tests::kubeconfig()?;
    let common = ["-n", plugins.as_str(), "--metrics-url", metrics_url.as_str(), "--interval", "2s"];
    let report: Value = eventually("status to show podset Loaded and broken Rejected, with shards and reconciles per second", WAIT, || {
        let (kubeconfig, common, admin, ns) = (&kubeconfig, &common, &admin, &ns.name);
        async move {
            // Something to reconcile while status measures (between its two scrapes, 2 s apart).
            let args: Vec<String> = common.iter().map(ToString::to_string).chain(["-o".into(), "json".into()]).collect();
            let kc = kubeconfig.clone();
            let measuring = tokio::task::spawn_blocking(move || status(&kc, &args.iter().map(String::as_str).collect::<Vec<_>>()));
            tokio::time::sleep(Duration::from_millis(500)).await;
            let round = format!("r{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis());
            load(admin, ns, &round, 2).await?;
            let (code, out) = measuring.await??;
            let v: Value = serde_json::from_str(&out).with_context(|| format!("exit {code}: {out}"))?;
            let plugin = |name: &str| v["plugins"].as_array().into_iter().flatten().find(|p| p["configmap"] == name).cloned();
            let ready = plugin("podset").is_some_and(|p| {
                p["state"] == "Loaded" && p["shardsHeld"] == 1 && p["metrics"]["reconcilesPerSecond"].as_f64().is_some_and(|r| r > 0.0)
            }) && plugin("broken").is_some_and(|p| p["state"] == "Rejected");
            Ok(ready.then_some((code, v)))
        }
    })
    .await
    .map(|(code, v)| {
        assert_eq!(code, 1, "a Rejected plugin makes the exit code 1");
        v
    })?;
    let podset = report["plugins"].as_array().unwrap().iter().find(|p| p["configmap"] == "podset").unwrap();
    let digest = wasmloop::hotload::source::sha256(&[&wasm]);
    ensure!(podset["servingDigest"] == digest.as_str(), "serving {} != {digest}", podset["servingDigest"]);
    ensure!(podset["plugin"] == "podset" && podset["version"].as_str().is_some_and(|v| !v.is_empty()), "{podset}");
    ensure!(podset["metrics"]["queueDepth"].as_f64().is_some() && podset["metrics"]["errors"].as_f64().is_some(), "{podset}");
    let broken = report["plugins"].as_array().unwrap().iter().find(|p| p["configmap"] == "broken").unwrap();
    ensure!(broken["reason"] == "Refused" && broken["message"].as_str().is_some_and(|m| m.contains("64Ti")), "{broken}");
    ensure!(broken.get("servingDigest").is_none(), "nothing of it serves: {broken}");
    let shard = report["shards"].as_array().unwrap().iter().find(|s| s["plugin"] == "podset").context("no podset shard")?;
    ensure!(shard["holder"] == host.name.as_str() && shard["live"] == true, "{shard}");
    ensure!(report["members"].as_array().is_some_and(|m| m.iter().any(|h| h == host.name.as_str())), "{report}");
    // The reconciles happened on this host: its counter, per second over the interval.
    ensure!(report["hosts"][0]["source"] == metrics_url.as_str() && report["hosts"][0].get("error").is_none(), "{report}");

    // The table: a header, a row per ConfigMap with the short digest, the shard table.
    let (code, table) = status(&kubeconfig, &common)?;
    println!("wasmloop status:\n{table}");
    ensure!(code == 1, "exit {code}");
    let short = &digest["sha256:".len()..][..12];
    for needle in
        ["CONFIGMAP", "RECONCILES/S", "SHARD LEASE", "wasmloop-shard-podset", "Rejected", "Refused", short, "metrics from 1 of 1 host(s)"]
    {
        ensure!(table.contains(needle), "{needle:?} not in\n{table}");
    }
    ensure!(table.lines().any(|l| l.contains("podset") && l.contains("Loaded") && l.contains(short)), "{table}");

    // --watch prints again every interval.
    let mut watch = Command::new(host_binary()?)
        .args(["status", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(common)
        .args(["-o", "json", "--watch"])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = std::io::BufReader::new(watch.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line)?;
        lines.push(serde_json::from_str::<Value>(&line).with_context(|| format!("watch line: {line}"))?);
    }
    watch.kill()?;
    watch.wait()?;
    ensure!(lines.iter().all(|l| l["plugins"].as_array().is_some_and(|p| p.len() == 2)), "{lines:?}");

    // `kubectl wasmloop status`: kubectl runs `kubectl-wasmloop` from PATH, a link to this binary.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin)?;
    std::os::unix::fs::symlink(host_binary()?, bin.join("kubectl-wasmloop"))?;
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new(kubectl_path()?)
        .args(["wasmloop", "status", "-n", &plugins, "--no-metrics", "-o", "json"])
        .env("PATH", path)
        .env("KUBECONFIG", &kubeconfig)
        .output()?;
    let v: Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("kubectl wasmloop status: {}", String::from_utf8_lossy(&out.stderr)))?;
    ensure!(v["plugins"].as_array().is_some_and(|p| p.len() == 2) && v["hosts"].as_array().is_some_and(Vec::is_empty), "{v}");
    drop(host);
    ns.cleanup().await
}
