//! The breaker's behaviours, each driven by synthetic time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::call::Gate;
use stormguard_core::{
    limits::RateLimitSettings, limits::RateLimiter, Breaker, BreakerSettings, Duration, Event,
    FailureRate, Instant, Outcome, Ratio, Recovery, RefusalReason, Refused, SlowCalls, State,
    TripReason,
};

mod support;
use support::{ms, secs};

const MS: Duration = Duration::from_millis(1);

/// One attempt at `at`, lasting `latency`, ending with `outcome`.
#[track_caller]
fn call(b: &mut Breaker, at: Instant, latency: Duration, outcome: Outcome) -> Result<(), Refused> {
    let p = b.try_acquire(at)?;
    b.on_outcome(at + latency, p, outcome, &mut |_| {});
    Ok(())
}

/// Like [`call`], collecting the trip reasons of the events.
#[track_caller]
fn call_seeing(
    b: &mut Breaker,
    at: Instant,
    latency: Duration,
    outcome: Outcome,
    trips: &mut Vec<TripReason>,
) -> Result<(), Refused> {
    let p = b.try_acquire(at)?;
    b.on_outcome(at + latency, p, outcome, &mut |e| {
        if let Event::StateChanged {
            to: State::Open,
            reason: Some(r),
            ..
        } = e
        {
            trips.push(r);
        }
    });
    Ok(())
}

fn unjittered(name: &'static str) -> BreakerSettings {
    BreakerSettings::builder(name)
        .jitter(false)
        .build()
        .unwrap()
}

/// Trips a breaker with five transient failures at `at`.
#[track_caller]
fn trip(b: &mut Breaker, at: Instant) {
    for _ in 0..5 {
        call(b, at, Duration::ZERO, Outcome::Transient).unwrap();
    }
    assert_eq!(b.state(at), State::Open);
}

#[test]
fn five_consecutive_failures_open_and_four_do_not() {
    let mut b = Breaker::of(5, "payments").unwrap();
    let t = Instant::from_secs(1);
    for _ in 0..4 {
        call(&mut b, t, ms(5), Outcome::Transient).unwrap();
    }
    assert_eq!(b.state(t), State::Closed);
    assert_eq!(b.snapshot(t).consecutive_failures, 4);
    call(&mut b, t, ms(5), Outcome::Transient).unwrap();
    assert_eq!(b.state(t + ms(5)), State::Open);
}

#[test]
fn a_success_resets_the_consecutive_count() {
    let mut b = Breaker::of(5, "payments").unwrap();
    let t = Instant::from_secs(1);
    for _ in 0..4 {
        call(&mut b, t, MS, Outcome::Transient).unwrap();
    }
    call(&mut b, t, MS, Outcome::Success).unwrap();
    for _ in 0..4 {
        call(&mut b, t, MS, Outcome::Transient).unwrap();
    }
    assert_eq!(b.state(t), State::Closed);
}

#[test]
fn throttled_and_permanent_outcomes_neither_count_nor_reset() {
    let mut b = Breaker::of(5, "payments").unwrap();
    let t = Instant::from_secs(1);
    for _ in 0..4 {
        call(&mut b, t, MS, Outcome::Transient).unwrap();
    }
    for _ in 0..20 {
        call(
            &mut b,
            t,
            MS,
            Outcome::Throttled {
                retry_after: Some(secs(1)),
            },
        )
        .unwrap();
        call(&mut b, t, MS, Outcome::Permanent).unwrap();
    }
    assert_eq!(
        b.snapshot(t).consecutive_failures,
        4,
        "neither counted nor reset"
    );
    assert_eq!(
        b.snapshot(t).window_calls,
        4,
        "left out of both sides of the ratios"
    );
    call(&mut b, t, MS, Outcome::Transient).unwrap();
    assert_eq!(b.state(t), State::Open);
}

#[test]
fn caller_cancellation_never_counts_as_a_failure() {
    let mut b = Breaker::of(2, "payments").unwrap();
    let t = Instant::from_secs(1);
    for _ in 0..50 {
        call(&mut b, t, MS, Outcome::Cancelled).unwrap();
    }
    assert_eq!(b.state(t), State::Closed);
    assert_eq!(b.snapshot(t).window_calls, 0);
}

#[test]
fn an_attempt_timeout_is_a_transient_failure() {
    let mut b = Breaker::of(3, "radio").unwrap();
    let t = Instant::from_secs(1);
    for _ in 0..3 {
        call(&mut b, t, secs(10), Outcome::TimedOut).unwrap();
    }
    assert_eq!(b.state(t + secs(10)), State::Open);
}

#[test]
fn open_refuses_with_the_remaining_break_as_retry_after() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    trip(&mut b, t);
    let r = b.try_acquire(t).unwrap_err();
    assert_eq!(
        r,
        Refused {
            reason: RefusalReason::BreakerOpen,
            retry_after: secs(15)
        }
    );
    let r = b.try_acquire(t + secs(4)).unwrap_err();
    assert_eq!(r.retry_after, secs(11));
    assert_eq!(b.snapshot(t + secs(4)).until_half_open, secs(11));
}

/// Instants off any whole microsecond or millisecond, as a real clock or tokio's paused clock
/// gives them, and one past 2^55 ns (over a year of the clock), where break ends are kept in
/// whole microseconds.
const UNALIGNED: [u64; 4] = [
    1_000_000_123,
    7_777_777_777,
    86_400_000_000_999,
    (1 << 55) + 123,
];

#[test]
fn a_break_ends_exactly_when_it_has_lasted_its_length() {
    for nanos in UNALIGNED {
        let mut b = Breaker::new(unjittered("payments"));
        let t = Instant::from_nanos(nanos);
        trip(&mut b, t);
        let r = b.try_acquire(t).unwrap_err();
        let end = t + secs(15);
        if nanos < 1 << 55 {
            assert_eq!(r.retry_after, secs(15), "at {nanos} ns");
            assert_eq!(b.state(end - Duration::from_nanos(1)), State::Open);
        } else {
            // Past 2^55 ns the end is rounded up to its microsecond: never short.
            let over = r.retry_after - secs(15);
            assert!(
                over < Duration::from_micros(1),
                "{over} over, at {nanos} ns"
            );
            assert_eq!(b.state(end - Duration::from_nanos(1)), State::Open);
            assert_eq!(b.state(end + over - Duration::from_nanos(1)), State::Open);
        }
        let late = r.retry_after;
        assert_eq!(b.state(t + late), State::HalfOpen, "at {nanos} ns");
        assert!(b.try_acquire(t + late).unwrap().is_probe());
    }
}

#[test]
fn a_jittered_break_ends_when_retry_after_says() {
    for nanos in UNALIGNED {
        for seed in 0..20 {
            let mut b = Breaker::new(BreakerSettings::defaults("payments")).with_seed(seed);
            let t = Instant::from_nanos(nanos);
            trip(&mut b, t);
            let brk = b.snapshot(t).break_duration.unwrap();
            let at = t + ms(250);
            let r = b.try_acquire(at).unwrap_err();
            if nanos < 1 << 55 {
                assert_eq!(r.retry_after, brk - ms(250), "at {nanos} ns, seed {seed}");
            }
            assert_eq!(
                b.state(at + r.retry_after - Duration::from_nanos(1)),
                State::Open
            );
            assert_eq!(b.state(at + r.retry_after), State::HalfOpen);
        }
    }
}

#[test]
fn document_004s_breaker_counts_failures_through_the_break_and_escalates_its_cooldown() {
    let mut b = Breaker::new(BreakerSettings::escalating_cooldown("worker"));
    let mut t = Instant::from_nanos(5_000_000_321);
    assert_eq!(b.snapshot(t).current_break, secs(3), "before it ever opens");
    for i in 1..=4 {
        call(&mut b, t, MS, Outcome::Transient).unwrap();
        assert_eq!(b.snapshot(t).consecutive_failures, i);
    }
    call(&mut b, t, MS, Outcome::Transient).unwrap();
    let snap = b.snapshot(t + MS);
    assert_eq!(
        (snap.state, snap.consecutive_failures, snap.break_duration),
        (State::Open, 5, Some(secs(3)))
    );
    // The failures are held through the break; the failed probe adds one and doubles it.
    t += MS + secs(3);
    assert_eq!(b.snapshot(t).state, State::HalfOpen);
    assert_eq!(b.snapshot(t).consecutive_failures, 5);
    call(&mut b, t, MS, Outcome::Transient).unwrap();
    let snap = b.snapshot(t + MS);
    assert_eq!(
        (snap.state, snap.consecutive_failures, snap.break_duration),
        (State::Open, 6, Some(secs(6)))
    );
    assert_eq!(snap.current_break, secs(6));
    // One successful probe closes, and the count and the cooldown start over.
    t += MS + secs(6);
    call(&mut b, t, MS, Outcome::Success).unwrap();
    let snap = b.snapshot(t + MS);
    assert_eq!((snap.state, snap.consecutive_failures), (State::Closed, 0));
    assert_eq!((snap.break_duration, snap.current_break), (None, secs(3)));
    for _ in 0..5 {
        call(&mut b, t, MS, Outcome::Transient).unwrap();
    }
    assert_eq!(b.snapshot(t + MS).break_duration, Some(secs(3)));
}

#[test]
fn the_break_doubles_per_consecutive_open_up_to_the_max() {
    let mut b = Breaker::new(unjittered("payments"));
    let mut t = Instant::from_secs(10);
    trip(&mut b, t);
    let mut seen = Vec::new();
    for _ in 0..5 {
        let brk = b.snapshot(t).break_duration.unwrap();
        seen.push(brk.as_secs());
        t += brk;
        // The probe fails: re-open with the doubled break.
        call(&mut b, t, Duration::ZERO, Outcome::Transient).unwrap();
        assert_eq!(b.state(t), State::Open);
    }
    assert_eq!(seen, [15, 30, 60, 120, 120]);
}

#[test]
fn the_break_starts_over_once_the_breaker_has_closed() {
    let mut b = Breaker::new(unjittered("payments"));
    let mut t = Instant::from_secs(10);
    trip(&mut b, t);
    t += secs(15);
    call(&mut b, t, Duration::ZERO, Outcome::Transient).unwrap(); // re-open: 30 s
    assert_eq!(b.snapshot(t).break_duration, Some(secs(30)));
    t += secs(30);
    call(&mut b, t, MS, Outcome::Success).unwrap();
    call(&mut b, t, MS, Outcome::Success).unwrap();
    assert_eq!(b.state(t), State::Closed);
    trip(&mut b, t);
    assert_eq!(b.snapshot(t).break_duration, Some(secs(15)));
}

#[test]
fn the_same_seed_gives_the_same_jitter_and_different_seeds_spread_within_the_equal_jitter_band() {
    let settings = BreakerSettings::defaults("payments");
    let t = Instant::from_secs(10);
    let break_with = |seed: u64| {
        let mut b = Breaker::new(settings).with_seed(seed);
        trip(&mut b, t);
        b.snapshot(t).break_duration.unwrap()
    };
    assert_eq!(break_with(42), break_with(42));
    let breaks: Vec<Duration> = (0..200).map(break_with).collect();
    let lo = *breaks.iter().min().unwrap();
    let hi = *breaks.iter().max().unwrap();
    assert!(
        lo >= ms(7500) && hi <= secs(15),
        "within [7.5 s, 15 s]: {lo}..{hi}"
    );
    assert!(hi - lo > secs(6), "spread across the band: {lo}..{hi}");
    let distinct: std::collections::BTreeSet<_> = breaks.iter().collect();
    assert!(distinct.len() > 150);
}

#[test]
fn after_the_break_the_state_reads_half_open_without_using_the_slot() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    trip(&mut b, t);
    let after = t + secs(15);
    for _ in 0..10 {
        assert_eq!(b.state(after), State::HalfOpen);
        assert_eq!(b.snapshot(after).state, State::HalfOpen);
        assert!(b.check(after).is_ok());
    }
    let probe = b.try_acquire(after).unwrap();
    assert!(probe.is_probe());
    b.on_outcome(after, probe, Outcome::Success, &mut |_| {});
}

#[test]
fn one_probe_at_a_time() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    trip(&mut b, t);
    let after = t + secs(15);
    let probe = b.try_acquire(after).unwrap();
    let r = b.try_acquire(after).unwrap_err();
    assert_eq!(r.reason, RefusalReason::HalfOpenFull);
    assert_eq!(b.snapshot(after).probes_in_flight, 1);
    b.on_outcome(after + MS, probe, Outcome::Success, &mut |_| {});
    assert!(b.try_acquire(after + MS).unwrap().is_probe());
}

#[test]
fn a_failed_probe_reopens_with_the_doubled_break() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    trip(&mut b, t);
    let after = t + secs(15);
    let mut trips = Vec::new();
    call_seeing(&mut b, after, MS, Outcome::Transient, &mut trips).unwrap();
    assert_eq!(trips, [TripReason::ProbeFailed]);
    assert_eq!(b.state(after + MS), State::Open);
    assert_eq!(b.snapshot(after).break_duration, Some(secs(30)));
}

#[test]
fn two_probe_successes_close() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    trip(&mut b, t);
    let after = t + secs(15);
    call(&mut b, after, MS, Outcome::Success).unwrap();
    assert_eq!(b.state(after + MS), State::HalfOpen);
    call(&mut b, after + MS, MS, Outcome::Success).unwrap();
    assert_eq!(b.state(after + ms(2)), State::Closed);
}

#[test]
fn a_stale_permit_from_an_earlier_epoch_decides_nothing() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    let stale_failure = b.try_acquire(t).unwrap();
    let stale_success = b.try_acquire(t).unwrap();
    trip(&mut b, t);
    let after = t + secs(15);
    let probe = b.try_acquire(after).unwrap();
    // Outcomes of permits granted while closed arrive during half-open: no effect.
    b.on_outcome(after, stale_failure, Outcome::Transient, &mut |_| {});
    assert_eq!(b.state(after), State::HalfOpen);
    b.on_outcome(after, stale_success, Outcome::Success, &mut |_| {});
    assert_eq!(b.snapshot(after).probes_in_flight, 1);
    b.on_outcome(after, probe, Outcome::Success, &mut |_| {});
    assert_eq!(
        b.state(after),
        State::HalfOpen,
        "one probe success is not two"
    );
}

#[test]
fn a_lost_probe_is_reclaimed_after_its_attempt_timeout() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    trip(&mut b, t);
    let after = t + secs(15);
    let lost = b
        .try_acquire_with(after, Some(secs(2)), &mut |_| {})
        .unwrap();
    drop(lost); // the caller's future was cancelled and nothing reported
    assert_eq!(
        b.try_acquire(after + secs(1)).unwrap_err().reason,
        RefusalReason::HalfOpenFull
    );
    let mut reclaimed = 0;
    let probe = b
        .try_acquire_with(after + secs(2), Some(secs(2)), &mut |e| {
            if let Event::ProbesReclaimed { count, .. } = e {
                reclaimed += count;
            }
        })
        .unwrap();
    assert_eq!(reclaimed, 1);
    assert!(probe.is_probe());
}

#[test]
fn without_an_attempt_timeout_a_lost_probe_is_reclaimed_after_the_break_just_served() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    trip(&mut b, t);
    let after = t + secs(15);
    let _lost = b.try_acquire(after).unwrap();
    assert!(b.try_acquire(after + secs(14)).is_err());
    assert!(b.try_acquire(after + secs(15)).is_ok());
}

#[test]
fn a_released_probe_gives_its_slot_back_at_once() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    trip(&mut b, t);
    let after = t + secs(15);
    let probe = b.try_acquire(after).unwrap();
    b.release(probe);
    assert!(b.try_acquire(after).is_ok());
}

#[test]
fn a_late_report_from_a_reclaimed_probe_decides_nothing() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    trip(&mut b, t);
    let after = t + secs(15);
    let late = b
        .try_acquire_with(after, Some(secs(1)), &mut |_| {})
        .unwrap();
    let fresh = b
        .try_acquire_with(after + secs(1), Some(secs(1)), &mut |_| {})
        .unwrap();
    b.on_outcome(after + secs(1), late, Outcome::Transient, &mut |_| {});
    assert_eq!(b.state(after + secs(1)), State::HalfOpen);
    b.on_outcome(after + secs(1), fresh, Outcome::Success, &mut |_| {});
    assert_eq!(b.snapshot(after + secs(1)).probes_in_flight, 0);
}

/// Feeds `seconds` of traffic at `per_sec` calls a second starting at `from`, latency and
/// outcome chosen per call index. Returns the time after the last call and the trips seen.
fn traffic(
    b: &mut Breaker,
    from: Instant,
    seconds: u64,
    per_sec: u64,
    mut shape: impl FnMut(u64) -> (Duration, Outcome),
) -> (Instant, Vec<(Instant, TripReason)>) {
    let gap = Duration::from_nanos(1_000_000_000 / per_sec);
    let mut t = from;
    let mut trips = Vec::new();
    for i in 0..seconds * per_sec {
        let (latency, outcome) = shape(i);
        if let Ok(p) = b.try_acquire(t) {
            let done = t + latency;
            b.on_outcome(done, p, outcome, &mut |e| {
                if let Event::StateChanged {
                    to: State::Open,
                    reason: Some(r),
                    ..
                } = e
                {
                    trips.push((done, r));
                }
            });
        }
        t += gap;
    }
    (t, trips)
}

fn slow_only() -> BreakerSettings {
    BreakerSettings::builder("search")
        .consecutive_failures(1000)
        .failure_rate(None)
        .build()
        .unwrap()
}

#[test]
fn a_brownout_trips_the_slow_call_rule_within_the_window_arithmetic() {
    let mut b = Breaker::new(slow_only());
    let (t, trips) = traffic(&mut b, Instant::from_secs(1), 60, 10, |_| {
        (ms(20), Outcome::Success)
    });
    assert!(trips.is_empty());
    let normal = b.normal_latency(t).unwrap();
    assert!(normal >= ms(20) && normal <= ms(23), "{normal}");
    // 10x brownout: still answering, just slow.
    let (_, trips) = traffic(&mut b, t, 40, 10, |_| (ms(200), Outcome::Success));
    let (at, reason) = trips[0];
    assert_eq!(reason, TripReason::SlowCalls);
    // slow ratio x trip window + one bucket: 0.5 x 30 s + 3 s.
    assert!(at - t <= secs(18), "tripped after {}", at - t);
}

#[test]
fn a_brownout_does_not_move_the_baseline_before_the_trip() {
    let mut b = Breaker::new(slow_only());
    let (t, _) = traffic(&mut b, Instant::from_secs(1), 120, 10, |_| {
        (ms(20), Outcome::Success)
    });
    let before = b.normal_latency(t).unwrap();
    let mut tripped_at = None;
    let mut now = t;
    while tripped_at.is_none() {
        let p = b.try_acquire(now).unwrap();
        b.on_outcome(now + ms(200), p, Outcome::Success, &mut |e| {
            if matches!(
                e,
                Event::StateChanged {
                    to: State::Open,
                    ..
                }
            ) {
                tripped_at = Some(now);
            }
        });
        now += ms(100);
    }
    assert_eq!(b.normal_latency(now).unwrap(), before);
    // The learned baseline survives the open, so a slow probe still reads as slow.
    assert_eq!(b.snapshot(now).normal_latency, Some(before));
}

#[test]
fn the_slow_call_rule_never_trips_during_warm_up() {
    // A dependency slow from the very first call: nothing is "slow" until a baseline exists,
    // and then the baseline is that slowness.
    let settings = BreakerSettings::builder("cold")
        .minimum_calls(5)
        .failure_rate(None)
        .build()
        .unwrap();
    let mut b = Breaker::new(settings);
    let (_, trips) = traffic(&mut b, Instant::from_secs(1), 10, 5, |i| {
        (if i < 5 { ms(10) } else { secs(1) }, Outcome::Success)
    });
    assert!(trips.is_empty(), "{trips:?}");
}

#[test]
fn an_absolute_slow_call_threshold_needs_no_baseline() {
    let settings = BreakerSettings::builder("radio")
        .slow_calls(None)
        .failure_rate(None)
        .slow_threshold(Some(ms(50)))
        .build()
        .unwrap();
    let mut b = Breaker::new(settings);
    let (_, trips) = traffic(&mut b, Instant::from_secs(1), 10, 10, |i| {
        (if i % 2 == 0 { ms(10) } else { ms(60) }, Outcome::Success)
    });
    assert_eq!(trips.first().map(|t| t.1), Some(TripReason::SlowCalls));
}

fn rate_only() -> BreakerSettings {
    BreakerSettings::builder("payments")
        .consecutive_failures(1000)
        .slow_calls(None)
        .build()
        .unwrap()
}

#[test]
fn an_error_spike_trips_the_relative_error_rate_rule() {
    let mut b = Breaker::new(rate_only());
    // 1% normal failure rate.
    let (t, trips) = traffic(&mut b, Instant::from_secs(1), 100, 10, |i| {
        (
            ms(20),
            if i % 100 == 0 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    assert!(trips.is_empty());
    // Learned from what has aged out of the trip window: about 1%.
    let normal = b.normal_failure_rate(t).unwrap().as_f64();
    assert!((0.009..0.012).contains(&normal), "{normal}");
    // Spike to 20% (5x normal is 5%, the floor is 5%).
    let (_, trips) = traffic(&mut b, t, 30, 10, |i| {
        (
            ms(20),
            if i % 5 == 0 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    let (at, reason) = trips[0];
    assert_eq!(reason, TripReason::FailureRate);
    assert!(at - t <= secs(30), "tripped after {}", at - t);
    // The spike that tripped it is no sample of normal: the baseline it is judged against next
    // time has not moved.
    let after = b.normal_failure_rate(at).unwrap().as_f64();
    assert!((0.009..0.012).contains(&after), "{normal} became {after}");
}

#[test]
fn an_outage_tripped_by_a_run_keeps_the_calls_before_it_as_the_normal_baseline() {
    let mut b = Breaker::new(unjittered("payments"));
    // 20 s at 1% failures, all still inside the 30 s trip window: nothing has aged out of it
    // into the error baseline yet.
    let (t, trips) = traffic(&mut b, Instant::from_secs(1), 20, 30, |i| {
        let outcome = if i % 100 == 50 {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        (ms(20), outcome)
    });
    assert!(trips.is_empty());
    let before = b.normal_failure_rate(t).unwrap().as_f64();
    assert!((0.009..0.011).contains(&before), "{before}");
    // Then every call fails: the run of five trips the breaker.
    let mut seen = Vec::new();
    for k in 0..5 {
        call_seeing(&mut b, t + ms(k), ms(1), Outcome::Transient, &mut seen).unwrap();
    }
    assert_eq!(seen, vec![TripReason::ConsecutiveFailures]);
    // The run was the evidence; the 600 calls before it were the dependency as it normally
    // is, and a probe or a ramp after the break is judged against them, not as on a cold
    // breaker (where one failure re-opens).
    let after = b.normal_failure_rate(t + secs(1)).map(Ratio::as_f64);
    assert_eq!(after, Some(before));
}

#[test]
fn the_relative_error_rate_rule_never_trips_during_warm_up() {
    let mut b = Breaker::new(rate_only());
    // 40% failures from a cold start, for fewer than the 100 outcomes that arm the rule.
    let (t, trips) = traffic(&mut b, Instant::from_secs(1), 9, 11, |i| {
        (
            ms(20),
            if i % 5 < 2 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    assert!(trips.is_empty());
    assert_eq!(b.normal_failure_rate(t), None);
}

#[test]
fn a_dependencys_normal_error_rate_does_not_trip_the_relative_rule() {
    let mut b = Breaker::new(rate_only());
    // A flaky backend at a steady 20%: 5x that is beyond 100%.
    let (_, trips) = traffic(&mut b, Instant::from_secs(1), 600, 10, |i| {
        (
            ms(20),
            if i % 5 == 0 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    assert!(trips.is_empty(), "{trips:?}");
}

#[test]
fn below_the_floor_nothing_is_wrong() {
    let mut b = Breaker::new(rate_only());
    // Normal 0.1%, then 4%: 40x normal but under the 5% floor.
    let (t, _) = traffic(&mut b, Instant::from_secs(1), 100, 10, |i| {
        (
            ms(20),
            if i % 1000 == 0 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    let (_, trips) = traffic(&mut b, t, 60, 10, |i| {
        (
            ms(20),
            if i % 25 == 0 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    assert!(trips.is_empty(), "{trips:?}");
}

#[test]
fn an_absolute_failure_ratio_trips_without_a_baseline() {
    let settings = BreakerSettings::builder("payments")
        .failure_ratio(Ratio::from_percent(20))
        .slow_calls(None)
        .build()
        .unwrap();
    let mut b = Breaker::new(settings);
    let (_, trips) = traffic(&mut b, Instant::from_secs(1), 5, 10, |i| {
        (
            ms(20),
            if i % 4 == 0 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    assert_eq!(trips.first().map(|t| t.1), Some(TripReason::FailureRatio));
}

fn ramped() -> BreakerSettings {
    BreakerSettings::builder("search")
        .jitter(false)
        .failure_rate(None)
        .slow_calls(Some(SlowCalls::above(3)))
        .recovery(Some(Recovery::over(0.25)))
        .build()
        .unwrap()
}

/// Warms a baseline at 10 ms, trips, and passes two fast probes: the ramp starts.
fn into_ramp(b: &mut Breaker) -> Instant {
    into_ramp_after(b, 10, |_| ms(10))
}

/// Warms a baseline over `seconds` of 10 successful calls a second, the `i`-th lasting
/// `latency(i)` (none of it trips the breaker), trips, and passes two fast probes: the ramp
/// starts.
fn into_ramp_after(b: &mut Breaker, seconds: u64, latency: impl Fn(u64) -> Duration) -> Instant {
    let (t, trips) = traffic(b, Instant::from_secs(1), seconds, 10, |i| {
        (latency(i), Outcome::Success)
    });
    assert_eq!(trips, [], "the baseline is the dependency's normal");
    trip(b, t);
    let after = t + secs(15);
    call(b, after, ms(10), Outcome::Success).unwrap();
    call(b, after + ms(10), ms(10), Outcome::Success).unwrap();
    let start = after + ms(20);
    assert_eq!(b.state(start), State::Recovering);
    start
}

/// A rate limiter that never runs dry changes nothing about who the ramp admits: its shedding
/// moves on a running credit that only asking the breaker advances, so a limiter in front must
/// still ask (a pre-check alone once shed every call until the ramp's end).
#[test]
fn a_ramp_behind_a_rate_limiter_with_cells_to_spare_admits_as_it_does_alone() {
    let mut alone = Breaker::new(ramped());
    let mut behind = Breaker::new(ramped());
    let start = into_ramp(&mut alone);
    assert_eq!(into_ramp(&mut behind), start);
    let limiter = RateLimiter::new(RateLimitSettings::per_second("search", 1_000_000).unwrap());
    let limited = stormguard_core::Parts::new()
        .breaker(&behind)
        .limiter(limiter);
    let (mut t, mut admitted_alone, mut admitted_behind, mut offered) = (start, 0u32, 0u32, 0u32);
    while alone.state(t) == State::Recovering && offered < 100_000 {
        offered += 1;
        let a = alone.try_acquire(t);
        let b = limited.try_acquire(t, None, &mut |_| {});
        assert_eq!(a.is_ok(), b.is_ok(), "call {offered} at {t:?}");
        if let (Ok(a), Ok(b)) = (a, b) {
            admitted_alone += 1;
            admitted_behind += 1;
            alone.on_outcome(t, a, Outcome::Success, &mut |_| {});
            limited.on_outcome(t, b, Outcome::Success, &mut |_| {});
        }
        t += ms(5);
    }
    assert!(admitted_alone > 100, "the ramp admitted {admitted_alone}");
    assert_eq!(admitted_behind, admitted_alone);
    assert_eq!(behind.state(t), State::Closed);
}

#[test]
fn the_ramp_starts_at_five_percent() {
    let mut b = Breaker::new(ramped());
    let start = into_ramp(&mut b);
    assert_eq!(b.ramp_fraction(start), Ratio::from_percent(5));
    assert!(b.snapshot(start).is_degraded());
}

#[test]
fn the_ramp_admits_within_one_call_of_the_sum_of_p_and_closes_at_one() {
    let mut b = Breaker::new(ramped());
    let start = into_ramp(&mut b);
    let mut t = start;
    let mut sum_p = 0.0;
    let mut admitted = 0u32;
    let mut offered = 0u32;
    while b.state(t) == State::Recovering {
        sum_p += b.ramp_fraction(t).unwrap().as_f64();
        offered += 1;
        if let Ok(p) = b.try_acquire(t) {
            admitted += 1;
            b.on_outcome(t, p, Outcome::Success, &mut |_| {});
        }
        assert!(
            (f64::from(admitted) - sum_p).abs() <= 1.0,
            "admitted {admitted}, sum of p {sum_p}"
        );
        t += ms(5);
    }
    // A quarter of the 15 s break, ramped over.
    let took = t - start;
    assert!(took >= ms(3700) && took <= ms(3800), "{took}");
    assert!(admitted > 0 && admitted < offered);
    assert_eq!(b.try_acquire(t).map(|p| p.is_probe()), Ok(false));
    assert_eq!(b.state(t), State::Closed);
}

#[test]
fn a_slow_call_halves_the_ramp_on_the_spot() {
    let mut b = Breaker::new(ramped());
    let start = into_ramp(&mut b);
    // Let the clock term climb to 80% or more.
    let mut t = start + ms(3200);
    let p = loop {
        match b.try_acquire(t) {
            Ok(p) => break p,
            Err(_) => t += MS,
        }
    };
    let mut steps = Vec::new();
    b.on_outcome(t + ms(100), p, Outcome::Success, &mut |e| {
        if let Event::RampStep { cap, .. } = e {
            steps.push(cap);
        }
    });
    assert_eq!(steps, [Ratio::from_percent(50).unwrap()]);
    assert_eq!(b.ramp_fraction(t + ms(100)), Ratio::from_percent(50));
    assert_eq!(
        b.state(t + secs(10)),
        State::Recovering,
        "a slow dependency keeps the ramp below 1"
    );
}

#[test]
fn a_dependency_that_stays_slow_keeps_the_ramp_at_its_floor() {
    let mut b = Breaker::new(ramped());
    let start = into_ramp(&mut b);
    // Every call now takes 100 ms: 10x the 10 ms baseline. 100 offers a second for two
    // minutes: thousands of slow answers, many times the hundred fast samples of the baseline.
    let mut t = start;
    let mut admitted = 0u32;
    while t < start + secs(120) {
        if let Ok(p) = b.try_acquire(t) {
            admitted += 1;
            b.on_outcome(t + ms(100), p, Outcome::Success, &mut |_| {});
        }
        t += ms(10);
    }
    assert_eq!(b.state(t), State::Recovering);
    assert_eq!(b.ramp_fraction(t), Ratio::from_percent(5));
    assert!(b.snapshot(t).is_degraded());
    // About 5% of 12 000 offers were served, each slow: none taught the baseline that slow
    // is normal.
    assert!((500..=700).contains(&admitted), "{admitted} admitted");
    assert!(b.normal_latency(t).unwrap() < ms(12));
}

/// A dependency whose healthy answers have a heavy tail: one in eight takes 60 ms, 6x the
/// 10 ms median and past the 3x slow-call threshold.
fn heavy_tail(i: u64) -> Duration {
    if i % 8 == 7 {
        ms(60)
    } else {
        ms(10)
    }
}

/// Offers a call every 10 ms from `start` until the breaker leaves `Recovering` or `until`,
/// each admitted one lasting `latency(i)` for the `i`-th admitted: when the ramp ended, and the
/// lowest evidence cap it stepped to.
fn ramp_through(
    b: &mut Breaker,
    start: Instant,
    until: Instant,
    latency: impl Fn(u64) -> Duration,
) -> (Instant, Option<Ratio>) {
    let (mut t, mut admitted, mut lowest) = (start, 0u64, None::<Ratio>);
    while b.state(t) == State::Recovering && t < until {
        if let Ok(p) = b.try_acquire(t) {
            b.on_outcome(t + latency(admitted), p, Outcome::Success, &mut |e| {
                if let Event::RampStep { cap, .. } = e {
                    lowest = Some(lowest.map_or(cap, |l| l.min(cap)));
                }
            });
            admitted += 1;
        }
        t += ms(10);
    }
    (t, lowest)
}

/// The ramp's slow calls are judged against the dependency's own share of slow answers: one in
/// eight, as it always was, is not evidence that it is still unwell, so the ramp runs its
/// course. (Halving the cap on each of them held it near 30% for good.)
#[test]
fn a_dependency_back_to_its_heavy_tailed_normal_finishes_the_ramp() {
    let mut b = Breaker::new(ramped());
    let start = into_ramp_after(&mut b, 20, heavy_tail);
    let (end, lowest) = ramp_through(&mut b, start, start + secs(60), heavy_tail);
    assert_eq!(b.state(end), State::Closed, "still recovering at {end:?}");
    // A quarter of the 15 s break, ramped over, with the clock term the only bound.
    assert!(end - start <= ms(3800), "{:?}", end - start);
    assert_eq!(lowest, None, "the cap never stepped down");
}

/// What a heavy tail forgives is its own share, not a dependency that is slow: when every
/// answer is slow the slow calls soon lie beyond it, and each one then halves the cap.
#[test]
fn a_heavy_tailed_dependency_that_stays_slow_keeps_the_ramp_at_its_floor() {
    let mut b = Breaker::new(ramped());
    let start = into_ramp_after(&mut b, 20, heavy_tail);
    let until = start + secs(120);
    let (end, lowest) = ramp_through(&mut b, start, until, |_| ms(100));
    assert_eq!(end, until);
    assert_eq!(b.state(end), State::Recovering);
    assert_eq!(lowest, Ratio::from_percent(5));
    assert_eq!(b.ramp_fraction(end), Ratio::from_percent(5));
}

#[test]
fn one_failure_during_the_ramp_reopens_with_the_grown_break() {
    let mut b = Breaker::new(ramped());
    let start = into_ramp(&mut b);
    let mut t = start;
    let p = loop {
        match b.try_acquire(t) {
            Ok(p) => break p,
            Err(_) => t += MS,
        }
    };
    let mut trips = Vec::new();
    b.on_outcome(t, p, Outcome::Transient, &mut |e| {
        if let Event::StateChanged {
            to: State::Open,
            reason: Some(r),
            break_for,
            ..
        } = e
        {
            trips.push((r, break_for));
        }
    });
    assert_eq!(trips, [(TripReason::RampFailure, Some(secs(30)))]);
}

#[test]
fn a_slow_probe_starts_the_ramp_or_without_one_counts_as_a_success() {
    let mut b = Breaker::new(ramped());
    let (t, _) = traffic(&mut b, Instant::from_secs(1), 10, 10, |_| {
        (ms(10), Outcome::Success)
    });
    trip(&mut b, t);
    call(&mut b, t + secs(15), ms(100), Outcome::Success).unwrap();
    assert_eq!(b.state(t + secs(15) + ms(100)), State::Recovering);

    let mut b = Breaker::new(
        BreakerSettings::builder("search")
            .jitter(false)
            .build()
            .unwrap(),
    );
    let (t, _) = traffic(&mut b, Instant::from_secs(1), 10, 10, |_| {
        (ms(10), Outcome::Success)
    });
    trip(&mut b, t);
    let mut trips = Vec::new();
    call_seeing(&mut b, t + secs(15), ms(100), Outcome::Success, &mut trips).unwrap();
    assert_eq!(b.state(t + secs(15) + ms(100)), State::HalfOpen);
    call_seeing(&mut b, t + secs(16), ms(100), Outcome::Success, &mut trips).unwrap();
    assert_eq!(trips, []);
    assert_eq!(b.state(t + secs(16) + ms(100)), State::Closed);
}

#[test]
fn isolate_refuses_until_reset_and_reset_keeps_the_baselines() {
    let mut b = Breaker::new(BreakerSettings::defaults("payments"));
    let (t, _) = traffic(&mut b, Instant::from_secs(1), 10, 10, |_| {
        (ms(10), Outcome::Success)
    });
    let normal = b.normal_latency(t);
    assert!(normal.is_some());
    b.isolate(t, &mut |_| {});
    let r = b.try_acquire(t + secs(3600)).unwrap_err();
    assert_eq!(
        r,
        Refused {
            reason: RefusalReason::Isolated,
            retry_after: Duration::MAX
        }
    );
    assert_eq!(b.state(t + secs(3600)), State::Isolated);
    b.reset(t + secs(3600), &mut |_| {});
    assert_eq!(b.state(t + secs(3600)), State::Closed);
    assert!(b.try_acquire(t + secs(3600)).is_ok());
    assert_eq!(b.normal_latency(t + ms(1)), normal);
}

#[test]
fn every_event_carries_the_breakers_name() {
    let b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(1);
    let mut kinds = Vec::new();
    let mut sink = |e: Event<'_>| {
        assert_eq!(e.name(), &"payments");
        kinds.push(e.kind());
    };
    for _ in 0..5 {
        let p = b.try_acquire_with(t, None, &mut sink).unwrap();
        b.on_outcome(t, p, Outcome::Transient, &mut sink);
    }
    let p = b.try_acquire_with(t + secs(15), None, &mut sink).unwrap();
    b.on_outcome(t + secs(15), p, Outcome::Success, &mut sink);
    assert_eq!(kinds, ["state_changed", "state_changed", "probe_started"]);
}

#[test]
fn timed_transitions_are_realised_by_handle_timeout() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(1);
    trip(&mut b, t);
    let due = b.poll_timeout(t).unwrap();
    assert_eq!(due, t + secs(15));
    let mut changes = Vec::new();
    b.handle_timeout(due - MS, &mut |e| changes.push(e.kind()));
    assert!(changes.is_empty(), "early calls do nothing");
    b.handle_timeout(due, &mut |e| changes.push(e.kind()));
    b.handle_timeout(due, &mut |e| changes.push(e.kind()));
    assert_eq!(changes, ["state_changed"]);
}

#[test]
fn a_clock_stepping_backwards_never_panics_and_means_no_time_passed() {
    let mut b = Breaker::new(BreakerSettings::defaults("payments"));
    let t = Instant::from_secs(100);
    trip(&mut b, t);
    let at_trip = b.try_acquire(t).unwrap_err();
    // 50 s "before" the trip: still open, and the break left is what it was at the trip (no
    // time passed), not 50 s more.
    let earlier = Instant::from_secs(50);
    let r = b.try_acquire(earlier).unwrap_err();
    assert_eq!(r.reason, RefusalReason::BreakerOpen);
    // (The break left is capped at the longest break the breaker could be serving, which
    // allows for the microsecond rounding of marks far from the breaker's start: within 1 us.)
    let extra = r.retry_after - at_trip.retry_after;
    assert!(extra < Duration::from_micros(1), "{extra} more");
    assert_eq!(b.state(earlier), State::Open);
    let extra = b.snapshot(earlier).until_half_open - b.snapshot(t).until_half_open;
    assert!(extra < Duration::from_micros(1), "{extra} more");
    // An outcome "before" its permit took no time: not slow, even against a 1 ms threshold.
    let settings = BreakerSettings::builder("payments")
        .slow_threshold(Some(ms(1)))
        .build()
        .unwrap();
    let b = Breaker::new(settings);
    let p = b.try_acquire(t).unwrap();
    b.on_outcome(earlier, p, Outcome::Success, &mut |_| {});
    let snap = b.snapshot(earlier);
    assert_eq!((snap.window_calls, snap.window_slow), (1, 0));
    // The ends of time: readings and a reversed permit neither panic nor trip anything.
    let _ = b.snapshot(Instant::ZERO);
    let _ = b.snapshot(Instant::MAX);
    let p = b.try_acquire(Instant::MAX).unwrap();
    b.on_outcome(Instant::ZERO, p, Outcome::Transient, &mut |_| {});
    assert_eq!(b.snapshot(Instant::MAX).consecutive_failures, 1);
    assert_eq!(b.state(Instant::MAX), State::Closed);
}

#[test]
fn a_relative_rule_with_another_multiple_is_honoured() {
    let settings = BreakerSettings::builder("payments")
        .consecutive_failures(1000)
        .slow_calls(None)
        .failure_rate(Some(FailureRate::above(2)))
        .build()
        .unwrap();
    let mut b = Breaker::new(settings);
    let (t, _) = traffic(&mut b, Instant::from_secs(1), 100, 10, |i| {
        (
            ms(20),
            if i % 10 == 0 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    // 10% normal; 25% is above 2x.
    let (_, trips) = traffic(&mut b, t, 30, 10, |i| {
        (
            ms(20),
            if i % 4 == 0 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    assert_eq!(trips.first().map(|t| t.1), Some(TripReason::FailureRate));
}

#[test]
fn hedging_waits_for_the_learned_p95_and_is_suppressed_when_not_closed_or_near_the_trip_point() {
    use stormguard_core::part::HedgeSuppressed;
    let mut b = Breaker::new(
        BreakerSettings::builder("search")
            .jitter(false)
            .build()
            .unwrap(),
    );
    let t = Instant::from_secs(1);
    assert_eq!(b.hedge_after(t), Err(HedgeSuppressed::NoBaseline));
    // Latencies 1..=100 ms: the p95 reads within 12.5% above 95 ms.
    let mut now = t;
    for i in 1..=100u64 {
        let p = b.try_acquire(now).unwrap();
        b.on_outcome(now + ms(i), p, Outcome::Success, &mut |_| {});
        now += ms(10);
    }
    // The tail is re-read at least once a trip-window bucket (3 s): one more call after that.
    now += secs(3);
    call(&mut b, now, ms(50), Outcome::Success).unwrap();
    let after = b.hedge_after(now).unwrap();
    assert!(
        after >= ms(95) && after <= Duration::from_micros(108_000),
        "{after}"
    );
    // Failures approaching the consecutive threshold: a hedge would add load to a failing
    // dependency.
    for _ in 0..3 {
        call(&mut b, now, MS, Outcome::Transient).unwrap();
    }
    assert_eq!(b.hedge_after(now), Err(HedgeSuppressed::NearTrip));
    for _ in 0..2 {
        call(&mut b, now, MS, Outcome::Transient).unwrap();
    }
    assert_eq!(b.hedge_after(now), Err(HedgeSuppressed::NotClosed));
    assert_eq!(
        b.hedge_after(now + secs(15)),
        Err(HedgeSuppressed::NotClosed),
        "never half-open"
    );
}

#[test]
fn a_breaker_left_alone_for_months_while_open_reads_half_open() {
    let mut b = Breaker::new(
        BreakerSettings::builder("idle")
            .consecutive_failures(1)
            .jitter(false)
            .build()
            .unwrap(),
    );
    let t0 = Instant::from_secs(1_000);
    call(&mut b, t0, Duration::ZERO, Outcome::Transient).unwrap();
    for days in [1u64, 25, 30, 49, 50, 365, 3650] {
        let t = t0 + secs(days * 86_400);
        assert_eq!(b.state(t), State::HalfOpen, "after {days} days");
        assert!(b.check(t).is_ok(), "after {days} days");
    }
}

#[test]
fn a_recovering_breaker_left_alone_for_months_reads_closed() {
    let settings = BreakerSettings::builder("idle")
        .consecutive_failures(1)
        .probe_successes(1)
        .jitter(false)
        .recovery(Some(Recovery::over(0.25)))
        .build()
        .unwrap();
    let mut b = Breaker::new(settings);
    let t0 = Instant::from_secs(1_000);
    call(&mut b, t0, Duration::ZERO, Outcome::Transient).unwrap();
    let t1 = t0 + secs(15);
    call(&mut b, t1, Duration::ZERO, Outcome::Success).unwrap();
    assert_eq!(b.state(t1), State::Recovering);
    for days in [1u64, 25, 49, 100] {
        assert_eq!(
            b.state(t1 + secs(days * 86_400)),
            State::Closed,
            "after {days} days"
        );
    }
}

#[test]
fn a_clock_stepping_back_while_open_never_lengthens_retry_after_beyond_the_break() {
    let mut b = Breaker::new(unjittered("payments"));
    let t0 = Instant::from_secs(100 * 86_400);
    trip(&mut b, t0);
    for back in [secs(1), secs(3600), secs(30 * 86_400)] {
        let r = b.check(t0 - back).unwrap_err();
        assert_eq!(r.reason, RefusalReason::BreakerOpen);
        // No time passed: the whole break, at most plus the rounding of its end to a whole
        // millisecond.
        assert!(
            r.retry_after >= secs(15) && r.retry_after < secs(15) + ms(1),
            "stepped back {back}: {}",
            r.retry_after
        );
    }
}

#[test]
fn a_break_ends_on_time_however_many_periods_passed_without_one() {
    // Operators isolating and resetting a breaker move it through many periods that store no
    // break end; a trip after them still ends its break on time.
    let mut b = Breaker::new(unjittered("ops"));
    let mut t = Instant::from_secs(100);
    trip(&mut b, t);
    t += secs(60);
    assert_eq!(b.state(t), State::HalfOpen);
    call(&mut b, t, MS, Outcome::Success).unwrap();
    call(&mut b, t, MS, Outcome::Success).unwrap();
    for _ in 0..200 {
        t += MS;
        b.isolate(t, &mut |_| {});
        b.reset(t, &mut |_| {});
        assert_eq!(b.state(t), State::Closed);
        // Every count of periods since the last stored break end, once each.
        let mut probe = b.clone();
        let at = t + MS;
        trip(&mut probe, at);
        assert_eq!(probe.state(at), State::Open);
        assert_eq!(
            probe.state(at + secs(60)),
            State::HalfOpen,
            "stuck open after {t}"
        );
    }
}

/// Rules that judge no ratio at all (the window never reaches its minimum calls) and a
/// consecutive rule out of the way: only the latency baseline and the window's counts move.
fn counting_only() -> BreakerSettings {
    BreakerSettings::builder("search")
        .consecutive_failures(1000)
        .failure_rate(None)
        .minimum_calls(1_000_000)
        .build()
        .unwrap()
}

#[test]
fn below_the_minimum_calls_no_ratio_is_evaluated() {
    // An absolute failure ratio, and the relative slow-call rule with a warm baseline: either
    // would trip on the first bad outcome if a ratio were judged before 20 calls.
    let by_failures = BreakerSettings::builder("payments")
        .consecutive_failures(1000)
        .failure_rate(None)
        .slow_calls(None)
        .failure_ratio(Ratio::from_percent(20))
        .build()
        .unwrap();
    for (settings, latency, outcome, reason) in [
        (
            by_failures,
            ms(10),
            Outcome::Transient,
            TripReason::FailureRatio,
        ),
        (
            slow_only(),
            ms(500),
            Outcome::Success,
            TripReason::SlowCalls,
        ),
    ] {
        let mut b = Breaker::new(settings);
        // 30 fast successes arm the slow-call rule; then they leave the trip window.
        let (t, _) = traffic(&mut b, Instant::from_secs(1), 3, 10, |_| {
            (ms(10), Outcome::Success)
        });
        let t = t + secs(40);
        assert_eq!(b.snapshot(t).window_calls, 0);
        let mut trips = Vec::new();
        for _ in 0..19 {
            call_seeing(&mut b, t, latency, outcome, &mut trips).unwrap();
        }
        let snap = b.snapshot(t + secs(1));
        assert_eq!(snap.state, State::Closed, "{reason:?}");
        assert_eq!(snap.window_calls, 19, "{reason:?}");
        assert_eq!(
            snap.window_failures + snap.window_slow,
            19,
            "every one of them bad: {reason:?}"
        );
        assert!(trips.is_empty(), "{trips:?}");
        call_seeing(&mut b, t, latency, outcome, &mut trips).unwrap();
        assert_eq!(trips, [reason]);
    }
}

#[test]
fn one_failure_is_never_a_rate() {
    // A clean baseline puts the relative trip point at the 5% floor, which one failure in a
    // window of 20 calls reaches; the rule asks for at least 2 failures in the window.
    let with_min_failures = |n: u32| {
        BreakerSettings::builder("payments")
            .consecutive_failures(1000)
            .slow_calls(None)
            .failure_rate(Some(FailureRate::above(5).minimum_failures(n)))
            .build()
            .unwrap()
    };
    assert_eq!(
        with_min_failures(2),
        rate_only(),
        "2 failures is the default"
    );
    let warm = |settings| {
        let mut b = Breaker::new(settings);
        let (t, _) = traffic(&mut b, Instant::from_secs(1), 100, 10, |_| {
            (ms(20), Outcome::Success)
        });
        // The trip window empties into the baseline.
        let t = t + secs(40);
        assert_eq!(b.normal_failure_rate(t), Some(Ratio::ZERO));
        assert_eq!(b.snapshot(t).window_calls, 0);
        (b, t)
    };
    let mut trips = Vec::new();

    let (mut b, t) = warm(rate_only());
    for _ in 0..19 {
        call_seeing(&mut b, t, ms(20), Outcome::Success, &mut trips).unwrap();
    }
    call_seeing(&mut b, t, ms(20), Outcome::Transient, &mut trips).unwrap();
    assert_eq!(b.snapshot(t + secs(1)).window_failures, 1);
    assert!(trips.is_empty(), "one failure in 20 calls: {trips:?}");
    call_seeing(&mut b, t, ms(20), Outcome::Transient, &mut trips).unwrap();
    assert_eq!(trips, [TripReason::FailureRate], "two in 21 calls");

    // The same traffic, were one failure enough, trips at the first.
    trips.clear();
    let (mut b, t) = warm(with_min_failures(1));
    for _ in 0..19 {
        call_seeing(&mut b, t, ms(20), Outcome::Success, &mut trips).unwrap();
    }
    call_seeing(&mut b, t, ms(20), Outcome::Transient, &mut trips).unwrap();
    assert_eq!(trips, [TripReason::FailureRate]);
}

#[test]
fn failures_never_teach_the_latency_baseline() {
    let mut b = Breaker::new(counting_only());
    let (t, _) = traffic(&mut b, Instant::from_secs(1), 10, 10, |_| {
        (ms(10), Outcome::Success)
    });
    let normal = b.normal_latency(t).unwrap();
    assert!(
        normal >= ms(10) && normal <= Duration::from_micros(11_250),
        "{normal}"
    );
    let before = b.clone();
    // 900 failures, each 50x slower than normal: were they taught, the median would be theirs.
    let (end, trips) = traffic(&mut b, t, 90, 10, |_| (ms(500), Outcome::Transient));
    assert!(trips.is_empty());
    assert_eq!(b.snapshot(end).consecutive_failures, 900);
    assert_eq!(b.normal_latency(end), Some(normal));
    // As many slow successes would (the baseline is learned from successful calls).
    let mut b = before;
    let (end, _) = traffic(&mut b, t, 90, 10, |_| (ms(500), Outcome::Success));
    assert!(b.normal_latency(end).unwrap() >= ms(500));
}

#[test]
fn an_attempt_timeout_is_a_slow_failure_kept_out_of_the_latency_baseline() {
    let mut b = Breaker::new(counting_only());
    let (t, _) = traffic(&mut b, Instant::from_secs(1), 10, 10, |_| {
        (ms(10), Outcome::Success)
    });
    let normal = b.normal_latency(t).unwrap();
    let before = b.snapshot(t);
    assert_eq!((before.window_failures, before.window_slow), (0, 0));
    // A timeout is slow even when the attempt timeout is below the slow-call threshold.
    call(&mut b, t, ms(5), Outcome::TimedOut).unwrap();
    call(&mut b, t, secs(2), Outcome::TimedOut).unwrap();
    let after = b.snapshot(t + secs(2));
    assert_eq!(after.window_calls, before.window_calls + 2);
    assert_eq!(after.window_failures, 2, "a transient failure");
    assert_eq!(after.window_slow, 2, "and a slow call");
    assert_eq!(after.consecutive_failures, 2);
    // Hundreds of timeouts later, normal latency has not moved.
    let (end, _) = traffic(&mut b, t + secs(2), 50, 10, |_| {
        (secs(2), Outcome::TimedOut)
    });
    assert_eq!(b.snapshot(end).consecutive_failures, 502);
    assert_eq!(b.normal_latency(end), Some(normal));
}

#[test]
fn a_call_is_slow_above_either_the_learned_multiple_or_the_absolute_threshold() {
    let with_threshold = |threshold| {
        BreakerSettings::builder("search")
            .consecutive_failures(1000)
            .failure_rate(None)
            .slow_calls(Some(SlowCalls::above(3)))
            .slow_threshold(threshold)
            .minimum_calls(1_000_000)
            .build()
            .unwrap()
    };
    // Whether one call of `latency`, after a baseline of `normal`, is counted slow.
    let is_slow = |settings, normal: Duration, latency: Duration| {
        let mut b = Breaker::new(settings);
        let (t, _) = traffic(&mut b, Instant::from_secs(1), 10, 10, |_| {
            (normal, Outcome::Success)
        });
        assert_eq!(b.snapshot(t).window_slow, 0);
        call(&mut b, t, latency, Outcome::Success).unwrap();
        b.snapshot(t + secs(1)).window_slow == 1
    };
    let both = with_threshold(Some(ms(100)));
    // Normal 10 ms: 3x normal (30-34 ms) is the lower threshold.
    assert!(!is_slow(both, ms(10), ms(25)));
    assert!(
        is_slow(both, ms(10), ms(50)),
        "above 3x normal, below 100 ms"
    );
    // Normal 50 ms: the absolute 100 ms is the lower threshold.
    assert!(!is_slow(both, ms(50), ms(90)));
    assert!(
        is_slow(both, ms(50), ms(120)),
        "above 100 ms, below 3x normal"
    );
    assert!(
        !is_slow(with_threshold(None), ms(50), ms(120)),
        "without the absolute threshold, 120 ms is below 3x normal"
    );
}

#[test]
fn the_relative_rule_may_only_trip_sooner_than_the_absolute_ceiling() {
    let settings = BreakerSettings::builder("payments")
        .consecutive_failures(1000)
        .slow_calls(None)
        .failure_ratio(Ratio::from_percent(30))
        .build()
        .unwrap();
    let failing_one_in = |n: u64, of: u64| {
        move |i: u64| {
            (
                ms(20),
                if i % of < n {
                    Outcome::Transient
                } else {
                    Outcome::Success
                },
            )
        }
    };
    // Normal 1%: a 20% spike is above 5x normal and below the 30% ceiling. The relative rule
    // trips; the ceiling alone would not have.
    let mut b = Breaker::new(settings);
    let (t, trips) = traffic(
        &mut b,
        Instant::from_secs(1),
        100,
        10,
        failing_one_in(1, 100),
    );
    assert!(trips.is_empty(), "{trips:?}");
    let (_, trips) = traffic(&mut b, t, 30, 10, failing_one_in(1, 5));
    assert_eq!(trips.first().map(|t| t.1), Some(TripReason::FailureRate));

    // Normal 20%: 5x normal is beyond 100%, so the relative rule would never trip; the ceiling
    // is not raised by it, and trips a 40% spike.
    let mut b = Breaker::new(settings);
    let (t, trips) = traffic(&mut b, Instant::from_secs(1), 120, 10, failing_one_in(1, 5));
    assert!(trips.is_empty(), "{trips:?}");
    let normal = b.normal_failure_rate(t).unwrap().as_f64();
    assert!((0.19..0.21).contains(&normal), "{normal}");
    let (_, trips) = traffic(&mut b, t, 30, 10, failing_one_in(2, 5));
    assert_eq!(trips.first().map(|t| t.1), Some(TripReason::FailureRatio));
}

/// The first call the ramp admits at or after `*t`, moving `*t` on a millisecond per shed offer.
fn admitted(b: &mut Breaker, t: &mut Instant) -> stormguard_core::Permit {
    for _ in 0..10_000 {
        match b.try_acquire(*t) {
            Ok(p) => return p,
            Err(r) => {
                assert_eq!(r.reason, RefusalReason::RampShedding);
                *t += MS;
            }
        }
    }
    panic!("the ramp admitted nothing for 10 s");
}

#[test]
fn a_run_of_probe_successes_fast_calls_raises_the_evidence_cap_by_five_percent() {
    let mut b = Breaker::new(ramped());
    let start = into_ramp(&mut b);
    // A slow admitted call halves the cap to 50%.
    let mut t = start + ms(3200);
    let p = admitted(&mut b, &mut t);
    b.on_outcome(t + ms(100), p, Outcome::Success, &mut |_| {});
    // Past the ramp's length (3.75 s) the clock term is 1: the cap alone is the fraction.
    let mut t = start + secs(4);
    assert_eq!(b.ramp_fraction(t), Ratio::from_percent(50));
    let mut steps = Vec::new();
    for _ in 0..4 {
        let p = admitted(&mut b, &mut t);
        let mut step = None;
        b.on_outcome(t + ms(10), p, Outcome::Success, &mut |e| {
            if let Event::RampStep { fraction, cap, .. } = e {
                step = Some((fraction.ppm(), cap.ppm()));
            }
        });
        steps.push(step);
        t += ms(10);
    }
    // `probe successes` is 2: every second fast call is one step of 5%.
    assert_eq!(
        steps,
        [
            None,
            Some((550_000, 550_000)),
            None,
            Some((600_000, 600_000))
        ]
    );
    assert_eq!(b.ramp_fraction(t), Ratio::from_percent(60));
    assert_eq!(b.state(t), State::Recovering);
}

#[test]
fn a_stale_permits_outcome_is_still_recorded_for_the_baselines() {
    let mut b = Breaker::new(unjittered("payments"));
    let t = Instant::from_secs(10);
    let stale: Vec<_> = (0..100).map(|_| b.try_acquire(t).unwrap()).collect();
    trip(&mut b, t);
    assert_eq!(b.normal_latency(t), None);
    assert_eq!(b.normal_failure_rate(t), None);
    // The hundred calls granted while closed report while the breaker is open: 10 failures,
    // 90 successes, 40 ms each.
    let late = t + ms(40);
    for (i, p) in stale.into_iter().enumerate() {
        let outcome = if i % 10 == 0 {
            Outcome::Transient
        } else {
            Outcome::Success
        };
        b.on_outcome(late, p, outcome, &mut |e| panic!("decided {e:?}"));
    }
    // They decide nothing ...
    let snap = b.snapshot(late);
    assert_eq!(snap.state, State::Open);
    assert_eq!(snap.consecutive_failures, 5);
    assert_eq!(snap.until_half_open, secs(15) - ms(40));
    assert_eq!(snap.window_calls, 0);
    // ... but both baselines learned from them.
    let normal = b.normal_latency(late).unwrap();
    assert!(
        normal >= ms(40) && normal <= Duration::from_micros(45_000),
        "{normal}"
    );
    assert_eq!(b.normal_failure_rate(late), Ratio::from_percent(10));
}

#[test]
fn the_learned_baselines_survive_an_open_a_close_and_a_reset() {
    let mut b = Breaker::new(unjittered("payments"));
    // Normal: 20 ms, 1% failures.
    let (t, trips) = traffic(&mut b, Instant::from_secs(1), 100, 10, |i| {
        (
            ms(20),
            if i % 100 == 50 {
                Outcome::Transient
            } else {
                Outcome::Success
            },
        )
    });
    assert!(trips.is_empty(), "{trips:?}");
    let latency = b.normal_latency(t).unwrap();
    let rate = b.normal_failure_rate(t).unwrap();
    assert!((0.009..0.011).contains(&rate.as_f64()), "{rate}");
    let check = |b: &Breaker, at: Instant, after: &str| {
        assert_eq!(b.normal_latency(at), Some(latency), "after {after}");
        let now = b.normal_failure_rate(at).unwrap();
        assert!(
            (now.as_f64() - rate.as_f64()).abs() < 0.0005,
            "after {after}: {rate} became {now}"
        );
        assert_eq!(
            b.snapshot(at).normal_latency,
            Some(latency),
            "after {after}"
        );
        assert_eq!(
            b.snapshot(at).normal_failure_rate,
            Some(now),
            "after {after}"
        );
    };

    trip(&mut b, t);
    check(&b, t, "an open");
    let after = t + secs(15);
    call(&mut b, after, ms(20), Outcome::Success).unwrap();
    call(&mut b, after + ms(20), ms(20), Outcome::Success).unwrap();
    let closed = after + ms(40);
    assert_eq!(b.state(closed), State::Closed);
    check(&b, closed, "a close");
    b.isolate(closed, &mut |_| {});
    b.reset(closed + secs(1), &mut |_| {});
    assert_eq!(b.state(closed + secs(1)), State::Closed);
    check(&b, closed + secs(1), "a reset");
}

#[test]
fn every_kind_of_event_carries_the_breakers_name() {
    use std::collections::BTreeSet;
    use stormguard_core::{
        Backoff, Budget, BudgetSettings, Call, CallSettings, Jitter, Parts, Step,
    };
    // The budget has a name of its own: a refusal or hedge is still told under the breaker's.
    let p = Parts::new()
        .breaker(Breaker::new(ramped()))
        .budget(Budget::new(BudgetSettings::defaults("client-wide")));
    let settings = CallSettings::builder()
        .hedging(true)
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .unwrap();
    let mut seen = BTreeSet::new();
    let mut sink = |e: Event<'_>| {
        assert_eq!(e.name(), &"search", "{e:?}");
        seen.insert(e.kind());
    };

    // A learned baseline, so that a slow attempt can be hedged.
    let mut now = Instant::from_secs(1);
    for _ in 0..40 {
        let permit = p
            .breaker
            .as_ref()
            .unwrap()
            .try_acquire_with(now, None, &mut sink)
            .unwrap();
        now += ms(10);
        p.breaker
            .as_ref()
            .unwrap()
            .on_outcome(now, permit, Outcome::Success, &mut sink);
    }

    // Hedged: the first attempt is still running at the learned p95.
    let mut c = Call::begin(&settings, now);
    let Step::Attempt(first) = c.poll(&p, now, &mut sink) else {
        panic!("expected an attempt")
    };
    let at = now + c.hedge_delay(&p, now).unwrap();
    let hedge = c.hedge(&p, at, &mut sink).unwrap();
    c.complete(&p, hedge, at + ms(10), Outcome::Success, &mut sink);
    c.complete(&p, first, at + ms(11), Outcome::Cancelled, &mut sink);
    now = at + ms(11);

    // Retry: the first attempt fails, the second succeeds.
    let mut c = Call::begin(&settings, now);
    loop {
        match c.poll(&p, now, &mut sink) {
            Step::Attempt(permit) => {
                let outcome = if c.attempts() == 1 {
                    Outcome::Transient
                } else {
                    Outcome::Success
                };
                now += ms(10);
                c.complete(&p, permit, now, outcome, &mut sink);
            }
            Step::Wait(d) => now += d,
            Step::Done(f) => {
                assert_eq!(f, stormguard_core::Finished::Succeeded);
                break;
            }
            Step::Reject(r) => panic!("{r:?}"),
        }
    }

    // State changes: closed to open.
    for _ in 0..5 {
        let permit = p
            .breaker
            .as_ref()
            .unwrap()
            .try_acquire_with(now, None, &mut sink)
            .unwrap();
        p.breaker
            .as_ref()
            .unwrap()
            .on_outcome(now, permit, Outcome::Transient, &mut sink);
    }
    assert_eq!(p.breaker.as_ref().unwrap().state(now), State::Open);

    // Rejected: a call while open.
    let mut c = Call::begin(&settings, now);
    let Step::Reject(r) = c.poll(&p, now, &mut sink) else {
        panic!("expected a rejection")
    };
    assert_eq!(r.reason, RefusalReason::BreakerOpen);

    // Probe started, and reclaimed once it outlives its attempt timeout.
    let after = now + secs(15);
    let lost = p
        .breaker
        .as_ref()
        .unwrap()
        .try_acquire_with(after, Some(secs(1)), &mut sink)
        .unwrap();
    drop(lost);
    let probe = p
        .breaker
        .as_ref()
        .unwrap()
        .try_acquire_with(after + secs(1), Some(secs(1)), &mut sink)
        .unwrap();
    p.breaker.as_ref().unwrap().on_outcome(
        after + secs(1) + ms(10),
        probe,
        Outcome::Success,
        &mut sink,
    );

    // Ramp step: the second probe success starts the ramp.
    let t = after + secs(2);
    let probe = p
        .breaker
        .as_ref()
        .unwrap()
        .try_acquire_with(t, None, &mut sink)
        .unwrap();
    p.breaker
        .as_ref()
        .unwrap()
        .on_outcome(t + ms(10), probe, Outcome::Success, &mut sink);
    assert_eq!(
        p.breaker.as_ref().unwrap().state(t + ms(10)),
        State::Recovering
    );

    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        [
            "attempt",
            "hedged",
            "probe_started",
            "probes_reclaimed",
            "ramp_step",
            "rejected",
            "retry",
            "state_changed"
        ]
    );
}
