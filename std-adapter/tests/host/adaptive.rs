//! The adaptive concurrency limiter as a policy's step, on tokio's paused clock: every attempt
//! holds a slot, a refusal is the self-imposed throttle, the limit learns from the calls'
//! latencies, and its limit and baseline show in explain, health and metrics.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::Arc;

use stormguard_core::{Duration, RefusalReason, GUARD_PAUSE};
use stormguard_std::{
    health::{Registry, Status},
    AdaptiveLimit, AdaptiveLimitSettings, Metrics, Policy,
};
use tokio::time::{sleep, Instant as TokioInstant};

use crate::support::ms;

fn limit(min: u32, max: u32, initial: u32) -> AdaptiveLimit {
    AdaptiveLimit::new(
        AdaptiveLimitSettings::builder("db")
            .limits(min, max)
            .initial_limit(initial)
            .build()
            .unwrap(),
    )
}

/// One round: `callers` calls at once, each taking `latency`; returns how many the limit
/// refused.
async fn round<L: stormguard_std::Listener + Clone + Send + Sync + 'static>(
    policy: &Arc<Policy<stormguard_std::DefaultClock, L>>,
    callers: u32,
    latency: std::time::Duration,
) -> u32 {
    let calls: Vec<_> = (0..callers)
        .map(|_| {
            let p = policy.clone();
            tokio::spawn(async move {
                p.call(|_| async move {
                    sleep(latency).await;
                    Ok::<_, &str>(())
                })
                .await
            })
        })
        .collect();
    let mut refused = 0;
    for c in calls {
        if let Err(e) = c.await.unwrap() {
            assert_eq!(
                e.rejection().unwrap().reason,
                RefusalReason::ConcurrencyLimited
            );
            refused += 1;
        }
    }
    refused
}

#[tokio::test(start_paused = true)]
async fn a_full_limit_refuses_an_attempt_as_the_guarded_rejection() {
    let adaptive = limit(1, 10, 1);
    let policy = Arc::new(
        Policy::builder("db")
            .max_attempts(1)
            .adaptive_limit(adaptive.clone())
            .build()
            .unwrap(),
    );
    let metrics = Metrics::for_policy(&policy);
    let counted = Arc::new((*policy).clone().with_listener(metrics.clone()));
    let holder = {
        let p = counted.clone();
        tokio::spawn(async move {
            p.call(|_| async {
                sleep(ms(1_000)).await;
                Ok::<_, &str>(())
            })
            .await
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(adaptive.in_flight(), 1);
    let start = TokioInstant::now();
    let r = counted.call(|_| async { Ok::<_, &str>(()) }).await;
    assert_eq!(start.elapsed(), ms(100), "only the guarded pause");
    let rejection = *r.unwrap_err().rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::ConcurrencyLimited);
    assert_eq!(rejection.pause, GUARD_PAUSE);
    assert_eq!(metrics.snapshot().rejected_for("concurrency_limited"), 1);
    assert!(metrics
        .to_prometheus()
        .contains("stormguard_rejections_total{breaker=\"db\",reason=\"concurrency_limited\"} 1"));
    holder.await.unwrap().unwrap();
    // The held call's success ended a round that held a call back: the limit grew.
    assert_eq!((adaptive.in_flight(), adaptive.limit()), (0, 2));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_gives_its_slot_back() {
    let adaptive = limit(1, 10, 2);
    let policy = Policy::builder("db")
        .adaptive_limit(adaptive.clone())
        .build()
        .unwrap();
    let call = policy.call(|_| async {
        sleep(ms(1_000)).await;
        Ok::<_, &str>(())
    });
    let r = tokio::time::timeout(ms(10), call).await;
    assert!(r.is_err(), "the call was still running");
    assert_eq!(adaptive.in_flight(), 0);
    assert_eq!(
        adaptive.snapshot().round_calls,
        0,
        "a cancellation counts nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn the_limit_grows_while_it_holds_calls_back_and_shrinks_when_the_dependency_queues() {
    let adaptive = limit(2, 50, 4);
    let policy = Arc::new(
        Policy::builder("db")
            .no_breaker()
            .no_budget()
            .max_attempts(1)
            .adaptive_limit(adaptive.clone())
            .build()
            .unwrap(),
    );
    // Healthy at 10 ms, one caller more than the limit each round: it grows by one a round.
    for expected in 5..=12 {
        let refused = round(&policy, adaptive.limit() + 1, ms(10)).await;
        assert_eq!(refused, 1);
        assert_eq!(adaptive.limit(), expected);
    }
    let base = adaptive.baseline().unwrap();
    assert!(base >= Duration::from_millis(10) && base <= Duration::from_micros(11_250));
    // The dependency queues: 40 ms, above 2x the baseline. The limit shrinks by a tenth a
    // round, however many callers it holds back.
    let mut expected = 12;
    for _ in 0..4 {
        round(&policy, adaptive.limit() + 3, ms(40)).await;
        expected = (expected * 9 / 10).max(2);
        assert_eq!(adaptive.limit(), expected);
    }
    // Nothing in flight between rounds.
    assert_eq!(adaptive.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn explain_health_and_metrics_read_the_limit_and_the_baseline() {
    let adaptive = limit(2, 50, 3);
    let policy = Arc::new(
        Policy::builder("db")
            .no_breaker()
            .max_attempts(1)
            .adaptive_limit(adaptive.clone())
            .build()
            .unwrap(),
    );
    let health = Registry::new();
    health.register(&policy);
    let metrics = Metrics::for_policy(&policy);
    let before = metrics.to_prometheus();
    assert!(
        before.contains("stormguard_adaptive_limit{limiter=\"db\"} 3"),
        "{before}"
    );
    assert!(!before.contains("stormguard_adaptive_baseline_seconds"));
    assert!(policy
        .explain()
        .to_string()
        .contains("- measured now: adaptive limit 3 (0 in flight), no latency baseline yet"));

    round(&policy, 4, ms(10)).await;
    assert_eq!(adaptive.limit(), 4);
    let text = policy.explain().to_string();
    assert!(
        text.contains(
            "- measured now: adaptive limit 4 (0 in flight), latency baseline (p10) 10.48"
        ),
        "{text}"
    );
    let snap = metrics.snapshot();
    assert_eq!(snap.adaptive_limit, Some(4));
    assert!((snap.adaptive_baseline.unwrap() - 0.010_485_76).abs() < 1e-9);
    let report = health.report();
    assert_eq!(report.adaptive.len(), 1);
    assert_eq!(
        (report.adaptive[0].limit, report.adaptive[0].status),
        (4, Status::Healthy)
    );

    // Shrunk to its minimum by a dependency that queues: degraded.
    while adaptive.limit() > 2 {
        round(&policy, adaptive.limit(), ms(100)).await;
    }
    let report = health.report();
    assert_eq!(report.adaptive[0].status, Status::Degraded);
    assert_eq!(report.status, Status::Degraded);
}
