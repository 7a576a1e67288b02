//! Cancellable sleeps on [`embassy_time::Timer`], for the core's backoff waits and the guarded
//! rejection pause.
//!
//! A sleep races its timer against any future the caller passes as the cancellation (an
//! [`embassy_sync::signal::Signal`]'s `wait()`, a button press, a shutdown channel's `receive()`);
//! whichever finishes first ends it. Cancellation is checked first, so a sleep whose cancellation
//! has already happened ends at once, even a zero-length one.

use core::future::{poll_fn, Future};
use core::pin::{pin, Pin};
use core::task::{Context, Poll};

use embassy_futures::select::{select, Either};
use embassy_time::Timer;
use stormguard_core::{Duration, Instant};

use crate::time::{to_core_instant, to_embassy_instant};

/// How a cancellable sleep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use]
pub enum Slept {
    /// The whole time elapsed.
    Elapsed,
    /// The cancellation future finished first: the sleep ended early.
    Cancelled,
}

/// Sleeps until `at` (a core instant, i.e. time since boot), or until `cancel` finishes,
/// whichever comes first. An `at` already past ends at once (unless `cancel` is also ready, which
/// wins).
///
/// ```no_run
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
/// use embassy_sync::signal::Signal;
/// use stormguard_core::Duration;
/// use stormguard_embassy::sleep::{sleep_until, Slept};
/// use stormguard_embassy::EmbassyClock;
///
/// static STOP: Signal<CriticalSectionRawMutex, ()> = Signal::new();
///
/// async fn backoff() {
///     let until = EmbassyClock::new().now() + Duration::from_millis(200);
///     if sleep_until(until, STOP.wait()).await == Slept::Cancelled {
///         // shutting down
///     }
/// }
/// ```
pub async fn sleep_until<X: Future>(at: Instant, cancel: X) -> Slept {
    let at = to_embassy_instant(at);
    if at <= embassy_time::Instant::now() {
        // Already due. embassy's `Timer` yields once even then; a zero pause must not.
        let mut cancel = pin!(cancel);
        return poll_fn(|cx| {
            Poll::Ready(match cancel.as_mut().poll(cx) {
                Poll::Ready(_) => Slept::Cancelled,
                Poll::Pending => Slept::Elapsed,
            })
        })
        .await;
    }
    match select(cancel, Timer::at(at)).await {
        Either::First(_) => Slept::Cancelled,
        Either::Second(()) => Slept::Elapsed,
    }
}

/// Sleeps for `duration` from now (rounded up to whole ticks), or until `cancel` finishes.
///
/// ```no_run
/// use stormguard_core::GUARD_PAUSE;
/// use stormguard_embassy::sleep::{sleep, Never, Slept};
///
/// async fn pause() {
///     // A sleep nothing can cancel: `Never` is a future that never finishes.
///     assert_eq!(sleep(GUARD_PAUSE, Never).await, Slept::Elapsed);
/// }
/// ```
pub async fn sleep<X: Future>(duration: Duration, cancel: X) -> Slept {
    let now = to_core_instant(embassy_time::Instant::now());
    sleep_until(now.saturating_add(duration), cancel).await
}

/// A future that never finishes: the cancellation of a call or sleep that cannot be cancelled
/// (other than by dropping it).
///
/// ```
/// use stormguard_embassy::sleep::Never;
/// use core::future::Future;
/// use core::pin::pin;
/// use core::task::{Context, Poll, Waker};
///
/// let mut never = pin!(Never);
/// let mut cx = Context::from_waker(Waker::noop());
/// assert_eq!(never.as_mut().poll(&mut cx), Poll::Pending);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Never;

impl Future for Never {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}
