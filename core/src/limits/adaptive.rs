//! The adaptive concurrency limiter: a limit on calls in flight that learns, from the calls'
//! latencies, how much concurrency the dependency takes; its refusal is a self-imposed
//! throttle like the bulkhead's. See [`ConcurrencyLimiter`] and its aliases
//! [`AdaptiveLimiter`] and [`SharedAdaptiveLimiter`]; a call's [`Parts`](crate::Parts) put it
//! in front of the breaker.

use core::cell::Cell;
use core::fmt;

use crate::breaker::stats::Histogram;
use crate::cell::{const_unless_loom, field, put, word, Atomic, Local, Storage, Word};
use crate::error::{Bound, Field, RefusalReason, Refused, SettingsError};
use crate::name::Name;
use crate::part::AdaptiveSlots;
use crate::ratio::{mul_div, PPM};
use crate::ratio::{Multiple, Ratio};
use crate::time::{Duration, Instant};

/// The settings of an adaptive concurrency limiter, its name included. Built with
/// [`AdaptiveLimitSettings::builder`], validated by [`AdaptiveLimitSettingsBuilder::build`],
/// immutable after.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | min limit | 4 | the limit never shrinks below this; at least 1 |
/// | max limit | 200 | the limit never grows above this; at least the min, at most 10 000 |
/// | initial limit | 20 | the limit before any round has ended; between the min and the max |
/// | latency tolerance | 2x | a round is slow when its fastest call took more than this times the baseline; above 1 |
/// | decrease | 0.9 | a slow round multiplies the limit by this; in (0, 1] |
/// | baseline window | 5 min | the baseline is the 10th percentile of the successful calls' latencies of about this long |
///
/// ```
/// use stormguard_core::{limits::AdaptiveLimitSettings, Duration, Multiple, Ratio};
/// const DB: AdaptiveLimitSettings = match AdaptiveLimitSettings::builder("db")
///     .limits(2, 64)
///     .initial_limit(8)
///     .latency_tolerance(Multiple::from_milli(1_500))
///     .build()
/// {
///     Ok(s) => s,
///     Err(_) => panic!("invalid adaptive limit settings"),
/// };
/// assert_eq!((DB.min_limit(), DB.initial_limit(), DB.max_limit()), (2, 8, 64));
/// assert_eq!(DB.decrease(), Ratio::from_permille(900).unwrap());
/// assert_eq!(DB.baseline_window(), Duration::from_secs(300));
/// assert_eq!(
///     DB.to_string(),
///     "8 in flight (2..=64), down to 90% when a round's fastest call is above 1.5x the p10 of 300s"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AdaptiveLimitSettings {
    name: Name,
    min_limit: u32,
    max_limit: u32,
    initial_limit: u32,
    latency_tolerance: Multiple,
    decrease: Ratio,
    baseline_window: Duration,
}

/// Builds an [`AdaptiveLimitSettings`]; every method is `const`.
///
/// ```
/// use stormguard_core::{limits::AdaptiveLimitSettings, Bound, Field};
/// let err = AdaptiveLimitSettings::builder("db").limits(8, 4).build().unwrap_err();
/// assert_eq!((err.field, err.bound), (Field::MaxLimit, Bound::NotBelow(Field::MinLimit)));
/// let err = AdaptiveLimitSettings::builder("db").initial_limit(500).build().unwrap_err();
/// assert_eq!(err.field, Field::InitialLimit);
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AdaptiveLimitSettingsBuilder {
    settings: AdaptiveLimitSettings,
}

/// The largest limit the settings take: the limiter's counts are 16-bit fields of one word.
pub const MAX_ADAPTIVE_LIMIT: u32 = 10_000;

/// The percentile of the latencies the baseline is, in thousandths: the 10th. A low percentile
/// is what the dependency does when it is not queueing; the median would drift up with the
/// load the limiter lets through.
const BASELINE_PER_MILLE: u32 = 100;

impl AdaptiveLimitSettings {
    /// The default lower bound of the limit.
    pub const DEFAULT_MIN_LIMIT: u32 = 4;
    /// The default upper bound of the limit.
    pub const DEFAULT_MAX_LIMIT: u32 = 200;
    /// The default limit before any round has ended.
    pub const DEFAULT_INITIAL_LIMIT: u32 = 20;
    /// The default latency tolerance: 2x the baseline.
    pub const DEFAULT_LATENCY_TOLERANCE: Multiple = Multiple::from_milli(2_000);
    /// The default decrease: 0.9 of the limit per slow round.
    pub const DEFAULT_DECREASE: Ratio = Ratio::from_ppm_const(900_000);
    /// The default baseline window: 5 minutes.
    pub const DEFAULT_BASELINE_WINDOW: Duration = Duration::from_secs(300);

    /// A builder holding the defaults, for a limiter called `name`.
    pub const fn builder(name: &'static str) -> AdaptiveLimitSettingsBuilder {
        AdaptiveLimitSettings::builder_named(Name::new(name))
    }

    /// A builder holding the defaults, for a limiter whose name came from elsewhere.
    pub const fn builder_named(name: Name) -> AdaptiveLimitSettingsBuilder {
        AdaptiveLimitSettingsBuilder {
            settings: AdaptiveLimitSettings {
                name,
                min_limit: AdaptiveLimitSettings::DEFAULT_MIN_LIMIT,
                max_limit: AdaptiveLimitSettings::DEFAULT_MAX_LIMIT,
                initial_limit: AdaptiveLimitSettings::DEFAULT_INITIAL_LIMIT,
                latency_tolerance: AdaptiveLimitSettings::DEFAULT_LATENCY_TOLERANCE,
                decrease: AdaptiveLimitSettings::DEFAULT_DECREASE,
                baseline_window: AdaptiveLimitSettings::DEFAULT_BASELINE_WINDOW,
            },
        }
    }

    /// The limiter's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.name
    }

    /// The lowest the limit goes.
    #[must_use]
    pub const fn min_limit(&self) -> u32 {
        self.min_limit
    }

    /// The highest the limit goes.
    #[must_use]
    pub const fn max_limit(&self) -> u32 {
        self.max_limit
    }

    /// The limit before any round has ended.
    #[must_use]
    pub const fn initial_limit(&self) -> u32 {
        self.initial_limit
    }

    /// A round is slow when its fastest call took more than this times the baseline.
    #[must_use]
    pub const fn latency_tolerance(&self) -> Multiple {
        self.latency_tolerance
    }

    /// What a slow round multiplies the limit by.
    #[must_use]
    pub const fn decrease(&self) -> Ratio {
        self.decrease
    }

    /// How far back the baseline's latencies reach.
    #[must_use]
    pub const fn baseline_window(&self) -> Duration {
        self.baseline_window
    }

    /// Half the baseline window: the histogram halves its counts once per half window, and
    /// forgets them after a whole one without a sample.
    fn half_window(&self) -> Duration {
        Duration::from_nanos(self.baseline_window.as_nanos() / 2)
    }
}

impl AdaptiveLimitSettingsBuilder {
    /// Renames the limiter.
    pub const fn name(mut self, name: Name) -> Self {
        self.settings.name = name;
        self
    }

    /// The bounds of the limit (default 4 and 200): `min` at least 1, `max` at least `min` and
    /// at most [`MAX_ADAPTIVE_LIMIT`].
    pub const fn limits(mut self, min: u32, max: u32) -> Self {
        self.settings.min_limit = min;
        self.settings.max_limit = max;
        self
    }

    /// The limit before any round has ended (default 20; within the bounds).
    pub const fn initial_limit(mut self, n: u32) -> Self {
        self.settings.initial_limit = n;
        self
    }

    /// A round is slow when its fastest call took more than this times the baseline
    /// (default 2x; above 1).
    pub const fn latency_tolerance(mut self, m: Multiple) -> Self {
        self.settings.latency_tolerance = m;
        self
    }

    /// What a slow round multiplies the limit by (default 0.9; in (0, 1], 1 never shrinks it).
    pub const fn decrease(mut self, r: Ratio) -> Self {
        self.settings.decrease = r;
        self
    }

    /// How far back the baseline's latencies reach (default 5 minutes; at least a second).
    pub const fn baseline_window(mut self, d: Duration) -> Self {
        self.settings.baseline_window = d;
        self
    }

    /// Checks every bound and returns the settings, or the first setting at fault.
    pub const fn build(self) -> Result<AdaptiveLimitSettings, SettingsError> {
        let s = self.settings;
        if let Err(e) = SettingsError::check_name(&s.name) {
            return Err(e);
        }
        if s.min_limit == 0 {
            return Err(SettingsError::new(Field::MinLimit, Bound::AtLeast(1)));
        }
        if s.max_limit < s.min_limit {
            return Err(SettingsError::new(
                Field::MaxLimit,
                Bound::NotBelow(Field::MinLimit),
            ));
        }
        if s.max_limit > MAX_ADAPTIVE_LIMIT {
            return Err(SettingsError::new(
                Field::MaxLimit,
                Bound::AtMost(MAX_ADAPTIVE_LIMIT as u64),
            ));
        }
        if s.initial_limit < s.min_limit {
            return Err(SettingsError::new(
                Field::InitialLimit,
                Bound::NotBelow(Field::MinLimit),
            ));
        }
        if s.initial_limit > s.max_limit {
            return Err(SettingsError::new(
                Field::InitialLimit,
                Bound::AtMost(s.max_limit as u64),
            ));
        }
        if !s.latency_tolerance.is_above_one() {
            return Err(SettingsError::new(Field::LatencyTolerance, Bound::AboveOne));
        }
        if !s.latency_tolerance.is_within_max() {
            return Err(SettingsError::new(
                Field::LatencyTolerance,
                Bound::AtMost(Multiple::MAX_WHOLE as u64),
            ));
        }
        if s.decrease.is_zero() {
            return Err(SettingsError::new(Field::Decrease, Bound::ZeroToOne));
        }
        if s.baseline_window.as_nanos() < Duration::from_secs(1).as_nanos() {
            return Err(SettingsError::new(
                Field::BaselineWindow,
                Bound::AtLeastDuration(Duration::from_secs(1)),
            ));
        }
        Ok(s)
    }
}

impl Default for AdaptiveLimitSettings {
    /// The defaults, for a limiter called `adaptive`.
    fn default() -> Self {
        AdaptiveLimitSettings::builder_named(Name::new("adaptive")).settings
    }
}

impl fmt::Display for AdaptiveLimitSettings {
    /// E.g. `20 in flight (4..=200), down to 90% when a round's fastest call is above 2x the
    /// p10 of 300s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} in flight ({}..={}), down to {} when a round's fastest call is above {} the p10 of {}",
            self.initial_limit,
            self.min_limit,
            self.max_limit,
            self.decrease,
            self.latency_tolerance,
            self.baseline_window
        )
    }
}

/// One call in flight: hand it back to [`ConcurrencyLimiter::complete`] with the call's outcome
/// (or to [`ConcurrencyLimiter::release`] when it has none). Not `Clone`: one permit, one slot.
#[must_use = "a permit holds a slot until it is handed back with `complete` or `release`"]
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AdaptivePermit {
    pub(crate) entered: Instant,
}

impl AdaptivePermit {
    /// When the call was admitted.
    #[must_use]
    pub const fn entered(&self) -> Instant {
        self.entered
    }

    /// How long the slot has been held, at `now`.
    #[must_use]
    pub const fn held_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.entered)
    }
}

/// A round ended and moved the limit: from `before` to `after`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LimitChange {
    /// The limit during the round.
    pub before: u32,
    /// The limit from now on.
    pub after: u32,
}
/// The limiter at one moment, for health endpoints, metrics and explanations.
///
/// ```
/// use stormguard_core::{limits::AdaptiveLimiter, limits::AdaptiveLimitSettings, Instant};
/// let mut l = AdaptiveLimiter::new(AdaptiveLimitSettings::builder("db").build()?);
/// let permit = l.try_acquire(Instant::ZERO).unwrap();
/// let snap = l.snapshot();
/// assert_eq!((snap.in_flight, snap.limit, snap.baseline), (1, 20, None));
/// # l.release(permit);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct AdaptiveSnapshot {
    /// The limiter's name.
    pub name: Name,
    /// Calls in flight.
    pub in_flight: u32,
    /// The current limit on calls in flight.
    pub limit: u32,
    /// Calls completed in the current round (it ends at `limit` of them).
    pub round_calls: u32,
    /// Whether the limit has refused a call in the current round.
    pub held_back: bool,
    /// The baseline as read at the last round's end (the 10th percentile of the successful
    /// calls' latencies over the baseline window, read as its histogram bucket's upper bound,
    /// at most 12.5% above the truth); `None` before any reading.
    pub baseline: Option<Duration>,
    /// The lowest the limit goes.
    pub min_limit: u32,
    /// The highest the limit goes.
    pub max_limit: u32,
}

/// The state word: the limit, calls in flight, and the round so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Round {
    in_flight: u32,
    limit: u32,
    /// Calls completed in the round.
    done: u32,
    /// The fastest successful call of the round, as its latency bucket + 1 (0: none yet).
    fastest: u32,
    /// The limit refused a call in the round.
    held_back: bool,
}

impl Round {
    /// A zeroed word is the initial limit with nothing in flight: how both forms start.
    fn unpack(word: u64, s: &AdaptiveLimitSettings) -> Round {
        let limit = u32::try_from(field(word, 16, 16)).unwrap_or(0);
        Round {
            in_flight: u32::try_from(field(word, 0, 16)).unwrap_or(u32::MAX),
            limit: if limit == 0 { s.initial_limit } else { limit },
            done: u32::try_from(field(word, 32, 16)).unwrap_or(u32::MAX),
            fastest: u32::try_from(field(word, 48, 8)).unwrap_or(0),
            held_back: field(word, 56, 1) == 1,
        }
    }

    fn pack(self) -> u64 {
        put(u64::from(self.in_flight.min(0xFFFF)), 0, 16)
            | put(u64::from(self.limit.min(0xFFFF)), 16, 16)
            | put(u64::from(self.done.min(0xFFFF)), 32, 16)
            | put(u64::from(self.fastest.min(0xFF)), 48, 8)
            | put(u64::from(self.held_back), 56, 1)
    }

    /// One more call in flight, or (at the limit) the round marked as held back.
    fn acquire(self) -> Result<Round, Round> {
        if self.in_flight < self.limit {
            Ok(Round {
                in_flight: self.in_flight.saturating_add(1),
                ..self
            })
        } else {
            Err(Round {
                held_back: true,
                ..self
            })
        }
    }

    const fn release(self) -> Round {
        Round {
            in_flight: self.in_flight.saturating_sub(1),
            ..self
        }
    }

    /// A call completed (`bucket`: its latency's, when it succeeded); at the round's end, the
    /// limit moves against `baseline` (the baseline's bucket, if known).
    fn complete(
        self,
        bucket: Option<usize>,
        baseline: Option<usize>,
        s: &AdaptiveLimitSettings,
    ) -> Round {
        let mut next = self.release();
        next.done = next.done.saturating_add(1);
        if let Some(b) = bucket {
            let b = u32::try_from(b).unwrap_or(u32::MAX).saturating_add(1);
            next.fastest = if next.fastest == 0 {
                b
            } else {
                next.fastest.min(b)
            };
        }
        if next.done < next.limit {
            return next;
        }
        Round {
            in_flight: next.in_flight,
            limit: next_limit(next, baseline, s),
            done: 0,
            fastest: 0,
            held_back: false,
        }
    }
}

/// The rule, at a round's end: shrink by the decrease when the round's fastest call took more
/// than the tolerance times the baseline; otherwise grow by one if the limit refused a call in
/// the round (never while idle); always within the bounds.
fn next_limit(r: Round, baseline: Option<usize>, s: &AdaptiveLimitSettings) -> u32 {
    let slow = match (r.fastest.checked_sub(1), baseline) {
        (Some(fastest), Some(base)) => {
            let fastest = Histogram::<Cell<u64>>::upper_bound(fastest as usize);
            let base = Histogram::<Cell<u64>>::upper_bound(base);
            fastest > s.latency_tolerance.apply(base)
        }
        _ => false,
    };
    let limit = if slow {
        let shrunk = mul_div(u64::from(r.limit), s.decrease.ppm(), PPM);
        u32::try_from(shrunk).unwrap_or(r.limit)
    } else if r.held_back {
        r.limit.saturating_add(1)
    } else {
        r.limit
    };
    limit.clamp(s.min_limit, s.max_limit)
}

const LIMITED: Refused = Refused {
    reason: RefusalReason::ConcurrencyLimited,
    retry_after: Duration::ZERO,
};

/// The limiter over some storage: `Cell` words or atomic ones, the same rules for both.
#[derive(Debug)]
pub(crate) struct AdaptiveCore<W> {
    settings: AdaptiveLimitSettings,
    word: W,
    /// The baseline read at the last round's end: its bucket + 1 (0: none).
    baseline: W,
    latency: Histogram<W>,
}

impl<W: Word> AdaptiveCore<W> {
    const_unless_loom! {
        pub(crate) fn new(settings: AdaptiveLimitSettings) -> AdaptiveCore<W> {
            AdaptiveCore { settings, word: word!(W), baseline: word!(W), latency: Histogram::new() }
        }
    }

    fn round(&self) -> Round {
        Round::unpack(self.word.get(), &self.settings)
    }

    #[inline]
    fn try_acquire(&self, now: Instant) -> Result<AdaptivePermit, Refused> {
        let s = &self.settings;
        let (old, _) = self.word.update(|w| match Round::unpack(w, s).acquire() {
            Ok(next) | Err(next) => next.pack(),
        });
        match Round::unpack(old, s).acquire() {
            Ok(_) => Ok(AdaptivePermit { entered: now }),
            Err(_) => Err(LIMITED),
        }
    }

    fn check(&self) -> Result<(), Refused> {
        self.round().acquire().map(|_| ()).map_err(|_| LIMITED)
    }

    fn release(&self, permit: AdaptivePermit) {
        let AdaptivePermit { .. } = permit;
        let s = &self.settings;
        self.word.update(|w| Round::unpack(w, s).release().pack());
    }

    #[inline]
    fn complete(&self, now: Instant, latency: Option<Duration>) -> Option<LimitChange> {
        let s = &self.settings;
        let half = s.half_window();
        let bucket = latency.map(|l| {
            self.latency.record_plain(now, half, l);
            Histogram::<W>::bucket(l.as_nanos())
        });
        // The call that may end the round reads the baseline afresh first (a scan of the
        // histogram, once a round); a call racing it past the round's end finds it read.
        let r = self.round();
        if r.done.saturating_add(1) >= r.limit {
            let (base, _) = self.latency.quantile(now, half, BASELINE_PER_MILLE);
            self.baseline
                .swap(base.map_or(0, |b| u64::try_from(b).unwrap_or(0).saturating_add(1)));
        }
        let baseline = self
            .baseline
            .get()
            .checked_sub(1)
            .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
        let (old, new) = self
            .word
            .update(|w| Round::unpack(w, s).complete(bucket, baseline, s).pack());
        let (before, after) = (Round::unpack(old, s).limit, Round::unpack(new, s).limit);
        (before != after).then_some(LimitChange { before, after })
    }

    fn baseline(&self) -> Option<Duration> {
        self.baseline
            .get()
            .checked_sub(1)
            .map(|b| Histogram::<W>::upper_bound(usize::try_from(b).unwrap_or(usize::MAX)))
    }

    fn snapshot(&self) -> AdaptiveSnapshot {
        let r = self.round();
        AdaptiveSnapshot {
            name: self.settings.name,
            in_flight: r.in_flight,
            limit: r.limit,
            round_calls: r.done,
            held_back: r.held_back,
            baseline: self.baseline(),
            min_limit: self.settings.min_limit,
            max_limit: self.settings.max_limit,
        }
    }
}

/// An adaptive concurrency limiter, single-threaded (`&mut self`): a limit on calls in flight,
/// between a minimum and a maximum, that moves once a round with the calls' latencies.
///
/// Call order: [`try_acquire`](AdaptiveLimiter::try_acquire) before the call;
/// [`complete`](AdaptiveLimiter::complete) when it ends with an outcome (its latency, when it
/// succeeded), or [`release`](AdaptiveLimiter::release) when it has none (cancelled) — a permit
/// never handed back holds its slot for good. Reading changes nothing.
///
/// # The rule
/// A round is one limit's worth of completed calls. At its end, if the round's fastest
/// successful call took more than the latency tolerance (2x) times the baseline, the limit is
/// multiplied by the decrease (0.9, rounded down): the dependency queues, even its quickest
/// answer is slow. Otherwise the limit grows by one, but only if it refused a call during the
/// round: the limit was what held calls back. An idle or lightly loaded limiter never grows,
/// so the limit stays a measure of what the dependency took, not of how long nothing happened.
/// The limit stays within its bounds either way.
///
/// The baseline is the 10th percentile of the successful calls' latencies over the baseline
/// window (5 minutes), learned in the same histogram the breaker keeps its latency baseline in
/// (counts halved every half window, forgotten after a whole window without a sample), and read
/// afresh by the call that ends a round. Latencies are compared as histogram buckets, at most
/// 12.5% apart from the truth. A round without a baseline, or without a successful call, is not
/// slow. Failures count towards the round but carry no latency.
///
/// # `retry_after`
/// A refusal ([`RefusalReason::ConcurrencyLimited`]) has `retry_after` [`Duration::ZERO`], as
/// the bulkhead's: a slot frees when a call in flight ends. The call driver treats it as a
/// self-imposed throttle.
///
/// # Shape
/// The state is one word (calls in flight, the limit, the round's count, its fastest call's
/// latency bucket, and whether it held a call back) plus the latency histogram and the baseline
/// read. Every rule is a pure step on that word, run through one word abstraction: in `Cell`s
/// for [`AdaptiveLimiter`] and in atomics for [`SharedAdaptiveLimiter`], so no rule is written
/// twice. A call's [`Parts`](crate::Parts) take a slot for every attempt.
///
/// ```
/// use stormguard_core::{limits::AdaptiveLimiter, limits::AdaptiveLimitSettings, Duration, Instant};
///
/// let settings = AdaptiveLimitSettings::builder("db").limits(4, 200).initial_limit(4).build()?;
/// let mut db = AdaptiveLimiter::new(settings);
/// let mut now = Instant::from_secs(1);
/// let ms = Duration::from_millis;
///
/// // Healthy and saturated: one caller more than the limit. Each round, one is refused, so
/// // the limit grows by one.
/// for _ in 0..3 {
///     let callers = db.limit() + 1;
///     let permits: Vec<_> = (0..callers).filter_map(|_| db.try_acquire(now).ok()).collect();
///     now += ms(10);
///     for p in permits {
///         db.complete(p, now, Some(ms(10)));
///     }
/// }
/// assert_eq!(db.limit(), 7);
/// assert_eq!(db.baseline(), Some(Duration::from_nanos(10_485_760)));
///
/// // The dependency slows down fivefold: even the fastest call of a round is above 2x the
/// // baseline, so the limit shrinks by a tenth.
/// let permits: Vec<_> = (0..7).filter_map(|_| db.try_acquire(now).ok()).collect();
/// now += ms(50);
/// for p in permits {
///     db.complete(p, now, Some(ms(50)));
/// }
/// assert_eq!(db.limit(), 6);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ConcurrencyLimiter<C: Storage = Local> {
    core: AdaptiveCore<<C as crate::cell::sealed::Storage>::Word>,
}

impl<C: Storage> ConcurrencyLimiter<C> {
    const_unless_loom! {
        /// A limiter at its initial limit, with validated `settings`.
        #[must_use]
        pub fn new(settings: AdaptiveLimitSettings) -> Self {
            ConcurrencyLimiter { core: AdaptiveCore::new(settings) }
        }
    }

    /// Admits a call at `now`, or refuses it with [`RefusalReason::ConcurrencyLimited`] and a
    /// zero `retry_after` (and marks the round as held back by the limit).
    pub fn try_acquire(&self, now: Instant) -> Result<AdaptivePermit, Refused> {
        self.core.try_acquire(now)
    }

    /// A call ended with an outcome at `now`: frees its slot and counts it towards the round.
    /// `latency` is the call's, when it succeeded (a failure's latency says nothing about the
    /// dependency's queue). Returns the change when the call ended a round that moved the limit.
    pub fn complete(
        &self,
        permit: AdaptivePermit,
        now: Instant,
        latency: Option<Duration>,
    ) -> Option<LimitChange> {
        let AdaptivePermit { .. } = permit;
        self.core.complete(now, latency)
    }

    /// A call ended without an outcome (cancelled): frees its slot, counts nothing.
    pub fn release(&self, permit: AdaptivePermit) {
        self.core.release(permit);
    }

    /// Would a call be admitted now? Changes nothing.
    pub fn check(&self) -> Result<(), Refused> {
        self.core.check()
    }

    /// The current limit.
    #[must_use]
    pub fn limit(&self) -> u32 {
        self.core.round().limit
    }

    /// Calls in flight.
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        self.core.round().in_flight
    }

    /// The baseline as read at the last round's end, if any (see [`AdaptiveSnapshot::baseline`]).
    #[must_use]
    pub fn baseline(&self) -> Option<Duration> {
        self.core.baseline()
    }

    /// The limit, counts and baseline, for health endpoints and metrics.
    #[must_use]
    pub fn snapshot(&self) -> AdaptiveSnapshot {
        self.core.snapshot()
    }

    /// The settings the limiter was built with.
    #[must_use]
    pub const fn settings(&self) -> &AdaptiveLimitSettings {
        &self.core.settings
    }

    /// The limiter's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.core.settings.name
    }
}

/// An adaptive concurrency limiter for one thread: see [`ConcurrencyLimiter`].
pub type AdaptiveLimiter = ConcurrencyLimiter<Local>;

/// An adaptive concurrency limiter shared by many threads through `&self`, lock-free: the
/// rules of [`AdaptiveLimiter`] on one atomic state word, with the latency histogram and the
/// baseline read in atomics beside it.
///
/// Every admission and completion is one compare-exchange on the state word, so the limit is
/// never exceeded and every round ends exactly once. What may race is only which round a call's
/// latency lands in: a call completing while another ends the round may count towards either,
/// and the baseline the round is judged against may miss the latencies of calls racing its end.
///
/// ```
/// use stormguard_core::{limits::AdaptiveLimitSettings, limits::SharedAdaptiveLimiter, Instant};
///
/// static DB: SharedAdaptiveLimiter = SharedAdaptiveLimiter::new(
///     match AdaptiveLimitSettings::builder("db").build() {
///         Ok(s) => s,
///         Err(_) => panic!(),
///     },
/// );
/// let permit = DB.try_acquire(Instant::ZERO)?;
/// assert_eq!(DB.in_flight(), 1);
/// DB.release(permit);
/// assert_eq!(DB.limit(), 20);
/// # Ok::<(), stormguard_core::Refused>(())
/// ```
pub type SharedAdaptiveLimiter = ConcurrencyLimiter<Atomic>;

/// The call driver's adaptive limiter: a slot per attempt, and its latency to learn from.
impl<C: Storage> AdaptiveSlots for ConcurrencyLimiter<C> {
    #[inline]
    fn try_acquire(&self, now: Instant) -> Result<(), Refused> {
        self.core.try_acquire(now).map(|AdaptivePermit { .. }| ())
    }
    #[inline]
    fn complete(&self, now: Instant, latency: Option<Duration>) {
        let _ = self.core.complete(now, latency);
    }
    fn release(&self) {
        self.core.release(AdaptivePermit {
            entered: Instant::ZERO,
        });
    }
    fn check(&self) -> Result<(), Refused> {
        self.core.check()
    }
}

impl<C: Storage> fmt::Display for ConcurrencyLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "adaptive limiter `{}`", self.name())
    }
}

#[cfg(feature = "defmt")]
impl<C: Storage> defmt::Format for ConcurrencyLimiter<C> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "AdaptiveLimiter({})", self.name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> AdaptiveLimitSettings {
        match AdaptiveLimitSettings::builder("x").build() {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn the_round_packs_into_one_word_and_back() {
        let s = settings();
        for r in [
            Round {
                in_flight: 0,
                limit: 1,
                done: 0,
                fastest: 0,
                held_back: false,
            },
            Round {
                in_flight: 0xFFFF,
                limit: MAX_ADAPTIVE_LIMIT,
                done: 0xFFFF,
                fastest: 240,
                held_back: true,
            },
        ] {
            assert_eq!(Round::unpack(r.pack(), &s), r);
        }
        // A zeroed word (how both forms start) is the initial limit, nothing in flight.
        let zero = Round::unpack(0, &s);
        assert_eq!((zero.limit, zero.in_flight, zero.done), (20, 0, 0));
    }

    #[test]
    fn a_slow_round_shrinks_by_the_decrease_rounded_down_and_never_below_the_minimum() {
        let s = settings();
        let base = Histogram::<Cell<u64>>::bucket(10_000_000);
        let slow = Histogram::<Cell<u64>>::bucket(30_000_000);
        let round = |limit| Round {
            in_flight: 0,
            limit,
            done: limit,
            fastest: u32::try_from(slow).unwrap_or(0) + 1,
            held_back: true,
        };
        assert_eq!(next_limit(round(20), Some(base), &s), 18);
        assert_eq!(next_limit(round(200), Some(base), &s), 180);
        assert_eq!(next_limit(round(5), Some(base), &s), 4);
        assert_eq!(next_limit(round(4), Some(base), &s), 4);
        // Without a baseline, the same round is not slow: held back, it grows.
        assert_eq!(next_limit(round(20), None, &s), 21);
        assert_eq!(next_limit(round(200), None, &s), 200);
    }
}
