//! The subscription helper on tokio's paused clock: the schedule (1, 2, 4, ... 120, 120 s),
//! its cap, starting over after a success, reconnecting after a drop, cancellation.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use std::future::pending;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stormguard_core::{policy::SubscriptionStatus, Backoff};
use stormguard_std::subscription::{SubscriptionCancelled, SubscriptionEvent};
use stormguard_std::Subscription;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What the observer heard, simplified: (kind, attempt, retry_in in whole seconds).
type Heard = Arc<Mutex<Vec<(&'static str, u32, u64)>>>;

fn observed(name: &'static str) -> (Subscription, Heard) {
    let heard: Heard = Arc::default();
    let h = Arc::clone(&heard);
    let sub = Subscription::new(name).on_event(move |e: &SubscriptionEvent<'_>| {
        let row = match *e {
            SubscriptionEvent::AttemptFailed {
                attempt, retry_in, ..
            } => ("attempt_failed", attempt, retry_in.as_secs()),
            SubscriptionEvent::Connected { attempt, .. } => ("connected", attempt, 0),
            SubscriptionEvent::Lost { .. } => ("lost", 0, 0),
            _ => ("other", 0, 0),
        };
        h.lock().unwrap().push(row);
    });
    (sub, heard)
}

/// Seconds (whole) between successive instants.
fn gaps(times: &[Instant]) -> Vec<u64> {
    times.windows(2).map(|w| (w[1] - w[0]).as_secs()).collect()
}

/// A connect that fails the first `fails` times, recording when (and with which attempt
/// number) it was called; succeeds afterwards with the call's index.
fn flaky(
    fails: usize,
    calls: &Arc<Mutex<Vec<(Instant, u32)>>>,
) -> impl FnMut(u32) -> std::future::Ready<Result<usize, &'static str>> {
    let calls = Arc::clone(calls);
    move |attempt| {
        let mut c = calls.lock().unwrap();
        c.push((Instant::now(), attempt));
        let n = c.len();
        std::future::ready(if n <= fails {
            Err("connection refused")
        } else {
            Ok(n)
        })
    }
}

#[tokio::test(start_paused = true)]
async fn failed_attempts_wait_1_2_4_8_16_32_64_then_120_seconds() {
    let (mut sub, heard) = observed("feed");
    let calls = Arc::default();
    let r = sub
        .run(flaky(10, &calls), |n| async move { ControlFlow::Break(n) })
        .await;
    assert_eq!(r, Ok(11));
    let calls = calls.lock().unwrap();
    let times: Vec<_> = calls.iter().map(|c| c.0).collect();
    assert_eq!(gaps(&times), [1, 2, 4, 8, 16, 32, 64, 120, 120, 120]);
    // Exactly on schedule, not a millisecond late.
    assert_eq!(
        times[10] - times[0],
        Duration::from_secs(1 + 2 + 4 + 8 + 16 + 32 + 64 + 3 * 120)
    );
    let attempts: Vec<_> = calls.iter().map(|c| c.1).collect();
    assert_eq!(attempts, (1..=11).collect::<Vec<_>>());
    // Every failure is reported with the wait before the next attempt.
    let heard = heard.lock().unwrap();
    let failures: Vec<_> = heard
        .iter()
        .filter(|h| h.0 == "attempt_failed")
        .map(|h| (h.1, h.2))
        .collect();
    assert_eq!(
        failures,
        [
            (1, 1),
            (2, 2),
            (3, 4),
            (4, 8),
            (5, 16),
            (6, 32),
            (7, 64),
            (8, 120),
            (9, 120),
            (10, 120)
        ]
    );
    assert_eq!(heard.last(), Some(&("connected", 11, 0)));
}

#[tokio::test(start_paused = true)]
async fn the_wait_is_capped_at_two_minutes_and_attempts_never_stop() {
    let (mut sub, _) = observed("feed");
    let calls = Arc::default();
    let r = sub
        .run(flaky(60, &calls), |n| async move { ControlFlow::Break(n) })
        .await;
    assert_eq!(r, Ok(61));
    let times: Vec<_> = calls.lock().unwrap().iter().map(|c| c.0).collect();
    let g = gaps(&times);
    assert_eq!(g.len(), 60);
    assert!(g[7..].iter().all(|s| *s == 120), "{g:?}");
    assert_eq!(*g.iter().max().unwrap(), 120);
}

#[tokio::test(start_paused = true)]
async fn a_success_starts_the_schedule_over_and_a_drop_reconnects_at_once() {
    let (mut sub, heard) = observed("feed");
    let calls: Arc<Mutex<Vec<(Instant, u32)>>> = Arc::default();
    let c = Arc::clone(&calls);
    // Fails 4 times, connects (5th call), drops after an hour, then fails twice, connects.
    let connect = move |attempt: u32| {
        let mut v = c.lock().unwrap();
        v.push((Instant::now(), attempt));
        let n = v.len();
        std::future::ready(match n {
            5 | 8 => Ok(n),
            _ => Err("refused"),
        })
    };
    let r = sub
        .run(connect, |n| async move {
            if n == 5 {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(n)
            }
        })
        .await;
    assert_eq!(r, Ok(8));
    let calls = calls.lock().unwrap();
    let times: Vec<_> = calls.iter().map(|c| c.0).collect();
    // 1, 2, 4, 8 s; connected; an hour later it drops and is re-established at once (0 s);
    // that attempt fails and the schedule starts from the first delay again: 1, 2 s.
    assert_eq!(gaps(&times), [1, 2, 4, 8, 3600, 1, 2]);
    let attempts: Vec<_> = calls.iter().map(|c| c.1).collect();
    assert_eq!(attempts, [1, 2, 3, 4, 5, 1, 2, 3]);
    let kinds: Vec<_> = heard.lock().unwrap().iter().map(|h| h.0).collect();
    assert_eq!(
        kinds,
        [
            "attempt_failed",
            "attempt_failed",
            "attempt_failed",
            "attempt_failed",
            "connected",
            "lost",
            "attempt_failed",
            "attempt_failed",
            "connected"
        ]
    );
    assert_eq!(sub.retry().failures(), 0);
    assert_eq!(sub.retry().total_attempts(), 8);
}

#[tokio::test(start_paused = true)]
async fn cancelling_during_a_wait_stops_at_once() {
    let token = CancellationToken::new();
    let (sub, _) = observed("feed");
    let mut sub = sub.cancel_on(token.clone());
    let calls = Arc::default();
    let start = Instant::now();
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            // After the 3rd attempt (t = 3 s), during the 4 s wait.
            tokio::time::sleep(Duration::from_millis(3_500)).await;
            token.cancel();
        })
    };
    let r = sub
        .run(flaky(usize::MAX, &calls), |n| async move {
            ControlFlow::Break(n)
        })
        .await;
    assert_eq!(r, Err(SubscriptionCancelled));
    assert_eq!(Instant::now() - start, Duration::from_millis(3_500));
    assert_eq!(calls.lock().unwrap().len(), 3);
    assert!(matches!(
        sub.status(),
        SubscriptionStatus::Recovering { .. }
    ));
    canceller.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn cancelling_stops_a_hanging_connect_and_a_running_subscription() {
    // A connect that never returns.
    let token = CancellationToken::new();
    let mut sub = Subscription::new("feed").cancel_on(token.clone());
    let t = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        t.cancel();
    });
    let start = Instant::now();
    let r: Result<(), _> = sub
        .run(
            |_| pending::<Result<(), &str>>(),
            |()| async { ControlFlow::Break(()) },
        )
        .await;
    assert_eq!(r, Err(SubscriptionCancelled));
    assert_eq!(Instant::now() - start, Duration::from_secs(5));

    // A subscription that runs for ever: cancelled while established.
    let token = CancellationToken::new();
    let mut sub = Subscription::new("feed").cancel_on(token.clone());
    let t = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(7)).await;
        t.cancel();
    });
    let start = Instant::now();
    let r: Result<(), _> = sub
        .run(
            |_| async { Ok::<_, &str>(()) },
            |()| pending::<ControlFlow<()>>(),
        )
        .await;
    assert_eq!(r, Err(SubscriptionCancelled));
    assert_eq!(Instant::now() - start, Duration::from_secs(7));
    // No longer established once the helper stopped.
    assert_eq!(sub.status(), SubscriptionStatus::Pending);

    // A token cancelled beforehand: nothing is attempted.
    let mut tried = false;
    let r = Subscription::new("feed")
        .cancel_on(token)
        .run(
            |_| {
                tried = true;
                async { Ok::<_, &str>(()) }
            },
            |()| async { ControlFlow::Break(()) },
        )
        .await;
    assert_eq!(r, Err(SubscriptionCancelled));
    assert!(!tried);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_stops_the_helper() {
    let (mut sub, _) = observed("feed");
    let calls = Arc::default();
    let run = sub.run(flaky(usize::MAX, &calls), |n| async move {
        ControlFlow::Break(n)
    });
    // Dropped after 10 s: attempts at 0, 1, 3 and 7 s.
    assert!(tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .is_err());
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(calls.lock().unwrap().len(), 4);
    // The helper can be run again: its schedule goes on (the next wait would be 16 s).
    assert_eq!(sub.retry().failures(), 4);
    let r = sub
        .run(
            |_| async { Ok::<_, &str>(1) },
            |n| async move { ControlFlow::Break(n) },
        )
        .await;
    assert_eq!(r, Ok(1));
}

#[tokio::test(start_paused = true)]
async fn another_backoff_is_followed() {
    let quick = Backoff::subscription()
        .to_builder()
        .base(stormguard_core::Duration::from_millis(100))
        .throttled_base(stormguard_core::Duration::from_millis(100))
        .cap(stormguard_core::Duration::from_millis(500))
        .build()
        .unwrap();
    let mut sub = Subscription::new("feed").backoff(quick).seed(7);
    let calls = Arc::default();
    let r = sub
        .run(flaky(6, &calls), |n| async move { ControlFlow::Break(n) })
        .await;
    assert_eq!(r, Ok(7));
    let times: Vec<_> = calls.lock().unwrap().iter().map(|c| c.0).collect();
    let ms: Vec<_> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    assert_eq!(ms, [100, 200, 400, 500, 500, 500]);
}

#[test]
fn the_helper_and_its_future_are_send() {
    fn send<T: Send>(_: &T) {}
    let mut sub = Subscription::new("feed");
    send(&sub);
    let fut = sub.run(
        |_| async { Ok::<_, String>(()) },
        |()| async { ControlFlow::Break(()) },
    );
    send(&fut);
}

#[tokio::test(start_paused = true)]
async fn a_seeded_jittered_schedule_is_reproducible_and_bounded() {
    let jittered = Backoff::subscription()
        .to_builder()
        .jitter(stormguard_core::Jitter::Equal)
        .build()
        .unwrap();
    let mut schedules = Vec::new();
    for _ in 0..2 {
        // The seed given before the backoff is kept.
        let mut sub = Subscription::new("feed").seed(42).backoff(jittered);
        let calls = Arc::default();
        sub.run(flaky(9, &calls), |n| async move { ControlFlow::Break(n) })
            .await
            .unwrap();
        let times: Vec<_> = calls.lock().unwrap().iter().map(|c| c.0).collect();
        let ms: Vec<u128> = times
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect();
        // Equal jitter: between half the delay and the delay.
        for (got, full) in ms.iter().zip([1, 2, 4, 8, 16, 32, 64, 120, 120]) {
            assert!(
                (full * 500..=full * 1000).contains(got),
                "{got} ms of {full} s"
            );
        }
        schedules.push(ms);
    }
    assert_eq!(schedules[0], schedules[1]);
}

#[tokio::test(start_paused = true)]
async fn a_subscription_dropped_as_soon_as_it_connects_is_retried_on_the_schedule() {
    let (mut sub, _) = observed("flapping");
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let c = Arc::clone(&calls);
    // Every connection is accepted and dropped at once; the fifth run stops.
    let r = sub
        .run(
            move |_| {
                c.lock().unwrap().push(Instant::now());
                std::future::ready(Ok::<_, &str>(()))
            },
            {
                let calls = Arc::clone(&calls);
                move |()| {
                    let n = calls.lock().unwrap().len();
                    async move {
                        if n == 5 {
                            ControlFlow::Break(n)
                        } else {
                            ControlFlow::Continue(())
                        }
                    }
                }
            },
        )
        .await;
    assert_eq!(r, Ok(5));
    let times = calls.lock().unwrap().clone();
    // Never established: each drop waits the schedule's next delay instead of spinning.
    assert_eq!(gaps(&times), [1, 2, 4, 8]);
    // Stopping on purpose is no failure.
    assert_eq!(sub.retry().failures(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_zero_first_delay_reconnects_at_once_and_lets_other_tasks_run() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let zero = Backoff::subscription()
        .to_builder()
        .base(stormguard_core::Duration::ZERO)
        .build()
        .unwrap();
    let mut feed = Subscription::new("zero").backoff(zero);
    // A task beside the subscription: it runs even though every attempt fails at once.
    let beside = tokio::spawn(async { 42 });
    let start = Instant::now();
    let r = feed
        .run(flaky(50, &calls), |n| async move { ControlFlow::Break(n) })
        .await;
    assert_eq!(r, Ok(51));
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(calls.lock().unwrap().len(), 51);
    assert!(beside.is_finished());
    assert_eq!(beside.await.unwrap(), 42);
}

#[tokio::test(start_paused = true)]
async fn a_lost_subscription_reads_recovering_while_it_reconnects() {
    let token = CancellationToken::new();
    let mut feed = Subscription::new("feed").cancel_on(token.clone());
    let connects = Arc::new(Mutex::new(0u32));
    let c = Arc::clone(&connects);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        token.cancel();
    });
    let r: Result<(), _> = feed
        .run(
            move |_| {
                let c = Arc::clone(&c);
                async move {
                    let n = {
                        let mut n = c.lock().unwrap();
                        *n += 1;
                        *n
                    };
                    if n > 1 {
                        // The reconnection hangs until the helper is stopped.
                        pending::<()>().await;
                    }
                    Ok::<_, &str>(())
                }
            },
            // Established for 5 s, then dropped.
            |()| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                ControlFlow::Continue(())
            },
        )
        .await;
    assert_eq!(r, Err(SubscriptionCancelled));
    assert_eq!(*connects.lock().unwrap(), 2);
    assert!(
        matches!(feed.status(), SubscriptionStatus::Recovering { .. }),
        "{:?}",
        feed.status()
    );
}

/// A clock that reads tokio's (paused) time two hours on, until `stepped` is set: then an hour
/// less, as a wall clock corrected by an hour would.
#[derive(Clone, Debug)]
struct SteppedBack {
    start: Instant,
    stepped: Arc<std::sync::atomic::AtomicBool>,
}

impl stormguard_std::Clock for SteppedBack {
    fn now(&self) -> stormguard_core::Instant {
        let mut at = self.start.elapsed() + Duration::from_secs(7_200);
        if self.stepped.load(std::sync::atomic::Ordering::Acquire) {
            at -= Duration::from_secs(3_600);
        }
        stormguard_core::Instant::from_nanos(u64::try_from(at.as_nanos()).unwrap())
    }
}

#[tokio::test(start_paused = true)]
async fn a_clock_that_steps_back_during_a_wait_does_not_stretch_it() {
    // The first connection fails and the clock steps back an hour during the 1 s wait: the
    // retry comes 1 s later, not an hour and a second.
    let stepped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clock = SteppedBack {
        start: Instant::now(),
        stepped: Arc::clone(&stepped),
    };
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = Arc::clone(&calls);
    let start = Instant::now();
    // Half way through the wait after the first failure, the clock steps back.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        stepped.store(true, std::sync::atomic::Ordering::Release);
    });
    let result = Subscription::new("stepped")
        .backoff(Backoff::worker())
        .clock(clock)
        .run(
            move |_| {
                let mut c = seen.lock().unwrap();
                c.push(Instant::now());
                let first = c.len() == 1;
                std::future::ready(if first { Err("refused") } else { Ok(()) })
            },
            |()| async { ControlFlow::Break(()) },
        )
        .await;
    assert_eq!(result, Ok(()));
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 2);
    assert!(
        calls[1] - start <= Duration::from_secs(2),
        "retried {:?} after the start",
        calls[1] - start
    );
}
