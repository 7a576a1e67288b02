use std::sync::Arc;

use stormguard_core::{
    breaker::BreakerSettingsBuilder, call::CallSettingsBuilder, call::SharedHedgeShare,
    limits::BudgetSettingsBuilder, limits::QuotaSettings, limits::SharedQuota, Backoff, Bound,
    BreakerSettings, BudgetSettings, CallSettings, Duration, Field, Multiple, Name, Ratio,
    SettingsError,
};

use super::{AdaptiveLimit, Bulkhead, Limiter, Policy};
use crate::clock::{DefaultClock, SteadyClock};
use crate::events::NoListener;
use crate::{Breaker, Budget};

pub(super) enum Choice<T> {
    Default,
    Given(T),
    /// Built from settings handed to this policy's builder: they must carry the policy's name.
    Built(T),
    Off,
    /// Settings configured through this builder that failed validation: `build` reports it.
    Invalid(SettingsError),
}

/// Builds a [`Policy`]: its name, breaker, budget, retries, deadline, attempt timeout,
/// backoff, clock and listener. Every value is validated by [`PolicyBuilder::build`].
///
/// By default a policy gets a breaker and a retry budget of its own with the defaults of the
/// design (5 consecutive failures, relative error rate and slow calls; a tenth of a retry per
/// success with a floor of 3 per second), 3 attempts, a 30 s deadline, a 10 s attempt timeout
/// and exponential backoff from 100 ms with full jitter seeded from the process's entropy.
///
/// ```
/// use std::time::Duration;
/// use stormguard_std::BreakerSettings;
/// use stormguard_std::{Breaker, Budget, Policy};
///
/// let breaker = Breaker::new(BreakerSettings::defaults("payments"));
/// let budget = Budget::defaults("payments-and-refunds"); // shared with another policy
/// let policy = Policy::builder("payments")
///     .breaker(breaker)
///     .budget(budget.clone())
///     .max_attempts(4)
///     .deadline(Duration::from_secs(2))
///     .attempt_timeout(Duration::from_millis(500))
///     .build()?;
/// assert_eq!(policy.settings().max_attempts(), 4);
/// # Ok::<(), stormguard_std::SettingsError>(())
/// ```
#[must_use]
pub struct PolicyBuilder<K = DefaultClock, L = NoListener> {
    pub(super) name: Name,
    pub(super) breaker: Choice<Breaker>,
    pub(super) budget: Choice<Budget>,
    pub(super) limiter: Option<Limiter>,
    pub(super) bulkhead: Option<Bulkhead>,
    pub(super) adaptive: Option<AdaptiveLimit>,
    /// The reserve of a published quota, when quotas are kept.
    pub(super) quota: Option<Ratio>,
    pub(super) hedge_win_rate: bool,
    pub(super) measured_base: Option<Multiple>,
    pub(super) call: CallSettingsBuilder,
    pub(super) retries_when_nested: bool,
    #[cfg(feature = "tokio")]
    pub(super) drain: Option<super::Drain>,
    #[cfg(feature = "tokio")]
    pub(super) saturation: Option<crate::saturation::SaturationProbe>,
    pub(super) clock: K,
    pub(super) listener: L,
}

impl<K, L> PolicyBuilder<K, L> {
    /// Guards calls with `breaker` (shared with whoever else holds a clone).
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = Choice::Given(breaker);
        self
    }

    /// Guards calls with a new breaker built from `settings`, which must carry the policy's
    /// name: [`build`](PolicyBuilder::build) refuses other names ([`Field::BreakerName`],
    /// [`Bound::PolicyName`]) rather than report one dependency under two names. A shared
    /// [`Breaker`] handle given with [`breaker`](PolicyBuilder::breaker) keeps its own name.
    ///
    /// ```
    /// use stormguard_std::stormguard_core::{Bound, Field};
    /// use stormguard_std::BreakerSettings;
    /// let p = stormguard_std::Policy::builder("db")
    ///     .breaker_settings(BreakerSettings::consecutive_only("db", 3)?)
    ///     .build()?;
    /// assert_eq!(p.breaker().unwrap().settings().consecutive_failures(), 3);
    /// let e = stormguard_std::Policy::builder("db")
    ///     .breaker_settings(BreakerSettings::consecutive_only("cache", 3)?)
    ///     .build()
    ///     .err()
    ///     .unwrap();
    /// assert_eq!((e.field, e.bound), (Field::BreakerName, Bound::PolicyName));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn breaker_settings(mut self, settings: BreakerSettings) -> Self {
        self.breaker = Choice::Built(Breaker::new(settings));
        self
    }

    /// Guards calls with a new breaker configured by `configure`, which is handed a settings
    /// builder already named as the policy: the name is given once. Invalid values are
    /// reported by [`build`](PolicyBuilder::build).
    ///
    /// ```
    /// use stormguard_std::{Duration, Policy};
    /// use stormguard_std::stormguard_core::Field;
    /// let p = Policy::builder("payments")
    ///     .breaker_with(|b| b.consecutive_failures(3).break_duration(Duration::from_secs(10)))
    ///     .build()?;
    /// let settings = p.breaker().unwrap().settings();
    /// assert_eq!((settings.name().as_str(), settings.consecutive_failures()), ("payments", 3));
    /// let e = Policy::builder("payments").breaker_with(|b| b.consecutive_failures(0)).build();
    /// assert_eq!(e.err().map(|e| e.field), Some(Field::ConsecutiveFailures));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn breaker_with(
        mut self,
        configure: impl FnOnce(BreakerSettingsBuilder) -> BreakerSettingsBuilder,
    ) -> Self {
        self.breaker = match configure(BreakerSettings::builder_named(self.name)).build() {
            Ok(settings) => Choice::Built(Breaker::new(settings)),
            Err(e) => Choice::Invalid(e),
        };
        self
    }

    /// No breaker: every attempt is admitted (the retry budget, attempts and deadline still
    /// bound the calls).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_breaker().build()?;
    /// assert!(p.breaker().is_none());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn no_breaker(mut self) -> Self {
        self.breaker = Choice::Off;
        self
    }

    /// Bounds retries with `budget` (asked before every retry, never before a first attempt).
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = Choice::Given(budget);
        self
    }

    /// Bounds retries with a new budget built from `settings`, which must carry the policy's
    /// name: [`build`](PolicyBuilder::build) refuses other names ([`Field::BudgetName`],
    /// [`Bound::PolicyName`]). A shared [`Budget`] handle given with
    /// [`budget`](PolicyBuilder::budget) keeps its own name.
    ///
    /// ```
    /// use stormguard_std::BudgetSettings;
    /// let p = stormguard_std::Policy::builder("db")
    ///     .budget_settings(BudgetSettings::builder("db").floor_per_second(1.0).build()?)
    ///     .build()?;
    /// assert_eq!(p.budget().unwrap().settings().capacity(), 10);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn budget_settings(mut self, settings: BudgetSettings) -> Self {
        self.budget = Choice::Built(Budget::new(settings));
        self
    }

    /// Bounds retries with a new budget configured by `configure`, which is handed a settings
    /// builder already named as the policy: the name is given once. Invalid values are
    /// reported by [`build`](PolicyBuilder::build).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db")
    ///     .budget_with(|b| b.floor_per_second(1.0))
    ///     .build()?;
    /// assert_eq!(p.budget().unwrap().settings().capacity(), 10);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn budget_with(
        mut self,
        configure: impl FnOnce(BudgetSettingsBuilder) -> BudgetSettingsBuilder,
    ) -> Self {
        self.budget = match configure(BudgetSettings::builder_named(self.name)).build() {
            Ok(settings) => Choice::Built(Budget::new(settings)),
            Err(e) => Choice::Invalid(e),
        };
        self
    }

    /// No retry budget: retries are bounded by the attempts and the deadline only.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_budget().build()?;
    /// assert!(p.budget().is_none());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn no_budget(mut self) -> Self {
        self.budget = Choice::Off;
        self
    }

    /// Puts a rate limiter in front of the breaker (default: none): every attempt, retries and
    /// hedges included, takes a cell. A refusal is a self-imposed throttle: with attempts left
    /// the call waits until the next cell (later by a draw of up to the backoff's base, so that
    /// callers refused together come back apart) and tries again (using one of its attempts,
    /// charging nothing to the budget); when no retry fits it is a guarded rejection like any
    /// other: [`CallError::Rejected`] with
    /// [`RefusalReason::RateLimited`](stormguard_core::RefusalReason) and, as `retry_after`,
    /// the time until the next cell (counted from the end of the pause).
    /// The breaker is asked first, so an open breaker spends no cells. Composed by the core's
    /// [`Parts`](stormguard_core::Parts), in its one order.
    ///
    /// ```
    /// use stormguard_core::{limits::RateLimitSettings, RefusalReason};
    /// use stormguard_std::{CallError, Limiter, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = Policy::builder("search")
    ///     .max_attempts(1)
    ///     .rate_limit(Limiter::new(RateLimitSettings::per_second("search", 1)?))
    ///     .build()?;
    /// assert_eq!(policy.call(|_| async { Ok::<_, ()>(1) }).await, Ok(1));
    /// let Err(CallError::Rejected { rejection, .. }) =
    ///     policy.call(|_| async { Ok::<_, ()>(2) }).await else { panic!() };
    /// assert_eq!(rejection.reason, RefusalReason::RateLimited);
    /// assert_eq!(rejection.retry_after, stormguard_std::Duration::from_millis(900));
    /// # Ok(()) }
    /// ```
    ///
    /// [`CallError::Rejected`]: crate::CallError::Rejected
    pub fn rate_limit(mut self, limiter: Limiter) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// Puts a bulkhead in front of the breaker (default: none): each attempt holds a slot while
    /// it runs (a hedge takes one too), none during backoff waits. A full bulkhead refuses the
    /// attempt; with attempts left the call retries it on the throttled curve, and when no
    /// retry fits it is a guarded rejection ([`RefusalReason::BulkheadFull`](stormguard_core::RefusalReason),
    /// `retry_after` zero: a slot frees whenever a call ends). Composed by the core's
    /// [`Parts`](stormguard_core::Parts), behind the rate limiter if there is one (a full
    /// bulkhead spends no cell).
    ///
    /// With a bounded wait in the bulkhead's settings, an async call ([`Policy::call`] and its
    /// forms) that finds the bulkhead full waits for a slot before its first attempt, as the
    /// core means the wait (around the call, not inside an attempt's admission): in the queue
    /// of at most `max_queue` callers, for at most the shorter of `max_wait` and the time left
    /// to the deadline, woken when a slot is freed; cancelling (a token, or dropping the future)
    /// leaves the queue at once. A wait that ends without a slot ends as the guarded
    /// rejection. Retries and hedges never wait: a full bulkhead refuses them at once. The
    /// blocking form ([`Policy::call_blocking`]) does not wait either.
    ///
    /// ```
    /// use stormguard_core::{limits::BulkheadSettings, Duration};
    /// use stormguard_std::{Bulkhead, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let db = Bulkhead::new(
    ///     BulkheadSettings::builder("db")
    ///         .max_in_flight(4)
    ///         .bounded_wait(8, Duration::from_millis(250))
    ///         .build()?,
    /// );
    /// let policy = Policy::builder("db").bulkhead(db.clone()).build()?;
    /// let rows = policy
    ///     .call(|_| async { Ok::<_, ()>(db.in_flight()) })
    ///     .await;
    /// assert_eq!(rows, Ok(1)); // the attempt held one slot
    /// assert_eq!(db.in_flight(), 0);
    /// # Ok(()) }
    /// ```
    pub fn bulkhead(mut self, bulkhead: Bulkhead) -> Self {
        self.bulkhead = Some(bulkhead);
        self
    }

    /// Keeps the quota the dependency publishes in its responses (default: off), holding back
    /// `reserve` of it (a share of the published limit below 1; 10% is
    /// [`DEFAULT_RESERVE`](stormguard_core::limits::quota::DEFAULT_RESERVE)): once what is left
    /// is within the reserve, attempts are refused locally until the published reset, as a
    /// self-imposed throttle ([`RefusalReason::QuotaReserve`](stormguard_core::RefusalReason):
    /// retried on the throttled curve after the reset, nothing charged to the budget, nothing
    /// told to the breaker; a guarded rejection only when no retry fits). A known quota only
    /// tightens, and no reading holds a call back longer than the backoff's longest wait
    /// ([`Backoff::cap`]). The quota is read by the call's classifier
    /// ([`Classify::published`](stormguard_core::Classify::published): the [`Http`](crate::Http)
    /// preset reads `RateLimit`/`RateLimit-Policy`, `RateLimit-*` and `X-RateLimit-*`); a
    /// keyed table ([`KeyedPolicy`](crate::KeyedPolicy), the tower layer's
    /// [`per_host`](crate::tower::PolicyLayer::per_host)) keeps one per key, as it keeps a
    /// breaker per key. A reserve of 1 or more is refused by `build`
    /// ([`Field::QuotaReserve`]).
    ///
    /// ```
    /// use stormguard_std::stormguard_core::{Field, Ratio};
    /// use stormguard_std::Policy;
    /// let p = Policy::builder("api").published_quotas(Ratio::from_percent(10).unwrap()).build()?;
    /// assert!(p.quota().is_some());
    /// let e = Policy::builder("api").published_quotas(Ratio::ONE).build().err().unwrap();
    /// assert_eq!(e.field, Field::QuotaReserve);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn published_quotas(mut self, reserve: Ratio) -> Self {
        self.quota = Some(reserve);
        self
    }

    /// Puts an adaptive concurrency limiter in front of the breaker (default: none): a limit on
    /// attempts in flight that learns what the dependency takes. Each attempt holds a slot while
    /// it runs (a hedge takes one too), none during backoff waits, and a successful attempt's
    /// latency teaches it: once a round (one limit's worth of attempts) the limit shrinks by a
    /// tenth when the round's fastest attempt took more than twice the learned p10, and grows
    /// by one when it held attempts back (never while idle); see
    /// [`AdaptiveLimiter`](stormguard_core::limits::AdaptiveLimiter). A refusal is a
    /// self-imposed throttle like a full bulkhead's: with attempts left the call retries it on
    /// the throttled curve, and when no retry fits it is a guarded rejection
    /// ([`RefusalReason::ConcurrencyLimited`](stormguard_core::RefusalReason), `retry_after`
    /// zero). Composed by the core's [`Parts`](stormguard_core::Parts), behind the bulkhead
    /// and the rate limiter if there are any. Callers never wait for its slots.
    ///
    /// ```
    /// use stormguard_core::limits::AdaptiveLimitSettings;
    /// use stormguard_std::{AdaptiveLimit, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let db = AdaptiveLimit::new(AdaptiveLimitSettings::builder("db").build()?);
    /// let policy = Policy::builder("db").adaptive_limit(db.clone()).build()?;
    /// let in_flight = policy
    ///     .call(|_| async { Ok::<_, ()>(db.in_flight()) })
    ///     .await;
    /// assert_eq!(in_flight, Ok(1)); // the attempt held one slot
    /// assert_eq!((db.in_flight(), db.limit()), (0, 20));
    /// assert!(policy.explain().to_string().contains("- adaptive limit: 20 in flight (4..=200)"));
    /// # Ok(()) }
    /// ```
    pub fn adaptive_limit(mut self, limit: AdaptiveLimit) -> Self {
        self.adaptive = Some(limit);
        self
    }

    /// Hedging (default off): when an attempt runs longer than the breaker's learned p95 of
    /// healthy calls, the async call launches a second attempt beside it (the core decides
    /// when, and whether: never without a breaker, a learned baseline, a closed breaker, a
    /// funding retry budget or an attempt left). At most 2 attempts are in flight; the first
    /// success wins and the other attempt's future is dropped (reported to the breaker as
    /// cancelled, never as a failure); a failure of one waits for the other. A hedge is an
    /// attempt (it counts toward the maximum) and a retry (the budget funds it). One hedge per
    /// attempt. Only for operations that are safe to run twice.
    ///
    /// The blocking form ([`Policy::call_blocking`]) never hedges: it cannot run two attempts
    /// of a borrowed closure at once, nor stop the loser.
    ///
    /// A hedge waits for the p95 the breaker learns, whatever its trip rules: a breaker this
    /// builder makes (from [`breaker_settings`](Self::breaker_settings), a consecutive-only one
    /// included) is made to learn; a breaker handed in with [`breaker`](Self::breaker) must
    /// keep statistics ([`BreakerSettings::learning`]), or `build` refuses with
    /// [`Field::Learn`].
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("search").hedging(true).build()?;
    /// assert!(p.settings().hedging());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn hedging(mut self, on: bool) -> Self {
        self.call = self.call.hedging(on);
        self
    }

    /// Learns the share of calls allowed a hedge from whether hedges win (default off; only
    /// with [`hedging`](Self::hedging)): the core's
    /// [`SharedHedgeShare`](stormguard_core::call::SharedHedgeShare), shared by every call of
    /// the policy and its clones. A hedge wins when its answer is the call's; four losing
    /// hedges in a row halve the share (down to one call in 64), a winning one doubles it (up
    /// to every call). A call outside the share runs its first attempt alone.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("search")
    ///     .hedging(true)
    ///     .hedge_win_rate(true)
    ///     .build()?;
    /// assert_eq!(p.hedge_share(), Some(1024)); // in 1024ths: every call, to begin with
    /// assert!(p.explain().to_string().contains("hedge win-rate loop"));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn hedge_win_rate(mut self, on: bool) -> Self {
        self.hedge_win_rate = on;
        self
    }

    /// Measures the backoff base (default off): the first retry after a transient failure
    /// waits `multiple` times the median latency the breaker has learned, kept within 10x of
    /// the configured base either way, and the configured base until there is a median (see
    /// [`BackoffBuilder::measured_base`](stormguard_core::call::BackoffBuilder::measured_base)). It
    /// applies to the backoff set with [`backoff`](Self::backoff), whichever is called first.
    ///
    /// ```
    /// use stormguard_core::Multiple;
    /// let p = stormguard_std::Policy::builder("db")
    ///     .measured_backoff_base(Multiple::whole(4))
    ///     .build()?;
    /// assert_eq!(p.settings().backoff().measured_base(), Some(Multiple::whole(4)));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn measured_backoff_base(mut self, multiple: Multiple) -> Self {
        self.measured_base = Some(multiple);
        self
    }

    /// Whether this policy retries while it serves a request that was itself a caller's retry
    /// (default `true`). With `false`, a call made while serving such a request (one that
    /// arrived through a [`NestedRetryLayer`](crate::tower::NestedRetryLayer) carrying an
    /// attempt number of 2 or more; see [`inbound_retry`](crate::nested::inbound_retry)) makes a
    /// single attempt: the caller that retried already multiplies the load, and this layer
    /// leaves the retrying to it. Calls serving a first attempt, and calls outside any
    /// request, retry as configured.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("inventory").retries_when_nested(false).build()?;
    /// assert!(!p.retries_when_nested());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn retries_when_nested(mut self, on: bool) -> Self {
        self.retries_when_nested = on;
        self
    }

    /// Watches `drain` in every call of the policy (and of a tower layer built on it): once
    /// the drain begins, no call starts a new attempt or retry, deadlines are clamped to the
    /// drain's grace, attempts in flight finish, and a call the drain stopped returns
    /// [`CallError::Drained`](crate::CallError::Drained). A call's own
    /// [`CallOptions::drain_on`](crate::CallOptions::drain_on) takes its place.
    ///
    /// ```
    /// let drain = stormguard_std::Drain::new();
    /// let p = stormguard_std::Policy::builder("inventory").drain(drain.clone()).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn drain(mut self, drain: super::Drain) -> Self {
        self.drain = Some(drain);
        self
    }

    /// Learns nothing from attempts that ran while `probe` saw the runtime saturated: their
    /// successes and failures count, but the breaker teaches their latencies neither to its
    /// baseline (the median and p95 behind the measured ceiling, the measured backoff base and
    /// the hedge delay) nor to its slow-call rule, and takes their timeouts as the caller's
    /// (the call still retries them). See [`SaturationProbe`](crate::saturation::SaturationProbe).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let probe = stormguard_std::saturation::SaturationProbe::spawn(Default::default());
    /// let p = stormguard_std::Policy::builder("inventory").saturation(&probe).build()?;
    /// assert!(p.saturation().is_some());
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn saturation(mut self, probe: &crate::saturation::SaturationProbe) -> Self {
        self.saturation = Some(probe.clone());
        self
    }

    /// Takes the retry settings from `settings` (attempts, deadline, attempt timeout,
    /// measured ceiling, hedging, backoff); the jitter seed stays the builder's.
    ///
    /// ```
    /// use stormguard_core::CallSettings;
    /// let p = stormguard_std::Policy::builder("worker").settings(CallSettings::worker()).build()?;
    /// assert_eq!(p.settings().max_attempts(), 10);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn settings(mut self, settings: CallSettings) -> Self {
        self.call = self
            .call
            .max_attempts(settings.max_attempts())
            .deadline(settings.deadline())
            .attempt_timeout(settings.attempt_timeout())
            .measured_ceiling(settings.measured_ceiling())
            .ceiling_floor(settings.ceiling_floor())
            .hedging(settings.hedging())
            .backoff(*settings.backoff());
        self
    }

    /// Whether the breaker's measured attempt ceiling, 3x the recent p95 of successful calls
    /// (once 20 are known), tightens the attempt timeout (default on). It only ever tightens:
    /// a configured timeout shorter than the ceiling stands.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").measured_ceiling(false).build()?;
    /// assert!(!p.settings().measured_ceiling());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn measured_ceiling(mut self, on: bool) -> Self {
        self.call = self.call.measured_ceiling(on);
        self
    }

    /// Attempts per call, the first included (default 3; at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.call = self.call.max_attempts(n);
        self
    }

    /// The deadline per call (default 30 s).
    pub fn deadline(mut self, d: impl Into<Duration>) -> Self {
        self.call = self.call.deadline(Some(d.into()));
        self
    }

    /// No deadline per call (the attempts and attempt timeout still bound it).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_deadline().build()?;
    /// assert_eq!(p.settings().deadline(), None);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn no_deadline(mut self) -> Self {
        self.call = self.call.deadline(None);
        self
    }

    /// The timeout per attempt (default 10 s).
    pub fn attempt_timeout(mut self, d: impl Into<Duration>) -> Self {
        self.call = self.call.attempt_timeout(Some(d.into()));
        self
    }

    /// No timeout per attempt (the deadline still bounds it).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_attempt_timeout().build()?;
    /// assert_eq!(p.settings().attempt_timeout(), None);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn no_attempt_timeout(mut self) -> Self {
        self.call = self.call.attempt_timeout(None);
        self
    }

    /// The backoff between attempts (default [`Backoff::DEFAULT`]).
    ///
    /// ```
    /// use stormguard_std::Backoff;
    /// let p = stormguard_std::Policy::builder("worker").backoff(Backoff::worker()).build()?;
    /// assert_eq!(p.settings().backoff(), &Backoff::worker());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.call = self.call.backoff(backoff);
        self
    }

    /// The jitter seed (default: from the process's entropy, see
    /// [`entropy_seed`](crate::handles::entropy_seed)). Fix it for reproducible tests.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").seed(42).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.call = self.call.seed(seed);
        self
    }

    /// Reads `clock` instead of the process-wide [`DefaultClock`]. The breaker and budget must
    /// see one time base: give a policy on another clock breakers and budgets of its own (or
    /// read them with the handles' `_at` methods and that clock).
    ///
    /// ```
    /// use stormguard_std::{ManualClock, Policy};
    /// let clock = ManualClock::new();
    /// let p = Policy::builder("db").clock(clock.clone()).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn clock<K2>(self, clock: K2) -> PolicyBuilder<K2, L> {
        PolicyBuilder {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            bulkhead: self.bulkhead,
            adaptive: self.adaptive,
            quota: self.quota,
            hedge_win_rate: self.hedge_win_rate,
            measured_base: self.measured_base,
            call: self.call,
            retries_when_nested: self.retries_when_nested,
            #[cfg(feature = "tokio")]
            drain: self.drain,
            #[cfg(feature = "tokio")]
            saturation: self.saturation,
            clock,
            listener: self.listener,
        }
    }

    /// Sends every event and call report to `listener` as well as events to `tracing`.
    ///
    /// ```
    /// use stormguard_std::{Metrics, Policy};
    /// let metrics = Metrics::new("db");
    /// let p = Policy::builder("db").listener(metrics.clone()).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn listener<L2>(self, listener: L2) -> PolicyBuilder<K, L2> {
        PolicyBuilder {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            bulkhead: self.bulkhead,
            adaptive: self.adaptive,
            quota: self.quota,
            hedge_win_rate: self.hedge_win_rate,
            measured_base: self.measured_base,
            call: self.call,
            retries_when_nested: self.retries_when_nested,
            #[cfg(feature = "tokio")]
            drain: self.drain,
            #[cfg(feature = "tokio")]
            saturation: self.saturation,
            clock: self.clock,
            listener,
        }
    }

    /// Validates every setting and builds the policy.
    ///
    /// ```
    /// use stormguard_std::stormguard_core::Field;
    /// let e = stormguard_std::Policy::builder("db").max_attempts(0).build().err().unwrap();
    /// assert_eq!(e.field, Field::MaxAttempts);
    /// ```
    pub fn build(self) -> Result<Policy<K, L>, SettingsError> {
        self.name.check().map_err(SettingsError::name)?;
        let call = match self.measured_base {
            Some(m) => {
                let backoff = self.call.build()?.backoff().to_builder();
                self.call.backoff(backoff.measured_base(m).build()?)
            }
            None => self.call,
        };
        let settings = call.build()?;
        let handed_in = matches!(self.breaker, Choice::Given(_));
        let breaker = match self.breaker {
            Choice::Default => Some(Breaker::new(
                BreakerSettings::builder_named(self.name).build()?,
            )),
            Choice::Given(b) => Some(b),
            Choice::Built(b) if b.settings().name() == &self.name => Some(b),
            Choice::Built(_) => {
                return Err(SettingsError {
                    field: Field::BreakerName,
                    bound: Bound::PolicyName,
                })
            }
            Choice::Off => None,
            Choice::Invalid(e) => return Err(e),
        };
        // A hedge starts after the p95 the breaker learns, whatever its trip rules: a breaker
        // this builder made learns; one handed in (perhaps shared) must have been built so.
        let breaker = match (breaker, settings.hedging(), handed_in) {
            (Some(b), true, false) if !b.settings().keeps_statistics() => {
                Some(Breaker::new(b.settings().learning()))
            }
            (Some(b), true, true) => {
                settings.check_breaker(b.settings())?;
                Some(b)
            }
            (b, _, _) => b,
        };
        let budget = match self.budget {
            Choice::Default => Some(Budget::new(
                BudgetSettings::builder_named(self.name).build()?,
            )),
            Choice::Given(b) => Some(b),
            Choice::Built(b) if b.settings().name() == &self.name => Some(b),
            Choice::Built(_) => {
                return Err(SettingsError {
                    field: Field::BudgetName,
                    bound: Bound::PolicyName,
                })
            }
            Choice::Off => None,
            Choice::Invalid(e) => return Err(e),
        };
        // No reading may hold a call back longer than the throttled backoff's longest wait.
        let quota = match self.quota {
            Some(reserve) => {
                let max_wait = settings.backoff().cap().max(Duration::from_millis(1));
                Some(Arc::new(SharedQuota::new(QuotaSettings::new(
                    reserve, max_wait,
                )?)))
            }
            None => None,
        };
        Ok(Policy {
            name: self.name,
            breaker,
            budget,
            limiter: self.limiter,
            bulkhead: self.bulkhead,
            adaptive: self.adaptive,
            quota,
            hedge_share: (self.hedge_win_rate && settings.hedging())
                .then(|| Arc::new(SharedHedgeShare::new())),
            settings,
            // One attempt cannot hedge: the single-attempt form runs without it.
            single: call.max_attempts(1).hedging(false).build()?,
            retries_when_nested: self.retries_when_nested,
            #[cfg(feature = "tokio")]
            drain: self.drain,
            #[cfg(feature = "tokio")]
            saturation: self.saturation,
            #[cfg(feature = "tokio")]
            times_attempts: true,
            clock: SteadyClock::new(self.clock),
            listener: self.listener,
        }
        .timing_settled())
    }
}
