//! What a plugin may read and do: the admin's grants from the plugin manifest (`plugin.yaml`).
//!
//! ```yaml
//! grants:
//!   - kinds: ["wasmloop.dev/v1alpha1/PodSet"]       # "<apiVersion>/<Kind>", core: "v1/Pod"; "*" = any
//!     verbs: [read, update-status, event]
//!   - kinds: ["v1/Pod"]
//!     verbs: [read, create, delete]
//!     namespaces: ["shop"]                           # optional; absent = all namespaces
//! ```
//!
//! A namespace-restricted grant never covers cluster-scoped objects (namespace `None`), nor reads
//! across all namespaces: such reads are filtered by the plugin runtime to the granted namespaces.
//!
//! Two more verbs are not actions but rights the API server checks when a plugin writes RBAC:
//! `bind` (make RoleBindings and ClusterRoleBindings to a role whose permissions its account does
//! not hold) and `escalate` (write a role with such permissions). They are given only on named
//! roles and only by a grant of their own:
//!
//! ```yaml
//!   - kinds: ["rbac.authorization.k8s.io/v1/ClusterRole"]
//!     verbs: [bind]
//!     names: ["secret-reader"]                      # the roles' resourceNames
//! ```
//!
//! The host never sends them (no action needs them; `*` does not include them): `wasmloop pack
//! --rbac` turns them into RBAC rules with those `resourceNames` on the plugin's account, and
//! admission's identity rules still refuse any binding of an identity of the host's namespaces.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use wasmloop_model::Target;

use crate::kinds::KindRef;
use crate::reconciler::ReconcilerSpec;

/// The RBAC API group, whose Roles and ClusterRoles `bind` and `escalate` are on.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Errors parsing grants or checking something against them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An action, or a declared read, that no grant covers.
    #[error("plugin {plugin} may not {verb} {target}: {reason}")]
    Denied {
        /// The plugin's name.
        plugin: String,
        /// What was asked.
        verb: Verb,
        /// The action's target (kind, namespace, name).
        target: String,
        /// Why no grant covers it.
        reason: String,
    },
    /// A plugin declares reading a kind it has no read grant for.
    #[error(
        "plugin {plugin} declares reading {kind} ({role}) but has no read grant for it: \
         add `{{kinds: [\"{kind}\"], verbs: [read]}}` to its grants"
    )]
    MissingRead {
        /// The plugin's name.
        plugin: String,
        /// The kind it declares reading.
        kind: KindRef,
        /// How it reads it (reconciled, watched, indexed, ...).
        /// How it reads it: `reconciles`, `watches` or `indexes`.
        role: &'static str,
    },
    /// A grant's kind is neither `<apiVersion>/<Kind>` nor `*`.
    #[error("invalid kind {0:?} in grants: expected \"<apiVersion>/<Kind>\" (e.g. \"v1/Pod\", \"apps/v1/ReplicaSet\") or \"*\"")]
    InvalidKind(String),
    /// A grant's verb is not one of the grant verbs.
    #[error("invalid verb {0:?} in grants: expected one of read, create, apply, patch, delete, update-status, event, *, bind, escalate")]
    InvalidVerb(String),
    /// A grant that gives `bind` or `escalate` other than on named roles, alone.
    #[error("invalid grant ({0}): {1}")]
    InvalidRoleGrant(String, &'static str),
    /// The manifest's `grants:` does not parse.
    #[error("invalid grants YAML: {0}")]
    Yaml(String),
}

/// A result whose error is a grant's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use wasmloop_model::Verb;

/// A right on roles that no action uses: the API server checks it when the plugin's account
/// writes RBAC (its escalation prevention), so only `wasmloop pack --rbac` turns it into a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RoleVerb {
    /// Bind the named roles (RoleBindings, ClusterRoleBindings) without holding their rights.
    Bind,
    /// Write the named roles with rights the account does not hold.
    Escalate,
}

impl RoleVerb {
    /// The verb as written in `plugin.yaml` and in RBAC rules.
    pub fn as_str(self) -> &'static str {
        match self {
            RoleVerb::Bind => "bind",
            RoleVerb::Escalate => "escalate",
        }
    }
}

/// The verbs of one grant: one [`Verb`], `*` for every one of them, or a [`RoleVerb`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VerbPattern {
    /// `*`: every [`Verb`] (not `bind` or `escalate`, which are given only by name).
    Any,
    /// One verb.
    Exact(Verb),
    /// `bind` or `escalate`, on the grant's named roles.
    Role(RoleVerb),
}

impl VerbPattern {
    fn covers(self, wanted: Verb) -> bool {
        match self {
            VerbPattern::Any => true,
            VerbPattern::Exact(v) => v == wanted,
            VerbPattern::Role(_) => false,
        }
    }
}

impl fmt::Display for VerbPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbPattern::Any => f.write_str("*"),
            VerbPattern::Exact(v) => v.fmt(f),
            VerbPattern::Role(v) => f.write_str(v.as_str()),
        }
    }
}

impl FromStr for VerbPattern {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "*" => Ok(VerbPattern::Any),
            "bind" => Ok(VerbPattern::Role(RoleVerb::Bind)),
            "escalate" => Ok(VerbPattern::Role(RoleVerb::Escalate)),
            other => other.parse().map(VerbPattern::Exact).map_err(|_| Error::InvalidVerb(other.to_owned())),
        }
    }
}

impl Serialize for VerbPattern {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for VerbPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// A kind in a grant: one `<apiVersion>/<Kind>`, or `*` for any kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KindPattern {
    /// `*`: every kind.
    Any,
    /// This kind only.
    Exact(KindRef),
}

impl KindPattern {
    /// Whether `kind` is one the pattern names.
    pub fn matches(&self, kind: &KindRef) -> bool {
        match self {
            KindPattern::Any => true,
            KindPattern::Exact(k) => k == kind,
        }
    }
}

impl fmt::Display for KindPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KindPattern::Any => f.write_str("*"),
            KindPattern::Exact(k) => k.fmt(f),
        }
    }
}

impl FromStr for KindPattern {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        if s == "*" {
            return Ok(KindPattern::Any);
        }
        let invalid = || Error::InvalidKind(s.to_owned());
        let (api_version, kind) = s.rsplit_once('/').ok_or_else(invalid)?;
        let kind_ok = kind.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) && kind.chars().all(|c| c.is_ascii_alphanumeric());
        let k = KindRef::new(api_version, kind);
        if !kind_ok || k.group_version().is_err() {
            return Err(invalid());
        }
        Ok(KindPattern::Exact(k))
    }
}

impl Serialize for KindPattern {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for KindPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// One rule: these verbs on these kinds, optionally only in these namespaces (and, for `bind` and
/// `escalate`, only on these names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, try_from = "RawGrant")]
pub struct Grant {
    /// The kinds the rule covers.
    pub kinds: Vec<KindPattern>,
    /// The verbs it allows on them.
    pub verbs: Vec<VerbPattern>,
    /// `None` = every namespace and cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    /// The roles (`resourceNames`) a `bind` or `escalate` grant is on; required there, refused
    /// on any other grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}

/// A grant as written, before [`Grant::check`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawGrant {
    kinds: Vec<KindPattern>,
    verbs: Vec<VerbPattern>,
    #[serde(default)]
    namespaces: Option<Vec<String>>,
    #[serde(default)]
    names: Option<Vec<String>>,
}

impl TryFrom<RawGrant> for Grant {
    type Error = Error;
    fn try_from(raw: RawGrant) -> Result<Self> {
        let grant = Grant { kinds: raw.kinds, verbs: raw.verbs, namespaces: raw.namespaces, names: raw.names };
        grant.check()?;
        Ok(grant)
    }
}

impl Grant {
    /// `bind` and `escalate` only on named Roles or ClusterRoles, in a grant of their own (so
    /// `names` never narrows, or seems to narrow, an action verb).
    fn check(&self) -> Result<()> {
        let role_verbs = self.verbs.iter().filter(|v| matches!(v, VerbPattern::Role(_))).count();
        let what = || self.verbs.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        if role_verbs == 0 {
            if self.names.is_some() {
                return Err(Error::InvalidRoleGrant(what(), "`names` is only for `bind` and `escalate`"));
            }
            return Ok(());
        }
        if role_verbs != self.verbs.len() {
            return Err(Error::InvalidRoleGrant(
                what(),
                "`bind` and `escalate` take a grant of their own, on named roles: no other verb beside them",
            ));
        }
        if self.names.as_ref().is_none_or(|n| n.is_empty() || n.iter().any(String::is_empty)) {
            return Err(Error::InvalidRoleGrant(what(), "`bind` and `escalate` need `names`: the roles they are on (resourceNames)"));
        }
        let roles = |k: &KindPattern| match k {
            KindPattern::Exact(k) => k.group() == RBAC_GROUP && matches!(&*k.kind, "Role" | "ClusterRole"),
            KindPattern::Any => false,
        };
        if self.kinds.is_empty() || !self.kinds.iter().all(roles) {
            return Err(Error::InvalidRoleGrant(
                what(),
                "`bind` and `escalate` are on kinds rbac.authorization.k8s.io/v1/Role or .../ClusterRole only",
            ));
        }
        Ok(())
    }

    /// The `bind` and `escalate` this grant gives (on [`Grant::names`]).
    pub fn role_verbs(&self) -> impl Iterator<Item = RoleVerb> + '_ {
        self.verbs.iter().filter_map(|v| match v {
            VerbPattern::Role(r) => Some(*r),
            _ => None,
        })
    }

    fn covers_kind_verb(&self, kind: &KindRef, verb: Verb) -> bool {
        self.kinds.iter().any(|k| k.matches(kind)) && self.verbs.iter().any(|v| v.covers(verb))
    }

    /// `namespace: None` = a cluster-scoped object, or all namespaces at once.
    fn covers_namespace(&self, namespace: Option<&str>) -> bool {
        match (&self.namespaces, namespace) {
            (None, _) => true,
            (Some(list), Some(ns)) => list.iter().any(|n| n == ns),
            (Some(_), None) => false,
        }
    }
}

/// Where a reader may look for a kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadScope {
    /// No read grant on the kind.
    None,
    /// Every namespace and cluster-scoped objects.
    All,
    /// Only objects in these namespaces.
    Namespaces(Vec<String>),
}

impl ReadScope {
    /// Whether an object in `namespace` (None = cluster-scoped) is visible.
    pub fn allows(&self, namespace: Option<&str>) -> bool {
        match (self, namespace) {
            (ReadScope::All, _) => true,
            (ReadScope::Namespaces(list), Some(ns)) => list.iter().any(|n| n == ns),
            _ => false,
        }
    }
}

/// A plugin's grants. Deserialises from the list under `grants:`; [`Grants::from_yaml`] reads a
/// whole manifest. The plugin name (for messages) is set with [`Grants::named`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Grants {
    rules: Vec<Grant>,
    #[serde(skip)]
    plugin: String,
}

impl Grants {
    /// `plugin`'s grants: these rules (a verb on a target is allowed if any rule allows it).
    pub fn new(plugin: impl Into<String>, rules: Vec<Grant>) -> Self {
        Self { rules, plugin: plugin.into() }
    }

    /// Everything on every kind (native reconcilers, tests).
    pub fn all() -> Self {
        Self::new("*", vec![Grant { kinds: vec![KindPattern::Any], verbs: vec![VerbPattern::Any], namespaces: None, names: None }])
    }

    /// Nothing at all.
    pub fn none(plugin: impl Into<String>) -> Self {
        Self::new(plugin, Vec::new())
    }

    /// Parse the `grants:` key of a manifest (other keys are ignored; a missing key = no grants).
    pub fn from_yaml(plugin: impl Into<String>, yaml: &str) -> Result<Self> {
        #[derive(Deserialize)]
        struct Doc {
            #[serde(default)]
            grants: Grants,
        }
        let doc: Doc = serde_saphyr::from_str(yaml).map_err(|e| Error::Yaml(e.to_string()))?;
        Ok(doc.grants.named(plugin))
    }

    /// The same grants, reporting `plugin` in messages.
    pub fn named(mut self, plugin: impl Into<String>) -> Self {
        self.plugin = plugin.into();
        self
    }

    /// The plugin the grants are for, as messages name it.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// The rules, as given.
    pub fn rules(&self) -> &[Grant] {
        &self.rules
    }

    /// Whether objects of `kind` in `namespace` may be read (`None`: cluster-scoped, or all
    /// namespaces at once).
    pub fn allows_read(&self, kind: &KindRef, namespace: Option<&str>) -> bool {
        self.allows(Verb::Read, kind, namespace)
    }

    /// Check a read of `kind` in `namespace` (`None`: cluster-scoped or all namespaces),
    /// explaining a refusal.
    pub fn check_read(&self, kind: &KindRef, namespace: Option<&str>) -> Result<()> {
        self.check(Verb::Read, kind, namespace, None)
    }

    /// Where objects of `kind` may be read.
    pub fn read_scope(&self, kind: &KindRef) -> ReadScope {
        let mut namespaces: Vec<String> = Vec::new();
        let mut any = false;
        for g in self.rules.iter().filter(|g| g.covers_kind_verb(kind, Verb::Read)) {
            match &g.namespaces {
                None => return ReadScope::All,
                Some(list) => {
                    any = true;
                    for ns in list {
                        if !namespaces.contains(ns) {
                            namespaces.push(ns.clone());
                        }
                    }
                }
            }
        }
        if any { ReadScope::Namespaces(namespaces) } else { ReadScope::None }
    }

    /// Whether `verb` on `kind` in `namespace` is granted.
    pub fn allows(&self, verb: Verb, kind: &KindRef, namespace: Option<&str>) -> bool {
        self.rules.iter().any(|g| g.covers_kind_verb(kind, verb) && g.covers_namespace(namespace))
    }

    /// Check `verb` on `target`, explaining a refusal.
    fn check(&self, verb: Verb, kind: &KindRef, namespace: Option<&str>, name: Option<&str>) -> Result<()> {
        if self.allows(verb, kind, namespace) {
            return Ok(());
        }
        let on_kind: Vec<&Grant> = self.rules.iter().filter(|g| g.kinds.iter().any(|k| k.matches(kind))).collect();
        let with_verb: Vec<&Grant> = on_kind.iter().copied().filter(|g| g.verbs.iter().any(|v| v.covers(verb))).collect();
        let reason = if on_kind.is_empty() {
            format!("no grant covers kind {kind}")
        } else if with_verb.is_empty() {
            format!("no grant for verb {verb}")
        } else {
            let mut granted: Vec<&str> = with_verb.iter().flat_map(|g| g.namespaces.iter().flatten()).map(String::as_str).collect();
            granted.sort_unstable();
            granted.dedup();
            format!("{verb} on {kind} is granted only in namespaces {}", granted.join(", "))
        };
        let mut target = kind.to_string();
        if let Some(name) = name {
            target.push(' ');
            target.push_str(name);
        }
        match namespace {
            Some(ns) => target.push_str(&format!(" in namespace {ns}")),
            None if name.is_some() => target.push_str(" (cluster-scoped)"),
            None => target.push_str(" across all namespaces"),
        }
        Err(Error::Denied { plugin: self.plugin_label().to_owned(), verb, target, reason })
    }

    fn plugin_label(&self) -> &str {
        if self.plugin.is_empty() { "(unnamed)" } else { &self.plugin }
    }

    /// Check `verb` on `target`. A generateName target is checked by its prefix.
    pub fn check_target(&self, verb: Verb, target: &Target) -> Result<()> {
        self.check(verb, &target.kind, target.namespace.as_deref(), Some(&target.display_name()))
    }

    /// Check that every kind the reconciler declares reading is readable (in some namespace).
    pub fn check_spec(&self, spec: &ReconcilerSpec) -> Result<()> {
        let plugin = if self.plugin.is_empty() { spec.name.clone() } else { self.plugin.clone() };
        let roles = std::iter::once((&spec.reconciles, "reconciles"))
            .chain(spec.watches.iter().map(|w| (&w.kind, "watches")))
            .chain(spec.indexes.iter().map(|i| (&i.kind, "indexes")));
        for (kind, role) in roles {
            if self.read_scope(kind) == ReadScope::None {
                return Err(Error::MissingRead { plugin, kind: kind.clone(), role });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconciler::{Mapping, WatchSpec};
    use serde_json::json;

    const YAML: &str = r#"
name: podset
grants:
  - kinds: ["wasmloop.dev/v1alpha1/PodSet"]
    verbs: [read, update-status, event]
  - kinds: ["v1/Pod"]
    verbs: [read, create, delete]
    namespaces: ["shop"]
"#;

    fn podset() -> KindRef {
        KindRef::new("wasmloop.dev/v1alpha1", "PodSet")
    }
    fn pod() -> KindRef {
        KindRef::new("v1", "Pod")
    }
    fn grants() -> Grants {
        Grants::from_yaml("podset", YAML).unwrap()
    }

    #[test]
    fn parses_manifest_grants() {
        let g = grants();
        assert_eq!(g.plugin(), "podset");
        assert_eq!(g.rules().len(), 2);
        assert_eq!(g.rules()[0].kinds, vec![KindPattern::Exact(podset())]);
        assert_eq!(g.rules()[0].verbs, [Verb::Read, Verb::UpdateStatus, Verb::Event].map(VerbPattern::Exact).to_vec());
        assert_eq!(g.rules()[1].namespaces, Some(vec!["shop".to_string()]));
        assert_eq!(Grants::from_yaml("x", "name: x\n").unwrap().rules().len(), 0);
    }

    #[test]
    fn rejects_bad_kinds_and_verbs() {
        let bad_verb = "grants:\n  - kinds: [v1/Pod]\n    verbs: [write]\n";
        let err = Grants::from_yaml("x", bad_verb).unwrap_err().to_string();
        assert!(err.contains("invalid verb \"write\""), "{err}");
        for kind in ["Pod", "v1/", "/Pod", "a/b/c/Pod", "v1/Po-d"] {
            let yaml = format!("grants:\n  - kinds: [\"{kind}\"]\n    verbs: [read]\n");
            let err = Grants::from_yaml("x", &yaml).unwrap_err().to_string();
            assert!(err.contains("invalid kind"), "{kind}: {err}");
        }
        let unknown = "grants:\n  - kinds: [v1/Pod]\n    verbs: [read]\n    namespace: [a]\n";
        assert!(Grants::from_yaml("x", unknown).is_err());
    }

    #[test]
    fn reads_respect_kinds_and_namespaces() {
        let g = grants();
        assert!(g.allows_read(&podset(), Some("any")));
        assert!(g.allows_read(&podset(), None));
        assert!(g.allows_read(&pod(), Some("shop")));
        assert!(!g.allows_read(&pod(), Some("kube-system")));
        assert!(!g.allows_read(&pod(), None), "a namespace-restricted grant does not cover all namespaces");
        assert!(!g.allows_read(&KindRef::new("v1", "Secret"), Some("shop")));
        assert_eq!(g.read_scope(&pod()), ReadScope::Namespaces(vec!["shop".into()]));
        assert_eq!(g.read_scope(&podset()), ReadScope::All);
        assert_eq!(g.read_scope(&KindRef::new("v1", "Secret")), ReadScope::None);
        assert!(ReadScope::Namespaces(vec!["shop".into()]).allows(Some("shop")));
        assert!(!ReadScope::Namespaces(vec!["shop".into()]).allows(None));
    }

    fn target(kind: &KindRef, ns: Option<&str>, name: &str) -> Target {
        Target::of_key(&kind.key(ns, name)).unwrap()
    }

    #[test]
    fn actions_outside_grants_are_refused_with_a_clear_message() {
        let g = grants();
        assert!(g.check_target(Verb::Delete, &target(&pod(), Some("shop"), "web-1")).is_ok());
        let err = g.check_target(Verb::Delete, &target(&pod(), Some("kube-system"), "web-1")).unwrap_err().to_string();
        assert_eq!(
            err,
            "plugin podset may not delete v1/Pod web-1 in namespace kube-system: \
             delete on v1/Pod is granted only in namespaces shop"
        );
        let err = g.check_target(Verb::Apply, &target(&pod(), Some("shop"), "p")).unwrap_err().to_string();
        assert_eq!(err, "plugin podset may not apply v1/Pod p in namespace shop: no grant for verb apply");
        let err = g.check_target(Verb::Delete, &target(&KindRef::new("v1", "Secret"), Some("shop"), "s")).unwrap_err().to_string();
        assert!(err.contains("may not delete v1/Secret s in namespace shop: no grant covers kind v1/Secret"), "{err}");
        assert!(g.check_target(Verb::UpdateStatus, &target(&podset(), Some("a"), "ps")).is_ok());
        assert!(g.check_target(Verb::Event, &target(&podset(), Some("a"), "ps")).is_ok());
        let generated = Target::of_object(
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-", "namespace": "shop"}}),
            wasmloop_model::Naming::NameOrGenerate,
        )
        .unwrap();
        assert!(g.check_target(Verb::Create, &generated).is_ok());
        let err = g.check_target(Verb::Delete, &target(&pod(), None, "cluster")).unwrap_err().to_string();
        assert!(err.starts_with("plugin podset may not delete v1/Pod cluster (cluster-scoped)"), "{err}");
    }

    #[test]
    fn wildcards_and_all() {
        let all = Grants::all();
        assert!(all.check_target(Verb::Delete, &target(&KindRef::new("v1", "Secret"), None, "s")).is_ok());
        assert!(all.allows_read(&pod(), None));
        let star = Grants::from_yaml("x", "grants:\n  - kinds: ['*']\n    verbs: [read]\n").unwrap();
        assert!(star.allows_read(&pod(), None));
        assert!(!star.allows(Verb::Create, &pod(), None));
        assert!(Grants::none("x").check_target(Verb::Delete, &target(&pod(), None, "p")).is_err());
        let verbs = Grants::from_yaml("x", "grants:\n  - kinds: [v1/Pod]\n    verbs: ['*']\n").unwrap();
        assert!(Verb::ALL.iter().all(|v| verbs.allows(*v, &pod(), Some("a"))));
    }

    #[test]
    fn spec_reads_must_be_granted() {
        let g = grants();
        let mut spec = ReconcilerSpec {
            name: "podset".into(),
            version: "0.1.0".into(),
            reconciles: podset(),
            selector: None,
            watches: vec![WatchSpec { kind: pod(), mapping: Mapping::Owner, selector: None, annotation_selector: None }],
            indexes: vec![],
            fields: vec![],
            annotation_selector: None,
        };
        assert!(g.check_spec(&spec).is_ok());
        spec.watches.push(WatchSpec {
            kind: KindRef::new("v1", "ConfigMap"),
            mapping: Mapping::SameName,
            selector: None,
            annotation_selector: None,
        });
        let err = g.check_spec(&spec).unwrap_err().to_string();
        assert!(err.contains("declares reading v1/ConfigMap (watches) but has no read grant"), "{err}");
        assert!(err.contains(r#"{kinds: ["v1/ConfigMap"], verbs: [read]}"#), "{err}");
    }

    const BIND: &str = r#"
grants:
  - kinds: ["rbac.authorization.k8s.io/v1/ClusterRole"]
    verbs: [bind, escalate]
    names: ["secret-reader"]
  - kinds: ["rbac.authorization.k8s.io/v1/RoleBinding"]
    verbs: [read, create]
"#;

    #[test]
    fn bind_and_escalate_are_given_on_named_roles_and_authorize_no_action() {
        let g = Grants::from_yaml("binder", BIND).unwrap();
        let roles = KindRef::new("rbac.authorization.k8s.io/v1", "ClusterRole");
        assert_eq!(g.rules()[0].role_verbs().collect::<Vec<_>>(), [RoleVerb::Bind, RoleVerb::Escalate]);
        assert_eq!(g.rules()[0].names, Some(vec!["secret-reader".to_string()]));
        // No action verb comes with them: the host sends no bind or escalate, and writes nothing
        // to the role because of them.
        for verb in Verb::ALL {
            assert!(!g.allows(verb, &roles, None), "{verb}");
        }
        let err = g.check_target(Verb::Patch, &target(&roles, None, "secret-reader")).unwrap_err().to_string();
        assert!(err.contains("no grant for verb patch"), "{err}");
        // `*` covers the action verbs only.
        assert!(Grants::all().rules()[0].role_verbs().next().is_none());
    }

    #[test]
    fn bind_and_escalate_grants_that_say_too_much_or_too_little_are_refused() {
        let rule = |kinds: &str, verbs: &str, names: &str| format!("grants:\n  - kinds: [{kinds}]\n    verbs: [{verbs}]\n{names}");
        let cluster_role = "\"rbac.authorization.k8s.io/v1/ClusterRole\"";
        for (yaml, expect) in [
            (rule(cluster_role, "bind", ""), "need `names`"),
            (rule(cluster_role, "bind", "    names: []\n"), "need `names`"),
            (rule(cluster_role, "bind, create", "    names: [a]\n"), "a grant of their own"),
            (rule("\"v1/Secret\"", "escalate", "    names: [a]\n"), "Role or .../ClusterRole only"),
            (rule("\"*\"", "bind", "    names: [a]\n"), "Role or .../ClusterRole only"),
            (rule("\"v1/Pod\"", "delete", "    names: [web]\n"), "`names` is only for `bind` and `escalate`"),
        ] {
            let err = Grants::from_yaml("x", &yaml).unwrap_err().to_string();
            assert!(err.contains(expect), "{yaml}: {err}");
        }
        let role = rule("\"rbac.authorization.k8s.io/v1/Role\"", "escalate", "    names: [a]\n    namespaces: [team]\n");
        assert!(Grants::from_yaml("x", &role).is_ok());
    }

    #[test]
    fn round_trips_through_serde() {
        let g = grants();
        let json = serde_json::to_string(&g).unwrap();
        assert!(json.contains(r#""verbs":["read","update-status","event"]"#), "{json}");
        let back: Grants = serde_json::from_str(&json).unwrap();
        assert_eq!(back.rules(), g.rules());
        let bind = Grants::from_yaml("binder", BIND).unwrap();
        let json = serde_json::to_string(&bind).unwrap();
        assert!(json.contains(r#""verbs":["bind","escalate"],"names":["secret-reader"]"#), "{json}");
        assert_eq!(serde_json::from_str::<Grants>(&json).unwrap().rules(), bind.rules());
    }
}
