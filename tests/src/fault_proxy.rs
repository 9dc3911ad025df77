//! A fault-injecting HTTPS proxy between the host and the test kube-apiserver (loopback only),
//! for the faults the real server does not produce on demand:
//!
//! - **delays**: every request waits up to `delay_max` before it is forwarded;
//! - **429** `Too Many Requests` with `Retry-After: 1` (and `details.retryAfterSeconds`), as API
//!   Priority and Fairness answers; a throttled write sent again with the same method, path and
//!   body sooner than that is counted as a `Retry-After` violation (reads are not checked: two
//!   callers may send the same GET);
//! - **500** and **503** answers;
//! - **409** `Conflict` on status writes (`PUT`/`PATCH …/status`);
//! - **watch cuts**: a watch's response stream is cut off after 1–4 s;
//! - **resets mid-body**: a list's response stops halfway and the connection is reset.
//!
//! Faults are drawn from a seeded RNG per request, only while the proxy is [armed](FaultProxy::arm),
//! and every injected fault is counted ([`Injected`]).
//!
//! It also **records** every request it forwards ([`FaultProxy::recorded`]: method, path, status,
//! when it arrived and when it was answered, the body of writes), and can **hold answers**: while
//! a hold is set ([`FaultProxy::hold`]), a write whose path contains the hold's text is forwarded
//! (the API server applies it) but its answer is kept until [`FaultProxy::release`] — a renewal
//! "on the wire" while its sender is frozen, deterministically. And it can **gate watches**
//! ([`FaultProxy::gate_watches`], [`FaultProxy::set_gate`]): the events of watches whose path
//! contains a text are held while the gate is closed, then handed back one frame at a time (a
//! watch that lags: what a replica learns after a pause, it learns late and in order). The proxy terminates TLS with a
//! certificate of its own (made with the `openssl` CLI) and writes a kubeconfig for it with the
//! upstream kubeconfig's credentials, which it passes through untouched.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = BoxBody<Bytes, BoxError>;

/// How often each fault happens (per request, while armed).
#[derive(Clone, Debug)]
pub struct Faults {
    pub seed: u64,
    pub delay_max: Duration,
    pub throttle: f64,
    pub internal_error: f64,
    pub unavailable: f64,
    /// Of status writes.
    pub status_conflict: f64,
    /// Of watches.
    pub watch_cut: f64,
    /// Of lists.
    pub reset_mid_body: f64,
    /// The first this many watches are cut and lists reset whatever the draw (so a short test
    /// exercises both for sure).
    pub first_for_sure: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            seed: 1,
            delay_max: Duration::from_millis(150),
            throttle: 0.05,
            internal_error: 0.03,
            unavailable: 0.03,
            status_conflict: 0.2,
            watch_cut: 0.5,
            reset_mid_body: 0.2,
            first_for_sure: 2,
        }
    }
}

/// What the proxy injected, and what it saw of `Retry-After`.
#[derive(Debug, Default)]
pub struct Injected {
    pub requests: AtomicU64,
    pub delayed: AtomicU64,
    pub throttled: AtomicU64,
    pub internal_errors: AtomicU64,
    pub unavailable: AtomicU64,
    pub status_conflicts: AtomicU64,
    pub watch_cuts: AtomicU64,
    pub resets: AtomicU64,
    /// Throttled requests that came again (same method, path and body) at least 1 s later.
    pub retry_after_honoured: AtomicU64,
    /// … and sooner than that.
    pub retry_after_violations: AtomicU64,
    /// What came back too soon: `METHOD path after`.
    pub violations: Mutex<Vec<String>>,
}

impl Injected {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// One request the proxy forwarded (or answered itself).
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: http::Method,
    /// Path and query.
    pub path: String,
    /// The answer's status (502 when the upstream could not be reached).
    pub status: u16,
    /// When the request arrived (its headers and body read).
    pub arrived: Instant,
    /// When its answer was handed back (its headers; a watch's body streams on).
    pub answered: Instant,
    /// The request body of writes (`None` for reads).
    pub body: Option<Bytes>,
    /// Whether its answer was held.
    pub held: bool,
}

impl Recorded {
    /// Whether it is a write (POST, PUT, PATCH, DELETE).
    pub fn is_write(&self) -> bool {
        !matches!(self.method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS)
    }

    /// The namespace of its path (`/api/v1/namespaces/<ns>/…`, `/apis/<g>/<v>/namespaces/<ns>/…`).
    pub fn namespace(&self) -> Option<&str> {
        let path = self.path.split('?').next()?;
        let mut parts = path.split('/');
        parts.find(|p| *p == "namespaces")?;
        parts.next().filter(|n| !n.is_empty())
    }

    /// The request body as JSON, if it is.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(self.body.as_ref()?).ok()
    }
}

/// Answers held back, and what is held.
#[derive(Default)]
struct Hold {
    /// Writes whose path contains this have their answers held.
    matching: Mutex<Option<String>>,
    /// Answers being held now, and held so far.
    holding: AtomicU64,
    held: AtomicU64,
    release: tokio::sync::Notify,
}

/// How the events of gated watches pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// As they come.
    Open,
    /// Held.
    Closed,
    /// One frame per this long.
    Trickle(Duration),
}

/// The gate of watches whose path contains `matching`.
struct Gating {
    matching: Mutex<Option<String>>,
    gate: tokio::sync::watch::Sender<Gate>,
}

impl Default for Gating {
    fn default() -> Self {
        Self { matching: Mutex::new(None), gate: tokio::sync::watch::Sender::new(Gate::Open) }
    }
}

impl Gating {
    /// Wait until the next frame may pass.
    async fn pass(&self) {
        let mut gate = self.gate.subscribe();
        let Ok(now) = gate.wait_for(|g| *g != Gate::Closed).await.map(|g| *g) else { return };
        if let Gate::Trickle(every) = now {
            tokio::time::sleep(every).await;
        }
    }
}

/// A running proxy. Stops when dropped.
pub struct FaultProxy {
    pub addr: SocketAddr,
    /// A kubeconfig that reaches the upstream API server through the proxy.
    pub kubeconfig: PathBuf,
    pub injected: Arc<Injected>,
    armed: Arc<AtomicBool>,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    hold: Arc<Hold>,
    gating: Arc<Gating>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Start a proxy to the API server of `upstream` (a kubeconfig with a server URL, a CA file
    /// and a token), writing its certificate and kubeconfig into `dir`. Disarmed at first.
    pub async fn start(upstream: &Path, dir: &Path, faults: Faults) -> Result<Self> {
        let (server, ca, token) = upstream_of(upstream)?;
        let (cert, key) = self_signed(dir)?;
        let certs = vec![CertificateDer::from_pem_file(&cert).context("proxy certificate")?];
        let key = PrivateKeyDer::from_pem_file(&key).context("proxy key")?;
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&ca).context("upstream CA")? {
            roots.add(c?)?;
        }
        let client_tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(client_tls).https_only().enable_http1().build();
        let client: HttpClient<_, Full<Bytes>> = HttpClient::builder(TokioExecutor::new()).build(connector);

        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let kubeconfig = dir.join("fault-proxy.kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_text(addr, &cert, &token))?;
        let state = Arc::new(State {
            upstream: server,
            client,
            faults: faults.clone(),
            rng: Mutex::new(fastrand::Rng::with_seed(faults.seed)),
            injected: Arc::new(Injected::default()),
            armed: Arc::new(AtomicBool::new(false)),
            throttled_at: Mutex::new(HashMap::new()),
            recorded: Arc::default(),
            hold: Arc::default(),
            gating: Arc::default(),
        });
        let (injected, armed, recorded, hold, gating) =
            (state.injected.clone(), state.armed.clone(), state.recorded.clone(), state.hold.clone(), state.gating.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let (acceptor, state) = (acceptor.clone(), state.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(state.handle(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
                });
            }
        });
        Ok(Self { addr, kubeconfig, injected, armed, recorded, hold, gating, task })
    }

    /// Start or stop injecting faults (requests are forwarded either way).
    pub fn arm(&self, on: bool) {
        self.armed.store(on, Ordering::Relaxed);
    }

    /// Every request so far, in the order they were answered.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.recorded.lock().clone()
    }

    /// Hold the answers of writes whose path contains `matching` (`None`: hold nothing more;
    /// what is held stays held until [`FaultProxy::release`]).
    pub fn hold(&self, matching: Option<&str>) {
        *self.hold.matching.lock() = matching.map(str::to_owned);
    }

    /// Answers being held now.
    pub fn holding(&self) -> u64 {
        self.hold.holding.load(Ordering::SeqCst)
    }

    /// Answers held so far.
    pub fn held_total(&self) -> u64 {
        self.hold.held.load(Ordering::SeqCst)
    }

    /// Gate the watches started from now on whose path contains `matching` ([`FaultProxy::set_gate`]).
    pub fn gate_watches(&self, matching: &str) {
        *self.gating.matching.lock() = Some(matching.to_string());
    }

    /// How the events of gated watches pass from now on.
    pub fn set_gate(&self, gate: Gate) {
        self.gating.gate.send_replace(gate);
    }

    /// Stop holding, and hand back every answer held.
    pub fn release(&self) {
        self.hold(None);
        self.hold.release.notify_waiters();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Upstream = HttpClient<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

struct State {
    upstream: String,
    client: Upstream,
    faults: Faults,
    rng: Mutex<fastrand::Rng>,
    injected: Arc<Injected>,
    armed: Arc<AtomicBool>,
    /// Method + path + body digest of throttled requests → when.
    throttled_at: Mutex<HashMap<(String, String, u64), Instant>>,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    hold: Arc<Hold>,
    gating: Arc<Gating>,
}

/// What to do with one request.
enum Fault {
    None,
    /// Forwarded after this long.
    Delay(Duration),
    Answer(StatusCode, &'static str),
    CutWatch(Duration),
    ResetMidBody,
}

impl State {
    async fn handle(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let method = req.method().clone();
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
        let (res, arrived, body) = match self.forward(req).await {
            Ok(forwarded) => forwarded,
            Err(e) => (answer(StatusCode::BAD_GATEWAY, &format!("fault proxy: {e:#}")), Instant::now(), None),
        };
        let write = !matches!(method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS);
        let matching = self.hold.matching.lock().clone();
        let held = write && matching.is_some_and(|m| path.contains(&m));
        if held {
            // Forwarded and applied upstream; its answer waits for the release.
            let released = self.hold.release.notified();
            self.hold.holding.fetch_add(1, Ordering::SeqCst);
            self.hold.held.fetch_add(1, Ordering::SeqCst);
            released.await;
            self.hold.holding.fetch_sub(1, Ordering::SeqCst);
        }
        let status = res.status().as_u16();
        let body = body.filter(|_| write);
        self.recorded.lock().push(Recorded { method, path, status, arrived, answered: Instant::now(), body, held });
        res
    }

    /// Forward `req`: its answer, when it arrived, its body.
    async fn forward(&self, req: Request<Incoming>) -> Result<(Response<ProxyBody>, Instant, Option<Bytes>)> {
        self.injected.requests.fetch_add(1, Ordering::Relaxed);
        let (parts, body) = req.into_parts();
        let body = body.collect().await?.to_bytes();
        let arrived = Instant::now();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        let key = (parts.method.to_string(), parts.uri.path().to_string(), digest(&body));
        self.check_retry_after(&key);
        let fault = self.draw(&parts.method, &path);
        match fault {
            Fault::Answer(code, reason) => {
                if code == StatusCode::TOO_MANY_REQUESTS && parts.method != http::Method::GET {
                    self.throttled_at.lock().insert(key, Instant::now());
                }
                return Ok((status(code, reason), arrived, Some(body)));
            }
            Fault::Delay(delay) => tokio::time::sleep(delay).await,
            Fault::None | Fault::CutWatch(_) | Fault::ResetMidBody => {}
        }
        let mut upstream = Request::builder().method(parts.method.clone()).uri(format!("{}{path}", self.upstream));
        for (name, value) in &parts.headers {
            if name != http::header::HOST {
                upstream = upstream.header(name, value);
            }
        }
        let res = self.client.request(upstream.body(Full::new(body.clone()))?).await?;
        let sent = body;
        let (mut parts, body) = res.into_parts();
        let res = match fault {
            Fault::CutWatch(after) => {
                let cut = CutAfter { inner: body, deadline: Box::pin(tokio::time::sleep(after)), injected: self.injected.clone() };
                Response::from_parts(parts, cut.boxed())
            }
            Fault::ResetMidBody => {
                let bytes = body.collect().await?.to_bytes();
                parts.headers.remove(http::header::CONTENT_LENGTH);
                self.injected.resets.fetch_add(1, Ordering::Relaxed);
                let half = bytes.slice(..bytes.len() / 2);
                let frames: Vec<Result<Frame<Bytes>, BoxError>> =
                    vec![Ok(Frame::data(half)), Err("fault proxy: connection reset mid-body".into())];
                Response::from_parts(parts, http_body_util::StreamBody::new(futures::stream::iter(frames)).boxed())
            }
            _ if self.gated(&path) => {
                // Frames pass the gate one at a time, in order; the upstream body is read only as
                // fast as they pass.
                let gating = self.gating.clone();
                let frames = futures::stream::unfold(body, move |mut body| {
                    let gating = gating.clone();
                    async move {
                        let frame = body.frame().await?;
                        gating.pass().await;
                        Some((frame.map_err(|e| Box::new(e) as BoxError), body))
                    }
                });
                Response::from_parts(parts, http_body_util::StreamBody::new(frames).boxed())
            }
            _ => Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed()),
        };
        Ok((res, arrived, Some(sent)))
    }

    /// Whether `path` is a watch the gate applies to.
    fn gated(&self, path: &str) -> bool {
        let is_watch = path.contains("watch=true") || path.contains("watch=1");
        is_watch && self.gating.matching.lock().as_deref().is_some_and(|m| path.contains(m))
    }

    /// A throttled request that comes again: was its `Retry-After` (1 s) waited out?
    fn check_retry_after(&self, key: &(String, String, u64)) {
        let Some(at) = self.throttled_at.lock().remove(key) else { return };
        if at.elapsed() >= Duration::from_millis(990) {
            self.injected.retry_after_honoured.fetch_add(1, Ordering::Relaxed);
        } else {
            self.injected.retry_after_violations.fetch_add(1, Ordering::Relaxed);
            self.injected.violations.lock().push(format!("{} {} after {:?}", key.0, key.1, at.elapsed()));
        }
    }

    fn draw(&self, method: &http::Method, path: &str) -> Fault {
        if !self.armed.load(Ordering::Relaxed) {
            return Fault::None;
        }
        let f = &self.faults;
        let mut rng = self.rng.lock();
        let is_watch = path.contains("watch=true") || path.contains("watch=1");
        if is_watch {
            let sure = self.injected.watch_cuts.load(Ordering::Relaxed) < f.first_for_sure;
            return if sure || rng.f64() < f.watch_cut {
                Fault::CutWatch(Duration::from_millis(1000 + rng.u64(0..3000)))
            } else {
                Fault::None
            };
        }
        let p = rng.f64();
        if p < f.throttle {
            self.injected.throttled.fetch_add(1, Ordering::Relaxed);
            return Fault::Answer(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests");
        }
        if p < f.throttle + f.internal_error {
            self.injected.internal_errors.fetch_add(1, Ordering::Relaxed);
            return Fault::Answer(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
        }
        if p < f.throttle + f.internal_error + f.unavailable {
            self.injected.unavailable.fetch_add(1, Ordering::Relaxed);
            return Fault::Answer(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
        }
        let status_write =
            matches!(*method, http::Method::PUT | http::Method::PATCH) && path.split('?').next().is_some_and(|p| p.ends_with("/status"));
        if status_write && rng.f64() < f.status_conflict {
            self.injected.status_conflicts.fetch_add(1, Ordering::Relaxed);
            return Fault::Answer(StatusCode::CONFLICT, "Conflict");
        }
        let is_list = *method == http::Method::GET && path.split('?').next().is_some_and(wasmloop::client::is_collection);
        let sure = self.injected.resets.load(Ordering::Relaxed) < f.first_for_sure;
        if is_list && (sure || rng.f64() < f.reset_mid_body) {
            return Fault::ResetMidBody;
        }
        if !f.delay_max.is_zero() {
            self.injected.delayed.fetch_add(1, Ordering::Relaxed);
            return Fault::Delay(Duration::from_millis(rng.u64(0..=f.delay_max.as_millis() as u64)));
        }
        Fault::None
    }
}

/// A response body cut off (an error, so the connection is closed) once `deadline` passes.
struct CutAfter {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    injected: Arc<Injected>,
}

impl http_body::Body for CutAfter {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.injected.watch_cuts.fetch_add(1, Ordering::Relaxed);
            return Poll::Ready(Some(Err("fault proxy: watch cut".into())));
        }
        Pin::new(&mut self.inner).poll_frame(cx).map_err(|e| Box::new(e) as BoxError)
    }
}

/// A Kubernetes `Status` answer.
fn status(code: StatusCode, reason: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected by the fault proxy: {reason}"), "reason": reason, "code": code.as_u16(),
        "details": if code == StatusCode::TOO_MANY_REQUESTS { serde_json::json!({"retryAfterSeconds": 1}) } else { serde_json::json!({}) },
    });
    let mut res = Response::new(Full::new(Bytes::from(body.to_string())).map_err(|e| match e {}).boxed());
    *res.status_mut() = code;
    res.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    if code == StatusCode::TOO_MANY_REQUESTS {
        res.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
    }
    res
}

fn answer(code: StatusCode, message: &str) -> Response<ProxyBody> {
    let mut res = Response::new(Full::new(Bytes::from(message.to_string())).map_err(|e| match e {}).boxed());
    *res.status_mut() = code;
    res
}

fn digest(body: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    h.finish()
}

/// Server URL, CA file and token of a kubeconfig (the test control plane's shape).
fn upstream_of(kubeconfig: &Path) -> Result<(String, PathBuf, String)> {
    let kc: serde_json::Value = serde_saphyr::from_str(&std::fs::read_to_string(kubeconfig)?)?;
    let cluster = &kc["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().context("kubeconfig without a server")?.trim_end_matches('/').to_string();
    let ca = PathBuf::from(cluster["certificate-authority"].as_str().context("kubeconfig without a CA file")?);
    let token = kc["users"][0]["user"]["token"].as_str().context("kubeconfig without a token")?.to_string();
    Ok((server, ca, token))
}

/// A self-signed certificate for 127.0.0.1 (openssl CLI), as PEM files in `dir`.
fn self_signed(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let (cert, key) = (dir.join("fault-proxy.crt"), dir.join("fault-proxy.key"));
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=wasmloop-fault-proxy"])
        // A leaf (CA:FALSE) that is its own trust anchor: webpki refuses a CA certificate as a server.
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("running openssl")?;
    ensure!(out.status.success(), "openssl req: {}", String::from_utf8_lossy(&out.stderr));
    Ok((cert, key))
}

fn kubeconfig_text(addr: SocketAddr, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: https://{addr}\n    certificate-authority: {}\n\
         users:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: proxy\n  context: {{cluster: proxy, user: admin}}\n\
         current-context: proxy\n",
        ca.display()
    )
}
