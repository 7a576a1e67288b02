//! Retry budget (to be written).
/// Budget.
pub struct Budget;
/// Budget settings.
pub struct BudgetSettings;
