//! The server side over a real socket: an axum handler that calls its dependency through a
//! policy answers its own callers with `error_response` — 502 when the dependency's error stood,
//! 503 with `Retry-After` while the breaker is open, 504 when the call ran out of time. Loopback
//! only, bounded, stops by itself.
#![cfg(feature = "tower")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http_body_util::BodyExt;
use stormguard_core::{Backoff, BreakerSettings, Jitter};
use stormguard_std::server::error_response;
use stormguard_std::Policy;

const UP: u8 = 0;
const DOWN: u8 = 1;
const HANGING: u8 = 2;

struct Service {
    policy: Policy,
    dependency: AtomicU8,
}

async fn dependency(service: &Service) -> Result<&'static str, &'static str> {
    match service.dependency.load(Ordering::Relaxed) {
        DOWN => Err("connection refused"),
        HANGING => std::future::pending().await,
        _ => Ok("fine"),
    }
}

async fn handler(State(service): State<Arc<Service>>) -> Response {
    match service.policy.call(|_| dependency(&service)).await {
        Ok(body) => body.into_response(),
        Err(e) => error_response(&e).into_response(),
    }
}

async fn get_once(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        String,
    >,
    url: &str,
) -> (u16, Option<String>, String) {
    let response = client.get(url.parse().unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        retry_after,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

#[tokio::test]
async fn a_handler_answers_a_refusal_with_503_and_retry_after_and_a_timeout_with_504() {
    let policy = Policy::builder("inventory")
        .breaker_settings(
            BreakerSettings::builder("inventory")
                .consecutive_failures(2)
                .build()
                .unwrap(),
        )
        .backoff(
            Backoff::builder()
                .base(Duration::from_millis(1).into())
                .jitter(Jitter::None)
                .build()
                .unwrap(),
        )
        .max_attempts(2)
        .attempt_timeout(Duration::from_millis(50))
        .no_budget()
        .build()
        .unwrap();
    let service = Arc::new(Service {
        policy,
        dependency: AtomicU8::new(UP),
    });
    let app = Router::new()
        .route("/stock", get(handler))
        .with_state(service.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/stock", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<String>();

    assert_eq!(
        get_once(&client, &url).await,
        (200, None, "fine".to_owned())
    );

    // A hanging dependency: both attempts cut at 50 ms, a 504. (The two timeouts trip the
    // breaker too; it is reset so that the next case starts closed.)
    service.dependency.store(HANGING, Ordering::Relaxed);
    let (status, retry_after, body) = get_once(&client, &url).await;
    assert_eq!((status, retry_after), (504, None));
    assert_eq!(body, r#"{"error":"timed_out"}"#);
    service.policy.reset();

    // Down: two failures, the dependency's error stood (502) and tripped the breaker; the next
    // call is refused with the time left of the break.
    service.dependency.store(DOWN, Ordering::Relaxed);
    let (status, _, body) = get_once(&client, &url).await;
    assert_eq!((status, body.as_str()), (502, r#"{"error":"failed"}"#));
    let (status, retry_after, body) = get_once(&client, &url).await;
    assert_eq!(status, 503);
    let secs: u64 = retry_after.unwrap().parse().unwrap();
    assert!((1..=16).contains(&secs), "Retry-After {secs}");
    assert!(
        body.starts_with(r#"{"error":"rejected","reason":"breaker_open","retry_after_ms":"#),
        "{body}"
    );
    assert!(!body.contains("connection refused"));
    server.abort();
}

/// The layer in front of an axum route (inbound load shedding): axum's request body cannot be
/// copied, so each request gets one attempt; a bulkhead of one refuses the second request in
/// flight, and `HandleErrorLayer` answers the refusal with `error_response`'s 503.
#[tokio::test]
async fn the_layer_in_front_of_an_axum_route_sheds_with_503() {
    use axum::error_handling::HandleErrorLayer;
    use std::convert::Infallible;
    use stormguard_std::tower::PolicyLayer;
    use stormguard_std::{Bulkhead, CallError};

    tokio::time::timeout(Duration::from_secs(30), async {
        let policy = Policy::builder("orders-inbound")
            .bulkhead(Bulkhead::of(1, "orders-inbound").unwrap())
            .max_attempts(1)
            .no_budget()
            .build()
            .unwrap();
        let (entered, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let (inside, held) = (Arc::clone(&entered), Arc::clone(&release));
        let app = Router::new()
            .route(
                "/orders",
                axum::routing::post(move |body: String| {
                    let (inside, held) = (Arc::clone(&inside), Arc::clone(&held));
                    async move {
                        inside.notify_one();
                        held.notified().await;
                        format!("took {} bytes", body.len())
                    }
                }),
            )
            .layer(
                tower::ServiceBuilder::new()
                    .layer(HandleErrorLayer::new(
                        |e: CallError<Infallible>| async move { error_response(&e) },
                    ))
                    .layer(PolicyLayer::new(policy)),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/orders", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<String>();
        let post = |body: &str| {
            http::Request::post(url.as_str())
                .body(body.to_owned())
                .unwrap()
        };

        // The first order holds the bulkhead's one slot until released.
        let first = tokio::spawn(client.request(post("{\"sku\":1}")));
        entered.notified().await;
        let refused = client.request(post("{\"sku\":2}")).await.unwrap();
        assert_eq!(refused.status().as_u16(), 503);
        assert!(refused.headers().contains_key("retry-after"));
        let body = refused.into_body().collect().await.unwrap().to_bytes();
        assert!(
            String::from_utf8_lossy(&body).contains(r#""reason":"bulkhead_full""#),
            "{body:?}"
        );
        release.notify_one();
        let served = first.await.unwrap().unwrap();
        assert_eq!(served.status().as_u16(), 200);
        let body = served.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            &body[..],
            b"took 9 bytes",
            "the body reached the handler whole"
        );
        server.abort();
    })
    .await
    .expect("bounded in time");
}
