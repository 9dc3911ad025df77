//! What an index's entries take on the heap, measured, beside what the host estimates
//! (`IndexedStore::index_bytes`, what `budgets.indexMemory` is charged): for objects with one
//! value each (all distinct), with a few values shared by many objects, and with many values
//! each (an array field), so the estimate can be checked against the allocator for each shape.

use std::sync::Arc;

use serde_json::json;
use wasmloop::cache::{IndexSpec, IndexedStore};
use wasmloop::kinds::KindRef;

use crate::alloc::live_bytes;

/// One shape: how many objects, how many values each, how many distinct values overall.
pub struct Shape {
    /// What it is.
    pub name: &'static str,
    /// Objects in the store.
    pub objects: usize,
    /// Values each object has.
    pub values_per_object: usize,
    /// Distinct values over all objects.
    pub distinct: usize,
}

/// The shapes measured.
pub const SHAPES: [Shape; 4] = [
    Shape { name: "one distinct value each", objects: 20_000, values_per_object: 1, distinct: 20_000 },
    Shape { name: "one of 10 values each", objects: 20_000, values_per_object: 1, distinct: 10 },
    Shape { name: "50 of 500 values each", objects: 2_000, values_per_object: 50, distinct: 500 },
    Shape { name: "500 shared values each", objects: 500, values_per_object: 500, distinct: 500 },
];

/// Heap bytes an index of `shape` took (measured) and the host's estimate of them.
pub fn measure(shape: &Shape) -> anyhow::Result<(isize, usize)> {
    let store = Arc::new(IndexedStore::new(KindRef::new("example.com/v1", "Thing")));
    for i in 0..shape.objects {
        let refs: Vec<String> = (0..shape.values_per_object).map(|v| format!("value-{:08}", (i * 7 + v) % shape.distinct)).collect();
        store.apply(
            json!({"metadata": {"name": format!("thing-{i:06}"), "namespace": "ns", "resourceVersion": "1"}, "spec": {"refs": refs}}),
        )?;
    }
    let before = live_bytes();
    let index = store.acquire_index(IndexSpec::parse("spec.refs")?)?;
    let measured = live_bytes() - before;
    Ok((measured, index.bytes()))
}
