//! How heavy a shard is: the objects of the plugin's reconciled kind in it, as the shard's owner
//! counted them in its cache and published on the shard's Lease.
//!
//! Every replica must compute the same assignment, so weights cannot come from each replica's
//! own cache (two caches at different points of a watch would disagree and shards would flap).
//! The owner of a shard writes the count into the annotation [`ANNOTATION`] of the shard's Lease
//! with the renewals it sends anyway (no extra writes), and every replica reads it from the
//! Leases it already watches. A count is published again only when it moved by more than
//! [`HYSTERESIS`] (either way) from the published one, so a shard's weight — and the assignment —
//! changes only when the work really moved.

use std::collections::BTreeMap;

/// The Lease annotation that carries a shard's object count.
pub const ANNOTATION: &str = "wasmloop.dev/shard-objects";

/// How far a count may move from the published one before it is published again: by more than
/// this factor up or down.
pub const HYSTERESIS: f64 = 1.25;

/// The member Lease annotation by which a replica says it splits shards by their objects.
///
/// A fleet splits by objects only while every live replica says so: during a rolling update from
/// a version that split by shard count, an old and a new replica computing different splits could
/// each leave a shard to the other, and nobody would reconcile it. Until the last old replica is
/// gone, the new ones split by count (every weight 1, no holders kept), exactly as the old do.
pub const SPLIT_ANNOTATION: &str = "wasmloop.dev/shard-split";
/// [`SPLIT_ANNOTATION`]'s value: this replica weighs shards by their objects.
pub const SPLIT_BY_OBJECTS: &str = "objects";

/// Whether the fleet splits by objects: every other live replica's member Lease says so.
pub fn split_by_objects<'a>(others: impl IntoIterator<Item = Option<&'a str>>) -> bool {
    others.into_iter().all(|split| split == Some(SPLIT_BY_OBJECTS))
}

/// The largest count believed from a Lease; a larger or unreadable value counts as unknown.
const MAX_OBJECTS: u64 = 1 << 40;

/// The count an annotation value says, if it is a plain decimal within [`MAX_OBJECTS`].
pub fn parse(value: &str) -> Option<u64> {
    value.parse::<u64>().ok().filter(|n| *n <= MAX_OBJECTS)
}

/// Whether a published count still stands for `now` objects: within [`HYSTERESIS`] either way.
pub fn is_current(published: u64, now: u64) -> bool {
    // +1 on both sides: 0 → 1 object is not an infinite change.
    let ratio = (now as f64 + 1.0) / (published as f64 + 1.0);
    (1.0 / HYSTERESIS..=HYSTERESIS).contains(&ratio)
}

/// The count to publish with the next renewal of a shard whose Lease says `published` and whose
/// owner counts `now`: `None` keeps the annotation as it is.
pub fn to_publish(published: Option<u64>, now: u64) -> Option<u64> {
    (!published.is_some_and(|p| is_current(p, now))).then_some(now)
}

/// The weight of every shard in `shards`: its published count, or — for a shard no owner has
/// counted yet — the mean of the published ones (every shard 1 when none is published).
pub fn weights<'a>(shards: impl IntoIterator<Item = (&'a str, Option<u64>)>) -> BTreeMap<String, u64> {
    let shards: Vec<(&str, Option<u64>)> = shards.into_iter().collect();
    let known: Vec<u64> = shards.iter().filter_map(|(_, w)| *w).collect();
    let unknown = if known.is_empty() { 1 } else { (known.iter().sum::<u64>() / known.len() as u64).max(1) };
    shards.into_iter().map(|(s, w)| (s.to_string(), w.unwrap_or(unknown))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_are_plain_bounded_counts() {
        assert_eq!(parse("1234"), Some(1234));
        assert_eq!(parse("0"), Some(0));
        for bad in ["", "-1", "1e9", " 12", "12 ", "0x10", "99999999999999999999", &(MAX_OBJECTS + 1).to_string()] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_count_is_published_again_only_when_it_moved() {
        assert_eq!(to_publish(None, 0), Some(0));
        assert_eq!(to_publish(None, 500), Some(500));
        assert_eq!(to_publish(Some(1000), 1000), None);
        assert_eq!(to_publish(Some(1000), 1200), None);
        assert_eq!(to_publish(Some(1000), 820), None);
        assert_eq!(to_publish(Some(1000), 1300), Some(1300));
        assert_eq!(to_publish(Some(1000), 700), Some(700));
        assert_eq!(to_publish(Some(0), 0), None);
        assert_eq!(to_publish(Some(0), 1), Some(1));
        assert_eq!(to_publish(Some(4), 3), None);
        assert_eq!(to_publish(Some(3), 2), Some(2));
        assert_eq!(to_publish(Some(10), 0), Some(0));
    }

    #[test]
    fn one_replica_that_does_not_weigh_makes_the_fleet_split_by_count() {
        assert!(split_by_objects([]));
        assert!(split_by_objects([Some("objects"), Some("objects")]));
        assert!(!split_by_objects([Some("objects"), None]));
        assert!(!split_by_objects([Some("objects"), Some("count")]));
    }

    #[test]
    fn uncounted_shards_weigh_the_mean_of_the_counted() {
        let w = weights([("a", Some(100)), ("b", Some(300)), ("c", None)]);
        assert_eq!(w, BTreeMap::from([("a".into(), 100), ("b".into(), 300), ("c".into(), 200)]));
        let w = weights([("a", None), ("b", None)]);
        assert_eq!(w.values().copied().collect::<Vec<_>>(), [1, 1]);
        let w = weights([("a", Some(0)), ("b", None)]);
        assert_eq!(w["b"], 1);
    }
}
