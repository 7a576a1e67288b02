//! What is built on the breaker and the call: the policy engine, success caching, the
//! subscription schedule, fault injection and a policy's description of itself.

pub(crate) mod cache;
pub(crate) mod chaos;
pub(crate) mod engine;
pub(crate) mod explain;
pub(crate) mod subscription;

pub use self::cache::{CacheRule, ZeroTtl};
pub use self::chaos::{Chaos, ChaosCounts, ChaosSettings, ChaosSettingsBuilder, Roll, SharedChaos};
pub use self::engine::{
    AddPolicyError, DecisionTrail, PolicyDecision, PolicyEngine, PolicyEvaluation, PolicyMatch,
    PolicyPredicate, PolicyRule, PolicyVerdict,
};
pub use self::explain::Explain;
pub use self::subscription::{SubscriptionRetry, SubscriptionStatus};
