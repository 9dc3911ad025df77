//! A plugin as it arrives in ConfigMaps. `data.plugin.yaml` holds the admin's manifest (name,
//! grants, limits, queue); the wasm comes in one of two forms:
//!
//! - **referenced** (what `wasmloop pack` writes): the plugin ConfigMap holds
//!   `data.plugin.wasm.ref` (the name of a *payload* ConfigMap in the same namespace) and
//!   `data.plugin.wasm.digest` (`sha256:<64 lowercase hex>` of the decompressed component). The
//!   payload ConfigMap is `immutable: true`, labelled `wasmloop.dev/plugin-payload=true` (not
//!   `wasmloop.dev/plugin`) and holds the wasm in `binaryData` as below. A manifest change is a
//!   small write; the payload is read, decompressed and hashed only when its digest is new.
//!   A payload too large for one ConfigMap (1 MiB) is **split**: `data.plugin.wasm.ref` then lists
//!   the payload ConfigMaps in order, separated by commas (`p-wasm-0123456789ab-1-of-3,…`); each
//!   is labelled and immutable as above and holds one consecutive slice of the same compressed
//!   stream under the same `binaryData` key, annotated `wasmloop.dev/plugin-part: "<i>/<n>"` and
//!   `wasmloop.dev/plugin-wasm-digest`. The digest covers the whole decompressed component: the
//!   parts are read together, and a missing, foreign or altered part refuses the version as a
//!   whole (the last good version keeps serving).
//! - **inline** (the older form, still accepted): `binaryData` of the plugin ConfigMap itself holds
//!   `plugin.wasm`, `plugin.wasm.zst` or `plugin.wasm.gz`.

use std::io::Read;

use k8s_openapi::api::core::v1::ConfigMap;
use sha2::{Digest, Sha256};

pub use crate::labels::{PAYLOAD_LABEL, PLUGIN_LABEL};
/// The annotation where the host reports what it loaded, or why it refused.
pub const STATUS_ANNOTATION: &str = "wasmloop.dev/status";
/// The manifest key in `data`.
pub const MANIFEST_KEY: &str = "plugin.yaml";
/// Informational label on a payload: the plugin it was packed for.
pub const PAYLOAD_PLUGIN_LABEL: &str = "wasmloop.dev/plugin-name";
/// The key in a plugin ConfigMap's `data` naming its payload ConfigMap (same namespace).
pub const REF_KEY: &str = "plugin.wasm.ref";
/// The key in a plugin ConfigMap's `data` with `sha256:<hex>` of the decompressed component.
pub const DIGEST_KEY: &str = "plugin.wasm.digest";
/// Annotation on each part of a split payload: `<i>/<n>`, its place among the parts (from 1).
pub const PART_ANNOTATION: &str = "wasmloop.dev/plugin-part";
/// Annotation on each part of a split payload: the digest of the whole component it is part of.
pub const PART_DIGEST_ANNOTATION: &str = "wasmloop.dev/plugin-wasm-digest";
/// Most ConfigMaps one payload may be split over.
pub const MAX_PARTS: usize = 64;
/// Largest plugin accepted after decompression, whatever `--max-component-size` says (the
/// bound on a compression bomb): [`crate::plugin::limits::MAX_COMPONENT_SIZE_CAP`].
pub const MAX_PLUGIN_BYTES: usize = crate::plugin::limits::MAX_COMPONENT_SIZE_CAP.bytes() as usize;

/// How the wasm bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Stored as is (`plugin.wasm`).
    Raw,
    /// zstd-compressed (`plugin.wasm.zst`).
    Zstd,
    /// gzip-compressed (`plugin.wasm.gz`).
    Gzip,
}

impl Encoding {
    /// Every encoding with its `binaryData` key.
    pub const ALL: [(Encoding, &'static str); 3] =
        [(Encoding::Raw, "plugin.wasm"), (Encoding::Zstd, "plugin.wasm.zst"), (Encoding::Gzip, "plugin.wasm.gz")];

    /// The `binaryData` key of this encoding.
    pub fn key(self) -> &'static str {
        Self::ALL.iter().find(|(e, _)| *e == self).map(|(_, k)| *k).unwrap_or("plugin.wasm")
    }
}

/// Errors reading a plugin ConfigMap.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// `binaryData` holds no component.
    #[error("no plugin in binaryData: expected one of plugin.wasm, plugin.wasm.zst, plugin.wasm.gz (found: {found})")]
    NoPayload {
        /// The `binaryData` keys there are.
        found: String,
    },
    /// `binaryData` holds more than one component.
    #[error("more than one plugin in binaryData ({0}); keep exactly one")]
    ManyPayloads(String),
    /// The component does not decompress.
    #[error("binaryData.{key} does not decompress: {reason}")]
    BadCompression {
        /// The component's key.
        key: &'static str,
        /// The decoder's error.
        reason: String,
    },
    /// The component decompresses to more than the limit.
    #[error("binaryData.{key} is larger than {limit} bytes once decompressed")]
    TooLarge {
        /// The component's key.
        key: &'static str,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The ConfigMap has no manifest.
    #[error("data.{MANIFEST_KEY} is missing")]
    NoManifest,
    /// The ConfigMap has both an inline component and a reference to a payload.
    #[error("both an inline plugin (binaryData.{0}) and a reference (data.{REF_KEY}); keep one")]
    BothForms(&'static str),
    /// The reference to the payload does not parse.
    #[error("invalid payload reference: {0}")]
    BadRef(String),
    /// The referenced payload ConfigMap does not exist (yet).
    #[error(
        "payload ConfigMap {namespace}/{name} not found (a ConfigMap labelled {PAYLOAD_LABEL}=true, in the plugin's \
         own namespace); apply it: the plugin loads when it appears"
    )]
    PayloadMissing {
        /// The plugin's namespace.
        namespace: String,
        /// The payload ConfigMap's name.
        name: String,
    },
    /// The referenced ConfigMap is not labelled as a payload.
    #[error("ConfigMap {namespace}/{name} is not labelled {PAYLOAD_LABEL}=true, so it is not a plugin payload")]
    PayloadNotLabelled {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The payload ConfigMap is not immutable.
    #[error("payload ConfigMap {name} is not immutable (`immutable: true`); refused, as its bytes could change under the digest")]
    PayloadNotImmutable {
        /// Its name.
        name: String,
    },
    /// The payload's bytes do not have the digest the reference declares.
    #[error("payload ConfigMap {name} does not match the digest: data.{DIGEST_KEY} is {declared}, the payload is {actual}")]
    DigestMismatch {
        /// The payload ConfigMap's name.
        name: String,
        /// The digest the reference declares.
        declared: String,
        /// The digest of the payload's bytes.
        actual: String,
    },
    /// The payload ConfigMap itself does not decode.
    #[error("payload ConfigMap {name}: {source}")]
    InPayload {
        /// The payload ConfigMap's name.
        name: String,
        /// What is wrong with it.
        source: Box<Error>,
    },
    /// A part of a split payload belongs to another version.
    #[error("payload part {name} does not belong to this plugin version: {reason}")]
    WrongPart {
        /// The part's name.
        name: String,
        /// How it does not fit.
        reason: String,
    },
}

/// A result whose error is a plugin ConfigMap's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The payload of a plugin ConfigMap, decoded.
#[derive(Clone, Debug)]
pub struct PluginSource {
    /// The wasm component bytes.
    pub wasm: Vec<u8>,
    /// `data.plugin.yaml`.
    pub manifest: String,
    /// How the component was stored.
    pub encoding: Encoding,
    /// Size as stored in the ConfigMap.
    pub stored_bytes: usize,
    /// `sha256:<hex>` of the wasm bytes.
    pub wasm_digest: String,
    /// `sha256:<hex>` of wasm bytes and manifest together: what a reload compares.
    pub digest: String,
    /// The payload ConfigMap(s) the wasm came from (referenced form; parts joined by commas),
    /// `None` if inline.
    pub payload: Option<String>,
}

/// A plugin ConfigMap's reference to its payload: `data.plugin.wasm.ref` + `data.plugin.wasm.digest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadRef {
    /// Names of the payload ConfigMaps, in the plugin ConfigMap's namespace: one, or the parts
    /// of a split payload in order.
    pub parts: Vec<String>,
    /// `sha256:<64 lowercase hex>` of the decompressed component (all parts together).
    pub digest: String,
}

impl PayloadRef {
    /// The part names as written in `data.plugin.wasm.ref` (joined by commas).
    pub fn names(&self) -> String {
        self.parts.join(",")
    }
}

/// The manifest, `data.plugin.yaml`.
pub fn manifest(cm: &ConfigMap) -> Result<&str> {
    cm.data.as_ref().and_then(|d| d.get(MANIFEST_KEY)).map(String::as_str).ok_or(Error::NoManifest)
}

/// The payload reference of a plugin ConfigMap: `Ok(None)` for the inline form. Refuses a partial
/// or malformed reference, and a ConfigMap with both forms. Reads nothing but `data` keys (cheap).
pub fn payload_ref(cm: &ConfigMap) -> Result<Option<PayloadRef>> {
    let data = cm.data.as_ref();
    let (name, digest) = (data.and_then(|d| d.get(REF_KEY)), data.and_then(|d| d.get(DIGEST_KEY)));
    let (name, digest) = match (name, digest) {
        (None, None) => return Ok(None),
        (Some(n), Some(d)) => (n.trim(), d.trim()),
        (Some(_), None) => return Err(Error::BadRef(format!("data.{REF_KEY} without data.{DIGEST_KEY}"))),
        (None, Some(_)) => return Err(Error::BadRef(format!("data.{DIGEST_KEY} without data.{REF_KEY}"))),
    };
    if let Some((_, key)) = Encoding::ALL.iter().find(|(_, k)| cm.binary_data.as_ref().is_some_and(|b| b.contains_key(*k))) {
        return Err(Error::BothForms(key));
    }
    let parts: Vec<String> = name.split(',').map(|p| p.trim().to_string()).collect();
    if let Some((bad, e)) = parts.iter().find_map(|p| wasmloop_model::name::dns_subdomain(p).err().map(|e| (p, e))) {
        return Err(Error::BadRef(format!(
            "data.{REF_KEY} {bad:?} is not a ConfigMap name: it {e}; it names a ConfigMap in the plugin's own namespace \
             (the parts of a split payload: names separated by commas)"
        )));
    }
    if parts.len() > MAX_PARTS {
        return Err(Error::BadRef(format!("data.{REF_KEY} lists {} parts, more than the {MAX_PARTS} a payload may have", parts.len())));
    }
    if let Some(dup) = parts.iter().enumerate().find(|(i, p)| parts[..*i].contains(p)).map(|(_, p)| p) {
        return Err(Error::BadRef(format!("data.{REF_KEY} lists the part {dup:?} twice")));
    }
    let hex = digest.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(Error::BadRef(format!("data.{DIGEST_KEY} {digest:?} is not sha256:<64 lowercase hex digits>")));
    }
    Ok(Some(PayloadRef { parts, digest: digest.to_string() }))
}

/// True if `cm` is marked as a payload (`wasmloop.dev/plugin-payload=true`).
pub fn is_payload(cm: &ConfigMap) -> bool {
    cm.metadata.labels.as_ref().and_then(|l| l.get(PAYLOAD_LABEL)).is_some_and(|v| v == "true")
}

/// The component of `parts` (the payload ConfigMaps `reference` names, in its order) for
/// `reference`: checks each is labelled and immutable (and, for a split payload, that its part
/// annotations place it here), finds their `binaryData` entries (one key, the same in every
/// part), joins and decompresses them (bounded) and checks the digest of the whole.
pub fn decode_payload(parts: &[&ConfigMap], reference: &PayloadRef) -> Result<(Vec<u8>, Encoding, usize)> {
    let names = reference.names();
    if parts.len() != reference.parts.len() {
        let name = reference.parts.get(parts.len()).cloned().unwrap_or_else(|| names.clone());
        let namespace = parts.first().and_then(|p| p.metadata.namespace.clone()).unwrap_or_default();
        return Err(Error::PayloadMissing { namespace, name });
    }
    let split = parts.len() > 1;
    let mut stream = Vec::new();
    let mut first: Option<(Encoding, &'static str)> = None;
    for (i, (payload, name)) in parts.iter().zip(&reference.parts).enumerate() {
        let name = name.clone();
        if !is_payload(payload) {
            let namespace = payload.metadata.namespace.clone().unwrap_or_default();
            return Err(Error::PayloadNotLabelled { namespace, name });
        }
        if payload.immutable != Some(true) {
            return Err(Error::PayloadNotImmutable { name });
        }
        if split {
            check_part(payload, &name, i, parts.len(), &reference.digest)?;
        }
        let (encoding, key, bytes) = find_binary(payload).map_err(|e| Error::InPayload { name: name.clone(), source: Box::new(e) })?;
        match first {
            None => first = Some((encoding, key)),
            Some((_, k)) if k != key => {
                return Err(Error::WrongPart { name, reason: format!("it holds binaryData.{key}, the first part binaryData.{k}") });
            }
            Some(_) => {}
        }
        stream.extend_from_slice(bytes);
    }
    let (encoding, key) = first.ok_or_else(|| Error::BadRef(format!("data.{REF_KEY} names no payload")))?;
    let wasm = decompress(encoding, key, &stream).map_err(|e| Error::InPayload { name: names.clone(), source: Box::new(e) })?;
    let actual = sha256(&[&wasm]);
    if actual != reference.digest {
        return Err(Error::DigestMismatch { name: names, declared: reference.digest.clone(), actual });
    }
    Ok((wasm, encoding, stream.len()))
}

/// A part of a split payload must say it is part `index + 1` of `count` of `digest`.
fn check_part(payload: &ConfigMap, name: &str, index: usize, count: usize, digest: &str) -> Result<()> {
    let annotation = |key: &str| payload.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str);
    let wrong = |reason: String| Err(Error::WrongPart { name: name.to_string(), reason });
    let want = format!("{}/{count}", index + 1);
    match annotation(PART_ANNOTATION) {
        Some(place) if place == want => {}
        Some(place) => return wrong(format!("it is annotated {PART_ANNOTATION}={place:?}, but is listed as part {want}")),
        None => return wrong(format!("it has no {PART_ANNOTATION} annotation (a part of a split payload says which it is)")),
    }
    match annotation(PART_DIGEST_ANNOTATION) {
        Some(d) if d == digest => Ok(()),
        Some(d) => wrong(format!("it is part of the component {d}, not {digest}")),
        None => wrong(format!("it has no {PART_DIGEST_ANNOTATION} annotation")),
    }
}

/// Decode a plugin ConfigMap of either form; `payloads` are the ConfigMaps its reference names
/// (looked up by the caller in the plugin ConfigMap's namespace; matched by name, or the only
/// one for a one-part reference), ignored for the inline form. A part not among them is
/// [`Error::PayloadMissing`].
pub fn decode_with(cm: &ConfigMap, payloads: &[&ConfigMap]) -> Result<PluginSource> {
    let Some(reference) = payload_ref(cm)? else { return decode(cm) };
    let manifest = manifest(cm)?.to_string();
    let parts: Vec<&ConfigMap> = match (reference.parts.as_slice(), payloads) {
        ([_], [only]) => vec![*only],
        _ => reference
            .parts
            .iter()
            .map_while(|part| payloads.iter().find(|p| p.metadata.name.as_deref() == Some(part.as_str())).copied())
            .collect(),
    };
    if parts.len() != reference.parts.len() {
        let namespace = cm.metadata.namespace.clone().unwrap_or_default();
        return Err(Error::PayloadMissing { namespace, name: reference.parts[parts.len()].clone() });
    }
    let (wasm, encoding, stored_bytes) = decode_payload(&parts, &reference)?;
    let digest = sha256(&[&wasm, manifest.as_bytes()]);
    Ok(PluginSource {
        wasm,
        manifest,
        encoding,
        stored_bytes,
        wasm_digest: reference.digest.clone(),
        digest,
        payload: Some(reference.names()),
    })
}

/// The one payload entry of `binaryData`.
fn find_binary(cm: &ConfigMap) -> Result<(Encoding, &'static str, &[u8])> {
    let binary = cm.binary_data.as_ref();
    let present: Vec<_> =
        Encoding::ALL.iter().filter_map(|(enc, key)| binary.and_then(|b| b.get(*key)).map(|v| (*enc, *key, v.0.as_slice()))).collect();
    match present.as_slice() {
        [one] => Ok(*one),
        [] => {
            let found = binary.map(|b| b.keys().cloned().collect::<Vec<_>>().join(", ")).unwrap_or_default();
            Err(Error::NoPayload { found: if found.is_empty() { "nothing".into() } else { found } })
        }
        many => Err(Error::ManyPayloads(many.iter().map(|(_, k, _)| *k).collect::<Vec<_>>().join(", "))),
    }
}

/// Decode an inline plugin ConfigMap: find the payload, decompress it (bounded), read the
/// manifest. (A referenced one: [`decode_with`].)
pub fn decode(cm: &ConfigMap) -> Result<PluginSource> {
    if let Some(reference) = payload_ref(cm)? {
        let namespace = cm.metadata.namespace.clone().unwrap_or_default();
        return Err(Error::PayloadMissing { namespace, name: reference.parts[0].clone() });
    }
    let (encoding, key, bytes) = find_binary(cm)?;
    let wasm = decompress(encoding, key, bytes)?;
    let manifest = manifest(cm)?.to_string();
    let wasm_digest = sha256(&[&wasm]);
    let digest = sha256(&[&wasm, manifest.as_bytes()]);
    Ok(PluginSource { stored_bytes: bytes.len(), wasm, manifest, encoding, wasm_digest, digest, payload: None })
}

/// Decompress at most [`MAX_PLUGIN_BYTES`] (a compression bomb fails instead of eating memory).
pub fn decompress(encoding: Encoding, key: &'static str, bytes: &[u8]) -> Result<Vec<u8>> {
    let bad = |e: std::io::Error| Error::BadCompression { key, reason: e.to_string() };
    let reader: Box<dyn Read + '_> = match encoding {
        Encoding::Raw => {
            if bytes.len() > MAX_PLUGIN_BYTES {
                return Err(Error::TooLarge { key, limit: MAX_PLUGIN_BYTES });
            }
            return Ok(bytes.to_vec());
        }
        Encoding::Zstd => Box::new(zstd::stream::read::Decoder::new(bytes).map_err(bad)?),
        Encoding::Gzip => Box::new(flate2::read::GzDecoder::new(bytes)),
    };
    let mut out = Vec::new();
    reader.take(MAX_PLUGIN_BYTES as u64 + 1).read_to_end(&mut out).map_err(bad)?;
    if out.len() > MAX_PLUGIN_BYTES {
        return Err(Error::TooLarge { key, limit: MAX_PLUGIN_BYTES });
    }
    Ok(out)
}

/// `sha256:<hex>` over the concatenation of `parts`.
pub fn sha256(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn cm(binary: &[(&str, Vec<u8>)], manifest: Option<&str>) -> ConfigMap {
        ConfigMap {
            binary_data: Some(binary.iter().map(|(k, v)| (k.to_string(), ByteString(v.clone()))).collect::<BTreeMap<_, _>>()),
            data: manifest.map(|m| BTreeMap::from([(MANIFEST_KEY.to_string(), m.to_string())])),
            ..Default::default()
        }
    }

    const WASM: &[u8] = b"\0asm\x0d\0\x01\0 pretend component";

    #[test]
    fn decodes_raw_zstd_and_gzip() {
        let zst = zstd::encode_all(WASM, 3).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, WASM).unwrap();
        let gz = gz.finish().unwrap();
        for (key, bytes, enc) in [
            ("plugin.wasm", WASM.to_vec(), Encoding::Raw),
            ("plugin.wasm.zst", zst, Encoding::Zstd),
            ("plugin.wasm.gz", gz, Encoding::Gzip),
        ] {
            let src = decode(&cm(&[(key, bytes)], Some("name: x"))).unwrap();
            assert_eq!(src.wasm, WASM, "{key}");
            assert_eq!(src.encoding, enc);
            assert!(src.digest.starts_with("sha256:"));
        }
    }

    #[test]
    fn digest_covers_the_manifest() {
        let a = decode(&cm(&[("plugin.wasm", WASM.to_vec())], Some("name: a"))).unwrap();
        let b = decode(&cm(&[("plugin.wasm", WASM.to_vec())], Some("name: b"))).unwrap();
        assert_eq!(a.wasm_digest, b.wasm_digest);
        assert_ne!(a.digest, b.digest);
    }

    #[test]
    fn bad_payloads_are_named() {
        let err = decode(&cm(&[("other.bin", vec![1])], Some("x: 1"))).unwrap_err();
        assert_eq!(err, Error::NoPayload { found: "other.bin".into() });
        let err = decode(&cm(&[("plugin.wasm", vec![1]), ("plugin.wasm.zst", vec![2])], Some("x: 1"))).unwrap_err();
        assert!(matches!(err, Error::ManyPayloads(_)));
        let err = decode(&cm(&[("plugin.wasm.zst", b"not zstd at all".to_vec())], Some("x: 1"))).unwrap_err();
        assert!(matches!(err, Error::BadCompression { key: "plugin.wasm.zst", .. }), "{err}");
        let err = decode(&cm(&[("plugin.wasm", WASM.to_vec())], None)).unwrap_err();
        assert_eq!(err, Error::NoManifest);
    }

    #[test]
    fn compression_bombs_are_refused() {
        let bomb = zstd::encode_all(&vec![0u8; MAX_PLUGIN_BYTES + 10][..], 19).unwrap();
        assert!(bomb.len() < 1 << 20);
        let err = decode(&cm(&[("plugin.wasm.zst", bomb)], Some("x: 1"))).unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    }

    fn referencing(name: &str, digest: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([
                (MANIFEST_KEY.to_string(), "name: x".to_string()),
                (REF_KEY.to_string(), name.to_string()),
                (DIGEST_KEY.to_string(), digest.to_string()),
            ])),
            ..Default::default()
        }
    }

    fn payload(bytes: &[u8], immutable: Option<bool>, labelled: bool) -> ConfigMap {
        let mut cm = cm(&[("plugin.wasm.zst", zstd::encode_all(bytes, 3).unwrap())], None);
        cm.immutable = immutable;
        cm.metadata.name = Some("x-wasm-0123456789ab".into());
        if labelled {
            cm.metadata.labels = Some(BTreeMap::from([(PAYLOAD_LABEL.to_string(), "true".to_string())]));
        }
        cm
    }

    #[test]
    fn references_decode_through_their_payload() {
        let digest = sha256(&[WASM]);
        let plugin = referencing("x-wasm-0123456789ab", &digest);
        let r = payload_ref(&plugin).unwrap().unwrap();
        assert_eq!(r, PayloadRef { parts: vec!["x-wasm-0123456789ab".into()], digest: digest.clone() });
        let src = decode_with(&plugin, &[&payload(WASM, Some(true), true)]).unwrap();
        assert_eq!(src.wasm, WASM);
        assert_eq!(src.wasm_digest, digest);
        assert_eq!(src.payload.as_deref(), Some("x-wasm-0123456789ab"));
        assert_eq!(src.encoding, Encoding::Zstd);
        // The inline form has no reference and still decodes.
        assert_eq!(payload_ref(&cm(&[("plugin.wasm", WASM.to_vec())], Some("x: 1"))).unwrap(), None);
    }

    #[test]
    fn bad_references_are_refused_by_name() {
        let digest = sha256(&[WASM]);
        for (name, d, want) in [
            ("../other", digest.as_str(), "is not a ConfigMap name"),
            ("other-ns/x", digest.as_str(), "is not a ConfigMap name"),
            ("", digest.as_str(), "is not a ConfigMap name"),
            ("UPPER", digest.as_str(), "is not a ConfigMap name"),
            ("x", "sha256:abc", "is not sha256:"),
            ("x", &digest.to_uppercase(), "is not sha256:"),
            ("x", digest.trim_start_matches("sha256:"), "is not sha256:"),
        ] {
            let err = payload_ref(&referencing(name, d)).unwrap_err();
            assert!(err.to_string().contains(want), "{name} {d}: {err}");
        }
        let mut partial = referencing("x", &digest);
        partial.data.as_mut().unwrap().remove(DIGEST_KEY);
        assert!(payload_ref(&partial).unwrap_err().to_string().contains("without data.plugin.wasm.digest"));
        let mut partial = referencing("x", &digest);
        partial.data.as_mut().unwrap().remove(REF_KEY);
        assert!(payload_ref(&partial).unwrap_err().to_string().contains("without data.plugin.wasm.ref"));
        let mut both = referencing("x", &digest);
        both.binary_data = Some(BTreeMap::from([("plugin.wasm".to_string(), ByteString(WASM.to_vec()))]));
        assert_eq!(payload_ref(&both).unwrap_err(), Error::BothForms("plugin.wasm"));
        // `decode` (inline only) names the missing payload rather than looking elsewhere.
        assert!(matches!(decode(&referencing("x", &digest)), Err(Error::PayloadMissing { .. })));
    }

    /// A split payload of `wasm`: `n` parts of its zstd stream, named `x-wasm-…-<i>-of-<n>`,
    /// annotated with their place and `digest`.
    fn split(wasm: &[u8], n: usize, digest: &str) -> Vec<ConfigMap> {
        let z = zstd::encode_all(wasm, 3).unwrap();
        let size = z.len().div_ceil(n);
        z.chunks(size)
            .enumerate()
            .map(|(i, chunk)| {
                let mut cm = payload(b"", Some(true), true);
                cm.binary_data = Some(BTreeMap::from([("plugin.wasm.zst".to_string(), ByteString(chunk.to_vec()))]));
                cm.metadata.name = Some(format!("x-wasm-0123456789ab-{}-of-{n}", i + 1));
                cm.metadata.annotations = Some(BTreeMap::from([
                    (PART_ANNOTATION.to_string(), format!("{}/{n}", i + 1)),
                    (PART_DIGEST_ANNOTATION.to_string(), digest.to_string()),
                ]));
                cm
            })
            .collect()
    }

    #[test]
    fn split_payloads_decode_only_whole_and_in_order() {
        // Incompressible enough to give several non-empty parts.
        let wasm: Vec<u8> =
            b"\0asm\x0d\0\x01\0".iter().copied().chain((0..60_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)).collect();
        let digest = sha256(&[&wasm]);
        let parts = split(&wasm, 3, &digest);
        let names: Vec<String> = parts.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        let plugin = referencing(&names.join(", "), &digest);
        let r = payload_ref(&plugin).unwrap().unwrap();
        assert_eq!(r.parts, names);
        let refs: Vec<&ConfigMap> = parts.iter().collect();
        let src = decode_with(&plugin, &refs).unwrap();
        assert_eq!(src.wasm, wasm);
        assert_eq!(src.payload.as_deref(), Some(names.join(",").as_str()));
        // Given in any order, found by name.
        let src = decode_with(&plugin, &[refs[2], refs[0], refs[1]]).unwrap();
        assert_eq!(src.wasm, wasm);

        // A missing part is named (and waited for by the host).
        let err = decode_with(&plugin, &[refs[0], refs[2]]).unwrap_err();
        assert_eq!(err, Error::PayloadMissing { namespace: String::new(), name: names[1].clone() });
        // Listed in the wrong order: the annotations say so.
        let swapped = referencing(&format!("{},{},{}", names[1], names[0], names[2]), &digest);
        let err = decode_with(&swapped, &refs).unwrap_err();
        assert!(matches!(&err, Error::WrongPart { name, .. } if *name == names[1]), "{err}");
        assert!(err.to_string().contains("listed as part 1/3"), "{err}");
        // A part of another version of the component.
        let other = split(&wasm, 3, &sha256(&[b"other"]));
        let err = decode_with(&plugin, &[refs[0], &other[1], refs[2]]).unwrap_err();
        assert!(matches!(&err, Error::WrongPart { name, .. } if *name == names[1]), "{err}");
        assert!(err.to_string().contains("is part of the component sha256:"), "{err}");
        // A part whose bytes changed under intact annotations: the digest of the whole catches it.
        let mut altered = parts[1].clone();
        altered.binary_data.as_mut().unwrap().get_mut("plugin.wasm.zst").unwrap().0[10] ^= 0xff;
        let err = decode_with(&plugin, &[refs[0], &altered, refs[2]]).unwrap_err();
        assert!(matches!(err, Error::DigestMismatch { .. } | Error::InPayload { .. }), "{err}");
        // A part that is not immutable, or not a payload.
        let mut mutable = parts[2].clone();
        mutable.immutable = None;
        assert!(matches!(decode_with(&plugin, &[refs[0], refs[1], &mutable]), Err(Error::PayloadNotImmutable { .. })));
        // Parts without their annotations are refused (a split payload says which part each is).
        let mut bare = parts[0].clone();
        bare.metadata.annotations = None;
        let err = decode_with(&plugin, &[&bare, refs[1], refs[2]]).unwrap_err();
        assert!(err.to_string().contains("no wasmloop.dev/plugin-part annotation"), "{err}");
    }

    #[test]
    fn split_references_are_checked() {
        let digest = sha256(&[WASM]);
        let err = payload_ref(&referencing("a,b,a", &digest)).unwrap_err();
        assert!(err.to_string().contains("lists the part \"a\" twice"), "{err}");
        let many: Vec<String> = (0..=MAX_PARTS).map(|i| format!("p-{i}")).collect();
        let err = payload_ref(&referencing(&many.join(","), &digest)).unwrap_err();
        assert!(err.to_string().contains("more than the 64"), "{err}");
        let err = payload_ref(&referencing("a,,b", &digest)).unwrap_err();
        assert!(err.to_string().contains("is not a ConfigMap name"), "{err}");
    }

    #[test]
    fn bad_payloads_are_refused_by_name() {
        let digest = sha256(&[WASM]);
        let plugin = referencing("x-wasm-0123456789ab", &digest);
        let missing = decode_with(&plugin, &[]).unwrap_err();
        assert!(matches!(missing, Error::PayloadMissing { .. }), "{missing}");
        for immutable in [None, Some(false)] {
            let err = decode_with(&plugin, &[&payload(WASM, immutable, true)]).unwrap_err();
            assert!(matches!(err, Error::PayloadNotImmutable { .. }), "{err}");
        }
        let err = decode_with(&plugin, &[&payload(WASM, Some(true), false)]).unwrap_err();
        assert!(matches!(err, Error::PayloadNotLabelled { .. }), "{err}");
        let err = decode_with(&plugin, &[&payload(b"\0asm other bytes", Some(true), true)]).unwrap_err();
        match &err {
            Error::DigestMismatch { declared, actual, .. } => {
                assert_eq!(declared, &digest);
                assert_eq!(actual, &sha256(&[b"\0asm other bytes"]));
            }
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains("does not match the digest"), "{err}");
        let bomb = payload(&vec![0u8; MAX_PLUGIN_BYTES + 10], Some(true), true);
        let err = decode_with(&plugin, &[&bomb]).unwrap_err();
        assert!(matches!(&err, Error::InPayload { source, .. } if matches!(**source, Error::TooLarge { .. })), "{err}");
        let mut two = payload(WASM, Some(true), true);
        two.binary_data.as_mut().unwrap().insert("plugin.wasm".into(), ByteString(WASM.to_vec()));
        let err = decode_with(&plugin, &[&two]).unwrap_err();
        assert!(matches!(&err, Error::InPayload { source, .. } if matches!(**source, Error::ManyPayloads(_))), "{err}");
    }
}
