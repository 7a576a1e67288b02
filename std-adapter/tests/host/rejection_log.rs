//! Rejections reach the logs at WARN at most once per 30 s per breaker, with the count of the
//! rest, so an outage is visible without flooding them.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::time::Duration;

use stormguard_std::Policy;

use crate::support::Lines;

/// The summarised rejection warnings written so far.
fn warnings(lines: &Lines) -> Vec<String> {
    lines.with("calls rejected")
}

#[tokio::test(start_paused = true)]
async fn an_outage_warns_once_per_30_seconds_per_breaker_with_the_count_of_the_rest() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let policy = Policy::builder("ledger-warn").build().unwrap();
    let other = Policy::builder("search-warn").build().unwrap();
    policy.isolate();
    other.isolate();
    // 50 rejections over 5 s (each served after its 100 ms pause): one warning.
    for _ in 0..50 {
        assert!(policy.call(|_| async { Ok::<u32, ()>(1) }).await.is_err());
    }
    let w = warnings(&lines);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].contains("ledger-warn") && w[0].contains("(0 more"),
        "{w:#?}"
    );
    // Another breaker has its own pace.
    assert!(other.call(|_| async { Ok::<u32, ()>(1) }).await.is_err());
    assert_eq!(warnings(&lines).len(), 2);
    // 30 s on, the next rejection warns again, counting the 49 held back.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(policy.call(|_| async { Ok::<u32, ()>(1) }).await.is_err());
    let w = warnings(&lines);
    assert_eq!(w.len(), 3, "{w:#?}");
    assert!(
        w[2].contains("ledger-warn") && w[2].contains("(49 more"),
        "{w:#?}"
    );
}
