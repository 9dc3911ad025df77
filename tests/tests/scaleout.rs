//! Scale-out against the real kube-apiserver: three `wasmloop run --shard-mode plugin` processes
//! share the podset plugin's 30 key-space shards (`shards: 30` in its manifest, PodSets in 30
//! namespaces), each owning its share through the shards' Leases; one is killed with SIGKILL in
//! the middle of new work, its shards move to the other two within the lease duration, every
//! PodSet converges exactly, and no shard ever had two owners at once (checked from both sides:
//! the Leases' holders, and each host's own log of when it took a shard and when it let go).
//! Shards are weighed by their objects: one namespace holds far more PodSets than the others,
//! each shard's owner publishes its PodSet count on the shard's Lease, and the survivors split
//! the shards by that weight, not by their number.
//!
//! The hosts run with the deploy ServiceAccount's token and RBAC (`deploy/rbac/`), as deployed.
//! Needs the plugins and the host built, as `scripts/test.sh` does.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use serde_json::json;
use wasmloop::shard::coordinator::member_lease_name;
use wasmloop::shard::{OBJECTS_ANNOTATION, assign_weighted, count_is_current, lease_name, shard_name, shard_of_scope};
use wasmloop_tests::cluster::*;
use wasmloop_tests::{TestNamespace, apply_plugin, client, eventually, init_tracing, plugin_path, sa_kubeconfig};

const SHARDS: usize = 30;
const LEASE_SECS: u64 = 4;
const WAIT: Duration = Duration::from_secs(90);
/// PodSets (of 0 replicas) in the first namespace: its shard outweighs any replica's fair share
/// of the others.
const HEAVY: usize = 60;

/// Shards each host says it owns (`wasmloop_shard_owned`).
async fn owned(host: &HostProcess) -> Result<BTreeSet<String>> {
    let m = host.metrics().await?;
    Ok(m.samples("wasmloop_shard_owned").filter(|(_, v)| *v == 1.0).filter_map(|(l, _)| l.get("shard").cloned()).collect())
}

/// Once every host sees `members` live replicas and every shard is owned by exactly one of
/// them: the shards each owns.
async fn settled(hosts: &[HostProcess], members: usize) -> Result<Vec<BTreeSet<String>>> {
    eventually(&format!("{members} members seen by every host, every shard owned once"), WAIT, || async {
        let mut per_host = Vec::new();
        for h in hosts {
            if h.metrics().await?.sum("wasmloop_shard_members", &[]) != members as f64 {
                return Ok(None);
            }
            per_host.push(owned(h).await?);
        }
        let all: BTreeSet<&String> = per_host.iter().flatten().collect();
        let total: usize = per_host.iter().map(BTreeSet::len).sum();
        Ok((all.len() == SHARDS && total == SHARDS).then_some(per_host))
    })
    .await
}

/// Holders of the shard Leases in `ns`.
async fn shard_holders(admin: &Client, ns: &str) -> Result<BTreeMap<String, Option<String>>> {
    let leases = Api::<Lease>::namespaced(admin.clone(), ns).list(&ListParams::default()).await?.items;
    Ok(leases
        .into_iter()
        .filter(|l| l.metadata.name.as_deref().is_some_and(|n| n.starts_with("wasmloop-shard-podset-")))
        .map(|l| (l.metadata.name.unwrap_or_default(), l.spec.and_then(|s| s.holder_identity)))
        .collect())
}

/// The object count each shard's Lease publishes (`None`: not yet, or not a number).
async fn published_weights(admin: &Client, ns: &str) -> Result<BTreeMap<String, Option<u64>>> {
    let leases = Api::<Lease>::namespaced(admin.clone(), ns).list(&ListParams::default()).await?.items;
    Ok(leases
        .into_iter()
        .filter(|l| l.metadata.name.as_deref().is_some_and(|n| n.starts_with("wasmloop-shard-podset-")))
        .map(|l| {
            let n = l.metadata.annotations.as_ref().and_then(|a| a.get(OBJECTS_ANNOTATION)).and_then(|v| v.parse().ok());
            (l.metadata.name.unwrap_or_default(), n)
        })
        .collect())
}

/// Once every shard's Lease publishes its PodSet count (within the publishing hysteresis of
/// `truth`, PodSets per shard) and each host in `hosts` owns a share whose total weight is
/// within 1.2× the mean: the shards each owns, and that max / mean.
async fn split_by_weight(
    admin: &Client,
    ns: &str,
    hosts: &[HostProcess],
    truth: &BTreeMap<String, u64>,
) -> Result<(Vec<BTreeSet<String>>, f64)> {
    let last = std::sync::Mutex::new(String::new());
    let waited = eventually("every shard's count published and the shards split by it", WAIT, || {
        let last = &last;
        async move {
            let published = published_weights(admin, ns).await?;
            let mut weight = BTreeMap::new();
            for i in 0..SHARDS {
                let shard = shard_name("podset", i, SHARDS);
                let want = truth.get(&shard).copied().unwrap_or(0);
                let Some(Some(have)) = published.get(&lease_name(&shard)).copied() else {
                    *last.lock().expect("not poisoned") = format!("{shard}: no count published");
                    return Ok(None);
                };
                if !count_is_current(have, want) {
                    *last.lock().expect("not poisoned") = format!("{shard}: publishes {have}, holds {want}");
                    return Ok(None);
                }
                weight.insert(shard, have.max(1));
            }
            let mut per_host = Vec::new();
            for h in hosts {
                per_host.push(owned(h).await?);
            }
            let all: BTreeSet<&String> = per_host.iter().flatten().collect();
            if all.len() != SHARDS || per_host.iter().map(BTreeSet::len).sum::<usize>() != SHARDS {
                *last.lock().expect("not poisoned") = format!("shards owned: {:?}", per_host.iter().map(BTreeSet::len).collect::<Vec<_>>());
                return Ok(None);
            }
            let loads: Vec<u64> = per_host.iter().map(|mine| mine.iter().map(|s| weight[s]).sum()).collect();
            let mean = loads.iter().sum::<u64>() as f64 / loads.len() as f64;
            let imbalance = *loads.iter().max().expect("hosts") as f64 / mean;
            *last.lock().expect("not poisoned") = format!("weight per host {loads:?} (max / mean {imbalance:.2})");
            Ok((imbalance <= 1.2).then_some((per_host, imbalance)))
        }
    })
    .await;
    waited.map_err(|e| e.context(last.into_inner().unwrap_or_default()))
}

/// When each host owned each shard, from its log: from "took over the shard" to the next
/// "no longer assigned" / "not ours; fenced" / "fence closed" (its renewals' window ran out), or
/// to `end` (its death, or the end of the test).
fn ownership_intervals(host: &HostProcess, end: Timestamp) -> BTreeMap<String, Vec<(Timestamp, Timestamp)>> {
    let mut open: BTreeMap<String, Timestamp> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<(Timestamp, Timestamp)>> = BTreeMap::new();
    for line in host.log_lines() {
        let (Some(msg), Some(shard), Some(ts)) = (line["message"].as_str(), line["shard"].as_str(), line["timestamp"].as_str()) else {
            continue;
        };
        let Ok(ts) = ts.parse::<Timestamp>() else { continue };
        if msg == "sharding: took over the shard" {
            open.entry(shard.to_string()).or_insert(ts);
        } else if (msg.starts_with("sharding: no longer assigned")
            || msg.starts_with("sharding: the shard's Lease is not ours")
            || msg.starts_with("sharding: the shard's fence closed"))
            && let Some(from) = open.remove(shard)
        {
            out.entry(shard.to_string()).or_default().push((from, ts));
        }
    }
    for (shard, from) in open {
        out.entry(shard).or_default().push((from, end));
    }
    out
}

/// Three sharded replicas: 10 ± 2 shards each, all PodSets converge; after kill -9 of one, its
/// shards move within the lease duration (+ the lease manager's back-off), new and scaled
/// PodSets converge exactly, and no shard was ever owned by two hosts at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_thirty_shards_and_survive_kill_9() -> Result<()> {
    init_tracing();
    let (admin, _) = client().await?;
    deployed_and_served(&admin).await?;
    let home = TestNamespace::create(&admin, "scaleout").await?;
    let mut data = Vec::new();
    for i in 0..SHARDS {
        data.push(TestNamespace::create(&admin, &format!("scaleout-d{i}")).await?);
    }
    let names: Vec<String> = data.iter().map(|n| n.name.clone()).collect();
    let manifest = sharded_podset_manifest(&names, SHARDS, "");
    grant_plugin(&admin, &home.name, "podset", &manifest, (DEPLOY_NS, DEPLOY_SA)).await?;
    apply_plugin(&admin, &home.name, "podset", &std::fs::read(plugin_path("podset")?)?, &manifest).await?;
    let dir = tempfile::tempdir()?;
    // As deployed: the deploy ServiceAccount's token, its RBAC bound in the host's namespace.
    bind_host_role(&admin, &home.name, DEPLOY_NS, DEPLOY_SA).await?;
    let kc = sa_kubeconfig(&admin, DEPLOY_NS, DEPLOY_SA, dir.path()).await?;
    let args = [
        "--plugin-namespace",
        home.name.as_str(),
        "--shard-mode",
        "plugin",
        "--lease-duration",
        "4",
        "--lease-grace",
        "2",
        "--plugin-memory-budget",
        "4Gi",
    ];
    let mut hosts = Vec::new();
    for r in ["a", "b", "c"] {
        hosts.push(HostProcess::start(&format!("{r}-{}", home.name), &kc, dir.path(), &args).await?);
    }

    // Every shard owned once, 10 ± 2 per host (bounded loads: exactly 10 when all three are live).
    let started = Instant::now();
    let split = settled(&hosts, 3).await?;
    let counts: Vec<usize> = split.iter().map(BTreeSet::len).collect();
    eprintln!("shards per host after {:.1}s: {counts:?}", started.elapsed().as_secs_f64());
    ensure!(counts.iter().all(|n| n.abs_diff(SHARDS / 3) <= 2), "unbalanced: {counts:?}");
    let holders = shard_holders(&admin, &home.name).await?;
    ensure!(holders.len() == SHARDS, "{} shard Leases, want {SHARDS}: {holders:?}", holders.len());
    for (h, mine) in hosts.iter().zip(&split) {
        let held = holders.values().filter(|v| v.as_deref() == Some(h.name.as_str())).count();
        ensure!(held == mine.len(), "host {} reports {} shards but holds {held} Leases", h.name, mine.len());
    }

    // Work in every namespace: two PodSets of 2 each; and in the first, HEAVY more of 0.
    let mut want: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for ns in &names {
        for p in ["one", "two"] {
            create_podset(&admin, ns, p, 2).await?;
            want.entry(ns.clone()).or_default().insert(p.to_string(), 2);
        }
    }
    for i in 0..HEAVY {
        create_podset(&admin, &names[0], &format!("idle-{i}"), 0).await?;
    }
    for (ns, w) in &want {
        converged(&admin, ns, w).await?;
    }
    let mut reconciles = Vec::new();
    for h in &hosts {
        reconciles.push(podset_reconciles(&h.metrics().await?));
    }
    eprintln!("reconciles per host before the kill: {reconciles:?}");
    // Every write was confirmed by a read of its shard's Lease; one read serves the writes that
    // waited for it.
    for h in &hosts {
        let m = h.metrics().await?;
        let writes = m.sum("wasmloop_actions_total", &[("controller", "podset"), ("result", "ok")]);
        let confirmed = m.sum("wasmloop_fence_confirmations_total", &[("result", "held")]);
        let reads = m.sum("wasmloop_fence_reads_total", &[]);
        let read_ms = m.sum("wasmloop_fence_read_seconds_sum", &[]) * 1000.0 / reads.max(1.0);
        eprintln!("{}: {writes} writes, {confirmed} confirmed by {reads} reads of their Lease ({read_ms:.2} ms each)", h.name);
        ensure!(
            confirmed >= writes && reads >= 1.0 && reads <= confirmed,
            "{}: {writes} writes, {confirmed} confirmed, {reads} reads",
            h.name
        );
    }
    ensure!(reconciles.iter().all(|r| *r > 0.0), "a host reconciled nothing: {reconciles:?}");

    // kill -9 one host, then more work at once: new PodSets everywhere, the "one"s scaled to 3.
    let mut victim = hosts.remove(0);
    let victim_shards = split[0].clone();
    let killed = Instant::now();
    victim.child.kill()?;
    victim.wait_exit(Duration::from_secs(5)).await?;
    let killed_at = Timestamp::now();
    for ns in &names {
        create_podset(&admin, ns, "after", 1).await?;
        podsets(&admin, ns).patch("one", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await?;
        let w = want.get_mut(ns).expect("every namespace has work");
        w.insert("after".into(), 1);
        w.insert("one".into(), 3);
    }
    let moved = eventually("the dead host's shards to move", WAIT, || async {
        let holders = shard_holders(&admin, &home.name).await?;
        let live: BTreeSet<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        Ok((holders.len() == SHARDS && holders.values().all(|h| h.as_deref().is_some_and(|h| live.contains(h)))).then(|| killed.elapsed()))
    })
    .await?;
    for (ns, w) in &want {
        converged(&admin, ns, w).await?;
    }
    let converged_after = killed.elapsed();
    eprintln!(
        "kill -9 of {} ({} shards): every shard Lease held by a live host after {:.2}s (lease {LEASE_SECS}s), \
         all {} PodSets converged after {:.2}s",
        victim.name,
        victim_shards.len(),
        moved.as_secs_f64(),
        want.values().map(BTreeMap::len).sum::<usize>(),
        converged_after.as_secs_f64()
    );
    // Expiry (≤ the lease duration) + kube-lease-manager's back-off (≤ 1 s) + the 0.5 s tick + polls.
    ensure!(moved < Duration::from_secs(LEASE_SECS + 4), "the dead host's shards took {moved:?} to move");
    // Balanced by objects: the heavy namespace's shard (over a third of all PodSets) shares its
    // replica with few others; by shard count (15 each) its replica would carry far more.
    settled(&hosts, 2).await?;
    let mut truth: BTreeMap<String, u64> = BTreeMap::new();
    for (i, ns) in names.iter().enumerate() {
        let podsets = want[ns].len() + if i == 0 { HEAVY } else { 0 };
        *truth.entry(shard_name("podset", shard_of_scope(ns, SHARDS), SHARDS)).or_default() += podsets as u64;
    }
    let (split, imbalance) = split_by_weight(&admin, &home.name, &hosts, &truth).await?;
    let heavy = shard_name("podset", shard_of_scope(&names[0], SHARDS), SHARDS);
    let counts: Vec<usize> = split.iter().map(BTreeSet::len).collect();
    eprintln!("after the kill, by weight: shards per host {counts:?}, max / mean weight {imbalance:.2}");
    let heavy_host = split.iter().position(|mine| mine.contains(&heavy)).expect("every shard owned");
    ensure!(counts[heavy_host] < SHARDS / 2, "the heavy shard's replica still has {} shards: {counts:?}", counts[heavy_host]);

    // A replica of a version that splits by count joins (a rolling update): its member Lease does
    // not say it weighs shards. The two hosts split by count too while it is live, so all three
    // compute the same split; once it is gone they split by objects again.
    let old = "old-version-replica";
    let leases = Api::<Lease>::namespaced(admin.clone(), &home.name);
    let spec = || LeaseSpec {
        holder_identity: Some(old.to_string()),
        lease_duration_seconds: Some(LEASE_SECS as i32),
        renew_time: Some(MicroTime(Timestamp::now())),
        ..LeaseSpec::default()
    };
    let member = Lease { metadata: ObjectMeta { name: Some(member_lease_name(old)), ..ObjectMeta::default() }, spec: Some(spec()) };
    leases.create(&PostParams::default(), &member).await?;
    let renewing = tokio::spawn({
        let leases = leases.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let renew = Patch::Merge(json!({"spec": spec()}));
                let _ = leases.patch(&member_lease_name(old), &PatchParams::default(), &renew).await;
            }
        }
    });
    let everyone: BTreeSet<String> = hosts.iter().map(|h| h.name.clone()).chain([old.to_string()]).collect();
    let equal: BTreeMap<String, u64> = (0..SHARDS).map(|i| (shard_name("podset", i, SHARDS), 1)).collect();
    let by_count = assign_weighted(&equal, &everyone, &BTreeMap::new());
    let mixed = eventually("the hosts splitting by count beside the old replica", WAIT, || async {
        for h in &hosts {
            let want: BTreeSet<String> = by_count.iter().filter(|(_, m)| **m == h.name).map(|(s, _)| s.clone()).collect();
            if owned(h).await? != want {
                return Ok(None);
            }
        }
        Ok(Some(hosts.iter().map(|h| by_count.values().filter(|m| **m == h.name).count()).collect::<Vec<_>>()))
    })
    .await?;
    eprintln!(
        "beside a replica that splits by count, the hosts own {mixed:?} shards (the old replica's {} are its own)",
        SHARDS - mixed.iter().sum::<usize>()
    );
    renewing.abort();
    leases.delete(&member_lease_name(old), &Default::default()).await?;
    let (_, imbalance) = split_by_weight(&admin, &home.name, &hosts, &truth).await?;
    eprintln!("the old replica gone: split by weight again, max / mean {imbalance:.2}");

    // No shard ever had two owners: the hosts' own ownership intervals never overlap.
    let now = Timestamp::now();
    let mut intervals: BTreeMap<String, Vec<(Timestamp, Timestamp, String)>> = BTreeMap::new();
    for (h, end) in hosts.iter().map(|h| (h, now)).chain(std::iter::once((&victim, killed_at))) {
        for (shard, spans) in ownership_intervals(h, end) {
            intervals.entry(shard).or_default().extend(spans.into_iter().map(|(a, b)| (a, b, h.name.clone())));
        }
    }
    ensure!(intervals.len() == SHARDS, "ownership logged for {} shards, want {SHARDS}", intervals.len());
    let mut handovers = 0;
    for (shard, spans) in &mut intervals {
        spans.sort();
        for pair in spans.windows(2) {
            let ((_, end, a), (start, _, b)) = (&pair[0], &pair[1]);
            ensure!(start >= end, "shard {shard}: {b} took it at {start} while {a} owned it until {end}");
            handovers += usize::from(a != b);
        }
    }
    eprintln!("handovers between hosts: {handovers}, no overlap");
    ensure!(handovers >= victim_shards.len(), "only {handovers} handovers for {} orphaned shards", victim_shards.len());

    drop(hosts);
    drop(victim);
    for ns in data {
        ns.cleanup().await?;
    }
    home.cleanup().await
}
