//! The `storm` command line: what it runs, what it prints, and how it refuses bad input.
//!
//! Each run is a short built-in scenario with a small fleet, so the whole file takes well under a
//! second of simulation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss
)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Map, Value};
use stormguard_tests::{suite, Arrivals, Strategy};

/// Runs `storm` in a scratch directory, so that a chart it writes by default lands there (under
/// `target/`: the caller's `CARGO_TARGET_DIR` is not passed on).
fn storm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_storm"))
        .args(args)
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap()
}

/// A file in the scratch directory, named for the test that uses it.
fn scratch(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// The stdout of a run that must succeed.
fn stdout_of(args: &[&str]) -> String {
    let out = storm(args);
    assert!(
        out.status.success(),
        "storm {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The reports of a `--json` run.
fn reports(args: &[&str]) -> Vec<Map<String, Value>> {
    let mut all = args.to_vec();
    all.push("--json");
    let text = stdout_of(&all);
    let json: Value = serde_json::from_str(&text).unwrap();
    json.as_array()
        .unwrap_or_else(|| panic!("not an array: {text}"))
        .iter()
        .map(|r| r.as_object().unwrap().clone())
        .collect()
}

/// The stderr of a run that must fail with `code`, and print nothing on stdout.
fn refusal(args: &[&str], code: i32) -> String {
    let out = storm(args);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "storm {args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "storm {args:?} printed a result");
    stderr
}

fn num(r: &Map<String, Value>, key: &str) -> f64 {
    r[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {r:?}"))
}

/// The figures every report carries: the headline ones and one for each column of the table.
const KEYS: [&str; 27] = [
    "scenario",
    "strategy",
    "seed",
    "clients",
    "calls",
    "succeeded",
    "failed",
    "refused_locally",
    "availability",
    "load_multiplier",
    "amplification",
    "retries_per_call",
    "latency_p50_ms",
    "latency_p99_ms",
    "breaker_opens",
    "time_to_trip_ms",
    "time_to_recover_ms",
    "re_trips",
    "false_trips",
    "unprobed_attempts_while_open",
    "saturated",
    "availability_after_trigger",
    "healthy_dependency_availability",
    "calls_per_s_in_window",
    "attempts_per_s_in_window",
    "wasted_attempts",
    "dependency_recovered_ms",
];

#[test]
fn json_prints_one_report_per_scenario_and_strategy_with_every_figure() {
    let svg = scratch("cli-json.svg");
    let svg = svg.to_str().unwrap();
    let got = reports(&[
        "--scenario",
        "polling",
        "--scenario",
        "outage",
        "--clients",
        "2",
        "--svg",
        svg,
    ]);
    // In the order asked for: each scenario, then each of its strategies.
    let mut want = Vec::new();
    for s in [suite::polling().unwrap(), suite::outage().unwrap()] {
        for st in &s.strategies {
            want.push((s.name.clone(), st.name.clone()));
        }
    }
    let pairs: Vec<(String, String)> = got
        .iter()
        .map(|r| {
            let name = |k: &str| r[k].as_str().unwrap().to_string();
            (name("scenario"), name("strategy"))
        })
        .collect();
    assert_eq!(pairs, want);
    for r in &got {
        for key in KEYS {
            assert!(r.contains_key(key), "{key} missing from {r:?}");
        }
        for key in [
            "time_to_trip_ms",
            "time_to_recover_ms",
            "dependency_recovered_ms",
            "availability_after_trigger",
            "healthy_dependency_availability",
        ] {
            assert!(r[key].is_null() || r[key].is_f64(), "{key}: {:?}", r[key]);
        }
        // Every call ends one way: succeeded, failed at the dependency, refused locally, or
        // failed at once on a full pool.
        let calls = num(r, "calls");
        assert!(calls > 0.0);
        let ended = num(r, "succeeded")
            + num(r, "failed")
            + num(r, "refused_locally")
            + num(r, "saturated");
        assert_eq!(ended, calls, "{r:?}");
        let availability = num(r, "availability");
        assert!((availability - num(r, "succeeded") / calls).abs() < 1e-12);
        assert_eq!(num(r, "unprobed_attempts_while_open"), 0.0);
    }
}

#[test]
fn json_carries_the_storm_scenarios_first_with_their_recovery_and_the_healthy_dependencys_figures()
{
    // The default suite opens with the retry storm and the hang, as the table and chart do.
    let suite = suite::default_suite().unwrap();
    let names: Vec<&str> = suite.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names[..2], ["retry-storm", "hang"]);
    let svg = scratch("cli-storm-json.svg");
    let got = reports(&[
        "--scenario",
        "retry-storm",
        "--scenario",
        "hang",
        "--clients",
        "2",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let arms = |name: &str| -> Vec<String> {
        suite
            .iter()
            .find(|s| s.name == name)
            .unwrap()
            .strategies
            .iter()
            .map(|st| st.name.clone())
            .collect()
    };
    let of = |name: &str| -> Vec<&Map<String, Value>> {
        got.iter().filter(|r| r["scenario"] == name).collect()
    };
    for scenario in ["retry-storm", "hang"] {
        let strategies: Vec<String> = of(scenario)
            .iter()
            .map(|r| r["strategy"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(strategies, arms(scenario));
        assert!(strategies.contains(&"default-policy".to_string()));
        for r in of(scenario) {
            // Both triggers end within the run: the minute after them is measured.
            let after = num(r, "availability_after_trigger");
            assert!((0.0..=1.0).contains(&after), "{r:?}");
        }
    }
    // Only where the clients call a second dependency is its availability given.
    for r in of("hang") {
        let healthy = num(r, "healthy_dependency_availability");
        assert!((0.0..=1.0).contains(&healthy), "{r:?}");
    }
    assert!(of("retry-storm")
        .iter()
        .all(|r| r["healthy_dependency_availability"].is_null()));
}

/// The numbers of a table cell: its value in the cell's unit, and half its last printed digit.
fn cell(text: &str) -> Option<(f64, f64)> {
    if text == "-" {
        return None;
    }
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let decimals = digits.split_once('.').map_or(0, |(_, d)| d.len());
    let half = 0.5 * libm::pow(10.0, -(decimals as f64)) + 1e-9;
    Some((digits.parse().unwrap(), half))
}

/// Each column of the table, the report field it shows, and the field's scale to the cell's
/// unit (times are milliseconds in the JSON, seconds in the trip and recover columns), in the
/// table's order.
const COLUMNS: [(&str, &str, f64); 20] = [
    ("calls", "calls", 1.0),
    ("ok", "succeeded", 1.0),
    ("failed", "failed", 1.0),
    ("refused", "refused_locally", 1.0),
    ("full", "saturated", 1.0),
    ("avail", "availability", 1.0),
    ("after", "availability_after_trigger", 1.0),
    ("healthy", "healthy_dependency_availability", 1.0),
    ("load", "load_multiplier", 1.0),
    ("att/s", "attempts_per_s_in_window", 1.0),
    ("amp", "amplification", 1.0),
    ("retry/c", "retries_per_call", 1.0),
    ("p50", "latency_p50_ms", 1.0),
    ("p99", "latency_p99_ms", 1.0),
    ("opens", "breaker_opens", 1.0),
    ("trip", "time_to_trip_ms", 1e-3),
    ("recover", "time_to_recover_ms", 1e-3),
    ("dep-rec", "dependency_recovered_ms", 1e-3),
    ("retrip", "re_trips", 1.0),
    ("false", "false_trips", 1.0),
];

/// Checks that the table `storm args` prints shows what its JSON says, in the columns named
/// `shown` (in order).
fn table_matches_json(args: &[&str], shown: &[&str]) {
    let json = reports(args);
    let table = stdout_of(args);
    let columns: Vec<&(&str, &str, f64)> =
        COLUMNS.iter().filter(|c| shown.contains(&c.0)).collect();
    assert_eq!(columns.len(), shown.len(), "{shown:?}");
    let mut lines = table.lines().skip_while(|l| !l.starts_with("strategy "));
    let headers: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let want_headers: Vec<&str> = std::iter::once("strategy")
        .chain(columns.iter().map(|c| c.0))
        .collect();
    assert_eq!(headers, want_headers);
    for r in &json {
        let strategy = r["strategy"].as_str().unwrap();
        let row = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(strategy))
            .unwrap_or_else(|| panic!("no row for {strategy} in\n{table}"));
        let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
        assert_eq!(cells.len(), columns.len(), "{row}");
        for ((header, key, scale), text) in columns.iter().copied().zip(&cells) {
            let json_value = r[*key].as_f64().map(|v| v * scale);
            match (cell(text), json_value) {
                (None, None) => {}
                (Some((shown, half)), Some(v)) => assert!(
                    (shown - v).abs() <= half,
                    "{strategy} {header}: the table shows {text}, the JSON {v}"
                ),
                _ => panic!("{strategy} {header}: the table shows {text}, the JSON {json_value:?}"),
            }
        }
    }
}

#[test]
fn the_table_prints_the_same_figures_as_the_json() {
    // Without a pool or a second dependency, the `full` and `healthy` columns are left out.
    let everywhere: Vec<&str> = COLUMNS
        .iter()
        .map(|c| c.0)
        .filter(|h| !["full", "healthy"].contains(h))
        .collect();
    let args = ["--scenario", "polling", "--seed", "3"];
    table_matches_json(&args, &everywhere);
    // The header line says which seed and fleet ran.
    let table = stdout_of(&args);
    assert!(
        table.starts_with("== polling (seed 3, 1 client, 90 s)"),
        "{table}"
    );
    // With them, they are shown.
    let all: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();
    let svg = scratch("cli-table.svg");
    table_matches_json(
        &[
            "--scenario",
            "hang",
            "--clients",
            "2",
            "--svg",
            svg.to_str().unwrap(),
        ],
        &all,
    );
}

/// A report without its `seed`: the figures alone.
fn figures(mut r: Map<String, Value>) -> Map<String, Value> {
    r.remove("seed");
    r
}

#[test]
fn the_seed_decides_the_figures_and_the_same_seed_prints_the_same_bytes() {
    let run = |seed: &str| stdout_of(&["--scenario", "polling", "--seed", seed, "--json"]);
    assert_eq!(run("3"), run("3"), "the same seed, the same bytes");
    let three = reports(&["--scenario", "polling", "--seed", "3"]);
    let four = reports(&["--scenario", "polling", "--seed", "4"]);
    let own = reports(&["--scenario", "polling"]);
    for (a, b) in three.iter().zip(&four) {
        assert_eq!(a["seed"], 3);
        assert_eq!(b["seed"], 4);
        assert_ne!(
            figures(a.clone()),
            figures(b.clone()),
            "another seed, another run"
        );
    }
    // Without --seed, the scenario's own.
    let seed = suite::polling().unwrap().seed;
    assert!(own.iter().all(|r| r["seed"] == seed), "{own:?}");
}

#[test]
fn clients_scale_the_calls_in_proportion() {
    // Open-loop Poisson arrivals: each client makes rate x duration calls on average, so a
    // fleet of n makes n times that, give or take five standard deviations (the square root of
    // the mean).
    let outage = suite::outage().unwrap();
    let Arrivals::Poisson { rate } = outage.arrivals else {
        panic!("the outage scenario's arrivals are not Poisson")
    };
    let per_client = rate * outage.duration.as_nanos() as f64 / 1e9;
    let svg = scratch("cli-clients.svg");
    let _ = std::fs::remove_file(&svg);
    for clients in [1_u32, 3] {
        let got = reports(&[
            "--scenario",
            "outage",
            "--clients",
            &clients.to_string(),
            "--svg",
            svg.to_str().unwrap(),
        ]);
        assert_eq!(got.len(), outage.strategies.len());
        let mean = per_client * f64::from(clients);
        for r in &got {
            assert_eq!(r["clients"], clients);
            let calls = num(r, "calls");
            assert!(
                (calls - mean).abs() <= 5.0 * mean.sqrt(),
                "{clients} clients made {calls} calls, {mean} expected"
            );
        }
    }
    // A run with an impairment charts its load where --svg says.
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.contains("<svg"), "{chart}");
}

#[test]
fn a_scenario_file_runs_with_its_own_name_seed_and_fleet() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/example.toml"
    ))
    .unwrap();
    let short = example
        .replacen("duration = \"4m\"", "duration = \"20s\"", 1)
        .replacen("clients = 20", "clients = 2", 1);
    assert_ne!(short, example);
    let path = scratch("cli-short.toml");
    std::fs::write(&path, short).unwrap();
    let got = reports(&["--scenario", path.to_str().unwrap()]);
    let strategies: Vec<&str> = got
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(strategies, ["retry-x3", "retry-x3+breaker+budget", "ours"]);
    for r in &got {
        assert_eq!(r["scenario"], "payments-brownout");
        assert_eq!(r["seed"], 7);
        assert_eq!(r["clients"], 2);
        assert_eq!(r["duration_s"], 20.0);
    }
}

#[test]
fn an_unknown_scenario_is_refused_with_the_names_it_knows() {
    let stderr = refusal(&["--scenario", "no-such-scenario"], 1);
    assert!(
        stderr.contains("unknown scenario \"no-such-scenario\""),
        "{stderr}"
    );
    for s in suite::default_suite().unwrap() {
        assert!(stderr.contains(&s.name), "{} not offered: {stderr}", s.name);
    }
}

#[test]
fn a_bad_scenario_file_is_refused_naming_the_file_and_the_problem() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/example.toml"
    ))
    .unwrap();
    let cases = [
        (
            "cli-bad-value.toml",
            example.replacen("p99 = \"200ms\"", "p99 = \"10ms\"", 1),
            "dependency.p99: must be above p50",
        ),
        (
            "cli-bad-syntax.toml",
            "name = \"x\"\nduration = \n".to_string(),
            "line 2",
        ),
    ];
    for (name, text, problem) in cases {
        let path = scratch(name);
        std::fs::write(&path, text).unwrap();
        let stderr = refusal(&["--scenario", path.to_str().unwrap()], 1);
        assert!(stderr.contains(name), "the file is not named: {stderr}");
        assert!(stderr.contains(problem), "{problem:?} not in {stderr:?}");
    }
    let missing = scratch("cli-missing.toml");
    let _ = std::fs::remove_file(&missing);
    let stderr = refusal(&["--scenario", missing.to_str().unwrap()], 1);
    assert!(
        stderr.contains("cli-missing.toml") && stderr.contains("cannot read"),
        "{stderr}"
    );
}

#[test]
fn a_bad_option_is_refused_with_a_usage_error_naming_it() {
    let cases: [(&[&str], &str); 5] = [
        (&["--seed", "seven"], "--seed: \"seven\" is not a number"),
        (&["--clients", "-3"], "--clients: \"-3\" is not a number"),
        (&["--clients", "0"], "--clients: needs at least one client"),
        (&["--scenario"], "--scenario needs a value"),
        (&["--fast"], "unknown option \"--fast\""),
    ];
    for (args, message) in cases {
        let stderr = refusal(args, 2);
        assert!(stderr.contains(message), "{message:?} not in {stderr:?}");
    }
}

#[test]
fn help_exits_0_and_describes_every_option_without_running() {
    for flag in ["--help", "-h"] {
        let out = storm(&[flag]);
        assert!(out.status.success(), "{out:?}");
        assert!(out.stderr.is_empty(), "{flag} ran something: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        for option in [
            "--scenario",
            "--seed",
            "--clients",
            "--json",
            "--svg",
            "--list",
            "--explain",
            "--compare-limiters",
        ] {
            assert!(text.contains(option), "{option} not described:\n{text}");
        }
    }
}

#[test]
fn list_names_every_built_in_scenario_and_strategy() {
    let text = stdout_of(&["--list"]);
    let names: Vec<&str> = text
        .lines()
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let want: Vec<String> = suite::default_suite()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, want);
    let strategies = text
        .lines()
        .find_map(|l| l.strip_prefix("built-in strategies: "))
        .unwrap();
    assert_eq!(
        strategies.split(", ").collect::<Vec<_>>(),
        Strategy::BUILTIN
    );
}

#[test]
fn explain_describes_every_strategy_of_a_file_without_running_it() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/example.toml");
    let text = stdout_of(&["--scenario", file, "--explain"]);
    for strategy in ["retry-x3", "retry-x3+breaker+budget", "ours"] {
        assert!(
            text.lines().any(|l| l == format!("-- strategy {strategy}")),
            "{strategy} missing:\n{text}"
        );
    }
    // Explaining runs nothing: no result table.
    assert!(!text.contains("availability"), "{text}");
    // In a simulation nothing is measured before the run: each breaker and budget is said as
    // every client starts with it, never "not given".
    assert!(!text.contains("not given"), "{text}");
    let breakers = ["retry-x3+breaker+budget", "ours"].len();
    let starts = "- measured as the run starts: breaker closed, no latency baseline yet (cold)";
    assert_eq!(text.matches(starts).count(), breakers, "{text}");
    assert_eq!(
        text.matches("budget spent as the run starts: 0% (30 retries available)")
            .count(),
        breakers,
        "{text}"
    );
}

#[test]
fn a_scenario_file_that_leaves_out_what_its_figures_hinge_on_is_warned_about_before_the_run() {
    let file = scratch("cli-warned.toml");
    std::fs::write(
        &file,
        r#"
name = "fifty"
duration = "10s"
[load]
clients = 2
rate = 10
[dependency]
p50 = "20ms"
p99 = "100ms"
[[strategy]]
name = "bare"
policy = { max_attempts = 4, breaker = false, budget = false }
[[strategy]]
name = "implied"
policy = { max_attempts = 4 }
"#,
    )
    .unwrap();
    let svg = scratch("cli-warned.svg");
    let out = storm(&[
        "--scenario",
        file.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("storm: warning: fifty: "))
        .collect();
    assert_eq!(warnings.len(), 3, "{stderr}");
    assert!(
        warnings[0].contains("dependency.capacity is not set"),
        "{stderr}"
    );
    assert!(warnings[1].contains("(\"implied\"): its policy names no `breaker`"));
    assert!(warnings[2].contains("(\"implied\"): its policy names no `budget`"));
    // Before the run's progress lines.
    let first_progress = stderr.find("storm: [1/").unwrap();
    assert!(
        stderr.find("storm: warning").unwrap() < first_progress,
        "{stderr}"
    );
}

#[test]
fn explain_with_json_prints_each_strategys_explanation_as_json() {
    let text = stdout_of(&["--scenario", "outage", "--explain", "--json"]);
    let json: Value = serde_json::from_str(&text).unwrap();
    let entries = json.as_array().unwrap();
    let outage = suite::outage().unwrap();
    assert_eq!(entries.len(), outage.strategies.len());
    for (entry, strategy) in entries.iter().zip(&outage.strategies) {
        assert_eq!(entry["scenario"], "outage");
        assert_eq!(entry["strategy"], strategy.name.as_str());
        assert_eq!(entry["explain"], strategy.explain().as_str());
    }
}

#[test]
fn progress_lines_come_in_the_order_the_runs_were_asked_for() {
    let svg = scratch("cli-progress.svg");
    let out = storm(&[
        "--scenario",
        "outage",
        "--scenario",
        "polling",
        "--clients",
        "2",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let announced: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("storm: ["))
        .map(|l| {
            l.split_once("] ")
                .unwrap()
                .1
                .rsplit_once(" (")
                .unwrap()
                .0
                .to_string()
        })
        .collect();
    let mut want = Vec::new();
    for s in [suite::outage().unwrap(), suite::polling().unwrap()] {
        for st in &s.strategies {
            want.push(format!("{} / {}", s.name, st.name));
        }
    }
    assert_eq!(announced, want, "{stderr}");
}

#[test]
fn the_chart_goes_to_cargos_target_directory_when_one_is_set() {
    let dir = scratch("cli-target-dir");
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_storm"))
        .args(["--scenario", "outage", "--clients", "1"])
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .env("CARGO_TARGET_DIR", &dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let chart = std::fs::read_to_string(dir.join("storm").join("load.svg")).unwrap();
    assert!(chart.contains("<svg"));
}

#[test]
fn a_run_too_large_to_simulate_is_refused_before_it_starts() {
    // 100,000 clients at 30 calls per second for 4 minutes: 720 million calls.
    let e = refusal(&["--scenario", "outage", "--clients", "100000"], 1);
    assert!(e.contains("7.200e8 calls per strategy"), "{e}");
    assert!(e.contains("--clients"), "{e}");
    assert!(!e.contains("[1/"), "a run started: {e}");
    let file = scratch("cli-too-long.toml");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/example.toml"
    ))
    .unwrap()
    .replace("duration = \"4m\"", "duration = \"1000h\"");
    std::fs::write(&file, text).unwrap();
    let e = refusal(&["--scenario", file.to_str().unwrap()], 1);
    assert!(
        e.contains("duration: scenario \"payments-brownout\" would make about 1.800e9"),
        "{e}"
    );
}

#[test]
fn seeds_report_the_least_median_and_greatest_of_each_figure_over_the_runs() {
    let svg = scratch("cli-seeds.svg");
    let svg = svg.to_str().unwrap();
    let base = ["--scenario", "polling", "--svg", svg];
    // Each seed on its own.
    let single: Vec<Vec<Map<String, Value>>> = ["5", "6", "7"]
        .iter()
        .map(|seed| {
            let mut args = base.to_vec();
            args.extend(["--seed", seed]);
            reports(&args)
        })
        .collect();
    let mut args = base.to_vec();
    args.extend(["--seed", "5", "--seeds", "3"]);
    let spread = reports(&args);
    assert_eq!(spread.len(), single[0].len());
    for (n, s) in spread.iter().enumerate() {
        assert_eq!(s["strategy"], single[0][n]["strategy"]);
        assert_eq!(s["seeds"], serde_json::json!([5, 6, 7]));
        for key in ["calls", "availability", "latency_p99_ms", "load_multiplier"] {
            let mut each: Vec<f64> = single.iter().map(|runs| num(&runs[n], key)).collect();
            each.sort_by(f64::total_cmp);
            let got = s[key].as_object().unwrap();
            assert_eq!(num(got, "min"), each[0], "{key}");
            assert_eq!(num(got, "median"), each[1], "{key}");
            assert_eq!(num(got, "max"), each[2], "{key}");
        }
    }
    // The table prints three rows per strategy.
    let mut args = base.to_vec();
    args.extend(["--seeds", "3"]);
    let text = stdout_of(&args);
    let seed = suite::polling().unwrap().seed;
    assert!(
        text.contains(&format!("(seeds {seed} to {},", seed + 2)),
        "{text}"
    );
    let rows = ["min", "median", "max"];
    for row in rows {
        assert_eq!(
            text.lines()
                .filter(|l| l.split_whitespace().any(|w| w == row))
                .count(),
            single[0].len(),
            "{row} rows in:\n{text}"
        );
    }
    assert!(refusal(&["--seeds", "0"], 2).contains("--seeds: 0 is not from 1 to 1000"));
}

#[test]
fn a_timeline_accounts_for_every_call_second_by_second() {
    let svg = scratch("cli-timeline.svg");
    let args = [
        "--scenario",
        "outage",
        "--clients",
        "2",
        "--svg",
        svg.to_str().unwrap(),
    ];
    let strategy = "retry-x3+breaker";
    let mut with = args.to_vec();
    with.extend(["--timeline", strategy]);
    let text = stdout_of(&with);
    let (_, rest) = text
        .split_once(&format!("-- timeline of {strategy} (seed "))
        .unwrap_or_else(|| panic!("no timeline in:\n{text}"));
    let rows: Vec<Vec<&str>> = rest
        .lines()
        .skip(2)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    let outage = suite::outage().unwrap();
    assert_eq!(rows.len() as u64, outage.duration.as_secs());
    let column = |n: usize| -> u64 { rows.iter().map(|r| r[n].parse::<u64>().unwrap()).sum() };
    let report = reports(&args)
        .into_iter()
        .find(|r| r["strategy"] == strategy)
        .unwrap();
    // second, calls, ok, failed, refused, attempts, load, opens: every call ends one way.
    assert_eq!(column(1) as f64, num(&report, "calls"));
    assert_eq!(column(2) as f64, num(&report, "succeeded"));
    assert_eq!(column(3) as f64, num(&report, "failed"));
    assert_eq!(column(4) as f64, num(&report, "refused_locally"));
    assert!(num(&report, "refused_locally") > 0.0);
    for row in &rows {
        let n = |i: usize| row[i].parse::<u64>().unwrap();
        assert_eq!(n(1), n(2) + n(3) + n(4), "{row:?}");
    }
    assert_eq!(column(5) as f64, num(&report, "attempts"));
    assert_eq!(column(7) as f64, num(&report, "breaker_opens"));
    // The outage's seconds are marked, and only those.
    let impaired = rows
        .iter()
        .filter(|r| r.last() == Some(&"impaired"))
        .count();
    assert_eq!(impaired, 60, "{rest}");
    let e = refusal(&["--scenario", "outage", "--timeline", "nonesuch"], 2);
    assert!(
        e.contains("no scenario here has a strategy named \"nonesuch\""),
        "{e}"
    );
}
