//! A streaming call over a real network: an axum server-sent events endpoint on 127.0.0.1 that
//! drops every connection after a few events, read by a real hyper client through
//! `Policy::call_stream_resumable`, resuming with `Last-Event-ID`. Loopback only, bounded in
//! count and time, stops by itself.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use axum::extract::State as AxumState;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::routing::get;
use axum::Router;
use bytes::{Bytes, BytesMut};
use futures_util::{stream, Stream, StreamExt};
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stormguard_std::{Backoff, CallError, Event, Jitter, Policy};

/// Events the feed has in all.
const LAST: u64 = 9;
/// Events sent per connection before it is dropped.
const PER_CONNECTION: u64 = 3;

/// The `Last-Event-ID` of every connection the server accepted.
type Seen = Arc<Mutex<Vec<Option<u64>>>>;

async fn events(
    AxumState(seen): AxumState<Seen>,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<SseEvent, std::io::Error>>> {
    let from: Option<u64> = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    seen.lock().unwrap().push(from);
    let start = from.map_or(1, |n| n + 1);
    let sent = (start..=LAST).take(PER_CONNECTION as usize).map(|n| {
        Ok(SseEvent::default()
            .id(n.to_string())
            .data(format!("tick {n}")))
    });
    // Past the last event of this connection the stream fails: hyper aborts the response
    // mid-body, as a proxy timing out a long connection does.
    let dropped =
        (start + PER_CONNECTION <= LAST).then(|| Err(std::io::Error::other("connection dropped")));
    // Each event a few milliseconds after the one before, so what was sent reaches the client
    // before the connection breaks.
    Sse::new(stream::iter(sent.chain(dropped)).then(|event| async {
        tokio::time::sleep(StdDuration::from_millis(5)).await;
        event
    }))
}

/// Serves on an ephemeral loopback port until the test's runtime ends.
async fn serve(seen: Seen) -> String {
    let app = Router::new().route("/events", get(events)).with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/events")
}

/// One server-sent event as the client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tick {
    id: u64,
    data: String,
}

/// Parses one event's lines (`id:` and `data:`; comments and other fields ignored).
fn parse(block: &[u8]) -> Option<Tick> {
    let text = std::str::from_utf8(block).ok()?;
    let (mut id, mut data) = (None, String::new());
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    Some(Tick { id: id?, data })
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Opens the feed from `from` and reads it as a stream of events: a body that breaks is a
/// failed element.
async fn open(
    client: HttpClient,
    url: String,
    from: Option<u64>,
) -> Result<impl Stream<Item = Result<Tick, String>> + Send, String> {
    let mut request = Request::get(url).header("accept", "text/event-stream");
    if let Some(id) = from {
        request = request.header("last-event-id", id.to_string());
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    let body = response.into_body();
    Ok(stream::unfold(
        (body, BytesMut::new(), false),
        |(mut body, mut buffer, over)| async move {
            if over {
                return None;
            }
            loop {
                if let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                    let block = buffer.split_to(end + 2);
                    if let Some(tick) = parse(&block) {
                        return Some((Ok(tick), (body, buffer, false)));
                    }
                    continue;
                }
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            buffer.extend_from_slice(&data);
                        }
                    }
                    Some(Err(e)) => return Some((Err(e.to_string()), (body, buffer, true))),
                    None => return None,
                }
            }
        },
    ))
}

#[tokio::test]
async fn a_dropped_event_stream_resumes_from_the_last_event_id() {
    let seen: Seen = Arc::default();
    let url = serve(seen.clone()).await;
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let restarts = Arc::new(Mutex::new(Vec::new()));
    let heard = restarts.clone();
    let policy = Policy::builder("ticks")
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .listener(move |e: &Event<'_>| {
            if let Event::Restarted { restart, .. } = e {
                heard.lock().unwrap().push(*restart);
            }
        })
        .build()
        .unwrap();
    let started = StdInstant::now();
    let mut feed = policy
        .call_stream_resumable(
            |tick: &Tick| tick.id,
            move |from: Option<u64>| open(client.clone(), url.clone(), from),
        )
        .unwrap()
        .stall_timeout(StdDuration::from_secs(5))
        .unwrap();
    let mut got = Vec::new();
    while let Some(item) = tokio::time::timeout(StdDuration::from_secs(10), feed.next())
        .await
        .expect("the feed stalled")
    {
        got.push(item.unwrap());
    }
    let ids: Vec<u64> = got.iter().map(|t| t.id).collect();
    assert_eq!(ids, (1..=LAST).collect::<Vec<_>>());
    assert_eq!(got[4].data, "tick 5");
    assert_eq!(*seen.lock().unwrap(), [None, Some(3), Some(6)]);
    assert_eq!(feed.restarts(), 2);
    assert_eq!(*restarts.lock().unwrap(), [1, 2]);
    assert!(feed.last_error().is_some_and(|e| !e.is_empty()));
    // Two backoffs of 100 and 200 ms; bounded well above them.
    assert!(started.elapsed() < StdDuration::from_secs(10));
}

#[tokio::test]
async fn without_a_checkpoint_the_dropped_event_stream_ends_with_the_error() {
    let seen: Seen = Arc::default();
    let url = serve(seen.clone()).await;
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let policy = Policy::builder("ticks").build().unwrap();
    let feed = policy
        .call_stream(move || open(client.clone(), url.clone(), None))
        .unwrap();
    let got: Vec<Result<Tick, CallError<String>>> =
        tokio::time::timeout(StdDuration::from_secs(10), feed.collect())
            .await
            .expect("the feed stalled");
    assert_eq!(got.len(), PER_CONNECTION as usize + 1);
    assert!(got[..3].iter().all(Result::is_ok));
    assert!(matches!(got[3], Err(CallError::Failed(_))));
    assert_eq!(*seen.lock().unwrap(), [None]);
}
