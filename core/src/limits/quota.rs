//! The rule that stops a caller before it runs a published quota dry (the quota itself is
//! read from response headers by [`wire::quota`](crate::wire::quota)).
//!
//! A quota limiter holds what was published and applies one rule, [`QuotaSettings`]: once the remaining allowance is within the reserve
//! (10% of the limit by default; with no known limit, once nothing is left) every attempt is
//! refused locally with [`RefusalReason::QuotaReserve`] until the published reset. Each admitted
//! attempt spends one unit of the allowance. The rule only tightens: while a quota is known, a
//! later reading may lower the allowance or move the reset later, never raise the allowance or
//! bring the reset sooner. No reading makes the caller wait longer than
//! [`QuotaSettings::max_wait`] (by default the throttled backoff's longest wait, 30 s) from the
//! reading: a reset further away, or none at all, counts as that.
//!
//! Both are a [`Limiter`] over the quota's rule, [`Quota`](super::Quota) (one owner) and
//! [`SharedQuota`](super::SharedQuota) (lock-free, `&self`; its whole state is one 128-bit
//! word, so a reading and a request never see half of each other), and so a
//! [`Limit`](crate::part::Limit): the call driver treats a refusal as it treats a local rate
//! limiter's: a self-imposed throttle, retried on the throttled curve after the reset (capped
//! by the backoff's maximum), charged nothing to the retry budget and never counted against the
//! breaker; only when no retry fits does the call end as a guarded rejection.
//!
//! ```
//! use stormguard_core::limits::{Quota, QuotaSettings};
//! use stormguard_core::wire::quota::{parse_ratelimit, Published};
//! use stormguard_core::{Duration, Instant, RefusalReason};
//!
//! let published = parse_ratelimit(br#""default";r=11;t=30"#, Some(br#""default";q=100;w=60"#));
//! assert_eq!(
//!     published,
//!     Some(Published { limit: Some(100), remaining: Some(11), reset: Some(Duration::from_secs(30)) })
//! );
//! let quota = Quota::new(QuotaSettings::DEFAULT);
//! let now = Instant::from_secs(1);
//! quota.on_published(now, published.unwrap());
//! assert!(quota.check(now).is_ok()); // 11 left, the reserve is 10: one more
//! let refused = quota.check(now).unwrap_err(); // 10 left: within the reserve
//! assert_eq!(refused.reason, RefusalReason::QuotaReserve);
//! assert_eq!(refused.retry_after, Duration::from_secs(30));
//! assert!(quota.check(now + Duration::from_secs(30)).is_ok()); // the window has reset
//! ```

use super::limiter::sealed::Rule;
use super::limiter::{Limiter, DEFAULT_IDLE};
use crate::cell::Storage;
use crate::error::{Bound, Field, RefusalReason, Refused, SettingsError};
use crate::name::Name;
use crate::ratio::Ratio;
use crate::time::{Duration, Instant};
use crate::wire::quota::Published;

// ---------------------------------------------------------------------------------------------
// The rule

/// How a published quota is kept: the reserve left untouched and the longest wait a reading
/// can impose.
///
/// ```
/// use stormguard_core::limits::QuotaSettings;
/// use stormguard_core::{Duration, Field, Ratio};
///
/// let s = QuotaSettings::new(Ratio::from_percent(20).unwrap(), Duration::from_secs(10))?;
/// assert_eq!(s.reserve_of(100), 20);
/// let e = QuotaSettings::new(Ratio::ONE, Duration::from_secs(10)).unwrap_err();
/// assert_eq!(e.field, Field::QuotaReserve);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct QuotaSettings {
    reserve: Ratio,
    max_wait: Duration,
}

/// The default reserve: 10% of the published limit.
pub const DEFAULT_RESERVE: Ratio = Ratio::from_ppm_const(100_000);

impl QuotaSettings {
    /// A reserve of 10% of the limit (room left for the other clients sharing the quota, and
    /// for the requests already on their way), and a longest wait of 30 s, the default
    /// backoff's longest wait.
    pub const DEFAULT: QuotaSettings = QuotaSettings {
        reserve: DEFAULT_RESERVE,
        max_wait: Duration::from_secs(30),
    };

    /// `reserve` of the limit kept untouched (0 to below 1: [`Ratio::ONE`] would refuse every
    /// request), and `max_wait`, the longest a reading may keep the caller waiting (above
    /// zero; a policy passes its backoff's longest wait).
    pub const fn new(reserve: Ratio, max_wait: Duration) -> Result<QuotaSettings, SettingsError> {
        if reserve.ppm() >= Ratio::ONE.ppm() {
            return Err(SettingsError::new(Field::QuotaReserve, Bound::BelowOne));
        }
        if max_wait.is_zero() {
            return Err(SettingsError::new(
                Field::QuotaMaxWait,
                Bound::AtLeastDuration(Duration::from_nanos(1)),
            ));
        }
        Ok(QuotaSettings { reserve, max_wait })
    }

    /// The share of the limit kept untouched.
    #[must_use]
    pub const fn reserve(&self) -> Ratio {
        self.reserve
    }

    /// The longest a reading may keep the caller waiting, from the reading.
    #[must_use]
    pub const fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// The reserve of a `limit`, rounded down.
    #[must_use]
    pub const fn reserve_of(&self, limit: u64) -> u64 {
        crate::ratio::mul_div(limit, self.reserve.ppm(), Ratio::ONE.ppm())
    }
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings::DEFAULT
    }
}

/// What is known of a quota, in plain numbers: the pure rule's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct QuotaState {
    /// Requests left (published, less the attempts admitted since).
    pub remaining: u32,
    /// The reserve: at or below this many left, attempts are refused.
    pub floor: u32,
    /// When the quota stops holding (the published reset, bounded); `None`: no quota known.
    pub until: Option<Instant>,
}

impl QuotaState {
    /// The state after `published` is read at `now`: tighter only while a quota is known
    /// (fewer left, a larger reserve, a later reset), a fresh quota once the last has reset.
    /// A reading without an allowance changes nothing.
    #[must_use]
    pub fn read(self, settings: &QuotaSettings, now: Instant, published: Published) -> QuotaState {
        let Some(remaining) = published.remaining else {
            return self;
        };
        let remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
        let floor = published.limit.map_or(0, |l| {
            u32::try_from(settings.reserve_of(l)).unwrap_or(u32::MAX)
        });
        let wait = published
            .reset
            .map_or(settings.max_wait, |r| r.min(settings.max_wait));
        let until = now.saturating_add(wait);
        match self.until {
            Some(known) if now < known => QuotaState {
                remaining: self.remaining.min(remaining),
                floor: self.floor.max(floor),
                until: Some(known.max(until)),
            },
            _ => QuotaState {
                remaining,
                floor,
                until: (!wait.is_zero()).then_some(until),
            },
        }
    }

    /// Takes one request of the allowance at `now`, or refuses while within the reserve (with
    /// the time until the reset).
    pub fn take(self, now: Instant) -> (Result<(), Refused>, QuotaState) {
        match self.check(now) {
            Ok(()) if self.holds_at(now) => (
                Ok(()),
                QuotaState {
                    remaining: self.remaining.saturating_sub(1),
                    ..self
                },
            ),
            // No quota holds: nothing to spend (a reading after the reset starts afresh).
            Ok(()) => (Ok(()), self),
            Err(refused) => (Err(refused), self),
        }
    }

    /// Would a request be admitted at `now`? Changes nothing.
    pub fn check(self, now: Instant) -> Result<(), Refused> {
        match self.until {
            Some(until) if now < until && self.remaining <= self.floor => Err(Refused {
                reason: RefusalReason::QuotaReserve,
                retry_after: until.saturating_duration_since(now),
            }),
            _ => Ok(()),
        }
    }

    /// Whether a quota is known and holds at `now`.
    #[must_use]
    pub fn holds_at(self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }
}

/// The quota's state packed into one word: the allowance and reserve in the low 64 bits, the
/// reset (nanoseconds since the epoch; 0 when no quota is known) in the high 64.
const fn pack(state: QuotaState) -> u128 {
    let until = match state.until {
        Some(u) => {
            let ns = u.as_nanos();
            if ns == 0 {
                1
            } else {
                ns
            }
        }
        None => 0,
    };
    (until as u128) << 64 | (state.remaining as u128) << 32 | state.floor as u128
}

const fn unpack(word: u128) -> QuotaState {
    let until = (word >> 64) as u64;
    QuotaState {
        remaining: (word >> 32) as u32,
        floor: word as u32,
        until: if until == 0 {
            None
        } else {
            Some(Instant::from_nanos(until))
        },
    }
}

/// The name every quota limiter goes by (a quota is the dependency's, read from its answers).
const QUOTA: Name = Name::new("quota");

impl Rule for QuotaSettings {
    type State = u128;

    #[inline]
    fn decide(&self, state: u128, now: Instant, n: u32) -> (Result<(), Refused>, u128) {
        if n == 0 {
            return (Ok(()), state);
        }
        let q = unpack(state);
        if !q.holds_at(now) {
            // No quota holds: nothing to spend (a reading after the reset starts afresh).
            return (Ok(()), state);
        }
        if q.remaining.saturating_sub(q.floor) < n {
            let retry_after = match q.until {
                Some(until) => until.saturating_duration_since(now),
                None => Duration::ZERO,
            };
            return (
                Err(Refused {
                    reason: RefusalReason::QuotaReserve,
                    retry_after,
                }),
                state,
            );
        }
        let next = QuotaState {
            remaining: q.remaining.saturating_sub(n),
            ..q
        };
        (Ok(()), pack(next))
    }

    fn available(&self, state: u128, now: Instant) -> u32 {
        let q = unpack(state);
        if q.holds_at(now) {
            q.remaining.saturating_sub(q.floor)
        } else {
            u32::MAX
        }
    }

    fn until_full(&self, state: u128, now: Instant) -> Duration {
        match unpack(state).until {
            Some(until) => until.saturating_duration_since(now),
            None => Duration::ZERO,
        }
    }

    fn settle(&self, state: u128, _now: Instant) -> u128 {
        state
    }

    fn idle(&self) -> Duration {
        DEFAULT_IDLE
    }

    fn name(&self) -> &Name {
        &QUOTA
    }

    fn any(&self) -> super::limiter::AnyRule<'_> {
        super::limiter::AnyRule::Quota(self)
    }
}

/// What only a quota does: learn what the dependency published.
impl<C: Storage> Limiter<QuotaSettings, C> {
    /// Reads what a response received at `now` published (see [`QuotaState::read`]). A
    /// reading without an allowance changes nothing.
    pub fn on_published(&self, now: Instant, published: Published) {
        if published.remaining.is_none() {
            return;
        }
        let settings = *self.settings();
        self.update(|state| pack(unpack(state).read(&settings, now, published)));
    }

    /// What is known now.
    #[must_use]
    pub fn state(&self) -> QuotaState {
        unpack(self.load())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::limiter::{Quota, SharedQuota};
    use crate::part::Limit;

    const S: QuotaSettings = QuotaSettings::DEFAULT;

    fn published(limit: u64, remaining: u64, reset_secs: u64) -> Published {
        Published {
            limit: Some(limit),
            remaining: Some(remaining),
            reset: Some(Duration::from_secs(reset_secs)),
        }
    }

    #[test]
    fn within_the_reserve_attempts_are_refused_until_the_reset() {
        let q = Quota::new(S);
        let t0 = Instant::from_secs(100);
        q.on_published(t0, published(100, 12, 20));
        assert!(q.take(t0).is_ok());
        assert!(q.take(t0).is_ok());
        let r = q.take(t0).unwrap_err();
        assert_eq!(r.reason, RefusalReason::QuotaReserve);
        assert_eq!(r.retry_after, Duration::from_secs(20));
        let later = t0 + Duration::from_secs(5);
        assert_eq!(
            q.peek(later).unwrap_err().retry_after,
            Duration::from_secs(15)
        );
        assert!(q.take(t0 + Duration::from_secs(20)).is_ok());
        assert!(!q.state().holds_at(t0 + Duration::from_secs(20)));
    }

    #[test]
    fn with_no_limit_known_only_an_empty_allowance_refuses() {
        let q = Quota::new(S);
        let t0 = Instant::from_secs(1);
        let p = Published {
            limit: None,
            remaining: Some(1),
            reset: Some(Duration::from_secs(5)),
        };
        q.on_published(t0, p);
        assert!(q.take(t0).is_ok());
        assert!(q.take(t0).is_err());
    }

    #[test]
    fn a_known_quota_is_never_loosened_early() {
        let q = Quota::new(S);
        let t0 = Instant::from_secs(1);
        q.on_published(t0, published(100, 11, 20));
        // A later reading saying more is left, or a sooner reset, changes nothing.
        q.on_published(t0 + Duration::from_secs(1), published(100, 90, 2));
        assert_eq!(q.state().remaining, 11);
        assert_eq!(q.state().until, Some(t0 + Duration::from_secs(20)));
        // Fewer left, and a later reset within the bound, are taken.
        q.on_published(t0 + Duration::from_secs(2), published(100, 10, 25));
        assert_eq!(q.state().remaining, 10);
        assert_eq!(q.state().until, Some(t0 + Duration::from_secs(27)));
        assert!(q.take(t0 + Duration::from_secs(3)).is_err());
        // Once reset, a fresh quota replaces it.
        q.on_published(t0 + Duration::from_secs(27), published(100, 90, 60));
        assert_eq!(q.state().remaining, 90);
    }

    #[test]
    fn no_reading_stalls_a_caller_past_the_longest_wait() {
        let q = Quota::new(S);
        let t0 = Instant::from_secs(1);
        q.on_published(t0, published(100, 0, u64::MAX / 4));
        assert_eq!(q.take(t0).unwrap_err().retry_after, S.max_wait());
        // Without a reset, the longest wait too.
        let q = Quota::new(S);
        q.on_published(
            t0,
            Published {
                limit: None,
                remaining: Some(0),
                reset: None,
            },
        );
        assert_eq!(q.take(t0).unwrap_err().retry_after, S.max_wait());
        assert!(q.take(t0 + S.max_wait()).is_ok());
    }

    #[test]
    fn the_shared_form_agrees_with_the_owned_one() {
        let shared = SharedQuota::new(S);
        let owned = Quota::new(S);
        let mut now = Instant::from_secs(3);
        let readings = [(100, 13, 4), (100, 50, 9), (100, 12, 2), (40, 3, 1)];
        for (i, &(l, r, t)) in readings.iter().cycle().take(40).enumerate() {
            if i % 3 == 0 {
                shared.on_published(now, published(l, r, t));
                owned.on_published(now, published(l, r, t));
            }
            assert_eq!(shared.take(now), owned.take(now));
            assert_eq!(shared.state(), owned.state());
            now += Duration::from_millis(700);
        }
    }

    #[test]
    fn the_call_driver_waits_out_a_quota_as_a_self_imposed_throttle() {
        use crate::call::{Call, CallSettings, Parts, Step};
        use crate::name::Name;
        use crate::outcome::Outcome;

        let quota = Quota::new(S);
        let t0 = Instant::from_secs(1);
        quota.on_published(t0, published(100, 10, 2));
        let parts = Parts::new().named(Name::new("api")).limiter(quota);
        let mut events = [""; 4];
        let mut seen = 0;
        let mut call = Call::begin(&CallSettings::DEFAULT, t0);
        // Within the reserve: the published reset is waited out (no budget, no breaker).
        let step = call.poll(&parts, t0, &mut |e| {
            if let Some(kind) = events.get_mut(seen) {
                *kind = e.kind();
            }
            seen += 1;
        });
        // The reset, later by a draw of up to the backoff's base: the calls waiting on it do
        // not all come back at the same instant.
        let Step::Wait(wait) = step else {
            panic!("waits out the reset, not {step:?}");
        };
        let base = CallSettings::DEFAULT.backoff().base();
        assert!(wait >= Duration::from_secs(2) && wait <= Duration::from_secs(2) + base);
        let t1 = t0 + wait;
        let Step::Attempt(permit) = call.poll(&parts, t1, &mut |_| {}) else {
            panic!("the quota has reset");
        };
        call.complete(&parts, permit, t1, Outcome::Success, &mut |_| {});
        assert!(matches!(call.poll(&parts, t1, &mut |_| {}), Step::Done(_)));
        // The attempt the quota refused, then the Retry event announcing the wait.
        assert_eq!(events[..seen], ["attempt", "retry"]);

        // With no retry left, it is the guarded rejection, naming the quota.
        parts
            .limiter
            .as_ref()
            .unwrap()
            .on_published(t1, published(100, 0, 5));
        let once = CallSettings::builder().max_attempts(1).build().unwrap();
        let mut call = Call::begin(&once, t1);
        let Step::Reject(r) = call.poll(&parts, t1, &mut |_| {}) else {
            panic!("refused");
        };
        assert_eq!(r.reason, RefusalReason::QuotaReserve);
        // Counted from the end of the guarded pause.
        assert_eq!(r.retry_after, Duration::from_secs(5) - r.pause);
    }

    #[test]
    fn settings_are_checked() {
        let e = QuotaSettings::new(Ratio::ONE, Duration::from_secs(1)).unwrap_err();
        assert_eq!((e.field, e.bound), (Field::QuotaReserve, Bound::BelowOne));
        let e = QuotaSettings::new(Ratio::ZERO, Duration::ZERO).unwrap_err();
        assert_eq!(e.field, Field::QuotaMaxWait);
        assert!(QuotaSettings::new(Ratio::ZERO, Duration::from_secs(1)).is_ok());
        assert_eq!(S.reserve_of(100), 10);
        assert_eq!(S.reserve_of(9), 0);
        assert_eq!(S.reserve_of(u64::MAX), u64::MAX / 10);
    }
}
