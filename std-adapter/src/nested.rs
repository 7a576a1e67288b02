//! Retries stacked on retries. A service that retries a failing dependency, called by a service
//! that retries it, called by one more, sends the dependency the product of their attempts (3
//! layers of 3 attempts: 27 requests for one click). The tower layer marks each retry it sends
//! with its attempt number ([`ATTEMPT_HEADER`]); on the receiving side [`NestedRetryLayer`]
//! reads the mark, reports it (a [`NestedRetry`](stormguard_core::Event::NestedRetry) event,
//! counted by [`Metrics`](crate::Metrics)), and serves the request with the mark in scope, so a
//! policy built with [`retries_when_nested(false)`](crate::PolicyBuilder::retries_when_nested)
//! makes a single attempt while it handles a caller's retry: the retrying is left to the layer
//! that started it.

use std::future::Future;

#[cfg(feature = "tower")]
use http::{HeaderMap, HeaderName};
use stormguard_core::call::Criticality;

/// The header a request carries its caller's [`Criticality`] in (`sheddable`, `default`,
/// `critical`), written by the tower layer when the request is labelled and read back by
/// [`NestedRetryLayer`], which caps it at the level the server lets callers claim.
#[cfg(feature = "tower")]
pub const CRITICALITY_HEADER: HeaderName = HeaderName::from_static("x-stormguard-criticality");

/// The header a retried request carries its attempt number in (2 for the first retry); the
/// first attempt carries none.
#[cfg(feature = "tower")]
pub const ATTEMPT_HEADER: HeaderName = HeaderName::from_static("x-stormguard-attempt");

/// The longest attempt number read from a header (in digits): a larger or malformed value is
/// not a mark.
#[cfg(feature = "tower")]
const MAX_DIGITS: usize = 9;

tokio::task_local! {
    /// The caller's attempt number of the inbound request this task is serving.
    static INBOUND_ATTEMPT: u32;
    /// The caller's criticality (capped) of the inbound request this task is serving.
    static INBOUND_CRITICALITY: Option<Criticality>;
}

/// The criticality of the inbound request this task is serving, as its caller labelled it on
/// [`CRITICALITY_HEADER`] and capped at the level the
/// server's `NestedRetryLayer` allows (feature `tower`); `None` when the request carried no
/// readable label. The tower layer labels the calls made while serving it the same way, so
/// the label travels down a chain of services. Like [`inbound_retry`], it lives in the
/// serving task.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(stormguard_std::nested::inbound_criticality(), None);
/// # }
/// ```
#[must_use]
pub fn inbound_criticality() -> Option<Criticality> {
    INBOUND_CRITICALITY.try_with(|c| *c).ok().flatten()
}

/// The label a request's [`CRITICALITY_HEADER`] carries, capped at `max`: one header value
/// the core's parser reads (bounded, any case); a missing, repeated or unreadable one is no
/// label.
#[cfg(feature = "tower")]
pub(crate) fn criticality_in(headers: &HeaderMap, max: Criticality) -> Option<Criticality> {
    let mut values = headers.get_all(CRITICALITY_HEADER).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    Criticality::parse(value.as_bytes()).map(|c| c.capped(max))
}

/// The caller's attempt number of the inbound request this task is serving, when that request
/// was a retry (2 or more) and arrived through a `NestedRetryLayer` (feature `tower`); `None`
/// otherwise. The number lives in the serving task (a tokio task-local): work the handler
/// moves to a task of its own (`tokio::spawn`) does not see it unless it is passed on.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(stormguard_std::nested::inbound_retry(), None);
/// # }
/// ```
#[must_use]
pub fn inbound_retry() -> Option<u32> {
    INBOUND_ATTEMPT.try_with(|a| *a).ok().filter(|a| *a >= 2)
}

/// Runs `fut` as the serving of a request whose caller's attempt number is `attempt`.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn serve_attempt<F: Future>(attempt: u32, fut: F) -> impl Future<Output = F::Output> {
    INBOUND_ATTEMPT.scope(attempt, fut)
}

/// The attempt number a request's `header` carries: ASCII digits only, at most nine, at least 1;
/// anything else (hostile or garbled) is no mark.
#[cfg(feature = "tower")]
pub(crate) fn attempt_in(headers: &HeaderMap, header: &http::HeaderName) -> Option<u32> {
    let value = headers.get(header)?.as_bytes();
    if value.is_empty() || value.len() > MAX_DIGITS || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value)
        .ok()?
        .parse()
        .ok()
        .filter(|n| *n >= 1)
}

#[cfg(feature = "tower")]
pub use self::layer::{NestedRetryLayer, NestedRetryService};

/// Runs `fut` as the serving of a request labelled `criticality`.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn serve_criticality<F: Future>(
    criticality: Option<Criticality>,
    fut: F,
) -> impl Future<Output = F::Output> {
    INBOUND_CRITICALITY.scope(criticality, fut)
}

#[cfg(feature = "tower")]
mod layer {
    use std::fmt;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use http::Request;
    use stormguard_core::{call::Criticality, Event, Name};
    use tower_layer::Layer;
    use tower_service::Service;

    use super::{attempt_in, criticality_in, serve_attempt, serve_criticality, ATTEMPT_HEADER};
    use crate::events::{emit, Listener, NoListener};

    /// The receiving side of nested retries, for a server (axum, hyper, tonic): reads
    /// [`ATTEMPT_HEADER`] from each inbound request; a caller's retry raises the
    /// [`NestedRetry`](Event::NestedRetry) event (to `tracing` and the listener, e.g.
    /// [`Metrics`](crate::Metrics)); and the request is served with its attempt number in
    /// scope ([`inbound_retry`](crate::nested::inbound_retry)), which a policy built with
    /// [`retries_when_nested(false)`](crate::PolicyBuilder::retries_when_nested) reads to make
    /// one attempt. Reporting costs nothing a request without the header would notice; denying
    /// is each policy's choice.
    ///
    /// ```
    /// use stormguard_std::tower::{NestedRetryLayer, ATTEMPT_HEADER};
    /// use stormguard_std::Metrics;
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let metrics = Metrics::new("orders-api");
    /// let server = NestedRetryLayer::new("orders-api")
    ///     .listener(metrics.clone())
    ///     .layer(service_fn(|_req: http::Request<()>| async {
    ///         // A policy here, built with `.retries_when_nested(false)`, makes one attempt.
    ///         Ok::<_, std::convert::Infallible>(stormguard_std::nested::inbound_retry())
    ///     }));
    /// let retry = http::Request::get("/orders").header(ATTEMPT_HEADER, "2").body(())?;
    /// assert_eq!(server.oneshot(retry).await?, Some(2));
    /// assert_eq!(metrics.snapshot().nested_retries, 1);
    /// # Ok(()) }
    /// ```
    #[derive(Clone)]
    pub struct NestedRetryLayer<L = NoListener> {
        name: Name,
        listener: L,
        max_criticality: Criticality,
    }

    impl NestedRetryLayer {
        /// A layer reporting under `name` (the server's), to `tracing` only.
        #[must_use]
        pub fn new(name: &'static str) -> NestedRetryLayer {
            NestedRetryLayer::named(Name::new(name))
        }

        /// [`NestedRetryLayer::new`] with a name made at run time.
        #[must_use]
        pub fn named(name: Name) -> NestedRetryLayer {
            NestedRetryLayer {
                name,
                listener: NoListener,
                max_criticality: Criticality::Default,
            }
        }
    }

    impl<L> NestedRetryLayer<L> {
        /// Reports to `listener` too (e.g. [`Metrics`](crate::Metrics)).
        pub fn listener<L2: Listener>(self, listener: L2) -> NestedRetryLayer<L2> {
            NestedRetryLayer {
                name: self.name,
                listener,
                max_criticality: self.max_criticality,
            }
        }

        /// The highest [`Criticality`] a caller may claim on
        /// [`CRITICALITY_HEADER`](super::CRITICALITY_HEADER) (default
        /// [`Criticality::Default`]: a caller may lower its work to sheddable, not raise it to
        /// critical). A higher label is lowered to this one. The label, capped, is put in the
        /// request's extensions and served in scope
        /// ([`inbound_criticality`](crate::nested::inbound_criticality)), so the calls the handler
        /// makes through the tower layer carry it on.
        ///
        /// ```
        /// use stormguard_std::tower::{NestedRetryLayer, CRITICALITY_HEADER};
        /// use stormguard_std::Criticality;
        /// use tower::{service_fn, Layer, ServiceExt};
        ///
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// let server = NestedRetryLayer::new("orders-api")
        ///     .layer(service_fn(|req: http::Request<()>| async move {
        ///         Ok::<_, std::convert::Infallible>(req.extensions().get::<Criticality>().copied())
        ///     }));
        /// let greedy = http::Request::get("/").header(CRITICALITY_HEADER, "critical").body(())?;
        /// assert_eq!(server.oneshot(greedy).await?, Some(Criticality::Default)); // capped
        /// # Ok(()) }
        /// ```
        pub fn max_criticality(mut self, max: Criticality) -> Self {
            self.max_criticality = max;
            self
        }
    }

    impl<L> fmt::Debug for NestedRetryLayer<L> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("NestedRetryLayer")
                .field("name", &self.name.as_str())
                .finish_non_exhaustive()
        }
    }

    impl<S, L: Clone> Layer<S> for NestedRetryLayer<L> {
        type Service = NestedRetryService<S, L>;
        fn layer(&self, inner: S) -> Self::Service {
            NestedRetryService {
                inner,
                name: self.name,
                listener: self.listener.clone(),
                max_criticality: self.max_criticality,
            }
        }
    }

    /// A service under a [`NestedRetryLayer`].
    #[derive(Clone)]
    pub struct NestedRetryService<S, L = NoListener> {
        inner: S,
        name: Name,
        listener: L,
        max_criticality: Criticality,
    }

    impl<S, L> fmt::Debug for NestedRetryService<S, L> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("NestedRetryService")
                .field("name", &self.name.as_str())
                .finish_non_exhaustive()
        }
    }

    impl<S, B, L> Service<Request<B>> for NestedRetryService<S, L>
    where
        S: Service<Request<B>>,
        S::Future: Send + 'static,
        L: Listener,
    {
        type Response = S::Response;
        type Error = S::Error;
        type Future =
            Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, mut req: Request<B>) -> Self::Future {
            let attempt = attempt_in(req.headers(), &ATTEMPT_HEADER).unwrap_or(1);
            let criticality = criticality_in(req.headers(), self.max_criticality);
            match criticality {
                Some(c) => {
                    req.extensions_mut().insert(c);
                }
                // A label the caller could not have been granted is not passed on either.
                None => {
                    req.extensions_mut().remove::<Criticality>();
                }
            }
            if attempt >= 2 {
                emit(
                    &self.listener,
                    &Event::NestedRetry {
                        name: &self.name,
                        attempt,
                    },
                );
            }
            let served = serve_criticality(criticality, self.inner.call(req));
            Box::pin(serve_attempt(attempt, served))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "tower")]
    #[test]
    fn only_a_short_run_of_digits_is_an_attempt_number() {
        let header = http::HeaderName::from_static("x-stormguard-attempt");
        let read = |v: &[u8]| {
            let mut h = HeaderMap::new();
            h.insert(&header, http::HeaderValue::from_bytes(v).unwrap());
            attempt_in(&h, &header)
        };
        assert_eq!(read(b"2"), Some(2));
        assert_eq!(read(b"123456789"), Some(123_456_789));
        for hostile in [
            &b""[..],
            b"0",
            b"-2",
            b"+2",
            b" 2",
            b"2.0",
            b"1234567890",
            b"99999999999999999999",
            b"0x2",
        ] {
            assert_eq!(
                read(hostile),
                None,
                "{:?}",
                String::from_utf8_lossy(hostile)
            );
        }
        assert_eq!(attempt_in(&HeaderMap::new(), &header), None);
    }

    #[tokio::test]
    async fn the_attempt_is_in_scope_only_while_its_request_is_served() {
        assert_eq!(inbound_retry(), None);
        assert_eq!(serve_attempt(3, async { inbound_retry() }).await, Some(3));
        assert_eq!(serve_attempt(1, async { inbound_retry() }).await, None);
        assert_eq!(inbound_retry(), None);
    }
}
