//! [`Claims`]: what each plugin ConfigMap holds of the host's shared resources — its plugin's
//! name (one holder per name) and its plugin memory (within the host's budget) — and who waits
//! for a name to be free.

use std::collections::{BTreeSet, HashMap};

use parking_lot::Mutex;

use super::waiting::{NotLoaded, WaitReason};
use crate::kinds::ObjectKey;
use crate::plugin::ByteSize;

/// What a loaded (or loading) plugin holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Claim {
    /// The plugin's name.
    pub(super) name: String,
    /// Its memory: `limits.memory × concurrency`.
    pub(super) memory: u64,
}

/// The claims of every plugin ConfigMap.
#[derive(Default)]
pub(super) struct Claims {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    held: HashMap<ObjectKey, Claim>,
    /// ConfigMaps waiting because another holds their plugin name, by that name.
    waiting_for_name: HashMap<String, BTreeSet<ObjectKey>>,
}

impl Claims {
    /// Reserve `claim` for `key` within `budget`; what `key` held before. A name another
    /// ConfigMap holds is a wait (`key` is noted as waiting for it); memory over the budget is a
    /// refusal.
    pub(super) fn claim(&self, key: &ObjectKey, claim: Claim, budget: Option<ByteSize>) -> Result<Option<Claim>, NotLoaded> {
        let mut inner = self.inner.lock();
        if let Some((other, _)) = inner.held.iter().find(|(k, c)| *k != key && c.name == claim.name) {
            let holder = other.to_string();
            inner.waiting_for_name.entry(claim.name.clone()).or_default().insert(key.clone());
            return Err(WaitReason::NameTaken { name: claim.name, holder }.into());
        }
        if let Some(budget) = budget {
            let others: u64 = inner.held.iter().filter(|(k, _)| *k != key).map(|(_, c)| c.memory).sum();
            if others + claim.memory > budget.bytes() {
                return Err(format!(
                    "the plugin needs {} of plugin memory (limits.memory × concurrency), but the host's budget is {budget} \
                     and {} of it is held by the other plugins; lower its limits or concurrency, or raise --plugin-memory-budget",
                    ByteSize(claim.memory),
                    ByteSize(others)
                )
                .into());
            }
        }
        Ok(inner.held.insert(key.clone(), claim))
    }

    /// Put back what `key` held before a failed load (`None`: nothing).
    pub(super) fn restore(&self, key: &ObjectKey, previous: Option<Claim>) {
        let mut inner = self.inner.lock();
        match previous {
            Some(p) => inner.held.insert(key.clone(), p),
            None => inner.held.remove(key),
        };
    }

    /// `key` is gone: it holds nothing and waits for no name.
    /// The name `key` holds, if any.
    pub(super) fn name_of(&self, key: &ObjectKey) -> Option<String> {
        self.inner.lock().held.get(key).map(|c| c.name.clone())
    }

    pub(super) fn release(&self, key: &ObjectKey) {
        let mut inner = self.inner.lock();
        inner.held.remove(key);
        for waiting in inner.waiting_for_name.values_mut() {
            waiting.remove(key);
        }
    }

    /// `name` is free: the ConfigMaps that waited for it, to be tried again.
    pub(super) fn name_released(&self, name: &str) -> BTreeSet<ObjectKey> {
        self.inner.lock().waiting_for_name.remove(name).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::KindRef;

    fn cm(name: &str) -> ObjectKey {
        KindRef::new("v1", "ConfigMap").key(Some("wasmloop"), name)
    }

    fn claim(name: &str, mib: u64) -> Claim {
        Claim { name: name.into(), memory: mib << 20 }
    }

    #[test]
    fn a_name_has_one_holder_and_its_waiters_are_told_when_it_is_free() {
        let claims = Claims::default();
        assert_eq!(claims.claim(&cm("a"), claim("podset", 32), None).unwrap(), None);
        let err = claims.claim(&cm("b"), claim("podset", 32), None).unwrap_err();
        assert!(matches!(err, NotLoaded::Waiting(WaitReason::NameTaken { ref holder, .. }) if holder.ends_with("/a")), "{err:?}");
        // The holder may claim again (a new version), getting its previous claim back.
        assert_eq!(claims.claim(&cm("a"), claim("podset", 64), None).unwrap(), Some(claim("podset", 32)));
        claims.release(&cm("a"));
        assert_eq!(claims.name_released("podset"), BTreeSet::from([cm("b")]));
        assert!(claims.name_released("podset").is_empty(), "waiters are handed over once");
        assert!(claims.claim(&cm("b"), claim("podset", 32), None).is_ok());
    }

    #[test]
    fn memory_stays_within_the_budget_and_a_failed_load_restores_the_previous_claim() {
        let claims = Claims::default();
        let budget = Some(ByteSize::mib(100));
        claims.claim(&cm("a"), claim("a", 60), budget).unwrap();
        let err = claims.claim(&cm("b"), claim("b", 50), budget).unwrap_err();
        assert!(
            matches!(&err, NotLoaded::Refused(m) if m.contains("60.0 MiB of it is held") || m.contains("held by the other plugins")),
            "{err:?}"
        );
        // A's new version needs more, fails later: its old claim comes back.
        let previous = claims.claim(&cm("a"), claim("a", 90), budget).unwrap();
        claims.restore(&cm("a"), previous);
        assert!(claims.claim(&cm("b"), claim("b", 40), budget).is_ok(), "a holds 60 again, so 40 fits");
        claims.restore(&cm("c"), None);
        claims.release(&cm("b"));
        assert!(claims.claim(&cm("c"), claim("c", 40), budget).is_ok());
    }
}
