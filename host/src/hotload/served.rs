//! Whether the API server serves the kinds a plugin reads, asked afresh through discovery (never
//! the resolver's cache, which remembers a kind whose CRD has since been deleted): one request
//! per group/version (`GET /api/v1`, `GET /apis/<group>/<version>`), whatever the number of kinds.
//!
//! Discovery needs no RBAC beyond what every authenticated user has (`system:discovery`), so
//! this works where the host may not watch CustomResourceDefinitions.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;

use super::waiting::WaitReason;
use crate::controller::ReconcilerSpec;
use crate::kinds::KindRef;

/// Every kind `spec` reads with the role it has for the plugin, reconciled kind first.
pub fn kinds_of(spec: &ReconcilerSpec) -> Vec<(KindRef, &'static str)> {
    let mut out: Vec<(KindRef, &'static str)> = vec![(spec.reconciles.clone(), "reconciles")];
    let others = spec.watches.iter().map(|w| (&w.kind, "watches")).chain(spec.indexes.iter().map(|i| (&i.kind, "indexes")));
    for (kind, role) in others {
        if !out.iter().any(|(k, _)| k == kind) {
            out.push((kind.clone(), role));
        }
    }
    out
}

/// One round of discovery: each group/version is asked once, however many kinds and plugins
/// are checked in the round.
pub struct Discovery<'a> {
    client: &'a kube::Client,
    lists: BTreeMap<String, Result<Option<APIResourceList>, kube::Error>>,
}

impl<'a> Discovery<'a> {
    pub fn new(client: &'a kube::Client) -> Self {
        Self { client, lists: BTreeMap::new() }
    }

    /// The first of `kinds` the API server does not serve, as a [`WaitReason`]: `KindNotServed`,
    /// or `DiscoveryFailed` when it did not answer (busy, unreachable: not a reason to refuse).
    pub async fn unserved(&mut self, kinds: &[(KindRef, &'static str)]) -> Option<WaitReason> {
        for (kind, role) in kinds {
            if !self.lists.contains_key(&*kind.api_version) {
                let listed = resources(self.client, kind).await;
                self.lists.insert(kind.api_version.to_string(), listed);
            }
            match &self.lists[&*kind.api_version] {
                Ok(Some(list)) if serves(list, &kind.kind) => {}
                Ok(_) => return Some(WaitReason::KindNotServed { kind: kind.clone(), role }),
                Err(error) => return Some(WaitReason::DiscoveryFailed { kind: kind.clone(), error: error.to_string() }),
            }
        }
        None
    }
}

/// The resources of `kind`'s group/version: `None` if the API server does not serve it (404).
async fn resources(client: &kube::Client, kind: &KindRef) -> Result<Option<APIResourceList>, kube::Error> {
    let listed = match kind.group_version() {
        Ok(("", version)) => client.list_core_api_resources(version).await,
        Ok(_) => client.list_api_group_resources(&kind.api_version).await,
        // Not a valid apiVersion: nothing serves it (the manifest's grants would not cover it either).
        Err(_) => return Ok(None),
    };
    match listed {
        Ok(list) => Ok(Some(list)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `list` has the resource of `kind` itself (not a subresource such as `pods/status`).
fn serves(list: &APIResourceList, kind: &str) -> bool {
    list.resources.iter().any(|r| r.kind == kind && !r.name.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{IndexDecl, Mapping, WatchSpec};

    #[test]
    fn every_kind_read_is_checked_once_with_its_role() {
        let spec = ReconcilerSpec {
            name: "p".into(),
            version: "0.1.0".into(),
            reconciles: KindRef::new("example.com/v1", "Thing"),
            selector: None,
            watches: vec![
                WatchSpec { kind: KindRef::new("v1", "ConfigMap"), mapping: Mapping::Owner, selector: None, annotation_selector: None },
                WatchSpec {
                    kind: KindRef::new("example.com/v1", "Thing"),
                    mapping: Mapping::Owner,
                    selector: None,
                    annotation_selector: None,
                },
            ],
            indexes: vec![IndexDecl { kind: KindRef::new("apps/v1", "Deployment"), name: "i".into(), path: "spec.replicas".into() }],
            fields: vec![],
            annotation_selector: None,
        };
        let kinds: Vec<String> = kinds_of(&spec).iter().map(|(k, r)| format!("{k} {r}")).collect();
        assert_eq!(kinds, ["example.com/v1/Thing reconciles", "v1/ConfigMap watches", "apps/v1/Deployment indexes"]);
    }

    #[test]
    fn a_subresource_does_not_serve_its_kind() {
        let list: APIResourceList = serde_json::from_value(serde_json::json!({
            "groupVersion": "example.com/v1",
            "resources": [{"name": "things/status", "singularName": "", "namespaced": true, "kind": "Thing", "verbs": ["get"]}]
        }))
        .unwrap();
        assert!(!serves(&list, "Thing"));
        let list: APIResourceList = serde_json::from_value(serde_json::json!({
            "groupVersion": "example.com/v1",
            "resources": [{"name": "things", "singularName": "thing", "namespaced": true, "kind": "Thing", "verbs": ["list"]}]
        }))
        .unwrap();
        assert!(serves(&list, "Thing") && !serves(&list, "Other"));
    }
}
