//! The component side: generated bindings, the import calls, and the export glue that
//! [`export_reconciler!`](crate::export_reconciler) instantiates.

use std::time::Duration;

use crate::action::{Action, EventType};
use crate::cache::Error as CacheError;
use crate::log::Level;
use crate::object::{ObjectMeta, OwnerReference};
use crate::outcome::Outcome;
use crate::patch::{PatchType, Preconditions};
use crate::types::{IndexValue, KindRef, Mapping, Metadata, ObjectKey, Reason, Request};
use crate::{Error, Reconciler};

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "controller",
        pub_export_macro: true,
        export_macro_name: "export_controller",
        default_bindings_module: "::wasmloop_sdk::__private::bindings",
        runtime_path: "::wasmloop_sdk::__private::wit_bindgen::rt",
    });
}

use bindings::wasmloop::controller::{cache, log as wit_log, types as wit};

pub use bindings::exports::wasmloop::controller::plugin::Guest;

fn wit_kind(kind: &KindRef) -> wit::KindRef {
    wit::KindRef { api_version: kind.api_version.to_string(), kind: kind.kind.to_string() }
}

fn cache_error(e: cache::CacheError) -> CacheError {
    match e {
        cache::CacheError::NotGranted(m) => CacheError::NotGranted(m),
        cache::CacheError::UnknownIndex(m) => CacheError::UnknownIndex(m),
        cache::CacheError::Invalid(m) => CacheError::Invalid(m),
    }
}

pub(crate) fn cache_get(kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<String>, CacheError> {
    cache::get(&wit_kind(kind), namespace, name).map_err(cache_error)
}

pub(crate) fn cache_list(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<String>, CacheError> {
    cache::list(&wit_kind(kind), namespace, selector).map_err(cache_error)
}

pub(crate) fn cache_by_index(kind: &KindRef, index: &str, value: &str) -> Result<Vec<String>, CacheError> {
    cache::by_index(&wit_kind(kind), index, value).map_err(cache_error)
}

pub(crate) fn cache_list_meta_packed(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<u8>, CacheError> {
    cache::list_meta_packed(&wit_kind(kind), namespace, selector).map_err(cache_error)
}

pub(crate) fn cache_by_index_meta_packed(kind: &KindRef, index: &str, value: &str) -> Result<Vec<u8>, CacheError> {
    cache::by_index_meta_packed(&wit_kind(kind), index, value).map_err(cache_error)
}

/// A metadata record and its declared fields.
type MetaRecord = (ObjectMeta, Vec<Option<String>>);

fn object_meta(m: wit::ObjectMeta) -> MetaRecord {
    let metadata = ObjectMeta {
        namespace: m.namespace,
        name: m.name,
        uid: m.uid,
        resource_version: Some(m.resource_version).filter(|rv| !rv.is_empty()),
        generation: m.generation,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        labels: m.labels.into_iter().collect(),
        annotations: m.annotations.into_iter().collect(),
        owner_references: m
            .owner_references
            .into_iter()
            .map(|r| OwnerReference {
                api_version: r.api_version,
                kind: r.kind,
                name: r.name,
                uid: r.uid,
                controller: Some(r.controller),
                block_owner_deletion: Some(r.block_owner_deletion),
            })
            .collect(),
        finalizers: m.finalizers,
    };
    (metadata, m.fields)
}

pub(crate) fn cache_get_meta(kind: &KindRef, namespace: Option<&str>, name: &str) -> Result<Option<MetaRecord>, CacheError> {
    cache::get_meta(&wit_kind(kind), namespace, name).map(|m| m.map(object_meta)).map_err(cache_error)
}

pub(crate) fn cache_list_meta(kind: &KindRef, namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<MetaRecord>, CacheError> {
    cache::list_meta(&wit_kind(kind), namespace, selector).map(|v| v.into_iter().map(object_meta).collect()).map_err(cache_error)
}

pub(crate) fn cache_by_index_meta(kind: &KindRef, index: &str, value: &str) -> Result<Vec<MetaRecord>, CacheError> {
    cache::by_index_meta(&wit_kind(kind), index, value).map(|v| v.into_iter().map(object_meta).collect()).map_err(cache_error)
}

pub(crate) fn log(level: Level, message: &str) {
    let level = match level {
        Level::Trace => wit_log::Level::Trace,
        Level::Debug => wit_log::Level::Debug,
        Level::Info => wit_log::Level::Info,
        Level::Warn => wit_log::Level::Warn,
        Level::Error => wit_log::Level::Error,
    };
    wit_log::log(level, message);
}

/// The wall clock (WASI's, which the host records and replays), in microseconds since the epoch.
pub(crate) fn now_micros() -> i64 {
    crate::time::system_micros()
}

fn wit_key(key: ObjectKey) -> wit::ObjectKey {
    wit::ObjectKey {
        api_version: key.kind.api_version.into_owned(),
        kind: key.kind.kind.into_owned(),
        namespace: key.namespace,
        name: key.name,
    }
}

fn wit_mapping(m: Mapping) -> wit::Mapping {
    match m {
        Mapping::Owner => wit::Mapping::Owner,
        Mapping::Label(l) => wit::Mapping::Label(l),
        Mapping::SameName => wit::Mapping::SameName,
        Mapping::Namespace => wit::Mapping::Namespace,
        Mapping::Index { index, value } => wit::Mapping::Index(wit::IndexMapping {
            index,
            value: match value {
                IndexValue::Name => wit::IndexValue::Name,
                IndexValue::NamespacedName => wit::IndexValue::NamespacedName,
                IndexValue::Field(path) => wit::IndexValue::Field(path),
            },
        }),
    }
}

/// `Guest::metadata` for reconciler `R`.
pub fn metadata<R: Reconciler>() -> wit::PluginMetadata {
    let m: Metadata = R::metadata();
    let reconciles = wit_kind(m.reconciled_kind());
    wit::PluginMetadata {
        name: m.name,
        version: m.version,
        reconciles,
        selector: m.selector,
        annotation_selector: m.annotation_selector,
        watches: m
            .watches
            .into_iter()
            .map(|w| wit::Watch {
                kind: wit_kind(&w.kind),
                mapping: wit_mapping(w.mapping),
                selector: w.selector,
                annotation_selector: w.annotation_selector,
            })
            .collect(),
        indexes: m.indexes.into_iter().map(|i| wit::Index { kind: wit_kind(&i.kind), name: i.name, path: i.path }).collect(),
        fields: m.fields.into_iter().map(|f| wit::Field { kind: wit_kind(&f.kind), path: f.path }).collect(),
    }
}

/// `Guest::reconcile` for reconciler `R`.
pub fn reconcile<R: Reconciler>(request: wit::Request) -> Result<wit::Outcome, wit::Failure> {
    let k = request.key;
    let key = ObjectKey { kind: KindRef::new(k.api_version, k.kind), namespace: k.namespace, name: k.name };
    let reason = match request.reason {
        wit::Reason::Event => Reason::Event,
        wit::Reason::Resync => Reason::Resync,
        wit::Reason::Requeue => Reason::Requeue,
        wit::Reason::Retry(n) => Reason::Retry(n),
    };
    let last_error = request.last_error;
    // One conversion for both results (contract 0.3 made a failure carry actions; converting
    // them on a path of their own cost every plugin ~6 KB): the actions to send, and the error
    // if the reconcile failed, whose requeue is its retry.
    let (error, outcome) = match R::reconcile(Request { key, reason, last_error }) {
        Ok(outcome) => (None, outcome),
        Err(mut e) => {
            let actions = e.take_actions().unwrap_or_default();
            (Some(e), actions)
        }
    };
    match (error, outcome.into_result().and_then(wit_outcome)) {
        (None, Ok(outcome)) => Ok(outcome),
        (None, Err(e)) => Err(failure(&e, Vec::new())),
        (Some(e), Ok(outcome)) => Err(failure(&e, outcome.actions)),
        // Actions that do not convert are dropped with the rest, and the error says so.
        (Some(e), Err(bad)) => Err(failure(&e.context(format_args!("its actions were not sent ({})", bad.message())), Vec::new())),
    }
}

fn failure(e: &Error, actions: Vec<wit::Action>) -> wit::Failure {
    let message = e.message().to_owned();
    let error = if e.is_transient() { wit::ReconcileError::Transient(message) } else { wit::ReconcileError::Permanent(message) };
    wit::Failure { error, actions }
}

fn wit_preconditions(p: Preconditions) -> wit::Preconditions {
    wit::Preconditions { uid: p.uid, resource_version: p.resource_version }
}

fn wit_outcome(outcome: Outcome) -> Result<wit::Outcome, Error> {
    let mut actions = Vec::with_capacity(outcome.actions.len());
    for a in outcome.actions {
        actions.push(match a {
            Action::Create(v) => wit::Action::Create(serde_json::to_string(&v)?),
            Action::Apply(v) => wit::Action::Apply(serde_json::to_string(&v)?),
            Action::Delete(d) => {
                wit::Action::Delete(wit::Deletion { key: wit_key(d.key), preconditions: wit_preconditions(d.preconditions) })
            }
            Action::Patch(p) => wit::Action::Patch(wit::Patch {
                key: wit_key(p.key),
                status: p.status,
                patch_type: match p.patch_type {
                    PatchType::Merge => wit::PatchType::Merge,
                    PatchType::Json => wit::PatchType::Json,
                },
                body: serde_json::to_string(&p.body)?,
                preconditions: wit_preconditions(p.preconditions),
            }),
            Action::UpdateStatus { key, status } => {
                wit::Action::UpdateStatus(wit::StatusUpdate { key: wit_key(key), status: serde_json::to_string(&status)? })
            }
            Action::Event(e) => wit::Action::Event(wit::Event {
                regarding: wit_key(e.regarding),
                event_type: match e.event_type {
                    EventType::Normal => wit::EventType::Normal,
                    EventType::Warning => wit::EventType::Warning,
                },
                reason: e.reason,
                message: e.message,
            }),
        });
    }
    let requeue_after_ms = outcome.requeue_after.map(|d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Ok(wit::Outcome { actions, requeue_after_ms })
}
