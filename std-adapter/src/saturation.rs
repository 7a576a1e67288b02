//! Local saturation: the probe of the runtime's own scheduling delay ([`SaturationProbe`]),
//! and the core's settings and reports it uses.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use stormguard_core::limits::saturation::{Probed, SaturationDetector, SaturationSignal};
pub use stormguard_core::limits::saturation::{
    SaturationDetected, SaturationSettings, SaturationSettingsBuilder, SaturationSnapshot,
};

use crate::{Clock, DefaultClock, Listener, NoListener};

/// A task that probes how late the tokio runtime it runs on wakes its timers, and tells every
/// policy given it ([`PolicyBuilder::saturation`](crate::PolicyBuilder::saturation)) when the
/// runtime itself is starved: every worker busy, a blocking call on an async thread. While it
/// is, the latencies the policies' attempts measure are the caller's, not the dependency's,
/// so their breakers learn nothing from them (the median, the p95, and with them the measured
/// attempt ceiling, the measured backoff base and the hedge delay), judge none of them slow,
/// and take their timeouts as the caller's; successes and failures still count. The rule is the
/// core's
/// [`SaturationDetector`]: armed after 20 probes, an episode is a probe over 4x its normal
/// delay and at least 20 ms late, and ends after two probes in a row back under that. Each
/// episode is told once: to the listener's
/// [`on_saturation`](crate::Listener::on_saturation) and to `tracing` (WARN, target
/// `stormguard`).
///
/// One probe serves a runtime: build it once and hand it to every policy. It must read the
/// clock the policies read (the [`DefaultClock`] unless told otherwise). The task stops when
/// the last handle is dropped.
///
/// ```
/// use stormguard_std::Policy;
/// use stormguard_std::saturation::SaturationProbe;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), stormguard_std::SettingsError> {
/// let probe = SaturationProbe::spawn(Default::default());
/// let policy = Policy::builder("inventory").saturation(&probe).build()?;
/// assert!(!probe.is_saturated());
/// let n = policy.call(|_| async { Ok::<_, std::io::Error>(1) }).await;
/// assert_eq!(n.ok(), Some(1));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SaturationProbe {
    shared: Arc<Shared>,
}

/// What the probe task drives and every handle reads: the detector (locked by the task once
/// per probe, and by a snapshot) and the signal it publishes to the calls.
struct Shared {
    signal: SaturationSignal,
    detector: Mutex<SaturationDetector>,
    clock: Box<dyn Clock + Send + Sync>,
}

impl Shared {
    fn detector(&self) -> std::sync::MutexGuard<'_, SaturationDetector> {
        self.detector.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SaturationProbe {
    /// Spawns the probe on the current tokio runtime, reading the [`DefaultClock`], telling
    /// episodes to `tracing` only.
    ///
    /// # Panics
    /// Outside a tokio runtime, as [`tokio::spawn`] does.
    #[must_use]
    pub fn spawn(settings: SaturationSettings) -> SaturationProbe {
        SaturationProbe::spawn_with(settings, DefaultClock::global(), NoListener)
    }

    /// Spawns the probe on the current tokio runtime, reading `clock` (the one the policies
    /// read) and telling each episode to `listener` as well as to `tracing`.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// use stormguard_std::saturation::SaturationDetected;
    /// use stormguard_std::{DefaultClock, Listener};
    /// use stormguard_std::saturation::SaturationProbe;
    ///
    /// #[derive(Clone, Default)]
    /// struct Episodes(Arc<AtomicU32>);
    /// impl Listener for Episodes {
    ///     fn on_saturation(&self, _: &SaturationDetected) {
    ///         self.0.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let episodes = Episodes::default();
    /// let probe = SaturationProbe::spawn_with(Default::default(), DefaultClock::global(), episodes.clone());
    /// assert_eq!(episodes.0.load(Ordering::Relaxed), 0);
    /// # drop(probe);
    /// # }
    /// ```
    ///
    /// # Panics
    /// Outside a tokio runtime, as [`tokio::spawn`] does.
    #[must_use]
    pub fn spawn_with<K, L>(settings: SaturationSettings, clock: K, listener: L) -> SaturationProbe
    where
        K: Clock + Send + Sync + 'static,
        L: Listener + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared {
            signal: SaturationSignal::new(),
            detector: Mutex::new(SaturationDetector::new(settings, clock.now())),
            clock: Box::new(clock),
        });
        tokio::spawn(probe(Arc::downgrade(&shared), listener));
        SaturationProbe { shared }
    }

    /// Whether the runtime is starved now: an episode is on, or the next probe is overdue by
    /// more than the threshold.
    #[must_use]
    pub fn is_saturated(&self) -> bool {
        self.shared.signal.is_saturated(self.shared.clock.now())
    }

    /// The detector after its latest probe: armed, saturated, the normal delay, the threshold,
    /// the episodes so far.
    #[must_use]
    pub fn snapshot(&self) -> SaturationSnapshot {
        self.shared.detector().snapshot()
    }

    /// What every call of a policy given this probe reads.
    pub(crate) fn signal(&self) -> &SaturationSignal {
        &self.shared.signal
    }
}

impl std::fmt::Debug for SaturationProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaturationProbe")
            .field("snapshot", &self.snapshot())
            .finish_non_exhaustive()
    }
}

/// The probe task: sleeps until the next probe is due, tells the detector when it woke, and
/// publishes what it found; stops when every handle is gone.
async fn probe<L: Listener>(shared: Weak<Shared>, listener: L) {
    loop {
        let Some(wait) = shared.upgrade().map(|s| {
            let due = s.detector().next_due();
            due.saturating_duration_since(s.clock.now())
        }) else {
            return;
        };
        tokio::time::sleep(wait.into()).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let probed = {
            let mut detector = shared.detector();
            let probed = detector.on_probe(shared.clock.now());
            shared.signal.publish(&detector);
            probed
        };
        match probed {
            Probed::Detected(detected) => {
                tracing::warn!(
                    target: "stormguard",
                    delay = %detected.delay,
                    normal = %detected.normal,
                    threshold = %detected.threshold,
                    "the runtime is saturated: its timers fire late, and latencies are not learned until it drains"
                );
                listener.on_saturation(&detected);
            }
            Probed::Drained { last_late, .. } => tracing::info!(
                target: "stormguard",
                last_late = %last_late,
                "the runtime's saturation drained: latencies are learned again"
            ),
            Probed::Learning | Probed::Steady | Probed::Saturated => {}
        }
    }
}
