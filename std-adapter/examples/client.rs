//! A client behind the tower layer: a hyper client whose requests go through a policy.
//!
//! `cargo run -p stormguard-std --features tower --example client`
//!
//! The example starts a small dependency on 127.0.0.1 that fails for its first second, then
//! calls it every 100 ms for three seconds through `PolicyLayer` + hyper. Watch the breaker open
//! after five consecutive failures, refuse with `retry_after` (each refusal after the 100 ms
//! guarded pause), probe once the break is over, and close. Events are logged with `tracing`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stormguard_std::tower::PolicyLayer;
use stormguard_std::{CallError, Metrics, Policy};
use tower::{Layer, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .init();

    // The dependency: 500 for its first second, then 200.
    let started = Instant::now();
    let app = Router::new().route(
        "/quote",
        get(move || async move {
            if started.elapsed() < Duration::from_secs(1) {
                (StatusCode::INTERNAL_SERVER_ERROR, "warming up")
            } else {
                (StatusCode::OK, "42.0")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/quote", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The client: hyper behind a policy with a short break, so the example is quick.
    let policy = Policy::builder("quotes")
        .breaker_with(|b| {
            b.break_duration(stormguard_std::Duration::from_millis(500))
                .jitter(false)
        })
        .deadline(Duration::from_secs(2))
        .build()?;
    let metrics = Metrics::for_policy(&policy);
    let policy = policy.with_listener(metrics.clone());
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    // One dependency: the policy's own breaker judges it (the one the metrics read), rather
    // than a breaker per host, the layer's default.
    let client = PolicyLayer::new(policy)
        .single_scope()
        .propagate_deadline()
        .layer(hyper);

    while started.elapsed() < Duration::from_secs(3) {
        let at = started.elapsed();
        let req = Request::get(&url).body(Full::new(Bytes::new()))?;
        match client.clone().oneshot(req).await {
            Ok(response) => println!("{at:>6.0?}: {}", response.status()),
            Err(CallError::Rejected { rejection, .. }) => println!(
                "{at:>6.0?}: refused ({}), retry after {}",
                rejection.reason, rejection.retry_after
            ),
            Err(other) => println!("{at:>6.0?}: {other}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("\n{}", metrics.to_prometheus());
    Ok(())
}
