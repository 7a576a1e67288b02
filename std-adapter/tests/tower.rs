//! The tower layer over a fake service on tokio's paused clock.
#![cfg(feature = "tower")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use http::{Method, Request, Response, StatusCode};
use stormguard_core::{Backoff, Jitter, State};
use stormguard_std::clock::TokioClock;
use stormguard_std::tower::{Idempotent, PolicyLayer, Requests, DEADLINE_HEADER, IDEMPOTENCY_KEY};
use stormguard_std::{Bulkhead, CallError, Clock, Metrics, Policy};
use tokio::time::{sleep, Instant as TokioInstant};
use tower::{service_fn, Layer, ServiceExt};

fn policy() -> Policy {
    Policy::builder("api")
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .unwrap()
}

/// A service answering `statuses` in turn (then 200), counting requests.
fn scripted(
    statuses: &'static [u16],
    hits: Arc<AtomicU32>,
) -> impl tower::Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<String>, Infallible>> + Send,
> + Clone
       + Send
       + 'static {
    service_fn(move |req: Request<String>| {
        let n = hits.fetch_add(1, Ordering::Relaxed) as usize;
        let status = statuses.get(n).copied().unwrap_or(200);
        async move {
            let mut r = Response::new(req.uri().path().to_owned());
            *r.status_mut() = StatusCode::from_u16(status).unwrap();
            if status == 429 {
                r.headers_mut().insert("retry-after", "2".parse().unwrap());
            }
            Ok(r)
        }
    })
}

fn request(method: Method) -> Request<String> {
    Request::builder()
        .method(method)
        .uri("/orders")
        .body(String::new())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_get_is_retried_after_a_5xx() {
    let hits = Arc::new(AtomicU32::new(0));
    let svc = PolicyLayer::new(policy()).layer(scripted(&[503, 502], hits.clone()));
    let r = svc.oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(hits.load(Ordering::Relaxed), 3);
}

#[tokio::test(start_paused = true)]
async fn a_post_is_never_retried() {
    let hits = Arc::new(AtomicU32::new(0));
    let svc = PolicyLayer::new(policy()).layer(scripted(&[503, 503], hits.clone()));
    let r = svc.oneshot(request(Method::POST)).await.unwrap();
    // The failure stands, as the response it is.
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(hits.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn a_post_marked_idempotent_is_retried() {
    let hits = Arc::new(AtomicU32::new(0));
    let svc = PolicyLayer::new(policy()).layer(scripted(&[500], hits.clone()));
    let mut req = request(Method::POST);
    req.extensions_mut().insert(Idempotent);
    let r = svc.oneshot(req).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(hits.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn a_post_with_an_idempotency_key_is_retried_and_one_without_is_not() {
    let hits = Arc::new(AtomicU32::new(0));
    let svc = PolicyLayer::new(policy()).layer(scripted(&[500], hits.clone()));
    let mut req = request(Method::POST);
    req.headers_mut()
        .insert(IDEMPOTENCY_KEY, "payment-4411".parse().unwrap());
    let r = svc.oneshot(req).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(hits.load(Ordering::Relaxed), 2, "retried once, then served");

    let hits = Arc::new(AtomicU32::new(0));
    let svc = PolicyLayer::new(policy()).layer(scripted(&[500], hits.clone()));
    let r = svc.oneshot(request(Method::POST)).await.unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(hits.load(Ordering::Relaxed), 1, "no key: one attempt");
}

#[tokio::test(start_paused = true)]
async fn a_429_waits_its_retry_after_and_is_not_a_failure() {
    let hits = Arc::new(AtomicU32::new(0));
    let p = policy();
    let breaker = p.breaker().unwrap().clone();
    let svc = PolicyLayer::new(p).layer(scripted(&[429], hits.clone()));
    let start = TokioInstant::now();
    let r = svc.oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), StdDuration::from_secs(2));
    assert_eq!(breaker.snapshot().consecutive_failures, 0);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_refuses_with_retry_after() {
    let hits = Arc::new(AtomicU32::new(0));
    let p = policy();
    p.isolate();
    let svc = PolicyLayer::new(p).layer(scripted(&[], hits.clone()));
    let e = svc.oneshot(request(Method::GET)).await.unwrap_err();
    assert!(matches!(e, CallError::Rejected { .. }));
    assert_eq!(e.retry_after(), Some(stormguard_core::Duration::MAX));
    assert_eq!(hits.load(Ordering::Relaxed), 0);
    assert_eq!(State::Isolated.as_str(), "isolated");
}

#[tokio::test(start_paused = true)]
async fn the_deadline_travels_to_the_next_hop_and_is_adopted() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let next_hop = service_fn(move |req: Request<String>| {
        let record = record.clone();
        async move {
            let left = req
                .headers()
                .get(DEADLINE_HEADER)
                .map(|v| v.to_str().unwrap().to_owned());
            record.lock().unwrap().push(left);
            tokio::time::sleep(StdDuration::from_millis(400)).await;
            Ok::<_, Infallible>(Response::new(String::new()))
        }
    });
    let svc = PolicyLayer::new(policy())
        .adopt_deadline()
        .propagate_deadline()
        .layer(next_hop);
    let mut req = request(Method::GET);
    req.headers_mut()
        .insert(DEADLINE_HEADER, "250".parse().unwrap());
    let start = TokioInstant::now();
    let e = svc.oneshot(req).await.unwrap_err();
    // The adopted 250 ms bound the call: the attempt was cut off then.
    assert_eq!(e, CallError::DeadlineExceeded { last: None });
    assert_eq!(start.elapsed(), StdDuration::from_millis(250));
    assert_eq!(*seen.lock().unwrap(), [Some("250".to_owned())]);
}

/// A policy whose budget holds one retry, already spent: every retry is refused.
fn spent_budget() -> Policy {
    let budget = stormguard_std::Budget::new(
        stormguard_core::BudgetSettings::builder("api")
            .floor_per_second(0.1)
            .build()
            .unwrap(),
    );
    budget
        .shared()
        .try_withdraw(stormguard_std::clock::TokioClock::global().now())
        .unwrap();
    Policy::builder("api")
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .budget(budget)
        .build()
        .unwrap()
}

/// A service answering `status` with a body and a header of its own, counting requests.
fn answering(
    status: u16,
    hits: Arc<AtomicU32>,
) -> impl tower::Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<String>, Infallible>> + Send,
> + Clone
       + Send
       + 'static {
    service_fn(move |_req: Request<String>| {
        hits.fetch_add(1, Ordering::Relaxed);
        async move {
            let mut r = Response::new(format!("status {status}"));
            *r.status_mut() = StatusCode::from_u16(status).unwrap();
            r.headers_mut().insert("x-trace", "t-1".parse().unwrap());
            if status == 429 {
                r.headers_mut().insert("retry-after", "2".parse().unwrap());
            }
            Ok(r)
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_retry_refused_after_a_500_or_429_hands_the_answer_back_at_once() {
    for status in [500, 429] {
        let hits = Arc::new(AtomicU32::new(0));
        let svc = PolicyLayer::new(spent_budget()).layer(answering(status, hits.clone()));
        let start = TokioInstant::now();
        let r = svc.oneshot(request(Method::GET)).await;
        let r = r.unwrap_or_else(|e| panic!("{status}: {e:?}"));
        assert_eq!(r.status().as_u16(), status);
        assert_eq!(r.headers()["x-trace"], "t-1");
        assert_eq!(r.body(), &format!("status {status}"));
        assert_eq!(hits.load(Ordering::Relaxed), 1);
        assert_eq!(start.elapsed(), StdDuration::ZERO, "{status}: no pause");
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_refused_by_the_breaker_after_a_500_hands_the_answer_back() {
    let breaker = stormguard_std::Breaker::new(
        stormguard_core::BreakerSettings::builder("api")
            .consecutive_failures(1)
            .jitter(false)
            .build()
            .unwrap(),
    );
    let policy = Policy::builder("api")
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .breaker(breaker)
        .build()
        .unwrap();
    let hits = Arc::new(AtomicU32::new(0));
    let svc = PolicyLayer::new(policy).layer(answering(500, hits.clone()));
    let start = TokioInstant::now();
    let r = svc.oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(hits.load(Ordering::Relaxed), 1);
    // The backoff before the refused retry, and no pause after it.
    assert_eq!(start.elapsed(), StdDuration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn a_refused_retry_after_no_answer_is_still_a_guarded_rejection() {
    let svc = PolicyLayer::new(spent_budget()).layer(service_fn(|_req: Request<String>| async {
        Err::<Response<String>, _>("connection reset")
    }));
    let start = TokioInstant::now();
    let e = svc.oneshot(request(Method::GET)).await.unwrap_err();
    assert!(
        matches!(
            e,
            CallError::Rejected {
                last: Some("connection reset"),
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(start.elapsed(), StdDuration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn metrics_count_a_call_whose_last_answer_was_a_500_as_failed() {
    use stormguard_std::Metrics;
    let hits = Arc::new(AtomicU32::new(0));
    let p = policy();
    let metrics = Metrics::for_policy(&p);
    let p = p.with_listener(metrics.clone());
    let svc = PolicyLayer::new(p).layer(answering(500, hits.clone()));
    // Every attempt answered 500: the response comes back, and the call failed.
    let r = svc.clone().oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(hits.load(Ordering::Relaxed), 3);
    let s = metrics.snapshot();
    assert_eq!(s.calls_ended("failed"), 1);
    assert_eq!(s.calls_ended("succeeded"), 0);
    // A 200 is still a success.
    let ok = PolicyLayer::new(policy().with_listener(metrics.clone()))
        .layer(answering(200, hits.clone()));
    ok.oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(metrics.snapshot().calls_ended("succeeded"), 1);

    // A 500 whose retry the budget refused: handed back, and failed too.
    let p = spent_budget();
    let metrics = Metrics::for_policy(&p);
    let svc = PolicyLayer::new(p.with_listener(metrics.clone())).layer(answering(500, hits));
    let r = svc.oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let s = metrics.snapshot();
    assert_eq!(
        (s.calls_ended("failed"), s.calls_ended("succeeded")),
        (1, 0)
    );
    assert_eq!(s.rejected_for("budget_exhausted"), 1);
}

/// Keeps a template of every request but can make no copy of it after all (a body already
/// streamed, say), counting how often it was asked.
#[derive(Clone)]
struct NoCopy(Arc<AtomicU32>);

impl Requests<Request<String>> for NoCopy {
    type Template = ();
    fn template(&self, _: &Request<String>) -> Option<()> {
        Some(())
    }
    fn replay(&self, _: &()) -> Option<Request<String>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        None
    }
}

#[tokio::test(start_paused = true)]
async fn a_granted_hedge_whose_request_cannot_be_repeated_gives_back_what_it_took() {
    let bulkhead = Bulkhead::of(2, "api").unwrap();
    let metrics = Metrics::new("api");
    let policy = Arc::new(
        Policy::builder("api")
            .hedging(true)
            .bulkhead(bulkhead.clone())
            .clock(TokioClock::global())
            .listener(metrics.clone())
            .build()
            .unwrap(),
    );
    // Healthy calls of 20 ms: the breaker learns when an attempt is slow enough to hedge.
    // Hedging arms at 20 learned samples (`TAIL_SAMPLES` in the core's breaker); under miri,
    // where a warm-up call costs about 0.4 s of its clock, 24 arm it with a few to spare.
    const WARM_UP: u32 = if cfg!(miri) { 24 } else { 40 };
    for _ in 0..WARM_UP {
        let r = policy
            .call(|_| async {
                sleep(StdDuration::from_millis(20)).await;
                Ok::<_, ()>(())
            })
            .await;
        assert_eq!(r, Ok(()));
    }
    let budget = policy.budget().unwrap().snapshot().tokens_micro;
    let attempts = metrics.snapshot().attempts;

    let replays = Arc::new(AtomicU32::new(0));
    let hits = Arc::new(AtomicU32::new(0));
    let slow = {
        let hits = hits.clone();
        service_fn(move |_req: Request<String>| {
            hits.fetch_add(1, Ordering::SeqCst);
            async {
                // Past the learned p95 (about 21 ms), short of the ceiling (about 60 ms).
                sleep(StdDuration::from_millis(50)).await;
                Ok::<_, Infallible>(Response::new(String::from("slow")))
            }
        })
    };
    let svc = PolicyLayer::shared(Arc::clone(&policy))
        .requests(NoCopy(replays.clone()))
        .layer(slow);
    let start = TokioInstant::now();
    let r = svc.oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), StdDuration::from_millis(50));
    // The hedge was granted (its request was asked for) and could not be made: the first
    // attempt alone ran, and the hedge took nothing.
    assert_eq!(replays.load(Ordering::SeqCst), 1);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(bulkhead.in_flight(), 0, "the hedge's slot went back");
    assert_eq!(
        policy.budget().unwrap().snapshot().tokens_micro,
        budget,
        "the hedge's retry went back to the budget"
    );
    let m = metrics.snapshot();
    assert_eq!((m.attempts - attempts, m.hedges), (1, 0));
    let breaker = policy.breaker().unwrap().snapshot();
    assert_eq!(breaker.state, State::Closed);
    assert_eq!(breaker.consecutive_failures, 0);
}

/// A GET carrying an attempt slot.
fn logged_request() -> (Request<String>, stormguard_std::tower::AttemptSlot) {
    let slot = stormguard_std::tower::AttemptSlot::new();
    let mut req = request(Method::GET);
    req.extensions_mut().insert(slot.clone());
    (req, slot)
}

#[tokio::test(start_paused = true)]
async fn a_request_carrying_a_slot_gets_the_calls_attempt_log_back() {
    for per_host in [false, true] {
        let hits = Arc::new(AtomicU32::new(0));
        let layer = PolicyLayer::new(policy());
        let layer = if per_host {
            layer.per_host().unwrap()
        } else {
            layer
        };
        let svc = layer.layer(scripted(&[503], hits.clone()));
        let (req, slot) = logged_request();
        assert!(slot.take().is_none());
        let r = svc.clone().oneshot(req).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let log = slot.take().expect("the layer left the log");
        assert_eq!(log.len(), 2, "per host: {per_host}");
        let text = log.to_string();
        assert!(
            text.starts_with("attempt 1: transient failure after 0s, answered; attempt 2: success"),
            "per host: {per_host}: {text}"
        );
        assert!(slot.take().is_none(), "taken once");
        // A request without a slot is served as before.
        let r = svc.oneshot(request(Method::GET)).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_request_carrying_a_slot_reads_who_refused_it() {
    let hits = Arc::new(AtomicU32::new(0));
    let p = policy();
    p.isolate();
    let svc = PolicyLayer::new(p).layer(scripted(&[], hits.clone()));
    let (req, slot) = logged_request();
    let e = svc.oneshot(req).await.unwrap_err();
    assert!(matches!(e, CallError::Rejected { .. }));
    let log = slot.take().expect("the log of a refused call too");
    assert_eq!(log.to_string(), "attempt 1: refused locally (isolated)");
    assert!(
        !log.any_self_imposed(),
        "an isolated breaker is not the caller's own limit"
    );
}
