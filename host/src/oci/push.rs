//! Pushing a plugin as a Wasm OCI artifact, and a cosign-format signature of it (`wasmloop push`,
//! `wasmloop sign`; the tests' registry fixtures).

use std::collections::BTreeMap;

use oci_client::secrets::RegistryAuth;

use super::verify::{self, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE};
use super::{OCI_MANIFEST_MEDIA_TYPE, OciRef, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, digest_of};

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The registry refused or could not be reached.
    #[error("pushing to {reference}: {reason}")]
    Registry {
        /// Where.
        reference: String,
        /// What failed.
        reason: String,
    },
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] verify::Error),
}

/// A result whose error is a push's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A blob to push: its media type, bytes, and annotations.
pub struct Blob<'a> {
    /// The descriptor's media type.
    pub media_type: &'a str,
    /// The bytes.
    pub data: &'a [u8],
    /// The descriptor's annotations.
    pub annotations: BTreeMap<String, String>,
}

/// The manifest (bytes) of an artifact with `config` and `layers`.
pub fn manifest(config: &Blob<'_>, layers: &[Blob<'_>]) -> Vec<u8> {
    let descriptor = |b: &Blob<'_>| {
        let mut d = serde_json::json!({"mediaType": b.media_type, "digest": digest_of(b.data), "size": b.data.len()});
        if !b.annotations.is_empty() {
            d["annotations"] = serde_json::json!(b.annotations);
        }
        d
    };
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": descriptor(config),
        "layers": layers.iter().map(descriptor).collect::<Vec<_>>(),
    }))
    .unwrap_or_default()
}

/// The config blob of a Wasm artifact whose component is `wasm`.
pub fn wasm_config(wasm: &[u8]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"architecture": "wasm", "os": "wasip2", "layerDigests": [digest_of(wasm)]})).unwrap_or_default()
}

/// Push `blobs` and then `manifest_bytes` to `reference` (its tag, or by digest): the manifest's digest.
pub async fn push_raw(
    client: &oci_client::Client,
    reference: &OciRef,
    auth: &RegistryAuth,
    blobs: &[&[u8]],
    manifest_bytes: Vec<u8>,
    media_type: &str,
) -> Result<String> {
    let err = |e: oci_client::errors::OciDistributionError| Error::Registry { reference: reference.to_string(), reason: e.to_string() };
    let target = reference.client_ref();
    client.store_auth_if_needed(target.resolve_registry(), auth).await;
    // Authenticate for push (a blob push alone does not).
    client.auth(&target, auth, oci_client::RegistryOperation::Push).await.map_err(err)?;
    for blob in blobs {
        let digest = digest_of(blob);
        if !client.blob_exists(&target, &digest).await.map_err(err)? {
            client.push_blob(&target, blob.to_vec(), &digest).await.map_err(err)?;
        }
    }
    let digest = digest_of(&manifest_bytes);
    let content_type = http::HeaderValue::from_str(media_type)
        .map_err(|e| Error::Registry { reference: reference.to_string(), reason: format!("media type {media_type:?}: {e}") })?;
    client.push_manifest_raw(&target, manifest_bytes, content_type).await.map_err(err)?;
    Ok(digest)
}

/// Push `wasm` as a Wasm OCI artifact to `reference`: its manifest digest.
pub async fn push_wasm(client: &oci_client::Client, reference: &OciRef, auth: &RegistryAuth, wasm: &[u8]) -> Result<String> {
    let config = wasm_config(wasm);
    let layer = Blob { media_type: WASM_LAYER_MEDIA_TYPE, data: wasm, annotations: BTreeMap::new() };
    let manifest = manifest(&Blob { media_type: WASM_CONFIG_MEDIA_TYPE, data: &config, annotations: BTreeMap::new() }, &[layer]);
    push_raw(client, reference, auth, &[&config, wasm], manifest, OCI_MANIFEST_MEDIA_TYPE).await
}

/// Sign the artifact `reference@digest` with the PEM PKCS#8 P-256 key `key_pem` as cosign does:
/// a simple-signing layer with the signature annotation, at tag `sha256-<hex>.sig`. The
/// signature manifest's digest.
pub async fn sign(client: &oci_client::Client, reference: &OciRef, auth: &RegistryAuth, digest: &str, key_pem: &str) -> Result<String> {
    let payload = verify::simple_signing_payload(&format!("{}/{}", reference.registry, reference.repository), digest);
    let signature = verify::sign(key_pem, &payload)?;
    let config = serde_json::to_vec(
        &serde_json::json!({"architecture": "", "os": "", "config": {}, "rootfs": {"type": "layers", "diff_ids": [digest_of(&payload)]}}),
    )
    .unwrap_or_default();
    let layer = Blob {
        media_type: SIMPLE_SIGNING_MEDIA_TYPE,
        data: &payload,
        annotations: BTreeMap::from([(SIGNATURE_ANNOTATION.to_string(), signature)]),
    };
    let manifest =
        manifest(&Blob { media_type: "application/vnd.oci.image.config.v1+json", data: &config, annotations: BTreeMap::new() }, &[layer]);
    let target = reference.tagged(&verify::signature_tag(digest));
    push_raw(client, &target, auth, &[&config, &payload], manifest, OCI_MANIFEST_MEDIA_TYPE).await
}
