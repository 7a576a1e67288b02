//! Success caching (document 004's `SuccessCacheDurationSeconds`), opt-in: the rule of what
//! is cached and when it expires, as a pure function of synthetic time. The adapters hold the
//! values (the std adapter in a lock-free slot).
//!
//! What is stored: the value of a call whose attempt the classifier called a success, and
//! nothing else (no error, no fallback value, no rejection). When it is served: only while the
//! breaker is closed, and until it expires, `ttl` after it was stored (at exactly `ttl` it is
//! expired; a clock read earlier than the store counts as no time passed). What clears it: a
//! failure of the dependency (document 004's breaker does the same). Concurrent callers of an
//! empty entry share one call: that is the adapter's to arrange, since it holds the value.

use core::fmt;

use crate::call::Finished;
use crate::outcome::Outcome;
use crate::state::State;
use crate::time::{Duration, Instant};

/// When a cached success may be served: a pure function of the instant it was stored and now.
///
/// ```
/// use stormguard_core::{Duration, Instant, Outcome};
/// use stormguard_core::policy::CacheRule;
///
/// let rule = CacheRule::new(Duration::from_secs(5)).unwrap();
/// let stored = Instant::from_secs(100);
/// assert!(rule.stores(Outcome::Success));
/// assert!(!rule.stores(Outcome::Transient));
/// assert!(rule.is_fresh(stored, Instant::from_secs(104)));
/// assert!(!rule.is_fresh(stored, Instant::from_secs(105))); // expired at exactly the ttl
/// assert!(rule.is_fresh(stored, Instant::from_secs(99))); // a clock read earlier: no time passed
/// // Served only while the breaker is closed; a failure clears it.
/// assert!(!rule.may_serve(stored, Instant::from_secs(101), stormguard_core::State::Open));
/// assert!(rule.clears(stormguard_core::Finished::Failed(Outcome::TimedOut)));
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
    /// use stormguard_core::{policy::CacheRule, policy::ZeroTtl};
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
    /// let rule = stormguard_core::policy::CacheRule::new(Duration::from_secs(5)).unwrap();
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
    /// let rule = stormguard_core::policy::CacheRule::new(stormguard_core::Duration::from_secs(1)).unwrap();
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
    /// let rule = stormguard_core::policy::CacheRule::new(Duration::from_secs(5)).unwrap();
    /// assert_eq!(rule.expires_at(Instant::from_secs(1)), Instant::from_secs(6));
    /// ```
    #[must_use]
    pub const fn expires_at(&self, stored: Instant) -> Instant {
        stored.saturating_add(self.ttl)
    }

    /// Whether a cached value may be served while the breaker is in `state`: only while it is
    /// closed. A breaker that is not closed is finding out whether the dependency works; a
    /// value from before that proves nothing.
    ///
    /// ```
    /// use stormguard_core::{policy::CacheRule, Duration, State};
    /// let rule = CacheRule::new(Duration::from_secs(5)).unwrap();
    /// assert!(rule.serves_in(State::Closed));
    /// assert!(!rule.serves_in(State::HalfOpen));
    /// ```
    #[must_use]
    pub const fn serves_in(&self, state: State) -> bool {
        matches!(state, State::Closed)
    }

    /// Whether a value stored at `stored` may be served at `now`, the breaker being in
    /// `state`: it is fresh, and the breaker is closed.
    ///
    /// ```
    /// use stormguard_core::{policy::CacheRule, Duration, Instant, State};
    /// let rule = CacheRule::new(Duration::from_secs(5)).unwrap();
    /// let stored = Instant::from_secs(1);
    /// assert!(rule.may_serve(stored, Instant::from_secs(2), State::Closed));
    /// assert!(!rule.may_serve(stored, Instant::from_secs(2), State::Open));
    /// assert!(!rule.may_serve(stored, Instant::from_secs(6), State::Closed));
    /// ```
    #[must_use]
    pub const fn may_serve(&self, stored: Instant, now: Instant, state: State) -> bool {
        self.serves_in(state) && self.is_fresh(stored, now)
    }

    /// Whether a call that `finished` so clears the cached value: a failure of the dependency
    /// does (its last attempt failed, [`Outcome::is_failure`], and the call ended on it, or on
    /// the deadline after it). A refusal, a cancellation, a throttled or permanent answer, or a
    /// deadline with no failure behind it is no evidence against the value, and leaves it.
    ///
    /// ```
    /// use stormguard_core::{policy::CacheRule, Duration, Finished, Outcome};
    /// let rule = CacheRule::new(Duration::from_secs(5)).unwrap();
    /// assert!(rule.clears(Finished::Failed(Outcome::Transient)));
    /// assert!(!rule.clears(Finished::Cancelled));
    /// ```
    #[must_use]
    pub const fn clears(&self, finished: Finished) -> bool {
        match finished {
            Finished::Failed(outcome)
            | Finished::DeadlineExceeded {
                last: Some(outcome),
            }
            | Finished::Drained {
                last: Some(outcome),
            } => outcome.is_failure(),
            _ => false,
        }
    }

    /// Whether a value stored at `stored` may be served at `now`.
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant};
    /// let rule = stormguard_core::policy::CacheRule::new(Duration::from_millis(1)).unwrap();
    /// assert!(rule.is_fresh(Instant::ZERO, Instant::from_nanos(999_999)));
    /// ```
    #[must_use]
    pub const fn is_fresh(&self, stored: Instant, now: Instant) -> bool {
        now.saturating_duration_since(stored).as_nanos() < self.ttl.as_nanos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Rejection;
    use crate::error::RefusalReason;

    fn rule() -> CacheRule {
        match CacheRule::new(Duration::from_secs(5)) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_cached_success_is_served_only_while_the_breaker_is_closed() {
        let r = rule();
        let stored = Instant::from_secs(10);
        let now = Instant::from_secs(12);
        assert!(r.may_serve(stored, now, State::Closed));
        for state in [
            State::Open,
            State::HalfOpen,
            State::Recovering,
            State::Isolated,
        ] {
            assert!(!r.may_serve(stored, now, state), "{state:?}");
            assert!(!r.serves_in(state));
        }
        // Closed, but expired: not served either.
        assert!(!r.may_serve(stored, Instant::from_secs(15), State::Closed));
    }

    #[test]
    fn a_failure_clears_the_cache_and_nothing_else_does() {
        let r = rule();
        assert!(r.clears(Finished::Failed(Outcome::Transient)));
        assert!(r.clears(Finished::Failed(Outcome::TimedOut)));
        assert!(r.clears(Finished::DeadlineExceeded {
            last: Some(Outcome::Transient)
        }));
        let rejection = Rejection {
            reason: RefusalReason::BreakerOpen,
            retry_after: Duration::from_secs(1),
            pause: Duration::from_millis(100),
            last: None,
            attempts: 0,
        };
        for kept in [
            Finished::Succeeded,
            Finished::Cancelled,
            Finished::Rejected(rejection),
            Finished::Failed(Outcome::Permanent),
            Finished::Failed(Outcome::Throttled { retry_after: None }),
            Finished::DeadlineExceeded { last: None },
        ] {
            assert!(!r.clears(kept), "{kept:?}");
        }
    }
}
