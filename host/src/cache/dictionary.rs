//! The compression-dictionary life cycle of an [`IndexedStore`]: once a kind's store holds
//! [`DICTIONARY_AT`] objects, its owner builds the kind's zstd dictionary from a sample of them
//! ([`IndexedStore::build_dictionary`], off the event path, or while a long first list is being
//! prepared: [`IndexedStore::dictionary_for_list`]), and from then on every object's JSON is
//! kept compressed with it. Compressing happens outside the store's lock, a chunk at a time.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::body::Dictionary;
use super::object::CachedObject;
use super::store::{BUILDING, BUILT, IndexedStore, Listed, NO_DICTIONARY, Prepared};

/// Objects a store holds before its kind's dictionary is built: below this, compression
/// would save little memory and the samples would say little about the kind.
pub const DICTIONARY_AT: usize = 1000;
/// Objects sampled (spread over the store) for a dictionary.
const DICTIONARY_SAMPLES: usize = 16;
/// Largest dictionary, in bytes.
pub(super) const DICTIONARY_BYTES: usize = 16 * 1024;

/// Objects compressed per write-lock hold while a store is packed: readers wait for a swap of
/// this many entries at most, and the plain versions are freed chunk by chunk.
const PACK_CHUNK: usize = 512;

/// What [`IndexedStore::build_dictionary`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packing {
    /// Bytes of the dictionary (0 if none could be built).
    pub dictionary_bytes: usize,
    /// Heap bytes of the dictionary prepared for compressing and decompressing.
    pub dictionary_heap_bytes: usize,
    /// Objects whose JSON is now compressed.
    pub packed: usize,
    /// JSON bytes of those objects before compression.
    pub json_bytes: usize,
    /// Their compressed bytes.
    pub packed_bytes: usize,
}

impl Packing {
    /// Nothing packed yet with `dict`.
    fn with(dict: &Dictionary) -> Self {
        Self { dictionary_bytes: dict.size(), dictionary_heap_bytes: dict.heap_bytes(), packed: 0, json_bytes: 0, packed_bytes: 0 }
    }

    /// Count one object now kept compressed.
    fn count(&mut self, packed: &CachedObject) {
        self.packed += 1;
        self.json_bytes += packed.json_len();
        self.packed_bytes += packed.stored_json_bytes();
    }
}

/// The kind's dictionary from [`DICTIONARY_SAMPLES`] of `objects`, spread over them; None if
/// none can be built.
fn sampled_dictionary(objects: &[&Arc<CachedObject>]) -> Option<Arc<Dictionary>> {
    let step = objects.len().div_ceil(DICTIONARY_SAMPLES).max(1);
    let samples: Vec<String> =
        objects.iter().step_by(step).take(DICTIONARY_SAMPLES).filter_map(|o| o.json().ok().map(Cow::into_owned)).collect();
    Dictionary::from_samples(&samples, DICTIONARY_BYTES)
}

impl IndexedStore {
    /// True, once, when the store has grown to [`DICTIONARY_AT`] objects without a dictionary:
    /// the caller then owes one call of [`build_dictionary`](Self::build_dictionary) (on a
    /// blocking thread: compressing every object takes tens of milliseconds).
    pub fn wants_dictionary(&self) -> bool {
        self.dictionary.load(Ordering::Relaxed) == NO_DICTIONARY
            && self.len() >= DICTIONARY_AT
            && self.dictionary.compare_exchange(NO_DICTIONARY, BUILDING, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Build the kind's dictionary from a sample of the cached objects, then compress every
    /// cached object with it; objects cached later are compressed as they arrive. Readers are
    /// never blocked for the compression, only for swapping the results in. A store builds at
    /// most one dictionary; if none can be built, objects stay plain.
    pub fn build_dictionary(&self) -> Packing {
        self.dictionary.store(BUILT, Ordering::Release);
        let plain = self.plain_objects();
        let Some(dict) = sampled_dictionary(&plain.iter().collect::<Vec<_>>()) else {
            return Packing { dictionary_bytes: 0, dictionary_heap_bytes: 0, packed: 0, json_bytes: 0, packed_bytes: 0 };
        };
        let mut packing = Packing::with(&dict);
        self.pack(plain, &dict, &mut packing);
        // Objects cached while the first pass ran are still plain: they are few.
        self.inner.write().dict = Some(dict.clone());
        self.pack(self.plain_objects(), &dict, &mut packing);
        packing
    }

    /// While a (re)list is being prepared: once it holds [`DICTIONARY_AT`] objects and the store
    /// has no dictionary, build the dictionary from the listed objects, compress those already
    /// prepared, and let every object prepared from now on be compressed as it arrives, so a
    /// large first list is never held plain (which then leaves the freed plain text scattered
    /// between the compressed objects). None if the store has or is building a dictionary, the
    /// list is too short, or no dictionary could be built.
    pub fn dictionary_for_list(&self, listed: &mut [Listed]) -> Option<Packing> {
        let fresh: Vec<&Arc<CachedObject>> = listed
            .iter()
            .filter_map(|Listed(p)| match p {
                Prepared::New { obj, .. } if !obj.is_packed() => Some(obj),
                _ => None,
            })
            .collect();
        if fresh.len() < DICTIONARY_AT
            || self.dictionary.compare_exchange(NO_DICTIONARY, BUILT, Ordering::AcqRel, Ordering::Relaxed).is_err()
        {
            return None;
        }
        let dict = sampled_dictionary(&fresh)?;
        let mut packing = Packing::with(&dict);
        for Listed(p) in listed.iter_mut() {
            if let Prepared::New { obj, .. } = p
                && let Some(packed) = obj.packed(&dict)
            {
                packing.count(&packed);
                *obj = Arc::new(packed);
            }
        }
        // Objects the store already holds (a relist) are compressed too.
        self.inner.write().dict = Some(dict.clone());
        self.pack(self.plain_objects(), &dict, &mut packing);
        Some(packing)
    }

    /// The cached objects whose JSON is not compressed.
    fn plain_objects(&self) -> Vec<Arc<CachedObject>> {
        self.inner.read().objects.values().map(|e| e.obj.clone()).filter(|o| !o.is_packed()).collect()
    }

    /// Compress `objects` with `dict` outside the lock, [`PACK_CHUNK`] at a time, swapping in
    /// those still cached as they were after each chunk.
    fn pack(&self, objects: Vec<Arc<CachedObject>>, dict: &Arc<Dictionary>, packing: &mut Packing) {
        let mut objects = objects.into_iter().peekable();
        while objects.peek().is_some() {
            let packed: Vec<(Arc<CachedObject>, CachedObject)> =
                objects.by_ref().take(PACK_CHUNK).filter_map(|o| o.packed(dict).map(|p| (o, p))).collect();
            let mut inner = self.inner.write();
            for (old, new) in packed {
                let Some(entry) = inner.objects.get_mut(old.key()) else { continue };
                if Arc::ptr_eq(&entry.obj, &old) {
                    packing.count(&new);
                    entry.obj = Arc::new(new);
                }
            }
        }
    }
}
