//! Admission: what every action of a plugin's outcome must pass before **any** of it is sent,
//! and the only way to an [`Admitted`] outcome, which is all the executor takes.
//!
//! For each action, in order:
//! 1. its [`Target`] (the one rule in `wasmloop-model`: apiVersion, kind, namespace, name or
//!    generateName, with path-segment syntax) — else the action is invalid;
//! 2. the kind's scope from discovery: a namespace on a cluster-scoped kind, or none on a
//!    namespaced kind, is invalid (so a namespace-restricted grant never reaches a cluster-scoped
//!    object such as a Namespace or a ClusterRoleBinding);
//! 3. the plugin's [`Grants`] for the action's [`Verb`];
//! 4. the [`Protected`] objects no grant can unlock, judged by the **object the write will
//!    produce** ([`result`]): nothing in the host's namespaces, no plugin label, no RBAC that
//!    binds or extends an identity the host holds or acts as;
//! 5. the body: every `ownerReference` a write adds points at an object the plugin may read,
//!    with the uid the cache holds; an Event's `regarding` is an object the plugin may read.
//!
//! One refused action refuses the whole outcome; the [`Refusal`] names the action, its target
//! and the rule. Where a result cannot be computed the action is not sent either: it is
//! [`Error::Unverifiable`] (retried with backoff), or [`Error::Conflict`] when the plugin's view
//! was older than the object the result was computed on.
//!
//! What admission costs in API requests: discovery once per kind (cached), and for server-side
//! applies of RBAC objects one dry run each (taken from the plugin's API budget). RBAC objects
//! are read from shared informers, never listed per action.

#[cfg(test)]
mod fuzz;
mod owners;
mod protected;
mod rbac;
pub mod result;

pub use protected::{HostObjects, Protected, Rule};

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use wasmloop_model::{Target, TargetError, Verb};

use crate::actions::{Action, Deletion, Patch, Planned, Preconditions};
use crate::cache::CacheRead;
use crate::grants::{self, Grants};
use crate::kinds::{self, KindRef, KindResolver, ResolvedKind};
use crate::queue::TokenBucket;
use result::Guard;

/// Why one action was refused: the rule it violates (not to be confused with
/// [`crate::reconciler::Reason`], why a key was queued).
#[derive(Debug, thiserror::Error)]
pub enum Violation {
    /// The action's target is malformed (no name, a bad kind, ...).
    #[error("invalid action: {0}")]
    InvalidTarget(#[from] TargetError),
    /// The action's kind does not resolve.
    #[error("{0}")]
    Kind(#[from] kinds::Error),
    /// No grant of the plugin covers the action.
    #[error("{0}")]
    Grant(#[from] grants::Error),
    /// The action would touch an object the host protects.
    #[error("{0}")]
    Protected(#[from] Rule),
    /// An owner reference the action sets is not allowed.
    #[error("ownerReferences[{index}]: {why}")]
    OwnerReference {
        /// Its position in `metadata.ownerReferences`.
        index: usize,
        /// Why it is not allowed.
        why: String,
    },
    /// An Event about an object the plugin may not read.
    #[error("an Event may only be about an object the plugin may read: {0}")]
    EventRegarding(String),
    /// The write cannot succeed as given (a patch that does not apply, for one).
    #[error("{0}")]
    Result(#[from] result::Invalid),
}

/// An outcome refused because of its action `index`.
#[derive(Debug, thiserror::Error)]
#[error("action {index} ({verb} {target}) refused, no action of this reconcile was executed: {reason}")]
pub struct Refusal {
    /// The action's position in the outcome.
    pub index: usize,
    /// The action's verb.
    pub verb: Verb,
    /// The target as far as it could be read.
    pub target: String,
    /// Why it was refused.
    pub reason: Violation,
}

/// Why an outcome was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An action breaks a rule: not retried until the object changes.
    #[error(transparent)]
    Refused(Box<Refusal>),
    /// What an action would produce could not be computed now (a dry run or the RBAC cache
    /// failed): nothing was sent, and the key is retried with backoff (fail closed).
    #[error("action {index} ({verb} {target}) not sent, no action of this reconcile was executed: {why}")]
    Unverifiable {
        /// The action's position in the outcome.
        index: usize,
        /// The action's verb.
        verb: Verb,
        /// Its target, as far as it could be read.
        target: String,
        /// Why the result could not be computed.
        why: String,
    },
    /// The plugin's precondition names an older version than the one its result was checked
    /// on: its view was stale; reconciled again.
    #[error("action {index} ({verb} {target}): conflict: {why}")]
    Conflict {
        /// The action's position in the outcome.
        index: usize,
        /// The action's verb.
        verb: Verb,
        /// Its target, as far as it could be read.
        target: String,
        /// What changed since the plugin read it.
        why: String,
    },
}

impl Error {
    /// The verb of the action that stopped the outcome (for metrics).
    pub fn verb(&self) -> Verb {
        match self {
            Error::Refused(r) => r.verb,
            Error::Unverifiable { verb, .. } | Error::Conflict { verb, .. } => *verb,
        }
    }
}

/// A result whose error is an outcome not admitted.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    async fn resolve(&self, kind: &KindRef) -> Result<Option<ResolvedKind>, kinds::Error> {
        match self {
            Scopes::Discovery(resolver) => Ok(Some(resolver.resolve(kind).await?)),
            Scopes::Builtin | Scopes::Given(_) => Ok(None),
        }
    }

    async fn namespaced(&self, kind: &KindRef) -> Result<Option<bool>, kinds::Error> {
        match self {
            Scopes::Discovery(resolver) => Ok(Some(resolver.resolve(kind).await?.namespaced)),
            Scopes::Builtin => Ok(kinds::builtin_namespaced(kind)),
            Scopes::Given(given) => Ok(kinds::builtin_namespaced(kind).or_else(|| {
                let (group, _) = kind.group_version().ok()?;
                given.get(&(group.to_string(), kind.kind.to_string())).copied()
            })),
        }
    }
}

/// What one plugin brings to the admission of its outcome.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// Its grants.
    pub grants: &'a Grants,
    /// What it may read (owners and Event subjects must be there).
    pub cache: &'a dyn CacheRead,
    /// The client its writes go out with (as its own identity): dry runs of server-side applies
    /// are sent with it. `None` offline (then results that need the server are not computed).
    pub client: Option<&'a kube::Client>,
    /// Its name: the field manager of its applies (and their dry runs).
    pub manager: &'a str,
    /// Its API budget: each request admission sends takes a token.
    pub budget: Option<&'a TokenBucket>,
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

/// One admitted action: the planned action, the kind discovery resolved for it and what its
/// write must carry, for the executor to send as is.
#[derive(Clone, Debug)]
pub struct AdmittedAction {
    planned: Planned,
    kind: Option<ResolvedKind>,
    guard: Guard,
}

impl AdmittedAction {
    /// `planned`, admitted with no check and no guard, its kind `kind` (unit tests of what
    /// comes after admission).
    #[cfg(test)]
    pub(crate) fn unchecked(planned: Planned, kind: Option<ResolvedKind>) -> Self {
        Self { planned, kind, guard: Guard::None }
    }

    /// The action, with its target and verb.
    pub fn planned(&self) -> &Planned {
        &self.planned
    }

    /// The action as the plugin returned it.
    pub fn action(&self) -> &Action {
        self.planned.action()
    }

    /// The object it touches.
    pub fn target(&self) -> &Target {
        self.planned.target()
    }

    /// The grant it needed.
    pub fn verb(&self) -> Verb {
        self.planned.verb()
    }

    /// The kind as discovery resolved it (`None` offline).
    pub fn kind(&self) -> Option<&ResolvedKind> {
        self.kind.as_ref()
    }

    /// The preconditions to send: the plugin's, plus the resourceVersion its result was
    /// checked on (admission made sure they agree).
    pub fn preconditions(&self) -> Preconditions {
        let mut pre = match self.action() {
            Action::Delete(Deletion { preconditions, .. }) | Action::Patch(Patch { preconditions, .. }) => preconditions.clone(),
            _ => Preconditions::default(),
        };
        if let Guard::ResourceVersion(rv) = &self.guard {
            pre.resource_version = Some(rv.clone());
        }
        pre
    }

    /// The resourceVersion a server-side apply must carry (its result was checked on it).
    pub fn apply_resource_version(&self) -> Option<&str> {
        match (self.action(), &self.guard) {
            (Action::Apply(_), Guard::ResourceVersion(rv)) => Some(rv),
            _ => None,
        }
    }
}

/// An outcome every action of which passed admission. Only [`Admission::admit`] makes one.
#[derive(Clone, Debug, Default)]
pub struct Admitted {
    actions: Vec<AdmittedAction>,
}

impl Admitted {
    /// The actions, in the plugin's order.
    pub fn actions(&self) -> &[AdmittedAction] {
        &self.actions
    }

    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

impl Admission {
    /// The policy: scopes from `scopes`, objects no plugin may write from `protected`.
    pub fn new(scopes: Scopes, protected: Protected) -> Self {
        Self { scopes, protected }
    }

    /// Offline: built-in scopes, only the protection rules that need no cluster.
    pub fn offline() -> Self {
        Self::new(Scopes::Builtin, Protected::minimal())
    }

    /// The protected objects.
    pub fn protected(&self) -> &Protected {
        &self.protected
    }

    /// Admit every action of an outcome, or none.
    pub async fn admit(&self, ctx: Context<'_>, actions: Vec<Planned>) -> Result<Admitted> {
        let mut admitted = Vec::with_capacity(actions.len());
        for (index, action) in actions.into_iter().enumerate() {
            admitted.push(self.admit_one(ctx, index, action).await?);
        }
        Ok(Admitted { actions: admitted })
    }

    async fn admit_one(&self, ctx: Context<'_>, index: usize, planned: Planned) -> Result<AdmittedAction> {
        let (verb, target, action) = (planned.verb(), planned.target(), planned.action());
        let refuse = |target: String, reason: Violation| Error::Refused(Box::new(Refusal { index, verb, target, reason }));
        let shown = target.to_string();
        let kind = &target.kind;
        let resolved = self.scopes.resolve(kind).await.map_err(|e| refuse(shown.clone(), e.into()))?;
        let namespaced = match &resolved {
            Some(r) => Some(r.namespaced),
            None => self.scopes.namespaced(kind).await.map_err(|e| refuse(shown.clone(), e.into()))?,
        };
        if let Some(namespaced) = namespaced {
            target.check_scope(namespaced).map_err(|e| refuse(shown.clone(), e.into()))?;
        }
        ctx.grants.check_target(verb, target).map_err(|e| refuse(shown.clone(), e.into()))?;
        if verb == Verb::Event {
            // An Event writes nothing of its subject: only who it is about is checked.
            check_regarding(ctx.grants, kind, target).map_err(|e| refuse(shown.clone(), e))?;
            return Ok(AdmittedAction { planned, kind: resolved, guard: Guard::None });
        }
        self.protected.check_target(target).map_err(|e| refuse(shown.clone(), e.into()))?;
        let unverifiable = |why: String| Error::Unverifiable { index, verb, target: shown.clone(), why };
        let stores =
            if rbac::is_rbac(target) { self.protected.rbac_stores().await.map_err(|e| unverifiable(e.to_string()))? } else { None };
        let failed = |e| match e {
            result::Error::Invalid(invalid) => refuse(shown.clone(), invalid.into()),
            result::Error::Unverifiable(why) => Error::Unverifiable { index, verb, target: shown.clone(), why },
            result::Error::Conflict(why) => Error::Conflict { index, verb, target: shown.clone(), why },
        };
        let mut effect = result::effect(stores, &planned).map_err(failed)?;
        self.protected.check_effect(stores, target, &effect).map_err(|e| refuse(shown.clone(), e.into()))?;
        if result::needs_dry_run(stores, action, target) {
            effect = result::dry_run(ctx, action, target, resolved.as_ref(), effect.before).await.map_err(failed)?;
            self.protected.check_effect(stores, target, &effect).map_err(|e| refuse(shown.clone(), e.into()))?;
        }
        owners::check_added(&self.scopes, ctx, target, &effect).await.map_err(|e| refuse(shown, e))?;
        let guard = effect.guard;
        Ok(AdmittedAction { planned, kind: resolved, guard })
    }
}

fn check_regarding(grants: &Grants, kind: &KindRef, target: &Target) -> Result<(), Violation> {
    if grants.allows_read(kind, target.namespace.as_deref()) {
        Ok(())
    } else {
        Err(Violation::EventRegarding(format!("no read grant on {target}")))
    }
}
