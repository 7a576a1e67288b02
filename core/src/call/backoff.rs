//! Backoff between attempts: exponential, capped, jittered from a seeded RNG.
//!
//! The first retry waits the base; each further retry multiplies the wait by the factor, up to
//! the cap. After a [`Throttled`](Outcome::Throttled) outcome the curve starts from a longer
//! base, and a `retry_after` the dependency supplied wins over the curve, capped only by the
//! maximum, with no jitter. The arithmetic is integer nanoseconds and thousandths; randomness
//! comes only from the [`JitterRng`] the caller passes, so the same seed gives the same
//! delays.
//!
//! # Measured base (opt-in)
//! With [`BackoffBuilder::measured_base`], the first retry after a transient failure waits a
//! multiple of the dependency's learned median latency (what the breaker learns) instead of the
//! configured base, kept within 10x of the configured base either way: a dependency that
//! answers in 2 ms is retried in milliseconds, one that answers in 2 s is given seconds, and a
//! wild median never makes the wait absurd. Until the breaker has learned a median (20
//! successes), and without a breaker that learns, the configured base stands. The throttled
//! base is never measured: a throttling dependency has said it is overloaded, and its pace is
//! not the measure of when to come back.

use core::fmt;

use crate::error::{Bound, Field, Problems, SettingsError};
use crate::outcome::Outcome;
use crate::ratio::Multiple;
use crate::rng::JitterRng;
use crate::time::Duration;

/// How the nominal wait is randomized, so that clients that failed together do not retry
/// together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Jitter {
    /// Exactly the nominal wait: for a single client, or a schedule that must be predictable.
    None,
    /// Uniform in `[0, nominal]`: spreads a fleet the most (the default).
    #[default]
    Full,
    /// Half the nominal wait plus uniform in `[0, nominal / 2]`: never shorter than half.
    Equal,
}

impl Jitter {
    /// A stable, lower-case name for logs and configuration files.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Jitter::None => "none",
            Jitter::Full => "full",
            Jitter::Equal => "equal",
        }
    }

    /// `nominal` randomized by this jitter, drawing from `rng` (not at all for [`Jitter::None`]).
    fn apply(self, nominal: Duration, rng: &mut JitterRng) -> Duration {
        let n = nominal.as_nanos();
        match self {
            Jitter::None => nominal,
            Jitter::Full => Duration::from_nanos(rng.up_to(n)),
            Jitter::Equal => {
                let half = n >> 1;
                let rest = n.saturating_sub(half);
                Duration::from_nanos(half.saturating_add(rng.up_to(rest)))
            }
        }
    }
}

impl fmt::Display for Jitter {
    /// `full jitter`, `equal jitter`, `no jitter`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Jitter::None => "no jitter",
            Jitter::Full => "full jitter",
            Jitter::Equal => "equal jitter",
        })
    }
}

/// How long to wait before each retry. Built with [`Backoff::builder`], validated by
/// [`BackoffBuilder::build`], immutable after.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | base | 100 ms | the first retry's nominal wait; zero is valid (no wait) |
/// | throttled base | 1 s | the same after a [`Throttled`](Outcome::Throttled) outcome without a hint; zero is valid |
/// | factor | 2x | each further retry's wait, times this; at least 1 (1 is a constant wait) |
/// | cap | 30 s | no nominal wait (nor a dependency's hint) is longer |
/// | jitter | [`Jitter::Full`] | uniform in `[0, nominal]` |
/// | measured base | off | the base as a multiple of the learned median latency, within 10x of the base |
///
/// ```
/// use stormguard_core::{Backoff, Duration, Jitter, rng::JitterRng, Outcome};
/// let backoff = Backoff::worker();
/// let waits: Vec<u64> = (1..=8).map(|r| backoff.nominal(r, false).as_secs()).collect();
/// assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
///
/// let mut rng = JitterRng::with_seed(7);
/// let hinted = Outcome::Throttled { retry_after: Some(Duration::from_secs(5)) };
/// assert_eq!(Backoff::DEFAULT.delay(1, hinted, &mut rng), Duration::from_secs(5));
/// assert!(Backoff::DEFAULT.delay(3, Outcome::Transient, &mut rng) <= Duration::from_millis(400));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Backoff {
    base: Duration,
    throttled_base: Duration,
    factor: Multiple,
    cap: Duration,
    jitter: Jitter,
    measured: Option<Multiple>,
}

/// How far from the configured base a measured base may go, either way.
const MEASURED_SPAN: u64 = 10;
/// The least measured base, as a multiple of the configured one: a tenth.
const MEASURED_LEAST: Multiple = Multiple::from_milli(100);

/// Builds a [`Backoff`], starting from [`Backoff::DEFAULT`]; every method is `const`.
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BackoffBuilder {
    backoff: Backoff,
}

impl Backoff {
    /// Exponential from 100 ms (1 s after throttling), factor 2, capped at 30 s, full jitter.
    ///
    /// 100 ms outlasts most blips without making a user wait; a dependency that says it is
    /// throttling needs longer than a blip; 30 s is as long as a call with the default 30 s
    /// deadline could wait anyway; full jitter spreads a fleet that failed at the same moment.
    pub const DEFAULT: Backoff = Backoff {
        base: Duration::from_millis(100),
        throttled_base: Duration::from_secs(1),
        factor: Multiple::whole(2),
        cap: Duration::from_secs(30),
        jitter: Jitter::Full,
        measured: None,
    };

    /// No wait between attempts: every retry starts at once, throttled or not (zero base and
    /// throttled base, no jitter). A `retry_after` the dependency supplies is still honoured,
    /// capped at 30 s as in [`Backoff::DEFAULT`]: a dependency that says when to come back is
    /// not called again before then.
    ///
    /// ```
    /// use stormguard_core::{Backoff, Duration, rng::JitterRng, Outcome};
    /// let none = Backoff::none();
    /// let mut rng = JitterRng::with_seed(1);
    /// assert_eq!(none.delay(1, Outcome::Transient, &mut rng), Duration::ZERO);
    /// assert_eq!(none.delay(9, Outcome::Throttled { retry_after: None }, &mut rng), Duration::ZERO);
    /// let hinted = Outcome::Throttled { retry_after: Some(Duration::from_secs(2)) };
    /// assert_eq!(none.delay(1, hinted, &mut rng), Duration::from_secs(2));
    /// ```
    #[must_use]
    pub const fn none() -> Backoff {
        Backoff {
            base: Duration::ZERO,
            throttled_base: Duration::ZERO,
            factor: Multiple::whole(1),
            cap: Backoff::DEFAULT.cap,
            jitter: Jitter::None,
            measured: None,
        }
    }

    /// A builder holding [`Backoff::DEFAULT`].
    pub const fn builder() -> BackoffBuilder {
        BackoffBuilder {
            backoff: Backoff::DEFAULT,
        }
    }

    /// Document 004's worker retry: 1 s doubling to a 60 s cap (1, 2, 4, 8, 16, 32, 60 s), no
    /// jitter, and 1 s after throttling too. The cap is low because a failing message blocks
    /// every later message of its stream.
    #[must_use]
    pub const fn worker() -> Backoff {
        Backoff {
            base: Duration::from_secs(1),
            throttled_base: Duration::from_secs(1),
            factor: Multiple::whole(2),
            cap: Duration::from_secs(60),
            jitter: Jitter::None,
            measured: None,
        }
    }

    /// Whizbang's subscription retry, for re-establishing a connection: 1 s doubling to 120 s,
    /// no jitter, 1 s after throttling too.
    #[must_use]
    pub const fn subscription() -> Backoff {
        Backoff {
            base: Duration::from_secs(1),
            throttled_base: Duration::from_secs(1),
            factor: Multiple::whole(2),
            cap: Duration::from_secs(120),
            jitter: Jitter::None,
            measured: None,
        }
    }

    /// A builder holding this backoff's settings, to change some of them.
    pub const fn to_builder(self) -> BackoffBuilder {
        BackoffBuilder { backoff: self }
    }

    /// The first retry's nominal wait.
    #[must_use]
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The first retry's nominal wait after a throttled outcome without a hint.
    #[must_use]
    pub const fn throttled_base(&self) -> Duration {
        self.throttled_base
    }

    /// What each further retry's wait is multiplied by.
    #[must_use]
    pub const fn factor(&self) -> Multiple {
        self.factor
    }

    /// The longest wait, hinted or not.
    #[must_use]
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// How the nominal wait is randomized.
    #[must_use]
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The multiple of the learned median latency the base is measured as, if on (see
    /// [`BackoffBuilder::measured_base`]).
    #[must_use]
    pub const fn measured_base(&self) -> Option<Multiple> {
        self.measured
    }

    /// The base in force given the learned median latency (`None` before there is one): with
    /// a measured base, the multiple of the median kept within 10x of the configured base
    /// either way; otherwise, or without a median, the configured base.
    ///
    /// ```
    /// use stormguard_core::{Backoff, Duration, Multiple};
    /// let b = Backoff::builder()
    ///     .base(Duration::from_millis(100))
    ///     .measured_base(Multiple::whole(4))
    ///     .build()?;
    /// let ms = Duration::from_millis;
    /// assert_eq!(b.base_for(None), ms(100)); // nothing learned yet
    /// assert_eq!(b.base_for(Some(ms(50))), ms(200)); // 4x the median
    /// assert_eq!(b.base_for(Some(ms(1))), ms(10)); // no less than a tenth of the base
    /// assert_eq!(b.base_for(Some(ms(900))), ms(1_000)); // no more than 10x the base
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    #[must_use]
    pub fn base_for(&self, median: Option<Duration>) -> Duration {
        match (self.measured, median) {
            (Some(m), Some(median)) => {
                // A tenth through the core's 32-bit division: a 64-bit one links a routine
                // of some 860 B into a Cortex-M firmware.
                let least = MEASURED_LEAST.apply(self.base);
                let most = self.base.saturating_mul(MEASURED_SPAN);
                m.apply(median).max(least).min(most)
            }
            _ => self.base,
        }
    }

    /// The unjittered wait before retry number `retry` (1-based: the first retry waits the base;
    /// 0 is read as 1): `min(cap, base * factor^(retry - 1))`, from the throttled base when
    /// `throttled`. Integer arithmetic, saturating; any `retry` is fine.
    #[must_use]
    pub fn nominal(&self, retry: u32, throttled: bool) -> Duration {
        let base = if throttled {
            self.throttled_base
        } else {
            self.base
        };
        self.curve(base, retry)
    }

    /// `min(cap, base * factor^(retry - 1))`.
    fn curve(&self, base: Duration, retry: u32) -> Duration {
        let mut wait = base;
        if wait >= self.cap {
            return self.cap;
        }
        let mut i: u32 = 1;
        while i < retry {
            let next = self.factor.apply(wait);
            if next >= self.cap {
                return self.cap;
            }
            if next <= wait {
                // A factor of 1: the wait never grows.
                break;
            }
            wait = next;
            i = i.saturating_add(1);
        }
        wait
    }

    /// The wait before retry number `retry` (1-based), given how the last attempt ended.
    ///
    /// - [`Outcome::Throttled`] with a `retry_after` hint: the hint wins, capped at
    ///   [`cap`](Backoff::cap), with no jitter (and nothing drawn from `rng`).
    /// - [`Outcome::Throttled`] without one: the curve from the throttled base, jittered.
    /// - Anything else: the curve from the base, jittered.
    ///
    /// Random numbers come only from `rng`, so the same seed gives the same delays.
    #[must_use]
    pub fn delay(&self, retry: u32, last: Outcome, rng: &mut JitterRng) -> Duration {
        self.delay_measured(retry, last, None, rng)
    }

    /// [`delay`](Backoff::delay) with the learned median latency (`None` before there is
    /// one): after a transient failure the curve starts from [`base_for`](Backoff::base_for)
    /// the median. The call driver reads the median from the breaker.
    #[must_use]
    pub fn delay_measured(
        &self,
        retry: u32,
        last: Outcome,
        median: Option<Duration>,
        rng: &mut JitterRng,
    ) -> Duration {
        // One curve and one draw, from whichever base applies.
        let start = match last {
            Outcome::Throttled {
                retry_after: Some(hint),
            } => return hint.min(self.cap),
            Outcome::Throttled { retry_after: None } => self.throttled_base,
            _ => self.base_for(median),
        };
        self.jitter.apply(self.curve(start, retry), rng)
    }

    /// The wait after a local limiter refused an attempt and named when it will grant one
    /// (`hint`): never sooner than the hint, and later by a draw of up to the
    /// [`base`](Backoff::base) or the hint, whichever is less, unless the jitter is
    /// [`Jitter::None`]; capped at [`cap`](Backoff::cap).
    ///
    /// Every caller a limiter refuses before the instant it names is told the same instant.
    /// Taken exactly, the hint brings them all back at once: a sliding window that frees a
    /// segment's worth of cells at a time sends that many attempts together, and a published
    /// quota's reset sends every waiting call at the reset. A dependency's queue can shed such
    /// a burst. A server's `Retry-After` is taken as [`delay`](Backoff::delay) says.
    ///
    /// ```
    /// use stormguard_core::{Backoff, Duration, rng::JitterRng};
    ///
    /// let mut rng = JitterRng::with_seed(7);
    /// let hint = Duration::from_millis(100);
    /// let wait = Backoff::DEFAULT.after_local_refusal(hint, &mut rng);
    /// assert!(wait >= hint && wait <= hint + Backoff::DEFAULT.base());
    /// // With no jitter, the hint exactly.
    /// assert_eq!(Backoff::none().after_local_refusal(hint, &mut rng), hint);
    /// ```
    #[must_use]
    pub fn after_local_refusal(&self, hint: Duration, rng: &mut JitterRng) -> Duration {
        let spread = match self.jitter {
            Jitter::None => 0,
            Jitter::Full | Jitter::Equal => rng.up_to(hint.min(self.base).as_nanos()),
        };
        Duration::from_nanos(hint.as_nanos().saturating_add(spread)).min(self.cap)
    }

    /// Adds every setting at fault to `p`. A zero base (or throttled base) is valid: no wait
    /// between attempts.
    pub(crate) const fn check(&self, p: &mut Problems) {
        if self.factor.milli() < 1000 {
            p.push(SettingsError::new(Field::BackoffFactor, Bound::AtLeastOne));
        }
        if let Some(m) = self.measured {
            if m.milli() < 1000 {
                p.push(SettingsError::new(Field::MeasuredBase, Bound::AtLeastOne));
            } else if !m.is_within_max() {
                p.push(SettingsError::new(
                    Field::MeasuredBase,
                    Bound::AtMost(Multiple::MAX_WHOLE as u64),
                ));
            }
        }
        if self.cap.as_nanos() < self.base.as_nanos() {
            p.push(SettingsError::new(
                Field::BackoffCap,
                Bound::NotBelow(Field::BackoffBase),
            ));
        } else if self.cap.as_nanos() < self.throttled_base.as_nanos() {
            p.push(SettingsError::new(
                Field::BackoffCap,
                Bound::NotBelow(Field::ThrottledBase),
            ));
        }
    }
}

impl Default for Backoff {
    /// [`Backoff::DEFAULT`].
    fn default() -> Self {
        Backoff::DEFAULT
    }
}

impl BackoffBuilder {
    /// The first retry's nominal wait (default 100 ms; zero is no wait between attempts, whatever
    /// the factor).
    pub const fn base(mut self, base: Duration) -> Self {
        self.backoff.base = base;
        self
    }

    /// The first retry's nominal wait after a throttled outcome that gave no hint (default 1 s;
    /// zero is no wait).
    pub const fn throttled_base(mut self, base: Duration) -> Self {
        self.backoff.throttled_base = base;
        self
    }

    /// What each further retry's wait is multiplied by (default 2x; at least 1x, which keeps
    /// the wait constant).
    pub const fn factor(mut self, factor: Multiple) -> Self {
        self.backoff.factor = factor;
        self
    }

    /// The longest wait, hinted or not (default 30 s; at least the base and the throttled base).
    pub const fn cap(mut self, cap: Duration) -> Self {
        self.backoff.cap = cap;
        self
    }

    /// How the nominal wait is randomized (default [`Jitter::Full`]).
    pub const fn jitter(mut self, jitter: Jitter) -> Self {
        self.backoff.jitter = jitter;
        self
    }

    /// Measures the base (default off): the first retry after a transient failure waits
    /// `multiple` times the learned median latency, kept within 10x of the configured base
    /// either way; the configured base until the breaker has learned a median. At least 1x:
    /// a retry sooner than a healthy call takes gives the dependency no room.
    pub const fn measured_base(mut self, multiple: Multiple) -> Self {
        self.backoff.measured = Some(multiple);
        self
    }

    /// Every setting at fault, in the order [`build`](Self::build) checks them: empty when
    /// the backoff is valid.
    pub const fn problems(&self) -> Problems {
        let mut p = Problems::new();
        self.backoff.check(&mut p);
        p
    }

    /// Checks every bound and returns the backoff, or every setting at fault.
    // No allocation in the core: the list is the error, by value, on a cold path.
    #[allow(clippy::result_large_err)]
    pub const fn build_all(self) -> Result<Backoff, Problems> {
        let p = self.problems();
        if p.is_empty() {
            Ok(self.backoff)
        } else {
            Err(p)
        }
    }

    /// Checks every bound and returns the backoff, or the first setting at fault (see
    /// [`problems`](Self::problems) for all of them).
    pub const fn build(self) -> Result<Backoff, SettingsError> {
        match self.problems().first() {
            Some(e) => Err(e),
            None => Ok(self.backoff),
        }
    }
}

impl fmt::Display for Backoff {
    /// E.g. `exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter`, or
    /// `constant 500ms, no jitter`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.base.is_zero() && self.throttled_base.is_zero() {
            return write!(f, "no wait, a retry-after hint capped at {}", self.cap);
        }
        let constant = self.factor.milli() == 1000;
        if constant {
            write!(f, "constant {}", self.base.min(self.cap))?;
        } else {
            write!(f, "exponential from {}", self.base)?;
        }
        if self.throttled_base != self.base {
            write!(
                f,
                " ({} after throttling)",
                self.throttled_base.min(self.cap)
            )?;
        }
        if !constant {
            let whole = self.factor.milli() / 1000;
            let mut frac = self.factor.milli() % 1000;
            if frac == 0 {
                write!(f, ", x{whole}")?;
            } else {
                let mut width: usize = 3;
                while frac.is_multiple_of(10) {
                    frac /= 10;
                    width = width.saturating_sub(1);
                }
                write!(f, ", x{whole}.{frac:0width$}")?;
            }
            write!(f, ", capped at {}", self.cap)?;
        }
        if let Some(m) = self.measured {
            write!(
                f,
                ", the base {m} the learned median (within 10x of {})",
                self.base
            )?;
        }
        write!(f, ", {}", self.jitter)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;
    use std::vec::Vec;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[track_caller]
    fn built(b: BackoffBuilder) -> Backoff {
        match b.build() {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }

    fn unjittered() -> Backoff {
        built(Backoff::builder().jitter(Jitter::None))
    }

    #[test]
    fn the_defaults_match_the_design() {
        let b = Backoff::DEFAULT;
        assert_eq!(b.base(), ms(100));
        assert_eq!(b.throttled_base(), secs(1));
        assert_eq!(b.factor(), Multiple::whole(2));
        assert_eq!(b.cap(), secs(30));
        assert_eq!(b.jitter(), Jitter::Full);
        assert_eq!(Backoff::default(), b);
        assert_eq!(Backoff::builder().build(), Ok(b));
        for preset in [Backoff::DEFAULT, Backoff::worker(), Backoff::subscription()] {
            assert_eq!(preset.to_builder().build(), Ok(preset));
        }
    }

    #[test]
    fn the_first_retry_waits_the_base() {
        assert_eq!(Backoff::DEFAULT.nominal(1, false), ms(100));
        assert_eq!(Backoff::DEFAULT.nominal(0, false), ms(100));
    }

    #[test]
    fn each_retry_doubles_the_wait() {
        let waits: Vec<Duration> = (1..=6)
            .map(|r| Backoff::DEFAULT.nominal(r, false))
            .collect();
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1600), ms(3200)]
        );
    }

    #[test]
    fn the_wait_is_capped() {
        let b = Backoff::DEFAULT;
        assert_eq!(b.nominal(9, false), ms(25_600));
        assert_eq!(b.nominal(10, false), secs(30));
        assert_eq!(b.nominal(1000, false), secs(30));
    }

    #[test]
    fn a_fractional_factor_grows_in_exact_integer_steps() {
        let b = built(Backoff::builder().factor(Multiple::from_milli(1500)));
        let waits: Vec<Duration> = (1..=4).map(|r| b.nominal(r, false)).collect();
        assert_eq!(
            waits,
            [ms(100), ms(150), ms(225), Duration::from_micros(337_500)]
        );
    }

    #[test]
    fn a_factor_of_one_is_a_constant_wait() {
        let b = built(
            Backoff::builder()
                .factor(Multiple::whole(1))
                .base(ms(500))
                .jitter(Jitter::None),
        );
        assert_eq!(b.nominal(1, false), ms(500));
        assert_eq!(b.nominal(u32::MAX, false), ms(500));
        assert_eq!(b.nominal(u32::MAX, true), secs(1));
        assert_eq!(
            b.to_string(),
            "constant 500ms (1s after throttling), no jitter"
        );
    }

    #[test]
    fn the_worker_preset_waits_1_2_4_8_16_32_then_60_seconds() {
        let b = Backoff::worker();
        let waits: Vec<Duration> = (1..=9).map(|r| b.nominal(r, false)).collect();
        assert_eq!(
            waits,
            [
                secs(1),
                secs(2),
                secs(4),
                secs(8),
                secs(16),
                secs(32),
                secs(60),
                secs(60),
                secs(60)
            ]
        );
        // No jitter: the delays are the nominal waits, and the RNG is not consulted.
        let mut rng = JitterRng::with_seed(1);
        let before = rng.clone();
        for r in 1..=9 {
            assert_eq!(
                b.delay(r, Outcome::Transient, &mut rng),
                b.nominal(r, false)
            );
        }
        assert_eq!(rng, before);
        assert_eq!(b.nominal(1, true), secs(1));
        assert_eq!(b.jitter(), Jitter::None);
    }

    #[test]
    fn the_subscription_preset_doubles_from_one_second_to_two_minutes() {
        let b = Backoff::subscription();
        let waits: Vec<Duration> = (1..=9).map(|r| b.nominal(r, false)).collect();
        assert_eq!(
            waits,
            [
                secs(1),
                secs(2),
                secs(4),
                secs(8),
                secs(16),
                secs(32),
                secs(64),
                secs(120),
                secs(120)
            ]
        );
        assert_eq!(b.jitter(), Jitter::None);
    }

    #[test]
    fn a_throttled_outcome_starts_the_curve_from_the_throttled_base() {
        let b = unjittered();
        let mut rng = JitterRng::with_seed(3);
        let throttled = Outcome::Throttled { retry_after: None };
        assert_eq!(b.delay(1, throttled, &mut rng), secs(1));
        assert_eq!(b.delay(2, throttled, &mut rng), secs(2));
        assert_eq!(b.delay(6, throttled, &mut rng), secs(30));
        assert_eq!(b.delay(1, Outcome::Transient, &mut rng), ms(100));
        assert_eq!(b.delay(1, Outcome::TimedOut, &mut rng), ms(100));
    }

    #[test]
    fn a_retry_after_hint_wins_capped_and_unjittered() {
        let b = Backoff::DEFAULT;
        let mut rng = JitterRng::with_seed(5);
        let before = rng.clone();
        let hinted = |d| Outcome::Throttled {
            retry_after: Some(d),
        };
        // Longer than the curve, shorter than it, zero, and past the cap.
        assert_eq!(b.delay(1, hinted(secs(7)), &mut rng), secs(7));
        assert_eq!(b.delay(8, hinted(ms(3)), &mut rng), ms(3));
        assert_eq!(b.delay(1, hinted(Duration::ZERO), &mut rng), Duration::ZERO);
        assert_eq!(b.delay(1, hinted(secs(3600)), &mut rng), secs(30));
        assert_eq!(b.delay(1, hinted(Duration::MAX), &mut rng), secs(30));
        assert_eq!(rng, before);
    }

    #[test]
    fn the_same_seed_gives_the_same_delays() {
        for jitter in [Jitter::Full, Jitter::Equal] {
            let b = built(Backoff::builder().jitter(jitter));
            let run = |seed| {
                let mut rng = JitterRng::with_seed(seed);
                (1..=20)
                    .map(|r| b.delay(r, Outcome::Transient, &mut rng))
                    .collect::<Vec<_>>()
            };
            assert_eq!(run(42), run(42));
            assert_ne!(run(42), run(43));
        }
    }

    #[test]
    fn full_jitter_stays_within_zero_and_nominal_and_spreads() {
        let b = Backoff::DEFAULT;
        let mut rng = JitterRng::with_seed(11);
        let nominal = b.nominal(4, false);
        let mut lowest = Duration::MAX;
        let mut highest = Duration::ZERO;
        let mut below_half = 0;
        for _ in 0..1000 {
            let d = b.delay(4, Outcome::Transient, &mut rng);
            assert!(d <= nominal, "{d} > {nominal}");
            lowest = lowest.min(d);
            highest = highest.max(d);
            if d < nominal.checked_div(2).unwrap_or(Duration::ZERO) {
                below_half += 1;
            }
        }
        assert!(lowest < nominal.checked_div(10).unwrap_or(Duration::ZERO));
        assert!(
            highest > nominal.saturating_sub(nominal.checked_div(10).unwrap_or(Duration::ZERO))
        );
        assert!(
            (400..600).contains(&below_half),
            "{below_half} of 1000 below half"
        );
    }

    #[test]
    fn equal_jitter_stays_within_half_and_nominal() {
        let b = built(Backoff::builder().jitter(Jitter::Equal));
        let mut rng = JitterRng::with_seed(13);
        for retry in 1..=12 {
            let nominal = b.nominal(retry, false);
            let half = nominal.checked_div(2).unwrap_or(Duration::ZERO);
            let mut spread = false;
            let first = b.delay(retry, Outcome::Transient, &mut rng);
            for _ in 0..200 {
                let d = b.delay(retry, Outcome::Transient, &mut rng);
                assert!(half <= d && d <= nominal, "{d} outside [{half}, {nominal}]");
                spread |= d != first;
            }
            assert!(spread);
        }
    }

    #[test]
    fn huge_retry_counts_do_not_overflow() {
        let mut rng = JitterRng::with_seed(17);
        let wide = built(
            Backoff::builder()
                .factor(Multiple::from_milli(u32::MAX))
                .cap(Duration::MAX),
        );
        let slow = built(
            Backoff::builder()
                .factor(Multiple::from_milli(1001))
                .cap(Duration::MAX),
        );
        for b in [Backoff::DEFAULT, Backoff::worker(), wide, slow] {
            for retry in [u32::MAX - 1, u32::MAX] {
                assert_eq!(b.nominal(retry, false), b.cap());
                assert_eq!(b.nominal(retry, true), b.cap());
                assert!(b.delay(retry, Outcome::Transient, &mut rng) <= b.cap());
            }
        }
        assert_eq!(
            wide.nominal(2, false),
            Duration::from_nanos(429_496_729_500_000)
        );
        assert_eq!(wide.nominal(3, false), Duration::MAX);
    }

    #[test]
    fn every_invalid_backoff_setting_is_a_typed_error() {
        let b = Backoff::builder;
        let cases = [
            (
                b().factor(Multiple::from_milli(999)),
                Field::BackoffFactor,
                Bound::AtLeastOne,
            ),
            (
                b().cap(ms(99)),
                Field::BackoffCap,
                Bound::NotBelow(Field::BackoffBase),
            ),
            (
                b().cap(ms(500)),
                Field::BackoffCap,
                Bound::NotBelow(Field::ThrottledBase),
            ),
        ];
        for (builder, field, bound) in cases {
            assert_eq!(builder.build(), Err(SettingsError::new(field, bound)));
        }
        assert_eq!(
            b().factor(Multiple::from_milli(999))
                .build()
                .map_err(|e| e.to_string()),
            Err("`backoff_factor` must be at least 1".into())
        );
    }

    #[test]
    fn a_zero_base_is_valid_and_waits_nothing() {
        let mut rng = JitterRng::with_seed(19);
        let zero = built(Backoff::builder().base(Duration::ZERO));
        assert_eq!(zero.base(), Duration::ZERO);
        for retry in [1, 2, 10, u32::MAX] {
            assert_eq!(zero.nominal(retry, false), Duration::ZERO);
            assert_eq!(
                zero.delay(retry, Outcome::Transient, &mut rng),
                Duration::ZERO
            );
        }
        // The throttled curve keeps its own base.
        assert_eq!(zero.nominal(1, true), secs(1));
        let both = built(
            Backoff::builder()
                .base(Duration::ZERO)
                .throttled_base(Duration::ZERO)
                .cap(Duration::ZERO),
        );
        let throttled = Outcome::Throttled { retry_after: None };
        assert_eq!(both.delay(3, throttled, &mut rng), Duration::ZERO);
        // A sub-millisecond base is a wait like any other.
        let short = built(Backoff::builder().base(Duration::from_micros(250)));
        assert_eq!(short.nominal(3, false), Duration::from_micros(1000));
    }

    #[test]
    fn backoff_none_waits_nothing_between_attempts_but_honours_a_hint() {
        let none = Backoff::none();
        assert_eq!(none.to_builder().build(), Ok(none));
        let mut rng = JitterRng::with_seed(23);
        let before = rng.clone();
        for retry in [1, 2, 50] {
            assert_eq!(
                none.delay(retry, Outcome::Transient, &mut rng),
                Duration::ZERO
            );
            assert_eq!(
                none.delay(retry, Outcome::TimedOut, &mut rng),
                Duration::ZERO
            );
            let throttled = Outcome::Throttled { retry_after: None };
            assert_eq!(none.delay(retry, throttled, &mut rng), Duration::ZERO);
        }
        assert_eq!(rng, before, "nothing to jitter, nothing drawn");
        let hinted = Outcome::Throttled {
            retry_after: Some(secs(4)),
        };
        assert_eq!(none.delay(1, hinted, &mut rng), secs(4));
        assert_eq!(
            none.to_string(),
            "no wait, a retry-after hint capped at 30s"
        );
    }

    #[test]
    fn a_backoff_describes_itself() {
        assert_eq!(
            Backoff::DEFAULT.to_string(),
            "exponential from 100ms (1s after throttling), x2, capped at 30s, full jitter"
        );
        assert_eq!(
            Backoff::worker().to_string(),
            "exponential from 1s, x2, capped at 60s, no jitter"
        );
        let b = built(
            Backoff::builder()
                .factor(Multiple::from_milli(1500))
                .jitter(Jitter::Equal),
        );
        assert_eq!(
            b.to_string(),
            "exponential from 100ms (1s after throttling), x1.5, capped at 30s, equal jitter"
        );
        assert_eq!(Jitter::Full.as_str(), "full");
    }
}
