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
use stormguard_core::Field;
use stormguard_std::tower::{BodyStalled, PolicyLayer, StallBody, StallLayer};
use stormguard_std::{Duration, Policy};
use tower::{ServiceBuilder, ServiceExt};

/// A body that sends `first` and then nothing.
async fn stalls() -> Body {
    let rest = stream::once(async {
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(Bytes::new())
    });
    Body::from_stream(stream::iter([Ok(Bytes::from_static(b"first"))]).chain(rest))
}

/// A body of twelve pieces, 50 ms apart: 600 ms in all, past the 400 ms bound, but never
/// stalled for that long.
async fn trickles() -> Body {
    Body::from_stream(stream::iter(0..12).then(|n| async move {
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
    let expected: String = (0..12).map(|n| format!("piece {n};")).collect();
    assert_eq!(body, Bytes::from(expected));
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

/// A body of frames, each `apart` after the one before (on tokio's clock), then quiet for ever.
fn frames_apart(
    count: usize,
    apart: StdDuration,
) -> StallBody<
    http_body_util::StreamBody<
        impl futures_util::Stream<Item = Result<http_body::Frame<Bytes>, std::io::Error>>,
    >,
> {
    let frames = stream::iter(0..count)
        .then(move |n| async move {
            tokio::time::sleep(apart).await;
            Ok(http_body::Frame::data(Bytes::from(n.to_string())))
        })
        .chain(stream::once(std::future::pending()));
    StallBody::new(
        http_body_util::StreamBody::new(frames),
        Duration::from_millis(100),
    )
}

#[tokio::test(start_paused = true)]
async fn the_bound_counts_only_the_wait_on_the_body() {
    // Frames 60 ms apart, read by a caller that takes a second over each: no stall, until
    // the body goes quiet for the bound.
    let mut body = std::pin::pin!(frames_apart(3, StdDuration::from_millis(60)));
    let started = tokio::time::Instant::now();
    for n in 0..3 {
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), Bytes::from(n.to_string()));
        tokio::time::sleep(StdDuration::from_secs(1)).await;
    }
    let error = body.frame().await.unwrap().unwrap_err();
    assert!(error.downcast_ref::<BodyStalled>().is_some());
    assert_eq!(started.elapsed(), StdDuration::from_millis(3 * 1_060 + 100));
    assert!(body.frame().await.is_none(), "a stalled body ends");
}
