//! *Waiting*: a plugin ConfigMap that cannot load **yet**, because something it depends on is
//! not there, as opposed to one that is refused.
//!
//! A load attempt ends in one of three ways: the plugin serves; it is refused (only a change to
//! its ConfigMaps can fix it: a bad manifest, a corrupt payload, grants that miss a read); or it
//! waits for a [`WaitReason`], something that can arrive by itself: a kind not served yet (its
//! CRD applied in the same `kubectl apply -k`, or later), the payload ConfigMap it references,
//! its plugin name held by another ConfigMap, RBAC that lets its identity read what it reads. The manager tries a waiting ConfigMap again on the
//! events that can end the wait (its ConfigMap or payload changing, the name being released) and,
//! for reasons no event announces (a kind appearing: the host may not be allowed to watch CRDs),
//! with capped backoff ([`Waiting`]).
//!
//! Adding a reason is a variant of [`WaitReason`] (its `reason()` word, whether it
//! [`polls`](WaitReason::polls)) and a check function returning it, called where the manager
//! calls [`super::served::unserved`] (`Inner::load` in `manager.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::time::Instant;

use crate::kinds::{KindRef, ObjectKey};
use crate::plugin::WasmPlugin;

/// What a waiting plugin ConfigMap waits for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WaitReason {
    /// A kind the plugin reads (`role`: reconciles, watches, indexes) is not served by the API server.
    #[error(
        "kind {kind} (which the plugin {role}) is not served by the API server (is its CRD installed and established?); \
         the plugin starts when it is"
    )]
    KindNotServed {
        /// The kind.
        kind: KindRef,
        /// How the plugin reads it.
        role: &'static str,
    },
    /// Discovery of a kind did not answer (the API server busy or unreachable).
    #[error("discovering kind {kind} failed ({error}); trying again")]
    DiscoveryFailed {
        /// The kind.
        kind: KindRef,
        /// The discovery error.
        error: String,
    },
    /// The payload ConfigMap the plugin ConfigMap references does not exist (yet).
    #[error(
        "payload ConfigMap {namespace}/{name} not found (a ConfigMap labelled wasmloop.dev/plugin-payload=true, in the \
         plugin's own namespace); apply it: the plugin loads when it appears"
    )]
    PayloadMissing {
        /// The plugin's namespace.
        namespace: String,
        /// The payload ConfigMap's name.
        name: String,
    },
    /// Another ConfigMap holds the plugin's name.
    #[error("plugin name {name:?} is already used by ConfigMap {holder}; this one loads when that one goes away")]
    NameTaken {
        /// The plugin's name.
        name: String,
        /// The ConfigMap that holds it.
        holder: String,
    },
    /// The plugin's identity may not (yet) list and watch what it reads, or the host could not
    /// ask (SubjectAccessReview).
    #[error("{detail}; the plugin starts when its RBAC allows it")]
    ReadsNotAuthorized {
        /// The plugin's identity.
        identity: String,
        /// What it may not do, as the RBAC check says.
        detail: String,
    },
    /// The ServiceAccount the plugin writes as does not exist or is not (yet) claimed for it
    /// (label `wasmloop.dev/plugin-name`), or the host could not read it.
    #[error("{detail}")]
    IdentityNotClaimed {
        /// The plugin's identity.
        identity: String,
        /// What is missing, as the claim check says.
        detail: String,
    },
    /// The registry of the plugin's OCI artifact is down, slow or answers with server errors.
    #[error("{error}; the last good version keeps serving and the pull is tried again")]
    RegistryUnreachable {
        /// The artifact.
        reference: String,
        /// The pull error.
        error: String,
    },
    /// The pull Secret `oci.pullSecret` names does not exist (yet).
    #[error("pull Secret {namespace}/{name} (oci.pullSecret) not found; the plugin is pulled when it exists")]
    PullSecretMissing {
        /// The plugin's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
}

impl WaitReason {
    /// One CamelCase word, for the status and the Event.
    pub fn reason(&self) -> &'static str {
        match self {
            WaitReason::KindNotServed { .. } => "KindNotServed",
            WaitReason::DiscoveryFailed { .. } => "DiscoveryFailed",
            WaitReason::PayloadMissing { .. } => "PayloadMissing",
            WaitReason::NameTaken { .. } => "NameTaken",
            WaitReason::ReadsNotAuthorized { .. } => "ReadsNotAuthorized",
            WaitReason::IdentityNotClaimed { .. } => "IdentityNotClaimed",
            WaitReason::RegistryUnreachable { .. } => "RegistryUnreachable",
            WaitReason::PullSecretMissing { .. } => "PullSecretMissing",
        }
    }

    /// What is waited for, in a word or two (the status's `waitingFor`).
    pub fn subject(&self) -> String {
        match self {
            WaitReason::KindNotServed { kind, .. } | WaitReason::DiscoveryFailed { kind, .. } => kind.to_string(),
            WaitReason::PayloadMissing { namespace, name } => format!("v1/ConfigMap/{namespace}/{name}"),
            WaitReason::NameTaken { name, .. } => format!("plugin name {name}"),
            WaitReason::ReadsNotAuthorized { identity, .. } => format!("RBAC of {identity}"),
            WaitReason::IdentityNotClaimed { identity, .. } => format!("claim of {identity}"),
            WaitReason::RegistryUnreachable { reference, .. } => reference.clone(),
            WaitReason::PullSecretMissing { namespace, name } => format!("v1/Secret/{namespace}/{name}"),
        }
    }

    /// Whether the wait can end without an event the manager sees (so it polls with backoff): a
    /// kind appears through discovery only, RBAC through a review, a ServiceAccount's claim by
    /// reading it. A payload and a plugin name come back as events.
    pub fn polls(&self) -> bool {
        matches!(
            self,
            WaitReason::KindNotServed { .. }
                | WaitReason::DiscoveryFailed { .. }
                | WaitReason::ReadsNotAuthorized { .. }
                | WaitReason::IdentityNotClaimed { .. }
                | WaitReason::RegistryUnreachable { .. }
                | WaitReason::PullSecretMissing { .. }
        )
    }
}

/// Why a load attempt did not end with the plugin serving.
#[derive(Clone, Debug, thiserror::Error)]
pub enum NotLoaded {
    /// It waits for something; it loads when that comes.
    #[error(transparent)]
    Waiting(#[from] WaitReason),
    /// Refused, with the reason as the host reports it.
    #[error("{0}")]
    Refused(String),
}

impl From<String> for NotLoaded {
    fn from(reason: String) -> Self {
        NotLoaded::Refused(reason)
    }
}

/// How the manager waits: when to retry, and how long a wait must last before it is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// First retry of a polling wait; doubled each time...
    pub first_retry: Duration,
    /// ... up to this.
    pub max_retry: Duration,
    /// A wait is reported (Event, status) once it has lasted this long: a payload deleted just
    /// before its plugin ConfigMap (an uninstall) or a CRD served a moment after its plugin
    /// ConfigMap arrived is never reported.
    pub settle: Duration,
}

impl Default for WaitPolicy {
    /// 0.5 s, 1 s, 2 s, 4 s, then every 5 s; reported after 1 s.
    fn default() -> Self {
        Self { first_retry: Duration::from_millis(500), max_retry: Duration::from_secs(5), settle: Duration::from_secs(1) }
    }
}

/// A compiled version held while it waits (for a kind), so a retry does not compile again.
#[derive(Clone)]
pub struct Pending {
    /// The fingerprint of the ConfigMap content it was built from.
    pub payload: String,
    /// The loaded plugin.
    pub plugin: Arc<WasmPlugin>,
    /// How it was first loaded (compiled, or from the precompiled cache).
    pub origin: super::LoadOrigin,
}

/// What the manager should do after [`Waiting::wait`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Next {
    /// The wait is new or its reason changed: log it, send the `LoadEvent`.
    pub changed: bool,
    /// Report it now (Event and status): it has lasted `settle` and was not reported as this.
    pub report: bool,
    /// Try again after this long (`None`: only on events).
    pub retry_after: Option<Duration>,
}

struct Entry {
    reason: WaitReason,
    since: Instant,
    reported: Option<WaitReason>,
    backoff: ExponentialBackoff,
}

/// The plugin ConfigMaps that wait, with their reasons and backoff.
pub struct Waiting {
    policy: WaitPolicy,
    entries: parking_lot::Mutex<HashMap<ObjectKey, Entry>>,
    pending: parking_lot::Mutex<HashMap<ObjectKey, Pending>>,
}

impl Waiting {
    /// Nothing waiting yet; waits follow `policy`.
    pub fn new(policy: WaitPolicy) -> Self {
        Self { policy, entries: Default::default(), pending: Default::default() }
    }

    fn backoff(&self) -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(self.policy.first_retry)
            .with_max_delay(self.policy.max_retry)
            .with_factor(2.0)
            .without_max_times()
            .build()
    }

    /// `key` waits for `reason` (after an attempt just now).
    pub fn wait(&self, key: &ObjectKey, reason: WaitReason) -> Next {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        let new = !entries.contains_key(key);
        let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
            reason: reason.clone(),
            since: now,
            reported: None,
            backoff: self.backoff(),
        });
        let changed = new || entry.reason != reason;
        if entry.reason != reason {
            entry.reason = reason.clone();
            entry.backoff = self.backoff();
        }
        let settled = now.duration_since(entry.since) >= self.policy.settle;
        let report = settled && entry.reported.as_ref() != Some(&reason);
        if report {
            entry.reported = Some(reason.clone());
        }
        let unsettled =
            (!settled && entry.reported.as_ref() != Some(&reason)).then(|| self.policy.settle - now.duration_since(entry.since));
        let polled = reason.polls().then(|| entry.backoff.next().unwrap_or(self.policy.max_retry));
        let retry_after = match (polled, unsettled) {
            (Some(p), Some(u)) => Some(p.max(u)),
            (p, u) => p.or(u),
        };
        Next { changed, report, retry_after }
    }

    /// `key` no longer waits (it loaded, was refused or deleted): what it waited for, if anything.
    /// The version held for it is dropped.
    pub fn clear(&self, key: &ObjectKey) -> Option<WaitReason> {
        self.pending.lock().remove(key);
        self.entries.lock().remove(key).map(|e| e.reason)
    }

    /// Hold `pending`, compiled for `key`, for its next attempt.
    pub fn hold(&self, key: &ObjectKey, pending: Pending) {
        self.pending.lock().insert(key.clone(), pending);
    }

    /// The version held for `key`, if it was built from `payload`.
    pub fn pending(&self, key: &ObjectKey, payload: &str) -> Option<Pending> {
        self.pending.lock().get(key).filter(|p| p.payload == payload).cloned()
    }

    /// What `key` waits for, if it waits.
    pub fn reason(&self, key: &ObjectKey) -> Option<WaitReason> {
        self.entries.lock().get(key).map(|e| e.reason.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(KindRef::new("v1", "ConfigMap"), Some("wasmloop"), name)
    }

    fn kind() -> WaitReason {
        WaitReason::KindNotServed { kind: KindRef::new("example.com/v1", "Thing"), role: "reconciles" }
    }

    fn payload() -> WaitReason {
        WaitReason::PayloadMissing { namespace: "wasmloop".into(), name: "p-wasm-0123456789ab".into() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_kind_is_polled_with_capped_backoff_and_reported_once_it_lasted() {
        let w = Waiting::new(WaitPolicy::default());
        let k = key("thing");
        // The first attempt: new, not reported yet (it may end within the settle time), retried
        // once the settle time has passed.
        let first = w.wait(&k, kind());
        assert_eq!(first, Next { changed: true, report: false, retry_after: Some(Duration::from_secs(1)) });
        tokio::time::advance(Duration::from_secs(1)).await;
        let second = w.wait(&k, kind());
        assert_eq!((second.changed, second.report), (false, true), "reported once it lasted 1 s");
        // Then polled, doubling up to 5 s; never reported again for the same reason.
        let mut delays = vec![second.retry_after.unwrap()];
        for _ in 0..6 {
            tokio::time::advance(*delays.last().unwrap()).await;
            let next = w.wait(&k, kind());
            assert!(!next.report && !next.changed);
            delays.push(next.retry_after.unwrap());
        }
        let secs: Vec<f64> = delays.iter().map(Duration::as_secs_f64).collect();
        assert_eq!(secs, [1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]);
        assert_eq!(w.reason(&k), Some(kind()));
        assert_eq!(w.clear(&k), Some(kind()));
        assert_eq!(w.reason(&k), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_payload_waits_for_events_and_is_reported_only_if_it_lasts() {
        let w = Waiting::new(WaitPolicy::default());
        let k = key("p");
        // An uninstall: the payload goes first, the plugin ConfigMap a moment later. The first
        // attempt schedules one retry, at the settle time, to report if it still waits.
        assert_eq!(w.wait(&k, payload()), Next { changed: true, report: false, retry_after: Some(Duration::from_secs(1)) });
        tokio::time::advance(Duration::from_millis(300)).await;
        // An event 300 ms later, still missing: the retry stays due at 1 s.
        assert_eq!(w.wait(&k, payload()).retry_after, Some(Duration::from_millis(700)));
        assert_eq!(w.clear(&k), Some(payload()), "deleted before it settled: never reported");

        // One that lasts is reported once, then waits for events only.
        assert!(!w.wait(&k, payload()).report);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(w.wait(&k, payload()), Next { changed: false, report: true, retry_after: None });
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(w.wait(&k, payload()), Next { changed: false, report: false, retry_after: None });
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_reason_is_a_change_reported_at_once_and_restarts_the_backoff() {
        let w = Waiting::new(WaitPolicy::default());
        let k = key("p");
        w.wait(&k, payload());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(w.wait(&k, payload()).report);
        // The payload arrived; now the component's kind is missing.
        let next = w.wait(&k, kind());
        assert_eq!(next, Next { changed: true, report: true, retry_after: Some(Duration::from_millis(500)) });
    }
}
