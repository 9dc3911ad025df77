//! [`Puller`]: a plugin's component from an OCI registry, every digest checked here (not taken on
//! the client's word), a manifest list refused, the layer's size checked against the limit before
//! it is read (and the stream cut at its declared size), a redirect to another host refused
//! (manifests and blobs are fetched by a client of its own; `oci-client` authenticates, resolves
//! tags and pushes), the whole pull within a time-out, and
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
    /// What pulls manifests and blobs: redirects followed only on the registry's own host.
    http: reqwest::Client,
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
        let http = same_host_client(&config)?;
        Ok(Self { client, http, config, cache })
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
                let wasm = self.layer(reference, &layer, size, auth).await?;
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
        let path = format!("manifests/{digest}");
        let bytes = self
            .fetch(reference, &path, &accepted, auth, MAX_MANIFEST_BYTES)
            .await?
            .ok_or_else(|| Error::Refused { reference: name.clone(), reason: "manifest unknown to the registry".into() })?;
        let actual = digest_of(&bytes);
        if actual != digest {
            return Err(Error::DigestMismatch { reference: name, what: "manifest", expected: digest.into(), actual });
        }
        Ok(bytes.to_vec())
    }

    /// The layer's bytes, read only up to its declared `size` and checked against its digest.
    async fn layer(&self, reference: &OciRef, layer: &OciDescriptor, size: u64, auth: &RegistryAuth) -> Result<Vec<u8>> {
        let name = reference.to_string();
        let path = format!("blobs/{}", layer.digest);
        let wasm = self
            .fetch(reference, &path, &["*/*"], auth, size)
            .await?
            .ok_or_else(|| Error::Refused { reference: name.clone(), reason: format!("blob {} unknown to the registry", layer.digest) })?;
        let actual = digest_of(&wasm);
        if actual != layer.digest {
            return Err(Error::DigestMismatch { reference: name, what: "layer", expected: layer.digest.clone(), actual });
        }
        Ok(wasm)
    }

    /// GET `/v2/<repository>/<path>` of `reference`'s registry, its body read up to `cap` bytes
    /// (more: [`Error::TooLarge`]); `None` if the registry does not know it (404).
    async fn fetch(&self, reference: &OciRef, path: &str, accept: &[&str], auth: &RegistryAuth, cap: u64) -> Result<Option<Vec<u8>>> {
        let name = reference.to_string();
        let scheme = if self.config.insecure_http { "http" } else { "https" };
        let url = format!("{scheme}://{}/v2/{}/{path}", reference.registry, reference.repository);
        let token = self
            .client
            .auth(&reference.client_ref(), auth, oci_client::RegistryOperation::Pull)
            .await
            .map_err(|e| classify(reference, "authentication", path, e))?;
        let mut request = self.http.get(&url).header(reqwest::header::ACCEPT, accept.join(", "));
        request = match (token, auth) {
            (Some(token), _) => request.bearer_auth(token),
            (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, _) => request,
        };
        let transport = |e: reqwest::Error| match e.is_redirect() {
            true => Error::Refused { reference: name.clone(), reason: error_chain(&e) },
            false => Error::Unreachable { registry: reference.registry.clone(), reference: name.clone(), reason: error_chain(&e) },
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if status.is_server_error() {
            let reason = format!("GET {path}: {status}");
            return Err(Error::Unreachable { registry: reference.registry.clone(), reference: name, reason });
        }
        if !status.is_success() {
            return Err(Error::Refused { reference: name, reason: format!("GET {path}: {status}") });
        }
        if let Some(length) = response.content_length().filter(|&l| l > cap) {
            return Err(Error::TooLarge { reference: name, size: length, limit: cap });
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(transport)?;
            if body.len() as u64 + chunk.len() as u64 > cap {
                return Err(Error::TooLarge { reference: name, size: body.len() as u64 + chunk.len() as u64, limit: cap });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Some(body))
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
                match self.fetch(&signatures, &format!("manifests/{tag}"), &accepted, auth, MAX_MANIFEST_BYTES).await? {
                    Some(bytes) => (digest_of(&bytes), bytes),
                    None => return Err(verify::Error::Unsigned { artifact, tag, keys: policy.describe() }.into()),
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
                    let p = self.layer(&signatures, layer, size, auth).await?;
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

/// An HTTP client that follows a redirect only to the host and port it was sent to: a registry
/// sending the host elsewhere is refused, whatever the bytes there would be.
fn same_host_client(config: &PullConfig) -> Result<reqwest::Client, String> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let origin = attempt.previous().first().map(|u| (u.host_str().map(str::to_string), u.port_or_known_default()));
        let target = (attempt.url().host_str().map(str::to_string), attempt.url().port_or_known_default());
        if origin.as_ref() != Some(&target) {
            let to = attempt.url().host_str().unwrap_or("?").to_string();
            attempt.error(format!("the registry redirected to another host ({to}); refused"))
        } else if attempt.previous().len() > 5 {
            attempt.error("more than 5 redirects")
        } else {
            attempt.follow()
        }
    });
    let certs = config.ca_pem.iter().map(|pem| reqwest::Certificate::from_pem(pem)).collect::<Result<Vec<_>, _>>();
    reqwest::Client::builder()
        .redirect(policy)
        .connect_timeout(config.connect_timeout)
        .read_timeout(config.timeout)
        .tls_certs_merge(certs.map_err(|e| format!("CA certificate: {e}"))?)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
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
