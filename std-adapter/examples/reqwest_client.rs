//! A `reqwest::Client` behind the tower layer.
//!
//! `cargo run -p stormguard-std --features reqwest --example reqwest_client`
//!
//! The example starts a small dependency on 127.0.0.1 whose first two answers are 503s, then
//! sends it a GET and a POST through `PolicyLayer` + reqwest. The GET is retried (its third
//! attempt succeeds); the POST, not idempotent, gets one attempt whatever the answer. The
//! dependency prints the deadline each attempt carries.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::Router;
use stormguard_std::tower::{PolicyLayer, DEADLINE_HEADER};
use stormguard_std::Policy;
use tower::{ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The dependency: 503 for its first two requests, then 200.
    let served = Arc::new(AtomicU32::new(0));
    let count = Arc::clone(&served);
    let answer = move |headers: HeaderMap| {
        let count = Arc::clone(&count);
        async move {
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            let deadline = headers.get(DEADLINE_HEADER).and_then(|v| v.to_str().ok());
            println!("  request {n}: {} ms left", deadline.unwrap_or("?"));
            if n <= 2 {
                (StatusCode::SERVICE_UNAVAILABLE, "warming up")
            } else {
                (StatusCode::OK, "42.0")
            }
        }
    };
    let app = Router::new().route("/quote", get(answer.clone()).post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/quote", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The client: reqwest behind a policy (3 attempts, a 2 s deadline carried to the server).
    let policy = Policy::builder("quotes")
        .deadline(Duration::from_secs(2))
        .build()?;
    let http = reqwest::Client::new();
    let client = ServiceBuilder::new()
        .layer(PolicyLayer::new(policy).propagate_deadline())
        .service(http.clone());

    println!("GET (idempotent: retried)");
    let response = client.clone().oneshot(http.get(&url).build()?).await?;
    println!("-> {} {}", response.status(), response.text().await?);

    println!("POST (not idempotent: one attempt)");
    served.store(0, Ordering::SeqCst);
    let response = client.oneshot(http.post(&url).body("buy").build()?).await?;
    println!("-> {} {}", response.status(), response.text().await?);
    Ok(())
}
