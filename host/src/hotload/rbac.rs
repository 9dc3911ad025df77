//! The RBAC a plugin manifest needs (`wasmloop pack --rbac`), derived from its grants, so the
//! admin writes the grants once and the cluster's authorization follows them.
//!
//! For plugin `<name>` loaded from namespace `<ns>` by the host's ServiceAccount `<host>`:
//!
//! | object | for whom | what |
//! |---|---|---|
//! | ServiceAccount `wasmloop-plugin-<name>` in `<ns>` | the plugin | the identity its writes carry |
//! | ClusterRole + ClusterRoleBinding `wasmloop:plugin:<ns>:<name>` (grants without `namespaces:`), Role + RoleBinding of that name in each granted namespace | the plugin | its grants as RBAC rules, and list/watch of what it reads (checked at load) |
//! | ClusterRole + ClusterRoleBinding (or Role + RoleBinding per namespace) `wasmloop:host-reads:<ns>:<name>` | the host | list/watch of what the plugin reads: the informers are the host's |
//! | Role + RoleBinding `wasmloop:impersonate:<name>` in `<ns>` | the host | `impersonate` on exactly the plugin's ServiceAccount |
//!
//! The names carry the plugin namespace, so two hosts (or two plugin namespaces) with plugins of
//! the same name never overwrite each other's roles.
//!
//! Grant verbs become RBAC verbs as docs/operations.md tabulates them: `read` → list, watch;
//! `create` → create; `apply` → patch, create; `patch` → patch; `delete` → delete;
//! `update-status` → patch on `<resource>/status`; `event` → nothing (the host records Events);
//! `bind` and `escalate` (on named roles only) → themselves, with the grant's `names` as the
//! rule's `resourceNames`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::manifest::PluginManifest;
use crate::grants::{Grant, KindPattern, RoleVerb, Verb, VerbPattern};
use crate::identity::{Claim, ClaimError, Identity, Role};
use crate::kinds::{self, KindRef};

/// Where the plugin and the host live.
pub struct Placement<'a> {
    /// The plugin ConfigMap's namespace (its ServiceAccount's).
    pub namespace: &'a str,
    /// The host's ServiceAccount, `(namespace, name)`.
    pub host: (&'a str, &'a str),
}

/// One RBAC rule: API groups, resources, verbs (sorted, deduplicated when rendered), and the
/// `resourceNames` it is limited to (empty: every object; only `bind` and `escalate` have some).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Rule {
    group: String,
    resource: String,
    verbs: Vec<&'static str>,
    names: Vec<String>,
}

/// Rules by scope: `None` cluster-wide, `Some(ns)` in one namespace.
type Scoped = BTreeMap<Option<String>, Vec<Rule>>;

/// The kinds `manifest` grants `read` on (exact kinds; `*` names none): the reads to use when the
/// plugin's own declaration is not at hand (its component is not loaded here).
pub fn granted_reads(manifest: &PluginManifest) -> Vec<KindRef> {
    let mut out: Vec<KindRef> = manifest
        .grants
        .rules()
        .iter()
        .filter(|g| g.verbs.iter().any(|v| matches!(v, VerbPattern::Any | VerbPattern::Exact(Verb::Read))))
        .flat_map(|g| g.kinds.iter())
        .filter_map(|k| match k {
            KindPattern::Exact(k) => Some(k.clone()),
            KindPattern::Any => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Server-side apply `objects` (what [`objects`] returns: ServiceAccounts and RBAC) as field
/// manager `manager`: what `kubectl apply --server-side` of `wasmloop pack --rbac` does, for
/// tools and tests that hold a client.
pub async fn apply(client: &kube::Client, objects: &[Value], manager: &str) -> Result<(), kube::Error> {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::core::{ApiResource, GroupVersionKind};
    for o in objects {
        let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
        let kind = KindRef::new(text("/apiVersion"), text("/kind"));
        let (group, version) = kind.group_version().unwrap_or(("", "v1"));
        let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, &kind.kind), &kinds::plural(&kind).0);
        let namespace = text("/metadata/namespace");
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(client.clone(), &resource)
        } else {
            Api::namespaced_with(client.clone(), &namespace, &resource)
        };
        api.patch(&text("/metadata/name"), &PatchParams::apply(manager).force(), &Patch::Apply(o)).await?;
    }
    Ok(())
}

/// The RBAC objects `manifest` needs, for a plugin whose declared reads are `reads`. Kinds whose
/// resource name is guessed (custom resources) are listed in the second value. The
/// ServiceAccount is labelled with its claim (the plugin it belongs to, and for a candidate
/// version (`shadowOf:`) its role), which the host checks before it acts as it. A manifest whose
/// `serviceAccountName` is the host's account or another plugin's default is refused, as the
/// host refuses it.
pub fn objects(manifest: &PluginManifest, reads: &[KindRef], at: &Placement<'_>) -> Result<(Vec<Value>, Vec<String>), ClaimError> {
    let role = if manifest.shadow_of.is_some() { Role::Candidate } else { Role::Serving };
    let identity = Identity::of_plugin(at.namespace, &manifest.name, role, manifest.service_account.as_deref());
    let claim = Claim { plugin: manifest.name.clone(), role };
    let host = Identity { namespace: at.host.0.to_owned(), name: at.host.1.to_owned() };
    identity.may_be(&claim, &[host])?;
    // A candidate's objects are named apart from the serving version's, which they must not replace.
    let base = match role {
        Role::Serving => manifest.name.clone(),
        Role::Candidate => format!("{}:candidate", manifest.name),
    };
    let mut guessed = Vec::new();
    let mut plugin = Scoped::new();
    let mut host = Scoped::new();
    for kind in reads {
        let rule = rule_for(kind, "", &["list", "watch"], &mut guessed);
        for scope in read_scopes(manifest, kind) {
            plugin.entry(scope.clone()).or_default().push(rule.clone());
            host.entry(scope).or_default().push(rule.clone());
        }
    }
    for grant in manifest.grants.rules() {
        for (subresource, verbs) in grant_verbs(grant) {
            for pattern in &grant.kinds {
                let rule = match pattern {
                    KindPattern::Any => {
                        Rule { group: "*".into(), resource: format!("*{subresource}"), verbs: verbs.clone(), names: vec![] }
                    }
                    KindPattern::Exact(kind) => rule_for(kind, subresource, &verbs, &mut guessed),
                };
                for scope in grant_scopes(grant) {
                    plugin.entry(scope).or_default().push(rule.clone());
                }
            }
        }
        // `bind` and `escalate`: on the grant's named roles only (grants check that they have names).
        let role_verbs: Vec<&'static str> = grant.role_verbs().map(RoleVerb::as_str).collect();
        for kind in grant.kinds.iter().filter_map(|k| match k {
            KindPattern::Exact(kind) if !role_verbs.is_empty() => Some(kind),
            _ => None,
        }) {
            let mut rule = rule_for(kind, "", &role_verbs, &mut guessed);
            rule.names = grant.names.clone().unwrap_or_default();
            for scope in grant_scopes(grant) {
                plugin.entry(scope).or_default().push(rule.clone());
            }
        }
    }
    guessed.sort();
    guessed.dedup();
    let mut labels = json!({"app.kubernetes.io/name": "wasmloop"});
    for (key, value) in claim.labels() {
        labels[key] = json!(value);
    }
    let plugin_subject = json!({"kind": "ServiceAccount", "name": identity.name, "namespace": identity.namespace});
    let host_subject = json!({"kind": "ServiceAccount", "name": at.host.1, "namespace": at.host.0});
    let mut out = vec![json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": identity.name, "namespace": identity.namespace, "labels": labels},
    })];
    out.extend(roles(&format!("wasmloop:plugin:{}:{base}", at.namespace), &plugin, &plugin_subject, &labels));
    out.extend(roles(&format!("wasmloop:host-reads:{}:{base}", at.namespace), &host, &host_subject, &labels));
    let impersonate = format!("wasmloop:impersonate:{base}");
    out.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": impersonate, "namespace": at.namespace, "labels": labels},
        "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"], "resourceNames": [identity.name]}],
    }));
    out.push(binding("RoleBinding", &impersonate, Some(at.namespace), "Role", &host_subject, &labels));
    Ok((out, guessed))
}

/// The rule for `verbs` on `kind` (its `subresource`, e.g. `/status`), noting a guessed plural.
fn rule_for(kind: &KindRef, subresource: &str, verbs: &[&'static str], guessed: &mut Vec<String>) -> Rule {
    let (group, _) = kind.group_version().unwrap_or(("", ""));
    let (plural, is_guess) = kinds::plural(kind);
    if is_guess {
        guessed.push(format!("{kind} → {plural}"));
    }
    Rule { group: group.to_owned(), resource: format!("{plural}{subresource}"), verbs: verbs.to_vec(), names: Vec::new() }
}

/// The RBAC verbs a grant needs, by subresource (`""` the object, `/status` its status).
fn grant_verbs(grant: &Grant) -> Vec<(&'static str, Vec<&'static str>)> {
    let has = |v: Verb| grant.verbs.iter().any(|p| *p == VerbPattern::Any || *p == VerbPattern::Exact(v));
    let mut object = Vec::new();
    if has(Verb::Create) || has(Verb::Apply) {
        object.push("create");
    }
    if has(Verb::Apply) || has(Verb::Patch) {
        object.push("patch");
    }
    if has(Verb::Delete) {
        object.push("delete");
    }
    let mut out = Vec::new();
    if !object.is_empty() {
        out.push(("", object));
    }
    if has(Verb::UpdateStatus) {
        out.push(("/status", vec!["patch"]));
    }
    out
}

/// Where a grant applies: cluster-wide, or in each of its namespaces.
fn grant_scopes(grant: &Grant) -> Vec<Option<String>> {
    match &grant.namespaces {
        None => vec![None],
        Some(list) => list.iter().cloned().map(Some).collect(),
    }
}

/// Where the plugin reads `kind`, as the controller will watch it (without discovery: a kind
/// the table does not know is taken as namespaced).
fn read_scopes(manifest: &PluginManifest, kind: &KindRef) -> Vec<Option<String>> {
    let namespaced = kinds::builtin_namespaced(kind).unwrap_or(true);
    match (manifest.grants.read_scope(kind), &manifest.controller.namespace) {
        (crate::grants::ReadScope::All, Some(ns)) if namespaced => vec![Some(ns.clone())],
        (crate::grants::ReadScope::All, _) => vec![None],
        (crate::grants::ReadScope::Namespaces(list), Some(ns)) => list.into_iter().filter(|n| n == ns).map(Some).collect(),
        (crate::grants::ReadScope::Namespaces(list), None) => list.into_iter().map(Some).collect(),
        (crate::grants::ReadScope::None, _) => Vec::new(),
    }
}

/// A role per scope (a ClusterRole cluster-wide, a Role per namespace) bound to `subject`.
fn roles(name: &str, scoped: &Scoped, subject: &Value, labels: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for (scope, rules) in scoped {
        let (role_kind, binding_kind) = if scope.is_some() { ("Role", "RoleBinding") } else { ("ClusterRole", "ClusterRoleBinding") };
        let mut metadata = json!({"name": name, "labels": labels});
        if let Some(ns) = scope {
            metadata["namespace"] = json!(ns);
        }
        out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": role_kind, "metadata": metadata, "rules": render(rules)}));
        out.push(binding(binding_kind, name, scope.as_deref(), role_kind, subject, labels));
    }
    out
}

fn binding(kind: &str, name: &str, namespace: Option<&str>, role_kind: &str, subject: &Value, labels: &Value) -> Value {
    let mut metadata = json!({"name": name, "labels": labels});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
        "subjects": [subject],
    })
}

/// Rules merged per (group, resource, resourceNames), verbs in the order list, watch, create,
/// patch, delete, bind, escalate.
fn render(rules: &[Rule]) -> Value {
    const ORDER: [&str; 7] = ["list", "watch", "create", "patch", "delete", "bind", "escalate"];
    let mut merged: BTreeMap<(String, String, Vec<String>), Vec<&str>> = BTreeMap::new();
    for r in rules {
        let mut names = r.names.clone();
        names.sort();
        names.dedup();
        let verbs = merged.entry((r.group.clone(), r.resource.clone(), names)).or_default();
        verbs.extend(r.verbs.iter().copied());
    }
    let rendered: Vec<Value> = merged
        .into_iter()
        .map(|((group, resource, names), mut verbs)| {
            verbs.sort_by_key(|v| ORDER.iter().position(|o| o == v));
            verbs.dedup();
            let mut rule = json!({"apiGroups": [group], "resources": [resource], "verbs": verbs});
            if !names.is_empty() {
                rule["resourceNames"] = json!(names);
            }
            rule
        })
        .collect();
    Value::Array(rendered)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PODSET: &str = r#"
name: podset
grants:
  - kinds: ["wasmloop.dev/v1alpha1/PodSet"]
    verbs: [read, update-status, event]
  - kinds: ["v1/Pod"]
    verbs: [read, create, delete, patch]
"#;

    fn kinds() -> Vec<KindRef> {
        vec![KindRef::new("wasmloop.dev/v1alpha1", "PodSet"), KindRef::new("v1", "Pod")]
    }

    fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    #[test]
    fn a_cluster_wide_plugin_gets_its_account_its_rules_the_hosts_reads_and_impersonation() {
        let m = PluginManifest::parse(PODSET, "podset").unwrap();
        let (objects, guessed) = objects(&m, &kinds(), &Placement { namespace: "wasmloop", host: ("wasmloop", "wasmloop") }).unwrap();
        assert_eq!(guessed, ["wasmloop.dev/v1alpha1/PodSet → podsets"]);
        assert_eq!(named(&objects, "ServiceAccount", "wasmloop-plugin-podset")["metadata"]["namespace"], "wasmloop");
        let role = named(&objects, "ClusterRole", "wasmloop:plugin:wasmloop:podset");
        assert_eq!(
            role["rules"],
            json!([
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "create", "patch", "delete"]},
                {"apiGroups": ["wasmloop.dev"], "resources": ["podsets"], "verbs": ["list", "watch"]},
                {"apiGroups": ["wasmloop.dev"], "resources": ["podsets/status"], "verbs": ["patch"]},
            ])
        );
        let binding = named(&objects, "ClusterRoleBinding", "wasmloop:plugin:wasmloop:podset");
        assert_eq!(binding["subjects"], json!([{"kind": "ServiceAccount", "name": "wasmloop-plugin-podset", "namespace": "wasmloop"}]));
        let reads = named(&objects, "ClusterRole", "wasmloop:host-reads:wasmloop:podset");
        assert!(reads["rules"].as_array().unwrap().iter().all(|r| r["verbs"] == json!(["list", "watch"])), "{reads}");
        assert_eq!(named(&objects, "ClusterRoleBinding", "wasmloop:host-reads:wasmloop:podset")["subjects"][0]["name"], "wasmloop");
        let impersonate = named(&objects, "Role", "wasmloop:impersonate:podset");
        assert_eq!(impersonate["rules"][0]["resourceNames"], json!(["wasmloop-plugin-podset"]));
        assert_eq!(impersonate["rules"][0]["verbs"], json!(["impersonate"]));
    }

    #[test]
    fn namespaced_grants_become_roles_in_their_namespaces() {
        let yaml = "name: team\nserviceAccountName: team-bot\ngrants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, apply]\n    namespaces: [a, b]\n";
        let m = PluginManifest::parse(yaml, "team").unwrap();
        let (objects, guessed) =
            objects(&m, &[KindRef::new("v1", "ConfigMap")], &Placement { namespace: "plugins", host: ("wasmloop", "host") }).unwrap();
        assert!(guessed.is_empty());
        assert!(!objects.iter().any(|o| o["kind"] == "ClusterRole"), "nothing cluster-wide");
        for ns in ["a", "b"] {
            let role = objects.iter().find(|o| {
                o["kind"] == "Role" && o["metadata"]["namespace"] == ns && o["metadata"]["name"] == "wasmloop:plugin:plugins:team"
            });
            assert_eq!(role.unwrap()["rules"][0]["verbs"], json!(["list", "watch", "create", "patch"]));
        }
        let binding =
            objects.iter().find(|o| o["kind"] == "RoleBinding" && o["metadata"]["name"] == "wasmloop:plugin:plugins:team").unwrap();
        assert_eq!(binding["subjects"][0]["name"], "team-bot");
        let account = named(&objects, "ServiceAccount", "team-bot");
        assert_eq!(account["metadata"]["labels"]["wasmloop.dev/plugin-name"], "team", "the account is claimed for the plugin");
    }

    #[test]
    fn bind_and_escalate_become_rules_on_the_named_roles_only() {
        let yaml = r#"
name: binder
grants:
  - kinds: ["rbac.authorization.k8s.io/v1/ClusterRole"]
    verbs: [read]
  - kinds: ["rbac.authorization.k8s.io/v1/ClusterRole"]
    verbs: [bind]
    names: ["secret-reader", "view"]
  - kinds: ["rbac.authorization.k8s.io/v1/Role"]
    verbs: [bind, escalate]
    names: ["deployer"]
    namespaces: ["team-a"]
  - kinds: ["rbac.authorization.k8s.io/v1/RoleBinding"]
    verbs: [read, create, delete]
"#;
        let m = PluginManifest::parse(yaml, "binder").unwrap();
        let reads =
            [KindRef::new("rbac.authorization.k8s.io/v1", "ClusterRole"), KindRef::new("rbac.authorization.k8s.io/v1", "RoleBinding")];
        let (objects, guessed) = objects(&m, &reads, &Placement { namespace: "wasmloop", host: ("wasmloop", "wasmloop") }).unwrap();
        assert!(guessed.is_empty(), "{guessed:?}");
        let cluster = named(&objects, "ClusterRole", "wasmloop:plugin:wasmloop:binder");
        assert_eq!(
            cluster["rules"],
            json!([
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["list", "watch"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"],
                 "resourceNames": ["secret-reader", "view"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"], "verbs": ["list", "watch", "create", "delete"]},
            ])
        );
        let team = objects
            .iter()
            .find(|o| {
                o["kind"] == "Role" && o["metadata"]["namespace"] == "team-a" && o["metadata"]["name"] == "wasmloop:plugin:wasmloop:binder"
            })
            .expect("a Role in team-a");
        assert_eq!(
            team["rules"],
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["bind", "escalate"], "resourceNames": ["deployer"]}])
        );
        // The host's reads carry no bind or escalate.
        let host = named(&objects, "ClusterRole", "wasmloop:host-reads:wasmloop:binder");
        assert!(host["rules"].as_array().unwrap().iter().all(|r| r["verbs"] == json!(["list", "watch"])), "{host}");
    }

    #[test]
    fn manifests_naming_the_hosts_account_or_another_plugins_are_refused() {
        let at = Placement { namespace: "wasmloop", host: ("wasmloop", "wasmloop") };
        let host = PluginManifest::parse("name: evil\nserviceAccountName: wasmloop\n", "evil").unwrap();
        let err = objects(&host, &[], &at).unwrap_err();
        assert!(err.to_string().contains("the host's own ServiceAccount"), "{err}");
        let other = PluginManifest::parse("name: evil\nserviceAccountName: wasmloop-plugin-podset\n", "evil").unwrap();
        let err = objects(&other, &[], &at).unwrap_err();
        assert!(err.to_string().contains("default account of another plugin (plugin podset)"), "{err}");
        // In another namespace, the host's name is just a name.
        let elsewhere = Placement { namespace: "team", host: ("wasmloop", "wasmloop") };
        assert!(objects(&host, &[], &elsewhere).is_ok());
    }

    #[test]
    fn a_candidate_gets_an_account_and_roles_of_its_own() {
        let yaml = "shadowOf: podset\ncanary: {shards: [0]}\ngrants:\n  - kinds: [v1/Pod]\n    verbs: [read, create]\n";
        let m = PluginManifest::parse(yaml, "podset-next").unwrap();
        let (objects, _) =
            objects(&m, &[KindRef::new("v1", "Pod")], &Placement { namespace: "wasmloop", host: ("wasmloop", "wasmloop") }).unwrap();
        let account = named(&objects, "ServiceAccount", "wasmloop-candidate-podset");
        assert_eq!(account["metadata"]["labels"]["wasmloop.dev/plugin-name"], "podset");
        assert_eq!(account["metadata"]["labels"]["wasmloop.dev/plugin-role"], "candidate");
        named(&objects, "ClusterRole", "wasmloop:plugin:wasmloop:podset:candidate");
        let impersonate = named(&objects, "Role", "wasmloop:impersonate:podset:candidate");
        assert_eq!(impersonate["rules"][0]["resourceNames"], json!(["wasmloop-candidate-podset"]));
        assert!(!objects.iter().any(|o| o["metadata"]["name"] == "wasmloop:plugin:wasmloop:podset"), "the serving roles are untouched");
    }
}
