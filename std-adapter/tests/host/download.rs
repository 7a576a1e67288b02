//! Resumable downloads over a real network: an axum server on 127.0.0.1 whose first response
//! breaks (or stalls) mid-body, read by a real reqwest client through `download`, resuming with
//! `Range` and `If-Range` against a strong `ETag`. Loopback only, bounded in count and time,
//! stops by itself.
#![cfg(feature = "reqwest")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_possible_truncation,
    missing_docs
)]

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use axum::body::Body;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use futures_util::{stream, StreamExt};
use stormguard_std::{download, CallError, DownloadError, Outcome, Policy};

/// The resource's size.
const SIZE: usize = 64 * 1024;
/// What the first response sends before it breaks or stalls.
const FIRST_PART: usize = 20 * 1024 + 7;

/// The resource: deterministic bytes.
fn resource() -> Vec<u8> {
    (0..SIZE).map(|i| (i * 31 % 251) as u8).collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The first response breaks after `FIRST_PART` bytes.
    Breaks,
    /// The first response goes quiet after `FIRST_PART` bytes.
    Stalls,
    /// The first response breaks after `FIRST_PART` bytes, and a resumed range starts a byte
    /// late (a server that gets ranges wrong).
    Shifted,
    /// The first response sends every byte, then breaks before its end.
    BreaksAtTheEnd,
}

struct Server {
    mode: Mode,
    /// The `ETag` the server sends, and matches `If-Range` against.
    etag: Mutex<&'static str>,
    /// The `Range` header of each request (`None`: the whole resource).
    ranges: Mutex<Vec<Option<String>>>,
    /// The `Accept-Encoding` header of each request.
    encodings: Mutex<Vec<Option<String>>>,
}

async fn blob(AxumState(server): AxumState<Arc<Server>>, headers: HeaderMap) -> Response {
    let data = resource();
    let etag = *server.etag.lock().unwrap();
    let range = headers
        .get("range")
        .map(|v| v.to_str().unwrap().to_string());
    let first = server.ranges.lock().unwrap().is_empty();
    server.ranges.lock().unwrap().push(range.clone());
    server.encodings.lock().unwrap().push(
        headers
            .get("accept-encoding")
            .map(|v| v.to_str().unwrap().to_string()),
    );
    let if_range_holds = headers.get("if-range").is_some_and(|v| v == etag);
    let start = match range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
        Some(r) if if_range_holds => r.trim_end_matches('-').parse::<usize>().unwrap(),
        _ => 0,
    };
    if start == SIZE {
        let mut r = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
        let value = format!("bytes */{SIZE}");
        r.headers_mut()
            .insert("content-range", HeaderValue::from_str(&value).unwrap());
        return r;
    }
    let rest = Bytes::from(data[start..].to_vec());
    let mut response = if first {
        // Chunks of 4 KiB, then a break or a stall past the first part.
        let part = if server.mode == Mode::BreaksAtTheEnd {
            SIZE
        } else {
            FIRST_PART
        };
        let sent: Vec<Result<Bytes, std::io::Error>> = rest[..part]
            .chunks(4096)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let mode = server.mode;
        let tail = stream::once(async move {
            tokio::time::sleep(StdDuration::from_millis(20)).await;
            if mode == Mode::Stalls {
                std::future::pending::<()>().await;
            }
            Err(std::io::Error::other("connection dropped"))
        });
        let body = stream::iter(sent).chain(tail);
        let mut r = Response::new(Body::from_stream(body));
        // Chunked when every byte is sent: the client then waits for the body's end, which
        // breaks; with the length, it would be complete at the last byte.
        if server.mode != Mode::BreaksAtTheEnd {
            r.headers_mut()
                .insert("content-length", HeaderValue::from(SIZE));
        }
        r
    } else {
        let mut r = rest.clone().into_response();
        if start > 0 {
            *r.status_mut() = StatusCode::PARTIAL_CONTENT;
            let said = if server.mode == Mode::Shifted {
                start + 1
            } else {
                start
            };
            let value = format!("bytes {said}-{}/{SIZE}", SIZE - 1);
            r.headers_mut()
                .insert("content-range", HeaderValue::from_str(&value).unwrap());
        }
        r
    };
    response
        .headers_mut()
        .insert("etag", HeaderValue::from_static(etag));
    response
}

/// Serves on an ephemeral loopback port until the test's runtime ends.
async fn serve(mode: Mode, etag: &'static str) -> (Arc<Server>, String) {
    let server = Arc::new(Server {
        mode,
        etag: Mutex::new(etag),
        ranges: Mutex::new(Vec::new()),
        encodings: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/blob", get(blob))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (server, format!("http://{addr}/blob"))
}

fn policy() -> Policy {
    Policy::builder("mirror")
        .attempt_timeout(StdDuration::from_secs(2))
        .build()
        .unwrap()
}

/// Reads the whole download: the bytes, and the error it ended with, if any.
async fn read_all<S>(mut body: S) -> (Vec<u8>, Option<CallError<DownloadError>>)
where
    S: futures_util::Stream<Item = Result<Bytes, CallError<DownloadError>>> + Unpin,
{
    let mut got = Vec::new();
    let read = async {
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(c) => got.extend_from_slice(&c),
                Err(e) => return Some(e),
            }
        }
        None
    };
    let end = tokio::time::timeout(StdDuration::from_secs(20), read)
        .await
        .expect("the download hung");
    (got, end)
}

#[tokio::test]
async fn a_broken_body_resumes_with_range_against_a_strong_etag() {
    let (server, url) = serve(Mode::Breaks, "\"v1\"").await;
    let policy = policy();
    let client = reqwest::Client::new();
    let request = client.get(&url).build().unwrap();
    let mut body = download(&policy, client, request).unwrap();
    let (got, end) = read_all(&mut body).await;
    assert!(end.is_none(), "ended with {end:?}");
    assert_eq!(got, resource());
    assert_eq!(body.restarts(), 1);
    assert_eq!(body.last_loss(), Some(Outcome::Transient));
    assert!(matches!(body.last_error(), Some(DownloadError::Request(_))));
    let ranges = server.ranges.lock().unwrap().clone();
    assert_eq!(ranges, [None, Some(format!("bytes={FIRST_PART}-"))]);
    // Offsets count the bytes as sent: every request asks for them unencoded.
    let identity = Some("identity".to_string());
    assert_eq!(
        *server.encodings.lock().unwrap(),
        [identity.clone(), identity]
    );
}

#[tokio::test]
async fn a_range_that_starts_elsewhere_ends_the_download() {
    let (server, url) = serve(Mode::Shifted, "\"v1\"").await;
    let policy = policy();
    let client = reqwest::Client::new();
    let request = client.get(&url).build().unwrap();
    let (got, end) = read_all(download(&policy, client, request).unwrap()).await;
    assert_eq!(got.len(), FIRST_PART);
    assert!(
        matches!(end, Some(CallError::Failed(DownloadError::Changed))),
        "ended with {end:?}"
    );
    assert_eq!(server.ranges.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_body_broken_after_its_last_byte_ends_complete() {
    let (server, url) = serve(Mode::BreaksAtTheEnd, "\"v1\"").await;
    let policy = policy();
    let client = reqwest::Client::new();
    let request = client.get(&url).build().unwrap();
    let mut body = download(&policy, client, request).unwrap();
    let (got, end) = read_all(&mut body).await;
    assert!(end.is_none(), "ended with {end:?}");
    assert_eq!(got, resource());
    assert_eq!(body.restarts(), 1);
    let ranges = server.ranges.lock().unwrap().clone();
    assert_eq!(ranges, [None, Some(format!("bytes={SIZE}-"))]);
}

#[tokio::test]
async fn a_stalled_body_ends_as_a_timeout_and_resumes() {
    let (server, url) = serve(Mode::Stalls, "\"v1\"").await;
    let policy = policy();
    let client = reqwest::Client::new();
    let request = client.get(&url).build().unwrap();
    let mut body = download(&policy, client, request).unwrap();
    let (got, end) = read_all(&mut body).await;
    assert!(end.is_none(), "ended with {end:?}");
    assert_eq!(got, resource());
    assert_eq!(body.last_loss(), Some(Outcome::TimedOut));
    assert_eq!(server.ranges.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_weak_etag_does_not_resume() {
    let (server, url) = serve(Mode::Breaks, "W/\"v1\"").await;
    let policy = policy();
    let client = reqwest::Client::new();
    let request = client.get(&url).build().unwrap();
    let mut body = download(&policy, client, request).unwrap();
    let (got, end) = read_all(&mut body).await;
    assert_eq!(got.len(), FIRST_PART);
    // The break ends the download as itself: no restart is paid for, no second request goes.
    assert!(
        matches!(end, Some(CallError::Failed(DownloadError::Request(_)))),
        "ended with {end:?}"
    );
    assert_eq!(body.restarts(), 0);
    assert_eq!(server.ranges.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_resource_that_changed_ends_the_download() {
    let (server, url) = serve(Mode::Breaks, "\"v1\"").await;
    let policy = policy();
    let client = reqwest::Client::new();
    let request = client.get(&url).build().unwrap();
    let mut body = download(&policy, client, request).unwrap();
    // The first chunk, then the resource changes under the download.
    let first = body.next().await.unwrap().unwrap();
    assert!(!first.is_empty());
    *server.etag.lock().unwrap() = "\"v2\"";
    let (got, end) = read_all(body).await;
    assert_eq!(first.len() + got.len(), FIRST_PART);
    assert!(
        matches!(end, Some(CallError::Failed(DownloadError::Changed))),
        "ended with {end:?}"
    );
    assert_eq!(server.ranges.lock().unwrap().len(), 2);
}
