//! The built-in scenarios `storm` runs, and what to print beside their tables.

use stormguard_core::{
    limits::AdaptiveLimitSettings, limits::BulkheadSettings, limits::RateLimitSettings,
    BreakerSettings, BudgetSettings, CallSettings, Duration, Multiple, Recovery, SettingsError,
};

use crate::model::{Dependency, Impairment};
use crate::report::Report;
use crate::scenario::{Arrivals, HealthyDependency, Layer, Scenario, Strategy, DEPENDENCY};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The fleet of the fault scenarios: 20 clients, each offering 30 calls per second.
pub const FLEET: u32 = 20;
/// Calls per second per client in the fault scenarios.
pub const RATE: f64 = 30.0;

/// The dependency of the fault scenarios: a 20 ms median, a 60 ms p99 (sigma about 0.47), and
/// one call in a thousand failing when nothing is wrong.
#[must_use]
pub fn healthy() -> Dependency {
    Dependency::healthy(ms(20), ms(60)).failing(0.001)
}

fn builtin(names: &[&str]) -> Result<Vec<Strategy>, SettingsError> {
    names.iter().filter_map(|n| Strategy::builtin(n)).collect()
}

fn fleet(name: &str, description: &str, dependency: Dependency) -> Result<Scenario, SettingsError> {
    Ok(Scenario {
        name: name.to_string(),
        description: description.to_string(),
        seed: 1,
        duration: secs(240),
        clients: FLEET,
        arrivals: Arrivals::Poisson { rate: RATE },
        dependency,
        strategies: Strategy::all_builtin()?,
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    })
}

/// Calls per second per client in the retry storm.
pub const STORM_RATE: f64 = 25.0;

/// How long the retry storm's callers wait for an attempt.
pub const STORM_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// The retry storm's and the hang's arms: no retry, naive retries, retries with a budget, with
/// a breaker too, and the default policy (what a service gets when it configures nothing).
fn guard_arms() -> Result<Vec<Strategy>, SettingsError> {
    let mut arms = builtin(&[
        "no-retry",
        "retry-x3",
        "retry-x3+budget",
        "retry-x3+breaker+budget",
    ])?;
    arms.push(Strategy::default_policy("default-policy")?);
    Ok(arms)
}

/// A retry storm: 20 clients at 25 calls per second keep a dependency at 75% of what it can
/// serve (15 calls at once, a 22 ms mean: about 670 a second), behind a queue nobody bounded;
/// past its capacity, overload costs it up to a tenth of its throughput (thrash 0.1). Every
/// caller times an attempt out after 2 s. For 10 s, 30 s in, every call fails, at its normal
/// latency: the dependency still does the work. Whether the dependency comes back when the
/// glitch ends is decided by what the fleet's retries did to its queue: a queue whose wait
/// passes the callers' timeout fills with work for callers who gave up, each of whom retries.
pub fn retry_storm() -> Result<Scenario, SettingsError> {
    let mut strategies = guard_arms()?;
    for s in &mut strategies {
        for l in &mut s.layers {
            l.call = l
                .call
                .to_builder()
                .attempt_timeout(Some(STORM_ATTEMPT_TIMEOUT))
                .build()?;
        }
    }
    Ok(Scenario {
        name: "retry-storm".to_string(),
        description: "a dependency at 75% of its capacity behind a deep queue; every call fails \
                      for 10 s, 30 s in; callers time an attempt out after 2 s"
            .to_string(),
        seed: 1,
        duration: secs(100),
        clients: 10,
        arrivals: Arrivals::Poisson { rate: STORM_RATE },
        dependency: healthy()
            .capacity(7.5)
            .shedding_past(f64::INFINITY)
            .thrashing(0.1)
            .with(Impairment::ErrorSpike {
                at: secs(30),
                lasting: Some(secs(10)),
                rate: 1.0,
            }),
        healthy: None,
        pool: None,
        warnings: Vec::new(),
        strategies,
    })
}

/// Calls per second per client in the hang scenario (half to each dependency).
pub const HANG_RATE: f64 = 20.0;

/// The calls each client of the hang scenario can have in progress at once.
pub const HANG_POOL: u32 = 16;

/// A hang: 10 clients at 20 calls per second, half of them to a dependency that, 30 s in,
/// answers only after 30 s for a minute, half to a healthy one, all through a pool of 16
/// concurrent calls per client. A call waiting on the hung dependency holds its slot as long as
/// the policy lets it wait; once the pool is full, calls to the healthy one fail too.
pub fn hang() -> Result<Scenario, SettingsError> {
    Ok(Scenario {
        name: "hang".to_string(),
        description: "one of two dependencies answers only after 30 s for a minute, 30 s in; \
                      both share each caller's pool of 16 calls"
            .to_string(),
        seed: 1,
        duration: secs(150),
        clients: 10,
        arrivals: Arrivals::Poisson { rate: HANG_RATE },
        dependency: healthy().with(Impairment::Hang {
            at: secs(30),
            lasting: secs(60),
            after: secs(30),
        }),
        healthy: Some(HealthyDependency {
            dependency: healthy(),
            share: 0.5,
        }),
        pool: Some(HANG_POOL),
        warnings: Vec::new(),
        strategies: guard_arms()?,
    })
}

/// A 60 s outage (every call fails at once) 30 s in.
pub fn outage() -> Result<Scenario, SettingsError> {
    fleet(
        "outage",
        "every call fails at once for 60 s, 30 s in",
        healthy().with(Impairment::Outage {
            at: secs(30),
            lasting: secs(60),
        }),
    )
}

/// A 10x brownout for 60 s, 30 s in.
pub fn brownout() -> Result<Scenario, SettingsError> {
    fleet(
        "brownout",
        "every call 10x slower (still answering) for 60 s, 30 s in",
        healthy().with(Impairment::Brownout {
            at: secs(30),
            lasting: secs(60),
            slower: 10.0,
        }),
    )
}

/// The error rate steps from 5% to 30% for 60 s, 30 s in.
pub fn error_spike() -> Result<Scenario, SettingsError> {
    fleet(
        "error-spike",
        "the failure rate steps from 5% to 30% for 60 s, 30 s in",
        Dependency::healthy(ms(20), ms(60))
            .failing(0.05)
            .with(Impairment::ErrorSpike {
                at: secs(30),
                lasting: Some(secs(60)),
                rate: 0.30,
            }),
    )
}

/// A breaker whose ramp lasts a fixed `length` (a ramp sized to the dependency's warm-up).
pub fn ramp_over(length: Duration) -> Result<BreakerSettings, SettingsError> {
    BreakerSettings::builder_named(DEPENDENCY)
        .recovery(Some(Recovery::over(1.0).clamped(length, length)))
        .build()
}

/// A restart: 5 s down, then back cold, its capacity climbing from 5% to normal over 30 s.
/// One client's breaker fronts all of the traffic (a gateway), offering 600 calls per second
/// to a dependency that serves 20 at once (about 13.6 are in flight normally).
pub fn cold_recovery() -> Result<Scenario, SettingsError> {
    let cliff = builtin(&["retry-x3+breaker+budget", "retry-x3+breaker+budget+ramp"])?;
    let mut strategies = cliff;
    let mut sized = strategies[0].clone();
    sized.name = "retry-x3+breaker+budget+ramp30s".to_string();
    sized.layers[0].breaker = Some(ramp_over(secs(30))?);
    strategies.push(sized);
    // The same without a breaker: what the breaker buys and costs here.
    strategies.extend(builtin(&["retry-x3+budget"])?);
    Ok(Scenario {
        name: "cold-recovery".to_string(),
        description: "5 s down, then back cold: capacity climbs from 5% over 30 s".to_string(),
        seed: 1,
        duration: secs(150),
        clients: 1,
        arrivals: Arrivals::Poisson {
            rate: RATE * f64::from(FLEET),
        },
        dependency: Dependency::healthy(ms(20), ms(60))
            .capacity(20.0)
            .with(Impairment::Outage {
                at: secs(30),
                lasting: secs(5),
            })
            .with(Impairment::ColdRecovery {
                at: secs(35),
                over: secs(30),
                from: 0.05,
            }),
        strategies,
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    })
}

/// One gateway client offering 600 calls per second to a dependency that serves 20 at once
/// (about 13.4 are in flight normally), whose capacity halves for 60 s, 30 s in: past 10 in
/// flight calls queue, stretching every latency, and past 30 they are shed. A fixed bulkhead
/// sized for the full capacity and one sized for the half are compared with none (no queue: a
/// full bulkhead refuses, and the call waits that out as a self-imposed throttle), with a rate
/// limit sized for the half, and with the adaptive limiter, which finds the limit itself: with
/// its defaults, and told to shrink once a round's fastest call is past 1.4x (not 2x) the
/// healthy 10th percentile.
pub fn capacity_halves() -> Result<Scenario, SettingsError> {
    let plain = builtin(&["retry-x3+breaker+budget"])?;
    let mut strategies = plain.clone();
    for slots in [20, 10] {
        let mut bounded = plain[0].clone();
        bounded.name = format!("retry-x3+breaker+budget+bulkhead{slots}");
        bounded.layers[0].bulkhead = Some(
            BulkheadSettings::builder_named(DEPENDENCY)
                .max_in_flight(slots)
                .build()?,
        );
        strategies.push(bounded);
    }
    // The adaptive limiter with its defaults (4 to 200, starting at 20): no size to guess.
    let mut adaptive = plain[0].clone();
    adaptive.name = "retry-x3+breaker+budget+adaptive".to_string();
    adaptive.layers[0].adaptive = Some(AdaptiveLimitSettings::builder_named(DEPENDENCY).build()?);
    strategies.push(adaptive);
    // On this queue a round's fastest call passes 2x the healthy p10 only at about 2.7x the
    // capacity, past where the breaker's measured ceiling cuts attempts; 1.4x is passed
    // before the queue doubles latencies.
    let mut tolerant = plain[0].clone();
    tolerant.name = "retry-x3+breaker+budget+adaptive1.4".to_string();
    tolerant.layers[0].adaptive = Some(
        AdaptiveLimitSettings::builder_named(DEPENDENCY)
            .latency_tolerance(Multiple::from_milli(1_400))
            .build()?,
    );
    strategies.push(tolerant);
    // A rate sized for the half: about 450 calls a second (10 at once over a 22 ms mean),
    // a tenth of a second of it as burst.
    let mut rated = plain[0].clone();
    rated.name = "retry-x3+breaker+budget+rate450".to_string();
    rated.layers[0].limiter = Some(
        RateLimitSettings::builder_named(DEPENDENCY)
            .rate(450, secs(1))
            .burst(45)
            .build()?,
    );
    strategies.push(rated);
    // The same without a breaker: what the breaker buys and costs here.
    strategies.extend(builtin(&["retry-x3+budget"])?);
    Ok(Scenario {
        name: "capacity-halves".to_string(),
        description:
            "the dependency serves half its capacity (10 at once, not 20) for 60 s, 30 s in"
                .to_string(),
        seed: 1,
        duration: secs(150),
        clients: 1,
        arrivals: Arrivals::Poisson {
            rate: RATE * f64::from(FLEET),
        },
        dependency: Dependency::healthy(ms(20), ms(60)).capacity(20.0).with(
            Impairment::CapacityDrop {
                at: secs(30),
                lasting: secs(60),
                to: 0.5,
            },
        ),
        strategies,
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    })
}

/// One gateway client offering 600 calls per second to a healthy dependency with a long tail
/// (p50 20 ms, p99 400 ms: one call in twenty takes over 150 ms for no reason of its own), for
/// two minutes: hedging at the learned p95 against none.
pub fn long_tail() -> Result<Scenario, SettingsError> {
    let plain = builtin(&["retry-x3+breaker+budget"])?;
    let mut strategies = plain.clone();
    let mut hedged = plain[0].clone();
    hedged.name = "retry-x3+breaker+budget+hedging".to_string();
    hedged.layers[0].call = hedged.layers[0].call.to_builder().hedging(true).build()?;
    strategies.push(hedged);
    Ok(Scenario {
        name: "long-tail".to_string(),
        description: "a healthy dependency with a long tail (p50 20 ms, p99 400 ms)".to_string(),
        seed: 1,
        duration: secs(120),
        clients: 1,
        arrivals: Arrivals::Poisson {
            rate: RATE * f64::from(FLEET),
        },
        dependency: Dependency::healthy(ms(20), ms(400)),
        strategies,
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    })
}

/// The .NET original's documented simulation example, as close as our core allows.
pub fn dotnet_example() -> Result<Scenario, SettingsError> {
    let call = |timeout: Duration| {
        CallSettings::builder()
            .max_attempts(3)
            .deadline(Some(secs(10)))
            .attempt_timeout(Some(timeout))
            .build()
    };
    let layer = |timeout: Duration, budget: bool| -> Result<Layer, SettingsError> {
        Ok(Layer {
            call: call(timeout)?,
            breaker: None,
            budget: budget.then(|| BudgetSettings::defaults("dependency")),
            limiter: None,
            sliding: None,
            bulkhead: None,
            adaptive: None,
            limit_rule: None,
            retries_when_nested: true,
        })
    };
    // With a breaker, the call driver applies the breaker's measured attempt ceiling (3x the
    // recent p95 of successful calls), as the original's policy does.
    let measured = Layer {
        call: call(secs(10))?,
        breaker: Some(BreakerSettings::builder_named(DEPENDENCY).build()?),
        budget: Some(BudgetSettings::defaults("dependency")),
        limiter: None,
        sliding: None,
        bulkhead: None,
        adaptive: None,
        limit_rule: None,
        retries_when_nested: true,
    };
    Ok(Scenario {
        name: "dotnet-example".to_string(),
        description: "the .NET original's simulation: p50 20 ms, p99 200 ms, 8x brownout 30 s in \
                      for 1 min, 500 calls/s for 5 min, 3 attempts, budget, 10 s deadline"
            .to_string(),
        seed: 42,
        duration: secs(300),
        clients: 1,
        arrivals: Arrivals::Poisson { rate: 500.0 },
        dependency: Dependency::healthy(ms(20), ms(200)).with(Impairment::Brownout {
            at: secs(30),
            lasting: secs(60),
            slower: 8.0,
        }),
        strategies: vec![
            Strategy::single("x3-attempts+budget", layer(secs(10), true)?),
            // 3 x the healthy p95 (20 ms x e^(1.645 x 0.99) = 102 ms): a fixed ceiling, for
            // comparison with the measured one.
            Strategy::single("x3-attempts+budget+306ms", layer(ms(306), true)?),
            Strategy::single("x3-attempts+budget+breaker", measured),
        ],
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    })
}

/// The budget experiment of the .NET original's stress report: open loop, a dependency failing
/// `percent`% of what it is sent.
pub fn budget_experiment(percent: u32) -> Result<Scenario, SettingsError> {
    let layer = |attempts: u32, budget: bool| -> Result<Layer, SettingsError> {
        Ok(Layer {
            call: CallSettings::builder().max_attempts(attempts).build()?,
            breaker: None,
            budget: budget.then(|| BudgetSettings::defaults("dependency")),
            limiter: None,
            sliding: None,
            bulkhead: None,
            adaptive: None,
            limit_rule: None,
            retries_when_nested: true,
        })
    };
    Ok(Scenario {
        name: format!("budget-{percent}pct"),
        description: format!(
            "the .NET stress report's budget experiment: open loop at 2000 calls/s, the \
             dependency failing {percent}% of what it is sent"
        ),
        seed: 1,
        duration: secs(60),
        clients: 1,
        arrivals: Arrivals::Poisson { rate: 2000.0 },
        dependency: Dependency::healthy(ms(20), ms(60)).failing(f64::from(percent) / 100.0),
        strategies: vec![
            Strategy::single("3-attempts", layer(3, false)?),
            Strategy::single("until-success", layer(100, false)?),
            Strategy::single("3-attempts+budget", layer(3, true)?),
        ],
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    })
}

/// A tight polling loop against an open breaker: one client calling again the moment a call
/// returns, through a 60 s outage.
pub fn polling() -> Result<Scenario, SettingsError> {
    let layer = |attempts: u32| -> Result<Layer, SettingsError> {
        Ok(Layer {
            call: CallSettings::builder().max_attempts(attempts).build()?,
            breaker: Some(BreakerSettings::builder_named(DEPENDENCY).build()?),
            budget: Some(BudgetSettings::defaults("dependency")),
            limiter: None,
            sliding: None,
            bulkhead: None,
            adaptive: None,
            limit_rule: None,
            retries_when_nested: true,
        })
    };
    Ok(Scenario {
        name: "polling".to_string(),
        description: "a loop calling again as soon as each call returns, through a 60 s outage"
            .to_string(),
        seed: 1,
        duration: secs(90),
        clients: 1,
        arrivals: Arrivals::Polling {
            think: Duration::ZERO,
        },
        dependency: healthy().with(Impairment::Outage {
            at: secs(10),
            lasting: secs(60),
        }),
        strategies: vec![
            Strategy::single("poll+breaker", layer(1)?),
            Strategy::single("poll+retry-x3+breaker+budget", layer(4)?),
        ],
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    })
}

/// An hour of a stationary dependency, for false trips: one client at 50 calls per second behind
/// a default breaker, no retries.
pub fn stationary(
    name: &str,
    description: &str,
    dependency: Dependency,
) -> Result<Scenario, SettingsError> {
    Ok(Scenario {
        name: name.to_string(),
        description: description.to_string(),
        seed: 1,
        duration: secs(3600),
        clients: 1,
        arrivals: Arrivals::Poisson { rate: 50.0 },
        dependency,
        strategies: vec![Strategy::single(
            "breaker",
            Layer {
                call: CallSettings::builder().max_attempts(1).build()?,
                breaker: Some(BreakerSettings::builder_named(DEPENDENCY).build()?),
                budget: None,
                limiter: None,
                sliding: None,
                bulkhead: None,
                adaptive: None,
                limit_rule: None,
                retries_when_nested: true,
            },
        )],
        healthy: None,
        pool: None,
        warnings: Vec::new(),
    })
}

/// The default suite, in the order `storm` prints it.
pub fn default_suite() -> Result<Vec<Scenario>, SettingsError> {
    Ok(vec![
        retry_storm()?,
        hang()?,
        outage()?,
        brownout()?,
        error_spike()?,
        cold_recovery()?,
        capacity_halves()?,
        long_tail()?,
        dotnet_example()?,
        budget_experiment(25)?,
        budget_experiment(50)?,
        polling()?,
        stationary(
            "stationary-noise",
            "an hour of log-normal latency noise (p50 20 ms, p99 64 ms: sigma 0.5)",
            Dependency::healthy(ms(20), ms(64)),
        )?,
        stationary(
            "stationary-5pct",
            "an hour at a stationary 5% failure rate",
            Dependency::healthy(ms(20), ms(60)).failing(0.05),
        )?,
        stationary(
            "stationary-20pct",
            "an hour at a stationary 20% failure rate",
            Dependency::healthy(ms(20), ms(60)).failing(0.20),
        )?,
    ])
}

/// The run of consecutive failures a default breaker needs once it has learned a normal failure
/// rate `p`: the shortest run, at least the configured 5, whose chance `p^n` is at most the
/// default noise bound of 1e-8.
#[must_use]
pub fn noise_run(p: f64) -> i32 {
    if p <= 0.0 {
        return 5;
    }
    if p >= 1.0 {
        return i32::from(stormguard_core::breaker::MAX_COUNT);
    }
    let n = libm::ceil(libm::log(1e-8) / libm::log(p) - 1e-9);
    (n as i32).max(5)
}

/// The expected number of trips by the consecutive-failure rule over `trials` outcomes counted
/// while closed, failing independently with probability `p`, tripping at `k` in a row: runs of
/// `k` are a renewal process (the count starts over at each trip and each close), whose mean
/// gap is `(1 - p^k) / ((1 - p) p^k)` trials.
#[must_use]
pub fn expected_consecutive_trips(trials: u64, p: f64, k: i32) -> f64 {
    if k <= 0 {
        return trials as f64;
    }
    let pk = libm::pow(p, f64::from(k));
    trials as f64 * (1.0 - p) * pk / (1.0 - pk)
}

fn find<'a>(reports: &'a [Report], strategy: &str) -> Option<&'a Report> {
    reports.iter().find(|r| r.strategy == strategy)
}

/// Seconds, from an optional figure in ms ("never" when absent).
fn after_s(ms: Option<f64>) -> String {
    ms.map_or_else(|| "never".to_string(), |ms| format!("{:.1} s", ms / 1000.0))
}

/// One line saying what the breaker buys and what it costs in a built-in scenario, from its
/// figures: the breaker arm against the same policy without one, where the table has both.
#[must_use]
pub fn breaker_line(scenario: &Scenario, reports: &[Report]) -> Option<String> {
    let pair = |with: &str, without: &str| Some((find(reports, with)?, find(reports, without)?));
    let guarded = || pair("retry-x3+breaker+budget", "retry-x3+budget");
    let line = match scenario.name.as_str() {
        "retry-storm" => {
            let (w, o) = guarded()?;
            format!(
                "the breaker buys: {:.0} attempts a second at the dependency over the glitch \
                 ({:.0} with the budget alone), and the dependency serving again {} after it \
                 ({}); it costs: the break served after the dependency is back, so every call \
                 succeeds again only {} after the glitch ({} with the budget alone; naive \
                 retries: {})",
                w.attempts_per_s_in_window,
                o.attempts_per_s_in_window,
                after_s(w.dependency_recovered_ms),
                after_s(o.dependency_recovered_ms),
                after_s(w.time_to_recover_ms),
                after_s(o.time_to_recover_ms),
                after_s(find(reports, "retry-x3").and_then(|r| r.time_to_recover_ms)),
            )
        }
        "hang" => {
            let (w, o) = guarded()?;
            format!(
                "the breaker buys: {:.3} of the healthy dependency's calls served through the \
                 hang ({:.3} with the budget alone: calls waiting on the hung one fill the \
                 pool, and {} calls found it full; {} with the breaker); it costs: calls to the \
                 hung dependency are refused for the break after it answers again, so every \
                 call succeeds again only {} after the hang ({})",
                w.healthy_dependency_availability.unwrap_or(0.0),
                o.healthy_dependency_availability.unwrap_or(0.0),
                o.saturated,
                w.saturated,
                after_s(w.time_to_recover_ms),
                after_s(o.time_to_recover_ms),
            )
        }
        "outage" => {
            let (w, o) = guarded()?;
            format!(
                "the breaker buys: {} attempts at the dependency over the outage ({} with the \
                 budget alone): it rests; it costs: the break served after the dependency is \
                 back, availability {:.3} ({:.3}), every call succeeding again {} after the \
                 outage ({})",
                w.attempts_between(30, 90),
                o.attempts_between(30, 90),
                w.availability,
                o.availability,
                after_s(w.time_to_recover_ms),
                after_s(o.time_to_recover_ms),
            )
        }
        "brownout" => {
            let (w, o) = guarded()?;
            format!(
                "the breaker buys: no caller waits on a 10x-slow answer (p99 {:.0} ms, {:.0} ms \
                 with the budget alone); it costs: those answers, which would have come: \
                 availability {:.3} ({:.3})",
                w.latency_p99_ms, o.latency_p99_ms, w.availability, o.availability
            )
        }
        "error-spike" => {
            let (w, o) = guarded()?;
            format!(
                "the breaker buys: {:.0} attempts a second at the dependency over the spike ({:.0} \
                 with the budget alone); it costs: availability {:.3} ({:.3}): it refuses calls \
                 that would have succeeded 7 times in 10",
                w.attempts_per_s_in_window,
                o.attempts_per_s_in_window,
                w.availability,
                o.availability
            )
        }
        "cold-recovery" => {
            let (w, o) = guarded()?;
            let sized = find(reports, "retry-x3+breaker+budget+ramp30s")?;
            format!(
                "the breaker buys nothing here that the budget does not (a cold dependency sheds \
                 what it cannot take, fast): availability {:.3} ({:.3} with the budget alone), \
                 {} calls served over the climb ({}); what it costs is the re-trips of a cliffed \
                 close ({}), which a ramp sized to the warm-up removes ({:.3}, {} re-trips)",
                w.availability,
                o.availability,
                w.successes_between(35, 65),
                o.successes_between(35, 65),
                w.re_trips,
                sized.availability,
                sized.re_trips,
            )
        }
        "capacity-halves" => {
            let (w, o) = guarded()?;
            format!(
                "the breaker costs here: the queue past the lost half trips its slow-call rule \
                 {} times, and it sheds more than the lost half: availability {:.3} ({:.3} with \
                 the budget alone); a limit on calls in flight keeps the queue under the rule \
                 and the breaker closed",
                w.breaker_opens, w.availability, o.availability
            )
        }
        "dotnet-example" => {
            let (w, o) = pair("x3-attempts+budget+breaker", "x3-attempts+budget")?;
            format!(
                "the breaker buys: a caller p99 of {:.0} ms ({:.0} ms without) and {:.3}x the \
                 load over the brownout ({:.3}x); it costs: the 8x-slow answers it cuts and \
                 refuses: availability {:.3} ({:.3})",
                w.latency_p99_ms,
                o.latency_p99_ms,
                w.load_multiplier,
                o.load_multiplier,
                w.availability,
                o.availability
            )
        }
        "long-tail" => {
            let r = find(reports, "retry-x3+breaker+budget")?;
            format!(
                "the breaker buys the learned p95 the hedge waits for; it costs nothing on a \
                 healthy tail: {} opens",
                r.breaker_opens
            )
        }
        "polling" => {
            let most = reports
                .iter()
                .filter_map(|r| r.calls_per_second.iter().skip(11).take(59).max())
                .max()
                .copied()
                .unwrap_or(0);
            format!(
                "the breaker buys: at most {most} calls a second from a loop against a dead \
                 dependency (one failing in {} would see {:.0} without it); it costs: nothing the \
                 outage had not taken",
                scenario.dependency.fail_latency,
                1e9 / scenario.dependency.fail_latency.as_nanos().max(1) as f64
            )
        }
        name if name.starts_with("stationary-") => {
            let r = reports.first()?;
            format!(
                "the breaker costs nothing here: {} trips in an hour of a dependency that is \
                 only ever its normal self",
                r.breaker_opens
            )
        }
        _ => return None,
    };
    Some(line)
}

/// Lines to print beside a built-in scenario's table: the bounds computed for it, and the .NET
/// original's figures where it has them.
#[must_use]
pub fn commentary(scenario: &Scenario, reports: &[Report]) -> Vec<String> {
    let mut out: Vec<String> = breaker_line(scenario, reports).into_iter().collect();
    let rate = scenario.arrivals.mean_rate().unwrap_or(0.0);
    let fault = scenario
        .dependency
        .fault_window(scenario.duration)
        .map_or(0.0, |(a, b)| b.saturating_sub(a).as_nanos() as f64 / 1e9);
    // The budget's bound over a fault of T seconds per client at rate r: 1 + fraction +
    // floor / r + capacity / (r T) (defaults: 0.1, 3 per second, 30).
    let budget_share = 3.0 / rate + 30.0 / (rate * fault);
    match scenario.name.as_str() {
        "outage" => {
            if let Some(r) = find(reports, "retry-x3+budget") {
                out.push(format!(
                    "retry-x3+budget: load {:.3}x <= bound 1 + 0.1 + 3/{rate} + 30/({rate} x {fault}) = {:.3}x",
                    r.load_multiplier,
                    1.1 + budget_share
                ));
            }
            if let Some(r) = find(reports, "retry-x3+breaker") {
                out.push(format!(
                    "retry-x3+breaker: {} attempts in the fault window for {} calls; {} probes",
                    r.attempts_between(30, 90),
                    r.calls_between(30, 90),
                    r.probes
                ));
            }
            if let (Some(a), Some(b)) = (find(reports, "3-layer-x3"), find(reports, "3-layer-x3+budget")) {
                out.push(format!(
                    "3-layer: {:.1}x without budgets (4^3 = 64), {:.3}x with them (each layer adds \
                     at most floor + capacity/T = 3.5 retries/s per client: 1 + 3 x 3.5/{rate} = {:.3}x; \
                     fed by successes instead, (1 + 0.1)^3 = 1.331x)",
                    a.load_multiplier,
                    b.load_multiplier,
                    1.0 + 3.0 * (3.0 + 30.0 / fault) / rate
                ));
            }
            if let Some(n) = find(reports, "3-layer-x3+nested") {
                out.push(format!(
                    "3-layer-x3+nested: {:.1}x when the layers below hold a retry's retries (at \
                     most 7 + 3 x 4 = 19x: only a layer's first attempt reaches a call below that \
                     retries)",
                    n.load_multiplier
                ));
            }
        }
        "brownout" => out.push(
            "slow-call trip bound: slow ratio x trip window + one bucket = 0.5 x 30 s + 3 s = 18 s"
                .to_string(),
        ),
        "error-spike" => out.push(
            "relative-rate trip bound: the window passes 5 x 5% = 25% once 30% fills (25-5)/(30-5) \
             = 0.8 of it: 24 s + one 3 s bucket = 27 s (the consecutive rule usually trips first)"
                .to_string(),
        ),
        "cold-recovery" => {
            for r in reports {
                out.push(format!(
                    "{}: {} re-trips, {} calls served over the 30 s climb",
                    r.strategy,
                    r.re_trips,
                    r.successes_between(35, 65)
                ));
            }
        }
        "dotnet-example" => {
            out.push("the .NET original (its docs): load 1.016x, amplification 1.104x, availability 0.9026, p99 434 ms, 0 breaker opens".to_string());
            for r in reports {
                out.push(format!(
                    "ours, {}: load {:.3}x over the run ({:.3}x over the brownout), amplification {:.3}x, availability {:.4}, p99 {:.0} ms, {} breaker opens",
                    r.strategy, r.load_multiplier_run, r.load_multiplier, r.amplification, r.availability, r.latency_p99_ms, r.breaker_opens
                ));
            }
            out.push("differences: both dependencies fail nothing at base and have no capacity limit. Their example has no breaker (0 opens) but its Http preset cuts attempts at 3x the recent p95, which turns slow brownout attempts into timeouts. Our call driver takes that ceiling from a breaker's measurements, so no arm is exactly theirs: the as-configured arm (10 s attempt timeout, no breaker) times nothing out; the 306 ms arm is the nearest, a ceiling fixed at 3x the healthy p95 (theirs follows the p95 up as the brownout goes on); the breaker arm adds what their example leaves out.".to_string());
            if let Some(r) = reports.iter().find(|r| r.breaker_opens > 0) {
                out.push(format!(
                    "what the breaker arm shows: a quarter of the 8x-slow attempts outlast its measured ceiling (about 306 ms) and fail, so it trips {:.1} s into the brownout (opens by reason: {}); while the brownout lasts its probes time out and re-open it, or answer slowly and close it until the slow-call rule trips it again: {} calls refused locally (availability {:.4}) and {:.3}x load at the dependency over the brownout",
                    r.time_to_trip_ms.unwrap_or(0.0) / 1000.0,
                    r.opens_by_reason
                        .iter()
                        .map(|(why, n)| format!("{why}: {n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    r.refused_locally,
                    r.availability,
                    r.load_multiplier
                ));
            }
        }
        "budget-25pct" | "budget-50pct" => {
            let (their_plain, their_budget, their_avail) = if scenario.name == "budget-25pct" {
                (0.333, 0.081, 0.81)
            } else {
                (0.996, 0.053, 0.53)
            };
            out.push(format!(
                "the .NET stress report: retries/call {their_plain} without a budget (their figure equals p/(1-p): retrying until success), {their_budget} with one (3 attempts); availability with the budget {:.0}%",
                their_avail * 100.0
            ));
            for r in reports {
                out.push(format!(
                    "ours, {}: retries/call {:.3}, availability {:.3}",
                    r.strategy, r.retries_per_call, r.availability
                ));
            }
            out.push("differences: theirs is a counter failing exactly 1 in N of what the dependency is sent at 20,000 calls/s; ours fails each attempt independently with probability p at 2,000 calls/s (the floor's 3 retries/s is 0.0015 of a call here)".to_string());
        }
        "polling" => {
            for r in reports {
                let most = r
                    .calls_per_second
                    .iter()
                    .skip(11)
                    .take(59)
                    .copied()
                    .max()
                    .unwrap_or(0);
                out.push(format!(
                    "{}: at most {most} calls in any second of the outage (a refusal takes the 100 ms guarded pause: at most 10, plus a probe)",
                    r.strategy
                ));
            }
        }
        name if name.starts_with("stationary-") => {
            for r in reports {
                let p = scenario.dependency.failure_rate;
                let run = noise_run(p);
                out.push(format!(
                    "{}: {} trips by the relative rules (failure rate {}, slow calls {}); {} by consecutive failures (a run of {run} once p = {p} is learned: {:.4} expected from {} closed outcomes; 5 in a row would trip {:.1} times)",
                    r.strategy,
                    r.false_trips_failure_rate + r.false_trips_slow,
                    r.false_trips_failure_rate,
                    r.false_trips_slow,
                    r.false_trips_consecutive,
                    expected_consecutive_trips(r.closed_outcomes, p, run),
                    r.closed_outcomes,
                    expected_consecutive_trips(r.closed_outcomes, p, 5),
                ));
            }
        }
        _ => {}
    }
    for r in reports.iter().filter(|r| r.false_trips > 0) {
        out.push(format!(
            "{}: trips outside the impairments: {} (consecutive failures {}, failure rate {}, slow calls {}, ramp re-opens {})",
            r.strategy,
            r.false_trips,
            r.false_trips_consecutive,
            r.false_trips_failure_rate,
            r.false_trips_slow,
            r.false_trips_ramp
        ));
    }
    out
}
