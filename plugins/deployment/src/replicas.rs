//! Replica arithmetic of a rollout (`deploymentutil`): maxSurge and maxUnavailable resolved
//! against `replicas` (percentages rounded up for the surge, down for unavailability; both zero
//! means one may be unavailable), how far a new ReplicaSet may grow, and each ReplicaSet's share
//! of a proportional scale.

use crate::model::{Deployment, IntOrPercent, ROLLING_UPDATE, ReplicaSet};

/// A maxSurge or maxUnavailable that is neither a count nor a percentage.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid value for IntOrString: invalid type: string is not a percentage: {0:?}")]
pub struct BadIntOrPercent(pub String);

/// `intstr.GetScaledValueFromIntOrPercent` on a count or percentage of `total`.
pub fn scaled(value: Option<&IntOrPercent>, total: i32, round_up: bool) -> Result<i32, BadIntOrPercent> {
    match value {
        None => Ok(0),
        Some(IntOrPercent::Int(n)) => Ok(i32::try_from(*n).unwrap_or(if *n < 0 { i32::MIN } else { i32::MAX })),
        Some(IntOrPercent::Str(s)) => {
            let percent: i64 = s.strip_suffix('%').and_then(|p| p.parse().ok()).ok_or_else(|| BadIntOrPercent(s.clone()))?;
            let product = percent * i64::from(total);
            // Go computes in float64: exact for these magnitudes, so integer ceil/floor agree.
            let v = if round_up { product.div_euclid(100) + i64::from(product.rem_euclid(100) != 0) } else { product.div_euclid(100) };
            Ok(i32::try_from(v).unwrap_or(i32::MAX))
        }
    }
}

impl Deployment {
    /// `spec.replicas` (1 when unset, as the API server defaults it).
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }

    /// `IsRollingUpdate`.
    pub fn is_rolling_update(&self) -> bool {
        self.spec.strategy.type_ == ROLLING_UPDATE
    }

    /// `ResolveFenceposts`: (surge, unavailable).
    pub fn fenceposts(&self) -> Result<(i32, i32), BadIntOrPercent> {
        let ru = self.spec.strategy.rolling_update.as_ref();
        let desired = self.replicas();
        let surge = scaled(ru.and_then(|r| r.max_surge.as_ref()), desired, true)?;
        let unavailable = scaled(ru.and_then(|r| r.max_unavailable.as_ref()), desired, false)?;
        Ok(if surge == 0 && unavailable == 0 { (0, 1) } else { (surge, unavailable) })
    }

    /// `MaxSurge` (0 for Recreate; KCM ignores a bad value here, reading 0).
    pub fn max_surge(&self) -> i32 {
        if !self.is_rolling_update() {
            return 0;
        }
        self.fenceposts().map_or(0, |(s, _)| s)
    }

    /// `MaxUnavailable`, at most `replicas` (0 for Recreate and for 0 replicas).
    pub fn max_unavailable(&self) -> i32 {
        if !self.is_rolling_update() || self.replicas() == 0 {
            return 0;
        }
        self.fenceposts().map_or(0, |(_, u)| u).min(self.replicas())
    }

    /// `HasProgressDeadline`: set and not MaxInt32.
    pub fn has_progress_deadline(&self) -> bool {
        self.spec.progress_deadline_seconds.is_some_and(|s| s != i32::MAX)
    }

    /// `HasRevisionHistoryLimit`: set and not MaxInt32.
    pub fn revision_history_limit(&self) -> Option<i32> {
        self.spec.revision_history_limit.filter(|l| *l != i32::MAX)
    }
}

/// Σ `spec.replicas`.
pub fn spec_sum<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    rss.into_iter().map(ReplicaSet::replicas).sum()
}

/// `NewRSNewReplicas`: how many replicas the new ReplicaSet may have now (`all` includes it).
pub fn new_rs_new_replicas(d: &Deployment, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> Result<i32, BadIntOrPercent> {
    if !d.is_rolling_update() {
        return Ok(d.replicas());
    }
    let max_surge = scaled(d.spec.strategy.rolling_update.as_ref().and_then(|r| r.max_surge.as_ref()), d.replicas(), true)?;
    let current = spec_sum(all.iter().copied());
    let max_total = d.replicas() + max_surge;
    if current >= max_total {
        return Ok(new_rs.replicas());
    }
    let up = (max_total - current).min(d.replicas() - new_rs.replicas());
    Ok(new_rs.replicas() + up)
}

/// `GetProportion`: the share of `to_add` (already `added` handed out) for `rs`.
pub fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if rs.replicas() == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 { fraction.min(allowed) } else { fraction.max(allowed) }
}

/// `getReplicaSetFraction`: what `rs` should grow (or shrink) by for the Deployment's new size,
/// against the size it was last scaled for (its max-replicas annotation, else the status).
fn fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    if d.replicas() == 0 {
        return -rs.replicas();
    }
    let target = d.replicas() + d.max_surge();
    let annotated = crate::annotations::int(&rs.metadata.annotations, crate::annotations::MAX_REPLICAS).unwrap_or(d.status.replicas);
    let size = f64::from(rs.replicas().wrapping_mul(target)) / f64::from(annotated);
    round_to_i32(size) - rs.replicas()
}

/// `integer.RoundToInt32`: halves away from zero.
#[allow(clippy::cast_possible_truncation)] // as Go's int32(x) conversion
fn round_to_i32(a: f64) -> i32 {
    if a < 0.0 { (a - 0.5) as i32 } else { (a + 0.5) as i32 }
}

/// `IsSaturated`: the new ReplicaSet has all replicas, was scaled for them, and all are
/// available.
pub fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else { return false };
    let desired = rs.metadata.annotations.get(crate::annotations::DESIRED_REPLICAS).and_then(|v| v.parse::<i64>().ok());
    rs.replicas() == d.replicas() && desired == Some(i64::from(d.replicas())) && rs.status.available_replicas == d.replicas()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(replicas: i32, surge: serde_json::Value, unavailable: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d"},
            "spec": {"replicas": replicas, "strategy": {"type": "RollingUpdate",
                     "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}
        }))
        .unwrap()
    }

    #[test]
    fn percentages_round_as_kcm() {
        // 25% of 10: surge rounds up (3), unavailable down (2).
        assert_eq!(deployment(10, json!("25%"), json!("25%")).fenceposts(), Ok((3, 2)));
        assert_eq!(deployment(1, json!("25%"), json!("25%")).fenceposts(), Ok((1, 0)));
        assert_eq!(deployment(3, json!("0%"), json!("0%")).fenceposts(), Ok((0, 1)), "both zero: one unavailable");
        assert_eq!(deployment(4, json!(2), json!(0)).fenceposts(), Ok((2, 0)));
        assert_eq!(deployment(10, json!("100%"), json!("100%")).fenceposts(), Ok((10, 10)));
        assert!(deployment(10, json!("3"), json!(0)).fenceposts().is_err());
        assert!(deployment(10, json!("x%"), json!(0)).fenceposts().is_err());
        // maxUnavailable is capped at replicas; zero replicas have none.
        assert_eq!(deployment(2, json!(0), json!(5)).max_unavailable(), 2);
        assert_eq!(deployment(0, json!(0), json!(5)).max_unavailable(), 0);
    }

    #[test]
    fn recreate_has_no_surge_nor_unavailability() {
        let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "d"},
            "spec": {"replicas": 3, "strategy": {"type": "Recreate"}}}))
        .unwrap();
        assert_eq!((d.max_surge(), d.max_unavailable()), (0, 0));
    }

    #[test]
    fn halves_round_away_from_zero() {
        assert_eq!((round_to_i32(2.5), round_to_i32(-2.5), round_to_i32(2.4), round_to_i32(-0.4)), (3, -3, 2, 0));
    }
}
