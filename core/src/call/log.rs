//! The attempt log: how each attempt of one call ended, kept from the call's
//! [`Event::Attempt`] events, so that a caller can tell after the fact what happened on the
//! way to its result (a local limiter's refusal apart from the dependency's 429, a hedge that
//! won, a timeout before the success).

use core::fmt;

use crate::event::{AttemptEnd, Event};

/// One line of an [`AttemptLog`]: the attempt's number (1 for the first) and how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AttemptRecord {
    /// The attempt's number: 1 for the first. Two attempts of a hedged pair have their own.
    pub attempt: u32,
    /// How it ended.
    pub end: AttemptEnd,
}

impl fmt::Display for AttemptRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "attempt {}: {}", self.attempt, self.end)
    }
}

/// How each attempt of one call ended, in the order they ended: the first `N` records (8 by
/// default, more than the default three attempts and a hedge), and a count of any beyond.
/// Fed with the call's events ([`AttemptLog::record`] keeps the [`Event::Attempt`] ones); it
/// allocates nothing.
///
/// ```
/// use stormguard_core::{
///     call::AttemptLog, event::AttemptEnd,
///     Call, CallSettings, Duration, Instant, Outcome, Parts, Step,
/// };
///
/// let parts = Parts::new().named("api");
/// let mut log = AttemptLog::<8>::new();
/// let mut now = Instant::from_secs(1);
/// let mut call = Call::begin(&CallSettings::DEFAULT, now);
/// let mut outcomes = [Outcome::Transient, Outcome::Success].into_iter();
/// while let step = call.poll(&parts, now, &mut |e| log.record(&e)) {
///     match step {
///         Step::Attempt(permit) => {
///             now += Duration::from_millis(20);
///             let outcome = outcomes.next().unwrap();
///             call.complete_attempt(&parts, permit, now, outcome, true, &mut |e| log.record(&e));
///         }
///         Step::Wait(d) => now += d,
///         Step::Reject(r) => now += r.pause,
///         Step::Done(_) => break,
///     }
/// }
/// assert_eq!(log.len(), 2);
/// let first = log.iter().next().unwrap();
/// assert_eq!(first.end.outcome(), Some(Outcome::Transient));
/// assert_eq!(
///     log.to_string(),
///     "attempt 1: transient failure after 20ms, answered; attempt 2: success after 20ms"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AttemptLog<const N: usize = 8> {
    records: [Option<AttemptRecord>; N],
    /// Records kept (at most `N`).
    kept: u16,
    /// Attempt events seen beyond the first `N`.
    beyond: u32,
}

impl<const N: usize> Default for AttemptLog<N> {
    fn default() -> Self {
        AttemptLog::new()
    }
}

impl<const N: usize> AttemptLog<N> {
    /// An empty log.
    #[must_use]
    pub const fn new() -> Self {
        AttemptLog {
            records: [None; N],
            kept: 0,
            beyond: 0,
        }
    }

    /// Keeps `event` if it is an [`Event::Attempt`]; every other event is ignored, so the log
    /// can sit in any event sink.
    pub fn record(&mut self, event: &Event<'_>) {
        if let Event::Attempt { attempt, end, .. } = *event {
            self.push(AttemptRecord { attempt, end });
        }
    }

    /// Adds a record (past the first `N`, only counted).
    pub fn push(&mut self, record: AttemptRecord) {
        match self.records.get_mut(usize::from(self.kept)) {
            Some(slot) => {
                *slot = Some(record);
                self.kept = self.kept.saturating_add(1);
            }
            None => self.beyond = self.beyond.saturating_add(1),
        }
    }

    /// The records kept, in the order the attempts ended.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &AttemptRecord> + '_ {
        self.records.iter().flatten()
    }

    /// Records kept.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.kept as usize
    }

    /// `true` when nothing was recorded (a call served from a cache, or refused before its
    /// first attempt by a part outside the call).
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.kept == 0
    }

    /// Attempts recorded beyond the first `N`, counted but not kept.
    #[must_use]
    pub const fn beyond(&self) -> u32 {
        self.beyond
    }

    /// The record of the attempt that ended last, if it was kept.
    #[must_use]
    pub fn last(&self) -> Option<&AttemptRecord> {
        if self.beyond > 0 {
            return None;
        }
        self.iter().next_back()
    }

    /// Whether any attempt was refused by the caller's own limits
    /// ([`AttemptEnd::is_self_imposed`]).
    #[must_use]
    pub fn any_self_imposed(&self) -> bool {
        self.iter().any(|r| r.end.is_self_imposed())
    }

    /// Whether a hedge ran.
    #[must_use]
    pub fn hedged(&self) -> bool {
        self.iter()
            .any(|r| matches!(r.end, AttemptEnd::Ran { hedge: true, .. }))
    }
}

impl<const N: usize> fmt::Display for AttemptLog<N> {
    /// The records, `; ` between them, then how many more were not kept.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for record in self.iter() {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{record}")?;
        }
        match (first, self.beyond) {
            (true, 0) => f.write_str("no attempt"),
            (_, 0) => Ok(()),
            (true, more) => write!(f, "{more} more"),
            (false, more) => write!(f, "; {more} more"),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::error::RefusalReason;
    use crate::name::Name;
    use std::string::ToString;

    fn refused(name: &Name, attempt: u32, reason: RefusalReason) -> Event<'_> {
        Event::Attempt {
            name,
            attempt,
            end: AttemptEnd::Refused { reason },
        }
    }

    #[test]
    fn a_log_keeps_its_first_records_and_counts_the_rest() {
        let name = Name::new("api");
        let mut log = AttemptLog::<2>::new();
        assert_eq!(log.to_string(), "no attempt");
        log.record(&Event::ProbeStarted { name: &name });
        assert!(log.is_empty(), "only attempt events are kept");
        log.record(&refused(&name, 1, RefusalReason::RateLimited));
        log.record(&refused(&name, 2, RefusalReason::BudgetExhausted));
        log.record(&refused(&name, 3, RefusalReason::BreakerOpen));
        assert_eq!((log.len(), log.beyond()), (2, 1));
        assert_eq!(log.last(), None, "the last attempt was not kept");
        assert!(log.any_self_imposed() && !log.hedged());
        assert_eq!(
            log.to_string(),
            "attempt 1: refused locally (rate_limited), self-imposed; \
             attempt 2: refused locally (budget_exhausted); 1 more"
        );
    }

    #[test]
    fn a_zero_sized_log_only_counts() {
        let name = Name::new("api");
        let mut log = AttemptLog::<0>::new();
        log.record(&refused(&name, 1, RefusalReason::BulkheadFull));
        assert_eq!((log.len(), log.beyond()), (0, 1));
        assert_eq!(log.to_string(), "1 more");
    }
}
