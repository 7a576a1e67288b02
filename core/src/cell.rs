//! How a part keeps its state: [`Local`] (in `Cell`s, for one thread or behind a lock the
//! caller holds) or [`Atomic`] (lock-free atomics, shared by every thread through `&self`). A
//! part generic over its [`Storage`] is one type with one set of methods whichever it is, and
//! both forms run the same rule: load, pure step, compare-exchange (which always succeeds on a
//! `Cell`), so they decide identically for any sequential input.
//!
//! ```
//! use stormguard_core::cell::{Atomic, Local};
//! use stormguard_core::limits::{Limiter, RateLimitSettings};
//! use stormguard_core::Instant;
//!
//! let settings = RateLimitSettings::per_second("api", 1)?;
//! let mine: Limiter<RateLimitSettings, Local> = Limiter::new(settings);
//! static SHARED: Limiter<RateLimitSettings, Atomic> = Limiter::new(
//!     match RateLimitSettings::per_second("api", 1) { Ok(s) => s, Err(_) => panic!() },
//! );
//! let now = Instant::from_secs(1);
//! assert_eq!(mine.check(now).is_ok(), SHARED.check(now).is_ok());
//! assert_eq!(mine.check(now).is_ok(), SHARED.check(now).is_ok());
//! # Ok::<(), stormguard_core::SettingsError>(())
//! ```
//!
//! Also, within the crate, the bit layouts of the words the parts keep, and instants packed
//! into fewer bits.
//!
//! On a microcontroller without 64-bit compare-and-swap (thumbv6m, thumbv7m, riscv32imc),
//! portable-atomic's fallback for [`Atomic`] is a spinlock an interrupt can deadlock: keep a
//! [`Local`] part behind the firmware's own mutex there (as the embassy adapter does).

use core::cell::Cell;

use crate::loom::{AtomicU64, Ordering};
use crate::time::Instant;

pub(crate) mod sealed {
    /// What a [`Storage`](super::Storage) keeps a state of `T` bits in.
    pub trait Storage {
        /// The cell holding a state of `T`.
        type Cell<T: Bits>: Slot<T> + core::fmt::Debug;
        /// The cell holding one 64-bit word, with the word's read-modify-write operations.
        type Word: Word + core::fmt::Debug;
    }

    /// A state's width: `u64` or `u128`.
    pub trait Bits: Copy + Eq + core::fmt::Debug {
        /// Its atomic cell.
        type Atomic: Slot<Self> + Send + Sync + core::fmt::Debug;
        /// The zeroed state.
        const ZERO: Self;
    }

    /// A cell holding a state of `T`: load and compare-exchange.
    pub trait Slot<T: Bits> {
        /// A cell holding zero, for `const` construction.
        #[cfg(not(loom))]
        const ZERO: Self;
        /// A cell holding zero (loom's atomics cannot be built in a `const`).
        #[cfg(loom)]
        fn zero() -> Self;
        /// The current state.
        fn load(&self) -> T;
        /// Replaces `current` with `new` if the cell still holds `current`.
        fn cas(&self, current: T, new: T) -> bool;

        /// Load / pure step / compare-exchange until it sticks: what `step` decided on the state
        /// it was installed over.
        #[inline]
        fn update<R>(&self, mut step: impl FnMut(T) -> (R, T)) -> R {
            loop {
                let old = self.load();
                let (decided, new) = step(old);
                if old == new || self.cas(old, new) {
                    return decided;
                }
            }
        }
    }

    /// A 64-bit storage cell: load, compare-exchange, swap.
    ///
    /// The read-modify-write operations are inlined on 64-bit targets, where the breaker's call
    /// path is measured in nanoseconds, and left to the optimiser elsewhere: on a microcontroller
    /// every inlined copy costs flash (about 200 B for the full breaker).
    pub trait Word {
        /// A word holding zero, for `const` construction.
        #[cfg(not(loom))]
        const ZERO: Self;
        /// A word holding zero (loom's atomics cannot be built in a `const`).
        #[cfg(loom)]
        fn zero() -> Self;
        /// The current value.
        fn get(&self) -> u64;
        /// Replaces `current` with `new` if the word still holds `current`.
        fn cas(&self, current: u64, new: u64) -> bool;
        /// Replaces the value, returning the old one.
        fn swap(&self, new: u64) -> u64;
        /// Keeps the larger, returning the old value.
        fn fetch_max(&self, v: u64) -> u64;

        /// Load / pure step / compare-exchange until it sticks. Returns (old, new).
        #[cfg_attr(target_pointer_width = "64", inline)]
        fn update(&self, mut f: impl FnMut(u64) -> u64) -> (u64, u64) {
            loop {
                let old = self.get();
                let new = f(old);
                if old == new || self.cas(old, new) {
                    return (old, new);
                }
            }
        }
    }
}

pub(crate) use self::sealed::Word;
use self::sealed::{Bits, Slot};

/// How a part keeps its state: [`Local`] or [`Atomic`] (see the [module docs](self)). Sealed:
/// those are the two.
pub trait Storage: sealed::Storage + core::fmt::Debug {}

/// State in `Cell`s: the part is `Send` but not `Sync`, for one thread (or behind a lock the
/// caller holds), and cloning it copies its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Local {}

/// State in atomics, lock-free: the part is `Sync`, shared through `&self` by every thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Atomic {}

impl Storage for Local {}
impl Storage for Atomic {}

impl sealed::Storage for Local {
    type Cell<T: Bits> = Cell<T>;
    type Word = Cell<u64>;
}

impl sealed::Storage for Atomic {
    type Cell<T: Bits> = T::Atomic;
    type Word = AtomicU64;
}

impl Bits for u64 {
    type Atomic = AtomicU64;
    const ZERO: u64 = 0;
}

impl Bits for u128 {
    // Not loom's: loom has no 128-bit atomic, so the 128-bit states are not modelled.
    type Atomic = portable_atomic::AtomicU128;
    const ZERO: u128 = 0;
}

impl<T: Bits> Slot<T> for Cell<T> {
    #[cfg(not(loom))]
    const ZERO: Self = Cell::new(T::ZERO);
    #[cfg(loom)]
    fn zero() -> Self {
        Cell::new(T::ZERO)
    }
    #[inline]
    fn load(&self) -> T {
        self.get()
    }
    #[inline]
    fn cas(&self, current: T, new: T) -> bool {
        if self.get() == current {
            self.set(new);
            true
        } else {
            false
        }
    }
}

impl Slot<u64> for AtomicU64 {
    #[cfg(not(loom))]
    const ZERO: Self = AtomicU64::new(0);
    #[cfg(loom)]
    fn zero() -> Self {
        AtomicU64::new(0)
    }
    #[inline]
    fn load(&self) -> u64 {
        AtomicU64::load(self, Ordering::Acquire)
    }
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn cas(&self, current: u64, new: u64) -> bool {
        self.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

impl Slot<u128> for portable_atomic::AtomicU128 {
    #[cfg(not(loom))]
    const ZERO: Self = portable_atomic::AtomicU128::new(0);
    #[cfg(loom)]
    fn zero() -> Self {
        portable_atomic::AtomicU128::new(0)
    }
    #[inline]
    fn load(&self) -> u128 {
        portable_atomic::AtomicU128::load(self, portable_atomic::Ordering::Acquire)
    }
    #[inline]
    fn cas(&self, current: u128, new: u128) -> bool {
        self.compare_exchange(
            current,
            new,
            portable_atomic::Ordering::AcqRel,
            portable_atomic::Ordering::Acquire,
        )
        .is_ok()
    }
}

/// A zeroed cell of a state of `T` bits.
#[cfg(not(loom))]
macro_rules! slot {
    ($c:ty) => {
        <$c as $crate::cell::sealed::Slot<_>>::ZERO
    };
}
#[cfg(loom)]
macro_rules! slot {
    ($c:ty) => {
        <$c as $crate::cell::sealed::Slot<_>>::zero()
    };
}
pub(crate) use slot;

impl Word for Cell<u64> {
    #[cfg(not(loom))]
    const ZERO: Self = Cell::new(0);
    #[cfg(loom)]
    fn zero() -> Self {
        Cell::new(0)
    }
    #[inline]
    fn get(&self) -> u64 {
        Cell::get(self)
    }
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn cas(&self, current: u64, new: u64) -> bool {
        if Cell::get(self) == current {
            self.set(new);
            true
        } else {
            false
        }
    }
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn swap(&self, new: u64) -> u64 {
        self.replace(new)
    }
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn fetch_max(&self, v: u64) -> u64 {
        let old = Cell::get(self);
        self.set(old.max(v));
        old
    }
}

impl Word for AtomicU64 {
    #[cfg(not(loom))]
    const ZERO: Self = AtomicU64::new(0);
    #[cfg(loom)]
    fn zero() -> Self {
        AtomicU64::new(0)
    }
    #[inline]
    fn get(&self) -> u64 {
        self.load(Ordering::Acquire)
    }
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn cas(&self, current: u64, new: u64) -> bool {
        self.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn swap(&self, new: u64) -> u64 {
        AtomicU64::swap(self, new, Ordering::AcqRel)
    }
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn fetch_max(&self, v: u64) -> u64 {
        AtomicU64::fetch_max(self, v, Ordering::AcqRel)
    }
}

/// `N` zeroed words.
#[cfg(not(loom))]
macro_rules! words {
    ($w:ty; $n:expr) => {
        [const { <$w as $crate::cell::Word>::ZERO }; $n]
    };
}
#[cfg(loom)]
macro_rules! words {
    ($w:ty; $n:expr) => {
        core::array::from_fn(|_| <$w as $crate::cell::Word>::zero())
    };
}
pub(crate) use words;

/// A zeroed word.
#[cfg(not(loom))]
macro_rules! word {
    ($w:ty) => {
        <$w as $crate::cell::Word>::ZERO
    };
}
#[cfg(loom)]
macro_rules! word {
    ($w:ty) => {
        <$w as $crate::cell::Word>::zero()
    };
}
pub(crate) use word;

/// A function that is `const` except when model-checking with loom.
macro_rules! const_unless_loom {
    ($(#[$m:meta])* $vis:vis fn $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$m])* $vis const fn $($rest)*
        #[cfg(loom)]
        $(#[$m])* $vis fn $($rest)*
    };
}
pub(crate) use const_unless_loom;

/// Takes `bits` bits of `word` starting at `at`.
pub(crate) const fn field(word: u64, at: u32, bits: u32) -> u64 {
    let shifted = match word.checked_shr(at) {
        Some(v) => v,
        None => 0,
    };
    shifted & mask(bits)
}

/// The lowest `bits` bits set.
pub(crate) const fn mask(bits: u32) -> u64 {
    match 1u64.checked_shl(bits) {
        Some(v) => v.wrapping_sub(1),
        None => u64::MAX,
    }
}

/// Places `value` (truncated to `bits`) at `at`.
pub(crate) const fn put(value: u64, at: u32, bits: u32) -> u64 {
    match (value & mask(bits)).checked_shl(at) {
        Some(v) => v,
        None => 0,
    }
}

/// An instant packed into a field of `bits` bits (56 to 64): in exact nanoseconds below
/// 2^(bits-1) ns (over a year for 56 bits), and past that in whole microseconds, tagged by the
/// field's top bit (2^64 ns is 2^54 us, so every [`Instant`] fits). The packing keeps the order
/// of the instants, and the field's largest value stands for none of them (a caller's
/// "never" or "not yet"). `round_up` chooses, in the microsecond range, the first microsecond
/// at or after the instant (a deadline never served short) rather than the one it falls in.
pub(crate) const fn pack_instant(at: Instant, bits: u32, round_up: bool) -> u64 {
    let micros_flag = micros_flag(bits);
    let nanos = at.as_nanos();
    if nanos < micros_flag {
        return nanos;
    }
    let since = at.since_epoch();
    let micros = if round_up {
        since.as_micros_ceil()
    } else {
        since.as_micros()
    };
    micros_flag | micros
}

/// The instant a [`pack_instant`] field of `bits` bits stands for.
// A saturating 64-bit multiply: one copy on a microcontroller; inlined where it is cheap.
#[cfg_attr(target_pointer_width = "64", inline)]
#[cfg_attr(not(target_pointer_width = "64"), inline(never))]
pub(crate) const fn unpack_instant(v: u64, bits: u32) -> Instant {
    let micros_flag = micros_flag(bits);
    if v & micros_flag == 0 {
        Instant::from_nanos(v)
    } else {
        Instant::from_micros(v & !micros_flag)
    }
}

/// The top bit of a `bits`-bit field.
const fn micros_flag(bits: u32) -> u64 {
    match 1u64.checked_shl(bits.saturating_sub(1)) {
        Some(v) => v,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let w = put(5, 0, 3) | put(0xAB, 3, 8) | put(0xFFFF_FFFF, 32, 32);
        assert_eq!(field(w, 0, 3), 5);
        assert_eq!(field(w, 3, 8), 0xAB);
        assert_eq!(field(w, 32, 32), 0xFFFF_FFFF);
    }

    #[test]
    fn packed_instants_are_exact_then_whole_microseconds_in_order() {
        use crate::time::Duration;
        for bits in [56, 63, 64] {
            let flag = 1u64 << (bits - 1);
            for nanos in [0, 1, 999, 1_000_000_123, flag - 1] {
                let at = Instant::from_nanos(nanos);
                for up in [false, true] {
                    assert_eq!(unpack_instant(pack_instant(at, bits, up), bits), at);
                }
            }
            if bits < 64 {
                // In the microsecond range: the microsecond an instant falls in, or the first
                // at or after it.
                let late = Instant::from_nanos(flag + 1_123);
                let micros = late.as_nanos() / 1000;
                let down = unpack_instant(pack_instant(late, bits, false), bits);
                let up = unpack_instant(pack_instant(late, bits, true), bits);
                assert_eq!(down.as_nanos(), micros * 1000);
                assert_eq!(up.as_nanos(), (micros + 1) * 1000);
            }
            // Order is kept, across the change of unit too, and the field's largest value is
            // no instant's.
            let most = mask(bits);
            let instants = [0, flag - 1, flag, flag + 1_000, u64::MAX];
            for pair in instants.windows(2) {
                let (a, b) = (Instant::from_nanos(pair[0]), Instant::from_nanos(pair[1]));
                for up in [false, true] {
                    assert!(pack_instant(a, bits, up) <= pack_instant(b, bits, up));
                    assert!(pack_instant(b, bits, up) < most);
                }
            }
            let end = Instant::MAX.saturating_add(Duration::MAX);
            assert_eq!(
                unpack_instant(pack_instant(end, bits, true), bits),
                Instant::MAX
            );
        }
    }

    #[test]
    fn the_single_threaded_cell_behaves_like_an_uncontended_atomic() {
        let c = Cell::new(1u64);
        let a = AtomicU64::new(1);
        assert_eq!(Word::update(&c, |v| v + 1), Word::update(&a, |v| v + 1));
        assert!(!Word::cas(&c, 1, 5));
        assert!(!Word::cas(&a, 1, 5));
        assert_eq!(Word::swap(&c, 9), Word::swap(&a, 9));
        assert_eq!(Word::get(&c), Word::get(&a));
    }
}
