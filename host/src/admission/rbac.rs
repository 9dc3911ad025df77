//! RBAC judged by its result: a binding by the subjects it will have, a role by whether an
//! identity of the host's is bound to it and by the roles it would aggregate into.
//!
//! *Identities* are every ServiceAccount in the host's namespaces: the host's own and each
//! plugin's (they live there), reached by name, as `system:serviceaccount:<ns>:<name>`, or
//! through the groups `system:serviceaccounts`, `system:serviceaccounts:<ns>` and
//! `system:authenticated`. No plugin may bind an identity to anything, unbind one, change a
//! role bound to one, or make a ClusterRole aggregate into one.
//!
//! The current bindings and roles come from one shared informer per RBAC kind (started the first
//! time a plugin writes an RBAC object; the host then needs list/watch on them), never from a
//! LIST per action.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wasmloop_model::Target;
use wasmloop_model::selector::Selector;

use crate::cache::IndexedStore;
use crate::informer::{Informer, InformerKey, InformerRegistry};
use crate::kinds::KindRef;

/// The RBAC API group.
pub(super) const GROUP: &str = "rbac.authorization.k8s.io";
/// Labels that aggregate a ClusterRole into Kubernetes' default roles (admin, edit, view, …).
const AGGREGATE_LABEL_PREFIX: &str = "rbac.authorization.k8s.io/aggregate-to-";
/// How long the first RBAC write waits for the informers' first list.
const SYNC_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether `target` is an RBAC role or binding (any version of the group).
pub(super) fn is_rbac(target: &Target) -> bool {
    target.kind.group() == GROUP && matches!(&*target.kind.kind, "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding")
}

/// The host's view of RBAC objects: four shared informers, started on first use.
pub(super) struct RbacCache {
    /// Where the informers come from (`None`: the stores were given, in unit tests).
    registry: Option<InformerRegistry>,
    informers: tokio::sync::OnceCell<Stores>,
}

/// Why the host cannot read the RBAC objects it judges RBAC writes by (nothing is sent then).
#[derive(Debug, thiserror::Error)]
pub(super) enum Unreadable {
    /// No informer registry (an offline admission asked for RBAC stores).
    #[error("no RBAC informers to start")]
    NoInformers,
    /// The informer on `kind` could not start.
    #[error("the host cannot watch {kind}: {reason}")]
    Watch { kind: KindRef, reason: String },
    /// The informer on `kind` has not listed in time.
    #[error("the host's informer on {kind} has not listed (does the host have list/watch on {GROUP} resources?): {reason}")]
    NotListed { kind: KindRef, reason: String },
}

/// The stores of the four RBAC kinds (the informers kept alive with them).
pub(super) struct Stores {
    _informers: Vec<Arc<Informer>>,
    roles: Arc<IndexedStore>,
    cluster_roles: Arc<IndexedStore>,
    bindings: Arc<IndexedStore>,
    cluster_bindings: Arc<IndexedStore>,
}

impl RbacCache {
    pub(super) fn new(registry: InformerRegistry) -> Self {
        Self { registry: Some(registry), informers: tokio::sync::OnceCell::new() }
    }

    /// A cache that holds `stores` already (unit tests: no API server).
    #[cfg(test)]
    pub(super) fn given(stores: Stores) -> Self {
        Self { registry: None, informers: tokio::sync::OnceCell::new_with(Some(stores)) }
    }

    /// The stores, once every informer listed; an error says what could not be read.
    pub(super) async fn stores(&self) -> Result<&Stores, Unreadable> {
        self.informers.get_or_try_init(|| self.start()).await
    }

    async fn start(&self) -> Result<Stores, Unreadable> {
        let registry = self.registry.as_ref().ok_or(Unreadable::NoInformers)?;
        let mut informers = Vec::new();
        for kind in ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"] {
            let kind = KindRef::new(format!("{GROUP}/v1"), kind);
            let key =
                InformerKey::new(kind.clone(), None, None).map_err(|e| Unreadable::Watch { kind: kind.clone(), reason: e.to_string() })?;
            let informer = registry.acquire(key).await.map_err(|e| Unreadable::Watch { kind: kind.clone(), reason: e.to_string() })?;
            informer.wait_synced(SYNC_TIMEOUT).await.map_err(|e| Unreadable::NotListed { kind: kind.clone(), reason: e.to_string() })?;
            informers.push(informer);
        }
        let store = |i: usize| informers[i].store().clone();
        Ok(Stores { roles: store(0), cluster_roles: store(1), bindings: store(2), cluster_bindings: store(3), _informers: informers })
    }
}

impl Stores {
    /// Stores holding `objects` (any of the four RBAC kinds), for unit tests.
    #[cfg(test)]
    pub(super) fn of(objects: &[Value]) -> Self {
        let store = |kind: &str| {
            let store = Arc::new(IndexedStore::new(KindRef::new(format!("{GROUP}/v1"), kind)));
            for o in objects.iter().filter(|o| o["kind"] == kind) {
                store.apply(o.clone()).expect("an RBAC object");
            }
            store
        };
        let (roles, cluster_roles, bindings, cluster_bindings) =
            (store("Role"), store("ClusterRole"), store("RoleBinding"), store("ClusterRoleBinding"));
        Self { _informers: Vec::new(), roles, cluster_roles, bindings, cluster_bindings }
    }

    /// The cached object `target` names (any version: RBAC objects are one object per name).
    pub(super) fn get(&self, target: &Target) -> Option<Value> {
        let store = match &*target.kind.kind {
            "Role" => &self.roles,
            "ClusterRole" => &self.cluster_roles,
            "RoleBinding" => &self.bindings,
            _ => &self.cluster_bindings,
        };
        store.get(target.namespace.as_deref(), target.name()?).map(|o| o.value())
    }

    /// A binding of an identity that refers to role `kind/name` (in `namespace` for a Role).
    fn binding_of(&self, kind: &str, namespace: Option<&str>, name: &str, is_identity_ns: &dyn Fn(&str) -> bool) -> Option<String> {
        let cluster = if kind == "ClusterRole" { self.cluster_bindings.snapshot() } else { Vec::new() };
        let namespaced = match (kind, namespace) {
            ("ClusterRole", _) => self.bindings.snapshot(),
            (_, Some(ns)) => self.bindings.list(Some(ns), None),
            _ => Vec::new(),
        };
        cluster.into_iter().chain(namespaced).find_map(|b| {
            let b = b.value();
            let refers = b.pointer("/roleRef/kind").and_then(Value::as_str) == Some(kind)
                && b.pointer("/roleRef/name").and_then(Value::as_str) == Some(name);
            if !refers {
                return None;
            }
            let subject = identity_subject(&b, is_identity_ns)?;
            let binding = b.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
            Some(format!("{binding} binds it to {subject}"))
        })
    }

    /// The aggregating ClusterRoles bound to an identity whose selectors `labels` match.
    fn aggregates_into(&self, labels: &Value, is_identity_ns: &dyn Fn(&str) -> bool) -> Option<String> {
        self.cluster_roles.snapshot().into_iter().find_map(|role| {
            let role = role.value();
            let selectors = role.pointer("/aggregationRule/clusterRoleSelectors").and_then(Value::as_array)?;
            let name = role.pointer("/metadata/name").and_then(Value::as_str)?;
            let matches = selectors.iter().any(|s| label_selector(s).is_none_or(|sel| sel.matches_with(|k| labels.get(k)?.as_str())));
            if !matches {
                return None;
            }
            let bound = self.binding_of("ClusterRole", None, name, is_identity_ns)?;
            Some(format!("its labels aggregate it into ClusterRole {name} ({bound})"))
        })
    }
}

/// Why an RBAC write is refused, if it is: `before` and `after` are the object around the write.
pub(super) fn check(
    stores: Option<&Stores>,
    target: &Target,
    before: Option<&Value>,
    after: Option<&Value>,
    is_identity_ns: &dyn Fn(&str) -> bool,
) -> Result<(), super::Rule> {
    use super::Rule;
    match &*target.kind.kind {
        "RoleBinding" | "ClusterRoleBinding" => {
            for (state, object) in [("binds", before), ("would bind", after)] {
                if let Some(subject) = object.and_then(|o| identity_subject(o, is_identity_ns)) {
                    return Err(Rule::IdentityBinding(format!("{target} {state} {subject}")));
                }
            }
            Ok(())
        }
        _ => {
            for object in [before, after].into_iter().flatten() {
                let labels = object.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
                if let Some(key) = labels.keys().find(|k| k.starts_with(AGGREGATE_LABEL_PREFIX)) {
                    return Err(Rule::IdentityRole(format!(
                        "{target} carries the label {key}, which aggregates it into roles identities may hold"
                    )));
                }
                if target.kind.kind == "ClusterRole"
                    && let Some(why) = stores.and_then(|s| s.aggregates_into(&Value::Object(labels), is_identity_ns))
                {
                    return Err(Rule::IdentityRole(format!("{target}: {why}")));
                }
            }
            let Some(name) = target.name() else { return Ok(()) };
            if let Some(why) = stores.and_then(|s| s.binding_of(&target.kind.kind, target.namespace.as_deref(), name, is_identity_ns)) {
                return Err(Rule::IdentityRole(format!("{target} is bound to an identity of the host's: {why}")));
            }
            Ok(())
        }
    }
}

/// The first subject of `binding` that covers a ServiceAccount of an identity namespace.
fn identity_subject(binding: &Value, is_identity_ns: &dyn Fn(&str) -> bool) -> Option<String> {
    let binding_ns = binding.pointer("/metadata/namespace").and_then(Value::as_str);
    let subjects = binding.get("subjects").and_then(Value::as_array)?;
    subjects.iter().find_map(|s| {
        let field = |f: &str| s.get(f).and_then(Value::as_str).unwrap_or_default();
        let name = field("name");
        let covers = match field("kind") {
            // A RoleBinding's ServiceAccount subject without a namespace is in the binding's.
            "ServiceAccount" => Some(field("namespace")).filter(|n| !n.is_empty()).or(binding_ns).is_some_and(is_identity_ns),
            "Group" => {
                name == "system:serviceaccounts"
                    || name == "system:authenticated"
                    || name.strip_prefix("system:serviceaccounts:").is_some_and(is_identity_ns)
            }
            "User" => {
                name.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':')).is_some_and(|(ns, _)| is_identity_ns(ns))
            }
            _ => false,
        };
        covers.then(|| format!("{} {name:?}", field("kind")))
    })
}

/// A `LabelSelector` object (matchLabels, matchExpressions) as a parsed selector (the empty one
/// matches every ClusterRole, as the API server reads it); `None` if it cannot be read, which
/// the caller takes as matching (fail closed).
fn label_selector(v: &Value) -> Option<Selector> {
    let mut parts = Vec::new();
    for (k, val) in v.get("matchLabels").and_then(Value::as_object).into_iter().flatten() {
        parts.push(format!("{k}={}", val.as_str()?));
    }
    for e in v.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let key = e.get("key")?.as_str()?;
        let values: Vec<&str> = e.get("values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        parts.push(match e.get("operator")?.as_str()? {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        });
    }
    Selector::parse(&parts.join(",")).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn host_ns(ns: &str) -> bool {
        ns == "wasmloop"
    }

    fn binding(subject: Value) -> Value {
        json!({"metadata": {"name": "b", "namespace": "team-b"}, "subjects": [subject]})
    }

    #[test]
    fn every_way_of_naming_an_identity_is_seen() {
        for subject in [
            json!({"kind": "ServiceAccount", "name": "wasmloop", "namespace": "wasmloop"}),
            json!({"kind": "ServiceAccount", "name": "wasmloop-plugin-podset", "namespace": "wasmloop"}),
            json!({"kind": "Group", "name": "system:serviceaccounts"}),
            json!({"kind": "Group", "name": "system:serviceaccounts:wasmloop"}),
            json!({"kind": "Group", "name": "system:authenticated"}),
            json!({"kind": "User", "name": "system:serviceaccount:wasmloop:anyone"}),
        ] {
            assert!(identity_subject(&binding(subject.clone()), &host_ns).is_some(), "{subject}");
        }
        for subject in [
            json!({"kind": "ServiceAccount", "name": "wasmloop", "namespace": "team-b"}),
            json!({"kind": "ServiceAccount", "name": "wasmloop"}),
            json!({"kind": "Group", "name": "system:serviceaccounts:team-b"}),
            json!({"kind": "User", "name": "system:serviceaccount:team-b:wasmloop"}),
            json!({"kind": "User", "name": "wasmloop"}),
        ] {
            assert_eq!(identity_subject(&binding(subject.clone()), &host_ns), None, "{subject}");
        }
        let in_host_ns = json!({"metadata": {"namespace": "wasmloop"}, "subjects": [{"kind": "ServiceAccount", "name": "x"}]});
        assert!(identity_subject(&in_host_ns, &host_ns).is_some(), "a subject without namespace is in the binding's");
    }

    #[test]
    fn bindings_and_roles_are_judged_before_and_after() {
        let t = |kind: &str, ns: Option<&str>| Target::of_key(&KindRef::new("rbac.authorization.k8s.io/v1", kind).key(ns, "x")).unwrap();
        let team_b = binding(json!({"kind": "ServiceAccount", "name": "wasmloop", "namespace": "team-b"}));
        let host = binding(json!({"kind": "ServiceAccount", "name": "wasmloop", "namespace": "wasmloop"}));
        let crb = t("ClusterRoleBinding", None);
        assert!(check(None, &crb, Some(&team_b), Some(&team_b), &host_ns).is_ok());
        let err = check(None, &crb, Some(&team_b), Some(&host), &host_ns).unwrap_err();
        assert_eq!(err.name(), "identity-binding");
        assert!(err.to_string().contains("would bind ServiceAccount \"wasmloop\""), "{err}");
        assert!(check(None, &crb, Some(&host), None, &host_ns).unwrap_err().to_string().contains(" binds "), "unbinding");
        let role = t("ClusterRole", None);
        let labelled = json!({"metadata": {"labels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}});
        assert_eq!(check(None, &role, None, Some(&labelled), &host_ns).unwrap_err().name(), "identity-role");
        assert_eq!(check(None, &role, Some(&labelled), Some(&json!({})), &host_ns).unwrap_err().name(), "identity-role");
        assert!(check(None, &role, None, Some(&json!({"rules": []})), &host_ns).is_ok());
    }

    #[test]
    fn aggregation_selectors_read_like_the_api_server() {
        let s = label_selector(&json!({"matchLabels": {"a": "1"}, "matchExpressions": [
            {"key": "b", "operator": "In", "values": ["x", "y"]}, {"key": "c", "operator": "DoesNotExist"}]}))
        .unwrap();
        let labels = json!({"a": "1", "b": "y"});
        assert!(s.matches_with(|k| labels.get(k)?.as_str()));
        let labels = json!({"a": "1", "b": "y", "c": ""});
        assert!(!s.matches_with(|k| labels.get(k)?.as_str()));
        assert!(label_selector(&json!({"matchExpressions": [{"key": "b", "operator": "Sometimes"}]})).is_none());
    }
}
