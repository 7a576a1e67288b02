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

use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// The lane hint of the shared breakers: each thread numbered at its first call, as the std
/// adapter's `lane_hint` does.
fn this_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static LANE: Cell<usize> = const { Cell::new(usize::MAX) });
    LANE.with(|lane| match lane.get() {
        usize::MAX => {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            lane.set(n);
            n
        }
        n => n,
    })
}

/// The synthetic instant of the `i`-th operation of the threaded runs: 1 us apart in the order
/// the operations are numbered, so each thread's clock moves forward and the threads' move at
/// their pace, as real clocks read per thread would. Each thread computes it on its own: a
/// shared counter would add a contended write of its own to every operation (the figure being
/// measured would then include a two-thread `fetch_add`).
fn tick(i: u64) -> Instant {
    Instant::from_secs(1) + Duration::from_nanos(i * 1_000)
}

/// The number of the first operation of a run of `ops`: each run numbers its operations after
/// the last run's, so time never steps back between a benchmark's samples.
fn first_op(ops: u64) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(ops, Ordering::Relaxed)
}

/// Runs `op` on two threads at once, `iters` times each; returns the wall time per operation
/// of one thread (what each caller experiences under contention).
fn two_threads(iters: u64, op: impl Fn(u64) + Sync) -> StdDuration {
    let first = first_op(iters * 2);
    let start = StdInstant::now();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let op = &op;
            s.spawn(move || {
                for i in 0..iters {
                    op(first + i * 2 + t);
                }
            });
        }
    });
    start.elapsed()
}

/// The time the calling thread has spent on a CPU (`CLOCK_THREAD_CPUTIME_ID`).
fn on_cpu() -> Option<StdDuration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Some(StdDuration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

/// Runs `op` on `threads` threads at once, `iters` times each, and returns the time each
/// thread spent on a CPU, averaged over the threads: what an operation costs under the
/// contention of the others, without the time a thread waited for a core. On a machine whose
/// cores are busy with other work, the wall time of [`two_threads`] counts that waiting too;
/// this does not. Falls back to the wall time where the on-CPU time cannot be read.
fn on_cpu_threads(threads: u64, iters: u64, op: impl Fn(u64) + Sync) -> StdDuration {
    let first = first_op(iters * threads);
    let start = StdInstant::now();
    let spent: Vec<Option<StdDuration>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let op = &op;
                s.spawn(move || {
                    let before = on_cpu();
                    for i in 0..iters {
                        op(first + i * threads + t);
                    }
                    Some(on_cpu()?.saturating_sub(before?))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = start.elapsed();
    let total: Option<StdDuration> = spent.into_iter().sum();
    total.map_or(wall, |t| t / u32::try_from(threads).unwrap())
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
        let local = Breaker::new(settings);
        let mut now = Instant::from_secs(1);
        c.bench_function(&format!("breaker &mut/{label}/acquire+success"), |b| {
            b.iter(|| {
                now += STEP;
                let p = local.try_acquire(black_box(now)).unwrap();
                local.on_outcome(now, p, Outcome::Success, &mut |_| {});
            })
        });
        let shared = SharedBreaker::new(settings).with_lane_hint(this_thread);
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
        // The same operations, timed on the CPU: the one-thread and two-thread figures whose
        // ratio says how the breaker scales, undisturbed by other work on the machine.
        for threads in [1, 2] {
            c.bench_function(
                &format!("breaker shared/{label}/acquire+success on-CPU {threads} threads"),
                |b| {
                    b.iter_custom(|iters| {
                        on_cpu_threads(threads, iters, |i| {
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
}

fn open_path(c: &mut Criterion) {
    let t = Instant::from_secs(1);
    let local = Breaker::new(defaults());
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
    let local = Budget::new(BudgetSettings::defaults("bench"));
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
