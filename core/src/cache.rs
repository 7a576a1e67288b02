//! Success caching (document 004's `SuccessCacheDurationSeconds`), opt-in: the rule of what
//! is cached and when it expires, as a pure function of synthetic time. The adapters hold the
//! values (the std adapter in a lock-free slot).
//!
//! What is stored: the value of a call whose attempt the classifier called a success, and
//! nothing else (no error, no fallback value, no rejection). When it expires: `ttl` after it
//! was stored; at exactly `ttl` it is expired; a clock read earlier than the store counts as no
//! time passed.

use core::fmt;

use crate::{Duration, Instant, Outcome};

/// When a cached success may be served: a pure function of the instant it was stored and now.
///
/// ```
/// use stormguard_core::{Duration, Instant, Outcome};
/// use stormguard_core::CacheRule;
///
/// let rule = CacheRule::new(Duration::from_secs(5)).unwrap();
/// let stored = Instant::from_secs(100);
/// assert!(rule.stores(Outcome::Success));
/// assert!(!rule.stores(Outcome::Transient));
/// assert!(rule.is_fresh(stored, Instant::from_secs(104)));
/// assert!(!rule.is_fresh(stored, Instant::from_secs(105))); // expired at exactly the ttl
/// assert!(rule.is_fresh(stored, Instant::from_secs(99))); // a clock read earlier: no time passed
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CacheRule {
    ttl: Duration,
}

/// A zero time-to-live: a cache that never serves anything is a mistake, not a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ZeroTtl;

impl fmt::Display for ZeroTtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a success cache's time-to-live must be above zero")
    }
}

impl core::error::Error for ZeroTtl {}

impl CacheRule {
    /// Successes are served for `ttl` after they were stored; `ttl` must be above zero.
    ///
    /// ```
    /// use stormguard_core::Duration;
    /// use stormguard_core::{CacheRule, ZeroTtl};
    /// assert_eq!(CacheRule::new(Duration::ZERO), Err(ZeroTtl));
    /// ```
    pub const fn new(ttl: Duration) -> Result<CacheRule, ZeroTtl> {
        if ttl.is_zero() {
            Err(ZeroTtl)
        } else {
            Ok(CacheRule { ttl })
        }
    }

    /// How long a success is served.
    ///
    /// ```
    /// use stormguard_core::Duration;
    /// let rule = stormguard_core::CacheRule::new(Duration::from_secs(5)).unwrap();
    /// assert_eq!(rule.ttl(), Duration::from_secs(5));
    /// ```
    #[must_use]
    pub const fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether a call whose last attempt counted as `outcome` leaves its value in the cache:
    /// only [`Outcome::Success`].
    ///
    /// ```
    /// use stormguard_core::Outcome;
    /// let rule = stormguard_core::CacheRule::new(stormguard_core::Duration::from_secs(1)).unwrap();
    /// assert!(!rule.stores(Outcome::Throttled { retry_after: None }));
    /// ```
    #[must_use]
    pub const fn stores(&self, outcome: Outcome) -> bool {
        matches!(outcome, Outcome::Success)
    }

    /// When a value stored at `stored` expires (saturating).
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant};
    /// let rule = stormguard_core::CacheRule::new(Duration::from_secs(5)).unwrap();
    /// assert_eq!(rule.expires_at(Instant::from_secs(1)), Instant::from_secs(6));
    /// ```
    #[must_use]
    pub const fn expires_at(&self, stored: Instant) -> Instant {
        stored.saturating_add(self.ttl)
    }

    /// Whether a value stored at `stored` may be served at `now`.
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant};
    /// let rule = stormguard_core::CacheRule::new(Duration::from_millis(1)).unwrap();
    /// assert!(rule.is_fresh(Instant::ZERO, Instant::from_nanos(999_999)));
    /// ```
    #[must_use]
    pub const fn is_fresh(&self, stored: Instant, now: Instant) -> bool {
        now.saturating_duration_since(stored).as_nanos() < self.ttl.as_nanos()
    }
}
