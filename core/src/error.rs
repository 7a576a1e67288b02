//! Refusals, rejections and settings errors: one type per operation, all small and `Copy`.

use core::fmt;

use crate::time::Duration;

/// Why a call was refused locally, without reaching the dependency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum RefusalReason {
    /// The breaker is open: the dependency is being left alone for its break.
    BreakerOpen,
    /// The breaker is half-open and every probe slot is taken.
    HalfOpenFull,
    /// The breaker is ramping back and this call falls in the share it sheds.
    RampShedding,
    /// An operator forced the breaker open until it is reset.
    Isolated,
    /// The retry budget has no token for this retry.
    BudgetExhausted,
    /// A rate limiter has no cell for this call yet.
    RateLimited,
    /// The bulkhead has no room for another call in flight.
    BulkheadFull,
    /// A keyed table (one breaker per key) is full and no key in it is idle, so the new key
    /// has no breaker.
    KeyedFull,
    /// The call is [sheddable](crate::call::Criticality::Sheddable) and more than half of the
    /// retry budget is spent: the retries left are kept for work that matters more.
    Shed,
    /// The adaptive concurrency limiter has no room for another call in flight at its current
    /// limit.
    ConcurrencyLimited,
    /// The dependency published a quota (`RateLimit`, `X-RateLimit-Remaining`) whose remaining
    /// allowance is within the reserve kept untouched: the caller holds back until the
    /// published reset (see [`limits::Quota`](crate::limits::Quota)).
    QuotaReserve,
}

impl RefusalReason {
    /// A stable, lower-case name for logs and metrics labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            RefusalReason::BreakerOpen => "breaker_open",
            RefusalReason::HalfOpenFull => "half_open_full",
            RefusalReason::RampShedding => "ramp_shedding",
            RefusalReason::Isolated => "isolated",
            RefusalReason::BudgetExhausted => "budget_exhausted",
            RefusalReason::RateLimited => "rate_limited",
            RefusalReason::BulkheadFull => "bulkhead_full",
            RefusalReason::KeyedFull => "keyed_full",
            RefusalReason::Shed => "shed",
            RefusalReason::ConcurrencyLimited => "concurrency_limited",
            RefusalReason::QuotaReserve => "quota_reserve",
        }
    }

    /// Whether the refusal is the caller's own limit (a local rate limiter, bulkhead or adaptive
    /// limiter, or a published quota's reserve) rather than the breaker's or the budget's
    /// judgement of the dependency: the call retries it as a self-imposed throttle, and the
    /// dependency was never asked.
    ///
    /// ```
    /// use stormguard_core::RefusalReason;
    /// assert!(RefusalReason::BulkheadFull.is_self_imposed());
    /// assert!(!RefusalReason::BudgetExhausted.is_self_imposed());
    /// ```
    #[must_use]
    pub const fn is_self_imposed(self) -> bool {
        matches!(
            self,
            RefusalReason::RateLimited
                | RefusalReason::BulkheadFull
                | RefusalReason::ConcurrencyLimited
                | RefusalReason::QuotaReserve
        )
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A breaker's, budget's or limiter's "no": why, and when asking again may succeed.
///
/// `retry_after` counts from the moment of the refusal. [`Duration::MAX`] means "not by the
/// passing of time" (an isolated breaker waits for an operator's reset). The call driver turns a
/// `Refused` into a [`Rejection`](crate::Rejection) by adding the guarded pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Refused {
    /// Why.
    pub reason: RefusalReason,
    /// How long until asking again may be granted.
    pub retry_after: Duration,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refused ({}), retry after {}",
            self.reason, self.retry_after
        )
    }
}

impl core::error::Error for Refused {}

/// Which setting a [`SettingsError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum Field {
    /// The breaker's consecutive-failure count.
    ConsecutiveFailures,
    /// The relative error-rate rule's multiple of the learned rate.
    FailureMultiple,
    /// The relative error-rate rule's absolute floor.
    FailureFloor,
    /// The outcomes the error-rate baseline needs before the rule may trip.
    FailureBaselineOutcomes,
    /// The optional absolute error-rate ceiling.
    FailureRatio,
    /// The failures a trip window needs before a rate counts.
    MinimumFailures,
    /// The slow-call rule's multiple of the learned median latency.
    SlowMultiple,
    /// The calls the latency baseline needs before the slow-call rule may trip.
    SlowBaselineCalls,
    /// The slow-call rule's optional absolute threshold.
    SlowThreshold,
    /// The share of slow calls in the trip window that trips the breaker.
    SlowRatio,
    /// The calls a trip window needs before any ratio is evaluated.
    MinimumCalls,
    /// The sliding window the trip rules read.
    TripWindow,
    /// The window the learned baselines span.
    BaselineWindow,
    /// The first break of an open breaker.
    BreakDuration,
    /// The longest break, which doubling stops at.
    MaxBreak,
    /// The probes a half-open breaker lets through at a time.
    HalfOpenProbes,
    /// The successful probes that close a half-open breaker.
    ProbeSuccesses,
    /// The recovery ramp's length as a share of the break just served.
    RecoveryFraction,
    /// How unlikely failures must be under the learned normal rate before they trip.
    NoiseBound,
    /// Learning the normal latency and failure rate with no rule that needs them.
    Learn,
    /// The recovery ramp's shortest length.
    RecoveryMin,
    /// The recovery ramp's longest length.
    RecoveryMax,
    /// The retry budget's fraction of a retry funded per success.
    RetryFraction,
    /// The retry budget's floor rate of retries per second.
    FloorRate,
    /// The backoff's first delay after a transient failure.
    BackoffBase,
    /// The backoff's first delay after a throttled answer without a hint.
    ThrottledBase,
    /// The backoff's growth factor per retry.
    BackoffFactor,
    /// The backoff's longest delay.
    BackoffCap,
    /// A call's attempts, the first included.
    MaxAttempts,
    /// A call's deadline.
    Deadline,
    /// A call's timeout per attempt.
    AttemptTimeout,
    /// The floor under a call's measured attempt ceiling.
    CeilingFloor,
    /// The bulkhead's calls in flight.
    MaxInFlight,
    /// The bulkhead's callers waiting for a slot.
    MaxQueue,
    /// The bulkhead's longest wait for a slot.
    MaxWait,
    /// The GCRA limiter's rate.
    Rate,
    /// The GCRA limiter's period.
    Period,
    /// The GCRA limiter's burst.
    Burst,
    /// The window limiter's events per window.
    WindowEvents,
    /// The window limiter's window.
    Window,
    /// The window limiter's cooldown after the window fills.
    Cooldown,
    /// The name (of a breaker, budget, policy, limiter, bulkhead or engine rule).
    Name,
    /// A fixed table's or registry's capacity (keys, rules, entries).
    Capacity,
    /// The name in the breaker settings a policy is given.
    BreakerName,
    /// The name in the budget settings a policy is given.
    BudgetName,
    /// The latency fault injection holds a slowed attempt back by.
    InjectedLatency,
    /// The adaptive limiter's lowest limit.
    MinLimit,
    /// The adaptive limiter's highest limit.
    MaxLimit,
    /// The adaptive limiter's limit before its first round ends.
    InitialLimit,
    /// The multiple of the baseline above which a round is slow.
    LatencyTolerance,
    /// What a slow round multiplies the adaptive limit by.
    Decrease,
    /// The share of attempts fault injection fails.
    Faults,
    /// The share of attempts fault injection holds back.
    Slowed,
    /// The share of a published quota kept untouched.
    QuotaReserve,
    /// The longest a published quota's reset may keep a caller waiting.
    QuotaMaxWait,
    /// The sliding-window limiter's calls per window.
    Quota,
    /// The segments the sliding-window limiter's window slides in.
    Segments,
    /// The multiple of the learned median latency a measured backoff base is.
    MeasuredBase,
    /// Whether a call is hedged.
    Hedging,
    /// The longest gap between two elements of a flowing stream.
    StallTimeout,
    /// How long a stream's connection must flow for its restarts to start over.
    RestartsResetAfter,
    /// How often the runtime's scheduling delay is probed.
    ProbeInterval,
    /// The multiple of a probe's normal delay that is saturation.
    SaturationMultiple,
    /// The least late a probe must be to be saturation.
    SaturationFloor,
    /// The probes that learn the normal delay before any is judged.
    ArmAfter,
    /// The quiet probes in a row that end an episode of saturation.
    DrainAfter,
}

impl Field {
    /// The setting's name, as configuration files spell it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Field::ConsecutiveFailures => "consecutive_failures",
            Field::FailureMultiple => "failure_multiple",
            Field::FailureFloor => "failure_floor",
            Field::FailureBaselineOutcomes => "failure_baseline_outcomes",
            Field::FailureRatio => "failure_ratio",
            Field::MinimumFailures => "minimum_failures",
            Field::SlowMultiple => "slow_multiple",
            Field::SlowBaselineCalls => "slow_baseline_calls",
            Field::SlowThreshold => "slow_threshold",
            Field::SlowRatio => "slow_ratio",
            Field::MinimumCalls => "minimum_calls",
            Field::TripWindow => "trip_window",
            Field::BaselineWindow => "baseline_window",
            Field::BreakDuration => "break_duration",
            Field::MaxBreak => "max_break",
            Field::HalfOpenProbes => "half_open_probes",
            Field::ProbeSuccesses => "probe_successes",
            Field::RecoveryFraction => "recovery_fraction",
            Field::NoiseBound => "noise_bound",
            Field::Learn => "learn",
            Field::RecoveryMin => "recovery_min",
            Field::RecoveryMax => "recovery_max",
            Field::RetryFraction => "retry_fraction",
            Field::FloorRate => "floor_rate",
            Field::BackoffBase => "backoff_base",
            Field::ThrottledBase => "throttled_base",
            Field::BackoffFactor => "backoff_factor",
            Field::BackoffCap => "backoff_cap",
            Field::MaxAttempts => "max_attempts",
            Field::Deadline => "deadline",
            Field::AttemptTimeout => "attempt_timeout",
            Field::CeilingFloor => "ceiling_floor",
            Field::MaxInFlight => "max_in_flight",
            Field::MaxQueue => "max_queue",
            Field::MaxWait => "max_wait",
            Field::Rate => "rate",
            Field::Period => "period",
            Field::Burst => "burst",
            Field::WindowEvents => "window_events",
            Field::Window => "window",
            Field::Cooldown => "cooldown",
            Field::Name => "name",
            Field::Capacity => "capacity",
            Field::BreakerName => "breaker_name",
            Field::BudgetName => "budget_name",
            Field::InjectedLatency => "latency",
            Field::MinLimit => "min_limit",
            Field::MaxLimit => "max_limit",
            Field::InitialLimit => "initial_limit",
            Field::LatencyTolerance => "latency_tolerance",
            Field::Decrease => "decrease",
            Field::Faults => "faults",
            Field::Slowed => "slowed",
            Field::QuotaReserve => "quota_reserve",
            Field::QuotaMaxWait => "quota_max_wait",
            Field::Quota => "quota",
            Field::Segments => "segments",
            Field::MeasuredBase => "measured_base",
            Field::Hedging => "hedging",
            Field::StallTimeout => "stall_timeout",
            Field::RestartsResetAfter => "reset_restarts_after",
            Field::ProbeInterval => "interval",
            Field::SaturationMultiple => "multiple",
            Field::SaturationFloor => "floor",
            Field::ArmAfter => "arm_after",
            Field::DrainAfter => "drain_after",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The bound a setting broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum Bound {
    /// A count that must be at least this.
    AtLeast(u64),
    /// A count that must be at most this.
    AtMost(u64),
    /// A duration that must be at least this.
    AtLeastDuration(Duration),
    /// A duration that must be at most this.
    AtMostDuration(Duration),
    /// A multiple that must be strictly above 1.
    AboveOne,
    /// A multiple that must be at least 1.
    AtLeastOne,
    /// A ratio that must lie in (0, 1].
    ZeroToOne,
    /// Must be at least the other setting's value.
    NotBelow(Field),
    /// Must be at least this many times the other setting's value.
    AtLeastTimes(u32, Field),
    /// Must be a whole multiple of the other setting (a window of equal buckets).
    DivisibleBy(Field),
    /// Must be unset: a lean breaker keeps no statistics, so rules that need them cannot run.
    UnsetWithoutStatistics,
    /// A name that is not empty and not whitespace only.
    NotBlank,
    /// A name without control characters (they break logs and metrics expositions).
    NoControlCharacters,
    /// The name the policy was given: settings built for one policy carry its name, so events,
    /// metrics and health reports name one thing once.
    PolicyName,
    /// Must be on: a hedged policy launches its hedges after the p95 its breaker learns.
    OnForHedging,
    /// A ratio that must lie in [0, 1).
    BelowOne,
    /// Must be off: a streaming call is never hedged (a second copy of a stream would deliver
    /// every element twice).
    OffForStreaming,
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::AtLeast(n) => write!(f, "at least {n}"),
            Bound::AtMost(n) => write!(f, "at most {n}"),
            Bound::AtLeastDuration(d) => write!(f, "at least {d}"),
            Bound::AtMostDuration(d) => write!(f, "at most {d}"),
            Bound::AboveOne => f.write_str("above 1"),
            Bound::AtLeastOne => f.write_str("at least 1"),
            Bound::ZeroToOne => f.write_str("above 0 and at most 1"),
            Bound::NotBelow(other) => write!(f, "at least `{other}`"),
            Bound::AtLeastTimes(n, other) => write!(f, "at least {n} times `{other}`"),
            Bound::DivisibleBy(other) => write!(f, "divisible into whole `{other}`"),
            Bound::UnsetWithoutStatistics => {
                f.write_str("unset for a breaker that keeps no statistics")
            }
            Bound::NotBlank => f.write_str("not blank"),
            Bound::NoControlCharacters => f.write_str("free of control characters"),
            Bound::PolicyName => f.write_str("the policy's name"),
            Bound::OnForHedging => f.write_str("on for a hedged policy"),
            Bound::BelowOne => f.write_str("at least 0 and below 1"),
            Bound::OffForStreaming => f.write_str("off for a streaming call"),
        }
    }
}

/// A setting out of its bounds: names the field and the bound, never clamps silently.
///
/// ```
/// use stormguard_core::{BreakerSettings, Field, Bound};
/// let err = BreakerSettings::builder("payments").consecutive_failures(0).build().unwrap_err();
/// assert_eq!(err.field, Field::ConsecutiveFailures);
/// assert_eq!(err.bound, Bound::AtLeast(1));
/// assert_eq!(err.to_string(), "`consecutive_failures` must be at least 1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SettingsError {
    /// The setting at fault.
    pub field: Field,
    /// The bound it broke.
    pub bound: Bound,
}

impl SettingsError {
    pub(crate) const fn new(field: Field, bound: Bound) -> SettingsError {
        SettingsError { field, bound }
    }

    /// The error for a name that cannot be taken: [`Field::Name`] and the bound it broke.
    ///
    /// ```
    /// use stormguard_core::{Bound, Field, Name, SettingsError};
    /// let err = SettingsError::name(Name::new("").check().unwrap_err());
    /// assert_eq!((err.field, err.bound), (Field::Name, Bound::NotBlank));
    /// assert_eq!(err.to_string(), "`name` must be not blank");
    /// ```
    #[must_use]
    pub const fn name(error: crate::name::NameError) -> SettingsError {
        let bound = match error {
            crate::name::NameError::TooLong => Bound::AtMost(crate::name::NAME_CAPACITY as u64),
            crate::name::NameError::Blank => Bound::NotBlank,
            crate::name::NameError::ControlCharacter => Bound::NoControlCharacters,
        };
        SettingsError::new(Field::Name, bound)
    }

    /// `Err` for a name that cannot be taken (see [`Name::check`](crate::Name::check)): what
    /// every settings builder checks first.
    pub(crate) const fn check_name(name: &crate::name::Name) -> Result<(), SettingsError> {
        match name.check() {
            Ok(()) => Ok(()),
            Err(e) => Err(SettingsError::name(e)),
        }
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` must be {}", self.field, self.bound)
    }
}

impl core::error::Error for SettingsError {}

/// How many problems a [`Problems`] list holds; past it, [`Problems::more`] counts the rest.
pub const PROBLEMS_CAPACITY: usize = 8;

/// Every setting at fault in one builder, not only the first: a fixed-capacity list (no
/// allocation) that says how many more there were when it is full.
///
/// What a builder's `problems()` returns; its `build()` keeps returning the first of them as a
/// [`SettingsError`], so `const` construction keeps its typed single-field error.
///
/// ```
/// use stormguard_core::{BreakerSettings, Bound, Duration, Field};
/// let builder = BreakerSettings::builder("payments")
///     .consecutive_failures(0)
///     .half_open_probes(99)
///     .break_duration(Duration::ZERO);
/// let problems = builder.problems();
/// let fields: Vec<Field> = problems.iter().map(|p| p.field).collect();
/// assert_eq!(fields, [Field::ConsecutiveFailures, Field::BreakDuration, Field::HalfOpenProbes]);
/// assert_eq!(builder.build().unwrap_err(), problems.first().unwrap());
/// assert_eq!(
///     problems.to_string(),
///     "`consecutive_failures` must be at least 1; `break_duration` must be at least 1ms; \
///      `half_open_probes` must be at most 31"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Problems {
    // Slots past `len` hold a placeholder and are never read.
    list: [SettingsError; PROBLEMS_CAPACITY],
    len: u8,
    more: u32,
}

impl Problems {
    /// No problem yet.
    #[must_use]
    pub const fn new() -> Problems {
        Problems {
            list: [SettingsError::new(Field::Name, Bound::NotBlank); PROBLEMS_CAPACITY],
            len: 0,
            more: 0,
        }
    }

    /// Adds `problem`; when the list is full, counts it in [`more`](Self::more) instead.
    pub const fn push(&mut self, problem: SettingsError) {
        let len = self.len as usize;
        if let Some((_, free)) = self.list.split_at_mut_checked(len) {
            if let Some(slot) = free.first_mut() {
                *slot = problem;
                self.len = self.len.saturating_add(1);
                return;
            }
        }
        self.more = self.more.saturating_add(1);
    }

    /// Adds `result`'s error, if it is one.
    pub const fn push_result(&mut self, result: Result<(), SettingsError>) {
        if let Err(e) = result {
            self.push(e);
        }
    }

    /// `true` when nothing is at fault.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0 && self.more == 0
    }

    /// The problems held (at most [`PROBLEMS_CAPACITY`]).
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Problems found past the list's capacity, and not held.
    #[must_use]
    pub const fn more(&self) -> u32 {
        self.more
    }

    /// The first problem found: what `build()` reports.
    #[must_use]
    pub const fn first(&self) -> Option<SettingsError> {
        if self.len == 0 {
            None
        } else {
            Some(self.list[0])
        }
    }

    /// The problems held, in the order they were found.
    #[must_use]
    pub fn as_slice(&self) -> &[SettingsError] {
        self.list.get(..self.len()).unwrap_or(&[])
    }

    /// The problems held, in the order they were found.
    pub fn iter(&self) -> core::slice::Iter<'_, SettingsError> {
        self.as_slice().iter()
    }
}

impl Default for Problems {
    fn default() -> Self {
        Problems::new()
    }
}

impl<'a> IntoIterator for &'a Problems {
    type Item = &'a SettingsError;
    type IntoIter = core::slice::Iter<'a, SettingsError>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Display for Problems {
    /// The problems separated by `; `, and `; and N more` when some were not held.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for p in self {
            write!(f, "{sep}{p}")?;
            sep = "; ";
        }
        if self.more > 0 {
            write!(f, "{sep}and {} more", self.more)?;
        }
        Ok(())
    }
}

impl core::error::Error for Problems {}

#[cfg(feature = "serde")]
impl serde::Serialize for Problems {
    /// `{ "problems": [...], "more": N }`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Problems", 2)?;
        st.serialize_field("problems", self.as_slice())?;
        st.serialize_field("more", &self.more)?;
        st.end()
    }
}
