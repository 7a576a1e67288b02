//! A health endpoint and a metrics endpoint: an axum `/health` route serving the registry's
//! report as JSON, and `/metrics` serving the Prometheus exposition through
//! `metrics-exporter-prometheus`, fed by each policy's [`MetricsFacade`] listener.
//!
//! `cargo run -p stormguard-std --features tower,serde,metrics --example health`
//! then `curl -s 127.0.0.1:3000/health` and `curl -s 127.0.0.1:3000/metrics`.
//!
//! Two policies are registered; the example isolates one so the report shows an unavailable
//! dependency next to a healthy one, makes a few calls, fetches its own `/health` and
//! `/metrics` once to print them, then serves until stopped. The status code is 200 while the
//! worst entry is healthy or degraded (a recovering breaker reads as degraded) and 503 when
//! one is unavailable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use stormguard_std::health::{Registry, Report, Status};
use stormguard_std::{MetricsFacade, Policy};

#[derive(Clone)]
struct Endpoints {
    registry: Registry,
    exporter: PrometheusHandle,
}

async fn health(State(Endpoints { registry, .. }): State<Endpoints>) -> (StatusCode, Json<Report>) {
    let report = registry.report();
    let code = match report.status {
        Status::Healthy | Status::Degraded => StatusCode::OK,
        Status::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, Json(report))
}

/// The gauges are read from the health report at each scrape; the counters and histograms
/// were recorded as the calls ran.
async fn metrics(State(Endpoints { registry, exporter }): State<Endpoints>) -> String {
    MetricsFacade::publish(&registry.report());
    exporter.run_upkeep();
    exporter.render()
}

async fn get_once(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The exporter's recorder first: each facade registers its handles with it.
    let exporter = PrometheusBuilder::new().install_recorder()?;
    MetricsFacade::describe();
    let payments = Policy::builder("payments").build()?;
    let payments = payments
        .clone()
        .with_listener(MetricsFacade::for_policy(&payments));
    let search = Policy::builder("search").build()?;
    let search = search
        .clone()
        .with_listener(MetricsFacade::for_policy(&search));
    let registry = Registry::new();
    registry.register(&payments);
    registry.register(&search);

    for _ in 0..3 {
        payments
            .call(|_| async { Ok::<_, std::io::Error>(()) })
            .await?;
    }
    search.isolate(); // an operator took search out of rotation
    let refused = search.call(|_| async { Ok::<_, std::io::Error>(()) }).await;
    println!("search while isolated: {}\n", refused.unwrap_err());

    let app = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .with_state(Endpoints { registry, exporter });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    // Show what a monitor and a scraper would see.
    println!("{}\n", get_once(addr, "/health").await?);
    println!("{}\n", get_once(addr, "/metrics").await?);
    println!("serving http://{addr}/health and /metrics; Ctrl-C to stop");
    tokio::signal::ctrl_c().await?;
    Ok(())
}
