//! Settings built from arbitrary numbers, NaN, infinities, zero and `u64::MAX` durations
//! included: building never panics; every error names a field whose input really breaks the
//! bound the error states (and says so in its message); every `Ok` value satisfies every
//! documented bound; and a breaker, budget and call built from an `Ok` value survive a few
//! operations at hostile instants in both forms.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use stormguard_core::{
    breaker::MAX_COUNT, breaker::MAX_PROBES, breaker::TRIP_BUCKETS, call::Gate, time::MAX_BREAK,
    Backoff, Bound, Breaker, BreakerSettings, Budget, BudgetSettings, Call, CallSettings, Duration,
    FailureRate, Field, Instant, Jitter, Multiple, Name, Outcome, Parts, Ratio, Recovery,
    SettingsError, SharedBreaker, SharedBudget, SlowCalls, Step,
};

/// A float that is often one of the values that break naive code.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Float {
    Any(f64),
    Nan,
    Inf,
    NegInf,
    Zero,
    NegZero,
    One,
    Tiny,
    Huge,
}

impl Float {
    fn get(self) -> f64 {
        match self {
            Float::Any(x) => x,
            Float::Nan => f64::NAN,
            Float::Inf => f64::INFINITY,
            Float::NegInf => f64::NEG_INFINITY,
            Float::Zero => 0.0,
            Float::NegZero => -0.0,
            Float::One => 1.0,
            Float::Tiny => f64::MIN_POSITIVE,
            Float::Huge => f64::MAX,
        }
    }
}

/// A duration that is often zero, one nanosecond, `u64::MAX` or next to a bound.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Dur {
    Nanos(u64),
    Millis(u32),
    Secs(u32),
    Zero,
    Max,
    MaxBreak,
    AboveMaxBreak,
}

impl Dur {
    fn get(self) -> Duration {
        match self {
            Dur::Nanos(n) => Duration::from_nanos(n),
            Dur::Millis(n) => Duration::from_millis(u64::from(n)),
            Dur::Secs(n) => Duration::from_secs(u64::from(n)),
            Dur::Zero => Duration::ZERO,
            Dur::Max => Duration::MAX,
            Dur::MaxBreak => MAX_BREAK,
            Dur::AboveMaxBreak => MAX_BREAK + Duration::from_nanos(1),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    breaker: BreakerIn,
    budget: BudgetIn,
    backoff: BackoffIn,
    call: CallIn,
    ratio: Float,
    multiple: Float,
    ppm: u32,
    name: String,
    at: u64,
}

#[derive(Arbitrary, Debug)]
struct BreakerIn {
    consecutive: u32,
    failure_rate: Option<(u32, u32, u32, u32, bool)>,
    failure_ratio: Option<u32>,
    slow_calls: Option<(u32, u32, bool)>,
    slow_threshold: Option<Dur>,
    slow_ratio: u32,
    minimum_calls: u32,
    trip_window: Dur,
    baseline_window: Option<Dur>,
    break_duration: Dur,
    max_break: Dur,
    jitter: bool,
    probes: u32,
    successes: u32,
    recovery: Option<(RecoveryFraction, Option<(Dur, Dur)>)>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum RecoveryFraction {
    Ppm(u32),
    Float(Float),
}

#[derive(Arbitrary, Debug)]
struct BudgetIn {
    fraction: Either,
    floor: Either,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Either {
    Fixed(u32),
    Float(Float),
    Default,
}

#[derive(Arbitrary, Debug)]
struct BackoffIn {
    base: Option<Dur>,
    throttled_base: Option<Dur>,
    factor: Option<FactorIn>,
    cap: Option<Dur>,
    jitter: u8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FactorIn {
    Milli(u32),
    Whole(u32),
    Float(Float),
}

#[derive(Arbitrary, Debug)]
struct CallIn {
    max_attempts: u32,
    deadline: Option<Dur>,
    attempt_timeout: Option<Dur>,
    seed: u64,
}

/// `Err(e)` must name a bound that the input breaks; `check` says whether `e.bound` is broken
/// for `e.field`. The message names both.
fn assert_names_a_broken_bound(e: SettingsError, broken: impl Fn(Field, Bound) -> bool) {
    assert!(
        broken(e.field, e.bound),
        "{e:?} but the input keeps that bound"
    );
    let text = e.to_string();
    assert!(
        text.contains(e.field.as_str()),
        "{text:?} does not name {}",
        e.field
    );
    assert!(!e.bound.to_string().is_empty());
}

/// The largest multiple a relative rule takes, and the same in thousandths.
const MAX_MULTIPLE: u64 = 4_000_000;
const MAX_MILLI: u32 = 4_000_000_000;

fn in_unit(ppm: u32) -> bool {
    ppm > 0 && ppm <= 1_000_000
}

fn breaker(input: &BreakerIn) -> Result<BreakerSettings, SettingsError> {
    let rate = input.failure_rate.map(|(m, floor, min, base, whole)| {
        let r = if whole {
            FailureRate::above(m)
        } else {
            FailureRate::above_milli(m)
        };
        r.floor_ppm(floor)
            .minimum_failures(min)
            .baseline_outcomes(base)
    });
    let slow = input.slow_calls.map(|(m, base, whole)| {
        let r = if whole {
            SlowCalls::above(m)
        } else {
            SlowCalls::above_milli(m)
        };
        r.baseline_calls(base)
    });
    let recovery = input.recovery.map(|(f, clamp)| {
        let r = match f {
            RecoveryFraction::Ppm(p) => Recovery::over_ppm(p),
            RecoveryFraction::Float(x) => Recovery::over(x.get()),
        };
        match clamp {
            Some((min, max)) => r.clamped(min.get(), max.get()),
            None => r,
        }
    });
    let mut b = BreakerSettings::builder("fuzz")
        .consecutive_failures(input.consecutive)
        .failure_rate(rate)
        .slow_calls(slow)
        .slow_threshold(input.slow_threshold.map(Dur::get))
        .minimum_calls(input.minimum_calls)
        .trip_window(input.trip_window.get())
        .baseline_window(input.baseline_window.map(Dur::get))
        .break_duration(input.break_duration.get())
        .max_break(input.max_break.get())
        .jitter(input.jitter)
        .half_open_probes(input.probes)
        .probe_successes(input.successes)
        .recovery(recovery);
    // `Ratio` cannot hold more than one whole: out-of-range ceilings come in as `None`.
    if let Some(r) = Ratio::from_ppm(input.slow_ratio) {
        b = b.slow_ratio(r);
    }
    if let Some(p) = input.failure_ratio {
        b = b.failure_ratio(Ratio::from_ppm(p));
    }
    let built = b.build();
    let trip = input.trip_window.get();
    let brk = input.break_duration.get();
    let max_break = input.max_break.get();
    match built {
        Err(e) => {
            assert_names_a_broken_bound(e, |field, bound| match (field, bound) {
                (Field::ConsecutiveFailures, Bound::AtLeast(1)) => input.consecutive == 0,
                (Field::ConsecutiveFailures, Bound::AtMost(n)) => {
                    n == u64::from(MAX_COUNT) && input.consecutive > u32::from(MAX_COUNT)
                }
                (Field::FailureMultiple, Bound::AboveOne) => {
                    rate.is_some_and(|r| r.multiple().milli() <= 1000)
                }
                (Field::FailureMultiple, Bound::AtMost(n)) => {
                    n == MAX_MULTIPLE && rate.is_some_and(|r| r.multiple().milli() > MAX_MILLI)
                }
                (Field::FailureFloor, Bound::ZeroToOne) => {
                    rate.is_some_and(|r| !in_unit(r.floor().ppm()))
                }
                (Field::MinimumFailures, Bound::AtLeast(1)) => {
                    rate.is_some_and(|r| r.min_failures() == 0)
                }
                (Field::FailureBaselineOutcomes, Bound::AtLeast(1)) => {
                    rate.is_some_and(|r| r.arming_outcomes() == 0)
                }
                (Field::FailureRatio, Bound::ZeroToOne) => input.failure_ratio == Some(0),
                (Field::SlowMultiple, Bound::AboveOne) => {
                    slow.is_some_and(|r| r.multiple().milli() <= 1000)
                }
                (Field::SlowMultiple, Bound::AtMost(n)) => {
                    n == MAX_MULTIPLE && slow.is_some_and(|r| r.multiple().milli() > MAX_MILLI)
                }
                (Field::SlowBaselineCalls, Bound::AtLeast(1)) => {
                    slow.is_some_and(|r| r.arming_calls() == 0)
                }
                (Field::SlowThreshold, Bound::AtLeastDuration(d)) => {
                    d == Duration::from_nanos(1)
                        && input.slow_threshold.is_some_and(|t| t.get().is_zero())
                }
                (Field::SlowRatio, Bound::ZeroToOne) => input.slow_ratio == 0,
                (Field::MinimumCalls, Bound::AtLeast(1)) => input.minimum_calls == 0,
                (Field::TripWindow, Bound::AtLeastDuration(d)) => {
                    d == Duration::from_millis(TRIP_BUCKETS as u64) && trip < d
                }
                (Field::TripWindow, Bound::AtMostDuration(d)) => d == MAX_BREAK && trip > d,
                (Field::BaselineWindow, Bound::AtLeastDuration(d)) => {
                    input.baseline_window.is_some_and(|w| w.get() < d)
                }
                (Field::BaselineWindow, Bound::AtMostDuration(d)) => {
                    d == MAX_BREAK && input.baseline_window.is_some_and(|w| w.get() > d)
                }
                (Field::BreakDuration, Bound::AtLeastDuration(d)) => {
                    d == Duration::from_millis(1) && brk < d
                }
                (Field::BreakDuration, Bound::AtMostDuration(d)) => d == MAX_BREAK && brk > d,
                (Field::MaxBreak, Bound::NotBelow(Field::BreakDuration)) => max_break < brk,
                (Field::MaxBreak, Bound::AtMostDuration(d)) => d == MAX_BREAK && max_break > d,
                (Field::HalfOpenProbes, Bound::AtLeast(1)) => input.probes == 0,
                (Field::HalfOpenProbes, Bound::AtMost(n)) => {
                    n == u64::from(MAX_PROBES) && input.probes > u32::from(MAX_PROBES)
                }
                (Field::ProbeSuccesses, Bound::AtLeast(1)) => input.successes == 0,
                (Field::ProbeSuccesses, Bound::AtMost(n)) => {
                    n == u64::from(MAX_COUNT) && input.successes > u32::from(MAX_COUNT)
                }
                (Field::RecoveryFraction, Bound::ZeroToOne) => {
                    recovery.is_some_and(|r| !in_unit(r.fraction().ppm()))
                }
                (Field::RecoveryMin, Bound::AtLeastDuration(d)) => {
                    d == Duration::from_millis(1)
                        && input
                            .recovery
                            .is_some_and(|(_, c)| c.is_some_and(|(min, _)| min.get() < d))
                }
                (Field::RecoveryMax, Bound::NotBelow(Field::RecoveryMin)) => input
                    .recovery
                    .is_some_and(|(_, c)| c.is_some_and(|(min, max)| max.get() < min.get())),
                (Field::RecoveryMax, Bound::AtMostDuration(d)) => {
                    d == MAX_BREAK
                        && input
                            .recovery
                            .is_some_and(|(_, c)| c.is_some_and(|(_, max)| max.get() > d))
                }
                _ => false,
            });
            Err(e)
        }
        Ok(s) => {
            // Every documented bound holds.
            assert!(s.consecutive_failures() >= 1 && s.consecutive_failures() <= MAX_COUNT);
            assert_eq!(u32::from(s.consecutive_failures()), input.consecutive);
            if let Some(r) = s.failure_rate() {
                assert!(r.multiple().is_above_one() && r.multiple().milli() <= MAX_MILLI);
                assert!(in_unit(r.floor().ppm()));
                assert!(r.min_failures() >= 1 && r.arming_outcomes() >= 1);
            }
            if let Some(r) = s.failure_ratio() {
                assert!(in_unit(r.ppm()));
            }
            if let Some(r) = s.slow_calls() {
                assert!(r.multiple().is_above_one() && r.multiple().milli() <= MAX_MILLI);
                assert!(r.arming_calls() >= 1);
            }
            assert!(s.slow_threshold().is_none_or(|t| !t.is_zero()));
            assert!(in_unit(s.slow_ratio().ppm()));
            assert!(s.minimum_calls() >= 1);
            assert!(s.trip_window() >= Duration::from_millis(10) && s.trip_window() <= MAX_BREAK);
            assert!(s.bucket_width() >= Duration::from_millis(1));
            assert!(s.baseline_window() >= s.required_baseline());
            match input.baseline_window {
                Some(w) => assert!(s.baseline_window() == w.get() && w.get() <= MAX_BREAK),
                None => assert!(s.baseline_window() >= s.trip_window().saturating_mul(10)),
            }
            assert!(s.break_duration() >= Duration::from_millis(1));
            assert!(s.break_duration() <= s.max_break() && s.max_break() <= MAX_BREAK);
            assert!(s.half_open_probes() >= 1 && s.half_open_probes() <= MAX_PROBES);
            assert!(s.probe_successes() >= 1 && s.probe_successes() <= MAX_COUNT);
            if let Some(r) = s.recovery() {
                assert!(in_unit(r.fraction().ppm()));
                for served in [Duration::ZERO, brk, max_break, Duration::MAX] {
                    let len = r.length_for(served);
                    assert!(len >= Duration::from_millis(1) && len <= MAX_BREAK);
                }
            }
            for opens in [0u8, 1, 2, 5, 31, 255] {
                let nominal = s.nominal_break(opens);
                assert!(nominal >= s.break_duration() && nominal <= s.max_break());
            }
            Ok(s)
        }
    }
}

fn budget(input: &BudgetIn) -> Result<BudgetSettings, SettingsError> {
    let mut b = BudgetSettings::builder("fuzz");
    let mut fraction_ok = true;
    let mut fraction_nonzero = None;
    match input.fraction {
        Either::Fixed(ppm) => {
            b = b.fraction_ppm(ppm);
            fraction_ok = ppm <= 1_000_000;
        }
        Either::Float(x) => {
            let x = x.get();
            b = b.fraction(x);
            fraction_ok = (0.0..=1.0).contains(&x);
            fraction_nonzero = Some(x > 0.0);
        }
        Either::Default => {}
    }
    let mut floor_ok = true;
    let mut floor_nonzero = None;
    match input.floor {
        Either::Fixed(milli) => {
            b = b.floor_per_second_milli(milli);
            floor_ok = milli <= 400_000;
        }
        Either::Float(x) => {
            let x = x.get();
            b = b.floor_per_second(x);
            floor_ok = (0.0..=400.0).contains(&x);
            floor_nonzero = Some(x > 0.0);
        }
        Either::Default => {}
    }
    let built = b.build();
    match built {
        Err(e) => assert_names_a_broken_bound(e, |field, bound| match (field, bound) {
            (Field::RetryFraction, Bound::AtLeast(0) | Bound::AtMost(1)) => !fraction_ok,
            (Field::FloorRate, Bound::AtLeast(0)) => !floor_ok,
            (Field::FloorRate, Bound::AtMost(n)) => {
                n == u64::from(BudgetSettings::MAX_FLOOR_PER_SECOND) && !floor_ok
            }
            _ => false,
        }),
        Ok(s) => {
            assert!(
                fraction_ok && floor_ok,
                "accepted an out-of-range input: {s:?}"
            );
            assert!(s.fraction().ppm() <= 1_000_000);
            assert!(s.floor_per_second_milli() <= 400_000);
            if floor_nonzero == Some(true) {
                // A positive rate never rounds to "no floor".
                assert!(s.floor_per_second_milli() > 0);
            }
            if fraction_nonzero == Some(true) {
                // A positive share never rounds to "successes fund nothing".
                assert!(s.fraction().ppm() > 0);
            }
            assert!(s.capacity_micro() >= 1_000_000 && s.capacity() >= 1);
            assert!(s.capacity() <= 4000);
            assert!(!s.to_string().is_empty());
        }
    }
    built
}

fn backoff(input: &BackoffIn) -> Result<Backoff, SettingsError> {
    let mut b = Backoff::builder();
    if let Some(d) = input.base {
        b = b.base(d.get());
    }
    if let Some(d) = input.throttled_base {
        b = b.throttled_base(d.get());
    }
    let mut factor = Some(Multiple::whole(2));
    if let Some(f) = input.factor {
        factor = match f {
            FactorIn::Milli(m) => Some(Multiple::from_milli(m)),
            FactorIn::Whole(m) => Some(Multiple::whole(m)),
            FactorIn::Float(x) => Multiple::from_f64(x.get()),
        };
        if let Some(m) = factor {
            b = b.factor(m);
        }
    }
    if let Some(d) = input.cap {
        b = b.cap(d.get());
    }
    b = b.jitter(match input.jitter % 3 {
        0 => Jitter::None,
        1 => Jitter::Full,
        _ => Jitter::Equal,
    });
    let base = input.base.map_or(Duration::from_millis(100), Dur::get);
    let throttled = input
        .throttled_base
        .map_or(Duration::from_secs(1), Dur::get);
    let cap = input.cap.map_or(Duration::from_secs(30), Dur::get);
    let factor = factor.unwrap_or(Multiple::whole(2));
    let built = b.build();
    match built {
        Err(e) => assert_names_a_broken_bound(e, |field, bound| match (field, bound) {
            (Field::BackoffFactor, Bound::AtLeastOne) => factor.milli() < 1000,
            (Field::BackoffCap, Bound::NotBelow(Field::BackoffBase)) => cap < base,
            (Field::BackoffCap, Bound::NotBelow(Field::ThrottledBase)) => cap < throttled,
            _ => false,
        }),
        Ok(bo) => {
            // Any base is valid, zero included (no wait between attempts).
            assert!(bo.factor().milli() >= 1000);
            assert!(bo.cap() >= bo.base() && bo.cap() >= bo.throttled_base());
            let mut rng = fastrand_rng();
            let mut last = Duration::ZERO;
            for retry in [0u32, 1, 2, 3, 10, 64, 1000, u32::MAX] {
                let n = bo.nominal(retry, false);
                assert!(n <= bo.cap() && n >= bo.base().min(bo.cap()));
                assert!(n >= last, "the curve went down");
                last = n;
                assert!(bo.nominal(retry, true) <= bo.cap());
                for o in [
                    Outcome::Transient,
                    Outcome::Throttled { retry_after: None },
                    Outcome::Throttled {
                        retry_after: Some(Duration::MAX),
                    },
                ] {
                    assert!(bo.delay(retry, o, &mut rng) <= bo.cap());
                }
            }
            assert!(!bo.to_string().is_empty());
        }
    }
    built
}

/// The generator the backoff's jitter draws from, seeded.
fn fastrand_rng() -> stormguard_core::rng::JitterRng {
    stormguard_core::rng::JitterRng::with_seed(7)
}

fn call(input: &CallIn, backoff: Option<Backoff>) -> Result<CallSettings, SettingsError> {
    let mut b = CallSettings::builder()
        .max_attempts(input.max_attempts)
        .seed(input.seed);
    if let Some(d) = input.deadline {
        b = b.deadline(Some(d.get()));
    }
    if let Some(d) = input.attempt_timeout {
        b = b.attempt_timeout(Some(d.get()));
    }
    if let Some(bo) = backoff {
        b = b.backoff(bo);
    }
    let built = b.build();
    match built {
        Err(e) => assert_names_a_broken_bound(e, |field, bound| match (field, bound) {
            (Field::MaxAttempts, Bound::AtLeast(1)) => input.max_attempts == 0,
            (Field::Deadline, Bound::AtLeastDuration(_)) => {
                input.deadline.is_some_and(|d| d.get().is_zero())
            }
            (Field::AttemptTimeout, Bound::AtLeastDuration(_)) => {
                input.attempt_timeout.is_some_and(|d| d.get().is_zero())
            }
            _ => false,
        }),
        Ok(s) => {
            assert!(s.max_attempts() >= 1);
            assert!(s.deadline().is_none_or(|d| !d.is_zero()));
            assert!(s.attempt_timeout().is_none_or(|d| !d.is_zero()));
        }
    }
    built
}

fuzz_target!(|input: Input| {
    // The fixed-point conversions.
    let x = input.ratio.get();
    match Ratio::from_f64(x) {
        Some(r) => {
            assert!((0.0..=1.0).contains(&x));
            assert!(r.ppm() <= 1_000_000);
            assert!((r.as_f64() - x).abs() <= 0.5e-6 + f64::EPSILON);
        }
        None => assert!(!(0.0..=1.0).contains(&x)),
    }
    match Multiple::from_f64(input.multiple.get()) {
        Some(m) => {
            let x = input.multiple.get();
            assert!((0.0..=4_000_000.0).contains(&x));
            assert!((f64::from(m.milli()) / 1000.0 - x).abs() <= 0.0005 + 1e-9);
        }
        None => assert!(!(0.0..=4_000_000.0).contains(&input.multiple.get())),
    }
    assert_eq!(Ratio::from_ppm(input.ppm).is_some(), input.ppm <= 1_000_000);
    assert_eq!(Ratio::from_permille(input.ppm).is_some(), input.ppm <= 1000);
    assert_eq!(Ratio::from_percent(input.ppm).is_some(), input.ppm <= 100);
    match Name::try_from_str(&input.name) {
        Ok(n) => {
            assert!(input.name.len() <= stormguard_core::name::NAME_CAPACITY);
            assert!(!input.name.trim().is_empty());
            assert!(!input.name.chars().any(char::is_control));
            assert_eq!(n.as_str(), input.name);
        }
        Err(stormguard_core::name::NameError::TooLong) => {
            assert!(input.name.len() > stormguard_core::name::NAME_CAPACITY)
        }
        Err(stormguard_core::name::NameError::Blank) => assert!(input.name.trim().is_empty()),
        Err(_) => assert!(input.name.chars().any(char::is_control)),
    }

    let breaker = breaker(&input.breaker);
    let budget = budget(&input.budget);
    let backoff = backoff(&input.backoff);
    let call = call(&input.call, backoff.ok());

    // Whatever was accepted works, in both forms, at a hostile instant and at the extremes.
    let Ok(settings) = breaker else { return };
    let budget = budget.unwrap_or(BudgetSettings::defaults("fuzz"));
    let call = call.unwrap_or(CallSettings::DEFAULT);
    let local = Breaker::new(settings);
    let shared = SharedBreaker::new(settings);
    let local_budget = Budget::new(budget);
    let shared_budget = SharedBudget::new(budget);
    for now in [
        Instant::from_nanos(input.at),
        Instant::ZERO,
        Instant::MAX - MAX_BREAK,
        Instant::MAX,
    ] {
        for outcome in [Outcome::Success, Outcome::Transient, Outcome::TimedOut] {
            let a = local.try_acquire(now);
            let b = shared.try_acquire(now, None, &mut |_| {});
            assert_eq!(a, b);
            if let (Ok(a), Ok(b)) = (a, b) {
                local.on_outcome(now, a, outcome, &mut |_| {});
                shared.on_outcome(now, b, outcome, &mut |_| {});
            }
            assert_eq!(local.snapshot(now), shared.snapshot(now));
        }
        let local_parts = Parts::new().breaker(&local).budget(&local_budget);
        let shared_parts = Parts::new().breaker(&shared).budget(&shared_budget);
        assert_eq!(
            drive(&call, &local_parts, now),
            drive(&call, &shared_parts, now)
        );
        assert_eq!(local.snapshot(now), shared.snapshot(now));
        assert_eq!(local_budget.snapshot(now), shared_budget.snapshot(now));
    }
});

/// A call whose attempts all fail, at a frozen instant: the steps it asks for.
fn drive(settings: &CallSettings, parts: &impl Gate, now: Instant) -> Vec<String> {
    let mut c = Call::begin(settings, now);
    let mut steps = Vec::new();
    for _ in 0..8 {
        let step = c.poll(parts, now, &mut |_| {});
        steps.push(format!("{step:?}"));
        match step {
            Step::Attempt(p) => c.complete(parts, p, now, Outcome::Transient, &mut |_| {}),
            Step::Wait(_) => {}
            Step::Reject(_) | Step::Done(_) => break,
        }
    }
    steps
}
