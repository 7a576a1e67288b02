//! The metrics facade against a real exporter (the Prometheus one, installed for the whole
//! test binary: each test names its own breakers), on tokio's paused clock: what a scrape shows
//! after retries, refusals, bulkhead waits and a keyed table's host going down.
#![cfg(all(feature = "tokio", feature = "metrics"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::float_cmp,
    missing_docs
)]

use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use stormguard_core::limits::BulkheadSettings;
use stormguard_std::health::Registry;
use stormguard_std::{Breaker, Bulkhead, KeyedPolicy, MetricsFacade, Policy};
use tokio::time::{sleep, Instant as TokioInstant};

mod support;
use support::{ms, no_jitter, reset_on_first};

/// The exporter, installed once as the global recorder, its help texts described.
fn exporter() -> &'static PrometheusHandle {
    static EXPORTER: OnceLock<PrometheusHandle> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let handle = PrometheusBuilder::new().install_recorder().unwrap();
        MetricsFacade::describe();
        handle
    })
}

/// The value of the sample `series` (name and labels, as rendered) in `text`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_scrape_shows_the_calls_attempts_and_their_durations() {
    let exporter = exporter();
    let policy = Policy::builder("inventory")
        .backoff(no_jitter())
        .build()
        .unwrap();
    let facade = MetricsFacade::for_policy(&policy);
    let policy = policy.with_listener(facade);
    let start = TokioInstant::now();
    let r = policy.call(|attempt| reset_on_first(attempt, ms(30))).await;
    assert_eq!(r, Ok(2));
    let took = start.elapsed().as_secs_f64();
    policy.isolate();
    assert!(policy.call(|_| async { Ok::<_, &str>(0) }).await.is_err());

    let text = exporter.render();
    let b = r#"breaker="inventory""#;
    assert_eq!(
        sample(
            &text,
            &format!(r#"stormguard_calls_total{{{b},result="succeeded"}}"#)
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!(r#"stormguard_calls_total{{{b},result="rejected"}}"#)
        ),
        1.0
    );
    assert_eq!(
        sample(&text, &format!("stormguard_attempts_total{{{b}}}")),
        2.0
    );
    assert_eq!(
        sample(&text, &format!("stormguard_retries_total{{{b}}}")),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!(r#"stormguard_rejections_total{{{b},reason="isolated"}}"#)
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!(r#"stormguard_state_changes_total{{{b},to="isolated"}}"#)
        ),
        1.0
    );
    // Each attempt at its own 30 ms, by outcome; the call at its whole length, backoff
    // included; the refused call at the guarded pause it served.
    for outcome in ["transient", "success"] {
        let series =
            format!(r#"stormguard_attempt_duration_seconds_sum{{{b},outcome="{outcome}"}}"#);
        assert!((sample(&text, &series) - 0.030).abs() < 1e-9, "{series}");
    }
    let call = |result: &str, what: &str| {
        sample(
            &text,
            &format!(r#"stormguard_call_duration_seconds_{what}{{{b},result="{result}"}}"#),
        )
    };
    assert_eq!(call("succeeded", "count"), 1.0);
    assert!((call("succeeded", "sum") - took).abs() < 1e-9, "{took}");
    assert!(took > 0.060, "two attempts and a backoff");
    assert!((call("rejected", "sum") - 0.100).abs() < 1e-9);
    // Only the histograms that had a sample are series.
    assert!(!text.contains(&format!(
        r#"stormguard_call_duration_seconds_count{{{b},result="failed"}}"#
    )));
    assert!(!text.contains(&format!(
        r#"stormguard_attempt_duration_seconds_count{{{b},outcome="timed_out"}}"#
    )));
    // The help texts, from `describe`.
    assert!(text.contains("# HELP stormguard_calls_total Calls ended, by result."));
    assert!(text.contains("# HELP stormguard_call_duration_seconds Call durations"));
}

#[tokio::test(start_paused = true)]
async fn a_scrape_shows_the_bulkheads_waits_and_leases() {
    let exporter = exporter();
    let bulkhead = Bulkhead::new(
        BulkheadSettings::builder("db")
            .max_in_flight(1)
            .bounded_wait(1, stormguard_std::Duration::from_millis(500))
            .build()
            .unwrap(),
    );
    let policy = Policy::builder("db").bulkhead(bulkhead).build().unwrap();
    let facade = MetricsFacade::for_policy(&policy);
    let policy = Arc::new(policy.with_listener(facade));
    let holder = {
        let p = Arc::clone(&policy);
        tokio::spawn(async move {
            p.call(|_| async {
                sleep(ms(100)).await;
                Ok::<_, &str>(1)
            })
            .await
        })
    };
    tokio::task::yield_now().await;
    let waited = policy
        .call(|_| async {
            sleep(ms(40)).await;
            Ok::<_, &str>(2)
        })
        .await;
    assert_eq!(waited, Ok(2));
    assert_eq!(holder.await.unwrap(), Ok(1));

    let text = exporter.render();
    let b = r#"breaker="db""#;
    let wait = |what: &str| {
        sample(
            &text,
            &format!(r#"stormguard_slot_wait_seconds_{what}{{{b},entered="true"}}"#),
        )
    };
    assert_eq!(wait("count"), 1.0, "the holder found its slot free");
    assert!((wait("sum") - 0.100).abs() < 1e-9);
    let lease = |what: &str| sample(&text, &format!("stormguard_lease_seconds_{what}{{{b}}}"));
    assert_eq!(lease("count"), 2.0);
    assert!((lease("sum") - 0.140).abs() < 1e-9, "100 ms and 40 ms held");
}

#[tokio::test(start_paused = true)]
async fn published_gauges_list_each_host_of_a_keyed_table() {
    let exporter = exporter();
    let template = Policy::builder("hosts")
        .breaker(Breaker::of(1, "hosts").unwrap())
        .max_attempts(1)
        .build()
        .unwrap();
    let hosts = KeyedPolicy::<String>::new(template, 8).unwrap();
    let registry = Registry::new();
    registry.add_keyed(&hosts);
    let _ = hosts
        .call(&"up.example".to_owned(), |_| async { Ok::<_, &str>(()) })
        .await;
    let _ = hosts
        .call(&"down.example".to_owned(), |_| async {
            Err::<(), _>("reset")
        })
        .await;
    MetricsFacade::publish(&registry.report());

    let text = exporter.render();
    let state = |key: &str, state: &str| {
        sample(
            &text,
            &format!(r#"stormguard_breaker_state{{breaker="hosts",key="{key}",state="{state}"}}"#),
        )
    };
    assert_eq!(state("down.example", "open"), 1.0);
    assert_eq!(state("down.example", "closed"), 0.0);
    assert_eq!(state("up.example", "closed"), 1.0);
    assert_eq!(state("up.example", "open"), 0.0);
}
