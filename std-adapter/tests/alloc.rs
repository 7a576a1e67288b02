//! A counting global allocator: `policy.call` allocates nothing per call, on the success path
//! and on the rejection path, once warmed up (counted with `stats_alloc`: the workspace forbids
//! `unsafe`, which a hand-written counting allocator needs).
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::cast_precision_loss,
    missing_docs
)]

use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use stormguard_std::{CallError, Policy};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Allocations (and reallocations) made since `region` began. The counter is process-wide, so
/// the checks run in one test: no other test thread allocates meanwhile.
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

const CALLS: u64 = 1_000;

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

#[test]
fn policy_calls_allocate_nothing_once_warmed_up() {
    the_success_path_allocates_nothing();
    the_rejection_path_allocates_nothing();
    a_retried_call_allocates_nothing();
}
