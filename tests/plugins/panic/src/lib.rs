//! Test plugin `panic`: panics when the reconciled object's name starts with `panic`, runs out
//! of its shadow stack when it starts with `deep`, otherwise returns an empty outcome (so the
//! next call shows the plugin still works).
#![cfg(target_arch = "wasm32")]

// Built against contract 0.2 (wit/compat/v0.2): the host must keep loading 0.2 plugins, and
// these fixtures prove it on every run.
wit_bindgen::generate!({ path: "../../../wit/compat/v0.2", world: "controller" });

use exports::wasmloop::controller::plugin::Guest;
use wasmloop::controller::types::*;

struct Plugin;
export!(Plugin);

impl Guest for Plugin {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "panic".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, ReconcileError> {
        if request.key.name.starts_with("panic") {
            panic!("deliberate panic while reconciling {}", request.key.name);
        }
        if request.key.name.starts_with("deep") {
            return Ok(Outcome { actions: vec![], requeue_after_ms: Some(u64::from(deep(u32::MAX))) });
        }
        Ok(Outcome { actions: vec![], requeue_after_ms: None })
    }
}

/// Recurse with a 1 KiB frame on the shadow stack (in linear memory) until the stack runs out:
/// it is laid out first, growing down towards address 0, so the overflow leaves the memory
/// instead of running into static data or the heap.
#[inline(never)]
fn deep(n: u32) -> u32 {
    let mut frame = [0u8; 1024];
    frame[n as usize % 1024] = n as u8;
    let frame = std::hint::black_box(&mut frame);
    if n == 0 {
        return u32::from(frame[0]);
    }
    deep(n - 1).wrapping_add(u32::from(frame[1]))
}
