//! The annotations KCM keeps on Deployments and their ReplicaSets (`deploymentutil`): the
//! revision (and the revisions a ReplicaSet had before it, when a rollback made it new again),
//! the replica counts a proportional scale reads back, and the Deployment's own annotations
//! copied to its new ReplicaSet (what `kubectl rollout history` shows as CHANGE-CAUSE).

use std::collections::BTreeMap;

/// `deployment.kubernetes.io/revision`.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// `deployment.kubernetes.io/revision-history`: the revisions a ReplicaSet had before.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// `deployment.kubernetes.io/desired-replicas`: the Deployment's replicas when last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `deployment.kubernetes.io/max-replicas`: replicas + maxSurge when last scaled.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// `deprecated.deployment.rollback.to`: the rollback the extensions/v1beta1 API asked for.
pub const ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// `kubectl.kubernetes.io/last-applied-configuration`.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// KCM keeps revision history annotations under this many characters.
pub const MAX_REVISION_HISTORY_CHARS: usize = 2000;

/// Annotations of the Deployment not copied to its ReplicaSets (`annotationsToSkip`).
pub fn skip_copy(key: &str) -> bool {
    matches!(key, LAST_APPLIED | REVISION | REVISION_HISTORY | DESIRED_REPLICAS | MAX_REPLICAS | ROLLBACK_TO)
}

/// Annotations as KCM reads and writes them.
pub type Annotations = BTreeMap<String, String>;

/// `copyDeploymentAnnotationsToReplicaSet`: whether `rs` changed.
fn copy_from_deployment(deployment: &Annotations, rs: &mut Annotations) -> bool {
    let mut changed = false;
    for (k, v) in deployment {
        if skip_copy(k) || rs.get(k) == Some(v) {
            continue;
        }
        rs.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// `SetNewReplicaSetAnnotations`: the Deployment's annotations copied, the revision raised to
/// `new_revision` (the previous one appended to the history), and for a ReplicaSet being
/// created (`!exists`) the replica annotations. Whether `rs` changed.
pub fn set_new_replica_set(deployment: &Annotations, rs: &mut Annotations, new_revision: i64, exists: bool, replicas: (i32, i32)) -> bool {
    let mut changed = copy_from_deployment(deployment, rs);
    let old = rs.get(REVISION).cloned();
    let old_int = match old.as_deref().map(str::parse::<i64>) {
        Some(Ok(v)) => v,
        None => 0,
        // Not a number: KCM logs and leaves the ReplicaSet's annotations as they are.
        Some(Err(_)) if old.as_deref() != Some("") => return false,
        Some(Err(_)) => 0,
    };
    if old_int < new_revision {
        rs.insert(REVISION.into(), new_revision.to_string());
        changed = true;
        if let Some(old) = old {
            append_history(rs, &old);
        }
    }
    if !exists && set_replicas(rs, replicas.0, replicas.1) {
        changed = true;
    }
    changed
}

/// Append `old` to the revision history, dropping the oldest entries to stay within
/// [`MAX_REVISION_HISTORY_CHARS`].
fn append_history(rs: &mut Annotations, old: &str) {
    let history = rs.get(REVISION_HISTORY).cloned().unwrap_or_default();
    let mut entries: Vec<&str> = history.split(',').collect();
    if entries[0].is_empty() {
        rs.insert(REVISION_HISTORY.into(), old.into());
        return;
    }
    let mut total = history.len() + old.len() + 1;
    let mut start = 0;
    while total > MAX_REVISION_HISTORY_CHARS && start < entries.len() {
        total -= entries[start].len() + 1;
        start += 1;
    }
    if total <= MAX_REVISION_HISTORY_CHARS {
        entries = entries.split_off(start);
        entries.push(old);
        let joined = entries.join(",");
        rs.insert(REVISION_HISTORY.into(), joined);
    }
}

/// `SetReplicasAnnotations`: whether they changed.
pub fn set_replicas(rs: &mut Annotations, desired: i32, max: i32) -> bool {
    let mut changed = false;
    for (key, value) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let value = value.to_string();
        if rs.get(key) != Some(&value) {
            rs.insert(key.into(), value);
            changed = true;
        }
    }
    changed
}

/// `ReplicasAnnotationsNeedUpdate`.
pub fn replicas_need_update(rs: &Annotations, desired: i32, max: i32) -> bool {
    rs.get(DESIRED_REPLICAS) != Some(&desired.to_string()) || rs.get(MAX_REPLICAS) != Some(&max.to_string())
}

/// An integer annotation (`getIntFromAnnotation`): absent or not a 32-bit number is none.
pub fn int(rs: &Annotations, key: &str) -> Option<i32> {
    rs.get(key)?.parse().ok()
}

/// `SetDeploymentAnnotationsTo`: the Deployment keeps only its own (skipped) annotations and
/// takes the ReplicaSet's others (a rollback restores the change cause of that revision).
pub fn set_deployment_to(deployment: &mut Annotations, rs: &Annotations) {
    deployment.retain(|k, _| skip_copy(k));
    for (k, v) in rs {
        if !skip_copy(k) {
            deployment.insert(k.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(pairs: &[(&str, &str)]) -> Annotations {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_new_replica_set_gets_the_deployment_annotations_revision_and_replicas() {
        let d = a(&[("kubernetes.io/change-cause", "v2"), (REVISION, "1"), (LAST_APPLIED, "{}")]);
        let mut rs = Annotations::new();
        assert!(set_new_replica_set(&d, &mut rs, 2, false, (10, 13)));
        assert_eq!(rs, a(&[("kubernetes.io/change-cause", "v2"), (REVISION, "2"), (DESIRED_REPLICAS, "10"), (MAX_REPLICAS, "13")]));
        assert!(!set_new_replica_set(&d, &mut rs, 2, true, (10, 13)), "nothing left to change");
    }

    #[test]
    fn a_revived_replica_set_remembers_its_revisions() {
        let mut rs = a(&[(REVISION, "1")]);
        assert!(set_new_replica_set(&Annotations::new(), &mut rs, 3, true, (1, 1)));
        assert_eq!(rs, a(&[(REVISION, "3"), (REVISION_HISTORY, "1")]));
        assert!(set_new_replica_set(&Annotations::new(), &mut rs, 5, true, (1, 1)));
        assert_eq!(rs, a(&[(REVISION, "5"), (REVISION_HISTORY, "1,3")]));
        // A lower revision is never set.
        assert!(!set_new_replica_set(&Annotations::new(), &mut rs, 4, true, (1, 1)));
        // Not a number: left alone.
        let mut bad = a(&[(REVISION, "x")]);
        assert!(!set_new_replica_set(&a(&[("k", "v")]), &mut bad, 2, true, (1, 1)));
    }

    #[test]
    fn the_history_is_bounded_by_dropping_the_oldest() {
        let long: Vec<String> = (0..600).map(|i| i.to_string()).collect();
        let mut rs = a(&[(REVISION, "600")]);
        rs.insert(REVISION_HISTORY.into(), long.join(","));
        set_new_replica_set(&Annotations::new(), &mut rs, 601, true, (1, 1));
        let history = &rs[REVISION_HISTORY];
        assert!(history.len() <= MAX_REVISION_HISTORY_CHARS && history.ends_with(",599,600"), "{}", history.len());
    }

    #[test]
    fn rollback_annotations_and_replica_annotations() {
        let mut d = a(&[(REVISION, "4"), ("kubernetes.io/change-cause", "v4"), ("team", "a")]);
        set_deployment_to(&mut d, &a(&[(REVISION, "2"), ("kubernetes.io/change-cause", "v2")]));
        assert_eq!(d, a(&[(REVISION, "4"), ("kubernetes.io/change-cause", "v2")]));
        let rs = a(&[(DESIRED_REPLICAS, "3"), (MAX_REPLICAS, "4")]);
        assert!(!replicas_need_update(&rs, 3, 4));
        assert!(replicas_need_update(&rs, 3, 5));
        assert_eq!((int(&rs, DESIRED_REPLICAS), int(&rs, "none")), (Some(3), None));
    }
}
