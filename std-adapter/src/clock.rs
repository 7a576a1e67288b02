//! Clocks: where an adapter gets the `now` it hands to the core.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use stormguard_core::{Duration, Instant};

#[cfg(feature = "quanta")]
#[cfg_attr(docsrs, doc(cfg(feature = "quanta")))]
pub use crate::quanta::{CoarseClock, QuantaClock};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use crate::tokio::TokioClock;

/// A source of the current time in the core's terms.
///
/// Adapters read the clock twice per attempt (before and after) and hand the readings to the core;
/// tests substitute a [`ManualClock`] or a paused tokio clock. Implementations must be monotonic:
/// the core tolerates a reading that steps backwards (it means "no time passed"), but such a
/// clock skews every measurement.
///
/// ```
/// use stormguard_std::Instant;
/// use stormguard_std::Clock;
///
/// /// A clock frozen at one instant.
/// struct Frozen(Instant);
///
/// impl Clock for Frozen {
///     fn now(&self) -> Instant {
///         self.0
///     }
/// }
///
/// fn elapsed_since(clock: &impl Clock, start: Instant) -> stormguard_std::Duration {
///     clock.now() - start
/// }
///
/// let at = Instant::from_secs(7);
/// assert!(elapsed_since(&Frozen(at), at).is_zero());
/// ```
pub trait Clock {
    /// The current time.
    fn now(&self) -> Instant;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Instant {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }
}

/// A clock whose readings never step back, whatever the clock it reads does: what a
/// [`Policy`](crate::Policy) and the health [`Registry`](crate::health::Registry) read through.
///
/// The core reads a reading earlier than the last as "no time passed", but a call's deadline, an
/// open breaker's end and a budget's refill are instants of one clock: a custom clock stepped
/// back an hour would keep a 1 s deadline an hour away, and a breaker open for that hour plus
/// its break. So a reading earlier than the latest one handed out is lifted to it, and the step
/// is remembered as an offset: later readings count on from there, as if the step had not
/// happened. (Lifting to the latest alone would stop the clock for as long as the step, an hour
/// in which no deadline and no break ends.) A step forward is passed on as it comes.
///
/// Lock-free, and no write per reading: two loads, a `fetch_max` only when a reading is a
/// millisecond or more past the latest one published (so threads reading one policy's clock do
/// not contend for it), and one more reading of the inner clock when a reading comes out earlier
/// than the latest (a step back, or a race with another thread, which the second reading tells
/// apart; a gap under a second is only ever lifted). So a clock that steps back by less than a
/// millisecond may hand out a reading that much earlier than one before it, which the core reads
/// as no time passed; a monotonic clock's readings never step back. Clones share the latest
/// reading and the offset, as clones of a policy share its breaker.
///
/// ```
/// use stormguard_std::{Duration, Instant};
/// use stormguard_std::{Clock, ManualClock};
/// use stormguard_std::clock::SteadyClock;
///
/// let raw = ManualClock::starting_at(Instant::from_secs(7_200));
/// let clock = SteadyClock::new(raw.clone());
/// assert_eq!(clock.now(), Instant::from_secs(7_200));
/// raw.set(Instant::from_secs(3_600)); // stepped back an hour
/// assert_eq!(clock.now(), Instant::from_secs(7_200));
/// raw.advance(Duration::from_secs(15));
/// assert_eq!(clock.now(), Instant::from_secs(7_215));
/// ```
#[derive(Clone, Debug)]
pub struct SteadyClock<K> {
    clock: K,
    seen: Arc<Seen>,
}

/// What a [`SteadyClock`] and its clones remember, in nanoseconds: the latest reading handed
/// out, and how far the inner clock has stepped back in all (added to its readings).
#[derive(Debug, Default)]
struct Seen {
    latest: AtomicU64,
    offset: AtomicU64,
}

impl<K> SteadyClock<K> {
    /// Reads `clock`, never stepping back.
    #[must_use]
    pub fn new(clock: K) -> Self {
        SteadyClock {
            clock,
            seen: Arc::default(),
        }
    }

    /// The clock read underneath.
    #[must_use]
    pub const fn inner(&self) -> &K {
        &self.clock
    }

    /// `at` (a reading of the inner clock taken elsewhere) lifted to the latest reading handed
    /// out, if it is earlier.
    #[must_use]
    pub fn at_least_latest(&self, at: Instant) -> Instant {
        at.max(Instant::from_nanos(
            self.seen.latest.load(Ordering::Acquire),
        ))
    }
}

impl<K: Clock> Clock for SteadyClock<K> {
    #[inline]
    fn now(&self) -> Instant {
        // The offset is loaded before the inner clock is read, so a reading never gets an
        // offset made from a later reading than itself.
        let offset = self.seen.offset.load(Ordering::Acquire);
        let raw = self.clock.now().as_nanos();
        let reading = raw.saturating_add(offset);
        let latest = self.seen.latest.load(Ordering::Acquire);
        // The common case, small enough to inline at every reading: at or past the latest
        // reading handed out, by less than the grain that publishes it.
        if reading >= latest && reading.saturating_sub(latest) < PUBLISH_GRAIN.as_nanos() {
            return Instant::from_nanos(reading);
        }
        self.settle(raw, reading, latest)
    }
}

impl<K: Clock> SteadyClock<K> {
    /// The rest of [`SteadyClock::now`], for a reading (`raw` from the inner clock, `reading`
    /// with the offset added) that is a grain past `latest`, and so published, or earlier than
    /// it.
    #[cold]
    #[inline(never)]
    fn settle(&self, mut raw: u64, mut reading: u64, mut latest: u64) -> Instant {
        let seen = &*self.seen;
        let mut again = false;
        loop {
            if reading >= latest {
                // Published once it has moved a grain: a write to the shared word on every
                // reading is what made a policy's calls from many threads contend.
                if reading.saturating_sub(latest) >= PUBLISH_GRAIN.as_nanos() {
                    seen.latest.fetch_max(reading, Ordering::AcqRel);
                }
                return Instant::from_nanos(reading);
            }
            if again {
                // Read after `latest` was handed out and still earlier: the inner clock stepped
                // back, or this thread lost a second race (it was preempted between reading and
                // publishing). A gap shorter than `STEP_TOLERANCE` is only lifted, so a race
                // never moves the clock on; a longer one is a step, and later readings count on
                // from `latest`.
                let gap = latest.saturating_sub(reading);
                if gap >= STEP_TOLERANCE.as_nanos() {
                    seen.offset
                        .fetch_max(latest.saturating_sub(raw), Ordering::AcqRel);
                }
                return Instant::from_nanos(latest);
            }
            // Earlier than the latest: a step back, or another thread's later reading
            // published between this one and the load of `latest`. A reading taken now, after
            // that one, is not earlier unless the clock stepped back.
            again = true;
            let offset = seen.offset.load(Ordering::Acquire);
            raw = self.clock.now().as_nanos();
            reading = raw.saturating_add(offset);
            latest = seen.latest.load(Ordering::Acquire);
        }
    }
}

/// How far a reading must be past the latest published one to be published in turn. Between
/// two publications a thread's readings are its clock's own, so a clock that steps back by less
/// than this (never a monotonic one) may hand out a reading up to this much earlier than one it
/// handed out before; the core reads that as no time passed.
const PUBLISH_GRAIN: Duration = Duration::from_millis(1);

/// The shortest step back a [`SteadyClock`] counts on from: a shorter gap (a thread preempted
/// between reading the clock and publishing the reading, while others read on; on a loaded
/// host that can be tens of milliseconds) is lifted to the latest reading, which stops the clock
/// for at most this long. A second is far longer than any preemption and far shorter than the
/// steps that matter (an hour's correction).
const STEP_TOLERANCE: Duration = Duration::from_secs(1);

/// How far before its first reading the process-wide epoch lies (where the platform can
/// represent it): a tokio runtime with paused time that was created before the first reading
/// still reads at or after the epoch.
const EPOCH_MARGIN: std::time::Duration = std::time::Duration::from_secs(3600);

static PROCESS_EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

/// The epoch of the process-wide clocks ([`MonotonicClock::global`], `TokioClock::global`,
/// `QuantaClock::global`): an hour before the first time anything asked for it (or the first
/// reading itself, on a platform that cannot represent an earlier instant).
///
/// Every breaker, budget and call that meets another must read time from the same epoch: a
/// permit's grant instant, an open breaker's `until` and a call's deadline are all instants
/// since it. The global clocks share this one, so breakers, budgets, policies and the health
/// registry agree without passing a clock around.
///
/// ```
/// use stormguard_std::clock::{process_epoch, MonotonicClock};
/// use stormguard_std::Clock;
///
/// assert_eq!(process_epoch(), process_epoch());
/// assert_eq!(MonotonicClock::global().epoch(), process_epoch());
/// assert!(process_epoch() <= std::time::Instant::now());
/// ```
pub fn process_epoch() -> std::time::Instant {
    *PROCESS_EPOCH.get_or_init(|| {
        let now = std::time::Instant::now();
        now.checked_sub(EPOCH_MARGIN).unwrap_or(now)
    })
}

/// The clock a [`Policy`](crate::Policy) reads unless told otherwise, and that the handles'
/// methods without a `now` read: [`QuantaClock`] (a calibrated TSC read,
/// under half the cost of `std::time::Instant::now()`), or, where it is made inside a tokio
/// runtime whose time is paused, [`TokioClock`], so that paused-time tests
/// drive every reading (`#[tokio::test(start_paused = true)]`, `tokio::time::pause()`, then
/// `advance`). Both count from [`process_epoch`].
///
/// The choice is made when the clock is made ([`DefaultClock::global`]: when a policy's
/// builder, a health registry or a subscription is made, and at each of the handles' methods
/// without a `now`): a policy built before its test pauses tokio's time keeps reading the real
/// clock. Pause first (or give the policy [`TokioClock::global`](crate::clock::TokioClock::global)).
/// Made outside any runtime, it reads the TSC.
///
/// ```
/// use stormguard_std::{Clock, DefaultClock, Duration};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = DefaultClock::global();
/// assert!(clock.follows_paused_time());
/// let before = clock.now();
/// tokio::time::advance(std::time::Duration::from_secs(30)).await;
/// assert_eq!(clock.now() - before, Duration::from_secs(30));
/// # }
/// ```
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
#[derive(Clone, Debug)]
pub struct DefaultClock {
    source: Source,
}

/// What a [`DefaultClock`] reads.
#[cfg(feature = "tokio")]
#[derive(Clone, Debug)]
enum Source {
    Tsc(crate::clock::QuantaClock),
    Tokio(crate::clock::TokioClock),
}

#[cfg(feature = "tokio")]
impl DefaultClock {
    /// The process-wide default clock, from [`process_epoch`]: tokio's clock in a runtime
    /// whose time is paused, the TSC otherwise.
    #[must_use]
    pub fn global() -> Self {
        // Miri cannot read the TSC; tokio's clock is right everywhere, only dearer.
        let source = if cfg!(miri) || tokio_time_paused() {
            Source::Tokio(crate::clock::TokioClock::global())
        } else {
            Source::Tsc(process_tsc().clone())
        };
        DefaultClock { source }
    }

    /// Whether this clock reads tokio's (paused) time rather than the TSC.
    #[must_use]
    pub const fn follows_paused_time(&self) -> bool {
        matches!(self.source, Source::Tokio(_))
    }
}

#[cfg(feature = "tokio")]
impl Clock for DefaultClock {
    #[inline]
    fn now(&self) -> Instant {
        match &self.source {
            Source::Tsc(clock) => clock.now(),
            Source::Tokio(clock) => clock.now(),
        }
    }
}

/// The process's one TSC clock, anchored once: every default clock reading it agrees with
/// every other to the nanosecond (clocks anchored apart would differ by the calibration's
/// drift over the time between them).
#[cfg(feature = "tokio")]
fn process_tsc() -> &'static crate::clock::QuantaClock {
    static TSC: OnceLock<crate::clock::QuantaClock> = OnceLock::new();
    TSC.get_or_init(crate::clock::QuantaClock::global)
}

/// Whether this thread runs inside a tokio runtime whose time is paused: tokio's clock stands
/// still while the real one moves on (a paused clock moves only when told to, or when the
/// runtime has nothing else to do, never within synchronous code). tokio offers no way to ask.
/// Where the real clock does not seem to move, the answer is yes: reading tokio's clock is
/// right either way, only dearer.
#[cfg(feature = "tokio")]
fn tokio_time_paused() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    let before = tokio::time::Instant::now();
    let real = std::time::Instant::now();
    // A few reads on a nanosecond clock; at most a tick of a coarse one.
    let moved = (0..100_000).any(|_| std::time::Instant::now() > real);
    !moved || tokio::time::Instant::now() == before
}

/// The clock a [`Policy`](crate::Policy) reads unless told otherwise, and that the handles'
/// methods without a `now` read: without the `tokio` feature, [`MonotonicClock`] (with it, the
/// TSC, or tokio's clock in paused time). It counts from [`process_epoch`].
#[cfg(not(feature = "tokio"))]
pub type DefaultClock = MonotonicClock;

/// A `std` duration since an epoch as the core's instant, saturating at [`Instant::MAX`].
/// Whole seconds and the sub-second part in 64-bit arithmetic: cheaper than going through
/// `as_nanos()`'s 128 bits, and this runs twice per attempt.
#[inline]
pub(crate) fn instant_after(d: std::time::Duration) -> Instant {
    Instant::from_nanos(
        d.as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(d.subsec_nanos())),
    )
}

/// The process-wide [`DefaultClock`].
pub(crate) fn default_clock() -> DefaultClock {
    DefaultClock::global()
}

/// The operating system's monotonic clock ([`std::time::Instant`]), mapped onto the core's
/// [`Instant`] as the time since an epoch captured at construction.
///
/// The first reading is close to [`Instant::ZERO`]; readings saturate at [`Instant::MAX`]
/// (about 584 years after the epoch). Cloning keeps the epoch, so clones agree.
///
/// ```
/// use stormguard_std::Clock;
/// use stormguard_std::clock::MonotonicClock;
///
/// let clock = MonotonicClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    epoch: std::time::Instant,
}

impl MonotonicClock {
    /// A clock whose epoch ([`Instant::ZERO`]) is now.
    #[must_use]
    pub fn new() -> Self {
        MonotonicClock::with_epoch(std::time::Instant::now())
    }

    /// A clock whose epoch ([`Instant::ZERO`]) is `epoch`.
    #[must_use]
    pub const fn with_epoch(epoch: std::time::Instant) -> Self {
        MonotonicClock { epoch }
    }

    /// The process-wide clock: its epoch is [`process_epoch`], shared by every global clock, the
    /// breaker and budget handles and the health registry.
    ///
    /// ```
    /// use stormguard_std::Clock;
    /// use stormguard_std::clock::MonotonicClock;
    ///
    /// let a = MonotonicClock::global();
    /// let b = MonotonicClock::global();
    /// assert_eq!(a.epoch(), b.epoch());
    /// let first = a.now();
    /// assert!(b.now() >= first);
    /// ```
    #[must_use]
    pub fn global() -> Self {
        MonotonicClock::with_epoch(process_epoch())
    }

    /// The `std` instant this clock counts from.
    #[must_use]
    pub const fn epoch(&self) -> std::time::Instant {
        self.epoch
    }

    /// `at` in the core's terms: time since the epoch, [`Instant::ZERO`] for anything earlier.
    ///
    /// ```
    /// use stormguard_std::{Duration, Instant};
    /// use stormguard_std::clock::MonotonicClock;
    ///
    /// let clock = MonotonicClock::new();
    /// let later = clock.epoch() + std::time::Duration::from_millis(40);
    /// assert_eq!(clock.to_core(later), Instant::ZERO + Duration::from_millis(40));
    /// ```
    #[must_use]
    pub fn to_core(&self, at: std::time::Instant) -> Instant {
        instant_after(at.saturating_duration_since(self.epoch))
    }

    /// A core instant as a `std` instant, for sleeping until a deadline the core computed.
    /// `None` if the platform cannot represent it (only for instants centuries away).
    ///
    /// ```
    /// use stormguard_std::{Duration, Instant};
    /// use stormguard_std::clock::MonotonicClock;
    ///
    /// let clock = MonotonicClock::new();
    /// let deadline = Instant::ZERO + Duration::from_secs(2);
    /// let at = clock.to_std(deadline).unwrap();
    /// assert_eq!(clock.to_core(at), deadline);
    /// ```
    #[must_use]
    pub fn to_std(&self, at: Instant) -> Option<std::time::Instant> {
        self.epoch.checked_add(at.since_epoch().into())
    }
}

impl Default for MonotonicClock {
    /// Same as [`MonotonicClock::new`]: the epoch is now.
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Instant {
        self.to_core(std::time::Instant::now())
    }
}

/// A clock that moves only when told to, for tests.
///
/// Clones share the same time (an `Arc<AtomicU64>` of nanoseconds), so a test keeps one handle
/// and gives another to the code under test. Moving it saturates at [`Instant::MAX`].
///
/// ```
/// use stormguard_std::{Duration, Instant};
/// use stormguard_std::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let handle = clock.clone();
/// clock.advance(Duration::from_secs(15));
/// assert_eq!(handle.now(), Instant::from_secs(15));
/// clock.set(Instant::from_secs(3)); // setting it back is allowed; the core reads it as no time passed
/// assert_eq!(handle.now(), Instant::from_secs(3));
/// // A `std::time::Duration` works as well.
/// clock.advance(std::time::Duration::from_millis(500));
/// assert_eq!(handle.now(), Instant::from_millis(3_500));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at [`Instant::ZERO`].
    #[must_use]
    pub fn new() -> Self {
        ManualClock::starting_at(Instant::ZERO)
    }

    /// A clock standing at `at`.
    #[must_use]
    pub fn starting_at(at: Instant) -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(at.as_nanos())),
        }
    }

    /// Moves the clock forward by `by` (a core or `std` duration), saturating at
    /// [`Instant::MAX`]; returns the new time.
    pub fn advance(&self, by: impl Into<Duration>) -> Instant {
        let by = by.into().as_nanos();
        let step = |nanos: u64| Some(nanos.saturating_add(by));
        // The closure always returns `Some`, so both arms carry the previous value.
        let previous = match self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, step)
        {
            Ok(previous) | Err(previous) => previous,
        };
        Instant::from_nanos(previous.saturating_add(by))
    }

    /// Puts the clock at `at`, earlier or later than it stands.
    pub fn set(&self, at: Instant) {
        self.nanos.store(at.as_nanos(), Ordering::Release);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.nanos.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How far apart two readings are, either way.
    #[cfg(feature = "tokio")]
    fn apart(a: Instant, b: Instant) -> Duration {
        if a > b {
            a - b
        } else {
            b - a
        }
    }

    #[cfg(feature = "tokio")]
    #[tokio::test(start_paused = true)]
    async fn the_default_clock_made_in_paused_time_follows_it() {
        let clock = DefaultClock::global();
        assert!(clock.follows_paused_time());
        let before = clock.now();
        tokio::time::advance(std::time::Duration::from_secs(3_600)).await;
        assert_eq!(clock.now() - before, Duration::from_secs(3_600));
    }

    #[cfg(all(feature = "tokio", not(miri)))]
    #[tokio::test]
    async fn the_default_clock_made_in_real_time_reads_the_tsc_in_step_with_the_os_clock() {
        let clock = DefaultClock::global();
        assert!(!clock.follows_paused_time());
        let (tsc, os) = (clock.now(), MonotonicClock::global().now());
        assert!(
            apart(tsc, os) < Duration::from_millis(50),
            "{tsc} against {os}"
        );
        // Every default clock reads the one anchored TSC clock.
        let (a, b) = (clock.now(), DefaultClock::global().now());
        assert!(apart(a, b) < Duration::from_millis(50));
    }

    #[test]
    #[cfg(all(feature = "tokio", not(miri)))]
    fn the_default_clock_made_outside_a_runtime_reads_the_tsc() {
        assert!(!DefaultClock::global().follows_paused_time());
    }

    #[cfg(all(feature = "tokio", not(miri)))]
    #[tokio::test]
    async fn a_default_clock_made_before_time_is_paused_keeps_the_real_time() {
        // As documented: the choice is made when the clock is made.
        let clock = DefaultClock::global();
        let before = clock.now();
        tokio::time::pause();
        tokio::time::advance(std::time::Duration::from_secs(3_600)).await;
        assert!(clock.now() - before < Duration::from_secs(60));
        assert!(
            DefaultClock::global().follows_paused_time(),
            "one made now follows it"
        );
    }

    #[test]
    fn a_steady_clock_lifts_a_step_back_and_counts_on_from_the_latest_reading() {
        let raw = ManualClock::starting_at(Instant::from_secs(10));
        let steady = SteadyClock::new(raw.clone());
        let clone = steady.clone();
        assert_eq!(steady.now(), Instant::from_secs(10));
        raw.set(Instant::from_secs(4));
        assert_eq!(clone.now(), Instant::from_secs(10));
        raw.advance(Duration::from_secs(1));
        assert_eq!(steady.now(), Instant::from_secs(11));
        assert_eq!(
            steady.at_least_latest(Instant::from_secs(5)),
            Instant::from_secs(11)
        );
        // A step forward is passed on.
        raw.advance(Duration::from_secs(100));
        assert_eq!(clone.now(), Instant::from_secs(111));
    }

    #[test]
    fn a_step_back_shorter_than_the_tolerance_is_only_lifted() {
        let raw = ManualClock::starting_at(Instant::from_secs(10));
        let steady = SteadyClock::new(raw.clone());
        assert_eq!(steady.now(), Instant::from_secs(10));
        raw.set(Instant::from_secs(10) - Duration::from_millis(500));
        assert_eq!(steady.now(), Instant::from_secs(10));
        // No offset was taken: the clock resumes once the inner one passes the latest reading.
        raw.set(Instant::from_secs(10) + Duration::from_millis(1));
        assert_eq!(
            steady.now(),
            Instant::from_secs(10) + Duration::from_millis(1)
        );
    }

    #[test]
    fn a_reading_is_published_once_it_moves_a_grain_so_a_small_step_back_stays_within_it() {
        let start = Instant::from_secs(10);
        let raw = ManualClock::starting_at(start);
        let steady = SteadyClock::new(raw.clone());
        assert_eq!(steady.now(), start);
        // Within the grain: handed out, not published; a small step back then reads the clock's
        // own reading, no further back than the grain.
        raw.set(start + Duration::from_micros(600));
        assert_eq!(steady.now(), start + Duration::from_micros(600));
        raw.set(start + Duration::from_micros(200));
        assert_eq!(steady.now(), start + Duration::from_micros(200));
        // A grain on: published, so a step back below it is lifted to it.
        raw.set(start + PUBLISH_GRAIN);
        assert_eq!(steady.now(), start + PUBLISH_GRAIN);
        raw.set(start + Duration::from_micros(900));
        assert_eq!(steady.now(), start + PUBLISH_GRAIN);
        assert_eq!(steady.at_least_latest(start), start + PUBLISH_GRAIN);
    }

    // Not under miri: its virtual clock runs on by seconds while a thread is descheduled, which
    // models no real clock.
    #[cfg(not(miri))]
    #[test]
    fn a_steady_clock_over_a_monotonic_clock_never_gains_an_offset_from_racing_threads() {
        let steady = SteadyClock::new(MonotonicClock::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let steady = steady.clone();
                std::thread::spawn(move || {
                    let mut last = Instant::ZERO;
                    for _ in 0..20_000 {
                        let now = steady.now();
                        assert!(now >= last);
                        last = now;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Readings that lost a race to another thread's later one are told apart from a step.
        assert_eq!(steady.seen.offset.load(Ordering::Acquire), 0);
    }

    #[test]
    fn the_monotonic_clock_starts_near_zero_and_never_steps_back() {
        let clock = MonotonicClock::new();
        let first = clock.now();
        assert!(first < Instant::ZERO + Duration::from_secs(60));
        let mut last = first;
        for _ in 0..1_000 {
            let now = clock.now();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn the_monotonic_clock_reads_instants_before_its_epoch_as_zero() {
        let earlier = std::time::Instant::now();
        let clock = MonotonicClock::with_epoch(earlier + std::time::Duration::from_secs(5));
        assert_eq!(clock.to_core(earlier), Instant::ZERO);
        assert_eq!(clock.epoch(), earlier + std::time::Duration::from_secs(5));
    }

    #[test]
    fn std_durations_convert_exactly_and_saturate() {
        let d = std::time::Duration::new(12_345, 678_901_234);
        assert_eq!(instant_after(d), Instant::ZERO + Duration::from(d));
        assert_eq!(instant_after(std::time::Duration::MAX), Instant::MAX);
        assert_eq!(instant_after(std::time::Duration::ZERO), Instant::ZERO);
    }

    #[test]
    fn the_monotonic_clock_maps_std_instants_losslessly() {
        let clock = MonotonicClock::new();
        let at = clock.epoch() + std::time::Duration::from_nanos(1_234_567_891);
        assert_eq!(clock.to_core(at), Instant::from_nanos(1_234_567_891));
        assert_eq!(clock.to_std(Instant::from_nanos(1_234_567_891)), Some(at));
    }

    #[test]
    fn clones_of_a_monotonic_clock_share_the_epoch() {
        let clock = MonotonicClock::default();
        let copy = clock;
        assert_eq!(copy.epoch(), clock.epoch());
    }

    #[test]
    fn the_manual_clock_moves_only_when_told() {
        let clock = ManualClock::new();
        assert_eq!(clock.now(), Instant::ZERO);
        assert_eq!(clock.now(), Instant::ZERO);
        assert_eq!(
            clock.advance(Duration::from_millis(100)),
            Instant::from_millis(100)
        );
        assert_eq!(clock.now(), Instant::from_millis(100));
        clock.set(Instant::from_secs(60));
        assert_eq!(clock.now(), Instant::from_secs(60));
    }

    #[test]
    fn the_manual_clock_is_shared_by_its_clones() {
        let clock = ManualClock::starting_at(Instant::from_secs(1));
        let other = clock.clone();
        let thread = std::thread::spawn(move || {
            other.advance(Duration::from_secs(2));
        });
        thread.join().unwrap();
        assert_eq!(clock.now(), Instant::from_secs(3));
    }

    #[test]
    fn the_manual_clock_saturates() {
        let clock = ManualClock::starting_at(Instant::MAX);
        assert_eq!(clock.advance(Duration::from_secs(1)), Instant::MAX);
        assert_eq!(clock.advance(Duration::MAX), Instant::MAX);
        assert_eq!(clock.now(), Instant::MAX);
    }

    #[test]
    fn clocks_work_behind_references_and_smart_pointers() {
        fn read(clock: impl Clock) -> Instant {
            clock.now()
        }
        let clock = ManualClock::starting_at(Instant::from_secs(9));
        assert_eq!(read(&clock), Instant::from_secs(9));
        assert_eq!(read(Arc::new(clock.clone())), Instant::from_secs(9));
        let boxed: Box<dyn Clock> = Box::new(clock);
        assert_eq!(read(boxed), Instant::from_secs(9));
    }
}
