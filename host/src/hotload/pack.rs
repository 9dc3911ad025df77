//! `wasmloop pack`: a plugin and its manifest as a ConfigMap ready for `kubectl apply -f -`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

use super::source::{Encoding, MANIFEST_KEY, PLUGIN_LABEL};

/// The API server's limit on a ConfigMap's data (etcd takes a little more, this is what counts).
pub const CONFIGMAP_LIMIT: usize = 1 << 20;

/// Errors packing a plugin.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path} is not a wasm binary (it does not start with \\0asm)")]
    NotWasm { path: String },
    #[error(
        "the ConfigMap would be {size} bytes, {over} bytes over the {CONFIGMAP_LIMIT}-byte limit; build with the \
         size-optimised profile (`--profile plugin`: opt-level \"s\", LTO, strip), drop heavy dependencies \
         (e.g. the SDK's `k8s` feature), or split the plugin"
    )]
    TooLarge { size: usize, over: usize },
    #[error("compressing: {0}")]
    Compress(#[source] std::io::Error),
    #[error("writing YAML: {0}")]
    Yaml(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What goes into the ConfigMap.
pub struct PackInput<'a> {
    pub wasm: &'a [u8],
    /// Where the wasm came from (for error messages).
    pub path: &'a str,
    /// The manifest YAML, already validated and with `name` set.
    pub manifest: String,
    pub name: String,
    pub namespace: Option<String>,
}

/// The packed ConfigMap and its sizes.
#[derive(Debug)]
pub struct Packed {
    pub config_map: ConfigMap,
    pub raw_bytes: usize,
    pub compressed_bytes: usize,
}

/// Compress (zstd, level 19) and wrap into a labelled ConfigMap; fail if it exceeds the limit.
pub fn pack(input: PackInput<'_>) -> Result<Packed> {
    if !input.wasm.starts_with(b"\0asm") {
        return Err(Error::NotWasm { path: input.path.to_string() });
    }
    let compressed = zstd::encode_all(input.wasm, 19).map_err(Error::Compress)?;
    let size = compressed.len() + input.manifest.len() + MANIFEST_KEY.len() + Encoding::Zstd.key().len();
    if size > CONFIGMAP_LIMIT {
        return Err(Error::TooLarge { size, over: size - CONFIGMAP_LIMIT });
    }
    let compressed_bytes = compressed.len();
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(input.name),
            namespace: input.namespace,
            labels: Some(BTreeMap::from([(PLUGIN_LABEL.to_string(), "true".to_string())])),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(Encoding::Zstd.key().to_string(), ByteString(compressed))])),
        data: Some(BTreeMap::from([(MANIFEST_KEY.to_string(), input.manifest)])),
        ..Default::default()
    };
    Ok(Packed { config_map, raw_bytes: input.wasm.len(), compressed_bytes })
}

/// The ConfigMap as YAML (`apiVersion` and `kind` included).
pub fn to_yaml(cm: &ConfigMap) -> Result<String> {
    let mut value = serde_json::to_value(cm).map_err(|e| Error::Yaml(e.to_string()))?;
    if let Some(obj) = value.as_object_mut() {
        obj.insert("apiVersion".into(), "v1".into());
        obj.insert("kind".into(), "ConfigMap".into());
    }
    serde_saphyr::to_string(&value).map_err(|e| Error::Yaml(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotload::source;

    fn input(wasm: &[u8]) -> PackInput<'_> {
        PackInput { wasm, path: "p.wasm", manifest: "name: p\n".into(), name: "p".into(), namespace: Some("wasmloop".into()) }
    }

    #[test]
    fn packed_config_map_round_trips_through_yaml_and_decode() {
        let wasm = [b"\0asm".as_slice(), &[7u8; 5000]].concat();
        let packed = pack(input(&wasm)).unwrap();
        assert!(packed.compressed_bytes < packed.raw_bytes);
        let yaml = to_yaml(&packed.config_map).unwrap();
        assert!(yaml.contains("wasmloop.dev/plugin"), "{yaml}");
        let back: ConfigMap = serde_saphyr::from_str(&yaml).unwrap();
        let src = source::decode(&back).unwrap();
        assert_eq!(src.wasm, wasm);
        assert_eq!(src.manifest, "name: p\n");
    }

    #[test]
    fn too_large_says_by_how_much() {
        // Incompressible bytes: a simple xorshift stream.
        let mut x: u64 = 0x9E3779B97F4A7C15;
        let mut wasm = b"\0asm".to_vec();
        wasm.extend((0..1_200_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
        let err = pack(input(&wasm)).unwrap_err();
        match &err {
            Error::TooLarge { over, .. } => assert!(*over > 100_000, "{err}"),
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains("--profile plugin"), "{err}");
    }

    #[test]
    fn non_wasm_is_refused() {
        assert!(matches!(pack(input(b"hello")), Err(Error::NotWasm { .. })));
    }
}
