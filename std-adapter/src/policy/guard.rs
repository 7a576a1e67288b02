use stormguard_core::call::Gate;
use stormguard_core::{CallError, Duration, Finished, Instant, Name, Permit};

use crate::events::{Ended, Listener};

/// Gives an attempt's permit back if the call is dropped before the attempt's outcome is
/// reported, so a half-open probe slot (and a bulkhead's or adaptive limiter's slot) never
/// leaks. Small on purpose: it lives in the call's future across every attempt.
pub(crate) struct PermitGuard<'a, P: Gate> {
    parts: &'a P,
    /// The policy's bulkhead, whose waiter a slot given back wakes.
    bulkhead: Option<&'a super::steps::BulkheadShared>,
    permit: Option<Permit>,
}

impl<'a, P: Gate> PermitGuard<'a, P> {
    #[inline]
    pub(crate) fn new<K, L>(policy: &'a super::Policy<K, L>, parts: &'a P, permit: Permit) -> Self {
        PermitGuard {
            parts,
            bulkhead: policy.bulkhead.as_ref().map(|b| &*b.inner),
            permit: Some(permit),
        }
    }

    /// Whether the permit is a half-open probe's.
    #[cfg(feature = "tokio")]
    #[inline]
    pub(crate) fn is_probe(&self) -> bool {
        self.permit.as_ref().is_some_and(Permit::is_probe)
    }

    /// The permit, to report its outcome with: the guard no longer releases it.
    #[inline]
    pub(crate) fn disarm(mut self) -> Option<Permit> {
        let permit = self.permit.take();
        // Nothing is left to give back, and the guard holds only references: skipping its
        // drop keeps the release path out of every successful call.
        core::mem::forget(self);
        permit
    }
}

impl<P: Gate> Drop for PermitGuard<'_, P> {
    #[inline]
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        // Released through the call's parts that admitted it: the breaker's probe slot and the
        // limiters' slots go back, and a caller waiting for the bulkhead is woken.
        self.parts.release(permit);
        if let Some(b) = self.bulkhead {
            b.wake_if_waiting();
        }
    }
}

/// Reports the call to the listener when it ends, however it ends (a dropped call's future
/// reports [`Ended::Cancelled`]).
pub(crate) struct Report<'a, L: Listener> {
    listener: &'a L,
    name: &'a Name,
    pub(crate) attempts: u32,
    pub(crate) ended: Ended,
    /// When the call began, moved back by each rejection pause it served (a pause is served
    /// without a clock reading after it).
    start: Instant,
    /// The call's span ([`call_span`](crate::events::call_span)), told the same at the end.
    span: crate::events::CallSpan,
}

impl<'a, L: Listener> Report<'a, L> {
    #[inline]
    pub(crate) fn new(
        listener: &'a L,
        name: &'a Name,
        span: crate::events::CallSpan,
        start: Instant,
    ) -> Self {
        Report {
            listener,
            name,
            attempts: 0,
            ended: Ended::Cancelled,
            start,
            span,
        }
    }

    /// The call served a rejection's `pause`: it counts in the call's duration.
    #[inline]
    pub(crate) fn served(&mut self, pause: Duration) {
        self.start = self.start.saturating_sub(pause);
    }

    /// The call waited for a bulkhead slot from `from` to `to`, and `entered` it or not.
    #[cfg(feature = "tokio")]
    #[inline]
    pub(crate) fn slot_wait(&self, from: Instant, to: Instant, entered: bool) {
        self.listener
            .on_slot_wait(self.name, to.saturating_duration_since(from), entered);
    }

    #[inline]
    pub(crate) fn attempt(&mut self, attempt: u32) {
        self.attempts = attempt;
        self.listener.on_attempt(self.name, attempt);
    }

    /// Records how the call `finished` (the core's word: a 500 handed back as the response
    /// is a failed call, whatever the caller's `Result` holds) and hands `result` on. `now` is
    /// the call's last clock reading; a cancelled call reports no duration.
    #[inline]
    pub(crate) fn end<T, E>(
        mut self,
        finished: Finished,
        result: Result<T, CallError<E>>,
        now: Instant,
    ) -> Result<T, CallError<E>> {
        self.ended = Ended::from(finished);
        if self.ended != Ended::Cancelled {
            let took = now.saturating_duration_since(self.start);
            self.listener.on_call_duration(self.name, self.ended, took);
        }
        result
    }
}

impl<L: Listener> Drop for Report<'_, L> {
    #[inline]
    fn drop(&mut self) {
        self.listener.on_call(self.name, self.attempts, self.ended);
        crate::events::record_end(&self.span, self.attempts, self.ended);
    }
}

/// How a call ended, for the success cache: how the core finished it, and, when its value
/// came back from a successful attempt, the instant that attempt ended; and where to keep the
/// call's attempt log, when the caller asked for one.
#[cfg(feature = "tokio")]
#[derive(Debug, Default)]
pub(crate) struct CallEnd<'l> {
    pub(crate) finished: Option<Finished>,
    pub(crate) succeeded_at: Option<Instant>,
    pub(crate) log: Option<&'l mut stormguard_core::call::AttemptLog>,
}

#[cfg(feature = "tokio")]
impl<'l> CallEnd<'l> {
    /// Nothing known yet; the call's events go into `log`, if given one.
    pub(crate) fn logging_into(log: Option<&'l mut stormguard_core::call::AttemptLog>) -> Self {
        CallEnd {
            log,
            ..CallEnd::default()
        }
    }
}

/// What an attempt knows when it starts.
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt {
    /// 1 for the first attempt.
    pub(crate) number: u32,
    /// The time left until the call's deadline, at the attempt's start.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) call_left: Option<Duration>,
}

/// How a cancellable sleep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slept {
    Elapsed,
    Cancelled,
    /// A drain began during the sleep.
    #[cfg(feature = "tokio")]
    Drained,
}
