//! The core's own time: nanoseconds in a `u64`, saturating everywhere.
//!
//! Nothing in the core reads a clock. Every transition takes `now: Instant` from its caller, so a
//! test can walk a breaker through an hour in microseconds and an adapter can map any monotonic
//! clock (std, tokio, embassy ticks) onto it.
//!
//! A clock that steps backwards is read as "no time passed": [`Instant::saturating_duration_since`]
//! returns [`Duration::ZERO`] rather than panicking.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

const NANOS_PER_MICRO: u64 = 1_000;
const NANOS_PER_MILLI: u64 = 1_000_000;
const NANOS_PER_SEC: u64 = 1_000_000_000;

/// `n / d` and `n % d` for a 32-bit divisor, `None` when `d` is zero.
///
/// On a 64-bit target this is the machine's division. On a 32-bit one a 64-bit division is a
/// library routine (about 0.9 KB of flash on a Cortex-M, a software loop on each call), while
/// every conversion the core makes divides by a constant of at most 30 bits: long division in
/// 32-bit steps does it with a few hardware divides (4 for milliseconds) and no routine. Public
/// for adapters that convert tick counts the same way.
///
/// ```
/// use stormguard_core::time::div_rem_u32;
/// assert_eq!(div_rem_u32(u64::MAX, 1_000_000), Some((u64::MAX / 1_000_000, (u64::MAX % 1_000_000) as u32)));
/// assert_eq!(div_rem_u32(7, 0), None);
/// ```
#[inline]
pub const fn div_rem_u32(n: u64, d: u32) -> Option<(u64, u32)> {
    if d == 0 {
        return None;
    }
    #[cfg(target_pointer_width = "64")]
    {
        let d = d as u64;
        match (n.checked_div(d), n.checked_rem(d)) {
            (Some(q), Some(r)) => Some((q, r as u32)),
            _ => None,
        }
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        Some(long_division(n, d))
    }
}

/// Long division of `n` by a nonzero `d` using only 32-bit divides: the high word first, then
/// the low word in digits of as many bits as fit beside a remainder below `d`.
#[cfg(any(not(target_pointer_width = "64"), test))]
#[inline(never)] // one copy: its callers on a microcontroller are many, its loop short
const fn long_division(n: u64, d: u32) -> (u64, u32) {
    let high = (n >> 32) as u32;
    let (mut q, mut r) = match (high.checked_div(d), high.checked_rem(d)) {
        (Some(q), Some(r)) => (q as u64, r),
        _ => return (0, 0),
    };
    // A remainder is below `d`, so `r << digit` fits in 32 bits when `digit` is the number of
    // leading zeros of `d`; a divisor of 32 bits (digit 0) goes bit by bit in 64-bit arithmetic.
    let digit = d.leading_zeros();
    let mut left = 32u32;
    while left > 0 {
        if digit == 0 {
            left = left.saturating_sub(1);
            let cur = ((r as u64) << 1) | ((n >> left) & 1);
            let bit = cur >= d as u64;
            q = (q << 1) | bit as u64;
            r = if bit {
                cur.wrapping_sub(d as u64) as u32
            } else {
                cur as u32
            };
            continue;
        }
        let take = if left < digit { left } else { digit };
        left = left.saturating_sub(take);
        let chunk = ((n >> left) as u32) & (u32::MAX >> 32u32.saturating_sub(take));
        let cur = (r << take) | chunk;
        let (cq, cr) = match (cur.checked_div(d), cur.checked_rem(d)) {
            (Some(cq), Some(cr)) => (cq, cr),
            _ => return (0, 0),
        };
        q = (q << take) | cq as u64;
        r = cr;
    }
    (q, r)
}

/// `n / d` for any 64-bit divisor, `None` when `d` is zero: the statistics divide instants by
/// bucket widths, and windows by widths.
///
/// On a 64-bit target this is the machine's division. On a 32-bit one it takes no library
/// routine (see [`div_rem_u32`]): a divisor that fits 32 bits goes to [`div_rem_u32`]; a wider
/// one means a quotient below 2^32, which [`quotient_by_wide`] finds by restoring division.
/// Exact on every target.
#[inline]
pub(crate) const fn div_u64(n: u64, d: u64) -> Option<u64> {
    #[cfg(target_pointer_width = "64")]
    {
        n.checked_div(d)
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        if d <= u32::MAX as u64 {
            match div_rem_u32(n, d as u32) {
                Some((q, _)) => Some(q),
                None => None,
            }
        } else {
            Some(quotient_by_wide(n, d))
        }
    }
}

/// `n / d` for `d` of more than 32 bits, so a quotient below 2^32: restoring division, one
/// quotient bit per step from bit 31 down, in 64-bit shifts and subtractions (`d << i` never
/// exceeds the remainder it is taken from, so nothing overflows). The statistics divide by such
/// long spans only when a bucket or a half-window ends.
#[cfg(any(not(target_pointer_width = "64"), test))]
#[inline(never)] // one copy
const fn quotient_by_wide(n: u64, d: u64) -> u64 {
    let (mut q, mut r) = (0u64, n);
    let mut bit = 32u32;
    while bit > 0 {
        bit = bit.saturating_sub(1);
        if r.wrapping_shr(bit) >= d {
            r = r.wrapping_sub(d.wrapping_shl(bit));
            q |= 1u64.wrapping_shl(bit);
        }
    }
    q
}

/// `n / d` rounded up, for the time constants.
#[inline]
const fn div_ceil_const(n: u64, d: u64) -> u64 {
    match div_rem_u32(n, d as u32) {
        Some((whole, 0)) => whole,
        Some((whole, _)) => whole.saturating_add(1),
        None => 0,
    }
}

/// `n / d` for the time constants (all nonzero, below 2^30).
#[inline]
const fn div_const(n: u64, d: u64) -> u64 {
    match div_u64(n, d) {
        Some(q) => q,
        None => 0,
    }
}

/// A span of time, in nanoseconds (`u64`: about 584 years).
///
/// Arithmetic saturates: `Duration::MAX + x == Duration::MAX`, `a - b` with `b > a` is zero.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Duration {
    nanos: u64,
}

/// A point in time: nanoseconds since an arbitrary epoch chosen by whoever feeds the core.
///
/// Only differences between instants mean anything. Arithmetic saturates at [`Instant::ZERO`] and
/// [`Instant::MAX`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Instant {
    nanos: u64,
}

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration { nanos: 0 };
    /// The longest representable span; also used to mean "not until something else happens".
    pub const MAX: Duration = Duration { nanos: u64::MAX };

    /// A span of `nanos` nanoseconds.
    #[must_use]
    pub const fn from_nanos(nanos: u64) -> Self {
        Duration { nanos }
    }

    /// A span of `micros` microseconds, saturating at [`Duration::MAX`].
    #[must_use]
    pub const fn from_micros(micros: u64) -> Self {
        Duration {
            nanos: micros.saturating_mul(NANOS_PER_MICRO),
        }
    }

    /// A span of `millis` milliseconds, saturating at [`Duration::MAX`].
    #[must_use]
    pub const fn from_millis(millis: u64) -> Self {
        Duration {
            nanos: millis.saturating_mul(NANOS_PER_MILLI),
        }
    }

    /// A span of `secs` seconds, saturating at [`Duration::MAX`].
    #[must_use]
    pub const fn from_secs(secs: u64) -> Self {
        Duration {
            nanos: secs.saturating_mul(NANOS_PER_SEC),
        }
    }

    /// `millis` milliseconds, or `None` if that does not fit (like embassy's `try_from_millis`).
    #[must_use]
    pub const fn try_from_millis(millis: u64) -> Option<Self> {
        match millis.checked_mul(NANOS_PER_MILLI) {
            Some(nanos) => Some(Duration { nanos }),
            None => None,
        }
    }

    /// `secs` seconds, or `None` if that does not fit.
    #[must_use]
    pub const fn try_from_secs(secs: u64) -> Option<Self> {
        match secs.checked_mul(NANOS_PER_SEC) {
            Some(nanos) => Some(Duration { nanos }),
            None => None,
        }
    }

    /// Whole nanoseconds.
    #[must_use]
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// Whole microseconds, rounded down.
    #[must_use]
    pub const fn as_micros(self) -> u64 {
        div_const(self.nanos, NANOS_PER_MICRO)
    }

    /// Whole microseconds, rounded up.
    #[must_use]
    pub const fn as_micros_ceil(self) -> u64 {
        div_ceil_const(self.nanos, NANOS_PER_MICRO)
    }

    /// Whole milliseconds, rounded down.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        div_const(self.nanos, NANOS_PER_MILLI)
    }

    /// Whole milliseconds, rounded up.
    #[must_use]
    pub const fn as_millis_ceil(self) -> u64 {
        div_ceil_const(self.nanos, NANOS_PER_MILLI)
    }

    /// Whole seconds, rounded down.
    #[must_use]
    pub const fn as_secs(self) -> u64 {
        div_const(self.nanos, NANOS_PER_SEC)
    }

    /// `true` for [`Duration::ZERO`].
    #[must_use]
    pub const fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// `self + rhs`, or `None` on overflow.
    #[must_use]
    pub const fn checked_add(self, rhs: Duration) -> Option<Duration> {
        match self.nanos.checked_add(rhs.nanos) {
            Some(nanos) => Some(Duration { nanos }),
            None => None,
        }
    }

    /// `self - rhs`, or `None` if `rhs` is longer.
    #[must_use]
    pub const fn checked_sub(self, rhs: Duration) -> Option<Duration> {
        match self.nanos.checked_sub(rhs.nanos) {
            Some(nanos) => Some(Duration { nanos }),
            None => None,
        }
    }

    /// `self + rhs`, saturating at [`Duration::MAX`].
    #[must_use]
    pub const fn saturating_add(self, rhs: Duration) -> Duration {
        Duration {
            nanos: self.nanos.saturating_add(rhs.nanos),
        }
    }

    /// `self - rhs`, saturating at [`Duration::ZERO`].
    #[must_use]
    pub const fn saturating_sub(self, rhs: Duration) -> Duration {
        Duration {
            nanos: self.nanos.saturating_sub(rhs.nanos),
        }
    }

    /// `self * rhs`, saturating at [`Duration::MAX`].
    #[must_use]
    pub const fn saturating_mul(self, rhs: u64) -> Duration {
        Duration {
            nanos: self.nanos.saturating_mul(rhs),
        }
    }

    /// `self / rhs`, or `None` when `rhs` is zero.
    #[must_use]
    pub const fn checked_div(self, rhs: u64) -> Option<Duration> {
        match self.nanos.checked_div(rhs) {
            Some(nanos) => Some(Duration { nanos }),
            None => None,
        }
    }

    /// The shorter of two spans.
    #[must_use]
    pub const fn min(self, other: Duration) -> Duration {
        if self.nanos <= other.nanos {
            self
        } else {
            other
        }
    }

    /// The longer of two spans.
    #[must_use]
    pub const fn max(self, other: Duration) -> Duration {
        if self.nanos >= other.nanos {
            self
        } else {
            other
        }
    }
}

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant { nanos: 0 };
    /// The last representable instant; arithmetic saturates here.
    pub const MAX: Instant = Instant { nanos: u64::MAX };

    /// The instant `nanos` nanoseconds after the epoch.
    #[must_use]
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant { nanos }
    }

    /// The instant `micros` microseconds after the epoch (saturating).
    #[must_use]
    pub const fn from_micros(micros: u64) -> Self {
        Instant {
            nanos: micros.saturating_mul(NANOS_PER_MICRO),
        }
    }

    /// The instant `millis` milliseconds after the epoch (saturating).
    #[must_use]
    pub const fn from_millis(millis: u64) -> Self {
        Instant {
            nanos: millis.saturating_mul(NANOS_PER_MILLI),
        }
    }

    /// The instant `secs` seconds after the epoch (saturating).
    #[must_use]
    pub const fn from_secs(secs: u64) -> Self {
        Instant {
            nanos: secs.saturating_mul(NANOS_PER_SEC),
        }
    }

    /// Nanoseconds since the epoch.
    #[must_use]
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// Whole milliseconds since the epoch, rounded down.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        div_const(self.nanos, NANOS_PER_MILLI)
    }

    /// The time since the epoch as a [`Duration`].
    #[must_use]
    pub const fn since_epoch(self) -> Duration {
        Duration { nanos: self.nanos }
    }

    /// Time from `earlier` to `self`; zero when `earlier` is later (a clock that stepped
    /// backwards means no time passed).
    #[must_use]
    pub const fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration {
            nanos: self.nanos.saturating_sub(earlier.nanos),
        }
    }

    /// Time from `earlier` to `self`, or `None` when `earlier` is later.
    #[must_use]
    pub const fn checked_duration_since(self, earlier: Instant) -> Option<Duration> {
        match self.nanos.checked_sub(earlier.nanos) {
            Some(nanos) => Some(Duration { nanos }),
            None => None,
        }
    }

    /// `self + d`, or `None` past [`Instant::MAX`].
    #[must_use]
    pub const fn checked_add(self, d: Duration) -> Option<Instant> {
        match self.nanos.checked_add(d.nanos) {
            Some(nanos) => Some(Instant { nanos }),
            None => None,
        }
    }

    /// `self - d`, or `None` before [`Instant::ZERO`].
    #[must_use]
    pub const fn checked_sub(self, d: Duration) -> Option<Instant> {
        match self.nanos.checked_sub(d.nanos) {
            Some(nanos) => Some(Instant { nanos }),
            None => None,
        }
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    #[must_use]
    pub const fn saturating_add(self, d: Duration) -> Instant {
        Instant {
            nanos: self.nanos.saturating_add(d.nanos),
        }
    }

    /// `self - d`, saturating at [`Instant::ZERO`].
    #[must_use]
    pub const fn saturating_sub(self, d: Duration) -> Instant {
        Instant {
            nanos: self.nanos.saturating_sub(d.nanos),
        }
    }

    /// The earlier of two instants.
    #[must_use]
    pub const fn min(self, other: Instant) -> Instant {
        if self.nanos <= other.nanos {
            self
        } else {
            other
        }
    }

    /// The later of two instants.
    #[must_use]
    pub const fn max(self, other: Instant) -> Instant {
        if self.nanos >= other.nanos {
            self
        } else {
            other
        }
    }
}

impl Add<Duration> for Duration {
    type Output = Duration;
    /// Saturating.
    fn add(self, rhs: Duration) -> Duration {
        self.saturating_add(rhs)
    }
}

impl Sub<Duration> for Duration {
    type Output = Duration;
    /// Saturating at zero.
    fn sub(self, rhs: Duration) -> Duration {
        self.saturating_sub(rhs)
    }
}

impl AddAssign<Duration> for Duration {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturating at [`Instant::MAX`].
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturating at [`Instant::ZERO`].
    fn sub(self, rhs: Duration) -> Instant {
        self.saturating_sub(rhs)
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an earlier `self` gives zero.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl From<core::time::Duration> for Duration {
    /// Lossless below 584 years; saturates at [`Duration::MAX`] above.
    fn from(d: core::time::Duration) -> Self {
        // Whole seconds and the sub-second part in 64 bits: cheaper than the 128-bit
        // `as_nanos` on a call path that converts every clock reading.
        let nanos = d
            .as_secs()
            .checked_mul(NANOS_PER_SEC)
            .and_then(|n| n.checked_add(u64::from(d.subsec_nanos())))
            .unwrap_or(u64::MAX);
        Duration { nanos }
    }
}

impl From<Duration> for core::time::Duration {
    fn from(d: Duration) -> Self {
        core::time::Duration::from_nanos(d.nanos)
    }
}

fn write_nanos(f: &mut fmt::Formatter<'_>, nanos: u64) -> fmt::Result {
    if nanos == 0 {
        f.write_str("0s")
    } else if nanos == u64::MAX {
        f.write_str("forever")
    } else if nanos >= NANOS_PER_SEC && nanos.is_multiple_of(NANOS_PER_MILLI) {
        let ms = nanos / NANOS_PER_MILLI;
        if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{}.{:03}s", ms / 1000, ms % 1000)
        }
    } else if nanos >= NANOS_PER_MILLI {
        let us = nanos / NANOS_PER_MICRO;
        if us.is_multiple_of(1000) {
            write!(f, "{}ms", us / 1000)
        } else {
            write!(f, "{}.{:03}ms", us / 1000, us % 1000)
        }
    } else if nanos >= NANOS_PER_MICRO {
        write!(f, "{}us", nanos / NANOS_PER_MICRO)
    } else {
        write!(f, "{nanos}ns")
    }
}

/// Why [`Duration::parse`] refused a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DurationParseError {
    /// Nothing to read.
    Empty,
    /// A number without a unit (`"250"`): the unit is never guessed.
    MissingUnit,
    /// A unit other than `ns`, `us`, `µs`, `ms`, `s`, `m`, `h` or `d`.
    UnknownUnit,
    /// Something other than a non-negative decimal number where one was expected.
    BadNumber,
    /// Longer than [`Duration::MAX`] (about 584 years).
    TooLong,
}

impl fmt::Display for DurationParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DurationParseError::Empty => "an empty duration",
            DurationParseError::MissingUnit => {
                "a duration without a unit (write it as \"250ms\", \"30s\", \"1m\")"
            }
            DurationParseError::UnknownUnit => {
                "a duration with an unknown unit (ns, us, ms, s, m, h and d are known)"
            }
            DurationParseError::BadNumber => "a duration whose number is not a decimal like 1.5",
            DurationParseError::TooLong => "a duration longer than about 584 years",
        })
    }
}

impl core::error::Error for DurationParseError {}

/// Nanoseconds in one of `unit`, or `None` for an unknown unit.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return None,
    })
}

impl Duration {
    /// Reads a duration written for people: a decimal number and a unit (`ns`, `us`, `ms`,
    /// `s`, `m`, `h`, `d`), or several run together (`"1m30s"`). Fractions below a nanosecond
    /// are dropped. No allocation; what configuration files are read with.
    ///
    /// ```
    /// use stormguard_core::Duration;
    /// assert_eq!(Duration::parse("250ms"), Ok(Duration::from_millis(250)));
    /// assert_eq!(Duration::parse("1.5s"), Ok(Duration::from_millis(1500)));
    /// assert_eq!(Duration::parse("1m30s"), Ok(Duration::from_secs(90)));
    /// assert!(Duration::parse("250").is_err()); // the unit is never guessed
    /// ```
    pub fn parse(text: &str) -> Result<Duration, DurationParseError> {
        let mut rest = text.trim();
        if rest.is_empty() {
            return Err(DurationParseError::Empty);
        }
        let mut total: u128 = 0;
        while !rest.is_empty() {
            let number_len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            let (number, after) = rest.split_at_checked(number_len).unwrap_or((rest, ""));
            let unit_len = after
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(after.len());
            let (unit, next) = after.split_at_checked(unit_len).unwrap_or((after, ""));
            if number.is_empty() {
                return Err(if unit.is_empty() {
                    DurationParseError::Empty
                } else {
                    DurationParseError::BadNumber
                });
            }
            if unit.is_empty() {
                return Err(DurationParseError::MissingUnit);
            }
            let per = unit_nanos(unit).ok_or(DurationParseError::UnknownUnit)?;
            let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
            if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
                return Err(DurationParseError::BadNumber);
            }
            let mut nanos: u128 = 0;
            for d in whole.bytes() {
                nanos = nanos
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u128::from(d.wrapping_sub(b'0'))))
                    .ok_or(DurationParseError::TooLong)?;
                if nanos > u128::from(u64::MAX) {
                    return Err(DurationParseError::TooLong);
                }
            }
            nanos = nanos.checked_mul(per).ok_or(DurationParseError::TooLong)?;
            // Digits past the nanosecond cannot count: a day is 8.64e13 ns, so 15 suffice.
            let mut scale = per;
            for d in fraction.bytes().take(15) {
                scale /= 10;
                nanos =
                    nanos.saturating_add(u128::from(d.wrapping_sub(b'0')).saturating_mul(scale));
            }
            total = total
                .checked_add(nanos)
                .ok_or(DurationParseError::TooLong)?;
            if total > u128::from(u64::MAX) {
                return Err(DurationParseError::TooLong);
            }
            rest = next;
        }
        u64::try_from(total)
            .map(Duration::from_nanos)
            .map_err(|_| DurationParseError::TooLong)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Duration {
    /// A text for [`Duration::parse`] (`"250ms"`). A bare number is refused: its unit would be
    /// a guess.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, like \"250ms\", \"30s\" or \"1m\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Duration, E> {
                Duration::parse(v).map_err(|e| E::custom(format_args!("{e}: {v:?}")))
            }
        }
        d.deserialize_str(Visitor)
    }
}

impl fmt::Display for Duration {
    /// Human units: `100ms`, `1.500s`, `15s`, `forever` for [`Duration::MAX`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_nanos(f, self.nanos)
    }
}

impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_nanos(f, self.nanos)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("@")?;
        write_nanos(f, self.nanos)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A point in time folded to wrapping milliseconds, as the retry budget's packed state stamps
/// its floor accrual (see `budget.rs` for how it reads a wrapped stamp).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) struct Tick(pub(crate) u32);

impl Tick {
    /// The millisecond `now` falls in (rounded down).
    pub(crate) const fn of(now: Instant) -> Tick {
        // Truncation is the point: the tick wraps every 2^32 ms.
        Tick((now.as_millis() & 0xFFFF_FFFF) as u32)
    }
}

/// The longest break (and trip window) a breaker may be configured with: a week.
pub const MAX_BREAK: Duration = Duration::from_secs(7 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_division_in_32_bit_steps_agrees_with_64_bit_division() {
        let divisors = [
            1u32,
            2,
            3,
            7,
            1_000,
            1_000_000,
            1_000_000_000,
            (1 << 31) - 1,
            1 << 31,
            (1 << 31) + 1,
            u32::MAX,
        ];
        // Random numerators: fewer under miri, which interprets every step.
        const RANDOM: usize = if cfg!(miri) { 200 } else { 2_000 };
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let mut numerators = [0u64; 6 + RANDOM];
        numerators[..6].copy_from_slice(&[0, 1, u64::MAX, u64::MAX - 1, 1 << 32, (1 << 32) - 1]);
        for n in &mut numerators[6..] {
            // xorshift64: numerators of every magnitude.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *n = x >> (x % 64);
        }
        for &d in &divisors {
            for &n in &numerators {
                let want = (n / u64::from(d), (n % u64::from(d)) as u32);
                assert_eq!(long_division(n, d), want, "{n} / {d}");
                assert_eq!(div_rem_u32(n, d), Some(want));
            }
        }
        assert_eq!(div_rem_u32(5, 0), None);
    }

    #[test]
    fn division_by_a_wide_divisor_agrees_with_64_bit_division() {
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let edges = [
            1u64 << 32,
            (1 << 32) + 1,
            3 << 31,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
        ];
        // Random pairs: fewer under miri, which interprets every step.
        let pairs = if cfg!(miri) { 1_000 } else { 20_000 };
        for _ in 0..pairs {
            let (a, b) = (next(), next());
            // Divisors of 33 to 64 bits, numerators of every magnitude.
            let d = (a >> (a % 32)).max(1 << 32);
            let n = b >> (b % 64);
            for (n, d) in [
                (n, d),
                (n, edges[(a % 6) as usize]),
                (d.wrapping_mul(n % 7), d),
            ] {
                assert_eq!(quotient_by_wide(n, d), n / d, "{n} / {d}");
                assert_eq!(div_u64(n, d), Some(n / d));
            }
        }
        for d in edges {
            for n in [0, 1, d - 1, d, d.saturating_add(1), u64::MAX, u64::MAX - 1] {
                assert_eq!(quotient_by_wide(n, d), n / d, "{n} / {d}");
            }
        }
        assert_eq!(div_u64(5, 0), None);
    }

    #[test]
    fn arithmetic_saturates_instead_of_overflowing() {
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Duration::MAX + Duration::from_nanos(1), Duration::MAX);
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(
            Duration::from_secs(1) - Duration::from_secs(2),
            Duration::ZERO
        );
        assert_eq!(Duration::from_secs(u64::MAX), Duration::MAX);
        assert_eq!(Duration::try_from_millis(u64::MAX), None);
        assert_eq!(Duration::from_secs(3).checked_div(0), None);
    }

    #[test]
    fn a_clock_stepping_backwards_means_no_time_passed() {
        let later = Instant::from_secs(10);
        let earlier = Instant::from_secs(5);
        assert_eq!(earlier - later, Duration::ZERO);
        assert_eq!(earlier.saturating_duration_since(later), Duration::ZERO);
        assert_eq!(earlier.checked_duration_since(later), None);
        assert_eq!(later - earlier, Duration::from_secs(5));
    }

    #[test]
    fn converts_from_and_to_core_durations() {
        let d: Duration = core::time::Duration::from_millis(1500).into();
        assert_eq!(d, Duration::from_millis(1500));
        let back: core::time::Duration = d.into();
        assert_eq!(back.as_millis(), 1500);
        let huge: Duration = core::time::Duration::from_secs(u64::MAX).into();
        assert_eq!(huge, Duration::MAX);
    }

    #[test]
    fn millisecond_rounding() {
        assert_eq!(Duration::from_nanos(1).as_millis_ceil(), 1);
        assert_eq!(Duration::from_millis(3).as_millis_ceil(), 3);
        assert_eq!(Duration::from_nanos(3_000_001).as_millis(), 3);
    }

    #[test]
    fn durations_display_in_human_units() {
        extern crate std;
        use std::format;
        assert_eq!(format!("{}", Duration::from_millis(100)), "100ms");
        assert_eq!(format!("{}", Duration::from_millis(1500)), "1.500s");
        assert_eq!(format!("{}", Duration::from_secs(15)), "15s");
        assert_eq!(format!("{}", Duration::MAX), "forever");
        assert_eq!(format!("{}", Duration::from_nanos(12)), "12ns");
    }
}
