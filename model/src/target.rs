//! [`Target`]: the one rule for which object an action touches.
//!
//! Every consumer of a plugin's actions (the host's outcome conversion, its grant checks and
//! protected-object rules, its executor, and the SDK's `testing` fake) derives the target here,
//! so they can never disagree about what an action writes. The checks mirror what the API server
//! accepts in a request path: names are path segments (no `/`, `%`, `.` or `..`), namespaces
//! are DNS labels, `apiVersion` is `version` or `group/version`, and a `…List` kind is refused
//! (an action writes one object). Scope is checked separately, against discovery
//! ([`Target::check_scope`]): a namespace on a cluster-scoped kind, or none on a namespaced
//! kind, is an invalid action rather than something to guess about.

use std::fmt;

use serde_json::Value;

use crate::kind::{KindRef, ObjectKey};
use crate::name::{self, DNS_LABEL_MAX, NameError};

/// Why an action's target is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The body is not a JSON object.
    #[error("expected a JSON object, got {0}")]
    NotAnObject(&'static str),
    /// A required field is absent or empty.
    #[error("the object has no {0}")]
    Missing(&'static str),
    /// A field that must be a string is not.
    #[error("{0} must be a string")]
    NotAString(&'static str),
    /// The apiVersion is neither `version` nor `group/version`.
    #[error("invalid apiVersion {0:?}: expected `version` or `group/version` (e.g. `v1`, `apps/v1`)")]
    ApiVersion(String),
    /// The kind is not a type name.
    #[error("invalid kind {0:?}: expected a type name such as `Pod` (letters and digits)")]
    Kind(String),
    /// A `…List` kind: an action writes one object.
    #[error("kind {0} is a list; an action writes exactly one object")]
    ListKind(String),
    /// A name or generateName that is not a request-path segment.
    #[error("invalid {field} {value:?}: {why}")]
    Name {
        /// `metadata.name` or `metadata.generateName`.
        field: &'static str,
        /// The name (its first 80 characters).
        value: String,
        /// The rule it breaks.
        why: NameError,
    },
    /// The namespace is not a DNS label.
    #[error("invalid namespace {0:?}: expected a DNS label (a-z, 0-9 and '-', at most 63 characters)")]
    Namespace(String),
    /// `generateName` on an action that must name its object.
    #[error("metadata.generateName is only allowed on create; {0} needs metadata.name")]
    GenerateNameNotAllowed(&'static str),
    /// A namespace on a cluster-scoped kind.
    #[error("{kind} is cluster-scoped, but the action names namespace {namespace:?}")]
    NamespaceOnClusterScoped {
        /// The kind.
        kind: String,
        /// The namespace named.
        namespace: String,
    },
    /// No namespace on a namespaced kind.
    #[error("{kind} is namespaced, but the action names no namespace")]
    NoNamespaceOnNamespaced {
        /// The kind.
        kind: String,
    },
}

impl TargetError {
    /// A stable name of the kind of error, as the conformance corpus records it (a bad name is
    /// `name:<rule>`, the rule being [`NameError::kind`]).
    pub fn kind(&self) -> String {
        match self {
            TargetError::NotAnObject(_) => "not_an_object".into(),
            TargetError::Missing(_) => "missing".into(),
            TargetError::NotAString(_) => "not_a_string".into(),
            TargetError::ApiVersion(_) => "api_version".into(),
            TargetError::Kind(_) => "kind".into(),
            TargetError::ListKind(_) => "list_kind".into(),
            TargetError::Name { why, .. } => format!("name:{}", why.kind()),
            TargetError::Namespace(_) => "namespace".into(),
            TargetError::GenerateNameNotAllowed(_) => "generate_name_not_allowed".into(),
            TargetError::NamespaceOnClusterScoped { .. } => "namespace_on_cluster_scoped".into(),
            TargetError::NoNamespaceOnNamespaced { .. } => "no_namespace_on_namespaced".into(),
        }
    }

    /// The field at fault, where one is: `metadata.name`, `metadata.generateName`, …
    pub fn field(&self) -> Option<&'static str> {
        match self {
            TargetError::Missing(f) | TargetError::NotAString(f) | TargetError::Name { field: f, .. } => Some(f),
            TargetError::ApiVersion(_) => Some("apiVersion"),
            TargetError::Kind(_) | TargetError::ListKind(_) => Some("kind"),
            TargetError::Namespace(_) | TargetError::NamespaceOnClusterScoped { .. } | TargetError::NoNamespaceOnNamespaced { .. } => {
                Some("metadata.namespace")
            }
            TargetError::GenerateNameNotAllowed(_) => Some("metadata.generateName"),
            TargetError::NotAnObject(_) => None,
        }
    }
}

/// The name part of a target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetName {
    /// `metadata.name`.
    Name(String),
    /// `metadata.generateName` (create only): the server appends a random suffix.
    GenerateName(String),
}

/// The object an action touches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// Its API type (apiVersion and kind checked).
    pub kind: KindRef,
    /// `None` for cluster-scoped objects (checked against discovery by [`Target::check_scope`]).
    pub namespace: Option<String>,
    /// Its name, or the prefix the server completes.
    pub name: TargetName,
}

/// Whether `metadata.generateName` may stand in for `metadata.name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// `create`: `name` or `generateName`.
    NameOrGenerate,
    /// Everything else: `name` only. The payload names the verb for messages.
    NameOnly(&'static str),
}

impl Target {
    /// The target of an object body (create, apply): `apiVersion`, `kind`,
    /// `metadata.namespace`, `metadata.name` (or `metadata.generateName` when `naming` allows).
    pub fn of_object(object: &Value, naming: Naming) -> Result<Self, TargetError> {
        let Some(obj) = object.as_object() else {
            return Err(TargetError::NotAnObject(json_type(object)));
        };
        let api_version = required_str(obj.get("apiVersion"), "apiVersion")?;
        let kind = required_str(obj.get("kind"), "kind")?;
        let meta = match obj.get("metadata") {
            None | Some(Value::Null) => return Err(TargetError::Missing("metadata.name")),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(TargetError::NotAString("metadata (an object)")),
        };
        let namespace = optional_str(meta.get("namespace"), "metadata.namespace")?;
        let name = optional_str(meta.get("name"), "metadata.name")?;
        let generate = optional_str(meta.get("generateName"), "metadata.generateName")?;
        let name = match (name, generate, naming) {
            (Some(n), _, _) => TargetName::Name(n.to_owned()),
            (None, Some(g), Naming::NameOrGenerate) => TargetName::GenerateName(g.to_owned()),
            (None, Some(_), Naming::NameOnly(verb)) => return Err(TargetError::GenerateNameNotAllowed(verb)),
            (None, None, Naming::NameOrGenerate) => {
                return Err(TargetError::Missing("metadata.name (or metadata.generateName)"));
            }
            (None, None, Naming::NameOnly(_)) => return Err(TargetError::Missing("metadata.name")),
        };
        Self::checked(api_version, kind, namespace, name)
    }

    /// The target of a key (delete, update-status, event, patch).
    pub fn of_key(key: &ObjectKey) -> Result<Self, TargetError> {
        if key.name.is_empty() {
            return Err(TargetError::Missing("name"));
        }
        Self::checked(&key.kind.api_version, &key.kind.kind, key.ns().filter(|n| !n.is_empty()), TargetName::Name(key.name.clone()))
    }

    /// The object's key, unless the server is to generate its name.
    pub fn key(&self) -> Option<ObjectKey> {
        self.name().map(|name| self.kind.key(self.namespace.as_deref(), name))
    }

    fn checked(api_version: &str, kind: &str, namespace: Option<&str>, name: TargetName) -> Result<Self, TargetError> {
        check_api_version(api_version)?;
        check_kind(kind)?;
        if let Some(ns) = namespace {
            check_namespace(ns)?;
        }
        match &name {
            TargetName::Name(n) => check_path_segment("metadata.name", n, 253)?,
            // The server appends 5 characters.
            TargetName::GenerateName(g) => check_path_segment("metadata.generateName", g, 248)?,
        }
        Ok(Self { kind: KindRef::new(api_version, kind), namespace: namespace.map(str::to_owned), name })
    }

    /// The name, unless the server is to generate it.
    pub fn name(&self) -> Option<&str> {
        match &self.name {
            TargetName::Name(n) => Some(n),
            TargetName::GenerateName(_) => None,
        }
    }

    /// The name, or `generateName*` for messages and grant checks.
    pub fn display_name(&self) -> String {
        match &self.name {
            TargetName::Name(n) => n.clone(),
            TargetName::GenerateName(g) => format!("{g}*"),
        }
    }

    /// Check the namespace against the kind's scope from discovery.
    pub fn check_scope(&self, namespaced: bool) -> Result<(), TargetError> {
        let kind = self.kind.to_string();
        match (&self.namespace, namespaced) {
            (Some(ns), false) => Err(TargetError::NamespaceOnClusterScoped { kind, namespace: ns.clone() }),
            (None, true) => Err(TargetError::NoNamespaceOnNamespaced { kind }),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The one key syntax (as the host's ObjectKey): <apiVersion>/<kind>/[<namespace>/]<name>.
        write!(f, "{}/", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, "{ns}/")?;
        }
        f.write_str(&self.display_name())
    }
}

/// "an object", "a string", …: what a JSON value is, for messages.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn required_str<'a>(v: Option<&'a Value>, field: &'static str) -> Result<&'a str, TargetError> {
    optional_str(v, field)?.ok_or(TargetError::Missing(field))
}

/// A string field; absent, null and `""` are `None`.
fn optional_str<'a>(v: Option<&'a Value>, field: &'static str) -> Result<Option<&'a str>, TargetError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str()).filter(|s| !s.is_empty())),
        Some(_) => Err(TargetError::NotAString(field)),
    }
}

fn check_api_version(v: &str) -> Result<(), TargetError> {
    let ok = match v.split_once('/') {
        None => name::dns_label(v, DNS_LABEL_MAX).is_ok(),
        Some((group, version)) => name::dns_subdomain(group).is_ok() && name::dns_label(version, DNS_LABEL_MAX).is_ok(),
    };
    if ok { Ok(()) } else { Err(TargetError::ApiVersion(v.to_owned())) }
}

fn check_kind(kind: &str) -> Result<(), TargetError> {
    let ok =
        kind.len() <= 63 && kind.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !ok {
        return Err(TargetError::Kind(kind.to_owned()));
    }
    if kind.ends_with("List") {
        return Err(TargetError::ListKind(kind.to_owned()));
    }
    Ok(())
}

fn check_namespace(ns: &str) -> Result<(), TargetError> {
    name::dns_label(ns, DNS_LABEL_MAX).map_err(|_| TargetError::Namespace(ns.to_owned()))
}

/// A name must be one segment of a request path ([`name::path_segment`]).
fn check_path_segment(field: &'static str, value: &str, max: usize) -> Result<(), TargetError> {
    name::path_segment(value, max).map_err(|why| TargetError::Name { field, value: value.chars().take(80).collect(), why })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn create(obj: Value) -> Result<Target, TargetError> {
        Target::of_object(&obj, Naming::NameOrGenerate)
    }

    fn apply(obj: Value) -> Result<Target, TargetError> {
        Target::of_object(&obj, Naming::NameOnly("apply"))
    }

    #[test]
    fn objects_give_their_target() {
        let t = create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}})).unwrap();
        assert_eq!(t.to_string(), "v1/Pod/a/p");
        assert_eq!(t.name(), Some("p"));
        let t = create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-", "namespace": "a"}})).unwrap();
        assert_eq!(t.name, TargetName::GenerateName("web-".into()));
        assert_eq!(t.to_string(), "v1/Pod/a/web-*");
        let t =
            apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:x"}})).unwrap();
        assert_eq!(t.namespace, None);
        assert_eq!(t.to_string(), "rbac.authorization.k8s.io/v1/ClusterRole/system:x");
        let t = apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ""}})).unwrap();
        assert_eq!(t.namespace, None, "an empty namespace is no namespace");
    }

    #[test]
    fn generate_name_is_for_create_only() {
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-", "namespace": "a"}});
        assert_eq!(apply(obj).unwrap_err(), TargetError::GenerateNameNotAllowed("apply"));
        let err = create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}})).unwrap_err();
        assert_eq!(err.to_string(), "the object has no metadata.name (or metadata.generateName)");
    }

    #[test]
    fn hostile_targets_are_refused() {
        let with = |api: Value, kind: Value, meta: Value| create(json!({"apiVersion": api, "kind": kind, "metadata": meta}));
        let cases = [
            (with(json!("v1"), json!("Pod"), json!({"name": "p/status", "namespace": "a"})), "subresources"),
            (with(json!("v1"), json!("Pod"), json!({"name": "..", "namespace": "a"})), "`.` and `..`"),
            (with(json!("v1"), json!("Pod"), json!({"name": "a%2Fb", "namespace": "a"})), "'%'"),
            (with(json!("v1"), json!("Pod"), json!({"name": "a b", "namespace": "a"})), "whitespace"),
            (with(json!("v1"), json!("Pod"), json!({"name": "p", "namespace": "../kube-system"})), "invalid namespace"),
            (with(json!("v1"), json!("Pod"), json!({"name": "p", "namespace": "A"})), "invalid namespace"),
            (with(json!("v1"), json!("List"), json!({"name": "p"})), "is a list"),
            (with(json!("v1"), json!("PodList"), json!({"name": "p"})), "is a list"),
            (with(json!("v1"), json!("Pod/status"), json!({"name": "p"})), "invalid kind"),
            (with(json!("../v1"), json!("Pod"), json!({"name": "p"})), "invalid apiVersion"),
            (with(json!("a/b/v1"), json!("Pod"), json!({"name": "p"})), "invalid apiVersion"),
            (with(json!(1), json!("Pod"), json!({"name": "p"})), "apiVersion must be a string"),
            (with(json!("v1"), json!("Pod"), json!({"name": ["p"]})), "metadata.name must be a string"),
            (with(json!("v1"), json!("Pod"), json!({"name": "x".repeat(254)})), "longer than 253"),
            (create(json!([1])), "expected a JSON object, got an array"),
            (create(json!({"kind": "Pod", "metadata": {"name": "p"}})), "no apiVersion"),
        ];
        for (result, needle) in cases {
            let err = result.expect_err(needle).to_string();
            assert!(err.contains(needle), "{err:?} should contain {needle:?}");
        }
    }

    #[test]
    fn keys_are_checked_the_same_way() {
        assert!(Target::of_key(&KindRef::new("v1", "Pod").key(Some("a"), "p")).is_ok());
        assert_eq!(Target::of_key(&KindRef::new("v1", "Pod").key(Some(""), "p")).unwrap().namespace, None);
        assert!(Target::of_key(&KindRef::new("v1", "Pod").key(Some("a"), "p/exec")).is_err());
        assert!(Target::of_key(&KindRef::new("v1", "Pod").key(Some("a"), "")).is_err());
        assert!(Target::of_key(&KindRef::new("v1", "NamespaceList").key(None, "x")).is_err());
    }

    #[test]
    fn scope_must_match_discovery() {
        let ns = Target::of_key(&KindRef::new("v1", "Namespace").key(Some("team-a"), "victim")).unwrap();
        assert_eq!(
            ns.check_scope(false).unwrap_err().to_string(),
            "v1/Namespace is cluster-scoped, but the action names namespace \"team-a\""
        );
        let pod = Target::of_key(&KindRef::new("v1", "Pod").key(None, "p")).unwrap();
        assert_eq!(pod.check_scope(true).unwrap_err().to_string(), "v1/Pod is namespaced, but the action names no namespace");
        assert!(Target::of_key(&KindRef::new("v1", "Pod").key(Some("a"), "p")).unwrap().check_scope(true).is_ok());
        assert!(Target::of_key(&KindRef::new("v1", "Namespace").key(None, "x")).unwrap().check_scope(false).is_ok());
    }
}
