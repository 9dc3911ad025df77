//! How many of a reconcile's creates and deletes go out at once.
//!
//! kube-controller-manager's `slowStartBatch` starts every sync at one call and doubles after
//! each batch that fully succeeds, so a template that the API server refuses (a quota, an
//! admission webhook) costs one failed call instead of hundreds. It starts again at one on the
//! next sync, though, even when the previous hundred syncs all succeeded: a ReplicaSet of 10
//! always needs four sequential rounds (1, 2, 4, 3).
//!
//! [`SlowStart`] keeps the doubling within a reconcile but remembers, per controller, the
//! batch size that calls have proven to succeed: the next reconcile's first batch is that size.
//! Any failed call drops it back to one, so after a failure the next batch is KCM's again. The
//! cost of remembering: when a new object's template is refused, up to one proven batch (at most
//! [`SlowStart::cap`]) of calls fails before the window closes, instead of one.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Default [`SlowStart::cap`]: the largest first batch a proven window allows.
pub const DEFAULT_CAP: usize = 64;

/// The proven batch size of one controller's creates and deletes.
#[derive(Debug)]
pub struct SlowStart {
    proven: AtomicUsize,
    cap: usize,
}

impl SlowStart {
    /// A window that starts at one call and grows to at most `cap` (at least 1).
    pub fn new(cap: usize) -> Self {
        Self { proven: AtomicUsize::new(1), cap: cap.max(1) }
    }

    /// The largest first batch.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The size of a reconcile's first batch.
    pub fn first_batch(&self) -> usize {
        self.proven.load(Ordering::Relaxed)
    }

    /// A batch of `size` calls all succeeded: the next batch may be twice as large.
    pub fn succeeded(&self, size: usize) {
        let next = size.saturating_mul(2).min(self.cap);
        self.proven.fetch_max(next, Ordering::Relaxed);
    }

    /// A call failed: start again at one.
    pub fn failed(&self) {
        self.proven.store(1, Ordering::Relaxed);
    }
}

impl Default for SlowStart {
    fn default() -> Self {
        Self::new(DEFAULT_CAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batches one reconcile of `n` calls sends, as `execute_admitted` does.
    fn batches(s: &SlowStart, n: usize) -> Vec<usize> {
        let (mut sent, mut batch, mut out) = (0, s.first_batch(), Vec::new());
        while sent < n {
            let this = batch.min(n - sent);
            out.push(this);
            s.succeeded(this);
            sent += this;
            batch *= 2;
        }
        out
    }

    #[test]
    fn first_reconcile_is_kcm_then_the_proven_size_carries_over() {
        let s = SlowStart::default();
        assert_eq!(batches(&s, 10), [1, 2, 4, 3]);
        assert_eq!(s.first_batch(), 8);
        assert_eq!(batches(&s, 10), [8, 2]);
        assert_eq!(batches(&s, 10), [10]);
    }

    #[test]
    fn a_failure_starts_again_at_one() {
        let s = SlowStart::default();
        batches(&s, 100);
        assert_eq!(s.first_batch(), DEFAULT_CAP);
        s.failed();
        assert_eq!(batches(&s, 3), [1, 2]);
    }

    #[test]
    fn the_window_never_exceeds_the_cap() {
        let s = SlowStart::new(5);
        batches(&s, 1000);
        assert_eq!(s.first_batch(), 5);
        assert_eq!(SlowStart::new(0).cap(), 1);
    }
}
