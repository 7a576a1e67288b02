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

use core::marker::PhantomData;

use stormguard_core::part::Hearing;
use stormguard_core::Event;

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

/// Whether a policy with listener `L` hears its breaker's events, as the core's locked parts
/// ask it: known when the firmware is built, so an unheard breaker's event code is left out.
pub(crate) struct Ears<L>(PhantomData<fn() -> L>);

impl<L: Listener> Hearing for Ears<L> {
    const HEARD: bool = !unheard::<L>();
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
/// use stormguard_core::Event;
/// let name = stormguard_core::Name::new("i2c");
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
