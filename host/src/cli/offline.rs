//! `wasmloop reconcile`: run the real plugin component once against a cache loaded from files.
//! No cluster: what a plugin author runs before packing.
//!
//! The actions pass the host's own admission, with what a file can stand in for: the scopes of
//! built-in kinds, and of custom resources from the CustomResourceDefinitions among the objects
//! (the host asks discovery); owners and Event subjects looked up among the objects (the host's
//! cache); the manifest's grants (or all of them); the protection rules that need no running
//! host. The output lists the checks that ran, and warns about what would make the run say
//! little (a key that matches no object, a kind whose scope no file gives).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use wasmloop::admission::{Admission, Protected, Scopes};
use wasmloop::cache::{CacheRead, CacheView, IndexSpec, IndexedStore};
use wasmloop::controller::{Reconciler, Request};
use wasmloop::grants::Grants;
use wasmloop::hotload::PluginManifest;
use wasmloop::kinds::{KindRef, ObjectKey};
use wasmloop::plugin::{ByteSize, Limits, RecordOptions, WasmPlugin};

#[derive(clap::Args, Debug)]
pub struct ReconcileArgs {
    /// The plugin component (.wasm).
    plugin: PathBuf,
    /// YAML or JSON files, or directories of them (multi-document YAML and `kind: List` work).
    #[arg(long, required = true, num_args = 1..)]
    objects: Vec<PathBuf>,
    /// The key to reconcile: `<apiVersion>/<kind>/<namespace>/<name>`, or `<apiVersion>/<kind>/<name>`
    /// for cluster-scoped kinds (e.g. `wasmloop.dev/v1alpha1/PodSet/shop/web`, `v1/Namespace/team-a`).
    #[arg(long)]
    key: String,
    /// Check the actions against this manifest's grants and limits (as the host would).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Record the reconcile (request, cache reads, clocks, random values, outcome) into FILE
    /// (`.json.zst`, at most 1Mi compressed, as `wasmloop run --record-max-bytes` by default), for
    /// `wasmloop replay`.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// The most the `--objects` files may hold together (they are parsed into memory whole).
    #[arg(long, env = "WASMLOOP_MAX_OBJECTS_SIZE", default_value_t = DEFAULT_MAX_OBJECTS_SIZE, value_parser = super::parse_size)]
    max_objects_size: ByteSize,
    #[command(flatten)]
    load: super::LoadArgs,
}

/// Default of `--max-objects-size`: a namespace of 10 000 Pods as `kubectl get -o yaml` writes
/// them is about 40 MiB.
const DEFAULT_MAX_OBJECTS_SIZE: ByteSize = ByteSize::mib(64);

/// The most a manifest file may be: what a ConfigMap holds (1 MiB), so a larger one could never
/// be loaded by a host.
pub(super) const MAX_MANIFEST_SIZE: u64 = 1 << 20;

/// A manifest file, read within [`MAX_MANIFEST_SIZE`].
pub(super) fn read_manifest(path: &Path) -> anyhow::Result<String> {
    wasmloop::bounded::read_text(path, MAX_MANIFEST_SIZE)
        .with_context(|| format!("reading the manifest (a ConfigMap, so at most {})", ByteSize(MAX_MANIFEST_SIZE)))
}

/// A plugin file loaded as `wasmloop reconcile` loads it: the manifest's limits and grants (or
/// the default limits and every grant), the load limits and the precompiled cache of `load`.
pub(super) fn load_plugin(path: &Path, manifest: Option<&Path>, load: &super::LoadArgs) -> anyhow::Result<WasmPlugin> {
    let (limits, grants) = match manifest {
        Some(p) => {
            let text = read_manifest(p)?;
            let m = PluginManifest::parse(&text, "plugin").with_context(|| format!("in {}", p.display()))?;
            // Without `name:`, the host would take the ConfigMap's name; here, the plugin's own.
            let grants = if m.named { m.grants } else { m.grants.named("") };
            (m.limits, grants)
        }
        // Everything granted, under the plugin's own name (`Grants::all()` is named "*", which
        // the load refuses as another plugin's name).
        None => (Limits::default(), Grants::all().named("")),
    };
    let bytes = load.read_plugin(path)?;
    let load_limits = load.load_limits()?;
    let engine = load.engine(limits.memory)?;
    let started = std::time::Instant::now();
    let compiled = load.compile(&engine, &bytes).with_context(|| format!("loading {}", path.display()))?;
    let plugin = WasmPlugin::from_compiled(&engine, compiled, limits, grants).with_context(|| format!("loading {}", path.display()))?;
    load_limits.check_compile_time(started.elapsed()).with_context(|| format!("loading {}", path.display()))?;
    Ok(plugin)
}

pub fn run(args: ReconcileArgs) -> anyhow::Result<ExitCode> {
    super::init_tracing(super::LogFormat::Text);
    let key = parse_key(&args.key)?;
    let mut objects = Vec::new();
    let mut budget = ObjectsBudget { max: args.max_objects_size, used: 0 };
    for path in &args.objects {
        load_path(path, &mut budget, &mut objects)?;
    }
    let scopes = crd_scopes(&objects);
    let plugin = load_plugin(&args.plugin, args.manifest.as_deref(), &args.load)?;
    let spec = plugin.spec().clone();
    let view = build_view(&spec, objects)?;
    if key.kind != spec.reconciles {
        bail!("--key {}: the plugin reconciles {}, not {}", args.key, spec.reconciles, key.kind);
    }
    let mut warnings = Vec::new();
    if view.get(&key.kind, key.namespace.as_deref(), &key.name)?.is_none() {
        warnings.push(no_such_object(&key, &view));
    }
    let request = Request::new(key.clone());
    let view: wasmloop::cache::SharedCache = std::sync::Arc::new(view);
    let mut out = json!({"plugin": spec.name, "version": spec.version, "key": args.key});
    let outcome = match &args.record {
        None => plugin.reconcile(&request, &view),
        Some(path) => {
            let max = RecordOptions::DEFAULT_MAX_BYTES;
            let (outcome, recording) = plugin.reconcile_recorded(&request, &view, max.saturating_mul(16));
            let bytes = recording.encode(max).with_context(|| format!("recording into {}", path.display()))?;
            std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?;
            out["recorded"] = json!({"file": path.display().to_string(), "bytes": bytes.len(), "reads": recording.reads.len()});
            outcome
        }
    };
    // A failure's actions (contract 0.3) are shown and checked like an outcome's: the host
    // executes them too.
    let (actions, requeue_after, code) = match outcome {
        Ok(outcome) => (outcome.actions, outcome.requeue_after, ExitCode::SUCCESS),
        Err(e) => {
            out["error"] = json!(e.to_string());
            out["retry"] = json!(if e.is_transient() { "with backoff" } else { "when the object changes" });
            (e.actions, None, ExitCode::FAILURE)
        }
    };
    // The host's admission, offline: scopes from the built-in table and the CRDs given, owners
    // and Event subjects among the objects, no cluster state.
    warnings.extend(unknown_scopes(&actions, &scopes));
    let admission = Admission::new(Scopes::Given(Arc::new(scopes.clone())), Protected::minimal());
    let ctx =
        wasmloop::admission::Context { grants: plugin.grants(), cache: view.as_ref(), client: None, manager: &spec.name, budget: None };
    out["checks"] = json!(checks(args.manifest.as_deref(), &scopes));
    out["actions"] = serde_json::to_value(&actions)?;
    let refused = futures::executor::block_on(admission.admit(ctx, actions)).err();
    if let Some(d) = requeue_after {
        out["requeueAfter"] = json!(wasmloop::duration::format(d));
    }
    match refused {
        Some(wasmloop::admission::Error::Refused(refusal)) => {
            out["refused"] = json!({"action": refusal.index, "error": refusal.to_string()});
        }
        Some(other) => out["refused"] = json!({"error": other.to_string()}),
        None => {}
    }
    for w in &warnings {
        eprintln!("wasmloop reconcile: WARNING: {w}");
    }
    if !warnings.is_empty() {
        out["warnings"] = json!(warnings);
    }
    print!("{}", serde_saphyr::to_string(&out)?);
    Ok(code)
}

/// The scopes of the custom resources whose CustomResourceDefinitions are among `objects`, by
/// (group, kind): `true` = namespaced. What the host learns from discovery.
fn crd_scopes(objects: &[Value]) -> BTreeMap<(String, String), bool> {
    let text = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
    objects
        .iter()
        .filter(|o| {
            o["kind"] == "CustomResourceDefinition" && text(o, "/apiVersion").is_some_and(|a| a.starts_with("apiextensions.k8s.io/"))
        })
        .filter_map(|crd| {
            let (group, kind, scope) = (text(crd, "/spec/group")?, text(crd, "/spec/names/kind")?, text(crd, "/spec/scope")?);
            Some(((group, kind), scope != "Cluster"))
        })
        .collect()
}

/// The warning for a `--key` that names no object: the keys of its kind there are (or that
/// there are none, and which kinds there are).
fn no_such_object(key: &ObjectKey, view: &CacheView) -> String {
    let keys: Vec<String> = view
        .stores(&key.kind)
        .iter()
        .flat_map(|s| s.snapshot())
        .map(|o| ObjectKey::new(key.kind.clone(), o.namespace(), o.name()).to_string())
        .collect();
    let have = if keys.is_empty() {
        let kinds: BTreeSet<String> =
            view.kinds().filter(|k| view.stores(k).iter().any(|s| !s.is_empty())).map(ToString::to_string).collect();
        let kinds = if kinds.is_empty() { "none".to_string() } else { kinds.into_iter().collect::<Vec<_>>().join(", ") };
        format!("no object of kind {} was given (kinds given that the plugin reads: {kinds})", key.kind)
    } else {
        const SHOWN: usize = 20;
        let more = keys.len().saturating_sub(SHOWN);
        let mut list = keys.into_iter().take(SHOWN).collect::<Vec<_>>().join(", ");
        if more > 0 {
            list.push_str(&format!(" and {more} more"));
        }
        format!("the objects of that kind are: {list}")
    };
    format!(
        "--key {key} matches no object in --objects, so the plugin sees it as deleted; {have} (an object without \
         metadata.namespace is keyed without one)"
    )
}

/// Kinds the actions write or own through whose scope neither the built-in table nor a CRD
/// given says: their namespace is taken as the action states it, where the host would know.
fn unknown_scopes(actions: &[wasmloop::actions::Planned], scopes: &BTreeMap<(String, String), bool>) -> Vec<String> {
    let mut unknown = BTreeSet::new();
    for action in actions {
        let mut kinds = vec![action.target().kind.clone()];
        let written = wasmloop::admission::result::written(action.action());
        if let Some(body) = written.value()
            && let Some(refs) = body.pointer("/metadata/ownerReferences").and_then(Value::as_array)
        {
            let field = |r: &Value, f: &str| r.get(f).and_then(Value::as_str).unwrap_or_default().to_string();
            kinds.extend(refs.iter().map(|r| KindRef::new(field(r, "apiVersion"), field(r, "kind"))));
        }
        for kind in kinds {
            let known = wasmloop::kinds::builtin_namespaced(&kind).is_some()
                || kind.group_version().is_ok_and(|(g, _)| scopes.contains_key(&(g.to_string(), kind.kind.to_string())));
            if !known && !kind.kind.is_empty() {
                unknown.insert(kind.to_string());
            }
        }
    }
    unknown
        .into_iter()
        .map(|k| {
            format!(
                "the scope of {k} is not known offline (not a built-in kind, and no CustomResourceDefinition for it in \
                 --objects): its namespace was taken as the action states it; add its CRD to --objects to check it as the host does"
            )
        })
        .collect()
}

/// What the offline admission checked, in the host's order.
fn checks(manifest: Option<&Path>, scopes: &BTreeMap<(String, String), bool>) -> Vec<String> {
    let crds: Vec<String> = scopes.keys().map(|(g, k)| format!("{k}.{g}")).collect();
    let scope = if crds.is_empty() {
        "scope: built-in kinds (no CustomResourceDefinition in --objects)".to_string()
    } else {
        format!("scope: built-in kinds and the CustomResourceDefinitions given ({})", crds.join(", "))
    };
    let grants = match manifest {
        Some(p) => format!("grants: {}", p.display()),
        None => "grants: none given, so everything is granted (--manifest checks the admin's grants)".to_string(),
    };
    vec![
        "target: apiVersion, kind, name, namespace syntax".to_string(),
        scope,
        grants,
        "protected objects: plugin ConfigMaps and labels (the rules about the host's namespaces, ServiceAccount, Lease and RBAC \
         need a running host)"
            .to_string(),
        "owner references and Event subjects: readable by the plugin and among --objects, with their uids".to_string(),
    ]
}

/// A `--key`, in the syntax logs, errors and Events print ([`ObjectKey`]'s `Display` and
/// `FromStr`): `<apiVersion>/<kind>/<namespace>/<name>`, or `<apiVersion>/<kind>/<name>` for a
/// cluster-scoped kind. Also taken: the space-separated form of older logs (`v1/Pod shop/web`).
fn parse_key(text: &str) -> anyhow::Result<ObjectKey> {
    let joined = match text.trim().split_once(' ') {
        Some((kind, rest)) if !rest.trim().is_empty() && !rest.contains(' ') => format!("{kind}/{}", rest.trim()),
        Some(_) => bail!("--key: {}", wasmloop_model::InvalidKey { key: text.to_owned(), why: "more than one space".into() }),
        None => text.trim().to_string(),
    };
    joined.parse().map_err(|e| anyhow::anyhow!("--key: {e}"))
}

/// What the `--objects` files may hold together, and what they hold so far.
struct ObjectsBudget {
    max: ByteSize,
    used: u64,
}

impl ObjectsBudget {
    /// The text of `path`, refused when it takes the files read so far over the budget.
    fn read(&mut self, path: &Path) -> anyhow::Result<String> {
        let left = self.max.bytes().saturating_sub(self.used);
        match wasmloop::bounded::read_text(path, left) {
            Ok(text) => {
                self.used += text.len() as u64;
                Ok(text)
            }
            Err(wasmloop::bounded::Error::FileTooLarge { .. }) => bail!(
                "{}: the --objects files together are over the {} limit ({} bytes read before this one; raise it with \
                 --max-objects-size / WASMLOOP_MAX_OBJECTS_SIZE)",
                path.display(),
                self.max,
                self.used
            ),
            Err(e) => Err(e.into()),
        }
    }
}

fn load_path(path: &Path, budget: &mut ObjectsBudget, out: &mut Vec<Value>) -> anyhow::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .with_context(|| format!("reading directory {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir() || matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json")))
            .collect();
        entries.sort();
        for p in entries {
            load_path(&p, budget, out)?;
        }
        return Ok(());
    }
    let text = budget.read(path)?;
    let docs: Vec<Value> = if path.extension().and_then(|e| e.to_str()) == Some("json") {
        vec![serde_json::from_str(&text).with_context(|| format!("{}: invalid JSON", path.display()))?]
    } else {
        serde_saphyr::from_multiple(&text).with_context(|| format!("{}: invalid YAML", path.display()))?
    };
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let items = match doc.get("kind").and_then(Value::as_str) {
            Some(k) if k.ends_with("List") => doc.get("items").and_then(Value::as_array).cloned().unwrap_or_default(),
            _ => vec![doc],
        };
        for item in items {
            for field in ["apiVersion", "kind"] {
                if item.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                    bail!("{}: document {}: missing {field}", path.display(), i + 1);
                }
            }
            if item.pointer("/metadata/name").and_then(Value::as_str).is_none_or(str::is_empty) {
                bail!("{}: document {}: missing metadata.name", path.display(), i + 1);
            }
            out.push(fill_defaults(item));
        }
    }
    Ok(())
}

/// Objects in files lack what the API server would add; give them a uid and resourceVersion.
fn fill_defaults(mut v: Value) -> Value {
    let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
    let ns = v.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.entry("uid").or_insert_with(|| json!(format!("uid-{ns}-{name}")));
        meta.entry("resourceVersion").or_insert_with(|| json!("1"));
    }
    v
}

/// A view with a store for every kind the plugin declares (empty if no file has one), its
/// declared indexes, and the objects from the files.
fn build_view(spec: &wasmloop::controller::ReconcilerSpec, objects: Vec<Value>) -> anyhow::Result<CacheView> {
    let from_files = CacheView::from_objects(objects)?;
    let mut view = CacheView::new();
    for kind in spec.kinds() {
        let store = from_files.stores(&kind).first().cloned().unwrap_or_else(|| Arc::new(IndexedStore::new(kind.clone())));
        view.insert(store);
    }
    for idx in &spec.indexes {
        view.declare_index(&idx.kind, &idx.name, IndexSpec::parse(&idx.path)?)?;
    }
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_for_core_and_named_groups() {
        let k = parse_key("wasmloop.dev/v1alpha1/PodSet/shop/web").unwrap();
        // One syntax: what a key prints is what --key takes.
        assert_eq!(k.to_string(), "wasmloop.dev/v1alpha1/PodSet/shop/web");
        for printed in ["v1/Pod/ns/p", "v1/Namespace/team-a", "apps/v1/ReplicaSet/ns/r", "rbac.authorization.k8s.io/v1/ClusterRole/admin"] {
            assert_eq!(parse_key(printed).unwrap().to_string(), printed);
        }
        // The forms the guide and older logs used.
        assert_eq!(parse_key("v1/Namespace//team-a").unwrap().to_string(), "v1/Namespace/team-a");
        assert_eq!(parse_key("v1/Pod shop/web").unwrap().to_string(), "v1/Pod/shop/web");
        assert_eq!(parse_key("v1/Namespace team-a").unwrap().to_string(), "v1/Namespace/team-a");
        let err = parse_key("v1/Pod/a//b").unwrap_err().to_string();
        assert!(err.contains("segment 4 is empty") && err.contains("expected <apiVersion>/<kind>"), "{err}");
        assert_eq!(parse_key("v1/Namespace/team-a").unwrap().namespace, None);
        assert_eq!(parse_key("v1/Pod/ns/p").unwrap().namespace.as_deref(), Some("ns"));
        assert_eq!(parse_key("apps/v1/ReplicaSet/ns/r").unwrap().kind.api_version, "apps/v1");
        assert_eq!(parse_key("rbac.authorization.k8s.io/v1/ClusterRole/admin").unwrap().namespace, None);
        for bad in ["v1/Pod", "a//b/c", "apps/v1/ReplicaSet", "x/y/z/w/v/u"] {
            assert!(parse_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn crds_given_make_a_custom_owner_cluster_scoped_as_discovery_would() {
        use wasmloop::actions::Action;
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                         "metadata": {"name": "fleets.example.com"},
                         "spec": {"group": "example.com", "scope": "Cluster", "names": {"kind": "Fleet"}}});
        let scopes = crd_scopes(std::slice::from_ref(&crd));
        assert_eq!(scopes, BTreeMap::from([(("example.com".to_string(), "Fleet".to_string()), false)]));
        let owner = fill_defaults(json!({"apiVersion": "example.com/v1", "kind": "Fleet", "metadata": {"name": "f1"}}));
        let view = CacheView::from_objects(vec![owner, fill_defaults(crd)]).unwrap();
        // A ConfigMap in team-a owned by the cluster-scoped Fleet f1, as the host admits it.
        let child = wasmloop::actions::Planned::new(Action::Create(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a",
                "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Fleet", "name": "f1", "uid": "uid--f1"}]}}),
        ))
        .unwrap();
        let grants = Grants::all().named("");
        let given = Admission::new(Scopes::Given(Arc::new(scopes.clone())), Protected::minimal());
        let ctx = wasmloop::admission::Context { grants: &grants, cache: &view, client: None, manager: "p", budget: None };
        futures::executor::block_on(given.admit(ctx, vec![child.clone()])).unwrap();
        assert!(unknown_scopes(std::slice::from_ref(&child), &scopes).is_empty());
        // Without the CRD, the owner is looked for in the child's namespace, and the run says why.
        let err = futures::executor::block_on(Admission::offline().admit(ctx, vec![child.clone()])).unwrap_err();
        assert!(err.to_string().contains("owner example.com/v1/Fleet team-a/f1 is not in the plugin's cache"), "{err}");
        let warned = unknown_scopes(std::slice::from_ref(&child), &BTreeMap::new());
        assert!(warned.len() == 1 && warned[0].contains("the scope of example.com/v1/Fleet is not known offline"), "{warned:?}");
        assert!(checks(None, &scopes).iter().any(|c| c.contains("CustomResourceDefinitions given (Fleet.example.com)")));
    }

    #[test]
    fn a_key_that_matches_no_object_names_the_keys_there_are() {
        let pod = |ns: Option<&str>, name: &str| {
            let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}});
            if let Some(ns) = ns {
                p["metadata"]["namespace"] = json!(ns);
            }
            fill_defaults(p)
        };
        let view = CacheView::from_objects(vec![pod(None, "web"), pod(Some("shop"), "api")]).unwrap();
        let warning = no_such_object(&parse_key("v1/Pod/shop/web").unwrap(), &view);
        assert!(warning.contains("--key v1/Pod/shop/web matches no object"), "{warning}");
        assert!(warning.contains("v1/Pod/web") && warning.contains("v1/Pod/shop/api"), "{warning}");
        let none = no_such_object(&parse_key("apps/v1/Deployment/shop/web").unwrap(), &view);
        assert!(none.contains("no object of kind apps/v1/Deployment was given") && none.contains("v1/Pod"), "{none}");
    }

    #[test]
    fn bad_object_files_name_the_file_and_document() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("objs.yaml");
        std::fs::write(&p, "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: v1\nmetadata: {name: b}\n").unwrap();
        let mut budget = ObjectsBudget { max: ByteSize::mib(1), used: 0 };
        let err = load_path(&p, &mut budget, &mut Vec::new()).unwrap_err().to_string();
        assert!(err.contains("objs.yaml") && err.contains("document 2") && err.contains("missing kind"), "{err}");
    }

    #[test]
    fn the_objects_files_are_read_within_their_budget_together() {
        let dir = tempfile::tempdir().unwrap();
        let pod = |name: &str| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop}}\n");
        for name in ["a", "b", "c"] {
            std::fs::write(dir.path().join(format!("{name}.yaml")), pod(name)).unwrap();
        }
        let each = pod("a").len() as u64;
        let mut objects = Vec::new();
        let mut budget = ObjectsBudget { max: ByteSize(3 * each), used: 0 };
        load_path(dir.path(), &mut budget, &mut objects).unwrap();
        assert_eq!((objects.len(), budget.used), (3, 3 * each));
        let mut budget = ObjectsBudget { max: ByteSize(3 * each - 1), used: 0 };
        let err = load_path(dir.path(), &mut budget, &mut Vec::new()).unwrap_err().to_string();
        assert!(err.contains("c.yaml: the --objects files together are over the") && err.contains("--max-objects-size"), "{err}");
        assert!(err.contains(&format!("({} bytes read before this one", 2 * each)), "{err}");
    }
}
