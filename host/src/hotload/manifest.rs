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
//! serviceAccountName: podset        # the identity its writes carry (default wasmloop-plugin-<name>)
//! budgets: {watches: 32, indexMemory: 128Mi}  # raise what it may declare, up to the host's maxima
//! oci:                              # the component from a registry instead of a payload ConfigMap
//!   ref: oci://registry.example.com/plugins/podset@sha256:…   # or :TAG, resolved once
//!   pullSecret: regcred             # a kubernetes.io/dockerconfigjson Secret in this namespace
//!   signedBy: ["-----BEGIN PUBLIC KEY-----\n…"]  # require a cosign signature by one of these keys
//! ```
//!
//! A ConfigMap whose manifest says `shadowOf: <plugin>` holds a **candidate version** of that
//! plugin: it runs beside the serving version on every reconcile and nothing it returns is
//! executed ([`crate::controller::shadow`]). Its `name` defaults to (and must be) `<plugin>`;
//! its `grants` and `limits` apply to it, `concurrency` bounds its calls at once; the
//! controller settings (queue, resync, namespace, shards, ...) are the serving version's. With
//! `canary: {shards: [0, 3], maxFailureRate: 0.1, minReconciles: 10}` it *serves* the keys of
//! those shards (of the plugin's `shards:`) under its own grants, and is rolled back by itself
//! (it then only shadows) when more than `maxFailureRate` of at least `minReconciles` of them fail.

use std::time::Duration;

use serde::Deserialize;
use wasmloop_model::name;

use crate::controller::{Budgets, Canary, ControllerConfig, RateBudget};
use crate::grants::{Grant, Grants};
use crate::oci::{OciRef, TrustPolicy};
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
    service_account_name: Option<String>,
    shadow_of: Option<String>,
    canary: Option<Canary>,
    budgets: Option<Budgets>,
    oci: Option<RawOci>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawOci {
    #[serde(rename = "ref")]
    reference: String,
    pull_secret: Option<String>,
    #[serde(default)]
    signed_by: Vec<String>,
}

/// `oci:`: the plugin's component is a Wasm OCI artifact in a registry.
#[derive(Clone, Debug)]
pub struct OciPayload {
    /// `ref:`, parsed.
    pub reference: OciRef,
    /// `pullSecret:`: a `kubernetes.io/dockerconfigjson` Secret in the plugin ConfigMap's namespace.
    pub pull_secret: Option<String>,
    /// `signedBy:`: the cosign public keys one of which must have signed the artifact.
    pub signed_by: TrustPolicy,
}

/// A parsed, validated `plugin.yaml`.
#[derive(Clone, Debug)]
pub struct PluginManifest {
    /// The plugin's name: `name:`, else the ConfigMap's. The component's own name must match.
    /// Loaded from a namespace other than the host's own (`--all-namespaces`), it is
    /// `<name>.<namespace>` ([`PluginManifest::scope_to`]).
    pub name: String,
    /// The name the manifest gives (or the ConfigMap's), whatever the namespace: what its
    /// ServiceAccount is claimed for.
    pub local_name: String,
    /// Whether `name:` was given (offline runs take the component's own name otherwise).
    pub named: bool,
    /// `plugin:`: the component's own `metadata().name` when the admin runs it under another
    /// `name` on purpose (several instances of one plugin). Default: it must be `name`.
    pub component: Option<String>,
    /// `grants:`: what the plugin may read and do (nothing by default).
    pub grants: Grants,
    /// `limits:`: memory, fuel and time per call.
    pub limits: Limits,
    /// `controller:`: workers, resync, rate limits and the like.
    pub controller: ControllerConfig,
    /// `serviceAccountName:`: the ServiceAccount (in the plugin ConfigMap's namespace) whose
    /// identity the plugin's writes carry; default `wasmloop-plugin-<name>`.
    pub service_account: Option<String>,
    /// `shadowOf:`: this is a candidate version shadowing the loaded plugin of that name.
    pub shadow_of: Option<String>,
    /// `canary:` (with `shadowOf:`): the shards whose keys the candidate serves, and when it is
    /// rolled back by itself.
    pub canary: Option<Canary>,
    /// `oci:`: the component comes from a registry.
    pub oci: Option<OciPayload>,
}

impl PluginManifest {
    /// Parse `yaml`; `default_name` is used when the manifest has no `name`.
    pub fn parse(yaml: &str, default_name: &str) -> Result<Self> {
        let raw: Raw = if yaml.trim().is_empty() { serde_saphyr::from_str("{}") } else { serde_saphyr::from_str(yaml) }
            .map_err(|e| Error::Yaml(e.to_string()))?;
        let named = raw.name.is_some() || raw.shadow_of.is_some();
        if let Some(plugin) = raw.plugin.as_deref()
            && let Err(e) = name::dns_label(plugin, name::DNS_LABEL_MAX)
        {
            return Err(Error::Invalid(format!("plugin {plugin:?} must be a DNS label (1-63 of a-z, 0-9 and '-'): it {e}")));
        }
        if let Some(target) = raw.shadow_of.as_deref() {
            if let Err(e) = name::dns_label(target, name::DNS_LABEL_MAX) {
                return Err(Error::Invalid(format!("shadowOf {target:?} must be a plugin name (a DNS label): it {e}")));
            }
            if let Some(own) = raw.name.as_deref().filter(|n| *n != target) {
                return Err(Error::Invalid(format!(
                    "name {own:?} differs from shadowOf {target:?}: a candidate version runs under the name of the plugin it shadows"
                )));
            }
        }
        if let Some(canary) = &raw.canary {
            if raw.shadow_of.is_none() {
                return Err(Error::Invalid("canary: only a candidate version (shadowOf: <plugin>) has canary shards".into()));
            }
            // The shard indexes are checked against the serving plugin's `shards:` when attached.
            canary.validate(usize::MAX).map_err(|e| Error::Invalid(e.to_string()))?;
        }
        let name = raw.name.or_else(|| raw.shadow_of.clone()).unwrap_or_else(|| default_name.to_string());
        if let Err(e) = name::dns_label(&name, name::DNS_LABEL_MAX) {
            return Err(Error::Invalid(format!("name {name:?} must be a DNS label (1-63 of a-z, 0-9 and '-'): it {e}")));
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
        if let Some(sa) = raw.service_account_name.as_deref()
            && let Err(e) = name::dns_subdomain(sa)
        {
            return Err(Error::Invalid(format!("serviceAccountName {sa:?} must be a DNS subdomain (a ServiceAccount name): it {e}")));
        }
        let api = raw.api.unwrap_or_default();
        api.validate("api").map_err(|e| Error::Invalid(e.to_string()))?;
        let events = raw.events.unwrap_or(ControllerConfig::default().events);
        events.validate("events").map_err(|e| Error::Invalid(e.to_string()))?;
        let budgets = raw.budgets.unwrap_or_default();
        budgets.validate().map_err(|e| Error::Invalid(e.to_string()))?;
        let oci = raw.oci.map(oci_payload).transpose()?;
        Ok(Self {
            oci,
            grants: Grants::new(name.clone(), raw.grants),
            local_name: name.clone(),
            name,
            named,
            service_account: raw.service_account_name,
            shadow_of: raw.shadow_of,
            canary: raw.canary,
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
                budgets,
                ..ControllerConfig::default()
            },
        })
    }
}

impl PluginManifest {
    /// The same plugin, loaded from `namespace`, which is not the host's own: it runs as
    /// `<name>.<namespace>` (field manager, Event reporter, metrics label, shard Leases, the name
    /// one ConfigMap holds), so plugins of different namespaces never share a name. Its
    /// component still answers to `<name>` (or `plugin:`).
    pub fn scope_to(&mut self, namespace: &str) {
        if self.component.is_none() {
            self.component = Some(self.local_name.clone());
        }
        self.name = format!("{}.{namespace}", self.local_name);
        self.grants = self.grants.clone().named(self.name.clone());
    }
}

fn oci_payload(raw: RawOci) -> Result<OciPayload> {
    let reference = OciRef::parse(raw.reference.trim()).map_err(|e| Error::Invalid(format!("oci.ref: {e}")))?;
    if let Some(secret) = raw.pull_secret.as_deref()
        && let Err(e) = name::dns_subdomain(secret)
    {
        return Err(Error::Invalid(format!("oci.pullSecret {secret:?} must be a Secret name: it {e}")));
    }
    let signed_by = TrustPolicy::from_pems(&raw.signed_by).map_err(|e| Error::Invalid(format!("oci.signedBy: {e}")))?;
    Ok(OciPayload { reference, pull_secret: raw.pull_secret, signed_by })
}

/// The most key-space shards one plugin may have (each is a Lease renewed by its owner).
pub const MAX_SHARDS: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

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
    fn oci_payloads_are_parsed_and_bad_ones_named() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let ok = format!("oci:\n  ref: oci://127.0.0.1:5000/plugins/x@{digest}\n  pullSecret: regcred\n");
        let oci = PluginManifest::parse(&ok, "x").unwrap().oci.unwrap();
        assert_eq!(oci.reference.digest.as_deref(), Some(digest.as_str()));
        assert_eq!(oci.pull_secret.as_deref(), Some("regcred"));
        assert!(oci.signed_by.is_empty());
        assert!(PluginManifest::parse("name: x", "x").unwrap().oci.is_none());
        for (yaml, want) in [
            ("oci: {ref: https://x.io/a:v1}".to_string(), "oci.ref"),
            ("oci: {ref: oci://x.io/a:v1, pullSecret: Bad_Name}".to_string(), "oci.pullSecret"),
            ("oci: {ref: oci://x.io/a:v1, signedBy: [nope]}".to_string(), "oci.signedBy: trusted key 0"),
            ("oci: {ref: oci://x.io/a:v1, tag: v2}".to_string(), "unknown field"),
        ] {
            let err = PluginManifest::parse(&yaml, "x").unwrap_err().to_string();
            assert!(err.contains(want), "{yaml}: {err}");
        }
    }

    #[test]
    fn full_manifest_parses() {
        let m = PluginManifest::parse(FULL, "ignored").unwrap();
        assert_eq!(m.name, "podset");
        assert_eq!(m.controller.workers, 3);
        assert_eq!(m.controller.resync, Some(Duration::from_secs(300)));
        assert_eq!(m.controller.namespace.as_deref(), Some("shop"));
        assert_eq!(m.controller.rate_limits.base_delay, Duration::from_millis(10));
        assert_eq!(m.limits.timeout, Duration::from_millis(500));
        let pod = |ns: &str| wasmloop_model::Target::of_key(&crate::kinds::KindRef::new("v1", "Pod").key(Some(ns), "p")).unwrap();
        assert!(m.grants.check_target(crate::grants::Verb::Delete, &pod("shop")).is_ok());
        assert!(m.grants.check_target(crate::grants::Verb::Delete, &pod("kube-system")).is_err());
        assert_eq!(m.service_account, None);
        assert_eq!(m.shadow_of, None);
        let candidate = PluginManifest::parse("shadowOf: podset", "podset-next").unwrap();
        assert_eq!((candidate.name.as_str(), candidate.shadow_of.as_deref()), ("podset", Some("podset")));
        let err = PluginManifest::parse("name: other\nshadowOf: podset", "x").unwrap_err().to_string();
        assert!(err.contains("runs under the name of the plugin it shadows"), "{err}");
        let canary = PluginManifest::parse("shadowOf: podset\ncanary: {shards: [0, 3], maxFailureRate: 0.2}", "c").unwrap();
        let c = canary.canary.unwrap();
        assert_eq!((c.shards.len(), c.max_failure_rate, c.min_reconciles), (2, 0.2, 10));
        let err = PluginManifest::parse("canary: {shards: [0]}", "podset").unwrap_err().to_string();
        assert!(err.contains("only a candidate version"), "{err}");
        let err = PluginManifest::parse("shadowOf: podset\ncanary: {shards: [0], maxFailureRate: 2}", "c").unwrap_err().to_string();
        assert!(err.contains("maxFailureRate must be between 0 and 1"), "{err}");
        let named = PluginManifest::parse("serviceAccountName: podsets", "podset").unwrap();
        assert_eq!(named.service_account.as_deref(), Some("podsets"));
        let err = PluginManifest::parse("serviceAccountName: ../admin", "podset").unwrap_err().to_string();
        assert!(err.contains("serviceAccountName \"../admin\" must be a DNS subdomain"), "{err}");
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
        assert_eq!(m.controller.budgets, Budgets::default());
        let m = PluginManifest::parse("budgets: {watches: 32, indexMemory: 128Mi, selectorBytes: 64Ki}", "p").unwrap();
        let b = m.controller.budgets;
        assert_eq!((b.watches, b.index_memory.to_string(), b.selector_bytes.to_string()), (32, "128Mi".into(), "64Ki".into()));
        assert_eq!(m.controller.budgets.selectors, Budgets::default().selectors, "the others keep their defaults");
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
            ("budgets: {watches: 1000}", "budgets.watches is 1000, over the host's maximum of 128"),
            ("budgets: {indexMemory: 4Gi}", "budgets.indexMemory is 4Gi, over the host's maximum of 1Gi"),
            ("budgets: {keysPerEvent: 0}", "budgets.keysPerEvent must be at least 1"),
            ("budgets: {watchs: 3}", "watchs"),
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

    mod fuzz {
        use std::time::Instant;

        use proptest::prelude::*;

        use super::*;
        use crate::plugin::limits::ByteSize;
        use crate::queue::{RateLimiter, TokenBucket};

        /// Scalars a manifest's values are made of: numbers at and past every bound, durations,
        /// names, YAML specials.
        const SCALARS: &[&str] = &[
            "0",
            "1",
            "-1",
            "2",
            "64",
            "65",
            "256",
            "257",
            "4294967296",
            "18446744073709551616",
            "1e400",
            "1e-300",
            "0.5",
            ".nan",
            ".inf",
            "-.inf",
            "podset",
            "my-plugin",
            "Bad_Name",
            "-x",
            "\"\"",
            "''",
            "never",
            "0s",
            "5ms",
            "999ms",
            "1s",
            "90s",
            "1h",
            "2h",
            "1.5s",
            "5124095576030431h",
            "99999999999999999999999h",
            "soon",
            "~",
            "null",
            "true",
            "[]",
            "{}",
            "[a, b]",
            "64Mi",
            "1Gi",
            "17179869184Gi",
            "lots",
            "*",
            "&a x",
            "*a",
            "!!binary aGk=",
            "|\n  text",
        ];
        /// The keys of each nested mapping, with one that is not a field.
        const LIMITS: &[&str] = &["memory", "timeout", "output", "outputPerMinute", "readsPerCall", "maxActions", "tableElements", "bogus"];
        const QUEUE: &[&str] = &["baseDelay", "maxDelay", "qps", "burst", "aging", "agedEvery", "bogus"];
        const BUDGET: &[&str] = &["qps", "burst", "qsp"];
        const BUDGETS: &[&str] = &["watches", "selectors", "selectorBytes", "indexes", "indexMemory", "keysPerEvent", "fields", "bogus"];
        const KINDS: &[&str] =
            &["v1/Pod", "apps/v1/Deployment", "wasmloop.dev/v1alpha1/PodSet", "*", "Pod", "a/b/c/D", "v1/", "v1/PodList"];
        const VERBS: &[&str] = &["read", "create", "apply", "patch", "delete", "update-status", "event", "*", "fly", "\"\""];

        fn scalar() -> impl Strategy<Value = String> {
            prop_oneof![4 => prop::sample::select(SCALARS).prop_map(str::to_owned), 1 => "[0-9]{1,12}(\\.[0-9]{1,3})?(ns|us|ms|s|m|h|Ki|Mi)?"]
        }

        /// `{k: v, …}` over `keys`.
        fn flow_map(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
            prop::collection::vec((prop::sample::select(keys), scalar()), 0..4)
                .prop_map(|kv| format!("{{{}}}", kv.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")))
        }

        fn flow_list(items: &'static [&'static str]) -> impl Strategy<Value = String> {
            prop::collection::vec(prop::sample::select(items), 0..3).prop_map(|v| format!("[{}]", v.join(", ")))
        }

        fn grants() -> impl Strategy<Value = String> {
            let grant = (flow_list(KINDS), flow_list(VERBS), prop::option::of(flow_list(&["shop", "\"\"", "a-b"])), any::<bool>())
                .prop_map(|(kinds, verbs, namespaces, extra)| {
                    let ns = namespaces.map(|n| format!(", namespaces: {n}")).unwrap_or_default();
                    format!("{{kinds: {kinds}, verbs: {verbs}{ns}{}}}", if extra { ", bogus: 1" } else { "" })
                });
            prop::collection::vec(grant, 0..3).prop_map(|g| format!("[{}]", g.join(", ")))
        }

        /// One `key: value` line of a manifest, the value of the key's type mostly.
        fn line() -> impl Strategy<Value = String> {
            let key = prop::sample::select(
                &["name", "plugin", "concurrency", "resync", "namespace", "minRequeueAfter", "expectationsTimeout", "shards", "nmae"][..],
            );
            prop_oneof![
                4 => (key, scalar()).prop_map(|(k, v)| format!("{k}: {v}")),
                1 => flow_map(LIMITS).prop_map(|v| format!("limits: {v}")),
                1 => flow_map(QUEUE).prop_map(|v| format!("queue: {v}")),
                1 => (prop::sample::select(&["api", "events"][..]), flow_map(BUDGET)).prop_map(|(k, v)| format!("{k}: {v}")),
                1 => flow_map(BUDGETS).prop_map(|v| format!("budgets: {v}")),
                1 => grants().prop_map(|v| format!("grants: {v}")),
            ]
        }

        /// Arbitrary text, YAML-ish text, or a manifest of known keys with random values.
        fn manifest_text() -> impl Strategy<Value = String> {
            prop_oneof![
                1 => any::<String>(),
                1 => "[a-z0-9:{}\\[\\],&*!|>'\" \n-]{0,40}",
                6 => prop::collection::vec(line(), 0..6).prop_map(|lines| lines.join("\n")),
            ]
        }

        /// Whether `d` can be added to the clock (a deadline that far away exists).
        fn fits_the_clock(d: Duration) -> bool {
            Instant::now().checked_add(d).is_some()
        }

        /// A bucket's first `burst + 1` reservations (so that it runs dry) do not panic.
        fn drain(bucket: &TokenBucket, burst: u32) {
            for _ in 0..=burst.min(1000) {
                RateLimiter::<()>::when(bucket, &());
            }
        }

        /// Found by [`fuzz_manifest`]: a resync past the clock's range was accepted and panicked
        /// when the controller added it to `Instant::now()`; durations past `duration::MAX` are
        /// refused now.
        #[test]
        fn a_resync_past_the_end_of_time_is_refused() {
            let err = PluginManifest::parse("resync: 5124095576030431h", "p").unwrap_err().to_string();
            assert!(err.contains("resync: invalid duration \"5124095576030431h\": too large"), "{err}");
        }

        /// Found by [`fuzz_manifest`]: `qps: 1e-300` is positive, so it is accepted, and the
        /// token bucket panicked computing its 1e300-second wait; the wait is "never" now.
        #[test]
        fn a_tiny_qps_is_usable() {
            let m = PluginManifest::parse("api: {qps: 1e-300, burst: 1}", "p").unwrap();
            drain(&TokenBucket::new(m.controller.api.qps, m.controller.api.burst), 3);
        }

        /// `PluginManifest::parse` on any text: never panics; a refusal says `invalid
        /// plugin.yaml: <reason>`. An accepted manifest keeps the documented bounds (name a DNS
        /// label, 1-64 workers, 1-256 shards, resync ≥ 1s or never, expectationsTimeout ≤ 1h,
        /// positive rates), is usable (every duration fits the clock, the rate limiters it
        /// builds run dry without panicking) and its memory limit prints as it parses.
        #[test]
        fn fuzz_manifest() {
            crate::fuzz::run(file!(), "manifest", manifest_text(), |yaml| {
                let m = match PluginManifest::parse(&yaml, "default-name") {
                    Ok(m) => m,
                    Err(e) => {
                        let message = e.to_string();
                        prop_assert!(message.len() > "invalid plugin.yaml: ".len(), "{yaml:?}: {message:?}");
                        return Ok(false);
                    }
                };
                prop_assert!(name::dns_label(&m.name, 63).is_ok(), "{:?}", m.name);
                prop_assert!(m.component.as_deref().is_none_or(|c| name::dns_label(c, 63).is_ok()));
                let c = &m.controller;
                prop_assert!((1..=64).contains(&c.workers) && (1..=MAX_SHARDS).contains(&c.shards));
                prop_assert!(c.resync.is_none_or(|r| r >= Duration::from_secs(1)));
                prop_assert!(c.expectations_timeout <= Duration::from_secs(3600));
                prop_assert!(c.rate_limits.validate().is_ok() && c.api.validate("api").is_ok() && c.events.validate("events").is_ok());
                prop_assert!(c.budgets.validate().is_ok());
                let q = &c.rate_limits;
                for d in [c.resync.unwrap_or_default(), c.min_requeue_after, c.expectations_timeout, q.base_delay, q.max_delay, q.aging] {
                    prop_assert!(fits_the_clock(d), "{yaml:?}: {d:?}");
                }
                prop_assert!(fits_the_clock(m.limits.timeout), "{yaml:?}: {:?}", m.limits.timeout);
                let limiter = q.build::<()>();
                for _ in 0..=q.burst.min(1000) {
                    limiter.when(&());
                }
                drain(&TokenBucket::new(c.api.qps, c.api.burst), c.api.burst);
                drain(&TokenBucket::new(c.events.qps, c.events.burst), c.events.burst);
                prop_assert_eq!(ByteSize::parse(&m.limits.memory.to_string()).ok(), Some(m.limits.memory));
                Ok(true)
            });
        }
    }
}
