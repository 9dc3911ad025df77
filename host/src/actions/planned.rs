//! [`Planned`]: one action of a plugin's outcome, checked once where it crosses into the host,
//! with what every later stage needs derived once and carried: its [`Target`], its [`Verb`] and
//! its parsed body. Admission takes `Planned` actions and returns them admitted; the executor
//! sends them without parsing anything again.

use serde::Serialize;
use serde_json::Value;
use wasmloop_model::{Naming, Target, TargetError, Verb, json_type};

use super::action::{Action, Deletion, Event, Patch, PatchType};

/// Most segments of a JSON patch operation's path: as deep as a document the host parses
/// (serde_json's nesting limit); the model's rule. Admission places each value at its path, one
/// level per segment, and a path of a million `/a` nested that deep: merging and dropping the
/// result overflowed the stack and aborted the host (found by the outcome fuzzer;
/// `deep_json_patch_paths_are_refused`).
pub const MAX_PATCH_PATH_SEGMENTS: usize = wasmloop_model::patch::MAX_PATH_SEGMENTS;

/// Why one action breaks the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A JSON document that does not parse.
    #[error("invalid {what}JSON: {error}")]
    Json {
        /// Which document (`""`, `"status "`, `"patch "`).
        what: &'static str,
        /// serde_json's message.
        error: String,
    },
    /// The object it touches is not a valid target.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// A status that is not a JSON object.
    #[error("status must be a JSON object, got {0}")]
    StatusNotAnObject(&'static str),
    /// A patch document the host does not take (by `wasmloop_model::patch`'s rules).
    #[error(transparent)]
    Patch(#[from] wasmloop_model::patch::PatchError),
    /// An Event without a reason.
    #[error("reason is required")]
    EventWithoutReason,
}

/// An outcome (or the actions of a failure) that breaks the contract: the first thing wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutcomeError {
    /// More actions than the plugin's limit.
    #[error("{count} actions, more than limits.maxActions {max}")]
    TooMany {
        /// How many it returned.
        count: usize,
        /// `limits.maxActions`.
        max: u32,
    },
    /// One action breaks the contract.
    #[error("action {index} ({verb}): {source}")]
    Action {
        /// Its position in the outcome.
        index: usize,
        /// Its verb.
        verb: Verb,
        /// What is wrong with it.
        #[source]
        source: PlanError,
    },
}

/// Check each of `actions` (parsed, or why not, with the verb the plugin meant) in order, at
/// most `max` of them: the one way a plugin's actions enter the host, for components, natively
/// run plugins and every contract version alike.
pub fn plan(actions: Vec<(Verb, Result<Action, PlanError>)>, max: u32) -> Result<Vec<Planned>, OutcomeError> {
    if actions.len() > max as usize {
        return Err(OutcomeError::TooMany { count: actions.len(), max });
    }
    actions
        .into_iter()
        .enumerate()
        .map(|(index, (verb, action))| action.and_then(Planned::new).map_err(|source| OutcomeError::Action { index, verb, source }))
        .collect()
}

/// An action of a plugin's outcome, checked, with its target, its verb and (a JSON patch) its
/// operations parsed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Planned {
    #[serde(flatten)]
    action: Action,
    #[serde(skip)]
    target: Target,
    #[serde(skip)]
    verb: Verb,
    /// A JSON patch's operations, parsed once here: admission applies them and the executor
    /// sends them.
    #[serde(skip)]
    json_patch: Option<json_patch::Patch>,
}

/// A patch document as planned: a merge patch (a JSON object) or a JSON patch's operations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PatchDoc<'a> {
    /// JSON merge patch (RFC 7386).
    Merge(&'a Value),
    /// JSON patch (RFC 6902), parsed.
    Json(&'a json_patch::Patch),
}

impl Planned {
    /// Check `action` against the contract (its target by the one rule, its documents' shapes)
    /// and derive its target and verb.
    pub fn new(action: Action) -> Result<Self, PlanError> {
        let verb = action.verb();
        let mut json_patch = None;
        let target = match &action {
            Action::Create(object) => Target::of_object(object, Naming::NameOrGenerate)?,
            Action::Apply(object) => Target::of_object(object, Naming::NameOnly("apply"))?,
            Action::Delete(Deletion { key, .. }) | Action::Event(Event { regarding: key, .. }) => Target::of_key(key)?,
            Action::UpdateStatus { key, status } => {
                if !status.is_object() {
                    return Err(PlanError::StatusNotAnObject(json_type(status)));
                }
                Target::of_key(key)?
            }
            Action::Patch(Patch { key, patch_type, body, .. }) => {
                let target = Target::of_key(key)?;
                json_patch = check_patch(*patch_type, body)?;
                target
            }
        };
        if let Action::Event(Event { reason, .. }) = &action
            && reason.is_empty()
        {
            return Err(PlanError::EventWithoutReason);
        }
        Ok(Self { action, target, verb, json_patch })
    }

    /// The patch document of a patch (`None`: not a patch).
    pub fn patch(&self) -> Option<PatchDoc<'_>> {
        match (&self.action, &self.json_patch) {
            (Action::Patch(Patch { patch_type: PatchType::Merge, body, .. }), _) => Some(PatchDoc::Merge(body)),
            (Action::Patch(Patch { patch_type: PatchType::Json, .. }), Some(ops)) => Some(PatchDoc::Json(ops)),
            _ => None,
        }
    }

    /// The action as the plugin returned it.
    pub fn action(&self) -> &Action {
        &self.action
    }

    /// The object it touches (an Event: the object it is about).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The grant it needs: the one verb of grants, refusals, logs and metrics.
    pub fn verb(&self) -> Verb {
        self.verb
    }

    /// Whether it makes an object appear or disappear (creates and deletes: what expectations
    /// wait for, and what slow-start batches).
    pub fn is_create_or_delete(&self) -> bool {
        self.action.is_create_or_delete()
    }
}

/// Check a patch document by the model's one rule (`wasmloop_model::patch`: a merge patch an
/// object with an object `metadata`, if any; a JSON patch only `add`, `remove`, `replace` and
/// `test` operations with bounded paths), and return a JSON patch's operations parsed.
fn check_patch(patch_type: PatchType, body: &Value) -> Result<Option<json_patch::Patch>, PlanError> {
    match patch_type {
        PatchType::Merge => {
            wasmloop_model::patch::check_merge(body)?;
            Ok(None)
        }
        PatchType::Json => {
            wasmloop_model::patch::check_json(body)?;
            let parsed = <json_patch::Patch as serde::Deserialize>::deserialize(body)
                .map_err(|e| PlanError::Json { what: "patch ", error: e.to_string() })?;
            Ok(Some(parsed))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::actions::Preconditions;
    use crate::kinds::KindRef;

    fn key(name: &str) -> crate::kinds::ObjectKey {
        KindRef::new("v1", "Pod").key(Some("ns"), name)
    }

    #[test]
    fn target_and_verb_are_derived_once() {
        let p =
            Planned::new(Action::Create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-", "namespace": "ns"}})))
                .unwrap();
        assert_eq!((p.verb(), p.target().to_string()), (Verb::Create, "v1/Pod/ns/p-*".to_string()));
        let status_patch = Action::Patch(Patch {
            key: key("p"),
            status: true,
            patch_type: PatchType::Merge,
            body: json!({"status": {}}),
            preconditions: Preconditions::default(),
        });
        assert_eq!(Planned::new(status_patch).unwrap().verb(), Verb::UpdateStatus);
        let apply =
            Planned::new(Action::Apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}))).unwrap();
        assert_eq!(apply.verb(), Verb::Apply);
        assert!(!apply.is_create_or_delete());
        // Serialized as the plugin said it (what `wasmloop reconcile` prints).
        assert_eq!(serde_json::to_value(&apply).unwrap()["action"], "apply");
    }

    #[test]
    fn contract_breaches_are_named() {
        let err = |a: Action| Planned::new(a).unwrap_err().to_string();
        assert_eq!(err(Action::UpdateStatus { key: key("p"), status: json!(3) }), "status must be a JSON object, got a number");
        assert_eq!(err(Action::delete(key(""))), "the object has no name");
        let patch = |patch_type, body| {
            Action::Patch(Patch { key: key("p"), status: false, patch_type, body, preconditions: Preconditions::default() })
        };
        assert_eq!(err(patch(PatchType::Merge, json!([]))), "a merge patch must be a JSON object, got an array");
        assert_eq!(err(patch(PatchType::Merge, json!({"metadata": null}))), "a merge patch's metadata must be a JSON object, got null");
        assert!(err(patch(PatchType::Json, json!([{"op": "add", "path": "no-slash", "value": 1}]))).starts_with("invalid patch JSON"));
        assert_eq!(err(patch(PatchType::Json, json!({}))), "a JSON patch must be a list of operations, got an object");
        assert!(err(patch(PatchType::Json, json!([{"op": "copy", "from": "/a", "path": "/b"}]))).contains("operation 0: op \"copy\""));
        let deep = "/a".repeat(MAX_PATCH_PATH_SEGMENTS + 1);
        assert!(err(patch(PatchType::Json, json!([{"op": "remove", "path": deep}]))).contains("more than 128 segments"));
        let event = Action::Event(Event {
            regarding: key("p"),
            event_type: super::super::EventType::Normal,
            reason: String::new(),
            message: "m".into(),
        });
        assert_eq!(err(event), "reason is required");
    }
}
