//! The core's time arithmetic never panics and always saturates: arbitrary `u64` nanoseconds go
//! through every `Instant`/`Duration` operation, and the results are checked against the same
//! operation done in 128-bit integers.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use stormguard_core::{Duration, Instant};

#[derive(Arbitrary, Debug)]
struct Input {
    a: u64,
    b: u64,
    d: u64,
    e: u64,
    factor: u64,
    ops: Vec<Op>,
}

/// Steps that move a running instant, as a clock feeding the core would (including backwards).
#[derive(Arbitrary, Debug)]
enum Op {
    Advance(u64),
    StepBack(u64),
    Jump(u64),
    Millis(u64),
    Secs(u64),
}

const MAX: u128 = u64::MAX as u128;

fn saturated(x: u128) -> u64 {
    u64::try_from(x.min(MAX)).unwrap_or(u64::MAX)
}

fn check_instant_and_duration(a: Instant, d: Duration) {
    let (an, dn) = (u128::from(a.as_nanos()), u128::from(d.as_nanos()));

    // Saturating addition never goes backwards and agrees with checked addition.
    let sum = a + d;
    assert!(sum >= a);
    assert_eq!(sum, a.saturating_add(d));
    assert_eq!(sum.as_nanos(), saturated(an + dn));
    assert_eq!(a.checked_add(d).is_some(), an + dn <= MAX);
    if let Some(exact) = a.checked_add(d) {
        assert_eq!(exact, sum);
        assert_eq!(exact.saturating_duration_since(a), d);
    } else {
        assert_eq!(sum, Instant::MAX);
    }
    let mut bumped = a;
    bumped += d;
    assert_eq!(bumped, sum);

    // Saturating subtraction never goes forwards and agrees with checked subtraction.
    let diff = a - d;
    assert!(diff <= a);
    assert_eq!(diff, a.saturating_sub(d));
    assert_eq!(diff.as_nanos(), saturated(an.saturating_sub(dn)));
    match a.checked_sub(d) {
        Some(exact) => {
            assert_eq!(exact, diff);
            assert_eq!(exact + d, a);
        }
        None => {
            assert!(dn > an);
            assert_eq!(diff, Instant::ZERO);
        }
    }
}

fn check_instants(a: Instant, b: Instant) {
    // `a - b` is zero when `b` is later: a clock stepping backwards means no time passed.
    let since = a - b;
    assert_eq!(since, a.saturating_duration_since(b));
    if b > a {
        assert!(since.is_zero());
        assert_eq!(a.checked_duration_since(b), None);
    } else {
        assert_eq!(a.checked_duration_since(b), Some(since));
        assert_eq!(b + since, a);
    }
    assert!(a.min(b) <= a.max(b));
    assert_eq!(a.min(b), core::cmp::min(a, b));
    assert_eq!(a.max(b), core::cmp::max(a, b));
    assert_eq!(a.since_epoch().as_nanos(), a.as_nanos());
}

fn check_durations(d: Duration, e: Duration, factor: u64) {
    let (dn, en) = (u128::from(d.as_nanos()), u128::from(e.as_nanos()));

    let sum = d + e;
    assert!(sum >= d && sum >= e);
    assert_eq!(sum.as_nanos(), saturated(dn + en));
    assert_eq!(d.checked_add(e).is_some(), dn + en <= MAX);
    let mut acc = d;
    acc += e;
    assert_eq!(acc, sum);

    let diff = d - e;
    assert!(diff <= d);
    assert_eq!(diff.as_nanos(), saturated(dn.saturating_sub(en)));
    assert_eq!(d.checked_sub(e).is_some(), en <= dn);
    if e > d {
        assert!(diff.is_zero());
    }

    let product = d.saturating_mul(factor);
    assert_eq!(product.as_nanos(), saturated(dn * u128::from(factor)));
    match d.checked_div(factor) {
        Some(q) => {
            assert_ne!(factor, 0);
            assert_eq!(u128::from(q.as_nanos()), dn / u128::from(factor));
        }
        None => assert_eq!(factor, 0),
    }

    assert!(d.min(e) <= d.max(e));
    assert!(d.as_millis_ceil() >= d.as_millis());
    assert!(d.as_millis_ceil() - d.as_millis() <= 1);
    assert!(d.as_micros() >= d.as_millis());
    assert!(d.as_millis() >= d.as_secs());

    // A round trip through `core::time::Duration` is lossless.
    let std: core::time::Duration = d.into();
    assert_eq!(Duration::from(std), d);

    // Display never panics and never prints an empty string.
    assert!(!format!("{d}").is_empty());
    assert!(!format!("{d:?}").is_empty());
}

fn check_constructors(x: u64) {
    let x128 = u128::from(x);
    assert_eq!(
        Duration::from_millis(x).as_nanos(),
        saturated(x128 * 1_000_000)
    );
    assert_eq!(Duration::from_micros(x).as_nanos(), saturated(x128 * 1_000));
    assert_eq!(
        Duration::from_secs(x).as_nanos(),
        saturated(x128 * 1_000_000_000)
    );
    assert_eq!(
        Instant::from_millis(x).as_nanos(),
        saturated(x128 * 1_000_000)
    );
    assert_eq!(Instant::from_micros(x).as_nanos(), saturated(x128 * 1_000));
    assert_eq!(
        Instant::from_secs(x).as_nanos(),
        saturated(x128 * 1_000_000_000)
    );
    match Duration::try_from_millis(x) {
        Some(d) => assert_eq!(d.as_millis(), x),
        None => assert_eq!(Duration::from_millis(x), Duration::MAX),
    }
    match Duration::try_from_secs(x) {
        Some(d) => assert_eq!(d.as_secs(), x),
        None => assert_eq!(Duration::from_secs(x), Duration::MAX),
    }
}

fuzz_target!(|input: Input| {
    let (a, b) = (Instant::from_nanos(input.a), Instant::from_nanos(input.b));
    let (d, e) = (Duration::from_nanos(input.d), Duration::from_nanos(input.e));

    check_instant_and_duration(a, d);
    check_instant_and_duration(b, e);
    check_instants(a, b);
    check_instants(b, a);
    check_durations(d, e, input.factor);
    check_constructors(input.a);
    check_constructors(input.factor);
    assert!(!format!("{a} {b:?}").is_empty());

    // A clock walk: elapsed time measured reading by reading never exceeds the span between the
    // first and the last reading, however the clock moved.
    let start = a;
    let mut now = a;
    let mut forward = Duration::ZERO;
    for op in input.ops.iter().take(64) {
        let next = match *op {
            Op::Advance(n) => now + Duration::from_nanos(n),
            Op::StepBack(n) => now - Duration::from_nanos(n),
            Op::Jump(n) => Instant::from_nanos(n),
            Op::Millis(n) => now + Duration::from_millis(n),
            Op::Secs(n) => now.saturating_add(Duration::from_secs(n)),
        };
        check_instant_and_duration(now, next.saturating_duration_since(now));
        check_instants(next, now);
        forward += next - now;
        now = next;
    }
    // The sum of the forward steps covers at least the net movement.
    assert!(forward >= now - start);
});
