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

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use wasmloop_model::Target;

use crate::kinds::KindRef;
use crate::reconciler::ReconcilerSpec;

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
    #[error("invalid verb {0:?} in grants: expected one of read, create, apply, patch, delete, update-status, event, *")]
    InvalidVerb(String),
    /// The manifest's `grants:` does not parse.
    #[error("invalid grants YAML: {0}")]
    Yaml(String),
}

/// A result whose error is a grant's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use wasmloop_model::Verb;

/// The verbs of one grant: one [`Verb`], or `*` for every verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VerbPattern {
    /// `*`: every verb.
    Any,
    /// One verb.
    Exact(Verb),
}

impl VerbPattern {
    fn covers(self, wanted: Verb) -> bool {
        match self {
            VerbPattern::Any => true,
            VerbPattern::Exact(v) => v == wanted,
        }
    }
}

impl fmt::Display for VerbPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbPattern::Any => f.write_str("*"),
            VerbPattern::Exact(v) => v.fmt(f),
        }
    }
}

impl FromStr for VerbPattern {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "*" => Ok(VerbPattern::Any),
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

/// One rule: these verbs on these kinds, optionally only in these namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    /// The kinds the rule covers.
    pub kinds: Vec<KindPattern>,
    /// The verbs it allows on them.
    pub verbs: Vec<VerbPattern>,
    /// `None` = every namespace and cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
}

impl Grant {
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
        Self::new("*", vec![Grant { kinds: vec![KindPattern::Any], verbs: vec![VerbPattern::Any], namespaces: None }])
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

    #[test]
    fn round_trips_through_serde() {
        let g = grants();
        let json = serde_json::to_string(&g).unwrap();
        assert!(json.contains(r#""verbs":["read","update-status","event"]"#), "{json}");
        let back: Grants = serde_json::from_str(&json).unwrap();
        assert_eq!(back.rules(), g.rules());
    }
}
