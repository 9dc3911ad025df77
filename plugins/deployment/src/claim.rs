//! Which ReplicaSets a Deployment controls (`getReplicaSetsForDeployment`, KCM's
//! `ClaimReplicaSets`): those it controls that match its selector; matching orphans are adopted
//! (not while it is being deleted, nor ReplicaSets being deleted), and those it controls that
//! stopped matching are released. ReplicaSets of other controllers are left alone.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use wasmloop_sdk::{Error, ResultExt, cache, kinds};

use crate::model::ReplicaSet;
use crate::sync::{Flow, Sync};

impl Sync {
    /// Claim the Deployment's ReplicaSets (adoptions and releases go to the outcome) and hold
    /// the claimed ones.
    pub fn claim(&mut self) -> Flow {
        let ns = self.key.ns();
        let query = self.d.spec.selector.to_query().map_err(Error::permanent)?;
        let matching = cache::list_raw(&kinds::REPLICA_SET, ns, Some(&query)).context("listing ReplicaSets matching the selector")?;
        let owned =
            cache::by_index_raw(&kinds::REPLICA_SET, cache::OWNER_INDEX, &self.d.metadata.uid).context("listing owned ReplicaSets")?;
        let mut seen = BTreeSet::new();
        let mut claimed = Vec::new();
        let owner = self.owner_object();
        let deleting = self.d.metadata.is_deleting();
        let uid = self.d.metadata.uid.clone();
        for raw in matching.iter().chain(&owned) {
            let rs: ReplicaSet = serde_json::from_str(raw).map_err(|e| Error::permanent(format!("a cached ReplicaSet: {e}")))?;
            if !seen.insert(rs.metadata.uid.clone()) {
                continue;
            }
            let matches = self.d.spec.selector.matches(&rs.metadata.labels);
            match rs.metadata.controller().map(|r| r.uid.as_str()) {
                Some(owner_uid) if owner_uid == uid && matches => claimed.push(rs),
                Some(owner_uid) if owner_uid == uid && !deleting => {
                    let claims = std::mem::take(&mut self.claims);
                    self.claims = claims.release(&uid, &with_kind(raw)?);
                }
                Some(_) => {}
                None if matches && !deleting && !rs.metadata.is_deleting() => {
                    let claims = std::mem::take(&mut self.claims);
                    self.claims = claims.adopt(&owner, &with_kind(raw)?);
                    let mut adopted = rs;
                    let reference = serde_json::from_value(self.controller_ref()).context("the controller reference")?;
                    adopted.metadata.owner_references.push(reference);
                    claimed.push(adopted);
                }
                None => {}
            }
        }
        self.set_replica_sets(claimed);
        Ok(())
    }

    /// The Deployment as an owner: what [`wasmloop_sdk::Outcome::adopt`] reads.
    fn owner_object(&self) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": self.d.metadata.name, "namespace": self.key.ns(), "uid": self.d.metadata.uid}})
    }
}

/// A cached ReplicaSet as JSON with its `apiVersion` and `kind` (the patch builders take its
/// key from them).
fn with_kind(raw: &str) -> Result<Value, Error> {
    let mut rs: Value = serde_json::from_str(raw).map_err(|e| Error::permanent(format!("a cached ReplicaSet: {e}")))?;
    if let Some(o) = rs.as_object_mut() {
        o.insert("apiVersion".into(), "apps/v1".into());
        o.insert("kind".into(), "ReplicaSet".into());
    }
    Ok(rs)
}
