//! `policy.call(|attempt| async { ... }).await`: the core's call driver, run on embassy.
//!
//! The loop is the one in the design (DESIGN.md, "The core is sans-IO"): ask the core's
//! [`Call`] what to do next, do it, report back. Every decision (admit, retry, wait how long,
//! refuse, give up) is the core's; this module reads embassy's clock, runs the operation against
//! its attempt deadline, sleeps cancellably and delivers events.

use core::borrow::Borrow;
use core::fmt;
use core::future::{poll_fn, Future};
use core::pin::{pin, Pin};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use core::task::{Context, Poll};

use embassy_futures::select::{select3, Either3};
use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_time::Timer;
use stormguard_core::call::{Due, Gate as _, HedgedPair, Lane, PairNext, SharedHedgeShare};
use stormguard_core::part::{Limit, Locked, Never};
use stormguard_core::{
    limits::BudgetSnapshot, policy::Explain, BreakerSettings, BudgetSettings, Call, CallError,
    CallSettings, Classify, Event, EveryErrorTransient, Instant, Name, Outcome, Parts, Permit,
    Snapshot, Step,
};

use crate::bulkhead::{BulkheadStep, NoBulkhead};
use crate::drain::Drain;
use crate::events::{self, Ears, Listener, NoListener};
use crate::shared::Shared;
use crate::sleep::{Never as Forever, Slept};
use crate::time::{to_core_instant, to_embassy_instant};
use crate::{Breaker, Budget, Bulkhead, CoreBreaker, EmbassyClock};

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
pub struct CallOptions<C = EveryErrorTransient, X = Forever> {
    classify: C,
    cancel: X,
    deadline: Option<embassy_time::Instant>,
    drain: Option<&'static Drain>,
    hedge_share: Option<&'static SharedHedgeShare>,
}

impl CallOptions {
    /// Every `Err` transient, not cancellable (other than by dropping the call's future), the
    /// policy's deadline.
    pub const fn new() -> CallOptions {
        CallOptions {
            classify: EveryErrorTransient,
            cancel: Forever,
            deadline: None,
            drain: None,
            hedge_share: None,
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
            drain: self.drain,
            hedge_share: self.hedge_share,
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
            drain: self.drain,
            hedge_share: self.hedge_share,
        }
    }

    /// Watches `drain`: read before every step of the call, once it has begun the core starts
    /// no new attempt or retry, clamps the call's deadline to the drain's grace, and ends the
    /// call as [`CallError::Drained`] with the last error it had.
    ///
    /// ```
    /// use stormguard_embassy::{CallOptions, Drain};
    /// static DRAIN: Drain = Drain::new();
    /// let options = CallOptions::new().drain_on(&DRAIN);
    /// # let _ = options;
    /// ```
    pub fn drain_on(mut self, drain: &'static Drain) -> Self {
        self.drain = Some(drain);
        self
    }

    /// Runs the hedge win-rate loop whose state is `share` (one word; the calls given the same
    /// one share it): a call that would hedge asks for its share first, the share halves after
    /// four hedges in a row that did not win (down to one call in 64) and doubles back at each
    /// hedge that wins. Read by [`Policy::call_hedged_with`], the only call that hedges.
    ///
    /// ```
    /// use stormguard_core::call::SharedHedgeShare;
    /// use stormguard_embassy::CallOptions;
    /// static SHARE: SharedHedgeShare = SharedHedgeShare::new();
    /// let options = CallOptions::new().hedge_win_rate(&SHARE);
    /// # let _ = options;
    /// assert_eq!(SHARE.share_per_1024(), 1024); // every call may hedge, to begin with
    /// ```
    pub fn hedge_win_rate(mut self, share: &'static SharedHedgeShare) -> Self {
        self.hedge_share = Some(share);
        self
    }

    /// Ends the call by `at` at the latest (a deadline propagated from the caller); a later one
    /// than the policy's own deadline changes nothing.
    pub fn deadline(mut self, at: embassy_time::Instant) -> Self {
        self.deadline = Some(at);
        self
    }
}

/// A policy over a [lean breaker](stormguard_core::LeanBreaker) (consecutive failures only), in
/// a `static`: the common firmware shape (a sensor, a radio link).
pub type LeanPolicy<M, L = NoListener> = Policy<'static, M, L, stormguard_core::LeanBreaker>;

/// A policy without a rate limit: the core's [`Never`] part, which has no value and no code.
pub type NoRateLimit = Never;

/// A policy with a GCRA [`RateLimit`](crate::RateLimit) in front of its breaker (lean by
/// default), all in `static`s.
pub type RateLimitedPolicy<M, B = stormguard_core::LeanBreaker, L = NoListener> =
    Policy<'static, M, L, B, Locked<'static, Shared<M, stormguard_core::limits::RateLimiter>>>;

/// A policy with a [`Bulkhead`](crate::Bulkhead) (4 wakers) in front of its breaker (lean by
/// default), all in `static`s.
pub type BulkheadedPolicy<M, B = stormguard_core::LeanBreaker, L = NoListener> =
    Policy<'static, M, L, B, NoRateLimit, &'static crate::Bulkhead<M>>;

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
/// use stormguard_embassy::{valid, Breaker, Budget, CallError, LeanPolicy, Policy};
///
/// type Cs = CriticalSectionRawMutex;
///
/// // Invalid settings stop the build (`valid!`); nothing here can fail at run time.
/// static SENSOR: BreakerSettings = valid!(BreakerSettings::consecutive_only("sensor", 3));
/// static BREAKER: Breaker<Cs, LeanBreaker> = valid!(Breaker::lean(&SENSOR));
/// static RETRIES: Budget<Cs> = Budget::new(BudgetSettings::defaults("i2c"));
/// static POLICY: LeanPolicy<Cs> =
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
///
/// Optional parts sit in front of the breaker, each a type parameter that costs nothing when
/// absent: a rate limit (`R`, [`Policy::with_rate_limit`]) and a bulkhead (`K`,
/// [`Policy::with_bulkhead`]). Their refusals are guarded rejections like the breaker's. Each
/// call hands them to the core's [`Parts`], which applies them in its one order.
pub struct Policy<
    'a,
    M: RawMutex,
    L = NoListener,
    B = stormguard_core::Breaker,
    R = NoRateLimit,
    K = NoBulkhead,
> {
    breaker: &'a Breaker<M, B>,
    budget: Option<&'a Budget<M>>,
    settings: CallSettings,
    /// The device's own seed for the calls' backoff jitter, once set.
    seed: Seed,
    listener: L,
    limit: Option<R>,
    bulkhead: K,
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
            limit: None,
            bulkhead: NoBulkhead,
        }
    }
}

impl<'a, M: RawMutex, B, R: Copy, K: Copy> Policy<'a, M, NoListener, B, R, K> {
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
    pub const fn with_listener<L: Listener>(self, listener: L) -> Policy<'a, M, L, B, R, K> {
        let Policy {
            breaker,
            budget,
            settings,
            seed,
            listener: NoListener,
            limit,
            bulkhead,
        } = self;
        Policy {
            breaker,
            budget,
            settings,
            seed,
            listener,
            limit,
            bulkhead,
        }
    }
}

impl<'a, M: RawMutex, L: Copy, B, K: Copy> Policy<'a, M, L, B, NoRateLimit, K> {
    /// Puts a rate limit in front of the breaker: every attempt, retries included, takes a cell
    /// (an open breaker or a full bulkhead spends none). A refusal is a self-imposed throttle:
    /// with attempts left the call waits until the next cell (one of its attempts, nothing
    /// charged to the budget); when no retry fits it is the guarded rejection
    /// [`RefusalReason::RateLimited`](stormguard_core::RefusalReason::RateLimited), its
    /// `retry_after` the time until the next cell (counted from the end of the pause).
    /// (With a listener that is not `Copy`, add the steps before [`Policy::with_listener`].)
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
    /// use stormguard_core::{BreakerSettings, CallSettings, LeanBreaker, limits::RateLimitSettings, limits::RateLimiter};
    /// use stormguard_embassy::{Breaker, Policy, RateLimit, RateLimitedPolicy};
    ///
    /// static LINK: BreakerSettings = match BreakerSettings::consecutive_only("uplink", 3) {
    ///     Ok(s) => s,
    ///     Err(_) => panic!(),
    /// };
    /// static BREAKER: Breaker<Cs, LeanBreaker> = match Breaker::lean(&LINK) {
    ///     Ok(b) => b,
    ///     Err(_) => panic!(),
    /// };
    /// static LIMIT: RateLimit<Cs, RateLimiter> = RateLimit::new(RateLimiter::new(
    ///     match RateLimitSettings::per_minute("uplink", 30) {
    ///         Ok(s) => s,
    ///         Err(_) => panic!(),
    ///     },
    /// ));
    /// static POLICY: RateLimitedPolicy<Cs> =
    ///     Policy::new(&BREAKER, CallSettings::DEFAULT).with_rate_limit(LIMIT.part());
    /// ```
    ///
    /// `limit` is the limiter as the call driver sees it: a [`RateLimit`](crate::RateLimit)'s
    /// [`part`](crate::RateLimit::part), or a reference to one of the core's lock-free limiters.
    #[must_use]
    pub const fn with_rate_limit<X: Limit + Copy>(self, limit: X) -> Policy<'a, M, L, B, X, K> {
        let Policy {
            breaker,
            budget,
            settings,
            seed,
            listener,
            limit: _,
            bulkhead,
        } = self;
        Policy {
            breaker,
            budget,
            settings,
            seed,
            listener,
            limit: Some(limit),
            bulkhead,
        }
    }
}

impl<'a, M: RawMutex, L: Copy, B, R: Copy> Policy<'a, M, L, B, R, NoBulkhead> {
    /// Puts a bulkhead in front of the breaker (behind the rate limit, if any): every attempt
    /// takes a slot and gives it back when it ends. A full bulkhead's refusal is retried on the
    /// throttled curve while attempts and the deadline allow, then guarded
    /// ([`RefusalReason::BulkheadFull`](stormguard_core::RefusalReason::BulkheadFull)); with a
    /// bounded wait in its settings, an attempt that finds it full first waits for a slot, at
    /// most the settings' wait and never past the call's deadline, and a cancellation ends the
    /// wait at once.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
    /// use stormguard_core::{BreakerSettings, limits::BulkheadSettings, CallSettings, Duration};
    /// use stormguard_embassy::{Breaker, Bulkhead, NoListener, NoRateLimit, Policy};
    ///
    /// static BREAKER: Breaker<Cs> = Breaker::new(BreakerSettings::defaults("flash"));
    /// static ONE_AT_A_TIME: Bulkhead<Cs> = Bulkhead::new(match BulkheadSettings::builder("flash")
    ///     .max_in_flight(1)
    ///     .bounded_wait(3, Duration::from_millis(20))
    ///     .build()
    /// {
    ///     Ok(s) => s,
    ///     Err(_) => panic!(),
    /// });
    /// static POLICY: Policy<'static, Cs, NoListener, stormguard_core::Breaker, NoRateLimit, &Bulkhead<Cs>> =
    ///     Policy::new(&BREAKER, CallSettings::DEFAULT).with_bulkhead(&ONE_AT_A_TIME);
    /// ```
    #[must_use]
    pub const fn with_bulkhead<M2: RawMutex, const W: usize>(
        self,
        bulkhead: &'a Bulkhead<M2, W>,
    ) -> Policy<'a, M, L, B, R, &'a Bulkhead<M2, W>> {
        let Policy {
            breaker,
            budget,
            settings,
            seed,
            listener,
            limit,
            bulkhead: NoBulkhead,
        } = self;
        Policy {
            breaker,
            budget,
            settings,
            seed,
            listener,
            limit,
            bulkhead,
        }
    }
}

impl<'a, M: RawMutex, L, B, R, K> Policy<'a, M, L, B, R, K> {
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

    /// The rate limit, if any.
    #[must_use]
    pub const fn rate_limit(&self) -> Option<&R> {
        self.limit.as_ref()
    }

    /// The bulkhead ([`NoBulkhead`], or the bulkhead).
    #[must_use]
    pub const fn bulkhead(&self) -> &K {
        &self.bulkhead
    }
}

impl<'a, M: RawMutex, L: Listener, B: CoreBreaker, R: Limit + Copy, K: BulkheadStep>
    Policy<'a, M, L, B, R, K>
{
    /// Runs `op` under the policy: `op(attempt)` (1 for the first attempt) makes one attempt;
    /// `Ok` is a success and every `Err` a transient failure (see [`Policy::call_with`] for
    /// another classification, a cancellation or a tighter deadline).
    ///
    /// `op` is any async closure (`AsyncFnMut`): a closure returning an async block
    /// (`|attempt| async { ... }`), a function returning a future, or an `async |attempt| ...`
    /// closure, which may borrow a driver mutably across attempts
    /// (`async |_| sensor.read(&mut i2c).await`). Attempts run one at a time: settings with
    /// hedging on are not hedged here (a hedge runs the operation twice at once, which such a
    /// closure cannot); use [`Policy::call_hedged`].
    ///
    /// Each attempt races the attempt deadline (the attempt timeout, capped by the call's
    /// deadline and tightened by the breaker's measured ceiling): an attempt still running then
    /// is dropped and counts as [`Outcome::TimedOut`]. Failures are retried after the core's
    /// backoff, as long as the attempts, the deadline, the breaker and the budget allow. A
    /// refusal is reported only after the guarded pause
    /// ([`GUARD_PAUSE`](stormguard_core::GUARD_PAUSE), 100 ms, capped by the deadline's
    /// remainder), so a task that polls in a loop cannot spin on an open breaker.
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
    // (A plain `fn` returning the driver's future, rather than an `async fn` awaiting it, so
    // the future a task holds is the driver's alone: no second copy of the arguments.)
    pub fn call<'s, T, E, F>(
        &'s self,
        op: F,
    ) -> impl Future<Output = Result<T, CallError<E>>> + use<'s, 'a, M, L, B, R, K, T, E, F>
    where
        F: AsyncFnMut(u32) -> Result<T, E>,
    {
        drive(self, CallOptions::new(), op)
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
    pub fn call_with<'s, T, E, F, C, X>(
        &'s self,
        options: CallOptions<C, X>,
        op: F,
    ) -> impl Future<Output = Result<T, CallError<E>>> + use<'s, 'a, M, L, B, R, K, T, E, F, C, X>
    where
        F: AsyncFnMut(u32) -> Result<T, E>,
        C: Classify<T, E>,
        X: Future,
    {
        drive(self, options, op)
    }

    /// [`Policy::call`] for an operation that is safe to run twice at once, with hedging when
    /// the settings ask for it ([`CallSettingsBuilder::hedging`](stormguard_core::call::CallSettingsBuilder::hedging)):
    /// when an attempt is still running after the breaker's learned p95 of healthy calls, the
    /// core may launch a second one beside it (never while the breaker is not closed, without a
    /// baseline, near the trip point, or when the budget cannot fund it). At most two attempts
    /// are in flight; the first success wins, and the other is dropped and reported as
    /// [`Outcome::Cancelled`] (never counted as a failure); a failure of one waits for the
    /// other. Each attempt keeps its own attempt deadline.
    ///
    /// `op` is called once per attempt that runs (never for a hedge the core declines) and its
    /// futures may run side by side, so it is a `FnMut(attempt) -> Future` whose futures do not
    /// borrow it (e.g. `|_| read(&BUS)` over a shared bus, or an async block that copies what
    /// it needs).
    ///
    /// The p95 comes from what the breaker learns: a full breaker whose settings keep
    /// statistics (every default rule does; a consecutive-only one needs
    /// [`BreakerSettings::learning`](stormguard_core::BreakerSettings::learning)). A lean
    /// breaker learns nothing, so a policy over one never hedges. Build hedged settings with
    /// [`build_for`](stormguard_core::call::CallSettingsBuilder::build_for) the breaker's
    /// settings and a breaker that cannot hedge fails the build.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
    /// use stormguard_core::{BreakerSettings, CallSettings};
    /// use stormguard_embassy::{valid, Breaker, CallError, Policy};
    ///
    /// const GATEWAY: BreakerSettings = BreakerSettings::defaults("gateway");
    /// const HEDGED: CallSettings =
    ///     valid!(CallSettings::builder().hedging(true).build_for(&GATEWAY));
    /// static BREAKER: Breaker<Cs> = Breaker::new(GATEWAY);
    /// static POLICY: Policy<'static, Cs> = Policy::new(&BREAKER, HEDGED);
    ///
    /// async fn fetch_config(attempt: u32) -> Result<u32, ()> { Ok(7) }
    ///
    /// async fn config() -> Result<u32, CallError<()>> {
    ///     POLICY.call_hedged(fetch_config).await
    /// }
    /// ```
    pub async fn call_hedged<T, E, F, Fut>(&self, op: F) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        drive_hedged(self, CallOptions::new(), op).await
    }

    /// [`Policy::call_hedged`] with per-call [`CallOptions`]; a cancellation drops every
    /// attempt in flight.
    ///
    /// ```
    /// # use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// # use embassy_time::{Duration, Instant};
    /// # use stormguard_embassy::{CallError, CallOptions, Policy};
    /// async fn query(attempt: u32) -> Result<u8, ()> { Ok(1) }
    ///
    /// async fn ask(policy: &Policy<'_, NoopRawMutex>) -> Result<u8, CallError<()>> {
    ///     let options = CallOptions::new().deadline(Instant::now() + Duration::from_millis(300));
    ///     policy.call_hedged_with(options, query).await
    /// }
    /// ```
    pub async fn call_hedged_with<T, E, F, Fut, C, X>(
        &self,
        options: CallOptions<C, X>,
        op: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
        X: Future,
    {
        drive_hedged(self, options, op).await
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

    /// The policy in plain text, with what its breaker and budget measure now: what bounds a
    /// call first, the worst-case timeline of its attempts, the load it can add, what is
    /// measured now and what is missing (the core's [`Explain`], over copies of the settings
    /// and snapshots, which stay behind their locks). It is a `core::fmt::Display`: write it to
    /// a fixed buffer, or log it with `defmt::Display2Format`.
    ///
    /// ```
    /// use core::fmt::Write;
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::{BreakerSettings, CallSettings};
    /// use stormguard_embassy::{Breaker, Policy};
    ///
    /// # embassy_time::MockDriver::get().reset();
    /// let breaker: Breaker<NoopRawMutex> = Breaker::new(BreakerSettings::defaults("radio"));
    /// let policy = Policy::new(&breaker, CallSettings::DEFAULT);
    /// let mut text: heapless::String<2048> = heapless::String::new();
    /// write!(text, "{}", policy.explain())?;
    /// assert!(text.starts_with("policy `radio`"));
    /// assert!(text.contains("no latency baseline yet (cold)"));
    /// assert!(text.contains("no retry budget"));
    /// # Ok::<(), core::fmt::Error>(())
    /// ```
    #[must_use]
    pub fn explain(&self) -> Explanation {
        Explanation {
            call: self.settings,
            breaker: self.breaker.settings(),
            breaker_now: self.breaker.snapshot(),
            budget: self.budget.map(Budget::settings),
            budget_now: self.budget.and_then(Budget::snapshot),
        }
    }
}

/// A policy's description at one moment: copies of its settings and of what its breaker and
/// budget measure, for the core's [`Explain`]. Made by [`Policy::explain`]; print it with
/// `{}`, or take the core's [`Explain`] with [`Explanation::as_explain`].
#[derive(Clone, Copy, Debug)]
pub struct Explanation {
    call: CallSettings,
    breaker: BreakerSettings,
    breaker_now: Option<Snapshot>,
    budget: Option<BudgetSettings>,
    budget_now: Option<BudgetSnapshot>,
}

impl Explanation {
    /// The core's [`Explain`] over this description.
    ///
    /// ```
    /// # use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// # use stormguard_core::{BreakerSettings, CallSettings};
    /// # use stormguard_embassy::{Breaker, Policy};
    /// # embassy_time::MockDriver::get().reset();
    /// let breaker: Breaker<NoopRawMutex> = Breaker::new(BreakerSettings::defaults("radio"));
    /// let explanation = Policy::new(&breaker, CallSettings::DEFAULT).explain();
    /// assert_eq!(explanation.as_explain().to_string(), explanation.to_string());
    /// ```
    pub fn as_explain(&self) -> Explain<'_> {
        let mut e = Explain::new(&self.call).breaker(&self.breaker);
        if let Some(now) = self.breaker_now {
            e = e.breaker_now(now);
        }
        if let Some(b) = &self.budget {
            e = e.budget(b);
        }
        if let Some(now) = self.budget_now {
            e = e.budget_now(now);
        }
        e
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.as_explain(), f)
    }
}

/// What a call runs against (a policy, or a keyed policy and a key): the core's [`Parts`],
/// built afresh for each step from the policy's handles (a few references, so nothing of them
/// is kept across an `.await`, and a constant such as "nobody listens" stays one the compiler
/// sees), the bulkhead's wait, and where events go.
pub(crate) trait Route: Copy {
    /// The breaker's name, read once per call: the events are named with it (the name inside
    /// the breaker stays behind its lock).
    type Name: Copy + Borrow<Name>;
    /// The parts a call's attempts pass through.
    type Parts<'n>: stormguard_core::call::Gate
    where
        Self: 'n;
    /// Whether an attempt may first wait for a bulkhead slot (`false`: no waiting code).
    const QUEUES: bool;
    /// The breaker's name.
    fn name(self) -> Self::Name;
    /// The parts, the breaker's events named `name`.
    fn parts<'n>(self, name: &'n Name) -> Self::Parts<'n>
    where
        Self: 'n;
    /// A call begun at `now` with the policy's settings, returned straight from
    /// [`Call::begin`] so that it is built where the call's future keeps it: a `Call` is some
    /// 170 bytes, and each move of it is a `memcpy` on a microcontroller. [`Route::prepare`]
    /// finishes it in place.
    fn begin(self, now: Instant) -> Call;
    /// Applies the device's seed and the caller's `deadline`, if any, to a call just begun.
    fn prepare(self, call: &mut Call, deadline: Option<embassy_time::Instant>);
    /// Delivers an event to `defmt` and the listener.
    fn emit(self, event: &Event<'_>);
    /// Sleeps until `at` (a backoff wait, or a refusal's guarded pause), then, if `slot` (before
    /// an attempt, not after a refusal), waits for a bulkhead slot if there is a bulkhead that
    /// allows it, at most until `deadline`.
    fn pause<X: Future>(
        self,
        at: Instant,
        slot: bool,
        deadline: Option<Instant>,
        cancel: Pin<&mut X>,
    ) -> impl Future<Output = Slept>;
    /// An attempt ended and freed its bulkhead slot, if any: the tasks waiting for one are
    /// woken.
    fn freed(self);
}

/// Applies the device's seed and the caller's deadline to a call just begun, in place.
pub(crate) fn prepare(call: &mut Call, seed: &Seed, deadline: Option<embassy_time::Instant>) {
    if let Some(seed) = seed.get() {
        call.reseed(seed);
    }
    if let Some(at) = deadline {
        call.tighten_deadline(to_core_instant(at));
    }
}

/// The parts of a policy's calls.
type PolicyParts<'n, M, L, B, R, K> = Parts<
    Locked<'n, Shared<M, B>, Ears<L>>,
    Locked<'n, Shared<M, stormguard_core::Budget>>,
    R,
    Never,
    <K as BulkheadStep>::Part<'n>,
>;

impl<'p, 'a, M, L, B, R, K> Route for &'p Policy<'a, M, L, B, R, K>
where
    M: RawMutex,
    L: Listener,
    B: CoreBreaker,
    R: Limit + Copy,
    K: BulkheadStep,
{
    type Name = B::NameRef;
    type Parts<'n>
        = PolicyParts<'n, M, L, B, R, K>
    where
        Self: 'n;
    const QUEUES: bool = K::QUEUES;

    fn name(self) -> B::NameRef {
        self.breaker.name_ref()
    }

    #[inline]
    fn parts<'n>(self, name: &'n Name) -> Self::Parts<'n>
    where
        Self: 'n,
    {
        Parts {
            name: None,
            breaker: Some(self.breaker.part(name).hearing()),
            budget: self.budget.map(Budget::part),
            limiter: self.limit,
            quota: None,
            bulkhead: self.bulkhead.part(),
            adaptive: None,
            saturation: None,
        }
    }

    fn begin(self, now: Instant) -> Call {
        Call::begin_salted(&self.settings, now, self.seed.next_salt())
    }

    fn prepare(self, call: &mut Call, deadline: Option<embassy_time::Instant>) {
        prepare(call, &self.seed, deadline);
    }

    fn emit(self, event: &Event<'_>) {
        events::log(event);
        self.listener.on_event(event);
    }

    #[inline]
    fn pause<X: Future>(
        self,
        at: Instant,
        slot: bool,
        deadline: Option<Instant>,
        cancel: Pin<&mut X>,
    ) -> impl Future<Output = Slept> {
        self.bulkhead.pause(at, slot, deadline, cancel)
    }

    #[inline]
    fn freed(self) {
        self.bulkhead.freed();
    }
}

impl<'a, M: RawMutex, L: Listener, B: CoreBreaker, R, K> Policy<'a, M, L, B, R, K> {
    /// The restarts of a stream beginning now with `settings`: salted and seeded like a call,
    /// so that streams begun together (a fleet booted together) restart apart.
    pub(crate) fn stream_restarts(
        &self,
        settings: &stormguard_core::call::StreamSettings,
    ) -> Result<stormguard_core::call::StreamRestarts, stormguard_core::SettingsError> {
        let now = EmbassyClock::new().now();
        let salt = self.seed.next_salt();
        let mut restarts = stormguard_core::call::StreamRestarts::begin_salted(
            &self.settings,
            settings,
            now,
            salt,
        )?;
        if let Some(seed) = self.seed.get() {
            restarts.reseed(seed);
        }
        Ok(restarts)
    }

    /// The breaker alone (no limiter in front) and the budget: what a stream lost mid-way is
    /// reported to ([`StreamRestarts::on_lost`](stormguard_core::call::StreamRestarts::on_lost)).
    pub(crate) fn loss_parts<'n>(
        &'n self,
        name: &'n Name,
    ) -> impl stormguard_core::call::Gate + 'n {
        Parts {
            name: None,
            breaker: Some(self.breaker.part(name).hearing::<Ears<L>>()),
            budget: self.budget.map(Budget::part),
            limiter: None::<Never>,
            quota: None::<Never>,
            bulkhead: None::<Never>,
            adaptive: None::<Never>,
            saturation: None::<Never>,
        }
    }
}

/// Serves a step of the call loops that is not an attempt: a backoff wait (then the
/// bulkhead's wait for a slot, if the gate has one that allows it), or a refusal's guarded
/// pause. The core announced the refusal with this pause and hands it out, as
/// [`Finished::Rejected`](stormguard_core::Finished::Rejected), at the next poll. Any other step rests for no time.
fn pause<'c, G: Route, X: Future>(
    route: G,
    call: &Call,
    step: Step,
    now: Instant,
    cancel: Pin<&'c mut X>,
) -> impl Future<Output = Slept> + use<'c, G, X> {
    let (wait, slot) = match step {
        Step::Wait(wait) => (wait, true),
        Step::Reject(rejection) => (rejection.pause, false),
        _ => (stormguard_core::Duration::ZERO, false),
    };
    route.pause(now.saturating_add(wait), slot, call.deadline(), cancel)
}

/// The call loop: ask the core what to do next, do it, report back.
pub(crate) async fn drive<G, T, E, F, C, X>(
    route: G,
    options: CallOptions<C, X>,
    mut op: F,
) -> Result<T, CallError<E>>
where
    G: Route,
    F: AsyncFnMut(u32) -> Result<T, E>,
    C: Classify<T, E>,
    X: Future,
{
    let CallOptions {
        classify,
        cancel,
        deadline,
        drain,
        hedge_share: _,
    } = options;
    let mut cancel = pin!(cancel);
    let clock = EmbassyClock::new();
    let mut now = clock.now();
    let mut call = route.begin(now);
    route.prepare(&mut call, deadline);
    let name = route.name();
    let name = name.borrow();
    let mut sink = |e: Event<'_>| route.emit(&e);
    // The most recent attempt's result, handed back (or carried by the error) at the end.
    let mut last: Option<Result<T, E>> = None;
    // With a bulkhead that lets calls wait, the first attempt waits for its slot the way a
    // retry does after its backoff: through the same pause.
    let mut enter = G::QUEUES;
    loop {
        let step = if enter {
            enter = false;
            Step::Wait(stormguard_core::Duration::ZERO)
        } else {
            if let Some(drain) = drain {
                // The core decides what the drain stops; it is told before every step.
                drain.watch(&mut call, now);
            }
            call.poll(&route.parts(name), now, &mut sink)
        };
        match step {
            Step::Attempt(permit) => {
                let guard = PermitGuard::new(route, name, permit);
                let attempt = op(call.attempts());
                let ran = select3(cancel.as_mut(), attempt, until(call.attempt_deadline())).await;
                now = clock.now();
                let (outcome, answered) = match ran {
                    Either3::First(_) => (Outcome::Cancelled, false),
                    Either3::Second(result) => {
                        let outcome = classify.classify(&result);
                        let answered = result.is_ok();
                        last = Some(result);
                        (outcome, answered)
                    }
                    Either3::Third(()) => (Outcome::TimedOut, false),
                };
                if let Some(permit) = guard.disarm() {
                    let parts = route.parts(name);
                    call.complete_attempt(&parts, permit, now, outcome, answered, &mut sink);
                    route.freed();
                }
            }
            Step::Done(finished) => return finished.into_result(last),
            rest @ (Step::Wait(_) | Step::Reject(_)) => {
                if pause(route, &call, rest, now, cancel.as_mut()).await == Slept::Cancelled {
                    call.cancel();
                    return Err(CallError::Cancelled);
                }
                now = clock.now();
            }
        }
    }
}

/// The call loop with hedging: as [`drive`], with a second attempt launched beside a slow one
/// when the core says so. The core's [`HedgedPair`] says what the one timer is armed for and
/// what each event means; this loop only waits.
pub(crate) async fn drive_hedged<G, T, E, F, Fut, C, X>(
    route: G,
    options: CallOptions<C, X>,
    mut op: F,
) -> Result<T, CallError<E>>
where
    G: Route,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    X: Future,
{
    let CallOptions {
        classify,
        cancel,
        deadline,
        drain,
        hedge_share,
    } = options;
    let mut cancel = pin!(cancel);
    let clock = EmbassyClock::new();
    let mut now = clock.now();
    let mut call = route.begin(now);
    route.prepare(&mut call, deadline);
    let name = route.name();
    let name = name.borrow();
    let mut sink = |e: Event<'_>| route.emit(&e);
    let mut last: Option<Result<T, E>> = None;
    // With a bulkhead that lets calls wait, the first attempt waits for its slot the way a
    // retry does after its backoff: through the same pause.
    let mut enter = G::QUEUES;
    let mut first: Pin<&mut Option<Fut>> = pin!(None);
    let mut second: Pin<&mut Option<Fut>> = pin!(None);
    loop {
        let step = if enter {
            enter = false;
            Step::Wait(stormguard_core::Duration::ZERO)
        } else {
            if let Some(drain) = drain {
                // The core decides what the drain stops; it is told before every step.
                drain.watch(&mut call, now);
            }
            call.poll(&route.parts(name), now, &mut sink)
        };
        match step {
            Step::Attempt(permit) => {
                // The first attempt, and when to hedge it if it is still running then.
                // With the win-rate loop, a call that would hedge asks for its share.
                let delay = call
                    .hedge_delay(&route.parts(name), now)
                    .filter(|_| hedge_share.is_none_or(SharedHedgeShare::on_call));
                let mut pair = HedgedPair::begin(&call, now, delay);
                let mut guards = [Some(PermitGuard::new(route, name, permit)), None];
                first.set(Some(op(call.attempts())));
                loop {
                    let mut timer = pair.wake_at().map(|at| Timer::at(to_embassy_instant(at)));
                    let ran = poll_fn(|cx| {
                        poll_pair(
                            cx,
                            cancel.as_mut(),
                            [first.as_mut(), second.as_mut()],
                            &mut timer,
                        )
                    })
                    .await;
                    now = clock.now();
                    // A drain that began since (the flag is read at every wake) stops the
                    // hedge and clamps both attempts to its grace: the timer is re-armed.
                    let drained = drain.is_some_and(|d| d.watch_pair(&mut pair, &mut call, now));
                    if drained && matches!(ran, Ran::Timer) {
                        continue;
                    }
                    let [guard_first, guard_hedge] = &mut guards;
                    let (lane, outcome, answered) = match ran {
                        Ran::Cancelled => {
                            first.set(None);
                            second.set(None);
                            for (lane, guard) in
                                [(Lane::First, guard_first), (Lane::Hedge, guard_hedge)]
                            {
                                let permit = guard.take().and_then(PermitGuard::disarm);
                                let parts = route.parts(name);
                                pair.abandon(&mut call, &parts, lane, permit, now, &mut sink);
                            }
                            route.freed();
                            break;
                        }
                        Ran::Timer => match pair.due() {
                            Some(Due::Deadline(lane)) => (lane, Outcome::TimedOut, false),
                            Some(Due::Launch) => {
                                // The core grants the hedge before the operation is invoked.
                                let launch = |number| Some(op(number));
                                let parts = route.parts(name);
                                if let Some((permit, attempt)) =
                                    pair.launch(&mut call, &parts, now, &mut sink, launch)
                                {
                                    *guard_hedge = Some(PermitGuard::new(route, name, permit));
                                    second.set(Some(attempt));
                                }
                                continue;
                            }
                            None => continue,
                        },
                        Ran::Returned(lane, result) => {
                            let outcome = classify.classify(&result);
                            let answered = result.is_ok();
                            last = Some(result);
                            (lane, outcome, answered)
                        }
                    };
                    let (done, other, mut other_run) = match lane {
                        Lane::First => {
                            first.set(None);
                            (guard_first, guard_hedge, second.as_mut())
                        }
                        Lane::Hedge => {
                            second.set(None);
                            (guard_hedge, guard_first, first.as_mut())
                        }
                    };
                    let permit = done.take().and_then(PermitGuard::disarm);
                    let next = pair.finished(
                        &mut call,
                        &route.parts(name),
                        lane,
                        permit,
                        now,
                        outcome,
                        answered,
                        &mut sink,
                    );
                    route.freed();
                    if next != PairNext::Wait {
                        // The pair is over: the hedge, if one ran, won or lost.
                        if let (Some(share), Some(won)) = (hedge_share, pair.hedge_won()) {
                            share.on_hedge(won);
                        }
                    }
                    match next {
                        // A failure waits for the other attempt.
                        PairNext::Wait => {}
                        PairNext::Over => break,
                        PairNext::Drop(other_lane) => {
                            // The first success (or a permanent failure) decides: the loser is
                            // dropped, and reported as cancelled.
                            other_run.set(None);
                            let permit = other.take().and_then(PermitGuard::disarm);
                            let parts = route.parts(name);
                            pair.abandon(&mut call, &parts, other_lane, permit, now, &mut sink);
                            route.freed();
                            break;
                        }
                    }
                }
            }
            Step::Done(finished) => return finished.into_result(last),
            rest @ (Step::Wait(_) | Step::Reject(_)) => {
                if pause(route, &call, rest, now, cancel.as_mut()).await == Slept::Cancelled {
                    call.cancel();
                    return Err(CallError::Cancelled);
                }
                now = clock.now();
            }
        }
    }
}

/// What ended a wait of the hedged loop.
enum Ran<T> {
    /// The caller cancelled.
    Cancelled,
    /// An attempt of the pair returned.
    Returned(Lane, T),
    /// The timer armed for the pair's [`HedgedPair::wake_at`] fired.
    Timer,
}

/// Polls the cancellation, then the attempts in flight (the first, then the hedge), then the
/// pair's timer.
fn poll_pair<X: Future, Fut: Future>(
    cx: &mut Context<'_>,
    cancel: Pin<&mut X>,
    runs: [Pin<&mut Option<Fut>>; 2],
    timer: &mut Option<Timer>,
) -> Poll<Ran<Fut::Output>> {
    if cancel.poll(cx).is_ready() {
        return Poll::Ready(Ran::Cancelled);
    }
    for (lane, run) in [Lane::First, Lane::Hedge].into_iter().zip(runs) {
        if let Some(attempt) = run.as_pin_mut() {
            if let Poll::Ready(result) = attempt.poll(cx) {
                return Poll::Ready(Ran::Returned(lane, result));
            }
        }
    }
    if let Some(timer) = timer {
        if Pin::new(timer).poll(cx).is_ready() {
            return Poll::Ready(Ran::Timer);
        }
    }
    Poll::Pending
}

/// A policy's device seed, settable at run time from any task: two halves and whether it is set,
/// in 32-bit atomics (thumbv7m/v7em have no 64-bit ones; load and store are enough, so thumbv6m
/// too). A read racing a second `set` may mix the two seeds' halves, which is still a seed.
///
/// Beside it, a count of the calls begun, which salts each call's jitter: tasks woken on the
/// same tick begin their calls at the same instant and would otherwise back off in step.
#[derive(Debug)]
pub(crate) struct Seed {
    set: AtomicBool,
    high: AtomicU32,
    low: AtomicU32,
    begun: AtomicU32,
}

impl Seed {
    pub(crate) const fn unset() -> Seed {
        Seed {
            set: AtomicBool::new(false),
            high: AtomicU32::new(0),
            low: AtomicU32::new(0),
            begun: AtomicU32::new(0),
        }
    }

    const fn new(seed: u64) -> Seed {
        Seed {
            set: AtomicBool::new(true),
            high: AtomicU32::new((seed >> 32) as u32),
            low: AtomicU32::new(seed as u32),
            begun: AtomicU32::new(0),
        }
    }

    /// The salt of the next call: the count of calls begun, by load and store (thumbv6m has no
    /// atomic add). Two calls racing here may share a salt, which only costs them the
    /// separation the salt adds.
    pub(crate) fn next_salt(&self) -> u64 {
        let n = self.begun.load(Ordering::Relaxed).wrapping_add(1);
        self.begun.store(n, Ordering::Relaxed);
        u64::from(n)
    }

    pub(crate) fn set(&self, seed: u64) {
        self.high.store((seed >> 32) as u32, Ordering::Relaxed);
        self.low.store(seed as u32, Ordering::Relaxed);
        self.set.store(true, Ordering::Release);
    }

    pub(crate) fn get(&self) -> Option<u64> {
        if !self.set.load(Ordering::Acquire) {
            return None;
        }
        let high = u64::from(self.high.load(Ordering::Relaxed));
        Some(high << 32 | u64::from(self.low.load(Ordering::Relaxed)))
    }
}

/// Sleeps until the attempt deadline, or forever without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => Timer::at(to_embassy_instant(at)).await,
        None => Forever.await,
    }
}

/// Gives an attempt's permit back if the call's future is dropped before the attempt's outcome
/// is reported, so a half-open probe slot (or a bulkhead slot) never leaks.
struct PermitGuard<'n, G: Route> {
    route: G,
    name: &'n Name,
    permit: Option<Permit>,
}

impl<'n, G: Route> PermitGuard<'n, G> {
    fn new(route: G, name: &'n Name, permit: Permit) -> Self {
        PermitGuard {
            route,
            name,
            permit: Some(permit),
        }
    }

    /// The permit, to report its outcome with: the guard no longer releases it.
    fn disarm(mut self) -> Option<Permit> {
        self.permit.take()
    }
}

impl<G: Route> Drop for PermitGuard<'_, G> {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.route.parts(self.name).release(permit);
            self.route.freed();
        }
    }
}
