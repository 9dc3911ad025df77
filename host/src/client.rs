//! The Kubernetes API client: kubeconfig or in-cluster config, plus request and response counters.
//!
//! Every request the host sends goes through [`ApiRequests`], so tests (and `/metrics`) can prove
//! that cache reads and resyncs never reach the API server. Retries of 429, 503 and 504 answers
//! happen in the client, honouring `Retry-After` (kube's own `RetryPolicy::server_retry`), and
//! every answer, retried or final, is counted by status code: an API server that throttles or
//! fails shows in `wasmloop_api_responses_total` even when a retry then succeeds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kube::client::retry::RetryPolicy;
use kube::client::{ClientBuilder, DynBody};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;
use tower::util::{MapRequestLayer, MapResponseLayer};

/// Errors building the client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig file named does not read or parse.
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file's path.
        path: String,
        /// What is wrong with it.
        source: kube::config::KubeconfigError,
    },
    /// Neither `KUBECONFIG`, `~/.kube/config` nor the in-cluster environment gives a configuration.
    #[error("no Kubernetes configuration found (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The configuration does not make a client (bad TLS material, for one).
    #[error("cannot build the API client: {0}")]
    Build(#[from] kube::Error),
    /// An executor made without a [`Connection`] was asked to act as another identity.
    #[error("no connection to impersonate with (Executor::with_connection was not called)")]
    NoConnection,
}

/// A result whose error is the client's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Counts requests sent to the API server, by verb (method + whether it is a watch), and the
/// answers to every attempt, by status code.
#[derive(Clone, Default, Debug)]
pub struct ApiRequests(Arc<Counts>);

#[derive(Default, Debug)]
struct Counts {
    get: AtomicU64,
    list: AtomicU64,
    watch: AtomicU64,
    write: AtomicU64,
    requests: Family<VerbLabel, Counter>,
    responses: Family<CodeLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabel {
    verb: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: u16,
}

/// A snapshot of [`ApiRequests`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// GETs of one object.
    pub get: u64,
    /// GETs of a collection, not watching.
    pub list: u64,
    /// Watches (long-running GETs of a collection).
    pub watch: u64,
    /// POST, PUT, PATCH and DELETE.
    pub write: u64,
}

impl RequestCounts {
    /// Every request, of any verb.
    pub fn total(&self) -> u64 {
        self.get + self.list + self.watch + self.write
    }
    /// Requests that read objects (get + list), excluding long-running watches.
    pub fn reads(&self) -> u64 {
        self.get + self.list
    }
}

impl ApiRequests {
    /// The counts so far.
    pub fn snapshot(&self) -> RequestCounts {
        let c = &self.0;
        RequestCounts {
            get: c.get.load(Ordering::Relaxed),
            list: c.list.load(Ordering::Relaxed),
            watch: c.watch.load(Ordering::Relaxed),
            write: c.write.load(Ordering::Relaxed),
        }
    }

    /// Answers by status code so far (every attempt, retried or final).
    pub fn responses(&self, code: u16) -> u64 {
        self.0.responses.get_or_create(&CodeLabel { code }).get()
    }

    /// `wasmloop_api_requests_total{verb}` and `wasmloop_api_responses_total{code}`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "wasmloop_api_requests",
            "Requests sent to the API server, by verb (get, list, watch, write)",
            self.0.requests.clone(),
        );
        registry.register(
            "wasmloop_api_responses",
            "Answers from the API server by status code, every attempt (429/503/504 are retried in the client)",
            self.0.responses.clone(),
        );
    }

    fn record<B>(&self, req: &http::Request<B>) {
        let c = &self.0;
        let (counter, verb) = match *req.method() {
            http::Method::GET => {
                let q = req.uri().query().unwrap_or("");
                if q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1") {
                    (&c.watch, "watch")
                } else if is_collection(req.uri().path()) {
                    (&c.list, "list")
                } else {
                    (&c.get, "get")
                }
            }
            _ => (&c.write, "write"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        c.requests.get_or_create(&VerbLabel { verb }).inc();
    }

    fn record_response<B>(&self, res: &http::Response<B>) {
        self.0.responses.get_or_create(&CodeLabel { code: res.status().as_u16() }).inc();
    }
}

/// `/api/v1/namespaces/x/pods` is a collection; `/api/v1/namespaces/x/pods/p` an object.
/// Discovery documents (`/api`, `/apis/apps/v1`) count as gets.
pub fn is_collection(path: &str) -> bool {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.first() {
        Some(&"api") => &segs[segs.len().min(2)..],
        Some(&"apis") => &segs[segs.len().min(3)..],
        _ => return false,
    };
    match rest {
        [] => false,
        ["namespaces", _, _res] => true,
        ["namespaces", _, _res, ..] => false,
        [_res] => true,
        _ => false,
    }
}

/// A client from `kubeconfig` (a path) or, when `None`, inferred from the environment
/// (KUBECONFIG, ~/.kube/config, in-cluster service account).
pub async fn build(kubeconfig: Option<&str>) -> Result<(Client, ApiRequests)> {
    let connection = Connection::new(kubeconfig).await?;
    Ok((connection.client.clone(), connection.requests.clone()))
}

/// The host's connection to the API server: its client, and what it takes to make clients that
/// act as another identity (impersonation) over the same credentials, counted alike.
#[derive(Clone)]
pub struct Connection {
    config: Config,
    client: Client,
    requests: ApiRequests,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("cluster_url", &self.config.cluster_url).finish_non_exhaustive()
    }
}

impl Connection {
    /// Connect with `kubeconfig` (a path) or, when `None`, the environment's configuration.
    pub async fn new(kubeconfig: Option<&str>) -> Result<Self> {
        let config = match kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig { path: path.to_string(), source })?;
                Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .map_err(|source| Error::Kubeconfig { path: path.to_string(), source })?
            }
            None => Config::infer().await?,
        };
        let requests = ApiRequests::default();
        let client = from_config(config.clone(), &requests)?;
        Ok(Self { config, client, requests })
    }

    /// The host's own client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The counter every client of this connection reports to.
    pub fn requests(&self) -> &ApiRequests {
        &self.requests
    }

    /// A client that sends `Impersonate-User: <user>` (and no groups: for a ServiceAccount the
    /// API server then adds its groups itself) with the host's credentials.
    pub fn impersonating(&self, user: &str) -> Result<Client> {
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(user.to_owned());
        config.auth_info.impersonate_groups = None;
        from_config(config, &self.requests)
    }
}

/// A counting client from an explicit config. kube's retry layer is moved above the response
/// counter (it sits outside everything by default), so every attempt's answer is counted.
fn from_config(mut config: Config, requests: &ApiRequests) -> Result<Client> {
    config.default_retry = false;
    let (counter, answers) = (requests.clone(), requests.clone());
    let client = ClientBuilder::try_from(config)?
        .with_layer(&MapResponseLayer::new(move |res: http::Response<Box<DynBody>>| {
            answers.record_response(&res);
            res
        }))
        // The retry layer clones its inner service; a buffer makes the boxed stack cloneable.
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
        .with_layer(&MapRequestLayer::new(move |req: http::Request<_>| {
            counter.record(&req);
            req
        }))
        .build();
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::is_collection;

    #[test]
    fn collections_and_objects_are_told_apart() {
        assert!(is_collection("/api/v1/pods"));
        assert!(is_collection("/api/v1/namespaces/a/pods"));
        assert!(!is_collection("/api/v1/namespaces/a/pods/p"));
        assert!(!is_collection("/api/v1/namespaces/a/pods/p/status"));
        assert!(is_collection("/apis/apps/v1/replicasets"));
        assert!(is_collection("/apis/apps/v1/namespaces/x/replicasets"));
        assert!(!is_collection("/apis/apps/v1/namespaces/x/replicasets/r"));
        assert!(!is_collection("/apis/apps/v1"));
        assert!(!is_collection("/api/v1"));
        assert!(is_collection("/api/v1/namespaces"));
        assert!(!is_collection("/version"));
    }
}
