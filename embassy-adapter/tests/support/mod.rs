//! The harness the embassy adapter's integration tests share: futures polled by hand with a
//! no-op waker on embassy's mock time driver (each test file compiles its own copy, so an
//! unused helper is no warning).
#![allow(dead_code, clippy::panic, clippy::unwrap_used)]

use core::future::Future;
use core::pin::{pin, Pin};
use core::task::{Context, Poll, Waker};

use embassy_time::{Duration as EDuration, Instant as EInstant, MockDriver};

/// Polls `f` once.
pub fn poll<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

/// Moves mock time forward by `d`.
pub fn advance(d: EDuration) {
    MockDriver::get().advance(d);
}

/// `n` milliseconds of embassy time.
pub fn ms(n: u64) -> EDuration {
    EDuration::from_millis(n)
}

/// Mock time now.
pub fn now() -> EInstant {
    EInstant::now()
}

/// Resets the one global mock driver (every test starts with it).
pub fn fresh() {
    MockDriver::get().reset();
}

/// Polls `f` to completion, moving mock time forward `step` after every pending poll. Returns
/// the output and how much mock time passed.
pub fn run<F: Future>(f: F, step: EDuration) -> (F::Output, EDuration) {
    let start = now();
    let mut f = pin!(f);
    for _ in 0..1_000_000 {
        if let Poll::Ready(out) = poll(f.as_mut()) {
            return (out, now() - start);
        }
        advance(step);
    }
    panic!("the future did not finish within a million steps");
}

/// Runs `f` in 1 ms steps.
pub fn run_ms<F: Future>(f: F) -> (F::Output, EDuration) {
    run(f, ms(1))
}

/// Polls two futures side by side (two tasks), 1 ms per step, until both are done; each output
/// with the mock time at which it finished.
pub fn run_both<A: Future, B: Future>(
    a: A,
    b: B,
) -> ((A::Output, EDuration), (B::Output, EDuration)) {
    let start = now();
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut ra, mut rb) = (None, None);
    for _ in 0..1_000_000 {
        if ra.is_none() {
            if let Poll::Ready(out) = poll(a.as_mut()) {
                ra = Some((out, now() - start));
            }
        }
        if rb.is_none() {
            if let Poll::Ready(out) = poll(b.as_mut()) {
                rb = Some((out, now() - start));
            }
        }
        if let (Some(_), Some(_)) = (&ra, &rb) {
            return (ra.take().unwrap(), rb.take().unwrap());
        }
        advance(ms(1));
    }
    panic!("the futures did not finish within a million steps");
}
