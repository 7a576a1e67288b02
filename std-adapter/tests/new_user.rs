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
