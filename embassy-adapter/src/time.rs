//! Conversions between embassy-time and the core's time, and a clock that reads embassy's.
//!
//! embassy counts ticks since boot at [`TICK_HZ`] (chosen by the firmware); the core counts
//! nanoseconds in a `u64`. Converting between them is exact whenever the result is representable
//! (in 64-bit arithmetic at every tick rate up to 18 GHz, 128-bit above), and only the final value
//! saturates (at
//! [`CoreInstant::MAX`] / [`CoreDuration::MAX`] or their embassy counterparts).
//!
//! Rounding: a tick count becomes nanoseconds rounded down (exact when the tick rate divides
//! 10^9, such as 1 kHz or 1 MHz; under a nanosecond short otherwise, such as a 32.768 kHz RTC),
//! and a core [`CoreDuration`] becomes embassy ticks rounded **up**, so a sleep or timeout
//! computed by the core is never served short.

use embassy_time::{Duration as EmbassyDuration, Instant as EmbassyInstant, TICK_HZ};
use stormguard_core::{Duration as CoreDuration, Instant as CoreInstant};

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The greatest common divisor (`gcd(0, b) == b`).
const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while let Some(r) = a.checked_rem(b) {
        a = b;
        b = r;
    }
    a
}

/// `num / den` in lowest terms (`(0, 0)` for `0 / 0`).
const fn reduced(num: u64, den: u64) -> (u64, u64) {
    let g = gcd(num, den);
    match (num.checked_div(g), den.checked_div(g)) {
        (Some(n), Some(d)) => (n, d),
        _ => (0, 0),
    }
}

/// Nanoseconds per tick, in lowest terms, at the firmware's tick rate.
const NANOS_PER_TICK: (u64, u64) = reduced(NANOS_PER_SEC, TICK_HZ);
/// Ticks per nanosecond, in lowest terms, at the firmware's tick rate.
const TICKS_PER_NANO: (u64, u64) = reduced(TICK_HZ, NANOS_PER_SEC);

/// `value * num / den` (`num / den` in lowest terms), rounded down or (`ceil`) up, saturating at
/// `u64::MAX`; `u64::MAX` for a zero `den` (never a real tick rate).
///
/// `num / den` is the tick rate over 10^9 or its inverse: constants in a firmware (the rate is
/// embassy's `TICK_HZ`), so every branch on them is decided at compile time. In lowest terms,
/// `den * num` fits in a `u64` at every tick rate up to 18 GHz, and then the result is exact in
/// 64-bit arithmetic: with `value = q * den + r`, `value * num / den = q * num + r * num / den`,
/// where `r * num < den * num`. That avoids 128-bit division, which a 32-bit core has no
/// instruction for and which costs over 700 bytes of flash wherever it is inlined. Faster rates
/// take the 128-bit path.
#[inline]
const fn scale(value: u64, (num, den): (u64, u64), ceil: bool) -> u64 {
    if den.checked_mul(num).is_none() {
        return scale_wide(value, num, den, ceil);
    }
    let Some((q, r)) = div_rem(value, den) else {
        return u64::MAX;
    };
    // `r * num < den * num`, which fits.
    let part = r.wrapping_mul(num);
    let Some((mut frac, rem)) = div_rem(part, den) else {
        return u64::MAX;
    };
    if ceil && rem != 0 {
        frac = frac.wrapping_add(1); // at most `num`
    }
    q.saturating_mul(num).saturating_add(frac)
}

/// `n / d` and `n % d`; `None` for a zero `d`. A divisor that fits 32 bits (every reduced tick
/// rate in practice) goes through the core's 32-bit long division: on a 32-bit target a 64-bit
/// division is a library routine of about 0.9 KB of flash.
#[inline]
const fn div_rem(n: u64, d: u64) -> Option<(u64, u64)> {
    if d <= u32::MAX as u64 {
        match stormguard_core::time::div_rem_u32(n, d as u32) {
            Some((q, r)) => Some((q, r as u64)),
            None => None,
        }
    } else {
        match (n.checked_div(d), n.checked_rem(d)) {
            (Some(q), Some(r)) => Some((q, r)),
            _ => None,
        }
    }
}

/// [`scale`] in 128-bit arithmetic, for tick rates above 18 GHz.
#[inline(never)]
const fn scale_wide(value: u64, num: u64, den: u64, ceil: bool) -> u64 {
    // A u64 times a u64 always fits in a u128; only the quotient can exceed u64.
    let wide = (value as u128).wrapping_mul(num as u128);
    let (Some(whole), Some(rem)) = (wide.checked_div(den as u128), wide.checked_rem(den as u128))
    else {
        return u64::MAX;
    };
    let whole = if ceil && rem != 0 {
        whole.saturating_add(1)
    } else {
        whole
    };
    if whole > u64::MAX as u128 {
        u64::MAX
    } else {
        whole as u64
    }
}

/// `ticks` at `hz` ticks per second, as nanoseconds rounded down; saturates at `u64::MAX`.
/// A zero `hz` (never a real tick rate) gives `u64::MAX`. (The conversions use the firmware's
/// rate, reduced at compile time; this is their model at any rate, for the tests.)
#[cfg(test)]
const fn ticks_to_nanos(ticks: u64, hz: u64) -> u64 {
    scale(ticks, reduced(NANOS_PER_SEC, hz), false)
}

/// `nanos` as ticks at `hz` ticks per second, rounded up; saturates at `u64::MAX`.
#[cfg(test)]
const fn nanos_to_ticks_ceil(nanos: u64, hz: u64) -> u64 {
    if hz == 0 {
        return u64::MAX;
    }
    scale(nanos, reduced(hz, NANOS_PER_SEC), true)
}

/// An embassy instant (ticks since boot) as a core [`Instant`](CoreInstant) (nanoseconds since
/// boot), rounded down and saturating at [`CoreInstant::MAX`].
///
/// ```
/// use stormguard_embassy::time::to_core_instant;
///
/// let at = embassy_time::Instant::from_millis(1_500);
/// assert_eq!(to_core_instant(at), stormguard_core::Instant::from_millis(1_500));
/// ```
#[must_use]
pub const fn to_core_instant(instant: EmbassyInstant) -> CoreInstant {
    CoreInstant::from_nanos(scale(instant.as_ticks(), NANOS_PER_TICK, false))
}

/// An embassy duration as a core [`Duration`](CoreDuration), rounded down and saturating at
/// [`CoreDuration::MAX`].
///
/// ```
/// use stormguard_embassy::time::to_core_duration;
///
/// let d = embassy_time::Duration::from_millis(20);
/// assert_eq!(to_core_duration(d), stormguard_core::Duration::from_millis(20));
/// ```
#[must_use]
pub const fn to_core_duration(duration: EmbassyDuration) -> CoreDuration {
    CoreDuration::from_nanos(scale(duration.as_ticks(), NANOS_PER_TICK, false))
}

/// A core [`Duration`](CoreDuration) as an embassy duration, rounded **up** to whole ticks (a
/// sleep is never shorter than the core asked for) and saturating at [`EmbassyDuration::MAX`].
///
/// [`CoreDuration::MAX`] (the core's "not until something else happens") maps to
/// [`EmbassyDuration::MAX`] at every tick rate of 1 GHz or more; at lower rates it maps to the
/// equivalent tick count, about 584 years.
///
/// ```
/// use stormguard_embassy::time::to_embassy_duration;
///
/// let pause = stormguard_core::Duration::from_millis(100);
/// assert_eq!(to_embassy_duration(pause), embassy_time::Duration::from_millis(100));
/// ```
#[must_use]
pub const fn to_embassy_duration(duration: CoreDuration) -> EmbassyDuration {
    EmbassyDuration::from_ticks(scale(duration.as_nanos(), TICKS_PER_NANO, true))
}

/// A core [`Instant`](CoreInstant) (nanoseconds since boot) as an embassy instant (ticks since
/// boot), rounded **up** to whole ticks (a timer set for it never fires early) and saturating at
/// [`EmbassyInstant::MAX`].
///
/// This is how the adapter turns the core's waits and deadlines into [`embassy_time::Timer::at`].
///
/// ```
/// use stormguard_embassy::time::{to_core_instant, to_embassy_instant};
///
/// let deadline = stormguard_core::Instant::from_millis(2_100);
/// let at = to_embassy_instant(deadline);
/// assert_eq!(at, embassy_time::Instant::from_millis(2_100));
/// assert_eq!(to_core_instant(at), deadline);
/// ```
#[must_use]
// A policy converts three deadlines with it: one copy of its division, not three inlined ones.
#[inline(never)]
pub const fn to_embassy_instant(instant: CoreInstant) -> EmbassyInstant {
    EmbassyInstant::from_ticks(scale(instant.as_nanos(), TICKS_PER_NANO, true))
}

/// A clock reading embassy's time driver: [`now`](EmbassyClock::now) is
/// [`embassy_time::Instant::now()`] as a core [`Instant`](CoreInstant), so the core's epoch is the
/// chip's boot.
///
/// It is a zero-sized `Copy` value: keep one wherever a task needs the time.
///
/// ```no_run
/// use stormguard_embassy::EmbassyClock;
///
/// let clock = EmbassyClock::new();
/// let now: stormguard_core::Instant = clock.now();
/// # let _ = now;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmbassyClock {
    _private: (),
}

impl EmbassyClock {
    /// A clock over the firmware's embassy time driver.
    #[must_use]
    pub const fn new() -> Self {
        EmbassyClock { _private: () }
    }

    /// The current time, from [`embassy_time::Instant::now()`].
    #[must_use]
    pub fn now(&self) -> CoreInstant {
        to_core_instant(EmbassyInstant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_convert_exactly_at_common_rates() {
        // 1 MHz (embassy's default on the host), 1 kHz, 32.768 kHz (an RTC crystal).
        assert_eq!(ticks_to_nanos(1_500_000, 1_000_000), 1_500_000_000);
        assert_eq!(ticks_to_nanos(3, 1_000), 3_000_000);
        assert_eq!(ticks_to_nanos(32_768, 32_768), NANOS_PER_SEC);
        assert_eq!(ticks_to_nanos(1, 32_768), 30_517); // 30517.578125 rounded down
        assert_eq!(nanos_to_ticks_ceil(NANOS_PER_SEC, 32_768), 32_768);
        assert_eq!(nanos_to_ticks_ceil(1, 32_768), 1);
        assert_eq!(nanos_to_ticks_ceil(30_517, 32_768), 1);
        assert_eq!(nanos_to_ticks_ceil(30_518, 32_768), 2);
        assert_eq!(nanos_to_ticks_ceil(0, 32_768), 0);
    }

    #[test]
    fn a_converted_sleep_is_never_shorter() {
        for hz in [1, 1_000, 32_768, 1_000_000, 1_000_000_000] {
            for nanos in [0, 1, 999, 1_000_001, 123_456_789, 10 * NANOS_PER_SEC + 7] {
                let ticks = nanos_to_ticks_ceil(nanos, hz);
                assert!(ticks_to_nanos(ticks, hz) >= nanos, "{nanos} ns at {hz} Hz");
            }
        }
    }

    #[test]
    fn the_64_bit_path_agrees_with_128_bit_arithmetic() {
        let values = [
            0,
            1,
            999,
            1_000_001,
            30_517,
            30_518,
            123_456_789,
            NANOS_PER_SEC - 1,
            10 * NANOS_PER_SEC + 7,
            u64::MAX / 1_000_000_000,
            u64::MAX / 32_768,
            u64::MAX / 1000,
            u64::MAX - 1,
            u64::MAX,
        ];
        for hz in [
            1,
            3,
            1_000,
            32_768,
            40_000,
            1_000_000,
            16_000_000,
            1_000_000_000,
        ] {
            for v in values {
                assert_eq!(
                    ticks_to_nanos(v, hz),
                    scale_wide(v, NANOS_PER_SEC, hz, false),
                    "{v} ticks at {hz} Hz"
                );
                assert_eq!(
                    nanos_to_ticks_ceil(v, hz),
                    scale_wide(v, hz, NANOS_PER_SEC, true),
                    "{v} ns at {hz} Hz"
                );
            }
        }
        // Above 18 GHz the 128-bit path is taken, and agrees with itself.
        assert_eq!(ticks_to_nanos(3, 20_000_000_001), 0);
        assert_eq!(nanos_to_ticks_ceil(1, 20_000_000_001), 21);
    }

    #[test]
    fn conversions_saturate_instead_of_overflowing() {
        assert_eq!(ticks_to_nanos(u64::MAX, 1_000_000), u64::MAX);
        assert_eq!(ticks_to_nanos(u64::MAX, 1), u64::MAX);
        assert_eq!(nanos_to_ticks_ceil(u64::MAX, 1_310_720_000), u64::MAX);
        assert_eq!(ticks_to_nanos(7, 0), u64::MAX);
        assert_eq!(to_core_instant(EmbassyInstant::MAX), CoreInstant::MAX);
        assert_eq!(to_core_duration(EmbassyDuration::MAX), CoreDuration::MAX);
        // At the host's 1 MHz, the core's longest span is u64::MAX / 1000 ticks, rounded up.
        assert_eq!(
            to_embassy_duration(CoreDuration::MAX).as_ticks(),
            u64::MAX / 1000 + 1
        );
    }

    #[test]
    fn instants_round_up_to_whole_ticks() {
        let i = CoreInstant::from_millis(1_234);
        assert_eq!(to_core_instant(to_embassy_instant(i)), i);
        // 1 MHz on the host: 1 ns past a tick is the next tick.
        let just_after = CoreInstant::from_nanos(1_000_001);
        assert_eq!(to_embassy_instant(just_after).as_ticks(), 1_001);
        assert!(to_core_instant(to_embassy_instant(just_after)) >= just_after);
    }

    #[test]
    fn durations_round_trip_at_the_host_tick_rate() {
        let d = CoreDuration::from_micros(2_500);
        assert_eq!(to_core_duration(to_embassy_duration(d)), d);
        // Sub-tick spans round up to a whole tick.
        let tiny = CoreDuration::from_nanos(1);
        assert_eq!(to_embassy_duration(tiny), EmbassyDuration::from_ticks(1));
    }
}
