//! Scenario files: describe your own dependency, fleet and policy in TOML and ask "what would
//! this configuration have done?".
//!
//! ```toml
//! name = "payments"
//! description = "our payments API through last Tuesday's brownout"
//! duration = "5m"
//! seed = 7
//! # Built-in strategies to compare with your own (optional).
//! strategies = ["retry-x3", "retry-x3+breaker+budget"]
//!
//! [load]
//! clients = 20          # processes in the fleet, each with its own breaker and budget
//! rate = 25             # calls per second per client (open loop, Poisson)
//! # arrivals = "bursty"  # or open loop in bursts: peak = 4 (x the mean), share = 0.1 (of
//! #                      #   the time), burst = "1s" (mean length); the mean stays `rate`
//! # arrivals = "polling" # or a loop that calls again as soon as a call returns (no `rate`)
//!
//! [dependency]
//! p50 = "20ms"
//! p99 = "200ms"
//! failure_rate = 0.001
//! capacity = 400        # calls served at once (optional)
//!
//! [[impairment]]
//! kind = "brownout"     # outage | brownout | error_spike | cold_recovery
//! at = "30s"
//! lasting = "1m"
//! slower = 8
//!
//! [[strategy]]
//! name = "ours"
//! attempts = 3
//! deadline = "10s"
//! attempt_timeout = "2s"
//! budget = { fraction = 0.1, floor = 3 }
//! breaker = { consecutive_failures = 5, recovery = 0.25 }
//!
//! [[strategy]]
//! name = "from-our-config"
//! # The policy exactly as the std loader reads a `[policies.NAME]` section (a breaker and a
//! # budget with the defaults unless turned off with `false`):
//! policy = { max_attempts = 3, deadline = "10s", breaker = { consecutive_failures = 5 } }
//! ```

use std::fmt;

use serde::Deserialize;
use stormguard_core::{
    limits::AdaptiveLimitSettings, limits::BulkheadSettings, limits::RateLimitSettings, Backoff,
    Bound, BreakerSettings, BudgetSettings, CallSettings, Duration, FailureRate, Field, Jitter,
    Multiple, Name, Ratio, Recovery, SettingsError, SlowCalls,
};

use stormguard_core::config::{key, PolicySection, Switch};

use crate::model::{Dependency, Impairment};
use crate::scenario::{Arrivals, Layer, Scenario, Strategy, DEPENDENCY};

/// The most calls per second a client may make (in a burst too): far beyond any real client, and
/// low enough that the simulator's nanosecond clock always moves between two arrivals.
const MAX_RATE: f64 = 1e6;

/// What is wrong with a scenario file, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The setting at fault (`dependency.p99`, `strategy[1].breaker.trip_window`), or empty
    /// for a syntax error.
    pub at: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.at.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.at, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(at: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        at: at.into(),
        message: message.into(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: String,
    #[serde(default)]
    description: String,
    duration: String,
    #[serde(default = "one")]
    seed: u64,
    #[serde(default)]
    strategies: Vec<String>,
    load: LoadFile,
    dependency: DependencyFile,
    #[serde(default)]
    impairment: Vec<ImpairmentFile>,
    #[serde(default)]
    strategy: Vec<StrategyFile>,
}

fn one() -> u64 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadFile {
    clients: u32,
    rate: Option<f64>,
    arrivals: Option<String>,
    think: Option<String>,
    peak: Option<f64>,
    share: Option<f64>,
    burst: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DependencyFile {
    p50: String,
    p99: String,
    #[serde(default)]
    failure_rate: f64,
    capacity: Option<f64>,
    fail_latency: Option<String>,
    #[serde(default)]
    thrash: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImpairmentFile {
    kind: String,
    at: String,
    lasting: Option<String>,
    slower: Option<f64>,
    rate: Option<f64>,
    over: Option<String>,
    from: Option<f64>,
    to: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StrategyFile {
    name: String,
    #[serde(default = "one_u32")]
    layers: u32,
    attempts: Option<u32>,
    deadline: Option<String>,
    attempt_timeout: Option<String>,
    backoff: Option<BackoffFile>,
    budget: Option<BudgetFile>,
    breaker: Option<BreakerFile>,
    rate_limit: Option<RateLimitFile>,
    bulkhead: Option<BulkheadFile>,
    adaptive: Option<AdaptiveFile>,
    /// Whether a layer below the top retries a call that is the layer above's retry (default
    /// `true`).
    retries_when_nested: Option<bool>,
    /// The policy in the std loader's format (a `[policies.NAME]` section's keys), in place of
    /// the keys above.
    policy: Option<PolicySection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitFile {
    per_second: u32,
    burst: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkheadFile {
    max_in_flight: u32,
    /// Not modelled: the simulator holds no queue of waiters (see [`Layer::bulkhead`]).
    max_queue: Option<toml::Value>,
    max_wait: Option<toml::Value>,
}

/// An adaptive concurrency limiter: the getters' names of `AdaptiveLimitSettings`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdaptiveFile {
    min_limit: Option<u32>,
    max_limit: Option<u32>,
    initial_limit: Option<u32>,
}

fn one_u32() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackoffFile {
    base: Option<String>,
    factor: Option<f64>,
    cap: Option<String>,
    jitter: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetFile {
    fraction: Option<f64>,
    floor: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakerFile {
    consecutive_failures: Option<u32>,
    /// The relative error-rate multiple, or `false` to turn the rule off.
    failure_rate: Option<toml::Value>,
    failure_ratio: Option<f64>,
    /// The relative slow-call multiple, or `false` to turn the rule off.
    slow_calls: Option<toml::Value>,
    slow_threshold: Option<String>,
    slow_ratio: Option<f64>,
    minimum_calls: Option<u32>,
    trip_window: Option<String>,
    #[serde(rename = "break")]
    break_duration: Option<String>,
    max_break: Option<String>,
    jitter: Option<bool>,
    half_open_probes: Option<u32>,
    probe_successes: Option<u32>,
    recovery: Option<f64>,
    recovery_min: Option<String>,
    recovery_max: Option<String>,
}

/// Parses a duration as the core reads one for configuration files ([`Duration::parse`]): a
/// number and a unit (`250ms`, `1.5s`, `2m`, `1h`), or several run together (`1m30s`).
pub fn parse_duration(at: &str, text: &str) -> Result<Duration, ConfigError> {
    Duration::parse(text.trim()).map_err(|e| {
        err(
            at,
            format!("invalid duration {text:?}: {e} (like 250ms, 1.5s, 2m or 1h)"),
        )
    })
}

fn opt_duration(at: &str, text: Option<&String>) -> Result<Option<Duration>, ConfigError> {
    text.map(|t| parse_duration(at, t)).transpose()
}

/// A deadline or timeout: a duration, or `"none"`.
fn bound(
    at: &str,
    text: Option<&String>,
    default: Option<Duration>,
) -> Result<Option<Duration>, ConfigError> {
    match text.map(String::as_str) {
        None => Ok(default),
        Some("none") => Ok(None),
        Some(t) => parse_duration(at, t).map(Some),
    }
}

fn fraction(at: &str, x: f64) -> Result<f64, ConfigError> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(err(at, format!("{x} is not a fraction in [0, 1]")))
    }
}

/// A settings error from the core, named by the file's keys under `section` (the core names the
/// builders' setters, which a scenario file spells differently in places).
fn core(section: &str, e: SettingsError) -> ConfigError {
    let bound = match e.bound {
        Bound::NotBelow(other) => format!("at least `{}`", file_key(other)),
        Bound::AtLeastTimes(n, other) => format!("at least {n} times `{}`", file_key(other)),
        Bound::DivisibleBy(other) => format!("divisible into whole `{}`", file_key(other)),
        bound => bound.to_string(),
    };
    err(
        format!("{section}.{}", file_key(e.field)),
        format!("must be {bound}"),
    )
}

/// The key a scenario file gives a setting.
fn file_key(field: Field) -> &'static str {
    match field {
        Field::MaxAttempts => "attempts",
        Field::BreakDuration => "break",
        Field::FailureMultiple => "failure_rate",
        Field::SlowMultiple => "slow_calls",
        Field::RecoveryFraction => "recovery",
        Field::BackoffBase => "base",
        Field::BackoffFactor => "factor",
        Field::BackoffCap => "cap",
        Field::RetryFraction => "fraction",
        Field::FloorRate => "floor",
        Field::Rate => "per_second",
        other => other.as_str(),
    }
}

/// Reads a scenario from TOML text. Errors name the setting at fault (or, for a syntax error,
/// the line and column).
pub fn parse(text: &str) -> Result<Scenario, ConfigError> {
    let file: File = toml::from_str(text).map_err(|e| err("", e.to_string()))?;
    let duration = parse_duration("duration", &file.duration)?;
    if duration.is_zero() {
        return Err(err("duration", "must be above zero"));
    }
    if file.load.clients == 0 {
        return Err(err("load.clients", "needs at least one client"));
    }
    let open_rate = || {
        let rate = file.load.rate.ok_or_else(|| {
            err(
                "load.rate",
                "open-loop arrivals need a rate (calls per second per client)",
            )
        })?;
        if !(rate > 0.0 && rate.is_finite()) {
            return Err(err("load.rate", format!("{rate} is not a positive rate")));
        }
        if rate > MAX_RATE {
            return Err(err(
                "load.rate",
                format!("{rate} is more than {MAX_RATE} calls per second per client"),
            ));
        }
        Ok(rate)
    };
    let kind = file.load.arrivals.as_deref().unwrap_or("poisson");
    let arrivals = match kind {
        "poisson" => Arrivals::Poisson { rate: open_rate()? },
        "bursty" => {
            let rate = open_rate()?;
            let share = file.load.share.unwrap_or(0.1);
            if !(0.001..=0.999).contains(&share) {
                return Err(err(
                    "load.share",
                    format!("{share} is not a share of the time from 0.001 to 0.999"),
                ));
            }
            let peak = file.load.peak.unwrap_or(4.0);
            if peak.is_nan() || peak <= 1.0 {
                return Err(err(
                    "load.peak",
                    format!("{peak} is not above 1: a burst is busier than the mean"),
                ));
            }
            if peak * share > 1.0 {
                return Err(err(
                    "load.peak",
                    format!(
                        "{peak} is more than 1 / share ({}): the bursts alone would carry more \
                         than the mean rate",
                        1.0 / share
                    ),
                ));
            }
            if rate * peak > MAX_RATE {
                return Err(err(
                    "load.peak",
                    format!(
                        "bursts of {} calls per second per client are more than {MAX_RATE}",
                        rate * peak
                    ),
                ));
            }
            let burst = opt_duration("load.burst", file.load.burst.as_ref())?
                .unwrap_or(Duration::from_secs(1));
            if burst < Duration::from_millis(1) {
                return Err(err("load.burst", "must be at least 1ms"));
            }
            Arrivals::Bursty {
                rate,
                peak,
                share,
                burst,
            }
        }
        "polling" => Arrivals::Polling {
            think: opt_duration("load.think", file.load.think.as_ref())?.unwrap_or(Duration::ZERO),
        },
        other => {
            return Err(err(
                "load.arrivals",
                format!(
                    "unknown arrivals {other:?}: expected \"poisson\", \"bursty\" or \"polling\""
                ),
            ))
        }
    };
    // A setting of another kind of arrivals is a mistake, not something to ignore.
    let given = [
        ("rate", file.load.rate.is_some(), kind != "polling"),
        ("peak", file.load.peak.is_some(), kind == "bursty"),
        ("share", file.load.share.is_some(), kind == "bursty"),
        ("burst", file.load.burst.is_some(), kind == "bursty"),
        ("think", file.load.think.is_some(), kind == "polling"),
    ];
    if let Some((field, ..)) = given.iter().find(|(_, set, taken)| *set && !taken) {
        return Err(err(
            format!("load.{field}"),
            format!("{kind:?} arrivals do not take it"),
        ));
    }
    let d = &file.dependency;
    let p50 = parse_duration("dependency.p50", &d.p50)?;
    let p99 = parse_duration("dependency.p99", &d.p99)?;
    if p50.is_zero() {
        return Err(err("dependency.p50", "must be above zero"));
    }
    if p99 <= p50 {
        return Err(err(
            "dependency.p99",
            format!("must be above p50 ({})", d.p50),
        ));
    }
    let mut dependency = Dependency::healthy(p50, p99);
    dependency.failure_rate = fraction("dependency.failure_rate", d.failure_rate)?;
    if let Some(c) = d.capacity {
        if !(c > 0.0 && c.is_finite()) {
            return Err(err(
                "dependency.capacity",
                format!("{c} is not a positive number of calls"),
            ));
        }
        dependency.capacity = Some(c);
    }
    if let Some(l) = opt_duration("dependency.fail_latency", d.fail_latency.as_ref())? {
        dependency.fail_latency = l;
    }
    if !(d.thrash >= 0.0 && d.thrash.is_finite()) {
        return Err(err("dependency.thrash", "must be 0 or more"));
    }
    dependency.thrash = d.thrash;
    for (i, imp) in file.impairment.iter().enumerate() {
        let at = |field: &str| format!("impairment[{i}].{field}");
        let start = parse_duration(&at("at"), &imp.at)?;
        let need = |v: Option<&String>, field: &str| -> Result<Duration, ConfigError> {
            let text =
                v.ok_or_else(|| err(at(field), format!("a {} needs `{field}`", imp.kind)))?;
            parse_duration(&at(field), text)
        };
        let parsed = match imp.kind.as_str() {
            "outage" => Impairment::Outage {
                at: start,
                lasting: need(imp.lasting.as_ref(), "lasting")?,
            },
            "brownout" => {
                let slower = imp
                    .slower
                    .ok_or_else(|| err(at("slower"), "a brownout needs `slower` (how many times slower)"))?;
                if !(slower > 1.0 && slower.is_finite()) {
                    return Err(err(at("slower"), format!("{slower} is not above 1")));
                }
                Impairment::Brownout {
                    at: start,
                    lasting: need(imp.lasting.as_ref(), "lasting")?,
                    slower,
                }
            }
            "error_spike" => Impairment::ErrorSpike {
                at: start,
                lasting: opt_duration(&at("lasting"), imp.lasting.as_ref())?,
                rate: fraction(
                    &at("rate"),
                    imp.rate
                        .ok_or_else(|| err(at("rate"), "an error_spike needs `rate` (its failure rate)"))?,
                )?,
            },
            "cold_recovery" => {
                if dependency.capacity.is_none() {
                    return Err(err(at("kind"), "a cold_recovery needs dependency.capacity"));
                }
                let from = imp.from.unwrap_or(0.05);
                if !(from > 0.0 && from <= 1.0) {
                    return Err(err(at("from"), format!("{from} is not a fraction in (0, 1]")));
                }
                Impairment::ColdRecovery {
                    at: start,
                    over: need(imp.over.as_ref(), "over")?,
                    from,
                }
            }
            "capacity_drop" => {
                if dependency.capacity.is_none() {
                    return Err(err(at("kind"), "a capacity_drop needs dependency.capacity"));
                }
                let to = imp
                    .to
                    .ok_or_else(|| err(at("to"), "a capacity_drop needs `to` (the capacity left, as a fraction)"))?;
                if !(to > 0.0 && to <= 1.0) {
                    return Err(err(at("to"), format!("{to} is not a fraction in (0, 1]")));
                }
                Impairment::CapacityDrop {
                    at: start,
                    lasting: need(imp.lasting.as_ref(), "lasting")?,
                    to,
                }
            }
            other => {
                return Err(err(
                    at("kind"),
                    format!("unknown impairment {other:?}: expected outage, brownout, error_spike, cold_recovery or capacity_drop"),
                ))
            }
        };
        dependency.impairments.push(parsed);
    }
    let mut strategies = Vec::new();
    for name in &file.strategies {
        match Strategy::builtin(name) {
            Some(s) => strategies.push(s.map_err(|e| err("strategies", e.to_string()))?),
            None => {
                return Err(err(
                    "strategies",
                    format!(
                        "unknown built-in strategy {name:?}: expected one of {}",
                        Strategy::BUILTIN.join(", ")
                    ),
                ))
            }
        }
    }
    for (i, s) in file.strategy.iter().enumerate() {
        strategies.push(strategy(&format!("strategy[{i}]"), s)?);
    }
    if strategies.is_empty() {
        return Err(err(
            "strategy",
            "no strategy to run: add [[strategy]] tables or a `strategies = [...]` list of built-ins",
        ));
    }
    let scenario = Scenario {
        name: file.name,
        description: file.description,
        seed: file.seed,
        duration,
        clients: file.load.clients,
        arrivals,
        dependency,
        strategies,
        healthy: None,
        pool: None,
    };
    scenario.check_size().map_err(|e| err("duration", e))?;
    Ok(scenario)
}

/// A strategy whose policy is given in the std loader's format: the same keys, defaults and
/// checks as a `[policies.NAME]` section (a breaker and a budget unless turned off with
/// `false`), every problem reported with its path.
fn policy_layer(at: &str, s: &StrategyFile, p: &PolicySection) -> Result<Layer, ConfigError> {
    let field = |f: &str| format!("{at}.{f}");
    let beside = [
        ("attempts", s.attempts.is_some()),
        ("deadline", s.deadline.is_some()),
        ("attempt_timeout", s.attempt_timeout.is_some()),
        ("backoff", s.backoff.is_some()),
        ("budget", s.budget.is_some()),
        ("breaker", s.breaker.is_some()),
        ("retries_when_nested", s.retries_when_nested.is_some()),
    ];
    if let Some((key, _)) = beside.iter().find(|(_, given)| *given) {
        return Err(err(
            field(key),
            "give it inside `policy` (in its format), not beside it",
        ));
    }
    if p.preset.is_some() {
        return Err(err(
            field("policy.preset"),
            "a scenario file has no presets",
        ));
    }
    if p.hedging == Some(true) && s.layers > 1 {
        return Err(err(
            field("policy.hedging"),
            "hedging is simulated in a strategy of one layer only (the attempts that reach the \
             dependency)",
        ));
    }
    let limits_beside = [
        (
            "rate_limit",
            s.rate_limit.is_some() && p.rate_limit.is_some(),
        ),
        ("bulkhead", s.bulkhead.is_some() && p.bulkhead.is_some()),
        (
            "adaptive",
            s.adaptive.is_some() && p.adaptive_limit.is_some(),
        ),
    ];
    if let Some((key, _)) = limits_beside.iter().find(|(_, both)| *both) {
        return Err(err(
            field(key),
            "given twice: beside `policy` and inside it; keep the one inside",
        ));
    }
    if let Some(Switch::On(b)) = p.bulkhead {
        if b.max_queue.is_some() || b.max_wait.is_some() {
            return Err(err(
                field("policy.bulkhead"),
                "the simulator models no queue of waiters (`max_queue`, `max_wait`): a full \
                 bulkhead refuses, and the call waits that out on its backoff",
            ));
        }
    }
    let parts = PolicySection::resolve(DEPENDENCY, &[p]).map_err(|problems| {
        let mut lines = Vec::new();
        for (part, list) in problems.parts() {
            for e in list {
                let bound = match e.bound {
                    Bound::NotBelow(other) => format!("at least `{}`", key(other)),
                    Bound::AtLeastTimes(n, other) => format!("at least {n} times `{}`", key(other)),
                    Bound::DivisibleBy(other) => format!("divisible into whole `{}`", key(other)),
                    bound => bound.to_string(),
                };
                lines.push((
                    field(&format!("policy.{part}{}", key(e.field))),
                    format!("must be {bound}"),
                ));
            }
            if list.more() > 0 {
                lines.push((
                    field("policy"),
                    format!("and {} more problems", list.more()),
                ));
            }
        }
        // The first problem is the error's place; the rest follow, one a line.
        let mut rest = String::new();
        for (path, message) in lines.iter().skip(1) {
            rest.push_str(&format!("\n{path}: {message}"));
        }
        match lines.first() {
            Some((path, message)) => err(path.clone(), format!("{message}{rest}")),
            None => err(field("policy"), "invalid"),
        }
    })?;
    Ok(Layer {
        call: parts.call,
        breaker: parts.breaker,
        budget: parts.budget,
        limiter: parts.rate_limit,
        sliding: None,
        bulkhead: parts.bulkhead,
        adaptive: parts.adaptive_limit,
        retries_when_nested: parts.retries_when_nested,
    })
}

fn strategy(at: &str, s: &StrategyFile) -> Result<Strategy, ConfigError> {
    let field = |f: &str| format!("{at}.{f}");
    if s.layers == 0 || s.layers > 5 {
        return Err(err(field("layers"), "must be between 1 and 5"));
    }
    if let Some(p) = &s.policy {
        let layer = policy_layer(at, s, p)?;
        let Limits {
            limiter,
            bulkhead,
            adaptive,
        } = limits(at, s)?;
        // The limits from inside the policy, else the ones beside it (never both).
        let layer = Layer {
            limiter: layer.limiter.or(limiter),
            bulkhead: layer.bulkhead.or(bulkhead),
            adaptive: layer.adaptive.or(adaptive),
            ..layer
        };
        return Ok(Strategy {
            name: strategy_name(s),
            layers: vec![layer; s.layers as usize],
        });
    }
    let mut backoff = Backoff::builder();
    if let Some(b) = &s.backoff {
        if let Some(base) = opt_duration(&field("backoff.base"), b.base.as_ref())? {
            backoff = backoff.base(base);
        }
        if let Some(cap) = opt_duration(&field("backoff.cap"), b.cap.as_ref())? {
            backoff = backoff.cap(cap);
        }
        if let Some(f) = b.factor {
            let m = Multiple::from_f64(f).ok_or_else(|| {
                err(
                    field("backoff.factor"),
                    format!("{f} is not a valid factor"),
                )
            })?;
            backoff = backoff.factor(m);
        }
        if let Some(j) = &b.jitter {
            backoff = backoff.jitter(match j.as_str() {
                "full" => Jitter::Full,
                "equal" => Jitter::Equal,
                "none" => Jitter::None,
                other => {
                    return Err(err(
                        field("backoff.jitter"),
                        format!("unknown jitter {other:?}: expected full, equal or none"),
                    ))
                }
            });
        }
    }
    let backoff = backoff.build().map_err(|e| core(&field("backoff"), e))?;
    let call = CallSettings::builder()
        .max_attempts(s.attempts.unwrap_or(3))
        .deadline(bound(
            &field("deadline"),
            s.deadline.as_ref(),
            CallSettings::DEFAULT.deadline(),
        )?)
        .attempt_timeout(bound(
            &field("attempt_timeout"),
            s.attempt_timeout.as_ref(),
            CallSettings::DEFAULT.attempt_timeout(),
        )?)
        .backoff(backoff)
        .build()
        .map_err(|e| core(at, e))?;
    let budget = match &s.budget {
        None => None,
        Some(b) => {
            let mut builder = BudgetSettings::builder_named(DEPENDENCY);
            if let Some(f) = b.fraction {
                builder = builder.fraction(f);
            }
            if let Some(f) = b.floor {
                builder = builder.floor_per_second(f);
            }
            Some(builder.build().map_err(|e| core(&field("budget"), e))?)
        }
    };
    let breaker = s
        .breaker
        .as_ref()
        .map(|b| breaker(&field("breaker"), b))
        .transpose()?;
    let Limits {
        limiter,
        bulkhead,
        adaptive,
    } = limits(at, s)?;
    let layer = Layer {
        call,
        breaker,
        budget,
        limiter,
        sliding: None,
        bulkhead,
        adaptive,
        retries_when_nested: s.retries_when_nested.unwrap_or(true),
    };
    Ok(Strategy {
        name: strategy_name(s),
        layers: vec![layer; s.layers as usize],
    })
}

fn strategy_name(s: &StrategyFile) -> String {
    Name::try_from_str(&s.name).map_or(s.name.clone(), |n| n.as_str().to_string())
}

/// A strategy's limits in front of its breaker.
struct Limits {
    limiter: Option<RateLimitSettings>,
    bulkhead: Option<BulkheadSettings>,
    adaptive: Option<AdaptiveLimitSettings>,
}

/// A strategy's rate limiter, bulkhead and adaptive limiter, in either format.
fn limits(at: &str, s: &StrategyFile) -> Result<Limits, ConfigError> {
    let field = |f: &str| format!("{at}.{f}");
    let limiter = s
        .rate_limit
        .as_ref()
        .map(|l| {
            let mut b = RateLimitSettings::builder_named(DEPENDENCY)
                .rate(l.per_second, Duration::from_secs(1));
            if let Some(burst) = l.burst {
                b = b.burst(burst);
            }
            b.build().map_err(|e| core(&field("rate_limit"), e))
        })
        .transpose()?;
    let bulkhead = s
        .bulkhead
        .as_ref()
        .map(|b| {
            if b.max_queue.is_some() || b.max_wait.is_some() {
                return Err(err(
                    field("bulkhead"),
                    "the simulator models no queue of waiters (`max_queue`, `max_wait`): a full \
                     bulkhead refuses, and the call waits that out on its backoff",
                ));
            }
            let builder =
                BulkheadSettings::builder_named(DEPENDENCY).max_in_flight(b.max_in_flight);
            builder.build().map_err(|e| core(&field("bulkhead"), e))
        })
        .transpose()?;
    let adaptive = s
        .adaptive
        .as_ref()
        .map(|a| {
            let defaults = AdaptiveLimitSettings::default();
            let mut builder = AdaptiveLimitSettings::builder_named(DEPENDENCY).limits(
                a.min_limit.unwrap_or(defaults.min_limit()),
                a.max_limit.unwrap_or(defaults.max_limit()),
            );
            if let Some(n) = a.initial_limit {
                builder = builder.initial_limit(n);
            }
            builder.build().map_err(|e| core(&field("adaptive"), e))
        })
        .transpose()?;
    Ok(Limits {
        limiter,
        bulkhead,
        adaptive,
    })
}

/// A rule's multiple, or `false` to turn it off.
fn multiple(at: &str, v: Option<&toml::Value>) -> Result<Option<Option<u32>>, ConfigError> {
    match v {
        None => Ok(None),
        Some(toml::Value::Boolean(false)) => Ok(Some(None)),
        // In thousandths; too large a value saturates, and the core's bound (4 million) refuses it.
        Some(toml::Value::Integer(i)) if *i > 1 => Ok(Some(Some(
            u32::try_from(*i).unwrap_or(u32::MAX).saturating_mul(1000),
        ))),
        Some(toml::Value::Float(f)) if *f > 1.0 && f.is_finite() => {
            Ok(Some(Some((f * 1000.0).round() as u32)))
        }
        Some(other) => Err(err(
            at,
            format!("{other} is not a multiple above 1 (or false to turn the rule off)"),
        )),
    }
}

fn breaker(at: &str, b: &BreakerFile) -> Result<BreakerSettings, ConfigError> {
    let field = |f: &str| format!("{at}.{f}");
    let mut s = BreakerSettings::builder_named(DEPENDENCY);
    if let Some(n) = b.consecutive_failures {
        s = s.consecutive_failures(n);
    }
    if let Some(m) = multiple(&field("failure_rate"), b.failure_rate.as_ref())? {
        s = s.failure_rate(m.map(FailureRate::above_milli));
    }
    if let Some(r) = b.failure_ratio {
        let ratio = Ratio::from_f64(fraction(&field("failure_ratio"), r)?)
            .ok_or_else(|| err(field("failure_ratio"), "not a ratio"))?;
        s = s.failure_ratio(Some(ratio));
    }
    if let Some(m) = multiple(&field("slow_calls"), b.slow_calls.as_ref())? {
        s = s.slow_calls(m.map(SlowCalls::above_milli));
    }
    if let Some(t) = opt_duration(&field("slow_threshold"), b.slow_threshold.as_ref())? {
        s = s.slow_threshold(Some(t));
    }
    if let Some(r) = b.slow_ratio {
        let ratio = Ratio::from_f64(fraction(&field("slow_ratio"), r)?)
            .ok_or_else(|| err(field("slow_ratio"), "not a ratio"))?;
        s = s.slow_ratio(ratio);
    }
    if let Some(n) = b.minimum_calls {
        s = s.minimum_calls(n);
    }
    if let Some(w) = opt_duration(&field("trip_window"), b.trip_window.as_ref())? {
        s = s.trip_window(w);
    }
    if let Some(d) = opt_duration(&field("break"), b.break_duration.as_ref())? {
        s = s.break_duration(d);
    }
    if let Some(d) = opt_duration(&field("max_break"), b.max_break.as_ref())? {
        s = s.max_break(d);
    }
    if let Some(j) = b.jitter {
        s = s.jitter(j);
    }
    if let Some(n) = b.half_open_probes {
        s = s.half_open_probes(n);
    }
    if let Some(n) = b.probe_successes {
        s = s.probe_successes(n);
    }
    if let Some(f) = b.recovery {
        let mut r = Recovery::over(f);
        let min = opt_duration(&field("recovery_min"), b.recovery_min.as_ref())?;
        let max = opt_duration(&field("recovery_max"), b.recovery_max.as_ref())?;
        if min.is_some() || max.is_some() {
            r = r.clamped(
                min.unwrap_or(Duration::from_secs(1)),
                max.unwrap_or(Duration::from_secs(30)),
            );
        }
        s = s.recovery(Some(r));
    }
    s.build().map_err(|e| core(at, e))
}

/// Reads a scenario file.
pub fn load(path: &std::path::Path) -> Result<Scenario, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| err(path.display().to_string(), format!("cannot read: {e}")))?;
    parse(&text).map_err(|e| ConfigError {
        at: if e.at.is_empty() {
            path.display().to_string()
        } else {
            format!("{}: {}", path.display(), e.at)
        },
        message: e.message,
    })
}
