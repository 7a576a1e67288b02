//! Events: to `defmt` (feature `defmt`) and to a [`Listener`], with no allocation.
//!
//! The core hands every event to a sink; this crate forwards each one to `defmt` (state changes to
//! `Open` or `Isolated` at `warn`, other state changes at `info`, each attempt's end at `trace`,
//! everything else at `debug`) and then to the policy's listener.
//!
//! Events are never delivered while a breaker's lock is held: a transition's events are kept in a
//! small fixed buffer (a transition makes at most five), each named again with
//! [`Event::with_name`] as it is kept (the core's events borrow the name inside the breaker,
//! which the lock guards; the copy kept borrows the name the handle holds outside it), and handed
//! out once the lock is released, so a listener may read the breaker that produced them, and a
//! slow listener never lengthens a critical section.
//!
//! A policy with nobody to tell ([`NoListener`], see [`Listener::IGNORES_EVENTS`], and no
//! `defmt`) has its breaker make no event at all: the firmware then carries neither the buffer
//! nor the code that builds the events.

use stormguard_core::{Event, Name};

/// Receives every event a [`Policy`](crate::Policy) (its breaker, its budget, its calls)
/// produces. Implemented by [`NoListener`] and by every `Fn(&Event<'_>)`, so a plain function
/// works (and can live in a `static` policy as a `fn` pointer).
///
/// A listener runs in the calling task, outside any lock: keep it short (count, copy into a
/// channel with `try_send`, signal), and never `.await` in it (it is not async).
///
/// ```
/// use core::sync::atomic::{AtomicU32, Ordering};
/// use stormguard_core::{Event, State};
/// use stormguard_embassy::Listener;
///
/// static OPENED: AtomicU32 = AtomicU32::new(0);
///
/// fn count_opens(event: &Event<'_>) {
///     if let Event::StateChanged { to: State::Open, .. } = event {
///         OPENED.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// let listener: fn(&Event<'_>) = count_opens;
/// let name = stormguard_core::Name::new("i2c");
/// listener.on_event(&Event::ProbeStarted { name: &name });
/// assert_eq!(OPENED.load(Ordering::Relaxed), 0);
/// ```
pub trait Listener {
    /// Called once per event, in order, after the lock that produced it is released.
    fn on_event(&self, event: &Event<'_>);

    /// `true` for a listener that ignores every event ([`NoListener`]): without the `defmt`
    /// feature, a policy with such a listener has nobody to tell, so its breaker's events are
    /// dropped where the core makes them, and the code that makes them is left out of the
    /// firmware. Leave it `false` (the default) in a listener that looks at events.
    const IGNORES_EVENTS: bool = false;
}

/// Whether the events of a policy with listener `L` go nowhere: `L` ignores them and `defmt` is
/// off.
pub(crate) const fn unheard<L: Listener>() -> bool {
    L::IGNORES_EVENTS && !cfg!(feature = "defmt")
}

/// The listener that does nothing (events still go to `defmt` with the `defmt` feature).
///
/// ```
/// use stormguard_embassy::{Listener, NoListener};
/// let name = stormguard_core::Name::new("i2c");
/// NoListener.on_event(&stormguard_core::Event::ProbeStarted { name: &name });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NoListener;

impl Listener for NoListener {
    fn on_event(&self, _: &Event<'_>) {}
    const IGNORES_EVENTS: bool = true;
}

impl<F: Fn(&Event<'_>)> Listener for F {
    fn on_event(&self, event: &Event<'_>) {
        self(event);
    }
}

/// Logs `event` with `defmt`: state changes to `Open` or `Isolated` at `warn`, other state changes
/// at `info`, each attempt's end at `trace`, everything else at `debug`. Without the `defmt`
/// feature it does nothing.
///
/// ```
/// use stormguard_core::{Event, Name};
/// let name = Name::new("i2c");
/// stormguard_embassy::events::log(&Event::ProbeStarted { name: &name });
/// ```
pub fn log(event: &Event<'_>) {
    #[cfg(feature = "defmt")]
    match event {
        Event::StateChanged {
            to: stormguard_core::State::Open | stormguard_core::State::Isolated,
            ..
        } => defmt::warn!("stormguard: {}", event),
        Event::StateChanged { .. } => defmt::info!("stormguard: {}", event),
        // One per attempt, successes included.
        Event::Attempt { .. } => defmt::trace!("stormguard: {}", event),
        _ => defmt::debug!("stormguard: {}", event),
    }
    #[cfg(not(feature = "defmt"))]
    let _ = event;
}

/// Room for one transition's events: the core emits at most five per transition (probes
/// reclaimed, two state changes, a probe started, a ramp step).
const HELD: usize = 8;

/// Events kept while a lock is held, delivered after it is released. Each is named, as it is
/// kept, with the name the holder keeps outside the lock (the events the core makes borrow the
/// name inside it).
#[derive(Debug)]
pub(crate) struct Held<'n> {
    name: &'n Name,
    events: heapless::Vec<Event<'n>, HELD>,
}

impl<'n> Held<'n> {
    /// Keeps events named `name`.
    pub(crate) const fn new(name: &'n Name) -> Held<'n> {
        Held {
            name,
            events: heapless::Vec::new(),
        }
    }

    /// Keeps `event` for later; one that cannot be kept (a full buffer, which the current core
    /// never fills) goes to `direct` at once rather than being dropped.
    pub(crate) fn keep(&mut self, event: Event<'_>, direct: &mut dyn FnMut(Event<'_>)) {
        if self.events.push(event.with_name(self.name)).is_err() {
            direct(event);
        }
    }

    /// Hands the kept events to `sink`, in order. (By reference: moving the buffer, some 260
    /// bytes, would cost a `memcpy` on every call.)
    pub(crate) fn deliver(&self, sink: &mut dyn FnMut(Event<'_>)) {
        for e in &self.events {
            sink(*e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::{Duration, Outcome, Ratio, RefusalReason, State, TripReason};

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
    fn only_a_listener_that_ignores_events_without_defmt_leaves_them_unmade() {
        assert_eq!(unheard::<NoListener>(), !cfg!(feature = "defmt"));
        assert!(!unheard::<fn(&Event<'_>)>());
        let counting = |_: &Event<'_>| {};
        fn of<L: Listener>(_: &L) -> bool {
            unheard::<L>()
        }
        assert!(!of(&counting), "a closure listens unless it says otherwise");
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
