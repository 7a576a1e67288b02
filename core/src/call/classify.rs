//! How an attempt's result counts: the caller's classification (DESIGN.md, "The breaker":
//! success, transient, throttled, permanent, cancelled), one trait for every adapter.

use crate::outcome::Outcome;
use crate::wire::quota::Published;

/// Decides how an attempt's result counts: the caller's classification of what happened.
/// Implemented by [`EveryErrorTransient`] (the adapters' default) and by every
/// `Fn(&Result<T, E>) -> Outcome`; an adapter adds presets that need its I/O types (the std
/// adapter's HTTP preset).
///
/// ```
/// use stormguard_core::{Classify, Outcome};
///
/// #[derive(Debug)]
/// enum I2cError { Nack, Busy, BadRegister }
///
/// // A NACK means the sensor is asleep or gone (counts against it); a bad register address is
/// // our bug (never retried); a busy bus is another driver's doing (retried, not counted).
/// let classify = |r: &Result<u16, I2cError>| match r {
///     Ok(_) => Outcome::Success,
///     Err(I2cError::Nack) => Outcome::Transient,
///     Err(I2cError::Busy) => Outcome::Throttled { retry_after: None },
///     Err(I2cError::BadRegister) => Outcome::Permanent,
/// };
/// assert_eq!(classify.classify(&Err(I2cError::BadRegister)), Outcome::Permanent);
/// ```
pub trait Classify<T, E> {
    /// How `result` counts.
    fn classify(&self, result: &Result<T, E>) -> Outcome;

    /// The quota the dependency published with `result` (an HTTP response's `RateLimit` or
    /// `X-RateLimit-*` headers, read by the std adapter's HTTP preset), for a policy that
    /// keeps published quotas ([`limits::Quota`](crate::limits::Quota)). By default nothing.
    fn published(&self, result: &Result<T, E>) -> Published {
        let _ = result;
        Published::NONE
    }
}

/// The default classification: `Ok` is a success, every `Err` a transient failure.
///
/// ```
/// use stormguard_core::{Classify, EveryErrorTransient, Outcome};
/// assert_eq!(EveryErrorTransient.classify(&Ok::<u8, ()>(1)), Outcome::Success);
/// assert_eq!(EveryErrorTransient.classify(&Err::<u8, ()>(())), Outcome::Transient);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EveryErrorTransient;

impl<T, E> Classify<T, E> for EveryErrorTransient {
    #[inline]
    fn classify(&self, result: &Result<T, E>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Transient,
        }
    }
}

impl<T, E, F: Fn(&Result<T, E>) -> Outcome> Classify<T, E> for F {
    #[inline]
    fn classify(&self, result: &Result<T, E>) -> Outcome {
        self(result)
    }
}
