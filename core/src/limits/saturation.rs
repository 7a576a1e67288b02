//! Local saturation: the caller's own side running late, told apart from a slow dependency.
//!
//! When the caller's runtime is starved (every worker busy, a blocking call on an async thread,
//! a stop-the-world pause), every attempt it times looks slow, whatever the dependency did. A
//! breaker that learned from those latencies would raise its median and p95, and with them the
//! measured attempt ceiling, the measured backoff base and the hedge delay, to the caller's
//! own stall. So an adapter probes its runtime's scheduling delay: a timer due every
//! [`interval`](SaturationSettings::interval), and how late it fires.
//!
//! - [`SaturationDetector`] judges the probes: once armed (after 20 probes) a probe later than
//!   a multiple (4x) of the normal delay, and never less than a floor (20 ms), begins an
//!   episode, reported once as [`SaturationDetected`]; the episode drains after two probes in
//!   a row back under that threshold. The normal is a moving average of the probes outside
//!   episodes, so an episode never becomes the normal.
//! - [`SaturationSignal`] publishes the detector's state lock-free to every call: an attempt
//!   that ran while an episode was on, or while the next probe was overdue by more than the
//!   threshold (a starved probe cannot report), has its permit marked
//!   [`Permit::hold_learning`](crate::Permit::hold_learning) by the call's [`Parts`](crate::Parts), and the
//!   breaker counts its outcome but learns nothing from its latency.
//!
//! ```
//! use stormguard_core::limits::saturation::{Probed, SaturationDetector, SaturationSettings, SaturationSignal};
//! use stormguard_core::{Duration, Instant};
//!
//! let settings = SaturationSettings::builder().interval(Duration::from_millis(50)).build()?;
//! let mut detector = SaturationDetector::new(settings, Instant::ZERO);
//! let signal = SaturationSignal::new();
//! let mut now = Instant::ZERO;
//! // 20 probes that fire 1 ms late arm it.
//! for _ in 0..20 {
//!     now = detector.next_due().saturating_add(Duration::from_millis(1));
//!     assert_eq!(detector.on_probe(now), Probed::Learning);
//! }
//! // A probe 300 ms late: the runtime was starved.
//! now = detector.next_due().saturating_add(Duration::from_millis(300));
//! let Probed::Detected(episode) = detector.on_probe(now) else { panic!() };
//! assert_eq!(episode.delay, Duration::from_millis(300));
//! assert_eq!(episode.threshold, Duration::from_millis(20)); // the floor: 4x 1 ms is less
//! signal.publish(&detector);
//! // An attempt that began before the probe fired and ends now learns nothing.
//! assert!(signal.holds(now.saturating_sub(Duration::from_millis(100)), now));
//! # Ok::<(), stormguard_core::SettingsError>(())
//! ```

use core::fmt;

use crate::cell::const_unless_loom;
use crate::error::{Bound, Field, SettingsError};
use crate::loom::{AtomicU64, Ordering};
use crate::part::Saturation;
use crate::ratio::Multiple;
use crate::time::{Duration, Instant};

/// How the runtime's scheduling delay is probed and judged. Built with
/// [`SaturationSettings::builder`], validated by [`SaturationSettingsBuilder::build`].
///
/// | setting | default | meaning |
/// |---|---|---|
/// | interval | 50 ms | a probe is due this long after the last one fired; 1 ms to 10 s |
/// | multiple | 4x | a probe later than this times the normal delay is saturation; above 1 |
/// | floor | 20 ms | ... and never less late than this; at least 1 ms |
/// | arm after | 20 | probes that learn the normal before any is judged; at least 1 |
/// | drain after | 2 | probes in a row under the threshold that end an episode; at least 1 |
///
/// ```
/// use stormguard_core::limits::saturation::SaturationSettings;
/// use stormguard_core::{Duration, Field};
///
/// let s = SaturationSettings::default();
/// assert_eq!(s.to_string(), "a probe every 50ms, saturated when one is over 4x its normal delay and 20ms late");
/// let err = SaturationSettings::builder().floor(Duration::ZERO).build().unwrap_err();
/// assert_eq!(err.field, Field::SaturationFloor);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SaturationSettings {
    interval: Duration,
    multiple: Multiple,
    floor: Duration,
    arm_after: u32,
    drain_after: u32,
}

/// Builds [`SaturationSettings`]; see there for the defaults and bounds.
#[derive(Clone, Copy, Debug)]
#[must_use]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SaturationSettingsBuilder {
    settings: SaturationSettings,
}

impl SaturationSettings {
    /// The default probe interval: 50 ms.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(50);
    /// The default multiple of the normal delay: 4x.
    pub const DEFAULT_MULTIPLE: Multiple = Multiple::from_milli(4_000);
    /// The default floor: 20 ms.
    pub const DEFAULT_FLOOR: Duration = Duration::from_millis(20);
    /// The default number of probes before any is judged: 20.
    pub const DEFAULT_ARM_AFTER: u32 = 20;
    /// The default number of quiet probes in a row that end an episode: 2.
    pub const DEFAULT_DRAIN_AFTER: u32 = 2;
    /// The longest probe interval the settings take: 10 s.
    pub const MAX_INTERVAL: Duration = Duration::from_secs(10);

    /// A builder holding the defaults.
    pub const fn builder() -> SaturationSettingsBuilder {
        SaturationSettingsBuilder {
            settings: SaturationSettings {
                interval: SaturationSettings::DEFAULT_INTERVAL,
                multiple: SaturationSettings::DEFAULT_MULTIPLE,
                floor: SaturationSettings::DEFAULT_FLOOR,
                arm_after: SaturationSettings::DEFAULT_ARM_AFTER,
                drain_after: SaturationSettings::DEFAULT_DRAIN_AFTER,
            },
        }
    }

    /// How long after a probe fires the next one is due.
    #[must_use]
    pub const fn interval(&self) -> Duration {
        self.interval
    }

    /// A probe later than this times the normal delay is saturation.
    #[must_use]
    pub const fn multiple(&self) -> Multiple {
        self.multiple
    }

    /// The least late a probe must be to be saturation.
    #[must_use]
    pub const fn floor(&self) -> Duration {
        self.floor
    }

    /// The probes that learn the normal before any is judged.
    #[must_use]
    pub const fn arm_after(&self) -> u32 {
        self.arm_after
    }

    /// The probes in a row under the threshold that end an episode.
    #[must_use]
    pub const fn drain_after(&self) -> u32 {
        self.drain_after
    }
}

impl SaturationSettingsBuilder {
    /// How long after a probe fires the next one is due (default 50 ms; 1 ms to 10 s).
    pub const fn interval(mut self, d: Duration) -> Self {
        self.settings.interval = d;
        self
    }

    /// A probe later than this times the normal delay is saturation (default 4x; above 1).
    pub const fn multiple(mut self, m: Multiple) -> Self {
        self.settings.multiple = m;
        self
    }

    /// The least late a probe must be to be saturation (default 20 ms; at least 1 ms): a
    /// runtime whose timers fire within a millisecond would otherwise call a 5 ms hiccup an
    /// episode.
    pub const fn floor(mut self, d: Duration) -> Self {
        self.settings.floor = d;
        self
    }

    /// The probes that learn the normal before any is judged (default 20; at least 1).
    pub const fn arm_after(mut self, n: u32) -> Self {
        self.settings.arm_after = n;
        self
    }

    /// The probes in a row under the threshold that end an episode (default 2; at least 1).
    pub const fn drain_after(mut self, n: u32) -> Self {
        self.settings.drain_after = n;
        self
    }

    /// Checks every bound and returns the settings, or the first setting at fault.
    pub const fn build(self) -> Result<SaturationSettings, SettingsError> {
        let s = self.settings;
        let ms = Duration::from_millis(1);
        if s.interval.as_nanos() < ms.as_nanos() {
            return Err(SettingsError::new(
                Field::ProbeInterval,
                Bound::AtLeastDuration(ms),
            ));
        }
        if s.interval.as_nanos() > SaturationSettings::MAX_INTERVAL.as_nanos() {
            return Err(SettingsError::new(
                Field::ProbeInterval,
                Bound::AtMostDuration(SaturationSettings::MAX_INTERVAL),
            ));
        }
        if !s.multiple.is_above_one() {
            return Err(SettingsError::new(
                Field::SaturationMultiple,
                Bound::AboveOne,
            ));
        }
        if !s.multiple.is_within_max() {
            return Err(SettingsError::new(
                Field::SaturationMultiple,
                Bound::AtMost(Multiple::MAX_WHOLE as u64),
            ));
        }
        if s.floor.as_nanos() < ms.as_nanos() {
            return Err(SettingsError::new(
                Field::SaturationFloor,
                Bound::AtLeastDuration(ms),
            ));
        }
        if s.arm_after == 0 {
            return Err(SettingsError::new(Field::ArmAfter, Bound::AtLeast(1)));
        }
        if s.drain_after == 0 {
            return Err(SettingsError::new(Field::DrainAfter, Bound::AtLeast(1)));
        }
        Ok(s)
    }
}

impl Default for SaturationSettings {
    fn default() -> Self {
        SaturationSettings::builder().settings
    }
}

impl fmt::Display for SaturationSettings {
    /// E.g. `a probe every 50ms, saturated when one is over 4x its normal delay and 20ms late`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a probe every {}, saturated when one is over {} its normal delay and {} late",
            self.interval, self.multiple, self.floor
        )
    }
}

/// An episode of local saturation began: reported once per episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SaturationDetected {
    /// How late the probe that saw it fired.
    pub delay: Duration,
    /// The normal delay it was judged against.
    pub normal: Duration,
    /// The threshold it crossed: the normal times the multiple, or the floor.
    pub threshold: Duration,
}

/// What one probe told the detector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Probed {
    /// Not armed yet: the probe taught the normal delay.
    Learning,
    /// On time, or late within the threshold.
    Steady,
    /// An episode began with this probe (told once per episode).
    Detected(SaturationDetected),
    /// An episode goes on.
    Saturated,
    /// The episode that began at `since` ended; its last late probe was `last_late` late.
    Drained {
        /// When the episode began: the instant its first late probe was due.
        since: Instant,
        /// How late its last late probe fired.
        last_late: Duration,
    },
}

/// An episode under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
struct Episode {
    since: Instant,
    last_late: Duration,
    /// Probes in a row under the threshold.
    quiet: u32,
}

/// Judges the probes of one runtime's scheduling delay (see the [module](self) docs): plain
/// data, `&mut`, fed by one probe task, its state published with [`SaturationSignal`].
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SaturationDetector {
    settings: SaturationSettings,
    /// When the next probe is due.
    due: Instant,
    /// Probes seen, up to `arm_after`.
    probes: u32,
    /// The moving average of the delay outside episodes (an eighth per probe).
    normal: Duration,
    episode: Option<Episode>,
    /// When the last episode ended.
    drained_at: Option<Instant>,
    /// Episodes begun.
    episodes: u64,
}

/// The detector at one moment, for health endpoints and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SaturationSnapshot {
    /// Whether enough probes came to judge one.
    pub armed: bool,
    /// Whether an episode is on.
    pub saturated: bool,
    /// The normal delay of a probe.
    pub normal: Duration,
    /// How late a probe must be to begin an episode.
    pub threshold: Duration,
    /// Episodes begun.
    pub episodes: u64,
}

impl SaturationDetector {
    /// A detector whose first probe is due one interval after `now`.
    #[must_use]
    pub const fn new(settings: SaturationSettings, now: Instant) -> SaturationDetector {
        SaturationDetector {
            settings,
            due: now.saturating_add(settings.interval),
            probes: 0,
            normal: Duration::ZERO,
            episode: None,
            drained_at: None,
            episodes: 0,
        }
    }

    /// The settings.
    #[must_use]
    pub const fn settings(&self) -> &SaturationSettings {
        &self.settings
    }

    /// When the next probe is due: the probe sleeps until then and reports with
    /// [`SaturationDetector::on_probe`] when it woke.
    #[must_use]
    pub const fn next_due(&self) -> Instant {
        self.due
    }

    /// Whether enough probes came to judge one.
    #[must_use]
    pub const fn is_armed(&self) -> bool {
        self.probes >= self.settings.arm_after
    }

    /// Whether an episode is on.
    #[must_use]
    pub const fn is_saturated(&self) -> bool {
        self.episode.is_some()
    }

    /// How late a probe must be to begin an episode (or to keep one going): the normal delay
    /// times the multiple, and at least the floor.
    #[must_use]
    pub fn threshold(&self) -> Duration {
        self.settings
            .multiple
            .apply(self.normal)
            .max(self.settings.floor)
    }

    /// The probe due at [`next_due`](SaturationDetector::next_due) fired at `now`: judges how
    /// late it was, and makes the next one due an interval after `now`. A probe that fired
    /// early (a clock that stepped back) was on time.
    pub fn on_probe(&mut self, now: Instant) -> Probed {
        let due = self.due;
        let delay = now.saturating_duration_since(due);
        self.due = now.saturating_add(self.settings.interval);
        if !self.is_armed() {
            self.learn(delay);
            self.probes = self.probes.saturating_add(1);
            return Probed::Learning;
        }
        let threshold = self.threshold();
        let late = delay > threshold;
        match &mut self.episode {
            None if late => {
                self.episode = Some(Episode {
                    since: due,
                    last_late: delay,
                    quiet: 0,
                });
                self.episodes = self.episodes.saturating_add(1);
                Probed::Detected(SaturationDetected {
                    delay,
                    normal: self.normal,
                    threshold,
                })
            }
            None => {
                self.learn(delay);
                Probed::Steady
            }
            Some(episode) if late => {
                episode.quiet = 0;
                episode.last_late = delay;
                Probed::Saturated
            }
            Some(episode) => {
                episode.quiet = episode.quiet.saturating_add(1);
                if episode.quiet < self.settings.drain_after {
                    return Probed::Saturated;
                }
                let (since, last_late) = (episode.since, episode.last_late);
                self.episode = None;
                self.drained_at = Some(now);
                Probed::Drained { since, last_late }
            }
        }
    }

    /// Moves the normal an eighth of the way to `delay` (the first probe sets it).
    fn learn(&mut self, delay: Duration) {
        let (normal, delay) = (self.normal.as_nanos(), delay.as_nanos());
        self.normal = Duration::from_nanos(if self.probes == 0 {
            delay
        } else if delay >= normal {
            normal.saturating_add(delay.saturating_sub(normal) / 8)
        } else {
            normal.saturating_sub(normal.saturating_sub(delay) / 8)
        });
    }

    /// The instant from which a probe that has not fired means saturation: the next one's due
    /// instant plus the threshold. `None` before the detector is armed.
    #[must_use]
    pub fn overdue_at(&self) -> Option<Instant> {
        if self.is_armed() {
            Some(self.due.saturating_add(self.threshold()))
        } else {
            None
        }
    }

    /// The detector now.
    #[must_use]
    pub fn snapshot(&self) -> SaturationSnapshot {
        SaturationSnapshot {
            armed: self.is_armed(),
            saturated: self.is_saturated(),
            normal: self.normal,
            threshold: self.threshold(),
            episodes: self.episodes,
        }
    }
}

/// A detector's state published to every call, lock-free: one writer (the probe task, with
/// [`SaturationSignal::publish`] after each probe), any number of readers. Two words.
///
/// See the [module](self) docs for an example.
#[derive(Debug)]
pub struct SaturationSignal {
    /// While an episode is on, `u64::MAX`; after one, the instant it drained plus one
    /// nanosecond; before any, 0.
    saturated_until: AtomicU64,
    /// [`SaturationDetector::overdue_at`] in nanoseconds; `u64::MAX` while unarmed.
    overdue_at: AtomicU64,
}

impl SaturationSignal {
    const_unless_loom! {
        /// A signal that holds nothing until a detector is published to it.
        #[must_use]
        pub fn new() -> SaturationSignal {
            SaturationSignal {
                saturated_until: AtomicU64::new(0),
                overdue_at: AtomicU64::new(u64::MAX),
            }
        }
    }

    /// Publishes `detector`'s state (after each of its probes).
    pub fn publish(&self, detector: &SaturationDetector) {
        let until = if detector.is_saturated() {
            u64::MAX
        } else {
            detector
                .drained_at
                .map_or(0, |at| at.as_nanos().saturating_add(1))
        };
        self.saturated_until.store(until, Ordering::Relaxed);
        let overdue = detector.overdue_at().map_or(u64::MAX, Instant::as_nanos);
        self.overdue_at.store(overdue, Ordering::Relaxed);
    }

    /// Whether the runtime is saturated at `now`: an episode is on, or the next probe is
    /// overdue by more than the threshold.
    #[must_use]
    pub fn is_saturated(&self, now: Instant) -> bool {
        self.saturated_until.load(Ordering::Relaxed) == u64::MAX || self.overdue(now)
    }

    /// Whether an attempt that began at `started` and ended at `now` ran while the runtime was
    /// saturated: an episode was on at some point of it, or the probe is overdue now. Its
    /// latency is then not the dependency's to learn.
    #[must_use]
    pub fn holds(&self, started: Instant, now: Instant) -> bool {
        self.saturated_until.load(Ordering::Relaxed) > started.as_nanos() || self.overdue(now)
    }

    /// Whether the next probe is overdue at `now` by more than the threshold.
    fn overdue(&self, now: Instant) -> bool {
        now.as_nanos() >= self.overdue_at.load(Ordering::Relaxed)
    }
}

impl Default for SaturationSignal {
    fn default() -> Self {
        SaturationSignal::new()
    }
}

impl Saturation for SaturationSignal {
    #[inline]
    fn holds(&self, started: Instant, now: Instant) -> bool {
        SaturationSignal::holds(self, started, now)
    }
}
