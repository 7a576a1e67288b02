//! Helpers the simulator's tests share (each test file compiles its own copy, so an unused
//! helper is no warning).
#![allow(dead_code)]

use stormguard_core::Duration;

/// `n` seconds of the core's time.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The seeds every figure the README's storm table quotes is held to.
pub const SEEDS: std::ops::RangeInclusive<u64> = 1..=10;

/// `f` of every seed in [`SEEDS`], in order, run two at a time (the tests run on two cores).
pub fn over_seeds<T: Send>(f: impl Fn(u64) -> T + Sync) -> Vec<T> {
    let seeds: Vec<u64> = SEEDS.collect();
    let (odd, even): (Vec<u64>, Vec<u64>) = seeds.iter().partition(|&&s| s % 2 == 1);
    let (a, b) = std::thread::scope(|scope| {
        let f = &f;
        let other = scope.spawn(move || even.into_iter().map(f).collect::<Vec<T>>());
        let mine: Vec<T> = odd.into_iter().map(f).collect();
        (mine, other.join().unwrap_or_else(|_| Vec::new()))
    });
    // Interleave back into seed order: 1, 2, 3, ...
    let mut out = Vec::with_capacity(seeds.len());
    let (mut a, mut b) = (a.into_iter(), b.into_iter());
    loop {
        match (a.next(), b.next()) {
            (None, None) => break,
            (x, y) => out.extend(x.into_iter().chain(y)),
        }
    }
    out
}

/// The least, median and greatest of `values` (the lower middle for an even count), for
/// messages.
pub fn spread(values: &[f64]) -> String {
    stormguard_tests::report::spread(values.to_vec()).map_or_else(
        || "none".to_string(),
        |[a, m, b]| format!("{a:.4} / {m:.4} / {b:.4}"),
    )
}
