//! The stall bound on response bodies over a real network: an axum server on 127.0.0.1 whose
//! bodies stall after their first bytes or trickle in slowly, read by a real hyper client behind
//! `StallLayer` and `PolicyLayer`. Loopback only, bounded in count and time, stops by itself.
#![cfg(feature = "tower")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::time::{Duration as StdDuration, Instant as StdInstant};

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use futures_util::{stream, StreamExt};
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stormguard_std::tower::{BodyStalled, PolicyLayer, StallLayer};
use stormguard_std::{Duration, Field, Policy};
use tower::{ServiceBuilder, ServiceExt};

/// A body that sends `first` and then nothing.
async fn stalls() -> Body {
    let rest = stream::once(async {
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(Bytes::new())
    });
    Body::from_stream(stream::iter([Ok(Bytes::from_static(b"first"))]).chain(rest))
}

/// A body of five pieces, 50 ms apart: slow, never stalled for the 400 ms bound.
async fn trickles() -> Body {
    Body::from_stream(stream::iter(0..5).then(|n| async move {
        tokio::time::sleep(StdDuration::from_millis(50)).await;
        Ok::<_, std::io::Error>(Bytes::from(format!("piece {n};")))
    }))
}

async fn serve() -> String {
    let app = Router::new()
        .route("/stalls", get(stalls))
        .route("/trickles", get(trickles));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_stalled_body_ends_with_an_error_and_a_slow_one_flows() {
    let base = serve().await;
    let policy = Policy::builder("mirror").build().unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let stack = ServiceBuilder::new()
        .layer(StallLayer::new(StdDuration::from_millis(400)).unwrap())
        .layer(PolicyLayer::new(policy))
        .service(client);
    let get = |path: &str| {
        Request::get(format!("{base}{path}"))
            .body(Full::new(Bytes::new()))
            .unwrap()
    };

    let started = StdInstant::now();
    let response = stack.clone().oneshot(get("/stalls")).await.unwrap();
    let read = tokio::time::timeout(StdDuration::from_secs(10), response.into_body().collect())
        .await
        .expect("the stall bound ends the read");
    let error = read.expect_err("a stalled body is an error");
    let stalled = error.downcast_ref::<BodyStalled>().expect("the stall");
    assert_eq!(stalled.after, Duration::from_millis(400));
    assert!(started.elapsed() >= StdDuration::from_millis(400));

    let response = stack.oneshot(get("/trickles")).await.unwrap();
    let body = tokio::time::timeout(StdDuration::from_secs(10), response.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(
        body,
        Bytes::from_static(b"piece 0;piece 1;piece 2;piece 3;piece 4;")
    );
}

#[test]
fn a_zero_bound_is_refused_and_a_policys_attempt_timeout_is_taken() {
    let err = StallLayer::new(StdDuration::ZERO).unwrap_err();
    assert_eq!(err.field, Field::StallTimeout);
    let policy = Policy::builder("mirror")
        .attempt_timeout(StdDuration::from_secs(3))
        .build()
        .unwrap();
    let layer = StallLayer::for_policy(&policy).unwrap();
    assert_eq!(layer.bound(), Duration::from_secs(3));
    let unbounded = Policy::builder("mirror")
        .no_attempt_timeout()
        .build()
        .unwrap();
    assert_eq!(StallLayer::for_policy(&unbounded), None);
}
