//! `wasmloop inspect <plugin.wasm>`: what a plugin is, without a cluster.

use std::fmt;
use std::time::Duration;

use wasmtime::component::types::ComponentItem;

use super::bindings;
use super::contract;
use super::engine::{Compiled, PluginEngine};
use super::error::{Error, Result};
use super::instance;
use super::limits::Limits;
use crate::reconciler::{Mapping, ReconcilerSpec};

/// What `inspect` found.
#[derive(Clone, Debug)]
pub struct Inspection {
    /// From `metadata()`, if it answered.
    pub name: Option<String>,
    /// The plugin's own version, from `metadata()`, if it answered.
    pub version: Option<String>,
    /// The `wasmloop:controller` version the plugin exports, if any.
    pub wit_package_version: Option<String>,
    /// Whether this host can run it (contract version).
    pub compatible: bool,
    /// Size of the component's bytes.
    pub size: usize,
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    /// Time taken to compile the component.
    pub compile_time: Duration,
    /// Exported names; instances list their functions: `iface@v: f, g`.
    pub exports: Vec<String>,
    /// Imported names.
    pub imports: Vec<String>,
    /// What `metadata()` answered, as the host reads it.
    pub metadata: Option<ReconcilerSpec>,
    /// Why there is no metadata (incompatible, link error, trap, invalid answer).
    pub metadata_error: Option<String>,
}

fn describe(engine: &PluginEngine, name: &str, item: &ComponentItem) -> String {
    match item {
        ComponentItem::ComponentInstance(i) => {
            let funcs: Vec<&str> =
                i.exports(engine.engine()).filter(|(_, e)| matches!(e.ty, ComponentItem::ComponentFunc(_))).map(|(n, _)| n).collect();
            if funcs.is_empty() { name.to_owned() } else { format!("{name}: {}", funcs.join(", ")) }
        }
        ComponentItem::ComponentFunc(_) => format!("{name} (function)"),
        _ => name.to_owned(),
    }
}

/// Compile `bytes` and describe them. **Blocking** (compiles). Fails only if the bytes are not a
/// component that compiles; a plugin that is incompatible or whose `metadata()` fails is still
/// described, with `metadata_error` saying why.
pub fn inspect(engine: &PluginEngine, bytes: &[u8]) -> Result<Inspection> {
    inspect_compiled(engine, engine.compile_timed(bytes)?)
}

/// [`inspect`] a component already compiled (or deserialised from the precompiled cache).
pub fn inspect_compiled(engine: &PluginEngine, compiled: Compiled) -> Result<Inspection> {
    let ty = compiled.component.component_type();
    let exports: Vec<String> = ty.exports(engine.engine()).map(|(n, e)| describe(engine, n, &e.ty)).collect();
    let imports: Vec<String> = ty.imports(engine.engine()).map(|(n, _)| n.to_owned()).collect();
    let export_names: Vec<&str> = ty.exports(engine.engine()).map(|(n, _)| n).collect();
    let prefix = format!("{}@", bindings::PLUGIN_INTERFACE);
    let wit_package_version = export_names.iter().find_map(|n| n.strip_prefix(prefix.as_str())).map(str::to_owned);
    let checked = contract::check_export_names(export_names.iter().copied()).map_err(Error::from);
    let compatible = checked.is_ok();
    let (metadata, metadata_error) = match checked
        .and_then(|_| instance::instantiate_for_metadata(engine, &compiled.component, &Limits::default()))
        .and_then(|m| super::convert::spec_from_metadata(m).map_err(Error::InvalidMetadata))
    {
        Ok(spec) => (Some(spec), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Ok(Inspection {
        name: metadata.as_ref().map(|m| m.name.clone()),
        version: metadata.as_ref().map(|m| m.version.clone()),
        wit_package_version,
        compatible,
        size: compiled.size,
        digest: compiled.digest,
        compile_time: compiled.elapsed,
        exports,
        imports,
        metadata,
        metadata_error,
    })
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        writeln!(f, "plugin:     {} {}", or(&self.name), or(&self.version))?;
        writeln!(
            f,
            "contract:   {}@{} ({})",
            bindings::PACKAGE,
            or(&self.wit_package_version),
            if self.compatible {
                format!("compatible with this host's {}", bindings::VERSION)
            } else {
                format!("NOT compatible with this host's {}", bindings::VERSION)
            }
        )?;
        writeln!(f, "size:       {} bytes", self.size)?;
        writeln!(f, "digest:     {}", self.digest)?;
        writeln!(f, "compiled:   in {} ms", self.compile_time.as_millis())?;
        if let Some(m) = &self.metadata {
            let selectors = |labels: &Option<String>, annotations: &Option<String>| {
                let mut out = String::new();
                if let Some(s) = labels {
                    out.push_str(&format!(", selector {s}"));
                }
                if let Some(s) = annotations {
                    out.push_str(&format!(", annotation selector {s}"));
                }
                out
            };
            let primary = selectors(&m.selector, &m.annotation_selector);
            let primary = primary.strip_prefix(", ").map(|s| format!(" ({s})")).unwrap_or_default();
            writeln!(f, "reconciles: {}{primary}", m.reconciles)?;
            for w in &m.watches {
                let mapping = match &w.mapping {
                    Mapping::Owner => "owner".to_string(),
                    Mapping::Label(l) => format!("label {l}"),
                    Mapping::SameName => "same-name".into(),
                    Mapping::Namespace => "namespace".into(),
                    Mapping::Index { index, value } => format!(
                        "index {index} by {}",
                        match value {
                            crate::reconciler::IndexValue::Name => "name".to_string(),
                            crate::reconciler::IndexValue::NamespacedName => "namespace/name".to_string(),
                            crate::reconciler::IndexValue::Field(p) => format!("field {p}"),
                        }
                    ),
                };
                let sel = selectors(&w.selector, &w.annotation_selector);
                writeln!(f, "watches:    {} (via {mapping}{sel})", w.kind)?;
            }
            for i in &m.indexes {
                writeln!(f, "index:      {} {} = {}", i.kind, i.name, i.path)?;
            }
            // What a manifest must grant for the host to load it (writes are the plugin's own business).
            // Every kind it reads, once (reconciled, watched, indexed: `kinds()` deduplicates).
            let reads: Vec<String> = m.kinds().iter().map(ToString::to_string).collect();
            writeln!(
                f,
                "needs:      read on {} (grant writes too; `wasmloop pack --allow KIND=VERBS` derives a manifest)",
                reads.join(", ")
            )?;
        }
        if let Some(e) = &self.metadata_error {
            writeln!(f, "metadata:   unavailable: {e}")?;
        }
        writeln!(f, "exports:")?;
        for e in &self.exports {
            writeln!(f, "  {e}")?;
        }
        writeln!(f, "imports:")?;
        for i in &self.imports {
            writeln!(f, "  {i}")?;
        }
        Ok(())
    }
}
