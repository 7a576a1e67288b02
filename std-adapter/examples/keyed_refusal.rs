//! What a new key costs in a full keyed table, at two capacities: in a table whose keys are all
//! open (none may be evicted), the first refusal and the mean of the refusals that follow within
//! a trip window (each call's 100 ms guarded pause included in the runtime's paused time, so 250
//! of them span 25 s); in a table whose keys are all idle, the mean of 250 new keys that each
//! make room by evicting one.
//!
//! `cargo run --release -p stormguard-std --example keyed_refusal`
//!
//! The runtime's clock is paused, so the guarded pause before each refusal takes no wall time:
//! what is measured is the table's decision and the call driver around it.
#![allow(clippy::arithmetic_side_effects, clippy::cast_precision_loss)]

use std::time::Instant;

use stormguard_std::BreakerSettings;
use stormguard_std::{Breaker, KeyedPolicy, Policy};

/// A table of `capacity` keys, every one open.
async fn full_table(capacity: u32) -> Result<KeyedPolicy<u32>, Box<dyn std::error::Error>> {
    let template = Policy::builder("hosts")
        .breaker(Breaker::new(BreakerSettings::consecutive_only("hosts", 2)?))
        .max_attempts(1)
        .no_attempt_timeout()
        .build()?;
    let hosts: KeyedPolicy<u32> = KeyedPolicy::new(template, usize::try_from(capacity)?)?;
    for key in 0..capacity {
        for _ in 0..2 {
            let _ = hosts.call(&key, |_| async { Err::<(), _>("reset") }).await;
        }
    }
    Ok(hosts)
}

/// A table of `capacity` keys, every one closed and idle (quiet for longer than a trip window).
async fn idle_table(capacity: u32) -> Result<KeyedPolicy<u32>, Box<dyn std::error::Error>> {
    let template = Policy::builder("hosts")
        .breaker(Breaker::new(BreakerSettings::consecutive_only("hosts", 2)?))
        .max_attempts(1)
        .no_attempt_timeout()
        .build()?;
    let hosts: KeyedPolicy<u32> = KeyedPolicy::new(template, usize::try_from(capacity)?)?;
    for key in 0..capacity {
        hosts.call(&key, |_| async { Ok::<_, &str>(()) }).await?;
    }
    tokio::time::advance(std::time::Duration::from_secs(3_600)).await;
    Ok(hosts)
}

/// Admits `n` new keys into a full table of idle keys; the wall time in nanoseconds per key.
async fn admit(
    hosts: &KeyedPolicy<u32>,
    from: u32,
    n: u32,
) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    for key in from..from + n {
        hosts.call(&key, |_| async { Ok::<_, &str>(()) }).await?;
    }
    Ok(started.elapsed().as_nanos() as f64 / f64::from(n))
}

/// Refuses `n` new keys; the wall time in nanoseconds per refusal.
async fn refuse(
    hosts: &KeyedPolicy<u32>,
    from: u32,
    n: u32,
) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    for key in from..from + n {
        let r = hosts.call(&key, |_| async { Ok::<_, &str>(()) }).await;
        if r.err().and_then(|e| e.keyed_refusal()).is_none() {
            return Err("a new key was not refused".into());
        }
    }
    Ok(started.elapsed().as_nanos() as f64 / f64::from(n))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    for capacity in [10_000, 100_000] {
        let (first, then) = runtime.block_on(async {
            let hosts = full_table(capacity).await?;
            let first = refuse(&hosts, capacity, 1).await?;
            let then = refuse(&hosts, capacity + 1, 250).await?;
            Ok::<_, Box<dyn std::error::Error>>((first, then))
        })?;
        let evicting = runtime.block_on(async {
            let hosts = idle_table(capacity).await?;
            admit(&hosts, capacity, 250).await
        })?;
        println!(
            "capacity {capacity:>7}: first refusal {first:>12.0} ns, then {then:>10.0} ns per refusal (mean of 250); a new key evicting an idle one {evicting:>12.0} ns (mean of 250)"
        );
    }
    Ok(())
}
