//! The tokio clock.

use stormguard_core::Instant;

use crate::Clock;

/// tokio's clock ([`tokio::time::Instant`]), mapped onto the core's [`Instant`] as the time since
/// an epoch captured at construction.
///
/// Because it reads `tokio::time::Instant::now()`, a test that pauses tokio's time
/// (`#[tokio::test(start_paused = true)]`, then `tokio::time::advance`) moves this clock too, and
/// with it everything the core decides. Outside a paused runtime it reads the system's monotonic
/// clock, like [`MonotonicClock`](crate::clock::MonotonicClock). Readings saturate at [`Instant::MAX`].
///
/// ```
/// use stormguard_std::{Duration, Instant};
/// use stormguard_std::Clock;
/// use stormguard_std::clock::TokioClock;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = TokioClock::new();
/// tokio::time::advance(std::time::Duration::from_secs(30)).await;
/// assert_eq!(clock.now(), Instant::ZERO + Duration::from_secs(30));
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    epoch: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose epoch ([`Instant::ZERO`]) is tokio's now.
    #[must_use]
    pub fn new() -> Self {
        TokioClock::with_epoch(tokio::time::Instant::now())
    }

    /// A clock whose epoch ([`Instant::ZERO`]) is `epoch`.
    #[must_use]
    pub const fn with_epoch(epoch: tokio::time::Instant) -> Self {
        TokioClock { epoch }
    }

    /// The process-wide tokio clock: its epoch is [`process_epoch`](crate::clock::process_epoch)
    /// (an hour before the first reading), shared with
    /// [`MonotonicClock::global`](crate::clock::MonotonicClock::global), the breaker and budget handles
    /// and the health registry. A [`DefaultClock`](crate::DefaultClock) made in a runtime whose
    /// time is paused reads this clock.
    ///
    /// Under paused time it follows the runtime's clock; a paused runtime starts at the real
    /// time it was created, so it reads after the epoch.
    ///
    /// ```
    /// use stormguard_std::Clock;
    /// use stormguard_std::clock::TokioClock;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let clock = TokioClock::global();
    /// let before = clock.now();
    /// tokio::time::advance(std::time::Duration::from_millis(100)).await;
    /// assert_eq!((clock.now() - before).as_millis(), 100);
    /// # }
    /// ```
    #[must_use]
    pub fn global() -> Self {
        TokioClock::with_epoch(tokio::time::Instant::from_std(crate::clock::process_epoch()))
    }

    /// The tokio instant this clock counts from.
    #[must_use]
    pub const fn epoch(&self) -> tokio::time::Instant {
        self.epoch
    }

    /// `at` in the core's terms: time since the epoch, [`Instant::ZERO`] for anything earlier.
    #[must_use]
    pub fn to_core(&self, at: tokio::time::Instant) -> Instant {
        crate::clock::instant_after(at.saturating_duration_since(self.epoch))
    }

    /// A core instant as a tokio instant, for `tokio::time::sleep_until` a deadline the core
    /// computed. `None` if the platform cannot represent it (only for instants centuries away).
    #[must_use]
    pub fn to_tokio(&self, at: Instant) -> Option<tokio::time::Instant> {
        self.epoch.checked_add(at.since_epoch().into())
    }
}

impl Default for TokioClock {
    /// Same as [`TokioClock::new`]: the epoch is tokio's now.
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now(&self) -> Instant {
        self.to_core(tokio::time::Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_follows_paused_time() {
        let clock = TokioClock::new();
        assert_eq!(clock.now(), Instant::ZERO);
        tokio::time::advance(std::time::Duration::from_millis(1_500)).await;
        assert_eq!(clock.now(), Instant::from_millis(1_500));
        tokio::time::advance(std::time::Duration::from_secs(3600)).await;
        assert_eq!(
            clock.now() - Instant::from_millis(1_500),
            Duration::from_secs(3600)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_sleep_until_a_core_deadline_ends_at_that_deadline() {
        let clock = TokioClock::new();
        let deadline = clock.now() + Duration::from_millis(100);
        tokio::time::sleep_until(clock.to_tokio(deadline).unwrap()).await;
        assert_eq!(clock.now(), deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_reads_instants_before_its_epoch_as_zero() {
        let earlier = tokio::time::Instant::now();
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let clock = TokioClock::default();
        assert_eq!(clock.to_core(earlier), Instant::ZERO);
        assert_eq!(clock.epoch() - earlier, std::time::Duration::from_secs(1));
    }

    #[test]
    fn the_tokio_clock_runs_outside_a_runtime() {
        let clock = TokioClock::new();
        let a = clock.now();
        assert!(clock.now() >= a);
    }
}
