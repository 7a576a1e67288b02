//! Events: every core event goes to `tracing` and to the policy's [`Listener`].
//!
//! The core hands its events to a sink; a policy forwards each one to [`trace`] (target
//! `stormguard`, the breaker's name in the `breaker` field) and to its listener. Levels:
//!
//! | event | level | why |
//! |---|---|---|
//! | `StateChanged` to open or isolated | WARN | a dependency is being cut off: someone should look |
//! | `StateChanged` to anything else | INFO | recovery steps, rare and worth a line |
//! | `ProbesReclaimed` | INFO | probes lost without an outcome: callers are abandoning attempts |
//! | `Rejected`, `Retry`, `ProbeStarted`, `RampStep`, `Hedged` | DEBUG | per call: a polling loop refused 10 times a second must not flood the logs |
//! | `Rejected`, summarised | WARN | at most once per [`REJECTION_WARN_EVERY`] (30 s) per breaker, with the count of the rejections since the last such line: an outage is visible at WARN without flooding it |
//! | `Attempt` | TRACE | one per attempt, success included: the attempt log's lines |
//!
//! The success path's one event is the attempt's end, and a call builds it only when something
//! takes it: a listener that [hears attempts](Listener::hears_attempts), TRACE on for the
//! target, or an attempt log asked for. Otherwise the success path emits nothing.
//!
//! Spans (feature `spans`), at DEBUG on the same target, so that a call's events read in
//! context:
//!
//! | span | fields | inside |
//! |---|---|---|
//! | `call` | `breaker`; once over, `attempts` and `ended` (as [`Ended::as_str`] names it) | the caller's span (the tower layer's `request`) |
//! | `attempt` | `attempt` (1 for the first), `hedge`; once over, `outcome` (as [`Outcome::as_str`](stormguard_core::Outcome::as_str) names it, `dropped` for the loser of a hedged pair) | its `call` |
//! | `request` | `method`, `url` (scheme, host, port and path: no user information or query, which may carry credentials) | the caller's span |
//!
//! Below DEBUG none is made. Without the feature nothing of them is built in: compiled in,
//! they cost a call a few nanoseconds even when no subscriber wants them (see the README).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use stormguard_core::{
    CallError, Duration, Event, Finished, Instant, Name, Outcome, RefusalReason, State,
};

use crate::clock::Clock;

/// How one call ended, as reported to [`Listener::on_call`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Ended {
    /// The last attempt succeeded, as the classifier judged it (a cached value is
    /// [`Ended::Cached`]).
    Succeeded,
    /// The dependency's failure stands, as the classifier judged it: the operation's error, or a
    /// response it called a failure (an HTTP 500 handed back as the response it is).
    Failed,
    /// The last attempt hit its attempt timeout.
    TimedOut,
    /// Refused locally, after the guarded pause (a fallback may have replaced it).
    Rejected(RefusalReason),
    /// The deadline passed.
    DeadlineExceeded,
    /// The caller cancelled (a token, or dropped the call's future).
    Cancelled,
    /// Served from the success cache without calling.
    Cached,
    /// A drain (the service shutting down) stopped the call before another attempt or retry.
    Drained,
}

impl<E> From<&CallError<E>> for Ended {
    /// How a call that returned this error ended.
    ///
    /// ```
    /// use stormguard_std::CallError;
    /// use stormguard_std::events::Ended;
    /// assert_eq!(Ended::from(&CallError::<()>::Cancelled), Ended::Cancelled);
    /// ```
    fn from(e: &CallError<E>) -> Ended {
        match e {
            CallError::Failed(_) => Ended::Failed,
            CallError::TimedOut { .. } => Ended::TimedOut,
            CallError::Rejected { rejection, .. } => Ended::Rejected(rejection.reason),
            CallError::DeadlineExceeded { .. } => Ended::DeadlineExceeded,
            CallError::Cancelled => Ended::Cancelled,
            CallError::Drained { .. } => Ended::Drained,
            // `CallError` is non-exhaustive: an ending added later reads as a failure until it
            // has a name here.
            _ => Ended::Failed,
        }
    }
}

impl From<Finished> for Ended {
    /// How a call that the core says `finished` so ended. The classifier decides, not the
    /// `Result` the caller receives: a response it called a failure (an HTTP 500 handed back
    /// after the last attempt, or after a refused retry) is a failed call, and an `Err` it
    /// called a success a succeeded one.
    ///
    /// ```
    /// use stormguard_std::{Finished, Outcome};
    /// use stormguard_std::events::Ended;
    /// assert_eq!(Ended::from(Finished::Failed(Outcome::Transient)), Ended::Failed);
    /// assert_eq!(Ended::from(Finished::Failed(Outcome::TimedOut)), Ended::TimedOut);
    /// ```
    fn from(finished: Finished) -> Ended {
        match finished {
            Finished::Succeeded => Ended::Succeeded,
            Finished::Failed(Outcome::TimedOut) => Ended::TimedOut,
            Finished::Failed(_) => Ended::Failed,
            Finished::DeadlineExceeded { .. } => Ended::DeadlineExceeded,
            Finished::Rejected(rejection) => Ended::Rejected(rejection.reason),
            Finished::Cancelled => Ended::Cancelled,
            Finished::Drained { .. } => Ended::Drained,
        }
    }
}

impl Ended {
    /// A stable, lower-case name for logs and metrics labels.
    ///
    /// ```
    /// assert_eq!(stormguard_std::events::Ended::DeadlineExceeded.as_str(), "deadline_exceeded");
    /// ```
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Ended::Succeeded => "succeeded",
            Ended::Failed => "failed",
            Ended::TimedOut => "timed_out",
            Ended::Rejected(_) => "rejected",
            Ended::DeadlineExceeded => "deadline_exceeded",
            Ended::Cancelled => "cancelled",
            Ended::Cached => "cached",
            Ended::Drained => "drained",
        }
    }
}

/// Receives a policy's events and call reports. Every method has an empty default, so a
/// listener implements what it needs; a closure `Fn(&Event<'_>)` is a listener of events.
/// [`Metrics`](crate::Metrics) is one; [`Both`] runs two.
///
/// Called synchronously on the calling task: keep it cheap and never block.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use stormguard_std::Event;
/// use stormguard_std::events::Ended;
/// use stormguard_std::Listener;
///
/// #[derive(Default)]
/// struct Opens(AtomicU32);
///
/// impl Listener for Opens {
///     fn on_event(&self, event: &Event<'_>) {
///         if let Event::StateChanged { to: stormguard_std::State::Open, .. } = event {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
/// let opens = Opens::default();
/// opens.on_call(&stormguard_std::Name::new("db"), 1, Ended::Succeeded); // default: nothing
/// ```
pub trait Listener {
    /// A core event, delivered as it happens (a `Rejected` event before its pause is served).
    fn on_event(&self, event: &Event<'_>) {
        let _ = event;
    }

    /// Whether this listener takes [`Event::Attempt`] events (one per attempt, successes
    /// included): `true` unless it says otherwise. A listener that does not is never sent
    /// them, and a policy whose listener does not, with `tracing`'s TRACE level off, has its
    /// calls skip building them (unless a call asks for its attempt log).
    fn hears_attempts(&self) -> bool {
        true
    }

    /// An attempt is starting (`attempt` is 1 for the first).
    fn on_attempt(&self, name: &Name, attempt: u32) {
        let _ = (name, attempt);
    }

    /// A call ended after `attempts` attempts. Reported once per call, also when the call's
    /// future was dropped (as [`Ended::Cancelled`]).
    fn on_call(&self, name: &Name, attempts: u32, ended: Ended) {
        let _ = (name, attempts, ended);
    }

    /// A call that ran to its end took `took`, from its start to its last clock reading plus
    /// any rejection pause it served (read from the policy's clock: paused time in tests).
    /// Told just before [`on_call`](Listener::on_call), for every call but a dropped one
    /// (whose end no clock saw) and a cached answer (which ran nothing).
    fn on_call_duration(&self, name: &Name, ended: Ended, took: Duration) {
        let _ = (name, ended, took);
    }

    /// Whether this listener takes [`on_call_duration`](Listener::on_call_duration): `true`
    /// unless it says otherwise. A policy none of whose parts time an attempt (a breaker
    /// without statistics, no adaptive limit, quota, saturation probe or hedging), whose
    /// listener takes neither durations nor attempt events, skips the clock reading at the end
    /// of an attempt that succeeds, and settles it at the attempt's start.
    fn hears_call_durations(&self) -> bool {
        true
    }

    /// A call waited `waited` for a slot of its policy's bulkhead (one with a bounded wait)
    /// before its first attempt, and `entered` it, or was refused (its wait or its deadline
    /// ran out, a drain began; a refusal at once, with the queue full, is told as a wait of
    /// zero). Not told when the call found a slot free at once or was cancelled.
    fn on_slot_wait(&self, name: &Name, waited: Duration, entered: bool) {
        let _ = (name, waited, entered);
    }

    /// The runtime a [`SaturationProbe`](crate::saturation::SaturationProbe) watches is saturated: told
    /// once per episode, to the listener the probe was spawned with.
    fn on_saturation(&self, detected: &stormguard_core::limits::saturation::SaturationDetected) {
        let _ = detected;
    }
}

/// No listener: events still go to `tracing`.
///
/// ```
/// use stormguard_std::{Listener, NoListener};
/// NoListener.on_attempt(&stormguard_std::Name::new("db"), 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoListener;

impl Listener for NoListener {
    fn hears_attempts(&self) -> bool {
        false
    }
    fn hears_call_durations(&self) -> bool {
        false
    }
}

impl<F: Fn(&Event<'_>)> Listener for F {
    fn on_event(&self, event: &Event<'_>) {
        self(event);
    }
    fn hears_call_durations(&self) -> bool {
        false
    }
}

/// Two listeners, both told everything (first `.0`, then `.1`).
///
/// ```
/// use stormguard_std::{Both, Listener, Metrics};
/// let metrics = Metrics::new("db");
/// let both = Both(metrics.clone(), |e: &stormguard_std::Event<'_>| println!("{}", e.kind()));
/// both.on_attempt(&stormguard_std::Name::new("db"), 1);
/// assert_eq!(metrics.snapshot().attempts, 1);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Both<A, B>(pub A, pub B);

impl<A: Listener, B: Listener> Listener for Both<A, B> {
    fn on_event(&self, event: &Event<'_>) {
        let attempt = matches!(event, Event::Attempt { .. });
        if !attempt || self.0.hears_attempts() {
            self.0.on_event(event);
        }
        if !attempt || self.1.hears_attempts() {
            self.1.on_event(event);
        }
    }
    fn hears_attempts(&self) -> bool {
        self.0.hears_attempts() || self.1.hears_attempts()
    }
    fn hears_call_durations(&self) -> bool {
        self.0.hears_call_durations() || self.1.hears_call_durations()
    }
    fn on_attempt(&self, name: &Name, attempt: u32) {
        self.0.on_attempt(name, attempt);
        self.1.on_attempt(name, attempt);
    }
    fn on_call(&self, name: &Name, attempts: u32, ended: Ended) {
        self.0.on_call(name, attempts, ended);
        self.1.on_call(name, attempts, ended);
    }
    fn on_call_duration(&self, name: &Name, ended: Ended, took: Duration) {
        self.0.on_call_duration(name, ended, took);
        self.1.on_call_duration(name, ended, took);
    }
    fn on_slot_wait(&self, name: &Name, waited: Duration, entered: bool) {
        self.0.on_slot_wait(name, waited, entered);
        self.1.on_slot_wait(name, waited, entered);
    }
    fn on_saturation(&self, detected: &stormguard_core::limits::saturation::SaturationDetected) {
        self.0.on_saturation(detected);
        self.1.on_saturation(detected);
    }
}

/// Logs one core event with `tracing` (target `stormguard`, levels as in the module docs).
///
/// ```
/// use stormguard_std::{Duration, Event, Name, RefusalReason};
/// let name = Name::new("payments");
/// stormguard_std::events::trace(&Event::Rejected {
///     name: &name,
///     reason: RefusalReason::BreakerOpen,
///     delay: Duration::from_millis(100),
///     retry_after: Duration::from_secs(14),
/// });
/// ```
pub fn trace(event: &Event<'_>) {
    let breaker = event.name().as_str();
    match *event {
        Event::StateChanged {
            from,
            to: to @ (State::Open | State::Isolated),
            reason,
            break_for,
            ..
        } => tracing::warn!(
            target: "stormguard",
            breaker,
            from = from.as_str(),
            to = to.as_str(),
            reason = reason.map(|r| r.as_str()),
            break_ms = break_for.map(|d| d.as_millis()),
            "breaker opened"
        ),
        Event::StateChanged {
            from,
            to,
            reason,
            break_for,
            ..
        } => tracing::info!(
            target: "stormguard",
            breaker,
            from = from.as_str(),
            to = to.as_str(),
            reason = reason.map(|r| r.as_str()),
            break_ms = break_for.map(|d| d.as_millis()),
            "breaker state changed"
        ),
        Event::ProbesReclaimed { count, .. } => tracing::info!(
            target: "stormguard",
            breaker,
            count,
            "half-open probes reclaimed without an outcome"
        ),
        Event::Rejected {
            reason,
            delay,
            retry_after,
            ..
        } => {
            tracing::debug!(
                target: "stormguard",
                breaker,
                reason = reason.as_str(),
                pause_ms = delay.as_millis(),
                retry_after_ms = retry_after.as_millis(),
                "call rejected"
            );
            if let Some(earlier) = rejection_warning_due(breaker, warning_clock_now()) {
                tracing::warn!(
                    target: "stormguard",
                    breaker,
                    reason = reason.as_str(),
                    retry_after_ms = retry_after.as_millis(),
                    earlier,
                    "calls rejected ({earlier} more since the last warning)"
                );
            }
        }
        Event::Retry {
            attempt,
            delay,
            after,
            ..
        } => tracing::debug!(
            target: "stormguard",
            breaker,
            attempt,
            delay_ms = delay.as_millis(),
            after = ?after,
            "retrying"
        ),
        Event::ProbeStarted { .. } => {
            tracing::debug!(target: "stormguard", breaker, "half-open probe started");
        }
        Event::Hedged { attempt, .. } => tracing::debug!(
            target: "stormguard",
            breaker,
            attempt,
            "hedged: a second attempt launched beside a slow one"
        ),
        Event::NestedRetry { attempt, .. } => tracing::debug!(
            target: "stormguard",
            breaker,
            attempt,
            "received a caller's retry"
        ),
        Event::Drained { attempts, .. } => tracing::debug!(
            target: "stormguard",
            breaker,
            attempts,
            "call stopped: draining"
        ),
        Event::Restarted {
            restart,
            delay,
            after,
            ..
        } => tracing::debug!(
            target: "stormguard",
            breaker,
            restart,
            delay_ms = delay.as_millis(),
            after = after.as_str(),
            "stream lost: restarting from its checkpoint"
        ),
        Event::Attempt { attempt, end, .. } => tracing::trace!(
            target: "stormguard",
            breaker,
            attempt,
            self_imposed = end.is_self_imposed(),
            "attempt ended: {end}"
        ),
        Event::RampStep { fraction, cap, .. } => tracing::debug!(
            target: "stormguard",
            breaker,
            fraction = fraction.as_f64(),
            cap = cap.as_f64(),
            "recovery ramp step"
        ),
        _ => tracing::debug!(target: "stormguard", breaker, kind = event.kind(), "event"),
    }
}

/// A call's or an attempt's span: a `tracing::Span` with feature `spans`; without it, a
/// placeholder that holds nothing, so that a build without spans pays nothing for them (a
/// span nobody listens to still cost the call loop a few nanoseconds: see the README).
#[cfg(feature = "spans")]
pub(crate) type CallSpan = tracing::Span;
/// A call's or an attempt's span: a placeholder that holds nothing (feature `spans` off).
#[cfg(not(feature = "spans"))]
pub(crate) type CallSpan = NoSpan;

/// The span of a build without feature `spans`: nothing to enter or record.
// Clone, not Copy: it stands in for `tracing::Span`, which the call loop clones.
#[cfg(not(feature = "spans"))]
#[derive(Clone, Debug, Default)]
pub(crate) struct NoSpan;

/// What entering a [`NoSpan`] gives: nothing to leave.
#[cfg(not(feature = "spans"))]
#[derive(Debug)]
pub(crate) struct NotEntered;

#[cfg(not(feature = "spans"))]
impl NoSpan {
    // Only the async loop's hedged pair starts from no span.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) const fn none() -> NoSpan {
        NoSpan
    }
    #[inline]
    pub(crate) fn enter(&self) -> NotEntered {
        NotEntered
    }
    #[inline]
    pub(crate) fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        f()
    }
}

#[cfg(not(feature = "spans"))]
#[inline]
pub(crate) fn call_span(_: &Name) -> CallSpan {
    NoSpan
}

#[cfg(not(feature = "spans"))]
#[inline]
pub(crate) fn attempt_span(_: &CallSpan, _: u32, _: bool) -> CallSpan {
    NoSpan
}

#[cfg(not(feature = "spans"))]
#[inline]
pub(crate) fn record_outcome(_: &CallSpan, _: &str) {}

#[cfg(not(feature = "spans"))]
#[inline]
pub(crate) fn record_end(_: &CallSpan, _: u32, _: Ended) {}

/// Whether spans are wanted at all: DEBUG on for some subscriber (one load). Checked first,
/// so that a call nobody traces runs none of the span machinery, which stays out of line.
#[cfg(feature = "spans")]
#[inline]
fn spans_on() -> bool {
    tracing::Level::DEBUG <= tracing::level_filters::STATIC_MAX_LEVEL
        && tracing::Level::DEBUG <= tracing::level_filters::LevelFilter::current()
}

/// The span a call runs in: DEBUG, target `stormguard`, name `call`, with the breaker's name
/// (`breaker`) and, once the call is over, the attempts it made (`attempts`) and how it ended
/// (`ended`, as [`Ended::as_str`] names it). Its attempts' spans ([`attempt_span`]) and the
/// events above are inside it. A span that records nothing unless DEBUG is on for the target.
#[cfg(feature = "spans")]
#[inline]
pub(crate) fn call_span(name: &Name) -> CallSpan {
    if spans_on() {
        new_call_span(name)
    } else {
        tracing::Span::none()
    }
}

#[cfg(feature = "spans")]
#[cold]
#[inline(never)]
fn new_call_span(name: &Name) -> CallSpan {
    tracing::debug_span!(
        target: "stormguard",
        "call",
        breaker = name.as_str(),
        attempts = tracing::field::Empty,
        ended = tracing::field::Empty,
    )
}

/// The span one attempt runs in, inside its call's: DEBUG, target `stormguard`, name
/// `attempt`, with its number (`attempt`, 1 for the first), whether it is a hedge (`hedge`),
/// and once it has ended its outcome (`outcome`, as [`Outcome::as_str`] names it; `dropped`
/// for an attempt a hedged pair's other attempt made moot).
#[cfg(feature = "spans")]
#[inline]
pub(crate) fn attempt_span(call: &CallSpan, attempt: u32, hedge: bool) -> CallSpan {
    if spans_on() {
        new_attempt_span(call, attempt, hedge)
    } else {
        tracing::Span::none()
    }
}

#[cfg(feature = "spans")]
#[cold]
#[inline(never)]
fn new_attempt_span(call: &CallSpan, attempt: u32, hedge: bool) -> CallSpan {
    tracing::debug_span!(
        target: "stormguard",
        parent: call,
        "attempt",
        attempt,
        hedge,
        outcome = tracing::field::Empty,
    )
}

/// Records an attempt's outcome on its span ([`attempt_span`]).
#[cfg(feature = "spans")]
#[inline]
pub(crate) fn record_outcome(span: &CallSpan, outcome: &str) {
    if !span.is_disabled() {
        span_outcome(span, outcome);
    }
}

/// Records how a call ended on its span ([`call_span`]).
#[cfg(feature = "spans")]
#[inline]
pub(crate) fn record_end(span: &CallSpan, attempts: u32, ended: Ended) {
    if !span.is_disabled() {
        span_end(span, attempts, ended);
    }
}

#[cfg(feature = "spans")]
#[cold]
#[inline(never)]
fn span_outcome(span: &CallSpan, outcome: &str) {
    span.record("outcome", outcome);
}

#[cfg(feature = "spans")]
#[cold]
#[inline(never)]
fn span_end(span: &CallSpan, attempts: u32, ended: Ended) {
    span.record("attempts", attempts);
    span.record("ended", ended.as_str());
}

/// Whether `tracing` takes attempt events now (TRACE on for the `stormguard` target).
#[inline]
pub(crate) fn traces_attempts() -> bool {
    tracing::enabled!(target: "stormguard", tracing::Level::TRACE)
}

/// The least time between two WARN lines summarising one breaker's rejections.
pub const REJECTION_WARN_EVERY: Duration = Duration::from_secs(30);

/// Where one breaker's rejection warnings stand: when the next warning may be written (ns on
/// the default clock) and the rejections held back since the last.
struct WarnSlot {
    next_at: AtomicU64,
    held: AtomicU64,
}

/// Slots, by a hash of the breaker's name: breakers whose names share a slot share its pace
/// (a rare collision costs a warning, never a flood).
static WARN_SLOTS: [WarnSlot; 256] = [const {
    WarnSlot {
        next_at: AtomicU64::new(0),
        held: AtomicU64::new(0),
    }
}; 256];

/// The time the rejection warnings are spaced by: tokio's clock, which follows paused time
/// wherever it is paused and is the OS clock elsewhere, without the [`DefaultClock`]'s
/// per-construction check for paused time (three clock reads), which every rejection would
/// otherwise pay; the OS clock without the `tokio` feature.
///
/// [`DefaultClock`]: crate::DefaultClock
fn warning_clock_now() -> Instant {
    #[cfg(feature = "tokio")]
    return crate::clock::TokioClock::global().now();
    #[cfg(not(feature = "tokio"))]
    crate::clock::MonotonicClock::global().now()
}

/// Whether a rejection by `breaker` at `now` gets a WARN line: `Some(n)`, with `n` the
/// rejections held back since the last one, at most once per [`REJECTION_WARN_EVERY`].
fn rejection_warning_due(breaker: &str, now: Instant) -> Option<u64> {
    let mut h = DefaultHasher::new();
    breaker.hash(&mut h);
    let slot = WARN_SLOTS.get((h.finish() % 256) as usize)?;
    let now = now.as_nanos();
    let next = slot.next_at.load(Ordering::Acquire);
    let then = now.saturating_add(REJECTION_WARN_EVERY.as_nanos());
    if now >= next
        && slot
            .next_at
            .compare_exchange(next, then, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        Some(slot.held.swap(0, Ordering::AcqRel))
    } else {
        slot.held.fetch_add(1, Ordering::AcqRel);
        None
    }
}

/// Sends `event` to `tracing` and to `listener`.
pub(crate) fn emit<L: Listener>(listener: &L, event: &Event<'_>) {
    if let Event::Attempt { .. } = event {
        // One per attempt, successes included, and made for a log as well: each taker is
        // asked first (`tracing` at its level check, rather than after `trace`'s dispatch).
        if traces_attempts() {
            trace(event);
        }
        if listener.hears_attempts() {
            listener.on_event(event);
        }
        return;
    }
    trace(event);
    listener.on_event(event);
}
