//! Arbitrary sequences of bulkhead operations (enter, enter or queue with any wait, a waiter's
//! turn early or late, abandon, leave, guards dropped), fed to the `&mut` form and the shared form
//! in lockstep over a clock that jumps, steps back and is set to anything.
//!
//! After every step: nothing panicked; both forms gave the same answers (permits, tickets,
//! refusals, the "someone waits" flag); calls in flight never exceed the maximum and waiters never
//! exceed the queue's bound; the counts add up: in flight = permits and guards held, queued =
//! tickets held; a ticket's wait is the shorter of the configured and the caller's, from when it
//! queued; a refusal is `BulkheadFull` with a zero `retry_after`, and is given only when the
//! bulkhead is full (and, for a queued caller, its wait is over); `check` says what `try_enter`
//! would. At the end, with everything handed back, both counts are zero.
//!
//! The same operations drive the adaptive concurrency limiter's two forms in lockstep (enter:
//! acquire; leave: complete with a latency drawn from the operation, a third of them failures;
//! a dropped guard: release; the clock as above): the same answers and snapshots, the limit
//! within its bounds, in flight never above the limit that admitted the call, a refusal
//! `ConcurrencyLimited` with a zero `retry_after`, and everything back to zero at the end.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use stormguard_core::limits::{
    AdaptiveLimitSettings, AdaptiveLimiter, AdaptivePermit, SharedAdaptiveLimiter,
};
use stormguard_core::{
    limits::Bulkhead, limits::BulkheadEntry, limits::BulkheadPermit, limits::BulkheadSettings,
    limits::BulkheadTicket, limits::SharedBulkhead, Duration, Instant, RefusalReason, Refused,
};
use stormguard_fuzz::{Clock, TimeStep};

#[derive(Arbitrary, Debug)]
struct Input {
    max_in_flight: u8,
    queue: Option<(u8, u32)>,
    raw: Option<(u32, u32, u64)>,
    start: u64,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Enter,
    EnterGuarded,
    EnterOrQueue {
        max_wait_us: Option<u32>,
    },
    /// A waiter's turn (woken, or its wait over).
    SlotFree {
        which: u8,
    },
    /// A waiter's turn at the end of its wait.
    WaitOver {
        which: u8,
    },
    Abandon {
        which: u8,
    },
    Leave {
        which: u8,
    },
    DropGuard {
        which: u8,
    },
    Time(TimeStep),
}

const FULL: Refused = Refused {
    reason: RefusalReason::BulkheadFull,
    retry_after: Duration::ZERO,
};

fn take<T>(v: &mut Vec<T>, which: u8) -> Option<T> {
    if v.is_empty() {
        None
    } else {
        let i = usize::from(which) % v.len();
        Some(v.swap_remove(i))
    }
}

/// The adaptive limiter's forms in lockstep over the input's operations.
fn adaptive(input: &Input) {
    let min = u32::from(input.max_in_flight % 16).max(1);
    let max = min + input.queue.map_or(0, |(q, _)| u32::from(q % 64));
    let Ok(settings) = AdaptiveLimitSettings::builder("fuzz")
        .limits(min, max)
        .initial_limit(min)
        .baseline_window(Duration::from_secs(1))
        .build()
    else {
        panic!("valid adaptive settings refused");
    };
    let local = AdaptiveLimiter::new(settings);
    let shared = SharedAdaptiveLimiter::new(settings);
    let mut clock = Clock::new(Instant::from_nanos(input.start));
    let mut held: Vec<(AdaptivePermit, AdaptivePermit)> = Vec::new();
    for op in &input.ops {
        let now = clock.now();
        match *op {
            Op::Enter | Op::EnterGuarded | Op::EnterOrQueue { .. } => {
                let limit = local.limit();
                match (local.try_acquire(now), shared.try_acquire(now)) {
                    (Ok(a), Ok(b)) => {
                        held.push((a, b));
                        assert!(local.in_flight() <= limit);
                    }
                    (Err(a), Err(b)) => {
                        assert_eq!(a, b);
                        assert_eq!(a, LIMITED);
                        assert_eq!(local.in_flight(), u32::try_from(held.len()).unwrap());
                    }
                    (a, b) => panic!("the forms disagree: {a:?} / {b:?}"),
                }
            }
            Op::Leave { which } | Op::SlotFree { which } | Op::WaitOver { which } => {
                if let Some((a, b)) = take(&mut held, which) {
                    let latency =
                        (which % 3 != 0).then(|| Duration::from_micros(u64::from(which).pow(3)));
                    assert_eq!(
                        local.complete(a, now, latency),
                        shared.complete(b, now, latency)
                    );
                }
            }
            Op::Abandon { which } | Op::DropGuard { which } => {
                if let Some((a, b)) = take(&mut held, which) {
                    local.release(a);
                    shared.release(b);
                }
            }
            Op::Time(step) => clock.step(step),
        }
        let snap = local.snapshot();
        assert_eq!(snap, shared.snapshot());
        assert!(snap.limit >= min && snap.limit <= max, "{snap:?}");
        assert_eq!(snap.in_flight, u32::try_from(held.len()).unwrap());
        assert_eq!(local.check(), shared.check());
    }
    for (a, b) in held.drain(..) {
        local.release(a);
        shared.release(b);
    }
    assert_eq!((local.in_flight(), shared.in_flight()), (0, 0));
}

const LIMITED: Refused = Refused {
    reason: RefusalReason::ConcurrencyLimited,
    retry_after: Duration::ZERO,
};

fuzz_target!(|input: Input| {
    adaptive(&input);
    let settings = match input.raw {
        // Any numbers: invalid ones are refused by the builder, never panic.
        Some((max, queue, wait_ns)) => BulkheadSettings::builder("fuzz")
            .max_in_flight(max)
            .bounded_wait(queue, Duration::from_nanos(wait_ns))
            .build(),
        None => {
            let b = BulkheadSettings::builder("fuzz")
                .max_in_flight(1 + u32::from(input.max_in_flight % 8));
            match input.queue {
                Some((q, us)) => b
                    .bounded_wait(u32::from(q % 6), Duration::from_micros(u64::from(us)))
                    .build(),
                None => b.no_wait().build(),
            }
        }
    };
    let Ok(settings) = settings else { return };
    let local = Bulkhead::new(settings);
    let shared = SharedBulkhead::new(settings);
    let max = settings.max_in_flight();
    let max_queue = settings.max_queue();
    let mut clock = Clock::new(Instant::from_nanos(input.start));
    // What the harness holds: both forms' permits, tickets, and the shared form's guards.
    let mut permits: Vec<(BulkheadPermit, BulkheadPermit)> = Vec::new();
    let mut tickets: Vec<(BulkheadTicket, BulkheadTicket)> = Vec::new();
    let mut guards = Vec::new();

    for op in input.ops.iter().take(256) {
        let now = clock.now();
        let in_flight = local.in_flight();
        let queued = local.queued();
        match *op {
            Op::Enter => {
                let a = local.try_enter(now);
                let b = shared.try_enter(now);
                assert_eq!(a, b);
                assert_eq!(a.is_ok(), in_flight < max);
                match (a, b) {
                    (Ok(a), Ok(b)) => {
                        assert_eq!(a.entered(), now);
                        permits.push((a, b));
                    }
                    (Err(a), _) => assert_eq!(a, FULL),
                    _ => unreachable!(),
                }
            }
            Op::EnterGuarded => {
                // The `&mut` form takes a plain permit; the shared form a guard.
                let a = local.try_enter(now);
                let b = shared.try_enter_guarded(now);
                assert_eq!(a.is_ok(), b.is_ok());
                match (a, b) {
                    (Ok(a), Ok(g)) => {
                        assert_eq!(g.entered(), Some(now));
                        guards.push((a, g));
                    }
                    (Err(a), Err(b)) => assert_eq!((a, b), (FULL, FULL)),
                    _ => unreachable!(),
                }
            }
            Op::EnterOrQueue { max_wait_us } => {
                let max_wait =
                    max_wait_us.map_or(Duration::MAX, |us| Duration::from_micros(u64::from(us)));
                let a = local.try_enter_or_queue(now, max_wait);
                let b = shared.try_enter_or_queue(now, max_wait);
                assert_eq!(a, b);
                let wait = settings.max_wait().min(max_wait);
                match (a, b) {
                    (Ok(BulkheadEntry::Entered(a)), Ok(BulkheadEntry::Entered(b))) => {
                        assert!(in_flight < max);
                        permits.push((a, b));
                    }
                    (Ok(BulkheadEntry::Queued(a)), Ok(BulkheadEntry::Queued(b))) => {
                        assert_eq!(in_flight, max, "queued with a slot free");
                        assert!(queued < max_queue);
                        assert!(!wait.is_zero());
                        assert_eq!(a.queued_at(), now);
                        assert_eq!(a.wait_until(), now.saturating_add(wait));
                        tickets.push((a, b));
                    }
                    (Err(a), Err(_)) => {
                        assert_eq!(a, FULL);
                        assert_eq!(in_flight, max, "refused with a slot free");
                        assert!(queued == max_queue || wait.is_zero());
                    }
                    _ => unreachable!(),
                }
            }
            Op::SlotFree { which } | Op::WaitOver { which } => {
                let Some((ta, tb)) = take(&mut tickets, which) else {
                    continue;
                };
                let at = match *op {
                    Op::WaitOver { .. } => {
                        clock.set(ta.wait_until());
                        ta.wait_until()
                    }
                    _ => now,
                };
                let until = ta.wait_until();
                let in_flight = local.in_flight();
                let a = local.on_slot_free(at, ta);
                let b = shared.on_slot_free(at, tb);
                assert_eq!(a, b);
                match (a, b) {
                    (Ok(BulkheadEntry::Entered(a)), Ok(BulkheadEntry::Entered(b))) => {
                        assert!(in_flight < max);
                        permits.push((a, b));
                    }
                    (Ok(BulkheadEntry::Queued(a)), Ok(BulkheadEntry::Queued(b))) => {
                        assert_eq!(in_flight, max);
                        assert!(at < until, "still waiting past the wait");
                        assert_eq!(a.wait_until(), until);
                        tickets.push((a, b));
                    }
                    (Err(a), Err(_)) => {
                        assert_eq!(a, FULL);
                        assert_eq!(in_flight, max);
                        assert!(at >= until, "refused before the wait was over");
                    }
                    _ => unreachable!(),
                }
            }
            Op::Abandon { which } => {
                if let Some((a, b)) = take(&mut tickets, which) {
                    local.abandon(a);
                    shared.abandon(b);
                }
            }
            Op::Leave { which } => {
                if let Some((a, b)) = take(&mut permits, which) {
                    let wa = local.leave(a);
                    let wb = shared.leave(b);
                    assert_eq!(wa, wb);
                    assert_eq!(wa, queued > 0, "the wake-up flag");
                }
            }
            Op::DropGuard { which } => {
                if let Some((a, g)) = take(&mut guards, which) {
                    let wa = local.leave(a);
                    if which % 2 == 0 {
                        drop(g);
                    } else {
                        assert_eq!(g.leave(), wa);
                    }
                }
            }
            Op::Time(step) => clock.step(step),
        }
        // The counts add up, within their bounds, alike in both forms.
        let held = u32::try_from(permits.len() + guards.len()).unwrap();
        let waiting = u32::try_from(tickets.len()).unwrap();
        let snap = local.snapshot();
        assert_eq!(snap, shared.snapshot());
        assert_eq!((snap.in_flight, snap.queued), (held, waiting));
        assert!(snap.in_flight <= max && snap.queued <= max_queue);
        assert_eq!(local.check(), shared.check());
        assert_eq!(local.check().is_ok(), held < max);
    }

    for (a, b) in tickets.drain(..) {
        local.abandon(a);
        shared.abandon(b);
    }
    for (a, b) in permits.drain(..) {
        local.leave(a);
        shared.leave(b);
    }
    for (a, g) in guards.drain(..) {
        local.leave(a);
        drop(g);
    }
    assert_eq!((local.in_flight(), local.queued()), (0, 0));
    assert_eq!((shared.in_flight(), shared.queued()), (0, 0));
});
