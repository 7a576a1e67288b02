//! Success caching (document 004's `SuccessCacheDurationSeconds`), opt-in (DESIGN.md,
//! "Decisions": success caching is off by default).
//!
//! The rule is the core's [`CacheRule`], a small pure piece on synthetic time: what is stored
//! (the value of a call whose attempt the classifier called a success, and nothing else), and
//! when it expires (`ttl` later; a clock read earlier than the store counts as no time passed).
//! [`SuccessCache`] keeps one value under that rule, shared lock-free.

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
pub use stormguard_core::{policy::CacheRule, policy::ZeroTtl};
use stormguard_core::{Duration, Instant, State};

struct Entry<T> {
    stored: Instant,
    value: T,
}

/// One cached success, shared lock-free (an `arc-swap` slot: reading takes no lock and
/// allocates nothing; storing allocates the new entry). Use with
/// [`Policy::call_cached`](crate::Policy::call_cached).
///
/// ```
/// use stormguard_std::{Duration, Instant};
/// use stormguard_std::SuccessCache;
///
/// let cache = SuccessCache::new(Duration::from_secs(5)).unwrap();
/// cache.store(Instant::from_secs(10), "answer");
/// assert_eq!(cache.get(Instant::from_secs(12)), Some("answer"));
/// assert_eq!(cache.get(Instant::from_secs(15)), None);
/// ```
pub struct SuccessCache<T> {
    rule: CacheRule,
    slot: ArcSwapOption<Entry<T>>,
    /// Held by the caller filling an empty entry; the others wait for it. Only a miss takes it.
    #[cfg(feature = "tokio")]
    flight: tokio::sync::Mutex<()>,
}

impl<T> SuccessCache<T> {
    /// An empty cache serving successes for `ttl`.
    ///
    /// ```
    /// use stormguard_std::Duration;
    /// assert!(stormguard_std::SuccessCache::<u8>::new(Duration::ZERO).is_err());
    /// ```
    pub fn new(ttl: Duration) -> Result<SuccessCache<T>, ZeroTtl> {
        Ok(SuccessCache {
            rule: CacheRule::new(ttl)?,
            slot: ArcSwapOption::empty(),
            #[cfg(feature = "tokio")]
            flight: tokio::sync::Mutex::const_new(()),
        })
    }

    /// The rule it follows.
    ///
    /// ```
    /// use stormguard_std::Duration;
    /// let cache = stormguard_std::SuccessCache::<u8>::new(Duration::from_secs(2)).unwrap();
    /// assert_eq!(cache.rule().ttl(), Duration::from_secs(2));
    /// ```
    #[must_use]
    pub const fn rule(&self) -> &CacheRule {
        &self.rule
    }

    /// Keeps `value` as stored at `now`, replacing what was there.
    ///
    /// ```
    /// use stormguard_std::{Duration, Instant};
    /// let cache = stormguard_std::SuccessCache::new(Duration::from_secs(2)).unwrap();
    /// cache.store(Instant::ZERO, 1);
    /// cache.store(Instant::ZERO, 2);
    /// assert_eq!(cache.get(Instant::ZERO), Some(2));
    /// ```
    pub fn store(&self, now: Instant, value: T) {
        self.slot
            .store(Some(Arc::new(Entry { stored: now, value })));
    }

    /// Forgets the cached value.
    ///
    /// ```
    /// use stormguard_std::{Duration, Instant};
    /// let cache = stormguard_std::SuccessCache::new(Duration::from_secs(2)).unwrap();
    /// cache.store(Instant::ZERO, 1);
    /// cache.clear();
    /// assert_eq!(cache.get(Instant::ZERO), None);
    /// ```
    pub fn clear(&self) {
        self.slot.store(None);
    }

    /// Waits for the turn to fill the entry: the callers that found it empty queue here, in
    /// order, and each looks again once it has the turn (the one before may have filled it).
    #[cfg(feature = "tokio")]
    pub(crate) async fn flight(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.flight.lock().await
    }
}

impl<T: Clone> SuccessCache<T> {
    /// The cached value, if it is fresh at `now` (whatever a breaker says: see
    /// [`SuccessCache::serve`]).
    ///
    /// ```
    /// use stormguard_std::{Duration, Instant};
    /// let cache = stormguard_std::SuccessCache::<u8>::new(Duration::from_secs(2)).unwrap();
    /// assert_eq!(cache.get(Instant::ZERO), None);
    /// ```
    #[must_use]
    pub fn get(&self, now: Instant) -> Option<T> {
        self.serve(now, State::Closed)
    }

    /// The cached value, if it may be served at `now` with the breaker in `state`: it is fresh
    /// and the breaker is closed ([`CacheRule::may_serve`]).
    ///
    /// ```
    /// use stormguard_std::{Duration, Instant, State};
    /// let cache = stormguard_std::SuccessCache::new(Duration::from_secs(2)).unwrap();
    /// cache.store(Instant::ZERO, 7);
    /// assert_eq!(cache.serve(Instant::ZERO, State::Closed), Some(7));
    /// assert_eq!(cache.serve(Instant::ZERO, State::HalfOpen), None);
    /// ```
    #[must_use]
    pub fn serve(&self, now: Instant, state: State) -> Option<T> {
        let guard = self.slot.load();
        let entry = guard.as_ref()?;
        self.rule
            .may_serve(entry.stored, now, state)
            .then(|| entry.value.clone())
    }
}

impl<T> fmt::Debug for SuccessCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SuccessCache")
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::Outcome;

    fn rule(ms: u64) -> CacheRule {
        CacheRule::new(Duration::from_millis(ms)).unwrap()
    }

    #[test]
    fn only_successes_are_stored() {
        let r = rule(10);
        assert!(r.stores(Outcome::Success));
        for o in [
            Outcome::Transient,
            Outcome::TimedOut,
            Outcome::Permanent,
            Outcome::Cancelled,
            Outcome::Throttled {
                retry_after: Some(Duration::from_secs(1)),
            },
        ] {
            assert!(!r.stores(o), "{o:?}");
        }
    }

    #[test]
    fn a_success_is_fresh_until_exactly_its_ttl() {
        let r = rule(5_000);
        let stored = Instant::from_millis(1_000);
        assert!(r.is_fresh(stored, stored));
        assert!(r.is_fresh(stored, Instant::from_millis(5_999)));
        assert!(!r.is_fresh(stored, Instant::from_millis(6_000)));
        assert!(!r.is_fresh(stored, Instant::MAX));
        assert_eq!(r.expires_at(stored), Instant::from_millis(6_000));
    }

    #[test]
    fn a_clock_that_steps_back_means_no_time_passed() {
        let r = rule(1);
        assert!(r.is_fresh(Instant::from_secs(9), Instant::from_secs(3)));
    }

    #[test]
    fn expiry_saturates_at_the_end_of_time() {
        let r = CacheRule::new(Duration::MAX).unwrap();
        assert_eq!(r.expires_at(Instant::from_secs(1)), Instant::MAX);
        assert!(r.is_fresh(Instant::from_secs(1), Instant::MAX));
    }

    #[test]
    fn the_cache_serves_the_latest_store_until_it_expires() {
        let cache = SuccessCache::new(Duration::from_secs(5)).unwrap();
        assert_eq!(cache.get(Instant::ZERO), None);
        cache.store(Instant::from_secs(1), 1);
        cache.store(Instant::from_secs(3), 2);
        assert_eq!(cache.get(Instant::from_secs(7)), Some(2));
        assert_eq!(cache.get(Instant::from_secs(8)), None);
    }
}
