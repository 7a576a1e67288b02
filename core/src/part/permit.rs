//! The permit a breaker grants for one attempt, which the call driver hands back with the
//! attempt's outcome.

use crate::cell::{field, mask, put};
use crate::time::{Duration, Instant};

/// What kind of admission a permit records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) enum Kind {
    /// Admitted by a closed breaker.
    Normal = 0,
    /// A half-open probe: holds a probe slot until its outcome (or release).
    Probe = 1,
    /// Admitted by the recovery ramp.
    Ramp = 2,
    /// No breaker guards this call.
    Unguarded = 3,
}

/// The right to make one attempt, granted at an instant in one breaker period (epoch).
///
/// Hand it back with [`Breaker::on_outcome`](crate::Breaker::on_outcome). An outcome reported after the breaker has changed
/// period (opened, closed, been reset) is recorded for the baselines but decides nothing. A probe
/// permit that is dropped without an outcome keeps its slot until it is reclaimed: after the
/// attempt timeout it was granted for, or without one, after the break just served. (The
/// adapters hand the slot back at once from a drop guard, via [`Breaker::release`](crate::Breaker::release).)
///
/// A permit is one word: the grant instant's low 53 bits of nanoseconds, the period, whether
/// its latency may be learned, and the kind. Latency is therefore measured modulo 2^53 ns, exact
/// for any attempt shorter than 52 days.
/// The period is kept modulo 256. A new period starts at every open, the end of every break,
/// every close, the start of a ramp, every reclaim of lost probes, and at `isolate` and `reset`;
/// a permit held across exactly a multiple of 256 of them would decide again. A flapping breaker
/// spends two of them per break, so at the defaults (breaks of at least 7.5 s) that takes over a
/// quarter of an hour; an attempt timeout keeps a permit far shorter.
#[must_use = "a permit must be handed back with on_outcome (or release)"]
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Permit {
    word: u64,
}

/// Bits of the grant instant a permit keeps.
const STARTED_BITS: u32 = 53;
/// The bit that says the attempt's latency is not the dependency's to learn
/// ([`Permit::hold_learning`]). On a 64-bit host it sits below the kind, so that reading the
/// kind is one shift with no mask to take the held bit off. A 32-bit target keeps it on top:
/// there the kind sits in the high half either way, and the other layout made the full firmware
/// images 56 to 100 B larger.
const HELD_BIT: u32 = if cfg!(target_pointer_width = "64") {
    STARTED_BITS + 8
} else {
    STARTED_BITS + 10
};
/// Where the kind's two bits start: the word's top two on a 64-bit host, just above the period
/// elsewhere (see [`HELD_BIT`]).
const KIND_SHIFT: u32 = if cfg!(target_pointer_width = "64") {
    STARTED_BITS + 9
} else {
    STARTED_BITS + 8
};

impl Permit {
    #[inline]
    pub(crate) const fn new(epoch: u8, kind: Kind, started: Instant) -> Permit {
        Permit {
            word: put(started.as_nanos(), 0, STARTED_BITS)
                | put(epoch as u64, STARTED_BITS, 8)
                | put(kind as u64, KIND_SHIFT, 2),
        }
    }

    /// The breaker period (wrapping) this permit was granted in. Probe slots belong to a
    /// period: a probe still out when its period ends (a sibling failed and re-opened the
    /// breaker, or it was reclaimed) no longer holds a slot, and its outcome decides nothing.
    #[must_use]
    #[inline]
    pub const fn period(&self) -> u8 {
        // Masked to 8 bits.
        field(self.word, STARTED_BITS, 8) as u8
    }

    #[inline]
    pub(crate) const fn kind(&self) -> Kind {
        match field(self.word, KIND_SHIFT, 2) {
            0 => Kind::Normal,
            1 => Kind::Probe,
            2 => Kind::Ramp,
            _ => Kind::Unguarded,
        }
    }

    /// The same permit, its latency not to be learned: the caller's own side was saturated
    /// while the attempt ran (see [`saturation`](crate::limits::saturation)), so the time it took says
    /// more about the caller than about the dependency. The breaker still counts a success or
    /// a failure, but neither teaches its latency to the baseline (the median, the p95, the
    /// measured ceiling and backoff base, the hedge delay) nor judges it slow by it; and a
    /// timeout is the caller's (its timer fired late, or the answer waited for a thread),
    /// counted as a cancellation, like one the call's own deadline cut short. The call itself
    /// still sees the timeout, and retries it. A lean breaker, which learns no latency, takes
    /// every outcome as it is.
    ///
    /// ```
    /// use stormguard_core::{Breaker, BreakerSettings, Duration, Instant, Outcome};
    ///
    /// let mut breaker = Breaker::new(BreakerSettings::defaults("db"));
    /// let ms = Instant::from_millis;
    /// for i in 0..100 {
    ///     let permit = breaker.try_acquire(ms(10 * i))?;
    ///     breaker.on_outcome(ms(10 * i + 4), permit, Outcome::Success, &mut |_| {});
    /// }
    /// let learned = breaker.normal_latency(ms(1_000));
    /// assert!(learned.is_some());
    /// // Nine 900 ms answers while the caller's runtime was starved are not learned.
    /// for i in 0..9 {
    ///     let permit = breaker.try_acquire(ms(1_000 + i))?.hold_learning();
    ///     assert!(permit.learning_held());
    ///     breaker.on_outcome(ms(1_900 + i), permit, Outcome::Success, &mut |_| {});
    /// }
    /// assert_eq!(breaker.normal_latency(ms(1_910)), learned);
    /// # Ok::<(), stormguard_core::Refused>(())
    /// ```
    #[inline]
    pub const fn hold_learning(self) -> Permit {
        Permit {
            word: self.word | 1 << HELD_BIT,
        }
    }

    /// Whether the attempt's latency is not to be learned ([`Permit::hold_learning`]).
    #[must_use]
    #[inline]
    pub const fn learning_held(&self) -> bool {
        self.word & 1 << HELD_BIT != 0
    }

    /// `true` for a half-open probe.
    #[must_use]
    pub const fn is_probe(&self) -> bool {
        matches!(self.kind(), Kind::Probe)
    }

    /// Time from the grant to `now`: zero if `now` is earlier (a clock that stepped back).
    #[must_use]
    pub const fn latency(&self, now: Instant) -> Duration {
        let elapsed = field(now.as_nanos().wrapping_sub(self.word), 0, STARTED_BITS);
        if elapsed >= 1 << (STARTED_BITS - 1) {
            Duration::ZERO
        } else {
            Duration::from_nanos(elapsed)
        }
    }

    /// The same permit, as if granted at `started`: a hedge that answered while the first
    /// attempt still ran is learned as that attempt (see `HedgedPair::finished`).
    #[inline]
    pub(crate) const fn granted_at(self, started: Instant) -> Permit {
        Permit {
            word: (self.word & !mask(STARTED_BITS)) | put(started.as_nanos(), 0, STARTED_BITS),
        }
    }

    /// A permit for a call no breaker guards.
    pub(crate) const fn unguarded(started: Instant) -> Permit {
        Permit::new(0, Kind::Unguarded, started)
    }
}
