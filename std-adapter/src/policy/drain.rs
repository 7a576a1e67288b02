//! The drain latch: the std adapter's way of telling the core's call driver that the service is
//! shutting down ([`Call::on_drain`](stormguard_core::Call::on_drain) decides what that means).

use stormguard_core::{call::DRAIN_GRACE, Duration};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// A drain latch for a graceful shutdown: once [`begun`](Drain::begin), calls that watch it
/// start no new attempt or retry, their deadlines are clamped to the [grace](Drain::grace)
/// (30 s by default), attempts already in flight finish, and a call stopped by the drain
/// returns [`CallError::Drained`](crate::CallError::Drained) with the last error it had. A
/// call begun after the drain refuses at once, running nothing.
///
/// Cheap to clone (clones share one latch). Give it to a policy
/// ([`PolicyBuilder::drain`](crate::PolicyBuilder::drain)) so every call of the policy, and of
/// a tower layer built on it, watches it; or to one call ([`CallOptions::drain_on`]). A
/// service that already stops on a [`CancellationToken`] builds it from that token
/// ([`Drain::from_token`]): cancelling the token begins the drain.
///
/// ```
/// use stormguard_std::{CallError, Drain, Policy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), stormguard_std::SettingsError> {
/// let drain = Drain::new().with_grace(std::time::Duration::from_secs(10));
/// let policy = Policy::builder("inventory").drain(drain.clone()).build()?;
/// assert_eq!(policy.call(|_| async { Ok::<_, ()>(1) }).await, Ok(1));
///
/// drain.begin(); // e.g. on SIGTERM
/// let r = policy.call(|_| async { Ok::<_, ()>(2) }).await;
/// assert_eq!(r, Err(CallError::Drained { last: None })); // nothing new starts
/// # Ok(()) }
/// ```
///
/// [`CallOptions::drain_on`]: crate::CallOptions::drain_on
#[derive(Clone, Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub struct Drain {
    token: CancellationToken,
    grace: Duration,
}

impl Drain {
    /// A latch not yet begun, with the default grace
    /// ([`DRAIN_GRACE`](stormguard_core::call::DRAIN_GRACE), 30 s).
    #[must_use]
    pub fn new() -> Drain {
        Drain::from_token(CancellationToken::new())
    }

    /// A latch that begins when `token` is cancelled (a service's shutdown token, or a child
    /// of it), with the default grace. [`Drain::begin`] cancels `token`.
    ///
    /// ```
    /// use tokio_util::sync::CancellationToken;
    /// let shutdown = CancellationToken::new();
    /// let drain = stormguard_std::Drain::from_token(shutdown.child_token());
    /// shutdown.cancel();
    /// assert!(drain.is_draining());
    /// ```
    #[must_use]
    pub fn from_token(token: CancellationToken) -> Drain {
        Drain {
            token,
            grace: DRAIN_GRACE,
        }
    }

    /// The time calls in progress keep once the drain begins: their deadline is clamped to the
    /// drain's start (as each call sees it) plus `grace`; a tighter deadline stands.
    ///
    /// ```
    /// let d = stormguard_std::Drain::new().with_grace(std::time::Duration::from_secs(5));
    /// assert_eq!(d.grace(), stormguard_std::Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn with_grace(mut self, grace: impl Into<Duration>) -> Drain {
        self.grace = grace.into();
        self
    }

    /// Begins the drain, for every clone. Beginning it again changes nothing.
    pub fn begin(&self) {
        self.token.cancel();
    }

    /// Whether the drain has begun.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The grace calls in progress keep once the drain begins.
    #[must_use]
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// The token behind the latch (cancelled once the drain begins).
    #[must_use]
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Completes when the drain begins.
    pub(crate) fn begun(&self) -> WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }
}

impl Default for Drain {
    fn default() -> Self {
        Drain::new()
    }
}
