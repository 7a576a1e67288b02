//! Parts kept behind a lock the core does not know (an embassy blocking mutex).

use core::marker::PhantomData;

use crate::error::{RefusalReason, Refused};
use crate::event::Event;
use crate::name::Name;
use crate::outcome::Outcome;
use crate::part::{
    AdaptiveSlots, Admission, BulkheadSlots, Funding, HedgeSuppressed, Learned, Limit, Permit,
};
use crate::time::{Duration, Instant};

/// A part kept behind a lock the core does not know (an embassy blocking mutex): each
/// operation the call driver makes on it takes the lock for one synchronous transition.
///
/// This is the one trait an adapter implements, for its own mutex, because the core cannot
/// name that mutex; [`Locked`] is the part the driver then sees, and every rule stays here.
pub trait Lock {
    /// The part behind the lock.
    type Part: ?Sized;
    /// Runs `f` on the part under the lock; `None` when the part cannot be reached (a lock
    /// found already held by the same caller, which a driver never causes): the operation is
    /// then answered as a busy part would be (see [`Locked`]).
    fn with<R>(&self, f: impl FnOnce(&mut Self::Part) -> R) -> Option<R>;
}

/// Whether anyone hears a [`Locked`] breaker's events, known when the program is built: with
/// nobody to hear them ([`Unheard`]), none is made, and the compiler leaves out the code that
/// makes and keeps them (which matters on a microcontroller). An adapter whose listener type
/// says whether it listens implements this for a marker of that type.
pub trait Hearing {
    /// `true` when the events are heard.
    const HEARD: bool;
}

/// The events are heard: kept under the lock and handed out after it (the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heard;

impl Hearing for Heard {
    const HEARD: bool = true;
}

/// Nobody hears the events: none is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unheard;

impl Hearing for Unheard {
    const HEARD: bool = false;
}

/// A part behind a [`Lock`], as the call driver sees it: the lock is taken for each operation.
///
/// A breaker's events made under the lock are kept (renamed with the name the holder keeps
/// outside the lock) and handed to the driver's sink once it is released, so a listener never
/// runs under the lock; `H` says whether anyone hears them at all ([`Hearing`]).
///
/// A part found busy ([`Lock::with`] is `None`) answers no: an attempt is refused as by a full
/// bulkhead (a self-imposed throttle the call retries, with no `retry_after`), a retry as by
/// an empty budget, a cell as by a rate limiter; nothing is learned, and nothing is hedged.
#[derive(Debug)]
pub struct Locked<'a, P: ?Sized, H = Heard> {
    lock: &'a P,
    name: &'a Name,
    hearing: PhantomData<fn() -> H>,
}

impl<P: ?Sized, H> Clone for Locked<'_, P, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: ?Sized, H> Copy for Locked<'_, P, H> {}

/// The name of a locked part that makes no event (every part but a breaker).
static UNNAMED: Name = Name::new("locked");

impl<'a, P: ?Sized> Locked<'a, P> {
    /// The part behind `lock` (a budget, a limiter, a bulkhead: parts that make no event).
    #[must_use]
    pub const fn new(lock: &'a P) -> Self {
        Locked::named(lock, &UNNAMED)
    }

    /// The breaker behind `lock`, its events named `name` (the name the holder keeps outside
    /// the lock: the events the breaker makes borrow the name inside it).
    #[must_use]
    pub const fn named(lock: &'a P, name: &'a Name) -> Self {
        Locked {
            lock,
            name,
            hearing: PhantomData,
        }
    }
}

impl<'a, P: ?Sized, H> Locked<'a, P, H> {
    /// The same part, its events heard as `H2` says.
    #[must_use]
    pub const fn hearing<H2: Hearing>(self) -> Locked<'a, P, H2> {
        Locked {
            lock: self.lock,
            name: self.name,
            hearing: PhantomData,
        }
    }
}

/// A busy part's refusal of an attempt.
const BUSY: Refused = Refused {
    reason: RefusalReason::BulkheadFull,
    retry_after: Duration::ZERO,
};

/// Room for one transition's events: the core emits at most five per transition (probes
/// reclaimed, two state changes, a probe started, a ramp step).
const HELD: usize = 8;

/// Events kept while a lock is held, handed out once it is released.
struct Held<'n> {
    name: &'n Name,
    events: heapless::Vec<Event<'n>, HELD>,
}

impl<'n> Held<'n> {
    const fn new(name: &'n Name) -> Held<'n> {
        Held {
            name,
            events: heapless::Vec::new(),
        }
    }

    /// Keeps `event` for later; one that cannot be kept (a full buffer, which the core never
    /// fills) goes to `direct` at once rather than being dropped.
    fn keep(&mut self, event: Event<'_>, direct: &mut dyn FnMut(Event<'_>)) {
        if self.events.push(event.with_name(self.name)).is_err() {
            direct(event);
        }
    }

    /// Hands the kept events to `sink`, in order. (By reference: moving the buffer would cost
    /// a copy of it on every call.)
    fn deliver(&self, sink: &mut dyn FnMut(Event<'_>)) {
        for e in &self.events {
            sink(*e);
        }
    }
}

impl<P: Lock + ?Sized, H: Hearing> Locked<'_, P, H> {
    /// Runs `transition` on the part under the lock, its events kept and handed to `events`
    /// once the lock is released (or none made, when unheard); `None` when the part was found
    /// busy. What the driver's operations do, for an adapter's own transitions of the part (an
    /// operator isolating a breaker, a supervisor realising its timed transitions).
    pub fn transition<R>(
        &self,
        events: &mut dyn FnMut(Event<'_>),
        transition: impl FnOnce(&mut P::Part, &mut dyn FnMut(Event<'_>)) -> R,
    ) -> Option<R> {
        if !H::HEARD {
            return self.lock.with(|part| transition(part, &mut |_| {}));
        }
        let mut held = Held::new(self.name);
        let result = self
            .lock
            .with(|part| transition(part, &mut |e| held.keep(e, &mut *events)));
        held.deliver(events);
        result
    }
}

impl<P: Lock + ?Sized, H: Hearing> Admission for Locked<'_, P, H>
where
    P::Part: Admission,
{
    const LEARNS: bool = <P::Part as Admission>::LEARNS;

    fn name(&self) -> &Name {
        self.name
    }

    fn try_acquire(
        &self,
        now: Instant,
        attempt_timeout: Option<Duration>,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Permit, Refused> {
        self.transition(events, |b, sink| b.try_acquire(now, attempt_timeout, sink))
            .unwrap_or(Err(BUSY))
    }

    fn check(&self, now: Instant) -> Result<(), Refused> {
        self.lock.with(|b| b.check(now)).unwrap_or(Err(BUSY))
    }

    fn on_outcome(
        &self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        self.transition(events, |b, sink| b.on_outcome(now, permit, outcome, sink));
    }

    fn release(&self, permit: Permit) {
        self.lock.with(|b| b.release(permit));
    }

    // Inlined where the driver asks, each ask a lock of its own, so that only the readings
    // asked for are compiled in (a firmware that never hedges carries none of the hedge's).
    #[inline(always)]
    fn learned(&self, now: Instant, ask: Learned) -> Result<Duration, HedgeSuppressed> {
        let busy = match ask {
            Learned::Censored { ran_past, .. } => Ok(ran_past),
            Learned::HedgeAfter if Self::LEARNS => Err(HedgeSuppressed::NotClosed),
            _ => Err(HedgeSuppressed::NoBaseline),
        };
        if !Self::LEARNS {
            return busy;
        }
        let learned = match ask {
            Learned::NormalLatency => self.lock.with(|b| b.learned(now, Learned::NormalLatency)),
            Learned::AttemptCeiling => self.lock.with(|b| b.learned(now, Learned::AttemptCeiling)),
            Learned::SlowThreshold => self.lock.with(|b| b.learned(now, Learned::SlowThreshold)),
            Learned::HedgeAfter => self.lock.with(|b| b.learned(now, Learned::HedgeAfter)),
            censored @ Learned::Censored { .. } => self.lock.with(|b| b.learned(now, censored)),
        };
        learned.unwrap_or(busy)
    }
}

impl<P: Lock + ?Sized, H: Hearing> Funding for Locked<'_, P, H>
where
    P::Part: Funding,
{
    fn try_fund_retry(&self, now: Instant) -> Result<(), Refused> {
        self.lock
            .with(|f| f.try_fund_retry(now))
            .unwrap_or(Err(Refused {
                reason: RefusalReason::BudgetExhausted,
                retry_after: Duration::ZERO,
            }))
    }
    fn refund_retry(&self, now: Instant) {
        self.lock.with(|f| f.refund_retry(now));
    }
    fn on_outcome(&self, now: Instant, outcome: Outcome) {
        self.lock.with(|f| f.on_outcome(now, outcome));
    }
    fn check_shed(&self, now: Instant) -> Result<(), Refused> {
        self.lock.with(|f| f.check_shed(now)).unwrap_or(Ok(()))
    }
}

/// A busy limiter's refusal.
const LIMITED: Refused = Refused {
    reason: RefusalReason::RateLimited,
    retry_after: Duration::ZERO,
};

impl<P: Lock + ?Sized, H: Hearing> Limit for Locked<'_, P, H>
where
    P::Part: Limit,
{
    fn take(&self, now: Instant) -> Result<(), Refused> {
        self.lock.with(|l| l.take(now)).unwrap_or(Err(LIMITED))
    }
    fn peek(&self, now: Instant) -> Result<(), Refused> {
        self.lock.with(|l| l.peek(now)).unwrap_or(Err(LIMITED))
    }
}

impl<P: Lock + ?Sized, H: Hearing> BulkheadSlots for Locked<'_, P, H>
where
    P::Part: BulkheadSlots,
{
    fn try_enter(&self, now: Instant) -> Result<(), Refused> {
        self.lock.with(|b| b.try_enter(now)).unwrap_or(Err(BUSY))
    }
    fn leave(&self) -> bool {
        self.lock.with(|b| b.leave()).unwrap_or(false)
    }
    fn check(&self) -> Result<(), Refused> {
        self.lock.with(|b| b.check()).unwrap_or(Err(BUSY))
    }
}

impl<P: Lock + ?Sized, H: Hearing> AdaptiveSlots for Locked<'_, P, H>
where
    P::Part: AdaptiveSlots,
{
    fn try_acquire(&self, now: Instant) -> Result<(), Refused> {
        self.lock.with(|a| a.try_acquire(now)).unwrap_or(Err(BUSY))
    }
    fn complete(&self, now: Instant, latency: Option<Duration>) {
        self.lock.with(|a| a.complete(now, latency));
    }
    fn release(&self) {
        self.lock.with(|a| a.release());
    }
    fn check(&self) -> Result<(), Refused> {
        self.lock.with(|a| a.check()).unwrap_or(Err(BUSY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::RefusalReason;
    use crate::ratio::Ratio;
    use crate::state::{State, TripReason};

    #[test]
    fn every_event_kind_survives_being_held_and_named_again() {
        let name = Name::new("i2c");
        let events = [
            Event::StateChanged {
                name: &name,
                from: State::Closed,
                to: State::Open,
                reason: Some(TripReason::ConsecutiveFailures),
                break_for: Some(Duration::from_secs(3)),
            },
            Event::ProbeStarted { name: &name },
            Event::ProbesReclaimed {
                name: &name,
                count: 2,
            },
            Event::RampStep {
                name: &name,
                fraction: Ratio::ONE,
                cap: Ratio::ONE,
            },
            Event::Rejected {
                name: &name,
                reason: RefusalReason::BreakerOpen,
                delay: Duration::from_millis(100),
                retry_after: Duration::from_secs(1),
            },
            Event::Retry {
                name: &name,
                attempt: 2,
                delay: Duration::from_millis(100),
                after: Outcome::Transient,
            },
            Event::Hedged {
                name: &name,
                attempt: 2,
            },
        ];
        let outside = Name::new("i2c");
        let mut held = Held::new(&outside);
        for e in events {
            held.keep(e, &mut |_| panic!("kept events are not delivered at once"));
        }
        let mut delivered = 0;
        held.deliver(&mut |e| {
            assert!(
                core::ptr::eq(e.name(), &outside),
                "named from outside the lock"
            );
            assert_eq!(e, events[delivered]);
            delivered += 1;
        });
        assert_eq!(delivered, events.len());
    }

    #[test]
    fn a_full_buffer_delivers_at_once_rather_than_dropping() {
        let name = Name::new("i2c");
        let mut held = Held::new(&name);
        let mut direct = 0;
        for _ in 0..HELD + 3 {
            held.keep(Event::ProbeStarted { name: &name }, &mut |_| direct += 1);
        }
        assert_eq!(direct, 3);
        let mut later = 0;
        held.deliver(&mut |_| later += 1);
        assert_eq!(later, HELD);
    }
}
