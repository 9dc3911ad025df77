//! A simulated scheduler + kubelet for the test control plane, which runs neither: Pods are
//! bound to a node, reported Running, and Ready after a delay (or when the test says so), and
//! Pods being deleted are removed, as a kubelet confirms termination. Pods labelled or
//! annotated [`NEVER_READY`]`: "true"` run but never become ready (a rollout that cannot make
//! progress).
//!
//! The decisions are a pure state machine ([`Node`]: Pod events in, [`Command`]s out, property
//! tested below); [`Kubelet`] feeds it a watch of the Pods and carries the commands out through
//! the API server (`binding` and `status` subresources, deletes with a zero grace period).
//!
//! ```text
//! let kubelet = Kubelet::start(client.clone(), Some(&ns), KubeletConfig::ready_after(Duration::from_millis(300))).await?;
//! // ... Pods come and go, become ready ...
//! kubelet.shutdown().await?; // the first error it met, if any
//! ```

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// Label or annotation (value `"true"`) of a Pod that runs but never becomes ready.
pub const NEVER_READY: &str = "test.wasmloop.dev/never-ready";

/// When Pods become ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// This long after the kubelet started them.
    After(Duration),
    /// When the test calls [`Kubelet::ready_next`], one Pod at a time, in the order they started.
    Manual,
}

/// How the simulated kubelet behaves.
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    /// The node Pods are bound to.
    pub node: String,
    /// When started Pods become ready.
    pub readiness: Readiness,
    /// How long a deleted Pod takes to terminate (then it is removed).
    pub terminate_after: Duration,
    /// Only Pods matching this label selector.
    pub selector: Option<String>,
    /// API calls in flight at most.
    pub concurrency: usize,
}

impl KubeletConfig {
    /// Pods ready `delay` after they start, terminated at once.
    pub fn ready_after(delay: Duration) -> Self {
        Self { readiness: Readiness::After(delay), ..Self::manual() }
    }

    /// Pods ready only through [`Kubelet::ready_next`], terminated at once.
    pub fn manual() -> Self {
        Self { node: "node-1".into(), readiness: Readiness::Manual, terminate_after: Duration::ZERO, selector: None, concurrency: 32 }
    }
}

/// What the kubelet does to a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Bind it to the node (the scheduler's part).
    Bind(String),
    /// Report it Running, not ready.
    Start(String),
    /// Report it Ready after this long.
    Ready(String, Duration),
    /// Remove it (it was deleted) after this long.
    Remove(String, Duration),
}

/// A Pod as the kubelet sees it in a watch event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Its name.
    pub name: String,
    /// Whether it is bound to a node.
    pub bound: bool,
    /// Whether it is being deleted.
    pub deleting: bool,
    /// Whether it must never become ready.
    pub never_ready: bool,
}

impl Seen {
    fn of(p: &Pod) -> Self {
        let marked = |m: Option<&BTreeMap<String, String>>| m.and_then(|m| m.get(NEVER_READY)).is_some_and(|v| v == "true");
        Self {
            name: p.metadata.name.clone().unwrap_or_default(),
            bound: p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| !n.is_empty()),
            deleting: p.metadata.deletion_timestamp.is_some(),
            never_ready: marked(p.metadata.labels.as_ref()) || marked(p.metadata.annotations.as_ref()),
        }
    }
}

/// The node's state: which Pods it bound, started, made ready and removed. Each Pod goes
/// through each step at most once.
#[derive(Debug)]
pub struct Node {
    readiness: Readiness,
    terminate_after: Duration,
    bound: HashSet<String>,
    started: HashSet<String>,
    removing: HashSet<String>,
    /// Started Pods waiting for [`Readiness::Manual`] readiness, oldest first.
    pending: Vec<String>,
}

impl Node {
    /// A node with no Pods.
    pub fn new(config: &KubeletConfig) -> Self {
        Self {
            readiness: config.readiness,
            terminate_after: config.terminate_after,
            bound: HashSet::new(),
            started: HashSet::new(),
            removing: HashSet::new(),
            pending: Vec::new(),
        }
    }

    /// A Pod was added or changed: what to do about it.
    pub fn observe(&mut self, pod: &Seen) -> Vec<Command> {
        let name = &pod.name;
        if pod.deleting {
            self.pending.retain(|p| p != name);
            // Unbound Pods are deleted by the API server itself.
            if pod.bound && self.removing.insert(name.clone()) {
                return vec![Command::Remove(name.clone(), self.terminate_after)];
            }
            return vec![];
        }
        if !pod.bound {
            return if self.bound.insert(name.clone()) { vec![Command::Bind(name.clone())] } else { vec![] };
        }
        self.bound.insert(name.clone());
        if !self.started.insert(name.clone()) {
            return vec![];
        }
        let mut out = vec![Command::Start(name.clone())];
        match self.readiness {
            _ if pod.never_ready => {}
            Readiness::After(delay) => out.push(Command::Ready(name.clone(), delay)),
            Readiness::Manual => self.pending.push(name.clone()),
        }
        out
    }

    /// A Pod is gone.
    pub fn forget(&mut self, name: &str) {
        self.bound.remove(name);
        self.started.remove(name);
        self.removing.remove(name);
        self.pending.retain(|p| p != name);
    }

    /// [`Readiness::Manual`]: the oldest started Pod not yet ready, made ready now.
    pub fn ready_next(&mut self) -> Option<Command> {
        (!self.pending.is_empty()).then(|| Command::Ready(self.pending.remove(0), Duration::ZERO))
    }

    /// Started Pods waiting to be made ready by [`Node::ready_next`].
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// The simulated kubelet, running until [`Kubelet::shutdown`] (or dropped).
pub struct Kubelet {
    inner: Arc<Inner>,
    watch: JoinHandle<()>,
}

struct Inner {
    pods: Api<Pod>,
    node_name: String,
    node: Mutex<Node>,
    calls: Semaphore,
    errors: Mutex<Vec<String>>,
}

impl Kubelet {
    /// Start watching the Pods of `namespace` (all namespaces if `None`); returns once the
    /// watch has listed them.
    pub async fn start(client: Client, namespace: Option<&str>, config: KubeletConfig) -> Result<Self> {
        let pods: Api<Pod> = match namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        };
        let inner = Arc::new(Inner {
            pods: pods.clone(),
            node_name: config.node.clone(),
            node: Mutex::new(Node::new(&config)),
            calls: Semaphore::new(config.concurrency.max(1)),
            errors: Mutex::new(Vec::new()),
        });
        let mut wc = watcher::Config::default();
        if let Some(s) = &config.selector {
            wc = wc.labels(s);
        }
        let mut stream = watcher::watcher(pods.clone(), wc).boxed();
        // Everything there already, then the watch.
        let listed = pods.list(&config.selector.as_ref().map_or_else(ListParams::default, |s| ListParams::default().labels(s))).await?;
        for p in &listed.items {
            inner.handle(&Seen::of(p));
        }
        let me = inner.clone();
        let watch = tokio::spawn(async move {
            loop {
                match stream.try_next().await {
                    Ok(Some(Event::Apply(p) | Event::InitApply(p))) => me.handle(&Seen::of(&p)),
                    Ok(Some(Event::Delete(p))) => me.node.lock().forget(p.metadata.name.as_deref().unwrap_or_default()),
                    Ok(Some(Event::Init | Event::InitDone)) => {}
                    Ok(None) => break,
                    // The watcher re-lists by itself after errors.
                    Err(e) => tracing::debug!(error = %e, "kubelet watch"),
                }
            }
        });
        Ok(Self { inner, watch })
    }

    /// [`Readiness::Manual`]: make the oldest started, not yet ready Pod ready; its name, or
    /// `None` if no Pod is waiting.
    pub async fn ready_next(&self) -> Result<Option<String>> {
        let command = self.inner.node.lock().ready_next();
        match command {
            Some(Command::Ready(name, _)) => {
                self.inner.ready(&name).await?;
                Ok(Some(name))
            }
            _ => Ok(None),
        }
    }

    /// Started Pods waiting for [`Kubelet::ready_next`].
    pub fn pending(&self) -> usize {
        self.inner.node.lock().pending()
    }

    /// Stop, and fail with the errors it met (a Pod gone meanwhile is not an error).
    pub async fn shutdown(self) -> Result<()> {
        self.watch.abort();
        let errors = self.inner.errors.lock().clone();
        anyhow::ensure!(errors.is_empty(), "the simulated kubelet failed {} call(s); first: {}", errors.len(), errors[0]);
        Ok(())
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl Inner {
    /// Carry out what the node decided about `pod`, in order (a Pod is reported Running before
    /// it is reported Ready, whatever the delay), off the watch loop.
    fn handle(self: &Arc<Self>, pod: &Seen) {
        let commands = self.node.lock().observe(pod);
        if commands.is_empty() {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            for c in commands {
                let what = format!("{c:?}");
                let result = match c {
                    Command::Bind(name) => me.bind(&name).await,
                    Command::Start(name) => me.start(&name).await,
                    Command::Ready(name, after) => {
                        tokio::time::sleep(after).await;
                        me.ready(&name).await
                    }
                    Command::Remove(name, after) => {
                        tokio::time::sleep(after).await;
                        me.remove(&name).await
                    }
                };
                if let Err(e) = result {
                    me.errors.lock().push(format!("{what}: {e:#}"));
                }
            }
        });
    }

    /// Run one API call within the concurrency limit; a Pod gone meanwhile is not an error.
    async fn call<T>(&self, f: impl std::future::Future<Output = kube::Result<T>>) -> Result<()> {
        let _permit = self.calls.acquire().await?;
        match f.await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || (s.code == 409 && s.reason == "Conflict") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn bind(&self, name: &str) -> Result<()> {
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                             "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}});
        self.call(self.pods.create_subresource::<_, serde_json::Value>("binding", name, &PostParams::default(), &binding))
            .await
            .with_context(|| format!("binding {name}"))
    }

    async fn status(&self, name: &str, ready: bool) -> Result<()> {
        let now = Timestamp::now().to_string();
        let (status, reason) = if ready { ("True", None) } else { ("False", Some("ContainersNotReady")) };
        let conditions: Vec<_> = ["Ready", "ContainersReady"]
            .iter()
            .map(|t| json!({"type": t, "status": status, "lastTransitionTime": now, "reason": reason}))
            .collect();
        let patch = json!({"status": {"phase": "Running", "conditions": conditions}});
        self.call(self.pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch)))
            .await
            .with_context(|| format!("reporting {name} {}", if ready { "ready" } else { "running" }))
    }

    async fn start(&self, name: &str) -> Result<()> {
        self.status(name, false).await
    }

    async fn ready(&self, name: &str) -> Result<()> {
        self.status(name, true).await
    }

    async fn remove(&self, name: &str) -> Result<()> {
        self.call(self.pods.delete(name, &DeleteParams::default().grace_period(0))).await.with_context(|| format!("removing {name}"))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn seen(name: &str, bound: bool, deleting: bool, never_ready: bool) -> Seen {
        Seen { name: name.into(), bound, deleting, never_ready }
    }

    #[test]
    fn a_pod_is_bound_started_made_ready_and_removed_once_each() {
        let mut node = Node::new(&KubeletConfig::ready_after(Duration::from_secs(2)));
        assert_eq!(node.observe(&seen("a", false, false, false)), vec![Command::Bind("a".into())]);
        assert!(node.observe(&seen("a", false, false, false)).is_empty(), "bound once");
        assert_eq!(
            node.observe(&seen("a", true, false, false)),
            vec![Command::Start("a".into()), Command::Ready("a".into(), Duration::from_secs(2))]
        );
        assert!(node.observe(&seen("a", true, false, false)).is_empty(), "started once");
        assert_eq!(node.observe(&seen("a", true, true, false)), vec![Command::Remove("a".into(), Duration::ZERO)]);
        assert!(node.observe(&seen("a", true, true, false)).is_empty(), "removed once");
        assert!(node.observe(&seen("b", false, true, false)).is_empty(), "the API server deletes unbound Pods");
    }

    #[test]
    fn manual_readiness_goes_oldest_first_and_skips_never_ready_and_deleted_pods() {
        let mut node = Node::new(&KubeletConfig::manual());
        for (name, never) in [("a", false), ("b", true), ("c", false), ("d", false)] {
            node.observe(&seen(name, true, false, never));
        }
        node.observe(&seen("c", true, true, false));
        assert_eq!(node.pending(), 2);
        assert_eq!(node.ready_next(), Some(Command::Ready("a".into(), Duration::ZERO)));
        assert_eq!(node.ready_next(), Some(Command::Ready("d".into(), Duration::ZERO)));
        assert_eq!(node.ready_next(), None);
    }

    proptest! {
        /// Over any sequence of events: at most one command of each kind per Pod life, never
        /// ready for a never-ready Pod, never ready (nor waiting) once deleting, nothing before
        /// binding but the bind.
        #[test]
        fn commands_follow_the_pod_lifecycle(events in proptest::collection::vec((0u8..4, any::<bool>(), any::<bool>(), any::<bool>()), 1..60), manual in any::<bool>()) {
            let config = if manual { KubeletConfig::manual() } else { KubeletConfig::ready_after(Duration::from_millis(1)) };
            let mut node = Node::new(&config);
            let mut issued: BTreeMap<(String, u8), usize> = BTreeMap::new();
            let mut deleted: HashSet<String> = HashSet::new();
            for (pod, bound, deleting, gone) in events {
                let name = format!("p{pod}");
                // Never-ready is a property of the Pod: the odd ones.
                let never = pod % 2 == 1;
                if gone {
                    node.forget(&name);
                    deleted.remove(&name);
                    issued.retain(|(n, _), _| n != &name);
                    continue;
                }
                if deleted.contains(&name) && !deleting {
                    continue; // a deleted Pod does not come back
                }
                let mut commands = node.observe(&seen(&name, bound, deleting, never));
                if manual && pod == 0 {
                    commands.extend(node.ready_next());
                }
                for c in commands {
                    let (n, kind) = match &c {
                        Command::Bind(n) => (n.clone(), 0),
                        Command::Start(n) => (n.clone(), 1),
                        Command::Ready(n, _) => (n.clone(), 2),
                        Command::Remove(n, _) => (n.clone(), 3),
                    };
                    let count = issued.entry((n.clone(), kind)).or_default();
                    *count += 1;
                    prop_assert_eq!(*count, 1, "{:?} twice", c);
                    if kind == 2 {
                        prop_assert!(!deleted.contains(&n), "ready after deletion: {:?}", c);
                    }
                    if kind == 2 {
                        prop_assert!(!n.ends_with(['1', '3']), "a never-ready Pod made ready: {:?}", c);
                    }
                    if kind == 0 {
                        prop_assert!(!bound);
                    }
                }
                if deleting {
                    deleted.insert(name);
                }
            }
        }
    }
}
