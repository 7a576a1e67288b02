//! The keyed tables: a rate limiter per key (`KeyedLimiter`, GCRA or window with cooldown) and a
//! breaker per key (`Keyed`), each driven with arbitrary keys, requests, outcomes and clock steps
//! (back and forward, `Instant::MAX` included) against a model that keeps one private limiter or
//! breaker per key.
//!
//! After every step: nothing panicked; the table never holds more keys than its capacity, and
//! `len` counts the keys it holds; a key's decisions are those of its own private limiter or
//! breaker, whatever the other keys do (the model's copy is replaced by a new one only when the
//! table evicted the key); a key is evicted only when idle: a limiter as good as new (all its
//! cells available) and quiet for the idle period, a breaker closed, with no permit out, and quiet
//! for its trip window (so an open breaker or a busy key is never evicted); a new key is refused
//! as `Full` only when the table is full and no key in it is idle.
//!
//! For the limiter table, the model's comparisons (decisions, availability, which keys are idle)
//! hold until the clock steps back further than a late reading (1 s): from then on a limiter takes
//! the clock for reset, and the table settles every key it scans for room at that reading, so a
//! key's state can depend on when other keys arrived; the capacity, `len` and the agreement of
//! the table with itself are still checked on every input.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use stormguard_core::{
    breaker::Keyed, breaker::KeyedRefusal, limits::KeyedLimitError, limits::KeyedLimiter,
    limits::LimitRule, limits::RateLimitSettings, limits::RateLimiter, limits::WindowLimitSettings,
    limits::WindowLimiter, Breaker, Duration, Instant, Permit, Refused, State,
};
use stormguard_fuzz::{sink, BreakerKnobs, Clock, Log, Out, TimeStep, LATE_READING};

/// Keys are drawn from a few more than the tables hold, so tables fill and evict.
const KEYS: u8 = 7;
const CAPACITY: usize = 4;

#[derive(Arbitrary, Debug)]
enum Input {
    Limiter {
        rule: LimitKnobs,
        start: u64,
        ops: Vec<LimitOp>,
    },
    Breakers {
        knobs: BreakerKnobs,
        start: u64,
        ops: Vec<BreakerOp>,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum LimitKnobs {
    Gcra {
        cells: u8,
        period_ms: u16,
        burst: u8,
        idle_ms: u32,
    },
    Window {
        events: u8,
        window_ms: u16,
        cooldown_ms: u16,
        idle_ms: u32,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum LimitOp {
    Check { key: u8, n: u8 },
    Remove { key: u8 },
    EvictIdle,
    Time(TimeStep),
    Late(u32),
    ToMax,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum BreakerOp {
    Acquire {
        key: u8,
        timeout_ms: Option<u16>,
    },
    Complete {
        which: u8,
        outcome: Out,
        latency_us: u32,
    },
    Release {
        which: u8,
    },
    /// Dropped without an outcome or a release: the key stays busy for good.
    Forget {
        which: u8,
    },
    EvictIdle,
    Time(TimeStep),
}

/// The private limiter the model keeps per key.
trait Private: Clone {
    type Rule: LimitRule + Copy;
    fn new(rule: Self::Rule) -> Self;
    fn check_n(&mut self, now: Instant, n: u32) -> Result<(), Refused>;
    fn available(&self, now: Instant) -> u32;
    fn most(rule: &Self::Rule) -> u32;
    fn idle(rule: &Self::Rule) -> Duration;
}

impl Private for RateLimiter {
    type Rule = RateLimitSettings;
    fn new(rule: RateLimitSettings) -> Self {
        RateLimiter::new(rule)
    }
    fn check_n(&mut self, now: Instant, n: u32) -> Result<(), Refused> {
        RateLimiter::check_n(self, now, n)
    }
    fn available(&self, now: Instant) -> u32 {
        RateLimiter::available(self, now)
    }
    fn most(rule: &RateLimitSettings) -> u32 {
        rule.burst()
    }
    fn idle(rule: &RateLimitSettings) -> Duration {
        rule.idle()
    }
}

impl Private for WindowLimiter {
    type Rule = WindowLimitSettings;
    fn new(rule: WindowLimitSettings) -> Self {
        WindowLimiter::new(rule)
    }
    fn check_n(&mut self, now: Instant, n: u32) -> Result<(), Refused> {
        WindowLimiter::check_n(self, now, n)
    }
    fn available(&self, now: Instant) -> u32 {
        WindowLimiter::available(self, now)
    }
    fn most(rule: &WindowLimitSettings) -> u32 {
        rule.events()
    }
    fn idle(rule: &WindowLimitSettings) -> Duration {
        rule.idle()
    }
}

/// The model's view of one key of the limiter table.
#[derive(Clone)]
struct LimitKey<P> {
    limiter: P,
    /// When the key was last asked about (the latest reading, a late one changing nothing).
    last: Instant,
}

fn run_limiter<P: Private>(rule: P::Rule, start: u64, ops: &[LimitOp]) {
    let mut table: KeyedLimiter<u8, P::Rule, CAPACITY> = KeyedLimiter::with_seed(rule, start);
    let mut model: Vec<Option<LimitKey<P>>> = vec![None; usize::from(KEYS)];
    let mut now = Instant::from_nanos(start);
    // Eviction and independence are exact on a clock that never stepped back past a late
    // reading: further back, a limiter takes the clock for reset (see the rate limiter's docs).
    let mut latest = now;
    let mut reset = false;

    for op in ops.iter().take(256) {
        match *op {
            LimitOp::Check { key, n } => {
                let key = key % KEYS;
                let n = u32::from(n % 4);
                let slot = usize::from(key);
                let present = table.contains_key(&key);
                assert_eq!(present, model[slot].is_some(), "key {key} present?");
                let others_idle = idle_keys(&model, &table, rule, now);
                let result = table.check_n(&key, now, n);
                match model[slot].as_mut() {
                    Some(m) => {
                        let expected = m.limiter.check_n(now, n);
                        if !reset {
                            assert_eq!(
                                result,
                                expected.map_err(KeyedLimitError::Limited),
                                "key {key}: the table and its own limiter disagree"
                            );
                        }
                        if now > m.last || now + LATE_READING < m.last {
                            m.last = now;
                        }
                    }
                    None => {
                        let mut fresh = P::new(rule);
                        let expected = fresh.check_n(now, n);
                        match (result, expected) {
                            (Ok(()), Ok(())) => {
                                model[slot] = Some(LimitKey {
                                    limiter: fresh,
                                    last: now,
                                });
                            }
                            (Err(KeyedLimitError::Limited(a)), Err(b)) => assert_eq!(a, b),
                            (Err(KeyedLimitError::Full { .. }), Ok(())) => {
                                assert_eq!(table.len(), CAPACITY, "refused as full with room");
                                if !reset {
                                    assert_eq!(others_idle, 0, "refused as full with a key idle");
                                }
                            }
                            (r, e) => panic!("new key {key}: table {r:?}, new limiter {e:?}"),
                        }
                    }
                }
            }
            LimitOp::Remove { key } => {
                let key = key % KEYS;
                let removed = table.remove(&key);
                assert_eq!(removed, model[usize::from(key)].take().is_some());
            }
            LimitOp::EvictIdle => {
                let idle = idle_keys(&model, &table, rule, now);
                let evicted = table.evict_idle(now);
                if !reset {
                    assert_eq!(evicted, idle, "evicted {evicted}, idle {idle}");
                }
            }
            LimitOp::Time(step) => {
                let mut c = Clock::new(now);
                c.step(step);
                now = c.now();
            }
            LimitOp::Late(ns) => {
                now = now - Duration::from_nanos(u64::from(ns) % LATE_READING.as_nanos());
            }
            LimitOp::ToMax => now = Instant::MAX,
        }
        if now + LATE_READING < latest {
            reset = true;
        }
        latest = latest.max(now);
        // Keys the table let go of: each must have been idle (on a clock that never reset).
        let mut held = 0;
        for key in 0..KEYS {
            let slot = usize::from(key);
            match (table.contains_key(&key), model[slot].is_some()) {
                (true, true) => held += 1,
                (false, true) => {
                    if !reset {
                        let m = model[slot].as_ref().unwrap();
                        assert!(
                            is_idle(m, rule, now),
                            "key {key} evicted while in use (available {} of {}, quiet {})",
                            m.limiter.available(now),
                            P::most(&rule),
                            now - m.last
                        );
                    }
                    model[slot] = None;
                }
                (true, false) => panic!("key {key} in the table, not in the model"),
                (false, false) => {}
            }
        }
        assert_eq!(table.len(), held);
        assert!(table.len() <= CAPACITY);
        assert_eq!(table.is_empty(), held == 0);
        if !reset {
            for key in 0..KEYS {
                let expect = model[usize::from(key)]
                    .as_ref()
                    .map_or(P::most(&rule), |m| m.limiter.available(now));
                assert_eq!(table.available(&key, now), expect, "key {key} available");
            }
        }
    }
}

fn is_idle<P: Private>(m: &LimitKey<P>, rule: P::Rule, now: Instant) -> bool {
    // Quiet from the last request on: a late reading before it is not quiet at all.
    m.limiter.available(now) == P::most(&rule)
        && m.last
            .checked_add(P::idle(&rule))
            .is_some_and(|at| now >= at)
}

fn idle_keys<P: Private>(
    model: &[Option<LimitKey<P>>],
    _table: &KeyedLimiter<u8, P::Rule, CAPACITY>,
    rule: P::Rule,
    now: Instant,
) -> usize {
    model
        .iter()
        .flatten()
        .filter(|m| is_idle(m, rule, now))
        .count()
}

/// The model's view of one key of the breaker table.
struct BreakerKey {
    breaker: Breaker,
    last: Instant,
    out: u32,
}

fn run_breakers(knobs: &BreakerKnobs, start: u64, ops: &[BreakerOp]) {
    // Jitter off: the table reseeds each key's copy, and without jitter the seed decides nothing.
    let Some(settings) = knobs.without_jitter().settings() else {
        return;
    };
    let template = Breaker::new(settings);
    let names = [*settings.name()];
    let mut table: Keyed<u8, Breaker, CAPACITY> = Keyed::new(template.clone());
    let mut model: Vec<Option<BreakerKey>> = (0..KEYS).map(|_| None).collect();
    let mut clock = Clock::new(Instant::from_nanos(start));
    // (key, the table's permit, the model's permit)
    let mut permits: Vec<(u8, Permit, Permit)> = Vec::new();

    // The core's idle rule, restated: a trip window of quiet for a closed breaker, four of its
    // longest breaks (never less than a trip window) for an open, half-open or recovering one,
    // never for an isolated one; and no permit out.
    let stale = settings
        .max_break()
        .saturating_mul(4)
        .max(settings.trip_window());
    let idle = |m: &BreakerKey, now: Instant| {
        let quiet = match m.breaker.state(now) {
            State::Closed => settings.trip_window(),
            State::Isolated => return false,
            _ => stale,
        };
        m.out == 0 && now.saturating_duration_since(m.last) >= quiet
    };

    for op in ops.iter().take(256) {
        let now = clock.now();
        match *op {
            BreakerOp::Acquire { key, timeout_ms } => {
                let key = key % KEYS;
                let slot = usize::from(key);
                let timeout = timeout_ms.map(|ms| Duration::from_millis(u64::from(ms)));
                let idle_now = model.iter().flatten().filter(|m| idle(m, now)).count();
                let (mut la, mut lb) = (Log::new(), Log::new());
                let result = table.try_acquire(key, now, timeout, &mut sink(&mut la, &names));
                let m = match &mut model[slot] {
                    Some(m) => m,
                    None => {
                        if let Err(KeyedRefusal::Full) = result {
                            assert_eq!(table.len(), CAPACITY, "refused as full with room");
                            assert_eq!(idle_now, 0, "refused as full with a key idle");
                            assert!(la.is_empty());
                            continue;
                        }
                        model[slot] = Some(BreakerKey {
                            breaker: template.clone(),
                            last: now,
                            out: 0,
                        });
                        model[slot].as_mut().unwrap()
                    }
                };
                m.last = now;
                let expected = m
                    .breaker
                    .try_acquire_with(now, timeout, &mut sink(&mut lb, &names));
                assert_eq!(la, lb, "key {key}: events differ");
                match (result, expected) {
                    (Ok(a), Ok(b)) => {
                        assert_eq!(a, b);
                        m.out += 1;
                        permits.push((key, a, b));
                    }
                    (Err(KeyedRefusal::Refused(a)), Err(b)) => assert_eq!(a, b),
                    (r, e) => panic!("key {key}: table {r:?}, its own breaker {e:?}"),
                }
            }
            BreakerOp::Complete {
                which,
                outcome,
                latency_us,
            } => {
                if permits.is_empty() {
                    continue;
                }
                let (key, a, b) = permits.swap_remove(usize::from(which) % permits.len());
                clock.advance(Duration::from_micros(u64::from(latency_us)));
                let now = clock.now();
                let o = outcome.outcome();
                let (mut la, mut lb) = (Log::new(), Log::new());
                table.on_outcome(&key, now, a, o, &mut sink(&mut la, &names));
                let m = model[usize::from(key)]
                    .as_mut()
                    .expect("a busy key is held");
                m.out -= 1;
                m.last = m.last.max(now);
                m.breaker.on_outcome(now, b, o, &mut sink(&mut lb, &names));
                assert_eq!(la, lb, "key {key}: events differ on outcome");
            }
            BreakerOp::Release { which } => {
                if permits.is_empty() {
                    continue;
                }
                let (key, a, b) = permits.swap_remove(usize::from(which) % permits.len());
                table.release(&key, a);
                let m = model[usize::from(key)]
                    .as_mut()
                    .expect("a busy key is held");
                m.out -= 1;
                m.breaker.release(b);
            }
            BreakerOp::Forget { which } => {
                if !permits.is_empty() {
                    let _ = permits.swap_remove(usize::from(which) % permits.len());
                }
            }
            BreakerOp::EvictIdle => {
                let idle_now = model.iter().flatten().filter(|m| idle(m, now)).count();
                assert_eq!(table.evict_idle(now), idle_now);
            }
            BreakerOp::Time(step) => clock.step(step),
        }
        let now = clock.now();
        let mut held = 0;
        for key in 0..KEYS {
            let slot = usize::from(key);
            match (table.get(&key), model[slot].as_ref()) {
                (Some(b), Some(m)) => {
                    held += 1;
                    assert_eq!(b.snapshot(now), m.breaker.snapshot(now), "key {key}");
                }
                (None, Some(m)) => {
                    assert!(
                        idle(m, now),
                        "key {key} evicted while in use: {:?}, {} out, quiet {}",
                        m.breaker.state(now),
                        m.out,
                        now.saturating_duration_since(m.last)
                    );
                    model[slot] = None;
                }
                (Some(_), None) => panic!("key {key} in the table, not in the model"),
                (None, None) => {}
            }
        }
        assert_eq!(table.len(), held);
        assert!(table.len() <= CAPACITY);
        assert_eq!(table.snapshots(now).count(), held);
    }
}

fuzz_target!(|input: Input| {
    match input {
        Input::Limiter { rule, start, ops } => match rule {
            LimitKnobs::Gcra {
                cells,
                period_ms,
                burst,
                idle_ms,
            } => {
                let Ok(s) = RateLimitSettings::builder("fuzz")
                    .rate(
                        1 + u32::from(cells % 16),
                        Duration::from_millis(1 + u64::from(period_ms)),
                    )
                    .burst(1 + u32::from(burst % 16))
                    .idle(Duration::from_millis(u64::from(idle_ms % 600_000)))
                    .build()
                else {
                    return;
                };
                run_limiter::<RateLimiter>(s, start, &ops);
            }
            LimitKnobs::Window {
                events,
                window_ms,
                cooldown_ms,
                idle_ms,
            } => {
                let Ok(s) = WindowLimitSettings::builder("fuzz")
                    .events(1 + u32::from(events % 16))
                    .window(Duration::from_millis(1 + u64::from(window_ms)))
                    .cooldown(Duration::from_millis(1 + u64::from(cooldown_ms)))
                    .idle(Duration::from_millis(u64::from(idle_ms % 600_000)))
                    .build()
                else {
                    return;
                };
                run_limiter::<WindowLimiter>(s, start, &ops);
            }
        },
        Input::Breakers { knobs, start, ops } => run_breakers(&knobs, start, &ops),
    }
});
