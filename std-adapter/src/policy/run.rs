//! The async form, on tokio's timers.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use stormguard_core::{
    breaker::FullTable,
    call::{AttemptLog, Due, Gate, HedgedPair, Lane, PairNext, SharedHedgeShare},
    limits::BulkheadPermit,
    limits::{BulkheadEntry, BulkheadTicket, SharedQuota},
    wire::quota::Published,
    Call, Duration, Event, Finished, Instant, Outcome, Parts, Rejection, State, Step,
};
use tokio_util::either::Either;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::steps::BulkheadShared;
use super::{Attempt, CallEnd, CallError, CallOptions, Drain, PermitGuard, Policy, Report, Slept};
use crate::cache::SuccessCache;
use crate::classify::Classify;
use crate::clock::Clock;
use crate::events::{attempt_span, call_span, record_outcome, CallSpan, Ended, Listener};

use super::Logged;

/// How an attempt's race ended.
enum Ran<R> {
    Returned(R),
    Cancelled,
    TimedOut,
}

/// One poll of an attempt's race: `fut` until it returns, `cancel` is cancelled, or
/// `timeout` passes. The operation is polled first: a ready future costs no timer and no
/// token check. A plain function polled from the loop's own `poll_fn`, so the attempt needs
/// no future of its own.
#[inline]
fn race<'t, F: Future>(
    fut: Pin<&mut F>,
    cancelled: Pin<&mut Option<WaitForCancellationFuture<'t>>>,
    timer: Pin<&mut Option<tokio::time::Sleep>>,
    cancel: Option<&'t CancellationToken>,
    timeout: Option<Duration>,
    cx: &mut Context<'_>,
) -> Poll<Ran<F::Output>> {
    let (mut cancelled, mut timer) = (cancelled, timer);
    if let Poll::Ready(r) = fut.poll(cx) {
        return Poll::Ready(Ran::Returned(r));
    }
    if let Some(token) = cancel {
        if cancelled.is_none() {
            cancelled.set(Some(token.cancelled()));
        }
        if let Some(c) = cancelled.as_mut().as_pin_mut() {
            if c.poll(cx).is_ready() {
                return Poll::Ready(Ran::Cancelled);
            }
        }
    }
    if let Some(t) = timeout {
        if timer.is_none() {
            timer.set(Some(tokio::time::sleep(t.into())));
        }
        if let Some(s) = timer.as_mut().as_pin_mut() {
            if s.poll(cx).is_ready() {
                return Poll::Ready(Ran::TimedOut);
            }
        }
    }
    Poll::Pending
}

/// Sleeps `d` on tokio's timer, or until `cancel` is cancelled (checked first) or `drain`
/// begins. A zero sleep does not yield.
async fn sleep(d: Duration, cancel: Option<&CancellationToken>, drain: Option<&Drain>) -> Slept {
    if cancel.is_some_and(CancellationToken::is_cancelled) {
        return Slept::Cancelled;
    }
    if drain.is_some_and(Drain::is_draining) {
        return Slept::Drained;
    }
    if d.is_zero() {
        return Slept::Elapsed;
    }
    if cancel.is_none() && drain.is_none() {
        tokio::time::sleep(d.into()).await;
        return Slept::Elapsed;
    }
    let mut cancelled = pin!(cancel.map(CancellationToken::cancelled));
    let mut drained = pin!(drain.map(Drain::begun));
    let mut timer = pin!(tokio::time::sleep(d.into()));
    poll_fn(|cx| {
        if let Some(Poll::Ready(())) = cancelled.as_mut().as_pin_mut().map(|c| c.poll(cx)) {
            return Poll::Ready(Slept::Cancelled);
        }
        if let Some(Poll::Ready(())) = drained.as_mut().as_pin_mut().map(|c| c.poll(cx)) {
            return Poll::Ready(Slept::Drained);
        }
        timer.as_mut().poll(cx).map(|()| Slept::Elapsed)
    })
    .await
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<K: Clock, L: Listener> Policy<K, L> {
    /// Runs `op` under the policy: `op(attempt)` (1 for the first attempt) makes one
    /// attempt; `Ok` is a success and every `Err` a transient failure (see
    /// [`Policy::call_with`] for another classification, a cancellation token or a tighter
    /// deadline).
    ///
    /// Each attempt races its attempt deadline (the attempt timeout, capped by the call's
    /// deadline): an attempt still running then is dropped and counts as
    /// [`Outcome::TimedOut`]. Failures are retried after the core's backoff as long as
    /// the attempts, the deadline, the breaker and the budget allow. A refusal is reported
    /// only after the guarded pause ([`GUARD_PAUSE`](stormguard_core::GUARD_PAUSE),
    /// 100 ms, capped by the deadline's remainder), announced before it is served by the
    /// `Rejected` event, so a task that polls in a loop cannot spin on an open breaker.
    ///
    /// Nothing happens until the returned future is first polled: the call starts then
    /// (its first clock reading, its deadline). Dropping the future cancels the call at
    /// once, wherever it is: an attempt in flight gives its half-open probe slot back (a
    /// drop guard releases its permit), a wait or pause simply ends. Cancellation never
    /// counts as a failure.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = stormguard_std::Policy::builder("search").build()?;
    /// let hits = policy
    ///     .call(|attempt| async move { Ok::<_, std::io::Error>(attempt * 10) })
    ///     .await;
    /// assert_eq!(hits.unwrap(), 10);
    /// # Ok(()) }
    /// ```
    // Not an `async fn`: the loop's future is handed out as it is, so its result is not
    // moved through one more future on the way out.
    pub fn call<T, E, F, Fut>(
        &self,
        mut op: F,
    ) -> impl Future<Output = Result<T, CallError<E>>> + use<'_, T, E, F, Fut, K, L>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run(
            None,
            &super::DEFAULT_OPTIONS,
            move |a: Attempt| Some(op(a.number)),
            None,
        )
    }

    /// [`Policy::call`] with per-call [`CallOptions`]: a classifier, a cancellation token,
    /// a deadline.
    ///
    /// ```
    /// use stormguard_std::Outcome;
    /// use stormguard_std::{CallError, CallOptions, Policy};
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = Policy::builder("ledger").build()?;
    /// let shutdown = CancellationToken::new();
    /// let options = CallOptions::new()
    ///     // 409 is "not yet": the ledger is fine, ask again later.
    ///     .classify(|r: &Result<u64, u16>| match r {
    ///         Ok(_) => Outcome::Success,
    ///         Err(409) => Outcome::Throttled { retry_after: None },
    ///         Err(400..=499) => Outcome::Permanent,
    ///         Err(_) => Outcome::Transient,
    ///     })
    ///     .cancel_on(&shutdown);
    /// let r = policy.call_with(options, |_| async { Err::<u64, u16>(404) }).await;
    /// assert_eq!(r, Err(CallError::Failed(404))); // permanent: not retried
    /// # Ok(()) }
    /// ```
    pub async fn call_with<T, E, F, Fut, C>(
        &self,
        options: CallOptions<'_, C>,
        mut op: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
    {
        self.run(None, &options, |a: Attempt| Some(op(a.number)), None)
            .await
    }

    /// [`Policy::call_with`], keeping how each attempt ended: its number, outcome and
    /// duration, whether the dependency answered, whether it was a hedge, and, for an attempt
    /// refused before it started, by whom and whether the refusal was the caller's own limit
    /// (a local rate limiter, bulkhead, adaptive limiter or quota reserve) rather than the
    /// breaker or the budget. The log comes back beside the result, whatever the result:
    /// a local limiter's refusal and the dependency's 429 read apart after the fact.
    ///
    /// The log holds no allocation (the first 8 attempts, a count of any more); the call
    /// itself is [`Policy::call_with`]'s. A call that needs no log uses that.
    ///
    /// ```
    /// use stormguard_std::{CallOptions, Outcome, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = Policy::builder("search").build()?;
    /// let logged = policy
    ///     .call_logged(CallOptions::new(), |attempt| async move {
    ///         if attempt == 1 { Err("reset") } else { Ok(attempt) }
    ///     })
    ///     .await;
    /// assert_eq!(logged.result, Ok(2));
    /// let first = logged.attempts.iter().next().unwrap();
    /// assert_eq!(first.end.outcome(), Some(Outcome::Transient));
    /// assert!(!logged.attempts.any_self_imposed());
    /// assert!(logged.attempts.to_string().starts_with("attempt 1: transient failure after"));
    /// # Ok(()) }
    /// ```
    pub async fn call_logged<T, E, F, Fut, C>(
        &self,
        options: CallOptions<'_, C>,
        mut op: F,
    ) -> Logged<T, CallError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
    {
        let mut attempts = AttemptLog::new();
        let mut end = CallEnd::logging_into(Some(&mut attempts));
        let result = self
            .run(
                None,
                &options,
                |a: Attempt| Some(op(a.number)),
                Some(&mut end),
            )
            .await;
        Logged { result, attempts }
    }

    /// [`Policy::call`] with a fallback for refusals: when the call is refused (breaker
    /// open, half-open full, ramp shedding, isolated, budget empty), `fallback` gives the
    /// value instead, after the same guarded pause, so a polling loop with a fallback
    /// cannot spin either. A failure of the dependency is not a refusal: it reaches the
    /// caller as the failure it is (DESIGN.md, "Decisions").
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = stormguard_std::Policy::builder("prices").build()?;
    /// policy.isolate();
    /// let price = policy
    ///     .call_or(|_rejection| 0, |_| async { Ok::<u32, ()>(1_999) })
    ///     .await;
    /// assert_eq!(price, Ok(0));
    /// # Ok(()) }
    /// ```
    pub async fn call_or<T, E, F, Fut, D>(&self, fallback: D, op: F) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        D: FnOnce(&Rejection) -> T,
    {
        self.call_or_with(CallOptions::new(), fallback, op).await
    }

    /// [`Policy::call_or`] with per-call [`CallOptions`].
    ///
    /// ```
    /// use stormguard_std::CallOptions;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = stormguard_std::Policy::builder("prices").build()?;
    /// let price = policy
    ///     .call_or_with(CallOptions::new(), |_| 0, |_| async { Ok::<u32, ()>(1_999) })
    ///     .await;
    /// assert_eq!(price, Ok(1_999));
    /// # Ok(()) }
    /// ```
    pub async fn call_or_with<T, E, F, Fut, C, D>(
        &self,
        options: CallOptions<'_, C>,
        fallback: D,
        op: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
        D: FnOnce(&Rejection) -> T,
    {
        match self.call_with(options, op).await {
            Err(CallError::Rejected { rejection, .. }) => Ok(fallback(&rejection)),
            other => other,
        }
    }

    /// [`Policy::call`] behind a success cache (opt-in, DESIGN.md "Decisions"): while
    /// `cache` holds a fresh success and the breaker is closed, it is returned without
    /// calling (no attempt, no budget); otherwise the call runs, and a value the classifier
    /// called a success is stored at the instant the call ended. A failure of the
    /// dependency clears the cache. Errors, rejections and fallback values are never cached.
    /// Concurrent callers of an empty entry share one call: one runs the operation, the
    /// others wait and are served its value (if it failed, the next waiter calls). The rule
    /// is [`CacheRule`](crate::cache::CacheRule).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use stormguard_std::Duration;
    /// use stormguard_std::{Policy, SuccessCache};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = Policy::builder("rates").build()?;
    /// let cache = SuccessCache::new(Duration::from_secs(5)).unwrap();
    /// let calls = AtomicU32::new(0);
    /// let fetch = || policy.call_cached(&cache, |_| async {
    ///     Ok::<_, ()>(calls.fetch_add(1, Ordering::Relaxed))
    /// });
    /// assert_eq!(fetch().await, Ok(0));
    /// assert_eq!(fetch().await, Ok(0)); // served from the cache
    /// tokio::time::advance(std::time::Duration::from_secs(5)).await;
    /// assert_eq!(fetch().await, Ok(1)); // expired: called again
    /// # Ok(()) }
    /// ```
    pub async fn call_cached<T, E, F, Fut>(
        &self,
        cache: &SuccessCache<T>,
        op: F,
    ) -> Result<T, CallError<E>>
    where
        T: Clone,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_cached_with(CallOptions::new(), cache, op).await
    }

    /// [`Policy::call_cached`] with per-call [`CallOptions`].
    ///
    /// ```
    /// use stormguard_std::Duration;
    /// use stormguard_std::{CallOptions, SuccessCache};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), stormguard_std::SettingsError> {
    /// let policy = stormguard_std::Policy::builder("rates").build()?;
    /// let cache = SuccessCache::new(Duration::from_secs(5)).unwrap();
    /// let r = policy
    ///     .call_cached_with(CallOptions::new(), &cache, |_| async { Ok::<_, ()>(3) })
    ///     .await;
    /// assert_eq!(r, Ok(3));
    /// # Ok(()) }
    /// ```
    pub async fn call_cached_with<T, E, F, Fut, C>(
        &self,
        options: CallOptions<'_, C>,
        cache: &SuccessCache<T>,
        mut op: F,
    ) -> Result<T, CallError<E>>
    where
        T: Clone,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
    {
        let state = |now| self.breaker().map_or(State::Closed, |b| b.state_at(now));
        let mut now = self.clock.now();
        if let Some(value) = cache.serve(now, state(now)) {
            self.listener.on_call(&self.name, 0, Ended::Cached);
            return Ok(value);
        }
        // An empty (or expired) entry while the breaker is closed: one caller calls, the
        // others wait for its result. Not while the breaker is not closed: nothing would
        // be served then anyway, and a refusal's pause must not be served in turn.
        let _flight = if cache.rule().serves_in(state(now)) {
            let flight = cache.flight().await;
            now = self.clock.now();
            let s = state(now);
            if let Some(value) = cache.serve(now, s) {
                self.listener.on_call(&self.name, 0, Ended::Cached);
                return Ok(value);
            }
            cache.rule().serves_in(s).then_some(flight)
        } else {
            None
        };
        let mut end = CallEnd::default();
        let result = self
            .run(
                Some(now),
                &options,
                |a: Attempt| Some(op(a.number)),
                Some(&mut end),
            )
            .await;
        match (&result, end.succeeded_at) {
            (Ok(value), Some(at)) => cache.store(at, value.clone()),
            _ if end.finished.is_some_and(|f| cache.rule().clears(f)) => cache.clear(),
            _ => {}
        }
        // The waiters go on (`_flight` is released) once the value is stored.
        result
    }

    /// The call loop: poll the core, do what it says. The call starts at `start`, or at
    /// the first poll when that is `None`. `op` returns `None` when it cannot make the
    /// attempt (a permanent outcome). How the call ended goes to `end` (for the cache).
    pub(crate) fn run<'s, 'o, 'l, T, E, F, Fut, C>(
        &'s self,
        start: Option<Instant>,
        options: &'o CallOptions<'o, C>,
        op: F,
        end: Option<&'o mut CallEnd<'l>>,
    ) -> impl Future<Output = Result<T, CallError<E>>> + use<'s, 'o, 'l, T, E, F, Fut, C, K, L>
    where
        F: FnMut(Attempt) -> Option<Fut>,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
    {
        if self.limiter.is_none()
            && self.bulkhead.is_none()
            && self.adaptive.is_none()
            && self.quota.is_none()
            && self.saturation.is_none()
        {
            // No optional part: the loop over the breaker (or none) and the budget alone, so
            // that a policy without the others pays nothing for them (measured: the
            // composition with them absent costs the plain path a few percent).
            Either::Left(self.drive(start, options, op, end, Self::breaker_parts, false))
        } else {
            Either::Right(self.drive(start, options, op, end, Self::parts, true))
        }
    }

    /// A call refused by a full keyed table before any attempt ([`FullTable`]): the same loop,
    /// over the table's refusal and the policy's budget, so that it is guarded like any other
    /// refusal (the `Rejected` event and the call's report to the listener, the pause capped by
    /// the call's deadline and ended by its cancellation, the `retry_after`).
    pub(crate) fn run_refused<'s, 'o, 'l, T, E, F, Fut, C>(
        &'s self,
        full: FullTable,
        options: &'o CallOptions<'o, C>,
        op: F,
        end: Option<&'o mut CallEnd<'l>>,
    ) -> impl Future<Output = Result<T, CallError<E>>> + use<'s, 'o, 'l, T, E, F, Fut, C, K, L>
    where
        F: FnMut(Attempt) -> Option<Fut>,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
    {
        let parts_of =
            move |policy: &'s Self| -> Parts<FullTable, &'s stormguard_core::SharedBudget> {
                Parts {
                    name: None,
                    breaker: Some(full),
                    budget: policy.budget.as_ref().map(crate::Budget::shared),
                    limiter: None,
                    quota: None,
                    bulkhead: None,
                    adaptive: None,
                    saturation: None,
                }
            };
        self.drive(None, options, op, end, parts_of, false)
    }

    /// The loop proper, over the call's parts `P` (read by `parts_of`: all of the policy's,
    /// or its breaker and budget alone when the caller checked it has no optional part), for a
    /// call that began at `start`.
    ///
    /// The call's span ([`call_span`]) is entered where something may log (the event sink, an
    /// attempt's future under its own span), not wrapped around the loop's future: a span
    /// nobody listens to then costs a branch, and the loop's future is not moved once more.
    // Few, narrow arguments (the options by reference, the parts made here): an async fn
    // moves its arguments into place when first polled, just after the caller wrote them, and
    // wide moves of narrow writes stall the processor.
    async fn drive<'p, 'o, 'l, T, E, F, Fut, C, P, S>(
        &'p self,
        start: Option<Instant>,
        options: &'o CallOptions<'o, C>,
        mut op: F,
        mut end: Option<&'o mut CallEnd<'l>>,
        parts_of: S,
        may_queue: bool,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(Attempt) -> Option<Fut>,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
        P: Gate,
        S: Fn(&'p Self) -> P,
    {
        // A start read elsewhere (from the inner clock) never lies before a reading the
        // policy already handed out.
        let start = match start {
            Some(at) => self.clock.at_least_latest(at),
            None => self.clock.now(),
        };
        let span = call_span(&self.name);
        let mut report = Report::new(&self.listener, &self.name, span.clone(), start);
        let cancel = options.cancel;
        let drain = options.drain.or(self.drain.as_ref());
        let mut now = start;
        // Built where the loop's future keeps it: through a helper that returns it, the
        // call would be built aside and copied in.
        let mut call = Call::begin_salted(self.call_settings(options), start, super::next_salt());
        options.tighten(&mut call, start);
        // A log the caller asked for is kept from the call's events.
        let mut log = end.as_deref_mut().and_then(|end| end.log.take());
        let attempt_events = self.attempt_events(log.is_some());
        call.set_attempt_events(attempt_events);
        // Whether the end of a successful attempt is read from the clock. Nothing reads it
        // when no part times attempts and no listener, log, event or cache entry takes a
        // duration or an instant: the success is then settled at the attempt's start, and a
        // call pays one clock reading, not two.
        let times_success = attempt_events
            || end.is_some()
            || self.times_attempts()
            || self.listener.hears_call_durations();
        // A bulkhead with a bounded wait: the call waits for a slot before its first
        // attempt. The slot it wins is handed straight back and taken again by that attempt,
        // with no `.await` in between.
        if let Some(bulkhead) = self
            .bulkhead
            .as_ref()
            .map(|b| &*b.inner)
            .filter(|b| may_queue && b.waits())
        {
            let deadline = call.deadline();
            let wait = pin!(wait_for_slot(
                bulkhead,
                &self.clock,
                now,
                deadline,
                cancel,
                drain
            ));
            match Cold(wait).await {
                Waited::Entered(permit, at) => {
                    if at > now {
                        report.slot_wait(now, at, true);
                    }
                    bulkhead.slots().leave(permit);
                    now = at;
                }
                // The driver decides: a slot freed since is taken, else the guarded
                // rejection (with no pause if the wait used up the deadline).
                Waited::Refused(at) => {
                    report.slot_wait(now, at, false);
                    now = at;
                }
                Waited::Cancelled => {
                    return report.end(Finished::Cancelled, Err(CallError::Cancelled), now)
                }
            }
        }
        let parts = parts_of(self);
        // The quota the dependency publishes, read from its answers (for the parts' quota).
        let quota = self.quota.as_deref();
        let mut sink = |e: Event<'_>| {
            let _in_call = span.enter();
            self.emit_logged(&e, &mut log);
        };
        let mut last: Option<Result<T, E>> = None;
        let mut succeeded_at = None;
        let finished = loop {
            if let Some(drain) = drain.filter(|d| d.is_draining()) {
                // The core decides what the drain stops; it is told before every step.
                call.on_drain(now, drain.grace());
            }
            match call.poll(&parts, now, &mut sink) {
                Step::Attempt(permit) => {
                    let guard = PermitGuard::new(self, &parts, permit);
                    if cancel.is_some_and(CancellationToken::is_cancelled) {
                        // Cancelled already (before the call, or during an attempt whose
                        // result won the race): nothing more runs. The guard gives the
                        // permit back.
                        drop(guard);
                        call.cancel();
                        break Finished::Cancelled;
                    }
                    let number = call.attempts();
                    report.attempt(number);
                    let attempt = Attempt {
                        number,
                        call_left: call.deadline().map(|d| d.saturating_duration_since(now)),
                    };
                    let hedge = if self.settings.hedging() {
                        // With the win-rate loop, a call that would hedge asks for its share.
                        call.hedge_delay(&parts, now).filter(|_| {
                            self.hedge_share
                                .as_deref()
                                .is_none_or(SharedHedgeShare::on_call)
                        })
                    } else {
                        None
                    };
                    let in_attempt = attempt_span(&span, number, false);
                    let (outcome, answered) = match (in_attempt.in_scope(|| op(attempt)), hedge) {
                        (Some(fut), Some(after)) => {
                            let pair = Pair {
                                call: &mut call,
                                parts: &parts,
                                report: &mut report,
                                last: &mut last,
                                sink: &mut sink,
                                span: &span,
                            };
                            let first = (fut, in_attempt);
                            let hedged =
                                pin!(self.hedged(pair, &mut op, first, guard, after, now, options));
                            let (at, success) = Cold(hedged).await;
                            now = at;
                            succeeded_at = success;
                            continue;
                        }
                        (Some(fut), None) => {
                            let mut fut = pin!(fut);
                            let mut cancelled = pin!(None);
                            let mut timer = pin!(None);
                            // A drain that begins during the attempt lets it run on, within
                            // the deadline the core clamps to the grace.
                            let mut drained =
                                pin!(drain.filter(|_| !call.is_draining()).map(Drain::begun));
                            let ran = loop {
                                let timeout = call
                                    .attempt_deadline()
                                    .map(|d| d.saturating_duration_since(now));
                                let ran = poll_fn(|cx| {
                                    let _in_attempt = in_attempt.enter();
                                    let (c, t) = (cancelled.as_mut(), timer.as_mut());
                                    if let Poll::Ready(ran) =
                                        race(fut.as_mut(), c, t, cancel, timeout, cx)
                                    {
                                        return Poll::Ready(Some(ran));
                                    }
                                    match drained.as_mut().as_pin_mut().map(|d| d.poll(cx)) {
                                        Some(Poll::Ready(())) => Poll::Ready(None),
                                        _ => Poll::Pending,
                                    }
                                })
                                .await;
                                if let Some(ran) = ran {
                                    break ran;
                                }
                                drained.set(None);
                                now = self.clock.now();
                                if let Some(drain) = drain {
                                    call.on_drain(now, drain.grace());
                                }
                                // Re-armed for the clamped attempt deadline.
                                timer.set(None);
                            };
                            let judged =
                                classify(ran, &options.classify, &mut last, quota.is_some());
                            // The attempt's end: read when anything times it, and for a
                            // failure or a probe's success, which are evidence at the time
                            // they ended (a breaker's open mark, a retry's backoff, the
                            // deadline, the breaker closing).
                            if times_success
                                || judged.outcome != Outcome::Success
                                || guard.is_probe()
                            {
                                now = self.clock.now();
                            }
                            judged.publish(quota, now);
                            record_outcome(&in_attempt, judged.outcome.as_str());
                            (judged.outcome, judged.answered)
                        }
                        // The operation cannot be attempted again (a request that cannot
                        // be replayed): a permanent outcome, so the call ends here.
                        (None, _) => (Outcome::Permanent, false),
                    };
                    succeeded_at = (outcome == Outcome::Success).then_some(now);
                    if let Some(permit) = guard.disarm() {
                        call.complete_attempt(&parts, permit, now, outcome, answered, &mut sink);
                        self.wake_bulkhead_waiter();
                    }
                    // A call the outcome ended is read where it is, not polled once more.
                    if let Some(finished) = call.finished() {
                        break finished;
                    }
                }
                Step::Wait(wait) => {
                    // A drain that begins during the wait ends it: the core then stops the
                    // call before its retry.
                    if sleep(wait, cancel, drain).await == Slept::Cancelled {
                        call.cancel();
                        break Finished::Cancelled;
                    }
                    now = self.clock.now();
                }
                Step::Reject(rejection) => {
                    // Announced (the core emitted `Rejected` with this pause), then served;
                    // the next poll hands the rejection out as `Finished::Rejected`.
                    if sleep(rejection.pause, cancel, None).await == Slept::Cancelled {
                        break Finished::Cancelled;
                    }
                    report.served(rejection.pause);
                }
                Step::Done(finished) => break finished,
            }
        };
        let result = finished.into_result(last);
        if let Some(end) = end {
            end.finished = Some(finished);
            if result.is_ok() {
                end.succeeded_at = succeeded_at;
            }
        }
        report.end(finished, result, now)
    }

    /// Runs the attempt just started (`first`, its permit in `guard`) and, if it is still
    /// running `after` its start, a hedge beside it, as the core's hedging protocol says:
    /// the core launches the hedge (or declines), the first success ends the call and the
    /// other attempt is dropped and reported cancelled, a failure waits for the other.
    /// Returns the time the pair ended and, if one succeeded, that time again.
    #[allow(clippy::too_many_arguments)]
    async fn hedged<'r, 'g, T, E, F, Fut, C, P, S>(
        &'r self,
        pair: Pair<'r, 'g, T, E, L, P, S>,
        op: &mut F,
        (first, first_span): (Fut, CallSpan),
        guard: PermitGuard<'r, P>,
        after: Duration,
        mut now: Instant,
        options: &CallOptions<'_, C>,
    ) -> (Instant, Option<Instant>)
    where
        F: FnMut(Attempt) -> Option<Fut>,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
        P: Gate,
        S: FnMut(Event<'_>),
    {
        let Pair {
            call,
            parts,
            report,
            last,
            sink,
            span,
        } = pair;
        // The core's pair says what the one timer is armed for and what each event means.
        let mut pair = HedgedPair::begin(call, now, Some(after));
        let mut fut_a = pin!(Some(first));
        let mut fut_b = pin!(None::<Fut>);
        // Each attempt's span, entered while its future is polled.
        let span_a = first_span;
        let mut span_b = CallSpan::none();
        let mut guard_a = Some(guard);
        let mut guard_b: Option<PermitGuard<'r, P>> = None;
        let mut timer = pin!(None::<tokio::time::Sleep>);
        let mut cancelled = pin!(options.cancel.map(CancellationToken::cancelled));
        // A drain that begins during the pair stops the hedge and clamps both attempts to its
        // grace, as the core's pair says; the attempts in flight run on within it.
        let drain = options.drain.or(self.drain.as_ref());
        let mut drained = pin!(drain.filter(|_| !call.is_draining()).map(Drain::begun));
        let mut succeeded_at = None;
        loop {
            let wake = pair.wake_at();
            timer.set(wake.map(|at| tokio::time::sleep(at.saturating_duration_since(now).into())));
            let event = poll_fn(|cx| {
                if let Some(Poll::Ready(r)) = fut_a
                    .as_mut()
                    .as_pin_mut()
                    .map(|f| span_a.in_scope(|| f.poll(cx)))
                {
                    return Poll::Ready(PairEvent::Ran(Lane::First, Ran::Returned(r)));
                }
                if let Some(Poll::Ready(r)) = fut_b
                    .as_mut()
                    .as_pin_mut()
                    .map(|f| span_b.in_scope(|| f.poll(cx)))
                {
                    return Poll::Ready(PairEvent::Ran(Lane::Hedge, Ran::Returned(r)));
                }
                if let Some(Poll::Ready(())) = cancelled.as_mut().as_pin_mut().map(|c| c.poll(cx)) {
                    return Poll::Ready(PairEvent::Cancelled);
                }
                if let Some(Poll::Ready(())) = timer.as_mut().as_pin_mut().map(|t| t.poll(cx)) {
                    return Poll::Ready(PairEvent::Timer);
                }
                if let Some(Poll::Ready(())) = drained.as_mut().as_pin_mut().map(|d| d.poll(cx)) {
                    return Poll::Ready(PairEvent::Drained);
                }
                Poll::Pending
            })
            .await;
            timer.set(None);
            now = self.clock.now();
            let (lane, ran) = match event {
                PairEvent::Ran(lane, ran) => (lane, ran),
                PairEvent::Drained => {
                    drained.set(None);
                    if let Some(drain) = drain {
                        pair.on_drain(call, now, drain.grace());
                    }
                    continue;
                }
                PairEvent::Timer => match pair.due() {
                    Some(Due::Deadline(lane)) => (lane, Ran::TimedOut),
                    Some(Due::Launch) => {
                        let call_left = call.deadline().map(|d| d.saturating_duration_since(now));
                        // The core grants the hedge first and only then has the future made:
                        // the operation is never invoked for a hedge that does not run, and
                        // one that cannot be repeated gives back what the hedge took.
                        let mut hedge_span = CallSpan::none();
                        let launch = |number| {
                            hedge_span = attempt_span(span, number, true);
                            hedge_span.in_scope(|| op(Attempt { number, call_left }))
                        };
                        if let Some((permit, fut)) =
                            pair.launch(call, parts, now, &mut *sink, launch)
                        {
                            span_b = hedge_span;
                            guard_b = Some(PermitGuard::new(self, parts, permit));
                            report.attempt(call.attempts());
                            fut_b.set(Some(fut));
                        }
                        continue;
                    }
                    None => continue,
                },
                PairEvent::Cancelled => {
                    fut_a.set(None);
                    fut_b.set(None);
                    for (lane, guard) in [(Lane::First, &mut guard_a), (Lane::Hedge, &mut guard_b)]
                    {
                        let permit = guard.take().and_then(PermitGuard::disarm);
                        pair.abandon(call, parts, lane, permit, now, &mut *sink);
                    }
                    return (now, None);
                }
            };
            let (mut mine, mine_guard, mine_span, mut other, other_guard, other_span) = match lane {
                Lane::First => (
                    fut_a.as_mut(),
                    &mut guard_a,
                    &span_a,
                    fut_b.as_mut(),
                    &mut guard_b,
                    &span_b,
                ),
                Lane::Hedge => (
                    fut_b.as_mut(),
                    &mut guard_b,
                    &span_b,
                    fut_a.as_mut(),
                    &mut guard_a,
                    &span_a,
                ),
            };
            let judged = classify(ran, &options.classify, last, self.quota.is_some());
            judged.publish(self.quota.as_deref(), now);
            let Judged {
                outcome, answered, ..
            } = judged;
            record_outcome(mine_span, outcome.as_str());
            mine.set(None);
            if outcome == Outcome::Success {
                succeeded_at = Some(now);
            }
            let permit = mine_guard.take().and_then(PermitGuard::disarm);
            let next = pair.finished(
                call, parts, lane, permit, now, outcome, answered, &mut *sink,
            );
            if next != PairNext::Wait {
                // The pair is over: the hedge, if one ran, won or lost.
                if let (Some(share), Some(won)) = (self.hedge_share.as_deref(), pair.hedge_won()) {
                    share.on_hedge(won);
                }
            }
            match next {
                // A failure: the other attempt goes on and decides.
                PairNext::Wait => {}
                PairNext::Over => return (now, succeeded_at),
                PairNext::Drop(other_lane) => {
                    // The winner (or a permanent failure) ends the call: the other attempt is
                    // dropped, which cancels it, and reported so.
                    if other.is_some() {
                        record_outcome(other_span, "dropped");
                    }
                    other.set(None);
                    let permit = other_guard.take().and_then(PermitGuard::disarm);
                    pair.abandon(call, parts, other_lane, permit, now, &mut *sink);
                    return (now, succeeded_at);
                }
            }
        }
    }
}

/// What a hedged pair of attempts works on, borrowed from the call loop.
struct Pair<'r, 'g, T, E, L: Listener, P, S> {
    call: &'r mut Call,
    parts: &'r P,
    report: &'r mut Report<'g, L>,
    last: &'r mut Option<Result<T, E>>,
    /// The call's event sink (tracing, the listener, the attempt log).
    sink: &'r mut S,
    /// The call's span, the parent of each attempt's.
    span: &'r CallSpan,
}

/// Polls a future the common path does not take (the hedged pair, the bulkhead's wait)
/// out of line, so its code does not weigh on the inlining of the call's own loop.
struct Cold<'a, F>(Pin<&'a mut F>);

impl<F: Future> Future for Cold<'_, F> {
    type Output = F::Output;

    #[inline(never)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.0.as_mut().poll(cx)
    }
}

/// What ended a wait of the hedged pair.
enum PairEvent<R> {
    Ran(Lane, Ran<R>),
    /// The timer armed for the pair's [`HedgedPair::wake_at`].
    Timer,
    Cancelled,
    /// A drain began.
    Drained,
}

/// What an attempt's race came to.
struct Judged {
    outcome: Outcome,
    /// Whether the dependency answered (the operation returned `Ok`).
    answered: bool,
    /// What the dependency published with its answer, read by the classifier when the policy
    /// keeps a quota.
    published: Option<Published>,
}

impl Judged {
    /// Tells `quota` what the answer published, at `now`: the instant the attempt ended.
    #[inline]
    fn publish(&self, quota: Option<&SharedQuota>, now: Instant) {
        if let (Some(quota), Some(published)) = (quota, self.published) {
            quota.on_published(now, published);
        }
    }
}

/// The outcome of an attempt's race; a returned result becomes the call's last result. What
/// it published is read only for a policy that keeps a quota (`reads_quota`).
#[inline]
fn classify<T, E, C: Classify<T, E>>(
    ran: Ran<Result<T, E>>,
    classifier: &C,
    last: &mut Option<Result<T, E>>,
    reads_quota: bool,
) -> Judged {
    match ran {
        Ran::Returned(result) => {
            let judged = Judged {
                outcome: classifier.classify(&result),
                answered: result.is_ok(),
                published: reads_quota.then(|| classifier.published(&result)),
            };
            *last = Some(result);
            judged
        }
        Ran::Cancelled => Judged {
            outcome: Outcome::Cancelled,
            answered: false,
            published: None,
        },
        Ran::TimedOut => Judged {
            outcome: Outcome::TimedOut,
            answered: false,
            published: None,
        },
    }
}

/// How a wait for a bulkhead slot ended.
enum Waited {
    /// A slot, won at this instant.
    Entered(BulkheadPermit, Instant),
    /// No slot (queue full, or the wait is over), at this instant.
    Refused(Instant),
    Cancelled,
}

/// A place in a bulkhead's queue, given up if the wait is abandoned (the call's future
/// dropped, or cancelled).
struct Queued<'a> {
    bulkhead: &'a BulkheadShared,
    ticket: Option<BulkheadTicket>,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.bulkhead.slots().abandon(ticket);
        }
    }
}

/// Enters `bulkhead` at `now`, or waits in its queue for a slot, as the core decides
/// (`try_enter_or_queue`, then `on_slot_free` at every wake-up and when the wait is over),
/// for at most the bulkhead's `max_wait` and the time left to `deadline`. Woken by a freed
/// slot; cancelled at once by `cancel` or by dropping the future.
async fn wait_for_slot<K: Clock>(
    bulkhead: &BulkheadShared,
    clock: &K,
    mut now: Instant,
    deadline: Option<Instant>,
    cancel: Option<&CancellationToken>,
    drain: Option<&Drain>,
) -> Waited {
    // Draining: no new attempt starts, so there is no slot to wait for (the driver, told of
    // the drain, ends the call).
    if drain.is_some_and(Drain::is_draining) {
        return Waited::Refused(now);
    }
    let max_wait = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
    // Registered before joining the queue, so a slot freed in between wakes this caller.
    let mut woken = pin!(bulkhead.freed().notified());
    woken.as_mut().enable();
    let ticket = match bulkhead.slots().try_enter_or_queue(now, max_wait) {
        Ok(BulkheadEntry::Entered(permit)) => return Waited::Entered(permit, now),
        Ok(BulkheadEntry::Queued(ticket)) => ticket,
        Err(_) => return Waited::Refused(now),
    };
    let mut queued = Queued {
        bulkhead,
        ticket: Some(ticket),
    };
    let mut cancelled = pin!(cancel.map(CancellationToken::cancelled));
    let mut drained = pin!(drain.map(Drain::begun));
    loop {
        let Some(until) = queued.ticket.as_ref().map(BulkheadTicket::wait_until) else {
            return Waited::Refused(now);
        };
        let mut timer = pin!(tokio::time::sleep(
            until.saturating_duration_since(now).into()
        ));
        let woke = poll_fn(|cx| {
            if let Some(Poll::Ready(())) = cancelled.as_mut().as_pin_mut().map(|c| c.poll(cx)) {
                return Poll::Ready(Slept::Cancelled);
            }
            if let Some(Poll::Ready(())) = drained.as_mut().as_pin_mut().map(|d| d.poll(cx)) {
                return Poll::Ready(Slept::Drained);
            }
            if woken.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Slept::Elapsed);
            }
            timer.as_mut().poll(cx).map(|()| Slept::Elapsed)
        })
        .await;
        match woke {
            Slept::Cancelled => return Waited::Cancelled, // `queued` leaves the queue
            // The drain began: the wait ends at once and the queue place is given up.
            Slept::Drained => return Waited::Refused(clock.now()),
            Slept::Elapsed => {}
        }
        now = clock.now();
        woken.set(bulkhead.freed().notified());
        woken.as_mut().enable();
        let Some(ticket) = queued.ticket.take() else {
            return Waited::Refused(now);
        };
        match bulkhead.slots().on_slot_free(now, ticket) {
            Ok(BulkheadEntry::Entered(permit)) => return Waited::Entered(permit, now),
            Ok(BulkheadEntry::Queued(ticket)) => queued.ticket = Some(ticket),
            Err(_) => return Waited::Refused(now),
        }
    }
}
