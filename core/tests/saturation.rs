//! Local saturation on synthetic time: the detector's arming, threshold, episodes and drain;
//! the signal's judgement of an attempt; and a breaker that learns nothing from the latencies
//! of attempts that ran while the caller's runtime was starved.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use stormguard_core::call::Gate;
use stormguard_core::limits::saturation::{
    Probed, SaturationDetector, SaturationSettings, SaturationSignal,
};
use stormguard_core::{
    Bound, Breaker, BreakerSettings, Duration, Field, Instant, Multiple, Outcome, Parts, TripReason,
};

mod support;
use support::ms;

/// The probe due next fires `late` after it was due.
fn probe(d: &mut SaturationDetector, late: Duration) -> (Instant, Probed) {
    let now = d.next_due().saturating_add(late);
    (now, d.on_probe(now))
}

/// A detector with the default settings, armed by probes `late` each.
fn armed(late: Duration) -> SaturationDetector {
    let mut d = SaturationDetector::new(SaturationSettings::default(), Instant::from_secs(1));
    for _ in 0..SaturationSettings::DEFAULT_ARM_AFTER {
        assert_eq!(probe(&mut d, late).1, Probed::Learning);
    }
    assert!(d.is_armed());
    d
}

#[test]
fn no_probe_is_judged_before_twenty_have_taught_the_normal() {
    let mut d = SaturationDetector::new(SaturationSettings::default(), Instant::ZERO);
    for i in 0..20 {
        assert!(!d.is_armed());
        assert_eq!(d.overdue_at(), None);
        // Even a probe a second late only teaches while unarmed.
        let late = if i == 3 { ms(1_000) } else { ms(1) };
        assert_eq!(probe(&mut d, late).1, Probed::Learning);
    }
    assert!(d.is_armed());
    // The normal learned from those probes is above 1 ms, and the first judged probe at
    // 21 ms late is over the 20 ms floor only if the normal stayed under 5 ms.
    let normal = d.snapshot().normal;
    assert!(normal > ms(1) && normal < ms(200), "{normal}");
}

#[test]
fn the_threshold_is_a_multiple_of_the_normal_and_never_under_the_floor() {
    let d = armed(ms(1));
    assert_eq!(d.threshold(), ms(20));
    let mut d = armed(ms(10));
    assert_eq!(d.threshold(), ms(40));
    // 30 ms late is within 4x a 10 ms normal, and moves the normal an eighth of the way
    // (12.5 ms): 50 ms is then still within, 51 ms is not.
    assert_eq!(probe(&mut d, ms(30)).1, Probed::Steady);
    assert_eq!(d.threshold(), ms(50));
    let (_, detected) = probe(&mut d, ms(51));
    let Probed::Detected(e) = detected else {
        panic!("{detected:?}")
    };
    assert_eq!(
        (e.delay, e.normal, e.threshold),
        (ms(51), Duration::from_micros(12_500), ms(50))
    );
    assert_eq!(e.threshold, Multiple::from_milli(4_000).apply(e.normal));
}

#[test]
fn an_episode_is_told_once_and_drains_after_two_quiet_probes_in_a_row() {
    let mut d = armed(ms(1));
    let due = d.next_due();
    let (_, first) = probe(&mut d, ms(300));
    assert!(
        matches!(first, Probed::Detected(e) if e.delay == ms(300)),
        "{first:?}"
    );
    assert_eq!(probe(&mut d, ms(250)).1, Probed::Saturated);
    // One quiet probe between late ones does not end it.
    assert_eq!(probe(&mut d, ms(1)).1, Probed::Saturated);
    assert_eq!(probe(&mut d, ms(90)).1, Probed::Saturated);
    assert_eq!(probe(&mut d, ms(1)).1, Probed::Saturated);
    assert!(d.is_saturated());
    assert_eq!(
        probe(&mut d, ms(2)).1,
        Probed::Drained {
            since: due,
            last_late: ms(90)
        }
    );
    assert!(!d.is_saturated());
    assert_eq!(d.snapshot().episodes, 1);
    // The next late probe is a new episode, told again.
    assert!(matches!(probe(&mut d, ms(80)).1, Probed::Detected(_)));
    assert_eq!(d.snapshot().episodes, 2);
}

#[test]
fn an_episode_never_becomes_the_normal() {
    let mut d = armed(ms(2));
    let normal = d.snapshot().normal;
    assert!(matches!(probe(&mut d, ms(500)).1, Probed::Detected(_)));
    for _ in 0..200 {
        assert_eq!(probe(&mut d, ms(400)).1, Probed::Saturated);
    }
    assert_eq!(d.snapshot().normal, normal);
    assert_eq!(d.threshold(), ms(20));
}

#[test]
fn the_signal_holds_attempts_that_overlap_an_episode_or_an_overdue_probe() {
    let signal = SaturationSignal::new();
    let mut d = armed(ms(1));
    signal.publish(&d);
    let t0 = d.next_due();
    // Nothing known yet: an attempt that ends before the probe is overdue is the dependency's.
    assert!(!signal.holds(t0, t0.saturating_add(ms(10))));
    // The probe is overdue by more than the threshold: the runtime is starved now, before the
    // probe can say so.
    assert!(signal.is_saturated(t0.saturating_add(ms(20))));
    assert!(signal.holds(t0, t0.saturating_add(ms(25))));

    let (detected_at, _) = probe(&mut d, ms(300));
    signal.publish(&d);
    assert!(signal.is_saturated(detected_at));
    // Begun before the episode was seen, ended during it.
    assert!(signal.holds(t0, detected_at.saturating_add(ms(5))));
    let (_, _) = probe(&mut d, ms(1));
    let (drained_at, drained) = probe(&mut d, ms(1));
    assert!(matches!(drained, Probed::Drained { .. }), "{drained:?}");
    signal.publish(&d);
    assert!(!signal.is_saturated(drained_at));
    // Begun during the episode, ended after it: held.
    assert!(signal.holds(detected_at, drained_at.saturating_add(ms(10))));
    // Begun after it drained: learned again.
    assert!(!signal.holds(
        drained_at.saturating_add(ms(1)),
        drained_at.saturating_add(ms(10))
    ));
}

#[test]
fn an_unarmed_signal_never_holds() {
    let signal = SaturationSignal::new();
    assert!(!signal.holds(Instant::ZERO, Instant::from_secs(3_600)));
    let d = SaturationDetector::new(SaturationSettings::default(), Instant::ZERO);
    signal.publish(&d);
    assert!(!signal.holds(Instant::ZERO, Instant::from_secs(3_600)));
}

/// A breaker with a learned 5 ms median, the probe armed, and the instant after.
fn learned_breaker(settings: BreakerSettings) -> (Breaker, Instant) {
    let b = Breaker::new(settings);
    let mut t = Instant::from_secs(1);
    for _ in 0..200 {
        let permit = b.try_acquire(t).unwrap();
        b.on_outcome(
            t.saturating_add(ms(5)),
            permit,
            Outcome::Success,
            &mut |_| {},
        );
        t = t.saturating_add(ms(10));
    }
    (b, t)
}

/// `n` attempts of 900 ms through `admission`, one every 10 ms from `t`; the trips seen.
fn slow_attempts(admission: &impl Gate, t: Instant, n: u64) -> Vec<TripReason> {
    let mut trips = Vec::new();
    for i in 0..n {
        let start = t.saturating_add(ms(10 * i));
        let Ok(permit) = admission.try_acquire(start, None, &mut |_| {}) else {
            continue;
        };
        admission.on_outcome(
            start.saturating_add(ms(900)),
            permit,
            Outcome::Success,
            &mut |e| {
                if let stormguard_core::Event::StateChanged {
                    reason: Some(r), ..
                } = e
                {
                    trips.push(r);
                }
            },
        );
    }
    trips
}

/// A detector whose episode began just before `t` and is on.
fn episode_at(t: Instant) -> SaturationDetector {
    let settings = SaturationSettings::default();
    let start = t.saturating_sub(ms(50 * 21 + 300));
    let mut d = SaturationDetector::new(settings, start);
    for _ in 0..20 {
        probe(&mut d, ms(1));
    }
    assert!(matches!(probe(&mut d, ms(300)).1, Probed::Detected(_)));
    d
}

/// A breaker with the slow-call rule at 100 ms, its 5 ms median learned.
fn slow_rule_breaker() -> (Breaker, Instant) {
    let settings = BreakerSettings::builder("db")
        .slow_threshold(Some(ms(100)))
        .build()
        .unwrap();
    learned_breaker(settings)
}

#[test]
fn attempts_during_an_episode_teach_no_latency_and_trip_no_slow_call_rule() {
    let (b, t) = slow_rule_breaker();
    let median = b.normal_latency(t);
    let p95 = b.hedge_after(t);
    assert!(median.is_some());

    let signal = SaturationSignal::new();
    signal.publish(&episode_at(t));
    let held = Parts::new().breaker(&b).saturation(&signal);
    let trips = slow_attempts(&held, t, 300);
    assert!(trips.is_empty(), "{trips:?}");
    let after = t.saturating_add(ms(4_000));
    assert_eq!(b.normal_latency(after), median);
    assert_eq!(b.hedge_after(after), p95);
    assert!(b.try_acquire(after).is_ok());
}

#[test]
fn without_an_episode_the_same_attempts_are_learned_and_trip_the_breaker() {
    let (b, t) = slow_rule_breaker();
    let signal = SaturationSignal::new();
    let mut d = episode_at(t);
    // The episode drained before the attempts began.
    probe(&mut d, ms(1));
    probe(&mut d, ms(1));
    assert!(!d.is_saturated());
    signal.publish(&d);
    let aware = Parts::new().breaker(&b).saturation(&signal);
    // Within the probe's threshold of its due instant, so the probe is not overdue either.
    let start = d.next_due();
    let trips = slow_attempts(&aware, start.saturating_sub(ms(900)), 1);
    assert!(trips.is_empty());
    let trips = slow_attempts(&Parts::new().breaker(&b), start, 300);
    assert_eq!(trips.first(), Some(&TripReason::SlowCalls), "{trips:?}");
}

/// Three attempts through `admission` from `t`, each ending 50 ms later with `outcome`;
/// whether the breaker opened.
fn three(admission: &impl Gate, t: Instant, outcome: Outcome) -> bool {
    let mut opened = false;
    for i in 0..3 {
        let start = t.saturating_add(ms(10 * i));
        let permit = admission.try_acquire(start, None, &mut |_| {}).unwrap();
        admission.on_outcome(start.saturating_add(ms(50)), permit, outcome, &mut |e| {
            opened |= matches!(
                e,
                stormguard_core::Event::StateChanged {
                    reason: Some(_),
                    ..
                }
            );
        });
    }
    opened
}

#[test]
fn a_timeout_during_an_episode_is_the_callers_but_other_failures_count() {
    let settings = BreakerSettings::builder("db")
        .consecutive_failures(3)
        .build()
        .unwrap();
    let (b, t) = learned_breaker(settings);
    let signal = SaturationSignal::new();
    signal.publish(&episode_at(t));
    let held = Parts::new().breaker(&b).saturation(&signal);
    assert!(!three(&held, t, Outcome::TimedOut));
    assert_eq!(
        b.snapshot(t.saturating_add(ms(100))).consecutive_failures,
        0
    );
    let held = Parts::new().breaker(&b).saturation(&signal);
    assert!(three(&held, t.saturating_add(ms(100)), Outcome::Transient));

    // The same timeouts outside an episode open it.
    let settings = BreakerSettings::builder("db")
        .consecutive_failures(3)
        .build()
        .unwrap();
    let (b, t) = learned_breaker(settings);
    assert!(three(&Parts::new().breaker(&b), t, Outcome::TimedOut));
}

#[test]
fn bad_settings_name_their_field() {
    let cases = [
        (
            SaturationSettings::builder().interval(Duration::from_micros(10)),
            Field::ProbeInterval,
            Bound::AtLeastDuration(ms(1)),
        ),
        (
            SaturationSettings::builder().interval(Duration::from_secs(11)),
            Field::ProbeInterval,
            Bound::AtMostDuration(Duration::from_secs(10)),
        ),
        (
            SaturationSettings::builder().multiple(Multiple::whole(1)),
            Field::SaturationMultiple,
            Bound::AboveOne,
        ),
        (
            SaturationSettings::builder().floor(Duration::ZERO),
            Field::SaturationFloor,
            Bound::AtLeastDuration(ms(1)),
        ),
        (
            SaturationSettings::builder().arm_after(0),
            Field::ArmAfter,
            Bound::AtLeast(1),
        ),
        (
            SaturationSettings::builder().drain_after(0),
            Field::DrainAfter,
            Bound::AtLeast(1),
        ),
    ];
    for (builder, field, bound) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!((err.field, err.bound), (field, bound));
    }
}
