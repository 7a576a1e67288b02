//! Counters a metrics exporter can read, under stable names.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `stormguard_calls_total` | counter | `breaker`, `result` | calls ended, by [`Ended::as_str`] (`succeeded`, `failed`, `timed_out`, `rejected`, `deadline_exceeded`, `cancelled`, `cached`, `drained`) |
//! | `stormguard_attempts_total` | counter | `breaker` | attempts started |
//! | `stormguard_retries_total` | counter | `breaker` | retries scheduled (the core's `Retry` events) |
//! | `stormguard_hedges_total` | counter | `breaker` | hedged attempts launched (the core's `Hedged` events) |
//! | `stormguard_nested_retries_total` | counter | `breaker` | requests received that were a caller's retry (the core's `NestedRetry` events, from [`NestedRetryLayer`](crate::tower::NestedRetryLayer)) |
//! | `stormguard_restarts_total` | counter | `breaker` | streams restarted from their checkpoint (the core's `Restarted` events) |
//! | `stormguard_rejections_total` | counter | `breaker`, `reason` | refusals, by [`RefusalReason::as_str`] |
//! | `stormguard_state_changes_total` | counter | `breaker`, `to` | breaker transitions, by the [`State::as_str`] entered |
//! | `stormguard_breaker_state` | gauge | `breaker`, `state` | 1 for the current state, 0 for the others |
//! | `stormguard_budget_utilization` | gauge | `budget` | 0 (full) to 1 (empty) |
//! | `stormguard_adaptive_limit` | gauge | `limiter` | the adaptive concurrency limiter's current limit |
//! | `stormguard_adaptive_baseline_seconds` | gauge | `limiter` | its latency baseline (the learned p10), once it has one |
//!
//! Counting is a relaxed `fetch_add` on a counter of the policy's own: no lock, no allocation.
//!
//! With the feature `metrics`, [`MetricsFacade`] reports the same through the `metrics` crate's
//! facade, to whatever exporter the application installs, and adds histograms (in seconds):
//!
//! | name | labels | what |
//! |---|---|---|
//! | `stormguard_call_duration_seconds` | `breaker`, `result` | each call, from its start to its end, rejection pauses included |
//! | `stormguard_attempt_duration_seconds` | `breaker`, `outcome` | each attempt that ran, by [`Outcome::as_str`](stormguard_core::Outcome::as_str) |
//! | `stormguard_slot_wait_seconds` | `breaker`, `entered` | each wait for a bulkhead slot (`true`: entered, `false`: refused) |
//! | `stormguard_lease_seconds` | `breaker` | each attempt's hold on a bulkhead or adaptive limiter slot |
//!
//! Its gauges come from a health report, where `stormguard_breaker_state` also carries a
//! `key` label for each key (host) of a keyed table.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use stormguard_core::{Event, Name, RefusalReason, State};

use crate::events::{Ended, Listener};
use crate::{AdaptiveLimit, Breaker, Budget};

#[cfg(feature = "metrics")]
mod facade;
#[cfg(feature = "metrics")]
pub use facade::MetricsFacade;

/// Every metric's name, kind and help text (the exposition's `# HELP`).
const CATALOGUE: [(&str, &str, &str); 16] = [
    (
        "stormguard_calls_total",
        "counter",
        "Calls ended, by result.",
    ),
    ("stormguard_attempts_total", "counter", "Attempts started."),
    ("stormguard_retries_total", "counter", "Retries scheduled."),
    (
        "stormguard_hedges_total",
        "counter",
        "Hedged attempts launched.",
    ),
    (
        "stormguard_nested_retries_total",
        "counter",
        "Requests received that were a caller's retry.",
    ),
    (
        "stormguard_restarts_total",
        "counter",
        "Streams restarted from their checkpoint.",
    ),
    (
        "stormguard_rejections_total",
        "counter",
        "Calls and attempts refused, by reason.",
    ),
    (
        "stormguard_state_changes_total",
        "counter",
        "Breaker transitions, by the state entered.",
    ),
    (
        "stormguard_breaker_state",
        "gauge",
        "1 for the breaker's current state, 0 for the others.",
    ),
    (
        "stormguard_budget_utilization",
        "gauge",
        "Retry budget spent: 0 full, 1 empty.",
    ),
    (
        "stormguard_adaptive_limit",
        "gauge",
        "The adaptive concurrency limiter's current limit.",
    ),
    (
        "stormguard_adaptive_baseline_seconds",
        "gauge",
        "The adaptive limiter's latency baseline (the learned p10).",
    ),
    (
        "stormguard_call_duration_seconds",
        "histogram",
        "Call durations, rejection pauses included, by result.",
    ),
    (
        "stormguard_attempt_duration_seconds",
        "histogram",
        "Durations of the attempts that ran, by outcome.",
    ),
    (
        "stormguard_slot_wait_seconds",
        "histogram",
        "Waits for a bulkhead slot, by whether it was entered.",
    ),
    (
        "stormguard_lease_seconds",
        "histogram",
        "How long each attempt held its bulkhead or adaptive limiter slot.",
    ),
];

/// The help text of `name`, from [`CATALOGUE`].
fn help(name: &str) -> &'static str {
    CATALOGUE
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or("", |(_, _, help)| help)
}

const RESULTS: [&str; 8] = [
    "succeeded",
    "failed",
    "timed_out",
    "rejected",
    "deadline_exceeded",
    "cancelled",
    "cached",
    "drained",
];

const REASONS: [&str; 12] = [
    "breaker_open",
    "half_open_full",
    "ramp_shedding",
    "isolated",
    "budget_exhausted",
    "rate_limited",
    "bulkhead_full",
    "keyed_full",
    "shed",
    "concurrency_limited",
    "quota_reserve",
    "other",
];

const STATES: [&str; 5] = ["closed", "open", "half_open", "recovering", "isolated"];

fn result_index(ended: Ended) -> usize {
    match ended {
        Ended::Succeeded => 0,
        Ended::Failed => 1,
        Ended::TimedOut => 2,
        Ended::Rejected(_) => 3,
        Ended::DeadlineExceeded => 4,
        Ended::Cancelled => 5,
        Ended::Cached => 6,
        Ended::Drained => 7,
    }
}

fn reason_index(reason: RefusalReason) -> usize {
    match reason {
        RefusalReason::BreakerOpen => 0,
        RefusalReason::HalfOpenFull => 1,
        RefusalReason::RampShedding => 2,
        RefusalReason::Isolated => 3,
        RefusalReason::BudgetExhausted => 4,
        RefusalReason::RateLimited => 5,
        RefusalReason::BulkheadFull => 6,
        RefusalReason::KeyedFull => 7,
        RefusalReason::Shed => 8,
        RefusalReason::ConcurrencyLimited => 9,
        RefusalReason::QuotaReserve => 10,
        // A reason added to the core since: counted, under "other".
        _ => 11,
    }
}

fn state_index(state: State) -> usize {
    match state {
        State::Closed => 0,
        State::Open => 1,
        State::HalfOpen => 2,
        State::Recovering => 3,
        State::Isolated => 4,
    }
}

#[derive(Debug, Default)]
struct Counters {
    calls: [AtomicU64; 8],
    attempts: AtomicU64,
    events: EventCounters<AtomicU64>,
}

/// The counters the core's events add to, wherever they live (the atomics of [`Metrics`], the
/// facade's handles), with the one rule that says which counter an event adds one to.
#[derive(Debug, Default)]
struct EventCounters<C> {
    retries: C,
    hedges: C,
    nested_retries: C,
    restarts: C,
    /// By [`REASONS`].
    rejections: [C; REASONS.len()],
    /// By [`STATES`].
    state_changes: [C; STATES.len()],
}

impl<C> EventCounters<C> {
    /// The counter `event` adds one to, if it is counted.
    fn counter_for(&self, event: &Event<'_>) -> Option<&C> {
        match event {
            Event::Rejected { reason, .. } => self.rejections.get(reason_index(*reason)),
            Event::StateChanged { to, .. } => self.state_changes.get(state_index(*to)),
            Event::Retry { .. } => Some(&self.retries),
            Event::Hedged { .. } => Some(&self.hedges),
            Event::NestedRetry { .. } => Some(&self.nested_retries),
            Event::Restarted { .. } => Some(&self.restarts),
            _ => None,
        }
    }
}

fn bump(counter: Option<&AtomicU64>) {
    if let Some(c) = counter {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct Inner {
    label: String,
    counters: Counters,
    breaker: Option<Breaker>,
    budget: Option<Budget>,
    adaptive: Option<AdaptiveLimit>,
}

/// A policy's counters: a [`Listener`] that counts calls, attempts, retries, hedges, rejections by
/// reason and state changes, and reads the breaker's state and the budget's utilization when
/// exported. Cheap to clone (one `Arc`); give one clone to the policy and keep one to export.
///
/// ```
/// use stormguard_std::{Metrics, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), stormguard_std::SettingsError> {
/// let policy = Policy::builder("inventory").build()?;
/// let metrics = Metrics::for_policy(&policy);
/// let policy = policy.with_listener(metrics.clone());
///
/// let _ = policy.call(|_| async { Ok::<_, ()>(7) }).await;
/// let snapshot = metrics.snapshot();
/// assert_eq!((snapshot.calls, snapshot.attempts), (1, 1));
/// assert!(metrics.to_prometheus().contains(
///     "stormguard_calls_total{breaker=\"inventory\",result=\"succeeded\"} 1"
/// ));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Metrics {
    /// Counters labelled `breaker="name"`, with no breaker state or budget to read.
    ///
    /// ```
    /// assert_eq!(stormguard_std::Metrics::new("db").snapshot().calls, 0);
    /// ```
    #[must_use]
    pub fn new(name: &str) -> Metrics {
        Metrics::with_parts(name, None, None)
    }

    /// Counters labelled with the policy's name, reading its breaker's state, its budget's
    /// utilization and its adaptive limiter's limit and baseline when exported.
    ///
    /// ```
    /// # fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = stormguard_std::Policy::builder("db").build()?;
    /// let m = stormguard_std::Metrics::for_policy(&policy);
    /// assert_eq!(m.snapshot().breaker_state, Some("closed"));
    /// assert_eq!(m.snapshot().budget_utilization, Some(0.0));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn for_policy<K, L>(policy: &crate::Policy<K, L>) -> Metrics {
        Metrics::with_parts(
            policy.name().as_str(),
            policy.breaker().cloned(),
            policy.budget().cloned(),
        )
        .reading(policy.adaptive_limit().cloned())
    }

    fn with_parts(name: &str, breaker: Option<Breaker>, budget: Option<Budget>) -> Metrics {
        Metrics {
            inner: Arc::new(Inner {
                label: name.to_owned(),
                counters: Counters::default(),
                breaker,
                budget,
                adaptive: None,
            }),
        }
    }

    /// The same, reading `adaptive` too (set while the counters are not yet shared).
    fn reading(mut self, adaptive: Option<AdaptiveLimit>) -> Metrics {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.adaptive = adaptive;
        }
        self
    }

    /// The counters and gauges now.
    ///
    /// ```
    /// let m = stormguard_std::Metrics::new("db");
    /// assert_eq!(m.snapshot().name, "db");
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> MetricsSnapshot {
        let c = &self.inner.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let calls_by_result: [(&'static str, u64); 8] =
            std::array::from_fn(|i| (RESULTS.get(i).copied().unwrap_or(""), 0));
        let mut snapshot = MetricsSnapshot {
            name: self.inner.label.clone(),
            calls: 0,
            calls_by_result,
            attempts: load(&c.attempts),
            retries: load(&c.events.retries),
            hedges: load(&c.events.hedges),
            nested_retries: load(&c.events.nested_retries),
            restarts: load(&c.events.restarts),
            rejections: std::array::from_fn(|i| (REASONS.get(i).copied().unwrap_or(""), 0)),
            state_changes: std::array::from_fn(|i| (STATES.get(i).copied().unwrap_or(""), 0)),
            breaker_state: self.inner.breaker.as_ref().map(|b| b.state().as_str()),
            budget: self
                .inner
                .budget
                .as_ref()
                .map(|b| b.name().as_str().to_owned()),
            budget_utilization: self.inner.budget.as_ref().map(|b| b.utilization().as_f64()),
            adaptive: self
                .inner
                .adaptive
                .as_ref()
                .map(|a| a.name().as_str().to_owned()),
            adaptive_limit: self.inner.adaptive.as_ref().map(AdaptiveLimit::limit),
            adaptive_baseline: self
                .inner
                .adaptive
                .as_ref()
                .and_then(AdaptiveLimit::baseline)
                .map(|b| std::time::Duration::from(b).as_secs_f64()),
        };
        for (slot, counter) in snapshot.calls_by_result.iter_mut().zip(&c.calls) {
            slot.1 = load(counter);
            snapshot.calls = snapshot.calls.saturating_add(slot.1);
        }
        for (slot, counter) in snapshot.rejections.iter_mut().zip(&c.events.rejections) {
            slot.1 = load(counter);
        }
        for (slot, counter) in snapshot
            .state_changes
            .iter_mut()
            .zip(&c.events.state_changes)
        {
            slot.1 = load(counter);
        }
        snapshot
    }

    /// The snapshot in the Prometheus text exposition format (names in the module docs).
    ///
    /// ```
    /// let text = stormguard_std::Metrics::new("db").to_prometheus();
    /// assert!(text.contains("# HELP stormguard_attempts_total Attempts started."));
    /// assert!(text.contains("# TYPE stormguard_attempts_total counter"));
    /// assert!(text.contains("stormguard_attempts_total{breaker=\"db\"} 0"));
    /// ```
    #[must_use]
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        self.snapshot()
            .for_each_sample(|name, kind, labels, value| {
                if !out.contains(&format!("# TYPE {name} ")) {
                    let _ = writeln!(out, "# HELP {name} {}", help(name));
                    let _ = writeln!(out, "# TYPE {name} {kind}");
                }
                let labels: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
                    .collect();
                let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
            });
        out
    }
}

/// A label value as the Prometheus text exposition requires it: backslash, double quote and
/// line feed escaped (`\\`, `\"`, `\n`), so that no name, whatever it holds, can end a label or
/// a line early and break the scrape.
fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

impl Listener for Metrics {
    fn hears_attempts(&self) -> bool {
        false
    }
    fn hears_call_durations(&self) -> bool {
        false
    }
    fn on_event(&self, event: &Event<'_>) {
        bump(self.inner.counters.events.counter_for(event));
    }

    fn on_attempt(&self, _: &Name, _: u32) {
        bump(Some(&self.inner.counters.attempts));
    }

    fn on_call(&self, _: &Name, _: u32, ended: Ended) {
        bump(self.inner.counters.calls.get(result_index(ended)));
    }
}

/// What [`Metrics::snapshot`] read.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MetricsSnapshot {
    /// The `breaker` label.
    pub name: String,
    /// Calls ended, any way.
    pub calls: u64,
    /// Calls ended, by result (`stormguard_calls_total{result}`).
    pub calls_by_result: [(&'static str, u64); 8],
    /// Attempts started.
    pub attempts: u64,
    /// Retries scheduled.
    pub retries: u64,
    /// Hedged attempts launched.
    pub hedges: u64,
    /// Requests received that were a caller's retry.
    pub nested_retries: u64,
    /// Streams restarted from their checkpoint.
    pub restarts: u64,
    /// Refusals by reason (`other` for reasons added to the core later).
    pub rejections: [(&'static str, u64); 12],
    /// Breaker transitions, by the state entered.
    pub state_changes: [(&'static str, u64); 5],
    /// The breaker's state now, if the metrics know the breaker.
    pub breaker_state: Option<&'static str>,
    /// The budget's name, if the metrics know the budget.
    pub budget: Option<String>,
    /// The budget's utilization now (0 full, 1 empty).
    pub budget_utilization: Option<f64>,
    /// The adaptive limiter's name, if the metrics know one.
    pub adaptive: Option<String>,
    /// The adaptive limiter's current limit.
    pub adaptive_limit: Option<u32>,
    /// The adaptive limiter's latency baseline (the learned p10), in seconds, once it has one.
    pub adaptive_baseline: Option<f64>,
}

impl MetricsSnapshot {
    /// Calls that ended with `result` (an [`Ended::as_str`] name).
    ///
    /// ```
    /// assert_eq!(stormguard_std::Metrics::new("db").snapshot().calls_ended("rejected"), 0);
    /// ```
    #[must_use]
    pub fn calls_ended(&self, result: &str) -> u64 {
        lookup(&self.calls_by_result, result)
    }

    /// Refusals for `reason` (a [`RefusalReason::as_str`] name).
    ///
    /// ```
    /// assert_eq!(stormguard_std::Metrics::new("db").snapshot().rejected_for("breaker_open"), 0);
    /// ```
    #[must_use]
    pub fn rejected_for(&self, reason: &str) -> u64 {
        lookup(&self.rejections, reason)
    }

    /// Transitions into `state` (a [`State::as_str`] name).
    ///
    /// ```
    /// assert_eq!(stormguard_std::Metrics::new("db").snapshot().entered("open"), 0);
    /// ```
    #[must_use]
    pub fn entered(&self, state: &str) -> u64 {
        lookup(&self.state_changes, state)
    }

    /// Every sample: `f(metric name, "counter" or "gauge", labels, value)`, in a stable order,
    /// for an exporter to forward.
    ///
    /// ```
    /// let mut names = Vec::new();
    /// stormguard_std::Metrics::new("db").snapshot().for_each_sample(|name, _, _, _| names.push(name));
    /// assert!(names.contains(&"stormguard_retries_total"));
    /// ```
    pub fn for_each_sample(
        &self,
        mut f: impl FnMut(&'static str, &'static str, &[(&str, &str)], f64),
    ) {
        let b = self.name.as_str();
        for (result, n) in &self.calls_by_result {
            f(
                "stormguard_calls_total",
                "counter",
                &[("breaker", b), ("result", result)],
                as_f64(*n),
            );
        }
        f(
            "stormguard_attempts_total",
            "counter",
            &[("breaker", b)],
            as_f64(self.attempts),
        );
        f(
            "stormguard_retries_total",
            "counter",
            &[("breaker", b)],
            as_f64(self.retries),
        );
        f(
            "stormguard_hedges_total",
            "counter",
            &[("breaker", b)],
            as_f64(self.hedges),
        );
        f(
            "stormguard_nested_retries_total",
            "counter",
            &[("breaker", b)],
            as_f64(self.nested_retries),
        );
        f(
            "stormguard_restarts_total",
            "counter",
            &[("breaker", b)],
            as_f64(self.restarts),
        );
        for (reason, n) in &self.rejections {
            f(
                "stormguard_rejections_total",
                "counter",
                &[("breaker", b), ("reason", reason)],
                as_f64(*n),
            );
        }
        for (to, n) in &self.state_changes {
            f(
                "stormguard_state_changes_total",
                "counter",
                &[("breaker", b), ("to", to)],
                as_f64(*n),
            );
        }
        if let Some(current) = self.breaker_state {
            for state in STATES {
                let on = if state == current { 1.0 } else { 0.0 };
                f(
                    "stormguard_breaker_state",
                    "gauge",
                    &[("breaker", b), ("state", state)],
                    on,
                );
            }
        }
        if let (Some(budget), Some(u)) = (&self.budget, self.budget_utilization) {
            f(
                "stormguard_budget_utilization",
                "gauge",
                &[("budget", budget)],
                u,
            );
        }
        if let (Some(limiter), Some(limit)) = (&self.adaptive, self.adaptive_limit) {
            f(
                "stormguard_adaptive_limit",
                "gauge",
                &[("limiter", limiter)],
                f64::from(limit),
            );
            if let Some(base) = self.adaptive_baseline {
                f(
                    "stormguard_adaptive_baseline_seconds",
                    "gauge",
                    &[("limiter", limiter)],
                    base,
                );
            }
        }
    }
}

fn lookup(table: &[(&'static str, u64)], key: &str) -> u64 {
    table.iter().find(|(k, _)| *k == key).map_or(0, |(_, n)| *n)
}

#[allow(clippy::cast_precision_loss)] // counters far below 2^53 in any real process
fn as_f64(n: u64) -> f64 {
    n as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::Duration;

    #[test]
    fn a_label_value_with_a_newline_quote_or_backslash_cannot_break_the_exposition() {
        let text = Metrics::new("db\"} 1\nstormguard_fake{x=\"\\").to_prometheus();
        for line in text.lines() {
            assert!(
                line.starts_with("# TYPE stormguard_")
                    || line.starts_with("# HELP stormguard_")
                    || line.starts_with("stormguard_"),
                "{line:?}"
            );
            assert!(!line.starts_with("stormguard_fake"), "{line:?}");
        }
        assert!(
            text.contains(
                r#"stormguard_attempts_total{breaker="db\"} 1\nstormguard_fake{x=\"\\"} 0"#
            ),
            "{text}"
        );
        assert_eq!(escape_label_value("a\\b\"c\nd"), r#"a\\b\"c\nd"#);
    }

    #[test]
    fn events_and_reports_land_in_their_counters() {
        let m = Metrics::new("db");
        let name = Name::new("db");
        m.on_event(&Event::Rejected {
            name: &name,
            reason: RefusalReason::BudgetExhausted,
            delay: Duration::from_millis(100),
            retry_after: Duration::from_millis(300),
        });
        m.on_event(&Event::StateChanged {
            name: &name,
            from: State::Closed,
            to: State::Open,
            reason: None,
            break_for: None,
        });
        m.on_event(&Event::Hedged {
            name: &name,
            attempt: 2,
        });
        m.on_event(&Event::NestedRetry {
            name: &name,
            attempt: 3,
        });
        m.on_attempt(&name, 1);
        m.on_attempt(&name, 2);
        m.on_call(&name, 2, Ended::Rejected(RefusalReason::BudgetExhausted));
        let s = m.snapshot();
        assert_eq!(s.rejected_for("budget_exhausted"), 1);
        assert_eq!(s.entered("open"), 1);
        assert_eq!(s.attempts, 2);
        assert_eq!(s.hedges, 1);
        assert_eq!(s.nested_retries, 1);
        assert_eq!(s.calls, 1);
        assert_eq!(s.calls_ended("rejected"), 1);
        let text = m.to_prometheus();
        assert!(text
            .contains("stormguard_rejections_total{breaker=\"db\",reason=\"budget_exhausted\"} 1"));
        assert!(text.contains("stormguard_state_changes_total{breaker=\"db\",to=\"open\"} 1"));
        assert!(text.contains("stormguard_hedges_total{breaker=\"db\"} 1"));
        assert!(text.contains("stormguard_nested_retries_total{breaker=\"db\"} 1"));
        assert_eq!(
            text.matches("# TYPE stormguard_calls_total counter")
                .count(),
            1
        );
    }

    #[test]
    fn every_refusal_reason_is_counted_under_its_own_name() {
        let reasons = [
            RefusalReason::BreakerOpen,
            RefusalReason::HalfOpenFull,
            RefusalReason::RampShedding,
            RefusalReason::Isolated,
            RefusalReason::BudgetExhausted,
            RefusalReason::RateLimited,
            RefusalReason::BulkheadFull,
            RefusalReason::KeyedFull,
            RefusalReason::Shed,
            RefusalReason::ConcurrencyLimited,
            RefusalReason::QuotaReserve,
        ];
        // Every reason but "other", once each, in order.
        assert_eq!(reasons.len(), REASONS.len() - 1);
        for (i, reason) in reasons.into_iter().enumerate() {
            assert_eq!(reason_index(reason), i);
            assert_eq!(REASONS[i], reason.as_str());
        }
        let m = Metrics::new("api");
        m.on_event(&Event::Rejected {
            name: &Name::new("api"),
            reason: RefusalReason::QuotaReserve,
            delay: Duration::from_millis(100),
            retry_after: Duration::from_secs(3),
        });
        assert_eq!(m.snapshot().rejected_for("quota_reserve"), 1);
        assert!(m
            .to_prometheus()
            .contains("stormguard_rejections_total{breaker=\"api\",reason=\"quota_reserve\"} 1"));
    }
}
