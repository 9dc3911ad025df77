//! Conversions between the contract's WIT types (0.2, [`super::bindings`]) and the host's own:
//! requests out, metadata and outcomes in, each checked and every refusal naming what was wrong.
//!
//! A plugin crate run natively ([`crate::native::SdkReconciler`]) speaks the SDK's types
//! instead; they are converted here too, by the same checks, so a plugin's outcome is accepted or
//! refused alike whether it ran in the sandbox or natively.

use std::time::Duration;

use serde_json::Value;
use wasmloop_model::Verb;

use super::bindings::types as wit;
use super::limits::Limits;
use crate::actions::{Action, Deletion, Event, EventType, OutcomeError, Patch, PatchType, PlanError, Planned, Preconditions, plan};
use crate::cache::IndexSpec;
use crate::kinds::{KindRef, ObjectKey};
use crate::reconciler::{
    FieldDecl, IndexDecl, IndexValue, MAX_FIELDS, MAX_SELECTOR_BYTES, Mapping, Outcome, Reason, ReconcileError, ReconcilerSpec, Request,
    WatchSpec,
};
use wasmloop_sdk as sdk;

pub(crate) fn to_wit_key(k: &ObjectKey) -> wit::ObjectKey {
    wit::ObjectKey {
        api_version: k.kind.api_version.to_string(),
        kind: k.kind.kind.to_string(),
        namespace: k.namespace.clone(),
        name: k.name.clone(),
    }
}

pub(crate) fn to_wit_request(r: &Request) -> wit::Request {
    wit::Request {
        key: to_wit_key(&r.key),
        last_error: r.last_error.clone(),
        reason: match r.reason {
            Reason::Event => wit::Reason::Event,
            Reason::Resync => wit::Reason::Resync,
            Reason::Requeue => wit::Reason::Requeue,
            Reason::Retry(n) => wit::Reason::Retry(n),
        },
    }
}

fn from_wit_kind(k: wit::KindRef) -> KindRef {
    KindRef::new(k.api_version, k.kind)
}

/// Why a plugin's `metadata()` answer was refused; every variant names where (`at`: the field,
/// e.g. `watches[1]`) and what was wrong. Rendered to text only in the load error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// The name is not a DNS label.
    #[error("name {given:?} must be a DNS label (lowercase letters, digits, '-', at most 63): it {source}")]
    Name {
        /// The name as the plugin gave it.
        given: String,
        /// Which rule it breaks.
        source: wasmloop_model::name::NameError,
    },
    /// The version is not a semantic version.
    #[error("version {given:?} is not a semantic version (e.g. 1.2.3): {error}")]
    Version {
        /// The version as given (at most 64 characters of it).
        given: String,
        /// What the semver parser said.
        error: String,
    },
    /// A natively run plugin's metadata names no reconciled kind.
    #[error("reconciles: the metadata names no reconciled kind")]
    NoReconciledKind,
    /// A kind whose apiVersion or kind is not valid.
    #[error("{at}: invalid kind {api_version:?} / {kind:?}")]
    Kind {
        /// Where the kind is declared.
        at: String,
        /// Its apiVersion as given.
        api_version: String,
        /// Its kind as given.
        kind: String,
    },
    /// A label or annotation selector that does not parse.
    #[error("{at}: {what}: {error}")]
    Selector {
        /// Where the selector is declared.
        at: String,
        /// `selector` or `annotation-selector`.
        what: &'static str,
        /// What the parser said.
        error: String,
    },
    /// A label or annotation selector over the host's maximum size (never quoted).
    #[error("{at}: {what} is {bytes} bytes, more than the host's maximum of {MAX_SELECTOR_BYTES}")]
    SelectorSize {
        /// Where the selector is declared.
        at: String,
        /// `selector` or `annotation-selector`.
        what: &'static str,
        /// Its size.
        bytes: usize,
    },
    /// An index without a name or a path.
    #[error("{at}: name and path are required")]
    IncompleteIndex {
        /// Which index.
        at: String,
    },
    /// An index mapping that names an index the reconciled kind does not declare.
    #[error("{at}: the index mapping names index {index:?}, which is not declared on {kind}")]
    UndeclaredIndex {
        /// Which watch.
        at: String,
        /// The index it names.
        index: String,
        /// The reconciled kind.
        kind: KindRef,
    },
    /// An index mapping whose field path does not parse.
    #[error("{at}: the index mapping's field: {error}")]
    IndexField {
        /// Which watch.
        at: String,
        /// What the path parser said.
        error: String,
    },
    /// More declared fields than the host's maximum ([`MAX_FIELDS`]).
    #[error("{count} fields declared, more than the host's maximum of {MAX_FIELDS}")]
    TooManyFields {
        /// How many were declared.
        count: usize,
    },
    /// A declared field of a kind the plugin does not read.
    #[error("{at}: {kind} is not a kind the plugin reconciles, watches or indexes")]
    UnreadFieldKind {
        /// Which field.
        at: String,
        /// Its kind.
        kind: KindRef,
    },
    /// A declared field whose path does not parse.
    #[error("{at}: {source}")]
    FieldPath {
        /// Which field.
        at: String,
        /// What the path parser said.
        source: crate::cache::Error,
    },
}

fn checked_kind(k: wit::KindRef, at: &str) -> Result<KindRef, MetadataError> {
    let kind = from_wit_kind(k);
    if kind.kind.is_empty() || kind.group_version().is_err() {
        return Err(MetadataError::Kind { at: at.to_owned(), api_version: kind.api_version.to_string(), kind: kind.kind.to_string() });
    }
    Ok(kind)
}

/// Convert and validate `metadata()`'s answer.
pub(crate) fn spec_from_metadata(m: wit::PluginMetadata) -> Result<ReconcilerSpec, MetadataError> {
    let name = m.name.trim().to_owned();
    if let Err(source) = wasmloop_model::name::dns_label(&name, wasmloop_model::name::DNS_LABEL_MAX) {
        return Err(MetadataError::Name { given: m.name, source });
    }
    if let Err(e) = semver::Version::parse(&m.version) {
        return Err(MetadataError::Version { given: m.version.chars().take(64).collect(), error: e.to_string() });
    }
    let reconciles = checked_kind(m.reconciles, "reconciles")?;
    let watches = m
        .watches
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let at = format!("watches[{i}]");
            Ok(WatchSpec {
                kind: checked_kind(w.kind, &at)?,
                mapping: from_wit_mapping(w.mapping),
                selector: checked_selector(w.selector, &at, "selector")?,
                annotation_selector: checked_selector(w.annotation_selector, &at, "annotation-selector")?,
            })
        })
        .collect::<Result<Vec<_>, MetadataError>>()?;
    let indexes = m
        .indexes
        .into_iter()
        .enumerate()
        .map(|(i, x)| {
            let at = format!("indexes[{i}]");
            if x.name.is_empty() || x.path.is_empty() {
                return Err(MetadataError::IncompleteIndex { at });
            }
            Ok(IndexDecl { kind: checked_kind(x.kind, &at)?, name: x.name, path: x.path })
        })
        .collect::<Result<Vec<_>, MetadataError>>()?;
    for (i, w) in watches.iter().enumerate() {
        if let Mapping::Index { index, value } = &w.mapping {
            let at = format!("watches[{i}]");
            if !indexes.iter().any(|x| x.kind == reconciles && x.name == *index) {
                return Err(MetadataError::UndeclaredIndex { at, index: index.clone(), kind: reconciles });
            }
            value.check().map_err(|error| MetadataError::IndexField { at, error: error.to_string() })?;
        }
    }
    let selector = checked_selector(m.selector, "reconciles", "selector")?;
    let annotation_selector = checked_selector(m.annotation_selector, "reconciles", "annotation-selector")?;
    let mut spec = ReconcilerSpec { name, version: m.version, reconciles, selector, annotation_selector, watches, indexes, fields: vec![] };
    if m.fields.len() > MAX_FIELDS {
        return Err(MetadataError::TooManyFields { count: m.fields.len() });
    }
    let readable = spec.kinds();
    for (i, f) in m.fields.into_iter().enumerate() {
        let at = format!("fields[{i}]");
        let kind = checked_kind(f.kind, &at)?;
        if !readable.contains(&kind) {
            return Err(MetadataError::UnreadFieldKind { at, kind });
        }
        if let Err(source) = IndexSpec::parse(&f.path) {
            return Err(MetadataError::FieldPath { at, source });
        }
        // A field reads one value at its path; filters pick among many (indexes only).
        if wasmloop_model::index_path::IndexPath::parse(&f.path).is_ok_and(|p| p.is_filtered()) {
            let reason = "a metadata field reads one value: filters (`[field=value]`) are for indexes".into();
            return Err(MetadataError::FieldPath { at, source: crate::cache::Error::InvalidIndexPath { path: f.path, reason } });
        }
        spec.fields.push(FieldDecl { kind, path: f.path });
    }
    Ok(spec)
}

/// The verb a component's action means (for naming it in a refusal, before it is checked).
fn wit_verb(a: &wit::Action) -> Verb {
    match a {
        wit::Action::Create(_) => Verb::Create,
        wit::Action::Apply(_) => Verb::Apply,
        wit::Action::Delete(_) => Verb::Delete,
        wit::Action::UpdateStatus(_) | wit::Action::Patch(wit::Patch { status: true, .. }) => Verb::UpdateStatus,
        wit::Action::Patch(_) => Verb::Patch,
        wit::Action::Event(_) => Verb::Event,
    }
}

fn parse(what: &'static str, json: &str) -> Result<Value, PlanError> {
    serde_json::from_str(json).map_err(|e| PlanError::Json { what, error: e.to_string() })
}

fn from_wit_key(k: wit::ObjectKey) -> ObjectKey {
    normalized(ObjectKey::new(KindRef::new(k.api_version, k.kind), k.namespace.as_deref(), k.name))
}

/// An empty namespace is no namespace (as the API server reads `metadata.namespace: ""`).
fn normalized(mut key: ObjectKey) -> ObjectKey {
    key.namespace = key.namespace.filter(|n| !n.is_empty());
    key
}

fn from_wit_event_type(t: wit::EventType) -> EventType {
    match t {
        wit::EventType::Normal => EventType::Normal,
        wit::EventType::Warning => EventType::Warning,
    }
}

/// A component's action in the host's terms (its JSON documents parsed).
fn from_wit_action(a: wit::Action) -> Result<Action, PlanError> {
    Ok(match a {
        wit::Action::Create(json) => Action::Create(parse("", &json)?),
        wit::Action::Apply(json) => Action::Apply(parse("", &json)?),
        wit::Action::Delete(d) => Action::Delete(Deletion { key: from_wit_key(d.key), preconditions: preconditions(d.preconditions) }),
        wit::Action::UpdateStatus(u) => Action::UpdateStatus { key: from_wit_key(u.key), status: parse("status ", &u.status)? },
        wit::Action::Patch(p) => Action::Patch(Patch {
            key: from_wit_key(p.key),
            status: p.status,
            patch_type: match p.patch_type {
                wit::PatchType::Merge => PatchType::Merge,
                wit::PatchType::Json => PatchType::Json,
            },
            body: parse("patch ", &p.body)?,
            preconditions: preconditions(p.preconditions),
        }),
        wit::Action::Event(e) => Action::Event(Event {
            regarding: from_wit_key(e.regarding),
            event_type: from_wit_event_type(e.event_type),
            reason: e.reason,
            message: e.message,
        }),
    })
}

/// Check a component's actions, naming the first bad one.
pub(crate) fn to_planned(actions: Vec<wit::Action>, limits: &Limits) -> Result<Vec<Planned>, OutcomeError> {
    plan(actions.into_iter().map(|a| (wit_verb(&a), from_wit_action(a))).collect(), limits.max_actions)
}

/// A component's own error.
pub(crate) fn from_wit_error(e: wit::ReconcileError) -> ReconcileError {
    match e {
        wit::ReconcileError::Transient(m) => ReconcileError::reconciler_transient(m),
        wit::ReconcileError::Permanent(m) => ReconcileError::reconciler_permanent(m),
    }
}

fn from_wit_mapping(m: wit::Mapping) -> Mapping {
    match m {
        wit::Mapping::Owner => Mapping::Owner,
        wit::Mapping::Label(l) => Mapping::Label(l),
        wit::Mapping::SameName => Mapping::SameName,
        wit::Mapping::Namespace => Mapping::Namespace,
        wit::Mapping::Index(i) => Mapping::Index {
            index: i.index,
            value: match i.value {
                wit::IndexValue::Name => IndexValue::Name,
                wit::IndexValue::NamespacedName => IndexValue::NamespacedName,
                wit::IndexValue::Field(path) => IndexValue::Field(path),
            },
        },
    }
}

fn to_wit_mapping(m: &Mapping) -> wit::Mapping {
    match m {
        Mapping::Owner => wit::Mapping::Owner,
        Mapping::Label(l) => wit::Mapping::Label(l.clone()),
        Mapping::SameName => wit::Mapping::SameName,
        Mapping::Namespace => wit::Mapping::Namespace,
        Mapping::Index { index, value } => wit::Mapping::Index(wit::IndexMapping {
            index: index.clone(),
            value: match value {
                IndexValue::Name => wit::IndexValue::Name,
                IndexValue::NamespacedName => wit::IndexValue::NamespacedName,
                IndexValue::Field(path) => wit::IndexValue::Field(path.clone()),
            },
        }),
    }
}

/// A selector (on labels or annotations) that parses, in its canonical form; an empty one is none.
fn checked_selector(selector: Option<String>, at: &str, what: &'static str) -> Result<Option<String>, MetadataError> {
    match selector.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) if s.len() > MAX_SELECTOR_BYTES => Err(MetadataError::SelectorSize { at: at.to_owned(), what, bytes: s.len() }),
        // The reason only, and at most a line of it: the selector may be up to 64 KiB, too long
        // to quote in a status.
        Some(s) => wasmloop_model::selector::Selector::parse(s).map(|p| Some(p.to_string())).map_err(|e| MetadataError::Selector {
            at: at.to_owned(),
            what,
            error: clipped(e.reason.to_string(), 200),
        }),
    }
}

/// `text`, cut to at most `max` bytes (at a character boundary) with `…` if it was longer.
fn clipped(mut text: String, max: usize) -> String {
    if text.len() > max {
        let cut = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Convert the guest's outcome, naming the first bad action.
pub(crate) fn to_outcome(o: wit::Outcome, limits: &Limits) -> Result<Outcome, OutcomeError> {
    Ok(Outcome { actions: to_planned(o.actions, limits)?, requeue_after: o.requeue_after_ms.map(Duration::from_millis) })
}

fn from_sdk_kind(k: &sdk::KindRef) -> wit::KindRef {
    wit::KindRef { api_version: k.api_version.to_string(), kind: k.kind.to_string() }
}

/// A natively run plugin's `R::metadata()`, checked as a component's `metadata()` is.
pub(crate) fn spec_from_sdk_metadata(m: sdk::Metadata) -> Result<ReconcilerSpec, MetadataError> {
    let reconciles = m.reconciles.as_ref().ok_or(MetadataError::NoReconciledKind)?;
    spec_from_metadata(wit::PluginMetadata {
        reconciles: from_sdk_kind(reconciles),
        watches: m
            .watches
            .iter()
            .map(|w| wit::Watch {
                kind: from_sdk_kind(&w.kind),
                mapping: to_wit_mapping(&w.mapping),
                selector: w.selector.clone(),
                annotation_selector: w.annotation_selector.clone(),
            })
            .collect(),
        indexes: m
            .indexes
            .iter()
            .map(|x| wit::Index { kind: from_sdk_kind(&x.kind), name: x.name.clone(), path: x.path.clone() })
            .collect(),
        fields: m.fields.iter().map(|f| wit::Field { kind: from_sdk_kind(&f.kind), path: f.path.clone() }).collect(),
        name: m.name,
        version: m.version,
        selector: m.selector,
        annotation_selector: m.annotation_selector,
    })
}

/// The request as the SDK's export glue hands it to a plugin.
pub(crate) fn to_sdk_request(r: &Request) -> sdk::Request {
    sdk::Request {
        key: sdk::ObjectKey {
            kind: sdk::KindRef::new(r.key.kind.api_version.clone(), r.key.kind.kind.clone()),
            namespace: r.key.namespace.clone(),
            name: r.key.name.clone(),
        },
        reason: match r.reason {
            Reason::Event => sdk::Reason::Event,
            Reason::Resync => sdk::Reason::Resync,
            Reason::Requeue => sdk::Reason::Requeue,
            Reason::Retry(n) => sdk::Reason::Retry(n),
        },
        last_error: r.last_error.clone(),
    }
}

/// A natively run plugin's action: the SDK builds the host's own vocabulary
/// (`wasmloop_model::action`), so it is only normalized as the WIT path normalizes a
/// component's (an empty namespace or precondition is none).
fn from_sdk_action(mut action: Action) -> (Verb, Result<Action, PlanError>) {
    let pre = |p: &mut Preconditions| {
        p.uid = p.uid.take().filter(|s| !s.is_empty());
        p.resource_version = p.resource_version.take().filter(|s| !s.is_empty());
    };
    let key = |k: &mut ObjectKey| k.namespace = k.namespace.take().filter(|n| !n.is_empty());
    match &mut action {
        Action::Create(_) | Action::Apply(_) => {}
        Action::Delete(d) => {
            key(&mut d.key);
            pre(&mut d.preconditions);
        }
        Action::Patch(p) => {
            key(&mut p.key);
            pre(&mut p.preconditions);
        }
        Action::UpdateStatus { key: k, .. } => key(k),
        Action::Event(e) => key(&mut e.regarding),
    }
    (action.verb(), Ok(action))
}

/// Check a natively run plugin's actions as [`to_planned`] checks a component's: the same
/// actions are accepted, the same refused with the same message.
pub(crate) fn from_sdk_actions(actions: Vec<sdk::Action>, limits: &Limits) -> Result<Vec<Planned>, OutcomeError> {
    plan(actions.into_iter().map(from_sdk_action).collect(), limits.max_actions)
}

/// Convert a natively run plugin's outcome ([`from_sdk_actions`]); the requeue is cut to whole
/// milliseconds, as the contract carries it.
pub(crate) fn from_sdk_outcome(o: sdk::Outcome, limits: &Limits) -> Result<Outcome, OutcomeError> {
    let requeue_after = o.requeue_after.map(|d| Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)));
    Ok(Outcome { actions: from_sdk_actions(o.actions, limits)?, requeue_after })
}

fn preconditions(p: wit::Preconditions) -> Preconditions {
    Preconditions { uid: p.uid.filter(|s| !s.is_empty()), resource_version: p.resource_version.filter(|s| !s.is_empty()) }
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(name: &str) -> wit::ObjectKey {
        wit::ObjectKey { api_version: "v1".into(), kind: "Pod".into(), namespace: Some("ns".into()), name: name.into() }
    }

    fn delete(key: wit::ObjectKey) -> wit::Action {
        wit::Action::Delete(wit::Deletion { key, preconditions: wit::Preconditions { uid: None, resource_version: None } })
    }

    #[test]
    fn outcomes_convert_and_bad_actions_are_named() {
        let limits = Limits::default();
        let good = wit::Outcome {
            actions: vec![
                wit::Action::Create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-"}}).to_string()),
                delete(key("a")),
                wit::Action::UpdateStatus(wit::StatusUpdate { key: key("b"), status: r#"{"ready":1}"#.into() }),
                wit::Action::Event(wit::Event {
                    regarding: key("c"),
                    event_type: wit::EventType::Warning,
                    reason: "Boom".into(),
                    message: "m".into(),
                }),
            ],
            requeue_after_ms: Some(1500),
        };
        let o = to_outcome(good, &limits).unwrap();
        assert_eq!(o.actions.len(), 4);
        assert_eq!(o.requeue_after, Some(Duration::from_millis(1500)));
        assert!(matches!(o.actions[3].action(), Action::Event(Event { event_type: EventType::Warning, .. })));

        let bad = |a: wit::Action| to_outcome(wit::Outcome { actions: vec![a], requeue_after_ms: None }, &limits).unwrap_err().to_string();
        let err = bad(wit::Action::Create("{not json".into()));
        assert!(err.starts_with("action 0 (create): invalid JSON: key must be a string"), "{err}");
        let err = bad(wit::Action::Apply(r#"{"apiVersion":"v1","kind":"Pod","metadata":{}}"#.into()));
        assert_eq!(err, "action 0 (apply): the object has no metadata.name");
        let err = bad(wit::Action::Create("[1]".into()));
        assert_eq!(err, "action 0 (create): expected a JSON object, got an array");
        let err = bad(wit::Action::Create(r#"{"metadata":{"name":"x"}}"#.into()));
        assert_eq!(err, "action 0 (create): the object has no apiVersion");
        let err = bad(wit::Action::UpdateStatus(wit::StatusUpdate { key: key("b"), status: "3".into() }));
        assert!(err.contains("status must be a JSON object, got a number"), "{err}");
        let err = bad(delete(key("")));
        assert_eq!(err, "action 0 (delete): the object has no name");
        let err = bad(delete(wit::ObjectKey { name: "p/status".into(), ..key("a") }));
        assert!(err.contains("subresources are not action targets"), "{err}");

        let many = wit::Outcome { actions: vec![delete(key("a")); 3], requeue_after_ms: None };
        let err = to_outcome(many, &Limits { max_actions: 2, ..Limits::default() }).unwrap_err().to_string();
        assert_eq!(err, "3 actions, more than limits.maxActions 2");
    }

    #[test]
    fn sdk_outcomes_convert_like_their_wit_form() {
        let limits = Limits::default();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-", "namespace": "ns"}});
        let sdk_key = |name: &str| sdk::kinds::POD.key(Some("ns"), name);
        let sdk_out = sdk::Outcome::new()
            .create(&pod)
            .delete_key(sdk_key("a"))
            .status_key(sdk_key("b"), json!({"ready": 1}))
            .event_key(sdk_key("c"), sdk::EventType::Warning, "Boom", "m")
            .patch(sdk::Patch::json(sdk_key("d"), json!([{"op": "remove", "path": "/x"}])).if_uid("u"))
            .requeue_after(Duration::from_micros(1_500_900));
        let wit_out = wit::Outcome {
            actions: vec![
                wit::Action::Create(pod.to_string()),
                delete(key("a")),
                wit::Action::UpdateStatus(wit::StatusUpdate { key: key("b"), status: r#"{"ready":1}"#.into() }),
                wit::Action::Event(wit::Event {
                    regarding: key("c"),
                    event_type: wit::EventType::Warning,
                    reason: "Boom".into(),
                    message: "m".into(),
                }),
                wit::Action::Patch(wit::Patch {
                    key: key("d"),
                    status: false,
                    patch_type: wit::PatchType::Json,
                    body: r#"[{"op":"remove","path":"/x"}]"#.into(),
                    preconditions: wit::Preconditions { uid: Some("u".into()), resource_version: None },
                }),
            ],
            requeue_after_ms: Some(1500),
        };
        assert_eq!(from_sdk_outcome(sdk_out, &limits).unwrap(), to_outcome(wit_out, &limits).unwrap());

        // Refused alike, with the same message.
        let both = |a: sdk::Action, w: wit::Action| {
            let mut o = sdk::Outcome::new();
            o.push(a);
            let s = from_sdk_outcome(o, &limits).unwrap_err();
            assert_eq!(s, to_outcome(wit::Outcome { actions: vec![w], requeue_after_ms: None }, &limits).unwrap_err());
            s.to_string()
        };
        let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}});
        assert_eq!(
            both(sdk::Action::Apply(bad.clone()), wit::Action::Apply(bad.to_string())),
            "action 0 (apply): the object has no metadata.name"
        );
        let err = both(sdk::Action::Delete(sdk::Deletion::new(sdk_key("p/status"))), delete(key("p/status")));
        assert!(err.contains("subresources are not action targets"), "{err}");
        let status = sdk::Action::UpdateStatus { key: sdk_key("b"), status: json!([]) };
        both(status, wit::Action::UpdateStatus(wit::StatusUpdate { key: key("b"), status: "[]".into() }));
        let merge = sdk::Action::Patch(sdk::Patch::merge(sdk_key("d"), json!([1])));
        let wit_merge = wit::Action::Patch(wit::Patch {
            key: key("d"),
            status: false,
            patch_type: wit::PatchType::Merge,
            body: "[1]".into(),
            preconditions: wit::Preconditions { uid: None, resource_version: None },
        });
        assert!(both(merge, wit_merge).contains("a merge patch must be a JSON object"));
    }

    #[test]
    fn sdk_metadata_is_validated_as_a_components() {
        let m = sdk::Metadata::new("rs", "1.2.3")
            .reconciles(sdk::kinds::REPLICA_SET)
            .owns(sdk::kinds::POD)
            .field(sdk::kinds::POD, "status.phase");
        let spec = spec_from_sdk_metadata(m).unwrap();
        assert_eq!((spec.name.as_str(), &*spec.reconciles.kind, spec.watches[0].mapping.clone()), ("rs", "ReplicaSet", Mapping::Owner));
        assert_eq!(spec.fields, vec![FieldDecl { kind: KindRef::new("v1", "Pod"), path: "status.phase".into() }]);
        let err = spec_from_sdk_metadata(sdk::Metadata::new("rs", "one").reconciles(sdk::kinds::POD)).unwrap_err();
        assert!(matches!(&err, MetadataError::Version { given, .. } if given == "one"), "{err}");
        assert!(err.to_string().contains("is not a semantic version"), "{err}");
        let err = spec_from_sdk_metadata(sdk::Metadata::new("rs", "1.0.0").reconciles(sdk::kinds::POD).field(sdk::kinds::SECRET, "data"))
            .unwrap_err();
        assert!(matches!(&err, MetadataError::UnreadFieldKind { at, .. } if at == "fields[0]"), "{err}");
        assert!(err.to_string().contains("not a kind the plugin reconciles"), "{err}");
        assert_eq!(spec_from_sdk_metadata(sdk::Metadata::new("rs", "1.0.0")).unwrap_err(), MetadataError::NoReconciledKind);
        // Filters are for indexes: a field reads one value.
        let owners = "metadata.ownerReferences[kind=ReplicaSet].name";
        let indexed = sdk::Metadata::new("rs", "1.0.0").reconciles(sdk::kinds::REPLICA_SET).index(sdk::kinds::POD, "rs", owners);
        assert_eq!(spec_from_sdk_metadata(indexed.clone()).unwrap().indexes[0].path, owners);
        let err = spec_from_sdk_metadata(indexed.field(sdk::kinds::POD, owners)).unwrap_err().to_string();
        assert!(err.contains("fields[0]") && err.contains("filters (`[field=value]`) are for indexes"), "{err}");
    }

    #[test]
    fn metadata_is_validated() {
        let kind = |a: &str, k: &str| wit::KindRef { api_version: a.into(), kind: k.into() };
        let meta = |name: &str, reconciles: wit::KindRef| wit::PluginMetadata {
            name: name.into(),
            version: "1.0.0".into(),
            reconciles,
            selector: None,
            watches: vec![wit::Watch { kind: kind("v1", "Pod"), mapping: wit::Mapping::Owner, selector: None, annotation_selector: None }],
            indexes: vec![],
            fields: vec![],
            annotation_selector: None,
        };
        let spec = spec_from_metadata(meta("podset", kind("wasmloop.dev/v1alpha1", "PodSet"))).unwrap();
        assert_eq!(spec.reconciles, KindRef::new("wasmloop.dev/v1alpha1", "PodSet"));
        assert_eq!(spec.watches[0].mapping, Mapping::Owner);
        let err = spec_from_metadata(meta("Pod Set", kind("v1", "Pod"))).unwrap_err();
        assert!(matches!(&err, MetadataError::Name { given, .. } if given == "Pod Set"), "{err}");
        assert!(err.to_string().contains("must be a DNS label"), "{err}");
        let mut bad_version = meta("podset", kind("v1", "Pod"));
        bad_version.version = "1.0\"} evil=\"1".into();
        let err = spec_from_metadata(bad_version).unwrap_err();
        assert!(matches!(&err, MetadataError::Version { given, .. } if given == "1.0\"} evil=\"1"), "{err}");
        assert!(err.to_string().contains("is not a semantic version"), "{err}");
        let err = spec_from_metadata(meta("x", kind("a/b/c", "Pod"))).unwrap_err();
        assert!(matches!(&err, MetadataError::Kind { at, .. } if at == "reconciles"), "{err}");
        assert!(err.to_string().starts_with("reconciles: invalid kind"), "{err}");
        let mut many = meta("podset", kind("v1", "Pod"));
        many.fields = vec![wit::Field { kind: kind("v1", "Pod"), path: "status.phase".into() }; MAX_FIELDS + 1];
        assert_eq!(spec_from_metadata(many).unwrap_err().to_string(), "257 fields declared, more than the host's maximum of 256");
        // A selector over the host's maximum is refused by its size, never quoted; a bad one
        // under it by a clipped reason.
        let mut huge = meta("podset", kind("v1", "Pod"));
        huge.selector = Some(format!("app in ({})", "x,".repeat(700_000)));
        let err = spec_from_metadata(huge).unwrap_err().to_string();
        assert_eq!(err, "reconciles: selector is 1400009 bytes, more than the host's maximum of 65536");
        let mut bad = meta("podset", kind("v1", "Pod"));
        bad.selector = Some(format!("app=={}", "y".repeat(60_000)));
        let err = spec_from_metadata(bad).unwrap_err().to_string();
        assert!(err.len() < 300 && err.starts_with("reconciles: selector: "), "{err}");
        let mut unread = meta("podset", kind("v1", "Pod"));
        unread.fields = vec![wit::Field { kind: kind("v1", "Secret"), path: "data".into() }];
        assert!(matches!(spec_from_metadata(unread).unwrap_err(), MetadataError::UnreadFieldKind { .. }));
    }

    #[test]
    fn patches_are_checked() {
        let limits = Limits::default();
        let patch = |patch_type, body: &str| {
            wit::Action::Patch(wit::Patch {
                key: key("p"),
                status: false,
                patch_type,
                body: body.into(),
                preconditions: wit::Preconditions { uid: Some("u".into()), resource_version: None },
            })
        };
        let one = |a| to_outcome(wit::Outcome { actions: vec![a], requeue_after_ms: None }, &limits).map_err(|e| e.to_string());
        let ok = one(patch(wit::PatchType::Json, r#"[{"op":"remove","path":"/metadata/ownerReferences/0"}]"#)).unwrap();
        assert!(matches!(ok.actions[0].action(), Action::Patch(Patch { preconditions, .. }) if preconditions.uid.as_deref() == Some("u")));
        assert_eq!(ok.actions[0].verb(), wasmloop_model::Verb::Patch);
        let err = one(patch(wit::PatchType::Json, r#"[{"op":"copy","from":"/a","path":"/b"}]"#)).unwrap_err();
        assert!(err.contains("operation 0: op \"copy\" is not one of add, remove, replace, test"), "{err}");
        let err = one(patch(wit::PatchType::Merge, "[]")).unwrap_err();
        assert!(err.contains("a merge patch must be a JSON object, got an array"), "{err}");
        let err = one(patch(wit::PatchType::Json, r#"[{"op":"add","path":"/a"}]"#)).unwrap_err();
        assert!(err.contains("add needs a value"), "{err}");
    }
}
