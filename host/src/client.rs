//! The Kubernetes API client: kubeconfig or in-cluster config, plus request and response counters.
//!
//! The clients that write for plugins ([`Connection::impersonating`]) share one connection that
//! speaks HTTP/2 when the API server offers it (ALPN), as client-go's do: a burst of a hundred
//! writes goes out as streams of one TLS connection instead of a hundred new connections, each
//! costing the API server a TLS handshake (kube's own client speaks HTTP/1.1 only, one request
//! per connection at a time). The host's own client (its watches, Leases, Events) stays on
//! kube's HTTP/1.1 connections: a long-running watch holds a connection of its own and never
//! one of the streams an HTTP/2 connection may carry (250 by Go's default, and hyper, unlike
//! Go, opens no second connection when they are all taken).
//!
//! Every request the host sends goes through [`ApiRequests`], so tests (and `/metrics`) can prove
//! that cache reads and resyncs never reach the API server. Retries of 429, 503 and 504 answers
//! happen in the client, honouring `Retry-After` (kube's own `RetryPolicy::server_retry`), and
//! every answer, retried or final, is counted by status code: an API server that throttles or
//! fails shows in `wasmloop_api_responses_total` even when a retry then succeeds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper_util::client::legacy::connect::{Connection as _, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;
use tower::util::{BoxService, MapRequestLayer, MapResponseLayer};
use tower::{BoxError, ServiceBuilder, ServiceExt};

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
/// act as another identity (impersonation) over the same credentials, counted alike, sharing one
/// HTTP/2 connection.
#[derive(Clone)]
pub struct Connection {
    config: Config,
    transport: Option<Transport>,
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
        let transport = Transport::new(&config).await?;
        let client = from_config(config.clone(), None, &requests)?;
        Ok(Self { config, transport, client, requests })
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
    /// API server then adds its groups itself) with the host's credentials, over the connection
    /// every impersonating client of this [`Connection`] shares. Not for watches.
    pub fn impersonating(&self, user: &str) -> Result<Client> {
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(user.to_owned());
        config.auth_info.impersonate_groups = None;
        from_config(config, self.transport.as_ref(), &self.requests)
    }
}

/// The service a kube client sends through: what kube's own builder makes (its `GenericService`)
/// and what [`Transport::stack`] makes over the shared pool.
type Stack = BoxService<http::Request<Body>, http::Response<Box<DynBody>>, BoxError>;

/// The pool every impersonating client of a [`Connection`] shares: kube's connector (rustls,
/// the kubeconfig's CA and client certificate, its timeouts) offering HTTP/2 and HTTP/1.1. Over
/// HTTP/2 a ping every 30 s (answered within 15 s) finds a dead connection, as client-go's
/// health check does; the windows are Go's (4 MiB per stream) so a large list is not throttled.
#[derive(Clone)]
struct Transport(hyper_util::client::legacy::Client<hyper_timeout::TimeoutConnector<Https>, Body>);

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

impl Transport {
    /// `None` where kube's own builder must make the connection: client certificates from an
    /// exec plugin expire (kube's client tracks that), and proxies need its connectors.
    ///
    /// One connection made here asks the API server (ALPN) whether it speaks HTTP/2. If it does,
    /// the pool speaks only HTTP/2, so a burst of first requests waits for one connection instead
    /// of racing to open one each (with the version left to ALPN, hyper only learns it after a
    /// handshake, and every request arriving meanwhile starts its own). If it does not, or cannot
    /// be reached yet, the version is left to ALPN on every connection.
    async fn new(config: &Config) -> Result<Option<Self>> {
        if config.auth_info.exec.is_some() || config.proxy_url.is_some() {
            return Ok(None);
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        // Streams' small frames share one socket: no Nagle delay (Go's connections set it too).
        http.set_nodelay(true);
        let tls = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config.rustls_client_config()?).https_or_http();
        let tls = match &config.tls_server_name {
            Some(name) => {
                let name = name.clone().try_into().map_err(|e| kube::Error::Service(Box::new(e)))?;
                tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
            }
            None => tls,
        };
        let mut connector = hyper_timeout::TimeoutConnector::new(tls.enable_all_versions().wrap_connector(http));
        connector.set_connect_timeout(config.connect_timeout);
        connector.set_read_timeout(config.read_timeout);
        connector.set_write_timeout(config.write_timeout);
        let speaks_h2 = match connector.clone().oneshot(config.cluster_url.clone()).await {
            Ok(probe) => probe.connected().is_negotiated_h2(),
            Err(e) => {
                tracing::debug!(error = %e, "could not ask the API server for HTTP/2 yet; left to ALPN per connection");
                false
            }
        };
        let client = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
            .http2_only(speaks_h2)
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(Duration::from_secs(30))
            .http2_keep_alive_timeout(Duration::from_secs(15))
            .http2_initial_stream_window_size(4 << 20)
            .http2_initial_connection_window_size(16 << 20)
            .build(connector);
        Ok(Some(Self(client)))
    }

    /// kube's stack for `config` (its base URI, credentials, impersonation headers) over this pool.
    fn stack(&self, config: &Config) -> Result<Stack> {
        Ok(ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .map_err(BoxError::from)
            .service(self.0.clone())
            .map_response(|res| res.map(|body| Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>))
            .boxed())
    }
}

/// A counting client from an explicit config. kube's retry layer is moved above the response
/// counter (it sits outside everything by default), so every attempt's answer is counted.
fn from_config(mut config: Config, transport: Option<&Transport>, requests: &ApiRequests) -> Result<Client> {
    config.default_retry = false;
    let (counter, answers) = (requests.clone(), requests.clone());
    let builder = match transport {
        Some(t) => ClientBuilder::new(t.stack(&config)?, config.default_namespace.clone()),
        None => ClientBuilder::try_from(config)?,
    };
    let client = builder
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
