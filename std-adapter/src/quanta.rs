//! The `quanta` clocks: a calibrated TSC read, cheaper than `std::time::Instant::now()`, and a
//! coarse clock that is one atomic load.

use std::sync::{Mutex, PoisonError};

use stormguard_core::{Duration, Instant};

use crate::Clock;

/// The [`quanta`] crate's clock (the CPU's time-stamp counter, calibrated against the OS's
/// monotonic clock; the OS clock where the TSC is unusable), mapped onto the core's [`Instant`].
///
/// Reading it costs about half of `std::time::Instant::now()` on x86-64 (see the crate's
/// benchmark), which matters because a policy reads its clock twice per attempt. It does **not**
/// follow tokio's paused time; the [`DefaultClock`](crate::DefaultClock) reads it outside
/// paused time and [`TokioClock`](crate::clock::TokioClock) within it.
///
/// [`QuantaClock::global`] is aligned with [`process_epoch`](crate::clock::process_epoch) when it is
/// built, so it agrees with the other global clocks (to within the TSC calibration's drift,
/// microseconds per hour).
///
/// ```
/// use stormguard_std::Clock;
/// use stormguard_std::clock::{MonotonicClock, QuantaClock};
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
    /// At a raw counter reading: a reading is scaled once, as its distance from this one.
    anchor: Anchor<u64>,
}

/// A reading of a counter that starts about at boot: a `quanta::Instant` (in tests, the time
/// since boot itself).
trait Reading: Copy {
    /// Time from `earlier` to `self`, zero if `earlier` is later.
    fn since(self, earlier: Self) -> std::time::Duration;
}

impl Reading for quanta::Instant {
    #[inline]
    fn since(self, earlier: Self) -> std::time::Duration {
        self.saturating_duration_since(earlier)
    }
}

/// Where a counter meets the core's time: a reading of the counter (`at`) and the core instant
/// it stands for (`reads`); later readings count on from there.
///
/// The epoch itself is never a reading of the counter: the counter starts about at boot and the
/// process epoch lies an hour before the first reading, which on a host up for less than an
/// hour is before the counter's zero. Anchoring at a reading taken now works whatever the
/// uptime.
#[derive(Clone, Copy, Debug)]
struct Anchor<R> {
    at: R,
    reads: Instant,
}

impl<R> Anchor<R> {
    /// An anchor at reading `at`, taken `since_epoch` after the epoch of the core's time.
    fn new(at: R, since_epoch: std::time::Duration) -> Anchor<R> {
        Anchor {
            at,
            reads: crate::clock::instant_after(since_epoch),
        }
    }

    /// The core instant `elapsed` after the anchor's reading.
    #[inline]
    fn after(self, elapsed: Duration) -> Instant {
        self.reads.saturating_add(elapsed)
    }
}

impl<R: Reading> Anchor<R> {
    /// `reading` (of the same counter, at or after the anchor) in the core's terms.
    #[inline]
    fn to_core(self, reading: R) -> Instant {
        self.after(reading.since(self.at).into())
    }
}

/// An anchor at `reading` (taken now) at [`process_epoch`](crate::clock::process_epoch)'s time, as
/// the other global clocks read it now.
fn process_anchor<R>(reading: R) -> Anchor<R> {
    let since = std::time::Instant::now().saturating_duration_since(crate::clock::process_epoch());
    Anchor::new(reading, since)
}

impl QuantaClock {
    /// A clock whose epoch ([`Instant::ZERO`]) is now.
    #[must_use]
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let anchor = Anchor::new(clock.raw(), std::time::Duration::ZERO);
        QuantaClock { clock, anchor }
    }

    /// A clock whose epoch is [`process_epoch`](crate::clock::process_epoch), like the other global
    /// clocks, however long the host has been up.
    #[must_use]
    pub fn global() -> Self {
        let clock = quanta::Clock::new();
        let anchor = process_anchor(clock.raw());
        QuantaClock { clock, anchor }
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
        // The raw counter and one scaling of its distance from the anchor: `quanta`'s `now`
        // would scale the reading itself, and a `Duration` between two of them divide again.
        let raw = self.clock.raw();
        let elapsed = self.clock.delta_as_nanos(self.anchor.at, raw);
        self.anchor.after(Duration::from_nanos(elapsed))
    }
}

/// A clock read with one atomic load: `quanta`'s "recent" time, which a background thread
/// moves forward every [`CoarseClock::RESOLUTION`]. Mapped onto the core's [`Instant`] with the
/// same epoch as [`QuantaClock::global`].
///
/// Made for what only needs whole milliseconds, read very often: the retry budget counts its
/// floor in whole milliseconds, and break durations and the rejection pause are 100 ms and more,
/// so a budget or a consecutive-failure breaker loses nothing to it. What measures latency does:
/// an attempt shorter than the resolution reads as taking 0 or 1 ms, so the slow-call rule and
/// the learned median need [`QuantaClock`] or [`MonotonicClock`](crate::clock::MonotonicClock).
///
/// The update thread (named `quanta-upkeep`) is process-wide; [`CoarseClock::start`] starts it
/// once and keeps it running. If another part of the program already started `quanta`'s upkeep
/// thread, this clock reads that one, at that one's interval.
///
/// ```
/// use stormguard_std::{Budget, Clock};
/// use stormguard_std::clock::CoarseClock;
///
/// let clock = CoarseClock::start()?;
/// let budget = Budget::defaults("payments");
/// budget.shared().deposit(clock.now());
/// assert!(budget.shared().try_withdraw(clock.now()).is_ok());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct CoarseClock {
    anchor: Anchor<quanta::Instant>,
    clock: quanta::Clock,
}

/// The running upkeep thread; dropping its handle would stop it, so it lives here for good.
static UPKEEP: Mutex<Option<quanta::Handle>> = Mutex::new(None);

impl CoarseClock {
    /// How often the update thread moves the time forward (when this crate started it).
    pub const RESOLUTION: std::time::Duration = std::time::Duration::from_millis(1);

    /// The coarse clock, starting the process-wide update thread if nothing started it yet.
    ///
    /// # Errors
    /// The operating system's error when the update thread could not be spawned.
    pub fn start() -> std::io::Result<CoarseClock> {
        let clock = quanta::Clock::new();
        // Only construction takes this lock, never a reading.
        let mut upkeep = UPKEEP.lock().unwrap_or_else(PoisonError::into_inner);
        if upkeep.is_none() {
            match quanta::Upkeep::new_with_clock(Self::RESOLUTION, clock.clone()).start() {
                Ok(handle) => *upkeep = Some(handle),
                // Someone else keeps the recent time moving; read theirs.
                Err(quanta::Error::UpkeepRunning) => {}
                Err(quanta::Error::FailedToSpawnUpkeepThread(e)) => return Err(e),
            }
        }
        drop(upkeep);
        let anchor = process_anchor(clock.now());
        Ok(CoarseClock { anchor, clock })
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Instant {
        self.anchor.to_core(self.clock.recent())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::Duration;

    // The TSC is read with inline assembly, which miri cannot run.
    #[test]
    #[cfg(not(miri))]
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

    /// A counter reading as the time since boot.
    #[derive(Clone, Copy, Debug)]
    struct Uptime(std::time::Duration);

    impl Reading for Uptime {
        fn since(self, earlier: Self) -> std::time::Duration {
            self.0.saturating_sub(earlier.0)
        }
    }

    #[test]
    fn a_global_counter_clock_reads_the_process_epochs_time_whatever_the_uptime() {
        let secs = std::time::Duration::from_secs;
        // The process epoch lies an hour before the anchor (as `process_epoch` places it).
        for uptime in [secs(5), secs(2 * 3_600)] {
            let anchor = Anchor::new(Uptime(uptime), secs(3_600));
            assert_eq!(
                anchor.to_core(Uptime(uptime + secs(1))),
                Instant::from_secs(3_601),
                "at an uptime of {uptime:?}"
            );
        }
    }

    // The TSC is read with inline assembly, which miri cannot run.
    #[test]
    #[cfg(not(miri))]
    fn the_global_quanta_clock_agrees_with_the_global_std_clock() {
        let quanta = QuantaClock::global();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let a = quanta.now();
        let b = crate::clock::MonotonicClock::global().now();
        let apart = if a > b { a - b } else { b - a };
        assert!(apart < Duration::from_millis(20), "{a} vs {b}");
    }

    // The TSC is read with inline assembly, which miri cannot run.
    #[test]
    #[cfg(not(miri))]
    fn the_coarse_clock_moves_on_by_itself_and_agrees_with_the_quanta_clock() {
        let coarse = CoarseClock::start().unwrap();
        let again = CoarseClock::start().unwrap();
        let precise = QuantaClock::global();
        // The update thread runs beside the tests, on a shared machine: each property is
        // waited for (up to 5 s) rather than expected after a fixed sleep.
        let first = coarse.now();
        let (mut moved, mut agreed) = (false, false);
        for _ in 0..500 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            moved |= coarse.now() >= first + Duration::from_millis(20);
            let (a, b) = (again.now(), precise.now());
            let apart = if a > b { a - b } else { b - a };
            // One resolution apart, plus however late the update thread was scheduled.
            agreed |= apart < Duration::from_millis(5);
            if moved && agreed {
                break;
            }
        }
        assert!(moved, "the coarse clock did not move by itself");
        assert!(
            agreed,
            "the coarse clock never came within 5 ms of the quanta clock"
        );
        let mut last = coarse.now();
        for _ in 0..10_000 {
            let now = coarse.now();
            assert!(now >= last);
            last = now;
        }
    }
}
