//! The lean breaker: the single-threaded breaker for rules that need no statistics
//! (consecutive failures, the doubling break, half-open probes), holding its settings by
//! `&'static` reference. About 32 bytes of RAM on a 32-bit microcontroller, and the statistics
//! code is not linked.

use core::cell::Cell;

use crate::breaker::settings::BreakerSettings;
use crate::breaker::stats::NoStats;
use crate::breaker::{admission_via_core, single_threaded_api};
use crate::breaker::{Core, Snapshot, State};
use crate::cell::const_unless_loom;
use crate::error::Refused;
use crate::error::{Bound, SettingsError};
use crate::event::Event;
use crate::name::Name;
use crate::outcome::Outcome;
use crate::part::{HedgeSuppressed, Permit};
use crate::ratio::Ratio;
use crate::time::{Duration, Instant};

/// A single-threaded (`&mut self`) breaker that keeps no statistics: consecutive failures open
/// it, the break doubles and is jittered, probes close it — exactly the rules of
/// [`Breaker`](crate::Breaker), run by the same code, for settings whose other rules are unset
/// ([`BreakerSettings::consecutive_only`]). Its settings live in a `static`, so the breaker
/// itself is a few words.
///
/// ```
/// use stormguard_core::{BreakerSettings, Instant, LeanBreaker, Outcome, State};
///
/// static RADIO: BreakerSettings = match BreakerSettings::consecutive_only("radio", 3) {
///     Ok(s) => s,
///     Err(_) => panic!("invalid breaker settings"),
/// };
/// let mut breaker = LeanBreaker::new(&RADIO)?;
/// let now = Instant::from_secs(1);
/// for _ in 0..3 {
///     let permit = breaker.try_acquire(now).unwrap();
///     breaker.on_outcome(now, permit, Outcome::Transient, &mut |_| {});
/// }
/// assert_eq!(breaker.state(now), State::Open);
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Debug)]
pub struct LeanBreaker {
    core: Core<Cell<u64>, NoStats, &'static BreakerSettings>,
}

impl LeanBreaker {
    const_unless_loom! {
        /// A closed lean breaker over `settings`, or the first setting that needs statistics
        /// (which a lean breaker cannot keep).
        pub fn new(settings: &'static BreakerSettings) -> Result<LeanBreaker, SettingsError> {
            match settings.first_statistics_rule() {
                Some(field) => Err(SettingsError::new(field, Bound::UnsetWithoutStatistics)),
                None => Ok(LeanBreaker { core: Core::lean(settings) }),
            }
        }
    }

    /// The settings this breaker was built with.
    #[must_use]
    pub const fn settings(&self) -> &'static BreakerSettings {
        self.core.lean_settings()
    }

    /// The breaker's name.
    #[must_use]
    pub const fn name(&self) -> &'static Name {
        self.core.lean_settings().name()
    }

    single_threaded_api!();
}

// A lean breaker keeps no statistics: the driver never asks it what it learned.
admission_via_core!(impl [] for LeanBreaker, learns: false);

#[cfg(feature = "defmt")]
impl defmt::Format for LeanBreaker {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "LeanBreaker({})", self.name());
    }
}
