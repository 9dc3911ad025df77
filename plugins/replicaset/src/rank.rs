//! Which Pods a scale-down deletes first: kube-controller-manager v1.20's `ActivePodsWithRanks`
//! order (`pkg/controller/controller_utils.go`), smallest first:
//!
//! 1. unassigned before assigned (no `spec.nodeName`);
//! 2. Pending before Unknown before Running;
//! 3. not ready before ready;
//! 4. more co-located related Pods before fewer (Pods of ReplicaSets with the same controller
//!    on the same node: a Deployment's rollout spreads better);
//! 5. of two ready Pods, the one ready for less time first (no ready time before any);
//! 6. more container restarts before fewer;
//! 7. newer before older (no creation time before any).
//!
//! KCM sorts unstably; ties here fall back to the name, so the choice is deterministic.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::model::Pod;
use crate::time;

/// `pods` sorted so that the first ones are deleted first; `colocated` counts related active
/// Pods per node name.
pub fn deletion_order<'p, 'a>(mut pods: Vec<&'p Pod<'a>>, colocated: &BTreeMap<String, usize>) -> Vec<&'p Pod<'a>> {
    let rank = |p: &Pod<'_>| colocated.get(p.node_name()).copied().unwrap_or(0);
    pods.sort_by(|a, b| compare(a, b, rank(a), rank(b)));
    pods
}

fn phase_ordinal(phase: &str) -> u8 {
    match phase {
        "Unknown" => 1,
        "Running" => 2,
        _ => 0,
    }
}

/// `Less` of KCM's order, as an `Ordering` (Less = deleted earlier).
fn compare(a: &Pod<'_>, b: &Pod<'_>, rank_a: usize, rank_b: usize) -> Ordering {
    let (na, nb) = (a.node_name(), b.node_name());
    if na != nb && (na.is_empty() || nb.is_empty()) {
        return if na.is_empty() { Ordering::Less } else { Ordering::Greater };
    }
    phase_ordinal(a.phase())
        .cmp(&phase_ordinal(b.phase()))
        .then_with(|| a.is_ready().cmp(&b.is_ready()))
        .then_with(|| rank_b.cmp(&rank_a))
        .then_with(|| if a.is_ready() && b.is_ready() { later_or_unset(a.ready_since(), b.ready_since()) } else { Ordering::Equal })
        .then_with(|| b.max_restarts().cmp(&a.max_restarts()))
        .then_with(|| later_or_unset(created(a), created(b)))
        .then_with(|| a.metadata.name.cmp(b.metadata.name))
}

fn created<'p>(p: &'p Pod<'_>) -> Option<&'p str> {
    p.metadata.creation_timestamp
}

/// KCM's `afterOrZero`: an unset time first, then the later time first.
fn later_or_unset(a: Option<&str>, b: Option<&str>) -> Ordering {
    let (ta, tb) = (a.and_then(time::parse), b.and_then(time::parse));
    match (ta, tb) {
        (x, y) if x == y => Ordering::Equal,
        (None, _) => Ordering::Less,
        (_, None) => Ordering::Greater,
        (Some(x), Some(y)) => y.cmp(&x),
    }
}
