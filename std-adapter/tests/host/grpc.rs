//! gRPC through the tower layer: a real tonic server on 127.0.0.1 that fails (`UNAVAILABLE`,
//! in its headers or in its trailers), throttles (`RESOURCE_EXHAUSTED` with a pushback),
//! refuses (`INVALID_ARGUMENT`) and stalls on command, called by a real tonic client through
//! [`GrpcLayer`]. Loopback only, bounded in count and time, stops with its runtime.
//!
//! The messages and both stubs are written by hand (prost's derive, tonic's `server::Grpc`
//! and `client::Grpc` with tonic-prost's codec): what `tonic-prost-build` would generate from
//! a `.proto`, without a protobuf compiler in the build.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration as StdDuration;

use bytes::Bytes;
use http::uri::PathAndQuery;
use stormguard_core::{BreakerSettings, Duration, Event, Outcome, State};
use stormguard_std::tower::{GrpcLayer, GRPC_TIMEOUT, GRPC_TIMEOUT_MARGIN};
use stormguard_std::{Breaker, CallError, Listener, Policy};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;
use tower::Service;

#[derive(Clone, PartialEq, prost::Message)]
struct Ask {
    #[prost(string, tag = "1")]
    item: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Stock {
    #[prost(uint32, tag = "1")]
    count: u32,
}

const GET: &str = "/stock.Inventory/Get";
/// The same method on the server's second service.
const LEDGER_GET: &str = "/stock.Ledger/Get";

/// What the server does with the next calls.
const HEALTHY: u8 = 0;
/// `UNAVAILABLE` in a trailers-only response (the status in the headers).
const UNAVAILABLE: u8 = 1;
/// `UNAVAILABLE` in trailers sent after the response's headers.
const UNAVAILABLE_IN_TRAILERS: u8 = 2;
/// `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms: 40`.
const EXHAUSTED: u8 = 3;
/// `INVALID_ARGUMENT`: the request is wrong.
const INVALID: u8 = 4;
/// No answer at all for 30 s.
const STALL: u8 = 5;
/// The headers at once, then nothing for 30 s.
const STALL_AFTER_HEADERS: u8 = 6;
/// For `Watch`: the first message, then `UNAVAILABLE` mid-stream.
const BREAK_AFTER_FIRST: u8 = 7;

/// The dependency: misbehaves `for_calls` times in `mode`, then answers; counts every call and
/// keeps the `grpc-timeout` and attempt mark of each.
#[derive(Default)]
struct Dependency {
    mode: AtomicU8,
    for_calls: AtomicU32,
    calls: AtomicU32,
    timeout: Mutex<Option<String>>,
    /// The attempt number each call carried in `x-stormguard-attempt` ("" for none).
    marks: Mutex<Vec<String>>,
    /// How far apart `Watch` sends its messages, in milliseconds (0: 5 ms).
    watch_apart_ms: std::sync::atomic::AtomicU64,
}

impl Dependency {
    fn misbehave(&self, mode: u8, for_calls: u32) {
        self.mode.store(mode, Ordering::SeqCst);
        self.for_calls.store(for_calls, Ordering::SeqCst);
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    /// This call's mode: the one set, while calls to misbehave are left.
    fn next_mode(&self) -> u8 {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let left = self
            .for_calls
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        match left {
            Ok(_) => self.mode.load(Ordering::SeqCst),
            Err(_) => HEALTHY,
        }
    }
}

/// The server stub: `Inventory.Get` by hand, as generated code would route it.
#[derive(Clone)]
struct Inventory(Arc<Dependency>);

impl NamedService for Inventory {
    const NAME: &'static str = "stock.Inventory";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

fn grpc_response(status: Option<&'static str>) -> http::Response<Body> {
    let mut response = http::Response::builder().header("content-type", "application/grpc");
    if let Some(code) = status {
        response = response.header("grpc-status", code);
    }
    response.body(Body::empty()).unwrap()
}

impl Service<http::Request<Body>> for Inventory {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let dep = self.0.clone();
        Box::pin(async move {
            let watch = req.uri().path().ends_with("/Watch");
            if !watch && !req.uri().path().ends_with("/Get") {
                return Ok(grpc_response(Some("12"))); // UNIMPLEMENTED
            }
            *dep.timeout.lock().unwrap() = req
                .headers()
                .get(GRPC_TIMEOUT)
                .map(|v| v.to_str().unwrap().to_owned());
            dep.marks.lock().unwrap().push(
                req.headers()
                    .get(stormguard_std::tower::ATTEMPT_HEADER)
                    .map_or(String::new(), |v| v.to_str().unwrap().to_owned()),
            );
            let mode = dep.next_mode();
            match mode {
                UNAVAILABLE => return Ok(grpc_response(Some("14"))),
                INVALID => return Ok(grpc_response(Some("3"))),
                EXHAUSTED => {
                    let mut response = grpc_response(Some("8"));
                    response
                        .headers_mut()
                        .insert("grpc-retry-pushback-ms", "40".parse().unwrap());
                    return Ok(response);
                }
                UNAVAILABLE_IN_TRAILERS => {
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", "14".parse().unwrap());
                    let mut response = grpc_response(None);
                    *response.body_mut() = Body::new(Tail {
                        trailers: Some(trailers),
                        stalls: false,
                    });
                    return Ok(response);
                }
                STALL => tokio::time::sleep(StdDuration::from_secs(30)).await,
                STALL_AFTER_HEADERS => {
                    let mut response = grpc_response(None);
                    *response.body_mut() = Body::new(Tail {
                        trailers: None,
                        stalls: true,
                    });
                    return Ok(response);
                }
                _ => {}
            }
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Stock, Ask>::default());
            if watch {
                let watch = Watch {
                    apart: StdDuration::from_millis(
                        dep.watch_apart_ms.load(Ordering::SeqCst).max(5),
                    ),
                    breaking: mode == BREAK_AFTER_FIRST,
                };
                return Ok(grpc.server_streaming(watch, req).await);
            }
            Ok(grpc.unary(Get, req).await)
        })
    }
}

/// The server's second service, `Ledger.Get`: the same stub over a dependency of its own.
#[derive(Clone)]
struct Ledger(Arc<Dependency>);

impl NamedService for Ledger {
    const NAME: &'static str = "stock.Ledger";
}

impl Service<http::Request<Body>> for Ledger {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        Inventory(self.0.clone()).call(req)
    }
}

/// A response body after the headers: `trailers` alone, or (`None`) nothing ever.
struct Tail {
    trailers: Option<http::HeaderMap>,
    stalls: bool,
}

impl http_body::Body for Tail {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Status>>> {
        match self.trailers.take() {
            Some(trailers) => Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers)))),
            None if self.stalls => Poll::Pending,
            None => Poll::Ready(None),
        }
    }
}

/// The handler of `Get`: 7 in stock, whatever is asked.
struct Get;

impl tonic::server::UnaryService<Ask> for Get {
    type Response = Stock;
    type Future = BoxFuture<Result<tonic::Response<Stock>, Status>>;

    fn call(&mut self, _: tonic::Request<Ask>) -> Self::Future {
        Box::pin(async { Ok(tonic::Response::new(Stock { count: 7 })) })
    }
}

/// The handler of `Watch`, a server stream: the stock 1, 2 and 3, `apart` from each other,
/// or, `breaking`, the stock 1 and then `UNAVAILABLE`.
struct Watch {
    apart: StdDuration,
    breaking: bool,
}

type StockStream = Pin<Box<dyn futures_util::Stream<Item = Result<Stock, Status>> + Send>>;

impl tonic::server::ServerStreamingService<Ask> for Watch {
    type Response = Stock;
    type ResponseStream = StockStream;
    type Future = BoxFuture<Result<tonic::Response<StockStream>, Status>>;

    fn call(&mut self, _: tonic::Request<Ask>) -> Self::Future {
        use futures_util::StreamExt;
        let (apart, breaking) = (self.apart, self.breaking);
        let counts = futures_util::stream::iter(1..=3).then(move |count| async move {
            tokio::time::sleep(apart).await;
            if breaking && count > 1 {
                return Err(Status::unavailable("lost the replica"));
            }
            Ok(Stock { count })
        });
        Box::pin(async move { Ok(tonic::Response::new(Box::pin(counts) as StockStream)) })
    }
}

/// Serves `Inventory` on an ephemeral loopback port until the test's runtime ends.
async fn serve(dep: Arc<Dependency>) -> String {
    serve_both(dep, Arc::default()).await
}

/// Serves `Inventory` over `inventory` and `Ledger` over `ledger`, likewise.
async fn serve_both(inventory: Arc<Dependency>, ledger: Arc<Dependency>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        Server::builder()
            .add_service(Inventory(inventory))
            .add_service(Ledger(ledger))
            .serve_with_incoming(incoming),
    );
    format!("http://{addr}")
}

/// Every retry's wait and the outcome it followed, and every state the breaker entered.
#[derive(Clone, Default)]
struct Seen {
    retries: Arc<Mutex<Vec<(Duration, Outcome)>>>,
    states: Arc<Mutex<Vec<State>>>,
}

impl Listener for Seen {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::Retry { delay, after, .. } => {
                self.retries.lock().unwrap().push((*delay, *after));
            }
            Event::StateChanged { to, .. } => self.states.lock().unwrap().push(*to),
            _ => {}
        }
    }
}

/// A breaker that opens after 3 consecutive failures, for 10 s (longer than any test).
fn breaker() -> Breaker {
    Breaker::new(
        BreakerSettings::builder("inventory")
            .consecutive_failures(3)
            .failure_rate(None)
            .slow_calls(None)
            .break_duration(Duration::from_secs(10))
            .jitter(false)
            .build()
            .unwrap(),
    )
}

/// Long enough that no healthy call on a loaded machine reaches it: only the stalls do.
const ATTEMPT_TIMEOUT: StdDuration = StdDuration::from_secs(1);

type Client = tonic::client::Grpc<
    stormguard_std::tower::PolicyService<
        stormguard_std::tower::ReadUnary<Channel>,
        stormguard_std::DefaultClock,
        Seen,
        stormguard_std::Http,
        stormguard_std::tower::GrpcRequests,
    >,
>;

/// A tonic client through the layer: 3 attempts of 1 s at most, 2 ms apart.
async fn client(url: String, breaker: &Breaker, seen: &Seen) -> Client {
    // One breaker for the channel (the handle the tests read), not one per service.
    let layer = GrpcLayer::new(policy(breaker, seen)).single_scope();
    let channel = Endpoint::from_shared(url).unwrap().connect().await.unwrap();
    tonic::client::Grpc::new(tower::ServiceBuilder::new().layer(layer).service(channel))
}

/// 3 attempts of 1 s at most, 2 ms apart, on `breaker`.
fn policy(breaker: &Breaker, seen: &Seen) -> Policy<stormguard_std::DefaultClock, Seen> {
    Policy::builder("inventory")
        .breaker(breaker.clone())
        .max_attempts(3)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .deadline(StdDuration::from_secs(10))
        .backoff(
            stormguard_std::Backoff::builder()
                .base(Duration::from_millis(2))
                .jitter(stormguard_std::Jitter::None)
                .build()
                .unwrap(),
        )
        .listener(seen.clone())
        .build()
        .unwrap()
}

async fn get(client: &mut Client) -> Result<u32, Status> {
    get_from(client, GET).await
}

async fn get_from(client: &mut Client, path: &'static str) -> Result<u32, Status> {
    client
        .ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let ask = tonic::Request::new(Ask {
        item: "anvil".into(),
    });
    let codec = ProstCodec::<Ask, Stock>::default();
    let stock = client
        .unary(ask, PathAndQuery::from_static(path), codec)
        .await?;
    Ok(stock.into_inner().count)
}

const WATCH: &str = "/stock.Inventory/Watch";

/// Calls the server stream `Watch` (marked as one for the layer) and reads every message.
async fn watch(client: &mut Client) -> Result<Vec<u32>, Status> {
    client
        .ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let mut ask = tonic::Request::new(Ask {
        item: "anvil".into(),
    });
    ask.extensions_mut()
        .insert(stormguard_std::tower::Streaming);
    let codec = ProstCodec::<Ask, Stock>::default();
    let mut stream = client
        .server_streaming(ask, PathAndQuery::from_static(WATCH), codec)
        .await?
        .into_inner();
    let mut counts = Vec::new();
    while let Some(stock) = stream.message().await? {
        counts.push(stock.count);
    }
    Ok(counts)
}

/// Runs `scenario` against a fresh server, bounded in time.
async fn bounded<F: Future<Output = ()>>(scenario: F) {
    tokio::time::timeout(StdDuration::from_secs(60), scenario)
        .await
        .expect("the gRPC scenario is bounded in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_is_retried_from_headers_and_from_trailers() {
    bounded(async {
        let dep = Arc::new(Dependency::default());
        let (breaker, seen) = (breaker(), Seen::default());
        let mut client = client(serve(dep.clone()).await, &breaker, &seen).await;

        assert_eq!(get(&mut client).await.unwrap(), 7);
        assert_eq!(dep.calls(), 1);

        // Twice UNAVAILABLE, trailers-only: two retries, then the answer; each retry carries
        // its attempt number for the server's nested-retry rule.
        dep.misbehave(UNAVAILABLE, 2);
        assert_eq!(get(&mut client).await.unwrap(), 7);
        assert_eq!(dep.calls(), 4);
        assert_eq!(*dep.marks.lock().unwrap(), ["", "", "2", "3"]);

        // Twice UNAVAILABLE in trailers after a 200's headers: the layer reads them too.
        dep.misbehave(UNAVAILABLE_IN_TRAILERS, 2);
        assert_eq!(get(&mut client).await.unwrap(), 7);
        assert_eq!(dep.calls(), 7);

        let after: Vec<Outcome> = seen.retries.lock().unwrap().iter().map(|r| r.1).collect();
        assert_eq!(after, vec![Outcome::Transient; 4]);
        // Every attempt told the server its ceiling, plus the margin.
        let sent = dep.timeout.lock().unwrap().clone().unwrap();
        let sent = stormguard_core::wire::grpc::parse_timeout(sent.as_bytes()).unwrap();
        assert_eq!(
            sent,
            Duration::from(ATTEMPT_TIMEOUT).saturating_add(GRPC_TIMEOUT_MARGIN)
        );

        // Failing for good: three attempts, and the client sees the status itself.
        dep.misbehave(UNAVAILABLE, 3);
        let status = get(&mut client).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(dep.calls(), 10);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_exhausted_is_a_throttle_honoured_and_never_counted() {
    bounded(async {
        let dep = Arc::new(Dependency::default());
        let (breaker, seen) = (breaker(), Seen::default());
        let mut client = client(serve(dep.clone()).await, &breaker, &seen).await;

        dep.misbehave(EXHAUSTED, 1);
        assert_eq!(get(&mut client).await.unwrap(), 7);
        assert_eq!(dep.calls(), 2);
        let retries = seen.retries.lock().unwrap().clone();
        let pushback = Duration::from_millis(40);
        assert_eq!(retries.len(), 1);
        assert_eq!(
            retries[0].1,
            Outcome::Throttled {
                retry_after: Some(pushback)
            }
        );
        assert!(retries[0].0 >= pushback, "{:?}", retries[0].0);

        // Throttled on every attempt of three calls (9 answers, more than the 3 consecutive
        // failures that would trip it): the breaker never counts them.
        dep.misbehave(EXHAUSTED, 9);
        for _ in 0..3 {
            let status = get(&mut client).await.unwrap_err();
            assert_eq!(status.code(), Code::ResourceExhausted);
        }
        assert_eq!(dep.calls(), 11);
        assert_eq!(breaker.state(), State::Closed);
        assert_eq!(breaker.snapshot().consecutive_failures, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_status_is_answered_once_and_not_counted() {
    bounded(async {
        let dep = Arc::new(Dependency::default());
        let (breaker, seen) = (breaker(), Seen::default());
        let mut client = client(serve(dep.clone()).await, &breaker, &seen).await;

        dep.misbehave(INVALID, 5);
        for n in 1..=5 {
            let status = get(&mut client).await.unwrap_err();
            assert_eq!(status.code(), Code::InvalidArgument);
            assert_eq!(dep.calls(), n);
        }
        assert!(seen.retries.lock().unwrap().is_empty());
        assert_eq!(breaker.state(), State::Closed);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_is_cut_by_the_attempt_ceiling_before_or_after_the_headers() {
    bounded(async {
        let dep = Arc::new(Dependency::default());
        let (breaker, seen) = (breaker(), Seen::default());
        let mut client = client(serve(dep.clone()).await, &breaker, &seen).await;

        dep.misbehave(STALL, 1);
        assert_eq!(get(&mut client).await.unwrap(), 7);
        assert_eq!(dep.calls(), 2);

        // The headers come at once, the rest never: the attempt's ceiling covers the whole
        // answer, not its headers alone.
        dep.misbehave(STALL_AFTER_HEADERS, 1);
        assert_eq!(get(&mut client).await.unwrap(), 7);
        assert_eq!(dep.calls(), 4);

        let after: Vec<Outcome> = seen.retries.lock().unwrap().iter().map(|r| r.1).collect();
        assert_eq!(after, vec![Outcome::TimedOut; 2]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_is_retried_until_its_first_message_then_flows() {
    bounded(async {
        let dep = Arc::new(Dependency::default());
        let (breaker, seen) = (breaker(), Seen::default());
        let mut client = client(serve(dep.clone()).await, &breaker, &seen).await;

        assert_eq!(watch(&mut client).await.unwrap(), [1, 2, 3]);
        assert_eq!(dep.calls(), 1);

        // `UNAVAILABLE` in the trailers after the headers, before any message: retried.
        dep.misbehave(UNAVAILABLE_IN_TRAILERS, 2);
        assert_eq!(watch(&mut client).await.unwrap(), [1, 2, 3]);
        assert_eq!(dep.calls(), 4);

        // The headers, then nothing: the attempt's ceiling covers the wait for the first
        // message.
        dep.misbehave(STALL_AFTER_HEADERS, 1);
        assert_eq!(watch(&mut client).await.unwrap(), [1, 2, 3]);
        assert_eq!(dep.calls(), 6);

        let after: Vec<Outcome> = seen.retries.lock().unwrap().iter().map(|r| r.1).collect();
        assert_eq!(
            after,
            [Outcome::Transient, Outcome::Transient, Outcome::TimedOut]
        );
        // A stream outlives its attempt: the server is sent no deadline from it.
        assert_eq!(*dep.timeout.lock().unwrap(), None);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stream_flows_past_the_attempt_timeout_and_a_failure_after_its_first_message_is_the_callers(
) {
    bounded(async {
        let dep = Arc::new(Dependency::default());
        let (breaker, seen) = (breaker(), Seen::default());
        let mut client = client(serve(dep.clone()).await, &breaker, &seen).await;

        // Three messages 600 ms apart: 1.8 s in all, past the 1 s attempt timeout, which
        // bounds the first message alone.
        dep.watch_apart_ms.store(600, Ordering::SeqCst);
        assert_eq!(watch(&mut client).await.unwrap(), [1, 2, 3]);
        assert_eq!(dep.calls(), 1);

        // `UNAVAILABLE` after the first message: the stream has begun, so it is not retried;
        // the status reaches the caller.
        dep.watch_apart_ms.store(5, Ordering::SeqCst);
        dep.misbehave(BREAK_AFTER_FIRST, 1);
        let status = watch(&mut client).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(dep.calls(), 2);
        assert!(seen.retries.lock().unwrap().is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_on_a_failing_service_and_keeps_calls_off_it() {
    bounded(async {
        let dep = Arc::new(Dependency::default());
        let (breaker, seen) = (breaker(), Seen::default());
        let mut client = client(serve(dep.clone()).await, &breaker, &seen).await;

        dep.misbehave(UNAVAILABLE, u32::MAX);
        // The first call's three attempts are the three consecutive failures that trip it.
        let status = get(&mut client).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(dep.calls(), 3);
        assert_eq!(breaker.state(), State::Open);
        assert_eq!(*seen.states.lock().unwrap(), vec![State::Open]);

        // While open, no call reaches the server, and the client is told why.
        let refused = get(&mut client).await.unwrap_err();
        assert_eq!(dep.calls(), 3);
        let cause = std::error::Error::source(&refused)
            .and_then(|e| e.downcast_ref::<CallError<tonic::transport::Error>>());
        assert!(
            matches!(cause, Some(CallError::Rejected { .. })),
            "{refused:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_service_a_failing_service_is_cut_off_and_the_channels_other_service_still_called() {
    bounded(async {
        let (inventory, ledger) = (
            Arc::new(Dependency::default()),
            Arc::new(Dependency::default()),
        );
        let url = serve_both(inventory.clone(), ledger.clone()).await;
        let (breaker, seen) = (breaker(), Seen::default());
        let layer = GrpcLayer::new(policy(&breaker, &seen))
            .per_service()
            .unwrap();
        let services = layer.services().unwrap().clone();
        let channel = Endpoint::from_shared(url).unwrap().connect().await.unwrap();
        let mut client =
            tonic::client::Grpc::new(tower::ServiceBuilder::new().layer(layer).service(channel));

        inventory.misbehave(UNAVAILABLE, u32::MAX);
        // Inventory's three failed attempts trip Inventory's breaker alone.
        assert_eq!(
            get(&mut client).await.unwrap_err().code(),
            Code::Unavailable
        );
        assert_eq!(inventory.calls(), 3);
        let inventory_breaker = services.breaker(&"stock.Inventory".to_owned()).unwrap();
        assert_eq!(inventory_breaker.state(), State::Open);
        // The ledger, on the same channel, is still called.
        assert_eq!(get_from(&mut client, LEDGER_GET).await.unwrap(), 7);
        assert_eq!(ledger.calls(), 1);
        // Inventory is kept off: refused, no call reaches it.
        assert!(get(&mut client).await.is_err());
        assert_eq!(inventory.calls(), 3);
        let mut keys = services.keys();
        keys.sort();
        assert_eq!(keys, ["stock.Inventory", "stock.Ledger"]);
        // The template's own breaker sees no call under per-service scope.
        assert_eq!(breaker.state(), State::Closed);
    })
    .await;
}

#[test]
fn an_open_request_body_is_never_replayed_and_a_complete_one_is() {
    use stormguard_std::tower::{GrpcRequests, Requests};
    let call = |body: Body| {
        http::Request::post(GET)
            .header("content-type", "application/grpc")
            .body(body)
            .unwrap()
    };
    // A client stream still waiting for its caller: one attempt only.
    let open = Body::new(Tail {
        trailers: None,
        stalls: true,
    });
    assert!(GrpcRequests.prepare(call(open)).1.is_none());
    // One encoded message, there at once: buffered, and every replay carries it.
    let message = Bytes::from_static(b"\0\0\0\0\x02\x0a\x00");
    let complete = Body::new(http_body_util::Full::new(message.clone()));
    let (first, template) = GrpcRequests.prepare(call(complete));
    let replay = GrpcRequests.replay(&template.unwrap()).unwrap();
    for req in [first, replay] {
        let read = block_on(http_body_util::BodyExt::collect(req.into_body()));
        assert_eq!(read.unwrap().to_bytes(), message);
    }
}

#[test]
fn a_buffered_grpc_post_is_replayable_under_the_http_rules_and_carries_its_ceiling() {
    use stormguard_std::tower::{HttpRequests, Requests};
    let grpc = http::Request::post(GET)
        .header("content-type", "application/grpc+proto")
        .body(String::new())
        .unwrap();
    let plain = http::Request::post(GET).body(String::new()).unwrap();
    assert!(HttpRequests::default().template(&plain).is_none());
    let mut grpc: http::Request<String> = HttpRequests::default()
        .replay(&HttpRequests::default().template(&grpc).unwrap())
        .unwrap();
    HttpRequests::default().set_attempt_ceiling(&mut grpc, Duration::from_millis(80));
    assert_eq!(grpc.headers()[GRPC_TIMEOUT], "100000u");
}

/// Runs a future that needs no timer or socket to its end on a small runtime.
fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}
