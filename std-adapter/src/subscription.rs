//! Keeping a subscription established, forever: connect, run until it drops, reconnect, with
//! the core's capped backoff between failed attempts ([`SubscriptionRetry`]).
//!
//! The schedule is the core's: this module reads the clock, sleeps on tokio's timer what
//! [`SubscriptionRetry::poll_wait`] says, runs the caller's futures and reports what happened.

use std::fmt;
use std::future::{poll_fn, Future};
use std::ops::ControlFlow;
use std::pin::pin;
use std::task::Poll;

pub use stormguard_core::policy::{SubscriptionRetry, SubscriptionStatus};
use stormguard_core::{Backoff, Duration, Name};
use tokio_util::sync::CancellationToken;

use crate::clock::{default_clock, Clock, DefaultClock, SteadyClock};
use crate::handles::entropy_seed;

/// What happened to a subscription, as [`Subscription::on_event`] hears it (and `tracing`,
/// target `stormguard`, with the subscription's name in the `subscription` field).
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum SubscriptionEvent<'a> {
    /// An attempt to establish the subscription failed; the next is due in `retry_in`.
    AttemptFailed {
        /// The subscription's name.
        name: &'a Name,
        /// The attempt's number in the current schedule (1 for the first since the start or
        /// the last success).
        attempt: u32,
        /// What the attempt failed with.
        error: &'a dyn fmt::Display,
        /// The wait before the next attempt (the schedule's next delay).
        retry_in: Duration,
    },
    /// The subscription is established: the schedule starts over.
    Connected {
        /// The subscription's name.
        name: &'a Name,
        /// The attempt that succeeded (1 when the first did).
        attempt: u32,
    },
    /// The established subscription dropped: it is re-established at once.
    Lost {
        /// The subscription's name.
        name: &'a Name,
    },
}

impl SubscriptionEvent<'_> {
    /// A stable, lower-case name for logs and metrics labels.
    ///
    /// ```
    /// use stormguard_std::Name;
    /// use stormguard_std::subscription::SubscriptionEvent;
    /// let name = Name::new("feed");
    /// assert_eq!(SubscriptionEvent::Lost { name: &name }.kind(), "lost");
    /// ```
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            SubscriptionEvent::AttemptFailed { .. } => "attempt_failed",
            SubscriptionEvent::Connected { .. } => "connected",
            SubscriptionEvent::Lost { .. } => "lost",
        }
    }
}

impl fmt::Debug for SubscriptionEvent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubscriptionEvent::AttemptFailed {
                name,
                attempt,
                error,
                retry_in,
            } => f
                .debug_struct("AttemptFailed")
                .field("name", name)
                .field("attempt", attempt)
                .field("error", &format_args!("{error}"))
                .field("retry_in", retry_in)
                .finish(),
            SubscriptionEvent::Connected { name, attempt } => f
                .debug_struct("Connected")
                .field("name", name)
                .field("attempt", attempt)
                .finish(),
            SubscriptionEvent::Lost { name } => f.debug_struct("Lost").field("name", name).finish(),
        }
    }
}

/// The subscription helper stopped because it was cancelled (its token, see
/// [`Subscription::cancel_on`]). Dropping its future stops it as well, with nothing returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SubscriptionCancelled;

impl fmt::Display for SubscriptionCancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("subscription cancelled")
    }
}

impl std::error::Error for SubscriptionCancelled {}

type Observer = Box<dyn FnMut(&SubscriptionEvent<'_>) + Send>;

/// Keeps one subscription (a message-broker consumer, a change feed, a websocket) established:
/// [`run`](Subscription::run) connects, runs the subscription until it drops, and reconnects,
/// forever. Failed attempts are retried with the core's [`SubscriptionRetry`] schedule —
/// Whizbang's defaults, 1 s doubling to 120 s, no jitter, no limit — which starts over once a
/// connection succeeds; a dropped subscription is re-established at once.
///
/// Every wait is a tokio sleep (tokio's paused time drives it in tests) and the clock is
/// [`DefaultClock`] unless [`clock`](Subscription::clock) says otherwise. It stops when its
/// cancellation token is cancelled (at once, wherever it is: waiting, connecting or running)
/// or when its future is dropped.
///
/// ```
/// use std::ops::ControlFlow;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use stormguard_std::Subscription;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let tries = AtomicU32::new(0);
/// let mut feed = Subscription::new("orders-feed");
/// let delivered = feed
///     .run(
///         // Connect: the broker is down for the first two attempts (waits of 1 s, then 2 s).
///         |_attempt| async {
///             match tries.fetch_add(1, Ordering::Relaxed) {
///                 0 | 1 => Err("connection refused"),
///                 _ => Ok(vec!["order 1", "order 2"]),
///             }
///         },
///         // Run: consume until the stream ends; `Continue` reconnects, `Break` stops.
///         |messages| async move { ControlFlow::Break(messages.len()) },
///     )
///     .await;
/// assert_eq!(delivered, Ok(2));
/// assert_eq!(tries.load(Ordering::Relaxed), 3);
/// # }
/// ```
pub struct Subscription<K = DefaultClock> {
    name: Name,
    seed: u64,
    retry: SubscriptionRetry,
    /// Read through a [`SteadyClock`]: a clock that steps back never stretches a wait.
    clock: SteadyClock<K>,
    cancel: Option<CancellationToken>,
    observer: Option<Observer>,
}

/// Keeps a subscription established with the default schedule (1 s doubling to 120 s, forever,
/// starting over after a success): [`Subscription::new`]`(name).`[`run`](Subscription::run)`(connect, run)`.
///
/// ```
/// use std::ops::ControlFlow;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let r = stormguard_std::subscribe(
///     "prices",
///     |_| async { Ok::<_, std::io::Error>(5u32) },
///     |n| async move { ControlFlow::Break(n * 2) },
/// )
/// .await;
/// assert_eq!(r, Ok(10));
/// # }
/// ```
pub async fn subscribe<S, E, B, C, CF, R, RF>(
    name: &'static str,
    connect: C,
    run: R,
) -> Result<B, SubscriptionCancelled>
where
    C: FnMut(u32) -> CF,
    CF: Future<Output = Result<S, E>>,
    E: fmt::Display,
    R: FnMut(S) -> RF,
    RF: Future<Output = ControlFlow<B>>,
{
    Subscription::new(name).run(connect, run).await
}

impl Subscription {
    /// A subscription helper named `name` (for logs and events) on Whizbang's schedule
    /// ([`Backoff::subscription`]), with its jitter seed (if a jittered backoff is given) from
    /// the process's entropy.
    #[must_use]
    pub fn new(name: &'static str) -> Subscription {
        Subscription::named(Name::new(name))
    }

    /// [`Subscription::new`] with a [`Name`] built at run time.
    ///
    /// ```
    /// use stormguard_std::Name;
    /// let feed = stormguard_std::Subscription::named(Name::try_from_str("tenant-7").unwrap());
    /// assert_eq!(feed.name().as_str(), "tenant-7");
    /// ```
    #[must_use]
    pub fn named(name: Name) -> Subscription {
        let seed = entropy_seed();
        Subscription {
            name,
            seed,
            retry: SubscriptionRetry::new().with_seed(seed),
            clock: SteadyClock::new(default_clock()),
            cancel: None,
            observer: None,
        }
    }
}

impl<K> Subscription<K> {
    /// Follows `backoff` instead (its base, factor, cap and jitter), starting afresh.
    ///
    /// ```
    /// use stormguard_std::{Backoff, Duration};
    /// let quick = Backoff::subscription().to_builder().cap(Duration::from_secs(10)).build()?;
    /// let feed = stormguard_std::Subscription::new("feed").backoff(quick);
    /// assert_eq!(feed.retry().backoff().cap(), Duration::from_secs(10));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.retry = SubscriptionRetry::with_backoff(backoff).with_seed(self.seed);
        self
    }

    /// Seeds the jitter (only a jittered backoff has any; the default seed comes from the
    /// process's entropy), for reproducible schedules. Starts afresh.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self.retry = SubscriptionRetry::with_backoff(*self.retry.backoff()).with_seed(seed);
        self
    }

    /// Reads `clock` instead of the [`DefaultClock`] (waits are still tokio sleeps), through a
    /// [`SteadyClock`], so a reading that steps back counts as no time passed.
    #[must_use]
    pub fn clock<K2>(self, clock: K2) -> Subscription<K2> {
        Subscription {
            name: self.name,
            seed: self.seed,
            retry: self.retry,
            clock: SteadyClock::new(clock),
            cancel: self.cancel,
            observer: self.observer,
        }
    }

    /// Stops [`run`](Subscription::run) when `token` is cancelled: a wait, a connection
    /// attempt or the running subscription is dropped at once, and `run` returns
    /// [`SubscriptionCancelled`].
    ///
    /// ```
    /// let shutdown = tokio_util::sync::CancellationToken::new();
    /// let feed = stormguard_std::Subscription::new("feed").cancel_on(shutdown.clone());
    /// # let _ = feed;
    /// ```
    #[must_use]
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Tells `observer` every [`SubscriptionEvent`] (as well as `tracing`): each failed attempt
    /// with the wait before the next, each connection, each loss. Called on the running task:
    /// keep it cheap.
    ///
    /// ```
    /// use stormguard_std::Subscription;
    /// use stormguard_std::subscription::SubscriptionEvent;
    /// let feed = Subscription::new("feed").on_event(|e: &SubscriptionEvent<'_>| {
    ///     if let SubscriptionEvent::AttemptFailed { attempt, retry_in, .. } = e {
    ///         eprintln!("attempt {attempt} failed; next in {retry_in}");
    ///     }
    /// });
    /// # let _ = feed;
    /// ```
    #[must_use]
    pub fn on_event<F>(mut self, observer: F) -> Self
    where
        F: FnMut(&SubscriptionEvent<'_>) + Send + 'static,
    {
        self.observer = Some(Box::new(observer));
        self
    }

    /// The subscription's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The core's schedule, for its counters (`failures`, `total_attempts`, `last_delay`).
    #[must_use]
    pub fn retry(&self) -> &SubscriptionRetry {
        &self.retry
    }

    /// Where the subscription stands: pending, recovering (and when the next attempt is due),
    /// or healthy while [`run`](Subscription::run) holds it established.
    #[must_use]
    pub fn status(&self) -> SubscriptionStatus {
        self.retry.status()
    }

    fn tell(&mut self, event: &SubscriptionEvent<'_>) {
        trace(event);
        if let Some(observer) = self.observer.as_mut() {
            observer(event);
        }
    }
}

impl<K: Clock> Subscription<K> {
    /// Keeps the subscription established until `run` says to stop or the helper is
    /// cancelled.
    ///
    /// - `connect(attempt)` tries to establish it (`attempt` is 1 for the first attempt of a
    ///   schedule). An `Err` is a failed attempt: reported, then retried after the schedule's
    ///   next delay (1, 2, 4, ... 120, 120, ... s by default), forever.
    /// - On `Ok(subscription)`, the schedule starts over and `run(subscription)` runs it. When
    ///   it returns `ControlFlow::Continue(())` the subscription has dropped: it is
    ///   re-established at once (and a failure then waits the first delay again). When it
    ///   returns `ControlFlow::Break(value)`, `run` returns `Ok(value)`.
    ///
    /// Returns `Err(SubscriptionCancelled)` as soon as the token given to
    /// [`cancel_on`](Subscription::cancel_on) is cancelled; dropping the future stops it too.
    /// The helper can be run again afterwards; its schedule goes on from where it stopped.
    pub async fn run<S, E, B, C, CF, R, RF>(
        &mut self,
        mut connect: C,
        mut run: R,
    ) -> Result<B, SubscriptionCancelled>
    where
        C: FnMut(u32) -> CF,
        CF: Future<Output = Result<S, E>>,
        E: fmt::Display,
        R: FnMut(S) -> RF,
        RF: Future<Output = ControlFlow<B>>,
    {
        let cancel = self.cancel.clone();
        let cancel = cancel.as_ref();
        loop {
            // The core says how long until the next attempt is due (zero: at once).
            let wait = self
                .retry
                .poll_wait(self.clock.now())
                .unwrap_or(Duration::ZERO);
            if wait.is_zero() {
                // Due at once (a zero first delay, or a reconnect): still let the runtime's
                // other tasks run, so a broker refusing at once cannot pin this thread.
                tokio::task::yield_now().await;
            } else {
                until_cancelled(tokio::time::sleep(wait.into()), cancel).await?;
            }
            if cancel.is_some_and(CancellationToken::is_cancelled) {
                return Err(SubscriptionCancelled);
            }
            let attempt = self.retry.attempt();
            match until_cancelled(connect(attempt), cancel).await? {
                Err(error) => {
                    let now = self.clock.now();
                    let retry_at = self.retry.on_failure(now);
                    let retry_in = retry_at.saturating_duration_since(now);
                    let name = self.name;
                    self.tell(&SubscriptionEvent::AttemptFailed {
                        name: &name,
                        attempt,
                        error: &error,
                        retry_in,
                    });
                }
                Ok(subscription) => {
                    self.retry.on_connected(self.clock.now());
                    let name = self.name;
                    self.tell(&SubscriptionEvent::Connected {
                        name: &name,
                        attempt,
                    });
                    match until_cancelled(run(subscription), cancel).await {
                        // Stopped on purpose (by the caller's run or its token): no longer
                        // established, and nothing failed.
                        Err(cancelled) => {
                            self.retry.reset();
                            return Err(cancelled);
                        }
                        Ok(ControlFlow::Break(value)) => {
                            self.retry.reset();
                            return Ok(value);
                        }
                        // Dropped: reconnect at once, or after the schedule's next delay if it
                        // was lost as soon as it was established (the core's rule).
                        Ok(ControlFlow::Continue(())) => {
                            self.retry.on_disconnected(self.clock.now());
                            self.tell(&SubscriptionEvent::Lost { name: &name });
                        }
                    }
                }
            }
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for Subscription<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("name", &self.name)
            .field("retry", &self.retry)
            .field("clock", &self.clock)
            .field("cancel", &self.cancel)
            .finish_non_exhaustive()
    }
}

/// Runs `fut` until it returns or `cancel` is cancelled (checked first).
async fn until_cancelled<F: Future>(
    fut: F,
    cancel: Option<&CancellationToken>,
) -> Result<F::Output, SubscriptionCancelled> {
    let Some(token) = cancel else {
        return Ok(fut.await);
    };
    let mut fut = pin!(fut);
    let mut cancelled = pin!(token.cancelled());
    poll_fn(|cx| {
        if cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(SubscriptionCancelled));
        }
        fut.as_mut().poll(cx).map(Ok)
    })
    .await
}

/// Logs a subscription event (target `stormguard`): the first three failed attempts of a
/// schedule and a lost subscription at WARN, later failures (at most one every cap, 2 minutes
/// by default) at INFO, a connection at INFO.
fn trace(event: &SubscriptionEvent<'_>) {
    match *event {
        SubscriptionEvent::AttemptFailed {
            name,
            attempt,
            error,
            retry_in,
        } if attempt <= 3 => tracing::warn!(
            target: "stormguard",
            subscription = name.as_str(),
            attempt,
            error = %error,
            retry_in_ms = retry_in.as_millis(),
            "subscription attempt failed"
        ),
        SubscriptionEvent::AttemptFailed {
            name,
            attempt,
            error,
            retry_in,
        } => tracing::info!(
            target: "stormguard",
            subscription = name.as_str(),
            attempt,
            error = %error,
            retry_in_ms = retry_in.as_millis(),
            "subscription attempt failed"
        ),
        SubscriptionEvent::Connected { name, attempt } => tracing::info!(
            target: "stormguard",
            subscription = name.as_str(),
            attempt,
            "subscription established"
        ),
        SubscriptionEvent::Lost { name } => tracing::warn!(
            target: "stormguard",
            subscription = name.as_str(),
            "subscription lost; re-establishing"
        ),
    }
}
