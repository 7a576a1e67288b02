//! A point-in-time view of a breaker.

use crate::name::Name;
use crate::ratio::Ratio;
use crate::state::{Health, State};
use crate::time::Duration;

/// A point-in-time view of a breaker, for health endpoints and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Snapshot {
    /// The breaker's name.
    pub name: Name,
    /// The state as read now.
    pub state: State,
    /// Transient failures in a row, with no success in between: counted while closed, held
    /// while open and half-open (a failed probe adds one), zero again after a success.
    pub consecutive_failures: u16,
    /// The run of consecutive failures that trips the breaker now: the configured count on a
    /// cold breaker; once the normal failure rate is learned, the run whose chance under it is
    /// within the noise bound (never below the configured count). See
    /// [`BreakerSettingsBuilder::noise_bound`](crate::breaker::BreakerSettingsBuilder::noise_bound).
    pub consecutive_to_trip: u16,
    /// Probes in flight while half-open.
    pub probes_in_flight: u8,
    /// Consecutive opens without a close (the break's exponent).
    pub consecutive_opens: u8,
    /// The (jittered) break last served or being served, if the breaker has opened.
    pub break_duration: Option<Duration>,
    /// Document 004's current cooldown: the break being served or last served, and once the
    /// breaker has closed (or before it ever opens) the first break, which the next open will
    /// serve. Jittered like the break itself.
    pub current_break: Duration,
    /// Time until the break ends (zero unless open).
    pub until_half_open: Duration,
    /// The admitted fraction while recovering.
    pub ramp_fraction: Option<Ratio>,
    /// The learned median latency of successful calls.
    pub normal_latency: Option<Duration>,
    /// The learned normal failure rate the noise rules use (once armed; see
    /// [`Breaker::normal_failure_rate`](crate::Breaker::normal_failure_rate)).
    pub normal_failure_rate: Option<Ratio>,
    /// Calls counted in the trip window.
    pub window_calls: u32,
    /// Failures counted in the trip window.
    pub window_failures: u32,
    /// Slow calls counted in the trip window.
    pub window_slow: u32,
}

impl Snapshot {
    /// The health the breaker's state maps to ([`State::health`]).
    #[must_use]
    pub const fn health(&self) -> Health {
        self.state.health()
    }

    /// `true` when the dependency is not fully trusted: its [health](Snapshot::health) is
    /// anything but [`Health::Healthy`] (degraded or unavailable). A breaker that is
    /// recovering is not healthy.
    #[must_use]
    pub const fn is_degraded(&self) -> bool {
        !matches!(self.health(), Health::Healthy)
    }
}
