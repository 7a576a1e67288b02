//! The dependency the fleet calls: latency, failures, capacity, and a schedule of impairments.

use stormguard_core::Duration;

use crate::random::{open01, LogNormal};

/// Something that goes wrong with the dependency, on a schedule (times from the run's start).
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
}

impl Impairment {
    /// When it starts.
    #[must_use]
    pub fn start(&self) -> Duration {
        match *self {
            Impairment::Outage { at, .. }
            | Impairment::Brownout { at, .. }
            | Impairment::ErrorSpike { at, .. }
            | Impairment::ColdRecovery { at, .. } => at,
        }
    }

    /// When the dependency stops being impaired by it: the end of an outage, brownout or spike
    /// (`None` for a spike that lasts the run), the end of a cold recovery's climb.
    #[must_use]
    pub fn end(&self) -> Option<Duration> {
        match *self {
            Impairment::Outage { at, lasting } | Impairment::Brownout { at, lasting, .. } => {
                Some(at.saturating_add(lasting))
            }
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
        }
    }
}

/// The modelled dependency.
///
/// - Latency: log-normal, fitted to a median and a 99th percentile.
/// - Failures: each call fails with the base failure rate (or an error spike's rate).
/// - Capacity (optional): how many calls it serves at once. Past it, a call's latency is
///   stretched in proportion to how far past it is (`in flight / capacity`); past three times
///   it, calls are shed (they fail at once). Because a stretched call stays in flight longer,
///   an offered load above capacity makes the queue grow until calls are shed, as real queues do.
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
    /// How long a call takes to fail when the dependency is down or sheds it.
    pub fail_latency: Duration,
    /// How badly it thrashes past capacity: a call's latency is stretched by `q^(1 + thrash)`
    /// where `q = in flight / capacity`. 0 (the default) is a plain proportional queue, which
    /// keeps serving its full capacity however overloaded it is; above 0, every call past
    /// capacity costs the others (a cold cache churning), so overload loses throughput:
    /// `capacity / latency * q^-thrash`.
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
    /// A healthy dependency with this latency spread, no failures, unbounded capacity.
    #[must_use]
    pub fn healthy(p50: Duration, p99: Duration) -> Dependency {
        Dependency {
            p50,
            p99,
            failure_rate: 0.0,
            capacity: None,
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

    /// The capacity at `t` (normal, or part of the way up a cold recovery's climb).
    #[must_use]
    pub fn capacity_at(&self, t: Duration) -> Option<f64> {
        let cap = self.capacity?;
        let mut factor = 1.0_f64;
        for i in &self.impairments {
            if let Impairment::ColdRecovery { at, over, from } = *i {
                if i.active(t) {
                    let done =
                        t.saturating_sub(at).as_nanos() as f64 / (over.as_nanos().max(1) as f64);
                    factor = factor.min(from + (1.0 - from) * done);
                }
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
        for i in self.impairments.iter().filter(|i| i.active(t)) {
            match *i {
                Impairment::Outage { .. } => return down,
                Impairment::Brownout { slower: s, .. } => slower *= s,
                Impairment::ErrorSpike { rate: r, .. } => rate = r,
                Impairment::ColdRecovery { .. } => {}
            }
        }
        let load = f64::from(in_flight) + 1.0;
        let queue = match self.capacity_at(t) {
            Some(cap) if load > 3.0 * cap => return down,
            Some(cap) if load > cap => libm::pow(load / cap, 1.0 + self.thrash),
            _ => 1.0,
        };
        let nanos = curve.sample_nanos(rng) * slower * queue;
        let ok = open01(rng) >= rate;
        Service {
            // Far below u64::MAX for any sane input; the cast saturates otherwise.
            latency: Duration::from_nanos(nanos as u64),
            ok,
            occupies: true,
        }
    }
}
