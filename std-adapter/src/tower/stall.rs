//! A stall bound on response bodies: [`StallLayer`], [`StallBody`].

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};
use stormguard_core::{call::StreamSettings, Duration, SettingsError};
use tower_layer::Layer;
use tower_service::Service;

use crate::clock::Clock;
use crate::stall::StallTimer;
use crate::Policy;

/// What a body's error becomes once bounded (any body error, or [`BodyStalled`]).
type BoxError = Box<dyn Error + Send + Sync>;

/// A response body waited on for longer than its stall bound: the error a [`StallBody`] ends
/// with (boxed; find it with `downcast_ref`), the body's own timeout. The policy's call ended
/// with the response's headers, so nothing reports it to the breaker or the budget: a caller
/// that wants a stalled body retried, restarted or counted reads it as a streaming call
/// ([`Policy::call_stream`](crate::Policy::call_stream), or `download` with reqwest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyStalled {
    /// The bound that passed with no frame.
    pub after: Duration,
}

impl fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "response body stalled: no data for {}", self.after)
    }
}

impl Error for BodyStalled {}

/// A `tower::Layer` bounding the gap between two reads of every response body: a body that
/// sends nothing for the bound while it is read ends with a [`BodyStalled`] error instead of
/// hanging its reader. The bound counts only time spent waiting on the body, so a reader slow
/// to read is never taken for a stall. Put it outside a [`PolicyLayer`](super::PolicyLayer):
/// the policy's attempt timeout bounds the wait for the response's headers, this the wait for
/// each piece of its body after them ([`StallLayer::for_policy`] takes the same bound).
///
/// ```
/// use std::time::Duration;
/// use stormguard_std::tower::{PolicyLayer, StallLayer};
/// use stormguard_std::Policy;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::builder("mirror").attempt_timeout(Duration::from_secs(5)).build()?;
/// let stall = StallLayer::for_policy(&policy).expect("the policy has an attempt timeout");
/// assert_eq!(stall.bound(), stormguard_std::Duration::from_secs(5));
/// let _stack = tower::ServiceBuilder::new().layer(stall).layer(PolicyLayer::new(policy));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StallLayer {
    bound: Duration,
}

impl StallLayer {
    /// Bounds every wait for a body's next frame by `bound` (at least 1 ms, as any stall bound:
    /// [`StreamSettings`]).
    pub fn new(bound: impl Into<Duration>) -> Result<Self, SettingsError> {
        let bound = bound.into();
        StreamSettings::builder()
            .stall_timeout(Some(bound))
            .build()?;
        Ok(StallLayer { bound })
    }

    /// Bounds it by `policy`'s attempt timeout (`None` for a policy without one).
    pub fn for_policy<K: Clock, L>(policy: &Policy<K, L>) -> Option<Self> {
        StallLayer::new(policy.settings().attempt_timeout()?).ok()
    }

    /// The bound.
    #[must_use]
    pub const fn bound(&self) -> Duration {
        self.bound
    }
}

impl<S> Layer<S> for StallLayer {
    type Service = StallService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        StallService {
            inner,
            bound: self.bound,
        }
    }
}

/// The service under a [`StallLayer`]: its responses' bodies are [`StallBody`]s.
#[derive(Clone, Debug)]
pub struct StallService<S> {
    inner: S,
    bound: Duration,
}

/// The future of a [`StallService`] call.
pub type StallFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<StallBody<B>>, E>> + Send>>;

impl<S, Req, B> Service<Req> for StallService<S>
where
    S: Service<Req, Response = Response<B>>,
    S::Future: Send + 'static,
    B: HttpBody + Send + 'static,
{
    type Response = Response<StallBody<B>>;
    type Error = S::Error;
    type Future = StallFuture<B, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let response = self.inner.call(req);
        let bound = self.bound;
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| StallBody::new(body, bound)))
        })
    }
}

/// A response body whose every wait for the next frame is bounded: see [`StallLayer`].
pub struct StallBody<B> {
    inner: Pin<Box<B>>,
    bound: Duration,
    stall: StallTimer,
    stalled: bool,
}

impl<B> StallBody<B> {
    /// `body`, each wait for its next frame bounded by `bound`.
    pub fn new(body: B, bound: Duration) -> Self {
        StallBody {
            inner: Box::pin(body),
            bound,
            stall: StallTimer::new(Some(bound)),
            stalled: false,
        }
    }
}

impl<B> fmt::Debug for StallBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StallBody")
            .field("bound", &self.bound)
            .field("stalled", &self.stalled)
            .finish_non_exhaustive()
    }
}

impl<B> HttpBody for StallBody<B>
where
    B: HttpBody,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        if self.stalled {
            return Poll::Ready(None);
        }
        match self.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                self.stall.progressed();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if !self.stall.poll_stalled(cx) {
                    return Poll::Pending;
                }
                self.stalled = true;
                let after = self.bound;
                Poll::Ready(Some(Err(Box::new(BodyStalled { after }))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stalled || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
