//! The parts of ReplicaSets and Pods the controller reads: a ReplicaSet borrowed from its JSON
//! text (several times cheaper than `serde_json::Value` or `k8s-openapi` types: see `parse_cost`
//! in `tests.rs`), Pods from packed metadata reads (their JSON stays in the host).

use std::borrow::{Borrow, Cow};
use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::Visitor;
use serde_json::{Map, Value};
use wasmloop_sdk::meta::MetaView;

/// A ReplicaSet.
#[derive(Deserialize)]
pub struct ReplicaSet<'a> {
    #[serde(borrow)]
    pub metadata: Meta<'a>,
    pub spec: RsSpec,
    #[serde(default)]
    pub status: Option<RsStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RsSpec {
    #[serde(default)]
    pub replicas: Option<i64>,
    #[serde(default)]
    pub min_ready_seconds: Option<i64>,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub template: Template,
}

#[derive(Default, Deserialize)]
pub struct Template {
    #[serde(default)]
    pub metadata: TemplateMeta,
    #[serde(default)]
    pub spec: Option<Value>,
}

#[derive(Default, Deserialize)]
pub struct TemplateMeta {
    #[serde(default)]
    pub labels: Option<Map<String, Value>>,
    #[serde(default)]
    pub annotations: Option<Map<String, Value>>,
    #[serde(default)]
    pub finalizers: Option<Vec<Value>>,
}

/// The status fields the controller writes (conditions kept as JSON).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RsStatus {
    #[serde(default)]
    pub replicas: Option<i64>,
    #[serde(default)]
    pub fully_labeled_replicas: Option<i64>,
    #[serde(default)]
    pub ready_replicas: Option<i64>,
    #[serde(default)]
    pub available_replicas: Option<i64>,
    #[serde(default)]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Value>,
}

/// `metav1.LabelSelector`.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub match_expressions: Vec<SelectorRequirement>,
}

#[derive(Deserialize)]
pub struct SelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Errors the API server's validation would also give (a ReplicaSet read from the cache has
    /// passed it; these guard the cache of a misbehaving server or a test).
    pub fn validate(&self) -> Result<(), String> {
        if self.match_labels.is_empty() && self.match_expressions.is_empty() {
            return Err("spec.selector is empty: it would select every Pod".into());
        }
        for r in &self.match_expressions {
            match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => {
                    return Err(format!("selector {}: {} needs values", r.key, r.operator));
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => return Err(format!("selector {}: unknown operator {other:?}", r.key)),
            }
        }
        Ok(())
    }

    pub fn matches(&self, labels: &[(&str, &str)]) -> bool {
        let get = |k: &str| labels.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        self.match_labels.iter().all(|(k, v)| get(k) == Some(v.as_str()))
            && self.match_expressions.iter().all(|r| {
                let v = get(&r.key);
                match r.operator.as_str() {
                    "In" => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                    "NotIn" => v.is_none_or(|v| r.values.iter().all(|x| x != v)),
                    "Exists" => v.is_some(),
                    "DoesNotExist" => v.is_none(),
                    _ => false,
                }
            })
    }

    /// The same selector in the host's string syntax (`a=b,c in (d,e),!f`), so the cache filters
    /// Pods by label before any JSON is copied.
    pub fn to_query(&self) -> String {
        let mut parts: Vec<String> = self.match_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for r in &self.match_expressions {
            parts.push(match r.operator.as_str() {
                "In" => format!("{} in ({})", r.key, r.values.join(",")),
                "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
                "Exists" => r.key.clone(),
                _ => format!("!{}", r.key),
            });
        }
        parts.join(",")
    }
}

/// A ReplicaSet's metadata.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta<'a> {
    #[serde(borrow, default)]
    pub name: Str<'a>,
    #[serde(borrow, default)]
    pub uid: Str<'a>,
    #[serde(default)]
    pub generation: Option<i64>,
    #[serde(borrow, default)]
    pub owner_references: Option<Vec<OwnerRef<'a>>>,
    #[serde(borrow, default)]
    pub deletion_timestamp: Option<Str<'a>>,
}

#[derive(Deserialize)]
pub struct OwnerRef<'a> {
    #[serde(borrow)]
    pub uid: Str<'a>,
    #[serde(default)]
    pub controller: Option<bool>,
}

impl Meta<'_> {
    /// The uid of the controller owner, if any.
    pub fn controller_uid(&self) -> Option<&str> {
        self.owner_references.iter().flatten().find(|r| r.controller == Some(true)).map(|r| r.uid.as_str())
    }

    pub fn is_deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
}

/// The Pod fields the controller declares for its packed metadata reads, in declaration order
/// (each `Pod::field(i)` reads number `i`).
pub const POD_FIELDS: [&str; 4] = ["spec.nodeName", "status.phase", "status.conditions", "status.containerStatuses"];

/// A Pod as a packed metadata read returns it: its metadata and the declared fields, borrowed
/// from the read's buffer (the Pod's JSON never crosses into the plugin).
pub struct Pod<'a> {
    pub metadata: MetaView<'a>,
    node_name: Option<Str<'a>>,
    phase: Option<Str<'a>>,
    conditions: Vec<Condition<'a>>,
    max_restarts: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition<'a> {
    #[serde(borrow, rename = "type")]
    pub type_: Str<'a>,
    #[serde(borrow)]
    pub status: Str<'a>,
    #[serde(borrow, default)]
    pub last_transition_time: Option<Str<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default)]
    pub restart_count: i64,
}

impl<'a> Pod<'a> {
    /// The Pod read from its metadata view and declared fields ([`POD_FIELDS`]); an error names
    /// the field that did not parse.
    pub fn from_meta(metadata: MetaView<'a>) -> Result<Self, String> {
        fn parse<'a, T: Deserialize<'a>>(m: &MetaView<'a>, i: usize) -> Result<Option<T>, String> {
            m.field(i).map(serde_json::from_str).transpose().map_err(|e| format!("Pod {}: {}: {e}", m.name, POD_FIELDS[i]))
        }
        let statuses: Vec<ContainerStatus> = parse(&metadata, 3)?.unwrap_or_default();
        Ok(Pod {
            node_name: parse(&metadata, 0)?,
            phase: parse(&metadata, 1)?,
            conditions: parse(&metadata, 2)?.unwrap_or_default(),
            max_restarts: statuses.iter().map(|c| c.restart_count).max().unwrap_or(0),
            metadata,
        })
    }

    /// Being deleted (`metadata.deletionTimestamp` set).
    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// Counted and managed: not terminating, not Succeeded or Failed (KCM's `IsPodActive`).
    pub fn is_active(&self) -> bool {
        let phase = self.phase();
        !self.is_deleting() && phase != "Succeeded" && phase != "Failed"
    }

    pub fn phase(&self) -> &str {
        self.phase.as_ref().map_or("", Str::as_str)
    }

    pub fn node_name(&self) -> &str {
        self.node_name.as_ref().map_or("", Str::as_str)
    }

    fn ready_condition(&self) -> Option<&Condition<'_>> {
        self.conditions.iter().find(|c| c.type_.as_str() == "Ready")
    }

    /// The Ready condition is True.
    pub fn is_ready(&self) -> bool {
        self.ready_condition().is_some_and(|c| c.status.as_str() == "True")
    }

    /// When the Pod became ready (its Ready condition's last transition), if it is ready.
    pub fn ready_since(&self) -> Option<&str> {
        let c = self.ready_condition().filter(|c| c.status.as_str() == "True")?;
        c.last_transition_time.as_ref().map(Str::as_str)
    }

    pub fn max_restarts(&self) -> i64 {
        self.max_restarts
    }
}

/// A string borrowed from the JSON text when it has no escapes (names, UIDs and labels never
/// do), owned otherwise. Unlike `Cow` inside a map, it borrows wherever it appears.
#[derive(Default, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Str<'a>(pub Cow<'a, str>);

impl Str<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Str<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}
