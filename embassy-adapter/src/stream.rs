//! Streaming calls on embassy: [`Policy::streaming`], a call whose operation opens a [`Source`]
//! of elements (a radio link's packets, a serial line's frames, a paginated read).
//!
//! The connection (opening the source and waiting for its first element) is one attempt of
//! the policy's call loop, so every rule of a call holds for it; the core's [`StreamRestarts`]
//! decides what a failure after it means. This module moves elements and sleeps.

use embassy_time::{with_timeout, Timer};
use stormguard_core::call::{Lost, StreamRestarts, StreamSettings};
use stormguard_core::part::Limit;
use stormguard_core::{CallError, Event, Outcome, SettingsError};

use crate::bulkhead::BulkheadStep;
use crate::drain::Drain;
use crate::events::Listener;
use crate::policy::{drive, CallOptions, Policy, Route};
use crate::time::to_embassy_duration;
use crate::{CoreBreaker, EmbassyClock};
use embassy_sync::blocking_mutex::raw::RawMutex;

/// Where a streaming call's elements come from: what its operation opens.
///
/// ```
/// use stormguard_embassy::Source;
///
/// /// Frames already received, handed out one by one.
/// struct Frames<'a>(&'a [u16]);
///
/// impl Source for Frames<'_> {
///     type Item = u16;
///     type Error = ();
///     async fn next(&mut self) -> Option<Result<u16, ()>> {
///         let (first, rest) = self.0.split_first()?;
///         self.0 = rest;
///         Some(Ok(*first))
///     }
/// }
/// ```
// Awaited on the task that made the call: no `Send` bound is asked of the future.
#[allow(async_fn_in_trait)]
pub trait Source {
    /// An element.
    type Item;
    /// Why an element could not be read (the link broke).
    type Error;
    /// The next element, an error, or `None` once the source has ended.
    async fn next(&mut self) -> Option<Result<Self::Item, Self::Error>>;

    /// How an error of this source (in opening it or in reading an element) counts: every
    /// error transient by default. A [permanent](Outcome::Permanent) one is neither retried
    /// nor restarted from.
    fn outcome(error: &Self::Error) -> Outcome {
        let _ = error;
        Outcome::Transient
    }
}

/// A streaming call under a [`Policy`], made by [`Policy::streaming`]: run it with
/// [`Streaming::run`] or [`Streaming::run_resumable`]. It keeps its restarts between runs for
/// the caller to read ([`Streaming::restarts`]).
pub struct Streaming<P> {
    policy: P,
    settings: StreamSettings,
    /// The restarts of the run in progress, or of the last one.
    restarts: StreamRestarts,
    drain: Option<&'static Drain>,
}

impl<'a, M: RawMutex, L: Listener, B: CoreBreaker, R: Limit + Copy, K: BulkheadStep>
    Policy<'a, M, L, B, R, K>
{
    /// A streaming call under this policy with the stream `settings` (the restart limit, a
    /// stall bound): until its first element, opening the source is an attempt of the policy,
    /// retried as any call; after it, elements go to the caller as they come. Refused for
    /// hedged settings: a hedge would deliver every element twice.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
    /// use stormguard_core::call::StreamSettings;
    /// use stormguard_core::{BreakerSettings, CallSettings};
    /// use stormguard_embassy::{Breaker, CallError, Policy, Source};
    ///
    /// static BREAKER: Breaker<Cs> = Breaker::new(BreakerSettings::defaults("uplink"));
    /// static POLICY: Policy<'static, Cs> = Policy::new(&BREAKER, CallSettings::DEFAULT);
    ///
    /// struct Packets { next_seq: u32 }
    /// impl Source for Packets {
    ///     type Item = u32;
    ///     type Error = ();
    ///     async fn next(&mut self) -> Option<Result<u32, ()>> {
    ///         self.next_seq += 1;
    ///         (self.next_seq <= 10).then_some(Ok(self.next_seq)) // a radio read, in a device
    ///     }
    /// }
    ///
    /// async fn relay() -> Result<(), CallError<()>> {
    ///     let mut stream = POLICY.streaming(&StreamSettings::DEFAULT).expect("not hedged");
    ///     stream
    ///         .run_resumable(
    ///             |seq: &u32| *seq,                                              // checkpoint
    ///             async |from: Option<u32>| Ok(Packets { next_seq: from.unwrap_or(0) }), // resume
    ///             async |seq| { let _ = seq; /* forward it */ },
    ///         )
    ///         .await
    /// }
    /// ```
    pub fn streaming(&self, settings: &StreamSettings) -> Result<Streaming<&Self>, SettingsError> {
        Ok(Streaming {
            policy: self,
            settings: *settings,
            restarts: self.stream_restarts(settings)?,
            drain: None,
        })
    }
}

impl<'a, M, L, B, R, K> Streaming<&Policy<'a, M, L, B, R, K>>
where
    M: RawMutex,
    L: Listener,
    B: CoreBreaker,
    R: Limit + Copy,
    K: BulkheadStep,
{
    /// Watches `drain`: once it has begun, a connection in progress starts no new attempt (as
    /// a call's), and a stream lost from then on does not restart (it ends as
    /// [`CallError::Drained`]); a flowing stream flows on.
    #[must_use]
    pub fn drain_on(mut self, drain: &'static Drain) -> Self {
        self.drain = Some(drain);
        self
    }

    /// Restarts made by the run in progress, or by the last one (each run starts with none).
    #[must_use]
    pub fn restarts(&self) -> u32 {
        self.restarts.restarts()
    }

    /// How the stream was lost last, if it ever was.
    #[must_use]
    pub fn last_loss(&self) -> Option<Outcome> {
        self.restarts.last_loss()
    }

    /// Opens a source with `open` and hands each element to `each`, until the source ends
    /// (`Ok`), the connection fails for good (the call's error), or an element fails (the
    /// failure ends the stream: see [`Streaming::run_resumable`] to restart instead). Errors
    /// count as [`Source::outcome`] says.
    pub async fn run<S, O, V>(&mut self, mut open: O, each: V) -> Result<(), CallError<S::Error>>
    where
        S: Source,
        O: AsyncFnMut() -> Result<S, S::Error>,
        V: AsyncFnMut(S::Item),
    {
        let open = async |_: Option<()>| open().await;
        self.drive(None::<fn(&S::Item)>, open, each).await
    }

    /// [`Streaming::run`] with a checkpoint: `checkpoint(&element)` reads the position each
    /// element leaves the stream at, and `open(from)` opens the source from the last one taken
    /// (`None` the first time: from the start; else after it). A source lost mid-way restarts
    /// from there, within the restart
    /// limit, each restart heard by the breaker, funded by the budget and waited out on the
    /// backoff.
    pub async fn run_resumable<S, P, CP, O, V>(
        &mut self,
        checkpoint: CP,
        open: O,
        each: V,
    ) -> Result<(), CallError<S::Error>>
    where
        S: Source,
        P: Clone,
        CP: FnMut(&S::Item) -> P,
        O: AsyncFnMut(Option<P>) -> Result<S, S::Error>,
        V: AsyncFnMut(S::Item),
    {
        self.drive(Some(checkpoint), open, each).await
    }

    async fn drive<S, P, CP, O, V>(
        &mut self,
        mut checkpoint: Option<CP>,
        mut open: O,
        mut each: V,
    ) -> Result<(), CallError<S::Error>>
    where
        S: Source,
        P: Clone,
        CP: FnMut(&S::Item) -> P,
        O: AsyncFnMut(Option<P>) -> Result<S, S::Error>,
        V: AsyncFnMut(S::Item),
    {
        let policy = self.policy;
        // Each run has its restarts afresh: a caller that runs the stream again after it ended
        // is not left with the restarts an earlier run spent.
        self.restarts = match policy.stream_restarts(&self.settings) {
            Ok(restarts) => restarts,
            // `streaming` checked these settings already.
            Err(_) => return Err(CallError::Cancelled),
        };
        let stall = self.settings.stall_timeout();
        let mut from: Option<P> = None;
        loop {
            let classify = |r: &Result<(Option<S::Item>, S), S::Error>| match r {
                Ok(_) => Outcome::Success,
                Err(e) => S::outcome(e),
            };
            let mut options = CallOptions::new().classify(classify);
            if let Some(drain) = self.drain {
                options = options.drain_on(drain);
            }
            let connected = drive(policy, options, async |_attempt| {
                let mut source = open(from.clone()).await?;
                match source.next().await {
                    Some(Ok(first)) => Ok((Some(first), source)),
                    Some(Err(e)) => Err(e),
                    None => Ok((None, source)),
                }
            })
            .await;
            let (first, mut source) = connected?;
            let Some(first) = first else {
                return Ok(());
            };
            self.restarts.on_flowing(EmbassyClock::new().now());
            if let Some(cp) = checkpoint.as_mut() {
                from = Some(cp(&first));
            }
            each(first).await;
            let (outcome, error) = loop {
                let next = match stall {
                    Some(d) => match with_timeout(to_embassy_duration(d), source.next()).await {
                        Ok(next) => next,
                        Err(_) => break (Outcome::TimedOut, None),
                    },
                    None => source.next().await,
                };
                match next {
                    Some(Ok(item)) => {
                        if let Some(cp) = checkpoint.as_mut() {
                            from = Some(cp(&item));
                        }
                        each(item).await;
                    }
                    Some(Err(e)) => break (S::outcome(&e), Some(e)),
                    None => return Ok(()),
                }
            };
            drop(source);
            let now = EmbassyClock::new().now();
            if self.drain.is_some_and(Drain::is_draining) {
                self.restarts.on_drain();
            }
            let name = policy.breaker().name();
            let lost = self.restarts.on_lost(
                &policy.loss_parts(&name),
                now,
                outcome,
                checkpoint.is_some(),
                &mut |e: Event<'_>| policy.emit(&e),
            );
            match lost {
                Lost::Restart(wait) => Timer::after(to_embassy_duration(wait)).await,
                Lost::End(finished) => return finished.into_stream_end(error),
            }
        }
    }
}
