//! Keeping a subscription established: the core's [`SubscriptionRetry`] schedule (by default
//! 1 s doubling to 120 s, forever, starting over after every success) on embassy's timers.

use core::future::Future;
use core::pin::pin;

use embassy_futures::select::{select, Either};
use embassy_futures::yield_now;
use stormguard_core::policy::SubscriptionRetry;

use crate::sleep::{sleep_until, Slept};
use crate::EmbassyClock;

/// Keeps a subscription established until `cancel` finishes: `connect(attempt)` (1 for the
/// first attempt of a schedule) tries to establish it, as often as `retry` says (a failure waits
/// the schedule's next delay, forever); once it returns `Ok(subscription)`, `serve(subscription)`
/// runs until the subscription drops, and then it is re-established at once, the schedule
/// starting over. Every wait, connection attempt and the serving itself end at once when
/// `cancel` finishes (their futures are dropped); then this returns.
///
/// `retry` is the caller's: it keeps the schedule and says where the subscription stands
/// ([`SubscriptionRetry::status`], [`failures`](SubscriptionRetry::failures)) between runs.
/// Nothing here decides: the schedule is the core's, read from `retry`.
///
/// ```no_run
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
/// use embassy_sync::signal::Signal;
/// use stormguard_core::policy::SubscriptionRetry;
/// use stormguard_embassy::keep_subscribed;
///
/// static SHUTDOWN: Signal<CriticalSectionRawMutex, ()> = Signal::new();
///
/// struct Session;
/// async fn connect_broker(attempt: u32) -> Result<Session, ()> { Ok(Session) }
/// async fn forward_messages(session: Session) { /* returns when the connection drops */ }
///
/// async fn telemetry_task() {
///     let mut retry = SubscriptionRetry::new(); // 1 s, 2 s, 4 s ... 120 s, forever
///     keep_subscribed(
///         &mut retry,
///         async |attempt| connect_broker(attempt).await,
///         async |session| forward_messages(session).await,
///         SHUTDOWN.wait(),
///     )
///     .await;
/// }
/// ```
pub async fn keep_subscribed<S, E, C, V, X>(
    retry: &mut SubscriptionRetry,
    mut connect: C,
    mut serve: V,
    cancel: X,
) where
    C: AsyncFnMut(u32) -> Result<S, E>,
    V: AsyncFnMut(S),
    X: Future,
{
    let clock = EmbassyClock::new();
    let mut cancel = pin!(cancel);
    loop {
        if let Some(at) = retry.next_attempt_at() {
            if sleep_until(at, cancel.as_mut()).await == Slept::Cancelled {
                return;
            }
        }
        let attempt = retry.attempt();
        match select(cancel.as_mut(), connect(attempt)).await {
            Either::First(_) => return,
            Either::Second(Ok(subscription)) => {
                retry.on_connected(clock.now());
                if let Either::First(_) = select(cancel.as_mut(), serve(subscription)).await {
                    return;
                }
                let _ = retry.on_disconnected(clock.now());
                // Reconnecting is due at once (the core's rule); a subscription that connects
                // and drops without ever waiting must still let the executor's other tasks run.
                yield_now().await;
            }
            Either::Second(Err(_)) => {
                let now = clock.now();
                if retry.on_failure(now) <= now {
                    // A zero delay (a valid schedule): the next attempt is due at once, and the
                    // executor's other tasks must still get to run.
                    yield_now().await;
                }
                #[cfg(feature = "defmt")]
                defmt::debug!(
                    "stormguard: subscription attempt {=u32} failed, next in {}",
                    attempt,
                    retry.last_delay()
                );
            }
        }
    }
}
