//! Streaming calls' restarts, on synthetic time: a stream lost mid-way restarts from its
//! checkpoint within the restart limit, each restart heard by the breaker, funded by the budget
//! and waited out on the backoff; anything else ends the stream as the failure that lost it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    call::{Lost, StreamRestarts, StreamSettings},
    Bound, Breaker, Budget, BudgetSettings, CallSettings, Event, Field, Finished, Instant, Outcome,
    Parts, RefusalReason, State,
};

mod support;
use support::{ms, no_jitter, secs};

const T0: Instant = Instant::from_secs(1);

fn unguarded() -> Parts {
    Parts::new().named("feed")
}

fn kinds(log: &mut Vec<String>) -> impl FnMut(Event<'_>) + '_ {
    |e| {
        log.push(match e {
            Event::Restarted {
                restart,
                delay,
                after,
                ..
            } => format!("restart {restart} after {} in {delay}", after.as_str()),
            other => other.kind().to_string(),
        })
    }
}

#[test]
fn a_lost_stream_restarts_up_to_the_limit_on_the_backoff_then_ends_as_its_failure() {
    let parts = unguarded();
    let mut restarts = StreamRestarts::begin(&no_jitter(), &StreamSettings::DEFAULT, T0).unwrap();
    let mut log = Vec::new();
    let mut waits = Vec::new();
    let mut now = T0;
    let end = loop {
        now += secs(10);
        match restarts.on_lost(&parts, now, Outcome::Transient, true, &mut kinds(&mut log)) {
            Lost::Restart(wait) => waits.push(wait),
            Lost::End(f) => break f,
        }
    };
    assert_eq!(waits, [ms(100), ms(200), ms(400)]);
    assert_eq!(end, Finished::Failed(Outcome::Transient));
    assert_eq!(restarts.restarts(), 3);
    assert_eq!(restarts.last_loss(), Some(Outcome::Transient));
    assert_eq!(
        log,
        [
            "restart 1 after transient in 100ms",
            "restart 2 after transient in 200ms",
            "restart 3 after transient in 400ms"
        ]
    );
}

#[test]
fn without_a_checkpoint_or_with_a_permanent_failure_the_stream_ends_at_once() {
    for (outcome, resumable) in [(Outcome::Transient, false), (Outcome::Permanent, true)] {
        let parts = unguarded();
        let mut restarts =
            StreamRestarts::begin(&no_jitter(), &StreamSettings::DEFAULT, T0).unwrap();
        let lost = restarts.on_lost(&parts, T0, outcome, resumable, &mut |_| {});
        assert_eq!(lost, Lost::End(Finished::Failed(outcome)));
        assert_eq!(restarts.restarts(), 0);
    }
}

#[test]
fn no_restarts_allowed_means_the_first_loss_ends_the_stream() {
    let settings = StreamSettings::builder().max_restarts(0).build().unwrap();
    let mut restarts = StreamRestarts::begin(&no_jitter(), &settings, T0).unwrap();
    let lost = restarts.on_lost(&unguarded(), T0, Outcome::TimedOut, true, &mut |_| {});
    assert_eq!(lost, Lost::End(Finished::Failed(Outcome::TimedOut)));
}

#[test]
fn the_breaker_hears_every_loss_as_a_failure() {
    let parts = Parts::new().breaker(Breaker::of(2, "feed").unwrap());
    let mut restarts = StreamRestarts::begin(&no_jitter(), &StreamSettings::DEFAULT, T0).unwrap();
    let mut log = Vec::new();
    let first = restarts.on_lost(&parts, T0, Outcome::Transient, true, &mut kinds(&mut log));
    assert_eq!(first, Lost::Restart(ms(100)));
    assert_eq!(parts.breaker.as_ref().unwrap().state(T0), State::Closed);
    let now = T0 + ms(100);
    let second = restarts.on_lost(&parts, now, Outcome::Transient, true, &mut kinds(&mut log));
    // The second loss in a row opens the breaker, which would refuse the connection: no
    // restart is paid for, and the stream ends as the loss, not as a rejection.
    assert_eq!(second, Lost::End(Finished::Failed(Outcome::Transient)));
    assert_eq!(parts.breaker.as_ref().unwrap().state(now), State::Open);
    assert_eq!(restarts.restarts(), 1);
    assert_eq!(
        log,
        [
            "restart 1 after transient in 100ms",
            "state_changed",
            "rejected"
        ]
    );
}

#[test]
fn a_cancelled_or_ended_stream_is_no_failure() {
    let parts = Parts::new().breaker(Breaker::of(1, "feed").unwrap());
    let mut restarts = StreamRestarts::begin(&no_jitter(), &StreamSettings::DEFAULT, T0).unwrap();
    let cancelled = restarts.on_lost(&parts, T0, Outcome::Cancelled, true, &mut |_| {});
    assert_eq!(cancelled, Lost::End(Finished::Cancelled));
    let ended = restarts.on_lost(&parts, T0, Outcome::Success, true, &mut |_| {});
    assert_eq!(ended, Lost::End(Finished::Succeeded));
    assert_eq!(parts.breaker.as_ref().unwrap().state(T0), State::Closed);
    assert_eq!(restarts.last_loss(), None);
}

#[test]
fn a_restart_is_a_retry_the_budget_funds_and_its_refusal_ends_the_stream_as_the_failure() {
    // A budget of one retry.
    let settings = BudgetSettings::builder("feed")
        .floor_per_second(0.1)
        .build()
        .unwrap();
    let parts = Parts::new().named("feed").budget(Budget::new(settings));
    let before = parts.budget.as_ref().unwrap().available(T0);
    let mut restarts = StreamRestarts::begin(&no_jitter(), &StreamSettings::DEFAULT, T0).unwrap();
    let mut log = Vec::new();
    let first = restarts.on_lost(&parts, T0, Outcome::Transient, true, &mut kinds(&mut log));
    assert!(matches!(first, Lost::Restart(_)));
    assert_eq!(parts.budget.as_ref().unwrap().available(T0), before - 1);
    let mut refusals = Vec::new();
    let second = restarts.on_lost(&parts, T0, Outcome::Transient, true, &mut |e| {
        if let Event::Rejected { reason, delay, .. } = e {
            refusals.push((reason, delay));
        }
    });
    assert_eq!(second, Lost::End(Finished::Failed(Outcome::Transient)));
    assert_eq!(refusals, [(RefusalReason::BudgetExhausted, ms(0))]);
    assert_eq!(restarts.restarts(), 1);
}

#[test]
fn a_stream_lost_during_a_drain_does_not_restart() {
    let mut restarts = StreamRestarts::begin(&no_jitter(), &StreamSettings::DEFAULT, T0).unwrap();
    restarts.on_drain();
    let lost = restarts.on_lost(&unguarded(), T0, Outcome::Transient, true, &mut |_| {});
    assert_eq!(
        lost,
        Lost::End(Finished::Drained {
            last: Some(Outcome::Transient)
        })
    );
}

#[test]
fn a_hedged_call_cannot_stream() {
    let hedged = CallSettings::builder().hedging(true).build().unwrap();
    let err = StreamRestarts::begin(&hedged, &StreamSettings::DEFAULT, T0).unwrap_err();
    assert_eq!(
        (err.field, err.bound),
        (Field::Hedging, Bound::OffForStreaming)
    );
    assert!(StreamRestarts::begin(&no_jitter(), &StreamSettings::DEFAULT, T0).is_ok());
}

#[test]
fn jittered_restarts_are_the_same_for_the_same_seed_and_start() {
    let draw = |seed: u64| {
        let settings = CallSettings::builder().seed(seed).build().unwrap();
        let mut restarts = StreamRestarts::begin(&settings, &StreamSettings::DEFAULT, T0).unwrap();
        (0..3)
            .map(|_| {
                match restarts.on_lost(&unguarded(), T0, Outcome::Transient, true, &mut |_| {}) {
                    Lost::Restart(d) => d,
                    Lost::End(f) => panic!("ended: {f:?}"),
                }
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
    assert!(draw(7)
        .iter()
        .zip([100, 200, 400])
        .all(|(d, cap)| *d <= ms(cap)));
}

#[test]
fn streams_begun_at_the_same_instant_restart_apart_when_salted_or_reseeded() {
    let first_wait = |salt: u64, seed: Option<u64>| {
        let mut restarts = StreamRestarts::begin_salted(
            &CallSettings::DEFAULT,
            &StreamSettings::DEFAULT,
            T0,
            salt,
        )
        .unwrap();
        if let Some(seed) = seed {
            restarts.reseed(seed);
        }
        restarts.on_lost(&unguarded(), T0, Outcome::Transient, true, &mut |_| {})
    };
    assert_eq!(first_wait(0, None), first_wait(0, None));
    assert_ne!(first_wait(0, None), first_wait(1, None));
    assert_ne!(first_wait(0, Some(7)), first_wait(0, Some(8)));
    assert_eq!(first_wait(0, Some(7)), first_wait(0, Some(7)));
}

#[test]
fn with_a_reset_a_connection_that_flowed_long_enough_starts_the_restarts_over() {
    let settings = StreamSettings::builder()
        .reset_restarts_after(Some(secs(60)))
        .build()
        .unwrap();
    // Connections that flow for `flows` before each loss: how many losses until the end.
    let losses_until_the_end = |flows| {
        let mut restarts = StreamRestarts::begin(&no_jitter(), &settings, T0).unwrap();
        let mut now = T0;
        let mut waits = Vec::new();
        for loss in 1..=20 {
            restarts.on_flowing(now);
            now += flows;
            match restarts.on_lost(&unguarded(), now, Outcome::Transient, true, &mut |_| {}) {
                Lost::Restart(wait) => {
                    waits.push(wait);
                    now += wait;
                }
                Lost::End(_) => return (loss, waits),
            }
        }
        (usize::MAX, waits)
    };
    // Lost after two minutes each time: every loss is a first one, for ever.
    let (end, waits) = losses_until_the_end(secs(120));
    assert_eq!(end, usize::MAX);
    assert!(waits.iter().all(|w| *w == ms(100)));
    // Lost after ten seconds: the limit holds, the backoff grows.
    let (end, waits) = losses_until_the_end(secs(10));
    assert_eq!(end, 4);
    assert_eq!(waits, [ms(100), ms(200), ms(400)]);
    // Without the setting the limit is over the stream's life, however long it flowed.
    let mut restarts = StreamRestarts::begin(&no_jitter(), &StreamSettings::DEFAULT, T0).unwrap();
    let mut now = T0;
    let mut ended = None;
    for loss in 1..=5 {
        restarts.on_flowing(now);
        now += secs(3_600);
        if let Lost::End(_) =
            restarts.on_lost(&unguarded(), now, Outcome::Transient, true, &mut |_| {})
        {
            ended = Some(loss);
            break;
        }
    }
    assert_eq!(ended, Some(4));
    let err = StreamSettings::builder()
        .reset_restarts_after(Some(ms(0)))
        .build()
        .unwrap_err();
    assert_eq!(err.field, Field::RestartsResetAfter);
}
