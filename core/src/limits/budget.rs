//! The retry budget: retries bounded per client, so that they are bounded across a fleet without
//! any coordination.
//!
//! Each successful attempt funds [`fraction`](BudgetSettings::fraction) of a retry (0.1 by
//! default: one retry per ten successes), and a floor rate (3 per second by default) keeps a
//! trickle of retries possible for a quiet client. Both fill one bucket whose capacity is 10 s of
//! the floor rate (30 retries at the defaults, at least 1). The bucket is full at start, and
//! deposits beyond its capacity are lost, so an hour of health banks no storm. Only retries draw
//! on the budget: the first attempt of a call always runs.
//!
//! # Exact arithmetic
//! Tokens are counted in millionths of a retry and the fraction in parts per million, so ten
//! successes at 0.1 fund exactly one retry, and 0.6 of a retry is never mistaken for a whole one.
//! The floor rate is held in thousandths of a retry per second, which is exactly that many
//! millionths of a retry per millisecond: the floor accrues in whole milliseconds with no
//! remainder to lose, so accrual over many small steps equals accrual over one big step.
//!
//! # Shape
//! Every rule is a pure function of (state, settings, now, input) on a small `Copy` state that
//! packs losslessly into one `u64`, so the same rules can run inside a compare-exchange loop over
//! a single atomic word. [`Budget`] is the single-threaded `&mut` form: settings plus that state.
//!
//! # Time
//! The state keeps the millisecond up to which the floor has accrued as a wrapping 32-bit stamp
//! (that is what lets tokens and stamp share the word). A clock that steps back by up to 24.8
//! days (2^31 ms) is no time passed. Further back it cannot be told from that much idle time:
//! it counts as time passed, and may refill the budget to its capacity, never beyond.

use core::fmt;

use crate::cell::{const_unless_loom, sealed, word, Atomic, Local, Storage, Word};
use crate::error::{Bound, Field, Problems, RefusalReason, Refused, SettingsError};
use crate::name::Name;
use crate::outcome::Outcome;
use crate::part::Funding;
use crate::ratio::{Ratio, PPM};
use crate::time::Tick;
use crate::time::{Duration, Instant};

/// One whole retry, in millionths of a retry (the budget's token unit).
const TOKEN: u32 = PPM;

/// Milliseconds of the floor rate the bucket holds (its capacity is 10 s of the floor).
const CAPACITY_MS: u32 = 10_000;

/// The largest floor rate, in thousandths of a retry per second (400 retries per second).
///
/// The capacity (10 s of the floor, in millionths of a retry) must fit the packed state's 32-bit
/// token field: 400 per second gives 4000 retries, `4_000_000_000` millionths, below `u32::MAX`.
const MAX_FLOOR_MILLI: u32 = 400_000;

/// How far behind the state's timestamp a reading may lie and still be taken for a late reading
/// of the same clock (a racing thread in the shared form) rather than a clock that was reset.
/// Within it the timestamp stays put, so a late reading never makes the floor accrue twice.
const LATE_READING_MS: u32 = 1_000;

/// Readings more than this many milliseconds ahead of the timestamp are taken for readings
/// behind it (the 32-bit millisecond timestamp wraps every ~49.7 days).
const MAX_FORWARD_MS: u32 = (1 << 31) - 1;

/// How old the stamp of a full budget may grow before an outcome refreshes it (about 12 days):
/// well inside [`MAX_FORWARD_MS`], so a full budget left unwritten reads the same as one
/// written at every success.
const FRESH_MS: u32 = 1 << 30;

/// The settings of a retry budget, its name included. Built with [`BudgetSettings::builder`],
/// validated by [`BudgetSettingsBuilder::build`], immutable after.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | fraction | 0.1 | a retry funded per successful attempt; in `[0, 1]` |
/// | floor | 3 per second | accrues whatever the traffic; in `[0, 400]` per second |
/// | capacity | 10 s of the floor | at least 1 retry; 30 at the defaults |
///
/// A fraction of 0 is allowed: only the floor then funds retries, and the budget is a plain
/// retry-rate limit. A floor of 0 is allowed too: only successes fund retries, the capacity is
/// one retry, and an empty budget reports `retry_after` as [`Duration::MAX`] ("not by the passing
/// of time").
///
/// ```
/// use stormguard_core::{BudgetSettings, Duration};
/// const PAYMENTS: BudgetSettings = match BudgetSettings::builder("payments")
///     .fraction_ppm(200_000)          // one retry per five successes
///     .floor_per_second_milli(10_000) // and at least ten a second
///     .build()
/// {
///     Ok(s) => s,
///     Err(_) => panic!("invalid budget settings"),
/// };
/// assert_eq!(PAYMENTS.capacity_micro(), 100_000_000); // 100 retries
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BudgetSettings {
    name: Name,
    fraction: Ratio,
    floor_milli: u32,
}

/// Builds a [`BudgetSettings`]; every method is `const`, so a budget's settings can live in a
/// `const` or `static`.
///
/// Values are checked by [`build`](BudgetSettingsBuilder::build), never clamped on the way in.
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BudgetSettingsBuilder {
    name: Name,
    // Wider than the settings' own fields, so an out-of-range input survives to `build()`,
    // which names it: negative (or NaN) is stored as -1.
    fraction_ppm: i64,
    floor_milli: i64,
}

impl BudgetSettings {
    /// The highest floor rate, in retries per second. The capacity (10 s of the floor) then holds
    /// 4000 retries: the most the budget's single-word state can count.
    pub const MAX_FLOOR_PER_SECOND: u32 = MAX_FLOOR_MILLI / 1000;

    /// A builder holding the defaults (0.1 per success, 3 per second), for a budget called
    /// `name`.
    pub const fn builder(name: &'static str) -> BudgetSettingsBuilder {
        BudgetSettingsBuilder::defaults(Name::new(name))
    }

    /// A builder holding the defaults, for a budget whose name came from elsewhere (a
    /// configuration file).
    pub const fn builder_named(name: Name) -> BudgetSettingsBuilder {
        BudgetSettingsBuilder::defaults(name)
    }

    /// Every default, for a budget called `name`.
    ///
    /// For a name written in the code. This shortcut cannot fail, so a name that `build` refuses
    /// (blank, or holding a control character) is replaced by `"unnamed"` here;
    /// `builder(name).build()` reports it as an error instead.
    #[must_use]
    pub const fn defaults(name: &'static str) -> BudgetSettings {
        match BudgetSettings::builder(name).build() {
            Ok(s) => s,
            // The defaults are valid (a test checks it): only a name `build` refuses gets here.
            Err(_) => BudgetSettings {
                name: Name::new("unnamed"),
                fraction: Ratio::from_ppm_const(100_000),
                floor_milli: 3_000,
            },
        }
    }

    /// The budget's name.
    #[must_use]
    pub const fn name(&self) -> &Name {
        &self.name
    }

    /// The share of a retry each successful attempt funds.
    #[must_use]
    pub const fn fraction(&self) -> Ratio {
        self.fraction
    }

    /// The floor rate, in thousandths of a retry per second (`3000` is 3 per second). This is
    /// also the floor's accrual in millionths of a retry per millisecond.
    #[must_use]
    pub const fn floor_per_second_milli(&self) -> u32 {
        self.floor_milli
    }

    /// The bucket's capacity in millionths of a retry: 10 s of the floor rate, at least one
    /// retry (`30_000_000` at the defaults).
    #[must_use]
    pub const fn capacity_micro(&self) -> u32 {
        // At most MAX_FLOOR_MILLI * 10_000 = 4e9: fits (checked by `build()`).
        let floor = self.floor_milli.saturating_mul(CAPACITY_MS);
        if floor < TOKEN {
            TOKEN
        } else {
            floor
        }
    }

    /// The bucket's capacity in whole retries (rounded down).
    #[must_use]
    pub const fn capacity(&self) -> u32 {
        self.capacity_micro() / TOKEN
    }
}

impl BudgetSettingsBuilder {
    const fn defaults(name: Name) -> BudgetSettingsBuilder {
        BudgetSettingsBuilder {
            name,
            // One retry per ten successes bounds a fleet's retries to 10% of its traffic
            // whatever the call graph: three layers each retrying three times cannot multiply.
            fraction_ppm: 100_000,
            // Enough for a quiet client to ride out a blip; a capacity of 30 (10 s of it) is far
            // too few to amplify an outage.
            floor_milli: 3_000,
        }
    }

    /// Renames the budget.
    pub const fn name(mut self, name: Name) -> Self {
        self.name = name;
        self
    }

    /// The share of a retry each successful attempt funds, in parts per million (default
    /// `100_000`, a tenth; at most `1_000_000`, one retry per success).
    pub const fn fraction_ppm(mut self, ppm: u32) -> Self {
        self.fraction_ppm = ppm as i64;
        self
    }

    /// The share of a retry each successful attempt funds (default 0.1), rounded to the nearest
    /// part per million; a positive share never rounds to zero. A value outside `[0, 1]`, or
    /// NaN, is reported by `build()`.
    pub const fn fraction(mut self, fraction: f64) -> Self {
        self.fraction_ppm = if fraction.is_nan() || fraction < 0.0 {
            -1
        } else if fraction > 1.0 {
            (PPM as i64).saturating_add(1)
        } else {
            match Ratio::from_f64(fraction) {
                Some(r) if r.ppm() == 0 && fraction > 0.0 => 1,
                Some(r) => r.ppm() as i64,
                // Unreachable: `fraction` is in [0, 1] here.
                None => -1,
            }
        };
        self
    }

    /// The floor rate in thousandths of a retry per second (default `3000`, 3 per second; at
    /// most `400_000`).
    pub const fn floor_per_second_milli(mut self, milli: u32) -> Self {
        self.floor_milli = milli as i64;
        self
    }

    /// The floor rate in retries per second (default 3.0), rounded to the nearest thousandth; a
    /// positive rate never rounds to zero. A negative, NaN, infinite or too large rate is
    /// reported by `build()`.
    pub const fn floor_per_second(mut self, per_second: f64) -> Self {
        self.floor_milli = if per_second.is_nan() || per_second < 0.0 {
            -1
        } else if per_second > MAX_FLOOR_MILLI as f64 / 1000.0 {
            (MAX_FLOOR_MILLI as i64).saturating_add(1)
        } else {
            // In [0, 400_000.5] here, so the cast is exact after truncation.
            let milli = (per_second * 1000.0 + 0.5) as i64;
            if milli == 0 && per_second > 0.0 {
                1
            } else {
                milli
            }
        };
        self
    }

    /// Every setting at fault, in the order [`build`](Self::build) checks them: empty when
    /// the settings are valid.
    pub const fn problems(&self) -> Problems {
        let mut p = Problems::new();
        p.push_result(SettingsError::check_name(&self.name));
        if self.fraction_ppm < 0 {
            p.push(SettingsError::new(Field::RetryFraction, Bound::AtLeast(0)));
        } else if self.fraction_ppm > PPM as i64 {
            p.push(SettingsError::new(Field::RetryFraction, Bound::AtMost(1)));
        }
        if self.floor_milli < 0 {
            p.push(SettingsError::new(Field::FloorRate, Bound::AtLeast(0)));
        } else if self.floor_milli > MAX_FLOOR_MILLI as i64 {
            p.push(SettingsError::new(
                Field::FloorRate,
                Bound::AtMost(BudgetSettings::MAX_FLOOR_PER_SECOND as u64),
            ));
        }
        p
    }

    /// Checks every bound and returns the settings, or every setting at fault.
    // No allocation in the core: the list is the error, by value, on a cold path.
    #[allow(clippy::result_large_err)]
    pub const fn build_all(self) -> Result<BudgetSettings, Problems> {
        let p = self.problems();
        if p.is_empty() {
            Ok(self.assemble())
        } else {
            Err(p)
        }
    }

    /// Checks every bound and returns the settings, or the first setting at fault (see
    /// [`problems`](Self::problems) for all of them).
    pub const fn build(self) -> Result<BudgetSettings, SettingsError> {
        match self.problems().first() {
            Some(e) => Err(e),
            None => Ok(self.assemble()),
        }
    }

    /// The settings, once every bound has been checked.
    const fn assemble(self) -> BudgetSettings {
        BudgetSettings {
            name: self.name,
            // Both checked by `problems` to lie in [0, 1_000_000] and [0, 400_000].
            fraction: Ratio::from_ppm_const(self.fraction_ppm as u32),
            floor_milli: self.floor_milli as u32,
        }
    }
}

impl fmt::Display for BudgetSettings {
    /// E.g. `10% of a retry per success, at least 3 per second, up to 30 banked`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of a retry per success, at least ", self.fraction)?;
        write_thousandths(f, self.floor_milli)?;
        f.write_str(" per second, up to ")?;
        write_thousandths(f, self.capacity_micro() / 1000)?;
        f.write_str(" banked")
    }
}

/// `2500` as `2.5`, `3000` as `3`.
fn write_thousandths(f: &mut fmt::Formatter<'_>, milli: u32) -> fmt::Result {
    let whole = milli / 1000;
    let mut frac = milli % 1000;
    if frac == 0 {
        return write!(f, "{whole}");
    }
    let mut width: usize = 3;
    while frac.is_multiple_of(10) {
        frac /= 10;
        width = width.saturating_sub(1);
    }
    write!(f, "{whole}.{frac:0width$}")
}

/// The budget's whole mutable state: tokens and the millisecond they were counted at. Small,
/// `Copy`, and packed losslessly into one `u64` by [`BudgetState::pack`], so the shared form can
/// install it with a single compare-exchange.
///
/// # Layout and limits
/// - bits 0..32: `tokens`, in millionths of a retry. A budget holds at most 4000 retries
///   (`4_000_000_000`), which is why the floor rate is capped at 400 per second. Any value above
///   the capacity means "full, and never touched": the initial state, which needs no `now`.
/// - bits 32..64: `stamp`, the millisecond (since the caller's epoch, wrapping every 2^32 ms,
///   about 49.7 days) up to which the floor has been counted.
///
/// A reading up to 2^31 - 1 ms (about 24.8 days) after the stamp counts as time passed; any
/// other reading counts as a clock that stepped back: no time passes. A budget left untouched
/// for longer than about 24.8 days while not full therefore misses the floor's accrual over that
/// gap (a full budget misses nothing; the floor refills an empty one within 10 s), and a clock
/// stepped back by more than 24.8 days is indistinguishable from idle time and counts as time
/// passed: the floor may refill the budget, never beyond its capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) struct BudgetState {
    /// Millionths of a retry; above the capacity means full and untouched.
    pub(crate) tokens: u32,
    /// The wrapping millisecond up to which the floor has been counted.
    pub(crate) stamp: u32,
}

impl BudgetState {
    /// A full budget that has not seen a clock yet.
    pub(crate) const UNTOUCHED: BudgetState = BudgetState {
        tokens: u32::MAX,
        stamp: 0,
    };

    /// The state as one word: `stamp` in the high half, `tokens` in the low half.
    pub(crate) const fn pack(self) -> u64 {
        ((self.stamp as u64) << 32) | self.tokens as u64
    }

    /// The inverse of [`BudgetState::pack`].
    pub(crate) const fn unpack(word: u64) -> BudgetState {
        // Truncation is the point: each half is one field.
        BudgetState {
            tokens: (word & 0xFFFF_FFFF) as u32,
            stamp: (word >> 32) as u32,
        }
    }

    /// The state brought up to `now`: the floor's accrual added (capped at capacity) and the
    /// stamp moved to `now`'s millisecond. A reading behind the stamp adds nothing; the stamp
    /// stays put for a late reading (so it is not counted twice) and moves back to `now` for a
    /// clock that was set back further than that (so accrual resumes from there).
    pub(crate) fn settle(self, settings: &BudgetSettings, now: Instant) -> BudgetState {
        let capacity = settings.capacity_micro();
        let now_ms = Tick::of(now).0;
        if self.tokens > capacity {
            return BudgetState {
                tokens: capacity,
                stamp: now_ms,
            };
        }
        let ahead = now_ms.wrapping_sub(self.stamp);
        if ahead <= MAX_FORWARD_MS {
            let accrued = u64::from(ahead).saturating_mul(u64::from(settings.floor_milli));
            let tokens = u64::from(self.tokens)
                .saturating_add(accrued)
                .min(u64::from(capacity));
            BudgetState {
                // At most `capacity`, a u32.
                tokens: u32::try_from(tokens).unwrap_or(capacity),
                stamp: now_ms,
            }
        } else if ahead.wrapping_neg() <= LATE_READING_MS {
            self
        } else {
            BudgetState {
                tokens: self.tokens,
                stamp: now_ms,
            }
        }
    }

    /// Spends one retry if a whole one is there; otherwise refuses with the time the floor needs
    /// to accrue the missing part, counted from `now`. Returns the settled state either way
    /// (storing it after a refusal is harmless, and optional).
    pub(crate) fn withdraw(
        self,
        settings: &BudgetSettings,
        now: Instant,
    ) -> (Result<(), Refused>, BudgetState) {
        let settled = self.settle(settings, now);
        match settled.tokens.checked_sub(TOKEN) {
            Some(tokens) => (
                Ok(()),
                BudgetState {
                    tokens,
                    stamp: settled.stamp,
                },
            ),
            None => (
                Err(Refused {
                    reason: RefusalReason::BudgetExhausted,
                    retry_after: settled.time_to_token(settings, now),
                }),
                settled,
            ),
        }
    }

    /// Adds `micro` millionths of a retry after settling; what does not fit is lost.
    pub(crate) fn deposit(
        self,
        settings: &BudgetSettings,
        now: Instant,
        micro: u32,
    ) -> BudgetState {
        let settled = self.settle(settings, now);
        BudgetState {
            tokens: settled
                .tokens
                .saturating_add(micro)
                .min(settings.capacity_micro()),
            stamp: settled.stamp,
        }
    }

    /// Funds `fraction` of a retry on a success; any other outcome changes nothing but the clock.
    pub(crate) fn on_outcome(
        self,
        settings: &BudgetSettings,
        now: Instant,
        outcome: Outcome,
    ) -> BudgetState {
        match outcome {
            Outcome::Success => self.deposit(settings, now, settings.fraction.ppm()),
            _ => self.settle(settings, now),
        }
    }

    /// How long from `now` until this (settled) state surely holds a whole retry: the floor's
    /// time for the missing part in whole milliseconds (rounded up), counted from `now`, so it
    /// reads the same wherever in a millisecond `now` falls (three per second from empty: 334
    /// ms). The floor accrues at the clock's whole milliseconds, so asking again a fraction of
    /// a millisecond sooner may succeed too; asking at `now + retry_after` always does.
    fn time_to_token(self, settings: &BudgetSettings, now: Instant) -> Duration {
        self.time_to_hold(TOKEN, settings, now)
    }

    /// Whether sheddable work may retry: refused with [`RefusalReason::Shed`] once more than
    /// half of the capacity is spent, with the floor's time (from `now`) to refill it to half.
    /// Changes nothing.
    pub(crate) fn check_shed(self, settings: &BudgetSettings, now: Instant) -> Result<(), Refused> {
        let settled = self.settle(settings, now);
        let capacity = settings.capacity_micro();
        // More than half spent is fewer than the upper half of the capacity left.
        let half = capacity.saturating_sub(capacity / 2);
        if settled.tokens >= half {
            return Ok(());
        }
        Err(Refused {
            reason: RefusalReason::Shed,
            retry_after: settled.time_to_hold(half, settings, now),
        })
    }

    /// How long from `now` until this (settled) state holds `target` millionths of a retry,
    /// by the floor alone ([`BudgetState::time_to_token`] for one retry).
    fn time_to_hold(self, target: u32, settings: &BudgetSettings, now: Instant) -> Duration {
        let Some(missing) = target.checked_sub(self.tokens) else {
            return Duration::ZERO;
        };
        if missing == 0 {
            return Duration::ZERO;
        }
        let rate = settings.floor_milli;
        // Rounded up: the token is there at the end of the millisecond that completes it.
        let Some(ms) = missing
            .saturating_add(rate.saturating_sub(1))
            .checked_div(rate)
        else {
            // No floor: only successes can fund the next retry.
            return Duration::MAX;
        };
        // The stamp may lie ahead of `now` after a late reading; the floor counts from it.
        let now_ms = Tick::of(now).0;
        let lead = self.stamp.wrapping_sub(now_ms);
        let lead = if lead <= LATE_READING_MS { lead } else { 0 };
        // Whole milliseconds from `now` itself: the part of the current millisecond already
        // gone is not taken off, or the answer would depend on where in it the clock stands.
        Duration::from_millis(u64::from(ms).saturating_add(u64::from(lead)))
    }
}

/// The budget over some storage: one word, a `Cell` in the single-threaded form and an atomic
/// in the shared one, both driven by the same pure rules through load / step / compare-exchange.
/// The stored word is the packed state XOR the packed [`BudgetState::UNTOUCHED`], so a zeroed
/// word is a full, untouched budget and the shared form can be built in a `const`.
#[derive(Clone, Debug)]
pub(crate) struct BudgetCore<W> {
    settings: BudgetSettings,
    word: W,
}

const UNTOUCHED_WORD: u64 = BudgetState::UNTOUCHED.pack();

impl<W: Word> BudgetCore<W> {
    const_unless_loom! {
        pub(crate) fn new(settings: BudgetSettings) -> BudgetCore<W> {
            BudgetCore { settings, word: word!(W) }
        }
    }

    fn state(&self) -> BudgetState {
        BudgetState::unpack(self.word.get() ^ UNTOUCHED_WORD)
    }

    fn step(&self, mut f: impl FnMut(BudgetState) -> BudgetState) {
        self.word
            .update(|w| f(BudgetState::unpack(w ^ UNTOUCHED_WORD)).pack() ^ UNTOUCHED_WORD);
    }

    pub(crate) fn try_withdraw(&self, now: Instant) -> Result<(), Refused> {
        let mut result = Ok(());
        self.step(|s| {
            let (r, next) = s.withdraw(&self.settings, now);
            result = r;
            next
        });
        result
    }

    pub(crate) fn on_outcome(&self, now: Instant, outcome: Outcome) {
        if self.full_at(now) {
            return;
        }
        self.step(|s| s.on_outcome(&self.settings, now, outcome));
    }

    pub(crate) fn deposit(&self, now: Instant) {
        if self.full_at(now) {
            return;
        }
        self.step(|s| s.deposit(&self.settings, now, self.settings.fraction.ppm()));
    }

    /// Gives back one whole retry taken by [`try_withdraw`](Self::try_withdraw) for an attempt
    /// that never started; what no longer fits is lost, as with any deposit.
    pub(crate) fn refund(&self, now: Instant) {
        if self.full_at(now) {
            return;
        }
        self.step(|s| s.deposit(&self.settings, now, TOKEN));
    }

    /// `true` when the budget is full and its stamp fresh: then no outcome and no deposit can
    /// change what it holds (what does not fit is lost), so the common case of a healthy
    /// dependency, a full budget and a success, is one load and no write. The stamp is kept
    /// within [`FRESH_MS`] of `now` so that it never ages into a reading the clock rules would
    /// take for a step back.
    #[inline]
    fn full_at(&self, now: Instant) -> bool {
        let s = self.state();
        let capacity = self.settings.capacity_micro();
        s.tokens > capacity
            || (s.tokens == capacity && Tick::of(now).0.wrapping_sub(s.stamp) <= FRESH_MS)
    }

    pub(crate) fn check_shed(&self, now: Instant) -> Result<(), Refused> {
        self.state().check_shed(&self.settings, now)
    }

    pub(crate) fn available(&self, now: Instant) -> u32 {
        self.state().settle(&self.settings, now).tokens / TOKEN
    }

    pub(crate) fn utilization(&self, now: Instant) -> Ratio {
        utilization(self.state().settle(&self.settings, now), &self.settings)
    }

    pub(crate) fn snapshot(&self, now: Instant) -> BudgetSnapshot {
        let state = self.state().settle(&self.settings, now);
        BudgetSnapshot {
            name: self.settings.name,
            available: state.tokens / TOKEN,
            tokens_micro: state.tokens,
            capacity_micro: self.settings.capacity_micro(),
            utilization: utilization(state, &self.settings),
        }
    }

    pub(crate) const fn settings(&self) -> &BudgetSettings {
        &self.settings
    }
}

/// A retry budget: ask it before every retry, tell it every outcome. Its state is one word, in
/// a `Cell` ([`Budget`], for one thread: `Send`, not `Sync`; cloning copies it) or an atomic
/// ([`SharedBudget`], lock-free, usable in a `static`); one set of methods and one set of rules
/// for both (see [`Storage`]).
///
/// Call order: [`try_withdraw`](BudgetIn::try_withdraw) before each retry (never before a
/// call's first attempt); [`on_outcome`](BudgetIn::on_outcome) after every attempt, first
/// attempts included, since successes fund retries. Reading ([`available`](BudgetIn::available),
/// [`utilization`](BudgetIn::utilization), [`snapshot`](BudgetIn::snapshot)) changes nothing.
///
/// ```
/// use stormguard_core::{Budget, BudgetSettings, Instant, Duration, Outcome, RefusalReason};
///
/// let mut budget = Budget::new(BudgetSettings::defaults("search"));
/// let now = Instant::from_secs(1);
/// assert_eq!(budget.available(now), 30);
/// for _ in 0..30 {
///     budget.try_withdraw(now)?;
/// }
/// let refused = budget.try_withdraw(now).unwrap_err();
/// assert_eq!(refused.reason, RefusalReason::BudgetExhausted);
/// assert_eq!(refused.retry_after, Duration::from_millis(334)); // a third of a second, rounded up
/// for _ in 0..10 {
///     budget.on_outcome(now, Outcome::Success);
/// }
/// assert_eq!(budget.available(now), 1);
/// # Ok::<(), stormguard_core::Refused>(())
/// ```
#[derive(Debug)]
pub struct BudgetIn<C: Storage = Local> {
    core: BudgetCore<<C as sealed::Storage>::Word>,
}

/// A retry budget for one thread: see [`BudgetIn`].
pub type Budget = BudgetIn<Local>;

impl Clone for Budget {
    fn clone(&self) -> Self {
        BudgetIn {
            core: self.core.clone(),
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Budget {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "Budget({})", self.core.settings().name());
    }
}

impl<C: Storage> BudgetIn<C> {
    const_unless_loom! {
        /// A full budget; usable in a `static`. It needs no clock reading: the floor starts
        /// counting at the first `now` it is given.
        #[must_use]
        pub fn new(settings: BudgetSettings) -> Self {
            BudgetIn { core: BudgetCore::new(settings) }
        }
    }

    /// Spends one retry, or refuses with [`RefusalReason::BudgetExhausted`] and the time the
    /// floor rate needs to accrue the missing part of one retry, counted from `now`
    /// ([`Duration::MAX`] with a zero floor: only successes can fund it).
    pub fn try_withdraw(&self, now: Instant) -> Result<(), Refused> {
        self.core.try_withdraw(now)
    }

    /// Records an attempt's outcome: a [`Outcome::Success`] funds
    /// [`fraction`](BudgetSettings::fraction) of a retry; nothing else funds or costs anything.
    pub fn on_outcome(&self, now: Instant, outcome: Outcome) {
        self.core.on_outcome(now, outcome);
    }

    /// Funds [`fraction`](BudgetSettings::fraction) of a retry, as a success does. Beyond the
    /// capacity it is lost.
    pub fn deposit(&self, now: Instant) {
        self.core.deposit(now);
    }

    /// Whole retries the budget would fund at `now`.
    #[must_use]
    pub fn available(&self, now: Instant) -> u32 {
        self.core.available(now)
    }

    /// Whether work labelled [sheddable](crate::call::Criticality::Sheddable) may retry at
    /// `now`: refused with [`RefusalReason::Shed`] once more than half of the budget is spent,
    /// with the floor's time to refill it to half. Changes nothing; the retry itself is still
    /// funded by [`try_withdraw`](BudgetIn::try_withdraw).
    ///
    /// ```
    /// use stormguard_core::{Budget, BudgetSettings, Instant, RefusalReason};
    /// let mut budget = Budget::new(BudgetSettings::defaults("api")); // 30 retries
    /// let now = Instant::from_secs(1);
    /// for _ in 0..15 {
    ///     budget.try_withdraw(now)?;
    /// }
    /// assert!(budget.check_shed(now).is_ok()); // half spent: not more
    /// budget.try_withdraw(now)?;
    /// assert_eq!(budget.check_shed(now).unwrap_err().reason, RefusalReason::Shed);
    /// # Ok::<(), stormguard_core::Refused>(())
    /// ```
    pub fn check_shed(&self, now: Instant) -> Result<(), Refused> {
        self.core.check_shed(now)
    }

    /// How much of the budget is spent: 0 when full, 1 when empty. A budget that sits near 1 is
    /// a client whose retries are being refused.
    #[must_use]
    pub fn utilization(&self, now: Instant) -> Ratio {
        self.core.utilization(now)
    }

    /// The budget's name, contents and utilization at `now`, for health endpoints and metrics.
    #[must_use]
    pub fn snapshot(&self, now: Instant) -> BudgetSnapshot {
        self.core.snapshot(now)
    }

    /// The settings the budget was built with.
    #[must_use]
    pub const fn settings(&self) -> &BudgetSettings {
        self.core.settings()
    }
}

fn utilization(settled: BudgetState, settings: &BudgetSettings) -> Ratio {
    let capacity = settings.capacity_micro();
    let spent = capacity.saturating_sub(settled.tokens);
    Ratio::of(u64::from(spent), u64::from(capacity)).unwrap_or(Ratio::ONE)
}

/// What a budget holds at one moment, for health endpoints and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct BudgetSnapshot {
    /// The budget's name.
    pub name: Name,
    /// Whole retries it would fund.
    pub available: u32,
    /// What it holds, in millionths of a retry.
    pub tokens_micro: u32,
    /// What it can hold, in millionths of a retry.
    pub capacity_micro: u32,
    /// How much is spent: 0 when full, 1 when empty.
    pub utilization: Ratio,
}

impl<C: Storage> Funding for BudgetIn<C> {
    #[inline]
    fn try_fund_retry(&self, now: Instant) -> Result<(), Refused> {
        self.core.try_withdraw(now)
    }
    fn check_shed(&self, now: Instant) -> Result<(), Refused> {
        self.core.check_shed(now)
    }
    fn refund_retry(&self, now: Instant) {
        self.core.refund(now);
    }
    #[inline]
    fn on_outcome(&self, now: Instant, outcome: Outcome) {
        self.core.on_outcome(now, outcome);
    }
}

/// A retry budget shared by many threads through `&self`, lock-free: one atomic word driven by
/// the rules of [`Budget`](crate::Budget).
///
/// ```
/// use stormguard_core::{BudgetSettings, Instant, Outcome, SharedBudget};
///
/// static RETRIES: SharedBudget = SharedBudget::new(BudgetSettings::defaults("payments"));
/// let now = Instant::from_secs(1);
/// assert!(RETRIES.try_withdraw(now).is_ok());
/// RETRIES.on_outcome(now, Outcome::Success);
/// assert_eq!(RETRIES.available(now), 29);
/// ```
pub type SharedBudget = BudgetIn<Atomic>;

#[cfg(feature = "defmt")]
impl defmt::Format for SharedBudget {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "SharedBudget({})", self.core.settings().name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Instant = Instant::from_secs(10_000);

    fn budget() -> Budget {
        Budget::new(BudgetSettings::defaults("test"))
    }

    fn with(fraction_ppm: u32, floor_milli: u32) -> Budget {
        match BudgetSettings::builder("test")
            .fraction_ppm(fraction_ppm)
            .floor_per_second_milli(floor_milli)
            .build()
        {
            Ok(s) => Budget::new(s),
            Err(e) => panic!("{e}"),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_full_budget_reads_the_same_whether_or_not_its_successes_were_written() {
        // A full budget skips the write for a success; across months of successes (stamps far
        // older than the clock rules' horizons) it must still hold exactly its capacity, and
        // refill from the floor exactly as one written at every success.
        let mut b = budget();
        let mut now = T0;
        assert_eq!(drain(&mut b, now), 30);
        now += Duration::from_secs(10); // the floor refills it: 3 a second
        for _ in 0..(90 * 24) {
            now += Duration::from_secs(3600);
            b.on_outcome(now, Outcome::Success);
            assert_eq!(b.available(now), 30);
        }
        assert_eq!(drain(&mut b, now), 30);
        assert_eq!(b.available(now + ms(333)), 0);
        assert_eq!(b.available(now + ms(334)), 1);
        assert_eq!(b.available(now + Duration::from_secs(10)), 30);
    }

    /// Spends every whole retry at `now`; returns how many there were.
    #[track_caller]
    fn drain(b: &mut Budget, now: Instant) -> u32 {
        let mut n = 0;
        while b.try_withdraw(now).is_ok() {
            n += 1;
        }
        n
    }

    #[track_caller]
    fn succeed(b: &mut Budget, now: Instant, times: u32) {
        for _ in 0..times {
            b.on_outcome(now, Outcome::Success);
        }
    }

    #[track_caller]
    fn refusal(b: &mut Budget, now: Instant) -> Refused {
        match b.try_withdraw(now) {
            Ok(()) => panic!("expected a refusal at {now}"),
            Err(r) => r,
        }
    }

    #[test]
    fn the_defaults_are_valid_and_match_the_design() {
        assert!(BudgetSettings::builder("x").build().is_ok());
        let s = BudgetSettings::defaults("x");
        assert_eq!(s.fraction().ppm(), 100_000);
        assert_eq!(s.floor_per_second_milli(), 3_000);
        assert_eq!(s.capacity(), 30);
        assert_eq!(s.capacity_micro(), 30_000_000);
        assert_eq!(s.name(), &"x");
    }

    #[test]
    fn a_budget_is_full_at_start_with_thirty_retries_at_the_defaults() {
        let mut b = budget();
        assert_eq!(b.available(T0), 30);
        assert_eq!(b.utilization(T0), Ratio::ZERO);
        assert_eq!(drain(&mut b, T0), 30);
        assert_eq!(b.available(T0), 0);
    }

    #[test]
    fn a_budget_is_full_at_start_whatever_the_first_clock_reading() {
        for now in [
            Instant::ZERO,
            Instant::from_millis(u64::from(u32::MAX)),
            Instant::MAX,
        ] {
            let mut b = budget();
            assert_eq!(drain(&mut b, now), 30, "at {now}");
        }
    }

    #[test]
    fn ten_successes_at_a_tenth_fund_exactly_one_retry() {
        let mut b = with(100_000, 0);
        assert_eq!(drain(&mut b, T0), 1);
        succeed(&mut b, T0, 9);
        assert_eq!(b.available(T0), 0);
        assert!(b.try_withdraw(T0).is_err());
        succeed(&mut b, T0, 1);
        assert_eq!(b.available(T0), 1);
        assert_eq!(b.try_withdraw(T0), Ok(()));
        assert!(b.try_withdraw(T0).is_err());
    }

    #[test]
    fn ten_successes_fund_one_retry_also_at_the_defaults_once_empty() {
        let mut b = budget();
        drain(&mut b, T0);
        succeed(&mut b, T0, 9);
        assert_eq!(b.available(T0), 0);
        succeed(&mut b, T0, 1);
        assert_eq!(drain(&mut b, T0), 1);
    }

    #[test]
    fn a_fraction_of_six_tenths_is_never_a_whole_retry() {
        let mut b = match BudgetSettings::builder("x")
            .fraction(0.6)
            .floor_per_second(0.0)
            .build()
        {
            Ok(s) => Budget::new(s),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(b.settings().fraction().ppm(), 600_000);
        drain(&mut b, T0);
        succeed(&mut b, T0, 1);
        assert_eq!(b.available(T0), 0);
        succeed(&mut b, T0, 1);
        assert_eq!(b.available(T0), 1);
        assert_eq!(b.snapshot(T0).tokens_micro, 1_000_000);
    }

    #[test]
    fn a_positive_fraction_or_floor_never_rounds_to_zero() {
        let s = BudgetSettings::builder("x")
            .fraction(1e-9)
            .floor_per_second(1e-9)
            .build();
        let s = s.map(|s| (s.fraction().ppm(), s.floor_per_second_milli()));
        assert_eq!(s, Ok((1, 1)));
        let zero = BudgetSettings::builder("x")
            .fraction(0.0)
            .floor_per_second(0.0)
            .build();
        let zero = zero.map(|s| (s.fraction().ppm(), s.floor_per_second_milli()));
        assert_eq!(zero, Ok((0, 0)));
    }

    #[test]
    fn only_successes_fund_retries() {
        let mut b = with(1_000_000, 0);
        drain(&mut b, T0);
        for outcome in [
            Outcome::Transient,
            Outcome::TimedOut,
            Outcome::Throttled { retry_after: None },
            Outcome::Permanent,
            Outcome::Cancelled,
        ] {
            b.on_outcome(T0, outcome);
        }
        assert_eq!(b.available(T0), 0);
        b.on_outcome(T0, Outcome::Success);
        assert_eq!(b.available(T0), 1);
        b.deposit(T0);
        // Capacity is one retry with no floor: the second deposit is lost.
        assert_eq!(b.available(T0), 1);
    }

    #[test]
    fn retries_beyond_what_is_funded_are_refused() {
        let mut b = budget();
        assert_eq!(drain(&mut b, T0), 30);
        let r = refusal(&mut b, T0);
        assert_eq!(r.reason, RefusalReason::BudgetExhausted);
        // Refusing spends nothing and banks nothing.
        assert_eq!(b.available(T0), 0);
        succeed(&mut b, T0, 25);
        assert_eq!(drain(&mut b, T0), 2);
    }

    #[test]
    fn retry_after_is_when_the_floor_accrues_the_next_retry() {
        let mut b = budget();
        drain(&mut b, T0);
        // 3 per second from empty: a third of a second, rounded up to the millisecond.
        assert_eq!(refusal(&mut b, T0).retry_after, ms(334));
        // Part accrued: 100 ms in, 300_000 of the 1_000_000 are there.
        assert_eq!(refusal(&mut b, T0 + ms(100)).retry_after, ms(234));
        // Part funded by successes: 0.5 missing at 3000 per ms is 166.67 ms, rounded up.
        let mut b = budget();
        drain(&mut b, T0);
        succeed(&mut b, T0, 5);
        assert_eq!(refusal(&mut b, T0).retry_after, ms(167));
        // And asking again then succeeds, not a moment before.
        let r = refusal(&mut b, T0);
        assert!(b
            .try_withdraw(T0 + r.retry_after - Duration::from_nanos(1))
            .is_err());
        assert_eq!(b.try_withdraw(T0 + r.retry_after), Ok(()));
    }

    #[test]
    fn a_floor_refusal_reads_the_same_wherever_in_a_millisecond_the_clock_stands() {
        for into in [0, 1, 250_000, 500_000, 999_999] {
            let mut b = budget();
            let now = T0 + Duration::from_nanos(into);
            drain(&mut b, now);
            let r = refusal(&mut b, now);
            assert_eq!(r.retry_after, ms(334), "{into} ns into the millisecond");
            assert_eq!(b.try_withdraw(now + r.retry_after), Ok(()));
        }
    }

    #[test]
    fn the_floor_refills_to_capacity_and_no_more() {
        let mut b = budget();
        drain(&mut b, T0);
        assert_eq!(b.available(T0 + Duration::from_secs(1)), 3);
        assert_eq!(b.available(T0 + Duration::from_secs(5)), 15);
        assert_eq!(b.available(T0 + Duration::from_secs(10)), 30);
        // An hour of health banks no storm.
        let later = T0 + Duration::from_secs(3600);
        succeed(&mut b, later, 10_000);
        assert_eq!(b.available(later), 30);
        assert_eq!(drain(&mut b, later), 30);
    }

    #[test]
    fn deposits_beyond_capacity_are_lost() {
        let mut b = budget();
        succeed(&mut b, T0, 100);
        assert_eq!(b.snapshot(T0).tokens_micro, 30_000_000);
        assert_eq!(drain(&mut b, T0), 30);
        // What was lost does not come back once there is room.
        assert_eq!(b.available(T0), 0);
    }

    #[test]
    fn floor_accrual_over_many_small_steps_equals_one_big_step() {
        let mut stepped = budget();
        let mut once = budget();
        drain(&mut stepped, T0);
        drain(&mut once, T0);
        // 7919 steps of 0.7 ms: uneven, and never on a millisecond boundary for long.
        let step = Duration::from_micros(700);
        let mut now = T0;
        for _ in 0..7919 {
            now += step;
            stepped.on_outcome(now, Outcome::Transient);
        }
        assert_eq!(stepped.snapshot(now), once.snapshot(now));
        // 5543.3 ms at 3 per second: 16.629 retries, with no accrual lost or invented.
        assert_eq!(once.snapshot(now).tokens_micro, 16_629_000);
        assert_eq!(stepped.snapshot(now).tokens_micro, 16_629_000);
    }

    #[test]
    fn utilization_is_zero_when_full_and_one_when_empty() {
        let mut b = budget();
        assert_eq!(b.utilization(T0), Ratio::ZERO);
        for _ in 0..15 {
            assert_eq!(b.try_withdraw(T0), Ok(()));
        }
        assert_eq!(b.utilization(T0).ppm(), 500_000);
        drain(&mut b, T0);
        assert_eq!(b.utilization(T0), Ratio::ONE);
        let snap = b.snapshot(T0);
        assert_eq!(snap.name, "test");
        assert_eq!(snap.available, 0);
        assert_eq!(snap.capacity_micro, 30_000_000);
        assert_eq!(snap.utilization, Ratio::ONE);
    }

    #[test]
    fn a_clock_stepping_backwards_means_no_time_passed() {
        let mut b = budget();
        let late = T0 + Duration::from_secs(60);
        drain(&mut b, late);
        // A late reading (a racing thread): nothing accrues, and nothing is counted twice.
        let stale = late - ms(400);
        assert_eq!(b.available(stale), 0);
        b.on_outcome(stale, Outcome::Transient);
        let r = refusal(&mut b, stale);
        // The floor counts from the later reading it already has.
        assert_eq!(r.retry_after, ms(400 + 334));
        assert_eq!(b.available(late + ms(500)), 1);
        // A clock set back an hour: nothing accrues, then the floor counts from the new time.
        let mut b = budget();
        drain(&mut b, late);
        let reset = late - Duration::from_secs(3600);
        assert!(b.try_withdraw(reset).is_err());
        assert_eq!(b.available(reset), 0);
        assert_eq!(b.available(reset + Duration::from_secs(1)), 3);
        // All the way back to zero, and the largest instant, do not panic.
        assert!(b.try_withdraw(Instant::ZERO).is_err());
        let _ = b.try_withdraw(Instant::MAX);
        let _ = b.snapshot(Instant::ZERO);
    }

    #[test]
    fn with_no_floor_an_empty_budget_waits_for_successes_not_time() {
        let mut b = with(100_000, 0);
        assert_eq!(b.settings().capacity(), 1);
        assert_eq!(drain(&mut b, T0), 1);
        assert_eq!(refusal(&mut b, T0).retry_after, Duration::MAX);
        assert_eq!(b.available(T0 + Duration::from_secs(86_400)), 0);
        succeed(&mut b, T0, 10);
        assert_eq!(b.try_withdraw(T0), Ok(()));
    }

    #[test]
    fn with_no_fraction_only_the_floor_funds_retries() {
        let mut b = with(0, 3_000);
        drain(&mut b, T0);
        succeed(&mut b, T0, 1_000);
        assert_eq!(b.available(T0), 0);
        assert_eq!(b.available(T0 + ms(334)), 1);
    }

    #[test]
    fn a_slow_floor_still_holds_one_retry() {
        let b = match BudgetSettings::builder("x").floor_per_second(0.05).build() {
            Ok(s) => Budget::new(s),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(b.settings().floor_per_second_milli(), 50);
        assert_eq!(b.settings().capacity_micro(), 1_000_000);
        assert_eq!(b.available(T0), 1);
    }

    #[test]
    fn the_largest_floor_fits_the_packed_state() {
        let mut b = with(1_000_000, 400_000);
        assert_eq!(b.settings().capacity(), 4000);
        assert_eq!(drain(&mut b, T0), 4000);
        assert_eq!(b.available(T0 + Duration::from_secs(3600)), 4000);
        succeed(&mut b, T0 + Duration::from_secs(3600), 10);
        assert_eq!(b.available(T0 + Duration::from_secs(3600)), 4000);
    }

    #[test]
    fn every_invalid_budget_setting_is_a_typed_error() {
        let b = || BudgetSettings::builder("x");
        let cases = [
            (
                b().fraction_ppm(1_000_001),
                Field::RetryFraction,
                Bound::AtMost(1),
            ),
            (b().fraction(1.01), Field::RetryFraction, Bound::AtMost(1)),
            (b().fraction(-0.1), Field::RetryFraction, Bound::AtLeast(0)),
            (
                b().fraction(f64::NAN),
                Field::RetryFraction,
                Bound::AtLeast(0),
            ),
            (
                b().floor_per_second(-1.0),
                Field::FloorRate,
                Bound::AtLeast(0),
            ),
            (
                b().floor_per_second(f64::NAN),
                Field::FloorRate,
                Bound::AtLeast(0),
            ),
            (
                b().floor_per_second(f64::INFINITY),
                Field::FloorRate,
                Bound::AtMost(400),
            ),
            (
                b().floor_per_second(400.1),
                Field::FloorRate,
                Bound::AtMost(400),
            ),
            (
                b().floor_per_second_milli(400_001),
                Field::FloorRate,
                Bound::AtMost(400),
            ),
        ];
        for (builder, field, bound) in cases {
            assert_eq!(builder.build(), Err(SettingsError::new(field, bound)));
        }
        assert!(b().fraction(1.0).floor_per_second(400.0).build().is_ok());
        assert!(b().fraction(0.0).floor_per_second(0.0).build().is_ok());
        // A positive rate never rounds to "no floor".
        assert_eq!(
            b().floor_per_second(0.0001)
                .build()
                .map(|s| s.floor_per_second_milli()),
            Ok(1)
        );
    }

    #[test]
    fn settings_describe_themselves() {
        extern crate std;
        use std::string::ToString;
        assert_eq!(
            BudgetSettings::defaults("x").to_string(),
            "10% of a retry per success, at least 3 per second, up to 30 banked"
        );
        let s = BudgetSettings::builder("x").floor_per_second(0.05).build();
        assert_eq!(
            s.map(|s| s.to_string()),
            Ok("10% of a retry per success, at least 0.05 per second, up to 1 banked".into())
        );
    }

    #[test]
    fn the_state_packs_into_one_word_and_back() {
        let states = [
            BudgetState::UNTOUCHED,
            BudgetState {
                tokens: 0,
                stamp: 0,
            },
            BudgetState {
                tokens: 4_000_000_000,
                stamp: u32::MAX,
            },
            BudgetState {
                tokens: 123_456_789,
                stamp: 0xDEAD_BEEF,
            },
        ];
        for s in states {
            assert_eq!(BudgetState::unpack(s.pack()), s);
        }
        for word in [0, 1, u64::MAX, 0x0123_4567_89AB_CDEF] {
            assert_eq!(BudgetState::unpack(word).pack(), word);
        }
    }

    #[test]
    fn the_pure_rules_give_what_the_budget_gives() {
        let settings = BudgetSettings::defaults("x");
        let mut word = BudgetState::UNTOUCHED.pack();
        let b = Budget::new(settings);
        let mut now = T0;
        for i in 0..200u32 {
            now += Duration::from_micros(u64::from(i) * 37);
            let (result, next) = BudgetState::unpack(word).withdraw(&settings, now);
            word = next.pack();
            assert_eq!(result, b.try_withdraw(now));
            if i % 3 == 0 {
                word = BudgetState::unpack(word)
                    .on_outcome(&settings, now, Outcome::Success)
                    .pack();
                b.on_outcome(now, Outcome::Success);
            }
        }
        assert_eq!(
            BudgetState::unpack(word).settle(&settings, now),
            b.core.state().settle(&settings, now)
        );
    }
}
