//! The local limits on calls: the retry budget, the rate limiters and the bulkhead.

pub(crate) mod budget;
pub(crate) mod bulkhead;
pub(crate) mod ratelimit;
