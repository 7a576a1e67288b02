//! The dependency the fleet calls: latency, failures, capacity, and a schedule of impairments.

use stormguard_core::Duration;

use crate::random::{open01, LogNormal};

/// Something that goes wrong with the dependency, on a schedule (times from the run's start).
///
/// Impairments may overlap: an outage wins over everything; brownouts multiply; cold recoveries
/// take the lowest capacity; of overlapping error spikes, the one listed last sets the rate; a
/// hang holds an attempt at least as long as it says, whatever else applies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Impairment {
    /// Every call fails at once (after the dependency's fail latency).
    Outage {
        /// When it starts.
        at: Duration,
        /// How long it lasts.
        lasting: Duration,
    },
    /// Every call is `slower` times slower, and still answers.
    Brownout {
        /// When it starts.
        at: Duration,
        /// How long it lasts.
        lasting: Duration,
        /// The latency multiple (above 1).
        slower: f64,
    },
    /// The failure rate is `rate` instead of the base rate.
    ErrorSpike {
        /// When it starts.
        at: Duration,
        /// How long it lasts; `None` for the rest of the run (a step).
        lasting: Option<Duration>,
        /// The failure rate while it lasts, in [0, 1].
        rate: f64,
    },
    /// The dependency comes back cold: its capacity starts at `from` of normal and climbs
    /// linearly to normal over `over`. Needs a capacity.
    ColdRecovery {
        /// When it starts answering again (cold).
        at: Duration,
        /// How long the climb takes.
        over: Duration,
        /// The capacity at the start of the climb, as a fraction of normal, in (0, 1].
        from: f64,
    },
    /// The dependency serves only `to` of its normal capacity for a while (a lost replica, a
    /// noisy neighbour): past it calls queue, past three times it they are shed. Needs a
    /// capacity.
    CapacityDrop {
        /// When it starts.
        at: Duration,
        /// How long it lasts.
        lasting: Duration,
        /// The capacity while it lasts, as a fraction of normal, in (0, 1].
        to: f64,
    },
    /// Every attempt that arrives while it lasts is answered only after `after` (a lock held, a
    /// downstream call that never times out): the answer is a success, far too late for any
    /// caller with an attempt timeout, and the attempt holds its slot of the dependency (and
    /// of the caller's pool) until then.
    Hang {
        /// When it starts.
        at: Duration,
        /// How long it lasts (attempts that arrive within it hang).
        lasting: Duration,
        /// How long a hung attempt takes to be answered.
        after: Duration,
    },
}

impl Impairment {
    /// When it starts.
    #[must_use]
    pub fn start(&self) -> Duration {
        match *self {
            Impairment::Outage { at, .. }
            | Impairment::Brownout { at, .. }
            | Impairment::ErrorSpike { at, .. }
            | Impairment::ColdRecovery { at, .. }
            | Impairment::CapacityDrop { at, .. }
            | Impairment::Hang { at, .. } => at,
        }
    }

    /// When the dependency stops being impaired by it: the end of an outage, brownout or spike
    /// (`None` for a spike that lasts the run), the end of a cold recovery's climb.
    #[must_use]
    pub fn end(&self) -> Option<Duration> {
        match *self {
            Impairment::Outage { at, lasting }
            | Impairment::Brownout { at, lasting, .. }
            | Impairment::CapacityDrop { at, lasting, .. }
            | Impairment::Hang { at, lasting, .. } => Some(at.saturating_add(lasting)),
            Impairment::ErrorSpike { at, lasting, .. } => lasting.map(|l| at.saturating_add(l)),
            Impairment::ColdRecovery { at, over, .. } => Some(at.saturating_add(over)),
        }
    }

    /// When the dependency answers normally again, for "time to recover": the end of an
    /// outage, brownout or spike, and the *start* of a cold recovery (the moment it is back,
    /// cold: how fast a strategy gets through the climb is what is being measured).
    #[must_use]
    pub fn answering_again(&self) -> Option<Duration> {
        match *self {
            Impairment::ColdRecovery { at, .. } => Some(at),
            _ => self.end(),
        }
    }

    fn active(&self, t: Duration) -> bool {
        t >= self.start() && self.end().is_none_or(|e| t < e)
    }

    /// A short name for tables and errors.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Impairment::Outage { .. } => "outage",
            Impairment::Brownout { .. } => "brownout",
            Impairment::ErrorSpike { .. } => "error_spike",
            Impairment::ColdRecovery { .. } => "cold_recovery",
            Impairment::CapacityDrop { .. } => "capacity_drop",
            Impairment::Hang { .. } => "hang",
        }
    }
}

/// How far past its capacity a dependency's thrashing reaches: the calls beyond three times it
/// wait without adding to it (see [`Dependency::thrash`]).
pub const THRASH_REACH: f64 = 3.0;

/// The modelled dependency.
///
/// - Latency: log-normal, fitted to a median and a 99th percentile.
/// - Failures: each call fails with the base failure rate (or an error spike's rate).
/// - Capacity (optional): how many calls it serves at once. Past it, a call's latency is
///   stretched in proportion to how far past it is (`in flight / capacity`), as the wait in a
///   queue of that many would be; past [`shed_past`](Dependency::shed_past) times it (three by
///   default), calls are shed (they fail at once). Because a stretched call stays in flight
///   longer, an offered load above capacity makes the queue grow until calls are shed, as real
///   queues do.
/// - The dependency does not know when a caller gives up: an attempt its caller timed out, or
///   a hedge's loser, stays in flight, and in everyone's queue, until the dependency answers
///   it. A deep queue ([`shed_past`](Dependency::shed_past) far above 3) can then hold waits
///   longer than the callers' timeouts, and every retry they send joins the same queue: the
///   work that keeps a retry storm going after its trigger has passed.
/// - Impairments on a schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Dependency {
    /// The median latency of a healthy call.
    pub p50: Duration,
    /// The 99th percentile latency of a healthy call.
    pub p99: Duration,
    /// The fraction of calls that fail when nothing else is wrong, in [0, 1].
    pub failure_rate: f64,
    /// Calls served at once; `None` for unbounded.
    pub capacity: Option<f64>,
    /// How deep its queue is, as a multiple of the capacity: past `shed_past x capacity` in
    /// flight, an attempt is shed (it fails at once, occupying nothing). 3 by default (a queue
    /// twice the capacity); `f64::INFINITY` for a queue that takes all it is sent (an accept
    /// backlog nobody bounded). At least 1. Meaningless without a capacity.
    pub shed_past: f64,
    /// How long a call takes to fail when the dependency is down or sheds it.
    pub fail_latency: Duration,
    /// How badly it thrashes past capacity: a call's latency is stretched by `q^(1 + thrash)`
    /// where `q = in flight / capacity`. 0 (the default) is a plain proportional queue, which
    /// keeps serving its full capacity however overloaded it is; above 0, every call past
    /// capacity costs the others (a cold cache churning), so overload loses throughput:
    /// `capacity / latency * q^-thrash`. The calls past three times the capacity (the most a
    /// default queue holds) only wait, as in a deep queue's backlog: they stretch the wait
    /// (`q`) but thrash no more, so throughput never falls below `3^-thrash` of capacity.
    /// Work for callers who gave up counts in `q` like any other.
    pub thrash: f64,
    /// The schedule of impairments.
    pub impairments: Vec<Impairment>,
}

/// What the dependency does with one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Service {
    /// When it answers, from the attempt's start.
    pub latency: Duration,
    /// Whether the answer is a success.
    pub ok: bool,
    /// Whether the attempt occupies a slot of the dependency until it answers (shed and
    /// down-time failures do not).
    pub occupies: bool,
}

impl Dependency {
    /// The default queue depth: calls are shed past three times the capacity in flight.
    pub const DEFAULT_SHED_PAST: f64 = 3.0;

    /// A healthy dependency with this latency spread, no failures, unbounded capacity.
    #[must_use]
    pub fn healthy(p50: Duration, p99: Duration) -> Dependency {
        Dependency {
            p50,
            p99,
            failure_rate: 0.0,
            capacity: None,
            shed_past: Dependency::DEFAULT_SHED_PAST,
            fail_latency: Duration::from_millis(1),
            thrash: 0.0,
            impairments: Vec::new(),
        }
    }

    /// With a base failure rate.
    #[must_use]
    pub fn failing(mut self, rate: f64) -> Dependency {
        self.failure_rate = rate;
        self
    }

    /// With a capacity (calls served at once).
    #[must_use]
    pub fn capacity(mut self, concurrent: f64) -> Dependency {
        self.capacity = Some(concurrent);
        self
    }

    /// Shedding only past `times` its capacity in flight (see [`Dependency::shed_past`]).
    #[must_use]
    pub fn shedding_past(mut self, times: f64) -> Dependency {
        self.shed_past = times;
        self
    }

    /// Thrashing past capacity (see [`Dependency::thrash`]).
    #[must_use]
    pub fn thrashing(mut self, thrash: f64) -> Dependency {
        self.thrash = thrash;
        self
    }

    /// With one more impairment.
    #[must_use]
    pub fn with(mut self, impairment: Impairment) -> Dependency {
        self.impairments.push(impairment);
        self
    }

    /// The fitted latency curve.
    #[must_use]
    pub fn curve(&self) -> LogNormal {
        LogNormal::fit(self.p50, self.p99)
    }

    /// The window the impairments cover, clamped to `run`: from the first start to the last
    /// end. `None` without impairments.
    #[must_use]
    pub fn fault_window(&self, run: Duration) -> Option<(Duration, Duration)> {
        let start = self.impairments.iter().map(Impairment::start).min()?;
        let end = self
            .impairments
            .iter()
            .map(|i| i.end().unwrap_or(run))
            .max()
            .unwrap_or(run)
            .min(run);
        Some((start.min(run), end))
    }

    /// When the dependency answers normally again after its last impairment (see
    /// [`Impairment::answering_again`]); `None` without impairments or when one never ends.
    #[must_use]
    pub fn answering_again(&self) -> Option<Duration> {
        let mut last = None;
        for i in &self.impairments {
            let t = i.answering_again()?;
            last = Some(last.map_or(t, |l: Duration| l.max(t)));
        }
        last
    }

    /// The capacity at `t`: normal, part of the way up a cold recovery's climb, or dropped (the
    /// lowest of those that apply).
    #[must_use]
    pub fn capacity_at(&self, t: Duration) -> Option<f64> {
        let cap = self.capacity?;
        let mut factor = 1.0_f64;
        for i in self.impairments.iter().filter(|i| i.active(t)) {
            match *i {
                Impairment::ColdRecovery { at, over, from } => {
                    let done =
                        t.saturating_sub(at).as_nanos() as f64 / (over.as_nanos().max(1) as f64);
                    factor = factor.min(from + (1.0 - from) * done);
                }
                Impairment::CapacityDrop { to, .. } => factor = factor.min(to),
                _ => {}
            }
        }
        Some(cap * factor)
    }

    /// Serves one attempt arriving at `t` while `in_flight` others are being served.
    pub fn serve(
        &self,
        curve: &LogNormal,
        t: Duration,
        in_flight: u32,
        rng: &mut fastrand::Rng,
    ) -> Service {
        let down = Service {
            latency: self.fail_latency,
            ok: false,
            occupies: false,
        };
        let mut slower = 1.0_f64;
        let mut rate = self.failure_rate;
        let mut hang = Duration::ZERO;
        for i in self.impairments.iter().filter(|i| i.active(t)) {
            match *i {
                Impairment::Outage { .. } => return down,
                Impairment::Brownout { slower: s, .. } => slower *= s,
                Impairment::ErrorSpike { rate: r, .. } => rate = r,
                Impairment::Hang { after, .. } => hang = hang.max(after),
                Impairment::ColdRecovery { .. } | Impairment::CapacityDrop { .. } => {}
            }
        }
        let load = f64::from(in_flight) + 1.0;
        let queue = match self.capacity_at(t) {
            Some(cap) if load > self.shed_past * cap => return down,
            Some(cap) if load > cap => {
                let q = load / cap;
                if q <= THRASH_REACH {
                    libm::pow(q, 1.0 + self.thrash)
                } else {
                    // Past the reach, calls only wait: the queue stretches, the thrash is full.
                    q * libm::pow(THRASH_REACH, self.thrash)
                }
            }
            _ => 1.0,
        };
        let nanos = curve.sample_nanos(rng) * slower * queue;
        let ok = open01(rng) >= rate;
        Service {
            // Far below u64::MAX for any sane input; the cast saturates otherwise.
            latency: Duration::from_nanos(nanos as u64).max(hang),
            ok,
            occupies: true,
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

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// The dependency most tests start from: a 20 ms median, a 200 ms p99, nothing failing.
    fn dep() -> Dependency {
        Dependency::healthy(ms(20), ms(200))
    }

    /// `n` attempts served one after another from one seeded stream, each arriving at `t` with
    /// `in_flight` others in flight.
    fn draws(d: &Dependency, t: Duration, in_flight: u32, seed: u64, n: usize) -> Vec<Service> {
        let curve = d.curve();
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..n)
            .map(|_| d.serve(&curve, t, in_flight, &mut rng))
            .collect()
    }

    fn failures(services: &[Service]) -> usize {
        services.iter().filter(|s| !s.ok).count()
    }

    /// Asserts that `n` Bernoulli trials of probability `p` gave `count` successes within five
    /// standard deviations, sqrt(n p (1 - p)), of n p (a false alarm about once in 1.7 million).
    fn assert_binomial(count: usize, n: usize, p: f64) {
        let n = n as f64;
        let mean = n * p;
        let sd = libm::sqrt(n * p * (1.0 - p));
        let got = count as f64;
        assert!(
            (got - mean).abs() <= 5.0 * sd,
            "{got} of {n} where {mean:.1} +- 5 x {sd:.2} was expected (p = {p})"
        );
    }

    /// Asserts that every `stretched` attempt took `k` times as long as the `base` one drawn from
    /// the same random numbers. Each latency is truncated to whole nanoseconds, so they may differ
    /// from the exact product by up to `k + 1` ns.
    fn assert_stretched(base: &[Service], stretched: &[Service], k: f64) {
        assert_eq!(base.len(), stretched.len());
        for (b, s) in base.iter().zip(stretched) {
            let want = b.latency.as_nanos() as f64 * k;
            let got = s.latency.as_nanos() as f64;
            assert!(
                (got - want).abs() <= k + 1.0,
                "{:?} is not {k} x {:?}",
                s.latency,
                b.latency
            );
            assert!(s.occupies, "a stretched attempt is still being served");
        }
    }

    /// The sample quantile `q` of the latencies, in nanoseconds.
    fn quantile(services: &[Service], q: f64) -> f64 {
        let mut v: Vec<u64> = services.iter().map(|s| s.latency.as_nanos()).collect();
        v.sort_unstable();
        v[((v.len() as f64) * q) as usize] as f64
    }

    #[test]
    fn healthy_attempts_have_the_fitted_median_and_p99() {
        // The fit itself is tested in random.rs; this checks that serving draws from it. With
        // n = 100,000, the sample q-quantile has a standard error of sqrt(q(1-q)/n) in
        // probability, sigma / phi(z_q) times that in ln latency. Here sigma = ln(10) / 2.326
        // = 0.99: 0.4% at the median, 1.2% at the 99th percentile; five of those are the bounds.
        let d = dep();
        let all = draws(&d, secs(1), 0, 1, 100_000);
        let p50 = quantile(&all, 0.50);
        let p99 = quantile(&all, 0.99);
        assert!((p50 / 20e6 - 1.0).abs() < 0.02, "p50 {p50} ns");
        assert!((p99 / 200e6 - 1.0).abs() < 0.06, "p99 {p99} ns");
        assert!(all.iter().all(|s| s.ok && s.occupies));
    }

    #[test]
    fn the_base_failure_rate_fails_that_fraction_of_calls() {
        let n = 200_000;
        for p in [0.001, 0.05, 0.3] {
            let all = draws(&dep().failing(p), secs(1), 0, 7, n);
            assert_binomial(failures(&all), n, p);
        }
        assert_eq!(failures(&draws(&dep(), secs(1), 0, 7, 10_000)), 0);
        assert_eq!(
            failures(&draws(&dep().failing(1.0), secs(1), 0, 7, 10_000)),
            10_000
        );
    }

    #[test]
    fn a_failed_answer_takes_as_long_as_a_successful_one_and_occupies_a_slot() {
        // Base-rate failures are errors from a working dependency, not fast failures: the same
        // random numbers give the same latency whether the answer is a success or a failure.
        let ok = draws(&dep(), secs(1), 0, 3, 1000);
        let failed = draws(&dep().failing(1.0), secs(1), 0, 3, 1000);
        assert_stretched(&ok, &failed, 1.0);
        assert!(failed.iter().all(|s| !s.ok));
    }

    #[test]
    fn up_to_capacity_an_attempt_is_not_delayed() {
        let unbounded = draws(&dep(), secs(1), 0, 5, 1000);
        let bounded = dep().capacity(10.0);
        // in_flight others plus this one: 10 at most is within a capacity of 10.
        for in_flight in [0, 5, 9] {
            assert_stretched(
                &unbounded,
                &draws(&bounded, secs(1), in_flight, 5, 1000),
                1.0,
            );
        }
    }

    #[test]
    fn past_capacity_latency_stretches_by_in_flight_over_capacity() {
        let base = draws(&dep(), secs(1), 0, 5, 1000);
        let d = dep().capacity(10.0);
        // 14 others plus this one: 15 in flight for 10 slots, 1.5x; 30 (exactly 3x), 3x.
        assert_stretched(&base, &draws(&d, secs(1), 14, 5, 1000), 1.5);
        assert_stretched(&base, &draws(&d, secs(1), 19, 5, 1000), 2.0);
        assert_stretched(&base, &draws(&d, secs(1), 29, 5, 1000), 3.0);
        // A plain proportional queue keeps serving its full capacity: L in flight, each taking
        // L / capacity times the base latency, finish at capacity / base latency per unit time.
        let first = base[0].latency.as_nanos() as f64;
        for in_flight in [14_u32, 19, 29] {
            let stretched = draws(&d, secs(1), in_flight, 5, 1)[0].latency.as_nanos() as f64;
            let throughput = f64::from(in_flight + 1) / stretched;
            assert!(
                (throughput * first / 10.0 - 1.0).abs() < 1e-6,
                "{throughput}"
            );
        }
    }

    #[test]
    fn thrashing_stretches_latency_by_a_power_of_the_overload() {
        // thrash 1: q^(1 + 1); 20 in flight for 10 slots is q = 2, so 4x, and the throughput
        // falls to capacity / latency x q^-1, half of it.
        let base = draws(&dep(), secs(1), 0, 5, 1000);
        let d = dep().capacity(10.0).thrashing(1.0);
        assert_stretched(&base, &draws(&d, secs(1), 19, 5, 1000), 4.0);
        assert_stretched(&base, &draws(&d, secs(1), 14, 5, 1000), 2.25);
        // Thrashing costs nothing up to capacity.
        assert_stretched(&base, &draws(&d, secs(1), 9, 5, 1000), 1.0);
    }

    #[test]
    fn past_three_times_capacity_attempts_are_shed_at_once() {
        let mut d = dep().capacity(10.0);
        d.fail_latency = ms(3);
        // 30 others plus this one: 31 for 10 slots, past 3x.
        for s in draws(&d, secs(1), 30, 9, 1000) {
            assert_eq!(
                s,
                Service {
                    latency: ms(3),
                    ok: false,
                    occupies: false
                }
            );
        }
        // 30 in flight (exactly 3x) is still served.
        assert!(draws(&d, secs(1), 29, 9, 1000)
            .iter()
            .all(|s| s.ok && s.occupies));
    }

    #[test]
    fn a_deep_queue_sheds_only_past_its_own_multiple_of_the_capacity() {
        let base = draws(&dep(), secs(1), 0, 9, 1000);
        // Shedding past 10x: 99 others plus this one, 10x, are stretched tenfold, not shed;
        // one more is shed.
        let d = dep().capacity(10.0).shedding_past(10.0);
        assert_stretched(&base, &draws(&d, secs(1), 99, 9, 1000), 10.0);
        assert!(draws(&d, secs(1), 100, 9, 1000).iter().all(|s| !s.occupies));
        // A queue that takes all it is sent: 10,000 in flight for 10 slots wait 1000x.
        let unbounded = dep().capacity(10.0).shedding_past(f64::INFINITY);
        assert_stretched(&base, &draws(&unbounded, secs(1), 9_999, 9, 1000), 1000.0);
        assert_eq!(
            dep().shed_past,
            3.0,
            "the default queue is twice the capacity"
        );
    }

    #[test]
    fn thrashing_stops_growing_past_three_times_the_capacity() {
        // thrash 1: up to 3x, q^2 (3x is 9x slower); past it the calls only wait: q x 3.
        let base = draws(&dep(), secs(1), 0, 5, 1000);
        let d = dep()
            .capacity(10.0)
            .shedding_past(f64::INFINITY)
            .thrashing(1.0);
        assert_stretched(&base, &draws(&d, secs(1), 29, 5, 1000), 9.0);
        assert_stretched(&base, &draws(&d, secs(1), 59, 5, 1000), 18.0);
        assert_stretched(&base, &draws(&d, secs(1), 999, 5, 1000), 300.0);
        // So its throughput (in flight over latency) never falls below a third of capacity.
        let first = base[0].latency.as_nanos() as f64;
        for in_flight in [29_u32, 59, 999] {
            let stretched = draws(&d, secs(1), in_flight, 5, 1)[0].latency.as_nanos() as f64;
            let throughput = f64::from(in_flight + 1) / stretched * first / 10.0;
            assert!((throughput - 1.0 / 3.0).abs() < 1e-6, "{throughput}");
        }
    }

    #[test]
    fn a_hung_attempt_is_answered_only_after_the_hang_says_and_holds_its_slot() {
        let d = dep().with(Impairment::Hang {
            at: secs(10),
            lasting: secs(60),
            after: secs(30),
        });
        for s in draws(&d, secs(10), 0, 4, 1000) {
            assert_eq!(
                s,
                Service {
                    latency: secs(30),
                    ok: true,
                    occupies: true
                }
            );
        }
        // Before and after it, the healthy curve.
        let base = draws(&dep(), secs(1), 0, 4, 1000);
        assert_stretched(&base, &draws(&d, ms(9_999), 0, 4, 1000), 1.0);
        assert_stretched(&base, &draws(&d, secs(70), 0, 4, 1000), 1.0);
        // An outage still wins: nothing hangs on a dependency that is down.
        let down = d.with(Impairment::Outage {
            at: secs(20),
            lasting: secs(5),
        });
        assert!(draws(&down, secs(21), 0, 4, 100)
            .iter()
            .all(|s| !s.ok && !s.occupies));
    }

    #[test]
    fn during_an_outage_every_attempt_fails_at_once_without_occupying_a_slot() {
        let mut d = dep().with(Impairment::Outage {
            at: secs(10),
            lasting: secs(5),
        });
        d.fail_latency = ms(2);
        let down = Service {
            latency: ms(2),
            ok: false,
            occupies: false,
        };
        // From its start (inclusive) to its end (exclusive).
        let inside = [
            secs(10),
            ms(12_500),
            secs(15).saturating_sub(Duration::from_nanos(1)),
        ];
        for t in inside {
            assert!(draws(&d, t, 0, 2, 1000).iter().all(|s| *s == down), "{t:?}");
        }
        for t in [secs(10).saturating_sub(Duration::from_nanos(1)), secs(15)] {
            assert!(
                draws(&d, t, 0, 2, 1000).iter().all(|s| s.ok && s.occupies),
                "{t:?}"
            );
        }
    }

    #[test]
    fn a_brownout_makes_attempts_n_times_slower_and_they_still_answer() {
        let d = dep().with(Impairment::Brownout {
            at: secs(10),
            lasting: secs(5),
            slower: 8.0,
        });
        let base = draws(&dep(), secs(12), 0, 4, 1000);
        let brown = draws(&d, secs(12), 0, 4, 1000);
        assert_stretched(&base, &brown, 8.0);
        assert!(brown.iter().all(|s| s.ok));
        assert_stretched(&base, &draws(&d, secs(15), 0, 4, 1000), 1.0);
        assert_stretched(&base, &draws(&d, ms(9_999), 0, 4, 1000), 1.0);
        // A brownout and a queue compound: 8x slower and 2x over capacity is 16x.
        let queued = d.clone().capacity(10.0);
        assert_stretched(&base, &draws(&queued, secs(12), 19, 4, 1000), 16.0);
    }

    #[test]
    fn an_error_spike_replaces_the_failure_rate_while_it_lasts() {
        let n = 100_000;
        let spike = |base: f64, rate: f64, lasting: Option<Duration>| {
            dep().failing(base).with(Impairment::ErrorSpike {
                at: secs(10),
                lasting,
                rate,
            })
        };
        let d = spike(0.001, 0.3, Some(secs(5)));
        assert_binomial(failures(&draws(&d, secs(12), 0, 6, n)), n, 0.3);
        assert_binomial(failures(&draws(&d, secs(15), 0, 6, n)), n, 0.001);
        assert_binomial(failures(&draws(&d, secs(9), 0, 6, n)), n, 0.001);
        // The spike's rate replaces the base rate rather than adding to it.
        let calm = spike(0.5, 0.0, Some(secs(5)));
        assert_eq!(failures(&draws(&calm, secs(12), 0, 6, 10_000)), 0);
        // A step (no end) lasts the rest of the run.
        let step = spike(0.001, 0.3, None);
        assert_binomial(failures(&draws(&step, secs(3600), 0, 6, n)), n, 0.3);
        // Spike failures are answers at the normal latency.
        assert_stretched(
            &draws(&dep(), secs(12), 0, 6, 1000),
            &draws(&d, secs(12), 0, 6, 1000),
            1.0,
        );
    }

    #[test]
    fn a_cold_recovery_climbs_capacity_linearly_from_from_to_full_over_over() {
        let d = dep().capacity(80.0).with(Impairment::ColdRecovery {
            at: secs(60),
            over: secs(40),
            from: 0.25,
        });
        // from + (1 - from) x elapsed / over, times 80; every figure here is exact in binary.
        let at = |t: Duration| d.capacity_at(t).unwrap();
        let points = [
            (secs(60), 20.0),
            (secs(70), 35.0),
            (secs(80), 50.0),
            (secs(90), 65.0),
            (secs(100), 80.0),
            (secs(59), 80.0),
            (secs(500), 80.0),
        ];
        for (t, want) in points {
            assert!((at(t) - want).abs() < 1e-9, "{t:?}: {} not {want}", at(t));
        }
        let just_before_full = at(secs(100).saturating_sub(Duration::from_nanos(1)));
        assert!(just_before_full < 80.0 && just_before_full > 79.99);
        assert_eq!(dep().capacity_at(secs(60)), None);
    }

    #[test]
    fn a_cold_dependency_queues_and_sheds_at_its_climbing_capacity() {
        let d = dep().capacity(80.0).with(Impairment::ColdRecovery {
            at: secs(60),
            over: secs(40),
            from: 0.25,
        });
        let base = draws(&dep(), secs(60), 0, 8, 1000);
        // At the climb's start the capacity is 20: 30 in flight is 1.5x, 61 is past 3x.
        assert_stretched(&base, &draws(&d, secs(60), 29, 8, 1000), 1.5);
        assert!(draws(&d, secs(60), 60, 8, 1000).iter().all(|s| !s.occupies));
        // Halfway (capacity 50) the same 30 are not delayed; once full, 61 are not either.
        assert_stretched(&base, &draws(&d, secs(80), 29, 8, 1000), 1.0);
        assert_stretched(&base, &draws(&d, secs(100), 60, 8, 1000), 1.0);
    }

    #[test]
    fn the_fault_window_runs_from_the_first_start_to_the_last_end_within_the_run() {
        let run = secs(240);
        assert_eq!(dep().fault_window(run), None);
        let two = dep()
            .with(Impairment::Brownout {
                at: secs(100),
                lasting: secs(20),
                slower: 2.0,
            })
            .with(Impairment::Outage {
                at: secs(30),
                lasting: secs(60),
            });
        assert_eq!(two.fault_window(run), Some((secs(30), secs(120))));
        // Clamped to the run.
        assert_eq!(two.fault_window(secs(110)), Some((secs(30), secs(110))));
        assert_eq!(two.fault_window(secs(20)), Some((secs(20), secs(20))));
        // A cold recovery's climb is part of the window; a step lasts to the end of the run.
        let cold = two.clone().with(Impairment::ColdRecovery {
            at: secs(120),
            over: secs(30),
            from: 0.5,
        });
        assert_eq!(cold.fault_window(run), Some((secs(30), secs(150))));
        let step = two.with(Impairment::ErrorSpike {
            at: secs(200),
            lasting: None,
            rate: 0.5,
        });
        assert_eq!(step.fault_window(run), Some((secs(30), run)));
    }

    #[test]
    fn an_impairment_starts_ends_and_answers_again_as_its_kind_says() {
        let outage = Impairment::Outage {
            at: secs(30),
            lasting: secs(60),
        };
        let cold = Impairment::ColdRecovery {
            at: secs(90),
            over: secs(30),
            from: 0.1,
        };
        let step = Impairment::ErrorSpike {
            at: secs(10),
            lasting: None,
            rate: 0.3,
        };
        assert_eq!((outage.start(), outage.end()), (secs(30), Some(secs(90))));
        assert_eq!(outage.answering_again(), Some(secs(90)));
        // A cold dependency answers again when the climb starts, not when it ends.
        assert_eq!((cold.start(), cold.end()), (secs(90), Some(secs(120))));
        assert_eq!(cold.answering_again(), Some(secs(90)));
        assert_eq!((step.end(), step.answering_again()), (None, None));
    }

    #[test]
    fn the_dependency_answers_again_after_its_last_impairment() {
        assert_eq!(dep().answering_again(), None);
        let outage = Impairment::Outage {
            at: secs(30),
            lasting: secs(60),
        };
        let brownout = Impairment::Brownout {
            at: secs(100),
            lasting: secs(20),
            slower: 2.0,
        };
        let d = dep().with(brownout).with(outage);
        assert_eq!(d.answering_again(), Some(secs(120)));
        // An outage then a cold restart: answering again as the climb starts.
        let restart = dep().with(outage).with(Impairment::ColdRecovery {
            at: secs(90),
            over: secs(30),
            from: 0.1,
        });
        assert_eq!(restart.answering_again(), Some(secs(90)));
        // One impairment that never ends: never answering normally again.
        let step = d.with(Impairment::ErrorSpike {
            at: secs(10),
            lasting: None,
            rate: 0.3,
        });
        assert_eq!(step.answering_again(), None);
    }
}
