//! A caller's own short deadline is no evidence against a healthy dependency: through the
//! policy and through the tower layer (which adopts a remote caller's deadline from a header),
//! calls that ask for an answer sooner than the dependency gives one end as the caller's
//! deadline, and the breaker stays closed for everyone else (DESIGN.md, "Rules under noise").
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use stormguard_core::State;
use stormguard_std::{Breaker, CallError, CallOptions, Policy};

use crate::support::ms;

/// A healthy dependency: every call answers in 20 ms.
async fn healthy(_: u32) -> Result<u32, &'static str> {
    tokio::time::sleep(ms(20)).await;
    Ok(7)
}

/// The breaker saw no failure: closed, no run of failures, none in its window.
fn untouched(breaker: &Breaker) {
    let s = breaker.snapshot();
    assert_eq!(breaker.state(), State::Closed, "{s:?}");
    assert_eq!(s.consecutive_failures, 0, "{s:?}");
    assert_eq!(s.window_failures, 0, "{s:?}");
}

/// Ten calls cut by their own 5 ms deadline end so, at that deadline, and leave `breaker` as
/// it was; the next call is served.
async fn cut_calls_leave_it_closed(policy: &Policy, breaker: &Breaker) {
    for _ in 0..10 {
        let start = tokio::time::Instant::now();
        let r = policy
            .call_with(CallOptions::new().within(ms(5)), healthy)
            .await;
        assert_eq!(r, Err(CallError::DeadlineExceeded { last: None }));
        assert_eq!(start.elapsed(), ms(5), "cut at the caller's deadline");
    }
    untouched(breaker);
    assert_eq!(policy.call(healthy).await, Ok(7));
}

#[tokio::test(start_paused = true)]
async fn calls_within_5ms_of_a_healthy_20ms_dependency_leave_the_policys_breaker_closed() {
    // The default breaker opens on 5 failures in a row: ten calls cut by their own 5 ms
    // deadlines would open it twice over if they counted against the dependency.
    let policy = Policy::builder("ledger").build().unwrap();
    let breaker = policy.breaker().unwrap().clone();
    for _ in 0..30 {
        assert_eq!(policy.call(healthy).await, Ok(7));
    }
    // 30 samples of 20 ms: the learned median (and the slow-call threshold, 3x it) is armed.
    assert!(breaker.snapshot().normal_latency.is_some());
    cut_calls_leave_it_closed(&policy, &breaker).await;
}

#[tokio::test(start_paused = true)]
async fn calls_within_5ms_of_a_healthy_20ms_dependency_leave_a_cold_breaker_closed() {
    // No call has taught the breaker its dependency's latency yet: a cut shorter than the 50 ms
    // floor of a slow call is still the caller's own hurry, however early it comes.
    let policy = Policy::builder("ledger").build().unwrap();
    let breaker = policy.breaker().unwrap().clone();
    assert!(breaker.snapshot().normal_latency.is_none());
    cut_calls_leave_it_closed(&policy, &breaker).await;
}

#[cfg(feature = "tower")]
mod tower_layer {
    use std::convert::Infallible;

    use http::{Request, Response, StatusCode};
    use stormguard_std::tower::{PolicyLayer, DEADLINE_HEADER};
    use stormguard_std::{CallError, Policy};
    use tower::{Layer, ServiceExt};

    use super::{ms, untouched};

    fn request(deadline_ms: Option<&str>) -> Request<()> {
        let mut r = Request::get("/balance");
        if let Some(d) = deadline_ms {
            r = r.header(DEADLINE_HEADER, d);
        }
        r.body(()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn requests_asking_for_5ms_of_a_20ms_service_leave_the_layers_breaker_closed() {
        let policy = Policy::builder("ledger").build().unwrap();
        let breaker = policy.breaker().unwrap().clone();
        let service = tower::service_fn(|_req: Request<()>| async {
            tokio::time::sleep(ms(20)).await;
            Ok::<_, Infallible>(Response::new(()))
        });
        let client = PolicyLayer::new(policy).adopt_deadline().layer(service);
        for _ in 0..30 {
            let r = client.clone().oneshot(request(None)).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
        }
        assert!(breaker.snapshot().normal_latency.is_some());
        // Remote callers that give this hop 5 ms: each request ends at its adopted deadline.
        for _ in 0..10 {
            let start = tokio::time::Instant::now();
            let r = client.clone().oneshot(request(Some("5"))).await;
            assert_eq!(r.unwrap_err(), CallError::DeadlineExceeded { last: None });
            assert_eq!(start.elapsed(), ms(5));
        }
        untouched(&breaker);
        // A caller with no such hurry is served.
        let r = client.clone().oneshot(request(None)).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_asking_for_5ms_of_a_20ms_service_leave_a_cold_layers_breaker_closed() {
        // The first requests this layer sees carry 5 ms deadlines: nothing learned yet.
        let policy = Policy::builder("ledger").build().unwrap();
        let breaker = policy.breaker().unwrap().clone();
        let service = tower::service_fn(|_req: Request<()>| async {
            tokio::time::sleep(ms(20)).await;
            Ok::<_, Infallible>(Response::new(()))
        });
        let client = PolicyLayer::new(policy).adopt_deadline().layer(service);
        assert!(breaker.snapshot().normal_latency.is_none());
        for _ in 0..10 {
            let start = tokio::time::Instant::now();
            let r = client.clone().oneshot(request(Some("5"))).await;
            assert_eq!(r.unwrap_err(), CallError::DeadlineExceeded { last: None });
            assert_eq!(start.elapsed(), ms(5));
        }
        untouched(&breaker);
        let r = client.clone().oneshot(request(None)).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
}
