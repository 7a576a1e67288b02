//! The cost of a rate-limit decision, beside an `AtomicU64::fetch_add` and governor's GCRA,
//! measured in the same run.
//!
//! `cargo bench -p stormguard-core --bench ratelimit`
//!
//! Two pairings keep the comparison fair: "synthetic" runs read no clock (ours is handed an
//! instant advanced per operation, governor reads a `FakeRelativeClock`, one atomic load), and
//! "quanta" runs read the same clock governor reads by default (`quanta`, through governor's
//! `QuantaClock`) before each decision. Every configuration admits every request, so the
//! compare-exchange path is what is measured.
//!
//! The `sliding/` runs put the segmented sliding window beside GCRA on synthetic time: 8
//! segments of 1 ms, a quota of 4000 per 8 ms, one request every 2.5 µs, so every request is
//! admitted and the window slides a segment every 400 requests.
//!
//! The `concurrency/` group puts the concurrency limits beside them: a bulkhead's enter and
//! leave, the adaptive limiter's acquire and completion (a latency recorded, a round ending
//! every limit's worth of calls), and governor's check, all on synthetic time.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use criterion::{criterion_group, criterion_main, Criterion};
use governor::clock::{Clock, FakeRelativeClock, QuantaClock, Reference};
use governor::{Quota, RateLimiter as Governor};
use stormguard_core::{
    limits::KeyedRateLimiter, limits::RateLimitSettings, limits::RateLimiter,
    limits::SharedRateLimiter, limits::SharedSlidingWindowLimiter, limits::SlidingWindowLimiter,
    limits::SlidingWindowSettings, Duration, Instant,
};

/// Keys in the keyed runs.
const KEYS: usize = 10_000;
/// Slots in our keyed table: a quarter more than the keys, rounded to a power of two.
const SLOTS: usize = 16_384;

/// 4 million cells a second (one every 250 ns), burst 1000.
fn fast() -> RateLimitSettings {
    RateLimitSettings::builder("bench")
        .rate(4_000_000, Duration::from_secs(1))
        .burst(1000)
        .build()
        .unwrap()
}

/// One cell a nanosecond, a second's burst: never refuses against a real clock.
fn unbounded() -> RateLimitSettings {
    RateLimitSettings::builder("bench")
        .rate(1_000_000_000, Duration::from_secs(1))
        .build()
        .unwrap()
}

/// 4000 calls per 8 ms, sliding in 8 segments of 1 ms.
fn sliding() -> SlidingWindowSettings {
    SlidingWindowSettings::builder("bench")
        .quota(4000)
        .window(Duration::from_millis(8))
        .segments(8)
        .build()
        .unwrap()
}

fn governor_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap())
        .allow_burst(NonZeroU32::new(u32::MAX).unwrap())
}

/// Our instants from governor's quanta clock, as an adapter would map its clock.
struct Quanta {
    clock: QuantaClock,
    start: <QuantaClock as Clock>::Instant,
}

impl Quanta {
    fn new() -> Quanta {
        let clock = QuantaClock::default();
        let start = clock.now();
        Quanta { clock, start }
    }

    #[inline]
    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.now().duration_since(self.start).as_u64())
    }
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
    let clock = Quanta::new();
    c.bench_function("baseline/quanta clock read", |b| {
        b.iter(|| black_box(clock.now()))
    });
    c.bench_function("baseline/fetch_add 2 threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |_| {
                black_box(counter.fetch_add(1, Ordering::AcqRel));
            })
        })
    });
}

fn direct(c: &mut Criterion) {
    // No clock read.
    let local = RateLimiter::new(fast());
    let mut now = Instant::from_secs(1);
    c.bench_function("gcra/ours &mut/synthetic", |b| {
        b.iter(|| {
            now += Duration::from_nanos(250);
            black_box(local.check(black_box(now)).is_ok())
        })
    });
    let shared = SharedRateLimiter::new(fast());
    let mut now = Instant::from_secs(1);
    c.bench_function("gcra/ours shared/synthetic", |b| {
        b.iter(|| {
            now += Duration::from_nanos(250);
            black_box(shared.check(black_box(now)).is_ok())
        })
    });
    let shared = SharedRateLimiter::new(fast());
    let base = Instant::from_secs(1);
    c.bench_function("gcra/ours shared/synthetic 2 threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |i| {
                let now = base + Duration::from_nanos(i * 250);
                black_box(shared.check(black_box(now)).is_ok());
            })
        })
    });
    let local = SlidingWindowLimiter::new(sliding());
    let mut now = Instant::from_secs(1);
    c.bench_function("sliding/ours &mut/synthetic", |b| {
        b.iter(|| {
            now += Duration::from_nanos(2_500);
            black_box(local.check(black_box(now)).is_ok())
        })
    });
    let shared = SharedSlidingWindowLimiter::new(sliding());
    let mut now = Instant::from_secs(1);
    c.bench_function("sliding/ours shared/synthetic", |b| {
        b.iter(|| {
            now += Duration::from_nanos(2_500);
            black_box(shared.check(black_box(now)).is_ok())
        })
    });
    let shared = SharedSlidingWindowLimiter::new(sliding());
    c.bench_function("sliding/ours shared/synthetic 2 threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |i| {
                // Both threads' readings within one late reading of each other.
                let now = base + Duration::from_nanos(i * 2_500);
                black_box(shared.check(black_box(now)).is_ok());
            })
        })
    });
    let fake = FakeRelativeClock::default();
    let gov = Governor::direct_with_clock(governor_quota(), fake);
    c.bench_function("gcra/governor/fake clock", |b| {
        b.iter(|| black_box(gov.check().is_ok()))
    });

    // Reading the clock governor reads by default.
    let clock = Quanta::new();
    let local = RateLimiter::new(unbounded());
    c.bench_function("gcra/ours &mut/quanta", |b| {
        b.iter(|| black_box(local.check(clock.now()).is_ok()))
    });
    let shared = SharedRateLimiter::new(unbounded());
    c.bench_function("gcra/ours shared/quanta", |b| {
        b.iter(|| black_box(shared.check(clock.now()).is_ok()))
    });
    c.bench_function("gcra/ours shared/quanta 2 threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |_| {
                black_box(shared.check(clock.now()).is_ok());
            })
        })
    });
    let gov = Governor::direct(governor_quota());
    c.bench_function("gcra/governor/quanta", |b| {
        b.iter(|| black_box(gov.check().is_ok()))
    });
    c.bench_function("gcra/governor/quanta 2 threads", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |_| {
                black_box(gov.check().is_ok());
            })
        })
    });
}

fn keyed(c: &mut Criterion) {
    // The keys, in a fixed shuffled order, visited round and round.
    let mut rng = fastrand::Rng::with_seed(7);
    let mut keys: Vec<u64> = (0..KEYS as u64).map(|k| k * 7919 + 13).collect();
    rng.shuffle(&mut keys);
    let per_key = RateLimitSettings::per_second("bench", 1_000_000).unwrap();

    let mut ours: Box<KeyedRateLimiter<u64, SLOTS>> =
        Box::new(KeyedRateLimiter::with_seed(per_key, 0x5eed));
    let mut now = Instant::from_secs(1);
    for k in &keys {
        ours.check(k, now).unwrap();
    }
    let mut i = 0usize;
    c.bench_function("keyed 10k/ours/synthetic", |b| {
        b.iter(|| {
            i = if i + 1 == KEYS { 0 } else { i + 1 };
            now += Duration::from_nanos(100);
            black_box(ours.check(&keys[i], black_box(now)).is_ok())
        })
    });
    let fake = FakeRelativeClock::default();
    let gov = Governor::dashmap_with_clock(governor_quota(), fake);
    for k in &keys {
        gov.check_key(k).unwrap();
    }
    c.bench_function("keyed 10k/governor/fake clock", |b| {
        b.iter(|| {
            i = if i + 1 == KEYS { 0 } else { i + 1 };
            black_box(gov.check_key(&keys[i]).is_ok())
        })
    });

    let clock = Quanta::new();
    let mut ours: Box<KeyedRateLimiter<u64, SLOTS>> =
        Box::new(KeyedRateLimiter::with_seed(per_key, 0x5eed));
    for k in &keys {
        ours.check(k, clock.now()).unwrap();
    }
    c.bench_function("keyed 10k/ours/quanta", |b| {
        b.iter(|| {
            i = if i + 1 == KEYS { 0 } else { i + 1 };
            black_box(ours.check(&keys[i], clock.now()).is_ok())
        })
    });
    let gov = Governor::keyed(governor_quota());
    for k in &keys {
        gov.check_key(k).unwrap();
    }
    c.bench_function("keyed 10k/governor/quanta", |b| {
        b.iter(|| {
            i = if i + 1 == KEYS { 0 } else { i + 1 };
            black_box(gov.check_key(&keys[i]).is_ok())
        })
    });
    assert_eq!(ours.len(), KEYS);
}

fn concurrency(c: &mut Criterion) {
    use stormguard_core::limits::{
        AdaptiveLimitSettings, AdaptiveLimiter, BulkheadSettings, SharedAdaptiveLimiter,
        SharedBulkhead,
    };
    let bulkhead = SharedBulkhead::new(BulkheadSettings::builder("b").build().unwrap());
    let mut now = Instant::from_secs(1);
    c.bench_function("concurrency/bulkhead shared enter+leave", |b| {
        b.iter(|| {
            now += Duration::from_nanos(250);
            let p = bulkhead.try_enter(black_box(now)).unwrap();
            black_box(bulkhead.leave(p))
        })
    });
    let settings = AdaptiveLimitSettings::builder("a").build().unwrap();
    let adaptive = SharedAdaptiveLimiter::new(settings);
    let mut now = Instant::from_secs(1);
    c.bench_function("concurrency/adaptive shared acquire+complete", |b| {
        b.iter(|| {
            now += Duration::from_nanos(250);
            let p = adaptive.try_acquire(black_box(now)).unwrap();
            black_box(adaptive.complete(p, now, Some(Duration::from_micros(800))))
        })
    });
    let local = AdaptiveLimiter::new(settings);
    let mut now = Instant::from_secs(1);
    c.bench_function("concurrency/adaptive &mut acquire+complete", |b| {
        b.iter(|| {
            now += Duration::from_nanos(250);
            let p = local.try_acquire(black_box(now)).unwrap();
            black_box(local.complete(p, now, Some(Duration::from_micros(800))))
        })
    });
    let gov = Governor::direct_with_clock(governor_quota(), FakeRelativeClock::default());
    c.bench_function("concurrency/governor check/fake clock", |b| {
        b.iter(|| black_box(gov.check().is_ok()))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(StdDuration::from_millis(500))
        .measurement_time(StdDuration::from_secs(2));
    targets = baseline, direct, keyed, concurrency
}
criterion_main!(benches);
