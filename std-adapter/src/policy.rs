//! `policy.call(|attempt| async { ... }).await`: the core's call driver, run on tokio.
//!
//! The loop is the one in the design (DESIGN.md, "The core is sans-IO"): ask the core's
//! [`Call`] what to do next, do it, report back. Every decision (admit, retry, wait how long,
//! refuse, give up) is the core's; this module reads the clock (twice per attempt: before and
//! after), runs the operation against its attempt deadline, sleeps cancellably and forwards
//! events.

use std::fmt;

use stormguard_core::{
    Admission, Backoff, BreakerSettings, BudgetSettings, Call, CallSettings, CallSettingsBuilder,
    Duration, Event, Finished, Funding, Instant, Name, Outcome, Parts, Permit, Refused, Rejection,
    SettingsError, SharedBreaker, SharedBudget, Step, Unguarded, Unlimited,
};

use crate::classify::{Classify, EveryErrorTransient};
use crate::clock::{default_clock, Clock, DefaultClock};
use crate::events::{self, Ended, Listener, NoListener};
use crate::{entropy_seed, Breaker, Budget};

#[cfg(feature = "tokio")]
use tokio_util::sync::CancellationToken;

/// Why a guarded call did not return the operation's value. Says exactly what happened.
///
/// ```
/// use stormguard_std::CallError;
///
/// fn describe(e: &CallError<std::io::Error>) -> String {
///     match e {
///         CallError::Failed(io) => format!("the dependency said: {io}"),
///         CallError::TimedOut { .. } => "the last attempt timed out".into(),
///         CallError::Rejected { rejection, .. } => {
///             format!("not called ({}); try again in {}", rejection.reason, rejection.retry_after)
///         }
///         CallError::DeadlineExceeded { .. } => "out of time".into(),
///         CallError::Cancelled => "cancelled".into(),
///         _ => "something else".into(),
///     }
/// }
/// assert_eq!(describe(&CallError::Cancelled), "cancelled");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError<E> {
    /// The operation's own error stands: the attempts ran out, or it was not retryable.
    Failed(E),
    /// The last attempt was cut off at its attempt timeout, and no retry was left.
    TimedOut {
        /// The error of an earlier attempt, if one returned an error.
        last: Option<E>,
    },
    /// Refused locally (breaker open, half-open full, ramp shedding, isolated, budget empty),
    /// reported after the guarded pause.
    Rejected {
        /// Why, when to ask again (`retry_after`, counted from the end of the pause), the pause
        /// served, and the attempts made.
        rejection: Rejection,
        /// The error of the last attempt, when a retry was refused after a failure.
        last: Option<E>,
    },
    /// The deadline passed, or a retry could not have finished before it.
    DeadlineExceeded {
        /// The error of the last attempt, if one returned an error.
        last: Option<E>,
    },
    /// The caller cancelled (a cancellation token, or the call's future was dropped).
    Cancelled,
}

impl<E> CallError<E> {
    /// When asking again may succeed, for a rejection (counted from the moment the error was
    /// handed over, after the pause). `std::time::Duration::MAX` when only an operator's reset
    /// will help (an isolated breaker).
    ///
    /// ```
    /// let e: stormguard_std::CallError<()> = stormguard_std::CallError::Cancelled;
    /// assert_eq!(e.retry_after(), None);
    /// ```
    #[must_use]
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            CallError::Rejected { rejection, .. } if rejection.retry_after == Duration::MAX => {
                Some(std::time::Duration::MAX)
            }
            CallError::Rejected { rejection, .. } => Some(rejection.retry_after.into()),
            _ => None,
        }
    }

    /// The rejection, if the call was refused.
    ///
    /// ```
    /// let e: stormguard_std::CallError<()> = stormguard_std::CallError::Failed(());
    /// assert!(e.rejection().is_none());
    /// ```
    #[must_use]
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            CallError::Rejected { rejection, .. } => Some(rejection),
            _ => None,
        }
    }

    /// The operation's last error, whatever ended the call.
    ///
    /// ```
    /// let e = stormguard_std::CallError::DeadlineExceeded { last: Some("reset") };
    /// assert_eq!(e.last_error(), Some(&"reset"));
    /// ```
    #[must_use]
    pub fn last_error(&self) -> Option<&E> {
        match self {
            CallError::Failed(e) => Some(e),
            CallError::TimedOut { last }
            | CallError::Rejected { last, .. }
            | CallError::DeadlineExceeded { last } => last.as_ref(),
            CallError::Cancelled => None,
        }
    }

    /// How the call ended, as listeners and metrics see it.
    ///
    /// ```
    /// use stormguard_std::{CallError, Ended};
    /// assert_eq!(CallError::<()>::Cancelled.ended(), Ended::Cancelled);
    /// ```
    #[must_use]
    pub fn ended(&self) -> Ended {
        match self {
            CallError::Failed(_) => Ended::Failed,
            CallError::TimedOut { .. } => Ended::TimedOut,
            CallError::Rejected { rejection, .. } => Ended::Rejected(rejection.reason),
            CallError::DeadlineExceeded { .. } => Ended::DeadlineExceeded,
            CallError::Cancelled => Ended::Cancelled,
        }
    }
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Failed(e) => write!(f, "call failed: {e}"),
            CallError::TimedOut { .. } => f.write_str("call failed: the attempt timed out"),
            CallError::Rejected { rejection, .. } => write!(f, "{rejection}"),
            CallError::DeadlineExceeded { .. } => f.write_str("call deadline exceeded"),
            CallError::Cancelled => f.write_str("call cancelled"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display + 'static> std::error::Error for CallError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        None
    }
}

/// What one call may add to its policy: a classifier, a cancellation token, a tighter
/// deadline. Built from [`CallOptions::new`] (every `Err` transient, no token, the policy's
/// deadline) and passed to [`Policy::call_with`] or [`Policy::call_blocking_with`].
///
/// ```
/// use stormguard_core::Outcome;
/// use stormguard_std::CallOptions;
/// use tokio_util::sync::CancellationToken;
///
/// let shutdown = CancellationToken::new();
/// let options = CallOptions::new()
///     .classify(|r: &Result<u16, std::io::Error>| match r {
///         Ok(_) => Outcome::Success,
///         Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Outcome::Permanent,
///         Err(_) => Outcome::Transient,
///     })
///     .cancel_on(&shutdown)
///     .within(std::time::Duration::from_millis(500));
/// # let _ = options;
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
pub struct CallOptions<'a, C = EveryErrorTransient> {
    classify: C,
    #[cfg(feature = "tokio")]
    cancel: Option<&'a CancellationToken>,
    #[cfg(not(feature = "tokio"))]
    cancel: Option<std::marker::PhantomData<&'a ()>>,
    deadline: Option<Instant>,
    within: Option<Duration>,
    single_attempt: bool,
}

impl CallOptions<'_> {
    /// Every `Err` transient, no cancellation token (dropping the call's future still cancels
    /// it), the policy's deadline.
    pub const fn new() -> Self {
        CallOptions {
            classify: EveryErrorTransient,
            cancel: None,
            deadline: None,
            within: None,
            single_attempt: false,
        }
    }
}

impl Default for CallOptions<'_> {
    fn default() -> Self {
        CallOptions::new()
    }
}

impl<'a, C> CallOptions<'a, C> {
    /// Classifies each attempt's result with `classify` (a [`Classify`], e.g. a closure
    /// `|r: &Result<T, E>| -> Outcome`, or [`Http`](crate::Http)).
    ///
    /// ```
    /// use stormguard_core::Outcome;
    /// let o = stormguard_std::CallOptions::new().classify(|_: &Result<(), ()>| Outcome::Success);
    /// # let _ = o;
    /// ```
    pub fn classify<C2>(self, classify: C2) -> CallOptions<'a, C2> {
        CallOptions {
            classify,
            cancel: self.cancel,
            deadline: self.deadline,
            within: self.within,
            single_attempt: self.single_attempt,
        }
    }

    /// Cancels the call when `token` is cancelled: an attempt in flight is dropped and reported
    /// as [`Outcome::Cancelled`] (never counted against the dependency, never retried), and a
    /// backoff wait or the rejection pause ends at once. The call returns
    /// [`CallError::Cancelled`]. (The token's own API takes its internal mutex; a call without
    /// a token takes no lock.)
    ///
    /// ```
    /// let token = tokio_util::sync::CancellationToken::new();
    /// let o = stormguard_std::CallOptions::new().cancel_on(&token);
    /// # let _ = o;
    /// ```
    #[cfg(feature = "tokio")]
    pub fn cancel_on(mut self, token: &'a CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Ends the call by `at` at the latest (an instant of the policy's clock, e.g. a deadline
    /// propagated from the caller); a later one than the policy's own deadline changes nothing.
    ///
    /// ```
    /// use stormguard_std::{Clock, TokioClock};
    /// let at = TokioClock::global().now() + stormguard_core::Duration::from_secs(2);
    /// let o = stormguard_std::CallOptions::new().deadline(at);
    /// # let _ = o;
    /// ```
    pub fn deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(at);
        self
    }

    /// Ends the call within `d` of its start at the latest (a later end than the policy's own
    /// deadline changes nothing).
    ///
    /// ```
    /// let o = stormguard_std::CallOptions::new().within(std::time::Duration::from_millis(250));
    /// # let _ = o;
    /// ```
    pub fn within(mut self, d: impl Into<Duration>) -> Self {
        self.within = Some(d.into());
        self
    }

    /// Makes at most one attempt (the operation cannot be repeated safely, e.g. a request that
    /// is not idempotent): the policy's deadline, attempt timeout and breaker still apply.
    ///
    /// ```
    /// let o = stormguard_std::CallOptions::new().single_attempt();
    /// # let _ = o;
    /// ```
    pub fn single_attempt(mut self) -> Self {
        self.single_attempt = true;
        self
    }
}

/// The breaker side of a policy's calls: its shared breaker, or none.
pub(crate) enum Admit<'a> {
    Breaker(&'a SharedBreaker),
    Unguarded(Unguarded),
}

impl Admission for Admit<'_> {
    #[inline]
    fn name(&self) -> &Name {
        match self {
            Admit::Breaker(b) => b.name(),
            Admit::Unguarded(u) => Admission::name(u),
        }
    }
    #[inline]
    fn try_acquire(
        &mut self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        match self {
            Admit::Breaker(b) => b.try_acquire(now, attempt_timeout, &mut |e| events(e)),
            Admit::Unguarded(u) => u.try_acquire(now, attempt_timeout, events),
        }
    }
    #[inline]
    fn check(&self, now: Instant) -> Result<(), Refused> {
        match self {
            Admit::Breaker(b) => b.check(now),
            Admit::Unguarded(u) => u.check(now),
        }
    }
    #[inline]
    fn on_outcome(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        match self {
            Admit::Breaker(b) => b.on_outcome(now, permit, outcome, &mut |e| events(e)),
            Admit::Unguarded(u) => Admission::on_outcome(u, now, permit, outcome, events),
        }
    }
    #[inline]
    fn release(&mut self, permit: Permit) {
        match self {
            Admit::Breaker(b) => b.release(permit),
            Admit::Unguarded(u) => u.release(permit),
        }
    }
    #[inline]
    fn normal_latency(&self, now: Instant) -> Option<Duration> {
        match self {
            Admit::Breaker(b) => b.normal_latency(now),
            Admit::Unguarded(u) => u.normal_latency(now),
        }
    }
}

/// The budget side of a policy's calls: its shared budget, or none.
pub(crate) enum Funds<'a> {
    Budget(&'a SharedBudget),
    Unlimited,
}

impl Funding for Funds<'_> {
    #[inline]
    fn name(&self) -> Option<&Name> {
        match self {
            Funds::Budget(b) => Some(b.settings().name()),
            Funds::Unlimited => None,
        }
    }
    #[inline]
    fn try_fund_retry(&mut self, now: Instant) -> Result<(), Refused> {
        match self {
            Funds::Budget(b) => b.try_withdraw(now),
            Funds::Unlimited => Unlimited.try_fund_retry(now),
        }
    }
    #[inline]
    fn on_outcome(&mut self, now: Instant, outcome: Outcome) {
        match self {
            Funds::Budget(b) => b.on_outcome(now, outcome),
            Funds::Unlimited => Funding::on_outcome(&mut Unlimited, now, outcome),
        }
    }
}

/// Gives an attempt's permit back if the call is dropped before the attempt's outcome is
/// reported, so a half-open probe slot never leaks.
pub(crate) struct PermitGuard<'a> {
    breaker: Option<&'a SharedBreaker>,
    permit: Option<Permit>,
}

impl<'a> PermitGuard<'a> {
    #[inline]
    pub(crate) fn new(breaker: Option<&'a SharedBreaker>, permit: Permit) -> Self {
        PermitGuard {
            breaker,
            permit: Some(permit),
        }
    }

    /// The permit, to report its outcome with: the guard no longer releases it.
    #[inline]
    pub(crate) fn disarm(mut self) -> Option<Permit> {
        self.permit.take()
    }
}

impl Drop for PermitGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if let (Some(breaker), Some(permit)) = (self.breaker, self.permit.take()) {
            breaker.release(permit);
        }
    }
}

/// Reports the call to the listener when it ends, however it ends (a dropped call's future
/// reports [`Ended::Cancelled`]).
pub(crate) struct Report<'a, L: Listener> {
    listener: &'a L,
    name: &'a Name,
    pub(crate) attempts: u32,
    pub(crate) ended: Ended,
}

impl<'a, L: Listener> Report<'a, L> {
    #[inline]
    pub(crate) fn new(listener: &'a L, name: &'a Name) -> Self {
        Report {
            listener,
            name,
            attempts: 0,
            ended: Ended::Cancelled,
        }
    }

    #[inline]
    pub(crate) fn attempt(&mut self, attempt: u32) {
        self.attempts = attempt;
        self.listener.on_attempt(self.name, attempt);
    }

    #[inline]
    pub(crate) fn end<T, E>(mut self, result: Result<T, CallError<E>>) -> Result<T, CallError<E>> {
        self.ended = match &result {
            Ok(_) => Ended::Succeeded,
            Err(e) => e.ended(),
        };
        result
    }
}

impl<L: Listener> Drop for Report<'_, L> {
    #[inline]
    fn drop(&mut self) {
        self.listener.on_call(self.name, self.attempts, self.ended);
    }
}

/// The call's result from how the core says it finished and the last attempt's result.
pub(crate) fn finish<T, E>(
    finished: Finished,
    last: Option<Result<T, E>>,
) -> Result<T, CallError<E>> {
    let last_error = |last: Option<Result<T, E>>| last.and_then(Result::err);
    match finished {
        Finished::Failed(Outcome::TimedOut) => Err(CallError::TimedOut {
            last: last_error(last),
        }),
        // The classifier decides what counts as success: an `Err` it calls a success comes
        // back as the operation's error, and an `Ok` it calls a failure comes back as the value
        // once no retry is left.
        Finished::Succeeded | Finished::Failed(_) => match last {
            Some(Ok(value)) => Ok(value),
            Some(Err(e)) => Err(CallError::Failed(e)),
            // The core finishes a call as succeeded or failed only after an attempt returned.
            None => Err(CallError::Cancelled),
        },
        Finished::DeadlineExceeded { .. } => Err(CallError::DeadlineExceeded {
            last: last_error(last),
        }),
        Finished::Rejected(rejection) => Err(CallError::Rejected {
            rejection,
            last: last_error(last),
        }),
        Finished::Cancelled => Err(CallError::Cancelled),
    }
}

/// What an attempt knows when it starts.
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt {
    /// 1 for the first attempt.
    pub(crate) number: u32,
    /// The time left until the call's deadline, at the attempt's start.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) call_left: Option<Duration>,
}

enum Choice<T> {
    Default,
    Given(T),
    Off,
}

/// Builds a [`Policy`]: its name, breaker, budget, retries, deadline, attempt timeout,
/// backoff, clock and listener. Every value is validated by [`PolicyBuilder::build`].
///
/// By default a policy gets a breaker and a retry budget of its own with the defaults of the
/// design (5 consecutive failures, relative error rate and slow calls; a tenth of a retry per
/// success with a floor of 3 per second), 3 attempts, a 30 s deadline, a 10 s attempt timeout
/// and exponential backoff from 100 ms with full jitter seeded from the process's entropy.
///
/// ```
/// use std::time::Duration;
/// use stormguard_core::BreakerSettings;
/// use stormguard_std::{Breaker, Budget, Policy};
///
/// let breaker = Breaker::new(BreakerSettings::defaults("payments"));
/// let budget = Budget::defaults("payments-and-refunds"); // shared with another policy
/// let policy = Policy::builder("payments")
///     .breaker(breaker)
///     .budget(budget.clone())
///     .max_attempts(4)
///     .deadline(Duration::from_secs(2))
///     .attempt_timeout(Duration::from_millis(500))
///     .build()?;
/// assert_eq!(policy.settings().max_attempts(), 4);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[must_use]
pub struct PolicyBuilder<K = DefaultClock, L = NoListener> {
    name: Name,
    breaker: Choice<Breaker>,
    budget: Choice<Budget>,
    call: CallSettingsBuilder,
    clock: K,
    listener: L,
}

impl<K, L> PolicyBuilder<K, L> {
    /// Guards calls with `breaker` (shared with whoever else holds a clone).
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = Choice::Given(breaker);
        self
    }

    /// Guards calls with a new breaker built from `settings`.
    ///
    /// ```
    /// use stormguard_core::BreakerSettings;
    /// let p = stormguard_std::Policy::builder("db")
    ///     .breaker_settings(BreakerSettings::consecutive_only("db", 3)?)
    ///     .build()?;
    /// assert_eq!(p.breaker().unwrap().settings().consecutive_failures(), 3);
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn breaker_settings(self, settings: BreakerSettings) -> Self {
        self.breaker(Breaker::new(settings))
    }

    /// No breaker: every attempt is admitted (the retry budget, attempts and deadline still
    /// bound the calls).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_breaker().build()?;
    /// assert!(p.breaker().is_none());
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn no_breaker(mut self) -> Self {
        self.breaker = Choice::Off;
        self
    }

    /// Bounds retries with `budget` (asked before every retry, never before a first attempt).
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = Choice::Given(budget);
        self
    }

    /// Bounds retries with a new budget built from `settings`.
    ///
    /// ```
    /// use stormguard_core::BudgetSettings;
    /// let p = stormguard_std::Policy::builder("db")
    ///     .budget_settings(BudgetSettings::builder("db").floor_per_second(1.0).build()?)
    ///     .build()?;
    /// assert_eq!(p.budget().unwrap().settings().capacity(), 10);
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn budget_settings(self, settings: BudgetSettings) -> Self {
        self.budget(Budget::new(settings))
    }

    /// No retry budget: retries are bounded by the attempts and the deadline only.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_budget().build()?;
    /// assert!(p.budget().is_none());
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn no_budget(mut self) -> Self {
        self.budget = Choice::Off;
        self
    }

    /// Takes the retry settings from `settings` (attempts, deadline, attempt timeout,
    /// backoff); the jitter seed stays the builder's.
    ///
    /// ```
    /// use stormguard_core::CallSettings;
    /// let p = stormguard_std::Policy::builder("worker").settings(CallSettings::worker()).build()?;
    /// assert_eq!(p.settings().max_attempts(), 10);
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn settings(mut self, settings: CallSettings) -> Self {
        self.call = self
            .call
            .max_attempts(settings.max_attempts())
            .deadline(settings.deadline())
            .attempt_timeout(settings.attempt_timeout())
            .backoff(*settings.backoff());
        self
    }

    /// Attempts per call, the first included (default 3; at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.call = self.call.max_attempts(n);
        self
    }

    /// The deadline per call (default 30 s).
    pub fn deadline(mut self, d: impl Into<Duration>) -> Self {
        self.call = self.call.deadline(Some(d.into()));
        self
    }

    /// No deadline per call (the attempts and attempt timeout still bound it).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_deadline().build()?;
    /// assert_eq!(p.settings().deadline(), None);
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn no_deadline(mut self) -> Self {
        self.call = self.call.deadline(None);
        self
    }

    /// The timeout per attempt (default 10 s).
    pub fn attempt_timeout(mut self, d: impl Into<Duration>) -> Self {
        self.call = self.call.attempt_timeout(Some(d.into()));
        self
    }

    /// No timeout per attempt (the deadline still bounds it).
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").no_attempt_timeout().build()?;
    /// assert_eq!(p.settings().attempt_timeout(), None);
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn no_attempt_timeout(mut self) -> Self {
        self.call = self.call.attempt_timeout(None);
        self
    }

    /// The backoff between attempts (default [`Backoff::DEFAULT`]).
    ///
    /// ```
    /// use stormguard_core::Backoff;
    /// let p = stormguard_std::Policy::builder("worker").backoff(Backoff::worker()).build()?;
    /// assert_eq!(p.settings().backoff(), &Backoff::worker());
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.call = self.call.backoff(backoff);
        self
    }

    /// The jitter seed (default: from the process's entropy, see
    /// [`entropy_seed`](crate::entropy_seed)). Fix it for reproducible tests.
    ///
    /// ```
    /// let p = stormguard_std::Policy::builder("db").seed(42).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.call = self.call.seed(seed);
        self
    }

    /// Reads `clock` instead of the process-wide [`DefaultClock`]. The breaker and budget must
    /// see one time base: give a policy on another clock breakers and budgets of its own (or
    /// read them with the handles' `_at` methods and that clock).
    ///
    /// ```
    /// use stormguard_std::{ManualClock, Policy};
    /// let clock = ManualClock::new();
    /// let p = Policy::builder("db").clock(clock.clone()).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn clock<K2>(self, clock: K2) -> PolicyBuilder<K2, L> {
        PolicyBuilder {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            call: self.call,
            clock,
            listener: self.listener,
        }
    }

    /// Sends every event and call report to `listener` as well as events to `tracing`.
    ///
    /// ```
    /// use stormguard_std::{Metrics, Policy};
    /// let metrics = Metrics::new("db");
    /// let p = Policy::builder("db").listener(metrics.clone()).build()?;
    /// # let _ = p;
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn listener<L2>(self, listener: L2) -> PolicyBuilder<K, L2> {
        PolicyBuilder {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            call: self.call,
            clock: self.clock,
            listener,
        }
    }

    /// Validates every setting and builds the policy.
    ///
    /// ```
    /// use stormguard_core::Field;
    /// let e = stormguard_std::Policy::builder("db").max_attempts(0).build().err().unwrap();
    /// assert_eq!(e.field, Field::MaxAttempts);
    /// ```
    pub fn build(self) -> Result<Policy<K, L>, SettingsError> {
        let breaker = match self.breaker {
            Choice::Default => Some(Breaker::new(
                BreakerSettings::builder_named(self.name).build()?,
            )),
            Choice::Given(b) => Some(b),
            Choice::Off => None,
        };
        let budget = match self.budget {
            Choice::Default => Some(Budget::new(
                BudgetSettings::builder_named(self.name).build()?,
            )),
            Choice::Given(b) => Some(b),
            Choice::Off => None,
        };
        Ok(Policy {
            name: self.name,
            breaker,
            budget,
            settings: self.call.build()?,
            single: self.call.max_attempts(1).build()?,
            clock: self.clock,
            listener: self.listener,
        })
    }
}

/// Retries, deadline, attempt timeout, backoff, breaker and retry budget for one dependency:
/// `policy.call(|attempt| async { ... }).await`.
///
/// A policy holds shared handles ([`Breaker`], [`Budget`]): clones of a policy, and other
/// policies given the same handles, share their state. Everything on the call path is
/// lock-free and allocation-free: the core's atomics, two clock readings per attempt, tokio's
/// timers.
///
/// ```
/// use std::time::Duration;
/// use stormguard_std::{CallError, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), stormguard_core::SettingsError> {
/// let policy = Policy::builder("inventory")
///     .deadline(Duration::from_secs(2))
///     .build()?;
///
/// async fn fetch_stock(item: u32) -> Result<u32, std::io::Error> {
///     Ok(item * 2) // the dependency
/// }
///
/// match policy.call(|_attempt| fetch_stock(21)).await {
///     Ok(stock) => assert_eq!(stock, 42),
///     Err(CallError::Rejected { rejection, .. }) => {
///         println!("inventory is being left alone; ask again in {}", rejection.retry_after);
///     }
///     Err(other) => println!("{other}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Policy<K = DefaultClock, L = NoListener> {
    name: Name,
    breaker: Option<Breaker>,
    budget: Option<Budget>,
    settings: CallSettings,
    /// The same settings with one attempt, for calls that cannot be repeated.
    single: CallSettings,
    clock: K,
    listener: L,
}

impl Policy {
    /// A builder for a policy named `name` (the name its breaker, budget and events carry,
    /// unless given breakers and budgets have their own).
    pub fn builder(name: &'static str) -> PolicyBuilder {
        Policy::builder_named(Name::new(name))
    }

    /// A builder for a policy named `name`, e.g. from a configuration file.
    ///
    /// ```
    /// use stormguard_core::Name;
    /// let name = Name::try_from_str(&String::from("orders")).unwrap();
    /// let p = stormguard_std::Policy::builder_named(name).build()?;
    /// assert_eq!(p.name().as_str(), "orders");
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn builder_named(name: Name) -> PolicyBuilder {
        PolicyBuilder {
            name,
            breaker: Choice::Default,
            budget: Choice::Default,
            call: CallSettings::builder().seed(entropy_seed()),
            clock: default_clock(),
            listener: NoListener,
        }
    }
}

impl<K, L> Policy<K, L> {
    /// The policy's name.
    #[must_use]
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The breaker guarding the calls, if any.
    #[must_use]
    pub fn breaker(&self) -> Option<&Breaker> {
        self.breaker.as_ref()
    }

    /// The retry budget, if any.
    #[must_use]
    pub fn budget(&self) -> Option<&Budget> {
        self.budget.as_ref()
    }

    /// How calls retry and how long they may take.
    #[must_use]
    pub fn settings(&self) -> &CallSettings {
        &self.settings
    }

    /// The clock the policy reads.
    #[must_use]
    pub fn clock(&self) -> &K {
        &self.clock
    }

    /// The listener events go to.
    #[must_use]
    pub fn listener(&self) -> &L {
        &self.listener
    }

    /// The same policy (same breaker and budget) with another listener.
    ///
    /// ```
    /// use stormguard_std::{Metrics, Policy};
    /// let p = Policy::builder("db").build()?;
    /// let counted = p.clone().with_listener(Metrics::for_policy(&p));
    /// # let _ = counted;
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn with_listener<L2>(self, listener: L2) -> Policy<K, L2> {
        Policy {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            settings: self.settings,
            single: self.single,
            clock: self.clock,
            listener,
        }
    }

    pub(crate) fn parts(&self) -> Parts<Admit<'_>, Funds<'_>> {
        Parts {
            breaker: match &self.breaker {
                Some(b) => Admit::Breaker(b.shared()),
                None => Admit::Unguarded(Unguarded(self.name)),
            },
            budget: match &self.budget {
                Some(b) => Funds::Budget(b.shared()),
                None => Funds::Unlimited,
            },
        }
    }

    pub(crate) fn shared_breaker(&self) -> Option<&SharedBreaker> {
        self.breaker.as_ref().map(Breaker::shared)
    }

    /// The call driver for a call starting at `now` with `options`' deadline.
    pub(crate) fn begin<C>(&self, options: &CallOptions<'_, C>, now: Instant) -> Call {
        let settings = if options.single_attempt {
            &self.single
        } else {
            &self.settings
        };
        let mut call = Call::begin(settings, now);
        if let Some(at) = options.deadline {
            call = call.with_deadline(at);
        }
        if let Some(d) = options.within {
            call = call.with_deadline(now.saturating_add(d));
        }
        call
    }
}

impl<K: Clock, L: Listener> Policy<K, L> {
    /// Forces the breaker open until [`Policy::reset`]; the event goes to `tracing` and the
    /// listener. Does nothing without a breaker.
    ///
    /// ```
    /// use stormguard_core::State;
    /// let p = stormguard_std::Policy::builder("db").build()?;
    /// p.isolate();
    /// assert_eq!(p.breaker().unwrap().state(), State::Isolated);
    /// p.reset();
    /// assert_eq!(p.breaker().unwrap().state(), State::Closed);
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn isolate(&self) {
        if let Some(b) = &self.breaker {
            b.shared().isolate(self.clock.now(), &mut |e| self.emit(&e));
        }
    }

    /// Closes the breaker (the learned baselines stay); the event goes to `tracing` and the
    /// listener.
    pub fn reset(&self) {
        if let Some(b) = &self.breaker {
            b.shared().reset(self.clock.now(), &mut |e| self.emit(&e));
        }
    }

    #[inline]
    pub(crate) fn emit(&self, event: &Event<'_>) {
        events::emit(&self.listener, event);
    }

    /// Runs `op` under the policy, blocking the thread, with no async runtime: `op(attempt)`
    /// (1 for the first attempt) makes one attempt; `Ok` is a success, every `Err` a transient
    /// failure. Waits and the guarded pause are `std::thread` sleeps.
    ///
    /// An attempt cannot be interrupted: one that returns after its attempt timeout counts as
    /// [`Outcome::TimedOut`] unless it succeeded (the value is in hand; the breaker sees a slow
    /// call). Set the operation's own I/O timeout to the policy's attempt timeout.
    ///
    /// ```
    /// use stormguard_std::Policy;
    ///
    /// let policy = Policy::builder("config-file").build()?;
    /// let mut tries = 0;
    /// let text = policy.call_blocking(|_attempt| {
    ///     tries += 1;
    ///     if tries < 2 { Err("busy") } else { Ok("port = 8080") }
    /// });
    /// assert_eq!(text, Ok("port = 8080"));
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn call_blocking<T, E, F>(&self, op: F) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Result<T, E>,
    {
        self.call_blocking_with(CallOptions::new(), op)
    }

    /// [`Policy::call_blocking`] with per-call [`CallOptions`]: a classifier, a cancellation
    /// token (it ends a wait or the pause at once; it is checked before every attempt), a
    /// deadline.
    ///
    /// ```
    /// use stormguard_std::{CallError, CallOptions, Policy};
    /// use tokio_util::sync::CancellationToken;
    ///
    /// let policy = Policy::builder("disk").build()?;
    /// let stop = CancellationToken::new();
    /// stop.cancel();
    /// let r = policy.call_blocking_with(CallOptions::new().cancel_on(&stop), |_| Ok::<_, ()>(1));
    /// assert_eq!(r, Err(CallError::Cancelled));
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn call_blocking_with<T, E, F, C>(
        &self,
        options: CallOptions<'_, C>,
        mut op: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Result<T, E>,
        C: Classify<T, E>,
    {
        let mut parts = self.parts();
        let mut sink = |e: Event<'_>| self.emit(&e);
        let mut report = Report::new(&self.listener, &self.name);
        let mut now = self.clock.now();
        let mut call = self.begin(&options, now);
        let mut last: Option<Result<T, E>> = None;
        let result = loop {
            match call.poll(&mut parts, now, &mut sink) {
                Step::Attempt(permit) => {
                    let guard = PermitGuard::new(self.shared_breaker(), permit);
                    if blocking::is_cancelled(&options) {
                        drop(guard);
                        call.cancel();
                        break Err(CallError::Cancelled);
                    }
                    report.attempt(call.attempts());
                    let result = op(call.attempts());
                    now = self.clock.now();
                    let mut outcome = options.classify.classify(&result);
                    let late = call.attempt_deadline().is_some_and(|at| now >= at);
                    if late && outcome != Outcome::Success {
                        outcome = Outcome::TimedOut;
                    }
                    last = Some(result);
                    if let Some(permit) = guard.disarm() {
                        call.complete(&mut parts, permit, now, outcome, &mut sink);
                    }
                }
                Step::Wait(wait) => {
                    if blocking::sleep(wait, &options) == Slept::Cancelled {
                        call.cancel();
                        break Err(CallError::Cancelled);
                    }
                    now = self.clock.now();
                }
                Step::Reject(rejection) => {
                    // Announced (the core emitted `Rejected` with this pause), then served.
                    if blocking::sleep(rejection.pause, &options) == Slept::Cancelled {
                        break Err(CallError::Cancelled);
                    }
                    break Err(CallError::Rejected {
                        rejection,
                        last: last.and_then(Result::err),
                    });
                }
                Step::Done(finished) => break finish(finished, last),
            }
        };
        report.end(result)
    }
}

/// How a cancellable sleep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slept {
    Elapsed,
    Cancelled,
}

mod blocking {
    //! Sleeps for the blocking form: `std::thread` sleeps, cancellable by a token through a
    //! waker that unparks the sleeping thread.

    use super::{CallOptions, Slept};
    use stormguard_core::Duration;

    #[cfg(feature = "tokio")]
    pub(super) fn is_cancelled<C>(options: &CallOptions<'_, C>) -> bool {
        options.cancel.is_some_and(|t| t.is_cancelled())
    }

    #[cfg(not(feature = "tokio"))]
    pub(super) fn is_cancelled<C>(_: &CallOptions<'_, C>) -> bool {
        false
    }

    #[cfg(feature = "tokio")]
    pub(super) fn sleep<C>(d: Duration, options: &CallOptions<'_, C>) -> Slept {
        use std::future::Future;
        use std::sync::Arc;
        use std::task::{Context, Wake, Waker};

        struct Unpark(std::thread::Thread);

        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
            fn wake_by_ref(self: &Arc<Self>) {
                self.0.unpark();
            }
        }

        thread_local! {
            static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        }

        let Some(token) = options.cancel else {
            std::thread::sleep(d.into());
            return Slept::Elapsed;
        };
        let start = std::time::Instant::now();
        let d: std::time::Duration = d.into();
        let mut cancelled = std::pin::pin!(token.cancelled());
        WAKER.with(|waker| {
            let mut cx = Context::from_waker(waker);
            loop {
                if cancelled.as_mut().poll(&mut cx).is_ready() {
                    return Slept::Cancelled;
                }
                let Some(left) = d.checked_sub(start.elapsed()).filter(|l| !l.is_zero()) else {
                    return Slept::Elapsed;
                };
                std::thread::park_timeout(left);
            }
        })
    }

    #[cfg(not(feature = "tokio"))]
    pub(super) fn sleep<C>(d: Duration, _: &CallOptions<'_, C>) -> Slept {
        std::thread::sleep(d.into());
        Slept::Elapsed
    }
}

#[cfg(feature = "tokio")]
mod run {
    //! The async form, on tokio's timers.

    use std::future::{poll_fn, Future};
    use std::pin::pin;
    use std::task::Poll;

    use stormguard_core::{Duration, Event, Instant, Outcome, Rejection, Step};
    use tokio_util::sync::CancellationToken;

    use super::{finish, Attempt, CallError, CallOptions, PermitGuard, Policy, Report, Slept};
    use crate::cache::SuccessCache;
    use crate::classify::Classify;
    use crate::clock::Clock;
    use crate::events::{Ended, Listener};

    /// How an attempt's race ended.
    enum Ran<R> {
        Returned(R),
        Cancelled,
        TimedOut,
    }

    /// Runs `fut` until it returns, `cancel` is cancelled, or `timeout` passes. The operation
    /// is polled first: a ready future costs no timer and no token check.
    async fn race<F: Future>(
        fut: F,
        cancel: Option<&CancellationToken>,
        timeout: Option<Duration>,
    ) -> Ran<F::Output> {
        let mut fut = pin!(fut);
        let mut cancelled = pin!(None);
        let mut timer = pin!(None::<tokio::time::Sleep>);
        poll_fn(|cx| {
            if let Poll::Ready(r) = fut.as_mut().poll(cx) {
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
        })
        .await
    }

    /// Sleeps `d` on tokio's timer, or until `cancel` is cancelled (checked first). A zero
    /// sleep does not yield.
    async fn sleep(d: Duration, cancel: Option<&CancellationToken>) -> Slept {
        match cancel {
            Some(token) if token.is_cancelled() => Slept::Cancelled,
            _ if d.is_zero() => Slept::Elapsed,
            None => {
                tokio::time::sleep(d.into()).await;
                Slept::Elapsed
            }
            Some(token) => {
                let mut cancelled = pin!(token.cancelled());
                let mut timer = pin!(tokio::time::sleep(d.into()));
                poll_fn(|cx| {
                    if cancelled.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Slept::Cancelled);
                    }
                    timer.as_mut().poll(cx).map(|()| Slept::Elapsed)
                })
                .await
            }
        }
    }

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
        /// Dropping the returned future cancels the call at once, wherever it is: an attempt
        /// in flight gives its half-open probe slot back (a drop guard releases its permit), a
        /// wait or pause simply ends. Cancellation never counts as a failure.
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), stormguard_core::SettingsError> {
        /// let policy = stormguard_std::Policy::builder("search").build()?;
        /// let hits = policy
        ///     .call(|attempt| async move { Ok::<_, std::io::Error>(attempt * 10) })
        ///     .await;
        /// assert_eq!(hits.unwrap(), 10);
        /// # Ok(()) }
        /// ```
        pub async fn call<T, E, F, Fut>(&self, mut op: F) -> Result<T, CallError<E>>
        where
            F: FnMut(u32) -> Fut,
            Fut: Future<Output = Result<T, E>>,
        {
            let now = self.clock.now();
            self.run(now, CallOptions::new(), |a: Attempt| Some(op(a.number)))
                .await
                .0
        }

        /// [`Policy::call`] with per-call [`CallOptions`]: a classifier, a cancellation token,
        /// a deadline.
        ///
        /// ```
        /// use stormguard_core::Outcome;
        /// use stormguard_std::{CallError, CallOptions, Policy};
        /// use tokio_util::sync::CancellationToken;
        ///
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), stormguard_core::SettingsError> {
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
            let now = self.clock.now();
            self.run(now, options, |a: Attempt| Some(op(a.number)))
                .await
                .0
        }

        /// [`Policy::call`] with a fallback for refusals: when the call is refused (breaker
        /// open, half-open full, ramp shedding, isolated, budget empty), `fallback` gives the
        /// value instead, after the same guarded pause, so a polling loop with a fallback
        /// cannot spin either. A failure of the dependency is not a refusal: it reaches the
        /// caller as the failure it is (DESIGN.md, "Decisions").
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
        /// # async fn main() -> Result<(), stormguard_core::SettingsError> {
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
        /// # async fn main() -> Result<(), stormguard_core::SettingsError> {
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
        /// `cache` holds a fresh success, it is returned without calling (no attempt, no
        /// breaker, no budget); otherwise the call runs, and a value the classifier called a
        /// success is stored at the instant the call ended. Errors, rejections and fallback
        /// values are never cached. The rule is [`CacheRule`](crate::CacheRule).
        ///
        /// ```
        /// use std::sync::atomic::{AtomicU32, Ordering};
        /// use stormguard_core::Duration;
        /// use stormguard_std::{Policy, SuccessCache};
        ///
        /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
        /// # async fn main() -> Result<(), stormguard_core::SettingsError> {
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
        /// use stormguard_core::Duration;
        /// use stormguard_std::{CallOptions, SuccessCache};
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), stormguard_core::SettingsError> {
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
            let now = self.clock.now();
            if let Some(value) = cache.get(now) {
                self.listener.on_call(&self.name, 0, Ended::Cached);
                return Ok(value);
            }
            let (result, stored) = self
                .run(now, options, |a: Attempt| Some(op(a.number)))
                .await;
            if let (Ok(value), Some(at)) = (&result, stored) {
                cache.store(at, value.clone());
            }
            result
        }

        /// The call loop: poll the core, do what it says. `op` returns `None` when it cannot
        /// make the attempt (a permanent outcome). Returns the result and, when the last
        /// attempt was classified a success, the instant it ended (for the cache).
        pub(crate) async fn run<T, E, F, Fut, C>(
            &self,
            start: Instant,
            options: CallOptions<'_, C>,
            mut op: F,
        ) -> (Result<T, CallError<E>>, Option<Instant>)
        where
            F: FnMut(Attempt) -> Option<Fut>,
            Fut: Future<Output = Result<T, E>>,
            C: Classify<T, E>,
        {
            let cancel = options.cancel;
            let mut parts = self.parts();
            let mut sink = |e: Event<'_>| self.emit(&e);
            let mut report = Report::new(&self.listener, &self.name);
            let mut now = start;
            let mut call = self.begin(&options, now);
            let mut last: Option<Result<T, E>> = None;
            let mut succeeded_at = None;
            let result = loop {
                match call.poll(&mut parts, now, &mut sink) {
                    Step::Attempt(permit) => {
                        let guard = PermitGuard::new(self.shared_breaker(), permit);
                        let number = call.attempts();
                        report.attempt(number);
                        let attempt = Attempt {
                            number,
                            call_left: call.deadline().map(|d| d.saturating_duration_since(now)),
                        };
                        let timeout = call
                            .attempt_deadline()
                            .map(|d| d.saturating_duration_since(now));
                        let outcome = match op(attempt) {
                            Some(fut) => {
                                let ran = race(fut, cancel, timeout).await;
                                now = self.clock.now();
                                match ran {
                                    Ran::Returned(result) => {
                                        let outcome = options.classify.classify(&result);
                                        last = Some(result);
                                        outcome
                                    }
                                    Ran::Cancelled => Outcome::Cancelled,
                                    Ran::TimedOut => Outcome::TimedOut,
                                }
                            }
                            // The operation cannot be attempted again (a request that cannot
                            // be replayed): a permanent outcome, so the call ends here.
                            None => Outcome::Permanent,
                        };
                        succeeded_at = (outcome == Outcome::Success).then_some(now);
                        if let Some(permit) = guard.disarm() {
                            call.complete(&mut parts, permit, now, outcome, &mut sink);
                        }
                    }
                    Step::Wait(wait) => {
                        if sleep(wait, cancel).await == Slept::Cancelled {
                            call.cancel();
                            break Err(CallError::Cancelled);
                        }
                        now = self.clock.now();
                    }
                    Step::Reject(rejection) => {
                        // Announced (the core emitted `Rejected` with this pause), then served.
                        if sleep(rejection.pause, cancel).await == Slept::Cancelled {
                            break Err(CallError::Cancelled);
                        }
                        break Err(CallError::Rejected {
                            rejection,
                            last: last.and_then(Result::err),
                        });
                    }
                    Step::Done(finished) => break finish(finished, last),
                }
            };
            let stored = if result.is_ok() { succeeded_at } else { None };
            (report.end(result), stored)
        }
    }
}
