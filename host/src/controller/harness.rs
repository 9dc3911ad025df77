//! A controller with no cluster, for unit tests of the worker and of applying outcomes: its
//! writes go to a recording [`FakeExecute`], its admission uses the built-in kind table, and its
//! informer registry has a client that answers nothing (kube-runtime tests its applier alike).

use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use serde_json::Value;

use super::wiring::Caching;
use super::{ControllerConfig, ControllerMetrics, Current, Inner, Reconciler, Shared};
use crate::admission::{Admission, AdmittedAction, Protected, Scopes};
use crate::cache::{CacheView, IndexedStore};
use crate::executor::{self, Execute, Executed, HostEvent};
use crate::fence::Fence;
use crate::grants::Grants;
use crate::informer::InformerRegistry;
use crate::kinds::{KindResolver, ObjectKey};

/// How the fake answers one action.
pub(super) type Answer = dyn Fn(&AdmittedAction) -> executor::Result<Executed> + Send + Sync;

/// Records what a controller sends and answers it with a closure.
pub(super) struct FakeExecute {
    answer: Box<Answer>,
    /// `verb target` of every action sent, in order.
    pub(super) sent: Mutex<Vec<String>>,
    /// `reason: message` of every Event the host recorded itself.
    pub(super) reports: Mutex<Vec<String>>,
}

impl FakeExecute {
    /// A fake answering every action with `answer`.
    pub(super) fn new(answer: impl Fn(&AdmittedAction) -> executor::Result<Executed> + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self { answer: Box::new(answer), sent: Mutex::default(), reports: Mutex::default() })
    }

    /// A fake for which every action succeeds, returning the created object as the server would.
    pub(super) fn succeeding() -> Arc<Self> {
        Self::new(|a| {
            Ok(match a.action() {
                crate::actions::Action::Create(object) => Executed::Object(object.clone()),
                _ => Executed::Done,
            })
        })
    }

    /// `verb target` of every action sent so far.
    pub(super) fn sent(&self) -> Vec<String> {
        self.sent.lock().clone()
    }
}

impl Execute for FakeExecute {
    fn execute<'a>(
        &'a self,
        _manager: &'a str,
        admitted: &'a AdmittedAction,
        fence: &'a Fence,
    ) -> BoxFuture<'a, executor::Result<Executed>> {
        Box::pin(async move {
            fence.check().map_err(|source| executor::Error::Fenced {
                verb: admitted.verb(),
                object: admitted.target().to_string(),
                source,
            })?;
            self.sent.lock().push(format!("{} {}", admitted.verb(), admitted.target()));
            // Concurrent writes of a batch interleave here, as they would on the wire.
            tokio::task::yield_now().await;
            (self.answer)(admitted)
        })
    }

    fn record_event<'a>(
        &'a self,
        _manager: &'a str,
        _regarding: &'a ObjectKey,
        event: HostEvent<'a>,
    ) -> BoxFuture<'a, executor::Result<Executed>> {
        self.reports.lock().push(format!("{}: {}", event.reason, event.message));
        Box::pin(async { Ok(Executed::Done) })
    }

    fn dry_run_client(&self) -> Option<&kube::Client> {
        None
    }
}

/// A controller named `name` under `config`, wired to nothing, sending with `fake`; and the
/// [`Current`] its reconciles use (`reconciler` under `grants`, an empty cache), with the
/// metrics registry.
pub(super) fn controller(
    reconciler: Arc<dyn Reconciler>,
    grants_yaml: &str,
    config: ControllerConfig,
    fake: Arc<FakeExecute>,
) -> (Arc<Inner>, Current, Registry) {
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::new(&mut registry);
    let informers = InformerRegistry::new(KindResolver::new(crate::fake_api::unreachable()));
    let shared = Shared::new(informers, metrics).with_admission(Admission::new(Scopes::Builtin, Protected::minimal()));
    let name = reconciler.spec().name.clone();
    let grants = Arc::new(Grants::from_yaml(&name, grants_yaml).expect("test grants"));
    // The reconciled kind's store, empty: what its informer would hold before any event.
    let mut view = CacheView::new();
    let primary = Arc::new(IndexedStore::new(reconciler.spec().reconciles.clone()));
    view.insert(primary.clone());
    let current = Current {
        caching: Arc::new(Caching::of(reconciler.spec())),
        reconciler,
        grants,
        executor: fake.clone(),
        view: Arc::new(view),
        primary: vec![primary],
        _subscriptions: Arc::default(),
    };
    let inner = Arc::new(Inner::new(name, config, shared, fake, None));
    *inner.current.write() = Some(current.clone());
    (inner, current, registry)
}

/// The registry's metrics in the text format.
pub(super) fn metrics_text(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("metrics encode");
    out
}

/// A ConfigMap named `name` in `ns`.
pub(super) fn config_map(ns: &str, name: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}})
}

/// What a [`Scripted`] reconciler answers a request with.
type Script = dyn Fn(&super::Request) -> Result<super::Outcome, super::ReconcileError> + Send + Sync;

/// A native reconciler of ConfigMaps whose every reconcile returns what `outcome` makes, counting
/// its calls.
pub(super) struct Scripted {
    spec: super::ReconcilerSpec,
    outcome: Box<Script>,
    /// How many reconciles ran.
    pub(super) calls: std::sync::atomic::AtomicUsize,
}

impl Scripted {
    /// A reconciler named `name` answering every request with `outcome`.
    pub(super) fn new(
        name: &str,
        outcome: impl Fn(&super::Request) -> Result<super::Outcome, super::ReconcileError> + Send + Sync + 'static,
    ) -> Arc<Self> {
        let spec = super::ReconcilerSpec {
            name: name.into(),
            version: "1".into(),
            reconciles: crate::kinds::KindRef::new("v1", "ConfigMap"),
            selector: None,
            annotation_selector: None,
            watches: Vec::new(),
            indexes: Vec::new(),
            fields: Vec::new(),
        };
        Arc::new(Self { spec, outcome: Box::new(outcome), calls: Default::default() })
    }

    /// How many reconciles ran.
    pub(super) fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Reconciler for Scripted {
    fn spec(&self) -> &super::ReconcilerSpec {
        &self.spec
    }

    fn reconcile(&self, request: &super::Request, _cache: &crate::cache::SharedCache) -> Result<super::Outcome, super::ReconcileError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (self.outcome)(request)
    }
}

/// The outcome of `actions`, checked as a plugin's would be.
pub(super) fn outcome(actions: Vec<crate::actions::Action>, requeue_after: Option<std::time::Duration>) -> super::Outcome {
    let planned = actions.into_iter().map(|a| crate::actions::Planned::new(a).expect("a valid action")).collect();
    super::Outcome { actions: planned, requeue_after }
}

/// Grants of the test controllers: ConfigMaps in `ns` read, written and evented about.
pub(super) const GRANTS: &str =
    "grants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, create, delete, patch, event]\n    namespaces: [ns]\n";
