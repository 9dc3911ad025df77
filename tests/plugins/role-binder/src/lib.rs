//! `role-binder`, Metacontroller's `clusteredparent` example as a plugin: every ClusterRole
//! labelled `role-binder.wasmloop.dev/namespace: <ns>` gets a RoleBinding `<role>-binding` in
//! `<ns>`, owned by the ClusterRole, that binds it to the ServiceAccount `default` of `<ns>` (or
//! to the `<namespace>/<name>` its annotation `role-binder.wasmloop.dev/subject` names).
//!
//! The binding grants the role's rights, which the plugin's own account does not hold: the API
//! server lets its account create it only with `bind` on that ClusterRole (a grant `verbs:
//! [bind]`, `names: [<role>]`, which `wasmloop pack --rbac` turns into the rule), and the host
//! refuses any binding of an identity of its own namespaces whatever the grants say
//! (`tests/tests/rbac_plugins.rs`).

use serde_json::{Value, json};
use wasmloop_sdk::{Error, KindRef, Metadata, Outcome, Reconciler, Request, ResultExt, cache, object};

/// The parent kind.
pub const CLUSTER_ROLE: KindRef = KindRef::from_static("rbac.authorization.k8s.io/v1", "ClusterRole");
/// The child kind.
pub const ROLE_BINDING: KindRef = KindRef::from_static("rbac.authorization.k8s.io/v1", "RoleBinding");
/// The label naming the namespace to bind the role in (also the reconcile selector).
pub const NAMESPACE_LABEL: &str = "role-binder.wasmloop.dev/namespace";
/// The annotation naming another subject, `<namespace>/<name>` of a ServiceAccount.
pub const SUBJECT_ANNOTATION: &str = "role-binder.wasmloop.dev/subject";

pub struct RoleBinder;

impl Reconciler for RoleBinder {
    fn metadata() -> Metadata {
        Metadata::new("role-binder", env!("CARGO_PKG_VERSION")).reconciles(CLUSTER_ROLE).selector(NAMESPACE_LABEL).owns(ROLE_BINDING)
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let Some(role) = cache::get_key::<Value>(&req.key).context("reading the ClusterRole")? else {
            return Ok(Outcome::new()); // deleted: garbage collection removes its binding
        };
        if object::is_deleting(&role) {
            return Ok(Outcome::new());
        }
        let Some(namespace) = object::label(&role, NAMESPACE_LABEL).filter(|n| !n.is_empty()) else {
            return Err(Error::permanent(format!("label {NAMESPACE_LABEL} is empty")));
        };
        let (subject_ns, subject) = match object::annotation(&role, SUBJECT_ANNOTATION) {
            Some(named) => named
                .split_once('/')
                .ok_or_else(|| Error::permanent(format!("{SUBJECT_ANNOTATION}: expected <namespace>/<name>, got {named:?}")))?,
            None => (namespace, "default"),
        };
        let name = format!("{}-binding", req.key.name);
        let binding = json!({
            "apiVersion": ROLE_BINDING.api_version,
            "kind": ROLE_BINDING.kind,
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": req.key.name},
            "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": subject_ns}],
        });
        // Level-triggered: a binding that exists with these subjects is done (roleRef is immutable).
        if let Some(current) = cache::get::<Value>(&ROLE_BINDING, Some(namespace), &name)? {
            if current.get("subjects") == binding.get("subjects") {
                return Ok(Outcome::new());
            }
            return Ok(Outcome::new().delete(&current)); // re-created with the new subject next time
        }
        Ok(Outcome::new().create_owned(&role, binding))
    }
}

wasmloop_sdk::export_reconciler!(RoleBinder);

#[cfg(test)]
mod tests {
    use wasmloop_sdk::testing::FakeCache;

    use super::*;

    fn cluster() -> FakeCache {
        FakeCache::for_reconciler::<RoleBinder>().with_yaml(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: secret-reader, uid: role-1, labels: {role-binder.wasmloop.dev/namespace: team-a}}
rules: [{apiGroups: [""], resources: [secrets], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: unlabelled, uid: role-2}
"#,
        )
    }

    #[test]
    fn a_labelled_cluster_role_gets_its_binding_once() {
        let fake = cluster();
        let key = CLUSTER_ROLE.key(None, "secret-reader");
        let done = fake.converge::<RoleBinder>(&key, 3).unwrap();
        assert_eq!(done.len(), 1);
        let binding = fake.get(&ROLE_BINDING.key(Some("team-a"), "secret-reader-binding")).expect("the binding");
        assert_eq!(binding["roleRef"]["name"], "secret-reader");
        assert_eq!(binding["subjects"][0], json!({"kind": "ServiceAccount", "name": "default", "namespace": "team-a"}));
        assert_eq!(object::controller_uid(&binding), Some("role-1"));
        assert!(fake.reconcile::<RoleBinder>(&CLUSTER_ROLE.key(None, "unlabelled")).unwrap().is_empty());
    }

    #[test]
    fn a_new_subject_replaces_the_binding() {
        let fake = cluster();
        let key = CLUSTER_ROLE.key(None, "secret-reader");
        fake.converge::<RoleBinder>(&key, 3).unwrap();
        let mut role = fake.get(&key).unwrap();
        role["metadata"]["annotations"] = json!({SUBJECT_ANNOTATION: "team-a/bot"});
        fake.add(role);
        fake.converge::<RoleBinder>(&key, 4).unwrap();
        let binding = fake.get(&ROLE_BINDING.key(Some("team-a"), "secret-reader-binding")).unwrap();
        assert_eq!(binding["subjects"][0]["name"], "bot");
    }
}
