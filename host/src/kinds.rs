//! Names of API types and objects, and their resolution to API endpoints through discovery.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};

/// Errors resolving a kind.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kind's `apiVersion` is not `group/version` or `version`.
    #[error(transparent)]
    InvalidApiVersion(#[from] wasmloop_model::InvalidApiVersion),
    /// The API server does not serve the kind.
    #[error("kind {0} is not served by the API server (is its CRD installed?): {1}")]
    NotServed(KindRef, #[source] kube::Error),
    /// Discovery failed for a transient reason, retries included.
    #[error("discovering kind {0} failed: the API server did not answer after retries: {1}")]
    Discovery(KindRef, #[source] kube::Error),
}

/// A result whose error is a kind that did not resolve.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use wasmloop_model::{KindRef, ObjectKey};

/// `kind`'s group, version and kind, as kube's discovery takes them.
pub fn gvk(kind: &KindRef) -> Result<GroupVersionKind> {
    let (g, v) = kind.group_version()?;
    Ok(GroupVersionKind::gvk(g, v, &kind.kind))
}

/// A kind resolved through discovery: where it is served and whether it is namespaced.
#[derive(Clone, Debug)]
pub struct ResolvedKind {
    /// The kind as asked for.
    pub kind: KindRef,
    /// Its group, version, plural resource name and kind, as kube's `Api` takes them.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// Resolves kinds by group/version/kind through API discovery (CRDs included), caching answers.
#[derive(Clone)]
pub struct KindResolver {
    client: kube::Client,
    cache: Arc<parking_lot::Mutex<HashMap<KindRef, ResolvedKind>>>,
}

impl KindResolver {
    /// A resolver asking the API server behind `client`, with an empty cache.
    pub fn new(client: kube::Client) -> Self {
        Self { client, cache: Default::default() }
    }

    /// The client the resolver asks through.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Resolve `kind`, asking the API server only the first time.
    pub async fn resolve(&self, kind: &KindRef) -> Result<ResolvedKind> {
        if let Some(r) = self.cache.lock().get(kind) {
            return Ok(r.clone());
        }
        let gvk = gvk(kind)?;
        // A dropped connection or a 5xx/429 answer is not "not served": retried for ~15 s first.
        let retry = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(5))
            .with_max_times(6);
        let discovered = (|| discovery::pinned_kind(&self.client, &gvk)).retry(retry).when(is_transient).sleep(tokio::time::sleep).await;
        let (resource, caps) =
            discovered.map_err(|e| if is_transient(&e) { Error::Discovery(kind.clone(), e) } else { Error::NotServed(kind.clone(), e) })?;
        let resolved = ResolvedKind { kind: kind.clone(), resource, namespaced: caps.scope == Scope::Namespaced };
        self.cache.lock().insert(kind.clone(), resolved.clone());
        Ok(resolved)
    }

    /// Forget a kind (e.g. after its CRD was removed).
    pub fn forget(&self, kind: &KindRef) {
        self.cache.lock().remove(kind);
    }
}

/// Errors a later attempt may not meet: no answer, or the API server busy or failing.
fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Kubernetes' own kinds: API group (any version), kind, resource (plural), namespaced. What
/// offline runs and `wasmloop pack --rbac` know without discovery (discovery is the authority).
const BUILTIN: &[(&str, &str, &str, bool)] = &[
    ("", "Namespace", "namespaces", false),
    ("", "Node", "nodes", false),
    ("", "PersistentVolume", "persistentvolumes", false),
    ("", "ComponentStatus", "componentstatuses", false),
    ("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", false),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding", "clusterrolebindings", false),
    ("apiextensions.k8s.io", "CustomResourceDefinition", "customresourcedefinitions", false),
    ("apiregistration.k8s.io", "APIService", "apiservices", false),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", false),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", false),
    ("storage.k8s.io", "StorageClass", "storageclasses", false),
    ("storage.k8s.io", "CSIDriver", "csidrivers", false),
    ("storage.k8s.io", "CSINode", "csinodes", false),
    ("storage.k8s.io", "VolumeAttachment", "volumeattachments", false),
    ("scheduling.k8s.io", "PriorityClass", "priorityclasses", false),
    ("node.k8s.io", "RuntimeClass", "runtimeclasses", false),
    ("networking.k8s.io", "IngressClass", "ingressclasses", false),
    ("certificates.k8s.io", "CertificateSigningRequest", "certificatesigningrequests", false),
    ("policy", "PodSecurityPolicy", "podsecuritypolicies", false),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema", "flowschemas", false),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration", "prioritylevelconfigurations", false),
    ("", "Pod", "pods", true),
    ("", "ConfigMap", "configmaps", true),
    ("", "Secret", "secrets", true),
    ("", "Service", "services", true),
    ("", "ServiceAccount", "serviceaccounts", true),
    ("", "Endpoints", "endpoints", true),
    ("", "Event", "events", true),
    ("", "PersistentVolumeClaim", "persistentvolumeclaims", true),
    ("", "ReplicationController", "replicationcontrollers", true),
    ("", "LimitRange", "limitranges", true),
    ("", "ResourceQuota", "resourcequotas", true),
    ("apps", "Deployment", "deployments", true),
    ("apps", "ReplicaSet", "replicasets", true),
    ("apps", "StatefulSet", "statefulsets", true),
    ("apps", "DaemonSet", "daemonsets", true),
    ("batch", "Job", "jobs", true),
    ("batch", "CronJob", "cronjobs", true),
    ("rbac.authorization.k8s.io", "Role", "roles", true),
    ("rbac.authorization.k8s.io", "RoleBinding", "rolebindings", true),
    ("coordination.k8s.io", "Lease", "leases", true),
    ("networking.k8s.io", "Ingress", "ingresses", true),
    ("networking.k8s.io", "NetworkPolicy", "networkpolicies", true),
    ("policy", "PodDisruptionBudget", "poddisruptionbudgets", true),
    ("autoscaling", "HorizontalPodAutoscaler", "horizontalpodautoscalers", true),
    ("events.k8s.io", "Event", "events", true),
];

fn builtin(kind: &KindRef) -> Option<&'static (&'static str, &'static str, &'static str, bool)> {
    let (group, _) = kind.group_version().ok()?;
    BUILTIN.iter().find(|(g, k, _, _)| *g == group && *k == kind.kind)
}

/// Whether a built-in Kubernetes kind is namespaced; `None` for kinds this table does not know
/// (CRDs). Discovery is the authority; this serves offline runs.
pub fn builtin_namespaced(kind: &KindRef) -> Option<bool> {
    builtin(kind).map(|(_, _, _, namespaced)| *namespaced)
}

/// The resource name (plural) of `kind`: Kubernetes' own from the table, else the API
/// server's default for custom resources (the lowercase kind plus `s`, `es` or `ies`, as
/// `kubebuilder` and most CRDs have it); `true` when it is that guess.
pub fn plural(kind: &KindRef) -> (String, bool) {
    if let Some((_, _, plural, _)) = builtin(kind) {
        return ((*plural).to_owned(), false);
    }
    let lower = kind.kind.to_ascii_lowercase();
    let guessed = if let Some(stem) = lower.strip_suffix('y').filter(|s| !s.ends_with(['a', 'e', 'i', 'o', 'u'])) {
        format!("{stem}ies")
    } else if ["s", "x", "z", "ch", "sh"].iter().any(|end| lower.ends_with(end)) {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    };
    (guessed, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_version_splits_core_and_named_groups() {
        assert_eq!(KindRef::new("v1", "Pod").group_version().unwrap(), ("", "v1"));
        assert_eq!(KindRef::new("apps/v1", "ReplicaSet").group_version().unwrap(), ("apps", "v1"));
        assert!(KindRef::new("", "Pod").group_version().is_err());
        assert!(KindRef::new("a/b/c", "Pod").group_version().is_err());
        assert!(KindRef::new("/v1", "Pod").group_version().is_err());
    }

    #[test]
    fn builtin_scopes() {
        assert_eq!(builtin_namespaced(&KindRef::new("v1", "Namespace")), Some(false));
        assert_eq!(builtin_namespaced(&KindRef::new("rbac.authorization.k8s.io/v1beta1", "ClusterRoleBinding")), Some(false));
        assert_eq!(builtin_namespaced(&KindRef::new("apps/v1", "ReplicaSet")), Some(true));
        assert_eq!(builtin_namespaced(&KindRef::new("wasmloop.dev/v1alpha1", "PodSet")), None);
    }

    #[test]
    fn plurals_come_from_the_table_or_the_custom_resource_rule() {
        assert_eq!(plural(&KindRef::new("networking.k8s.io/v1", "Ingress")), ("ingresses".into(), false));
        assert_eq!(plural(&KindRef::new("wasmloop.dev/v1alpha1", "PodSet")), ("podsets".into(), true));
        assert_eq!(plural(&KindRef::new("x.io/v1", "Policy")), ("policies".into(), true));
        assert_eq!(plural(&KindRef::new("x.io/v1", "Gateway")), ("gateways".into(), true));
        assert_eq!(plural(&KindRef::new("x.io/v1", "Mailbox")), ("mailboxes".into(), true));
    }

    #[test]
    fn keys_display_with_and_without_namespace() {
        let k = ObjectKey::new(KindRef::new("v1", "Pod"), Some("ns"), "p");
        assert_eq!(k.to_string(), "v1/Pod/ns/p");
        let k = ObjectKey::new(KindRef::new("v1", "Namespace"), None, "team-a");
        assert_eq!(k.to_string(), "v1/Namespace/team-a");
    }
}
