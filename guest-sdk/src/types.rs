//! Names of API types and objects, requests (the contract's vocabulary, from `wasmloop-model`),
//! and the plugin's self-description.

pub use wasmloop_model::{IndexValue, KindRef, Mapping, ObjectKey, Reason, Request};

/// A secondary kind the plugin watches (and so may read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watch {
    /// The watched kind (readable by the plugin).
    pub kind: KindRef,
    /// How its events map to reconciled keys.
    pub mapping: Mapping,
    /// Label selector limiting which objects are watched and cached.
    pub selector: Option<String>,
    /// Selector on annotations limiting which objects are cached and mapped (contract 0.3).
    pub annotation_selector: Option<String>,
}

impl Watch {
    /// Watch every object of `kind`.
    pub fn new(kind: KindRef, mapping: Mapping) -> Self {
        Self { kind, mapping, selector: None, annotation_selector: None }
    }

    /// Watch (and cache) only objects matching this label selector, e.g. `app=web,tier!=db`.
    pub fn selector(mut self, selector: impl Into<String>) -> Self {
        self.selector = Some(selector.into());
        self
    }

    /// Cache (and map) only objects whose annotations match this selector, in label-selector
    /// syntax: `example.com/managed=true`, `!example.com/skip`. The host filters objects as
    /// they arrive (annotations cannot be selected by the API server).
    pub fn annotation_selector(mut self, selector: impl Into<String>) -> Self {
        self.annotation_selector = Some(selector.into());
        self
    }
}

/// An extra index the plugin reads through [`crate::cache::by_index`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    /// The indexed kind (readable by the plugin).
    pub kind: KindRef,
    /// The name used in `by_index` calls.
    pub name: String,
    /// `labels.<key>` (the label's value) or a dotted field path such as `spec.nodeName`.
    pub path: String,
}

/// A field of a kind that metadata reads ([`crate::meta`]) return, declared with
/// [`Metadata::field`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The kind (readable by the plugin).
    pub kind: KindRef,
    /// A dotted path, e.g. `status.phase` (as index paths).
    pub path: String,
}

/// What a plugin says about itself: what it reconciles, watches and indexes.
///
/// ```
/// use wasmloop_sdk::{kinds, KindRef, Mapping, Metadata};
/// const PODSET: KindRef = KindRef::from_static("wasmloop.dev/v1alpha1", "PodSet");
/// let meta = Metadata::new("podset", "0.1.0")
///     .reconciles(PODSET)
///     .owns(kinds::POD)
///     .watches(kinds::CONFIG_MAP, Mapping::SameName)
///     .index(kinds::POD, "node", "spec.nodeName");
/// assert_eq!(meta.readable_kinds().len(), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// The plugin's name (field manager for apply, source of its Events).
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The kind whose keys this plugin reconciles (required).
    pub reconciles: Option<KindRef>,
    /// Label selector for the reconciled kind, if only some objects matter.
    pub selector: Option<String>,
    /// Annotation selector for the reconciled kind (contract 0.3).
    pub annotation_selector: Option<String>,
    /// Secondary kinds and how their events map to reconciled keys.
    pub watches: Vec<Watch>,
    /// Extra indexes for [`crate::cache::by_index`].
    pub indexes: Vec<Index>,
    /// Fields that metadata reads return ([`crate::meta`]), per kind in declaration order.
    pub fields: Vec<Field>,
}

impl Metadata {
    /// Start describing plugin `name` at `version` (usually `env!("CARGO_PKG_VERSION")`).
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            reconciles: None,
            selector: None,
            annotation_selector: None,
            watches: Vec::new(),
            indexes: Vec::new(),
            fields: Vec::new(),
        }
    }

    /// The kind whose keys this plugin reconciles.
    pub fn reconciles(mut self, kind: KindRef) -> Self {
        self.reconciles = Some(kind);
        self
    }

    /// Reconcile (and cache) only objects of the reconciled kind matching this label selector.
    pub fn selector(mut self, selector: impl Into<String>) -> Self {
        self.selector = Some(selector.into());
        self
    }

    /// Reconcile (and cache) only objects of the reconciled kind whose annotations match this
    /// selector (label-selector syntax, e.g. `example.com/managed=true`; contract 0.3).
    pub fn annotation_selector(mut self, selector: impl Into<String>) -> Self {
        self.annotation_selector = Some(selector.into());
        self
    }

    /// Watch a related kind whose objects the reconciled objects *name* (not own): declare
    /// index `index` on the reconciled kind over `path` (where a reconciled object names the
    /// related one, e.g. `spec.deploymentName`), and enqueue, for an event on a related object,
    /// every reconciled object whose index holds `value` of it (contract 0.3; controller-runtime's
    /// `Watches` + `EnqueueRequestsFromMapFunc` over a field index, as one declaration).
    ///
    /// ```
    /// use wasmloop_sdk::{kinds, IndexValue, KindRef, Metadata};
    /// const FOO: KindRef = KindRef::from_static("samplecontroller.k8s.io/v1alpha1", "Foo");
    /// // A Deployment's events reach the Foos whose spec.deploymentName is its name.
    /// let m = Metadata::new("sample", "0.1.0")
    ///     .reconciles(FOO)
    ///     .named_by(kinds::DEPLOYMENT, "deployment", "spec.deploymentName", IndexValue::Name);
    /// assert_eq!(m.indexes.len(), 1);
    /// ```
    ///
    /// # Panics
    ///
    /// If called before [`Metadata::reconciles`] (the index is on the reconciled kind).
    pub fn named_by(self, kind: KindRef, index: impl Into<String>, path: impl Into<String>, value: IndexValue) -> Self {
        let index = index.into();
        let primary = self.reconciled_kind().clone();
        self.index(primary, index.clone(), path).watches(kind, Mapping::Index { index, value })
    }

    /// Watch a kind whose objects the plugin controls: an event on one enqueues its controller
    /// owner. Same as `.watches(kind, Mapping::Owner)`.
    pub fn owns(self, kind: KindRef) -> Self {
        self.watch(Watch::new(kind, Mapping::Owner))
    }

    /// Watch a kind with the given mapping to reconciled keys.
    pub fn watches(self, kind: KindRef, mapping: Mapping) -> Self {
        self.watch(Watch::new(kind, mapping))
    }

    /// Add a watch (use this form to give it a selector).
    pub fn watch(mut self, watch: Watch) -> Self {
        self.watches.push(watch);
        self
    }

    /// Declare index `name` on `kind` over the name of each object's controller owner when that
    /// owner is of kind `owner` (controller-runtime's `.metadata.controller` field index, as the
    /// Kubebuilder tutorial declares it): the path
    /// `metadata.ownerReferences[controller=true][kind=<Kind>][apiVersion=<apiVersion>].name`.
    /// Look the children of an owner up with `by_index(kind, name, owner_name)`, in its namespace.
    ///
    /// ```
    /// use wasmloop_sdk::{KindRef, Metadata, kinds};
    /// const CRON_JOB: KindRef = KindRef::from_static("batch.tutorial.kubebuilder.io/v1", "CronJob");
    /// let m = Metadata::new("cronjob", "0.1.0").reconciles(CRON_JOB).owns(kinds::JOB).controller_index(kinds::JOB, "owner", &CRON_JOB);
    /// assert_eq!(m.indexes[0].path, "metadata.ownerReferences[controller=true][kind=CronJob][apiVersion=batch.tutorial.kubebuilder.io/v1].name");
    /// ```
    pub fn controller_index(self, kind: KindRef, name: impl Into<String>, owner: &KindRef) -> Self {
        let path = format!("metadata.ownerReferences[controller=true][kind={}][apiVersion={}].name", owner.kind, owner.api_version);
        self.index(kind, name, path)
    }

    /// Declare index `name` on `kind` over `path` (`labels.<key>` or a dotted field path, whose
    /// segments may filter: `metadata.ownerReferences[kind=CronJob].name`; see
    /// `wasmloop_model::index_path`). Declaring an index also makes `kind` readable.
    pub fn index(mut self, kind: KindRef, name: impl Into<String>, path: impl Into<String>) -> Self {
        self.indexes.push(Index { kind, name: name.into(), path: path.into() });
        self
    }

    /// Declare a field of `kind` for metadata reads: [`crate::meta::Meta::field`]`(i)`
    /// reads the i-th field declared for that kind. The kind must be readable.
    pub fn field(mut self, kind: KindRef, path: impl Into<String>) -> Self {
        self.fields.push(Field { kind, path: path.into() });
        self
    }

    /// The paths declared for `kind`, in order.
    pub fn fields_of(&self, kind: &KindRef) -> Vec<&str> {
        self.fields.iter().filter(|f| &f.kind == kind).map(|f| f.path.as_str()).collect()
    }

    /// Every kind the plugin may read: the reconciled kind, watched kinds and indexed kinds,
    /// without duplicates (the host grants exactly these).
    pub fn readable_kinds(&self) -> Vec<&KindRef> {
        let mut out: Vec<&KindRef> = Vec::new();
        let all = self.reconciles.iter().chain(self.watches.iter().map(|w| &w.kind)).chain(self.indexes.iter().map(|i| &i.kind));
        for k in all {
            if !out.contains(&k) {
                out.push(k);
            }
        }
        out
    }

    /// The reconciled kind, or a clear panic when the builder forgot it. The host cannot load a
    /// plugin without one, so this is a programming error caught at load (or in the first test).
    #[cfg_attr(all(not(target_arch = "wasm32"), not(feature = "testing")), allow(dead_code))]
    pub(crate) fn reconciled_kind(&self) -> &KindRef {
        self.reconciles
            .as_ref()
            .unwrap_or_else(|| panic!("plugin {:?}: Metadata has no reconciled kind; call .reconciles(kind)", self.name))
    }
}

/// Well-known kinds.
pub mod kinds {
    use super::KindRef;

    /// The kind of a `k8s-openapi` type, e.g. `kinds::of::<k8s::api::core::v1::Pod>()`.
    #[cfg(feature = "k8s")]
    pub fn of<T: k8s_openapi::Resource>() -> KindRef {
        KindRef::from_static(T::API_VERSION, T::KIND)
    }

    /// `v1` `Pod`.
    pub const POD: KindRef = KindRef::from_static("v1", "Pod");
    /// `v1` `ConfigMap`.
    pub const CONFIG_MAP: KindRef = KindRef::from_static("v1", "ConfigMap");
    /// `v1` `Secret`.
    pub const SECRET: KindRef = KindRef::from_static("v1", "Secret");
    /// `v1` `Service`.
    pub const SERVICE: KindRef = KindRef::from_static("v1", "Service");
    /// `v1` `Namespace`.
    pub const NAMESPACE: KindRef = KindRef::from_static("v1", "Namespace");
    /// `v1` `Node`.
    pub const NODE: KindRef = KindRef::from_static("v1", "Node");
    /// `v1` `ServiceAccount`.
    pub const SERVICE_ACCOUNT: KindRef = KindRef::from_static("v1", "ServiceAccount");
    /// `apps/v1` `ReplicaSet`.
    pub const REPLICA_SET: KindRef = KindRef::from_static("apps/v1", "ReplicaSet");
    /// `apps/v1` `Deployment`.
    pub const DEPLOYMENT: KindRef = KindRef::from_static("apps/v1", "Deployment");
    /// `apps/v1` `StatefulSet`.
    pub const STATEFUL_SET: KindRef = KindRef::from_static("apps/v1", "StatefulSet");
    /// `apps/v1` `DaemonSet`.
    pub const DAEMON_SET: KindRef = KindRef::from_static("apps/v1", "DaemonSet");
    /// `batch/v1` `Job`.
    pub const JOB: KindRef = KindRef::from_static("batch/v1", "Job");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_group_and_display() {
        assert_eq!(kinds::POD.group(), "");
        assert_eq!(kinds::REPLICA_SET.group(), "apps");
        assert_eq!(kinds::REPLICA_SET.to_string(), "apps/v1/ReplicaSet");
        assert_eq!(KindRef::new("v1", "Pod"), kinds::POD);
    }

    #[test]
    fn key_display_with_and_without_namespace() {
        assert_eq!(kinds::POD.key(Some("ns"), "p").to_string(), "v1/Pod/ns/p");
        assert_eq!(kinds::NAMESPACE.key(None, "team-a").to_string(), "v1/Namespace/team-a");
    }

    #[test]
    fn readable_kinds_are_deduplicated_in_order() {
        let m = Metadata::new("x", "1")
            .reconciles(kinds::REPLICA_SET)
            .owns(kinds::POD)
            .watches(kinds::REPLICA_SET, Mapping::SameName)
            .index(kinds::POD, "node", "spec.nodeName")
            .index(kinds::NODE, "zone", "labels.zone");
        assert_eq!(m.readable_kinds(), vec![&kinds::REPLICA_SET, &kinds::POD, &kinds::NODE]);
    }

    #[test]
    #[should_panic(expected = "no reconciled kind")]
    fn missing_reconciled_kind_is_a_clear_panic() {
        Metadata::new("x", "1").reconciled_kind();
    }
}
