//! A plugin as it arrives in a ConfigMap: `binaryData` holds `plugin.wasm`, `plugin.wasm.zst` or
//! `plugin.wasm.gz`; `data.plugin.yaml` holds the admin's manifest (name, grants, limits, queue).

use std::io::Read;

use k8s_openapi::api::core::v1::ConfigMap;
use sha2::{Digest, Sha256};

/// The label that marks a ConfigMap as a plugin.
pub const PLUGIN_LABEL: &str = "wasmloop.dev/plugin";
/// The annotation where the host reports what it loaded, or why it refused.
pub const STATUS_ANNOTATION: &str = "wasmloop.dev/status";
/// The manifest key in `data`.
pub const MANIFEST_KEY: &str = "plugin.yaml";
/// Largest plugin accepted after decompression.
pub const MAX_PLUGIN_BYTES: usize = 32 << 20;

/// How the wasm bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Raw,
    Zstd,
    Gzip,
}

impl Encoding {
    pub const ALL: [(Encoding, &'static str); 3] =
        [(Encoding::Raw, "plugin.wasm"), (Encoding::Zstd, "plugin.wasm.zst"), (Encoding::Gzip, "plugin.wasm.gz")];

    pub fn key(self) -> &'static str {
        Self::ALL.iter().find(|(e, _)| *e == self).map(|(_, k)| *k).unwrap_or("plugin.wasm")
    }
}

/// Errors reading a plugin ConfigMap.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("no plugin in binaryData: expected one of plugin.wasm, plugin.wasm.zst, plugin.wasm.gz (found: {found})")]
    NoPayload { found: String },
    #[error("more than one plugin in binaryData ({0}); keep exactly one")]
    ManyPayloads(String),
    #[error("binaryData.{key} does not decompress: {reason}")]
    BadCompression { key: &'static str, reason: String },
    #[error("binaryData.{key} is larger than {limit} bytes once decompressed")]
    TooLarge { key: &'static str, limit: usize },
    #[error("data.{MANIFEST_KEY} is missing")]
    NoManifest,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The payload of a plugin ConfigMap, decoded.
#[derive(Clone, Debug)]
pub struct PluginSource {
    /// The wasm component bytes.
    pub wasm: Vec<u8>,
    /// `data.plugin.yaml`.
    pub manifest: String,
    pub encoding: Encoding,
    /// Size as stored in the ConfigMap.
    pub stored_bytes: usize,
    /// `sha256:<hex>` of the wasm bytes.
    pub wasm_digest: String,
    /// `sha256:<hex>` of wasm bytes and manifest together: what a reload compares.
    pub digest: String,
}

/// Decode `cm`: find the payload, decompress it (bounded), read the manifest.
pub fn decode(cm: &ConfigMap) -> Result<PluginSource> {
    let binary = cm.binary_data.as_ref();
    let present: Vec<_> = Encoding::ALL
        .iter()
        .filter_map(|(enc, key)| binary.and_then(|b| b.get(*key)).map(|v| (*enc, *key, &v.0)))
        .collect();
    let (encoding, key, bytes) = match present.as_slice() {
        [one] => *one,
        [] => {
            let found = binary.map(|b| b.keys().cloned().collect::<Vec<_>>().join(", ")).unwrap_or_default();
            return Err(Error::NoPayload { found: if found.is_empty() { "nothing".into() } else { found } });
        }
        many => return Err(Error::ManyPayloads(many.iter().map(|(_, k, _)| *k).collect::<Vec<_>>().join(", "))),
    };
    let wasm = decompress(encoding, key, bytes)?;
    let manifest = cm.data.as_ref().and_then(|d| d.get(MANIFEST_KEY)).cloned().ok_or(Error::NoManifest)?;
    let wasm_digest = sha256(&[&wasm]);
    let digest = sha256(&[&wasm, manifest.as_bytes()]);
    Ok(PluginSource { stored_bytes: bytes.len(), wasm, manifest, encoding, wasm_digest, digest })
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
        for (key, bytes, enc) in [("plugin.wasm", WASM.to_vec(), Encoding::Raw), ("plugin.wasm.zst", zst, Encoding::Zstd), ("plugin.wasm.gz", gz, Encoding::Gzip)] {
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
}
