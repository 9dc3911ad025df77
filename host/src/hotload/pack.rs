//! `wasmloop pack`: a plugin and its manifest as ConfigMaps ready for `kubectl apply -f -`.
//!
//! [`pack_referenced`] (the default) makes two: an immutable payload ConfigMap
//! `<plugin>-wasm-<12 hex of the sha256>` with the zstd-compressed component, and the small plugin
//! ConfigMap with the manifest and `plugin.wasm.ref` + `plugin.wasm.digest`, so that changing the
//! manifest rewrites only the small one. A component whose compressed form does not fit one
//! ConfigMap is split over several immutable payload ConfigMaps `<plugin>-wasm-<12 hex>-<i>-of-<n>`
//! (consecutive slices of one zstd stream, each at most [`DEFAULT_PART_BYTES`]), all listed in
//! `plugin.wasm.ref`, with one digest over the whole component (see [`source`]).
//! [`pack`] makes the older single inline ConfigMap.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

use super::source::{
    self, DIGEST_KEY, Encoding, MANIFEST_KEY, MAX_PARTS, MAX_PLUGIN_BYTES, PART_ANNOTATION, PART_DIGEST_ANNOTATION, PAYLOAD_LABEL,
    PAYLOAD_PLUGIN_LABEL, PLUGIN_LABEL, REF_KEY,
};

/// The API server's limit on a ConfigMap's data (etcd takes a little more, this is what counts).
pub const CONFIGMAP_LIMIT: usize = 1 << 20;

/// The API server's limit on all annotations of one object together (256 KiB). Client-side
/// `kubectl apply` copies the whole object into `kubectl.kubernetes.io/last-applied-configuration`,
/// so an object larger than this cannot be applied that way; server-side apply keeps no copy.
pub const ANNOTATIONS_LIMIT: usize = 256 << 10;

/// How close to [`ANNOTATIONS_LIMIT`] an object may get before `wasmloop pack` warns that it
/// is close (what the host and other tools annotate counts too).
pub const ANNOTATIONS_MARGIN: usize = 64 << 10;

/// The compressed bytes one payload part holds at most: under the ConfigMap limit with room for
/// its metadata.
pub const DEFAULT_PART_BYTES: usize = CONFIGMAP_LIMIT - (64 << 10);

/// Errors packing a plugin.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file is not WebAssembly.
    #[error("{path} is not a wasm binary (it does not start with \\0asm)")]
    NotWasm {
        /// The file's path.
        path: String,
    },
    /// The inline ConfigMap would be over the ConfigMap size limit.
    #[error(
        "the ConfigMap would be {size} bytes, {over} bytes over the {CONFIGMAP_LIMIT}-byte limit; build with the \
         size-optimised profile (`--profile plugin`: opt-level \"s\", LTO, strip), drop heavy dependencies \
         (e.g. the SDK's `k8s` feature), or pack without --inline (the referenced form splits a large component \
         over several payload ConfigMaps)"
    )]
    TooLarge {
        /// What the ConfigMap's size would be.
        size: usize,
        /// By how much it is over the limit.
        over: usize,
    },
    /// Compressing failed.
    #[error("compressing: {0}")]
    Compress(#[source] std::io::Error),
    /// The ConfigMaps do not serialise to YAML.
    #[error("writing YAML: {0}")]
    Yaml(String),
    /// The plugin name leaves no room for the payload ConfigMap's name.
    #[error("the plugin name {0:?} is too long for its payload ConfigMap's name (<name>-wasm-<12 hex>, at most 253 characters)")]
    NameTooLong(String),
    /// The compressed component needs more payload parts than allowed.
    #[error(
        "the component compresses to {compressed} bytes: {parts} parts of at most {part_bytes} bytes, more than the \
         {MAX_PARTS} a payload may be split over"
    )]
    TooManyParts {
        /// The compressed size.
        compressed: usize,
        /// The parts it would need.
        parts: usize,
        /// The size of one part.
        part_bytes: usize,
    },
    /// The component is over the size any host accepts.
    #[error("the component is {size} bytes, over the {MAX_PLUGIN_BYTES} bytes any host accepts")]
    ComponentTooLarge {
        /// The component's size.
        size: usize,
    },
    /// A part size outside what one ConfigMap can hold.
    #[error("the part size must be between 1 KiB and {CONFIGMAP_LIMIT} bytes (got {0})")]
    BadPartSize(usize),
}

/// A result whose error is packing's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What goes into the ConfigMap.
pub struct PackInput<'a> {
    /// The component's bytes.
    pub wasm: &'a [u8],
    /// Where the wasm came from (for error messages).
    pub path: &'a str,
    /// The manifest YAML, already validated and with `name` set.
    pub manifest: String,
    /// The plugin ConfigMap's name.
    pub name: String,
    /// The plugin ConfigMap's namespace (none: the one `kubectl apply` uses).
    pub namespace: Option<String>,
}

/// The packed ConfigMap and its sizes.
#[derive(Debug)]
pub struct Packed {
    /// The plugin ConfigMap, labelled `wasmloop.dev/plugin=true`.
    pub config_map: ConfigMap,
    /// Size of the component.
    pub raw_bytes: usize,
    /// Size of the component compressed.
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

/// The ConfigMaps of the referenced form and the sizes.
#[derive(Debug)]
pub struct PackedRef {
    /// Immutable, labelled `wasmloop.dev/plugin-payload=true`: the compressed component, in one
    /// ConfigMap or split over several (in order). Apply them before [`Self::plugin`].
    pub payloads: Vec<ConfigMap>,
    /// Labelled `wasmloop.dev/plugin=true`: the manifest and the reference to `payloads`.
    pub plugin: ConfigMap,
    /// Size of the component.
    pub raw_bytes: usize,
    /// Size of the component compressed (over all payloads).
    pub compressed_bytes: usize,
    /// `sha256:<hex>` of the component (decompressed), as in `data.plugin.wasm.digest`.
    pub digest: String,
}

impl PackedRef {
    /// Every ConfigMap in the order to apply them: the payloads, then the plugin ConfigMap.
    pub fn config_maps(&self) -> Vec<&ConfigMap> {
        self.payloads.iter().chain(std::iter::once(&self.plugin)).collect()
    }

    /// The payload ConfigMaps' names, as listed in `data.plugin.wasm.ref`.
    pub fn payload_names(&self) -> Vec<String> {
        self.payloads.iter().filter_map(|p| p.metadata.name.clone()).collect()
    }
}

/// The payload ConfigMap's name for plugin `name` and component digest `sha256:<hex>`.
pub fn payload_name(name: &str, digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("{name}-wasm-{}", &hex[..hex.len().min(12)])
}

/// Compress (zstd, level 19) into immutable payload ConfigMaps (one, or as many parts of at most
/// [`DEFAULT_PART_BYTES`] as it takes), and make the plugin ConfigMap that references them by
/// name and digest.
pub fn pack_referenced(input: PackInput<'_>) -> Result<PackedRef> {
    pack_referenced_parts(input, DEFAULT_PART_BYTES)
}

/// zstd level of `wasmloop pack`: the smallest ConfigMaps (an 18 MB component takes seconds).
pub const SMALLEST: i32 = 19;
/// zstd level of `wasmloop dev`, which packs on every save: ~50 times faster than
/// [`SMALLEST`] for payloads ~20% larger.
pub const FASTEST: i32 = 3;

/// [`pack_referenced`] with parts of at most `part_bytes` compressed bytes each.
pub fn pack_referenced_parts(input: PackInput<'_>, part_bytes: usize) -> Result<PackedRef> {
    pack_referenced_with(input, part_bytes, SMALLEST)
}

/// [`pack_referenced_parts`] at zstd level `level` ([`SMALLEST`] or [`FASTEST`]).
pub fn pack_referenced_with(input: PackInput<'_>, part_bytes: usize, level: i32) -> Result<PackedRef> {
    if !input.wasm.starts_with(b"\0asm") {
        return Err(Error::NotWasm { path: input.path.to_string() });
    }
    if !(1024..=CONFIGMAP_LIMIT).contains(&part_bytes) {
        return Err(Error::BadPartSize(part_bytes));
    }
    if input.wasm.len() > MAX_PLUGIN_BYTES {
        return Err(Error::ComponentTooLarge { size: input.wasm.len() });
    }
    let digest = source::sha256(&[input.wasm]);
    let base = payload_name(&input.name, &digest);
    let compressed = zstd::encode_all(input.wasm, level).map_err(Error::Compress)?;
    let compressed_bytes = compressed.len();
    // One part keeps the single payload's name and form exactly.
    let chunk = part_bytes.saturating_sub(Encoding::Zstd.key().len()).max(1);
    let count = compressed.len().div_ceil(chunk).max(1);
    if count > MAX_PARTS {
        return Err(Error::TooManyParts { compressed: compressed_bytes, parts: count, part_bytes });
    }
    let name_of = |i: usize| if count == 1 { base.clone() } else { format!("{base}-{}-of-{count}", i + 1) };
    if name_of(count - 1).len() > 253 {
        return Err(Error::NameTooLong(input.name));
    }
    let slices: Vec<&[u8]> = if count == 1 { vec![compressed.as_slice()] } else { compressed.chunks(chunk).collect() };
    let payloads: Vec<ConfigMap> = slices
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name_of(i)),
                namespace: input.namespace.clone(),
                labels: Some(BTreeMap::from([
                    (PAYLOAD_LABEL.to_string(), "true".to_string()),
                    (PAYLOAD_PLUGIN_LABEL.to_string(), input.name.clone()),
                ])),
                annotations: (count > 1).then(|| {
                    BTreeMap::from([
                        (PART_ANNOTATION.to_string(), format!("{}/{count}", i + 1)),
                        (PART_DIGEST_ANNOTATION.to_string(), digest.clone()),
                    ])
                }),
                ..Default::default()
            },
            immutable: Some(true),
            binary_data: Some(BTreeMap::from([(Encoding::Zstd.key().to_string(), ByteString(bytes.to_vec()))])),
            ..Default::default()
        })
        .collect();
    let names: Vec<String> = payloads.iter().filter_map(|p| p.metadata.name.clone()).collect();
    let plugin = ConfigMap {
        metadata: ObjectMeta {
            name: Some(input.name),
            namespace: input.namespace,
            labels: Some(BTreeMap::from([(PLUGIN_LABEL.to_string(), "true".to_string())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            (MANIFEST_KEY.to_string(), input.manifest),
            (REF_KEY.to_string(), names.join(",")),
            (DIGEST_KEY.to_string(), digest.clone()),
        ])),
        ..Default::default()
    };
    Ok(PackedRef { payloads, plugin, raw_bytes: input.wasm.len(), compressed_bytes, digest })
}

/// What to tell the author about applying `cms` with client-side `kubectl apply`: `None` if each
/// fits its last-applied annotation with room to spare, else a warning naming the largest one,
/// its size (as the JSON kubectl copies into the annotation) and `--server-side`.
pub fn client_side_apply_warning(cms: &[&ConfigMap]) -> Option<String> {
    let (name, size) = cms
        .iter()
        .map(|cm| (cm.metadata.name.clone().unwrap_or_default(), serde_json::to_vec(cm).map_or(0, |j| j.len())))
        .max_by_key(|(_, size)| *size)?;
    let fix = "apply it with `kubectl apply --server-side` (which keeps no such copy), or make the plugin smaller";
    if size > ANNOTATIONS_LIMIT {
        Some(format!(
            "ConfigMap {name} is {size} bytes: client-side `kubectl apply` would copy it into the annotation \
             kubectl.kubernetes.io/last-applied-configuration, over the API server's {ANNOTATIONS_LIMIT}-byte limit on an \
             object's annotations, and be refused; {fix}"
        ))
    } else if size > ANNOTATIONS_LIMIT - ANNOTATIONS_MARGIN {
        Some(format!(
            "ConfigMap {name} is {size} bytes, {}% of the {ANNOTATIONS_LIMIT}-byte limit on an object's annotations that \
             client-side `kubectl apply` copies it into (kubectl.kubernetes.io/last-applied-configuration); prefer \
             `kubectl apply --server-side`",
            size * 100 / ANNOTATIONS_LIMIT
        ))
    } else {
        None
    }
}

/// ConfigMaps as one YAML stream (`---` between documents), in order: apply the payload first.
pub fn to_yaml_stream(cms: &[&ConfigMap]) -> Result<String> {
    let docs = cms.iter().map(|cm| to_yaml(cm)).collect::<Result<Vec<_>>>()?;
    Ok(docs
        .iter()
        .map(|d| {
            let d = d.strip_prefix("---\n").unwrap_or(d);
            if d.ends_with('\n') { format!("---\n{d}") } else { format!("---\n{d}\n") }
        })
        .collect())
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
    fn large_payloads_are_warned_about_client_side_apply() {
        let with_bytes = |n: usize| ConfigMap {
            metadata: ObjectMeta { name: Some("p-wasm-0123456789ab".into()), ..Default::default() },
            binary_data: Some(BTreeMap::from([("plugin.wasm.zst".to_string(), ByteString(vec![7; n]))])),
            ..Default::default()
        };
        let small = pack_referenced(input(&[b"\0asm".as_slice(), &[7u8; 5000]].concat())).unwrap();
        assert_eq!(client_side_apply_warning(&small.config_maps()), None);
        // base64 makes 3 bytes 4: 150 KiB of zstd is about 200 KiB of JSON, close to the limit.
        let close = client_side_apply_warning(&[&with_bytes(150 << 10), &small.plugin]).unwrap();
        assert!(close.contains("p-wasm-0123456789ab") && close.contains("prefer `kubectl apply --server-side`"), "{close}");
        assert!(!close.contains("refused"), "{close}");
        let over = client_side_apply_warning(&[&small.plugin, &with_bytes(200 << 10)]).unwrap();
        assert!(over.contains("be refused") && over.contains("--server-side") && over.contains("262144-byte limit"), "{over}");
    }

    #[test]
    fn non_wasm_is_refused() {
        assert!(matches!(pack(input(b"hello")), Err(Error::NotWasm { .. })));
    }

    #[test]
    fn referenced_form_round_trips_through_one_yaml_stream() {
        let wasm = [b"\0asm".as_slice(), &[7u8; 5000]].concat();
        let packed = pack_referenced(input(&wasm)).unwrap();
        let hex = packed.digest.strip_prefix("sha256:").unwrap();
        assert_eq!(packed.payloads.len(), 1);
        assert_eq!(packed.payloads[0].metadata.name.as_deref(), Some(format!("p-wasm-{}", &hex[..12]).as_str()));
        assert_eq!(packed.payloads[0].immutable, Some(true));
        assert_eq!(packed.payloads[0].metadata.annotations, None, "one part: the single payload's form");
        let yaml = to_yaml_stream(&packed.config_maps()).unwrap();
        let docs: Vec<&str> = yaml.split("---\n").filter(|d| !d.trim().is_empty()).collect();
        assert_eq!(docs.len(), 2, "{yaml}");
        let payload: ConfigMap = serde_saphyr::from_str(docs[0]).unwrap();
        let plugin: ConfigMap = serde_saphyr::from_str(docs[1]).unwrap();
        // The payload is not a plugin: the host must not load it as one.
        let labels = payload.metadata.labels.clone().unwrap();
        assert_eq!(labels.get(PAYLOAD_LABEL).map(String::as_str), Some("true"));
        assert!(!labels.contains_key(PLUGIN_LABEL), "{labels:?}");
        assert_eq!(payload.immutable, Some(true));
        assert!(plugin.binary_data.is_none(), "the plugin ConfigMap stays small");
        assert_eq!(plugin.metadata.labels.as_ref().unwrap().get(PLUGIN_LABEL).map(String::as_str), Some("true"));
        let data = plugin.data.clone().unwrap();
        assert_eq!(data.get(REF_KEY), payload.metadata.name.as_ref());
        assert_eq!(data.get(DIGEST_KEY), Some(&packed.digest));
        let src = source::decode_with(&plugin, &[&payload]).unwrap();
        assert_eq!(src.wasm, wasm);
        assert_eq!(src.manifest, "name: p\n");
        assert_eq!(src.wasm_digest, packed.digest);
    }

    /// Bytes zstd cannot shrink: a simple xorshift stream.
    fn incompressible(n: usize) -> Vec<u8> {
        let mut x: u64 = 0x9E3779B97F4A7C15;
        let mut wasm = b"\0asm".to_vec();
        wasm.extend((0..n).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
        wasm
    }

    #[test]
    fn large_components_are_split_over_parts_that_decode_together() {
        let wasm = incompressible(2_500_000);
        let packed = pack_referenced(input(&wasm)).unwrap();
        assert_eq!(packed.payloads.len(), 3, "2.5 MB of incompressible bytes in parts of {DEFAULT_PART_BYTES}");
        let hex = &packed.digest["sha256:".len()..];
        let names = packed.payload_names();
        assert_eq!(names[0], format!("p-wasm-{}-1-of-3", &hex[..12]));
        for (i, p) in packed.payloads.iter().enumerate() {
            assert_eq!(p.immutable, Some(true));
            let data: usize = p.binary_data.as_ref().unwrap().values().map(|b| b.0.len()).sum();
            assert!(data <= DEFAULT_PART_BYTES, "part {i}: {data} bytes");
            let annotations = p.metadata.annotations.clone().unwrap();
            assert_eq!(annotations.get(PART_ANNOTATION), Some(&format!("{}/3", i + 1)));
            assert_eq!(annotations.get(PART_DIGEST_ANNOTATION), Some(&packed.digest));
        }
        assert_eq!(packed.plugin.data.as_ref().unwrap().get(REF_KEY), Some(&names.join(",")));
        // Through YAML, as kubectl would apply them.
        let yaml = to_yaml_stream(&packed.config_maps()).unwrap();
        let docs: Vec<ConfigMap> = serde_saphyr::from_multiple(&yaml).unwrap();
        assert_eq!(docs.len(), 4);
        let parts: Vec<&ConfigMap> = docs[..3].iter().collect();
        let src = source::decode_with(&docs[3], &parts).unwrap();
        assert_eq!(src.wasm, wasm);
        assert_eq!(src.wasm_digest, packed.digest);
        // A part missing refuses the whole.
        assert!(matches!(source::decode_with(&docs[3], &parts[..2]), Err(source::Error::PayloadMissing { .. })));
        // Smaller parts on request; too many is refused.
        assert_eq!(pack_referenced_parts(input(&wasm), 256 << 10).unwrap().payloads.len(), 10);
        let err = pack_referenced_parts(input(&wasm), 1024).unwrap_err();
        assert!(matches!(err, Error::TooManyParts { .. }), "{err}");
        assert!(matches!(pack_referenced_parts(input(&wasm), 10), Err(Error::BadPartSize(10))));
    }

    #[test]
    fn the_fast_level_decodes_to_the_same_component() {
        let mut wasm = b"\0asm\x0d\0\x01\0".to_vec();
        wasm.extend((0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()));
        let fast = pack_referenced_with(input(&wasm), DEFAULT_PART_BYTES, FASTEST).unwrap();
        let small = pack_referenced(input(&wasm)).unwrap();
        assert_eq!(fast.digest, small.digest, "the digest is of the component, whatever the level");
        let parts: Vec<&ConfigMap> = fast.payloads.iter().collect();
        assert_eq!(source::decode_with(&fast.plugin, &parts).unwrap().wasm, wasm);
    }

    #[test]
    fn referenced_form_refuses_what_the_inline_form_refuses() {
        assert!(matches!(pack_referenced(input(b"hello")), Err(Error::NotWasm { .. })));
        let long = "a".repeat(250);
        let err = pack_referenced(PackInput { name: long, ..input(b"\0asm....") }).unwrap_err();
        assert!(matches!(err, Error::NameTooLong(_)), "{err}");
    }
}
