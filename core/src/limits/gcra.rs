//! GCRA, the generic cell rate algorithm: the default rate limiter's rule.
//!
//! The generic cell rate algorithm keeps one number per limiter, the *theoretical arrival time*
//! (TAT): the moment the limiter would be back to full if nothing more were admitted. A rate of
//! `cells` per `period` admits one cell every emission interval `T = period / cells`; a burst of
//! `b` lets `b` cells through at once. A request for `n` cells at `now` is admitted when
//! `max(TAT, now) + n·T` lies at most `b·T` (the *horizon*) past `now`, and the TAT moves there;
//! otherwise it is refused with `retry_after` = how far past the horizon it lies, which is
//! exactly when asking again succeeds. Over any span of time `w`, at most `b + w / T` cells are
//! admitted.
//!
//! The TAT is stored as nanoseconds since the caller's epoch (the [`Instant`] it feeds), so it is
//! one 64-bit word, installed by load / pure step / compare-exchange like governor's GCRA. A
//! zeroed word is a full limiter, so the shared form can live in a `static`. The limiter is
//! [`Limiter`](super::Limiter) with this rule: [`RateLimiter`](super::RateLimiter),
//! [`SharedRateLimiter`](super::SharedRateLimiter), [`KeyedRateLimiter`](super::KeyedRateLimiter).
//!
//! ## Exactness and limits
//! - `T` is whole nanoseconds: exact when `period` is a whole multiple of `cells` nanoseconds
//!   (any rate per second up to 10^9 that divides 10^9: 1, 2, 4, 5, 8, 10, ... 1000, ...), and
//!   otherwise rounded *up* to the next nanosecond, so a limiter never admits faster than its
//!   rate: 3 per second admits one cell every 333 333 334 ns. The rate is then slow by less than
//!   1 / `T` (in nanoseconds): 3 parts per billion at 3 per second, 0.2 % at 3 million per
//!   second. The finest rate accepted is one cell per nanosecond.
//! - A cell whose theoretical arrival would fall past [`Instant::MAX`] (584 years after the
//!   epoch) is never granted: it is refused with [`Duration::MAX`].

use core::fmt;

use super::limiter::sealed::Rule;
use super::limiter::{limited, DEFAULT_IDLE, LATE_READING_NS};
use crate::error::{Bound, Field, Refused, SettingsError};
use crate::name::Name;
use crate::time::{Duration, Instant};

// The settings fields the limiter's errors name.
const FIELD_CELLS: Field = Field::Rate;
const FIELD_PERIOD: Field = Field::Period;
const FIELD_BURST: Field = Field::Burst;

/// The settings of a GCRA rate limiter, its name included: a rate of `cells` per `period`, a
/// burst, and (for the keyed form) how long a key must stay quiet before it may be evicted.
/// Built with [`RateLimitSettings::builder`] (or [`per_second`](RateLimitSettings::per_second),
/// [`per_minute`](RateLimitSettings::per_minute)), validated, immutable after.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | rate | 50 per minute | one cell every `period / cells` (document 004's stream default) |
/// | burst | the rate's `cells` | cells admitted at once after a quiet spell |
/// | idle | 5 minutes | keyed forms: quiet time before a full key may be evicted |
///
/// ```
/// use stormguard_core::{Duration, limits::RateLimitSettings};
/// const API: RateLimitSettings = match RateLimitSettings::builder("api")
///     .rate(100, Duration::from_secs(1))
///     .burst(20)
///     .build()
/// {
///     Ok(s) => s,
///     Err(_) => panic!("invalid rate limit"),
/// };
/// assert_eq!(API.emission_interval(), Duration::from_millis(10));
/// assert_eq!(API.burst(), 20);
/// assert_eq!(API.to_string(), "100 per 1s, burst 20");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RateLimitSettings {
    name: Name,
    cells: u32,
    period: Duration,
    burst: u32,
    idle: Duration,
    /// `T`, in nanoseconds (at least 1).
    interval: u64,
    /// `burst · T`, in nanoseconds.
    horizon: u64,
}

/// Builds a [`RateLimitSettings`]; every method is `const`, so settings can live in a `const` or
/// `static`. Values are checked by [`build`](RateLimitSettingsBuilder::build), never clamped.
///
/// ```
/// use stormguard_core::{Duration, limits::RateLimitSettings};
/// let s = RateLimitSettings::builder("uploads").rate(3, Duration::from_secs(1)).build()?;
/// assert_eq!(s.burst(), 3); // the burst defaults to the rate's cells
/// assert_eq!(s.emission_interval(), Duration::from_nanos(333_333_334)); // rounded up
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RateLimitSettingsBuilder {
    name: Name,
    cells: u32,
    period: Duration,
    burst: Option<u32>,
    idle: Duration,
}

impl RateLimitSettings {
    /// A builder holding the defaults (50 per minute, burst 50, idle 5 minutes) for a limiter
    /// called `name`.
    pub const fn builder(name: &'static str) -> RateLimitSettingsBuilder {
        RateLimitSettingsBuilder::defaults(Name::new(name))
    }

    /// A builder holding the defaults, for a limiter whose name came from elsewhere.
    pub const fn builder_named(name: Name) -> RateLimitSettingsBuilder {
        RateLimitSettingsBuilder::defaults(name)
    }

    /// `cells` per second, burst `cells`.
    ///
    /// ```
    /// use stormguard_core::{Duration, limits::RateLimitSettings};
    /// let s = RateLimitSettings::per_second("search", 10)?;
    /// assert_eq!(s.emission_interval(), Duration::from_millis(100));
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub const fn per_second(name: &'static str, cells: u32) -> Result<Self, SettingsError> {
        RateLimitSettings::builder(name)
            .rate(cells, Duration::from_secs(1))
            .build()
    }

    /// `cells` per minute, burst `cells`.
    ///
    /// ```
    /// use stormguard_core::{Duration, limits::RateLimitSettings};
    /// let s = RateLimitSettings::per_minute("reports", 6)?;
    /// assert_eq!(s.emission_interval(), Duration::from_secs(10));
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub const fn per_minute(name: &'static str, cells: u32) -> Result<Self, SettingsError> {
        RateLimitSettings::builder(name)
            .rate(cells, Duration::from_secs(60))
            .build()
    }

    /// Every default (50 per minute, burst 50), for a limiter called `name`.
    ///
    /// ```
    /// use stormguard_core::limits::RateLimitSettings;
    /// assert_eq!(RateLimitSettings::defaults("x").to_string(), "50 per 60s, burst 50");
    /// ```
    #[must_use]
    pub const fn defaults(name: &'static str) -> RateLimitSettings {
        match RateLimitSettings::builder(name).build() {
            Ok(s) => s,
            // The defaults are valid (a test checks it); this arm is never taken.
            Err(_) => RateLimitSettings {
                name: Name::new(name),
                cells: 50,
                period: Duration::from_secs(60),
                burst: 50,
                idle: DEFAULT_IDLE,
                interval: 1_200_000_000,
                horizon: 60_000_000_000,
            },
        }
    }

    /// The limiter's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.name
    }

    /// The rate's cells per [`period`](RateLimitSettings::period).
    #[must_use]
    pub const fn cells(&self) -> u32 {
        self.cells
    }

    /// The rate's period.
    #[must_use]
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// Cells admitted at once after a quiet spell.
    #[must_use]
    pub const fn burst(&self) -> u32 {
        self.burst
    }

    /// The time one cell takes to come back: `period / cells`, rounded up to a nanosecond.
    #[must_use]
    pub const fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.interval)
    }

    /// How long an empty limiter takes to be full again: `burst` emission intervals.
    #[must_use]
    pub const fn refill(&self) -> Duration {
        Duration::from_nanos(self.horizon)
    }

    /// How long a full key must stay quiet before a keyed limiter may evict it.
    #[must_use]
    pub const fn idle(&self) -> Duration {
        self.idle
    }

    /// The TAT once a clock that stepped back further than a late reading is accounted for.
    #[inline]
    const fn settle(&self, tat: u64, now: u64) -> u64 {
        // Every admission happens at or after `TAT - horizon`: a reading well before that is a
        // clock that stepped back, and the limiter restarts from it as empty as it can have been.
        if now.saturating_add(LATE_READING_NS) < tat.saturating_sub(self.horizon) {
            now.saturating_add(self.horizon)
        } else {
            tat
        }
    }

    /// The GCRA rule: the decision for `n` cells at `now`, and the TAT after it.
    #[inline]
    fn decide(&self, tat: u64, now: Instant, n: u32) -> (Result<(), Refused>, u64) {
        if n == 0 {
            return (Ok(()), tat);
        }
        if n > self.burst {
            // More than a full limiter holds: no amount of waiting admits it.
            return (Err(limited(Duration::MAX)), tat);
        }
        let now = now.as_nanos();
        let tat = self.settle(tat, now);
        // At most `horizon` (n <= burst), so exact.
        let cost = self.interval.saturating_mul(n as u64);
        let Some(next) = (if tat > now { tat } else { now }).checked_add(cost) else {
            return (Err(limited(Duration::MAX)), tat);
        };
        let ahead = next.saturating_sub(now);
        if ahead <= self.horizon {
            (Ok(()), next)
        } else {
            let wait = Duration::from_nanos(ahead.saturating_sub(self.horizon));
            (Err(limited(wait)), tat)
        }
    }

    fn available(&self, tat: u64, now: Instant) -> u32 {
        let now = now.as_nanos();
        let used = self.settle(tat, now).saturating_sub(now);
        let free = self.horizon.saturating_sub(used);
        let cells = free.checked_div(self.interval).unwrap_or(0);
        u32::try_from(cells).unwrap_or(u32::MAX).min(self.burst)
    }

    fn until_full(&self, tat: u64, now: Instant) -> Duration {
        let now = now.as_nanos();
        Duration::from_nanos(self.settle(tat, now).saturating_sub(now))
    }
}

impl RateLimitSettingsBuilder {
    const fn defaults(name: Name) -> RateLimitSettingsBuilder {
        RateLimitSettingsBuilder {
            name,
            // Document 004's stream limiter: 50 events a minute per stream.
            cells: 50,
            period: Duration::from_secs(60),
            burst: None,
            idle: DEFAULT_IDLE,
        }
    }

    /// Renames the limiter.
    pub const fn name(mut self, name: Name) -> Self {
        self.name = name;
        self
    }

    /// `cells` per `period` (default 50 per minute): one cell every `period / cells`. At least
    /// 1 cell, at most one per nanosecond.
    pub const fn rate(mut self, cells: u32, period: Duration) -> Self {
        self.cells = cells;
        self.period = period;
        self
    }

    /// Cells admitted at once after a quiet spell (default: the rate's cells). At least 1.
    pub const fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// How long a full key must stay quiet before a keyed limiter may evict it (default 5
    /// minutes; zero evicts a key as soon as its limiter is full).
    pub const fn idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// Checks every bound and returns the settings, or the first setting at fault.
    pub const fn build(self) -> Result<RateLimitSettings, SettingsError> {
        if let Err(e) = SettingsError::check_name(&self.name) {
            return Err(e);
        }
        if self.cells == 0 {
            return Err(SettingsError::new(FIELD_CELLS, Bound::AtLeast(1)));
        }
        let period = self.period.as_nanos();
        if period == 0 {
            return Err(SettingsError::new(
                FIELD_PERIOD,
                Bound::AtLeastDuration(Duration::from_nanos(1)),
            ));
        }
        if (self.cells as u64) > period {
            // Finer than one cell per nanosecond.
            return Err(SettingsError::new(FIELD_CELLS, Bound::AtMost(period)));
        }
        let interval = period.div_ceil(self.cells as u64);
        let burst = match self.burst {
            Some(b) => b,
            None => self.cells,
        };
        if burst == 0 {
            return Err(SettingsError::new(FIELD_BURST, Bound::AtLeast(1)));
        }
        let Some(horizon) = interval.checked_mul(burst as u64) else {
            let most = match u64::MAX.checked_div(interval) {
                Some(m) => m,
                None => 0,
            };
            return Err(SettingsError::new(FIELD_BURST, Bound::AtMost(most)));
        };
        Ok(RateLimitSettings {
            name: self.name,
            cells: self.cells,
            period: self.period,
            burst,
            idle: self.idle,
            interval,
            horizon,
        })
    }
}

impl fmt::Display for RateLimitSettings {
    /// E.g. `100 per 1s, burst 20`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {}, burst {}",
            self.cells, self.period, self.burst
        )
    }
}

impl Rule for RateLimitSettings {
    type State = u64;

    #[inline]
    fn decide(&self, word: u64, now: Instant, n: u32) -> (Result<(), Refused>, u64) {
        RateLimitSettings::decide(self, word, now, n)
    }
    fn available(&self, word: u64, now: Instant) -> u32 {
        RateLimitSettings::available(self, word, now)
    }
    fn until_full(&self, word: u64, now: Instant) -> Duration {
        RateLimitSettings::until_full(self, word, now)
    }
    fn settle(&self, word: u64, now: Instant) -> u64 {
        RateLimitSettings::settle(self, word, now.as_nanos())
    }
    fn idle(&self) -> Duration {
        self.idle
    }
    fn name(&self) -> &Name {
        &self.name
    }

    fn any(&self) -> super::limiter::AnyRule<'_> {
        super::limiter::AnyRule::Gcra(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        assert!(RateLimitSettings::builder("x").build().is_ok());
        assert_eq!(
            RateLimitSettings::builder("x").build(),
            Ok(RateLimitSettings::defaults("x"))
        );
    }
}
