//! Many tasks on a multi-threaded runtime hammering one breaker through open, half-open and
//! closed cycles. The fake dependency counts half-open probes in flight: never above the
//! limit, and no slot lost (the breaker still closes at the end).
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use stormguard_core::{BreakerSettings, Duration, Event, State};
use stormguard_std::{Breaker, Listener, Policy};

const PROBES: u32 = 2;

thread_local! {
    /// Set by the `ProbeStarted` event, which the core emits on the thread that was just
    /// granted the probe, in the same poll that then calls the operation.
    static PROBE: Cell<bool> = const { Cell::new(false) };
}

#[derive(Clone, Default)]
struct ProbeMarker(Arc<AtomicU64>);

impl Listener for ProbeMarker {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::ProbeStarted { .. } = event {
            PROBE.with(|p| p.set(true));
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
struct Dependency {
    healthy: AtomicBool,
    probes_in_flight: AtomicU32,
    most_probes: AtomicU32,
    probes: AtomicU64,
    calls: AtomicU64,
}

impl Dependency {
    async fn call(&self, probe: bool) -> Result<(), ()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if probe {
            self.probes.fetch_add(1, Ordering::Relaxed);
            let now = self.probes_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_probes.fetch_max(now, Ordering::SeqCst);
        }
        tokio::time::sleep(StdDuration::from_millis(2)).await;
        if probe {
            self.probes_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        if self.healthy.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err(())
        }
    }
}

/// Decrements the probe count if a probe's call is dropped mid-flight.
struct Flight<'a>(&'a Dependency, bool);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.probes_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_in_flight_never_exceed_the_limit_and_no_slot_is_lost() {
    // A break far longer than a probe (2 ms), so that breaker periods never overlap: every
    // probe of one period has ended before the next period's probes start.
    let breaker = Breaker::new(
        BreakerSettings::builder("hammered")
            .consecutive_failures(3)
            .failure_rate(None)
            .slow_calls(None)
            .half_open_probes(PROBES)
            .probe_successes(4)
            .break_duration(Duration::from_millis(60))
            .max_break(Duration::from_millis(60))
            .jitter(false)
            .build()
            .unwrap(),
    );
    let marker = ProbeMarker::default();
    let policy = Arc::new(
        Policy::builder("hammered")
            .breaker(breaker.clone())
            .no_budget()
            .max_attempts(1)
            .attempt_timeout(StdDuration::from_secs(5))
            .listener(marker.clone())
            .build()
            .unwrap(),
    );
    let dep = Arc::new(Dependency::default());
    dep.healthy.store(true, Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let opens = Arc::new(AtomicU32::new(0));

    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..16u32 {
        let (policy, dep, stop) = (policy.clone(), dep.clone(), stop.clone());
        tasks.spawn(async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let dep2 = dep.clone();
                let call = policy.call(move |_| {
                    let probe = PROBE.with(|p| p.replace(false));
                    let dep = dep2.clone();
                    async move {
                        // Counted out again if this call is dropped mid-flight.
                        let flight = Flight(&dep, probe);
                        let r = dep.call(probe).await;
                        std::mem::forget(flight);
                        r
                    }
                });
                if (n + id).is_multiple_of(7) {
                    // Some callers give up after 1 ms: their permits must come back.
                    let _ = tokio::time::timeout(StdDuration::from_millis(1), call).await;
                } else {
                    let _ = call.await;
                }
                tokio::time::sleep(StdDuration::from_micros(500)).await;
            }
        });
    }

    // Cycles: the dependency fails (the breaker opens; probes fail and re-open it), then
    // heals (probes succeed and close it).
    let start = StdInstant::now();
    for _ in 0..6 {
        dep.healthy.store(false, Ordering::Relaxed);
        tokio::time::sleep(StdDuration::from_millis(150)).await;
        if breaker.state() != State::Closed {
            opens.fetch_add(1, Ordering::Relaxed);
        }
        dep.healthy.store(true, Ordering::Relaxed);
        tokio::time::sleep(StdDuration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert!(start.elapsed() < StdDuration::from_secs(20));

    let most = dep.most_probes.load(Ordering::SeqCst);
    assert!(most <= PROBES, "{most} probes in flight at once");
    assert!(
        opens.load(Ordering::Relaxed) >= 3,
        "the breaker kept opening"
    );
    assert!(dep.probes.load(Ordering::Relaxed) > 0);
    assert_eq!(
        dep.probes.load(Ordering::Relaxed),
        marker.0.load(Ordering::Relaxed)
    );
    // No slot was lost: with the dependency healthy, the breaker closes again.
    let deadline = StdInstant::now() + StdDuration::from_secs(5);
    while breaker.state() != State::Closed {
        assert!(StdInstant::now() < deadline, "stuck in {}", breaker.state());
        let _ = policy.call(|_| async { Ok::<(), ()>(()) }).await;
        tokio::time::sleep(StdDuration::from_millis(5)).await;
    }
    assert_eq!(breaker.snapshot().probes_in_flight, 0);
    assert_eq!(dep.probes_in_flight.load(Ordering::SeqCst), 0);
}
