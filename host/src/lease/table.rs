//! [`LeaseTable`]: what this replica observed of the Leases it follows, and when their holders
//! stop counting as live — judged on **this replica's own clock**, as client-go's leader elector
//! judges a leader: a holder is live for a lease duration from when this replica observed its
//! last renewal (a change of `renewTime`), so wall-clock skew between nodes does not matter.
//!
//! An observation can be stale: after this process was paused, what it last saw is old, and
//! every other holder looks dead until the watch catches up. So a holder is **dead only when a
//! fresh read says so**: a Lease whose holder looks expired is a *suspect* ([`LeaseTable::suspects`])
//! until the caller re-reads the Leases from the API server ([`LeaseTable::reread`]); only then,
//! if the renewal it shows is still the one observed before, is the Lease expired
//! ([`LeaseTable::expired`]) and may be taken, and its holder counted out.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

/// What was observed of one Lease.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The Lease as last observed.
    pub lease: Lease,
    /// Its holder.
    pub holder: Option<String>,
    /// Its `renewTime`, as text (compared, never trusted as a time but once: [`LeaseTable::observe`]).
    renew: Option<String>,
    /// Until when its holder counts as live, on this replica's clock.
    pub alive_until: Instant,
    /// A fresh read showed the same renewal after `alive_until` passed: the holder is gone.
    confirmed_expired: bool,
}

impl Observed {
    /// The annotation `key` of the Lease.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.lease.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str)
    }

    /// Whether its holder looks expired at `now` on this replica's clock (not yet confirmed).
    fn looks_expired(&self, now: Instant) -> bool {
        self.alive_until <= now
    }
}

/// Every Lease this replica follows, by name.
#[derive(Debug, Default)]
pub struct LeaseTable {
    leases: HashMap<String, Observed>,
    /// Lease duration assumed when a Lease does not say.
    default_duration: Duration,
}

impl LeaseTable {
    /// An empty table; a Lease without `leaseDurationSeconds` lasts `default_duration`.
    pub fn new(default_duration: Duration) -> Self {
        Self { leases: HashMap::new(), default_duration }
    }

    /// What was observed of Lease `name`.
    pub fn get(&self, name: &str) -> Option<&Observed> {
        self.leases.get(name)
    }

    /// Every Lease observed.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Observed)> {
        self.leases.iter()
    }

    /// Record `lease` as observed now, unless a newer version was already observed; false if
    /// it was older.
    pub fn observe(&mut self, lease: &Lease) -> bool {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let previous = self.leases.get(&name);
        if previous.is_some_and(|prev| is_older(lease, &prev.lease)) {
            return false;
        }
        let spec = lease.spec.clone().unwrap_or_default();
        let duration = spec.lease_duration_seconds.map_or(self.default_duration, |s| Duration::from_secs(s.max(0) as u64));
        let renew = spec.renew_time.as_ref().map(|t| t.0.to_string());
        let now = Instant::now();
        let same_renewal = previous.filter(|prev| prev.renew == renew && prev.holder == spec.holder_identity);
        let (alive_until, confirmed_expired) = match (same_renewal, previous) {
            // The renewal observed before: nothing new about its holder.
            (Some(prev), _) => (prev.alive_until, prev.confirmed_expired),
            // A renewal observed now: live for a lease duration from here.
            (None, Some(_)) => (now + duration, false),
            // First sight: trust the timestamp once, so a dead replica's old Lease does not count
            // as live for a whole duration after this replica starts (a suspect until confirmed).
            (None, None) => {
                let age = spec
                    .renew_time
                    .as_ref()
                    .map_or(duration, |t| Duration::try_from(Timestamp::now().duration_since(t.0)).unwrap_or(Duration::ZERO));
                (now + duration.saturating_sub(age), false)
            }
        };
        let observed = Observed { lease: lease.clone(), holder: spec.holder_identity, renew, alive_until, confirmed_expired };
        self.leases.insert(name, observed);
        true
    }

    /// Lease `name` was deleted.
    pub fn remove(&mut self, name: &str) -> Option<Observed> {
        self.leases.remove(name)
    }

    /// Leases held by someone other than `me` whose holder looks expired at `now` but that no
    /// fresh read has confirmed: the caller must [`reread`](Self::reread) before counting their
    /// holders out or taking them.
    pub fn suspects(&self, me: &str, now: Instant) -> BTreeSet<String> {
        self.leases
            .iter()
            .filter(|(_, o)| o.holder.as_deref().is_some_and(|h| h != me) && o.looks_expired(now) && !o.confirmed_expired)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The Leases as a fresh read (a quorum list) found them: each observed now, those missing
    /// removed (returned), and every Lease whose holder still looks expired is confirmed
    /// expired (the read shows no renewal since).
    pub fn reread(&mut self, listed: &[Lease]) -> Vec<String> {
        let names: BTreeSet<&str> = listed.iter().filter_map(|l| l.metadata.name.as_deref()).collect();
        let gone: Vec<String> = self.leases.keys().filter(|n| !names.contains(n.as_str())).cloned().collect();
        for name in &gone {
            self.leases.remove(name);
        }
        for lease in listed {
            self.observe(lease);
        }
        let now = Instant::now();
        for observed in self.leases.values_mut() {
            if observed.looks_expired(now) {
                observed.confirmed_expired = true;
            }
        }
        gone
    }

    /// Whether Lease `name` may be taken at `now`: free (no holder), or its holder expired and a
    /// fresh read confirmed it.
    pub fn takeable(&self, name: &str, now: Instant) -> bool {
        self.leases.get(name).is_some_and(|o| o.holder.is_none() || (o.looks_expired(now) && o.confirmed_expired))
    }

    /// Whether the holder of Lease `name` counts as live at `now`: its renewals are observed, or
    /// it looks expired but no fresh read confirmed it yet.
    pub fn holder_live(&self, name: &str, now: Instant) -> bool {
        self.leases.get(name).is_some_and(|o| o.holder.is_some() && !(o.looks_expired(now) && o.confirmed_expired))
    }
}

/// Whether `a` is an older version than `b` (resourceVersions compared as etcd revisions when
/// both are numbers; otherwise not older).
pub fn is_older(a: &Lease, b: &Lease) -> bool {
    let rv = |l: &Lease| l.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok());
    matches!((rv(a), rv(b)), (Some(a), Some(b)) if a < b)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;

    use super::*;

    fn lease(name: &str, rv: u64, holder: &str, renewed: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta { name: Some(name.into()), resource_version: Some(rv.to_string()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(4),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn older_versions_are_told_by_their_revision() {
        let lease = |rv: &str| Lease { metadata: ObjectMeta { resource_version: Some(rv.into()), ..Default::default() }, spec: None };
        assert!(is_older(&lease("9"), &lease("10")));
        assert!(!is_older(&lease("10"), &lease("9")));
        assert!(!is_older(&lease("10"), &lease("10")));
        // Opaque versions are never judged older (the event is taken).
        assert!(!is_older(&lease("a"), &lease("10")));
    }

    /// A replica that was paused sees every other holder as expired from its stale table; they
    /// are suspects, not dead, until a fresh read: the live one (renewed meanwhile) is live
    /// again, the dead one (same renewal) is confirmed expired and may be taken.
    #[tokio::test(start_paused = true)]
    async fn a_paused_replica_counts_nobody_out_before_a_fresh_read() {
        let mut table = LeaseTable::new(Duration::from_secs(4));
        let t0 = Timestamp::now();
        assert!(table.observe(&lease("m-a", 10, "a", t0)));
        assert!(table.observe(&lease("m-b", 11, "b", t0)));
        assert!(table.observe(&lease("m-me", 12, "me", t0)));
        // A renewal observed later starts a fresh lease duration on this clock.
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(table.observe(&lease("m-a", 13, "a", t0 + Duration::from_secs(2))));
        assert!(table.observe(&lease("m-b", 14, "b", t0 + Duration::from_secs(2))));
        // Paused for 10 s: both look expired; neither is counted out yet, nothing may be taken.
        tokio::time::advance(Duration::from_secs(10)).await;
        let now = Instant::now();
        assert_eq!(table.suspects("me", now), BTreeSet::from(["m-a".to_string(), "m-b".to_string()]));
        assert!(table.holder_live("m-a", now) && table.holder_live("m-b", now));
        assert!(!table.takeable("m-a", now) && !table.takeable("m-b", now));
        // An old event arriving late changes nothing.
        assert!(!table.observe(&lease("m-a", 10, "a", t0)));
        // The fresh read: a renewed while this replica was paused, b did not.
        let listed = [
            lease("m-a", 30, "a", t0 + Duration::from_secs(11)),
            lease("m-b", 14, "b", t0 + Duration::from_secs(2)),
            lease("m-me", 12, "me", t0),
        ];
        assert!(table.reread(&listed).is_empty());
        assert!(table.holder_live("m-a", now) && !table.takeable("m-a", now), "a renewed: live");
        assert!(!table.holder_live("m-b", now) && table.takeable("m-b", now), "b did not: expired, confirmed");
        assert!(table.suspects("me", now).is_empty());
        // b renews after all: live again, and a suspect again once it looks expired.
        assert!(table.observe(&lease("m-b", 31, "b", t0 + Duration::from_secs(13))));
        assert!(table.holder_live("m-b", now) && !table.takeable("m-b", now));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(table.suspects("me", Instant::now()), BTreeSet::from(["m-a".to_string(), "m-b".to_string()]));
        // A Lease missing from the read was deleted.
        let mut gone = table.reread(&[lease("m-a", 30, "a", t0)]);
        gone.sort();
        assert_eq!(gone, ["m-b", "m-me"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_lease_may_be_taken_at_once_and_first_sight_trusts_the_timestamp() {
        let mut table = LeaseTable::new(Duration::from_secs(4));
        let mut free = lease("s", 1, "x", Timestamp::now());
        free.spec.as_mut().unwrap().holder_identity = None;
        table.observe(&free);
        assert!(table.takeable("s", Instant::now()));
        assert!(!table.holder_live("s", Instant::now()));
        // Renewed 10 s ago (by the timestamp, seen for the first time): looks expired at once,
        // but is a suspect until a read confirms it.
        table.observe(&lease("old", 2, "gone", Timestamp::now() - Duration::from_secs(10)));
        assert_eq!(table.suspects("me", Instant::now()), BTreeSet::from(["old".to_string()]));
        assert!(!table.takeable("old", Instant::now()));
    }
}
