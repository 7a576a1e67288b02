//! Streaming calls on tokio: [`Policy::call_stream`] and [`Policy::call_stream_resumable`].
//!
//! The connection (opening the stream and waiting for its first element) is one attempt of the
//! policy's call loop, so every rule of a call holds for it; the core's [`StreamRestarts`]
//! decides what a failure after it means. This module only moves elements and sleeps.

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use stormguard_core::call::{Lost, StreamRestarts, StreamSettings, StreamSettingsBuilder};
use stormguard_core::limits::saturation::SaturationSignal;
use stormguard_core::part::Never;
use stormguard_core::{CallError, Duration, Outcome, Parts, SettingsError};

use super::{next_salt, Attempt, CallOptions, Policy};
use crate::clock::Clock;
use crate::events::Listener;
use crate::stall::StallTimer;

/// A stream whose first element arrived, as the call loop hands it back.
struct Opened<T, S> {
    first: Option<T>,
    rest: Pin<Box<S>>,
}

/// A connection in progress: the policy's call loop, handing the opener back beside its result.
type Connecting<'p, T, E, S, F> =
    Pin<Box<dyn Future<Output = (Result<Opened<T, S>, CallError<E>>, F)> + Send + 'p>>;

enum Phase<'p, T, E, S, F> {
    /// Not polled yet.
    Start,
    Connecting(Connecting<'p, T, E, S, F>),
    Flowing(Pin<Box<S>>),
    /// The backoff before a restart.
    Waiting(Pin<Box<tokio::time::Sleep>>),
    Done,
}

/// A streaming call under a [`Policy`]: a [`Stream`] of `Result<T, CallError<E>>`, made by
/// [`Policy::call_stream`] or [`Policy::call_stream_resumable`].
///
/// - **Until the first element**, opening the stream is an attempt of the policy: retried with
///   backoff as long as the attempts, the deadline, the breaker and the budget allow, and the
///   attempt timeout bounds the wait for the first element alone. A connection that fails for
///   good ends the stream with the call's error (the only item).
/// - **Then** elements flow to the caller as they come, with nothing allocated per element. A
///   failed element (or, with a [stall bound](CallStream::stall_timeout), a quiet spell)
///   loses the stream. A resumable call restarts from its checkpoint, up to
///   [`max_restarts`](CallStream::max_restarts) times; otherwise the failure is the last item.
///   A lost stream is reported to the breaker as a failure, and a restart is a retry the
///   budget funds, after the backoff, announced by [`Event::Restarted`](crate::Event).
///
/// The breaker learns the time to the first element as an attempt's latency, and the measured
/// attempt ceiling follows what it learned: a policy shared with unary calls would bound the
/// wait for a stream's first element by theirs. Give streams a policy of their own when the
/// two differ. A bulkhead, an adaptive limit or a rate limit of the policy sees each connection
/// as the attempt it is: a slot is held while connecting, not while the stream flows after it.
///
/// It is a [`Stream`] when the opener, its future, the stream it opens, the elements, the
/// errors and the checkpoints are `Send` (a connection is boxed as a `Send` future once per
/// connection, so the stream can move between a runtime's threads); with any of them not
/// `Send`, the compiler says `CallStream` is not a `Stream`.
///
/// Dropping it cancels the call. [`restarts`](CallStream::restarts) and
/// [`last_error`](CallStream::last_error) say how often and why it restarted.
#[must_use = "a stream does nothing unless polled"]
pub struct CallStream<'p, K, L, T, E, S, F, P, CP, C> {
    policy: &'p Policy<K, L>,
    /// The opener, held here between connections.
    open: Option<F>,
    /// How a checkpoint is read from an element, for a resumable call.
    checkpoint_of: Option<CP>,
    /// The last checkpoint taken.
    checkpoint: Option<P>,
    /// Whether a checkpoint can be resumed from (always, unless an adapter of this crate says
    /// otherwise: a download without a strong `ETag`).
    resumable_from: fn(&P) -> bool,
    classify: C,
    restarts: StreamRestarts,
    last_error: Option<E>,
    stall: StallTimer,
    phase: Phase<'p, T, E, S, F>,
}

// Nothing in it is pinned in place: the inner stream, the connection and the timers are boxed.
impl<K, L, T, E, S, F, P, CP, C> Unpin for CallStream<'_, K, L, T, E, S, F, P, CP, C> {}

/// Every checkpoint can be resumed from.
fn any_checkpoint<P>(_: &P) -> bool {
    true
}

/// Every error transient: the default classification of a failed element or connection.
fn every_error_transient<E>(_: &E) -> Outcome {
    Outcome::Transient
}

impl<K: Clock, L: Listener> Policy<K, L> {
    /// Calls `open` for a stream of `Result<T, E>` and hands its elements on as a
    /// [`CallStream`]: the connection is retried until the first element arrives, and a
    /// failure after it ends the stream (see [`Policy::call_stream_resumable`] to restart
    /// instead). Refused for a hedged policy ([`Field::Hedging`](stormguard_core::Field)).
    ///
    /// ```
    /// use futures_util::StreamExt;
    /// use stormguard_std::Policy;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let policy = Policy::builder("ticks").build()?;
    /// let ticks = policy.call_stream(|| async {
    ///     // open the stream here: a server-sent events response, a gRPC server stream...
    ///     Ok::<_, std::io::Error>(futures_util::stream::iter([Ok(1), Ok(2), Ok(3)]))
    /// })?;
    /// let got: Vec<u32> = ticks.map(|item| item.unwrap()).collect().await;
    /// assert_eq!(got, [1, 2, 3]);
    /// # Ok(()) }
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn call_stream<T, E, S, F, Fut>(
        &self,
        mut open: F,
    ) -> Result<
        CallStream<'_, K, L, T, E, S, impl FnMut(Option<()>) -> Fut, (), fn(&T), fn(&E) -> Outcome>,
        SettingsError,
    >
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
    {
        let restarts = self.stream_restarts()?;
        Ok(CallStream {
            policy: self,
            open: Some(move |_: Option<()>| open()),
            checkpoint_of: None,
            checkpoint: None,
            resumable_from: any_checkpoint::<()>,
            classify: every_error_transient::<E>,
            restarts,
            last_error: None,
            stall: StallTimer::new(None),
            phase: Phase::Start,
        })
    }

    /// [`Policy::call_stream`] with a checkpoint: `checkpoint(&element)` reads the position
    /// each element leaves the stream at (an event id, an offset), and `open(from)` opens the
    /// stream after the last one taken (`None` the first time: from the start). A stream lost mid-way then
    /// restarts from there, up to [`max_restarts`](CallStream::max_restarts) times (3 by
    /// default), each restart a retry the breaker, budget and backoff see.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use futures_util::StreamExt;
    /// use stormguard_std::{CallError, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let policy = Policy::builder("feed").build()?;
    /// // A feed of 1..=6 whose connection drops after two elements each time.
    /// let opened_from = Arc::new(Mutex::new(Vec::new()));
    /// let seen = opened_from.clone();
    /// let feed = policy.call_stream_resumable(
    ///     |n: &u32| *n,
    ///     move |from: Option<u32>| {
    ///         seen.lock().unwrap().push(from);
    ///         let start = from.map_or(1, |n| n + 1);
    ///         let items = (start..=6).take(2).map(Ok).chain((start + 2 <= 6).then(|| Err("dropped")));
    ///         async move { Ok::<_, &str>(futures_util::stream::iter(items)) }
    ///     },
    /// )?;
    /// let got: Vec<Result<u32, CallError<&str>>> = feed.collect().await;
    /// assert_eq!(got.into_iter().map(Result::unwrap).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
    /// assert_eq!(*opened_from.lock().unwrap(), [None, Some(2), Some(4)]);
    /// # Ok(()) }
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn call_stream_resumable<T, E, S, F, Fut, P, CP>(
        &self,
        checkpoint: CP,
        open: F,
    ) -> Result<CallStream<'_, K, L, T, E, S, F, P, CP, fn(&E) -> Outcome>, SettingsError>
    where
        F: FnMut(Option<P>) -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        CP: FnMut(&T) -> P,
    {
        let restarts = self.stream_restarts()?;
        Ok(CallStream {
            policy: self,
            open: Some(open),
            checkpoint_of: Some(checkpoint),
            checkpoint: None,
            resumable_from: any_checkpoint::<P>,
            classify: every_error_transient::<E>,
            restarts,
            last_error: None,
            stall: StallTimer::new(None),
            phase: Phase::Start,
        })
    }

    fn stream_restarts(&self) -> Result<StreamRestarts, SettingsError> {
        // Salted like a call, so streams begun at the same instant restart apart.
        let now = self.clock.now();
        StreamRestarts::begin_salted(&self.settings, &StreamSettings::DEFAULT, now, next_salt())
    }
}

impl<'p, K, L, T, E, S, F, P, CP, C> CallStream<'p, K, L, T, E, S, F, P, CP, C> {
    /// How many times a stream lost mid-way restarts from its checkpoint (3 by default; 0 for
    /// none). A call made without a checkpoint never restarts.
    pub fn max_restarts(mut self, n: u32) -> Self {
        self.restarts = self
            .with_settings(|b| b.max_restarts(n))
            .unwrap_or(self.restarts);
        self
    }

    /// Bounds the gap between two elements once the stream flows (unbounded by default: a feed
    /// may be quiet for hours): a stream quiet for longer is lost as a timeout, and restarts
    /// if it can. At least 1 ms.
    pub fn stall_timeout(mut self, d: impl Into<Duration>) -> Result<Self, SettingsError> {
        let d = d.into();
        self.restarts = self.with_settings(|b| b.stall_timeout(Some(d)))?;
        self.stall = StallTimer::new(Some(d));
        Ok(self)
    }

    /// Lets a long-lived stream survive a lost connection now and then: a connection that had
    /// flowed for at least `after` when it was lost starts the restarts over (see
    /// [`StreamSettingsBuilder::reset_restarts_after`]). At least 1 ms.
    pub fn reset_restarts_after(
        mut self,
        after: impl Into<Duration>,
    ) -> Result<Self, SettingsError> {
        let after = after.into();
        self.restarts = self.with_settings(|b| b.reset_restarts_after(Some(after)))?;
        Ok(self)
    }

    /// How a failed element or connection counts (every error transient by default): a
    /// [permanent](Outcome::Permanent) one is never retried nor restarted from.
    pub fn classify<C2: Fn(&E) -> Outcome>(
        self,
        classify: C2,
    ) -> CallStream<'p, K, L, T, E, S, F, P, CP, C2> {
        CallStream {
            policy: self.policy,
            open: self.open,
            checkpoint_of: self.checkpoint_of,
            checkpoint: self.checkpoint,
            resumable_from: self.resumable_from,
            classify,
            restarts: self.restarts,
            last_error: self.last_error,
            stall: self.stall,
            phase: self.phase,
        }
    }

    /// Says which checkpoints can be resumed from: a loss at any other ends the stream at once
    /// (no restart is paid for).
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    pub(crate) fn resumable_when(mut self, resumable: fn(&P) -> bool) -> Self {
        self.resumable_from = resumable;
        self
    }

    /// Restarts made so far.
    pub fn restarts(&self) -> u32 {
        self.restarts.restarts()
    }

    /// The error of the last loss the stream restarted from, if one did (a stall has none: see
    /// [`CallStream::last_loss`]). A loss that ends the stream hands its error out as the last
    /// item instead.
    pub fn last_error(&self) -> Option<&E> {
        self.last_error.as_ref()
    }

    /// How the stream was lost last, if it ever was.
    pub fn last_loss(&self) -> Option<Outcome> {
        self.restarts.last_loss()
    }

    fn with_settings(
        &self,
        change: impl FnOnce(StreamSettingsBuilder) -> StreamSettingsBuilder,
    ) -> Result<StreamRestarts, SettingsError> {
        let settings = change(self.restarts.settings().to_builder()).build()?;
        Ok(self.restarts.clone().with_settings(settings))
    }
}

impl<'p, K, L, T, E, S, F, Fut, P, CP, C> CallStream<'p, K, L, T, E, S, F, P, CP, C>
where
    K: Clock + Sync,
    L: Listener + Sync,
    T: Send + 'p,
    E: Send + 'p,
    S: Stream<Item = Result<T, E>> + Send + 'p,
    F: FnMut(Option<P>) -> Fut + Send + 'p,
    Fut: Future<Output = Result<S, E>> + Send + 'p,
    P: Clone + Send + Sync + 'p,
    CP: FnMut(&T) -> P,
    C: Fn(&E) -> Outcome + Clone + Send + Sync + 'p,
{
    /// Starts a connection from the last checkpoint, through the policy's call loop. Out of
    /// line, as is the loss: the element path of `poll_next` stays small.
    #[inline(never)]
    fn connect(&mut self) -> Poll<Option<Result<T, CallError<E>>>> {
        let Some(mut open) = self.open.take() else {
            self.phase = Phase::Done;
            return Poll::Ready(None);
        };
        let policy = self.policy;
        let from = self.checkpoint.clone();
        let classify = self.classify.clone();
        self.phase = Phase::Connecting(Box::pin(async move {
            let options = CallOptions::new().classify(move |r: &Result<Opened<T, S>, E>| match r {
                Ok(_) => Outcome::Success,
                Err(e) => classify(e),
            });
            let attempt = |_: Attempt| {
                let opening = open(from.clone());
                Some(async move {
                    let mut rest = Box::pin(opening.await?);
                    match poll_fn(|cx| rest.as_mut().poll_next(cx)).await {
                        Some(Ok(first)) => Ok(Opened {
                            first: Some(first),
                            rest,
                        }),
                        Some(Err(e)) => Err(e),
                        None => Ok(Opened { first: None, rest }),
                    }
                })
            };
            let result = policy.run(None, &options, attempt, None).await;
            (result, open)
        }));
        Poll::Pending
    }

    /// An element arrived: its checkpoint is taken and the stall bound starts over.
    fn accept(&mut self, item: &T) {
        if let Some(checkpoint_of) = self.checkpoint_of.as_mut() {
            self.checkpoint = Some(checkpoint_of(item));
        }
        self.stall.progressed();
    }

    /// The stream was lost with `outcome` (and the element's error, if one failed): the core
    /// decides whether it restarts. `Some` is the last item to hand out.
    #[inline(never)]
    fn lose(&mut self, outcome: Outcome, error: Option<E>) -> Option<Result<T, CallError<E>>> {
        let policy = self.policy;
        let now = policy.clock.now();
        if policy.drain.as_ref().is_some_and(|d| d.is_draining()) {
            self.restarts.on_drain();
        }
        // The breaker alone (no limit in front: a loss is reported, not admitted) and the
        // budget.
        let breaker = policy.breaker_parts();
        let parts: Parts<_, _, Never, Never, Never, Never, &SaturationSignal> = Parts {
            name: breaker.name,
            breaker: breaker.breaker,
            budget: breaker.budget,
            limiter: None,
            quota: None,
            bulkhead: None,
            adaptive: None,
            saturation: policy
                .saturation
                .as_ref()
                .map(crate::saturation::SaturationProbe::signal),
        };
        // A restart needs a checkpoint it can resume from.
        let resumable = self.checkpoint_of.is_some()
            && self.checkpoint.as_ref().is_some_and(self.resumable_from);
        let lost = self
            .restarts
            .on_lost(&parts, now, outcome, resumable, &mut |e| policy.emit(&e));
        self.stall.progressed();
        match lost {
            Lost::Restart(wait) => {
                self.last_error = error;
                self.phase = Phase::Waiting(Box::pin(tokio::time::sleep(wait.into())));
                None
            }
            Lost::End(finished) => {
                self.phase = Phase::Done;
                finished.into_stream_end(error).err().map(Err)
            }
        }
    }

    /// Everything but an element that was ready: connecting, waiting to restart, and what a
    /// flowing stream did other than hand out an element (`polled`, when it was just polled).
    #[inline(never)]
    fn advance(
        &mut self,
        mut polled: Option<Poll<Option<Result<T, E>>>>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<T, CallError<E>>>> {
        let this = self;
        loop {
            match &mut this.phase {
                Phase::Start => {
                    let _ = this.connect();
                }
                Phase::Connecting(connecting) => {
                    let (result, open) = match connecting.as_mut().poll(cx) {
                        Poll::Ready(done) => done,
                        Poll::Pending => return Poll::Pending,
                    };
                    this.open = Some(open);
                    match result {
                        Ok(Opened {
                            first: Some(first),
                            rest,
                        }) => {
                            this.phase = Phase::Flowing(rest);
                            this.restarts.on_flowing(this.policy.clock.now());
                            this.accept(&first);
                            return Poll::Ready(Some(Ok(first)));
                        }
                        // An empty stream: the dependency answered with nothing.
                        Ok(Opened { first: None, .. }) => {
                            this.phase = Phase::Done;
                            return Poll::Ready(None);
                        }
                        Err(e) => {
                            this.phase = Phase::Done;
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                }
                Phase::Flowing(rest) => {
                    match polled.take().unwrap_or_else(|| rest.as_mut().poll_next(cx)) {
                        Poll::Ready(Some(Ok(item))) => {
                            this.accept(&item);
                            return Poll::Ready(Some(Ok(item)));
                        }
                        Poll::Ready(Some(Err(e))) => {
                            let outcome = (this.classify)(&e);
                            if let Some(last) = this.lose(outcome, Some(e)) {
                                return Poll::Ready(Some(last));
                            }
                        }
                        Poll::Ready(None) => {
                            this.phase = Phase::Done;
                            return Poll::Ready(None);
                        }
                        Poll::Pending => {
                            if !this.stall.poll_stalled(cx) {
                                return Poll::Pending;
                            }
                            if let Some(last) = this.lose(Outcome::TimedOut, None) {
                                return Poll::Ready(Some(last));
                            }
                        }
                    }
                }
                Phase::Waiting(backoff) => {
                    if backoff.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let _ = this.connect();
                }
                Phase::Done => return Poll::Ready(None),
            }
        }
    }
}

impl<'p, K, L, T, E, S, F, Fut, P, CP, C> Stream for CallStream<'p, K, L, T, E, S, F, P, CP, C>
where
    K: Clock + Sync,
    L: Listener + Sync,
    T: Send + 'p,
    E: Send + 'p,
    S: Stream<Item = Result<T, E>> + Send + 'p,
    F: FnMut(Option<P>) -> Fut + Send + 'p,
    Fut: Future<Output = Result<S, E>> + Send + 'p,
    P: Clone + Send + Sync + 'p,
    CP: FnMut(&T) -> P,
    C: Fn(&E) -> Outcome + Clone + Send + Sync + 'p,
{
    type Item = Result<T, CallError<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // The element path, kept apart from the connection, loss and stall handling.
        if let Phase::Flowing(rest) = &mut this.phase {
            let polled = rest.as_mut().poll_next(cx);
            if let Poll::Ready(Some(Ok(item))) = polled {
                this.accept(&item);
                return Poll::Ready(Some(Ok(item)));
            }
            return this.advance(Some(polled), cx);
        }
        this.advance(None, cx)
    }
}

impl<K, L, T, E, S, F, P, CP, C> fmt::Debug for CallStream<'_, K, L, T, E, S, F, P, CP, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match self.phase {
            Phase::Start => "start",
            Phase::Connecting(_) => "connecting",
            Phase::Flowing(_) => "flowing",
            Phase::Waiting(_) => "waiting to restart",
            Phase::Done => "done",
        };
        f.debug_struct("CallStream")
            .field("policy", self.policy.name())
            .field("phase", &phase)
            .field("restarts", &self.restarts.restarts())
            .finish_non_exhaustive()
    }
}
