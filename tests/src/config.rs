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
//! # pool = 64           # calls each client can have in progress at once (optional): one
//! #                     #   that finds them all taken fails at once
//!
//! [dependency]
//! p50 = "20ms"
//! p99 = "200ms"
//! failure_rate = 0.001
//! capacity = 400        # calls served at once, or "unbounded" (left out: a warning)
//! # shed_past = 3       # past 3x the capacity in flight, calls are shed; inf: a deep queue
//! # thrash = 0.1        # what overload costs it (see the model)
//!
//! # [healthy_dependency] # a second dependency the same clients call, through the same pool
//! # p50 = "10ms"
//! # p99 = "50ms"
//! # capacity = "unbounded"
//! # share = 0.5         # of each client's calls
//!
//! [[impairment]]
//! kind = "brownout"     # outage | brownout | error_spike | cold_recovery | capacity_drop | hang
//! at = "30s"
//! lasting = "1m"
//! slower = 8
//!
//! # A strategy's policy is written as stormguard-std's configuration files write a
//! # `[policies.NAME]` section: the same keys, defaults and checks, so a breaker and a budget
//! # are on unless turned off with `false` (a policy that leaves either out runs with the
//! # default one, and `storm` prints a warning saying so).
//! [[strategy]]
//! name = "ours"
//! policy = { max_attempts = 3, deadline = "10s", attempt_timeout = "2s", breaker = { consecutive_failures = 5 }, budget = {} }
//!
//! [[strategy]]
//! name = "naive"
//! policy = { max_attempts = 4, breaker = false, budget = false }
//! ```

use std::fmt;

use serde::Deserialize;
use stormguard_core::{Bound, Duration, Name};

use stormguard_core::config::{key, PolicySection, Switch};

use crate::model::{Dependency, Impairment};
use crate::scenario::{Arrivals, HealthyDependency, Layer, Scenario, Strategy, DEPENDENCY};

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
    healthy_dependency: Option<HealthyFile>,
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
    pool: Option<u32>,
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
    /// Calls served at once, or `"unbounded"`.
    capacity: Option<toml::Value>,
    shed_past: Option<f64>,
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
    after: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StrategyFile {
    name: String,
    #[serde(default = "one_u32")]
    layers: u32,
    /// The policy in the format of stormguard-std's configuration files (a `[policies.NAME]`
    /// section's keys, defaults and checks); none is the default policy.
    #[serde(default)]
    policy: PolicySection,
    /// The keys of the older, shorter spelling, whose defaults were the opposite of the
    /// configuration files' (no breaker or budget unless named): each is refused, naming the
    /// key to write in `policy` instead.
    attempts: Option<toml::Value>,
    deadline: Option<toml::Value>,
    attempt_timeout: Option<toml::Value>,
    backoff: Option<toml::Value>,
    budget: Option<toml::Value>,
    breaker: Option<toml::Value>,
    rate_limit: Option<toml::Value>,
    bulkhead: Option<toml::Value>,
    adaptive: Option<toml::Value>,
    retries_when_nested: Option<toml::Value>,
}

fn one_u32() -> u32 {
    1
}

/// The second, healthy dependency: its latency, failures and capacity as the first's, and the
/// share of the calls it takes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthyFile {
    p50: String,
    p99: String,
    #[serde(default)]
    failure_rate: f64,
    capacity: Option<toml::Value>,
    shed_past: Option<f64>,
    fail_latency: Option<String>,
    #[serde(default)]
    thrash: f64,
    share: f64,
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

fn fraction(at: &str, x: f64) -> Result<f64, ConfigError> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(err(at, format!("{x} is not a fraction in [0, 1]")))
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
    let mut warnings = Vec::new();
    let d = &file.dependency;
    let mut dependency = read_dependency(
        "dependency",
        DependencyFields {
            p50: &d.p50,
            p99: &d.p99,
            failure_rate: d.failure_rate,
            capacity: d.capacity.as_ref(),
            shed_past: d.shed_past,
            fail_latency: d.fail_latency.as_ref(),
            thrash: d.thrash,
        },
        &mut warnings,
    )?;
    let healthy = file
        .healthy_dependency
        .as_ref()
        .map(|h| {
            if !(h.share > 0.0 && h.share < 1.0) {
                return Err(err(
                    "healthy_dependency.share",
                    format!("{} is not a share of the calls in (0, 1)", h.share),
                ));
            }
            let dependency = read_dependency(
                "healthy_dependency",
                DependencyFields {
                    p50: &h.p50,
                    p99: &h.p99,
                    failure_rate: h.failure_rate,
                    capacity: h.capacity.as_ref(),
                    shed_past: h.shed_past,
                    fail_latency: h.fail_latency.as_ref(),
                    thrash: h.thrash,
                },
                &mut warnings,
            )?;
            Ok(HealthyDependency {
                dependency,
                share: h.share,
            })
        })
        .transpose()?;
    if file.load.pool == Some(0) {
        return Err(err(
            "load.pool",
            "a client's pool needs at least one call (leave it out for no bound)",
        ));
    }
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
            "hang" => Impairment::Hang {
                at: start,
                lasting: need(imp.lasting.as_ref(), "lasting")?,
                after: need(imp.after.as_ref(), "after")?,
            },
            other => {
                return Err(err(
                    at("kind"),
                    format!("unknown impairment {other:?}: expected outage, brownout, error_spike, cold_recovery, capacity_drop or hang"),
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
        let (strategy, notes) = strategy(&format!("strategy[{i}]"), s)?;
        strategies.push(strategy);
        warnings.extend(notes);
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
        healthy,
        pool: file.load.pool,
        warnings,
    };
    scenario.check_size().map_err(|e| err("duration", e))?;
    Ok(scenario)
}

/// A dependency's keys, as the file gives them (the first dependency's or the healthy one's).
struct DependencyFields<'a> {
    p50: &'a str,
    p99: &'a str,
    failure_rate: f64,
    capacity: Option<&'a toml::Value>,
    shed_past: Option<f64>,
    fail_latency: Option<&'a String>,
    thrash: f64,
}

/// Reads a dependency's keys under `section`. A capacity left out is unbounded, and the figures
/// hinge on it (an unbounded dependency serves any load at its normal latency, so retries and
/// queues cost it nothing): it is noted in `warnings` unless the file says `"unbounded"`.
fn read_dependency(
    section: &str,
    d: DependencyFields<'_>,
    warnings: &mut Vec<String>,
) -> Result<Dependency, ConfigError> {
    let at = |field: &str| format!("{section}.{field}");
    let p50 = parse_duration(&at("p50"), d.p50)?;
    let p99 = parse_duration(&at("p99"), d.p99)?;
    if p50.is_zero() {
        return Err(err(at("p50"), "must be above zero"));
    }
    if p99 <= p50 {
        return Err(err(at("p99"), format!("must be above p50 ({})", d.p50)));
    }
    let mut dependency = Dependency::healthy(p50, p99);
    dependency.failure_rate = fraction(&at("failure_rate"), d.failure_rate)?;
    match d.capacity {
        None => warnings.push(format!(
            "{} is not set, so the dependency serves any load at its normal latency: retries, \
             queues and overload cost it nothing, and the figures hinge on that. Set it (calls \
             served at once) or write `capacity = \"unbounded\"` to say so",
            at("capacity")
        )),
        Some(toml::Value::String(s)) if s == "unbounded" => {}
        Some(v) => {
            let c = match v {
                toml::Value::Integer(i) => *i as f64,
                toml::Value::Float(f) => *f,
                other => {
                    return Err(err(
                        at("capacity"),
                        format!("{other} is not a number of calls or \"unbounded\""),
                    ))
                }
            };
            if !(c > 0.0 && c.is_finite()) {
                return Err(err(
                    at("capacity"),
                    format!("{c} is not a positive number of calls"),
                ));
            }
            dependency.capacity = Some(c);
        }
    }
    if let Some(times) = d.shed_past {
        if times.is_nan() || times < 1.0 {
            return Err(err(
                at("shed_past"),
                format!("{times} is not a multiple of the capacity of at least 1 (inf: never)"),
            ));
        }
        if dependency.capacity.is_none() {
            return Err(err(
                at("shed_past"),
                format!(
                    "sheds past a multiple of {}, which is not a number",
                    at("capacity")
                ),
            ));
        }
        dependency.shed_past = times;
    }
    if let Some(l) = opt_duration(&at("fail_latency"), d.fail_latency)? {
        dependency.fail_latency = l;
    }
    if !(d.thrash >= 0.0 && d.thrash.is_finite()) {
        return Err(err(at("thrash"), "must be 0 or more"));
    }
    dependency.thrash = d.thrash;
    Ok(dependency)
}

/// The keys of the older, shorter spelling of a strategy, and the key each is in `policy`.
const OLD_KEYS: [(&str, &str); 10] = [
    ("attempts", "max_attempts"),
    ("deadline", "deadline"),
    ("attempt_timeout", "attempt_timeout"),
    ("backoff", "backoff"),
    ("budget", "budget"),
    ("breaker", "breaker"),
    ("rate_limit", "rate_limit"),
    ("bulkhead", "bulkhead"),
    ("adaptive", "adaptive_limit"),
    ("retries_when_nested", "retries_when_nested"),
];

/// A strategy: its policy in the format of stormguard-std's configuration files (the same
/// keys, defaults and checks as a `[policies.NAME]` section, so a breaker and a budget unless
/// turned off with `false`), every problem reported with its path; and a note for each of the
/// breaker and the budget the policy has without naming them.
fn strategy(at: &str, s: &StrategyFile) -> Result<(Strategy, Vec<String>), ConfigError> {
    let field = |f: &str| format!("{at}.{f}");
    let old = [
        s.attempts.is_some(),
        s.deadline.is_some(),
        s.attempt_timeout.is_some(),
        s.backoff.is_some(),
        s.budget.is_some(),
        s.breaker.is_some(),
        s.rate_limit.is_some(),
        s.bulkhead.is_some(),
        s.adaptive.is_some(),
        s.retries_when_nested.is_some(),
    ];
    if let Some(((key, instead), _)) = OLD_KEYS.iter().zip(old).find(|(_, given)| *given) {
        return Err(err(
            field(key),
            format!(
                "a strategy's policy is written in `policy`, in the format of stormguard-std's \
                 configuration files (`policy = {{ {instead} = ... }}`), where a breaker and a \
                 budget are on unless turned off with `false`"
            ),
        ));
    }
    if s.layers == 0 || s.layers > 5 {
        return Err(err(field("layers"), "must be between 1 and 5"));
    }
    let p = &s.policy;
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
    let name = strategy_name(s);
    let mut notes = Vec::new();
    for (part, named) in [
        ("breaker", p.breaker.is_some()),
        ("budget", p.budget.is_some()),
    ] {
        if !named {
            notes.push(format!(
                "{at} ({name:?}): its policy names no `{part}`, so it runs with the default one, as \
                 stormguard-std would; write `{part} = false` for none, or `{part} = {{}}` to \
                 say so"
            ));
        }
    }
    let layer = Layer::from_policy(parts);
    Ok((
        Strategy {
            name,
            layers: vec![layer; s.layers as usize],
        },
        notes,
    ))
}

fn strategy_name(s: &StrategyFile) -> String {
    Name::try_from_str(&s.name).map_or(s.name.clone(), |n| n.as_str().to_string())
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
