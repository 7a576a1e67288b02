//! A dependency that is down but answers `503` with `Retry-After: 0` is failing, not throttling:
//! through the tower layer its breaker opens within a few calls, and the calls that follow send
//! only the breaker's probes. A dependency asking for a real wait is paced, never tripped.
//! On tokio's paused clock.
#![cfg(feature = "tower")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use stormguard_core::State;
use stormguard_std::tower::PolicyLayer;
use stormguard_std::{Breaker, Policy};
use tower::{service_fn, Layer, Service, ServiceExt};

use crate::support::{ms, no_jitter};

/// A service answering every request with 503 and `retry-after: {retry_after}`, counting them.
fn unavailable(
    retry_after: &'static str,
    requests: Arc<AtomicU64>,
) -> impl Service<Request<()>, Response = Response<()>, Error = Infallible, Future: Send>
       + Clone
       + Send
       + 'static {
    service_fn(move |_req: Request<()>| {
        requests.fetch_add(1, Ordering::Relaxed);
        async move {
            tokio::time::sleep(ms(20)).await;
            let mut r = Response::new(());
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            r.headers_mut()
                .insert("retry-after", retry_after.parse().unwrap());
            Ok(r)
        }
    })
}

/// Runs `calls` requests through a default policy's layer over a service answering 503 with
/// `retry-after: {retry_after}`, one every 100 ms; the breaker and the requests sent.
async fn run(retry_after: &'static str, calls: u64) -> (Breaker, u64) {
    let policy = Policy::builder("upstream")
        .backoff(no_jitter())
        .build()
        .unwrap();
    let breaker = policy.breaker().unwrap().clone();
    let requests = Arc::new(AtomicU64::new(0));
    let client = PolicyLayer::new(policy).layer(unavailable(retry_after, requests.clone()));
    for _ in 0..calls {
        let r = client
            .clone()
            .oneshot(Request::get("/").body(()).unwrap())
            .await;
        // A call that ran out of attempts or of deadline hands back the last 503; a refused
        // one is an error.
        if let Ok(r) = r {
            assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
        tokio::time::sleep(ms(100)).await;
    }
    (breaker, requests.load(Ordering::Relaxed))
}

#[tokio::test(start_paused = true)]
async fn a_503_with_retry_after_zero_through_the_layer_trips_the_breaker_within_a_few_calls() {
    for calls in 1..=5 {
        let (breaker, _) = run("0", calls).await;
        if breaker.state() == State::Open {
            // The default breaker opens on 5 failures in a row: two calls of 3 attempts.
            assert_eq!(calls, 2, "{:?}", breaker.snapshot());
            return;
        }
    }
    panic!("5 calls against a 503 with Retry-After: 0 left the breaker closed");
}

#[tokio::test(start_paused = true)]
async fn a_503_with_retry_after_zero_costs_the_dependency_far_fewer_requests_than_calls() {
    // Before the fix 1,000 calls sent 1,355 requests (only the retry budget bounded them);
    // now the breaker stands between them, and only its probes reach the dependency.
    let (breaker, requests) = run("0", 1_000).await;
    eprintln!("1,000 calls against 503 + Retry-After: 0 sent {requests} requests");
    assert!(requests < 100, "{requests} requests for 1,000 calls");
    assert_ne!(breaker.state(), State::Closed, "{:?}", breaker.snapshot());
}

#[tokio::test(start_paused = true)]
async fn a_503_asking_for_a_real_wait_is_paced_and_never_trips_the_breaker() {
    // `Retry-After: 60` does not fit the call's deadline: each call sends one request and
    // hands back the 503, and the breaker counts none of them as the dependency's failure.
    let (breaker, requests) = run("60", 200).await;
    assert_eq!(requests, 200);
    assert_eq!(breaker.state(), State::Closed, "{:?}", breaker.snapshot());
}
