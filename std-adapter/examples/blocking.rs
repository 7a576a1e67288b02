//! A blocking client: synchronous code guarded by a policy, with no async runtime.
//!
//! `cargo run -p stormguard-std --example blocking`
//!
//! A flaky dependency (here a function that fails four times in five for a while) is called in
//! a loop. The policy retries within its budget, the breaker opens after five consecutive
//! failures, and while it is open each refusal comes back after the 100 ms guarded pause, so
//! the loop cannot spin.
#![allow(clippy::arithmetic_side_effects)]

use std::time::{Duration, Instant};

use stormguard_std::{CallError, Policy};

/// The dependency: fails while `outage` lasts, then answers.
fn read_exchange_rate(started: Instant, outage: Duration) -> Result<f64, String> {
    if started.elapsed() < outage {
        Err("connection refused".into())
    } else {
        Ok(1.0842)
    }
}

fn main() -> Result<(), stormguard_std::SettingsError> {
    let policy = Policy::builder("rates")
        .breaker_with(|b| {
            b.break_duration(stormguard_std::Duration::from_millis(500))
                .jitter(false)
        })
        .deadline(Duration::from_secs(2))
        .build()?;
    let started = Instant::now();
    let outage = Duration::from_millis(900);
    for round in 1..=12 {
        let at = started.elapsed();
        match policy.call_blocking(|_attempt| read_exchange_rate(started, outage)) {
            Ok(rate) => println!("{at:>8.0?} round {round:>2}: rate {rate}"),
            Err(CallError::Rejected { rejection, .. }) => println!(
                "{at:>8.0?} round {round:>2}: refused ({}), retry after {}",
                rejection.reason, rejection.retry_after
            ),
            Err(other) => println!("{at:>8.0?} round {round:>2}: {other}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let breaker = policy.breaker().map(|b| b.state());
    println!("breaker: {breaker:?}");
    Ok(())
}
