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
    AdaptiveLimitSettings, BudgetSettingsBuilder, BulkheadSettings, QuotaSettings,
    RateLimitSettings, SlidingWindowSettings, WindowLimitSettings,
};
use crate::name::Name;
use crate::policy::ChaosSettings;
use crate::ratio::Multiple;
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

/// Overrides of the relative error-rate rule ([`FailureRate`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureRateConfig {
    /// [`FailureRate::above`]: trip above this multiple of the normal rate.
    pub multiple: Option<f64>,
    /// [`FailureRate::floor_ppm`], as a decimal ratio.
    pub floor: Option<f64>,
    /// [`FailureRate::minimum_failures`].
    pub minimum_failures: Option<u64>,
    /// [`FailureRate::baseline_outcomes`].
    pub baseline_outcomes: Option<u64>,
}

impl FailureRateConfig {
    /// These overrides on `rule`.
    #[must_use]
    pub fn apply(&self, rule: FailureRate) -> FailureRate {
        let mut r = match self.multiple {
            Some(m) => FailureRate::above_milli(milli(m))
                .floor_ppm(rule.floor().ppm())
                .minimum_failures(rule.min_failures())
                .baseline_outcomes(rule.arming_outcomes()),
            None => rule,
        };
        if let Some(f) = self.floor {
            r = r.floor_ppm(ppm(f));
        }
        if let Some(n) = self.minimum_failures {
            r = r.minimum_failures(count(n));
        }
        if let Some(n) = self.baseline_outcomes {
            r = r.baseline_outcomes(count(n));
        }
        r
    }
}

/// Overrides of the relative slow-call rule ([`SlowCalls`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowCallsConfig {
    /// [`SlowCalls::above`]: slow above this multiple of the normal latency.
    pub multiple: Option<f64>,
    /// [`SlowCalls::baseline_calls`].
    pub baseline_calls: Option<u64>,
}

impl SlowCallsConfig {
    /// These overrides on `rule`.
    #[must_use]
    pub fn apply(&self, rule: SlowCalls) -> SlowCalls {
        let mut r = match self.multiple {
            Some(m) => SlowCalls::above_milli(milli(m)).baseline_calls(rule.arming_calls()),
            None => rule,
        };
        if let Some(n) = self.baseline_calls {
            r = r.baseline_calls(count(n));
        }
        r
    }
}

/// Overrides of the recovery ramp ([`Recovery`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryConfig {
    /// [`Recovery::over`]: the share of the break just served the ramp lasts.
    pub fraction: Option<f64>,
    /// The ramp's shortest length ([`Recovery::clamped`]).
    pub min: Option<Duration>,
    /// The ramp's longest length ([`Recovery::clamped`]).
    pub max: Option<Duration>,
}

impl RecoveryConfig {
    /// These overrides on `ramp`.
    #[must_use]
    pub fn apply(&self, ramp: Recovery) -> Recovery {
        let fraction = self.fraction.map_or(ramp.fraction().ppm(), ppm);
        Recovery::over_ppm(fraction).clamped(
            self.min.unwrap_or(ramp.min()),
            self.max.unwrap_or(ramp.max()),
        )
    }
}

/// The defaults a rule that was off starts from when a document turns it on.
const DEFAULT_FAILURE_RATE: FailureRate = FailureRate::above(5);
const DEFAULT_SLOW_CALLS: SlowCalls = SlowCalls::above(3);
const DEFAULT_RECOVERY: Recovery = Recovery::over_ppm(250_000);

/// Overrides of [`BreakerSettings`]: each key is a [`BreakerSettingsBuilder`] method.
///
/// ```toml
/// consecutive_failures = 3
/// break_duration = "10s"
/// failure_rate = { multiple = 4.0, floor = 0.1 }
/// slow_calls = false
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// [`BreakerSettingsBuilder::name`].
    pub name: Option<Name>,
    /// [`BreakerSettingsBuilder::consecutive_failures`].
    pub consecutive_failures: Option<u64>,
    /// [`BreakerSettingsBuilder::failure_rate`].
    pub failure_rate: Option<Switch<FailureRateConfig>>,
    /// [`BreakerSettingsBuilder::failure_ratio`], as a decimal.
    pub failure_ratio: Option<Switch<f64>>,
    /// [`BreakerSettingsBuilder::slow_calls`].
    pub slow_calls: Option<Switch<SlowCallsConfig>>,
    /// [`BreakerSettingsBuilder::slow_threshold`].
    pub slow_threshold: Option<Switch<Duration>>,
    /// [`BreakerSettingsBuilder::slow_ratio`], as a decimal.
    pub slow_ratio: Option<f64>,
    /// [`BreakerSettingsBuilder::minimum_calls`].
    pub minimum_calls: Option<u64>,
    /// [`BreakerSettingsBuilder::trip_window`].
    pub trip_window: Option<Duration>,
    /// [`BreakerSettingsBuilder::baseline_window`].
    pub baseline_window: Option<Switch<Duration>>,
    /// [`BreakerSettingsBuilder::break_duration`].
    pub break_duration: Option<Duration>,
    /// [`BreakerSettingsBuilder::max_break`].
    pub max_break: Option<Duration>,
    /// [`BreakerSettingsBuilder::jitter`].
    pub jitter: Option<bool>,
    /// [`BreakerSettingsBuilder::half_open_probes`].
    pub half_open_probes: Option<u64>,
    /// [`BreakerSettingsBuilder::probe_successes`].
    pub probe_successes: Option<u64>,
    /// [`BreakerSettingsBuilder::recovery`].
    pub recovery: Option<Switch<RecoveryConfig>>,
    /// [`BreakerSettingsBuilder::noise_bound`].
    pub noise_bound: Option<u64>,
    /// [`BreakerSettingsBuilder::learn`].
    pub learn: Option<bool>,
}

impl BreakerConfig {
    /// Sets every key given on `b`; its `build()` checks them.
    pub fn apply(&self, mut b: BreakerSettingsBuilder) -> BreakerSettingsBuilder {
        if let Some(n) = self.name {
            b = b.name(n);
        }
        if let Some(n) = self.consecutive_failures {
            b = b.consecutive_failures(count(n));
        }
        if let Some(s) = self.failure_rate {
            let rule = s
                .into_option()
                .map(|c| c.apply(b.current_failure_rate().unwrap_or(DEFAULT_FAILURE_RATE)));
            b = b.failure_rate(rule);
        }
        if let Some(s) = self.failure_ratio {
            b = b.failure_ratio(
                s.into_option()
                    .map(|x| crate::ratio::Ratio::from_ppm_const(ppm(x))),
            );
        }
        if let Some(s) = self.slow_calls {
            let rule = s
                .into_option()
                .map(|c| c.apply(b.current_slow_calls().unwrap_or(DEFAULT_SLOW_CALLS)));
            b = b.slow_calls(rule);
        }
        if let Some(s) = self.slow_threshold {
            b = b.slow_threshold(s.into_option());
        }
        if let Some(x) = self.slow_ratio {
            b = b.slow_ratio(crate::ratio::Ratio::from_ppm_const(ppm(x)));
        }
        if let Some(n) = self.minimum_calls {
            b = b.minimum_calls(count(n));
        }
        if let Some(d) = self.trip_window {
            b = b.trip_window(d);
        }
        if let Some(s) = self.baseline_window {
            b = b.baseline_window(s.into_option());
        }
        if let Some(d) = self.break_duration {
            b = b.break_duration(d);
        }
        if let Some(d) = self.max_break {
            b = b.max_break(d);
        }
        if let Some(on) = self.jitter {
            b = b.jitter(on);
        }
        if let Some(n) = self.half_open_probes {
            b = b.half_open_probes(count(n));
        }
        if let Some(n) = self.probe_successes {
            b = b.probe_successes(count(n));
        }
        if let Some(s) = self.recovery {
            let ramp = s
                .into_option()
                .map(|c| c.apply(b.current_recovery().unwrap_or(DEFAULT_RECOVERY)));
            b = b.recovery(ramp);
        }
        if let Some(n) = self.noise_bound {
            b = b.noise_bound(n);
        }
        if let Some(on) = self.learn {
            b = b.learn(on);
        }
        b
    }
}

/// Overrides of [`BudgetSettings`]: each key is a [`BudgetSettingsBuilder`] method.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// [`BudgetSettingsBuilder::name`].
    pub name: Option<Name>,
    /// [`BudgetSettingsBuilder::fraction`].
    pub fraction: Option<f64>,
    /// [`BudgetSettingsBuilder::floor_per_second`].
    pub floor_per_second: Option<f64>,
}

impl BudgetConfig {
    /// Sets every key given on `b`; its `build()` checks them.
    pub fn apply(&self, mut b: BudgetSettingsBuilder) -> BudgetSettingsBuilder {
        if let Some(n) = self.name {
            b = b.name(n);
        }
        if let Some(x) = self.fraction {
            b = b.fraction(x);
        }
        if let Some(x) = self.floor_per_second {
            b = b.floor_per_second(x);
        }
        b
    }
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

/// Overrides of a [`Backoff`]: each key is a [`BackoffBuilder`] method.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackoffConfig {
    /// [`BackoffBuilder::base`].
    pub base: Option<Duration>,
    /// [`BackoffBuilder::throttled_base`].
    pub throttled_base: Option<Duration>,
    /// [`BackoffBuilder::factor`], as a decimal.
    pub factor: Option<f64>,
    /// [`BackoffBuilder::cap`].
    pub cap: Option<Duration>,
    /// [`BackoffBuilder::jitter`].
    pub jitter: Option<JitterName>,
}

impl BackoffConfig {
    /// Sets every key given on `b`; its `build()` checks them.
    pub fn apply(&self, mut b: BackoffBuilder) -> BackoffBuilder {
        if let Some(d) = self.base {
            b = b.base(d);
        }
        if let Some(d) = self.throttled_base {
            b = b.throttled_base(d);
        }
        if let Some(x) = self.factor {
            b = b.factor(Multiple::from_milli(milli(x)));
        }
        if let Some(d) = self.cap {
            b = b.cap(d);
        }
        if let Some(j) = self.jitter {
            b = b.jitter(j.into());
        }
        b
    }
}

/// Overrides of [`CallSettings`]: each key is a [`CallSettingsBuilder`] method; `backoff` is
/// a table of [`BackoffConfig`] keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallConfig {
    /// [`CallSettingsBuilder::max_attempts`].
    pub max_attempts: Option<u64>,
    /// [`CallSettingsBuilder::deadline`].
    pub deadline: Option<Switch<Duration>>,
    /// [`CallSettingsBuilder::attempt_timeout`].
    pub attempt_timeout: Option<Switch<Duration>>,
    /// [`CallSettingsBuilder::measured_ceiling`].
    pub measured_ceiling: Option<bool>,
    /// [`CallSettingsBuilder::ceiling_floor`].
    pub ceiling_floor: Option<Duration>,
    /// [`CallSettingsBuilder::hedging`].
    pub hedging: Option<bool>,
    /// [`CallSettingsBuilder::backoff`], key by key.
    pub backoff: Option<BackoffConfig>,
}

impl CallConfig {
    /// Sets every key given on `b` but the backoff (see [`backoff`](Self::backoff)); its
    /// `build()` checks them.
    pub fn apply(&self, mut b: CallSettingsBuilder) -> CallSettingsBuilder {
        if let Some(n) = self.max_attempts {
            b = b.max_attempts(count(n));
        }
        if let Some(s) = self.deadline {
            b = b.deadline(s.into_option());
        }
        if let Some(s) = self.attempt_timeout {
            b = b.attempt_timeout(s.into_option());
        }
        if let Some(on) = self.measured_ceiling {
            b = b.measured_ceiling(on);
        }
        if let Some(d) = self.ceiling_floor {
            b = b.ceiling_floor(d);
        }
        if let Some(on) = self.hedging {
            b = b.hedging(on);
        }
        b
    }

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

/// Overrides of a bulkhead's settings ([`BulkheadSettings`]): `max_in_flight`, and a bounded
/// wait as `max_queue` with `max_wait` (both set by [`BulkheadSettingsBuilder::bounded_wait`];
/// a queue needs a wait).
///
/// [`BulkheadSettingsBuilder::bounded_wait`]: crate::limits::BulkheadSettingsBuilder::bounded_wait
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkheadConfig {
    /// The name (default: the policy's, in a policy section).
    pub name: Option<Name>,
    /// Calls admitted at once.
    pub max_in_flight: Option<u64>,
    /// Callers that may wait for a slot at once.
    pub max_queue: Option<u64>,
    /// The longest a caller waits for a slot.
    pub max_wait: Option<Duration>,
}

impl BulkheadConfig {
    /// These keys over `earlier`'s: a key given here wins.
    #[must_use]
    pub fn over(self, earlier: BulkheadConfig) -> BulkheadConfig {
        BulkheadConfig {
            name: self.name.or(earlier.name),
            max_in_flight: self.max_in_flight.or(earlier.max_in_flight),
            max_queue: self.max_queue.or(earlier.max_queue),
            max_wait: self.max_wait.or(earlier.max_wait),
        }
    }

    /// The settings of a bulkhead called `name` (unless these keys name it): the defaults
    /// with these keys, checked.
    pub fn build(&self, name: Name) -> Result<BulkheadSettings, SettingsError> {
        let mut b = BulkheadSettings::builder_named(self.name.unwrap_or(name));
        if let Some(n) = self.max_in_flight {
            b = b.max_in_flight(count(n));
        }
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

/// Overrides of a GCRA rate limiter's settings ([`RateLimitSettings`]): `rate` cells per
/// `period` (default 50 per minute), `burst` (default the rate) and `idle`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// The name (default: the policy's, in a policy section).
    pub name: Option<Name>,
    /// Cells per period.
    pub rate: Option<u64>,
    /// The period the rate is counted over.
    pub period: Option<Duration>,
    /// Cells that may be taken at once after a quiet spell.
    pub burst: Option<u64>,
    /// How long an unused key is kept (keyed limiters).
    pub idle: Option<Duration>,
}

impl RateLimitConfig {
    /// These keys over `earlier`'s: a key given here wins.
    #[must_use]
    pub fn over(self, earlier: RateLimitConfig) -> RateLimitConfig {
        RateLimitConfig {
            name: self.name.or(earlier.name),
            rate: self.rate.or(earlier.rate),
            period: self.period.or(earlier.period),
            burst: self.burst.or(earlier.burst),
            idle: self.idle.or(earlier.idle),
        }
    }

    /// The settings of a limiter called `name` (unless these keys name it): the defaults with
    /// these keys, checked.
    pub fn build(&self, name: Name) -> Result<RateLimitSettings, SettingsError> {
        let defaults = RateLimitSettings::defaults("limit");
        let mut b = RateLimitSettings::builder_named(self.name.unwrap_or(name)).rate(
            self.rate.map_or(defaults.cells(), count),
            self.period.unwrap_or(defaults.period()),
        );
        if let Some(n) = self.burst {
            b = b.burst(count(n));
        }
        if let Some(d) = self.idle {
            b = b.idle(d);
        }
        b.build()
    }
}

/// Overrides of a fixed-window limiter's settings ([`WindowLimitSettings`]): `events` per
/// `window`, then a `cooldown`; `idle` for keyed limiters.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowLimitConfig {
    /// The name (default: the policy's, in a policy section).
    pub name: Option<Name>,
    /// Events admitted per window.
    pub events: Option<u64>,
    /// The window.
    pub window: Option<Duration>,
    /// How long a full window refuses after it filled.
    pub cooldown: Option<Duration>,
    /// How long an unused key is kept (keyed limiters).
    pub idle: Option<Duration>,
}

impl WindowLimitConfig {
    /// These keys over `earlier`'s: a key given here wins.
    #[must_use]
    pub fn over(self, earlier: WindowLimitConfig) -> WindowLimitConfig {
        WindowLimitConfig {
            name: self.name.or(earlier.name),
            events: self.events.or(earlier.events),
            window: self.window.or(earlier.window),
            cooldown: self.cooldown.or(earlier.cooldown),
            idle: self.idle.or(earlier.idle),
        }
    }

    /// The settings of a limiter called `name` (unless these keys name it): the defaults with
    /// these keys, checked.
    pub fn build(&self, name: Name) -> Result<WindowLimitSettings, SettingsError> {
        let mut b = WindowLimitSettings::builder_named(self.name.unwrap_or(name));
        if let Some(n) = self.events {
            b = b.events(count(n));
        }
        if let Some(d) = self.window {
            b = b.window(d);
        }
        if let Some(d) = self.cooldown {
            b = b.cooldown(d);
        }
        if let Some(d) = self.idle {
            b = b.idle(d);
        }
        b.build()
    }
}

/// Overrides of a segmented sliding-window limiter's settings ([`SlidingWindowSettings`]):
/// `quota` calls per `window`, the window sliding in `segments`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlidingWindowConfig {
    /// The name (default: the policy's, in a policy section).
    pub name: Option<Name>,
    /// Calls admitted per window.
    pub quota: Option<u64>,
    /// The window.
    pub window: Option<Duration>,
    /// The segments the window slides in.
    pub segments: Option<u64>,
}

impl SlidingWindowConfig {
    /// The settings of a limiter called `name` (unless these keys name it): the defaults with
    /// these keys, checked.
    pub fn build(&self, name: Name) -> Result<SlidingWindowSettings, SettingsError> {
        let mut b = SlidingWindowSettings::builder_named(self.name.unwrap_or(name));
        if let Some(n) = self.quota {
            b = b.quota(count(n));
        }
        if let Some(d) = self.window {
            b = b.window(d);
        }
        if let Some(n) = self.segments {
            b = b.segments(count(n));
        }
        b.build()
    }
}

/// The settings of kept published quotas ([`QuotaSettings`]): `reserve` (a decimal share of
/// the published limit kept untouched) and `max_wait` (the longest a reading may keep a
/// caller waiting).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// The share of the limit kept untouched, as a decimal below 1.
    pub reserve: Option<f64>,
    /// The longest a reading may keep a caller waiting.
    pub max_wait: Option<Duration>,
}

impl QuotaConfig {
    /// The settings: the defaults with these keys, checked.
    pub fn build(&self) -> Result<QuotaSettings, SettingsError> {
        let reserve = match self.reserve {
            // NaN and negative shares are no share; 1 and above are refused by the settings.
            Some(x) if x.is_nan() || x < 0.0 => {
                return Err(SettingsError::new(Field::QuotaReserve, Bound::BelowOne))
            }
            Some(x) => crate::ratio::Ratio::from_ppm_const(ppm(x).min(1_000_000)),
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

/// Overrides of an adaptive concurrency limiter's settings ([`AdaptiveLimitSettings`]):
/// `min_limit` and `max_limit` (set together by its builder's `limits`), `initial_limit`,
/// `latency_tolerance` (a decimal multiple), `decrease` (a decimal ratio) and
/// `baseline_window`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveLimitConfig {
    /// The name (default: the policy's, in a policy section).
    pub name: Option<Name>,
    /// The lowest limit.
    pub min_limit: Option<u64>,
    /// The highest limit.
    pub max_limit: Option<u64>,
    /// The limit before the first round ends.
    pub initial_limit: Option<u64>,
    /// A round is slow when its fastest call took more than this times the baseline.
    pub latency_tolerance: Option<f64>,
    /// What a slow round multiplies the limit by.
    pub decrease: Option<f64>,
    /// How far back the baseline's latencies reach.
    pub baseline_window: Option<Duration>,
}

impl AdaptiveLimitConfig {
    /// These keys over `earlier`'s: a key given here wins.
    #[must_use]
    pub fn over(self, earlier: AdaptiveLimitConfig) -> AdaptiveLimitConfig {
        AdaptiveLimitConfig {
            name: self.name.or(earlier.name),
            min_limit: self.min_limit.or(earlier.min_limit),
            max_limit: self.max_limit.or(earlier.max_limit),
            initial_limit: self.initial_limit.or(earlier.initial_limit),
            latency_tolerance: self.latency_tolerance.or(earlier.latency_tolerance),
            decrease: self.decrease.or(earlier.decrease),
            baseline_window: self.baseline_window.or(earlier.baseline_window),
        }
    }

    /// The settings of a limiter called `name` (unless these keys name it): the defaults with
    /// these keys, checked.
    pub fn build(&self, name: Name) -> Result<AdaptiveLimitSettings, SettingsError> {
        let mut b = AdaptiveLimitSettings::builder_named(self.name.unwrap_or(name)).limits(
            self.min_limit
                .map_or(AdaptiveLimitSettings::DEFAULT_MIN_LIMIT, count),
            self.max_limit
                .map_or(AdaptiveLimitSettings::DEFAULT_MAX_LIMIT, count),
        );
        if let Some(n) = self.initial_limit {
            b = b.initial_limit(count(n));
        }
        if let Some(x) = self.latency_tolerance {
            b = b.latency_tolerance(Multiple::from_milli(milli(x)));
        }
        if let Some(x) = self.decrease {
            b = b.decrease(crate::ratio::Ratio::from_ppm_const(ppm(x)));
        }
        if let Some(d) = self.baseline_window {
            b = b.baseline_window(d);
        }
        b.build()
    }
}

/// Fault injection's settings ([`ChaosSettings`]): `faults` (the share of attempts failed),
/// `slowed` and `latency` (the share held back, and by how long: given together), `seed`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChaosConfig {
    /// The share of attempts failed, as a decimal.
    pub faults: Option<f64>,
    /// The share of attempts held back, as a decimal.
    pub slowed: Option<f64>,
    /// How long a slowed attempt is held back.
    pub latency: Option<Duration>,
    /// The seed the rolls are drawn from.
    pub seed: Option<u64>,
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
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// The preset this section starts from, where the document has presets.
    pub preset: Option<Name>,
    /// [`CallSettingsBuilder::max_attempts`].
    pub max_attempts: Option<u64>,
    /// [`CallSettingsBuilder::deadline`].
    pub deadline: Option<Switch<Duration>>,
    /// [`CallSettingsBuilder::attempt_timeout`].
    pub attempt_timeout: Option<Switch<Duration>>,
    /// [`CallSettingsBuilder::measured_ceiling`].
    pub measured_ceiling: Option<bool>,
    /// [`CallSettingsBuilder::ceiling_floor`].
    pub ceiling_floor: Option<Duration>,
    /// [`CallSettingsBuilder::hedging`].
    pub hedging: Option<bool>,
    /// Whether calls made while serving a caller's retry may retry (default `true`).
    pub retries_when_nested: Option<bool>,
    /// The backoff, key by key.
    pub backoff: Option<BackoffConfig>,
    /// The breaker's keys, or `false` for no breaker (default: a breaker with the defaults).
    pub breaker: Option<Switch<BreakerConfig>>,
    /// The budget's keys, or `false` for no budget (default: a budget with the defaults).
    pub budget: Option<Switch<BudgetConfig>>,
    /// A GCRA rate limiter's keys, or `false` for none (default none).
    pub rate_limit: Option<Switch<RateLimitConfig>>,
    /// A bulkhead's keys, or `false` for none (default none).
    pub bulkhead: Option<Switch<BulkheadConfig>>,
    /// An adaptive concurrency limiter's keys, or `false` for none (default none).
    pub adaptive_limit: Option<Switch<AdaptiveLimitConfig>>,
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
        CallConfig {
            max_attempts: self.max_attempts,
            deadline: self.deadline,
            attempt_timeout: self.attempt_timeout,
            measured_ceiling: self.measured_ceiling,
            ceiling_floor: self.ceiling_floor,
            hedging: self.hedging,
            backoff: self.backoff,
        }
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
