//! The server side: an axum service whose handler calls its own dependency through a policy and,
//! when the policy refuses or gives up, answers its callers with `error_response` (503 with
//! `Retry-After`, 504, 502 and a small JSON body), so they back off as the policy did.
//!
//! `cargo run -p stormguard-std --features tower --example server` serves on 127.0.0.1 (an
//! ephemeral port), calls itself a few times while its dependency fails, prints each answer,
//! and stops: the first call fails twice (502) and trips the breaker, the next are refused
//! (503, `Retry-After`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use stormguard_std::server::error_response;
use stormguard_std::Backoff;
use stormguard_std::Policy;

/// The service's state: its policy, and a switch standing in for a failing pricing database.
struct Quotes {
    pricing: Policy,
    pricing_down: AtomicBool,
}

#[derive(Debug)]
struct PricingError;

async fn price(quotes: &Quotes) -> Result<u32, PricingError> {
    if quotes.pricing_down.load(Ordering::Relaxed) {
        Err(PricingError)
    } else {
        Ok(1_999)
    }
}

async fn quote(State(quotes): State<Arc<Quotes>>) -> Response {
    match quotes.pricing.call(|_| price(&quotes)).await {
        Ok(cents) => format!("{{\"price_cents\":{cents}}}").into_response(),
        Err(e) => error_response(&e).into_response(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pricing = Policy::builder("pricing")
        .breaker_with(|b| b.consecutive_failures(2))
        .backoff(
            Backoff::builder()
                .base(Duration::from_millis(5).into())
                .build()?,
        )
        .max_attempts(2)
        .no_budget()
        .build()?;
    let quotes = Arc::new(Quotes {
        pricing,
        pricing_down: AtomicBool::new(true),
    });
    let app = Router::new()
        .route("/quote", get(quote))
        .with_state(quotes.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<String>();
    for n in 1..=3 {
        let response = client.get(format!("http://{addr}/quote").parse()?).await?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap_or("?").to_owned());
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await?
            .to_bytes();
        println!(
            "request {n}: {status}, retry-after {retry_after:?}, {}",
            String::from_utf8_lossy(&body)
        );
    }
    server.abort();
    Ok(())
}
