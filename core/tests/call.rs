//! The call driver: deadline, attempt timeout, backoff, budget, breaker and guarded rejection,
//! composed, on synthetic time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    call::Gate, call::NoHedge, limits::RateLimitSettings, limits::RateLimiter,
    limits::SharedRateLimiter, Backoff, Breaker, BreakerSettings, Budget, BudgetSettings, Call,
    CallSettings, Duration, Event, Finished, Instant, Jitter, Name, Outcome, Parts, RefusalReason,
    Rejection, Step, GUARD_PAUSE,
};

mod support;
use support::{ms, no_jitter, secs};

/// What the adapter did, step by step.
#[derive(Debug, PartialEq, Eq)]
enum Did {
    Attempt,
    Wait(Duration),
    Reject(Rejection),
}

/// Drives a call the way an adapter does; `op` gives each attempt's latency and outcome.
fn drive(
    call: &mut Call,
    parts: &impl Gate,
    now: &mut Instant,
    events: &mut Vec<String>,
    mut op: impl FnMut(u32) -> (Duration, Outcome),
) -> (Result<Finished, Rejection>, Vec<Did>) {
    let mut did = Vec::new();
    // The call's decisions; each attempt's end (the attempt log's events) is tested apart.
    let mut sink = |e: Event<'_>| {
        events.push(match e {
            Event::Attempt { .. } => return,
            Event::Rejected { delay, .. } => format!("rejected delay={delay}"),
            Event::Retry { attempt, delay, .. } => format!("retry #{attempt} after {delay}"),
            other => other.kind().to_string(),
        })
    };
    let result = loop {
        match call.poll(parts, *now, &mut sink) {
            Step::Attempt(permit) => {
                did.push(Did::Attempt);
                let (latency, outcome) = op(call.attempts());
                let latency = match call.attempt_deadline() {
                    Some(d) if *now + latency > d => d - *now,
                    _ => latency,
                };
                let outcome = if Some(*now + latency) == call.attempt_deadline()
                    && outcome != Outcome::Success
                {
                    Outcome::TimedOut
                } else {
                    outcome
                };
                *now += latency;
                call.complete(parts, permit, *now, outcome, &mut sink);
            }
            Step::Wait(d) => {
                did.push(Did::Wait(d));
                *now += d;
            }
            Step::Reject(r) => {
                did.push(Did::Reject(r));
                *now += r.pause;
                break Err(r);
            }
            Step::Done(f) => break Ok(f),
        }
    };
    (result, did)
}

fn parts() -> Parts<Breaker, Budget> {
    Parts::new()
        .breaker(Breaker::new(
            BreakerSettings::builder("payments")
                .jitter(false)
                .build()
                .unwrap(),
        ))
        .budget(Budget::new(BudgetSettings::defaults("payments")))
}

#[test]
fn a_zero_backoff_retries_at_once_with_no_wait_step() {
    let zero = Backoff::builder().base(Duration::ZERO).build().unwrap();
    for backoff in [Backoff::none(), zero] {
        let settings = CallSettings::builder().backoff(backoff).build().unwrap();
        let p = parts();
        let mut now = Instant::from_secs(1);
        let mut call = Call::begin(&settings, now);
        let mut ev = Vec::new();
        let (r, did) = drive(&mut call, &p, &mut now, &mut ev, |n| {
            (
                ms(10),
                if n < 3 {
                    Outcome::Transient
                } else {
                    Outcome::Success
                },
            )
        });
        assert_eq!(r, Ok(Finished::Succeeded));
        assert_eq!(did, [Did::Attempt, Did::Attempt, Did::Attempt]);
        assert_eq!(ev, ["retry #2 after 0s", "retry #3 after 0s"]);
        assert_eq!(
            now,
            Instant::from_secs(1) + ms(30),
            "no time but the attempts'"
        );
    }
}

#[test]
fn a_transient_failure_is_retried_after_the_base_and_then_doubled() {
    let p = parts();
    let mut now = Instant::from_secs(1);
    let mut call = Call::begin(&no_jitter(), now);
    let mut ev = Vec::new();
    let (r, did) = drive(&mut call, &p, &mut now, &mut ev, |_| {
        (ms(10), Outcome::Transient)
    });
    assert_eq!(r, Ok(Finished::Failed(Outcome::Transient)));
    assert_eq!(
        did,
        [
            Did::Attempt,
            Did::Wait(ms(100)),
            Did::Attempt,
            Did::Wait(ms(200)),
            Did::Attempt
        ]
    );
    assert_eq!(ev, ["retry #2 after 100ms", "retry #3 after 200ms"]);
}

#[test]
fn permanent_failures_are_never_retried_and_cancellation_ends_the_call() {
    let p = parts();
    let mut now = Instant::from_secs(1);
    let mut call = Call::begin(&no_jitter(), now);
    let (r, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
        (ms(10), Outcome::Permanent)
    });
    assert_eq!(r, Ok(Finished::Failed(Outcome::Permanent)));
    assert_eq!(did, [Did::Attempt]);

    let mut call = Call::begin(&no_jitter(), now);
    let (r, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
        (ms(10), Outcome::Cancelled)
    });
    assert_eq!(r, Ok(Finished::Cancelled));
    assert_eq!(did, [Did::Attempt]);
    assert_eq!(
        p.breaker
            .as_ref()
            .unwrap()
            .snapshot(now)
            .consecutive_failures,
        0
    );
}

#[test]
fn a_throttled_outcome_waits_for_the_dependencys_hint_and_the_retry_is_charged_to_the_budget() {
    // No floor, so nothing refills the budget during the wait: capacity is one retry.
    let p = Parts::new()
        .breaker(Breaker::new(BreakerSettings::defaults("payments")))
        .budget(Budget::new(
            BudgetSettings::builder("payments")
                .floor_per_second_milli(0)
                .build()
                .unwrap(),
        ));
    let mut now = Instant::from_secs(1);
    let before = p.budget.as_ref().unwrap().available(now);
    let mut call = Call::begin(&no_jitter(), now);
    let (r, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |n| {
        if n == 1 {
            (
                ms(10),
                Outcome::Throttled {
                    retry_after: Some(ms(2500)),
                },
            )
        } else {
            (ms(10), Outcome::Success)
        }
    });
    assert_eq!(r, Ok(Finished::Succeeded));
    assert_eq!(did, [Did::Attempt, Did::Wait(ms(2500)), Did::Attempt]);
    assert_eq!(p.budget.as_ref().unwrap().available(now), before - 1);
    assert_eq!(
        p.breaker.as_ref().unwrap().snapshot(now).window_calls,
        1,
        "throttled outcomes stay out of the ratios"
    );
}

#[test]
fn without_a_hint_a_throttled_outcome_backs_off_from_the_throttled_base() {
    let p = parts();
    let mut now = Instant::from_secs(1);
    let mut call = Call::begin(&no_jitter(), now);
    let (_, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |n| {
        if n == 1 {
            (ms(10), Outcome::Throttled { retry_after: None })
        } else {
            (ms(10), Outcome::Success)
        }
    });
    assert_eq!(did[1], Did::Wait(secs(1)));
}

#[test]
fn the_first_attempt_is_never_charged_to_the_budget() {
    let p = Parts::new().named(Name::new("x")).budget(Budget::new(
        BudgetSettings::builder("x")
            .floor_per_second_milli(0)
            .build()
            .unwrap(),
    ));
    let mut now = Instant::from_secs(1);
    let start = p.budget.as_ref().unwrap().available(now);
    for _ in 0..100 {
        let mut call = Call::begin(&no_jitter(), now);
        let (r, _) = drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
            (ms(1), Outcome::Success)
        });
        assert_eq!(r, Ok(Finished::Succeeded));
    }
    assert!(p.budget.as_ref().unwrap().available(now) >= start);
}

#[test]
fn an_empty_budget_stops_retries_with_a_rejection_carrying_the_last_error() {
    let p = Parts::new()
        .named(Name::new("payments"))
        .budget(Budget::new(BudgetSettings::defaults("payments")));
    let mut now = Instant::from_secs(1);
    // Drain the budget (30 tokens) with failing calls: 2 retries each.
    let mut rejected = None;
    for _ in 0..100 {
        let mut call = Call::begin(&no_jitter(), now);
        let (r, _) = drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
            (Duration::ZERO, Outcome::Transient)
        });
        if let Err(r) = r {
            rejected = Some(r);
            break;
        }
    }
    let r = rejected.expect("the budget ran out");
    assert_eq!(r.reason, RefusalReason::BudgetExhausted);
    assert_eq!(r.last, Some(Outcome::Transient));
    assert_eq!(r.pause, GUARD_PAUSE);
    // The floor (3 per second) accrues one token within a third of a second, counted from
    // the end of the pause.
    assert!(r.retry_after <= ms(334) - GUARD_PAUSE, "{}", r.retry_after);
}

/// Runs a call whose attempts the dependency answers, each with `outcome`, until it ends.
fn drive_answered(
    call: &mut Call,
    parts: &impl Gate,
    now: &mut Instant,
    outcome: Outcome,
) -> (Step, Vec<String>) {
    let mut events = Vec::new();
    let mut sink = |e: Event<'_>| {
        events.push(match e {
            Event::Attempt { .. } => return,
            Event::Rejected { reason, delay, .. } => format!("rejected {reason} delay={delay}"),
            other => other.kind().to_string(),
        })
    };
    let step = loop {
        match call.poll(parts, *now, &mut sink) {
            Step::Attempt(permit) => {
                *now += ms(10);
                call.complete_attempt(parts, permit, *now, outcome, true, &mut sink);
            }
            Step::Wait(d) => *now += d,
            other => break other,
        }
    };
    (step, events)
}

#[test]
fn a_retry_refused_after_an_answered_failure_hands_the_answer_back_at_once() {
    // The budget refuses the retry: a budget of one retry, already spent.
    let thin = BudgetSettings::builder("payments")
        .floor_per_second(0.1)
        .build()
        .unwrap();
    for answer in [Outcome::Transient, Outcome::Throttled { retry_after: None }] {
        let p = Parts::new()
            .named(Name::new("payments"))
            .budget(Budget::new(thin));
        let mut now = Instant::from_secs(1);
        p.budget.as_ref().unwrap().try_withdraw(now).unwrap();
        let mut call = Call::begin(&no_jitter(), now);
        let (step, events) = drive_answered(&mut call, &p, &mut now, answer);
        assert_eq!(step, Step::Done(Finished::Failed(answer)), "{answer:?}");
        assert_eq!(call.attempts(), 1);
        assert_eq!(now, Instant::from_secs(1) + ms(10), "no pause served");
        assert_eq!(events, ["rejected budget_exhausted delay=0s"]);
    }
    // The breaker refuses it: the answered failure opened it.
    let p = Parts::new()
        .breaker(Breaker::new(
            BreakerSettings::builder("payments")
                .consecutive_failures(1)
                .jitter(false)
                .build()
                .unwrap(),
        ))
        .budget(Budget::new(BudgetSettings::defaults("payments")));
    let mut now = Instant::from_secs(1);
    let mut call = Call::begin(&no_jitter(), now);
    let (step, events) = drive_answered(&mut call, &p, &mut now, Outcome::Transient);
    assert_eq!(step, Step::Done(Finished::Failed(Outcome::Transient)));
    assert_eq!(call.attempts(), 1);
    assert!(
        events.contains(&"rejected breaker_open delay=0s".to_string()),
        "{events:?}"
    );
    // The backoff wait was served; no pause after it.
    assert_eq!(now, Instant::from_secs(1) + ms(110));
}

#[test]
fn a_retry_refused_after_an_unanswered_failure_is_still_a_guarded_rejection() {
    let thin = BudgetSettings::builder("payments")
        .floor_per_second(0.1)
        .build()
        .unwrap();
    let p = Parts::new()
        .named(Name::new("payments"))
        .budget(Budget::new(thin));
    let mut now = Instant::from_secs(1);
    p.budget.as_ref().unwrap().try_withdraw(now).unwrap();
    let mut call = Call::begin(&no_jitter(), now);
    let (r, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
        (ms(10), Outcome::Transient)
    });
    let r = r.unwrap_err();
    assert_eq!(r.pause, GUARD_PAUSE);
    assert_eq!(did, [Did::Attempt, Did::Reject(r)]);
}

#[test]
fn a_budgets_refusal_is_announced_under_the_breakers_name() {
    let no_floor = BudgetSettings::builder("client-wide")
        .floor_per_second(0.0)
        .build()
        .unwrap();
    let p = Parts::new()
        .named(Name::new("payments"))
        .budget(Budget::new(no_floor));
    while p
        .budget
        .as_ref()
        .unwrap()
        .try_withdraw(Instant::ZERO)
        .is_ok()
    {}
    let mut now = Instant::from_secs(1);
    let mut events = Vec::new();
    let mut call = Call::begin(&no_jitter(), now);
    let (r, _) = drive(&mut call, &p, &mut now, &mut events, |_| {
        (Duration::ZERO, Outcome::Transient)
    });
    assert_eq!(r.unwrap_err().reason, RefusalReason::BudgetExhausted);
    let mut named = Vec::new();
    let mut call = Call::begin(&no_jitter(), now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!("a first attempt needs no budget")
    };
    let mut sink = |e: Event<'_>| {
        if let Event::Rejected { name, reason, .. } = e {
            named.push((name.as_str().to_owned(), reason));
        }
    };
    call.complete(&p, permit, now, Outcome::Transient, &mut sink);
    while let Step::Wait(d) = call.poll(&p, now, &mut sink) {
        now += d;
    }
    assert_eq!(
        named,
        [("payments".to_owned(), RefusalReason::BudgetExhausted)]
    );
}

#[test]
fn retries_are_refused_while_the_breaker_is_open_with_the_last_error() {
    let p = Parts::new().breaker(Breaker::new(
        BreakerSettings::builder("radio")
            .consecutive_failures(1)
            .jitter(false)
            .build()
            .unwrap(),
    ));
    let mut now = Instant::from_secs(1);
    let mut call = Call::begin(&no_jitter(), now);
    let mut ev = Vec::new();
    let (r, did) = drive(&mut call, &p, &mut now, &mut ev, |_| {
        (ms(5), Outcome::Transient)
    });
    let r = r.unwrap_err();
    assert_eq!(r.reason, RefusalReason::BreakerOpen);
    assert_eq!(r.last, Some(Outcome::Transient));
    assert_eq!(r.attempts, 1);
    assert_eq!(
        did.iter().filter(|d| **d == Did::Attempt).count(),
        1,
        "the trip stops the second attempt"
    );
    assert!(ev.contains(&"rejected delay=100ms".to_string()));
}

#[test]
fn the_guarded_pause_is_100ms_capped_by_the_deadline() {
    let open = opened_at_one_second;
    let t = Instant::from_secs(2);

    // No deadline: the full 100 ms, and retry_after counts from its end.
    let settings = CallSettings::builder().deadline(None).build().unwrap();
    let p = open();
    let mut call = Call::begin(&settings, t);
    let Step::Reject(r) = call.poll(&p, t, &mut |_| {}) else {
        panic!("expected a rejection")
    };
    assert_eq!(r.pause, ms(100));
    assert_eq!(r.retry_after, secs(14) - ms(100));

    // 40 ms left: a 40 ms pause.
    let p = open();
    let mut call = Call::begin(&CallSettings::DEFAULT, t).with_deadline(t + ms(40));
    let mut announced = None;
    let Step::Reject(r) = call.poll(&p, t, &mut |e| {
        if let Event::Rejected { delay, .. } = e {
            announced = Some(delay);
        }
    }) else {
        panic!("expected a rejection")
    };
    assert_eq!(r.pause, ms(40));
    assert_eq!(announced, Some(ms(40)), "announced before it is served");

    // None left: still the refusal, with no pause.
    let p = open();
    let mut call = Call::begin(&CallSettings::DEFAULT, t).with_deadline(t);
    let Step::Reject(r) = call.poll(&p, t, &mut |_| {}) else {
        panic!("expected a rejection")
    };
    assert_eq!(
        (r.reason, r.pause),
        (RefusalReason::BreakerOpen, Duration::ZERO)
    );
    assert_eq!(r.retry_after, secs(14));
}

#[test]
fn a_wait_that_would_end_past_the_deadline_is_never_started() {
    let p = parts();
    let mut now = Instant::from_secs(1);
    let settings = CallSettings::builder()
        .deadline(Some(ms(150)))
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .unwrap();
    let mut call = Call::begin(&settings, now);
    let (r, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
        (ms(100), Outcome::Transient)
    });
    assert_eq!(
        r,
        Ok(Finished::DeadlineExceeded {
            last: Some(Outcome::Transient)
        })
    );
    assert_eq!(did, [Did::Attempt], "no wait begun");
    assert_eq!(now, Instant::from_secs(1) + ms(100), "ended at once");
}

#[test]
fn a_retry_is_not_started_with_less_time_left_than_a_healthy_call_takes() {
    let p = parts();
    let mut now = Instant::from_secs(1);
    // Teach the breaker that a healthy call takes about 50 ms.
    for _ in 0..30 {
        let permit = p.breaker.as_ref().unwrap().try_acquire(now).unwrap();
        now += ms(50);
        p.breaker
            .as_ref()
            .unwrap()
            .on_outcome(now, permit, Outcome::Success, &mut |_| {});
    }
    let settings = CallSettings::builder()
        .deadline(Some(ms(140)))
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .unwrap();
    let mut call = Call::begin(&settings, now);
    // 10 ms attempt + 100 ms wait leaves 30 ms: less than a healthy call.
    let (r, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
        (ms(10), Outcome::Transient)
    });
    assert_eq!(
        r,
        Ok(Finished::DeadlineExceeded {
            last: Some(Outcome::Transient)
        })
    );
    assert_eq!(did, [Did::Attempt]);
}

#[test]
fn the_healthy_call_guard_on_retries_waits_for_20_latency_samples() {
    // The guard reads the breaker's learned median, which is reported only once 20 successes
    // have taught it: before that a retry is not held back by what a few calls took. A 400 ms
    // deadline, a 10 ms failure and the 100 ms wait leave 290 ms, less than the 500 ms the
    // breaker's successes took.
    let settings = CallSettings::builder()
        .deadline(Some(ms(400)))
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .unwrap();
    for (samples, armed) in [(5, false), (19, false), (20, true), (30, true)] {
        let p = parts();
        let mut now = warm(
            p.breaker.as_ref().unwrap(),
            Instant::from_secs(1),
            ms(500),
            samples,
        );
        assert_eq!(
            p.breaker
                .as_ref()
                .unwrap()
                .snapshot(now)
                .normal_latency
                .is_some(),
            armed,
            "{samples} samples"
        );
        let mut call = Call::begin(&settings, now);
        let (r, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |n| {
            if n == 1 {
                (ms(10), Outcome::Transient)
            } else {
                (ms(10), Outcome::Success)
            }
        });
        if armed {
            assert_eq!(
                r,
                Ok(Finished::DeadlineExceeded {
                    last: Some(Outcome::Transient)
                }),
                "{samples} samples"
            );
            assert_eq!(did, [Did::Attempt], "{samples} samples: no retry");
        } else {
            assert_eq!(r, Ok(Finished::Succeeded), "{samples} samples");
            assert_eq!(
                did,
                [Did::Attempt, Did::Wait(ms(100)), Did::Attempt],
                "{samples} samples: the guard is not armed, the retry runs"
            );
        }
    }
}

#[test]
fn an_attempt_is_bounded_by_its_timeout_and_the_deadline() {
    let p = parts();
    let now = Instant::from_secs(1);
    let settings = CallSettings::builder()
        .attempt_timeout(Some(secs(10)))
        .deadline(Some(secs(4)))
        .build()
        .unwrap();
    let mut call = Call::begin(&settings, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!("expected an attempt")
    };
    assert_eq!(call.attempt_deadline(), Some(now + secs(4)));
    call.complete(&p, permit, now + secs(4), Outcome::TimedOut, &mut |_| {});
    assert_eq!(
        call.poll(&p, now + secs(4), &mut |_| {}),
        Step::Done(Finished::DeadlineExceeded {
            last: Some(Outcome::TimedOut)
        })
    );
}

#[test]
fn max_attempts_bounds_a_call() {
    let p = Parts::new().named(Name::new("x"));
    let mut now = Instant::from_secs(1);
    let settings = CallSettings::builder()
        .max_attempts(5)
        .deadline(None)
        .build()
        .unwrap();
    let mut call = Call::begin(&settings, now);
    let (r, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
        (ms(1), Outcome::Transient)
    });
    assert_eq!(r, Ok(Finished::Failed(Outcome::Transient)));
    assert_eq!(did.iter().filter(|d| **d == Did::Attempt).count(), 5);
}

#[test]
fn the_worker_preset_waits_1_2_4_8_16_32_then_60_seconds() {
    let p = Parts::new().named(Name::new("worker"));
    let mut now = Instant::from_secs(1);
    let mut call = Call::begin(&CallSettings::worker(), now);
    let (_, did) = drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
        (Duration::ZERO, Outcome::Transient)
    });
    let waits: Vec<u64> = did
        .iter()
        .filter_map(|d| {
            if let Did::Wait(w) = d {
                Some(w.as_secs())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
}

#[test]
fn the_same_seed_and_start_give_the_same_jittered_waits() {
    let run = || {
        let p = Parts::new().named(Name::new("x"));
        let mut now = Instant::from_secs(7);
        let settings = CallSettings::builder()
            .max_attempts(6)
            .seed(99)
            .build()
            .unwrap();
        let mut call = Call::begin(&settings, now);
        drive(&mut call, &p, &mut now, &mut Vec::new(), |_| {
            (ms(1), Outcome::Transient)
        })
        .1
    };
    let a = run();
    assert_eq!(a, run());
    for (i, d) in a
        .iter()
        .filter_map(|d| if let Did::Wait(w) = d { Some(*w) } else { None })
        .enumerate()
    {
        assert!(
            d <= Duration::from_millis(100 << i),
            "full jitter stays under the nominal wait"
        );
    }
}

#[test]
fn a_call_is_plain_data_holding_no_borrow() {
    fn is_static_send<T: 'static + Send + Sync + Clone>() {}
    is_static_send::<Call>();
    is_static_send::<Rejection>();
}

#[test]
fn cancelling_during_a_wait_ends_the_call_as_cancelled() {
    let p = parts();
    let now = Instant::from_secs(1);
    let mut call = Call::begin(&no_jitter(), now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    call.complete(&p, permit, now, Outcome::Transient, &mut |_| {});
    assert_eq!(call.poll(&p, now, &mut |_| {}), Step::Wait(ms(100)));
    call.cancel();
    assert_eq!(
        call.poll(&p, now, &mut |_| {}),
        Step::Done(Finished::Cancelled)
    );
}

#[test]
fn cancelling_during_the_guarded_pause_ends_the_call_as_cancelled() {
    let p = Parts::new().breaker(Breaker::new(
        BreakerSettings::builder("payments")
            .consecutive_failures(1)
            .build()
            .unwrap(),
    ));
    let now = Instant::from_secs(1);
    let permit = p.breaker.as_ref().unwrap().try_acquire(now).unwrap();
    p.breaker
        .as_ref()
        .unwrap()
        .on_outcome(now, permit, Outcome::Transient, &mut |_| {});

    // Refused at the first attempt: cancelled 30 ms into the pause.
    let mut call = Call::begin(&no_jitter(), now);
    let Step::Reject(r) = call.poll(&p, now, &mut |_| {}) else {
        panic!("expected a rejection")
    };
    assert_eq!(r.pause, ms(100));
    assert!(!call.is_over(), "the pause is still being served");
    call.cancel();
    assert!(call.is_over());
    assert_eq!(
        call.poll(&p, now + ms(30), &mut |_| {}),
        Step::Done(Finished::Cancelled)
    );

    // A retry refused (the pending rejection handed out at the next poll), then cancelled.
    let p = parts();
    let mut call = Call::begin(&no_jitter(), now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    p.breaker.as_ref().unwrap().isolate(now, &mut |_| {});
    call.complete(&p, permit, now, Outcome::Transient, &mut |_| {});
    let mut at = now;
    let step = loop {
        match call.poll(&p, at, &mut |_| {}) {
            Step::Wait(d) => at += d,
            other => break other,
        }
    };
    assert!(matches!(step, Step::Reject(_)), "{step:?}");
    call.cancel();
    assert_eq!(
        call.poll(&p, at + ms(50), &mut |_| {}),
        Step::Done(Finished::Cancelled)
    );
}

#[test]
fn a_rejection_is_handed_out_once_then_reported_as_done() {
    let p = Parts::new().breaker(Breaker::new(
        BreakerSettings::builder("x")
            .consecutive_failures(1)
            .build()
            .unwrap(),
    ));
    let t = Instant::from_secs(1);
    let pm = p.breaker.as_ref().unwrap().try_acquire(t).unwrap();
    p.breaker
        .as_ref()
        .unwrap()
        .on_outcome(t, pm, Outcome::Transient, &mut |_| {});
    let mut call = Call::begin(&CallSettings::DEFAULT, t);
    let Step::Reject(r) = call.poll(&p, t, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(
        call.poll(&p, t, &mut |_| {}),
        Step::Done(Finished::Rejected(r))
    );
}

/// Teaches a breaker that healthy calls take `latency`.
fn warm(b: &Breaker, mut now: Instant, latency: Duration, calls: u32) -> Instant {
    for _ in 0..calls {
        let p = b.try_acquire(now).unwrap();
        now += latency;
        b.on_outcome(now, p, Outcome::Success, &mut |_| {});
    }
    now
}

#[test]
fn the_measured_attempt_ceiling_only_ever_tightens_the_configured_timeout() {
    let p = parts();
    let start = Instant::from_secs(1);
    // Not yet 20 successes: no ceiling, the configured 10 s stands.
    let now = warm(p.breaker.as_ref().unwrap(), start, ms(20), 19);
    assert_eq!(p.breaker.as_ref().unwrap().attempt_ceiling(now), None);
    let mut call = Call::begin(&CallSettings::DEFAULT, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempt_deadline(), Some(now + secs(10)));
    call.complete(&p, permit, now + ms(20), Outcome::Success, &mut |_| {});
    // Armed: 3x the p95 (20 ms reads as at most 22.5 ms) tightens 10 s to about 60-68 ms.
    let now = warm(p.breaker.as_ref().unwrap(), now + ms(20), ms(20), 10);
    let ceiling = p.breaker.as_ref().unwrap().attempt_ceiling(now).unwrap();
    assert!(
        ceiling >= ms(60) && ceiling <= Duration::from_micros(67_500),
        "{ceiling}"
    );
    let mut call = Call::begin(&CallSettings::DEFAULT, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempt_deadline(), Some(now + ceiling));
    call.complete(&p, permit, now + ms(20), Outcome::Success, &mut |_| {});
    // A configured timeout shorter than the ceiling stands.
    let short = CallSettings::builder()
        .attempt_timeout(Some(ms(30)))
        .build()
        .unwrap();
    let mut call = Call::begin(&short, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempt_deadline(), Some(now + ms(30)));
    call.complete(&p, permit, now + ms(20), Outcome::Success, &mut |_| {});
    // And it can be turned off.
    let off = CallSettings::builder()
        .measured_ceiling(false)
        .build()
        .unwrap();
    let mut call = Call::begin(&off, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempt_deadline(), Some(now + secs(10)));
    call.complete(&p, permit, now + ms(20), Outcome::Success, &mut |_| {});
}

#[test]
fn every_attempt_of_a_rate_limited_call_takes_a_cell_and_a_refusal_is_guarded() {
    // 2 cells a second, burst 2: the first attempt and one retry pass, the second retry is
    // refused by the limiter with the time until the next cell, served as a guarded rejection.
    let limiter = RateLimiter::new(RateLimitSettings::per_second("search", 2).unwrap());
    let p = Parts::new().named(Name::new("search")).limiter(limiter);
    let mut now = Instant::from_secs(1);
    let mut call = Call::begin(&no_jitter(), now);
    let mut events = Vec::new();
    let (result, did) = drive(&mut call, &p, &mut now, &mut events, |_| {
        (ms(1), Outcome::Transient)
    });
    let Err(rejection) = result else {
        panic!("{result:?}")
    };
    assert_eq!(rejection.reason, RefusalReason::RateLimited);
    assert_eq!(rejection.last, Some(Outcome::Transient));
    assert_eq!(rejection.pause, GUARD_PAUSE);
    // The two cells went at 1.000 s and 1.101 s (after the 100 ms backoff); the third, asked at
    // 1.302 s, is due at 1.500 s.
    assert_eq!(
        did,
        vec![
            Did::Attempt,
            Did::Wait(ms(100)),
            Did::Attempt,
            Did::Wait(ms(200)),
            Did::Reject(rejection)
        ]
    );
    // `retry_after` counts from the end of the pause, when the caller hears of the refusal.
    assert_eq!(rejection.retry_after, ms(500 - 302) - GUARD_PAUSE);
    assert_eq!(call.attempts(), 2);
}

#[test]
fn an_open_breaker_behind_a_rate_limiter_spends_none_of_its_cells() {
    let limiter = SharedRateLimiter::new(RateLimitSettings::per_second("api", 1).unwrap());
    let p = Parts::new()
        .breaker(Breaker::of(1, "api").unwrap())
        .limiter(&limiter);
    let now = Instant::from_secs(1);
    p.breaker.as_ref().unwrap().isolate(now, &mut |_| {});
    for _ in 0..5 {
        let mut call = Call::begin(&CallSettings::DEFAULT, now);
        let Step::Reject(r) = call.poll(&p, now, &mut |_| {}) else {
            panic!()
        };
        assert_eq!(r.reason, RefusalReason::Isolated);
    }
    assert_eq!(limiter.available(now), 1, "refused calls took no cell");
    p.breaker.as_ref().unwrap().reset(now, &mut |_| {});
    let mut call = Call::begin(&CallSettings::DEFAULT, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(limiter.available(now), 0);
    call.complete(&p, permit, now + ms(5), Outcome::Success, &mut |_| {});
    assert_eq!(
        p.breaker.as_ref().unwrap().snapshot(now).state,
        stormguard_core::State::Closed
    );
}

// ---------------------------------------------------------------------------------------------
// Hedging

fn hedging() -> CallSettings {
    no_jitter().to_builder().hedging(true).build().unwrap()
}

/// A breaker that has learned healthy calls take 20 ms, and a full budget.
fn warm_parts(now: Instant) -> (Parts<Breaker, Budget>, Instant) {
    let p = parts();
    let now = warm(p.breaker.as_ref().unwrap(), now, ms(20), 40);
    (p, now)
}

#[test]
fn a_slow_attempt_is_hedged_after_the_learned_p95_and_the_first_success_wins() {
    let (p, now) = warm_parts(Instant::from_secs(1));
    let budget_before = p.budget.as_ref().unwrap().available(now);
    let mut events = Vec::new();
    let mut call = Call::begin(&hedging(), now);
    let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    let after = call
        .hedge_delay(&p, now)
        .expect("a warm, closed breaker hedges");
    assert_eq!(Ok(after), p.breaker.as_ref().unwrap().hedge_after(now));
    // The p95 of 20 ms calls reads at most 12.5% above.
    assert!(
        after >= ms(20) && after <= Duration::from_micros(22_500),
        "{after}"
    );

    // The first attempt is still running at the p95: the hedge goes out, funded by the budget.
    let t = now + after;
    let hedge = call.hedge(&p, t, &mut |e| events.push(e.kind())).unwrap();
    assert_eq!(events, ["hedged"]);
    assert_eq!(call.attempts(), 2);
    assert_eq!(p.budget.as_ref().unwrap().available(t), budget_before - 1);
    // At most two in flight.
    assert_eq!(call.hedge(&p, t, &mut |_| {}), Err(NoHedge::NotNow));

    // The hedge answers first; the call is over; the loser is cancelled and reported as such,
    // which the breaker does not count as a failure.
    call.complete(&p, hedge, t + ms(20), Outcome::Success, &mut |_| {});
    assert!(call.is_over());
    call.complete(&p, first, t + ms(21), Outcome::Cancelled, &mut |_| {});
    assert_eq!(
        call.poll(&p, t + ms(21), &mut |_| {}),
        Step::Done(Finished::Succeeded)
    );
    assert_eq!(
        p.breaker.as_ref().unwrap().snapshot(t).consecutive_failures,
        0
    );
}

#[test]
fn a_failure_of_one_hedged_attempt_waits_for_the_other() {
    let (p, now) = warm_parts(Instant::from_secs(1));
    let mut call = Call::begin(&hedging(), now);
    let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    let t = now + call.hedge_delay(&p, now).unwrap();
    let hedge = call.hedge(&p, t, &mut |_| {}).unwrap();
    // The first attempt fails while the hedge runs: no retry is scheduled, the call goes on.
    call.complete(&p, first, t + ms(1), Outcome::Transient, &mut |_| {});
    assert!(!call.is_over());
    call.complete(&p, hedge, t + ms(20), Outcome::Success, &mut |_| {});
    assert_eq!(
        call.poll(&p, t + ms(20), &mut |_| {}),
        Step::Done(Finished::Succeeded)
    );
}

#[test]
fn when_both_hedged_attempts_fail_the_call_retries_and_a_hedge_counts_as_an_attempt() {
    let (p, now) = warm_parts(Instant::from_secs(1));
    let settings = hedging().to_builder().max_attempts(3).build().unwrap();
    let mut call = Call::begin(&settings, now);
    let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    let t = now + call.hedge_delay(&p, now).unwrap();
    let hedge = call.hedge(&p, t, &mut |_| {}).unwrap();
    call.complete(&p, hedge, t + ms(5), Outcome::Transient, &mut |_| {});
    call.complete(&p, first, t + ms(6), Outcome::Transient, &mut |_| {});
    // Both failed: the ordinary retry, the third and last attempt.
    let Step::Wait(wait) = call.poll(&p, t + ms(6), &mut |_| {}) else {
        panic!()
    };
    let t = t + ms(6) + wait;
    let Step::Attempt(third) = call.poll(&p, t, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempts(), 3);
    // No attempt left to hedge with.
    assert_eq!(call.hedge_delay(&p, t), None);
    assert_eq!(call.hedge(&p, t, &mut |_| {}), Err(NoHedge::NotNow));
    call.complete(&p, third, t + ms(5), Outcome::Transient, &mut |_| {});
    assert_eq!(
        call.poll(&p, t + ms(5), &mut |_| {}),
        Step::Done(Finished::Failed(Outcome::Transient))
    );
}

#[test]
fn a_permanent_failure_of_either_hedged_attempt_ends_the_call() {
    let (p, now) = warm_parts(Instant::from_secs(1));
    let mut call = Call::begin(&hedging(), now);
    let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    let t = now + call.hedge_delay(&p, now).unwrap();
    let hedge = call.hedge(&p, t, &mut |_| {}).unwrap();
    call.complete(&p, hedge, t + ms(2), Outcome::Permanent, &mut |_| {});
    assert!(call.is_over());
    call.complete(&p, first, t + ms(3), Outcome::Cancelled, &mut |_| {});
    assert_eq!(
        call.poll(&p, t + ms(3), &mut |_| {}),
        Step::Done(Finished::Failed(Outcome::Permanent))
    );
}

#[test]
fn hedging_is_off_by_default_and_suppressed_without_a_baseline_or_a_closed_breaker() {
    // Off by default.
    let (p, now) = warm_parts(Instant::from_secs(1));
    let mut call = Call::begin(&no_jitter(), now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.hedge_delay(&p, now), None);
    assert_eq!(call.hedge(&p, now + ms(30), &mut |_| {}), Err(NoHedge::Off));
    call.complete(&p, permit, now + ms(20), Outcome::Success, &mut |_| {});

    // No baseline: a cold breaker, and no breaker at all.
    let cold = parts();
    let mut call = Call::begin(&hedging(), now);
    let Step::Attempt(permit) = call.poll(&cold, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.hedge_delay(&cold, now), None);
    assert_eq!(
        call.hedge(&cold, now + ms(30), &mut |_| {}),
        Err(NoHedge::Suppressed(
            stormguard_core::part::HedgeSuppressed::NoBaseline
        ))
    );
    call.complete(&cold, permit, now + ms(20), Outcome::Success, &mut |_| {});
    let bare = Parts::new().named(Name::new("bare"));
    let mut call = Call::begin(&hedging(), now);
    let Step::Attempt(_) = call.poll(&bare, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.hedge_delay(&bare, now), None);

    // The breaker opens while the first attempt runs (another call's failures): the hedge is
    // suppressed, and nothing is taken from the budget.
    let mut call = Call::begin(&hedging(), now);
    let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert!(call.hedge_delay(&p, now).is_some());
    p.breaker.as_ref().unwrap().isolate(now, &mut |_| {});
    let before = p.budget.as_ref().unwrap().available(now);
    assert_eq!(
        call.hedge(&p, now + ms(30), &mut |_| {}),
        Err(NoHedge::Suppressed(
            stormguard_core::part::HedgeSuppressed::NotClosed
        ))
    );
    assert_eq!(p.budget.as_ref().unwrap().available(now), before);
    call.complete(&p, first, now + ms(40), Outcome::Success, &mut |_| {});
}

#[test]
fn a_hedge_the_budget_cannot_fund_is_not_launched() {
    let p = Parts::new()
        .breaker(parts().breaker.unwrap())
        .budget(Budget::new(
            BudgetSettings::builder("tight")
                .floor_per_second_milli(1)
                .fraction_ppm(1)
                .build()
                .unwrap(),
        ));
    let now = warm(
        p.breaker.as_ref().unwrap(),
        Instant::from_secs(1),
        ms(20),
        40,
    );
    while p.budget.as_ref().unwrap().try_withdraw(now).is_ok() {}
    let mut call = Call::begin(&hedging(), now);
    let Step::Attempt(first) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    let t = now + call.hedge_delay(&p, now).unwrap();
    let Err(NoHedge::Refused(r)) = call.hedge(&p, t, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(r.reason, RefusalReason::BudgetExhausted);
    assert_eq!(call.attempts(), 1);
    // The first attempt goes on and decides the call.
    call.complete(&p, first, t + ms(100), Outcome::Success, &mut |_| {});
    assert_eq!(
        call.poll(&p, t + ms(100), &mut |_| {}),
        Step::Done(Finished::Succeeded)
    );
}

#[test]
fn the_measured_ceiling_never_cuts_a_fast_operation_below_its_50ms_floor() {
    // An operation of a few microseconds: 3x its p95 would be a few microseconds, which one
    // preemption of the calling thread exceeds. The ceiling stays at the 50 ms floor.
    let p = parts();
    let now = warm(
        p.breaker.as_ref().unwrap(),
        Instant::from_secs(1),
        Duration::from_micros(2),
        40,
    );
    assert!(p.breaker.as_ref().unwrap().attempt_ceiling(now).unwrap() < ms(1));
    let mut call = Call::begin(&CallSettings::DEFAULT, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempt_deadline(), Some(now + ms(50)));
    call.complete(&p, permit, now + ms(1), Outcome::Success, &mut |_| {});
}

#[test]
fn the_ceiling_floor_is_a_setting() {
    let p = parts();
    let now = warm(
        p.breaker.as_ref().unwrap(),
        Instant::from_secs(1),
        Duration::from_micros(2),
        40,
    );
    let settings = CallSettings::builder()
        .ceiling_floor(ms(20))
        .build()
        .unwrap();
    assert_eq!(settings.ceiling_floor(), ms(20));
    let mut call = Call::begin(&settings, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempt_deadline(), Some(now + ms(20)));
    call.complete(&p, permit, now + ms(1), Outcome::Success, &mut |_| {});
}

#[test]
fn without_an_attempt_timeout_or_with_one_below_the_floor_there_is_no_measured_ceiling() {
    let p = parts();
    let now = warm(
        p.breaker.as_ref().unwrap(),
        Instant::from_secs(1),
        Duration::from_micros(2),
        40,
    );
    // No attempt timeout: only the call's 30 s deadline bounds the attempt.
    let none = CallSettings::builder()
        .attempt_timeout(None)
        .build()
        .unwrap();
    let mut call = Call::begin(&none, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempt_deadline(), Some(now + secs(30)));
    call.complete(&p, permit, now + ms(1), Outcome::Success, &mut |_| {});
    // A 40 ms attempt timeout, below the 50 ms floor: the configured timeout alone.
    let short = CallSettings::builder()
        .attempt_timeout(Some(ms(40)))
        .build()
        .unwrap();
    let mut call = Call::begin(&short, now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!()
    };
    assert_eq!(call.attempt_deadline(), Some(now + ms(40)));
    call.complete(&p, permit, now + ms(1), Outcome::Success, &mut |_| {});
}

#[test]
fn a_ceiling_floor_under_1ms_is_a_settings_error_naming_ceiling_floor() {
    use stormguard_core::{Bound, Field};
    for floor in [Duration::ZERO, Duration::from_micros(999)] {
        let err = CallSettings::builder()
            .ceiling_floor(floor)
            .build()
            .unwrap_err();
        assert_eq!(
            (err.field, err.bound),
            (Field::CeilingFloor, Bound::AtLeastDuration(ms(1)))
        );
    }
    assert!(CallSettings::builder().ceiling_floor(ms(1)).build().is_ok());
}

// ---------------------------------------------------------------------------------------------
// Settings and the rejection's figures

#[test]
fn every_invalid_call_setting_is_a_typed_error() {
    use stormguard_core::{Bound, Field, SettingsError};
    let b = CallSettings::builder;
    let one_ns = Bound::AtLeastDuration(Duration::from_nanos(1));
    let cases = [
        (b().max_attempts(0), Field::MaxAttempts, Bound::AtLeast(1)),
        (b().deadline(Some(Duration::ZERO)), Field::Deadline, one_ns),
        (
            b().attempt_timeout(Some(Duration::ZERO)),
            Field::AttemptTimeout,
            one_ns,
        ),
        // The worker preset, derived from, is checked the same way.
        (
            CallSettings::worker().to_builder().max_attempts(0),
            Field::MaxAttempts,
            Bound::AtLeast(1),
        ),
    ];
    for (builder, field, bound) in cases {
        assert_eq!(builder.build(), Err(SettingsError { field, bound }));
    }
    assert_eq!(
        b().max_attempts(0).build().unwrap_err().to_string(),
        "`max_attempts` must be at least 1"
    );
    assert_eq!(
        b().deadline(Some(Duration::ZERO))
            .build()
            .unwrap_err()
            .to_string(),
        "`deadline` must be at least 1ns"
    );
    // Each bound's edge is valid, and so is no deadline or attempt timeout at all.
    let edge = b()
        .max_attempts(1)
        .deadline(Some(Duration::from_nanos(1)))
        .attempt_timeout(Some(Duration::from_nanos(1)))
        .build()
        .unwrap();
    assert_eq!(edge.max_attempts(), 1);
    let unbounded = b().deadline(None).attempt_timeout(None).build().unwrap();
    assert_eq!(
        (unbounded.deadline(), unbounded.attempt_timeout()),
        (None, None)
    );
}

#[test]
fn the_default_call_settings_match_the_design() {
    let d = CallSettings::DEFAULT;
    assert_eq!(d.max_attempts(), 3, "2 retries");
    assert_eq!(d.deadline(), Some(secs(30)));
    assert_eq!(d.attempt_timeout(), Some(secs(10)));
    assert!(d.measured_ceiling());
    assert!(!d.hedging());
    let backoff = d.backoff();
    assert_eq!(*backoff, Backoff::DEFAULT);
    assert_eq!(backoff.base(), ms(100));
    assert_eq!(backoff.throttled_base(), secs(1));
    assert_eq!(backoff.factor(), stormguard_core::Multiple::whole(2));
    assert_eq!(backoff.cap(), secs(30));
    assert_eq!(backoff.jitter(), Jitter::Full);
    assert_eq!(CallSettings::builder().build(), Ok(d));
    assert_eq!(CallSettings::default(), d);
    assert_eq!(GUARD_PAUSE, ms(100));
}

/// A breaker opened at 1 s for an unjittered 15 s break, behind nothing else.
fn opened_at_one_second() -> Parts<Breaker> {
    let b = Breaker::new(
        BreakerSettings::builder("payments")
            .jitter(false)
            .build()
            .unwrap(),
    );
    for _ in 0..5 {
        let p = b.try_acquire(Instant::from_secs(1)).unwrap();
        b.on_outcome(Instant::from_secs(1), p, Outcome::Transient, &mut |_| {});
    }
    Parts::new().breaker(b)
}

/// The first poll of a call begun at `at` with `settings` and `deadline`: a rejection, and the
/// `retry_after` its event announced.
fn rejected(
    p: &Parts<Breaker>,
    settings: &CallSettings,
    at: Instant,
    deadline: Option<Instant>,
) -> (Rejection, Option<Duration>) {
    let mut call = Call::begin(settings, at);
    if let Some(d) = deadline {
        call = call.with_deadline(d);
    }
    let mut announced = None;
    let Step::Reject(r) = call.poll(p, at, &mut |e| {
        if let Event::Rejected { retry_after, .. } = e {
            announced = Some(retry_after);
        }
    }) else {
        panic!("expected a rejection")
    };
    (r, announced)
}

#[test]
fn an_open_breakers_retry_after_is_the_remaining_break_less_the_pause_never_below_zero() {
    let p = opened_at_one_second();
    let no_deadline = CallSettings::builder().deadline(None).build().unwrap();

    // 14 s of the break left, 40 ms of the deadline: a 40 ms pause, and the rest of the break
    // counted from its end.
    let t = Instant::from_secs(2);
    let (r, announced) = rejected(&p, &CallSettings::DEFAULT, t, Some(t + ms(40)));
    assert_eq!((r.reason, r.pause), (RefusalReason::BreakerOpen, ms(40)));
    assert_eq!(r.retry_after, secs(14) - ms(40));
    assert_eq!(announced, Some(r.retry_after));

    // 30 ms of the break left, shorter than the full pause: the dependency may be asked again
    // as soon as the refusal is reported.
    let t = Instant::from_secs(16) - ms(30);
    let (r, announced) = rejected(&p, &no_deadline, t, None);
    assert_eq!((r.pause, r.retry_after), (GUARD_PAUSE, Duration::ZERO));
    assert_eq!(announced, Some(Duration::ZERO));
    // ... and shorter than a pause the deadline caps at 40 ms.
    let (r, _) = rejected(&p, &CallSettings::DEFAULT, t, Some(t + ms(40)));
    assert_eq!((r.pause, r.retry_after), (ms(40), Duration::ZERO));
    // Exactly as long as the pause: zero too.
    let t = Instant::from_secs(16) - GUARD_PAUSE;
    let (r, _) = rejected(&p, &no_deadline, t, None);
    assert_eq!((r.pause, r.retry_after), (GUARD_PAUSE, Duration::ZERO));
}

#[test]
fn an_empty_budgets_retry_after_is_the_floors_accrual_time_less_the_pause() {
    let settings = BudgetSettings::defaults("payments");
    let p = Parts::new()
        .named(Name::new("payments"))
        .budget(Budget::new(settings));
    let now = Instant::from_secs(1);
    while p.budget.as_ref().unwrap().try_withdraw(now).is_ok() {}
    assert_eq!(p.budget.as_ref().unwrap().available(now), 0);
    // One token at the floor rate (3 per second), rounded up to the millisecond: 334 ms.
    let floor_milli = u64::from(settings.floor_per_second_milli());
    let accrual = ms(1_000_000_u64.div_ceil(floor_milli));
    assert_eq!(accrual, ms(334));

    let mut call = Call::begin(&no_jitter(), now);
    let Step::Attempt(permit) = call.poll(&p, now, &mut |_| {}) else {
        panic!("a first attempt needs no budget")
    };
    let mut announced = None;
    call.complete(&p, permit, now, Outcome::Transient, &mut |e| {
        if let Event::Rejected { retry_after, .. } = e {
            announced = Some(retry_after);
        }
    });
    let Step::Reject(r) = call.poll(&p, now, &mut |_| {}) else {
        panic!("expected the budget's rejection")
    };
    assert_eq!(r.reason, RefusalReason::BudgetExhausted);
    assert_eq!(r.pause, GUARD_PAUSE);
    assert_eq!(r.retry_after, accrual - GUARD_PAUSE);
    assert_eq!(r.retry_after, ms(234));
    assert_eq!(announced, Some(r.retry_after));
}

#[test]
fn parts_with_a_breaker_name_their_events_after_it_and_parts_without_one_admit_every_attempt() {
    let settings = BreakerSettings::builder("payments")
        .consecutive_failures(2)
        .jitter(false)
        .build()
        .unwrap();
    let now = Instant::from_secs(1);
    let present = Parts::new().named("api").breaker(Breaker::new(settings));
    let absent = Parts::new().named("api");
    let mut events = Vec::new();
    for _ in 0..2 {
        let mut call = Call::begin(
            &CallSettings::builder().max_attempts(1).build().unwrap(),
            now,
        );
        let mut sink = |e: Event<'_>| events.push(format!("{} {}", e.kind(), e.name()));
        let Step::Attempt(permit) = call.poll(&present, now, &mut sink) else {
            panic!()
        };
        call.complete(&present, permit, now, Outcome::Transient, &mut sink);
        let mut call = Call::begin(
            &CallSettings::builder().max_attempts(1).build().unwrap(),
            now,
        );
        let mut sink = |e: Event<'_>| events.push(format!("{} {}", e.kind(), e.name()));
        let Step::Attempt(permit) = call.poll(&absent, now, &mut sink) else {
            panic!()
        };
        call.complete(&absent, permit, now, Outcome::Transient, &mut sink);
    }
    // The breaker tripped on its two failures, and its events carry its name; the call without
    // a breaker has nothing to trip, and its events carry the parts' name.
    assert!(
        events.contains(&"state_changed payments".to_string()),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e.ends_with(" api")), "{events:?}");
    assert!(!events.iter().any(|e| e.starts_with("state_changed api")));
    let mut call = Call::begin(&CallSettings::DEFAULT, now);
    let Step::Reject(r) = call.poll(&present, now, &mut |_| {}) else {
        panic!("an open breaker refuses")
    };
    assert_eq!(r.reason, RefusalReason::BreakerOpen);
    let mut call = Call::begin(&CallSettings::DEFAULT, now);
    assert!(matches!(
        call.poll(&absent, now, &mut |_| {}),
        Step::Attempt(_)
    ));
}
