//! The drain latch of the embassy adapter: a flag, `static`-able, that tells the core's call
//! driver the device is shutting down ([`Call::on_drain`](stormguard_core::Call::on_drain)
//! decides what that means).

use core::sync::atomic::{AtomicBool, Ordering};

use stormguard_core::{call::HedgedPair, call::DRAIN_GRACE, Call, Duration, Instant};

/// A drain latch for a graceful shutdown (a power-down, an update about to reboot): once
/// [begun](Drain::begin), a call that watches it ([`CallOptions::drain_on`]) starts no new
/// attempt or retry, its deadline is clamped to the [grace](Drain::grace), and a call it
/// stopped returns [`CallError::Drained`](crate::CallError::Drained) with the last error it
/// had. A plain atomic flag (a load and a store, on every target): the latch is read before
/// every step of the call, so a backoff wait or an attempt already under way runs to its end
/// first; to cut those short as well, pass the same shutdown as the call's cancellation.
///
/// ```
/// use stormguard_embassy::Drain;
///
/// static DRAIN: Drain = Drain::new();
/// assert!(!DRAIN.is_draining());
/// DRAIN.begin(); // e.g. from the power-fail interrupt's task
/// assert!(DRAIN.is_draining());
/// ```
///
/// [`CallOptions::drain_on`]: crate::CallOptions::drain_on
#[derive(Debug)]
pub struct Drain {
    begun: AtomicBool,
    grace: Duration,
}

impl Drain {
    /// A latch not yet begun, with the default grace
    /// ([`DRAIN_GRACE`](stormguard_core::call::DRAIN_GRACE), 30 s).
    #[must_use]
    pub const fn new() -> Drain {
        Drain::with_grace(DRAIN_GRACE)
    }

    /// A latch not yet begun whose calls keep `grace` once it begins.
    #[must_use]
    pub const fn with_grace(grace: Duration) -> Drain {
        Drain {
            begun: AtomicBool::new(false),
            grace,
        }
    }

    /// Begins the drain. Beginning it again changes nothing.
    pub fn begin(&self) {
        self.begun.store(true, Ordering::Release);
    }

    /// Whether the drain has begun.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.begun.load(Ordering::Acquire)
    }

    /// The grace calls in progress keep once the drain begins.
    #[must_use]
    pub const fn grace(&self) -> Duration {
        self.grace
    }

    /// Tells `call` the drain began, at `now`, if it has.
    pub(crate) fn watch(&self, call: &mut Call, now: Instant) {
        if self.is_draining() {
            call.on_drain(now, self.grace);
        }
    }

    /// Tells a hedged `pair` and its `call` the drain began, at `now`, if it has and they do
    /// not know yet: `true` when they learned it now (the pair's timer must be re-armed).
    pub(crate) fn watch_pair(&self, pair: &mut HedgedPair, call: &mut Call, now: Instant) -> bool {
        let news = self.is_draining() && !call.is_draining();
        if news {
            pair.on_drain(call, now, self.grace);
        }
        news
    }
}

impl Default for Drain {
    fn default() -> Self {
        Drain::new()
    }
}
