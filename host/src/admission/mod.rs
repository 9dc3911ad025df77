//! Admission: what every action of a plugin's outcome must pass before **any** of it is sent.
//!
//! For each action, in order:
//! 1. its [`Target`] (the one rule in `wasmloop-model`: apiVersion, kind, namespace, name or
//!    generateName, with path-segment syntax) — else the action is invalid;
//! 2. the kind's scope from discovery: a namespace on a cluster-scoped kind, or none on a
//!    namespaced kind, is invalid (so a namespace-restricted grant never reaches a cluster-scoped
//!    object such as a Namespace or a ClusterRoleBinding);
//! 3. the plugin's [`Grants`];
//! 4. the [`Protected`] objects no grant can unlock;
//! 5. the body: every `ownerReference` points at an object the plugin may read, with the uid the
//!    cache holds; an Event's `regarding` is an object the plugin may read.
//!
//! One refused action refuses the whole outcome; the [`Refusal`] names the action, its target
//! and the rule.

mod protected;

pub use protected::{HostObjects, Protected, Rule};

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use wasmloop_model::{Target, TargetError};

use crate::actions::Action;
use crate::cache::CacheRead;
use crate::grants::{self, Grants, Verb};
use crate::kinds::{self, KindRef, KindResolver};
use protected::kind_of;

/// Why one action was refused.
#[derive(Debug, thiserror::Error)]
pub enum Reason {
    #[error("invalid action: {0}")]
    InvalidTarget(#[from] TargetError),
    #[error("{0}")]
    Kind(#[from] kinds::Error),
    #[error("{0}")]
    Grant(#[from] grants::Error),
    #[error("{0}")]
    Protected(#[from] Rule),
    #[error("ownerReferences[{index}]: {why}")]
    OwnerReference { index: usize, why: String },
    #[error("an Event may only be about an object the plugin may read: {0}")]
    EventRegarding(String),
}

impl std::error::Error for Rule {}

/// An outcome refused because of its action `index`.
#[derive(Debug, thiserror::Error)]
#[error("action {index} ({verb} {target}) refused, no action of this reconcile was executed: {reason}")]
pub struct Refusal {
    pub index: usize,
    pub verb: &'static str,
    /// The target as far as it could be read.
    pub target: String,
    pub reason: Reason,
}

pub type Result<T, E = Refusal> = std::result::Result<T, E>;

/// Where the scope (namespaced or cluster-scoped) of a kind comes from.
#[derive(Clone)]
pub enum Scopes {
    /// API discovery (the host).
    Discovery(KindResolver),
    /// The built-in table of Kubernetes kinds; other kinds are taken as the action states them
    /// (offline runs, where no API server answers).
    Builtin,
    /// The built-in table, then these kinds by (API group, kind), whatever the version:
    /// `true` = namespaced. Offline runs given CustomResourceDefinitions (their `spec.scope`),
    /// which the host would learn from discovery.
    Given(Arc<BTreeMap<(String, String), bool>>),
}

impl Scopes {
    async fn namespaced(&self, kind: &KindRef) -> Result<Option<bool>, kinds::Error> {
        match self {
            Scopes::Discovery(resolver) => Ok(Some(resolver.resolve(kind).await?.namespaced)),
            Scopes::Builtin => Ok(kinds::builtin_namespaced(kind)),
            Scopes::Given(given) => Ok(kinds::builtin_namespaced(kind).or_else(|| {
                let (group, _) = kind.group_version().ok()?;
                given.get(&(group.to_string(), kind.kind.clone())).copied()
            })),
        }
    }
}

/// The host-wide admission policy (scopes and protected objects); grants are per plugin.
#[derive(Clone)]
pub struct Admission {
    scopes: Scopes,
    protected: Protected,
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission").field("protected", &self.protected).finish_non_exhaustive()
    }
}

impl Admission {
    pub fn new(scopes: Scopes, protected: Protected) -> Self {
        Self { scopes, protected }
    }

    /// Offline: built-in scopes, only the protection rules that need no cluster.
    pub fn offline() -> Self {
        Self::new(Scopes::Builtin, Protected::minimal())
    }

    pub fn protected(&self) -> &Protected {
        &self.protected
    }

    /// Check every action of an outcome; `cache` is what the plugin may read.
    pub async fn check(&self, grants: &Grants, actions: &[Action], cache: &dyn CacheRead) -> Result<()> {
        for (index, action) in actions.iter().enumerate() {
            let refuse = |target: String, reason: Reason| Refusal { index, verb: action.verb(), target, reason };
            let target = action.target().map_err(|e| refuse(describe_unchecked(action), e.into()))?;
            self.check_one(grants, action, &target, cache).await.map_err(|reason| refuse(target.to_string(), reason))?;
        }
        Ok(())
    }

    async fn check_one(&self, grants: &Grants, action: &Action, target: &Target, cache: &dyn CacheRead) -> Result<(), Reason> {
        let kind = kind_of(target);
        if let Some(namespaced) = self.scopes.namespaced(&kind).await? {
            target.check_scope(namespaced)?;
        }
        grants.check_target(Verb::of(action), target)?;
        self.protected.check(action, target).await?;
        match action {
            Action::Create { object } | Action::Apply { object } => self.check_owners(grants, target, object, cache).await,
            // What a patch writes is checked as a body: the owner references it adds.
            Action::Patch { .. } => match action.written() {
                Some(written) => self.check_owners(grants, target, written.as_ref(), cache).await,
                None => Ok(()),
            },
            Action::Event { .. } => check_regarding(grants, target),
            Action::Delete { .. } | Action::UpdateStatus { .. } => Ok(()),
        }
    }

    /// Every owner reference must name an object the plugin may read, with its cached uid.
    async fn check_owners(&self, grants: &Grants, target: &Target, object: &Value, cache: &dyn CacheRead) -> Result<(), Reason> {
        // Absent, or null in a merge patch (removing them all), adds no owner.
        let Some(refs) = object.pointer("/metadata/ownerReferences").filter(|r| !r.is_null()) else { return Ok(()) };
        let Some(refs) = refs.as_array() else {
            return Err(Reason::OwnerReference { index: 0, why: "ownerReferences must be a list".into() });
        };
        for (index, r) in refs.iter().enumerate() {
            let bad = |why: String| Reason::OwnerReference { index, why };
            let field = |f: &str| r.get(f).and_then(Value::as_str).filter(|s| !s.is_empty());
            let (Some(api_version), Some(kind), Some(name), Some(uid)) = (field("apiVersion"), field("kind"), field("name"), field("uid"))
            else {
                return Err(bad("apiVersion, kind, name and uid are required".into()));
            };
            let owner = KindRef::new(api_version, kind);
            // Owners are in the dependent's namespace, or cluster-scoped.
            let namespace = match self.scopes.namespaced(&owner).await? {
                Some(false) => None,
                _ if target.namespace.is_none() => None,
                _ => target.namespace.as_deref(),
            };
            let described = match namespace {
                Some(ns) => format!("{owner} {ns}/{name}"),
                None => format!("{owner} {name}"),
            };
            if !grants.allows_read(&owner, namespace) {
                return Err(bad(format!("owner {described}: the plugin may not read it")));
            }
            match cache.get(&owner, namespace, name) {
                Ok(Some(cached)) if cached.uid() == uid => {}
                Ok(Some(cached)) => {
                    return Err(bad(format!("owner {described} has uid {} in the cache, the reference says {uid}", cached.uid())));
                }
                Ok(None) => return Err(bad(format!("owner {described} is not in the plugin's cache"))),
                Err(e) => return Err(bad(format!("owner {described}: {e}"))),
            }
        }
        Ok(())
    }
}

fn check_regarding(grants: &Grants, target: &Target) -> Result<(), Reason> {
    let kind = kind_of(target);
    if grants.allows_read(&kind, target.namespace.as_deref()) {
        Ok(())
    } else {
        Err(Reason::EventRegarding(format!("no read grant on {target}")))
    }
}

/// A best-effort description of an action whose target is invalid.
fn describe_unchecked(action: &Action) -> String {
    match action {
        Action::Create { object } | Action::Apply { object } => {
            let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("?");
            format!("{}/{} {}", s("/apiVersion"), s("/kind"), s("/metadata/name"))
        }
        Action::Delete { key, .. }
        | Action::UpdateStatus { key, .. }
        | Action::Event { regarding: key, .. }
        | Action::Patch { key, .. } => key.to_string(),
    }
}
