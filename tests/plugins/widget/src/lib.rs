//! `widget`: every `Widget` (`lifecycle.wasmloop.dev`, a namespaced custom resource whose CRD
//! the lifecycle tests install, delete and upgrade under the running plugin) gets a ConfigMap
//! `widget-<name>` owned by it, holding `spec.message` and the version of the Widget API it was
//! read through.
//!
//! The default build (0.1.0) reconciles `lifecycle.wasmloop.dev/v1`; the `v2` feature (0.2.0)
//! reconciles `lifecycle.wasmloop.dev/v2`, a version the CRD gains in the upgrade test.

use serde_json::{Value, json};
use wasmloop_sdk::{Error, KindRef, Metadata, Outcome, Reconciler, Request, ResultExt, cache, kinds, object};

/// The reconciled kind.
#[cfg(not(feature = "v2"))]
pub const WIDGET: KindRef = KindRef::from_static("lifecycle.wasmloop.dev/v1", "Widget");
#[cfg(feature = "v2")]
pub const WIDGET: KindRef = KindRef::from_static("lifecycle.wasmloop.dev/v2", "Widget");

/// The plugin's version.
#[cfg(not(feature = "v2"))]
pub const VERSION: &str = "0.1.0";
#[cfg(feature = "v2")]
pub const VERSION: &str = "0.2.0";

pub struct Widget;

impl Reconciler for Widget {
    fn metadata() -> Metadata {
        Metadata::new("widget", VERSION).reconciles(WIDGET).owns(kinds::CONFIG_MAP)
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let Some(widget) = cache::get_key::<Value>(&req.key).context("reading the Widget")? else {
            return Ok(Outcome::new());
        };
        if object::is_deleting(&widget) {
            return Ok(Outcome::new());
        }
        let (namespace, name) = (req.key.namespace.as_deref(), &req.key.name);
        let child = format!("widget-{name}");
        if cache::get::<Value>(&kinds::CONFIG_MAP, namespace, &child)?.is_some() {
            return Ok(Outcome::new());
        }
        let message = widget.pointer("/spec/message").and_then(Value::as_str).unwrap_or_default();
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": child, "namespace": namespace},
            "data": {"message": message, "readAs": WIDGET.api_version, "by": VERSION},
        });
        Ok(Outcome::new().create_owned(&widget, cm))
    }
}

wasmloop_sdk::export_reconciler!(Widget);
