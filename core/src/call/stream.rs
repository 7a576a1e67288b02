//! Streaming calls: a call whose operation yields a stream (server-sent events, a gRPC server
//! stream, a paginated feed, a large download).
//!
//! See [`StreamRestarts`].

use crate::call::backoff::Backoff;
use crate::call::{CallSettings, Finished, Gate};
use crate::error::{Bound, Field, SettingsError};
use crate::event::Event;
use crate::outcome::Outcome;
use crate::part::Learned;
use crate::rng::JitterRng;
use crate::time::{Duration, Instant};

/// How a streaming call resumes and how long it may go quiet: what a streaming call adds to
/// its [`CallSettings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StreamSettings {
    max_restarts: u32,
    stall_timeout: Option<Duration>,
    reset_after: Option<Duration>,
}

/// The least stall bound [`StreamSettingsBuilder::stall_timeout`] takes, and the least time
/// [`StreamSettingsBuilder::reset_restarts_after`] does.
const MIN_STALL: Duration = Duration::from_millis(1);

impl StreamSettings {
    /// Up to 3 restarts from the checkpoint over the stream's life; no bound on the gap between
    /// two elements (a feed may be quiet for hours).
    pub const DEFAULT: StreamSettings = StreamSettings {
        max_restarts: 3,
        stall_timeout: None,
        reset_after: None,
    };

    /// A builder starting from [`StreamSettings::DEFAULT`].
    pub const fn builder() -> StreamSettingsBuilder {
        StreamSettingsBuilder {
            settings: StreamSettings::DEFAULT,
        }
    }

    /// A builder starting from these settings.
    pub const fn to_builder(self) -> StreamSettingsBuilder {
        StreamSettingsBuilder { settings: self }
    }

    /// How many times a stream lost mid-way restarts from its checkpoint.
    #[must_use]
    pub const fn max_restarts(&self) -> u32 {
        self.max_restarts
    }

    /// The longest gap allowed between two elements once the stream flows, if bounded: a stream
    /// quiet for longer is lost as [`Outcome::TimedOut`] (and restarts, if it can).
    #[must_use]
    pub const fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }

    /// How long a connection must have flowed, when it is lost, for the restarts to start over
    /// (`None`: never, the limit is over the stream's life).
    #[must_use]
    pub const fn reset_restarts_after(&self) -> Option<Duration> {
        self.reset_after
    }
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings::DEFAULT
    }
}

/// Builds [`StreamSettings`], checking every bound.
///
/// ```
/// use stormguard_core::call::StreamSettings;
/// use stormguard_core::{Bound, Duration, Field};
///
/// let s = StreamSettings::builder().max_restarts(5).stall_timeout(Some(Duration::from_secs(30))).build()?;
/// assert_eq!((s.max_restarts(), s.stall_timeout()), (5, Some(Duration::from_secs(30))));
/// let err = StreamSettings::builder().stall_timeout(Some(Duration::ZERO)).build().unwrap_err();
/// assert_eq!((err.field, err.bound), (Field::StallTimeout, Bound::AtLeastDuration(Duration::from_millis(1))));
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Copy, Debug)]
#[must_use]
pub struct StreamSettingsBuilder {
    settings: StreamSettings,
}

impl StreamSettingsBuilder {
    /// How many times a stream lost mid-way restarts from its checkpoint (3 by default; 0: a
    /// failure mid-stream always ends it).
    pub const fn max_restarts(mut self, n: u32) -> Self {
        self.settings.max_restarts = n;
        self
    }

    /// The longest gap allowed between two elements once the stream flows (`None`, unbounded,
    /// by default); at least 1 ms.
    pub const fn stall_timeout(mut self, d: Option<Duration>) -> Self {
        self.settings.stall_timeout = d;
        self
    }

    /// Lets a long-lived stream (a feed open for days) survive a lost connection now and then:
    /// a connection that had flowed for at least `after` when it was lost starts the restarts
    /// over, as a first loss, its backoff included. `None` (the default): the limit holds over
    /// the stream's life. At least 1 ms.
    pub const fn reset_restarts_after(mut self, after: Option<Duration>) -> Self {
        self.settings.reset_after = after;
        self
    }

    /// The settings, or the first bound broken.
    pub const fn build(self) -> Result<StreamSettings, SettingsError> {
        if let Some(d) = self.settings.stall_timeout {
            if d.as_nanos() < MIN_STALL.as_nanos() {
                return Err(SettingsError::new(
                    Field::StallTimeout,
                    Bound::AtLeastDuration(MIN_STALL),
                ));
            }
        }
        if let Some(d) = self.settings.reset_after {
            if d.as_nanos() < MIN_STALL.as_nanos() {
                return Err(SettingsError::new(
                    Field::RestartsResetAfter,
                    Bound::AtLeastDuration(MIN_STALL),
                ));
            }
        }
        Ok(self.settings)
    }
}

/// What to do about a stream lost mid-way ([`StreamRestarts::on_lost`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use]
pub enum Lost {
    /// Wait this long (cancellably; it may be zero), then connect again from the checkpoint as
    /// a new [`Call`](crate::Call), whose first attempt the restart already funded.
    Restart(Duration),
    /// The stream is over: [`Finished::Failed`] with the failure that ended it (the restarts
    /// are spent, the failure is not retryable, there is no checkpoint to resume from, or the
    /// budget refused the restart), [`Finished::Cancelled`], or [`Finished::Drained`].
    End(Finished),
}

/// The restarts of one streaming call: plain data, reading no clock.
///
/// A streaming call has two parts, and the rules of each live here and in [`Call`](crate::Call):
///
/// - **Connecting.** Opening the stream and waiting for its first element is one attempt of a
///   plain [`Call`](crate::Call): it is retried with backoff, funded by the budget, admitted by the breaker,
///   bounded by the deadline, and its attempt timeout bounds only the wait for the first
///   element. The first element is the attempt's success (the breaker learns the time to it).
/// - **Flowing.** Elements then pass to the caller. A failure mid-stream ends the stream as that
///   failure, unless the caller keeps a checkpoint (the last element it accepted): then the
///   stream restarts from it, up to [`StreamSettings::max_restarts`] times.
///   [`StreamRestarts::on_lost`] decides, reports the loss to the breaker, takes the restart's
///   retry from the budget and draws its backoff; the restart then connects as a new [`Call`](crate::Call).
///
/// A hedged policy refuses a streaming call ([`StreamRestarts::begin`]): two copies of a stream
/// would deliver every element twice.
///
/// ```
/// use stormguard_core::call::{Lost, StreamRestarts, StreamSettings};
/// use stormguard_core::{Budget, BudgetSettings, Call, CallSettings, Duration, Finished, Instant};
/// use stormguard_core::{Outcome, Parts, Step};
///
/// let parts = Parts::new().named("feed").budget(Budget::new(BudgetSettings::defaults("feed")));
/// let settings = CallSettings::DEFAULT;
/// let mut now = Instant::from_secs(1);
/// let mut restarts = StreamRestarts::begin(&settings, &StreamSettings::DEFAULT, now)?;
///
/// // Connecting: one attempt that waits for the first element.
/// let mut call = Call::begin(&settings, now);
/// let Step::Attempt(permit) = call.poll(&parts, now, &mut |_| {}) else { unreachable!() };
/// now += Duration::from_millis(30); // the first element arrives
/// call.complete(&parts, permit, now, Outcome::Success, &mut |_| {});
/// assert_eq!(call.finished(), Some(Finished::Succeeded));
///
/// // Flowing, until the connection drops: the caller kept a checkpoint, so it restarts.
/// now += Duration::from_secs(60);
/// let Lost::Restart(wait) = restarts.on_lost(&parts, now, Outcome::Transient, true, &mut |_| {})
/// else { unreachable!() };
/// assert!(wait <= Duration::from_millis(100)); // the first retry's backoff
/// assert_eq!(restarts.restarts(), 1);
/// // ...then connect again from the checkpoint, as a new `Call`.
/// # Ok::<(), stormguard_core::SettingsError>(())
/// ```
#[derive(Clone, Debug)]
pub struct StreamRestarts {
    settings: StreamSettings,
    backoff: Backoff,
    rng: JitterRng,
    restarts: u32,
    last: Option<Outcome>,
    draining: bool,
    /// When the connection flowing now delivered its first element.
    flowing_since: Option<Instant>,
}

impl StreamRestarts {
    /// The restarts of a streaming call made with `call` settings, beginning at `now`. Refused
    /// for a hedged call: a hedge of a stream would deliver its elements twice.
    ///
    /// ```
    /// use stormguard_core::call::{StreamRestarts, StreamSettings};
    /// use stormguard_core::{Bound, CallSettings, Field, Instant};
    ///
    /// let hedged = CallSettings::builder().hedging(true).build()?;
    /// let err = StreamRestarts::begin(&hedged, &StreamSettings::DEFAULT, Instant::ZERO).unwrap_err();
    /// assert_eq!((err.field, err.bound), (Field::Hedging, Bound::OffForStreaming));
    /// assert_eq!(err.to_string(), "`hedging` must be off for a streaming call");
    /// # Ok::<(), stormguard_core::SettingsError>(())
    /// ```
    pub fn begin(
        call: &CallSettings,
        settings: &StreamSettings,
        now: Instant,
    ) -> Result<StreamRestarts, SettingsError> {
        StreamRestarts::begin_salted(call, settings, now, 0)
    }

    /// [`StreamRestarts::begin`] for one of several streams that may begin at the same instant
    /// (paused or simulated time, a coarse clock, a fleet of devices booted together): a `salt`
    /// that differs between them keeps their restarts' jitter apart, as
    /// [`Call::begin_salted`](crate::Call::begin_salted) does for retries.
    pub fn begin_salted(
        call: &CallSettings,
        settings: &StreamSettings,
        now: Instant,
        salt: u64,
    ) -> Result<StreamRestarts, SettingsError> {
        if call.hedging() {
            return Err(SettingsError::new(Field::Hedging, Bound::OffForStreaming));
        }
        let seed = call.seed()
            ^ now.as_nanos().wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ salt.wrapping_mul(0xD6E8_FEB8_6659_FD93)
            ^ 0x5157;
        Ok(StreamRestarts {
            settings: *settings,
            backoff: *call.backoff(),
            rng: JitterRng::with_seed(seed),
            restarts: 0,
            last: None,
            draining: false,
            flowing_since: None,
        })
    }

    /// Reseeds the restarts' jitter with a seed of the caller's (a device's own, so devices that
    /// boot together with the same `const` settings do not restart in step).
    pub fn reseed(&mut self, seed: u64) {
        self.rng = JitterRng::with_seed(seed ^ self.rng.next_u64());
    }

    /// The same restarts under other stream `settings` (for an adapter whose caller sets them
    /// after the call was made, before its stream starts).
    #[must_use]
    pub const fn with_settings(mut self, settings: StreamSettings) -> StreamRestarts {
        self.settings = settings;
        self
    }

    /// The stream settings it follows.
    #[must_use]
    pub const fn settings(&self) -> &StreamSettings {
        &self.settings
    }

    /// Restarts made so far.
    #[must_use]
    pub const fn restarts(&self) -> u32 {
        self.restarts
    }

    /// The failure that lost the stream last, if it was ever lost.
    #[must_use]
    pub const fn last_loss(&self) -> Option<Outcome> {
        self.last
    }

    /// The stream's connection (its first, or a restart's) delivered its first element at
    /// `now`: it flows. With [`StreamSettingsBuilder::reset_restarts_after`], how long it flows
    /// before it is lost decides whether the restarts start over.
    pub fn on_flowing(&mut self, now: Instant) {
        self.flowing_since = Some(now);
    }

    /// A drain began (the service is shutting down): a stream lost from now on does not
    /// restart, and ends as [`Finished::Drained`]. A flowing stream flows on.
    pub fn on_drain(&mut self) {
        self.draining = true;
    }

    /// The stream flowing since its last connection was lost at `now` with `outcome` (a failed
    /// element, a broken connection, [`Outcome::TimedOut`] for a stall). `resumable` is whether
    /// the caller holds a checkpoint to restart from.
    ///
    /// The loss is the dependency's failure, and the breaker and budget hear it as an attempt
    /// that failed at once (the breaker is asked for a permit first, so a breaker already
    /// refusing hears nothing more). Then the stream restarts when every rule allows it: the
    /// failure is retryable (not [permanent](Outcome::Permanent) nor a
    /// [cancellation](Outcome::Cancelled)), there is a checkpoint, restarts are left, no drain
    /// has begun, the breaker would admit a connection now, and the budget funds the restart
    /// like any retry. A restart is announced by [`Event::Restarted`] and waits the call's
    /// backoff for its number (the first restart waits as a first retry does, from the learned
    /// median when the backoff has a measured base). A refused restart is announced by
    /// [`Event::Rejected`] (with no pause: the failure goes back at once) and the failure ends
    /// the stream: a breaker the loss opened ends it as that loss, not as a rejection.
    pub fn on_lost<P: Gate>(
        &mut self,
        parts: &P,
        now: Instant,
        outcome: Outcome,
        resumable: bool,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Lost {
        let outcome = outcome.effective();
        if outcome.is_success() {
            // Nothing failed: the stream simply ended.
            return Lost::End(Finished::Succeeded);
        }
        if outcome == Outcome::Cancelled {
            return Lost::End(Finished::Cancelled);
        }
        self.last = Some(outcome);
        let flowed = self
            .flowing_since
            .take()
            .map(|since| now.saturating_duration_since(since));
        if let (Some(flowed), Some(after)) = (flowed, self.settings.reset_after) {
            if flowed >= after {
                self.restarts = 0;
            }
        }
        if let Ok(permit) = parts.try_acquire(now, None, events) {
            parts.on_outcome(now, permit, outcome, events);
        }
        parts.budget_outcome(now, outcome);
        if !outcome.is_retryable() || !resumable || self.restarts >= self.settings.max_restarts {
            return Lost::End(Finished::Failed(outcome));
        }
        if self.draining {
            return Lost::End(Finished::Drained {
                last: Some(outcome),
            });
        }
        let admitted = parts.check(now).and_then(|()| parts.try_fund_retry(now));
        if let Err(refused) = admitted {
            events(Event::Rejected {
                name: parts.name(),
                reason: refused.reason,
                delay: Duration::ZERO,
                retry_after: refused.retry_after,
            });
            return Lost::End(Finished::Failed(outcome));
        }
        self.restarts = self.restarts.saturating_add(1);
        let median = (self.backoff.measured_base())
            .and_then(|_| parts.learned(now, Learned::NormalLatency).ok());
        let delay = self
            .backoff
            .delay_measured(self.restarts, outcome, median, &mut self.rng);
        events(Event::Restarted {
            name: parts.name(),
            restart: self.restarts,
            delay,
            after: outcome,
        });
        Lost::Restart(delay)
    }
}
