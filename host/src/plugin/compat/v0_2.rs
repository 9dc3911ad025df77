//! Contract 0.2 plugins: their calls converted to and from the current types, and the 0.2
//! imports served by the current ones.
//!
//! 0.2 differs from 0.3 only by what 0.3 added: a failure with actions, the `index` mapping and
//! annotation selectors. Its types are otherwise the same, field for field.

use crate::plugin::bindings::{cache as wit_cache, log as wit_log, types as wit, v0_2};
use crate::plugin::host::HostState;
use v0_2::types as old;

fn kind(k: old::KindRef) -> wit::KindRef {
    wit::KindRef { api_version: k.api_version, kind: k.kind }
}

fn key(k: old::ObjectKey) -> wit::ObjectKey {
    wit::ObjectKey { api_version: k.api_version, kind: k.kind, namespace: k.namespace, name: k.name }
}

fn preconditions(p: old::Preconditions) -> wit::Preconditions {
    wit::Preconditions { uid: p.uid, resource_version: p.resource_version }
}

/// A request as a 0.2 plugin receives it (the same fields).
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
        last_error: r.last_error.clone(),
    }
}

/// A 0.2 plugin's metadata (no annotation selectors).
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
        fields: m.fields.into_iter().map(|f| wit::Field { kind: kind(f.kind), path: f.path }).collect(),
    }
}

/// A 0.2 outcome in current terms (the same actions).
pub(crate) fn outcome(o: old::Outcome) -> wit::Outcome {
    let actions = o
        .actions
        .into_iter()
        .map(|a| match a {
            old::Action::Create(json) => wit::Action::Create(json),
            old::Action::Apply(json) => wit::Action::Apply(json),
            old::Action::Delete(d) => wit::Action::Delete(wit::Deletion { key: key(d.key), preconditions: preconditions(d.preconditions) }),
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
            old::Action::Patch(p) => wit::Action::Patch(wit::Patch {
                key: key(p.key),
                status: p.status,
                patch_type: match p.patch_type {
                    old::PatchType::Merge => wit::PatchType::Merge,
                    old::PatchType::Json => wit::PatchType::Json,
                },
                body: p.body,
                preconditions: preconditions(p.preconditions),
            }),
        })
        .collect();
    wit::Outcome { actions, requeue_after_ms: o.requeue_after_ms }
}

/// A 0.2 error as a failure without actions.
pub(crate) fn failure(e: old::ReconcileError) -> wit::Failure {
    let error = match e {
        old::ReconcileError::Transient(m) => wit::ReconcileError::Transient(m),
        old::ReconcileError::Permanent(m) => wit::ReconcileError::Permanent(m),
    };
    wit::Failure { error, actions: Vec::new() }
}

fn cache_error(e: wit_cache::CacheError) -> v0_2::cache::CacheError {
    use v0_2::cache::CacheError as Old;
    match e {
        wit_cache::CacheError::NotGranted(m) => Old::NotGranted(m),
        wit_cache::CacheError::UnknownIndex(m) => Old::UnknownIndex(m),
        wit_cache::CacheError::Invalid(m) => Old::Invalid(m),
    }
}

fn meta(m: wit::ObjectMeta) -> old::ObjectMeta {
    old::ObjectMeta {
        namespace: m.namespace,
        name: m.name,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        labels: m.labels,
        annotations: m.annotations,
        owner_references: m
            .owner_references
            .into_iter()
            .map(|r| old::OwnerReference {
                api_version: r.api_version,
                kind: r.kind,
                name: r.name,
                uid: r.uid,
                controller: r.controller,
                block_owner_deletion: r.block_owner_deletion,
            })
            .collect(),
        finalizers: m.finalizers,
        fields: m.fields,
    }
}

impl old::Host for HostState {}

impl v0_2::cache::Host for HostState {
    fn get(&mut self, k: old::KindRef, namespace: Option<String>, name: String) -> Result<Option<String>, v0_2::cache::CacheError> {
        wit_cache::Host::get(self, kind(k), namespace, name).map_err(cache_error)
    }

    fn list(
        &mut self,
        k: old::KindRef,
        namespace: Option<String>,
        selector: Option<String>,
    ) -> Result<Vec<String>, v0_2::cache::CacheError> {
        wit_cache::Host::list(self, kind(k), namespace, selector).map_err(cache_error)
    }

    fn by_index(&mut self, k: old::KindRef, index: String, value: String) -> Result<Vec<String>, v0_2::cache::CacheError> {
        wit_cache::Host::by_index(self, kind(k), index, value).map_err(cache_error)
    }

    fn get_meta(
        &mut self,
        k: old::KindRef,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<old::ObjectMeta>, v0_2::cache::CacheError> {
        wit_cache::Host::get_meta(self, kind(k), namespace, name).map(|m| m.map(meta)).map_err(cache_error)
    }

    fn list_meta(
        &mut self,
        k: old::KindRef,
        namespace: Option<String>,
        selector: Option<String>,
    ) -> Result<Vec<old::ObjectMeta>, v0_2::cache::CacheError> {
        wit_cache::Host::list_meta(self, kind(k), namespace, selector).map(|ms| ms.into_iter().map(meta).collect()).map_err(cache_error)
    }

    fn by_index_meta(&mut self, k: old::KindRef, index: String, value: String) -> Result<Vec<old::ObjectMeta>, v0_2::cache::CacheError> {
        wit_cache::Host::by_index_meta(self, kind(k), index, value).map(|ms| ms.into_iter().map(meta).collect()).map_err(cache_error)
    }
}

impl v0_2::log::Host for HostState {
    fn log(&mut self, level: v0_2::log::Level, message: String) {
        use v0_2::log::Level as Old;
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
