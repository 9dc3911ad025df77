//! Running the real `wasmloop run` binary against the test control plane: `deploy/` applied
//! with the control plane's kubectl, ServiceAccount kubeconfigs and RBAC bindings, PodSets and
//! their Pods, the host as a child process with its logs and `/metrics`. Shared by
//! `tests/cluster.rs` (one host, leader election) and `tests/scaleout.rs` (sharded replicas).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{apply_plugin, eventually, kubeconfig, plugin_path, workspace_root};

/// The deploy's namespace and ServiceAccount (deploy/serviceaccount.yaml).
pub const DEPLOY_NS: &str = "wasmloop";
pub const DEPLOY_SA: &str = "wasmloop";
/// The namespaced host permissions (deploy/rbac/host.yaml), bound per plugin namespace.
pub const HOST_ROLE: &str = "wasmloop-host";
pub const WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// deploy/: pack + kubectl apply -k
// ---------------------------------------------------------------------------------------------

pub fn kubectl_path() -> Result<PathBuf> {
    let out = Command::new(workspace_root().join("scripts/control-plane.sh")).args(["bin", "kubectl"]).output()?;
    ensure!(out.status.success(), "control-plane.sh bin kubectl: {}", String::from_utf8_lossy(&out.stderr));
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// Run the control plane's kubectl against the test kubeconfig; `Err` with its stderr if it fails.
pub fn kubectl(args: &[&str]) -> Result<String> {
    let kc = kubeconfig()?;
    let out = Command::new(kubectl_path()?)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(args)
        .current_dir(workspace_root())
        .output()
        .context("running kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// `kubectl apply -k deploy/` (the host), then `scripts/pack-plugins.sh` and `kubectl apply -k
/// deploy/plugins/` (the example plugins), once per test binary (every test needs the CRD, the
/// ServiceAccount and its RBAC). Returns kubectl's output of both applies.
pub fn deployed() -> Result<String> {
    static DEPLOYED: OnceLock<Result<String, String>> = OnceLock::new();
    DEPLOYED
        .get_or_init(|| {
            (|| {
                let pack = Command::new(workspace_root().join("scripts/pack-plugins.sh"))
                    .current_dir(workspace_root())
                    .output()
                    .context("running scripts/pack-plugins.sh")?;
                let host = kubectl(&["apply", "-k", "deploy/"])?;
                ensure!(pack.status.success(), "scripts/pack-plugins.sh failed:\n{}", String::from_utf8_lossy(&pack.stderr));
                Ok(host + &kubectl(&["apply", "-k", "deploy/plugins/"])?)
            })()
            .map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

/// Deployed, and the PodSet kind served (discovery can lag the CRD's creation).
pub async fn deployed_and_served(admin: &Client) -> Result<()> {
    deployed()?;
    let kind = wasmloop::kinds::KindRef::new("wasmloop.dev/v1alpha1", "PodSet");
    eventually("PodSet in discovery", WAIT, || {
        let resolver = wasmloop::kinds::KindResolver::new(admin.clone());
        let kind = kind.clone();
        async move { Ok(resolver.resolve(&kind).await.ok().map(|_| ())) }
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Identities: a token for a ServiceAccount, a kubeconfig with it, RBAC bindings
// ---------------------------------------------------------------------------------------------

/// The deploy's cluster-wide host permissions (SubjectAccessReviews, RBAC reads).
pub const HOST_CLUSTER_ROLE: &str = "wasmloop-host-cluster";

/// Bind the deploy's namespaced host permissions (ClusterRole `wasmloop-host`) to `sa_ns/sa` in
/// `ns`, as docs/operations.md says for another plugin namespace, and its cluster-wide ones
/// (`wasmloop-host-cluster`: SubjectAccessReviews, RBAC reads) if `sa_ns/sa` is not the deploy's.
pub async fn bind_host_role(admin: &Client, ns: &str, sa_ns: &str, sa: &str) -> Result<()> {
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{HOST_ROLE}-{sa}"), "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": HOST_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
    }))?;
    Api::<RoleBinding>::namespaced(admin.clone(), ns).create(&PostParams::default(), &rb).await?;
    if (sa_ns, sa) != (DEPLOY_NS, DEPLOY_SA) {
        apply_objects(
            admin,
            &[json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": format!("{HOST_CLUSTER_ROLE}-{sa_ns}-{sa}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": HOST_CLUSTER_ROLE},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
            })],
        )
        .await?;
    }
    Ok(())
}

/// The plugin namespace of a test whose workloads live in `ns`: `<ns>-p`, created if missing.
/// (Plugins write nothing in the host's namespaces, so the two are apart.)
pub async fn plugin_namespace_for(admin: &Client, ns: &str) -> Result<String> {
    let name = format!("{ns}-p");
    apply_objects(admin, &[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})]).await?;
    Ok(name)
}

/// Server-side apply of `objects` (ServiceAccounts, RBAC, Namespaces) by the tests' field manager.
pub async fn apply_objects(admin: &Client, objects: &[Value]) -> Result<()> {
    Ok(wasmloop::hotload::rbac::apply(admin, objects, "wasmloop-tests").await?)
}

/// The RBAC `wasmloop pack --rbac` prints for plugin `name` with `manifest` (declared reads:
/// the kinds it grants `read`), with plugin ConfigMaps in `plugin_ns` and the host running as
/// `host` (ns, name).
pub async fn grant_plugin(admin: &Client, plugin_ns: &str, name: &str, manifest: &str, host: (&str, &str)) -> Result<()> {
    let parsed = wasmloop::hotload::PluginManifest::parse(manifest, name)?;
    let reads = wasmloop::hotload::rbac::granted_reads(&parsed);
    let placement = wasmloop::hotload::rbac::Placement { namespace: plugin_ns, host };
    let (objects, _) = wasmloop::hotload::rbac::objects(&parsed, &reads, &placement)?;
    apply_objects(admin, &objects).await
}

/// A podset manifest granted in `namespaces` only, in `shards` key-space shards, with `extra`
/// lines (e.g. an API budget).
pub fn sharded_podset_manifest(namespaces: &[String], shards: usize, extra: &str) -> String {
    let list = namespaces.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", ");
    format!(
        "name: podset\n\
         grants:\n\
         \x20 - kinds: [\"wasmloop.dev/v1alpha1/PodSet\"]\n\
         \x20   verbs: [read, update-status, event]\n\
         \x20   namespaces: [{list}]\n\
         \x20 - kinds: [\"v1/Pod\"]\n\
         \x20   verbs: [read, create, delete, patch]\n\
         \x20   namespaces: [{list}]\n\
         limits: {{memory: 32Mi, timeout: 1s}}\n\
         concurrency: 2\n\
         shards: {shards}\n\
         {extra}\n"
    )
}

/// The podset plugin (the deploy's manifest, scoped to the workloads' namespace `ns`) as a plugin
/// ConfigMap in `ns`'s plugin namespace ([`plugin_namespace_for`]), with its RBAC for a host
/// running as the deploy's ServiceAccount. Returns the plugin namespace.
pub async fn install_podset_plugin(admin: &Client, ns: &str) -> Result<String> {
    install_podset_plugin_with(admin, ns, "").await
}

/// The same, with `extra` lines added to the manifest.
pub async fn install_podset_plugin_with(admin: &Client, ns: &str, extra: &str) -> Result<String> {
    install_podset_plugin_as(admin, ns, extra, (DEPLOY_NS, DEPLOY_SA)).await
}

/// The same, for a host running as ServiceAccount `host` (ns, name).
pub async fn install_podset_plugin_as(admin: &Client, ns: &str, extra: &str, host: (&str, &str)) -> Result<String> {
    let plugin_ns = plugin_namespace_for(admin, ns).await?;
    let manifest = std::fs::read_to_string(workspace_root().join("deploy/plugins/podset.plugin.yaml"))?;
    let manifest = format!("{}\nnamespace: {ns}\n{extra}\n", manifest.trim_end());
    grant_plugin(admin, &plugin_ns, "podset", &manifest, host).await?;
    let wasm = std::fs::read(plugin_path("podset")?)?;
    apply_plugin(admin, &plugin_ns, "podset", &wasm, &manifest).await?;
    Ok(plugin_ns)
}

// ---------------------------------------------------------------------------------------------
// PodSets and Pods
// ---------------------------------------------------------------------------------------------

pub fn podsets(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("wasmloop.dev", "v1alpha1", "PodSet"), "podsets");
    Api::namespaced_with(client.clone(), ns, &ar)
}

pub async fn create_podset(client: &Client, ns: &str, name: &str, replicas: i64) -> Result<()> {
    let ps: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wasmloop.dev/v1alpha1", "kind": "PodSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": name}},
                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:1"}]}}}
    }))?;
    podsets(client, ns).create(&PostParams::default(), &ps).await.with_context(|| format!("creating PodSet {ns}/{name}"))?;
    Ok(())
}

pub async fn pods(client: &Client, ns: &str) -> Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default()).await?.items)
}

/// Pods per PodSet name (by controller owner reference to an existing PodSet's uid); Pods owned
/// by no existing PodSet are returned under `""`.
pub async fn pods_by_podset(client: &Client, ns: &str) -> Result<BTreeMap<String, Vec<String>>> {
    let sets = podsets(client, ns).list(&ListParams::default()).await?.items;
    let by_uid: BTreeMap<String, String> = sets.iter().filter_map(|p| Some((p.metadata.uid.clone()?, p.metadata.name.clone()?))).collect();
    let mut out: BTreeMap<String, Vec<String>> = sets.iter().filter_map(|p| p.metadata.name.clone()).map(|n| (n, vec![])).collect();
    for pod in pods(client, ns).await? {
        let owner = pod
            .metadata
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.controller == Some(true) && r.kind == "PodSet")
            .and_then(|r| by_uid.get(&r.uid).cloned())
            .unwrap_or_default();
        out.entry(owner).or_default().push(pod.metadata.name.unwrap_or_default());
    }
    out.values_mut().for_each(|v| v.sort());
    Ok(out)
}

pub async fn status_replicas(client: &Client, ns: &str, name: &str) -> Result<Option<i64>> {
    let ps = podsets(client, ns).get(name).await?;
    Ok(ps.data.get("status").and_then(|s| s.get("replicas")).and_then(Value::as_i64))
}

/// Wait until every PodSet in `want` has exactly that many Pods, named `<podset>-0..n-1`, and
/// `status.replicas` says so.
pub async fn converged(client: &Client, ns: &str, want: &BTreeMap<String, usize>) -> Result<()> {
    eventually(&format!("PodSets in {ns} converged to {want:?}"), WAIT, || async move {
        let have = pods_by_podset(client, ns).await?;
        for (name, n) in want {
            let expected: BTreeSet<String> = (0..*n).map(|i| format!("{name}-{i}")).collect();
            let got: BTreeSet<String> = have.get(name).cloned().unwrap_or_default().into_iter().collect();
            if got != expected || status_replicas(client, ns, name).await? != Some(*n as i64) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// The host as a child process
// ---------------------------------------------------------------------------------------------

/// The `wasmloop` binary the tests run: `target/debug/wasmloop`, or `WASMLOOP_TEST_HOST_BIN`
/// (e.g. an older build, to check that a test fails without a fix).
pub fn host_binary() -> Result<PathBuf> {
    let bin = std::env::var_os("WASMLOOP_TEST_HOST_BIN").map_or_else(|| workspace_root().join("target/debug/wasmloop"), PathBuf::from);
    ensure!(bin.exists(), "{} is missing: run `cargo build -p wasmloop` first", bin.display());
    Ok(bin)
}

/// `wasmloop run` as a child process: JSON logs to a file, HTTP on a free loopback port. Killed
/// (SIGKILL) on drop if still running; its log is printed if the test is failing.
pub struct HostProcess {
    pub name: String,
    pub child: Child,
    log: PathBuf,
    addr: SocketAddr,
    exit: Option<ExitStatus>,
}

impl HostProcess {
    pub async fn start(name: &str, kubeconfig: &Path, dir: &Path, args: &[&str]) -> Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log)?;
        let mut cmd = Command::new(host_binary()?);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--listen", "127.0.0.1:0", "--log-format", "json", "--identity", name])
            .arg("--precompiled-dir")
            .arg(workspace_root().join("target/tmp/wasmloop-host-precompiled"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        // Only the flags above count, not whatever the test runner's environment holds.
        for (k, _) in std::env::vars() {
            if k.starts_with("WASMLOOP_") || k == "KUBECONFIG" || k == "POD_NAME" {
                cmd.env_remove(k);
            }
        }
        cmd.env("RUST_LOG", "info,kube_client=warn,kube_runtime=warn,wasmtime=warn,cranelift=warn");
        let child = cmd.spawn().context("starting wasmloop run")?;
        let mut host = Self { name: name.to_string(), child, log, addr: ([127, 0, 0, 1], 0).into(), exit: None };
        let addr = eventually(&format!("host {name} to serve HTTP"), WAIT, || {
            let found = host.log_lines().into_iter().find_map(|l| {
                let serving = l["message"].as_str().is_some_and(|m| m.starts_with("serving /metrics, /healthz, /readyz"));
                serving.then(|| l["addr"].as_str().map(str::to_string)).flatten()
            });
            let exited = host.child.try_wait().ok().flatten();
            async move {
                if let Some(status) = exited {
                    bail!("exited early ({status})");
                }
                Ok(found)
            }
        })
        .await
        .with_context(|| format!("log of {name}:\n{}", host.log_tail(30)))?;
        host.addr = addr.parse()?;
        Ok(host)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where it serves `/metrics`, `/healthz`, `/readyz`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn alive(&mut self) -> bool {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit.is_none()
    }

    pub fn signal(&self, sig: &str) -> Result<()> {
        let st = Command::new("kill").arg(format!("-{sig}")).arg(self.pid().to_string()).status()?;
        ensure!(st.success(), "kill -{sig} {} failed", self.pid());
        Ok(())
    }

    /// Wait for the process to exit, at most `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.alive() {
                return Ok(self.exit.expect("exited"));
            }
            if Instant::now() > deadline {
                bail!("host {} still running {timeout:?} later; log:\n{}", self.name, self.log_tail(30));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_lines(&self) -> Vec<Value> {
        self.log_text().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// `GET path` → (status code, body).
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        http_get(self.addr, path).await
    }

    pub async fn metrics(&self) -> Result<Metrics> {
        let (code, body) = self.get("/metrics").await?;
        ensure!(code == 200, "/metrics answered {code}: {body}");
        Ok(Metrics(body))
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- log of host {} (last 40 lines) ----\n{}\n----", self.name, self.log_tail(40));
        }
    }
}

/// A minimal HTTP/1.1 GET (the tests need no HTTP client crate for three endpoints).
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        anyhow::Ok(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), exchange).await.context("HTTP GET timed out")??;
    let text = String::from_utf8(buf)?;
    let (head, body) = text.split_once("\r\n\r\n").context("HTTP response without a header end")?;
    let code: u16 = head.split_whitespace().nth(1).context("no status code")?.parse()?;
    let chunked =
        head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked"));
    let body = if chunked { dechunk(body)? } else { body.to_string() };
    Ok((code, body))
}

pub fn dechunk(mut s: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").context("bad chunk")?;
        let n = usize::from_str_radix(size.trim(), 16)?;
        if n == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..n).context("short chunk")?);
        s = rest.get(n + 2..).context("short chunk")?;
    }
}

/// An OpenMetrics text exposition.
pub struct Metrics(pub String);

impl Metrics {
    /// Sum of the samples of `name` whose labels include all of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name).filter(|(l, _)| labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))).map(|(_, v)| v).sum()
    }

    pub fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples(name).any(|(l, _)| labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
    }

    pub fn samples<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (BTreeMap<String, String>, f64)> + 'a {
        self.0.lines().filter(|l| !l.starts_with('#')).filter_map(move |line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (n, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.strip_suffix('}')?)),
                None => (series, BTreeMap::new()),
            };
            (n == name).then(|| Some((labels, value.parse().ok()?))).flatten()
        })
    }
}

/// `a="x",b="y, z"` → map (values may hold commas, spaces and escaped quotes).
pub fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, e)) = chars.next() {
                        value.push(match e {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    out
}

/// `controller_runtime_reconcile_total` of the podset controller, all results.
pub fn podset_reconciles(m: &Metrics) -> f64 {
    m.sum("controller_runtime_reconcile_total", &[("controller", "podset")])
}

pub async fn holder(admin: &Client, ns: &str) -> Result<Option<String>> {
    Ok(Api::<Lease>::namespaced(admin.clone(), ns).get_opt("wasmloop").await?.and_then(|l| l.spec?.holder_identity))
}
