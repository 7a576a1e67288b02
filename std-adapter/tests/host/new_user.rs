//! What a host user sees with only `stormguard-std` in Cargo.toml: error chains, std durations
//! and one name per policy.
#![cfg(feature = "tokio")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::error::Error as _;
use std::io;

use stormguard_std::{CallError, Policy};

#[tokio::test(start_paused = true)]
async fn a_failed_call_keeps_connection_refused_in_its_error_chain() {
    let policy = Policy::builder("chain").max_attempts(2).build().unwrap();
    let r: Result<(), CallError<io::Error>> = policy
        .call(|_| async {
            Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "connection refused",
            ))
        })
        .await;
    let e = r.unwrap_err();
    let source = e.source().expect("the operation's error is the source");
    assert_eq!(source.to_string(), "connection refused");
    let io = source.downcast_ref::<io::Error>().unwrap();
    assert_eq!(io.kind(), io::ErrorKind::ConnectionRefused);
    // Boxed, as an application passes it up with `?`, the chain still reaches the io error.
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    assert!(boxed.source().unwrap().is::<io::Error>());
}

#[tokio::test(start_paused = true)]
async fn a_rejection_before_any_attempt_has_no_source() {
    let policy = Policy::builder("none").build().unwrap();
    policy.isolate();
    let r: Result<(), CallError<io::Error>> = policy.call(|_| async { Ok(()) }).await;
    let e = r.unwrap_err();
    assert!(e.rejection().is_some());
    assert!(e.source().is_none());
}

/// Written against `stormguard_std` alone: every type the policy API takes or returns is
/// reachable from it, and std durations go in where the core's builders take the core's.
#[tokio::test(start_paused = true)]
async fn a_host_user_builds_and_reads_a_policy_with_this_crate_alone() {
    use std::time::Duration as StdDuration;
    use stormguard_std::health::Snapshot;
    use stormguard_std::{
        Backoff, BreakerSettings, BudgetSettings, Duration, FailureRate, Jitter, RefusalReason,
        Rejection, SettingsError, SlowCalls, State,
    };

    let breaker = BreakerSettings::builder("payments")
        .consecutive_failures(1)
        .failure_rate(None::<FailureRate>)
        .slow_calls(None::<SlowCalls>)
        .jitter(false)
        .break_duration(StdDuration::from_secs(5).into())
        .build()
        .unwrap();
    let budget = BudgetSettings::builder("payments").build().unwrap();
    let backoff = Backoff::builder()
        .base(StdDuration::from_millis(10).into())
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let policy = Policy::builder("payments")
        .breaker_settings(breaker)
        .budget_settings(budget)
        .backoff(backoff)
        .max_attempts(1)
        .deadline(StdDuration::from_secs(2))
        .build()
        .unwrap();

    let r: Result<(), CallError<io::Error>> = policy
        .call(|_| async { Err(io::Error::other("down")) })
        .await;
    assert!(matches!(r, Err(CallError::Failed(_))));
    let snapshot: Snapshot = policy.breaker().unwrap().snapshot();
    assert!(matches!(snapshot.state, State::Open));

    let r: Result<(), CallError<io::Error>> = policy.call(|_| async { Ok(()) }).await;
    let rejection: Rejection = *r.unwrap_err().rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::BreakerOpen);
    assert!(rejection.retry_after <= Duration::from_secs(5));
    let bad: Result<BreakerSettings, SettingsError> = BreakerSettings::builder("payments")
        .consecutive_failures(0)
        .build();
    assert!(bad.is_err());
}

#[test]
fn settings_named_for_another_dependency_are_refused_by_the_policy() {
    use stormguard_core::{Bound, Field};
    use stormguard_std::{Breaker, BreakerSettings, BudgetSettings};

    let breaker = BreakerSettings::builder("cache").build().unwrap();
    let e = Policy::builder("payments")
        .breaker_settings(breaker)
        .build()
        .err()
        .unwrap();
    assert_eq!((e.field, e.bound), (Field::BreakerName, Bound::PolicyName));
    assert_eq!(e.to_string(), "`breaker_name` must be the policy's name");

    let budget = BudgetSettings::builder("cache").build().unwrap();
    let e = Policy::builder("payments")
        .budget_settings(budget)
        .build()
        .err()
        .unwrap();
    assert_eq!((e.field, e.bound), (Field::BudgetName, Bound::PolicyName));

    // A shared handle keeps its own name: two policies may guard calls with one breaker.
    let shared = Breaker::new(BreakerSettings::builder("payments").build().unwrap());
    let refunds = Policy::builder("refunds")
        .breaker(shared.clone())
        .build()
        .unwrap();
    assert_eq!(
        refunds.breaker().unwrap().settings().name().as_str(),
        "payments"
    );
}
