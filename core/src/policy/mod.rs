//! What is built on the breaker and the call: the policy engine, success caching, the
//! subscription schedule and a policy's description of itself.

pub(crate) mod cache;
pub(crate) mod engine;
pub(crate) mod explain;
pub(crate) mod subscription;
