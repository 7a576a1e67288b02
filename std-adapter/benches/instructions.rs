//! Paths run a given number of times, for an instruction count under callgrind: the count is
//! the same for the same binary and inputs whatever else the machine does, so two builds can be
//! compared in one sitting (`bash std-adapter/benches/instructions.sh`, which runs each path at
//! two counts and prints the difference per call).
//!
//! `cargo bench -p stormguard-std --features quanta --bench instructions -- PATH N` runs `PATH`
//! `N` times; with no `PATH`, it lists the paths.
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
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use stormguard_core::{
    limits::BulkheadSettings, limits::RateLimitSettings, Breaker as CoreBreaker, BreakerSettings,
    Budget as CoreBudget, BudgetSettings, Call, CallSettings, Duration, Instant, Outcome, Parts,
    SharedBreaker, SharedBudget, Step,
};
use stormguard_std::clock::{QuantaClock, TokioClock};
use stormguard_std::{Breaker, Bulkhead, Limiter, ManualClock, Policy};

/// Polls a future once with a no-op waker; the futures run here are always ready.
fn poll_once<F: Future>(fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

fn consecutive_only() -> BreakerSettings {
    BreakerSettings::consecutive_only("bench", 5).unwrap()
}

/// `policy.call` around a ready future, `n` times.
fn calls(policy: &Policy<impl stormguard_std::Clock>, n: u64) {
    measured(n, &mut || {
        let r = poll_once(policy.call(|_| async { Ok::<u32, ()>(black_box(1)) }));
        assert_eq!(black_box(r), Some(Ok(1)), "every call succeeds at once");
    });
}

/// The core's call driver over `parts`, synthetic time: begin, poll, complete, read.
fn driver(parts: impl stormguard_core::call::Gate, n: u64) {
    let settings = CallSettings::DEFAULT;
    let mut now = Instant::from_secs(1);
    measured(n, &mut || {
        now += Duration::from_micros(1);
        let mut call = Call::begin(&settings, now);
        let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| {}) else {
            unreachable!()
        };
        call.complete(&parts, permit, now, Outcome::Success, &mut |_| {});
        black_box(call.finished());
    });
}

const PATHS: &[&str] = &[
    "call/quanta/consecutive",
    "call/quanta/defaults",
    "call/frozen/consecutive",
    "call/frozen/defaults",
    "call/tokio/consecutive",
    "call/frozen/defaults+limiter+bulkhead",
    "driver/shared/consecutive",
    "driver/shared/defaults",
    "driver/local/defaults",
    "breaker/shared/consecutive",
    "breaker/shared/defaults",
    "breaker/local/defaults",
    "breaker/handle/defaults",
    "budget/shared/deposit+withdraw",
];

fn run(path: &str, n: u64) {
    let mut now = Instant::from_secs(1);
    let mut tick = move || {
        now += Duration::from_micros(1);
        now
    };
    let frozen = |b: stormguard_std::PolicyBuilder| b.clock(ManualClock::new()).build().unwrap();
    match path {
        "call/quanta/consecutive" => calls(
            &Policy::builder("bench")
                .breaker(Breaker::new(consecutive_only()))
                .clock(QuantaClock::global())
                .build()
                .unwrap(),
            n,
        ),
        "call/quanta/defaults" => calls(
            &Policy::builder("bench")
                .clock(QuantaClock::global())
                .build()
                .unwrap(),
            n,
        ),
        "call/frozen/consecutive" => calls(
            &frozen(Policy::builder("bench").breaker(Breaker::new(consecutive_only()))),
            n,
        ),
        "call/frozen/defaults" => calls(&frozen(Policy::builder("bench")), n),
        "call/tokio/consecutive" => calls(
            &Policy::builder("bench")
                .breaker(Breaker::new(consecutive_only()))
                .clock(TokioClock::global())
                .build()
                .unwrap(),
            n,
        ),
        "call/frozen/defaults+limiter+bulkhead" => calls(
            &frozen(
                Policy::builder("bench")
                    .rate_limit(Limiter::new(
                        RateLimitSettings::builder("bench")
                            .rate(1, Duration::from_secs(1))
                            .burst(1_000_000_000)
                            .build()
                            .unwrap(),
                    ))
                    .bulkhead(Bulkhead::new(
                        BulkheadSettings::builder("bench")
                            .max_in_flight(64)
                            .build()
                            .unwrap(),
                    )),
            ),
            n,
        ),
        "driver/shared/consecutive" => driver(
            Parts::new()
                .breaker(&SharedBreaker::new(consecutive_only()))
                .budget(&SharedBudget::new(BudgetSettings::defaults("bench"))),
            n,
        ),
        "driver/shared/defaults" => driver(
            Parts::new()
                .breaker(&SharedBreaker::new(BreakerSettings::defaults("bench")))
                .budget(&SharedBudget::new(BudgetSettings::defaults("bench"))),
            n,
        ),
        "driver/local/defaults" => driver(
            Parts::new()
                .breaker(CoreBreaker::new(BreakerSettings::defaults("bench")))
                .budget(CoreBudget::new(BudgetSettings::defaults("bench"))),
            n,
        ),
        "breaker/shared/consecutive" | "breaker/shared/defaults" => {
            let settings = if path.ends_with("consecutive") {
                consecutive_only()
            } else {
                BreakerSettings::defaults("bench")
            };
            let b = SharedBreaker::new(settings);
            measured(n, &mut || {
                let now = tick();
                let p = b.try_acquire(now, None, &mut |_| {}).unwrap();
                b.on_outcome(now, p, Outcome::Success, &mut |_| {});
            });
        }
        "breaker/local/defaults" => {
            let b = CoreBreaker::new(BreakerSettings::defaults("bench"));
            measured(n, &mut || {
                let now = tick();
                let p = b.try_acquire(now).unwrap();
                b.on_outcome(now, p, Outcome::Success, &mut |_| {});
            });
        }
        "breaker/handle/defaults" => {
            let b = Breaker::new(BreakerSettings::defaults("bench"));
            let clock = ManualClock::new();
            measured(n, &mut || {
                clock.advance(std::time::Duration::from_micros(1));
                let permit = b.try_acquire_on(&clock).unwrap();
                permit.record_on(&clock, Outcome::Success);
            });
        }
        "budget/shared/deposit+withdraw" => {
            let b = SharedBudget::new(BudgetSettings::defaults("bench"));
            measured(n, &mut || {
                let now = tick();
                b.deposit(now);
                black_box(b.try_withdraw(now)).ok();
            });
        }
        other => panic!("no path {other}; the paths: {PATHS:?}"),
    }
}

/// Runs `f` `n` times: the only function whose instructions the script counts
/// (`--toggle-collect`), so what a path sets up is left out.
#[inline(never)]
fn measured(n: u64, f: &mut dyn FnMut()) {
    for _ in 0..n {
        f();
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.as_slice() {
        [path, n] => run(path, n.parse().expect("a count")),
        _ => {
            for p in PATHS {
                println!("{p}");
            }
        }
    }
}
