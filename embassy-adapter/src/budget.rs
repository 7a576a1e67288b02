//! A retry budget that firmware can keep in a `static` and share between tasks, over an
//! `embassy_sync` blocking raw mutex around the core's `&mut` budget.

use core::cell::RefCell;

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;
use stormguard_core::{
    call::Funding, limits::BudgetSnapshot, BudgetSettings, Duration, Instant, Name, Outcome, Ratio,
    RefusalReason, Refused,
};

use crate::EmbassyClock;

/// A retry budget shared by several tasks (or several policies, deliberately): the core's
/// [`Budget`](stormguard_core::Budget) inside an `embassy_sync`
/// [`blocking_mutex::Mutex`](Mutex)`<M, RefCell<_>>`, locked only for its synchronous
/// transitions. See [`Breaker`](crate::Breaker) for the choice of `M`.
///
/// ```
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
/// use stormguard_core::BudgetSettings;
/// use stormguard_embassy::Budget;
///
/// static RETRIES: Budget<CriticalSectionRawMutex> = Budget::new(BudgetSettings::defaults("i2c"));
///
/// # use critical_section as _; // the host's critical-section implementation, for this test
/// assert_eq!(RETRIES.available(), 30); // full at start: 10 s of the 3-per-second floor
/// ```
pub struct Budget<M: RawMutex> {
    inner: Mutex<M, RefCell<stormguard_core::Budget>>,
}

impl<M: RawMutex> Budget<M> {
    /// A full budget with validated `settings`; `const`, so it can be a `static`.
    #[must_use]
    pub const fn new(settings: BudgetSettings) -> Budget<M> {
        Budget::from_core(stormguard_core::Budget::new(settings))
    }

    /// Shares a core budget built at run time.
    #[must_use]
    pub const fn from_core(budget: stormguard_core::Budget) -> Budget<M> {
        Budget {
            inner: Mutex::new(RefCell::new(budget)),
        }
    }

    /// Runs `f` on the core budget under the lock; `None` only on a re-entrant call, which this
    /// crate never makes (it runs no caller code under the lock).
    fn with<R>(&self, f: impl FnOnce(&mut stormguard_core::Budget) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow_mut().ok().map(|mut b| f(&mut b)))
    }

    fn read<R>(&self, f: impl FnOnce(&stormguard_core::Budget) -> R) -> Option<R> {
        self.inner
            .lock(|cell| cell.try_borrow().ok().map(|b| f(&b)))
    }

    /// The settings the budget was built with.
    #[must_use]
    pub fn settings(&self) -> BudgetSettings {
        self.read(|b| *b.settings())
            .unwrap_or(BudgetSettings::defaults("busy"))
    }

    /// The budget's name (a copy, read under the lock).
    #[must_use]
    pub fn name(&self) -> Name {
        *self.settings().name()
    }

    /// Whole retries the budget would fund now (embassy's clock).
    #[must_use]
    pub fn available(&self) -> u32 {
        let now = EmbassyClock::new().now();
        self.read(|b| b.available(now)).unwrap_or(0)
    }

    /// How much of the budget is spent now: 0 when full, 1 when empty.
    #[must_use]
    pub fn utilization(&self) -> Ratio {
        let now = EmbassyClock::new().now();
        self.read(|b| b.utilization(now)).unwrap_or(Ratio::ONE)
    }

    /// Name, contents and utilization now, for a health report; `None` only on a re-entrant
    /// call, which this crate never makes.
    #[must_use]
    pub fn snapshot(&self) -> Option<BudgetSnapshot> {
        let now = EmbassyClock::new().now();
        self.read(|b| b.snapshot(now))
    }

    /// A handle that implements the core's [`Funding`] trait by locking this budget for each
    /// transition.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::{BudgetSettings, call::Funding, Instant};
    /// use stormguard_embassy::Budget;
    ///
    /// let budget: Budget<NoopRawMutex> = Budget::new(BudgetSettings::defaults("radio"));
    /// let mut handle = budget.handle();
    /// handle.try_fund_retry(Instant::from_secs(1))?;
    /// # Ok::<(), stormguard_core::Refused>(())
    /// ```
    #[must_use]
    pub const fn handle(&self) -> BudgetRef<'_, M> {
        BudgetRef { budget: self }
    }
}

impl<M: RawMutex> core::fmt::Debug for Budget<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Budget")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// A [`Budget`] seen through the core's [`Funding`] trait: each method locks the budget for one
/// synchronous transition. Made by [`Budget::handle`].
#[derive(Clone, Copy, Debug)]
pub struct BudgetRef<'a, M: RawMutex> {
    budget: &'a Budget<M>,
}

impl<'a, M: RawMutex> BudgetRef<'a, M> {
    /// The budget this handle locks.
    #[must_use]
    pub const fn budget(&self) -> &'a Budget<M> {
        self.budget
    }
}

impl<M: RawMutex> Funding for BudgetRef<'_, M> {
    fn try_fund_retry(&mut self, now: Instant) -> Result<(), Refused> {
        self.budget
            .with(|b| b.try_withdraw(now))
            .unwrap_or(Err(Refused {
                reason: RefusalReason::BudgetExhausted,
                retry_after: Duration::ZERO,
            }))
    }

    fn refund_retry(&mut self, now: Instant) {
        self.budget.with(|b| b.refund_retry(now));
    }

    fn on_outcome(&mut self, now: Instant, outcome: Outcome) {
        self.budget.with(|b| b.on_outcome(now, outcome));
    }

    // `check_shed` keeps the trait's default: a firmware call carries no criticality label
    // (this adapter has no way to set one), so it is never sheddable, and the budget's shed
    // check would be flash spent on a rule no call here can reach.
}
