//! The comparison of adaptive concurrency-limit rules (`storm --compare-limiters`): the core's
//! rule and the prototypes of [`crate::limiters`], against fixed bulkheads, on a dependency
//! whose capacity halves and on one whose capacity doubles, over several seeds.
//!
//! What a default that needs no tuning must do, on every seed:
//! - capacity halves (the built-in [`suite::capacity_halves`]): serve at least as many calls as
//!   the best fixed bulkhead, with no breaker open, and hold the dependency's p99 in the drop
//!   within twice its healthy p99;
//! - capacity doubles ([`capacity_doubles`]): grow to use the new capacity, serving at least
//!   1.8 times what a bulkhead sized for the half serves once it has doubled.

use stormguard_core::{
    limits::AdaptiveLimitSettings, limits::BulkheadSettings, Duration, Multiple, SettingsError,
};

use crate::limiters::Rule;
use crate::model::{Dependency, Impairment};
use crate::report::{spread, Report};
use crate::scenario::{Arrivals, Scenario, Strategy, DEPENDENCY};
use crate::suite;

/// The fixed bulkhead sizes the capacity-halves comparison sweeps for the best.
pub const BULKHEADS: [u32; 8] = [12, 14, 16, 18, 20, 22, 25, 30];

/// When the doubled capacity starts in [`capacity_doubles`], in seconds.
pub const DOUBLES_AT: usize = 30;

/// One gateway client offering 900 calls per second (what 20 calls at once serve) to a
/// dependency that serves 10 at once for 30 s, then 20 for 60 s: a limit learned on the half
/// must grow to use the whole.
pub fn capacity_doubles() -> Result<Scenario, SettingsError> {
    // A built-in's name: never `None`.
    let base = Strategy::builtin("retry-x3+breaker+budget").ok_or(SettingsError {
        field: stormguard_core::Field::Name,
        bound: stormguard_core::Bound::NotBlank,
    })??;
    Ok(Scenario {
        name: "capacity-doubles".to_string(),
        description:
            "the dependency serves 10 at once for 30 s, then 20 for 60 s; 900 calls/s offered"
                .to_string(),
        seed: 1,
        duration: Duration::from_secs(90),
        clients: 1,
        arrivals: Arrivals::Poisson { rate: 900.0 },
        dependency: Dependency::healthy(Duration::from_millis(20), Duration::from_millis(60))
            .capacity(20.0)
            .with(Impairment::CapacityDrop {
                at: Duration::ZERO,
                lasting: Duration::from_secs(DOUBLES_AT as u64),
                to: 0.5,
            }),
        healthy: None,
        pool: None,
        strategies: vec![base],
        warnings: Vec::new(),
    })
}

/// The rules compared: the core's with its defaults and with the hand-picked 1.4x tolerance,
/// the two prototypes with theirs, and the Vegas rule told to keep a longer queue.
pub fn rules() -> Result<Vec<(String, Rule)>, SettingsError> {
    let tuned = AdaptiveLimitSettings::builder_named(DEPENDENCY)
        .latency_tolerance(Multiple::from_milli(1_400))
        .build()?;
    Ok(vec![
        (
            "core".to_string(),
            Rule::Core(AdaptiveLimitSettings::builder_named(DEPENDENCY).build()?),
        ),
        ("core-1.4x".to_string(), Rule::Core(tuned)),
        ("gradient".to_string(), Rule::gradient()),
        ("vegas".to_string(), Rule::vegas()),
        // The same rule told to keep a longer queue: what the last calls cost in latency.
        (
            "vegas-5x9".to_string(),
            Rule::Vegas {
                bounds: AdaptiveLimitSettings::default(),
                alpha: 5.0,
                beta: 9.0,
            },
        ),
    ])
}

/// `base` (retry x3, breaker and budget) behind a bulkhead of `slots`.
pub fn bulkheaded(base: &Strategy, slots: u32) -> Result<Strategy, SettingsError> {
    let mut s = base.clone();
    s.name = format!("bulkhead{slots}");
    s.layers[0].bulkhead = Some(
        BulkheadSettings::builder_named(DEPENDENCY)
            .max_in_flight(slots)
            .build()?,
    );
    Ok(s)
}

/// `base` (retry x3, breaker and budget) behind an adaptive limiter following `rule`.
#[must_use]
pub fn limited(base: &Strategy, name: &str, rule: Rule) -> Strategy {
    let mut s = base.clone();
    s.name = name.to_string();
    s.layers[0].limit_rule = Some(rule);
    s
}

/// The two comparisons' scenarios, each with its arms: every rule, and the fixed bulkheads
/// (the sweep on the halving capacity; the half's and the whole's on the doubling one).
pub fn scenarios() -> Result<Vec<Scenario>, SettingsError> {
    let mut halves = suite::capacity_halves()?;
    let base = halves.strategies[0].clone();
    let mut arms = Vec::new();
    for slots in BULKHEADS {
        arms.push(bulkheaded(&base, slots)?);
    }
    for (name, rule) in rules()? {
        arms.push(limited(&base, &name, rule));
    }
    halves.strategies = arms;
    let mut doubles = capacity_doubles()?;
    let base = doubles.strategies[0].clone();
    let mut arms = vec![bulkheaded(&base, 10)?, bulkheaded(&base, 20)?];
    for (name, rule) in rules()? {
        arms.push(limited(&base, &name, rule));
    }
    doubles.strategies = arms;
    Ok(vec![halves, doubles])
}

/// The dependency's p99 over the fault window against its healthy p99 (before the window, or
/// for the doubling capacity, whose window is its start, after it).
#[must_use]
pub fn p99_ratio(r: &Report) -> Option<f64> {
    Some(r.served_p99_in_window_ms? / r.served_p99_before_ms?)
}

/// Calls served once the capacity has doubled (begun from [`DOUBLES_AT`] on).
#[must_use]
pub fn served_doubled(r: &Report) -> u64 {
    r.successes_between(DOUBLES_AT, usize::MAX)
}

/// Whether a run meets the latency goal: no breaker opened, and the dependency's p99 in the
/// drop within twice its healthy p99.
#[must_use]
pub fn within_goal(r: &Report) -> bool {
    r.breaker_opens == 0 && p99_ratio(r).is_some_and(|x| x <= 2.0)
}

/// Per seed, the most calls a fixed bulkhead served: of every size swept (`any`), and of those
/// that met the latency goal on that seed (`within`). `runs[arm][seed]`.
#[must_use]
pub fn best_bulkheads(runs: &[Vec<Report>]) -> (Vec<u64>, Vec<u64>) {
    let seeds = runs.first().map_or(0, Vec::len);
    let best = |goal: bool| -> Vec<u64> {
        (0..seeds)
            .map(|k| {
                runs.iter()
                    .map(|r| &r[k])
                    .filter(|r| r.strategy.starts_with("bulkhead") && (!goal || within_goal(r)))
                    .map(|r| r.succeeded)
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    };
    (best(false), best(true))
}

/// The comparison table of the halving capacity: for each arm, over its seeds, the least,
/// median and greatest calls served, breaker opens, and the dependency's p99 in the drop over
/// its healthy p99; and on how many seeds the arm served at least as many calls as the best
/// fixed bulkhead of the same seed, of every size and of those that met the latency goal
/// there (no open, the dependency's p99 within 2x). `runs[arm][seed]`.
#[must_use]
pub fn halves_table(runs: &[Vec<Report>]) -> String {
    let seeds = runs.first().map_or(0, Vec::len);
    let (any, within) = best_bulkheads(runs);
    let mut out = String::from(
        "arm          served (min / median / max)  opens      dep p99 / healthy   >= best bulkhead  >= best within 2x p99  worst gap to it\n",
    );
    for arm in runs {
        let Some(first) = arm.first() else { continue };
        let served = three(arm.iter().map(|r| r.succeeded as f64), 0);
        let opens = three(arm.iter().map(|r| r.breaker_opens as f64), 0);
        let p99 = three(arm.iter().filter_map(p99_ratio), 2);
        let wins = |best: &[u64]| {
            arm.iter()
                .zip(best)
                .filter(|(r, b)| r.succeeded >= **b)
                .count()
        };
        let gap = arm
            .iter()
            .zip(&within)
            .map(|(r, b)| r.succeeded as i64 - *b as i64)
            .min()
            .unwrap_or(0);
        out.push_str(&format!(
            "{:<12} {served:<28} {opens:<10} {p99:<19} {:>5}/{seeds:<11} {:>5}/{seeds:<15} {gap:+}\n",
            first.strategy,
            wins(&any),
            wins(&within),
        ));
    }
    out
}

/// The comparison table of the doubling capacity: for each arm, over its seeds, the calls
/// served once the capacity doubled, their multiple of the half-sized bulkhead's (bulkhead10)
/// on the same seed, and breaker opens. `runs[arm][seed]`.
#[must_use]
pub fn doubles_table(runs: &[Vec<Report>]) -> String {
    let half: Vec<u64> = runs
        .iter()
        .find(|r| r.first().is_some_and(|r| r.strategy == "bulkhead10"))
        .map(|r| r.iter().map(served_doubled).collect())
        .unwrap_or_default();
    let mut out =
        String::from("arm          served after it doubles         x bulkhead10         opens\n");
    for arm in runs {
        let Some(first) = arm.first() else { continue };
        let served = three(arm.iter().map(|r| served_doubled(r) as f64), 0);
        let times = three(
            arm.iter()
                .zip(&half)
                .map(|(r, h)| served_doubled(r) as f64 / (*h).max(1) as f64),
            2,
        );
        let opens = three(arm.iter().map(|r| r.breaker_opens as f64), 0);
        out.push_str(&format!(
            "{:<12} {served:<31} {times:<20} {opens}\n",
            first.strategy
        ));
    }
    out
}

/// "least / median / greatest" of `values` with `decimals`.
fn three(values: impl Iterator<Item = f64>, decimals: usize) -> String {
    spread(values.collect()).map_or_else(
        || "-".to_string(),
        |[a, m, b]| format!("{a:.decimals$} / {m:.decimals$} / {b:.decimals$}"),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use crate::run;

    #[test]
    fn each_table_has_a_row_per_arm_and_counts_its_seeds() {
        // Short runs: what is checked is the tables' shape and their counting, not the rules.
        let mut list = scenarios().unwrap();
        for s in &mut list {
            s.duration = Duration::from_secs(40);
        }
        let runs: Vec<Vec<Vec<Report>>> = list
            .iter()
            .map(|s| {
                s.strategies
                    .iter()
                    .map(|st| (1..=2).map(|k| run(s, st, k)).collect())
                    .collect()
            })
            .collect();
        let halves = halves_table(&runs[0]);
        let doubles = doubles_table(&runs[1]);
        for (table, scenario) in [(&halves, &list[0]), (&doubles, &list[1])] {
            assert_eq!(
                table.lines().count(),
                scenario.strategies.len() + 1,
                "{table}"
            );
            for st in &scenario.strategies {
                assert!(
                    table
                        .lines()
                        .any(|l| l.split_whitespace().next() == Some(&st.name)),
                    "{} missing from\n{table}",
                    st.name
                );
            }
        }
        // The best bulkhead of a seed serves at least as much as itself: its row counts 2/2
        // in the column of every size.
        let (any, within) = best_bulkheads(&runs[0]);
        assert_eq!(any.len(), 2);
        assert!(any.iter().zip(&within).all(|(a, w)| a >= w));
        let best_row = runs[0]
            .iter()
            .find(|arm| arm.iter().zip(&any).all(|(r, b)| r.succeeded == *b))
            .map(|arm| arm[0].strategy.clone());
        if let Some(name) = best_row {
            let line = halves.lines().find(|l| l.starts_with(&name)).unwrap();
            assert!(line.contains("2/2"), "{line}");
        }
        // The half-sized bulkhead is 1.00x itself.
        let line = doubles
            .lines()
            .find(|l| l.starts_with("bulkhead10"))
            .unwrap();
        assert!(line.contains("1.00 / 1.00 / 1.00"), "{line}");
    }
}
