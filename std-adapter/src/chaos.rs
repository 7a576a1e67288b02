//! Fault injection on the host: the core's seeded rolls ([`stormguard_core::policy::SharedChaos`])
//! acted on around an operation or an HTTP service. An injected fault is a value of the
//! operation's own error type (or a 503 response), so the classifier, the retries, the breaker
//! and the budget see it as they would a real one.

#[cfg(feature = "tokio")]
use std::future::Future;
use std::sync::Arc;

pub use stormguard_core::policy::ChaosSettings;
use stormguard_core::policy::{ChaosCounts, Roll, SharedChaos};

/// Which attempts may be injected into: asked before each roll.
type Gate = Arc<dyn Fn() -> bool + Send + Sync>;

/// A source of injected faults and delays, cheap to clone (clones share the rolls and counts).
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use stormguard_std::chaos::ChaosSettings;
/// use stormguard_std::stormguard_core::Ratio;
/// use stormguard_std::{CallError, Chaos, Policy};
///
/// #[derive(Debug, PartialEq)]
/// enum FetchError {
///     Injected,
/// }
///
/// // Every attempt fails: the policy retries, then gives up with the injected error.
/// let chaos = Chaos::new(ChaosSettings::builder().faults(Ratio::ONE).build()?);
/// let policy = Policy::builder("inventory").no_budget().build()?;
/// let result = policy
///     .call(|_| chaos.run(async { Ok::<u32, FetchError>(7) }, || FetchError::Injected))
///     .await;
/// assert!(matches!(result, Err(CallError::Failed { .. })));
/// assert_eq!(chaos.counts().faults, 3); // three attempts, each one failed
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Chaos {
    rolls: Arc<SharedChaos>,
    gate: Option<Gate>,
}

impl Chaos {
    /// A source with `settings` (see [`ChaosSettings::builder`]).
    #[must_use]
    pub fn new(settings: ChaosSettings) -> Chaos {
        Chaos {
            rolls: Arc::new(SharedChaos::new(settings)),
            gate: None,
        }
    }

    /// Injects only into attempts for which `gate` answers `true` when they start (one tenant,
    /// one route: read it from a task-local or a thread-local). Attempts the gate keeps out take
    /// no roll, so the rolls of those let in are the same whatever runs beside them.
    #[must_use]
    pub fn gate(mut self, gate: impl Fn() -> bool + Send + Sync + 'static) -> Chaos {
        self.gate = Some(Arc::new(gate));
        self
    }

    /// The settings.
    #[must_use]
    pub fn settings(&self) -> &ChaosSettings {
        self.rolls.settings()
    }

    /// What has been injected so far.
    #[must_use]
    pub fn counts(&self) -> ChaosCounts {
        self.rolls.counts()
    }

    /// The roll for the attempt about to start.
    #[must_use]
    pub fn roll(&self) -> Roll {
        let open = self.gate.as_ref().is_none_or(|gate| gate());
        self.rolls.roll(open)
    }

    /// Runs one attempt: holds it back on tokio's timer if the roll says so, then fails it with
    /// `fault()` or awaits `attempt`. The roll is taken when this is called (when the policy
    /// starts the attempt), not when it is first polled.
    #[cfg(feature = "tokio")]
    pub fn run<T, E, Fut>(
        &self,
        attempt: Fut,
        fault: impl FnOnce() -> E,
    ) -> impl Future<Output = Result<T, E>>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let roll = self.roll();
        async move {
            if !roll.delay.is_zero() {
                ::tokio::time::sleep(roll.delay.into()).await;
            }
            if roll.fault {
                return Err(fault());
            }
            attempt.await
        }
    }

    /// [`Chaos::run`] for a blocking attempt: holds the thread back if the roll says so.
    pub fn run_blocking<T, E>(
        &self,
        attempt: impl FnOnce() -> Result<T, E>,
        fault: impl FnOnce() -> E,
    ) -> Result<T, E> {
        let roll = self.roll();
        if !roll.delay.is_zero() {
            std::thread::sleep(roll.delay.into());
        }
        if roll.fault {
            return Err(fault());
        }
        attempt()
    }
}

impl std::fmt::Debug for Chaos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chaos")
            .field("settings", self.settings())
            .field("counts", &self.counts())
            .field("gated", &self.gate.is_some())
            .finish()
    }
}

#[cfg(feature = "tower")]
pub use self::layer::{ChaosLayer, ChaosService, INJECTED_HEADER};

#[cfg(feature = "tower")]
mod layer {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use super::Chaos;

    /// The header an injected 503 carries (`x-stormguard-chaos: fault`), so that a log or a test
    /// can tell it from the dependency's own.
    pub const INJECTED_HEADER: &str = "x-stormguard-chaos";

    /// Which requests may be injected into.
    type RequestGate =
        Arc<dyn Fn(&http::Method, &http::Uri, &http::HeaderMap) -> bool + Send + Sync>;

    /// A tower layer injecting faults and delays into HTTP requests: put it *inside* the policy
    /// layer, where the dependency would be, so the policy classifies, retries and counts what
    /// it injects. A fault is a `503 Service Unavailable` with an empty body (the response body
    /// type's `Default`) and the [`INJECTED_HEADER`]; the request never reaches the service.
    ///
    /// ```
    /// use stormguard_std::chaos::ChaosSettings;
    /// use stormguard_std::Duration;
    /// use stormguard_std::stormguard_core::Ratio;
    /// use stormguard_std::Chaos;
    /// use stormguard_std::chaos::ChaosLayer;
    ///
    /// let chaos = Chaos::new(
    ///     ChaosSettings::builder()
    ///         .faults(Ratio::from_percent(5).unwrap())
    ///         .latency(Ratio::from_percent(1).unwrap(), Duration::from_millis(800))
    ///         .seed(11)
    ///         .build()?,
    /// );
    /// // Only the checkout route, and only on the staging host.
    /// let layer = ChaosLayer::new(chaos.clone()).gate(|_, uri, _| {
    ///     uri.path().starts_with("/checkout") && uri.host() == Some("staging.internal")
    /// });
    /// # let _ = layer;
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    #[derive(Clone)]
    pub struct ChaosLayer {
        chaos: Chaos,
        gate: Option<RequestGate>,
    }

    impl ChaosLayer {
        /// Injects what `chaos` rolls (its own gate, if any, is asked too).
        #[must_use]
        pub fn new(chaos: Chaos) -> ChaosLayer {
            ChaosLayer { chaos, gate: None }
        }

        /// Injects only into requests for which `gate` answers `true`.
        #[must_use]
        pub fn gate(
            mut self,
            gate: impl Fn(&http::Method, &http::Uri, &http::HeaderMap) -> bool + Send + Sync + 'static,
        ) -> ChaosLayer {
            self.gate = Some(Arc::new(gate));
            self
        }
    }

    impl<S> tower_layer::Layer<S> for ChaosLayer {
        type Service = ChaosService<S>;

        fn layer(&self, inner: S) -> ChaosService<S> {
            ChaosService {
                inner,
                chaos: self.chaos.clone(),
                gate: self.gate.clone(),
            }
        }
    }

    /// The service [`ChaosLayer`] makes.
    #[derive(Clone)]
    pub struct ChaosService<S> {
        inner: S,
        chaos: Chaos,
        gate: Option<RequestGate>,
    }

    impl<S> ChaosService<S> {
        /// The chaos source, for its counts.
        pub fn chaos(&self) -> &Chaos {
            &self.chaos
        }
    }

    impl<S, B, R> tower_service::Service<http::Request<B>> for ChaosService<S>
    where
        S: tower_service::Service<http::Request<B>, Response = http::Response<R>>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        B: Send + 'static,
        R: Default + Send + 'static,
        S::Error: Send + 'static,
    {
        type Response = http::Response<R>;
        type Error = S::Error;
        type Future =
            Pin<Box<dyn Future<Output = Result<http::Response<R>, S::Error>> + Send + 'static>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, request: http::Request<B>) -> Self::Future {
            let open = self
                .gate
                .as_ref()
                .is_none_or(|gate| gate(request.method(), request.uri(), request.headers()));
            let roll = if open {
                self.chaos.roll()
            } else {
                stormguard_core::policy::Roll::PASS
            };
            // The service made ready goes with the request (its clone stays for the next call):
            // a delayed request reaches it only after the delay, and a fault never does.
            let ready = self.inner.clone();
            let mut inner = std::mem::replace(&mut self.inner, ready);
            Box::pin(async move {
                if !roll.delay.is_zero() {
                    ::tokio::time::sleep(roll.delay.into()).await;
                }
                match roll.fault {
                    false => inner.call(request).await,
                    true => {
                        let mut response = http::Response::new(R::default());
                        *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                        response
                            .headers_mut()
                            .insert(INJECTED_HEADER, http::HeaderValue::from_static("fault"));
                        Ok(response)
                    }
                }
            })
        }
    }
}
