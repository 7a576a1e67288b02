//! How an attempt ended, as the caller classifies it.

use crate::time::Duration;

/// How one attempt ended. The caller classifies; the core applies the rules:
///
/// | outcome | counts against the dependency | retried | in the ratios |
/// |---|---|---|---|
/// | [`Success`](Outcome::Success) | no (resets the consecutive count) | no | yes |
/// | [`Transient`](Outcome::Transient) | yes | yes | yes |
/// | [`TimedOut`](Outcome::TimedOut) | yes, and is a slow call | yes | yes |
/// | [`Throttled`](Outcome::Throttled) | no, and does not reset the count | yes, after its hint, charged to the budget | no |
/// | [`Permanent`](Outcome::Permanent) | no, and does not reset the count | never | no |
/// | [`Cancelled`](Outcome::Cancelled) | never | never | no |
///
/// A throttled outcome whose hint is shorter than [`MIN_THROTTLE_HINT`] (HTTP's
/// `Retry-After: 0`, or a date already past) is a transient failure: a dependency that refuses
/// while asking for no wait at all is not pacing its callers, it is down with a polite answer,
/// and counted as throttled it would never trip the breaker (every call retried at once, only
/// the retry budget bounding them). A real hint (`Retry-After: 30`) stays throttled and never
/// trips it. The call driver applies this rule ([`Outcome::effective`]) to every outcome it is
/// given, before the breaker, the budget and the backoff see it; a caller reporting to a breaker
/// by hand passes `outcome.effective()`.
///
/// ```
/// use stormguard_core::{Duration, Outcome};
/// let zero = Outcome::Throttled { retry_after: Some(Duration::ZERO) };
/// assert_eq!(zero.effective(), Outcome::Transient);
/// let paced = Outcome::Throttled { retry_after: Some(Duration::from_secs(30)) };
/// assert_eq!(paced.effective(), paced);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Outcome {
    /// The dependency did its job.
    Success,
    /// A failure of the dependency that may pass: the only kind that counts against it.
    Transient,
    /// The attempt hit its attempt timeout: a transient failure and a slow call, kept out of
    /// the latency baseline.
    TimedOut,
    /// The dependency is up and defending itself (HTTP 429, or 503 with `Retry-After`). Not a
    /// failure; retried after `retry_after` when given, and the retry is charged to the budget.
    Throttled {
        /// How long the dependency asked us to wait, when it said.
        retry_after: Option<Duration>,
    },
    /// A problem on the caller's side (a bad request). Not a failure, never retried.
    Permanent,
    /// The caller gave up (its future was dropped, its token cancelled). Never counted, never
    /// retried.
    Cancelled,
}

/// The shortest throttle hint that reads as the dependency pacing its callers: 1 ms. A shorter
/// one (in practice zero: `Retry-After: 0`, a past `Retry-After` date) asks for no wait at all,
/// so the outcome is a transient failure (see [`Outcome`]).
pub const MIN_THROTTLE_HINT: Duration = Duration::from_millis(1);

impl Outcome {
    /// The outcome the rules apply: [`Outcome::Transient`] for a throttled outcome whose hint is
    /// shorter than [`MIN_THROTTLE_HINT`], the outcome itself otherwise. The call driver applies
    /// it to every outcome before the breaker, budget and backoff see it.
    #[must_use]
    pub const fn effective(self) -> Outcome {
        match self {
            Outcome::Throttled {
                retry_after: Some(hint),
            } if hint.as_nanos() < MIN_THROTTLE_HINT.as_nanos() => Outcome::Transient,
            other => other,
        }
    }

    /// `true` for [`Outcome::Success`] (a tag test, cheaper than `==`, which compares the
    /// payload of [`Outcome::Throttled`] too).
    #[must_use]
    pub const fn is_success(self) -> bool {
        matches!(self, Outcome::Success)
    }

    /// `true` for the outcomes that count against the dependency.
    #[must_use]
    pub const fn is_failure(self) -> bool {
        matches!(self, Outcome::Transient | Outcome::TimedOut)
    }

    /// `true` for the outcomes a retry may follow.
    #[must_use]
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            Outcome::Transient | Outcome::TimedOut | Outcome::Throttled { .. }
        )
    }

    /// `true` for the outcomes that enter the trip window's ratios (success and failures).
    #[must_use]
    pub const fn is_counted(self) -> bool {
        matches!(
            self,
            Outcome::Success | Outcome::Transient | Outcome::TimedOut
        )
    }

    /// A stable, lower-case name for logs, span fields and metrics labels (a throttled
    /// outcome's hint is not part of it).
    ///
    /// ```
    /// use stormguard_core::Outcome;
    /// assert_eq!(Outcome::TimedOut.as_str(), "timed_out");
    /// assert_eq!(Outcome::Throttled { retry_after: None }.as_str(), "throttled");
    /// ```
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Transient => "transient",
            Outcome::TimedOut => "timed_out",
            Outcome::Throttled { .. } => "throttled",
            Outcome::Permanent => "permanent",
            Outcome::Cancelled => "cancelled",
        }
    }
}
