//! Published quotas through the tower layer: a dependency that publishes a shrinking quota
//! (`RateLimit`/`RateLimit-Policy`, `X-RateLimit-*`) is left alone once what is left is within
//! the reserve, until the published reset, per host. Over a fake service on tokio's paused
//! clock, then over real axum servers on 127.0.0.1 (bounded loops, a window of a second).
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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use axum::extract::State as AxumState;
use axum::http::{HeaderValue, StatusCode as AxumStatus};
use axum::response::{IntoResponse, Response as AxumResponse};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stormguard_core::Ratio;
use stormguard_std::tower::PolicyLayer;
use stormguard_std::{
    Backoff, CallError, Duration, Event, Jitter, Listener, Outcome, Policy, RefusalReason, State,
};
use tower::{service_fn, Layer, ServiceExt};

/// The waits the policy announced (`Retry` events): how long, and after what.
#[derive(Clone, Default)]
struct Retries(Arc<Mutex<Vec<(Duration, Outcome)>>>);

impl Listener for Retries {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::Retry { delay, after, .. } = event {
            self.0.lock().unwrap().push((*delay, *after));
        }
    }
}

fn policy(max_attempts: u32, retries: Retries) -> Policy<stormguard_std::DefaultClock, Retries> {
    Policy::builder("quotas")
        .published_quotas(Ratio::from_percent(10).unwrap())
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .max_attempts(max_attempts)
        .listener(retries)
        .build()
        .unwrap()
}

/// A fake dependency publishing `X-RateLimit-*`: 10 requests per window of `secs`, the window
/// starting at its first request; a request past the quota is a 429. Counts what it serves.
fn publishing_service(
    served: Arc<AtomicU32>,
    secs: u64,
) -> impl tower::Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<Response<String>, Infallible>> + Send,
> + Clone
       + Send
       + 'static {
    let window: Arc<Mutex<Option<tokio::time::Instant>>> = Arc::default();
    service_fn(move |_req: Request<String>| {
        let now = tokio::time::Instant::now();
        let mut start = window.lock().unwrap();
        let begun = *start.get_or_insert(now);
        let begun = if now >= begun + StdDuration::from_secs(secs) {
            served.store(0, Ordering::SeqCst);
            *start = Some(now);
            now
        } else {
            begun
        };
        let n = served.fetch_add(1, Ordering::SeqCst) + 1;
        let left = StdDuration::from_secs(secs) - (now - begun);
        let mut r = Response::new(String::new());
        if n > 10 {
            *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        }
        let h = r.headers_mut();
        h.insert("x-ratelimit-limit", HeaderValue::from(10));
        h.insert(
            "x-ratelimit-remaining",
            HeaderValue::from(10u32.saturating_sub(n)),
        );
        h.insert("x-ratelimit-reset", HeaderValue::from(left.as_secs()));
        async move { Ok(r) }
    })
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_layer_stops_at_the_reserve_and_waits_out_the_reset_as_a_throttle() {
    let served = Arc::new(AtomicU32::new(0));
    let retries = Retries::default();
    let layer = PolicyLayer::new(policy(3, retries.clone()));
    let client = layer.layer(publishing_service(served.clone(), 10));
    let get = || {
        Request::get("http://api.example/items")
            .body(String::new())
            .unwrap()
    };

    // The reserve is 1 of 10: nine requests go out, and each answer lowers what is left.
    for _ in 0..9 {
        let r = client.clone().oneshot(get()).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    assert_eq!(served.load(Ordering::SeqCst), 9);
    assert!(retries.0.lock().unwrap().is_empty());

    // The tenth is held back until the published reset (10 s), then sent into the new window.
    let start = tokio::time::Instant::now();
    let r = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), StdDuration::from_secs(10));
    assert_eq!(served.load(Ordering::SeqCst), 1, "the window had reset");
    let waits = retries.0.lock().unwrap().clone();
    assert_eq!(
        waits,
        vec![(
            Duration::from_secs(10),
            Outcome::Throttled {
                retry_after: Some(Duration::from_secs(10))
            }
        )]
    );
    // A self-imposed throttle: nothing against the breaker, nothing from the budget.
    let policy = layer.policy();
    assert_eq!(policy.breaker().unwrap().state(), State::Closed);
    assert_eq!(policy.budget().unwrap().snapshot().available, 30);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn with_no_retry_left_the_quota_is_a_guarded_rejection_naming_it() {
    let served = Arc::new(AtomicU32::new(0));
    let client = PolicyLayer::new(policy(1, Retries::default()))
        .layer(publishing_service(served.clone(), 30));
    let get = || {
        Request::get("http://api.example/items")
            .body(String::new())
            .unwrap()
    };
    for _ in 0..9 {
        client.clone().oneshot(get()).await.unwrap();
    }
    let e = client.clone().oneshot(get()).await.unwrap_err();
    let CallError::Rejected { rejection, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::QuotaReserve);
    assert_eq!(
        rejection.retry_after,
        Duration::from_secs(30) - rejection.pause
    );
    assert_eq!(
        served.load(Ordering::SeqCst),
        9,
        "the dependency never saw it"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_reset_further_than_the_backoffs_longest_wait_is_not_trusted() {
    let served = Arc::new(AtomicU32::new(0));
    let short = Policy::builder("quotas")
        .published_quotas(Ratio::from_percent(10).unwrap())
        .backoff(
            Backoff::builder()
                .jitter(Jitter::None)
                .cap(Duration::from_secs(5))
                .build()
                .unwrap(),
        )
        .max_attempts(1)
        .build()
        .unwrap();
    let client = PolicyLayer::new(short).layer(publishing_service(served.clone(), 30));
    let get = || {
        Request::get("http://api.example/items")
            .body(String::new())
            .unwrap()
    };
    for _ in 0..9 {
        client.clone().oneshot(get()).await.unwrap();
    }
    let e = client.clone().oneshot(get()).await.unwrap_err();
    let rejection = e.rejection().unwrap();
    // The server said 30 s; the client holds back 5 s at most (the backoff's longest wait).
    assert_eq!(rejection.reason, RefusalReason::QuotaReserve);
    assert!(rejection.retry_after <= Duration::from_secs(5));
    tokio::time::advance(StdDuration::from(rejection.retry_after)).await;
    // It asks again, and is told that nothing is left in the server's window...
    let r = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
    assert_eq!(served.load(Ordering::SeqCst), 10);
    // ...so it holds back again, 5 s at most at a time.
    let e = client.clone().oneshot(get()).await.unwrap_err();
    let rejection = e.rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::QuotaReserve);
    assert!(rejection.retry_after <= Duration::from_secs(5));
    assert_eq!(served.load(Ordering::SeqCst), 10);
}

// ---------------------------------------------------------------------------------------------
// Real servers on 127.0.0.1

/// A server publishing the IETF draft's fields: a quota of 20 per window of 1 s, the window
/// starting at the first request after the last one ended; past the quota, a 429.
#[derive(Default)]
struct Quota {
    window: Mutex<Option<tokio::time::Instant>>,
    served: AtomicU32,
    throttled: AtomicU32,
    windows: AtomicU32,
}

const LIMIT: u32 = 20;

async fn item(AxumState(q): AxumState<Arc<Quota>>) -> AxumResponse {
    let now = tokio::time::Instant::now();
    let n = {
        let mut window = q.window.lock().unwrap();
        if window.is_none_or(|w| now >= w + StdDuration::from_secs(1)) {
            *window = Some(now);
            q.served.store(0, Ordering::SeqCst);
            q.windows.fetch_add(1, Ordering::SeqCst);
        }
        q.served.fetch_add(1, Ordering::SeqCst) + 1
    };
    let mut r = if n > LIMIT {
        q.throttled.fetch_add(1, Ordering::SeqCst);
        (AxumStatus::TOO_MANY_REQUESTS, "over quota").into_response()
    } else {
        (AxumStatus::OK, "ok").into_response()
    };
    let left = LIMIT.saturating_sub(n);
    let h = r.headers_mut();
    h.insert(
        "ratelimit-policy",
        HeaderValue::from_str(&format!("\"default\";q={LIMIT};w=1")).unwrap(),
    );
    // `t` in whole seconds, rounded up: the window ends within it.
    h.insert(
        "ratelimit",
        HeaderValue::from_str(&format!("\"default\";r={left};t=1")).unwrap(),
    );
    r
}

async fn serve(q: Arc<Quota>) -> String {
    let app = Router::new().route("/item", get(item)).with_state(q);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/item")
}

#[tokio::test(flavor = "current_thread")]
async fn over_real_sockets_each_host_is_held_back_at_its_reserve_until_its_reset() {
    let (a, b) = (Arc::new(Quota::default()), Arc::new(Quota::default()));
    let (url_a, url_b) = (serve(a.clone()).await, serve(b.clone()).await);
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = PolicyLayer::new(policy(1, Retries::default()))
        .per_host()
        .unwrap()
        .layer(hyper);
    let get = |url: &str| Request::get(url).body(Full::new(Bytes::new())).unwrap();

    // Host a: requests go out until 2 (10% of 20) are left; then the client refuses locally.
    let mut sent = 0;
    let rejection = loop {
        assert!(sent < 2 * LIMIT, "the client never held back");
        match client.clone().oneshot(get(&url_a)).await {
            Ok(r) => assert_eq!(r.status(), AxumStatus::OK),
            Err(CallError::Rejected { rejection, .. }) => break rejection,
            Err(e) => panic!("{e}"),
        }
        sent += 1;
    };
    assert_eq!(rejection.reason, RefusalReason::QuotaReserve);
    assert!(rejection.retry_after <= Duration::from_secs(1));
    if a.windows.load(Ordering::SeqCst) == 1 {
        // (On a machine loaded enough for the window to end during the run, the count
        // starts over: the client holds back at the reserve of the window it read.)
        assert_eq!(sent, LIMIT - 2);
        assert_eq!(a.served.load(Ordering::SeqCst), LIMIT - 2);
    }
    assert_eq!(a.throttled.load(Ordering::SeqCst), 0, "never a 429");

    // Host b has its own quota: untouched by a's.
    let r = client.clone().oneshot(get(&url_b)).await.unwrap();
    assert_eq!(r.status(), AxumStatus::OK);

    // After the reset, a is called again, into its new window.
    tokio::time::sleep(StdDuration::from(rejection.retry_after) + StdDuration::from_millis(20))
        .await;
    let windows = a.windows.load(Ordering::SeqCst);
    let r = client.clone().oneshot(get(&url_a)).await.unwrap();
    assert_eq!(r.status(), AxumStatus::OK);
    assert_eq!(a.windows.load(Ordering::SeqCst), windows + 1);
    assert_eq!(a.served.load(Ordering::SeqCst), 1);
    assert_eq!(a.throttled.load(Ordering::SeqCst), 0);
}
