//! Contract 0.1 plugins: their calls converted to and from the current types, and the 0.1
//! imports served by the current ones.
//!
//! 0.1 lacks `patch`, delete preconditions, `request.last-error`, declared fields, metadata
//! reads and everything 0.3 added; nothing a 0.1 plugin can say is lost in the conversion.

use crate::plugin::bindings::{cache as wit_cache, log as wit_log, types as wit, v0_1};
use crate::plugin::host::HostState;
use v0_1::types as old;

fn kind(k: old::KindRef) -> wit::KindRef {
    wit::KindRef { api_version: k.api_version, kind: k.kind }
}

fn key(k: old::ObjectKey) -> wit::ObjectKey {
    wit::ObjectKey { api_version: k.api_version, kind: k.kind, namespace: k.namespace, name: k.name }
}

/// A request as a 0.1 plugin receives it (without `last-error`).
pub(crate) fn request(r: &wit::Request) -> old::Request {
    let k = &r.key;
    old::Request {
        key: old::ObjectKey {
            api_version: k.api_version.clone(),
            kind: k.kind.clone(),
            namespace: k.namespace.clone(),
            name: k.name.clone(),
        },
        reason: match r.reason {
            wit::Reason::Event => old::Reason::Event,
            wit::Reason::Resync => old::Reason::Resync,
            wit::Reason::Requeue => old::Reason::Requeue,
            wit::Reason::Retry(n) => old::Reason::Retry(n),
        },
    }
}

/// A 0.1 plugin's metadata (it declares no fields and no annotation selectors).
pub(crate) fn metadata(m: old::PluginMetadata) -> wit::PluginMetadata {
    wit::PluginMetadata {
        name: m.name,
        version: m.version,
        reconciles: kind(m.reconciles),
        selector: m.selector,
        annotation_selector: None,
        watches: m
            .watches
            .into_iter()
            .map(|w| wit::Watch {
                kind: kind(w.kind),
                mapping: match w.mapping {
                    old::Mapping::Owner => wit::Mapping::Owner,
                    old::Mapping::Label(l) => wit::Mapping::Label(l),
                    old::Mapping::SameName => wit::Mapping::SameName,
                    old::Mapping::Namespace => wit::Mapping::Namespace,
                },
                selector: w.selector,
                annotation_selector: None,
            })
            .collect(),
        indexes: m.indexes.into_iter().map(|i| wit::Index { kind: kind(i.kind), name: i.name, path: i.path }).collect(),
        fields: vec![],
    }
}

/// A 0.1 outcome in current terms (deletes without preconditions).
pub(crate) fn outcome(o: old::Outcome) -> wit::Outcome {
    let no_preconditions = || wit::Preconditions { uid: None, resource_version: None };
    let actions = o
        .actions
        .into_iter()
        .map(|a| match a {
            old::Action::Create(json) => wit::Action::Create(json),
            old::Action::Apply(json) => wit::Action::Apply(json),
            old::Action::Delete(k) => wit::Action::Delete(wit::Deletion { key: key(k), preconditions: no_preconditions() }),
            old::Action::UpdateStatus(u) => wit::Action::UpdateStatus(wit::StatusUpdate { key: key(u.key), status: u.status }),
            old::Action::Event(e) => wit::Action::Event(wit::Event {
                regarding: key(e.regarding),
                event_type: match e.event_type {
                    old::EventType::Normal => wit::EventType::Normal,
                    old::EventType::Warning => wit::EventType::Warning,
                },
                reason: e.reason,
                message: e.message,
            }),
        })
        .collect();
    wit::Outcome { actions, requeue_after_ms: o.requeue_after_ms }
}

/// A 0.1 error as a failure without actions.
pub(crate) fn failure(e: old::ReconcileError) -> wit::Failure {
    let error = match e {
        old::ReconcileError::Transient(m) => wit::ReconcileError::Transient(m),
        old::ReconcileError::Permanent(m) => wit::ReconcileError::Permanent(m),
    };
    wit::Failure { error, actions: Vec::new() }
}

fn cache_error(e: wit_cache::CacheError) -> v0_1::cache::CacheError {
    use v0_1::cache::CacheError as Old;
    match e {
        wit_cache::CacheError::NotGranted(m) => Old::NotGranted(m),
        wit_cache::CacheError::UnknownIndex(m) => Old::UnknownIndex(m),
        wit_cache::CacheError::Invalid(m) => Old::Invalid(m),
    }
}

impl old::Host for HostState {}

impl v0_1::cache::Host for HostState {
    fn get(&mut self, k: old::KindRef, namespace: Option<String>, name: String) -> Result<Option<String>, v0_1::cache::CacheError> {
        wit_cache::Host::get(self, kind(k), namespace, name).map_err(cache_error)
    }

    fn list(
        &mut self,
        k: old::KindRef,
        namespace: Option<String>,
        selector: Option<String>,
    ) -> Result<Vec<String>, v0_1::cache::CacheError> {
        wit_cache::Host::list(self, kind(k), namespace, selector).map_err(cache_error)
    }

    fn by_index(&mut self, k: old::KindRef, index: String, value: String) -> Result<Vec<String>, v0_1::cache::CacheError> {
        wit_cache::Host::by_index(self, kind(k), index, value).map_err(cache_error)
    }
}

impl v0_1::log::Host for HostState {
    fn log(&mut self, level: v0_1::log::Level, message: String) {
        use v0_1::log::Level as Old;
        let level = match level {
            Old::Trace => wit_log::Level::Trace,
            Old::Debug => wit_log::Level::Debug,
            Old::Info => wit_log::Level::Info,
            Old::Warn => wit_log::Level::Warn,
            Old::Error => wit_log::Level::Error,
        };
        wit_log::Host::log(self, level, message);
    }
}
