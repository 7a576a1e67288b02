//! Rate limiting, per stream: a GCRA limiter (the default) and, for parity with document 004's
//! shipped stream limiter, a window-with-cooldown limiter; each as a single-threaded `&mut` form,
//! a lock-free shared form, and a fixed-capacity keyed form that keeps one limiter per key.
//!
//! # GCRA
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
//! one 64-bit word: a `Cell<u64>` in [`RateLimiter`], an atomic in [`SharedRateLimiter`],
//! installed by load / pure step / compare-exchange, like governor's GCRA. A zeroed word is a
//! full limiter, so the shared form can live in a `static`.
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
//!
//! # Window with cooldown (document 004)
//! Whizbang's `StreamRateLimiter` catches runaway event loops per stream: the first event opens a
//! window (1 minute by default) in which up to 50 events pass; the event that would exceed the
//! limit is refused and pauses the stream for a cooldown (30 s), during which every event is
//! refused with the remaining cooldown as `retry_after`; after the cooldown the next event opens
//! a fresh window. A window that runs out without being exceeded simply ends (no cooldown), and
//! like the original's, a window still holds at the very instant it ends. Its state (window
//! start and count, or the end of the cooldown) is one word as well. A cooldown ends exactly when
//! it has lasted its length (its end is kept in nanoseconds for the first 2^62 ns of the clock);
//! a window's start is kept in whole milliseconds, rounded up, so a window is never served short,
//! nor more than 1 ms long.
//!
//! # Keyed forms
//! [`KeyedLimiter`] (with the aliases [`KeyedRateLimiter`] and [`KeyedWindowLimiter`]) keeps a
//! limiter per key in a fixed-capacity open-addressing table: no allocation, `N` slots fixed at
//! compile time. It stores each key itself, so two keys never share a limiter, and a 32-bit tag
//! of its hash. When a new key finds the table full, the least recently used *idle* key is
//! evicted: one whose limiter is back to full (GCRA: the TAT has passed; window form: no window
//! open, no cooldown) and that nobody has asked about for the idle period (5 minutes by
//! default). An idle limiter is indistinguishable from a new one, so eviction never changes a
//! decision. When no key is idle, the new key is refused with [`KeyedLimitError::Full`], never by
//! evicting a key in use.
//!
//! # Memory
//! The state of a limiter is one 8-byte word; the rest is its settings (80 bytes for a GCRA
//! limiter on a 64-bit host, 72 for the window form, the 40-byte [`Name`] among them): a
//! [`RateLimiter`] or [`SharedRateLimiter`] is 88 bytes, a window limiter 80. A keyed table holds
//! the settings once, plus per slot the key, its state word, its last-use time and a 4-byte hash
//! tag: 32 bytes a slot for `u64` keys, 24 for `u32`, 40 for 16-byte stream ids.
//!
//! # A clock that steps back
//! A reading earlier than the state's own time is taken for a late reading of the same clock
//! (another thread read it first) while it lies within 1 s: no time has passed, nothing is
//! undone, and a refusal's `retry_after` counts from that reading. Further back, the clock was
//! reset: the state is moved to the new reading as the emptiest it could have been (GCRA: no cell
//! left, one more after `T`; window: the window or cooldown restarts from the reading), so a
//! limiter is never locked out for as long as the clock jumped back. The bound above holds on
//! either clock; across the jump, a limiter may hand out at most one burst early. (A thread of
//! the shared form that stalls for over a second between reading the clock and deciding looks
//! like a reset clock too, with the same bound.)
//!
//! # Microcontrollers
//! The shared forms need 64-bit compare-and-swap; on chips without it (thumbv6m, thumbv7m,
//! riscv32imc) portable-atomic's fallback is a spinlock an interrupt can deadlock. There, share
//! the `&mut` forms behind a mutex instead (as the embassy adapter does for the breaker).

use core::cell::Cell;
use core::fmt;
use core::hash::{BuildHasher, Hash, Hasher};
use core::num::NonZeroU32;

use crate::call::Admission;
use crate::call::Permit;
use crate::error::{Bound, Field, RefusalReason, Refused, SettingsError};
use crate::event::Event;
use crate::limits::probe::{self, ProbeSlots};
use crate::loom::AtomicU64;
use crate::name::Name;
use crate::outcome::Outcome;
use crate::packed::{
    const_unless_loom, field, mask, pack_instant, put, unpack_instant, word, Word,
};
use crate::time::{Duration, Instant};

// The settings fields the limiters' errors name.
const FIELD_CELLS: Field = Field::Rate;
const FIELD_PERIOD: Field = Field::Period;
const FIELD_BURST: Field = Field::Burst;
const FIELD_EVENTS: Field = Field::WindowEvents;
const FIELD_WINDOW: Field = Field::Window;
const FIELD_COOLDOWN: Field = Field::Cooldown;

const NANOS_PER_MILLI: u64 = 1_000_000;

/// How far behind the state's time a reading may lie and still be taken for a late reading of
/// the same clock (a racing thread) rather than a clock that stepped back (see the module docs).
const LATE_READING_NS: u64 = 1_000_000_000;

/// The default idle period of a keyed limiter's entries (document 004's stale-entry timeout).
const DEFAULT_IDLE: Duration = Duration::from_secs(5 * 60);

/// The most events a window-with-cooldown limiter can count in one window (18 bits of its
/// state word).
pub const MAX_WINDOW_EVENTS: u32 = (1 << COUNT_BITS) - 1;

const fn limited(retry_after: Duration) -> Refused {
    Refused {
        reason: RefusalReason::RateLimited,
        retry_after,
    }
}

// ---------------------------------------------------------------------------------------------
// GCRA settings

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

// ---------------------------------------------------------------------------------------------
// Window-with-cooldown settings and state

/// The settings of a window-with-cooldown limiter (document 004's per-stream limiter), its name
/// included. Built with [`WindowLimitSettings::builder`], validated, immutable after.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | events | 50 | events a window admits; the next one starts the cooldown |
/// | window | 1 minute | opened by the first event; still holds at its last instant |
/// | cooldown | 30 s | every event is refused for this long once a window is exceeded |
/// | idle | 5 minutes | keyed forms: quiet time before a settled key may be evicted |
///
/// Unlike the original, a zero cooldown is refused (the original then admits everything, which a
/// limiter should not do silently); the shortest is 1 ms.
///
/// ```
/// use stormguard_core::{Duration, limits::WindowLimitSettings};
/// const STREAMS: WindowLimitSettings = WindowLimitSettings::defaults("streams");
/// assert_eq!(STREAMS.events(), 50);
/// assert_eq!(STREAMS.window(), Duration::from_secs(60));
/// assert_eq!(STREAMS.cooldown(), Duration::from_secs(30));
/// assert_eq!(STREAMS.idle(), Duration::from_secs(300));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct WindowLimitSettings {
    name: Name,
    events: u32,
    window: Duration,
    cooldown: Duration,
    idle: Duration,
}

/// Builds a [`WindowLimitSettings`]; every method is `const`.
///
/// ```
/// use stormguard_core::{Duration, limits::WindowLimitSettings};
/// let s = WindowLimitSettings::builder("projections")
///     .events(5)
///     .window(Duration::from_secs(2))
///     .cooldown(Duration::from_secs(1))
///     .build()?;
/// assert_eq!(s.to_string(), "5 per 2s, then a 1s cooldown");
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WindowLimitSettingsBuilder {
    settings: WindowLimitSettings,
}

impl WindowLimitSettings {
    /// A builder holding the defaults (50 per minute, 30 s cooldown, idle 5 minutes).
    pub const fn builder(name: &'static str) -> WindowLimitSettingsBuilder {
        WindowLimitSettingsBuilder::defaults(Name::new(name))
    }

    /// A builder holding the defaults, for a limiter whose name came from elsewhere.
    pub const fn builder_named(name: Name) -> WindowLimitSettingsBuilder {
        WindowLimitSettingsBuilder::defaults(name)
    }

    /// Every default, for a limiter called `name`.
    #[must_use]
    pub const fn defaults(name: &'static str) -> WindowLimitSettings {
        WindowLimitSettingsBuilder::defaults(Name::new(name)).settings
    }

    /// The limiter's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.name
    }

    /// Events a window admits.
    #[must_use]
    pub const fn events(&self) -> u32 {
        self.events
    }

    /// How long a window lasts from its first event.
    #[must_use]
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// How long every event is refused once a window is exceeded.
    #[must_use]
    pub const fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// How long a settled key must stay quiet before a keyed limiter may evict it.
    #[must_use]
    pub const fn idle(&self) -> Duration {
        self.idle
    }

    /// The state once a clock that stepped back further than a late reading is accounted for.
    fn settle(&self, state: WindowState, now: Instant) -> WindowState {
        let late = now.as_nanos().saturating_add(LATE_READING_NS);
        match state {
            WindowState::Open { count, start_ms } if count > 0 && ms_to_ns(start_ms) > late => {
                WindowState::Open {
                    count,
                    start_ms: ceil_ms(now),
                }
            }
            WindowState::Cooling { until }
                if cooldown_end(until) > late.saturating_add(self.cooldown.as_nanos()) =>
            {
                WindowState::Cooling {
                    until: cooldown_until(now, self.cooldown),
                }
            }
            other => other,
        }
    }

    /// `true` once the window that opened at `start_ms` is over: strictly after its last instant.
    fn window_over(&self, start_ms: u64, now: Instant) -> bool {
        match self.window_end(start_ms) {
            Some(end) => now.as_nanos() > end,
            None => false,
        }
    }

    fn window_end(&self, start_ms: u64) -> Option<u64> {
        match start_ms.checked_mul(NANOS_PER_MILLI) {
            Some(start) => start.checked_add(self.window.as_nanos()),
            None => None,
        }
    }

    /// The window rule: the decision for `n` events at `now`, and the state after it.
    fn decide(&self, word: u64, now: Instant, n: u32) -> (Result<(), Refused>, u64) {
        if n == 0 {
            return (Ok(()), word);
        }
        if n > self.events {
            return (Err(limited(Duration::MAX)), word);
        }
        let state = self.settle(WindowState::unpack(word), now);
        match state {
            WindowState::Cooling { until } if !cooldown_over(until, now) => {
                (Err(limited(remaining(until, now))), state.pack())
            }
            WindowState::Open { count, start_ms }
                if count > 0 && !self.window_over(start_ms, now) =>
            {
                let total = count.saturating_add(n);
                if total <= self.events {
                    let next = WindowState::Open {
                        count: total,
                        start_ms,
                    };
                    (Ok(()), next.pack())
                } else {
                    let until = cooldown_until(now, self.cooldown);
                    let next = WindowState::Cooling { until };
                    (Err(limited(remaining(until, now))), next.pack())
                }
            }
            // No window open, the window is over, or the cooldown is: a fresh window.
            _ => {
                let next = WindowState::Open {
                    count: n,
                    start_ms: ceil_ms(now),
                };
                (Ok(()), next.pack())
            }
        }
    }

    fn available(&self, word: u64, now: Instant) -> u32 {
        match self.settle(WindowState::unpack(word), now) {
            WindowState::Cooling { until } if !cooldown_over(until, now) => 0,
            WindowState::Open { count, start_ms }
                if count > 0 && !self.window_over(start_ms, now) =>
            {
                self.events.saturating_sub(count)
            }
            _ => self.events,
        }
    }

    fn until_full(&self, word: u64, now: Instant) -> Duration {
        match self.settle(WindowState::unpack(word), now) {
            WindowState::Cooling { until } => remaining(until, now),
            WindowState::Open { count, start_ms } if count > 0 => match self.window_end(start_ms) {
                // Over one nanosecond after its last instant.
                Some(end) => {
                    Duration::from_nanos(end.saturating_add(1)).saturating_sub(now.since_epoch())
                }
                None => Duration::MAX,
            },
            WindowState::Open { .. } => Duration::ZERO,
        }
    }
}

impl WindowLimitSettingsBuilder {
    const fn defaults(name: Name) -> WindowLimitSettingsBuilder {
        WindowLimitSettingsBuilder {
            settings: WindowLimitSettings {
                name,
                // Document 004's defaults: a runaway loop is slowed (50 events, then a 30 s
                // pause, then 50 more), never blocked for good.
                events: 50,
                window: Duration::from_secs(60),
                cooldown: Duration::from_secs(30),
                idle: DEFAULT_IDLE,
            },
        }
    }

    /// Renames the limiter.
    pub const fn name(mut self, name: Name) -> Self {
        self.settings.name = name;
        self
    }

    /// Events a window admits (default 50; at least 1, at most [`MAX_WINDOW_EVENTS`]).
    pub const fn events(mut self, events: u32) -> Self {
        self.settings.events = events;
        self
    }

    /// How long a window lasts from its first event (default 1 minute; at least 1 ms).
    pub const fn window(mut self, window: Duration) -> Self {
        self.settings.window = window;
        self
    }

    /// How long every event is refused once a window is exceeded (default 30 s; at least 1 ms).
    pub const fn cooldown(mut self, cooldown: Duration) -> Self {
        self.settings.cooldown = cooldown;
        self
    }

    /// How long a settled key must stay quiet before a keyed limiter may evict it (default 5
    /// minutes).
    pub const fn idle(mut self, idle: Duration) -> Self {
        self.settings.idle = idle;
        self
    }

    /// Checks every bound and returns the settings, or the first setting at fault.
    pub const fn build(self) -> Result<WindowLimitSettings, SettingsError> {
        if let Err(e) = SettingsError::check_name(&self.settings.name) {
            return Err(e);
        }
        let s = self.settings;
        if s.events == 0 {
            return Err(SettingsError::new(FIELD_EVENTS, Bound::AtLeast(1)));
        }
        if s.events > MAX_WINDOW_EVENTS {
            return Err(SettingsError::new(
                FIELD_EVENTS,
                Bound::AtMost(MAX_WINDOW_EVENTS as u64),
            ));
        }
        let ms = Duration::from_millis(1);
        if s.window.as_nanos() < ms.as_nanos() {
            return Err(SettingsError::new(FIELD_WINDOW, Bound::AtLeastDuration(ms)));
        }
        if s.cooldown.as_nanos() < ms.as_nanos() {
            return Err(SettingsError::new(
                FIELD_COOLDOWN,
                Bound::AtLeastDuration(ms),
            ));
        }
        Ok(s)
    }
}

impl fmt::Display for WindowLimitSettings {
    /// E.g. `50 per 60s, then a 30s cooldown`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {}, then a {} cooldown",
            self.events, self.window, self.cooldown
        )
    }
}

const MS_BITS: u32 = 45;
const COUNT_AT: u32 = MS_BITS;
const COUNT_BITS: u32 = 18;
const TAG_AT: u32 = 63;
/// The bits of a cooling state's end: all but the tag.
const UNTIL_BITS: u32 = TAG_AT;
/// A cooldown that ends past [`Instant::MAX`]: never.
const NEVER: u64 = mask(UNTIL_BITS);

/// A window-with-cooldown limiter's state, packed losslessly into one word: bit 63 tells which.
/// An open window: bits 45..63 hold the count and bits 0..45 its start in whole milliseconds
/// since the epoch (45 bits hold every [`Instant`], so nothing wraps). Cooling: bits 0..63 hold
/// its end (see [`pack_instant`]). The zeroed word is "no window open".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WindowState {
    /// A window opened at `start_ms` (rounded up) holding `count` events; none open when 0.
    Open { count: u32, start_ms: u64 },
    /// Every event is refused until `until` (packed by [`cooldown_until`]); [`NEVER`] past the
    /// end of time.
    Cooling { until: u64 },
}

impl WindowState {
    const fn pack(self) -> u64 {
        match self {
            WindowState::Open { count, start_ms } => {
                put(count as u64, COUNT_AT, COUNT_BITS) | put(start_ms, 0, MS_BITS)
            }
            WindowState::Cooling { until } => put(1, TAG_AT, 1) | put(until, 0, UNTIL_BITS),
        }
    }

    const fn unpack(word: u64) -> WindowState {
        if field(word, TAG_AT, 1) == 1 {
            WindowState::Cooling {
                until: field(word, 0, UNTIL_BITS),
            }
        } else {
            WindowState::Open {
                count: field(word, COUNT_AT, COUNT_BITS) as u32,
                start_ms: field(word, 0, MS_BITS),
            }
        }
    }
}

/// The millisecond at or after `now` (45 bits hold it for every instant).
const fn ceil_ms(now: Instant) -> u64 {
    now.as_nanos().div_ceil(NANOS_PER_MILLI)
}

/// The end of a cooldown of `d` from `now`, packed (exact for the first 2^62 ns of the clock,
/// then the first whole microsecond at or after it), or [`NEVER`] past the end of time.
const fn cooldown_until(now: Instant, d: Duration) -> u64 {
    match now.checked_add(d) {
        Some(end) => pack_instant(end, UNTIL_BITS, true),
        None => NEVER,
    }
}

/// When a cooldown ends, in ns since the epoch ([`u64::MAX`] for never).
const fn cooldown_end(until: u64) -> u64 {
    if until == NEVER {
        u64::MAX
    } else {
        unpack_instant(until, UNTIL_BITS).as_nanos()
    }
}

const fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(NANOS_PER_MILLI)
}

fn cooldown_over(until: u64, now: Instant) -> bool {
    until != NEVER && now.as_nanos() >= cooldown_end(until)
}

fn remaining(until: u64, now: Instant) -> Duration {
    if until == NEVER {
        Duration::MAX
    } else {
        Duration::from_nanos(cooldown_end(until).saturating_sub(now.as_nanos()))
    }
}

// ---------------------------------------------------------------------------------------------
// The rules, behind one trait, and the limiter over some storage

mod sealed {
    use crate::error::Refused;
    use crate::name::Name;
    use crate::time::{Duration, Instant};

    /// The rule of a limiter: what a state word means and how a request changes it. Every form
    /// (`&mut`, shared, keyed) drives these pure functions; none is written twice.
    pub trait Rule: Copy {
        /// The decision for `n` cells at `now`, and the word after it.
        fn decide(&self, word: u64, now: Instant, n: u32) -> (Result<(), Refused>, u64);
        /// Cells a request at `now` could take.
        fn available(&self, word: u64, now: Instant) -> u32;
        /// Time from `now` until the state is as good as new (zero if it is).
        fn until_full(&self, word: u64, now: Instant) -> Duration;
        /// The word once a clock that stepped back is accounted for (what a request would store).
        fn settle(&self, word: u64, now: Instant) -> u64;
        /// The quiet time before a keyed entry may be evicted.
        fn idle(&self) -> Duration;
        /// The limiter's name.
        fn name(&self) -> &Name;
    }
}

/// The settings of a kind of limiter: [`RateLimitSettings`] (GCRA) or [`WindowLimitSettings`]
/// (window with cooldown). It picks the rule a [`KeyedLimiter`] applies to each key; it is
/// sealed, so only these two implement it.
///
/// ```
/// use stormguard_core::{limits::KeyedLimiter, limits::LimitRule, limits::RateLimitSettings, limits::WindowLimitSettings};
/// fn table<R: LimitRule>(rule: R) -> KeyedLimiter<u64, R, 64> {
///     KeyedLimiter::new(rule)
/// }
/// let gcra = table(RateLimitSettings::defaults("api"));
/// let window = table(WindowLimitSettings::defaults("streams"));
/// assert_eq!(gcra.capacity() + window.capacity(), 128);
/// ```
pub trait LimitRule: sealed::Rule {}

impl LimitRule for RateLimitSettings {}
impl LimitRule for WindowLimitSettings {}

impl sealed::Rule for RateLimitSettings {
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
}

impl sealed::Rule for WindowLimitSettings {
    #[inline]
    fn decide(&self, word: u64, now: Instant, n: u32) -> (Result<(), Refused>, u64) {
        WindowLimitSettings::decide(self, word, now, n)
    }
    fn available(&self, word: u64, now: Instant) -> u32 {
        WindowLimitSettings::available(self, word, now)
    }
    fn until_full(&self, word: u64, now: Instant) -> Duration {
        WindowLimitSettings::until_full(self, word, now)
    }
    fn settle(&self, word: u64, now: Instant) -> u64 {
        WindowLimitSettings::settle(self, WindowState::unpack(word), now).pack()
    }
    fn idle(&self) -> Duration {
        self.idle
    }
    fn name(&self) -> &Name {
        &self.name
    }
}

/// A limiter over some storage: one word, a `Cell` in the `&mut` forms and an atomic in the
/// shared ones, both driven by the same rule through load / step / compare-exchange.
#[derive(Clone, Debug)]
struct LimiterCore<W, R> {
    rule: R,
    word: W,
}

impl<W: Word, R: sealed::Rule> LimiterCore<W, R> {
    const_unless_loom! {
        fn new(rule: R) -> LimiterCore<W, R> {
            LimiterCore { rule, word: word!(W) }
        }
    }

    #[inline]
    fn check_n(&self, now: Instant, n: u32) -> Result<(), Refused> {
        let mut result = Ok(());
        self.word.update(|w| {
            let (r, next) = self.rule.decide(w, now, n);
            result = r;
            next
        });
        result
    }

    fn available(&self, now: Instant) -> u32 {
        self.rule.available(self.word.get(), now)
    }
}

// ---------------------------------------------------------------------------------------------
// The single limiters

/// A GCRA rate limiter, single-threaded (`&mut self`): ask it before each request.
///
/// [`check`](RateLimiter::check) takes a cell or refuses with [`RefusalReason::RateLimited`] and
/// the exact time until one is available. (Unlike [`Breaker::check`](crate::Breaker::check),
/// which only looks, a limiter's `check` consumes.) Reading ([`available`](RateLimiter::available))
/// changes nothing.
///
/// ```
/// use stormguard_core::{Duration, Instant, limits::RateLimiter, limits::RateLimitSettings, RefusalReason};
///
/// let mut limiter = RateLimiter::new(RateLimitSettings::per_second("search", 10)?);
/// let now = Instant::from_secs(1);
/// for _ in 0..10 {
///     limiter.check(now).expect("a full burst passes at once");
/// }
/// let refused = limiter.check(now).unwrap_err();
/// assert_eq!(refused.reason, RefusalReason::RateLimited);
/// assert_eq!(refused.retry_after, Duration::from_millis(100));
/// assert!(limiter.check(now + refused.retry_after).is_ok());
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Debug)]
pub struct RateLimiter {
    core: LimiterCore<Cell<u64>, RateLimitSettings>,
}

impl RateLimiter {
    const_unless_loom! {
        /// A full limiter. It needs no clock reading: time counts from the `now` it is given.
        #[must_use]
        pub fn new(settings: RateLimitSettings) -> RateLimiter {
            RateLimiter { core: LimiterCore::new(settings) }
        }
    }

    /// Takes one cell at `now`, or refuses with the time until one is available.
    #[inline]
    pub fn check(&mut self, now: Instant) -> Result<(), Refused> {
        self.core.check_n(now, 1)
    }

    /// Takes `n` cells at once, or none: refused with the time until all `n` are available
    /// ([`Duration::MAX`] when `n` is more than the burst). Zero cells always pass.
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant, limits::RateLimiter, limits::RateLimitSettings};
    /// let mut limiter = RateLimiter::new(RateLimitSettings::per_second("bytes", 1000)?);
    /// let now = Instant::ZERO;
    /// limiter.check_n(now, 600)?;
    /// assert_eq!(limiter.check_n(now, 600).unwrap_err().retry_after, Duration::from_millis(200));
    /// assert_eq!(limiter.check_n(now, 1001).unwrap_err().retry_after, Duration::MAX);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n(&mut self, now: Instant, n: u32) -> Result<(), Refused> {
        self.core.check_n(now, n)
    }

    /// Cells a request at `now` could take.
    #[must_use]
    pub fn available(&self, now: Instant) -> u32 {
        self.core.available(now)
    }

    /// The settings the limiter was built with.
    #[must_use]
    pub const fn settings(&self) -> &RateLimitSettings {
        &self.core.rule
    }

    /// The limiter's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.core.rule.name
    }
}

/// A GCRA rate limiter shared by many threads through `&self`, lock-free: one atomic word driven
/// by the rule of [`RateLimiter`], so both decide identically for any sequential input.
///
/// ```
/// use stormguard_core::{Instant, limits::RateLimitSettings, limits::SharedRateLimiter};
///
/// static UPLOADS: SharedRateLimiter = SharedRateLimiter::new(RateLimitSettings::defaults("uploads"));
///
/// let now = Instant::from_secs(1);
/// assert!(UPLOADS.check(now).is_ok());
/// assert_eq!(UPLOADS.available(now), 49);
/// ```
#[derive(Debug)]
pub struct SharedRateLimiter {
    core: LimiterCore<AtomicU64, RateLimitSettings>,
}

impl SharedRateLimiter {
    const_unless_loom! {
        /// A full limiter; usable in a `static`.
        #[must_use]
        pub fn new(settings: RateLimitSettings) -> SharedRateLimiter {
            SharedRateLimiter { core: LimiterCore::new(settings) }
        }
    }

    /// Takes one cell at `now`, or refuses with the time until one is available.
    #[inline]
    pub fn check(&self, now: Instant) -> Result<(), Refused> {
        self.core.check_n(now, 1)
    }

    /// Takes `n` cells at once, or none (see [`RateLimiter::check_n`]).
    #[inline]
    pub fn check_n(&self, now: Instant, n: u32) -> Result<(), Refused> {
        self.core.check_n(now, n)
    }

    /// Cells a request at `now` could take.
    #[must_use]
    pub fn available(&self, now: Instant) -> u32 {
        self.core.available(now)
    }

    /// The settings the limiter was built with.
    #[must_use]
    pub const fn settings(&self) -> &RateLimitSettings {
        &self.core.rule
    }

    /// The limiter's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.core.rule.name
    }
}

/// Document 004's per-stream limiter for one stream, single-threaded (`&mut self`): up to
/// `events` per window, then a cooldown.
///
/// ```
/// use stormguard_core::{Duration, Instant, limits::WindowLimiter, limits::WindowLimitSettings};
///
/// let mut stream = WindowLimiter::new(WindowLimitSettings::defaults("orders"));
/// let now = Instant::from_secs(1);
/// for _ in 0..50 {
///     stream.check(now).expect("50 events per window");
/// }
/// let refused = stream.check(now).unwrap_err();
/// assert_eq!(refused.retry_after, Duration::from_secs(30)); // the cooldown
/// let later = now + Duration::from_secs(10);
/// assert_eq!(stream.check(later).unwrap_err().retry_after, Duration::from_secs(20));
/// assert!(stream.check(now + Duration::from_secs(30)).is_ok()); // a fresh window
/// ```
#[derive(Clone, Debug)]
pub struct WindowLimiter {
    core: LimiterCore<Cell<u64>, WindowLimitSettings>,
}

impl WindowLimiter {
    const_unless_loom! {
        /// A limiter with no window open.
        #[must_use]
        pub fn new(settings: WindowLimitSettings) -> WindowLimiter {
            WindowLimiter { core: LimiterCore::new(settings) }
        }
    }

    /// Counts one event at `now`, or refuses it: during a cooldown with the cooldown's remaining
    /// time; the event that exceeds a window starts the cooldown and gets all of it.
    #[inline]
    pub fn check(&mut self, now: Instant) -> Result<(), Refused> {
        self.core.check_n(now, 1)
    }

    /// Counts `n` events at once, or none: a batch that does not fit in the window starts the
    /// cooldown ([`Duration::MAX`] and no cooldown when `n` is more than a window holds).
    #[inline]
    pub fn check_n(&mut self, now: Instant, n: u32) -> Result<(), Refused> {
        self.core.check_n(now, n)
    }

    /// Events a request at `now` could count.
    #[must_use]
    pub fn available(&self, now: Instant) -> u32 {
        self.core.available(now)
    }

    /// The settings the limiter was built with.
    #[must_use]
    pub const fn settings(&self) -> &WindowLimitSettings {
        &self.core.rule
    }

    /// The limiter's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.core.rule.name
    }
}

/// Document 004's per-stream limiter for one stream, shared by many threads through `&self`,
/// lock-free: one atomic word driven by the rule of [`WindowLimiter`].
///
/// ```
/// use stormguard_core::{Instant, limits::SharedWindowLimiter, limits::WindowLimitSettings};
///
/// static EVENTS: SharedWindowLimiter = SharedWindowLimiter::new(WindowLimitSettings::defaults("events"));
/// assert!(EVENTS.check(Instant::from_secs(1)).is_ok());
/// assert_eq!(EVENTS.available(Instant::from_secs(1)), 49);
/// ```
#[derive(Debug)]
pub struct SharedWindowLimiter {
    core: LimiterCore<AtomicU64, WindowLimitSettings>,
}

impl SharedWindowLimiter {
    const_unless_loom! {
        /// A limiter with no window open; usable in a `static`.
        #[must_use]
        pub fn new(settings: WindowLimitSettings) -> SharedWindowLimiter {
            SharedWindowLimiter { core: LimiterCore::new(settings) }
        }
    }

    /// Counts one event at `now`, or refuses it (see [`WindowLimiter::check`]).
    #[inline]
    pub fn check(&self, now: Instant) -> Result<(), Refused> {
        self.core.check_n(now, 1)
    }

    /// Counts `n` events at once, or none (see [`WindowLimiter::check_n`]).
    #[inline]
    pub fn check_n(&self, now: Instant, n: u32) -> Result<(), Refused> {
        self.core.check_n(now, n)
    }

    /// Events a request at `now` could count.
    #[must_use]
    pub fn available(&self, now: Instant) -> u32 {
        self.core.available(now)
    }

    /// The settings the limiter was built with.
    #[must_use]
    pub const fn settings(&self) -> &WindowLimitSettings {
        &self.core.rule
    }

    /// The limiter's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.core.rule.name
    }
}

// ---------------------------------------------------------------------------------------------
// A limiter in front of a breaker, for the call driver

/// A rate limiter as the call driver sees it: one cell per attempt. Implemented by every single
/// limiter, `&mut` and shared, so [`RateLimited`] serves both forms.
///
/// ```
/// use stormguard_core::{Instant, limits::Limit, limits::RateLimiter, limits::RateLimitSettings, limits::SharedRateLimiter};
///
/// fn one_attempt(limit: &mut impl Limit) -> bool {
///     limit.take(Instant::ZERO).is_ok()
/// }
/// let shared = SharedRateLimiter::new(RateLimitSettings::per_second("api", 1)?);
/// assert!(one_attempt(&mut &shared));
/// assert!(!one_attempt(&mut &shared));
/// assert!(one_attempt(&mut RateLimiter::new(RateLimitSettings::per_second("api", 1)?)));
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
pub trait Limit {
    /// Takes one cell at `now`, or refuses with the time until one is available.
    fn take(&mut self, now: Instant) -> Result<(), Refused>;
    /// Would a cell be granted at `now`? Changes nothing.
    fn peek(&self, now: Instant) -> Result<(), Refused>;
    /// Whether there is a limiter at all: `false` for an absent one (`None`), so that a
    /// [`RateLimited`] in front of a breaker admits exactly as the breaker alone does.
    fn is_present(&self) -> bool {
        true
    }
}

/// A part that may be absent: no limiter grants every cell.
impl<L: Limit> Limit for Option<L> {
    #[inline]
    fn take(&mut self, now: Instant) -> Result<(), Refused> {
        match self {
            Some(l) => l.take(now),
            None => Ok(()),
        }
    }
    #[inline]
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        match self {
            Some(l) => l.peek(now),
            None => Ok(()),
        }
    }
    #[inline]
    fn is_present(&self) -> bool {
        self.as_ref().is_some_and(Limit::is_present)
    }
}

impl<W: Word, R: sealed::Rule> LimiterCore<W, R> {
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        self.rule.decide(self.word.get(), now, 1).0
    }
}

macro_rules! limit_for {
    ($($ty:ty),*) => {$(
        impl Limit for $ty {
            #[inline]
            fn take(&mut self, now: Instant) -> Result<(), Refused> {
                self.core.check_n(now, 1)
            }
            fn peek(&self, now: Instant) -> Result<(), Refused> {
                self.core.peek(now)
            }
        }
    )*};
}
limit_for!(
    RateLimiter,
    WindowLimiter,
    &SharedRateLimiter,
    &SharedWindowLimiter
);

impl<L: Limit + ?Sized> Limit for &mut L {
    fn take(&mut self, now: Instant) -> Result<(), Refused> {
        (**self).take(now)
    }
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        (**self).peek(now)
    }
    fn is_present(&self) -> bool {
        (**self).is_present()
    }
}

/// A rate limiter in front of a breaker (or [`Unguarded`](crate::call::Unguarded)), as one
/// [`Admission`] for the call driver: every attempt, retries included, takes a cell. A refusal
/// carries [`RefusalReason::RateLimited`] and the exact time until the next cell. The driver
/// treats it as a self-imposed throttle: with attempts left it waits that long, later by a draw
/// of up to the backoff's base so that callers refused together come back apart (capped by the
/// backoff's maximum: [`Backoff::after_local_refusal`](crate::call::Backoff::after_local_refusal)),
/// and tries again, charging nothing to the budget; only when no retry fits
/// (attempts or deadline) does it serve a guarded rejection like any other (the pause, capped by
/// the deadline, then the refusal with that `retry_after`).
///
/// The breaker is asked first whether it would admit (a look that changes nothing), so an open
/// breaker does not spend the limiter's cells; then the limiter takes its cell; then the breaker
/// admits. A cell is not given back if the breaker refuses in between (another thread opened it):
/// the limiter may then run slightly under its rate, never over. Events carry the breaker's name.
///
/// ```
/// use stormguard_core::{
///     Call, CallSettings, Duration, Instant, Name, Parts, limits::RateLimited, limits::RateLimiter,
///     limits::RateLimitSettings, RefusalReason, Step, call::Unguarded, call::Unlimited,
/// };
///
/// let limiter = RateLimiter::new(RateLimitSettings::per_second("search", 1)?);
/// let mut parts = Parts {
///     breaker: RateLimited::new(Unguarded(Name::new("search")), limiter),
///     budget: Unlimited,
/// };
/// let now = Instant::from_secs(1);
/// let mut first = Call::begin(&CallSettings::DEFAULT, now);
/// assert!(matches!(first.poll(&mut parts, now, &mut |_| {}), Step::Attempt(_)));
///
/// // A second call waits for the next cell, a second away (and up to the backoff's base more)...
/// let mut second = Call::begin(&CallSettings::DEFAULT, now);
/// let Step::Wait(wait) = second.poll(&mut parts, now, &mut |_| {}) else { panic!() };
/// let base = CallSettings::DEFAULT.backoff().base();
/// assert!(wait >= Duration::from_secs(1) && wait <= Duration::from_secs(1) + base);
///
/// // ...and one with no retry left is the guarded rejection.
/// let once = CallSettings::builder().max_attempts(1).build()?;
/// let mut third = Call::begin(&once, now);
/// let Step::Reject(r) = third.poll(&mut parts, now, &mut |_| {}) else { panic!() };
/// assert_eq!(r.reason, RefusalReason::RateLimited);
/// assert_eq!(r.pause, stormguard_core::GUARD_PAUSE);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RateLimited<A, L> {
    breaker: A,
    limiter: L,
}

impl<A, L> RateLimited<A, L> {
    /// `limiter` in front of `breaker`.
    pub const fn new(breaker: A, limiter: L) -> Self {
        RateLimited { breaker, limiter }
    }

    /// The breaker behind the limiter.
    pub const fn breaker(&self) -> &A {
        &self.breaker
    }

    /// The breaker behind the limiter.
    pub fn breaker_mut(&mut self) -> &mut A {
        &mut self.breaker
    }

    /// The limiter.
    pub const fn limiter(&self) -> &L {
        &self.limiter
    }

    /// The limiter.
    pub fn limiter_mut(&mut self) -> &mut L {
        &mut self.limiter
    }

    /// The two parts.
    pub fn into_parts(self) -> (A, L) {
        (self.breaker, self.limiter)
    }
}

impl<A: Admission, L: Limit> Admission for RateLimited<A, L> {
    forward_breaker_readings!(breaker);

    fn try_acquire(
        &mut self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        if !self.limiter.is_present() {
            // No limiter: the breaker alone. Asking it first would put its refusal before that
            // of a bulkhead behind this wrapper.
            return self.breaker.try_acquire(now, attempt_timeout, events);
        }
        // The breaker is asked first so that a call it refuses spends no cell.
        if let Err(refused) = self.breaker.check(now) {
            if refused.reason != RefusalReason::RampShedding {
                return Err(refused);
            }
            // A recovery ramp sheds on a running credit that only asking moves on: a check
            // alone would shed every call until the ramp's end. The shed call spends no cell.
            let permit = self.breaker.try_acquire(now, attempt_timeout, events)?;
            return match self.limiter.take(now) {
                Ok(()) => Ok(permit),
                Err(limited) => {
                    self.breaker.release(permit);
                    Err(limited)
                }
            };
        }
        self.limiter.take(now)?;
        self.breaker.try_acquire(now, attempt_timeout, events)
    }

    fn check(&self, now: Instant) -> Result<(), Refused> {
        self.breaker.check(now)?;
        self.limiter.peek(now)
    }

    fn on_outcome(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        self.breaker.on_outcome(now, permit, outcome, events);
    }

    fn release(&mut self, permit: Permit) {
        self.breaker.release(permit);
    }
}

// ---------------------------------------------------------------------------------------------
// The keyed table

/// Why a [`KeyedLimiter`] refused.
///
/// ```
/// use stormguard_core::{Duration, Instant, limits::KeyedLimitError, limits::KeyedWindowLimiter, RefusalReason, Refused,
///     limits::WindowLimitSettings};
///
/// let mut streams: KeyedWindowLimiter<u32, 1> = KeyedWindowLimiter::new(WindowLimitSettings::defaults("s"));
/// let now = Instant::from_secs(1);
/// streams.check(&7, now)?;
/// let full = streams.check(&8, now).unwrap_err();
/// assert_eq!(full, KeyedLimitError::Full { retry_after: Duration::from_secs(300) });
/// // As a plain refusal, for the call driver and the guarded pause:
/// let refused: Refused = full.into();
/// assert_eq!(refused.reason, RefusalReason::RateLimited);
/// # Ok::<(), KeyedLimitError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum KeyedLimitError {
    /// The key's own limiter refused.
    Limited(Refused),
    /// The key is new, the table is full and no key in it is idle. `retry_after` is when the
    /// first one will be, if nobody asks about it meanwhile.
    Full {
        /// Time until a key in the table turns idle.
        retry_after: Duration,
    },
}

impl KeyedLimitError {
    /// How long until asking again may succeed.
    #[must_use]
    pub const fn retry_after(&self) -> Duration {
        match self {
            KeyedLimitError::Limited(r) => r.retry_after,
            KeyedLimitError::Full { retry_after } => *retry_after,
        }
    }

    /// The refusal as the call driver takes it: reason [`RefusalReason::RateLimited`] either way.
    #[must_use]
    pub const fn refused(&self) -> Refused {
        match self {
            KeyedLimitError::Limited(r) => *r,
            KeyedLimitError::Full { retry_after } => limited(*retry_after),
        }
    }
}

impl From<KeyedLimitError> for Refused {
    fn from(e: KeyedLimitError) -> Refused {
        e.refused()
    }
}

impl fmt::Display for KeyedLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedLimitError::Limited(r) => fmt::Display::fmt(r, f),
            KeyedLimitError::Full { retry_after } => write!(
                f,
                "rate limiter table full with no idle key, retry after {retry_after}"
            ),
        }
    }
}

impl core::error::Error for KeyedLimitError {}

const P0: u64 = 0x9E37_79B9_7F4A_7C15;
const P1: u64 = 0xD6E8_FEB8_6659_FD93;

/// Multiplies into 128 bits and folds the halves: a fast, well-mixing step.
#[inline]
const fn fold(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ (p.wrapping_shr(64) as u64)
}

/// The default hasher of a [`KeyedLimiter`]: seeded, allocation-free, and fast on integer keys
/// (two 64-bit multiplications for a `u64`). Give each process a secret seed
/// ([`KeyedLimiter::with_seed`]) when keys come from outside; for stronger protection against
/// keys chosen to collide, use a keyed hasher through [`KeyedLimiter::with_hasher`].
///
/// ```
/// use core::hash::BuildHasher;
/// use stormguard_core::limits::LimiterHashState;
/// let a = LimiterHashState::with_seed(1);
/// assert_eq!(a.hash_one(42u64), a.hash_one(42u64));
/// assert_ne!(a.hash_one(42u64), LimiterHashState::with_seed(2).hash_one(42u64));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LimiterHashState {
    seed: u64,
}

impl LimiterHashState {
    /// The fixed seed [`KeyedLimiter::new`] uses.
    pub const DEFAULT: LimiterHashState = LimiterHashState { seed: 0 };

    /// A hash state with its own seed.
    #[must_use]
    pub const fn with_seed(seed: u64) -> LimiterHashState {
        LimiterHashState { seed }
    }
}

impl Default for LimiterHashState {
    fn default() -> Self {
        LimiterHashState::DEFAULT
    }
}

impl BuildHasher for LimiterHashState {
    type Hasher = LimiterHasher;
    fn build_hasher(&self) -> LimiterHasher {
        LimiterHasher {
            state: self.seed ^ P0,
        }
    }
}

/// The hasher [`LimiterHashState`] builds.
///
/// ```
/// use core::hash::{BuildHasher, Hasher};
/// use stormguard_core::limits::LimiterHashState;
/// let mut h = LimiterHashState::DEFAULT.build_hasher();
/// h.write_u64(7);
/// assert_eq!(h.finish(), LimiterHashState::DEFAULT.hash_one(7u64));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct LimiterHasher {
    state: u64,
}

impl Hasher for LimiterHasher {
    #[inline]
    fn finish(&self) -> u64 {
        fold(self.state, P0)
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.state = fold(self.state ^ v, P1);
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            if let Some(dst) = buf.get_mut(..chunk.len()) {
                dst.copy_from_slice(chunk);
            }
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
}

/// One key's place in the table.
#[derive(Clone, Debug)]
struct Slot<K> {
    /// The high 32 bits of the key's hash (never zero): a quick filter while probing, and where
    /// the key's home slot comes from. Its niche makes an empty slot cost nothing extra.
    tag: NonZeroU32,
    /// When the key was last asked about, in nanoseconds since the epoch.
    last: u64,
    /// The key's limiter state.
    word: u64,
    key: K,
}

enum Probe {
    Found(usize),
    Vacant(usize),
    Full,
}

/// A limiter per key (stream, tenant, peer) in a fixed-capacity table: `N` slots, no allocation,
/// the rule `R` ([`RateLimitSettings`] or [`WindowLimitSettings`]) applied to each key on its own.
/// Use the aliases [`KeyedRateLimiter`] and [`KeyedWindowLimiter`].
///
/// Keys are stored whole and compared with `Eq`, so two keys never share a limiter. A new key
/// takes a free slot; in a full table it evicts the least recently used idle key (see the module
/// docs), and when none is idle it is refused with [`KeyedLimitError::Full`]. Lookups probe linearly
/// from the key's home slot and stay short while the table is under about three quarters full:
/// give it a quarter more slots than the keys you expect to be active at once, and call
/// [`evict_idle`](KeyedLimiter::evict_idle) now and then (every idle period, say) so that keys
/// long gone do not crowd it. A new key in a full table costs one pass over the table.
///
/// Single-threaded (`&mut self`); share it behind a mutex (the adapters do).
///
/// ```
/// use stormguard_core::{Instant, limits::KeyedRateLimiter, limits::RateLimitSettings, limits::KeyedLimitError};
///
/// let mut per_peer: KeyedRateLimiter<u64, 1024> =
///     KeyedRateLimiter::new(RateLimitSettings::per_second("peers", 2)?);
/// let now = Instant::from_secs(1);
/// per_peer.check(&1, now).unwrap();
/// per_peer.check(&1, now).unwrap();
/// assert!(matches!(per_peer.check(&1, now), Err(KeyedLimitError::Limited(_))));
/// assert!(per_peer.check(&2, now).is_ok()); // every key has its own limiter
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone)]
pub struct KeyedLimiter<K, R, const N: usize, S = LimiterHashState> {
    rule: R,
    hasher: S,
    len: usize,
    slots: [Option<Slot<K>>; N],
}

/// A GCRA limiter per key: see [`KeyedLimiter`].
pub type KeyedRateLimiter<K, const N: usize, S = LimiterHashState> =
    KeyedLimiter<K, RateLimitSettings, N, S>;

/// Document 004's per-stream limiter, a window with cooldown per key: see [`KeyedLimiter`].
///
/// ```
/// use stormguard_core::{Instant, limits::KeyedWindowLimiter, limits::WindowLimitSettings};
/// let mut streams: KeyedWindowLimiter<[u8; 16], 256> =
///     KeyedWindowLimiter::new(WindowLimitSettings::defaults("streams"));
/// let stream_id = [7u8; 16];
/// assert!(streams.check(&stream_id, Instant::from_secs(1)).is_ok());
/// assert_eq!(streams.available(&stream_id, Instant::from_secs(1)), 49);
/// ```
pub type KeyedWindowLimiter<K, const N: usize, S = LimiterHashState> =
    KeyedLimiter<K, WindowLimitSettings, N, S>;

impl<K, R: LimitRule, const N: usize> KeyedLimiter<K, R, N> {
    /// An empty table applying `rule` to every key, hashing with the fixed default seed; usable
    /// in a `const` or `static`.
    #[must_use]
    pub const fn new(rule: R) -> Self {
        KeyedLimiter::with_hasher(rule, LimiterHashState::DEFAULT)
    }

    /// An empty table whose hash is seeded with `seed` (give each process its own, secret one
    /// when keys come from outside).
    #[must_use]
    pub const fn with_seed(rule: R, seed: u64) -> Self {
        KeyedLimiter::with_hasher(rule, LimiterHashState::with_seed(seed))
    }
}

impl<K, R: LimitRule, const N: usize, S> KeyedLimiter<K, R, N, S> {
    /// An empty table hashing keys with `hasher` (any [`BuildHasher`]).
    #[must_use]
    pub const fn with_hasher(rule: R, hasher: S) -> Self {
        KeyedLimiter {
            rule,
            hasher,
            len: 0,
            slots: [const { None }; N],
        }
    }

    /// Keys in the table.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// `true` when no key is in the table.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys the table can hold (`N`).
    #[must_use]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// The rule applied to every key (its settings).
    #[must_use]
    pub const fn settings(&self) -> &R {
        &self.rule
    }

    /// The limiter's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        sealed::Rule::name(&self.rule)
    }
}

/// The last-use time after a request at `now`: a late reading changes nothing, a clock that
/// stepped back further restarts the quiet time from it.
#[inline]
const fn touched(last: u64, now: u64) -> u64 {
    if last > now.saturating_add(LATE_READING_NS) {
        now
    } else if last > now {
        last
    } else {
        now
    }
}

impl<K: Eq + Hash, R: LimitRule, const N: usize, S: BuildHasher> KeyedLimiter<K, R, N, S> {
    #[inline]
    fn tag(&self, key: &K) -> NonZeroU32 {
        let h = self.hasher.hash_one(key);
        NonZeroU32::new(h.wrapping_shr(32) as u32).unwrap_or(NonZeroU32::MIN)
    }

    #[inline]
    fn probe(&self, tag: NonZeroU32, key: &K) -> Probe {
        let mut i = probe::home(tag.get(), N);
        for _ in 0..N {
            match self.slots.get(i) {
                Some(Some(slot)) => {
                    if slot.tag == tag && slot.key == *key {
                        return Probe::Found(i);
                    }
                }
                Some(None) => return Probe::Vacant(i),
                None => return Probe::Full,
            }
            i = probe::next_slot(i, N);
        }
        Probe::Full
    }

    /// Takes one cell for `key` at `now` (see [`check_n`](KeyedLimiter::check_n)).
    #[inline]
    pub fn check(&mut self, key: &K, now: Instant) -> Result<(), KeyedLimitError>
    where
        K: Clone,
    {
        self.check_n(key, now, 1)
    }

    /// Takes `n` cells for `key` at `now`, or refuses: [`KeyedLimitError::Limited`] when the key's
    /// limiter says no, [`KeyedLimitError::Full`] when the key is new, the table is full and no key
    /// in it is idle. A new key is admitted as by a new limiter; a refused new key is not stored.
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant, limits::KeyedLimitError, limits::KeyedRateLimiter, limits::RateLimitSettings};
    /// let mut t: KeyedRateLimiter<&str, 8> = KeyedRateLimiter::new(RateLimitSettings::per_second("t", 4)?);
    /// let now = Instant::ZERO;
    /// t.check_n(&"bulk", now, 4).unwrap();
    /// let Err(KeyedLimitError::Limited(r)) = t.check_n(&"bulk", now, 2) else { panic!() };
    /// assert_eq!(r.retry_after, Duration::from_millis(500));
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn check_n(&mut self, key: &K, now: Instant, n: u32) -> Result<(), KeyedLimitError>
    where
        K: Clone,
    {
        let tag = self.tag(key);
        let at = match self.probe(tag, key) {
            Probe::Found(i) => {
                let Some(Some(slot)) = self.slots.get_mut(i) else {
                    return Err(KeyedLimitError::Full {
                        retry_after: Duration::MAX,
                    });
                };
                slot.last = touched(slot.last, now.as_nanos());
                let (result, word) = sealed::Rule::decide(&self.rule, slot.word, now, n);
                slot.word = word;
                return result.map_err(KeyedLimitError::Limited);
            }
            Probe::Vacant(i) => Some(i),
            Probe::Full => None,
        };
        // A new key: decided as by a new limiter, and stored only if admitted.
        let (result, word) = sealed::Rule::decide(&self.rule, 0, now, n);
        result.map_err(KeyedLimitError::Limited)?;
        let at = match at {
            Some(i) => i,
            None => self.make_room(tag, now)?,
        };
        if let Some(place) = self.slots.get_mut(at) {
            *place = Some(Slot {
                tag,
                last: now.as_nanos(),
                word,
                key: key.clone(),
            });
            self.len = self.len.saturating_add(1);
        }
        Ok(())
    }

    /// Cells a request for `key` at `now` could take (a full limiter's for a key not in the
    /// table).
    #[must_use]
    pub fn available(&self, key: &K, now: Instant) -> u32 {
        let word = match self.probe(self.tag(key), key) {
            Probe::Found(i) => match self.slots.get(i) {
                Some(Some(slot)) => slot.word,
                _ => 0,
            },
            _ => 0,
        };
        sealed::Rule::available(&self.rule, word, now)
    }

    /// `true` when `key` has an entry in the table.
    #[must_use]
    pub fn contains_key(&self, key: &K) -> bool {
        matches!(self.probe(self.tag(key), key), Probe::Found(_))
    }

    /// Forgets `key`, as if it had never been seen; `true` if it was in the table.
    pub fn remove(&mut self, key: &K) -> bool {
        match self.probe(self.tag(key), key) {
            Probe::Found(i) => {
                self.remove_at(i);
                true
            }
            _ => false,
        }
    }

    /// Evicts every idle key (limiter as good as new, quiet for the idle period) at `now`;
    /// returns how many. Evicting an idle key never changes a decision: it only makes room.
    ///
    /// ```
    /// use stormguard_core::{Duration, Instant, limits::KeyedWindowLimiter, limits::WindowLimitSettings};
    /// let mut t: KeyedWindowLimiter<u64, 16> = KeyedWindowLimiter::new(WindowLimitSettings::defaults("s"));
    /// for key in 0..10 {
    ///     t.check(&key, Instant::ZERO).unwrap();
    /// }
    /// assert_eq!(t.evict_idle(Instant::ZERO + Duration::from_secs(299)), 0);
    /// assert_eq!(t.evict_idle(Instant::ZERO + Duration::from_secs(300)), 10);
    /// assert!(t.is_empty());
    /// ```
    pub fn evict_idle(&mut self, now: Instant) -> usize {
        let mut evicted = 0usize;
        let mut i = 0;
        while i < N {
            // Backward-shift deletion may move another key into `i`: look again before moving on.
            while self.until_idle_at(i, now) == Some(Duration::ZERO) {
                self.remove_at(i);
                evicted = evicted.saturating_add(1);
            }
            i = i.saturating_add(1);
        }
        evicted
    }

    /// Time from `now` until the key in slot `i` is idle; `None` for an empty slot. Settles its
    /// last-use time for a clock that stepped back.
    fn until_idle_at(&mut self, i: usize, now: Instant) -> Option<Duration> {
        let rule = &self.rule;
        let slot = self.slots.get_mut(i)?.as_mut()?;
        let now_ns = now.as_nanos();
        // A clock that stepped back: settle the key as a request would, so that it turns idle
        // on the new clock rather than once the old one is reached again. (The price: after a
        // step back of more than a late reading, a key's next decision is taken from the state
        // this scan settled, so it can differ by when another key's arrival ran the scan. A
        // table pinned full for as long as the clock stepped back would be worse.)
        if slot.last > now_ns.saturating_add(LATE_READING_NS) {
            slot.last = now_ns;
        }
        slot.word = sealed::Rule::settle(rule, slot.word, now);
        // Idle once quiet for the idle period (at `last + idle`).
        let quiet_left = match slot.last.checked_add(sealed::Rule::idle(rule).as_nanos()) {
            Some(at) => Duration::from_nanos(at.saturating_sub(now_ns)),
            None => Duration::MAX,
        };
        Some(quiet_left.max(sealed::Rule::until_full(rule, slot.word, now)))
    }

    /// Evicts the least recently used idle key to make room for a new key with `tag`, and
    /// returns the slot the new key goes in; `Full` when no key is idle.
    fn make_room(&mut self, tag: NonZeroU32, now: Instant) -> Result<usize, KeyedLimitError> {
        let mut victim: Option<(usize, u64)> = None;
        let mut soonest = Duration::MAX;
        for i in 0..N {
            let Some(wait) = self.until_idle_at(i, now) else {
                continue;
            };
            if wait.is_zero() {
                let last = match self.slots.get(i) {
                    Some(Some(slot)) => slot.last,
                    _ => continue,
                };
                if victim.is_none_or(|(_, oldest)| last < oldest) {
                    victim = Some((i, last));
                }
            } else {
                soonest = soonest.min(wait);
            }
        }
        let Some((i, _)) = victim else {
            return Err(KeyedLimitError::Full {
                retry_after: soonest,
            });
        };
        self.remove_at(i);
        // Exactly one slot is free now; the new key's probe sequence reaches it.
        let mut j = probe::home(tag.get(), N);
        for _ in 0..N {
            if matches!(self.slots.get(j), Some(None)) {
                return Ok(j);
            }
            j = probe::next_slot(j, N);
        }
        Err(KeyedLimitError::Full {
            retry_after: soonest,
        })
    }

    /// Empties slot `hole` and shifts back the keys after it that may move closer to home, so
    /// that no probe sequence is broken (no tombstones).
    fn remove_at(&mut self, hole: usize) {
        if let Some(place) = self.slots.get_mut(hole) {
            if place.take().is_some() {
                self.len = self.len.saturating_sub(1);
            }
        }
        probe::close_gap(self.slots.as_mut_slice(), hole);
    }
}

/// The limiter's slots, as the probe table's removal sees them.
impl<K> ProbeSlots for [Option<Slot<K>>] {
    fn slot_count(&self) -> usize {
        self.len()
    }

    fn home_of(&self, i: usize) -> Option<usize> {
        let slot = self.get(i)?.as_ref()?;
        Some(probe::home(slot.tag.get(), self.len()))
    }

    fn shift(&mut self, from: usize, to: usize) {
        let moved = self.get_mut(from).and_then(Option::take);
        if let Some(place) = self.get_mut(to) {
            *place = moved;
        }
    }
}

impl<K, R: LimitRule, const N: usize, S> fmt::Debug for KeyedLimiter<K, R, N, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("name", sealed::Rule::name(&self.rule))
            .field("len", &self.len)
            .field("capacity", &N)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "defmt")]
impl<K, R: LimitRule, const N: usize, S> defmt::Format for KeyedLimiter<K, R, N, S> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "KeyedLimiter({}, {}/{})",
            sealed::Rule::name(&self.rule),
            self.len,
            N
        );
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for RateLimiter {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "RateLimiter({})", self.name());
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for SharedRateLimiter {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "SharedRateLimiter({})", self.name());
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for WindowLimiter {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "WindowLimiter({})", self.name());
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for SharedWindowLimiter {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "SharedWindowLimiter({})", self.name());
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for LimiterHasher {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "LimiterHasher");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_state_packs_into_one_word_and_back() {
        let states = [
            WindowState::Open {
                count: 0,
                start_ms: 0,
            },
            WindowState::Open {
                count: MAX_WINDOW_EVENTS,
                start_ms: ceil_ms(Instant::MAX),
            },
            WindowState::Open {
                count: 50,
                start_ms: 123_456_789,
            },
            WindowState::Cooling { until: 0 },
            WindowState::Cooling {
                until: cooldown_until(Instant::MAX, Duration::ZERO),
            },
            WindowState::Cooling { until: NEVER },
        ];
        for s in states {
            assert_eq!(WindowState::unpack(s.pack()), s);
        }
        assert_eq!(
            WindowState::unpack(0),
            WindowState::Open {
                count: 0,
                start_ms: 0
            }
        );
        // Every instant's millisecond fits in a window's start, and every cooldown's end below
        // the "never" sentinel.
        assert!(ceil_ms(Instant::MAX) <= mask(MS_BITS));
        assert!(cooldown_until(Instant::MAX, Duration::ZERO) < NEVER);
    }

    #[test]
    fn the_defaults_are_valid() {
        assert!(RateLimitSettings::builder("x").build().is_ok());
        assert_eq!(
            RateLimitSettings::builder("x").build(),
            Ok(RateLimitSettings::defaults("x"))
        );
        assert!(WindowLimitSettings::builder("x").build().is_ok());
    }
}
