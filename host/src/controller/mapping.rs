//! Turning cache changes into keys of the reconciled kind (`for`, `owns`, `watches`).

use std::sync::Arc;

use crate::cache::{CachedObject, Change, IndexedStore};
use crate::kinds::{KindRef, ObjectKey};
use crate::reconciler::{IndexValue, Mapping};

/// Where a change on some kind should send the controller.
#[derive(Clone)]
pub(crate) struct KeyMapper {
    /// The reconciled kind.
    pub primary: KindRef,
    /// Whether the reconciled kind is namespaced.
    pub namespaced: bool,
    /// The reconciled kind's stores, whose indexes [`Mapping::Index`] looks in.
    pub stores: Vec<Arc<IndexedStore>>,
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
                for k in self.map(mapping, old) {
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
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

    fn map(&self, mapping: &Mapping, o: &CachedObject) -> Vec<ObjectKey> {
        match mapping {
            Mapping::Owner => o
                .controller_owner()
                .filter(|owner| same_group_kind(owner.api_version, owner.kind, &self.primary))
                .map(|owner| self.key(o.namespace(), owner.name))
                .into_iter()
                .collect(),
            Mapping::Label(label) => o.label(label).filter(|v| !v.is_empty()).map(|v| self.key(o.namespace(), v)).into_iter().collect(),
            Mapping::SameName => vec![self.key(o.namespace(), o.name())],
            Mapping::Namespace => o.namespace().map(|ns| ObjectKey::new(self.primary.clone(), None, ns)).into_iter().collect(),
            Mapping::Index { index, value } => self.by_index(index, value, o),
        }
    }

    /// The reconciled objects whose index `index` holds `value` of `o`; limited to `o`'s
    /// namespace when the value says so and both kinds are namespaced.
    fn by_index(&self, index: &str, value: &IndexValue, o: &CachedObject) -> Vec<ObjectKey> {
        let (values, same_namespace) = value.lookup(o.namespace(), o.name(), || Some(o.value()));
        let same_namespace = same_namespace && self.namespaced && o.namespace().is_some();
        let mut keys = Vec::new();
        for v in &values {
            for store in &self.stores {
                // The index was declared on the reconciled kind at wiring: it exists.
                for primary in store.by_index(index, v).unwrap_or_default() {
                    if same_namespace && primary.namespace() != o.namespace() {
                        continue;
                    }
                    let key = self.own_key(&primary);
                    if !keys.contains(&key) {
                        keys.push(key);
                    }
                }
            }
        }
        keys
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
        KeyMapper { primary: KindRef::new("apps/v1", "ReplicaSet"), namespaced: true, stores: vec![] }
    }

    #[test]
    fn index_mappings_find_every_primary_that_names_the_object() {
        let foo = KindRef::new("example.com/v1", "Foo");
        let store = Arc::new(IndexedStore::new(foo.clone()));
        store.add_index("deployment", crate::cache::IndexSpec::parse("spec.deploymentName").unwrap()).unwrap();
        store.add_index("source", crate::cache::IndexSpec::parse("spec.source").unwrap()).unwrap();
        let f = |ns: &str, name: &str, dep: &str, source: &str| {
            json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": name, "namespace": ns, "uid": name},
                   "spec": {"deploymentName": dep, "source": source}})
        };
        for v in
            [f("a", "f1", "web", "shared/cfg"), f("a", "f2", "web", "a/cfg"), f("b", "f3", "web", "shared/cfg"), f("a", "f4", "db", "")]
        {
            store.apply(v).unwrap();
        }
        let m = KeyMapper { primary: foo.clone(), namespaced: true, stores: vec![store] };
        let deployment =
            obj(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a", "uid": "d"}}));
        let by_name = Mapping::Index { index: "deployment".into(), value: IndexValue::Name };
        let mut keys: Vec<String> = m.for_watched(&by_name, &Change::Added(deployment)).iter().map(ToString::to_string).collect();
        keys.sort();
        assert_eq!(keys, ["example.com/v1/Foo/a/f1", "example.com/v1/Foo/a/f2"], "only Foos in the Deployment's namespace");
        let cm = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shared", "uid": "c"}}));
        let by_ref = Mapping::Index { index: "source".into(), value: IndexValue::NamespacedName };
        let mut keys: Vec<String> = m.for_watched(&by_ref, &Change::Added(cm)).iter().map(ToString::to_string).collect();
        keys.sort();
        assert_eq!(keys, ["example.com/v1/Foo/a/f1", "example.com/v1/Foo/b/f3"], "a namespace/name reference crosses namespaces");
        let target = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a", "uid": "p"}, "spec": {"owner": "db"}}),
        );
        let by_field = Mapping::Index { index: "deployment".into(), value: IndexValue::Field("spec.owner".into()) };
        let keys: Vec<String> = m.for_watched(&by_field, &Change::Added(target)).iter().map(ToString::to_string).collect();
        assert_eq!(keys, ["example.com/v1/Foo/a/f4"]);
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
        let m = KeyMapper { primary: KindRef::new("v1", "Namespace"), namespaced: false, stores: vec![] };
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
