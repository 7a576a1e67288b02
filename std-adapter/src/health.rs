//! Health: a registry of named breakers, budgets and adaptive limiters, read as one report.
//!
//! A breaker's health follows its state: closed is `healthy`; half-open and recovering are
//! `degraded` (the dependency is on probation: a recovering breaker still sheds part of the
//! traffic); open and isolated are `unavailable`. A budget more than 90% spent is `degraded`
//! (retries are about to be refused). An adaptive limiter shrunk to its minimum, below where
//! it started, is `degraded` (the dependency queues even at the lowest concurrency allowed).
//! The report's status is the worst of its entries.

use std::sync::{Arc, RwLock};

use stormguard_core::{limits::AdaptiveSnapshot, limits::BudgetSnapshot, Instant};
pub use stormguard_core::{Health, Snapshot};

use crate::clock::{default_clock, Clock, DefaultClock, SteadyClock};
use crate::{AdaptiveLimit, Breaker, Budget};

/// How well a dependency (or the whole set) is doing, best first: the core's [`Health`], whose
/// mapping from a breaker's state ([`Status::of_state`]) every report here uses.
///
/// ```
/// use stormguard_std::State;
/// use stormguard_std::health::Status;
/// assert_eq!(Status::of_state(State::Recovering), Status::Degraded);
/// assert_eq!(Status::of_state(State::Isolated), Status::Unavailable);
/// assert_eq!(Status::Degraded.as_str(), "degraded");
/// ```
pub type Status = Health;

/// One breaker's health: its snapshot, in plain units.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BreakerHealth {
    /// The breaker's name.
    pub name: String,
    /// The key (host, service, tenant) of a keyed table's breaker
    /// ([`Registry::add_keyed`]); `None` for a breaker of its own.
    pub key: Option<String>,
    /// `healthy`, `degraded` or `unavailable`.
    pub status: Status,
    /// `closed`, `open`, `half_open`, `recovering` or `isolated`.
    pub state: &'static str,
    /// Transient failures in a row: counted while closed, held while open and half-open.
    pub consecutive_failures: u16,
    /// Consecutive opens without a close.
    pub consecutive_opens: u8,
    /// Probes in flight while half-open.
    pub probes_in_flight: u8,
    /// The break last served or being served, in milliseconds.
    pub break_ms: Option<u64>,
    /// The break being served or last served, or once closed the one the next open will serve,
    /// in milliseconds.
    pub current_break_ms: u64,
    /// Milliseconds until half-open (0 unless open).
    pub until_half_open_ms: u64,
    /// The admitted fraction while recovering.
    pub ramp_fraction: Option<f64>,
    /// The learned median latency of successful calls, in milliseconds.
    pub normal_latency_ms: Option<f64>,
    /// The learned normal failure rate.
    pub normal_failure_rate: Option<f64>,
    /// Calls, failures and slow calls in the trip window.
    pub window_calls: u32,
    /// Failures in the trip window.
    pub window_failures: u32,
    /// Slow calls in the trip window.
    pub window_slow: u32,
}

impl From<&Snapshot> for BreakerHealth {
    fn from(s: &Snapshot) -> Self {
        #[allow(clippy::cast_precision_loss)] // nanoseconds of a latency: far below 2^53
        let ms = |d: stormguard_core::Duration| d.as_nanos() as f64 / 1e6;
        BreakerHealth {
            name: s.name.as_str().to_owned(),
            key: None,
            status: Status::of_state(s.state),
            state: s.state.as_str(),
            consecutive_failures: s.consecutive_failures,
            consecutive_opens: s.consecutive_opens,
            probes_in_flight: s.probes_in_flight,
            break_ms: s.break_duration.map(|d| d.as_millis()),
            current_break_ms: s.current_break.as_millis(),
            until_half_open_ms: s.until_half_open.as_millis(),
            ramp_fraction: s.ramp_fraction.map(|r| r.as_f64()),
            normal_latency_ms: s.normal_latency.map(ms),
            normal_failure_rate: s.normal_failure_rate.map(|r| r.as_f64()),
            window_calls: s.window_calls,
            window_failures: s.window_failures,
            window_slow: s.window_slow,
        }
    }
}

/// One budget's health.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BudgetHealth {
    /// The budget's name.
    pub name: String,
    /// `healthy`, or `degraded` when more than 90% is spent.
    pub status: Status,
    /// Whole retries available.
    pub available: u32,
    /// 0 (full) to 1 (empty).
    pub utilization: f64,
}

impl From<&BudgetSnapshot> for BudgetHealth {
    fn from(s: &BudgetSnapshot) -> Self {
        let utilization = s.utilization.as_f64();
        BudgetHealth {
            name: s.name.as_str().to_owned(),
            status: if s.utilization.ppm() > 900_000 {
                Status::Degraded
            } else {
                Status::Healthy
            },
            available: s.available,
            utilization,
        }
    }
}

/// One adaptive concurrency limiter's health: its limit and latency baseline.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AdaptiveHealth {
    /// The limiter's name.
    pub name: String,
    /// `healthy`, or `degraded` when the limit has shrunk to its minimum (below the initial
    /// limit).
    pub status: Status,
    /// The current limit on attempts in flight.
    pub limit: u32,
    /// Attempts in flight.
    pub in_flight: u32,
    /// The latency baseline (the learned p10) in seconds, once there is one.
    pub baseline_seconds: Option<f64>,
}

impl AdaptiveHealth {
    fn of(s: &AdaptiveSnapshot, initial: u32) -> Self {
        AdaptiveHealth {
            name: s.name.as_str().to_owned(),
            status: if s.limit <= s.min_limit && s.min_limit < initial {
                Status::Degraded
            } else {
                Status::Healthy
            },
            limit: s.limit,
            in_flight: s.in_flight,
            baseline_seconds: s
                .baseline
                .map(|b| std::time::Duration::from(b).as_secs_f64()),
        }
    }
}

/// Every registered breaker, budget and adaptive limiter, read at one instant.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Report {
    /// The worst status of the entries (`healthy` when there are none).
    pub status: Status,
    /// The breakers, in registration order.
    pub breakers: Vec<BreakerHealth>,
    /// The budgets, in registration order.
    pub budgets: Vec<BudgetHealth>,
    /// The adaptive limiters, in registration order.
    pub adaptive: Vec<AdaptiveHealth>,
}

#[derive(Default)]
struct Entries {
    breakers: Vec<Breaker>,
    budgets: Vec<Budget>,
    adaptive: Vec<AdaptiveLimit>,
    /// Keyed tables, each read as its keys' breakers at a given instant.
    keyed: Vec<KeyedReader>,
}

type KeyedReader = Box<dyn Fn(Instant) -> Vec<BreakerHealth> + Send + Sync>;

/// A registry of named breakers and budgets for a health endpoint. Cloneable (one `Arc`); the
/// registry's lock is taken by registration and reports only, never on the call path.
///
/// ```
/// use stormguard_std::health::{Registry, Status};
/// use stormguard_std::Policy;
///
/// let payments = Policy::builder("payments").build()?;
/// let search = Policy::builder("search").build()?;
/// let health = Registry::new();
/// health.register(&payments);
/// health.register(&search);
/// search.isolate();
///
/// let report = health.report();
/// assert_eq!(report.status, Status::Unavailable);
/// assert_eq!(report.breakers[1].state, "isolated");
/// assert_eq!(report.budgets.len(), 2);
/// # Ok::<(), stormguard_std::SettingsError>(())
/// ```
#[derive(Clone)]
pub struct Registry<K = DefaultClock> {
    entries: Arc<RwLock<Entries>>,
    /// Read never stepping back, as a policy reads its clock.
    clock: SteadyClock<K>,
}

impl Registry {
    /// An empty registry reading the process-wide clock.
    #[must_use]
    pub fn new() -> Registry {
        Registry::with_clock(default_clock())
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl<K: Clock> Registry<K> {
    /// An empty registry reading `clock` (the clock of the policies whose parts it reports).
    ///
    /// ```
    /// use stormguard_std::{health::Registry, ManualClock};
    /// let registry = Registry::with_clock(ManualClock::new());
    /// assert!(registry.report().breakers.is_empty());
    /// ```
    #[must_use]
    pub fn with_clock(clock: K) -> Registry<K> {
        Registry {
            entries: Arc::new(RwLock::new(Entries::default())),
            clock: SteadyClock::new(clock),
        }
    }

    /// Adds a policy's breaker, budget and adaptive limiter (each once, however often it is
    /// registered).
    pub fn register<K2, L>(&self, policy: &crate::Policy<K2, L>) {
        if let Some(b) = policy.breaker() {
            self.add_breaker(b);
        }
        if let Some(b) = policy.budget() {
            self.add_budget(b);
        }
        if let Some(a) = policy.adaptive_limit() {
            self.add_adaptive(a);
        }
    }

    /// Adds an adaptive concurrency limiter (once).
    ///
    /// ```
    /// use stormguard_std::{health::Registry, AdaptiveLimit, AdaptiveLimitSettings};
    /// let registry = Registry::new();
    /// let db = AdaptiveLimit::new(AdaptiveLimitSettings::builder("db").build()?);
    /// registry.add_adaptive(&db);
    /// registry.add_adaptive(&db.clone());
    /// let report = registry.report();
    /// assert_eq!(report.adaptive.len(), 1);
    /// assert_eq!((report.adaptive[0].limit, report.adaptive[0].baseline_seconds), (20, None));
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn add_adaptive(&self, limit: &AdaptiveLimit) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        if !entries.adaptive.iter().any(|a| a.same_as(limit)) {
            entries.adaptive.push(limit.clone());
        }
    }

    /// Adds a breaker (once).
    ///
    /// ```
    /// let registry = stormguard_std::health::Registry::new();
    /// let breaker = stormguard_std::Breaker::of(5, "db")?;
    /// registry.add_breaker(&breaker);
    /// registry.add_breaker(&breaker.clone());
    /// assert_eq!(registry.report().breakers.len(), 1);
    /// # Ok::<(), stormguard_std::SettingsError>(())
    /// ```
    pub fn add_breaker(&self, breaker: &Breaker) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        if !entries.breakers.iter().any(|b| b.same_as(breaker)) {
            entries.breakers.push(breaker.clone());
        }
    }

    /// Adds a budget (once).
    ///
    /// ```
    /// let registry = stormguard_std::health::Registry::new();
    /// registry.add_budget(&stormguard_std::Budget::defaults("db"));
    /// assert_eq!(registry.report().budgets[0].available, 30);
    /// ```
    pub fn add_budget(&self, budget: &Budget) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        if !entries.budgets.iter().any(|b| b.same_as(budget)) {
            entries.budgets.push(budget.clone());
        }
    }

    /// Adds a keyed table (a [`KeyedPolicy`](crate::KeyedPolicy), or the tower layer's
    /// [`hosts`](crate::tower::PolicyLayer::hosts)): every report lists each key's breaker, its
    /// key in [`BreakerHealth::key`], after the breakers added one by one. A key's breaker
    /// counts towards the report's status as `degraded` at worst: one host down leaves the
    /// caller partly served. Add a table once.
    ///
    /// ```
    /// use stormguard_std::health::{Registry, Status};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let template = stormguard_std::Policy::builder("hosts")
    ///     .breaker(stormguard_std::Breaker::of(1, "hosts")?)
    ///     .max_attempts(1)
    ///     .build()?;
    /// let hosts = stormguard_std::KeyedPolicy::<String>::new(template, 8)?;
    /// let registry = Registry::new();
    /// registry.add_keyed(&hosts);
    /// let _ = hosts.call(&"down.example".to_owned(), |_| async { Err::<(), _>("reset") }).await;
    /// let report = registry.report();
    /// assert_eq!(report.breakers[0].key.as_deref(), Some("down.example"));
    /// assert_eq!(report.breakers[0].status, Status::Unavailable);
    /// assert_eq!(report.status, Status::Degraded);
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn add_keyed<Q, C, L>(&self, table: &crate::KeyedPolicy<Q, C, L>)
    where
        Q: std::fmt::Display + Eq + std::hash::Hash + Clone + Send + Sync + 'static,
        C: Clock + Clone + Send + Sync + 'static,
        L: crate::Listener + Clone + Send + Sync + 'static,
    {
        let table = table.clone();
        let read = move |now: Instant| {
            table
                .snapshots_at(now)
                .iter()
                .map(|(key, snapshot)| BreakerHealth {
                    key: Some(key.to_string()),
                    ..BreakerHealth::from(snapshot)
                })
                .collect()
        };
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        entries.keyed.push(Box::new(read));
    }

    /// Every entry's health now.
    ///
    /// ```
    /// let registry = stormguard_std::health::Registry::new();
    /// assert_eq!(registry.report().status, stormguard_std::health::Status::Healthy);
    /// ```
    #[must_use]
    pub fn report(&self) -> Report {
        self.report_at(self.clock.now())
    }

    /// Every entry's health at `now`.
    #[must_use]
    pub fn report_at(&self, now: Instant) -> Report {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let breakers: Vec<BreakerHealth> = entries
            .breakers
            .iter()
            .map(|b| BreakerHealth::from(&b.snapshot_at(now)))
            .collect();
        let budgets: Vec<BudgetHealth> = entries
            .budgets
            .iter()
            .map(|b| BudgetHealth::from(&b.snapshot_at(now)))
            .collect();
        let adaptive: Vec<AdaptiveHealth> = entries
            .adaptive
            .iter()
            .map(|a| AdaptiveHealth::of(&a.snapshot(), a.settings().initial_limit()))
            .collect();
        let keyed: Vec<BreakerHealth> = entries.keyed.iter().flat_map(|read| read(now)).collect();
        // One key down is the table's caller partly served, not the service down.
        let keyed_status = keyed.iter().map(|b| b.status.min(Status::Degraded));
        let status = breakers
            .iter()
            .map(|b| b.status)
            .chain(budgets.iter().map(|b| b.status))
            .chain(adaptive.iter().map(|a| a.status))
            .chain(keyed_status)
            .max()
            .unwrap_or(Status::Healthy);
        let mut breakers = breakers;
        breakers.extend(keyed);
        Report {
            status,
            breakers,
            budgets,
            adaptive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::{BreakerSettings, Duration, Outcome, Recovery};

    #[test]
    fn a_recovering_breaker_reads_as_degraded() {
        let clock = crate::ManualClock::starting_at(Instant::from_secs(1));
        let settings = BreakerSettings::builder("ramp")
            .consecutive_failures(1)
            .probe_successes(1)
            .jitter(false)
            .recovery(Some(Recovery::over(0.25)))
            .build()
            .unwrap();
        let breaker = Breaker::new(settings);
        let registry = Registry::with_clock(clock.clone());
        registry.add_breaker(&breaker);
        let b = breaker.shared();
        let p = b.try_acquire(clock.now(), None, &mut |_| {}).unwrap();
        b.on_outcome(clock.now(), p, Outcome::Transient, &mut |_| {});
        assert_eq!(registry.report().status, Status::Unavailable);
        clock.advance(Duration::from_secs(16));
        assert_eq!(registry.report().breakers[0].state, "half_open");
        assert_eq!(registry.report().status, Status::Degraded);
        let p = b.try_acquire(clock.now(), None, &mut |_| {}).unwrap();
        clock.advance(Duration::from_millis(5));
        b.on_outcome(clock.now(), p, Outcome::Success, &mut |_| {});
        let report = registry.report();
        assert_eq!(report.breakers[0].state, "recovering");
        assert_eq!(report.status, Status::Degraded);
        assert!(report.breakers[0].ramp_fraction.is_some());
    }

    #[test]
    fn an_exhausted_budget_reads_as_degraded() {
        let registry = Registry::with_clock(crate::ManualClock::new());
        let budget = Budget::defaults("db");
        registry.add_budget(&budget);
        for _ in 0..30 {
            budget.shared().try_withdraw(Instant::ZERO).unwrap();
        }
        let report = registry.report();
        assert_eq!(report.budgets[0].available, 0);
        assert_eq!(report.status, Status::Degraded);
    }
}
