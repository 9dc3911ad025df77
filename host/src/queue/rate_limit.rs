//! Rate limiters that decide how long a failed key waits before it is retried.
//!
//! The shapes follow client-go's `default_rate_limiters.go`: a per-key exponential backoff
//! ([`ItemExponential`]), an overall token bucket ([`TokenBucket`]) and the maximum of several
//! limiters ([`MaxOf`]). The default controller limiter is `max(ItemExponential, TokenBucket)`
//! with client-go's numbers, see [`RateLimitConfig`].
//!
//! All clocks are [`tokio::time::Instant`], so tests can drive them with tokio's paused clock.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;
use tokio::time::Instant;

use crate::queue::priority::{DEFAULT_AGED_EVERY, DEFAULT_AGING};
use crate::queue::{Error, PriorityConfig, Result};

/// Decides how long a key waits before it is retried, and keeps the per-key failure history.
pub trait RateLimiter<K>: Send + Sync {
    /// Records one more failure of `key` and returns how long to wait before retrying it.
    fn when(&self, key: &K) -> Duration;
    /// Forgets `key`'s failure history (called after a successful reconcile).
    fn forget(&self, key: &K);
    /// How many failures of `key` are currently remembered.
    fn retries(&self, key: &K) -> u32;
}

/// Per-key exponential backoff: the n-th failure (counting from 0) waits `base × 2^n`,
/// capped at `max`.
pub struct ItemExponential<K> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K> ItemExponential<K> {
    /// A limiter that starts at `base` and doubles up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self { base, max, failures: Mutex::new(HashMap::new()) }
    }
}

impl<K> Default for ItemExponential<K> {
    /// client-go's numbers: 5 ms, doubling up to 1000 s.
    fn default() -> Self {
        Self::new(DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY)
    }
}

impl<K: Clone + Eq + Hash + Send + Sync> RateLimiter<K> for ItemExponential<K> {
    fn when(&self, key: &K) -> Duration {
        let mut failures = self.failures.lock();
        let count = failures.entry(key.clone()).or_insert(0);
        let exp = *count;
        *count = count.saturating_add(1);
        // Any overflow (2^exp beyond u32, or the product beyond Duration) means "past the cap".
        1u32.checked_shl(exp).and_then(|factor| self.base.checked_mul(factor)).map_or(self.max, |delay| delay.min(self.max))
    }

    fn forget(&self, key: &K) {
        self.failures.lock().remove(key);
    }

    fn retries(&self, key: &K) -> u32 {
        self.failures.lock().get(key).copied().unwrap_or(0)
    }
}

/// An overall token bucket shared by all keys: `qps` tokens per second, at most `burst` stored.
///
/// Every [`when`](RateLimiter::when) call reserves one token, possibly one that will only exist
/// in the future, and returns how long until it is available: the semantics of
/// `golang.org/x/time/rate`'s `Reserve().Delay()`, which client-go's bucket limiter uses. So 10 qps
/// with burst 100 hands out 100 zero delays, then 100 ms, 200 ms, 300 ms, …
///
/// Hand-written rather than built on `governor`: governor only answers "allowed now, or not
/// until T" without consuming a future token (no reservation, so N retries in a burst would all be
/// told the same instant), and it reads its own clock, which does not follow tokio's paused clock
/// in tests. The arithmetic is a dozen lines.
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

struct Bucket {
    /// Tokens in the bucket at `last`; negative when tokens have been reserved ahead.
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket refilled at `qps` tokens per second, holding at most `burst` tokens.
    ///
    /// An infinite `qps` never delays; a `qps` that is zero, negative or NaN is treated the same
    /// (no overall limit), since it has no meaningful delay ([`RateLimitConfig::validate`]
    /// rejects it). A `burst` of 0 is treated as 1.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self { qps, burst, state: Mutex::new(Bucket { tokens: burst, last: Instant::now() }) }
    }

    fn unlimited(&self) -> bool {
        !(self.qps > 0.0 && self.qps.is_finite())
    }

    /// Take one token, waiting until it is due (tokens are reserved in call order).
    pub async fn acquire(&self) {
        let wait = RateLimiter::<()>::when(self, &());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

impl Default for TokenBucket {
    /// client-go's numbers: 10 qps, burst 100.
    fn default() -> Self {
        Self::new(DEFAULT_QPS, DEFAULT_BURST)
    }
}

impl<K> RateLimiter<K> for TokenBucket {
    fn when(&self, _key: &K) -> Duration {
        if self.unlimited() {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut bucket = self.state.lock();
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        let tokens = (bucket.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        bucket.tokens = tokens;
        bucket.last = bucket.last.max(now);
        // A wait too long for a `Duration` (a positive but tiny qps such as 1e-300, which
        // validation lets through) is `Duration::MAX`, "never", rather than a panic: found by
        // `fuzz_manifest` with `api: {qps: 1e-300}`.
        if tokens >= 0.0 { Duration::ZERO } else { Duration::try_from_secs_f64(-tokens / self.qps).unwrap_or(Duration::MAX) }
    }

    /// The bucket is shared by all keys, so there is nothing per-key to forget.
    fn forget(&self, _key: &K) {}

    fn retries(&self, _key: &K) -> u32 {
        0
    }
}

/// The maximum of several limiters: every limiter sees every call, the longest delay wins.
pub struct MaxOf<K> {
    limiters: Vec<Arc<dyn RateLimiter<K>>>,
}

impl<K> MaxOf<K> {
    /// Combines `limiters`; with none, every delay is zero.
    pub fn new(limiters: Vec<Arc<dyn RateLimiter<K>>>) -> Self {
        Self { limiters }
    }
}

impl<K> RateLimiter<K> for MaxOf<K> {
    fn when(&self, key: &K) -> Duration {
        // Call every limiter (no short-circuit): each records the failure or reserves its token.
        self.limiters.iter().map(|l| l.when(key)).fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, key: &K) {
        self.limiters.iter().for_each(|l| l.forget(key));
    }

    fn retries(&self, key: &K) -> u32 {
        self.limiters.iter().map(|l| l.retries(key)).max().unwrap_or(0)
    }
}

const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(5);
const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(1000);
const DEFAULT_QPS: f64 = 10.0;
const DEFAULT_BURST: u32 = 100;

/// Configuration of a queue's default limiter, `max(ItemExponential, TokenBucket)`, and of the
/// aging of its `Low` keys ([`PriorityConfig`], the `queue:` of `plugin.yaml` holds both).
///
/// Deserialises from e.g. `{"baseDelay": "5ms", "maxDelay": "1000s", "qps": 10, "burst": 100,
/// "aging": "5s", "agedEvery": 4}`; missing fields take client-go's defaults (and wasmloop's for
/// the last two). Durations use [`crate::duration::parse`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RateLimitConfig {
    /// First per-key retry delay (default 5 ms).
    #[serde(with = "crate::duration::serde")]
    pub base_delay: Duration,
    /// Cap of the per-key retry delay (default 1000 s).
    #[serde(with = "crate::duration::serde")]
    pub max_delay: Duration,
    /// Overall retries per second across all keys (default 10).
    pub qps: f64,
    /// Overall burst of retries (default 100).
    pub burst: u32,
    /// How long a `Low` key is ready before it ages ([`PriorityConfig::aging`], default 5 s).
    #[serde(with = "crate::duration::serde")]
    pub aging: Duration,
    /// Aged `Low` keys get one get in this many ([`PriorityConfig::aged_every`], default 4).
    pub aged_every: u32,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            base_delay: DEFAULT_BASE_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
            aging: DEFAULT_AGING,
            aged_every: DEFAULT_AGED_EVERY,
        }
    }
}

impl RateLimitConfig {
    /// Builds `max(ItemExponential(base_delay, max_delay), TokenBucket(qps, burst))`.
    pub fn build<K: Clone + Eq + Hash + Send + Sync + 'static>(&self) -> Arc<dyn RateLimiter<K>> {
        Arc::new(MaxOf::new(vec![
            Arc::new(ItemExponential::new(self.base_delay, self.max_delay)),
            Arc::new(TokenBucket::new(self.qps, self.burst)),
        ]))
    }

    /// The priority configuration of a queue built from this configuration.
    pub fn priorities(&self) -> PriorityConfig {
        PriorityConfig { aging: self.aging, aged_every: self.aged_every }
    }

    /// Rejects values with no sensible meaning: `qps` must be positive (infinite = no overall
    /// limit), `burst` at least 1, `base_delay` no larger than `max_delay`, and `aged_every`
    /// at least 1.
    pub fn validate(&self) -> Result<()> {
        let problem = if self.qps.is_nan() || self.qps <= 0.0 {
            Some(format!("qps must be positive, got {}", self.qps))
        } else if self.burst == 0 {
            Some("burst must be at least 1".to_owned())
        } else if self.base_delay > self.max_delay {
            Some(format!("baseDelay {:?} exceeds maxDelay {:?}", self.base_delay, self.max_delay))
        } else if self.aged_every == 0 {
            Some("agedEvery must be at least 1".to_owned())
        } else {
            None
        };
        problem.map_or(Ok(()), |p| Err(Error::InvalidRateLimit(p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn exponential_doubles_from_5ms() {
        let limiter = ItemExponential::<&str>::default();
        let delays: Vec<_> = (0..6).map(|_| limiter.when(&"a")).collect();
        assert_eq!(delays, [5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS, 160 * MS]);
        assert_eq!(limiter.retries(&"a"), 6);
        // Other keys have their own history.
        assert_eq!(limiter.when(&"b"), 5 * MS);
    }

    #[test]
    fn exponential_caps_at_1000s_and_never_overflows() {
        let limiter = ItemExponential::<u8>::default();
        // 5 ms × 2^17 = 655.36 s, 5 ms × 2^18 = 1310.72 s > 1000 s.
        let delays: Vec<_> = (0..100).map(|_| limiter.when(&1)).collect();
        assert_eq!(delays[17], Duration::from_millis(655_360));
        assert_eq!(delays[18], Duration::from_secs(1000));
        assert!(delays[18..].iter().all(|d| *d == Duration::from_secs(1000)));
    }

    #[test]
    fn forget_resets_backoff() {
        let limiter = ItemExponential::<u8>::default();
        for _ in 0..4 {
            limiter.when(&1);
        }
        assert_eq!(limiter.when(&1), 80 * MS);
        limiter.forget(&1);
        assert_eq!(limiter.retries(&1), 0);
        assert_eq!(limiter.when(&1), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn token_bucket_burst_then_spacing_then_refill() {
        let bucket = TokenBucket::default();
        let when = |b: &TokenBucket| RateLimiter::<u8>::when(b, &0);
        for i in 0..100 {
            assert_eq!(when(&bucket), Duration::ZERO, "call {i} is within the burst");
        }
        // Reservations: each further call waits 100 ms longer than the previous one.
        assert_eq!(when(&bucket), 100 * MS);
        assert_eq!(when(&bucket), 200 * MS);
        assert_eq!(when(&bucket), 300 * MS);
        // 250 ms later: 2.5 tokens refilled against 3 reserved ahead → the next waits 150 ms.
        tokio::time::advance(250 * MS).await;
        assert_eq!(when(&bucket), 150 * MS);
        // After a long idle period the bucket is full again, but no fuller than the burst.
        tokio::time::advance(Duration::from_secs(3600)).await;
        for _ in 0..100 {
            assert_eq!(when(&bucket), Duration::ZERO);
        }
        assert_eq!(when(&bucket), 100 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn token_bucket_degenerate_settings() {
        let unlimited = TokenBucket::new(f64::INFINITY, 1);
        assert!((0..1000).all(|_| RateLimiter::<u8>::when(&unlimited, &0).is_zero()));
        let burst_zero = TokenBucket::new(1.0, 0);
        assert_eq!(RateLimiter::<u8>::when(&burst_zero, &0), Duration::ZERO);
        assert_eq!(RateLimiter::<u8>::when(&burst_zero, &0), Duration::from_secs(1));
    }

    /// Found by `fuzz_manifest` (`api: {qps: 1e-300}`): the second reservation's wait, 1e300
    /// seconds, panicked converting to a `Duration`; it is `Duration::MAX` now.
    #[tokio::test(start_paused = true)]
    async fn token_bucket_with_a_tiny_qps_waits_forever_without_panicking() {
        let bucket = TokenBucket::new(1e-300, 1);
        assert_eq!(RateLimiter::<u8>::when(&bucket, &0), Duration::ZERO);
        assert_eq!(RateLimiter::<u8>::when(&bucket, &0), Duration::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn max_of_takes_the_longest_delay() {
        let limiter: Arc<dyn RateLimiter<u8>> = RateLimitConfig::default().build();
        // Burst covers the first 100 calls: the per-key backoff dominates.
        assert_eq!(limiter.when(&1), 5 * MS);
        assert_eq!(limiter.when(&1), 10 * MS);
        assert_eq!(limiter.retries(&1), 2);
        // Exhaust the bucket with other keys: now the bucket dominates a fresh key.
        for key in 2..100 {
            limiter.when(&key);
        }
        assert_eq!(limiter.when(&200), 100 * MS);
        // ...and the backoff dominates again once it is longer than the bucket's wait.
        for _ in 0..10 {
            limiter.when(&1);
        }
        assert_eq!(limiter.when(&1), 5 * MS * 4096);
        limiter.forget(&1);
        assert_eq!(limiter.retries(&1), 0);
    }

    #[test]
    fn max_of_nothing_is_zero() {
        let limiter = MaxOf::<u8>::new(Vec::new());
        assert_eq!(limiter.when(&1), Duration::ZERO);
        assert_eq!(limiter.retries(&1), 0);
    }

    #[test]
    fn config_defaults_and_deserialisation() {
        let default = RateLimitConfig::default();
        assert_eq!((default.base_delay, default.max_delay, default.qps, default.burst), (5 * MS, Duration::from_secs(1000), 10.0, 100));
        let parsed: RateLimitConfig = serde_json::from_str(r#"{"baseDelay": "1m30s", "qps": 2.5}"#).expect("valid config");
        assert_eq!(parsed.base_delay, Duration::from_secs(90));
        assert_eq!(parsed.max_delay, Duration::from_secs(1000));
        assert_eq!(parsed.qps, 2.5);
        assert_eq!(parsed.burst, 100);
        assert_eq!(parsed.priorities(), PriorityConfig::default());
        let aging: RateLimitConfig = serde_json::from_str(r#"{"aging": "30s", "agedEvery": 2}"#).expect("valid config");
        assert_eq!(aging.priorities(), PriorityConfig { aging: Duration::from_secs(30), aged_every: 2 });
        let bad = serde_json::from_str::<RateLimitConfig>(r#"{"maxDelay": "10 parsecs"}"#);
        assert!(bad.is_err_and(|e| e.to_string().contains("10 parsecs")));
    }

    #[test]
    fn config_validation() {
        assert!(RateLimitConfig::default().validate().is_ok());
        let with = |f: fn(&mut RateLimitConfig)| {
            let mut c = RateLimitConfig::default();
            f(&mut c);
            c.validate()
        };
        assert!(with(|c| c.qps = f64::INFINITY).is_ok());
        for broken in [
            with(|c| c.qps = 0.0),
            with(|c| c.qps = f64::NAN),
            with(|c| c.burst = 0),
            with(|c| {
                c.base_delay = Duration::from_secs(2000);
            }),
            with(|c| c.aged_every = 0),
        ] {
            assert!(matches!(broken, Err(Error::InvalidRateLimit(_))));
        }
    }
}
