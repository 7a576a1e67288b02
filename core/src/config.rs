//! Settings read from configuration files (feature `serde`): each settings type's overrides,
//! with the builders' method names as keys and durations written for people (`"250ms"`,
//! `"30s"`, `"1m"`, `"1.5s"`).
//!
//! An overrides value ([`BreakerConfig`], [`BudgetConfig`], [`BackoffConfig`], [`CallConfig`])
//! holds only the keys a document gave; [`apply`](BreakerConfig::apply) sets them on a builder
//! (the defaults, or a preset), whose `problems()`/`build()` then check every bound exactly as
//! for settings written in code. Nothing is clamped on the way in: a count too large for its
//! type is kept too large, so the builder names its bound.
//!
//! Keys a document may hold, beside the builders' own:
//! - a rule or an optional value (`failure_rate`, `failure_ratio`, `slow_calls`,
//!   `slow_threshold`, `baseline_window`, `recovery`, `deadline`, `attempt_timeout`) is turned
//!   off with `false`; a rule's table (`failure_rate = { multiple = 4.0 }`) overrides the keys
//!   it gives on the rule in force, or on the rule's defaults when it was off;
//! - ratios and multiples are decimals (`slow_ratio = 0.5`, `multiple = 2.5`).
//!
//! The settings types themselves deserialize through these (`name` required for breaker and
//! budget settings) and refuse a document whose values the builder refuses, listing every
//! problem (`invalid settings: `consecutive_failures` must be at least 1; ...`). Unknown keys
//! are refused by name. What they serialize to is their state, not these keys.

use core::fmt;
use core::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IntoDeserializer};

use crate::breaker::settings::BreakerSettings;
use crate::breaker::{BreakerSettingsBuilder, FailureRate, Recovery, SlowCalls};
use crate::call::{Backoff, BackoffBuilder, CallSettings, CallSettingsBuilder, Jitter};
use crate::error::{Bound, Field, Problems, SettingsError};
use crate::limits::budget::BudgetSettings;
use crate::limits::{
    AdaptiveLimitSettings, AdaptiveLimitSettingsBuilder, BudgetSettingsBuilder, BulkheadSettings,
    BulkheadSettingsBuilder, QuotaSettings, RateLimitSettings, RateLimitSettingsBuilder,
    SlidingWindowSettings, SlidingWindowSettingsBuilder, WindowLimitSettings,
    WindowLimitSettingsBuilder,
};
use crate::name::Name;
use crate::policy::ChaosSettings;
use crate::ratio::{Multiple, Ratio};
use crate::time::Duration;

/// A value that can be turned off: `false` in a document, or the value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Switch<T> {
    /// Turned off (`false`).
    Off,
    /// Set to this.
    On(T),
}

impl<T> Switch<T> {
    /// `None` for [`Switch::Off`], `Some` of the value otherwise.
    pub fn into_option(self) -> Option<T> {
        match self {
            Switch::Off => None,
            Switch::On(v) => Some(v),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Switch<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for Visitor<T> {
            type Value = Switch<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`false` (off) or a value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Switch<T>, E> {
                if v {
                    Err(E::invalid_value(
                        de::Unexpected::Bool(true),
                        &"`false` (off) or a value",
                    ))
                } else {
                    Ok(Switch::Off)
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Switch<T>, E> {
                T::deserialize(v.into_deserializer()).map(Switch::On)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Switch<T>, E> {
                T::deserialize(v.into_deserializer()).map(Switch::On)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Switch<T>, E> {
                T::deserialize(v.into_deserializer()).map(Switch::On)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Switch<T>, E> {
                T::deserialize(v.into_deserializer()).map(Switch::On)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Switch<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Switch::On)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Switch<T>, A::Error> {
                T::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Switch::On)
            }
        }
        d.deserialize_any(Visitor(PhantomData))
    }
}

/// A count as given, kept too large rather than wrapped: the builder reports its bound.
fn count(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A decimal ratio as parts per million; out of `[0, 1]` (or NaN) it becomes a value the
/// builder refuses by name (0 below, one past a million above).
fn ppm(x: f64) -> u32 {
    if x.is_nan() || x <= 0.0 {
        0
    } else if x > 1.0 {
        1_000_001
    } else {
        crate::ratio::Ratio::from_f64(x).map_or(0, crate::ratio::Ratio::ppm)
    }
}

/// A decimal multiple as thousandths; too large, it stays too large (the builder says the
/// most), and NaN or negative becomes 0 (the builder says the least).
fn milli(x: f64) -> u32 {
    if x.is_nan() || x <= 0.0 {
        0
    } else {
        Multiple::from_f64(x).map_or(u32::MAX, Multiple::milli)
    }
}

/// A decimal ratio, kept out of range as [`ppm`] keeps it.
fn ratio(x: f64) -> Ratio {
    Ratio::from_ppm_const(ppm(x))
}

/// A decimal multiple, kept out of range as [`milli`] keeps it.
fn multiple(x: f64) -> Multiple {
    Multiple::from_milli(milli(x))
}

/// `f` of `x`: a key's value through the conversion its declaration gives.
fn convert<T, U>(x: T, f: impl FnOnce(T) -> U) -> U {
    f(x)
}

/// A rule's key: `false` turns it off; a table sets its keys on the rule in force, or on the
/// rule's defaults when it was off.
fn rule<C, R>(s: Switch<C>, current: Option<R>, default: R, keys: fn(&C, R) -> R) -> Option<R> {
    s.into_option()
        .map(|c| keys(&c, current.unwrap_or(default)))
}

/// Declares a settings type's overrides once: the keys a document may give, with their docs,
/// each `key: Type => builder_method(conversion)`, or `=> builder_method` for the value as
/// read, or no `=>` for a key read by hand (with other keys, or checked first).
///
/// It generates the struct (every key an `Option`, unknown keys refused) and the methods
/// listed after it, each known by its name and signature:
/// - `fn apply(&self, b: Builder) -> Builder`: sets every key given that has a method, in the
///   order declared (a conversion may read the builder so far, by the name given here);
/// - `fn over(self, earlier: Self) -> Self`: these keys over `earlier`'s, a key given here
///   winning;
/// - `fn of(from: &Other) -> Self`: the keys of a value that holds them too.
macro_rules! overrides {
    (
        $(#[$doc:meta])*
        $vis:vis struct $name:ident $keys:tt
        $(
            $(#[$fn_doc:meta])*
            $fn_vis:vis fn $method:ident ($($args:tt)*) -> $ret:ident;
        )*
    ) => {
        overrides!(@struct [$(#[$doc])*] $vis $name $keys);
        impl $name {
            $(overrides!(@fn [$(#[$fn_doc])*] $fn_vis $method ($($args)*) -> $ret, $keys);)*
        }
    };
    (@struct [$($doc:tt)*] $vis:vis $name:ident {
        $($(#[$key_doc:meta])* $key:ident: $ty:ty $(=> $set:ident $(($conv:expr))?)?),* $(,)?
    }) => {
        $($doc)*
        #[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        $vis struct $name {
            $($(#[$key_doc])* pub $key: Option<$ty>,)*
        }
    };
    (@fn [$($doc:tt)*] $vis:vis apply (&self, $b:ident: $builder:ty) -> $ret:ident, {
        $($(#[$key_doc:meta])* $key:ident: $ty:ty $(=> $set:ident $(($conv:expr))?)?),* $(,)?
    }) => {
        $($doc)*
        $vis fn apply(&self, mut $b: $builder) -> $ret {
            $($(
                if let Some(value) = self.$key {
                    $b = $b.$set(overrides!(@convert value $(, $conv)?));
                }
            )?)*
            $b
        }
    };
    (@fn [$($doc:tt)*] $vis:vis over (self, $earlier:ident: Self) -> Self, {
        $($(#[$key_doc:meta])* $key:ident: $ty:ty $(=> $set:ident $(($conv:expr))?)?),* $(,)?
    }) => {
        $($doc)*
        $vis fn over(self, $earlier: Self) -> Self {
            Self {
                $($key: self.$key.or($earlier.$key),)*
            }
        }
    };
    (@fn [$($doc:tt)*] $vis:vis of ($from:ident: &$other:ty) -> Self, {
        $($(#[$key_doc:meta])* $key:ident: $ty:ty $(=> $set:ident $(($conv:expr))?)?),* $(,)?
    }) => {
        $($doc)*
        $vis fn of($from: &$other) -> Self {
            Self {
                $($key: $from.$key,)*
            }
        }
    };
    (@convert $value:ident) => {
        $value
    };
    (@convert $value:ident, $conv:expr) => {
        convert($value, $conv)
    };
}

// What a rule's keys set that the rule's own methods set only with its other values: one
// value changed, the others kept.
impl FailureRate {
    const fn with_multiple_milli(self, milli: u32) -> FailureRate {
        FailureRate::above_milli(milli)
            .floor_ppm(self.floor().ppm())
            .minimum_failures(self.min_failures())
            .baseline_outcomes(self.arming_outcomes())
    }
}

impl SlowCalls {
    const fn with_multiple_milli(self, milli: u32) -> SlowCalls {
        SlowCalls::above_milli(milli).baseline_calls(self.arming_calls())
    }
}

impl Recovery {
    const fn with_fraction_ppm(self, ppm: u32) -> Recovery {
        Recovery::over_ppm(ppm).clamped(self.min(), self.max())
    }

    const fn with_min(self, min: Duration) -> Recovery {
        self.clamped(min, self.max())
    }

    const fn with_max(self, max: Duration) -> Recovery {
        self.clamped(self.min(), max)
    }
}

overrides! {
    /// Overrides of the relative error-rate rule ([`FailureRate`]).
    pub struct FailureRateConfig {
        /// [`FailureRate::above`]: trip above this multiple of the normal rate.
        multiple: f64 => with_multiple_milli(milli),
        /// [`FailureRate::floor_ppm`], as a decimal ratio.
        floor: f64 => floor_ppm(ppm),
        /// [`FailureRate::minimum_failures`].
        minimum_failures: u64 => minimum_failures(count),
        /// [`FailureRate::baseline_outcomes`].
        baseline_outcomes: u64 => baseline_outcomes(count),
    }
    /// These overrides on `rule`.
    #[must_use]
    pub fn apply(&self, rule: FailureRate) -> FailureRate;
}

overrides! {
    /// Overrides of the relative slow-call rule ([`SlowCalls`]).
    pub struct SlowCallsConfig {
        /// [`SlowCalls::above`]: slow above this multiple of the normal latency.
        multiple: f64 => with_multiple_milli(milli),
        /// [`SlowCalls::baseline_calls`].
        baseline_calls: u64 => baseline_calls(count),
    }
    /// These overrides on `rule`.
    #[must_use]
    pub fn apply(&self, rule: SlowCalls) -> SlowCalls;
}

overrides! {
    /// Overrides of the recovery ramp ([`Recovery`]).
    pub struct RecoveryConfig {
        /// [`Recovery::over`]: the share of the break just served the ramp lasts.
        fraction: f64 => with_fraction_ppm(ppm),
        /// The ramp's shortest length ([`Recovery::clamped`]).
        min: Duration => with_min,
        /// The ramp's longest length ([`Recovery::clamped`]).
        max: Duration => with_max,
    }
    /// These overrides on `ramp`.
    #[must_use]
    pub fn apply(&self, ramp: Recovery) -> Recovery;
}

/// The defaults a rule that was off starts from when a document turns it on.
const DEFAULT_FAILURE_RATE: FailureRate = FailureRate::above(5);
const DEFAULT_SLOW_CALLS: SlowCalls = SlowCalls::above(3);
const DEFAULT_RECOVERY: Recovery = Recovery::over_ppm(250_000);

overrides! {
    /// Overrides of [`BreakerSettings`]: each key is a [`BreakerSettingsBuilder`] method.
    ///
    /// ```toml
    /// consecutive_failures = 3
    /// break_duration = "10s"
    /// failure_rate = { multiple = 4.0, floor = 0.1 }
    /// slow_calls = false
    /// ```
    pub struct BreakerConfig {
        /// [`BreakerSettingsBuilder::name`].
        name: Name => name,
        /// [`BreakerSettingsBuilder::consecutive_failures`].
        consecutive_failures: u64 => consecutive_failures(count),
        /// [`BreakerSettingsBuilder::failure_rate`].
        failure_rate: Switch<FailureRateConfig> => failure_rate(|s| {
            rule(s, b.current_failure_rate(), DEFAULT_FAILURE_RATE, FailureRateConfig::apply)
        }),
        /// [`BreakerSettingsBuilder::failure_ratio`], as a decimal.
        failure_ratio: Switch<f64> => failure_ratio(|s| s.into_option().map(ratio)),
        /// [`BreakerSettingsBuilder::slow_calls`].
        slow_calls: Switch<SlowCallsConfig> => slow_calls(|s| {
            rule(s, b.current_slow_calls(), DEFAULT_SLOW_CALLS, SlowCallsConfig::apply)
        }),
        /// [`BreakerSettingsBuilder::slow_threshold`].
        slow_threshold: Switch<Duration> => slow_threshold(Switch::into_option),
        /// [`BreakerSettingsBuilder::slow_ratio`], as a decimal.
        slow_ratio: f64 => slow_ratio(ratio),
        /// [`BreakerSettingsBuilder::minimum_calls`].
        minimum_calls: u64 => minimum_calls(count),
        /// [`BreakerSettingsBuilder::trip_window`].
        trip_window: Duration => trip_window,
        /// [`BreakerSettingsBuilder::baseline_window`].
        baseline_window: Switch<Duration> => baseline_window(Switch::into_option),
        /// [`BreakerSettingsBuilder::break_duration`].
        break_duration: Duration => break_duration,
        /// [`BreakerSettingsBuilder::max_break`].
        max_break: Duration => max_break,
        /// [`BreakerSettingsBuilder::jitter`].
        jitter: bool => jitter,
        /// [`BreakerSettingsBuilder::half_open_probes`].
        half_open_probes: u64 => half_open_probes(count),
        /// [`BreakerSettingsBuilder::probe_successes`].
        probe_successes: u64 => probe_successes(count),
        /// [`BreakerSettingsBuilder::recovery`].
        recovery: Switch<RecoveryConfig> => recovery(|s| {
            rule(s, b.current_recovery(), DEFAULT_RECOVERY, RecoveryConfig::apply)
        }),
        /// [`BreakerSettingsBuilder::noise_bound`].
        noise_bound: u64 => noise_bound,
        /// [`BreakerSettingsBuilder::learn`].
        learn: bool => learn,
    }
    /// Sets every key given on `b`; its `build()` checks them.
    pub fn apply(&self, b: BreakerSettingsBuilder) -> BreakerSettingsBuilder;
}

overrides! {
    /// Overrides of [`BudgetSettings`]: each key is a [`BudgetSettingsBuilder`] method.
    pub struct BudgetConfig {
        /// [`BudgetSettingsBuilder::name`].
        name: Name => name,
        /// [`BudgetSettingsBuilder::fraction`].
        fraction: f64 => fraction,
        /// [`BudgetSettingsBuilder::floor_per_second`].
        floor_per_second: f64 => floor_per_second,
    }
    /// Sets every key given on `b`; its `build()` checks them.
    pub fn apply(&self, b: BudgetSettingsBuilder) -> BudgetSettingsBuilder;
}

/// A [`Jitter`] by its name (`"none"`, `"full"`, `"equal"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JitterName {
    /// [`Jitter::None`].
    None,
    /// [`Jitter::Full`].
    Full,
    /// [`Jitter::Equal`].
    Equal,
}

impl From<JitterName> for Jitter {
    fn from(j: JitterName) -> Jitter {
        match j {
            JitterName::None => Jitter::None,
            JitterName::Full => Jitter::Full,
            JitterName::Equal => Jitter::Equal,
        }
    }
}

overrides! {
    /// Overrides of a [`Backoff`]: each key is a [`BackoffBuilder`] method.
    pub struct BackoffConfig {
        /// [`BackoffBuilder::base`].
        base: Duration => base,
        /// [`BackoffBuilder::throttled_base`].
        throttled_base: Duration => throttled_base,
        /// [`BackoffBuilder::factor`], as a decimal.
        factor: f64 => factor(multiple),
        /// [`BackoffBuilder::cap`].
        cap: Duration => cap,
        /// [`BackoffBuilder::jitter`].
        jitter: JitterName => jitter(Jitter::from),
    }
    /// Sets every key given on `b`; its `build()` checks them.
    pub fn apply(&self, b: BackoffBuilder) -> BackoffBuilder;
}

overrides! {
    /// Overrides of [`CallSettings`]: each key is a [`CallSettingsBuilder`] method; `backoff`
    /// is a table of [`BackoffConfig`] keys.
    pub struct CallConfig {
        /// [`CallSettingsBuilder::max_attempts`].
        max_attempts: u64 => max_attempts(count),
        /// [`CallSettingsBuilder::deadline`].
        deadline: Switch<Duration> => deadline(Switch::into_option),
        /// [`CallSettingsBuilder::attempt_timeout`].
        attempt_timeout: Switch<Duration> => attempt_timeout(Switch::into_option),
        /// [`CallSettingsBuilder::measured_ceiling`].
        measured_ceiling: bool => measured_ceiling,
        /// [`CallSettingsBuilder::ceiling_floor`].
        ceiling_floor: Duration => ceiling_floor,
        /// [`CallSettingsBuilder::hedging`].
        hedging: bool => hedging,
        /// [`CallSettingsBuilder::backoff`], key by key.
        backoff: BackoffConfig,
    }
    /// Sets every key given on `b` but the backoff (see [`backoff`](Self::backoff)); its
    /// `build()` checks them.
    pub fn apply(&self, b: CallSettingsBuilder) -> CallSettingsBuilder;
    /// The call keys of a policy's section.
    fn of(section: &PolicySection) -> Self;
}

impl CallConfig {
    /// The backoff builder these overrides give, starting from the backoff `b` holds: checked
    /// on its own (its problems are the backoff's), then set with
    /// [`CallSettingsBuilder::backoff`].
    pub fn backoff(&self, b: &CallSettingsBuilder) -> BackoffBuilder {
        let start = b.current_backoff().to_builder();
        match &self.backoff {
            Some(c) => c.apply(start),
            None => start,
        }
    }
}

fn invalid<E: de::Error>(problems: Problems) -> E {
    E::custom(format_args!("invalid settings: {problems}"))
}

impl<'de> Deserialize<'de> for BreakerSettings {
    /// [`BreakerConfig`] keys (`name` required) on the defaults, checked by
    /// [`BreakerSettingsBuilder::build_all`].
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let c = BreakerConfig::deserialize(d)?;
        let name = c.name.ok_or_else(|| de::Error::missing_field("name"))?;
        c.apply(BreakerSettings::builder_named(name))
            .build_all()
            .map_err(invalid)
    }
}

impl<'de> Deserialize<'de> for BudgetSettings {
    /// [`BudgetConfig`] keys (`name` required) on the defaults, checked by
    /// [`BudgetSettingsBuilder::build_all`].
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let c = BudgetConfig::deserialize(d)?;
        let name = c.name.ok_or_else(|| de::Error::missing_field("name"))?;
        c.apply(BudgetSettings::builder_named(name))
            .build_all()
            .map_err(invalid)
    }
}

impl<'de> Deserialize<'de> for Backoff {
    /// [`BackoffConfig`] keys on [`Backoff::DEFAULT`], checked by [`BackoffBuilder::build_all`].
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BackoffConfig::deserialize(d)?
            .apply(Backoff::builder())
            .build_all()
            .map_err(invalid)
    }
}

impl<'de> Deserialize<'de> for CallSettings {
    /// [`CallConfig`] keys on [`CallSettings::DEFAULT`], checked by
    /// [`CallSettingsBuilder::build_all`] (and the backoff by [`BackoffBuilder::build_all`]).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let c = CallConfig::deserialize(d)?;
        let start = CallSettings::builder();
        let backoff = c.backoff(&start).build_all().map_err(invalid)?;
        c.apply(start.backoff(backoff)).build_all().map_err(invalid)
    }
}

overrides! {
    /// Overrides of a bulkhead's settings ([`BulkheadSettings`]): `max_in_flight`, and a
    /// bounded wait as `max_queue` with `max_wait` (both set by
    /// [`BulkheadSettingsBuilder::bounded_wait`]; a queue needs a wait).
    pub struct BulkheadConfig {
        /// The name (default: the policy's, in a policy section).
        name: Name => name,
        /// Calls admitted at once.
        max_in_flight: u64 => max_in_flight(count),
        /// Callers that may wait for a slot at once.
        max_queue: u64,
        /// The longest a caller waits for a slot.
        max_wait: Duration,
    }
    /// These keys over `earlier`'s: a key given here wins.
    #[must_use]
    pub fn over(self, earlier: Self) -> Self;
    /// Sets every key given on `b` but the wait's.
    fn apply(&self, b: BulkheadSettingsBuilder) -> BulkheadSettingsBuilder;
}

impl BulkheadConfig {
    /// The settings of a bulkhead called `name` (unless these keys name it): the defaults
    /// with these keys, checked.
    pub fn build(&self, name: Name) -> Result<BulkheadSettings, SettingsError> {
        let mut b = self.apply(BulkheadSettings::builder_named(name));
        let queue = count(self.max_queue.unwrap_or(0));
        let wait = self.max_wait.unwrap_or(Duration::ZERO);
        if queue > 0 || !wait.is_zero() {
            if queue == 0 {
                return Err(SettingsError::new(Field::MaxQueue, Bound::AtLeast(1)));
            }
            b = b.bounded_wait(queue, wait);
        }
        b.build()
    }
}

overrides! {
    /// Overrides of a GCRA rate limiter's settings ([`RateLimitSettings`]): `rate` cells per
    /// `period` (default 50 per minute), `burst` (default the rate) and `idle`.
    pub struct RateLimitConfig {
        /// The name (default: the policy's, in a policy section).
        name: Name => name,
        /// Cells per period.
        rate: u64,
        /// The period the rate is counted over.
        period: Duration,
        /// Cells that may be taken at once after a quiet spell.
        burst: u64 => burst(count),
        /// How long an unused key is kept (keyed limiters).
        idle: Duration => idle,
    }
    /// These keys over `earlier`'s: a key given here wins.
    #[must_use]
    pub fn over(self, earlier: Self) -> Self;
    /// Sets every key given on `b` but the rate's.
    fn apply(&self, b: RateLimitSettingsBuilder) -> RateLimitSettingsBuilder;
}

impl RateLimitConfig {
    /// The settings of a limiter called `name` (unless these keys name it): the defaults with
    /// these keys, checked.
    pub fn build(&self, name: Name) -> Result<RateLimitSettings, SettingsError> {
        let defaults = RateLimitSettings::defaults("limit");
        self.apply(RateLimitSettings::builder_named(name))
            .rate(
                self.rate.map_or(defaults.cells(), count),
                self.period.unwrap_or(defaults.period()),
            )
            .build()
    }
}

overrides! {
    /// Overrides of a fixed-window limiter's settings ([`WindowLimitSettings`]): `events` per
    /// `window`, then a `cooldown`; `idle` for keyed limiters.
    pub struct WindowLimitConfig {
        /// The name (default: the policy's, in a policy section).
        name: Name => name,
        /// Events admitted per window.
        events: u64 => events(count),
        /// The window.
        window: Duration => window,
        /// How long a full window refuses after it filled.
        cooldown: Duration => cooldown,
        /// How long an unused key is kept (keyed limiters).
        idle: Duration => idle,
    }
    /// These keys over `earlier`'s: a key given here wins.
    #[must_use]
    pub fn over(self, earlier: Self) -> Self;
    /// Sets every key given on `b`.
    fn apply(&self, b: WindowLimitSettingsBuilder) -> WindowLimitSettingsBuilder;
}

impl WindowLimitConfig {
    /// The settings of a limiter called `name` (unless these keys name it): the defaults with
    /// these keys, checked.
    pub fn build(&self, name: Name) -> Result<WindowLimitSettings, SettingsError> {
        self.apply(WindowLimitSettings::builder_named(name)).build()
    }
}

overrides! {
    /// Overrides of a segmented sliding-window limiter's settings ([`SlidingWindowSettings`]):
    /// `quota` calls per `window`, the window sliding in `segments`.
    pub struct SlidingWindowConfig {
        /// The name (default: the policy's, in a policy section).
        name: Name => name,
        /// Calls admitted per window.
        quota: u64 => quota(count),
        /// The window.
        window: Duration => window,
        /// The segments the window slides in.
        segments: u64 => segments(count),
    }
    /// Sets every key given on `b`.
    fn apply(&self, b: SlidingWindowSettingsBuilder) -> SlidingWindowSettingsBuilder;
}

impl SlidingWindowConfig {
    /// The settings of a limiter called `name` (unless these keys name it): the defaults with
    /// these keys, checked.
    pub fn build(&self, name: Name) -> Result<SlidingWindowSettings, SettingsError> {
        self.apply(SlidingWindowSettings::builder_named(name))
            .build()
    }
}

overrides! {
    /// The settings of kept published quotas ([`QuotaSettings`]): `reserve` (a decimal share
    /// of the published limit kept untouched) and `max_wait` (the longest a reading may keep a
    /// caller waiting).
    pub struct QuotaConfig {
        /// The share of the limit kept untouched, as a decimal below 1.
        reserve: f64,
        /// The longest a reading may keep a caller waiting.
        max_wait: Duration,
    }
}

impl QuotaConfig {
    /// The settings: the defaults with these keys, checked.
    pub fn build(&self) -> Result<QuotaSettings, SettingsError> {
        let reserve = match self.reserve {
            // NaN and negative shares are no share; 1 and above are refused by the settings.
            Some(x) if x.is_nan() || x < 0.0 => {
                return Err(SettingsError::new(Field::QuotaReserve, Bound::BelowOne))
            }
            Some(x) => Ratio::from_ppm_const(ppm(x).min(1_000_000)),
            None => QuotaSettings::DEFAULT.reserve(),
        };
        QuotaSettings::new(
            reserve,
            self.max_wait.unwrap_or(QuotaSettings::DEFAULT.max_wait()),
        )
    }
}

impl<'de> Deserialize<'de> for QuotaSettings {
    /// [`QuotaConfig`] keys on [`QuotaSettings::DEFAULT`], checked.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        QuotaConfig::deserialize(d)?
            .build()
            .map_err(|e| de::Error::custom(format_args!("invalid settings: {e}")))
    }
}

overrides! {
    /// Overrides of an adaptive concurrency limiter's settings ([`AdaptiveLimitSettings`]):
    /// `min_limit` and `max_limit` (set together by its builder's `limits`), `initial_limit`,
    /// `latency_tolerance` (a decimal multiple), `decrease` (a decimal ratio) and
    /// `baseline_window`.
    pub struct AdaptiveLimitConfig {
        /// The name (default: the policy's, in a policy section).
        name: Name => name,
        /// The lowest limit.
        min_limit: u64,
        /// The highest limit.
        max_limit: u64,
        /// The limit before the first round ends.
        initial_limit: u64 => initial_limit(count),
        /// A round is slow when its fastest call took more than this times the baseline.
        latency_tolerance: f64 => latency_tolerance(multiple),
        /// What a slow round multiplies the limit by.
        decrease: f64 => decrease(ratio),
        /// How far back the baseline's latencies reach.
        baseline_window: Duration => baseline_window,
    }
    /// These keys over `earlier`'s: a key given here wins.
    #[must_use]
    pub fn over(self, earlier: Self) -> Self;
    /// Sets every key given on `b` but the limits'.
    fn apply(&self, b: AdaptiveLimitSettingsBuilder) -> AdaptiveLimitSettingsBuilder;
}

impl AdaptiveLimitConfig {
    /// The settings of a limiter called `name` (unless these keys name it): the defaults with
    /// these keys, checked.
    pub fn build(&self, name: Name) -> Result<AdaptiveLimitSettings, SettingsError> {
        self.apply(AdaptiveLimitSettings::builder_named(name))
            .limits(
                self.min_limit
                    .map_or(AdaptiveLimitSettings::DEFAULT_MIN_LIMIT, count),
                self.max_limit
                    .map_or(AdaptiveLimitSettings::DEFAULT_MAX_LIMIT, count),
            )
            .build()
    }
}

overrides! {
    /// Fault injection's settings ([`ChaosSettings`]): `faults` (the share of attempts
    /// failed), `slowed` and `latency` (the share held back, and by how long: given together),
    /// `seed`.
    pub struct ChaosConfig {
        /// The share of attempts failed, as a decimal.
        faults: f64,
        /// The share of attempts held back, as a decimal.
        slowed: f64,
        /// How long a slowed attempt is held back.
        latency: Duration,
        /// The seed the rolls are drawn from.
        seed: u64,
    }
}

impl ChaosConfig {
    /// The settings: nothing injected but what these keys give, checked.
    pub fn build(&self) -> Result<ChaosSettings, SettingsError> {
        let share = |x: f64, field: Field| {
            crate::ratio::Ratio::from_ppm(ppm(x))
                .filter(|_| x >= 0.0)
                .ok_or(SettingsError::new(field, Bound::ZeroToOne))
        };
        let mut b = ChaosSettings::builder();
        if let Some(x) = self.faults {
            b = b.faults(share(x, Field::Faults)?);
        }
        if self.slowed.is_some() || self.latency.is_some() {
            b = b.latency(
                share(self.slowed.unwrap_or(0.0), Field::Slowed)?,
                self.latency.unwrap_or(Duration::ZERO),
            );
        }
        if let Some(seed) = self.seed {
            b = b.seed(seed);
        }
        b.build()
    }
}

/// Deserializes a limit's settings through its overrides type: `name` required.
macro_rules! settings_through {
    ($settings:ty, $config:ty) => {
        impl<'de> Deserialize<'de> for $settings {
            #[doc = concat!("[`", stringify!($config), "`] keys (`name` required) on the defaults, checked.")]
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let c = <$config>::deserialize(d)?;
                let name = c.name.ok_or_else(|| de::Error::missing_field("name"))?;
                c.build(name)
                    .map_err(|e| de::Error::custom(format_args!("invalid settings: {e}")))
            }
        }
    };
}

settings_through!(BulkheadSettings, BulkheadConfig);
settings_through!(RateLimitSettings, RateLimitConfig);
settings_through!(WindowLimitSettings, WindowLimitConfig);
settings_through!(AdaptiveLimitSettings, AdaptiveLimitConfig);
settings_through!(SlidingWindowSettings, SlidingWindowConfig);

impl<'de> Deserialize<'de> for ChaosSettings {
    /// [`ChaosConfig`] keys on [`ChaosSettings::OFF`], checked.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ChaosConfig::deserialize(d)?
            .build()
            .map_err(|e| de::Error::custom(format_args!("invalid settings: {e}")))
    }
}

overrides! {
    /// One policy's section of a configuration document: the call settings' keys (as
    /// [`CallConfig`]'s), `retries_when_nested`, and `breaker` and `budget` tables (or `false`
    /// for none). The format the std adapter's policy documents and the simulator's scenario
    /// files share.
    ///
    /// ```toml
    /// max_attempts = 3
    /// deadline = "2s"
    /// backoff = { base = "50ms", cap = "1s" }
    /// breaker = { consecutive_failures = 3, slow_calls = false }
    /// budget = { fraction = 0.2 }
    /// ```
    pub struct PolicySection {
        /// The preset this section starts from, where the document has presets.
        preset: Name,
        /// [`CallSettingsBuilder::max_attempts`].
        max_attempts: u64,
        /// [`CallSettingsBuilder::deadline`].
        deadline: Switch<Duration>,
        /// [`CallSettingsBuilder::attempt_timeout`].
        attempt_timeout: Switch<Duration>,
        /// [`CallSettingsBuilder::measured_ceiling`].
        measured_ceiling: bool,
        /// [`CallSettingsBuilder::ceiling_floor`].
        ceiling_floor: Duration,
        /// [`CallSettingsBuilder::hedging`].
        hedging: bool,
        /// Whether calls made while serving a caller's retry may retry (default `true`).
        retries_when_nested: bool,
        /// The backoff, key by key.
        backoff: BackoffConfig,
        /// The breaker's keys, or `false` for no breaker (default: a breaker with the
        /// defaults).
        breaker: Switch<BreakerConfig>,
        /// The budget's keys, or `false` for no budget (default: a budget with the defaults).
        budget: Switch<BudgetConfig>,
        /// A GCRA rate limiter's keys, or `false` for none (default none).
        rate_limit: Switch<RateLimitConfig>,
        /// A bulkhead's keys, or `false` for none (default none).
        bulkhead: Switch<BulkheadConfig>,
        /// An adaptive concurrency limiter's keys, or `false` for none (default none).
        adaptive_limit: Switch<AdaptiveLimitConfig>,
    }
}
/// A policy's settings from its sections, every one checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyParts {
    /// The call settings (the backoff included).
    pub call: CallSettings,
    /// Whether calls made while serving a caller's retry may retry.
    pub retries_when_nested: bool,
    /// The breaker's settings, unless turned off.
    pub breaker: Option<BreakerSettings>,
    /// The budget's settings, unless turned off.
    pub budget: Option<BudgetSettings>,
    /// The rate limiter's settings, if the sections give one.
    pub rate_limit: Option<RateLimitSettings>,
    /// The bulkhead's settings, if the sections give one.
    pub bulkhead: Option<BulkheadSettings>,
    /// The adaptive limiter's settings, if the sections give one.
    pub adaptive_limit: Option<AdaptiveLimitSettings>,
}

/// Every problem in a policy's sections, by the part it is in (each may be empty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyProblems {
    /// The backoff's (`backoff.` keys).
    pub backoff: Problems,
    /// The call settings' (the section's own keys).
    pub call: Problems,
    /// The breaker's (`breaker.` keys); a breaker `name` other than the policy's is
    /// [`Field::BreakerName`].
    pub breaker: Problems,
    /// The budget's (`budget.` keys); a budget `name` other than the policy's is
    /// [`Field::BudgetName`].
    pub budget: Problems,
    /// The rate limiter's (`rate_limit.` keys).
    pub rate_limit: Problems,
    /// The bulkhead's (`bulkhead.` keys).
    pub bulkhead: Problems,
    /// The adaptive limiter's (`adaptive_limit.` keys).
    pub adaptive_limit: Problems,
}

impl PolicySection {
    /// The call keys of this section.
    #[must_use]
    pub fn call(&self) -> CallConfig {
        CallConfig::of(self)
    }

    /// The settings of a policy called `name` whose sections are `layers`, each applied over
    /// the ones before it (a preset, then the policy's own), starting from the defaults: every
    /// part checked, and every problem of every part returned.
    ///
    /// ```
    /// use stormguard_core::config::PolicySection;
    /// use stormguard_core::{Duration, Name};
    /// let preset = PolicySection { max_attempts: Some(4), ..PolicySection::default() };
    /// let own = PolicySection { max_attempts: Some(2), ..PolicySection::default() };
    /// let parts = PolicySection::resolve(Name::new("db"), &[&preset, &own]).unwrap();
    /// assert_eq!(parts.call.max_attempts(), 2);
    /// assert_eq!(parts.breaker.unwrap().break_duration(), Duration::from_secs(15));
    ///
    /// let bad = PolicySection { max_attempts: Some(0), ..PolicySection::default() };
    /// let problems = PolicySection::resolve(Name::new("db"), &[&bad]).unwrap_err();
    /// assert_eq!(problems.call.to_string(), "`max_attempts` must be at least 1");
    /// ```
    // No allocation in the core: the lists are the error, by value, on a cold path.
    #[allow(clippy::result_large_err)]
    pub fn resolve(name: Name, layers: &[&PolicySection]) -> Result<PolicyParts, PolicyProblems> {
        let mut problems = PolicyProblems::default();
        let mut backoff = Backoff::DEFAULT.to_builder();
        let mut call = CallSettings::builder();
        let mut breaker = Some(BreakerSettings::builder_named(name));
        let mut budget = Some(BudgetSettings::builder_named(name));
        let mut retries_when_nested = true;
        let mut rate_limit: Option<RateLimitConfig> = None;
        let mut bulkhead: Option<BulkheadConfig> = None;
        let mut adaptive_limit: Option<AdaptiveLimitConfig> = None;
        for layer in layers {
            rate_limit = over(layer.rate_limit, rate_limit, RateLimitConfig::over);
            bulkhead = over(layer.bulkhead, bulkhead, BulkheadConfig::over);
            adaptive_limit = over(
                layer.adaptive_limit,
                adaptive_limit,
                AdaptiveLimitConfig::over,
            );
            if let Some(c) = &layer.backoff {
                backoff = c.apply(backoff);
            }
            call = layer.call().apply(call);
            match layer.breaker {
                Some(Switch::Off) => breaker = None,
                Some(Switch::On(c)) => {
                    breaker =
                        Some(c.apply(breaker.unwrap_or(BreakerSettings::builder_named(name))));
                }
                None => {}
            }
            match layer.budget {
                Some(Switch::Off) => budget = None,
                Some(Switch::On(c)) => {
                    budget = Some(c.apply(budget.unwrap_or(BudgetSettings::builder_named(name))));
                }
                None => {}
            }
            if let Some(on) = layer.retries_when_nested {
                retries_when_nested = on;
            }
        }
        let backoff = backoff.build_all().map_err(|p| problems.backoff = p).ok();
        if let Some(b) = backoff {
            call = call.backoff(b);
        }
        let call = call.build_all().map_err(|p| problems.call = p).ok();
        let breaker = breaker.map(|b| {
            let s = b.build_all().map_err(|p| problems.breaker = p).ok();
            if s.is_some_and(|s| s.name() != &name) {
                problems.breaker.push(crate::error::SettingsError {
                    field: crate::error::Field::BreakerName,
                    bound: crate::error::Bound::PolicyName,
                });
            }
            s
        });
        let budget = budget.map(|b| {
            let s = b.build_all().map_err(|p| problems.budget = p).ok();
            if s.is_some_and(|s| s.name() != &name) {
                problems.budget.push(crate::error::SettingsError {
                    field: crate::error::Field::BudgetName,
                    bound: crate::error::Bound::PolicyName,
                });
            }
            s
        });
        let rate_limit =
            rate_limit.map(|c| c.build(name).map_err(|e| problems.rate_limit.push(e)).ok());
        let bulkhead = bulkhead.map(|c| c.build(name).map_err(|e| problems.bulkhead.push(e)).ok());
        let adaptive_limit = adaptive_limit.map(|c| {
            c.build(name)
                .map_err(|e| problems.adaptive_limit.push(e))
                .ok()
        });
        // A part that did not build (`Some(None)`) has its problems, so with none every part
        // given is built.
        match call {
            Some(call) if problems.is_empty() => Ok(PolicyParts {
                call,
                retries_when_nested,
                breaker: breaker.flatten(),
                budget: budget.flatten(),
                rate_limit: rate_limit.flatten(),
                bulkhead: bulkhead.flatten(),
                adaptive_limit: adaptive_limit.flatten(),
            }),
            _ => Err(problems),
        }
    }
}

/// A part's keys after one more section: off with `false`, its keys over the ones before.
fn over<T: Default + Copy>(
    layer: Option<Switch<T>>,
    before: Option<T>,
    merge: fn(T, T) -> T,
) -> Option<T> {
    match layer {
        Some(Switch::Off) => None,
        Some(Switch::On(c)) => Some(merge(c, before.unwrap_or_default())),
        None => before,
    }
}

/// The key a policy section gives `field`, within its part's table: `failure_rate.multiple`
/// in `breaker`, `base` in `backoff`, `fraction` in `budget`, `max_attempts` at the top.
///
/// ```
/// use stormguard_core::{config::key, Field};
/// assert_eq!(key(Field::FailureMultiple), "failure_rate.multiple");
/// assert_eq!(key(Field::BackoffCap), "cap");
/// assert_eq!(key(Field::ConsecutiveFailures), "consecutive_failures");
/// ```
#[must_use]
pub const fn key(field: crate::error::Field) -> &'static str {
    use crate::error::Field;
    match field {
        Field::FailureMultiple => "failure_rate.multiple",
        Field::FailureFloor => "failure_rate.floor",
        Field::MinimumFailures => "failure_rate.minimum_failures",
        Field::FailureBaselineOutcomes => "failure_rate.baseline_outcomes",
        Field::SlowMultiple => "slow_calls.multiple",
        Field::SlowBaselineCalls => "slow_calls.baseline_calls",
        Field::RecoveryFraction => "recovery.fraction",
        Field::RecoveryMin => "recovery.min",
        Field::RecoveryMax => "recovery.max",
        Field::BreakerName | Field::BudgetName => "name",
        Field::RetryFraction => "fraction",
        Field::FloorRate => "floor_per_second",
        Field::BackoffBase => "base",
        Field::ThrottledBase => "throttled_base",
        Field::BackoffFactor => "factor",
        Field::BackoffCap => "cap",
        other => other.as_str(),
    }
}

impl PolicyProblems {
    /// `true` when no part has a problem.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.backoff.is_empty()
            && self.call.is_empty()
            && self.breaker.is_empty()
            && self.budget.is_empty()
            && self.rate_limit.is_empty()
            && self.bulkhead.is_empty()
            && self.adaptive_limit.is_empty()
    }

    /// Every part's list with the prefix of its keys in a section (`"backoff."`, `""`,
    /// `"breaker."`, `"budget."`, `"rate_limit."`, `"bulkhead."`, `"adaptive_limit."`): a
    /// problem's path is the prefix and [`key`] of its field.
    pub fn parts(&self) -> [(&'static str, &Problems); 7] {
        [
            ("backoff.", &self.backoff),
            ("", &self.call),
            ("breaker.", &self.breaker),
            ("budget.", &self.budget),
            ("rate_limit.", &self.rate_limit),
            ("bulkhead.", &self.bulkhead),
            ("adaptive_limit.", &self.adaptive_limit),
        ]
    }
}
