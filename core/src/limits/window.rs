//! The window with cooldown: document 004's per-stream limiter's rule.
//!
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
//! The limiter is [`Limiter`](super::Limiter) with this rule: [`WindowLimiter`](super::WindowLimiter),
//! [`SharedWindowLimiter`](super::SharedWindowLimiter), [`KeyedWindowLimiter`](super::KeyedWindowLimiter).

use core::fmt;

use super::limiter::sealed::Rule;
use super::limiter::{limited, DEFAULT_IDLE, LATE_READING_NS};
use crate::cell::{field, mask, pack_instant, put, unpack_instant};
use crate::error::{Bound, Field, Refused, SettingsError};
use crate::name::Name;
use crate::time::{Duration, Instant};

// The settings fields the limiter's errors name.
const FIELD_EVENTS: Field = Field::WindowEvents;
const FIELD_WINDOW: Field = Field::Window;
const FIELD_COOLDOWN: Field = Field::Cooldown;

const NANOS_PER_MILLI: u64 = 1_000_000;

/// The most events a window-with-cooldown limiter can count in one window (18 bits of its
/// state word).
pub const MAX_WINDOW_EVENTS: u32 = (1 << COUNT_BITS) - 1;

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

impl Rule for WindowLimitSettings {
    type State = u64;

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

    fn any(&self) -> super::limiter::AnyRule<'_> {
        super::limiter::AnyRule::Window(self)
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
        assert!(WindowLimitSettings::builder("x").build().is_ok());
    }
}
