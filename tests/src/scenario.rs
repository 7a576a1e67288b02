//! What a run is made of: a fleet, the load it offers, the dependency, and the client strategies
//! compared on it.

use stormguard_core::{
    config::{PolicyParts, PolicySection},
    limits::AdaptiveLimitSettings,
    limits::AdaptiveLimiter,
    limits::BulkheadSettings,
    limits::RateLimitSettings,
    limits::SlidingWindowSettings,
    policy::Explain,
    Bound, Breaker, BreakerSettings, Budget, BudgetSettings, CallSettings, Duration, Field,
    Instant, Name, Recovery, SettingsError,
};

use crate::limiters::Rule;
use crate::model::Dependency;

/// How a client's calls arrive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrivals {
    /// Open loop: a Poisson process at `rate` calls per second per client. A client does not
    /// slow down because the dependency did (nor because its breaker refused it).
    Poisson {
        /// Calls per second, per client.
        rate: f64,
    },
    /// Open loop in bursts: a Poisson process whose rate switches between a calm level and
    /// `peak` times the mean, for bursts lasting `burst` on average and taking `share` of the
    /// time (a two-state Markov-modulated Poisson process, each client's own). The mean rate is
    /// `rate`; the calm level is what is left, `rate (1 - share peak) / (1 - share)`.
    Bursty {
        /// Mean calls per second, per client.
        rate: f64,
        /// The rate during a burst, as a multiple of the mean (above 1, at most `1 / share`).
        peak: f64,
        /// The share of the time spent in bursts, in (0, 1).
        share: f64,
        /// The mean length of a burst (lengths are exponential).
        burst: Duration,
    },
    /// Closed loop: each client calls again as soon as its previous call returns, after
    /// `think` (a polling loop).
    Polling {
        /// The pause between one call's end and the next call's start.
        think: Duration,
    },
}

impl Arrivals {
    /// The mean calls per second of one client, for open-loop arrivals.
    #[must_use]
    pub fn mean_rate(&self) -> Option<f64> {
        match *self {
            Arrivals::Poisson { rate } | Arrivals::Bursty { rate, .. } => Some(rate),
            Arrivals::Polling { .. } => None,
        }
    }

    /// Whether calls arrive whatever the dependency does (open loop).
    #[must_use]
    pub fn is_open_loop(&self) -> bool {
        self.mean_rate().is_some()
    }
}

/// One layer of a client's policy: the call settings plus, optionally, a breaker, a budget, a
/// rate limiter, a bulkhead and an adaptive limiter (each client's own, as each process of a fleet has its own).
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    /// Attempts, deadline, attempt timeout, backoff. The seed is set per client by the simulator.
    /// With hedging on, the bottom layer (whose attempts reach the dependency) launches a
    /// hedge beside a slow attempt as the core's hedged pair says; higher layers never hedge.
    pub call: CallSettings,
    /// The breaker guarding every attempt of this layer, if any.
    pub breaker: Option<BreakerSettings>,
    /// The retry budget funding this layer's retries, if any (otherwise unlimited).
    pub budget: Option<BudgetSettings>,
    /// A GCRA rate limiter in front of every attempt of this layer, if any: its refusal is a
    /// self-imposed throttle, which the call waits out within its deadline.
    pub limiter: Option<RateLimitSettings>,
    /// A segmented sliding-window limiter in front of every attempt of this layer, behind the
    /// GCRA limiter, if any: at most its quota of attempts in any window (as its segments
    /// count them). Its refusal is a self-imposed throttle, as the GCRA limiter's.
    pub sliding: Option<SlidingWindowSettings>,
    /// A bulkhead in front of every attempt of this layer, if any: attempts in flight at most.
    /// The simulator holds no queue of waiters: a full bulkhead refuses, and the call waits that
    /// out on its backoff as a self-imposed throttle (as the `&mut` form does on firmware); a
    /// bounded wait in the settings is not modelled.
    pub bulkhead: Option<BulkheadSettings>,
    /// An adaptive concurrency limiter in front of every attempt of this layer, behind the
    /// bulkhead, if any: its limit falls when a round's fastest call is slow against the
    /// learned baseline and grows when it held calls back. Its refusal is a self-imposed
    /// throttle, as the bulkhead's.
    pub adaptive: Option<AdaptiveLimitSettings>,
    /// An adaptive concurrency-limit rule the simulator runs where the core's adaptive limiter
    /// goes, in its place: the core's own or a prototype (see [`crate::limiters`]), for the
    /// comparison of candidate rules. `None`: the core's, if `adaptive` is set.
    pub limit_rule: Option<Rule>,
    /// Whether a call that is an upper layer's retry may retry here (as std's
    /// `retries_when_nested`): `false` makes it one attempt, leaving the retrying to the layer
    /// that started it. Meaningless on the top layer, whose calls are nobody's retry.
    pub retries_when_nested: bool,
}

/// A client strategy: the policy every client of the fleet runs (each with its own objects).
///
/// With more than one layer, each layer's attempt is a whole call of the layer below it (a
/// frontend calling a backend calling the dependency), with the deadline propagated down: the
/// bottom layer's attempts are what reaches the dependency.
#[derive(Clone, Debug, PartialEq)]
pub struct Strategy {
    /// The name in tables, charts and JSON.
    pub name: String,
    /// The layers, top (the caller's) first.
    pub layers: Vec<Layer>,
}

impl Layer {
    /// The call settings with no breaker, budget, limiter, bulkhead or adaptive limiter.
    #[must_use]
    pub fn plain(call: CallSettings) -> Layer {
        Layer {
            call,
            breaker: None,
            budget: None,
            limiter: None,
            sliding: None,
            bulkhead: None,
            adaptive: None,
            limit_rule: None,
            retries_when_nested: true,
        }
    }

    /// A layer as a policy's resolved parts give it (the std loader's configuration format,
    /// and its defaults: a breaker and a budget unless turned off). A policy has no sliding
    /// window limiter.
    #[must_use]
    pub fn from_policy(parts: PolicyParts) -> Layer {
        Layer {
            call: parts.call,
            breaker: parts.breaker,
            budget: parts.budget,
            limiter: parts.rate_limit,
            sliding: None,
            bulkhead: parts.bulkhead,
            adaptive: parts.adaptive_limit,
            limit_rule: None,
            retries_when_nested: parts.retries_when_nested,
        }
    }

    /// The layer's plain-text self-description (the core's [`Explain`]): what bounds a call
    /// first, the worst-case timeline, the load it can add, and what is missing. What it
    /// measures is what each client's objects hold as a run starts: a breaker closed and cold,
    /// a full budget, a limiter at its initial limit (a simulation has no "now" before it runs).
    pub fn explain(&self) -> Explain<'_> {
        let mut e = Explain::new(&self.call);
        if let Some(b) = &self.breaker {
            e = e
                .breaker(b)
                .breaker_now(Breaker::new(*b).snapshot(Instant::ZERO));
        }
        if let Some(b) = &self.budget {
            e = e
                .budget(b)
                .budget_now(Budget::new(*b).snapshot(Instant::ZERO));
        }
        if let Some(l) = &self.limiter {
            e = e.limit(l);
        }
        if let Some(l) = &self.sliding {
            e = e.limit(l);
        }
        if let Some(b) = &self.bulkhead {
            e = e.bulkhead(b);
        }
        if let Some(a) = &self.adaptive {
            e = e
                .adaptive_limit(a)
                .adaptive_now(AdaptiveLimiter::new(*a).snapshot());
        }
        e
    }
}

impl Strategy {
    /// Every layer described, top (the caller's) first. What is "measured now" is, in a
    /// simulation, what each client's objects hold as the run starts, and says so.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let many = self.layers.len() > 1;
        for (i, layer) in self.layers.iter().enumerate() {
            if many {
                out.push_str(&format!("layer {} of {}:\n", i + 1, self.layers.len()));
            }
            let text = layer.explain().to_string();
            out.push_str(
                &text
                    .replace("- measured now:", "- measured as the run starts:")
                    .replace("budget spent now:", "budget spent as the run starts:"),
            );
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }
}

/// The name breakers and budgets carry in the simulator.
pub const DEPENDENCY: Name = Name::new("dependency");

/// The default call settings with `attempts` attempts.
fn attempts(n: u32) -> Result<CallSettings, SettingsError> {
    CallSettings::builder().max_attempts(n).build()
}

fn breaker(ramp: bool) -> Result<BreakerSettings, SettingsError> {
    BreakerSettings::builder_named(DEPENDENCY)
        .recovery(ramp.then(|| Recovery::over(0.25)))
        .build()
}

fn budget() -> BudgetSettings {
    BudgetSettings::defaults("dependency")
}

impl Strategy {
    /// A one-layer strategy.
    #[must_use]
    pub fn single(name: &str, layer: Layer) -> Strategy {
        Strategy {
            name: name.to_string(),
            layers: vec![layer],
        }
    }

    /// The policy a service gets when it configures nothing: a `[policies.NAME]` section with
    /// no keys, read as the std loader reads it (3 attempts, a 30 s deadline, a 10 s attempt
    /// timeout cut to 3x the learned p95 once the breaker knows it, the default breaker and
    /// the default budget).
    ///
    /// # Errors
    ///
    /// None in practice: the defaults are valid; a core that refused them would say which
    /// setting here.
    pub fn default_policy(name: &str) -> Result<Strategy, SettingsError> {
        let parts = PolicySection::resolve(DEPENDENCY, &[&PolicySection::default()]).map_err(
            |problems| {
                problems
                    .parts()
                    .iter()
                    .find_map(|(_, list)| list.first())
                    // Only problems past a list's capacity, which the first always fills.
                    .unwrap_or(SettingsError {
                        field: Field::Name,
                        bound: Bound::PolicyName,
                    })
            },
        )?;
        Ok(Strategy::single(name, Layer::from_policy(parts)))
    }

    /// The names of the built-in strategies, in the order tables show them.
    pub const BUILTIN: [&'static str; 9] = [
        "no-retry",
        "retry-x3",
        "retry-x3+budget",
        "retry-x3+breaker",
        "retry-x3+breaker+budget",
        "retry-x3+breaker+budget+ramp",
        "3-layer-x3",
        "3-layer-x3+budget",
        "3-layer-x3+nested",
    ];

    /// A built-in strategy by name. "x3" is three *retries*: up to 4 attempts per call (per
    /// layer). Everything else is the core's default: a 30 s deadline, a 10 s attempt timeout,
    /// exponential backoff from 100 ms with full jitter, the default breaker (5 consecutive
    /// failures, 5x the learned error rate, 3x the learned latency, a 15 s break doubling to
    /// 2 min), the default budget (0.1 of a retry per success, 3 per second, 30 banked), and
    /// for the ramp `Recovery::over(0.25)`. "+nested": the layers below the top make one attempt
    /// for a call that is the upper layer's retry (std's `retries_when_nested(false)`).
    pub fn builtin(name: &str) -> Option<Result<Strategy, SettingsError>> {
        let plain = |n: u32, br: Option<bool>, bu: bool| -> Result<Layer, SettingsError> {
            Ok(Layer {
                breaker: br.map(breaker).transpose()?,
                budget: bu.then(budget),
                ..Layer::plain(attempts(n)?)
            })
        };
        let one = |layer: Result<Layer, SettingsError>| -> Result<Strategy, SettingsError> {
            Ok(Strategy::single(name, layer?))
        };
        let three = |bu: bool, nested: bool| -> Result<Strategy, SettingsError> {
            let layer = Layer {
                retries_when_nested: nested,
                ..plain(4, None, bu)?
            };
            Ok(Strategy {
                name: name.to_string(),
                layers: vec![layer.clone(), layer.clone(), layer],
            })
        };
        Some(match name {
            "no-retry" => one(plain(1, None, false)),
            "retry-x3" => one(plain(4, None, false)),
            "retry-x3+budget" => one(plain(4, None, true)),
            "retry-x3+breaker" => one(plain(4, Some(false), false)),
            "retry-x3+breaker+budget" => one(plain(4, Some(false), true)),
            "retry-x3+breaker+budget+ramp" => one(plain(4, Some(true), true)),
            "3-layer-x3" => three(false, true),
            "3-layer-x3+budget" => three(true, true),
            "3-layer-x3+nested" => three(false, false),
            _ => return None,
        })
    }

    /// Every built-in strategy, in table order.
    pub fn all_builtin() -> Result<Vec<Strategy>, SettingsError> {
        Strategy::BUILTIN
            .iter()
            .filter_map(|n| Strategy::builtin(n))
            .collect()
    }

    /// `true` when some layer has a breaker.
    #[must_use]
    pub fn has_breaker(&self) -> bool {
        self.layers.iter().any(|l| l.breaker.is_some())
    }
}

/// A second dependency the same clients call beside the first, through the same pool of
/// concurrent calls: healthy throughout (the fault window, and every figure about recovery, are
/// the first dependency's), so what happens to its calls is what the first one's trouble costs
/// the rest of the caller.
///
/// Each client runs the strategy's policy once per dependency, with objects of its own for
/// each (a breaker and a budget per host, as a keyed policy has).
#[derive(Clone, Debug, PartialEq)]
pub struct HealthyDependency {
    /// The dependency.
    pub dependency: Dependency,
    /// The share of each client's calls that go to it, in (0, 1).
    pub share: f64,
}

/// A scenario: a fleet offering load to a dependency, and the strategies to compare on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Its name (`--scenario NAME`).
    pub name: String,
    /// One line saying what it shows.
    pub description: String,
    /// The seed (`--seed N` overrides it).
    pub seed: u64,
    /// How long calls keep arriving; calls in flight at the end run to completion.
    pub duration: Duration,
    /// Clients in the fleet (`--clients N` overrides it), each with its own policy objects and
    /// its own seeded randomness.
    pub clients: u32,
    /// How calls arrive.
    pub arrivals: Arrivals,
    /// The dependency.
    pub dependency: Dependency,
    /// A second, healthy dependency the clients call beside the first, if any.
    pub healthy: Option<HealthyDependency>,
    /// The caller's own resources: how many calls each client can have in progress at once (its
    /// threads, its connections), from a call's start to its end, waits and pauses included;
    /// `None` for no bound. A call that finds its client's pool full fails at once: the
    /// caller's own saturation, counted apart from what the dependency or the policy did.
    pub pool: Option<u32>,
    /// The strategies, each run on the same seed.
    pub strategies: Vec<Strategy>,
    /// What a reader of the figures should know first (a scenario file that leaves out
    /// something the figures hinge on); `storm` prints them before the run.
    pub warnings: Vec<String>,
}

#[allow(clippy::cast_precision_loss)] // an estimate
fn seconds(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e9
}

/// The most calls one strategy's run may be expected to make: about 11 s and 500 MB of
/// per-call figures on a laptop core (the simulator keeps each call's start, end and latency).
pub const MAX_CALLS: f64 = 20e6;

impl Scenario {
    /// The calls per second the whole fleet offers (open-loop arrivals), if known.
    #[must_use]
    pub fn offered_rate(&self) -> Option<f64> {
        self.arrivals
            .mean_rate()
            .map(|rate| rate * f64::from(self.clients))
    }

    /// About how many calls one strategy's run makes: the offered rate over the duration, or
    /// for a polling fleet one call per think time plus median latency per client.
    #[must_use]
    pub fn expected_calls(&self) -> f64 {
        let per_second = self.offered_rate().unwrap_or_else(|| {
            let Arrivals::Polling { think } = self.arrivals else {
                return 0.0;
            };
            let cycle = seconds(think + self.dependency.p50).max(1e-3);
            f64::from(self.clients) / cycle
        });
        per_second * seconds(self.duration)
    }

    /// Refuses a scenario too large to simulate (see [`MAX_CALLS`]), saying what to change,
    /// before the run rather than a long silence and gigabytes later.
    ///
    /// # Errors
    ///
    /// When [`Scenario::expected_calls`] exceeds [`MAX_CALLS`].
    pub fn check_size(&self) -> Result<(), String> {
        let calls = self.expected_calls();
        if calls <= MAX_CALLS {
            return Ok(());
        }
        Err(format!(
            "scenario {:?} would make about {calls:.3e} calls per strategy ({} clients over {} \
             s), more than the simulator's {MAX_CALLS:.0e}: shorten `duration`, or lower \
             `load.clients` (`--clients`) or `load.rate`",
            self.name,
            self.clients,
            self.duration.as_secs()
        ))
    }
}
