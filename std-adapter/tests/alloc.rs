//! A counting global allocator: `policy.call` allocates nothing per call, on the success path
//! and on the rejection path, once warmed up (counted with `stats_alloc`: the workspace forbids
//! `unsafe`, which a hand-written counting allocator needs).
//!
//! The counter is process-wide, so this test runs without libtest (`harness = false`): its main
//! thread would otherwise allocate for its own bookkeeping while a loaded machine runs the test
//! thread ahead, and the count would measure the harness.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss,
    missing_docs
)]

use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use stormguard_core::{limits::BulkheadSettings, limits::RateLimitSettings, Duration};
use stormguard_std::{Bulkhead, CallError, CallOptions, Limiter, Policy};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Allocations (and reallocations) made since `region` began, by any thread: the checks run one
/// after another on the only thread there is.
fn allocations(region: &Region<'_, std::alloc::System>) -> usize {
    let change = region.change();
    change.allocations + change.reallocations
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Calls measured per path (fewer under miri, which interprets every step).
const CALLS: u64 = if cfg!(miri) { 10 } else { 1_000 };

fn the_success_path_allocates_nothing() {
    let rt = runtime();
    rt.block_on(async {
        let policy = Policy::builder("alloc-ok").build().unwrap();
        for _ in 0..10 {
            assert_eq!(policy.call(|_| async { Ok::<_, ()>(1) }).await, Ok(1));
        }
        let region = Region::new(GLOBAL);
        for _ in 0..CALLS {
            assert_eq!(policy.call(|_| async { Ok::<_, ()>(1) }).await, Ok(1));
        }
        let made = allocations(&region);
        println!(
            "success path: {} allocations per call",
            made as f64 / CALLS as f64
        );
        assert_eq!(made, 0);
    });
}

fn the_rejection_path_allocates_nothing() {
    let rt = runtime();
    rt.block_on(async {
        let policy = Policy::builder("alloc-refused").build().unwrap();
        policy.isolate();
        for _ in 0..10 {
            let r = policy.call(|_| async { Ok::<_, ()>(1) }).await;
            assert!(matches!(r, Err(CallError::Rejected { .. })));
        }
        let region = Region::new(GLOBAL);
        for _ in 0..CALLS {
            let r = policy.call(|_| async { Ok::<_, ()>(1) }).await;
            assert!(matches!(r, Err(CallError::Rejected { .. })));
        }
        let made = allocations(&region);
        println!(
            "rejection path (100 ms pause on tokio's timer): {} allocations per call",
            made as f64 / CALLS as f64
        );
        assert_eq!(made, 0);
    });
}

fn a_retried_call_allocates_nothing() {
    let rt = runtime();
    rt.block_on(async {
        let policy = Policy::builder("alloc-retry").no_budget().build().unwrap();
        let call = || {
            policy.call(|attempt| async move {
                if attempt == 1 {
                    Err(())
                } else {
                    Ok(attempt)
                }
            })
        };
        for _ in 0..10 {
            assert_eq!(call().await, Ok(2));
        }
        let region = Region::new(GLOBAL);
        for _ in 0..100 {
            assert_eq!(call().await, Ok(2));
        }
        assert_eq!(allocations(&region), 0);
    });
}

fn a_logged_call_allocates_nothing() {
    let rt = runtime();
    rt.block_on(async {
        let policy = Policy::builder("alloc-log").no_budget().build().unwrap();
        let call = || {
            policy.call_logged(CallOptions::new(), |attempt| async move {
                if attempt == 1 {
                    Err(())
                } else {
                    Ok(attempt)
                }
            })
        };
        for _ in 0..10 {
            assert_eq!(call().await.result, Ok(2));
        }
        let region = Region::new(GLOBAL);
        for _ in 0..100 {
            let logged = call().await;
            assert_eq!((logged.result, logged.attempts.len()), (Ok(2), 2));
        }
        assert_eq!(allocations(&region), 0);
    });
}

/// The optional steps: a rate limiter and a bulkhead in front of the breaker, on the success
/// path and on their own refusals, and a slot won by a bounded wait.
fn the_optional_steps_allocate_nothing() {
    let rt = runtime();
    rt.block_on(async {
        let limiter =
            Limiter::new(RateLimitSettings::per_second("alloc-steps", 1_000_000).unwrap());
        let bulkhead = Bulkhead::new(
            BulkheadSettings::builder("alloc-steps")
                .max_in_flight(1)
                .bounded_wait(4, Duration::from_millis(50))
                .build()
                .unwrap(),
        );
        let policy = Policy::builder("alloc-steps")
            .rate_limit(limiter)
            .bulkhead(bulkhead.clone())
            .build()
            .unwrap();
        for _ in 0..10 {
            assert_eq!(policy.call(|_| async { Ok::<_, ()>(1) }).await, Ok(1));
        }
        let region = Region::new(GLOBAL);
        for _ in 0..CALLS {
            assert_eq!(policy.call(|_| async { Ok::<_, ()>(1) }).await, Ok(1));
        }
        assert_eq!(allocations(&region), 0, "success path with both steps");

        // The bulkhead full: every call waits 50 ms in the queue, then is refused, guarded.
        let held = bulkhead
            .shared()
            .try_enter(stormguard_core::Instant::ZERO)
            .unwrap();
        let full = || policy.call(|_| async { Ok::<_, ()>(1) });
        for _ in 0..3 {
            assert!(matches!(full().await, Err(CallError::Rejected { .. })));
        }
        let region = Region::new(GLOBAL);
        for _ in 0..100 {
            assert!(matches!(full().await, Err(CallError::Rejected { .. })));
        }
        assert_eq!(allocations(&region), 0, "bounded wait, then the refusal");
        bulkhead.leave(held);
    });
}

/// A hedged call: the first attempt hangs, the hedge answers.
fn a_hedged_call_allocates_nothing() {
    let rt = runtime();
    rt.block_on(async {
        // No budget: 50 hedges in a row would spend a default budget (hedges are retries).
        let policy = Policy::builder("alloc-hedge")
            .hedging(true)
            .no_budget()
            .build()
            .unwrap();
        let healthy = || {
            policy.call(|_| async {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                Ok::<_, ()>(0)
            })
        };
        for _ in 0..40 {
            assert_eq!(healthy().await, Ok(0));
        }
        let hedged = || {
            policy.call(|attempt| async move {
                let d = if attempt == 1 { 1_000 } else { 20 };
                tokio::time::sleep(std::time::Duration::from_millis(d)).await;
                Ok::<_, ()>(attempt)
            })
        };
        for _ in 0..5 {
            assert_eq!(hedged().await, Ok(2));
        }
        let region = Region::new(GLOBAL);
        for _ in 0..50 {
            assert_eq!(hedged().await, Ok(2));
        }
        assert_eq!(allocations(&region), 0);
    });
}

/// A stream that is not ready at every other poll (it wakes itself at once), so a stall bound
/// over it is armed and disarmed at every element.
struct Alternating {
    next: u32,
    end: u32,
    ready: bool,
}

impl futures_util::Stream for Alternating {
    type Item = Result<u32, ()>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if !self.ready {
            self.ready = true;
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        self.ready = false;
        if self.next == self.end {
            return std::task::Poll::Ready(None);
        }
        self.next += 1;
        std::task::Poll::Ready(Some(Ok(self.next - 1)))
    }
}

/// A streaming call: once its first element has come, the elements after it allocate nothing,
/// with a checkpoint taken and the stall bound's timer armed and disarmed at each.
fn a_flowing_stream_allocates_nothing_per_element() {
    use futures_util::StreamExt;
    let rt = runtime();
    rt.block_on(async {
        let policy = Policy::builder("alloc-stream").build().unwrap();
        let elements = CALLS as u32;
        let mut stream = policy
            .call_stream_resumable(
                |n: &u32| *n,
                |from: Option<u32>| async move {
                    let next = from.map_or(0, |n| n + 1);
                    Ok::<_, ()>(Alternating {
                        next,
                        end: elements,
                        ready: false,
                    })
                },
            )
            .unwrap()
            .stall_timeout(std::time::Duration::from_secs(1))
            .unwrap();
        // The first two elements: the connection, then the stall timer's first arming.
        assert_eq!(stream.next().await, Some(Ok(0)));
        assert_eq!(stream.next().await, Some(Ok(1)));
        let region = Region::new(GLOBAL);
        let mut sum = 0u64;
        while let Some(item) = stream.next().await {
            sum += u64::from(item.unwrap());
        }
        let made = allocations(&region);
        assert_eq!(sum, (2..u64::from(elements)).sum::<u64>());
        println!(
            "streaming call: {} allocations per element",
            made as f64 / CALLS as f64
        );
        assert_eq!(made, 0);
    });
}

fn main() {
    the_success_path_allocates_nothing();
    the_rejection_path_allocates_nothing();
    a_retried_call_allocates_nothing();
    a_logged_call_allocates_nothing();
    the_optional_steps_allocate_nothing();
    a_hedged_call_allocates_nothing();
    a_flowing_stream_allocates_nothing_per_element();
    println!("policy calls allocate nothing once warmed up: ok");
}
