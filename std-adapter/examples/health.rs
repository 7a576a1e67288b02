//! A health endpoint: an axum `/health` route serving the registry's report as JSON.
//!
//! `cargo run -p stormguard-std --features tower,serde --example health`
//! then `curl -s 127.0.0.1:3000/health`.
//!
//! Two policies are registered; the example isolates one so the report shows an unavailable
//! dependency next to a healthy one, fetches its own `/health` once to print it, then serves
//! until stopped. The status code is 200 while the worst entry is healthy or degraded (a
//! recovering breaker reads as degraded) and 503 when one is unavailable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use stormguard_std::health::{Registry, Report, Status};
use stormguard_std::Policy;

async fn health(State(registry): State<Registry>) -> (StatusCode, Json<Report>) {
    let report = registry.report();
    let code = match report.status {
        Status::Healthy | Status::Degraded => StatusCode::OK,
        Status::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, Json(report))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let payments = Policy::builder("payments").build()?;
    let search = Policy::builder("search").build()?;
    let registry = Registry::new();
    registry.register(&payments);
    registry.register(&search);
    search.isolate(); // an operator took search out of rotation

    let app = Router::new()
        .route("/health", get(health))
        .with_state(registry);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    // Show what a monitor would see.
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    println!("{response}\n");
    println!("serving http://{addr}/health; Ctrl-C to stop");
    tokio::signal::ctrl_c().await?;
    Ok(())
}
