//! What a guarded call hands its caller when it does not return the operation's value: the
//! core's [`Finished`] joined to the operation's own last result. One type and one rule for
//! every adapter, so a call ends the same way on tokio and on embassy.

use core::fmt;

use crate::call::{Finished, Rejection};
use crate::outcome::Outcome;
use crate::time::Duration;

/// Why a guarded call did not return the operation's value. Says exactly what happened.
///
/// ```
/// use stormguard_core::CallError;
///
/// fn describe(e: &CallError<&str>) -> String {
///     match e {
///         CallError::Failed(cause) => format!("the dependency said: {cause}"),
///         CallError::TimedOut { .. } => "the last attempt timed out".into(),
///         CallError::Rejected { rejection, .. } => {
///             format!("not called ({}); try again in {}", rejection.reason, rejection.retry_after)
///         }
///         CallError::DeadlineExceeded { .. } => "out of time".into(),
///         CallError::Cancelled => "cancelled".into(),
///         _ => "something else".into(),
///     }
/// }
/// assert_eq!(describe(&CallError::Cancelled), "cancelled");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError<E> {
    /// The operation's own error stands: the attempts ran out, or it was not retryable.
    Failed(E),
    /// The last attempt was cut off at its attempt timeout, and no retry was left.
    TimedOut {
        /// The error of an earlier attempt, if one returned an error.
        last: Option<E>,
    },
    /// Refused locally (breaker open, half-open full, ramp shedding, isolated, budget empty,
    /// rate limited, bulkhead full), reported after the guarded pause.
    Rejected {
        /// Why, when to ask again (`retry_after`, counted from the end of the pause), the pause
        /// served, and the attempts made.
        rejection: Rejection,
        /// The error of the last attempt, when a retry was refused after a failure.
        last: Option<E>,
    },
    /// The deadline passed, or a retry could not have finished before it.
    DeadlineExceeded {
        /// The error of the last attempt, if one returned an error.
        last: Option<E>,
    },
    /// The caller cancelled: the adapter's cancellation signal fired, or the call's future was
    /// dropped.
    Cancelled,
    /// A drain began (the service is shutting down) and stopped the call before another
    /// attempt or retry: see [`Call::on_drain`](crate::Call::on_drain).
    Drained {
        /// The error of the last attempt, if one returned an error.
        last: Option<E>,
    },
}

impl<E> CallError<E> {
    /// When asking again may succeed, for a rejection, counted from the moment the error was
    /// handed over (after the pause). [`Duration::MAX`] when only an operator's reset will help
    /// (an isolated breaker).
    ///
    /// ```
    /// let e: stormguard_core::CallError<()> = stormguard_core::CallError::Cancelled;
    /// assert_eq!(e.retry_after(), None);
    /// ```
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.rejection().map(|r| r.retry_after)
    }

    /// The rejection, if the call was refused.
    ///
    /// ```
    /// let e: stormguard_core::CallError<()> = stormguard_core::CallError::Failed(());
    /// assert!(e.rejection().is_none());
    /// ```
    #[must_use]
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            CallError::Rejected { rejection, .. } => Some(rejection),
            _ => None,
        }
    }

    /// The operation's last error, whatever ended the call.
    ///
    /// ```
    /// let e = stormguard_core::CallError::DeadlineExceeded { last: Some("reset") };
    /// assert_eq!(e.last_error(), Some(&"reset"));
    /// ```
    #[must_use]
    pub fn last_error(&self) -> Option<&E> {
        match self {
            CallError::Failed(e) => Some(e),
            CallError::TimedOut { last }
            | CallError::Rejected { last, .. }
            | CallError::DeadlineExceeded { last }
            | CallError::Drained { last } => last.as_ref(),
            CallError::Cancelled => None,
        }
    }
}

impl Finished {
    /// The caller's result: how the core says the call finished, joined to the last attempt's
    /// own result (`None` if no attempt returned).
    ///
    /// The classifier decides what counts as success, so an `Err` it called a success (a
    /// healthy "no data" answer) comes back as the operation's error, and an `Ok` it called a
    /// failure (an HTTP 503 response) comes back as the value once no retry is left: the
    /// attempts ran out, or the deadline left no time for another.
    ///
    /// ```
    /// use stormguard_core::{CallError, Finished, Outcome};
    ///
    /// let done: Result<u32, CallError<&str>> = Finished::Succeeded.into_result(Some(Ok(7)));
    /// assert_eq!(done, Ok(7));
    /// let failed = Finished::Failed(Outcome::Transient).into_result(Some(Err::<u32, _>("reset")));
    /// assert_eq!(failed, Err(CallError::Failed("reset")));
    /// // A throttled answer whose hint outlasted the deadline: the answer itself.
    /// let throttled = Some(Outcome::Throttled { retry_after: None });
    /// let out_of_time = Finished::DeadlineExceeded { last: throttled };
    /// assert_eq!(out_of_time.into_result(Some(Ok::<u32, &str>(429))), Ok(429));
    /// ```
    pub fn into_result<T, E>(self, last: Option<Result<T, E>>) -> Result<T, CallError<E>> {
        let last_error = |last: Option<Result<T, E>>| last.and_then(Result::err);
        match self {
            Finished::Failed(Outcome::TimedOut) => Err(CallError::TimedOut {
                last: last_error(last),
            }),
            Finished::Succeeded | Finished::Failed(_) => match last {
                Some(Ok(value)) => Ok(value),
                Some(Err(e)) => Err(CallError::Failed(e)),
                // The core finishes a call as succeeded or failed only after an attempt
                // returned; without one, nothing ran to completion.
                None => Err(CallError::Cancelled),
            },
            // The last attempt's answer was the last word, and no retry fitted before the
            // deadline: an `Ok` the classifier called a failure (a 429 whose Retry-After
            // outlasts the deadline) comes back as the value, as when the attempts run out.
            Finished::DeadlineExceeded { last: outcome } => match (outcome, last) {
                (
                    Some(Outcome::Transient | Outcome::Throttled { .. } | Outcome::Permanent),
                    Some(Ok(value)),
                ) => Ok(value),
                (_, last) => Err(CallError::DeadlineExceeded {
                    last: last_error(last),
                }),
            },
            // As for the deadline: an answer the classifier called a failure (an HTTP 503) is
            // the last word, and comes back as the value.
            Finished::Drained { last: outcome } => match (outcome, last) {
                (
                    Some(Outcome::Transient | Outcome::Throttled { .. } | Outcome::Permanent),
                    Some(Ok(value)),
                ) => Ok(value),
                (_, last) => Err(CallError::Drained {
                    last: last_error(last),
                }),
            },
            Finished::Rejected(rejection) => Err(CallError::Rejected {
                rejection,
                last: last_error(last),
            }),
            Finished::Cancelled => Err(CallError::Cancelled),
        }
    }

    /// How a stream the core ended ([`Lost::End`](crate::call::Lost::End)) ends for its
    /// caller, given the error of the element that lost it, if one did: `Ok` when it simply
    /// ended, else the error the caller reads last. As for a call, an error the classifier
    /// called a success still reaches the caller.
    ///
    /// ```
    /// use stormguard_core::{CallError, Finished, Outcome};
    ///
    /// assert_eq!(Finished::Succeeded.into_stream_end::<&str>(None), Ok(()));
    /// assert_eq!(Finished::Succeeded.into_stream_end(Some("gone")), Err(CallError::Failed("gone")));
    /// let stalled = Finished::Failed(Outcome::TimedOut).into_stream_end::<&str>(None);
    /// assert_eq!(stalled, Err(CallError::TimedOut { last: None }));
    /// ```
    pub fn into_stream_end<E>(self, error: Option<E>) -> Result<(), CallError<E>> {
        match (self, error) {
            (Finished::Succeeded, None) => Ok(()),
            (finished, error) => finished.into_result(error.map(Err)),
        }
    }
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Failed(e) => write!(f, "call failed: {e}"),
            CallError::TimedOut { .. } => f.write_str("call failed: the attempt timed out"),
            CallError::Rejected { rejection, .. } => write!(f, "{rejection}"),
            CallError::DeadlineExceeded { .. } => f.write_str("call deadline exceeded"),
            CallError::Cancelled => f.write_str("call cancelled"),
            CallError::Drained { .. } => f.write_str("call stopped: draining"),
        }
    }
}

/// The operation's error is the source: an error chain built from a `CallError` keeps what the
/// dependency said ("connection refused") below what the call did ("call deadline exceeded").
///
/// ```
/// use core::error::Error;
/// use core::fmt;
///
/// #[derive(Debug)]
/// struct Refused;
/// impl fmt::Display for Refused {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         f.write_str("connection refused")
///     }
/// }
/// impl Error for Refused {}
///
/// let e = stormguard_core::CallError::DeadlineExceeded { last: Some(Refused) };
/// assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("connection refused"));
/// ```
impl<E: core::error::Error + 'static> core::error::Error for CallError<E> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        self.last_error()
            .map(|e| e as &(dyn core::error::Error + 'static))
    }
}

#[cfg(feature = "defmt")]
impl<E: defmt::Format> defmt::Format for CallError<E> {
    fn format(&self, f: defmt::Formatter<'_>) {
        match self {
            CallError::Failed(e) => defmt::write!(f, "call failed: {}", e),
            CallError::TimedOut { last } => {
                defmt::write!(f, "call failed: attempt timed out (last {})", last)
            }
            CallError::Rejected { rejection, last } => {
                defmt::write!(f, "call rejected: {} (last {})", rejection, last)
            }
            CallError::DeadlineExceeded { last } => {
                defmt::write!(f, "call deadline exceeded (last {})", last)
            }
            CallError::Cancelled => defmt::write!(f, "call cancelled"),
            CallError::Drained { last } => {
                defmt::write!(f, "call stopped: draining (last {})", last)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::RefusalReason;

    const REJECTION: Rejection = Rejection {
        reason: RefusalReason::BudgetExhausted,
        retry_after: Duration::from_secs(2),
        pause: Duration::from_millis(100),
        last: Some(Outcome::Transient),
        attempts: 1,
    };

    #[test]
    fn every_ending_keeps_the_last_error_it_can() {
        let err = |e: &'static str| Some(Err::<u32, _>(e));
        assert_eq!(
            Finished::Failed(Outcome::TimedOut).into_result(err("slow")),
            Err(CallError::TimedOut { last: Some("slow") })
        );
        assert_eq!(
            Finished::DeadlineExceeded { last: None }.into_result(None::<Result<u32, &str>>),
            Err(CallError::DeadlineExceeded { last: None })
        );
        let rejected = Finished::Rejected(REJECTION).into_result(err("down"));
        assert_eq!(
            rejected,
            Err(CallError::Rejected {
                rejection: REJECTION,
                last: Some("down")
            })
        );
        let rejected = rejected.unwrap_err();
        assert_eq!(rejected.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(rejected.last_error(), Some(&"down"));
        assert_eq!(
            Finished::Cancelled.into_result(Some(Ok::<u32, &str>(1))),
            Err(CallError::Cancelled)
        );
    }

    #[test]
    fn the_classifier_decides_success_not_the_result_type() {
        // An `Err` classified a success is still the operation's error for the caller.
        assert_eq!(
            Finished::Succeeded.into_result(Some(Err::<u32, _>("no rows"))),
            Err(CallError::Failed("no rows"))
        );
        // An `Ok` classified a failure comes back as the value once no retry is left.
        assert_eq!(
            Finished::Failed(Outcome::Transient).into_result(Some(Ok::<u32, &str>(3))),
            Ok(3)
        );
        // Succeeded with no attempt returned cannot come from the driver; it reads cancelled.
        assert_eq!(
            Finished::Succeeded.into_result(None::<Result<u32, &str>>),
            Err(CallError::Cancelled)
        );
    }
}
