//! What a run measured: the figures of one scenario x strategy.

use serde::Serialize;

/// The figures of one scenario run with one strategy. Serialized (with `--json`) in snake_case;
/// times in milliseconds, `null` where a figure does not apply or never happened.
///
/// Where the clients also call a healthy dependency, calls, attempts and load count both (each
/// call makes its attempts at one of them); the dependency's own latencies, the trips and the
/// recoveries are the impaired one's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The strategy's name.
    pub strategy: String,
    /// The seed the run used.
    pub seed: u64,
    /// Clients in the fleet.
    pub clients: u32,
    /// How long calls kept arriving, in seconds.
    pub duration_s: f64,
    /// The fault window (first impairment start to last impairment end), in seconds; the whole
    /// run when nothing is scheduled.
    pub fault_window_s: [f64; 2],
    /// Calls the fleet made.
    pub calls: u64,
    /// Calls that succeeded.
    pub succeeded: u64,
    /// Calls the dependency failed (its last error stood, or the deadline passed).
    pub failed: u64,
    /// Calls refused locally (breaker open, half-open full, ramp shedding, budget empty) — after
    /// the guarded pause.
    pub refused_locally: u64,
    /// Calls that found their client's pool of concurrent calls full and failed at once (the
    /// caller's own saturation; 0 without a pool).
    pub saturated: u64,
    /// succeeded / calls.
    pub availability: f64,
    /// The same over the calls begun in the minute after the trigger ended (the last
    /// impairment's end; to the end of the run if that comes first): whether the callers got
    /// their service back once the dependency's trouble was over. `null` when an impairment
    /// lasts the run.
    pub availability_after_trigger: Option<f64>,
    /// Where the clients also call a healthy dependency through the same pool: the share of
    /// the calls to it begun within the fault window that succeeded. `null` without one.
    pub healthy_dependency_availability: Option<f64>,
    /// Attempts that reached the dependency, over the whole run.
    pub attempts: u64,
    /// Calls made per second, over the fault window (the whole run without an impairment).
    pub calls_per_s_in_window: f64,
    /// Attempts that reached the dependency per second, over the fault window: the load it
    /// took, in absolute terms.
    pub attempts_per_s_in_window: f64,
    /// Attempts the dependency took on (held a slot for) and answered after their caller had
    /// stopped waiting (an attempt timeout, the call's deadline, a hedge's loser): work it did
    /// for nobody, which it cannot tell apart from the rest.
    pub wasted_attempts: u64,
    /// Attempts that reached the dependency per call, over the fault window (both counted by
    /// their start time).
    pub load_multiplier: f64,
    /// The same ratio over the whole run.
    pub load_multiplier_run: f64,
    /// The same ratio in the worst one-second window of the run.
    pub amplification: f64,
    /// Retries (attempts after a call's first, at every layer) per call, over the whole run.
    pub retries_per_call: f64,
    /// Caller latency, median, in ms (retries, backoff waits and guarded pauses included).
    pub latency_p50_ms: f64,
    /// Caller latency, 99th percentile, in ms.
    pub latency_p99_ms: f64,
    /// The dependency's own latency, 99th percentile in ms, over the attempts it took on before
    /// the first impairment: what it takes when healthy (queueing past its capacity included).
    /// `null` when none began before it.
    pub served_p99_before_ms: Option<f64>,
    /// The same over the attempts it took on within the fault window (the whole run when no
    /// impairment is scheduled): how far the callers let an impairment stretch it (a capacity
    /// drop's queue). `null` when it took on none.
    pub served_p99_in_window_ms: Option<f64>,
    /// Times a breaker opened (any client, any reason, failed probes included).
    pub breaker_opens: u64,
    /// Breaker opens by reason (`consecutive_failures`, `failure_rate`, `slow_calls`,
    /// `probe_failed`, `ramp_failure`, ...).
    pub opens_by_reason: std::collections::BTreeMap<String, u64>,
    /// Half-open probes that reached the dependency.
    pub probes: u64,
    /// From the first impairment's start to the first trip in the fleet.
    pub time_to_trip_ms: Option<f64>,
    /// From the first impairment's start to the last client's first trip; `null` unless every
    /// breaker tripped.
    pub time_to_trip_last_ms: Option<f64>,
    /// Breakers that tripped at least once after the first impairment started.
    pub tripped_breakers: u64,
    /// From the moment the dependency answers normally again (end of the last outage, brownout
    /// or spike; start of a cold recovery) to the start of the first full second in which every
    /// call succeeded. `null` when the run ended first.
    pub time_to_recover_ms: Option<f64>,
    /// From the same moment to the start of the first full second in which every attempt that
    /// reached the dependency was answered with a success before its caller gave up: when the
    /// dependency itself was serving again, whatever its callers' breakers still refused.
    /// `null` when the run ended first.
    pub dependency_recovered_ms: Option<f64>,
    /// Trips from closed (or recovering) by a breaker that had already opened before.
    pub re_trips: u64,
    /// Trips from closed (or recovering) outside every impairment (and the trip window after
    /// it). The four figures below split it by rule.
    pub false_trips: u64,
    /// Of the false trips: by the consecutive-failure rule.
    pub false_trips_consecutive: u64,
    /// Of the false trips: by the relative error-rate rule or the failure-ratio ceiling.
    pub false_trips_failure_rate: u64,
    /// Of the false trips: by the slow-call rule.
    pub false_trips_slow: u64,
    /// Of the false trips: re-opens of a recovery ramp by failures among the calls it admitted
    /// (`ramp_failure`: the ramp's own judgement, no trip rule of a closed breaker). Every ramp
    /// re-open, inside an impairment or not, is counted in `opens_by_reason`.
    pub false_trips_ramp: u64,
    /// Outcomes (success or failure) of attempts admitted while their breaker was closed: the
    /// trials the consecutive-failure rule counts, for its expected number of trips.
    pub closed_outcomes: u64,
    /// Calls refused by a breaker (open, half-open full, ramp shedding).
    pub refused_by_breaker: u64,
    /// Retries refused by a budget.
    pub refused_by_budget: u64,
    /// Calls refused by the client's own rate limiter or bulkhead (after waiting for a slot or
    /// a cell as long as the call's deadline and the bulkhead's bound allowed).
    pub refused_by_limits: u64,
    /// Hedges launched beside a slow attempt (each also counted in `attempts`).
    pub hedges: u64,
    /// Attempts a breaker admitted while it read open or half-open that were not half-open
    /// probes: the core must keep this at zero.
    pub unprobed_attempts_while_open: u64,
    /// Calls made, per second of the run.
    #[serde(skip)]
    pub calls_per_second: Vec<u32>,
    /// Attempts that reached the dependency, per second of the run.
    #[serde(skip)]
    pub attempts_per_second: Vec<u32>,
    /// Calls that succeeded, per second of the run (by start).
    #[serde(skip)]
    pub successes_per_second: Vec<u32>,
    /// Calls that failed at the dependency (or ran out of time), per second of the run (by
    /// start).
    #[serde(skip)]
    pub failures_per_second: Vec<u32>,
    /// Calls refused locally, per second of the run (by start).
    #[serde(skip)]
    pub refusals_per_second: Vec<u32>,
    /// Calls that found their client's pool full, per second of the run.
    #[serde(skip)]
    pub saturated_per_second: Vec<u32>,
    /// Times a breaker opened, per second of the run.
    #[serde(skip)]
    pub opens_per_second: Vec<u32>,
}

impl Report {
    /// Calls made in seconds `[from, to)`.
    #[must_use]
    pub fn calls_between(&self, from: usize, to: usize) -> u64 {
        sum(&self.calls_per_second, from, to)
    }

    /// Successful calls (by start) in seconds `[from, to)`.
    #[must_use]
    pub fn successes_between(&self, from: usize, to: usize) -> u64 {
        sum(&self.successes_per_second, from, to)
    }

    /// Attempts at the dependency in seconds `[from, to)`.
    #[must_use]
    pub fn attempts_between(&self, from: usize, to: usize) -> u64 {
        sum(&self.attempts_per_second, from, to)
    }
}

fn sum(v: &[u32], from: usize, to: usize) -> u64 {
    v.iter()
        .skip(from)
        .take(to.saturating_sub(from))
        .map(|&x| u64::from(x))
        .sum()
}

/// Formats an optional duration in ms as seconds for a table ("-" when absent).
fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |ms| format!("{:.1}s", ms / 1000.0))
}

/// The column headers of [`table`].
const HEADERS: [&str; 16] = [
    "strategy", "calls", "ok", "failed", "refused", "avail", "load", "amp", "retry/c", "p50",
    "p99", "opens", "trip", "recover", "retrip", "false",
];

/// A plain-text table of reports, one row per strategy.
#[must_use]
pub fn table(reports: &[&Report]) -> String {
    let rows: Vec<[String; 16]> = reports
        .iter()
        .map(|r| {
            [
                r.strategy.clone(),
                r.calls.to_string(),
                r.succeeded.to_string(),
                r.failed.to_string(),
                r.refused_locally.to_string(),
                format!("{:.4}", r.availability),
                format!("{:.3}x", r.load_multiplier),
                format!("{:.3}x", r.amplification),
                format!("{:.3}", r.retries_per_call),
                format!("{:.0}ms", r.latency_p50_ms),
                format!("{:.0}ms", r.latency_p99_ms),
                r.breaker_opens.to_string(),
                secs(r.time_to_trip_ms),
                secs(r.time_to_recover_ms),
                r.re_trips.to_string(),
                r.false_trips.to_string(),
            ]
        })
        .collect();
    let rows: Vec<Vec<String>> = rows.into_iter().map(Vec::from).collect();
    aligned(&HEADERS.map(String::from), &rows)
}

/// A second-by-second account of one run: calls made, calls that succeeded (by start),
/// attempts at the dependency and their ratio to calls, and breaker opens, with the fault
/// window marked.
#[must_use]
pub fn timeline(r: &Report) -> String {
    let at = |v: &[u32], s: usize| v.get(s).copied().unwrap_or(0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // whole seconds of a run
    let seconds = r.duration_s.max(0.0).ceil() as usize;
    let [from, to] = r.fault_window_s;
    let headers = ["second", "calls", "ok", "attempts", "load", "opens", ""].map(String::from);
    let rows: Vec<Vec<String>> = (0..seconds)
        .map(|s| {
            let calls = at(&r.calls_per_second, s);
            let attempts = at(&r.attempts_per_second, s);
            let load = if calls == 0 {
                "-".to_string()
            } else {
                format!("{:.2}x", f64::from(attempts) / f64::from(calls))
            };
            #[allow(clippy::cast_precision_loss)]
            let second = s as f64;
            let impaired = second + 1.0 > from && second < to;
            vec![
                s.to_string(),
                calls.to_string(),
                at(&r.successes_per_second, s).to_string(),
                attempts.to_string(),
                load,
                at(&r.opens_per_second, s).to_string(),
                if impaired { "impaired" } else { "" }.to_string(),
            ]
        })
        .collect();
    aligned(&headers, &rows)
}

/// The least, median and greatest of `values` (the lower middle for an even count); `None`
/// when there are none.
#[must_use]
pub fn spread(mut values: Vec<f64>) -> Option<[f64; 3]> {
    values.retain(|v| !v.is_nan());
    values.sort_by(f64::total_cmp);
    let median = values.len().checked_sub(1)? / 2;
    Some([*values.first()?, *values.get(median)?, *values.last()?])
}

/// A plain-text table of each strategy's runs over several seeds: three rows per strategy, the
/// least, the median and the greatest of each figure over its runs (a figure that did not
/// happen in every run, such as the time to trip, is taken over the runs where it did, and
/// marked with how many).
#[must_use]
pub fn spread_table(strategies: &[Vec<Report>]) -> String {
    type Figure = (fn(&Report) -> Option<f64>, fn(f64) -> String);
    fn count(v: u64) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)] // counts far below 2^52
        Some(v as f64)
    }
    let whole = |v: f64| format!("{v:.0}");
    let figures: [Figure; 15] = [
        (|r| count(r.calls), whole),
        (|r| count(r.succeeded), whole),
        (|r| count(r.failed), whole),
        (|r| count(r.refused_locally), whole),
        (|r| Some(r.availability), |v| format!("{v:.4}")),
        (|r| Some(r.load_multiplier), |v| format!("{v:.3}x")),
        (|r| Some(r.amplification), |v| format!("{v:.3}x")),
        (|r| Some(r.retries_per_call), |v| format!("{v:.3}")),
        (|r| Some(r.latency_p50_ms), |v| format!("{v:.0}ms")),
        (|r| Some(r.latency_p99_ms), |v| format!("{v:.0}ms")),
        (|r| count(r.breaker_opens), whole),
        (|r| r.time_to_trip_ms, |v| secs(Some(v))),
        (|r| r.time_to_recover_ms, |v| secs(Some(v))),
        (|r| count(r.re_trips), whole),
        (|r| count(r.false_trips), whole),
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for runs in strategies {
        let Some(first) = runs.first() else { continue };
        let mut three = [
            vec![first.strategy.clone(), "min".to_string()],
            vec![String::new(), "median".to_string()],
            vec![String::new(), "max".to_string()],
        ];
        for (value, show) in figures {
            let values: Vec<f64> = runs.iter().filter_map(value).collect();
            let seen = values.len();
            match spread(values) {
                Some(mmm) => {
                    for (row, v) in three.iter_mut().zip(mmm) {
                        let mut cell = show(v);
                        if seen < runs.len() {
                            cell.push_str(&format!(" ({seen}/{})", runs.len()));
                        }
                        row.push(cell);
                    }
                }
                None => three.iter_mut().for_each(|row| row.push("-".to_string())),
            }
        }
        rows.extend(three);
    }
    let mut headers: Vec<String> = vec![HEADERS[0].to_string(), "of seeds".to_string()];
    headers.extend(HEADERS[1..].iter().map(|h| (*h).to_string()));
    aligned(&headers, &rows)
}

/// `headers` and `rows` in columns: the first left-aligned, the rest right-aligned.
fn aligned(headers: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(String::len).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for cells in std::iter::once(headers).chain(rows.iter().map(Vec::as_slice)) {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths.iter()).enumerate() {
            if i == 0 {
                s.push_str(&format!("{cell:<w$}"));
            } else {
                s.push_str(&format!("  {cell:>w$}"));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    }
    out
}

/// What the table's columns mean, for the bottom of `storm`'s output.
pub const LEGEND: &str = "\
load: attempts at the dependency per call over the fault window; amp: the same in the worst \
second; retry/c: retries per call; p50/p99: caller latency (retries, waits and pauses \
included); opens: breaker opens; trip: impairment start to first trip; recover: dependency \
answering again to the first full second of successes; retrip: trips after a breaker had \
already opened; false: trips outside any impairment.";
