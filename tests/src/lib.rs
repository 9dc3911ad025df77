//! Test harness: one real kube-apiserver + etcd per test run, a fresh namespace per test.
//!
//! `./scripts/test.sh` starts one control plane for the whole run and points
//! `WASMLOOP_TEST_KUBECONFIG` at it. Without that variable (e.g. `cargo test` alone), the first
//! test in each test binary starts a private control plane with `scripts/control-plane.sh`, and a
//! small reaper process stops it when the test binary exits, so nothing is left running.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};

/// The workspace root (where `scripts/` lives).
pub mod cluster;
pub mod driver;
pub mod fault_proxy;
pub mod hostile;
pub mod kcm;
pub mod kubelet;
pub mod registry;

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// The kubeconfig of this run's control plane, starting one if needed.
pub fn kubeconfig() -> Result<PathBuf> {
    static KUBECONFIG: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    KUBECONFIG.get_or_init(|| start_or_reuse().map_err(|e| format!("{e:#}"))).clone().map_err(|e| anyhow::anyhow!(e))
}

fn start_or_reuse() -> Result<PathBuf> {
    if let Ok(path) = std::env::var("WASMLOOP_TEST_KUBECONFIG") {
        let path = PathBuf::from(path);
        if !path.exists() {
            bail!("WASMLOOP_TEST_KUBECONFIG points at {}, which does not exist", path.display());
        }
        return Ok(path);
    }
    let script = workspace_root().join("scripts/control-plane.sh");
    let out =
        Command::new(&script).arg("start").stderr(Stdio::inherit()).output().with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} start failed (run `{} build` first?)", script.display(), script.display());
    }
    let dir = String::from_utf8(out.stdout)?.trim().to_string();
    // Reaper: stop the control plane when this test process exits.
    let pid = std::process::id();
    Command::new("sh")
        .arg("-c")
        .arg(format!("while kill -0 {pid} 2>/dev/null; do sleep 1; done; '{}' stop '{dir}' >/dev/null 2>&1", script.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the control-plane reaper")?;
    Ok(PathBuf::from(dir).join("kubeconfig"))
}

/// A client for this run's control plane, with the host's request counter.
pub async fn client() -> Result<(Client, wasmloop::client::ApiRequests)> {
    let kc = kubeconfig()?;
    Ok(wasmloop::client::build(Some(kc.to_str().context("kubeconfig path is not UTF-8")?)).await?)
}

/// A namespace of its own for one test; `cleanup` deletes it.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl TestNamespace {
    /// Create `<prefix>-<random>` (prefix trimmed to a valid length).
    pub async fn create(client: &Client, prefix: &str) -> Result<Self> {
        let suffix: String = format!("{:08x}", rand_u32());
        let mut prefix: String = prefix.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
        prefix.truncate(40);
        let name = format!("{}-{suffix}", prefix.trim_end_matches('-'));
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(Self { name, client: client.clone() })
    }

    /// Delete the namespace (objects in it are garbage-collected by the apiserver's namespace
    /// lifecycle only when a controller manager runs; the control plane is per run anyway).
    pub async fn cleanup(self) -> Result<()> {
        Api::<Namespace>::all(self.client).delete(&self.name, &DeleteParams::default()).await?;
        Ok(())
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.finish() as u32
}

/// Poll `check` every 50 ms until it returns `Some`, or fail after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            match last_err {
                Some(e) => bail!("timed out after {timeout:?} waiting for {what}; last error: {e:#}"),
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Log to the test output (`RUST_LOG` filters; default warnings only).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}

/// The host's runtime parts wired to this run's control plane.
pub struct Host {
    pub client: Client,
    pub requests: wasmloop::client::ApiRequests,
    pub registry: wasmloop::informer::InformerRegistry,
    /// Writes with the host's own credentials; `executor.acting_as(..)` makes one that
    /// impersonates a plugin's ServiceAccount.
    pub executor: wasmloop::executor::Executor,
    pub metrics: wasmloop::controller::ControllerMetrics,
}

impl Host {
    /// The host's parts with the admin credentials of the test control plane.
    pub async fn new() -> Result<Self> {
        let kc = kubeconfig()?;
        Self::with_kubeconfig(&kc).await
    }

    /// The host's parts with the credentials of `kubeconfig` (e.g. from [`sa_kubeconfig`]).
    pub async fn with_kubeconfig(kubeconfig: &Path) -> Result<Self> {
        let path = kubeconfig.to_str().context("kubeconfig path is not UTF-8")?;
        let connection = wasmloop::client::Connection::new(Some(path)).await?;
        let (client, requests) = (connection.client().clone(), connection.requests().clone());
        let resolver = wasmloop::kinds::KindResolver::new(client.clone());
        Ok(Self {
            registry: wasmloop::informer::InformerRegistry::new(resolver.clone()),
            executor: wasmloop::executor::Executor::new(resolver, Some("test".into())).with_connection(connection),
            metrics: wasmloop::controller::ControllerMetrics::unregistered(),
            client,
            requests,
        })
    }

    /// What its controllers share, with the protected objects a host without a cluster identity
    /// has (plugin ConfigMaps and labels) and no leader election.
    pub fn shared(&self) -> wasmloop::controller::Shared {
        wasmloop::controller::Shared::new(self.registry.clone(), self.metrics.clone())
    }

    /// What its controllers share, protecting `protected`.
    pub fn shared_with(&self, protected: wasmloop::admission::Protected) -> wasmloop::controller::Shared {
        let scopes = wasmloop::admission::Scopes::Discovery(self.registry.resolver().clone());
        self.shared().with_admission(wasmloop::admission::Admission::new(scopes, protected))
    }

    /// Start a controller for `reconciler` with all grants, scoped to `namespace`.
    pub async fn start(
        &self,
        reconciler: std::sync::Arc<dyn wasmloop::controller::Reconciler>,
        namespace: &str,
        tweak: impl FnOnce(&mut wasmloop::controller::ControllerConfig),
    ) -> Result<wasmloop::controller::Controller> {
        let mut config = wasmloop::controller::ControllerConfig { namespace: Some(namespace.to_string()), ..Default::default() };
        tweak(&mut config);
        Ok(wasmloop::controller::Controller::start(
            reconciler,
            config,
            std::sync::Arc::new(wasmloop::grants::Grants::all()),
            self.shared(),
            self.executor.clone(),
        )
        .await?)
    }
}

/// A built plugin component: `$WASMLOOP_PLUGIN_DIR/<name>.wasm`, default
/// `<workspace>/target/wasm32-wasip2/plugin/`. Missing → an error saying how to build it.
pub fn plugin_path(name: &str) -> Result<PathBuf> {
    let dir =
        std::env::var_os("WASMLOOP_PLUGIN_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target/wasm32-wasip2/plugin"));
    let path = dir.join(format!("{}.wasm", name.replace('-', "_")));
    if !path.exists() {
        bail!("{} is missing: run scripts/build-plugins.sh and scripts/build-test-plugins.sh first", path.display());
    }
    Ok(path)
}

/// Install (or update) the PodSet CRD from `deploy/crds/podset.yaml` and wait until it is served.
pub async fn ensure_podset_crd(client: &Client) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    let text = std::fs::read_to_string(workspace_root().join("deploy/crds/podset.yaml"))?;
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)?;
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd.metadata.name.clone().context("CRD without a name")?;
    api.patch(&name, &PatchParams::apply("wasmloop-tests").force(), &Patch::Apply(&crd)).await?;
    eventually("the PodSet CRD to be established", Duration::from_secs(60), || {
        let api = api.clone();
        let name = name.clone();
        async move {
            let crd = api.get(&name).await?;
            let established =
                crd.status.and_then(|s| s.conditions).unwrap_or_default().iter().any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        }
    })
    .await?;
    // Discovery can lag the Established condition by a moment.
    let kind = wasmloop::kinds::KindRef::new("wasmloop.dev/v1alpha1", "PodSet");
    eventually("PodSet in discovery", Duration::from_secs(30), || {
        let resolver = wasmloop::kinds::KindResolver::new(client.clone());
        let kind = kind.clone();
        async move { Ok(resolver.resolve(&kind).await.ok().map(|_| ())) }
    })
    .await
}

/// Pack `wasm` with `manifest` into the plugin ConfigMap `name` in `namespace` and apply it
/// (server-side apply, so a later call replaces the payload).
pub async fn apply_plugin(client: &Client, namespace: &str, name: &str, wasm: &[u8], manifest: &str) -> Result<()> {
    use wasmloop::hotload::pack;
    let packed = pack::pack(pack::PackInput {
        wasm,
        path: name,
        manifest: manifest.to_string(),
        name: name.to_string(),
        namespace: Some(namespace.to_string()),
    })?;
    apply_configmap(client, namespace, packed.config_map).await
}

/// Pack `wasm` with `manifest` as `wasmloop pack` does — immutable payload ConfigMap(s) and the
/// plugin ConfigMap `name` referencing them — and apply them in that order, in `namespace`.
pub async fn apply_plugin_referenced(client: &Client, namespace: &str, name: &str, wasm: &[u8], manifest: &str) -> Result<()> {
    use wasmloop::hotload::pack;
    let packed = pack::pack_referenced(pack::PackInput {
        wasm,
        path: name,
        manifest: manifest.to_string(),
        name: name.to_string(),
        namespace: Some(namespace.to_string()),
    })?;
    for payload in packed.payloads {
        apply_configmap(client, namespace, payload).await?;
    }
    apply_configmap(client, namespace, packed.plugin).await
}

/// Server-side apply of a ConfigMap, owned by the tests' field manager.
pub async fn apply_configmap(client: &Client, namespace: &str, mut cm: k8s_openapi::api::core::v1::ConfigMap) -> Result<()> {
    use kube::api::{Patch, PatchParams};
    let name = cm.metadata.name.clone().context("ConfigMap without a name")?;
    cm.metadata.namespace = Some(namespace.to_string());
    let mut value = serde_json::to_value(&cm)?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "ConfigMap".into();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), namespace)
        .patch(&name, &PatchParams::apply("wasmloop-tests").force(), &Patch::Apply(&value))
        .await?;
    Ok(())
}

/// A kubeconfig for ServiceAccount `ns/sa`: a token from the TokenRequest API, the server and CA
/// of the admin kubeconfig. Written to `dir/<sa>.kubeconfig`.
pub async fn sa_kubeconfig(admin: &Client, ns: &str, sa: &str, dir: &Path) -> Result<PathBuf> {
    sa_kubeconfig_of(&kubeconfig()?, admin, ns, sa, dir).await
}

/// [`sa_kubeconfig`] on the control plane of `admin_kubeconfig` (`admin` is a client of it), for
/// test binaries that start a control plane of their own.
pub async fn sa_kubeconfig_of(admin_kubeconfig: &Path, admin: &Client, ns: &str, sa: &str, dir: &Path) -> Result<PathBuf> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), ..Default::default() },
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .with_context(|| format!("TokenRequest for {ns}/{sa}"))?
        .status
        .context("TokenRequest without status")?
        .token;
    let admin_kc = kube::config::Kubeconfig::read_from(admin_kubeconfig)?;
    let cluster = admin_kc.clusters.first().and_then(|c| c.cluster.clone()).context("admin kubeconfig without a cluster")?;
    let server = cluster.server.context("admin kubeconfig without a server")?;
    let ca = match (cluster.certificate_authority, cluster.certificate_authority_data) {
        (Some(path), _) => format!("certificate-authority: {path}"),
        (None, Some(data)) => format!("certificate-authority-data: {data}"),
        (None, None) => bail!("admin kubeconfig without a CA"),
    };
    let path = dir.join(format!("{sa}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    {ca}\n\
             users:\n- name: {sa}\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: {sa}}}\ncurrent-context: c\n"
        ),
    )?;
    Ok(path)
}

/// Load a built plugin with a manifest, as the hot-loader would, and start its controller.
pub async fn start_plugin(
    host: &Host,
    plugin: &str,
    manifest: &str,
) -> Result<(wasmloop::controller::Controller, std::sync::Arc<wasmloop::plugin::WasmPlugin>)> {
    let m = wasmloop::hotload::PluginManifest::parse(manifest, plugin)?;
    let bytes = std::fs::read(plugin_path(plugin)?)?;
    let (limits, grants) = (m.limits.clone(), m.grants.clone());
    let wasm = tokio::task::spawn_blocking(move || -> Result<wasmloop::plugin::WasmPlugin> {
        let engine = wasmloop::plugin::PluginEngine::new()?;
        Ok(wasmloop::plugin::WasmPlugin::load(&engine, &bytes, limits, grants)?)
    })
    .await??;
    let wasm = std::sync::Arc::new(wasm);
    let controller = wasmloop::controller::Controller::start(
        wasm.clone(),
        m.controller.clone(),
        wasm.grants().clone(),
        host.shared(),
        host.executor.clone(),
    )
    .await?;
    Ok((controller, wasm))
}

/// Admit `action` as a controller would (every grant, an empty cache, the minimal protected
/// objects) and execute it with `executor` as controller `manager`. Panics if admission refuses
/// it: for tests of the executor's own behaviour.
pub async fn admit_and_execute(
    executor: &wasmloop::executor::Executor,
    manager: &str,
    action: wasmloop::actions::Action,
) -> wasmloop::executor::Result<wasmloop::executor::Executed> {
    let grants = wasmloop::grants::Grants::all();
    let cache = wasmloop::cache::CacheView::new();
    let ctx =
        wasmloop::admission::Context { grants: &grants, cache: &cache, client: Some(executor.writer().client()), manager, budget: None };
    let planned = wasmloop::actions::Planned::new(action).unwrap_or_else(|e| panic!("an invalid test action: {e}"));
    let scopes = wasmloop::admission::Scopes::Discovery(wasmloop::kinds::KindResolver::new(executor.writer().client().clone()));
    let admission = wasmloop::admission::Admission::new(scopes, wasmloop::admission::Protected::minimal());
    let admitted = admission.admit(ctx, vec![planned]).await.unwrap_or_else(|e| panic!("admission refused a test action: {e}"));
    executor.execute(manager, &admitted.actions()[0], &wasmloop::fence::Fence::open()).await
}

/// An in-process plugin manager of plugins in `namespace` (`None`: all, with `home` as the host's
/// own), writing as each plugin's own account (impersonation, as `wasmloop run` does by default);
/// the host's account is `host_account` (ns, name). Retries of waiting plugins are fast.
pub async fn plugin_manager(
    host: &Host,
    namespace: Option<&str>,
    home: Option<&str>,
    host_account: (&str, &str),
) -> Result<wasmloop::hotload::PluginManager> {
    use wasmloop::hotload::{PluginManager, PluginManagerConfig, PluginMetrics};
    let hosts = wasmloop::admission::HostObjects {
        plugin_namespaces: namespace.map(|n| vec![n.to_string()]).unwrap_or_default(),
        lease_namespace: None,
        service_account: Some((host_account.0.to_string(), host_account.1.to_string())),
    };
    let shared = host.shared_with(wasmloop::admission::Protected::new(hosts, host.registry.clone()));
    let engine = tokio::task::spawn_blocking(wasmloop::plugin::PluginEngine::new).await??;
    let config = PluginManagerConfig {
        shutdown_grace: Duration::from_secs(5),
        plugin_identity: wasmloop::identity::PluginIdentity::Own,
        home_namespace: home.map(str::to_string),
        wait: wasmloop::hotload::WaitPolicy {
            first_retry: Duration::from_millis(200),
            max_retry: Duration::from_secs(1),
            settle: Duration::from_millis(200),
        },
        ..PluginManagerConfig::new(namespace.map(str::to_string))
    };
    Ok(PluginManager::start(engine, shared, host.executor.clone(), PluginMetrics::unregistered(), config).await?)
}

/// The next load event (loaded, waiting, rejected, removed) of plugin ConfigMap `configmap`,
/// within 60 s.
pub async fn next_load(
    events: &mut tokio::sync::broadcast::Receiver<wasmloop::hotload::LoadEvent>,
    configmap: &str,
) -> Result<wasmloop::hotload::LoadEvent> {
    use tokio::sync::broadcast::error::RecvError;
    use wasmloop::hotload::LoadEvent;
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match events.recv().await {
                Ok(e) => {
                    let (LoadEvent::Loaded { configmap: cm, .. }
                    | LoadEvent::Rejected { configmap: cm, .. }
                    | LoadEvent::Waiting { configmap: cm, .. }
                    | LoadEvent::Removed { configmap: cm, .. }) = &e;
                    if cm == configmap {
                        return Ok(e);
                    }
                }
                Err(RecvError::Lagged(_)) => continue,
                Err(e) => bail!("load events closed: {e}"),
            }
        }
    })
    .await
    .with_context(|| format!("waiting for a load event of {configmap}"))?
}
