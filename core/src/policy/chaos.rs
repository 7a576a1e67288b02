//! Fault injection: a seeded decision, per attempt, to fail it or slow it down, so that a test or
//! a game day can watch the classifier, the retries, the breaker and the budget answer a fault
//! they did not have to wait for.
//!
//! The core decides; the adapter acts. A roll says whether the attempt fails (the adapter makes
//! the failure a value of the operation's own error type, or an HTTP 503, so it is classified
//! like a real one) and how long it is held back first. Roll `k` of a given seed is always the
//! same: the counts over a run are repeatable, on one thread or many (the shared form numbers its
//! rolls with one atomic counter), and on firmware as on a host.
//!
//! Off by default: [`ChaosSettings::OFF`] injects nothing and draws nothing.
//!
//! ```
//! use stormguard_core::{policy::Chaos, policy::ChaosSettings, Duration, Ratio};
//!
//! let settings = ChaosSettings::builder()
//!     .faults(Ratio::from_percent(10).unwrap())
//!     .latency(Ratio::from_percent(5).unwrap(), Duration::from_millis(300))
//!     .seed(7)
//!     .build()?;
//! let mut chaos = Chaos::new(settings);
//! let mut failed = 0;
//! for _ in 0..1_000 {
//!     // The gate: inject only into the calls under test (one tenant, one route).
//!     if chaos.roll(true).fault {
//!         failed += 1;
//!     }
//! }
//! assert!((60..140).contains(&failed));
//! // The same seed, the same rolls.
//! assert_eq!(Chaos::new(settings).counts().rolls, 0);
//! assert_eq!(chaos.counts().faults, failed);
//! # Ok::<(), stormguard_core::SettingsError>(())
//! ```

use core::fmt;

use crate::cell::const_unless_loom;
use crate::error::{Bound, Field, SettingsError};
use crate::loom::{AtomicU64, Ordering};
use crate::ratio::Ratio;
use crate::rng::JitterRng;
use crate::time::Duration;

/// What to inject, and how often. Build with [`ChaosSettings::builder`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ChaosSettings {
    faults: Ratio,
    slowed: Ratio,
    latency: Duration,
    seed: u64,
}

impl ChaosSettings {
    /// Nothing injected (the default).
    pub const OFF: ChaosSettings = ChaosSettings {
        faults: Ratio::ZERO,
        slowed: Ratio::ZERO,
        latency: Duration::ZERO,
        seed: 0,
    };

    /// A builder holding [`ChaosSettings::OFF`].
    #[must_use]
    pub const fn builder() -> ChaosSettingsBuilder {
        ChaosSettingsBuilder {
            settings: ChaosSettings::OFF,
        }
    }

    /// The share of attempts failed.
    #[must_use]
    pub const fn faults(&self) -> Ratio {
        self.faults
    }

    /// The share of attempts held back by [`ChaosSettings::latency`] before they run (or fail).
    #[must_use]
    pub const fn slowed(&self) -> Ratio {
        self.slowed
    }

    /// How long a slowed attempt is held back.
    #[must_use]
    pub const fn latency(&self) -> Duration {
        self.latency
    }

    /// The seed the rolls are drawn from.
    #[must_use]
    pub const fn seed(&self) -> u64 {
        self.seed
    }

    /// Whether any roll can inject anything.
    #[must_use]
    pub const fn is_off(&self) -> bool {
        self.faults.is_zero() && self.slowed.is_zero()
    }

    /// Roll number `index`: the same for the same seed and index, on every target.
    #[must_use]
    pub fn roll_at(&self, index: u64) -> Roll {
        if self.is_off() {
            return Roll::PASS;
        }
        // Each roll its own generator, seeded from the seed and the roll's number: rolls may be
        // taken in any order (by threads racing for numbers) and still be the same rolls.
        let mut rng = JitterRng::with_seed(self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let fault = below(rng.next_u32(), self.faults);
        let slowed = below(rng.next_u32(), self.slowed);
        Roll {
            fault,
            delay: if slowed { self.latency } else { Duration::ZERO },
        }
    }
}

impl Default for ChaosSettings {
    fn default() -> Self {
        ChaosSettings::OFF
    }
}

/// Whether a uniform 32-bit draw falls below `share` (exact: `draw / 2^32 < ppm / 10^6`).
fn below(draw: u32, share: Ratio) -> bool {
    u64::from(draw).saturating_mul(1_000_000) < u64::from(share.ppm()) << 32
}

/// Builds [`ChaosSettings`]; every value is checked by [`ChaosSettingsBuilder::build`].
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ChaosSettingsBuilder {
    settings: ChaosSettings,
}

impl ChaosSettingsBuilder {
    /// Fails this share of attempts (default none).
    #[must_use]
    pub const fn faults(mut self, share: Ratio) -> Self {
        self.settings.faults = share;
        self
    }

    /// Holds this share of attempts back by `latency` before they run (default none). A slowed
    /// attempt may also be failed: it fails after the wait, as a slow error does.
    #[must_use]
    pub const fn latency(mut self, share: Ratio, latency: Duration) -> Self {
        self.settings.slowed = share;
        self.settings.latency = latency;
        self
    }

    /// The seed the rolls are drawn from (default 0).
    #[must_use]
    pub const fn seed(mut self, seed: u64) -> Self {
        self.settings.seed = seed;
        self
    }

    /// The settings, or the setting at fault: a share of slowed attempts needs a latency above
    /// zero.
    pub const fn build(self) -> Result<ChaosSettings, SettingsError> {
        let s = self.settings;
        if !s.slowed.is_zero() && s.latency.is_zero() {
            return Err(SettingsError::new(
                Field::InjectedLatency,
                Bound::AtLeastDuration(Duration::from_nanos(1)),
            ));
        }
        Ok(s)
    }
}

/// One roll: what to do to one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Roll {
    /// Fail the attempt (after [`Roll::delay`]) instead of running it.
    pub fault: bool,
    /// Hold the attempt back this long first (zero for not at all).
    pub delay: Duration,
}

impl Roll {
    /// Nothing injected.
    pub const PASS: Roll = Roll {
        fault: false,
        delay: Duration::ZERO,
    };

    /// Whether anything is injected.
    #[must_use]
    pub const fn is_pass(&self) -> bool {
        !self.fault && self.delay.is_zero()
    }
}

/// What a chaos source has injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ChaosCounts {
    /// Rolls taken (attempts the gate let through to a roll).
    pub rolls: u64,
    /// Attempts failed.
    pub faults: u64,
    /// Attempts held back.
    pub slowed: u64,
}

impl fmt::Display for ChaosCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rolls: {} failed, {} slowed",
            self.rolls, self.faults, self.slowed
        )
    }
}

/// Fault injection for one owner (`&mut`): a firmware task, a test.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Chaos {
    settings: ChaosSettings,
    counts: ChaosCounts,
}

impl Chaos {
    /// A source with validated `settings`.
    #[must_use]
    pub const fn new(settings: ChaosSettings) -> Chaos {
        Chaos {
            settings,
            counts: ChaosCounts {
                rolls: 0,
                faults: 0,
                slowed: 0,
            },
        }
    }

    /// The settings.
    #[must_use]
    pub const fn settings(&self) -> &ChaosSettings {
        &self.settings
    }

    /// What to do to the attempt about to start. `gate` says whether this attempt is one to
    /// inject into (one tenant, one route); a closed gate takes no roll, so the rolls of the
    /// gated attempts stay the same whatever else runs beside them.
    pub fn roll(&mut self, gate: bool) -> Roll {
        if !gate || self.settings.is_off() {
            return Roll::PASS;
        }
        let roll = self.settings.roll_at(self.counts.rolls);
        self.counts = count(self.counts, roll);
        roll
    }

    /// What has been injected so far.
    #[must_use]
    pub const fn counts(&self) -> ChaosCounts {
        self.counts
    }
}

fn count(mut c: ChaosCounts, roll: Roll) -> ChaosCounts {
    c.rolls = c.rolls.saturating_add(1);
    c.faults = c.faults.saturating_add(u64::from(roll.fault));
    c.slowed = c.slowed.saturating_add(u64::from(!roll.delay.is_zero()));
    c
}

/// Fault injection shared between threads (`&self`): rolls are numbered by one atomic counter,
/// so the counts over a run are the same however the threads interleave.
#[derive(Debug)]
pub struct SharedChaos {
    settings: ChaosSettings,
    rolls: AtomicU64,
    faults: AtomicU64,
    slowed: AtomicU64,
}

impl SharedChaos {
    const_unless_loom! {
        /// A source with validated `settings`.
        #[must_use]
        pub fn new(settings: ChaosSettings) -> SharedChaos {
            SharedChaos {
                settings,
                rolls: AtomicU64::new(0),
                faults: AtomicU64::new(0),
                slowed: AtomicU64::new(0),
            }
        }
    }

    /// The settings.
    #[must_use]
    pub const fn settings(&self) -> &ChaosSettings {
        &self.settings
    }

    /// [`Chaos::roll`], from any thread.
    pub fn roll(&self, gate: bool) -> Roll {
        if !gate || self.settings.is_off() {
            return Roll::PASS;
        }
        let index = self.rolls.fetch_add(1, Ordering::Relaxed);
        let roll = self.settings.roll_at(index);
        if roll.fault {
            self.faults.fetch_add(1, Ordering::Relaxed);
        }
        if !roll.delay.is_zero() {
            self.slowed.fetch_add(1, Ordering::Relaxed);
        }
        roll
    }

    /// What has been injected so far (each count read on its own: a roll in progress may show
    /// in one and not yet in another).
    #[must_use]
    pub fn counts(&self) -> ChaosCounts {
        ChaosCounts {
            rolls: self.rolls.load(Ordering::Relaxed),
            faults: self.faults.load(Ordering::Relaxed),
            slowed: self.slowed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(faults: u32, slowed: u32) -> ChaosSettings {
        ChaosSettings::builder()
            .faults(Ratio::from_percent(faults).unwrap_or(Ratio::ZERO))
            .latency(
                Ratio::from_percent(slowed).unwrap_or(Ratio::ZERO),
                Duration::from_millis(250),
            )
            .seed(42)
            .build()
            .unwrap_or(ChaosSettings::OFF)
    }

    #[test]
    fn off_injects_nothing_and_takes_no_roll() {
        let mut chaos = Chaos::new(ChaosSettings::OFF);
        for _ in 0..100 {
            assert!(chaos.roll(true).is_pass());
        }
        assert_eq!(chaos.counts(), ChaosCounts::default());
    }

    #[test]
    fn the_shares_injected_are_the_shares_asked_for() {
        let mut chaos = Chaos::new(settings(20, 10));
        // Fewer rolls under miri, which interprets every step; the bounds are 5 standard
        // deviations of the binomial for either count (sqrt(n p (1 - p)): 126 and 95 calls of
        // 100 000, 40 and 30 of 10 000).
        let (n, faults_within, slowed_within) = if cfg!(miri) {
            (10_000u64, 200, 150)
        } else {
            (100_000u64, 630, 475)
        };
        for _ in 0..n {
            let roll = chaos.roll(true);
            assert!(roll.delay.is_zero() || roll.delay == Duration::from_millis(250));
        }
        let c = chaos.counts();
        assert_eq!(c.rolls, n);
        assert!(c.faults.abs_diff(n / 5) < faults_within, "{c}");
        assert!(c.slowed.abs_diff(n / 10) < slowed_within, "{c}");
    }

    #[test]
    fn a_closed_gate_takes_no_roll_so_the_gated_attempts_see_the_same_rolls() {
        let mut alone = Chaos::new(settings(30, 30));
        let mut mixed = Chaos::new(settings(30, 30));
        for i in 0..1_000u32 {
            let expected = alone.roll(true);
            // Other traffic between the gated attempts: never rolled for.
            for _ in 0..(i % 3) {
                assert!(mixed.roll(false).is_pass());
            }
            assert_eq!(mixed.roll(true), expected);
        }
        assert_eq!(mixed.counts(), alone.counts());
    }

    #[test]
    fn the_shared_form_rolls_as_the_owned_one_does() {
        let mut owned = Chaos::new(settings(25, 5));
        let shared = SharedChaos::new(settings(25, 5));
        for _ in 0..5_000 {
            assert_eq!(shared.roll(true), owned.roll(true));
        }
        assert_eq!(shared.counts(), owned.counts());
    }

    #[test]
    fn another_seed_gives_other_rolls() {
        let a = settings(50, 0);
        let b = ChaosSettings { seed: 43, ..a };
        let differ = (0..64).filter(|&k| a.roll_at(k) != b.roll_at(k)).count();
        assert!(differ > 10, "{differ} of 64 rolls differ");
    }

    #[test]
    fn a_share_slowed_needs_a_latency() {
        let e = ChaosSettings::builder()
            .latency(
                Ratio::from_percent(10).unwrap_or(Ratio::ZERO),
                Duration::ZERO,
            )
            .build()
            .unwrap_err();
        assert_eq!(e.field, Field::InjectedLatency);
        // Every roll is well defined at the ends of the range.
        let all = ChaosSettings::builder()
            .faults(Ratio::ONE)
            .latency(Ratio::ONE, Duration::from_millis(1))
            .build()
            .unwrap_or(ChaosSettings::OFF);
        for k in [0, 1, u64::MAX] {
            assert_eq!(
                all.roll_at(k),
                Roll {
                    fault: true,
                    delay: Duration::from_millis(1)
                }
            );
        }
    }
}
