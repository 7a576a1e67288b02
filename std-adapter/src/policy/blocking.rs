//! Sleeps for the blocking form: `std::thread` sleeps, cancellable by a token through a
//! waker that unparks the sleeping thread.

use super::{CallOptions, Slept};
use stormguard_core::Duration;

#[cfg(feature = "tokio")]
pub(super) fn is_cancelled<C>(options: &CallOptions<'_, C>) -> bool {
    options.cancel.is_some_and(|t| t.is_cancelled())
}

#[cfg(not(feature = "tokio"))]
pub(super) fn is_cancelled<C>(_: &CallOptions<'_, C>) -> bool {
    false
}

#[cfg(feature = "tokio")]
pub(super) fn sleep<C>(d: Duration, options: &CallOptions<'_, C>) -> Slept {
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

    let Some(token) = options.cancel else {
        std::thread::sleep(d.into());
        return Slept::Elapsed;
    };
    let start = std::time::Instant::now();
    let d: std::time::Duration = d.into();
    let mut cancelled = std::pin::pin!(token.cancelled());
    WAKER.with(|waker| {
        let mut cx = Context::from_waker(waker);
        loop {
            if cancelled.as_mut().poll(&mut cx).is_ready() {
                return Slept::Cancelled;
            }
            let Some(left) = d.checked_sub(start.elapsed()).filter(|l| !l.is_zero()) else {
                return Slept::Elapsed;
            };
            std::thread::park_timeout(left);
        }
    })
}

#[cfg(not(feature = "tokio"))]
pub(super) fn sleep<C>(d: Duration, _: &CallOptions<'_, C>) -> Slept {
    std::thread::sleep(d.into());
    Slept::Elapsed
}
