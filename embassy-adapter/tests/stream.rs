//! Streaming calls on embassy's mock time driver: retried until the first element (the attempt
//! timeout bounding that wait alone), elements handed on after it, a failure mid-stream ending
//! the stream or, with a checkpoint, restarting from it within the restart limit, a stall
//! bound, and hedged settings refused. Deterministic time, futures polled by hand.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use core::cell::RefCell;
use std::vec::Vec;

use embassy_sync::blocking_mutex::raw::NoopRawMutex;
use embassy_time::{Duration as EDuration, Timer};
use serial_test::serial;
use stormguard_core::call::StreamSettings;
use stormguard_core::{
    Backoff, Bound, BreakerSettings, CallSettings, Duration, Field, Jitter, Outcome, State,
};
use stormguard_embassy::{Breaker, CallError, Drain, Policy, Source};

mod support;
use support::{fresh, run_ms};

/// What a scripted source does next.
#[derive(Clone, Copy, Debug)]
enum Beat {
    /// Yields this element after the wait (ms).
    Item(u64, u32),
    /// Fails after the wait (ms).
    Fail(u64),
    /// Goes quiet for ever.
    Quiet,
}

struct Scripted(std::vec::IntoIter<Beat>);

impl Source for Scripted {
    type Item = u32;
    type Error = &'static str;
    async fn next(&mut self) -> Option<Result<u32, &'static str>> {
        match self.0.next()? {
            Beat::Item(wait, n) => {
                Timer::after(EDuration::from_millis(wait)).await;
                Some(Ok(n))
            }
            Beat::Fail(wait) => {
                Timer::after(EDuration::from_millis(wait)).await;
                Some(Err("link lost"))
            }
            Beat::Quiet => core::future::pending().await,
        }
    }
}

fn scripted(beats: Vec<Beat>) -> Scripted {
    Scripted(beats.into_iter())
}

fn no_jitter() -> CallSettings {
    CallSettings::builder()
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .attempt_timeout(Some(Duration::from_secs(1)))
        .build()
        .unwrap()
}

fn breaker(consecutive: u32) -> Breaker<NoopRawMutex> {
    Breaker::new(
        BreakerSettings::builder("uplink")
            .consecutive_failures(consecutive)
            .failure_rate(None)
            .slow_calls(None)
            .build()
            .unwrap(),
    )
}

/// A source of `1..=last` that loses its link after `per_link` elements, 10 ms apart.
fn dropping(from: Option<u32>, last: u32, per_link: usize) -> Scripted {
    let start = from.map_or(1, |n| n + 1);
    let mut beats: Vec<Beat> = (start..=last)
        .take(per_link)
        .map(|n| Beat::Item(10, n))
        .collect();
    if start + per_link as u32 <= last {
        beats.push(Beat::Fail(10));
    }
    scripted(beats)
}

#[test]
#[serial]
fn a_resumable_stream_restarts_from_its_checkpoint_after_the_backoff() {
    fresh();
    let breaker = breaker(5);
    let policy = Policy::new(&breaker, no_jitter());
    let mut stream = policy.streaming(&StreamSettings::DEFAULT).unwrap();
    let opened = RefCell::new(Vec::new());
    let got = RefCell::new(Vec::new());
    let (r, took) = run_ms(stream.run_resumable(
        |n: &u32| *n,
        async |from: Option<u32>| {
            opened.borrow_mut().push(from);
            Ok(dropping(from, 6, 2))
        },
        async |n| got.borrow_mut().push(n),
    ));
    assert_eq!(r, Ok(()));
    assert_eq!(*got.borrow(), [1, 2, 3, 4, 5, 6]);
    assert_eq!(*opened.borrow(), [None, Some(2), Some(4)]);
    assert_eq!(stream.restarts(), 2);
    assert_eq!(stream.last_loss(), Some(Outcome::Transient));
    // Three links of 20 ms, two of them failing 10 ms later, and backoffs of 100 and 200 ms.
    assert_eq!(took, EDuration::from_millis(30 + 30 + 20 + 100 + 200));
}

#[test]
#[serial]
fn the_restart_limit_ends_the_stream_with_the_last_failure() {
    fresh();
    let breaker = breaker(50);
    let policy = Policy::new(&breaker, no_jitter());
    let settings = StreamSettings::builder().max_restarts(2).build().unwrap();
    let mut stream = policy.streaming(&settings).unwrap();
    let got = RefCell::new(Vec::new());
    let (r, _) = run_ms(stream.run_resumable(
        |n: &u32| *n,
        async |from: Option<u32>| Ok(dropping(from, 100, 1)),
        async |n| got.borrow_mut().push(n),
    ));
    assert_eq!(r, Err(CallError::Failed("link lost")));
    assert_eq!(*got.borrow(), [1, 2, 3]);
    assert_eq!(stream.restarts(), 2);
}

#[test]
#[serial]
fn a_failure_mid_stream_ends_it_and_the_breaker_hears_it() {
    fresh();
    let breaker = breaker(1);
    let policy = Policy::new(&breaker, no_jitter());
    let mut stream = policy.streaming(&StreamSettings::DEFAULT).unwrap();
    let got = RefCell::new(Vec::new());
    let (r, _) = run_ms(stream.run(
        async || Ok(dropping(None, 6, 2)),
        async |n| got.borrow_mut().push(n),
    ));
    assert_eq!(r, Err(CallError::Failed("link lost")));
    assert_eq!(*got.borrow(), [1, 2]);
    assert_eq!(breaker.state(), State::Open);
}

#[test]
#[serial]
fn the_attempt_timeout_bounds_the_wait_for_the_first_element_alone() {
    fresh();
    let breaker = breaker(5);
    let policy = Policy::new(&breaker, no_jitter());
    let mut stream = policy.streaming(&StreamSettings::DEFAULT).unwrap();
    let links = RefCell::new(0);
    let got = RefCell::new(Vec::new());
    let (r, took) = run_ms(stream.run(
        async || {
            *links.borrow_mut() += 1;
            // The first link is too slow to its first element; the second is not, and then
            // goes quiet for 5 s between elements, five attempt timeouts.
            let first = if *links.borrow() == 1 { 3_000 } else { 10 };
            Ok(scripted(vec![
                Beat::Item(first, 1),
                Beat::Item(5_000, 2),
                Beat::Item(5_000, 3),
            ]))
        },
        async |n| got.borrow_mut().push(n),
    ));
    assert_eq!(r, Ok(()));
    assert_eq!(*got.borrow(), [1, 2, 3]);
    assert_eq!(*links.borrow(), 2);
    assert_eq!(took, EDuration::from_millis(1_000 + 100 + 10 + 10_000));
}

#[test]
#[serial]
fn a_stall_loses_the_stream_as_a_timeout() {
    fresh();
    let breaker = breaker(5);
    let policy = Policy::new(&breaker, no_jitter());
    let settings = StreamSettings::builder()
        .stall_timeout(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let mut stream = policy.streaming(&settings).unwrap();
    let (r, took) = run_ms(stream.run(
        async || {
            Ok(scripted(vec![
                Beat::Item(5, 1),
                Beat::Item(50, 2),
                Beat::Quiet,
            ]))
        },
        async |_| {},
    ));
    assert_eq!(r, Err(CallError::TimedOut { last: None }));
    assert_eq!(took, EDuration::from_millis(5 + 50 + 100));
    assert_eq!(stream.last_loss(), Some(Outcome::TimedOut));
}

/// A source whose errors are permanent: the request itself is wrong.
struct Refusing(Scripted);

impl Source for Refusing {
    type Item = u32;
    type Error = &'static str;
    async fn next(&mut self) -> Option<Result<u32, &'static str>> {
        self.0.next().await
    }
    fn outcome(_: &&'static str) -> Outcome {
        Outcome::Permanent
    }
}

#[test]
#[serial]
fn a_permanent_error_is_neither_retried_nor_restarted_from() {
    fresh();
    let breaker = breaker(5);
    let policy = Policy::new(&breaker, no_jitter());
    let mut stream = policy.streaming(&StreamSettings::DEFAULT).unwrap();
    let opened = RefCell::new(0);
    let (r, _) = run_ms(stream.run_resumable(
        |n: &u32| *n,
        async |from: Option<u32>| {
            *opened.borrow_mut() += 1;
            Ok(Refusing(dropping(from, 6, 2)))
        },
        async |_| {},
    ));
    assert_eq!(r, Err(CallError::Failed("link lost")));
    assert_eq!(*opened.borrow(), 1);
    assert_eq!(stream.last_loss(), Some(Outcome::Permanent));

    // Failing to open: not retried either.
    let mut stream = policy.streaming(&StreamSettings::DEFAULT).unwrap();
    let (r, _) = run_ms(stream.run(
        async || {
            *opened.borrow_mut() += 1;
            Err::<Refusing, _>("no such channel")
        },
        async |_| {},
    ));
    assert_eq!(r, Err(CallError::Failed("no such channel")));
    assert_eq!(*opened.borrow(), 2);
}

#[test]
#[serial]
fn each_run_has_its_restarts_afresh() {
    fresh();
    let breaker = breaker(50);
    let policy = Policy::new(&breaker, no_jitter());
    let settings = StreamSettings::builder().max_restarts(1).build().unwrap();
    let mut stream = policy.streaming(&settings).unwrap();
    for _ in 0..2 {
        let got = RefCell::new(Vec::new());
        let (r, _) = run_ms(stream.run_resumable(
            |n: &u32| *n,
            async |from: Option<u32>| Ok(dropping(from, 4, 2)),
            async |n| got.borrow_mut().push(n),
        ));
        assert_eq!(r, Ok(()));
        assert_eq!(*got.borrow(), [1, 2, 3, 4]);
        assert_eq!(stream.restarts(), 1);
    }
}

#[test]
#[serial]
fn a_stream_lost_during_a_drain_ends_as_drained() {
    static DRAIN: Drain = Drain::new();
    fresh();
    let breaker = breaker(50);
    let policy = Policy::new(&breaker, no_jitter());
    let mut stream = policy
        .streaming(&StreamSettings::DEFAULT)
        .unwrap()
        .drain_on(&DRAIN);
    let got = RefCell::new(Vec::new());
    let (r, _) = run_ms(stream.run_resumable(
        |n: &u32| *n,
        async |from: Option<u32>| Ok(dropping(from, 6, 2)),
        async |n| {
            got.borrow_mut().push(n);
            DRAIN.begin(); // the service begins shutting down while the stream flows
        },
    ));
    assert_eq!(
        r,
        Err(CallError::Drained {
            last: Some("link lost")
        })
    );
    assert_eq!(*got.borrow(), [1, 2]);
}

/// A source whose errors count as successes (the caller's choice): they still end the stream.
struct Lenient(Scripted);

impl Source for Lenient {
    type Item = u32;
    type Error = &'static str;
    async fn next(&mut self) -> Option<Result<u32, &'static str>> {
        self.0.next().await
    }
    fn outcome(_: &&'static str) -> Outcome {
        Outcome::Success
    }
}

#[test]
#[serial]
fn an_error_counted_as_a_success_still_reaches_the_caller() {
    fresh();
    let breaker = breaker(5);
    let policy = Policy::new(&breaker, no_jitter());
    let mut stream = policy.streaming(&StreamSettings::DEFAULT).unwrap();
    let (r, _) = run_ms(stream.run_resumable(
        |n: &u32| *n,
        async |from: Option<u32>| Ok(Lenient(dropping(from, 6, 2))),
        async |_| {},
    ));
    assert_eq!(r, Err(CallError::Failed("link lost")));
    assert_eq!(stream.restarts(), 0);
}

#[test]
#[serial]
fn links_that_flowed_long_enough_start_the_restarts_over() {
    fresh();
    let breaker = breaker(50);
    let policy = Policy::new(&breaker, no_jitter());
    // Each link delivers two elements 10 ms apart and is lost 10 ms later: 20 ms of flow.
    for (reset, delivered) in [(Some(20), 8), (Some(25), 4), (None, 4)] {
        let settings = StreamSettings::builder()
            .max_restarts(1)
            .reset_restarts_after(reset.map(Duration::from_millis))
            .build()
            .unwrap();
        let mut stream = policy.streaming(&settings).unwrap();
        let got = RefCell::new(Vec::new());
        let _ = run_ms(stream.run_resumable(
            |n: &u32| *n,
            async |from: Option<u32>| Ok(dropping(from, 8, 2)),
            async |n| got.borrow_mut().push(n),
        ));
        assert_eq!(got.borrow().len(), delivered, "reset after {reset:?} ms");
    }
}

#[test]
#[serial]
fn hedged_settings_cannot_stream() {
    fresh();
    let breaker = breaker(5);
    let hedged = CallSettings::builder().hedging(true).build().unwrap();
    let policy = Policy::new(&breaker, hedged);
    let err = policy.streaming(&StreamSettings::DEFAULT).err().unwrap();
    assert_eq!(
        (err.field, err.bound),
        (Field::Hedging, Bound::OffForStreaming)
    );
}
