//! Throughput of `policy.call` on a multi-threaded tokio runtime, beside `failsafe` and
//! `recloser`, with tasks sharing one breaker.
//!
//! `cargo bench -p stormguard-std --features quanta --bench throughput` (the bench needs
//! `quanta`; `tokio` is on by default); add `-- --quick` for a shorter run, or a filter such as
//! `-- "8 tasks"`.
//!
//! One runtime, with as many workers as `std::thread::available_parallelism` reports. For N of
//! 1, 2, 4 and 8, N spawned tasks share one breaker (one `Policy` behind an `Arc`, or one handle
//! of a peer's breaker) and each awaits its share of the calls around a ready future, one after
//! the other. The wall time from the first spawn until every task is joined, divided by the
//! number of calls, is the time per call criterion reports; its throughput line (`elem/s`) is
//! calls per second. A call around a ready future never waits, so a task keeps its worker until
//! its share is done: with more tasks than workers, the others queue behind it.
//! Measured, each breaker opening after 5 consecutive failures where it can:
//! - the bare future, no breaker (the floor);
//! - `policy.call` with the default rules (breaker + budget) and `QuantaClock`;
//! - `policy.call` with a consecutive-only breaker and `QuantaClock`;
//! - `policy.call` with the default rules and the default clock (the TSC, as `QuantaClock`),
//!   and with `TokioClock` (what the default clock reads in paused time);
//! - `failsafe`'s futures circuit breaker, `consecutive_failures(5, ..)`;
//! - `recloser`'s `AsyncRecloser`, opening when the last 5 calls all failed (its ring buffer
//!   of 5 at a failure rate of 100%).
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use failsafe::futures::CircuitBreaker as _;
use stormguard_core::BreakerSettings;
use stormguard_std::clock::QuantaClock;
use stormguard_std::{Breaker, Clock, Policy};
use tokio::runtime::Runtime;

/// How many tasks share the breaker.
const TASKS: [usize; 4] = [1, 2, 4, 8];

/// Splits `iters` calls among `tasks` tasks spawned on `rt`, each running `run` on its own
/// handle of `shared`; the wall time from the first spawn until all are joined.
fn split_calls<S, F, Fut>(
    rt: &Runtime,
    tasks: usize,
    iters: u64,
    shared: &S,
    run: &F,
) -> StdDuration
where
    S: Clone,
    F: Fn(S, u64) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let n = u64::try_from(tasks).unwrap();
    let (each, rest) = (iters / n, iters % n);
    // Futures do nothing until polled: made here, outside the timed part.
    let shares: Vec<Fut> = (0..n)
        .map(|i| run(shared.clone(), each + u64::from(i < rest)))
        .collect();
    rt.block_on(async {
        let start = StdInstant::now();
        let handles: Vec<_> = shares.into_iter().map(tokio::spawn).collect();
        for handle in handles {
            handle.await.unwrap();
        }
        start.elapsed()
    })
}

/// One variant at every task count: `run(handle, calls)` makes `calls` calls in a row.
fn at_each_count<S, F, Fut>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    label: &str,
    shared: S,
    run: F,
) where
    S: Clone,
    F: Fn(S, u64) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    for tasks in TASKS {
        let id = BenchmarkId::new(label, format!("{tasks} tasks"));
        group.bench_function(id, |b| {
            b.iter_custom(|iters| split_calls(rt, tasks, iters, &shared, &run))
        });
    }
}

async fn policy_calls<K>(policy: Arc<Policy<K>>, calls: u64)
where
    K: Clock,
{
    for _ in 0..calls {
        let _ = black_box(policy.call(|_| async { Ok::<u32, ()>(black_box(1)) }).await);
    }
}

fn shared_breaker(c: &mut Criterion) {
    let workers = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("throughput");
    group.throughput(Throughput::Elements(1));

    at_each_count(&mut group, &rt, "bare future", (), |(), calls| async move {
        for _ in 0..calls {
            let _ = black_box(async { Ok::<u32, ()>(black_box(1)) }.await);
        }
    });

    let defaults = Policy::builder("bench")
        .clock(QuantaClock::global())
        .build()
        .unwrap();
    at_each_count(
        &mut group,
        &rt,
        "policy, quanta, default rules",
        Arc::new(defaults),
        policy_calls,
    );
    let consecutive = Policy::builder("bench")
        .breaker(Breaker::new(
            BreakerSettings::consecutive_only("bench", 5).unwrap(),
        ))
        .clock(QuantaClock::global())
        .build()
        .unwrap();
    at_each_count(
        &mut group,
        &rt,
        "policy, quanta, consecutive-only breaker",
        Arc::new(consecutive),
        policy_calls,
    );
    // Built outside the runtime, as a service builds its policies at start-up.
    let default_clock = Policy::builder("bench").build().unwrap();
    at_each_count(
        &mut group,
        &rt,
        "policy, default clock, default rules",
        Arc::new(default_clock),
        policy_calls,
    );
    let tokio_clock = Policy::builder("bench")
        .clock(stormguard_std::clock::TokioClock::global())
        .build()
        .unwrap();
    at_each_count(
        &mut group,
        &rt,
        "policy, TokioClock, default rules",
        Arc::new(tokio_clock),
        policy_calls,
    );

    let failsafe = failsafe::Config::new()
        .failure_policy(failsafe::failure_policy::consecutive_failures(
            5,
            failsafe::backoff::constant(StdDuration::from_secs(30)),
        ))
        .build();
    at_each_count(
        &mut group,
        &rt,
        "failsafe",
        failsafe,
        |breaker, calls| async move {
            for _ in 0..calls {
                let _ = black_box(breaker.call(async { Ok::<u32, ()>(black_box(1)) }).await);
            }
        },
    );
    let recloser = recloser::AsyncRecloser::from(
        recloser::Recloser::custom()
            .closed_len(5)
            .error_rate(1.0)
            .build(),
    );
    at_each_count(
        &mut group,
        &rt,
        "recloser",
        recloser,
        |breaker, calls| async move {
            for _ in 0..calls {
                let _ = black_box(breaker.call(async { Ok::<u32, ()>(black_box(1)) }).await);
            }
        },
    );
    group.finish();
}

fn quick() -> Criterion {
    Criterion::default()
        .warm_up_time(StdDuration::from_millis(300))
        .measurement_time(StdDuration::from_secs(1))
        .sample_size(10)
}

criterion_group! {
    name = throughput;
    config = quick();
    targets = shared_breaker
}
criterion_main!(throughput);
