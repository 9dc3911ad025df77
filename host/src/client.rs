//! The Kubernetes API client: kubeconfig or in-cluster config, plus a request counter.
//!
//! Every request the host sends goes through [`ApiRequests`], so tests (and `/metrics`) can prove
//! that cache reads and resyncs never reach the API server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tower::util::MapRequestLayer;

/// Errors building the client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig { path: String, source: kube::config::KubeconfigError },
    #[error("no Kubernetes configuration found (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("cannot build the API client: {0}")]
    Build(#[from] kube::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Counts requests sent to the API server, by verb (method + whether it is a watch).
#[derive(Clone, Default, Debug)]
pub struct ApiRequests(Arc<Counts>);

#[derive(Default, Debug)]
struct Counts {
    get: AtomicU64,
    list: AtomicU64,
    watch: AtomicU64,
    write: AtomicU64,
}

/// A snapshot of [`ApiRequests`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    pub get: u64,
    pub list: u64,
    pub watch: u64,
    /// POST, PUT, PATCH and DELETE.
    pub write: u64,
}

impl RequestCounts {
    pub fn total(&self) -> u64 {
        self.get + self.list + self.watch + self.write
    }
    /// Requests that read objects (get + list), excluding long-running watches.
    pub fn reads(&self) -> u64 {
        self.get + self.list
    }
}

impl ApiRequests {
    pub fn snapshot(&self) -> RequestCounts {
        let c = &self.0;
        RequestCounts {
            get: c.get.load(Ordering::Relaxed),
            list: c.list.load(Ordering::Relaxed),
            watch: c.watch.load(Ordering::Relaxed),
            write: c.write.load(Ordering::Relaxed),
        }
    }

    fn record<B>(&self, req: &http::Request<B>) {
        let c = &self.0;
        let counter = match *req.method() {
            http::Method::GET => {
                let q = req.uri().query().unwrap_or("");
                if q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1") {
                    &c.watch
                } else if is_collection(req.uri().path()) {
                    &c.list
                } else {
                    &c.get
                }
            }
            _ => &c.write,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// `/api/v1/namespaces/x/pods` is a collection; `/api/v1/namespaces/x/pods/p` an object.
/// Discovery documents (`/api`, `/apis/apps/v1`) count as gets.
fn is_collection(path: &str) -> bool {
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
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig { path: path.to_string(), source })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|source| Error::Kubeconfig { path: path.to_string(), source })?
        }
        None => Config::infer().await?,
    };
    from_config(config)
}

/// A counting client from an explicit config.
fn from_config(config: Config) -> Result<(Client, ApiRequests)> {
    let requests = ApiRequests::default();
    let counter = requests.clone();
    let client = ClientBuilder::try_from(config)?
        .with_layer(&MapRequestLayer::new(move |req: http::Request<_>| {
            counter.record(&req);
            req
        }))
        .build();
    Ok((client, requests))
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
