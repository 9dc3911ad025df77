//! The plugin's memory cap in a call's Store ([`MemoryLimiter`]): wasmtime's limits, plus what
//! the host needs to tell an out-of-memory trap from other traps (the first refused growth) and
//! the largest memory a call reached.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

use super::limits::Limits;

/// The plugin's memory cap, remembering whether a growth was refused.
pub struct MemoryLimiter {
    inner: StoreLimits,
    /// Size (bytes) of the first refused memory growth.
    pub refused: Option<usize>,
    /// Largest memory size granted.
    pub peak: usize,
}

impl MemoryLimiter {
    /// The cap of `limits`: memory and table elements.
    pub(super) fn new(limits: &Limits) -> Self {
        let inner = StoreLimitsBuilder::new()
            .memory_size(limits.memory.as_usize())
            .table_elements(usize::try_from(limits.table_elements).unwrap_or(usize::MAX))
            .build();
        Self { inner, refused: None, peak: 0 }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.inner.memory_growing(current, desired, maximum)?;
        if allowed {
            self.peak = self.peak.max(desired);
        } else if self.refused.is_none() {
            self.refused = Some(desired);
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        // The pool could not provide the memory: count it as refused, the guest sees failure.
        if self.refused.is_none() {
            self.refused = Some(self.peak);
        }
        self.inner.memory_grow_failed(error)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.inner.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_growth_is_remembered() {
        let mut l = MemoryLimiter::new(&Limits { memory: crate::plugin::ByteSize(1 << 20), ..Limits::default() });
        assert!(l.memory_growing(0, 1 << 19, None).unwrap());
        assert_eq!((l.peak, l.refused), (1 << 19, None));
        assert!(!l.memory_growing(1 << 19, 2 << 20, None).unwrap());
        assert_eq!(l.refused, Some(2 << 20));
    }
}
