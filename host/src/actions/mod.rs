//! Executes the actions reconcilers return, idempotently.
//!
//! Every action's object comes from [`Action::target`], the same rule admission checked.
//!
//! - create: AlreadyExists counts as done; `metadata.generateName` lets the server name it;
//! - delete: NotFound counts as done; preconditions (uid, resourceVersion) are sent as the API
//!   server's delete preconditions;
//! - patch: JSON merge patch or JSON patch of an object or its `/status`; preconditions become
//!   `metadata.uid`/`metadata.resourceVersion` in a merge patch (the server's optimistic
//!   concurrency) or leading `test` operations of a JSON patch;
//! - apply: server-side apply, forced, field manager = the controller's name;
//! - update-status: JSON merge patch of `.status` on the `/status` subresource (fields set to
//!   null are removed; others are kept);
//! - event: an `events.k8s.io/v1` Event through kube-runtime's `Recorder` (deduplicated into series).
//!
//! Conflicts, 429 and 5xx answers and connection failures are retried here with a short
//! exponential backoff; what still fails is returned, naming the action and the object, and the
//! controller retries the whole key with its rate limiter. A failed precondition is not retried
//! here: it is an [`Error::Conflict`] (the plugin's view was stale), and the controller
//! reconciles the key again.

mod action;

pub use action::{Action, EventType, PatchType, Preconditions};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::admission::{Admission, Protected, Scopes};
use crate::fence::Fence;
use crate::kinds::{self, KindRef, KindResolver, ObjectKey};
use wasmloop_model::{Naming, Target};

/// Errors executing an action.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{verb} {object}: invalid object: {reason}")]
    InvalidObject { verb: &'static str, object: String, reason: String },
    #[error("{verb} {object}: {source}")]
    Kind { verb: &'static str, object: String, source: kinds::Error },
    #[error("{verb} {object}: {}", describe(.source))]
    Api { verb: &'static str, object: String, source: kube::Error },
    /// A precondition failed: the object changed (or was re-created) since the plugin read it.
    #[error("{verb} {object}: conflict: {message}")]
    Conflict { verb: &'static str, object: String, message: String },
    /// Leader election is on and this replica may not write now.
    #[error("{verb} {object}: {source}")]
    Fenced { verb: &'static str, object: String, source: crate::fence::Error },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Errors that retrying the same action cannot fix (invalid objects, 400/422 answers).
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::InvalidObject { .. } => true,
            Error::Kind { .. } => false,
            Error::Api { source: kube::Error::Api(s), .. } => matches!(s.code, 400 | 422),
            Error::Api { .. } | Error::Fenced { .. } | Error::Conflict { .. } => false,
        }
    }

    /// Whether a precondition failed (not an error of the plugin or the server).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// Whether the write was held back by the leader-election fence.
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

/// Runs actions against the API server.
#[derive(Clone)]
pub struct Executor {
    resolver: KindResolver,
    instance: Option<String>,
    recorders: Arc<Mutex<HashMap<String, Recorder>>>,
    retry: ExponentialBuilder,
    admission: Admission,
    fence: Fence,
}

impl Executor {
    /// `instance` identifies this host in Events (e.g. the pod name).
    pub fn new(resolver: KindResolver, instance: Option<String>) -> Self {
        let retry = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(2))
            .with_max_times(4)
            .with_jitter();
        let admission = Admission::new(Scopes::Discovery(resolver.clone()), Protected::minimal());
        Self { resolver, instance, recorders: Default::default(), retry, admission, fence: Fence::open() }
    }

    /// The same executor, sending writes only while `fence` is open (leader election).
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    /// The leader-election fence every write checks.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The same executor, admitting plugin outcomes with these protected objects.
    pub fn with_protected(mut self, protected: Protected) -> Self {
        self.admission = Admission::new(Scopes::Discovery(self.resolver.clone()), protected);
        self
    }

    /// What plugin outcomes must pass before this executor runs them.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Execute one action on behalf of controller `manager` (its field manager and event source).
    pub async fn execute(&self, manager: &str, action: &Action) -> Result<Executed> {
        self.execute_fenced(manager, action, &self.fence).await
    }

    /// [`execute`](Self::execute) behind `fence` instead of the executor's own (a shard's).
    pub async fn execute_fenced(&self, manager: &str, action: &Action, fence: &Fence) -> Result<Executed> {
        if let Err(source) = fence.check() {
            let object = action.target().map(|t| t.to_string()).unwrap_or_default();
            return Err(Error::Fenced { verb: action.verb(), object, source });
        }
        match action {
            Action::Create { object } => self.create(object).await,
            Action::Apply { object } => self.apply(manager, object).await,
            Action::Delete { key, preconditions } => self.delete(key, preconditions).await,
            Action::Patch { key, status, patch_type, body, preconditions } => {
                self.patch(key, *status, *patch_type, body, preconditions).await
            }
            Action::UpdateStatus { key, status } => self.update_status(key, status).await,
            Action::Event { regarding, event_type, reason, message } => self.event(manager, regarding, *event_type, reason, message).await,
        }
    }

    async fn api(&self, verb: &'static str, key: &ObjectKey) -> Result<Api<DynamicObject>> {
        let resolved = self.resolver.resolve(&key.kind).await.map_err(|source| Error::Kind { verb, object: key.to_string(), source })?;
        let client = self.resolver.client().clone();
        Ok(match (&key.namespace, resolved.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client, ns, &resolved.resource),
            (None, true) => {
                return Err(Error::InvalidObject {
                    verb,
                    object: key.to_string(),
                    reason: format!("{} is namespaced but no namespace was given", key.kind),
                });
            }
            (_, false) => Api::all_with(client, &resolved.resource),
        })
    }

    async fn retrying<T, F, Fut>(&self, verb: &'static str, key: &ObjectKey, call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = kube::Result<T>>,
    {
        call.retry(self.retry).when(is_retryable).sleep(tokio::time::sleep).await.map_err(|source| Error::Api {
            verb,
            object: key.to_string(),
            source,
        })
    }

    async fn create(&self, object: &Value) -> Result<Executed> {
        let target = Target::of_object(object, Naming::NameOrGenerate);
        let key = target_key("create", object, target.map(|t| t.display_name()))?;
        let api = self.api("create", &key).await?;
        let obj: DynamicObject = parse_object("create", &key, object)?;
        let params = PostParams::default();
        let res = self.retrying("create", &key, || api.create(&params, &obj)).await;
        match res {
            Ok(created) => Ok(Executed::Object(to_value(created))),
            // A generated name that collided is not "done": let the key be retried.
            Err(Error::Api { source: kube::Error::Api(s), .. }) if s.is_already_exists() && obj.metadata.name.is_some() => {
                Ok(Executed::AlreadyDone)
            }
            Err(e) => Err(e),
        }
    }

    async fn apply(&self, manager: &str, object: &Value) -> Result<Executed> {
        let target = Target::of_object(object, Naming::NameOnly("apply"));
        let key = target_key("apply", object, target.map(|t| t.display_name()))?;
        let api = self.api("apply", &key).await?;
        let params = PatchParams::apply(manager).force();
        let patch = Patch::Apply(object);
        let applied = self.retrying("apply", &key, || api.patch(&key.name, &params, &patch)).await?;
        Ok(Executed::Object(to_value(applied)))
    }

    async fn delete(&self, key: &ObjectKey, preconditions: &Preconditions) -> Result<Executed> {
        let api = self.api("delete", key).await?;
        let mut params = DeleteParams::background();
        if !preconditions.is_empty() {
            params.preconditions =
                Some(kube::api::Preconditions { uid: preconditions.uid.clone(), resource_version: preconditions.resource_version.clone() });
        }
        let res = if preconditions.is_empty() {
            self.retrying("delete", key, || api.delete(&key.name, &params)).await
        } else {
            self.once("delete", key, api.delete(&key.name, &params)).await
        };
        match res {
            Ok(_) => Ok(Executed::Done),
            Err(Error::Api { source: kube::Error::Api(s), .. }) if s.is_not_found() => Ok(Executed::AlreadyDone),
            Err(e) => Err(e),
        }
    }

    async fn patch(
        &self,
        key: &ObjectKey,
        status: bool,
        patch_type: PatchType,
        body: &Value,
        preconditions: &Preconditions,
    ) -> Result<Executed> {
        let verb = if status { "update-status" } else { "patch" };
        let api = self.api(verb, key).await?;
        let patch = with_preconditions(patch_type, body, preconditions).map_err(|reason| Error::InvalidObject {
            verb,
            object: key.to_string(),
            reason,
        })?;
        let params = PatchParams::default();
        let call = || async {
            if status { api.patch_status(&key.name, &params, &patch).await } else { api.patch(&key.name, &params, &patch).await }
        };
        let res = if preconditions.is_empty() { self.retrying(verb, key, call).await } else { self.once(verb, key, call()).await };
        match res {
            Ok(patched) => Ok(Executed::Object(to_value(patched))),
            Err(Error::Api { source: kube::Error::Api(s), .. }) if is_failed_precondition(patch_type, preconditions, &s) => {
                Err(Error::Conflict { verb, object: key.to_string(), message: status_message(&s) })
            }
            Err(e) => Err(e),
        }
    }

    /// One call whose conflict is the plugin's precondition failing: retried only on 429/5xx.
    async fn once<T>(&self, verb: &'static str, key: &ObjectKey, call: impl Future<Output = kube::Result<T>>) -> Result<T> {
        match call.await {
            Ok(v) => Ok(v),
            Err(kube::Error::Api(s)) if s.is_conflict() && !s.is_already_exists() => {
                Err(Error::Conflict { verb, object: key.to_string(), message: s.message.clone() })
            }
            Err(source) => Err(Error::Api { verb, object: key.to_string(), source }),
        }
    }

    async fn update_status(&self, key: &ObjectKey, status: &Value) -> Result<Executed> {
        let api = self.api("update-status", key).await?;
        let patch = Patch::Merge(json!({ "status": status }));
        let params = PatchParams::default();
        let updated = self.retrying("update-status", key, || api.patch_status(&key.name, &params, &patch)).await?;
        Ok(Executed::Object(to_value(updated)))
    }

    async fn event(&self, manager: &str, regarding: &ObjectKey, event_type: EventType, reason: &str, message: &str) -> Result<Executed> {
        let recorder = self.recorder(manager);
        let reference = ObjectReference {
            api_version: Some(regarding.kind.api_version.clone()),
            kind: Some(regarding.kind.kind.clone()),
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
        let published = self.retrying("event", regarding, || recorder.publish(&event, &reference)).await;
        match published {
            // The Recorder puts Events about cluster-scoped objects in `default`, which API
            // servers before 1.21 refuse for events.k8s.io/v1 Events: they take them only in
            // `kube-system` (the new Event API's rule; 1.21 accepts both).
            Err(Error::Api { source: kube::Error::Api(s), .. })
                if regarding.namespace.is_none() && s.code == 422 && s.message.contains("does not match event.namespace") =>
            {
                self.event_in_kube_system(manager, regarding, reference, &event).await
            }
            published => published.map(|()| Executed::Done),
        }
    }

    /// An Event about a cluster-scoped object, in `kube-system`, as the Recorder would have made
    /// it (without its series: each call creates an Event).
    async fn event_in_kube_system(
        &self,
        manager: &str,
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
        self.retrying("event", regarding, || api.create(&params, &body)).await?;
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

fn is_retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => (s.is_conflict() && !s.is_already_exists()) || s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The patch to send: preconditions folded into the document.
fn with_preconditions(patch_type: PatchType, body: &Value, pre: &Preconditions) -> std::result::Result<Patch<Value>, String> {
    match patch_type {
        PatchType::Merge => {
            let mut body = body.clone();
            if !pre.is_empty() {
                let Some(obj) = body.as_object_mut() else {
                    return Err("a merge patch with preconditions must be a JSON object".into());
                };
                let meta = obj.entry("metadata").or_insert_with(|| json!({}));
                let Some(meta) = meta.as_object_mut() else { return Err("metadata must be a JSON object".into()) };
                if let Some(uid) = &pre.uid {
                    meta.insert("uid".into(), json!(uid));
                }
                if let Some(rv) = &pre.resource_version {
                    meta.insert("resourceVersion".into(), json!(rv));
                }
            }
            Ok(Patch::Merge(body))
        }
        PatchType::Json => {
            let mut ops = Vec::new();
            if let Some(uid) = &pre.uid {
                ops.push(json!({"op": "test", "path": "/metadata/uid", "value": uid}));
            }
            if let Some(rv) = &pre.resource_version {
                ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
            }
            let given = body.as_array().ok_or("a JSON patch must be a list of operations")?;
            ops.extend(given.iter().cloned());
            let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).map_err(|e| format!("invalid JSON patch: {e}"))?;
            Ok(Patch::Json(patch))
        }
    }
}

/// A precondition the server answers with 422 rather than 409: a JSON patch that does not apply
/// to the object as it now is (a failed `test`, a path that is gone: the server's generic
/// "rejected our request" answer, unlike validation errors, which name the field), or (merge
/// patch) a `metadata.uid` that is not the object's ("field is immutable").
fn is_failed_precondition(patch_type: PatchType, pre: &Preconditions, s: &kube::core::Status) -> bool {
    s.code == 422
        && match patch_type {
            PatchType::Json => s.message.starts_with("the server rejected our request"),
            PatchType::Merge => pre.uid.is_some() && s.message.contains("metadata.uid"),
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

/// The key of an object body whose target was derived by [`Action::target`]; a generateName
/// target keys by its prefix (used only for the endpoint and messages).
#[allow(clippy::result_large_err)] // the failure path of a plugin's action: size is no concern
fn target_key(verb: &'static str, object: &Value, target: std::result::Result<String, wasmloop_model::TargetError>) -> Result<ObjectKey> {
    let invalid = |reason: String| Error::InvalidObject { verb, object: compact(object), reason };
    let name = target.map_err(|e| invalid(e.to_string()))?;
    let field = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let namespace = Some(field("/metadata/namespace")).filter(|n| !n.is_empty()).map(str::to_string);
    Ok(ObjectKey::new(KindRef::new(field("/apiVersion"), field("/kind")), namespace, name))
}

#[allow(clippy::result_large_err)] // as `target_key`
fn parse_object(verb: &'static str, key: &ObjectKey, object: &Value) -> Result<DynamicObject> {
    serde_json::from_value(object.clone()).map_err(|e| Error::InvalidObject { verb, object: key.to_string(), reason: e.to_string() })
}

/// At most 120 characters of an object's JSON, for error messages.
fn compact(v: &Value) -> String {
    truncate(&v.to_string(), 120)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_key_by_their_target() {
        let ok = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}});
        let t = Action::Create { object: ok.clone() }.target().map(|t| t.display_name());
        assert_eq!(target_key("create", &ok, t).unwrap().to_string(), "v1/Pod/n/p");
        let generated = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-", "namespace": "n"}});
        let t = Action::Create { object: generated.clone() }.target().map(|t| t.display_name());
        assert_eq!(target_key("create", &generated, t).unwrap().to_string(), "v1/Pod/n/web-*");
        let t = Action::Apply { object: generated.clone() }.target().map(|t| t.display_name());
        let err = target_key("apply", &generated, t).unwrap_err().to_string();
        assert!(err.contains("generateName is only allowed on create"), "{err}");
    }

    #[test]
    fn permanent_errors_are_told_apart() {
        let invalid = Error::InvalidObject { verb: "create", object: "x".into(), reason: "r".into() };
        assert!(invalid.is_permanent());
        let status = kube::core::Status::failure("bad", "Invalid").with_code(422);
        let api = Error::Api { verb: "create", object: "x".into(), source: kube::Error::Api(status.boxed()) };
        assert!(api.is_permanent());
        let status = kube::core::Status::failure("busy", "TooManyRequests").with_code(429);
        assert!(is_retryable(&kube::Error::Api(status.clone().boxed())));
        let api = Error::Api { verb: "create", object: "x".into(), source: kube::Error::Api(status.boxed()) };
        assert!(!api.is_permanent());
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
