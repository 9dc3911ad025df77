//! Executes admitted actions, idempotently, as the identity of the plugin that returned them.
//!
//! The executor takes only [`AdmittedAction`]s: their target, verb, resolved kind and the
//! preconditions their checked result depends on were derived once, by admission; nothing is
//! re-parsed here.
//!
//! - create: AlreadyExists counts as done; `metadata.generateName` lets the server name it;
//! - delete: NotFound counts as done; preconditions (uid, resourceVersion) are sent as the API
//!   server's delete preconditions;
//! - patch: JSON merge patch or JSON patch of an object or its `/status`; preconditions become
//!   `metadata.uid`/`metadata.resourceVersion` in a merge patch (the server's optimistic
//!   concurrency) or leading `test` operations of a JSON patch;
//! - apply: server-side apply, forced, field manager = the controller's name (with the
//!   resourceVersion its result was checked on, when admission computed one);
//! - update-status: JSON merge patch of `.status` on the `/status` subresource (fields set to
//!   null are removed; others are kept);
//! - event: an `events.k8s.io/v1` Event through kube-runtime's `Recorder` (deduplicated into
//!   series), always with the host's own identity.
//!
//! Object writes go out with the executor's [`Writer`]: the host's client, or one that
//! impersonates the plugin's ServiceAccount ([`Executor::acting_as`]), so the API server checks
//! each plugin's writes against its own RBAC.
//!
//! Every write passes the fence first ([`Fence::confirm`]: the local deadline, then — with
//! leader election or sharding — a read of the Lease showing this replica still holds it), and
//! each retry of it passes the local deadline again.
//!
//! Conflicts, 429 and 5xx answers and connection failures are retried here with a short
//! exponential backoff; what still fails is returned, naming the action and the object, and the
//! controller retries the whole key with its rate limiter. A failed precondition is not retried
//! here: it is an [`Error::Conflict`] (the plugin's view was stale), and the controller
//! reconciles the key again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch as KubePatch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use parking_lot::Mutex;
use serde_json::{Value, json};
use wasmloop_model::{Target, Verb};

use crate::actions::{Action, Event, EventType, PatchDoc, Preconditions};
use crate::admission::AdmittedAction;
use crate::client::Connection;
use crate::fence::Fence;
use crate::identity::Identity;
use crate::kinds::{self, KindResolver, ObjectKey, ResolvedKind};

mod execute;

pub use execute::{Execute, HostEvent};

/// Errors executing an action.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The action's object is not a valid Kubernetes object (no kind, no name, ...).
    #[error("{verb} {object}: invalid object: {reason}")]
    InvalidObject {
        /// The action's verb.
        verb: Verb,
        /// The object, as far as it could be named.
        object: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The action's kind does not resolve.
    #[error("{verb} {object}: {source}")]
    Kind {
        /// The action's verb.
        verb: Verb,
        /// The object, as far as it could be named.
        object: String,
        /// Why its kind does not resolve.
        source: Box<kinds::Error>,
    },
    /// The API server refused the action, or could not be reached.
    #[error("{verb} {object}: {}", describe(.source))]
    Api {
        /// The action's verb.
        verb: Verb,
        /// The object.
        object: String,
        /// The API server's (or the transport's) error.
        source: kube::Error,
    },
    /// A precondition failed: the object changed (or was re-created) since the plugin read it.
    #[error("{verb} {object}: conflict: {message}")]
    Conflict {
        /// The action's verb.
        verb: Verb,
        /// The object.
        object: String,
        /// The API server's message.
        message: String,
    },
    /// This replica may not write now: it does not hold the Lease (leader election, or the
    /// shard's) by its own deadline, or a read of the Lease shows another acquisition.
    #[error("{verb} {object}: {source}")]
    Fenced {
        /// The action's verb.
        verb: Verb,
        /// The object.
        object: String,
        /// Why the fence held the write back.
        source: crate::fence::Error,
    },
    /// No client could be made for the plugin's identity.
    #[error("cannot act as {identity}: {source}")]
    Identity {
        /// The identity asked for.
        identity: Identity,
        /// Why no client could be made for it.
        source: crate::client::Error,
    },
}

/// A result whose error is an action's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Errors that retrying the same action cannot fix (invalid objects, 400/422 answers).
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::InvalidObject { .. } => true,
            Error::Api { source: kube::Error::Api(s), .. } => matches!(s.code, 400 | 422),
            Error::Kind { .. } | Error::Api { .. } | Error::Fenced { .. } | Error::Conflict { .. } | Error::Identity { .. } => false,
        }
    }

    /// Whether a precondition failed (not an error of the plugin or the server).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// Whether the write was held back by the fence.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Fenced { .. })
    }
}

fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

/// What an executed action did.
#[derive(Debug, Clone, PartialEq)]
pub enum Executed {
    /// The object the server returned (create, apply, update-status).
    Object(Value),
    /// Already in the desired state (create of an existing object, delete of a missing one).
    AlreadyDone,
    /// Deleted, or an event recorded.
    Done,
}

/// Whose authority object writes carry: a client, and the identity it acts as.
#[derive(Clone)]
pub struct Writer {
    client: kube::Client,
    identity: Option<Identity>,
}

impl Writer {
    /// The client object writes (and admission's dry runs) go out with.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The identity it impersonates; `None`: the host's own.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }
}

/// Runs actions against the API server.
#[derive(Clone)]
pub struct Executor {
    resolver: KindResolver,
    connection: Option<Connection>,
    writer: Writer,
    instance: Option<String>,
    recorders: Arc<Mutex<HashMap<String, Recorder>>>,
    retry: ExponentialBuilder,
}

impl Executor {
    /// Write with the resolver's (the host's) client; `instance` identifies this host in Events
    /// (e.g. the pod name).
    pub fn new(resolver: KindResolver, instance: Option<String>) -> Self {
        let retry = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(2))
            .with_max_times(4)
            .with_jitter();
        let writer = Writer { client: resolver.client().clone(), identity: None };
        Self { resolver, connection: None, writer, instance, recorders: Default::default(), retry }
    }

    /// The same executor, able to act as other identities over `connection` ([`Self::acting_as`]).
    pub fn with_connection(mut self, connection: Connection) -> Self {
        self.connection = Some(connection);
        self
    }

    /// The same executor, sending object writes as `identity` (impersonation; `None`: as the
    /// host). Events and the host's own reports stay the host's.
    pub fn acting_as(&self, identity: Option<&Identity>) -> Result<Self> {
        let writer = match (identity, &self.connection) {
            (None, _) => Writer { client: self.resolver.client().clone(), identity: None },
            (Some(identity), Some(connection)) => {
                let client = connection
                    .impersonating(&identity.username())
                    .map_err(|source| Error::Identity { identity: identity.clone(), source })?;
                Writer { client, identity: Some(identity.clone()) }
            }
            (Some(identity), None) => {
                return Err(Error::Identity { identity: identity.clone(), source: crate::client::Error::NoConnection });
            }
        };
        Ok(Self { writer, ..self.clone() })
    }

    /// Whose authority object writes carry.
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Execute one admitted action on behalf of controller `manager` (its field manager and
    /// event source), behind `fence`: confirmed before it is sent ([`Fence::confirm`]), each
    /// retry checked again.
    pub async fn execute(&self, manager: &str, admitted: &AdmittedAction, fence: &Fence) -> Result<Executed> {
        let (verb, target) = (admitted.verb(), admitted.target());
        if let Err(source) = fence.confirm().await {
            return Err(Error::Fenced { verb, object: target.to_string(), source });
        }
        let Write { api, object } = match admitted.action() {
            Action::Event(Event { regarding, event_type, reason, message }) => {
                return self.record_event_behind(manager, regarding, (*event_type, reason, message), fence).await;
            }
            _ => self.write_to(verb, target, admitted.kind(), fence).await?,
        };
        let pre = admitted.preconditions();
        match admitted.action() {
            Action::Create(body) => self.create(&api, &object, body).await,
            Action::Apply(body) => self.apply(&api, manager, &object, body, admitted.apply_resource_version()).await,
            Action::Delete(_) => self.delete(&api, &object, &pre).await,
            Action::Patch(crate::actions::Patch { status, .. }) => {
                let doc = admitted.planned().patch().ok_or_else(|| object.invalid("a patch without its document".into()))?;
                self.patch(&api, &object, *status, doc, &pre).await
            }
            Action::UpdateStatus { status, .. } => self.update_status(&api, &object, status).await,
            Action::Event(_) => unreachable!("recorded above"),
        }
    }

    /// Where a write of `target` goes, with the writer's client; its retries go behind `fence`.
    async fn write_to(&self, verb: Verb, target: &Target, kind: Option<&ResolvedKind>, fence: &Fence) -> Result<Write> {
        let resolved = match kind {
            Some(kind) => kind.clone(),
            None => {
                let kind = target.kind.clone();
                self.resolver.resolve(&kind).await.map_err(|source| Error::Kind {
                    verb,
                    object: target.to_string(),
                    source: Box::new(source),
                })?
            }
        };
        let client = self.writer.client.clone();
        let api = match (&target.namespace, resolved.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client, ns, &resolved.resource),
            (None, false) => Api::all_with(client, &resolved.resource),
            // Admission checked the scope; a mismatch here is a bug, never a guess.
            _ => {
                return Err(Error::InvalidObject {
                    verb,
                    object: target.to_string(),
                    reason: "the namespace does not match the kind's scope".into(),
                });
            }
        };
        let object = ObjectName { verb, shown: target.to_string(), name: target.name().map(str::to_owned), fence: fence.clone() };
        Ok(Write { api, object })
    }

    /// `call`, retried on conflicts, 429, 5xx and connection failures; every attempt only while
    /// the object's fence is open (a retry seconds later may come after the Lease was lost).
    async fn retrying<T, F, Fut>(&self, object: &ObjectName, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = kube::Result<T>>,
    {
        let attempt = || object.behind_fence(call());
        let retryable = |e: &Attempt| matches!(e, Attempt::Api(e) if is_retryable(e));
        attempt.retry(self.retry).when(retryable).sleep(tokio::time::sleep).await.map_err(|e| object.failed(e))
    }

    /// One call whose conflict is a precondition failing: retried only on 429/5xx in the client
    /// (and only while the fence is open).
    async fn once<T>(&self, object: &ObjectName, call: impl Future<Output = kube::Result<T>>) -> Result<T> {
        match object.behind_fence(call).await {
            Ok(v) => Ok(v),
            Err(Attempt::Api(kube::Error::Api(s))) if s.is_conflict() && !s.is_already_exists() => Err(object.conflict(status_message(&s))),
            Err(e) => Err(object.failed(e)),
        }
    }

    async fn create(&self, api: &Api<DynamicObject>, object: &ObjectName, body: &Value) -> Result<Executed> {
        // The body as the plugin returned it, serialized once; the answer read as JSON.
        let bytes = serde_json::to_vec(body).map_err(|e| object.invalid(e.to_string()))?;
        let (request, params) = (kube::core::Request::new(api.resource_url()), PostParams::default());
        let send = || {
            let built = request.create(&params, bytes.clone());
            async {
                let mut req = built.map_err(kube::Error::BuildRequest)?;
                req.extensions_mut().insert("create");
                self.writer.client.request::<Value>(req).await
            }
        };
        match self.retrying(object, send).await {
            Ok(created) => Ok(Executed::Object(created)),
            // A generated name that collided is not "done": let the key be retried.
            Err(Error::Api { source: kube::Error::Api(s), .. }) if s.is_already_exists() && object.name.is_some() => {
                Ok(Executed::AlreadyDone)
            }
            Err(e) => Err(e),
        }
    }

    async fn apply(
        &self,
        api: &Api<DynamicObject>,
        manager: &str,
        object: &ObjectName,
        body: &Value,
        rv: Option<&str>,
    ) -> Result<Executed> {
        let name = object.name()?;
        let params = PatchParams::apply(manager).force();
        let Some(rv) = rv else {
            let patch = KubePatch::Apply(body);
            return Ok(Executed::Object(to_value(self.retrying(object, || api.patch(name, &params, &patch)).await?)));
        };
        // The result was checked at this resourceVersion: a newer object is a conflict.
        let mut guarded = body.clone();
        if let Some(meta) = guarded.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(rv));
        }
        let applied = self.once(object, api.patch(name, &params, &KubePatch::Apply(&guarded))).await?;
        Ok(Executed::Object(to_value(applied)))
    }

    async fn delete(&self, api: &Api<DynamicObject>, object: &ObjectName, pre: &Preconditions) -> Result<Executed> {
        let name = object.name()?;
        let mut params = DeleteParams::background();
        if !pre.is_empty() {
            params.preconditions = Some(kube::api::Preconditions { uid: pre.uid.clone(), resource_version: pre.resource_version.clone() });
        }
        let res = if pre.is_empty() {
            self.retrying(object, || api.delete(name, &params)).await
        } else {
            self.once(object, api.delete(name, &params)).await
        };
        match res {
            Ok(_) => Ok(Executed::Done),
            Err(Error::Api { source: kube::Error::Api(s), .. }) if s.is_not_found() => Ok(Executed::AlreadyDone),
            Err(e) => Err(e),
        }
    }

    async fn patch(
        &self,
        api: &Api<DynamicObject>,
        object: &ObjectName,
        status: bool,
        doc: PatchDoc<'_>,
        pre: &Preconditions,
    ) -> Result<Executed> {
        let name = object.name()?;
        let patch = with_preconditions(doc, pre);
        let params = PatchParams::default();
        let call = || async { if status { api.patch_status(name, &params, &patch).await } else { api.patch(name, &params, &patch).await } };
        let res = if pre.is_empty() { self.retrying(object, call).await } else { self.once(object, call()).await };
        match res {
            Ok(patched) => Ok(Executed::Object(to_value(patched))),
            Err(Error::Api { source: kube::Error::Api(s), .. }) if is_failed_precondition(doc, pre, &s) => {
                Err(Error::Conflict { verb: object.verb, object: object.shown.clone(), message: status_message(&s) })
            }
            Err(e) => Err(e),
        }
    }

    async fn update_status(&self, api: &Api<DynamicObject>, object: &ObjectName, status: &Value) -> Result<Executed> {
        let name = object.name()?;
        let patch = KubePatch::Merge(json!({ "status": status }));
        let params = PatchParams::default();
        let updated = self.retrying(object, || api.patch_status(name, &params, &patch)).await?;
        Ok(Executed::Object(to_value(updated)))
    }

    /// Record an Event about `regarding` as controller `manager`, with the host's own identity
    /// (the host's reports; the caller checked its fence).
    pub async fn record_event(
        &self,
        manager: &str,
        regarding: &ObjectKey,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<Executed> {
        self.record_event_behind(manager, regarding, (event_type, reason, message), &Fence::open()).await
    }

    /// [`Executor::record_event`] (type, reason, message), its retries behind `fence`.
    async fn record_event_behind(
        &self,
        manager: &str,
        regarding: &ObjectKey,
        (event_type, reason, message): (EventType, &str, &str),
        fence: &Fence,
    ) -> Result<Executed> {
        let object =
            ObjectName { verb: Verb::Event, shown: regarding.to_string(), name: Some(regarding.name.clone()), fence: fence.clone() };
        let recorder = self.recorder(manager);
        let reference = ObjectReference {
            api_version: Some(regarding.kind.api_version.to_string()),
            kind: Some(regarding.kind.kind.to_string()),
            name: Some(regarding.name.clone()),
            namespace: regarding.namespace.clone(),
            ..Default::default()
        };
        let event = KubeEvent {
            type_: match event_type {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: truncate(reason, 128),
            note: Some(truncate(message, 1024)),
            action: truncate(reason, 128),
            secondary: None,
        };
        let published = self.retrying(&object, || recorder.publish(&event, &reference)).await;
        match published {
            // The Recorder puts Events about cluster-scoped objects in `default`, which API
            // servers before 1.21 refuse for events.k8s.io/v1 Events: they take them only in
            // `kube-system` (the new Event API's rule; 1.21 accepts both).
            Err(Error::Api { source: kube::Error::Api(s), .. })
                if regarding.namespace.is_none() && s.code == 422 && s.message.contains("does not match event.namespace") =>
            {
                self.event_in_kube_system(manager, &object, regarding, reference, &event).await
            }
            published => published.map(|()| Executed::Done),
        }
    }

    /// An Event about a cluster-scoped object, in `kube-system`, as the Recorder would have made
    /// it (without its series: each call creates an Event).
    async fn event_in_kube_system(
        &self,
        manager: &str,
        object: &ObjectName,
        regarding: &ObjectKey,
        reference: ObjectReference,
        event: &KubeEvent,
    ) -> Result<Executed> {
        use k8s_openapi::api::events::v1::Event;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
        let now = k8s_openapi::jiff::Timestamp::now();
        let body = Event {
            metadata: ObjectMeta { name: Some(format!("{}.{:x}", regarding.name, now.as_nanosecond())), ..Default::default() },
            event_time: Some(MicroTime(now)),
            regarding: Some(reference),
            reason: Some(event.reason.clone()),
            action: Some(event.action.clone()),
            note: event.note.clone(),
            type_: Some(match event.type_ {
                KubeEventType::Normal => "Normal".into(),
                KubeEventType::Warning => "Warning".into(),
            }),
            reporting_controller: Some(manager.to_string()),
            reporting_instance: Some(self.instance.clone().unwrap_or_else(|| manager.to_string())),
            ..Default::default()
        };
        let (api, params) = (Api::<Event>::namespaced(self.resolver.client().clone(), "kube-system"), PostParams::default());
        self.retrying(object, || api.create(&params, &body)).await?;
        Ok(Executed::Done)
    }

    fn recorder(&self, manager: &str) -> Recorder {
        self.recorders
            .lock()
            .entry(manager.to_string())
            .or_insert_with(|| {
                let reporter = Reporter { controller: manager.to_string(), instance: self.instance.clone() };
                Recorder::new(self.resolver.client().clone(), reporter)
            })
            .clone()
    }
}

/// Where one write goes: its endpoint and how to name it in errors.
struct Write {
    api: Api<DynamicObject>,
    object: ObjectName,
}

/// The object of one write, for its errors, and the fence its retries go behind.
struct ObjectName {
    verb: Verb,
    /// The target in the key syntax.
    shown: String,
    /// `None` for a create by generateName.
    name: Option<String>,
    fence: Fence,
}

/// Why one attempt of a write failed.
enum Attempt {
    /// The API server's (or the transport's) error.
    Api(kube::Error),
    /// The fence closed before a retry.
    Fenced(crate::fence::Error),
}

impl ObjectName {
    fn name(&self) -> Result<&str> {
        self.name.as_deref().ok_or_else(|| self.invalid(format!("{} needs metadata.name", self.verb)))
    }

    fn invalid(&self, reason: String) -> Error {
        Error::InvalidObject { verb: self.verb, object: self.shown.clone(), reason }
    }

    fn api(&self, source: kube::Error) -> Error {
        Error::Api { verb: self.verb, object: self.shown.clone(), source }
    }

    fn conflict(&self, message: String) -> Error {
        Error::Conflict { verb: self.verb, object: self.shown.clone(), message }
    }

    fn failed(&self, attempt: Attempt) -> Error {
        match attempt {
            Attempt::Api(source) => self.api(source),
            Attempt::Fenced(source) => Error::Fenced { verb: self.verb, object: self.shown.clone(), source },
        }
    }

    /// `call` while the fence is open: not started if it is closed, and given up the moment it
    /// closes (the client's own retries of 429/503/504, which wait out `Retry-After`, included;
    /// a request already sent may still land).
    async fn behind_fence<T>(&self, call: impl Future<Output = kube::Result<T>>) -> std::result::Result<T, Attempt> {
        self.fence.check().map_err(Attempt::Fenced)?;
        tokio::select! {
            biased;
            () = self.fence.wait_closed() => Err(Attempt::Fenced(self.fence.check().err().unwrap_or(crate::fence::Error::NotLeader))),
            result = call => result.map_err(Attempt::Api),
        }
    }
}

fn is_retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => (s.is_conflict() && !s.is_already_exists()) || s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The patch to send: preconditions folded into the document (planning made sure a merge
/// patch and its `metadata` are objects).
fn with_preconditions(doc: PatchDoc<'_>, pre: &Preconditions) -> KubePatch<Value> {
    match doc {
        PatchDoc::Merge(body) => {
            let mut body = body.clone();
            if let (false, Some(obj)) = (pre.is_empty(), body.as_object_mut()) {
                let meta = obj.entry("metadata").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    if let Some(uid) = &pre.uid {
                        meta.insert("uid".into(), json!(uid));
                    }
                    if let Some(rv) = &pre.resource_version {
                        meta.insert("resourceVersion".into(), json!(rv));
                    }
                }
            }
            KubePatch::Merge(body)
        }
        PatchDoc::Json(given) => {
            let test = |path: &str, value: &str| {
                let path = json_patch::jsonptr::PointerBuf::parse(path).expect("a valid pointer");
                json_patch::PatchOperation::Test(json_patch::TestOperation { path, value: json!(value) })
            };
            let mut ops = Vec::with_capacity(given.0.len() + 2);
            if let Some(uid) = &pre.uid {
                ops.push(test("/metadata/uid", uid));
            }
            if let Some(rv) = &pre.resource_version {
                ops.push(test("/metadata/resourceVersion", rv));
            }
            ops.extend(given.0.iter().cloned());
            KubePatch::Json(json_patch::Patch(ops))
        }
    }
}

/// A precondition the server answers with 422 rather than 409: a JSON patch that does not apply
/// to the object as it now is (a failed `test`, a path that is gone: the server's generic
/// "rejected our request" answer, unlike validation errors, which name the field), or (merge
/// patch) a `metadata.uid` that is not the object's ("field is immutable").
fn is_failed_precondition(doc: PatchDoc<'_>, pre: &Preconditions, s: &kube::core::Status) -> bool {
    s.code == 422
        && match doc {
            PatchDoc::Json(_) => s.message.starts_with("the server rejected our request"),
            PatchDoc::Merge(_) => pre.uid.is_some() && s.message.contains("metadata.uid"),
        }
}

/// The server's message, with the causes it gives (a JSON patch's failure is only there).
fn status_message(s: &kube::core::Status) -> String {
    let causes: Vec<&str> = s.details.iter().flat_map(|d| d.causes.iter()).map(|c| c.message.as_str()).filter(|m| !m.is_empty()).collect();
    if causes.is_empty() { s.message.clone() } else { format!("{}: {}", s.message, causes.join("; ")) }
}

fn to_value(obj: DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests;
