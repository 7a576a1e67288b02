//! The cost of the call path, beside an `AtomicU64::fetch_add` measured in the same run.
//!
//! `cargo bench -p stormguard-core` — figures are reported as ratios to `fetch_add`; time is
//! synthetic (an instant advanced by 1 us per operation), so no clock read is measured.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use criterion::{criterion_group, criterion_main, Criterion};
use stormguard_core::{
    Breaker, BreakerSettings, Budget, BudgetSettings, Duration, Instant, Outcome, SharedBreaker,
    SharedBudget,
};

const STEP: Duration = Duration::from_micros(1);

fn consecutive_only() -> BreakerSettings {
    BreakerSettings::consecutive_only("bench", 5).unwrap()
}

fn defaults() -> BreakerSettings {
    BreakerSettings::defaults("bench")
}

/// The synthetic instant of the `i`-th operation of a two-thread run: 1 us apart in the order
/// the operations are numbered, so each thread's clock moves forward and the two move at the
/// pace of their threads, as real clocks read per thread would. Each thread computes it on its
/// own: a shared counter would add a contended write of its own to every operation (the figure
/// being measured would then include a two-thread `fetch_add`).
fn tick(i: u64) -> Instant {
    Instant::from_secs(1) + Duration::from_nanos(i * 1_000)
}

/// Runs `op` on two threads at once, `iters` times each; returns the wall time per operation
/// of one thread (what each caller experiences under contention).
fn two_threads(iters: u64, op: impl Fn(u64) + Sync) -> StdDuration {
    let start = StdInstant::now();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let op = &op;
            s.spawn(move || {
                for i in 0..iters {
                    op(i * 2 + t);
                }
            });
        }
    });
    start.elapsed()
}

fn baseline(c: &mut Criterion) {
    let counter = AtomicU64::new(0);
    c.bench_function("baseline/fetch_add", |b| {
        b.iter(|| black_box(counter.fetch_add(1, Ordering::AcqRel)))
    });
    c.bench_function("baseline/fetch_add 2 threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |_| {
                black_box(counter.fetch_add(1, Ordering::AcqRel));
            })
        })
    });
}

fn closed_path(c: &mut Criterion) {
    for (label, settings) in [
        ("consecutive-only", consecutive_only()),
        ("full defaults", defaults()),
    ] {
        let mut local = Breaker::new(settings);
        let mut now = Instant::from_secs(1);
        c.bench_function(&format!("breaker &mut/{label}/acquire+success"), |b| {
            b.iter(|| {
                now += STEP;
                let p = local.try_acquire(black_box(now)).unwrap();
                local.on_outcome(now, p, Outcome::Success, &mut |_| {});
            })
        });
        let shared = SharedBreaker::new(settings);
        let mut now = Instant::from_secs(1);
        c.bench_function(&format!("breaker shared/{label}/acquire+success"), |b| {
            b.iter(|| {
                now += STEP;
                let p = shared
                    .try_acquire(black_box(now), None, &mut |_| {})
                    .unwrap();
                shared.on_outcome(now, p, Outcome::Success, &mut |_| {});
            })
        });
        c.bench_function(
            &format!("breaker shared/{label}/acquire+success 2 threads"),
            |b| {
                b.iter_custom(|iters| {
                    two_threads(iters, |i| {
                        let now = tick(i);
                        let p = shared
                            .try_acquire(black_box(now), None, &mut |_| {})
                            .unwrap();
                        shared.on_outcome(now, p, Outcome::Success, &mut |_| {});
                    })
                })
            },
        );
    }
}

fn open_path(c: &mut Criterion) {
    let t = Instant::from_secs(1);
    let mut local = Breaker::new(defaults());
    let shared = SharedBreaker::new(defaults());
    for _ in 0..5 {
        let p = local.try_acquire(t).unwrap();
        local.on_outcome(t, p, Outcome::Transient, &mut |_| {});
        let p = shared.try_acquire(t, None, &mut |_| {}).unwrap();
        shared.on_outcome(t, p, Outcome::Transient, &mut |_| {});
    }
    c.bench_function("breaker &mut/refused while open", |b| {
        b.iter(|| black_box(local.try_acquire(black_box(t)).unwrap_err()))
    });
    c.bench_function("breaker shared/refused while open", |b| {
        b.iter(|| {
            black_box(
                shared
                    .try_acquire(black_box(t), None, &mut |_| {})
                    .unwrap_err(),
            )
        })
    });
}

fn budget(c: &mut Criterion) {
    let mut local = Budget::new(BudgetSettings::defaults("bench"));
    let shared = SharedBudget::new(BudgetSettings::defaults("bench"));
    let mut now = Instant::from_secs(1);
    c.bench_function("budget &mut/deposit", |b| {
        b.iter(|| {
            now += STEP;
            local.on_outcome(black_box(now), Outcome::Success);
        })
    });
    c.bench_function("budget &mut/withdraw", |b| {
        b.iter(|| {
            now += STEP;
            black_box(local.try_withdraw(black_box(now)).is_ok());
        })
    });
    c.bench_function("budget shared/deposit", |b| {
        b.iter(|| {
            now += STEP;
            shared.on_outcome(black_box(now), Outcome::Success);
        })
    });
    c.bench_function("budget shared/withdraw", |b| {
        b.iter(|| {
            now += STEP;
            black_box(shared.try_withdraw(black_box(now)).is_ok());
        })
    });
    c.bench_function("budget shared/deposit 2 threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |i| {
                let now = tick(i);
                shared.on_outcome(black_box(now), Outcome::Success);
            })
        })
    });
    c.bench_function("budget shared/withdraw 2 threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |i| {
                let now = tick(i);
                black_box(shared.try_withdraw(black_box(now)).is_ok());
            })
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(StdDuration::from_millis(500))
        .measurement_time(StdDuration::from_secs(2));
    targets = baseline, closed_path, open_path, budget
}
criterion_main!(benches);
