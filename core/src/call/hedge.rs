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
//! let parts = Parts::new().breaker(Breaker::of(5, "search")?).budget(Budget::new(BudgetSettings::defaults("search")));
//! let mut now = Instant::from_secs(1);
//! for _ in 0..40 {
//!     // Healthy calls of 20 ms: the breaker learns when an attempt is slow.
//!     let permit = parts.breaker.as_ref().unwrap().try_acquire(now)?;
//!     now += Duration::from_millis(20);
//!     parts.breaker.as_ref().unwrap().on_outcome(now, permit, Outcome::Success, &mut |_| {});
//! }
//! let settings = CallSettings::builder().hedging(true).build()?;
//! let mut call = Call::begin(&settings, now);
//! let Step::Attempt(first) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
//! let mut pair = HedgedPair::begin(&call, now, call.hedge_delay(&parts, now));
//!
//! // The first attempt is still running when the timer fires: the hedge goes out.
//! now = pair.wake_at().expect("the hedge's launch");
//! assert_eq!(pair.due(), Some(Due::Launch));
//! let (hedge, ()) = pair.launch(&mut call, &parts, now, &mut |_| {}, |_n| Some(())).unwrap();
//!
//! // The hedge answers first: the first attempt is dropped, and reported cancelled.
//! now += Duration::from_millis(5);
//! let (lane, outcome, answered) = (Lane::Hedge, Outcome::Success, true);
//! let next = pair.finished(
//!     &mut call, &parts, lane, Some(hedge), now, outcome, answered, &mut |_| {},
//! );
//! assert_eq!(next, PairNext::Drop(Lane::First));
//! pair.abandon(&mut call, &parts, Lane::First, Some(first), now, &mut |_| {});
//! assert_eq!(call.poll(&parts, now, &mut |_| {}), Step::Done(Finished::Succeeded));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use core::cell::Cell;

use super::{Call, Gate, Ran};
use crate::cell::{const_unless_loom, field, put, word, Word};
use crate::event::Event;
use crate::loom::AtomicU64;
use crate::outcome::Outcome;
use crate::part::{Learned, Permit};
use crate::time::{Duration, Instant};

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
    /// Whether a hedge ran and, if so, whether its answer was the call's.
    hedge_won: Option<bool>,
    /// When the first attempt started, and the hedge delay it was given: a hedge that answers
    /// while the first attempt still runs is learned as a first attempt that ran past that
    /// delay (see [`HedgedPair::finished`]).
    first_started: Instant,
    hedge_after: Option<Duration>,
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
            hedge_won: None,
            first_started: now,
            hedge_after,
        }
    }

    /// Whether the hedge won: `None` when no hedge ran, `Some(true)` once the hedge succeeded
    /// (the first success is the call's answer), `Some(false)` when it ran but did not (the
    /// first attempt answered first, or the hedge failed or timed out). Read it once the pair is
    /// over, for [`HedgeShare::on_hedge`]; a pair the caller cancelled has no verdict to give.
    #[must_use]
    pub const fn hedge_won(&self) -> Option<bool> {
        self.hedge_won
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
    pub fn launch<P: Gate, T>(
        &mut self,
        call: &mut Call,
        parts: &P,
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
        self.hedge_won = Some(false);
        Some((permit, made))
    }

    /// The attempt in `lane` ended at `now` with `outcome` (its deadline passed:
    /// [`Outcome::TimedOut`]); `answered` as [`Call::complete_attempt`] reads it. The adapter
    /// has dropped the attempt and hands over its permit (`None` when it holds none). No hedge
    /// is launched after either attempt ended. Says what comes next.
    ///
    /// A hedge that succeeds while the first attempt still runs is learned as the first
    /// attempt, which it stands in for, and at a latency drawn from those learned above the
    /// hedge delay ([`Learned::Censored`]): the first attempt, dropped unanswered, is
    /// known only to have run past the delay, so it is given the length of a call that did,
    /// in proportion to how often each came (the "redistribute to the right" estimate of
    /// survival analysis). The learned percentiles then stay the dependency's:
    /// - the hedge's own latency is a draw conditioned on winning the race; learned in place
    ///   of the slow first attempt, it would pull the learned p95 down, hedge sooner, and pull
    ///   it further;
    /// - the pair's latency would push the other way: when every first attempt hangs, each
    ///   win would land above the p95 it was launched at, and the delay would climb call after
    ///   call until the calls read as slow;
    /// - the delay itself would hold the p95 wherever it first stood, even below the truth.
    ///
    /// With nothing learned above the delay, the attempt is learned just under it, in the
    /// bucket the delay was read from: the delay rises no further than the slowest answer the
    /// dependency has given.
    #[allow(clippy::too_many_arguments)]
    pub fn finished<P: Gate>(
        &mut self,
        call: &mut Call,
        parts: &P,
        lane: Lane,
        mut permit: Option<Permit>,
        now: Instant,
        outcome: Outcome,
        answered: bool,
        events: &mut dyn FnMut(Event<'_>),
    ) -> PairNext {
        self.launch_at = None;
        *self.flight_mut(lane) = Flight::IDLE;
        let ran = self.ran(call, lane, permit.as_ref(), now);
        if lane == Lane::Hedge && outcome == Outcome::Success {
            self.hedge_won = Some(true);
            if let (true, Some(after)) = (self.first.running, self.hedge_after) {
                // The delay is a bucket's exclusive upper bound: one nanosecond less is in it.
                let ran_past = after
                    .saturating_sub(Duration::from_nanos(1))
                    .min(now.saturating_duration_since(self.first_started));
                let learned = parts
                    .learned(
                        now,
                        Learned::Censored {
                            ran_past,
                            draw: call.draw(),
                        },
                    )
                    .unwrap_or(ran_past);
                permit = permit.map(|p| p.granted_at(now.saturating_sub(learned)));
            }
        }
        if let Some(permit) = permit {
            call.complete_ran(parts, permit, now, outcome, answered, ran, events);
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
    pub fn abandon<P: Gate>(
        &mut self,
        call: &mut Call,
        parts: &P,
        lane: Lane,
        permit: Option<Permit>,
        now: Instant,
        events: &mut dyn FnMut(Event<'_>),
    ) {
        *self.flight_mut(lane) = Flight::IDLE;
        if let Some(permit) = permit {
            let ran = self.ran(call, lane, Some(&permit), now);
            call.complete_ran(parts, permit, now, Outcome::Cancelled, false, ran, events);
        }
    }

    /// Which attempt the one in `lane` is: the hedge is the call's latest, and the first
    /// attempt the one before it once a hedge launched.
    fn ran(&self, call: &Call, lane: Lane, permit: Option<&Permit>, now: Instant) -> Ran {
        let hedge = lane == Lane::Hedge;
        let behind = u32::from(!hedge && self.hedge_won.is_some());
        Ran {
            attempt: call.attempts().saturating_sub(behind),
            hedge,
            took: permit.map_or(Duration::ZERO, |p| p.latency(now)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The win-rate loop: the share of calls allowed a hedge

/// The share of calls allowed a hedge, in 1024ths: all of them.
const FULL_SHARE: u64 = 1024;
/// The least share: one call in 64. Never zero, so hedges keep being tried and a dependency
/// whose hedges start winning again gets them back.
const LEAST_SHARE: u64 = 16;
/// Losing hedges in a row that halve the share: a p95 hedge that helps wins about half the time
/// in a long tail, so four losses in a row is a sign it stopped helping, not bad luck (1 in 16
/// at even odds), and a few stray losses never halve it.
const LOSSES_TO_HALVE: u64 = 4;

const SHARE_AT: u32 = 0;
const CREDIT_AT: u32 = 16;
const LOSSES_AT: u32 = 32;
const FIELD_BITS: u32 = 16;

/// The loop's state, one word: the share (1024ths), the credit towards the next hedge (1024ths)
/// and the losing hedges in a row. The zeroed word is a fresh loop (full share).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ShareState {
    share: u64,
    credit: u64,
    losses: u64,
}

impl ShareState {
    const fn unpack(word: u64) -> ShareState {
        let share = field(word, SHARE_AT, FIELD_BITS);
        ShareState {
            // Zero is the fresh word: a full share.
            share: if share == 0 { FULL_SHARE } else { share },
            credit: field(word, CREDIT_AT, FIELD_BITS),
            losses: field(word, LOSSES_AT, FIELD_BITS),
        }
    }

    const fn pack(self) -> u64 {
        put(self.share, SHARE_AT, FIELD_BITS)
            | put(self.credit, CREDIT_AT, FIELD_BITS)
            | put(self.losses, LOSSES_AT, FIELD_BITS)
    }

    /// A call that would hedge asks: granted once the share's credit adds up to a whole call.
    fn on_call(self) -> (bool, ShareState) {
        let credit = self.credit.saturating_add(self.share);
        if credit >= FULL_SHARE {
            let credit = credit.saturating_sub(FULL_SHARE);
            (true, ShareState { credit, ..self })
        } else {
            (false, ShareState { credit, ..self })
        }
    }

    /// A launched hedge's verdict: a win doubles the share (up to all calls), the
    /// [`LOSSES_TO_HALVE`]th loss in a row halves it (down to [`LEAST_SHARE`]).
    fn on_hedge(self, won: bool) -> ShareState {
        if won {
            ShareState {
                share: self.share.saturating_mul(2).min(FULL_SHARE),
                losses: 0,
                ..self
            }
        } else {
            let losses = self.losses.saturating_add(1);
            if losses >= LOSSES_TO_HALVE {
                ShareState {
                    share: (self.share / 2).max(LEAST_SHARE),
                    losses: 0,
                    ..self
                }
            } else {
                ShareState { losses, ..self }
            }
        }
    }
}

/// The share of calls allowed a hedge, learned from whether hedges win (an opt-in loop beside
/// hedging): it halves when hedges stop winning and grows back when they win, so a dependency
/// whose slow attempts are slow for everyone (a hedge only adds load) is hedged less and less,
/// down to one call in 64, and one whose tail a second try escapes keeps every hedge.
///
/// The rule is a pure function of the verdicts, no clock and no randomness:
/// - every call that would hedge asks [`on_call`](HedgeShare::on_call) first; the share is
///   granted as credit, a call in `1 / share` hedges (with the full share, every one);
/// - every hedge that ran reports its verdict ([`HedgedPair::hedge_won`]) to
///   [`on_hedge`](HedgeShare::on_hedge): a win doubles the share, up to all calls; four losses
///   in a row (a hedge that failed or lost the race to the first attempt) halve it, down to one
///   call in 64 (never none, so hedges keep being tried and come back when they win again).
///
/// ```
/// use stormguard_core::call::HedgeShare;
///
/// let mut share = HedgeShare::new();
/// assert!(share.on_call()); // a fresh loop allows every call a hedge
/// for _ in 0..4 {
///     share.on_hedge(false); // the first attempt kept winning the race
/// }
/// assert_eq!(share.share_per_1024(), 512);
/// let allowed = (0..8).filter(|_| share.on_call()).count();
/// assert_eq!(allowed, 4); // every other call
/// share.on_hedge(true);
/// assert_eq!(share.share_per_1024(), 1024);
/// ```
#[derive(Clone, Debug)]
pub struct HedgeShare {
    word: Cell<u64>,
}

impl Default for HedgeShare {
    fn default() -> Self {
        HedgeShare::new()
    }
}

impl HedgeShare {
    const_unless_loom! {
        /// A fresh loop: every call allowed a hedge.
        #[must_use]
        pub fn new() -> HedgeShare {
            HedgeShare { word: word!(Cell<u64>) }
        }
    }

    /// A call that would hedge (its [`Call::hedge_delay`] is `Some`) asks whether it may:
    /// `true` for its share of calls. Ask once per call, and only then arm the hedge.
    pub fn on_call(&mut self) -> bool {
        on_call(&self.word)
    }

    /// A hedge that ran ended: `won` when its answer was the call's ([`HedgedPair::hedge_won`]).
    pub fn on_hedge(&mut self, won: bool) {
        on_hedge(&self.word, won);
    }

    /// The share of calls allowed a hedge now, in 1024ths (16 to 1024).
    #[must_use]
    pub fn share_per_1024(&self) -> u16 {
        share_of(&self.word)
    }
}

/// [`HedgeShare`] shared by many threads through `&self`, lock-free: one atomic word driven by
/// the same rule, so both decide identically for any sequential input.
///
/// ```
/// use stormguard_core::call::SharedHedgeShare;
/// static SHARE: SharedHedgeShare = SharedHedgeShare::new();
/// assert!(SHARE.on_call());
/// assert_eq!(SHARE.share_per_1024(), 1024);
/// ```
#[derive(Debug)]
pub struct SharedHedgeShare {
    word: AtomicU64,
}

impl Default for SharedHedgeShare {
    fn default() -> Self {
        SharedHedgeShare::new()
    }
}

impl SharedHedgeShare {
    const_unless_loom! {
        /// A fresh loop: every call allowed a hedge; usable in a `static`.
        #[must_use]
        pub fn new() -> SharedHedgeShare {
            SharedHedgeShare { word: word!(AtomicU64) }
        }
    }

    /// A call that would hedge asks whether it may (see [`HedgeShare::on_call`]).
    pub fn on_call(&self) -> bool {
        on_call(&self.word)
    }

    /// A hedge that ran ended (see [`HedgeShare::on_hedge`]).
    pub fn on_hedge(&self, won: bool) {
        on_hedge(&self.word, won);
    }

    /// The share of calls allowed a hedge now, in 1024ths (16 to 1024).
    #[must_use]
    pub fn share_per_1024(&self) -> u16 {
        share_of(&self.word)
    }
}

fn on_call(word: &impl Word) -> bool {
    let mut granted = false;
    word.update(|w| {
        let (g, next) = ShareState::unpack(w).on_call();
        granted = g;
        next.pack()
    });
    granted
}

fn on_hedge(word: &impl Word, won: bool) {
    word.update(|w| ShareState::unpack(w).on_hedge(won).pack());
}

fn share_of(word: &impl Word) -> u16 {
    u16::try_from(ShareState::unpack(word.get()).share).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::breaker::Breaker;
    use crate::call::{CallSettings, Finished, Parts, Step};
    use crate::limits::budget::{Budget, BudgetSettings};
    use std::vec::Vec;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A breaker that has learned healthy calls take 20 ms, a full budget, and the time after.
    fn warm() -> (Parts<Breaker, Budget>, Instant) {
        let parts = Parts::new()
            .breaker(Breaker::of(5, "pair").unwrap())
            .budget(Budget::new(BudgetSettings::defaults("pair")));
        let mut now = Instant::from_secs(1);
        for _ in 0..40 {
            let permit = parts.breaker.as_ref().unwrap().try_acquire(now).unwrap();
            now += ms(20);
            parts
                .breaker
                .as_ref()
                .unwrap()
                .on_outcome(now, permit, Outcome::Success, &mut |_| {});
        }
        (parts, now)
    }

    fn hedging() -> CallSettings {
        CallSettings::builder().hedging(true).build().unwrap()
    }

    #[test]
    fn the_attempt_log_tells_a_winning_hedge_from_the_first_attempt_it_replaced() {
        use crate::call::AttemptLog;
        use crate::event::AttemptEnd;
        let (parts, now) = warm();
        let mut log = AttemptLog::<8>::new();
        let (mut call, mut pair, first) = started(&parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &parts);
        // The hedge answers 5 ms later; the first attempt, still running, is dropped.
        let end = at + ms(5);
        let next = pair.finished(
            &mut call,
            &parts,
            Lane::Hedge,
            Some(hedge),
            end,
            Outcome::Success,
            true,
            &mut |e| log.record(&e),
        );
        assert_eq!(next, PairNext::Drop(Lane::First));
        pair.abandon(&mut call, &parts, Lane::First, Some(first), end, &mut |e| {
            log.record(&e)
        });
        let records: Vec<_> = log.iter().copied().collect();
        assert_eq!(records.len(), 2, "{log}");
        assert_eq!(records[0].attempt, 2);
        assert_eq!(
            records[0].end,
            AttemptEnd::Ran {
                outcome: Outcome::Success,
                took: ms(5),
                answered: true,
                hedge: true
            },
            "the hedge's own time, not the one it is learned at"
        );
        assert_eq!(records[1].attempt, 1);
        assert_eq!(
            records[1].end,
            AttemptEnd::Ran {
                outcome: Outcome::Cancelled,
                took: end - now,
                answered: false,
                hedge: false
            }
        );
        assert!(log.hedged() && !log.any_self_imposed());
    }

    #[test]
    fn a_first_attempt_that_fails_beside_a_running_hedge_is_logged_as_attempt_one() {
        use crate::call::AttemptLog;
        use crate::event::AttemptEnd;
        let (parts, now) = warm();
        let mut log = AttemptLog::<8>::new();
        let (mut call, mut pair, first) = started(&parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &parts);
        let mut sink = |e: Event<'_>| log.record(&e);
        let failed = at + ms(1);
        let next = pair.finished(
            &mut call,
            &parts,
            Lane::First,
            Some(first),
            failed,
            Outcome::Transient,
            false,
            &mut sink,
        );
        assert_eq!(next, PairNext::Wait);
        let answered = at + ms(8);
        let next = pair.finished(
            &mut call,
            &parts,
            Lane::Hedge,
            Some(hedge),
            answered,
            Outcome::Success,
            true,
            &mut sink,
        );
        assert_eq!(next, PairNext::Over);
        let numbers: Vec<_> = log
            .iter()
            .map(|r| {
                (
                    r.attempt,
                    r.end.outcome(),
                    matches!(r.end, AttemptEnd::Ran { hedge: true, .. }),
                )
            })
            .collect();
        assert_eq!(
            numbers,
            [
                (1, Some(Outcome::Transient), false),
                (2, Some(Outcome::Success), true)
            ]
        );
    }

    /// A hedging call whose first attempt started at `now`, its pair, and its permit.
    fn started(parts: &Parts<Breaker, Budget>, now: Instant) -> (Call, HedgedPair, Permit) {
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
        parts: &Parts<Breaker, Budget>,
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
        let (parts, now) = warm();
        let (mut call, mut pair, _first) = started(&parts, now);
        let first_deadline = call.attempt_deadline().unwrap();
        let launch_at = now + call.hedge_delay(&parts, now).unwrap();
        assert!(launch_at < first_deadline);
        assert_eq!(pair.wake_at(), Some(launch_at));
        let (_hedge, _) = launched(&mut call, &mut pair, &parts);
        // The hedge started later with the same timeout: the first attempt's deadline is next.
        let hedge_deadline = call.attempt_deadline().unwrap();
        assert!(first_deadline < hedge_deadline);
        assert_eq!(pair.wake_at(), Some(first_deadline));
        assert_eq!(pair.due(), Some(Due::Deadline(Lane::First)));
    }

    #[test]
    fn a_drain_before_the_launch_stops_the_hedge_and_clamps_the_attempt_to_the_grace() {
        let (parts, now) = warm();
        let (mut call, mut pair, first) = started(&parts, now);
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
            &parts,
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
            call.poll(&parts, t + grace, &mut |_| {}),
            Step::Done(Finished::Drained { last })
        );
        assert_eq!(call.attempts(), 1);
    }

    #[test]
    fn a_drain_after_the_launch_clamps_both_attempts() {
        let (parts, now) = warm();
        let (mut call, mut pair, _first) = started(&parts, now);
        let (_hedge, at) = launched(&mut call, &mut pair, &parts);
        let grace = ms(1);
        pair.on_drain(&mut call, at, grace);
        assert_eq!(pair.wake_at(), Some(at + grace));
        assert!(pair.is_running(Lane::First) && pair.is_running(Lane::Hedge));
    }

    #[test]
    fn the_first_attempt_wins_and_the_hedge_is_dropped() {
        let (parts, now) = warm();
        let (mut call, mut pair, first) = started(&parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &parts);
        let t = at + ms(1);
        let next = pair.finished(
            &mut call,
            &parts,
            Lane::First,
            Some(first),
            t,
            Outcome::Success,
            true,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Drop(Lane::Hedge));
        pair.abandon(&mut call, &parts, Lane::Hedge, Some(hedge), t, &mut |_| {});
        assert_eq!(pair.wake_at(), None);
        assert_eq!(
            call.poll(&parts, t, &mut |_| {}),
            Step::Done(Finished::Succeeded)
        );
        assert_eq!(
            parts
                .breaker
                .as_ref()
                .unwrap()
                .snapshot(t)
                .consecutive_failures,
            0
        );
    }

    #[test]
    fn the_hedge_wins_and_the_first_attempt_is_dropped() {
        let (parts, now) = warm();
        let (mut call, mut pair, first) = started(&parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &parts);
        let t = at + ms(2);
        let next = pair.finished(
            &mut call,
            &parts,
            Lane::Hedge,
            Some(hedge),
            t,
            Outcome::Success,
            true,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Drop(Lane::First));
        pair.abandon(&mut call, &parts, Lane::First, Some(first), t, &mut |_| {});
        assert_eq!(
            call.poll(&parts, t, &mut |_| {}),
            Step::Done(Finished::Succeeded)
        );
        assert_eq!(call.attempts(), 2);
    }

    #[test]
    fn a_failure_of_the_first_waits_for_the_hedge_which_decides() {
        let (parts, now) = warm();
        let (mut call, mut pair, first) = started(&parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &parts);
        let hedge_deadline = call.attempt_deadline();
        let mut kinds = Vec::new();
        let next = pair.finished(
            &mut call,
            &parts,
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
            &parts,
            Lane::Hedge,
            Some(hedge),
            t,
            Outcome::Success,
            true,
            &mut |_| {},
        );
        assert_eq!(next, PairNext::Over);
        assert_eq!(
            call.poll(&parts, t, &mut |_| {}),
            Step::Done(Finished::Succeeded)
        );
    }

    #[test]
    fn a_permanent_failure_of_one_ends_the_call_and_drops_the_other() {
        let (parts, now) = warm();
        let (mut call, mut pair, first) = started(&parts, now);
        let (_hedge, at) = launched(&mut call, &mut pair, &parts);
        let next = pair.finished(
            &mut call,
            &parts,
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
        let (parts, now) = warm();
        let (mut call, mut pair, first) = started(&parts, now);
        let first_deadline = call.attempt_deadline().unwrap();
        let (hedge, _) = launched(&mut call, &mut pair, &parts);
        let hedge_deadline = call.attempt_deadline().unwrap();

        assert_eq!(pair.wake_at(), Some(first_deadline));
        assert_eq!(pair.due(), Some(Due::Deadline(Lane::First)));
        let next = pair.finished(
            &mut call,
            &parts,
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
            &parts,
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
            call.poll(&parts, hedge_deadline, &mut |_| {}),
            Step::Wait(_)
        ));
        assert_eq!(call.attempts(), 2);
    }

    #[test]
    fn a_declined_hedge_spends_nothing_and_leaves_the_first_attempt_alone() {
        let (parts, now) = warm();
        let (mut call, mut pair, first) = started(&parts, now);
        let first_deadline = call.attempt_deadline();
        let at = pair.wake_at().unwrap();
        let budget = parts.budget.as_ref().unwrap().available(at);
        assert_eq!(pair.due(), Some(Due::Launch));
        // The request cannot be replayed.
        let launched = pair.launch(&mut call, &parts, at, &mut |_| {}, |_| None::<()>);
        assert!(launched.is_none());
        assert!(!pair.is_running(Lane::Hedge));
        assert_eq!(
            (
                call.attempts(),
                parts.budget.as_ref().unwrap().available(at)
            ),
            (1, budget)
        );
        // Never asked again: the first attempt's deadline is all that is left.
        assert_eq!(pair.wake_at(), first_deadline);
        let next = pair.finished(
            &mut call,
            &parts,
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
        let (parts, now) = warm();
        let (mut call, mut pair, first) = started(&parts, now);
        let next = pair.finished(
            &mut call,
            &parts,
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
        let (parts, now) = warm();
        let mut call = Call::begin(&CallSettings::DEFAULT, now);
        let Step::Attempt(_first) = call.poll(&parts, now, &mut |_| {}) else {
            panic!("the first attempt")
        };
        let mut pair = HedgedPair::begin(&call, now, call.hedge_delay(&parts, now));
        assert_eq!(pair.wake_at(), call.attempt_deadline());
        assert_eq!(pair.due(), Some(Due::Deadline(Lane::First)));
    }

    #[test]
    fn a_cancelled_pair_reports_both_attempts_cancelled() {
        let (parts, now) = warm();
        let (mut call, mut pair, first) = started(&parts, now);
        let (hedge, at) = launched(&mut call, &mut pair, &parts);
        pair.abandon(&mut call, &parts, Lane::First, Some(first), at, &mut |_| {});
        pair.abandon(&mut call, &parts, Lane::Hedge, Some(hedge), at, &mut |_| {});
        assert_eq!(pair.wake_at(), None);
        assert_eq!(
            call.poll(&parts, at, &mut |_| {}),
            Step::Done(Finished::Cancelled)
        );
        assert_eq!(
            parts
                .breaker
                .as_ref()
                .unwrap()
                .snapshot(at)
                .consecutive_failures,
            0
        );
    }

    #[test]
    fn a_late_answer_counts_as_a_timeout_unless_it_is_a_success() {
        let (parts, now) = warm();
        let mut call = Call::begin(&CallSettings::DEFAULT, now);
        let Step::Attempt(_permit) = call.poll(&parts, now, &mut |_| {}) else {
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

    // -----------------------------------------------------------------------------------------
    // The win-rate loop

    #[test]
    fn four_losses_in_a_row_halve_the_share_and_a_win_in_between_resets_the_run() {
        let mut share = HedgeShare::new();
        assert_eq!(share.share_per_1024(), 1024);
        for _ in 0..3 {
            share.on_hedge(false);
        }
        share.on_hedge(true);
        for _ in 0..3 {
            share.on_hedge(false);
        }
        assert_eq!(share.share_per_1024(), 1024, "no four losses in a row yet");
        share.on_hedge(false);
        assert_eq!(share.share_per_1024(), 512);
        for _ in 0..4 {
            share.on_hedge(false);
        }
        assert_eq!(share.share_per_1024(), 256);
    }

    #[test]
    fn the_share_never_falls_below_one_call_in_64_and_wins_double_it_back() {
        let mut share = HedgeShare::new();
        for _ in 0..400 {
            share.on_hedge(false);
        }
        assert_eq!(share.share_per_1024(), 16);
        let allowed = (0..640).filter(|_| share.on_call()).count();
        assert_eq!(allowed, 10, "one call in 64");
        let mut seen = Vec::new();
        for _ in 0..7 {
            share.on_hedge(true);
            seen.push(share.share_per_1024());
        }
        assert_eq!(seen, [32, 64, 128, 256, 512, 1024, 1024]);
        assert!(
            (0..10).all(|_| share.on_call()),
            "a full share hedges every call"
        );
    }

    #[test]
    fn the_shared_form_agrees_with_the_mut_form_in_lockstep() {
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut own = HedgeShare::new();
        let shared = SharedHedgeShare::new();
        for _ in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            match rng % 5 {
                0 => {
                    own.on_hedge(true);
                    shared.on_hedge(true);
                }
                1 | 2 => {
                    own.on_hedge(false);
                    shared.on_hedge(false);
                }
                _ => assert_eq!(own.on_call(), shared.on_call()),
            }
            assert_eq!(own.share_per_1024(), shared.share_per_1024());
        }
    }

    /// Breaker learned on 20 ms calls, no budget limit: every hedge the pair asks for runs.
    /// Learned once per thread and copied: the tests below take hundreds of fresh ones, and
    /// under miri learning each anew took minutes.
    fn warm_unlimited() -> (Parts<Breaker>, Instant) {
        std::thread_local! {
            static WARM: (Breaker, Instant) = {
                let breaker = Breaker::of(5, "loop").unwrap();
                let mut now = Instant::from_secs(1);
                for _ in 0..40 {
                    let permit = breaker.try_acquire(now).unwrap();
                    now += ms(20);
                    breaker.on_outcome(now, permit, Outcome::Success, &mut |_| {});
                }
                (breaker, now)
            };
        }
        let (breaker, now) = WARM.with(Clone::clone);
        let parts = Parts::new().breaker(breaker);
        (parts, now)
    }

    /// One hedging call through the pair, the share asked first, against a breaker that learned
    /// 20 ms calls (fresh each call, so the p95 the hedge waits for stays put): the first
    /// attempt answers `first_after` after the hedge would launch, a hedge `hedge_after` after
    /// its launch. Returns whether a hedge ran.
    fn one_call(share: &mut HedgeShare, first_after: Duration, hedge_after: Duration) -> bool {
        let (parts, now) = warm_unlimited();
        let parts = &parts;
        let mut call = Call::begin(&hedging(), now);
        let Step::Attempt(first) = call.poll(parts, now, &mut |_| {}) else {
            panic!("the first attempt")
        };
        let would = call.hedge_delay(parts, now).expect("a warm breaker hedges");
        let after = Some(would).filter(|_| share.on_call());
        let mut pair = HedgedPair::begin(&call, now, after);
        let first_done = now + would + first_after;
        let mut hedge = None;
        let mut at = first_done;
        if let Some(launch) = pair
            .wake_at()
            .filter(|&l| l < first_done && after.is_some())
        {
            assert_eq!(pair.due(), Some(Due::Launch));
            hedge = pair.launch(&mut call, parts, launch, &mut |_| {}, Some);
            at = launch + hedge_after;
        }
        let (lane, loser) = match hedge {
            Some(_) if at < first_done => (Lane::Hedge, Lane::First),
            _ => (Lane::First, Lane::Hedge),
        };
        let end = at.min(first_done);
        let ran = hedge.is_some();
        let (won_permit, lost_permit) = match (lane, hedge) {
            (Lane::Hedge, Some((h, _))) => (h, Some(first)),
            (_, h) => (first, h.map(|(p, _)| p)),
        };
        let next = pair.finished(
            &mut call,
            parts,
            lane,
            Some(won_permit),
            end,
            Outcome::Success,
            true,
            &mut |_| {},
        );
        if let PairNext::Drop(other) = next {
            assert_eq!(other, loser);
            pair.abandon(&mut call, parts, other, lost_permit, end, &mut |_| {});
        }
        if let Some(won) = pair.hedge_won() {
            share.on_hedge(won);
        }
        assert_eq!(pair.hedge_won().is_some(), ran);
        ran
    }

    /// A latency of a dependency with a tail: 20 ms divided by a uniform draw in [0.1, 1], so
    /// between 20 and 200 ms, with `P(X > x) = (20 ms / x - 0.1) / 0.9`.
    fn tail_latency(rng: &mut fastrand::Rng) -> Duration {
        let u = 0.1 + 0.9 * rng.f64();
        Duration::from_nanos((20e6 / u) as u64)
    }

    /// Walks `calls` hedged calls that all succeed, one after the other from `now`, each
    /// attempt taking `latency(lane)`; the first attempt is hedged when it runs past the
    /// delay. Returns how many calls were hedged and how many of those hedges won.
    fn hedged_walk(
        parts: &Parts<Breaker>,
        now: &mut Instant,
        calls: u32,
        latency: &mut dyn FnMut(Lane) -> Duration,
    ) -> (u32, u32) {
        let (mut hedged, mut won) = (0u32, 0u32);
        for _ in 0..calls {
            let start = *now;
            let mut call = Call::begin(&hedging(), start);
            let Step::Attempt(first) = call.poll(parts, start, &mut |_| {}) else {
                panic!("the first attempt")
            };
            let after = call.hedge_delay(parts, start);
            let mut pair = HedgedPair::begin(&call, start, after);
            let first_deadline = call.attempt_deadline();
            let first_done = start + latency(Lane::First);
            let launch = after.map(|a| start + a).filter(|&at| at < first_done);
            let hedge = launch.map(|at| {
                assert_eq!(pair.due(), Some(Due::Launch));
                let (hedge, _) = pair
                    .launch(&mut call, parts, at, &mut |_| {}, Some)
                    .expect("an unlimited budget funds every hedge");
                (hedge, at + latency(Lane::Hedge))
            });
            hedged += u32::from(hedge.is_some());
            let (lane, permit, lost, end) = match hedge {
                Some((hedge, hedge_done)) if hedge_done < first_done => {
                    won += 1;
                    (Lane::Hedge, hedge, Some(first), hedge_done)
                }
                Some((hedge, _)) => (Lane::First, first, Some(hedge), first_done),
                None => (Lane::First, first, None, first_done),
            };
            let deadline = match lane {
                Lane::First => first_deadline,
                Lane::Hedge => call.attempt_deadline(),
            };
            assert!(
                deadline.is_none_or(|d| d > end),
                "the ceiling never cuts the attempt that answers"
            );
            let next = pair.finished(
                &mut call,
                parts,
                lane,
                Some(permit),
                end,
                Outcome::Success,
                true,
                &mut |_| {},
            );
            match lost {
                Some(lost) => {
                    assert_eq!(next, PairNext::Drop(lane.other()));
                    pair.abandon(&mut call, parts, lane.other(), Some(lost), end, &mut |_| {});
                }
                None => assert_eq!(next, PairNext::Over),
            }
            assert_eq!(
                call.poll(parts, end, &mut |_| {}),
                Step::Done(Finished::Succeeded)
            );
            *now = end;
        }
        (hedged, won)
    }

    #[test]
    fn hedges_that_win_leave_the_learned_p95_where_the_dependency_puts_it() {
        // The dependency's p95: (20 / x - 0.1) / 0.9 = 0.05 at x = 20 / 0.145 ms.
        let true_p95 = Duration::from_nanos((20e6 / 0.145) as u64);
        let parts = Parts::new().breaker(Breaker::of(5, "tail").unwrap());
        let parts = &parts;
        let mut rng = fastrand::Rng::with_seed(7);
        let mut now = Instant::from_secs(1);
        // Under miri (which runs the unit tests in CI) a short walk: it checks the path, not
        // the statistics.
        let calls: u32 = if cfg!(miri) { 300 } else { 20_000 };
        let (hedged, won) = hedged_walk(parts, &mut now, calls, &mut |_| tail_latency(&mut rng));
        let learned = parts
            .breaker
            .as_ref()
            .unwrap()
            .hedge_after(now)
            .expect("a warm breaker hedges");
        if cfg!(miri) {
            return;
        }
        // The histogram reads a bucket by its upper bound: up to 1/8 above the true value.
        assert!(
            learned >= true_p95 && learned.as_nanos() <= true_p95.as_nanos() * 9 / 8,
            "learned p95 {learned:?}, the dependency's {true_p95:?} ({hedged} hedges, {won} won)"
        );
        // The calls hedged are those slower than the learned p95 (within a fifth, for the
        // early calls and the draw): about one in 20, less the histogram's rounding up.
        let share = (20e6 / learned.as_nanos() as f64 - 0.1) / 0.9;
        let expected = f64::from(calls) * share;
        assert!(
            (f64::from(hedged) - expected).abs() <= expected / 5.0,
            "{hedged} hedges in {calls} calls, {expected:.0} expected"
        );
        assert!(won > 0, "some hedges won the race");
    }

    #[test]
    fn a_first_attempt_that_always_hangs_leaves_the_hedge_delay_where_it_was() {
        let parts = Parts::new().breaker(Breaker::of(5, "hangs").unwrap());
        let parts = &parts;
        let mut now = Instant::from_secs(1);
        // Warm at 20 ms: no call is slower than the p95, so none is hedged.
        assert_eq!(hedged_walk(parts, &mut now, 40, &mut |_| ms(20)), (0, 0));
        let before = parts
            .breaker
            .as_ref()
            .unwrap()
            .hedge_after(now)
            .expect("a warm breaker hedges");
        // Now every first attempt hangs and every hedge answers in 20 ms: each call is the
        // hedge's, and what the breaker learns of the hung attempts must not move the delay
        // (learned at the pair's latency, it climbed a bucket every few calls until the calls
        // read as slow and tripped the breaker).
        let calls: u32 = if cfg!(miri) { 100 } else { 2_000 };
        let (hedged, won) = hedged_walk(parts, &mut now, calls, &mut |lane| match lane {
            Lane::First => Duration::from_secs(10),
            Lane::Hedge => ms(20),
        });
        assert_eq!((hedged, won), (calls, calls));
        assert_eq!(parts.breaker.as_ref().unwrap().hedge_after(now), Ok(before));
        assert_eq!(
            parts.breaker.as_ref().unwrap().state(now),
            crate::state::State::Closed
        );
    }

    #[test]
    fn hedges_that_stop_winning_are_cut_to_the_floor_and_come_back_when_they_win() {
        let mut share = HedgeShare::new();
        // The first attempt always answers 1 ms after the hedge would launch: every hedge
        // loses the race.
        let mut hedged = 0;
        for _ in 0..300 {
            hedged += u32::from(one_call(&mut share, ms(1), ms(50)));
        }
        assert_eq!(share.share_per_1024(), 16);
        // 4 at the full share, then 4 each at 1/2, 1/4, ... 1/32 (in 252 calls): 24 hedges
        // before the floor, then one call in 64 of what is left.
        assert_eq!(hedged, 24, "hedges out of 300 calls");
        // Now the first attempt hangs for 10 s and every hedge answers 1 ms after launch.
        let (mut calls, mut hedges) = (0, 0);
        while share.share_per_1024() < 1024 {
            hedges += u32::from(one_call(&mut share, Duration::from_secs(10), ms(1)));
            calls += 1;
            assert!(calls <= 126, "the share never grew back");
        }
        // Six winning hedges double 16 back to 1024, each within 1 / share calls of the last:
        // at most 64 + 32 + 16 + 8 + 4 + 2 calls.
        assert_eq!(hedges, 6);
        assert!(
            one_call(&mut share, Duration::from_secs(10), ms(1)),
            "a full share hedges the next call"
        );
    }
}
