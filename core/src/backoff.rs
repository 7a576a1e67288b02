//! Backoff between attempts (to be written).
/// Jitter.
pub enum Jitter {}
/// Backoff.
pub struct Backoff;
