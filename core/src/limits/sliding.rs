//! A segmented sliding-window rate limiter: a quota of calls per window, the window sliding in
//! whole segments (8 by default), beside GCRA and the window with cooldown.
//!
//! # The rule
//! Time is cut into segments of `window / segments`, counted from the epoch (the [`Instant`] the
//! caller feeds). A call at `now` falls in the segment holding `now`; the window at `now` is that
//! segment and the `segments - 1` before it. A request for `n` calls is admitted when the calls
//! the window already holds plus `n` are at most the quota, and counted in the current segment;
//! otherwise it is refused with `retry_after` = the time until enough of the oldest segments with
//! calls have left the window (for one call: until the oldest segment with calls leaves), which is
//! exactly when asking again succeeds. Over any `segments` consecutive segments at most `quota`
//! calls are admitted; over any span of one window, at most `quota` plus the calls of the one
//! segment it cuts through.
//!
//! Compared with GCRA, the window forgets a burst in whole segments rather than smoothly; compared
//! with the window with cooldown, a full window never locks callers out for longer than it takes
//! its oldest segment to leave.
//!
//! # State
//! The whole state (the current segment's number and a count per segment) is one 128-bit word: a
//! `Cell<u128>` in [`SlidingWindowLimiter`](super::SlidingWindowLimiter) and a lock-free atomic in
//! [`SharedSlidingWindowLimiter`](super::SharedSlidingWindowLimiter), both driven by the same pure step (load / step /
//! compare-exchange), so the two decide identically for any sequential input. The low 32 bits
//! hold the current segment's number (wrapping); the other 96 hold the counts, `96 / segments`
//! bits each (at most 32), which bounds the quota: [`max_quota`] (4095 for 8 segments, 65 535 for
//! 6, 16 777 215 for 4). A zeroed word is an empty limiter, so the shared form can live in a
//! `static`.
//!
//! The segment number wraps after 2^32 segments; a segment is at least 1 ms, so a limiter left
//! untouched for over 24 days (2^31 segments) may take calls of a long-gone window for recent
//! ones, for at most one window: it then admits fewer calls, never more.
//!
//! # A clock that steps back
//! As the other limiters: a reading up to 1 s behind the current segment is a late reading of the
//! same clock (nothing has slid; `retry_after` counts from that reading). Further back, the clock
//! was reset: every call the window holds is moved to the reading's segment, so they leave one
//! window after the reading and the limiter is never locked out for as long as the clock jumped.
//!
//! # Microcontrollers
//! The shared form needs a 128-bit compare-and-swap (`cmpxchg16b` on x86-64, `casp` or an
//! exclusive pair on AArch64); elsewhere portable-atomic's fallback is a lock. On a
//! microcontroller share the `&mut` form behind a mutex instead.

use core::fmt;

use super::limiter::sealed::Rule;
use super::limiter::{limited, DEFAULT_IDLE};
use crate::error::{Bound, Field, Refused, SettingsError};
use crate::name::Name;
use crate::time::{Duration, Instant};

/// The most segments a window slides in (and the default).
pub const MAX_SEGMENTS: u32 = 8;

/// Bits of the state word holding the current segment's number.
const HEAD_BITS: u32 = 32;

/// How far behind the current segment a reading may lie and still be a late reading of the same
/// clock (as the other limiters).
const LATE_READING_NS: u64 = 1_000_000_000;

const NANOS_PER_MILLI: u64 = 1_000_000;

/// Bits of one segment's count, for a window of `segments` segments.
const fn count_bits(segments: u32) -> u32 {
    match (128 - HEAD_BITS).checked_div(segments) {
        Some(bits) if bits < 32 => bits,
        _ => 32,
    }
}

/// The largest quota a window of `segments` segments can count: `2^(96 / segments) - 1`, at
/// most [`u32::MAX`] (4095 for 8 segments).
///
/// ```
/// use stormguard_core::limits::max_quota;
/// assert_eq!(max_quota(8), 4095);
/// assert_eq!(max_quota(4), 16_777_215);
/// assert_eq!(max_quota(2), u32::MAX);
/// ```
#[must_use]
pub const fn max_quota(segments: u32) -> u32 {
    match 1u32.checked_shl(count_bits(segments)) {
        Some(top) => top.wrapping_sub(1),
        None => u32::MAX,
    }
}

// ---------------------------------------------------------------------------------------------
// Settings

/// The settings of a segmented sliding-window limiter, its name included: a quota of calls per
/// window, the window sliding in `segments` equal segments. Built with
/// [`SlidingWindowSettings::builder`], validated, immutable after.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | quota | 50 | calls admitted per window (document 004's stream default) |
/// | window | 1 minute | the span the quota holds over |
/// | segments | 8 | how finely the window slides: an eighth (7.5 s) at a time |
///
/// Eight segments keep the overshoot over an arbitrary span of one window to one segment's calls
/// while the state still fits one 128-bit word with a useful quota (up to 4095).
///
/// ```
/// use stormguard_core::{Duration, limits::SlidingWindowSettings};
/// const API: SlidingWindowSettings = match SlidingWindowSettings::builder("api")
///     .quota(100)
///     .window(Duration::from_secs(1))
///     .build()
/// {
///     Ok(s) => s,
///     Err(_) => panic!("invalid sliding window"),
/// };
/// assert_eq!(API.segment(), Duration::from_millis(125));
/// assert_eq!(API.to_string(), "100 per 1s, sliding in 8 segments");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SlidingWindowSettings {
    name: Name,
    quota: u32,
    window: Duration,
    segments: u32,
    idle: Duration,
}

/// Builds a [`SlidingWindowSettings`]; every method is `const`.
///
/// ```
/// use stormguard_core::{Duration, Field, limits::SlidingWindowSettings};
/// let err = SlidingWindowSettings::builder("api")
///     .window(Duration::from_millis(10))
///     .segments(3)
///     .build()
///     .unwrap_err();
/// assert_eq!(err.field, Field::Window); // 10 ms is no whole number of 3 segments
/// assert_eq!(err.to_string(), "`window` must be divisible into whole `segments`");
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SlidingWindowSettingsBuilder {
    settings: SlidingWindowSettings,
}

impl SlidingWindowSettings {
    /// A builder holding the defaults (50 per minute in 8 segments).
    pub const fn builder(name: &'static str) -> SlidingWindowSettingsBuilder {
        SlidingWindowSettingsBuilder::defaults(Name::new(name))
    }

    /// A builder holding the defaults, for a limiter whose name came from elsewhere.
    pub const fn builder_named(name: Name) -> SlidingWindowSettingsBuilder {
        SlidingWindowSettingsBuilder::defaults(name)
    }

    /// Every default, for a limiter called `name`.
    #[must_use]
    pub const fn defaults(name: &'static str) -> SlidingWindowSettings {
        SlidingWindowSettingsBuilder::defaults(Name::new(name)).settings
    }

    /// The limiter's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.name
    }

    /// Calls a window admits.
    #[must_use]
    pub const fn quota(&self) -> u32 {
        self.quota
    }

    /// The span the quota holds over.
    #[must_use]
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// The segments the window slides in.
    #[must_use]
    pub const fn segments(&self) -> u32 {
        self.segments
    }

    /// One segment: `window / segments` (exact, as the builder checks).
    #[must_use]
    pub const fn segment(&self) -> Duration {
        Duration::from_nanos(self.segment_ns())
    }

    /// How long a key whose window is empty must stay quiet before a keyed limiter may evict it.
    #[must_use]
    pub const fn idle(&self) -> Duration {
        self.idle
    }

    const fn segment_ns(&self) -> u64 {
        match self.window.as_nanos().checked_div(self.segments as u64) {
            Some(ns) => ns,
            None => u64::MAX,
        }
    }

    const fn count_bits(&self) -> u32 {
        count_bits(self.segments)
    }

    /// The state word's meaning at `now`: the window after sliding to `now`'s segment.
    fn view(&self, word: u128, now: Instant) -> View {
        let seg = self.segment_ns();
        let now_ns = now.as_nanos();
        let n = now_ns.checked_div(seg).unwrap_or(0);
        let mut counts = self.unpack(word);
        // The zeroed word is a limiter never asked: no head yet. Once asked, the head stays the
        // latest segment written, emptied or not, so a late reading counts in it.
        if word == 0 {
            return View {
                head: n,
                counts: [0; MAX_SEGMENTS as usize],
            };
        }
        // The low 32 bits: the head segment's number, wrapping.
        let head = word as u32;
        let ahead = (n as u32).wrapping_sub(head) as i32;
        if ahead >= 0 {
            slide(&mut counts, ahead.unsigned_abs(), self.segments);
            return View { head: n, counts };
        }
        let back = u64::from(ahead.unsigned_abs());
        let head_abs = n.saturating_add(back);
        // How far `now` lies before the head segment's start.
        let behind = head_abs.saturating_mul(seg).saturating_sub(now_ns);
        if behind <= LATE_READING_NS {
            // A late reading: nothing has slid.
            View {
                head: head_abs,
                counts,
            }
        } else {
            // A reset clock: what the window holds moves to the reading's segment.
            let mut view = View {
                head: n,
                counts: [0; MAX_SEGMENTS as usize],
            };
            let total = counts
                .iter()
                .fold(0u64, |t, &c| t.saturating_add(u64::from(c)));
            // At most the quota (what admissions leave), so it fits one segment's count.
            view.add(u32::try_from(total).unwrap_or(u32::MAX).min(self.quota));
            view
        }
    }

    /// The calls the word holds, in every segment, without sliding.
    #[inline]
    fn held(&self, word: u128) -> u64 {
        let bits = self.count_bits();
        let mask = u128::from(max_quota(self.segments));
        let mut rest = word.checked_shr(HEAD_BITS).unwrap_or(0);
        let mut held = 0u64;
        for _ in 0..self.segments {
            held = held.saturating_add((rest & mask) as u64);
            rest = rest.checked_shr(bits).unwrap_or(0);
        }
        held
    }

    fn unpack(&self, word: u128) -> [u32; MAX_SEGMENTS as usize] {
        let bits = self.count_bits();
        let mask = u128::from(max_quota(self.segments));
        let mut counts = [0; MAX_SEGMENTS as usize];
        let mut at = HEAD_BITS;
        for c in counts.iter_mut().take(self.segments as usize) {
            *c = (word.checked_shr(at).unwrap_or(0) & mask) as u32;
            at = at.saturating_add(bits);
        }
        counts
    }

    fn pack(&self, view: &View) -> u128 {
        let bits = self.count_bits();
        let mut word = u128::from(view.head as u32);
        let mut at = HEAD_BITS;
        for &c in view.counts.iter().take(self.segments as usize) {
            word |= u128::from(c).checked_shl(at).unwrap_or(0);
            at = at.saturating_add(bits);
        }
        word
    }

    /// The rule: the decision for `n` calls at `now`, and the word after it.
    #[inline]
    fn decide(&self, word: u128, now: Instant, n: u32) -> (Result<(), Refused>, u128) {
        if n == 0 {
            return (Ok(()), word);
        }
        if n > self.quota {
            return (Err(limited(Duration::MAX)), word);
        }
        // The common case, a call in the head segment that fits: no slide, one add to the head
        // count (which cannot carry out of its field: the held calls stay within the quota).
        // `cargo bench -p stormguard-core --bench ratelimit -- synthetic`: the `&mut` check took
        // 36 ns through the general path and 23 ns with this one (shared: 67 and 50 ns).
        let segment = now.as_nanos().checked_div(self.segment_ns()).unwrap_or(0);
        if word as u32 == segment as u32 && word.checked_shr(HEAD_BITS).unwrap_or(0) != 0 {
            let fits = self
                .held(word)
                .saturating_add(u64::from(n))
                .le(&u64::from(self.quota));
            if fits {
                let next = word.saturating_add(u128::from(n).checked_shl(HEAD_BITS).unwrap_or(0));
                return (Ok(()), next);
            }
        }
        let mut view = self.view(word, now);
        // Summed in 64 bits: the segments of a 2-segment window may each hold up to u32::MAX.
        let held = view.total();
        let quota = u64::from(self.quota);
        if held.saturating_add(u64::from(n)) <= quota {
            view.add(n);
            return (Ok(()), self.pack(&view));
        }
        // Too many: wait for the oldest segments with calls to leave until `n` fit.
        let need = held.saturating_add(u64::from(n)).saturating_sub(quota);
        let mut freed = 0u64;
        let mut retry = Duration::MAX;
        for i in (0..self.segments).rev() {
            let c = view.counts.get(i as usize).copied().unwrap_or(0);
            freed = freed.saturating_add(u64::from(c));
            if c > 0 && freed >= need {
                // Segment `head - i` leaves when segment `head - i + segments` begins.
                // Past the end of time it never leaves: refused with `Duration::MAX`.
                let leaves = view
                    .head
                    .checked_add(u64::from(self.segments.saturating_sub(i)))
                    .and_then(|s| s.checked_mul(self.segment_ns()));
                if let Some(at) = leaves {
                    retry = Duration::from_nanos(at.saturating_sub(now.as_nanos()));
                }
                break;
            }
        }
        (Err(limited(retry)), self.pack(&view))
    }

    fn available(&self, word: u128, now: Instant) -> u32 {
        let left = u64::from(self.quota).saturating_sub(self.view(word, now).total());
        u32::try_from(left).unwrap_or(u32::MAX)
    }
}

/// The window as seen from one reading: the head segment's absolute number and the counts of it
/// (`counts[0]`) and the segments before it.
struct View {
    head: u64,
    counts: [u32; MAX_SEGMENTS as usize],
}

impl View {
    /// Counts `n` calls in the head segment.
    fn add(&mut self, n: u32) {
        if let Some(head) = self.counts.first_mut() {
            *head = head.saturating_add(n);
        }
    }

    fn total(&self) -> u64 {
        self.counts
            .iter()
            .fold(0u64, |t, &c| t.saturating_add(u64::from(c)))
    }
}

/// Moves the counts `by` segments on: the oldest leave the window, new segments start empty.
fn slide(counts: &mut [u32; MAX_SEGMENTS as usize], by: u32, segments: u32) {
    if by == 0 {
        return;
    }
    let s = segments.min(MAX_SEGMENTS) as usize;
    let by = by as usize;
    for i in (0..s).rev() {
        let from = i.checked_sub(by).and_then(|j| counts.get(j).copied());
        if let Some(slot) = counts.get_mut(i) {
            *slot = from.unwrap_or(0);
        }
    }
}

impl SlidingWindowSettingsBuilder {
    const fn defaults(name: Name) -> SlidingWindowSettingsBuilder {
        SlidingWindowSettingsBuilder {
            settings: SlidingWindowSettings {
                name,
                // Document 004's stream default, as the window with cooldown: 50 a minute.
                quota: 50,
                window: Duration::from_secs(60),
                segments: MAX_SEGMENTS,
                idle: DEFAULT_IDLE,
            },
        }
    }

    /// Renames the limiter.
    pub const fn name(mut self, name: Name) -> Self {
        self.settings.name = name;
        self
    }

    /// Calls a window admits (default 50; at least 1, at most [`max_quota`] of the segments).
    pub const fn quota(mut self, quota: u32) -> Self {
        self.settings.quota = quota;
        self
    }

    /// The span the quota holds over (default 1 minute; at least 1 ms per segment and a whole
    /// number of nanoseconds per segment).
    pub const fn window(mut self, window: Duration) -> Self {
        self.settings.window = window;
        self
    }

    /// The segments the window slides in (default and at most [`MAX_SEGMENTS`]; at least 2).
    pub const fn segments(mut self, segments: u32) -> Self {
        self.settings.segments = segments;
        self
    }

    /// How long a key whose window is empty must stay quiet before a keyed limiter may evict it
    /// (default 5 minutes).
    pub const fn idle(mut self, idle: Duration) -> Self {
        self.settings.idle = idle;
        self
    }

    /// Checks every bound and returns the settings, or the first setting at fault.
    pub const fn build(self) -> Result<SlidingWindowSettings, SettingsError> {
        if let Err(e) = SettingsError::check_name(&self.settings.name) {
            return Err(e);
        }
        let s = self.settings;
        if s.segments < 2 {
            return Err(SettingsError::new(Field::Segments, Bound::AtLeast(2)));
        }
        if s.segments > MAX_SEGMENTS {
            return Err(SettingsError::new(
                Field::Segments,
                Bound::AtMost(MAX_SEGMENTS as u64),
            ));
        }
        if s.quota == 0 {
            return Err(SettingsError::new(Field::Quota, Bound::AtLeast(1)));
        }
        if s.quota > max_quota(s.segments) {
            return Err(SettingsError::new(
                Field::Quota,
                Bound::AtMost(max_quota(s.segments) as u64),
            ));
        }
        let least = Duration::from_nanos(NANOS_PER_MILLI.saturating_mul(s.segments as u64));
        if s.window.as_nanos() < least.as_nanos() {
            return Err(SettingsError::new(
                Field::Window,
                Bound::AtLeastDuration(least),
            ));
        }
        if !matches!(s.window.as_nanos().checked_rem(s.segments as u64), Some(0)) {
            return Err(SettingsError::new(
                Field::Window,
                Bound::DivisibleBy(Field::Segments),
            ));
        }
        Ok(s)
    }
}

impl fmt::Display for SlidingWindowSettings {
    /// E.g. `50 per 60s, sliding in 8 segments`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {}, sliding in {} segments",
            self.quota, self.window, self.segments
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The rule, for the limiter

impl Rule for SlidingWindowSettings {
    type State = u128;

    #[inline]
    fn decide(&self, state: u128, now: Instant, n: u32) -> (Result<(), Refused>, u128) {
        SlidingWindowSettings::decide(self, state, now, n)
    }

    fn available(&self, state: u128, now: Instant) -> u32 {
        SlidingWindowSettings::available(self, state, now)
    }

    fn until_full(&self, state: u128, now: Instant) -> Duration {
        if state == 0 {
            return Duration::ZERO;
        }
        let view = self.view(state, now);
        // The newest segment with calls leaves last: when segment `head - i + segments` begins.
        let newest = view
            .counts
            .iter()
            .take(self.segments as usize)
            .position(|&c| c > 0);
        match newest {
            None => Duration::ZERO,
            Some(i) => view
                .head
                .checked_add(u64::from(self.segments))
                .and_then(|s| s.checked_sub(i as u64))
                .and_then(|s| s.checked_mul(self.segment_ns()))
                .map_or(Duration::MAX, |at| {
                    Duration::from_nanos(at.saturating_sub(now.as_nanos()))
                }),
        }
    }

    fn settle(&self, state: u128, now: Instant) -> u128 {
        let segment = now.as_nanos().checked_div(self.segment_ns()).unwrap_or(0);
        let behind = (segment as u32).wrapping_sub(state as u32) as i32;
        if state == 0 || behind >= 0 {
            // Nothing stepped back: a request slides the window itself.
            state
        } else {
            // A late reading keeps the window as it is; a reset clock moves it to the reading.
            self.pack(&self.view(state, now))
        }
    }

    fn idle(&self) -> Duration {
        self.idle
    }

    fn name(&self) -> &Name {
        &self.name
    }

    fn any(&self) -> super::limiter::AnyRule<'_> {
        super::limiter::AnyRule::Sliding(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(quota: u32, window_s: u64, segments: u32) -> SlidingWindowSettings {
        SlidingWindowSettings::builder("t")
            .quota(quota)
            .window(Duration::from_secs(window_s))
            .segments(segments)
            .build()
            .unwrap()
    }

    #[test]
    fn pack_round_trips_every_width() {
        for segments in 2..=MAX_SEGMENTS {
            let s = settings(max_quota(segments), 8 * 9 * 5 * 7, segments);
            let mut counts = [0; MAX_SEGMENTS as usize];
            for (i, c) in counts.iter_mut().take(segments as usize).enumerate() {
                *c = max_quota(segments) - i as u32;
            }
            let view = View {
                head: 0x1_2345_6789,
                counts,
            };
            let word = s.pack(&view);
            assert_eq!(s.unpack(word), counts);
            assert_eq!(word as u32, 0x2345_6789);
        }
    }
}
