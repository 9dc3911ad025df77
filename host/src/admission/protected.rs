//! [`Protected`]: objects no grant can unlock, because writing them would let a plugin take
//! over the host or load code of its choosing.
//!
//! | rule | what it protects |
//! |---|---|
//! | `host-namespace` | the Namespace objects of the host's namespaces (plugin, Lease and ServiceAccount namespaces) |
//! | `plugin-configmap` | every ConfigMap in the plugin namespace(s), and plugin ConfigMaps the manager loads from anywhere |
//! | `plugin-label` | any object whose body carries the `wasmloop.dev/plugin` label |
//! | `host-lease` | every Lease in the host's Lease namespace |
//! | `host-service-account` | the host's ServiceAccount and every Secret in its namespace (its tokens among them) |
//! | `host-service-account-pod` | in the ServiceAccount's namespace, Pods and pod templates that would run as it or read a Secret (volumes, projected sources, env) |
//! | `host-rbac` | Roles and RoleBindings in the host's namespaces |
//! | `host-rbac-binding` | RoleBindings and ClusterRoleBindings anywhere whose subjects include the host's ServiceAccount (by name, as its user name, or through `system:serviceaccounts[:ns]`, `system:authenticated`) |
//! | `host-rbac-role` | Roles and ClusterRoles bound to the host's ServiceAccount, and ClusterRoles carrying aggregation labels (they could extend an aggregated role the host holds) |
//!
//! A Pod can use only a ServiceAccount, and mount only Secrets, of its own namespace, and token
//! requests are a subresource (which no action can address), so these rules cover every way of
//! running as the host. Checks that need the cluster's current state (a delete names only a key)
//! read it from the API server; if that read fails, the action is refused (fail closed).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use kube::api::{Api, DynamicObject, ListParams};
use parking_lot::RwLock;
use serde_json::Value;

use crate::actions::Action;
use crate::cache::IndexedStore;
use crate::hotload::source::{PAYLOAD_LABEL, PLUGIN_LABEL};
use crate::kinds::KindRef;
use wasmloop_model::Target;

const RBAC: &str = "rbac.authorization.k8s.io";
const AGGREGATE_LABEL_PREFIX: &str = "rbac.authorization.k8s.io/aggregate-to-";

/// Which protection rule refused an action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    HostNamespace(String),
    PluginConfigMap,
    PluginLabel,
    HostLease,
    HostServiceAccount,
    HostServiceAccountPod(String),
    HostRbac,
    HostRbacBinding(String),
    HostRbacRole(String),
    /// The cluster state needed to decide could not be read.
    Unverifiable(String),
}

impl Rule {
    /// The rule's short name, as docs/operations.md lists it.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::HostNamespace(_) => "host-namespace",
            Rule::PluginConfigMap => "plugin-configmap",
            Rule::PluginLabel => "plugin-label",
            Rule::HostLease => "host-lease",
            Rule::HostServiceAccount => "host-service-account",
            Rule::HostServiceAccountPod(_) => "host-service-account-pod",
            Rule::HostRbac => "host-rbac",
            Rule::HostRbacBinding(_) => "host-rbac-binding",
            Rule::HostRbacRole(_) => "host-rbac-role",
            Rule::Unverifiable(_) => "unverifiable",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name();
        match self {
            Rule::HostNamespace(ns) => write!(f, "protected object ({name}): namespace {ns} holds the host's own objects"),
            Rule::PluginConfigMap => write!(f, "protected object ({name}): plugin ConfigMaps are written only by the admin"),
            Rule::HostLease => write!(f, "protected object ({name}): Leases in the host's Lease namespace are the host's"),
            Rule::HostServiceAccount => write!(f, "protected object ({name}): the host's ServiceAccount and the Secrets of its namespace"),
            Rule::HostServiceAccountPod(why) => write!(f, "protected object ({name}): {why}"),
            Rule::HostRbac => write!(f, "protected object ({name}): Roles and RoleBindings in the host's namespaces"),
            Rule::PluginLabel => {
                write!(f, "protected object ({name}): objects labelled {PLUGIN_LABEL} or {PAYLOAD_LABEL} are written only by the admin")
            }
            Rule::HostRbacBinding(why) => write!(f, "protected object ({name}): {why}"),
            Rule::HostRbacRole(why) => write!(f, "protected object ({name}): {why}"),
            Rule::Unverifiable(why) => write!(f, "protected object check failed, refusing: {why}"),
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
    /// For live RBAC lookups; `None` offline (then the RBAC rules use the body only).
    client: Option<kube::Client>,
    /// The plugin manager's ConfigMap store, once it runs.
    plugin_configmaps: RwLock<Option<Arc<IndexedStore>>>,
}

impl fmt::Debug for Protected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Protected").field("hosts", &self.inner.hosts).finish_non_exhaustive()
    }
}

/// Where the host keeps its own objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostObjects {
    /// Namespaces of the plugin ConfigMaps (empty with `--all-namespaces`: then plugin
    /// ConfigMaps are recognised by the manager's store and the plugin label).
    pub plugin_namespaces: Vec<String>,
    /// The namespace of the host's Lease(s), when leader election is on.
    pub lease_namespace: Option<String>,
    /// The ServiceAccount the host runs as: `(namespace, name)`.
    pub service_account: Option<(String, String)>,
}

impl Protected {
    /// Protect the host's objects; `client` lets the RBAC rules read bindings.
    pub fn new(hosts: HostObjects, client: Option<kube::Client>) -> Self {
        let mut host_namespaces: BTreeSet<String> = hosts.plugin_namespaces.iter().cloned().collect();
        host_namespaces.extend(hosts.lease_namespace.clone());
        host_namespaces.extend(hosts.service_account.as_ref().map(|(ns, _)| ns.clone()));
        Self { inner: Arc::new(Inner { hosts, host_namespaces, client, plugin_configmaps: RwLock::new(None) }) }
    }

    /// Only the rules that need no configuration (the plugin label and plugin ConfigMaps).
    pub fn minimal() -> Self {
        Self::default()
    }

    /// Recognise plugin ConfigMaps by the manager's store (any namespace).
    pub fn watch_plugin_configmaps(&self, store: Arc<IndexedStore>) {
        *self.inner.plugin_configmaps.write() = Some(store);
    }

    pub fn hosts(&self) -> &HostObjects {
        &self.inner.hosts
    }

    pub fn service_account(&self) -> Option<(&str, &str)> {
        self.inner.hosts.service_account.as_ref().map(|(n, s)| (n.as_str(), s.as_str()))
    }

    /// Refuse `action` on `target` if it touches a protected object.
    pub async fn check(&self, action: &Action, target: &Target) -> Result<(), Rule> {
        let written = action.written();
        let body = written.as_deref();
        self.check_namespace_object(target)?;
        self.check_plugin_configmap(target)?;
        if let Some(body) = body {
            check_plugin_label(body)?;
        }
        self.check_lease(target)?;
        self.check_service_account(target)?;
        if let Some(body) = body {
            self.check_pod_specs(target, body)?;
        }
        self.check_rbac(action, target, body).await
    }

    fn check_namespace_object(&self, target: &Target) -> Result<(), Rule> {
        let hosts = &self.inner.host_namespaces;
        if target.api_version == "v1"
            && target.kind == "Namespace"
            && let Some(name) = target.name().filter(|n| hosts.contains(*n))
        {
            return Err(Rule::HostNamespace(name.to_owned()));
        }
        Ok(())
    }

    fn check_lease(&self, target: &Target) -> Result<(), Rule> {
        let group = target.api_version.split_once('/').map(|(g, _)| g);
        let in_lease_ns = target.namespace.is_some() && target.namespace == self.inner.hosts.lease_namespace;
        if group == Some("coordination.k8s.io") && target.kind == "Lease" && in_lease_ns { Err(Rule::HostLease) } else { Ok(()) }
    }

    fn check_service_account(&self, target: &Target) -> Result<(), Rule> {
        let Some((sa_ns, sa)) = self.service_account() else { return Ok(()) };
        if target.api_version != "v1" || target.namespace.as_deref() != Some(sa_ns) {
            return Ok(());
        }
        let the_sa = target.kind == "ServiceAccount" && target.name() == Some(sa);
        if the_sa || target.kind == "Secret" { Err(Rule::HostServiceAccount) } else { Ok(()) }
    }

    /// Pod specs anywhere in a body (Pods, workload templates, CRDs with templates) in the
    /// ServiceAccount's namespace may neither run as it nor read Secrets.
    fn check_pod_specs(&self, target: &Target, body: &Value) -> Result<(), Rule> {
        let Some((sa_ns, sa)) = self.service_account() else { return Ok(()) };
        if target.namespace.as_deref() != Some(sa_ns) {
            return Ok(());
        }
        let mut found = None;
        walk_pod_specs(body, &mut |spec| {
            if found.is_some() {
                return;
            }
            let runs_as = spec
                .get("serviceAccountName")
                .or_else(|| spec.get("serviceAccount"))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or("default");
            if runs_as == sa {
                found = Some(format!("{target} would run a Pod as the host's ServiceAccount {sa_ns}/{sa}"));
            } else if reads_secrets(spec) {
                found = Some(format!("{target} would give a Pod in the host's namespace {sa_ns} a Secret"));
            }
        });
        found.map_or(Ok(()), |why| Err(Rule::HostServiceAccountPod(why)))
    }

    fn check_plugin_configmap(&self, target: &Target) -> Result<(), Rule> {
        if target.api_version != "v1" || target.kind != "ConfigMap" {
            return Ok(());
        }
        if target.namespace.as_ref().is_some_and(|ns| self.inner.hosts.plugin_namespaces.contains(ns)) {
            return Err(Rule::PluginConfigMap);
        }
        let store = self.inner.plugin_configmaps.read().clone();
        let known = match (store, target.name()) {
            (Some(store), Some(name)) => store.get(target.namespace.as_deref(), name).is_some(),
            _ => false,
        };
        if known { Err(Rule::PluginConfigMap) } else { Ok(()) }
    }

    async fn check_rbac(&self, action: &Action, target: &Target, body: Option<&Value>) -> Result<(), Rule> {
        let group = target.api_version.split_once('/').map(|(g, _)| g).unwrap_or_default();
        if group != RBAC {
            return Ok(());
        }
        if target.namespace.as_ref().is_some_and(|ns| self.inner.host_namespaces.contains(ns)) {
            return Err(Rule::HostRbac);
        }
        let Some((sa_ns, sa)) = self.service_account() else {
            return Ok(());
        };
        match target.kind.as_str() {
            "RoleBinding" | "ClusterRoleBinding" => {
                if let Some(body) = body
                    && binds(body, sa_ns, sa)
                {
                    return Err(Rule::HostRbacBinding(format!("{target} binds the host's ServiceAccount {sa_ns}/{sa}")));
                }
                // The existing binding (delete, or an apply that changes its role) must not be one of the host's.
                if !matches!(action, Action::Create { .. } | Action::Event { .. }) {
                    let current = self.live_binding(target).await?;
                    if current.as_ref().is_some_and(|b| binds(b, sa_ns, sa)) {
                        return Err(Rule::HostRbacBinding(format!("{target} binds the host's ServiceAccount {sa_ns}/{sa}")));
                    }
                }
                Ok(())
            }
            "Role" | "ClusterRole" => {
                if target.kind == "ClusterRole" {
                    let aggregating = body
                        .and_then(|b| b.pointer("/metadata/labels"))
                        .and_then(Value::as_object)
                        .is_some_and(|l| l.keys().any(|k| k.starts_with(AGGREGATE_LABEL_PREFIX)));
                    if aggregating {
                        return Err(Rule::HostRbacRole(format!(
                            "{target} carries {AGGREGATE_LABEL_PREFIX}* labels, which could extend a role bound to the host"
                        )));
                    }
                }
                let Some(name) = target.name() else { return Ok(()) };
                if self.role_bound_to_host(&target.kind, target.namespace.as_deref(), name, sa_ns, sa).await? {
                    return Err(Rule::HostRbacRole(format!("{target} is bound to the host's ServiceAccount {sa_ns}/{sa}")));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn live_binding(&self, target: &Target) -> Result<Option<Value>, Rule> {
        let (Some(client), Some(name)) = (self.inner.client.as_ref(), target.name()) else { return Ok(None) };
        let api = rbac_api(client, &target.kind, target.namespace.as_deref());
        match api.get_opt(name).await {
            Ok(obj) => Ok(obj.map(|o| serde_json::to_value(o).unwrap_or(Value::Null))),
            Err(e) => Err(Rule::Unverifiable(format!("reading {target}: {e}"))),
        }
    }

    /// Whether some (Cluster)RoleBinding that includes the host's ServiceAccount refers to this role.
    async fn role_bound_to_host(&self, kind: &str, namespace: Option<&str>, name: &str, sa_ns: &str, sa: &str) -> Result<bool, Rule> {
        let Some(client) = self.inner.client.as_ref() else { return Ok(false) };
        let mut bindings = Vec::new();
        let list = |kind: &'static str, ns: Option<&str>| {
            let api = rbac_api(client, kind, ns);
            async move {
                api.list(&ListParams::default()).await.map(|l| l.items).map_err(|e| Rule::Unverifiable(format!("listing {kind}s: {e}")))
            }
        };
        bindings.extend(list("ClusterRoleBinding", None).await?);
        // A RoleBinding may refer to a ClusterRole too; bindings of the host live in any namespace.
        bindings.extend(list("RoleBinding", None).await?);
        Ok(bindings.iter().any(|b| {
            let v = serde_json::to_value(b).unwrap_or(Value::Null);
            let role_kind = v.pointer("/roleRef/kind").and_then(Value::as_str);
            let role_name = v.pointer("/roleRef/name").and_then(Value::as_str);
            let same_ns = kind == "ClusterRole" || b.metadata.namespace.as_deref() == namespace;
            role_kind == Some(kind) && role_name == Some(name) && same_ns && binds(&v, sa_ns, sa)
        }))
    }
}

fn rbac_api(client: &kube::Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk(RBAC, "v1", kind);
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let resource = kube::core::ApiResource::from_gvk_with_plural(&gvk, &plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Whether a binding's subjects include the ServiceAccount `sa_ns/sa`.
fn binds(binding: &Value, sa_ns: &str, sa: &str) -> bool {
    let binding_ns = binding.pointer("/metadata/namespace").and_then(Value::as_str);
    let subjects = binding.get("subjects").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    subjects.iter().any(|s| {
        let field = |f: &str| s.get(f).and_then(Value::as_str).unwrap_or_default();
        match field("kind") {
            "ServiceAccount" => {
                let ns = Some(field("namespace")).filter(|n| !n.is_empty()).or(binding_ns);
                field("name") == sa && ns == Some(sa_ns)
            }
            "Group" => {
                let g = field("name");
                g == "system:serviceaccounts" || g == format!("system:serviceaccounts:{sa_ns}") || g == "system:authenticated"
            }
            "User" => field("name") == format!("system:serviceaccount:{sa_ns}:{sa}"),
            _ => false,
        }
    })
}

/// Call `f` on every pod spec in `v`: any object with a `containers` array.
fn walk_pod_specs(v: &Value, f: &mut impl FnMut(&serde_json::Map<String, Value>)) {
    match v {
        Value::Object(map) => {
            if map.get("containers").is_some_and(Value::is_array) {
                f(map);
            }
            map.values().for_each(|child| walk_pod_specs(child, f));
        }
        Value::Array(items) => items.iter().for_each(|child| walk_pod_specs(child, f)),
        _ => {}
    }
}

/// Whether a pod spec mounts or reads a Secret (volumes, projected sources, env, envFrom).
fn reads_secrets(spec: &serde_json::Map<String, Value>) -> bool {
    fn any_key(v: &Value, keys: &[&str]) -> bool {
        match v {
            Value::Object(map) => map.iter().any(|(k, child)| keys.contains(&k.as_str()) || any_key(child, keys)),
            Value::Array(items) => items.iter().any(|child| any_key(child, keys)),
            _ => false,
        }
    }
    let containers = ["containers", "initContainers", "ephemeralContainers"].iter().filter_map(|k| spec.get(*k));
    spec.get("volumes").is_some_and(|v| any_key(v, &["secret"]))
        || containers.into_iter().any(|c| any_key(c, &["secretKeyRef", "secretRef"]))
}

/// Plugin ConfigMaps and their payloads are recognised by label: no plugin may write either.
fn check_plugin_label(body: &Value) -> Result<(), Rule> {
    let labels = body.pointer("/metadata/labels").and_then(Value::as_object);
    let labelled = labels.is_some_and(|l| l.contains_key(PLUGIN_LABEL) || l.contains_key(PAYLOAD_LABEL));
    if labelled { Err(Rule::PluginLabel) } else { Ok(()) }
}

/// The kind of a target, for grants and discovery.
pub(super) fn kind_of(target: &Target) -> KindRef {
    KindRef::new(target.api_version.clone(), target.kind.clone())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kinds::ObjectKey;

    fn protected() -> Protected {
        Protected::new(
            HostObjects {
                plugin_namespaces: vec!["wasmloop".into()],
                lease_namespace: Some("wasmloop".into()),
                service_account: Some(("wasmloop".into(), "host".into())),
            },
            None,
        )
    }

    async fn check(p: &Protected, action: Action) -> Result<(), Rule> {
        let target = action.target().unwrap();
        p.check(&action, &target).await
    }

    fn apply(v: Value) -> Action {
        Action::Apply { object: v }
    }

    fn delete(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> Action {
        Action::delete(ObjectKey::new(KindRef::new(api_version, kind), ns.map(str::to_owned), name))
    }

    #[tokio::test]
    async fn the_host_namespace_holds_protected_objects_and_ordinary_ones() {
        let p = protected();
        let rule = |r: Result<(), Rule>| r.map_err(|e| e.name());
        assert_eq!(rule(check(&p, delete("v1", "Namespace", None, "wasmloop")).await), Err("host-namespace"));
        assert_eq!(rule(check(&p, delete("v1", "ConfigMap", Some("wasmloop"), "x")).await), Err("plugin-configmap"));
        assert_eq!(rule(check(&p, delete("coordination.k8s.io/v1", "Lease", Some("wasmloop"), "x")).await), Err("host-lease"));
        assert_eq!(rule(check(&p, delete("v1", "ServiceAccount", Some("wasmloop"), "host")).await), Err("host-service-account"));
        assert_eq!(rule(check(&p, delete("v1", "Secret", Some("wasmloop"), "host-token-abcde")).await), Err("host-service-account"));
        assert_eq!(rule(check(&p, delete("rbac.authorization.k8s.io/v1", "RoleBinding", Some("wasmloop"), "x")).await), Err("host-rbac"));
        // Other objects there, and the same objects elsewhere, are the grants' business.
        assert_eq!(rule(check(&p, delete("v1", "Pod", Some("wasmloop"), "x")).await), Ok(()));
        assert_eq!(rule(check(&p, delete("v1", "ConfigMap", Some("team-a"), "x")).await), Ok(()));
        assert_eq!(rule(check(&p, delete("v1", "Secret", Some("team-a"), "x")).await), Ok(()));
        assert_eq!(rule(check(&p, delete("v1", "Namespace", None, "team-a")).await), Ok(()));
        let generated = Action::Create {
            object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-", "namespace": "wasmloop"}}),
        };
        assert_eq!(rule(check(&p, generated).await), Err("plugin-configmap"));
    }

    #[tokio::test]
    async fn plugin_labels_and_plugin_configmaps_are_protected() {
        let p = Protected::minimal();
        let labelled = apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "evil", "namespace": "team-a", "labels": {PLUGIN_LABEL: "true"}}}));
        let err = check(&p, labelled).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "protected object (plugin-label): objects labelled wasmloop.dev/plugin or wasmloop.dev/plugin-payload are written only by the admin"
        );
        let payload = apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fake-wasm", "namespace": "team-a", "labels": {PAYLOAD_LABEL: "true"}}}));
        assert_eq!(check(&p, payload).await.unwrap_err(), Rule::PluginLabel);
        let store = Arc::new(IndexedStore::new(KindRef::new("v1", "ConfigMap")));
        store.apply(json!({"metadata": {"name": "podset", "namespace": "plugins"}})).unwrap();
        p.watch_plugin_configmaps(store);
        assert_eq!(check(&p, delete("v1", "ConfigMap", Some("plugins"), "podset")).await.unwrap_err(), Rule::PluginConfigMap);
        assert!(check(&p, delete("v1", "ConfigMap", Some("plugins"), "other")).await.is_ok());
    }

    #[tokio::test]
    async fn pods_in_the_host_namespace_neither_run_as_the_host_nor_read_secrets() {
        let p = protected();
        let deployment = |ns: &str, spec: Value| {
            apply(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": ns},
                         "spec": {"template": {"spec": spec}}}))
        };
        let as_host = json!({"serviceAccountName": "host", "containers": [{"name": "c"}]});
        let err = check(&p, deployment("wasmloop", as_host.clone())).await.unwrap_err();
        assert_eq!(err.name(), "host-service-account-pod");
        assert!(err.to_string().contains("would run a Pod as the host's ServiceAccount wasmloop/host"), "{err}");
        assert!(check(&p, deployment("team-a", as_host)).await.is_ok(), "another namespace's SA of the same name");
        for spec in [
            json!({"volumes": [{"name": "t", "secret": {"secretName": "host-token-x"}}], "containers": [{"name": "c"}]}),
            json!({"volumes": [{"name": "t", "projected": {"sources": [{"secret": {"name": "s"}}]}}], "containers": [{"name": "c"}]}),
            json!({"containers": [{"name": "c", "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}}]}]}),
            json!({"initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "s"}}]}], "containers": []}),
        ] {
            assert_eq!(check(&p, deployment("wasmloop", spec.clone())).await.unwrap_err().name(), "host-service-account-pod", "{spec}");
        }
        let plain = json!({"containers": [{"name": "c", "image": "x"}], "volumes": [{"name": "c", "configMap": {"name": "x"}}]});
        assert!(check(&p, deployment("wasmloop", plain)).await.is_ok(), "an ordinary Pod in the host namespace");
    }

    #[tokio::test]
    async fn bindings_of_the_host_service_account_are_protected_everywhere() {
        let p = protected();
        let crb = |subject: Value| {
            apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                         "subjects": [subject]}))
        };
        for subject in [
            json!({"kind": "ServiceAccount", "name": "host", "namespace": "wasmloop"}),
            json!({"kind": "Group", "name": "system:serviceaccounts"}),
            json!({"kind": "Group", "name": "system:serviceaccounts:wasmloop"}),
            json!({"kind": "Group", "name": "system:authenticated"}),
            json!({"kind": "User", "name": "system:serviceaccount:wasmloop:host"}),
        ] {
            assert_eq!(check(&p, crb(subject.clone())).await.unwrap_err().name(), "host-rbac-binding", "{subject}");
        }
        assert!(check(&p, crb(json!({"kind": "ServiceAccount", "name": "other", "namespace": "team-a"}))).await.is_ok());
        let aggregating = apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "r", "labels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}}));
        assert_eq!(check(&p, aggregating).await.unwrap_err().name(), "host-rbac-role");
    }
}
