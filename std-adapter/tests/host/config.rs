//! Named policies from a configuration document: the example file, presets and overrides,
//! every problem at once with its path, hostile documents (unknown keys, wrong types, huge
//! numbers, deep nesting, random mutations) refused with an error and never a panic,
//! environment variables, and reloads that keep breakers' and budgets' state.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::limits::AnyRule;
use stormguard_core::Field;
use stormguard_std::config::{ConfigError, PolicyConfig};
use stormguard_std::{Duration, Jitter, State};

use crate::support::Seeded;

const EXAMPLE: &str = include_str!("../../examples/policies.toml");

fn err_toml(text: &str) -> ConfigError {
    match PolicyConfig::from_toml(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e,
    }
}

fn lines(e: &ConfigError) -> Vec<String> {
    e.problems().iter().map(ToString::to_string).collect()
}

#[test]
fn the_example_file_builds_every_policy_from_its_preset_and_overrides() {
    let config = PolicyConfig::from_toml(EXAMPLE).unwrap();
    assert_eq!(
        config.names().collect::<Vec<_>>(),
        ["payments", "reports", "search"]
    );
    let policies = config.build().unwrap();

    let payments = policies.get("payments").unwrap();
    let s = payments.settings();
    assert_eq!(s.max_attempts(), 3); // the default preset
    assert_eq!(s.deadline(), Some(Duration::from_secs(5)));
    assert_eq!(s.attempt_timeout(), Some(Duration::from_millis(500))); // its own
    assert_eq!(s.backoff().base(), Duration::from_millis(50)); // its own, over the preset's
    assert_eq!(s.backoff().cap(), Duration::from_secs(2)); // the preset's
    assert_eq!(s.backoff().jitter(), Jitter::Full);
    let b = payments.breaker().unwrap().settings();
    assert_eq!(b.name().as_str(), "payments");
    assert_eq!(b.consecutive_failures(), 3);
    assert_eq!(b.max_break(), Duration::from_secs(120));
    assert_eq!(b.recovery().map(|r| r.fraction().ppm()), Some(250_000));
    assert_eq!(
        payments
            .budget()
            .unwrap()
            .settings()
            .floor_per_second_milli(),
        3000
    );

    let search = policies.get("search").unwrap();
    assert!(search.settings().hedging());
    assert_eq!(
        search
            .breaker()
            .unwrap()
            .settings()
            .slow_calls()
            .map(|r| r.multiple().milli()),
        Some(2500)
    );

    let AnyRule::Gcra(&limiter) = search.limiter().unwrap().rule() else {
        panic!("a GCRA limiter")
    };
    assert_eq!(
        (limiter.cells(), limiter.period(), limiter.burst()),
        (20, Duration::from_secs(1), 5)
    );
    let bulkhead = search.bulkhead().unwrap().settings();
    assert_eq!(
        (
            bulkhead.max_in_flight(),
            bulkhead.max_queue(),
            bulkhead.max_wait()
        ),
        (8, 16, Duration::from_millis(250))
    );
    assert_eq!(bulkhead.name().as_str(), "search");
    assert!(payments.limiter().is_none() && payments.bulkhead().is_none());
    assert!(payments.adaptive_limit().is_none());

    let reports = policies.get("reports").unwrap();
    let adaptive = reports.adaptive_limit().unwrap().settings();
    assert_eq!(
        (
            adaptive.min_limit(),
            adaptive.max_limit(),
            adaptive.initial_limit()
        ),
        (4, 50, 10)
    );
    assert_eq!(reports.settings().max_attempts(), 1);
    assert_eq!(reports.settings().deadline(), None);
    assert!(reports.budget().is_none());
    assert!(!reports.retries_when_nested());
    let rb = reports.breaker().unwrap().settings();
    assert_eq!(rb.consecutive_failures(), 10);
    assert!(rb.failure_rate().is_none() && rb.slow_calls().is_none());
    assert!(policies.get("unknown").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_policy_from_the_file_calls_like_one_built_in_code() {
    let config = PolicyConfig::from_toml(EXAMPLE).unwrap();
    let reports = config.build().unwrap().get("reports").unwrap();
    let mut tries = 0;
    let r: Result<(), _> = reports
        .call(|_| {
            tries += 1;
            async { Err::<(), _>("down") }
        })
        .await;
    assert!(r.is_err());
    assert_eq!(tries, 1, "max_attempts = 1 from the batch preset");
    // A builder from the document takes more parts before it is built.
    let b = config
        .builder("payments")
        .unwrap()
        .max_attempts(7)
        .build()
        .unwrap();
    assert_eq!(b.settings().max_attempts(), 7);
    assert_eq!(
        b.settings().attempt_timeout(),
        Some(Duration::from_millis(500))
    );
}

#[test]
fn nan_and_inf_are_refused_where_they_stand_not_read_as_unset() {
    let e = err_toml(
        "[policies.db]\nmax_attempts = nan\nbreaker = { failure_rate = { multiple = inf } }\n\
         [policies.api]\nbudget = { fraction = -inf }\n",
    );
    assert_eq!(
        lines(&e),
        [
            "policies.api.budget.fraction: must be a finite number, not -inf",
            "policies.db.breaker.failure_rate.multiple: must be a finite number, not inf",
            "policies.db.max_attempts: must be a finite number, not NaN",
        ]
    );
}

#[test]
fn json_reads_as_toml_does() {
    let json = r#"{
        "presets": { "default": { "max_attempts": 4, "breaker": { "consecutive_failures": 7 } } },
        "policies": {
            "payments": { "deadline": "1.5s", "budget": false },
            "db": { "breaker": false, "backoff": { "factor": 1.5 } }
        }
    }"#;
    let policies = PolicyConfig::from_json(json).unwrap().build().unwrap();
    let p = policies.get("payments").unwrap();
    assert_eq!(p.settings().max_attempts(), 4);
    assert_eq!(p.settings().deadline(), Some(Duration::from_millis(1500)));
    assert_eq!(p.breaker().unwrap().settings().consecutive_failures(), 7);
    assert!(p.budget().is_none());
    let db = policies.get("db").unwrap();
    assert!(db.breaker().is_none());
    assert_eq!(db.settings().backoff().factor().milli(), 1500);
}

#[test]
fn every_invalid_value_is_reported_with_its_path_and_bound() {
    let e = err_toml(
        r#"
        [policies.payments]
        max_attempts = 0
        deadline = "0s"
        backoff = { factor = 0.5, base = "1m", cap = "1s" }
        breaker = { consecutive_failures = 0, half_open_probes = 99, failure_rate = { multiple = 1.0 }, recovery = { fraction = 2.0 } }
        budget = { fraction = 1.5 }

        [policies.search]
        breaker = { break_duration = "0ms", max_break = "1s" }
        "#,
    );
    assert_eq!(
        lines(&e),
        [
            "policies.payments.backoff.factor: must be at least 1",
            "policies.payments.backoff.cap: must be at least `base`",
            "policies.payments.max_attempts: must be at least 1",
            "policies.payments.deadline: must be at least 1ns",
            "policies.payments.breaker.consecutive_failures: must be at least 1",
            "policies.payments.breaker.failure_rate.multiple: must be above 1",
            "policies.payments.breaker.half_open_probes: must be at most 31",
            "policies.payments.breaker.recovery.fraction: must be above 0 and at most 1",
            "policies.payments.budget.fraction: must be at most 1",
            "policies.search.breaker.break_duration: must be at least 1ms",
        ]
    );
    // Each problem keeps the typed setting and bound.
    let first_breaker = &e.problems()[4];
    assert_eq!(
        first_breaker.setting.map(|s| s.field),
        Some(Field::ConsecutiveFailures)
    );
    // The whole error is one problem a line.
    assert_eq!(e.to_string().lines().count(), 10);
}

#[test]
fn a_preset_that_does_not_exist_or_names_a_preset_is_an_error() {
    let e = err_toml("[presets.a]\npreset = \"b\"\n[policies.x]\npreset = \"nope\"");
    assert_eq!(
        lines(&e),
        [
            "presets.a.preset: a preset cannot start from another preset",
            "policies.x.preset: names no preset (`nope`)",
        ]
    );
}

#[test]
fn unknown_keys_are_named_with_their_path() {
    for (text, path, key) in [
        (
            "[policies.p]\nmax_attempt = 3",
            "policies.p.max_attempt",
            "max_attempt",
        ),
        (
            "[policies.p]\nbreaker = { consecutive_failure = 3 }",
            "policies.p.breaker.consecutive_failure",
            "consecutive_failure",
        ),
        (
            "[policies.p]\nbreaker = { failure_rate = { multipel = 3.0 } }",
            "policies.p.breaker.failure_rate.multipel",
            "multipel",
        ),
        ("[polices.p]\nmax_attempts = 3", "polices", "polices"),
    ] {
        let e = err_toml(text);
        let p = &e.problems()[0];
        assert_eq!(p.path, path, "{e}");
        assert!(p.message.contains(&format!("unknown field `{key}`")), "{e}");
    }
}

#[test]
fn every_key_that_does_not_fit_is_reported_at_once_with_the_invalid_values() {
    let e = err_toml(
        "[presets.default]\nmax_atempts = 3\n\n\
         [policies.a]\nmax_attempt = 3\ndeadline = \"soon\"\n\
         breaker = { consecutive_failure = 3, half_open_probes = 0 }\n\n\
         [policies.b]\nbackoff = { jitter = \"lots\" }\nmax_attempts = 0\n",
    );
    let paths: Vec<&str> = e.problems().iter().map(|p| p.path.as_str()).collect();
    for path in [
        "presets.default.max_atempts",
        "policies.a.max_attempt",
        "policies.a.deadline",
        "policies.a.breaker.consecutive_failure",
        "policies.b.backoff.jitter",
        // The values that fit are still checked.
        "policies.a.breaker.half_open_probes",
        "policies.b.max_attempts",
    ] {
        assert!(paths.contains(&path), "{path} missing from\n{e}");
    }
    assert_eq!(paths.len(), 7, "{e}");
}

#[test]
fn a_document_of_nothing_but_unknown_keys_stops_at_a_bound() {
    let text: String = (0..100).map(|i| format!("key{i} = 1\n")).collect();
    let e = err_toml(&text);
    assert_eq!(e.problems().len(), 33, "{e}");
    assert_eq!(
        e.problems().last().unwrap().to_string(),
        ".: stopped after 32 keys that do not fit"
    );
}

#[test]
fn wrong_types_are_errors_at_their_path() {
    for (text, path, says) in [
        (
            "[policies.p]\nmax_attempts = \"three\"",
            "policies.p.max_attempts",
            "invalid type",
        ),
        (
            "[policies.p]\ndeadline = 250",
            "policies.p.deadline",
            "with a unit",
        ),
        (
            "[policies.p]\ndeadline = true",
            "policies.p.deadline",
            "`false` (off) or a value",
        ),
        (
            "[policies.p]\ndeadline = \"soon\"",
            "policies.p.deadline",
            "duration",
        ),
        (
            "[policies.p]\nbreaker = 3",
            "policies.p.breaker",
            "invalid type",
        ),
        (
            "[policies.p]\nmax_attempts = -1",
            "policies.p.max_attempts",
            "invalid value",
        ),
        (
            "[policies.p]\nbackoff = { jitter = \"lots\" }",
            "policies.p.backoff.jitter",
            "unknown variant",
        ),
        ("policies = 3", "policies", "invalid type"),
        ("[policies]\np = [1, 2]", "policies.p[0]", "invalid type"),
    ] {
        let e = err_toml(text);
        let p = &e.problems()[0];
        assert_eq!(p.path, path, "{e}");
        assert!(p.message.contains(says), "{text}: {e}");
    }
    assert!(err_toml("[policies.p\nmax_attempts = 1")
        .to_string()
        .starts_with(".: not a TOML document"));
    let e = PolicyConfig::from_json("{\"policies\": ").unwrap_err();
    assert!(e.to_string().starts_with(".: not a JSON document"), "{e}");
}

#[test]
fn huge_numbers_are_named_by_their_bound_not_wrapped() {
    let e = err_toml(
        r#"
        [policies.p]
        max_attempts = 9223372036854775807
        breaker = { consecutive_failures = 9223372036854775807, slow_ratio = 1e308, noise_bound = 9223372036854775807, failure_rate = { multiple = 1e300 } }
        budget = { floor_per_second = 1e300 }
        "#,
    );
    assert_eq!(
        lines(&e),
        [
            "policies.p.breaker.consecutive_failures: must be at most 1000",
            "policies.p.breaker.failure_rate.multiple: must be at most 4000000",
            "policies.p.breaker.slow_ratio: must be above 0 and at most 1",
            "policies.p.breaker.noise_bound: must be at most 1000000000000000",
            "policies.p.budget.floor_per_second: must be at most 400",
        ]
    );
    let e = err_toml("[policies.p]\ndeadline = \"9999999999999d\"");
    assert!(e.to_string().contains("longer than about 584 years"), "{e}");
    // u32::MAX attempts is a valid count: a huge one is kept, not wrapped to a small one.
    let ok = PolicyConfig::from_toml("[policies.p]\nmax_attempts = 99999999999").unwrap();
    assert_eq!(
        ok.build()
            .unwrap()
            .get("p")
            .unwrap()
            .settings()
            .max_attempts(),
        u32::MAX
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let depth = 100_000;
    let json = format!(
        "{{\"policies\": {{\"p\": {{\"breaker\": {}{}}}}}}}",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    assert!(PolicyConfig::from_json(&json).is_err());
    let toml = format!(
        "[policies.p]\nbreaker = {}{}",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    assert!(PolicyConfig::from_toml(&toml).is_err());
    let toml = format!(
        "[policies.p]\nbreaker = {}{}",
        "{ a = ".repeat(depth),
        "}".repeat(depth)
    );
    assert!(PolicyConfig::from_toml(&toml).is_err());
    let dotted = format!("{}= 1", "a.".repeat(depth));
    assert!(PolicyConfig::from_toml(&dotted).is_err());
}

#[test]
fn names_that_cannot_be_taken_are_errors() {
    let long = "x".repeat(200);
    let e = err_toml(&format!(
        "[policies.\"{long}\"]\n[policies.\" \"]\n[policies.\"a\\u0007\"]"
    ));
    let messages: Vec<&str> = e.problems().iter().map(|p| p.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "the policy's name must be not blank",
            "the policy's name must be free of control characters",
            "the policy's name must be at most 32 bytes",
        ]
    );
    let e = err_toml("[policies.a]\nbreaker = { name = \"b\" }");
    assert_eq!(
        lines(&e),
        ["policies.a.breaker.name: must be the policy's name"]
    );
}

/// Mutations of the example file: byte flips, cuts, duplications and splices of hostile
/// fragments. Every one reads, or fails with at least one problem; none panics.
#[test]
fn mutated_documents_never_panic() {
    const FRAGMENTS: &[&str] = &[
        "=",
        "[",
        "]",
        "{",
        "}",
        "\"",
        "false",
        "-1",
        "1e400",
        "\"1.5.5s\"",
        "\n[policies.x]\n",
        "breaker = ",
        "\"\u{0}\"",
        "99999999999999999999",
        ".",
        "0",
        "\"µs\"",
        "nan",
        "inf",
    ];
    let mut rng = Seeded::new(19);
    let (mut read, mut refused) = (0, 0);
    for _ in 0..3000 {
        let mut doc: Vec<u8> = EXAMPLE.as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(doc.len() as u64 + 1) as usize;
            match rng.below(4) {
                0 if at < doc.len() => doc[at] = rng.below(128) as u8,
                1 => doc.truncate(at),
                2 => {
                    let f = FRAGMENTS[rng.below(FRAGMENTS.len() as u64) as usize];
                    doc.splice(at..at, f.bytes());
                }
                _ => {
                    let end = (at + rng.below(40) as usize).min(doc.len());
                    let copy = doc[at..end].to_vec();
                    doc.splice(at..at, copy);
                }
            }
        }
        let text = String::from_utf8_lossy(&doc);
        match PolicyConfig::from_toml(&text) {
            Ok(c) => {
                read += 1;
                // What reads builds.
                c.build().unwrap();
            }
            Err(e) => {
                refused += 1;
                assert!(!e.problems().is_empty());
            }
        }
    }
    // Both kinds happened: the mutations reach the checks, not only the parser.
    assert!(
        read > 100 && refused > 100,
        "read {read}, refused {refused}"
    );
}

#[test]
fn environment_variables_set_single_values_over_the_document() {
    let vars = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let config = PolicyConfig::from_toml(EXAMPLE)
        .unwrap()
        .with_vars(
            "SG",
            vars(&[
                ("SG__POLICIES__PAYMENTS__BREAKER__CONSECUTIVE_FAILURES", "4"),
                ("SG__POLICIES__PAYMENTS__BREAKER__RECOVERY", "false"),
                ("SG__PRESETS__DEFAULT__DEADLINE", "750ms"),
                ("SG__POLICIES__NEW_ONE__BUDGET__FRACTION", "0.5"),
                ("SGX__POLICIES__PAYMENTS__MAX_ATTEMPTS", "9"),
            ]),
        )
        .unwrap();
    let policies = config.build().unwrap();
    let p = policies.get("payments").unwrap();
    assert_eq!(p.breaker().unwrap().settings().consecutive_failures(), 4);
    assert!(p.breaker().unwrap().settings().recovery().is_none());
    assert_eq!(p.settings().deadline(), Some(Duration::from_millis(750)));
    assert_eq!(p.settings().max_attempts(), 3, "another prefix is not read");
    let added = policies.get("new_one").unwrap();
    assert_eq!(added.budget().unwrap().settings().fraction().ppm(), 500_000);

    // A bad value is reported at its path like one in the document.
    let e = PolicyConfig::from_toml(EXAMPLE)
        .unwrap()
        .with_vars(
            "SG",
            vars(&[("SG__POLICIES__PAYMENTS__BREAKER__HALF_OPEN_PROBES", "0")]),
        )
        .unwrap_err();
    assert_eq!(
        lines(&e),
        ["policies.payments.breaker.half_open_probes: must be at least 1"]
    );
    let e = PolicyConfig::from_toml(EXAMPLE)
        .unwrap()
        .with_vars("SG", vars(&[("SG__POLICIES__PAYMENTS__MAX_ATEMPTS", "2")]))
        .unwrap_err();
    assert_eq!(e.problems()[0].path, "policies.payments.max_atempts");
    let e = PolicyConfig::from_toml(EXAMPLE)
        .unwrap()
        .with_vars(
            "SG",
            vars(&[("SG__POLICIES__SEARCH__MAX_ATTEMPTS__X", "2")]),
        )
        .unwrap_err();
    assert_eq!(
        lines(&e),
        ["SG__POLICIES__SEARCH__MAX_ATTEMPTS__X: sets `X` inside a value that is not a table"]
    );
    // A key the policy takes from its preset becomes a table the policy's key refuses.
    let e = PolicyConfig::from_toml(EXAMPLE)
        .unwrap()
        .with_vars(
            "SG",
            vars(&[("SG__POLICIES__PAYMENTS__MAX_ATTEMPTS__X", "2")]),
        )
        .unwrap_err();
    assert_eq!(e.problems()[0].path, "policies.payments.max_attempts");
}

#[test]
fn a_reload_swaps_call_settings_and_keeps_breaker_and_budget_state() {
    let policies = PolicyConfig::from_toml(EXAMPLE).unwrap().build().unwrap();
    let before = policies.get("payments").unwrap();
    let breaker = before.breaker().unwrap().clone();
    let budget = before.budget().unwrap().clone();
    breaker.isolate();
    let changed = EXAMPLE.replace("attempt_timeout = \"500ms\"", "attempt_timeout = \"250ms\"")
        + "\n[policies.inventory]\nmax_attempts = 2\n";
    // The reports section (the file's last) goes.
    let (kept, reports) = changed.split_once("[policies.reports]").unwrap();
    let rest = reports.split_once("[policies.inventory]").unwrap().1;
    let changed = format!("{kept}[policies.inventory]{rest}");
    let r = policies
        .reload(&PolicyConfig::from_toml(&changed).unwrap())
        .unwrap();
    assert_eq!(r.changed, ["payments"]);
    assert_eq!(r.added, ["inventory"]);
    assert_eq!(r.removed, ["reports"]);
    let after = policies.get("payments").unwrap();
    assert_eq!(
        after.settings().attempt_timeout(),
        Some(Duration::from_millis(250))
    );
    assert!(after.breaker().unwrap().same_as(&breaker));
    assert!(after.budget().unwrap().same_as(&budget));
    assert_eq!(
        after.breaker().unwrap().state(),
        State::Isolated,
        "its state is kept"
    );
    // A policy handed out before keeps what it had.
    assert_eq!(
        before.settings().attempt_timeout(),
        Some(Duration::from_millis(500))
    );
    assert!(policies.get("reports").is_none());
    assert_eq!(policies.names(), ["inventory", "payments", "search"]);
}

#[test]
fn a_reload_that_cannot_happen_live_names_every_such_field_and_changes_nothing() {
    let policies = PolicyConfig::from_toml(EXAMPLE).unwrap().build().unwrap();
    let breaker = policies.get("payments").unwrap().breaker().unwrap().clone();
    let text = EXAMPLE
        .replace(
            "consecutive_failures = 3,",
            "consecutive_failures = 4, half_open_probes = 2,",
        )
        .replace("floor_per_second = 3.0", "floor_per_second = 1.0")
        .replace("max_attempts = 2\n", "max_attempts = 3\n");
    let e = policies
        .reload(&PolicyConfig::from_toml(&text).unwrap())
        .unwrap_err();
    let got = lines(&e);
    assert!(got.contains(&"policies.payments.breaker.consecutive_failures: cannot change while running (3 to 4); build anew to apply".to_string()), "{e}");
    assert!(got.contains(&"policies.payments.breaker.half_open_probes: cannot change while running (1 to 2); build anew to apply".to_string()), "{e}");
    assert!(got.contains(&"policies.payments.budget.floor_per_second: cannot change while running (3000 to 1000); build anew to apply".to_string()), "{e}");
    assert!(
        got.iter()
            .any(|l| l.starts_with("policies.search.budget.floor_per_second")),
        "{e}"
    );
    // Nothing changed, the search policy's attempts included.
    assert_eq!(policies.get("search").unwrap().settings().max_attempts(), 2);
    assert!(policies
        .get("payments")
        .unwrap()
        .breaker()
        .unwrap()
        .same_as(&breaker));

    // Turning hedging on over a breaker that does not learn cannot happen live either.
    let policies = PolicyConfig::from_toml(
        "[policies.db]\nbreaker = { failure_rate = false, slow_calls = false }",
    )
    .unwrap()
    .build()
    .unwrap();
    let e = policies
        .reload(&PolicyConfig::from_toml("[policies.db]\nhedging = true\nbreaker = { failure_rate = false, slow_calls = false }").unwrap())
        .unwrap_err();
    assert_eq!(e.problems()[0].path, "policies.db.learn");
    assert!(!policies.get("db").unwrap().settings().hedging());
}

#[tokio::test(start_paused = true)]
async fn a_reloaded_policy_keeps_an_open_breaker_open() {
    let policies = PolicyConfig::from_toml("[policies.db]\nbreaker = { consecutive_failures = 2, failure_rate = false, slow_calls = false }\nmax_attempts = 1")
        .unwrap()
        .build()
        .unwrap();
    let db = policies.get("db").unwrap();
    for _ in 0..2 {
        let _ = db.call(|_| async { Err::<(), _>("down") }).await;
    }
    assert_eq!(db.breaker().unwrap().state(), State::Open);
    policies
        .reload(&PolicyConfig::from_toml("[policies.db]\nbreaker = { consecutive_failures = 2, failure_rate = false, slow_calls = false }\nmax_attempts = 3").unwrap())
        .unwrap();
    let db = policies.get("db").unwrap();
    assert_eq!(db.settings().max_attempts(), 3);
    assert_eq!(db.breaker().unwrap().state(), State::Open);
    let r = db.call(|_| async { Ok::<_, &str>(()) }).await;
    assert!(r.is_err(), "refused by the breaker it kept");
}

#[test]
fn a_limits_bad_values_are_reported_with_their_paths() {
    let e = err_toml(
        "[policies.p]\n\
         rate_limit = { rate = 0 }\n\
         bulkhead = { max_in_flight = 0 }\n\
         adaptive_limit = { min_limit = 10, max_limit = 5 }\n\
         [policies.q]\n\
         bulkhead = { max_queue = 4 }\n",
    );
    let got = lines(&e);
    for line in [
        "policies.p.rate_limit.rate: must be at least 1",
        "policies.p.bulkhead.max_in_flight: must be at least 1",
        "policies.q.bulkhead.max_wait: must be at least 1ns",
    ] {
        assert!(got.contains(&line.to_string()), "{line} missing from\n{e}");
    }
    assert!(
        got.iter()
            .any(|l| l.starts_with("policies.p.adaptive_limit.max_limit")),
        "{e}"
    );
    assert_eq!(got.len(), 4, "{e}");
}

#[test]
fn a_preset_gives_limits_that_a_policy_overrides_key_by_key_or_turns_off() {
    let config = PolicyConfig::from_toml(
        "[presets.default]\n\
         bulkhead = { max_in_flight = 8, max_queue = 2, max_wait = \"1s\" }\n\
         [policies.a]\n\
         bulkhead = { max_in_flight = 3 }\n\
         [policies.b]\n\
         bulkhead = false\n",
    )
    .unwrap();
    let policies = config.build().unwrap();
    let a = policies.get("a").unwrap();
    let s = a.bulkhead().unwrap().settings();
    assert_eq!((s.max_in_flight(), s.max_queue()), (3, 2));
    assert!(policies.get("b").unwrap().bulkhead().is_none());
}

#[test]
fn a_reload_keeps_a_limits_state_and_refuses_to_change_it_live() {
    let text = "[policies.p]\nbulkhead = { max_in_flight = 1 }\nmax_attempts = 2\n";
    let policies = PolicyConfig::from_toml(text).unwrap().build().unwrap();
    let before = policies.get("p").unwrap();
    let held = before
        .bulkhead()
        .unwrap()
        .shared()
        .try_enter(stormguard_std::Instant::ZERO)
        .unwrap();
    // The call settings change; the bulkhead is the same one, its slot still taken.
    let same =
        PolicyConfig::from_toml(&text.replace("max_attempts = 2", "max_attempts = 3")).unwrap();
    policies.reload(&same).unwrap();
    let after = policies.get("p").unwrap();
    assert_eq!(after.settings().max_attempts(), 3);
    assert!(after
        .bulkhead()
        .unwrap()
        .same_as(before.bulkhead().unwrap()));
    assert_eq!(after.bulkhead().unwrap().in_flight(), 1);
    before.bulkhead().unwrap().leave(held);
    // A new size cannot apply to slots already handed out.
    let bigger =
        PolicyConfig::from_toml(&text.replace("max_in_flight = 1", "max_in_flight = 2")).unwrap();
    let e = policies.reload(&bigger).unwrap_err();
    assert_eq!(
        lines(&e),
        ["policies.p.bulkhead: cannot change while running (`1 in flight, no waiting` to `2 in flight, no waiting`); build anew to apply"]
    );
    assert_eq!(policies.get("p").unwrap().settings().max_attempts(), 3);
}
