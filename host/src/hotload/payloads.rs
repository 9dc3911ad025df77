//! [`Payloads`]: the payload ConfigMaps plugin ConfigMaps reference (`data.plugin.wasm.ref`),
//! found in the payload informer's cache only — never listed or read from the API server, so a
//! reference to missing parts costs no request — and verified once.
//!
//! A referenced payload is looked up only in the plugin ConfigMap's own namespace. An immutable
//! payload, once verified against its digest, is known by its uid (the parts' uids joined): a
//! manifest change that keeps the digest reuses the loaded component, with no read, decompress or
//! hash. A payload that appears after its plugin ConfigMap (the informer delivers it a moment
//! later) queues that ConfigMap again ([`Payloads::referencing`]).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;

use super::source::{self, PayloadRef};
use super::waiting::{NotLoaded, WaitReason};
use crate::cache::{CachedObject, Change, IndexedStore};
use crate::kinds::ObjectKey;

/// (namespace, name) of a payload ConfigMap.
pub(super) type PayloadName = (Option<String>, String);

/// The parts of a referenced payload, as the cache holds them (`None`: not there).
pub(super) struct Found(Vec<Option<Arc<CachedObject>>>);

impl Found {
    /// What identifies the payload's bytes, for the content's version: an immutable
    /// ConfigMap's uid cannot change content.
    pub(super) fn state(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|o| match o {
                Some(o) => format!("{}:{}:{}", o.name(), o.uid(), cached_immutable(o)),
                None => "missing".into(),
            })
            .collect();
        parts.join(",")
    }
}

/// What the component of a referenced payload is.
#[derive(Debug)]
pub(super) enum Resolved {
    /// Its bytes, read, decompressed and checked against the digest.
    Wasm(Vec<u8>),
    /// Verified before with this digest: the loaded component of that digest can be reused.
    Known,
}

/// The payload ConfigMaps of the plugin namespace(s), and what was verified of them.
pub(super) struct Payloads {
    store: Arc<IndexedStore>,
    /// Immutable payloads already checked: (namespace, name; a split one's part names joined by
    /// commas) → (uid; a split one's part uids joined, sha256 of the component).
    verified: Mutex<HashMap<PayloadName, (String, String)>>,
    /// The payloads each plugin ConfigMap references (its parts, in order).
    references: Mutex<HashMap<ObjectKey, Vec<PayloadName>>>,
}

impl Payloads {
    /// Payloads from the informer whose cache is `store`.
    pub(super) fn new(store: Arc<IndexedStore>) -> Self {
        Self { store, verified: Mutex::default(), references: Mutex::default() }
    }

    /// The parts of `reference`, in `namespace` (the plugin ConfigMap's), as the cache holds them.
    pub(super) fn lookup(&self, namespace: Option<&str>, reference: &PayloadRef) -> Found {
        Found(reference.parts.iter().map(|p| self.store.get(namespace, p)).collect())
    }

    /// `key` references `parts` (of one or more references) now: a change of one of them loads
    /// it again.
    pub(super) fn track(&self, key: &ObjectKey, parts: Vec<PayloadName>) {
        let mut references = self.references.lock();
        if parts.is_empty() {
            references.remove(key);
        } else {
            references.insert(key.clone(), parts);
        }
    }

    /// `key` is gone: it references nothing.
    pub(super) fn forget(&self, key: &ObjectKey) {
        self.references.lock().remove(key);
    }

    /// The plugin ConfigMaps to load again after `change` of a payload ConfigMap.
    pub(super) fn referencing(&self, change: &Change) -> Vec<ObjectKey> {
        if change.is_unchanged() {
            return Vec::new();
        }
        let o = change.object();
        let (namespace, name) = (o.namespace().map(str::to_string), o.name().to_string());
        if let Change::Deleted(_) = change {
            self.verified.lock().retain(|(ns, names), _| !(*ns == namespace && names.split(',').any(|n| n == name)));
        }
        let references = self.references.lock();
        references.iter().filter(|(_, parts)| parts.iter().any(|(ns, n)| *ns == namespace && *n == name)).map(|(k, _)| k.clone()).collect()
    }

    /// The component of `reference` (parts `found`, in the plugin ConfigMap's `namespace`):
    /// [`Resolved::Known`] if these immutable ConfigMaps were verified before with that digest,
    /// else their bytes, joined, decompressed and checked.
    pub(super) fn resolve(&self, namespace: Option<&str>, reference: &PayloadRef, found: &Found) -> Result<Resolved, NotLoaded> {
        let key = (namespace.map(str::to_string), reference.names());
        let mut uids = Vec::with_capacity(found.0.len());
        let mut parts = Vec::with_capacity(found.0.len());
        for (name, part) in reference.parts.iter().zip(&found.0) {
            let Some(part) = part else {
                let namespace = namespace.unwrap_or_default().to_string();
                return Err(WaitReason::PayloadMissing { namespace, name: name.clone() }.into());
            };
            if !cached_immutable(part) {
                return Err(source::Error::PayloadNotImmutable { name: name.clone() }.to_string().into());
            }
            uids.push(part.uid().to_string());
            parts.push(part);
        }
        let uid = if uids.iter().any(String::is_empty) { String::new() } else { uids.join(",") };
        let known = self.verified.lock().get(&key).filter(|(u, _)| !uid.is_empty() && *u == uid).map(|(_, d)| d.clone());
        if let Some(actual) = known {
            if actual != reference.digest {
                let e = source::Error::DigestMismatch { name: reference.names(), declared: reference.digest.clone(), actual };
                return Err(e.to_string().into());
            }
            return Ok(Resolved::Known);
        }
        let mut cms = Vec::with_capacity(parts.len());
        for part in parts {
            cms.push(part.parse::<ConfigMap>().map_err(|e| format!("payload ConfigMap {}: {e}", part.name()))?);
        }
        match source::decode_payload(&cms.iter().collect::<Vec<_>>(), reference) {
            Ok((wasm, _, _)) => {
                self.verified.lock().insert(key, (uid, reference.digest.clone()));
                Ok(Resolved::Wasm(wasm))
            }
            Err(e) => {
                if let source::Error::DigestMismatch { actual, .. } = &e {
                    self.verified.lock().insert(key, (uid, actual.clone()));
                }
                Err(e.to_string().into())
            }
        }
    }

    /// Read the bytes of `reference` again (a [`Resolved::Known`] payload whose component is no
    /// longer loaded).
    pub(super) fn read(&self, namespace: Option<&str>, reference: &PayloadRef, found: &Found) -> Result<Vec<u8>, NotLoaded> {
        self.verified.lock().remove(&(namespace.map(str::to_string), reference.names()));
        match self.resolve(namespace, reference, found)? {
            Resolved::Wasm(wasm) => Ok(wasm),
            Resolved::Known => Err(NotLoaded::Refused("the payload was verified meanwhile; try again".into())),
        }
    }
}

/// `immutable: true` on a cached ConfigMap, without decoding its binaryData.
fn cached_immutable(o: &CachedObject) -> bool {
    #[derive(serde::Deserialize)]
    struct Flag {
        immutable: Option<bool>,
    }
    o.parse::<Flag>().ok().and_then(|f| f.immutable) == Some(true)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kinds::KindRef;

    fn payload(name: &str, uid: &str, immutable: bool, wasm: &[u8]) -> serde_json::Value {
        let zst = zstd::encode_all(wasm, 3).unwrap();
        json!({"apiVersion": "v1", "kind": "ConfigMap", "immutable": immutable,
               "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1",
                            "labels": {"wasmloop.dev/plugin-payload": "true"}},
               "binaryData": {"plugin.wasm.zst": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, zst)}})
    }

    fn key() -> ObjectKey {
        KindRef::new("v1", "ConfigMap").key(Some("ns"), "p")
    }

    #[test]
    fn payloads_come_from_the_cache_are_verified_once_and_waited_for_when_missing() {
        let store = Arc::new(IndexedStore::new(KindRef::new("v1", "ConfigMap")));
        let payloads = Payloads::new(store.clone());
        let wasm = b"\0asm component".to_vec();
        let reference = PayloadRef { parts: vec!["p-wasm-1".into()], digest: source::sha256(&[&wasm]) };
        payloads.track(&key(), vec![(Some("ns".into()), "p-wasm-1".into())]);
        let found = payloads.lookup(Some("ns"), &reference);
        assert_eq!(found.state(), "missing");
        let err = payloads.resolve(Some("ns"), &reference, &found).unwrap_err();
        assert!(matches!(err, NotLoaded::Waiting(WaitReason::PayloadMissing { .. })), "{err:?}");
        // It appears: the plugin ConfigMap that references it is loaded again.
        let change = store.apply(payload("p-wasm-1", "u1", true, &wasm)).unwrap();
        assert_eq!(payloads.referencing(&change), vec![key()]);
        let found = payloads.lookup(Some("ns"), &reference);
        assert_eq!(found.state(), "p-wasm-1:u1:true");
        assert!(matches!(payloads.resolve(Some("ns"), &reference, &found), Ok(Resolved::Wasm(w)) if w == wasm));
        assert!(matches!(payloads.resolve(Some("ns"), &reference, &found), Ok(Resolved::Known)), "verified once, by uid");
        // A reference with another digest to the same bytes is a mismatch, without decoding again.
        let wrong = PayloadRef { digest: format!("sha256:{}", "0".repeat(64)), ..reference.clone() };
        let err = payloads.resolve(Some("ns"), &wrong, &found).unwrap_err();
        assert!(err.to_string().contains("does not match the digest"), "{err}");
        // Nothing referenced any more: no longer loaded again on its changes.
        payloads.track(&key(), vec![]);
        let change = store.apply(payload("p-wasm-1", "u2", true, &wasm)).unwrap();
        assert!(payloads.referencing(&change).is_empty());
    }

    #[test]
    fn a_mutable_payload_is_refused() {
        let store = Arc::new(IndexedStore::new(KindRef::new("v1", "ConfigMap")));
        let payloads = Payloads::new(store.clone());
        store.apply(payload("p-wasm-1", "u1", false, b"x")).unwrap();
        let reference = PayloadRef { parts: vec!["p-wasm-1".into()], digest: source::sha256(&[b"x"]) };
        let found = payloads.lookup(Some("ns"), &reference);
        let err = payloads.resolve(Some("ns"), &reference, &found).unwrap_err();
        assert!(err.to_string().contains("is not immutable"), "{err}");
    }
}
