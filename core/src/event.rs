//! Events: what happened, handed to a caller-supplied sink. The core allocates nothing and drops
//! nothing; the adapters forward events to `tracing`, `defmt` and listeners.

use core::fmt;

use crate::error::RefusalReason;
use crate::name::Name;
use crate::outcome::Outcome;
use crate::ratio::Ratio;
use crate::state::{State, TripReason};
use crate::time::Duration;

/// Something a breaker, budget or call did. Every event carries the name of what produced it,
/// which is what tells five breakers apart in logs, telemetry and the health endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Event<'a> {
    /// The breaker changed state.
    StateChanged {
        /// The breaker's name.
        name: &'a Name,
        /// The state before.
        from: State,
        /// The state after.
        to: State,
        /// Why it opened (for a change to `Open`).
        reason: Option<TripReason>,
        /// The jittered break it opened for (for a change to `Open`).
        break_for: Option<Duration>,
    },
    /// A half-open probe was admitted.
    ProbeStarted {
        /// The breaker's name.
        name: &'a Name,
    },
    /// Probes that never reported were reclaimed, freeing their slots.
    ProbesReclaimed {
        /// The breaker's name.
        name: &'a Name,
        /// How many.
        count: u8,
    },
    /// The recovery ramp's admitted fraction moved (a ramp started, a slow call halved it, or a
    /// run of fast calls raised its cap).
    RampStep {
        /// The breaker's name.
        name: &'a Name,
        /// The admitted fraction now.
        fraction: Ratio,
        /// The evidence cap now.
        cap: Ratio,
    },
    /// A call was refused; `delay` is the guarded pause about to be served before the refusal
    /// is reported (announced before it is served).
    Rejected {
        /// The name of the breaker guarding the call, whoever refused it (a budget, a limiter).
        name: &'a Name,
        /// Why.
        reason: RefusalReason,
        /// The pause about to be served.
        delay: Duration,
        /// When asking again may succeed, counted from the end of the pause.
        retry_after: Duration,
    },
    /// A retry was scheduled after `delay`.
    Retry {
        /// The name of the breaker guarding the call (or the policy's).
        name: &'a Name,
        /// The attempt about to be made (2 for the first retry).
        attempt: u32,
        /// The wait before it.
        delay: Duration,
        /// The outcome that caused the retry.
        after: Outcome,
    },
    /// An attempt of a call ended: it ran (its outcome, how long it took, whether the
    /// dependency answered, whether it was a hedge), or a local part refused it before it
    /// started. A call's [`AttemptLog`](crate::call::AttemptLog) is made of these.
    Attempt {
        /// The name of the breaker guarding the call (or the policy's).
        name: &'a Name,
        /// The attempt's number: 1 for the first.
        attempt: u32,
        /// How it ended.
        end: AttemptEnd,
    },
    /// A hedged attempt was launched beside a slow one.
    Hedged {
        /// The name of the breaker guarding the call (or the policy's).
        name: &'a Name,
        /// The attempt launched (2 when the first attempt is hedged).
        attempt: u32,
    },
    /// A request arrived that is itself a caller's retry (its attempt number travelled with
    /// it): retries stacked on retries multiply a failing dependency's load layer by layer.
    NestedRetry {
        /// The name of what received it (the server's).
        name: &'a Name,
        /// The caller's attempt number (2 for its first retry).
        attempt: u32,
    },
    /// A drain stopped a call: it would have started an attempt or a retry.
    Drained {
        /// The name of the breaker guarding the call (or the policy's).
        name: &'a Name,
        /// The attempts the call made.
        attempts: u32,
        /// The last attempt's outcome, if any attempt ran.
        last: Option<Outcome>,
    },
    /// A stream lost mid-way restarts from its checkpoint after `delay` (see
    /// [`StreamRestarts`](crate::call::StreamRestarts)).
    Restarted {
        /// The name of the breaker guarding the call (or the policy's).
        name: &'a Name,
        /// The restart about to be made (1 for the first).
        restart: u32,
        /// The wait before it.
        delay: Duration,
        /// The failure that lost the stream.
        after: Outcome,
    },
}

impl Event<'_> {
    /// The name carried by the event.
    #[must_use]
    pub fn name(&self) -> &Name {
        match self {
            Event::StateChanged { name, .. }
            | Event::ProbeStarted { name }
            | Event::ProbesReclaimed { name, .. }
            | Event::RampStep { name, .. }
            | Event::Rejected { name, .. }
            | Event::Retry { name, .. }
            | Event::Attempt { name, .. }
            | Event::Hedged { name, .. }
            | Event::NestedRetry { name, .. }
            | Event::Drained { name, .. }
            | Event::Restarted { name, .. } => name,
        }
    }

    /// The same event carrying another borrow of the name (for an adapter that copies the name
    /// out of a lock and delivers the event after unlocking).
    #[must_use]
    pub fn with_name<'b>(&self, name: &'b Name) -> Event<'b> {
        match *self {
            Event::StateChanged {
                from,
                to,
                reason,
                break_for,
                ..
            } => Event::StateChanged {
                name,
                from,
                to,
                reason,
                break_for,
            },
            Event::ProbeStarted { .. } => Event::ProbeStarted { name },
            Event::ProbesReclaimed { count, .. } => Event::ProbesReclaimed { name, count },
            Event::RampStep { fraction, cap, .. } => Event::RampStep {
                name,
                fraction,
                cap,
            },
            Event::Rejected {
                reason,
                delay,
                retry_after,
                ..
            } => Event::Rejected {
                name,
                reason,
                delay,
                retry_after,
            },
            Event::Retry {
                attempt,
                delay,
                after,
                ..
            } => Event::Retry {
                name,
                attempt,
                delay,
                after,
            },
            Event::Attempt { attempt, end, .. } => Event::Attempt { name, attempt, end },
            Event::Hedged { attempt, .. } => Event::Hedged { name, attempt },
            Event::NestedRetry { attempt, .. } => Event::NestedRetry { name, attempt },
            Event::Drained { attempts, last, .. } => Event::Drained {
                name,
                attempts,
                last,
            },
            Event::Restarted {
                restart,
                delay,
                after,
                ..
            } => Event::Restarted {
                name,
                restart,
                delay,
                after,
            },
        }
    }

    /// A stable, lower-case name of the event kind.
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Event::StateChanged { .. } => "state_changed",
            Event::ProbeStarted { .. } => "probe_started",
            Event::ProbesReclaimed { .. } => "probes_reclaimed",
            Event::RampStep { .. } => "ramp_step",
            Event::Rejected { .. } => "rejected",
            Event::Retry { .. } => "retry",
            Event::Attempt { .. } => "attempt",
            Event::Hedged { .. } => "hedged",
            Event::NestedRetry { .. } => "nested_retry",
            Event::Drained { .. } => "drained",
            Event::Restarted { .. } => "restarted",
        }
    }
}

/// How one attempt of a call ended, as the [`Event::Attempt`] event and the [`AttemptLog`](crate::call::AttemptLog)
/// tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum AttemptEnd {
    /// The operation ran.
    Ran {
        /// How it ended, as the call counted it: an answer that came at or after the attempt's
        /// deadline and was not a success is [`Outcome::TimedOut`], and an attempt dropped
        /// because the other of a hedged pair decided the call is [`Outcome::Cancelled`].
        outcome: Outcome,
        /// How long it ran, from its admission to its end.
        took: Duration,
        /// Whether the dependency answered (the operation returned a result, whatever it
        /// said), as opposed to a connection error, a timeout or a cancellation.
        answered: bool,
        /// Whether it was a hedge, launched beside a slow attempt.
        hedge: bool,
    },
    /// It never started: refused locally, by the reason's part. See
    /// [`RefusalReason::is_self_imposed`] for the caller's own limits (retried as a throttle)
    /// as against the breaker's or the budget's judgement.
    Refused {
        /// Who refused.
        reason: RefusalReason,
    },
}

impl AttemptEnd {
    /// Whether a local limit of the caller's own refused the attempt (a rate limiter, a
    /// bulkhead, the adaptive limiter, a published quota's reserve): the dependency was
    /// never asked.
    ///
    /// ```
    /// use stormguard_core::{event::AttemptEnd, RefusalReason};
    /// assert!(AttemptEnd::Refused { reason: RefusalReason::RateLimited }.is_self_imposed());
    /// assert!(!AttemptEnd::Refused { reason: RefusalReason::BreakerOpen }.is_self_imposed());
    /// ```
    #[must_use]
    pub const fn is_self_imposed(&self) -> bool {
        match self {
            AttemptEnd::Refused { reason } => reason.is_self_imposed(),
            AttemptEnd::Ran { .. } => false,
        }
    }

    /// The outcome of an attempt that ran; `None` for a refused one.
    #[must_use]
    pub const fn outcome(&self) -> Option<Outcome> {
        match self {
            AttemptEnd::Ran { outcome, .. } => Some(*outcome),
            AttemptEnd::Refused { .. } => None,
        }
    }
}

impl fmt::Display for AttemptEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptEnd::Ran {
                outcome,
                took,
                answered,
                hedge,
            } => {
                write!(f, "{} after {took}", outcome_word(*outcome))?;
                if *hedge {
                    f.write_str(", a hedge")?;
                }
                if *answered && !outcome.is_success() {
                    f.write_str(", answered")?;
                }
                Ok(())
            }
            AttemptEnd::Refused { reason } if reason.is_self_imposed() => {
                write!(f, "refused locally ({reason}), self-imposed")
            }
            AttemptEnd::Refused { reason } => write!(f, "refused locally ({reason})"),
        }
    }
}

fn outcome_word(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Success => "success",
        Outcome::Transient => "transient failure",
        Outcome::TimedOut => "timed out",
        Outcome::Throttled { .. } => "throttled",
        Outcome::Permanent => "permanent failure",
        Outcome::Cancelled => "cancelled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::RefusalReason;
    use crate::state::State;

    #[test]
    fn with_name_keeps_everything_but_the_name() {
        let a = Name::new("a");
        let b = Name::new("b");
        let events = [
            Event::StateChanged {
                name: &a,
                from: State::Closed,
                to: State::Open,
                reason: None,
                break_for: None,
            },
            Event::ProbeStarted { name: &a },
            Event::ProbesReclaimed { name: &a, count: 2 },
            Event::RampStep {
                name: &a,
                fraction: Ratio::ONE,
                cap: Ratio::ZERO,
            },
            Event::Rejected {
                name: &a,
                reason: RefusalReason::BreakerOpen,
                delay: Duration::ZERO,
                retry_after: Duration::MAX,
            },
            Event::Retry {
                name: &a,
                attempt: 2,
                delay: Duration::ZERO,
                after: Outcome::Transient,
            },
            Event::Hedged {
                name: &a,
                attempt: 2,
            },
            Event::Attempt {
                name: &a,
                attempt: 2,
                end: AttemptEnd::Ran {
                    outcome: Outcome::TimedOut,
                    took: Duration::from_millis(30),
                    answered: false,
                    hedge: true,
                },
            },
            Event::NestedRetry {
                name: &a,
                attempt: 3,
            },
            Event::Drained {
                name: &a,
                attempts: 1,
                last: Some(Outcome::Transient),
            },
            Event::Restarted {
                name: &a,
                restart: 1,
                delay: Duration::from_millis(80),
                after: Outcome::TimedOut,
            },
        ];
        for e in events {
            let moved = e.with_name(&b);
            assert_eq!(moved.name(), &b);
            assert_eq!(moved.kind(), e.kind());
            assert_eq!(moved.with_name(&a), e);
        }
    }
}
