//! Local saturation on a real (not paused) single-threaded runtime: a task that blocks the
//! runtime's only thread starves every timer; the probe sees it, tells it once, and the
//! policy that watches the probe learns nothing from the calls that ran through it, while a
//! policy beside it that does not watch learns the stall as the dependency's latency.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use stormguard_std::saturation::SaturationProbe;
use stormguard_std::saturation::{SaturationDetected, SaturationSettings};
use stormguard_std::{DefaultClock, Duration, Listener, Policy, State};

#[derive(Clone, Default)]
struct Episodes(Arc<AtomicU32>);

impl Listener for Episodes {
    fn on_saturation(&self, detected: &SaturationDetected) {
        assert!(detected.delay > detected.threshold, "{detected:?}");
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// `n` calls through `policy`, each answering `took` after it starts; `started` counts the
/// attempts begun.
async fn calls(policy: &Policy, n: usize, took: u64, started: &Arc<AtomicUsize>) {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (policy, started) = (policy.clone(), started.clone());
        set.spawn(async move {
            policy
                .call(|_| {
                    started.fetch_add(1, Ordering::Relaxed);
                    async move {
                        tokio::time::sleep(StdDuration::from_millis(took)).await;
                        Ok::<_, std::io::Error>(())
                    }
                })
                .await
                .unwrap();
        });
    }
    while let Some(joined) = set.join_next().await {
        joined.unwrap();
    }
}

fn snapshot(policy: &Policy) -> stormguard_std::health::Snapshot {
    policy.breaker().unwrap().snapshot()
}

#[tokio::test(flavor = "current_thread")]
async fn a_starved_runtime_is_told_once_and_its_stall_is_not_learned() {
    let episodes = Episodes::default();
    let settings = SaturationSettings::builder()
        .interval(Duration::from_millis(5))
        .build()
        .unwrap();
    let probe = SaturationProbe::spawn_with(settings, DefaultClock::global(), episodes.clone());
    let watching = Policy::builder("watching")
        .saturation(&probe)
        .build()
        .unwrap();
    let blind = Policy::builder("blind").build().unwrap();
    let started = Arc::new(AtomicUsize::new(0));

    // Both learn a normal of about 3 ms while the probe arms (20 probes, about 100 ms).
    for _ in 0..60 {
        tokio::join!(
            calls(&watching, 1, 3, &started),
            calls(&blind, 1, 3, &started)
        );
    }
    assert!(probe.snapshot().armed, "{:?}", probe.snapshot());
    assert!(!probe.is_saturated());
    let learned = snapshot(&watching).normal_latency.unwrap();
    assert!(learned < Duration::from_millis(50), "{learned}");

    let before = episodes.0.load(Ordering::Relaxed);

    // 200 calls each, all in flight when the only thread blocks for 300 ms: every one of them
    // ends some 300 ms after it began, its attempt timer and its answer due at once.
    started.store(0, Ordering::Relaxed);
    let (w, b) = (watching.clone(), blind.clone());
    let (s1, s2) = (started.clone(), started.clone());
    let watching_calls = tokio::spawn(async move { calls(&w, 200, 3, &s1).await });
    let blind_calls = tokio::spawn(async move { calls(&b, 200, 3, &s2).await });
    while started.load(Ordering::Relaxed) < 400 {
        tokio::task::yield_now().await;
    }
    std::thread::sleep(StdDuration::from_millis(300));
    watching_calls.await.unwrap();
    blind_calls.await.unwrap();
    // The probe fired late once the thread was free, and drains after two quiet probes (a
    // busy host may add an episode of its own: they are counted, not assumed absent).
    for _ in 0..400 {
        if !probe.is_saturated() {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(5)).await;
    }
    assert!(!probe.is_saturated(), "{:?}", probe.snapshot());
    let told = episodes.0.load(Ordering::Relaxed);
    assert!(
        told > before,
        "{told} episodes told, {before} before the stall"
    );
    assert_eq!(u64::from(told), probe.snapshot().episodes);

    // The policy that does not watch took the stall for the dependency's: its breaker opened.
    assert_eq!(
        snapshot(&blind).state,
        State::Open,
        "{:?}",
        snapshot(&blind)
    );
    // The one that watches counted 260 successes and learned none of the stall.
    let after = snapshot(&watching);
    assert_eq!(after.state, State::Closed, "{after:?}");
    assert_eq!(after.normal_latency, Some(learned), "{after:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn the_probe_stops_with_its_last_handle() {
    let settings = SaturationSettings::builder()
        .interval(Duration::from_millis(1))
        .build()
        .unwrap();
    let probe = SaturationProbe::spawn(settings);
    tokio::time::sleep(StdDuration::from_millis(10)).await;
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    drop(probe);
    tokio::time::sleep(StdDuration::from_millis(10)).await;
    let after = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    assert_eq!(after + 1, tasks);
}
