//! Plugins from a real OCI registry (issue #50): Debian's docker-registry with TLS (a CA of its
//! own) and basic auth, started for this binary by scripts/registry.sh; the plugin ConfigMap's
//! manifest names `oci:` (credentials from a dockerconfigjson Secret, cosign keys to trust).
//! Every hostile input — unsigned, foreign-signed, a corrupted blob (digest mismatch), a layer over
//! the size limit, a manifest list, a tag moved under a serving plugin, the registry down — is
//! refused (or waits) while the last good version keeps serving and reconciling; a host restarted
//! with the registry down loads from its blob cache.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::Value;
use wasmloop::hotload::{OciSettings, PluginManager, PluginManagerConfig, PluginMetrics};
use wasmloop::oci::auth::RegistryAuth;
use wasmloop::oci::{self, BlobCache, OciRef, PullConfig, Puller, TrustPolicy};
use wasmloop_tests::cluster::{converged, create_podset, sharded_podset_manifest};
use wasmloop_tests::registry::{TestRegistry, p256_key_pair};
use wasmloop_tests::{Host, TestNamespace, apply_configmap, ensure_podset_crd, eventually, init_tracing, plugin_path};

fn auth(registry: &TestRegistry) -> RegistryAuth {
    RegistryAuth::Basic(registry.credentials.0.clone(), registry.credentials.1.clone())
}

fn puller(registry: &TestRegistry, cache: Option<BlobCache>) -> Result<Puller> {
    let config = PullConfig { ca_pem: vec![registry.ca_pem.clone()], timeout: Duration::from_secs(20), ..PullConfig::default() };
    Puller::new(config, cache).map_err(anyhow::Error::msg)
}

/// Push `wasm` to `repo:tag`; its digest.
async fn push(registry: &TestRegistry, repo: &str, tag: &str, wasm: &[u8]) -> Result<String> {
    let p = puller(registry, None)?;
    let r = OciRef::parse(&registry.reference(repo, &format!(":{tag}")))?;
    Ok(oci::push::push_wasm(p.client(), &r, &auth(registry), wasm).await?)
}

/// Sign `repo@digest` with `key` (cosign's format).
async fn sign(registry: &TestRegistry, repo: &str, digest: &str, key: &str) -> Result<()> {
    let p = puller(registry, None)?;
    let r = OciRef::parse(&registry.reference(repo, &format!("@{digest}")))?;
    oci::push::sign(p.client(), &r, &auth(registry), digest, key).await?;
    Ok(())
}

async fn start_manager(host: &Host, ns: &str, registry: &TestRegistry, cache: &Path) -> Result<PluginManager> {
    start_manager_limited(host, ns, registry, cache, wasmloop::plugin::ByteSize::mib(1)).await
}

async fn start_manager_limited(
    host: &Host,
    ns: &str,
    registry: &TestRegistry,
    cache: &Path,
    max_component_size: wasmloop::plugin::ByteSize,
) -> Result<PluginManager> {
    let engine = tokio::task::spawn_blocking(wasmloop::plugin::PluginEngine::new).await??;
    let config = PluginManagerConfig {
        shutdown_grace: Duration::from_secs(2),
        max_component_size,
        oci: OciSettings {
            pull: PullConfig { ca_pem: vec![registry.ca_pem.clone()], timeout: Duration::from_secs(10), ..PullConfig::default() },
            cache_dir: Some(cache.to_path_buf()),
            trust: TrustPolicy::default(),
        },
        wait: wasmloop::hotload::WaitPolicy {
            first_retry: Duration::from_millis(200),
            max_retry: Duration::from_secs(1),
            settle: Duration::from_millis(200),
        },
        ..PluginManagerConfig::new(Some(ns.to_string()))
    };
    Ok(PluginManager::start(engine, host.shared(), host.executor.clone(), PluginMetrics::unregistered(), config).await?)
}

/// The plugin ConfigMap `podset` in `ns`, its manifest pulling `reference` (`note` makes a new
/// content of the same reference).
async fn apply_oci_plugin(client: &Client, (ns, work): (&str, &str), reference: &str, public_key: &str, note: &str) -> Result<()> {
    let key = public_key.trim().replace('\n', "\\n");
    let extra = format!("namespace: {work}\noci:\n  ref: {reference}\n  pullSecret: regcred\n  signedBy: [\"{key}\"]\n# {note}");
    let manifest = sharded_podset_manifest(&[work.to_string()], 1, &extra);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("podset".into());
    cm.metadata.labels = Some(BTreeMap::from([("wasmloop.dev/plugin".to_string(), "true".to_string())]));
    cm.data = Some(BTreeMap::from([("plugin.yaml".to_string(), manifest)]));
    apply_configmap(client, ns, cm).await
}

async fn status(client: &Client, ns: &str) -> Result<Value> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns).get("podset").await?;
    let text = cm.metadata.annotations.unwrap_or_default().get("wasmloop.dev/status").cloned().unwrap_or_else(|| "null".into());
    Ok(serde_json::from_str(&text)?)
}

/// Wait for a status in `state` whose message contains `says`, while `serving` serves.
async fn until(client: &Client, ns: &str, state: &str, says: &str, serving: &str) -> Result<Value> {
    let last = parking_lot::Mutex::new(Value::Null);
    let found = eventually(&format!("{state} ({says}) while {serving} serves"), Duration::from_secs(60), || async {
        let s = status(client, ns).await?;
        let text = s.to_string();
        *last.lock() = s.clone();
        // A loaded version names itself; a refused or waiting content names what still serves.
        let serves = match s["state"].as_str() {
            Some("Loaded") => format!("{} {}", s["plugin"].as_str().unwrap_or_default(), s["version"].as_str().unwrap_or_default()),
            _ => s["serving"].as_str().unwrap_or_default().to_string(),
        };
        Ok((s["state"] == state && text.contains(says) && serves == serving).then_some(s))
    })
    .await;
    found.with_context(|| format!("last status: {}", last.lock()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_artifact_serves_and_every_hostile_input_keeps_the_last_good() -> Result<()> {
    init_tracing();
    let registry = TestRegistry::start()?;
    let host = Host::new().await?;
    ensure_podset_crd(&host.client).await?;
    let ns = TestNamespace::create(&host.client, "oci").await?;
    let n = ns.name.clone();
    let work = TestNamespace::create(&host.client, "oci-work").await?;
    let w = work.name.clone();
    let keys = tempfile::tempdir()?;
    let (private, public) = p256_key_pair(keys.path(), "trusted")?;
    let (foreign, _) = p256_key_pair(keys.path(), "foreign")?;
    let mut secret = Secret::default();
    secret.metadata.name = Some("regcred".into());
    secret.type_ = Some("kubernetes.io/dockerconfigjson".into());
    secret.data = Some(BTreeMap::from([(".dockerconfigjson".to_string(), ByteString(registry.docker_config.clone()))]));
    Api::<Secret>::namespaced(host.client.clone(), &n).create(&PostParams::default(), &secret).await?;

    // v1, signed: it serves and reconciles.
    let v1 = push(&registry, "plugins/podset", "v1", &std::fs::read(plugin_path("podset")?)?).await?;
    sign(&registry, "plugins/podset", &v1, &private).await?;
    let cache = tempfile::tempdir()?;
    let manager = start_manager(&host, &n, &registry, cache.path()).await?;
    apply_oci_plugin(&host.client, (&n, &w), &registry.reference("plugins/podset", &format!("@{v1}")), &public, "v1").await?;
    let s = until(&host.client, &n, "Loaded", "", "podset 0.1.0").await?;
    ensure!(s["payload"].as_str().is_some_and(|p| p.ends_with(&v1)), "the status names the artifact: {s}");
    create_podset(&host.client, &w, "a", 2).await?;
    converged(&host.client, &w, &[("a".to_string(), 2)].into()).await?;

    // v2 unsigned, then signed by a foreign key: refused by name, v1 serves.
    let v2 = push(&registry, "plugins/podset", "v2", &std::fs::read(plugin_path("podset-v2")?)?).await?;
    let v2_ref = registry.reference("plugins/podset", &format!("@{v2}"));
    apply_oci_plugin(&host.client, (&n, &w), &v2_ref, &public, "unsigned").await?;
    until(&host.client, &n, "Rejected", "is unsigned", "podset 0.1.0").await?;
    sign(&registry, "plugins/podset", &v2, &foreign).await?;
    apply_oci_plugin(&host.client, (&n, &w), &v2_ref, &public, "foreign").await?;
    until(&host.client, &n, "Rejected", "signed by none of the trusted keys", "podset 0.1.0").await?;

    // A blob corrupted in the registry's storage: digest mismatch.
    let v3_wasm = std::fs::read(plugin_path("podset-off-by-one")?)?;
    let v3 = push(&registry, "plugins/podset", "v3", &v3_wasm).await?;
    sign(&registry, "plugins/podset", &v3, &private).await?;
    let blob = registry.blob_file(&oci::digest_of(&v3_wasm));
    let mut bytes = std::fs::read(&blob).with_context(|| blob.display().to_string())?;
    bytes[1000] ^= 0xff;
    std::fs::write(&blob, bytes)?;
    apply_oci_plugin(&host.client, (&n, &w), &registry.reference("plugins/podset", &format!("@{v3}")), &public, "corrupt").await?;
    until(&host.client, &n, "Rejected", "digest mismatch for the layer", "podset 0.1.0").await?;

    // A layer over the host's 1 MiB limit: refused by its descriptor.
    let big = push(&registry, "plugins/big", "v1", &std::fs::read(plugin_path("namespace-config-ts")?)?).await?;
    apply_oci_plugin(&host.client, (&n, &w), &registry.reference("plugins/big", &format!("@{big}")), &public, "big").await?;
    until(&host.client, &n, "Rejected", "over the 1048576-byte limit", "podset 0.1.0").await?;

    // A manifest list (an OCI index of v1).
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": oci::OCI_INDEX_MEDIA_TYPE,
        "manifests": [{"mediaType": oci::OCI_MANIFEST_MEDIA_TYPE, "digest": v1, "size": 1}]
    }))?;
    let p = puller(&registry, None)?;
    let list_ref = OciRef::parse(&registry.reference("plugins/podset", ":list"))?;
    let list = oci::push::push_raw(p.client(), &list_ref, &auth(&registry), &[], index, oci::OCI_INDEX_MEDIA_TYPE).await?;
    apply_oci_plugin(&host.client, (&n, &w), &registry.reference("plugins/podset", &format!("@{list}")), &public, "list").await?;
    until(&host.client, &n, "Rejected", "is a manifest list", "podset 0.1.0").await?;

    // A tag: resolved once (to v1). Moved to v2 (signed by the trusted key now) under the
    // serving plugin, a restarted host still serves v1's digest.
    sign(&registry, "plugins/podset", &v2, &private).await?;
    push(&registry, "plugins/podset", "stable", &std::fs::read(plugin_path("podset")?)?).await?;
    apply_oci_plugin(&host.client, (&n, &w), &registry.reference("plugins/podset", ":stable"), &public, "tag").await?;
    let s = until(&host.client, &n, "Loaded", "", "podset 0.1.0").await?;
    ensure!(s["payload"].as_str().is_some_and(|p| p.ends_with(&v1)), "the tag's digest is recorded: {s}");
    push(&registry, "plugins/podset", "stable", &std::fs::read(plugin_path("podset-v2")?)?).await?;
    manager.shutdown().await;
    let manager = start_manager(&host, &n, &registry, cache.path()).await?;
    let s = until(&host.client, &n, "Loaded", "", "podset 0.1.0").await?;
    ensure!(s["payload"].as_str().is_some_and(|p| p.ends_with(&v1)), "the moved tag is not followed: {s}");

    // The registry down: v2 (not pulled before) waits; v1 serves and reconciles; back up, v2 loads.
    registry.kill()?;
    apply_oci_plugin(&host.client, (&n, &w), &v2_ref, &public, "down").await?;
    until(&host.client, &n, "Waiting", "unreachable", "podset 0.1.0").await?;
    create_podset(&host.client, &w, "b", 1).await?;
    converged(&host.client, &w, &[("a".to_string(), 2), ("b".to_string(), 1)].into()).await?;
    registry.restart()?;
    until(&host.client, &n, "Loaded", "", "podset 0.2.0").await?;

    // A host restarted with the registry down serves v2 from its blob cache.
    manager.shutdown().await;
    registry.kill()?;
    let started = Instant::now();
    let manager = start_manager(&host, &n, &registry, cache.path()).await?;
    let s = until(&host.client, &n, "Loaded", "", "podset 0.2.0").await?;
    eprintln!("restart with the registry down: serving from the blob cache after {:?} ({s})", started.elapsed());
    manager.shutdown().await;
    registry.restart()?;
    work.cleanup().await?;
    ns.cleanup().await
}

/// The guide's Python plugin (18 MB) through the registry: pull and verify times, cold and from
/// the cache (with the registry down), then loaded by a host from the registry and reconciling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_plugin_through_the_registry_cold_cached_and_loaded() -> Result<()> {
    init_tracing();
    let registry = TestRegistry::start()?;
    let wasm = std::fs::read(plugin_path("namespace-config-py")?)?;
    let keys = tempfile::tempdir()?;
    let (private, public) = p256_key_pair(keys.path(), "k")?;
    let started = Instant::now();
    let digest = push(&registry, "plugins/py", "v1", &wasm).await?;
    let push_time = started.elapsed();
    sign(&registry, "plugins/py", &digest, &private).await?;
    let policy = TrustPolicy::from_pems(&[public])?;
    let cache_dir = tempfile::tempdir()?;
    let reference = OciRef::parse(&registry.reference("plugins/py", &format!("@{digest}")))?;
    let cold = puller(&registry, Some(BlobCache::new(cache_dir.path())?))?.pull(&reference, &auth(&registry), &policy).await?;
    ensure!(cold.wasm == wasm && cold.fetched == 4, "cold: manifest, signature manifest, payload, layer ({} fetched)", cold.fetched);
    // A new puller (a restarted host) on the same cache, with the registry down.
    registry.kill()?;
    let warm = puller(&registry, Some(BlobCache::new(cache_dir.path())?))?.pull(&reference, &auth(&registry), &policy).await?;
    ensure!(warm.wasm == wasm && warm.fetched == 0, "warm: nothing fetched ({})", warm.fetched);
    // Without the cache and with the registry down, the pull fails as transient.
    let err = puller(&registry, None)?.pull(&reference, &auth(&registry), &policy).await.unwrap_err();
    ensure!(err.is_transient(), "{err}");
    registry.restart()?;

    // The guide's Python plugin delivered through the registry into a host: it loads and reconciles.
    let host = Host::new().await?;
    let plugins = TestNamespace::create(&host.client, "oci-py").await?;
    let mut secret = Secret::default();
    secret.metadata.name = Some("regcred".into());
    secret.type_ = Some("kubernetes.io/dockerconfigjson".into());
    secret.data = Some(BTreeMap::from([(".dockerconfigjson".to_string(), ByteString(registry.docker_config.clone()))]));
    Api::<Secret>::namespaced(host.client.clone(), &plugins.name).create(&PostParams::default(), &secret).await?;
    let manifest = std::fs::read_to_string(wasmloop_tests::workspace_root().join("deploy/plugins/namespace-config.plugin.yaml"))?;
    let key = std::fs::read_to_string(keys.path().join("k.pub"))?.trim().replace('\n', "\\n");
    let manifest = format!(
        "{}\noci:\n  ref: {}\n  pullSecret: regcred\n  signedBy: [\"{key}\"]\n",
        manifest.trim_end(),
        registry.reference("plugins/py", &format!("@{digest}"))
    );
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("namespace-config".into());
    cm.metadata.labels = Some(BTreeMap::from([("wasmloop.dev/plugin".to_string(), "true".to_string())]));
    cm.data = Some(BTreeMap::from([("plugin.yaml".to_string(), manifest)]));
    let host_cache = tempfile::tempdir()?;
    let manager = start_manager_limited(&host, &plugins.name, &registry, host_cache.path(), wasmloop::plugin::ByteSize::mib(32)).await?;
    let loading = Instant::now();
    apply_configmap(&host.client, &plugins.name, cm).await?;
    let s = eventually("the Python plugin loaded from the registry", Duration::from_secs(180), || async {
        let cm = Api::<ConfigMap>::namespaced(host.client.clone(), &plugins.name).get("namespace-config").await?;
        let text = cm.metadata.annotations.unwrap_or_default().get("wasmloop.dev/status").cloned().unwrap_or_else(|| "null".into());
        let s: Value = serde_json::from_str(&text)?;
        ensure!(s["state"] != "Rejected", "refused: {s}");
        Ok((s["state"] == "Loaded").then_some(s))
    })
    .await?;
    let load_time = loading.elapsed();
    ensure!(s["payload"].as_str().is_some_and(|p| p.ends_with(&digest)), "{s}");
    let labelled = format!("oci-py-target-{}", &plugins.name[plugins.name.len() - 8..]);
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(host.client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": labelled, "labels": {"wasmloop.dev/config": "gold"}}}))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    eventually("the Python plugin's ConfigMap in the labelled Namespace", Duration::from_secs(60), || async {
        Ok(Api::<ConfigMap>::namespaced(host.client.clone(), &labelled).get_opt("wasmloop-config").await?.map(|_| ()))
    })
    .await?;
    namespaces.delete(&labelled, &Default::default()).await?;
    manager.shutdown().await;
    plugins.cleanup().await?;
    eprintln!("python plugin: loaded by the host from the registry (pull + verify + compile) in {load_time:?}");
    eprintln!(
        "python plugin {} bytes: push {push_time:?}; cold pull {:?} (signature {:?}); cached pull {:?} (signature {:?}); registry down: {err}",
        wasm.len(),
        cold.elapsed,
        cold.verify_elapsed,
        warm.elapsed,
        warm.verify_elapsed
    );
    Ok(())
}

/// A registry that accepts connections and never answers (a tarpit: fault injection the real
/// registry cannot do): resolving a tag and pulling a digest both give up after the time-out, as
/// transient errors (the host waits and tries again, the last good version serving).
#[tokio::test]
async fn a_registry_that_never_answers_times_out() -> Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let tarpit = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((connection, _)) = listener.accept().await {
            held.push(connection);
        }
    });
    let puller = Puller::new(PullConfig { timeout: Duration::from_secs(1), ..PullConfig::default() }, None).map_err(anyhow::Error::msg)?;
    let policy = TrustPolicy::default();
    let pinned = OciRef::parse(&format!("oci://{address}/plugins/x@sha256:{}", "0".repeat(64)))?;
    let tagged = OciRef::parse(&format!("oci://{address}/plugins/x:v1"))?;
    for what in ["pull", "resolve"] {
        let started = Instant::now();
        let result = match what {
            "pull" => puller.pull(&pinned, &RegistryAuth::Anonymous, &policy).await.map(|_| ()),
            _ => puller.resolve(&tagged, &RegistryAuth::Anonymous, None).await.map(|_| ()),
        };
        let took = started.elapsed();
        let err = result.err().with_context(|| format!("{what}: a tarpit answered"))?;
        // The whole pull's time-out, or the connection's read time-out (the same length) first.
        let timed_out = matches!(err, oci::pull::Error::TimedOut { .. }) || err.to_string().contains("timed out");
        ensure!(timed_out && err.is_transient(), "{what}: {err}");
        ensure!(took < Duration::from_secs(5), "{what} gave up after {took:?}");
    }
    tarpit.abort();
    Ok(())
}

/// A registry that redirects the manifest to another host (a fake one, over plain HTTP: the real
/// registry only redirects to its storage backend): refused by name, not followed, not retried.
#[tokio::test]
async fn a_registry_that_redirects_elsewhere_is_refused() -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let requests = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let seen = requests.clone();
    let fake = tokio::spawn(async move {
        while let Ok((mut connection, _)) = listener.accept().await {
            let mut buffer = vec![0u8; 8192];
            let n = connection.read(&mut buffer).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&buffer[..n]).lines().next().unwrap_or_default().to_string();
            let answer = if request.starts_with("GET /v2/ ") {
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
            } else {
                format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.2:{}/elsewhere\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    address.port()
                )
            };
            seen.lock().push(request);
            let _ = connection.write_all(answer.as_bytes()).await;
        }
    });
    let config = PullConfig { insecure_http: true, timeout: Duration::from_secs(5), ..PullConfig::default() };
    let puller = Puller::new(config, None).map_err(anyhow::Error::msg)?;
    let pinned = OciRef::parse(&format!("oci://{address}/plugins/x@sha256:{}", "0".repeat(64)))?;
    let err = puller.pull(&pinned, &RegistryAuth::Anonymous, &TrustPolicy::default()).await.err().context("a redirect was followed")?;
    ensure!(matches!(err, oci::pull::Error::Refused { .. }) && !err.is_transient(), "{err}");
    ensure!(err.to_string().contains("redirected to another host (127.0.0.2)"), "{err}");
    ensure!(requests.lock().iter().any(|r| r.contains("/manifests/")), "the manifest was asked for: {:?}", requests.lock());
    fake.abort();
    Ok(())
}
