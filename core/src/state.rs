//! What a breaker's state is and says: its [`State`], the [`Health`] a state maps to, and the
//! [`TripReason`] an open records. Vocabulary that events and snapshots share, so it depends
//! on nothing else in the crate.

use core::fmt;

/// The breaker's state, as read at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum State {
    /// Calls flow; the trip rules watch.
    Closed,
    /// Every call is refused until the break ends.
    Open,
    /// The break is over: a limited number of probes may go through.
    HalfOpen,
    /// The probes succeeded; a growing fraction of calls is admitted (only with a ramp).
    Recovering,
    /// Forced open by an operator until [`Breaker::reset`](crate::Breaker::reset).
    Isolated,
}

impl State {
    /// A stable, lower-case name for logs and metrics labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::Recovering => "recovering",
            State::Isolated => "isolated",
        }
    }

    /// The health a breaker in this state reports: the one mapping every health endpoint uses.
    ///
    /// ```
    /// use stormguard_core::{Health, State};
    /// assert_eq!(State::Closed.health(), Health::Healthy);
    /// assert_eq!(State::Recovering.health(), Health::Degraded);
    /// assert_eq!(State::Open.health(), Health::Unavailable);
    /// ```
    #[must_use]
    pub const fn health(self) -> Health {
        Health::of_state(self)
    }
}

/// How well a dependency (or a set of them) is doing, best first: closed is healthy; half-open
/// and recovering are degraded (the dependency is on probation: a recovering breaker still
/// sheds part of the traffic); open and isolated are unavailable (calls are refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
pub enum Health {
    /// Closed breaker (or a budget with room).
    Healthy,
    /// Half-open or recovering breaker (or a nearly empty budget).
    Degraded,
    /// Open or isolated breaker: calls are refused.
    Unavailable,
}

impl Health {
    /// The health a breaker in `state` reports.
    ///
    /// ```
    /// use stormguard_core::{Health, State};
    /// assert_eq!(Health::of_state(State::HalfOpen), Health::Degraded);
    /// assert_eq!(Health::of_state(State::Isolated), Health::Unavailable);
    /// ```
    #[must_use]
    pub const fn of_state(state: State) -> Health {
        match state {
            State::Closed => Health::Healthy,
            State::HalfOpen | State::Recovering => Health::Degraded,
            State::Open | State::Isolated => Health::Unavailable,
        }
    }

    /// A stable, lower-case name: `healthy`, `degraded` or `unavailable`.
    ///
    /// ```
    /// assert_eq!(stormguard_core::Health::Degraded.as_str(), "degraded");
    /// ```
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Degraded => "degraded",
            Health::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the breaker opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum TripReason {
    /// The consecutive-failure count reached its threshold.
    ConsecutiveFailures,
    /// The window's failure rate rose above the multiple of the learned normal rate.
    FailureRate,
    /// The window's failure rate reached the absolute ceiling.
    FailureRatio,
    /// The share of slow calls in the window reached the slow-call ratio.
    SlowCalls,
    /// The half-open probes failed: one failure on a breaker with no learned failure rate, or
    /// more than that rate explains once it is learned.
    ProbeFailed,
    /// Calls admitted by the recovery ramp failed (beyond the learned rate, once learned).
    RampFailure,
}

impl TripReason {
    /// A stable, lower-case name for logs and metrics labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            TripReason::ConsecutiveFailures => "consecutive_failures",
            TripReason::FailureRate => "failure_rate",
            TripReason::FailureRatio => "failure_ratio",
            TripReason::SlowCalls => "slow_calls",
            TripReason::ProbeFailed => "probe_failed",
            TripReason::RampFailure => "ramp_failure",
        }
    }
}

impl fmt::Display for TripReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
