//! [`Protected`]: objects no grant can unlock, because writing them would let a plugin take
//! over the host, act as another identity, or load code of its choosing.
//!
//! | rule | what it protects |
//! |---|---|
//! | `host-namespace` | everything in the host's namespaces — the plugin namespace(s) (plugin code, the plugins' ServiceAccounts), the Lease namespace and the host's ServiceAccount's — and those Namespace objects: plugins write nothing there but Events |
//! | `plugin-label` | any object whose result carries the `wasmloop.dev/plugin` or `wasmloop.dev/plugin-payload` label |
//! | `identity-binding` | RoleBindings and ClusterRoleBindings that bind, or would bind, an identity (any ServiceAccount of the host's namespaces, by name, user name or group) |
//! | `identity-role` | Roles and ClusterRoles bound to an identity, and ClusterRoles that would aggregate into one (or carry `aggregate-to-*` labels) |
//!
//! Why whole namespaces: a Pod can use only a ServiceAccount, and mount only Secrets, of its own
//! namespace, and anything that carries a pod spec (a Deployment, a Job, any custom resource an
//! operator turns into Pods) can make one. No finer rule over "pod specs anywhere in the result"
//! can be sound for custom resources the host does not know, so the namespaces holding the
//! identities the host holds or acts as are closed to plugin writes altogether. Token requests
//! are a subresource, which no action can address.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;

use super::rbac::{self, RbacCache, Stores};
use super::result::Effect;
use crate::cache::IndexedStore;
use crate::informer::InformerRegistry;
use crate::labels::{PAYLOAD_LABEL, PLUGIN_LABEL};
use wasmloop_model::Target;

/// Which protection rule refused an action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// A write in (or of) one of the host's namespaces.
    HostNamespace {
        /// The host's namespace.
        namespace: String,
        /// The write is of the Namespace object itself (not of something in it).
        object: bool,
    },
    /// A result that carries a plugin label.
    PluginLabel,
    /// A binding of an identity.
    IdentityBinding(String),
    /// A role of, or aggregating into, an identity.
    IdentityRole(String),
}

impl std::error::Error for Rule {}

impl Rule {
    /// The rule's short name, as docs/operations.md lists it.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::HostNamespace { .. } => "host-namespace",
            Rule::PluginLabel => "plugin-label",
            Rule::IdentityBinding(_) => "identity-binding",
            Rule::IdentityRole(_) => "identity-role",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name();
        match self {
            Rule::HostNamespace { namespace, object: true } => {
                write!(f, "protected object ({name}): namespace {namespace} is one of the host's")
            }
            Rule::HostNamespace { namespace, object: false } => write!(
                f,
                "protected object ({name}): namespace {namespace} holds the host's identities, plugin code or Leases; \
                 plugins write nothing there but Events"
            ),
            Rule::PluginLabel => {
                write!(f, "protected object ({name}): objects labelled {PLUGIN_LABEL} or {PAYLOAD_LABEL} are written only by the admin")
            }
            Rule::IdentityBinding(why) | Rule::IdentityRole(why) => write!(f, "protected object ({name}): {why}"),
        }
    }
}

/// The host's own objects, and the state needed to recognise them.
#[derive(Clone, Default)]
pub struct Protected {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    hosts: HostObjects,
    /// The plugin, Lease and ServiceAccount namespaces.
    host_namespaces: BTreeSet<String>,
    /// The plugin manager's ConfigMap store, once it runs: with `--all-namespaces`, every
    /// namespace holding a plugin ConfigMap holds that plugin's identity too.
    plugin_configmaps: RwLock<Option<Arc<IndexedStore>>>,
    /// Bindings and roles, for the RBAC rules; `None` offline (they then judge bodies only).
    rbac: Option<RbacCache>,
}

impl fmt::Debug for Protected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Protected").field("hosts", &self.inner.hosts).finish_non_exhaustive()
    }
}

/// Where the host keeps its own objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostObjects {
    /// Namespaces of the plugin ConfigMaps (empty with `--all-namespaces`: then each namespace
    /// holding a plugin ConfigMap counts).
    pub plugin_namespaces: Vec<String>,
    /// The namespace of the host's Lease(s), when leader election or sharding is on.
    pub lease_namespace: Option<String>,
    /// The ServiceAccount the host runs as: `(namespace, name)`.
    pub service_account: Option<(String, String)>,
}

impl Protected {
    /// Protect the host's objects; `registry` serves the RBAC rules' informers.
    pub fn new(hosts: HostObjects, registry: InformerRegistry) -> Self {
        Self::build(hosts, Some(registry))
    }

    /// The same rules without a cluster (offline runs): RBAC objects are judged by what a write
    /// sets, since no current state can be read.
    pub fn offline(hosts: HostObjects) -> Self {
        Self::build(hosts, None)
    }

    /// The rules with RBAC state given (unit tests).
    #[cfg(test)]
    pub(super) fn with_rbac(hosts: HostObjects, stores: Stores) -> Self {
        let mut p = Self::build(hosts, None);
        Arc::get_mut(&mut p.inner).expect("fresh").rbac = Some(RbacCache::given(stores));
        p
    }

    fn build(hosts: HostObjects, registry: Option<InformerRegistry>) -> Self {
        let mut host_namespaces: BTreeSet<String> = hosts.plugin_namespaces.iter().cloned().collect();
        host_namespaces.extend(hosts.lease_namespace.clone());
        host_namespaces.extend(hosts.service_account.as_ref().map(|(ns, _)| ns.clone()));
        let rbac = registry.map(RbacCache::new);
        Self { inner: Arc::new(Inner { hosts, host_namespaces, plugin_configmaps: RwLock::new(None), rbac }) }
    }

    /// Only the rules that need no configuration (the plugin label).
    pub fn minimal() -> Self {
        Self::default()
    }

    /// Recognise plugin ConfigMaps by the manager's store (any namespace).
    pub fn watch_plugin_configmaps(&self, store: Arc<IndexedStore>) {
        *self.inner.plugin_configmaps.write() = Some(store);
    }

    /// Where the host keeps its objects.
    pub fn hosts(&self) -> &HostObjects {
        &self.inner.hosts
    }

    /// The host's ServiceAccount, `(namespace, name)`.
    pub fn service_account(&self) -> Option<(&str, &str)> {
        self.inner.hosts.service_account.as_ref().map(|(n, s)| (n.as_str(), s.as_str()))
    }

    /// Whether plugins may write nothing (but Events) in `namespace`.
    pub fn is_host_namespace(&self, namespace: &str) -> bool {
        if self.inner.host_namespaces.contains(namespace) {
            return true;
        }
        let store = self.inner.plugin_configmaps.read().clone();
        store.is_some_and(|s| !s.list(Some(namespace), None).is_empty())
    }

    /// The rules on the target alone: the host's namespaces and their Namespace objects.
    pub(super) fn check_target(&self, target: &Target) -> Result<(), Rule> {
        if let Some(ns) = target.namespace.as_deref().filter(|ns| self.is_host_namespace(ns)) {
            return Err(Rule::HostNamespace { namespace: ns.to_owned(), object: false });
        }
        if target.kind.api_version == "v1"
            && target.kind.kind == "Namespace"
            && let Some(name) = target.name().filter(|n| self.is_host_namespace(n))
        {
            return Err(Rule::HostNamespace { namespace: name.to_owned(), object: true });
        }
        Ok(())
    }

    /// The rules on what the write produces; `stores` are the RBAC informers' (`None` offline).
    pub(super) fn check_effect(&self, stores: Option<&Stores>, target: &Target, effect: &Effect) -> Result<(), Rule> {
        for object in [effect.before.as_ref(), effect.after.value()].into_iter().flatten() {
            check_plugin_label(object)?;
        }
        if !rbac::is_rbac(target) {
            return Ok(());
        }
        rbac::check(stores, target, effect.before.as_ref(), effect.after.value(), &|ns| self.is_host_namespace(ns))
    }

    /// The RBAC informers' stores, started on first use (`Ok(None)` offline); an error says
    /// what the host could not read.
    pub(super) async fn rbac_stores(&self) -> Result<Option<&Stores>, rbac::Unreadable> {
        match &self.inner.rbac {
            Some(cache) => cache.stores().await.map(Some),
            None => Ok(None),
        }
    }
}

/// Plugin ConfigMaps and their payloads are recognised by label: no plugin may write either.
fn check_plugin_label(object: &Value) -> Result<(), Rule> {
    let labels = object.pointer("/metadata/labels").and_then(Value::as_object);
    let labelled = labels.is_some_and(|l| l.contains_key(PLUGIN_LABEL) || l.contains_key(PAYLOAD_LABEL));
    if labelled { Err(Rule::PluginLabel) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::admission::result::After;
    use crate::kinds::KindRef;

    fn protected() -> Protected {
        Protected::offline(HostObjects {
            plugin_namespaces: vec!["wasmloop".into()],
            lease_namespace: Some("leases".into()),
            service_account: Some(("host-sa".into(), "host".into())),
        })
    }

    fn target(kind: &str, ns: Option<&str>, name: &str) -> Target {
        Target::of_key(&KindRef::new("v1", kind).key(ns, name)).unwrap()
    }

    #[test]
    fn the_host_namespaces_are_closed_to_plugin_writes() {
        let p = protected();
        for ns in ["wasmloop", "leases", "host-sa"] {
            let err = p.check_target(&target("Pod", Some(ns), "x")).unwrap_err();
            assert_eq!(err, Rule::HostNamespace { namespace: ns.into(), object: false });
            assert!(err.to_string().contains("plugins write nothing there but Events"), "{err}");
            assert_eq!(p.check_target(&target("Namespace", None, ns)).unwrap_err().name(), "host-namespace");
        }
        assert!(p.check_target(&target("Pod", Some("team-a"), "x")).is_ok());
        assert!(p.check_target(&target("Namespace", None, "team-a")).is_ok());
    }

    #[test]
    fn a_namespace_holding_a_plugin_configmap_is_the_hosts() {
        let p = Protected::offline(HostObjects::default());
        let store = Arc::new(IndexedStore::new(KindRef::new("v1", "ConfigMap")));
        store.apply(json!({"metadata": {"name": "podset", "namespace": "team-p"}})).unwrap();
        p.watch_plugin_configmaps(store);
        assert_eq!(p.check_target(&target("Secret", Some("team-p"), "s")).unwrap_err().name(), "host-namespace");
        assert!(p.check_target(&target("Secret", Some("team-q"), "s")).is_ok());
    }

    #[test]
    fn plugin_labels_are_refused_before_and_after_a_write() {
        let p = Protected::minimal();
        let t = target("ConfigMap", Some("team-a"), "evil");
        let labelled = json!({"metadata": {"labels": {PLUGIN_LABEL: "true"}}});
        let payload = json!({"metadata": {"labels": {PAYLOAD_LABEL: "true"}}});
        let effect = |before: Option<Value>, after: After| Effect { before, after, guard: Default::default() };
        let err = p.check_effect(None, &t, &effect(None, After::Written(labelled.clone()))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "protected object (plugin-label): objects labelled wasmloop.dev/plugin or wasmloop.dev/plugin-payload are written only by the admin"
        );
        assert_eq!(p.check_effect(None, &t, &effect(None, After::Result(payload))), Err(Rule::PluginLabel));
        assert_eq!(p.check_effect(None, &t, &effect(Some(labelled), After::Gone)), Err(Rule::PluginLabel));
        assert!(p.check_effect(None, &t, &effect(None, After::Written(json!({"data": {"a": "b"}})))).is_ok());
    }
}
