//! Each call runs in a `call` span and each attempt in an `attempt` span inside it (DEBUG,
//! target `stormguard`), told how they ended; the tower layer adds a `request` span with the
//! method and the URL, its query left out.
#![cfg(all(feature = "tokio", feature = "spans"))]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use stormguard_std::{Backoff, Policy};
use tracing_subscriber::fmt::format::FmtSpan;

use crate::support::Lines;

/// A subscriber at `level` writing to `lines`, with a line as each span closes.
fn subscriber(lines: &Lines, level: tracing::Level) -> impl tracing::Subscriber + Send + Sync {
    let writer = lines.clone();
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(move || writer.clone())
        .finish()
}

fn retrying(name: &'static str) -> Policy {
    Policy::builder(name)
        .max_attempts(3)
        .backoff(Backoff::none())
        .build()
        .unwrap()
}

/// A call whose first attempt fails and whose second succeeds.
async fn fail_once(policy: &Policy) -> Result<u32, stormguard_std::CallError<&'static str>> {
    policy
        .call(|attempt| async move {
            if attempt == 1 {
                Err("reset")
            } else {
                Ok(attempt)
            }
        })
        .await
}

#[tokio::test(start_paused = true)]
async fn a_call_and_each_attempt_run_in_spans_that_say_how_they_ended() {
    let lines = Lines::default();
    let _guard = tracing::subscriber::set_default(subscriber(&lines, tracing::Level::DEBUG));
    let policy = retrying("ledger-spans");
    assert_eq!(fail_once(&policy).await, Ok(2));
    let closed = lines.with("close time.");
    let attempts: Vec<_> = closed.iter().filter(|l| l.contains("attempt{")).collect();
    assert_eq!(attempts.len(), 2, "{closed:#?}");
    assert!(
        attempts[0].contains("attempt=1")
            && attempts[0].contains("hedge=false")
            && attempts[0].contains("outcome=\"transient\""),
        "{attempts:#?}"
    );
    assert!(
        attempts[1].contains("attempt=2") && attempts[1].contains("outcome=\"success\""),
        "{attempts:#?}"
    );
    // Each attempt's span sits inside the call's.
    assert!(
        attempts.iter().all(|l| l.contains("call{")),
        "{attempts:#?}"
    );
    let calls: Vec<_> = closed.iter().filter(|l| !l.contains("attempt{")).collect();
    assert_eq!(calls.len(), 1, "{closed:#?}");
    assert!(
        calls[0].contains("breaker=\"ledger-spans\"")
            && calls[0].contains("attempts=2")
            && calls[0].contains("ended=\"succeeded\""),
        "{calls:#?}"
    );
    // The retry's event is logged inside the call's span.
    let retries = lines.with("retry");
    assert!(
        !retries.is_empty() && retries.iter().all(|l| l.contains("call{")),
        "{retries:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_call_closes_its_span_as_rejected_with_no_attempt() {
    let lines = Lines::default();
    let _guard = tracing::subscriber::set_default(subscriber(&lines, tracing::Level::DEBUG));
    let policy = retrying("search-spans");
    policy.isolate();
    assert!(policy.call(|_| async { Ok::<u32, ()>(1) }).await.is_err());
    let closed = lines.with("close time.");
    assert!(
        closed.iter().all(|l| !l.contains("attempt{")),
        "{closed:#?}"
    );
    assert_eq!(closed.len(), 1, "{closed:#?}");
    assert!(
        closed[0].contains("attempts=0") && closed[0].contains("ended=\"rejected\""),
        "{closed:#?}"
    );
}

#[test]
fn a_blocking_call_runs_in_the_same_spans() {
    let lines = Lines::default();
    let _guard = tracing::subscriber::set_default(subscriber(&lines, tracing::Level::DEBUG));
    let policy = retrying("blocking-spans");
    let r = policy.call_blocking(|attempt| {
        if attempt < 3 {
            Err("reset")
        } else {
            Ok(attempt)
        }
    });
    assert_eq!(r, Ok(3));
    let closed = lines.with("close time.");
    let attempts: Vec<_> = closed.iter().filter(|l| l.contains("attempt{")).collect();
    assert_eq!(attempts.len(), 3, "{closed:#?}");
    assert!(attempts[2].contains("attempt=3") && attempts[2].contains("outcome=\"success\""));
    let call = closed.iter().find(|l| !l.contains("attempt{")).unwrap();
    assert!(
        call.contains("attempts=3") && call.contains("ended=\"succeeded\""),
        "{call}"
    );
}

#[tokio::test(start_paused = true)]
async fn without_debug_on_the_target_no_span_is_made() {
    let lines = Lines::default();
    let _guard = tracing::subscriber::set_default(subscriber(&lines, tracing::Level::INFO));
    let policy = retrying("quiet-spans");
    assert_eq!(fail_once(&policy).await, Ok(2));
    assert_eq!(lines.with("call{"), Vec::<String>::new());
    assert_eq!(lines.with("close time."), Vec::<String>::new());
}

#[cfg(feature = "tower")]
#[tokio::test(start_paused = true)]
async fn the_layer_adds_a_request_span_with_the_method_and_the_url_without_its_query() {
    use std::convert::Infallible;
    use stormguard_std::tower::PolicyLayer;
    use tower::{service_fn, Layer, ServiceExt};

    let lines = Lines::default();
    let _guard = tracing::subscriber::set_default(subscriber(&lines, tracing::Level::DEBUG));
    let service = PolicyLayer::new(retrying("layer-spans")).layer(service_fn(
        |_req: http::Request<String>| async {
            Ok::<_, Infallible>(http::Response::new(String::from("ok")))
        },
    ));
    let req = http::Request::get("http://user:secret@api.example:8080/v1/items?token=abc")
        .body(String::new())
        .unwrap();
    let resp = service.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), http::StatusCode::OK);
    let requests = lines.with("request{");
    assert!(!requests.is_empty(), "{requests:#?}");
    let closed = requests.iter().find(|l| l.contains("close time.")).unwrap();
    assert!(
        closed.contains("method=\"GET\"")
            && closed.contains("url=http://api.example:8080/v1/items"),
        "{closed}"
    );
    // The policy's call span sits inside the request's.
    let call = lines
        .with("close time.")
        .into_iter()
        .find(|l| l.contains("call{") && !l.contains("attempt{"))
        .unwrap();
    assert!(call.contains("request{"), "{call}");
    assert!(
        lines.with("secret").is_empty() && lines.with("token").is_empty(),
        "{requests:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedge_runs_in_its_own_attempt_span_and_the_loser_closes_as_dropped() {
    use tokio::time::sleep;
    let policy = Policy::builder("hedged-spans")
        .hedging(true)
        .build()
        .unwrap();
    // 40 calls of 20 ms teach the hedge delay (the learned p95, about 20 ms).
    for _ in 0..40 {
        let r = policy
            .call(|_| async {
                sleep(std::time::Duration::from_millis(20)).await;
                Ok::<_, &str>(0)
            })
            .await;
        assert_eq!(r, Ok(0));
    }
    let lines = Lines::default();
    let _guard = tracing::subscriber::set_default(subscriber(&lines, tracing::Level::DEBUG));
    // The first attempt hangs for a second; the hedge answers in 5 ms and wins.
    let r = policy
        .call(|attempt| async move {
            let took = if attempt == 1 { 1_000 } else { 5 };
            sleep(std::time::Duration::from_millis(took)).await;
            Ok::<_, &str>(attempt)
        })
        .await;
    assert_eq!(r, Ok(2));
    let closed = lines.with("close time.");
    let attempts: Vec<_> = closed.iter().filter(|l| l.contains("attempt{")).collect();
    assert_eq!(attempts.len(), 2, "{closed:#?}");
    let hedge = attempts.iter().find(|l| l.contains("hedge=true")).unwrap();
    assert!(
        hedge.contains("attempt=2") && hedge.contains("outcome=\"success\""),
        "{hedge}"
    );
    let first = attempts.iter().find(|l| l.contains("hedge=false")).unwrap();
    assert!(
        first.contains("attempt=1") && first.contains("outcome=\"dropped\""),
        "{first}"
    );
    assert!(
        attempts.iter().all(|l| l.contains("call{")),
        "{attempts:#?}"
    );
    let call = closed.iter().find(|l| !l.contains("attempt{")).unwrap();
    assert!(
        call.contains("attempts=2") && call.contains("ended=\"succeeded\""),
        "{call}"
    );
}
