//! Nested retries over real sockets: a client retries a front service (its retries marked with
//! their attempt number), the front service retries a dependency that always fails; with
//! `retries_when_nested(false)` the front makes one attempt while it serves a retry.
#![cfg(feature = "tower")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use axum::http::StatusCode as AxumStatus;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stormguard_std::tower::{NestedRetryLayer, PolicyLayer, ATTEMPT_HEADER};
use stormguard_std::{Backoff, Metrics, Policy};
use tower::{Layer, ServiceExt};

type Hyper = Client<HttpConnector, Full<Bytes>>;

fn hyper() -> Hyper {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Three attempts, no wait between them, no breaker (the count of requests is the point).
fn retrying(name: &'static str, retries_when_nested: bool) -> Policy {
    Policy::builder(name)
        .no_breaker()
        .max_attempts(3)
        .backoff(Backoff::none())
        .retries_when_nested(retries_when_nested)
        .build()
        .unwrap()
}

async fn listen(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// The dependency: always 500, counting requests and the retry marks they carry.
async fn dependency(hits: Arc<AtomicU32>, marked: Arc<AtomicU32>) -> String {
    let app = Router::new().fallback(get(move |headers: http::HeaderMap| {
        let (hits, marked) = (hits.clone(), marked.clone());
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            if headers.contains_key(ATTEMPT_HEADER) {
                marked.fetch_add(1, Ordering::SeqCst);
            }
            (AxumStatus::INTERNAL_SERVER_ERROR, "down")
        }
    }));
    listen(app).await
}

/// The front service: serves each request by calling the dependency under `policy`, through the
/// policy layer; a failed call is a 503 (so the client retries). `NestedRetryLayer` reads the
/// client's marks into `metrics`.
async fn front(dependency: String, policy: Policy, metrics: Metrics) -> String {
    let client = PolicyLayer::new(policy).layer(hyper());
    let app = Router::new()
        .fallback(get(move || {
            let (client, url) = (client.clone(), dependency.clone());
            async move {
                let req = Request::get(format!("{url}/item"))
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                match client.oneshot(req).await {
                    Ok(r) if r.status().is_success() => (AxumStatus::OK, "ok"),
                    _ => (AxumStatus::SERVICE_UNAVAILABLE, "dependency down"),
                }
            }
        }))
        .layer(NestedRetryLayer::new("front").listener(metrics));
    listen(app).await
}

/// One client request through the stack; returns (dependency requests, marked ones, nested
/// retries the front saw, the client's final status).
async fn one_request(retries_when_nested: bool) -> (u32, u32, u64, StatusCode) {
    let hits = Arc::new(AtomicU32::new(0));
    let marked = Arc::new(AtomicU32::new(0));
    let dep = dependency(hits.clone(), marked.clone()).await;
    let metrics = Metrics::new("front");
    let front = front(
        dep,
        retrying("dependency", retries_when_nested),
        metrics.clone(),
    )
    .await;
    let client = PolicyLayer::new(retrying("front", true)).layer(hyper());
    let req = Request::get(format!("{front}/order"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let status = client.oneshot(req).await.unwrap().status();
    (
        hits.load(Ordering::SeqCst),
        marked.load(Ordering::SeqCst),
        metrics.snapshot().nested_retries,
        status,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_service_that_holds_nested_retries_sends_five_requests_not_nine() {
    let run = async {
        // Retrying everywhere: 3 client attempts x 3 front attempts.
        let (hits, marked, nested, status) = one_request(true).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(hits, 9);
        assert_eq!(marked, 6, "each front call's 2 retries carry their number");
        assert_eq!(nested, 2, "the client's 2 retries were seen as such");

        // Held: the front's first attempt retries (3), its 2 nested ones make one attempt each.
        let (hits, marked, nested, status) = one_request(false).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(hits, 5);
        assert_eq!(marked, 2);
        assert_eq!(nested, 2);
    };
    tokio::time::timeout(StdDuration::from_secs(30), run)
        .await
        .expect("bounded");
}
