//! The call driver: one call's deadline, attempts, backoff waits, budget and breaker, as a small
//! state machine that reads no clock, so the adapters stay thin loops.
//!
//! ```
//! use stormguard_core::{
//!     Breaker, Budget, BudgetSettings, Call, CallSettings, Finished, Instant, Duration, Outcome,
//!     Parts, Step,
//! };
//!
//! let parts = Parts::new().breaker(Breaker::of(5, "payments")?).budget(Budget::new(BudgetSettings::defaults("payments")));
//! let mut now = Instant::from_secs(1);
//! let mut call = Call::begin(&CallSettings::DEFAULT, now);
//! let mut failures_left = 1; // the dependency fails once, then answers
//! let result = loop {
//!     match call.poll(&parts, now, &mut |_event| {}) {
//!         Step::Attempt(permit) => {
//!             now += Duration::from_millis(20); // run the operation
//!             let out = if failures_left > 0 { failures_left -= 1; Outcome::Transient } else { Outcome::Success };
//!             call.complete(&parts, permit, now, out, &mut |_event| {});
//!         }
//!         Step::Wait(d) => now += d,                          // sleep (cancellably)
//!         Step::Reject(r) => { now += r.pause; break Err(r) } // serve the guarded pause
//!         Step::Done(finished) => break Ok(finished),
//!     }
//! };
//! assert_eq!(result, Ok(Finished::Succeeded));
//! assert_eq!(call.attempts(), 2);
//! # Ok::<(), stormguard_core::SettingsError>(())
//! ```

pub(crate) mod backoff;
pub(crate) mod classify;
pub(crate) mod criticality;
pub(crate) mod error;
pub(crate) mod hedge;
pub(crate) mod log;
pub(crate) mod parts;
pub(crate) mod stream;

pub use self::backoff::{Backoff, BackoffBuilder, Jitter};
pub use self::classify::{Classify, EveryErrorTransient};
pub use self::criticality::Criticality;
pub use self::error::CallError;
pub use self::hedge::{Due, HedgedPair, Lane, PairNext};
pub use self::hedge::{HedgeShare, SharedHedgeShare};
pub use self::log::{AttemptLog, AttemptRecord};
pub use self::parts::{Gate, Parts};
pub use self::stream::{Lost, StreamRestarts, StreamSettings, StreamSettingsBuilder};

use core::fmt;

use crate::error::{Bound, Field, Problems, RefusalReason, Refused, SettingsError};
use crate::event::{AttemptEnd, Event};
use crate::outcome::Outcome;
use crate::part::{HedgeSuppressed, Learned, Permit};
use crate::rng::JitterRng;
use crate::time::{Duration, Instant};

/// The guarded-rejection pause: a refusal is reported only after this long (capped by the
/// caller's remaining deadline), so a polling loop against an open breaker cannot spin. A
/// constant, not a setting: it is a floor under the rate of a rejection loop, not a tunable.
pub const GUARD_PAUSE: Duration = Duration::from_millis(100);

/// How long calls in progress may still take once a drain begins ([`Call::on_drain`]), by
/// default: a call's deadline is clamped to the drain's start plus this grace. 30 s is the
/// default deadline of a call, and the usual termination grace period of a container
/// orchestrator: a call begun just before a drain may finish the attempt it runs, and no
/// process is killed in the middle of one it was allowed to keep.
pub const DRAIN_GRACE: Duration = Duration::from_secs(30);

/// The pause a refusal is served after: [`GUARD_PAUSE`], capped by the time `left` before the
/// caller's deadline (if it has one). The call driver applies it to every refusal; an adapter
/// that refuses outside the driver (a full keyed table) applies the same rule.
///
/// ```
/// use stormguard_core::{call::guarded_pause, Duration, GUARD_PAUSE};
/// assert_eq!(guarded_pause(None), GUARD_PAUSE);
/// assert_eq!(guarded_pause(Some(Duration::from_millis(40))), Duration::from_millis(40));
/// ```
#[must_use]
pub const fn guarded_pause(left: Option<Duration>) -> Duration {
    match left {
        Some(left) => GUARD_PAUSE.min(left),
        None => GUARD_PAUSE,
    }
}

/// How a call retries and how long it may take. Defaults: 3 attempts, a 30 s deadline, a 10 s
/// attempt timeout tightened by the breaker's measured ceiling (3x the recent p95),
/// [`Backoff::DEFAULT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CallSettings {
    max_attempts: u32,
    deadline: Option<Duration>,
    attempt_timeout: Option<Duration>,
    measured_ceiling: bool,
    ceiling_floor: Duration,
    hedging: bool,
    backoff: Backoff,
    seed: u64,
}

/// The default floor under the measured attempt ceiling: 3x the p95 of an operation that takes a
/// microsecond is a few microseconds, which one preemption of the calling thread (or one
/// interrupt on a microcontroller) would exceed, timing out healthy attempts.
pub const CEILING_FLOOR: Duration = Duration::from_millis(50);

/// The least floor [`CallSettingsBuilder::ceiling_floor`] takes.
const MIN_CEILING_FLOOR: Duration = Duration::from_millis(1);

impl CallSettings {
    /// 3 attempts (2 retries), a 30 s deadline per call, a 10 s timeout per attempt, exponential
    /// backoff from 100 ms with full jitter.
    pub const DEFAULT: CallSettings = CallSettings {
        max_attempts: 3,
        deadline: Some(Duration::from_secs(30)),
        attempt_timeout: Some(Duration::from_secs(10)),
        measured_ceiling: true,
        ceiling_floor: CEILING_FLOOR,
        hedging: false,
        backoff: Backoff::DEFAULT,
        seed: 0,
    };

    /// Document 004's worker retry: waits of 1, 2, 4, 8, 16, 32, then 60 s (no jitter), for up
    /// to 10 attempts, with no overall deadline (a failing message blocks its stream, so the
    /// cap is low rather than the count) and the default 10 s attempt timeout.
    #[must_use]
    pub const fn worker() -> CallSettings {
        CallSettings {
            max_attempts: 10,
            deadline: None,
            attempt_timeout: Some(Duration::from_secs(10)),
            measured_ceiling: true,
            ceiling_floor: CEILING_FLOOR,
            hedging: false,
            backoff: Backoff::worker(),
            seed: 0,
        }
    }

    /// A builder starting from these settings (to derive a variant, e.g. a single attempt for a
    /// request that cannot be replayed).
    pub const fn to_builder(self) -> CallSettingsBuilder {
        CallSettingsBuilder { inner: self }
    }

    /// The seed the backoff jitter is drawn from (mixed with each call's start time).
    #[must_use]
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// A builder starting from [`CallSettings::DEFAULT`].
    pub const fn builder() -> CallSettingsBuilder {
        CallSettingsBuilder {
            inner: CallSettings::DEFAULT,
        }
    }

    /// Attempts per call, the first included.
    #[must_use]
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The deadline per call, if any.
    #[must_use]
    pub const fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The timeout per attempt, if any.
    #[must_use]
    pub const fn attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }

    /// Whether the breaker's measured attempt ceiling (3x the recent p95) tightens the
    /// attempt timeout.
    #[must_use]
    pub const fn measured_ceiling(&self) -> bool {
        self.measured_ceiling
    }

    /// The floor under the measured attempt ceiling (default [`CEILING_FLOOR`], 50 ms).
    #[must_use]
    pub const fn ceiling_floor(&self) -> Duration {
        self.ceiling_floor
    }

    /// Whether a slow attempt is hedged (see [`CallSettingsBuilder::hedging`]).
    #[must_use]
    pub const fn hedging(&self) -> bool {
        self.hedging
    }

    /// Checks these settings against the breaker's they will run over: a hedge waits for the
    /// p95 of healthy calls the breaker learns, so hedging over a breaker that keeps no
    /// statistics (a consecutive-only one, or any lean breaker) could never launch a hedge.
    /// That is `learn`, [`Bound::OnForHedging`]; build the breaker from
    /// [`BreakerSettings::learning`](crate::BreakerSettings::learning). `const`, so a firmware
    /// checks it at build time with [`valid!`](crate::valid).
    ///
    /// ```
    /// use stormguard_core::{BreakerSettings, Bound, CallSettings, Field};
    /// let hedged = CallSettings::builder().hedging(true).build()?;
    /// let plain = BreakerSettings::consecutive_only("db", 3)?;
    /// let e = hedged.check_breaker(&plain).unwrap_err();
    /// assert_eq!((e.field, e.bound), (Field::Learn, Bound::OnForHedging));
    /// assert!(hedged.check_breaker(&plain.learning()).is_ok());
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub const fn check_breaker(
        self,
        breaker: &crate::breaker::settings::BreakerSettings,
    ) -> Result<CallSettings, SettingsError> {
        if self.hedging && !breaker.keeps_statistics() {
            Err(SettingsError::new(Field::Learn, Bound::OnForHedging))
        } else {
            Ok(self)
        }
    }

    /// The backoff between attempts.
    #[must_use]
    pub const fn backoff(&self) -> &Backoff {
        &self.backoff
    }
}

impl Default for CallSettings {
    fn default() -> Self {
        CallSettings::DEFAULT
    }
}

/// Builds [`CallSettings`].
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CallSettingsBuilder {
    inner: CallSettings,
}

impl CallSettingsBuilder {
    /// The backoff set so far (for partial overrides from a configuration).
    #[cfg(feature = "serde")]
    pub(crate) const fn current_backoff(&self) -> Backoff {
        self.inner.backoff
    }

    /// Attempts per call, the first included (default 3; at least 1).
    pub const fn max_attempts(mut self, n: u32) -> Self {
        self.inner.max_attempts = n;
        self
    }

    /// The deadline per call (default 30 s); `None` for none.
    pub const fn deadline(mut self, d: Option<Duration>) -> Self {
        self.inner.deadline = d;
        self
    }

    /// The timeout per attempt (default 10 s); `None` for none (the deadline still bounds it).
    pub const fn attempt_timeout(mut self, d: Option<Duration>) -> Self {
        self.inner.attempt_timeout = d;
        self
    }

    /// Whether the breaker's measured attempt ceiling, 3x the recent p95 of successful calls
    /// (once 20 are known, and never under [`ceiling_floor`](Self::ceiling_floor)), tightens
    /// the attempt timeout (default on). It can only tighten: a configured timeout shorter than
    /// the ceiling stands, and with no attempt timeout, or one below the floor, there is no
    /// ceiling at all.
    pub const fn measured_ceiling(mut self, on: bool) -> Self {
        self.inner.measured_ceiling = on;
        self
    }

    /// The floor under the measured attempt ceiling (default [`CEILING_FLOOR`], 50 ms; at
    /// least 1 ms): the ceiling is never shorter, and an attempt timeout below it gets no
    /// ceiling.
    pub const fn ceiling_floor(mut self, floor: Duration) -> Self {
        self.inner.ceiling_floor = floor;
        self
    }

    /// Hedging (default off): when an attempt is slower than the breaker's learned p95 of
    /// healthy calls, a second attempt is launched beside it, and whichever succeeds first wins
    /// (the adapter cancels the other). At most 2 attempts are in flight; a hedge is an attempt
    /// (it counts toward the maximum) and a retry (the budget funds it); never while the breaker
    /// is half-open or recovering, without a learned baseline, or near the trip point; never
    /// sooner than 10 ms after the first attempt. Only for operations that are safe to run
    /// twice. Hedging needs at least 2 attempts: with `max_attempts(1)`, [`build`](Self::build)
    /// refuses it (field `max_attempts`, at least 2).
    pub const fn hedging(mut self, on: bool) -> Self {
        self.inner.hedging = on;
        self
    }

    /// The backoff between attempts (default [`Backoff::DEFAULT`]).
    pub const fn backoff(mut self, b: Backoff) -> Self {
        self.inner.backoff = b;
        self
    }

    /// The seed the backoff jitter is drawn from (mixed with each call's start time).
    pub const fn seed(mut self, seed: u64) -> Self {
        self.inner.seed = seed;
        self
    }

    /// Every setting at fault, in the order [`build`](Self::build) checks them: empty when the
    /// settings are valid.
    pub const fn problems(&self) -> Problems {
        let mut p = Problems::new();
        if self.inner.max_attempts == 0 {
            p.push(SettingsError::new(Field::MaxAttempts, Bound::AtLeast(1)));
        } else if self.inner.hedging && self.inner.max_attempts < 2 {
            // A hedge is an attempt: with one attempt in all, hedging could never launch one.
            p.push(SettingsError::new(Field::MaxAttempts, Bound::AtLeast(2)));
        }
        if let Some(d) = self.inner.deadline {
            if d.is_zero() {
                p.push(SettingsError::new(
                    Field::Deadline,
                    Bound::AtLeastDuration(Duration::from_nanos(1)),
                ));
            }
        }
        if let Some(d) = self.inner.attempt_timeout {
            if d.is_zero() {
                p.push(SettingsError::new(
                    Field::AttemptTimeout,
                    Bound::AtLeastDuration(Duration::from_nanos(1)),
                ));
            }
        }
        if self.inner.ceiling_floor.as_nanos() < MIN_CEILING_FLOOR.as_nanos() {
            p.push(SettingsError::new(
                Field::CeilingFloor,
                Bound::AtLeastDuration(MIN_CEILING_FLOOR),
            ));
        }
        p
    }

    /// Checks every bound and returns the settings, or every setting at fault.
    // No allocation in the core: the list is the error, by value, on a cold path.
    #[allow(clippy::result_large_err)]
    pub const fn build_all(self) -> Result<CallSettings, Problems> {
        let p = self.problems();
        if p.is_empty() {
            Ok(self.inner)
        } else {
            Err(p)
        }
    }

    /// Checks every bound and returns the settings, or the first setting at fault (see
    /// [`problems`](Self::problems) for all of them).
    pub const fn build(self) -> Result<CallSettings, SettingsError> {
        match self.problems().first() {
            Some(e) => Err(e),
            None => Ok(self.inner),
        }
    }

    /// [`build`](Self::build), then [`CallSettings::check_breaker`] against the settings of
    /// the breaker the call will run over: the first setting at fault.
    ///
    /// ```
    /// use stormguard_core::{valid, BreakerSettings, CallSettings};
    /// const GATEWAY: BreakerSettings = BreakerSettings::defaults("gateway");
    /// const HEDGED: CallSettings = valid!(CallSettings::builder().hedging(true).build_for(&GATEWAY));
    /// assert!(HEDGED.hedging());
    /// ```
    pub const fn build_for(
        self,
        breaker: &crate::breaker::settings::BreakerSettings,
    ) -> Result<CallSettings, SettingsError> {
        match self.build() {
            Ok(settings) => settings.check_breaker(breaker),
            Err(e) => Err(e),
        }
    }
}

/// A refused call, as the caller receives it: the refusal, the guarded pause to serve before
/// reporting it, and what the dependency last said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Rejection {
    /// Why.
    pub reason: RefusalReason,
    /// When asking again may succeed, counted from the end of the pause (never below zero;
    /// [`Duration::MAX`] when only an operator can help).
    pub retry_after: Duration,
    /// The pause to serve before reporting: [`GUARD_PAUSE`] capped by the deadline's remaining
    /// time. Cancelling during it ends it at once.
    pub pause: Duration,
    /// The outcome of the last attempt, when a retry was refused after a failure (the adapter
    /// holds the error itself).
    pub last: Option<Outcome>,
    /// Attempts made before the refusal.
    pub attempts: u32,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "call rejected ({}), retry after {}",
            self.reason, self.retry_after
        )
    }
}

impl core::error::Error for Rejection {}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Finished {
    /// The last attempt succeeded.
    Succeeded,
    /// The dependency's failure stands: attempts ran out, the outcome is not retryable, or a
    /// retry was refused after the dependency answered ([`Call::complete_attempt`]).
    Failed(Outcome),
    /// The deadline passed, or a retry could not finish before it.
    DeadlineExceeded {
        /// The last attempt's outcome, if any attempt ran.
        last: Option<Outcome>,
    },
    /// Refused locally (already handed out once as [`Step::Reject`]).
    Rejected(Rejection),
    /// The caller cancelled.
    Cancelled,
    /// A drain began ([`Call::on_drain`]) and stopped the call: no attempt or retry starts
    /// once draining; the attempt in flight, if any, was allowed to finish.
    Drained {
        /// The last attempt's outcome, if any attempt ran.
        last: Option<Outcome>,
    },
}

/// What the driver asks the adapter to do next.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Step {
    /// Run the operation, bounded by [`Call::attempt_deadline`], then [`Call::complete`].
    Attempt(Permit),
    /// Sleep this long (cancellably), then poll again. Never zero: a retry due at once is the
    /// next [`Step::Attempt`].
    Wait(Duration),
    /// Serve `pause` (cancellably), then report the rejection.
    Reject(Rejection),
    /// The call is over.
    Done(Finished),
}

/// Why [`Call::hedge`] launched nothing (the attempt in flight simply goes on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum NoHedge {
    /// Hedging is off in the call's settings.
    Off,
    /// Not one attempt in flight (none, or a hedge already runs), or the attempts are spent.
    NotNow,
    /// The breaker says not now.
    Suppressed(HedgeSuppressed),
    /// The budget (or the breaker, when it changed in between) refused the extra attempt.
    Refused(Refused),
    /// The operation cannot be repeated ([`Call::hedge_with`]'s `launch` made no attempt).
    Unrepeatable,
    /// A drain began ([`Call::on_drain`]): no new attempt starts, a hedge included.
    Draining,
    /// The call is [sheddable](Criticality::Sheddable): sheddable work is never hedged.
    Sheddable,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Ready,
    InFlight,
    Waiting(Instant),
    /// A retry was refused; the rejection is handed out at the next poll.
    Pending(Rejection),
    /// The rejection was handed out and its pause is being served: the next poll finishes the
    /// call as rejected, unless the caller cancels first.
    Pausing(Rejection),
    Over(Finished),
}

/// What a call in progress reads of its [`CallSettings`].
#[derive(Clone, Copy, Debug)]
struct Rules {
    max_attempts: u32,
    attempt_timeout: Option<Duration>,
    /// The floor under the measured ceiling, or zero when the call has no ceiling (turned off,
    /// no attempt timeout, or one below the floor): a valid floor is never zero.
    ceiling_floor: Duration,
    hedging: bool,
    backoff: Backoff,
}

/// Which attempt is being completed: its number, whether it is a hedge, and how long it ran.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ran {
    pub(crate) attempt: u32,
    pub(crate) hedge: bool,
    pub(crate) took: Duration,
}

/// One call in progress: plain data, holding no borrow between steps, reading no clock.
///
/// The call decides; the adapter that drives it reads the clock, sleeps, runs the operation
/// and hands back what happened. Every method takes the `now` the adapter read, and the parts
/// the call passes through ([`Parts`], any [`Gate`]) are handed in at each step,
/// not kept: the same call can be driven over parts behind a lock, in a table or in a
/// `static`.
///
/// # Call order
/// 1. **Begin.** [`Call::begin`] (or [`Call::begin_salted`] when many calls may begin at the
///    same instant). Before the first poll, optionally: [`Call::tighten_deadline`] (a
///    caller's own deadline), [`Call::set_criticality`] (sheddable work retries less and is
///    never hedged), [`Call::set_attempt_events`] (an event at each attempt's end).
/// 2. **Poll.** [`Call::poll`] says what to do next, as a [`Step`]:
///    - [`Step::Attempt`]: run the operation once, bounded by [`Call::attempt_deadline`],
///      holding the [`Permit`]; then step 3.
///    - [`Step::Wait`]: sleep that long (cancellably), then poll again.
///    - [`Step::Reject`]: serve the rejection's `pause` (cancellably), then poll again: the
///      call then ends as [`Finished::Rejected`].
///    - [`Step::Done`]: the call is over; [`Finished`] says how (and with which outcome).
/// 3. **Complete.** Every permit is handed back exactly once: [`Call::complete`] with the
///    attempt's [`Outcome`], or [`Call::complete_attempt`] when the dependency answered (so
///    an answer that says "failed" ends the call with that answer rather than a rejection).
///    A timed-out attempt is [`Outcome::TimedOut`]; one the caller abandoned is
///    [`Outcome::Cancelled`]. Then poll again (step 2).
/// 4. **Hedge** (optional, with hedging on). Right after an attempt starts,
///    [`Call::hedge_delay`] says how long to let it run alone; a [`HedgedPair`] then keeps
///    the pair's bookkeeping: one timer ([`HedgedPair::wake_at`]), what it was armed for
///    ([`HedgedPair::due`]: a launch or an attempt's deadline), the second attempt granted
///    before the operation is invoked ([`HedgedPair::launch`]), which lane's answer stands
///    and which is dropped ([`HedgedPair::finished`]). A driver without a pair calls
///    [`Call::hedge`] / [`Call::hedge_with`] itself and completes both permits.
/// 5. **Cancel.** A caller that gives up while the call waits calls [`Call::cancel`]; an
///    attempt in flight is completed with [`Outcome::Cancelled`] instead (its slot and probe
///    are given back). A hedged pair given up is [`HedgedPair::abandon`]ed.
/// 6. **Drain.** When the program shuts down, [`Call::on_drain`] (or
///    [`HedgedPair::on_drain`] for a pair) stops new attempts and retries and clamps the
///    attempt in flight to the grace; the call then ends as [`Finished::Drained`].
///
/// Reading changes nothing: [`Call::attempts`], [`Call::deadline`],
/// [`Call::attempt_deadline`], [`Call::last_outcome`], [`Call::finished`], [`Call::is_over`].
///
/// ```
/// use stormguard_core::{Breaker, Call, CallSettings, Duration, Finished, Instant, Outcome};
/// use stormguard_core::{Parts, Step};
///
/// let breaker = Breaker::of(5, "db")?;
/// let parts = Parts::new().breaker(&breaker);
/// let mut now = Instant::from_secs(1);
/// let mut call = Call::begin(&CallSettings::DEFAULT, now);
/// let mut answers = [Outcome::Transient, Outcome::Success].into_iter();
/// let finished = loop {
///     match call.poll(&parts, now, &mut |_| {}) {
///         Step::Attempt(permit) => {
///             now += Duration::from_millis(3); // the operation runs
///             let outcome = answers.next().unwrap_or(Outcome::Success);
///             call.complete(&parts, permit, now, outcome, &mut |_| {});
///         }
///         Step::Wait(d) => now += d,               // a backoff: sleep, then poll again
///         Step::Reject(r) => now += r.pause,       // the guarded pause, then poll again
///         Step::Done(finished) => break finished,
///     }
/// };
/// assert!(matches!(finished, Finished::Succeeded));
/// assert_eq!(call.attempts(), 2); // the first failed, the retry succeeded
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Call {
    /// The settings a call reads after it began (not the deadline nor the seed, used up by
    /// [`Call::begin`]): a `Call` lives in an embedded task's future, byte for byte.
    rules: Rules,
    deadline: Option<Instant>,
    attempt_deadline: Option<Instant>,
    attempts: u32,
    /// Attempts in flight: 1, or 2 while a hedge runs.
    running: u8,
    last: Option<Outcome>,
    phase: Phase,
    /// The jitter generator; on a 64-bit target, until the first draw, only its seed.
    rng: JitterRng,
    /// Whether `rng` is a generator yet. Most calls never back off, so on hosts the seed is
    /// mixed when a draw needs it (the draws are the same); a microcontroller mixes it at once
    /// and keeps the smaller code.
    #[cfg(target_pointer_width = "64")]
    rng_mixed: bool,
    /// Whether the dependency answered the attempt completed last ([`Call::complete_attempt`]).
    answered: bool,
    /// Whether a drain began ([`Call::on_drain`]): no attempt or retry starts any more.
    draining: bool,
    /// How much the call matters ([`Call::set_criticality`]).
    criticality: Criticality,
    /// Whether each attempt's end is announced ([`Call::set_attempt_events`]).
    attempt_events: bool,
}

impl Call {
    /// Starts a call at `now` with the settings' deadline.
    ///
    /// Its jitter is drawn from the settings' seed and `now`: calls that may begin at the same
    /// instant (paused or simulated time, a coarse clock, tasks woken on the same tick) begin
    /// with [`Call::begin_salted`] instead, or they back off in step.
    #[must_use]
    pub fn begin(settings: &CallSettings, now: Instant) -> Call {
        Call::begin_salted(settings, now, 0)
    }

    /// [`Call::begin`] for one of several calls that may begin at the same instant: a `salt`
    /// that differs between them (a count of the calls begun, say) keeps their jitter apart.
    /// A salt of 0 is [`Call::begin`].
    ///
    /// ```
    /// use stormguard_core::{Call, CallSettings, Instant, Outcome, Parts, Step};
    ///
    /// let settings = CallSettings::DEFAULT;
    /// let now = Instant::from_secs(1);
    /// let first_wait = |salt| {
    ///     let parts = Parts::new().named("db");
    ///     let mut call = Call::begin_salted(&settings, now, salt);
    ///     let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
    ///     call.complete(&parts, permit, now, Outcome::Transient, &mut |_| {});
    ///     call.poll(&parts, now, &mut |_| {})
    /// };
    /// assert_eq!(first_wait(0), first_wait(0));
    /// assert_ne!(first_wait(0), first_wait(1)); // same instant, apart
    /// ```
    #[must_use]
    pub fn begin_salted(settings: &CallSettings, now: Instant, salt: u64) -> Call {
        let seed = settings.seed
            ^ now.as_nanos().wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ salt.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        Call {
            rules: Rules {
                max_attempts: settings.max_attempts,
                attempt_timeout: settings.attempt_timeout,
                ceiling_floor: match settings.attempt_timeout {
                    Some(t) if settings.measured_ceiling && t >= settings.ceiling_floor => {
                        settings.ceiling_floor
                    }
                    _ => Duration::ZERO,
                },
                hedging: settings.hedging,
                backoff: settings.backoff,
            },
            deadline: settings.deadline.map(|d| now.saturating_add(d)),
            attempt_deadline: None,
            attempts: 0,
            running: 0,
            last: None,
            phase: Phase::Ready,
            #[cfg(target_pointer_width = "64")]
            rng: JitterRng::unmixed(seed),
            #[cfg(target_pointer_width = "64")]
            rng_mixed: false,
            #[cfg(not(target_pointer_width = "64"))]
            rng: JitterRng::with_seed(seed),
            answered: false,
            draining: false,
            criticality: Criticality::Default,
            attempt_events: true,
        }
    }

    /// Reseeds the backoff jitter with a seed of the caller's (a device's own, so devices that
    /// boot together with the same `const` settings do not retry in step).
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Call {
        self.reseed(seed);
        self
    }

    /// [`Call::with_seed`] in place (a `Call` is some 170 bytes: an adapter that keeps it in a
    /// future avoids moving it).
    pub fn reseed(&mut self, seed: u64) {
        self.mix_rng();
        self.rng = JitterRng::with_seed(seed ^ self.rng.next_u64());
    }

    /// A draw from the call's generator, uniform over `u64`.
    pub(crate) fn draw(&mut self) -> u64 {
        self.mix_rng();
        self.rng.next_u64()
    }

    /// Makes the jitter generator of the seed it holds, on first use.
    #[inline]
    fn mix_rng(&mut self) {
        #[cfg(target_pointer_width = "64")]
        if !self.rng_mixed {
            self.rng = self.rng.mixed();
            self.rng_mixed = true;
        }
    }

    /// Tightens the call's deadline to `deadline` (the caller's own, or one propagated from
    /// upstream); a later one than the settings' is ignored.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Instant) -> Call {
        self.tighten_deadline(deadline);
        self
    }

    /// [`Call::with_deadline`] in place.
    pub fn tighten_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(self.deadline.map_or(deadline, |d| d.min(deadline)));
    }

    /// A drain began at `now` (the service is shutting down): from now on the call starts no
    /// attempt and no retry, a hedge included, and its deadline, and the running attempt's, is
    /// clamped to `now + grace` ([`DRAIN_GRACE`], 30 s, by default). An attempt in flight runs
    /// on to its outcome (within the grace), which is reported with [`Call::complete`] as
    /// usual: a success is the call's success; anything that would have been retried ends the
    /// call as [`Finished::Drained`], carrying that outcome. A call not yet at its first
    /// attempt, or waiting to retry, ends at its next [`Call::poll`] as [`Finished::Drained`]
    /// (announced by the [`Event::Drained`] event), running nothing. A rejection already
    /// handed out stands. Later calls change nothing: the first drain's clamp stays.
    ///
    /// ```
    /// use stormguard_core::{
    ///     call::DRAIN_GRACE,
    ///     Call, CallSettings, Duration, Finished, Instant, Outcome, Parts, Step,
    /// };
    ///
    /// let parts = Parts::new().named("db");
    /// let mut now = Instant::from_secs(1);
    /// let mut call = Call::begin(&CallSettings::DEFAULT, now);
    /// let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
    /// now += Duration::from_millis(5);
    /// call.on_drain(now, DRAIN_GRACE); // the attempt in flight finishes...
    /// call.complete(&parts, permit, now, Outcome::Transient, &mut |_| {});
    /// // ...but its failure is not retried.
    /// let last = Some(Outcome::Transient);
    /// assert_eq!(call.poll(&parts, now, &mut |_| {}), Step::Done(Finished::Drained { last }));
    /// assert_eq!(call.attempts(), 1);
    /// ```
    pub fn on_drain(&mut self, now: Instant, grace: Duration) {
        if self.draining {
            return;
        }
        self.draining = true;
        let by = now.saturating_add(grace);
        self.tighten_deadline(by);
        if self.phase == Phase::InFlight {
            self.attempt_deadline = Some(self.attempt_deadline.map_or(by, |d| d.min(by)));
        }
    }

    /// Labels how much the call matters (default [`Criticality::Default`]), before its first
    /// [`Call::poll`]. A [sheddable](Criticality::Sheddable) call is never hedged
    /// ([`NoHedge::Sheddable`]) and gets no retry once the retry budget is more than half
    /// spent: the call then ends as the guarded rejection with [`RefusalReason::Shed`]
    /// (carrying the last outcome), or with the dependency's answer when it answered, as for
    /// any refused retry ([`Call::complete_attempt`]). Critical and default calls retry as the
    /// budget allows.
    ///
    /// ```
    /// use stormguard_core::{
    ///     call::Criticality, Budget, BudgetSettings, Call, CallSettings, Instant,
    ///     Outcome, Parts, RefusalReason, Step,
    /// };
    ///
    /// let parts = Parts::new().named("feed").budget(Budget::new(BudgetSettings::defaults("feed")));
    /// let now = Instant::from_secs(1);
    /// for _ in 0..16 {
    ///     parts.budget.as_ref().unwrap().try_withdraw(now)?; // more than half of 30 spent
    /// }
    /// let mut call = Call::begin(&CallSettings::DEFAULT, now);
    /// call.set_criticality(Criticality::Sheddable);
    /// let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
    /// call.complete(&parts, permit, now, Outcome::Transient, &mut |_| {});
    /// let Step::Reject(r) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
    /// assert_eq!(r.reason, RefusalReason::Shed);
    /// # Ok::<(), stormguard_core::Refused>(())
    /// ```
    pub fn set_criticality(&mut self, criticality: Criticality) {
        self.criticality = criticality;
    }

    /// How much the call matters ([`Call::set_criticality`]).
    #[must_use]
    pub const fn criticality(&self) -> Criticality {
        self.criticality
    }

    /// Whether the call announces each attempt's end with an [`Event::Attempt`] (on from
    /// [`Call::begin`]): an adapter whose sink would drop them (no attempt log asked for, no
    /// listener for them, the trace level off) turns them off, and the call's events are then
    /// its decisions alone. A call's decisions are the same either way.
    ///
    /// ```
    /// use stormguard_core::{Call, CallSettings, Instant, Outcome, Parts, Step};
    ///
    /// let parts = Parts::new().named("feed");
    /// let now = Instant::from_secs(1);
    /// let mut call = Call::begin(&CallSettings::DEFAULT, now);
    /// call.set_attempt_events(false);
    /// let mut events = 0;
    /// let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| events += 1) else { unreachable!() };
    /// call.complete(&parts, permit, now, Outcome::Success, &mut |_| events += 1);
    /// assert_eq!(events, 0);
    /// ```
    pub fn set_attempt_events(&mut self, on: bool) {
        self.attempt_events = on;
    }

    /// Whether a drain began ([`Call::on_drain`]).
    #[must_use]
    pub const fn is_draining(&self) -> bool {
        self.draining
    }

    /// The call's deadline, if any.
    #[must_use]
    pub const fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// When the attempt started last must be given up (its timeout, capped by the deadline).
    #[must_use]
    pub const fn attempt_deadline(&self) -> Option<Instant> {
        self.attempt_deadline
    }

    /// Attempts started so far, counting those a local rate limiter or bulkhead refused (each
    /// takes one of the call's attempts, see [`Call::poll`]).
    #[must_use]
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// How the call finished, once it has: what [`Call::poll`] returns as [`Step::Done`] from
    /// then on. A loop can read it after an attempt's outcome instead of polling again.
    ///
    /// ```
    /// use stormguard_core::{Budget, BudgetSettings, Call, CallSettings};
    /// use stormguard_core::{Finished, Instant, Outcome, Parts, Step};
    ///
    /// let budget = Budget::new(BudgetSettings::defaults("api"));
    /// let parts = Parts::new().named("api").budget(budget);
    /// let now = Instant::from_secs(1);
    /// let mut call = Call::begin(&CallSettings::DEFAULT, now);
    /// let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
    /// assert_eq!(call.finished(), None); // the attempt is in flight
    /// call.complete(&parts, permit, now, Outcome::Success, &mut |_| {});
    /// assert_eq!(call.finished(), Some(Finished::Succeeded));
    /// assert_eq!(call.poll(&parts, now, &mut |_| {}), Step::Done(Finished::Succeeded));
    /// ```
    #[must_use]
    pub const fn finished(&self) -> Option<Finished> {
        match self.phase {
            Phase::Over(f) => Some(f),
            _ => None,
        }
    }

    /// The outcome of the last attempt, if one completed.
    #[must_use]
    pub const fn last_outcome(&self) -> Option<Outcome> {
        self.last
    }

    fn remaining(&self, now: Instant) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(now))
    }

    /// The failure the dependency answered with on the attempt completed last, if it did: a
    /// refused retry then hands that answer back instead of a rejection.
    fn answered_failure(&self) -> Option<Outcome> {
        self.last.filter(|o| self.answered && !o.is_success())
    }

    /// Turns a refusal into the caller's rejection and announces it. After an answered
    /// failure nothing is paused: the answer goes back at once.
    fn rejection<P: Gate>(
        &self,
        parts: &P,
        refused: Refused,
        now: Instant,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Rejection {
        let pause = if self.answered_failure().is_some() {
            Duration::ZERO
        } else {
            guarded_pause(self.remaining(now))
        };
        let retry_after = if refused.retry_after == Duration::MAX {
            Duration::MAX
        } else {
            refused.retry_after.saturating_sub(pause)
        };
        let rejection = Rejection {
            reason: refused.reason,
            retry_after,
            pause,
            last: self.last.filter(|o| !o.is_success()),
            attempts: self.attempts,
        };
        self.refused_attempt(parts, self.attempts.saturating_add(1), refused, events);
        // Announced before it is served, under the breaker's name whoever refused (the reason
        // tells a budget's refusal apart).
        events(Event::Rejected {
            name: parts.name(),
            reason: rejection.reason,
            delay: pause,
            retry_after,
        });
        rejection
    }

    /// Announces that `refused` kept attempt number `attempt` from starting.
    fn refused_attempt<P: Gate>(
        &self,
        parts: &P,
        attempt: u32,
        refused: Refused,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        if self.attempt_events {
            events(Event::Attempt {
                name: parts.name(),
                attempt,
                end: AttemptEnd::Refused {
                    reason: refused.reason,
                },
            });
        }
    }

    /// Ends the call as stopped by the drain, and announces it.
    fn drained<P: Gate>(
        &mut self,
        parts: &P,
        last: Option<Outcome>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Finished {
        let f = Finished::Drained { last };
        self.phase = Phase::Over(f);
        events(Event::Drained {
            name: parts.name(),
            attempts: self.attempts,
            last,
        });
        f
    }

    fn reject<P: Gate>(
        &mut self,
        parts: &P,
        refused: Refused,
        now: Instant,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Step {
        let r = self.rejection(parts, refused, now, events);
        if let Some(answer) = self.answered_failure() {
            // The dependency's answer stands: the caller reads it, not a bare rejection.
            let f = Finished::Failed(answer);
            self.phase = Phase::Over(f);
            return Step::Done(f);
        }
        self.phase = Phase::Pausing(r);
        Step::Reject(r)
    }

    /// What to do next at `now`.
    ///
    /// A refusal by a local rate limiter or bulkhead ([`RefusalReason::RateLimited`],
    /// [`RefusalReason::BulkheadFull`]) is a self-imposed throttle first: the refused attempt
    /// takes one of the call's attempts and the call waits ([`Step::Wait`], announced by a
    /// `Retry` event) on the throttled curve, or the refusal's own `retry_after` when it has
    /// one (capped by the backoff's maximum), charging nothing to the retry budget and telling
    /// the breaker nothing. Only when no retry fits (the attempts are spent, or the wait would
    /// not end before the deadline) does the call end as the guarded rejection with that
    /// reason. Any other refusal (breaker, budget) is the guarded rejection at once.
    pub fn poll<P: Gate>(
        &mut self,
        parts: &P,
        now: Instant,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Step {
        if self.draining && matches!(self.phase, Phase::Ready | Phase::Waiting(_)) {
            // Draining: nothing new starts, whether the first attempt or a retry, and a
            // backoff wait is not served out.
            return Step::Done(self.drained(parts, self.last, events));
        }
        match self.phase {
            Phase::Over(f) => return Step::Done(f),
            Phase::Pending(r) => {
                self.phase = Phase::Pausing(r);
                return Step::Reject(r);
            }
            Phase::Pausing(r) => {
                let f = Finished::Rejected(r);
                self.phase = Phase::Over(f);
                return Step::Done(f);
            }
            Phase::Waiting(until) if now < until => {
                return Step::Wait(until.saturating_duration_since(now))
            }
            Phase::InFlight => {
                // Polled without completing the attempt: it is treated as cancelled (its permit,
                // if a probe, is reclaimed by the breaker).
                self.phase = Phase::Over(Finished::Cancelled);
                return Step::Done(Finished::Cancelled);
            }
            Phase::Waiting(_) | Phase::Ready => {}
        }
        let left = self.remaining(now);
        if left.is_some_and(|l| l.is_zero()) {
            // No time left: a refusal is still reported as the refusal, with no pause.
            if let Err(refused) = parts.check(now) {
                return self.reject(parts, refused, now, events);
            }
            let f = Finished::DeadlineExceeded { last: self.last };
            self.phase = Phase::Over(f);
            return Step::Done(f);
        }
        // Each turn of this loop either returns or spends one of the call's attempts on a
        // self-imposed throttle, so it ends within `max_attempts` turns.
        loop {
            let timeout = self.attempt_timeout(parts, now);
            return match parts.try_acquire(now, timeout, events) {
                Ok(permit) => {
                    self.started(timeout, now);
                    self.phase = Phase::InFlight;
                    Step::Attempt(permit)
                }
                Err(refused) if parts.self_limits() && refused.reason.is_self_imposed() => {
                    match self.throttle_self(parts, refused, now, events) {
                        // A zero wait (`Backoff::none()`) is no wait: the retry is due now, and
                        // a `Step::Wait` is never zero.
                        Some(wait) if wait.is_zero() => continue,
                        Some(wait) => Step::Wait(wait),
                        None => self.reject(parts, refused, now, events),
                    }
                }
                Err(refused) => self.reject(parts, refused, now, events),
            };
        }
    }

    /// A local limiter or bulkhead refused the attempt about to start: a self-imposed throttle.
    /// The refused attempt takes one of the call's attempts and is retried on the throttled
    /// curve, after the refusal's own hint when it has one (capped by the backoff's maximum),
    /// with nothing charged to the budget and nothing told to the breaker (it granted no
    /// permit). `None` when no retry fits: the attempts are spent, or the wait (and a healthy
    /// call after it) would not end before the deadline.
    fn throttle_self<P: Gate>(
        &mut self,
        parts: &P,
        refused: Refused,
        now: Instant,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Option<Duration> {
        let slot = self.attempts.saturating_add(1);
        if slot >= self.rules.max_attempts {
            return None;
        }
        let hint = (!refused.retry_after.is_zero()).then_some(refused.retry_after);
        let after = Outcome::Throttled { retry_after: hint };
        self.mix_rng();
        let delay = match hint {
            // Spread: the callers refused together are all told the same instant.
            Some(hint) => self.rules.backoff.after_local_refusal(hint, &mut self.rng),
            None => self.rules.backoff.delay(slot, after, &mut self.rng),
        };
        if let Some(left) = self.remaining(now) {
            let after_wait = left.checked_sub(delay).filter(|l| !l.is_zero());
            let healthy = parts
                .learned(now, Learned::NormalLatency)
                .unwrap_or(Duration::ZERO);
            if after_wait.is_none_or(|l| l < healthy) {
                return None;
            }
        }
        self.attempts = slot;
        self.refused_attempt(parts, slot, refused, events);
        events(Event::Retry {
            name: parts.name(),
            attempt: slot.saturating_add(1),
            delay,
            after,
        });
        self.phase = Phase::Waiting(now.saturating_add(delay));
        Some(delay)
    }

    /// The timeout of an attempt started at `now`: the tightest of the configured timeout, the
    /// measured ceiling and the time left.
    fn attempt_timeout<P: Gate>(&self, parts: &P, now: Instant) -> Option<Duration> {
        let ceiling = if self.rules.ceiling_floor.is_zero() {
            None
        } else {
            parts
                .learned(now, Learned::AttemptCeiling)
                .ok()
                .map(|c| c.max(self.rules.ceiling_floor))
        };
        let tighter = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, b) => b,
        };
        tighter(
            tighter(self.rules.attempt_timeout, ceiling),
            self.remaining(now),
        )
    }

    fn started(&mut self, timeout: Option<Duration>, now: Instant) {
        self.attempts = self.attempts.saturating_add(1);
        self.running = self.running.saturating_add(1);
        self.attempt_deadline = timeout.map(|t| now.saturating_add(t));
    }

    /// Can a hedge be launched beside the attempt in flight? Everything but the breaker.
    fn may_hedge(&self) -> Result<(), NoHedge> {
        if !self.rules.hedging {
            return Err(NoHedge::Off);
        }
        if self.draining {
            return Err(NoHedge::Draining);
        }
        if self.criticality.is_sheddable() {
            return Err(NoHedge::Sheddable);
        }
        if self.phase != Phase::InFlight
            || self.running != 1
            || self.attempts >= self.rules.max_attempts
        {
            return Err(NoHedge::NotNow);
        }
        Ok(())
    }

    /// How long after launching the attempt just started (by [`Step::Attempt`]) to launch a
    /// hedge beside it, if it has not finished by then; `None` when the call will not hedge
    /// (hedging off, attempts spent, the breaker not closed or without a baseline, or the
    /// hedge would start past the attempt's own deadline). Call it right after the attempt
    /// starts, at the same `now`; when the time comes, ask [`Call::hedge`].
    #[must_use]
    pub fn hedge_delay<P: Gate>(&self, parts: &P, now: Instant) -> Option<Duration> {
        self.may_hedge().ok()?;
        let after = parts.learned(now, Learned::HedgeAfter).ok()?;
        match self.attempt_deadline {
            Some(d) if now.saturating_add(after) >= d => None,
            _ => Some(after),
        }
    }

    /// Launches a hedge beside the attempt in flight, at `now` (when [`Call::hedge_delay`] has
    /// passed and the attempt is still running), or says why not; the attempt in flight goes
    /// on either way. The breaker decides again (it may have left the closed state), then the
    /// budget funds the hedge like a retry, then the breaker admits it. The permit is reported
    /// with [`Call::complete`] like any attempt; [`Call::attempt_deadline`] is now the hedge's.
    ///
    /// With two attempts in flight, the first success ends the call (report the other, once
    /// cancelled, as [`Outcome::Cancelled`]); a failure waits for the other attempt, and only
    /// when both have failed does the call retry (or end).
    ///
    /// An adapter makes the hedge's attempt only once this grants it; one whose operation may
    /// decline to run again uses [`Call::hedge_with`].
    pub fn hedge<P: Gate>(
        &mut self,
        parts: &P,
        now: Instant,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, NoHedge> {
        self.hedge_with(parts, now, events, |_| Some(()))
            .map(|(permit, ())| permit)
    }

    /// [`Call::hedge`], making the hedge's attempt with `launch` (given the attempt's number,
    /// the first being 1) once the breaker and the budget have granted it, so the operation is
    /// never invoked for a hedge that does not run. `launch` returns `None` when the operation
    /// cannot be repeated (a request that cannot be replayed): then nothing is launched, the
    /// permit goes back to the breaker and the retry to the budget, the call's attempts are
    /// as before, and the answer is [`NoHedge::Unrepeatable`]. What `launch` made comes back
    /// beside the permit.
    ///
    /// ```
    /// use stormguard_core::{
    ///     Breaker, Budget, BudgetSettings, Call, CallSettings, Duration, Instant, call::NoHedge,
    ///     Outcome, Parts, Step,
    /// };
    ///
    /// let parts = Parts::new().breaker(Breaker::of(5, "search")?).budget(Budget::new(BudgetSettings::defaults("search")));
    /// let mut now = Instant::from_secs(1);
    /// for _ in 0..40 {
    ///     // Healthy calls of 20 ms: the breaker learns when a call is slow.
    ///     let permit = parts.breaker.as_ref().unwrap().try_acquire(now)?;
    ///     now += Duration::from_millis(20);
    ///     parts.breaker.as_ref().unwrap().on_outcome(now, permit, Outcome::Success, &mut |_| {});
    /// }
    /// let settings = CallSettings::builder().hedging(true).build()?;
    /// let mut call = Call::begin(&settings, now);
    /// let Step::Attempt(first) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
    /// let at = now + call.hedge_delay(&parts, now).expect("a slow attempt is hedged");
    /// let budget = parts.budget.as_ref().unwrap().available(at);
    /// // The request cannot be replayed: no hedge, and nothing spent on it.
    /// let declined = call.hedge_with(&parts, at, &mut |_| {}, |_attempt| None::<()>);
    /// assert_eq!(declined, Err(NoHedge::Unrepeatable));
    /// assert_eq!((call.attempts(), parts.budget.as_ref().unwrap().available(at)), (1, budget));
    /// call.complete(&parts, first, at, Outcome::Success, &mut |_| {});
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn hedge_with<P: Gate, T>(
        &mut self,
        parts: &P,
        now: Instant,
        events: &mut dyn FnMut(Event<'_>),
        launch: impl FnOnce(u32) -> Option<T>,
    ) -> Result<(Permit, T), NoHedge> {
        self.may_hedge()?;
        // Never with no time left: past the call's deadline, or past the running attempt's own
        // (a late timer, a clock that jumped): the hedge would spend a retry and an attempt on
        // nothing, as `hedge_delay` already says.
        if self.remaining(now).is_some_and(|l| l.is_zero())
            || self.attempt_deadline.is_some_and(|d| now >= d)
        {
            return Err(NoHedge::NotNow);
        }
        parts
            .learned(now, Learned::HedgeAfter)
            .map_err(NoHedge::Suppressed)?;
        parts.check(now).map_err(NoHedge::Refused)?;
        parts.try_fund_retry(now).map_err(NoHedge::Refused)?;
        let timeout = self.attempt_timeout(parts, now);
        let permit = match parts.try_acquire(now, timeout, events) {
            Ok(permit) => permit,
            Err(refused) => {
                // The hedge does not run: it spends nothing.
                parts.refund_retry(now);
                return Err(NoHedge::Refused(refused));
            }
        };
        let Some(made) = launch(self.attempts.saturating_add(1)) else {
            parts.release(permit);
            parts.refund_retry(now);
            return Err(NoHedge::Unrepeatable);
        };
        self.started(timeout, now);
        events(Event::Hedged {
            name: parts.name(),
            attempt: self.attempts,
        });
        Ok((permit, made))
    }

    /// How an attempt's answer that came back at `now` counts, for an adapter that cannot cut
    /// the attempt short at its deadline (a blocking operation runs to its end): an answer at
    /// or after [`Call::attempt_deadline`] that is not a success counts as
    /// [`Outcome::TimedOut`], as it would have had the attempt been dropped then (a late
    /// success still stands: the caller has the value). `answered` is whether the operation
    /// returned its result; an outcome counted as a timeout is no answer. The pair to hand to
    /// [`Call::complete_attempt`].
    ///
    /// ```
    /// use stormguard_core::{
    ///     Call, CallSettings, Duration, Instant, Outcome, Parts, Step,
    /// };
    ///
    /// let parts = Parts::new().named("disk");
    /// let now = Instant::from_secs(1);
    /// let mut call = Call::begin(&CallSettings::DEFAULT, now);
    /// let Step::Attempt(_permit) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
    /// let late = now + Duration::from_secs(11); // past the 10 s attempt timeout
    /// let judged = |outcome| call.judge_answer(late, outcome, true);
    /// assert_eq!(judged(Outcome::Transient), (Outcome::TimedOut, false));
    /// assert_eq!(judged(Outcome::Success), (Outcome::Success, true));
    /// ```
    #[must_use]
    pub fn judge_answer(&self, now: Instant, outcome: Outcome, answered: bool) -> (Outcome, bool) {
        let late = self.attempt_deadline.is_some_and(|at| now >= at);
        let outcome = if late && outcome != Outcome::Success {
            Outcome::TimedOut
        } else {
            outcome
        };
        (outcome, answered && outcome != Outcome::TimedOut)
    }

    /// Reports how the attempt behind `permit` ended, at `now`. The breaker and budget learn
    /// from it; the call decides whether and when to retry. The outcome is taken as
    /// [`Outcome::effective`] reads it: a throttled outcome that asks for no wait counts as a
    /// transient failure. For an attempt the dependency answered, [`Call::complete_attempt`]
    /// says so.
    pub fn complete<P: Gate>(
        &mut self,
        parts: &P,
        permit: Permit,
        now: Instant,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        self.complete_attempt(parts, permit, now, outcome, false, events);
    }

    /// [`Call::complete`], saying whether the dependency `answered` the attempt: the operation
    /// returned its result (an HTTP response, whatever its status), as opposed to a connection
    /// error, a timeout or a cancellation. When `outcome` is a failure the dependency answered
    /// with (a 500, a 429) and the retry after it is refused (budget empty, breaker open), the
    /// call finishes at once as [`Finished::Failed`] with that outcome: the caller gets the
    /// answer back (status, body and headers are the caller's to read), not a bare rejection,
    /// and no pause is served. The refusal is still announced (the `Rejected` event, with a zero
    /// `delay`). A call that got no answer ends as the guarded rejection.
    ///
    /// ```
    /// use stormguard_core::{
    ///     Budget, BudgetSettings, Call, CallSettings, Finished, Instant, Outcome, Parts, Step,
    ///     };
    ///
    /// // A budget of one retry, already spent.
    /// let settings = BudgetSettings::builder("api").floor_per_second(0.1).build()?;
    /// let parts = Parts::new().named("api").budget(Budget::new(settings));
    /// let now = Instant::from_secs(1);
    /// parts.budget.as_ref().unwrap().try_withdraw(now)?;
    /// let mut call = Call::begin(&CallSettings::DEFAULT, now);
    /// let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
    /// // An HTTP 500: a transient failure, answered.
    /// call.complete_attempt(&parts, permit, now, Outcome::Transient, true, &mut |_| {});
    /// assert_eq!(
    ///     call.poll(&parts, now, &mut |_| {}),
    ///     Step::Done(Finished::Failed(Outcome::Transient))
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    // Inlined on a host, as `complete_ran` is: out of line, its seven arguments were passed
    // on every call's success path.
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub fn complete_attempt<P: Gate>(
        &mut self,
        parts: &P,
        permit: Permit,
        now: Instant,
        outcome: Outcome,
        answered: bool,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        let ran = Ran {
            attempt: self.attempts,
            hedge: false,
            took: permit.latency(now),
        };
        self.complete_ran(parts, permit, now, outcome, answered, ran, events);
    }

    /// [`Call::complete_attempt`] for the attempt `ran` describes (the hedged pair knows which
    /// of its two attempts ended, and how long it ran before its permit was re-dated).
    ///
    /// Inlined on a host: out of line, the call's success path paid for passing eight
    /// arguments and for the registers of the retry planning it does not reach (42 of 655
    /// instructions per `policy.call` in the std adapter). A microcontroller keeps one copy.
    #[allow(clippy::too_many_arguments)]
    #[cfg_attr(target_pointer_width = "64", inline(always))]
    pub(crate) fn complete_ran<P: Gate>(
        &mut self,
        parts: &P,
        permit: Permit,
        now: Instant,
        outcome: Outcome,
        answered: bool,
        ran: Ran,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        let outcome = outcome.effective();
        if self.attempt_events {
            events(Event::Attempt {
                name: parts.name(),
                attempt: ran.attempt,
                end: AttemptEnd::Ran {
                    outcome,
                    took: ran.took,
                    answered,
                    hedge: ran.hedge,
                },
            });
        }
        let evidence = self.as_evidence(parts, &permit, now, outcome);
        parts.on_outcome(now, permit, evidence, events);
        parts.budget_outcome(now, evidence);
        if self.phase != Phase::InFlight {
            return;
        }
        self.running = self.running.saturating_sub(1);
        self.last = Some(outcome);
        self.answered = answered;
        if self.running > 0 {
            // The other attempt of a hedged pair runs on: a success or a cancellation ends the
            // call, and so does a permanent failure (the request itself is refused); any other
            // failure waits for the other attempt.
            let finished = match outcome {
                Outcome::Success => Some(Finished::Succeeded),
                Outcome::Cancelled => Some(Finished::Cancelled),
                Outcome::Permanent => Some(Finished::Failed(outcome)),
                _ => None,
            };
            if let Some(f) = finished {
                self.phase = Phase::Over(f);
            }
            return;
        }
        self.attempt_deadline = None;
        let finished = match outcome {
            Outcome::Success => Some(Finished::Succeeded),
            Outcome::Cancelled => Some(Finished::Cancelled),
            Outcome::Permanent => Some(Finished::Failed(outcome)),
            _ if self.attempts >= self.rules.max_attempts => Some(Finished::Failed(outcome)),
            _ => None,
        };
        if let Some(f) = finished {
            self.phase = Phase::Over(f);
            return;
        }
        if self.draining {
            // A retry is due, but nothing new starts once draining.
            self.drained(parts, Some(outcome), events);
            return;
        }
        self.mix_rng();
        let median = (self.rules.backoff.measured_base())
            .and_then(|_| parts.learned(now, Learned::NormalLatency).ok());
        let delay =
            self.rules
                .backoff
                .delay_measured(self.attempts, outcome, median, &mut self.rng);
        if let Some(left) = self.remaining(now) {
            // A wait that would end at or past the deadline is not started, nor a retry with
            // less time left after the wait than a healthy call takes.
            let after_wait = left.checked_sub(delay).filter(|l| !l.is_zero());
            let healthy = parts
                .learned(now, Learned::NormalLatency)
                .unwrap_or(Duration::ZERO);
            if after_wait.is_none_or(|l| l < healthy) {
                self.phase = Phase::Over(Finished::DeadlineExceeded {
                    last: Some(outcome),
                });
                return;
            }
        }
        let funded = if self.criticality.is_sheddable() {
            // Sheddable work leaves the second half of the budget to work that matters more.
            parts
                .check_shed(now)
                .and_then(|()| parts.try_fund_retry(now))
        } else {
            parts.try_fund_retry(now)
        };
        if let Err(refused) = funded {
            let rejection = self.rejection(parts, refused, now, events);
            self.phase = match self.answered_failure() {
                // The dependency's answer stands, handed back at once.
                Some(answer) => Phase::Over(Finished::Failed(answer)),
                // Reported at the next poll, as a rejection carrying the last outcome.
                None => Phase::Pending(rejection),
            };
            return;
        }
        events(Event::Retry {
            name: parts.name(),
            attempt: self.attempts.saturating_add(1),
            delay,
            after: outcome,
        });
        self.phase = Phase::Waiting(now.saturating_add(delay));
    }

    /// What an attempt's outcome tells the breaker and budget. An attempt the call's own deadline
    /// cut short (the caller's budget, perhaps set by a remote caller, ran out before the
    /// attempt's own timeout would have) says nothing about the dependency unless it had
    /// already run as long as a slow call: they hear it as the caller's cancellation. An
    /// attempt cut by its attempt timeout or the measured ceiling stays a timeout.
    ///
    /// A slow call is the breaker's slow-call threshold; until the breaker has one (a cold
    /// breaker, one whose rules keep no statistics), it is the [ceiling
    /// floor](CallSettingsBuilder::ceiling_floor) (50 ms by default), the least the measured
    /// ceiling would ever allow: a dependency that hangs still trips the breaker when every
    /// caller's deadline is shorter than the attempt timeout, and a caller asking for an
    /// answer within a few milliseconds still cannot open it.
    fn as_evidence<P: Gate>(
        &self,
        parts: &P,
        permit: &Permit,
        now: Instant,
        outcome: Outcome,
    ) -> Outcome {
        let ran = permit.latency(now);
        let cut_by_deadline = outcome == Outcome::TimedOut
            && self.deadline.is_some_and(|d| {
                // Its own timeout would have ended it by the deadline anyway.
                now >= d
                    && self
                        .rules
                        .attempt_timeout
                        .is_none_or(|t| now.saturating_sub(ran).saturating_add(t) > d)
            });
        if !cut_by_deadline {
            return outcome;
        }
        let slow = parts
            .learned(now, Learned::SlowThreshold)
            .unwrap_or(self.rules.ceiling_floor);
        if ran >= slow {
            outcome
        } else {
            Outcome::Cancelled
        }
    }

    /// The caller gave up (during a wait or a rejection's pause): the call ends as cancelled. An
    /// attempt in flight is reported with [`Call::complete`] and [`Outcome::Cancelled`] instead.
    pub fn cancel(&mut self) {
        if !matches!(self.phase, Phase::Over(_)) {
            self.phase = Phase::Over(Finished::Cancelled);
        }
    }

    /// `true` once the call has finished.
    #[must_use]
    pub const fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Over(_))
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Call {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "Call {{ attempts: {}, deadline: {}, last: {} }}",
            self.attempts,
            self.deadline,
            self.last
        );
    }
}
