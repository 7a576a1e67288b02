//! A bulkhead as an optional part of a [`Policy`](crate::Policy): the core's call parts take a
//! slot for every attempt, and a full bulkhead refuses, guarded like any refusal. With a bounded wait in its settings, a call that finds it full first waits for a
//! slot (at most the settings' wait, capped by the call's deadline) and ends that wait at once
//! when the caller cancels.
//!
//! Waiting is the core's protocol ([`stormguard_core::limits::Bulkhead`]: queue, turn, abandon); this
//! module only parks the waiting tasks: their wakers are kept (at most `W`, a const parameter)
//! beside the core's counts, and a call ending while others wait wakes them to take their turn.
//!
//! A waiter the core admits hands its slot straight back and takes it again, through the
//! call's parts, when its attempt starts, with no `.await` in between: among the tasks of one
//! executor nothing can come between the two. Across executors or from an interrupt (with a
//! `CriticalSectionRawMutex`), a caller running in that instant may take the slot; the waiter's
//! attempt is then refused, guarded, and the limit still holds.

use core::fmt;
use core::future::{poll_fn, Future};
use core::pin::Pin;
use core::task::{Context, Poll};

use embassy_futures::select::{select3, Either3};
use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::waitqueue::MultiWakerRegistration;
use embassy_time::Timer;
use stormguard_core::part::{Lock, Locked, Never};
use stormguard_core::{
    limits::BulkheadEntry, limits::BulkheadSettings, limits::BulkheadSnapshot,
    limits::BulkheadTicket, Bound, Duration, Field, Instant, SettingsError,
};

use crate::shared::Shared;
use crate::sleep::{sleep_until, Slept};
use crate::time::to_embassy_instant;
use crate::EmbassyClock;

/// A limit on calls in flight to one dependency, shared by several tasks: the core's
/// [`Bulkhead`](stormguard_core::limits::Bulkhead) in a [`Shared`], beside the wakers of up to
/// `W` waiting tasks; `const`-constructible so it can be a `static`. Give it to
/// [`Policy::with_bulkhead`](crate::Policy::with_bulkhead).
///
/// `W` (default 4) is how many tasks may wait at once, each with its waker kept: a `max_queue`
/// above `W` is served as `W` (a caller finding `W` already waiting is refused as by a full
/// queue), so every waiter has its place and none is woken for nothing.
///
/// ```
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
/// use stormguard_core::{limits::BulkheadSettings, Duration};
/// use stormguard_embassy::Bulkhead;
///
/// // One radio transaction at a time; up to 2 more tasks wait, each at most 50 ms.
/// static RADIO: Bulkhead<Cs> = Bulkhead::new(match BulkheadSettings::builder("radio")
///     .max_in_flight(1)
///     .bounded_wait(2, Duration::from_millis(50))
///     .build()
/// {
///     Ok(s) => s,
///     Err(_) => panic!("invalid bulkhead settings"),
/// });
/// # use critical_section as _; // the host's critical-section implementation, for this test
/// assert_eq!(RADIO.snapshot().unwrap().max_in_flight, 1);
/// ```
pub struct Bulkhead<M: RawMutex, const W: usize = 4> {
    slots: Shared<M, stormguard_core::limits::Bulkhead>,
    /// The tasks waiting for a slot. A waiter registers here before it looks for a slot, and
    /// an attempt that frees one wakes them after, so no wake-up is lost between the two locks.
    waiters: Shared<M, MultiWakerRegistration<W>>,
}

impl<M: RawMutex, const W: usize> Bulkhead<M, W> {
    /// An empty bulkhead with `settings`; `const`, so it can be a `static`.
    #[must_use]
    pub const fn new(settings: BulkheadSettings) -> Self {
        Bulkhead {
            slots: Shared::from_core(stormguard_core::limits::Bulkhead::new(settings)),
            waiters: Shared::from_core(MultiWakerRegistration::new()),
        }
    }

    /// Whether every caller `settings` let wait finds a place among the `W` kept wakers (a
    /// `const` check for a `static`'s settings), or the error naming `max_queue`.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::{Bound, limits::BulkheadSettings, Duration, Field};
    /// use stormguard_embassy::Bulkhead;
    ///
    /// let s = BulkheadSettings::builder("db").bounded_wait(8, Duration::from_millis(10)).build()?;
    /// let err = Bulkhead::<NoopRawMutex>::fits(&s).unwrap_err();
    /// assert_eq!((err.field, err.bound), (Field::MaxQueue, Bound::AtMost(4)));
    /// assert!(Bulkhead::<NoopRawMutex, 8>::fits(&s).is_ok());
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub const fn fits(settings: &BulkheadSettings) -> Result<(), SettingsError> {
        if settings.max_queue() as usize > W {
            return Err(SettingsError {
                field: Field::MaxQueue,
                bound: Bound::AtMost(W as u64),
            });
        }
        Ok(())
    }

    /// Calls in flight, callers waiting and the limits; `None` only on a call from inside the
    /// lock, which this crate never makes.
    #[must_use]
    pub fn snapshot(&self) -> Option<BulkheadSnapshot> {
        self.slots.read(stormguard_core::limits::Bulkhead::snapshot)
    }

    /// The settings the bulkhead was built with.
    #[must_use]
    pub fn settings(&self) -> Option<BulkheadSettings> {
        self.slots.read(|b| *b.settings())
    }

    /// The bulkhead as the core's call driver sees it: the core's [`Locked`] view, which takes
    /// the lock for each slot taken or freed. (A [`Policy`](crate::Policy) also wakes the
    /// waiting tasks when an attempt frees a slot.)
    #[must_use]
    pub const fn part(&self) -> Locked<'_, Shared<M, stormguard_core::limits::Bulkhead>> {
        self.slots.part()
    }

    /// Wakes the waiting tasks, if any, to look for the slot an attempt just freed.
    pub(crate) fn wake_if_waiting(&self) {
        if self.slots.read(|b| b.queued() > 0) == Some(true) {
            self.waiters.with(MultiWakerRegistration::wake);
        }
    }

    /// Waits for a slot when the bulkhead is full and its settings allow a wait: until one is
    /// free (then returns with it free, for the attempt to take), the wait is over (the core's
    /// rule: the settings' wait capped by `deadline`; the attempt is then refused, guarded), or
    /// `cancel` finishes ([`Slept::Cancelled`], the place in the queue given up).
    async fn wait_for_slot<X: Future>(
        &self,
        deadline: Option<Instant>,
        cancel: Pin<&mut X>,
    ) -> Slept {
        let clock = EmbassyClock::new();
        let now = clock.now();
        let max_wait = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
        let ticket = self.slots.with(|b| {
            // No waker left to keep: refused as by a full queue.
            let max_wait = if b.queued() as usize >= W {
                Duration::ZERO
            } else {
                max_wait
            };
            match b.try_enter_or_queue(now, max_wait) {
                Ok(BulkheadEntry::Queued(ticket)) => Some(ticket),
                Ok(BulkheadEntry::Entered(permit)) => {
                    // Free now: handed straight back, for the attempt to take.
                    let _ = b.leave(permit);
                    None
                }
                Err(_) => None,
            }
        });
        let Some(ticket) = ticket.flatten() else {
            return Slept::Elapsed;
        };
        let until = to_embassy_instant(ticket.wait_until());
        let mut waiting = Waiting {
            bulkhead: self,
            ticket: Some(ticket),
        };
        let turn = poll_fn(|cx| waiting.turn(clock.now(), Some(cx)));
        match select3(cancel, turn, Timer::at(until)).await {
            Either3::First(_) => Slept::Cancelled,
            Either3::Second(()) => Slept::Elapsed,
            Either3::Third(()) => {
                // The wait is over: the core admits (a slot just freed) or refuses.
                let _ = waiting.turn(clock.now(), None);
                Slept::Elapsed
            }
        }
    }
}

impl<M: RawMutex, const W: usize> fmt::Debug for Bulkhead<M, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bulkhead")
            .field("now", &self.snapshot())
            .finish_non_exhaustive()
    }
}

/// A place in a bulkhead's queue, abandoned if the wait is given up.
struct Waiting<'a, M: RawMutex, const W: usize> {
    bulkhead: &'a Bulkhead<M, W>,
    ticket: Option<BulkheadTicket>,
}

impl<M: RawMutex, const W: usize> Waiting<'_, M, W> {
    /// The waiter's turn at `now`: ready once admitted (the slot handed back, without waking
    /// anyone, for the attempt to take in the same step) or refused (off the queue); otherwise
    /// still queued, and parked with `cx`'s waker, registered before it looks, so a slot freed
    /// after the look wakes it.
    fn turn(&mut self, now: Instant, cx: Option<&mut Context<'_>>) -> Poll<()> {
        let Some(ticket) = self.ticket.take() else {
            return Poll::Ready(());
        };
        if let Some(cx) = cx {
            self.bulkhead.waiters.with(|w| w.register(cx.waker()));
        }
        let ticket = self
            .bulkhead
            .slots
            .with(|b| match b.on_slot_free(now, ticket) {
                Ok(BulkheadEntry::Entered(permit)) => {
                    let _ = b.leave(permit);
                    None
                }
                Ok(BulkheadEntry::Queued(ticket)) => Some(ticket),
                Err(_) => None,
            })
            .flatten();
        match ticket {
            Some(t) => {
                self.ticket = Some(t);
                Poll::Pending
            }
            None => Poll::Ready(()),
        }
    }
}

impl<M: RawMutex, const W: usize> Drop for Waiting<'_, M, W> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.bulkhead.slots.with(|b| b.abandon(ticket));
        }
    }
}

mod sealed {
    pub trait Step {}
    impl Step for super::NoBulkhead {}
    impl<M: embassy_sync::blocking_mutex::raw::RawMutex, const W: usize> Step
        for &super::Bulkhead<M, W>
    {
    }
}

/// A policy without a bulkhead (the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NoBulkhead;

/// The bulkhead of a [`Policy`](crate::Policy) (sealed): [`NoBulkhead`] (the default), or a
/// `&`[`Bulkhead`] set by [`Policy::with_bulkhead`](crate::Policy::with_bulkhead). With none,
/// a policy carries no code of the bulkhead's.
pub trait BulkheadStep: sealed::Step + Copy {
    /// The bulkhead as the call driver sees it.
    #[doc(hidden)]
    type Part<'a>: stormguard_core::part::BulkheadSlots + Copy
    where
        Self: 'a;
    /// Whether a call may wait for a slot before its first attempt (a compile-time `false`
    /// drops the waiting code).
    #[doc(hidden)]
    const QUEUES: bool;
    /// The part, if there is one.
    #[doc(hidden)]
    fn part(&self) -> Option<Self::Part<'_>>;
    /// Sleeps until `at` (a backoff wait, or a refusal's guarded pause), then, if `slot` (before
    /// an attempt, not after a refusal), waits for a slot (see the module docs); one future, so
    /// a policy without a bulkhead sleeps exactly as before.
    #[doc(hidden)]
    fn pause<X: Future>(
        &self,
        at: Instant,
        slot: bool,
        deadline: Option<Instant>,
        cancel: Pin<&mut X>,
    ) -> impl Future<Output = Slept>;
    /// An attempt ended and freed its slot: wakes the tasks waiting for one.
    #[doc(hidden)]
    fn freed(&self);
}

impl BulkheadStep for NoBulkhead {
    type Part<'a> = Never;
    const QUEUES: bool = false;
    #[inline]
    fn part(&self) -> Option<Never> {
        None
    }
    #[inline]
    fn pause<X: Future>(
        &self,
        at: Instant,
        _: bool,
        _: Option<Instant>,
        cancel: Pin<&mut X>,
    ) -> impl Future<Output = Slept> {
        sleep_until(at, cancel)
    }
    #[inline]
    fn freed(&self) {}
}

impl<M: RawMutex, const W: usize> BulkheadStep for &Bulkhead<M, W> {
    type Part<'a>
        = Locked<'a, Shared<M, stormguard_core::limits::Bulkhead>>
    where
        Self: 'a;
    const QUEUES: bool = true;
    fn part(&self) -> Option<Self::Part<'_>> {
        Some(Bulkhead::part(self))
    }
    async fn pause<X: Future>(
        &self,
        at: Instant,
        slot: bool,
        deadline: Option<Instant>,
        mut cancel: Pin<&mut X>,
    ) -> Slept {
        let slept = sleep_until(at, cancel.as_mut()).await;
        if slept == Slept::Cancelled || !slot {
            return slept;
        }
        Bulkhead::wait_for_slot(self, deadline, cancel).await
    }
    fn freed(&self) {
        self.wake_if_waiting();
    }
}
