//! Test plugin `greedy`: declares far more than a plugin's budgets allow, and reconciles
//! nothing (every reconcile returns no actions). What it declares is chosen when it is built:
//!
//! - by default, 400 watches of `v1/Secret`, each with a label selector of its own
//!   (`greedy-<n>=yes`): 401 informers, LISTs and WATCHes if the host let it load;
//! - feature `huge-selector`: one label selector of 1.4 MB on the reconciled kind (a request
//!   with it is too long for the API server);
//! - feature `indexes`: 3 000 indexes on `v1/ConfigMap`, each on a path of its own.
//!
//! It reconciles `v1/ConfigMap` labelled `wasmloop.dev/greedy-test=true`.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({ path: "../../../wit", world: "controller" });

use exports::wasmloop::controller::plugin::Guest;
use wasmloop::controller::types::*;

struct Plugin;
export!(Plugin);

fn kind(api_version: &str, kind: &str) -> KindRef {
    KindRef { api_version: api_version.into(), kind: kind.into() }
}

impl Guest for Plugin {
    fn metadata() -> PluginMetadata {
        let mut selector = "wasmloop.dev/greedy-test=true".to_string();
        let mut watches = vec![];
        let mut indexes = vec![];
        if cfg!(feature = "huge-selector") {
            // `x notin (v0,v1,…)`: valid, and ~1.4 MB.
            let values: Vec<String> = (0..200_000).map(|i| format!("v{i}")).collect();
            selector = format!("{selector},x notin ({})", values.join(","));
        } else if cfg!(feature = "indexes") {
            indexes =
                (0..3000).map(|i| Index { kind: kind("v1", "ConfigMap"), name: format!("i{i}"), path: format!("data.k{i}") }).collect();
        } else {
            watches = (0..400)
                .map(|i| Watch {
                    kind: kind("v1", "Secret"),
                    mapping: Mapping::Label("owner".into()),
                    selector: Some(format!("greedy-{i}=yes")),
                    annotation_selector: None,
                })
                .collect();
        }
        PluginMetadata {
            name: "greedy".into(),
            version: "0.1.0".into(),
            reconciles: kind("v1", "ConfigMap"),
            selector: Some(selector),
            annotation_selector: None,
            watches,
            indexes,
            fields: vec![],
        }
    }

    fn reconcile(_: Request) -> Result<Outcome, Failure> {
        Ok(Outcome { actions: vec![], requeue_after_ms: None })
    }
}
