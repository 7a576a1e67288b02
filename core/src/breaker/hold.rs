//! How a breaker holds its settings: its own copy, a `static`, or a constant by type.

use core::fmt;
use core::marker::PhantomData;

use super::settings::BreakerSettings;
use crate::name::Name;

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::breaker::settings::BreakerSettings {}
    impl Sealed for &'static crate::breaker::settings::BreakerSettings {}
    impl<T: super::ConstSettings> Sealed for super::Fixed<T> {}
}

/// Where a breaker keeps its settings: by value ([`BreakerSettings`], the default), by
/// reference to a `static` (`&'static BreakerSettings`, which saves their size in RAM on a
/// microcontroller), or nowhere, as a constant named by a type ([`Fixed`], which saves their
/// flash too). Sealed: those are the three.
pub trait SettingsRef: sealed::Sealed {
    /// The settings.
    fn get(&self) -> &BreakerSettings;
}

impl SettingsRef for BreakerSettings {
    #[inline]
    fn get(&self) -> &BreakerSettings {
        self
    }
}

impl SettingsRef for &'static BreakerSettings {
    #[inline]
    fn get(&self) -> &BreakerSettings {
        self
    }
}

/// Breaker settings known at compile time, named by a type: the breaker
/// `Breaker<Fixed<T>>` reads them from a constant instead of from memory, so the compiler can
/// drop what they switch off and fold what they fix. On a microcontroller that saves flash
/// (some 1.2 KB for the default rule set on thumbv7em) and the settings' RAM.
///
/// Invalid settings built in the constant fail the build, not the program:
///
/// ```
/// use stormguard_core::{Breaker, BreakerSettings, breaker::ConstSettings, breaker::Fixed, Instant};
///
/// struct Radio;
/// impl ConstSettings for Radio {
///     const SETTINGS: BreakerSettings =
///         match BreakerSettings::builder("radio").consecutive_failures(3).build() {
///             Ok(s) => s,
///             Err(_) => panic!("invalid breaker settings"),
///         };
/// }
///
/// let mut breaker: Breaker<Fixed<Radio>> = Breaker::fixed();
/// assert_eq!(breaker.name().as_str(), "radio");
/// assert!(breaker.try_acquire(Instant::from_secs(1)).is_ok());
/// ```
pub trait ConstSettings {
    /// The settings.
    const SETTINGS: BreakerSettings;
}

/// Where a breaker whose settings are a [`ConstSettings`] type keeps them: nowhere, it is a
/// name for the constant (zero-sized).
pub struct Fixed<T>(PhantomData<T>);

impl<T> Fixed<T> {
    /// The settings of `T`.
    #[must_use]
    pub const fn new() -> Self {
        Fixed(PhantomData)
    }
}

// By hand: derived, they would ask the same of `T`, a marker that needs none of them.
impl<T> Clone for Fixed<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Fixed<T> {}

impl<T> Default for Fixed<T> {
    fn default() -> Self {
        Fixed::new()
    }
}

impl<T> fmt::Debug for Fixed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Fixed")
    }
}

#[cfg(feature = "defmt")]
impl<T> defmt::Format for Fixed<T> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "Fixed");
    }
}

impl<T: ConstSettings> SettingsRef for Fixed<T> {
    #[inline]
    fn get(&self) -> &BreakerSettings {
        &const { T::SETTINGS }
    }
}

/// A seed derived from the name, so breakers with different names jitter differently even when
/// nobody sets a seed (FNV-1a). Fleets should still seed each process differently.
pub(super) const fn seed_from(name: &Name) -> u64 {
    let mut bytes = name.as_bytes();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    while let [first, rest @ ..] = bytes {
        h ^= *first as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        bytes = rest;
    }
    h
}
