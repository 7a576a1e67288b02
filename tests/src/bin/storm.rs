//! `storm`: runs the built-in scenarios (or yours) and prints what every strategy did to the
//! dependency. `cargo run --release --bin storm -- --help` for the options.
#![allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use stormguard_tests::{chart, compare, config, report, run, suite, Report, Scenario};

const HELP: &str = "\
storm: a deterministic fleet simulator over the real stormguard core

USAGE:
    cargo run --release --bin storm -- [OPTIONS]

OPTIONS:
    --scenario NAME|FILE   run one built-in scenario, or a scenario file (.toml); repeatable
                           (default: the whole built-in suite)
    --seed N               the seed (default: each scenario's own)
    --seeds N              run each scenario x strategy over N seeds (the seed, the seed + 1,
                           ...) and print the least, median and greatest of each figure
    --clients N            clients in the fleet (default: each scenario's own)
    --json                 print the figures as JSON (one object per scenario x strategy;
                           with --explain, each strategy's explanation)
    --svg PATH             where to write the chart (default: storm/load.svg under
                           $CARGO_TARGET_DIR, else under ./target)
    --timeline STRATEGY    also print, second by second, what that strategy did in each
                           scenario that has it (calls, successes, attempts, load, opens)
    --list                 list the built-in scenarios and strategies
    --explain              describe each strategy of the scenarios in plain text (what bounds a
                           call, its worst case, the load it can add, what is missing); no run
    --compare-limiters     compare the adaptive concurrency-limit rules (the core's and the
                           prototypes) with fixed bulkheads, on a capacity that halves and one
                           that doubles, over --seeds seeds (default 10)
    -h, --help             this text

Progress goes to stderr, results to stdout. The same seed gives the same output, byte for byte.";

/// The most seeds `--seeds` runs each scenario x strategy over.
const MAX_SEEDS: u64 = 1_000;

struct Options {
    scenarios: Vec<String>,
    seed: Option<u64>,
    seeds: u64,
    timeline: Option<String>,
    clients: Option<u32>,
    json: bool,
    svg: PathBuf,
    list: bool,
    explain: bool,
    compare: bool,
    seeds_given: bool,
}

/// `storm/load.svg` in cargo's target directory: `$CARGO_TARGET_DIR` when set, else `./target`.
fn default_svg() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("target"), PathBuf::from)
        .join("storm")
        .join("load.svg")
}

fn parse_args() -> Result<Option<Options>, String> {
    let mut o = Options {
        scenarios: Vec::new(),
        seed: None,
        seeds: 1,
        timeline: None,
        clients: None,
        json: false,
        svg: default_svg(),
        list: false,
        explain: false,
        compare: false,
        seeds_given: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--list" => o.list = true,
            "--explain" => o.explain = true,
            "--compare-limiters" => o.compare = true,
            "--scenario" => o.scenarios.push(value("--scenario")?),
            "--seed" => {
                let v = value("--seed")?;
                o.seed = Some(
                    v.parse()
                        .map_err(|_| format!("--seed: {v:?} is not a number"))?,
                );
            }
            "--timeline" => o.timeline = Some(value("--timeline")?),
            "--seeds" => {
                let v = value("--seeds")?;
                let n: u64 = v
                    .parse()
                    .map_err(|_| format!("--seeds: {v:?} is not a number"))?;
                if !(1..=MAX_SEEDS).contains(&n) {
                    return Err(format!("--seeds: {n} is not from 1 to {MAX_SEEDS}"));
                }
                o.seeds = n;
                o.seeds_given = true;
            }
            "--clients" => {
                let v = value("--clients")?;
                let n: u32 = v
                    .parse()
                    .map_err(|_| format!("--clients: {v:?} is not a number"))?;
                if n == 0 {
                    return Err("--clients: needs at least one client".to_string());
                }
                o.clients = Some(n);
            }
            "--svg" => o.svg = PathBuf::from(value("--svg")?),
            other => return Err(format!("unknown option {other:?} (try --help)")),
        }
    }
    Ok(Some(o))
}

fn scenarios(o: &Options) -> Result<Vec<Scenario>, String> {
    let all = suite::default_suite().map_err(|e| e.to_string())?;
    if o.scenarios.is_empty() {
        return Ok(all);
    }
    o.scenarios
        .iter()
        .map(|s| {
            if let Some(found) = all.iter().find(|b| &b.name == s) {
                return Ok(found.clone());
            }
            let path = PathBuf::from(s);
            if s.ends_with(".toml") || path.exists() {
                return config::load(&path).map_err(|e| e.to_string());
            }
            Err(format!(
                "unknown scenario {s:?}: expected a file or one of {}",
                all.iter()
                    .map(|b| b.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
        .collect()
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("storm: {e}");
            return ExitCode::from(2);
        }
    };
    if o.compare {
        return compare_limiters(&o);
    }
    let mut list = match scenarios(&o) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("storm: {e}");
            return ExitCode::from(1);
        }
    };
    // What a scenario file leaves out that its figures hinge on, before anything else.
    for s in &list {
        for w in &s.warnings {
            eprintln!("storm: warning: {}: {w}", s.name);
        }
    }
    if o.list {
        for s in &list {
            println!("{:18} {}", s.name, s.description);
        }
        println!();
        println!(
            "built-in strategies: {}",
            stormguard_tests::Strategy::BUILTIN.join(", ")
        );
        return ExitCode::SUCCESS;
    }
    if o.explain && o.json {
        let explained: Vec<serde_json::Value> = list
            .iter()
            .flat_map(|s| {
                s.strategies.iter().map(|strategy| {
                    serde_json::json!({
                        "scenario": s.name,
                        "strategy": strategy.name,
                        "explain": strategy.explain(),
                    })
                })
            })
            .collect();
        return match serde_json::to_string_pretty(&explained) {
            Ok(j) => {
                println!("{j}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("storm: {e}");
                ExitCode::from(1)
            }
        };
    }
    if o.explain {
        for s in &list {
            println!("== {}: {}", s.name, s.description);
            for strategy in &s.strategies {
                println!("-- strategy {}", strategy.name);
                print!("{}", strategy.explain());
            }
            println!();
        }
        return ExitCode::SUCCESS;
    }
    for s in &mut list {
        if let Some(seed) = o.seed {
            s.seed = seed;
        }
        if let Some(c) = o.clients {
            s.clients = c;
        }
        if let Err(e) = s.check_size() {
            eprintln!("storm: {e}");
            return ExitCode::from(1);
        }
    }
    if let Some(name) = &o.timeline {
        if !list
            .iter()
            .any(|s| s.strategies.iter().any(|st| &st.name == name))
        {
            eprintln!("storm: --timeline: no scenario here has a strategy named {name:?}");
            return ExitCode::from(2);
        }
    }
    let runs = run_all(&list, o.seeds);
    // The chart, the commentary and a one-seed run's figures are the first seed's.
    let reports: Vec<Vec<Report>> = runs
        .iter()
        .map(|strategies| {
            strategies
                .iter()
                .filter_map(|seeds| seeds.first().cloned())
                .collect()
        })
        .collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if o.json {
        let json = if o.seeds > 1 {
            serde_json::to_string_pretty(
                &runs
                    .iter()
                    .flatten()
                    .map(|seeds| spread_json(seeds))
                    .collect::<Vec<_>>(),
            )
        } else {
            serde_json::to_string_pretty(&reports.iter().flatten().collect::<Vec<_>>())
        };
        match json {
            Ok(j) => {
                let _ = writeln!(out, "{j}");
            }
            Err(e) => {
                eprintln!("storm: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        for ((s, rs), spread) in list.iter().zip(&reports).zip(&runs) {
            let seeds = if o.seeds > 1 {
                format!("seeds {} to {}", s.seed, s.seed.wrapping_add(o.seeds - 1))
            } else {
                format!("seed {}", s.seed)
            };
            let _ = writeln!(
                out,
                "== {} ({seeds}, {} client{}, {} s): {}",
                s.name,
                s.clients,
                if s.clients == 1 { "" } else { "s" },
                s.duration.as_secs(),
                s.description
            );
            if o.seeds > 1 {
                let _ = write!(out, "{}", report::spread_table(spread));
            } else {
                let refs: Vec<&Report> = rs.iter().collect();
                let _ = write!(out, "{}", report::table(&refs));
                for line in suite::commentary(s, rs) {
                    let _ = writeln!(out, "  {line}");
                }
            }
            if let Some(r) = rs.iter().find(|r| Some(&r.strategy) == o.timeline.as_ref()) {
                let _ = writeln!(out, "-- timeline of {} (seed {}):", r.strategy, r.seed);
                let _ = write!(out, "{}", report::timeline(r));
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(out, "{}", report::LEGEND);
    }
    let charted = chart::charted(&list, &reports);
    if !charted.is_empty() {
        let written = chart::svg(&charted).and_then(|svg| {
            if let Some(dir) = o.svg.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            }
            std::fs::write(&o.svg, svg).map_err(|e| e.to_string())
        });
        match written {
            Ok(()) => eprintln!("storm: chart written to {}", o.svg.display()),
            Err(e) => {
                eprintln!("storm: cannot write the chart to {}: {e}", o.svg.display());
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}

/// Runs every scenario x strategy over `seeds` seeds (the scenario's, then the next ones), spread
/// over the machine's cores; results in input order, indexed by scenario, strategy and seed.
/// Progress lines come in input order too: a finished run waits for those listed before it.
fn run_all(list: &[Scenario], seeds: u64) -> Vec<Vec<Vec<Report>>> {
    let jobs: Vec<Job> = list
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            (0..s.strategies.len()).flat_map(move |j| (0..seeds).map(move |k| (i, j, k)))
        })
        .collect();
    let finished: Mutex<Finished> = Mutex::new(Finished {
        reports: vec![None; jobs.len()],
        took: vec![0.0; jobs.len()],
        announced: 0,
    });
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(i, j, k)) = jobs.get(n) else { break };
                let s = &list[i];
                let started = std::time::Instant::now();
                let r = run(s, &s.strategies[j], s.seed.wrapping_add(k));
                let took = started.elapsed().as_secs_f64();
                if let Ok(mut f) = finished.lock() {
                    f.reports[n] = Some(r);
                    f.took[n] = took;
                    f.announce(list, &jobs, seeds);
                }
            });
        }
    });
    let mut flat = finished
        .into_inner()
        .map(|f| f.reports)
        .unwrap_or_default()
        .into_iter();
    list.iter()
        .map(|s| {
            (0..s.strategies.len())
                .map(|_| (0..seeds).filter_map(|_| flat.next().flatten()).collect())
                .collect()
        })
        .collect()
}

/// `--compare-limiters`: every rule and bulkhead of [`compare::scenarios`] over the seeds, and
/// the two comparison tables.
fn compare_limiters(o: &Options) -> ExitCode {
    let list = match compare::scenarios() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("storm: {e}");
            return ExitCode::from(1);
        }
    };
    let seeds = if o.seeds_given { o.seeds } else { 10 };
    let runs = run_all(&list, seeds);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for ((s, arms), table) in list
        .iter()
        .zip(&runs)
        .zip([compare::halves_table, compare::doubles_table])
    {
        let _ = writeln!(
            out,
            "== {} (seeds {} to {}): {}",
            s.name,
            s.seed,
            s.seed.wrapping_add(seeds - 1),
            s.description
        );
        let _ = write!(out, "{}", table(arms));
        let _ = writeln!(out);
    }
    ExitCode::SUCCESS
}

/// One run: a scenario, one of its strategies, and which of the seeds.
type Job = (usize, usize, u64);

/// The runs done so far, and how many of them have been announced on stderr.
struct Finished {
    reports: Vec<Option<Report>>,
    took: Vec<f64>,
    announced: usize,
}

impl Finished {
    /// Announces every finished run not yet announced whose predecessors all are.
    fn announce(&mut self, list: &[Scenario], jobs: &[Job], seeds: u64) {
        while let Some(Some(r)) = self.reports.get(self.announced) {
            let (i, j, _) = jobs[self.announced];
            let seed = if seeds > 1 {
                format!(" / seed {}", r.seed)
            } else {
                String::new()
            };
            eprintln!(
                "storm: [{}/{}] {} / {}{seed} ({:.2} s)",
                self.announced + 1,
                jobs.len(),
                list[i].name,
                list[i].strategies[j].name,
                self.took[self.announced]
            );
            self.announced += 1;
        }
    }
}

/// Each scenario x strategy's figures over its seeds, as JSON: the least, median and greatest
/// of every number (over the runs where it is not `null`), names as they are, and the seeds.
fn spread_json(runs: &[Report]) -> serde_json::Value {
    let values: Vec<serde_json::Value> = runs
        .iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .collect();
    let mut out = serde_json::Map::new();
    let Some(first) = values.first().and_then(|v| v.as_object()) else {
        return serde_json::Value::Object(out);
    };
    for (key, value) in first {
        let all: Vec<&serde_json::Value> = values.iter().filter_map(|v| v.get(key)).collect();
        let numbers: Vec<f64> = all.iter().filter_map(|v| v.as_f64()).collect();
        let entry = if key == "seed" {
            serde_json::json!(runs.iter().map(|r| r.seed).collect::<Vec<_>>())
        } else if value.is_string() {
            value.clone()
        } else if numbers.is_empty() && all.iter().all(|v| v.is_null()) {
            serde_json::Value::Null
        } else if let Some([min, median, max]) = report::spread(numbers) {
            serde_json::json!({ "min": min, "median": median, "max": max })
        } else {
            // Lists and maps (the fault window, opens by reason): the first seed's.
            value.clone()
        };
        out.insert(
            if key == "seed" {
                "seeds".to_string()
            } else {
                key.clone()
            },
            entry,
        );
    }
    serde_json::Value::Object(out)
}
