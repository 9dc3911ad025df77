//! The host's event → key mapping ([`KeyMapper`], over its cache's stores and indexes) against
//! the conformance corpus (`model/conformance/mappings.json`), each failure naming its case.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use wasmloop_model::conformance;
use wasmloop_model::conformance::expect::parse_mapping;

use super::mapping::{KeyMapper, Scope};
use crate::cache::{CachedObject, Change, IndexSpec, IndexedStore};
use crate::kinds::KindRef;

#[test]
fn mappings() {
    conformance::check("mappings", |case| {
        let input = &case.input;
        let text = |v: &Value, f: &str| v[f].as_str().unwrap_or_default().to_owned();
        let primary = KindRef::new(text(&input["primary"], "apiVersion"), text(&input["primary"], "kind"));
        let store = Arc::new(IndexedStore::new(primary.clone()));
        for p in input["primaries"].as_array().into_iter().flatten() {
            store.apply(p.clone()).expect("a primary the store takes");
        }
        let mut index_names = HashMap::new();
        let mut uses = Vec::new();
        if let Some(index) = input.get("index") {
            let spec = IndexSpec::parse(&text(index, "path")).expect("the case's index path parses");
            uses.push(store.acquire_index(spec.clone()).expect("the index builds"));
            index_names.insert(text(index, "name"), spec.shared_name());
        }
        let mapper = KeyMapper {
            primary,
            namespaced: input["primary"]["namespaced"].as_bool().unwrap_or(true),
            stores: vec![store],
            index_names: Arc::new(index_names),
            scope: Scope::Everywhere,
            max_keys: 10_000,
        };
        let related = Arc::new(CachedObject::from_value(input["related"].clone()).expect("the related object is cacheable"));
        let mapped = mapper.for_watched(&parse_mapping(&input["mapping"]), &Change::Added(related));
        let mut keys: Vec<String> = mapped.keys.iter().map(ToString::to_string).collect();
        keys.sort();
        json!({"keys": keys})
    });
}
