//! Fault injection through a policy and through the tower layer, on tokio's paused clock: what
//! is injected is classified, retried, counted by the breaker and budget like a real fault, and
//! the same seed injects the same faults.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::time::Duration;

use stormguard_core::{policy::ChaosSettings, Backoff, Jitter, Ratio, RefusalReason, State};
use stormguard_std::testing::{EventRecorder, Script};
use stormguard_std::{CallError, Chaos, Policy};

#[derive(Clone, Debug, PartialEq)]
enum Error {
    Injected,
}

fn faults(percent: u32, seed: u64) -> ChaosSettings {
    ChaosSettings::builder()
        .faults(Ratio::from_percent(percent).unwrap())
        .seed(seed)
        .build()
        .unwrap()
}

fn quick() -> Backoff {
    Backoff::builder().jitter(Jitter::None).build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn injected_faults_are_retried_and_the_same_seed_injects_the_same_ones() {
    let run = || async {
        let chaos = Chaos::new(faults(30, 5));
        let recorder = EventRecorder::new();
        let policy = Policy::builder("orders")
            .no_breaker()
            .no_budget()
            .backoff(quick())
            .listener(recorder.clone())
            .build()
            .unwrap();
        let mut failed = 0u64;
        for _ in 0..500 {
            match policy
                .call(|_| chaos.run(async { Ok::<_, Error>(()) }, || Error::Injected))
                .await
            {
                Ok(()) => {}
                Err(CallError::Failed { .. }) => failed += 1,
                Err(other) => panic!("{other:?}"),
            }
        }
        (chaos.counts(), recorder.count("retry") as u64, failed)
    };
    let (counts, retries, failed) = run().await;
    // Every injected fault was either retried or, on the last attempt, the call's failure.
    assert_eq!(counts.faults, retries + failed);
    assert_eq!(counts.rolls, 500 + retries);
    // 30% per attempt: about 150 first attempts fail, 2.7% of calls fail all three.
    assert!((100..200).contains(&retries.min(counts.faults)), "{counts}");
    assert!(failed < 40, "{failed} of 500 failed");
    assert_eq!(run().await, (counts, retries, failed));
}

#[tokio::test(start_paused = true)]
async fn a_breaker_trips_on_injected_faults_and_then_nothing_is_rolled() {
    let chaos = Chaos::new(faults(100, 1));
    let recorder = EventRecorder::new();
    let policy = Policy::builder("payments")
        .no_budget()
        .max_attempts(1)
        .listener(recorder.clone())
        .build()
        .unwrap();
    for _ in 0..20 {
        let _ = policy
            .call(|_| chaos.run(async { Ok::<_, Error>(()) }, || Error::Injected))
            .await;
    }
    // The default consecutive rule: five failures trip it; the rest are refused unrolled.
    assert_eq!(chaos.counts().faults, 5);
    assert_eq!(policy.breaker().unwrap().state(), State::Open);
    assert!(recorder
        .refusals()
        .iter()
        .all(|r| *r == RefusalReason::BreakerOpen));
    assert_eq!(recorder.refusals().len(), 15);
}

#[tokio::test(start_paused = true)]
async fn injected_latency_past_the_attempt_timeout_is_a_timeout() {
    let chaos = Chaos::new(
        ChaosSettings::builder()
            .latency(Ratio::ONE, Duration::from_secs(3).into())
            .build()
            .unwrap(),
    );
    let policy = Policy::builder("slow")
        .no_breaker()
        .no_budget()
        .max_attempts(2)
        .attempt_timeout(Duration::from_secs(1))
        .backoff(quick())
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let r = policy
        .call(|_| chaos.run(async { Ok::<_, Error>(1) }, || Error::Injected))
        .await;
    assert!(matches!(r, Err(CallError::TimedOut { .. })), "{r:?}");
    assert_eq!(chaos.counts().slowed, 2);
    // Two attempts cut at 1 s each, and the backoff between them.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_closed_gate_injects_nothing_and_takes_no_roll() {
    let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = open.clone();
    let chaos =
        Chaos::new(faults(100, 3)).gate(move || gate.load(std::sync::atomic::Ordering::Relaxed));
    let policy = Policy::builder("tenants").no_budget().build().unwrap();
    let script = Script::new([Ok::<u8, Error>(1)]);
    for _ in 0..10 {
        let r = policy
            .call(|_| chaos.run(script.next(), || Error::Injected))
            .await;
        assert_eq!(r, Ok(1));
    }
    assert_eq!(chaos.counts().rolls, 0);
    open.store(true, std::sync::atomic::Ordering::Relaxed);
    let r = policy
        .call(|_| chaos.run(script.next(), || Error::Injected))
        .await;
    assert!(matches!(r, Err(CallError::Failed { .. })));
    assert_eq!(chaos.counts().rolls, 3);
    // The script was asked only for attempts the chaos let through.
    assert_eq!(script.calls(), 10);
}

#[cfg(feature = "tower")]
mod layer {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use http::{Request, Response, StatusCode};
    use stormguard_std::chaos::{ChaosLayer, INJECTED_HEADER};
    use stormguard_std::tower::PolicyLayer;
    use tower::{service_fn, Layer, ServiceExt};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_layer_inside_the_policy_injects_503s_the_policy_retries() {
        let hits = Arc::new(AtomicU32::new(0));
        let seen = hits.clone();
        let service = service_fn(move |_: Request<String>| {
            seen.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, Infallible>(Response::new(String::from("ok"))) }
        });
        let chaos = Chaos::new(faults(40, 9));
        let policy = Policy::builder("catalog")
            .no_breaker()
            .no_budget()
            .backoff(quick())
            .build()
            .unwrap();
        let client = PolicyLayer::new(policy).layer(
            ChaosLayer::new(chaos.clone())
                .gate(|_, uri, _| uri.path() != "/health")
                .layer(service),
        );
        let mut statuses = Vec::new();
        for path in ["/items"; 200] {
            let request = Request::get(path).body(String::new()).unwrap();
            let response = client.clone().oneshot(request).await.unwrap();
            if response.status() != StatusCode::OK {
                assert_eq!(response.headers()[INJECTED_HEADER], "fault");
            }
            statuses.push(response.status());
        }
        let counts = chaos.counts();
        // Every request that was not injected reached the service; every injected one was a
        // 503 the policy retried (a GET), or the last attempt's answer.
        assert_eq!(
            u64::from(hits.load(Ordering::Relaxed)),
            counts.rolls - counts.faults
        );
        assert_eq!(
            hits.load(Ordering::Relaxed),
            statuses.iter().filter(|s| **s == StatusCode::OK).count() as u32
        );
        assert!(counts.rolls > 200, "{counts}");
        // The gate keeps a route out.
        let before = chaos.counts().rolls;
        for _ in 0..20 {
            let request = Request::get("/health").body(String::new()).unwrap();
            assert_eq!(
                client.clone().oneshot(request).await.unwrap().status(),
                StatusCode::OK
            );
        }
        assert_eq!(chaos.counts().rolls, before);
    }
}
