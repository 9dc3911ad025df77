//! Plugin payloads as OCI artifacts (the CNCF Wasm OCI artifact layout), pulled from a registry,
//! verified and cached by digest.
//!
//! - [`OciRef`]: `oci://REGISTRY/REPO@sha256:…` (or `:TAG`, resolved once to a digest);
//! - [`auth`]: registry credentials from a `kubernetes.io/dockerconfigjson` Secret's content;
//! - [`pull`]: [`Puller`] fetches the manifest and the `application/wasm` layer with
//!   `oci-client`, checking every digest itself, refusing a manifest list, a layer over the size
//!   limit (before reading it whole), a slow registry (time-outs), a redirect to another host;
//! - [`verify`]: cosign's key-based signatures (`sha256-<hex>.sig`, simple signing, ECDSA P-256)
//!   and [`verify::sign`] producing the same format;
//! - [`cache`]: blobs on disk by digest, so a host restart pulls nothing again.

pub mod auth;
pub mod cache;
pub mod pull;
pub mod push;
pub mod verify;

use std::fmt;

pub use auth::Credentials;
pub use cache::BlobCache;
pub use pull::{PullConfig, Pulled, Puller};
pub use verify::TrustPolicy;

/// The scheme that marks a payload as an OCI artifact.
pub const SCHEME: &str = "oci://";
/// The config media type of a Wasm OCI artifact (CNCF TAG Runtime, Wasm OCI artifact layout).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the one layer of a Wasm OCI artifact: the component itself.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// An OCI image manifest.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// A Docker v2 image manifest (cosign writes its signatures with it by default).
pub const DOCKER_MANIFEST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// An OCI image index (a manifest list): refused as a plugin payload.
pub const OCI_INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// A Docker manifest list: refused as a plugin payload.
pub const DOCKER_LIST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// What is wrong with an OCI reference.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RefError {
    /// It does not start with `oci://`.
    #[error("{0:?} is not an OCI reference (oci://REGISTRY/REPOSITORY@sha256:<64 hex> or :TAG)")]
    NotOci(String),
    /// It does not parse as a registry reference.
    #[error("{reference:?} is not a valid OCI reference: {reason}")]
    Invalid {
        /// The reference as written.
        reference: String,
        /// Why.
        reason: String,
    },
    /// It names neither a tag nor a digest, or the digest is not sha256.
    #[error("{0:?} names no sha256 digest and no tag")]
    NoVersion(String),
}

/// An `oci://` reference to a plugin artifact: a registry, a repository, and a digest or a tag.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OciRef {
    /// `host[:port]`.
    pub registry: String,
    /// `path/to/repo`.
    pub repository: String,
    /// `sha256:<64 lowercase hex>`, if the reference pins one.
    pub digest: Option<String>,
    /// The tag, if the reference names one (and no digest).
    pub tag: Option<String>,
}

impl OciRef {
    /// Parse `oci://REGISTRY/REPO@sha256:…` or `oci://REGISTRY/REPO:TAG`. The registry must be
    /// explicit (no Docker Hub default): a plugin names where it comes from.
    pub fn parse(text: &str) -> Result<Self, RefError> {
        let rest = text.strip_prefix(SCHEME).ok_or_else(|| RefError::NotOci(text.to_string()))?;
        let invalid = |reason: &str| RefError::Invalid { reference: text.to_string(), reason: reason.to_string() };
        let (registry, _) = rest.split_once('/').ok_or_else(|| invalid("no repository after the registry"))?;
        if !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
            return Err(invalid("the first path element must be a registry host (with a dot or a port)"));
        }
        let parsed = oci_client::Reference::try_from(rest).map_err(|e| invalid(&e.to_string()))?;
        let digest = parsed.digest().map(str::to_string);
        if let Some(d) = &digest
            && !is_sha256(d)
        {
            return Err(invalid("the digest must be sha256:<64 lowercase hex>"));
        }
        let tag = if digest.is_some() { None } else { parsed.tag().map(str::to_string) };
        if digest.is_none() && tag.is_none() {
            return Err(RefError::NoVersion(text.to_string()));
        }
        Ok(Self { registry: parsed.registry().to_string(), repository: parsed.repository().to_string(), digest, tag })
    }

    /// The same repository at `digest`.
    pub fn at(&self, digest: &str) -> Self {
        Self { digest: Some(digest.to_string()), tag: None, ..self.clone() }
    }

    /// The same repository at `tag`.
    pub fn tagged(&self, tag: &str) -> Self {
        Self { digest: None, tag: Some(tag.to_string()), ..self.clone() }
    }

    /// As `oci-client` addresses it.
    pub fn client_ref(&self) -> oci_client::Reference {
        match (&self.digest, &self.tag) {
            (Some(d), _) => oci_client::Reference::with_digest(self.registry.clone(), self.repository.clone(), d.clone()),
            (None, tag) => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                tag.clone().unwrap_or_else(|| "latest".into()),
            ),
        }
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        match (&self.digest, &self.tag) {
            (Some(d), _) => write!(f, "@{d}"),
            (None, Some(t)) => write!(f, ":{t}"),
            (None, None) => Ok(()),
        }
    }
}

/// `sha256:<64 lowercase hex>`.
pub fn is_sha256(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_parse_with_a_digest_or_a_tag() {
        let r = OciRef::parse(&format!("oci://127.0.0.1:5000/plugins/podset@{D}")).unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.digest.as_deref(), r.tag.as_deref()),
            ("127.0.0.1:5000", "plugins/podset", Some(D), None)
        );
        assert_eq!(r.to_string(), format!("oci://127.0.0.1:5000/plugins/podset@{D}"));
        let t = OciRef::parse("oci://registry.example.com/podset:v1").unwrap();
        assert_eq!((t.digest.as_deref(), t.tag.as_deref()), (None, Some("v1")));
        assert_eq!(t.at(D).to_string(), format!("oci://registry.example.com/podset@{D}"));
    }

    #[test]
    fn bad_references_are_named() {
        assert!(matches!(OciRef::parse("https://x.io/a@sha256:00"), Err(RefError::NotOci(_))));
        assert!(matches!(OciRef::parse("oci://podset:v1"), Err(RefError::Invalid { .. })));
        assert!(matches!(OciRef::parse("oci://library/podset:v1"), Err(RefError::Invalid { .. })), "no implicit Docker Hub");
        assert!(matches!(OciRef::parse("oci://x.io/a@sha512:00"), Err(RefError::Invalid { .. })));
        let upper = format!("oci://x.io/a@{}", D.to_uppercase().replace("SHA256", "sha256"));
        assert!(OciRef::parse(&upper).is_err());
    }

    #[test]
    fn digests() {
        assert!(is_sha256(D));
        assert!(!is_sha256("sha256:abc"));
        assert_eq!(digest_of(b""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
