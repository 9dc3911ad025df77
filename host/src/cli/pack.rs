//! `wasmloop pack`: a plugin as ConfigMaps for `kubectl apply -f -`, with a manifest the host
//! will accept.
//!
//! Without `--manifest`, the manifest is derived from the plugin itself: its name, a `read`
//! grant for every kind its metadata says it reconciles, watches or indexes, and the writes the
//! author lists with `--allow KIND=VERB[,VERB]`. With or without one, the plugin's declared
//! reads are checked against the grants before anything is printed, so the author never ships
//! a ConfigMap the host is sure to refuse.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use wasmloop::controller::ReconcilerSpec;
use wasmloop::hotload::{PluginManifest, pack};

#[derive(clap::Args, Debug)]
pub struct PackArgs {
    /// The plugin component (.wasm).
    plugin: PathBuf,
    /// The admin's manifest (name, grants, limits, queue, resync); validated before packing.
    /// Without it, one is derived: `read` on what the plugin declares, plus `--allow`.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Without --manifest: a write to grant, `KIND=VERB[,VERB]`, e.g.
    /// `--allow v1/Pod=create,delete` or `--allow wasmloop.dev/v1alpha1/PodSet=update-status,event`.
    #[arg(long = "allow", value_name = "KIND=VERBS", conflicts_with = "manifest")]
    allow: Vec<String>,
    /// ConfigMap and plugin name (default: the manifest's name, else the plugin's own).
    #[arg(long)]
    name: Option<String>,
    /// ConfigMap namespace (default: none, i.e. kubectl's current namespace).
    #[arg(long)]
    namespace: Option<String>,
    /// Write to this file instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Also print, before the ConfigMaps, the RBAC the manifest needs: the plugin's
    /// ServiceAccount and its rules, the host's reads of what it reads, and the host's right to
    /// impersonate exactly that account (needs --namespace).
    #[arg(long, requires = "namespace")]
    rbac: bool,
    /// Print only the RBAC (no ConfigMaps), e.g. to commit with the host's manifests.
    #[arg(long, requires = "namespace", conflicts_with_all = ["rbac", "output", "inline"])]
    rbac_only: bool,
    /// With --rbac: the host's ServiceAccount, `namespace/name`.
    #[arg(long, default_value = "wasmloop/wasmloop", value_name = "NAMESPACE/NAME")]
    host_service_account: String,
    /// The older single-ConfigMap form (wasm inline in the plugin ConfigMap's binaryData) instead of
    /// an immutable payload ConfigMap `<name>-wasm-<digest>` referenced from the plugin ConfigMap.
    #[arg(long)]
    inline: bool,
    /// The most compressed bytes one payload ConfigMap holds; a larger component is split over
    /// several (`<name>-wasm-<digest>-<i>-of-<n>`, read back together by the host).
    #[arg(long, default_value_t = pack::DEFAULT_PART_BYTES, value_parser = parse_part_size)]
    part_size: usize,
    /// The component comes from this OCI artifact (`oci://REGISTRY/REPO@sha256:…`, as `wasmloop
    /// push` prints): print only the small plugin ConfigMap, its manifest naming it (`oci.ref`).
    #[arg(long, value_name = "REF", conflicts_with_all = ["inline", "rbac_only"])]
    oci: Option<String>,
    /// With --oci: the `kubernetes.io/dockerconfigjson` Secret (in the plugin's namespace) with
    /// the registry's credentials.
    #[arg(long, requires = "oci")]
    pull_secret: Option<String>,
}

fn parse_part_size(s: &str) -> Result<usize, wasmloop::plugin::limits::Error> {
    wasmloop::plugin::ByteSize::parse(s).map(wasmloop::plugin::ByteSize::as_usize)
}

pub fn run(args: PackArgs) -> anyhow::Result<ExitCode> {
    // No host loads a component over the hard cap, whatever its flags: nor is one packed.
    let wasm = wasmloop::bounded::read_file(&args.plugin, wasmloop::plugin::limits::MAX_COMPONENT_SIZE_CAP.bytes())
        .context("reading the plugin (at most the host's hard cap, 64Mi)")?;
    let spec = declared(&wasm).with_context(|| format!("reading what {} declares", args.plugin.display()))?;
    let (mut manifest, source) = match &args.manifest {
        Some(p) => (super::offline::read_manifest(p)?, p.display().to_string()),
        None => {
            let derived = derive_manifest(&spec, args.name.as_deref(), &args.allow)?;
            eprintln!("wasmloop pack: no --manifest; derived from the plugin's metadata and --allow:\n{derived}");
            (derived, "the derived manifest".to_string())
        }
    };
    // The name: --name, else the manifest's, else the plugin's own. Written into the manifest.
    let parsed = PluginManifest::parse(&manifest, &spec.name).with_context(|| format!("in {source}"))?;
    let name = match &parsed.shadow_of {
        // A candidate version (`shadowOf:`) runs under its plugin's name from a ConfigMap of its
        // own: --name, else `<plugin>-candidate` (never the serving version's ConfigMap).
        Some(target) => {
            let name = args.name.clone().unwrap_or_else(|| format!("{target}-candidate"));
            if name == *target {
                bail!("--name {name}: a candidate's ConfigMap is not named like the plugin it shadows (that is the serving version's)");
            }
            name
        }
        None => {
            let name = args.name.clone().unwrap_or_else(|| parsed.name.clone());
            if args.name.is_some() || !manifest.lines().any(|l| l.starts_with("name:")) {
                manifest = format!("name: {name}\n{}", manifest.lines().filter(|l| !l.starts_with("name:")).collect::<Vec<_>>().join("\n"));
            }
            name
        }
    };
    let parsed = PluginManifest::parse(&manifest, &name).context("after setting the name")?;
    // What the host checks at load: every declared read is granted.
    if let Err(e) = parsed.grants.check_spec(&spec) {
        bail!(
            "the host would refuse this plugin with {source}: {e}\n(grant it in the manifest, or pack without --manifest to derive the reads)"
        );
    }
    if args.rbac_only {
        print!("{}", rbac_yaml(&parsed, &spec, args.namespace.as_deref().unwrap_or_default(), &args.host_service_account)?);
        return Ok(ExitCode::SUCCESS);
    }
    let rbac = if args.rbac {
        rbac_yaml(&parsed, &spec, args.namespace.as_deref().unwrap_or_default(), &args.host_service_account)?
    } else {
        String::new()
    };
    let path = args.plugin.display().to_string();
    if let Some(reference) = &args.oci {
        let yaml = rbac + &oci_config_map(&manifest, &name, args.namespace.clone(), reference, args.pull_secret.as_deref())?;
        match args.output {
            Some(out) => std::fs::write(&out, yaml).with_context(|| format!("writing {}", out.display()))?,
            None => print!("{yaml}"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let input = pack::PackInput { wasm: &wasm, path: &path, manifest, name, namespace: args.namespace };
    let (yaml, raw, compressed, how, warning) = if args.inline {
        let packed = pack::pack(input)?;
        let warning = pack::client_side_apply_warning(&[&packed.config_map]);
        (pack::to_yaml(&packed.config_map)?, packed.raw_bytes, packed.compressed_bytes, "inline".to_string(), warning)
    } else {
        let packed = pack::pack_referenced_parts(input, args.part_size)?;
        let names = packed.payload_names();
        let how = match names.as_slice() {
            [one] => format!("payload ConfigMap {one} ({})", packed.digest),
            many => format!("payload split over {} ConfigMaps {} … {} ({})", many.len(), many[0], many[many.len() - 1], packed.digest),
        };
        let warning = pack::client_side_apply_warning(&packed.config_maps());
        (pack::to_yaml_stream(&packed.config_maps())?, packed.raw_bytes, packed.compressed_bytes, how, warning)
    };
    eprintln!("wasmloop pack: {path} → {raw} bytes raw, {compressed} bytes zstd ({:.0}%), {how}", 100.0 * compressed as f64 / raw as f64);
    if let Some(warning) = warning {
        eprintln!("wasmloop pack: WARNING: {warning}");
    }
    let yaml = rbac + &yaml;
    match args.output {
        Some(out) => std::fs::write(&out, yaml).with_context(|| format!("writing {}", out.display()))?,
        None => print!("{yaml}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The plugin ConfigMap `name` whose `manifest` pulls its component from `reference`.
fn oci_config_map(manifest: &str, name: &str, namespace: Option<String>, reference: &str, secret: Option<&str>) -> anyhow::Result<String> {
    let r = wasmloop::oci::OciRef::parse(reference)?;
    if manifest.lines().any(|l| l.starts_with("oci:")) {
        bail!("--oci: the manifest already has an oci: section");
    }
    let mut manifest = format!("{}\noci:\n  ref: {r}\n", manifest.trim_end());
    if let Some(secret) = secret {
        manifest.push_str(&format!("  pullSecret: {secret}\n"));
    }
    PluginManifest::parse(&manifest, name).context("the manifest with oci:")?;
    let cm = k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace,
            labels: Some(BTreeMap::from([(wasmloop::hotload::source::PLUGIN_LABEL.to_string(), "true".to_string())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(wasmloop::hotload::source::MANIFEST_KEY.to_string(), manifest)])),
        ..Default::default()
    };
    eprintln!("wasmloop pack: plugin ConfigMap {name} pulling {r} (no payload ConfigMap)");
    Ok(pack::to_yaml(&cm)?)
}

/// The RBAC objects `manifest` needs for a plugin declaring `spec`, as a YAML stream.
fn rbac_yaml(manifest: &PluginManifest, spec: &ReconcilerSpec, namespace: &str, host: &str) -> anyhow::Result<String> {
    let Some((host_ns, host_sa)) = host.split_once('/').filter(|(ns, sa)| !ns.is_empty() && !sa.is_empty() && !sa.contains('/')) else {
        bail!("--host-service-account {host:?}: expected <namespace>/<name>");
    };
    let placement = wasmloop::hotload::rbac::Placement { namespace, host: (host_ns, host_sa) };
    let (objects, guessed) = wasmloop::hotload::rbac::objects(manifest, &spec.kinds(), &placement)
        .with_context(|| format!("the manifest of plugin {}", manifest.name))?;
    for guess in &guessed {
        eprintln!("wasmloop pack: resource name guessed for {guess} (check `kubectl api-resources`)");
    }
    let mut out = String::new();
    for object in &objects {
        let doc = serde_saphyr::to_string(object).context("rendering RBAC")?;
        out.push_str("---\n");
        out.push_str(doc.strip_prefix("---\n").unwrap_or(&doc));
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    let account = objects.iter().find(|o| o["kind"] == "ServiceAccount").and_then(|o| o["metadata"]["name"].as_str()).unwrap_or_default();
    eprintln!("wasmloop pack: {} RBAC objects for {} as system:serviceaccount:{namespace}:{account}", objects.len(), manifest.name);
    Ok(out)
}

/// What the plugin declares (`metadata()`), from compiling and asking it.
fn declared(wasm: &[u8]) -> anyhow::Result<ReconcilerSpec> {
    use wasmloop::plugin::{EngineLimits, Limits, limits::DEFAULT_MAX_CORE_INSTANCES_PER_COMPONENT};
    let engine = wasmloop::plugin::PluginEngine::with_limits(EngineLimits::offline(
        Limits::default().memory,
        DEFAULT_MAX_CORE_INSTANCES_PER_COMPONENT,
    ))?;
    let compiled = super::compile_cached(&engine, wasm, Some(super::default_precompiled_dir()))?;
    let inspection = wasmloop::plugin::inspect_compiled(&engine, compiled)?;
    inspection.metadata.with_context(|| inspection.metadata_error.unwrap_or_else(|| "the plugin answered no metadata".into()))
}

/// A manifest granting `read` on every kind `spec` reads, plus the `allow`ed writes
/// (`KIND=VERB[,VERB]`), named `name` (else the plugin's own name).
pub fn derive_manifest(spec: &ReconcilerSpec, name: Option<&str>, allow: &[String]) -> anyhow::Result<String> {
    let mut verbs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let reads = std::iter::once(&spec.reconciles).chain(spec.watches.iter().map(|w| &w.kind)).chain(spec.indexes.iter().map(|i| &i.kind));
    for kind in reads {
        verbs.entry(kind.to_string()).or_insert_with(|| vec!["read".into()]);
    }
    for a in allow {
        let Some((kind, list)) = a.split_once('=').filter(|(k, v)| !k.is_empty() && !v.is_empty()) else {
            bail!("--allow {a:?}: expected KIND=VERB[,VERB], e.g. v1/Pod=create,delete");
        };
        let entry = verbs.entry(kind.trim().to_string()).or_default();
        for verb in list.split(',').map(str::trim).filter(|v| !v.is_empty()) {
            if !entry.iter().any(|v| v == verb) {
                entry.push(verb.to_string());
            }
        }
    }
    let mut yaml = format!("name: {}\ngrants:\n", name.unwrap_or(&spec.name));
    for (kind, verbs) in &verbs {
        let quoted: Vec<String> = verbs.iter().map(|v| format!("{v:?}")).collect();
        yaml.push_str(&format!("  - kinds: [{kind:?}]\n    verbs: [{}]\n", quoted.join(", ")));
    }
    // The verbs and kinds are checked by the manifest's own parser, naming what is wrong.
    PluginManifest::parse(&yaml, &spec.name).context("the derived manifest (check the --allow verbs)")?;
    Ok(yaml)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmloop::controller::{IndexDecl, Mapping, WatchSpec};
    use wasmloop::kinds::KindRef;

    #[test]
    fn oci_packs_only_the_plugin_configmap_naming_the_artifact() {
        let reference = format!("oci://127.0.0.1:5000/plugins/podset@sha256:{}", "ab".repeat(32));
        let yaml = oci_config_map("name: podset\n", "podset", Some("wasmloop".into()), &reference, Some("regcred")).unwrap();
        assert!(!yaml.contains("binaryData") && !yaml.contains("plugin.wasm.ref"), "{yaml}");
        let cm: k8s_openapi::api::core::v1::ConfigMap = serde_saphyr::from_str(&yaml).unwrap();
        let manifest = PluginManifest::parse(&cm.data.unwrap()["plugin.yaml"], "podset").unwrap();
        let oci = manifest.oci.unwrap();
        assert_eq!((oci.reference.to_string(), oci.pull_secret.as_deref()), (reference.clone(), Some("regcred")));
        assert!(oci_config_map("name: podset\n", "podset", None, "oci://no-registry", None).is_err());
        let twice = oci_config_map("name: podset\noci: {ref: x}\n", "podset", None, &reference, None).unwrap_err();
        assert!(twice.to_string().contains("already has an oci: section"), "{twice}");
    }

    fn spec() -> ReconcilerSpec {
        ReconcilerSpec {
            name: "podset".into(),
            version: "0.1.0".into(),
            reconciles: KindRef::new("wasmloop.dev/v1alpha1", "PodSet"),
            selector: None,
            watches: vec![WatchSpec {
                kind: KindRef::new("v1", "Pod"),
                mapping: Mapping::Owner,
                selector: None,
                annotation_selector: None,
            }],
            indexes: vec![IndexDecl { kind: KindRef::new("v1", "Pod"), name: "node".into(), path: "spec.nodeName".into() }],
            fields: vec![],
            annotation_selector: None,
        }
    }

    #[test]
    fn the_derived_manifest_grants_exactly_the_declared_reads_and_the_allowed_writes() {
        let yaml =
            derive_manifest(&spec(), None, &["v1/Pod=create,delete".into(), "wasmloop.dev/v1alpha1/PodSet=update-status".into()]).unwrap();
        let m = PluginManifest::parse(&yaml, "x").unwrap();
        assert_eq!(m.name, "podset");
        m.grants.check_spec(&spec()).unwrap();
        assert!(yaml.contains("kinds: [\"v1/Pod\"]\n    verbs: [\"read\", \"create\", \"delete\"]"), "{yaml}");
        assert!(yaml.contains("[\"read\", \"update-status\"]"), "{yaml}");
        // Nothing beyond what was declared or allowed.
        assert_eq!(yaml.matches("kinds:").count(), 2, "{yaml}");
    }

    #[test]
    fn bad_allow_flags_say_what_is_wrong() {
        let e = derive_manifest(&spec(), None, &["v1/Pod".into()]).unwrap_err();
        assert!(e.to_string().contains("KIND=VERB"), "{e}");
        let e = derive_manifest(&spec(), None, &["v1/Pod=crate".into()]).unwrap_err();
        assert!(format!("{e:#}").contains("crate"), "{e:#}");
    }
}
