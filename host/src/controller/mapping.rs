//! Turning cache changes into keys of the reconciled kind (`for`, `owns`, `watches`).
//!
//! A change maps to keys in time linear in the index entries it is mapped through: keys are
//! deduplicated in a hash set, never by scanning the keys found so far, and at most
//! [`KeyMapper::max_keys`] entries are looked at per change (`budgets.keysPerEvent`; the mapping
//! is cut there and says so: [`Mapped::capped`]). Keys outside the namespaces the reconciled
//! kind is read in ([`Scope`]) are dropped: a plugin is never handed a key it may not read.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::cache::{CachedObject, Change, IndexedStore};
use crate::kinds::{KindRef, ObjectKey};
use crate::reconciler::{IndexValue, Mapping};

/// Where keys of the reconciled kind may be: the namespaces it is read in.
#[derive(Clone, Debug)]
pub(crate) enum Scope {
    /// Anywhere (read in every namespace, or cluster-scoped).
    Everywhere,
    /// Only in these namespaces (its read grants, or the controller's namespace).
    Namespaces(Arc<HashSet<String>>),
}

impl Scope {
    /// The scope of a reconciled kind read in `namespaces` (`None`: every namespace).
    pub fn of(namespaced: bool, namespaces: &[Option<String>]) -> Self {
        if !namespaced || namespaces.iter().any(Option::is_none) {
            return Self::Everywhere;
        }
        Self::Namespaces(Arc::new(namespaces.iter().flatten().cloned().collect()))
    }

    fn admits(&self, key: &ObjectKey) -> bool {
        match self {
            Self::Everywhere => true,
            Self::Namespaces(allowed) => key.namespace.as_ref().is_some_and(|ns| allowed.contains(ns)),
        }
    }
}

/// Where a change on some kind should send the controller.
#[derive(Clone)]
pub(crate) struct KeyMapper {
    /// The reconciled kind.
    pub primary: KindRef,
    /// Whether the reconciled kind is namespaced.
    pub namespaced: bool,
    /// The reconciled kind's stores, whose indexes [`Mapping::Index`] looks in.
    pub stores: Vec<Arc<IndexedStore>>,
    /// The stores' names of the reconciled kind's declared indexes, by declared name.
    pub index_names: Arc<std::collections::HashMap<String, String>>,
    /// Where keys may be.
    pub scope: Scope,
    /// Most index entries one change is mapped through (`budgets.keysPerEvent`).
    pub max_keys: usize,
}

/// The keys a change maps to.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Mapped {
    /// Each key once, in the order found.
    pub keys: Vec<ObjectKey>,
    /// Index entries (and single keys) looked at, duplicates included: the work done.
    pub examined: usize,
    /// Whether the mapping stopped at [`KeyMapper::max_keys`] (later keys are not in `keys`).
    pub capped: bool,
    /// Keys dropped for being outside the reconciled kind's [`Scope`].
    pub out_of_scope: usize,
}

/// Keys as they are found: each once, within the scope, up to the cap.
struct Collect<'a> {
    scope: &'a Scope,
    limit: usize,
    seen: HashSet<SeenKey>,
    out: Mapped,
}

impl Collect<'_> {
    /// Count one more entry looked at; false (and capped) if the cap is reached.
    fn look(&mut self) -> bool {
        if self.out.examined >= self.limit {
            self.out.capped = true;
            return false;
        }
        self.out.examined += 1;
        true
    }

    /// Look at one candidate and take it: [`look`](Self::look), then [`take`](Self::take).
    fn offer(&mut self, seen: SeenKey, make: impl FnOnce() -> ObjectKey) {
        if self.look() {
            self.take(seen, make);
        }
    }

    /// Keep a candidate looked at; `make` builds its key if it was not seen.
    fn take(&mut self, seen: SeenKey, make: impl FnOnce() -> ObjectKey) {
        if self.seen.insert(seen) {
            let key = make();
            if self.scope.admits(&key) {
                self.out.keys.push(key);
            } else {
                self.out.out_of_scope += 1;
            }
        }
    }
}

/// What deduplicates keys: the cached primary's key (`namespace/name`), or a key built from a
/// watched object.
#[derive(Clone, Debug)]
enum SeenKey {
    Cached(Arc<str>),
    Built(Option<String>, String),
}

impl PartialEq for SeenKey {
    fn eq(&self, other: &Self) -> bool {
        #[cfg(test)]
        tests::EQ_CALLS.with(|n| n.set(n.get() + 1));
        match (self, other) {
            (Self::Cached(a), Self::Cached(b)) => a == b,
            (Self::Built(an, a), Self::Built(bn, b)) => an == bn && a == b,
            _ => false,
        }
    }
}

impl Eq for SeenKey {}

impl Hash for SeenKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Self::Cached(k) => k.hash(state),
            Self::Built(ns, name) => (ns, name).hash(state),
        }
    }
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
    pub fn for_watched(&self, mapping: &Mapping, change: &Change) -> Mapped {
        let mut collect = Collect { scope: &self.scope, limit: self.max_keys, seen: HashSet::new(), out: Mapped::default() };
        match change {
            Change::Unchanged(_) => {}
            Change::Added(o) | Change::Deleted(o) => self.map(mapping, o, &mut collect),
            Change::Updated { old, new } => {
                self.map(mapping, new, &mut collect);
                self.map(mapping, old, &mut collect);
            }
        }
        collect.out
    }

    fn own_key(&self, o: &CachedObject) -> ObjectKey {
        ObjectKey::new(self.primary.clone(), o.namespace(), o.name())
    }

    /// Offer the key `namespace/name` of the reconciled kind.
    fn offer_built(&self, namespace: Option<&str>, name: &str, collect: &mut Collect<'_>) {
        let ns = if self.namespaced { namespace } else { None };
        collect.offer(SeenKey::Built(ns.map(str::to_owned), name.to_owned()), || ObjectKey::new(self.primary.clone(), ns, name));
    }

    fn map(&self, mapping: &Mapping, o: &CachedObject, collect: &mut Collect<'_>) {
        match mapping {
            Mapping::Owner => {
                if let Some(owner) = o.controller_owner().filter(|owner| same_group_kind(owner.api_version, owner.kind, &self.primary)) {
                    self.offer_built(o.namespace(), owner.name, collect);
                }
            }
            Mapping::Label(label) => {
                if let Some(v) = o.label(label).filter(|v| !v.is_empty()) {
                    self.offer_built(o.namespace(), v, collect);
                }
            }
            Mapping::SameName => self.offer_built(o.namespace(), o.name(), collect),
            Mapping::Namespace => {
                if let Some(ns) = o.namespace() {
                    collect.offer(SeenKey::Built(None, ns.to_owned()), || ObjectKey::new(self.primary.clone(), None, ns));
                }
            }
            Mapping::Index { index, value } => self.by_index(index, value, o, collect),
        }
    }

    /// The reconciled objects whose index `index` holds `value` of `o`; limited to `o`'s
    /// namespace when the value says so and both kinds are namespaced.
    fn by_index(&self, index: &str, value: &IndexValue, o: &CachedObject, collect: &mut Collect<'_>) {
        // The index was declared on the reconciled kind at wiring: it has a name in the stores.
        let Some(name) = self.index_names.get(index) else { return };
        let (values, same_namespace) = value.lookup(o.namespace(), o.name(), || Some(o.value()));
        let same_namespace = same_namespace && self.namespaced && o.namespace().is_some();
        for v in &values {
            for store in &self.stores {
                // One past the room left, so that a cut is known to be one.
                let room = collect.limit.saturating_sub(collect.out.examined);
                for primary in store.by_index_up_to(name, v, room.saturating_add(1)).unwrap_or_default() {
                    // Primaries of other namespaces are looked at too: they count.
                    if !collect.look() {
                        return;
                    }
                    if same_namespace && primary.namespace() != o.namespace() {
                        continue;
                    }
                    collect.take(SeenKey::Cached(primary.key_arc().clone()), || self.own_key(&primary));
                }
            }
        }
    }
}

/// Owner references may name another version of the same kind: compare group and kind only.
fn same_group_kind(api_version: &str, kind: &str, primary: &KindRef) -> bool {
    kind == primary.kind && KindRef::new(api_version, kind).group() == primary.group()
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::cache::IndexSpec;

    thread_local! {
        /// Key comparisons made while deduplicating, on this thread.
        pub(super) static EQ_CALLS: Cell<usize> = const { Cell::new(0) };
    }

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

    fn mapper_of(primary: KindRef, namespaced: bool, stores: Vec<Arc<IndexedStore>>) -> KeyMapper {
        KeyMapper { primary, namespaced, stores, index_names: Arc::default(), scope: Scope::Everywhere, max_keys: 10_000 }
    }

    fn mapper() -> KeyMapper {
        mapper_of(KindRef::new("apps/v1", "ReplicaSet"), true, vec![])
    }

    /// `m` with the stores' index `index` (`path`) declared as `name`.
    fn with_index(mut m: KeyMapper, name: &str, path: &str) -> (KeyMapper, Vec<crate::cache::IndexUse>) {
        let spec = IndexSpec::parse(path).unwrap();
        let uses: Vec<_> = m.stores.iter().map(|s| s.acquire_index(spec.clone()).unwrap()).collect();
        Arc::make_mut(&mut m.index_names).insert(name.into(), spec.shared_name());
        (m, uses)
    }

    fn names(m: &Mapped) -> Vec<String> {
        let mut keys: Vec<String> = m.keys.iter().map(ToString::to_string).collect();
        keys.sort();
        keys
    }

    #[test]
    fn index_mappings_find_every_primary_that_names_the_object() {
        let foo = KindRef::new("example.com/v1", "Foo");
        let store = Arc::new(IndexedStore::new(foo.clone()));
        let f = |ns: &str, name: &str, dep: &str, source: &str| {
            json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": name, "namespace": ns, "uid": name},
                   "spec": {"deploymentName": dep, "source": source}})
        };
        for v in
            [f("a", "f1", "web", "shared/cfg"), f("a", "f2", "web", "a/cfg"), f("b", "f3", "web", "shared/cfg"), f("a", "f4", "db", "")]
        {
            store.apply(v).unwrap();
        }
        let (m, _deployment) = with_index(mapper_of(foo, true, vec![store]), "deployment", "spec.deploymentName");
        let (m, _source) = with_index(m, "source", "spec.source");
        let deployment =
            obj(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a", "uid": "d"}}));
        let by_name = Mapping::Index { index: "deployment".into(), value: IndexValue::Name };
        let keys = names(&m.for_watched(&by_name, &Change::Added(deployment)));
        assert_eq!(keys, ["example.com/v1/Foo/a/f1", "example.com/v1/Foo/a/f2"], "only Foos in the Deployment's namespace");
        let cm = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shared", "uid": "c"}}));
        let by_ref = Mapping::Index { index: "source".into(), value: IndexValue::NamespacedName };
        let keys = names(&m.for_watched(&by_ref, &Change::Added(cm)));
        assert_eq!(keys, ["example.com/v1/Foo/a/f1", "example.com/v1/Foo/b/f3"], "a namespace/name reference crosses namespaces");
        let target = obj(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a", "uid": "p"}, "spec": {"owner": "db"}}),
        );
        let by_field = Mapping::Index { index: "deployment".into(), value: IndexValue::Field("spec.owner".into()) };
        assert_eq!(names(&m.for_watched(&by_field, &Change::Added(target))), ["example.com/v1/Foo/a/f4"]);
    }

    #[test]
    fn owner_mapping_finds_the_controller_owner_of_the_primary_kind() {
        let m = mapper();
        let p = pod("p", Some(("apps/v1", "ReplicaSet", "rs")), json!({}));
        let keys = m.for_watched(&Mapping::Owner, &Change::Added(p)).keys;
        assert_eq!(keys, vec![ObjectKey::new(m.primary.clone(), Some("ns"), "rs")]);
        // Another version of the same group/kind still maps; another kind does not.
        let p = pod("p", Some(("apps/v1beta2", "ReplicaSet", "rs")), json!({}));
        assert_eq!(m.for_watched(&Mapping::Owner, &Change::Added(p)).keys.len(), 1);
        let p = pod("p", Some(("batch/v1", "Job", "j")), json!({}));
        assert!(m.for_watched(&Mapping::Owner, &Change::Added(p)).keys.is_empty());
        assert!(m.for_watched(&Mapping::Owner, &Change::Added(pod("p", None, json!({})))).keys.is_empty());
    }

    #[test]
    fn update_that_moves_an_object_enqueues_old_and_new_primary() {
        let m = mapper();
        let old = pod("p", None, json!({"app": "a"}));
        let new = pod("p", None, json!({"app": "b"}));
        let keys = m.for_watched(&Mapping::Label("app".into()), &Change::Updated { old: old.clone(), new }).keys;
        let names: Vec<_> = keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, vec!["b", "a"]);
        let same = m.for_watched(&Mapping::Label("app".into()), &Change::Updated { old: old.clone(), new: old });
        assert_eq!((same.keys.len(), same.examined), (1, 2), "an unmoved object's primary once");
    }

    #[test]
    fn namespace_mapping_targets_cluster_scoped_primary() {
        let m = mapper_of(KindRef::new("v1", "Namespace"), false, vec![]);
        let keys = m.for_watched(&Mapping::Namespace, &Change::Added(pod("p", None, json!({})))).keys;
        assert_eq!(keys, vec![ObjectKey::new(KindRef::new("v1", "Namespace"), None, "ns")]);
        let keys = m.for_watched(&Mapping::SameName, &Change::Added(pod("p", None, json!({})))).keys;
        assert_eq!(keys[0].namespace, None, "cluster-scoped primary keys carry no namespace");
    }

    #[test]
    fn unchanged_objects_enqueue_nothing() {
        let m = mapper();
        assert!(m.for_primary(&Change::Unchanged(pod("p", None, json!({})))).is_empty());
        assert_eq!(m.for_watched(&Mapping::Owner, &Change::Unchanged(pod("p", None, json!({})))), Mapped::default());
    }

    #[test]
    fn keys_outside_the_read_scope_are_dropped() {
        // The reconciled kind is read in `a` only; Pods are watched in `a` and `ns`.
        let granted = Scope::of(true, &[Some("a".into())]);
        let m = KeyMapper { scope: granted, ..mapper() };
        let elsewhere = pod("p", None, json!({"app": "web"}));
        let mapped = m.for_watched(&Mapping::Label("app".into()), &Change::Added(elsewhere));
        assert_eq!((mapped.keys.len(), mapped.out_of_scope), (0, 1), "{mapped:?}");
        let mut here = pod("p", None, json!({"app": "web"})).value();
        here["metadata"]["namespace"] = json!("a");
        let mapped = m.for_watched(&Mapping::Label("app".into()), &Change::Added(obj(here)));
        assert_eq!(names(&mapped), ["apps/v1/ReplicaSet/a/web"]);
        // Cluster-scoped or read everywhere: nothing is dropped.
        assert!(matches!(Scope::of(false, &[Some("a".into())]), Scope::Everywhere));
        assert!(matches!(Scope::of(true, &[None]), Scope::Everywhere));
    }

    /// `primaries` Foos in namespace `ns`, each indexed (`spec.refs`) under every one of `values`.
    fn fan_out(primaries: usize, values: usize, max_keys: usize) -> (KeyMapper, Vec<crate::cache::IndexUse>, Arc<CachedObject>) {
        let foo = KindRef::new("example.com/v1", "Foo");
        let store = Arc::new(IndexedStore::new(foo.clone()));
        let refs: Vec<String> = (0..values).map(|v| format!("v{v}")).collect();
        for p in 0..primaries {
            store
                .apply(json!({"apiVersion": "example.com/v1", "kind": "Foo",
                              "metadata": {"name": format!("f{p}"), "namespace": "ns", "uid": p.to_string()}, "spec": {"refs": refs}}))
                .unwrap();
        }
        let (mut m, uses) = with_index(mapper_of(foo, true, vec![store]), "refs", "spec.refs");
        m.max_keys = max_keys;
        let watched =
            obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"refs": refs}}));
        (m, uses, watched)
    }

    fn refs() -> Mapping {
        Mapping::Index { index: "refs".into(), value: IndexValue::Field("data.refs".into()) }
    }

    #[test]
    fn the_key_cap_stops_the_mapping_and_says_so() {
        let (m, _uses, watched) = fan_out(30, 20, 100);
        let mapped = m.for_watched(&refs(), &Change::Added(watched.clone()));
        assert!(mapped.capped);
        assert_eq!(mapped.examined, 100, "stopped at the cap");
        assert_eq!(mapped.keys.len(), 30, "every primary was found under the first values");
        let (m, _uses, _) = fan_out(30, 20, 20);
        let mapped = m.for_watched(&refs(), &Change::Added(watched.clone()));
        assert_eq!((mapped.capped, mapped.examined, mapped.keys.len()), (true, 20, 20), "keys past the cap are not queued");
        let (m, _uses, _) = fan_out(30, 20, 600);
        let mapped = m.for_watched(&refs(), &Change::Added(watched.clone()));
        assert_eq!((mapped.capped, mapped.examined, mapped.keys.len()), (false, 600, 30), "exactly at the cap: all of it");
        // An update maps the old and the new object within one cap.
        let moved = Change::Updated { old: watched.clone(), new: watched };
        let mapped = m.for_watched(&refs(), &moved);
        assert_eq!((mapped.capped, mapped.examined, mapped.keys.len()), (true, 600, 30));
    }

    proptest! {
        /// Mapping cost is linear in the index entries a change is mapped through: the key
        /// comparisons made to deduplicate stay within two per entry, whatever the overlap (a
        /// scan of the keys found so far makes one per key found, per entry); every primary
        /// found is keyed once; and the work stops at the cap.
        #[test]
        fn mapping_work_is_linear_in_the_entries_looked_at(
            primaries in 1usize..60, values in 1usize..40, cap in 1usize..3000, moved in any::<bool>(),
        ) {
            let (m, _uses, watched) = fan_out(primaries, values, cap);
            let change = if moved { Change::Updated { old: watched.clone(), new: watched } } else { Change::Added(watched) };
            EQ_CALLS.with(|n| n.set(0));
            let mapped = m.for_watched(&refs(), &change);
            let comparisons = EQ_CALLS.with(Cell::get);
            let entries = primaries * values * if moved { 2 } else { 1 };
            prop_assert_eq!(mapped.examined, entries.min(cap));
            prop_assert_eq!(mapped.capped, entries > cap);
            // About one per duplicate, a few more where hashes share a tag: never one per key found.
            prop_assert!(comparisons <= 2 * mapped.examined + 8, "{} comparisons for {} entries", comparisons, mapped.examined);
            let distinct: HashSet<&ObjectKey> = mapped.keys.iter().collect();
            prop_assert_eq!(distinct.len(), mapped.keys.len(), "each key once");
            prop_assert_eq!(mapped.keys.len(), primaries.min(mapped.examined));
        }
    }

    #[test]
    fn five_hundred_primaries_by_five_hundred_values_map_once_each_within_the_cap() {
        let (mut m, _uses, watched) = fan_out(500, 500, 10_000);
        let mapped = m.for_watched(&refs(), &Change::Added(watched.clone()));
        assert_eq!((mapped.keys.len(), mapped.examined, mapped.capped), (500, 10_000, true));
        m.max_keys = 1_000_000;
        EQ_CALLS.with(|n| n.set(0));
        let mapped = m.for_watched(&refs(), &Change::Added(watched));
        assert_eq!((mapped.keys.len(), mapped.examined, mapped.capped), (500, 250_000, false));
        assert!(EQ_CALLS.with(Cell::get) <= 2 * 250_000);
    }
}
