//! Fuzz harnesses of the packed-ConfigMap decoders ([`decode_with`], [`decode`],
//! [`payload_ref`], `binaryData`'s base64 as the API server sends it) and of `wasmloop pack`'s
//! round trip, run by [`crate::fuzz::run`].

use std::collections::BTreeMap;
use std::io::Write;

use k8s_openapi::ByteString;
use proptest::prelude::*;

use super::*;
use crate::hotload::pack::{self, PackInput};

/// A small stand-in component; its digest is one the generated references use.
const WASM: &[u8] = b"\0asm\x0d\0\x01\0 fuzz component";

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 1).expect("zstd")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).expect("gzip");
    gz.finish().expect("gzip")
}

/// A `binaryData` value: raw, zstd or gzip of [`WASM`] or of random bytes, possibly cut short or
/// with a byte flipped, or random bytes.
fn payload_bytes() -> impl Strategy<Value = Vec<u8>> {
    let content = prop_oneof![Just(WASM.to_vec()), prop::collection::vec(any::<u8>(), 0..64)];
    (content, 0u8..3, any::<prop::sample::Index>(), 0u8..4).prop_map(|(content, codec, at, damage)| {
        let mut bytes = match codec {
            0 => content,
            1 => zstd(&content),
            _ => gzip(&content),
        };
        if !bytes.is_empty() {
            let i = at.index(bytes.len());
            match damage {
                0 => bytes.truncate(i),
                1 => bytes[i] ^= 0x5a,
                _ => {}
            }
        }
        bytes
    })
}

/// A ConfigMap of random `data`, `binaryData`, labels, annotations and `immutable`, over the keys
/// the decoder reads (and others), with values valid and not.
fn config_map() -> impl Strategy<Value = ConfigMap> {
    let good_digest = sha256(&[WASM]);
    let data_value = prop_oneof![
        Just("name: x".to_owned()),
        Just("x-wasm-0123456789ab".to_owned()),
        Just(good_digest.clone()),
        Just(good_digest.to_uppercase()),
        Just(format!(" {good_digest} ")),
        Just("sha256:abc".to_owned()),
        Just("../other".to_owned()),
        Just("a.-b".to_owned()),
        any::<String>(),
    ];
    let data = prop::collection::btree_map(prop::sample::select(&[MANIFEST_KEY, REF_KEY, DIGEST_KEY, "other"][..]), data_value, 0..4);
    let binary_key = prop::sample::select(&["plugin.wasm", "plugin.wasm.zst", "plugin.wasm.gz", "plugin.wasm.xz"][..]);
    let binary = prop::option::of(prop::collection::btree_map(binary_key, payload_bytes(), 0..3));
    let label_value = prop::sample::select(&["true", "false", ""][..]);
    let labels = prop::collection::btree_map(prop::sample::select(&[PAYLOAD_LABEL, PLUGIN_LABEL, "app"][..]), label_value, 0..3);
    let annotations = prop::collection::btree_map(prop::sample::select(&[STATUS_ANNOTATION, "x"][..]), any::<String>(), 0..2);
    (prop::option::of(data), binary, labels, annotations, prop::option::of(any::<bool>())).prop_map(
        |(data, binary, labels, annotations, immutable)| {
            let owned = |m: BTreeMap<&str, String>| m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            let mut cm = ConfigMap {
                data: data.map(owned),
                binary_data: binary.map(|b| b.into_iter().map(|(k, v)| (k.to_owned(), ByteString(v))).collect()),
                immutable,
                ..Default::default()
            };
            cm.metadata.name = Some("x-wasm-0123456789ab".into());
            cm.metadata.namespace = Some("plugins".into());
            cm.metadata.labels = Some(labels.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect());
            cm.metadata.annotations = Some(owned(annotations));
            cm
        },
    )
}

/// What every accepted decode must hold: the digests are of the bytes returned, the manifest is
/// `data.plugin.yaml`, the size is within the limit, and a referenced payload matches the
/// declared digest.
fn check_source(cm: &ConfigMap, src: &PluginSource) -> Result<(), TestCaseError> {
    prop_assert!(src.wasm.len() <= MAX_PLUGIN_BYTES);
    prop_assert_eq!(&src.wasm_digest, &sha256(&[&src.wasm]));
    prop_assert_eq!(&src.digest, &sha256(&[&src.wasm, src.manifest.as_bytes()]));
    prop_assert_eq!(Some(src.manifest.as_str()), manifest(cm).ok());
    if src.payload.is_some() {
        let declared = cm.data.as_ref().and_then(|d| d.get(DIGEST_KEY)).map(|d| d.trim());
        prop_assert_eq!(Some(src.wasm_digest.as_str()), declared);
    }
    Ok(())
}

/// A change that may break a well-formed pair of plugin and payload ConfigMaps.
#[derive(Clone, Copy, Debug)]
enum Mutation {
    None,
    DropDataKey,
    InlineToo,
    DamagePayload,
    Mutable,
    Unlabelled,
    UppercaseDigest,
    SpacedReference,
}

/// A well-formed pair (inline: the plugin ConfigMap alone; referenced: plugin and payload) of a
/// random component in a random encoding, then one [`Mutation`].
/// The flag is whether it was left intact.
fn well_formed_pair() -> impl Strategy<Value = (ConfigMap, Option<ConfigMap>, bool)> {
    let content = prop_oneof![Just(WASM.to_vec()), prop::collection::vec(any::<u8>(), 0..256)];
    let mutation = prop::sample::select(
        &[
            Mutation::None,
            Mutation::None,
            Mutation::None,
            Mutation::DropDataKey,
            Mutation::InlineToo,
            Mutation::DamagePayload,
            Mutation::Mutable,
            Mutation::Unlabelled,
            Mutation::UppercaseDigest,
            Mutation::SpacedReference,
        ][..],
    );
    (content, 0u8..3, any::<bool>(), mutation, any::<prop::sample::Index>()).prop_map(|(content, codec, referenced, mutation, at)| {
        let (key, mut bytes) = match codec {
            0 => ("plugin.wasm", content.clone()),
            1 => ("plugin.wasm.zst", zstd(&content)),
            _ => ("plugin.wasm.gz", gzip(&content)),
        };
        if matches!(mutation, Mutation::DamagePayload) && !bytes.is_empty() {
            let i = at.index(bytes.len());
            bytes[i] ^= 0x5a;
        }
        let binary = BTreeMap::from([(key.to_owned(), ByteString(bytes))]);
        let mut data = BTreeMap::from([(MANIFEST_KEY.to_owned(), "name: x".to_owned())]);
        let mut payload = None;
        if referenced {
            let (name, digest) = ("x-wasm-0123456789ab".to_owned(), sha256(&[&content]));
            let (name, digest) = match mutation {
                Mutation::UppercaseDigest => (name, digest.to_uppercase()),
                Mutation::SpacedReference => (format!(" {name}\n"), format!("{digest} ")),
                _ => (name, digest),
            };
            data.extend([(REF_KEY.to_owned(), name), (DIGEST_KEY.to_owned(), digest)]);
            let mut p = ConfigMap { binary_data: Some(binary.clone()), immutable: Some(true), ..Default::default() };
            p.metadata.labels = Some(BTreeMap::from([(PAYLOAD_LABEL.to_owned(), "true".to_owned())]));
            match mutation {
                Mutation::Mutable => p.immutable = None,
                Mutation::Unlabelled => p.metadata.labels = None,
                _ => {}
            }
            payload = Some(p);
        }
        if matches!(mutation, Mutation::DropDataKey) {
            let keys: Vec<String> = data.keys().cloned().collect();
            data.remove(&keys[at.index(keys.len())]);
        }
        let inline = !referenced || matches!(mutation, Mutation::InlineToo);
        let cm = ConfigMap { data: Some(data), binary_data: inline.then_some(binary), ..Default::default() };
        (cm, payload, matches!(mutation, Mutation::None))
    })
}

/// `payload_ref`, `decode` and `decode_with` on random plugin and payload ConfigMaps, and on
/// well-formed ones with one thing broken: never panic; a refusal has a message; what they
/// accept holds [`check_source`]; an unbroken pair is accepted.
#[test]
fn fuzz_configmap_decode() {
    let pairs =
        prop_oneof![(config_map(), prop::option::of(config_map())).prop_map(|(cm, payload)| (cm, payload, false)), well_formed_pair(),];
    crate::fuzz::run(file!(), "configmap", pairs, |(cm, payload, intact)| {
        if let Err(e) = payload_ref(&cm) {
            prop_assert!(!e.to_string().is_empty());
        }
        if let Ok(src) = decode(&cm) {
            check_source(&cm, &src)?;
        }
        match decode_with(&cm, &payload.iter().collect::<Vec<_>>()) {
            Ok(src) => {
                check_source(&cm, &src)?;
                Ok(true)
            }
            Err(e) => {
                prop_assert!(!intact, "a well-formed pair is refused: {e}");
                prop_assert!(!e.to_string().is_empty());
                Ok(false)
            }
        }
    });
}

/// A ConfigMap's JSON as the API server sends it: `binaryData` values are base64 (valid, not
/// padded, with other alphabets or junk), `data` values strings or not.
fn configmap_json() -> impl Strategy<Value = String> {
    let b64 = |bytes: Vec<u8>| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes);
    let intact = prop_oneof![Just(WASM.to_vec()), Just(zstd(WASM)), Just(gzip(WASM))];
    let encoded = prop_oneof![
        4 => intact.prop_map(b64),
        2 => payload_bytes().prop_map(b64),
        1 => payload_bytes().prop_map(move |b| b64(b).trim_end_matches('=').to_owned()),
        1 => "[A-Za-z0-9+/=_-]{0,12}",
        1 => any::<String>(),
    ];
    let binary_key = prop::sample::select(&["plugin.wasm", "plugin.wasm.zst", "plugin.wasm.gz"][..]);
    let binary = prop_oneof![
        4 => prop::collection::btree_map(binary_key.clone(), encoded.clone(), 1),
        1 => prop::collection::btree_map(binary_key, encoded, 0..3),
    ];
    let data_value =
        prop_oneof![6 => Just(serde_json::json!("name: x")), 1 => Just(serde_json::json!(1)), 1 => Just(serde_json::json!(null))];
    let data =
        prop::collection::btree_map(prop::sample::select(&[MANIFEST_KEY, MANIFEST_KEY, MANIFEST_KEY, "other"][..]), data_value, 0..3);
    prop_oneof![
        1 => any::<String>(),
        6 => (binary, data, prop::option::of(any::<bool>())).prop_map(|(binary, data, immutable)| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p", "namespace": "plugins"},
                "binaryData": binary, "data": data, "immutable": immutable,
            })
            .to_string()
        }),
    ]
}

/// Deserialising a ConfigMap from JSON (k8s-openapi's base64 of `binaryData`) and decoding it:
/// never panics; what decodes holds [`check_source`].
#[test]
fn fuzz_configmap_json() {
    crate::fuzz::run(file!(), "configmap-json", configmap_json(), |text| {
        let Ok(cm) = serde_json::from_str::<ConfigMap>(&text) else { return Ok(false) };
        match decode(&cm) {
            Ok(src) => {
                check_source(&cm, &src)?;
                Ok(true)
            }
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                Ok(false)
            }
        }
    });
}

/// `wasmloop pack` and `pack --referenced` of a random component and manifest text, written as
/// YAML and read back as `kubectl apply` would send it, decode to the same bytes and manifest.
/// (A case costs some 100 ordinary ones: zstd level 19 sets up large tables for each pack.)
#[test]
fn fuzz_pack_round_trip() {
    let name = "[a-z]([a-z0-9-]{0,20}[a-z0-9])?";
    let manifest = prop_oneof![Just("name: p\n".to_owned()), any::<String>(), "[ -~\n\t]{0,40}"];
    let inputs = (prop::collection::vec(any::<u8>(), 0..2048), manifest, name);
    crate::fuzz::run_costly(file!(), "pack", 16, inputs, |(body, manifest, name)| {
        let wasm = [b"\0asm".as_slice(), &body].concat();
        let input =
            || PackInput { wasm: &wasm, path: "p.wasm", manifest: manifest.clone(), name: name.clone(), namespace: Some("plugins".into()) };
        let packed = pack::pack(input()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let yaml = pack::to_yaml(&packed.config_map).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back: ConfigMap = serde_saphyr::from_str(&yaml).map_err(|e| TestCaseError::fail(format!("{e}\n{yaml}")))?;
        let src = decode(&back).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&src.wasm, &wasm);
        prop_assert_eq!(&src.manifest, &manifest);

        let packed = pack::pack_referenced(input()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let stream = pack::to_yaml_stream(&packed.config_maps()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let docs: Vec<ConfigMap> = serde_saphyr::from_multiple(&stream).map_err(|e| TestCaseError::fail(format!("{e}\n{stream}")))?;
        prop_assert_eq!(docs.len(), 2, "{}", stream);
        let src = decode_with(&docs[1], &[&docs[0]]).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&src.wasm, &wasm);
        prop_assert_eq!(&src.manifest, &manifest);
        prop_assert_eq!(&src.wasm_digest, &packed.digest);
        Ok(true)
    });
}

/// A zstd frame whose header declares `declared` bytes of content (a terabyte, say), followed
/// by `blocks` RLE blocks of 100 000 bytes each.
fn zstd_frame_declaring(declared: u64, blocks: u32) -> Vec<u8> {
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd];
    // Frame header descriptor: an 8-byte content size, a window descriptor, no checksum.
    frame.push(0b1100_0000);
    // Window 2^27 (128 MiB), the decoder's default limit.
    frame.push((27 - 10) << 3);
    frame.extend_from_slice(&declared.to_le_bytes());
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let header = last | (1 << 1) | (100_000 << 3);
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.push(7);
    }
    frame
}

/// The declared size of a zstd frame is not trusted: decompression streams into a buffer
/// bounded by [`MAX_PLUGIN_BYTES`], so a frame claiming a terabyte is refused as too large once
/// it has produced that much (or as corrupt when it ends early), never allocated up front.
#[test]
fn a_zstd_frame_declaring_a_terabyte_is_bounded_by_the_limit() {
    let blocks = u32::try_from(MAX_PLUGIN_BYTES / 100_000 + 2).unwrap();
    let err = decompress(Encoding::Zstd, "plugin.wasm.zst", &zstd_frame_declaring(1 << 40, blocks)).unwrap_err();
    assert_eq!(err, Error::TooLarge { key: "plugin.wasm.zst", limit: MAX_PLUGIN_BYTES });
    let err = decompress(Encoding::Zstd, "plugin.wasm.zst", &zstd_frame_declaring(1 << 40, 1)).unwrap_err();
    assert!(matches!(err, Error::BadCompression { .. }), "{err}");
    // The same frame with its true size decodes.
    assert_eq!(decompress(Encoding::Zstd, "plugin.wasm.zst", &zstd_frame_declaring(100_000, 1)).unwrap(), vec![7; 100_000]);
}
