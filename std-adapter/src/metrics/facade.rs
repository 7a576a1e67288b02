//! The same metrics through the [`metrics`](::metrics) crate's facade (feature `metrics`), for
//! any exporter that installs a recorder (Prometheus, StatsD, OpenTelemetry, ...).

use std::sync::{Arc, OnceLock};

use ::metrics::{Counter, Gauge, Histogram, Unit};
use stormguard_core::{event::AttemptEnd, Duration, Event, Name, Outcome};

use super::{result_index, EventCounters, CATALOGUE, REASONS, RESULTS, STATES};
use crate::events::{Ended, Listener};
use crate::health::Report;

/// The outcomes an attempt histogram is labelled with, as [`Outcome::as_str`] names them.
const OUTCOMES: [&str; 6] = [
    Outcome::Success.as_str(),
    Outcome::Transient.as_str(),
    Outcome::TimedOut.as_str(),
    Outcome::Throttled { retry_after: None }.as_str(),
    Outcome::Permanent.as_str(),
    Outcome::Cancelled.as_str(),
];

fn outcome_index(outcome: Outcome) -> usize {
    match outcome {
        Outcome::Success => 0,
        Outcome::Transient => 1,
        Outcome::TimedOut => 2,
        Outcome::Throttled { .. } => 3,
        Outcome::Permanent => 4,
        Outcome::Cancelled => 5,
    }
}

/// Every handle, registered once with the recorder: the counters when the listener is made
/// (a counter at zero is worth a series), each histogram the first time it has a sample (a
/// summary that never had one is only noise in a scrape). The call path records through them
/// with no lookup and no allocation.
#[derive(Debug)]
struct Handles {
    label: String,
    calls: [Counter; RESULTS.len()],
    call_seconds: [OnceLock<Histogram>; RESULTS.len()],
    attempts: Counter,
    attempt_seconds: [OnceLock<Histogram>; OUTCOMES.len()],
    events: EventCounters<Counter>,
    /// `[refused, entered]`.
    slot_wait_seconds: [OnceLock<Histogram>; 2],
    /// Recorded only for a policy with a bulkhead or an adaptive limiter.
    lease_seconds: Option<OnceLock<Histogram>>,
}

impl Handles {
    /// Records `took` in the histogram `metric{breaker, label="value"}` held by `cell`.
    fn record(
        &self,
        cell: Option<&OnceLock<Histogram>>,
        metric: &'static str,
        label: Option<(&'static str, &'static str)>,
        took: Duration,
    ) {
        let Some(cell) = cell else {
            return;
        };
        let histogram = cell.get_or_init(|| match label {
            Some((key, value)) => {
                ::metrics::histogram!(metric, "breaker" => self.label.clone(), key => value)
            }
            None => ::metrics::histogram!(metric, "breaker" => self.label.clone()),
        });
        histogram.record(std::time::Duration::from(took).as_secs_f64());
    }
}

/// A policy's metrics through the [`metrics`](::metrics) facade: a [`Listener`] that counts
/// what [`Metrics`](crate::Metrics) counts, under the same names and labels, and records
/// histograms the snapshot cannot hold: each call's duration (by result), each attempt's (by
/// outcome), each wait for a bulkhead slot (by whether it was entered) and, for a policy with a
/// bulkhead or an adaptive limiter, each attempt's hold on its slot (its lease). The gauges
/// (breaker state, budget use, the adaptive limit) come from a health report, each host of a
/// keyed table included: [`MetricsFacade::publish`] them before each scrape.
///
/// Names, kinds and help texts: [`MetricsFacade::describe`], and the module table of
/// [`Metrics`](crate::Metrics). The handles are registered with the recorder installed
/// globally (`metrics::set_global_recorder`, or the exporter's `install_recorder`): the
/// counters when the listener is made, so that a scrape shows them at zero, and each histogram
/// at its first sample, so that it shows only the series that happened. Install the recorder
/// first: a listener made before it counts nowhere. Recording is the recorder's own cost (for
/// the Prometheus exporter, an atomic add per counter and a lock-free push per histogram
/// sample): no lookup, no allocation after a histogram's first sample. The listener hears
/// attempts, so a policy builds each attempt's event for it.
///
/// ```
/// use stormguard_std::{MetricsFacade, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // First the exporter's recorder...
/// let exporter = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
/// MetricsFacade::describe();
/// // ...then the listener, whose handles it registers.
/// let policy = Policy::builder("inventory").build()?;
/// let facade = MetricsFacade::for_policy(&policy);
/// let policy = policy.with_listener(facade);
///
/// let _ = policy.call(|_| async { Ok::<_, ()>(7) }).await;
/// let text = exporter.render();
/// assert!(text.contains(r#"stormguard_calls_total{breaker="inventory",result="succeeded"} 1"#));
/// assert!(text.contains(r#"stormguard_call_duration_seconds_count{breaker="inventory",result="succeeded"} 1"#));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MetricsFacade {
    handles: Arc<Handles>,
}

impl MetricsFacade {
    /// Handles labelled `breaker="name"`, with no lease histogram.
    #[must_use]
    pub fn new(name: &str) -> MetricsFacade {
        MetricsFacade::registered(name, false)
    }

    /// Handles labelled with the policy's name; a policy with a bulkhead or an adaptive
    /// limiter also records its attempts' leases.
    #[must_use]
    pub fn for_policy<K, L>(policy: &crate::Policy<K, L>) -> MetricsFacade {
        let limited = policy.bulkhead().is_some() || policy.adaptive_limit().is_some();
        MetricsFacade::registered(policy.name().as_str(), limited)
    }

    fn registered(name: &str, limited: bool) -> MetricsFacade {
        let b = name.to_owned();
        let counter = |metric: &'static str| ::metrics::counter!(metric, "breaker" => b.clone());
        let by = |metric: &'static str, label: &'static str, value: &'static str| ::metrics::counter!(metric, "breaker" => b.clone(), label => value);
        let handles = Handles {
            calls: RESULTS.map(|r| by("stormguard_calls_total", "result", r)),
            call_seconds: Default::default(),
            attempts: counter("stormguard_attempts_total"),
            attempt_seconds: Default::default(),
            events: EventCounters {
                retries: counter("stormguard_retries_total"),
                hedges: counter("stormguard_hedges_total"),
                nested_retries: counter("stormguard_nested_retries_total"),
                restarts: counter("stormguard_restarts_total"),
                rejections: REASONS.map(|r| by("stormguard_rejections_total", "reason", r)),
                state_changes: STATES.map(|s| by("stormguard_state_changes_total", "to", s)),
            },
            slot_wait_seconds: Default::default(),
            lease_seconds: limited.then(OnceLock::new),
            label: b,
        };
        MetricsFacade {
            handles: Arc::new(handles),
        }
    }

    /// Tells the installed recorder every metric's kind, unit and help text (an exporter
    /// prints them as `# HELP`). Once, after installing the recorder.
    pub fn describe() {
        for (name, kind, help) in CATALOGUE {
            match kind {
                "counter" => ::metrics::describe_counter!(name, Unit::Count, help),
                "histogram" => ::metrics::describe_histogram!(name, Unit::Seconds, help),
                _ => ::metrics::describe_gauge!(name, help),
            }
        }
    }

    /// Sets the gauges from a health report (`registry.report()`), through the installed
    /// recorder: `stormguard_breaker_state` (1 for the current state, 0 for the others) for
    /// every breaker, a keyed table's with a `key` label (its host, service or tenant);
    /// `stormguard_budget_utilization` per budget; `stormguard_adaptive_limit` and
    /// `stormguard_adaptive_baseline_seconds` per adaptive limiter. Call it before each
    /// scrape. A key evicted from its table is no longer set: tell the exporter to drop idle
    /// gauges if keys come and go.
    pub fn publish(report: &Report) {
        for breaker in &report.breakers {
            for state in STATES {
                let value = if state == breaker.state { 1.0 } else { 0.0 };
                let gauge: Gauge = match &breaker.key {
                    Some(key) => ::metrics::gauge!(
                        "stormguard_breaker_state",
                        "breaker" => breaker.name.clone(),
                        "key" => key.clone(),
                        "state" => state
                    ),
                    None => ::metrics::gauge!(
                        "stormguard_breaker_state",
                        "breaker" => breaker.name.clone(),
                        "state" => state
                    ),
                };
                gauge.set(value);
            }
        }
        for budget in &report.budgets {
            ::metrics::gauge!("stormguard_budget_utilization", "budget" => budget.name.clone())
                .set(budget.utilization);
        }
        for limiter in &report.adaptive {
            ::metrics::gauge!("stormguard_adaptive_limit", "limiter" => limiter.name.clone())
                .set(f64::from(limiter.limit));
            if let Some(baseline) = limiter.baseline_seconds {
                ::metrics::gauge!(
                    "stormguard_adaptive_baseline_seconds",
                    "limiter" => limiter.name.clone()
                )
                .set(baseline);
            }
        }
    }
}

fn bump(counter: Option<&Counter>) {
    if let Some(c) = counter {
        c.increment(1);
    }
}

impl Listener for MetricsFacade {
    fn on_event(&self, event: &Event<'_>) {
        let h = &*self.handles;
        match event {
            Event::Attempt {
                end: AttemptEnd::Ran { outcome, took, .. },
                ..
            } => {
                let i = outcome_index(*outcome);
                let label = OUTCOMES.get(i).map(|o| ("outcome", *o));
                let metric = "stormguard_attempt_duration_seconds";
                h.record(h.attempt_seconds.get(i), metric, label, *took);
                h.record(
                    h.lease_seconds.as_ref(),
                    "stormguard_lease_seconds",
                    None,
                    *took,
                );
            }
            _ => bump(h.events.counter_for(event)),
        }
    }

    fn on_attempt(&self, _: &Name, _: u32) {
        self.handles.attempts.increment(1);
    }

    fn on_call(&self, _: &Name, _: u32, ended: Ended) {
        bump(self.handles.calls.get(result_index(ended)));
    }

    fn on_call_duration(&self, _: &Name, ended: Ended, took: Duration) {
        let h = &*self.handles;
        let i = result_index(ended);
        let label = RESULTS.get(i).map(|r| ("result", *r));
        h.record(
            h.call_seconds.get(i),
            "stormguard_call_duration_seconds",
            label,
            took,
        );
    }

    fn on_slot_wait(&self, _: &Name, waited: Duration, entered: bool) {
        let h = &*self.handles;
        let label = Some(("entered", if entered { "true" } else { "false" }));
        let cell = h.slot_wait_seconds.get(usize::from(entered));
        h.record(cell, "stormguard_slot_wait_seconds", label, waited);
    }
}
