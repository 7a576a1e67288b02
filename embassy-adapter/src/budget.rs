//! A retry budget that firmware can keep in a `static` and share between tasks, over an
//! `embassy_sync` blocking raw mutex around the core's `&mut` budget.

use embassy_sync::blocking_mutex::raw::RawMutex;
use stormguard_core::part::Locked;
use stormguard_core::{limits::BudgetSnapshot, BudgetSettings, Name, Ratio};

use crate::shared::Shared;
use crate::EmbassyClock;

/// A retry budget shared by several tasks (or several policies, deliberately): the core's
/// [`Budget`](stormguard_core::Budget) in a [`Shared`] (see there for the choice of `M`),
/// locked only for its synchronous transitions.
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
    shared: Shared<M, stormguard_core::Budget>,
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
            shared: Shared::from_core(budget),
        }
    }

    /// Reads the core budget under the lock; `None` only on a call from inside the lock, which
    /// this crate never makes (it runs no caller code under the lock).
    fn read<R>(&self, f: impl FnOnce(&stormguard_core::Budget) -> R) -> Option<R> {
        self.shared.read(f)
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

    /// The budget as the core's call driver sees it: the core's [`Locked`] view, which takes
    /// the lock for each transition.
    ///
    /// ```
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    /// use stormguard_core::{BudgetSettings, part::Funding, Instant};
    /// use stormguard_embassy::Budget;
    ///
    /// let budget: Budget<NoopRawMutex> = Budget::new(BudgetSettings::defaults("radio"));
    /// budget.part().try_fund_retry(Instant::from_secs(1))?;
    /// # Ok::<(), stormguard_core::Refused>(())
    /// ```
    #[must_use]
    pub const fn part(&self) -> Locked<'_, Shared<M, stormguard_core::Budget>> {
        self.shared.part()
    }
}

impl<M: RawMutex> core::fmt::Debug for Budget<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Budget")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}
