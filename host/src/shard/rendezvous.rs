//! Which replica runs which shard: rendezvous (highest random weight) hashing with bounded
//! loads, computed the same way by every replica from the same inputs.
//!
//! Each shard ranks the live replicas by a hash of (replica, shard) and goes to the first one in
//! its ranking that still has room; a replica has room for at most ⌈shards / replicas⌉. Plain
//! rendezvous hashing moves only the shards of a replica that joins or leaves, but with 30
//! shards over 3 replicas it leaves one replica with 14 and another with 6 about as often as
//! not; the cap keeps every replica within one shard of the mean at the cost of a few extra
//! moves when membership changes (Mirrokni et al., "Consistent Hashing with Bounded Loads").
//! Shards are placed in the order of their own hash, so the result depends only on the sets.
//!
//! Shards differ in size (a shard is the namespaces that hash to it), so [`assign_weighted`]
//! counts load in *weight* (the objects each shard holds, as its owner published them:
//! [`super::weight`]) instead of in shards: heaviest first, each to the first replica in its
//! ranking with room for it under ⌈total weight / replicas⌉, and a shard that fits nowhere to the
//! least loaded replica (greedy longest-first scheduling, within 4/3 of the best split). With
//! equal weights every replica gets at most ⌈shards / replicas⌉.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

/// A stable 64-bit hash of `parts` (SHA-256, so every replica and every build agrees).
pub fn stable_hash(parts: &[&str]) -> u64 {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    u64::from_le_bytes(digest[..8].try_into().expect("a SHA-256 digest has 32 bytes"))
}

/// How far over its share a replica may keep the shards it already holds: moving a shard costs a
/// handover (fence, release, take, its keys queued again), so weights that drift a little do
/// not move shards.
pub const STICKY_SLACK: f64 = 0.1;

/// Assign every shard (with its weight, at least 1 is counted) to one member, so that each
/// member's total weight stays near the mean. A shard whose Lease a live member holds
/// (`holders`) stays there while that member's load stays within [`STICKY_SLACK`] of the cap.
/// Empty when there are no members.
///
/// Stable under its own handovers: a shard is taken from its holder only when the holder has no
/// room even under the slack, hence none under the cap, so the shard lands on the same member
/// whether the Lease still names the old holder, nobody (released), or the new one.
pub fn assign_weighted<'a>(
    shards: &BTreeMap<String, u64>,
    members: &'a BTreeSet<String>,
    holders: &BTreeMap<String, String>,
) -> BTreeMap<String, &'a str> {
    let mut assignment = BTreeMap::new();
    if members.is_empty() {
        return assignment;
    }
    // In units of the weights' common divisor, so that equal weights split exactly as equal
    // counts do (the cap is then ⌈shards / replicas⌉).
    let unit = shards.values().map(|w| (*w).max(1)).fold(0, gcd).max(1);
    let weight = |s: &str| shards[s].max(1) / unit;
    let total: u64 = shards.keys().map(|s| weight(s)).sum();
    let capacity = total.div_ceil(members.len() as u64);
    let sticky = capacity + (capacity as f64 * STICKY_SLACK) as u64;
    let mut load: BTreeMap<&str, u64> = members.iter().map(|m| (m.as_str(), 0)).collect();
    let mut order: Vec<&String> = shards.keys().collect();
    order.sort_by_key(|s| (std::cmp::Reverse(weight(s)), stable_hash(&[s]), *s));
    for shard in order {
        let w = weight(shard);
        let mut ranking: Vec<&str> = members.iter().map(String::as_str).collect();
        ranking.sort_by_key(|m| (std::cmp::Reverse(stable_hash(&[m, shard])), *m));
        let holder = holders.get(shard).and_then(|h| members.get(h)).map(String::as_str);
        let kept = holder.filter(|h| load[h] + w <= sticky);
        let fits = kept.or_else(|| ranking.iter().copied().find(|m| load[m] + w <= capacity));
        // Nowhere under the cap (only with unequal weights): the least loaded, in ranking order.
        let owner = fits.unwrap_or_else(|| *ranking.iter().min_by_key(|m| load[*m]).expect("members is not empty"));
        *load.get_mut(owner).expect("every member has a load") += w;
        assignment.insert(shard.clone(), owner);
    }
    assignment
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shard weighing the same: ⌈shards / members⌉ each at most.
    fn assign<'a>(shards: &BTreeSet<String>, members: &'a BTreeSet<String>) -> BTreeMap<String, &'a str> {
        let weights: BTreeMap<String, u64> = shards.iter().map(|s| (s.clone(), 1)).collect();
        assign_weighted(&weights, members, &BTreeMap::new())
    }

    /// The holders an assignment leaves behind.
    fn held(a: &BTreeMap<String, &str>) -> BTreeMap<String, String> {
        a.iter().map(|(s, m)| (s.clone(), m.to_string())).collect()
    }

    fn names(prefix: &str, n: usize) -> BTreeSet<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn loads<'a>(a: &BTreeMap<String, &'a str>) -> BTreeMap<&'a str, usize> {
        let mut loads = BTreeMap::new();
        for m in a.values() {
            *loads.entry(*m).or_insert(0) += 1;
        }
        loads
    }

    #[test]
    fn every_shard_has_one_owner_and_loads_stay_within_the_cap() {
        for (shards, members) in [(30, 3), (31, 3), (7, 3), (2, 3), (100, 7), (1, 1)] {
            let (s, m) = (names("podset/", shards), names("replica-", members));
            let a = assign(&s, &m);
            assert_eq!(a.len(), shards, "{shards} shards over {members}");
            let cap = shards.div_ceil(members);
            assert!(loads(&a).values().all(|&l| l <= cap), "{shards}/{members}: {:?}", loads(&a));
        }
        assert!(assign(&names("s", 5), &BTreeSet::new()).is_empty());
    }

    #[test]
    fn thirty_shards_over_three_replicas_are_balanced() {
        let (shards, members) = (names("podset/", 30), names("wasmloop-", 3));
        let a = assign(&shards, &members);
        assert_eq!(loads(&a).values().copied().collect::<Vec<_>>(), vec![10, 10, 10]);
    }

    #[test]
    fn the_result_depends_only_on_the_sets() {
        let (s, m) = (names("p/", 40), names("r", 4));
        assert_eq!(assign(&s, &m), assign(&s.iter().rev().cloned().collect(), &m.iter().rev().cloned().collect()));
    }

    #[test]
    fn a_replica_leaving_moves_its_shards_and_few_others() {
        let s = names("podset/", 60);
        let before_members = names("r", 4);
        let before = assign(&s, &before_members);
        let mut after_members = before_members.clone();
        after_members.remove("r3");
        let after = assign(&s, &after_members);
        let moved = s.iter().filter(|k| before[*k] != after[*k]).count();
        let orphaned = s.iter().filter(|k| before[*k] == "r3").count();
        assert!(after.values().all(|m| *m != "r3"));
        // The departed replica's shards must move; the cap moves a few more, not most.
        assert!(moved >= orphaned && moved <= orphaned * 2, "moved {moved}, orphaned {orphaned}");
    }

    #[test]
    fn a_replica_joining_takes_about_its_share() {
        let s = names("podset/", 60);
        let (three, four) = (names("r", 3), names("r", 4));
        let before = assign(&s, &three);
        let after = assign(&s, &four);
        let moved = s.iter().filter(|k| before[*k] != after[*k]).count();
        let taken = after.values().filter(|m| **m == "r3").count();
        assert_eq!(taken, 15);
        assert!(moved <= taken * 2, "moved {moved} for a new replica taking {taken}");
    }

    /// max / mean of the members' total weights.
    fn imbalance(weights: &BTreeMap<String, u64>, a: &BTreeMap<String, &str>, members: usize) -> f64 {
        let mut per: BTreeMap<&str, u64> = BTreeMap::new();
        for (s, m) in a {
            *per.entry(*m).or_insert(0) += weights[s];
        }
        let total: u64 = per.values().sum();
        *per.values().max().unwrap() as f64 / (total as f64 / members as f64)
    }

    /// 30 shards whose sizes differ as namespaces do: a few large, most small.
    fn skewed(n: usize) -> BTreeMap<String, u64> {
        (0..n).map(|i| (format!("podset/{i}-of-{n}"), [5000, 1000, 600, 300, 200, 100, 50, 20, 10, 5][i % 10])).collect()
    }

    #[test]
    fn equal_weights_assign_as_unweighted() {
        let (s, m) = (names("podset/", 45), names("r", 4));
        let weights: BTreeMap<String, u64> = s.iter().map(|k| (k.clone(), 7)).collect();
        assert_eq!(assign_weighted(&weights, &m, &BTreeMap::new()), assign(&s, &m));
    }

    #[test]
    fn unequal_shards_are_balanced_by_weight() {
        let (weights, members) = (skewed(30), names("wasmloop-", 3));
        let shards: BTreeSet<String> = weights.keys().cloned().collect();
        let by_count = imbalance(&weights, &assign(&shards, &members), 3);
        let by_weight = imbalance(&weights, &assign_weighted(&weights, &members, &BTreeMap::new()), 3);
        assert!(by_count > 1.2, "the unweighted split should show the skew: {by_count:.3}");
        assert!(by_weight <= 1.05, "weighted: {by_weight:.3} (unweighted {by_count:.3})");
        // One shard heavier than a replica's share: alone on its replica, the rest shared.
        let mut heavy = skewed(12);
        heavy.insert("podset/huge".into(), 100_000);
        let a = assign_weighted(&heavy, &members, &BTreeMap::new());
        let huge_owner = a["podset/huge"];
        assert_eq!(a.values().filter(|m| **m == huge_owner).count(), 1, "{a:?}");
        assert_eq!(a.len(), 13);
    }

    #[test]
    fn weighted_assignment_depends_only_on_its_inputs_and_moves_little() {
        let (weights, four) = (skewed(60), names("r", 4));
        let reversed: BTreeSet<String> = four.iter().rev().cloned().collect();
        assert_eq!(assign_weighted(&weights, &four, &BTreeMap::new()), assign_weighted(&weights, &reversed, &BTreeMap::new()));
        let before = assign_weighted(&weights, &four, &BTreeMap::new());
        let mut three = four.clone();
        three.remove("r3");
        let after = assign_weighted(&weights, &three, &BTreeMap::new());
        let moved: u64 = weights.keys().filter(|k| before[*k] != after[*k]).map(|k| weights[k]).sum();
        let orphaned: u64 = weights.keys().filter(|k| before[*k] == "r3").map(|k| weights[k]).sum();
        assert!(after.values().all(|m| *m != "r3"));
        assert!(moved <= orphaned * 3, "moved {moved} of weight for {orphaned} orphaned");
        assert!(imbalance(&weights, &after, 3) <= 1.1);
        // Zero weights count as one: an empty shard still goes somewhere.
        let zeros: BTreeMap<String, u64> = (0..5).map(|i| (format!("s{i}"), 0)).collect();
        assert_eq!(assign_weighted(&zeros, &three, &BTreeMap::new()).len(), 5);
    }

    #[test]
    fn holders_keep_their_shards_while_weights_drift() {
        let (mut weights, members) = (skewed(30), names("r", 3));
        let before = assign_weighted(&weights, &members, &BTreeMap::new());
        // Every weight drifts by up to ±8 %: nothing moves while the holders stay within the slack.
        for (i, w) in weights.values_mut().enumerate() {
            *w = *w * [92, 100, 108][i % 3] / 100;
        }
        let after = assign_weighted(&weights, &members, &held(&before));
        assert_eq!(after, before);
        // Without holders the drift reshuffles some shards.
        let fresh = assign_weighted(&weights, &members, &BTreeMap::new());
        assert!(weights.keys().any(|s| fresh[s] != before[s]), "the drift should matter without holders");
        assert!(imbalance(&weights, &after, 3) <= 1.0 + STICKY_SLACK + 0.05);
    }

    #[test]
    fn a_shard_moved_off_its_holder_lands_the_same_whoever_the_lease_names() {
        let members = names("r", 3);
        let mut weights = skewed(30);
        let before = assign_weighted(&weights, &members, &BTreeMap::new());
        // One shard triples: its holder overflows and something must move.
        let grown = before.keys().find(|s| weights[*s] == 600).expect("a shard of 600").clone();
        weights.insert(grown.clone(), 1800);
        let moved = assign_weighted(&weights, &members, &held(&before));
        let changed: Vec<&String> = weights.keys().filter(|s| moved[*s] != before[*s]).collect();
        assert!(!changed.is_empty());
        for s in changed {
            // The Lease as released (nobody), and as taken by the new owner: the same answer.
            let mut released = held(&before);
            released.remove(s);
            assert_eq!(assign_weighted(&weights, &members, &released), moved, "{s} released");
            let mut taken = held(&before);
            taken.insert(s.clone(), moved[s].to_string());
            assert_eq!(assign_weighted(&weights, &members, &taken), moved, "{s} taken");
        }
        // A dead holder does not count.
        let gone: BTreeMap<String, String> = weights.keys().map(|s| (s.clone(), "r9".to_string())).collect();
        assert_eq!(assign_weighted(&weights, &members, &gone), assign_weighted(&weights, &members, &BTreeMap::new()));
    }

    #[test]
    fn a_replica_leaving_moves_only_its_own_shards_when_the_others_hold_theirs() {
        let weights = skewed(60);
        let four = names("r", 4);
        let before = assign_weighted(&weights, &four, &BTreeMap::new());
        let mut three = four.clone();
        three.remove("r0");
        let after = assign_weighted(&weights, &three, &held(&before));
        for s in weights.keys() {
            if before[s] != "r0" {
                assert_eq!(after[s], before[s], "{s} moved off a live holder");
            }
        }
        assert!(imbalance(&weights, &after, 3) <= 1.2, "{:.3}", imbalance(&weights, &after, 3));
    }

    #[test]
    fn stable_hash_is_fixed() {
        // Replicas of different builds must agree: the value is part of the contract.
        // (Computed independently: the first 8 bytes, little-endian, of SHA-256(4u64 LE ‖ "shop").)
        assert_eq!(stable_hash(&["shop"]), 0x0a45_f4cb_da5c_4fcd);
        assert_ne!(stable_hash(&["a", "bc"]), stable_hash(&["ab", "c"]));
    }
}
