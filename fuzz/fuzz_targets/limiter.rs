//! Arbitrary requests to the rate limiters, GCRA, window-with-cooldown and the segmented sliding
//! window, each fed to the `&mut`
//! form and the shared form in lockstep, over a clock that jumps, steps back, and is set to
//! anything, `Instant::MAX` included.
//!
//! After every step: nothing panicked; both forms gave the same decision and read the same
//! available cells; `peek` (the call driver's look) says what a request for one cell would get;
//! a refusal's `retry_after` is exact: asking again at `now + retry_after` with nothing else
//! happening is granted, and a nanosecond earlier is refused (`Duration::MAX` only for a request
//! larger than the limiter holds or one whose arrival would fall past the end of time). GCRA:
//! over the admissions between any two readings, at most `burst + span / T` cells (see
//! `stormguard_fuzz::CellLedger` for the readings this holds over). Window with cooldown: at most
//! `events` per window, windows open at least `min(window, cooldown)` apart (so at most
//! `events * (2 + span / min(window, cooldown))` over a span), and nothing is admitted while a
//! cooldown announced by a refusal runs. Sliding window: over readings that never step back by
//! more than a late reading, at most `quota` calls in any `segments` consecutive segments.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use stormguard_core::{
    limits::RateLimitSettings, limits::RateLimiter, limits::SharedRateLimiter,
    limits::SharedSlidingWindowLimiter, limits::SharedWindowLimiter, limits::SlidingWindowLimiter,
    limits::SlidingWindowSettings, limits::WindowLimitSettings, limits::WindowLimiter, Duration,
    Instant, RefusalReason, Refused,
};
use stormguard_fuzz::{CellLedger, TimeStep, LATE_READING};

#[derive(Arbitrary, Debug)]
struct Input {
    rule: Rule,
    start: u64,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Rule {
    Gcra {
        cells: u16,
        period_us: u32,
        burst: Option<u16>,
    },
    /// Any numbers at all: mostly invalid, which must be refused, never panic.
    GcraRaw {
        cells: u32,
        period_ns: u64,
        burst: u32,
    },
    Window {
        events: u16,
        window_ms: u32,
        cooldown_ms: u32,
    },
    WindowRaw {
        events: u32,
        window_ns: u64,
        cooldown_ns: u64,
    },
    Sliding {
        quota: u16,
        segment_ms: u32,
        segments: u8,
    },
    SlidingRaw {
        quota: u32,
        window_ns: u64,
        segments: u32,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Check,
    CheckN(u8),
    /// Any count, most larger than any burst.
    CheckHuge(u32),
    Time(TimeStep),
    /// A late reading: the clock read before the last one, by a thread that lost the race.
    Late(u32),
    ToMax,
    /// Waits out the last refusal exactly, then asks for the same again.
    WaitRetry,
}

/// The two forms of one limiter, driven alike.
enum Pair {
    Gcra(RateLimiter, SharedRateLimiter),
    Window(WindowLimiter, SharedWindowLimiter),
    Sliding(SlidingWindowLimiter, SharedSlidingWindowLimiter),
}

impl Pair {
    fn check_n(&mut self, now: Instant, n: u32) -> Result<(), Refused> {
        let (a, b) = match self {
            Pair::Gcra(l, s) => (l.check_n(now, n), s.check_n(now, n)),
            Pair::Window(l, s) => (l.check_n(now, n), s.check_n(now, n)),
            Pair::Sliding(l, s) => (l.check_n(now, n), s.check_n(now, n)),
        };
        assert_eq!(a, b, "the forms disagree on {n} cells at {now}");
        a
    }

    fn available(&self, now: Instant) -> u32 {
        let (a, b) = match self {
            Pair::Gcra(l, s) => (l.available(now), s.available(now)),
            Pair::Window(l, s) => (l.available(now), s.available(now)),
            Pair::Sliding(l, s) => (l.available(now), s.available(now)),
        };
        assert_eq!(a, b, "the forms disagree on what is available at {now}");
        a
    }

    fn peek(&self, now: Instant) -> Result<(), Refused> {
        let (a, b) = match self {
            Pair::Gcra(l, s) => (l.peek(now), (&*s).peek(now)),
            Pair::Window(l, s) => (l.peek(now), (&*s).peek(now)),
            Pair::Sliding(l, s) => (l.peek(now), (&*s).peek(now)),
        };
        assert_eq!(a, b);
        a
    }

    /// What the `&mut` form would answer at `now` to `n` cells, leaving it as it is.
    fn would(&self, now: Instant, n: u32) -> Result<(), Refused> {
        match self {
            Pair::Gcra(l, _) => l.clone().check_n(now, n),
            Pair::Window(l, _) => l.clone().check_n(now, n),
            Pair::Sliding(l, _) => l.clone().check_n(now, n),
        }
    }

    fn most(&self) -> u32 {
        match self {
            Pair::Gcra(l, _) => l.settings().burst(),
            Pair::Window(l, _) => l.settings().events(),
            Pair::Sliding(l, _) => l.settings().quota(),
        }
    }
}

/// Admissions of a window limiter over a stretch of readings that never step back.
#[derive(Default)]
struct WindowLedger {
    admitted: Vec<(u64, u64)>,
    latest: u64,
    /// A cooldown announced by a refusal: nothing is admitted before it ends.
    cooling_until: Option<u64>,
}

impl WindowLedger {
    fn read(&mut self, now: Instant) {
        let now = now.as_nanos();
        if now < self.latest {
            *self = WindowLedger::default();
        }
        self.latest = now;
    }

    fn admit(&mut self, now: Instant, n: u32, s: &WindowLimitSettings) {
        self.read(now);
        let r = now.as_nanos();
        if let Some(until) = self.cooling_until {
            assert!(
                r >= until,
                "admitted at {r} during a cooldown until {until}"
            );
        }
        self.admitted.push((r, u64::from(n)));
        // A window ends when it runs out or when a cooldown it started is over: the next one
        // opens at least the shorter of the two after it.
        let window = u128::from(s.window().min(s.cooldown()).as_nanos());
        let mut cells = 0u128;
        for &(ri, ni) in self.admitted.iter().rev() {
            cells += u128::from(ni);
            let span = u128::from(r - ri);
            let most = u128::from(s.events()) * (2 + span / window);
            assert!(
                cells <= most,
                "{cells} events in {span} ns: more than {most}"
            );
        }
        if self.admitted.len() > 512 {
            self.admitted.drain(..256);
        }
    }
}

/// Admissions of a sliding-window limiter, by the segment it counts them in: the latest segment
/// read (a late reading counts in it), forgotten when the clock steps back further.
#[derive(Default)]
struct SlidingLedger {
    admitted: Vec<(u64, u64)>,
    latest: u64,
    latest_segment: u64,
}

impl SlidingLedger {
    /// The segment a reading counts in.
    fn read(&mut self, now: Instant, s: &SlidingWindowSettings) -> u64 {
        let now = now.as_nanos();
        let segment = now / s.segment().as_nanos();
        if now.saturating_add(LATE_READING.as_nanos()) < self.latest {
            *self = SlidingLedger::default();
        }
        self.latest = self.latest.max(now);
        self.latest_segment = self.latest_segment.max(segment);
        self.latest_segment
    }

    fn admit(&mut self, now: Instant, n: u32, s: &SlidingWindowSettings) {
        let segment = self.read(now, s);
        self.admitted.push((segment, u64::from(n)));
        let first = segment.saturating_sub(u64::from(s.segments()) - 1);
        let held: u64 = self
            .admitted
            .iter()
            .filter(|(at, _)| *at >= first)
            .map(|(_, n)| n)
            .sum();
        assert!(
            held <= u64::from(s.quota()),
            "{held} calls in segments {first}..={segment}: more than {}",
            s.quota()
        );
        if self.admitted.len() > 512 {
            self.admitted.drain(..256);
        }
    }
}

fuzz_target!(|input: Input| {
    let mut pair = match input.rule {
        Rule::Gcra {
            cells,
            period_us,
            burst,
        } => {
            let mut b = RateLimitSettings::builder("fuzz").rate(
                1 + u32::from(cells % 1000),
                Duration::from_micros(1 + u64::from(period_us)),
            );
            if let Some(burst) = burst {
                b = b.burst(1 + u32::from(burst % 100));
            }
            let Ok(s) = b.build() else { return };
            Pair::Gcra(RateLimiter::new(s), SharedRateLimiter::new(s))
        }
        Rule::GcraRaw {
            cells,
            period_ns,
            burst,
        } => {
            let Ok(s) = RateLimitSettings::builder("fuzz")
                .rate(cells, Duration::from_nanos(period_ns))
                .burst(burst)
                .build()
            else {
                return;
            };
            Pair::Gcra(RateLimiter::new(s), SharedRateLimiter::new(s))
        }
        Rule::Window {
            events,
            window_ms,
            cooldown_ms,
        } => {
            let Ok(s) = WindowLimitSettings::builder("fuzz")
                .events(1 + u32::from(events % 200))
                .window(Duration::from_millis(1 + u64::from(window_ms % 600_000)))
                .cooldown(Duration::from_millis(1 + u64::from(cooldown_ms % 600_000)))
                .build()
            else {
                return;
            };
            Pair::Window(WindowLimiter::new(s), SharedWindowLimiter::new(s))
        }
        Rule::WindowRaw {
            events,
            window_ns,
            cooldown_ns,
        } => {
            let Ok(s) = WindowLimitSettings::builder("fuzz")
                .events(events)
                .window(Duration::from_nanos(window_ns))
                .cooldown(Duration::from_nanos(cooldown_ns))
                .build()
            else {
                return;
            };
            Pair::Window(WindowLimiter::new(s), SharedWindowLimiter::new(s))
        }
        Rule::Sliding {
            quota,
            segment_ms,
            segments,
        } => {
            let segments = 2 + u32::from(segments % 7);
            let Ok(s) = SlidingWindowSettings::builder("fuzz")
                .quota(1 + u32::from(quota % 500))
                .window(Duration::from_millis(
                    (1 + u64::from(segment_ms % 60_000)) * u64::from(segments),
                ))
                .segments(segments)
                .build()
            else {
                return;
            };
            Pair::Sliding(
                SlidingWindowLimiter::new(s),
                SharedSlidingWindowLimiter::new(s),
            )
        }
        Rule::SlidingRaw {
            quota,
            window_ns,
            segments,
        } => {
            let Ok(s) = SlidingWindowSettings::builder("fuzz")
                .quota(quota)
                .window(Duration::from_nanos(window_ns))
                .segments(segments)
                .build()
            else {
                return;
            };
            Pair::Sliding(
                SlidingWindowLimiter::new(s),
                SharedSlidingWindowLimiter::new(s),
            )
        }
    };
    let mut now = Instant::from_nanos(input.start);
    let mut cells = CellLedger::default();
    let mut windows = WindowLedger::default();
    let mut sliding = SlidingLedger::default();
    let mut last_refusal: Option<(u32, Duration)> = None;

    for op in input.ops.iter().take(512) {
        let n = match *op {
            Op::Check => 1,
            Op::CheckN(n) => u32::from(n),
            Op::CheckHuge(n) => n,
            Op::Time(step) => {
                let mut clock = stormguard_fuzz::Clock::new(now);
                clock.step(step);
                now = clock.now();
                continue;
            }
            Op::Late(ns) => {
                now = now - Duration::from_nanos(u64::from(ns) % LATE_READING.as_nanos());
                continue;
            }
            Op::ToMax => {
                now = Instant::MAX;
                continue;
            }
            Op::WaitRetry => match last_refusal {
                Some((n, d)) if d != Duration::MAX => {
                    now = now + d;
                    n
                }
                _ => continue,
            },
        };

        let peeked = pair.peek(now);
        assert_eq!(
            peeked,
            pair.would(now, 1),
            "peek and check disagree at {now}"
        );
        let before = pair.available(now);
        assert!(before <= pair.most());
        let result = pair.check_n(now, n);
        match result {
            Ok(()) => {
                assert!(n <= before, "{n} cells granted with {before} available");
                last_refusal = None;
                match &pair {
                    Pair::Gcra(l, _) => {
                        let s = l.settings();
                        cells.admit(now, n, s.emission_interval(), s.burst());
                    }
                    Pair::Window(l, _) => {
                        if n > 0 {
                            windows.admit(now, n, l.settings());
                        }
                    }
                    Pair::Sliding(l, _) => {
                        if n > 0 {
                            sliding.admit(now, n, l.settings());
                        }
                    }
                }
            }
            Err(r) => {
                assert_eq!(r.reason, RefusalReason::RateLimited);
                assert!(n > 0, "zero cells refused");
                assert!(!r.retry_after.is_zero(), "refused with no wait");
                if n > pair.most() {
                    assert_eq!(r.retry_after, Duration::MAX);
                }
                if r.retry_after != Duration::MAX {
                    // Exact: granted at `now + retry_after` (nothing else happening), refused a
                    // nanosecond before.
                    let at = now.checked_add(r.retry_after);
                    assert!(
                        at.is_some(),
                        "retry_after {} past the end of time",
                        r.retry_after
                    );
                    let at = at.unwrap_or(Instant::MAX);
                    assert_eq!(
                        pair.would(at, n),
                        Ok(()),
                        "refused {n} at {now} with retry_after {}, refused again then",
                        r.retry_after
                    );
                    let early = at - Duration::from_nanos(1);
                    assert!(
                        pair.would(early, n).is_err(),
                        "retry_after {} is later than needed",
                        r.retry_after
                    );
                }
                match &pair {
                    Pair::Window(..) => {
                        windows.read(now);
                        if r.retry_after != Duration::MAX && n <= pair.most() {
                            windows.cooling_until =
                                Some(now.as_nanos().saturating_add(r.retry_after.as_nanos()));
                        }
                    }
                    // A request larger than the quota is refused without reading the time.
                    Pair::Sliding(l, _) if n <= pair.most() => {
                        sliding.read(now, l.settings());
                    }
                    Pair::Sliding(..) => {}
                    Pair::Gcra(..) => cells.read(now),
                }
                last_refusal = Some((n, r.retry_after));
            }
        }
        let after = pair.available(now);
        if result.is_ok() {
            assert!(
                after <= before,
                "cells grew from {before} to {after} on an admission"
            );
        }
    }
});
