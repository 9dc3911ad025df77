//! Compiled functions kept in memory between compiles of a plugin's versions (Cranelift's
//! incremental compilation cache), for `wasmloop dev`'s edit → reload loop.
//!
//! Two versions of a plugin differ in a few functions: a TypeScript or Python plugin's new
//! version is the same interpreter with new code in its data, a Rust plugin's recompiles what
//! the edit touched. Cranelift keys each function by a sha256 of its IR (independent of where the
//! function sits in the module and of what its callees are called), so with this store a new
//! version compiles only the functions that changed; the rest are copied from the cache. The
//! result is the same machine code: the cache holds Cranelift's own output for an identical input.
//!
//! The store is bounded: functions are kept in two generations of at most `generation` bytes
//! each; when the current one is full it becomes the previous one and the older is dropped.
//! A function found in the previous generation moves to the current one, so what the last
//! compile used stays while what no recent compile touched goes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::CacheStore;

use super::limits::ByteSize;

/// A bounded in-memory store of Cranelift's compiled functions (see the module docs).
pub struct FunctionCache {
    generation: usize,
    state: Mutex<Generations>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Generations {
    current: HashMap<Vec<u8>, Vec<u8>>,
    current_bytes: usize,
    previous: HashMap<Vec<u8>, Vec<u8>>,
}

impl Generations {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>, generation: usize) {
        let (key_len, value_len) = (key.len(), value.len());
        if self.current_bytes + key_len + value_len > generation && !self.current.contains_key(&key) && !self.current.is_empty() {
            self.previous = std::mem::take(&mut self.current);
            self.current_bytes = 0;
        }
        match self.current.insert(key, value) {
            Some(old) => self.current_bytes = self.current_bytes - old.len() + value_len,
            None => self.current_bytes += key_len + value_len,
        }
    }
}

/// How often compiles found their functions in a [`FunctionCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FunctionCacheStats {
    /// Functions taken from the cache instead of compiled.
    pub hits: u64,
    /// Functions compiled (not in the cache).
    pub misses: u64,
}

impl FunctionCache {
    /// A store keeping at most two generations of `generation` bytes each.
    pub fn new(generation: ByteSize) -> Self {
        Self {
            generation: generation.as_usize(),
            state: Mutex::new(Generations::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Hits and misses since the store was made.
    pub fn stats(&self) -> FunctionCacheStats {
        FunctionCacheStats { hits: self.hits.load(Ordering::Relaxed), misses: self.misses.load(Ordering::Relaxed) }
    }

    /// Bytes held (keys and compiled functions, both generations).
    pub fn bytes(&self) -> usize {
        let state = self.lock();
        let previous: usize = state.previous.iter().map(|(k, v)| k.len() + v.len()).sum();
        state.current_bytes + previous
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // A panic while holding the lock leaves whole entries only: the maps stay usable.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let mut state = self.lock();
        let found = if let Some(value) = state.current.get(key) {
            Some(value.clone())
        } else if let Some(value) = state.previous.remove(key) {
            state.put(key.to_vec(), value.clone(), self.generation);
            Some(value)
        } else {
            None
        };
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found.map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        self.lock().put(key.to_vec(), value, self.generation);
        true
    }
}

impl fmt::Debug for FunctionCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FunctionCache")
            .field("generation", &self.generation)
            .field("bytes", &self.bytes())
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(generation: u64) -> FunctionCache {
        FunctionCache::new(ByteSize(generation))
    }

    #[test]
    fn a_stored_function_is_found_and_counted() {
        let c = cache(1024);
        assert!(c.get(b"k").is_none());
        assert!(c.insert(b"k", vec![1, 2, 3]));
        assert_eq!(c.get(b"k").as_deref(), Some(&[1u8, 2, 3][..]));
        assert_eq!(c.stats(), FunctionCacheStats { hits: 1, misses: 1 });
        assert_eq!(c.bytes(), 4);
    }

    #[test]
    fn at_most_two_generations_are_kept() {
        // 10-byte entries (2-byte key + 8), generations of 25 bytes: two entries each.
        let c = cache(25);
        for i in 0..10u8 {
            c.insert(&[b'k', i], vec![i; 8]);
        }
        assert!(c.bytes() <= 2 * 25, "{} bytes held", c.bytes());
        assert!(c.get(&[b'k', 0]).is_none(), "the oldest entries are dropped");
        assert!(c.get(&[b'k', 9]).is_some(), "the newest stays");
    }

    #[test]
    fn what_the_last_compile_used_survives_a_rotation() {
        let c = cache(25);
        c.insert(b"a0", vec![0; 8]);
        c.insert(b"b0", vec![0; 8]);
        c.insert(b"c0", vec![0; 8]); // a0, b0 become the previous generation
        assert!(c.get(b"a0").is_some()); // moved back into the current generation (with c0)
        c.insert(b"d0", vec![0; 8]); // current full: {c0, a0} become previous, b0 is dropped
        assert!(c.get(b"a0").is_some());
        assert!(c.get(b"b0").is_none());
    }

    #[test]
    fn an_entry_larger_than_a_generation_is_still_kept_alone() {
        let c = cache(4);
        c.insert(b"big", vec![0; 100]);
        assert!(c.get(b"big").is_some());
        c.insert(b"next", vec![0; 1]);
        assert!(c.get(b"big").is_some(), "moved to the previous generation, still found");
    }

    #[test]
    fn replacing_an_entry_keeps_the_count_right() {
        let c = cache(1024);
        c.insert(b"k", vec![0; 10]);
        c.insert(b"k", vec![0; 4]);
        assert_eq!(c.bytes(), 1 + 4);
    }
}
