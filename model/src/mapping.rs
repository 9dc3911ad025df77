//! [`Mapping`]: how an event on a watched (related) object turns into keys of the reconciled
//! (primary) kind — one definition for the host's controllers and the SDK's test fake.

use std::borrow::Cow;

use serde_json::Value;

use crate::index_path::IndexPath;
use crate::kind::{KindRef, ObjectKey};

/// How events on a watched kind map to keys of the reconciled kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Mapping {
    /// The object's controller owner (`ownerReferences[controller=true]`), if it is of the
    /// reconciled kind.
    Owner,
    /// The reconciled object named by this label's value, in the object's namespace.
    Label(String),
    /// The reconciled object with the same namespace and name.
    SameName,
    /// The reconciled object whose name is the object's namespace (Namespace ← ConfigMap).
    Namespace,
    /// Every reconciled object whose index `index` holds a value of the related object
    /// (contract 0.3): "who names me" as one declaration.
    Index {
        /// An index of the reconciled kind (declared by the plugin).
        index: String,
        /// What of the related object is looked up.
        value: IndexValue,
    },
}

/// Which value of a related object an [`Mapping::Index`] looks up.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IndexValue {
    /// Its name; when both kinds are namespaced, only primaries in its namespace match.
    Name,
    /// `<namespace>/<name>` (`<name>` if cluster-scoped), matched in every namespace.
    NamespacedName,
    /// The values of a dotted field path of it (as an index path); when both kinds are
    /// namespaced, only primaries in its namespace match.
    Field(String),
}

impl IndexValue {
    /// Check a field path (the error is why it is refused).
    pub fn check(&self) -> Result<(), crate::index_path::PathError> {
        match self {
            IndexValue::Field(path) => IndexPath::parse(path).map(drop),
            IndexValue::Name | IndexValue::NamespacedName => Ok(()),
        }
    }

    /// The values to look up for the related object (`namespace`, `name`, its JSON if the
    /// value is a field; `json` is only called then), and whether matches are limited to its
    /// namespace (when both kinds are namespaced).
    pub fn lookup<'a>(&self, namespace: Option<&'a str>, name: &'a str, json: impl FnOnce() -> Option<Value>) -> (Vec<String>, bool) {
        match self {
            IndexValue::Name => (vec![name.to_owned()], true),
            IndexValue::NamespacedName => {
                let value = match namespace {
                    Some(ns) => format!("{ns}/{name}"),
                    None => name.to_owned(),
                };
                (vec![value], false)
            }
            IndexValue::Field(path) => {
                let values = match (IndexPath::parse(path), json()) {
                    (Ok(p), Some(v)) => p.values(&v).into_iter().map(Cow::into_owned).collect(),
                    _ => Vec::new(),
                };
                (values, true)
            }
        }
    }
}

/// The keys of the reconciled kind (`primary`, `namespaced` or not) that an event on `related`
/// maps to through `mapping`: the reference the host's optimised mapper (over its cache and
/// indexes) and every language's test fake follow. `primaries` are the reconciled objects an
/// [`Mapping::Index`] looks among, `index_values` the values of the named index for one of them.
/// Each key once, in the order found.
pub fn keys(
    mapping: &Mapping,
    primary: &KindRef,
    namespaced: bool,
    related: &Value,
    primaries: &[Value],
    index_values: impl Fn(&str, &Value) -> Vec<String>,
) -> Vec<ObjectKey> {
    let meta = |o: &'_ Value, f: &str| o.get("metadata").and_then(|m| m.get(f)).and_then(Value::as_str).map(str::to_owned);
    let ns = meta(related, "namespace").filter(|n| !n.is_empty());
    let name = meta(related, "name").unwrap_or_default();
    let key = |n: &str| primary.key(if namespaced { ns.as_deref() } else { None }, n);
    let found: Vec<ObjectKey> = match mapping {
        Mapping::Owner => crate::owner::controller(related)
            .filter(|r| {
                let field = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or_default();
                field("kind") == primary.kind && KindRef::new(field("apiVersion"), field("kind")).group() == primary.group()
            })
            .and_then(|r| r.get("name").and_then(Value::as_str))
            .map(key)
            .into_iter()
            .collect(),
        Mapping::Label(label) => crate::selector::Labels::label(related, label).filter(|v| !v.is_empty()).map(key).into_iter().collect(),
        Mapping::SameName => vec![key(&name)],
        Mapping::Namespace => ns.as_deref().map(|n| primary.key(None, n)).into_iter().collect(),
        Mapping::Index { index, value } => {
            let (values, same_namespace) = value.lookup(ns.as_deref(), &name, || Some(related.clone()));
            let same_namespace = same_namespace && namespaced && ns.is_some();
            primaries
                .iter()
                .filter(|p| !same_namespace || meta(p, "namespace") == ns)
                .filter(|p| index_values(index, p).iter().any(|v| values.contains(v)))
                .map(|p| primary.key(meta(p, "namespace").filter(|n| !n.is_empty()).as_deref(), meta(p, "name").unwrap_or_default()))
                .collect()
        }
    };
    let mut out: Vec<ObjectKey> = Vec::new();
    for k in found {
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lookups() {
        assert_eq!(IndexValue::Name.lookup(Some("ns"), "web", || None), (vec!["web".into()], true));
        assert_eq!(IndexValue::NamespacedName.lookup(Some("ns"), "web", || None), (vec!["ns/web".into()], false));
        assert_eq!(IndexValue::NamespacedName.lookup(None, "node-1", || None), (vec!["node-1".into()], false));
        let obj = json!({"spec": {"targets": ["a", "b"]}});
        assert_eq!(IndexValue::Field("spec.targets".into()).lookup(Some("ns"), "x", || Some(obj)), (vec!["a".into(), "b".into()], true));
        assert!(IndexValue::Field("spec..x".into()).check().is_err());
        assert!(IndexValue::Field("spec.x".into()).check().is_ok());
    }
}
