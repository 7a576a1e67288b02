//! The stall bound of a stream or a response body, on tokio's timer: [`StallTimer`].

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use stormguard_core::Duration;

/// Bounds how long a reader waits for the next piece of a stream (an element, a body's frame):
/// armed when a read finds nothing ready, disarmed when something comes. So the bound is the
/// time spent waiting on the source, and a caller slow to read is never taken for a stall. The
/// timer is made once, on the first wait, and only reset after that: nothing is allocated per
/// piece.
pub(crate) struct StallTimer {
    bound: Option<Duration>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    armed: bool,
}

impl StallTimer {
    /// A timer for `bound` (`None`: never stalls).
    pub(crate) fn new(bound: Option<Duration>) -> Self {
        StallTimer {
            bound,
            timer: None,
            armed: false,
        }
    }

    /// Something came: the next wait starts the bound over.
    pub(crate) fn progressed(&mut self) {
        self.armed = false;
    }

    /// A read found nothing ready: whether the wait, counted from the first read that found
    /// nothing, has now lasted the bound (registering `cx` to be woken when it will have).
    pub(crate) fn poll_stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(bound) = self.bound else {
            return false;
        };
        if !self.armed {
            // A bound past the end of time is no bound.
            let Some(at) = tokio::time::Instant::now().checked_add(bound.into()) else {
                return false;
            };
            match self.timer.as_mut() {
                Some(timer) => timer.as_mut().reset(at),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
            }
            self.armed = true;
        }
        self.timer
            .as_mut()
            .is_some_and(|timer| timer.as_mut().poll(cx).is_ready())
    }
}
