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
