//! `webapp`: the shape of operator written most. A `WebApp` (`examples.wasmloop.dev/v1alpha1`,
//! CRD in `deploy/crds/webapp.yaml`) names an image, a replica count, a port and a ConfigMap;
//! the plugin keeps, for each one,
//!
//! - a **Deployment** and a **Service** named like the WebApp and owned by it ([`children`]:
//!   applied when they differ from what is desired, pruned when no longer desired, a same-named
//!   object it does not own left alone and reported);
//! - the **ConfigMap it names** (`spec.configMapName`, not owned) as the Pods' environment, with
//!   a hash of its data in the Pod template's annotation [`CONFIG_HASH_ANNOTATION`]: editing the
//!   ConfigMap changes the template, and the Deployment rolls. A ConfigMap event reaches the
//!   WebApps that name it through an index mapping ([`Metadata::named_by`]);
//! - its **status**: the Deployment's replica counts, `observedGeneration`, and the conditions
//!   `Available`, `Progressing` and `ConfigMissing` ([`conditions`], Go's `meta.SetStatusCondition`
//!   semantics), written only when they change.
//!
//! While the named ConfigMap is missing the Deployment is not created or changed (its Pods could
//! not start): `ConfigMissing` is `True` and `Progressing` is `False`. An invalid spec is a
//! permanent error carrying a Warning Event and the `Progressing=False` (`InvalidSpec`)
//! condition, which the host executes before it records the error ([`Error::with_actions`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;
use wasmloop_sdk::children::Children;
use wasmloop_sdk::conditions::{self, Condition};
use wasmloop_sdk::meta;
use wasmloop_sdk::typed::{
    Container, ContainerPort, Deployment, DeploymentSpec, DeploymentStatus, LabelSelector, PodSpec, PodTemplateSpec, Resource, Service,
    ServicePort, ServiceSpec,
};
use wasmloop_sdk::{CustomResource, Error, EventType, IndexValue, Metadata, Outcome, Reconciler, Request, ResultExt, cache, kinds};

/// The Pod template annotation holding a hash of the named ConfigMap's data: a new value rolls
/// the Deployment.
pub const CONFIG_HASH_ANNOTATION: &str = "examples.wasmloop.dev/config-hash";
/// The index on WebApps over `spec.configMapName` (the ConfigMap mapping looks names up in it).
pub const CONFIG_MAP_INDEX: &str = "configmap";
/// The label naming the WebApp on its Deployment, Pods and Service (the selector).
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Condition types.
pub const AVAILABLE: &str = "Available";
/// See [`AVAILABLE`].
pub const PROGRESSING: &str = "Progressing";
/// See [`AVAILABLE`].
pub const CONFIG_MISSING: &str = "ConfigMissing";

/// `WebApp.spec`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[resource(group = "examples.wasmloop.dev", version = "v1alpha1", kind = "WebApp", namespaced, status = "WebAppStatus")]
#[serde(rename_all = "camelCase")]
pub struct WebAppSpec {
    /// The container image.
    pub image: String,
    /// Pods to run (default 1).
    #[serde(default = "one")]
    pub replicas: i32,
    /// The port the container listens on, and the Service's port.
    pub port: i32,
    /// A ConfigMap in the WebApp's namespace given to the container as its environment. The
    /// WebApp only names it: it is not created, changed or owned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
}

fn one() -> i32 {
    1
}

/// `WebApp.status`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct WebAppStatus {
    /// The `metadata.generation` this status is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Deployment's Pods.
    pub replicas: i32,
    /// Of those, ready.
    pub ready_replicas: i32,
    /// Of those, available (ready for `minReadySeconds`).
    pub available_replicas: i32,
    /// `Available`, `Progressing`, `ConfigMissing`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The reconciler.
pub struct WebAppReconciler;

impl Reconciler for WebAppReconciler {
    fn metadata() -> Metadata {
        Metadata::new("webapp", env!("CARGO_PKG_VERSION"))
            .reconciles(WebApp::KIND_REF)
            .owns(kinds::DEPLOYMENT)
            .owns(kinds::SERVICE)
            // A ConfigMap event reaches every WebApp (in its namespace) whose spec.configMapName
            // is its name.
            .named_by(kinds::CONFIG_MAP, CONFIG_MAP_INDEX, "spec.configMapName", IndexValue::Name)
            // Field 0 of Deployment metadata reads: its status (the rest of it is not read).
            .field(kinds::DEPLOYMENT, "status")
            // Fields 0 and 1 of ConfigMap metadata reads: what the Pods read of it.
            .field(kinds::CONFIG_MAP, "data")
            .field(kinds::CONFIG_MAP, "binaryData")
    }

    fn reconcile(req: Request) -> Result<Outcome, Error> {
        let Some(app) = cache::get_key::<WebApp>(&req.key).context("reading the WebApp")? else {
            return Ok(Outcome::new()); // deleted: garbage collection removes its children
        };
        if app.metadata.is_deleting() {
            return Ok(Outcome::new());
        }
        let generation = app.metadata.generation.unwrap_or_default();
        let mut status = app.status.clone().unwrap_or_default();
        if let Err(problem) = validate(&app.spec) {
            return Err(invalid(&app, status, generation, problem));
        }
        let ns = app.metadata.namespace.as_deref();

        // The ConfigMap it names, if any: None = not named, Some(None) = named and missing.
        let config = match &app.spec.config_map_name {
            Some(name) => Some(meta::get(&kinds::CONFIG_MAP, ns, name).context("reading the ConfigMap")?),
            None => None,
        };
        let missing = matches!(config, Some(None));
        let mut children = Children::of(&app).kind(kinds::SERVICE, [service(&app)]);
        if !missing {
            let hash = config.flatten().map(|cm| {
                let (data, binary): (Option<Data>, Option<Data>) = (cm.field(0), cm.field(1));
                config_hash(&data.unwrap_or_default(), &binary.unwrap_or_default())
            });
            children = children.kind(kinds::DEPLOYMENT, [deployment(&app, hash)]);
        }
        let plan = children.plan()?;

        // The Deployment's metadata and status only: a metadata read, no Pod template parsed.
        let current = meta::get(&kinds::DEPLOYMENT, ns, &app.metadata.name).context("reading the Deployment")?;
        let ours = current.filter(|d| d.metadata.is_controlled_by(&app.metadata.uid)).map(|d| {
            let status: DeploymentStatus = d.field(0).unwrap_or_default();
            (d.metadata.generation, status)
        });
        let before = status.clone();
        observe(&mut status, &app, ours.as_ref(), missing, generation);
        let mut out = plan.with_warnings();
        if status != before {
            out = out.status_key(app.key(), &status);
        }
        Ok(out)
    }
}

wasmloop_sdk::export_reconciler!(WebAppReconciler);

/// Why the spec cannot be reconciled, if it cannot.
pub fn validate(spec: &WebAppSpec) -> Result<(), String> {
    if spec.image.trim().is_empty() || spec.image.contains(char::is_whitespace) {
        return Err(format!("spec.image {:?} is not an image reference", spec.image));
    }
    if spec.replicas < 0 {
        return Err(format!("spec.replicas is negative: {}", spec.replicas));
    }
    if !(1..=65535).contains(&spec.port) {
        return Err(format!("spec.port {} is not a port (1-65535)", spec.port));
    }
    if let Some(name) = &spec.config_map_name {
        let ok = !name.is_empty()
            && name.len() <= 253
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(format!("spec.configMapName {name:?} is not a ConfigMap name"));
        }
    }
    Ok(())
}

/// The permanent error for an invalid spec, carrying what the user should see: a Warning Event
/// and `Progressing=False` (`InvalidSpec`). Both only when the condition changes, so the status
/// write this causes (an event on the WebApp: one more reconcile) ends in an error without
/// actions, not a loop.
fn invalid(app: &WebApp, mut status: WebAppStatus, generation: i64, problem: String) -> Error {
    let condition = Condition::new(PROGRESSING, false, "InvalidSpec", problem.clone()).observed_generation(generation);
    let mut actions = Outcome::new();
    if conditions::set(&mut status.conditions, condition) {
        status.observed_generation = Some(generation);
        actions = actions.event_key(app.key(), EventType::Warning, "InvalidSpec", problem.clone()).status_key(app.key(), &status);
    }
    Error::permanent(problem).with_actions(actions)
}

/// Update `status` from the Deployment the WebApp controls (its generation and status, if it
/// has one) and the ConfigMap's presence.
fn observe(status: &mut WebAppStatus, app: &WebApp, deployment: Option<&(Option<i64>, DeploymentStatus)>, missing: bool, generation: i64) {
    let ds = deployment.map(|(_, s)| s.clone()).unwrap_or_default();
    status.observed_generation = Some(generation);
    status.replicas = ds.replicas.unwrap_or(0);
    status.ready_replicas = ds.ready_replicas.unwrap_or(0);
    status.available_replicas = ds.available_replicas.unwrap_or(0);
    let want = app.spec.replicas;
    let c = &mut status.conditions;
    let cond =
        |type_: &str, ok: bool, reason: &str, message: String| Condition::new(type_, ok, reason, message).observed_generation(generation);
    let available = deployment.is_some() && status.available_replicas >= want;
    let counts = format!("{}/{want} replicas available", status.available_replicas);
    conditions::set(
        c,
        if available {
            cond(AVAILABLE, true, "MinimumReplicasAvailable", counts)
        } else {
            cond(AVAILABLE, false, "ReplicasUnavailable", counts)
        },
    );
    if missing {
        let config = app.spec.config_map_name.as_deref().unwrap_or_default();
        conditions::set(c, cond(CONFIG_MISSING, true, "NotFound", format!("ConfigMap {config:?} not found")));
        conditions::set(c, cond(PROGRESSING, false, "ConfigMissing", format!("waiting for ConfigMap {config:?}")));
        return;
    }
    // Never an empty message: a v1.20 API server refuses a status merge patch carrying a
    // condition with `message: ""` ("must be of type string: null").
    let found = match &app.spec.config_map_name {
        Some(name) => cond(CONFIG_MISSING, false, "Found", format!("ConfigMap {name:?} found")),
        None => cond(CONFIG_MISSING, false, "NotNamed", "no ConfigMap is named".into()),
    };
    conditions::set(c, found);
    let progressing = match deployment {
        None => cond(PROGRESSING, true, "Creating", "creating the Deployment".into()),
        Some((g, s)) if rolled_out(*g, s, want) => cond(PROGRESSING, false, "RolledOut", "the Deployment is rolled out".into()),
        Some((_, s)) => {
            let updated = s.updated_replicas.unwrap_or(0);
            cond(PROGRESSING, true, "RollingOut", format!("{updated}/{want} replicas updated"))
        }
    };
    conditions::set(c, progressing);
}

/// Whether a Deployment of `generation` with this status is rolled out to `desired` replicas
/// ([`Deployment::is_rolled_out`] on a metadata read).
fn rolled_out(generation: Option<i64>, s: &DeploymentStatus, desired: i32) -> bool {
    let updated = s.updated_replicas.unwrap_or(0);
    s.observed_generation >= generation
        && updated >= desired
        && s.replicas.unwrap_or(0) <= updated
        && s.available_replicas.unwrap_or(0) >= updated
}

/// The labels selecting the WebApp's Pods.
fn selector_labels(app: &WebApp) -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/name".to_owned(), "webapp".to_owned()), (INSTANCE_LABEL.to_owned(), app.metadata.name.clone())])
}

/// The desired Deployment: `spec.replicas` Pods of one container, the ConfigMap (if named) as
/// its environment and its data's hash (if it exists) in the template's annotations.
fn deployment(app: &WebApp, config_hash: Option<String>) -> Deployment {
    let labels = selector_labels(app);
    let mut container = Container::new("app", app.spec.image.clone());
    // The protocol is the API server's default, given anyway: server-side apply before
    // Kubernetes 1.21 refuses a port list entry without it (it is part of the list's key).
    let tcp = Some("TCP".to_owned());
    container.ports.push(ContainerPort { container_port: app.spec.port, name: Some("http".into()), protocol: tcp, ..Default::default() });
    if let Some(cm) = &app.spec.config_map_name {
        container.extra.insert("envFrom".into(), json!([{"configMapRef": {"name": cm}}]));
    }
    let mut template = PodTemplateSpec::default();
    template.metadata.labels = labels.clone();
    if let Some(hash) = config_hash {
        template.metadata.annotations.insert(CONFIG_HASH_ANNOTATION.into(), hash);
    }
    template.spec = Some(PodSpec { containers: vec![container], ..Default::default() });
    let mut d = Deployment::new(app.metadata.name.clone());
    d.metadata.labels = labels.clone();
    d.spec = Some(DeploymentSpec {
        replicas: Some(app.spec.replicas),
        selector: Some(LabelSelector::from_labels(labels)),
        template,
        ..Default::default()
    });
    d
}

/// The desired Service: the WebApp's port, to the container's.
fn service(app: &WebApp) -> Service {
    let labels = selector_labels(app);
    let mut s = Service::new(app.metadata.name.clone());
    s.metadata.labels = labels.clone();
    let mut port = ServicePort::new(app.spec.port, app.spec.port);
    port.name = Some("http".into());
    port.protocol = Some("TCP".into()); // as for the container port
    s.spec = Some(ServiceSpec { selector: labels, ports: vec![port], ..Default::default() });
    s
}

/// A ConfigMap's `data` or `binaryData` (base64 values, hashed as text).
pub type Data = BTreeMap<String, String>;

/// A hash of a ConfigMap's data and binary data (64-bit FNV-1a, hex): changes exactly when
/// what the Pods would read changes (not on label or annotation edits).
pub fn config_hash(data: &Data, binary_data: &Data) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (map, tag) in [(data, b'd'), (binary_data, b'b')] {
        for (k, v) in map {
            for part in [&[tag][..], k.as_bytes(), &[0], v.as_bytes(), &[0]] {
                for b in part {
                    h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests;
