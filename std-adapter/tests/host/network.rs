//! A real network: an axum server on 127.0.0.1 that fails, slows down and throttles on
//! command, called through the tower layer by a real hyper client. Loopback only, bounded in
//! count and time, stops by itself.
#![cfg(feature = "tower")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_possible_truncation,
    missing_docs
)]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use axum::extract::State as AxumState;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stormguard_core::{
    Backoff, BreakerSettings, BudgetSettings, Duration, Event, Jitter, State, TripReason,
};
use stormguard_std::tower::{PolicyLayer, PolicyService, DEADLINE_HEADER};
use stormguard_std::{Breaker, Budget, CallError, Listener, Policy};
use tower::{Layer, ServiceExt};

const HEALTHY: u8 = 0;
const FAILING: u8 = 1;
const SLOW: u8 = 2;

/// The dependency: its behaviour is set on command; it counts every request it serves.
#[derive(Default)]
struct Dependency {
    mode: AtomicU8,
    throttle_next: AtomicBool,
    requests: AtomicU64,
    /// The deadline header of the last request, in milliseconds (`u64::MAX`: none).
    deadline_ms: AtomicU64,
}

async fn item(AxumState(dep): AxumState<Arc<Dependency>>, headers: HeaderMap) -> Response {
    dep.requests.fetch_add(1, Ordering::SeqCst);
    let deadline = headers
        .get(DEADLINE_HEADER)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(u64::MAX);
    dep.deadline_ms.store(deadline, Ordering::SeqCst);
    if dep.throttle_next.swap(false, Ordering::SeqCst) {
        let mut r = (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response();
        r.headers_mut()
            .insert("retry-after", HeaderValue::from_static("1"));
        return r;
    }
    match dep.mode.load(Ordering::SeqCst) {
        FAILING => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
        SLOW => {
            tokio::time::sleep(StdDuration::from_millis(150)).await;
            (StatusCode::OK, "slowly").into_response()
        }
        _ => (StatusCode::OK, "ok").into_response(),
    }
}

/// Serves on an ephemeral loopback port until the test's runtime ends.
async fn serve(dep: Arc<Dependency>) -> String {
    let app = Router::new()
        .route("/item", get(item).post(item).put(item))
        .with_state(dep);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/item")
}

type Transitions = Vec<(State, Option<TripReason>)>;

#[derive(Clone, Default)]
struct Trips(Arc<Mutex<Transitions>>);

impl Listener for Trips {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::StateChanged { to, reason, .. } = event {
            self.0.lock().unwrap().push((*to, *reason));
        }
    }
}

type Guarded =
    PolicyService<Client<HttpConnector, Full<Bytes>>, stormguard_std::DefaultClock, Trips>;

async fn send(client: &Guarded, url: &str, method: Method) -> Result<StatusCode, String> {
    let req = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::new()))
        .unwrap();
    match client.clone().oneshot(req).await {
        Ok(response) => Ok(response.status()),
        Err(CallError::Rejected { rejection, .. }) => Err(format!(
            "rejected {} {}",
            rejection.reason,
            rejection.retry_after.as_millis()
        )),
        Err(other) => Err(other.to_string()),
    }
}

/// Calls `GET` until the breaker is closed again after the dependency healed.
async fn heal(client: &Guarded, url: &str, breaker: &Breaker, retry_after_ms: u64) {
    tokio::time::sleep(StdDuration::from_millis(retry_after_ms + 20)).await;
    assert_eq!(breaker.state(), State::HalfOpen);
    for _ in 0..10 {
        if breaker.state() == State::Closed {
            return;
        }
        let _ = send(client, url, Method::GET).await;
    }
    assert_eq!(breaker.state(), State::Closed);
}

fn retry_after_ms(e: &str) -> u64 {
    e.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_protects_a_real_http_dependency() {
    tokio::time::timeout(StdDuration::from_secs(30), scenario())
        .await
        .expect("the network scenario is bounded in time");
}

async fn scenario() {
    let dep = Arc::new(Dependency::default());
    let url = serve(dep.clone()).await;
    let requests = || dep.requests.load(Ordering::SeqCst);

    let breaker = Breaker::new(
        BreakerSettings::builder("inventory")
            .consecutive_failures(5)
            .failure_rate(None)
            .slow_calls(None)
            .slow_threshold(Some(Duration::from_millis(50)))
            .minimum_calls(10)
            .trip_window(Duration::from_secs(2))
            .break_duration(Duration::from_millis(300))
            .max_break(Duration::from_millis(300))
            .jitter(false)
            .build()
            .unwrap(),
    );
    // A small budget, so that the server's counter can show it holding: 10 tokens, refilled
    // at 1 per second and by a tenth of a retry per success.
    let budget = Budget::new(
        BudgetSettings::builder("inventory")
            .floor_per_second(1.0)
            .build()
            .unwrap(),
    );
    let trips = Trips::default();
    let policy = Policy::builder("inventory")
        .breaker(breaker.clone())
        .budget(budget.clone())
        .max_attempts(3)
        .attempt_timeout(StdDuration::from_secs(1))
        .deadline(StdDuration::from_secs(5))
        .backoff(
            Backoff::builder()
                .base(Duration::from_millis(5))
                .jitter(Jitter::None)
                .build()
                .unwrap(),
        )
        .listener(trips.clone())
        .build()
        .unwrap();
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    // One breaker for the dependency (the handle the scenario reads), not one per host.
    let client: Guarded = PolicyLayer::new(policy).single_scope().layer(hyper);

    // Healthy: every call is one request.
    for _ in 0..10 {
        assert_eq!(send(&client, &url, Method::GET).await, Ok(StatusCode::OK));
    }
    assert_eq!(requests(), 10);

    // A POST is never retried, whatever the server says.
    dep.mode.store(FAILING, Ordering::SeqCst);
    assert_eq!(
        send(&client, &url, Method::POST).await,
        Ok(StatusCode::INTERNAL_SERVER_ERROR)
    );
    assert_eq!(requests(), 11);
    dep.mode.store(HEALTHY, Ordering::SeqCst);
    assert_eq!(send(&client, &url, Method::GET).await, Ok(StatusCode::OK));
    assert_eq!(requests(), 12);

    // 429 with Retry-After: the hint is honoured, and throttling is not a failure.
    dep.throttle_next.store(true, Ordering::SeqCst);
    let start = StdInstant::now();
    assert_eq!(send(&client, &url, Method::GET).await, Ok(StatusCode::OK));
    assert!(start.elapsed() >= StdDuration::from_secs(1));
    assert_eq!(requests(), 14);
    assert_eq!(breaker.snapshot().consecutive_failures, 0);

    // Errors: the breaker opens after 5 consecutive failures; retries stay in the budget.
    dep.mode.store(FAILING, Ordering::SeqCst);
    let before = requests();
    let available = u64::from(budget.available());
    let start = StdInstant::now();
    let mut calls = 0;
    let refusal = loop {
        calls += 1;
        assert!(calls <= 10, "the breaker never opened");
        match send(&client, &url, Method::GET).await {
            Err(e) if e.starts_with("rejected") => break e,
            Ok(status) => assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR),
            Err(e) => panic!("{e}"),
        }
    };
    let retries = requests() - before - calls;
    let floor = start.elapsed().as_secs() + 1;
    assert!(
        retries <= available + floor,
        "{retries} retries, {available} in the budget"
    );
    assert!(refusal.starts_with("rejected breaker_open"), "{refusal}");
    assert_eq!(breaker.state(), State::Open);
    // While open, nothing reaches the server; every refusal says when to come back.
    let seen = requests();
    let refusal = send(&client, &url, Method::GET).await.unwrap_err();
    assert!(refusal.starts_with("rejected breaker_open"), "{refusal}");
    let after = retry_after_ms(&refusal);
    assert!(after > 0 && after <= 300, "{refusal}");
    assert_eq!(requests(), seen);

    // The server heals: the breaker half-opens, probes, and closes.
    dep.mode.store(HEALTHY, Ordering::SeqCst);
    heal(&client, &url, &breaker, after).await;

    // A brownout: every answer is a success, but slow. The breaker opens on slow calls.
    dep.mode.store(SLOW, Ordering::SeqCst);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (client, url) = (client.clone(), url.clone());
        set.spawn(async move { send(&client, &url, Method::GET).await });
    }
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap(), Ok(StatusCode::OK));
    }
    assert_eq!(breaker.state(), State::Open);
    assert_eq!(
        trips.0.lock().unwrap().last(),
        Some(&(State::Open, Some(TripReason::SlowCalls)))
    );
    let refusal = send(&client, &url, Method::GET).await.unwrap_err();
    assert!(refusal.starts_with("rejected breaker_open"), "{refusal}");

    dep.mode.store(HEALTHY, Ordering::SeqCst);
    heal(&client, &url, &breaker, retry_after_ms(&refusal)).await;
    assert_eq!(send(&client, &url, Method::GET).await, Ok(StatusCode::OK));

    let reasons: Vec<_> = trips.0.lock().unwrap().clone();
    assert!(reasons.contains(&(State::Open, Some(TripReason::ConsecutiveFailures))));
    assert!(reasons.iter().any(|r| r.0 == State::HalfOpen));
    assert_eq!(reasons.iter().filter(|r| r.0 == State::Closed).count(), 2);
}

/// A `reqwest::Client` behind the layer, against the same server: a failing GET is retried
/// while the budget lasts, a POST and a request with a streaming body get one attempt each,
/// and every attempt carries the remaining deadline.
#[cfg(feature = "reqwest")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reqwest_client_behind_the_layer() {
    tokio::time::timeout(StdDuration::from_secs(30), reqwest_scenario())
        .await
        .expect("the reqwest scenario is bounded in time");
}

#[cfg(feature = "reqwest")]
async fn reqwest_scenario() {
    use tower::ServiceBuilder;

    let dep = Arc::new(Dependency::default());
    let url = serve(dep.clone()).await;
    let requests = || dep.requests.load(Ordering::SeqCst);
    // No breaker, so that only the budget stops the retries: 10 tokens, refilled at 1 per
    // second.
    let budget = Budget::new(
        BudgetSettings::builder("inventory")
            .floor_per_second(1.0)
            .build()
            .unwrap(),
    );
    let policy = Policy::builder("inventory")
        .no_breaker()
        .budget(budget.clone())
        .max_attempts(3)
        .deadline(StdDuration::from_secs(5))
        .backoff(
            Backoff::builder()
                .base(Duration::from_millis(5))
                .jitter(Jitter::None)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let reqwest = reqwest::Client::new();
    let client = ServiceBuilder::new()
        .layer(PolicyLayer::new(policy).propagate_deadline())
        .service(reqwest.clone());
    let send = |req: reqwest::Request| {
        let client = client.clone();
        async move {
            match client.oneshot(req).await {
                Ok(response) => Ok(response.status()),
                Err(CallError::Rejected { rejection, .. }) => Err(rejection.reason.to_string()),
                Err(e) => panic!("{e}"),
            }
        }
    };

    // Healthy: one request, carrying the deadline left (at most the call's 5 s).
    let get = || reqwest.get(&url).build().unwrap();
    assert_eq!(send(get()).await, Ok(StatusCode::OK));
    assert_eq!(requests(), 1);
    let deadline = dep.deadline_ms.load(Ordering::SeqCst);
    assert!(deadline <= 5_000, "deadline header: {deadline}");

    // Failing: a POST gets one attempt.
    dep.mode.store(FAILING, Ordering::SeqCst);
    let post = reqwest.post(&url).body("order").build().unwrap();
    assert_eq!(send(post).await, Ok(StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(requests(), 2);

    // A PUT is idempotent, but its streaming body cannot be sent twice: one attempt.
    let stream = reqwest::Body::wrap(Full::new(Bytes::from_static(b"blob")));
    let put = reqwest.put(&url).body(stream).build().unwrap();
    assert_eq!(send(put).await, Ok(StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(requests(), 3);

    // The same PUT with a buffered body is retried: all 3 attempts.
    let put = reqwest.put(&url).body("blob").build().unwrap();
    assert_eq!(send(put).await, Ok(StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(requests(), 6);

    // A reqwest request holds no slot of its own: its call runs in the slot's scope, and the
    // log of its three attempts is left there.
    let slot = stormguard_std::tower::AttemptSlot::new();
    let put = reqwest.put(&url).body("blob").build().unwrap();
    let status = slot.scope(send(put)).await;
    assert_eq!(status, Ok(StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(requests(), 9);
    let log = slot
        .take()
        .expect("the call left its log in the scope's slot");
    assert_eq!(log.len(), 3, "{log}");
    assert!(log.to_string().contains("transient failure"), "{log}");

    // GETs are retried until the budget runs dry (a call whose retry is refused then hands back
    // the 500 it got, at once), and no further.
    let available = u64::from(budget.available());
    let before = requests();
    let start = StdInstant::now();
    let calls = 10;
    let mut refused = 0;
    for _ in 0..calls {
        match send(get()).await {
            Ok(status) => assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR),
            Err(reason) => {
                assert_eq!(reason, "budget_exhausted");
                refused += 1;
            }
        }
    }
    assert_eq!(
        refused, 0,
        "a refused retry hands the answer back, not a rejection"
    );
    let retries = requests() - before - calls;
    let floor = start.elapsed().as_secs() + 1;
    assert!(retries >= available.min(2), "{retries} retries");
    assert!(
        retries <= available + floor,
        "{retries} retries, {available} in the budget"
    );
    assert!(
        retries < 2 * calls,
        "every GET was retried in full: no budget"
    );
}

/// A hyper client whose request body is boxed (not `Clone`, as a streaming or proxied body
/// is) goes behind the default layer: its requests get one attempt each, whatever the method,
/// while the same client's buffered `Full` requests are retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_body_that_cannot_be_copied_gets_one_attempt_per_request() {
    use http_body_util::combinators::BoxBody;
    use http_body_util::BodyExt;

    tokio::time::timeout(StdDuration::from_secs(30), async {
        let dep = Arc::new(Dependency::default());
        let url = serve(Arc::clone(&dep)).await;
        dep.mode.store(FAILING, Ordering::SeqCst);
        let policy = || {
            Policy::builder("boxed")
                .max_attempts(3)
                .backoff(
                    Backoff::builder()
                        .jitter(Jitter::None)
                        .base(Duration::from_millis(1))
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap()
        };
        let boxed = PolicyLayer::new(policy()).layer(
            Client::builder(TokioExecutor::new())
                .build::<_, BoxBody<Bytes, std::convert::Infallible>>(HttpConnector::new()),
        );
        let req = Request::get(&url)
            .body(Full::new(Bytes::from_static(b"")).boxed())
            .unwrap();
        let response = boxed.oneshot(req).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            dep.requests.load(Ordering::SeqCst),
            1,
            "one attempt: no copy to resend"
        );

        let full = PolicyLayer::new(policy()).layer(
            Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(HttpConnector::new()),
        );
        let req = Request::get(&url).body(Full::new(Bytes::new())).unwrap();
        let response = full.oneshot(req).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            dep.requests.load(Ordering::SeqCst),
            1 + 3,
            "a buffered GET: three attempts"
        );
    })
    .await
    .expect("bounded in time");
}
