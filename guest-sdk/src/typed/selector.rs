//! Label selectors (`metav1.LabelSelector`) as workloads and Jobs carry them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `matchLabels` and `matchExpressions`, all of which must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// Labels that must have these values.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One set-based requirement: `key` `In`, `NotIn` (`values`), `Exists` or `DoesNotExist`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values for `In` and `NotIn`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Fields not named above, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl LabelSelector {
    /// A selector of exactly these labels.
    pub fn from_labels(labels: impl IntoIterator<Item = (String, String)>) -> Self {
        Self { match_labels: labels.into_iter().collect(), ..Self::default() }
    }

    /// Whether `labels` satisfy the selector (an empty selector matches everything, as in
    /// `metav1.LabelSelectorAsSelector`; an unknown operator matches nothing).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let get = |k: &str| labels.get(k).map(String::as_str);
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

    /// The selector in the cache's string syntax (`a=b,c in (d,e),!f`) for
    /// [`cache::list`](crate::cache::list), so the host filters before copying JSON; an error
    /// names a requirement the syntax cannot express (an unknown operator, `In`/`NotIn` without
    /// values).
    pub fn to_query(&self) -> Result<String, Inexpressible> {
        let mut parts: Vec<String> = self.match_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for r in &self.match_expressions {
            parts.push(match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => {
                    return Err(Inexpressible { key: r.key.clone(), why: format!("{} needs values", r.operator) });
                }
                "In" => format!("{} in ({})", r.key, r.values.join(",")),
                "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
                "Exists" => r.key.clone(),
                "DoesNotExist" => format!("!{}", r.key),
                other => return Err(Inexpressible { key: r.key.clone(), why: format!("unknown operator {other:?}") }),
            });
        }
        Ok(parts.join(","))
    }
}

/// A requirement of a [`LabelSelector`] that the cache's selector syntax cannot express.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("selector {key}: {why}")]
pub struct Inexpressible {
    /// The requirement's key.
    pub key: String,
    /// What is wrong with it (an unknown operator, `In`/`NotIn` without values).
    pub why: String,
}
