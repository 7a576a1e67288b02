//! Re-establishing a subscription forever, with capped backoff, starting over after a success.
//! See [`SubscriptionRetry`].

use core::fmt;

use crate::call::backoff::Backoff;
use crate::outcome::Outcome;
use crate::rng::JitterRng;
use crate::time::{Duration, Instant};

/// Where a subscription stands (Whizbang's statuses, minus "failed": this helper never gives
/// up).
///
/// ```
/// use stormguard_core::{Instant, policy::SubscriptionRetry, policy::SubscriptionStatus};
/// let mut retry = SubscriptionRetry::new();
/// assert_eq!(retry.status(), SubscriptionStatus::Pending);
/// retry.on_connected(Instant::from_secs(3));
/// assert_eq!(retry.status(), SubscriptionStatus::Healthy { since: Instant::from_secs(3) });
/// assert_eq!(retry.status().as_str(), "healthy");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum SubscriptionStatus {
    /// Nothing has been tried yet (or the helper was [reset](SubscriptionRetry::reset)): the
    /// first attempt is due at once.
    Pending,
    /// Not established: the last attempt failed, or an established subscription was lost (its
    /// reconnection is then due at once, `retry_at` being the instant it was lost). The next
    /// attempt is due at `retry_at`.
    Recovering {
        /// When to try again.
        retry_at: Instant,
    },
    /// Established since `since`; nothing to do until it is lost.
    Healthy {
        /// When it was established.
        since: Instant,
    },
}

impl SubscriptionStatus {
    /// A stable, lower-case name for logs, metrics and health endpoints.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            SubscriptionStatus::Pending => "pending",
            SubscriptionStatus::Recovering { .. } => "recovering",
            SubscriptionStatus::Healthy { .. } => "healthy",
        }
    }
}

impl fmt::Display for SubscriptionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The retry schedule of one subscription: capped exponential backoff, forever, starting over
/// after every success.
///
/// This is Whizbang's subscription retry, sans-IO: its shipped defaults are a first retry after
/// 1 s, doubling, capped at 120 s, no jitter, and no limit on attempts — a subscription is
/// infrastructure, so giving up is never the answer ([`Backoff::subscription`]). Every retry
/// loop starts from the first delay again, so once a subscription has been established, losing it
/// starts the schedule over.
///
/// One rule beyond Whizbang's: a subscription lost within [`stable_after`] of being established
/// (by default the schedule's first delay, 1 s) was not really established. Its loss continues
/// the schedule where it stood, as a failure, instead of reconnecting at once: a broker that
/// accepts and drops every connection would otherwise be reconnected to in a tight loop.
///
/// [`stable_after`]: SubscriptionRetry::with_stable_after
///
/// The helper reads no clock and sleeps nowhere: the adapter tries when
/// [`next_attempt_at`](SubscriptionRetry::next_attempt_at) says, and reports what happened.
///
/// ```
/// use stormguard_core::{Duration, Instant, policy::SubscriptionRetry, policy::SubscriptionStatus};
///
/// let mut retry = SubscriptionRetry::new();
/// let mut now = Instant::from_secs(100);
/// assert!(retry.next_attempt_at().is_some_and(|at| at <= now)); // the first attempt runs at once
///
/// let mut waits = Vec::new();
/// for _ in 0..9 {
///     // the attempt failed: when to try again?
///     let at = retry.on_failure(now);
///     waits.push((at - now).as_secs());
///     now = at;
/// }
/// assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 120, 120]);
/// assert_eq!(retry.failures(), 9);
///
/// retry.on_connected(now);           // established: the schedule starts over
/// assert_eq!(retry.next_attempt_at(), None);
/// let lost = now + Duration::from_secs(3600);
/// assert_eq!(retry.on_disconnected(lost), lost);                     // reconnect at once,
/// assert_eq!(retry.status(), SubscriptionStatus::Recovering { retry_at: lost });
/// assert_eq!(retry.on_failure(lost), lost + Duration::from_secs(1)); // then from the start
/// ```
///
/// Call order: when [`next_attempt_at`](SubscriptionRetry::next_attempt_at) is `Some(at)` and
/// `at` has come, try to establish the subscription, then report
/// [`on_connected`](SubscriptionRetry::on_connected) or
/// [`on_failure`](SubscriptionRetry::on_failure) (which returns when to try next). When an
/// established subscription is lost, report [`on_disconnected`](SubscriptionRetry::on_disconnected):
/// the next attempt is due at once, and its failure waits the first delay again.
///
/// The `n`th consecutive failure waits [`Backoff::delay`]`(n)`: with [`Backoff::subscription`],
/// 1, 2, 4, 8, 16, 32, 64, then 120 s for ever. Jitter, if the backoff has any, is drawn from a
/// [`JitterRng`](crate::rng::JitterRng) seeded by [`with_seed`](SubscriptionRetry::with_seed), so the same seed gives
/// the same schedule. A clock that steps backwards is harmless: times are computed from the
/// `now` given, saturating.
///
/// ```
/// use stormguard_core::{Backoff, Instant, Jitter, policy::SubscriptionRetry};
///
/// // A fleet that lost its broker at the same moment should not come back in step.
/// let jittered = Backoff::subscription().to_builder().jitter(Jitter::Equal).build()?;
/// let mut retry = SubscriptionRetry::with_backoff(jittered).with_seed(0xC0FFEE);
/// let now = Instant::from_secs(10);
/// let at = retry.on_failure(now);
/// assert!(at - now >= stormguard_core::Duration::from_millis(500));
/// assert!(at - now <= stormguard_core::Duration::from_secs(1));
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionRetry {
    backoff: Backoff,
    rng: JitterRng,
    /// How long a subscription must last to count as established.
    stable_after: Duration,
    /// The failures before the current connection: where a connection lost too soon resumes.
    before_connected: u32,
    failures: u32,
    attempts: u64,
    last_delay: Option<Duration>,
    status: SubscriptionStatus,
}

impl SubscriptionRetry {
    /// Whizbang's shipped schedule, [`Backoff::subscription`]: 1 s doubling to 120 s, no jitter.
    #[must_use]
    pub const fn new() -> SubscriptionRetry {
        SubscriptionRetry::with_backoff(Backoff::subscription())
    }

    /// The schedule of `backoff` (its base, factor, cap and jitter; its throttled base is used
    /// for none of the failures reported here).
    #[must_use]
    pub const fn with_backoff(backoff: Backoff) -> SubscriptionRetry {
        SubscriptionRetry {
            stable_after: backoff.base(),
            backoff,
            rng: JitterRng::with_seed(0),
            before_connected: 0,
            failures: 0,
            attempts: 0,
            last_delay: None,
            status: SubscriptionStatus::Pending,
        }
    }

    /// Seeds the jitter (give each process its own, so a fleet does not reconnect in step).
    /// Without jitter in the backoff, the seed changes nothing.
    #[must_use]
    pub const fn with_seed(mut self, seed: u64) -> SubscriptionRetry {
        self.rng = JitterRng::with_seed(seed);
        self
    }

    /// How long a subscription must stay up before its loss starts the schedule over (default:
    /// the backoff's base, 1 s for [`Backoff::subscription`]). A loss sooner than that continues
    /// the schedule as a failure. `Duration::ZERO` restores Whizbang's rule: any connection,
    /// however brief, starts the schedule over.
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant, policy::SubscriptionRetry};
    ///
    /// let mut retry = SubscriptionRetry::new(); // stable after 1 s
    /// let mut now = Instant::from_secs(10);
    /// for _ in 0..3 {
    ///     now = retry.on_failure(now);
    /// }
    /// retry.on_connected(now);
    /// // Dropped at once: the fourth delay of the schedule, not an immediate reconnect.
    /// let dropped = now + Duration::from_millis(10);
    /// assert_eq!(retry.on_disconnected(dropped), dropped + Duration::from_secs(8));
    /// ```
    #[must_use]
    pub const fn with_stable_after(mut self, stable_after: Duration) -> SubscriptionRetry {
        self.stable_after = stable_after;
        self
    }

    /// How long a subscription must stay up to count as established.
    #[must_use]
    pub const fn stable_after(&self) -> Duration {
        self.stable_after
    }

    /// The backoff the schedule follows.
    #[must_use]
    pub const fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// Where the subscription stands.
    #[must_use]
    pub const fn status(&self) -> SubscriptionStatus {
        self.status
    }

    /// When to try next: `None` while established; [`Instant::ZERO`] (at once, whatever the
    /// clock) before the first attempt; the instant an attempt is due otherwise (the instant
    /// it was lost, for a subscription lost after it was established).
    #[must_use]
    pub const fn next_attempt_at(&self) -> Option<Instant> {
        match self.status {
            SubscriptionStatus::Pending => Some(Instant::ZERO),
            SubscriptionStatus::Recovering { retry_at } => Some(retry_at),
            SubscriptionStatus::Healthy { .. } => None,
        }
    }

    /// How long from `now` until the next attempt is due (zero when it is due already); `None`
    /// while established. What an adapter sleeps.
    #[must_use]
    pub fn poll_wait(&self, now: Instant) -> Option<Duration> {
        self.next_attempt_at()
            .map(|at| at.saturating_duration_since(now))
    }

    /// Consecutive failed attempts since the subscription was last established (0 while it is
    /// established, and after it is lost until an attempt fails).
    #[must_use]
    pub const fn failures(&self) -> u32 {
        self.failures
    }

    /// The number of the next attempt in the current schedule (1 for the first): failures so
    /// far, plus one. Whizbang logs the first few failures loudly and later ones less often, by
    /// this number.
    #[must_use]
    pub const fn attempt(&self) -> u32 {
        self.failures.saturating_add(1)
    }

    /// Attempts reported over the helper's life (failures and successes), for metrics.
    #[must_use]
    pub const fn total_attempts(&self) -> u64 {
        self.attempts
    }

    /// The wait chosen after the last failure, if one has failed since the last success.
    #[must_use]
    pub const fn last_delay(&self) -> Option<Duration> {
        self.last_delay
    }

    /// An attempt failed at `now`: returns when to try again (`now` plus the next delay of the
    /// schedule). A failure reported while established counts as the first failure of a new
    /// schedule.
    pub fn on_failure(&mut self, now: Instant) -> Instant {
        self.failures = self.failures.saturating_add(1);
        self.attempts = self.attempts.saturating_add(1);
        let delay = self
            .backoff
            .delay(self.failures, Outcome::Transient, &mut self.rng);
        self.last_delay = Some(delay);
        let retry_at = now.saturating_add(delay);
        self.status = SubscriptionStatus::Recovering { retry_at };
        retry_at
    }

    /// The subscription was established at `now`: the schedule starts over (unless it is lost
    /// within [`stable_after`](SubscriptionRetry::stable_after)).
    pub fn on_connected(&mut self, now: Instant) {
        self.attempts = self.attempts.saturating_add(1);
        self.before_connected = self.failures;
        self.failures = 0;
        self.last_delay = None;
        self.status = SubscriptionStatus::Healthy { since: now };
    }

    /// The established subscription was lost at `now`: returns when to try again, which is at
    /// once (`now`), and the status reads [`Recovering`](SubscriptionStatus::Recovering) (not
    /// pending: it is not established, and something was tried); a failure of that attempt
    /// then waits the schedule's first delay. Lost
    /// within [`stable_after`](SubscriptionRetry::stable_after) of being established, it counts
    /// as a failure after the ones before the connection, and waits that failure's delay.
    /// Reported while not established, it changes nothing and returns the attempt already due.
    pub fn on_disconnected(&mut self, now: Instant) -> Instant {
        match self.status {
            SubscriptionStatus::Healthy { since }
                if now.saturating_duration_since(since) < self.stable_after =>
            {
                self.failures = self.before_connected;
                self.before_connected = 0;
                self.attempts = self.attempts.saturating_sub(1);
                self.on_failure(now)
            }
            SubscriptionStatus::Healthy { .. } => {
                // Lost: recovering, with the reconnection due at once.
                self.before_connected = 0;
                self.status = SubscriptionStatus::Recovering { retry_at: now };
                now
            }
            SubscriptionStatus::Pending => now,
            SubscriptionStatus::Recovering { retry_at } => retry_at,
        }
    }

    /// Back to the start: nothing tried, nothing failed (the jitter's random sequence goes on).
    pub fn reset(&mut self) {
        self.failures = 0;
        self.before_connected = 0;
        self.last_delay = None;
        self.status = SubscriptionStatus::Pending;
    }
}

impl Default for SubscriptionRetry {
    /// [`SubscriptionRetry::new`].
    fn default() -> Self {
        SubscriptionRetry::new()
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for SubscriptionRetry {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "SubscriptionRetry {{ status: {}, failures: {=u32} }}",
            self.status,
            self.failures
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_subscription_reads_recovering_not_pending() {
        let mut r = SubscriptionRetry::new();
        let t = Instant::from_secs(5);
        r.on_connected(t);
        let lost = t + Duration::from_secs(60);
        assert_eq!(r.on_disconnected(lost), lost);
        assert_eq!(
            r.status(),
            SubscriptionStatus::Recovering { retry_at: lost }
        );
        assert_eq!(r.status().as_str(), "recovering");
        assert_eq!(r.next_attempt_at(), Some(lost));
        assert_eq!(r.poll_wait(lost), Some(Duration::ZERO));
        // Reported again while recovering: nothing changes.
        assert_eq!(r.on_disconnected(lost + Duration::from_secs(1)), lost);
    }

    #[test]
    fn a_failure_while_established_starts_a_new_schedule() {
        let mut r = SubscriptionRetry::new();
        let t = Instant::from_secs(5);
        for _ in 0..4 {
            let _ = r.on_failure(t);
        }
        r.on_connected(t);
        assert_eq!(r.on_failure(t), t + Duration::from_secs(1));
    }
}
