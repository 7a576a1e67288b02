//! gRPC through the layer (feature `tonic`): [`GrpcLayer`], its request rules
//! [`GrpcRequests`], and [`ReadUnary`], which reads a unary response to its trailers inside
//! the attempt so that the classifier sees the status sent there.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::header::HeaderName;
use http::{Extensions, HeaderMap, HeaderValue, Method, Request, Response, Uri, Version};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use stormguard_core::wire::grpc::{format_timeout, parse_timeout};
use stormguard_core::{call::Criticality, Duration};
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;

use super::{PolicyLayer, PolicyService, Requests};
use crate::classify::{is_grpc, GrpcBodyEnd, Http};
use crate::clock::{Clock, DefaultClock};
use crate::events::{Listener, NoListener};
use crate::keyed::KeyedSetupError;
use crate::{KeyedPolicy, Policy};

/// What a body's error becomes once held (tonic's own body takes any such error).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// gRPC's deadline header: how long the caller waits, as 1 to 8 digits and a unit.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// What [`GrpcLayer`] adds to an attempt's ceiling in the `grpc-timeout` it sends: the server
/// gives up a little after the client would, so that the client's own attempt timeout decides
/// (and counts the attempt as timed out), and no answer the client would still take is thrown
/// away by the server for the time the request spent on the wire.
pub const GRPC_TIMEOUT_MARGIN: Duration = Duration::from_millis(20);

/// The most of a body the layer holds: a request body to replay, or a unary response read to
/// its trailers (4 MiB, tonic's default limit on a decoded message). Past it the body goes on
/// as a stream: the request gets one attempt, the response is classified by its headers.
pub const GRPC_BUFFER_LIMIT: usize = 4 << 20;

/// Marks a gRPC call whose response is a stream (server streaming): the layer reads its
/// response only until the first message, within the attempt, instead of to its trailers, so
/// the call is retried until its first message arrives and then flows to the caller. Insert it
/// into the `tonic::Request`'s extensions (they travel into the HTTP request). Client-streaming
/// and bidirectional calls need no mark: their request body is still open when the layer gets
/// it, so they get one attempt and their response is never read ahead.
///
/// ```
/// let mut request = tonic::Request::new(());
/// request.extensions_mut().insert(stormguard_std::tower::Streaming);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streaming;

/// Set on a request whose body was still open when the layer got it (a client stream): its
/// response may be a stream too, so it is not read ahead.
#[derive(Clone, Copy, Debug)]
struct OpenRequestBody;

/// The gRPC rules for requests (`http::Request<tonic::body::Body>`, what a tonic client sends
/// through its channel): a call whose request body is complete when the layer gets it (a unary
/// or server-streaming call: tonic encodes the one message at once) is buffered and can be
/// replayed; one still streaming gets exactly one attempt. Each attempt's ceiling goes to the
/// server in `grpc-timeout` (plus [`GRPC_TIMEOUT_MARGIN`]), except a stream's (marked
/// [`Streaming`], or a client stream), and a `grpc-timeout` on the request
/// the layer is given (the tonic client's own `Request::set_timeout`, or an inbound call on a
/// server) is adopted as the call's deadline.
///
/// ```
/// use stormguard_std::tower::{GrpcRequests, Requests, GRPC_TIMEOUT};
/// use stormguard_std::Duration;
///
/// let body = tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from_static(b"\0\0\0\0\0")));
/// let req = http::Request::post("/inventory.Stock/Get")
///     .header("content-type", "application/grpc")
///     .header(GRPC_TIMEOUT, "250m")
///     .body(body)
///     .unwrap();
/// assert_eq!(GrpcRequests.incoming_deadline(&req), Some(Duration::from_millis(250)));
/// let (req, template) = GrpcRequests.prepare(req);
/// assert!(template.is_some()); // a complete body: a unary call, replayable
/// # let _ = req;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcRequests;

/// Everything of a gRPC request, its body buffered, kept for replays.
#[derive(Clone, Debug)]
pub struct GrpcTemplate {
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
    extensions: Extensions,
    data: Vec<Bytes>,
    trailers: Option<HeaderMap>,
}

impl GrpcTemplate {
    fn request(&self) -> Request<Body> {
        let frames = self.data.iter().cloned().map(Frame::data);
        let frames = frames.chain(self.trailers.clone().map(Frame::trailers));
        let mut req = Request::new(Body::new(Buffered::<Body>::frames(frames.collect())));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = self.version;
        *req.headers_mut() = self.headers.clone();
        *req.extensions_mut() = self.extensions.clone();
        req
    }
}

impl Requests<Request<Body>> for GrpcRequests {
    type Template = GrpcTemplate;

    /// Never from a reference: a body is read by [`Requests::prepare`].
    fn template(&self, _: &Request<Body>) -> Option<GrpcTemplate> {
        None
    }

    fn prepare(&self, req: Request<Body>) -> (Request<Body>, Option<GrpcTemplate>) {
        let (mut parts, body) = req.into_parts();
        let read = read_ready(body);
        match read.rest {
            None if read.failed.is_none() => {
                let mut data = Vec::new();
                let mut trailers = None;
                for frame in read.frames {
                    match frame.into_data() {
                        Ok(bytes) => data.push(bytes),
                        Err(frame) => trailers = frame.into_trailers().ok(),
                    }
                }
                let template = GrpcTemplate {
                    method: parts.method,
                    uri: parts.uri,
                    version: parts.version,
                    headers: parts.headers,
                    extensions: parts.extensions,
                    data,
                    trailers,
                };
                (template.request(), Some(template))
            }
            _ => {
                parts.extensions.insert(OpenRequestBody);
                (Request::from_parts(parts, Body::new(read)), None)
            }
        }
    }

    fn replay(&self, template: &GrpcTemplate) -> Option<Request<Body>> {
        Some(template.request())
    }

    fn incoming_deadline(&self, req: &Request<Body>) -> Option<Duration> {
        parse_timeout(req.headers().get(GRPC_TIMEOUT)?.as_bytes())
    }

    /// Not for a stream (a call marked [`Streaming`], or a client or bidirectional stream):
    /// `grpc-timeout` is the whole call's deadline at the server, and a stream outlives its
    /// attempt, which bounds only the wait for the first message. Such a request keeps the
    /// `grpc-timeout` it came with, if any.
    fn set_attempt_ceiling(&self, req: &mut Request<Body>, ceiling: Duration) {
        let extensions = req.extensions();
        if extensions.get::<Streaming>().is_some() || extensions.get::<OpenRequestBody>().is_some()
        {
            return;
        }
        write_grpc_timeout(req.headers_mut(), ceiling);
    }

    /// As the HTTP rules read it: an [`AttemptSlot`](super::AttemptSlot) in the request's
    /// extensions.
    fn attempt_slot(&self, req: &Request<Body>) -> Option<super::AttemptSlot> {
        req.extensions().get::<super::AttemptSlot>().cloned()
    }

    /// The call's service (`package.Service` of the path `/package.Service/Method`), for
    /// [`GrpcLayer::per_service`].
    fn scope(&self, req: &Request<Body>) -> Option<String> {
        stormguard_core::wire::grpc::service_of(req.uri().path()).map(str::to_owned)
    }

    /// The `request` span: the method is POST, the path names the service and method.
    #[cfg(feature = "spans")]
    fn span(&self, req: &Request<Body>) -> tracing::Span {
        super::request_span(req.method().as_str(), super::Url::of(req.uri()))
    }

    /// A retry carries its number in [`ATTEMPT_HEADER`](super::ATTEMPT_HEADER) (gRPC metadata
    /// is headers), as the HTTP rules send it.
    fn set_attempt(&self, req: &mut Request<Body>, number: u32) {
        super::mark_attempt(req.headers_mut(), number);
    }

    /// As the HTTP rules read it: a [`Criticality`] in the request's extensions, else the
    /// label of the inbound request being served.
    fn criticality(&self, req: &Request<Body>) -> Option<Criticality> {
        super::request_criticality(req.extensions())
    }

    /// Sent in [`CRITICALITY_HEADER`](super::CRITICALITY_HEADER) (gRPC metadata is headers),
    /// for the server's layer to read back, capped.
    fn set_criticality(&self, req: &mut Request<Body>, criticality: Criticality) {
        super::write_criticality(req.headers_mut(), criticality);
    }
}

/// Writes `ceiling` plus [`GRPC_TIMEOUT_MARGIN`] into `grpc-timeout`.
pub(super) fn write_grpc_timeout(headers: &mut HeaderMap, ceiling: Duration) {
    let value = format_timeout(ceiling.saturating_add(GRPC_TIMEOUT_MARGIN));
    if let Ok(value) = HeaderValue::from_bytes(value.as_bytes()) {
        headers.insert(GRPC_TIMEOUT, value);
    }
}

/// Reads the frames of `body` that are ready now, without waiting (up to
/// [`GRPC_BUFFER_LIMIT`]): a tonic client's unary request is encoded in full on the first
/// polls, while a client stream waits for its caller. The rest, if any, stays in the body.
fn read_ready<B>(body: B) -> Buffered<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut body = body;
    let mut frames = VecDeque::new();
    let mut held = 0usize;
    let mut cx = Context::from_waker(Waker::noop());
    let (rest, failed) = loop {
        if held > GRPC_BUFFER_LIMIT {
            break (Some(body), None);
        }
        // A pending body registers the no-op waker; whoever polls it next registers its own.
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                held = held.saturating_add(frame.data_ref().map_or(0, Bytes::len));
                frames.push_back(frame);
            }
            Poll::Ready(Some(Err(e))) => break (None, Some(e.into())),
            Poll::Ready(None) => break (None, None),
            Poll::Pending => break (Some(body), None),
        }
    };
    Buffered {
        frames,
        failed,
        rest,
    }
}

/// A body replayed from frames already read, then what is left of the original, if anything.
struct Buffered<B> {
    frames: VecDeque<Frame<Bytes>>,
    failed: Option<BoxError>,
    rest: Option<B>,
}

impl<B> Buffered<B> {
    fn frames(frames: VecDeque<Frame<Bytes>>) -> Self {
        Buffered {
            frames,
            failed: None,
            rest: None,
        }
    }
}

impl<B> HttpBody for Buffered<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(frame) = self.frames.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx).map_err(Into::into),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
            && self.failed.is_none()
            && self.rest.as_ref().is_none_or(|rest| rest.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let held = self
            .frames
            .iter()
            .filter_map(Frame::data_ref)
            .map(Bytes::len);
        let held = u64::try_from(held.sum::<usize>()).unwrap_or(u64::MAX);
        match &self.rest {
            None => SizeHint::with_exact(held),
            Some(rest) => {
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(held));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(held));
                }
                hint
            }
        }
    }
}

/// The service under [`GrpcLayer`]'s policy: calls `S`, then reads a unary gRPC response to its
/// end (its trailers), within the attempt, so that its deadline covers the whole answer and the
/// classifier sees the status in the trailers ([`GrpcBodyEnd`] in the response's extensions).
/// A response to a call marked [`Streaming`] is read until its first message only. A
/// trailers-only response (the status in its headers), a response to a client stream, or a
/// response that is not gRPC, is handed back as it came.
#[derive(Clone, Debug)]
pub struct ReadUnary<S> {
    inner: S,
}

/// The future of a [`ReadUnary`] call.
pub type ReadUnaryFuture<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

impl<S, B> Service<Request<Body>> for ReadUnary<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ReadUnaryFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let extensions = req.extensions();
        // A client stream (or a bidirectional one) is still sending: its response is never
        // read ahead, which could wait on the caller's own next message.
        let open_request = extensions.get::<OpenRequestBody>().is_some();
        let server_stream = extensions.get::<Streaming>().is_some();
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await?;
            let headers = response.headers();
            if open_request || !is_grpc(headers) || headers.contains_key("grpc-status") {
                return Ok(response.map(Body::new));
            }
            let to = if server_stream {
                ReadTo::FirstMessage
            } else {
                ReadTo::End
            };
            Ok(read_ahead(response, to).await)
        })
    }
}

/// How far [`read_ahead`] reads a response within the attempt.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadTo {
    /// To its end (its trailers): a unary call, whose status the trailers carry.
    End,
    /// To its first whole message: a server stream, retried until that message like a unary
    /// call (`UNAVAILABLE` in trailers after the headers, a body broken before the message is
    /// whole, a stall cut by the attempt timeout), then handed back, that message first, to
    /// stream on.
    FirstMessage,
}

/// Whether `frames` hold a whole gRPC message: its 5-byte prefix (a compression flag and the
/// length, big-endian) and that many bytes after it.
fn holds_a_message(frames: &VecDeque<Frame<Bytes>>) -> bool {
    let data = || frames.iter().filter_map(Frame::data_ref);
    let mut prefix = data().flat_map(|d| d.iter().copied()).skip(1);
    let mut length = [0u8; 4];
    for byte in &mut length {
        match prefix.next() {
            Some(b) => *byte = b,
            None => return false,
        }
    }
    let length = u64::from(u32::from_be_bytes(length));
    let held = data().fold(0u64, |n, d| {
        n.saturating_add(u64::try_from(d.len()).unwrap_or(u64::MAX))
    });
    held >= length.saturating_add(5)
}

/// Reads `response`'s body as far as `to` says (and never past [`GRPC_BUFFER_LIMIT`]) and
/// hands it back, what was read first. A body read to its end carries how it ended in its
/// extensions; one handed back before its end streams on, classified by its headers alone.
async fn read_ahead<B>(response: Response<B>, to: ReadTo) -> Response<Body>
where
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let (mut parts, mut body) = response.into_parts();
    let mut frames = VecDeque::new();
    let mut held = 0usize;
    let (end, failed) = loop {
        if held > GRPC_BUFFER_LIMIT {
            // Too large to hold: the rest streams on.
            let read = Buffered {
                frames,
                failed: None,
                rest: Some(body),
            };
            return Response::from_parts(parts, Body::new(read));
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                held = held.saturating_add(frame.data_ref().map_or(0, Bytes::len));
                let trailers = frame.trailers_ref().cloned();
                frames.push_back(frame);
                if to == ReadTo::FirstMessage && holds_a_message(&frames) {
                    let read = Buffered {
                        frames,
                        failed: None,
                        rest: Some(body),
                    };
                    return Response::from_parts(parts, Body::new(read));
                }
                if let Some(trailers) = trailers {
                    break (GrpcBodyEnd::Trailers(trailers), None);
                }
            }
            Some(Err(e)) => break (GrpcBodyEnd::Failed, Some(e.into())),
            None => break (GrpcBodyEnd::NoTrailers, None),
        }
    };
    parts.extensions.insert(end);
    let read = Buffered::<B> {
        frames,
        failed,
        rest: None,
    };
    Response::from_parts(parts, Body::new(read))
}

/// A `tower::Layer` applying a [`Policy`] to a tonic client's channel (or to a tonic server's
/// services): [`PolicyLayer`] with the gRPC rules, [`GrpcRequests`] to replay unary calls and
/// carry deadlines, and the [`Http`] classifier, which reads a gRPC response by gRPC's rules
/// ([`grpc_outcome`](crate::classify::grpc_outcome)) from the status in its headers or, through
/// [`ReadUnary`], in its trailers.
///
/// ```
/// use stormguard_std::tower::GrpcLayer;
/// use stormguard_std::Policy;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::builder("inventory").attempt_timeout(std::time::Duration::from_millis(300)).build()?;
/// let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051").connect_lazy();
/// let guarded = tower::ServiceBuilder::new().layer(GrpcLayer::new(policy)).service(channel);
/// // Any generated tonic client takes it: `InventoryClient::new(guarded)`.
/// let _client = tonic::client::Grpc::new(guarded);
/// # Ok(()) }
/// ```
pub struct GrpcLayer<K = DefaultClock, L = NoListener> {
    layer: PolicyLayer<K, L, Http, GrpcRequests>,
}

impl<K: Clock + Clone, L: Listener + Clone> GrpcLayer<K, L> {
    /// Applies `policy` by the gRPC rules, with a breaker per service
    /// ([`GrpcLayer::per_service`], on by default).
    pub fn new(policy: Policy<K, L>) -> Self {
        GrpcLayer::shared(Arc::new(policy))
    }

    /// Like [`GrpcLayer::new`], for a policy already behind an `Arc`.
    pub fn shared(policy: Arc<Policy<K, L>>) -> Self {
        GrpcLayer {
            layer: PolicyLayer::shared(policy).requests(GrpcRequests),
        }
    }

    /// The policy applied.
    pub fn policy(&self) -> &Arc<Policy<K, L>> {
        self.layer.policy()
    }

    /// A breaker per gRPC service (`package.Service` of each call's path; on by default, this
    /// makes a new table): a failing service is cut off while the channel's other services are
    /// still called. The table and its rules are [`PolicyLayer::per_host`]'s
    /// ([`DEFAULT_HOSTS`](super::DEFAULT_HOSTS) services); the budget and limiters stay
    /// shared. A call whose path names no service is judged by the policy's own breaker.
    ///
    /// ```
    /// use stormguard_std::tower::GrpcLayer;
    /// let layer = GrpcLayer::new(stormguard_std::Policy::builder("inventory").build()?).per_service()?;
    /// assert!(layer.services().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn per_service(self) -> Result<Self, KeyedSetupError> {
        Ok(GrpcLayer {
            layer: self.layer.per_host()?,
        })
    }

    /// No table: every call is judged by the policy's own breaker, whatever its service.
    #[must_use]
    pub fn single_scope(self) -> Self {
        GrpcLayer {
            layer: self.layer.single_scope(),
        }
    }

    /// The table of per-service policies, with [`GrpcLayer::per_service`] (for a health
    /// endpoint: [`Registry::add_keyed`](crate::health::Registry::add_keyed)).
    pub fn services(&self) -> Option<&KeyedPolicy<String, K, L>> {
        self.layer.hosts()
    }
}

impl<K, L> Clone for GrpcLayer<K, L> {
    fn clone(&self) -> Self {
        GrpcLayer {
            layer: self.layer.clone(),
        }
    }
}

impl<K, L> fmt::Debug for GrpcLayer<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("GrpcLayer").field(&self.layer).finish()
    }
}

impl<S, K, L> Layer<S> for GrpcLayer<K, L> {
    type Service = PolicyService<ReadUnary<S>, K, L, Http, GrpcRequests>;

    fn layer(&self, inner: S) -> Self::Service {
        self.layer.layer(ReadUnary { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&'static [u8]]) -> VecDeque<Frame<Bytes>> {
        chunks
            .iter()
            .map(|c| Frame::data(Bytes::from_static(c)))
            .collect()
    }

    #[test]
    fn a_message_is_whole_once_its_prefix_and_its_length_in_bytes_are_held() {
        // A message of 3 bytes: flag 0, length 3 (big-endian), then the bytes.
        assert!(!holds_a_message(&frames(&[])));
        assert!(!holds_a_message(&frames(&[b"\0\0\0"])));
        assert!(!holds_a_message(&frames(&[b"\0\0\0\0\x03ab"])));
        assert!(holds_a_message(&frames(&[b"\0\0\0\0\x03abc"])));
        // Split across frames, prefix included, and with the next message begun.
        assert!(!holds_a_message(&frames(&[b"\0\0", b"\0\0\x03a", b"b"])));
        assert!(holds_a_message(&frames(&[b"\0\0", b"\0\0\x03a", b"bc\0"])));
        // An empty message is whole at its prefix.
        assert!(holds_a_message(&frames(&[b"\x01\0\0\0\0"])));
        // Trailers carry no bytes of it.
        let mut with_trailers = frames(&[b"\0\0\0\0\x01"]);
        with_trailers.push_back(Frame::trailers(HeaderMap::new()));
        assert!(!holds_a_message(&with_trailers));
    }
}
