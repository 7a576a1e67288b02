//! What the adapter adds to the core, beside the crates a Rust service would otherwise use.
//!
//! `cargo bench -p stormguard-std --features quanta` (the bench needs `quanta`; `tokio` is
//! on by default). Everything is measured in one run, with an `AtomicU64::fetch_add` as the
//! unit, so the figures can be quoted as ratios on any machine:
//! - clock reads: `std::time::Instant::now()`, `quanta`, and the adapter's clocks;
//! - `policy.call` around a ready future, against the bare future (polled once with a no-op
//!   waker: no runtime, no timer, exactly what the call path itself costs); with
//!   `--features metrics`, the same call counted and timed by the metrics facade into the
//!   Prometheus exporter;
//! - the shared breaker's acquire + record through the adapter (two clock reads included),
//!   1 and 2 threads, beside `failsafe` and `recloser`;
//! - the shared budget's deposit / withdraw (reading `quanta` or the coarse clock) beside tower's
//!   `TpsBudget` (which reads `std::time::Instant::now()` and takes a lock);
//! - `governor`'s `check()` as a reference for a lock-free limiter;
//! - the tower layer around a ready service, with one policy and with a breaker per host
//!   (`per_host`: the host's lookup in the keyed table, its key made from the request);
//! - a streaming call's cost per element once it flows, against the bare stream.
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
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use criterion::{criterion_group, criterion_main, Criterion};
use failsafe::CircuitBreaker as _;
use stormguard_core::{
    BreakerSettings, BudgetSettings, Call, CallSettings, Duration, Instant, Outcome, Parts,
    SharedBreaker, SharedBudget, Step,
};
use stormguard_std::clock::{CoarseClock, MonotonicClock, QuantaClock, TokioClock};
use stormguard_std::{Breaker, Budget, Clock, ManualClock, Policy};
use tower::retry::budget::Budget as _;

/// Polls a future once with a no-op waker; the futures measured here are always ready.
fn poll_once<F: Future>(fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// Runs `op` on two threads at once, `iters` times each; the wall time per operation of one
/// thread (what each caller experiences under contention).
fn two_threads(iters: u64, op: impl Fn() + Sync) -> StdDuration {
    let start = StdInstant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            let op = &op;
            s.spawn(move || {
                for _ in 0..iters {
                    op();
                }
            });
        }
    });
    start.elapsed()
}

fn consecutive_only() -> BreakerSettings {
    BreakerSettings::consecutive_only("bench", 5).unwrap()
}

fn baseline_and_clocks(c: &mut Criterion) {
    let counter = AtomicU64::new(0);
    c.bench_function("baseline/fetch_add", |b| {
        b.iter(|| black_box(counter.fetch_add(1, Ordering::AcqRel)))
    });
    c.bench_function("clock/std Instant::now", |b| {
        b.iter(|| black_box(StdInstant::now()))
    });
    let q = quanta::Clock::new();
    c.bench_function("clock/quanta Clock::now", |b| b.iter(|| black_box(q.now())));
    let clock = MonotonicClock::global();
    c.bench_function("clock/MonotonicClock", |b| {
        b.iter(|| black_box(clock.now()))
    });
    let clock = TokioClock::global();
    c.bench_function("clock/TokioClock (no runtime)", |b| {
        b.iter(|| black_box(clock.now()))
    });
    let clock = QuantaClock::global();
    c.bench_function("clock/QuantaClock", |b| b.iter(|| black_box(clock.now())));
    let clock = stormguard_std::DefaultClock::global();
    c.bench_function("clock/DefaultClock (no runtime)", |b| {
        b.iter(|| black_box(clock.now()))
    });
    let coarse = CoarseClock::start().unwrap();
    c.bench_function("clock/CoarseClock", |b| b.iter(|| black_box(coarse.now())));
}

fn policy_call(c: &mut Criterion) {
    c.bench_function("call/bare ready future", |b| {
        b.iter(|| poll_once(async { Ok::<u32, ()>(black_box(1)) }))
    });
    let quanta = Policy::builder("bench")
        .breaker(Breaker::new(consecutive_only()))
        .clock(QuantaClock::global())
        .build()
        .unwrap();
    c.bench_function(
        "call/policy, quanta, consecutive-only breaker + budget",
        |b| b.iter(|| poll_once(quanta.call(|_| async { Ok::<u32, ()>(black_box(1)) }))),
    );
    let coarse = Policy::builder("bench")
        .breaker(Breaker::new(consecutive_only()))
        .clock(CoarseClock::start().unwrap())
        .build()
        .unwrap();
    c.bench_function(
        "call/policy, coarse clock, consecutive-only breaker + budget",
        |b| b.iter(|| poll_once(coarse.call(|_| async { Ok::<u32, ()>(black_box(1)) }))),
    );
    let defaults = Policy::builder("bench")
        .clock(QuantaClock::global())
        .build()
        .unwrap();
    c.bench_function("call/policy, quanta, default breaker + budget", |b| {
        b.iter(|| poll_once(defaults.call(|_| async { Ok::<u32, ()>(black_box(1)) })))
    });
    let counted = defaults
        .clone()
        .with_listener(stormguard_std::Metrics::for_policy(&defaults));
    c.bench_function(
        "call/policy, quanta, default breaker + budget, Metrics counters",
        |b| b.iter(|| poll_once(counted.call(|_| async { Ok::<u32, ()>(black_box(1)) }))),
    );
    // The metrics facade into the Prometheus exporter (with `--features metrics`): the same
    // policy, its calls counted and timed.
    #[cfg(feature = "metrics")]
    {
        let _exporter = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .unwrap();
        let facade = stormguard_std::MetricsFacade::for_policy(&defaults);
        let counted = defaults.clone().with_listener(facade);
        c.bench_function(
            "call/policy, quanta, default breaker + budget, metrics facade",
            |b| b.iter(|| poll_once(counted.call(|_| async { Ok::<u32, ()>(black_box(1)) }))),
        );
    }
    // The default clock (made outside a paused runtime: the TSC), with every default rule
    // and consecutive-only, against the same with `QuantaClock` above; and `TokioClock`, what
    // the default clock reads in paused time.
    let default_clock = Policy::builder("bench").build().unwrap();
    c.bench_function(
        "call/policy, default clock, default breaker + budget",
        |b| b.iter(|| poll_once(default_clock.call(|_| async { Ok::<u32, ()>(black_box(1)) }))),
    );
    let default_clock = Policy::builder("bench")
        .breaker(Breaker::new(consecutive_only()))
        .build()
        .unwrap();
    c.bench_function(
        "call/policy, default clock, consecutive-only breaker + budget",
        |b| b.iter(|| poll_once(default_clock.call(|_| async { Ok::<u32, ()>(black_box(1)) }))),
    );
    let tokio_clock = Policy::builder("bench")
        .breaker(Breaker::new(consecutive_only()))
        .clock(TokioClock::global())
        .build()
        .unwrap();
    c.bench_function(
        "call/policy, TokioClock, consecutive-only breaker + budget",
        |b| b.iter(|| poll_once(tokio_clock.call(|_| async { Ok::<u32, ()>(black_box(1)) }))),
    );
    let manual = Policy::builder("bench")
        .breaker(Breaker::new(consecutive_only()))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    c.bench_function(
        "call/policy, frozen clock, consecutive-only breaker + budget",
        |b| b.iter(|| poll_once(manual.call(|_| async { Ok::<u32, ()>(black_box(1)) }))),
    );
    // The core's own share: the call driver over the same shared breaker and budget, with no
    // clock (synthetic time), no future and no adapter: begin, poll, complete, poll.
    let breaker = SharedBreaker::new(consecutive_only());
    let budget = SharedBudget::new(BudgetSettings::defaults("bench"));
    let settings = CallSettings::DEFAULT;
    let mut now = Instant::from_secs(1);
    c.bench_function(
        "call/core driver alone, consecutive-only breaker + budget",
        |b| {
            b.iter(|| {
                now += Duration::from_micros(1);
                let parts = Parts::new().breaker(&breaker).budget(&budget);
                let mut call = Call::begin(&settings, now);
                let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| {}) else {
                    unreachable!()
                };
                call.complete(&parts, permit, now, Outcome::Success, &mut |_| {});
                black_box(call.poll(&parts, now, &mut |_| {}))
            })
        },
    );
}

fn breakers(c: &mut Criterion) {
    let clock = QuantaClock::global();
    for (label, settings) in [
        ("consecutive-only", consecutive_only()),
        ("full defaults", BreakerSettings::defaults("bench")),
    ] {
        let breaker = Breaker::new(settings);
        let op = || {
            let shared = breaker.shared();
            let p = shared.try_acquire(clock.now(), None, &mut |_| {}).unwrap();
            shared.on_outcome(clock.now(), p, Outcome::Success, &mut |_| {});
        };
        c.bench_function(&format!("breaker/stormguard {label}, quanta"), |b| {
            b.iter(op)
        });
        c.bench_function(
            &format!("breaker/stormguard {label}, quanta, 2 threads"),
            |b| b.iter_custom(|iters| two_threads(iters, op)),
        );
        // The adapter's own acquire and record: the clock is read only when a rule needs it
        // (with consecutive failures alone, never while closed).
        let lazy = || {
            let permit = breaker.try_acquire_on(&clock).unwrap();
            permit.record_on(&clock, Outcome::Success);
        };
        c.bench_function(
            &format!("breaker/stormguard {label}, Breaker::try_acquire, quanta"),
            |b| b.iter(lazy),
        );
        c.bench_function(
            &format!("breaker/stormguard {label}, Breaker::try_acquire, quanta, 2 threads"),
            |b| b.iter_custom(|iters| two_threads(iters, lazy)),
        );
    }
    let failsafe = failsafe::Config::new().build();
    let op = || {
        let _ = black_box(failsafe.call(|| Ok::<(), ()>(())));
    };
    c.bench_function("breaker/failsafe", |b| b.iter(op));
    c.bench_function("breaker/failsafe, 2 threads", |b| {
        b.iter_custom(|iters| two_threads(iters, op))
    });
    let recloser = recloser::Recloser::default();
    let op = || {
        let _ = black_box(recloser.call(|| Ok::<(), ()>(())));
    };
    c.bench_function("breaker/recloser", |b| b.iter(op));
    c.bench_function("breaker/recloser, 2 threads", |b| {
        b.iter_custom(|iters| two_threads(iters, op))
    });
}

fn budgets(c: &mut Criterion) {
    let clock = QuantaClock::global();
    let ours = Budget::new(BudgetSettings::defaults("bench"));
    c.bench_function("budget/stormguard deposit, quanta", |b| {
        b.iter(|| ours.shared().deposit(clock.now()))
    });
    c.bench_function("budget/stormguard withdraw, quanta", |b| {
        b.iter(|| {
            let _ = black_box(ours.shared().try_withdraw(clock.now()));
        })
    });
    // The budget counts whole milliseconds, so the coarse clock costs it no accuracy.
    let coarse = CoarseClock::start().unwrap();
    c.bench_function("budget/stormguard deposit, coarse clock", |b| {
        b.iter(|| ours.shared().deposit(coarse.now()))
    });
    c.bench_function("budget/stormguard withdraw, coarse clock", |b| {
        b.iter(|| {
            let _ = black_box(ours.shared().try_withdraw(coarse.now()));
        })
    });
    let tps = tower::retry::budget::TpsBudget::default();
    c.bench_function("budget/tower TpsBudget deposit", |b| {
        b.iter(|| tps.deposit())
    });
    c.bench_function("budget/tower TpsBudget withdraw", |b| {
        b.iter(|| black_box(tps.withdraw()))
    });
}

fn limiter(c: &mut Criterion) {
    let quota = governor::Quota::per_second(NonZeroU32::MAX);
    let limiter = governor::RateLimiter::direct(quota);
    let op = || {
        let _ = black_box(limiter.check());
    };
    c.bench_function("limiter/governor check", |b| b.iter(op));
    c.bench_function("limiter/governor check, 2 threads", |b| {
        b.iter_custom(|iters| two_threads(iters, op))
    });
}

fn quick() -> Criterion {
    Criterion::default()
        .warm_up_time(StdDuration::from_millis(500))
        .measurement_time(StdDuration::from_secs(2))
        .sample_size(40)
}

/// The layer's own cost per request: a ready `service_fn` behind `PolicyLayer`, one policy
/// against a breaker per host (the request names one of 16 hosts).
fn layer(c: &mut Criterion) {
    use stormguard_std::tower::PolicyLayer;
    use tower::{Layer, Service, ServiceExt};

    let inner = tower::service_fn(|_req: http::Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(()))
    });
    let policy = || {
        Policy::builder("bench")
            .clock(QuantaClock::global())
            .build()
            .unwrap()
    };
    let uris: Vec<http::Uri> = (0..16)
        .map(|i| format!("http://host-{i}.example/item").parse().unwrap())
        .collect();
    let mut run = |label: &str, layer: PolicyLayer<QuantaClock>| {
        let svc = layer.layer(inner);
        let mut i = 0usize;
        c.bench_function(label, |b| {
            b.iter(|| {
                i = (i + 1) % uris.len();
                let req = http::Request::get(uris[i].clone()).body(()).unwrap();
                let mut svc = svc.clone();
                poll_once(async move { svc.ready().await.unwrap().call(req).await })
            })
        });
    };
    run(
        "layer/one policy, quanta",
        PolicyLayer::new(policy()).single_scope(),
    );
    run(
        "layer/per host (16 hosts, the default), quanta",
        PolicyLayer::new(policy()),
    );

    // A dependency publishing its quota (the IETF draft's fields, a quota never reached), read
    // or not: what keeping published quotas costs per request.
    let publishing = tower::service_fn(|_req: http::Request<()>| async {
        let mut r = http::Response::new(());
        let h = r.headers_mut();
        h.insert(
            "ratelimit-policy",
            http::HeaderValue::from_static("\"default\";q=4000000000;w=60"),
        );
        h.insert(
            "ratelimit",
            http::HeaderValue::from_static("\"default\";r=3999999999;t=60"),
        );
        Ok::<_, std::convert::Infallible>(r)
    });
    let mut run = |label: &str, layer: PolicyLayer<QuantaClock>| {
        let svc = layer.layer(publishing);
        let mut i = 0usize;
        c.bench_function(label, |b| {
            b.iter(|| {
                i = (i + 1) % uris.len();
                let req = http::Request::get(uris[i].clone()).body(()).unwrap();
                let mut svc = svc.clone();
                poll_once(async move { svc.ready().await.unwrap().call(req).await })
            })
        });
    };
    run(
        "layer/per host (16 hosts), quanta, quota published, not kept",
        PolicyLayer::new(policy()).per_host().unwrap(),
    );
    let keeping = Policy::builder("bench")
        .clock(QuantaClock::global())
        .published_quotas(stormguard_core::Ratio::from_percent(10).unwrap())
        .build()
        .unwrap();
    run(
        "layer/per host (16 hosts), quanta, quota published and kept",
        PolicyLayer::new(keeping).per_host().unwrap(),
    );
}

/// One element of a flowing stream: the bare stream against the same stream behind
/// `policy.call_stream` (connected before the measurement), plain and resumable with a stall
/// bound (a checkpoint taken per element; the source is always ready, so the bound is never
/// armed).
fn streams(c: &mut Criterion) {
    use futures_util::stream::{self, Stream};

    fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
        match std::pin::Pin::new(s).poll_next(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(item) => item,
            Poll::Pending => None,
        }
    }
    let elements = || stream::repeat(Ok::<u64, ()>(1));
    c.bench_function("stream/element, bare stream", |b| {
        let mut s = elements();
        b.iter(|| black_box(next(&mut s)))
    });
    // The same items as a streaming call hands them out (`Result<T, CallError<E>>`, a larger
    // value to move): the call's own cost is what it adds over this.
    c.bench_function("stream/element, bare stream, items as a call's", |b| {
        use futures_util::StreamExt;
        let mut s = elements().map(|r| r.map_err(stormguard_std::CallError::Failed));
        b.iter(|| black_box(next(&mut s)))
    });
    let policy = Policy::builder("bench")
        .clock(QuantaClock::global())
        .build()
        .unwrap();
    c.bench_function("stream/element, call_stream", |b| {
        let mut s = policy
            .call_stream(|| async { Ok::<_, ()>(elements()) })
            .unwrap();
        assert!(next(&mut s).is_some(), "connected");
        b.iter(|| black_box(next(&mut s)))
    });
    c.bench_function("stream/element, call_stream_resumable + stall bound", |b| {
        let mut s = policy
            .call_stream_resumable(|n: &u64| *n, |_from| async { Ok::<_, ()>(elements()) })
            .unwrap()
            .stall_timeout(StdDuration::from_secs(1))
            .unwrap();
        assert!(next(&mut s).is_some(), "connected");
        b.iter(|| black_box(next(&mut s)))
    });
}

criterion_group! {
    name = overhead;
    config = quick();
    targets = baseline_and_clocks, policy_call, breakers, budgets, limiter, layer, streams
}
criterion_main!(overhead);
