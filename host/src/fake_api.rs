//! A scripted API server for unit tests: a `kube::Client` whose requests are recorded and
//! answered by a closure, with no network and no cluster (fault injection the real server
//! cannot produce, and tests of what the host sends).

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// One request the client sent.
#[derive(Clone, Debug)]
pub(crate) struct Sent {
    /// `GET`, `POST`, `PATCH`, `DELETE`, ...
    pub method: String,
    /// The request path, e.g. `/api/v1/namespaces/ns/configmaps/c`.
    pub path: String,
    /// Its `Content-Type` (patches: which kind of patch).
    pub content_type: String,
    /// Its body as JSON (`Null` when empty).
    pub body: Value,
}

/// What the client sent, in order.
pub(crate) type Log = Arc<Mutex<Vec<Sent>>>;

/// A client whose every request is recorded and answered by `answer` (status code, JSON body).
pub(crate) fn client(answer: impl Fn(&Sent) -> (u16, Value) + Send + Sync + 'static) -> (kube::Client, Log) {
    let (log, answer) = (Log::default(), Arc::new(answer));
    let recorded = log.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (log, answer) = (recorded.clone(), answer.clone());
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await.map(http_body_util::Collected::to_bytes).unwrap_or_default();
            let sent = Sent {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                content_type: parts.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (code, body) = answer(&sent);
            log.lock().push(sent);
            let response = http::Response::builder()
                .status(code)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .expect("a valid response");
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    (kube::Client::new(service, "default"), log)
}

/// A client for tests that must not reach an API server: every request is answered 503.
pub(crate) fn unreachable() -> kube::Client {
    client(|_| status(503, "ServiceUnavailable", "no API server in unit tests")).0
}

/// An API server `Status` answer.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (code, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}))
}
