//! cosign's key-based signatures, verified by the host before it compiles anything.
//!
//! cosign (`cosign sign --key cosign.key REF@DIGEST`) stores a signature of the artifact
//! `sha256:<hex>` in the same repository under the tag `sha256-<hex>.sig`: an image manifest whose
//! layers have the media type `application/vnd.dev.cosign.simplesigning.v1+json`. Each layer is a
//! *simple signing* payload (JSON) whose `critical.image.docker-manifest-digest` names the signed
//! artifact, annotated `dev.cosignproject.cosign/signature`: base64 of an ASN.1 (DER) ECDSA-SHA256
//! signature over the payload's bytes. `cosign generate-key-pair` makes ECDSA P-256 keys; its
//! public key (`cosign.pub`) is a PEM `PUBLIC KEY` (SubjectPublicKeyInfo), what [`TrustPolicy`]
//! takes. Keyless signatures (Fulcio certificates, Rekor entries) are not verified: see
//! docs/operations.md for the design.

use base64::Engine;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{DerSignature, Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey};
use serde::Deserialize;

/// The media type of a cosign simple-signing layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding the base64 signature of a simple-signing layer.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Largest simple-signing payload read.
pub const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;

/// Why an artifact's signature is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A trusted key does not parse.
    #[error("trusted key {index} is not a PEM ECDSA P-256 public key (as `cosign generate-key-pair` writes): {reason}")]
    BadKey {
        /// Its place in the list (from 0).
        index: usize,
        /// Why.
        reason: String,
    },
    /// A signing key does not parse.
    #[error("the signing key is not a PEM PKCS#8 ECDSA P-256 private key: {0}")]
    BadSigningKey(String),
    /// No signature exists for the artifact.
    #[error("{artifact} is unsigned: no cosign signature at tag {tag}, and signatures by {keys} are required")]
    Unsigned {
        /// The artifact.
        artifact: String,
        /// The signature tag looked up.
        tag: String,
        /// The trusted keys.
        keys: String,
    },
    /// Signatures exist, none by a trusted key over this artifact.
    #[error("{artifact} is not signed by a trusted key ({keys}): {found} signature(s) found, {detail}")]
    NotTrusted {
        /// The artifact.
        artifact: String,
        /// The trusted keys.
        keys: String,
        /// How many signatures were found.
        found: usize,
        /// Why the last one was refused.
        detail: String,
    },
}

/// A result whose error is a signature's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A public key and its short name (`sha256:` of its SubjectPublicKeyInfo, 12 hex).
#[derive(Clone, Debug)]
struct TrustedKey {
    id: String,
    key: VerifyingKey,
}

/// The keys an artifact must be signed by (one of them suffices). Empty: no signature required.
#[derive(Clone, Debug, Default)]
pub struct TrustPolicy {
    keys: Vec<TrustedKey>,
}

impl TrustPolicy {
    /// The keys in `pems` (each a PEM `PUBLIC KEY`, ECDSA P-256).
    pub fn from_pems<S: AsRef<str>>(pems: &[S]) -> Result<Self> {
        let keys = pems
            .iter()
            .enumerate()
            .map(|(index, pem)| {
                let key =
                    VerifyingKey::from_public_key_pem(pem.as_ref().trim()).map_err(|e| Error::BadKey { index, reason: e.to_string() })?;
                Ok(TrustedKey { id: key_id(&key), key })
            })
            .collect::<Result<_>>()?;
        Ok(Self { keys })
    }

    /// These keys and `other`'s.
    pub fn and(mut self, other: &TrustPolicy) -> Self {
        self.keys.extend(other.keys.iter().cloned());
        self
    }

    /// Whether no signature is required.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys' short names, for messages.
    pub fn describe(&self) -> String {
        self.keys.iter().map(|k| format!("key {}", k.id)).collect::<Vec<_>>().join(", ")
    }

    /// Check one signature: `payload` (a simple-signing layer) must name `artifact_digest` and
    /// `signature_b64` must be a trusted key's signature over it. The trusted key's name.
    pub fn check(&self, artifact_digest: &str, payload: &[u8], signature_b64: &str) -> std::result::Result<String, String> {
        #[derive(Deserialize)]
        struct SimpleSigning {
            critical: Critical,
        }
        #[derive(Deserialize)]
        struct Critical {
            image: Image,
        }
        #[derive(Deserialize)]
        struct Image {
            #[serde(rename = "docker-manifest-digest")]
            digest: String,
        }
        let signed: SimpleSigning =
            serde_json::from_slice(payload).map_err(|e| format!("the simple-signing payload does not parse: {e}"))?;
        if signed.critical.image.digest != artifact_digest {
            return Err(format!("the signature is of {}, not of this artifact", signed.critical.image.digest));
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(signature_b64.trim())
            .map_err(|_| format!("the {SIGNATURE_ANNOTATION} annotation is not base64"))?;
        let signature = Signature::from_der(&der).map_err(|_| "the signature is not an ASN.1 ECDSA signature".to_string())?;
        self.keys
            .iter()
            .find(|k| k.key.verify(payload, &signature).is_ok())
            .map(|k| k.id.clone())
            .ok_or_else(|| "signed by none of the trusted keys".to_string())
    }
}

/// The short name of `key`: `sha256:` of its SubjectPublicKeyInfo, first 12 hex digits.
fn key_id(key: &VerifyingKey) -> String {
    let der = key.to_public_key_der().map(|d| d.as_bytes().to_vec()).unwrap_or_default();
    super::digest_of(&der)["sha256:".len()..][..12].to_string()
}

/// cosign's signature tag for `digest`: `sha256-<hex>.sig`.
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// The simple-signing payload cosign signs for `repository` (`registry/repo`) at `digest`.
pub fn simple_signing_payload(repository: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature"
        },
        "optional": null
    }))
    .unwrap_or_default()
}

/// Sign `payload` with the PKCS#8 PEM P-256 private key `key_pem`: base64 of the DER signature,
/// as cosign's annotation carries it.
pub fn sign(key_pem: &str, payload: &[u8]) -> Result<String> {
    let key = SigningKey::from_pkcs8_pem(key_pem.trim()).map_err(|e| Error::BadSigningKey(e.to_string()))?;
    let signature: DerSignature = key.sign(payload);
    Ok(base64::engine::general_purpose::STANDARD.encode(signature.as_bytes()))
}

#[cfg(test)]
mod tests {
    use p256::pkcs8::{EncodePrivateKey, LineEnding};

    use super::*;

    fn keypair(seed: u8) -> (String, String) {
        let key = SigningKey::from_slice(&[seed; 32]).unwrap();
        let private = key.to_pkcs8_pem(LineEnding::LF).unwrap().to_string();
        let public = key.verifying_key().to_public_key_pem(LineEnding::LF).unwrap();
        (private, public)
    }

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_signature_by_a_trusted_key_over_the_artifact_verifies() {
        let (private, public) = keypair(7);
        let policy = TrustPolicy::from_pems(&[public]).unwrap();
        let payload = simple_signing_payload("127.0.0.1:5000/p", DIGEST);
        let signature = sign(&private, &payload).unwrap();
        let id = policy.check(DIGEST, &payload, &signature).unwrap();
        assert_eq!(policy.describe(), format!("key {id}"));
    }

    #[test]
    fn foreign_altered_or_misdirected_signatures_are_refused() {
        let (private, public) = keypair(7);
        let (foreign, _) = keypair(9);
        let policy = TrustPolicy::from_pems(&[public]).unwrap();
        let payload = simple_signing_payload("r/p", DIGEST);
        let by_foreign = sign(&foreign, &payload).unwrap();
        assert_eq!(policy.check(DIGEST, &payload, &by_foreign).unwrap_err(), "signed by none of the trusted keys");
        let good = sign(&private, &payload).unwrap();
        let mut altered = payload.clone();
        altered[10] ^= 1;
        assert!(policy.check(DIGEST, &altered, &good).is_err());
        let other = DIGEST.replace('0', "f");
        let err = policy.check(&other, &payload, &good).unwrap_err();
        assert!(err.contains("not of this artifact"), "{err}");
        assert!(policy.check(DIGEST, &payload, "%%%").unwrap_err().contains("not base64"));
        assert!(policy.check(DIGEST, &payload, "AAAA").unwrap_err().contains("not an ASN.1"));
        assert!(policy.check(DIGEST, b"{}", &good).unwrap_err().contains("does not parse"));
    }

    #[test]
    fn bad_keys_are_named() {
        let err = TrustPolicy::from_pems(&["-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"]).unwrap_err();
        assert!(matches!(err, Error::BadKey { index: 0, .. }), "{err}");
        assert!(matches!(sign("nope", b"x"), Err(Error::BadSigningKey(_))));
        assert_eq!(signature_tag(DIGEST), format!("sha256-{}.sig", &DIGEST[7..]));
    }
}
