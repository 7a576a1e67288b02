//! Scenario files: a good one runs; a bad one says what is wrong and where.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::Duration;
use stormguard_tests::{config, run, Arrivals, Impairment};

const GOOD: &str = r#"
name = "payments"
description = "a brownout, compared"
duration = "40s"
seed = 9
strategies = ["retry-x3"]

[load]
clients = 3
rate = 20

[dependency]
p50 = "20ms"
p99 = "200ms"
failure_rate = 0.001
capacity = 50

[[impairment]]
kind = "brownout"
at = "10s"
lasting = "15s"
slower = 8

[[impairment]]
kind = "cold_recovery"
at = "25s"
over = "10s"
from = 0.1

[[strategy]]
name = "ours"

[strategy.policy]
max_attempts = 3
deadline = "10s"
attempt_timeout = "2s"
backoff = { base = "50ms", factor = 2.0, cap = "5s", jitter = "equal" }
budget = { fraction = 0.2, floor_per_second = 5 }
breaker = { consecutive_failures = 5, slow_calls = { multiple = 3 }, trip_window = "10s", break_duration = "5s", recovery = { fraction = 0.5 } }
"#;

#[test]
fn a_scenario_file_describes_a_dependency_a_fleet_and_a_policy() {
    let s = config::parse(GOOD).unwrap();
    assert_eq!(s.name, "payments");
    assert_eq!(s.clients, 3);
    assert_eq!(s.dependency.impairments.len(), 2);
    assert!(
        matches!(s.dependency.impairments[0], Impairment::Brownout { slower, .. } if (slower - 8.0).abs() < 1e-9)
    );
    let names: Vec<&str> = s.strategies.iter().map(|st| st.name.as_str()).collect();
    assert_eq!(names, ["retry-x3", "ours"]);
    let ours = &s.strategies[1].layers[0];
    assert_eq!(ours.call.max_attempts(), 3);
    assert!(ours.breaker.unwrap().recovery().is_some());
    let r = run(&s, &s.strategies[1], s.seed);
    assert!(r.calls > 2000);
}

fn error(text: &str) -> String {
    config::parse(text).unwrap_err().to_string()
}

fn with(replace: &str, by: &str) -> String {
    assert!(GOOD.contains(replace), "{replace}");
    GOOD.replacen(replace, by, 1)
}

#[test]
fn a_bad_scenario_file_says_what_is_wrong_and_where() {
    let cases: [(&str, &str, &str); 22] = [
        // The core's own errors name the file's keys, not the builders' setters.
        (
            "max_attempts = 3",
            "max_attempts = 0",
            "strategy[0].policy.max_attempts: must be at least 1",
        ),
        (
            "consecutive_failures = 5,",
            "consecutive_failures = 0,",
            "strategy[0].policy.breaker.consecutive_failures: must be at least 1",
        ),
        (
            "break_duration = \"5s\"",
            "break_duration = \"500s\"",
            "strategy[0].policy.breaker.max_break: must be at least `break_duration`",
        ),
        (
            "p99 = \"200ms\"",
            "p99 = \"10ms\"",
            "dependency.p99: must be above p50",
        ),
        (
            "duration = \"40s\"",
            "duration = \"40 parsecs\"",
            "duration: invalid duration",
        ),
        (
            "kind = \"brownout\"",
            "kind = \"meteor\"",
            "impairment[0].kind: unknown impairment \"meteor\"",
        ),
        (
            "slower = 8",
            "slower = 0.5",
            "impairment[0].slower: 0.5 is not above 1",
        ),
        (
            "capacity = 50",
            "",
            "impairment[1].kind: a cold_recovery needs dependency.capacity",
        ),
        (
            "strategies = [\"retry-x3\"]",
            "strategies = [\"retry-forever\"]",
            "strategies: unknown built-in strategy \"retry-forever\"",
        ),
        (
            "consecutive_failures = 5",
            "consecutive_failures = 0",
            "strategy[0].policy.breaker",
        ),
        (
            "jitter = \"equal\"",
            "jitter = \"some\"",
            "unknown variant `some`",
        ),
        (
            "rate = 20",
            "rate = 20\nspikes = 3",
            "unknown field `spikes`",
        ),
        (
            "rate = 20",
            "rate = 20\narrivals = \"bursty\"\npeak = 12",
            "load.peak: 12 is more than 1 / share (10)",
        ),
        (
            "rate = 20",
            "rate = 20\narrivals = \"bursty\"\nshare = 1",
            "load.share: 1 is not a share of the time from 0.001 to 0.999",
        ),
        (
            "rate = 20",
            "rate = 20\npeak = 3",
            "load.peak: \"poisson\" arrivals do not take it",
        ),
        (
            "rate = 20",
            "arrivals = \"polling\"\nrate = 20",
            "load.rate: \"polling\" arrivals do not take it",
        ),
        (
            "rate = 20",
            "rate = 20\narrivals = \"bursty\"\nburst = \"1ns\"",
            "load.burst: must be at least 1ms",
        ),
        (
            "rate = 20",
            "rate = 20\narrivals = \"bursty\"\npeak = 1",
            "load.peak: 1 is not above 1",
        ),
        (
            "rate = 20",
            "rate = 2000000",
            "load.rate: 2000000 is more than 1000000 calls per second per client",
        ),
        (
            "rate = 20",
            "rate = 20\narrivals = \"flash-crowd\"\npeak = 3",
            "load.arrivals: unknown arrivals \"flash-crowd\"",
        ),
        // 2^32 + 3: refused for its size, never read as 3.
        (
            "slow_calls = { multiple = 3 }",
            "slow_calls = { multiple = 4294967299 }",
            "strategy[0].policy.breaker.slow_calls",
        ),
        (
            "failure_rate = 0.001",
            "failure_rate = 1.5",
            "dependency.failure_rate: 1.5 is not a fraction",
        ),
    ];
    for (replace, by, expected) in cases {
        let e = error(&with(replace, by));
        assert!(e.contains(expected), "expected {expected:?} in {e:?}");
    }
    // A syntax error gives the line.
    let e = error("name = \"x\"\nduration = \n");
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn a_scenario_file_can_ask_for_bursts() {
    let s = config::parse(&with(
        "rate = 20",
        "rate = 20\narrivals = \"bursty\"\npeak = 5\nburst = \"2s\"",
    ))
    .unwrap();
    assert_eq!(
        s.arrivals,
        Arrivals::Bursty {
            rate: 20.0,
            peak: 5.0,
            share: 0.1,
            burst: Duration::from_secs(2),
        }
    );
    assert_eq!(s.offered_rate(), Some(60.0));
}

#[test]
fn durations_read_as_a_number_and_a_unit() {
    let ms = |t: &str| config::parse_duration("x", t).map(|d| d.as_nanos() / 1_000_000);
    assert_eq!(ms("250ms"), Ok(250));
    assert_eq!(ms("1.5s"), Ok(1500));
    assert_eq!(ms("2m"), Ok(120_000));
    assert_eq!(ms("1h"), Ok(3_600_000));
    assert!(ms("5").is_err());
    assert!(ms("s").is_err());
}

#[test]
fn a_scenario_files_strategies_explain_themselves() {
    let s = config::parse(GOOD).unwrap();
    let ours = s.strategies[1].explain();
    let want_lines = [
        "policy `dependency`",
        "- the attempt limit bounds a call first: 3 attempts take at most 6.150s, inside the 10s deadline",
        "    2s: wait up to 50ms (exponential from 50ms (1s after throttling), x2, capped at 5s, equal jitter)",
        "- missing: nothing",
    ];
    for line in want_lines {
        assert!(ours.lines().any(|l| l == line), "{line:?} not in:\n{ours}");
    }
    let bare = s.strategies[0].explain();
    assert!(
        bare.contains(
            "no breaker: nothing stops a call reaching a dependency that is already down"
        ),
        "{bare}"
    );
}

/// The example file's strategy in the older spelling of a scenario file.
const EXAMPLE_OURS_LEGACY: &str = r#"[[strategy]]
name = "ours"
attempts = 3
deadline = "10s"
attempt_timeout = "1s"
backoff = { base = "100ms", factor = 2, cap = "5s", jitter = "full" }
budget = { fraction = 0.1, floor = 3 }
breaker = { consecutive_failures = 5, slow_calls = 3, recovery = 1.0, recovery_min = "30s" }
"#;

fn example() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/example.toml"
    ))
    .unwrap()
}

#[test]
fn the_older_spelling_of_a_strategy_is_refused_naming_the_key_to_write_in_policy() {
    // The older keys beside `policy` had the opposite defaults (no breaker or budget unless
    // named): "retry x3 without budget and breaker" read in one spelling ran with both in the
    // other. Only the configuration files' spelling is read now.
    let text = example();
    let at = text.find("# The policy in the format").unwrap();
    let legacy = format!("{}{EXAMPLE_OURS_LEGACY}", &text[..at]);
    let e = error(&legacy);
    assert!(
        e.starts_with(
            "strategy[0].attempts: a strategy's policy is written in `policy`, in the format of \
             stormguard-std's configuration files (`policy = { max_attempts = ... }`), where a \
             breaker and a budget are on unless turned off with `false`"
        ),
        "{e}"
    );
    // Each older key names its own key in `policy`.
    let bare = |key_and_value: &str| {
        format!(
            "{}[[strategy]]\nname = \"old\"\n{key_and_value}\n",
            &text[..at]
        )
    };
    for (old, new) in [
        ("attempts = 4", "max_attempts"),
        ("breaker = { consecutive_failures = 5 }", "breaker"),
        ("budget = { fraction = 0.1 }", "budget"),
        ("adaptive = { min_limit = 2 }", "adaptive_limit"),
        ("rate_limit = { per_second = 40 }", "rate_limit"),
    ] {
        let key = old.split(' ').next().unwrap();
        let e = error(&bare(old));
        assert!(
            e.starts_with(&format!("strategy[0].{key}: "))
                && e.contains(&format!("`policy = {{ {new} = ... }}`")),
            "{old}: {e}"
        );
    }
}

#[test]
fn a_policy_that_leaves_out_its_breaker_or_budget_says_so_and_one_that_turns_them_off_runs_bare() {
    let text = example();
    let at = text.find("# The policy in the format").unwrap();
    let with = |policy: &str| {
        config::parse(&format!(
            "{}[[strategy]]\nname = \"x3\"\npolicy = {policy}\n",
            &text[..at]
        ))
        .unwrap()
    };
    // Retry x3 without budget and breaker, said so: neither, and no warning.
    let bare = with("{ max_attempts = 4, breaker = false, budget = false }");
    let layer = &bare.strategies[2].layers[0];
    assert_eq!(layer.call.max_attempts(), 4);
    assert!(layer.breaker.is_none() && layer.budget.is_none());
    assert!(bare.warnings.is_empty(), "{:?}", bare.warnings);
    // Left out: both, as the std loader would have them, and a warning for each.
    let implied = with("{ max_attempts = 4 }");
    let layer = &implied.strategies[2].layers[0];
    assert!(layer.breaker.is_some() && layer.budget.is_some());
    assert_eq!(implied.warnings.len(), 2, "{:?}", implied.warnings);
    for (w, part) in implied.warnings.iter().zip(["breaker", "budget"]) {
        assert!(
            w.starts_with(&format!(
                "strategy[0] (\"x3\"): its policy names no `{part}`, so it runs with the default one"
            )),
            "{w}"
        );
    }
    // Named, even as their defaults: no warning.
    let named = with("{ max_attempts = 4, breaker = {}, budget = {} }");
    assert!(named.warnings.is_empty(), "{:?}", named.warnings);
    assert_eq!(named.strategies[2].layers, implied.strategies[2].layers);
    // No policy at all is the default policy.
    let none = config::parse(&format!("{}[[strategy]]\nname = \"d\"\n", &text[..at])).unwrap();
    let default = stormguard_tests::Strategy::default_policy("d").unwrap();
    assert_eq!(none.strategies[2].layers, default.layers);
}

#[test]
fn a_dependency_without_a_capacity_is_a_warning_unless_the_file_says_it_is_unbounded() {
    let stated = config::parse(GOOD).unwrap();
    assert!(stated.warnings.is_empty(), "{:?}", stated.warnings);
    let cold =
        "[[impairment]]\nkind = \"cold_recovery\"\nat = \"25s\"\nover = \"10s\"\nfrom = 0.1\n";
    assert!(GOOD.contains(cold));
    let left_out = GOOD
        .replacen("capacity = 50\n", "", 1)
        .replacen(cold, "", 1);
    let s = config::parse(&left_out).unwrap();
    assert_eq!(s.dependency.capacity, None);
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0]
            .starts_with("dependency.capacity is not set, so the dependency serves any load"),
        "{}",
        s.warnings[0]
    );
    let unbounded = GOOD
        .replacen("capacity = 50", "capacity = \"unbounded\"", 1)
        .replacen(cold, "", 1);
    let s = config::parse(&unbounded).unwrap();
    assert_eq!(s.dependency.capacity, None);
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert!(
        error(&GOOD.replacen("capacity = 50", "capacity = \"lots\"", 1))
            .starts_with("dependency.capacity: \"lots\" is not a number of calls or \"unbounded\"")
    );
}

#[test]
fn a_scenario_file_takes_a_deep_queue_a_pool_a_healthy_dependency_and_a_hang() {
    let text = GOOD
        .replacen(
            "capacity = 50\n",
            "capacity = 50\nshed_past = inf\nthrash = 0.1\n",
            1,
        )
        .replacen("rate = 20\n", "rate = 20\npool = 12\n", 1)
        .replacen(
            "[[impairment]]",
            "[healthy_dependency]\np50 = \"10ms\"\np99 = \"50ms\"\ncapacity = \"unbounded\"\nshare = 0.25\n\n[[impairment]]\nkind = \"hang\"\nat = \"5s\"\nlasting = \"10s\"\nafter = \"30s\"\n\n[[impairment]]",
            1,
        );
    let s = config::parse(&text).unwrap();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert_eq!(s.pool, Some(12));
    assert_eq!(s.dependency.shed_past, f64::INFINITY);
    assert!((s.dependency.thrash - 0.1).abs() < 1e-12);
    let healthy = s.healthy.as_ref().unwrap();
    assert!((healthy.share - 0.25).abs() < 1e-12);
    assert_eq!(healthy.dependency.p50, Duration::from_millis(10));
    assert_eq!(
        s.dependency.impairments[0],
        Impairment::Hang {
            at: Duration::from_secs(5),
            lasting: Duration::from_secs(10),
            after: Duration::from_secs(30),
        }
    );
    let r = run(&s, &s.strategies[1], s.seed);
    assert!(r.healthy_dependency_availability.is_some());
    // Each problem says where.
    let bad = [
        (
            "pool = 12",
            "pool = 0",
            "load.pool: a client's pool needs at least one call",
        ),
        (
            "share = 0.25",
            "share = 1.0",
            "healthy_dependency.share: 1 is not a share of the calls in (0, 1)",
        ),
        (
            "shed_past = inf",
            "shed_past = 0.5",
            "dependency.shed_past: 0.5 is not a multiple of the capacity of at least 1",
        ),
        (
            "after = \"30s\"\n",
            "",
            "impairment[0].after: a hang needs `after`",
        ),
    ];
    for (from, to, want) in bad {
        assert!(text.contains(from), "{from}");
        let e = error(&text.replacen(from, to, 1));
        assert!(e.starts_with(want), "{want:?} not at the start of {e:?}");
    }
}

#[test]
fn a_policy_section_in_a_strategy_reads_as_the_std_loader_reads_it() {
    let with_policy = |policy: &str| {
        GOOD.replace(
            "[[strategy]]\nname = \"ours\"",
            &format!(
                "[[strategy]]\nname = \"mine\"\npolicy = {policy}\n\n[[strategy]]\nname = \"ours\""
            ),
        )
    };
    // Absent parts take the std defaults: a breaker and a budget.
    let s = config::parse(&with_policy("{ max_attempts = 2, deadline = false }")).unwrap();
    let mine = &s.strategies[1];
    assert_eq!(mine.name, "mine");
    let layer = &mine.layers[0];
    assert_eq!(layer.call.max_attempts(), 2);
    assert_eq!(layer.call.deadline(), None);
    assert_eq!(layer.breaker.unwrap().name().as_str(), "dependency");
    assert!(layer.budget.is_some());
    let s = config::parse(&with_policy("{ breaker = false, budget = false }")).unwrap();
    assert!(s.strategies[1].layers[0].breaker.is_none());
    assert!(s.strategies[1].layers[0].budget.is_none());

    // Every problem, each with its path in the file.
    let e = error(&with_policy(
        "{ max_attempts = 0, breaker = { consecutive_failures = 0, half_open_probes = 99 }, backoff = { base = \"1m\", cap = \"1s\" } }",
    ));
    assert_eq!(
        e,
        "strategy[0].policy.backoff.cap: must be at least `base`\n\
         strategy[0].policy.max_attempts: must be at least 1\n\
         strategy[0].policy.breaker.consecutive_failures: must be at least 1\n\
         strategy[0].policy.breaker.half_open_probes: must be at most 31"
    );
    assert!(error(&with_policy("{ max_atempts = 2 }")).contains("unknown field `max_atempts`"));
    let s = config::parse(&with_policy("{ hedging = true }")).unwrap();
    assert!(s.strategies[1].layers[0].call.hedging());
    let layered = with_policy("{ hedging = true }")
        .replace("name = \"mine\"\n", "name = \"mine\"\nlayers = 2\n");
    assert!(error(&layered).starts_with(
        "strategy[0].policy.hedging: hedging is simulated in a strategy of one layer"
    ));
    assert!(error(&with_policy("{ preset = \"default\" }"))
        .starts_with("strategy[0].policy.preset: a scenario file has no presets"));
    let beside = with_policy("{ max_attempts = 2 }")
        .replace("name = \"mine\"\n", "name = \"mine\"\nattempts = 3\n");
    assert!(error(&beside)
        .starts_with("strategy[0].attempts: a strategy's policy is written in `policy`"));

    // The limits in the std loader's format.
    let s = config::parse(&with_policy(
        "{ rate_limit = { rate = 40, period = \"1s\", burst = 5 }, bulkhead = { max_in_flight = 4 }, adaptive_limit = { min_limit = 2, max_limit = 8, initial_limit = 4 } }",
    ))
    .unwrap();
    let layer = &s.strategies[1].layers[0];
    assert_eq!(layer.limiter.unwrap().burst(), 5);
    assert_eq!(layer.bulkhead.unwrap().max_in_flight(), 4);
    assert_eq!(layer.adaptive.unwrap().max_limit(), 8);
    assert!(error(&with_policy(
        "{ bulkhead = { max_in_flight = 4, max_queue = 2, max_wait = \"1s\" } }"
    ))
    .starts_with("strategy[0].policy.bulkhead: the simulator models no queue"));
    assert_eq!(
        error(&with_policy("{ rate_limit = { rate = 0 } }")),
        "strategy[0].policy.rate_limit.rate: must be at least 1"
    );
    let twice = with_policy("{ bulkhead = { max_in_flight = 4 } }").replace(
        "name = \"mine\"\n",
        "name = \"mine\"\nbulkhead = { max_in_flight = 2 }\n",
    );
    assert!(
        error(&twice).starts_with("strategy[0].bulkhead: a strategy's policy is written in"),
        "{}",
        error(&twice)
    );
}

#[test]
fn every_limit_and_fault_injection_settings_type_deserializes_with_the_builders_keys() {
    use stormguard_core::limits::{
        AdaptiveLimitSettings, BulkheadSettings, QuotaSettings, RateLimitSettings,
        SlidingWindowSettings, WindowLimitSettings,
    };
    use stormguard_core::policy::ChaosSettings;
    let b: BulkheadSettings =
        toml::from_str("name = \"db\"\nmax_in_flight = 4\nmax_queue = 8\nmax_wait = \"250ms\"")
            .unwrap();
    assert_eq!(
        (
            b.name().as_str(),
            b.max_in_flight(),
            b.max_queue(),
            b.max_wait()
        ),
        ("db", 4, 8, Duration::from_millis(250))
    );
    let r: RateLimitSettings =
        toml::from_str("name = \"api\"\nrate = 10\nperiod = \"1s\"\nburst = 2").unwrap();
    assert_eq!(
        (r.cells(), r.period(), r.burst()),
        (10, Duration::from_secs(1), 2)
    );
    let w: WindowLimitSettings =
        toml::from_str("name = \"sms\"\nevents = 3\nwindow = \"1m\"").unwrap();
    assert_eq!((w.events(), w.window()), (3, Duration::from_secs(60)));
    let a: AdaptiveLimitSettings = toml::from_str(
        "name = \"db\"\nmin_limit = 2\nmax_limit = 9\ninitial_limit = 3\ndecrease = 0.5",
    )
    .unwrap();
    assert_eq!((a.min_limit(), a.max_limit(), a.initial_limit()), (2, 9, 3));
    assert_eq!(a.decrease().ppm(), 500_000);
    let sw: SlidingWindowSettings =
        toml::from_str("name = \"api\"\nquota = 100\nwindow = \"1m\"\nsegments = 4").unwrap();
    assert_eq!(
        (sw.quota(), sw.window(), sw.segments()),
        (100, Duration::from_secs(60), 4)
    );
    let q: QuotaSettings = toml::from_str("reserve = 0.2\nmax_wait = \"5s\"").unwrap();
    assert_eq!(
        (q.reserve().ppm(), q.max_wait()),
        (200_000, Duration::from_secs(5))
    );
    assert!(toml::from_str::<QuotaSettings>("reserve = 1.0")
        .unwrap_err()
        .message()
        .contains("quota_reserve"));
    let c: ChaosSettings =
        toml::from_str("faults = 0.25\nslowed = 0.5\nlatency = \"100ms\"\nseed = 7").unwrap();
    assert_eq!((c.faults().ppm(), c.slowed().ppm()), (250_000, 500_000));
    assert_eq!((c.latency(), c.seed()), (Duration::from_millis(100), 7));

    // Bad values name their setting and bound; a name is required; unknown keys are refused.
    let e = |r: Result<BulkheadSettings, toml::de::Error>| r.unwrap_err().message().to_string();
    assert!(e(toml::from_str("name = \"db\"\nmax_in_flight = 0")).contains("max_in_flight"));
    assert!(e(toml::from_str("max_in_flight = 3")).contains("missing field `name`"));
    assert!(e(toml::from_str("name = \"db\"\nmax_inflight = 3")).contains("unknown field"));
    let c = toml::from_str::<ChaosSettings>("faults = 1.5").unwrap_err();
    assert!(c.message().contains("faults"), "{c}");
    let c = toml::from_str::<ChaosSettings>("slowed = 0.5").unwrap_err();
    assert!(c.message().contains("latency"), "{c}");
}
