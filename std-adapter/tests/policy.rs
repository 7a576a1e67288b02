//! The async policy on tokio's paused clock: guarded rejection, deadlines, budget, fallback,
//! caching and cancellation, with no real waiting.
#![cfg(feature = "tokio")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    missing_docs
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use stormguard_core::{
    Backoff, BreakerSettings, BudgetSettings, Duration, Event, Jitter, Outcome, RefusalReason,
    State, GUARD_PAUSE,
};
use stormguard_std::clock::TokioClock;
use stormguard_std::events::Ended;
use stormguard_std::{
    Breaker, Budget, CallError, CallOptions, Clock, Listener, Metrics, Policy, SuccessCache,
};
use tokio::time::Instant as TokioInstant;
use tokio_util::sync::CancellationToken;

mod support;
use support::{ms, no_jitter};

/// A breaker that opens on the first failure, breaks for exactly 10 s, and closes on one
/// successful probe.
fn touchy(name: &'static str) -> Breaker {
    Breaker::new(
        BreakerSettings::builder(name)
            .consecutive_failures(1)
            .failure_rate(None)
            .slow_calls(None)
            .jitter(false)
            .break_duration(Duration::from_secs(10))
            .probe_successes(1)
            .build()
            .unwrap(),
    )
}

/// Records each event with the (paused) tokio time it arrived at.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(TokioInstant, String)>>>);

impl Listener for Recorder {
    fn on_event(&self, event: &Event<'_>) {
        let line = match event {
            Event::Rejected { reason, delay, .. } => format!("rejected {reason} pause={delay}"),
            Event::StateChanged { to, .. } => format!("state {to}"),
            Event::Retry { attempt, delay, .. } => format!("retry #{attempt} in {delay}"),
            Event::Attempt { attempt, end, .. } => format!("attempt {attempt}: {end}"),
            other => other.kind().to_string(),
        };
        self.0.lock().unwrap().push((TokioInstant::now(), line));
    }
}

impl Recorder {
    fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, l)| l.clone())
            .collect()
    }
}

async fn ok(_: u32) -> Result<u32, &'static str> {
    Ok(7)
}

async fn fails(_: u32) -> Result<u32, &'static str> {
    Err("boom")
}

#[tokio::test(start_paused = true)]
async fn a_zero_backoff_retries_without_waiting() {
    let zero = Backoff::builder().base(Duration::ZERO).build().unwrap();
    for backoff in [Backoff::none(), zero] {
        let policy = Policy::builder("eager")
            .backoff(backoff)
            .max_attempts(4)
            .build()
            .unwrap();
        let attempts = AtomicU32::new(0);
        let start = TokioInstant::now();
        let r = policy
            .call(|_| {
                attempts.fetch_add(1, Ordering::Relaxed);
                fails(0)
            })
            .await;
        assert_eq!(r, Err(CallError::Failed("boom")));
        assert_eq!(attempts.load(Ordering::Relaxed), 4);
        assert_eq!(start.elapsed(), ms(0));
    }
}

#[tokio::test(start_paused = true)]
async fn the_rejection_pause_is_exactly_100_ms() {
    let policy = Policy::builder("pause").build().unwrap();
    policy.isolate();
    let start = TokioInstant::now();
    let r = policy.call(ok).await;
    assert_eq!(start.elapsed(), ms(100));
    let rejection = *r.unwrap_err().rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::Isolated);
    assert_eq!(rejection.pause, GUARD_PAUSE);
    assert_eq!(rejection.retry_after, Duration::MAX);
    assert_eq!(rejection.attempts, 0);
}

#[tokio::test(start_paused = true)]
async fn the_pause_is_40_ms_with_40_ms_of_deadline_left() {
    let policy = Policy::builder("deadline").build().unwrap();
    policy.isolate();
    let start = TokioInstant::now();
    let r = policy
        .call_with(CallOptions::new().within(ms(40)), ok)
        .await;
    assert_eq!(start.elapsed(), ms(40));
    assert_eq!(
        r.unwrap_err().rejection().unwrap().pause,
        Duration::from_millis(40)
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_retry_pauses_only_for_what_is_left_of_the_deadline() {
    // One retry's worth of budget (a floor of 0.1/s holds 1 token), already spent.
    let budget = Budget::new(
        BudgetSettings::builder("thin")
            .floor_per_second(0.1)
            .build()
            .unwrap(),
    );
    budget
        .shared()
        .try_withdraw(TokioClock::global().now())
        .unwrap();
    let policy = Policy::builder("thin")
        .budget(budget)
        .no_breaker()
        .deadline(ms(100))
        // A 100 ms wait could not end before the deadline (the call would end at once as
        // deadline exceeded); a 10 ms one could, so the budget is asked.
        .backoff(
            Backoff::builder()
                .base(Duration::from_millis(10))
                .jitter(Jitter::None)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let start = TokioInstant::now();
    let r = policy
        .call(|_| async {
            tokio::time::sleep(ms(60)).await;
            Err::<u32, _>("slow failure")
        })
        .await;
    assert_eq!(start.elapsed(), ms(100));
    match r {
        Err(CallError::Rejected { rejection, last }) => {
            assert_eq!(rejection.reason, RefusalReason::BudgetExhausted);
            assert_eq!(rejection.pause, Duration::from_millis(40));
            assert_eq!(rejection.last, Some(Outcome::Transient));
            assert_eq!(last, Some("slow failure"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn the_rejected_event_is_seen_before_the_pause_ends() {
    let recorder = Recorder::default();
    let policy = Policy::builder("announce")
        .listener(recorder.clone())
        .build()
        .unwrap();
    policy.isolate();
    let start = TokioInstant::now();
    let _ = policy.call(ok).await;
    let events = recorder.0.lock().unwrap().clone();
    let (at, line) = events.last().unwrap();
    assert_eq!(line, "rejected isolated pause=100ms");
    assert_eq!(*at, start, "announced when the pause began");
    assert_eq!(start.elapsed(), ms(100));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_ends_the_pause_at_once() {
    let metrics = Metrics::new("drop");
    let policy = Policy::builder("drop")
        .listener(metrics.clone())
        .build()
        .unwrap();
    policy.isolate();
    let start = TokioInstant::now();
    tokio::select! {
        _ = policy.call(ok) => panic!("the pause should still be running"),
        () = tokio::time::sleep(ms(30)) => {}
    }
    // The call ended where it was dropped, 30 ms into its 100 ms pause: announced as refused,
    // reported as cancelled at once, and nothing left to report when the pause would have
    // ended.
    let at_drop = metrics.snapshot();
    assert_eq!(at_drop.calls_ended("cancelled"), 1);
    assert_eq!(at_drop.calls_ended("rejected"), 0);
    tokio::time::sleep(ms(200)).await;
    assert_eq!(metrics.snapshot(), at_drop, "nothing ran on after the drop");
    assert_eq!(start.elapsed(), ms(230));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_token_ends_the_pause_at_once_with_a_cancellation() {
    let metrics = Metrics::new("token");
    let policy = Policy::builder("token")
        .listener(metrics.clone())
        .build()
        .unwrap();
    policy.isolate();
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(25)).await;
        canceller.cancel();
    });
    let start = TokioInstant::now();
    let r = policy
        .call_with(CallOptions::new().cancel_on(&token), ok)
        .await;
    assert_eq!(r, Err(CallError::Cancelled));
    assert_eq!(start.elapsed(), ms(25));
    assert_eq!(metrics.snapshot().calls_ended("cancelled"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_token_is_already_cancelled_runs_nothing() {
    let metrics = Metrics::new("cancelled-before");
    let breaker = touchy("cancelled-before");
    let policy = Policy::builder("cancelled-before")
        .breaker(breaker.clone())
        .listener(metrics.clone())
        .build()
        .unwrap();
    let token = CancellationToken::new();
    token.cancel();
    let runs = AtomicU32::new(0);
    let r = policy
        .call_with(CallOptions::new().cancel_on(&token), |_| {
            runs.fetch_add(1, Ordering::Relaxed);
            // A failure that would open this breaker if it were ever counted.
            std::future::ready(Err::<u32, _>("boom"))
        })
        .await;
    assert_eq!(r, Err(CallError::Cancelled));
    assert_eq!(runs.load(Ordering::Relaxed), 0, "the operation never ran");
    let s = metrics.snapshot();
    assert_eq!((s.attempts, s.calls_ended("cancelled")), (0, 1));
    assert_eq!(breaker.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_token_ends_a_backoff_wait_at_once() {
    let policy = Policy::builder("wait")
        .no_breaker()
        .backoff(no_jitter())
        .build()
        .unwrap();
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(50)).await;
        canceller.cancel();
    });
    let start = TokioInstant::now();
    let r = policy
        .call_with(CallOptions::new().cancel_on(&token), fails)
        .await;
    assert_eq!(r, Err(CallError::Cancelled));
    assert_eq!(
        start.elapsed(),
        ms(50),
        "mid-way through the 100 ms backoff"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_deadline() {
    let attempts = AtomicU32::new(0);
    let policy = Policy::builder("deadline")
        .no_breaker()
        .no_budget()
        .max_attempts(10)
        .deadline(ms(250))
        .backoff(no_jitter())
        .build()
        .unwrap();
    let start = TokioInstant::now();
    let r = policy
        .call(|_| {
            attempts.fetch_add(1, Ordering::Relaxed);
            fails(0)
        })
        .await;
    // 0 ms: fails, waits 100 ms; 100 ms: fails, a 200 ms wait would end past 250 ms.
    assert_eq!(r, Err(CallError::DeadlineExceeded { last: Some("boom") }));
    assert_eq!(attempts.load(Ordering::Relaxed), 2);
    assert_eq!(start.elapsed(), ms(100));
}

#[tokio::test(start_paused = true)]
async fn the_budgets_retry_after_is_exact_on_a_clock_started_mid_millisecond() {
    for into_ms in [0, 1, 250_000, 999_999] {
        let start = stormguard_core::Instant::from_nanos(7_000_000_000 + into_ms);
        let clock = stormguard_std::ManualClock::starting_at(start);
        let budget = Budget::new(BudgetSettings::defaults("exact"));
        while budget.shared().try_withdraw(clock.now()).is_ok() {}
        let policy = Policy::builder("exact")
            .no_breaker()
            .budget(budget.clone())
            .backoff(no_jitter())
            .clock(clock.clone())
            .build()
            .unwrap();
        let r = policy.call(fails).await;
        let Err(CallError::Rejected { rejection, .. }) = r else {
            panic!("{r:?}")
        };
        // One token at 3 per second, rounded up to the millisecond (334 ms), less the pause:
        // the same wherever in its millisecond the clock started.
        assert_eq!(rejection.pause, GUARD_PAUSE, "{into_ms} ns in");
        assert_eq!(
            rejection.retry_after,
            Duration::from_millis(234),
            "{into_ms} ns in"
        );
        let asked_again = start + rejection.pause + rejection.retry_after;
        assert_eq!(budget.shared().try_withdraw(asked_again), Ok(()));
    }
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_an_empty_budget() {
    let budget = Budget::new(
        BudgetSettings::builder("one-retry")
            .floor_per_second(0.1)
            .build()
            .unwrap(),
    );
    let policy = Policy::builder("budget")
        .no_breaker()
        .budget(budget.clone())
        .max_attempts(5)
        .backoff(no_jitter())
        .build()
        .unwrap();
    let attempts = AtomicU32::new(0);
    let start = TokioInstant::now();
    let r = policy
        .call(|_| {
            attempts.fetch_add(1, Ordering::Relaxed);
            fails(0)
        })
        .await;
    match r {
        Err(CallError::Rejected { rejection, last }) => {
            assert_eq!(rejection.reason, RefusalReason::BudgetExhausted);
            assert_eq!(rejection.attempts, 2);
            assert_eq!(last, Some("boom"));
            assert!(rejection.retry_after > Duration::ZERO);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(attempts.load(Ordering::Relaxed), 2);
    // A 100 ms backoff, then the refused retry's 100 ms pause.
    assert_eq!(start.elapsed(), ms(200));
    assert_eq!(budget.shared().available(TokioClock::global().now()), 0);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_past_its_timeout_is_cut_off_as_timed_out() {
    let policy = Policy::builder("slow")
        .no_budget()
        .max_attempts(2)
        .attempt_timeout(ms(300))
        .backoff(no_jitter())
        .build()
        .unwrap();
    let start = TokioInstant::now();
    let r = policy
        .call(|attempt| async move {
            if attempt == 1 {
                Err("refused")
            } else {
                tokio::time::sleep(ms(10_000)).await;
                Ok(1)
            }
        })
        .await;
    assert_eq!(
        r,
        Err(CallError::TimedOut {
            last: Some("refused")
        })
    );
    assert_eq!(start.elapsed(), ms(100 + 300));
}

#[tokio::test(start_paused = true)]
async fn a_throttled_answer_whose_hint_outlasts_the_deadline_is_handed_back() {
    let policy = Policy::builder("throttled")
        .no_breaker()
        .deadline(ms(30_000))
        .build()
        .unwrap();
    let start = TokioInstant::now();
    // The answer is an `Ok` (an HTTP response) the classifier calls throttled, for 60 s.
    let r = policy
        .call_with(
            CallOptions::new().classify(|r: &Result<u16, ()>| match r {
                Ok(429) => Outcome::Throttled {
                    retry_after: Some(Duration::from_secs(60)),
                },
                Ok(_) => Outcome::Success,
                Err(()) => Outcome::Transient,
            }),
            |_| async { Ok(429) },
        )
        .await;
    // No retry fits before the deadline: the caller gets the answer, at once.
    assert_eq!(r, Ok(429));
    assert_eq!(start.elapsed(), ms(0));
}

#[tokio::test(start_paused = true)]
async fn a_throttled_outcome_waits_its_retry_after() {
    let policy = Policy::builder("throttled")
        .no_breaker()
        .backoff(no_jitter())
        .build()
        .unwrap();
    let times = Mutex::new(Vec::new());
    let start = TokioInstant::now();
    let r = policy
        .call_with(
            CallOptions::new().classify(|r: &Result<u32, u16>| match r {
                Ok(_) => Outcome::Success,
                Err(429) => Outcome::Throttled {
                    retry_after: Some(Duration::from_secs(2)),
                },
                Err(_) => Outcome::Transient,
            }),
            |attempt| {
                times.lock().unwrap().push(start.elapsed());
                async move {
                    if attempt == 1 {
                        Err(429)
                    } else {
                        Ok(5)
                    }
                }
            },
        )
        .await;
    assert_eq!(r, Ok(5));
    assert_eq!(*times.lock().unwrap(), [ms(0), ms(2_000)]);
}

#[tokio::test(start_paused = true)]
async fn the_fallback_replaces_refusals_after_the_same_pause() {
    let policy = Policy::builder("fallback").build().unwrap();
    policy.isolate();
    let start = TokioInstant::now();
    let seen = Mutex::new(None);
    let r = policy
        .call_or(
            |rejection| {
                *seen.lock().unwrap() = Some(rejection.reason);
                0
            },
            ok,
        )
        .await;
    assert_eq!(r, Ok(0));
    assert_eq!(start.elapsed(), ms(100));
    assert_eq!(*seen.lock().unwrap(), Some(RefusalReason::Isolated));
}

#[tokio::test(start_paused = true)]
async fn the_fallback_never_hides_a_dependency_failure() {
    let policy = Policy::builder("no-fallback")
        .max_attempts(1)
        .build()
        .unwrap();
    let r = policy.call_or(|_| 0, fails).await;
    assert_eq!(r, Err(CallError::Failed("boom")));
    assert_eq!(policy.breaker().unwrap().state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_success_is_served_from_the_cache_until_it_expires() {
    let policy = Policy::builder("cached").build().unwrap();
    let cache = SuccessCache::new(Duration::from_secs(5)).unwrap();
    let calls = AtomicU32::new(0);
    let fetch = || {
        policy.call_cached(&cache, |_| async {
            Ok::<_, ()>(calls.fetch_add(1, Ordering::Relaxed))
        })
    };
    assert_eq!(fetch().await, Ok(0));
    tokio::time::advance(ms(4_999)).await;
    assert_eq!(fetch().await, Ok(0), "fresh: served without a call");
    tokio::time::advance(ms(1)).await;
    assert_eq!(
        fetch().await,
        Ok(1),
        "expired at exactly the ttl: called again"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn a_cached_success_is_served_only_while_the_breaker_is_closed() {
    let policy = Policy::builder("cached-closed").build().unwrap();
    let cache = SuccessCache::new(Duration::from_secs(60)).unwrap();
    let calls = AtomicU32::new(0);
    let fetch = || {
        policy.call_cached(&cache, |_| async {
            Ok::<_, ()>(calls.fetch_add(1, Ordering::Relaxed))
        })
    };
    assert_eq!(fetch().await, Ok(0));
    assert_eq!(fetch().await, Ok(0));
    // Not closed: the fresh value is not served; the call goes to the breaker, which refuses.
    policy.isolate();
    let start = TokioInstant::now();
    assert!(matches!(fetch().await, Err(CallError::Rejected { .. })));
    assert_eq!(start.elapsed(), GUARD_PAUSE.into());
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    // A refusal is no failure: once closed again, the value is served.
    policy.reset();
    assert_eq!(fetch().await, Ok(0));
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failure_clears_the_cached_success() {
    let policy = Policy::builder("cached-cleared")
        .breaker(touchy("cached-cleared"))
        .max_attempts(1)
        .build()
        .unwrap();
    let cache = SuccessCache::new(Duration::from_secs(60)).unwrap();
    assert_eq!(policy.call_cached(&cache, ok).await, Ok(7));
    // A failure elsewhere opens the breaker; after its break, the cached call is the probe.
    assert_eq!(policy.call(fails).await, Err(CallError::Failed("boom")));
    tokio::time::advance(ms(10_000)).await;
    assert_eq!(policy.breaker().unwrap().state(), State::HalfOpen);
    assert_eq!(
        policy.call_cached(&cache, fails).await,
        Err(CallError::Failed("boom"))
    );
    assert_eq!(cache.get(TokioClock::global().now()), None, "cleared");
}

#[tokio::test(start_paused = true)]
async fn concurrent_callers_of_an_empty_entry_share_one_call() {
    let policy = Policy::builder("cached-shared").build().unwrap();
    let cache = SuccessCache::new(Duration::from_secs(60)).unwrap();
    let calls = AtomicU32::new(0);
    let fetch = || {
        policy.call_cached(&cache, |_| async {
            let n = calls.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(ms(100)).await;
            Ok::<_, ()>(n)
        })
    };
    let start = TokioInstant::now();
    let all = tokio::join!(fetch(), fetch(), fetch(), fetch(), fetch());
    assert_eq!(all, (Ok(0), Ok(0), Ok(0), Ok(0), Ok(0)));
    assert_eq!(calls.load(Ordering::Relaxed), 1, "one operation run");
    assert_eq!(start.elapsed(), ms(100), "the others waited for its result");
}

#[tokio::test(start_paused = true)]
async fn errors_and_fallbacks_are_never_cached() {
    let policy = Policy::builder("uncached").max_attempts(1).build().unwrap();
    let cache = SuccessCache::new(Duration::from_secs(60)).unwrap();
    assert_eq!(
        policy.call_cached(&cache, fails).await,
        Err(CallError::Failed("boom"))
    );
    assert_eq!(cache.get(TokioClock::global().now()), None);
    // A classifier that calls an `Ok` a failure: the value comes back, but is not cached.
    let r = policy
        .call_cached_with(
            CallOptions::new().classify(|_: &Result<u32, ()>| Outcome::Transient),
            &cache,
            |_| async { Ok(3) },
        )
        .await;
    assert_eq!(r, Ok(3));
    assert_eq!(cache.get(TokioClock::global().now()), None);
}

#[tokio::test(start_paused = true)]
async fn cancellation_never_counts_as_a_failure() {
    let breaker = touchy("cancel");
    let policy = Policy::builder("cancel")
        .breaker(breaker.clone())
        .build()
        .unwrap();
    // By token, mid-attempt.
    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(10)).await;
        canceller.cancel();
    });
    let r = policy
        .call_with(CallOptions::new().cancel_on(&token), |_| async {
            tokio::time::sleep(ms(1_000)).await;
            Err::<u32, _>("never")
        })
        .await;
    assert_eq!(r, Err(CallError::Cancelled));
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(breaker.snapshot().consecutive_failures, 0);
    // By dropping the future, mid-attempt.
    tokio::select! {
        _ = policy.call(|_| async {
            tokio::time::sleep(ms(1_000)).await;
            Err::<u32, _>("never")
        }) => panic!("still running"),
        () = tokio::time::sleep(ms(10)) => {}
    }
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(breaker.snapshot().consecutive_failures, 0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_probe_gives_its_slot_back() {
    let breaker = touchy("probe");
    let policy = Policy::builder("probe")
        .breaker(breaker.clone())
        .max_attempts(1)
        .build()
        .unwrap();
    assert_eq!(policy.call(fails).await, Err(CallError::Failed("boom")));
    assert_eq!(breaker.state(), State::Open);
    tokio::time::advance(ms(10_000)).await;
    assert_eq!(breaker.state(), State::HalfOpen);
    // The only probe slot is taken by an attempt whose caller goes away.
    tokio::select! {
        _ = policy.call(|_| async {
            tokio::time::sleep(ms(1_000)).await;
            Ok::<u32, &str>(1)
        }) => panic!("still running"),
        () = tokio::time::sleep(ms(10)) => {}
    }
    assert_eq!(breaker.snapshot().probes_in_flight, 0);
    // The next caller gets the slot at once, and its success closes the breaker.
    assert_eq!(policy.call(ok).await, Ok(7));
    assert_eq!(breaker.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_refuses_with_its_remaining_break_as_retry_after() {
    let breaker = touchy("open");
    let recorder = Recorder::default();
    let policy = Policy::builder("open")
        .breaker(breaker.clone())
        .max_attempts(1)
        .listener(recorder.clone())
        .build()
        .unwrap();
    let _ = policy.call(fails).await;
    tokio::time::advance(ms(4_000)).await;
    let r = policy.call(ok).await.unwrap_err();
    let rejection = r.rejection().unwrap();
    assert_eq!(rejection.reason, RefusalReason::BreakerOpen);
    // 6 s of break were left when refused; retry_after counts from the end of the pause.
    let after = rejection.retry_after;
    assert_eq!(after, Duration::from_millis(5_900));
    assert_eq!(r.retry_after(), Some(after));
    assert_eq!(
        recorder.lines(),
        [
            "attempt 1: transient failure after 0s",
            "state open",
            "attempt 1: refused locally (breaker_open)",
            "rejected breaker_open pause=100ms"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_breaker_half_opens_exactly_when_its_break_has_elapsed() {
    // Tokio's paused clock starts at no whole microsecond or millisecond of the policy's clock.
    let breaker = touchy("exact");
    let policy = Policy::builder("exact")
        .breaker(breaker.clone())
        .max_attempts(1)
        .build()
        .unwrap();
    let _ = policy.call(fails).await;
    assert_eq!(breaker.state(), State::Open);
    tokio::time::advance(ms(10_000) - StdDuration::from_nanos(1)).await;
    assert_eq!(breaker.state(), State::Open);
    tokio::time::advance(StdDuration::from_nanos(1)).await;
    assert_eq!(breaker.state(), State::HalfOpen);
    assert_eq!(policy.call(ok).await, Ok(7));
    assert_eq!(breaker.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn metrics_count_calls_attempts_retries_and_rejections() {
    let policy = Policy::builder("counted")
        .breaker(touchy("counted"))
        .backoff(no_jitter())
        .build()
        .unwrap();
    let metrics = Metrics::for_policy(&policy);
    let policy = policy.with_listener(metrics.clone());
    assert_eq!(policy.call(ok).await, Ok(7));
    // Opens on the first failure: the retry is refused by the open breaker.
    let _ = policy.call(fails).await;
    let s = metrics.snapshot();
    assert_eq!(s.calls, 2);
    assert_eq!(s.calls_ended("succeeded"), 1);
    assert_eq!(s.calls_ended("rejected"), 1);
    assert_eq!(s.attempts, 2);
    assert_eq!(s.retries, 1);
    assert_eq!(s.rejected_for("breaker_open"), 1);
    assert_eq!(s.entered("open"), 1);
    assert_eq!(s.breaker_state, Some("open"));
    assert!(s.budget_utilization.unwrap() > 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_is_reported_as_cancelled() {
    #[derive(Clone, Default)]
    struct Ends(Arc<Mutex<Vec<Ended>>>);
    impl Listener for Ends {
        fn on_call(&self, _: &stormguard_core::Name, _: u32, ended: Ended) {
            self.0.lock().unwrap().push(ended);
        }
    }
    let ends = Ends::default();
    let policy = Policy::builder("dropped")
        .listener(ends.clone())
        .build()
        .unwrap();
    tokio::select! {
        _ = policy.call(|_| async {
            tokio::time::sleep(ms(1_000)).await;
            Ok::<u32, ()>(1)
        }) => panic!("still running"),
        () = tokio::time::sleep(ms(10)) => {}
    }
    assert_eq!(*ends.0.lock().unwrap(), [Ended::Cancelled]);
}

#[tokio::test(start_paused = true)]
async fn a_call_starts_when_first_polled_not_when_made() {
    let policy = Policy::builder("lazy")
        .deadline(Duration::from_secs(1))
        .no_breaker()
        .build()
        .unwrap();
    let call = policy.call(|_| async { Ok::<_, ()>(7) });
    // Made long before it runs: its deadline counts from its first poll.
    tokio::time::advance(ms(5_000)).await;
    assert_eq!(call.await, Ok(7));
}

#[tokio::test(start_paused = true)]
async fn calls_that_begin_at_the_same_instant_draw_different_jitter() {
    // Paused time: every call below begins at the same instant, fails once at the same instant
    // and draws its backoff from full jitter. Equal draws would send their retries in step.
    let recorder = Recorder::default();
    let policy = Policy::builder("jittered")
        .no_breaker()
        .no_budget()
        .seed(7)
        .listener(recorder.clone())
        .build()
        .unwrap();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let policy = policy.clone();
        calls.spawn(async move {
            let failed = AtomicU32::new(0);
            policy
                .call(|_| {
                    let first = failed.fetch_add(1, Ordering::Relaxed) == 0;
                    async move {
                        if first {
                            Err("flaky")
                        } else {
                            Ok(())
                        }
                    }
                })
                .await
        });
    }
    while let Some(result) = calls.join_next().await {
        assert_eq!(result.unwrap(), Ok(()));
    }
    let mut drawn: Vec<String> = recorder
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("retry #2 in"))
        .collect();
    assert_eq!(drawn.len(), 8, "{drawn:?}");
    drawn.sort();
    drawn.dedup();
    assert!(
        drawn.len() >= 6,
        "only {} distinct delays: {drawn:?}",
        drawn.len()
    );
}

#[test]
fn a_policy_breaker_or_budget_with_a_blank_or_control_character_name_is_refused() {
    use stormguard_core::{Bound, Field, SettingsError};
    for (name, bound) in [
        ("", Bound::NotBlank),
        (" ", Bound::NotBlank),
        ("db\"}\n", Bound::NoControlCharacters),
    ] {
        let want = SettingsError {
            field: Field::Name,
            bound,
        };
        assert_eq!(Policy::builder(name).build().err(), Some(want));
        // Refused by the policy itself, even with a breaker and budget of good names.
        let given = Policy::builder(name)
            .breaker(Breaker::of(3, "db").unwrap())
            .budget(Budget::defaults("db"))
            .build();
        assert_eq!(given.err(), Some(want));
        assert_eq!(Breaker::of(3, name).err(), Some(want));
    }
}

/// A manual clock that counts its readings.
#[derive(Clone, Default)]
struct CountingClock {
    clock: stormguard_std::ManualClock,
    reads: Arc<AtomicU32>,
}

impl Clock for CountingClock {
    fn now(&self) -> stormguard_core::Instant {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.clock.now()
    }
}

impl CountingClock {
    /// The readings a successful call through a policy on this clock takes.
    async fn reads_per_success<L: Listener>(&self, policy: &Policy<CountingClock, L>) -> u32 {
        let before = self.reads.load(Ordering::Relaxed);
        assert_eq!(policy.call(|_| async { Ok::<_, ()>(1) }).await, Ok(1));
        self.reads.load(Ordering::Relaxed) - before
    }
}

#[tokio::test(start_paused = true)]
async fn a_success_nothing_times_takes_one_clock_reading_and_a_timed_one_two() {
    let clock = CountingClock::default();
    let untimed = Policy::builder("untimed")
        .breaker(touchy("untimed"))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(clock.reads_per_success(&untimed).await, 1);
    // Counters take no duration either.
    let counted = untimed.clone().with_listener(Metrics::for_policy(&untimed));
    assert_eq!(clock.reads_per_success(&counted).await, 1);
    // A listener that takes durations, a breaker that keeps statistics: the end is read.
    let heard = untimed.clone().with_listener(Recorder::default());
    assert_eq!(clock.reads_per_success(&heard).await, 2);
    let learning = Policy::builder("learning")
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(clock.reads_per_success(&learning).await, 2);
}

#[tokio::test(start_paused = true)]
async fn a_failure_is_settled_when_it_ended_though_a_success_would_not_be_read() {
    let clock = CountingClock::default();
    let breaker = touchy("slow-failure");
    let policy = Policy::builder("slow-failure")
        .breaker(breaker.clone())
        .clock(clock.clone())
        .max_attempts(1)
        .build()
        .unwrap();
    let started = clock.clock.now();
    let r = policy
        .call(|_| {
            let clock = clock.clone();
            async move {
                clock.clock.advance(Duration::from_secs(5));
                Err::<u32, _>("boom")
            }
        })
        .await;
    assert_eq!(r, Err(CallError::Failed("boom")));
    // Opened at the failure's end (5 s in), for 10 s: not at the attempt's start.
    let ended = started + Duration::from_secs(5);
    let open_until = ended + Duration::from_secs(10);
    assert_eq!(
        breaker.state_at(open_until - Duration::from_millis(1)),
        State::Open
    );
    assert_eq!(breaker.state_at(open_until), State::HalfOpen);
}

#[test]
fn a_breaker_driven_by_hand_reads_the_clock_only_for_what_a_rule_needs() {
    let clock = CountingClock::default();
    let reads = || clock.reads.load(Ordering::Relaxed);
    let breaker = touchy("by-hand");
    for _ in 0..3 {
        breaker
            .try_acquire_on(&clock)
            .unwrap()
            .record_on(&clock, Outcome::Success);
    }
    assert_eq!(
        reads(),
        0,
        "closed, consecutive failures only: nothing to time"
    );
    // The failure opens it at its time; a refusal reads the time to the break's end.
    breaker
        .try_acquire_on(&clock)
        .unwrap()
        .record_on(&clock, Outcome::Transient);
    assert_eq!(reads(), 1);
    let refused = breaker.try_acquire_on(&clock).unwrap_err();
    assert_eq!(refused.reason, RefusalReason::BreakerOpen);
    assert_eq!(refused.retry_after, Duration::from_secs(10));
    assert_eq!(reads(), 2);
    // Half-open: the probe's permit, dropped without an outcome, frees its slot.
    clock.clock.advance(Duration::from_secs(10));
    let probe = breaker.try_acquire_on(&clock).unwrap();
    assert!(
        breaker.try_acquire_on(&clock).is_err(),
        "one probe at a time"
    );
    drop(probe);
    breaker
        .try_acquire_on(&clock)
        .unwrap()
        .record_on(&clock, Outcome::Success);
    assert_eq!(breaker.state_at(clock.clock.now()), State::Closed);
    // A breaker that keeps statistics times every attempt: two readings each.
    let learning = Breaker::new(BreakerSettings::defaults("learning"));
    let before = reads();
    learning
        .try_acquire_on(&clock)
        .unwrap()
        .record_on(&clock, Outcome::Success);
    assert_eq!(reads() - before, 2);
}
