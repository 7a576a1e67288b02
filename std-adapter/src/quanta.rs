//! The `quanta` clock: a calibrated TSC read, cheaper than `std::time::Instant::now()`.

use stormguard_core::Instant;

use crate::Clock;

/// The [`quanta`] crate's clock (the CPU's time-stamp counter, calibrated against the OS's
/// monotonic clock; the OS clock where the TSC is unusable), mapped onto the core's [`Instant`].
///
/// Reading it costs about half of `std::time::Instant::now()` on x86-64 (see the crate's
/// benchmark), which matters because a policy reads its clock twice per attempt. It does **not**
/// follow tokio's paused time: tests that pause tokio's clock keep the default
/// [`TokioClock`](crate::TokioClock).
///
/// [`QuantaClock::global`] is aligned with [`process_epoch`](crate::process_epoch) when it is
/// built, so it agrees with the other global clocks (to within the TSC calibration's drift,
/// microseconds per hour).
///
/// ```
/// use stormguard_std::{Clock, MonotonicClock, QuantaClock};
///
/// let quanta = QuantaClock::global();
/// let std = MonotonicClock::global();
/// let (a, b) = (quanta.now(), std.now());
/// let apart = if a > b { a - b } else { b - a };
/// assert!(apart.as_millis() < 50);
/// ```
#[derive(Clone, Debug)]
pub struct QuantaClock {
    clock: quanta::Clock,
    epoch: quanta::Instant,
}

impl QuantaClock {
    /// A clock whose epoch ([`Instant::ZERO`]) is now.
    #[must_use]
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let epoch = clock.now();
        QuantaClock { clock, epoch }
    }

    /// A clock whose epoch is [`process_epoch`](crate::process_epoch), like the other global
    /// clocks.
    #[must_use]
    pub fn global() -> Self {
        let clock = quanta::Clock::new();
        let since = std::time::Instant::now().saturating_duration_since(crate::process_epoch());
        let now = clock.now();
        // The TSC counts from boot or so: an hour before the epoch may not exist on it. Then
        // the epoch is the reading itself and this clock runs behind the others by `since`.
        let epoch = now.checked_sub(since).unwrap_or(now);
        QuantaClock { clock, epoch }
    }
}

impl Default for QuantaClock {
    /// Same as [`QuantaClock::new`].
    fn default() -> Self {
        QuantaClock::new()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> Instant {
        crate::clock::instant_after(self.clock.now().saturating_duration_since(self.epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::Duration;

    #[test]
    fn the_quanta_clock_never_steps_back() {
        let clock = QuantaClock::new();
        let mut last = clock.now();
        for _ in 0..10_000 {
            let now = clock.now();
            assert!(now >= last);
            last = now;
        }
        assert!(last < Instant::from_secs(60));
    }

    #[test]
    fn the_global_quanta_clock_agrees_with_the_global_std_clock() {
        let quanta = QuantaClock::global();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let a = quanta.now();
        let b = crate::MonotonicClock::global().now();
        let apart = if a > b { a - b } else { b - a };
        assert!(apart < Duration::from_millis(20), "{a} vs {b}");
    }
}
