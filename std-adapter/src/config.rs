//! Named policies from a configuration document (feature `config`): TOML or JSON, presets
//! plus overrides, environment variables for single values, and a reload that keeps every
//! breaker's and budget's state.
//!
//! ```toml
//! # Every policy starts from the preset it names, or from `presets.default` if there is one.
//! [presets.default]
//! max_attempts = 3
//! deadline = "2s"
//! breaker = { consecutive_failures = 5, break_duration = "15s" }
//!
//! [policies.payments]
//! attempt_timeout = "500ms"
//! breaker = { consecutive_failures = 3 }
//! backoff = { base = "50ms", cap = "1s" }
//!
//! [policies.search]
//! hedging = true
//! budget = false          # no retry budget
//! ```
//!
//! Keys are the builders' method names: a section holds [`PolicyBuilder`]'s (`max_attempts`,
//! `deadline`, `attempt_timeout`, `measured_ceiling`, `ceiling_floor`, `hedging`,
//! `retries_when_nested`), a `backoff` table ([`BackoffConfig`]), a `breaker` table
//! ([`BreakerConfig`]), a `budget` table ([`BudgetConfig`]), and the limits in front of the
//! breaker, none by default: a `rate_limit` table ([`RateLimitConfig`]: `rate` per `period`,
//! `burst`), a `bulkhead` table ([`BulkheadConfig`]: `max_in_flight`, `max_queue`,
//! `max_wait`) and an `adaptive_limit` table ([`AdaptiveLimitConfig`]: `min_limit`,
//! `max_limit`, `initial_limit`, ...), each the policy's own; `false` turns an optional part
//! off (`breaker = false`, `deadline = false`). A policy's `preset` names the preset it
//! starts from. Durations are written for people (`"250ms"`, `"1.5s"`, `"1m"`).
//!
//! Every problem is reported at once, each with its path: a key that does not fit (an
//! unknown key, a wrong type: `policies.payments.max_attempt: unknown field ...`, up to 32 of
//! them) and every invalid value, with its bound
//! (`policies.payments.breaker.consecutive_failures: must be at least 1`). Nothing is built
//! from a document with a problem.
//!
//! ```
//! use stormguard_std::config::PolicyConfig;
//! let config = PolicyConfig::from_toml(r#"
//!     [policies.payments]
//!     max_attempts = 2
//!     breaker = { consecutive_failures = 3, break_duration = "10s" }
//! "#)?;
//! let policies = config.build()?;
//! let payments = policies.get("payments").unwrap();
//! assert_eq!(payments.settings().max_attempts(), 2);
//! assert_eq!(payments.breaker().unwrap().settings().consecutive_failures(), 3);
//!
//! let err = PolicyConfig::from_toml("[policies.payments]\nbreaker = { consecutive_failures = 0 }")
//!     .unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "policies.payments.breaker.consecutive_failures: must be at least 1"
//! );
//! # Ok::<(), stormguard_std::config::ConfigError>(())
//! ```
//!
//! # Environment variables
//! [`PolicyConfig::with_env`] sets single values from variables named
//! `{PREFIX}__{PATH}`, the path's segments upper-cased and joined by `__` (two underscores,
//! since keys hold one): `STORMGUARD__POLICIES__PAYMENTS__MAX_ATTEMPTS=4`,
//! `STORMGUARD__POLICIES__PAYMENTS__BREAKER__BREAK_DURATION=30s`. A policy or preset segment
//! matches a name in the document whose letters and digits are the same, any other character
//! read as `_` (`PAYMENTS_EU` is `payments-eu`); a name the document lacks is added in lower
//! case. A value reads as `true`/`false`, a number, or else text.
//!
//! # Reloading
//! [`Policies::reload`] checks a new document entirely, then swaps in every policy's new call
//! settings (attempts, deadline, timeouts, backoff, hedging), adds new policies, drops the
//! ones the document no longer names, and keeps each remaining policy's breaker and budget
//! (their state: open or closed, learned rates, tokens). A breaker's and a budget's settings
//! are fixed when they are built, so a reload that changes one of them, or turns hedging on
//! over a breaker that does not learn, changes nothing and returns an error naming each such
//! field (`... cannot change while running`): apply it by building anew. Policies handed out
//! before a reload keep the settings they had; [`Policies::get`] hands out the current ones.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Deserialize;
use serde_json::Value;
pub use stormguard_core::config::{
    key, AdaptiveLimitConfig, BackoffConfig, BreakerConfig, BudgetConfig, BulkheadConfig,
    CallConfig, ChaosConfig, PolicySection, QuotaConfig, RateLimitConfig, SlidingWindowConfig,
    Switch, WindowLimitConfig,
};
use stormguard_core::{
    Bound, BreakerSettings, BudgetSettings, CallSettings, Field, Name, Problems, SettingsError,
};

use crate::{AdaptiveLimit, Bulkhead, Limiter, Policy, PolicyBuilder};
use stormguard_core::limits::{AdaptiveLimitSettings, BulkheadSettings, RateLimitSettings};

pub use stormguard_core::config::{FailureRateConfig, JitterName, RecoveryConfig, SlowCallsConfig};

/// One problem in a configuration document: where, and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The dotted path of the key (`policies.payments.breaker.consecutive_failures`), or
    /// `.` for the document as a whole.
    pub path: String,
    /// What is wrong (`must be at least 1`).
    pub message: String,
    /// The setting and bound, when a builder refused a value.
    pub setting: Option<SettingsError>,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in a configuration document, one a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<ConfigProblem>,
}

impl ConfigError {
    /// The problems, in document order (policies and presets by name).
    pub fn problems(&self) -> &[ConfigProblem] {
        &self.problems
    }

    fn one(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            problems: vec![ConfigProblem {
                path: path.into(),
                message: message.into(),
                setting: None,
            }],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for p in &self.problems {
            write!(f, "{sep}{p}")?;
            sep = "\n";
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    presets: BTreeMap<String, PolicySection>,
    #[serde(default)]
    policies: BTreeMap<String, PolicySection>,
}

/// One policy's settings, every one checked.
#[derive(Clone, Debug, PartialEq)]
struct Resolved {
    name: Name,
    call: CallSettings,
    retries_when_nested: bool,
    breaker: Option<BreakerSettings>,
    budget: Option<BudgetSettings>,
    rate_limit: Option<RateLimitSettings>,
    bulkhead: Option<BulkheadSettings>,
    adaptive_limit: Option<AdaptiveLimitSettings>,
}

/// A configuration document, read and checked: every policy it names can be built.
#[derive(Clone, Debug)]
pub struct PolicyConfig {
    /// The document as read (before checking), for [`with_env`](Self::with_env).
    raw: Value,
    policies: BTreeMap<String, Resolved>,
}

/// How a bound reads after "must be": a field it refers to is named by its key.
fn must_be(bound: Bound) -> String {
    match bound {
        Bound::NotBelow(f) => format!("must be at least `{}`", key(f)),
        Bound::AtLeastTimes(n, f) => format!("must be at least {n} times `{}`", key(f)),
        Bound::DivisibleBy(f) => format!("must be divisible into whole `{}`", key(f)),
        other => format!("must be {other}"),
    }
}

fn push_problems(out: &mut Vec<ConfigProblem>, prefix: &str, problems: &Problems) {
    for p in problems {
        out.push(ConfigProblem {
            path: format!("{prefix}{}", key(p.field)),
            message: must_be(p.bound),
            setting: Some(*p),
        });
    }
    if problems.more() > 0 {
        out.push(ConfigProblem {
            path: prefix.trim_end_matches('.').to_string(),
            message: format!("and {} more problems", problems.more()),
            setting: None,
        });
    }
}

/// Resolves one policy (its preset's keys, then its own) into checked settings, or adds its
/// problems to `out`.
fn resolve(
    key: &str,
    section: &PolicySection,
    presets: &BTreeMap<String, PolicySection>,
    out: &mut Vec<ConfigProblem>,
) -> Option<Resolved> {
    let at = format!("policies.{key}.");
    let before = out.len();
    let name = match Name::try_from_str(key).and_then(|n| n.check().map(|()| n)) {
        Ok(n) => Some(n),
        Err(e) => {
            let unit = if e == stormguard_core::name::NameError::TooLong {
                " bytes"
            } else {
                ""
            };
            let e = SettingsError::name(e);
            out.push(ConfigProblem {
                path: format!("policies.{key}"),
                message: format!("the policy's name must be {}{unit}", e.bound),
                setting: Some(e),
            });
            None
        }
    };
    let preset = match &section.preset {
        Some(p) => match presets.get(p.as_str()) {
            Some(s) => Some(s),
            None => {
                out.push(ConfigProblem {
                    path: format!("{at}preset"),
                    message: format!("names no preset (`{p}`)"),
                    setting: None,
                });
                None
            }
        },
        None => presets.get("default"),
    };
    let layers: Vec<&PolicySection> = preset.into_iter().chain(Some(section)).collect();
    let name = name?;
    match PolicySection::resolve(name, &layers) {
        // A preset it names but the document lacks is already reported.
        Ok(_) if out.len() > before => None,
        Ok(parts) => Some(Resolved {
            name,
            call: parts.call,
            retries_when_nested: parts.retries_when_nested,
            breaker: parts.breaker,
            budget: parts.budget,
            rate_limit: parts.rate_limit,
            bulkhead: parts.bulkhead,
            adaptive_limit: parts.adaptive_limit,
        }),
        Err(p) => {
            for (part, problems) in p.parts() {
                push_problems(out, &format!("{at}{part}"), problems);
            }
            None
        }
    }
}

/// At most this many keys that do not fit are reported from one document: past it, a
/// document is more likely the wrong file than a file with mistakes.
const MAX_PARSE_PROBLEMS: usize = 32;

/// The document read from `value`, or every key that does not fit (an unknown key, a wrong
/// type), each with its path: serde stops at the first, so each is taken out of a copy of the
/// document in turn and the rest is read again. The problems are added to `out`; the document
/// returned is what is left (every key that fits), so its values can be checked too.
fn document(value: &Value, out: &mut Vec<ConfigProblem>) -> Option<Document> {
    let mut pruned: Option<Value> = None;
    loop {
        let current = pruned.as_ref().unwrap_or(value);
        let e = match serde_path_to_error::deserialize::<_, Document>(current) {
            Ok(doc) => return Some(doc),
            Err(e) => e,
        };
        let path = e.path().clone();
        out.push(ConfigProblem {
            path: path.to_string(),
            message: e.into_inner().to_string(),
            setting: None,
        });
        if out.len() >= MAX_PARSE_PROBLEMS {
            out.push(ConfigProblem {
                path: ".".into(),
                message: format!("stopped after {MAX_PARSE_PROBLEMS} keys that do not fit"),
                setting: None,
            });
            return None;
        }
        let next = pruned.get_or_insert_with(|| value.clone());
        if !remove_at(next, &path) {
            // A place that cannot be taken out (the document as a whole): nothing more to read.
            return None;
        }
    }
}

/// Takes the value at `path` out of `doc` (a key out of its table, an item out of its
/// list): `false` when there is no such place, or it is the whole document.
fn remove_at(doc: &mut Value, path: &serde_path_to_error::Path) -> bool {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut at = doc;
    for segment in parents {
        let next = match (segment, at) {
            (Segment::Map { key }, Value::Object(map)) => map.get_mut(key.as_str()),
            (Segment::Seq { index }, Value::Array(items)) => items.get_mut(*index),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return false,
        }
    }
    match (last, at) {
        (Segment::Map { key }, Value::Object(map)) => map.remove(key.as_str()).is_some(),
        (Segment::Seq { index }, Value::Array(items)) if *index < items.len() => {
            items.remove(*index);
            true
        }
        _ => false,
    }
}

impl PolicyConfig {
    /// Reads and checks a TOML document.
    ///
    /// TOML's `nan` and `inf` are refused where they stand (a JSON value cannot hold them, and
    /// read as one they would silently mean "unset").
    pub fn from_toml(text: &str) -> Result<PolicyConfig, ConfigError> {
        let doc: toml::Value = toml::from_str(text)
            .map_err(|e| ConfigError::one(".", format!("not a TOML document: {}", e.message())))?;
        let problems = non_finite_numbers(&doc);
        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        let value = serde_json::to_value(doc)
            .map_err(|e| ConfigError::one(".", format!("not a TOML document: {e}")))?;
        PolicyConfig::from_value(value)
    }

    /// Reads and checks a JSON document.
    pub fn from_json(text: &str) -> Result<PolicyConfig, ConfigError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ConfigError::one(".", format!("not a JSON document: {e}")))?;
        PolicyConfig::from_value(value)
    }

    /// Checks a document already read into a JSON value.
    pub fn from_value(raw: Value) -> Result<PolicyConfig, ConfigError> {
        let mut problems = Vec::new();
        let Some(doc) = document(&raw, &mut problems) else {
            return Err(ConfigError { problems });
        };
        for (key, section) in &doc.presets {
            if section.preset.is_some() {
                problems.push(ConfigProblem {
                    path: format!("presets.{key}.preset"),
                    message: "a preset cannot start from another preset".into(),
                    setting: None,
                });
            }
        }
        let mut policies = BTreeMap::new();
        for (key, section) in &doc.policies {
            if let Some(r) = resolve(key, section, &doc.presets, &mut problems) {
                policies.insert(key.clone(), r);
            }
        }
        if problems.is_empty() {
            Ok(PolicyConfig { raw, policies })
        } else {
            Err(ConfigError { problems })
        }
    }

    /// This document with single values set from the process's environment variables named
    /// `{prefix}__...` (see the [module docs](self)), checked again.
    pub fn with_env(self, prefix: &str) -> Result<PolicyConfig, ConfigError> {
        self.with_vars(
            prefix,
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// As [`with_env`](Self::with_env), from the given variables rather than the process's.
    ///
    /// ```
    /// use stormguard_std::config::PolicyConfig;
    /// let config = PolicyConfig::from_toml("[policies.payments-eu]\nmax_attempts = 2")?
    ///     .with_vars("APP", [
    ///         ("APP__POLICIES__PAYMENTS_EU__MAX_ATTEMPTS".to_string(), "4".to_string()),
    ///         ("APP__POLICIES__PAYMENTS_EU__DEADLINE".to_string(), "1.5s".to_string()),
    ///         ("OTHER".to_string(), "ignored".to_string()),
    ///     ])?;
    /// let p = config.build()?.get("payments-eu").unwrap();
    /// assert_eq!(p.settings().max_attempts(), 4);
    /// assert_eq!(p.settings().deadline(), Some(stormguard_std::Duration::from_millis(1500)));
    /// # Ok::<(), stormguard_std::config::ConfigError>(())
    /// ```
    pub fn with_vars(
        self,
        prefix: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<PolicyConfig, ConfigError> {
        let mut raw = self.raw;
        let lead = format!("{prefix}__");
        let mut vars: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(k, _)| k.starts_with(&lead))
            .collect();
        // The same document whatever order the environment lists its variables in.
        vars.sort();
        for (name, text) in vars {
            let path = name.get(lead.len()..).unwrap_or_default();
            set_path(&mut raw, path, &text).map_err(|m| ConfigError::one(name.clone(), m))?;
        }
        PolicyConfig::from_value(raw)
    }

    /// The names of the policies the document gives, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.policies.keys().map(String::as_str)
    }

    /// A builder for the policy `name` with its settings from the document, to which a clock,
    /// a listener, a limiter or a bulkhead can be added; `None` when the document does not
    /// name it.
    pub fn builder(&self, name: &str) -> Option<PolicyBuilder> {
        self.policies.get(name).map(builder_for)
    }

    /// Builds every policy the document names.
    pub fn build(&self) -> Result<Policies, ConfigError> {
        let map = self.build_map(&BTreeMap::new())?;
        Ok(Policies {
            current: ArcSwap::from_pointee(map),
        })
    }

    /// Every policy, keeping the breaker and budget of those in `old` (checked to be
    /// unchanged by the caller).
    fn build_map(
        &self,
        old: &BTreeMap<String, (Resolved, Policy)>,
    ) -> Result<BTreeMap<String, (Resolved, Policy)>, ConfigError> {
        let mut problems = Vec::new();
        let mut map = BTreeMap::new();
        for (key, r) in &self.policies {
            let mut b = builder_for(r);
            if let Some((_, before)) = old.get(key) {
                if let (Some(_), Some(handle)) = (&r.breaker, before.breaker()) {
                    b = b.breaker(handle.clone());
                }
                if let (Some(_), Some(handle)) = (&r.budget, before.budget()) {
                    b = b.budget(handle.clone());
                }
                // The limits keep their state too (cells, slots, the learned limit): a
                // reload reaches here only when their settings did not change.
                if let (Some(_), Some(handle)) = (&r.rate_limit, before.limiter()) {
                    b = b.rate_limit(handle.clone());
                }
                if let (Some(_), Some(handle)) = (&r.bulkhead, before.bulkhead()) {
                    b = b.bulkhead(handle.clone());
                }
                if let (Some(_), Some(handle)) = (&r.adaptive_limit, before.adaptive_limit()) {
                    b = b.adaptive_limit(handle.clone());
                }
            }
            match b.build() {
                Ok(p) => {
                    map.insert(key.clone(), (r.clone(), p));
                }
                Err(e) => problems.push(ConfigProblem {
                    path: format!("policies.{key}.{}", e.field),
                    message: match (e.field, e.bound) {
                        (Field::Learn, Bound::OnForHedging) => {
                            "hedging cannot be turned on while running over a breaker that \
                             does not learn (set `breaker.learn = true` and build anew)"
                                .into()
                        }
                        (_, bound) => format!("must be {bound}"),
                    },
                    setting: Some(e),
                }),
            }
        }
        if problems.is_empty() {
            Ok(map)
        } else {
            Err(ConfigError { problems })
        }
    }
}

fn builder_for(r: &Resolved) -> PolicyBuilder {
    let mut b = Policy::builder_named(r.name)
        .settings(r.call)
        .retries_when_nested(r.retries_when_nested);
    b = match r.breaker {
        Some(s) => b.breaker_settings(s),
        None => b.no_breaker(),
    };
    b = match r.budget {
        Some(s) => b.budget_settings(s),
        None => b.no_budget(),
    };
    if let Some(s) = r.rate_limit {
        b = b.rate_limit(Limiter::new(s));
    }
    if let Some(s) = r.bulkhead {
        b = b.bulkhead(Bulkhead::new(s));
    }
    if let Some(s) = r.adaptive_limit {
        b = b.adaptive_limit(AdaptiveLimit::new(s));
    }
    b
}

/// Sets the value at `path` (segments joined by `__`) in `raw` from `text`.
fn set_path(raw: &mut Value, path: &str, text: &str) -> Result<(), String> {
    let segments: Vec<&str> = path.split("__").collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err("an empty segment in the variable's path".into());
    }
    let mut at = raw;
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        if !at.is_object() {
            if at.is_null() {
                *at = Value::Object(Default::default());
            } else {
                return Err(format!("sets `{seg}` inside a value that is not a table"));
            }
        }
        let Value::Object(map) = at else {
            return Err("not a table".into());
        };
        // A name the document has, matched by its letters and digits; else the lower case.
        let folded = fold(seg);
        let key = map
            .keys()
            .find(|k| fold(k) == folded)
            .cloned()
            .unwrap_or_else(|| seg.to_ascii_lowercase());
        if i == last {
            map.insert(key, scalar(text));
            return Ok(());
        }
        at = map.entry(key).or_insert(Value::Null);
    }
    Ok(())
}

fn fold(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Every `nan` and `inf` in a TOML document, each a problem at its dotted path. Walked with a
/// stack of its own, so a deeply nested document cannot exhaust the thread's.
fn non_finite_numbers(doc: &toml::Value) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    let mut todo: Vec<(String, &toml::Value)> = vec![(String::new(), doc)];
    while let Some((path, value)) = todo.pop() {
        match value {
            toml::Value::Float(x) if !x.is_finite() => problems.push(ConfigProblem {
                path: if path.is_empty() { ".".into() } else { path },
                message: format!("must be a finite number, not {x}"),
                setting: None,
            }),
            toml::Value::Table(table) => todo.extend(table.iter().map(|(key, v)| {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                (path, v)
            })),
            toml::Value::Array(items) => todo.extend(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("{path}.{i}"), v)),
            ),
            _ => {}
        }
    }
    problems.sort_by(|a, b| a.path.cmp(&b.path));
    problems
}

fn scalar(text: &str) -> Value {
    match text {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => {
            if let Ok(n) = text.parse::<u64>() {
                Value::from(n)
            } else if let Ok(n) = text.parse::<i64>() {
                Value::from(n)
            } else if let Some(n) = text
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .and_then(serde_json::Number::from_f64)
            {
                Value::Number(n)
            } else {
                Value::String(text.to_string())
            }
        }
    }
}

/// The policies a document names, by name; [`reload`](Self::reload) swaps in a new document's
/// settings while keeping each breaker's and budget's state.
pub struct Policies {
    current: ArcSwap<BTreeMap<String, (Resolved, Policy)>>,
}

impl fmt::Debug for Policies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.current.load().keys()).finish()
    }
}

/// What a [`Policies::reload`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Policies whose settings changed (their breaker and budget kept).
    pub changed: Vec<String>,
    /// Policies the new document adds.
    pub added: Vec<String>,
    /// Policies the new document no longer names.
    pub removed: Vec<String>,
}

impl Policies {
    /// The policy `name` as currently configured (a clone: cheap, and sharing its breaker and
    /// budget); `None` when the document does not name it.
    pub fn get(&self, name: &str) -> Option<Policy> {
        self.current.load().get(name).map(|(_, p)| p.clone())
    }

    /// The names of the policies, in order.
    pub fn names(&self) -> Vec<String> {
        self.current.load().keys().cloned().collect()
    }

    /// Swaps in `config`'s settings (see the [module docs](self)): every policy the new
    /// document keeps keeps its breaker and budget, with their state. A change that cannot be
    /// made while running (a breaker's or budget's settings) changes nothing and is returned
    /// as an error naming every such field.
    ///
    /// ```
    /// use stormguard_std::config::PolicyConfig;
    /// let policies = PolicyConfig::from_toml("[policies.db]\nmax_attempts = 2")?.build()?;
    /// let breaker = policies.get("db").unwrap().breaker().unwrap().clone();
    /// let r = policies.reload(&PolicyConfig::from_toml("[policies.db]\nmax_attempts = 4")?)?;
    /// assert_eq!(r.changed, ["db"]);
    /// let db = policies.get("db").unwrap();
    /// assert_eq!(db.settings().max_attempts(), 4);
    /// assert!(db.breaker().unwrap().same_as(&breaker)); // same breaker, same state
    ///
    /// let e = policies
    ///     .reload(&PolicyConfig::from_toml("[policies.db]\nbreaker = { consecutive_failures = 9 }")?)
    ///     .unwrap_err();
    /// assert_eq!(
    ///     e.to_string(),
    ///     "policies.db.breaker.consecutive_failures: cannot change while running (5 to 9); build anew to apply"
    /// );
    /// # Ok::<(), stormguard_std::config::ConfigError>(())
    /// ```
    pub fn reload(&self, config: &PolicyConfig) -> Result<Reloaded, ConfigError> {
        let old = self.current.load_full();
        let mut problems = Vec::new();
        for (key, new) in &config.policies {
            if let Some((before, _)) = old.get(key) {
                if let (Some(a), Some(b)) = (&before.breaker, &new.breaker) {
                    for (field, was, now) in breaker_diff(a, b) {
                        problems.push(not_live(key, "breaker", field, was, now));
                    }
                }
                if let (Some(a), Some(b)) = (&before.budget, &new.budget) {
                    for (field, was, now) in budget_diff(a, b) {
                        problems.push(not_live(key, "budget", field, was, now));
                    }
                }
                // A limit added, removed or changed: its state (and whether other policies
                // share it) is fixed when it is built.
                limit_diff(
                    &mut problems,
                    key,
                    "rate_limit",
                    before.rate_limit,
                    new.rate_limit,
                );
                limit_diff(
                    &mut problems,
                    key,
                    "bulkhead",
                    before.bulkhead,
                    new.bulkhead,
                );
                limit_diff(
                    &mut problems,
                    key,
                    "adaptive_limit",
                    before.adaptive_limit,
                    new.adaptive_limit,
                );
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        let map = config.build_map(&old)?;
        let mut report = Reloaded::default();
        let old_keys: BTreeSet<&String> = old.keys().collect();
        for (key, (r, _)) in &map {
            match old.get(key) {
                None => report.added.push(key.clone()),
                Some((before, _)) if before != r => report.changed.push(key.clone()),
                Some(_) => {}
            }
        }
        report.removed = old_keys
            .into_iter()
            .filter(|k| !map.contains_key(*k))
            .cloned()
            .collect();
        self.current.store(Arc::new(map));
        Ok(report)
    }
}

/// A limit that differs between two documents, as a problem: limits cannot change live.
fn limit_diff<T: PartialEq + fmt::Display>(
    out: &mut Vec<ConfigProblem>,
    key: &str,
    part: &str,
    was: Option<T>,
    now: Option<T>,
) {
    if was != now {
        let show = |s: Option<T>| s.map_or_else(|| "none".to_string(), |s| format!("`{s}`"));
        out.push(ConfigProblem {
            path: format!("policies.{key}.{part}"),
            message: format!(
                "cannot change while running ({} to {}); build anew to apply",
                show(was),
                show(now)
            ),
            setting: None,
        });
    }
}

fn not_live(key: &str, part: &str, field: &str, was: String, now: String) -> ConfigProblem {
    ConfigProblem {
        path: format!("policies.{key}.{part}.{field}"),
        message: format!("cannot change while running ({was} to {now}); build anew to apply"),
        setting: None,
    }
}

type Diff = Vec<(&'static str, String, String)>;

fn diff<T: PartialEq + fmt::Debug>(out: &mut Diff, field: &'static str, a: T, b: T) {
    if a != b {
        out.push((field, show(&a), show(&b)));
    }
}

fn show<T: fmt::Debug>(v: &T) -> String {
    format!("{v:?}")
}

fn breaker_diff(a: &BreakerSettings, b: &BreakerSettings) -> Diff {
    let mut d = Vec::new();
    diff(
        &mut d,
        "consecutive_failures",
        a.consecutive_failures(),
        b.consecutive_failures(),
    );
    diff(&mut d, "failure_rate", a.failure_rate(), b.failure_rate());
    diff(
        &mut d,
        "failure_ratio",
        a.failure_ratio(),
        b.failure_ratio(),
    );
    diff(&mut d, "slow_calls", a.slow_calls(), b.slow_calls());
    diff(
        &mut d,
        "slow_threshold",
        a.slow_threshold(),
        b.slow_threshold(),
    );
    diff(&mut d, "slow_ratio", a.slow_ratio(), b.slow_ratio());
    diff(
        &mut d,
        "minimum_calls",
        a.minimum_calls(),
        b.minimum_calls(),
    );
    diff(&mut d, "trip_window", a.trip_window(), b.trip_window());
    diff(
        &mut d,
        "baseline_window",
        a.baseline_window(),
        b.baseline_window(),
    );
    diff(
        &mut d,
        "break_duration",
        a.break_duration(),
        b.break_duration(),
    );
    diff(&mut d, "max_break", a.max_break(), b.max_break());
    diff(&mut d, "jitter", a.jitter(), b.jitter());
    diff(
        &mut d,
        "half_open_probes",
        a.half_open_probes(),
        b.half_open_probes(),
    );
    diff(
        &mut d,
        "probe_successes",
        a.probe_successes(),
        b.probe_successes(),
    );
    diff(&mut d, "recovery", a.recovery(), b.recovery());
    diff(&mut d, "noise_bound", a.noise_bound(), b.noise_bound());
    diff(&mut d, "learn", a.learns(), b.learns());
    d
}

fn budget_diff(a: &BudgetSettings, b: &BudgetSettings) -> Diff {
    let mut d = Vec::new();
    diff(&mut d, "fraction", a.fraction(), b.fraction());
    diff(
        &mut d,
        "floor_per_second",
        a.floor_per_second_milli(),
        b.floor_per_second_milli(),
    );
    d
}
