//! [`Puller`]: a plugin's component from an OCI registry, every digest checked here (not taken on
//! the client's word), a manifest list refused, the layer's size checked against the limit before
//! it is read (and the stream cut at its declared size), the whole pull within a time-out, and
//! every verified blob kept in the [`BlobCache`] (a second pull of the same digest reads nothing
//! from the network).

use std::time::{Duration, Instant};

use futures::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use super::verify::{self, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, TrustPolicy};
use super::{
    BlobCache, DOCKER_LIST_MEDIA_TYPE, DOCKER_MANIFEST_MEDIA_TYPE, OCI_INDEX_MEDIA_TYPE, OCI_MANIFEST_MEDIA_TYPE, OciRef,
    WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, digest_of, is_sha256,
};

/// Largest manifest accepted (the distribution registry's own limit is 4 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The registry could not be reached or answered with a server error: worth trying again.
    #[error("registry {registry} unreachable while pulling {reference}: {reason}")]
    Unreachable {
        /// `host[:port]`.
        registry: String,
        /// The artifact.
        reference: String,
        /// What failed.
        reason: String,
    },
    /// The pull took longer than the time-out.
    #[error("pulling {reference} took longer than {after:?}; the registry is too slow")]
    TimedOut {
        /// The artifact.
        reference: String,
        /// The time-out.
        after: Duration,
    },
    /// The registry refused the request (not found, unauthorized, ...).
    #[error("registry refused {reference}: {reason}")]
    Refused {
        /// The artifact.
        reference: String,
        /// What the registry said.
        reason: String,
    },
    /// Bytes do not match the digest that names them.
    #[error("digest mismatch for the {what} of {reference}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The artifact.
        reference: String,
        /// `manifest` or `layer`.
        what: &'static str,
        /// The digest that names it.
        expected: String,
        /// The digest of the bytes received.
        actual: String,
    },
    /// The reference names a manifest list / image index.
    #[error("{reference} is a manifest list ({media_type}); a plugin must reference one Wasm artifact manifest")]
    ManifestList {
        /// The artifact.
        reference: String,
        /// Its media type.
        media_type: String,
    },
    /// The manifest is not a Wasm OCI artifact.
    #[error("{reference} is not a Wasm OCI artifact (config {WASM_CONFIG_MEDIA_TYPE}, one layer {WASM_LAYER_MEDIA_TYPE}): {detail}")]
    NotWasm {
        /// The artifact.
        reference: String,
        /// What is different.
        detail: String,
    },
    /// The layer is over the size limit.
    #[error("the layer of {reference} is {size} bytes, over the {limit}-byte limit; refused before reading it")]
    TooLarge {
        /// The artifact.
        reference: String,
        /// Its (declared or received) size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Signature verification refused it.
    #[error(transparent)]
    Signature(#[from] verify::Error),
}

impl Error {
    /// Whether trying again later may succeed by itself (the registry down or slow).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Unreachable { .. } | Error::TimedOut { .. })
    }
}

/// A result whose error is a pull's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the host talks to registries.
#[derive(Clone, Debug)]
pub struct PullConfig {
    /// Extra CA certificates (PEM) trusted for registries' TLS, beside the system's.
    pub ca_pem: Vec<Vec<u8>>,
    /// Longest a whole pull (resolve, manifest, signature, layer) may take.
    pub timeout: Duration,
    /// Longest a connection may take to open.
    pub connect_timeout: Duration,
    /// Largest layer accepted.
    pub max_layer_bytes: u64,
    /// Plain HTTP instead of TLS (for tests against a registry without TLS only).
    pub insecure_http: bool,
}

impl Default for PullConfig {
    fn default() -> Self {
        Self {
            ca_pem: Vec::new(),
            timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            max_layer_bytes: crate::plugin::limits::MAX_COMPONENT_SIZE_CAP.bytes(),
            insecure_http: false,
        }
    }
}

/// A component pulled and verified.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The artifact manifest's digest (what a tag resolved to).
    pub digest: String,
    /// The layer's digest: `sha256:` of the component.
    pub layer_digest: String,
    /// The component.
    pub wasm: Vec<u8>,
    /// Blobs read from the network (0: all from the cache).
    pub fetched: usize,
    /// The trusted key that signed it, if signatures were required.
    pub signed_by: Option<String>,
    /// How long the pull took, and of that the signature check.
    pub elapsed: Duration,
    /// How long verifying the signature took (network included).
    pub verify_elapsed: Duration,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    media_type: Option<String>,
    config: Option<OciDescriptor>,
    #[serde(default)]
    layers: Vec<OciDescriptor>,
    manifests: Option<serde_json::Value>,
}

/// Pulls plugin artifacts.
pub struct Puller {
    client: oci_client::Client,
    config: PullConfig,
    cache: Option<BlobCache>,
}

impl Puller {
    /// A puller with `config`, keeping blobs in `cache`.
    pub fn new(config: PullConfig, cache: Option<BlobCache>) -> Result<Self, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client_config = ClientConfig {
            protocol: if config.insecure_http { ClientProtocol::Http } else { ClientProtocol::Https },
            extra_root_certificates: config
                .ca_pem
                .iter()
                .map(|pem| Certificate { encoding: CertificateEncoding::Pem, data: pem.clone() })
                .collect(),
            platform_resolver: None,
            connect_timeout: Some(config.connect_timeout),
            read_timeout: Some(config.timeout),
            ..Default::default()
        };
        let client = oci_client::Client::try_from(client_config).map_err(|e| format!("OCI client: {e}"))?;
        Ok(Self { client, config, cache })
    }

    /// The underlying client (pushes by the CLI).
    pub fn client(&self) -> &oci_client::Client {
        &self.client
    }

    /// The digest `reference` names: its own, or its tag's now (remembered under `pin`, so the
    /// same `pin` resolves to the same digest later, across restarts, whatever the tag does).
    pub async fn resolve(&self, reference: &OciRef, auth: &RegistryAuth, pin: Option<&str>) -> Result<String> {
        if let Some(d) = &reference.digest {
            return Ok(d.clone());
        }
        if let Some(d) = pin.and_then(|p| self.cache.as_ref()?.tag(p)) {
            return Ok(d);
        }
        let name = reference.to_string();
        let digest = self.timed(&name, self.client.fetch_manifest_digest(&reference.client_ref(), auth)).await?;
        if !is_sha256(&digest) {
            return Err(Error::Refused { reference: name, reason: format!("the registry resolved the tag to {digest:?}") });
        }
        if let (Some(p), Some(cache)) = (pin, &self.cache) {
            cache.set_tag(p, &digest);
        }
        Ok(digest)
    }

    /// Pull the component of `reference` (its digest resolved: [`Puller::resolve`]), refusing it
    /// unless `policy` is empty or one of its keys signed it.
    pub async fn pull(&self, reference: &OciRef, auth: &RegistryAuth, policy: &TrustPolicy) -> Result<Pulled> {
        let started = Instant::now();
        let name = reference.to_string();
        let work = self.pull_inner(reference, auth, policy, started);
        tokio::time::timeout(self.config.timeout, work)
            .await
            .map_err(|_| Error::TimedOut { reference: name, after: self.config.timeout })?
    }

    async fn pull_inner(&self, reference: &OciRef, auth: &RegistryAuth, policy: &TrustPolicy, started: Instant) -> Result<Pulled> {
        let digest = reference
            .digest
            .clone()
            .ok_or_else(|| Error::Refused { reference: reference.to_string(), reason: "not resolved to a digest".into() })?;
        let name = reference.to_string();
        let mut fetched = 0;
        let manifest_bytes = self.manifest(reference, &digest, auth, &mut fetched).await?;
        let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
            .map_err(|e| Error::NotWasm { reference: name.clone(), detail: format!("the manifest does not parse: {e}") })?;
        let media_type = manifest.media_type.clone().unwrap_or_default();
        if manifest.manifests.is_some() || media_type == OCI_INDEX_MEDIA_TYPE || media_type == DOCKER_LIST_MEDIA_TYPE {
            return Err(Error::ManifestList { reference: name, media_type });
        }
        let layer = wasm_layer(&name, &manifest)?;
        let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
        if size > self.config.max_layer_bytes {
            return Err(Error::TooLarge { reference: name, size, limit: self.config.max_layer_bytes });
        }
        let verify_started = Instant::now();
        let signed_by = match policy.is_empty() {
            true => None,
            false => Some(self.verify(reference, &digest, auth, policy, &mut fetched).await?),
        };
        let verify_elapsed = verify_started.elapsed();
        let wasm = match self.cache.as_ref().and_then(|c| c.get(&layer.digest, size)) {
            Some(wasm) => wasm,
            None => {
                fetched += 1;
                let wasm = self.layer(reference, &layer, size).await?;
                if let Some(cache) = &self.cache {
                    cache.put(&layer.digest, &wasm);
                }
                wasm
            }
        };
        if let Some(cache) = &self.cache {
            cache.put(&digest, &manifest_bytes);
        }
        Ok(Pulled { digest, layer_digest: layer.digest, wasm, fetched, signed_by, elapsed: started.elapsed(), verify_elapsed })
    }

    /// The manifest of `digest` (cached, or pulled and checked against it).
    async fn manifest(&self, reference: &OciRef, digest: &str, auth: &RegistryAuth, fetched: &mut usize) -> Result<Vec<u8>> {
        if let Some(bytes) = self.cache.as_ref().and_then(|c| c.get(digest, MAX_MANIFEST_BYTES)) {
            return Ok(bytes);
        }
        *fetched += 1;
        let accepted = [OCI_MANIFEST_MEDIA_TYPE, DOCKER_MANIFEST_MEDIA_TYPE, OCI_INDEX_MEDIA_TYPE, DOCKER_LIST_MEDIA_TYPE];
        let name = reference.to_string();
        let (bytes, _) = self
            .client
            .pull_manifest_raw(&reference.at(digest).client_ref(), auth, &accepted)
            .await
            .map_err(|e| classify(reference, "manifest", digest, e))?;
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(Error::TooLarge { reference: name, size: bytes.len() as u64, limit: MAX_MANIFEST_BYTES });
        }
        let actual = digest_of(&bytes);
        if actual != digest {
            return Err(Error::DigestMismatch { reference: name, what: "manifest", expected: digest.into(), actual });
        }
        Ok(bytes.to_vec())
    }

    /// The layer's bytes, read only up to its declared `size` and checked against its digest.
    async fn layer(&self, reference: &OciRef, layer: &OciDescriptor, size: u64) -> Result<Vec<u8>> {
        let name = reference.to_string();
        let mut stream = self
            .client
            .pull_blob_stream(&reference.client_ref(), layer)
            .await
            .map_err(|e| classify(reference, "layer", &layer.digest, e))?;
        if let Some(length) = stream.content_length.filter(|&l| l > size) {
            return Err(Error::TooLarge { reference: name, size: length, limit: size });
        }
        let mut wasm = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        let mut failed = None;
        while let Some(chunk) = stream.stream.next().await {
            match chunk {
                Ok(chunk) => {
                    if wasm.len() as u64 + chunk.len() as u64 > size {
                        return Err(Error::TooLarge { reference: name, size: wasm.len() as u64 + chunk.len() as u64, limit: size });
                    }
                    wasm.extend_from_slice(&chunk);
                }
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        let actual = digest_of(&wasm);
        if wasm.len() as u64 == size && actual != layer.digest {
            return Err(Error::DigestMismatch { reference: name, what: "layer", expected: layer.digest.clone(), actual });
        }
        if let Some(reason) = failed {
            return Err(Error::Unreachable { registry: reference.registry.clone(), reference: name, reason });
        }
        if actual != layer.digest {
            return Err(Error::DigestMismatch { reference: name, what: "layer", expected: layer.digest.clone(), actual });
        }
        Ok(wasm)
    }

    /// Check cosign signatures of `digest` against `policy`: the trusted key that signed it.
    async fn verify(
        &self,
        reference: &OciRef,
        digest: &str,
        auth: &RegistryAuth,
        policy: &TrustPolicy,
        fetched: &mut usize,
    ) -> Result<String> {
        let artifact = reference.at(digest).to_string();
        let tag = verify::signature_tag(digest);
        let signatures = reference.tagged(&tag);
        // A signature verified before is read from the cache: a restart needs no registry.
        let pin = format!("{}/{}", signatures, "signature");
        let cached = self.cache.as_ref().and_then(|c| Some((c.tag(&pin)?, c)));
        let (sig_digest, manifest) = match cached.and_then(|(d, c)| Some((d.clone(), c.get(&d, MAX_MANIFEST_BYTES)?))) {
            Some(found) => found,
            None => {
                *fetched += 1;
                let accepted = [OCI_MANIFEST_MEDIA_TYPE, DOCKER_MANIFEST_MEDIA_TYPE];
                match self.client.pull_manifest_raw(&signatures.client_ref(), auth, &accepted).await {
                    Ok((bytes, _)) if bytes.len() as u64 <= MAX_MANIFEST_BYTES => (digest_of(&bytes), bytes.to_vec()),
                    Ok(_) => return Err(Error::TooLarge { reference: signatures.to_string(), size: 0, limit: MAX_MANIFEST_BYTES }),
                    Err(e) if not_found(&e) => {
                        return Err(verify::Error::Unsigned { artifact, tag, keys: policy.describe() }.into());
                    }
                    Err(e) => return Err(classify(reference, "signature", &tag, e)),
                }
            }
        };
        let parsed: Manifest = serde_json::from_slice(&manifest)
            .map_err(|e| Error::Refused { reference: signatures.to_string(), reason: format!("signature manifest: {e}") })?;
        let layers: Vec<&OciDescriptor> = parsed.layers.iter().filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE).collect();
        let mut detail = "no simple-signing layer".to_string();
        for layer in &layers {
            let Some(signature) = layer.annotations.as_ref().and_then(|a| a.get(SIGNATURE_ANNOTATION)) else {
                detail = format!("a layer without the {SIGNATURE_ANNOTATION} annotation");
                continue;
            };
            let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
            if size > verify::MAX_PAYLOAD_BYTES {
                detail = format!("a {size}-byte payload (over {} bytes)", verify::MAX_PAYLOAD_BYTES);
                continue;
            }
            let payload = match self.cache.as_ref().and_then(|c| c.get(&layer.digest, size)) {
                Some(p) => p,
                None => {
                    *fetched += 1;
                    let p = self.layer(&signatures, layer, size).await?;
                    if let Some(c) = &self.cache {
                        c.put(&layer.digest, &p);
                    }
                    p
                }
            };
            match policy.check(digest, &payload, signature) {
                Ok(key) => {
                    if let Some(c) = &self.cache {
                        c.put(&sig_digest, &manifest);
                        c.set_tag(&pin, &sig_digest);
                    }
                    return Ok(key);
                }
                Err(why) => detail = why,
            }
        }
        Err(verify::Error::NotTrusted { artifact, keys: policy.describe(), found: layers.len(), detail }.into())
    }

    async fn timed<T>(&self, reference: &str, work: impl Future<Output = oci_client::errors::Result<T>>) -> Result<T> {
        match tokio::time::timeout(self.config.timeout, work).await {
            Err(_) => Err(Error::TimedOut { reference: reference.to_string(), after: self.config.timeout }),
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => {
                let r = OciRef::parse(&format!("{}{reference}", if reference.starts_with(super::SCHEME) { "" } else { super::SCHEME }));
                match r {
                    Ok(r) => Err(classify(&r, "tag", reference, e)),
                    Err(_) => Err(Error::Refused { reference: reference.to_string(), reason: e.to_string() }),
                }
            }
        }
    }
}

/// The one `application/wasm` layer of a Wasm artifact manifest.
fn wasm_layer(reference: &str, manifest: &Manifest) -> Result<OciDescriptor> {
    let not_wasm = |detail: String| Error::NotWasm { reference: reference.to_string(), detail };
    let config = manifest.config.as_ref().ok_or_else(|| not_wasm("no config".into()))?;
    if config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(not_wasm(format!("config media type {}", config.media_type)));
    }
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_LAYER_MEDIA_TYPE && is_sha256(&layer.digest) && layer.size >= 0 => Ok(layer.clone()),
        [layer] => Err(not_wasm(format!("layer media type {} (digest {})", layer.media_type, layer.digest))),
        layers => Err(not_wasm(format!("{} layers", layers.len()))),
    }
}

fn not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                oci_client::errors::OciErrorCode::ManifestUnknown
                    | oci_client::errors::OciErrorCode::NotFound
                    | oci_client::errors::OciErrorCode::NameUnknown
            )
        }),
        OciDistributionError::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}

/// A client error as a pull error: network and server errors are transient, digest errors
/// mismatches, the rest refusals.
fn classify(reference: &OciRef, what: &'static str, expected: &str, e: OciDistributionError) -> Error {
    let name = reference.to_string();
    match e {
        OciDistributionError::DigestError(oci_client::errors::DigestError::VerificationError { expected, actual }) => {
            Error::DigestMismatch { reference: name, what, expected, actual }
        }
        OciDistributionError::RequestError(_) | OciDistributionError::IoError(_) => {
            Error::Unreachable { registry: reference.registry.clone(), reference: name, reason: error_chain(&e) }
        }
        OciDistributionError::ServerError { code, .. } if code >= 500 => {
            Error::Unreachable { registry: reference.registry.clone(), reference: name, reason: e.to_string() }
        }
        other => Error::Refused { reference: name, reason: format!("{what} {expected}: {other}") },
    }
}

/// `e` and its sources, `: `-joined (reqwest hides the cause of a connect error in its source).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[(&str, &str)]) -> Manifest {
        let json = serde_json::json!({
            "schemaVersion": 2,
            "config": {"mediaType": config, "digest": digest_of(b"{}"), "size": 2},
            "layers": layers.iter().map(|(m, d)| serde_json::json!({"mediaType": m, "digest": d, "size": 4})).collect::<Vec<_>>(),
        });
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn only_a_wasm_artifact_has_a_wasm_layer() {
        let d = digest_of(b"wasm");
        assert_eq!(wasm_layer("r", &manifest(WASM_CONFIG_MEDIA_TYPE, &[(WASM_LAYER_MEDIA_TYPE, &d)])).unwrap().digest, d);
        for (config, layers, want) in [
            ("application/vnd.oci.image.config.v1+json", vec![(WASM_LAYER_MEDIA_TYPE, d.as_str())], "config media type"),
            (WASM_CONFIG_MEDIA_TYPE, vec![("application/vnd.oci.image.layer.v1.tar", d.as_str())], "layer media type"),
            (WASM_CONFIG_MEDIA_TYPE, vec![(WASM_LAYER_MEDIA_TYPE, d.as_str()); 2], "2 layers"),
            (WASM_CONFIG_MEDIA_TYPE, vec![], "0 layers"),
            (WASM_CONFIG_MEDIA_TYPE, vec![(WASM_LAYER_MEDIA_TYPE, "sha256:abc")], "layer media type"),
        ] {
            let err = wasm_layer("r", &manifest(config, &layers)).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
    }

    #[test]
    fn transient_errors_are_the_registry_being_down_or_slow() {
        let r = OciRef::parse("oci://127.0.0.1:1/x:v1").unwrap();
        let e = classify(&r, "manifest", "d", OciDistributionError::IoError(std::io::Error::other("refused")));
        assert!(e.is_transient(), "{e}");
        let e = classify(&r, "manifest", "d", OciDistributionError::ServerError { code: 503, url: "u".into(), message: "m".into() });
        assert!(e.is_transient(), "{e}");
        let e = classify(&r, "manifest", "d", OciDistributionError::ServerError { code: 401, url: "u".into(), message: "m".into() });
        assert!(!e.is_transient(), "{e}");
        assert!(Error::TimedOut { reference: "r".into(), after: Duration::from_secs(1) }.is_transient());
        assert!(!Error::ManifestList { reference: "r".into(), media_type: OCI_INDEX_MEDIA_TYPE.into() }.is_transient());
    }
}
