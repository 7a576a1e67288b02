//! The hedged pair: the first attempt of a call and the hedge launched beside it when it is
//! slow, as a small state machine the adapters drive with two futures and one timer.
//!
//! [`Call`] grants the hedge ([`Call::hedge_delay`], [`Call::hedge_with`]) and decides the call;
//! [`HedgedPair`] says, for the two attempts in flight, what the adapter waits for next (one
//! timer, armed for the earliest of the hedge's launch and each attempt's deadline) and what it
//! does when something happens: launch the hedge, drop an attempt, or go back to
//! [`Call::poll`].
//!
//! ```
//! use stormguard_core::{
//!     call::{Due, HedgedPair, Lane, PairNext},
//!     Breaker, Budget, BudgetSettings, Call, CallSettings, Duration, Finished, Instant, Outcome,
//!     Parts, Step,
//! };
//!
//! let mut parts = Parts {
//!     breaker: Breaker::of(5, "search")?,
//!     budget: Budget::new(BudgetSettings::defaults("search")),
//! };
//! let mut now = Instant::from_secs(1);
//! for _ in 0..40 {
//!     // Healthy calls of 20 ms: the breaker learns when an attempt is slow.
//!     let permit = parts.breaker.try_acquire(now)?;
//!     now += Duration::from_millis(20);
//!     parts.breaker.on_outcome(now, permit, Outcome::Success, &mut |_| {});
//! }
//! let settings = CallSettings::builder().hedging(true).build()?;
//! let mut call = Call::begin(&settings, now);
//! let Step::Attempt(first) = call.poll(&mut parts, now, &mut |_| {}) else { unreachable!() };
//! let mut pair = HedgedPair::begin(&call, now, call.hedge_delay(&parts, now));
//!
//! // The first attempt is still running when the timer fires: the hedge goes out.
//! now = pair.wake_at().expect("the hedge's launch");
//! assert_eq!(pair.due(), Some(Due::Launch));
//! let (hedge, ()) = pair.launch(&mut call, &mut parts, now, &mut |_| {}, |_n| Some(())).unwrap();
//!
//! // The hedge answers first: the first attempt is dropped, and reported cancelled.
//! now += Duration::from_millis(5);
//! let (lane, outcome, answered) = (Lane::Hedge, Outcome::Success, true);
//! let next = pair.finished(
//!     &mut call, &mut parts, lane, Some(hedge), now, outcome, answered, &mut |_| {},
//! );
//! assert_eq!(next, PairNext::Drop(Lane::First));
//! pair.abandon(&mut call, &mut parts, Lane::First, Some(first), now, &mut |_| {});
//! assert_eq!(call.poll(&mut parts, now, &mut |_| {}), Step::Done(Finished::Succeeded));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::{Admission, Call, Funding, Parts, Permit};
use crate::event::Event;
use crate::{Duration, Instant, Outcome};

/// One attempt of a hedged pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Lane {
    /// The attempt [`Call::poll`] started.
    First,
    /// The hedge launched beside it.
    Hedge,
}

impl Lane {
    /// The other attempt of the pair.
    #[must_use]
    pub const fn other(self) -> Lane {
        match self {
            Lane::First => Lane::Hedge,
            Lane::Hedge => Lane::First,
        }
    }
}

/// What the pair's timer was armed for, when it fires ([`HedgedPair::due`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Due {
    /// The time to launch the hedge came: [`HedgedPair::launch`].
    Launch,
    /// This attempt reached its deadline: drop it and report it with
    /// [`HedgedPair::finished`] as [`Outcome::TimedOut`].
    Deadline(Lane),
}

/// What the adapter does after an attempt of the pair ended ([`HedgedPair::finished`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PairNext {
    /// The other attempt runs on and decides: keep waiting (the timer at
    /// [`HedgedPair::wake_at`]).
    Wait,
    /// No attempt is left in flight: back to [`Call::poll`].
    Over,
    /// The call is decided (a success, a cancellation, a permanent failure): drop this
    /// attempt, which cancels it, hand its permit to [`HedgedPair::abandon`], then back to
    /// [`Call::poll`].
    Drop(Lane),
}

/// One attempt in flight, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Flight {
    running: bool,
    deadline: Option<Instant>,
}

impl Flight {
    const IDLE: Flight = Flight {
        running: false,
        deadline: None,
    };
}

/// The two attempts of a hedged call in flight: the first, started by [`Call::poll`], and the
/// hedge, launched beside it once [`Call::hedge_delay`] has passed. Plain data, reading no
/// clock; it borrows the [`Call`] only for the length of each method.
///
/// The adapter keeps the two attempts (futures) and their permits, and one timer, and loops:
/// arm the timer for [`HedgedPair::wake_at`]; wait for either attempt or the timer; then
/// - an attempt returned: classify its result, drop it, [`HedgedPair::finished`];
/// - the timer fired: [`HedgedPair::due`] says whether to [`launch`](HedgedPair::launch) the
///   hedge or to drop the attempt whose deadline passed and report it timed out;
/// - the caller cancelled: drop both, [`HedgedPair::abandon`] each;
///
/// until [`PairNext::Over`] (or a [`PairNext::Drop`] served), then polls the call again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HedgedPair {
    launch_at: Option<Instant>,
    first: Flight,
    hedge: Flight,
}

impl HedgedPair {
    /// The pair for the attempt [`Call::poll`] just started at `now`, hedged `hedge_after`
    /// later if it is still running then ([`Call::hedge_delay`], at the same `now`); with
    /// `None`, the first attempt alone, bounded by its deadline.
    #[must_use]
    pub fn begin(call: &Call, now: Instant, hedge_after: Option<Duration>) -> HedgedPair {
        HedgedPair {
            launch_at: hedge_after.map(|after| now.saturating_add(after)),
            first: Flight {
                running: true,
                deadline: call.attempt_deadline(),
            },
            hedge: Flight::IDLE,
        }
    }

    const fn flight(&self, lane: Lane) -> &Flight {
        match lane {
            Lane::First => &self.first,
            Lane::Hedge => &self.hedge,
        }
    }

    fn flight_mut(&mut self, lane: Lane) -> &mut Flight {
        match lane {
            Lane::First => &mut self.first,
            Lane::Hedge => &mut self.hedge,
        }
    }

    /// Whether the attempt in `lane` is in flight.
    #[must_use]
    pub const fn is_running(&self, lane: Lane) -> bool {
        self.flight(lane).running
    }

    /// The earliest timer the pair waits for and what it is for: the hedge's launch, then the
    /// first attempt's deadline, then the hedge's (the first listed wins a tie).
    fn next(&self) -> Option<(Instant, Due)> {
        let deadline = |lane: Lane| {
            let f = self.flight(lane);
            f.deadline
                .filter(|_| f.running)
                .map(|at| (at, Due::Deadline(lane)))
        };
        [
            self.launch_at.map(|at| (at, Due::Launch)),
            deadline(Lane::First),
            deadline(Lane::Hedge),
        ]
        .into_iter()
        .flatten()
        .fold(
            None,
            |earliest: Option<(Instant, Due)>, (at, due)| match earliest {
                Some((e, _)) if e <= at => earliest,
                _ => Some((at, due)),
            },
        )
    }

    /// When the adapter's one timer must fire: the earliest of the hedge's launch and the
    /// deadlines of the attempts in flight. `None`: wait for the attempts alone.
    #[must_use]
    pub fn wake_at(&self) -> Option<Instant> {
        self.next().map(|(at, _)| at)
    }

    /// The timer armed for [`HedgedPair::wake_at`] fired: what it was for. The pair takes the
    /// word of the timer, not of a clock reading, so a clock that reads a little early never
    /// leaves it waiting again for what is already due. A launch is asked once.
    pub fn due(&mut self) -> Option<Due> {
        let (_, due) = self.next()?;
        if due == Due::Launch {
            self.launch_at = None;
        }
        Some(due)
    }

    /// Launches the hedge at `now`, as [`Call::hedge_with`] grants it (`make` makes the
    /// attempt, given its number, only once the breaker and the budget have granted it; `None`
    /// when the operation cannot be repeated). The hedge is never asked again, granted or not;
    /// the first attempt goes on either way.
    pub fn launch<A: Admission, F: Funding, T>(
        &mut self,
        call: &mut Call,
        parts: &mut Parts<A, F>,
        now: Instant,
        events: &mut dyn FnMut(Event<'_>),
        make: impl FnOnce(u32) -> Option<T>,
    ) -> Option<(Permit, T)> {
        self.launch_at = None;
        let (permit, made) = call.hedge_with(parts, now, events, make).ok()?;
        self.hedge = Flight {
            running: true,
            deadline: call.attempt_deadline(),
        };
        Some((permit, made))
    }

    /// The attempt in `lane` ended at `now` with `outcome` (its deadline passed:
    /// [`Outcome::TimedOut`]); `answered` as [`Call::complete_attempt`] reads it. The adapter
    /// has dropped the attempt and hands over its permit (`None` when it holds none). No hedge
    /// is launched after either attempt ended. Says what comes next.
    #[allow(clippy::too_many_arguments)]
    pub fn finished<A: Admission, F: Funding>(
        &mut self,
        call: &mut Call,
        parts: &mut Parts<A, F>,
        lane: Lane,
        permit: Option<Permit>,
        now: Instant,
        outcome: Outcome,
        answered: bool,
        events: &mut dyn FnMut(Event<'_>),
    ) -> PairNext {
        self.launch_at = None;
        *self.flight_mut(lane) = Flight::IDLE;
        if let Some(permit) = permit {
            call.complete_attempt(parts, permit, now, outcome, answered, events);
        }
        let other = lane.other();
        if !self.is_running(other) {
            PairNext::Over
        } else if call.is_over() {
            PairNext::Drop(other)
        } else {
            PairNext::Wait
        }
    }

    /// A drain began at `now` while the pair runs: the call is told ([`Call::on_drain`]), so
    /// no hedge launches from now on and the call's deadline is clamped to `grace`; each
    /// attempt in flight runs on within it (the adapter re-arms its timer for
    /// [`HedgedPair::wake_at`]). A second drain changes nothing.
    pub fn on_drain(&mut self, call: &mut Call, now: Instant, grace: Duration) {
        call.on_drain(now, grace);
        self.launch_at = None;
        let by = call.deadline();
        for flight in [&mut self.first, &mut self.hedge] {
            if flight.running {
                flight.deadline = match (flight.deadline, by) {
                    (Some(d), Some(b)) => Some(d.min(b)),
                    (d, b) => d.or(b),
                };
            }
        }
    }

    /// The attempt in `lane` was dropped before it ended (the other decided the call, or the
    /// caller cancelled): its permit, if the adapter holds one, is reported
    /// [`Outcome::Cancelled`], which no breaker counts against the dependency.
    pub fn abandon<A: Admission, F: Funding>(
        &mut self,
        call: &mut Call,
        parts: &mut Parts<A, F>,
        lane: Lane,
        permit: Option<Permit>,
        now: Instant,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        *self.flight_mut(lane) = Flight::IDLE;
        if let Some(permit) = permit {
            call.complete(parts, permit, now, Outcome::Cancelled, events);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::call::{CallSettings, Finished, Step};
    use crate::{Breaker, Budget, BudgetSettings};
    use std::vec::Vec;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A breaker that has learned healthy calls take 20 ms, a full budget, and the time after.
    fn warm() -> (Parts<Breaker, Budget>, Instant) {
        let mut parts = Parts {
            breaker: Breaker::of(5, "pair").unwrap(),
            budget: Budget::new(BudgetSettings::defaults("pair")),
        };
        let mut now = Instant::from_secs(1);
        for _ in 0..40 {
            let permit = parts.breaker.try_acquire(now).unwrap();
            now += ms(20);
            parts
                .breaker
                .on_outcome(now, permit, Outcome::Success, &mut |_| {});
        }
        (parts, now)
    }

    fn hedging() -> CallSettings {
        CallSettings::builder().hedging(true).build().unwrap()
    }

    /// A hedging call whose first attempt started at `now`, its pair, and its permit.
    fn started(parts: &mut Parts<Breaker, Budget>, now: Instant) -> (Call, HedgedPair, Permit) {
        let mut call = Call::begin(&hedging(), now);
        let Step::Attempt(first) = call.poll(parts, now, &mut |_| {}) else {
            panic!("the first attempt")
        };
        let after = call.hedge_delay(parts, now);
        assert!(after.is_some(), "a warm, closed breaker hedges");
        let pair = HedgedPair::begin(&call, now, after);
        (call, pair, first)
    }

    /// Fires the timer at the launch and launches the hedge: its permit and the time.
    fn launched(
        call: &mut Call,
        pair: &mut HedgedPair,
        parts: &mut Parts<Breaker, Budget>,
    ) -> (Permit, Instant) {
        let at = pair.wake_at().unwrap();
        assert_eq!(pair.due(), Some(Due::Launch));
        let mut kinds = Vec::new();
        let (permit, number) = pair
            .launch(call, parts, at, &mut |e| kinds.push(e.kind()), Some)
            .expect("the hedge is granted");
        assert_eq!((number, kinds.as_slice()), (2, ["hedged"].as_slice()));
        assert!(pair.is_running(Lane::Hedge));
        (permit, at)
    }

    #[test]
    fn the_timer_waits_for_the_launch_then_for_the_earliest_deadline() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, _first) = started(&mut parts, now);
        let first_deadline = call.attempt_deadline().unwrap();
        let launch_at = now + call.hedge_delay(&parts, now).unwrap();
        assert!(launch_at < first_deadline);
        assert_eq!(pair.wake_at(), Some(launch_at));
        let (_hedge, _) = launched(&mut call, &mut pair, &mut parts);
        // The hedge started later with the same timeout: the first attempt's deadline is next.
        let hedge_deadline = call.attempt_deadline().unwrap();
        assert!(first_deadline < hedge_deadline);
        assert_eq!(pair.wake_at(), Some(first_deadline));
        assert_eq!(pair.due(), Some(Due::Deadline(Lane::First)));
    }

    #[test]
    fn a_drain_before_the_launch_stops_the_hedge_and_clamps_the_attempt_to_the_grace() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, first) = started(&mut parts, now);
        let first_deadline = call.attempt_deadline().unwrap();
        let launch_at = pair.wake_at().unwrap();
        let grace = ms(1);
        let t = now + ms(1);
        assert!(t + grace < launch_at && t + grace < first_deadline);
        pair.on_drain(&mut call, t, grace);
        assert!(call.is_draining());
        // No launch is left to wait for: the timer is for the attempt's clamped deadline.
        assert_eq!(pair.wake_at(), Some(t + grace));
        assert_eq!(pair.due(), Some(Due::Deadline(Lane::First)));
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::First,
            Some(first),
            t + grace,
            Outcome::TimedOut,
            false,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Over);
        // The drain stops the retry too: the call ends drained, with its last outcome.
        let last = Some(Outcome::TimedOut);
        assert_eq!(
            call.poll(&mut parts, t + grace, &mut |_| {}),
            Step::Done(Finished::Drained { last })
        );
        assert_eq!(call.attempts(), 1);
    }

    #[test]
    fn a_drain_after_the_launch_clamps_both_attempts() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, _first) = started(&mut parts, now);
        let (_hedge, at) = launched(&mut call, &mut pair, &mut parts);
        let grace = ms(1);
        pair.on_drain(&mut call, at, grace);
        assert_eq!(pair.wake_at(), Some(at + grace));
        assert!(pair.is_running(Lane::First) && pair.is_running(Lane::Hedge));
    }

    #[test]
    fn the_first_attempt_wins_and_the_hedge_is_dropped() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, first) = started(&mut parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &mut parts);
        let t = at + ms(1);
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::First,
            Some(first),
            t,
            Outcome::Success,
            true,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Drop(Lane::Hedge));
        pair.abandon(
            &mut call,
            &mut parts,
            Lane::Hedge,
            Some(hedge),
            t,
            &mut |_| {},
        );
        assert_eq!(pair.wake_at(), None);
        assert_eq!(
            call.poll(&mut parts, t, &mut |_| {}),
            Step::Done(Finished::Succeeded)
        );
        assert_eq!(parts.breaker.snapshot(t).consecutive_failures, 0);
    }

    #[test]
    fn the_hedge_wins_and_the_first_attempt_is_dropped() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, first) = started(&mut parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &mut parts);
        let t = at + ms(2);
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::Hedge,
            Some(hedge),
            t,
            Outcome::Success,
            true,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Drop(Lane::First));
        pair.abandon(
            &mut call,
            &mut parts,
            Lane::First,
            Some(first),
            t,
            &mut |_| {},
        );
        assert_eq!(
            call.poll(&mut parts, t, &mut |_| {}),
            Step::Done(Finished::Succeeded)
        );
        assert_eq!(call.attempts(), 2);
    }

    #[test]
    fn a_failure_of_the_first_waits_for_the_hedge_which_decides() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, first) = started(&mut parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &mut parts);
        let hedge_deadline = call.attempt_deadline();
        let mut kinds = Vec::new();
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::First,
            Some(first),
            at + ms(1),
            Outcome::Transient,
            true,
            &mut |e| kinds.push(e.kind()),
        );
        assert_eq!(next, PairNext::Wait);
        assert!(!call.is_over());
        assert!(!kinds.contains(&"retry"), "no retry while the hedge runs");
        // Only the hedge's deadline is left to wait for.
        assert_eq!(pair.wake_at(), hedge_deadline);
        let t = at + ms(3);
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::Hedge,
            Some(hedge),
            t,
            Outcome::Success,
            true,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Over);
        assert_eq!(
            call.poll(&mut parts, t, &mut |_| {}),
            Step::Done(Finished::Succeeded)
        );
    }

    #[test]
    fn a_permanent_failure_of_one_ends_the_call_and_drops_the_other() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, first) = started(&mut parts, now);
        let (_hedge, at) = launched(&mut call, &mut pair, &mut parts);
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::First,
            Some(first),
            at,
            Outcome::Permanent,
            true,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Drop(Lane::Hedge));
    }

    #[test]
    fn both_attempts_time_out_in_the_order_of_their_deadlines_and_the_call_retries() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, first) = started(&mut parts, now);
        let first_deadline = call.attempt_deadline().unwrap();
        let (hedge, _) = launched(&mut call, &mut pair, &mut parts);
        let hedge_deadline = call.attempt_deadline().unwrap();

        assert_eq!(pair.wake_at(), Some(first_deadline));
        assert_eq!(pair.due(), Some(Due::Deadline(Lane::First)));
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::First,
            Some(first),
            first_deadline,
            Outcome::TimedOut,
            false,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Wait);

        assert_eq!(pair.wake_at(), Some(hedge_deadline));
        assert_eq!(pair.due(), Some(Due::Deadline(Lane::Hedge)));
        let mut kinds = Vec::new();
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::Hedge,
            Some(hedge),
            hedge_deadline,
            Outcome::TimedOut,
            false,
            &mut |e| kinds.push(e.kind()),
        );
        assert_eq!(next, PairNext::Over);
        assert_eq!(pair.wake_at(), None);
        assert_eq!(pair.due(), None);
        // Both failed: the call retries (the hedge counted as an attempt).
        assert!(kinds.contains(&"retry"), "{kinds:?}");
        assert_eq!(call.last_outcome(), Some(Outcome::TimedOut));
        assert!(matches!(
            call.poll(&mut parts, hedge_deadline, &mut |_| {}),
            Step::Wait(_)
        ));
        assert_eq!(call.attempts(), 2);
    }

    #[test]
    fn a_declined_hedge_spends_nothing_and_leaves_the_first_attempt_alone() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, first) = started(&mut parts, now);
        let first_deadline = call.attempt_deadline();
        let at = pair.wake_at().unwrap();
        let budget = parts.budget.available(at);
        assert_eq!(pair.due(), Some(Due::Launch));
        // The request cannot be replayed.
        let launched = pair.launch(&mut call, &mut parts, at, &mut |_| {}, |_| None::<()>);
        assert!(launched.is_none());
        assert!(!pair.is_running(Lane::Hedge));
        assert_eq!((call.attempts(), parts.budget.available(at)), (1, budget));
        // Never asked again: the first attempt's deadline is all that is left.
        assert_eq!(pair.wake_at(), first_deadline);
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::First,
            Some(first),
            at + ms(1),
            Outcome::Success,
            true,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Over);
    }

    #[test]
    fn a_hedge_due_after_the_first_attempt_ended_is_not_launched() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, first) = started(&mut parts, now);
        let next = pair.finished(
            &mut call,
            &mut parts,
            Lane::First,
            Some(first),
            now + ms(1),
            Outcome::Transient,
            true,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Over);
        assert_eq!(pair.wake_at(), None);
        assert_eq!(pair.due(), None);
    }

    #[test]
    fn without_a_hedge_the_pair_waits_for_the_first_attempts_deadline() {
        let (mut parts, now) = warm();
        let mut call = Call::begin(&CallSettings::DEFAULT, now);
        let Step::Attempt(_first) = call.poll(&mut parts, now, &mut |_| {}) else {
            panic!("the first attempt")
        };
        let mut pair = HedgedPair::begin(&call, now, call.hedge_delay(&parts, now));
        assert_eq!(pair.wake_at(), call.attempt_deadline());
        assert_eq!(pair.due(), Some(Due::Deadline(Lane::First)));
    }

    #[test]
    fn a_cancelled_pair_reports_both_attempts_cancelled() {
        let (mut parts, now) = warm();
        let (mut call, mut pair, first) = started(&mut parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &mut parts);
        pair.abandon(
            &mut call,
            &mut parts,
            Lane::First,
            Some(first),
            at,
            &mut |_| {},
        );
        pair.abandon(
            &mut call,
            &mut parts,
            Lane::Hedge,
            Some(hedge),
            at,
            &mut |_| {},
        );
        assert_eq!(pair.wake_at(), None);
        assert_eq!(
            call.poll(&mut parts, at, &mut |_| {}),
            Step::Done(Finished::Cancelled)
        );
        assert_eq!(parts.breaker.snapshot(at).consecutive_failures, 0);
    }

    #[test]
    fn a_late_answer_counts_as_a_timeout_unless_it_is_a_success() {
        let (mut parts, now) = warm();
        let mut call = Call::begin(&CallSettings::DEFAULT, now);
        let Step::Attempt(_permit) = call.poll(&mut parts, now, &mut |_| {}) else {
            panic!("the first attempt")
        };
        let deadline = call.attempt_deadline().unwrap();
        let early = deadline - ms(1);
        assert_eq!(
            call.judge_answer(early, Outcome::Transient, true),
            (Outcome::Transient, true)
        );
        assert_eq!(
            call.judge_answer(deadline, Outcome::Transient, true),
            (Outcome::TimedOut, false)
        );
        assert_eq!(
            call.judge_answer(deadline + ms(5), Outcome::Permanent, false),
            (Outcome::TimedOut, false)
        );
        assert_eq!(
            call.judge_answer(deadline + ms(5), Outcome::Success, true),
            (Outcome::Success, true)
        );
        // An outcome the classifier itself calls a timeout is no answer.
        assert_eq!(
            call.judge_answer(early, Outcome::TimedOut, true),
            (Outcome::TimedOut, false)
        );
    }
}
