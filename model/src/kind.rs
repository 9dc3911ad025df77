//! [`KindRef`] and [`ObjectKey`]: the names of API types and of objects, as the contract carries
//! them and as host, SDK and CLI print and parse them.
//!
//! The one key syntax of logs, errors, Events and the CLI's `--key` is
//! `<apiVersion>/<kind>/<namespace>/<name>`, or `<apiVersion>/<kind>/<name>` for cluster-scoped
//! objects ([`ObjectKey`]'s `Display` and `FromStr`).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An apiVersion that is neither `version` nor `group/version`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid apiVersion {0:?}: expected `version` or `group/version`")]
pub struct InvalidApiVersion(pub String);

/// An API type: `apps/v1` + `ReplicaSet`, or `v1` + `Pod` for the core group.
///
/// Well-known kinds are constants (the SDK's `kinds`); in a `const`, build one with
/// [`KindRef::from_static`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// `group/version`, or just `version` for the core group.
    pub api_version: Cow<'static, str>,
    /// The kind, e.g. `Pod`.
    pub kind: Cow<'static, str>,
}

impl KindRef {
    /// A kind from owned or borrowed strings.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self { api_version: Cow::Owned(api_version.into()), kind: Cow::Owned(kind.into()) }
    }

    /// A kind from string literals, usable in `const` items.
    pub const fn from_static(api_version: &'static str, kind: &'static str) -> Self {
        Self { api_version: Cow::Borrowed(api_version), kind: Cow::Borrowed(kind) }
    }

    /// `(group, version)`; the core group is `""`.
    pub fn group_version(&self) -> Result<(&str, &str), InvalidApiVersion> {
        match self.api_version.split_once('/') {
            None if !self.api_version.is_empty() => Ok(("", &self.api_version)),
            Some((g, v)) if !g.is_empty() && !v.is_empty() && !v.contains('/') => Ok((g, v)),
            _ => Err(InvalidApiVersion(self.api_version.to_string())),
        }
    }

    /// The API group (`""` for the core group, and for an apiVersion that does not parse).
    pub fn group(&self) -> &str {
        self.api_version.split_once('/').map_or("", |(g, _)| g)
    }

    /// An object key of this kind.
    pub fn key(&self, namespace: Option<&str>, name: impl Into<String>) -> ObjectKey {
        ObjectKey { kind: self.clone(), namespace: namespace.map(str::to_owned), name: name.into() }
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// One object: its kind, namespace (`None` for cluster-scoped kinds) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectKey {
    /// The object's API type.
    pub kind: KindRef,
    /// `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectKey {
    /// A key from its parts.
    pub fn new(kind: KindRef, namespace: Option<&str>, name: impl Into<String>) -> Self {
        kind.key(namespace, name)
    }

    /// The namespace as `Option<&str>`, the form cache reads take.
    pub fn ns(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// A key that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid key {key:?}: {why}; expected <apiVersion>/<kind>/<namespace>/<name> or <apiVersion>/<kind>/<name> \
     (e.g. v1/Pod/default/web, apps/v1/Deployment/shop/web, v1/Namespace/team-a)"
)]
pub struct InvalidKey {
    /// The text given.
    pub key: String,
    /// What is wrong with it.
    pub why: String,
}

impl FromStr for ObjectKey {
    type Err = InvalidKey;

    /// Parse the one key syntax. A first segment that is a Kubernetes version (`v1`, `v2beta1`)
    /// is the core group's apiVersion, otherwise the apiVersion is the first two segments
    /// (`apps/v1`). An empty namespace (`v1/Namespace//team-a`) is a cluster-scoped key.
    fn from_str(s: &str) -> Result<Self, InvalidKey> {
        let bad = |why: String| InvalidKey { key: s.to_owned(), why };
        let mut parts: Vec<&str> = s.split('/').collect();
        let kind_at = if parts.first().is_some_and(|p| is_version(p)) { 1 } else { 2 };
        if parts.len() == kind_at + 3 && parts[kind_at + 1].is_empty() {
            parts.remove(kind_at + 1);
        }
        if let Some(i) = parts.iter().position(|p| p.is_empty()) {
            return Err(bad(format!("segment {} is empty", i + 1)));
        }
        let (namespace, name) = match parts.get(kind_at + 1..).unwrap_or_default() {
            [name] => (None, *name),
            [ns, name] => (Some(*ns), *name),
            _ => return Err(bad(format!("{} segments", parts.len()))),
        };
        Ok(KindRef::new(parts[..kind_at].join("/"), parts[kind_at]).key(namespace, name))
    }
}

/// A Kubernetes API version: `v1`, `v1alpha1`, `v2beta3`.
pub fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else { return false };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let tail = &rest[digits..];
    digits > 0
        && (tail.is_empty()
            || ["alpha", "beta"]
                .iter()
                .any(|p| tail.strip_prefix(p).is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_print_and_parse_in_the_one_syntax() {
        for s in ["v1/Pod/default/web", "apps/v1/Deployment/shop/web", "v1/Namespace/team-a", "rbac.authorization.k8s.io/v1/ClusterRole/x"]
        {
            let key: ObjectKey = s.parse().unwrap();
            assert_eq!(key.to_string(), s);
        }
        let key: ObjectKey = "apps/v1/Deployment/shop/web".parse().unwrap();
        assert_eq!((key.kind.group(), key.ns(), key.name.as_str()), ("apps", Some("shop"), "web"));
        assert_eq!("v1/Namespace//team-a".parse::<ObjectKey>().unwrap().to_string(), "v1/Namespace/team-a");
        for bad in ["", "v1", "v1/Pod", "apps/v1/Deployment", "v1/Pod/a/b/c", "v1/Pod/a/", "/v1/Pod/x"] {
            assert!(bad.parse::<ObjectKey>().is_err(), "{bad}");
        }
    }

    #[test]
    fn versions() {
        for v in ["v1", "v1alpha1", "v2beta3", "v10"] {
            assert!(is_version(v), "{v}");
        }
        for v in ["apps", "v", "vbeta1", "v1gamma1", "v1alpha", "1"] {
            assert!(!is_version(v), "{v}");
        }
    }

    #[test]
    fn group_versions() {
        assert_eq!(KindRef::from_static("v1", "Pod").group_version(), Ok(("", "v1")));
        assert_eq!(KindRef::new("apps/v1", "Deployment").group_version(), Ok(("apps", "v1")));
        assert!(KindRef::new("a/b/c", "X").group_version().is_err());
        assert!(KindRef::new("", "X").group_version().is_err());
        assert!(KindRef::new("/v1", "X").group_version().is_err());
    }
}
