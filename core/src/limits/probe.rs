//! The probe table both keyed tables are built on: open addressing over slots the caller owns
//! (a const-generic array in the core's keyed limiter, an array of lock-free cells in the std
//! adapter's keyed policy), linear probing from a key's home slot, and backward-shift deletion,
//! so that a removal leaves no tombstone to lengthen later probes.
//!
//! Only the arithmetic and the removal live here: what a slot holds, how it is read and written
//! and what is locked while it is, stay with each table.
//!
//! ```
//! use stormguard_core::limits::probe::{self, ProbeSlots};
//!
//! /// Keys stored by their 32-bit tag, 0 for an empty slot.
//! struct Tags([u32; 4]);
//!
//! impl ProbeSlots for Tags {
//!     fn slot_count(&self) -> usize {
//!         self.0.len()
//!     }
//!     fn home_of(&self, i: usize) -> Option<usize> {
//!         let tag = *self.0.get(i)?;
//!         (tag != 0).then(|| probe::home(tag, self.0.len()))
//!     }
//!     fn shift(&mut self, from: usize, to: usize) {
//!         self.0[to] = core::mem::take(&mut self.0[from]);
//!     }
//! }
//!
//! // Two keys with home slot 1: the second probed on to slot 2.
//! let tag = 0x4000_0000; // home 1 of 4
//! assert_eq!(probe::home(tag, 4), 1);
//! let mut table = Tags([0, tag, tag + 1, 0]);
//! // Removing the first empties slot 1; the second moves back to its home.
//! table.0[1] = 0;
//! probe::close_gap(&mut table, 1);
//! assert_eq!(table.0, [0, tag + 1, 0, 0]);
//! ```

/// The home slot of a key whose hash's high 32 bits are `tag`, in a table of `n` slots: the
/// tag scaled to `[0, n)` (for a power of two, the tag's top bits).
#[inline]
#[must_use]
pub const fn home(tag: u32, n: usize) -> usize {
    (tag as u64).wrapping_mul(n as u64).wrapping_shr(32) as usize
}

/// The slot after `i` in a table of `n` slots, wrapping to the first.
#[inline]
#[must_use]
pub const fn next_slot(i: usize, n: usize) -> usize {
    let j = i.wrapping_add(1);
    if j >= n {
        0
    } else {
        j
    }
}

/// `true` when `i` lies in the cyclic range `(from, to]`.
#[inline]
#[must_use]
pub const fn cyclic_between(from: usize, i: usize, to: usize) -> bool {
    if from <= to {
        from < i && i <= to
    } else {
        from < i || i <= to
    }
}

/// A probe table's slots, as the removal sees them.
pub trait ProbeSlots {
    /// Slots in the table.
    fn slot_count(&self) -> usize;
    /// The home slot of the key in slot `i`; `None` when the slot is empty.
    fn home_of(&self, i: usize) -> Option<usize>;
    /// Moves the key in slot `from` into the empty slot `to`, leaving `from` empty.
    fn shift(&mut self, from: usize, to: usize);
}

/// After slot `hole` was emptied, shifts back the keys after it that may move closer to home,
/// so that no probe sequence is broken: a key moves into the hole unless its home lies in the
/// cyclic range `(hole, its slot]`, and its old slot becomes the hole; an empty slot ends the
/// run. Reads at most every slot once.
pub fn close_gap<S: ProbeSlots + ?Sized>(slots: &mut S, mut hole: usize) {
    let n = slots.slot_count();
    let mut j = hole;
    for _ in 0..n {
        j = next_slot(j, n);
        let Some(home) = slots.home_of(j) else {
            return;
        };
        if !cyclic_between(hole, home, j) {
            slots.shift(j, hole);
            hole = j;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{cyclic_between, home};

    #[test]
    fn home_slots_lie_inside_the_table() {
        for n in [1usize, 2, 3, 7, 16, 10_000] {
            for tag in [1u32, 2, 0x8000_0000, u32::MAX] {
                assert!(home(tag, n) < n);
            }
        }
        assert!(cyclic_between(2, 3, 5));
        assert!(!cyclic_between(2, 2, 5));
        assert!(cyclic_between(5, 0, 1));
        assert!(cyclic_between(5, 6, 1));
        assert!(!cyclic_between(5, 3, 1));
    }
}
