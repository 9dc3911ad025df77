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

/// Assign every shard to one member. Empty when there are no members.
pub fn assign<'a>(shards: &BTreeSet<String>, members: &'a BTreeSet<String>) -> BTreeMap<String, &'a str> {
    let mut assignment = BTreeMap::new();
    if members.is_empty() {
        return assignment;
    }
    let capacity = shards.len().div_ceil(members.len());
    let mut load: BTreeMap<&str, usize> = members.iter().map(|m| (m.as_str(), 0)).collect();
    let mut order: Vec<&String> = shards.iter().collect();
    order.sort_by_key(|s| (stable_hash(&[s]), *s));
    for shard in order {
        let mut ranking: Vec<&str> = members.iter().map(String::as_str).collect();
        ranking.sort_by_key(|m| (std::cmp::Reverse(stable_hash(&[m, shard])), *m));
        let owner = ranking.into_iter().find(|m| load[m] < capacity).expect("capacity × members ≥ shards");
        *load.get_mut(owner).expect("every member has a load") += 1;
        assignment.insert(shard.clone(), owner);
    }
    assignment
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn stable_hash_is_fixed() {
        // Replicas of different builds must agree: the value is part of the contract.
        // (Computed independently: the first 8 bytes, little-endian, of SHA-256(4u64 LE ‖ "shop").)
        assert_eq!(stable_hash(&["shop"]), 0x0a45_f4cb_da5c_4fcd);
        assert_ne!(stable_hash(&["a", "bc"]), stable_hash(&["ab", "c"]));
    }
}
