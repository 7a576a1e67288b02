//! The subscription retry helper: forever, capped backoff, starting over after a success.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::{
    policy::SubscriptionRetry, policy::SubscriptionStatus, Backoff, Duration, Instant, Jitter,
    Multiple,
};

mod support;
use support::secs;

const T0: Instant = Instant::from_secs(1_000);

/// Fails `n` times in a row, each attempt made exactly when it is due; returns the waits.
#[track_caller]
fn fail(retry: &mut SubscriptionRetry, mut now: Instant, n: usize) -> (Vec<Duration>, Instant) {
    let mut waits = Vec::new();
    for _ in 0..n {
        let at = retry.on_failure(now);
        assert_eq!(retry.next_attempt_at(), Some(at));
        waits.push(at.saturating_duration_since(now));
        now = at;
    }
    (waits, now)
}

fn jittered(jitter: Jitter) -> Backoff {
    Backoff::subscription()
        .to_builder()
        .jitter(jitter)
        .build()
        .unwrap()
}

#[test]
fn the_first_attempt_is_due_at_once() {
    let retry = SubscriptionRetry::new();
    assert_eq!(retry.status(), SubscriptionStatus::Pending);
    assert_eq!(retry.next_attempt_at(), Some(Instant::ZERO));
    assert_eq!(retry.poll_wait(T0), Some(Duration::ZERO));
    assert_eq!(retry.attempt(), 1);
    assert_eq!(retry.failures(), 0);
    assert_eq!(SubscriptionRetry::default(), retry);
}

#[test]
fn the_default_schedule_waits_1_2_4_8_16_32_64_then_120_seconds() {
    let mut retry = SubscriptionRetry::new();
    let (waits, _) = fail(&mut retry, T0, 10);
    assert_eq!(
        waits,
        [1, 2, 4, 8, 16, 32, 64, 120, 120, 120].map(secs).to_vec()
    );
    assert_eq!(retry.backoff(), &Backoff::subscription());
}

#[test]
fn the_wait_is_capped_at_two_minutes_forever() {
    let mut retry = SubscriptionRetry::new();
    let (waits, now) = fail(&mut retry, T0, 10_000);
    assert!(waits[7..].iter().all(|w| *w == secs(120)));
    assert_eq!(retry.failures(), 10_000);
    assert_eq!(retry.attempt(), 10_001);
    assert_eq!(retry.last_delay(), Some(secs(120)));
    assert_eq!(
        retry.status(),
        SubscriptionStatus::Recovering { retry_at: now }
    );
}

#[test]
fn it_never_gives_up_and_never_overflows() {
    let mut retry = SubscriptionRetry::new();
    // At the far end of time the retry instant saturates rather than wrapping or panicking.
    let (_, now) = fail(&mut retry, Instant::MAX - secs(1), 3);
    assert_eq!(now, Instant::MAX);
    assert_eq!(retry.on_failure(Instant::MAX), Instant::MAX);
    assert!(retry.next_attempt_at().is_some());
}

#[test]
fn a_success_starts_the_schedule_over() {
    let mut retry = SubscriptionRetry::new();
    let (_, now) = fail(&mut retry, T0, 6);
    retry.on_connected(now);
    assert_eq!(retry.status(), SubscriptionStatus::Healthy { since: now });
    assert_eq!(retry.next_attempt_at(), None);
    assert_eq!(retry.poll_wait(now), None);
    assert_eq!(retry.failures(), 0);
    assert_eq!(retry.last_delay(), None);
    // Even a brief success counts: the next failure waits the first delay again.
    let (waits, _) = fail(&mut retry, now, 3);
    assert_eq!(waits, [secs(1), secs(2), secs(4)]);
}

#[test]
fn losing_an_established_subscription_retries_at_once_then_from_the_first_delay() {
    let mut retry = SubscriptionRetry::new();
    let (_, now) = fail(&mut retry, T0, 9);
    retry.on_connected(now);
    let lost = now + secs(3600);
    assert_eq!(retry.on_disconnected(lost), lost);
    assert_eq!(
        retry.status(),
        SubscriptionStatus::Recovering { retry_at: lost }
    );
    assert_eq!(retry.poll_wait(lost), Some(Duration::ZERO));
    let (waits, _) = fail(&mut retry, lost, 8);
    assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 120].map(secs).to_vec());
}

#[test]
fn a_disconnect_reported_while_recovering_keeps_the_schedule() {
    let mut retry = SubscriptionRetry::new();
    let (_, due) = fail(&mut retry, T0, 3);
    assert_eq!(retry.on_disconnected(T0), due);
    assert_eq!(retry.failures(), 3);
    assert_eq!(retry.on_failure(due), due + secs(8));
}

#[test]
fn attempts_are_counted() {
    let mut retry = SubscriptionRetry::new();
    let (_, now) = fail(&mut retry, T0, 4);
    assert_eq!(retry.attempt(), 5);
    retry.on_connected(now);
    assert_eq!(retry.attempt(), 1);
    let _ = fail(&mut retry, now, 2);
    assert_eq!(retry.total_attempts(), 7);
}

#[test]
fn poll_wait_is_the_time_left_until_the_next_attempt() {
    let mut retry = SubscriptionRetry::new();
    let due = retry.on_failure(T0);
    assert_eq!(retry.poll_wait(T0), Some(secs(1)));
    assert_eq!(
        retry.poll_wait(T0 + Duration::from_millis(400)),
        Some(Duration::from_millis(600))
    );
    assert_eq!(retry.poll_wait(due + secs(5)), Some(Duration::ZERO));
}

#[test]
fn a_clock_stepping_backwards_is_harmless() {
    let mut retry = SubscriptionRetry::new();
    let at = retry.on_failure(T0);
    let earlier = T0 - secs(500);
    assert_eq!(retry.poll_wait(earlier), Some(at - earlier));
    assert_eq!(retry.on_failure(earlier), earlier + secs(2));
    assert_eq!(retry.on_failure(Instant::ZERO), Instant::ZERO + secs(4));
}

#[test]
fn full_jitter_stays_within_zero_and_the_schedule() {
    let mut retry = SubscriptionRetry::with_backoff(jittered(Jitter::Full)).with_seed(42);
    let nominal = Backoff::subscription();
    let mut now = T0;
    let mut below_nominal = 0;
    for failure in 1..=200u32 {
        let at = retry.on_failure(now);
        let wait = at - now;
        let cap = nominal.nominal(failure, false);
        assert!(wait <= cap, "failure {failure}: {wait} > {cap}");
        if wait < cap {
            below_nominal += 1;
        }
        now = at;
    }
    assert!(below_nominal > 150, "jitter should spread the waits");
}

#[test]
fn equal_jitter_stays_within_half_and_the_whole_schedule() {
    let mut retry = SubscriptionRetry::with_backoff(jittered(Jitter::Equal)).with_seed(7);
    let nominal = Backoff::subscription();
    let mut now = T0;
    for failure in 1..=50u32 {
        let at = retry.on_failure(now);
        let wait = at - now;
        let cap = nominal.nominal(failure, false);
        let half = cap.checked_div(2).unwrap();
        assert!(
            half <= wait && wait <= cap,
            "failure {failure}: {wait} outside [{half}, {cap}]"
        );
        now = at;
    }
}

#[test]
fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
    let run = |seed| {
        let mut retry = SubscriptionRetry::with_backoff(jittered(Jitter::Full)).with_seed(seed);
        fail(&mut retry, T0, 20).0
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn without_jitter_the_seed_changes_nothing() {
    let a = fail(&mut SubscriptionRetry::new().with_seed(1), T0, 12).0;
    let b = fail(&mut SubscriptionRetry::new().with_seed(2), T0, 12).0;
    assert_eq!(a, b);
}

#[test]
fn any_backoff_can_drive_the_schedule() {
    let backoff = Backoff::builder()
        .base(Duration::from_millis(500))
        .factor(Multiple::from_milli(1500))
        .cap(secs(3))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let mut retry = SubscriptionRetry::with_backoff(backoff);
    let (waits, _) = fail(&mut retry, T0, 6);
    assert_eq!(
        waits,
        [500_000, 750_000, 1_125_000, 1_687_500, 2_531_250, 3_000_000]
            .map(Duration::from_micros)
            .to_vec()
    );
}

#[test]
fn reset_goes_back_to_the_start() {
    let mut retry = SubscriptionRetry::new();
    let _ = fail(&mut retry, T0, 5);
    retry.reset();
    assert_eq!(retry.status(), SubscriptionStatus::Pending);
    assert_eq!(retry.on_failure(T0), T0 + secs(1));
}

#[test]
fn statuses_have_stable_names() {
    assert_eq!(SubscriptionStatus::Pending.as_str(), "pending");
    assert_eq!(
        SubscriptionStatus::Recovering { retry_at: T0 }.to_string(),
        "recovering"
    );
    assert_eq!(
        SubscriptionStatus::Healthy { since: T0 }.as_str(),
        "healthy"
    );
}

#[test]
fn a_schedule_fits_in_a_const() {
    const RETRY: SubscriptionRetry = SubscriptionRetry::new().with_seed(9);
    let mut r = RETRY;
    assert_eq!(r.on_failure(T0), T0 + secs(1));
}

#[test]
fn a_subscription_lost_as_soon_as_established_continues_the_schedule_instead_of_spinning() {
    // A broker that accepts every connection and drops it at once: each loss within a second
    // of connecting counts as the next failure, so the waits grow as if the connections failed.
    let mut retry = SubscriptionRetry::new();
    let mut now = T0;
    let mut waits = Vec::new();
    for _ in 0..9 {
        retry.on_connected(now);
        let dropped = now + Duration::from_millis(5);
        let at = retry.on_disconnected(dropped);
        waits.push(at - dropped);
        now = at;
    }
    assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 120, 120].map(secs).to_vec());
    assert_eq!(retry.total_attempts(), 9, "a drop is not an attempt");
    // A connection that lasts past `stable_after` starts the schedule over.
    retry.on_connected(now);
    let lost = now + secs(1);
    assert_eq!(retry.on_disconnected(lost), lost);
    assert_eq!(retry.on_failure(lost), lost + secs(1));
}

#[test]
fn stable_after_zero_is_whizbangs_rule_any_connection_starts_over() {
    let mut retry = SubscriptionRetry::new().with_stable_after(Duration::ZERO);
    assert_eq!(retry.stable_after(), Duration::ZERO);
    let (_, now) = fail(&mut retry, T0, 5);
    retry.on_connected(now);
    assert_eq!(retry.on_disconnected(now), now);
    assert_eq!(retry.on_failure(now), now + secs(1));
}

#[test]
fn a_zero_first_delay_retries_at_once() {
    let zero = Backoff::subscription()
        .to_builder()
        .base(Duration::ZERO)
        .build()
        .unwrap();
    let mut retry = SubscriptionRetry::with_backoff(zero);
    let (waits, now) = fail(&mut retry, T0, 3);
    assert_eq!(waits, [Duration::ZERO; 3].to_vec());
    assert_eq!(now, T0);
    assert_eq!(retry.poll_wait(now), Some(Duration::ZERO));
    let mut none = SubscriptionRetry::with_backoff(Backoff::none());
    assert_eq!(none.on_failure(T0), T0);
}
