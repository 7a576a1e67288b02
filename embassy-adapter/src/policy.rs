//! `policy.call(|attempt| async { ... }).await`: the core's call driver, run on embassy.
//!
//! The loop is the one in the design (DESIGN.md, "The core is sans-IO"): ask the core's
//! [`Call`] what to do next, do it, report back. Every decision (admit, retry, wait how long,
//! refuse, give up) is the core's; this module reads embassy's clock, runs the operation against
//! its attempt deadline, sleeps cancellably and delivers events.

use core::fmt;
use core::future::Future;
use core::pin::pin;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use embassy_futures::select::{select3, Either3};
use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_time::Timer;
use stormguard_core::{
    Call, CallSettings, Event, Finished, Funding, Instant, Name, Outcome, Parts, Permit, Refused,
    Rejection, Step, Unlimited,
};

use crate::events::{self, Listener, NoListener};
use crate::sleep::{sleep_until, Never, Slept};
use crate::time::{to_core_instant, to_embassy_duration, to_embassy_instant};
use crate::{Breaker, Budget, BudgetRef, CoreBreaker, EmbassyClock};

/// Decides how an attempt's result counts: the caller's classification of what happened.
/// Implemented by [`EveryErrorTransient`] (the default) and by every
/// `Fn(&Result<T, E>) -> Outcome`.
///
/// ```
/// use stormguard_core::Outcome;
/// use stormguard_embassy::Classify;
///
/// #[derive(Debug)]
/// enum I2cError { Nack, Busy, BadRegister }
///
/// // A NACK means the sensor is asleep or gone (counts against it); a bad register address is
/// // our bug (never retried); a busy bus is another driver's doing (retried, not counted).
/// let classify = |r: &Result<u16, I2cError>| match r {
///     Ok(_) => Outcome::Success,
///     Err(I2cError::Nack) => Outcome::Transient,
///     Err(I2cError::Busy) => Outcome::Throttled { retry_after: None },
///     Err(I2cError::BadRegister) => Outcome::Permanent,
/// };
/// assert_eq!(classify.classify(&Err(I2cError::BadRegister)), Outcome::Permanent);
/// ```
pub trait Classify<T, E> {
    /// How `result` counts.
    fn classify(&self, result: &Result<T, E>) -> Outcome;
}

/// The default classification: `Ok` is a success, every `Err` a transient failure.
///
/// ```
/// use stormguard_core::Outcome;
/// use stormguard_embassy::{Classify, EveryErrorTransient};
/// assert_eq!(EveryErrorTransient.classify(&Ok::<u8, ()>(1)), Outcome::Success);
/// assert_eq!(EveryErrorTransient.classify(&Err::<u8, ()>(())), Outcome::Transient);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EveryErrorTransient;

impl<T, E> Classify<T, E> for EveryErrorTransient {
    fn classify(&self, result: &Result<T, E>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Transient,
        }
    }
}

impl<T, E, F: Fn(&Result<T, E>) -> Outcome> Classify<T, E> for F {
    fn classify(&self, result: &Result<T, E>) -> Outcome {
        self(result)
    }
}

/// What one call may add to its policy: a classifier, a cancellation, a tighter deadline.
/// Built from [`CallOptions::new`] (every `Err` transient, not cancellable, the policy's
/// deadline) and passed to [`Policy::call_with`].
///
/// ```
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
/// use embassy_sync::signal::Signal;
/// use embassy_time::{Duration, Instant};
/// use stormguard_core::Outcome;
/// use stormguard_embassy::CallOptions;
///
/// static STOP: Signal<CriticalSectionRawMutex, ()> = Signal::new();
///
/// # fn f() {
/// let options = CallOptions::new()
///     .classify(|r: &Result<u16, ()>| if r.is_ok() { Outcome::Success } else { Outcome::Transient })
///     .cancel_on(STOP.wait())
///     .deadline(Instant::now() + Duration::from_millis(500));
/// # let _ = options;
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
pub struct CallOptions<C = EveryErrorTransient, X = Never> {
    classify: C,
    cancel: X,
    deadline: Option<embassy_time::Instant>,
}

impl CallOptions {
    /// Every `Err` transient, not cancellable (other than by dropping the call's future), the
    /// policy's deadline.
    pub const fn new() -> CallOptions {
        CallOptions {
            classify: EveryErrorTransient,
            cancel: Never,
            deadline: None,
        }
    }
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions::new()
    }
}

impl<C, X> CallOptions<C, X> {
    /// Classifies each attempt's result with `classify` (a [`Classify`], e.g. a closure
    /// `|r: &Result<T, E>| -> Outcome`).
    pub fn classify<C2>(self, classify: C2) -> CallOptions<C2, X> {
        CallOptions {
            classify,
            cancel: self.cancel,
            deadline: self.deadline,
        }
    }

    /// Cancels the call when `cancel` finishes (e.g. a `Signal`'s `wait()`): an attempt in
    /// flight is dropped and reported as [`Outcome::Cancelled`] (never counted), and a backoff
    /// wait or the rejection pause ends at once. The call then returns
    /// [`CallError::Cancelled`].
    pub fn cancel_on<X2: Future>(self, cancel: X2) -> CallOptions<C, X2> {
        CallOptions {
            classify: self.classify,
            cancel,
            deadline: self.deadline,
        }
    }

    /// Ends the call by `at` at the latest (a deadline propagated from the caller); a later one
    /// than the policy's own deadline changes nothing.
    pub fn deadline(mut self, at: embassy_time::Instant) -> Self {
        self.deadline = Some(at);
        self
    }
}

/// Why a guarded call did not return the operation's value. Says exactly what happened.
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
    /// The caller cancelled (see [`CallOptions::cancel_on`]).
    Cancelled,
}

impl<E> CallError<E> {
    /// When asking again may succeed, for a rejection, as an embassy duration (to sleep on).
    /// `embassy_time::Duration::MAX` (or centuries, at slow tick rates) means only an
    /// operator's reset will help.
    ///
    /// ```
    /// # use stormguard_embassy::CallError;
    /// let e: CallError<()> = CallError::Cancelled;
    /// assert_eq!(e.retry_after(), None);
    /// ```
    #[must_use]
    pub fn retry_after(&self) -> Option<embassy_time::Duration> {
        match self {
            CallError::Rejected { rejection, .. } => {
                Some(to_embassy_duration(rejection.retry_after))
            }
            _ => None,
        }
    }

    /// The operation's last error, whatever ended the call.
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

impl<E: fmt::Debug + fmt::Display> core::error::Error for CallError<E> {}

#[cfg(feature = "defmt")]
impl<E: defmt::Format> defmt::Format for CallError<E> {
    fn format(&self, f: defmt::Formatter<'_>) {
        match self {
            CallError::Failed(e) => defmt::write!(f, "call failed: {}", e),
            CallError::TimedOut { last } => {
                defmt::write!(f, "call failed: attempt timed out (last {})", last)
            }
            CallError::Rejected { rejection, last } => {
                defmt::write!(f, "call rejected: {} (last {})", rejection, last)
            }
            CallError::DeadlineExceeded { last } => {
                defmt::write!(f, "call deadline exceeded (last {})", last)
            }
            CallError::Cancelled => defmt::write!(f, "call cancelled"),
        }
    }
}

/// Retries, deadline, attempt timeout, backoff, breaker and (optionally) retry budget for one
/// dependency, runnable from any task: `policy.call(|attempt| async { ... }).await`.
///
/// A `Policy` borrows its [`Breaker`] and [`Budget`] (several policies may share a budget) and
/// is built by `const fn`s, so it can be a `static` next to them. The listener type `L`
/// defaults to [`NoListener`]; a plain `fn(&Event<'_>)` pointer works in a `static`. `B` is the
/// breaker's core breaker ([`CoreBreaker`]), the full by-value one by default.
///
/// ```
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
/// use stormguard_core::{BreakerSettings, BudgetSettings, CallSettings, LeanBreaker};
/// use stormguard_embassy::{Breaker, Budget, CallError, NoListener, Policy};
///
/// type Cs = CriticalSectionRawMutex;
///
/// static SENSOR: BreakerSettings = match BreakerSettings::consecutive_only("sensor", 3) {
///     Ok(s) => s,
///     Err(_) => panic!("invalid breaker settings"),
/// };
/// static BREAKER: Breaker<Cs, LeanBreaker> = match Breaker::lean(&SENSOR) {
///     Ok(b) => b,
///     Err(_) => panic!("settings that need statistics"),
/// };
/// static RETRIES: Budget<Cs> = Budget::new(BudgetSettings::defaults("i2c"));
/// static POLICY: Policy<'static, Cs, NoListener, LeanBreaker> =
///     Policy::new(&BREAKER, CallSettings::DEFAULT).with_budget(&RETRIES);
///
/// async fn read_temperature() -> Result<i16, ()> {
///     Ok(215) // the sensor's driver
/// }
///
/// async fn sample() -> Result<i16, CallError<()>> {
///     POLICY.call(|_attempt| read_temperature()).await
/// }
/// ```
pub struct Policy<'a, M: RawMutex, L = NoListener, B = stormguard_core::Breaker> {
    breaker: &'a Breaker<M, B>,
    budget: Option<&'a Budget<M>>,
    settings: CallSettings,
    /// The device's own seed for the calls' backoff jitter, once set.
    seed: Seed,
    listener: L,
}

impl<'a, M: RawMutex, B> Policy<'a, M, NoListener, B> {
    /// A policy guarding calls with `breaker`, retrying as `settings` say, with no retry budget
    /// (add one with [`Policy::with_budget`]) and no listener.
    #[must_use]
    pub const fn new(
        breaker: &'a Breaker<M, B>,
        settings: CallSettings,
    ) -> Policy<'a, M, NoListener, B> {
        Policy {
            breaker,
            budget: None,
            settings,
            seed: Seed::unset(),
            listener: NoListener,
        }
    }

    /// Sends every event to `listener` as well as to `defmt`.
    ///
    /// ```
    /// # use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
    /// # use stormguard_core::{BreakerSettings, CallSettings, Event};
    /// # use stormguard_embassy::{Breaker, Policy};
    /// static BREAKER: Breaker<CriticalSectionRawMutex> =
    ///     Breaker::new(BreakerSettings::defaults("radio"));
    /// fn telemetry(event: &Event<'_>) { /* count it */ }
    /// static POLICY: Policy<'static, CriticalSectionRawMutex, fn(&Event<'_>)> =
    ///     Policy::new(&BREAKER, CallSettings::DEFAULT).with_listener(telemetry);
    /// ```
    #[must_use]
    pub const fn with_listener<L: Listener>(self, listener: L) -> Policy<'a, M, L, B> {
        Policy {
            breaker: self.breaker,
            budget: self.budget,
            settings: self.settings,
            seed: self.seed,
            listener,
        }
    }
}

impl<'a, M: RawMutex, L, B> Policy<'a, M, L, B> {
    /// Bounds this policy's retries with `budget` (asked before every retry, never before a
    /// call's first attempt).
    #[must_use]
    pub const fn with_budget(mut self, budget: &'a Budget<M>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Seeds the backoff jitter of every call with `seed` (mixed with the call's own seed, from
    /// the settings and the start instant), so that devices flashed with the same `const`
    /// settings do not retry in step. For a policy built at run time; a `static` one is seeded
    /// at start-up with [`Policy::set_seed`].
    #[must_use]
    pub const fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Seed::new(seed);
        self
    }

    /// Seeds the backoff jitter of the calls that start from now on (at start-up, from the
    /// chip's unique ID or RNG, like [`Breaker::set_seed`]).
    ///
    /// ```
    /// # use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
    /// # use stormguard_core::{BreakerSettings, CallSettings};
    /// # use stormguard_embassy::{Breaker, Policy};
    /// static BREAKER: Breaker<CriticalSectionRawMutex> =
    ///     Breaker::new(BreakerSettings::defaults("radio"));
    /// static POLICY: Policy<'static, CriticalSectionRawMutex> =
    ///     Policy::new(&BREAKER, CallSettings::DEFAULT);
    ///
    /// # use critical_section as _; // the host's critical-section implementation, for this test
    /// # let device_seed = 0x5eed;
    /// POLICY.set_seed(device_seed);
    /// ```
    pub fn set_seed(&self, seed: u64) {
        self.seed.set(seed);
    }

    /// The breaker guarding the calls.
    #[must_use]
    pub const fn breaker(&self) -> &'a Breaker<M, B> {
        self.breaker
    }

    /// The retry budget, if any.
    #[must_use]
    pub const fn budget(&self) -> Option<&'a Budget<M>> {
        self.budget
    }

    /// How calls retry and how long they may take.
    #[must_use]
    pub const fn settings(&self) -> &CallSettings {
        &self.settings
    }

    /// The listener events go to.
    #[must_use]
    pub const fn listener(&self) -> &L {
        &self.listener
    }
}

impl<M: RawMutex, L: Listener, B: CoreBreaker> Policy<'_, M, L, B> {
    /// Runs `op` under the policy: `op(attempt)` (1 for the first attempt) makes one attempt;
    /// `Ok` is a success and every `Err` a transient failure (see [`Policy::call_with`] for
    /// another classification, a cancellation or a tighter deadline).
    ///
    /// `op` is any async closure (`AsyncFnMut`): a closure returning an async block
    /// (`|attempt| async { ... }`), a function returning a future, or an `async |attempt| ...`
    /// closure, which may borrow a driver mutably across attempts
    /// (`async |_| sensor.read(&mut i2c).await`).
    ///
    /// Each attempt races the attempt deadline (the attempt timeout, capped by the call's
    /// deadline): an attempt still running then is dropped and counts as
    /// [`Outcome::TimedOut`]. Failures are retried after the core's backoff, as long as the
    /// attempts, the deadline, the breaker and the budget allow. A refusal is reported only after
    /// the guarded pause ([`GUARD_PAUSE`](stormguard_core::GUARD_PAUSE), 100 ms, capped by the
    /// deadline's remainder), so a task that polls in a loop cannot spin on an open breaker.
    ///
    /// Dropping the returned future mid-attempt gives the attempt's half-open probe slot back
    /// (a drop guard releases its permit), so a cancelled caller never leaves the breaker stuck
    /// half-open.
    ///
    /// ```
    /// # use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// # use stormguard_core::{BreakerSettings, CallSettings};
    /// # use stormguard_embassy::{Breaker, CallError, Policy};
    /// async fn read_register(attempt: u32) -> Result<u8, ()> { Ok(0x2a) }
    ///
    /// async fn sample(policy: &Policy<'_, NoopRawMutex>) -> Result<u8, CallError<()>> {
    ///     policy.call(|attempt| async move { read_register(attempt).await }).await
    /// }
    /// ```
    pub async fn call<T, E, F>(&self, op: F) -> Result<T, CallError<E>>
    where
        F: AsyncFnMut(u32) -> Result<T, E>,
    {
        self.call_with(CallOptions::new(), op).await
    }

    /// [`Policy::call`] with per-call [`CallOptions`]: a classifier, a cancellation future, a
    /// deadline.
    ///
    /// ```
    /// # use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
    /// # use embassy_sync::signal::Signal;
    /// # use stormguard_core::Outcome;
    /// # use stormguard_embassy::{CallError, CallOptions, Policy};
    /// static STOP: Signal<CriticalSectionRawMutex, ()> = Signal::new();
    ///
    /// async fn read(attempt: u32) -> Result<u16, u8> { Err(0x20) }
    ///
    /// async fn sample(policy: &Policy<'_, CriticalSectionRawMutex>) -> Result<u16, CallError<u8>> {
    ///     let options = CallOptions::new()
    ///         // 0x20 is "not ready yet": the sensor is fine, ask again later.
    ///         .classify(|r: &Result<u16, u8>| match r {
    ///             Ok(_) => Outcome::Success,
    ///             Err(0x20) => Outcome::Throttled { retry_after: None },
    ///             Err(_) => Outcome::Transient,
    ///         })
    ///         .cancel_on(STOP.wait());
    ///     policy.call_with(options, read).await
    /// }
    /// ```
    pub async fn call_with<T, E, F, C, X>(
        &self,
        options: CallOptions<C, X>,
        mut op: F,
    ) -> Result<T, CallError<E>>
    where
        F: AsyncFnMut(u32) -> Result<T, E>,
        C: Classify<T, E>,
        X: Future,
    {
        let CallOptions {
            classify,
            cancel,
            deadline,
        } = options;
        let mut cancel = pin!(cancel);
        let clock = EmbassyClock::new();
        let mut parts = Parts {
            breaker: self.breaker.handle(),
            budget: match self.budget {
                Some(b) => Funds::Budget(b.handle()),
                None => Funds::Unlimited,
            },
        };
        let mut sink = |e: Event<'_>| self.emit(&e);
        let mut now = clock.now();
        let mut call = Call::begin(&self.settings, now);
        if let Some(seed) = self.seed.get() {
            call = call.with_seed(seed);
        }
        if let Some(at) = deadline {
            call = call.with_deadline(to_core_instant(at));
        }
        // The most recent attempt's result, handed back (or carried by the error) at the end.
        let mut last: Option<Result<T, E>> = None;
        loop {
            match call.poll(&mut parts, now, &mut sink) {
                Step::Attempt(permit) => {
                    let guard = PermitGuard::new(self.breaker, permit);
                    let attempt = op(call.attempts());
                    let ran =
                        select3(cancel.as_mut(), attempt, until(call.attempt_deadline())).await;
                    now = clock.now();
                    let outcome = match ran {
                        Either3::First(_) => Outcome::Cancelled,
                        Either3::Second(result) => {
                            let outcome = classify.classify(&result);
                            last = Some(result);
                            outcome
                        }
                        Either3::Third(()) => Outcome::TimedOut,
                    };
                    if let Some(permit) = guard.disarm() {
                        call.complete(&mut parts, permit, now, outcome, &mut sink);
                    }
                }
                Step::Wait(wait) => {
                    let at = now.saturating_add(wait);
                    if sleep_until(at, cancel.as_mut()).await == Slept::Cancelled {
                        call.cancel();
                        return Err(CallError::Cancelled);
                    }
                    now = clock.now();
                }
                Step::Reject(rejection) => {
                    // Announced (the core emitted `Rejected` with this pause), then served.
                    let at = now.saturating_add(rejection.pause);
                    if sleep_until(at, cancel.as_mut()).await == Slept::Cancelled {
                        return Err(CallError::Cancelled);
                    }
                    return Err(CallError::Rejected {
                        rejection,
                        last: last.and_then(Result::err),
                    });
                }
                Step::Done(finished) => return finish(finished, last),
            }
        }
    }

    /// Forces the breaker open until [`Policy::reset`]; the event goes to `defmt` and the
    /// policy's listener.
    pub fn isolate(&self) {
        self.breaker.isolate(&self.listener);
    }

    /// Closes the breaker; the event goes to `defmt` and the policy's listener.
    pub fn reset(&self) {
        self.breaker.reset(&self.listener);
    }

    fn emit(&self, event: &Event<'_>) {
        events::log(event);
        self.listener.on_event(event);
    }
}

/// A policy's device seed, settable at run time from any task: two halves and whether it is set,
/// in 32-bit atomics (thumbv7m/v7em have no 64-bit ones; load and store are enough, so thumbv6m
/// too). A read racing a second `set` may mix the two seeds' halves, which is still a seed.
#[derive(Debug)]
struct Seed {
    set: AtomicBool,
    high: AtomicU32,
    low: AtomicU32,
}

impl Seed {
    const fn unset() -> Seed {
        Seed {
            set: AtomicBool::new(false),
            high: AtomicU32::new(0),
            low: AtomicU32::new(0),
        }
    }

    const fn new(seed: u64) -> Seed {
        Seed {
            set: AtomicBool::new(true),
            high: AtomicU32::new((seed >> 32) as u32),
            low: AtomicU32::new(seed as u32),
        }
    }

    fn set(&self, seed: u64) {
        self.high.store((seed >> 32) as u32, Ordering::Relaxed);
        self.low.store(seed as u32, Ordering::Relaxed);
        self.set.store(true, Ordering::Release);
    }

    fn get(&self) -> Option<u64> {
        if !self.set.load(Ordering::Acquire) {
            return None;
        }
        let high = u64::from(self.high.load(Ordering::Relaxed));
        Some(high << 32 | u64::from(self.low.load(Ordering::Relaxed)))
    }
}

/// The call's result from how the core says it finished and the last attempt's result.
fn finish<T, E>(finished: Finished, last: Option<Result<T, E>>) -> Result<T, CallError<E>> {
    let last_error = |last: Option<Result<T, E>>| last.and_then(Result::err);
    match finished {
        Finished::Failed(Outcome::TimedOut) => Err(CallError::TimedOut {
            last: last_error(last),
        }),
        // The classifier decides what counts as success: an `Err` it calls a success (a
        // healthy "no data" answer) comes back as the operation's error, and an `Ok` it calls
        // a failure comes back as the value once no retry is left.
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

/// Sleeps until the attempt deadline, or forever without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => Timer::at(to_embassy_instant(at)).await,
        None => Never.await,
    }
}

/// Gives an attempt's permit back if the call's future is dropped before the attempt's outcome
/// is reported, so a half-open probe slot never leaks.
struct PermitGuard<'a, M: RawMutex, B: CoreBreaker> {
    breaker: &'a Breaker<M, B>,
    permit: Option<Permit>,
}

impl<'a, M: RawMutex, B: CoreBreaker> PermitGuard<'a, M, B> {
    fn new(breaker: &'a Breaker<M, B>, permit: Permit) -> Self {
        PermitGuard {
            breaker,
            permit: Some(permit),
        }
    }

    /// The permit, to report its outcome with: the guard no longer releases it.
    fn disarm(mut self) -> Option<Permit> {
        self.permit.take()
    }
}

impl<M: RawMutex, B: CoreBreaker> Drop for PermitGuard<'_, M, B> {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.breaker.release(permit);
        }
    }
}

/// The budget side of a policy's calls: its shared budget, or none.
enum Funds<'a, M: RawMutex> {
    Budget(BudgetRef<'a, M>),
    Unlimited,
}

impl<M: RawMutex> Funding for Funds<'_, M> {
    fn name(&self) -> Option<&Name> {
        match self {
            Funds::Budget(b) => b.name(),
            Funds::Unlimited => None,
        }
    }

    fn try_fund_retry(&mut self, now: Instant) -> Result<(), Refused> {
        match self {
            Funds::Budget(b) => b.try_fund_retry(now),
            Funds::Unlimited => Unlimited.try_fund_retry(now),
        }
    }

    fn on_outcome(&mut self, now: Instant, outcome: Outcome) {
        match self {
            Funds::Budget(b) => b.on_outcome(now, outcome),
            Funds::Unlimited => Unlimited.on_outcome(now, outcome),
        }
    }
}
