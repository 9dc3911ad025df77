//! Turning cache changes into keys of the reconciled kind (`for`, `owns`, `watches`).

use crate::cache::{CachedObject, Change};
use crate::kinds::{KindRef, ObjectKey};

use crate::reconciler::Mapping;

/// Where a change on some kind should send the controller.
#[derive(Clone, Debug)]
pub(crate) struct KeyMapper {
    /// The reconciled kind.
    pub primary: KindRef,
    /// Whether the reconciled kind is namespaced.
    pub namespaced: bool,
}

impl KeyMapper {
    /// Keys for a change on the reconciled kind itself (`for`).
    pub fn for_primary(&self, change: &Change) -> Vec<ObjectKey> {
        match change {
            Change::Unchanged(_) => vec![],
            Change::Added(o) | Change::Updated { new: o, .. } | Change::Deleted(o) => vec![self.own_key(o)],
        }
    }

    /// Keys for a change on a watched kind, through `mapping`. An update that moves an object
    /// from one primary to another (owner or label changed) enqueues both.
    pub fn for_watched(&self, mapping: &Mapping, change: &Change) -> Vec<ObjectKey> {
        let mut keys = Vec::new();
        match change {
            Change::Unchanged(_) => {}
            Change::Added(o) | Change::Deleted(o) => keys.extend(self.map(mapping, o)),
            Change::Updated { old, new } => {
                keys.extend(self.map(mapping, new));
                if let Some(k) = self.map(mapping, old).filter(|k| !keys.contains(k)) {
                    keys.push(k);
                }
            }
        }
        keys
    }

    fn own_key(&self, o: &CachedObject) -> ObjectKey {
        ObjectKey::new(self.primary.clone(), o.namespace(), o.name())
    }

    fn key(&self, namespace: Option<&str>, name: &str) -> ObjectKey {
        let ns = if self.namespaced { namespace } else { None };
        ObjectKey::new(self.primary.clone(), ns, name)
    }

    fn map(&self, mapping: &Mapping, o: &CachedObject) -> Option<ObjectKey> {
        match mapping {
            Mapping::Owner => {
                let owner = o.controller_owner()?;
                same_group_kind(owner.api_version, owner.kind, &self.primary).then(|| self.key(o.namespace(), owner.name))
            }
            Mapping::Label(label) => o.label(label).filter(|v| !v.is_empty()).map(|v| self.key(o.namespace(), v)),
            Mapping::SameName => Some(self.key(o.namespace(), o.name())),
            Mapping::Namespace => o.namespace().map(|ns| ObjectKey::new(self.primary.clone(), None, ns)),
        }
    }
}

/// Owner references may name another version of the same kind: compare group and kind only.
fn same_group_kind(api_version: &str, kind: &str, primary: &KindRef) -> bool {
    kind == primary.kind && KindRef::new(api_version, kind).group() == primary.group()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn obj(v: serde_json::Value) -> Arc<CachedObject> {
        Arc::new(CachedObject::from_value(v).unwrap())
    }

    fn pod(name: &str, owner: Option<(&str, &str, &str)>, labels: serde_json::Value) -> Arc<CachedObject> {
        let owners = owner
            .map(|(av, kind, n)| json!([{"apiVersion": av, "kind": kind, "name": n, "uid": format!("uid-{n}"), "controller": true}]))
            .unwrap_or(json!([]));
        obj(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "1",
                          "ownerReferences": owners, "labels": labels}}))
    }

    fn mapper() -> KeyMapper {
        KeyMapper { primary: KindRef::new("apps/v1", "ReplicaSet"), namespaced: true }
    }

    #[test]
    fn owner_mapping_finds_the_controller_owner_of_the_primary_kind() {
        let m = mapper();
        let p = pod("p", Some(("apps/v1", "ReplicaSet", "rs")), json!({}));
        let keys = m.for_watched(&Mapping::Owner, &Change::Added(p));
        assert_eq!(keys, vec![ObjectKey::new(m.primary.clone(), Some("ns"), "rs")]);
        // Another version of the same group/kind still maps; another kind does not.
        let p = pod("p", Some(("apps/v1beta2", "ReplicaSet", "rs")), json!({}));
        assert_eq!(m.for_watched(&Mapping::Owner, &Change::Added(p)).len(), 1);
        let p = pod("p", Some(("batch/v1", "Job", "j")), json!({}));
        assert!(m.for_watched(&Mapping::Owner, &Change::Added(p)).is_empty());
        assert!(m.for_watched(&Mapping::Owner, &Change::Added(pod("p", None, json!({})))).is_empty());
    }

    #[test]
    fn update_that_moves_an_object_enqueues_old_and_new_primary() {
        let m = mapper();
        let old = pod("p", None, json!({"app": "a"}));
        let new = pod("p", None, json!({"app": "b"}));
        let keys = m.for_watched(&Mapping::Label("app".into()), &Change::Updated { old, new });
        let names: Vec<_> = keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, vec!["b", "a"]);
    }

    #[test]
    fn namespace_mapping_targets_cluster_scoped_primary() {
        let m = KeyMapper { primary: KindRef::new("v1", "Namespace"), namespaced: false };
        let keys = m.for_watched(&Mapping::Namespace, &Change::Added(pod("p", None, json!({}))));
        assert_eq!(keys, vec![ObjectKey::new(KindRef::new("v1", "Namespace"), None, "ns")]);
        let keys = m.for_watched(&Mapping::SameName, &Change::Added(pod("p", None, json!({}))));
        assert_eq!(keys[0].namespace, None, "cluster-scoped primary keys carry no namespace");
    }

    #[test]
    fn unchanged_objects_enqueue_nothing() {
        let m = mapper();
        assert!(m.for_primary(&Change::Unchanged(pod("p", None, json!({})))).is_empty());
    }
}
