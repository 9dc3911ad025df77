//! A replica frozen while a renewal of its Lease is on the wire (issue #52), against the real
//! kube-apiserver: the replica's traffic goes through a recording proxy that holds the answer to
//! its next Lease renewal, the replica is stopped (SIGSTOP) with that answer held, the answer is
//! then handed back (it waits in the frozen process's socket), the other replicas take over and
//! change the work, and the replica is resumed (SIGCONT) two lease durations or more later.
//!
//! What the replica learns of the Leases after it resumes, it learns late: the proxy holds the
//! events of its Lease watch from the freeze on and hands them back one a second after the
//! resume (a watch that lags, as after any pause) — its own pre-freeze renewal first, the other
//! replicas' takeovers after. And the work changes again the moment it resumes, so a replica that
//! wrongly believed it may write would have writes to send.
//!
//! Judged from the API server's side — every request the resumed replica sent, as the proxy saw
//! it — it must write nothing for what it lost: in sharding mode no write in a lost shard's
//! namespaces unless it took that shard's Lease again first (and no takeover logged before
//! that), with leader election no write at all but Lease writes. And everything converges to
//! exactly the desired state.
//!
//! `scripts/soak.sh freeze [RUNS]` runs these repeatedly. `WASMLOOP_TEST_HOST_BIN` runs them
//! against another build of the host (e.g. one without the fix, to see them fail).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use wasmloop::shard::{lease_name, shard_name, shard_of_scope};
use wasmloop_tests::cluster::*;
use wasmloop_tests::fault_proxy::{FaultProxy, Faults, Gate, Recorded};
use wasmloop_tests::{TestNamespace, apply_plugin, client, eventually, init_tracing, plugin_path, sa_kubeconfig};

const SHARDS: usize = 6;
const LEASE: Duration = Duration::from_secs(4);
const LEASE_ARGS: [&str; 4] = ["--lease-duration", "4", "--lease-grace", "2"];
const WAIT: Duration = Duration::from_secs(90);
/// How long the resumed replica is watched before the verdict.
const AFTER_RESUME: Duration = Duration::from_secs(8);
/// The lag of its Lease watch after it resumes: one held frame per this long.
const TRICKLE: Duration = Duration::from_secs(1);

/// One scenario at a time: five hosts on two cores would stretch the lease timings.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Namespaces `<prefix>-…`, exactly one in each of `shards` key-space shards.
async fn one_namespace_per_shard(admin: &Client, prefix: &str, shards: usize) -> Result<Vec<TestNamespace>> {
    let mut by_shard: BTreeMap<usize, TestNamespace> = BTreeMap::new();
    for _ in 0..200 {
        if by_shard.len() == shards {
            break;
        }
        let ns = TestNamespace::create(admin, prefix).await?;
        let shard = shard_of_scope(&ns.name, shards);
        match by_shard.entry(shard) {
            std::collections::btree_map::Entry::Occupied(_) => ns.cleanup().await?,
            std::collections::btree_map::Entry::Vacant(free) => _ = free.insert(ns),
        }
    }
    ensure!(by_shard.len() == shards, "no namespace found for some of {shards} shards");
    Ok(by_shard.into_values().collect())
}

/// Holders of the Leases in `ns` whose names start with `prefix`.
async fn holders(admin: &Client, ns: &str, prefix: &str) -> Result<BTreeMap<String, Option<String>>> {
    let leases = Api::<Lease>::namespaced(admin.clone(), ns).list(&ListParams::default()).await?.items;
    Ok(leases
        .into_iter()
        .filter(|l| l.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix)))
        .map(|l| (l.metadata.name.unwrap_or_default(), l.spec.and_then(|s| s.holder_identity)))
        .collect())
}

/// The sum of metric `name`'s samples with `labels`, as a count.
fn count(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> u64 {
    m.sum(name, labels).max(0.0) as u64
}

/// Shards a host says it owns (`wasmloop_shard_owned`).
async fn owned(host: &HostProcess) -> Result<BTreeSet<String>> {
    let m = host.metrics().await?;
    Ok(m.samples("wasmloop_shard_owned").filter(|(_, v)| *v == 1.0).filter_map(|(l, _)| l.get("shard").cloned()).collect())
}

async fn scale(admin: &Client, ns: &str, name: &str, replicas: i64) -> Result<()> {
    podsets(admin, ns).patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": replicas}}))).await?;
    Ok(())
}

/// Hold the answer to the frozen-to-be replica's next write of a Lease whose path contains
/// `lease` (and its Lease watch's events from now on), stop the replica once one is held, hand
/// the answer back (it waits in the stopped process's socket). Returns when it was stopped.
async fn freeze_during_a_renewal(proxy: &FaultProxy, victim: &HostProcess, lease: &str) -> Result<Instant> {
    proxy.set_gate(Gate::Closed);
    proxy.hold(Some(lease));
    eventually("a Lease renewal of the replica to be held", WAIT, || async { Ok((proxy.holding() > 0).then_some(())) }).await?;
    victim.signal("STOP")?;
    let frozen = Instant::now();
    // Let anything already on its way in land (and be held) before handing the answers back.
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.release();
    eprintln!("{}: stopped with {} Lease answer(s) held, now handed back", victim.name, proxy.held_total());
    Ok(frozen)
}

/// Resume the frozen replica two lease durations after it was `frozen` (`moved`: what the others
/// did meanwhile, for the log); its Lease watch's held events trickle in. Returns when it was
/// resumed (and the proxy's clock as wall-clock time then).
async fn resume(proxy: &FaultProxy, victim: &HostProcess, frozen: Instant, moved: &str) -> Result<(Instant, WallClock)> {
    tokio::time::sleep((2 * LEASE).saturating_sub(frozen.elapsed())).await;
    eprintln!("{}: frozen {:.1}s ({moved}), resuming", victim.name, frozen.elapsed().as_secs_f64());
    let clock = WallClock::now();
    let resumed = Instant::now();
    proxy.set_gate(Gate::Trickle(TRICKLE));
    victim.signal("CONT")?;
    Ok((resumed, clock))
}

/// Watch the resumed replica for a while, then let its Lease watch flow again.
async fn watch_resumed(proxy: &FaultProxy) {
    tokio::time::sleep(AFTER_RESUME).await;
    proxy.set_gate(Gate::Open);
}

/// The Lease writes that arrived after `since`, counted by their answer's status.
fn lease_writes_after(recorded: &[Recorded], since: Instant) -> BTreeMap<u16, usize> {
    let mut by_status = BTreeMap::new();
    for r in recorded.iter().filter(|r| r.is_write() && r.arrived >= since && r.path.contains("/leases")) {
        *by_status.entry(r.status).or_default() += 1;
    }
    by_status
}

/// The proxy's instants as wall-clock time (to compare with the host's log timestamps).
struct WallClock {
    instant: Instant,
    wall: Timestamp,
}

impl WallClock {
    fn now() -> Self {
        Self { instant: Instant::now(), wall: Timestamp::now() }
    }

    fn of(&self, at: Instant) -> Timestamp {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.wall + after,
            None => self.wall - self.instant.duration_since(at),
        }
    }
}

/// `path` writes Lease `lease` (a create in the Leases' collection names it in the body).
fn writes_lease(r: &Recorded, lease: &str) -> bool {
    let path = r.path.split('?').next().unwrap_or_default();
    path.ends_with(&format!("/leases/{lease}"))
        || (path.ends_with("/leases") && r.json().is_some_and(|b| b["metadata"]["name"].as_str() == Some(lease)))
}

/// When (proxy instant) the replica `who` took Lease `lease` again after `since`: the answer to
/// its first successful write of it naming itself the holder.
fn retaken(recorded: &[Recorded], lease: &str, who: &str, since: Instant) -> Option<Instant> {
    recorded
        .iter()
        .filter(|r| r.arrived >= since && r.is_write() && (200..300).contains(&r.status) && writes_lease(r, lease))
        .filter(|r| r.json().is_some_and(|b| b["spec"]["holderIdentity"].as_str() == Some(who)))
        .map(|r| r.answered)
        .min()
}

/// Three sharded replicas, 6 shards (one namespace each); the one behind the proxy is frozen
/// during a renewal of a shard Lease while mid-outcome, its shards move, their work changes (and
/// again as it resumes); resumed, it writes nothing in a lost shard's namespace unless it took
/// that shard again first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_replica_frozen_during_a_renewal_writes_nothing_for_the_shards_it_lost() -> Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let (admin, _) = client().await?;
    deployed_and_served(&admin).await?;
    let home = TestNamespace::create(&admin, "freeze").await?;
    let data = one_namespace_per_shard(&admin, "freeze-d", SHARDS).await?;
    let names: Vec<String> = data.iter().map(|n| n.name.clone()).collect();
    // A slow API budget: an outcome of 8 creates takes ~4 s, so the replica is mid-outcome when
    // it freezes.
    let manifest = sharded_podset_manifest(&names, SHARDS, "api: {qps: 2, burst: 1}");
    grant_plugin(&admin, &home.name, "podset", &manifest, (DEPLOY_NS, DEPLOY_SA)).await?;
    apply_plugin(&admin, &home.name, "podset", &std::fs::read(plugin_path("podset")?)?, &manifest).await?;
    bind_host_role(&admin, &home.name, DEPLOY_NS, DEPLOY_SA).await?;
    let dir = tempfile::tempdir()?;
    let kc = sa_kubeconfig(&admin, DEPLOY_NS, DEPLOY_SA, dir.path()).await?;
    let proxy = FaultProxy::start(&kc, dir.path(), Faults::default()).await?;
    proxy.gate_watches("/leases");
    let mut args = vec!["--plugin-namespace", home.name.as_str(), "--shard-mode", "plugin", "--plugin-memory-budget", "4Gi"];
    args.extend(LEASE_ARGS);
    let victim = HostProcess::start(&format!("a-{}", home.name), &proxy.kubeconfig, dir.path(), &args).await?;
    let mut others = Vec::new();
    for r in ["b", "c"] {
        others.push(HostProcess::start(&format!("{r}-{}", home.name), &kc, dir.path(), &args).await?);
    }
    let hosts = || std::iter::once(&victim).chain(&others);
    eventually("3 members seen by every host, every shard owned once", WAIT, || async {
        let mut all = Vec::new();
        for h in hosts() {
            if h.metrics().await?.sum("wasmloop_shard_members", &[]) != 3.0 {
                return Ok(None);
            }
            all.extend(owned(h).await?);
        }
        Ok((all.len() == SHARDS && all.iter().collect::<BTreeSet<_>>().len() == SHARDS).then_some(()))
    })
    .await?;

    // Warm: two Pods in every namespace.
    let mut want: BTreeMap<String, usize> = names.iter().map(|ns| (ns.clone(), 2)).collect();
    for ns in &names {
        create_podset(&admin, ns, "web", 2).await?;
    }
    for (ns, n) in &want {
        converged(&admin, ns, &BTreeMap::from([("web".to_string(), *n)])).await?;
    }
    let mine = owned(&victim).await?;
    ensure!(!mine.is_empty(), "the replica to be frozen owns no shard");
    let in_mine: Vec<String> =
        names.iter().filter(|ns| mine.contains(&shard_name("podset", shard_of_scope(ns, SHARDS), SHARDS))).cloned().collect();
    eprintln!("{} owns {mine:?} ({} namespaces)", victim.name, in_mine.len());

    // Mid-outcome: its namespaces scaled to 8 (at 2 writes/s), then frozen during a renewal.
    for ns in &in_mine {
        scale(&admin, ns, "web", 8).await?;
    }
    eventually("the replica to be creating Pods", WAIT, || async {
        let m = victim.metrics().await?;
        Ok((m.sum("wasmloop_actions_total", &[("controller", "podset"), ("verb", "create"), ("result", "ok")]) >= 1.0).then_some(()))
    })
    .await?;
    let frozen = freeze_during_a_renewal(&proxy, &victim, "/leases/wasmloop-shard-").await?;

    // Frozen: the others take its shards and the work changes under them (down to 3).
    for ns in &in_mine {
        scale(&admin, ns, "web", 3).await?;
        want.insert(ns.clone(), 3);
    }
    let lost: BTreeSet<String> = mine.iter().map(|s| lease_name(s)).collect();
    eventually("its shards held by the others", WAIT, || async {
        let now = holders(&admin, &home.name, "wasmloop-shard-").await?;
        Ok(lost.iter().all(|l| now.get(l).is_some_and(|h| h.as_deref().is_some_and(|h| h != victim.name))).then_some(()))
    })
    .await?;
    for ns in &in_mine {
        converged(&admin, ns, &BTreeMap::from([("web".to_string(), 3)])).await?;
    }
    let moved = format!("its shards moved after {:.1}s", frozen.elapsed().as_secs_f64());
    let (resumed, clock) = resume(&proxy, &victim, frozen, &moved).await?;
    // New work in the lost shards at once: up to 5.
    for ns in &in_mine {
        scale(&admin, ns, "web", 5).await?;
        want.insert(ns.clone(), 5);
    }
    watch_resumed(&proxy).await;

    // Everything converges exactly.
    for (ns, n) in &want {
        let shard = shard_name("podset", shard_of_scope(ns, SHARDS), SHARDS);
        converged(&admin, ns, &BTreeMap::from([("web".to_string(), *n)])).await.with_context(|| {
            let logs: Vec<String> = hosts().map(|h| format!("---- {} (last 60 lines)\n{}", h.name, h.log_tail(60))).collect();
            format!("{ns} (shard {shard}) did not converge:\n{}", logs.join("\n"))
        })?;
        ensure!(pods(&admin, ns).await?.len() == *n, "{ns}: not exactly {n} Pods");
    }

    // The verdict, from the API server's side: no write in a lost shard's namespace that came
    // before the replica took that shard's Lease again.
    let recorded = proxy.recorded();
    let mut violations = Vec::new();
    let mut writes_after = 0;
    for r in recorded.iter().filter(|r| r.is_write() && r.arrived >= resumed) {
        let Some(ns) = r.namespace().filter(|ns| names.iter().any(|n| n == ns)) else { continue };
        writes_after += 1;
        let lease = lease_name(&shard_name("podset", shard_of_scope(ns, SHARDS), SHARDS));
        if !lost.contains(&lease) {
            continue;
        }
        let back = retaken(&recorded, &lease, &victim.name, resumed);
        if back.is_none_or(|b| r.arrived < b) {
            violations.push(format!(
                "{} {} → {} {:.0} ms after resuming (its Lease {lease} taken again: {:?})",
                r.method,
                r.path,
                r.status,
                r.arrived.duration_since(resumed).as_secs_f64() * 1000.0,
                back.map(|b| b.duration_since(resumed))
            ));
        }
    }
    // Nor did its own log say it took a lost shard over before it had taken the Lease again.
    let mut early_takeovers = Vec::new();
    for line in victim.log_lines() {
        let (Some(msg), Some(shard), Some(ts)) = (line["message"].as_str(), line["shard"].as_str(), line["timestamp"].as_str()) else {
            continue;
        };
        let Ok(ts) = ts.parse::<Timestamp>() else { continue };
        if msg != "sharding: took over the shard" || ts < clock.wall || !mine.contains(shard) {
            continue;
        }
        let back = retaken(&recorded, &lease_name(shard), &victim.name, resumed).map(|b| clock.of(b));
        if back.is_none_or(|b| ts < b) {
            early_takeovers.push(format!("{shard} at {ts} (Lease taken again at {back:?})"));
        }
    }
    let m = victim.metrics().await?;
    let lease_writes = lease_writes_after(&recorded, resumed);
    eprintln!(
        "after resuming: {writes_after} writes in the workload namespaces, Lease writes {lease_writes:?} (by answer), \
         {} fence closings (expired), {} stale renewals refused; writes on the wire while frozen: {}",
        count(&m, "wasmloop_fence_closed_total", &[("reason", "expired")]),
        count(&m, "wasmloop_fence_stale_renewals_total", &[]),
        recorded
            .iter()
            .filter(|r| r.is_write()
                && r.arrived >= frozen
                && r.arrived < resumed
                && r.namespace().is_some_and(|ns| names.iter().any(|n| n == ns)))
            .count()
    );
    ensure!(violations.is_empty(), "the resumed replica wrote for shards it had lost:\n{}", violations.join("\n"));
    // Renewals of its member Lease and of the shards it took again, ~one each per 2 s: a replica
    // retrying stale writes in a loop would send hundreds.
    ensure!(lease_writes.values().sum::<usize>() <= 40, "the resumed replica kept writing Leases: {lease_writes:?}");
    ensure!(early_takeovers.is_empty(), "the resumed replica took over shards it had not taken again:\n{}", early_takeovers.join("\n"));
    ensure!(proxy.held_total() > 0, "no renewal was held: the scenario did not happen");

    drop(others);
    drop(victim);
    for ns in data {
        ns.cleanup().await?;
    }
    home.cleanup().await
}

/// Two replicas with `--leader-elect`; the leader (behind the proxy) is frozen during a renewal
/// while mid-outcome, the standby takes over and the work changes (and again as it resumes);
/// resumed, the old leader writes nothing but Lease writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_during_a_renewal_writes_nothing_after_it_resumes() -> Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let (admin, _) = client().await?;
    deployed_and_served(&admin).await?;
    let ns = TestNamespace::create(&admin, "freeze-leader").await?;
    let dir = tempfile::tempdir()?;
    let plugins = install_podset_plugin_with(&admin, &ns.name, "api: {qps: 2, burst: 1}").await?;
    bind_host_role(&admin, &plugins, DEPLOY_NS, DEPLOY_SA).await?;
    let kc = sa_kubeconfig(&admin, DEPLOY_NS, DEPLOY_SA, dir.path()).await?;
    let proxy = FaultProxy::start(&kc, dir.path(), Faults::default()).await?;
    proxy.gate_watches("/leases");
    let mut args = vec!["--plugin-namespace", plugins.as_str(), "--leader-elect"];
    args.extend(LEASE_ARGS);
    let victim = HostProcess::start(&format!("a-{}", ns.name), &proxy.kubeconfig, dir.path(), &args).await?;
    eventually("the replica behind the proxy to lead", WAIT, || async {
        Ok((holder(&admin, &plugins).await?.as_deref() == Some(victim.name.as_str())).then_some(()))
    })
    .await?;
    let standby = HostProcess::start(&format!("b-{}", ns.name), &kc, dir.path(), &args).await?;
    eventually("the standby warm", WAIT, || async {
        Ok((standby.metrics().await?.has("wasmloop_plugin_info", &[]) && standby.get("/readyz").await?.0 == 200).then_some(()))
    })
    .await?;
    create_podset(&admin, &ns.name, "web", 2).await?;
    converged(&admin, &ns.name, &BTreeMap::from([("web".to_string(), 2)])).await?;

    // Mid-outcome (8 Pods at 2 writes/s), then frozen during a renewal of the Lease.
    scale(&admin, &ns.name, "web", 8).await?;
    eventually("the leader to be creating Pods", WAIT, || async { Ok((pods(&admin, &ns.name).await?.len() >= 3).then_some(())) }).await?;
    let frozen = freeze_during_a_renewal(&proxy, &victim, "/leases/wasmloop").await?;

    // Frozen: the standby takes over and the work changes under it (down to 3).
    scale(&admin, &ns.name, "web", 3).await?;
    eventually("the standby to take the Lease", WAIT, || async {
        Ok((holder(&admin, &plugins).await?.as_deref() == Some(standby.name.as_str())).then_some(()))
    })
    .await?;
    let took = format!("the standby held the Lease after {:.1}s", frozen.elapsed().as_secs_f64());
    converged(&admin, &ns.name, &BTreeMap::from([("web".to_string(), 3)])).await?;
    let (resumed, clock) = resume(&proxy, &victim, frozen, &took).await?;
    // New work at once: up to 5.
    scale(&admin, &ns.name, "web", 5).await?;
    watch_resumed(&proxy).await;

    converged(&admin, &ns.name, &BTreeMap::from([("web".to_string(), 5)])).await?;
    ensure!(pods(&admin, &ns.name).await?.len() == 5, "not exactly 5 Pods");
    let recorded = proxy.recorded();
    let written: Vec<String> = recorded
        .iter()
        .filter(|r| r.is_write() && r.arrived >= resumed && !r.path.contains("/leases"))
        .map(|r| {
            format!(
                "{} {} → {} {:.0} ms after resuming",
                r.method,
                r.path,
                r.status,
                r.arrived.duration_since(resumed).as_secs_f64() * 1000.0
            )
        })
        .collect();
    let led_again: Vec<String> = victim
        .log_lines()
        .into_iter()
        .filter(|l| l["message"].as_str() == Some("became leader; reconciling"))
        .filter_map(|l| l["timestamp"].as_str().and_then(|t| t.parse::<Timestamp>().ok()))
        .filter(|ts| *ts >= clock.wall)
        .map(|ts| ts.to_string())
        .collect();
    let m = victim.metrics().await?;
    let lease_writes = lease_writes_after(&recorded, resumed);
    eprintln!(
        "after resuming: Lease writes {lease_writes:?} (by answer), {} fence closings (expired), {} stale renewals refused",
        count(&m, "wasmloop_fence_closed_total", &[("reason", "expired")]),
        count(&m, "wasmloop_fence_stale_renewals_total", &[])
    );
    ensure!(written.is_empty(), "the resumed old leader wrote:\n{}", written.join("\n"));
    ensure!(lease_writes.values().sum::<usize>() <= 10, "the resumed old leader kept writing the Lease: {lease_writes:?}");
    ensure!(led_again.is_empty(), "the resumed old leader said it led again at {led_again:?} while the standby held the Lease");
    ensure!(holder(&admin, &plugins).await?.as_deref() == Some(standby.name.as_str()), "the standby lost the Lease");
    ensure!(proxy.held_total() > 0, "no renewal was held: the scenario did not happen");
    drop((victim, standby));
    ns.cleanup().await.context("cleanup")
}
