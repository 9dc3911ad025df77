//! Names of API types and objects, and their resolution to API endpoints through discovery.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use serde::{Deserialize, Serialize};

/// Errors resolving a kind.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid apiVersion {0:?}: expected `version` or `group/version`")]
    InvalidApiVersion(String),
    #[error("kind {0} is not served by the API server (is its CRD installed?): {1}")]
    NotServed(KindRef, #[source] kube::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An API type: `apps/v1` + `ReplicaSet`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    pub api_version: String,
    pub kind: String,
}

impl KindRef {
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self { api_version: api_version.into(), kind: kind.into() }
    }

    /// `(group, version)`; the core group is `""`.
    pub fn group_version(&self) -> Result<(&str, &str)> {
        match self.api_version.split_once('/') {
            None if !self.api_version.is_empty() => Ok(("", self.api_version.as_str())),
            Some((g, v)) if !g.is_empty() && !v.is_empty() && !v.contains('/') => Ok((g, v)),
            _ => Err(Error::InvalidApiVersion(self.api_version.clone())),
        }
    }

    pub fn gvk(&self) -> Result<GroupVersionKind> {
        let (g, v) = self.group_version()?;
        Ok(GroupVersionKind::gvk(g, v, &self.kind))
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// One object: kind, namespace (None when cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectKey {
    pub kind: KindRef,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn new(kind: KindRef, namespace: Option<String>, name: impl Into<String>) -> Self {
        Self { kind, namespace, name: name.into() }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A kind resolved through discovery: where it is served and whether it is namespaced.
#[derive(Clone, Debug)]
pub struct ResolvedKind {
    pub kind: KindRef,
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// Resolves kinds by group/version/kind through API discovery (CRDs included), caching answers.
#[derive(Clone)]
pub struct KindResolver {
    client: kube::Client,
    cache: Arc<parking_lot::Mutex<HashMap<KindRef, ResolvedKind>>>,
}

impl KindResolver {
    pub fn new(client: kube::Client) -> Self {
        Self { client, cache: Default::default() }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Resolve `kind`, asking the API server only the first time.
    pub async fn resolve(&self, kind: &KindRef) -> Result<ResolvedKind> {
        if let Some(r) = self.cache.lock().get(kind) {
            return Ok(r.clone());
        }
        let gvk = kind.gvk()?;
        let (resource, caps) = discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| Error::NotServed(kind.clone(), e))?;
        let resolved = ResolvedKind {
            kind: kind.clone(),
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.cache.lock().insert(kind.clone(), resolved.clone());
        Ok(resolved)
    }

    /// Forget a kind (e.g. after its CRD was removed).
    pub fn forget(&self, kind: &KindRef) {
        self.cache.lock().remove(kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_version_splits_core_and_named_groups() {
        assert_eq!(KindRef::new("v1", "Pod").group_version().unwrap(), ("", "v1"));
        assert_eq!(KindRef::new("apps/v1", "ReplicaSet").group_version().unwrap(), ("apps", "v1"));
        assert!(KindRef::new("", "Pod").group_version().is_err());
        assert!(KindRef::new("a/b/c", "Pod").group_version().is_err());
        assert!(KindRef::new("/v1", "Pod").group_version().is_err());
    }

    #[test]
    fn keys_display_with_and_without_namespace() {
        let k = ObjectKey::new(KindRef::new("v1", "Pod"), Some("ns".into()), "p");
        assert_eq!(k.to_string(), "v1/Pod ns/p");
        let k = ObjectKey::new(KindRef::new("v1", "Namespace"), None, "team-a");
        assert_eq!(k.to_string(), "v1/Namespace team-a");
    }
}
