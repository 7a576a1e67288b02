//! Soak: two threads drive many calls with random outcomes, latencies and cancellations through
//! one `SharedBreaker` and one `SharedBudget`, with the core's own call driver
//! (`Parts::new().breaker(&shared).budget(&shared_budget)`), over a synthetic clock both threads
//! move (so each sees the other's readings late: a clock that steps back a little).
//!
//! Checked throughout: probes in flight per breaker period never exceed the limit; the break
//! stays within [first / 2, max]; a call never waits past its deadline and its pause never
//! outlasts it; no call makes more attempts than allowed. At the end: every call ended exactly
//! once, as exactly one of succeeded, failed, rejected, deadline exceeded or cancelled; the
//! retries started never exceed what the budget funded (its floor is zero, so funding is the
//! initial token plus half a retry per success, whatever the clock did); and once every break
//! and reclaim is over, a call is admitted again: no probe slot leaked.
//!
//! By default this runs a small bounded soak (2 x 10 000 calls, well under a second) so that
//! `cargo test` stays fast; `STORMGUARD_SOAK_SECS=N` runs it for about N seconds instead
//! (`.ci/run` does, in its `soak` step).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant as WallClock;

use stormguard_core::{
    Backoff, BreakerSettings, BudgetSettings, Call, CallSettings, Duration, Event, Finished,
    Instant, Jitter, Outcome, Parts, Recovery, RefusalReason, SharedBreaker, SharedBudget, State,
    Step, GUARD_PAUSE,
};

const THREADS: u64 = 2;
const PROBES: u32 = 2;
/// Calls per thread in the default (bounded) run.
const DEFAULT_CALLS: u64 = if cfg!(miri) { 50 } else { 10_000 };
/// Calls per thread at most in a timed run, whatever the time.
const MAX_CALLS: u64 = 50_000_000;

/// How the soak ends: after a number of calls per thread, or after a wall-clock time.
#[derive(Clone, Copy)]
enum Bound {
    Calls(u64),
    Seconds(u64),
}

fn bound() -> Bound {
    match std::env::var("STORMGUARD_SOAK_SECS") {
        Ok(s) => Bound::Seconds(
            s.trim()
                .parse()
                .expect("STORMGUARD_SOAK_SECS is a whole number of seconds"),
        ),
        Err(_) => Bound::Calls(DEFAULT_CALLS),
    }
}

/// How calls ended, and what they did, as counted by one thread.
#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    calls: u64,
    succeeded: u64,
    failed: u64,
    rejected: u64,
    deadline: u64,
    cancelled: u64,
    /// Retries announced (each one funded by a withdrawal).
    retries: u64,
    /// Successful attempts reported (each funds half a retry).
    successes: u64,
    /// Refusals by reason: breaker (open, half-open full, ramp shedding) and budget.
    breaker_refusals: u64,
    budget_refusals: u64,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.calls += o.calls;
        self.succeeded += o.succeeded;
        self.failed += o.failed;
        self.rejected += o.rejected;
        self.deadline += o.deadline;
        self.cancelled += o.cancelled;
        self.retries += o.retries;
        self.successes += o.successes;
        self.breaker_refusals += o.breaker_refusals;
        self.budget_refusals += o.budget_refusals;
    }
}

fn breaker_settings() -> BreakerSettings {
    BreakerSettings::builder("soak")
        .consecutive_failures(3)
        .minimum_calls(10)
        .trip_window(Duration::from_secs(1))
        .break_duration(Duration::from_millis(20))
        .max_break(Duration::from_millis(200))
        .half_open_probes(PROBES)
        .probe_successes(2)
        .recovery(Some(
            Recovery::over(0.25).clamped(Duration::from_millis(5), Duration::from_millis(50)),
        ))
        .build()
        .unwrap()
}

fn budget_settings() -> BudgetSettings {
    // No floor: retries are funded by successes alone (half a retry each), so what the budget
    // funded is exact whatever the racing clock readings did.
    BudgetSettings::builder("soak-budget")
        .fraction(0.5)
        .floor_per_second(0.0)
        .build()
        .unwrap()
}

fn call_settings() -> CallSettings {
    CallSettings::builder()
        .max_attempts(3)
        .deadline(Some(Duration::from_secs(600)))
        // Long enough that no probe is reclaimed while its thread is descheduled.
        .attempt_timeout(Some(Duration::from_secs(3600)))
        .backoff(
            Backoff::builder()
                .base(Duration::from_millis(1))
                .throttled_base(Duration::from_millis(2))
                .cap(Duration::from_millis(20))
                .jitter(Jitter::Full)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

/// The dependency's answer for call `i`: mostly healthy, with outages every few thousand calls.
fn outcome(rng: &mut fastrand::Rng, i: u64) -> Outcome {
    let outage = (i / 2_000) % 4 == 3;
    let roll = rng.u8(..100);
    match (outage, roll) {
        (true, 0..=79) | (false, 0..=11) => Outcome::Transient,
        (true, 80..=84) | (false, 12..=16) => Outcome::TimedOut,
        (true, 85..=88) | (false, 17..=19) => Outcome::Throttled {
            retry_after: rng.bool().then(|| Duration::from_micros(rng.u64(0..5_000))),
        },
        (true, 89..=91) | (false, 20..=21) => Outcome::Permanent,
        (true, 92..=93) | (false, 22..=23) => Outcome::Cancelled,
        _ => Outcome::Success,
    }
}

struct Shared<'a> {
    breaker: &'a SharedBreaker,
    budget: &'a SharedBudget,
    clock: &'a AtomicU64,
    /// Probe permits held, per breaker period.
    probes: &'a [AtomicUsize; 256],
    worst_probes: &'a AtomicUsize,
}

impl Shared<'_> {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.load(Ordering::SeqCst))
    }

    /// The caller sleeps until `until`: the clock reads at least that after.
    fn sleep_until(&self, until: Instant) -> Instant {
        self.clock.fetch_max(until.as_nanos(), Ordering::SeqCst);
        self.now()
    }
}

/// One thread's calls.
fn run(shared: &Shared<'_>, id: u64, bound: Bound, started: WallClock) -> Tally {
    let settings = call_settings();
    let mut rng = fastrand::Rng::with_seed(0x5eed ^ id);
    let mut tally = Tally::default();
    let breaker_settings = *shared.breaker.settings();
    for i in 0.. {
        match bound {
            Bound::Calls(n) if i >= n => break,
            Bound::Seconds(s) if i % 256 == 0 && started.elapsed().as_secs() >= s => break,
            _ if i >= MAX_CALLS => break,
            _ => {}
        }
        let parts = Parts::new().breaker(shared.breaker).budget(shared.budget);
        let mut now = shared.now();
        let mut call = Call::begin(&settings, now);
        if rng.u8(..100) < 5 {
            // A caller with a tight deadline of its own.
            call = call.with_deadline(now + Duration::from_micros(rng.u64(1..20_000)));
        }
        let deadline = call.deadline().expect("every soak call has a deadline");
        tally.calls += 1;
        let mut handed_out = None;
        let mut ended = false;
        for _ in 0..64 {
            let step = call.poll(&parts, now, &mut |_| {});
            assert!(call.attempts() <= settings.max_attempts());
            match step {
                Step::Attempt(permit) => {
                    if let Some(at) = call.attempt_deadline() {
                        assert!(at <= deadline, "an attempt deadline past the call's");
                    }
                    let probe = permit.is_probe();
                    let period = &shared.probes[usize::from(permit.period())];
                    if probe {
                        let held = period.fetch_add(1, Ordering::SeqCst) + 1;
                        shared.worst_probes.fetch_max(held, Ordering::SeqCst);
                    }
                    let latency = if rng.u8(..100) < 3 {
                        Duration::from_millis(rng.u64(20..80))
                    } else {
                        Duration::from_micros(rng.u64(0..5_000))
                    };
                    let fate = rng.u8(..100);
                    if fate < 2 {
                        // The caller's future is dropped mid-attempt: no outcome, no release.
                        // The breaker reclaims a probe's slot after its attempt timeout.
                        if probe {
                            period.fetch_sub(1, Ordering::SeqCst);
                        }
                        drop(permit);
                        continue;
                    }
                    if fate < 4 {
                        // A drop guard hands the permit back, and the call is cancelled.
                        if probe {
                            period.fetch_sub(1, Ordering::SeqCst);
                        }
                        shared.breaker.release(permit);
                        call.cancel();
                        continue;
                    }
                    std::thread::yield_now(); // the attempt runs while the slot is held
                    let o = outcome(&mut rng, i);
                    if o == Outcome::Success {
                        tally.successes += 1;
                    }
                    if probe {
                        period.fetch_sub(1, Ordering::SeqCst);
                    }
                    let end = Instant::from_nanos(
                        shared
                            .clock
                            .fetch_add(latency.as_nanos(), Ordering::SeqCst)
                            .saturating_add(latency.as_nanos()),
                    );
                    now = end;
                    let mut retried = false;
                    call.complete(&parts, permit, now, o, &mut |e| {
                        if let Event::Retry { delay, .. } = e {
                            assert!(delay <= Duration::from_millis(20));
                            retried = true;
                        }
                    });
                    tally.retries += u64::from(retried);
                }
                Step::Wait(d) => {
                    assert!(
                        now + d < deadline,
                        "a wait of {d} from {now} past {deadline}"
                    );
                    if rng.u8(..100) < 1 {
                        call.cancel(); // the caller gave up during the wait
                    } else {
                        now = shared.sleep_until(now + d);
                    }
                }
                Step::Reject(r) => {
                    assert!(r.pause <= GUARD_PAUSE && r.pause <= deadline - now);
                    assert!(handed_out.is_none(), "a rejection handed out twice");
                    handed_out = Some(r);
                    match r.reason {
                        RefusalReason::BudgetExhausted => tally.budget_refusals += 1,
                        RefusalReason::BreakerOpen
                        | RefusalReason::HalfOpenFull
                        | RefusalReason::RampShedding => tally.breaker_refusals += 1,
                        other => panic!("refused for {other:?}"),
                    }
                    now = shared.sleep_until(now + r.pause);
                }
                Step::Done(f) => {
                    match f {
                        Finished::Rejected(r) => {
                            assert_eq!(Some(r), handed_out, "a rejection not handed out first");
                            tally.rejected += 1;
                        }
                        _ if handed_out.is_some() => panic!("a rejected call ended as {f:?}"),
                        Finished::Succeeded => tally.succeeded += 1,
                        Finished::Failed(_) => tally.failed += 1,
                        Finished::DeadlineExceeded { .. } => tally.deadline += 1,
                        Finished::Cancelled => tally.cancelled += 1,
                        Finished::Drained { .. } => panic!("no drain begins in this run"),
                    }
                    ended = true;
                    break;
                }
            }
        }
        assert!(ended, "call {i} of thread {id} did not end in 64 steps");
        let snap = shared.breaker.snapshot(shared.now());
        assert!(u32::from(snap.probes_in_flight) <= PROBES);
        if let Some(b) = snap.break_duration {
            let first = breaker_settings.break_duration();
            assert!(b >= Duration::from_nanos(first.as_nanos() / 2));
            assert!(b <= breaker_settings.max_break() + Duration::from_millis(1));
        }
        assert!(shared.budget.snapshot(shared.now()).tokens_micro <= 1_000_000);
    }
    tally
}

#[test]
fn two_threads_soak_one_shared_breaker_and_budget_and_every_call_is_accounted_for() {
    let bound = bound();
    let breaker = SharedBreaker::new(breaker_settings()).with_seed(42);
    let budget = SharedBudget::new(budget_settings());
    let clock = AtomicU64::new(1_000_000_000_000);
    let probes: [AtomicUsize; 256] = std::array::from_fn(|_| AtomicUsize::new(0));
    let worst_probes = AtomicUsize::new(0);
    let shared = Shared {
        breaker: &breaker,
        budget: &budget,
        clock: &clock,
        probes: &probes,
        worst_probes: &worst_probes,
    };
    let started = WallClock::now();
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|id| {
                let shared = &shared;
                s.spawn(move || run(shared, id, bound, started))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut total = Tally::default();
    for t in &tallies {
        total.add(t);
    }
    eprintln!(
        "soak: {} calls in {:.2?} ({} succeeded, {} failed, {} rejected ({} by the breaker, {} by the budget), {} deadline exceeded, {} cancelled; {} retries; worst probes in flight {})",
        total.calls,
        started.elapsed(),
        total.succeeded,
        total.failed,
        total.rejected,
        total.breaker_refusals,
        total.budget_refusals,
        total.deadline,
        total.cancelled,
        total.retries,
        worst_probes.load(Ordering::SeqCst),
    );

    // Every call ended exactly once, as exactly one of these.
    assert_eq!(
        total.succeeded + total.failed + total.rejected + total.deadline + total.cancelled,
        total.calls,
        "{total:?}"
    );
    assert_eq!(
        total.rejected,
        total.breaker_refusals + total.budget_refusals
    );
    if let Bound::Calls(n) = bound {
        assert_eq!(total.calls, n * THREADS);
    }
    // The probe limit held in every period.
    assert!(worst_probes.load(Ordering::SeqCst) <= PROBES as usize);
    // Retries within what the budget funded: the initial token and half a retry per success.
    assert!(
        total.retries * 2 <= 2 + total.successes,
        "{} retries for {} successes",
        total.retries,
        total.successes
    );
    // Enough happened to mean something (not under miri's few calls).
    if !cfg!(miri) {
        assert!(
            total.succeeded > 0 && total.failed > 0 && total.rejected > 0,
            "{total:?}"
        );
        assert!(
            total.breaker_refusals > 0 && total.budget_refusals > 0,
            "{total:?}"
        );
    }

    // No probe slot leaked: once every break and every reclaim (an hour's attempt timeout at
    // most) is over, a call is admitted again (within a few offers while the ramp sheds).
    let end = Instant::from_nanos(clock.load(Ordering::SeqCst)) + Duration::from_secs(3601);
    let mut admitted = false;
    for _ in 0..40 {
        match breaker.try_acquire(end, None, &mut |_| {}) {
            Ok(p) => {
                breaker.on_outcome(end, p, Outcome::Success, &mut |_| {});
                admitted = true;
                break;
            }
            Err(r) if r.reason == RefusalReason::RampShedding => {}
            Err(r) => panic!(
                "a probe slot leaked: {r:?}, snapshot {:?}",
                breaker.snapshot(end)
            ),
        }
    }
    assert!(admitted, "{:?}", breaker.snapshot(end));
    assert_ne!(breaker.state(end), State::Open);
}
