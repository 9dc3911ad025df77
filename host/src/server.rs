//! HTTP endpoints on one port: `/metrics` (OpenMetrics), `/healthz`, `/readyz`, and `/shadow`
//! (JSON: how candidate versions compared with the serving ones, with their last differences;
//! `/shadow?plugin=<name>` for one plugin; what `wasmloop diff` shows).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::controller::ShadowLog;
use crate::controller::shadow::PluginReport;

/// Errors serving HTTP.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why it could not be bound.
        source: std::io::Error,
    },
    /// The server stopped on an I/O error.
    #[error("HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// A result whose error is the HTTP server's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Readiness: true once caches have synced and the plugins present at start are loaded.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Mark the host ready (or not).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }
    /// Whether the host is ready.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Mutex<Registry>>,
    ready: Readiness,
    shadows: Arc<ShadowLog>,
}

/// Bind `addr` and serve until `shutdown` resolves. Returns the bound address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    registry: Arc<Mutex<Registry>>,
    ready: Readiness,
    shadows: Arc<ShadowLog>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<Result<()>>)> {
    let listener = TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr, source })?;
    let bound = listener.local_addr().map_err(|source| Error::Bind { addr, source })?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/shadow", get(shadow))
        .with_state(AppState { registry, ready, shadows });
    let task = tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(shutdown).await.map_err(Error::Serve) });
    Ok((bound, task))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut body = String::new();
    let encoded = prometheus_client::encoding::text::encode(&mut body, &state.registry.lock());
    match encoded {
        Ok(()) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("encoding metrics failed: {e}"),
        ),
    }
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if state.ready.get() { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready") }
}

/// `/shadow`'s query.
#[derive(serde::Deserialize)]
struct ShadowQuery {
    plugin: Option<String>,
}

async fn shadow(State(state): State<AppState>, Query(q): Query<ShadowQuery>) -> Json<Vec<PluginReport>> {
    Json(state.shadows.reports(q.plugin.as_deref()))
}
