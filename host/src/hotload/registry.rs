//! [`Registry`]: the component of a plugin whose manifest names an OCI artifact (`oci:`), pulled
//! with the credentials of its pull Secret, verified against the manifest's and the host's
//! trusted keys, from the blob cache when it was pulled before. A failure becomes a
//! [`NotLoaded`]: the registry down or slow and a missing pull Secret wait (tried again by
//! themselves); a digest mismatch, a manifest list, an oversized layer, an unsigned or foreign-
//! signed artifact are refused. Either way the last good version keeps serving.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use parking_lot::Mutex;

use super::manifest::OciPayload;
use super::waiting::{NotLoaded, WaitReason};
use crate::kinds::ObjectKey;
use crate::oci::{BlobCache, Credentials, PullConfig, Pulled, Puller, TrustPolicy};

/// The Secret type of docker credentials (`imagePullSecrets`).
pub const DOCKER_CONFIG_SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// Its key.
pub const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// How the host pulls plugin artifacts.
#[derive(Clone, Debug, Default)]
pub struct OciSettings {
    /// Registry connections: CA bundle, time-outs (the layer limit is `--max-component-size`).
    pub pull: PullConfig,
    /// Where pulled blobs are kept (`None`: nowhere; every load pulls).
    pub cache_dir: Option<std::path::PathBuf>,
    /// Keys every OCI plugin must be signed by (one of), whatever its manifest says.
    pub trust: TrustPolicy,
}

/// Pulls the components of OCI plugins.
pub(super) struct Registry {
    puller: Puller,
    trust: TrustPolicy,
    client: kube::Client,
    /// What each plugin ConfigMap's last pull resolved to (`oci://…@sha256:…`), for its status.
    resolved: Mutex<HashMap<ObjectKey, String>>,
}

impl Registry {
    /// Pull with `settings`, components at most `max_layer_bytes`; Secrets read with `client`.
    pub(super) fn new(settings: &OciSettings, max_layer_bytes: u64, client: kube::Client) -> Result<Self, String> {
        let cache = match &settings.cache_dir {
            Some(dir) => Some(BlobCache::new(dir).map_err(|e| e.to_string())?),
            None => None,
        };
        let pull = PullConfig { max_layer_bytes, ..settings.pull.clone() };
        Ok(Self { puller: Puller::new(pull, cache)?, trust: settings.trust.clone(), client, resolved: Mutex::default() })
    }

    /// The component of `payload` for `key` (ConfigMap `uid`, content `version`: a tag is
    /// resolved once per both, and that digest kept across restarts).
    pub(super) async fn component(&self, key: &ObjectKey, uid: &str, version: &str, payload: &OciPayload) -> Result<Pulled, NotLoaded> {
        let namespace = key.namespace.clone().unwrap_or_default();
        let credentials = match &payload.pull_secret {
            Some(name) => self.credentials(&namespace, name).await?,
            None => Credentials::default(),
        };
        let reference = &payload.reference;
        let auth = credentials.for_registry(&reference.registry);
        let pin = format!("{uid}/{version}/{reference}");
        let failed = |e: crate::oci::pull::Error| match e.is_transient() {
            true => NotLoaded::Waiting(WaitReason::RegistryUnreachable { reference: reference.to_string(), error: e.to_string() }),
            false => NotLoaded::Refused(e.to_string()),
        };
        let digest = self.puller.resolve(reference, &auth, Some(&pin)).await.map_err(failed)?;
        let pinned = reference.at(&digest);
        let policy = payload.signed_by.clone().and(&self.trust);
        let pulled = self.puller.pull(&pinned, &auth, &policy).await.map_err(failed)?;
        tracing::info!(configmap = %key, artifact = %pinned, fetched = pulled.fetched, signed_by = pulled.signed_by.as_deref().unwrap_or("-"),
            pull_ms = pulled.elapsed.as_millis() as u64, verify_ms = pulled.verify_elapsed.as_millis() as u64, "OCI artifact pulled");
        self.resolved.lock().insert(key.clone(), pinned.to_string());
        Ok(pulled)
    }

    /// What `key`'s last pull resolved to.
    pub(super) fn resolved(&self, key: &ObjectKey) -> Option<String> {
        self.resolved.lock().get(key).cloned()
    }

    /// `key` is gone.
    pub(super) fn forget(&self, key: &ObjectKey) {
        self.resolved.lock().remove(key);
    }

    async fn credentials(&self, namespace: &str, name: &str) -> Result<Credentials, NotLoaded> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = match api.get_opt(name).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(WaitReason::PullSecretMissing { namespace: namespace.into(), name: name.into() }.into()),
            Err(e) => {
                let error = format!("reading pull Secret {namespace}/{name}: {e}");
                return Err(WaitReason::RegistryUnreachable { reference: format!("v1/Secret/{namespace}/{name}"), error }.into());
            }
        };
        if secret.type_.as_deref() != Some(DOCKER_CONFIG_SECRET_TYPE) {
            return Err(NotLoaded::Refused(format!(
                "pull Secret {namespace}/{name} has type {:?}, not {DOCKER_CONFIG_SECRET_TYPE}",
                secret.type_.unwrap_or_default()
            )));
        }
        let json = secret
            .data
            .as_ref()
            .and_then(|d| d.get(DOCKER_CONFIG_KEY))
            .ok_or_else(|| NotLoaded::Refused(format!("pull Secret {namespace}/{name} has no data.{DOCKER_CONFIG_KEY}")))?;
        Credentials::parse(&json.0).map_err(|e| NotLoaded::Refused(format!("pull Secret {namespace}/{name}: {e}")))
    }
}
