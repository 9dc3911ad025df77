//! `plugin.yaml`: what the cluster admin decides about a plugin (the plugin itself only declares
//! what it needs; the manifest grants it).
//!
//! ```yaml
//! name: podset                      # default: the ConfigMap's name
//! plugin: podset                    # the component's own name, if it runs under another `name`
//! grants:
//!   - kinds: ["wasmloop.dev/v1alpha1/PodSet"]
//!     verbs: [read, update-status, event]
//!   - kinds: ["v1/Pod"]
//!     verbs: [read, create, delete]
//! limits: {memory: 64Mi, timeout: 1s}
//! concurrency: 2                    # workers (distinct keys reconciled at once), default 1
//! queue: {baseDelay: 5ms, maxDelay: 1000s, qps: 10, burst: 100}
//! resync: 10h                       # "never" disables
//! namespace: shop                   # watch only this namespace (default: all)
//! minRequeueAfter: 1s               # floor of requeue-after (default 1s)
//! api: {qps: 50, burst: 100}        # actions per second this plugin may send (default 50/100)
//! events: {qps: 5, burst: 50}       # Events per second it may record; the rest are dropped
//! expectationsTimeout: 5m           # longest wait for the cache to show a key's creates/deletes
//! shards: 30                        # key-space shards spread over replicas (--shard-mode plugin)
//! ```

use std::time::Duration;

use serde::Deserialize;

use crate::controller::{ControllerConfig, RateBudget};
use crate::grants::{Grant, Grants};
use crate::plugin::Limits;
use crate::queue::RateLimitConfig;

/// An invalid manifest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid plugin.yaml: {0}")]
    Yaml(String),
    #[error("invalid plugin.yaml: {0}")]
    Invalid(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    name: Option<String>,
    plugin: Option<String>,
    #[serde(default)]
    grants: Vec<Grant>,
    #[serde(default)]
    limits: Limits,
    concurrency: Option<usize>,
    #[serde(default)]
    queue: RateLimitConfig,
    resync: Option<String>,
    namespace: Option<String>,
    min_requeue_after: Option<String>,
    api: Option<RateBudget>,
    events: Option<RateBudget>,
    expectations_timeout: Option<String>,
    shards: Option<usize>,
}

/// A parsed, validated `plugin.yaml`.
#[derive(Clone, Debug)]
pub struct PluginManifest {
    /// The plugin's name: `name:`, else the ConfigMap's. The component's own name must match.
    pub name: String,
    /// Whether `name:` was given (offline runs take the component's own name otherwise).
    pub named: bool,
    /// `plugin:`: the component's own `metadata().name` when the admin runs it under another
    /// `name` on purpose (several instances of one plugin). Default: it must be `name`.
    pub component: Option<String>,
    pub grants: Grants,
    pub limits: Limits,
    pub controller: ControllerConfig,
}

impl PluginManifest {
    /// Parse `yaml`; `default_name` is used when the manifest has no `name`.
    pub fn parse(yaml: &str, default_name: &str) -> Result<Self> {
        let raw: Raw = if yaml.trim().is_empty() { serde_saphyr::from_str("{}") } else { serde_saphyr::from_str(yaml) }
            .map_err(|e| Error::Yaml(e.to_string()))?;
        let named = raw.name.is_some();
        if let Some(plugin) = raw.plugin.as_deref().filter(|p| !is_dns_label(p)) {
            return Err(Error::Invalid(format!("plugin {plugin:?} must be 1-63 characters of a-z, 0-9 and '-'")));
        }
        let name = raw.name.unwrap_or_else(|| default_name.to_string());
        if name.is_empty() || name.len() > 63 || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
            return Err(Error::Invalid(format!("name {name:?} must be 1-63 characters of a-z, 0-9 and '-'")));
        }
        raw.queue.validate().map_err(|e| Error::Invalid(format!("queue: {e}")))?;
        let concurrency = raw.concurrency.unwrap_or(1);
        if !(1..=64).contains(&concurrency) {
            return Err(Error::Invalid(format!("concurrency must be between 1 and 64, got {concurrency}")));
        }
        let resync = match raw.resync.as_deref().map(str::trim) {
            None => ControllerConfig::default().resync,
            Some("never" | "0" | "") => None,
            Some(text) => Some(crate::duration::parse(text).map_err(|e| Error::Invalid(format!("resync: {e}")))?),
        };
        if resync.is_some_and(|r| r < Duration::from_secs(1)) {
            return Err(Error::Invalid("resync must be at least 1s (or \"never\")".into()));
        }
        let min_requeue_after = match raw.min_requeue_after.as_deref() {
            None => ControllerConfig::default().min_requeue_after,
            Some(text) => crate::duration::parse(text.trim()).map_err(|e| Error::Invalid(format!("minRequeueAfter: {e}")))?,
        };
        let expectations_timeout = match raw.expectations_timeout.as_deref() {
            None => ControllerConfig::default().expectations_timeout,
            Some(text) => crate::duration::parse(text.trim()).map_err(|e| Error::Invalid(format!("expectationsTimeout: {e}")))?,
        };
        if expectations_timeout > Duration::from_secs(3600) {
            return Err(Error::Invalid("expectationsTimeout must be at most 1h (a key waits that long at worst)".into()));
        }
        let shards = raw.shards.unwrap_or(1);
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(Error::Invalid(format!("shards must be between 1 and {MAX_SHARDS}, got {shards}")));
        }
        let api = raw.api.unwrap_or_default();
        api.validate("api").map_err(Error::Invalid)?;
        let events = raw.events.unwrap_or(ControllerConfig::default().events);
        events.validate("events").map_err(Error::Invalid)?;
        Ok(Self {
            grants: Grants::new(name.clone(), raw.grants),
            name,
            named,
            component: raw.plugin,
            limits: raw.limits,
            controller: ControllerConfig {
                workers: concurrency,
                resync,
                namespace: raw.namespace,
                rate_limits: raw.queue,
                min_requeue_after,
                api,
                events,
                expectations_timeout,
                shards,
                ..ControllerConfig::default()
            },
        })
    }
}

/// The most key-space shards one plugin may have (each is a Lease renewed by its owner).
pub const MAX_SHARDS: usize = 256;

fn is_dns_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::Action;
    use crate::kinds::{KindRef, ObjectKey};

    const FULL: &str = r#"
name: podset
grants:
  - kinds: ["wasmloop.dev/v1alpha1/PodSet"]
    verbs: [read, update-status, event]
  - kinds: ["v1/Pod"]
    verbs: [read, create, delete]
    namespaces: [shop]
limits: {memory: 32Mi, timeout: 500ms}
concurrency: 3
queue: {baseDelay: 10ms, maxDelay: 60s, qps: 50, burst: 200}
resync: 5m
namespace: shop
"#;

    #[test]
    fn full_manifest_parses() {
        let m = PluginManifest::parse(FULL, "ignored").unwrap();
        assert_eq!(m.name, "podset");
        assert_eq!(m.controller.workers, 3);
        assert_eq!(m.controller.resync, Some(Duration::from_secs(300)));
        assert_eq!(m.controller.namespace.as_deref(), Some("shop"));
        assert_eq!(m.controller.rate_limits.base_delay, Duration::from_millis(10));
        assert_eq!(m.limits.timeout, Duration::from_millis(500));
        let pod = |ns: &str| Action::delete(ObjectKey::new(KindRef::new("v1", "Pod"), Some(ns.into()), "p"));
        assert!(m.grants.check_action(&pod("shop")).is_ok());
        assert!(m.grants.check_action(&pod("kube-system")).is_err());
    }

    #[test]
    fn defaults_apply_and_name_comes_from_the_configmap() {
        let m = PluginManifest::parse("", "my-plugin").unwrap();
        assert_eq!(m.name, "my-plugin");
        assert_eq!(m.controller.workers, 1);
        assert_eq!(m.controller.resync, Some(Duration::from_secs(36000)));
        assert_eq!(m.controller.min_requeue_after, Duration::from_secs(1));
        assert_eq!(m.controller.api, RateBudget { qps: 50.0, burst: 100 });
        assert_eq!(m.controller.expectations_timeout, Duration::from_secs(300));
        let m = PluginManifest::parse("resync: never", "p").unwrap();
        assert_eq!(m.controller.resync, None);
    }

    #[test]
    fn bad_manifests_say_what_is_wrong() {
        for (yaml, needle) in [
            ("nmae: x", "nmae"),
            ("name: Bad_Name", "name"),
            ("plugin: Bad_Name", "plugin"),
            ("concurrency: 0", "concurrency"),
            ("shards: 0", "shards"),
            ("shards: 1000", "shards"),
            ("resync: soon", "resync"),
            ("queue: {qps: 0}", "qps"),
            ("api: {qps: 0}", "api.qps"),
            ("api: {burst: 0}", "api.burst"),
            ("api: {qsp: 5}", "qsp"),
            ("events: {burst: 0}", "events.burst"),
            ("minRequeueAfter: soon", "minRequeueAfter"),
            ("expectationsTimeout: 2h", "expectationsTimeout must be at most 1h"),
            ("expectationsTimeout: later", "expectationsTimeout"),
            ("limits: {memory: lots}", "memory"),
            ("grants: [{kinds: [v1/Pod], verbs: [fly]}]", "fly"),
            ("name: [", "plugin.yaml"),
        ] {
            let err = PluginManifest::parse(yaml, "p").unwrap_err().to_string();
            assert!(err.contains(needle), "{yaml:?} → {err}");
        }
    }
}
