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

/// One column of the tables: its header, the figure it shows (`None`: "-"), how a value is
/// printed, and whether a table of these reports shows it at all.
struct Column {
    header: &'static str,
    value: fn(&Report) -> Option<f64>,
    show: fn(f64) -> String,
    shown: fn(&[&Report]) -> bool,
}

#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn count(v: u64) -> Option<f64> {
    Some(v as f64)
}

fn whole(v: f64) -> String {
    format!("{v:.0}")
}

fn times(v: f64) -> String {
    format!("{v:.3}x")
}

fn four(v: f64) -> String {
    format!("{v:.4}")
}

fn millis(v: f64) -> String {
    format!("{v:.0}ms")
}

fn seconds(v: f64) -> String {
    secs(Some(v))
}

fn always(_: &[&Report]) -> bool {
    true
}

/// The tables' columns, in order. Two show only where they apply: `full`, where a caller's pool
/// refused a call (or a second dependency shares it), and `healthy`, where there is a second
/// dependency.
const COLUMNS: [Column; 20] = [
    Column {
        header: "calls",
        value: |r| count(r.calls),
        show: whole,
        shown: always,
    },
    Column {
        header: "ok",
        value: |r| count(r.succeeded),
        show: whole,
        shown: always,
    },
    Column {
        header: "failed",
        value: |r| count(r.failed),
        show: whole,
        shown: always,
    },
    Column {
        header: "refused",
        value: |r| count(r.refused_locally),
        show: whole,
        shown: always,
    },
    Column {
        header: "full",
        value: |r| count(r.saturated),
        show: whole,
        shown: |rs| {
            rs.iter()
                .any(|r| r.saturated > 0 || r.healthy_dependency_availability.is_some())
        },
    },
    Column {
        header: "avail",
        value: |r| Some(r.availability),
        show: four,
        shown: always,
    },
    Column {
        header: "after",
        value: |r| r.availability_after_trigger,
        show: four,
        shown: always,
    },
    Column {
        header: "healthy",
        value: |r| r.healthy_dependency_availability,
        show: four,
        shown: |rs| {
            rs.iter()
                .any(|r| r.healthy_dependency_availability.is_some())
        },
    },
    Column {
        header: "load",
        value: |r| Some(r.load_multiplier),
        show: times,
        shown: always,
    },
    Column {
        header: "att/s",
        value: |r| Some(r.attempts_per_s_in_window),
        show: whole,
        shown: always,
    },
    Column {
        header: "amp",
        value: |r| Some(r.amplification),
        show: times,
        shown: always,
    },
    Column {
        header: "retry/c",
        value: |r| Some(r.retries_per_call),
        show: |v| format!("{v:.3}"),
        shown: always,
    },
    Column {
        header: "p50",
        value: |r| Some(r.latency_p50_ms),
        show: millis,
        shown: always,
    },
    Column {
        header: "p99",
        value: |r| Some(r.latency_p99_ms),
        show: millis,
        shown: always,
    },
    Column {
        header: "opens",
        value: |r| count(r.breaker_opens),
        show: whole,
        shown: always,
    },
    Column {
        header: "trip",
        value: |r| r.time_to_trip_ms,
        show: seconds,
        shown: always,
    },
    Column {
        header: "recover",
        value: |r| r.time_to_recover_ms,
        show: seconds,
        shown: always,
    },
    Column {
        header: "dep-rec",
        value: |r| r.dependency_recovered_ms,
        show: seconds,
        shown: always,
    },
    Column {
        header: "retrip",
        value: |r| count(r.re_trips),
        show: whole,
        shown: always,
    },
    Column {
        header: "false",
        value: |r| count(r.false_trips),
        show: whole,
        shown: always,
    },
];

/// The columns a table of `reports` shows.
fn columns(reports: &[&Report]) -> Vec<&'static Column> {
    COLUMNS.iter().filter(|c| (c.shown)(reports)).collect()
}

/// A plain-text table of reports, one row per strategy.
#[must_use]
pub fn table(reports: &[&Report]) -> String {
    let columns = columns(reports);
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            std::iter::once(r.strategy.clone())
                .chain(
                    columns
                        .iter()
                        .map(|c| (c.value)(r).map_or_else(|| "-".to_string(), c.show)),
                )
                .collect()
        })
        .collect();
    let headers: Vec<String> = std::iter::once("strategy")
        .chain(columns.iter().map(|c| c.header))
        .map(String::from)
        .collect();
    aligned(&headers, &rows)
}

/// A second-by-second account of one run: calls made, and of those (by start) the ones that
/// succeeded, failed at the dependency, were refused locally and (where a caller's pool applies)
/// found it full; attempts at the dependency and their ratio to calls, and breaker opens, with
/// the fault window marked.
#[must_use]
pub fn timeline(r: &Report) -> String {
    let at = |v: &[u32], s: usize| v.get(s).copied().unwrap_or(0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // whole seconds of a run
    let seconds = r.duration_s.max(0.0).ceil() as usize;
    let [from, to] = r.fault_window_s;
    let pool = r.saturated > 0 || r.healthy_dependency_availability.is_some();
    let mut headers = vec!["second", "calls", "ok", "failed", "refused"];
    if pool {
        headers.push("full");
    }
    headers.extend(["attempts", "load", "opens", ""]);
    let headers: Vec<String> = headers.into_iter().map(String::from).collect();
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
            let mut row = vec![
                s.to_string(),
                calls.to_string(),
                at(&r.successes_per_second, s).to_string(),
                at(&r.failures_per_second, s).to_string(),
                at(&r.refusals_per_second, s).to_string(),
            ];
            if pool {
                row.push(at(&r.saturated_per_second, s).to_string());
            }
            row.extend([
                attempts.to_string(),
                load,
                at(&r.opens_per_second, s).to_string(),
                if impaired { "impaired" } else { "" }.to_string(),
            ]);
            row
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
    let all: Vec<&Report> = strategies.iter().flatten().collect();
    let columns = columns(&all);
    let mut rows: Vec<Vec<String>> = Vec::new();
    for runs in strategies {
        let Some(first) = runs.first() else { continue };
        let mut three = [
            vec![first.strategy.clone(), "min".to_string()],
            vec![String::new(), "median".to_string()],
            vec![String::new(), "max".to_string()],
        ];
        for c in &columns {
            let values: Vec<f64> = runs.iter().filter_map(c.value).collect();
            let seen = values.len();
            match spread(values) {
                Some(mmm) => {
                    for (row, v) in three.iter_mut().zip(mmm) {
                        let mut cell = (c.show)(v);
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
    let headers: Vec<String> = ["strategy", "of seeds"]
        .into_iter()
        .chain(columns.iter().map(|c| c.header))
        .map(String::from)
        .collect();
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
full: calls that found their client's pool of concurrent calls full (they fail at once); after: \
availability over the minute after the last impairment ends; healthy: where clients also call a \
healthy dependency through the same pool, the share of its calls served over the fault window; \
load: attempts at the dependency per call over the fault window; att/s: attempts at the \
dependency per second over the fault window; amp: load in the worst second; retry/c: retries \
per call; p50/p99: caller latency (retries, waits and pauses included); opens: breaker opens; \
trip: impairment start to first trip; recover: dependency answering again to the first full \
second in which every call succeeded; dep-rec: the same to the first full second in which every \
attempt that reached the dependency succeeded in time (the dependency serving again, whatever \
the callers' breakers still refuse); retrip: trips after a breaker had already opened; false: \
trips outside any impairment.";
