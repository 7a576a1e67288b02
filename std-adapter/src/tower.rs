//! A [`tower`](https://docs.rs/tower) `Layer`/`Service` applying a [`Policy`] to any service:
//! hyper, axum, tonic and reqwest stacks (feature `tower`).
//!
//! [`PolicyLayer`] wraps a service; every request becomes one guarded call: the breaker is
//! asked before every attempt, the budget before every retry, each attempt races its attempt
//! deadline, refusals come back after the guarded pause as [`CallError::Rejected`] (unless the
//! service had answered: a retry refused after a 500 or a 429 hands that response back at
//! once, status, body and headers). The
//! default classifier is [`Http`] (5xx and connection errors transient, 429 and 503 with
//! `Retry-After` throttled, 408 transient, other 4xx answers: returned, never retried, and
//! counted as healthy).
//!
//! Retries need the request again. [`Requests`] says which requests can be replayed and how:
//! the default, [`HttpRequests`], replays only idempotent requests (`GET`, `HEAD`, `OPTIONS`,
//! `PUT`, `DELETE`, `TRACE`, a request carrying an [`IDEMPOTENCY_KEY`] header, or one carrying
//! the [`Idempotent`] extension) whose body is buffered (`Full<Bytes>`, `Bytes`, `String`,
//! `Vec<u8>`, `()`, ..., or a `Clone` body named with [`PolicyLayer::replay_body`]); any other
//! body (a stream, a boxed body) is accepted and gets one attempt. With feature `reqwest`, it
//! also replays a `reqwest::Request`
//! that the same rule allows and `try_clone()` can copy, so a `reqwest::Client` goes behind the
//! layer as it is. A request
//! that cannot be replayed gets exactly one attempt (still guarded by the breaker, the
//! deadline and the attempt timeout). It can also carry the call's remaining deadline to the
//! next hop in a header, and adopt one from the request it is given (both opt-in).
//!
//! With feature `tonic`, `GrpcLayer` does the same for a tonic channel or server by gRPC's
//! rules: unary calls replayed, the status read from headers and trailers, each attempt's
//! ceiling sent in `grpc-timeout` and an inbound one adopted.
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response};
//! use stormguard_std::tower::PolicyLayer;
//! use stormguard_std::Policy;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Policy::builder("inventory").build()?;
//! let client = ServiceBuilder::new()
//!     .layer(PolicyLayer::new(policy).propagate_deadline())
//!     .service(service_fn(|req: Request<String>| async move {
//!         // The next hop sees how long it has, in milliseconds.
//!         let left = req.headers()["x-stormguard-deadline-ms"].to_str().unwrap().to_owned();
//!         Ok::<_, Infallible>(Response::new(left))
//!     }));
//! let response = client.oneshot(Request::get("/stock/42").body(String::new())?).await?;
//! assert!(response.into_body().parse::<u64>()? <= 30_000);
//! # Ok(()) }
//! ```

use std::any::Any;
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use http::header::HeaderName;
use http::{Extensions, HeaderMap, HeaderValue, Method, Request, Uri, Version};
use stormguard_core::{call::AttemptLog, call::Criticality, Duration};
use tower_layer::Layer;
use tower_service::Service;
#[cfg(feature = "spans")]
use tracing::Instrument;

use crate::classify::{Classify, Http};
use crate::clock::{Clock, DefaultClock};
use crate::events::{Listener, NoListener};
use crate::keyed::{KeyedPolicy, KeyedSetupError};
use crate::policy::{Attempt, CallEnd};
use crate::{CallError, CallOptions, Policy};

#[cfg(feature = "tonic")]
mod grpc;
mod stall;
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub use self::grpc::{
    GrpcLayer, GrpcRequests, GrpcTemplate, ReadUnary, ReadUnaryFuture, Streaming,
    GRPC_BUFFER_LIMIT, GRPC_TIMEOUT, GRPC_TIMEOUT_MARGIN,
};
pub use self::stall::{BodyStalled, StallBody, StallFuture, StallLayer, StallService};
pub use crate::nested::{NestedRetryLayer, NestedRetryService, ATTEMPT_HEADER, CRITICALITY_HEADER};

/// The header the remaining deadline travels in by default: whole milliseconds left.
pub const DEADLINE_HEADER: HeaderName = HeaderName::from_static("x-stormguard-deadline-ms");

/// The header by which a client says a request is safe to repeat whatever its method: the
/// server deduplicates requests by its value (the IETF HTTPAPI working group's
/// `Idempotency-Key`). A request carrying it is replayed like a `GET`.
///
/// ```
/// use stormguard_std::tower::{HttpRequests, Requests, IDEMPOTENCY_KEY};
///
/// let mut req = http::Request::post("/payments").body(String::from("{...}")).unwrap();
/// assert!(HttpRequests::default().template(&req).is_none());
/// req.headers_mut().insert(IDEMPOTENCY_KEY, "8e03978e-40d5-43e8".parse().unwrap());
/// assert!(HttpRequests::default().template(&req).is_some());
/// ```
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Marks a request as safe to repeat whatever its method (when the server's own rules make it
/// so without an [`IDEMPOTENCY_KEY`] header): insert it into the request's extensions.
///
/// ```
/// let mut req = http::Request::post("/payments").body(String::from("{...}")).unwrap();
/// req.extensions_mut().insert(stormguard_std::tower::Idempotent);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Idempotent;

/// Where the layer leaves a call's [`AttemptLog`]: put one in a request's extensions, keep a
/// clone, and read it once the call has ended, whatever it ended with (a response, a failure
/// or a refusal). How each attempt went (its outcome and duration, whether it was a hedge,
/// whether the layer's own rate limiter or bulkhead held it back) can then be told apart from
/// what the dependency said. A request without one costs the call nothing.
///
/// ```
/// use stormguard_std::tower::AttemptSlot;
/// let slot = AttemptSlot::new();
/// let mut req = http::Request::get("/orders").body(String::new()).unwrap();
/// req.extensions_mut().insert(slot.clone());
/// // ... the call through the layer ...
/// assert!(slot.take().is_none()); // nothing yet: no call was made here
/// ```
///
/// A request type that holds no extensions a caller can set (`reqwest::Request`) runs its
/// call inside [`AttemptSlot::scope`] instead.
#[derive(Clone, Debug, Default)]
pub struct AttemptSlot(Arc<std::sync::Mutex<Option<AttemptLog>>>);

tokio::task_local! {
    /// The slot a call through the layer fills when its request carries none.
    static SCOPED_SLOT: AttemptSlot;
}

impl AttemptSlot {
    /// An empty slot.
    #[must_use]
    pub fn new() -> Self {
        AttemptSlot::default()
    }

    /// The log the layer left, taken out (`None` before the call ended, or once taken).
    #[must_use]
    pub fn take(&self) -> Option<AttemptLog> {
        self.0.lock().map_or(None, |mut log| log.take())
    }

    /// Runs `fut` with this slot as the one a call through the layer fills when its request
    /// carries none: for request types with no extensions of their own (`reqwest::Request`:
    /// reqwest keeps them to itself). The last call inside `fut` to end leaves its log.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use stormguard_std::tower::{AttemptSlot, PolicyLayer};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let policy = stormguard_std::Policy::builder("api").build()?;
    /// let client = PolicyLayer::new(policy).layer(service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, Infallible>(http::Response::new(()))
    /// }));
    /// let slot = AttemptSlot::new();
    /// let request = http::Request::get("http://api.example/").body(())?; // no slot inside
    /// slot.scope(client.oneshot(request)).await?;
    /// assert_eq!(slot.take().map(|log| log.len()), Some(1));
    /// # Ok(()) }
    /// ```
    pub async fn scope<F: Future>(&self, fut: F) -> F::Output {
        SCOPED_SLOT.scope(self.clone(), fut).await
    }

    /// The slot of the [`AttemptSlot::scope`] being run, if any.
    fn scoped() -> Option<AttemptSlot> {
        SCOPED_SLOT.try_with(AttemptSlot::clone).ok()
    }

    fn put(&self, log: AttemptLog) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(log);
        }
    }
}

/// How the layer treats requests: which can be replayed for a retry, and how a deadline
/// travels with them.
pub trait Requests<Req> {
    /// What a replayable request keeps for its retries.
    type Template: Send + 'static;

    /// A template to replay `req` from, or `None` if it must not (or cannot) be repeated.
    fn template(&self, req: &Req) -> Option<Self::Template>;

    /// The request to send first and the template to replay it from, taking the request by
    /// value: rules that must buffer a streaming body to replay it (gRPC's) put a buffered
    /// one back. By default, `req` as it is and [`Requests::template`].
    fn prepare(&self, req: Req) -> (Req, Option<Self::Template>) {
        let template = self.template(&req);
        (req, template)
    }

    /// A fresh copy of the request; `None` if it cannot be made after all (the call then ends
    /// with the last attempt's result).
    fn replay(&self, template: &Self::Template) -> Option<Req>;

    /// The remaining deadline the request carries, if it is to be adopted.
    fn incoming_deadline(&self, req: &Req) -> Option<Duration> {
        let _ = req;
        None
    }

    /// Writes the time left until the call's deadline into an attempt's request, if
    /// deadlines are propagated.
    fn set_deadline(&self, req: &mut Req, left: Duration) {
        let _ = (req, left);
    }

    /// Writes the time this attempt has (the sooner of the policy's attempt timeout and the
    /// call's deadline) into its request, for protocols whose server honours one (gRPC's
    /// `grpc-timeout`). By default, nothing.
    fn set_attempt_ceiling(&self, req: &mut Req, ceiling: Duration) {
        let _ = (req, ceiling);
    }

    /// Marks an attempt's request with its number (`number` 1 is the first attempt). By
    /// default nothing; [`HttpRequests`] writes a retry's number (2 and up) into
    /// [`ATTEMPT_HEADER`], for a [`NestedRetryLayer`] on the receiving side.
    fn set_attempt(&self, req: &mut Req, number: u32) {
        let _ = (req, number);
    }

    /// How much the call for `req` matters, if labelled. By default none; [`HttpRequests`]
    /// reads a [`Criticality`] in the request's extensions, else the label of the inbound
    /// request being served ([`inbound_criticality`](crate::nested::inbound_criticality)), so a label
    /// travels down a chain of services.
    fn criticality(&self, req: &Req) -> Option<Criticality> {
        let _ = req;
        None
    }

    /// Writes the call's label into an attempt's request. By default nothing;
    /// [`HttpRequests`] writes it into [`CRITICALITY_HEADER`], for a [`NestedRetryLayer`] on
    /// the receiving side.
    fn set_criticality(&self, req: &mut Req, criticality: Criticality) {
        let _ = (req, criticality);
    }

    /// Where to leave the call's attempt log, if the request asks for one. By default
    /// nowhere; [`HttpRequests`] and the gRPC rules read an [`AttemptSlot`] in the request's
    /// extensions. A request without one fills the slot of the [`AttemptSlot::scope`] its
    /// call runs in, if any.
    fn attempt_slot(&self, req: &Req) -> Option<AttemptSlot> {
        let _ = req;
        None
    }

    /// The key of the scope `req` belongs to, for a layer with a breaker per scope
    /// ([`PolicyLayer::per_host`]); a request without one is judged by the layer's policy
    /// itself. By default none; [`HttpRequests`] answers the request's host and port
    /// (`host:port`, one key for every spelling of them, never the user information), the
    /// gRPC rules the call's service, and [`PolicyLayer::scope_by`] any function of the
    /// request.
    fn scope(&self, req: &Req) -> Option<String> {
        let _ = req;
        None
    }

    /// The span the layer runs `req`'s call in, around the policy's own `call` span (feature
    /// `spans`). By default none; [`HttpRequests`] and the gRPC rules give a `request` span
    /// (DEBUG, target `stormguard`) with the request's `method` and `url` (scheme, host, port
    /// and path: the user information and the query are left out, as they may carry
    /// credentials).
    #[cfg(feature = "spans")]
    #[cfg_attr(docsrs, doc(cfg(feature = "spans")))]
    fn span(&self, req: &Req) -> tracing::Span {
        let _ = req;
        tracing::Span::none()
    }
}

/// The layer's `request` span (see [`Requests::span`]): `url` is written only when the span
/// is enabled.
#[cfg(feature = "spans")]
pub(crate) fn request_span(method: &str, url: Url<'_>) -> tracing::Span {
    tracing::debug_span!(target: "stormguard", "request", method, url = %url)
}

/// A request's URL for a span: `scheme://host:port/path`, or as much of it as the request
/// holds, without its user information or query (either may carry credentials).
#[cfg(feature = "spans")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Url<'a> {
    pub(crate) scheme: Option<&'a str>,
    pub(crate) host: Option<&'a str>,
    pub(crate) port: Option<u16>,
    pub(crate) path: &'a str,
}

#[cfg(feature = "spans")]
impl Url<'_> {
    pub(crate) fn of(uri: &Uri) -> Url<'_> {
        Url {
            scheme: uri.scheme_str(),
            host: uri.host(),
            port: uri.port_u16(),
            path: uri.path(),
        }
    }
}

#[cfg(feature = "spans")]
impl fmt::Display for Url<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(host) = self.host {
            if let Some(scheme) = self.scheme {
                write!(f, "{scheme}://")?;
            }
            f.write_str(host)?;
            if let Some(port) = self.port {
                write!(f, ":{port}")?;
            }
        }
        f.write_str(self.path)
    }
}

/// Requests treated by `R`'s rules, in the scope `F` names ([`PolicyLayer::scope_by`]).
#[derive(Clone)]
pub struct ScopeBy<R, F> {
    requests: R,
    scope: F,
}

impl<R: fmt::Debug, F> fmt::Debug for ScopeBy<R, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopeBy")
            .field("requests", &self.requests)
            .finish_non_exhaustive()
    }
}

impl<Req, R: Requests<Req>, F: Fn(&Req) -> String> Requests<Req> for ScopeBy<R, F> {
    type Template = R::Template;
    fn template(&self, req: &Req) -> Option<Self::Template> {
        self.requests.template(req)
    }
    fn prepare(&self, req: Req) -> (Req, Option<Self::Template>) {
        self.requests.prepare(req)
    }
    fn replay(&self, template: &Self::Template) -> Option<Req> {
        self.requests.replay(template)
    }
    fn incoming_deadline(&self, req: &Req) -> Option<Duration> {
        self.requests.incoming_deadline(req)
    }
    fn set_deadline(&self, req: &mut Req, left: Duration) {
        self.requests.set_deadline(req, left);
    }
    fn set_attempt_ceiling(&self, req: &mut Req, ceiling: Duration) {
        self.requests.set_attempt_ceiling(req, ceiling);
    }
    fn set_attempt(&self, req: &mut Req, number: u32) {
        self.requests.set_attempt(req, number);
    }
    fn criticality(&self, req: &Req) -> Option<Criticality> {
        self.requests.criticality(req)
    }
    fn set_criticality(&self, req: &mut Req, criticality: Criticality) {
        self.requests.set_criticality(req, criticality);
    }
    fn attempt_slot(&self, req: &Req) -> Option<AttemptSlot> {
        self.requests.attempt_slot(req)
    }
    fn scope(&self, req: &Req) -> Option<String> {
        Some((self.scope)(req))
    }
    #[cfg(feature = "spans")]
    fn span(&self, req: &Req) -> tracing::Span {
        self.requests.span(req)
    }
}

/// Never replays: every request gets exactly one attempt.
///
/// ```
/// use stormguard_std::tower::{Requests, SingleAttempt};
/// assert!(Requests::<u8>::template(&SingleAttempt, &1).is_none());
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleAttempt;

impl<Req> Requests<Req> for SingleAttempt {
    type Template = std::convert::Infallible;
    fn template(&self, _: &Req) -> Option<Self::Template> {
        None
    }
    fn replay(&self, never: &Self::Template) -> Option<Req> {
        match *never {}
    }
}

/// Replays every request by cloning it (for request types that are `Clone` and always safe to
/// repeat, e.g. reads in a custom protocol).
///
/// ```
/// use stormguard_std::tower::{CloneRequests, Requests};
/// let t = CloneRequests.template(&"ping").unwrap();
/// assert_eq!(CloneRequests.replay(&t), Some("ping"));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CloneRequests;

impl<Req: Clone + Send + 'static> Requests<Req> for CloneRequests {
    type Template = Req;
    fn template(&self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
    fn replay(&self, template: &Req) -> Option<Req> {
        Some(template.clone())
    }
}

/// The HTTP rules: replay idempotent requests whose body is buffered; optionally propagate
/// the remaining deadline in a header and adopt one from the incoming request.
///
/// Any body is accepted. A buffered body is copied for each replay: `String`, `Vec<u8>`,
/// `&'static str`, `&'static [u8]`, `()`, `bytes::Bytes`, and `http_body_util`'s `Full<Bytes>`
/// and `Empty<Bytes>`, plus any `Clone` body type named with [`HttpRequests::replay_body`]. A
/// request with any other body (a stream, `hyper::body::Incoming`, a boxed body) gets exactly
/// one attempt, whatever its method: it cannot be sent twice.
///
/// ```
/// use http::Request;
/// use stormguard_std::tower::{HttpRequests, Idempotent, Requests};
///
/// let rules = HttpRequests::default();
/// assert!(rules.template(&Request::get("/").body(()).unwrap()).is_some());
/// assert!(rules.template(&Request::post("/").body(()).unwrap()).is_none());
/// let mut marked = Request::post("/").body(()).unwrap();
/// marked.extensions_mut().insert(Idempotent);
/// assert!(rules.template(&marked).is_some());
///
/// /// A body this crate does not know, and cannot copy.
/// struct Streamed;
/// assert!(rules.template(&Request::get("/").body(Streamed).unwrap()).is_none());
/// ```
#[derive(Clone, Debug, Default)]
pub struct HttpRequests {
    propagate: Option<HeaderName>,
    adopt: Option<HeaderName>,
    /// Copiers of the body types named with [`HttpRequests::replay_body`].
    bodies: Vec<CopyBody>,
}

/// Copies a request body of one type: `true` when `from` is one and `to` (an empty `Option` of
/// that type) now holds its copy.
type CopyBody = fn(&dyn Any, &mut dyn Any) -> bool;

fn copy_body<T: Clone + 'static>(from: &dyn Any, to: &mut dyn Any) -> bool {
    match (from.downcast_ref::<T>(), to.downcast_mut::<Option<T>>()) {
        (Some(body), Some(slot)) => {
            *slot = Some(body.clone());
            true
        }
        _ => false,
    }
}

/// The buffered body types every [`HttpRequests`] replays.
const BUFFERED_BODIES: [CopyBody; 8] = [
    copy_body::<String>,
    copy_body::<Vec<u8>>,
    copy_body::<&'static str>,
    copy_body::<&'static [u8]>,
    copy_body::<()>,
    copy_body::<bytes::Bytes>,
    copy_body::<http_body_util::Full<bytes::Bytes>>,
    copy_body::<http_body_util::Empty<bytes::Bytes>>,
];

impl HttpRequests {
    /// Writes the call's remaining deadline (whole milliseconds, rounded down) into `header` of
    /// every attempt's request.
    ///
    /// ```
    /// use stormguard_std::tower::{HttpRequests, DEADLINE_HEADER};
    /// let rules = HttpRequests::default().propagate_in(DEADLINE_HEADER);
    /// # let _ = rules;
    /// ```
    #[must_use]
    pub fn propagate_in(mut self, header: HeaderName) -> Self {
        self.propagate = Some(header);
        self
    }

    /// Reads a remaining deadline (whole milliseconds) from `header` of the request the layer
    /// is given, and ends the call by then at the latest.
    ///
    /// ```
    /// use http::Request;
    /// use stormguard_std::Duration;
    /// use stormguard_std::tower::{HttpRequests, Requests, DEADLINE_HEADER};
    /// let rules = HttpRequests::default().adopt_from(DEADLINE_HEADER);
    /// let req = Request::get("/").header(DEADLINE_HEADER, "250").body(()).unwrap();
    /// assert_eq!(rules.incoming_deadline(&req), Some(Duration::from_millis(250)));
    /// ```
    #[must_use]
    pub fn adopt_from(mut self, header: HeaderName) -> Self {
        self.adopt = Some(header);
        self
    }

    /// Replays requests whose body is a `T` too, by cloning it: for a buffered body type of
    /// your own (the buffered types of `std`, `bytes` and `http_body_util` are known already).
    ///
    /// ```
    /// use http::Request;
    /// use stormguard_std::tower::{HttpRequests, Requests};
    ///
    /// #[derive(Clone)]
    /// struct Form(Vec<(String, String)>);
    ///
    /// let form = || Request::get("/search").body(Form(Vec::new())).unwrap();
    /// assert!(HttpRequests::default().template(&form()).is_none());
    /// let rules = HttpRequests::default().replay_body::<Form>();
    /// assert!(rules.template(&form()).is_some());
    /// ```
    #[must_use]
    pub fn replay_body<T: Clone + Send + 'static>(mut self) -> Self {
        self.bodies.push(copy_body::<T>);
        self
    }

    /// A copy of `body`, if its type is one this rule replays.
    fn copy<B: 'static>(&self, body: &B) -> Option<B> {
        let mut copy: Option<B> = None;
        let copied = BUFFERED_BODIES
            .iter()
            .chain(&self.bodies)
            .any(|copy_one| copy_one(body, &mut copy));
        copy.filter(|_| copied)
    }
}

/// Whether a request may be repeated without changing the outcome: its method is idempotent
/// (RFC 9110, 9.2.2), it carries an [`IDEMPOTENCY_KEY`], or it is `marked` [`Idempotent`];
/// with feature `tonic`, a gRPC call too (a `POST`, repeatable by gRPC's rules: the body is
/// buffered, so the call is a unary one or a complete stream).
fn repeatable(method: &Method, headers: &HeaderMap, marked: bool) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    ) || marked
        || headers.contains_key(IDEMPOTENCY_KEY)
        || grpc_call(headers)
}

/// Whether `headers` are a gRPC call's (always `false` without feature `tonic`).
fn grpc_call(headers: &HeaderMap) -> bool {
    #[cfg(feature = "tonic")]
    return crate::classify::is_grpc(headers);
    #[cfg(not(feature = "tonic"))]
    {
        let _ = headers;
        false
    }
}

/// Writes a retry's attempt number into [`ATTEMPT_HEADER`] (a first attempt is left as the
/// caller made it).
fn mark_attempt(headers: &mut HeaderMap, number: u32) {
    if number >= 2 {
        headers.insert(ATTEMPT_HEADER, HeaderValue::from(number));
    }
}

/// Everything of a request but its body, kept for replays.
#[derive(Clone, Debug)]
pub struct HttpTemplate<B> {
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
    extensions: Extensions,
    body: B,
}

impl<B: Send + 'static> Requests<Request<B>> for HttpRequests {
    type Template = HttpTemplate<B>;

    fn template(&self, req: &Request<B>) -> Option<HttpTemplate<B>> {
        let marked = req.extensions().get::<Idempotent>().is_some();
        if !repeatable(req.method(), req.headers(), marked) {
            return None;
        }
        Some(HttpTemplate {
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            headers: req.headers().clone(),
            extensions: req.extensions().clone(),
            body: self.copy(req.body())?,
        })
    }

    fn replay(&self, t: &HttpTemplate<B>) -> Option<Request<B>> {
        let mut req = Request::new(self.copy(&t.body)?);
        *req.method_mut() = t.method.clone();
        *req.uri_mut() = t.uri.clone();
        *req.version_mut() = t.version;
        *req.headers_mut() = t.headers.clone();
        *req.extensions_mut() = t.extensions.clone();
        Some(req)
    }

    fn incoming_deadline(&self, req: &Request<B>) -> Option<Duration> {
        self.deadline_in(req.headers())
    }

    fn set_deadline(&self, req: &mut Request<B>, left: Duration) {
        self.write_deadline(req.headers_mut(), left);
    }

    fn set_attempt(&self, req: &mut Request<B>, number: u32) {
        mark_attempt(req.headers_mut(), number);
    }

    fn criticality(&self, req: &Request<B>) -> Option<Criticality> {
        request_criticality(req.extensions())
    }

    fn set_criticality(&self, req: &mut Request<B>, criticality: Criticality) {
        write_criticality(req.headers_mut(), criticality);
    }

    fn attempt_slot(&self, req: &Request<B>) -> Option<AttemptSlot> {
        req.extensions().get::<AttemptSlot>().cloned()
    }

    fn scope(&self, req: &Request<B>) -> Option<String> {
        let uri = req.uri();
        host_key(uri.scheme_str(), uri.host()?, uri.port_u16())
    }

    #[cfg(feature = "spans")]
    fn span(&self, req: &Request<B>) -> tracing::Span {
        request_span(req.method().as_str(), Url::of(req.uri()))
    }

    /// A gRPC call's ceiling goes in `grpc-timeout` (feature `tonic`), as `GrpcRequests`
    /// sends it.
    fn set_attempt_ceiling(&self, req: &mut Request<B>, ceiling: Duration) {
        #[cfg(feature = "tonic")]
        if grpc_call(req.headers()) {
            grpc::write_grpc_timeout(req.headers_mut(), ceiling);
        }
        #[cfg(not(feature = "tonic"))]
        let _ = (req, ceiling);
    }
}

impl HttpRequests {
    /// The remaining deadline in the adopted header of `headers`, if any.
    fn deadline_in(&self, headers: &HeaderMap) -> Option<Duration> {
        let header = self.adopt.as_ref()?;
        stormguard_core::wire::http::parse_millis(headers.get(header)?.as_bytes())
    }

    /// Writes `left` into the propagated header of `headers`, if deadlines are propagated.
    fn write_deadline(&self, headers: &mut HeaderMap, left: Duration) {
        if let Some(header) = &self.propagate {
            headers.insert(header.clone(), HeaderValue::from(left.as_millis()));
        }
    }
}

/// A call's label as the request rules read it: a [`Criticality`] in the request's
/// extensions, else the label of the inbound request being served.
/// The per-host key of a request to `host` on `port` over `scheme`: one key for every
/// spelling of one host and port, and nothing else of the request's authority. The host is
/// lower-cased, without the trailing dot of a fully qualified name, and followed by the port,
/// the scheme's default when none is written (80 for `http`/`ws`, 443 for `https`/`wss`): so
/// `http://Down.example.`, `http://down.example:80` and `http://user:secret@down.example` are
/// all `down.example:80`, the same key the `reqwest` rules give. User information never
/// reaches it (the caller hands the host alone), so no credential is kept in the table or
/// listed by its snapshots. `None` for an empty host.
fn host_key(scheme: Option<&str>, host: &str, port: Option<u16>) -> Option<String> {
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return None;
    }
    let port = port.or(match scheme.map(str::to_ascii_lowercase).as_deref() {
        Some("http" | "ws") => Some(80),
        Some("https" | "wss") => Some(443),
        _ => None,
    });
    let host = host.to_ascii_lowercase();
    Some(match port {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

fn request_criticality(extensions: &http::Extensions) -> Option<Criticality> {
    extensions
        .get::<Criticality>()
        .copied()
        .or_else(crate::nested::inbound_criticality)
}

/// Writes a call's label into [`CRITICALITY_HEADER`], for the receiving side's layer.
fn write_criticality(headers: &mut http::HeaderMap, criticality: Criticality) {
    headers.insert(
        CRITICALITY_HEADER,
        HeaderValue::from_static(criticality.as_str()),
    );
}

/// The HTTP rules for a `reqwest::Client` (feature `reqwest`): a `reqwest::Request` is
/// replayed when its method is idempotent or it carries an [`IDEMPOTENCY_KEY`] (the same rule
/// as for `http::Request`) and [`reqwest::Request::try_clone`] succeeds (no body, or a
/// buffered one: a streaming body gets exactly one attempt); the deadline travels in the same
/// header. (reqwest keeps a request's extensions to itself, so the [`Idempotent`] mark cannot
/// be read from one: mark a reqwest `POST` with the header.)
///
/// ```
/// use stormguard_std::tower::{HttpRequests, Requests};
///
/// let client = reqwest::Client::new();
/// let rules = HttpRequests::default();
/// let get = client.get("http://127.0.0.1/stock").build()?;
/// assert!(rules.template(&get).is_some());
/// let post = client.post("http://127.0.0.1/orders").body("{}").build()?;
/// assert!(rules.template(&post).is_none());
/// let keyed = client
///     .post("http://127.0.0.1/orders")
///     .header(stormguard_std::tower::IDEMPOTENCY_KEY, "order-7731")
///     .body("{}")
///     .build()?;
/// assert!(rules.template(&keyed).is_some());
/// let stream = http_body_util::Full::new(bytes::Bytes::from_static(b"..."));
/// let streaming = client.put("http://127.0.0.1/blob").body(reqwest::Body::wrap(stream)).build()?;
/// assert!(rules.template(&streaming).is_none());
/// # Ok::<(), reqwest::Error>(())
/// ```
///
/// A client behind the layer: the [`Http`] classifier reads its `reqwest::Response`s, and its
/// error is [`CallError`] around `reqwest::Error`.
///
/// ```no_run
/// use stormguard_std::tower::PolicyLayer;
/// use tower::{ServiceBuilder, ServiceExt};
///
/// # async fn fetch() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = stormguard_std::Policy::builder("inventory").build()?;
/// let http = reqwest::Client::new();
/// let client = ServiceBuilder::new()
///     .layer(PolicyLayer::new(policy).propagate_deadline())
///     .service(http.clone());
/// let request = http.get("http://127.0.0.1:8080/stock/42").build()?;
/// let response = client.oneshot(request).await?;
/// println!("{}", response.text().await?);
/// # Ok(()) }
/// ```
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
impl Requests<reqwest::Request> for HttpRequests {
    type Template = reqwest::Request;

    fn template(&self, req: &reqwest::Request) -> Option<reqwest::Request> {
        if repeatable(req.method(), req.headers(), false) {
            req.try_clone()
        } else {
            None
        }
    }

    fn replay(&self, template: &reqwest::Request) -> Option<reqwest::Request> {
        template.try_clone()
    }

    fn incoming_deadline(&self, req: &reqwest::Request) -> Option<Duration> {
        self.deadline_in(req.headers())
    }

    fn set_attempt(&self, req: &mut reqwest::Request, number: u32) {
        mark_attempt(req.headers_mut(), number);
    }

    /// The label of the inbound request being served ([`inbound_criticality`](crate::nested::inbound_criticality)):
    /// reqwest keeps a request's extensions to itself, so a label cannot ride on one.
    fn criticality(&self, _: &reqwest::Request) -> Option<Criticality> {
        crate::nested::inbound_criticality()
    }

    fn set_criticality(&self, req: &mut reqwest::Request, criticality: Criticality) {
        write_criticality(req.headers_mut(), criticality);
    }

    fn scope(&self, req: &reqwest::Request) -> Option<String> {
        let url = req.url();
        host_key(
            Some(url.scheme()),
            url.host_str()?,
            url.port_or_known_default(),
        )
    }

    #[cfg(feature = "spans")]
    fn span(&self, req: &reqwest::Request) -> tracing::Span {
        let url = req.url();
        let url = Url {
            scheme: Some(url.scheme()),
            host: url.host_str(),
            port: url.port(),
            path: url.path(),
        };
        request_span(req.method().as_str(), url)
    }

    fn set_deadline(&self, req: &mut reqwest::Request, left: Duration) {
        self.write_deadline(req.headers_mut(), left);
    }
}

/// A `tower::Layer` applying a [`Policy`] to the service it wraps: [`PolicyService`].
///
/// ```
/// use stormguard_std::tower::PolicyLayer;
/// let layer = PolicyLayer::new(stormguard_std::Policy::builder("api").build()?)
///     .adopt_deadline()
///     .propagate_deadline();
/// # let _ = layer;
/// # Ok::<(), stormguard_std::SettingsError>(())
/// ```
pub struct PolicyLayer<K = DefaultClock, L = NoListener, C = Http, R = HttpRequests> {
    policy: Arc<Policy<K, L>>,
    /// A policy per scope (host), unless [`PolicyLayer::single_scope`].
    hosts: Hosts<K, L>,
    classify: C,
    requests: R,
}

/// How many hosts a [`PolicyLayer::per_host`] table holds: 1,024.
pub const DEFAULT_HOSTS: usize = 1024;

/// A layer's table of per-host policies.
enum Hosts<K, L> {
    /// No table: the policy's own breaker judges every request.
    Off,
    /// The default table, made when a request first names a host (or [`PolicyLayer::hosts`]
    /// asks for it), then shared by the layer's clones and every service they make. A layer
    /// whose requests name no host (a server's, with relative URIs), or set up otherwise
    /// before use ([`PolicyLayer::single_scope`], [`PolicyLayer::per_host_capacity`]), never
    /// makes it: 2,048 slots to allocate and free for nothing.
    Default(Arc<DefaultHosts<K, L>>),
    /// A table made to order.
    Made(HostTable<K, L>),
}

/// A table of per-host policies.
type HostTable<K, L> = KeyedPolicy<String, K, L>;

/// Makes a layer's default table from its policy (`None` for a policy without a breaker).
type MakeHosts<K, L> = fn(&Policy<K, L>) -> Option<HostTable<K, L>>;

/// The default table, made once on first use.
struct DefaultHosts<K, L> {
    table: OnceLock<Option<HostTable<K, L>>>,
    /// Makes the table from the layer's policy (a function, so that reading the table needs
    /// none of the bounds making it does).
    make: MakeHosts<K, L>,
}

impl<K, L> Hosts<K, L> {
    /// The default table for `policy`, made by [`Hosts::get`] when first asked for. Refused
    /// now for the one reason [`KeyedPolicy::new`] would refuse it then: a policy without a
    /// breaker has nothing to keep per host.
    fn default_for(policy: &Policy<K, L>) -> Result<Self, KeyedSetupError>
    where
        K: Clock + Clone,
        L: Listener + Clone,
    {
        if policy.breaker().is_none() {
            return Err(KeyedSetupError::NoBreaker);
        }
        Ok(Hosts::Default(Arc::new(DefaultHosts {
            table: OnceLock::new(),
            make: |policy| KeyedPolicy::new(policy.clone(), DEFAULT_HOSTS).ok(),
        })))
    }

    /// The table, made now if it is the default one and not yet made.
    fn get(&self, policy: &Policy<K, L>) -> Option<&HostTable<K, L>> {
        match self {
            Hosts::Off => None,
            Hosts::Default(lazy) => lazy.table.get_or_init(|| (lazy.make)(policy)).as_ref(),
            Hosts::Made(table) => Some(table),
        }
    }
}

impl<K, L> Clone for Hosts<K, L> {
    fn clone(&self) -> Self {
        match self {
            Hosts::Off => Hosts::Off,
            Hosts::Default(lazy) => Hosts::Default(Arc::clone(lazy)),
            Hosts::Made(table) => Hosts::Made(table.clone()),
        }
    }
}

impl<K: Clock + Clone, L: Listener + Clone> PolicyLayer<K, L> {
    /// Applies `policy`, classifying with [`Http`] and replaying with [`HttpRequests`], with a
    /// breaker per host: each request that names a host (its authority) gets a copy of the
    /// policy with its own breaker ([`PolicyLayer::per_host`], on by default); a request that
    /// names none (a relative URI, as a server receives) is judged by the policy's own. A
    /// policy without a breaker has no table. [`PolicyLayer::single_scope`] judges every host
    /// with the policy's own breaker instead.
    ///
    /// ```
    /// use stormguard_std::tower::PolicyLayer;
    /// let layer = PolicyLayer::new(stormguard_std::Policy::builder("api").build()?);
    /// assert!(layer.hosts().is_some());
    /// assert!(layer.single_scope().hosts().is_none());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn new(policy: Policy<K, L>) -> Self {
        PolicyLayer::shared(Arc::new(policy))
    }

    /// Like [`PolicyLayer::new`], for a policy already behind an `Arc`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let policy = Arc::new(stormguard_std::Policy::builder("api").build()?);
    /// let layer = stormguard_std::tower::PolicyLayer::shared(policy.clone());
    /// # let _ = layer;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn shared(policy: Arc<Policy<K, L>>) -> Self {
        // A policy refused a table (it has no breaker) has one scope.
        let hosts = Hosts::default_for(&policy).unwrap_or(Hosts::Off);
        PolicyLayer {
            policy,
            hosts,
            classify: Http,
            requests: HttpRequests::default(),
        }
    }
}

impl<K, L, C> PolicyLayer<K, L, C, HttpRequests> {
    /// Writes the remaining deadline into [`DEADLINE_HEADER`] of every attempt's request.
    pub fn propagate_deadline(mut self) -> Self {
        self.requests = self.requests.propagate_in(DEADLINE_HEADER);
        self
    }

    /// Adopts a remaining deadline from [`DEADLINE_HEADER`] of the request given.
    pub fn adopt_deadline(mut self) -> Self {
        self.requests = self.requests.adopt_from(DEADLINE_HEADER);
        self
    }

    /// Replays requests whose body is a `T` too ([`HttpRequests::replay_body`]).
    pub fn replay_body<T: Clone + Send + 'static>(mut self) -> Self {
        self.requests = self.requests.replay_body::<T>();
        self
    }
}

impl<K, L, C, R> PolicyLayer<K, L, C, R> {
    /// Classifies responses with `classify` instead.
    ///
    /// ```
    /// use stormguard_std::Outcome;
    /// let layer = stormguard_std::tower::PolicyLayer::new(stormguard_std::Policy::builder("api").build()?)
    ///     .classify(|r: &Result<String, std::io::Error>| match r {
    ///         Ok(_) => Outcome::Success,
    ///         Err(_) => Outcome::Transient,
    ///     });
    /// # let _ = layer;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn classify<C2>(self, classify: C2) -> PolicyLayer<K, L, C2, R> {
        PolicyLayer {
            policy: self.policy,
            hosts: self.hosts,
            classify,
            requests: self.requests,
        }
    }

    /// Treats requests by `requests`' rules instead (e.g. [`CloneRequests`],
    /// [`SingleAttempt`], or your own [`Requests`]).
    ///
    /// ```
    /// use stormguard_std::tower::{PolicyLayer, SingleAttempt};
    /// let layer = PolicyLayer::new(stormguard_std::Policy::builder("api").build()?)
    ///     .requests(SingleAttempt);
    /// # let _ = layer;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn requests<R2>(self, requests: R2) -> PolicyLayer<K, L, C, R2> {
        PolicyLayer {
            policy: self.policy,
            hosts: self.hosts,
            classify: self.classify,
            requests,
        }
    }

    /// Puts each request in the scope `scope` names (a tenant, a service, a route) instead of
    /// its host: each scope gets its own breaker (unless [`PolicyLayer::single_scope`]).
    ///
    /// ```
    /// use stormguard_std::tower::PolicyLayer;
    /// let layer = PolicyLayer::new(stormguard_std::Policy::builder("api").build()?)
    ///     .scope_by(|req: &http::Request<String>| {
    ///         req.uri().path().split('/').nth(1).unwrap_or("").to_owned()
    ///     });
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn scope_by<F>(self, scope: F) -> PolicyLayer<K, L, C, ScopeBy<R, F>> {
        let requests = ScopeBy {
            requests: self.requests,
            scope,
        };
        PolicyLayer {
            policy: self.policy,
            hosts: self.hosts,
            classify: self.classify,
            requests,
        }
    }

    /// The policy applied; with [`PolicyLayer::per_host`], the template each host's policy is
    /// made from (its own breaker sees no call).
    pub fn policy(&self) -> &Arc<Policy<K, L>> {
        &self.policy
    }

    /// The table of per-host policies, with [`PolicyLayer::per_host`]: each host's breaker
    /// ([`KeyedPolicy::snapshots`] for a health endpoint, [`KeyedPolicy::breaker`]). The
    /// default table is made here if no request has named a host yet.
    pub fn hosts(&self) -> Option<&KeyedPolicy<String, K, L>> {
        self.hosts.get(&self.policy)
    }
}

impl<K: Clock + Clone, L: Listener + Clone, C, R> PolicyLayer<K, L, C, R> {
    /// A breaker per host (on by default since [`PolicyLayer::new`]; this makes a new table,
    /// or one after [`PolicyLayer::single_scope`]): each request's host (`host:port`, one key
    /// for every spelling; or the scope [`PolicyLayer::scope_by`] names; a request with none is judged
    /// by the policy's own breaker) gets its own policy, a copy of this one with its own
    /// breaker, in a table of [`DEFAULT_HOSTS`], made when a request first names a host or
    /// [`PolicyLayer::hosts`] asks for it (a [`KeyedPolicy`]: the least recently used
    /// idle host makes room for a new one, an open breaker still asked for is never evicted,
    /// and a new host meeting a full table is refused through the call driver as
    /// [`CallError::Rejected`] with [`RefusalReason::KeyedFull`](crate::RefusalReason)). The
    /// retry budget, rate limiter and bulkhead stay shared: they bound what the whole client
    /// sends, while each breaker judges one host. A policy that keeps published quotas
    /// ([`PolicyBuilder::published_quotas`](crate::PolicyBuilder::published_quotas)) keeps one
    /// per host too. The policy needs a breaker ([`KeyedSetupError::NoBreaker`]).
    ///
    /// A host name comes from the request, so a client whose requests name hosts chosen by
    /// remote input (links in fetched pages, a `Host` header passed on) should bound them
    /// first: an allow-list, or [`PolicyLayer::scope_by`] mapping unknown hosts to one scope.
    ///
    /// ```
    /// use stormguard_std::tower::PolicyLayer;
    /// let layer = PolicyLayer::new(stormguard_std::Policy::builder("upstreams").build()?).per_host()?;
    /// assert!(layer.hosts().is_some_and(|hosts| hosts.capacity() >= 1024));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn per_host(mut self) -> Result<Self, KeyedSetupError> {
        self.hosts = Hosts::default_for(&self.policy)?;
        Ok(self)
    }

    /// No table: every request is judged by the policy's own breaker, whatever host it names
    /// (as one client of one dependency behind a load balancer wants).
    #[must_use]
    pub fn single_scope(mut self) -> Self {
        self.hosts = Hosts::Off;
        self
    }

    /// [`PolicyLayer::per_host`] with room for `capacity` hosts (1 to
    /// [`MAX_KEYS`](crate::keyed::MAX_KEYS)).
    pub fn per_host_capacity(mut self, capacity: usize) -> Result<Self, KeyedSetupError> {
        self.hosts = Hosts::Made(KeyedPolicy::new((*self.policy).clone(), capacity)?);
        Ok(self)
    }
}

impl<K, L, C: Clone, R: Clone> Clone for PolicyLayer<K, L, C, R> {
    fn clone(&self) -> Self {
        PolicyLayer {
            policy: Arc::clone(&self.policy),
            hosts: self.hosts.clone(),
            classify: self.classify.clone(),
            requests: self.requests.clone(),
        }
    }
}

impl<K, L, C: fmt::Debug, R: fmt::Debug> fmt::Debug for PolicyLayer<K, L, C, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyLayer")
            .field("policy", &self.policy.name().as_str())
            .field("per_host", &!matches!(self.hosts, Hosts::Off))
            .field("classify", &self.classify)
            .field("requests", &self.requests)
            .finish()
    }
}

impl<S, K, L, C: Clone, R: Clone> Layer<S> for PolicyLayer<K, L, C, R> {
    type Service = PolicyService<S, K, L, C, R>;

    fn layer(&self, inner: S) -> Self::Service {
        PolicyService {
            inner,
            policy: Arc::clone(&self.policy),
            hosts: self.hosts.clone(),
            classify: self.classify.clone(),
            requests: self.requests.clone(),
        }
    }
}

/// A service under a [`Policy`]: each request is one guarded call. Its error is
/// [`CallError`] around the inner service's error; a response the classifier calls a failure
/// (a 503 after the last retry, or a 500 or 429 whose retry the budget or the breaker refused)
/// comes back as the response it is, without the guarded pause.
pub struct PolicyService<S, K = DefaultClock, L = NoListener, C = Http, R = HttpRequests> {
    inner: S,
    policy: Arc<Policy<K, L>>,
    hosts: Hosts<K, L>,
    classify: C,
    requests: R,
}

impl<S: Clone, K, L, C: Clone, R: Clone> Clone for PolicyService<S, K, L, C, R> {
    fn clone(&self) -> Self {
        PolicyService {
            inner: self.inner.clone(),
            policy: Arc::clone(&self.policy),
            hosts: self.hosts.clone(),
            classify: self.classify.clone(),
            requests: self.requests.clone(),
        }
    }
}

impl<S, K, L, C, R> fmt::Debug for PolicyService<S, K, L, C, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyService")
            .field("policy", &self.policy.name().as_str())
            .finish_non_exhaustive()
    }
}

/// The future of a [`PolicyService`] call.
pub type ResponseFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, CallError<E>>> + Send>>;

impl<S, Req, K, L, C, R> Service<Req> for PolicyService<S, K, L, C, R>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Send,
    Req: Send + 'static,
    K: Clock + Clone + Send + Sync + 'static,
    L: Listener + Clone + Send + Sync + 'static,
    C: Classify<S::Response, S::Error> + Clone + Send + Sync + 'static,
    R: Requests<Req> + Clone + Send + Sync + 'static,
    R::Template: Send,
{
    type Response = S::Response;
    type Error = CallError<S::Error>;
    type Future = ResponseFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(CallError::Failed)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        // The service that was polled ready serves the first attempt; retries use clones,
        // each polled ready before it is called.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let spare = self.inner.clone();
        let policy = Arc::clone(&self.policy);
        let classify = self.classify.clone();
        let requests = self.requests.clone();
        // A request that names no scope (no host) is judged by the policy's own breaker; the
        // default table is made by the first request that names one.
        let scope = match &self.hosts {
            Hosts::Off => None,
            hosts => requests
                .scope(&req)
                .and_then(|host| Some((hosts.get(&self.policy)?.clone(), host))),
        };
        #[cfg(feature = "spans")]
        let span = requests.span(&req);
        let call = async move {
            let slot = requests.attempt_slot(&req).or_else(AttemptSlot::scoped);
            let (req, template) = requests.prepare(req);
            let criticality = requests.criticality(&req);
            let mut options = CallOptions::new().classify(classify);
            if let Some(c) = criticality {
                options = options.criticality(c);
            }
            if template.is_none() {
                options = options.single_attempt();
            }
            if let Some(left) = requests.incoming_deadline(&req) {
                options = options.within(left);
            }
            let mut first = Some((ready, req));
            let start = policy.clock().now();
            let attempt_timeout = policy.settings().attempt_timeout();
            let op = move |attempt: Attempt| {
                let (svc, mut req) = match first.take() {
                    Some(ready) => (Some(ready.0), ready.1),
                    None => (None, requests.replay(template.as_ref()?)?),
                };
                requests.set_attempt(&mut req, attempt.number);
                if let Some(c) = criticality {
                    requests.set_criticality(&mut req, c);
                }
                if let Some(left) = attempt.call_left {
                    requests.set_deadline(&mut req, left);
                }
                let ceiling = match (attempt_timeout, attempt.call_left) {
                    (Some(timeout), Some(left)) => Some(timeout.min(left)),
                    (one, other) => one.or(other),
                };
                if let Some(ceiling) = ceiling {
                    requests.set_attempt_ceiling(&mut req, ceiling);
                }
                let mut svc = svc.unwrap_or_else(|| spare.clone());
                let fresh = attempt.number > 1;
                Some(async move {
                    if fresh {
                        poll_fn(|cx| svc.poll_ready(cx)).await?;
                    }
                    svc.call(req).await
                })
            };
            // Made only when asked for: a log is a few hundred bytes to clear.
            let mut attempts = slot.as_ref().map(|_| AttemptLog::new());
            let mut end = CallEnd::logging_into(attempts.as_mut());
            let result = match scope {
                Some((hosts, host)) => hosts
                    .run(&host, Some(start), &options, op, Some(&mut end))
                    .await
                    .map_err(CallError::from),
                None => policy.run(Some(start), &options, op, Some(&mut end)).await,
            };
            if let (Some(slot), Some(attempts)) = (slot, attempts) {
                slot.put(attempts);
            }
            result
        };
        #[cfg(feature = "spans")]
        let call = call.instrument(span);
        Box::pin(call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator: the same cases on every run.
    struct Cases(u64);

    impl Cases {
        fn next(&mut self, below: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) as usize) % below
        }
    }

    fn scope_of(uri: &str) -> Option<String> {
        let req = Request::get(uri).body(()).unwrap();
        <HttpRequests as Requests<Request<()>>>::scope(&HttpRequests::default(), &req)
    }

    #[test]
    fn every_spelling_of_a_host_and_port_reads_as_one_key_without_user_information() {
        // Fewer under miri, where each case costs some 0.1 s: the keys are safe code.
        let count = if cfg!(miri) { 50 } else { 10_000 };
        let mut cases = Cases(7);
        let labels = ["down", "api", "x1", "eu-west", "a-b-c"];
        let tlds = ["example", "internal", "io"];
        for _ in 0..count {
            let host = format!(
                "{}.{}",
                labels[cases.next(labels.len())],
                tlds[cases.next(tlds.len())]
            );
            let (scheme, default) = [("http", 80), ("https", 443)][cases.next(2)];
            let port = [None, Some(default), Some(8080)][cases.next(3)];
            // The spelling: each letter's case, a trailing dot, user information.
            let spelled: String = host
                .chars()
                .map(|c| {
                    if cases.next(2) == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect();
            let dot = ["", "."][cases.next(2)];
            let user = ["", "user@", "user:s3cret@", "a%40b:p%3Aw@", ":@"][cases.next(5)];
            let written = port.map_or(String::new(), |p| format!(":{p}"));
            let uri = format!("{scheme}://{user}{spelled}{dot}{written}/path?q=1");
            let key = scope_of(&uri).unwrap();
            assert_eq!(key, format!("{host}:{}", port.unwrap_or(default)), "{uri}");
            assert!(
                !key.contains('@') && !key.contains("s3cret"),
                "{uri}: {key}"
            );
        }
    }

    #[test]
    fn a_request_naming_no_host_has_no_key() {
        assert_eq!(scope_of("/relative/path"), None);
        assert_eq!(scope_of("*"), None);
    }

    #[test]
    fn an_ip_literal_keeps_its_brackets_and_an_unknown_scheme_its_written_port_only() {
        assert_eq!(scope_of("http://[::1]:80/").as_deref(), Some("[::1]:80"));
        assert_eq!(scope_of("http://[::1]/").as_deref(), Some("[::1]:80"));
        assert_eq!(
            host_key(Some("ftp"), "Files.Example", None).as_deref(),
            Some("files.example")
        );
        assert_eq!(host_key(Some("http"), ".", None), None);
    }
}
