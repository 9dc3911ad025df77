//! Small helpers for the live benchmarks: clients, namespaces, plugin ConfigMaps, cleanup,
//! processes and readiness probes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmloop::hotload::pack;

pub const FIELD_MANAGER: &str = "wasmloop-bench";

/// A client for the control plane of `kubeconfig`.
pub async fn client(kubeconfig: &Path) -> Result<Client> {
    let path = kubeconfig.to_str().context("kubeconfig path is not UTF-8")?;
    let (client, _) = wasmloop::client::build(Some(path)).await.with_context(|| format!("connecting with {path}"))?;
    Ok(client)
}

/// Create namespace `name` unless it exists.
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let api = Api::<Namespace>::all(client.clone());
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

/// Remove the ReplicaSets and Pods of `ns` (no garbage collector or namespace controller runs
/// in the benchmark's control plane, so deleting the namespace alone would leave them cached
/// by the next controller) and wait until no Pod is left; then delete the namespace.
pub async fn delete_workload(client: &Client, ns: &str, timeout: Duration) -> Result<()> {
    // Background: the ReplicaSets go at once (Orphan would wait for a garbage collector that
    // does not run here); their Pods are deleted below.
    Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await
        .with_context(|| format!("deleting the ReplicaSets of {ns}"))?;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    let deadline = Instant::now() + timeout;
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns);
    loop {
        let left = rs.list_metadata(&ListParams::default()).await?.items.len();
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{left} ReplicaSets still in namespace {ns} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    loop {
        let left = pods.list_metadata(&ListParams::default()).await?.items.len();
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{left} Pods still in namespace {ns} after {timeout:?}");
        }
        // A collection delete of thousands of Pods can fail half-way (a 500 when the API
        // server's request times out): what is left is deleted on the next round, until the
        // deadline.
        if let Err(e) = pods.delete_collection(&now, &ListParams::default()).await {
            eprintln!("cleanup: deleting the Pods of {ns} failed ({e}); {left} were left, trying again");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
    Ok(())
}

/// Pack `wasm` with `manifest` as the host expects it (`wasmloop pack`'s ConfigMap) and
/// server-side apply it as `ns/name`. Returns the new resourceVersion.
pub async fn apply_plugin(client: &Client, ns: &str, name: &str, wasm: &[u8], manifest: &str) -> Result<String> {
    // Its RBAC first (`wasmloop pack --rbac`): the host writes as the plugin's own account.
    let parsed = wasmloop::hotload::PluginManifest::parse(manifest, name).context("the plugin's manifest")?;
    let reads = wasmloop::hotload::rbac::granted_reads(&parsed);
    let placement = wasmloop::hotload::rbac::Placement { namespace: ns, host: ("wasmloop", "wasmloop") };
    let (objects, _) = wasmloop::hotload::rbac::objects(&parsed, &reads, &placement)?;
    wasmloop::hotload::rbac::apply(client, &objects, FIELD_MANAGER).await.context("applying the plugin's RBAC")?;
    let packed = pack::pack(pack::PackInput {
        wasm,
        path: "replicaset.wasm",
        manifest: manifest.to_string(),
        name: name.to_string(),
        namespace: Some(ns.to_string()),
    })
    .context("packing the plugin")?;
    apply_configmap(client, ns, packed.config_map).await
}

/// Server-side apply a ConfigMap (ours: force). Returns the new resourceVersion.
pub async fn apply_configmap(client: &Client, ns: &str, cm: ConfigMap) -> Result<String> {
    let name = cm.metadata.name.clone().context("ConfigMap without a name")?;
    let mut value = serde_json::to_value(&cm)?;
    value["apiVersion"] = json!("v1");
    value["kind"] = json!("ConfigMap");
    let applied = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&value))
        .await
        .with_context(|| format!("applying ConfigMap {ns}/{name}"))?;
    Ok(applied.metadata.resource_version.unwrap_or_default())
}

/// The host's `wasmloop.dev/status` annotation of a plugin ConfigMap, parsed.
pub async fn plugin_status(client: &Client, ns: &str, name: &str) -> Result<Option<Value>> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns).get_opt(name).await?;
    let raw = cm.and_then(|c| c.metadata.annotations).and_then(|a| a.get(wasmloop::hotload::source::STATUS_ANNOTATION).cloned());
    Ok(match raw {
        Some(s) => Some(serde_json::from_str(&s).with_context(|| format!("status annotation of {ns}/{name}: {s}"))?),
        None => None,
    })
}

/// A TCP port free on loopback right now.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// True when `GET http://127.0.0.1:port/path` answers 200.
pub fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 32];
    let n = s.read(&mut buf).unwrap_or(0);
    std::str::from_utf8(&buf[..n]).is_ok_and(|l| l.starts_with("HTTP/1.1 200") || l.starts_with("HTTP/1.0 200"))
}

/// True while process `pid` exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rfind(')').and_then(|i| s[i + 2..].chars().next()).is_some_and(|state| state != 'Z'),
        Err(_) => false,
    }
}

/// Send SIGTERM to `pid` (through `kill`, the crate has no libc dependency).
pub fn sigterm(pid: u32) -> Result<()> {
    let st = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status()?;
    anyhow::ensure!(st.success(), "kill -TERM {pid} failed");
    Ok(())
}

/// Poll `check` every `every` until true, failing with `what` after `timeout`.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, every: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Delete a namespace (its objects stay until a namespace controller runs; the benchmark's
/// control plane is thrown away at the end).
pub async fn delete_namespace(client: &Client, ns: &str) -> Result<()> {
    Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await?;
    Ok(())
}

/// `GET http://127.0.0.1:port/path`: the body (HTTP/1.1, `Connection: close`, chunked or not).
pub fn http_get(port: u16, path: &str) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8(raw).context("response is not UTF-8")?;
    let (head, body) = text.split_once("\r\n\r\n").context("no end of headers")?;
    anyhow::ensure!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "GET {path}: {}",
        head.lines().next().unwrap_or("")
    );
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return Ok(body.to_string());
    }
    let mut out = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n").context("bad chunk")?;
        let n = usize::from_str_radix(size.trim(), 16).context("bad chunk size")?;
        if n == 0 {
            return Ok(out);
        }
        out.push_str(after.get(..n).context("short chunk")?);
        rest = after.get(n + 2..).context("short chunk")?;
    }
}

/// Sum of the samples of metric `name` (any labels) whose label text contains every one of
/// `with` (e.g. `verb="create"`), in Prometheus text format.
pub fn metric_sum(text: &str, name: &str, with: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = match series.split_once('{') {
                Some((m, rest)) => (m, rest),
                None => (series, ""),
            };
            (metric == name && with.iter().all(|w| labels.contains(w))).then(|| value.parse::<f64>().ok()).flatten()
        })
        .fold(0.0, |a, b| a + b)
}
