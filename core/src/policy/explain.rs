//! A policy describes itself in plain text: what bounds a call first, the worst-case timeline
//! of its attempts, the load it can add, what is measured now and what is missing. It is a
//! `core::fmt::Display`, so it works on a microcontroller (through `defmt`'s `Display2Format`
//! or a fixed buffer) as on a host.

use core::fmt;

use crate::breaker::settings::BreakerSettings;
use crate::breaker::Snapshot;
use crate::call::CallSettings;
use crate::call::GUARD_PAUSE;
use crate::limits::budget::BudgetSettings;
use crate::limits::budget::BudgetSnapshot;
use crate::limits::{
    AdaptiveLimitSettings, AdaptiveSnapshot, AnyRule, BulkheadSettings, LimitRule,
};
use crate::name::Name;
use crate::state::State;
use crate::time::Duration;

/// A policy's description: its call settings, and the breaker and budget it uses, if any,
/// optionally with their current readings.
///
/// ```
/// use stormguard_core::{BreakerSettings, BudgetSettings, CallSettings, policy::Explain};
///
/// let breaker = BreakerSettings::defaults("payments");
/// let budget = BudgetSettings::defaults("payments");
/// let text = Explain::new(&CallSettings::DEFAULT)
///     .breaker(&breaker)
///     .budget(&budget)
///     .to_string();
/// assert!(text.contains("the deadline bounds a call first"));
/// assert!(text.contains("retry budget"));
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
pub struct Explain<'a> {
    call: &'a CallSettings,
    name: Option<&'a Name>,
    limit: Option<AnyRule<'a>>,
    bulkhead: Option<&'a BulkheadSettings>,
    adaptive: Option<&'a AdaptiveLimitSettings>,
    adaptive_now: Option<AdaptiveSnapshot>,
    breaker: Option<&'a BreakerSettings>,
    budget: Option<&'a BudgetSettings>,
    breaker_now: Option<Snapshot>,
    budget_now: Option<BudgetSnapshot>,
    hedge_share: Option<u16>,
}

/// On a microcontroller's log, an explanation reads as its text.
#[cfg(feature = "defmt")]
impl defmt::Format for Explain<'_> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{}", defmt::Display2Format(self));
    }
}

impl<'a> Explain<'a> {
    /// A description of a policy with these call settings (no breaker, no budget yet).
    pub const fn new(call: &'a CallSettings) -> Explain<'a> {
        Explain {
            call,
            name: None,
            limit: None,
            bulkhead: None,
            adaptive: None,
            adaptive_now: None,
            hedge_share: None,
            breaker: None,
            budget: None,
            breaker_now: None,
            budget_now: None,
        }
    }

    /// The policy's name (by default its breaker's, or its budget's).
    pub const fn name(mut self, name: &'a Name) -> Explain<'a> {
        self.name = Some(name);
        self
    }

    /// The rate limiter every attempt takes a cell from, by its rule (its settings).
    ///
    /// ```
    /// use stormguard_core::{limits::BulkheadSettings, CallSettings, policy::Explain, limits::RateLimitSettings};
    /// use stormguard_core::limits::SlidingWindowSettings;
    ///
    /// let limit = RateLimitSettings::per_second("search", 100)?;
    /// let bulkhead = BulkheadSettings::builder("search").max_in_flight(8).build()?;
    /// let text = Explain::new(&CallSettings::DEFAULT)
    ///     .limit(&limit)
    ///     .bulkhead(&bulkhead)
    ///     .to_string();
    /// assert!(text.contains("- rate limit: 100 per 1s, burst 100"));
    /// assert!(text.contains("- bulkhead: 8 in flight, no waiting"));
    /// let sliding = SlidingWindowSettings::defaults("api");
    /// let text = Explain::new(&CallSettings::DEFAULT).limit(&sliding).to_string();
    /// assert!(text.contains("- rate limit: 50 per 60s, sliding in 8 segments;"));
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn limit<R: LimitRule>(self, rule: &'a R) -> Explain<'a> {
        self.limit_rule(rule.any())
    }

    /// [`Explain::limit`] for a limiter whose rule is erased ([`AnyLimiter::rule`](crate::limits::AnyLimiter::rule)).
    pub const fn limit_rule(mut self, rule: AnyRule<'a>) -> Explain<'a> {
        self.limit = Some(rule);
        self
    }

    /// The hedge win-rate loop is on, allowing `per_1024` 1024ths of calls a hedge now
    /// ([`HedgeShare`](crate::call::HedgeShare)); shown when hedging is.
    pub const fn hedge_share(mut self, per_1024: u16) -> Explain<'a> {
        self.hedge_share = Some(per_1024);
        self
    }

    /// The bulkhead every attempt holds a slot of.
    pub const fn bulkhead(mut self, settings: &'a BulkheadSettings) -> Explain<'a> {
        self.bulkhead = Some(settings);
        self
    }

    /// The adaptive concurrency limiter every attempt holds a slot of.
    ///
    /// ```
    /// use stormguard_core::{limits::AdaptiveLimiter, limits::AdaptiveLimitSettings, CallSettings, policy::Explain};
    /// let settings = AdaptiveLimitSettings::builder("search").build()?;
    /// let limiter = AdaptiveLimiter::new(settings);
    /// let text = Explain::new(&CallSettings::DEFAULT)
    ///     .adaptive_limit(&settings)
    ///     .adaptive_now(limiter.snapshot())
    ///     .to_string();
    /// assert!(text.contains("- adaptive limit: 20 in flight (4..=200)"), "{text}");
    /// assert!(text.contains("- measured now: adaptive limit 20 (0 in flight), no latency baseline yet"), "{text}");
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub const fn adaptive_limit(mut self, settings: &'a AdaptiveLimitSettings) -> Explain<'a> {
        self.adaptive = Some(settings);
        self
    }

    /// Where the adaptive limiter stands now (its snapshot), for the "measured now" part.
    pub const fn adaptive_now(mut self, snapshot: AdaptiveSnapshot) -> Explain<'a> {
        self.adaptive_now = Some(snapshot);
        self
    }

    /// The breaker the policy asks before every attempt.
    pub const fn breaker(mut self, settings: &'a BreakerSettings) -> Explain<'a> {
        self.breaker = Some(settings);
        self
    }

    /// The retry budget the policy asks before every retry.
    pub const fn budget(mut self, settings: &'a BudgetSettings) -> Explain<'a> {
        self.budget = Some(settings);
        self
    }

    /// What the breaker measures now (its snapshot), for the "measured now" part.
    pub const fn breaker_now(mut self, snapshot: Snapshot) -> Explain<'a> {
        self.breaker_now = Some(snapshot);
        self
    }

    /// What the budget holds now, for the "measured now" part.
    pub const fn budget_now(mut self, snapshot: BudgetSnapshot) -> Explain<'a> {
        self.budget_now = Some(snapshot);
        self
    }

    /// The worst case of one call: every attempt running to its timeout and every wait at its
    /// longest, without the deadline's cut. `None` when attempts have no timeout.
    fn unbounded_worst(&self) -> Option<Duration> {
        let per_attempt = self.call.attempt_timeout()?;
        let attempts = self.call.max_attempts();
        let mut total = per_attempt.saturating_mul(u64::from(attempts));
        for retry in 1..attempts {
            total = total.saturating_add(self.call.backoff().nominal(retry, false));
        }
        Some(total)
    }
}

impl fmt::Display for Explain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = self.call;
        let attempts = call.max_attempts();
        let retries = attempts.saturating_sub(1);
        // Hedges and the measured ceiling wait for a p95 only a breaker keeping statistics has.
        let learns_p95 = self.breaker.is_some_and(BreakerSettings::keeps_statistics);
        let (noun, take) = if attempts == 1 {
            ("attempt", "takes")
        } else {
            ("attempts", "take")
        };
        let name = self
            .name
            .map(Name::as_str)
            .or(self.breaker.map(|b| b.name().as_str()))
            .or(self.budget.map(|b| b.name().as_str()));
        match name {
            Some(n) => writeln!(f, "policy `{n}`")?,
            None => writeln!(f, "policy")?,
        }

        // What bounds a call first.
        match (call.deadline(), self.unbounded_worst()) {
            (Some(deadline), Some(worst)) if worst > deadline => writeln!(
                f,
                "- the deadline bounds a call first: {deadline}, before {attempts} {noun} \
                 could run to their timeouts ({worst})"
            )?,
            (Some(deadline), Some(worst)) => writeln!(
                f,
                "- the attempt limit bounds a call first: {attempts} {noun} {take} at most \
                 {worst}, inside the {deadline} deadline"
            )?,
            (Some(deadline), None) => writeln!(
                f,
                "- the deadline bounds a call: {deadline} (attempts have no timeout)"
            )?,
            (None, Some(worst)) => writeln!(
                f,
                "- the attempt limit bounds a call: {attempts} {noun} {take} at most {worst} \
                 (no deadline)"
            )?,
            (None, None) => writeln!(f, "- nothing bounds how long a call may take")?,
        }

        // The worst-case timeline.
        writeln!(f, "- worst-case timeline:")?;
        let mut at = Duration::ZERO;
        for attempt in 1..=attempts {
            if let Some(d) = call.deadline() {
                if at >= d {
                    writeln!(f, "    {at}: deadline reached, the call ends")?;
                    break;
                }
            }
            match call.attempt_timeout() {
                Some(t) => {
                    let end = at.saturating_add(t);
                    match call.deadline() {
                        Some(d) if end >= d => {
                            writeln!(f, "    {at}: attempt {attempt}, cut at {d} by the deadline if it hangs")?;
                            break;
                        }
                        _ => writeln!(f, "    {at}: attempt {attempt}, cut at {end} if it hangs")?,
                    }
                    at = end;
                }
                None => {
                    writeln!(
                        f,
                        "    {at}: attempt {attempt}, no timeout: it may hang until the deadline"
                    )?;
                    break;
                }
            }
            if attempt < attempts {
                let wait = call.backoff().nominal(attempt, false);
                // Without jitter the wait is exactly the nominal one.
                let up_to = if call.backoff().jitter() == crate::call::backoff::Jitter::None {
                    ""
                } else {
                    "up to "
                };
                writeln!(f, "    {at}: wait {up_to}{wait} ({})", call.backoff())?;
                at = at.saturating_add(wait);
            }
        }
        if self.breaker.is_some()
            || self.budget.is_some()
            || self.limit.is_some()
            || self.bulkhead.is_some()
            || self.adaptive.is_some()
        {
            writeln!(f, "    a refusal is reported after a {GUARD_PAUSE} pause (less if the deadline is nearer)")?;
        }
        if call.measured_ceiling() && learns_p95 {
            writeln!(
                f,
                "    attempts are also cut at 3x the learned p95 once the breaker knows it"
            )?;
        }
        if call.hedging() && learns_p95 && attempts > 1 {
            writeln!(
                f,
                "    an attempt still running at the learned p95 gets a hedge beside it (at most 2 \
                 in flight, the first success wins, each hedge an attempt and a retry), never \
                 while the breaker is not closed or is near its trip point"
            )?;
            if let Some(share) = self.hedge_share {
                writeln!(
                    f,
                    "    the hedge win-rate loop allows {share}/1024 of calls a hedge now (four \
                     losing hedges in a row halve the share, down to 16/1024; a winning one \
                     doubles it)"
                )?;
            }
        }

        // What admits an attempt besides the breaker.
        match self.limit {
            Some(AnyRule::Gcra(l)) => writeln!(
                f,
                "- rate limit: {l}; every attempt (retries and hedges too) takes a cell"
            )?,
            Some(AnyRule::Window(l)) => writeln!(
                f,
                "- rate limit: {l}; every attempt (retries and hedges too) counts"
            )?,
            Some(AnyRule::Sliding(l)) => writeln!(
                f,
                "- rate limit: {l}; every attempt (retries and hedges too) counts, a refusal \
                 waits for the oldest segment with calls to leave"
            )?,
            Some(AnyRule::Quota(_)) | None => {}
        }
        if let Some(b) = self.bulkhead {
            writeln!(
                f,
                "- bulkhead: {b}; every attempt holds a slot while it runs"
            )?;
        }
        if let Some(a) = self.adaptive {
            writeln!(
                f,
                "- adaptive limit: {a}; every attempt holds a slot while it runs, and the limit \
                 grows by one a round only when it held calls back"
            )?;
        }

        // The load it can add.
        let plural = if retries == 1 { "retry" } else { "retries" };
        if retries == 0 {
            writeln!(f, "- load: no retries: one attempt per call")?;
        } else {
            let factor = attempts;
            match self.budget {
                Some(b) => writeln!(
                    f,
                    "- load: up to {retries} {plural} per call ({factor}x) only while the retry budget \
                     lasts; it holds retries to {b}, so in an outage the sustained load is about \
                     1x plus the floor"
                )?,
                None => writeln!(
                    f,
                    "- load: up to {retries} {plural} per call: {factor}x the load on a dependency \
                     that is failing every call"
                )?,
            }
        }
        if let Some(now) = self.budget_now {
            writeln!(
                f,
                "    budget spent now: {} ({} retries available)",
                now.utilization, now.available
            )?;
        }

        // What is measured now.
        if let Some(a) = self.adaptive_now {
            write!(
                f,
                "- measured now: adaptive limit {} ({} in flight)",
                a.limit, a.in_flight
            )?;
            match a.baseline {
                Some(b) => writeln!(f, ", latency baseline (p10) {b}")?,
                None => writeln!(f, ", no latency baseline yet (cold)")?,
            }
        }
        match (self.breaker, self.breaker_now) {
            (Some(settings), Some(s)) => {
                write!(f, "- measured now: breaker {}", s.state)?;
                match s.normal_latency {
                    Some(l) => write!(f, ", normal latency {l}")?,
                    None => write!(f, ", no latency baseline yet (cold)")?,
                }
                match s.normal_failure_rate {
                    Some(r) => write!(f, ", normal failure rate {r}")?,
                    None => write!(f, ", no failure-rate baseline yet (cold)")?,
                }
                write!(
                    f,
                    ", trips after {} consecutive failures",
                    s.consecutive_to_trip
                )?;
                // The run rises with the normal failure rate above, which the breaker learns
                // from its trip window too, before the relative error-rate rule is armed.
                let configured = settings.consecutive_failures();
                if s.consecutive_to_trip > configured {
                    write!(f, " (raised from {configured} by the failures seen so far)")?;
                }
                if s.state == State::Open {
                    write!(f, ", half-open in {}", s.until_half_open)?;
                }
                writeln!(f)?;
            }
            (Some(_), None) => {
                writeln!(f, "- measured now: not given (pass the breaker's snapshot)")?
            }
            (None, _) => {}
        }

        // What is missing.
        let mut missing = false;
        let mut gap = |f: &mut fmt::Formatter<'_>, text: &str| -> fmt::Result {
            if !missing {
                writeln!(f, "- missing:")?;
                missing = true;
            }
            writeln!(f, "    {text}")
        };
        if self.breaker.is_none() {
            gap(
                f,
                "no breaker: nothing stops a call reaching a dependency that is already down",
            )?;
        }
        if self.budget.is_none() && retries > 0 {
            gap(f, "no retry budget: in an outage every call makes all its attempts, and a fleet multiplies its load")?;
        }
        if call.deadline().is_none() {
            gap(
                f,
                "no deadline: a caller cannot know how long a call may take",
            )?;
        }
        if call.attempt_timeout().is_none() {
            gap(
                f,
                "no attempt timeout: a hung attempt holds the call until the deadline",
            )?;
        }
        match self.breaker {
            None if call.hedging() => gap(
                f,
                "hedging is on but no breaker learns the p95 it waits for: no hedge is ever launched",
            )?,
            Some(_) if call.hedging() && !learns_p95 => gap(
                f,
                "hedging is on but the breaker learns no p95 (consecutive-only, not learning): no \
                 hedge is ever launched",
            )?,
            _ => {}
        }
        if !missing {
            writeln!(f, "- missing: nothing")?;
        }
        Ok(())
    }
}
