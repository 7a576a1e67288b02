//! Sleeps for the blocking form: `std::thread` sleeps, cancellable by a token through a
//! waker that unparks the sleeping thread.

use super::{CallOptions, Slept};
use stormguard_core::{Call, Duration, Instant};

/// The drain a blocking call watches: the adapter's latch with `tokio` (tokio-util's token
/// behind it), none without.
#[cfg(feature = "tokio")]
pub(super) type DrainRef<'a> = Option<&'a super::Drain>;
/// The drain a blocking call watches: none without `tokio`.
#[cfg(not(feature = "tokio"))]
pub(super) type DrainRef<'a> = Option<&'a std::convert::Infallible>;

/// Tells the core the drain began, if it has.
#[cfg(feature = "tokio")]
pub(super) fn watch_drain(drain: DrainRef<'_>, call: &mut Call, now: Instant) {
    if let Some(drain) = drain.filter(|d| d.is_draining()) {
        call.on_drain(now, drain.grace());
    }
}

/// Tells the core the drain began: never without `tokio`.
#[cfg(not(feature = "tokio"))]
pub(super) fn watch_drain(_: DrainRef<'_>, _: &mut Call, _: Instant) {}

#[cfg(feature = "tokio")]
pub(super) fn is_cancelled<C>(options: &CallOptions<'_, C>) -> bool {
    options.cancel.is_some_and(|t| t.is_cancelled())
}

#[cfg(not(feature = "tokio"))]
pub(super) fn is_cancelled<C>(_: &CallOptions<'_, C>) -> bool {
    false
}

#[cfg(feature = "tokio")]
pub(super) fn sleep<C>(d: Duration, options: &CallOptions<'_, C>, drain: DrainRef<'_>) -> Slept {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Wake, Waker};

    struct Unpark(std::thread::Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }

    thread_local! {
        static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    }

    if options.cancel.is_none() && drain.is_none() {
        std::thread::sleep(d.into());
        return Slept::Elapsed;
    }
    let start = std::time::Instant::now();
    let d: std::time::Duration = d.into();
    let mut cancelled = std::pin::pin!(options.cancel.map(|t| t.cancelled()));
    let mut drained = std::pin::pin!(drain.map(|t| t.token().cancelled()));
    WAKER.with(|waker| {
        let mut cx = Context::from_waker(waker);
        loop {
            if let Some(c) = cancelled.as_mut().as_pin_mut() {
                if c.poll(&mut cx).is_ready() {
                    return Slept::Cancelled;
                }
            }
            if let Some(c) = drained.as_mut().as_pin_mut() {
                if c.poll(&mut cx).is_ready() {
                    return Slept::Drained;
                }
            }
            let Some(left) = d.checked_sub(start.elapsed()).filter(|l| !l.is_zero()) else {
                return Slept::Elapsed;
            };
            std::thread::park_timeout(left);
        }
    })
}

#[cfg(not(feature = "tokio"))]
pub(super) fn sleep<C>(d: Duration, _: &CallOptions<'_, C>, _: DrainRef<'_>) -> Slept {
    std::thread::sleep(d.into());
    Slept::Elapsed
}
