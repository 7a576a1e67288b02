//! Breaker settings: one value that fully describes a breaker, its name included, validated once
//! when it is built and immutable after.
//!
//! The defaults follow the .NET original's documented ones; each is explained where it is set.

use crate::error::{Bound, Field, Problems, SettingsError};
use crate::name::Name;
use crate::ratio::{Multiple, Ratio};
use crate::time::Duration;
use crate::time::{div_rem_u32, MAX_BREAK};

/// Buckets in the sliding trip window. Fixed, so the window's memory is fixed.
pub const TRIP_BUCKETS: usize = 10;

/// The largest consecutive-failure threshold (and probe-success count): the breaker's compact
/// control word holds these counts in 10 bits.
pub const MAX_COUNT: u16 = 1000;

/// The most half-open probes that may be in flight at once (5 bits of the control word).
pub const MAX_PROBES: u8 = 31;

/// The default noise bound: a run of failures (or the failures of a recovery ramp) trips only
/// once its chance under the learned normal failure rate is at most one in a hundred million.
pub(crate) const DEFAULT_NOISE_BOUND: u64 = 100_000_000;

/// The largest noise bound (one in 10^15): the trip arithmetic stays exact in 128 bits below it.
pub(crate) const MAX_NOISE_BOUND: u64 = 1_000_000_000_000_000;

/// See [`BreakerSettings::required_baseline`].
const fn required_baseline(
    trip: Duration,
    slow_rule: bool,
    slow_ratio: Ratio,
    failure_rate: Option<FailureRate>,
) -> Duration {
    // Whatever the rules: the latency baseline (retries, hedging and the attempt ceiling read
    // it) must outlast what the trip window sees.
    let mut need = trip.saturating_mul(2);
    if slow_rule {
        // 0.5 x baseline >= 2 x slow_ratio x trip  <=>  baseline >= 4 x slow_ratio x trip
        let nanos = (trip.as_nanos() as u128)
            .saturating_mul(4)
            .saturating_mul(slow_ratio.ppm() as u128)
            / 1_000_000;
        need = need.max(Duration::from_nanos(if nanos > u64::MAX as u128 {
            u64::MAX
        } else {
            nanos as u64
        }));
    }
    if let Some(rule) = failure_rate {
        // baseline / multiple >= 2 x trip  <=>  baseline >= 2 x multiple x trip
        let nanos = (trip.as_nanos() as u128)
            .saturating_mul(2)
            .saturating_mul(rule.multiple().milli() as u128)
            / 1000;
        need = need.max(Duration::from_nanos(if nanos > u64::MAX as u128 {
            u64::MAX
        } else {
            nanos as u64
        }));
    }
    need
}

/// The relative error-rate rule: trip when the trip window's failure rate is above `multiple`
/// times the learned normal rate, and at or above an absolute `floor` below which nothing is
/// wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FailureRate {
    multiple: Multiple,
    floor: Ratio,
    minimum_failures: u32,
    baseline_outcomes: u32,
}

impl FailureRate {
    /// Above `multiple` times normal, with the default floor (5%), at least 2 failures in the
    /// window, and armed after 100 outcomes of baseline. `multiple` is in thousandths
    /// (`5000` is 5x); [`FailureRate::above`] takes whole numbers.
    #[must_use]
    pub const fn above_milli(multiple_milli: u32) -> FailureRate {
        FailureRate {
            multiple: Multiple::from_milli(multiple_milli),
            // 5%: a rate lower than this is not a problem for anyone, however it compares.
            floor: Ratio::from_ppm_const(50_000),
            // One failure is never a rate.
            minimum_failures: 2,
            // Fewer outcomes than this do not say what "normal" is.
            baseline_outcomes: 100,
        }
    }

    /// Above `multiple` times the normal rate (the default is 5x).
    #[must_use]
    pub const fn above(multiple: u32) -> FailureRate {
        FailureRate::above_milli(multiple.saturating_mul(1000))
    }

    /// With another absolute floor (default 5%), as parts per million.
    #[must_use]
    pub const fn floor_ppm(mut self, ppm: u32) -> FailureRate {
        self.floor = Ratio::from_ppm_const(ppm);
        self
    }

    /// With another minimum count of failures in the window (default 2).
    #[must_use]
    pub const fn minimum_failures(mut self, n: u32) -> FailureRate {
        self.minimum_failures = n;
        self
    }

    /// With another count of baseline outcomes before the rule is armed (default 100).
    #[must_use]
    pub const fn baseline_outcomes(mut self, n: u32) -> FailureRate {
        self.baseline_outcomes = n;
        self
    }

    /// The multiple of the normal rate that trips.
    #[must_use]
    pub const fn multiple(&self) -> Multiple {
        self.multiple
    }

    /// The absolute floor.
    #[must_use]
    pub const fn floor(&self) -> Ratio {
        self.floor
    }

    /// Failures needed in the window.
    #[must_use]
    pub const fn min_failures(&self) -> u32 {
        self.minimum_failures
    }

    /// Baseline outcomes needed before the rule is armed.
    #[must_use]
    pub const fn arming_outcomes(&self) -> u32 {
        self.baseline_outcomes
    }

    const fn check(&self, p: &mut Problems) {
        if !self.multiple.is_above_one() {
            p.push(SettingsError::new(Field::FailureMultiple, Bound::AboveOne));
        } else if !self.multiple.is_within_max() {
            p.push(SettingsError::new(
                Field::FailureMultiple,
                Bound::AtMost(Multiple::MAX_WHOLE as u64),
            ));
        }
        if self.floor.ppm() == 0 || self.floor.ppm() > crate::ratio::PPM {
            p.push(SettingsError::new(Field::FailureFloor, Bound::ZeroToOne));
        }
        if self.minimum_failures == 0 {
            p.push(SettingsError::new(
                Field::MinimumFailures,
                Bound::AtLeast(1),
            ));
        }
        if self.baseline_outcomes == 0 {
            p.push(SettingsError::new(
                Field::FailureBaselineOutcomes,
                Bound::AtLeast(1),
            ));
        }
    }
}

/// The relative slow-call (brownout) rule: a call is slow when its latency is above `multiple`
/// times the learned median latency of successful calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SlowCalls {
    multiple: Multiple,
    baseline_calls: u32,
}

impl SlowCalls {
    /// Slow above `multiple` times normal (whole numbers; the default is 3x), armed after 20
    /// successful calls of baseline.
    #[must_use]
    pub const fn above(multiple: u32) -> SlowCalls {
        SlowCalls::above_milli(multiple.saturating_mul(1000))
    }

    /// Slow above `multiple_milli` thousandths of normal (`2500` is 2.5x).
    #[must_use]
    pub const fn above_milli(multiple_milli: u32) -> SlowCalls {
        // 20 successes give a median worth trusting; fewer would arm on noise.
        SlowCalls {
            multiple: Multiple::from_milli(multiple_milli),
            baseline_calls: 20,
        }
    }

    /// With another count of baseline successes before the rule is armed (default 20).
    #[must_use]
    pub const fn baseline_calls(mut self, n: u32) -> SlowCalls {
        self.baseline_calls = n;
        self
    }

    /// The multiple of normal latency above which a call is slow.
    #[must_use]
    pub const fn multiple(&self) -> Multiple {
        self.multiple
    }

    /// Baseline successes needed before the rule is armed.
    #[must_use]
    pub const fn arming_calls(&self) -> u32 {
        self.baseline_calls
    }

    const fn check(&self, p: &mut Problems) {
        if !self.multiple.is_above_one() {
            p.push(SettingsError::new(Field::SlowMultiple, Bound::AboveOne));
        } else if !self.multiple.is_within_max() {
            p.push(SettingsError::new(
                Field::SlowMultiple,
                Bound::AtMost(Multiple::MAX_WHOLE as u64),
            ));
        }
        if self.baseline_calls == 0 {
            p.push(SettingsError::new(
                Field::SlowBaselineCalls,
                Bound::AtLeast(1),
            ));
        }
    }
}

/// The opt-in recovery ramp: after the probes succeed, traffic returns over a fraction of the
/// break just served rather than all at once.
///
/// A slow answer halves the admitted fraction (never below 5%), so a dependency that answers
/// but stays slow keeps the ramp at its floor. Once the breaker has learned that some of its
/// dependency's healthy answers are slow (a heavy tail), only slow answers beyond that share
/// halve it (see [`Breaker`](crate::Breaker), "Rules under noise"). Slow answers are not taught to the latency
/// baseline meanwhile; only a whole baseline window without a fast one (5 minutes by default)
/// forgets what normal was, and the slower latency can then become the new normal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Recovery {
    fraction: Ratio,
    min: Duration,
    max: Duration,
}

impl Recovery {
    /// Ramp back over `fraction` of the break just served (as parts per million; `250_000` is a
    /// quarter), clamped to [1 s, 30 s].
    #[must_use]
    pub const fn over_ppm(fraction_ppm: u32) -> Recovery {
        Recovery {
            fraction: Ratio::from_ppm_const(fraction_ppm),
            // Shorter than a second is a cliff with extra steps; longer than 30 s keeps healthy
            // traffic away for no reason.
            min: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }

    /// Ramp back over `fraction` of the break just served (`0.25` for a quarter), clamped to
    /// [1 s, 30 s]. A fraction outside (0, 1] is reported when the settings are built.
    #[must_use]
    pub const fn over(fraction: f64) -> Recovery {
        match Ratio::from_f64(fraction) {
            Some(r) => Recovery::over_ppm(r.ppm()),
            // Out of range: kept as an invalid value so `build()` names it.
            None => Recovery::over_ppm(0),
        }
    }

    /// With other clamp bounds for the ramp's length.
    #[must_use]
    pub const fn clamped(mut self, min: Duration, max: Duration) -> Recovery {
        self.min = min;
        self.max = max;
        self
    }

    /// The fraction of the break the ramp lasts.
    #[must_use]
    pub const fn fraction(&self) -> Ratio {
        self.fraction
    }

    /// The ramp's shortest length.
    #[must_use]
    pub const fn min(&self) -> Duration {
        self.min
    }

    /// The ramp's longest length.
    #[must_use]
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The ramp length for a break of `served`: the fraction of it, clamped.
    #[must_use]
    pub fn length_for(&self, served: Duration) -> Duration {
        let raw = Duration::from_nanos(crate::ratio::mul_div(
            served.as_nanos(),
            self.fraction.ppm(),
            crate::ratio::PPM,
        ));
        raw.max(self.min).min(self.max)
    }

    const fn check(&self, p: &mut Problems) {
        if self.fraction.ppm() == 0 || self.fraction.ppm() > crate::ratio::PPM {
            p.push(SettingsError::new(
                Field::RecoveryFraction,
                Bound::ZeroToOne,
            ));
        }
        let min_ok = self.min.as_nanos() >= Duration::from_millis(1).as_nanos();
        if !min_ok {
            p.push(SettingsError::new(
                Field::RecoveryMin,
                Bound::AtLeastDuration(Duration::from_millis(1)),
            ));
        }
        if self.max.as_nanos() > MAX_BREAK.as_nanos() {
            p.push(SettingsError::new(
                Field::RecoveryMax,
                Bound::AtMostDuration(MAX_BREAK),
            ));
        } else if min_ok && self.max.as_nanos() < self.min.as_nanos() {
            p.push(SettingsError::new(
                Field::RecoveryMax,
                Bound::NotBelow(Field::RecoveryMin),
            ));
        }
    }
}

/// Everything that describes a breaker, its name included. Built with
/// [`BreakerSettings::builder`], validated by [`BreakerSettingsBuilder::build`], immutable after.
///
/// ```
/// use stormguard_core::{BreakerSettings, Duration, Recovery, SlowCalls};
/// const SEARCH: BreakerSettings = match BreakerSettings::builder("search")
///     .consecutive_failures(5)
///     .slow_calls(Some(SlowCalls::above(3)))   // a brownout is 3x normal, whatever normal is
///     .recovery(Some(Recovery::over_ppm(250_000)))  // ramp back rather than cliff
///     .build()
/// {
///     Ok(s) => s,
///     Err(_) => panic!("invalid breaker settings"),
/// };
/// assert_eq!(SEARCH.break_duration(), Duration::from_secs(15));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BreakerSettings {
    name: Name,
    consecutive_failures: u16,
    failure_rate: Option<FailureRate>,
    failure_ratio: Option<Ratio>,
    slow_calls: Option<SlowCalls>,
    slow_threshold: Option<Duration>,
    slow_ratio: Ratio,
    minimum_calls: u32,
    trip_window: Duration,
    baseline_window: Option<Duration>,
    /// The baseline window in force (configured, or the widened default), resolved once.
    #[cfg_attr(feature = "serde", serde(skip))]
    resolved_baseline: Duration,
    /// Whether any rule needs the statistics, resolved once.
    #[cfg_attr(feature = "serde", serde(skip))]
    keeps_statistics: bool,
    break_duration: Duration,
    max_break: Duration,
    jitter: bool,
    half_open_probes: u8,
    probe_successes: u16,
    recovery: Option<Recovery>,
    noise_bound: u64,
    learn: bool,
}

/// Builds a [`BreakerSettings`]; every method is `const`, so a fully configured breaker can
/// live in a `static`.
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BreakerSettingsBuilder {
    name: Name,
    consecutive_failures: u32,
    failure_rate: Option<FailureRate>,
    failure_ratio: Option<Ratio>,
    slow_calls: Option<SlowCalls>,
    slow_threshold: Option<Duration>,
    slow_ratio: Ratio,
    minimum_calls: u32,
    trip_window: Duration,
    baseline_window: Option<Duration>,
    break_duration: Duration,
    max_break: Duration,
    jitter: bool,
    half_open_probes: u32,
    probe_successes: u32,
    recovery: Option<Recovery>,
    noise_bound: u64,
    learn: bool,
}

impl BreakerSettings {
    /// A builder holding the documented defaults, for a breaker called `name`.
    pub const fn builder(name: &'static str) -> BreakerSettingsBuilder {
        BreakerSettingsBuilder::defaults(Name::new(name))
    }

    /// A builder holding the defaults, for a breaker whose name came from elsewhere (a
    /// configuration file).
    pub const fn builder_named(name: Name) -> BreakerSettingsBuilder {
        BreakerSettingsBuilder::defaults(name)
    }

    /// Every default, for a breaker called `name`.
    ///
    /// For a name written in the code. This shortcut cannot fail, so a name that `build` refuses
    /// (blank, or holding a control character) is replaced by `"unnamed"` here;
    /// `builder(name).build()` reports it as an error instead.
    #[must_use]
    pub const fn defaults(name: &'static str) -> BreakerSettings {
        match BreakerSettings::builder(name).build() {
            Ok(s) => s,
            // The defaults are valid (a test checks it): only a name `build` refuses gets here.
            Err(_) => BreakerSettings::FALLBACK,
        }
    }

    /// Only the classic rule: open after `n` consecutive failures; no statistics kept.
    pub const fn consecutive_only(
        name: &'static str,
        n: u32,
    ) -> Result<BreakerSettings, SettingsError> {
        BreakerSettings::builder(name)
            .consecutive_failures(n)
            .failure_rate(None)
            .slow_calls(None)
            .build()
    }

    /// Document 004's escalating cooldown: 5 consecutive failures, a 3 s break doubling per
    /// consecutive open up to 300 s, no jitter, one probe that closes on success, no other rule.
    ///
    /// For a name written in the code. This shortcut cannot fail, so a name that `build` refuses
    /// (blank, or holding a control character) is replaced by `"unnamed"` here;
    /// `builder(name).build()` reports it as an error instead.
    #[must_use]
    pub const fn escalating_cooldown(name: &'static str) -> BreakerSettings {
        match BreakerSettings::builder(name)
            .failure_rate(None)
            .slow_calls(None)
            .break_duration(Duration::from_secs(3))
            .max_break(Duration::from_secs(300))
            .jitter(false)
            .probe_successes(1)
            .build()
        {
            Ok(s) => s,
            Err(_) => BreakerSettings::FALLBACK,
        }
    }

    // Only ever returned from the `Err` arms above, which only a name `build` refuses reaches.
    const FALLBACK: BreakerSettings = BreakerSettings {
        name: Name::new("unnamed"),
        consecutive_failures: 5,
        failure_rate: None,
        failure_ratio: None,
        slow_calls: None,
        slow_threshold: None,
        slow_ratio: Ratio::from_ppm_const(500_000),
        minimum_calls: 20,
        trip_window: Duration::from_secs(30),
        baseline_window: None,
        resolved_baseline: Duration::from_secs(300),
        keeps_statistics: false,
        break_duration: Duration::from_secs(15),
        max_break: Duration::from_secs(120),
        jitter: true,
        half_open_probes: 1,
        probe_successes: 2,
        recovery: None,
        noise_bound: DEFAULT_NOISE_BOUND,
        learn: false,
    };

    /// The breaker's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.name
    }

    /// Consecutive transient failures that open the breaker.
    #[must_use]
    pub const fn consecutive_failures(&self) -> u16 {
        self.consecutive_failures
    }

    /// The relative error-rate rule, if enabled.
    #[must_use]
    pub const fn failure_rate(&self) -> Option<FailureRate> {
        self.failure_rate
    }

    /// The absolute failure-ratio ceiling, if set.
    #[must_use]
    pub const fn failure_ratio(&self) -> Option<Ratio> {
        self.failure_ratio
    }

    /// The relative slow-call rule, if enabled.
    #[must_use]
    pub const fn slow_calls(&self) -> Option<SlowCalls> {
        self.slow_calls
    }

    /// The absolute slow-call threshold, if set.
    #[must_use]
    pub const fn slow_threshold(&self) -> Option<Duration> {
        self.slow_threshold
    }

    /// The share of slow calls in the trip window that trips.
    #[must_use]
    pub const fn slow_ratio(&self) -> Ratio {
        self.slow_ratio
    }

    /// Calls needed in the trip window before any ratio is evaluated.
    #[must_use]
    pub const fn minimum_calls(&self) -> u32 {
        self.minimum_calls
    }

    /// The sliding window the ratios are measured over.
    #[must_use]
    pub const fn trip_window(&self) -> Duration {
        self.trip_window
    }

    /// One of the trip window's [`TRIP_BUCKETS`] buckets.
    #[must_use]
    pub const fn bucket_width(&self) -> Duration {
        // A tenth in 32-bit steps: a 64-bit division is a library routine on a microcontroller.
        match div_rem_u32(self.trip_window.as_nanos(), TRIP_BUCKETS as u32) {
            Some((tenth, _)) => Duration::from_nanos(tenth),
            None => Duration::ZERO,
        }
    }

    /// How far back "normal" reaches: the configured baseline window, or by default 10x the trip
    /// window, widened further when a rule needs more (see [`BreakerSettings::required_baseline`]).
    #[must_use]
    pub const fn baseline_window(&self) -> Duration {
        self.resolved_baseline
    }

    /// The shortest baseline window these rules can work with. A baseline must outlast the trip
    /// it feeds, twice over: the latency median survives a brownout for half the baseline
    /// window, which must be at least twice the time the brownout needs to fill the trip window
    /// to the slow-call ratio; the error baseline reaches `1 / multiple` (after which no error
    /// rate can trip) in `baseline / multiple`, which must be at least twice the trip window.
    /// Without either rule, twice the trip window: the latency baseline still feeds retries,
    /// hedging and the attempt ceiling.
    #[must_use]
    pub const fn required_baseline(&self) -> Duration {
        required_baseline(
            self.trip_window,
            self.slow_calls.is_some(),
            self.slow_ratio,
            self.failure_rate,
        )
    }

    /// The first break.
    #[must_use]
    pub const fn break_duration(&self) -> Duration {
        self.break_duration
    }

    /// The longest break.
    #[must_use]
    pub const fn max_break(&self) -> Duration {
        self.max_break
    }

    /// Whether breaks are jittered (equal jitter: half the break plus up to half again).
    #[must_use]
    pub const fn jitter(&self) -> bool {
        self.jitter
    }

    /// Probes allowed in flight while half-open.
    #[must_use]
    pub const fn half_open_probes(&self) -> u8 {
        self.half_open_probes
    }

    /// Successful probes that close the breaker (or start the ramp).
    #[must_use]
    pub const fn probe_successes(&self) -> u16 {
        self.probe_successes
    }

    /// The recovery ramp, if enabled.
    #[must_use]
    pub const fn recovery(&self) -> Option<Recovery> {
        self.recovery
    }

    /// The noise bound, as "one chance in this many": how unlikely a run of failures (or a
    /// recovery ramp's failures) must be under the learned normal failure rate before it is
    /// taken as evidence against the dependency. See [`BreakerSettingsBuilder::noise_bound`].
    #[must_use]
    pub const fn noise_bound(&self) -> u64 {
        self.noise_bound
    }

    /// `true` when the breaker keeps its trip window and baselines: a rule needs them, or
    /// [`learns`](Self::learns) asks for them.
    #[must_use]
    pub const fn keeps_statistics(&self) -> bool {
        self.keeps_statistics
    }

    /// Whether the breaker learns its dependency's normal latency and failure rate even when no
    /// trip rule needs them. See [`BreakerSettingsBuilder::learn`].
    #[must_use]
    pub const fn learns(&self) -> bool {
        self.learn
    }

    /// These settings, learning the normal latency and failure rate whatever the rules (see
    /// [`BreakerSettingsBuilder::learn`]): what a hedged policy builds its breaker from.
    ///
    /// ```
    /// use stormguard_core::BreakerSettings;
    /// let s = BreakerSettings::consecutive_only("db", 3)?;
    /// assert!(!s.keeps_statistics());
    /// assert!(s.learning().keeps_statistics());
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    #[must_use]
    pub const fn learning(mut self) -> BreakerSettings {
        self.learn = true;
        self.keeps_statistics = true;
        self
    }

    /// The first setting that needs statistics, if any (for the lean breaker's check).
    pub(crate) const fn first_statistics_rule(&self) -> Option<Field> {
        if self.failure_rate.is_some() {
            Some(Field::FailureMultiple)
        } else if self.failure_ratio.is_some() {
            Some(Field::FailureRatio)
        } else if self.slow_calls.is_some() {
            Some(Field::SlowMultiple)
        } else if self.slow_threshold.is_some() {
            Some(Field::SlowThreshold)
        } else if self.recovery.is_some() {
            Some(Field::RecoveryFraction)
        } else if self.learn {
            Some(Field::Learn)
        } else {
            None
        }
    }

    const fn needs_statistics(&self) -> bool {
        self.learn
            || self.failure_rate.is_some()
            || self.failure_ratio.is_some()
            || self.slow_calls.is_some()
            || self.slow_threshold.is_some()
            || self.recovery.is_some()
    }

    /// The nominal (unjittered) break for the `opens`-th consecutive open (1-based): the first
    /// break doubled `opens - 1` times, capped at the maximum.
    #[must_use]
    pub const fn nominal_break(&self, opens: u8) -> Duration {
        let mut d = self.break_duration;
        let mut i = 1;
        while i < opens {
            d = d.saturating_mul(2);
            if d.as_nanos() >= self.max_break.as_nanos() {
                return self.max_break;
            }
            i = i.saturating_add(1);
        }
        d.min(self.max_break)
    }
}

impl BreakerSettingsBuilder {
    const fn defaults(name: Name) -> BreakerSettingsBuilder {
        BreakerSettingsBuilder {
            name,
            // The classic trip; needs no throughput, so it protects quiet clients too.
            consecutive_failures: 5,
            failure_rate: Some(FailureRate::above(5)),
            failure_ratio: None,
            slow_calls: Some(SlowCalls::above(3)),
            slow_threshold: None,
            // Half the window slow is a brownout, not noise.
            slow_ratio: Ratio::from_ppm_const(500_000),
            // Below 20 calls a ratio is an anecdote.
            minimum_calls: 20,
            trip_window: Duration::from_secs(30),
            baseline_window: None,
            // Long enough for a restart or failover to finish; doubled while it keeps failing.
            break_duration: Duration::from_secs(15),
            max_break: Duration::from_secs(120),
            jitter: true,
            probe_successes: 2,
            half_open_probes: 1,
            recovery: None,
            // One in 10^8 per outcome: at 1,000 calls a second, one false trip in about a day
            // and a quarter from chance alone.
            noise_bound: DEFAULT_NOISE_BOUND,
            learn: false,
        }
    }

    /// The relative error-rate rule set so far (for partial overrides from a configuration).
    #[cfg(feature = "serde")]
    pub(crate) const fn current_failure_rate(&self) -> Option<FailureRate> {
        self.failure_rate
    }

    /// The slow-call rule set so far.
    #[cfg(feature = "serde")]
    pub(crate) const fn current_slow_calls(&self) -> Option<SlowCalls> {
        self.slow_calls
    }

    /// The recovery ramp set so far.
    #[cfg(feature = "serde")]
    pub(crate) const fn current_recovery(&self) -> Option<Recovery> {
        self.recovery
    }

    /// Renames the breaker.
    pub const fn name(mut self, name: Name) -> Self {
        self.name = name;
        self
    }

    /// Consecutive transient failures that open the breaker (default 5; 1..=1000).
    pub const fn consecutive_failures(mut self, n: u32) -> Self {
        self.consecutive_failures = n;
        self
    }

    /// The relative error-rate rule (default above 5x normal); `None` disables it.
    pub const fn failure_rate(mut self, rule: Option<FailureRate>) -> Self {
        self.failure_rate = rule;
        self
    }

    /// An absolute failure-ratio ceiling (default none): the window's failure rate at or above
    /// it trips, whatever the baseline says. The relative rule may only fire sooner.
    pub const fn failure_ratio(mut self, ceiling: Option<Ratio>) -> Self {
        self.failure_ratio = ceiling;
        self
    }

    /// The relative slow-call rule (default above 3x normal latency); `None` disables it.
    pub const fn slow_calls(mut self, rule: Option<SlowCalls>) -> Self {
        self.slow_calls = rule;
        self
    }

    /// An absolute slow-call threshold (default none): a call is slow when above either this or
    /// the relative threshold.
    pub const fn slow_threshold(mut self, threshold: Option<Duration>) -> Self {
        self.slow_threshold = threshold;
        self
    }

    /// The share of slow calls in the trip window that trips (default 0.5).
    pub const fn slow_ratio(mut self, ratio: Ratio) -> Self {
        self.slow_ratio = ratio;
        self
    }

    /// Calls in the trip window below which no ratio is evaluated (default 20).
    pub const fn minimum_calls(mut self, n: u32) -> Self {
        self.minimum_calls = n;
        self
    }

    /// The sliding window the ratios are measured over (default 30 s, in 10 buckets).
    pub const fn trip_window(mut self, window: Duration) -> Self {
        self.trip_window = window;
        self
    }

    /// How far back "normal" reaches (default 10x the trip window, widening with it). A
    /// configured window must be at least twice the trip window, so that a brownout or outage
    /// fills the trip window before it can move the baseline.
    pub const fn baseline_window(mut self, window: Option<Duration>) -> Self {
        self.baseline_window = window;
        self
    }

    /// The first break (default 15 s).
    pub const fn break_duration(mut self, d: Duration) -> Self {
        self.break_duration = d;
        self
    }

    /// The longest break (default 2 min).
    pub const fn max_break(mut self, d: Duration) -> Self {
        self.max_break = d;
        self
    }

    /// Equal jitter on breaks (default on). Off only where one client exists, or to match
    /// document 004's unjittered cooldown.
    pub const fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// Concurrent probes while half-open (default 1; 1..=31).
    pub const fn half_open_probes(mut self, n: u32) -> Self {
        self.half_open_probes = n;
        self
    }

    /// Successful probes that close (default 2; 1..=1000).
    pub const fn probe_successes(mut self, n: u32) -> Self {
        self.probe_successes = n;
        self
    }

    /// The recovery ramp (default none: it is opt-in, because a call it sheds would have been
    /// served by a breaker that closed at once).
    pub const fn recovery(mut self, ramp: Option<Recovery>) -> Self {
        self.recovery = ramp;
        self
    }

    /// How unlikely failures must be under the dependency's own noise before they count against
    /// it, as one chance in `one_in` (default 10^8; 2..=10^15).
    ///
    /// A cold breaker trips after `consecutive_failures` in a row, as configured. Once it has
    /// learned the dependency's normal failure rate `p` (100 outcomes), a run of `n` failures
    /// trips only when `p^n` is at most `1 / one_in` (and `n` is at least the configured count):
    /// at the default bound, a dependency normally failing 20% needs 12 in a row, 5% needs 7,
    /// 1% needs the configured 5. The recovery ramp re-opens only when its admitted calls'
    /// failures are that unlikely under `p`. A larger bound makes noise trips rarer and an
    /// outage take a few calls longer to trip.
    pub const fn noise_bound(mut self, one_in: u64) -> Self {
        self.noise_bound = one_in;
        self
    }

    /// Learn the dependency's normal latency and failure rate even when no trip rule needs
    /// them (default off; the statistics rules turn it on by needing them). Hedging, the
    /// measured attempt ceiling, the retry guard and a snapshot's learned figures read what
    /// the breaker learns, so a consecutive-only breaker behind a hedged policy learns.
    /// What it learns counts as for any breaker: once the normal failure rate is known, the
    /// run of failures that trips rises with it (see [`noise_bound`](Self::noise_bound)). A
    /// [`LeanBreaker`](crate::LeanBreaker) learns nothing, and refuses these settings.
    ///
    /// ```
    /// use stormguard_core::BreakerSettings;
    /// let s = BreakerSettings::builder("sensor")
    ///     .failure_rate(None)
    ///     .slow_calls(None)
    ///     .learn(true)
    ///     .build()?;
    /// assert!(s.keeps_statistics());
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub const fn learn(mut self, on: bool) -> Self {
        self.learn = on;
        self
    }

    /// Every setting at fault, in the order [`build`](Self::build) checks them: empty when
    /// the settings are valid.
    pub const fn problems(&self) -> Problems {
        let mut p = Problems::new();
        p.push_result(SettingsError::check_name(&self.name));
        let max_count = MAX_COUNT as u32;
        if self.consecutive_failures == 0 {
            p.push(SettingsError::new(
                Field::ConsecutiveFailures,
                Bound::AtLeast(1),
            ));
        } else if self.consecutive_failures > max_count {
            p.push(SettingsError::new(
                Field::ConsecutiveFailures,
                Bound::AtMost(MAX_COUNT as u64),
            ));
        }
        if let Some(rule) = &self.failure_rate {
            rule.check(&mut p);
        }
        if let Some(ceiling) = self.failure_ratio {
            if ceiling.ppm() == 0 || ceiling.ppm() > crate::ratio::PPM {
                p.push(SettingsError::new(Field::FailureRatio, Bound::ZeroToOne));
            }
        }
        if let Some(rule) = &self.slow_calls {
            rule.check(&mut p);
        }
        if let Some(t) = self.slow_threshold {
            if t.is_zero() {
                p.push(SettingsError::new(
                    Field::SlowThreshold,
                    Bound::AtLeastDuration(Duration::from_nanos(1)),
                ));
            }
        }
        if self.slow_ratio.ppm() == 0 || self.slow_ratio.ppm() > crate::ratio::PPM {
            p.push(SettingsError::new(Field::SlowRatio, Bound::ZeroToOne));
        }
        if self.minimum_calls == 0 {
            p.push(SettingsError::new(Field::MinimumCalls, Bound::AtLeast(1)));
        }
        let min_window = Duration::from_millis(TRIP_BUCKETS as u64);
        let trip_ok = if self.trip_window.as_nanos() < min_window.as_nanos() {
            p.push(SettingsError::new(
                Field::TripWindow,
                Bound::AtLeastDuration(min_window),
            ));
            false
        } else if self.trip_window.as_nanos() > MAX_BREAK.as_nanos() {
            p.push(SettingsError::new(
                Field::TripWindow,
                Bound::AtMostDuration(MAX_BREAK),
            ));
            false
        } else {
            true
        };
        if let Some(w) = self.baseline_window {
            let need = required_baseline(
                self.trip_window,
                self.slow_calls.is_some(),
                self.slow_ratio,
                self.failure_rate,
            );
            // Measured against a trip window out of bounds, the need would mislead.
            if trip_ok && w.as_nanos() < need.as_nanos() {
                p.push(SettingsError::new(
                    Field::BaselineWindow,
                    Bound::AtLeastDuration(need),
                ));
            } else if w.as_nanos() > MAX_BREAK.as_nanos() {
                p.push(SettingsError::new(
                    Field::BaselineWindow,
                    Bound::AtMostDuration(MAX_BREAK),
                ));
            }
        }
        let min_break = Duration::from_millis(1);
        let break_ok = if self.break_duration.as_nanos() < min_break.as_nanos() {
            p.push(SettingsError::new(
                Field::BreakDuration,
                Bound::AtLeastDuration(min_break),
            ));
            false
        } else if self.break_duration.as_nanos() > MAX_BREAK.as_nanos() {
            p.push(SettingsError::new(
                Field::BreakDuration,
                Bound::AtMostDuration(MAX_BREAK),
            ));
            false
        } else {
            true
        };
        if self.max_break.as_nanos() > MAX_BREAK.as_nanos() {
            p.push(SettingsError::new(
                Field::MaxBreak,
                Bound::AtMostDuration(MAX_BREAK),
            ));
        } else if break_ok && self.max_break.as_nanos() < self.break_duration.as_nanos() {
            p.push(SettingsError::new(
                Field::MaxBreak,
                Bound::NotBelow(Field::BreakDuration),
            ));
        }
        if self.half_open_probes == 0 {
            p.push(SettingsError::new(Field::HalfOpenProbes, Bound::AtLeast(1)));
        } else if self.half_open_probes > MAX_PROBES as u32 {
            p.push(SettingsError::new(
                Field::HalfOpenProbes,
                Bound::AtMost(MAX_PROBES as u64),
            ));
        }
        if self.probe_successes == 0 {
            p.push(SettingsError::new(Field::ProbeSuccesses, Bound::AtLeast(1)));
        } else if self.probe_successes > max_count {
            p.push(SettingsError::new(
                Field::ProbeSuccesses,
                Bound::AtMost(MAX_COUNT as u64),
            ));
        }
        if let Some(ramp) = &self.recovery {
            ramp.check(&mut p);
        }
        if self.noise_bound < 2 {
            p.push(SettingsError::new(Field::NoiseBound, Bound::AtLeast(2)));
        } else if self.noise_bound > MAX_NOISE_BOUND {
            p.push(SettingsError::new(
                Field::NoiseBound,
                Bound::AtMost(MAX_NOISE_BOUND),
            ));
        }
        p
    }

    /// Checks every bound and returns the settings, or every setting at fault.
    // No allocation in the core: the list is the error, by value, on a cold path.
    #[allow(clippy::result_large_err)]
    pub const fn build_all(self) -> Result<BreakerSettings, Problems> {
        let p = self.problems();
        if p.is_empty() {
            Ok(self.assemble())
        } else {
            Err(p)
        }
    }

    /// Checks every bound and returns the settings, or the first setting at fault (see
    /// [`problems`](Self::problems) for all of them).
    pub const fn build(self) -> Result<BreakerSettings, SettingsError> {
        match self.problems().first() {
            Some(e) => Err(e),
            None => Ok(self.assemble()),
        }
    }

    /// The settings, once every bound has been checked.
    const fn assemble(self) -> BreakerSettings {
        let mut settings = BreakerSettings {
            name: self.name,
            // Both checked against MAX_COUNT / MAX_PROBES above, so they fit.
            consecutive_failures: self.consecutive_failures as u16,
            failure_rate: self.failure_rate,
            failure_ratio: self.failure_ratio,
            slow_calls: self.slow_calls,
            slow_threshold: self.slow_threshold,
            slow_ratio: self.slow_ratio,
            minimum_calls: self.minimum_calls,
            trip_window: self.trip_window,
            baseline_window: self.baseline_window,
            resolved_baseline: match self.baseline_window {
                Some(w) => w,
                None => self.trip_window.saturating_mul(10).max(required_baseline(
                    self.trip_window,
                    self.slow_calls.is_some(),
                    self.slow_ratio,
                    self.failure_rate,
                )),
            },
            break_duration: self.break_duration,
            max_break: self.max_break,
            jitter: self.jitter,
            half_open_probes: self.half_open_probes as u8,
            probe_successes: self.probe_successes as u16,
            recovery: self.recovery,
            noise_bound: self.noise_bound,
            learn: self.learn,
            keeps_statistics: false,
        };
        settings.keeps_statistics = settings.needs_statistics();
        settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(b: BreakerSettingsBuilder) -> SettingsError {
        match b.build() {
            Ok(s) => panic!("built, but expected an error: {s:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn the_defaults_are_valid_and_match_the_documented_table() {
        let s = BreakerSettings::builder("x").build();
        assert!(s.is_ok());
        let s = BreakerSettings::defaults("x");
        assert_eq!(s.consecutive_failures(), 5);
        assert_eq!(s.failure_rate().map(|r| r.multiple().milli()), Some(5000));
        assert_eq!(s.failure_rate().map(|r| r.floor().ppm()), Some(50_000));
        assert_eq!(s.failure_rate().map(|r| r.arming_outcomes()), Some(100));
        assert_eq!(s.failure_rate().map(|r| r.min_failures()), Some(2));
        assert_eq!(s.failure_ratio(), None);
        assert_eq!(s.slow_calls().map(|r| r.multiple().milli()), Some(3000));
        assert_eq!(s.slow_calls().map(|r| r.arming_calls()), Some(20));
        assert_eq!(s.slow_threshold(), None);
        assert_eq!(s.slow_ratio().ppm(), 500_000);
        assert_eq!(s.minimum_calls(), 20);
        assert_eq!(s.trip_window(), Duration::from_secs(30));
        assert_eq!(s.bucket_width(), Duration::from_secs(3));
        assert_eq!(s.baseline_window(), Duration::from_secs(300));
        assert_eq!(s.break_duration(), Duration::from_secs(15));
        assert_eq!(s.max_break(), Duration::from_secs(120));
        assert_eq!(s.half_open_probes(), 1);
        assert_eq!(s.probe_successes(), 2);
        assert_eq!(s.recovery(), None);
        assert!(s.jitter());
    }

    #[test]
    fn the_default_baseline_widens_with_a_longer_trip_window() {
        let s = BreakerSettings::builder("x")
            .trip_window(Duration::from_secs(60))
            .build();
        assert_eq!(s.map(|s| s.baseline_window()), Ok(Duration::from_secs(600)));
    }

    #[test]
    fn nominal_break_doubles_up_to_the_max() {
        let s = BreakerSettings::defaults("x");
        let secs: [u64; 6] = [15, 30, 60, 120, 120, 120];
        for (i, want) in secs.iter().enumerate() {
            assert_eq!(s.nominal_break(i as u8 + 1), Duration::from_secs(*want));
        }
    }

    #[test]
    fn every_invalid_breaker_setting_is_a_typed_error() {
        let b = || BreakerSettings::builder("x");
        let cases: [(BreakerSettingsBuilder, Field, Bound); 25] = [
            (
                b().consecutive_failures(0),
                Field::ConsecutiveFailures,
                Bound::AtLeast(1),
            ),
            (
                b().consecutive_failures(1001),
                Field::ConsecutiveFailures,
                Bound::AtMost(1000),
            ),
            (
                b().failure_rate(Some(FailureRate::above(1))),
                Field::FailureMultiple,
                Bound::AboveOne,
            ),
            (
                b().failure_rate(Some(FailureRate::above(5).floor_ppm(0))),
                Field::FailureFloor,
                Bound::ZeroToOne,
            ),
            (
                b().failure_rate(Some(FailureRate::above(5).floor_ppm(1_000_001))),
                Field::FailureFloor,
                Bound::ZeroToOne,
            ),
            (
                b().failure_rate(Some(FailureRate::above(5).minimum_failures(0))),
                Field::MinimumFailures,
                Bound::AtLeast(1),
            ),
            (
                b().failure_rate(Some(FailureRate::above(5).baseline_outcomes(0))),
                Field::FailureBaselineOutcomes,
                Bound::AtLeast(1),
            ),
            (
                b().failure_ratio(Some(Ratio::ZERO)),
                Field::FailureRatio,
                Bound::ZeroToOne,
            ),
            (
                b().slow_calls(Some(SlowCalls::above_milli(1000))),
                Field::SlowMultiple,
                Bound::AboveOne,
            ),
            (
                b().slow_calls(Some(SlowCalls::above(3).baseline_calls(0))),
                Field::SlowBaselineCalls,
                Bound::AtLeast(1),
            ),
            (
                b().slow_threshold(Some(Duration::ZERO)),
                Field::SlowThreshold,
                Bound::AtLeastDuration(Duration::from_nanos(1)),
            ),
            (
                b().slow_ratio(Ratio::ZERO),
                Field::SlowRatio,
                Bound::ZeroToOne,
            ),
            (b().minimum_calls(0), Field::MinimumCalls, Bound::AtLeast(1)),
            (
                b().trip_window(Duration::from_millis(5)),
                Field::TripWindow,
                Bound::AtLeastDuration(Duration::from_millis(10)),
            ),
            (
                b().baseline_window(Some(Duration::from_secs(299))),
                Field::BaselineWindow,
                Bound::AtLeastDuration(Duration::from_secs(300)),
            ),
            (
                b().failure_rate(None)
                    .slow_calls(None)
                    .baseline_window(Some(Duration::from_secs(59))),
                Field::BaselineWindow,
                Bound::AtLeastDuration(Duration::from_secs(60)),
            ),
            (
                b().failure_rate(Some(FailureRate::above(5_000_000))),
                Field::FailureMultiple,
                Bound::AtMost(4_000_000),
            ),
            (
                b().slow_calls(Some(SlowCalls::above(5_000_000))),
                Field::SlowMultiple,
                Bound::AtMost(4_000_000),
            ),
            (
                b().break_duration(Duration::ZERO),
                Field::BreakDuration,
                Bound::AtLeastDuration(Duration::from_millis(1)),
            ),
            (
                b().max_break(Duration::from_secs(10)),
                Field::MaxBreak,
                Bound::NotBelow(Field::BreakDuration),
            ),
            (
                b().max_break(Duration::from_secs(8 * 24 * 3600)),
                Field::MaxBreak,
                Bound::AtMostDuration(MAX_BREAK),
            ),
            (
                b().half_open_probes(0),
                Field::HalfOpenProbes,
                Bound::AtLeast(1),
            ),
            (
                b().half_open_probes(32),
                Field::HalfOpenProbes,
                Bound::AtMost(31),
            ),
            (
                b().probe_successes(0),
                Field::ProbeSuccesses,
                Bound::AtLeast(1),
            ),
            (
                b().recovery(Some(Recovery::over(1.5))),
                Field::RecoveryFraction,
                Bound::ZeroToOne,
            ),
        ];
        for (builder, field, bound) in cases {
            assert_eq!(err(builder), SettingsError::new(field, bound));
        }
        assert_eq!(
            err(b().recovery(Some(
                Recovery::over(0.25).clamped(Duration::from_secs(2), Duration::from_secs(1))
            ))),
            SettingsError::new(Field::RecoveryMax, Bound::NotBelow(Field::RecoveryMin))
        );
    }

    #[test]
    fn recovery_over_a_quarter_is_clamped_to_one_and_thirty_seconds() {
        let r = Recovery::over(0.25);
        assert_eq!(r.length_for(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(
            r.length_for(Duration::from_secs(15)),
            Duration::from_millis(3750)
        );
        assert_eq!(
            r.length_for(Duration::from_secs(600)),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn escalating_cooldown_preset_matches_document_004() {
        let s = BreakerSettings::escalating_cooldown("worker");
        assert_eq!(s.break_duration(), Duration::from_secs(3));
        assert_eq!(s.nominal_break(2), Duration::from_secs(6));
        assert_eq!(s.nominal_break(7), Duration::from_secs(192));
        assert_eq!(s.nominal_break(8), Duration::from_secs(300));
        assert!(!s.jitter());
        assert!(!s.keeps_statistics());
    }
}
