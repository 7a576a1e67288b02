use stormguard_core::{call::Criticality, Call, Duration, Instant};

use crate::classify::EveryErrorTransient;

#[cfg(feature = "tokio")]
use super::Drain;
#[cfg(feature = "tokio")]
use tokio_util::sync::CancellationToken;

/// What one call may add to its policy: a classifier, a cancellation token, a tighter
/// deadline. Built from [`CallOptions::new`] (every `Err` transient, no token, the policy's
/// deadline) and passed to [`Policy::call_with`] or [`Policy::call_blocking_with`].
///
/// ```
/// use stormguard_std::Outcome;
/// use stormguard_std::CallOptions;
/// use tokio_util::sync::CancellationToken;
///
/// let shutdown = CancellationToken::new();
/// let options = CallOptions::new()
///     .classify(|r: &Result<u16, std::io::Error>| match r {
///         Ok(_) => Outcome::Success,
///         Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Outcome::Permanent,
///         Err(_) => Outcome::Transient,
///     })
///     .cancel_on(&shutdown)
///     .within(std::time::Duration::from_millis(500));
/// # let _ = options;
/// ```
///
/// [`Policy::call_with`]: crate::Policy::call_with
/// [`Policy::call_blocking_with`]: crate::Policy::call_blocking_with
#[derive(Clone, Copy, Debug)]
#[must_use]
pub struct CallOptions<'a, C = EveryErrorTransient> {
    pub(super) classify: C,
    #[cfg(feature = "tokio")]
    pub(super) cancel: Option<&'a CancellationToken>,
    #[cfg(not(feature = "tokio"))]
    pub(super) cancel: Option<std::marker::PhantomData<&'a ()>>,
    #[cfg(feature = "tokio")]
    pub(super) drain: Option<&'a Drain>,
    deadline: Option<Instant>,
    within: Option<Duration>,
    pub(super) single_attempt: bool,
    criticality: Criticality,
}

impl CallOptions<'_> {
    /// Every `Err` transient, no cancellation token (dropping the call's future still cancels
    /// it), the policy's deadline.
    pub const fn new() -> Self {
        CallOptions {
            classify: EveryErrorTransient,
            cancel: None,
            #[cfg(feature = "tokio")]
            drain: None,
            deadline: None,
            within: None,
            single_attempt: false,
            criticality: Criticality::Default,
        }
    }
}

/// [`CallOptions::new`], as a constant `policy.call` can lend.
#[cfg(feature = "tokio")]
pub(super) const DEFAULT_OPTIONS: CallOptions<'static> = CallOptions::new();

impl<C> CallOptions<'_, C> {
    /// Applies these options' deadline and criticality to a call begun at `now`, in place (a
    /// `Call` is some 170 bytes).
    #[inline]
    pub(crate) fn tighten(&self, call: &mut Call, now: Instant) {
        call.set_criticality(self.criticality);
        if let Some(at) = self.deadline {
            call.tighten_deadline(at);
        }
        if let Some(d) = self.within {
            call.tighten_deadline(now.saturating_add(d));
        }
    }
}

impl Default for CallOptions<'_> {
    fn default() -> Self {
        CallOptions::new()
    }
}

impl<'a, C> CallOptions<'a, C> {
    /// Classifies each attempt's result with `classify` (a [`Classify`], e.g. a closure
    /// `|r: &Result<T, E>| -> Outcome`, or [`Http`](crate::Http)).
    ///
    /// ```
    /// use stormguard_std::Outcome;
    /// let o = stormguard_std::CallOptions::new().classify(|_: &Result<(), ()>| Outcome::Success);
    /// # let _ = o;
    /// ```
    ///
    /// [`Classify`]: crate::Classify
    pub fn classify<C2>(self, classify: C2) -> CallOptions<'a, C2> {
        CallOptions {
            classify,
            cancel: self.cancel,
            #[cfg(feature = "tokio")]
            drain: self.drain,
            deadline: self.deadline,
            within: self.within,
            single_attempt: self.single_attempt,
            criticality: self.criticality,
        }
    }

    /// Cancels the call when `token` is cancelled: an attempt in flight is dropped and reported
    /// as [`Outcome::Cancelled`] (never counted against the dependency, never retried), and a
    /// backoff wait or the rejection pause ends at once. The token is checked before every
    /// attempt, so a call whose token is already cancelled runs nothing (no attempt, nothing
    /// told to the breaker). The call returns [`CallError::Cancelled`]. (The token's own API
    /// takes its internal mutex; a call without a token takes no lock.)
    ///
    /// ```
    /// let token = tokio_util::sync::CancellationToken::new();
    /// let o = stormguard_std::CallOptions::new().cancel_on(&token);
    /// # let _ = o;
    /// ```
    ///
    /// [`Outcome::Cancelled`]: crate::Outcome::Cancelled
    /// [`CallError::Cancelled`]: crate::CallError::Cancelled
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn cancel_on(mut self, token: &'a CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Watches `drain` (in place of the policy's own, if it has one): once the drain begins,
    /// the call starts no new attempt or retry, its deadline is clamped to the drain's grace,
    /// an attempt in flight finishes, and a call the drain stopped returns
    /// [`CallError::Drained`] with the last error it had (see [`Drain`]).
    ///
    /// ```
    /// let drain = stormguard_std::Drain::new();
    /// let o = stormguard_std::CallOptions::new().drain_on(&drain);
    /// # let _ = o;
    /// ```
    ///
    /// [`CallError::Drained`]: crate::CallError::Drained
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn drain_on(mut self, drain: &'a Drain) -> Self {
        self.drain = Some(drain);
        self
    }

    /// Ends the call by `at` at the latest (an instant of the policy's clock, e.g. a deadline
    /// propagated from the caller); a later one than the policy's own deadline changes nothing.
    ///
    /// ```
    /// use stormguard_std::Clock;
    /// use stormguard_std::clock::TokioClock;
    /// let at = TokioClock::global().now() + stormguard_std::Duration::from_secs(2);
    /// let o = stormguard_std::CallOptions::new().deadline(at);
    /// # let _ = o;
    /// ```
    pub fn deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(at);
        self
    }

    /// Ends the call within `d` of its start at the latest (a later end than the policy's own
    /// deadline changes nothing).
    ///
    /// ```
    /// let o = stormguard_std::CallOptions::new().within(std::time::Duration::from_millis(250));
    /// # let _ = o;
    /// ```
    pub fn within(mut self, d: impl Into<Duration>) -> Self {
        self.within = Some(d.into());
        self
    }

    /// Labels how much the call matters (default [`Criticality::Default`]): a
    /// [sheddable](Criticality::Sheddable) call is never hedged and gets no retry once the
    /// policy's retry budget is more than half spent (the call then returns the rejection with
    /// reason `shed`, or the dependency's answer); default and critical calls retry as the
    /// budget allows.
    ///
    /// ```
    /// use stormguard_std::{CallOptions, Criticality};
    /// let o = CallOptions::new().criticality(Criticality::Sheddable);
    /// # let _ = o;
    /// ```
    pub fn criticality(mut self, criticality: Criticality) -> Self {
        self.criticality = criticality;
        self
    }

    /// Makes at most one attempt (the operation cannot be repeated safely, e.g. a request that
    /// is not idempotent): the policy's deadline, attempt timeout and breaker still apply.
    ///
    /// ```
    /// let o = stormguard_std::CallOptions::new().single_attempt();
    /// # let _ = o;
    /// ```
    pub fn single_attempt(mut self) -> Self {
        self.single_attempt = true;
        self
    }
}
