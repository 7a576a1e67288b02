//! Prototype adaptive concurrency-limit rules, compared in the simulator with the core's.
//!
//! The core's rule ([`AdaptiveLimiter`]) shrinks the limit when a round's *fastest* call took
//! more than a tolerance (2x) times the 10th percentile of the latencies it has learned. On a
//! queue that stretches every latency in proportion to the calls past capacity, the fastest
//! of a round passes 2x its p10 only at about 2.7x the capacity, so with its defaults it lets
//! the queue grow into the breaker's slow-call rule. The rules here are candidates for a
//! default that needs no tuning; they are prototypes, not the core's: the simulator runs them
//! in the core's call driver through [`AdaptiveSlots`], the same place the core's limiter
//! takes, and a later change may port the chosen one to the core.
//!
//! Both candidates read the same signal: how much a round's calls were stretched against the
//! dependency's latency when nothing queues.
//!
//! - **The no-load latency** is the geometric mean of successful calls' latencies (the mean
//!   of their logarithms: for a log-normal dependency, its median) measured at the limit's
//!   floor, as Envoy's filter measures its minimum round-trip time: the limiter holds the
//!   limit at its floor until the calls admitted above it are done, and takes the mean of the
//!   next [`MEASURE_ROUND`] calls. It does so once its first [`WARM_UP`] calls have given it a
//!   first guess (the limit holds still until then: the guess may be a queue's), and again
//!   every [`REMEASURE`], at the first round that kept less than half the limit busy, held
//!   nothing back and did not queue (so a measurement never costs a saturated dependency its
//!   throughput, nor a backlog its slots), or that kept hardly more than the floor busy.
//!   Between measurements nothing moves it: a queue the limiter let build never becomes the
//!   new normal, and a dependency that became slower on its own (a brownout, which no limit
//!   can shrink) is the new normal at the next measurement.
//! - **A round** is [`MIN_ROUND`] completed calls, whatever the limit: a capacity that falls
//!   is seen within that many calls, before the queue it builds passes what the dependency
//!   will hold. Its **stretch** is the geometric mean of its successful calls' latencies over
//!   the no-load latency: 1 when nothing queues, `q` when every call waits `q` times as long.
//!   A mean of logarithms over a round is far steadier than the round's fastest call. Its
//!   **busy** count is the mean of the calls in flight each of its calls found as it ended.
//!
//! The two control laws, at each round's end:
//!
//! - [`Rule::Gradient`], after the gradient on the minimum round-trip time of Netflix's
//!   Gradient2 and Envoy's adaptive concurrency filter: the limit is multiplied by
//!   `clamp(tolerance / stretch, 0.5, 1)` and given a headroom of its square root; it moves
//!   there at once when that is lower, halfway when higher. It settles where the stretch is
//!   about `tolerance` plus what the headroom adds.
//! - [`Rule::Vegas`], after TCP Vegas and Netflix's Vegas limit: of the busy calls, `busy /
//!   stretch` are being served and the rest wait. Past `beta x log10(busy)` waiting, the limit
//!   falls by `log10(busy)` (at least 1), or at once to what is being served plus the middle
//!   of the band when the queue is far past it (a capacity that just fell); under `alpha x
//!   log10(busy)` it grows by the band's room (at least `log10(busy)`). `alpha` and `beta` are
//!   3 and 6 by default, Vegas's own, so the queue it keeps grows slowly with the concurrency
//!   it finds.
//!
//! Either grows only after a round in which the limit refused a call, as the core's rule:
//! an idle limiter's limit says what the dependency took, not how long nothing happened.

use std::cell::RefCell;

use stormguard_core::{
    limits::AdaptiveLimitSettings, limits::AdaptiveLimiter, part::AdaptiveSlots, Duration, Instant,
    RefusalReason, Refused,
};

/// The completed calls a round has, whatever the limit: fewer make the stretch too noisy to
/// act on (with a log-normal spread of 0.47, 16 calls put it within 12% two times in three);
/// more let a queue grow for longer before the limit answers it.
pub const MIN_ROUND: u32 = 16;

/// The calls whose latencies make the first guess at the no-load latency, before the first
/// measurement at the floor.
pub const WARM_UP: u32 = 100;

/// A round whose stretch is under this did not queue (the spread of a round's mean is about a
/// tenth): a measurement then costs the dependency nothing it was using.
const QUIET: f64 = 1.2;

/// The completed calls a measurement of the no-load latency takes at the floor: four rounds'
/// worth, so that one measurement, which stands until the next, is within 6% two times in
/// three.
pub const MEASURE_ROUND: u32 = 4 * MIN_ROUND;

/// How long after a measurement of the no-load latency the next one is due.
pub const REMEASURE: Duration = Duration::from_secs(30);

/// A candidate rule and its settings. The bounds (min, max, initial) are the core's settings'
/// (4, 200 and 20 by default), so the candidates start where the core's limiter does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// The core's rule, as shipped ([`AdaptiveLimiter`]).
    Core(AdaptiveLimitSettings),
    /// A gradient on the stretch, with a square-root headroom.
    Gradient {
        /// The bounds and initial limit (the core's settings'; its tolerance is not read).
        bounds: AdaptiveLimitSettings,
        /// The stretch the gradient tolerates before shrinking the limit (default 1.25).
        tolerance: f64,
    },
    /// A queue estimate kept between `alpha` and `beta` times `log10` of the calls in flight.
    Vegas {
        /// The bounds and initial limit (the core's settings'; its tolerance is not read).
        bounds: AdaptiveLimitSettings,
        /// Under this many calls queued (times `log10` of the calls in flight), the limit may
        /// grow (default 3).
        alpha: f64,
        /// Past this many, it falls (default 6).
        beta: f64,
    },
}

impl Rule {
    /// The gradient rule with its defaults.
    #[must_use]
    pub fn gradient() -> Rule {
        Rule::Gradient {
            bounds: AdaptiveLimitSettings::default(),
            tolerance: 1.25,
        }
    }

    /// The Vegas rule with its defaults.
    #[must_use]
    pub fn vegas() -> Rule {
        Rule::Vegas {
            bounds: AdaptiveLimitSettings::default(),
            alpha: 3.0,
            beta: 6.0,
        }
    }

    /// A short name for tables.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Rule::Core(_) => "core",
            Rule::Gradient { .. } => "gradient",
            Rule::Vegas { .. } => "vegas",
        }
    }

    /// A limiter following this rule, at its initial limit.
    #[must_use]
    pub fn limiter(&self) -> Limiter {
        match *self {
            Rule::Core(s) => Limiter::Core(Box::new(AdaptiveLimiter::new(s))),
            Rule::Gradient { bounds, .. } | Rule::Vegas { bounds, .. } => {
                Limiter::Prototype(Box::new(RefCell::new(Prototype::new(*self, bounds))))
            }
        }
    }
}

/// A limiter the simulator puts where the core's adaptive limiter goes: the core's own, or a
/// prototype.
#[derive(Debug)]
pub enum Limiter {
    /// The core's limiter.
    Core(Box<AdaptiveLimiter>),
    /// A prototype rule (its state behind a `RefCell`: the call's parts reach it by `&`).
    Prototype(Box<RefCell<Prototype>>),
}

impl Limiter {
    /// The current limit.
    #[must_use]
    pub fn limit(&self) -> u32 {
        match self {
            Limiter::Core(l) => l.limit(),
            Limiter::Prototype(p) => p.borrow().limit(),
        }
    }
}

impl AdaptiveSlots for Limiter {
    fn try_acquire(&self, now: Instant) -> Result<(), Refused> {
        match self {
            Limiter::Core(l) => l.try_acquire(now).map(|_slot| ()),
            Limiter::Prototype(p) => p.borrow_mut().try_acquire(now),
        }
    }

    fn complete(&self, now: Instant, latency: Option<Duration>) {
        match self {
            Limiter::Core(l) => AdaptiveSlots::complete(&**l, now, latency),
            Limiter::Prototype(p) => p.borrow_mut().complete(now, latency),
        }
    }

    fn release(&self) {
        match self {
            Limiter::Core(l) => AdaptiveSlots::release(&**l),
            Limiter::Prototype(p) => p.borrow_mut().release(),
        }
    }

    fn check(&self) -> Result<(), Refused> {
        match self {
            Limiter::Core(l) => l.check(),
            Limiter::Prototype(p) => p.borrow().check(),
        }
    }
}

/// A prototype limiter: the limit (a real number, read down to a whole count), the calls in
/// flight, the round so far, and the no-load latency.
#[derive(Clone, Debug, PartialEq)]
pub struct Prototype {
    rule: Rule,
    min: f64,
    max: f64,
    limit: f64,
    in_flight: u32,
    /// The round so far: calls completed, the calls in flight each found as it completed
    /// (itself included), the sum of the logarithms (in ns) of the successful ones and how
    /// many, and whether the limit refused a call.
    done: u32,
    in_flight_sum: f64,
    ln_sum: f64,
    ln_count: u32,
    held_back: bool,
    /// The no-load latency's logarithm (in ns), and the samples it has learned from.
    ln_base: f64,
    learned: u32,
    /// When the no-load latency is next due to be measured (ns; none before the warm-up ends),
    /// and whether the next measurement is the first (which waits for nothing).
    next_measure: Option<u64>,
    first_measure: bool,
    /// A measurement under way: the limit to go back to, and the completions still to let
    /// pass before its round (those admitted above the floor).
    measuring: Option<Measuring>,
}

/// A fresh measurement of the no-load latency.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Measuring {
    restore: f64,
    /// Calls admitted before the limit fell to its floor still to complete; `None` until the
    /// calls in flight first fit under the floor.
    skip: Option<u32>,
}

const LIMITED: Refused = Refused {
    reason: RefusalReason::ConcurrencyLimited,
    retry_after: Duration::ZERO,
};

impl Prototype {
    fn new(rule: Rule, bounds: AdaptiveLimitSettings) -> Prototype {
        Prototype {
            rule,
            min: f64::from(bounds.min_limit()),
            max: f64::from(bounds.max_limit()),
            limit: f64::from(bounds.initial_limit()),
            in_flight: 0,
            done: 0,
            in_flight_sum: 0.0,
            ln_sum: 0.0,
            ln_count: 0,
            held_back: false,
            ln_base: 0.0,
            learned: 0,
            next_measure: None,
            first_measure: true,
            measuring: None,
        }
    }

    /// The limit on calls in flight (its floor while the no-load latency is being measured).
    #[must_use]
    pub fn limit(&self) -> u32 {
        if self.measuring.is_some() {
            self.min as u32
        } else {
            self.limit as u32
        }
    }

    /// The no-load latency, once learned.
    #[must_use]
    pub fn no_load(&self) -> Option<Duration> {
        (self.learned >= WARM_UP).then(|| Duration::from_nanos(libm::exp(self.ln_base) as u64))
    }

    fn try_acquire(&mut self, _now: Instant) -> Result<(), Refused> {
        if self.in_flight < self.limit() {
            self.in_flight += 1;
            Ok(())
        } else {
            self.held_back = true;
            Err(LIMITED)
        }
    }

    fn check(&self) -> Result<(), Refused> {
        if self.in_flight < self.limit() {
            Ok(())
        } else {
            Err(LIMITED)
        }
    }

    fn release(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// A call ended at `now` with an outcome (its latency when it succeeded).
    fn complete(&mut self, now: Instant, latency: Option<Duration>) {
        let found = f64::from(self.in_flight.max(1));
        self.release();
        if self.skip_for_measuring() {
            return;
        }
        self.done += 1;
        self.in_flight_sum += found;
        if let Some(l) = latency {
            let ln = libm::log(l.as_nanos().max(1) as f64);
            self.ln_sum += ln;
            self.ln_count += 1;
            if self.learned < WARM_UP {
                // The first samples make a first guess as a plain running mean; the first
                // measurement at the floor follows at once.
                self.learned += 1;
                self.ln_base += (ln - self.ln_base) / f64::from(self.learned);
                if self.learned == WARM_UP {
                    self.next_measure = Some(0);
                }
            }
        }
        let round = if self.measuring.is_some() {
            MEASURE_ROUND
        } else {
            MIN_ROUND
        };
        if self.done < round {
            return;
        }
        self.end_round(now);
    }

    /// Whether this completion is one a measurement lets pass: a call admitted above the
    /// floor, whose latency still carries the queue the measurement waits out.
    fn skip_for_measuring(&mut self) -> bool {
        let floor = self.min as u32;
        let Some(m) = self.measuring.as_mut() else {
            return false;
        };
        match m.skip {
            None if self.in_flight <= floor => {
                // From here on at most the floor is admitted: those in flight now go first.
                m.skip = Some(self.in_flight);
                self.reset_round();
                true
            }
            None => true,
            Some(0) => false,
            Some(n) => {
                m.skip = Some(n - 1);
                true
            }
        }
    }

    fn reset_round(&mut self) {
        self.done = 0;
        self.in_flight_sum = 0.0;
        self.ln_sum = 0.0;
        self.ln_count = 0;
        self.held_back = false;
    }

    fn end_round(&mut self, now: Instant) {
        let now = now.as_nanos();
        let round = (self.ln_count > 0 && self.learned >= WARM_UP)
            .then(|| self.ln_sum / f64::from(self.ln_count));
        if let Some(m) = self.measuring.take() {
            // A round at the floor: whatever it took is the dependency's own latency.
            if let Some(mean) = round {
                self.ln_base = mean;
            }
            self.limit = m.restore;
            self.first_measure = false;
            self.next_measure = Some(now.saturating_add(REMEASURE.as_nanos()));
        } else {
            let stretch = round.map(|mean| libm::exp(mean - self.ln_base));
            let busy = self.in_flight_sum / f64::from(self.done.max(1));
            // Cheap: the round kept under half the limit busy, held nothing back and did not
            // queue (a measurement takes nothing a saturated dependency was using, nor delays
            // a backlog), or it kept hardly more than the floor busy anyway.
            let idle =
                !self.held_back && busy <= 0.5 * self.limit && stretch.is_some_and(|s| s < QUIET);
            // Before the first measurement the guess may hold a queue: the limit stays put.
            if let Some(stretch) = stretch.filter(|_| !self.first_measure) {
                self.limit = self.next_limit(stretch, busy).clamp(self.min, self.max);
            }
            let due = self.next_measure.is_some_and(|t| now >= t);
            let cheap = idle || busy <= 1.5 * self.min;
            if due && (self.first_measure || cheap) {
                self.measuring = Some(Measuring {
                    restore: self.limit,
                    skip: None,
                });
            }
        }
        self.reset_round();
    }

    /// The rule: the next limit from this round's stretch (never growing unless the round held
    /// a call back).
    fn next_limit(&self, stretch: f64, busy: f64) -> f64 {
        let limit = self.limit;
        let next = match self.rule {
            Rule::Gradient { tolerance, .. } => {
                let gradient = (tolerance / stretch).clamp(0.5, 1.0);
                let target = limit * gradient + libm::sqrt(limit);
                // Down at once (a queue is building), up halfway (the stretch is noisy).
                if target < limit {
                    target
                } else {
                    limit + 0.5 * (target - limit)
                }
            }
            Rule::Vegas { alpha, beta, .. } => {
                // The calls the round found in flight, split into those the dependency served
                // and those that waited: `busy / stretch` and the rest.
                let log = libm::log10(busy).max(1.0);
                let served = busy / stretch;
                let queued = busy - served;
                if queued > beta * log {
                    // Down by a step, or at once to what the dependency is serving plus the
                    // middle of the band when the queue is far past it.
                    (limit - log).min(served + 0.5 * (alpha + beta) * log)
                } else if queued < alpha * log {
                    // Up by a step, or by what the band has room for.
                    limit + log.max(alpha * log - queued)
                } else {
                    limit
                }
            }
            Rule::Core(_) => limit,
        };
        if next > limit && !self.held_back {
            limit
        } else {
            next
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn prototype(rule: Rule) -> Prototype {
        match rule.limiter() {
            Limiter::Prototype(p) => p.into_inner(),
            Limiter::Core(_) => panic!("the core's rule"),
        }
    }

    /// Runs `rounds` rounds in which every slot is taken and one caller more is refused, every
    /// call taking `latency`; returns the limit after each.
    fn saturated(p: &mut Prototype, rounds: usize, latency: Duration) -> Vec<u32> {
        let now = Instant::from_secs(1);
        (0..rounds)
            .map(|_| {
                let round = p.limit().max(MIN_ROUND);
                let mut held = 0;
                while p.try_acquire(now).is_ok() {
                    held += 1;
                }
                assert!(p.held_back);
                for _ in 0..round {
                    // Past the slots taken, more calls come and go within the round.
                    if held == 0 {
                        p.in_flight += 1;
                    } else {
                        held -= 1;
                    }
                    p.complete(now, Some(latency));
                }
                p.limit()
            })
            .collect()
    }

    #[test]
    fn a_prototype_starts_at_the_initial_limit_and_refuses_past_it() {
        for rule in [Rule::gradient(), Rule::vegas()] {
            let mut p = prototype(rule);
            let now = Instant::ZERO;
            let permits: Vec<_> = (0..20).map(|_| p.try_acquire(now).unwrap()).collect();
            assert_eq!(p.try_acquire(now), Err(LIMITED));
            assert_eq!(p.check(), Err(LIMITED));
            p.release();
            assert!(p.check().is_ok());
            assert_eq!(permits.len(), 20);
        }
    }

    #[test]
    fn while_nothing_queues_a_saturated_limit_grows_and_an_idle_one_does_not() {
        for rule in [Rule::gradient(), Rule::vegas()] {
            let mut p = prototype(rule);
            let limits = saturated(&mut p, 30, ms(20));
            assert!(limits.last().unwrap() > &30, "{}: {limits:?}", rule.name());
            let no_load = p.no_load().unwrap().as_nanos() as f64;
            assert!((no_load / 20e6 - 1.0).abs() < 1e-6, "{no_load}");
            // Idle: rounds end without a refusal, and the limit stays.
            let mut idle = prototype(rule);
            for _ in 0..(40 * MIN_ROUND) {
                assert!(idle.try_acquire(Instant::ZERO).is_ok());
                idle.complete(Instant::ZERO, Some(ms(20)));
            }
            assert_eq!(idle.limit(), 20, "{}", rule.name());
        }
    }

    #[test]
    fn a_queue_that_stretches_every_call_shrinks_the_limit_and_does_not_become_the_no_load_latency()
    {
        for rule in [Rule::gradient(), Rule::vegas()] {
            let mut p = prototype(rule);
            saturated(&mut p, 20, ms(20));
            let grown = p.limit();
            let base = p.no_load().unwrap();
            // Every call now waits 3x as long: a queue.
            let limits = saturated(&mut p, 40, ms(60));
            assert!(
                *limits.last().unwrap() < grown / 2,
                "{}: {grown} then {limits:?}",
                rule.name()
            );
            assert_eq!(p.no_load().unwrap(), base, "{}", rule.name());
        }
    }

    #[test]
    fn a_dependency_slower_on_its_own_becomes_the_no_load_latency_at_the_next_measurement() {
        for rule in [Rule::gradient(), Rule::vegas()] {
            let mut p = prototype(rule);
            let mut now = Instant::from_secs(1);
            // Saturated rounds (every slot taken, one caller more refused), each lasting one
            // latency, for `seconds`.
            let mut run = |p: &mut Prototype, seconds: u64, latency: Duration| {
                let end = now.saturating_add(Duration::from_secs(seconds));
                while now < end {
                    let mut held = 0;
                    while p.try_acquire(now).is_ok() {
                        held += 1;
                    }
                    now = now.saturating_add(latency);
                    for _ in 0..held {
                        p.complete(now, Some(latency));
                    }
                }
            };
            run(&mut p, 5, ms(20));
            let grown = p.limit();
            let base = p.no_load().unwrap();
            // 10x slower: to the limiter it looks like a queue, and the limit shrinks; the
            // slowness is not learned as normal ...
            run(&mut p, 5, ms(200));
            assert!(
                p.limit() < grown / 2,
                "{}: {} from {grown}",
                rule.name(),
                p.limit()
            );
            assert_eq!(p.no_load(), Some(base), "{}", rule.name());
            // ... until a measurement is due (30 s after the first) and the limit keeps hardly
            // more than its floor busy: then it is the dependency's own latency, and the limit
            // grows again.
            run(&mut p, 25, ms(200));
            let no_load = p.no_load().unwrap();
            assert!(no_load > ms(190), "{}: {no_load:?}", rule.name());
            let low = p.limit();
            run(&mut p, 10, ms(200));
            assert!(p.limit() > low, "{}: {} from {low}", rule.name(), p.limit());
        }
    }
}
