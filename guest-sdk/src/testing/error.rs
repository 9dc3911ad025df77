//! Why [`FakeCache::converge`](super::FakeCache::converge) (and `run_until`) stopped short.

/// A key that did not settle: the reconciler failed, an action of its outcome failed, or it kept
/// writing for every round allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvergeError {
    /// The reconciler returned an error (its actions were executed first, as the host does).
    #[error("reconcile of {key} failed: {error}")]
    Failed {
        /// The key reconciled (as the host prints keys).
        key: String,
        /// The reconciler's error, as it displays.
        error: String,
    },
    /// An action of the outcome failed ([`FakeCache::fail_when`](super::FakeCache::fail_when)).
    #[error("an action of the reconcile of {key} failed: {why} (the host retries it with backoff)")]
    ActionFailed {
        /// The key reconciled (as the host prints keys).
        key: String,
        /// The failing action and why.
        why: String,
    },
    /// Still writing after the rounds allowed.
    #[error("{key} did not converge in {rounds} reconciles; last outcome: {last}")]
    NotConverged {
        /// The key reconciled (as the host prints keys).
        key: String,
        /// The reconciles allowed.
        rounds: usize,
        /// The last outcome, debug-printed.
        last: String,
    },
}

impl ConvergeError {
    /// Whether the message contains `needle` (`err.contains("permanent")` in a test).
    pub fn contains(&self, needle: &str) -> bool {
        self.to_string().contains(needle)
    }
}
