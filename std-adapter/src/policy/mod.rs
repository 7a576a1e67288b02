//! `policy.call(|attempt| async { ... }).await`: the core's call driver, run on tokio.
//!
//! The loop is the one in the design (DESIGN.md, "The core is sans-IO"): ask the core's
//! [`Call`] what to do next, do it, report back. Every decision (admit, retry, wait how long,
//! refuse, give up) is the core's; this module reads the clock (twice per attempt: before and
//! after), runs the operation against its attempt deadline, sleeps cancellably and forwards
//! events.

mod blocking;
mod builder;
#[cfg(feature = "tokio")]
mod drain;
mod guard;
mod options;
#[cfg(feature = "tokio")]
mod run;
mod steps;
#[cfg(feature = "tokio")]
mod stream;

use std::cell::Cell;
use std::sync::Arc;

use stormguard_core::{
    call::SharedHedgeShare, limits::SharedQuota, policy::Explain, Call, CallError, CallSettings,
    Event, Finished, Instant, Name, Parts, Step,
};

use crate::classify::Classify;
use crate::clock::{default_clock, Clock, DefaultClock, SteadyClock};
use crate::events::{self, Listener, NoListener};
use crate::handles::entropy_seed;
use crate::{Breaker, Budget};

use builder::Choice;
pub use builder::PolicyBuilder;
#[cfg(feature = "tokio")]
pub use drain::Drain;
use guard::PermitGuard;
#[cfg(feature = "tokio")]
pub(crate) use guard::{Attempt, CallEnd};
pub(crate) use guard::{Report, Slept};
pub use options::CallOptions;
#[cfg(feature = "tokio")]
use options::DEFAULT_OPTIONS;
pub use steps::{AdaptiveLimit, Bulkhead, Limiter};
use steps::{BreakerParts, CallParts};
#[cfg(feature = "tokio")]
pub use stream::CallStream;

/// A call's result with the log of its attempts: [`Policy::call_logged`] and
/// [`Policy::call_blocking_logged`] (`E` is their [`CallError`]), and
/// `KeyedPolicy::call_logged` (`E` is its `KeyedError`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logged<T, E> {
    /// What the same call without its log would have returned.
    pub result: Result<T, E>,
    /// How each attempt ended, in the order they ended.
    pub attempts: stormguard_core::call::AttemptLog,
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
/// # async fn main() -> Result<(), stormguard_std::SettingsError> {
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
    limiter: Option<Limiter>,
    bulkhead: Option<Bulkhead>,
    adaptive: Option<AdaptiveLimit>,
    /// The quota the dependency publishes ([`PolicyBuilder::published_quotas`]), if kept.
    quota: Option<Arc<SharedQuota>>,
    /// The hedge win-rate loop ([`PolicyBuilder::hedge_win_rate`]), if on.
    hedge_share: Option<Arc<SharedHedgeShare>>,
    settings: CallSettings,
    /// The same settings with one attempt, for calls that cannot be repeated.
    single: CallSettings,
    /// Whether calls serving a caller's retry may retry ([`PolicyBuilder::retries_when_nested`]).
    retries_when_nested: bool,
    /// The drain every call watches ([`PolicyBuilder::drain`]), if any.
    #[cfg(feature = "tokio")]
    drain: Option<Drain>,
    /// The probe whose episodes hold latency learning ([`PolicyBuilder::saturation`]), if any.
    #[cfg(feature = "tokio")]
    saturation: Option<crate::saturation::SaturationProbe>,
    /// Whether a part reads how long an attempt took ([`Policy::parts_time_attempts`]), kept
    /// so that a call reads one flag.
    #[cfg(feature = "tokio")]
    times_attempts: bool,
    clock: SteadyClock<K>,
    listener: L,
}

impl Policy {
    /// A builder for a policy named `name`: the name its breaker, budget and events carry.
    /// Breaker and budget settings handed to the builder must carry the same name; shared
    /// [`Breaker`] and [`Budget`] handles keep their own.
    pub fn builder(name: &'static str) -> PolicyBuilder {
        Policy::builder_named(Name::new(name))
    }

    /// A builder for a policy named `name`, e.g. from a configuration file.
    ///
    /// ```
    /// use stormguard_std::Name;
    /// let name = Name::try_from_str(&String::from("orders")).unwrap();
    /// let p = stormguard_std::Policy::builder_named(name).build()?;
    /// assert_eq!(p.name().as_str(), "orders");
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn builder_named(name: Name) -> PolicyBuilder {
        PolicyBuilder {
            name,
            breaker: Choice::Default,
            budget: Choice::Default,
            limiter: None,
            bulkhead: None,
            adaptive: None,
            quota: None,
            hedge_win_rate: false,
            measured_base: None,
            call: CallSettings::builder().seed(entropy_seed()),
            retries_when_nested: true,
            #[cfg(feature = "tokio")]
            drain: None,
            #[cfg(feature = "tokio")]
            saturation: None,
            clock: default_clock(),
            listener: NoListener,
        }
    }
}

impl<K: Clone, L: Clone> Policy<K, L> {
    /// This policy with `breaker` in place of its own (or of none): everything else (budget,
    /// limiter, bulkhead, settings, clock, listener) shared with or copied from this one. A
    /// keyed table makes each key's policy so; `breaker` must carry this policy's name.
    #[cfg(feature = "tokio")]
    pub(crate) fn with_breaker(&self, breaker: Breaker) -> Policy<K, L> {
        Policy {
            breaker: Some(breaker),
            // A quota is the host's: each key keeps its own, as it keeps its own breaker.
            quota: self
                .quota
                .as_ref()
                .map(|q| Arc::new(SharedQuota::new(*q.settings()))),
            ..self.clone()
        }
        .timing_settled()
    }
}

impl<K, L> Policy<K, L> {
    /// The share of calls the hedge win-rate loop allows a hedge now, in 1024ths (16 to 1024);
    /// `None` without the loop ([`PolicyBuilder::hedge_win_rate`]).
    #[must_use]
    pub fn hedge_share(&self) -> Option<u16> {
        self.hedge_share
            .as_deref()
            .map(SharedHedgeShare::share_per_1024)
    }

    /// Whether calls made while serving a caller's retry may retry
    /// ([`PolicyBuilder::retries_when_nested`]).
    #[must_use]
    pub fn retries_when_nested(&self) -> bool {
        self.retries_when_nested
    }

    /// Whether this call serves a caller's retry and this policy leaves retrying to it.
    #[inline]
    fn nested_and_held(&self) -> bool {
        #[cfg(feature = "tokio")]
        return !self.retries_when_nested && crate::nested::inbound_retry().is_some();
        #[cfg(not(feature = "tokio"))]
        false
    }

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

    /// The rate limiter in front of the breaker, if any.
    #[must_use]
    pub fn limiter(&self) -> Option<&Limiter> {
        self.limiter.as_ref()
    }

    /// The bulkhead in front of the breaker, if any.
    #[must_use]
    pub fn bulkhead(&self) -> Option<&Bulkhead> {
        self.bulkhead.as_ref()
    }

    /// The quota the dependency published, if the policy keeps one
    /// ([`PolicyBuilder::published_quotas`]): in a keyed table, this key's.
    #[must_use]
    pub fn quota(&self) -> Option<&SharedQuota> {
        self.quota.as_deref()
    }

    /// The adaptive concurrency limiter in front of the breaker, if any.
    #[must_use]
    pub fn adaptive_limit(&self) -> Option<&AdaptiveLimit> {
        self.adaptive.as_ref()
    }

    /// How calls retry and how long they may take.
    #[must_use]
    pub fn settings(&self) -> &CallSettings {
        &self.settings
    }

    /// The clock the policy reads. The policy reads it through a [`SteadyClock`], so a
    /// reading that steps back never holds a call past its deadline or a breaker open past its
    /// break; reading this clock directly gives its own readings.
    #[must_use]
    pub fn clock(&self) -> &K {
        self.clock.inner()
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
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn with_listener<L2>(self, listener: L2) -> Policy<K, L2> {
        Policy {
            name: self.name,
            breaker: self.breaker,
            budget: self.budget,
            limiter: self.limiter,
            bulkhead: self.bulkhead,
            adaptive: self.adaptive,
            quota: self.quota,
            hedge_share: self.hedge_share,
            settings: self.settings,
            single: self.single,
            retries_when_nested: self.retries_when_nested,
            #[cfg(feature = "tokio")]
            drain: self.drain,
            #[cfg(feature = "tokio")]
            saturation: self.saturation,
            #[cfg(feature = "tokio")]
            times_attempts: self.times_attempts,
            clock: self.clock,
            listener,
        }
    }

    /// The drain every call of the policy watches ([`PolicyBuilder::drain`]), if any.
    #[cfg(feature = "tokio")]
    #[must_use]
    pub fn drain(&self) -> Option<&Drain> {
        self.drain.as_ref()
    }

    /// The probe whose episodes hold latency learning ([`PolicyBuilder::saturation`]), if
    /// any.
    #[cfg(feature = "tokio")]
    #[must_use]
    pub fn saturation(&self) -> Option<&crate::saturation::SaturationProbe> {
        self.saturation.as_ref()
    }

    /// The parts of one call.
    #[inline]
    pub(crate) fn parts(&self) -> CallParts<'_> {
        let Parts {
            name,
            breaker,
            budget,
            ..
        } = self.breaker_parts();
        Parts {
            name,
            breaker,
            budget,
            limiter: self.limiter.as_ref().map(Limiter::shared),
            quota: self.quota.as_deref(),
            bulkhead: self.bulkhead.as_ref().map(|b| b.inner.slots()),
            adaptive: self.adaptive.as_ref().map(AdaptiveLimit::shared),
            #[cfg(feature = "tokio")]
            saturation: self
                .saturation
                .as_ref()
                .map(crate::saturation::SaturationProbe::signal),
            #[cfg(not(feature = "tokio"))]
            saturation: None,
        }
    }

    /// The parts of one call of a policy that has no optional part (checked by the caller):
    /// the breaker (or none) and the budget (or none), the others known absent, so a call built
    /// from them neither reads nor keeps them. [`Policy::parts`] starts from these.
    #[inline]
    pub(crate) fn breaker_parts(&self) -> BreakerParts<'_> {
        let breaker = self.breaker.as_ref().map(Breaker::shared);
        Parts {
            // Events carry the breaker's name; only a call without a breaker needs the policy's.
            name: if breaker.is_none() {
                Some(self.name)
            } else {
                None
            },
            breaker,
            budget: self.budget.as_ref().map(Budget::shared),
            limiter: None,
            quota: None,
            bulkhead: None,
            adaptive: None,
            saturation: None,
        }
    }

    /// Wakes a caller waiting for the policy's bulkhead, if one waits: after an attempt was
    /// reported or given back (its slot freed).
    #[inline]
    pub(crate) fn wake_bulkhead_waiter(&self) {
        if let Some(b) = &self.bulkhead {
            b.inner.wake_if_waiting();
        }
    }

    /// The call driver for a call starting at `now` with `options`' deadline, salted with the
    /// thread's count of calls begun so that calls beginning at the same instant (paused time,
    /// a coarse clock) do not back off in step; `logging` when the call keeps an attempt log.
    pub(crate) fn begin<C>(&self, options: &CallOptions<'_, C>, now: Instant, logging: bool) -> Call
    where
        L: Listener,
    {
        let mut call = Call::begin_salted(self.call_settings(options), now, next_salt());
        options.tighten(&mut call, now);
        call.set_attempt_events(self.attempt_events(logging));
        call
    }

    /// Whether a call builds its attempt events: for its attempt log (`logging`), the
    /// listener, or `tracing` at TRACE. Nothing else takes them, so a call made without them
    /// skips building one event per attempt.
    #[inline]
    pub(crate) fn attempt_events(&self, logging: bool) -> bool
    where
        L: Listener,
    {
        logging || self.listener.hears_attempts() || events::traces_attempts()
    }

    /// Whether a part of this policy reads how long an attempt took, or when it ended: a
    /// breaker that keeps statistics (its latency rules and baselines), the adaptive limit,
    /// the published quota, the saturation probe, hedging. Without one, a successful attempt
    /// of a closed breaker needs no clock reading at its end.
    #[cfg(feature = "tokio")]
    #[inline]
    pub(crate) const fn times_attempts(&self) -> bool {
        self.times_attempts
    }

    /// This policy with [`Policy::times_attempts`] read from its parts: once built, and
    /// whenever a part is replaced.
    #[cfg(feature = "tokio")]
    pub(crate) fn timing_settled(mut self) -> Self {
        self.times_attempts = self.parts_time_attempts();
        self
    }

    /// Without `tokio` no call skips the reading.
    #[cfg(not(feature = "tokio"))]
    pub(crate) const fn timing_settled(self) -> Self {
        self
    }

    /// [`Policy::times_attempts`], read from the parts.
    #[cfg(feature = "tokio")]
    fn parts_time_attempts(&self) -> bool {
        self.adaptive.is_some()
            || self.quota.is_some()
            || self.saturation.is_some()
            || self.settings.hedging()
            || self
                .breaker
                .as_ref()
                .is_some_and(|b| b.settings().keeps_statistics())
    }

    /// The settings a call made with `options` runs under.
    #[inline]
    pub(crate) fn call_settings<C>(&self, options: &CallOptions<'_, C>) -> &CallSettings {
        if options.single_attempt || self.nested_and_held() {
            &self.single
        } else {
            &self.settings
        }
    }
}

/// The salt of the next call begun on this thread: a count, so the same program draws the same
/// jitter run after run (with a fixed seed), and no shared write is added to the call path.
pub(crate) fn next_salt() -> u64 {
    thread_local! {
        static BEGUN: Cell<u64> = const { Cell::new(0) };
    }
    BEGUN.with(|begun| {
        let n = begun.get().wrapping_add(1);
        begun.set(n);
        n
    })
}

impl<K: Clock, L: Listener> Policy<K, L> {
    /// Forces the breaker open until [`Policy::reset`]; the event goes to `tracing` and the
    /// listener. Does nothing without a breaker.
    ///
    /// ```
    /// use stormguard_std::State;
    /// let p = stormguard_std::Policy::builder("db").build()?;
    /// p.isolate();
    /// assert_eq!(p.breaker().unwrap().state(), State::Isolated);
    /// p.reset();
    /// assert_eq!(p.breaker().unwrap().state(), State::Closed);
    /// # Ok::<(), stormguard_std::SettingsError>(())
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

    /// The policy describes itself in plain text (the core's [`Explain`]): what bounds a call
    /// first, the worst-case timeline of its attempts, the load it can add, what its breaker
    /// and budget measure now (read at the policy's clock), and what is missing.
    ///
    /// ```
    /// let policy = stormguard_std::Policy::builder("payments").build()?;
    /// let text = policy.explain().to_string();
    /// assert!(text.starts_with("policy `payments`"));
    /// assert!(text.contains("no latency baseline yet (cold)"));
    /// println!("{}", policy.explain());
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn explain(&self) -> Explain<'_> {
        let now = self.clock.now();
        let mut explain = Explain::new(&self.settings).name(&self.name);
        if let Some(l) = self.limiter() {
            explain = explain.limit_rule(l.rule());
        }
        if let Some(b) = self.bulkhead() {
            explain = explain.bulkhead(b.settings());
        }
        if let Some(share) = self.hedge_share() {
            explain = explain.hedge_share(share);
        }
        if let Some(a) = self.adaptive_limit() {
            explain = explain
                .adaptive_limit(a.settings())
                .adaptive_now(a.snapshot());
        }
        if let Some(b) = &self.breaker {
            explain = explain
                .breaker(b.settings())
                .breaker_now(b.snapshot_at(now));
        }
        if let Some(b) = &self.budget {
            explain = explain.budget(b.settings()).budget_now(b.snapshot_at(now));
        }
        explain
    }

    #[inline]
    pub(crate) fn emit(&self, event: &Event<'_>) {
        events::emit(&self.listener, event);
    }

    /// Sends a call's `event` on ([`Policy::emit`]), and into the call's attempt log when it
    /// keeps one.
    #[inline]
    pub(crate) fn emit_logged(
        &self,
        event: &Event<'_>,
        log: &mut Option<&mut stormguard_core::call::AttemptLog>,
    ) {
        self.emit(event);
        if let Some(log) = log.as_deref_mut() {
            log.record(event);
        }
    }

    /// Runs `op` under the policy, blocking the thread, with no async runtime: `op(attempt)`
    /// (1 for the first attempt) makes one attempt; `Ok` is a success, every `Err` a transient
    /// failure. Waits and the guarded pause are `std::thread` sleeps.
    ///
    /// An attempt cannot be interrupted: one that returns after its attempt timeout counts as
    /// [`Outcome::TimedOut`](crate::Outcome::TimedOut) unless it succeeded (the value is in
    /// hand; the breaker sees a slow call). Set the operation's own I/O timeout to the policy's
    /// attempt timeout.
    ///
    /// The rate limiter and the bulkhead apply as in the async form, except that a full
    /// bulkhead refuses at once (no bounded wait), and the blocking form never hedges: one
    /// attempt at a time, always (see [`PolicyBuilder::hedging`]).
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
    /// # Ok::<(), stormguard_std::SettingsError>(())
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
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn call_blocking_with<T, E, F, C>(
        &self,
        options: CallOptions<'_, C>,
        op: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Result<T, E>,
        C: Classify<T, E>,
    {
        self.run_blocking(&options, op, None)
    }

    /// [`Policy::call_blocking_with`], keeping how each attempt ended, as
    /// [`Policy::call_logged`] does for an async call.
    ///
    /// ```
    /// use stormguard_std::{CallOptions, Outcome, Policy};
    ///
    /// let policy = Policy::builder("ledger").backoff(stormguard_std::Backoff::none()).build()?;
    /// let logged = policy.call_blocking_logged(CallOptions::new(), |attempt| {
    ///     if attempt == 1 { Err("reset") } else { Ok(attempt) }
    /// });
    /// assert_eq!(logged.result, Ok(2));
    /// assert_eq!(logged.attempts.len(), 2);
    /// let first = logged.attempts.iter().next().unwrap();
    /// assert_eq!(first.end.outcome(), Some(Outcome::Transient));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn call_blocking_logged<T, E, F, C>(
        &self,
        options: CallOptions<'_, C>,
        op: F,
    ) -> Logged<T, CallError<E>>
    where
        F: FnMut(u32) -> Result<T, E>,
        C: Classify<T, E>,
    {
        let mut attempts = stormguard_core::call::AttemptLog::new();
        let result = self.run_blocking(&options, op, Some(&mut attempts));
        Logged { result, attempts }
    }

    /// The blocking call proper; its events also go into `log`, when given one.
    fn run_blocking<T, E, F, C>(
        &self,
        options: &CallOptions<'_, C>,
        mut op: F,
        mut log: Option<&mut stormguard_core::call::AttemptLog>,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(u32) -> Result<T, E>,
        C: Classify<T, E>,
    {
        let parts = self.parts();
        let span = crate::events::call_span(&self.name);
        let _in_call = span.enter();
        let mut now = self.clock.now();
        let mut report = Report::new(&self.listener, &self.name, span.clone(), now);
        let mut call = self.begin(options, now, log.is_some());
        let mut sink = |e: Event<'_>| self.emit_logged(&e, &mut log);
        let mut last: Option<Result<T, E>> = None;
        #[cfg(feature = "tokio")]
        let drain: blocking::DrainRef<'_> = options.drain.or(self.drain.as_ref());
        #[cfg(not(feature = "tokio"))]
        let drain: blocking::DrainRef<'_> = None;
        let finished = loop {
            // The core decides what a drain stops; it is told before every step (an attempt
            // cannot be cut short here: one in flight runs to its end).
            blocking::watch_drain(drain, &mut call, now);
            match call.poll(&parts, now, &mut sink) {
                Step::Attempt(permit) => {
                    let guard = PermitGuard::new(self, &parts, permit);
                    if blocking::is_cancelled(options) {
                        drop(guard);
                        call.cancel();
                        break Finished::Cancelled;
                    }
                    report.attempt(call.attempts());
                    let attempt = crate::events::attempt_span(&span, call.attempts(), false);
                    let result = attempt.in_scope(|| op(call.attempts()));
                    now = self.clock.now();
                    // The attempt could not be cut short: the core judges a late answer.
                    let outcome = options.classify.classify(&result);
                    if let Some(quota) = parts.quota {
                        quota.on_published(now, options.classify.published(&result));
                    }
                    let (outcome, answered) = call.judge_answer(now, outcome, result.is_ok());
                    crate::events::record_outcome(&attempt, outcome.as_str());
                    last = Some(result);
                    if let Some(permit) = guard.disarm() {
                        call.complete_attempt(&parts, permit, now, outcome, answered, &mut sink);
                        self.wake_bulkhead_waiter();
                    }
                }
                Step::Wait(wait) => {
                    if blocking::sleep(wait, options, drain) == Slept::Cancelled {
                        call.cancel();
                        break Finished::Cancelled;
                    }
                    now = self.clock.now();
                }
                Step::Reject(rejection) => {
                    // Announced (the core emitted `Rejected` with this pause), then served; the
                    // next poll hands the rejection out as `Finished::Rejected`.
                    if blocking::sleep(rejection.pause, options, None) == Slept::Cancelled {
                        break Finished::Cancelled;
                    }
                    report.served(rejection.pause);
                }
                Step::Done(finished) => break finished,
            }
        };
        report.end(finished, finished.into_result(last), now)
    }
}
